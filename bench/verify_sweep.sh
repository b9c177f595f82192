#!/usr/bin/env bash
# verify_sweep.sh — cost of a speculative verify batch of 1..16 rows relative to one row
# (`nextn bench --verify-sweep`) on Qwen3.5-0.8B-shaped models in Q8_0 and Q4_K_M, on the
# machine's own CPU tier and again with the AVX2 kernels forced (NEXTN_CPU=avx2; the same run
# twice on an AVX2-only machine), and with NEXTN_CPU=avx2_vnni where AVX-VNNI sits beside AVX-512 (issue #11: 4 rows <= 1.25x one row, no step at 5 rows).
#
# Usage: bench/verify_sweep.sh [--threads T] [--reps R]
# The models are random-weight files of the real shapes (bench/qwen35-0.8b.json, seed 1),
# generated once into build/bench-models/ (about 1.1 GB for the two). Needs `make` first.
# Prints the rows / ms / relative-cost column of each run. Speed is measured, never asserted;
# on a shared machine run it twice and compare.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
threads=2 reps=1
while [ $# -gt 0 ]; do
    case $1 in
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "verify_sweep: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$NEXTN" ] || { echo "verify_sweep: build first (make): $NEXTN missing" >&2; exit 1; }
dir=$here/build/bench-models
mkdir -p "$dir"
for type in q8_0 q4_K_M; do
    f=$dir/qwen35-0.8b-$type.gguf
    if [ ! -f "$f" ]; then
        echo "verify_sweep: generating $f" >&2
        "$NEXTN" gen-model --arch qwen35 --config "$here/bench/qwen35-0.8b.json" --type "$type" --seed 1 \
            --out "$f.tmp" >/dev/null && mv "$f.tmp" "$f" || { rm -f "$f.tmp"; exit 1; }
    fi
done
tiers="native avx2"
# AVX-VNNI beside AVX-512 (Sapphire Rapids, Zen 5): its own avx2_vnni level too (on an
# Alder Lake-class CPU it is the native level already)
grep -qw avx_vnni /proc/cpuinfo 2>/dev/null && grep -qw avx512f /proc/cpuinfo && tiers="$tiers avx2_vnni"
for tier in $tiers; do
    for type in q8_0 q4_K_M; do
        f=$dir/qwen35-0.8b-$type.gguf
        echo "## $type, ${threads} threads, tier: $tier"
        if [ $tier != native ]; then env=(env NEXTN_CPU=$tier); else env=(env); fi
        "${env[@]}" "$NEXTN" bench -m "$f" -t "$threads" --verify-sweep -p 0 -n 16 -r "$reps" 2>&1 |
            grep -E '^(bench|model|cpu|\| +rows|\|-|\| +[0-9]+ \|)' || exit 1
    done
done
