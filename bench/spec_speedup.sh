#!/usr/bin/env bash
# spec_speedup.sh — MTP speculative speedup on a bandwidth-bound model (issue #11's table):
# greedy `nextn run` of N tokens from the same prompt with speculation off, fixed k = 1..K and the
# default (adaptive k with the guard), REPS alternating rounds (every mode once per round), median
# tok/s per mode, speedup vs off, and whether every run's text equals the speculation-off text.
#
# Usage: bench/spec_speedup.sh [MODEL.gguf] [--tokens N] [--reps R] [--threads T] [--kmax K] [--score | --server] [-- EXTRA...]
# --server: as the issue's table was measured: one `nextn serve -np 1` per mode, all started at once,
# greedy /completion requests (tok/s from the reply's timings.predicted_per_second), one unmeasured
# request per server first. A server keeps what it measured across requests (the verify cost table),
# as a deployment does; `nextn run` starts cold every run. Needs curl and jq.
# --score: also price every run's rounds with one verify-cost table (`nextn bench --verify-sweep` at
# the prompt's depth, once) and report the median modelled speedup per mode (bench/trace_cost.py):
# what each mode decided, apart from a shared machine's timing noise.
# Default model: build/inflated-24x45056-q8_0.gguf, made from the bundled model by
# `nextn gen-model --inflate` (24 trunk layers + MTP, n_ff 45056, Q8_0: same tokens, ~700 MB) when
# missing. EXTRA flags go to every run (e.g. --draft-vocab 0). NEXTN_CPU=avx2 forces the AVX2 kernels.
# Speed is measured, never asserted.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
model= tokens=128 reps=5 threads=2 kmax=3 score=0 server=0
extra=()
while [ $# -gt 0 ]; do
    case $1 in
    --tokens) tokens=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --kmax) kmax=$2; shift 2 ;;
    --score) score=1; shift ;;
    --server) server=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "spec_speedup: unknown flag $1" >&2; exit 2 ;;
    *) model=$1; shift ;;
    esac
done
[ -x "$NEXTN" ] || { echo "spec_speedup: build first (make): $NEXTN missing" >&2; exit 1; }
[ "$score" = 1 ] && [ "$server" = 1 ] && { echo "spec_speedup: --score reads nextn run's traces; not with --server" >&2; exit 2; }
if [ "$server" = 1 ]; then
    for t in curl jq; do command -v $t >/dev/null || { echo "spec_speedup: --server needs $t" >&2; exit 1; }; done
fi
if [ -z "$model" ]; then
    model=$here/build/inflated-24x45056-q8_0.gguf
    if [ ! -f "$model" ]; then
        echo "spec_speedup: making $model (once)" >&2
        "$NEXTN" gen-model --inflate --from "$here/models/tiny-qwen35-mtp-q8_0.gguf" --n-layer 24 --n-ff 45056 \
            --type q8_0 --out "$model.tmp" >&2 && mv "$model.tmp" "$model" || exit 1
    fi
fi
[ -f "$model" ] || { echo "spec_speedup: no model $model" >&2; exit 1; }
work=$(mktemp -d)
declare -A pids ports
trap '{ for p in "${pids[@]}"; do kill "$p"; done; wait; } 2>/dev/null; rm -rf "$work"' EXIT
prompt=$here/models/demo_prompt.py.txt

modes=(off)
for k in $(seq 1 "$kmax"); do modes+=("k$k"); done
modes+=(default)
flags_of() {
    case $1 in
    off) echo "--spec-type none" ;;
    default) echo "" ;;
    k*) echo "--spec-type mtp --draft-max ${1#k} --draft-adaptive off" ;;
    esac
}
echo "model: $model; $tokens greedy tokens, $threads threads, $reps alternating rounds; cpu: ${NEXTN_CPU:-auto} kernels; extra: ${extra[*]:-none}$([ "$server" = 1 ] && echo "; nextn serve per mode, /completion, 1 warm-up request each")"
run_cli() {   # run_cli MODE ROUND: one nextn run; appends tok/s to MODE.tps
    local m=$1 r=$2 tr=()
    [ "$score" = 1 ] && [ "$m" != off ] && tr=(--spec-trace "$work/$m.$r.trace")
    # shellcheck disable=SC2046
    "$NEXTN" run -m "$model" -f "$prompt" -n "$tokens" --temp 0 -t "$threads" $(flags_of "$m") "${extra[@]}" "${tr[@]}" \
        >"$work/$m.$r.out" 2>"$work/$m.$r.err" || { echo "spec_speedup: $m failed:"; cat "$work/$m.$r.err"; exit 1; }
    sed -n 's/.*generated [0-9]* tokens ([0-9]* decodes), \([0-9.]*\) tok\/s.*/\1/p' "$work/$m.$r.err" | head -1 >>"$work/$m.tps"
}
start_server() {   # start_server MODE: sets pids[MODE], ports[MODE]
    local m=$1 port=""
    : >"$work/$m.serve.out"
    # shellcheck disable=SC2046
    "$NEXTN" serve --port 0 -m "$model" -np 1 -t "$threads" $(flags_of "$m") "${extra[@]}" \
        >"$work/$m.serve.out" 2>"$work/$m.serve.err" &
    pids[$m]=$!
    for _ in $(seq 1 600); do
        port=$(sed -n 's/^nextn serve: listening on http:\/\/[^:]*:\([0-9]*\).*$/\1/p' "$work/$m.serve.out")
        [ -n "$port" ] && { ports[$m]=$port; return 0; }
        kill -0 "${pids[$m]}" 2>/dev/null || break
        sleep 0.1
    done
    echo "spec_speedup: server for $m did not start:" >&2; cat "$work/$m.serve.err" >&2; exit 1
}
run_server() {   # run_server MODE ROUND (0: the warm-up, not counted)
    local m=$1 r=$2
    curl -sS --max-time 600 -H 'Content-Type: application/json' --data-binary @"$work/req.json" \
        "http://127.0.0.1:${ports[$m]}/completion" >"$work/$m.$r.json" || { echo "spec_speedup: $m request failed" >&2; exit 1; }
    jq -j '.content' "$work/$m.$r.json" >"$work/$m.$r.out" || { echo "spec_speedup: $m: bad reply" >&2; cat "$work/$m.$r.json" >&2; exit 1; }
    # the CLI's log line, so the table below reads both the same way
    jq -r '"| acceptance \(.timings.draft_acceptance // 0 | . * 1000 | round / 1000),"' "$work/$m.$r.json" >"$work/$m.$r.err"
    [ "$r" -gt 0 ] && jq -r '.timings.predicted_per_second | . * 100 | round / 100' "$work/$m.$r.json" >>"$work/$m.tps"
    return 0
}
if [ "$server" = 1 ]; then
    jq -n --rawfile p "$prompt" --argjson n "$tokens" '{prompt: $p, n_predict: $n, temperature: 0, cache_prompt: true}' >"$work/req.json"
    for m in "${modes[@]}"; do start_server "$m"; run_server "$m" 0; done
fi
for r in $(seq 1 "$reps"); do
    for m in "${modes[@]}"; do
        if [ "$server" = 1 ]; then run_server "$m" "$r"; else run_cli "$m" "$r"; fi
    done
done
median() { sort -g "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
if [ "$score" = 1 ]; then
    # one cost table at the prompt's depth: rows 1..kmax+1 (relative column), and the runs' draft ms per step
    depth=$("$NEXTN" run -m "$model" -f "$prompt" -n 1 --temp 0 -t "$threads" --spec-type none 2>&1 >/dev/null |
            sed -n 's/.*prompt \([0-9]*\) tokens.*/\1/p' | head -1)
    sweep=$("$NEXTN" bench -m "$model" --verify-sweep -t "$threads" -d "${depth:-0}" 2>&1 | grep -E '^\| +[0-9]+ \|')
    costs=$(echo "$sweep" | awk -F'|' -v n=$((kmax > 8 ? kmax + 1 : 9)) '$2 + 0 <= n {gsub(/ /, "", $2); gsub(/ /, "", $4); printf "%s%s:%s", (c++ ? "," : ""), $2, $4}')
    ms1=$(echo "$sweep" | awk -F'|' '$2 + 0 == 1 {print $3 + 0}')
    dms=$(cat "$work"/k*.*.err "$work"/default.*.err 2>/dev/null |
          awk '/drafted [0-9]+/ {for (i = 1; i <= NF; i++) if ($i == "drafted") d = $(i + 1) + 0}
               /time: draft/ {for (i = 1; i <= NF; i++) if ($i == "draft") {t = $(i + 1) + 0; if (d > 0) print 1000 * t / d}}' | sort -g |
          awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : 0)}')
    cdr=$(awk -v a="$dms" -v b="$ms1" 'BEGIN {print (b > 0 ? a / b : 0.05)}')
    echo "scored with: verify costs $costs (x one row, $ms1 ms, depth $depth); draft step $dms ms = $cdr x one row"
    for m in "${modes[@]}"; do
        [ "$m" = off ] && continue
        python3 "$here/bench/trace_cost.py" --costs "$costs" --draft-cost "$cdr" "$work/$m".*.trace |
            sed -n 's/.*modelled \([0-9.]*\)x.*/\1/p' >"$work/$m.model"
    done
fi
off=$(median "$work/off.tps")
if [ "$score" = 1 ]; then
    printf '| mode | tok/s (median of %d) | all runs | speedup | acceptance | text | modelled (median) | modelled, all runs |\n' "$reps"
    printf '| --- | ---: | --- | ---: | ---: | --- | ---: | --- |\n'
else
    printf '| mode | tok/s (median of %d) | all runs | speedup | acceptance | text |\n| --- | ---: | --- | ---: | ---: | --- |\n' "$reps"
fi
for m in "${modes[@]}"; do
    med=$(median "$work/$m.tps")
    all=$(tr '\n' ' ' <"$work/$m.tps")
    same=identical
    for r in $(seq 1 "$reps"); do cmp -s "$work/off.1.out" "$work/$m.$r.out" || same=DIFFERENT; done
    acc=$(sed -n 's/.*| acceptance \([0-9.]*\),.*/\1/p' "$work/$m.1.err" | head -1)
    printf '| %s | %.2f | %s| %.3fx | %s | %s |' "$m" "$med" "$all" "$(awk -v a="$med" -v b="$off" 'BEGIN {print (b > 0 ? a / b : 0)}')" "${acc:--}" "$same"
    if [ "$score" = 1 ]; then
        if [ "$m" = off ]; then printf ' 1.00x | - |'
        else printf ' %sx | %s|' "$(median "$work/$m.model")" "$(tr '\n' ' ' <"$work/$m.model")"; fi
    fi
    printf '\n'
done
