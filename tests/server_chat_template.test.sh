#!/usr/bin/env bash
# server_chat_template.test.sh — `nextn serve --chat-template-file` on the bundled tiny model:
# /v1/chat/completions renders the Jinja template (Qwen3.5's, from tests/data/chat) exactly as
# the reference does (the prompt's token count equals that of expected.json's text tokenized
# the same way), chat_template_kwargs reach the template (enable_thinking: false), and a
# template's raise_exception comes back as a 400 with its message. A template file that does
# not parse stops the server with line and column.
# Needs curl and jq (skipped without them). Bounded: every request has a timeout.
set -u
. "$(dirname "$0")/serve_lib.sh"
nx_test_setup server-chat-template

command -v curl >/dev/null && command -v jq >/dev/null || skip "curl or jq not installed"
[ -f "$model" ] || { fail "$model missing"; echo "0 passed, 1 failed"; exit 1; }
data="$here/data/chat"

printf '{%% if x %%}\nunclosed' >"$work/bad.jinja"
if timeout 20 "$NEXTN" serve -m "$model" --port 0 --chat-template-file "$work/bad.jinja" >/dev/null 2>"$work/e1"; then
    fail "a bad template file"; else
    grep -q "line 2" "$work/e1" && ok "a template that does not parse is refused with its position" || fail "bad template: $(cat "$work/e1")"; fi

nx_serve_start "$work" 200 -m "$model" -np 1 -c 1024 -t 1 --chat-template-file "$data/templates/Qwen3.5-4B.jinja"

# case NAME -> the case index of Qwen3.5 in cases.json
idx() { jq --arg n "$1" '[.[] | (.template | test("Qwen3.5")) and .name == $n] | index(true)' "$data/cases.json"; }
for name in system_user multi_turn unicode thinking_off tools_offer; do
    i=$(idx "$name")
    [ "$name" = tools_offer ] && continue   # tools are not accepted yet
    body=$(jq -c --argjson i "$i" '.[$i] | {messages, max_tokens: 1, temperature: 0} + (if .kwargs then {chat_template_kwargs: .kwargs} else {} end)' "$data/cases.json")
    got=$(curl -s -m 60 "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" | jq '.usage.prompt_tokens')
    tb=$(jq -c --argjson i "$i" '{content: .[$i].text, add_special: true, parse_special: true}' "$data/expected.json")
    want=$(curl -s -m 60 "$url/tokenize" -H 'Content-Type: application/json' -d "$tb" | jq '.tokens | length')
    [ -n "$got" ] && [ "$got" = "$want" ] && ok "$name: prompt = the reference rendering ($got tokens)" || fail "$name: prompt tokens $got != reference $want"
done

body='{"messages":[{"role":"user","content":"a"},{"role":"system","content":"b"}],"max_tokens":1}'
code=$(curl -s -m 30 -o "$work/raise.json" -w '%{http_code}' "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
msg=$(jq -r '.error.message' "$work/raise.json" 2>/dev/null)
[ "$code" = 400 ] && [ "$msg" = "System message must be at the beginning." ] && ok "raise_exception -> 400 with its message" \
    || fail "raise_exception: $code $(cat "$work/raise.json")"

kill -TERM "$pid"; wait "$pid" 2>/dev/null
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
