#!/usr/bin/env bash
# chat_template_cli.test.sh — `nextn chat-template render --cases` on tests/data/chat gives the
# reference renderings (expected.json: same ok flags, byte-identical texts), and `parse` recovers
# the calls of a tool segment. Needs jq (skipped without it).
set -u
. "$(dirname "$0")/serve_lib.sh"
nx_test_setup chat-template-cli
command -v jq >/dev/null || skip "jq not installed"
data="$here/data/chat"
"$NEXTN" chat-template render --cases "$data/cases.json" --fixed-clock >"$work/rendered.json" || fail "render exited non-zero"
norm='map(if .ok then {ok, text} else {ok} end)'
if [ "$(jq -c "$norm" "$work/rendered.json")" = "$(jq -c "$norm" "$data/expected.json")" ]; then
    ok "render: $(jq length "$data/expected.json") cases equal expected.json"
else fail "render differs from expected.json"; fi
jq -j '.[4].segment' "$data/tool_segments.json" >"$work/seg.txt"
got=$("$NEXTN" chat-template parse --text-file "$work/seg.txt" | jq -c '[.tool_calls[] | {n: .function.name, a: (.function.arguments | fromjson)}]')
want=$(jq -c '[.[4].message.tool_calls[] | {n: .function.name, a: .function.arguments}]' "$data/tool_segments.json")
[ "$got" = "$want" ] && ok "parse: the calls of a Qwen3-Coder segment" || fail "parse: $got != $want"
"$NEXTN" chat-template render >/dev/null 2>&1 && fail "render without --cases succeeds" || ok "render without --cases is refused"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
