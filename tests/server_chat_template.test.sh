#!/usr/bin/env bash
# server_chat_template.test.sh — `nextn serve --chat-template-file` on the bundled tiny model:
# POST /apply-template returns the Jinja template's rendering (Qwen3.5's, Qwen3-Coder's and
# Qwen3's, from tests/data/chat) byte-identical to the reference (expected.json) for every case
# of those templates, tools and kwargs included; /v1/chat/completions with tools on the real
# model renders the same prompt (its token count equals the reference text's), and a
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

# POST /apply-template (llama.cpp's endpoint: the prompt the chat endpoint would tokenize) must
# equal the reference rendering byte for byte, for every case of the template, tools included;
# then a real model run with tools through /v1/chat/completions renders that same prompt (its
# token count equals the reference text's; the tiny model does not call tools, so its answer is
# content with finish_reason stop or length).
# case_body I [EXTRA]: the case's request body (messages, tools, add_generation_prompt, kwargs)
case_body() {
    jq -c --argjson i "$1" --argjson extra "${2:-{\}}" '.[$i] | {messages}
        + (if .tools then {tools} else {} end)
        + (if .add_generation_prompt == false then {add_generation_prompt: false} else {} end)
        + (if .kwargs then {chat_template_kwargs: .kwargs} else {} end) + $extra' "$data/cases.json"
}
for tpl in Qwen3-Coder Qwen-Qwen3-0.6B Qwen3.5-4B; do
    nx_serve_start "$work" 200 -m "$model" -np 1 -c 2048 -t 1 --chat-template-file "$data/templates/$tpl.jinja"
    n=0; bad=0
    for i in $(jq -r --arg t "templates/$tpl.jinja" '[.[] | .template == $t] | indices(true) | .[]' "$data/cases.json"); do
        name=$(jq -r --argjson i "$i" '.[$i].name' "$data/cases.json")
        # a case the reference itself cannot render (content parts given to a template that
        # takes strings only): the server joins text parts first, as llama.cpp does
        jq -e --argjson i "$i" '.[$i].ok' "$data/expected.json" >/dev/null || continue
        curl -s -m 60 "$url/apply-template" -H 'Content-Type: application/json' -d "$(case_body "$i")" >"$work/at.json"
        if jq -e --slurpfile ex "$data/expected.json" --argjson i "$i" '.prompt == $ex[0][$i].text' "$work/at.json" >/dev/null; then
            n=$((n + 1))
        else
            bad=$((bad + 1))
            jq -r --argjson i "$i" '.[$i].text' "$data/expected.json" >"$work/want.txt"
            jq -r '.prompt' "$work/at.json" >"$work/got.txt"
            fail "$tpl/$name: /apply-template differs from the reference: $(diff "$work/want.txt" "$work/got.txt" | head -5)"
        fi
    done
    [ "$bad" = 0 ] && [ "$n" -ge 5 ] && ok "$tpl: /apply-template = the reference rendering byte for byte ($n cases)"
    for name in tools_offer tool_roundtrip parallel_calls system_user; do
        i=$(jq --arg t "templates/$tpl.jinja" --arg n "$name" '[.[] | .template == $t and .name == $n] | index(true)' "$data/cases.json")
        [ "$i" = null ] && continue
        body=$(case_body "$i" '{"max_tokens": 3, "temperature": 0}')
        curl -s -m 60 "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" >"$work/cc.json"
        got=$(jq '.usage.prompt_tokens' "$work/cc.json")
        fin=$(jq -r '.choices[0].finish_reason' "$work/cc.json")
        tb=$(jq -c --argjson i "$i" '{content: .[$i].text, add_special: true, parse_special: true}' "$data/expected.json")
        want=$(curl -s -m 60 "$url/tokenize" -H 'Content-Type: application/json' -d "$tb" | jq '.tokens | length')
        [ -n "$got" ] && [ "$got" = "$want" ] && [[ "$fin" =~ ^(stop|length)$ ]] \
            && ok "$tpl/$name: a real model run with tools renders the reference prompt ($got tokens, finish $fin)" \
            || fail "$tpl/$name: prompt tokens $got (reference $want), finish $fin: $(head -c 300 "$work/cc.json")"
    done
    [ "$tpl" = Qwen3.5-4B ] || { kill -TERM "$pid"; wait "$pid" 2>/dev/null; }   # Qwen3.5's stays for the checks below
done
body='{"messages":[{"role":"user","content":"a"},{"role":"system","content":"b"}],"max_tokens":1}'
code=$(curl -s -m 30 -o "$work/raise.json" -w '%{http_code}' "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
msg=$(jq -r '.error.message' "$work/raise.json" 2>/dev/null)
[ "$code" = 400 ] && [ "$msg" = "System message must be at the beginning." ] && ok "raise_exception -> 400 with its message" \
    || fail "raise_exception: $code $(cat "$work/raise.json")"

kill -TERM "$pid"; wait "$pid" 2>/dev/null
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
