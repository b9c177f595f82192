#!/usr/bin/env bash
# cli_draft.test.sh — `nextn run` / `bench` with a draft model (--spec-type draft) on generated
# qwen35 / gemma4 / llama pairs, and the llama.cpp-compatible environment:
#   greedy text identical with --spec-type draft on and off (every target / draft pair of the three
#   architectures, self and random drafts), auto picking draft for a full model, a mismatched vocabulary refused naming the token,
#   bench's draft row (cost per draft step, measured / predicted), eval --spec N -md F (tokens = greedy);
#   LLAMA_ARG_* (applied; the command line wins), LLAMA_MTP_ACC_TRACE written and parsed (every
#   line JSON, mtp_draft / mtp_accept paired, the shape of the seed patch), --spec-trace - on stderr
#   only (stdout = the text), LLAMA_MTP_SKIP_STREAK_THRESHOLD skipping drafts.
set -u
NEXTN=${NEXTN:-build/nextn}
work="$(mktemp -d "${TMPDIR:-/tmp}/nx_cli_draft.XXXXXX")"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ $# -gt 1 ] && echo "     $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi; }

gen() { "$NEXTN" gen-model --arch "$1" --out "$work/$2" --seed "$3" ${4:+--config-json "$4"} >/dev/null 2>&1 || bad "gen $2"; }
gen qwen35 q.gguf 7
gen qwen35 q2.gguf 11 '{"n_layer":2}'
gen gemma4 g.gguf 7
gen gemma4 g2.gguf 13
gen qwen35 v520.gguf 3 '{"n_vocab":520}'
gen llama l.gguf 7 '{"n_embd":64,"n_layer":2,"n_head":4,"n_head_kv":2,"n_ff":128,"tied_embeddings":true}'
gen llama l2.gguf 17 '{"n_embd":32,"n_layer":1,"n_head":2,"n_head_kv":1,"n_ff":64,"tied_embeddings":true,"emb_std":0.5}'

P="hello world, hello world"
for t in q g l; do
    "$NEXTN" run -m "$work/$t.gguf" -p "$P" -n 40 --temp 0 --spec-type none >"$work/$t.off" 2>/dev/null
    for d in q.gguf q2.gguf g.gguf g2.gguf l.gguf l2.gguf; do
        "$NEXTN" run -m "$work/$t.gguf" -p "$P" -n 40 --temp 0 --spec-type draft -md "$work/$d" --draft-max 4 \
            --draft-adaptive off >"$work/$t.$d" 2>"$work/$t.$d.err"
        check "$t.gguf drafted by $d: identical" "cmp -s '$work/$t.off' '$work/$t.$d'" "$(tail -3 "$work/$t.$d.err")"
    done
done
# quantized KV caches (target and draft model, llama.cpp's q8_0 / q4_0 blocks): still lossless;
# qwen35 with head_dim 32 (blocks of 32 values per head) also through its MTP head and n-gram
gen qwen35 q32.gguf 7 '{"head_dim":32}'
for kv in q8_0 q4_0; do
    "$NEXTN" run -m "$work/g.gguf" -p "$P" -n 40 --temp 0 --spec-type none -ctk $kv -ctv $kv >"$work/g.off.$kv" 2>/dev/null
    "$NEXTN" run -m "$work/g.gguf" -p "$P" -n 40 --temp 0 --spec-type draft -md "$work/g2.gguf" --draft-max 4 \
        --draft-adaptive off -ctk $kv -ctv $kv -ctkd $kv -ctvd q8_0 >"$work/g.d.$kv" 2>"$work/g.d.$kv.err"
    check "g.gguf drafted by g2.gguf, $kv KV: identical" "[ -s '$work/g.off.$kv' ] && cmp -s '$work/g.off.$kv' '$work/g.d.$kv'" \
        "$(tail -3 "$work/g.d.$kv.err")"
    "$NEXTN" run -m "$work/q32.gguf" -p "$P" -n 40 --temp 0 --spec-type none -ctk $kv -ctv $kv >"$work/q32.off.$kv" 2>/dev/null
    for st in mtp ngram,mtp; do
        "$NEXTN" run -m "$work/q32.gguf" -p "$P" -n 40 --temp 0 --spec-type $st --draft-max 3 -ctk $kv -ctv $kv \
            >"$work/q32.$st.$kv" 2>"$work/q32.$st.$kv.err"
        check "q32.gguf --spec-type $st, $kv KV: identical" "[ -s '$work/q32.off.$kv' ] && cmp -s '$work/q32.off.$kv' '$work/q32.$st.$kv'" \
            "$(tail -3 "$work/q32.$st.$kv.err")"
    done
done
"$NEXTN" run -m "$work/q.gguf" -p "$P" -n 4 -ctk q8_0 >/dev/null 2>"$work/hd16.err"
check "q8_0 KV on head_dim 16 refused" "grep -q 'head dimension 16' '$work/hd16.err'" "$(cat "$work/hd16.err")"
# LLAMA_ARG_CACHE_TYPE_K / _V reach serve too (here: refused before the model loads)
LLAMA_ARG_CACHE_TYPE_V=q5_1 timeout 20 "$NEXTN" serve -m "$work/q.gguf" --port 0 >/dev/null 2>"$work/envkv.err"
check "LLAMA_ARG_CACHE_TYPE_V applied by serve" "grep -q \"q5_1\" '$work/envkv.err'" "$(cat "$work/envkv.err")"
check "self draft accepts everything" "grep -q 'acceptance 1.000' '$work/q.q.gguf.err'" "$(head -2 "$work/q.q.gguf.err")"
check "llama drafting itself accepts everything" "grep -q 'acceptance 1.000' '$work/l.l.gguf.err'" "$(head -2 "$work/l.l.gguf.err")"
"$NEXTN" run -m "$work/g.gguf" -p "$P" -n 8 --temp 0 --model-draft "$work/q2.gguf" >/dev/null 2>"$work/auto.err"
check "auto with a full draft model: draft" "grep -q 'speculation draft' '$work/auto.err'" "$(cat "$work/auto.err")"
"$NEXTN" run -m "$work/q.gguf" -p "$P" -n 8 --temp 0 --spec-type draft -md "$work/v520.gguf" >"$work/v.out" 2>"$work/v.err"
vrc=$?
check "mismatched vocabulary refused, naming the token" "[ $vrc -ne 0 ] && grep -q 'token 509' '$work/v.err' && [ ! -s '$work/v.out' ]" "$(cat "$work/v.err")"
"$NEXTN" run -m "$work/q.gguf" -p "$P" -n 8 --spec-type draft -md "$work/q2.gguf" -ctkd q5_1 >/dev/null 2>"$work/ctkd.err"
check "-ctkd q5_1 refused" "grep -q 'unsupported cache type' '$work/ctkd.err'" "$(cat "$work/ctkd.err")"
"$NEXTN" bench -m "$work/q.gguf" -p 0 -n 32 -r 1 --spec-type draft -md "$work/q2.gguf" >"$work/bench.out" 2>&1
check "bench: draft row, cost per draft step, measured / predicted" \
    "grep -q '^| draft ' '$work/bench.out' && grep -q 'ms/step' '$work/bench.out' && grep -q 'measured / predicted' '$work/bench.out'" \
    "$(tail -5 "$work/bench.out")"

# eval --spec N with a draft model (-md, no --spec-type: draft for a full model): the golden trace layout,
# tokens = the greedy continuation; drafted by itself every draft is accepted
for pair in "q q2.gguf" "q q.gguf" "g q2.gguf" "l l2.gguf" "q l2.gguf"; do
    set -- $pair
    "$NEXTN" eval -m "$work/$1.gguf" --prompt-ids 5,9,13,200,7,7,31 --greedy 24 -t 1 >"$work/eg.$1.json" 2>/dev/null
    "$NEXTN" eval -m "$work/$1.gguf" --prompt-ids 5,9,13,200,7,7,31 --spec 24 -md "$work/$2" -t 1 >"$work/es.$1.$2.json" 2>"$work/es.err"
    if python3 - "$work/eg.$1.json" "$work/es.$1.$2.json" "$1.gguf" "$2" <<'PY'
import json, sys
greedy = json.load(open(sys.argv[1]))
tr = json.load(open(sys.argv[2]))
assert tr["tokens"] == greedy, (tr["tokens"], greedy)
assert tr["n_drafted"] > 0 and any(r.get("drafts") for r in tr["rounds"]), tr["n_drafted"]
if sys.argv[3] == sys.argv[4]:
    assert tr["n_accepted"] == tr["n_drafted"], (tr["n_accepted"], tr["n_drafted"])
PY
    then ok "eval --spec 24 -md $2 on $1.gguf: tokens = greedy"; else bad "eval --spec -md $2 on $1.gguf" "$(cat "$work/es.err")"; fi
done

# LLAMA_ARG_*: applied, and the command line wins
LLAMA_ARG_SPEC_TYPE=draft LLAMA_ARG_MODEL_DRAFT="$work/q.gguf" LLAMA_ARG_DRAFT_MAX=3 \
    "$NEXTN" run -m "$work/q.gguf" -p "$P" -n 8 --temp 0 >/dev/null 2>"$work/env.err"
check "LLAMA_ARG_SPEC_TYPE / MODEL_DRAFT / DRAFT_MAX applied" "grep -q 'speculation draft draft-max 3' '$work/env.err'" "$(cat "$work/env.err")"
LLAMA_ARG_DRAFT_MAX=3 LLAMA_ARG_N_PREDICT=2 \
    "$NEXTN" run -m "$work/q.gguf" -p "$P" -n 8 --temp 0 --spec-type draft -md "$work/q.gguf" --draft-max 5 >/dev/null 2>"$work/env2.err"
check "the command line wins over LLAMA_ARG_*" "grep -q 'draft-max 5' '$work/env2.err' && grep -q 'generated 8 tokens' '$work/env2.err'" "$(cat "$work/env2.err")"
LLAMA_ARG_DRAFT_BLOCK_SIZE=4 "$NEXTN" run -m "$work/q.gguf" -p "$P" -n 4 --temp 0 --spec-type draft -md "$work/q.gguf" >/dev/null 2>"$work/env3.err"
check "LLAMA_ARG_DRAFT_BLOCK_SIZE=4: draft-max 3" "grep -q 'draft-max 3' '$work/env3.err'" "$(cat "$work/env3.err")"
check "--help lists the environment" "'$NEXTN' run --help | grep -q LLAMA_ARG_N_PARALLEL"

# LLAMA_MTP_ACC_TRACE: a file (append), parsed
LLAMA_MTP_ACC_TRACE="$work/acc.ndjson" "$NEXTN" run -m "$work/q.gguf" -p "$P" -n 24 --temp 0 --spec-type draft \
    -md "$work/q2.gguf" --draft-max 3 --draft-adaptive off >"$work/acc.out" 2>/dev/null
if python3 - "$work/acc.ndjson" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines, "empty trace"
ev = [json.loads(l) for l in lines]
drafts = [e for e in ev if e["evt"] == "mtp_draft"]
accepts = [e for e in ev if e["evt"] == "mtp_accept"]
assert drafts and len(drafts) == len(accepts), (len(drafts), len(accepts))
for d, a in zip(drafts, accepts):
    assert set(d) == {"evt", "iter", "seq_id", "id_last", "attn_pos", "n_steps", "h_l2", "drafts"}, d
    assert set(a) == {"evt", "iter", "seq_id", "n_accepted"}, a
    assert d["iter"] == a["iter"] and d["seq_id"] == a["seq_id"] == 0
    assert d["n_steps"] == len(d["drafts"]) <= 3 and 0 <= a["n_accepted"] <= d["n_steps"]
    assert isinstance(d["h_l2"], float) and d["h_l2"] > 0
assert [d["iter"] for d in drafts] == list(range(len(drafts)))
assert all(b["attn_pos"] > a["attn_pos"] for a, b in zip(drafts, drafts[1:]))
PY
then ok "LLAMA_MTP_ACC_TRACE: NDJSON mtp_draft / mtp_accept parsed"; else bad "LLAMA_MTP_ACC_TRACE parse" "$(head -3 "$work/acc.ndjson")"; fi
check "trace not in stdout" "cmp -s '$work/acc.out' <(head -c \$(wc -c <'$work/acc.out') '$work/q.off')"
LLAMA_MTP_ACC_TRACE=1 "$NEXTN" run -m "$work/q.gguf" -p "$P" -n 8 --temp 0 --spec-type draft -md "$work/q2.gguf" \
    >"$work/acc1.out" 2>"$work/acc1.err"
check "LLAMA_MTP_ACC_TRACE=1: stderr" "grep -q '\"evt\":\"mtp_draft\"' '$work/acc1.err' && ! grep -q evt '$work/acc1.out'"
"$NEXTN" run -m "$work/q.gguf" -p "$P" -n 8 --temp 0 --spec-type draft -md "$work/q2.gguf" --spec-trace - \
    >"$work/st.out" 2>"$work/st.err"
check "--spec-trace -: on stderr, stdout is the text" "grep -q '\"draft\"' '$work/st.err' && ! grep -q '{' '$work/st.out'" "$(head -c 300 "$work/st.out")"
LLAMA_MTP_SKIP_STREAK_THRESHOLD=1 "$NEXTN" run -m "$work/q.gguf" -p "$P" -n 30 --temp 0 --spec-type draft \
    -md "$work/q2.gguf" --draft-max 3 --draft-adaptive off >"$work/sk.out" 2>"$work/sk.err"
check "LLAMA_MTP_SKIP_STREAK_THRESHOLD=1 skips rounds, output unchanged" \
    "grep -Eq 'rounds \\(([0-9]+) with drafts\\)' '$work/sk.err' && ! grep -Eq ' ([0-9]+) rounds \\(\\1 with' '$work/sk.err' && cmp -s '$work/sk.out' <(head -c \$(wc -c <'$work/sk.out') '$work/q.off')" \
    "$(cat "$work/sk.err")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
