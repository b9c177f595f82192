#!/usr/bin/env bash
# server_log.test.sh — `nextn serve` logging (core/log.h, server.h): with --log-format json
# --log-file F every request leaves one JSON access line in F (method, path, status, bytes,
# tokens, drafts, ms) and a fatal signal leaves its line there before the process dies of it;
# the default text format writes key=value access lines to stderr. Fake backend, loopback only,
# every wait bounded. Needs curl and jq.
set -u
. "$(dirname "$0")/serve_lib.sh"
nx_test_setup server-log
command -v curl >/dev/null && command -v jq >/dev/null || skip "curl or jq not installed"
log="$work/log.jsonl"
rm -f "$log"

nx_serve_start "$work" 100 --fake-backend -np 2 --alias fake --spec-type ngram --log-format json --log-file "$log"
curl -s -m 10 "$url/v1/completions" -d '{"prompt":"hello","max_tokens":4}' >/dev/null
curl -s -m 10 "$url/v1/completions" -d '{"model":"nope","prompt":"x"}' >/dev/null
curl -s -m 10 -N "$url/v1/chat/completions" -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}' >/dev/null
for _ in $(seq 1 50); do [ "$(grep -c '"event":"access"' "$log" 2>/dev/null)" -ge 3 ] && break; sleep 0.1; done
check "every line of the log file is a JSON object" "$(jq -e -s 'length > 0 and all(type == "object")' "$log" 2>/dev/null)"
a=$(jq -c 'select(.event == "access" and .path == "/v1/completions" and .status == 200)' "$log" | head -1)
check "access line of a completion: method, status, bytes, tokens, drafts, ms" \
    "$(jq -e '.method == "POST" and (.bytes > 0) and .prompt_tokens == 6 and .gen_tokens == 4 and (.draft_n >= 0)
              and (.draft_acceptance >= 0) and (.ms >= 0) and (.time | test("Z$"))' <<<"$a" 2>/dev/null)" "$a"
e=$(jq -c 'select(.event == "access" and .status == 404)' "$log" | head -1)
check "an error response's line carries its message" "$(jq -e '.error | test("nope")' <<<"$e" 2>/dev/null)" "$e"
s=$(jq -c 'select(.event == "access" and .path == "/v1/chat/completions")' "$log" | head -1)
check "a stream's line counts its bytes and tokens" "$(jq -e '.status == 200 and .bytes > 0 and .gen_tokens == 3' <<<"$s" 2>/dev/null)" "$s"
kill -SEGV "$pid"
rc=0
wait "$pid" 2>/dev/null || rc=$?
# the signal goes on to the handler that was there before: the default (status 128 + 11), or a
# sanitizer's, which reports and exits
check "SIGSEGV kills the server with that signal (status $rc)" \
    "$({ [ "$rc" = 139 ] || grep -q 'Sanitizer' "$work/serve.err"; } && echo true)"
f=$(tail -1 "$log")
check "the fatal signal is the log's last line" "$(jq -e '.level == "fatal" and .signal == "SIGSEGV"' <<<"$f" 2>/dev/null)" "$f"
grep -q 'nextn fatal: signal SIGSEGV\|"signal":"SIGSEGV"' "$work/serve.err" && ok "and it is on stderr too" || fail "no fatal line on stderr"

# text (the default) to stderr
nx_serve_start "$work" 100 --fake-backend -np 1 --alias fake
curl -s -m 10 -I "$url/health" >/dev/null
for _ in $(seq 1 50); do grep -q 'access .*path=/health' "$work/serve.err" && break; sleep 0.1; done
l=$(grep 'access .*path=/health' "$work/serve.err" | head -1)
[[ "$l" =~ ^[0-9T:.-]+Z\ nextn\ info:\ access\ remote=127\.0\.0\.1\ method=HEAD\ path=/health\ status=200\ bytes=[0-9]+\ ms=[0-9.e+-]+$ ]] \
    && ok "text access line: $l" || fail "text access line: '$l'"
kill -TERM "$pid"
rc=0
wait "$pid" 2>/dev/null || rc=$?
check "SIGTERM exits 0" "$([ "$rc" = 0 ] && echo true)"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
