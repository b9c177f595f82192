"""Independent numpy reference of llama.cpp's `llama` architecture (test oracle for nextn).

Owns: a float64 forward pass over a prompt (RMSNorm, GQA causal attention with NORM RoPE,
SwiGLU FFN, final norm, LM head tied to token_embd when `output` is absent), written from the
architecture's definition, not from nextn's C: every sum in float64 and RoPE angles computed
directly in float64 (nextn computes in float32 with ggml's chained theta), so agreement is to
float32 rounding, not bit for bit.
Commands:
  eval  MODEL --prompt-ids 1,2,3 [--logits-out F.f32] [--hidden-out F.f32]
  check MODEL --prompt-ids ... --logits F.f32 --hidden F.f32 [--tol-logits T] [--tol-hidden T]
        compares nextn's files (nextn eval --logits-out / --hidden-out) with the reference and
        ends with "N passed, N failed".
Must never: depend on anything but numpy, the standard library and gguf_np.py.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402

F64 = np.float64


class Llama:
    def __init__(self, path):
        g = gguf_np.GGUF(path)
        if g.get("general.architecture") != "llama":
            raise ValueError("%s: not a llama model" % path)
        self.g = g

        def key(k, default=None):
            v = g.get("llama." + k, default)
            if v is None:
                raise ValueError("%s: missing key llama.%s" % (path, k))
            return v

        self.n_layer = int(key("block_count"))
        self.n_embd = int(key("embedding_length"))
        self.n_head = int(key("attention.head_count"))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(key("rope.dimension_count", self.head_dim))
        self.base = float(key("rope.freq_base", 10000.0))
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        self.w = {}

    def t(self, name):
        a = self.w.get(name)
        if a is None:
            a = self.g.tensor(name).astype(F64)   # numpy order: (out, in)
            self.w[name] = a
        return a

    def norm(self, x, name):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * self.t(name)

    def rope(self, x, pos):
        """x (T, heads, D): rotate adjacent pairs (2i, 2i+1) of the first n_rot dims by pos * base^(-2i/n_rot)."""
        half = self.n_rot // 2
        ang = np.asarray(pos, F64)[:, None] * self.base ** (-2.0 * np.arange(half, dtype=F64) / self.n_rot)
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = x.copy()
        x0, x1 = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
        out[..., 0:2 * half:2] = x0 * c - x1 * s
        out[..., 1:2 * half:2] = x0 * s + x1 * c
        return out

    def forward(self, ids):
        """logits (T, V) and post-norm hidden (T, E) of every prompt position."""
        T, H, Hkv, D = len(ids), self.n_head, self.n_head_kv, self.head_dim
        pos = np.arange(T)
        x = self.t("token_embd.weight")[np.asarray(ids)]
        causal = np.tril(np.ones((T, T), bool))
        for il in range(self.n_layer):
            b = "blk.%d." % il
            n = self.norm(x, b + "attn_norm.weight")
            q = self.rope((n @ self.t(b + "attn_q.weight").T).reshape(T, H, D), pos)
            k = self.rope((n @ self.t(b + "attn_k.weight").T).reshape(T, Hkv, D), pos)
            v = (n @ self.t(b + "attn_v.weight").T).reshape(T, Hkv, D)
            o = np.empty((T, H, D))
            for h in range(H):
                kv = h // (H // Hkv)
                s = (q[:, h, :] @ k[:, kv, :].T) / np.sqrt(D)
                s = np.where(causal, s, -np.inf)
                p = np.exp(s - s.max(axis=1, keepdims=True))
                o[:, h, :] = (p / p.sum(axis=1, keepdims=True)) @ v[:, kv, :]
            x = x + o.reshape(T, H * D) @ self.t(b + "attn_output.weight").T
            n = self.norm(x, b + "ffn_norm.weight")
            gt = n @ self.t(b + "ffn_gate.weight").T
            up = n @ self.t(b + "ffn_up.weight").T
            x = x + (gt / (1.0 + np.exp(-gt)) * up) @ self.t(b + "ffn_down.weight").T
        hidden = self.norm(x, "output_norm.weight")
        head = "output.weight" if "output.weight" in self.g.tensors else "token_embd.weight"
        return hidden @ self.t(head).T, hidden


def main(argv):
    ap = argparse.ArgumentParser(prog="llama.py", description="numpy float64 reference of the llama architecture")
    ap.add_argument("cmd", choices=["eval", "check"])
    ap.add_argument("model")
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--logits-out")
    ap.add_argument("--hidden-out")
    ap.add_argument("--logits")
    ap.add_argument("--hidden")
    ap.add_argument("--tol-logits", type=float, default=1e-4)
    ap.add_argument("--tol-hidden", type=float, default=1e-4)
    a = ap.parse_args(argv)
    try:
        m = Llama(a.model)
        ids = [int(s) for s in a.prompt_ids.split(",") if s]
        logits, hidden = m.forward(ids)
    except (ValueError, OSError, KeyError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    if a.cmd == "eval":
        if a.logits_out:
            logits.astype("<f4").tofile(a.logits_out)
        if a.hidden_out:
            hidden.astype("<f4").tofile(a.hidden_out)
        return 0
    passed = failed = 0
    for what, ref, path, tol in (("logits", logits, a.logits, a.tol_logits), ("hidden", hidden, a.hidden, a.tol_hidden)):
        got = np.fromfile(path, "<f4") if path else np.empty(0, "<f4")
        if got.size != ref.size:
            print("FAIL %s: %d values, expected %d" % (what, got.size, ref.size))
            failed += 1
            continue
        d = float(np.max(np.abs(got.reshape(ref.shape) - ref)))
        ok = d <= tol
        print("%s %s: max|d| %.3g (tolerance %.3g, %d values, max|ref| %.3g)"
              % ("ok  " if ok else "FAIL", what, d, tol, ref.size, float(np.max(np.abs(ref)))))
        passed, failed = passed + ok, failed + (not ok)
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
