#!/usr/bin/env bash
# quantize_cli.test.sh — `nextn perplexity`, `nextn imatrix` and `nextn quantize` on the bundled
# trained model and its held-out text:
#   perplexity: llama-perplexity's output shape, 9 chunks of 256 on heldout.py.txt, the estimate
#   within 0.5% of ik_llama.cpp's 21.6665 for this Q8_0 file (models/README.md; the residual is
#   the activation rounding of the two engines' Q8_0 kernels), the MTP acceptance line; the KL base
#   file in llama-perplexity's layout (size from its header: "_logits_", 3 i32, the tokens, 127
#   scored rows per chunk of 4 + n_vocab u16); KL of a model against its own saved logits ~0 with
#   the same top token everywhere;
#   imatrix: GGUF and legacy .dat from a calibration text that is not the held-out one
#   (tests/data/quant/calib.py.txt, Python's shlex.py), MTP layer entries only with the warmup;
#   quantize: Q4_K_M with either imatrix file has a lower KL divergence against the F32 model on
#   the held-out text than without; Q3_K_M and Q2_K files load and run (perplexity, run); refusals
#   (requantize, unknown type, too short a text).
set -u
NEXTN=${NEXTN:-build/nextn}
work="$(mktemp -d "${TMPDIR:-/tmp}/nx_quantize_cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ $# -gt 1 ] && echo "     $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi; }

M=models/tiny-qwen35-mtp-q8_0.gguf
H=models/heldout.py.txt
C=tests/data/quant/calib.py.txt

# ---- perplexity -------------------------------------------------------------
"$NEXTN" perplexity -m "$M" -f "$H" -c 256 -t 2 --kl-divergence-base "$work/q8.kld" >"$work/ppl.out" 2>"$work/ppl.err"
check "perplexity runs" "[ $? -eq 0 ]" "$(tail -3 "$work/ppl.err")"
check "9 running values" "grep -q '^\[1\][0-9.]*,.*\[9\][0-9.]*,$' '$work/ppl.out'" "$(head -1 "$work/ppl.out")"
ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- [0-9.]*$/\1/p' "$work/ppl.out")
check "final estimate line" "[ -n '$ppl' ]" "$(cat "$work/ppl.out")"
check "PPL $ppl within 0.5% of ik_llama.cpp's 21.6665" "awk -v p='${ppl:-0}' 'BEGIN { d = p / 21.6665 - 1; exit !(d < 0.005 && d > -0.005) }'"
check "MTP acceptance reported" "grep -q '^MTP first-draft acceptance .*: 0\.[0-9]* ([0-9]* / 2295)$' '$work/ppl.out'" "$(tail -2 "$work/ppl.out")"
"$NEXTN" perplexity -m "$M" --kl-divergence-base "$work/q8.kld" --kl-divergence -t 2 >"$work/self.out" 2>&1
check "base file in llama-perplexity's layout" "[ \"\$(head -c 8 '$work/q8.kld')\" = _logits_ ] && [ \$(stat -c %s '$work/q8.kld') -eq \$((8 + 12 + 4 * 9 * 256 + 9 * 127 * (4096 + 4) * 2)) ]" "$(stat -c %s "$work/q8.kld")"
check "KL of a model against itself ~0" "awk '/^Mean    KLD:/ { found = 1; exit !(\$3 < 1e-5) } END { if (!found) exit 1 }' '$work/self.out'" "$(grep KLD "$work/self.out")"
check "same top token everywhere" "grep -q '^Same top p: 100.0000' '$work/self.out'" "$(grep 'Same top' "$work/self.out")"
head -c 300 "$H" >"$work/short.txt"
"$NEXTN" perplexity -m "$M" -f "$work/short.txt" -c 256 >/dev/null 2>"$work/short.err"
check "too short a text: error" "[ $? -eq 1 ] && grep -q 'you need at least 512 tokens' '$work/short.err'" "$(cat "$work/short.err")"
printf 'not a base file' >"$work/bad.kld"
"$NEXTN" perplexity -m "$M" --kl-divergence-base "$work/bad.kld" --kl-divergence >/dev/null 2>"$work/bad.err"
check "bad KL base file: error" "[ $? -eq 1 ] && grep -q 'is not a KL-divergence base file' '$work/bad.err'" "$(cat "$work/bad.err")"

# ---- quantize refusals and the F32 reference ---------------------------------
"$NEXTN" quantize "$M" "$work/x.gguf" Q4_K_M 2 >/dev/null 2>"$work/rq.err"
check "requantize refused" "[ $? -eq 1 ] && grep -q 'requantizing from type q8_0 is disabled' '$work/rq.err' && [ ! -e '$work/x.gguf' ]" "$(cat "$work/rq.err")"
"$NEXTN" quantize "$M" "$work/x.gguf" Q9_K 2 >/dev/null 2>"$work/ut.err"
check "unknown type: usage error" "[ $? -eq 2 ] && grep -q \"unknown type 'Q9_K'\" '$work/ut.err'" "$(cat "$work/ut.err")"
"$NEXTN" quantize --allow-requantize "$M" "$work/f32.gguf" F32 2 >"$work/f32.out" 2>&1
check "Q8_0 -> F32 with --allow-requantize" "[ $? -eq 0 ] && grep -q '^67 tensors, 39 quantized' '$work/f32.out'" "$(tail -2 "$work/f32.out")"
cp "$M" "$work/m.gguf"
"$NEXTN" quantize --allow-requantize "$work/m.gguf" 7 2 >"$work/dflt.out" 2>&1   # IN TYPE nthreads: default output name
check "default output name" "[ -e '$work/ggml-model-Q8_0.gguf' ] && grep -q \"to '$work/ggml-model-Q8_0.gguf'\" '$work/dflt.out'" "$(head -2 "$work/dflt.out")"

# ---- imatrix -----------------------------------------------------------------
"$NEXTN" imatrix -m "$work/f32.gguf" -f "$C" -c 256 -t 2 -o "$work/cal.gguf" >"$work/im.out" 2>&1
check "imatrix (GGUF)" "[ $? -eq 0 ] && grep -q '38 entries (8 of the MTP layer) from 13 chunks' '$work/im.out'" "$(tail -2 "$work/im.out")"
"$NEXTN" imatrix -m "$work/f32.gguf" -f "$C" -c 256 -t 2 -o "$work/cal.dat" >"$work/imd.out" 2>&1
check "imatrix (legacy .dat)" "[ $? -eq 0 ] && grep -q 'legacy .dat' '$work/imd.out'" "$(tail -2 "$work/imd.out")"
"$NEXTN" gguf-info "$work/cal.gguf" --tensors >"$work/cal.info" 2>&1
check "GGUF imatrix layout" "grep -q 'general.type.*imatrix' '$work/cal.info' && grep -q 'blk.4.nextn.eh_proj.weight.in_sum2' '$work/cal.info' && grep -q 'blk.4.ffn_down.weight.counts' '$work/cal.info'" "$(head -20 "$work/cal.info")"
"$NEXTN" imatrix -m "$work/f32.gguf" -f "$C" -c 256 -t 2 --no-mtp-warmup -o "$work/nomtp.gguf" >"$work/nomtp.out" 2>&1
check "no MTP entries without the warmup" "grep -q '30 entries (0 of the MTP layer)' '$work/nomtp.out'" "$(tail -1 "$work/nomtp.out")"

# ---- Q4_K_M with and without an importance matrix ----------------------------
"$NEXTN" perplexity -m "$work/f32.gguf" -f "$H" -c 256 -t 2 --kl-divergence-base "$work/f32.kld" >/dev/null 2>&1
kld() { "$NEXTN" perplexity -m "$1" --kl-divergence-base "$work/f32.kld" --kl-divergence -t 2 2>/dev/null | awk '/^Mean    KLD:/ { print $3 }'; }
"$NEXTN" quantize "$work/f32.gguf" "$work/plain.gguf" Q4_K_M 2 >/dev/null 2>&1
"$NEXTN" quantize --imatrix "$work/cal.gguf" "$work/f32.gguf" "$work/im.gguf" Q4_K_M 2 >"$work/qim.out" 2>&1
# 38 entries; token_embd (tied, never a blk.* matmul) has none, and one Q6_K pick falls back to Q8_0 (no weighted path)
check "quantize --imatrix GGUF" "grep -q '39 quantized (37 with the imatrix)' '$work/qim.out'" "$(tail -2 "$work/qim.out")"
"$NEXTN" quantize --imatrix "$work/cal.dat" "$work/f32.gguf" "$work/imd.gguf" Q4_K_M 2 >/dev/null 2>&1
k0=$(kld "$work/plain.gguf"); k1=$(kld "$work/im.gguf"); k2=$(kld "$work/imd.gguf")
echo "     Q4_K_M mean KLD vs F32 on held-out text: plain $k0, imatrix (gguf) $k1, imatrix (dat) $k2"
check "imatrix (gguf) lowers KL: $k1 < $k0" "awk -v a='${k1:-1}' -v b='${k0:-0}' 'BEGIN { exit !(a < b) }'"
check "imatrix (dat) lowers KL: $k2 < $k0" "awk -v a='${k2:-1}' -v b='${k0:-0}' 'BEGIN { exit !(a < b) }'"
# --chunks / --chunk / --in-file: two halves merged give (up to F32 rounding of the first half's sums) the whole
"$NEXTN" imatrix -m "$work/f32.gguf" -f "$C" -c 256 -t 2 --chunks 6 -o "$work/h1.gguf" >/dev/null 2>&1
"$NEXTN" imatrix -m "$work/f32.gguf" -f "$C" -c 256 -t 2 --chunk 6 --in-file "$work/h1.gguf" -o "$work/h12.gguf" >"$work/h12.out" 2>&1
check "--in-file merges" "grep -q 'from 7 chunks (+6 from --in-file)' '$work/h12.out'" "$(tail -1 "$work/h12.out")"
"$NEXTN" quantize --imatrix "$work/h12.gguf" "$work/f32.gguf" "$work/im12.gguf" Q4_K_M 2 >/dev/null 2>&1
k3=$(kld "$work/im12.gguf")
check "merged halves: KL $k3 within 2% of the whole text's $k1" "awk -v a='${k3:-1}' -v b='${k1:-0}' 'BEGIN { d = a / b - 1; exit !(d < 0.02 && d > -0.02) }'"
"$NEXTN" gguf-info "$work/im.gguf" >"$work/im.info" 2>&1
check "imatrix recorded in the metadata" "grep -q 'quantize.imatrix.file' '$work/im.info' && grep -q 'general.file_type.*15' '$work/im.info'" "$(grep -E 'file_type|imatrix' "$work/im.info")"

# ---- --tensor-type: the MTP layer kept at Q8_0 ---------------------------------
"$NEXTN" quantize --tensor-type 'blk\.4\.=q8_0' "$work/f32.gguf" "$work/mtp8.gguf" Q4_K_M 2 >/dev/null 2>&1
"$NEXTN" gguf-info "$work/mtp8.gguf" --tensors >"$work/mtp8.info" 2>&1
check "--tensor-type overrides the MTP layer" "[ \$(grep -c 'q8_0 .* blk\.4\.' '$work/mtp8.info') -eq 8 ] && grep -q 'q6_K .* blk\.2\.ffn_down' '$work/mtp8.info'" "$(grep 'blk.4' "$work/mtp8.info" | head -4)"
"$NEXTN" quantize --tensor-type '(=q8_0' "$work/f32.gguf" "$work/bad.gguf" Q4_K_M 2 >/dev/null 2>"$work/re.err"
check "bad --tensor-type regex: error" "[ $? -eq 1 ] && grep -q 'bad regular expression' '$work/re.err' && [ ! -e '$work/bad.gguf' ]" "$(cat "$work/re.err")"

# ---- Q3_K_M / Q2_K: written and run by nextn (the Q3_K / Q2_K matmul kernels) ----
for T in Q3_K_M Q2_K; do
    case "$T" in Q3_K_M) t=q3_K ;; *) t=q2_K ;; esac
    "$NEXTN" quantize --allow-requantize "$M" "$work/$T.gguf" "$T" 2 >"$work/$T.q" 2>&1
    "$NEXTN" gguf-info "$work/$T.gguf" --tensors >"$work/$T.info" 2>&1
    check "$T written with $t tensors" "grep -q ' $t ' '$work/$T.info'" "$(tail -2 "$work/$T.q")"
    "$NEXTN" perplexity -m "$work/$T.gguf" -f "$H" -c 256 --chunks 2 -t 2 >"$work/$T.ppl" 2>&1
    p=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$work/$T.ppl")
    # first 2 chunks: 27.26 (Q3_K_M) / 28.65 (Q2_K) against the Q8_0 file's 26.25; a wrong kernel gives hundreds
    check "$T perplexity runs: PPL $p < 33 (Q8_0: 26.25)" "awk -v p='${p:-1e9}' 'BEGIN { exit !(p > 1 && p < 33) }'" "$(tail -3 "$work/$T.ppl")"
    "$NEXTN" run -m "$work/$T.gguf" -p 'def main():' -n 8 --temp 0 -t 2 >"$work/$T.run" 2>"$work/$T.rerr"
    check "$T run generates" "[ $? -eq 0 ] && [ -s '$work/$T.run' ] && grep -q 'generated 8 tokens' '$work/$T.rerr'" "$(tail -2 "$work/$T.rerr")"
done

# ---- MoE: per-expert entries, used per expert ---------------------------------
"$NEXTN" gen-model --arch qwen35moe --out "$work/moe.gguf" --seed 5 \
    --config-json '{"n_embd":256,"n_ff_exp":256,"n_ff_shexp":256,"head_dim":64,"ssm_head_dim":64}' >/dev/null 2>&1
"$NEXTN" imatrix -m "$work/moe.gguf" -f "$C" -c 128 --chunks 4 -t 2 -o "$work/moe.gguf.im" --output-format gguf >/dev/null 2>&1
"$NEXTN" gguf-info "$work/moe.gguf.im" --tensors >"$work/moe.info" 2>&1
check "MoE imatrix: one row per expert" "grep -Eq '\\[256, 8\\] .* blk.0.ffn_down_exps.weight.in_sum2' '$work/moe.info' && grep -Eq '\\[1, 8\\] .* blk.0.ffn_down_exps.weight.counts' '$work/moe.info'" "$(grep exps "$work/moe.info" | head -3)"
"$NEXTN" quantize --imatrix "$work/moe.gguf.im" "$work/moe.gguf" "$work/moe-q.gguf" Q4_K_M 2 >"$work/moeq.out" 2>&1
check "MoE quantize with the imatrix" "[ $? -eq 0 ] && grep -q 'blk.0.ffn_down_exps.weight .* converting to q4_K (imatrix)' '$work/moeq.out'" "$(tail -2 "$work/moeq.out")"
"$NEXTN" perplexity -m "$work/moe-q.gguf" -f "$C" -c 128 --chunks 2 -t 2 >"$work/moep.out" 2>&1
check "MoE Q4_K_M runs" "grep -q '^Final estimate: PPL = ' '$work/moep.out'" "$(tail -2 "$work/moep.out")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
