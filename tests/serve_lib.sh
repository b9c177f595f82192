# serve_lib.sh — sourced by the server script tests (not a test itself).
#
# nx_test_setup NAME: the common preamble — NEXTN / NX_BINARY_DIR defaults, $here (the tests
# folder), $model (the bundled tiny qwen35 MTP model; missing = a failure), $work =
# $NX_BINARY_DIR/NAME (created), the counters and ok / fail / check / skip.
#
# nx_serve_start WORKDIR TRIES ARGS...: starts `$NEXTN serve --port 0 ARGS...` in the background,
# waits up to TRIES x 0.1 s for its "listening on" line, and sets $pid and $url. An EXIT trap
# kills the server. If it does not come up: prints its stderr and the closing count line
# (with one more failure) and exits 1.
nx_serve_start() {
    local work=$1 tries=$2
    shift 2
    # emptied here, not only by the background job's redirection: that one may run after the loop
    # below has read the last server's "listening on" line (a dead port) on a loaded machine
    : >"$work/serve.out"
    "$NEXTN" serve --port 0 "$@" >"$work/serve.out" 2>"$work/serve.err" &
    pid=$!
    trap 'kill -9 $pid 2>/dev/null' EXIT
    url=""
    for _ in $(seq 1 "$tries"); do
        url=$(sed -n 's/^nextn serve: listening on \(http:.*\)$/\1/p' "$work/serve.out")
        [ -n "$url" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "FAIL server did not start"
    cat "$work/serve.err"
    echo "${passed:-0} passed, $((${failed:-0} + 1)) failed"
    exit 1
}

nx_test_setup() {
    NEXTN=${NEXTN:-build/nextn}
    NX_BINARY_DIR=${NX_BINARY_DIR:-build}
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    model="$here/../models/tiny-qwen35-mtp-q8_0.gguf"
    work="$NX_BINARY_DIR/$1"
    mkdir -p "$work"
    passed=0
    failed=0
}
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }
check() { if [ "$2" = true ]; then ok "$1"; else fail "$1${3:+: $3}"; fi; }
skip() { echo "skipped: $*"; echo "0 passed, 0 failed"; exit 0; }
