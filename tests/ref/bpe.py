#!/usr/bin/python3
"""Byte-level BPE tokenizer (gpt2 model, qwen35 pre-tokenizer) from GGUF metadata, in plain Python.

Owns: turning text into token ids for the numpy reference's experiments on trained models
(tests/ref/acceptance.py). Promises: the Qwen3.5 split regex with the \\p{L}/\\p{M}/\\p{N}
classes built from unicodedata for the characters present in the input (Python's `re` has no
\\p{..}), special tokens matched verbatim first, merges applied by rank.
Must never: be used as the tokenizer oracle for nextn's tokenizer tests (it is only checked on ASCII
code text here).
"""
import re
import sys
import unicodedata


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_PAD = "\U0010FFFD"   # placeholder so no character class is ever empty


def _split_regex(text):
    L, M, N = [_PAD], [_PAD], [_PAD]
    for ch in set(text):
        cat = unicodedata.category(ch)
        if cat.startswith("L"):
            L.append(ch)
        elif cat.startswith("M"):
            M.append(ch)
        elif cat.startswith("N"):
            N.append(ch)
    cls = lambda s: "".join(re.escape(c) for c in sorted(s))  # noqa: E731
    Lc, Mc, Nc = cls(L), cls(M), cls(N)
    pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
           r"|[^\r\n" + Lc + Nc + r"]?[" + Lc + Mc + r"]+"
           r"|[" + Nc + r"]"
           r"| ?[^\s" + Lc + Mc + Nc + r"]+[\r\n]*"
           r"|\s*[\r\n]+"
           r"|\s+(?!\S)"
           r"|\s+")
    return re.compile(pat)


class BPE:
    def __init__(self, gguf):
        toks = gguf.kv["tokenizer.ggml.tokens"]
        self.vocab = {t: i for i, t in enumerate(toks)}
        self.ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(gguf.kv["tokenizer.ggml.merges"])}
        types = gguf.kv.get("tokenizer.ggml.token_type", [1] * len(toks))
        self.specials = sorted((t for t, ty in zip(toks, types) if ty == 3), key=len, reverse=True)
        self.b2u = bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}
        self.toks = toks
        self.cache = {}

    def _bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        out = []
        pieces = [text]
        if self.specials:
            sp = re.compile("(" + "|".join(re.escape(s) for s in self.specials) + ")")
            pieces = sp.split(text)
        rx = _split_regex(text)
        for k, piece in enumerate(pieces):
            if k % 2 == 1 and self.specials:
                out.append(self.vocab[piece])
                continue
            for w in rx.findall(piece):
                out.extend(self._bpe("".join(self.b2u[b] for b in w.encode("utf-8"))))
        return out

    def decode(self, ids):
        bs = bytearray()
        for i in ids:
            t = self.toks[i]
            if t in self.specials:
                bs.extend(t.encode())
            else:
                bs.extend(self.u2b[c] for c in t)
        return bs.decode("utf-8", errors="replace")


if __name__ == "__main__":
    import gguf_np
    g = gguf_np.GGUF(sys.argv[1])
    print(BPE(g).encode(open(sys.argv[2]).read() if len(sys.argv) > 2 else sys.stdin.read()))
