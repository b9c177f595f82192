#!/usr/bin/python3
"""Compare the numpy gemma4 reference (gemma4.py) with the goldens gemma4-tiny and
gemma4-tiny-centroid, then self-check what the goldens do not cover.

Owns: the golden comparison table (max |diff| per case/array/reference, pass/fail) and the
self-checks: SWA ring == full cache, batch/token-by-token/chunk invariance, increment draft
positions, the masked head inside the speculative loop, derived models without PLE / with MoE,
the ik `gemma4_mtp` dialect, bad-input errors and the CLI.
Promises: f32 KV cache vs `f32kv/` at 1e-3; engine files with K and V rounded to f16 at 1e-2 and
with an f32 KV at 1e-1 (case.json tolerances); greedy tokens, draft ids, masked-head choices and
spec_trace rounds exactly. Must never: write outside a temporary directory.
Usage: check_golden_gemma4.py [GOLDEN_DIR] [--case NAME] [--no-selftest]; exit 1 on any failure.
GOLDEN_DIR defaults to the repository's tests/data/golden.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.dont_write_bytecode = True    # never leave __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gemma4 as G  # noqa: E402
import gguf_np  # noqa: E402

RESULTS = []
ENV = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


def record(case, what, ref, err, bound, ok=None, note=""):
    if ok is None:
        ok = bool(err <= bound)
    RESULTS.append((case, what, ref, err, bound, ok, note))


def flag(case, what, ok, note=""):
    record(case, what, "-", 0.0 if ok else 1.0, 0.0, bool(ok), note)


def load(d, name, rows):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None
    return np.fromfile(p, dtype="<f4").reshape(rows, -1)


def md(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


TARGET_CACHE = {}    # the two gemma4 cases share the target: compute its arrays once


def target_arrays(m, ids, greedy_toks):
    key = (hashlib.sha256(open(m.path, "rb").read()).hexdigest(), m.kv_f16, tuple(ids), tuple(greedy_toks))
    r = TARGET_CACHE.get(key)
    if r is None:
        r = {}
        st, r["logits"], r["hidden"] = G.eval_prompt(m, ids)
        _, r["logits_tbt"], r["hidden_tbt"] = G.eval_prompt(m, ids, batch=1)
        _, r["logits_chunks7"], _ = G.eval_prompt(m, ids, batch=7)
        r["greedy_logits"] = G.teacher_forced(m, st, r["logits"][-1], greedy_toks)
        st, lg, _ = G.eval_prompt(m, ids)
        r["greedy_free"], _ = G.greedy_continue(m, st, lg[-1], len(greedy_toks))
        TARGET_CACHE[key] = r
    return r


def compute(m, a, ids, greedy_toks, drafts):
    """Every array of a case for one numeric configuration (tokens teacher-forced from the goldens)."""
    r = dict(target_arrays(m, ids, greedy_toks))
    n = len(ids)
    st, _, _ = G.eval_prompt(m, ids)
    id_last = int(np.argmax(r["logits"][-1]))
    h = r["hidden"][-1]
    _, r["draft_logits"], r["draft_hidden"], _ = a.draft(st, id_last, h, n, len(drafts["draft_tokens"]),
                                                          forced=drafts["draft_tokens"])
    if "masked_head" in drafts:
        mt = drafts["masked_head"]["draft_tokens"]
        _, r["masked_draft_logits"], r["masked_draft_hidden"], det = a.draft(st, id_last, h, n, len(mt), True,
                                                                              forced=mt)
        r["masked_det"] = det
    return r


def check_drafts_json(case, m, a, ids, drafts, r_eng, bound):
    """drafts.json: ids exact (free-running chains), top-10 ids exact, logits within the engine bound."""
    dj, arr = G.drafts_json(m, a, ids, len(drafts["draft_tokens"]))
    ok = dj["id_last"] == drafts["id_last"] and dj["draft_tokens"] == drafts["draft_tokens"]
    flag(case, "draft ids", ok, "%s vs %s" % (dj["draft_tokens"], drafts["draft_tokens"]))
    top_ok, err = True, 0.0
    for s, g in zip(dj["steps"], drafts["steps"]):
        top_ok &= s["top10"]["ids"] == g["top10"]["ids"] and s["input_token"] == g["input_token"] \
            and s["position"] == g["position"]
        err = max(err, md(s["top10"]["logits"], g["top10"]["logits"]))
        err = max(err, abs(s["argmax_softmax_prob"] - g["argmax_softmax_prob"]))
    flag(case, "draft top10 ids", top_ok)
    if "masked_head" not in drafts:
        return
    mh, gm = dj.get("masked_head"), drafts["masked_head"]
    if mh is None:
        flag(case, "masked head", False, "assistant has no centroid head")
        return
    flag(case, "masked ids", mh["draft_tokens"] == gm["draft_tokens"],
         "%s vs %s" % (mh["draft_tokens"], gm["draft_tokens"]))
    ok, cerr = True, 0.0
    for s, g in zip(mh["steps"], gm["steps"]):
        ok &= (s["top_centroids"] == g["top_centroids"] and s["masked_top10"]["ids"] == g["masked_top10"]["ids"]
               and s["dense_argmax"] == g["dense_argmax"] and s["n_candidates"] == g["n_candidates"]
               and s["argmax"] == g["argmax"] and s["top10"]["ids"] == g["top10"]["ids"])
        cerr = max(cerr, md(s["centroid_logits"], g["centroid_logits"]),
                   md(s["masked_top10"]["logits"], g["masked_top10"]["logits"]))
    flag(case, "masked centroids/top10", ok)
    # engine numerics for the logit values of drafts.json (the engine wrote them)
    dje, _ = G.drafts_json(r_eng["m"], r_eng["a"], ids, len(drafts["draft_tokens"]))
    e1 = max(md(s["top10"]["logits"], g["top10"]["logits"]) for s, g in zip(dje["steps"], drafts["steps"]))
    e2 = max(max(md(s["centroid_logits"], g["centroid_logits"]),
                 md(s["masked_top10"]["logits"], g["masked_top10"]["logits"]))
             for s, g in zip(dje["masked_head"]["steps"], gm["steps"]))
    record(case, "masked logits", "engine(KV f16)", e2, bound)
    record(case, "drafts.json logits", "engine(KV f16)", e1, bound)


def near_tie(m, a, ids, gold_tokens, rnd):
    """logit(our draft) - logit(golden draft) at the first step where the chains differ in
    round rnd, recomputed teacher-forced along the golden drafts; None if the chains agree."""
    P = rnd["n_past"]
    seq = list(ids) + list(gold_tokens)
    st, _, hd = G.eval_prompt(m, seq[:P])
    ours, L, _, _ = a.draft(st, rnd["id_last"], hd[-1], P, len(rnd["gold_drafts"]), forced=rnd["gold_drafts"])
    for s, (x, y) in enumerate(zip(ours, rnd["gold_drafts"])):
        if x != y:
            return float(L[s][x] - L[s][y])
    return None


def check_spec(case, m, a, ids, trace, label, tol, **kw):
    """spec_trace.json round by round. A draft may differ from the golden one only at a near-tie
    (our logit gap between the two tokens < tol, recomputed along the golden chain) and only if the
    round still commits the same ids."""
    toks, rounds, nd, na, st = G.speculative_greedy(m, a, ids, trace["n_predict"], 3, **kw)
    gold = trace["rounds"]
    keys = ("n_past", "id_last", "ids", "n_accepted", "n_max_used")
    same, ties = 0, []
    for x, y in zip(rounds, gold):
        if y.get("plain_decode"):
            eq = x.get("plain_decode") and x["token"] == y["token"] and x["n_past"] == y["n_past"]
        else:
            eq = not x.get("plain_decode") and all(x[k] == y[k] for k in keys)
            if eq and x["drafts"] != y["drafts"]:
                gap = near_tie(m, a, ids, trace["tokens"], dict(y, gold_drafts=y["drafts"]))
                eq = gap is not None and gap < tol
                ties.append("round %d drafts %s vs %s (gap %.1e)" % (y["round"], x["drafts"], y["drafts"],
                                                                     gap if gap is not None else -1))
        if not eq:
            break
        same += 1
    ok = same == len(gold) == len(rounds) and toks == trace["tokens"] and nd == trace["n_drafted"]
    note = "rounds %d/%d identical, accepted %d/%d (golden %d/%d)" % (same, len(gold), na, nd,
                                                                     trace["n_accepted"], trace["n_drafted"])
    if ties:
        note += "; near-tie " + "; ".join(ties)
    if kw.get("ring_batch"):
        cells = max(v for il, v in st.max_cells.items() if m.swa[il])
        note += ", max SWA cells %d" % cells
    record(case, "spec_trace", label, float(len(gold) - same), 0.0, ok, note)


def run_case(d):
    case = os.path.basename(d.rstrip("/"))
    cj = json.load(open(os.path.join(d, "case.json")))
    ids = cj["prompt"]["token_ids"]
    n = len(ids)
    greedy = json.load(open(os.path.join(d, "greedy.json")))
    drafts = json.load(open(os.path.join(d, "drafts.json")))
    tp = os.path.join(d, "spec_trace.json")
    trace = json.load(open(tp)) if os.path.exists(tp) else None
    gt = greedy["tokens"]
    k = len(drafts["draft_tokens"])
    rows = {"logits": n, "hidden": n, "greedy_logits": len(gt), "draft_logits": k, "draft_hidden": k,
            "masked_draft_logits": k, "masked_draft_hidden": k}
    pairs = [("logits", "logits"), ("hidden", "hidden"), ("logits_tbt", "logits"), ("hidden_tbt", "hidden"),
             ("logits_chunks7", "logits"), ("greedy_logits", "greedy_logits"), ("draft_logits", "draft_logits"),
             ("draft_hidden", "draft_hidden"), ("masked_draft_logits", "masked_draft_logits"),
             ("masked_draft_hidden", "masked_draft_hidden")]
    tol = cj["tolerances"]
    path, apath = os.path.join(d, "model.gguf"), os.path.join(d, "assistant.gguf")
    m32 = G.Gemma4(path)
    a32 = G.Assistant(apath, m32)
    m16 = G.Gemma4(path, kv_f16=True)
    a16 = G.Assistant(apath, m16)
    configs = [("f32kv", m32, a32, os.path.join(d, "f32kv"), tol["vs_f32kv_files"], pairs),
               ("engine(KV f16)", m16, a16, d, tol["vs_engine_files_with_f16_k_and_v_cache"], pairs),
               ("engine(f32 KV)", m32, a32, d, tol["vs_engine_files_with_f32_kv_cache"], pairs[:2])]
    cache = {}
    for label, m, a, gdir, bound, prs in configs:
        r = cache.get(id(m)) or compute(m, a, ids, gt, drafts)
        cache[id(m)] = r
        for ours, gname in prs:
            g = load(gdir, gname + ".f32", rows[gname])
            if g is None or ours not in r:
                continue
            record(case, ours, label, md(r[ours], g), bound)
    # ids: free-running greedy, drafts, masked head, spec trace (f32 KV numerics)
    toks = target_arrays(m32, ids, gt)["greedy_free"]
    flag(case, "greedy tokens", toks == gt, "%d/%d identical" % (sum(x == y for x, y in zip(toks, gt)), len(gt)))
    check_drafts_json(case, m32, a32, ids, drafts, {"m": m16, "a": a16}, tol["vs_engine_files_with_f16_k_and_v_cache"])
    if trace:
        etol = tol["vs_engine_files_with_f16_k_and_v_cache"]
        check_spec(case, m32, a32, ids, trace, "f32kv", etol)
        check_spec(case, m16, a16, ids, trace, "engine(KV f16)", etol)
        check_spec(case, m32, a32, ids, trace, "f32kv+SWA ring(4)", etol, ring_batch=4)
    return m32, a32, ids, gt


# ---------------------------------------------------------------------------
# self-checks (configurations the goldens do not cover)

def selftest(root, tmp):
    S = "selftest"
    d = os.path.join(root, "gemma4-tiny")
    dc = os.path.join(root, "gemma4-tiny-centroid")
    ids = json.load(open(os.path.join(d, "case.json")))["prompt"]["token_ids"]
    gt = json.load(open(os.path.join(d, "greedy.json")))["tokens"]
    m = G.Gemma4(os.path.join(d, "model.gguf"))
    a = G.Assistant(os.path.join(dc, "assistant.gguf"), m)
    ad = G.Assistant(os.path.join(dc, "assistant.gguf"), m, dense_head=True)
    flag(S, "centroid head on / --assistant-dense-head off", a.masked and not ad.masked)

    # SWA ring: a 90-token prompt (> 11 windows), ring vs full cache, batch vs token by token
    long_ids = (ids * 3)[:90]
    _, l_full, _ = G.eval_prompt(m, long_ids)
    for rb in (1, 5):
        st_r, l_ring, _ = G.eval_prompt(m, long_ids, ring_batch=rb)
        cells = max(v for il, v in st_r.max_cells.items() if m.swa[il])
        record(S, "SWA ring(%d) vs full cache (90 tok)" % rb, "self", md(l_full, l_ring), 1e-4,
               note="max SWA cells %d = n_swa-1+%d" % (cells, rb))

    def lossless(label, mm, aa, prompt, plain, **kw):
        toks, rounds, nd, na, _ = G.speculative_greedy(mm, aa, prompt, 24, 3, **kw)
        flag(S, label, toks == plain[:24], "accepted %d/%d" % (na, nd))
        return toks

    # increment positions, masked head in the loop, long prompt + ring (losslessness)
    lossless("spec lossless, increment positions", m, ad, ids, gt, positions="increment")
    lossless("spec lossless, masked head", m, a, ids, gt, masked=True)
    lossless("spec lossless, masked+increment+ring", m, a, ids, gt, masked=True, positions="increment", ring_batch=4)
    st, lg, hd = G.eval_prompt(m, long_ids)
    plain_long, _ = G.greedy_continue(m, st, lg[-1], 24)
    lossless("spec lossless, 90-token prompt, ring", m, ad, long_ids, plain_long, ring_batch=4)
    n = len(ids)
    st, lg, hd = G.eval_prompt(m, ids)
    ci, cl, _, _ = ad.draft(st, int(np.argmax(lg[-1])), hd[-1], n, 3)
    ii, il_, _, _ = ad.draft(st, int(np.argmax(lg[-1])), hd[-1], n, 3, positions="increment")
    flag(S, "increment: step 1 same, steps 2-3 differ", md(cl[0], il_[0]) == 0.0 and md(cl[1:], il_[1:]) > 1e-3,
         "ids %s / %s, step 2-3 logit diff %.3f" % (ci, ii, md(cl[1:], il_[1:])))

    # derived models
    def derived(kind, src):
        p = os.path.join(tmp, kind + ".gguf")
        G.derive(kind, src, p)
        return p
    tgt = os.path.join(d, "model.gguf")
    for kind in ("no-ple", "moe"):
        mk = G.Gemma4(derived(kind, tgt))
        ak = G.Assistant(os.path.join(d, "assistant.gguf"), mk)
        _, lb, _ = G.eval_prompt(mk, ids)
        _, lt, _ = G.eval_prompt(mk, ids, batch=1)
        _, lc, _ = G.eval_prompt(mk, ids, batch=5)
        record(S, "%s batch vs tbt/chunks" % kind, "self", max(md(lb, lt), md(lb, lc)), 1e-4)
        st, lg, _ = G.eval_prompt(mk, ids)
        plain, _ = G.greedy_continue(mk, st, lg[-1], 24)
        lossless("%s spec lossless, constant" % kind, mk, ak, ids, plain)
        lossless("%s spec lossless, increment" % kind, mk, ak, ids, plain, positions="increment")
        if kind == "moe":
            ms = G.Gemma4(derived("moe-split", tgt))
            _, ls, _ = G.eval_prompt(ms, ids)
            record(S, "moe fused gate_up vs split", "self", md(lb, ls), 1e-5)
    mdn = G.Gemma4(derived("moe-dense", tgt))
    _, lmd, _ = G.eval_prompt(mdn, ids)
    _, ldn, _ = G.eval_prompt(m, ids)
    record(S, "moe(experts=dense FFN) vs dense", "self", md(lmd, ldn), 1e-3)

    # ik gemma4_mtp dialect with the rewritten token->centroid map
    am = G.Assistant(derived("mtp-dialect", os.path.join(dc, "assistant.gguf")), m)
    st, lg, hd = G.eval_prompt(m, ids)
    x1 = a.draft(st, int(np.argmax(lg[-1])), hd[-1], n, 3, True)
    x2 = am.draft(st, int(np.argmax(lg[-1])), hd[-1], n, 3, True)
    flag(S, "gemma4_mtp dialect == gemma4-assistant", x1[0] == x2[0] and md(x1[1], x2[1]) == 0.0, "%s" % x2[0])

    # bad input: clear errors naming the mismatch
    def expect_error(label, fn, needle):
        try:
            fn()
            flag(S, label, False, "no error")
        except ValueError as e:
            flag(S, label, needle in str(e), str(e)[:90])

    asrc = gguf_np.GGUF(os.path.join(d, "assistant.gguf"))

    def bad(name, kvmod=None, tmod=None):
        kv, T = G._copy(asrc)
        if kvmod:
            kv.update(kvmod)
        if tmod:
            tmod(T)
        p = os.path.join(tmp, name + ".gguf")
        gguf_np.write_gguf(p, kv, T)
        return p
    expect_error("drafter given as target", lambda: G.Gemma4(os.path.join(d, "assistant.gguf")), "--draft-model")
    expect_error("target given as drafter", lambda: G.Assistant(tgt, m), "not an assistant")
    expect_error("backbone width mismatch", lambda: G.Assistant(
        bad("bb", {"gemma4-assistant.embedding_length_out": 48}), m), "= 48 does not match the target n_embd 64")
    expect_error("head dim mismatch", lambda: G.Assistant(
        bad("hd", {"gemma4-assistant.attention.key_length_swa": 32}), m), "128/32 do not match the target's 128/64")

    def trunc_vocab(T):
        T["token_embd.weight"] = T["token_embd.weight"][:256]
    expect_error("vocab mismatch", lambda: G.Assistant(bad("voc", tmod=trunc_vocab), m), "256 does not match the target's 512")
    expect_error("requires_target_arch", lambda: G.Assistant(
        bad("req", {"gemma4-assistant.requires_target_arch": "llama"}), m), "requires_target_arch")
    expect_error("token out of range", lambda: m.forward(m.new_state(), [512]), "out of range")

    # CLI (what `nextn eval --drafts 3 --draft-model` prints)
    cj = json.load(open(os.path.join(dc, "drafts.json")))
    out = subprocess.run([sys.executable, os.path.join(HERE, "gemma4.py"), "eval", os.path.join(dc, "model.gguf"),
                          "--prompt-ids", ",".join(map(str, ids)), "--drafts", "3", "--draft-model",
                          os.path.join(dc, "assistant.gguf"), "--masked-head"], capture_output=True, text=True, env=ENV)
    try:
        js = json.loads(out.stdout)
        ok = js["draft_tokens"] == cj["draft_tokens"] and js["masked_head"]["draft_tokens"] == \
            cj["masked_head"]["draft_tokens"]
    except (ValueError, KeyError):
        ok = False
    flag(S, "CLI eval --drafts 3 --masked-head", ok and out.returncode == 0, out.stderr.strip()[:80])
    out = subprocess.run([sys.executable, os.path.join(HERE, "gemma4.py"), "eval", os.path.join(d, "assistant.gguf"),
                          "--prompt-ids", "2,3"], capture_output=True, text=True, env=ENV)
    flag(S, "CLI drafter as -m refused", out.returncode == 1 and "drafter" in out.stderr, out.stderr.strip()[:80])


def main(argv):
    root = os.path.join(HERE, "..", "data", "golden")
    args = list(argv)
    only = None
    if "--case" in args:
        i = args.index("--case")
        only = args[i + 1]
        del args[i:i + 2]
    do_self = "--no-selftest" not in args
    args = [x for x in args if x != "--no-selftest"]
    if args:
        root = args[0]
    cases = sorted(c for c in os.listdir(root) if c.startswith("gemma4-")) if os.path.isdir(root) else []
    if not cases:
        print("FAIL: no gemma4 goldens under %s" % root)
        print("0 passed, 1 failed")
        return 1
    if only:
        cases = [c for c in cases if c == only]
    t0 = time.time()
    for c in cases:
        try:
            run_case(os.path.join(root, c))
        except Exception as e:  # a crash is a failed check, not a dead harness
            record(c, "run", "-", float("nan"), 0.0, False, "%s: %s" % (type(e).__name__, e))
    if do_self and not only:
        with tempfile.TemporaryDirectory(prefix="refg-") as tmp:
            try:
                selftest(root, tmp)
            except Exception as e:
                record("selftest", "run", "-", float("nan"), 0.0, False, "%s: %s" % (type(e).__name__, e))
    print("%-20s %-44s %-17s %10s %8s  %s" % ("case", "check", "reference", "max|diff|", "bound", "status"))
    for c, what, ref, err, bound, ok, note in RESULTS:
        print("%-20s %-44s %-17s %10.3e %8.1e  %s %s" % (c, what, ref, err, bound, "ok  " if ok else "FAIL", note))
    npass = sum(1 for r in RESULTS if r[5])
    nfail = len(RESULTS) - npass
    print("(%.1f s)" % (time.time() - t0))
    print("%d passed, %d failed" % (npass, nfail))
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
