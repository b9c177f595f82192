#!/usr/bin/env bash
# server_model.test.sh — `nextn serve` on the real model (the bundled tiny qwen35 MTP GGUF):
# 4 concurrent greedy clients with speculation on (-np 4 --spec-type mtp) must get exactly what
# `nextn run --temp 0` prints for the same prompts, also when a long prompt (read in -ub 16
# chunks beside the decoding slots) arrives while three others decode; /health answers; startup
# errors (no -m, a missing file) exit non-zero with a message; the start log gives the KV cache's
# memory per token of context; SIGTERM stops the server with
# exit status 0.
# Needs curl and jq (skipped without them). Bounded: every request has a timeout.
set -u
. "$(dirname "$0")/serve_lib.sh"
nx_test_setup server-model

command -v curl >/dev/null && command -v jq >/dev/null || skip "curl or jq not installed"
[ -f "$model" ] || { fail "$model missing"; echo "0 passed, 1 failed"; exit 1; }

# ---- startup errors ----
if "$NEXTN" serve --port 0 >/dev/null 2>"$work/e1"; then fail "serve without -m"; else
    grep -q -- "-m FILE is required" "$work/e1" && ok "serve without -m is refused" || fail "serve without -m: $(cat "$work/e1")"; fi
if timeout 20 "$NEXTN" serve -m /nonexistent.gguf --port 0 >/dev/null 2>"$work/e2"; then fail "missing model"; else
    grep -q "nonexistent.gguf" "$work/e2" && ok "a missing model file is refused" || fail "missing model: $(cat "$work/e2")"; fi

# ---- the real server ----
nx_serve_start "$work" 200 -m "$model" -np 4 -c 2048 -t 1 -ub 16 --spec-type mtp --draft-max 4 --draft-adaptive off
[ "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] && ok "/health" || fail "/health"
# the KV cache's memory per token of context, logged at start (default f16: this model's 1 KiB)
grep -q "KV cache: K f16, V f16; 1.0 KiB per token of context" "$work/serve.err" && ok "start log: KV per token" ||
    fail "no KV-per-token line: $(head -c 400 "$work/serve.err")"

prompts=("def fib(n):" "import os" "class Stack:" "# print the numbers 1 to 10")
for i in 0 1 2 3; do
    body=$(jq -cn --arg p "${prompts[$i]}" '{prompt: $p, max_tokens: 24, temperature: 0}')
    curl -s -m 60 "$url/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$work/resp$i.json" &
done
wait_ok=true
for j in $(jobs -p); do [ "$j" = "$pid" ] || wait "$j" || wait_ok=false; done
$wait_ok && ok "4 concurrent requests answered" || fail "a concurrent request failed"
drafted=0
for i in 0 1 2 3; do
    "$NEXTN" run -m "$model" -p "${prompts[$i]}" -n 24 --temp 0 -t 1 >"$work/run$i.txt" 2>/dev/null
    jq -j '.choices[0].text' "$work/resp$i.json" >"$work/serve$i.txt" 2>/dev/null
    if cmp -s "$work/run$i.txt" "$work/serve$i.txt"; then ok "client $i: serve == run"; else
        fail "client $i: serve != run"; echo "  run:   $(od -c "$work/run$i.txt" | head -2)"; echo "  serve: $(head -c 300 "$work/resp$i.json")"; fi
    drafted=$((drafted + $(jq '.timings.draft_n // 0' "$work/resp$i.json" 2>/dev/null || echo 0)))
done
[ "$drafted" -gt 0 ] && ok "speculation ran ($drafted drafted)" || fail "no draft tokens in the timings"
m=$(curl -s -m 10 "$url/metrics" | sed -n 's/^nextn_spec_drafted_total{drafter="mtp"} //p')
[ "$m" = "$drafted" ] && ok "/metrics drafted = sum of timings ($m)" || fail "/metrics drafted '$m' != $drafted"

# ---- a long prompt admitted while three clients decode ----
long=""
for i in $(seq 0 21); do long+="def g_$i(y):"$'\n'"    return y - $i"$'\n\n'; done
prompts2=("def fib(n):" "import os" "class Stack:" "$long")
for i in 0 1 2 3; do
    n=64; [ $i = 3 ] && n=16
    body=$(jq -cn --arg p "${prompts2[$i]}" --argjson n $n '{prompt: $p, max_tokens: $n, temperature: 0}')
    [ $i = 3 ] && sleep 0.02
    curl -s -m 60 "$url/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$work/long$i.json" &
done
for j in $(jobs -p); do [ "$j" = "$pid" ] || wait "$j"; done
for i in 0 1 2 3; do
    n=64; [ $i = 3 ] && n=16
    "$NEXTN" run -m "$model" -p "${prompts2[$i]}" -n $n --temp 0 -t 1 >"$work/lrun$i.txt" 2>/dev/null
    jq -j '.choices[0].text' "$work/long$i.json" >"$work/lserve$i.txt" 2>/dev/null
    if cmp -s "$work/lrun$i.txt" "$work/lserve$i.txt"; then ok "long-prompt round, client $i: serve == run"; else
        fail "long-prompt round, client $i: serve != run"; echo "  serve: $(head -c 300 "$work/long$i.json")"; fi
done
echo "  long prompt: $(jq -c '{prompt_tokens: .usage.prompt_tokens, prompt_n: .timings.prompt_n, prompt_ms: .timings.prompt_ms}' "$work/long3.json")"

kill -TERM $pid
rc=0
for _ in $(seq 1 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
wait $pid; rc=$?
trap - EXIT
[ $rc = 0 ] && ok "SIGTERM: exit 0" || fail "SIGTERM: exit $rc"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
