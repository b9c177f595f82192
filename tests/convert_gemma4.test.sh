#!/usr/bin/env bash
# convert_gemma4.test.sh — `nextn convert` for Gemma 4 (HF checkpoint -> gemma4 GGUF, and the
# Gemma4AssistantForCausalLM drafter -> gemma4-assistant GGUF) against an independent float64 numpy
# forward of the HF weights in HF layout (tests/ref/hf_gemma4.py):
#   (a) a synthetic Gemma4ForCausalLM checkpoint (iSWA with per-type head dims / kv heads,
#       proportional partial RoPE, k_eq_v full layers, KV-shared layers, per-layer embeddings,
#       layer_scalar, soft-cap; F32 + F16 + BF16, 2 shards) -> --outtype f32 -> `nextn eval`
#       (f32 KV) logits and post-norm hidden within 1e-3 of the reference (golden README bound);
#       the same with a MoE block on every layer; the Gemma4ForConditionalGeneration layout gives
#       the same file; metadata keys / tensor names and shapes as llama.cpp's converter writes them;
#   (b) the assistant (centroid head included) -> its drafts fed the target's hidden states the
#       way nextn's assistant does: dense-head draft logits within 1e-3 and the same draft ids,
#       and the masked (centroid) head chain's ids and logits;
#       the golden gemma4-tiny(-centroid) target and assistant exported to HF checkpoints and
#       converted back: every tensor bit-identical, every gemma4.* / gemma4-assistant.* key equal;
#   (c) f16 / bf16 / q8_0 outputs load and draft;
#   (d) clear errors: FP8 checkpoint (quantization_config, F8_E4M3 tensor), missing layer_types,
#       an assistant tensor in a target, missing weights, an assistant without a tokenizer,
#       unsupported architecture.
# Needs Debian's numpy (/usr/bin/python3). A few seconds.
set -u
NEXTN=${NEXTN:-build/nextn}
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
REF=tests/ref/hf_gemma4.py
work="$(mktemp -d "${TMPDIR:-/tmp}/nx_convert_g4.XXXXXX")"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ $# -gt 1 ] && echo "     $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi; }

IDS=2,17,260,100,33,7,261,80,200,42,1,255,64,99

# compare.py WORK TAG [ASST]: engine outputs vs the reference, 1e-3, same draft ids
cat >"$work/compare.py" <<'PYEOF'
import json, sys
import numpy as np
w, tag, asst = sys.argv[1], sys.argv[2], len(sys.argv) > 3
bad = 0
pairs = [("lg.f32", "logits.f64"), ("hd.f32", "hidden.f64")]
if asst:
    pairs += [("dl.f32", "draft_logits.f64"), ("mdl.f32", "masked_draft_logits.f64")]
for a, b in pairs:
    x = np.fromfile("%s/%s_%s" % (w, tag, a), np.float32).astype(np.float64)
    y = np.fromfile("%s/%s_ref/%s" % (w, tag, b), np.float64)
    err = np.abs(x - y).max() if x.shape == y.shape else float("inf")
    print("     %-24s max |d| %.2e (max |ref| %.2f)" % (b, err, np.abs(y).max()))
    bad += not err < 1e-3
r = json.load(open("%s/%s_ref/drafts.json" % (w, tag)))
if asst:
    e = json.load(open("%s/%s_drafts.json" % (w, tag)))
    m = json.load(open("%s/%s_mdrafts.json" % (w, tag)))
    same = e["id_last"] == r["id_last"] and e["draft_tokens"] == r["draft_tokens"] and \
        m["masked_head"]["draft_tokens"] == r["masked_draft_tokens"]
    print("     drafts: engine %s / masked %s, reference %s / %s" % (e["draft_tokens"], m["masked_head"]["draft_tokens"],
                                                                  r["draft_tokens"], r["masked_draft_tokens"]))
    bad += not same
sys.exit(1 if bad else 0)
PYEOF

vs_reference() {   # label, target gguf, target hf, tag, [assistant gguf, assistant hf]
  local drafts=()
  [ $# -gt 4 ] && drafts=(--drafts 3 --draft-model "$5" --draft-logits-out "$work/$4_dl.f32")
  "$NEXTN" eval -m "$2" --prompt-ids $IDS -ctk f32 -ctv f32 --logits-out "$work/$4_lg.f32" \
    --hidden-out "$work/$4_hd.f32" "${drafts[@]}" >"$work/$4_drafts.json" 2>"$work/$4_eval.err"
  check "$1: eval of the converted model" "[ $? -eq 0 ]" "$(tail -3 "$work/$4_eval.err")"
  if [ $# -gt 4 ]; then
    "$NEXTN" eval -m "$2" --prompt-ids $IDS -ctk f32 -ctv f32 --drafts 3 --draft-model "$5" --masked-head \
      --masked-draft-logits-out "$work/$4_mdl.f32" >"$work/$4_mdrafts.json" 2>"$work/$4_meval.err"
    check "$1: eval with the masked (centroid) head" "[ $? -eq 0 ]" "$(tail -3 "$work/$4_meval.err")"
  fi
  "$py" "$REF" ref "$3" "${6:--}" "$work/$4_ref" --prompt-ids $IDS --drafts 3
  check "$1: reference forward" "[ -f '$work/$4_ref/hidden.f64' ]"
  "$py" "$work/compare.py" "$work" "$4" ${5:+asst}
  check "$1: within 1e-3 of the HF reference${5:+ (target logits / hidden, dense and masked draft logits), same drafts}" "[ $? -eq 0 ]"
}

# ---- (a) target ---------------------------------------------------------------
"$py" "$REF" synth "$work/hf" --seed 3
check "synthetic Gemma4ForCausalLM checkpoint written" "[ -f '$work/hf/model-00002-of-00002.safetensors' ]"
"$py" "$REF" synth-asst "$work/as" "$work/hf" --seed 4
check "synthetic Gemma4AssistantForCausalLM checkpoint written" "[ -f '$work/as/model.safetensors' ]"
"$NEXTN" convert "$work/hf" --out "$work/t32.gguf" --outtype f32 >"$work/conv.out" 2>&1
check "convert target --outtype f32" "[ $? -eq 0 ]" "$(tail -3 "$work/conv.out")"
"$NEXTN" convert "$work/as" --out "$work/a32.gguf" --outtype f32 >"$work/conva.out" 2>&1
check "convert assistant --outtype f32" "[ $? -eq 0 ]" "$(tail -3 "$work/conva.out")"
"$NEXTN" gguf-info "$work/t32.gguf" --tensors >"$work/info.txt" 2>&1
for k in 'general.architecture = "gemma4"' 'gemma4.block_count = 6' 'gemma4.attention.head_count_kv = \[2, 1, 2, 1, 2, 1\]' \
         'gemma4.attention.key_length = 64' 'gemma4.attention.key_length_swa = 32' 'gemma4.attention.value_length_swa = 32' \
         'gemma4.attention.sliding_window = 4' 'gemma4.attention.shared_kv_layers = 2' \
         'gemma4.attention.sliding_window_pattern = \[true, false, true, false, true, false\]' \
         'gemma4.rope.dimension_count = 64' 'gemma4.rope.dimension_count_swa = 32' 'gemma4.rope.freq_base = 1e\+06' \
         'gemma4.rope.freq_base_swa = 10000' 'gemma4.embedding_length_per_layer_input = 8' \
         'gemma4.final_logit_softcapping = 30' 'tokenizer.ggml.model = "gemma4"' 'tokenizer.ggml.tokens = .*(300 items)' \
         'general.sampling.top_k = 64' 'tokenizer.chat_template = ' \
         '\[32\] .* rope_freqs.weight' '\[64, 300\] .* token_embd.weight' '\[48, 300\] .* per_layer_token_embd.weight' \
         '\[64, 48\] .* per_layer_model_proj.weight' '\[8\] .* per_layer_proj_norm.weight' \
         '\[64, 64\] .* blk.1.attn_k.weight' '\[1\] .* blk.0.layer_output_scale.weight' '\[64, 8\] .* blk.0.inp_gate.weight' \
         '\[8, 64\] .* blk.0.proj.weight' 'blk.0.post_norm.weight' 'blk.0.attn_v.weight' '\[256, 64\] .* blk.5.attn_output.weight'; do
  check "metadata / tensor: $k" "grep -Eq '$k' '$work/info.txt'"
done
"$py" - "$work/t32.gguf" <<'PYEOF'
import sys
sys.path.insert(0, "tests/ref")
import gguf_np
g = gguf_np.GGUF(sys.argv[1])
tok, ty = list(g.kv["tokenizer.ggml.tokens"]), list(g.kv["tokenizer.ggml.token_type"])
# llama.cpp's Gemma4Model: the channel / tool-call markers USER_DEFINED (4), other specials CONTROL (3)
want = {"<|channel>": 4, "<channel|>": 4, "<start_of_turn>": 3, "<bos>": 3, "<0x41>": 6, "[PAD299]": 5}
sys.exit(0 if all(ty[tok.index(t)] == v for t, v in want.items()) else 1)
PYEOF
check "token types: <|channel> / <channel|> USER_DEFINED, other specials CONTROL, <0xNN> BYTE, padding UNUSED" "[ $? -eq 0 ]"
check "k_eq_v full layers have no attn_v; KV-shared layers no attn_k" \
  "! grep -Eq 'blk\.1\.attn_v|blk\.3\.attn_v|blk\.4\.attn_k\.|blk\.5\.attn_k\.' '$work/info.txt'"
"$NEXTN" gguf-info "$work/a32.gguf" --tensors >"$work/infoa.txt" 2>&1
for k in 'general.architecture = "gemma4-assistant"' 'gemma4-assistant.embedding_length = 32' \
         'gemma4-assistant.embedding_length_out = 64' 'gemma4-assistant.nextn_predict_layers = 2' \
         'gemma4-assistant.n_centroids = 10' 'gemma4-assistant.centroid_top_k = 3' \
         'gemma4-assistant.use_ordered_embeddings = true' 'gemma4-assistant.attention.sliding_window_pattern = \[true, false\]' \
         '\[128, 32\] .* nextn.pre_projection.weight' '\[32, 64\] .* nextn.post_projection.weight' \
         '\[32, 10\] .* masked_embd_centroids.weight' 'i32 .*\[300\] .* masked_embd_ordering' '\[32\] .* rope_freqs.weight'; do
  check "assistant metadata / tensor: $k" "grep -Eq '$k' '$work/infoa.txt'"
done
vs_reference "dense + assistant" "$work/t32.gguf" "$work/hf" dense "$work/a32.gguf" "$work/as"

"$py" "$REF" synth "$work/hfm" --seed 5 --moe
"$NEXTN" convert "$work/hfm" --out "$work/m32.gguf" --outtype f32 -q >"$work/convm.out" 2>&1
check "moe: convert --outtype f32" "[ $? -eq 0 ]" "$(tail -3 "$work/convm.out")"
"$NEXTN" gguf-info "$work/m32.gguf" --tensors >"$work/infom.txt" 2>&1
for k in 'gemma4.expert_count = 4' 'gemma4.expert_used_count = 2' 'gemma4.expert_feed_forward_length = 16' \
         '\[64, 32, 4\] .* blk.0.ffn_gate_up_exps.weight' '\[16, 64, 4\] .* blk.0.ffn_down_exps.weight' \
         'f32 .*\[64, 4\] .* blk.0.ffn_gate_inp.weight' '\[64\] .* blk.0.ffn_gate_inp.scale' '\[4\] .* blk.0.ffn_down_exps.scale' \
         'blk.0.pre_ffw_norm_2.weight' 'blk.0.post_ffw_norm_1.weight' 'blk.0.post_ffw_norm_2.weight'; do
  check "moe metadata / tensor: $k" "grep -Eq '$k' '$work/infom.txt'"
done
vs_reference moe "$work/m32.gguf" "$work/hfm" moe

"$py" "$REF" synth "$work/hfc" --seed 3 --cond
"$NEXTN" convert "$work/hfc" --out "$work/c32.gguf" --outtype f32 -q >"$work/convc.out" 2>&1 &&
  "$py" tests/ref/hf_qwen35.py compare "$work/t32.gguf" "$work/c32.gguf" >"$work/cmpc.out" 2>&1
check "Gemma4ForConditionalGeneration layout (text_config, model.language_model.*, vision skipped) gives the same GGUF" \
  "[ $? -eq 0 ]" "$(cat "$work/convc.out"; grep -E 'FAIL|passed' "$work/cmpc.out" | head -5)"

# ---- (b2) round trip of the golden gemma4 files ---------------------------------
for case in gemma4-tiny gemma4-tiny-centroid; do
  for f in model assistant; do
    G=tests/data/golden/$case/$f.gguf
    "$py" "$REF" export "$G" "$work/rt_${case}_$f" &&
      "$NEXTN" convert "$work/rt_${case}_$f" --out "$work/rt_${case}_$f.gguf" --outtype f32 -q >"$work/rt.out" 2>&1 &&
      "$py" "$REF" compare "$G" "$work/rt_${case}_$f.gguf" >"$work/cmp.out" 2>&1
    check "round trip $case/$f.gguf (HF export, convert): every tensor bit-identical, every model key equal" \
      "[ $? -eq 0 ]" "$(cat "$work/rt.out"; grep -E 'FAIL|passed' "$work/cmp.out" | head -5)"
    grep -E 'tensors' "$work/cmp.out" | sed 's/^/     /'
    rm -rf "$work/rt_${case}_$f"
  done
done

# ---- (c) other output types -------------------------------------------------------
for t in f16 bf16 q8_0; do
  "$NEXTN" convert "$work/hf" --out "$work/t_$t.gguf" --outtype $t -q >"$work/conv_$t.out" 2>&1 &&
    "$NEXTN" convert "$work/as" --out "$work/a_$t.gguf" --outtype $t -q >>"$work/conv_$t.out" 2>&1 &&
    "$NEXTN" eval -m "$work/t_$t.gguf" --prompt-ids $IDS --drafts 2 --draft-model "$work/a_$t.gguf" >"$work/d_$t.json" 2>"$work/e_$t.err"
  check "convert --outtype $t (target + assistant) loads and drafts" "[ $? -eq 0 ]" "$(cat "$work/conv_$t.out" "$work/e_$t.err" | tail -3)"
done

# ---- (d) errors -----------------------------------------------------------------
err_case() {   # name, expected message regex, dir
  "$NEXTN" convert "$3" --out "$work/e.gguf" -q >"$work/err.out" 2>&1
  rc=$?
  check "error: $1" "[ $rc -eq 1 ] && grep -Eq '$2' '$work/err.out' && [ ! -f '$work/e.gguf' ]" "rc $rc: $(cat "$work/err.out")"
}
cp -r "$work/hf" "$work/x1" && "$py" - "$work/x1/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3"}
json.dump(c, open(sys.argv[1], "w"))
PYEOF
err_case "FP8 checkpoint (quantization_config)" "quantized checkpoint .*fp8.*FP8 weights is not supported" "$work/x1"
cp -r "$work/hf" "$work/x2" && "$py" - "$work/x2/model-00001-of-00002.safetensors" <<'PYEOF'
import json, struct, sys
# the BF16 tensors re-declared as F8_E4M3 (one byte each), offsets recomputed
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h, data = json.loads(raw[8:8 + n]), raw[8 + n:]
out, off = [], 0
for k in sorted(k for k in h if k != "__metadata__"):
    e = h[k]
    b = data[e["data_offsets"][0]:e["data_offsets"][1]]
    if e["dtype"] == "BF16":
        e["dtype"], b = "F8_E4M3", b[::2]
    e["data_offsets"] = [off, off + len(b)]
    out.append(b)
    off += len(b)
j = json.dumps(h).encode()
j += b" " * (-len(j) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(j)) + j + b"".join(out))
PYEOF
err_case "FP8 tensor dtype" "dtype F8_E4M3: FP8 checkpoints are not supported" "$work/x2"
cp -r "$work/hf" "$work/x3" && "$py" - "$work/x3/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); del c["layer_types"]
json.dump(c, open(sys.argv[1], "w"))
PYEOF
err_case "missing layer_types" "layer_types. must list the 6 layers" "$work/x3"
cp -r "$work/hf" "$work/x4" && sed -i 's/model.layers.0.layer_scalar/model.pre_projection.weight/' \
  "$work/x4/model.safetensors.index.json" "$work/x4"/model-0000*.safetensors
err_case "assistant tensor in a target" "model.pre_projection.weight.*assistant tensor in a target" "$work/x4"
cp -r "$work/as" "$work/x5" && rm "$work/x5/model.safetensors"
err_case "missing weights" "model.safetensors" "$work/x5"
cp -r "$work/as" "$work/x7" && rm "$work/x7/tokenizer.json"
err_case "assistant without a tokenizer" "missing .*tokenizer.json .*copy the target.s tokenizer.json" "$work/x7"
cp -r "$work/hf" "$work/x6" && sed -i 's/Gemma4ForCausalLM/Gemma3ForCausalLM/' "$work/x6/config.json"
err_case "unsupported architecture" "architecture Gemma3ForCausalLM is not supported .*Gemma4AssistantForCausalLM" "$work/x6"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
