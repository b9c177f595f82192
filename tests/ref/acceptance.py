#!/usr/bin/python3
"""MTP acceptance and F32-vs-Q8_0 greedy agreement of the trained tiny-qwen35-mtp model (numpy reference).

Owns: the experiment of tests/ref/README.md "Trained model": prompts = the first 64 tokens of each
file in models/heldout.py.txt, greedy speculative decoding with 3 MTP drafts (p_min 0), 256 tokens
each; acceptance = accepted / drafted, per depth; losslessness against plain greedy; agreement of
the F32 and Q8_0 greedy continuations.
Must never: be part of the quick ctest run (it takes a few minutes on one core).
Usage: acceptance.py [MODELS_DIR] [--n-gen N] [--draft-max K]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import qwen35 as q  # noqa: E402

# file boundaries inside heldout.py.txt (crypt.py + email/iterators.py + multiprocessing/popen_forkserver.py)
STARTS = ['"""Wrapper to the POSIX crypt', "# Copyright (C) 2001-2006 Python Software Foundation",
          "import io\nimport os\n\nfrom .context import reduction"]


def split_files(text):
    pos = [text.index(s) for s in STARTS]
    pos.append(len(text))
    return [text[pos[i]:pos[i + 1]] for i in range(len(STARTS))]


def stdlib_heldout(root="/usr/lib/python3.11"):
    """The models README's 19 held-out files, reconstructed: the corpus filter it describes (516
    files, 9.0 M chars), sorted by md5 of the relative path, the first 19 of 2000..30000 bytes.
    Checked: 205,855 chars and 56,113 tokens (+19 separators = the README's 56,132). None if the
    Debian Python 3.11 standard library is not installed."""
    import hashlib
    if not os.path.isfile(os.path.join(root, "crypt.py")):
        return None
    skip = ("encodings", "pydoc_data", "lib2to3/tests", "idlelib/idle_test", "config-3.11",
            "site-packages", "dist-packages")
    files = []
    for dp, _, fn in os.walk(root):
        rel = os.path.relpath(dp, root)
        if rel.startswith(skip) or "__pycache__" in rel:
            continue
        for f in fn:
            if not f.endswith(".py") or f.startswith("_sysconfigdata"):
                continue
            p = os.path.normpath(os.path.join(rel, f))
            full = os.path.join(root, p)
            try:
                s = open(full, encoding="utf-8").read()
            except (OSError, UnicodeDecodeError):
                continue
            if len(s) >= 200:
                files.append((hashlib.md5(p.encode()).hexdigest(), p, s, os.path.getsize(full)))
    files.sort()
    sel = [f for f in files if 2000 <= f[3] <= 30000][:19]
    if len(files) != 516 or sum(len(f[2]) for f in sel) != 205855:
        return None
    return [(f[1], f[2]) for f in sel]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="?", help="directory holding tiny-qwen35-mtp-f32.gguf, -q8_0.gguf and "
                    "heldout.py.txt (default: the repository's models/, which lacks the 13 MB F32 file)",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
    ap.add_argument("--n-gen", type=int, default=256)
    ap.add_argument("--n-prompt", type=int, default=64)
    ap.add_argument("--draft-max", type=int, default=3)
    ap.add_argument("--agree-n", type=int, default=64)
    ap.add_argument("--slack", type=int, default=1,
                    help="budget rule k <= n_gen - generated - slack (1: llama-server runs of the README; 2: golden spec_trace)")
    ap.add_argument("--no-q8", action="store_true")
    ap.add_argument("--heldout-only", action="store_true",
                    help="use only the 3 files of heldout.py.txt, not the reconstructed 19")
    a = ap.parse_args(argv)
    f32 = q.Qwen35Model(os.path.join(a.models, "tiny-qwen35-mtp-f32.gguf"))
    q8 = q.Qwen35Model(os.path.join(a.models, "tiny-qwen35-mtp-q8_0.gguf"))
    q8e = q.Qwen35Model(os.path.join(a.models, "tiny-qwen35-mtp-q8_0.gguf"), v_f16=True, aq8=True)
    tok = bpe.BPE(f32.g)
    text = open(os.path.join(a.models, "heldout.py.txt")).read()
    assert len(tok.encode(text)) == 2496, "tokenizer does not reproduce the README's 2,496 tokens"
    files = None if a.heldout_only else stdlib_heldout()
    if files is None:
        files = list(zip(["crypt.py", "email/iterators.py", "multiprocessing/popen_forkserver.py"],
                         split_files(text)))
    print("%d prompts (first %d tokens of each held-out file), %d generated tokens each, %d drafts"
          % (len(files), a.n_prompt, a.n_gen, a.draft_max))
    prompts = [tok.encode(f)[:a.n_prompt] for _, f in files]
    t0 = time.time()
    tot_d = tot_a = 0
    depth = np.zeros((a.draft_max, 2), np.int64)
    agree = [0, 0]
    for i, ids in enumerate(prompts):
        toks, rounds, nd, na, dep = q.speculative_greedy(f32, ids, a.n_gen, a.draft_max, a.slack)
        st, lg, _ = q.eval_prompt(f32, ids)
        plain, _ = q.greedy_continue(f32, st, lg[-1], a.n_gen)
        tot_d += nd
        tot_a += na
        depth += np.array(dep)
        print("%-36s acceptance %d/%d = %.3f, lossless vs plain greedy: %s, per depth %s"
              % (files[i][0], na, nd, na / nd, toks == plain,
                 " ".join("%.3f" % (d[1] / d[0]) for d in dep if d[0])))
        for li, (label, mq) in ([] if a.no_q8 else enumerate((("Q8_0 float act", q8), ("Q8_0 engine-like (aq8, V f16)", q8e)))):
            st, lg, _ = q.eval_prompt(mq, ids)
            g8, _ = q.greedy_continue(mq, st, lg[-1], a.agree_n)
            ref = plain[:a.agree_n]
            k = next((j for j, (x, y) in enumerate(zip(ref, g8)) if x != y), len(ref))
            same = sum(1 for x, y in zip(ref, g8) if x == y)
            agree[li] += k == len(ref)
            print("   F32 vs %s greedy: first %d/%d identical (%d/%d positions equal)"
                  % (label, k, len(ref), same, len(ref)))
    print("TOTAL acceptance %d/%d = %.3f; per depth %s; Q8_0 greedy agreement: float act %d/%d, "
          "engine-like %d/%d prompts fully identical (%.0f s)"
          % (tot_a, tot_d, tot_a / tot_d, " ".join("%.3f" % (d[1] / d[0]) for d in depth if d[0]),
             agree[0], len(prompts), agree[1], len(prompts),
             time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
