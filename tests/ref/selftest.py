#!/usr/bin/python3
"""Self-consistency checks of the numpy qwen35 reference (what the goldens do not cover).

Owns: checks that the reference is internally right: batch size 1..16 invariance, per-token
recurrent snapshot restore == decoding fewer tokens, MoE plumbing (qwen35moe models derived from
the golden qwen35-tiny weights whose MoE must reduce to the dense FFN), merged gate_up experts,
bad-input errors, and (with --trained-f32) the trained model's MTP counts of a reference-engine
llama-cli run.
Must never: write outside a temporary directory.
Usage: selftest.py [GOLDEN_DIR] [--trained-f32 tiny-qwen35-mtp-f32.gguf]
  GOLDEN_DIR defaults to the repository's tests/data/golden. The F32 trained model (13 MB) is not
  in the repository (models/ holds its Q8_0 copy), so its check runs only when given.
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402
import qwen35 as q  # noqa: E402

RESULTS = []


def check(name, ok, note=""):
    RESULTS.append((name, bool(ok), note))
    print("%-52s %s %s" % (name, "ok  " if ok else "FAIL", note))


def md(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def derive_moe(src, dst, mode, n_expert=4, n_used=2, merged=False, seed=7):
    """qwen35moe copy of a dense qwen35 GGUF. mode 'routed': every expert = the dense FFN, shared
    expert zero; mode 'shared': routed experts output zero, shared expert = the dense FFN with gate
    logit 0 (sigmoid 0.5). Router weights random."""
    g = gguf_np.GGUF(src)
    rng = np.random.default_rng(seed)
    kv = {}
    for k, v in g.kv.items():
        kv[k.replace("qwen35.", "qwen35moe.", 1) if k.startswith("qwen35.") else k] = v
    kv["general.architecture"] = "qwen35moe"
    nff = g.kv["qwen35.feed_forward_length"]
    kv["qwen35moe.expert_count"] = n_expert
    kv["qwen35moe.expert_used_count"] = n_used
    kv["qwen35moe.expert_feed_forward_length"] = nff
    kv["qwen35moe.expert_shared_feed_forward_length"] = nff
    T = {}
    for name in g.tensors:
        if ".ffn_" in name:
            continue
        T[name] = g.tensor(name)
    n_layer = g.kv["qwen35.block_count"]
    for il in range(n_layer):
        b = "blk.%d." % il
        G, U, D = g.tensor(b + "ffn_gate.weight"), g.tensor(b + "ffn_up.weight"), g.tensor(b + "ffn_down.weight")
        E = G.shape[1]
        T[b + "ffn_gate_inp.weight"] = rng.standard_normal((n_expert, E)).astype(np.float32)
        Dr = D if mode == "routed" else np.zeros_like(D)
        if merged:
            T[b + "ffn_gate_up_exps.weight"] = np.stack([np.concatenate([G, U], 0)] * n_expert)
        else:
            T[b + "ffn_gate_exps.weight"] = np.stack([G] * n_expert)
            T[b + "ffn_up_exps.weight"] = np.stack([U] * n_expert)
        T[b + "ffn_down_exps.weight"] = np.stack([Dr] * n_expert)
        T[b + "ffn_gate_inp_shexp.weight"] = np.zeros(E, np.float32)
        T[b + "ffn_gate_shexp.weight"] = G
        T[b + "ffn_up_shexp.weight"] = U
        T[b + "ffn_down_shexp.weight"] = D if mode == "shared" else np.zeros_like(D)
    gguf_np.write_gguf(dst, kv, T)


def scaled_dense(src, dst, factor):
    g = gguf_np.GGUF(src)
    T = {n: g.tensor(n) * (factor if n.endswith("ffn_down.weight") else 1) for n in g.tensors}
    gguf_np.write_gguf(dst, dict(g.kv), T)


def logits_and_mtp(path, ids):
    m = q.Qwen35Model(path)
    _, lg, hd = q.eval_prompt(m, ids)
    _, ml, _ = q.mtp_prompt_rows(m, ids, hd)
    return lg, ml


def main(argv):
    args = list(argv)
    tm = None
    if "--trained-f32" in args:
        i = args.index("--trained-f32")
        tm = args[i + 1]
        del args[i:i + 2]
    golden = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "golden")
    tiny = os.path.join(golden, "qwen35-tiny/model.gguf")
    if not os.path.exists(tiny):
        print("FAIL: %s missing" % tiny)
        print("0 passed, 1 failed")
        return 1
    import json
    ids = json.load(open(os.path.join(golden, "qwen35-tiny/case.json")))["prompt"]["token_ids"]
    m = q.Qwen35Model(tiny)
    _, L1, H1 = q.eval_prompt(m, ids)
    # 1. batch-size invariance
    worst = max(md(q.eval_prompt(m, ids, batch=b)[1], L1) for b in range(1, 17))
    check("prompt chunks 1..16 == one batch", worst <= 1e-5, "max %.2e" % worst)
    worst = max(md(q.mtp_prompt_rows(m, ids, H1, batch=b)[1], q.mtp_prompt_rows(m, ids, H1)[1])
                for b in (1, 3, 7, 16))
    check("MTP rows in chunks == one batch", worst <= 1e-5, "max %.2e" % worst)
    # 2. snapshot restore == decoding only the first j tokens
    st = m.new_state()
    m.forward(st, ids[:20])
    extra = ids[20:26]
    _, _, snaps = m.forward(st, extra, snapshots=True)
    worst = 0.0
    for j in range(len(extra)):
        s2 = m.new_state()
        m.forward(s2, ids[:20])
        m.forward(s2, extra[:j + 1])
        ref, _ = m.forward(s2, [ids[30]])
        s3 = m.new_state()
        m.forward(s3, ids[:20])
        _, _, sn = m.forward(s3, extra, snapshots=True)
        s3.restore(sn[j], 20 + j + 1)
        got, _ = m.forward(s3, [ids[30]])
        worst = max(worst, md(ref, got))
    check("restore(snapshot j) == decode first j+1 tokens", worst <= 1e-5, "max %.2e" % worst)
    # 3. speculative greedy == plain greedy (golden tiny)
    toks, _, nd, na, _ = q.speculative_greedy(m, ids, 40, 3)
    st, lg, _ = q.eval_prompt(m, ids)
    plain, _ = q.greedy_continue(m, st, lg[-1], 40)
    check("speculative greedy == plain greedy (tiny, 40 tokens)", toks == plain, "acc %d/%d" % (na, nd))
    # 4. MoE plumbing
    with tempfile.TemporaryDirectory() as td:
        lg0, ml0 = L1, q.mtp_prompt_rows(m, ids, H1)[1]
        for merged in (False, True):
            p = os.path.join(td, "moe_routed.gguf")
            derive_moe(tiny, p, "routed", merged=merged)
            lg, ml = logits_and_mtp(p, ids)
            e = max(md(lg, lg0), md(ml, ml0))
            check("qwen35moe identical experts == dense%s" % (" (merged gate_up)" if merged else ""),
                  e <= 1e-4, "max %.2e" % e)
        p = os.path.join(td, "moe_shared.gguf")
        derive_moe(tiny, p, "shared")
        ph = os.path.join(td, "dense_half.gguf")
        scaled_dense(tiny, ph, 0.5)
        lg, ml = logits_and_mtp(p, ids)
        lh, mh = logits_and_mtp(ph, ids)
        e = max(md(lg, lh), md(ml, mh))
        check("qwen35moe shared expert (gate 0.5) == dense*0.5", e <= 1e-4, "max %.2e" % e)
        # routing actually selects: with distinct experts the output depends on the router
        derive_moe(tiny, p, "routed", n_expert=4, n_used=1)
        mm = q.Qwen35Model(p)
        for name in list(mm.g.tensors):
            if name.endswith("ffn_down_exps.weight"):
                w = mm.w(name).copy()
                w[1:] *= 0.0
                mm._w[name] = w
        _, lgr, _ = q.eval_prompt(mm, ids)
        check("qwen35moe top-1 routing changes the output", md(lgr, lg0) > 1e-2, "")
        # 5. bad input
        bad = os.path.join(td, "trunc.gguf")
        with open(tiny, "rb") as f:
            open(bad, "wb").write(f.read()[:5000])
        try:
            q.Qwen35Model(bad)
            check("truncated GGUF rejected", False)
        except ValueError as ex:
            check("truncated GGUF rejected", True, str(ex)[-60:])
    # 6. trained model: llama-cli (reference engine) MTP counts from the models README
    if tm:
        import bpe
        mt = q.Qwen35Model(tm)
        pid = bpe.BPE(mt.g).encode("import os\nimport sys\n\n\ndef main():\n")
        _, _, nd, na, _ = q.speculative_greedy(mt, pid, 256, 1)
        check("trained model: llama-cli mtp n_max=1 counts 123/131", (na, nd) == (123, 131),
              "got %d/%d" % (na, nd))
    npass = sum(1 for r in RESULTS if r[1])
    print("%d passed, %d failed" % (npass, len(RESULTS) - npass))
    return 0 if npass == len(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
