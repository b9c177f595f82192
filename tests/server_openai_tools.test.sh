#!/usr/bin/env bash
# server_openai_tools.test.sh — tool calling through the official `openai` npm client:
# `nextn serve --fake-backend --chat-template-file <Qwen3.5's template>` with scripted model
# output (tests/server/openai_tools.mjs): request with tools -> tool_calls -> tool result ->
# answer, streaming and not (chunk order as generated), reasoning_format, tool_choice required /
# named; raise_exception -> 400. Then the same client on a real model run (the bundled model with
# Qwen3.5's template, tests/server/openai_tools_model.mjs): the prompt of a request with tools
# equals the reference rendering byte for byte (/apply-template) and is what the chat endpoint
# runs (token count), streaming and not. Uses the `openai` install of
# server_openai.test.sh ("$NX_BINARY_DIR/npm-server", installed here when missing). Skipped (exit
# 0) when node/npm are missing or the registry is unreachable.
set -u
. "$(dirname "$0")/serve_lib.sh"
nx_test_setup server-openai-tools
prefix="$NX_BINARY_DIR/npm-server"
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
if [ ! -f "$prefix/node_modules/openai/package.json" ]; then
    command -v node >/dev/null && command -v npm >/dev/null || skip "node/npm not installed"
    cp "$here/server/package.json" "$prefix/package.json"
    timeout 300 npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1 &&
        [ -f "$prefix/node_modules/openai/package.json" ] || skip "npm registry unreachable (see $work/npm.log)"
fi
nx_serve_start "$work" 100 --fake-backend -np 2 -c 8192 --alias fake --fake-step-us 0 \
    --chat-template-file "$here/data/chat/templates/Qwen3.5-4B.jinja"
timeout 120 node "$here/server/openai_tools.mjs" "$url/v1" "$prefix" | tee "$work/client.log"
summary=$(tail -1 "$work/client.log")
if [[ "$summary" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1])); failed=$((failed + BASH_REMATCH[2]))
else fail "the openai client did not finish"; fi
kill -TERM "$pid"; wait "$pid" 2>/dev/null

# the same tool requests on a real model run (tests/server/openai_tools_model.mjs)
nx_serve_start "$work" 200 -m "$model" --alias tiny -np 1 -c 2048 -t 1 --chat-template-file "$here/data/chat/templates/Qwen3.5-4B.jinja"
timeout 120 node "$here/server/openai_tools_model.mjs" "$url" "$prefix" "$here/data/chat" | tee "$work/client_model.log"
summary=$(tail -1 "$work/client_model.log")
if [[ "$summary" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1])); failed=$((failed + BASH_REMATCH[2]))
else fail "the openai client (real model) did not finish"; fi
kill -TERM "$pid"; wait "$pid" 2>/dev/null
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
