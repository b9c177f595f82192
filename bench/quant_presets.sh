#!/usr/bin/env bash
# quant_presets.sh — what each `nextn quantize` preset costs the bundled trained model: file size,
# perplexity and KL divergence against the F32 model on the held-out text (nextn perplexity -c 256,
# 9 chunks, 1143 scored tokens), and the MTP head's greedy first-draft acceptance on the same text
# (teacher-forced, against the quantized model's own argmax), without and with an importance
# matrix from tests/data/quant/calib.py.txt (with the MTP warmup, and without it), and the logits'
# max / mean |dlogit| against the F32 model over the first 256 held-out tokens (one `nextn eval`
# batch each, compared with Debian's numpy).
#
# Usage: bench/quant_presets.sh [--threads T]      (needs `make` first; writes into build/quant-presets/)
# The reference is the bundled Q8_0 file widened to F32 (its values exactly).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
NEXTN=${NEXTN:-$here/build/nextn}
threads=2
[ "${1:-}" = --threads ] && threads=$2
[ -x "$NEXTN" ] || { echo "quant_presets: build first (make): $NEXTN missing" >&2; exit 1; }
dir=$here/build/quant-presets
mkdir -p "$dir"
H=$here/models/heldout.py.txt
"$NEXTN" quantize --allow-requantize "$here/models/tiny-qwen35-mtp-q8_0.gguf" "$dir/f32.gguf" F32 "$threads" >/dev/null
"$NEXTN" perplexity -m "$dir/f32.gguf" -f "$H" -c 256 -t "$threads" --kl-divergence-base "$dir/f32.kld" >"$dir/f32.out" 2>/dev/null
"$NEXTN" imatrix -m "$dir/f32.gguf" -f "$here/tests/data/quant/calib.py.txt" -c 256 -t "$threads" -o "$dir/cal.gguf" >/dev/null 2>&1
"$NEXTN" imatrix -m "$dir/f32.gguf" -f "$here/tests/data/quant/calib.py.txt" -c 256 -t "$threads" --no-mtp-warmup \
    -o "$dir/cal-nomtp.gguf" >/dev/null 2>&1
head -c 1400 "$H" | "$NEXTN" tokenize -m "$dir/f32.gguf" - | tr -d '[] \n' | cut -d, -f1-256 >"$dir/ids.txt"
"$NEXTN" eval -m "$dir/f32.gguf" --prompt-ids "$(cat "$dir/ids.txt")" -t "$threads" --logits-out "$dir/f32.lg" >/dev/null 2>&1
dlogit() {   # quantized gguf -> "max | mean"
    "$NEXTN" eval -m "$1" --prompt-ids "$(cat "$dir/ids.txt")" -t "$threads" --logits-out "$dir/q.lg" >/dev/null 2>&1 || { echo "- | -"; return; }
    /usr/bin/python3 -c 'import sys, numpy as np
a, b = (np.fromfile(f, np.float32).astype(np.float64) for f in sys.argv[1:3])
d = np.abs(a - b) if a.shape == b.shape else np.array([np.inf])
print("%.4f | %.5f" % (d.max(), d.mean()))' "$dir/f32.lg" "$dir/q.lg"
}
acc() { sed -n 's/^MTP first-draft acceptance.*: \([0-9.]*\) .*/\1/p' "$1"; }
echo "F32: $(grep 'Final estimate' "$dir/f32.out"), MTP acceptance $(acc "$dir/f32.out")"
echo "| preset | imatrix | MiB | PPL | mean KLD | 99% KLD | same top | max dlogit | mean dlogit | MTP acceptance |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
row() {   # preset, label, extra quantize flags...
    local p=$1 label=$2
    shift 2
    "$NEXTN" quantize "$@" "$dir/f32.gguf" "$dir/$p.gguf" "$p" "$threads" >"$dir/$p.q" 2>&1 || { echo "| $p | $label | failed |"; return; }
    "$NEXTN" perplexity -m "$dir/$p.gguf" --kl-divergence-base "$dir/f32.kld" --kl-divergence -t "$threads" >"$dir/$p.out" 2>/dev/null
    local mib ppl kl kl99 top
    mib=$(sed -n 's/^quant size  = *\([0-9.]*\) MiB/\1/p' "$dir/$p.q")
    ppl=$(sed -n 's/^Mean PPL(Q) *: *\([0-9.]*\).*/\1/p' "$dir/$p.out")
    kl=$(sed -n 's/^Mean    KLD: *\([0-9.]*\).*/\1/p' "$dir/$p.out")
    kl99=$(sed -n 's/^99.0%   KLD: *\([0-9.]*\).*/\1/p' "$dir/$p.out")
    top=$(sed -n 's/^Same top p: *\([0-9.]*\).*/\1/p' "$dir/$p.out")
    echo "| $p | $label | $mib | $ppl | $kl | $kl99 | $top % | $(dlogit "$dir/$p.gguf") | $(acc "$dir/$p.out") |"
}
for p in F16 BF16 Q8_0 Q6_K Q5_K_M Q5_K_S Q5_1 Q5_0 Q4_K_M Q4_K_S Q4_1 Q4_0 IQ4_XS IQ4_NL; do
    row "$p" no
    case $p in Q6_K|Q5_K_M|Q4_K_M|Q4_K_S|Q4_0|IQ4_XS)
        row "$p" yes --imatrix "$dir/cal.gguf"
        row "$p" "yes, no MTP warmup" --imatrix "$dir/cal-nomtp.gguf" ;;
    esac
done
