#!/usr/bin/env bash
# serve_throughput.sh — aggregate greedy generation tokens/s of `nextn serve` for 1, 2 and 4
# concurrent clients, with speculation off and on, in one run (issue: serve throughput figure).
#
# Usage: bench/serve_throughput.sh [MODEL.gguf] [--tokens N] [--requests R] [--threads T] [--spec-type mtp]
# Defaults: the bundled model, 128 tokens per request, 16 requests per client, -t 1, -np 4, mtp.
# Needs a built `build/nextn` (make) and a C compiler for the client (tests/load/nx_load.c).
# Prints one markdown table row per client count. Speed is measured, never asserted.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
model=$here/models/tiny-qwen35-mtp-q8_0.gguf
tokens=128 requests=16 threads=1 spec=mtp
while [ $# -gt 0 ]; do
    case $1 in
    --tokens) tokens=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --spec-type) spec=$2; shift 2 ;;
    -*) echo "serve_throughput: unknown flag $1" >&2; exit 2 ;;
    *) model=$1; shift ;;
    esac
done
[ -x "$NEXTN" ] || { echo "serve_throughput: build first (make): $NEXTN missing" >&2; exit 1; }
[ -f "$model" ] || { echo "serve_throughput: no model $model" >&2; exit 1; }
work=$(mktemp -d)
trap 'kill -9 ${pid:-0} 2>/dev/null; rm -rf "$work"' EXIT
${CC:-cc} -std=c11 -O2 -pthread "$here/tests/load/nx_load.c" -o "$work/nx_load" || exit 1

start() {   # start the server with extra args; sets pid and port
    : >"$work/serve.out"   # not only the background job's redirection: it may come after the loop's first read
    "$NEXTN" serve --port 0 -m "$model" -np 4 -t "$threads" "$@" >"$work/serve.out" 2>"$work/serve.err" &
    pid=$!
    port=""
    for _ in $(seq 1 100); do
        port=$(sed -n 's/^nextn serve: listening on http:\/\/[^:]*:\([0-9]*\).*$/\1/p' "$work/serve.out")
        [ -n "$port" ] && return 0
        sleep 0.1
    done
    echo "serve_throughput: server did not start" >&2
    cat "$work/serve.err" >&2
    exit 1
}

run() {   # clients -> aggregate tok/s
    "$work/nx_load" --bench --port "$port" --clients "$1" --requests "$requests" --max-tokens "$tokens" \
        --timeout 300 | sed -n 's/^tokens_per_s \([0-9.]*\).*/\1/p'
}

declare -A res
for mode in off on; do
    if [ "$mode" = on ]; then start --spec-type "$spec" --draft-max 4; else start; fi
    run 1 >/dev/null   # warm-up
    for c in 1 2 4; do res[$mode$c]=$(run "$c"); done
    kill -TERM "$pid"; wait "$pid" 2>/dev/null
done
echo "model: $(basename "$model"), $tokens tokens x $requests requests per client, -np 4 -t $threads, spec on = --spec-type $spec --draft-max 4"
echo "| clients | spec off tok/s | spec on tok/s | speedup |"
echo "|---|---|---|---|"
for c in 1 2 4; do
    a=${res[off$c]:-0} b=${res[on$c]:-0}
    echo "| $c | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", (a > 0 ? b / a : 0) }') |"
done
