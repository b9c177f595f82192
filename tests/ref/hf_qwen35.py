#!/usr/bin/python3
"""hf_qwen35.py — Hugging Face side of the `nextn convert` test (Debian numpy only, no torch).

  synth DIR [--seed S] [--big] [--moe]
                                  write a synthetic Qwen3_5ForCausalLM checkpoint with an MTP layer:
                                  random weights in HF layout, sharded into 2 safetensors files +
                                  model.safetensors.index.json, config / tokenizer / generation config /
                                  chat_template.jinja. --big: a few hundred MB (BF16) for memory figures;
                                  --moe: Qwen3_5MoeForCausalLM (per-expert and fused gate_up expert tensors);
                                  --vl: the same weights as Qwen3_5ForConditionalGeneration (text_config,
                                  model.language_model.*, vision tensors to skip).
  ref DIR OUTDIR --prompt-ids ... --drafts K
                                  float64 forward of the HF weights in HF layout (1 + w norms, A_log,
                                  grouped V heads, (C, 1, K) conv), written as logits / hidden /
                                  mtp_prompt_logits / draft_logits .f64 files + drafts.json ids.
  export GGUF DIR                 a GGUF qwen35 model back to an HF checkpoint (inverse transforms
                                  coded here independently: w - 1, log(-a), tiled -> grouped V heads),
                                  tokenizer.json rebuilt from the GGUF vocabulary.
  compare A.gguf B.gguf [--values] every tensor and tokenizer / model key of B equals A's (bytes, or
                                  with --values the dequantized values) — prints "N passed, N failed".

The safetensors files are written by hand: 8-byte LE header length, JSON header, data.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402

ST_DTYPE = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}

QWEN35_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
             r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# ---------------------------------------------------------------------------
# safetensors writing
# ---------------------------------------------------------------------------

class BF16:
    """A float array to be stored as BF16 (round to nearest even)."""

    def __init__(self, a):
        a = np.ascontiguousarray(a, dtype=np.float32)
        u = a.view(np.uint32).astype(np.uint64)
        self.bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        self.shape = a.shape

    def values(self):
        return (self.bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name]
        if isinstance(a, BF16):
            dt, raw, shape = "BF16", a.bits.tobytes(), a.shape
        else:
            a = np.ascontiguousarray(a)
            dt, raw, shape = ST_DTYPE[a.dtype], a.astype(a.dtype.newbyteorder("<")).tobytes(), a.shape
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_checkpoint(d, tensors, n_shards=2):
    os.makedirs(d, exist_ok=True)
    names = sorted(tensors)
    sizes = [(tensors[n].bits.nbytes if isinstance(tensors[n], BF16) else tensors[n].nbytes) for n in names]
    total, acc, shard_of = sum(sizes), 0, {}
    for n, s in zip(names, sizes):
        shard_of[n] = min(n_shards - 1, acc * n_shards // max(total, 1))
        acc += s
    files = ["model-%05d-of-%05d.safetensors" % (i + 1, n_shards) for i in range(n_shards)]
    for i, fn in enumerate(files):
        write_safetensors(os.path.join(d, fn), {n: tensors[n] for n in names if shard_of[n] == i})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": {n: files[shard_of[n]] for n in names}}, f, indent=1)


def values(a):
    return a.values() if isinstance(a, BF16) else np.asarray(a, dtype=np.float64)


# ---------------------------------------------------------------------------
# byte-level BPE tokenizer files
# ---------------------------------------------------------------------------

def byte_chars():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def tokenizer_json(tokens, merges, specials):
    """tokens: list of strings by id; specials: ids that are added special tokens."""
    vocab = {t: i for i, t in enumerate(tokens) if i not in specials}
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in sorted(specials)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN35_RE}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            "post_processor": None, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}


# ---------------------------------------------------------------------------
# synthetic checkpoint
# ---------------------------------------------------------------------------

def synth(d, seed=1, big=False, moe=False, vl=False):
    rng = np.random.default_rng(seed)
    if big:
        cfg = dict(hidden_size=1024, num_hidden_layers=8, intermediate_size=3072, num_attention_heads=8,
                   num_key_value_heads=2, head_dim=128, vocab_size=32768, linear_key_head_dim=64,
                   linear_value_head_dim=64, linear_num_key_heads=4, linear_num_value_heads=8)
    else:
        cfg = dict(hidden_size=64, num_hidden_layers=4, intermediate_size=96, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, vocab_size=300, linear_key_head_dim=16,
                   linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4)
    if moe:
        cfg.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
        del cfg["intermediate_size"]
    cfg.update(architectures=["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"],
               model_type="qwen3_5_moe_text" if moe else "qwen3_5_text", mtp_num_hidden_layers=1,
               full_attention_interval=2, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=4096,
               tie_word_embeddings=False, hidden_act="silu", partial_rotary_factor=0.25,
               rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                "mrope_section": [2, 1, 1] if not big else [11, 11, 10], "mrope_interleaved": True},
               layer_types=["linear_attention" if (i + 1) % 2 else "full_attention" for i in range(cfg["num_hidden_layers"])])
    E, V, F = cfg["hidden_size"], cfg["vocab_size"], cfg.get("intermediate_size", 0)
    Hq, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    nk, nv, dk, dv = (cfg[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                       "linear_value_head_dim"))
    K = cfg["linear_conv_kernel_dim"]
    conv = 2 * nk * dk + nv * dv
    f32 = np.float32

    def mat(o, i, s=None):
        w = rng.standard_normal((o, i)).astype(f32) * f32(s if s else 1.0 / np.sqrt(i))
        return BF16(w) if big else w

    def norm(n):
        return (rng.standard_normal(n) * 0.2).astype(f32)   # the model uses 1 + w

    T = {"model.embed_tokens.weight": mat(V, E, 1.0), "model.norm.weight": norm(E), "lm_head.weight": mat(V, E)}

    def attn(p):
        T[p + "self_attn.q_proj.weight"] = mat(2 * Hq * D, E)
        T[p + "self_attn.k_proj.weight"] = mat(Hkv * D, E)
        T[p + "self_attn.v_proj.weight"] = mat(Hkv * D, E)
        T[p + "self_attn.o_proj.weight"] = mat(E, Hq * D)
        T[p + "self_attn.q_norm.weight"] = norm(D)
        T[p + "self_attn.k_norm.weight"] = norm(D)

    def common(p, fused=False):
        T[p + "input_layernorm.weight"] = norm(E)
        T[p + "post_attention_layernorm.weight"] = norm(E)
        if moe:   # router, experts (one tensor each, or llama.cpp's fused gate_up / down form), shared expert
            X, Fe, Fs = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
            T[p + "mlp.gate.weight"] = mat(X, E, 1.0)
            if fused:
                T[p + "mlp.experts.gate_up_proj"] = np.stack([mat(2 * Fe, E) for _ in range(X)])
                T[p + "mlp.experts.down_proj"] = np.stack([mat(E, Fe) for _ in range(X)])
            else:
                for x in range(X):
                    T[p + "mlp.experts.%d.gate_proj.weight" % x] = mat(Fe, E)
                    T[p + "mlp.experts.%d.up_proj.weight" % x] = mat(Fe, E)
                    T[p + "mlp.experts.%d.down_proj.weight" % x] = mat(E, Fe)
            T[p + "mlp.shared_expert.gate_proj.weight"] = mat(Fs, E)
            T[p + "mlp.shared_expert.up_proj.weight"] = mat(Fs, E)
            T[p + "mlp.shared_expert.down_proj.weight"] = mat(E, Fs)
            T[p + "mlp.shared_expert_gate.weight"] = mat(1, E)
            return
        T[p + "mlp.gate_proj.weight"] = mat(F, E)
        T[p + "mlp.up_proj.weight"] = mat(F, E)
        T[p + "mlp.down_proj.weight"] = mat(E, F)

    for il in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % il
        common(p, fused=il == 1)
        if cfg["layer_types"][il] == "full_attention":
            attn(p)
        else:
            T[p + "linear_attn.in_proj_qkv.weight"] = mat(conv, E)
            T[p + "linear_attn.in_proj_z.weight"] = mat(nv * dv, E)
            T[p + "linear_attn.in_proj_b.weight"] = mat(nv, E)
            T[p + "linear_attn.in_proj_a.weight"] = mat(nv, E)
            T[p + "linear_attn.conv1d.weight"] = (rng.standard_normal((conv, 1, K)) * 0.5).astype(f32)
            T[p + "linear_attn.dt_bias"] = (rng.standard_normal(nv) * 0.5).astype(f32)
            T[p + "linear_attn.A_log"] = (rng.standard_normal(nv) * 0.5).astype(f32)
            T[p + "linear_attn.norm.weight"] = (1.0 + rng.standard_normal(dv) * 0.2).astype(f32)
            T[p + "linear_attn.out_proj.weight"] = mat(E, nv * dv)
    p = "mtp.layers.0."
    common(p, fused=True)
    attn(p)
    T["mtp.fc.weight"] = mat(E, 2 * E)
    T["mtp.pre_fc_norm_embedding.weight"] = norm(E)
    T["mtp.pre_fc_norm_hidden.weight"] = norm(E)
    T["mtp.norm.weight"] = norm(E)
    if not big and not moe:   # exercise the F16 reader too
        T["model.layers.0.mlp.up_proj.weight"] = T["model.layers.0.mlp.up_proj.weight"].astype(np.float16)
        T["model.layers.1.mlp.gate_proj.weight"] = BF16(T["model.layers.1.mlp.gate_proj.weight"])
    if vl:   # the Qwen3_5ForConditionalGeneration layout: text model nested, a vision tower beside it
        T = {("model.language_model." + n[6:] if n.startswith("model.") else n): a for n, a in T.items()}
        T["model.visual.patch_embed.proj.weight"] = np.ones((8, 3, 2, 2), np.float32)
        T["model.visual.merger.linear_fc1.bias"] = np.zeros(8, np.float32)
        arch = cfg.pop("architectures")[0].replace("ForCausalLM", "ForConditionalGeneration")
        cfg = {"architectures": [arch], "model_type": "qwen3_5", "text_config": cfg,
               "vision_config": {"depth": 1, "hidden_size": 8}, "tie_word_embeddings": False}
    write_checkpoint(d, T)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    # tokenizer: 256 byte tokens, a few merges, 3 specials; vocab_size pads the rest
    bc = byte_chars()
    merges = [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["i", "n"], ["Ġ", "a"]]
    tokens = bc + [a + b for a, b in merges]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    sp_ids = list(range(len(tokens), len(tokens) + 3))
    tokens += specials
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(tokens, merges, set(sp_ids)), f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "model_max_length": 4096}, f)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95}, f)


# ---------------------------------------------------------------------------
# float64 forward in HF layout
# ---------------------------------------------------------------------------

def load_checkpoint(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg = {**cfg, **cfg.get("text_config", {})}
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    W = {}
    for fn in sorted(set(wm.values())):
        raw = open(os.path.join(d, fn), "rb").read()
        n = struct.unpack_from("<Q", raw, 0)[0]
        hdr = json.loads(raw[8:8 + n])
        base = 8 + n
        for name, e in hdr.items():
            if name == "__metadata__":
                continue
            b, en = e["data_offsets"]
            buf = raw[base + b:base + en]
            if e["dtype"] == "BF16":
                a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                a = np.frombuffer(buf, {"F32": "<f4", "F16": "<f2", "F64": "<f8"}[e["dtype"]])
            W[name] = a.astype(np.float64).reshape(e["shape"])
    return cfg, W


class HF:
    def __init__(self, cfg, W):
        self.c, self.W = cfg, W
        self.eps = cfg["rms_norm_eps"]
        self.D = cfg["head_dim"]
        self.n_rot = int(self.D * cfg.get("partial_rotary_factor", 0.25))
        self.theta = cfg["rope_parameters"]["rope_theta"]

    def rms(self, x, w, plus1=True):
        x = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return x * ((1.0 + w) if plus1 else w)

    def rope(self, x, pos):   # x (T, H, D), rotate_half on the first n_rot dims
        r = self.n_rot
        inv = self.theta ** (-np.arange(0, r, 2) / r)
        ang = np.asarray(pos)[:, None] * inv[None, :]
        cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
        xr, xp = x[..., :r], x[..., r:]
        half = np.concatenate([-xr[..., r // 2:], xr[..., :r // 2]], -1)
        return np.concatenate([xr * cos[:, None, :] + half * sin[:, None, :], xp], -1)

    def attention(self, p, h, pos, cache):
        W, c, D = self.W, self.c, self.D
        Hq, Hkv = c["num_attention_heads"], c["num_key_value_heads"]
        T = h.shape[0]
        qg = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, Hq, 2 * D)
        q, gate = qg[..., :D], qg[..., D:].reshape(T, Hq * D)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, Hkv, D)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, Hkv, D)
        q = self.rope(self.rms(q, W[p + "self_attn.q_norm.weight"]), pos)
        k = self.rope(self.rms(k, W[p + "self_attn.k_norm.weight"]), pos)
        cache["k"].extend(k)
        cache["v"].extend(v)
        cache["pos"].extend(pos)
        K, Vv, P = np.array(cache["k"]), np.array(cache["v"]), np.array(cache["pos"])
        out = np.zeros((T, Hq, D))
        g = Hq // Hkv
        for t in range(T):
            m = P <= pos[t]
            for hh in range(Hq):
                s = K[m, hh // g] @ q[t, hh] / np.sqrt(D)
                a = np.exp(s - s.max())
                out[t, hh] = (a / a.sum()) @ Vv[m, hh // g]
        out = out.reshape(T, Hq * D) / (1.0 + np.exp(-gate))
        return out @ W[p + "self_attn.o_proj.weight"].T

    def deltanet(self, p, h):
        W, c = self.W, self.c
        nk, nv, dk, dv = (c[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                         "linear_value_head_dim"))
        T, kd = h.shape[0], nk * dk
        m = h @ W[p + "linear_attn.in_proj_qkv.weight"].T
        z = (h @ W[p + "linear_attn.in_proj_z.weight"].T).reshape(T, nv, dv)
        b = h @ W[p + "linear_attn.in_proj_b.weight"].T
        a = h @ W[p + "linear_attn.in_proj_a.weight"].T
        cw = W[p + "linear_attn.conv1d.weight"][:, 0, :]   # (C, K)
        Kc = cw.shape[1]
        mp = np.concatenate([np.zeros((Kc - 1, m.shape[1])), m], 0)
        y = np.stack([(mp[t:t + Kc].T * cw).sum(1) for t in range(T)])
        y = y / (1.0 + np.exp(-y))
        q, k, v = y[:, :kd].reshape(T, nk, dk), y[:, kd:2 * kd].reshape(T, nk, dk), y[:, 2 * kd:].reshape(T, nv, dv)
        beta = 1.0 / (1.0 + np.exp(-b))
        g = -np.exp(W[p + "linear_attn.A_log"]) * np.log1p(np.exp(a + W[p + "linear_attn.dt_bias"]))
        l2 = lambda x: x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)  # noqa: E731
        r = nv // nk
        q, k = np.repeat(l2(q), r, axis=1), np.repeat(l2(k), r, axis=1)   # V head h uses K head h // r
        q = q / np.sqrt(dk)
        S = np.zeros((nv, dk, dv))
        o = np.zeros((T, nv, dv))
        for t in range(T):
            for hh in range(nv):
                S[hh] *= np.exp(g[t, hh])
                delta = (v[t, hh] - k[t, hh] @ S[hh]) * beta[t, hh]
                S[hh] += np.outer(k[t, hh], delta)
                o[t, hh] = q[t, hh] @ S[hh]
        o = self.rms(o, W[p + "linear_attn.norm.weight"], plus1=False) * (z / (1.0 + np.exp(-z)))
        return o.reshape(T, nv * dv) @ W[p + "linear_attn.out_proj.weight"].T

    def ffn(self, p, x):
        W = self.W
        n = self.rms(x, W[p + "post_attention_layernorm.weight"])
        if p + "mlp.gate.weight" in W:   # MoE: softmax router, top-k renormalised, sigmoid-gated shared expert
            X, k = self.c["num_experts"], self.c["num_experts_per_tok"]
            silu = lambda v: v / (1.0 + np.exp(-v))  # noqa: E731
            lg = n @ W[p + "mlp.gate.weight"].T
            pr = np.exp(lg - lg.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            out = np.zeros_like(x)
            for t in range(x.shape[0]):
                top = np.argsort(-pr[t])[:k]
                wt = pr[t, top] / pr[t, top].sum()
                for e, we in zip(top, wt):
                    if p + "mlp.experts.gate_up_proj" in W:
                        gu = W[p + "mlp.experts.gate_up_proj"][e]
                        Fe = gu.shape[0] // 2
                        g, u, dn = gu[:Fe], gu[Fe:], W[p + "mlp.experts.down_proj"][e]
                    else:
                        q = p + "mlp.experts.%d." % e
                        g, u, dn = W[q + "gate_proj.weight"], W[q + "up_proj.weight"], W[q + "down_proj.weight"]
                    out[t] += we * (dn @ (silu(g @ n[t]) * (u @ n[t])))
            q = p + "mlp.shared_expert."
            sh = (silu(n @ W[q + "gate_proj.weight"].T) * (n @ W[q + "up_proj.weight"].T)) @ W[q + "down_proj.weight"].T
            sg = 1.0 / (1.0 + np.exp(-(n @ W[p + "mlp.shared_expert_gate.weight"].T)))
            return x + out + sg * sh
        gt = n @ W[p + "mlp.gate_proj.weight"].T
        return x + ((gt / (1.0 + np.exp(-gt))) * (n @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T

    def head(self):
        return self.W.get("lm_head.weight", self.W["model.embed_tokens.weight"])

    def trunk(self, ids):
        W, c = self.W, self.c
        x = W["model.embed_tokens.weight"][ids]
        pos = np.arange(len(ids))
        for il in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % il
            h = self.rms(x, W[p + "input_layernorm.weight"])
            if p + "linear_attn.in_proj_qkv.weight" in W:
                x = x + self.deltanet(p, h)
            else:
                x = x + self.attention(p, h, pos, {"k": [], "v": [], "pos": []})
            x = self.ffn(p, x)
        hid = self.rms(x, W["model.norm.weight"])
        return hid @ self.head().T, hid

    def mtp(self, ids, hid, pos, cache):
        W = self.W
        e = self.rms(W["model.embed_tokens.weight"][ids], W["mtp.pre_fc_norm_embedding.weight"])
        hh = self.rms(hid, W["mtp.pre_fc_norm_hidden.weight"])
        x = np.concatenate([e, hh], -1) @ W["mtp.fc.weight"].T
        p = "mtp.layers.0."
        x = x + self.attention(p, self.rms(x, W[p + "input_layernorm.weight"]), pos, cache)
        x = self.ffn(p, x)
        hm = self.rms(x, W["mtp.norm.weight"])
        return hm @ self.head().T, hm


def ref(d, out, ids, K):
    cfg, W = load_checkpoint(d)
    m = HF(cfg, W)
    logits, hid = m.trunk(ids)
    n = len(ids)
    cache = {"k": [], "v": [], "pos": []}
    prev = np.concatenate([np.zeros((1, hid.shape[1])), hid[:-1]], 0)
    ml, _ = m.mtp(np.array(ids), prev, np.arange(n), cache)
    tok, h, dl, dt = int(np.argmax(logits[-1])), hid[-1:], [], []
    for s in range(K):
        lg, hm = m.mtp(np.array([tok]), h, np.array([n + s]), cache)
        dl.append(lg[0])
        tok, h = int(np.argmax(lg[0])), hm
        dt.append(tok)
    os.makedirs(out, exist_ok=True)
    logits.tofile(os.path.join(out, "logits.f64"))
    hid.tofile(os.path.join(out, "hidden.f64"))
    ml.tofile(os.path.join(out, "mtp_prompt_logits.f64"))
    np.array(dl).tofile(os.path.join(out, "draft_logits.f64"))
    with open(os.path.join(out, "drafts.json"), "w") as f:
        json.dump({"id_last": int(np.argmax(logits[-1])), "draft_tokens": dt}, f)


# ---------------------------------------------------------------------------
# GGUF -> HF checkpoint (inverse transforms) and tensor comparison
# ---------------------------------------------------------------------------

def grouped_from_tiled(a, axis, nk, r, hd):
    """Inverse of the converter's V-head reorder along `axis`: tiled [r][nk][hd] -> grouped [nk][r][hd]."""
    a = np.moveaxis(a, axis, 0)
    rest = a.shape[1:]
    a = a.reshape((r, nk, hd) + rest).swapaxes(0, 1).reshape((nk * r * hd,) + rest)
    return np.moveaxis(a, 0, axis)


def export(gpath, d):
    g = gguf_np.GGUF(gpath)
    kv = g.kv
    A = kv["general.architecture"]
    nl = kv[A + ".block_count"]
    nn = kv.get(A + ".nextn_predict_layers", 0)
    nmain = nl - nn
    nk, nv = kv[A + ".ssm.group_count"], kv[A + ".ssm.time_step_rank"]
    dk = kv[A + ".ssm.state_size"]
    dv = kv[A + ".ssm.inner_size"] // nv
    r = nv // nk
    E = kv[A + ".embedding_length"]
    hd = kv[A + ".attention.key_length"]
    T = {}
    inv = {"attn_norm.weight": "input_layernorm.weight", "post_attention_norm.weight": "post_attention_layernorm.weight",
           "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
           "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
           "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
           "attn_qkv.weight": "linear_attn.in_proj_qkv.weight", "attn_gate.weight": "linear_attn.in_proj_z.weight",
           "ssm_beta.weight": "linear_attn.in_proj_b.weight", "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
           "ssm_conv1d.weight": "linear_attn.conv1d.weight", "ssm_dt.bias": "linear_attn.dt_bias",
           "ssm_a": "linear_attn.A_log", "ssm_norm.weight": "linear_attn.norm.weight",
           "ssm_out.weight": "linear_attn.out_proj.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
           "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}
    nextn = {"nextn.eh_proj.weight": "mtp.fc.weight", "nextn.enorm.weight": "mtp.pre_fc_norm_embedding.weight",
             "nextn.hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
             "nextn.shared_head_norm.weight": "mtp.norm.weight"}
    for name in g.tensors:
        a = g.tensor(name).astype(np.float64)
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        else:
            _, il, rest = name.split(".", 2)
            il = int(il)
            if rest in nextn:
                hf = nextn[rest]
            else:
                hf = ("model.layers.%d." % il if il < nmain else "mtp.layers.%d." % (il - nmain)) + inv[rest]
        # inverse value transforms (F64 keeps them exact: the converter's f32(w + 1) returns the GGUF value)
        # every GGUF *norm.weight but ssm_norm holds 1 + w (the MTP enorm / hnorm included)
        plus1 = name.endswith("norm.weight") and not name.endswith("ssm_norm.weight")
        if plus1:
            a = a - 1.0
        if hf.endswith("A_log"):
            a = np.log(-a)
        if nk != nv:
            if hf.endswith("in_proj_qkv.weight"):
                a = np.concatenate([a[:2 * nk * dk], grouped_from_tiled(a[2 * nk * dk:], 0, nk, r, dv)], 0)
            elif hf.endswith(("in_proj_z.weight",)):
                a = grouped_from_tiled(a, 0, nk, r, dv)
            elif hf.endswith(("in_proj_a.weight", "in_proj_b.weight", "A_log", "dt_bias")):
                a = grouped_from_tiled(a, 0, nk, r, 1)
            elif hf.endswith("conv1d.weight"):
                a = np.concatenate([a[:2 * nk * dk], grouped_from_tiled(a[2 * nk * dk:], 0, nk, r, dv)], 0)
            elif hf.endswith("out_proj.weight"):
                a = grouped_from_tiled(a, 1, nk, r, dv)
        if hf.endswith("conv1d.weight"):
            a = a[:, None, :]
        # F64 where a transform was applied (exact inverse), else the values as F32 (exact for
        # dequantized Q8_0 / F32 values)
        transformed = plus1 or hf.endswith("A_log")
        T[hf] = a if transformed else a.astype(np.float32)
    write_checkpoint(d, T)
    secs = kv[A + ".rope.dimension_sections"]
    cfg = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
           "hidden_size": E, "num_hidden_layers": nmain, "mtp_num_hidden_layers": nn,
           "intermediate_size": kv[A + ".feed_forward_length"], "num_attention_heads": kv[A + ".attention.head_count"],
           "num_key_value_heads": kv[A + ".attention.head_count_kv"], "head_dim": hd,
           "vocab_size": g.tensors["token_embd.weight"].ne[1], "rms_norm_eps": kv[A + ".attention.layer_norm_rms_epsilon"],
           "max_position_embeddings": kv[A + ".context_length"],
           "full_attention_interval": kv.get(A + ".full_attention_interval", 4),
           "linear_conv_kernel_dim": kv[A + ".ssm.conv_kernel"], "linear_key_head_dim": dk, "linear_value_head_dim": dv,
           "linear_num_key_heads": nk, "linear_num_value_heads": nv,
           "partial_rotary_factor": kv[A + ".rope.dimension_count"] / hd, "tie_word_embeddings": "output.weight" not in g.tensors,
           "rope_parameters": {"rope_type": "default", "rope_theta": kv[A + ".rope.freq_base"], "mrope_section": secs[:3]}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    toks, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    merges = [m.split(" ") for m in kv["tokenizer.ggml.merges"]]
    specials = {i for i, t in enumerate(types) if t == 3}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(toks, merges, specials), f, ensure_ascii=False)
    tc = {"add_bos_token": bool(kv.get("tokenizer.ggml.add_bos_token", False))}
    for key, ck in (("eos_token_id", "eos_token"), ("bos_token_id", "bos_token"), ("padding_token_id", "pad_token")):
        if "tokenizer.ggml." + key in kv:
            tc[ck] = toks[kv["tokenizer.ggml." + key]]
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, ensure_ascii=False)


def compare(apath, bpath, values=False, tokenizer=True):
    """values: B was converted to another type (f32): compare the dequantized values exactly.
    tokenizer=False: the model keys only (B's vocabulary is another one)."""
    a, b = gguf_np.GGUF(apath), gguf_np.GGUF(bpath)
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print("FAIL", what)

    check(set(a.tensors) == set(b.tensors), "tensor names: only in shipped %s, only in converted %s"
          % (sorted(set(a.tensors) - set(b.tensors)), sorted(set(b.tensors) - set(a.tensors))))
    n_same = 0
    for name in sorted(set(a.tensors) & set(b.tensors)):
        ta, tb = a.tensors[name], b.tensors[name]
        if values:
            same = ta.ne == tb.ne and np.array_equal(a.tensor(name), b.tensor(name))
        else:
            same = ta.ne == tb.ne and ta.type == tb.type and np.array_equal(a.raw(name), b.raw(name))
        if not same:
            va, vb = a.tensor(name), b.tensor(name)
            print("  %s: shipped %s type %d, converted %s type %d, max |d| %s" % (
                name, ta.ne, ta.type, tb.ne, tb.type, np.abs(va - vb).max() if va.shape == vb.shape else "shape"))
        n_same += same
        check(same, "tensor %s differs" % name)
    print("%d/%d tensors %s" % (n_same, len(a.tensors), "with identical values (dequantized)" if values
                                else "bit-identical (name, shape, type, bytes)"))
    A = a.kv["general.architecture"]
    # {arch}.vocab_size: the shipped file's exporter wrote it, llama.cpp's qwen35 converter does not
    # (the loader takes the vocabulary from token_embd)
    skip = {A + ".vocab_size"}
    for k, v in a.kv.items():
        if k in skip:
            continue
        if k.startswith((A + ".",) + (("tokenizer.",) if tokenizer else ())) or k == "general.architecture":
            check(b.kv.get(k) == v, "key %s: shipped %s, converted %s" % (k, str(v)[:80], str(b.kv.get(k))[:80]))
    print("%d passed, %d failed" % (passed, failed))
    return failed == 0


def main(argv):
    cmd = argv[1]
    if cmd == "synth":
        synth(argv[2], seed=int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 1, big="--big" in argv,
              moe="--moe" in argv, vl="--vl" in argv)
    elif cmd == "ref":
        ids = [int(x) for x in argv[argv.index("--prompt-ids") + 1].split(",")]
        ref(argv[2], argv[3], ids, int(argv[argv.index("--drafts") + 1]))
    elif cmd == "export":
        export(argv[2], argv[3])
    elif cmd == "compare":
        return 0 if compare(argv[2], argv[3], values="--values" in argv) else 1
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
