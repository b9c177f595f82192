#!/usr/bin/env bash
# convert_qwen35.test.sh — `nextn convert` (HF checkpoint -> qwen35 GGUF) against an independent
# float64 numpy forward of the HF weights in HF layout (tests/ref/hf_qwen35.py):
#   (a) a synthetic Qwen3_5ForCausalLM checkpoint (and a Qwen3_5MoeForCausalLM one) with an MTP layer (random weights, F32 + F16 +
#       BF16 tensors, 2 shards + index, tokenizer padded to vocab_size, K != V heads so the V-head
#       reorder runs) -> --outtype f32 -> `nextn eval` (f32 KV) logits, hidden, MTP prompt logits and
#       3 chained draft logits within 1e-3 of the reference (golden README bound), same draft ids;
#       f16 / bf16 / q8_0 outputs load and run;
#   (b) round trip: the bundled GGUF exported to an HF checkpoint (inverse transforms in python),
#       converted back: --outtype q8_0 bit-identical to the shipped file (all tensors, tokenizer and
#       model keys), --outtype f32 equal after dequantization;
#   (c) clear errors: missing config / tokenizer / shard, unsupported architecture, unknown tensor,
#       truncated safetensors, bad --outtype.
# Needs Debian's numpy (/usr/bin/python3). ~5 s.
set -u
NEXTN=${NEXTN:-build/nextn}
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
REF=tests/ref/hf_qwen35.py
work="$(mktemp -d "${TMPDIR:-/tmp}/nx_convert.XXXXXX")"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ $# -gt 1 ] && echo "     $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi; }

# ---- (a) synthetic checkpoint vs the HF-layout reference ------------------------
"$py" "$REF" synth "$work/hf" --seed 7
check "synthetic checkpoint written (2 shards + index)" "[ -f '$work/hf/model-00002-of-00002.safetensors' ] && [ -f '$work/hf/model.safetensors.index.json' ]"
"$NEXTN" convert "$work/hf" --out "$work/s32.gguf" --outtype f32 >"$work/conv.out" 2>&1
check "convert --outtype f32" "[ $? -eq 0 ]" "$(tail -3 "$work/conv.out")"
"$NEXTN" gguf-info "$work/s32.gguf" --tensors >"$work/info.txt" 2>&1
for k in 'qwen35.block_count = 5' 'qwen35.nextn_predict_layers = 1' 'qwen35.rope.dimension_count = 8' \
         'qwen35.rope.dimension_sections = \[2, 1, 1, 0\]' 'qwen35.ssm.inner_size = 64' 'tokenizer.ggml.pre = "qwen35"' \
         'tokenizer.ggml.tokens = .*(300 items)' 'tokenizer.chat_template = ' 'general.sampling.top_k = 20' \
         '\[128, 64\] .* blk.4.nextn.eh_proj.weight' '\[4\] .* blk.0.ssm_a$' 'blk.0.ssm_dt.bias' \
         '\[4, 128\] .* blk.0.ssm_conv1d.weight' '\[64, 256\] .* blk.4.attn_q.weight'; do
  check "metadata / tensor: $k" "grep -Eq '$k' '$work/info.txt'"
done
IDS=5,17,260,100,33,7,261,80,200,42,1,255,64,99
# eval the converted model and the reference over IDS; compare within 1e-3, same drafts
vs_reference() {   # label, gguf, hf dir, tag
  "$NEXTN" eval -m "$2" --prompt-ids $IDS -ctk f32 -ctv f32 --logits-out "$work/$4_lg.f32" \
    --hidden-out "$work/$4_hd.f32" --drafts 3 --mtp-logits-out "$work/$4_ml.f32" --draft-logits-out "$work/$4_dl.f32" \
    >"$work/$4_drafts.json" 2>"$work/$4_eval.err"
  check "$1: eval of the converted model" "[ $? -eq 0 ]" "$(tail -3 "$work/$4_eval.err")"
  "$py" "$REF" ref "$3" "$work/$4_ref" --prompt-ids $IDS --drafts 3
  check "$1: reference forward" "[ -f '$work/$4_ref/draft_logits.f64' ]"
  "$py" - "$work" "$4" <<'PYEOF'
import json, sys
import numpy as np
w, tag = sys.argv[1], sys.argv[2]
bad = 0
for a, b in (("lg.f32", "logits.f64"), ("hd.f32", "hidden.f64"), ("ml.f32", "mtp_prompt_logits.f64"),
             ("dl.f32", "draft_logits.f64")):
    x = np.fromfile("%s/%s_%s" % (w, tag, a), np.float32).astype(np.float64)
    y = np.fromfile("%s/%s_ref/%s" % (w, tag, b), np.float64)
    err = np.abs(x - y).max() if x.shape == y.shape else float("inf")
    print("     %-22s max |d| %.2e (max |ref| %.2f)" % (b, err, np.abs(y).max()))
    bad += not err < 1e-3
e = json.load(open("%s/%s_drafts.json" % (w, tag)))
r = json.load(open("%s/%s_ref/drafts.json" % (w, tag)))
same = e["id_last"] == r["id_last"] and e["draft_tokens"] == r["draft_tokens"]
print("     drafts: engine %s, reference %s" % (e["draft_tokens"], r["draft_tokens"]))
sys.exit(1 if bad or not same else 0)
PYEOF
  check "$1: logits, hidden, MTP prompt and draft logits within 1e-3 of the HF reference; same drafts" "[ $? -eq 0 ]"
}
vs_reference dense "$work/s32.gguf" "$work/hf" dense
"$py" "$REF" synth "$work/hfm" --seed 8 --moe
"$NEXTN" convert "$work/hfm" --out "$work/m32.gguf" --outtype f32 >"$work/convm.out" 2>&1
check "moe: convert --outtype f32 (per-expert and fused gate_up experts)" "[ $? -eq 0 ]" "$(tail -3 "$work/convm.out")"
"$NEXTN" gguf-info "$work/m32.gguf" --tensors >"$work/infom.txt" 2>&1
for k in 'general.architecture = "qwen35moe"' 'qwen35moe.expert_count = 4' 'qwen35moe.expert_used_count = 2' \
         'qwen35moe.expert_feed_forward_length = 32' 'qwen35moe.expert_shared_feed_forward_length = 48' \
         '\[64, 32, 4\] .* blk.1.ffn_up_exps.weight' '\[32, 64, 4\] .* blk.4.ffn_down_exps.weight' \
         '\[64, 1\] .* blk.0.ffn_gate_inp_shexp.weight'; do
  check "moe metadata / tensor: $k" "grep -Eq '$k' '$work/infom.txt'"
done
vs_reference moe "$work/m32.gguf" "$work/hfm" moe
"$py" "$REF" synth "$work/hfv" --seed 7 --vl
"$NEXTN" convert "$work/hfv" --out "$work/v32.gguf" --outtype f32 -q >"$work/convv.out" 2>&1 &&
  "$py" "$REF" compare "$work/s32.gguf" "$work/v32.gguf" >"$work/cmpv.out" 2>&1
check "Qwen3_5ForConditionalGeneration layout (text_config, model.language_model.*, vision skipped) gives the same GGUF" \
  "[ $? -eq 0 ]" "$(cat "$work/convv.out"; grep -E 'FAIL|passed' "$work/cmpv.out" | head -5)"
for t in f16 bf16 q8_0; do
  "$NEXTN" convert "$work/hf" --out "$work/s_$t.gguf" --outtype $t -q >"$work/conv_$t.out" 2>&1 &&
    "$NEXTN" eval -m "$work/s_$t.gguf" --prompt-ids $IDS --drafts 2 >"$work/d_$t.json" 2>"$work/e_$t.err"
  check "convert --outtype $t loads and drafts" "[ $? -eq 0 ]" "$(cat "$work/conv_$t.out" "$work/e_$t.err" | tail -3)"
done
"$NEXTN" gguf-info "$work/s_q8_0.gguf" --tensors >"$work/info8.txt" 2>&1
check "q8_0: matrices q8_0; 1-D, norms and ssm_conv1d stay f32" "grep -Eq 'f32 .* blk.0.ssm_conv1d.weight' '$work/info8.txt' && grep -Eq 'q8_0 .* blk.0.attn_qkv.weight' '$work/info8.txt' && grep -Eq 'f32 .* blk.4.nextn.enorm.weight' '$work/info8.txt' && ! grep -Eq 'f16|bf16' '$work/info8.txt'"

# ---- (b) round trip of the bundled model ----------------------------------------
M=models/tiny-qwen35-mtp-q8_0.gguf
"$py" "$REF" export "$M" "$work/rt"
check "bundled model exported to an HF checkpoint" "[ -f '$work/rt/config.json' ]"
"$NEXTN" convert "$work/rt" --out "$work/rt_q8.gguf" --outtype q8_0 -q >"$work/rt.out" 2>&1
check "convert the export --outtype q8_0" "[ $? -eq 0 ]" "$(tail -3 "$work/rt.out")"
"$py" "$REF" compare "$M" "$work/rt_q8.gguf" >"$work/cmp.out" 2>&1
check "q8_0 round trip: every tensor and key equals the shipped file's" "[ $? -eq 0 ]" "$(grep -E 'FAIL|passed' "$work/cmp.out" | head -5)"
grep -E 'tensors' "$work/cmp.out" | sed 's/^/     /'
"$NEXTN" convert "$work/rt" --out "$work/rt_f32.gguf" --outtype f32 -q >"$work/rt32.out" 2>&1 &&
  "$py" "$REF" compare "$M" "$work/rt_f32.gguf" --values >"$work/cmp32.out" 2>&1
check "f32 round trip: every tensor equals the shipped one after dequantization" "[ $? -eq 0 ]" "$(grep -E 'FAIL|passed' "$work/cmp32.out" | head -5)"

# ---- (c) errors -----------------------------------------------------------------
err_case() {   # name, expected message regex, dir
  "$NEXTN" convert "$3" --out "$work/e.gguf" -q >"$work/err.out" 2>&1
  rc=$?
  check "error: $1" "[ $rc -eq 1 ] && grep -Eq '$2' '$work/err.out' && [ ! -f '$work/e.gguf' ]" "rc $rc: $(cat "$work/err.out")"
}
cp -r "$work/hf" "$work/x1" && rm "$work/x1/config.json"
err_case "missing config.json" "missing .*config.json" "$work/x1"
cp -r "$work/hf" "$work/x2" && rm "$work/x2/tokenizer.json"
err_case "missing tokenizer.json" "missing .*tokenizer.json" "$work/x2"
cp -r "$work/hf" "$work/x3" && rm "$work/x3/model-00002-of-00002.safetensors"
err_case "missing shard" "missing shard .*model-00002-of-00002.safetensors" "$work/x3"
cp -r "$work/hf" "$work/x4" && sed -i 's/Qwen3_5ForCausalLM/LlamaForCausalLM/' "$work/x4/config.json"
err_case "unsupported architecture" "architecture LlamaForCausalLM is not supported" "$work/x4"
cp -r "$work/hf" "$work/x5" && truncate -s -100 "$work/x5/model-00001-of-00002.safetensors"
err_case "truncated safetensors" "past the data section" "$work/x5"
cp -r "$work/hf" "$work/x6" && sed -i 's/"linear_num_key_heads": 2,//' "$work/x6/config.json"
err_case "missing config key" "missing .linear_num_key_heads." "$work/x6"
cp -r "$work/hf" "$work/x7" && sed -i 's/model.norm.weight/model.norm.scales/' "$work/x7/model.safetensors.index.json" "$work/x7"/model-0000*.safetensors
err_case "unknown tensor" "model.norm.scales.*no GGUF name" "$work/x7"
"$NEXTN" convert "$work/hf" --out "$work/e.gguf" --outtype q4_k >"$work/err.out" 2>&1
check "error: bad --outtype" "[ $? -eq 2 ] && grep -q 'outtype must be' '$work/err.out'"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
