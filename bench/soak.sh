#!/usr/bin/env bash
# soak.sh — soak test of `nextn serve` (issue #14; not part of make test).
#
# Usage: bench/soak.sh [MODEL.gguf]    (env: SOAK_MINUTES=30, SOAK_CLIENTS=4, SOAK_THREADS=1,
#        SOAK_WARMUP_S=30, NEXTN)
# Starts `nextn serve` on loopback (-np 4, mtp speculation, JSON access log) with the bundled
# model and runs SOAK_CLIENTS clients for SOAK_MINUTES minutes, each looping over a mix of:
# non-streaming completions with logprobs over a shared long prefix (prefix reuse), streaming
# chat, native /completion with n_probs, chat with top_logprobs, and streams the client drops
# after 0.2-0.8 s (injected disconnects). Every 10 s it samples the server's RSS, open fds and
# threads. At the end: latency percentiles per kind (of the requests that ran to the end),
# counts of unexpected statuses, 5xx lines in the access log, start/end RSS and fds, and SIGTERM
# must exit 0. Exit status 1 on any unexpected error or a dead server. Needs curl.
# Wall-clock figures are measured and printed, never asserted; they depend on the CPU tier.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
model=${1:-$here/models/tiny-qwen35-mtp-q8_0.gguf}
minutes=${SOAK_MINUTES:-30}
clients=${SOAK_CLIENTS:-4}
threads=${SOAK_THREADS:-1}
[ -x "$NEXTN" ] || { echo "soak: build first (make): $NEXTN missing" >&2; exit 1; }
[ -f "$model" ] || { echo "soak: no model $model" >&2; exit 1; }
command -v curl >/dev/null || { echo "soak: needs curl" >&2; exit 1; }
work=$(mktemp -d)
cleanup() {
    for w in ${workers:-}; do kill "$w" 2>/dev/null; done
    kill -9 "${pid:-0}" 2>/dev/null
}
trap cleanup EXIT

"$NEXTN" serve -m "$model" --port 0 -np 4 -c 4096 -t "$threads" --spec-type mtp --draft-max 4 \
    --log-format json --log-file "$work/access.log" >"$work/serve.out" 2>"$work/serve.err" &
pid=$!
url=""
for _ in $(seq 1 300); do
    url=$(sed -n 's/^nextn serve: listening on \(http:.*\)$/\1/p' "$work/serve.out" 2>/dev/null)
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
[ -n "$url" ] || { echo "soak: the server did not start"; cat "$work/serve.err"; exit 1; }
echo "soak: $url, $clients clients, $minutes min, model $(basename "$model"), -t $threads"

prefix="You are a careful assistant. Answer in one short paragraph. The following context is shared by every request so that the server can reuse its cached prefix: "
for i in $(seq 1 12); do prefix+="fact $i: the value of item $i is $((i * 37 % 101)); "; done

# one request: kind, then "code time curl_rc" appended to lat.txt as "kind code time rc"
one() {
    local kind=$1 r body
    case $kind in
    prefix)
        body="{\"prompt\":\"$prefix question $RANDOM: what is item $((RANDOM % 12 + 1))?\",\"max_tokens\":24,\"logprobs\":$((RANDOM % 6)),\"temperature\":0}"
        r=$(curl -s -o /dev/null -m 120 -w '%{http_code} %{time_total}' "$url/v1/completions" -H 'Content-Type: application/json' -d "$body") ;;
    chat_stream)
        body="{\"messages\":[{\"role\":\"user\",\"content\":\"Write a loop number $RANDOM\"}],\"max_tokens\":32,\"stream\":true}"
        r=$(curl -s -N -o /dev/null -m 120 -w '%{http_code} %{time_total}' "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$body") ;;
    native)
        body="{\"prompt\":\"def f$RANDOM(x):\",\"n_predict\":24,\"n_probs\":$((RANDOM % 4)),\"stream\":$([ $((RANDOM % 2)) = 0 ] && echo true || echo false)}"
        r=$(curl -s -N -o /dev/null -m 120 -w '%{http_code} %{time_total}' "$url/completion" -H 'Content-Type: application/json' -d "$body") ;;
    chat_logprobs)
        body="{\"messages\":[{\"role\":\"user\",\"content\":\"$prefix Summarise fact $((RANDOM % 12 + 1)).\"}],\"max_tokens\":16,\"logprobs\":true,\"top_logprobs\":$((RANDOM % 21))}"
        r=$(curl -s -o /dev/null -m 120 -w '%{http_code} %{time_total}' "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$body") ;;
    drop)   # injected: the client leaves mid-stream
        body="{\"prompt\":\"$prefix tell a long story $RANDOM\",\"max_tokens\":400,\"stream\":true,\"ignore_eos\":true,\"logprobs\":2}"
        r=$(curl -s -N -o /dev/null -m "0.$((RANDOM % 7 + 2))" -w '%{http_code} %{time_total}' "$url/v1/completions" -H 'Content-Type: application/json' -d "$body") ;;
    esac
    echo "$kind $r $?" >>"$work/lat.$BASHPID"
}

client() {
    local end=$1 kinds=(prefix chat_stream native chat_logprobs drop)
    while [ "$(date +%s)" -lt "$end" ]; do one "${kinds[$((RANDOM % 5))]}"; done
}

sample() { echo "$(date +%s) $(awk '/^VmRSS:/ {print $2}' /proc/$pid/status) $(ls /proc/$pid/fd | wc -l) $(awk '/^Threads:/ {print $2}' /proc/$pid/status)"; }

# warm-up (SOAK_WARMUP_S, default 30 s of the same mix) so the baseline holds the steady-state
# buffers: KV and recurrent-state checkpoints of every slot, the allocator's arenas
warm_end=$(( $(date +%s) + ${SOAK_WARMUP_S:-30} ))
workers=""
for _ in $(seq 1 "$clients"); do client "$warm_end" & workers+=" $!"; done
for w in $workers; do wait "$w"; done
sleep 2
rm -f "$work"/lat.*
echo "time rss_kb fds threads" >"$work/samples.txt"
sample >>"$work/samples.txt"
end=$(( $(date +%s) + minutes * 60 ))
workers=""
for _ in $(seq 1 "$clients"); do client "$end" & workers+=" $!"; done
while [ "$(date +%s)" -lt "$end" ]; do
    sleep 10
    kill -0 "$pid" 2>/dev/null || { echo "soak: the server died"; tail -5 "$work/serve.err"; exit 1; }
    sample >>"$work/samples.txt"
done
for w in $workers; do wait "$w"; done
workers=""
sleep 2   # dropped streams finish their cancellation
sample >>"$work/samples.txt"
cat "$work"/lat.* >"$work/lat.txt"

echo "== samples (time rss_kb fds threads), one a minute and the last:"
awk 'NR > 1 && (NR - 2) % 6 == 0' "$work/samples.txt"; tail -1 "$work/samples.txt"
read -r _ rss0 fd0 th0 < <(sed -n 2p "$work/samples.txt")
read -r _ rss1 fd1 th1 < <(tail -1 "$work/samples.txt")
max_rss=$(awk 'NR > 1 && $2 > m {m = $2} END {print m}' "$work/samples.txt")
echo "RSS start ${rss0} kB, end ${rss1} kB, max ${max_rss} kB; fds start $fd0, end $fd1; threads start $th0, end $th1"
echo "== latency of completed requests (s): kind n p50 p90 p99 max"
for k in prefix chat_stream native chat_logprobs; do
    awk -v k="$k" '$1 == k && $2 == 200 && $4 == 0 {print $3}' "$work/lat.txt" | sort -n |
        awk -v k="$k" '{v[NR] = $1} END {if (NR) printf "%s %d %.3f %.3f %.3f %.3f\n", k, NR, v[int(NR*.5)+(NR*.5>int(NR*.5))], v[int(NR*.9)+(NR*.9>int(NR*.9))], v[int(NR*.99)+(NR*.99>int(NR*.99))], v[NR]}'
done
drops=$(awk '$1 == "drop"' "$work/lat.txt" | wc -l)
unexpected=$(awk '$1 != "drop" && ($2 != 200 || $4 != 0)' "$work/lat.txt" | wc -l)
drop_bad=$(awk '$1 == "drop" && $2 != 200 && $2 != "000"' "$work/lat.txt" | wc -l)
errors5xx=$(grep -c '"status":5' "$work/access.log" || true)
echo "requests $(wc -l <"$work/lat.txt"), injected disconnects $drops, unexpected results $unexpected (+ $drop_bad among the dropped), 5xx access lines $errors5xx"
awk '$1 != "drop" && ($2 != 200 || $4 != 0)' "$work/lat.txt" | head -5
health=$(curl -s -m 10 "$url/health")
echo "health after: $health"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
echo "SIGTERM exit status $rc"
trap - EXIT
rm -rf "$work"
[ "$unexpected" = 0 ] && [ "$drop_bad" = 0 ] && [ "$errors5xx" = 0 ] && [ "$rc" = 0 ] && [[ "$health" == *'"ok"'* ]]
