#!/usr/bin/env bash
# long_context.sh — one long-prompt request through `nextn serve` (issue #13's agent case): starts
# the server on MODEL, sends one /completion with a prompt of ~N tokens (the repository's held-out
# text models/heldout.py.txt, tokenized by the model and repeated as needed, sent as token ids so
# the count is exact), n_predict 32, greedy, and prints prompt tok/s, the total prompt time and
# decode tok/s from the response's timings; once per KV cache type given (-ctk and -ctv both).
#
# Usage: bench/long_context.sh [MODEL.gguf] [--tokens N] [--threads T] [--n-predict N] [--ctx C]
#                              [--types "f16 q8_0 q4_0"] [-- EXTRA serve flags...]
# Defaults: the bundled model, 6000 prompt tokens, -t 2, n_predict 32, -c = tokens + n_predict + 64,
# types "f16". Speculation stays at the server's default (auto); pass -- --spec-type none for plain
# decoding. Needs build/nextn (make), curl and jq. NEXTN_CPU=avx2 forces the AVX2 kernels.
# Speed is measured, never asserted. A Qwen3.5-0.8B-shaped Q8_0 model: bench/depth.sh --make-only.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
model=$here/models/tiny-qwen35-mtp-q8_0.gguf
tokens=6000 threads=2 n_predict=32 ctx=0 types=f16
extra=()
while [ $# -gt 0 ]; do
    case $1 in
    --tokens) tokens=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --n-predict) n_predict=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "long_context: unknown flag $1" >&2; exit 2 ;;
    *) model=$1; shift ;;
    esac
done
[ -x "$NEXTN" ] || { echo "long_context: build first (make): $NEXTN missing" >&2; exit 1; }
[ -f "$model" ] || { echo "long_context: no model $model" >&2; exit 1; }
for t in curl jq; do command -v $t >/dev/null || { echo "long_context: needs $t" >&2; exit 1; }; done
[ "$ctx" -gt 0 ] || ctx=$((tokens + n_predict + 64))
work=$(mktemp -d)
trap 'kill -9 ${pid:-0} 2>/dev/null; rm -rf "$work"' EXIT

# the prompt: held-out text ids, repeated until there are enough, cut to exactly $tokens
"$NEXTN" tokenize -m "$model" --no-bos - <"$here/models/heldout.py.txt" >"$work/ids.json" ||
    { echo "long_context: tokenize failed" >&2; exit 1; }
jq -c --argjson n "$tokens" '. as $a | [range(0; ($n / ($a | length) | ceil))] | map($a) | add | .[0:$n]' \
    "$work/ids.json" >"$work/prompt.json"
jq -c --argjson np "$n_predict" '{prompt: ., n_predict: $np, temperature: 0, cache_prompt: false}' \
    "$work/prompt.json" >"$work/req.json"

start() {   # start the server with extra args; sets pid and port
    : >"$work/serve.out"   # not only the background job's redirection: it may come after the loop's first read
    "$NEXTN" serve --port 0 -m "$model" -np 1 -c "$ctx" -t "$threads" "$@" >"$work/serve.out" 2>"$work/serve.err" &
    pid=$!
    port=""
    for _ in $(seq 1 600); do
        port=$(sed -n 's/^nextn serve: listening on http:\/\/[^:]*:\([0-9]*\).*$/\1/p' "$work/serve.out")
        [ -n "$port" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "long_context: server did not start" >&2
    cat "$work/serve.err" >&2
    exit 1
}

echo "model: $(basename "$model"); prompt $tokens tokens (models/heldout.py.txt repeated), n_predict $n_predict," \
     "-np 1 -c $ctx -t $threads; cpu: ${NEXTN_CPU:-auto} kernels; extra: ${extra[*]:-none}"
echo "| KV (-ctk/-ctv) | KV per token | prompt tokens | prompt tok/s | prompt time (s) | decode tok/s | generated |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for kv in $types; do
    start -ctk "$kv" -ctv "$kv" "${extra[@]}"
    per_tok=$(sed -n 's/.*KV cache: .*; \([0-9.]* KiB\) per token of context.*/\1/p' "$work/serve.err" | head -1)
    if ! curl -sS --max-time 3600 -H 'Content-Type: application/json' --data-binary @"$work/req.json" \
        "http://127.0.0.1:$port/completion" >"$work/resp.json"; then
        echo "long_context: request failed ($kv)" >&2
        cat "$work/serve.err" >&2
        exit 1
    fi
    jq -r --arg kv "$kv" --arg pt "${per_tok:--}" '.timings | "| \($kv) | \($pt) | \(.prompt_n) | \(.prompt_per_second * 100 | round / 100) | \(.prompt_ms / 10 | round / 100) | \(.predicted_per_second * 100 | round / 100) | \(.predicted_n) |"' \
        "$work/resp.json" || { echo "long_context: bad response: $(head -c 300 "$work/resp.json")" >&2; exit 1; }
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null
done
