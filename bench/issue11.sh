#!/usr/bin/env bash
# issue11.sh — every figure issue #11 asks for, side by side in one run, on the machine's own
# CPU tier and again with the AVX2 kernels forced (NEXTN_CPU=avx2):
#   1. spec_speedup.sh on the inflated 24 + 1-layer model (n_ff 45056, Q8_0) and on the 4-layer
#      variant (n_ff 262144): off, fixed k = 1..kmax, default; each `nextn run` cold, then (24 + 1
#      layers) through `nextn serve` /completion as the issue's table was measured (--server);
#   2. verify_sweep.sh: cost of 1..16 verify rows on 0.8B-shaped Q8_0 and Q4_K_M models;
#   3. bench-draft on the 0.8B shape: draft step, full head vs the 32768-token subset (and + Q4_0);
#   4. bench-draft on the bundled model's held-out text: acceptance with and without a subset.
# Usage: bench/issue11.sh [--reps R] [--tokens N] [--kmax K] [--tiers "native avx2 avx2_vnni"] (any NEXTN_CPU
# level name besides native). Models are made once
# under build/ (about 2.7 GB in all). Speed is measured, never asserted; run on a quiet machine.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
reps=5 tokens=128 kmax=5 tiers="native avx2"
while [ $# -gt 0 ]; do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --kmax) kmax=$2; shift 2 ;;
    --tiers) tiers=$2; shift 2 ;;
    *) echo "issue11: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$NEXTN" ] || { echo "issue11: build first (make): $NEXTN missing" >&2; exit 1; }
src=$here/models/tiny-qwen35-mtp-q8_0.gguf
m24=$here/build/inflated-24x45056-q8_0.gguf m4=$here/build/inflated-4x262144-q8_0.gguf
mk() {   # mk OUT ARGS...: gen-model once
    local out=$1; shift
    [ -f "$out" ] && return 0
    echo "issue11: making $out" >&2
    "$NEXTN" gen-model "$@" --out "$out.tmp" >/dev/null && mv "$out.tmp" "$out" || { rm -f "$out.tmp"; exit 1; }
}
mk "$m24" --inflate --from "$src" --n-layer 24 --n-ff 45056 --type q8_0
mk "$m4" --inflate --from "$src" --n-layer 4 --n-ff 262144 --type q8_0
mkdir -p "$here/build/bench-models"
m08=$here/build/bench-models/qwen35-0.8b-q8_0.gguf
mk "$m08" --arch qwen35 --config "$here/bench/qwen35-0.8b.json" --type q8_0 --seed 1
echo "# issue11.sh $(date -u +%FT%TZ) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
for tier in $tiers; do
    if [ "$tier" != native ]; then export NEXTN_CPU=$tier; else unset NEXTN_CPU; fi
    echo; echo "## tier: $tier"
    sp=(--reps "$reps" --tokens "$tokens" --kmax "$kmax")
    echo; echo "### spec_speedup, 24 + 1 layers"; bash "$here/bench/spec_speedup.sh" "$m24" "${sp[@]}"
    echo; echo "### spec_speedup, 24 + 1 layers, nextn serve"; bash "$here/bench/spec_speedup.sh" "$m24" "${sp[@]}" --server
    echo; echo "### spec_speedup, 4 + 1 layers"; bash "$here/bench/spec_speedup.sh" "$m4" "${sp[@]}"
    echo; echo "### draft step on the 0.8B shape"
    for f in "--draft-vocab 32768" "--draft-vocab 32768 --draft-head-type q4_0"; do
        # shellcheck disable=SC2086
        "$NEXTN" bench-draft -m "$m08" -t 2 -c 64 $f 2>&1 | grep -E '^\||change' | sed "s/^/[$f] /"
    done
done
unset NEXTN_CPU
echo; echo "## verify sweep"; bash "$here/bench/verify_sweep.sh" --reps 3
echo; echo "## acceptance on the held-out text (tier-independent)"
for n in 3584 3072 2048; do
    "$NEXTN" bench-draft -m "$src" -f "$here/models/heldout.py.txt" -t 1 --draft-vocab "$n" 2>&1 | grep -E '^\||change' |
        sed "s/^/[--draft-vocab $n] /"
done
