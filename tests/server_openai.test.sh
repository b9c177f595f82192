#!/usr/bin/env bash
# server_openai.test.sh — `nextn serve` driven by the official `openai` npm client.
#
# Installs `openai` (tests/server/package.json) into "$NX_BINARY_DIR/npm-server" (reused when
# present), starts `$NEXTN serve --fake-backend --port 0 -np 2 --api-key K --spec-type ngram,mtp`,
# reads the chosen port from its first stdout line, and runs tests/server/openai_client.mjs: chat
# completion, streaming chat, completions (text and token prompts, streaming), /v1/models with the
# -slotN entries, usage numbers, stop strings, errors. Then SIGTERM must stop the server with exit
# status 0. Skipped (exit 0) when node/npm are missing or the registry is unreachable, or when
# this `nextn` has no `serve` command yet.
set -u
NEXTN=${NEXTN:-build/nextn}
NX_BINARY_DIR=${NX_BINARY_DIR:-build}
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$NX_BINARY_DIR/npm-server"
work="$NX_BINARY_DIR/server-openai"
mkdir -p "$prefix" "$work"
prefix="$(cd "$prefix" && pwd)"
work="$(cd "$work" && pwd)"
. "$(dirname "$0")/serve_lib.sh"
passed=0
failed=0

skip() { echo "skipped: $*"; echo "0 passed, 0 failed"; exit 0; }

if ! "$NEXTN" serve --help >/dev/null 2>&1; then
    skip "'$NEXTN serve' is not available (the command is not registered in this build)"
fi
if [ ! -f "$prefix/node_modules/openai/package.json" ]; then
    command -v node >/dev/null && command -v npm >/dev/null || skip "node/npm not installed"
    cp "$here/server/package.json" "$prefix/package.json"
    if ! timeout 300 npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1 ||
       [ ! -f "$prefix/node_modules/openai/package.json" ]; then
        tail -3 "$work/npm.log"
        skip "npm registry unreachable (npm install failed, see $work/npm.log)"
    fi
fi
echo "openai client $(node -p "require('$prefix/node_modules/openai/package.json').version")"

key="test-key-$$"
nx_serve_start "$work" 100 --fake-backend -np 2 -c 2048 --api-key "$key" --spec-type ngram,mtp --alias fake --fake-step-us 200
echo "server at $url"

# The client prints its own "ok/FAIL" lines and a summary; fold its counts into ours.
timeout 120 node "$here/server/openai_client.mjs" "$url/v1" "$key" "$prefix" | tee "$work/client.log"
summary=$(tail -1 "$work/client.log")
if [[ "$summary" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
else
    echo "FAIL the openai client did not finish"
    failed=$((failed + 1))
fi

# curl-level: /health open, metrics need the key.
if command -v curl >/dev/null; then
    code=$(curl -s -o /dev/null -w '%{http_code}' "$url/health")
    if [ "$code" = 200 ]; then echo "ok   /health is open"; passed=$((passed + 1)); else echo "FAIL /health: $code"; failed=$((failed + 1)); fi
    code=$(curl -s -o /dev/null -w '%{http_code}' "$url/metrics")
    if [ "$code" = 401 ]; then echo "ok   /metrics needs the key"; passed=$((passed + 1)); else echo "FAIL /metrics without key: $code"; failed=$((failed + 1)); fi
fi

# Graceful shutdown: SIGTERM -> exit 0.
kill -TERM $pid
rc=124
for _ in $(seq 1 100); do
    if ! kill -0 $pid 2>/dev/null; then wait $pid; rc=$?; break; fi
    sleep 0.1
done
trap - EXIT
if [ "$rc" = 0 ]; then echo "ok   SIGTERM stops the server with status 0"; passed=$((passed + 1))
else echo "FAIL SIGTERM: status $rc"; kill -9 $pid 2>/dev/null; failed=$((failed + 1)); fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
