#!/usr/bin/env bash
# depth.sh — issue #13's depth table: `nextn bench -p 512 -n 64 -d 0,4096,16384` on a
# Qwen3.5-0.8B-shaped Q8_0 model (random weights of the real shapes, bench/qwen35-0.8b.json: 24
# trunk layers of which 6 attend (full_attention_interval 4), head_dim 256, 2 KV heads, n_ff 3584,
# vocab 151936, + the MTP layer), once per KV cache type (-ctk and -ctv both), then the ratios
# pp(deepest) / pp(0) and tg(deepest) / tg(0) the issue asks for (>= 0.6 / >= 0.7).
#
# Usage: bench/depth.sh [MODEL.gguf] [--depths 0,4096,16384] [--threads 2] [--reps 3]
#                       [--types "f16 q8_0 q4_0"] [--make-only] [-- EXTRA bench flags...]
# Default model: build/qwen35-0.8b-q8_0.gguf, made when missing (`nextn gen-model --arch qwen35
# --config bench/qwen35-0.8b.json --type q8_0 --seed 1`, ~0.8 GB); --make-only just makes it (for
# bench/long_context.sh). NEXTN_CPU=avx2 forces the AVX2 kernels. Speed is measured, never asserted.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
model= depths=0,4096,16384 threads=2 reps=3 types="f16 q8_0 q4_0" make_only=0
extra=()
while [ $# -gt 0 ]; do
    case $1 in
    --depths) depths=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --make-only) make_only=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "depth: unknown flag $1" >&2; exit 2 ;;
    *) model=$1; shift ;;
    esac
done
[ -x "$NEXTN" ] || { echo "depth: build first (make): $NEXTN missing" >&2; exit 1; }
if [ -z "$model" ]; then
    model=$here/build/qwen35-0.8b-q8_0.gguf
    if [ ! -f "$model" ]; then
        echo "depth: making $model (once)" >&2
        "$NEXTN" gen-model --arch qwen35 --config "$here/bench/qwen35-0.8b.json" --type q8_0 --seed 1 \
            --out "$model.tmp" >&2 && mv "$model.tmp" "$model" || exit 1
    fi
fi
[ -f "$model" ] || { echo "depth: no model $model" >&2; exit 1; }
[ "$make_only" = 1 ] && { echo "$model"; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deepest=${depths##*,}
echo "model: $(basename "$model"); pp512 / tg64 at depths $depths, -t $threads, -r $reps; cpu: ${NEXTN_CPU:-auto} kernels"
for kv in $types; do
    echo
    echo "### KV $kv"
    "$NEXTN" bench -m "$model" -p 512 -n 64 -r "$reps" -t "$threads" -d "$depths" -ctk "$kv" -ctv "$kv" \
        "${extra[@]}" >"$work/$kv.out" 2>"$work/$kv.err" || { cat "$work/$kv.err" >&2; exit 1; }
    grep -E '^KV cache|^\|' "$work/$kv.out"
    tps() { grep -E "\| +$1 \|" "$work/$kv.out" | awk -F'|' '{print $8}' | awk '{print $1}'; }
    pp0=$(tps pp512) tg0=$(tps tg64)
    ppd=$(tps "pp512 @ d$deepest") tgd=$(tps "tg64 @ d$deepest")
    if [ "$deepest" != 0 ] && [ -n "$pp0" ] && [ -n "$ppd" ]; then
        awk -v a="$ppd" -v b="$pp0" -v c="$tgd" -v d="$tg0" -v D="$deepest" \
            'BEGIN {printf "ratios: pp512 @ d%s / pp512 = %.2f (issue: >= 0.6), tg64 @ d%s / tg64 = %.2f (>= 0.7)\n", D, a / b, D, c / d}'
    fi
done
