#!/usr/bin/python3
"""hf_gemma4.py — Hugging Face side of the Gemma 4 `nextn convert` test (Debian numpy only, no torch).

  synth DIR [--seed S] [--moe] [--big]
                 a synthetic Gemma4ForCausalLM checkpoint in HF layout: iSWA layer_types with their
                 own head dims / kv heads, proportional partial RoPE on full layers, full layers
                 k_eq_v (no v_proj), KV-shared last layers (no k/v there), per-layer embeddings,
                 layer_scalar, final soft-cap; F32 + BF16 + F16 tensors in 2 shards + index,
                 a byte-fallback tokenizer (▁, <0xNN>) padded to vocab_size. --moe: every layer
                 also has the router + experts branch; --big: a few hundred MB (BF16), for memory
                 figures. --cond: the Gemma4ForConditionalGeneration layout (text_config,
                 model.language_model.*, a vision tower to skip).
  synth-asst DIR TARGET_DIR [--seed S]
                 a Gemma4AssistantForCausalLM checkpoint for that target (backbone_hidden_size,
                 pre/post projection, Q-only layers, masked_embedding centroids + I64 ordering).
  export GGUF DIR  a gemma4 / gemma4-assistant GGUF back to an HF checkpoint (config.json from the
                 keys, HF names and shapes, layer_scalar, int64 token ordering; the synthetic
                 tokenizer padded to the vocabulary): converting it back must give the same tensors
                 and model keys.
  ref TARGET_DIR ASST_DIR OUT --prompt-ids ... --drafts K
                 float64 forward of the HF weights in HF layout: logits / hidden (after the final
                 norm) of every prompt row, the assistant's draft chain (dense head) and the
                 masked-head chain, written as .f64 files + drafts.json.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_qwen35 as hq  # noqa: E402  (the hand-written safetensors writer)

hq.ST_DTYPE[np.dtype(np.int64)] = "I64"
BF16 = hq.BF16


# ---------------------------------------------------------------------------
# synthetic checkpoints
# ---------------------------------------------------------------------------

def tokenizer_files(d, n_vocab):
    """A Gemma-style byte-fallback BPE: <pad> <eos> <bos> <unk>, 256 <0xNN>, ▁ and a few pieces."""
    toks = ["<pad>", "<eos>", "<bos>", "<unk>"] + ["<0x%02X>" % b for b in range(256)]
    pieces = ["▁", "a", "b", "c", "t", "h", "e", "▁t", "he", "▁the"]
    merges = [["▁", "t"], ["h", "e"], ["▁t", "he"]]
    toks += pieces + ["<|channel>", "<channel|>", "<start_of_turn>"]
    special = {0, 1, 2, 3, len(toks) - 3, len(toks) - 2, len(toks) - 1}
    assert len(toks) <= n_vocab
    vocab = {t: i for i, t in enumerate(toks) if i not in special}
    added = [{"id": i, "content": toks[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in sorted(special)]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
          "pre_tokenizer": None, "post_processor": None,
          "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                       {"type": "ByteFallback"}, {"type": "Fuse"}]},
          "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                    "vocab": vocab, "merges": merges}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
                   "unk_token": "<unk>",
                   "chat_template": "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n"
                                    "{{ m.content }}<end_of_turn>\n{% endfor %}"}, f)


def rope_params(prf_full):
    return {"full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0, "partial_rotary_factor": prf_full},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}


def synth(d, seed=3, moe=False, big=False, cond=False):
    rng = np.random.default_rng(seed)
    if big:   # ~300 MB of BF16: a 64k vocabulary, 8 layers of width 1024
        cfg = dict(hidden_size=1024, num_hidden_layers=8, intermediate_size=4096, num_attention_heads=8,
                   num_key_value_heads=4, num_global_key_value_heads=2, head_dim=128, global_head_dim=256,
                   vocab_size=65536, sliding_window=512, num_kv_shared_layers=2, hidden_size_per_layer_input=64)
    else:
        cfg = dict(hidden_size=64, num_hidden_layers=6, intermediate_size=96, num_attention_heads=4,
                   num_key_value_heads=2, num_global_key_value_heads=1, head_dim=32, global_head_dim=64,
                   vocab_size=300, sliding_window=4, num_kv_shared_layers=2, hidden_size_per_layer_input=8)
    L = cfg["num_hidden_layers"]
    types = ["full_attention" if (i + 1) % 2 == 0 else "sliding_attention" for i in range(L)]
    cfg.update(architectures=["Gemma4ForCausalLM"], model_type="gemma4_text", layer_types=types,
               rope_parameters=rope_params(0.25), rms_norm_eps=1e-6, final_logit_softcapping=30.0,
               max_position_embeddings=4096, tie_word_embeddings=True, attention_k_eq_v=True,
               hidden_activation="gelu_pytorch_tanh")
    if moe:
        cfg.update(enable_moe_block=True, num_experts=4, top_k_experts=2, expert_intermediate_size=16)
    H, V, F, P = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"], cfg["hidden_size_per_layer_input"]
    nh = cfg["num_attention_heads"]
    first_shared = L - cfg["num_kv_shared_layers"]
    kinds = [np.float32, "bf16", np.float16]

    def mat(rows, cols, scale=None, kind=None):
        a = rng.standard_normal((rows, cols)) * (scale if scale is not None else 1.0 / math.sqrt(cols))
        k = kind if kind is not None else kinds[rng.integers(0, 3)]
        return BF16(a) if k == "bf16" else a.astype(k)

    def vec(n, base=1.0, sd=0.1):
        return (base + rng.standard_normal(n) * sd).astype(np.float32)

    T = {"model.embed_tokens.weight": mat(V, H, 0.35, "bf16"), "model.norm.weight": vec(H)}
    if P:
        T["model.embed_tokens_per_layer.weight"] = mat(V, P * L, 0.35, "bf16")
        T["model.per_layer_model_projection.weight"] = mat(P * L, H)
        T["model.per_layer_projection_norm.weight"] = vec(P)
    for il in range(L):
        p = "model.layers.%d." % il
        swa = types[il] == "sliding_attention"
        hd = cfg["head_dim"] if swa else cfg["global_head_dim"]
        nkv = cfg["num_key_value_heads"] if swa else cfg["num_global_key_value_heads"]
        T[p + "input_layernorm.weight"] = vec(H)
        T[p + "self_attn.q_proj.weight"] = mat(nh * hd, H)
        T[p + "self_attn.q_norm.weight"] = vec(hd)
        if il < first_shared:
            T[p + "self_attn.k_proj.weight"] = mat(nkv * hd, H)
            T[p + "self_attn.k_norm.weight"] = vec(hd)
            if swa:   # full layers: attention_k_eq_v (V is the raw K projection)
                T[p + "self_attn.v_proj.weight"] = mat(nkv * hd, H)
        T[p + "self_attn.o_proj.weight"] = mat(H, nh * hd)
        T[p + "post_attention_layernorm.weight"] = vec(H)
        T[p + "pre_feedforward_layernorm.weight"] = vec(H)
        T[p + "post_feedforward_layernorm.weight"] = vec(H)
        T[p + "mlp.gate_proj.weight"] = mat(F, H)
        T[p + "mlp.up_proj.weight"] = mat(F, H)
        T[p + "mlp.down_proj.weight"] = mat(H, F)
        T[p + "layer_scalar"] = vec(1, 0.8, 0.2)
        if P:
            T[p + "per_layer_input_gate.weight"] = mat(P, H)
            T[p + "per_layer_projection.weight"] = mat(H, P)
            T[p + "post_per_layer_input_norm.weight"] = vec(H)
        if moe:
            X, FE = cfg["num_experts"], cfg["expert_intermediate_size"]
            T[p + "router.proj.weight"] = mat(X, H, 1.0, np.float32)
            T[p + "router.scale"] = vec(H, 1.0, 0.2)
            T[p + "router.per_expert_scale"] = vec(X, 1.0, 0.3)
            T[p + "experts.gate_up_proj"] = (rng.standard_normal((X, 2 * FE, H)) / math.sqrt(H)).astype(np.float32)
            T[p + "experts.down_proj"] = (rng.standard_normal((X, H, FE)) / math.sqrt(FE)).astype(np.float32)
            T[p + "pre_feedforward_layernorm_2.weight"] = vec(H)
            T[p + "post_feedforward_layernorm_1.weight"] = vec(H)
            T[p + "post_feedforward_layernorm_2.weight"] = vec(H)
    if cond:
        T = {("model.language_model." + n[6:] if n.startswith("model.") else n): a for n, a in T.items()}
        T["model.vision_tower.patch_embedder.input_proj.weight"] = np.ones((8, 12), np.float32)
        T["model.embed_vision.embedding_projection.weight"] = np.ones((H, 8), np.float32)
        cfg = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
               "text_config": {k: v for k, v in cfg.items() if k != "architectures"},
               "vision_config": {"hidden_size": 8}, "tie_word_embeddings": True}
    hq.write_checkpoint(d, T)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    tokenizer_files(d, V)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"do_sample": True, "top_k": 64, "top_p": 0.95, "temperature": 1.0}, f)


def synth_asst(d, target, seed=4):
    rng = np.random.default_rng(seed)
    with open(os.path.join(target, "config.json")) as f:
        tc = json.load(f)
    tc = {**tc, **tc.get("text_config", {})}
    A, AL, AH, AF, NC, TK = 32, 2, 4, 48, 10, 3
    V, B = tc["vocab_size"], tc["hidden_size"]
    types = ["sliding_attention", "full_attention"]
    text = dict(hidden_size=A, num_hidden_layers=AL, intermediate_size=AF, num_attention_heads=AH,
                num_key_value_heads=tc["num_key_value_heads"], num_global_key_value_heads=tc["num_global_key_value_heads"],
                head_dim=tc["head_dim"], global_head_dim=tc["global_head_dim"], vocab_size=V,
                sliding_window=tc["sliding_window"], num_kv_shared_layers=0, hidden_size_per_layer_input=0,
                layer_types=types, rope_parameters=rope_params(0.25), rms_norm_eps=1e-6,
                max_position_embeddings=4096, tie_word_embeddings=True, model_type="gemma4_text")
    cfg = {"architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant", "text_config": text,
           "backbone_hidden_size": B, "num_centroids": NC, "centroid_intermediate_top_k": TK,
           "use_ordered_embeddings": True, "tie_word_embeddings": True}

    def mat(rows, cols, scale=None):
        return (rng.standard_normal((rows, cols)) * (scale if scale is not None else 1.0 / math.sqrt(cols))).astype(np.float32)

    def vec(n, base=1.0, sd=0.1):
        return (base + rng.standard_normal(n) * sd).astype(np.float32)

    T = {"model.embed_tokens.weight": BF16(mat(V, A, 0.35)), "model.norm.weight": vec(A),
         "pre_projection.weight": mat(A, 2 * B), "post_projection.weight": mat(B, A),
         "masked_embedding.centroids.weight": mat(NC, A, 1.0),
         "masked_embedding.token_ordering": rng.permutation(V).astype(np.int64)}
    for il in range(AL):
        p = "model.layers.%d." % il
        hd = text["head_dim"] if types[il] == "sliding_attention" else text["global_head_dim"]
        T[p + "input_layernorm.weight"] = vec(A)
        T[p + "self_attn.q_proj.weight"] = mat(AH * hd, A)
        T[p + "self_attn.q_norm.weight"] = vec(hd)
        T[p + "self_attn.o_proj.weight"] = mat(A, AH * hd)
        T[p + "post_attention_layernorm.weight"] = vec(A)
        T[p + "pre_feedforward_layernorm.weight"] = vec(A)
        T[p + "post_feedforward_layernorm.weight"] = vec(A)
        T[p + "mlp.gate_proj.weight"] = mat(AF, A)
        T[p + "mlp.up_proj.weight"] = mat(AF, A)
        T[p + "mlp.down_proj.weight"] = mat(A, AF)
        T[p + "layer_scalar"] = vec(1, 0.9, 0.1)
    hq.write_checkpoint(d, T, n_shards=1)
    os.rename(os.path.join(d, "model-00001-of-00001.safetensors"), os.path.join(d, "model.safetensors"))
    os.remove(os.path.join(d, "model.safetensors.index.json"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    tokenizer_files(d, V)


# ---------------------------------------------------------------------------
# float64 forward in HF layout
# ---------------------------------------------------------------------------

def load(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg = {**cfg, **cfg.get("text_config", {})}
    W = {}
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    for fn in files:
        with open(os.path.join(d, fn), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            h = json.loads(f.read(n))
            data = f.read()
        for name, e in h.items():
            if name == "__metadata__":
                continue
            a, b = e["data_offsets"]
            raw = data[a:b]
            dt = e["dtype"]
            if dt == "BF16":
                v = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            elif dt == "I64":
                v = np.frombuffer(raw, "<i8").copy()
            else:
                v = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2", "F64": "<f8"}[dt]).astype(np.float64)
            name = name.replace("model.language_model.", "model.")
            W[name] = v.reshape(e["shape"])
    return cfg, W


def rms(x, w=None, eps=1e-6):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w if w is not None else y


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def inv_freq(cfg, swa):
    """HF rotate-half RoPE: pairs (i, i + hd/2); full layers ("proportional") rotate only the
    first int(hd * factor / 2) pairs, with the frequencies of the whole head dim."""
    rp = cfg["rope_parameters"]["sliding_attention" if swa else "full_attention"]
    hd = cfg["head_dim"] if swa else cfg["global_head_dim"]
    base = rp["rope_theta"]
    f = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    if not swa:
        n = int(hd * rp["partial_rotary_factor"] / 2)
        f[n:] = 0.0
    return f


def rope(x, pos, f):
    """x: (T, heads, hd); pos: (T,)."""
    half = x.shape[-1] // 2
    ang = np.asarray(pos, np.float64)[:, None] * f[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def attend(q, K, V, qpos, kpos, window):
    """q (T, nh, hd), K/V (S, nkv, hd); scale 1.0; causal, and within `window` when set."""
    nh, nkv = q.shape[1], K.shape[1]
    g = nh // nkv
    out = np.zeros((q.shape[0], nh, V.shape[2]))
    for t in range(q.shape[0]):
        ok = kpos <= qpos[t]
        if window:
            ok &= qpos[t] - kpos < window
        for h in range(nh):
            sc = K[ok, h // g, :] @ q[t, h]
            p = np.exp(sc - sc.max())
            out[t, h] = (p / p.sum()) @ V[ok, h // g, :]
    return out


def target_forward(cfg, W, ids):
    H, L, eps = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    P = cfg.get("hidden_size_per_layer_input") or 0
    types = cfg["layer_types"]
    first_shared = L - cfg.get("num_kv_shared_layers", 0)
    T = len(ids)
    pos = np.arange(T)
    x = W["model.embed_tokens.weight"][ids] * math.sqrt(H)
    if P:
        pt = W["model.embed_tokens_per_layer.weight"][ids].reshape(T, L, P) * math.sqrt(P)
        pp = (x @ W["model.per_layer_model_projection.weight"].T * H ** -0.5).reshape(T, L, P)
        pp = rms(pp, W["model.per_layer_projection_norm.weight"], eps)
        ple = (pp + pt) * 2 ** -0.5
    kv = {}
    last = {}
    for il in range(L):
        p = "model.layers.%d." % il
        swa = types[il] == "sliding_attention"
        hd = cfg["head_dim"] if swa else cfg["global_head_dim"]
        f = inv_freq(cfg, swa)
        n = rms(x, W[p + "input_layernorm.weight"], eps)
        q = (n @ W[p + "self_attn.q_proj.weight"].T).reshape(T, -1, hd)
        q = rope(rms(q, W[p + "self_attn.q_norm.weight"], eps), pos, f)
        if il < first_shared:
            k = (n @ W[p + "self_attn.k_proj.weight"].T).reshape(T, -1, hd)
            v = (n @ W[p + "self_attn.v_proj.weight"].T).reshape(T, -1, hd) if p + "self_attn.v_proj.weight" in W else k
            K = rope(rms(k, W[p + "self_attn.k_norm.weight"], eps), pos, f)
            Vv = rms(v, None, eps)
            kv[il] = (K, Vv)
            last[types[il]] = il
        else:   # KV sharing: the last KV-owning layer of the same type
            K, Vv = kv[last[types[il]]]
        a = attend(q, K, Vv, pos, pos, cfg["sliding_window"] if swa else 0).reshape(T, -1)
        x = x + rms(a @ W[p + "self_attn.o_proj.weight"].T, W[p + "post_attention_layernorm.weight"], eps)
        m = rms(x, W[p + "pre_feedforward_layernorm.weight"], eps)
        y = (gelu(m @ W[p + "mlp.gate_proj.weight"].T) * (m @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        if p + "router.proj.weight" in W:
            y1 = rms(y, W[p + "post_feedforward_layernorm_1.weight"], eps)
            r = rms(x, None, eps) * W[p + "router.scale"] * H ** -0.5
            logits = r @ W[p + "router.proj.weight"].T
            pr = np.exp(logits - logits.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            k_top = cfg["top_k_experts"]
            u = rms(x, W[p + "pre_feedforward_layernorm_2.weight"], eps)
            gu, dn = W[p + "experts.gate_up_proj"], W[p + "experts.down_proj"]
            FE = dn.shape[2]
            y2 = np.zeros_like(x)
            for t in range(T):
                sel = np.argsort(-pr[t], kind="stable")[:k_top]
                wsel = pr[t, sel] / pr[t, sel].sum()
                for e, we in zip(sel, wsel):
                    hgu = gu[e] @ u[t]
                    y2[t] += we * W[p + "router.per_expert_scale"][e] * (dn[e] @ (gelu(hgu[:FE]) * hgu[FE:]))
            y = y1 + rms(y2, W[p + "post_feedforward_layernorm_2.weight"], eps)
        x = x + rms(y, W[p + "post_feedforward_layernorm.weight"], eps)
        if P:
            g = gelu(x @ W[p + "per_layer_input_gate.weight"].T) * ple[:, il, :]
            x = x + rms(g @ W[p + "per_layer_projection.weight"].T, W[p + "post_per_layer_input_norm.weight"], eps)
        if p + "layer_scalar" in W:
            x = x * W[p + "layer_scalar"][0]
    h = rms(x, W["model.norm.weight"], eps)
    logits = h @ W["model.embed_tokens.weight"].T
    cap = cfg.get("final_logit_softcapping")
    if cap:
        logits = cap * np.tanh(logits / cap)
    return logits, h, kv, last


def asst_step(acfg, A, tcfg, TW, kv, last, tok, hid, qpos, n_ctx):
    """One assistant draft step (HF Gemma4Assistant): returns (dense logits, hf, next hidden)."""
    eps = acfg["rms_norm_eps"]
    e = TW["model.embed_tokens.weight"][tok] * math.sqrt(tcfg["hidden_size"])
    x = A["pre_projection.weight"] @ np.concatenate([e, hid])
    kpos = np.arange(n_ctx)
    for il, lt in enumerate(acfg["layer_types"]):
        p = "model.layers.%d." % il
        swa = lt == "sliding_attention"
        hd = acfg["head_dim"] if swa else acfg["global_head_dim"]
        n = rms(x, A[p + "input_layernorm.weight"], eps)
        q = (A[p + "self_attn.q_proj.weight"] @ n).reshape(1, -1, hd)
        q = rope(rms(q, A[p + "self_attn.q_norm.weight"], eps), [qpos], inv_freq(acfg, swa))
        K, Vv = kv[last[lt]]
        a = attend(q, K[:n_ctx], Vv[:n_ctx], [qpos], kpos, acfg["sliding_window"] if swa else 0).reshape(-1)
        x = x + rms(A[p + "self_attn.o_proj.weight"] @ a, A[p + "post_attention_layernorm.weight"], eps)
        m = rms(x, A[p + "pre_feedforward_layernorm.weight"], eps)
        y = A[p + "mlp.down_proj.weight"] @ (gelu(A[p + "mlp.gate_proj.weight"] @ m) * (A[p + "mlp.up_proj.weight"] @ m))
        x = x + rms(y, A[p + "post_feedforward_layernorm.weight"], eps)
        if p + "layer_scalar" in A:
            x = x * A[p + "layer_scalar"][0]
    hf = rms(x, A["model.norm.weight"], eps)
    return A["model.embed_tokens.weight"] @ hf, hf, A["post_projection.weight"] @ hf


def masked_argmax(acfg, A, hf, dense):
    nc, tk = acfg["num_centroids"], acfg["centroid_intermediate_top_k"]
    c = A["masked_embedding.centroids.weight"] @ hf
    top = np.argsort(-c, kind="stable")[:tk]
    rows = A["masked_embedding.token_ordering"].reshape(nc, -1)
    cand = rows[top].reshape(-1)
    return int(cand[np.argmax(dense[cand])])


def ref(tdir, adir, out, ids, K):
    os.makedirs(out, exist_ok=True)
    tcfg, TW = load(tdir)
    logits, h, kv, last = target_forward(tcfg, TW, ids)
    logits.tofile(os.path.join(out, "logits.f64"))
    h.tofile(os.path.join(out, "hidden.f64"))
    res = {"id_last": int(np.argmax(logits[-1]))}
    if adir:
        acfg, A = load(adir)
        n = len(ids)
        for masked in (False, True):
            tok, hid, toks, rows = res["id_last"], h[-1], [], []
            for _ in range(K):
                dense, hf, hid = asst_step(acfg, A, tcfg, TW, kv, last, tok, hid, n, n)
                tok = masked_argmax(acfg, A, hf, dense) if masked else int(np.argmax(dense))
                toks.append(tok)
                rows.append(dense)
            res["masked_draft_tokens" if masked else "draft_tokens"] = toks
            np.array(rows).tofile(os.path.join(out, "masked_draft_logits.f64" if masked else "draft_logits.f64"))
    with open(os.path.join(out, "drafts.json"), "w") as f:
        json.dump(res, f)


# GGUF suffix -> HF suffix (the inverse of the converter's map, written out here independently)
INV_LAYER = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
             "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
             "attn_output.weight": "self_attn.o_proj.weight", "attn_q_norm.weight": "self_attn.q_norm.weight",
             "attn_k_norm.weight": "self_attn.k_norm.weight", "post_attention_norm.weight": "post_attention_layernorm.weight",
             "ffn_norm.weight": "pre_feedforward_layernorm.weight", "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
             "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
             "ffn_down.weight": "mlp.down_proj.weight", "layer_output_scale.weight": "layer_scalar",
             "inp_gate.weight": "per_layer_input_gate.weight", "proj.weight": "per_layer_projection.weight",
             "post_norm.weight": "post_per_layer_input_norm.weight", "ffn_gate_inp.weight": "router.proj.weight",
             "ffn_gate_inp.scale": "router.scale", "ffn_down_exps.scale": "router.per_expert_scale",
             "ffn_gate_up_exps.weight": "experts.gate_up_proj", "ffn_down_exps.weight": "experts.down_proj",
             "pre_ffw_norm_2.weight": "pre_feedforward_layernorm_2.weight",
             "post_ffw_norm_1.weight": "post_feedforward_layernorm_1.weight",
             "post_ffw_norm_2.weight": "post_feedforward_layernorm_2.weight"}
INV_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight", "per_layer_token_embd.weight": "model.embed_tokens_per_layer.weight",
           "per_layer_model_proj.weight": "model.per_layer_model_projection.weight",
           "per_layer_proj_norm.weight": "model.per_layer_projection_norm.weight",
           "nextn.pre_projection.weight": "pre_projection.weight",
           "nextn.post_projection.weight": "post_projection.weight",
           "masked_embd_centroids.weight": "masked_embedding.centroids.weight",
           "masked_embd_ordering": "masked_embedding.token_ordering"}


def export(gpath, d):
    g = hq.gguf_np.GGUF(gpath)
    kv = g.kv
    A = kv["general.architecture"]
    k = lambda s, dflt=None: kv.get(A + "." + s, dflt)  # noqa: E731
    L = k("block_count")
    pat = list(k("attention.sliding_window_pattern"))
    hkv = k("attention.head_count_kv")
    hkv = list(hkv) if isinstance(hkv, (list, tuple)) else [hkv] * L
    ff = k("feed_forward_length")
    wide = isinstance(ff, (list, tuple))
    hd_full, hd_swa = k("attention.key_length"), k("attention.key_length_swa")
    rf = g.tensor("rope_freqs.weight").astype(np.float64).reshape(-1)
    cfg = dict(hidden_size=k("embedding_length"), num_hidden_layers=L, intermediate_size=ff[0] if wide else ff,
               num_attention_heads=k("attention.head_count"),
               num_key_value_heads=next(h for h, s in zip(hkv, pat) if s),
               num_global_key_value_heads=next((h for h, s in zip(hkv, pat) if not s), hkv[0]),
               head_dim=hd_swa, global_head_dim=hd_full, vocab_size=g.tensors["token_embd.weight"].ne[1],
               sliding_window=k("attention.sliding_window"), num_kv_shared_layers=k("attention.shared_kv_layers", 0),
               hidden_size_per_layer_input=k("embedding_length_per_layer_input", 0),
               layer_types=["sliding_attention" if s else "full_attention" for s in pat],
               rope_parameters={"full_attention": {"rope_type": "proportional", "rope_theta": k("rope.freq_base"),
                                                   "partial_rotary_factor": 2.0 * int(np.sum(rf == 1.0)) / hd_full},
                                "sliding_attention": {"rope_type": "default", "rope_theta": k("rope.freq_base_swa"),
                                                      "partial_rotary_factor": k("rope.dimension_count_swa") / hd_swa}},
               rms_norm_eps=k("attention.layer_norm_rms_epsilon"), max_position_embeddings=k("context_length"),
               tie_word_embeddings="output.weight" not in g.tensors, use_double_wide_mlp=wide)
    if k("final_logit_softcapping"):
        cfg["final_logit_softcapping"] = k("final_logit_softcapping")
    if k("expert_count"):
        cfg.update(num_experts=k("expert_count"), top_k_experts=k("expert_used_count"),
                   expert_intermediate_size=k("expert_feed_forward_length"))
    if A == "gemma4-assistant":
        cfg = {"architectures": ["Gemma4AssistantForCausalLM"], "text_config": cfg,
               "backbone_hidden_size": k("embedding_length_out")}
        if k("n_centroids"):
            cfg.update(num_centroids=k("n_centroids"), centroid_intermediate_top_k=k("centroid_top_k"),
                       use_ordered_embeddings=bool(k("use_ordered_embeddings", True)))
    else:
        cfg["architectures"] = ["Gemma4ForCausalLM"]
    T = {}
    for name in g.tensors:
        if name == "rope_freqs.weight":
            continue   # generated by the converter
        a = g.tensor(name)
        if name in INV_TOP:
            hf = INV_TOP[name]
        else:
            _, il, rest = name.split(".", 2)
            hf = "model.layers.%s.%s" % (il, INV_LAYER[rest])
        T[hf] = a.astype(np.int64) if name == "masked_embd_ordering" else np.ascontiguousarray(a, np.float32)
    hq.write_checkpoint(d, T)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    tokenizer_files(d, cfg.get("text_config", cfg)["vocab_size"])


def main(argv):
    cmd = argv[1]
    opt = lambda k, d=None: argv[argv.index(k) + 1] if k in argv else d  # noqa: E731
    if cmd == "synth":
        synth(argv[2], int(opt("--seed", 3)), "--moe" in argv, "--big" in argv, "--cond" in argv)
    elif cmd == "synth-asst":
        synth_asst(argv[2], argv[3], int(opt("--seed", 4)))
    elif cmd == "export":
        export(argv[2], argv[3])
    elif cmd == "compare":   # tensors and model keys (the tokenizer is the synthetic one)
        sys.exit(0 if hq.compare(argv[2], argv[3], tokenizer=False) else 1)
    elif cmd == "ref":
        adir = argv[3] if argv[3] != "-" else None
        ref(argv[2], adir, argv[4], [int(x) for x in opt("--prompt-ids").split(",")], int(opt("--drafts", 3)))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
