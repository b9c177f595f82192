#!/usr/bin/env bash
# server_load.test.sh — load test of `nextn serve` on the real bundled model (tiny qwen35 MTP GGUF,
# -np 4 --spec-type mtp): N concurrent streaming clients for D seconds (tests/load/nx_load.c, built here
# with cc), a third of them disconnecting at random points (seeded). Checks: no malformed stream, no
# unexpected status, no stall; /health ok afterwards; no busy slot in /slots within 10 s; the server
# still answers a request; RSS after warm-up vs end is reported (and must not grow past 2x + 64 MiB; 512 MiB under ASan);
# SIGTERM exits 0. CI variant: 20 clients, 20 s. Full run: LOAD_CLIENTS=32 LOAD_SECONDS=120.
# Loopback only; every wait is bounded. Needs cc, curl and jq (skipped without them).
set -u
CLIENTS=${LOAD_CLIENTS:-20}
SECONDS_RUN=${LOAD_SECONDS:-20}
SEED=${LOAD_SEED:-7}
. "$(dirname "$0")/serve_lib.sh"
nx_test_setup server-load

command -v curl >/dev/null && command -v jq >/dev/null || skip "curl or jq not installed"
CC=${CC:-cc}
command -v "$CC" >/dev/null || skip "no C compiler ($CC)"
[ -f "$model" ] || { fail "$model missing"; echo "0 passed, 1 failed"; exit 1; }

if "$CC" -std=c11 -O2 -Wall -Wextra -pthread "$here/load/nx_load.c" -o "$work/nx_load" 2>"$work/cc.err"; then
    ok "load client builds"
else
    fail "load client does not build: $(head -5 "$work/cc.err")"
    echo "$passed passed, $failed failed"; exit 1
fi

nx_serve_start "$work" 300 -m "$model" -np 4 -c 2048 -t 1 --spec-type mtp --draft-max 4
port=${url##*:}
host=${url#http://}; host=${host%:*}
[ "$host" = 127.0.0.1 ] || { fail "server is not on loopback ($host)"; }

# warm-up: a few requests so the RSS baseline includes the steady-state buffers
"$work/nx_load" --port "$port" --clients 4 --duration 2 --seed 1 --max-tokens 32 --timeout 60 >"$work/warm.txt" 2>&1 \
    && ok "warm-up" || fail "warm-up: $(tr '\n' ' ' <"$work/warm.txt")"
rss0=$(awk '/^VmRSS:/ {print $2}' /proc/$pid/status)

# the load run; the client's own bounds: deadline + max_tokens per open request, 120 s receive timeout
timeout $((SECONDS_RUN + 300)) "$work/nx_load" --port "$port" --clients "$CLIENTS" --duration "$SECONDS_RUN" \
    --seed "$SEED" --max-tokens 48 --pid "$pid" --timeout 120 >"$work/load.txt" 2>&1
lrc=$?
sed 's/^/  /' "$work/load.txt"
get() { sed -n "s/^$1 //p" "$work/load.txt"; }
[ $lrc = 0 ] && ok "load run: no malformed stream, bad status, stall or connection error" || fail "load run (rc $lrc)"
[ "$(get malformed)" = 0 ] && ok "all completed streams well-formed ($(get completed))" || fail "malformed streams: $(get malformed)"
[ "${CLIENTS}" -lt 3 ] || { [ "$(get disconnects || echo 0)" -gt 0 ] 2>/dev/null && ok "mid-stream disconnects happened ($(get disconnects))" || fail "no disconnects"; }
kill -0 $pid 2>/dev/null && ok "server alive after the load" || fail "server died under load: $(tail -5 "$work/serve.err")"

[ "$(curl -s -m 10 "$url/health" | jq -r .status 2>/dev/null)" = ok ] && ok "/health ok" || fail "/health"
busy=-1
for _ in $(seq 1 50); do
    busy=$(curl -s -m 5 "$url/slots" | jq '[.[] | select(.is_processing)] | length' 2>/dev/null || echo -1)
    [ "$busy" = 0 ] && break
    sleep 0.2
done
[ "$busy" = 0 ] && ok "no stuck slot" || fail "stuck slots: $busy"
curl -s -m 10 "$url/slots" | jq -c '[.[] | {id, is_processing, n_requests}]' 2>/dev/null | sed 's/^/  slots /'
txt=$(curl -s -m 60 "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"def fib(n):","max_tokens":8,"temperature":0}' | jq -r '.choices[0].text' 2>/dev/null)
[ -n "$txt" ] && [ "$txt" != null ] && ok "server answers after the load" || fail "no answer after the load"

rss1=$(awk '/^VmRSS:/ {print $2}' /proc/$pid/status)
echo "  rss_kb start(after warm-up) ${rss0:-?} end ${rss1:-?} peak $(get rss_kb_peak)"
# ASan's free-quarantine (256 MiB by default) legitimately grows RSS, so the bound is looser there
slack=65536
grep -qa __asan_init "$NEXTN" 2>/dev/null && slack=$((512 * 1024))
if [ -n "${rss0:-}" ] && [ -n "${rss1:-}" ] && [ "$rss1" -le $((rss0 * 2 + slack)) ]; then
    ok "RSS bounded (${rss0} -> ${rss1} kB)"
else fail "RSS grew: ${rss0:-?} -> ${rss1:-?} kB"; fi

kill -TERM $pid
for _ in $(seq 1 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
wait $pid; rc=$?
trap - EXIT
[ $rc = 0 ] && ok "SIGTERM: exit 0" || fail "SIGTERM: exit $rc"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
