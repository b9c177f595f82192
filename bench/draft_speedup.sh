#!/usr/bin/env bash
# draft_speedup.sh — draft-model speculation (`--spec-type draft -md`, issue #16) through `nextn bench`
# on generated target / draft pairs: the cost of one draft step, the verify cost, measured vs
# predicted speedup (speculative.md §5, from the run's acceptance and the measured costs) and
# losslessness, per pair and fixed draft length K (adaptive off).
#
# Pairs (made once into build/ with `nextn gen-model`):
#   inflated  target = the bundled model inflated to 24 trunk layers, n_ff 8192, Q8_0 (~130 MB, same
#             tokens as the bundled model); draft = the bundled model (3.5 MB): acceptance ~1
#   random    target = random qwen35, n_embd 512, 12 trunk layers (every 2nd attention), n_ff 4096,
#             vocab 4096, Q8_0; draft = random qwen35, n_embd 128, 2 layers, n_ff 256, same vocab:
#             acceptance ~0, so the figures show the cost side
#   llama     target = random llama, n_embd 512, 12 layers, 8 heads / 2 KV heads, n_ff 2048, vocab
#             4096, tied, Q8_0; draft = random llama, n_embd 128, 2 layers, n_ff 256, same vocab
#             (tied embeddings with emb_std 0.5: both lean to repeating, some agreement)
#
# Usage: bench/draft_speedup.sh [--pair inflated|random|llama|all] [--tokens N] [--prompt P] [--reps R]
#                               [--threads T] [--kmax K]
# NEXTN_CPU=avx2 forces the AVX2 kernels. Speed is measured, never asserted.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
pair=all tokens=128 prompt=128 reps=3 threads=2 k=3
while [ $# -gt 0 ]; do
    case $1 in
    --pair) pair=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --kmax) k=$2; shift 2 ;;
    *) echo "draft_speedup: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$NEXTN" ] || { echo "draft_speedup: build first (make): $NEXTN missing" >&2; exit 1; }
out=$here/build
bundled=$here/models/tiny-qwen35-mtp-q8_0.gguf

make_once() {   # FILE, then the gen-model arguments
    local f=$1
    shift
    [ -f "$f" ] && return 0
    echo "draft_speedup: making $f (once)" >&2
    "$NEXTN" gen-model "$@" --out "$f.tmp" >&2 && mv "$f.tmp" "$f"
}

run_pair() {   # NAME TARGET DRAFT
    echo "## pair $1: target $(basename "$2"), draft $(basename "$3"); --draft-max $k --draft-adaptive off," \
         "-p $prompt -n $tokens -r $reps -t $threads; cpu: ${NEXTN_CPU:-auto}"
    "$NEXTN" bench -m "$2" -md "$3" --spec-type draft --draft-max "$k" --draft-adaptive off -p "$prompt" \
        -n "$tokens" -r "$reps" -t "$threads" >"$out/draft_speedup.$1.txt" 2>&1 ||
        { echo "draft_speedup: bench failed:"; cat "$out/draft_speedup.$1.txt"; return 1; }
    sed -n '/^speculative decoding/,/^measured/p' "$out/draft_speedup.$1.txt"
    grep '^load average' "$out/draft_speedup.$1.txt"
}

rc=0
if [ "$pair" = inflated ] || [ "$pair" = all ]; then
    make_once "$out/infl-24x8192-q8_0.gguf" --inflate --from "$bundled" --n-layer 24 --n-ff 8192 --type q8_0 || exit 1
    run_pair inflated "$out/infl-24x8192-q8_0.gguf" "$bundled" || rc=1
fi
if [ "$pair" = random ] || [ "$pair" = all ]; then
    make_once "$out/rand-target-512x12-q8_0.gguf" --arch qwen35 --type q8_0 --seed 1 --config-json \
        '{"n_embd":512,"n_layer":12,"n_head":8,"n_head_kv":2,"head_dim":64,"n_rot":16,"rope_sections":[3,3,2,0],"ssm_head_dim":64,"ssm_nk":4,"ssm_nv":8,"n_ff":4096,"n_vocab":4096}' || exit 1
    make_once "$out/rand-draft-128x2-q8_0.gguf" --arch qwen35 --type q8_0 --seed 2 --config-json \
        '{"n_embd":128,"n_layer":2,"n_ff":256,"n_vocab":4096}' || exit 1
    run_pair random "$out/rand-target-512x12-q8_0.gguf" "$out/rand-draft-128x2-q8_0.gguf" || rc=1
fi
if [ "$pair" = llama ] || [ "$pair" = all ]; then
    make_once "$out/llama-target-512x12-q8_0.gguf" --arch llama --type q8_0 --seed 1 --config-json \
        '{"n_embd":512,"n_layer":12,"n_head":8,"n_head_kv":2,"n_ff":2048,"n_vocab":4096,"tied_embeddings":true,"emb_std":0.5}' || exit 1
    make_once "$out/llama-draft-128x2-q8_0.gguf" --arch llama --type q8_0 --seed 2 --config-json \
        '{"n_embd":128,"n_layer":2,"n_head":4,"n_head_kv":2,"n_ff":256,"n_vocab":4096,"tied_embeddings":true,"emb_std":0.5}' || exit 1
    run_pair llama "$out/llama-target-512x12-q8_0.gguf" "$out/llama-draft-128x2-q8_0.gguf" || rc=1
fi
exit $rc
