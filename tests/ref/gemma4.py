#!/usr/bin/python3
"""Independent numpy reference of the Gemma 4 target (`gemma4`) and its assistant drafter
(`gemma4-assistant`, also the ik `gemma4_mtp` dialect).

Owns: the target forward (iSWA with per-type head dims / RoPE, proportional partial RoPE via
`rope_freqs`, q/k norms + weightless V norm, k_eq_v, KV sharing, per-layer embeddings, GELU(tanh)
FFN, dense+MoE FFN, post norms, layer output scale, final soft-cap), per-sequence KV state (with an
optional fixed-capacity SWA ring: n_swa - 1 + max batch cells per SWA layer), the assistant (Q-only
attention on the target KV, chaining, constant/increment draft positions, dense and centroid-masked
LM heads), chained greedy drafting (`drafts.json` layout), a greedy speculative loop
(`spec_trace.json` layout), derived test models (no PLE, MoE, ik dialect) and the CLI.
Promises: the math of docs/spec/gemma4.md (Decisions first); float32 activations with
float64 accumulation in matmuls, norms and softmax; optional emulation of the reference engine's
f16 K/V cache (`kv_f16`). Must never: share code with nextn's C sources (it is their oracle), or
modify gguf_np.py (imported, not copied).

Usage: gemma4.py eval MODEL.gguf --prompt-ids 2,404,... [--greedy N] [--logits-out F]
           [--hidden-out F] [--batch B] [--drafts K --draft-model A.gguf] [--masked-head]
           [--assistant-dense-head] [--draft-positions constant|increment] [--ctk f16]
       gemma4.py spec MODEL.gguf --draft-model A.gguf --prompt-ids ... [--n-predict 64]
           [--draft-max 3] [--masked-head] [--draft-positions increment] [--swa-ring B]
       gemma4.py derive {no-ple,moe,moe-split,mtp-dialect} SRC.gguf DST.gguf
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402

F32 = np.float32
F64 = np.float64

DRAFTER_ARCHS = ("gemma4-assistant", "gemma4_mtp")


# ---------------------------------------------------------------------------
# elementwise helpers: float32 values, float64 reductions

def rms_norm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis (w None: weightless, as the V norm)."""
    xd = x.astype(F64)
    ss = (np.einsum("...i,...i->...", xd, xd)[..., None] / x.shape[-1]).astype(F32)
    scale = (F32(1.0) / np.sqrt(ss + F32(eps))).astype(F32)
    y = (x * scale).astype(F32)
    return (y * w).astype(F32) if w is not None else y


GELU_A = 0.044715
SQRT_2_OVER_PI = 0.79788456080286535587989211986876


def gelu(x):
    """GELU, tanh approximation (HF gelu_pytorch_tanh, ggml_gelu), evaluated exactly (an f16 lookup
    table as in ggml's CPU backend moves the engine comparison from 5.6e-3 to 3.7e-2: not used)."""
    xd = x.astype(F64)
    return (0.5 * xd * (1.0 + np.tanh(SQRT_2_OVER_PI * xd * (1.0 + GELU_A * xd * xd)))).astype(F32)


def softmax64(x, axis=-1):
    x = np.asarray(x, F64)
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def softcap(x, cap):
    if cap is None or cap <= 0:
        return x
    return (F64(cap) * np.tanh(x.astype(F64) / F64(cap))).astype(F32)


def mm(x, W):
    """y = W x for each row of x; W in numpy order (out, in) (GGUF ne = {in, out}), float64 sums."""
    return (np.asarray(x, F64) @ np.asarray(W, F64).T).astype(F32)


_THETA = {}


def _theta(n_rot, base, pos):
    """theta_i(pos) before freq factors: float32 chain theta = pos; theta *= base^(-2/n_rot) per pair
    (ggml's rope cache order), tabulated per (n_rot, base) and grown on demand."""
    key = (n_rot, float(base))
    tab = _THETA.get(key)
    need = int(np.max(pos)) + 1
    if tab is None or tab.shape[0] < need:
        half = n_rot // 2
        ts = np.power(F32(base), F32(-2.0) / F32(n_rot), dtype=F32)
        npos = max(need, 256, 2 * (0 if tab is None else tab.shape[0]))
        tab = np.empty((npos, half), F32)
        t = np.arange(npos, dtype=F32)
        for i in range(half):
            tab[:, i] = t
            t = (t * ts).astype(F32)
        _THETA[key] = tab
    return tab[np.asarray(pos, np.int64)]


def rope_neox(x, pos, n_rot, base, ff=None, freq_scale=1.0):
    """NEOX ("rotate half") RoPE of the first n_rot dims of x (T, H, D), pairs (i, i + n_rot/2),
    theta_i = pos * base^(-2i/n_rot) / ff_i (float32 chain, as ggml)."""
    half = n_rot // 2
    th = _theta(n_rot, base, pos)
    if ff is not None:
        th = (th / np.asarray(ff[:half], F32)[None, :]).astype(F32)
    if freq_scale != 1.0:
        th = (th * F32(freq_scale)).astype(F32)
    c = np.cos(th.astype(F64)).astype(F32)[:, None, :]
    s = np.sin(th.astype(F64)).astype(F32)[:, None, :]
    out = x.astype(F32).copy()
    x0 = x[..., :half].astype(F32)
    x1 = x[..., half:n_rot].astype(F32)
    out[..., :half] = x0 * c - x1 * s
    out[..., half:n_rot] = x0 * s + x1 * c
    return out


def attend(q, K, V, qpos, kpos, window):
    """Attention with scale 1.0 (no soft-cap). q (T, nh, hd); K, V (N, nkv, hd) cached K/V;
    qpos (T,), kpos (N,) absolute positions. A key cell is visible iff kpos <= qpos and, on SWA
    layers (window = n_swa), qpos - kpos < n_swa (the window counts the query's own position).
    GQA: query head h reads KV head h // (nh / nkv). Returns (T, nh*hd)."""
    T, nh, hd = q.shape
    nkv = K.shape[1]
    if nh % nkv:
        raise ValueError("attention: %d query heads not a multiple of %d kv heads" % (nh, nkv))
    vis = kpos[None, :] <= qpos[:, None]
    if window:
        vis &= (qpos[:, None] - kpos[None, :]) < window
    if not np.all(np.any(vis, axis=1)):
        raise ValueError("attention: a query at position %s sees no KV cell" % qpos[~np.any(vis, axis=1)][:1])
    grp = nh // nkv
    qq = q.astype(F64).reshape(T, nkv, grp, hd)               # head h = (h // grp, h % grp)
    s = np.einsum("tkgd,nkd->tkgn", qq, K.astype(F64))
    s = np.where(vis[:, None, None, :], s, -np.inf)
    p = softmax64(s)
    out = np.einsum("tkgn,nkd->tkgd", p, V.astype(F64)).astype(F32)
    return out.reshape(T, nh * hd)


def _kv(g, arch, name, default=None, req=False):
    key = "%s.%s" % (arch, name)
    if key not in g.kv:
        if req:
            raise ValueError("%s: missing metadata key %s" % (g.path, key))
        return default
    return g.kv[key]


def _per_layer(v, n, what, path):
    if isinstance(v, list):
        if len(v) != n:
            raise ValueError("%s: %s has %d entries, expected %d (block_count)" % (path, what, len(v), n))
        return [int(x) for x in v]
    return [int(v)] * n


class _Weights:
    """Lazy float32 (and float64) tensor access by name with clear errors."""

    def __init__(self, g):
        self.g = g
        self._w = {}

    def has(self, name):
        return name in self.g.tensors

    def w(self, name):
        a = self._w.get(name)
        if a is None:
            if name not in self.g.tensors:
                raise ValueError("%s: missing tensor %s" % (self.g.path, name))
            a = self.g.tensor(name)
            self._w[name] = a
        return a

    def w64(self, name):
        """float64 copy for matmuls (float64 accumulation of float32 values)."""
        key = name + "#64"
        a = self._w.get(key)
        if a is None:
            a = self.w(name).astype(F64)
            self._w[key] = a
        return a

    def opt(self, name):
        return self.w(name) if self.has(name) else None

    def shape(self, name):
        return tuple(reversed(self.g.tensors[name].ne))

    def expect(self, name, shape):
        if not self.has(name):
            raise ValueError("%s: missing tensor %s" % (self.g.path, name))
        s = self.shape(name)
        if s != tuple(shape):
            raise ValueError("%s: tensor %s has shape ne=%s, expected ne=%s"
                             % (self.g.path, name, list(reversed(s)), list(reversed(shape))))


# ---------------------------------------------------------------------------
# target

class Gemma4:
    """The `gemma4` target. kv_f16: store K and V rounded to f16 (the reference engine's cache)."""

    def __init__(self, path, kv_f16=False):
        self.g = g = gguf_np.GGUF(path)
        self.path = path
        arch = g.get("general.architecture")
        if arch in DRAFTER_ARCHS:
            raise ValueError("%s: architecture %r is an assistant drafter, not a target model; pass it "
                             "with --draft-model (alias --mtp-head)" % (path, arch))
        if arch != "gemma4":
            raise ValueError("%s: architecture %r is not gemma4" % (path, arch))
        self.arch = arch
        self.kv_f16 = kv_f16
        self.W = W = _Weights(g)
        L = self.n_layer = int(_kv(g, arch, "block_count", req=True))
        E = self.n_embd = int(_kv(g, arch, "embedding_length", req=True))
        self.eps = F32(_kv(g, arch, "attention.layer_norm_rms_epsilon", req=True))
        self.n_head = _per_layer(_kv(g, arch, "attention.head_count", req=True), L, "head_count", path)
        self.n_head_kv = _per_layer(_kv(g, arch, "attention.head_count_kv", self.n_head), L,
                                    "head_count_kv", path)
        self.hd_full = int(_kv(g, arch, "attention.key_length", E // max(self.n_head[0], 1)))
        vf = int(_kv(g, arch, "attention.value_length", self.hd_full))
        self.hd_swa = int(_kv(g, arch, "attention.key_length_swa", req=True))
        vs = int(_kv(g, arch, "attention.value_length_swa", self.hd_swa))
        if vf != self.hd_full or vs != self.hd_swa:
            raise ValueError("%s: key_length %d/%d != value_length %d/%d (full/swa)"
                             % (path, self.hd_full, self.hd_swa, vf, vs))
        self.n_swa = int(_kv(g, arch, "attention.sliding_window", req=True))
        pat = _kv(g, arch, "attention.sliding_window_pattern", req=True)
        self.swa = [bool(x) for x in _per_layer(pat, L, "sliding_window_pattern", path)] \
            if isinstance(pat, list) else [bool(pat)] * L
        self.n_shared = int(_kv(g, arch, "attention.shared_kv_layers", 0))
        if not 0 <= self.n_shared < L:
            raise ValueError("%s: shared_kv_layers %d out of range [0,%d)" % (path, self.n_shared, L))
        self.n_kv_from_start = L - self.n_shared
        self.n_rot_full = int(_kv(g, arch, "rope.dimension_count", self.hd_full))
        self.n_rot_swa = int(_kv(g, arch, "rope.dimension_count_swa", min(self.n_rot_full, self.hd_swa)))
        if self.n_rot_full > self.hd_full or self.n_rot_swa > self.hd_swa or self.n_rot_full % 2 \
                or self.n_rot_swa % 2:
            raise ValueError("%s: rope dims %d/%d invalid for head dims %d/%d"
                             % (path, self.n_rot_full, self.n_rot_swa, self.hd_full, self.hd_swa))
        self.base_full = F32(_kv(g, arch, "rope.freq_base", 10000.0))
        self.base_swa = F32(_kv(g, arch, "rope.freq_base_swa", float(self.base_full)))
        factor = _kv(g, arch, "rope.scaling.factor", 0.0)
        self.freq_scale = F32(1.0 / factor) if factor else F32(1.0)
        self.P = int(_kv(g, arch, "embedding_length_per_layer_input", req=True))
        self.n_expert = int(_kv(g, arch, "expert_count", 0))
        self.n_expert_used = int(_kv(g, arch, "expert_used_count", 0))
        cap = _kv(g, arch, "final_logit_softcapping", 30.0)
        self.softcap = float(cap) if cap and cap > 0 else None
        if not W.has("token_embd.weight"):
            raise ValueError("%s: missing tensor token_embd.weight" % path)
        self.n_vocab = W.shape("token_embd.weight")[0]
        W.expect("token_embd.weight", (self.n_vocab, E))
        self.out_name = "output.weight" if W.has("output.weight") else "token_embd.weight"
        W.expect(self.out_name, (self.n_vocab, E))
        W.expect("output_norm.weight", (E,))
        self.rope_freqs = None
        if W.has("rope_freqs.weight"):
            W.expect("rope_freqs.weight", (self.n_rot_full // 2,))
            self.rope_freqs = W.w("rope_freqs.weight")
        if self.P > 0:
            W.expect("per_layer_token_embd.weight", (self.n_vocab, self.P * L))
            W.expect("per_layer_model_proj.weight", (self.P * L, E))
            W.expect("per_layer_proj_norm.weight", (self.P,))
        # layer geometry, KV ownership (HF / ik: a shared layer reads the last KV-owning layer of its type)
        self.kv_src = []
        self.k_eq_v = []
        self.moe = []
        for il in range(L):
            b = "blk.%d." % il
            hd, nh, nkv = self.hd(il), self.n_head[il], self.n_head_kv[il]
            if nh % nkv:
                raise ValueError("%s: layer %d: %d heads not a multiple of %d kv heads" % (path, il, nh, nkv))
            W.expect(b + "attn_norm.weight", (E,))
            W.expect(b + "attn_q.weight", (nh * hd, E))
            W.expect(b + "attn_q_norm.weight", (hd,))
            W.expect(b + "attn_output.weight", (E, nh * hd))
            W.expect(b + "post_attention_norm.weight", (E,))
            if il < self.n_kv_from_start:
                W.expect(b + "attn_k.weight", (nkv * hd, E))
                W.expect(b + "attn_k_norm.weight", (hd,))
                if W.has(b + "attn_v.weight"):
                    W.expect(b + "attn_v.weight", (nkv * hd, E))
                self.k_eq_v.append(not W.has(b + "attn_v.weight"))
                self.kv_src.append(il)
            else:
                src = [j for j in range(self.n_kv_from_start) if self.swa[j] == self.swa[il]]
                if not src:
                    raise ValueError("%s: KV-shared layer %d (%s) has no KV-owning layer of its type"
                                     % (path, il, "SWA" if self.swa[il] else "full"))
                j = src[-1]
                if self.hd(j) != hd or self.n_head_kv[j] != nkv:
                    raise ValueError("%s: KV-shared layer %d: head dim/kv heads %d/%d != source layer %d's %d/%d"
                                     % (path, il, hd, nkv, j, self.hd(j), self.n_head_kv[j]))
                self.k_eq_v.append(None)
                self.kv_src.append(j)
            self.moe.append(W.has(b + "ffn_gate_inp.weight"))
            if self.moe[-1] and (self.n_expert <= 0 or not 0 < self.n_expert_used <= self.n_expert):
                raise ValueError("%s: layer %d is MoE but expert_count/expert_used_count = %d/%d"
                                 % (path, il, self.n_expert, self.n_expert_used))

    def hd(self, il):
        return self.hd_swa if self.swa[il] else self.hd_full

    def rope_params(self, swa):
        """(n_rot, base, freq factors) of a layer type; the factors apply to full layers only."""
        if swa:
            return self.n_rot_swa, self.base_swa, None
        return self.n_rot_full, self.base_full, self.rope_freqs

    def rope(self, x, pos, swa):
        n_rot, base, ff = self.rope_params(swa)
        return rope_neox(x, pos, n_rot, base, ff, self.freq_scale)

    def new_state(self, ring_batch=0):
        return State(self, ring_batch)

    # -- blocks -------------------------------------------------------------
    def ffn_dense(self, b, m):
        W = self.W
        return mm(gelu(mm(m, W.w64(b + "ffn_gate.weight"))) * mm(m, W.w64(b + "ffn_up.weight")),
                  W.w(b + "ffn_down.weight"))

    def ffn_moe(self, b, h):
        """MoE block output before the residual (gemma4.md §3.3): dense branch + routed experts."""
        W, eps, E = self.W, self.eps, self.n_embd
        d = self.ffn_dense(b, rms_norm(h, W.w(b + "ffn_norm.weight"), eps))
        rs = (W.w(b + "ffn_gate_inp.scale") * F32(1.0 / math.sqrt(E))).astype(F32) \
            if W.has(b + "ffn_gate_inp.scale") else F32(1.0 / math.sqrt(E))
        r = mm((rms_norm(h, None, eps) * rs).astype(F32), W.w64(b + "ffn_gate_inp.weight"))   # (T, n_expert)
        probs = softmax64(r)
        u = rms_norm(h, W.w(b + "pre_ffw_norm_2.weight"), eps)
        fused = W.has(b + "ffn_gate_up_exps.weight")
        if fused:
            GU = W.w64(b + "ffn_gate_up_exps.weight")         # (n_expert, 2*Fe, E): gate rows first, then up
            Fe = GU.shape[1] // 2
        down = W.w64(b + "ffn_down_exps.weight")              # (n_expert, E, Fe)
        escale = W.opt(b + "ffn_down_exps.scale")
        mo = np.zeros_like(h)
        for t in range(h.shape[0]):
            sel = np.argsort(-probs[t], kind="stable")[:self.n_expert_used]
            wsel = probs[t, sel] / np.sum(probs[t, sel])    # renormalised to sum 1
            acc = np.zeros(E, F64)
            for e, we in zip(sel, wsel):
                ut = u[t:t + 1]
                if fused:
                    gt, up = mm(ut, GU[e, :Fe]), mm(ut, GU[e, Fe:])
                else:
                    gt = mm(ut, W.w64(b + "ffn_gate_exps.weight")[e])
                    up = mm(ut, W.w64(b + "ffn_up_exps.weight")[e])
                ye = mm(gelu(gt) * up, down[e])[0].astype(F64)
                if escale is not None:
                    ye = ye * F64(escale[e])
                acc += we * ye
            mo[t] = acc.astype(F32)
        return rms_norm((rms_norm(d, W.w64(b + "post_ffw_norm_1.weight"), eps)
                         + rms_norm(mo, W.w(b + "post_ffw_norm_2.weight"), eps)).astype(F32),
                        W.w(b + "post_ffw_norm.weight"), eps)

    def per_layer_inputs(self, tokens, x):
        """PLE (gemma4.md §3.2): (T, L, P) = (rms(proj(x) per layer, eps*n_embd) + tok_pl*sqrt(P)) / sqrt(2)."""
        W, L, P = self.W, self.n_layer, self.P
        T = len(tokens)
        pl_tok = (W.w("per_layer_token_embd.weight")[tokens].reshape(T, L, P) * F32(math.sqrt(P))).astype(F32)
        pl_proj = mm(x, W.w64("per_layer_model_proj.weight")).reshape(T, L, P)
        pl_proj = rms_norm(pl_proj, W.w("per_layer_proj_norm.weight"), F32(self.eps * F32(self.n_embd)))
        return ((pl_proj + pl_tok) * F32(1.0 / math.sqrt(2.0))).astype(F32)

    def forward(self, state, tokens):
        """Tokens at positions state.n_past.. (one batch, causal inside it). Returns (logits (T,V)
        after the soft-cap, hidden (T,E) = post-output_norm rows)."""
        W, eps = self.W, self.eps
        tokens = np.asarray(tokens, dtype=np.int64)
        T = len(tokens)
        if T == 0:
            raise ValueError("forward: empty batch")
        if np.any(tokens < 0) or np.any(tokens >= self.n_vocab):
            raise ValueError("forward: token id out of range [0,%d)" % self.n_vocab)
        pos = state.n_past + np.arange(T)
        x = (W.w("token_embd.weight")[tokens] * F32(math.sqrt(self.n_embd))).astype(F32)
        inp_pl = self.per_layer_inputs(tokens, x) if self.P > 0 else None
        for il in range(self.n_layer):
            b = "blk.%d." % il
            swa, hd, nh, nkv = self.swa[il], self.hd(il), self.n_head[il], self.n_head_kv[il]
            n = rms_norm(x, W.w(b + "attn_norm.weight"), eps)
            q = rms_norm(mm(n, W.w64(b + "attn_q.weight")).reshape(T, nh, hd), W.w(b + "attn_q_norm.weight"), eps)
            q = self.rope(q, pos, swa)
            if self.kv_src[il] == il:
                kraw = mm(n, W.w64(b + "attn_k.weight")).reshape(T, nkv, hd)
                k = self.rope(rms_norm(kraw, W.w(b + "attn_k_norm.weight"), eps), pos, swa)
                vraw = kraw if self.k_eq_v[il] else mm(n, W.w64(b + "attn_v.weight")).reshape(T, nkv, hd)
                v = rms_norm(vraw, None, eps)           # weightless V norm, never roped
                state.append(il, k, v, pos)
            c = state.kv[self.kv_src[il]]
            a = attend(q, c["k"], c["v"], pos, c["pos"], self.n_swa if swa else 0)
            a = rms_norm(mm(a, W.w64(b + "attn_output.weight")), W.w(b + "post_attention_norm.weight"), eps)
            h = (x + a).astype(F32)
            if self.moe[il]:
                y = (h + self.ffn_moe(b, h)).astype(F32)
            else:
                f = self.ffn_dense(b, rms_norm(h, W.w(b + "ffn_norm.weight"), eps))
                y = (h + rms_norm(f, W.w(b + "post_ffw_norm.weight"), eps)).astype(F32)
            if inp_pl is not None:
                gt = (gelu(mm(y, W.w64(b + "inp_gate.weight"))) * inp_pl[:, il, :]).astype(F32)
                y = (y + rms_norm(mm(gt, W.w64(b + "proj.weight")), W.w(b + "post_norm.weight"), eps)).astype(F32)
            if W.has(b + "layer_output_scale.weight"):
                y = (y * W.w(b + "layer_output_scale.weight")[0]).astype(F32)
            x = y
        state.n_past += T
        hidden = rms_norm(x, W.w("output_norm.weight"), eps)
        logits = softcap(mm(hidden, W.w64(self.out_name)), self.softcap)
        return logits, hidden


class State:
    """One sequence's target KV: per KV-owning layer, K (roped, k-normed), V (rms0, un-roped) and
    the cells' positions. ring_batch > 0: SWA layers behave as a ring of capacity
    n_swa - 1 + ring_batch cells (slot = pos mod capacity): writing position p evicts p - capacity.
    Batches may then hold at most ring_batch tokens. That capacity is exact: the first query of a
    batch needs its n_swa - 1 predecessors while the batch's own cells are written, and a trim
    (rejected drafts) only removes the newest cells, which the next batch re-writes."""

    def __init__(self, m, ring_batch=0):
        self.m = m
        self.n_past = 0
        self.ring_batch = ring_batch
        self.ring_cap = m.n_swa - 1 + ring_batch if ring_batch else 0
        self.kv = {}
        for il in range(m.n_layer):
            if m.kv_src[il] == il:
                shp = (0, m.n_head_kv[il], m.hd(il))
                self.kv[il] = {"k": np.zeros(shp, F32), "v": np.zeros(shp, F32), "pos": np.zeros(0, np.int64)}
        self.max_cells = {il: 0 for il in self.kv}

    def append(self, il, k, v, pos):
        c = self.kv[il]
        if len(c["pos"]) and pos[0] <= c["pos"][-1]:
            raise ValueError("KV: position %d already in the cache (n_past %d)" % (pos[0], self.n_past))
        if self.m.kv_f16:
            k = k.astype(np.float16).astype(F32)
            v = v.astype(np.float16).astype(F32)
        c["k"] = np.concatenate([c["k"], k])
        c["v"] = np.concatenate([c["v"], v])
        c["pos"] = np.concatenate([c["pos"], pos])
        if self.ring_cap and self.m.swa[il]:
            if len(pos) > self.ring_batch:
                raise ValueError("KV: batch of %d tokens exceeds the SWA ring's batch limit %d" % (len(pos), self.ring_batch))
            sel = c["pos"] > c["pos"][-1] - self.ring_cap     # the evicted slots
            for key in ("k", "v", "pos"):
                c[key] = c[key][sel]
        self.max_cells[il] = max(self.max_cells[il], len(c["pos"]))

    def seq_rm(self, p0):
        """Drop KV cells at positions >= p0 (rejected drafts); n_past = p0."""
        for c in self.kv.values():
            sel = c["pos"] < p0
            for key in ("k", "v", "pos"):
                c[key] = c[key][sel]
        self.n_past = min(self.n_past, p0)


# ---------------------------------------------------------------------------
# assistant

class Assistant:
    """The `gemma4-assistant` / `gemma4_mtp` drafter bound to a target. It owns no KV: each layer
    does Q-only attention over the target KV of the last KV-owning target layer of its type."""

    NAMES = {
        "gemma4-assistant": {"pre": ["nextn.pre_projection.weight"], "post": ["nextn.post_projection.weight"],
                             "centroids": ["masked_embd_centroids.weight", "mtp.centroids.weight"],
                             "ordering": ["masked_embd_ordering", "mtp.token_ordering.weight"],
                             "bb": "embedding_length_out", "n_c": "n_centroids", "top_k": "centroid_top_k"},
        "gemma4_mtp": {"pre": ["mtp_pre_proj.weight"], "post": ["mtp_post_proj.weight"],
                       "centroids": ["mtp_centroids.weight"], "ordering": ["mtp_token_ordering.weight"],
                       "bb": "backbone_embedding_length", "n_c": "centroid_count", "top_k": "centroid_top_k"},
    }

    def __init__(self, path, target, dense_head=False):
        self.g = g = gguf_np.GGUF(path)
        self.path, self.t = path, target
        arch = g.get("general.architecture")
        if arch not in DRAFTER_ARCHS:
            raise ValueError("%s: architecture %r is not an assistant drafter (%s)" % (path, arch, "/".join(DRAFTER_ARCHS)))
        self.arch = arch
        nm = self.NAMES[arch]
        self.W = W = _Weights(g)
        req_arch = _kv(g, arch, "requires_target_arch")
        if req_arch is not None and req_arch != "gemma4":
            raise ValueError("%s: requires_target_arch %r, expected 'gemma4'" % (path, req_arch))
        if target.arch != "gemma4":
            raise ValueError("%s: target architecture %r, expected gemma4" % (path, target.arch))
        L = self.n_layer = int(_kv(g, arch, "block_count", req=True))
        E = self.n_embd = int(_kv(g, arch, "embedding_length", req=True))
        self.n_bb = int(_kv(g, arch, nm["bb"], req=True))
        if self.n_bb != target.n_embd:
            raise ValueError("%s: backbone width %s.%s = %d does not match the target n_embd %d"
                             % (path, arch, nm["bb"], self.n_bb, target.n_embd))
        self.eps = F32(_kv(g, arch, "attention.layer_norm_rms_epsilon", req=True))
        self.n_head = _per_layer(_kv(g, arch, "attention.head_count", req=True), L, "head_count", path)
        hd_full = int(_kv(g, arch, "attention.key_length", target.hd_full))
        hd_swa = int(_kv(g, arch, "attention.key_length_swa", target.hd_swa))
        if hd_full != target.hd_full or hd_swa != target.hd_swa:
            raise ValueError("%s: head dims full/swa %d/%d do not match the target's %d/%d"
                             % (path, hd_full, hd_swa, target.hd_full, target.hd_swa))
        self.n_swa = int(_kv(g, arch, "attention.sliding_window", target.n_swa))
        pat = _kv(g, arch, "attention.sliding_window_pattern", req=True)
        self.swa = [bool(x) for x in _per_layer(pat, L, "sliding_window_pattern", path)] \
            if isinstance(pat, list) else [bool(pat)] * L
        cap = _kv(g, arch, "final_logit_softcapping")
        self.softcap = float(cap) if cap else None          # only if the assistant GGUF carries it
        if not W.has("token_embd.weight"):
            raise ValueError("%s: missing tensor token_embd.weight" % path)
        nv = W.shape("token_embd.weight")[0]
        if nv != target.n_vocab:
            raise ValueError("%s: vocabulary size %d does not match the target's %d" % (path, nv, target.n_vocab))
        W.expect("token_embd.weight", (nv, E))
        self.head_name = next((n for n in ("output_extra.weight", "output.weight") if W.has(n)), "token_embd.weight")
        W.expect(self.head_name, (nv, E))
        W.expect("output_norm.weight", (E,))

        def find(key):
            return next((n for n in nm[key] if W.has(n)), None)
        self.pre, self.post = find("pre"), find("post")
        if self.pre is None or self.post is None:
            raise ValueError("%s: missing pre/post projection (%s, %s)" % (path, nm["pre"][0], nm["post"][0]))
        W.expect(self.pre, (E, 2 * self.n_bb))
        W.expect(self.post, (self.n_bb, E))
        self.kv_layer = []
        for il in range(L):
            b = "blk.%d." % il
            hd, nh = self.hd(il), self.n_head[il]
            cand = [j for j in range(target.n_kv_from_start) if target.swa[j] == self.swa[il]]
            if not cand:
                raise ValueError("%s: layer %d (%s) has no KV-owning target layer of its type"
                                 % (path, il, "SWA" if self.swa[il] else "full"))
            j = cand[-1]
            if nh % target.n_head_kv[j]:
                raise ValueError("%s: layer %d: %d heads not a multiple of target layer %d's %d kv heads"
                                 % (path, il, nh, j, target.n_head_kv[j]))
            self.kv_layer.append(j)
            W.expect(b + "attn_norm.weight", (E,))
            W.expect(b + "attn_q.weight", (nh * hd, E))
            W.expect(b + "attn_q_norm.weight", (hd,))
            W.expect(b + "attn_output.weight", (E, nh * hd))
            if W.has(b + "ffn_gate_inp.weight"):
                raise ValueError("%s: layer %d: MoE FFN is not supported in an assistant" % (path, il))
        # centroid-routed masked head (Decision 5: permutation semantics)
        cname, oname = find("centroids"), find("ordering")
        use = _kv(g, arch, "use_ordered_embeddings")
        self.masked = False
        if cname and oname and use is not False and not dense_head:
            self.n_c = int(_kv(g, arch, nm["n_c"], W.shape(cname)[0]))
            self.top_k = int(_kv(g, arch, nm["top_k"], req=True))
            W.expect(cname, (self.n_c, E))
            if nv % self.n_c or not 0 < self.top_k <= self.n_c:
                raise ValueError("%s: n_vocab %d / n_centroids %d / top_k %d inconsistent" % (path, nv, self.n_c, self.top_k))
            self.vpc = nv // self.n_c
            order = W.w(oname).reshape(-1)
            if order.size != nv or np.any(order != np.round(order)):
                raise ValueError("%s: %s must hold %d integer token ids" % (path, oname, nv))
            order = order.astype(np.int64)
            if np.array_equal(np.sort(order), np.arange(nv)):
                self.rows = order.reshape(self.n_c, self.vpc)      # row c = the tokens of centroid c
            elif order.min() >= 0 and order.max() < self.n_c and np.all(np.bincount(order, minlength=self.n_c) == self.vpc):
                # ik converter's rewritten token -> centroid map: rebuild the rows (order in a row is irrelevant)
                self.rows = np.stack([np.nonzero(order == c)[0] for c in range(self.n_c)])
            else:
                raise ValueError("%s: %s is neither a vocabulary permutation nor a token->centroid map" % (path, oname))
            self.centroids = W.w64(cname)
            self.masked = True
        elif use and not dense_head and not (cname and oname):
            raise ValueError("%s: use_ordered_embeddings is set but the centroid tensors are missing" % path)

    def hd(self, il):
        return self.t.hd_swa if self.swa[il] else self.t.hd_full

    def step(self, state, tok, h, p):
        """One draft step: (token tok, backbone hidden h (n_bb,)) as a single query at position p over
        the target KV. Returns (dense logits (V,), hf (E_a,) after output_norm, h_next (n_bb,))."""
        t, W, eps = self.t, self.W, self.eps
        if not 0 <= tok < t.n_vocab:
            raise ValueError("assistant: token %d out of range" % tok)
        e = (t.W.w("token_embd.weight")[[tok]] * F32(math.sqrt(self.n_bb))).astype(F32)
        x = mm(np.concatenate([e, np.asarray(h, F32).reshape(1, -1)], axis=1), W.w64(self.pre))  # embedding first
        pos = np.array([p], np.int64)
        for il in range(self.n_layer):
            b = "blk.%d." % il
            swa, hd, nh = self.swa[il], self.hd(il), self.n_head[il]
            n = rms_norm(x, W.w(b + "attn_norm.weight"), eps)
            q = rms_norm(mm(n, W.w64(b + "attn_q.weight")).reshape(1, nh, hd), W.w(b + "attn_q_norm.weight"), eps)
            q = t.rope(q, pos, swa)                 # the target's rope settings (+ rope_freqs on full layers)
            c = state.kv[self.kv_layer[il]]
            a = attend(q, c["k"], c["v"], pos, c["pos"], self.n_swa if swa else 0)
            a = rms_norm(mm(a, W.w64(b + "attn_output.weight")), W.w(b + "post_attention_norm.weight"), eps)
            hh = (x + a).astype(F32)
            m = rms_norm(hh, W.w(b + "ffn_norm.weight"), eps)
            f = mm(gelu(mm(m, W.w64(b + "ffn_gate.weight"))) * mm(m, W.w64(b + "ffn_up.weight")),
                   W.w(b + "ffn_down.weight"))
            y = (hh + rms_norm(f, W.w(b + "post_ffw_norm.weight"), eps)).astype(F32)
            if W.has(b + "layer_output_scale.weight"):
                y = (y * W.w(b + "layer_output_scale.weight")[0]).astype(F32)
            x = y
        hf = rms_norm(x, W.w("output_norm.weight"), eps)
        h_next = mm(hf, W.w64(self.post))
        logits = softcap(mm(hf, W.w64(self.head_name)), self.softcap)
        return logits[0], hf[0], h_next[0]

    def masked_head(self, hf, logits):
        """Centroid-routed head: top_k centroids of centroids.hf, their token rows, argmax among those
        tokens' (dense) logits. Returns (argmax, details); details['row'] is the full masked row
        (unselected = min(selected) - 1, as HF)."""
        cl = mm(hf.reshape(1, -1), self.centroids)[0]
        top = np.argsort(-cl.astype(F64), kind="stable")[:self.top_k]
        ids = self.rows[top].reshape(-1)
        row = np.full(logits.shape, np.min(logits[ids]) - F32(1.0), F32)
        row[ids] = logits[ids]
        am = int(np.argmax(row))
        return am, {"centroid_logits": cl, "top_centroids": [int(c) for c in top], "ids": ids, "row": row}

    def draft(self, state, id_last, h, p0, k, masked=False, positions="constant", forced=None):
        """k chained greedy steps from (id_last, target post-norm hidden at p0-1) at p0 (constant) or
        p0+s (increment). Token for step s+1 = argmax of step s (masked head if masked); its hidden =
        post_projection output of step s. forced: tokens fed instead (teacher forcing).
        Returns (ids, dense logits (k,V), h_next (k,n_bb), per-step masked details or None)."""
        if masked and not self.masked:
            raise ValueError("%s: no centroid (masked) LM head in this assistant" % self.path)
        if positions not in ("constant", "increment"):
            raise ValueError("draft positions must be constant or increment")
        ids, Ls, Hs, Ds = [], [], [], []
        tok, hh = id_last, h
        for s in range(k):
            p = p0 if positions == "constant" else p0 + s
            lg, hf, hn = self.step(state, tok, hh, p)
            if masked:
                am, det = self.masked_head(hf, lg)
                det["hf"] = hf
                Ds.append(det)
            else:
                am = int(np.argmax(lg))
            ids.append(am)
            Ls.append(lg)
            Hs.append(hn)
            tok = am if forced is None else int(forced[s])
            hh = hn
        return ids, np.stack(Ls), np.stack(Hs), (Ds if masked else None)


# ---------------------------------------------------------------------------
# drivers

def eval_prompt(m, ids, batch=0, ring_batch=0):
    """Prompt in chunks of `batch` rows (0 = one batch; with an SWA ring at most ring_batch)."""
    st = m.new_state(ring_batch)
    ids = list(ids)
    B = batch if batch and batch > 0 else len(ids)
    if ring_batch:
        B = min(B, ring_batch)
    L, H = [], []
    for i in range(0, len(ids), B):
        lg, hd = m.forward(st, ids[i:i + B])
        L.append(lg)
        H.append(hd)
    return st, np.concatenate(L), np.concatenate(H)


def greedy_continue(m, st, last_logits, n):
    toks, rows = [], [last_logits]
    lg = last_logits
    for i in range(n):
        t = int(np.argmax(lg))
        toks.append(t)
        if i + 1 < n:
            lg = m.forward(st, [t])[0][0]
            rows.append(lg)
    return toks, np.stack(rows)


def teacher_forced(m, st, last_logits, toks):
    rows = [last_logits]
    for t in toks[:-1]:
        rows.append(m.forward(st, [t])[0][0])
    return np.stack(rows)


def top_k(row, k):
    idx = np.argsort(-row.astype(F64), kind="stable")[:k]
    return [int(i) for i in idx], [float(row[i]) for i in idx]


CONVENTION = ("Assistant owns no KV: every step is a single query at constant position n (the position of "
              "id_last) attending to the target KV after the prompt (positions 0..n-1). Step 1 feeds (id_last, "
              "target post-output_norm hidden H[n-1]); step s+1 feeds (token chosen at step s, post_projection "
              "output of step s). Token choice: greedy argmax of the assistant logits.")


def _steps_json(ids, L, id_last, n, positions):
    steps, tok = [], id_last
    for s in range(len(ids)):
        row = L[s]
        ti, tl = top_k(row, 10)
        p = softmax64(row)
        steps.append({"step": s + 1, "input_token": tok, "position": n + (s if positions == "increment" else 0),
                      "argmax": ids[s], "top1_top2_margin": tl[0] - tl[1],
                      "argmax_softmax_prob": float(p[int(np.argmax(row))]), "top10": {"ids": ti, "logits": tl}})
        tok = ids[s]
    return steps


def drafts_json(m, a, ids, k, positions="constant", masked=None, batch=0):
    """The drafts.json layout: dense chain at top level; 'masked_head' when the assistant has the
    centroid head (masked None = whenever available). Returns (json, arrays dict)."""
    st, logits, hidden = eval_prompt(m, ids, batch)
    n = len(ids)
    id_last = int(np.argmax(logits[-1]))
    dids, dl, dh, _ = a.draft(st, id_last, hidden[-1], n, k, False, positions)
    out = {"id_last": id_last, "id_last_position": n, "draft_positions": positions,
           "convention": CONVENTION if positions == "constant" else CONVENTION.replace(
               "constant position n", "position n+s-1 at step s"),
           "draft_tokens": dids, "steps": _steps_json(dids, dl, id_last, n, positions)}
    arrays = {"draft_logits": dl, "draft_hidden": dh}
    if masked is None:
        masked = a.masked
    if masked:
        mids, ml, mh, det = a.draft(st, id_last, hidden[-1], n, k, True, positions)
        steps = _steps_json(mids, ml, id_last, n, positions)
        for s, d in enumerate(det):
            row = d["row"]
            sel = d["ids"]
            ti, tl = top_k(np.where(np.isin(np.arange(len(row)), sel), row, -np.inf), 10)
            steps[s].update({"dense_argmax": int(np.argmax(ml[s])), "centroid_logits": [float(c) for c in d["centroid_logits"]],
                             "top_centroids": d["top_centroids"], "masked_top10": {"ids": ti, "logits": tl},
                             "masked_top1_top2_margin": tl[0] - tl[1], "n_candidates": int(len(sel))})
        out["masked_head"] = {"draft_tokens": mids, "steps": steps}
        arrays.update({"masked_draft_logits": ml, "masked_draft_hidden": mh,
                       "masked_hf": np.stack([d["hf"] for d in det])})
    return out, arrays


def speculative_greedy(m, a, ids, n_predict, n_max=3, slack=2, masked=False, positions="constant",
                       ring_batch=0):
    """Greedy speculative decoding with the assistant (p_min 0, exact-match acceptance), golden
    spec_trace conventions: draft k = min(n_max, n_predict - generated - slack); k < 1 -> plain
    single-token decode. Commit = trim the target KV to the committed tokens; the drafter state is
    just the verify hidden row of the last accepted position. Returns (tokens, rounds, n_drafted,
    n_accepted, state)."""
    if ring_batch and ring_batch < n_max + 1:
        raise ValueError("SWA ring batch %d < verify batch %d" % (ring_batch, n_max + 1))
    st, logits, hidden = eval_prompt(m, ids, ring_batch=ring_batch)
    P = len(ids)
    id_last = int(np.argmax(logits[-1]))
    h_last = hidden[-1]
    out = [id_last]
    rounds = []
    nd = na = 0
    while len(out) < n_predict:
        k = min(n_max, n_predict - len(out) - slack)
        if k < 1:
            lg, hd = m.forward(st, [id_last])
            t = int(np.argmax(lg[0]))
            rounds.append({"round": len(rounds), "plain_decode": True, "token": t, "n_past": P + 1})
            out.append(t)
            h_last, P, id_last = hd[0], P + 1, t
            continue
        drafts, _, _, _ = a.draft(st, id_last, h_last, P, k, masked, positions)
        lg, hd = m.forward(st, [id_last] + drafts)
        acc = 0
        while acc < k and int(np.argmax(lg[acc])) == drafts[acc]:
            acc += 1
        new = drafts[:acc] + [int(np.argmax(lg[acc]))]
        st.seq_rm(P + acc + 1)
        rounds.append({"n_past": P, "id_last": id_last, "id_last_from_carry": len(rounds) > 0, "drafts": drafts,
                       "n_max_used": k, "ids": new, "n_accepted": acc, "round": len(rounds)})
        nd += k
        na += acc
        out.extend(new)
        h_last, P, id_last = hd[acc], P + acc + 1, new[-1]
    return out[:n_predict], rounds, nd, na, st


# ---------------------------------------------------------------------------
# derived test models (configurations no golden covers)

def _copy(g):
    """kv dict and float32 tensors (an I32 ordering becomes exact float32 values; the loader accepts both)."""
    return dict(g.kv), {n: g.tensor(n) for n in g.tensors}


def derive(kind, src, dst, seed=5):
    """Write a model derived from a gemma4 / gemma4-assistant GGUF:
    no-ple: target without per-layer embeddings (P = 0), no KV sharing, attn_v on every layer.
    moe / moe-split: every target layer MoE (4 experts, 2 used) with random router, random
        experts (fused gate_up / separate gate,up), router scale and per-expert scales.
    moe-dense: MoE layers whose experts all equal the dense FFN with unit norms, so that the
        MoE output equals the dense model's (a plumbing check).
    mtp-dialect: the assistant in ik's gemma4_mtp names, ordering rewritten to token->centroid."""
    g = gguf_np.GGUF(src)
    kv, T = _copy(g)
    rng = np.random.default_rng(seed)
    arch = kv["general.architecture"]
    if kind == "mtp-dialect":
        if arch != "gemma4-assistant":
            raise ValueError("mtp-dialect needs a gemma4-assistant source")
        kv2 = {}
        for k, v in kv.items():
            if k.startswith("gemma4-assistant."):
                k = "gemma4_mtp." + k[len("gemma4-assistant."):]
            kv2[{"gemma4_mtp.embedding_length_out": "gemma4_mtp.backbone_embedding_length",
                 "gemma4_mtp.n_centroids": "gemma4_mtp.centroid_count"}.get(k, k)] = v
        kv2["general.architecture"] = "gemma4_mtp"
        ren = {"nextn.pre_projection.weight": "mtp_pre_proj.weight", "nextn.post_projection.weight": "mtp_post_proj.weight",
               "masked_embd_centroids.weight": "mtp_centroids.weight", "masked_embd_ordering": "mtp_token_ordering.weight"}
        T2 = {ren.get(n, n): a for n, a in T.items()}
        if "mtp_token_ordering.weight" in T2:
            order = T2["mtp_token_ordering.weight"].astype(np.int64)
            n_c = int(kv2["gemma4_mtp.centroid_count"])
            inv = np.empty_like(order)
            inv[order] = np.arange(order.size)
            T2["mtp_token_ordering.weight"] = (inv // (order.size // n_c)).astype(F32)
        gguf_np.write_gguf(dst, kv2, T2)
        return
    if arch != "gemma4":
        raise ValueError("derive %s needs a gemma4 source" % kind)
    L = int(kv["gemma4.block_count"])
    E = int(kv["gemma4.embedding_length"])
    if kind == "no-ple":
        kv["gemma4.embedding_length_per_layer_input"] = 0
        kv["gemma4.attention.shared_kv_layers"] = 0
        for n in list(T):
            if n.startswith("per_layer_") or any(n.endswith(s) for s in (".inp_gate.weight", ".proj.weight", ".post_norm.weight")):
                del T[n]
        hkv = kv["gemma4.attention.head_count_kv"]
        pat = kv["gemma4.attention.sliding_window_pattern"]
        for il in range(L):
            b = "blk.%d." % il
            hd = int(kv["gemma4.attention.key_length_swa"] if pat[il] else kv["gemma4.attention.key_length"])
            nkv = hkv[il] if isinstance(hkv, list) else hkv
            for nm, shp in (("attn_k.weight", (nkv * hd, E)), ("attn_v.weight", (nkv * hd, E))):
                if b + nm not in T:
                    T[b + nm] = (rng.standard_normal(shp) * 0.1).astype(F32)
            if b + "attn_k_norm.weight" not in T:
                T[b + "attn_k_norm.weight"] = (1.0 + 0.1 * rng.standard_normal(hd)).astype(F32)
    elif kind in ("moe", "moe-split", "moe-dense"):
        ne, nu = 4, 2
        kv["gemma4.expert_count"] = ne
        kv["gemma4.expert_used_count"] = nu
        for il in range(L):
            b = "blk.%d." % il
            G, U, D = T[b + "ffn_gate.weight"], T[b + "ffn_up.weight"], T[b + "ffn_down.weight"]
            F = G.shape[0]
            kv["gemma4.expert_feed_forward_length"] = F
            T[b + "ffn_gate_inp.weight"] = rng.standard_normal((ne, E)).astype(F32)
            if kind == "moe-dense":
                Ge, Ue, De = np.stack([G] * ne), np.stack([U] * ne), np.stack([D] * ne)
                T[b + "ffn_gate_inp.scale"] = np.ones(E, F32)
                T[b + "pre_ffw_norm_2.weight"] = T[b + "ffn_norm.weight"].copy()
                T[b + "post_ffw_norm_1.weight"] = np.ones(E, F32)
                T[b + "post_ffw_norm_2.weight"] = np.ones(E, F32)
                T[b + "ffn_down_exps.scale"] = np.full(ne, 0.5, F32)
            else:
                Ge = (rng.standard_normal((ne, F, E)) * 0.2).astype(F32)
                Ue = (rng.standard_normal((ne, F, E)) * 0.2).astype(F32)
                De = (rng.standard_normal((ne, E, F)) * 0.2).astype(F32)
                T[b + "ffn_gate_inp.scale"] = (1.0 + 0.2 * rng.standard_normal(E)).astype(F32)
                for nm in ("pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"):
                    T[b + nm + ".weight"] = (1.0 + 0.1 * rng.standard_normal(E)).astype(F32)
                T[b + "ffn_down_exps.scale"] = (0.5 + rng.random(ne)).astype(F32)
            if kind == "moe-split":
                T[b + "ffn_gate_exps.weight"], T[b + "ffn_up_exps.weight"] = Ge, Ue
            else:
                T[b + "ffn_gate_up_exps.weight"] = np.concatenate([Ge, Ue], axis=1)   # gate rows first
            T[b + "ffn_down_exps.weight"] = De
    else:
        raise ValueError("unknown derive kind %r" % kind)
    gguf_np.write_gguf(dst, kv, T)


# ---------------------------------------------------------------------------
# CLI

def _parse_ids(a):
    if a.prompt_ids_file:
        with open(a.prompt_ids_file) as f:
            txt = f.read()
    elif a.prompt_ids:
        txt = a.prompt_ids
    else:
        raise SystemExit("error: --prompt-ids or --prompt-ids-file is required")
    txt = txt.strip()
    if txt.startswith("["):
        return [int(t) for t in json.loads(txt)]
    return [int(t) for t in txt.replace(",", " ").split()]


def main(argv):
    ap = argparse.ArgumentParser(prog="gemma4.py", description="numpy reference of gemma4 + gemma4-assistant")
    ap.add_argument("cmd", choices=["eval", "spec", "derive"])
    ap.add_argument("model", nargs="?")
    ap.add_argument("extra", nargs="*")
    ap.add_argument("-m", "--model-file", dest="model_file")
    ap.add_argument("--prompt-ids")
    ap.add_argument("--prompt-ids-file")
    ap.add_argument("--logits-out")
    ap.add_argument("--hidden-out")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--batch", type=int, default=0, help="prompt chunk size (0 = whole prompt)")
    ap.add_argument("--drafts", type=int, default=0)
    ap.add_argument("--draft-model", "--mtp-head", dest="draft_model")
    ap.add_argument("--masked-head", action="store_true", help="require and report the centroid (masked) head")
    ap.add_argument("--assistant-dense-head", action="store_true", help="ignore the centroid head")
    ap.add_argument("--draft-positions", choices=["constant", "increment"], default="constant")
    ap.add_argument("--ctk", choices=["f32", "f16"], default="f32", help="K and V cache type to emulate")
    ap.add_argument("--swa-ring", type=int, default=0, metavar="B",
                    help="SWA layers as a ring of n_swa-1+B cells (batches of at most B tokens)")
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--draft-max", type=int, default=3)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "derive":
            if not a.model or len(a.extra) != 2:
                ap.error("derive KIND SRC.gguf DST.gguf")
            derive(a.model, a.extra[0], a.extra[1])
            return 0
        path = a.model_file or a.model
        if not path:
            ap.error("a model file is required")
        m = Gemma4(path, kv_f16=(a.ctk == "f16"))
        ids = _parse_ids(a)
        asst = None
        if a.draft_model:
            asst = Assistant(a.draft_model, m, dense_head=a.assistant_dense_head)
            if a.masked_head and not asst.masked:
                raise ValueError("%s: --masked-head given but the assistant has no centroid head" % a.draft_model)
        if a.cmd == "spec":
            if asst is None:
                raise ValueError("spec needs --draft-model")
            toks, rounds, nd, na, _ = speculative_greedy(m, asst, ids, a.n_predict, a.draft_max,
                                                         masked=asst.masked, positions=a.draft_positions,
                                                         ring_batch=a.swa_ring)
            print(json.dumps({"n_prompt": len(ids), "n_predict": a.n_predict, "tokens": toks, "n_drafted": nd,
                              "n_accepted": na, "rounds": rounds}))
            return 0
        st, logits, hidden = eval_prompt(m, ids, a.batch, a.swa_ring)
        if a.logits_out:
            logits.astype("<f4").tofile(a.logits_out)
        if a.hidden_out:
            hidden.astype("<f4").tofile(a.hidden_out)
        if a.drafts:
            if asst is None:
                raise ValueError("--drafts needs --draft-model")
            d, _ = drafts_json(m, asst, ids, a.drafts, a.draft_positions, None, a.batch)
            print(json.dumps(d, indent=1))
        if a.greedy:
            toks, _ = greedy_continue(m, st, logits[-1], a.greedy)
            print(json.dumps(toks))
        elif not a.drafts:
            print(json.dumps([]))
    except (ValueError, OSError, KeyError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
