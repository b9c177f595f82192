#!/usr/bin/python3
"""Independent numpy reference of the Qwen3.5 (`qwen35`, `qwen35moe`) forward pass and its MTP head.

Owns: the trunk forward (Gated DeltaNet + gated full attention + dense/MoE FFN), per-sequence state
(attention KV, conv + SSM state, per-token recurrent snapshots), the MTP (NextN) head with its own
KV, chained greedy drafting, a greedy speculative loop, and the CLI `eval` mirroring `nextn eval`.
Promises: the math of docs/spec/qwen35.md (Decisions included), float32 activations
(float64 only for the RMSNorm sum of squares, as the engine), weights dequantized exactly.
Optional emulation of the reference engine's numerics: V cache in f16 (`v_f16`) and 8-bit
activation rounding for quantized-weight matmuls (`aq8`).
Must never: share code with nextn's C sources; it is the oracle they are compared with.

Usage: qwen35.py eval MODEL.gguf --prompt-ids 1,2,3 [--greedy N] [--logits-out F] [--hidden-out F]
       [--batch B] [--drafts K] [--mtp-logits-out F] [--ctv f16] [--aq8]
       qwen35.py spec MODEL.gguf --prompt-ids ... [--n-predict N] [--draft-max K]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402

F32 = np.float32


# ---------------------------------------------------------------------------
# elementwise helpers (float32)

def rms_norm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis; the sum of squares in float64 as ggml."""
    ss = np.mean(np.square(x.astype(np.float64)), axis=-1, keepdims=True).astype(F32)
    scale = (F32(1.0) / np.sqrt(ss + F32(eps))).astype(F32)
    y = (x * scale).astype(F32)
    return y * w if w is not None else y


def silu(x):
    return (x / (F32(1.0) + np.exp(-x))).astype(F32)


def sigmoid(x):
    return (F32(1.0) / (F32(1.0) + np.exp(-x))).astype(F32)


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))).astype(F32)


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return (e / np.sum(e.astype(np.float64), axis=axis, keepdims=True)).astype(F32)


def bf16_round(x):
    """float32 -> nearest bf16 (ties to even), returned as float32."""
    u = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(F32)


def quantize_act_q8(x):
    """The engine's activation rounding for quantized-weight matmuls: blocks of 32 along the last
    axis, d = bf16(max|x|/127), q = round(x/d), x' = q*d."""
    shp = x.shape
    n = shp[-1]
    if n % 32:
        return x
    b = x.reshape(-1, n // 32, 32)
    amax = np.max(np.abs(b), axis=-1, keepdims=True)
    d = bf16_round(amax / F32(127.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d > 0, np.round(b / np.where(d > 0, d, 1)), 0).astype(F32)
    return (q * d).astype(F32).reshape(shp)


# ---------------------------------------------------------------------------
# model

class Qwen35Model:
    def __init__(self, path, v_f16=False, aq8=False):
        self.g = g = gguf_np.GGUF(path)
        self.arch = arch = g.get("general.architecture")
        if arch not in ("qwen35", "qwen35moe"):
            raise ValueError("%s: architecture %r is not qwen35/qwen35moe" % (path, arch))
        self.v_f16, self.aq8 = v_f16, aq8
        self._w = {}

        def kv(name, default=None, req=False):
            key = "%s.%s" % (arch, name)
            if key not in g.kv:
                if req:
                    raise ValueError("%s: missing metadata key %s" % (path, key))
                return default
            return g.kv[key]

        self.n_layer = kv("block_count", req=True)
        self.n_embd = E = kv("embedding_length", req=True)
        self.n_nextn = kv("nextn_predict_layers", 0)
        self.n_main = self.n_layer - self.n_nextn
        self.eps = F32(kv("attention.layer_norm_rms_epsilon", req=True))
        self.n_head = kv("attention.head_count", 0)
        if isinstance(self.n_head, list):
            self.n_head = max(self.n_head)
        self.n_head_kv = kv("attention.head_count_kv", self.n_head)
        if isinstance(self.n_head_kv, list):
            self.n_head_kv = max(self.n_head_kv)
        self.head_dim = kv("attention.key_length", E // max(self.n_head, 1))
        self.n_rot = kv("rope.dimension_count", self.head_dim)
        self.sections = list(kv("rope.dimension_sections", req=True))[:4]
        self.freq_base = F32(kv("rope.freq_base", 10000.0))
        factor = kv("rope.scaling.factor", kv("rope.scale_linear", 0.0))
        self.freq_scale = F32(1.0 / factor) if factor else F32(1.0)
        self.interval = kv("full_attention_interval", 4)
        self.d_conv = kv("ssm.conv_kernel", req=True)
        self.dk = kv("ssm.state_size", req=True)
        self.nk = kv("ssm.group_count", req=True)
        self.nv = kv("ssm.time_step_rank", req=True)
        self.value_dim = kv("ssm.inner_size", req=True)
        self.dv = self.value_dim // self.nv
        self.n_expert = kv("expert_count", 0)
        self.n_expert_used = kv("expert_used_count", 0)
        tok = g.tensors.get("token_embd.weight")
        if tok is None:
            raise ValueError("%s: missing tensor token_embd.weight" % path)
        self.n_vocab = kv("vocab_size", tok.ne[1])
        # layer type by tensor presence (Decision 7); interval only as the fallback
        self.layer_kind = []
        for il in range(self.n_main):
            if self.has("blk.%d.ssm_conv1d.weight" % il):
                self.layer_kind.append("deltanet")
            elif self.has("blk.%d.attn_q.weight" % il):
                self.layer_kind.append("attn")
            else:
                self.layer_kind.append("attn" if (il + 1) % self.interval == 0 else "deltanet")
        self.out_name = "output.weight" if self.has("output.weight") else "token_embd.weight"
        self.mtp_layer = self.n_layer - 1 if self.n_nextn > 0 else None
        self.mtp_out_name = "output_extra.weight" if self.has("output_extra.weight") else self.out_name
        self.mtp_embd_name = "token_embd.weight"
        if self.mtp_layer is not None:
            # the head's own NextN embedding / LM head win when the GGUF carries them
            own = "blk.%d.nextn." % self.mtp_layer
            if self.has(own + "embed_tokens.weight"):
                self.mtp_embd_name = own + "embed_tokens.weight"
            if self.has(own + "shared_head_head.weight"):
                self.mtp_out_name = own + "shared_head_head.weight"
        # IMROPE: which position component each rotated pair uses; text positions are (p,p,p,0)
        self.rope_use_p = np.ones(self.n_rot // 2, dtype=bool)
        s = self.sections
        ssum = sum(s)
        if ssum > 0:
            for i in range(self.n_rot // 2):
                sec = i % ssum
                self.rope_use_p[i] = ((sec % 3 == 0 and sec < 3 * s[0]) or (sec % 3 == 1 and sec < 3 * s[1])
                                      or (sec % 3 == 2 and sec < 3 * s[2]))
        # theta_scale^i accumulated in float32 like the engine's rope cache
        ts = F32(np.power(self.freq_base, F32(-2.0) / F32(self.n_rot), dtype=F32))
        f = np.empty(self.n_rot // 2, F32)
        t = F32(1.0)
        for i in range(self.n_rot // 2):
            f[i] = t
            t = F32(t * ts)
        self.rope_freq = f

    # -- weights ----------------------------------------------------------
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

    def quantized(self, name):
        return self.g.tensors[name].type in gguf_np.QUANTIZED

    def lin(self, name, x):
        """y = W x for every row of x (W stored ne={in,out} -> numpy (out,in))."""
        W = self.w(name)
        if self.aq8 and self.quantized(name):
            x = quantize_act_q8(x)
        return (x @ W.T).astype(F32)

    def lin_expert(self, name, e, x):
        W = self.w(name)[e]
        if self.aq8 and self.quantized(name):
            x = quantize_act_q8(x)
        return (x @ W.T).astype(F32)

    # -- blocks -----------------------------------------------------------
    def rope(self, x, pos):
        """x: (n, H, D); NEOX rotation of the first n_rot dims at positions pos (n,)."""
        half = self.n_rot // 2
        p = pos.astype(F32)[:, None] * self.rope_use_p[None, :].astype(F32)   # e-sector -> pos 0
        theta = (p * self.rope_freq[None, :]) * self.freq_scale                 # (n, half)
        c = np.cos(theta).astype(F32)[:, None, :]
        s = np.sin(theta).astype(F32)[:, None, :]
        x0 = x[..., :half]
        x1 = x[..., half:self.n_rot]
        out = x.copy()
        out[..., :half] = x0 * c - x1 * s
        out[..., half:self.n_rot] = x0 * s + x1 * c
        return out

    def attention(self, il, x, pos, cache):
        """Gated full attention of layer il over rows x (n,E) at positions pos; appends K/V to cache
        (a dict with 'k','v' arrays [P,Hkv,D] for positions 0..P-1)."""
        n = x.shape[0]
        H, Hkv, D = self.n_head, self.n_head_kv, self.head_dim
        b = "blk.%d." % il
        u = rms_norm(x, self.w(b + "attn_norm.weight"), self.eps)
        qname = b + "attn_q.weight"
        if not self.has(qname) and il == self.mtp_layer:
            qname = "blk.%d.attn_q.weight" % (self.n_main - 1)   # "9B shares q_proj"
        qa = self.lin(qname, u).reshape(n, H, 2 * D)
        q, gate = qa[:, :, :D], qa[:, :, D:].reshape(n, H * D)
        k = self.lin(b + "attn_k.weight", u).reshape(n, Hkv, D)
        v = self.lin(b + "attn_v.weight", u).reshape(n, Hkv, D)
        q = rms_norm(q, self.w(b + "attn_q_norm.weight"), self.eps)
        k = rms_norm(k, self.w(b + "attn_k_norm.weight"), self.eps)
        q = self.rope(q, pos)
        k = self.rope(k, pos)
        if self.v_f16:
            # engine files: V cache stored f16 (K stays f32); the softmax weights are NOT rounded
            v = v.astype(np.float16).astype(F32)
        P0 = cache["k"].shape[0]
        if pos[0] != P0 or np.any(pos != P0 + np.arange(n)):
            raise ValueError("attention: positions %s not contiguous after cache of %d" % (pos[:4], P0))
        cache["k"] = np.concatenate([cache["k"], k], axis=0)
        cache["v"] = np.concatenate([cache["v"], v], axis=0)
        K, V = cache["k"], cache["v"]
        P = K.shape[0]
        kpos = np.arange(P)
        mask = np.where(kpos[None, :] <= pos[:, None], F32(0.0), F32(-np.inf)).astype(F32)
        scale = F32(1.0 / np.sqrt(D))
        grp = H // Hkv
        out = np.empty((n, H, D), F32)
        for h in range(H):
            j = h // grp
            s = (q[:, h, :] @ K[:, j, :].T).astype(F32) * scale + mask
            p = softmax(s)
            out[:, h, :] = p @ V[:, j, :]
        o = out.reshape(n, H * D) * sigmoid(gate)
        return self.lin(b + "attn_output.weight", o)

    def deltanet(self, il, x, st, snaps):
        """Gated DeltaNet layer il over rows x (n,E), sequential over tokens; st: dict conv, ssm."""
        n = x.shape[0]
        b = "blk.%d." % il
        nk, nv, dk, dv = self.nk, self.nv, self.dk, self.dv
        key_dim = nk * dk
        u = rms_norm(x, self.w(b + "attn_norm.weight"), self.eps)
        m = self.lin(b + "attn_qkv.weight", u)             # (n, conv_dim)
        z = self.lin(b + "attn_gate.weight", u)            # (n, value_dim)
        beta = sigmoid(self.lin(b + "ssm_beta.weight", u))  # (n, nv)
        a = self.lin(b + "ssm_alpha.weight", u)
        g = softplus(a + self.w(b + "ssm_dt.bias")) * self.w(b + "ssm_a")
        decay = np.exp(np.minimum(g, F32(50.0))).astype(F32)          # engine quirk: g <= 50
        cw = self.w(b + "ssm_conv1d.weight")                # (conv_dim, d_conv)
        kh = np.arange(nv) % nk                             # tiled V->K head pairing (repeat_type 1)
        scale = F32(1.0 / np.sqrt(dk))
        outs = np.empty((n, nv, dv), F32)
        conv, S = st["conv"], st["ssm"]                     # (conv_dim, d_conv-1), (nv, dv, dk)
        for t in range(n):
            win = np.concatenate([conv, m[t][:, None]], axis=1)        # oldest first
            y = silu(np.sum(win * cw, axis=1, dtype=F32))
            conv = win[:, 1:].copy()
            q = y[:key_dim].reshape(nk, dk)
            k = y[key_dim:2 * key_dim].reshape(nk, dk)
            v = y[2 * key_dim:].reshape(nv, dv)
            q = q / np.maximum(np.sqrt(np.sum(q * q, axis=1, keepdims=True)), self.eps)
            k = k / np.maximum(np.sqrt(np.sum(k * k, axis=1, keepdims=True)), self.eps)
            qh, khh = q[kh], k[kh]                                       # (nv, dk)
            S = S * decay[t][:, None, None]
            v_new = beta[t][:, None] * (v - np.einsum("hrc,hc->hr", S, khh))
            S = S + v_new[:, :, None] * khh[:, None, :]
            S = np.clip(S, F32(-1e6), F32(1e6)).astype(F32)              # engine quirk
            outs[t] = np.einsum("hrc,hc->hr", S, qh) * scale
            if snaps is not None:
                snaps[t][il] = (conv.copy(), S.copy())
        st["conv"], st["ssm"] = conv, S
        o = rms_norm(outs, self.w(b + "ssm_norm.weight"), self.eps)      # per head over dv, no +1
        o = o * silu(z.reshape(n, nv, dv))
        return self.lin(b + "ssm_out.weight", o.reshape(n, nv * dv))

    def ffn(self, il, r):
        b = "blk.%d." % il
        nrm = rms_norm(r, self.w(b + "post_attention_norm.weight"), self.eps)
        if self.arch == "qwen35moe":
            return r + self.moe(il, nrm)
        if not self.has(b + "ffn_gate.weight"):
            return None       # MTP layer without FFN: skipped, no residual
        h = silu(self.lin(b + "ffn_gate.weight", nrm)) * self.lin(b + "ffn_up.weight", nrm)
        return r + self.lin(b + "ffn_down.weight", h)

    def moe(self, il, x):
        b = "blk.%d." % il
        n = x.shape[0]
        p = softmax(self.lin(b + "ffn_gate_inp.weight", x))          # (n, n_expert)
        k = self.n_expert_used
        out = np.zeros_like(x)
        merged = self.has(b + "ffn_gate_up_exps.weight")
        for t in range(n):
            sel = np.argsort(-p[t], kind="stable")[:k]
            w = p[t, sel]
            w = (w / max(np.sum(w, dtype=F32), F32(6.1e-5))).astype(F32)
            xt = x[t:t + 1]
            acc = np.zeros((1, x.shape[1]), F32)
            for e, we in zip(sel, w):
                if merged:
                    gu = self.lin_expert(b + "ffn_gate_up_exps.weight", e, xt)
                    half = gu.shape[1] // 2
                    gt, up = gu[:, :half], gu[:, half:]
                else:
                    gt = self.lin_expert(b + "ffn_gate_exps.weight", e, xt)
                    up = self.lin_expert(b + "ffn_up_exps.weight", e, xt)
                acc += we * self.lin_expert(b + "ffn_down_exps.weight", e, silu(gt) * up)
            out[t] = acc[0]
        if self.has(b + "ffn_up_shexp.weight"):
            gs = sigmoid(x @ self.w(b + "ffn_gate_inp_shexp.weight").reshape(-1, 1))   # (n,1)
            hs = silu(self.lin(b + "ffn_gate_shexp.weight", x)) * self.lin(b + "ffn_up_shexp.weight", x)
            out = out + gs * self.lin(b + "ffn_down_shexp.weight", hs)
        return out.astype(F32)

    # -- trunk ------------------------------------------------------------
    def new_state(self):
        return State(self)

    def forward(self, state, tokens, snapshots=False):
        """Process tokens at positions state.n_past.. ; returns (logits (n,V), hidden (n,E)) where
        hidden is the post-output_norm row, plus (if snapshots) the recurrent state after each token."""
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(tokens)
        if n == 0:
            raise ValueError("forward: empty batch")
        if np.any(tokens < 0) or np.any(tokens >= self.n_vocab):
            raise ValueError("forward: token id out of range [0,%d)" % self.n_vocab)
        pos = state.n_past + np.arange(n)
        if pos[0] == 0:
            state.reset_recurrent()
        snaps = [dict() for _ in range(n)] if snapshots else None
        x = self.w("token_embd.weight")[tokens].astype(F32)
        for il in range(self.n_main):
            if self.layer_kind[il] == "attn":
                r = x + self.attention(il, x, pos, state.kv[il])
            else:
                r = x + self.deltanet(il, x, state.rec[il], snaps)
            x = self.ffn(il, r)
        state.n_past += n
        hidden = rms_norm(x, self.w("output_norm.weight"), self.eps)
        logits = self.lin(self.out_name, hidden)
        return (logits, hidden, snaps) if snapshots else (logits, hidden)

    # -- MTP head -----------------------------------------------------------
    def new_mtp_state(self):
        if self.mtp_layer is None:
            raise ValueError("%s: model has no MTP layer (nextn_predict_layers = 0)" % self.g.path)
        return MtpState(self)

    def mtp_forward(self, mst, tokens, hiddens, pos0):
        """MTP rows (token q, hidden q-1) at positions pos0.. appended to the MTP KV (positions >= pos0
        are removed first). Returns (logits (n,V), h_mtp (n,E)) with h_mtp after shared_head_norm."""
        L = self.mtp_layer
        b = "blk.%d." % L
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(tokens)
        mst.seq_rm(pos0)
        pos = pos0 + np.arange(n)
        e = self.w(self.mtp_embd_name)[tokens].astype(F32)
        h = np.asarray(hiddens, dtype=F32).reshape(n, self.n_embd)
        en = rms_norm(e, self.w(b + "nextn.enorm.weight"), self.eps)
        hn = rms_norm(h, self.w(b + "nextn.hnorm.weight"), self.eps)
        if self.has(b + "nextn.eh_proj.weight"):
            x = self.lin(b + "nextn.eh_proj.weight", np.concatenate([en, hn], axis=1))  # embedding first
        else:
            x = en + hn
        r = x + self.attention(L, x, pos, mst.kv)
        y = self.ffn(L, r)
        if y is None:
            y = r
        if self.has(b + "nextn.shared_head_norm.weight"):
            hm = rms_norm(y, self.w(b + "nextn.shared_head_norm.weight"), self.eps)
        else:
            hm = y
        return self.lin(self.mtp_out_name, hm), hm


def _empty_kv(m):
    return {"k": np.zeros((0, m.n_head_kv, m.head_dim), F32), "v": np.zeros((0, m.n_head_kv, m.head_dim), F32)}


class State:
    """One sequence's trunk state: attention KV per attention layer, conv+SSM per DeltaNet layer."""

    def __init__(self, m):
        self.m = m
        self.n_past = 0
        self.kv = {il: _empty_kv(m) for il in range(m.n_main) if m.layer_kind[il] == "attn"}
        self.rec = {}
        self.reset_recurrent()

    def reset_recurrent(self):
        m = self.m
        conv_dim = 2 * m.nk * m.dk + m.value_dim
        self.rec = {il: {"conv": np.zeros((conv_dim, m.d_conv - 1), F32),
                         "ssm": np.zeros((m.nv, m.dv, m.dk), F32)}
                    for il in range(m.n_main) if m.layer_kind[il] == "deltanet"}

    def seq_rm(self, p0):
        """Drop attention KV at positions >= p0 (recurrent state is restored separately)."""
        for c in self.kv.values():
            c["k"], c["v"] = c["k"][:p0], c["v"][:p0]
        self.n_past = min(self.n_past, p0)

    def restore(self, snap, n_past):
        """Recurrent state from a per-token snapshot; attention KV trimmed to n_past positions."""
        for il, (conv, S) in snap.items():
            self.rec[il] = {"conv": conv.copy(), "ssm": S.copy()}
        self.seq_rm(n_past)
        self.n_past = n_past


class MtpState:
    def __init__(self, m):
        self.kv = _empty_kv(m)

    def seq_rm(self, p0):
        self.kv["k"], self.kv["v"] = self.kv["k"][:p0], self.kv["v"][:p0]

    @property
    def n(self):
        return self.kv["k"].shape[0]


# ---------------------------------------------------------------------------
# drivers

def eval_prompt(m, ids, batch=0):
    """Prompt in chunks of `batch` rows (0 = one batch). Returns state, logits, hidden."""
    st = m.new_state()
    ids = list(ids)
    B = batch if batch and batch > 0 else len(ids)
    L, H = [], []
    for i in range(0, len(ids), B):
        lg, hd = m.forward(st, ids[i:i + B])
        L.append(lg)
        H.append(hd)
    return st, np.concatenate(L), np.concatenate(H)


def greedy_continue(m, st, last_logits, n):
    """n greedy tokens, one per decode; returns tokens and the logits that chose each."""
    toks, rows = [], [last_logits]
    lg = last_logits
    for k in range(n):
        t = int(np.argmax(lg))
        toks.append(t)
        if k + 1 < n:
            lg, _ = m.forward(st, [t])
            lg = lg[0]
            rows.append(lg)
    return toks, np.stack(rows)


def teacher_forced(m, st, last_logits, toks):
    """Logits rows choosing each of toks when toks are fed one per decode (row 0 = last_logits)."""
    rows = [last_logits]
    for t in toks[:-1]:
        lg, _ = m.forward(st, [t])
        rows.append(lg[0])
    return np.stack(rows)


def mtp_prompt_rows(m, ids, hidden, batch=0):
    """MTP rows for every prompt position q: (token q, hidden q-1; zeros for q=0), fresh MTP cache."""
    mst = m.new_mtp_state()
    hprev = np.concatenate([np.zeros((1, m.n_embd), F32), hidden[:-1]], axis=0)
    n = len(ids)
    B = batch if batch and batch > 0 else n
    L, H = [], []
    for i in range(0, n, B):
        lg, hm = m.mtp_forward(mst, ids[i:i + B], hprev[i:i + B], i)
        L.append(lg)
        H.append(hm)
    return mst, np.concatenate(L), np.concatenate(H)


def draft_chain(m, mst, id_last, h_prev, pos, k, forced=None):
    """k chained greedy MTP steps from (id_last, h_prev) at pos; the MTP rows > pos are dropped
    afterwards (row pos is real data and stays). Returns ids, logits (k,V), hiddens (k,E).
    forced: optional token list fed instead of the argmax (teacher forcing of a recorded chain)."""
    ids, L, H = [], [], []
    tok, h = id_last, h_prev
    for s in range(k):
        lg, hm = m.mtp_forward(mst, [tok], h.reshape(1, -1), pos + s)
        tok = int(np.argmax(lg[0]))
        ids.append(tok)
        if forced is not None:
            tok = int(forced[s])
        L.append(lg[0])
        H.append(hm[0])
        h = hm[0]
    mst.seq_rm(pos + 1)
    return ids, np.stack(L), np.stack(H)


def top_k(row, k):
    idx = np.argsort(-row, kind="stable")[:k]
    return [int(i) for i in idx], [float(row[i]) for i in idx]


def drafts_json(m, ids, k, st=None, logits=None, hidden=None, batch=0):
    if st is None:
        st, logits, hidden = eval_prompt(m, ids, batch)
    n = len(ids)
    mst, _, _ = mtp_prompt_rows(m, ids, hidden, batch)
    id_last = int(np.argmax(logits[-1]))
    dids, dl, dh = draft_chain(m, mst, id_last, hidden[-1], n, k)
    steps = []
    tok = id_last
    for s in range(k):
        row = dl[s]
        ti, tl = top_k(row, 10)
        p = softmax(row.astype(np.float64))
        steps.append({"step": s + 1, "input_token": tok, "position": n + s, "argmax": dids[s],
                      "top1_top2_margin": tl[0] - tl[1], "argmax_softmax_prob": float(p[dids[s]]),
                      "top10": {"ids": ti, "logits": tl}})
        tok = dids[s]
    return {"id_last": id_last, "id_last_position": n, "draft_tokens": dids, "steps": steps}, dl, dh


def speculative_greedy(m, ids, n_predict, n_max=3, slack=2):
    """Greedy MTP speculative decoding (p_min 0, exact-match acceptance) following the golden
    spec_trace convention (slack 2: draft at most n_predict - generated - 2). Returns (tokens, rounds, n_drafted, n_accepted, per_depth[(drafted, acc)])."""
    st, logits, hidden = eval_prompt(m, ids)
    mst, _, _ = mtp_prompt_rows(m, ids, hidden)        # warm-up: (t_q, h_{q-1})
    n = len(ids)
    id_last = int(np.argmax(logits[-1]))
    h_last = hidden[-1]                                 # target hidden at P-1
    out = [id_last]
    rounds = []
    n_drafted = n_acc = 0
    depth = [[0, 0] for _ in range(max(n_max, 1))]
    P = n
    while len(out) < n_predict:
        # budget rule of the golden trace: draft at most n_predict - generated - 2 (a round may
        # commit k+1 tokens); below 1 the round is a plain single-token decode
        k = min(n_max, n_predict - len(out) - slack)
        if k < 1:
            # plain decode (also keeps the MTP KV warm: Decision 3)
            lg, hd = m.forward(st, [id_last])
            mst_l, mst_h = m.mtp_forward(mst, [id_last], h_last.reshape(1, -1), P)
            t = int(np.argmax(lg[0]))
            rounds.append({"round": len(rounds), "plain_decode": True, "token": t, "n_past": P + 1})
            out.append(t)
            h_last = hd[0]
            P += 1
            id_last = t
            continue
        drafts, _, _ = draft_chain(m, mst, id_last, h_last, P, k)
        lg, hd, snaps = m.forward(st, [id_last] + drafts, snapshots=True)
        acc = 0
        while acc < k and int(np.argmax(lg[acc])) == drafts[acc]:
            acc += 1
        new = drafts[:acc] + [int(np.argmax(lg[acc]))]
        for d in range(k):          # per depth, unconditional (as the engine's per-depth counters)
            depth[d][0] += 1
            depth[d][1] += d < acc
        n_drafted += k
        n_acc += acc
        # commit: recurrent state after verify row acc, attention KV up to P+acc
        st.restore(snaps[acc], P + acc + 1)
        # MTP update: ids[i] at P+1+i paired with verify hidden row i
        m.mtp_forward(mst, new, hd[:acc + 1], P + 1)
        rounds.append({"n_past": P, "id_last": id_last, "drafts": drafts, "n_max_used": k,
                       "ids": new, "n_accepted": acc, "round": len(rounds)})
        out.extend(new)
        h_last = hd[acc]
        P += acc + 1
        id_last = new[-1]
    return out[:n_predict], rounds, n_drafted, n_acc, depth


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
    ap = argparse.ArgumentParser(prog="qwen35.py", description="numpy reference of qwen35/qwen35moe + MTP")
    ap.add_argument("cmd", choices=["eval", "spec"])
    ap.add_argument("model", nargs="?")
    ap.add_argument("-m", "--model-file", dest="model_file")
    ap.add_argument("--prompt-ids")
    ap.add_argument("--prompt-ids-file")
    ap.add_argument("--logits-out")
    ap.add_argument("--hidden-out")
    ap.add_argument("--mtp-logits-out")
    ap.add_argument("--mtp-hidden-out")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--batch", type=int, default=0, help="prompt chunk size (0 = whole prompt)")
    ap.add_argument("--drafts", type=int, default=0)
    ap.add_argument("--ctv", choices=["f32", "f16"], default="f32", help="V cache type to emulate")
    ap.add_argument("--aq8", action="store_true", help="emulate 8-bit activations of quantized matmuls")
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--draft-max", type=int, default=3)
    a = ap.parse_args(argv)
    path = a.model_file or a.model
    if not path:
        ap.error("a model file is required")
    try:
        m = Qwen35Model(path, v_f16=(a.ctv == "f16"), aq8=a.aq8)
        ids = _parse_ids(a)
        if a.cmd == "spec":
            toks, rounds, nd, na, depth = speculative_greedy(m, ids, a.n_predict, a.draft_max)
            print(json.dumps({"tokens": toks, "n_drafted": nd, "n_accepted": na,
                              "acceptance": na / nd if nd else 0.0,
                              "per_depth": [d[1] / d[0] if d[0] else None for d in depth],
                              "rounds": rounds}))
            return 0
        st, logits, hidden = eval_prompt(m, ids, a.batch)
        if a.logits_out:
            logits.astype("<f4").tofile(a.logits_out)
        if a.hidden_out:
            hidden.astype("<f4").tofile(a.hidden_out)
        if a.mtp_logits_out or a.mtp_hidden_out:
            _, ml, mh = mtp_prompt_rows(m, ids, hidden, a.batch)
            if a.mtp_logits_out:
                ml.astype("<f4").tofile(a.mtp_logits_out)
            if a.mtp_hidden_out:
                mh.astype("<f4").tofile(a.mtp_hidden_out)
        if a.drafts:
            d, _, _ = drafts_json(m, ids, a.drafts, st=None, batch=a.batch)
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
