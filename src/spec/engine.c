/*
 * engine.c — the speculative generation engine (contract: engine.h; design: speculative.md §2-6,
 * src/spec/README.md).
 *
 * Owns per sequence: the sampler chain, the adaptive policy and the request's overrides, stats,
 * the output tokens (+ their logprobs), the round state (id_last, P), the prompt still to decode
 * (submit), and the cache a later request may reuse: the tokens at the KV's positions, the trunk
 * hidden of the last one, recurrent-state checkpoints. Owns per engine: the drafter (or chain),
 * the one target batch of a step, the cost table, the trace.
 * Plain decoding is the k = 0 round: one verify row per sequence. Prompt chunks of submitted
 * requests ride in the same batch (their rows after the verify rows, no snapshots).
 * Must never: decode a sequence outside the round protocol (the drafters must see every target
 * batch), draw randomness for a greedy chain, let one sequence's state leak into another's, keep
 * a cache whose tokens, KV, checkpoints or drafter state may disagree (any failure drops it).
 */
#include "spec/engine.h"
#include "spec/assistant.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "ctx.h"
#include "model.h"
#include "arch/gemma4_assistant.h"
#include "spec/mtp.h"
#include "spec/draft_model.h"
#include "spec/draft_vocab.h"
#include "spec/ngram.h"

/* A recurrent-state checkpoint: the state after the first pos positions, and the trunk hidden
 * at pos - 1 (what the MTP drafter conditions its next row on). buf: [rec floats][n_embd]. */
typedef struct eng_ckpt {
    int pos;
    float *buf;
} eng_ckpt;

typedef struct eng_seq {
    bool used, active, in_round;
    int rounds;                  /* rounds of the current request */
    bool pending;                /* prompt not finished (submit) */
    nx_sampler *ch;
    nx_spec_policy_params pp;    /* the engine's, with the request's overrides */
    nx_spec_policy pol;
    bool draft_on;               /* some chain stage may draft for this request */
    bool use_k_stage;
    int k_stage[NX_SPEC_MAX_STAGES];
    nx_spec_stats st;
    nx_token *out;
    int n_out, cap_out, taken;
    int n_probs;                 /* logprobs kept per output token: 1 + n_top entries */
    int n_top;
    nx_token_prob *lp;           /* [n_out][1 + n_top]; n_top differs between requests */
    size_t cap_lp;               /* entries (not tokens) lp holds */
    int n_predict;
    nx_token *stop;
    int n_stop;
    nx_token id_last;
    nx_pos P;
    /* submit: the prompt and how much of it is in the KV */
    nx_token *prompt;
    int n_prompt, cap_prompt, n_done, n_reused;
    uint64_t tick;               /* submit order: older prompts get the step's prompt rows first */
    /* the cache: the tokens at KV positions 0..n_cache-1 */
    nx_token *cache;             /* [n_ctx] */
    int n_cache;
    bool cache_ok;
    bool h_ok;
    float *h_last;               /* [E] trunk hidden at n_cache - 1 (when h_ok) */
    eng_ckpt *ck;                /* [max_checkpoints], increasing pos */
    int n_ck;
    /* this step */
    int k, row0;
    nx_token shadow;             /* this round's unverified extra draft (-1: none) */
    nx_sampler *dch;             /* sampled drafts: the scratch chain handed to the drafter (NULL: greedy) */
    nx_rng drng;                 /* its RNG streams: one seed per round, apart from the chain's */
    nx_sample_dist *qd;          /* [NX_SPEC_DRAFT_CAP] the drafter's q per draft */
    int zero_streak;             /* rounds in a row whose drafts were all rejected (skip streak) */
    bool plain_queued;           /* a plain round since this sequence last drafted: the drafter may
                                    hold committed rows that are no part of the next draft's cost */
    bool traced;                 /* this round wrote an mtp_draft line (LLAMA_MTP_ACC_TRACE) */
    int round_n;                 /* tokens this round committed */
    int prow0, pn;               /* prompt rows in the batch */
    nx_draft_req req;
    nx_token drafts[NX_SPEC_DRAFT_CAP];
    float dp[NX_SPEC_DRAFT_CAP];
} eng_seq;

struct nx_spec_engine {
    nx_ctx *ctx;
    nx_spec_engine_params p;
    int n_seq, n_ctx, V, E;
    int64_t R;                   /* floats of one sequence's recurrent state */
    int max_prompt;              /* prompt rows per step */
    int add_chunk;               /* prompt rows per batch in nx_spec_engine_add */
    uint64_t tick;
    nx_drafter *drafter;
    bool drafter_keeps;          /* the drafter keeps per-position state (needs hidden rows on reuse) */
    const char *stage_names[NX_SPEC_MAX_STAGES];
    int n_stages;
    nx_spec_policy_params pp;
    nx_spec_costs costs;
    nx_spec_policy_memory mem[2]; /* [sampled]: what released sequences measured (policy.h) */
    nx_spec_trace *trace;
    FILE *acc;                   /* LLAMA_MTP_ACC_TRACE: NDJSON mtp_draft / mtp_accept (NULL: off) */
    bool acc_own;
    uint64_t acc_iter;
    int skip_streak;             /* LLAMA_MTP_SKIP_STREAK_THRESHOLD (0: off) */
    eng_seq *seqs;
    nx_batch *batch;
    int batch_cap;
    nx_draft_req *reqs;
    int *req_seq;
    nx_sampler *row;             /* scratch chain: the target chain plus the drafts judged so far */
    nx_sample_dist dist;
    nx_spec_stats total;
    uint64_t draft_steps;
    nx_token ids[NX_SPEC_DRAFT_CAP + 1];
};

nx_spec_engine_params nx_spec_engine_default_params(void) {
    nx_spec_engine_params p;
    memset(&p, 0, sizeof p);
    p.spec = nx_spec_params_default();
    p.sampler = nx_sampler_default_params(0);
    p.sampler.temperature = 0.0f;
    p.budget_slack = 1;
    p.observe_costs = true;
    p.checkpoint_interval = 512;
    p.max_checkpoints = 8;
    p.max_prompt_rows = 0;
    return p;
}

static nx_status decode_err(nx_error *err, const char *what) {
    return nx_fail(err, NX_ERR_INTERNAL, "%s: %s", what, nx_last_error());
}
/* ===== creation ===== */

/* The MTP drafter with the draft head the options ask for (draft_vocab.h). */
static nx_status mtp_create(nx_spec_engine *e, nx_drafter **d, nx_error *err) {
    const nx_spec_params *sp = &e->p.spec;
    nx_mtp_head_opts o = {.requant = sp->draft_head_requant, .head_type = sp->draft_head_type};
    int32_t *ids = NULL;
    nx_status st = nx_draft_vocab_build(e->ctx->model->gguf, e->V, sp->draft_vocab, sp->draft_vocab_file, &ids,
                                        &o.n_vocab, err);
    o.vocab = ids;
    if (st == NX_OK) st = nx_mtp_drafter_create_opts(e->ctx, &o, d, err);
    free(ids);
    return st != NX_OK ? nx_error_prefix(err, "--spec-type mtp") : NX_OK;
}

static nx_status build_drafters(nx_spec_engine *e, nx_error *err) {
    const nx_spec_params *sp = &e->p.spec;
    nx_drafter *stages[NX_SPEC_MAX_STAGES];
    int n = 0;
    nx_status st = NX_OK;
    for (int i = 0; i < sp->n_types && st == NX_OK; i++) {
        nx_drafter *d = NULL;
        switch (sp->types[i]) {
        case NX_SPEC_MTP:
            if (!nx_mtp_supported(e->ctx->model)) {
                nx_error tmp = {0};
                nx_mtp_unsupported_error(e->ctx->model, &tmp);
                if (!sp->fallback) {
                    st = nx_fail(err, tmp.code, "%s", tmp.msg);
                    break;
                }
                NX_WARN("%s; --spec-fallback: continuing without the mtp drafter", tmp.msg);
                continue;
            }
            st = mtp_create(e, &d, err);
            break;
        case NX_SPEC_NGRAM: {
            nx_ngram_params np = nx_spec_params_ngram(sp);
            st = nx_ngram_create(&np, e->n_seq, &d, err);
            break;
        }
        case NX_SPEC_ASSISTANT: {
            if (!sp->draft_model) {
                st = nx_fail(err, NX_ERR_INVALID_ARG, "--spec-type assistant needs --draft-model FILE (alias --mtp-head)");
                break;
            }
            nx_assistant_opts ao = nx_assistant_default_opts();
            ao.positions = sp->draft_positions;
            ao.dense_head = sp->assistant_dense_head;
            st = nx_assistant_create(e->ctx, sp->draft_model, &ao, e->n_seq, &d, err);
            break;
        }
        case NX_SPEC_DRAFT: {
            if (!sp->draft_model) {
                st = nx_fail(err, NX_ERR_INVALID_ARG, "--spec-type draft needs --model-draft FILE (-md, --draft-model)");
                break;
            }
            nx_draft_model_opts o = nx_draft_model_default_opts();
            o.n_ctx = sp->draft_n_ctx;
            o.n_threads = sp->draft_threads;
            o.type_k = sp->draft_type_k;
            o.type_v = sp->draft_type_v;
            st = nx_draft_model_create(e->ctx, sp->draft_model, &o, e->n_seq, &d, err);
            if (st != NX_OK) nx_error_prefix(err, "--spec-type draft");
            break;
        }
        default:
            st = nx_fail(err, NX_ERR_UNSUPPORTED, "--spec-type %s: not available in nextn (available: mtp, ngram, assistant, draft)",
                         nx_spec_type_name(sp->types[i]));
            break;
        }
        if (st == NX_OK && d) {
            e->stage_names[n] = nx_spec_type_name(sp->types[i]);
            stages[n++] = d;
        }
    }
    if (st != NX_OK) {
        for (int i = 0; i < n; i++) nx_drafter_free(stages[i]);
        return st;
    }
    e->n_stages = n;
    if (n == 1) e->drafter = stages[0];
    else if (n > 1) st = nx_drafter_chain_create(stages, n, 1, &e->drafter, err);
    return st;
}

void nx_spec_engine_free(nx_spec_engine *e) {
    if (!e) return;
    for (int s = 0; e->seqs && s < e->n_seq; s++) {
        eng_seq *q = &e->seqs[s];
        nx_sampler_free(q->ch);
        free(q->out);
        free(q->lp);
        free(q->stop);
        free(q->prompt);
        free(q->cache);
        free(q->h_last);
        nx_sampler_free(q->dch);
        for (int i = 0; q->qd && i < NX_SPEC_DRAFT_CAP; i++) nx_sample_dist_free(&q->qd[i]);
        free(q->qd);
        for (int i = 0; q->ck && i < e->p.max_checkpoints; i++) free(q->ck[i].buf);
        free(q->ck);
    }
    free(e->seqs);
    nx_drafter_free(e->drafter);
    if (e->trace) nx_spec_trace_stats(e->trace, &e->total, e->stage_names, NULL);   /* the run's summary line */
    nx_spec_trace_close(e->trace, NULL);
    if (e->acc_own) fclose(e->acc);
    nx_batch_free(e->batch);
    free(e->reqs);
    free(e->req_seq);
    nx_sampler_free(e->row);
    nx_sample_dist_free(&e->dist);
    free(e);
}

void nx_spec_params_resolve_auto(nx_spec_params *sp, const nx_model *m) {
    if (!sp || !sp->auto_type || sp->n_types != 0) return;
    /* a drafter file named on the command line wins: a Gemma 4 assistant GGUF drafts as an
     * assistant, any other model as a draft model; else the model's own MTP head */
    if (sp->draft_model)
        sp->types[sp->n_types++] = nx_assistant_file_is_drafter(sp->draft_model) ? NX_SPEC_ASSISTANT : NX_SPEC_DRAFT;
    else if (nx_mtp_supported(m)) sp->types[sp->n_types++] = NX_SPEC_MTP;
}

nx_status nx_spec_engine_create(nx_ctx *ctx, const nx_spec_engine_params *params, nx_spec_engine **out, nx_error *err) {
    if (!out) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: out is NULL");
    *out = NULL;
    if (!ctx) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: no context");
    nx_spec_engine_params p = params ? *params : nx_spec_engine_default_params();
    nx_spec_params_resolve_auto(&p.spec, ctx->model);
    nx_status st = nx_spec_params_validate(&p.spec, err);
    if (st != NX_OK) return st;
    if (p.budget_slack < 1 || p.budget_slack > 64)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: budget_slack %d (1..64)", p.budget_slack);
    if (p.checkpoint_interval < 0 || p.max_checkpoints < 0 || p.max_checkpoints > 4096 || p.max_prompt_rows < 0 ||
        p.max_prompt_rows > 65536)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: checkpoint_interval %d (>= 0), max_checkpoints %d "
                       "(0..4096), max_prompt_rows %d (0..65536)", p.checkpoint_interval, p.max_checkpoints,
                       p.max_prompt_rows);
    if (p.checkpoint_interval == 0) p.max_checkpoints = 0;
    nx_spec_engine *e = calloc(1, sizeof *e);
    if (!e) return nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory");
    e->ctx = ctx;
    e->p = p;
    e->n_seq = nx_ctx_n_seq_max(ctx);
    e->n_ctx = nx_ctx_n_ctx(ctx);
    e->V = nx_model_n_vocab(ctx->model);
    e->E = nx_model_n_embd(ctx->model);
    e->R = nx_kv_rec_floats(ctx->kv);
    e->max_prompt = p.max_prompt_rows ? p.max_prompt_rows : ctx->params.n_ubatch;
    if (e->p.sampler.n_vocab == 0) e->p.sampler.n_vocab = e->V;
    e->pp = nx_spec_params_policy(&p.spec);
    nx_spec_costs_init(&e->costs);
    if (p.costs) e->costs = *p.costs;
    nx_spec_stats_reset(&e->total);
    nx_spec_policy tmp;
    st = nx_spec_policy_init(&tmp, &e->pp, err);
    if (st == NX_OK) st = build_drafters(e, err);
    if (st != NX_OK) {
        nx_spec_engine_free(e);
        return st;
    }
    e->drafter_keeps = e->drafter && nx_drafter_keeps_positions(e->drafter);
    const int kmax = e->drafter ? p.spec.draft_max : 0;
    e->add_chunk = e->n_seq * (kmax + 1) > ctx->params.n_ubatch ? e->n_seq * (kmax + 1) : ctx->params.n_ubatch;
    /* a request may raise its draft length up to the cap (nx_spec_overrides.n_max) */
    const int kcap = e->drafter ? NX_SPEC_DRAFT_CAP : 0;
    e->batch_cap = e->n_seq * (kcap + 1) + e->max_prompt;
    if (e->batch_cap < e->add_chunk) e->batch_cap = e->add_chunk;
    e->batch = nx_batch_create(e->batch_cap);
    e->seqs = calloc((size_t)e->n_seq, sizeof *e->seqs);
    e->reqs = calloc((size_t)e->n_seq, sizeof *e->reqs);
    e->req_seq = calloc((size_t)e->n_seq, sizeof *e->req_seq);
    bool ok = e->batch && e->seqs && e->reqs && e->req_seq;
    for (int s = 0; ok && s < e->n_seq; s++) {
        eng_seq *q = &e->seqs[s];
        q->cache = malloc((size_t)e->n_ctx * sizeof *q->cache);
        q->h_last = malloc((size_t)e->E * sizeof *q->h_last);
        q->ck = p.max_checkpoints ? calloc((size_t)p.max_checkpoints, sizeof *q->ck) : NULL;
        ok = q->cache && q->h_last && (q->ck || !p.max_checkpoints);
    }
    if (!ok) {
        nx_spec_engine_free(e);
        return nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory");
    }
    st = nx_sampler_create(&e->p.sampler, &e->row, err);
    if (st == NX_OK) st = nx_sample_dist_init(&e->dist, e->V, err);
    const char *tp = nx_spec_params_trace_path(&p.spec);
    if (st == NX_OK && tp && e->drafter) st = nx_spec_trace_open(tp, &e->trace, err);
    /* the llama.cpp fork's variables (speculative.md: same meaning, nextn's engine) */
    const char *at = getenv("LLAMA_MTP_ACC_TRACE");
    if (st == NX_OK && e->drafter && at && *at && strcmp(at, "0")) {
        e->acc = strcmp(at, "1") ? fopen(at, "a") : stderr;
        e->acc_own = e->acc && e->acc != stderr;
        if (!e->acc) NX_WARN("LLAMA_MTP_ACC_TRACE: cannot open %s; no trace", at);
    }
    const char *ss = getenv("LLAMA_MTP_SKIP_STREAK_THRESHOLD");
    if (ss && *ss) {
        char *end;
        const long v = strtol(ss, &end, 10);
        if (!*end && v >= 1 && v <= 32) e->skip_streak = (int)v;
        else NX_WARN("LLAMA_MTP_SKIP_STREAK_THRESHOLD '%s' is not in 1..32; ignored", ss);
    }
    if (st != NX_OK) {
        nx_spec_engine_free(e);
        return nx_error_prefix(err, "spec engine");
    }
    *out = e;
    return NX_OK;
}

/* ===== outputs and logprobs ===== */

/* log-softmax of the raw logits: the chosen token's, and the n_top best (descending, lower id
 * first on ties) into out[1..n_top]. The sum runs in double in a fixed order, so the same logits
 * give the same numbers whatever produced them. */
static void token_logprobs(const float *lg, int V, nx_token chosen, int n_top, nx_token_prob *out) {
    float m = -INFINITY;
    for (int v = 0; v < V; v++)
        if (lg[v] > m) m = lg[v];
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)lg[v] - (double)m);
    const double lse = (double)m + log(sum);
    out[0].id = chosen;
    out[0].logprob = (float)((double)lg[chosen] - lse);
    nx_token_prob *top = out + 1;
    int n = 0;
    for (int v = 0; v < V && n_top > 0; v++) {
        const float x = lg[v];
        if (x != x || (n == n_top && !(x > top[n - 1].logprob))) continue;
        int j = n < n_top ? n++ : n - 1;
        while (j > 0 && x > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].id = v;
        top[j].logprob = x;   /* the raw logit until the end */
    }
    for (int j = 0; j < n; j++) top[j].logprob = (float)((double)top[j].logprob - lse);
    for (int j = n; j < n_top; j++) top[j] = (nx_token_prob){-1, -INFINITY};
}

static nx_status out_push(eng_seq *q, nx_token t, nx_error *err) {
    if (q->n_out == q->cap_out) {
        int cap = q->cap_out ? 2 * q->cap_out : 64;
        nx_token *o = realloc(q->out, (size_t)cap * sizeof *o);
        if (!o) return nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory for the output");
        q->out = o;
        q->cap_out = cap;
    }
    q->out[q->n_out++] = t;
    return NX_OK;
}

static bool is_stop(const eng_seq *q, nx_token t) {
    for (int i = 0; i < q->n_stop; i++)
        if (q->stop[i] == t) return true;
    return false;
}

/* Append committed tokens (token i sampled from the logits of batch row row0 + i); *ended when
 * the sequence ends (stop token, budget) — what follows the end is dropped. */
static nx_status emit(nx_spec_engine *e, eng_seq *q, const nx_token *t, int n, int row0, bool *ended, nx_error *err) {
    *ended = false;
    for (int i = 0; i < n; i++) {
        nx_status st = out_push(q, t[i], err);
        if (st != NX_OK) return st;
        if (q->n_probs) {
            const int per = 1 + q->n_top;
            /* Sized in entries: a request with more top logprobs than the last one on this
             * sequence needs more room per token, not only more tokens. */
            if ((size_t)q->n_out * (size_t)per > q->cap_lp) {
                const size_t cap = (size_t)q->cap_out * (size_t)per;
                nx_token_prob *lp = realloc(q->lp, cap * sizeof *lp);
                if (!lp) return nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory for logprobs");
                q->lp = lp;
                q->cap_lp = cap;
            }
            const float *lg = nx_ctx_logits(e->ctx, row0 + i);
            if (!lg) return nx_fail(err, NX_ERR_INTERNAL, "spec engine: no logits for batch row %d", row0 + i);
            token_logprobs(lg, e->V, t[i], q->n_top, q->lp + (size_t)(q->n_out - 1) * per);
        }
        if (is_stop(q, t[i]) || (q->n_predict > 0 && q->n_out >= q->n_predict)) {
            *ended = true;
            return NX_OK;
        }
    }
    return NX_OK;
}

/* ===== the cache a later request may reuse ===== */

/* The KV no longer matches what the engine knows (a failure): nothing of it may be reused. */
static void cache_drop(eng_seq *q) {
    q->cache_ok = false;
    q->h_ok = false;
    q->n_cache = 0;
    q->n_ck = 0;
}

/* Tokens committed to the KV at positions n_cache..; h = the trunk hidden of the last one. */
static void cache_push(nx_spec_engine *e, eng_seq *q, nx_pos pos, const nx_token *t, int n, const float *h) {
    if (!q->cache_ok || pos != q->n_cache || pos + n > e->n_ctx) {
        cache_drop(q);
        return;
    }
    memcpy(q->cache + pos, t, (size_t)n * sizeof *t);
    q->n_cache += n;
    if (h) memcpy(q->h_last, h, (size_t)e->E * sizeof *h);
    q->h_ok = h != NULL;
}

/* A checkpoint of seq's live state, taken right after position pos - 1 was decoded (its trunk
 * hidden h). The oldest goes when all slots are taken. A failed allocation only skips it. */
static void ckpt_save(nx_spec_engine *e, eng_seq *q, nx_seq_id s, int pos, const float *h) {
    const int M = e->p.max_checkpoints;
    if (!M || !q->cache_ok) return;
    if (q->n_ck == M) {
        eng_ckpt old = q->ck[0];
        memmove(q->ck, q->ck + 1, (size_t)(M - 1) * sizeof *q->ck);
        q->ck[M - 1] = old;
        q->n_ck--;
    }
    eng_ckpt *c = &q->ck[q->n_ck];
    if (!c->buf) c->buf = malloc(((size_t)e->R + (size_t)e->E) * sizeof(float));
    if (!c->buf) {
        NX_WARN("spec engine: sequence %d: no memory for a checkpoint at %d; skipped", s, pos);
        return;
    }
    nx_kv_rec_save(e->ctx->kv, s, c->buf);
    memcpy(c->buf + e->R, h, (size_t)e->E * sizeof *h);
    c->pos = pos;
    q->n_ck++;
}

/* Cut seq back to the longest usable prefix of its cache that the prompt shares (at most
 * n_prompt - 1: the last prompt row must be decoded for its logits): the cache's end (live
 * state), any length on a model without recurrent layers whose drafter keeps no per-position
 * state, else the deepest checkpoint. Returns the positions kept (0: none, the sequence is
 * empty) and *hid = the trunk hidden at keep - 1 (NULL if unknown). */
static int restore_prefix(nx_spec_engine *e, eng_seq *q, nx_seq_id s, const nx_token *prompt, int n_prompt,
                          const float **hid) {
    nx_kv *kv = e->ctx->kv;
    *hid = NULL;
    int lim = n_prompt - 1 < q->n_cache ? n_prompt - 1 : q->n_cache, shared = 0;
    if (!q->cache_ok) lim = 0;
    while (shared < lim && prompt[shared] == q->cache[shared]) shared++;
    if (shared > 0 && q->n_cache <= shared && (q->h_ok || !e->drafter_keeps) &&
        nx_kv_seq_restore(kv, s, q->n_cache, NULL, NULL) == NX_OK) {
        *hid = q->h_ok ? q->h_last : NULL;
        return q->n_cache;
    }
    if (shared > 0 && e->R == 0 && !e->drafter_keeps && nx_kv_seq_restore(kv, s, shared, NULL, NULL) == NX_OK)
        return shared;
    for (int i = q->n_ck - 1; shared > 0 && i >= 0; i--)
        if (q->ck[i].pos <= shared && nx_kv_seq_restore(kv, s, q->ck[i].pos, q->ck[i].buf, NULL) == NX_OK) {
            *hid = q->ck[i].buf + e->R;
            return q->ck[i].pos;
        }
    nx_kv_seq_reset(kv, s);
    return 0;
}

/* ===== requests ===== */

static void seq_clear(eng_seq *q) {
    nx_sampler_free(q->ch);
    q->ch = NULL;
    free(q->stop);
    q->stop = NULL;
    q->n_stop = 0;
    q->n_out = q->taken = 0;
    q->used = q->active = q->pending = false;
}

static nx_status req_check(const nx_spec_engine *e, const nx_spec_request *r, nx_error *err) {
    if (r->n_prompt < 1 || !r->prompt) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: empty prompt");
    if (r->n_prompt >= e->n_ctx)
        return nx_fail(err, NX_ERR_RANGE, "spec engine: the prompt (%d tokens) does not fit the context (%d positions, "
                       "one is needed for the first generated token)", r->n_prompt, e->n_ctx);
    if (r->n_predict == 0 || r->n_predict < -1)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: n_predict %d (>= 1, or -1)", r->n_predict);
    if (r->n_stop < 0 || (r->n_stop > 0 && !r->stop))
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: bad stop list");
    if (r->n_probs < 0 || r->n_probs > NX_SPEC_MAX_PROBS)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: n_probs %d (0..%d)", r->n_probs, NX_SPEC_MAX_PROBS);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->V)
            return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: prompt token %d is %d, outside the vocabulary [0, %d)",
                           i, r->prompt[i], e->V);
    const nx_spec_overrides *o = r->spec;
    if (o) {
        if (o->has_n_max && (o->n_max < 0 || o->n_max > NX_SPEC_DRAFT_CAP))
            return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: speculative.n_max %d (0..%d)", o->n_max, NX_SPEC_DRAFT_CAP);
        if (o->has_n_min && (o->n_min < 0 || o->n_min > NX_SPEC_DRAFT_CAP))
            return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: speculative.n_min %d (0..%d)", o->n_min, NX_SPEC_DRAFT_CAP);
        if (o->has_n_max && o->has_n_min && o->n_min > o->n_max)
            return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: speculative.n_min %d > n_max %d", o->n_min, o->n_max);
        if (o->has_p_min && !(o->p_min >= 0.0f && o->p_min <= 1.0f))
            return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: speculative.p_min %g (0..1)", (double)o->p_min);
    }
    return NX_OK;
}

/* The per-request state: sampler chain, stop list, overrides, policy, counters. On failure the
 * sequence is left cleared. */
static nx_status req_setup(nx_spec_engine *e, eng_seq *q, const nx_spec_request *r, nx_error *err) {
    nx_sampler_params sp = r->sampler ? *r->sampler : e->p.sampler;
    if (sp.n_vocab == 0) sp.n_vocab = e->V;
    if (sp.n_vocab != e->V)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: sampler for %d tokens, model has %d", sp.n_vocab, e->V);
    /* the policy first: it can still fail without anything to undo */
    nx_spec_policy_params pp = e->pp;
    const nx_spec_overrides *o = r->spec;
    unsigned allowed = e->n_stages >= 32 ? ~0u : (1u << e->n_stages) - 1u;
    if (o) {
        if (o->has_n_max) pp.draft_max = o->n_max;
        if (o->has_n_min) pp.draft_min = o->n_min;
        if (pp.draft_min > pp.draft_max) pp.draft_min = pp.draft_max;   /* a lowered n_max wins */
        if (o->has_p_min) pp.p_min = o->p_min;
        if (o->has_adaptive) pp.adaptive = o->adaptive;
        if (o->stage_mask) allowed &= o->stage_mask;
    }
    nx_status st = nx_spec_policy_init(&q->pol, &pp, err);
    if (st != NX_OK) return nx_error_prefix(err, "spec engine: request");
    q->pp = pp;
    q->draft_on = e->drafter && allowed && pp.draft_max > 0;
    q->use_k_stage = o && o->stage_mask && e->n_stages > 1;
    for (int i = 0; i < NX_SPEC_MAX_STAGES; i++) q->k_stage[i] = (allowed >> i) & 1u ? NX_SPEC_DRAFT_CAP : 0;
    if ((st = nx_sampler_create(&sp, &q->ch, err)) != NX_OK) return st;
    q->used = true;
    if (r->n_stop) {
        q->stop = malloc((size_t)r->n_stop * sizeof *q->stop);
        if (!q->stop) { seq_clear(q); return nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory"); }
        memcpy(q->stop, r->stop, (size_t)r->n_stop * sizeof *q->stop);
        q->n_stop = r->n_stop;
    }
    q->n_predict = r->n_predict;
    q->n_out = q->taken = 0;
    q->rounds = 0;
    q->zero_streak = 0;
    q->plain_queued = false;
    q->traced = false;
    nx_sampler_free(q->dch);
    q->dch = NULL;
    if (e->p.spec.sample_drafts && e->drafter && !nx_sampler_is_greedy(q->ch)) {
        if (!q->qd) {
            q->qd = calloc(NX_SPEC_DRAFT_CAP, sizeof *q->qd);
            for (int i = 0; q->qd && i < NX_SPEC_DRAFT_CAP && st == NX_OK; i++) st = nx_sample_dist_init(&q->qd[i], e->V, err);
            if (!q->qd) st = nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory for sampled drafts");
        }
        if (st == NX_OK) st = nx_sampler_clone(q->ch, &q->dch, err);
        if (st != NX_OK) { seq_clear(q); return st; }
        nx_rng_seed(&q->drng, (uint64_t)nx_sampler_seed(q->ch) * 0x9E3779B97F4A7C15ull ^ 0xD1B54A32D192ED03ull);
    }
    nx_spec_policy_seed(&q->pol, &e->mem[!nx_sampler_is_greedy(q->ch)]);
    q->n_probs = r->n_probs;
    q->n_top = r->n_probs < e->V ? r->n_probs : e->V;
    q->n_reused = 0;
    nx_spec_stats_reset(&q->st);
    return NX_OK;
}

/* The prompt is in: the chain sees it, the first token comes from the last prompt row's logits
 * (batch row `row`). */
static nx_status prompt_done(nx_spec_engine *e, eng_seq *q, const nx_token *prompt, int n_prompt, int row,
                             nx_error *err) {
    for (int i = 0; i < n_prompt; i++) nx_sampler_accept(q->ch, prompt[i], NULL);   /* penalties see it */
    nx_token t;
    nx_status st = nx_sampler_sample(q->ch, nx_ctx_logits(e->ctx, row), &t, err);
    if (st != NX_OK) return st;
    nx_sampler_accept(q->ch, t, NULL);
    q->id_last = t;
    q->P = n_prompt;
    q->pending = false;
    bool ended = false;
    if ((st = emit(e, q, &t, 1, row, &ended, err)) != NX_OK) return st;
    q->active = !ended && q->P < e->n_ctx;
    return NX_OK;
}

nx_status nx_spec_engine_add(nx_spec_engine *e, const nx_spec_request *r, nx_seq_id *seq_out, nx_error *err) {
    if (!e || !r || !seq_out) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: add: NULL argument");
    *seq_out = -1;
    nx_status st = req_check(e, r, err);
    if (st != NX_OK) return st;
    int s = 0;
    while (s < e->n_seq && e->seqs[s].used) s++;
    if (s == e->n_seq)
        return nx_fail(err, NX_ERR_RANGE, "spec engine: all %d sequences are busy", e->n_seq);
    eng_seq *q = &e->seqs[s];
    if ((st = req_setup(e, q, r, err)) != NX_OK) return st;
    /* a fresh start: no cache to reuse, no checkpoints (nx_spec_engine_submit makes those) */
    cache_drop(q);
    q->cache_ok = true;
    if (e->drafter && (st = nx_drafter_begin(e->drafter, s, r->prompt, r->n_prompt, err)) != NX_OK) goto fail;
    /* the prompt, in chunks; every chunk goes to the drafters */
    const int U = e->add_chunk;
    for (int i0 = 0; i0 < r->n_prompt; i0 += U) {
        const int nb = r->n_prompt - i0 < U ? r->n_prompt - i0 : U;
        nx_batch_clear(e->batch);
        for (int i = 0; i < nb; i++)
            nx_batch_add(e->batch, r->prompt[i0 + i], i0 + i, s, i0 + i == r->n_prompt - 1);
        if (nx_decode(e->ctx, e->batch) != NX_OK) { st = decode_err(err, "spec engine: prompt"); goto fail; }
        if (e->drafter) {
            nx_target_rows rows = {
                .kind = NX_ROWS_PROMPT, .n = nb, .tok = e->batch->tok, .pos = e->batch->pos, .seq = e->batch->seq,
                .hidden = nx_ctx_hidden(e->ctx, 0), .n_embd = e->E, .ctx = e->ctx,
            };
            if ((st = nx_drafter_process(e->drafter, &rows, err)) != NX_OK) goto fail;
        }
        cache_push(e, q, i0, r->prompt + i0, nb, nx_ctx_hidden(e->ctx, nb - 1));
        if (i0 + nb == r->n_prompt && (st = prompt_done(e, q, r->prompt, r->n_prompt, nb - 1, err)) != NX_OK) goto fail;
    }
    *seq_out = s;
    return NX_OK;
fail:
    nx_seq_rm(e->ctx, s, -1, -1);
    cache_drop(q);
    seq_clear(q);
    return st;
}

nx_status nx_spec_engine_submit(nx_spec_engine *e, const nx_spec_request *r, nx_seq_id s, nx_error *err) {
    if (!e || !r) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: submit: NULL argument");
    if (s < 0 || s >= e->n_seq)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: submit: sequence %d outside [0, %d)", s, e->n_seq);
    if (e->seqs[s].used)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: submit: sequence %d is in use (release it first)", s);
    nx_status st = req_check(e, r, err);
    if (st != NX_OK) return st;
    eng_seq *q = &e->seqs[s];
    if (r->n_prompt > q->cap_prompt) {
        nx_token *pr = realloc(q->prompt, (size_t)r->n_prompt * sizeof *pr);
        if (!pr) return nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory for a %d-token prompt", r->n_prompt);
        q->prompt = pr;
        q->cap_prompt = r->n_prompt;
    }
    if ((st = req_setup(e, q, r, err)) != NX_OK) return st;
    memcpy(q->prompt, r->prompt, (size_t)r->n_prompt * sizeof *q->prompt);
    q->n_prompt = r->n_prompt;
    const float *hid = NULL;
    int keep = 0;
    if (r->reuse_prefix) keep = restore_prefix(e, q, s, q->prompt, q->n_prompt, &hid);
    else nx_kv_seq_reset(e->ctx->kv, s);
    if (e->drafter) {
        st = nx_drafter_begin_keep(e->drafter, s, q->prompt, q->n_prompt, keep, hid, err);
        if (st != NX_OK && keep > 0) {   /* the drafter cannot follow: start afresh */
            NX_WARN("spec engine: sequence %d: the drafter cannot keep %d positions (%s); the prompt is decoded afresh",
                    s, keep, err ? err->msg : "?");
            keep = 0;
            nx_kv_seq_reset(e->ctx->kv, s);
            st = nx_drafter_begin(e->drafter, s, q->prompt, q->n_prompt, err);
        }
        if (st != NX_OK) {
            nx_kv_seq_reset(e->ctx->kv, s);
            cache_drop(q);
            seq_clear(q);
            return st;
        }
    }
    if (keep == 0) {
        cache_drop(q);
        q->cache_ok = true;
    } else {
        q->n_cache = keep;   /* the cache's first keep tokens are the prompt's */
        if (hid && hid != q->h_last) memcpy(q->h_last, hid, (size_t)e->E * sizeof *hid);
        q->h_ok = hid != NULL;
        while (q->n_ck > 0 && q->ck[q->n_ck - 1].pos > keep) q->n_ck--;
    }
    q->n_done = q->n_reused = keep;
    q->pending = true;
    q->active = false;
    q->tick = ++e->tick;
    return NX_OK;
}

/* ===== one step ===== */

/* One LLAMA_MTP_ACC_TRACE draft line: attn_pos = the last position in the target KV (P - 1),
 * h_l2 = the norm of the trunk hidden the MTP / assistant drafters condition on (0 unknown). */
static void acc_draft(nx_spec_engine *e, eng_seq *q, nx_seq_id s) {
    double h2 = 0;
    for (int j = 0; q->h_ok && j < e->E; j++) h2 += (double)q->h_last[j] * (double)q->h_last[j];
    fprintf(e->acc, "{\"evt\":\"mtp_draft\",\"iter\":%llu,\"seq_id\":%d,\"id_last\":%d,\"attn_pos\":%d,"
            "\"n_steps\":%d,\"h_l2\":%.4f,\"drafts\":[", (unsigned long long)e->acc_iter, s, (int)q->id_last,
            (int)q->P - 1, q->req.n, sqrt(h2));
    for (int j = 0; j < q->req.n; j++) fprintf(e->acc, j ? ",%d" : "%d", (int)q->drafts[j]);
    fputs("]}\n", e->acc);
    fflush(e->acc);
    q->traced = true;
}

/* Acceptance of one sequence's verify rows (speculative.md §2 step 3); *a = drafts accepted,
 * *tok = the target's token after them. */
static nx_status judge(nx_spec_engine *e, eng_seq *q, int n, int *a, nx_token *tok, nx_error *err) {
    nx_status st = nx_sampler_copy(e->row, q->ch, err);
    if (st == NX_OK) st = nx_sampler_dist(e->row, nx_ctx_logits(e->ctx, q->row0), &e->dist, err);
    *a = 0;
    for (int i = 0; i < n && st == NX_OK; i++) {
        bool ok = false;
        nx_token rep = -1;
        st = nx_sampler_spec_accept(q->ch, &e->dist, q->drafts[i], q->req.sampled ? &q->qd[i] : NULL, &ok, &rep, err);
        if (st != NX_OK) return st;
        if (!ok) {
            *tok = rep;
            return NX_OK;
        }
        (*a)++;
        st = nx_sampler_accept(e->row, q->drafts[i], err);
        if (st == NX_OK) st = nx_sampler_dist(e->row, nx_ctx_logits(e->ctx, q->row0 + i + 1), &e->dist, err);
    }
    if (st == NX_OK) st = nx_sampler_sample_dist(q->ch, &e->dist, tok, err);
    return st;
}

/* A failure in a step: every sequence stops, and no cache can be trusted any more (a failed
 * decode resets the batch's sequences; the drafter may be half-updated). */
static void stop_all(nx_spec_engine *e) {
    for (int s = 0; s < e->n_seq; s++) {
        e->seqs[s].active = e->seqs[s].pending = false;
        e->seqs[s].pn = 0;
        cache_drop(&e->seqs[s]);
    }
}

/* Prompt rows of this step: the oldest submitted prompts first, at most max_prompt rows in all,
 * a chunk never crossing a checkpoint position (its state is live right after the chunk). */
static void add_prompt_rows(nx_spec_engine *e, bool snapshots) {
    int budget = e->max_prompt;
    const int I = e->p.max_checkpoints ? e->p.checkpoint_interval : 0;
    while (budget > 0) {
        eng_seq *best = NULL;
        int bs = -1;
        for (int s = 0; s < e->n_seq; s++) {
            eng_seq *q = &e->seqs[s];
            if (q->pending && !q->pn && (!best || q->tick < best->tick)) { best = q; bs = s; }
        }
        if (!best) break;
        int take = best->n_prompt - best->n_done;
        if (take > budget) take = budget;
        if (I > 0) {
            const int next = (best->n_done / I + 1) * I;
            if (take > next - best->n_done) take = next - best->n_done;
        }
        best->prow0 = nx_batch_size(e->batch);
        best->pn = take;
        for (int i = 0; i < take; i++) {
            const int p = best->n_done + i;
            nx_batch_add(e->batch, best->prompt[p], p, bs, p == best->n_prompt - 1);
        }
        if (snapshots) nx_ctx_skip_snapshots(e->ctx, bs);
        budget -= take;
    }
}

nx_status nx_spec_engine_step(nx_spec_engine *e, nx_error *err) {
    if (!e) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: step: no engine");
    int n_act = 0, n_pend = 0;
    for (int s = 0; s < e->n_seq; s++) {
        n_act += e->seqs[s].active;
        n_pend += e->seqs[s].pending;
        e->seqs[s].pn = 0;
    }
    if (!n_act && !n_pend) return NX_OK;
    const double t0 = nx_spec_time_now();
    /* 1. k per sequence */
    int n_req = 0;
    for (int s = 0; s < e->n_seq; s++) {
        eng_seq *q = &e->seqs[s];
        if (!q->active) continue;
        int k = 0, k_ask = 0;
        q->shadow = -1;
        if (q->draft_on) {
            const nx_spec_plan plan = nx_spec_policy_plan(&q->pol, &e->costs);
            k = plan.k;
            const int room = e->n_ctx - q->P - 1;
            if (k > room) k = room;
            if (q->n_predict > 0) {
                const int left = q->n_predict - q->n_out - e->p.budget_slack;
                if (k > left) k = left;
            }
            if (k > q->pp.draft_max) k = q->pp.draft_max;
            if (k < 0) k = 0;
            /* a shadow draft is never verified: it needs head room only, no budget */
            k_ask = k + (plan.shadow && k == plan.k && k + 1 <= room && k + 1 <= NX_SPEC_DRAFT_CAP);
        }
        /* LLAMA_MTP_SKIP_STREAK_THRESHOLD: after that many rounds whose drafts all failed, one
         * plain round (the fork's rule) */
        if (e->skip_streak && k > 0 && q->zero_streak >= e->skip_streak) {
            q->zero_streak = 0;
            k = k_ask = 0;
        }
        q->k = k;
        k = k_ask;
        nx_draft_req *r = &q->req;
        memset(r, 0, sizeof *r);
        r->n = 0;
        r->stage = -1;
        if (k > 0) {
            r->seq = s;
            r->pos = q->P;
            r->id_last = q->id_last;
            r->k_max = k;
            r->k_max_by_stage = q->use_k_stage ? q->k_stage : NULL;
            r->p_min = q->pp.p_min;
            r->tok = q->drafts;
            r->p = q->dp;
            if (q->dch) {   /* sampled drafts: the chain as it stands, a fresh RNG stream per round */
                nx_status cs = nx_sampler_copy(q->dch, q->ch, err);
                if (cs != NX_OK) { stop_all(e); return nx_error_prefix(err, "spec engine: draft sampler"); }
                nx_rng rr;
                nx_rng_seed(&rr, nx_rng_next(&q->drng));
                nx_sampler_set_rng(q->dch, rr);
                r->sampler = q->dch;
                r->q = q->qd;
            }
            e->reqs[n_req] = *r;
            e->req_seq[n_req++] = s;
        }
    }
    /* 2. draft: one call for every sequence */
    nx_status st = NX_OK;
    double t_draft = 0, t_sync = 0;
    if (n_req) {
        /* Pending drafter updates from plain rounds are not drafting: time them apart, so the
         * policy's per-step draft cost is not inflated after rounds without drafts. After a
         * drafting round the drafter's queued rows (the accepted drafts) go into the first draft
         * step's batch instead: a separate sync would cost one more head call every round. */
        bool sync = false;
        for (int i = 0; i < n_req; i++) sync |= e->seqs[e->req_seq[i]].plain_queued;
        if (sync) st = nx_drafter_sync(e->drafter, err);
        if (st != NX_OK) { stop_all(e); return nx_error_prefix(err, "spec engine: drafter sync"); }
        for (int i = 0; i < n_req; i++) e->seqs[e->req_seq[i]].plain_queued = false;
        const double td = nx_spec_time_now();
        t_sync = td - t0;
        st = nx_drafter_draft(e->drafter, e->reqs, n_req, err);
        t_draft = nx_spec_time_now() - td;
        if (st != NX_OK) { stop_all(e); return nx_error_prefix(err, "spec engine: draft"); }
        int steps = 0;
        for (int i = 0; i < n_req; i++) steps += e->reqs[i].n;
        e->draft_steps += (uint64_t)steps;
        for (int i = 0; i < n_req; i++) {
            eng_seq *q = &e->seqs[e->req_seq[i]];
            q->req = e->reqs[i];
            q->req.k_max_by_stage = NULL;
            if (steps > 0) nx_spec_policy_observe_draft_cost(&q->pol, t_draft * q->req.n / steps, q->req.n);
            if (q->req.n > q->k) {     /* the shadow draft: kept apart, not verified */
                q->shadow = q->drafts[q->k];
                q->req.n = q->k;
            }
            if (e->acc) acc_draft(e, q, e->req_seq[i]);
            if (e->trace) {
                const char *src = q->req.stage >= 0 && q->req.stage < e->n_stages ? e->stage_names[q->req.stage] : NULL;
                nx_spec_trace_draft(e->trace, e->req_seq[i], q->P, q->k, src, q->drafts, q->dp, q->req.n, NULL);
            }
        }
    }
    /* 3. one target batch: the verify rows of every generating sequence, then prompt chunks */
    const double t1 = nx_spec_time_now();
    nx_batch_clear(e->batch);
    nx_batch_set_snapshots(e->batch, n_act > 0);
    for (int s = 0; s < e->n_seq; s++) {
        eng_seq *q = &e->seqs[s];
        if (!q->active) continue;
        q->in_round = true;
        q->row0 = nx_batch_size(e->batch);
        nx_batch_add(e->batch, q->id_last, q->P, s, true);
        for (int i = 0; i < q->req.n; i++) nx_batch_add(e->batch, q->drafts[i], q->P + 1 + i, s, true);
    }
    const int n_vrows = nx_batch_size(e->batch);
    if (n_pend) add_prompt_rows(e, n_act > 0);
    const int n_rows = nx_batch_size(e->batch);
    if (nx_decode(e->ctx, e->batch) != NX_OK) {
        stop_all(e);
        return decode_err(err, "spec engine: verify");
    }
    const double t2 = nx_spec_time_now(), t_verify = t2 - t1;
    /* A request's first round runs on caches the prompt pass left cold: its verify time would
     * stick as an outlier in the table, so only later rounds are observed. */
    bool warm = true;
    for (int s = 0; s < e->n_seq; s++) warm &= !e->seqs[s].in_round || e->seqs[s].rounds > 0;
    if (e->p.observe_costs && warm && n_rows == n_vrows && n_rows <= NX_SPEC_VERIFY_ROWS_MAX)
        nx_spec_costs_observe(&e->costs, n_rows, t_verify, NULL);
    if (e->drafter) {
        nx_target_rows rows = {
            .kind = NX_ROWS_VERIFY, .n = n_vrows, .tok = e->batch->tok, .pos = e->batch->pos, .seq = e->batch->seq,
            .hidden = nx_ctx_hidden(e->ctx, 0), .n_embd = e->E, .ctx = e->ctx,
        };
        if (n_vrows) st = nx_drafter_process(e->drafter, &rows, err);
        if (st == NX_OK && n_rows > n_vrows) {
            rows.kind = NX_ROWS_PROMPT;
            rows.n = n_rows - n_vrows;
            rows.tok += n_vrows;
            rows.pos += n_vrows;
            rows.seq += n_vrows;
            rows.hidden = nx_ctx_hidden(e->ctx, n_vrows);
            st = nx_drafter_process(e->drafter, &rows, err);
        }
        if (st != NX_OK) {
            stop_all(e);
            return nx_error_prefix(err, "spec engine: drafter");
        }
    }
    /* 4-5. accept and commit, per generating sequence */
    for (int s = 0; s < e->n_seq && st == NX_OK; s++) {
        eng_seq *q = &e->seqs[s];
        if (!q->active) continue;
        const int n = q->req.n;
        int a = 0;
        nx_token tok = -1;
        st = judge(e, q, n, &a, &tok, err);
        if (st != NX_OK) break;
        if (a < n && nx_seq_rm(e->ctx, s, q->P + a + 1, -1) != NX_OK) {
            st = decode_err(err, "spec engine: rollback");
            break;
        }
        if (e->drafter && (st = nx_drafter_accept(e->drafter, s, a, err)) != NX_OK) break;
        cache_push(e, q, q->P, e->batch->tok + q->row0, a + 1, nx_ctx_hidden(e->ctx, q->row0 + a));
        for (int i = 0; i < a; i++) {
            e->ids[i] = q->drafts[i];
            nx_sampler_accept(q->ch, q->drafts[i], NULL);
        }
        e->ids[a] = tok;
        nx_sampler_accept(q->ch, tok, NULL);
        nx_spec_stats_round(&q->st, q->req.stage, n, a);
        nx_spec_stats_round(&e->total, q->req.stage, n, a);
        if (n > 0) q->zero_streak = a == 0 ? q->zero_streak + 1 : 0;
        if (q->traced) {
            fprintf(e->acc, "{\"evt\":\"mtp_accept\",\"iter\":%llu,\"seq_id\":%d,\"n_accepted\":%d}\n",
                    (unsigned long long)e->acc_iter++, s, a);
            fflush(e->acc);
            q->traced = false;
        }
        nx_spec_policy_observe(&q->pol, n, a);
        if (q->shadow >= 0 && a == n) {
            nx_spec_policy_observe_shadow(&q->pol, n + 1, tok == q->shadow);
            nx_spec_stats_shadow(&q->st, tok == q->shadow);
            nx_spec_stats_shadow(&e->total, tok == q->shadow);
        }
        bool ended = false;
        if ((st = emit(e, q, e->ids, a + 1, q->row0, &ended, err)) != NX_OK) break;
        const nx_pos P = q->P;
        q->round_n = a + 1;
        if (n == 0) q->plain_queued = true;
        q->P += a + 1;
        q->id_last = tok;
        if (ended || q->P >= e->n_ctx) q->active = false;
        if (e->trace && e->drafter) nx_spec_trace_accept(e->trace, s, P, a, e->ids, a + 1, NULL);
        if (e->p.on_round) {
            nx_spec_round_info info = {
                .seq = s, .pos = P, .id_last = e->batch->tok[q->row0], .k = q->k, .drafts = q->drafts, .p = q->dp,
                .n_drafted = n, .stage = q->req.stage, .ids = e->ids, .n_ids = a + 1, .n_accepted = a,
                .finished = !q->active,
            };
            e->p.on_round(e->p.user, &info);
        }
    }
    /* 6. prompt chunks: into the cache, checkpoints, the first token when a prompt is done */
    for (int s = 0; s < e->n_seq && st == NX_OK; s++) {
        eng_seq *q = &e->seqs[s];
        if (!q->pn) continue;
        const float *h = nx_ctx_hidden(e->ctx, q->prow0 + q->pn - 1);
        cache_push(e, q, q->n_done, q->prompt + q->n_done, q->pn, h);
        q->n_done += q->pn;
        if (e->p.max_checkpoints && (q->n_done % e->p.checkpoint_interval == 0 || q->n_done == q->n_prompt))
            ckpt_save(e, q, s, q->n_done, h);
        if (q->n_done == q->n_prompt) st = prompt_done(e, q, q->prompt, q->n_prompt, q->prow0 + q->pn - 1, err);
        q->pn = 0;
    }
    if (st != NX_OK) {
        stop_all(e);
        return nx_error_prefix(err, "spec engine");
    }
    const double t3 = nx_spec_time_now(), t_other = t3 - t2 + t_sync;
    for (int s = 0; s < e->n_seq; s++) {
        eng_seq *q = &e->seqs[s];
        if (q->in_round) {   /* this round's wall time, shared by the sequences that took part */
            nx_spec_stats_add_time(&q->st, t_draft / n_act, t_verify / n_act, t_other / n_act);
            /* the guard compares whole steps: each sequence waited for all of it; a step that
             * also read prompt rows says nothing about decoding speed */
            if (q->draft_on && n_rows == n_vrows && q->rounds > 0 && !(q->req.n == 0 && q->shadow >= 0)) {
                const int sw = nx_spec_policy_observe_round(&q->pol, q->req.n, q->round_n, t3 - t0);
                if (sw)
                    NX_INFO("speculation guard: sequence %d: speculation %s (%.3f ms/token with drafts, %.3f plain)", s,
                            sw > 0 ? "off, plain decoding is faster" : "back on", q->pol.t_spec * 1e3,
                            q->pol.t_plain * 1e3);
            }
        }
        if (q->in_round) q->rounds++;
        q->in_round = false;
    }
    nx_spec_stats_add_time(&e->total, t_draft, t_verify, t_other);
    return NX_OK;
}

/* ===== queries ===== */

int nx_spec_engine_n_active(const nx_spec_engine *e) {
    int n = 0;
    for (int s = 0; e && s < e->n_seq; s++) n += e->seqs[s].active || e->seqs[s].pending;
    return n;
}

bool nx_spec_engine_active(const nx_spec_engine *e, nx_seq_id seq) {
    return e && seq >= 0 && seq < e->n_seq && (e->seqs[seq].active || e->seqs[seq].pending);
}

bool nx_spec_engine_prompt_pending(const nx_spec_engine *e, nx_seq_id seq) {
    return e && seq >= 0 && seq < e->n_seq && e->seqs[seq].pending;
}

bool nx_spec_engine_guard(const nx_spec_engine *e, nx_seq_id seq, nx_spec_guard_info *out) {
    if (!e || seq < 0 || seq >= e->n_seq || !out) return false;
    const eng_seq *q = &e->seqs[seq];
    *out = (nx_spec_guard_info){
        .off = q->pol.off, .switches = q->pol.n_switches, .s_per_tok_spec = q->pol.n_spec ? q->pol.t_spec : 0,
        .s_per_tok_plain = q->pol.n_plain ? q->pol.t_plain : 0, .k_last = q->req.n,
    };
    return true;
}

int nx_spec_engine_n_reused(const nx_spec_engine *e, nx_seq_id seq) {
    if (!e || seq < 0 || seq >= e->n_seq) return 0;
    return e->seqs[seq].n_reused;
}

int nx_spec_engine_logprobs(const nx_spec_engine *e, nx_seq_id seq, int i, nx_token_prob *chosen, nx_token_prob *top,
                            int max_top) {
    if (!e || seq < 0 || seq >= e->n_seq) return -1;
    const eng_seq *q = &e->seqs[seq];
    if (!q->used || !q->n_probs || i < 0 || i >= q->n_out) return -1;
    const nx_token_prob *lp = q->lp + (size_t)i * (size_t)(1 + q->n_top);
    if (chosen) *chosen = lp[0];
    int n = max_top < q->n_top ? max_top : q->n_top;
    if (n < 0 || !top) n = 0;
    if (n) memcpy(top, lp + 1, (size_t)n * sizeof *top);
    return n;
}

const nx_token *nx_spec_engine_cached(const nx_spec_engine *e, nx_seq_id seq, int *n) {
    if (n) *n = 0;
    if (!e || seq < 0 || seq >= e->n_seq || !e->seqs[seq].cache_ok) return NULL;
    if (n) *n = e->seqs[seq].n_cache;
    return e->seqs[seq].cache;
}

const nx_token *nx_spec_engine_output(const nx_spec_engine *e, nx_seq_id seq, int *n) {
    if (n) *n = 0;
    if (!e || seq < 0 || seq >= e->n_seq || !e->seqs[seq].used) return NULL;
    if (n) *n = e->seqs[seq].n_out;
    return e->seqs[seq].out;
}

int nx_spec_engine_take(nx_spec_engine *e, nx_seq_id seq, const nx_token **toks) {
    if (toks) *toks = NULL;
    if (!e || seq < 0 || seq >= e->n_seq || !e->seqs[seq].used) return 0;
    eng_seq *q = &e->seqs[seq];
    const int n = q->n_out - q->taken;
    if (toks) *toks = q->out + q->taken;
    q->taken = q->n_out;
    return n;
}

void nx_spec_engine_release(nx_spec_engine *e, nx_seq_id seq) {
    if (!e || seq < 0 || seq >= e->n_seq || !e->seqs[seq].used) return;
    eng_seq *q = &e->seqs[seq];
    if (q->ch) nx_spec_memory_fold(&e->mem[!nx_sampler_is_greedy(q->ch)], &q->pol);
    seq_clear(q);   /* the cache (KV, tokens, checkpoints) stays for a later reuse_prefix */
}

void nx_spec_engine_forget(nx_spec_engine *e, nx_seq_id seq) {
    if (!e || seq < 0 || seq >= e->n_seq || e->seqs[seq].used) return;
    cache_drop(&e->seqs[seq]);
    nx_seq_rm(e->ctx, seq, -1, -1);
}

const nx_spec_stats *nx_spec_engine_stats(const nx_spec_engine *e, nx_seq_id seq) {
    if (!e || seq < 0 || seq >= e->n_seq || !e->seqs[seq].used) return NULL;
    return &e->seqs[seq].st;
}

const nx_spec_stats *nx_spec_engine_stats_total(const nx_spec_engine *e) { return e ? &e->total : NULL; }
const nx_spec_costs *nx_spec_engine_costs(const nx_spec_engine *e) { return e ? &e->costs : NULL; }
const nx_spec_policy_memory *nx_spec_engine_memory(const nx_spec_engine *e, bool sampled) {
    return e ? &e->mem[sampled] : NULL;
}
nx_drafter *nx_spec_engine_drafter(nx_spec_engine *e) { return e ? e->drafter : NULL; }

const char *const *nx_spec_engine_stage_names(const nx_spec_engine *e, int *n) {
    if (n) *n = e ? e->n_stages : 0;
    return e ? e->stage_names : NULL;
}

double nx_spec_engine_draft_cost(const nx_spec_engine *e) {
    if (!e || !e->draft_steps) return 0.0;
    return e->total.t_draft / (double)e->draft_steps;
}

/* ===== verify-cost sweep ===== */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

nx_status nx_spec_verify_sweep(nx_ctx *ctx, nx_seq_id seq, int max_rows, int reps, double *seconds,
                               nx_spec_costs *costs, nx_error *err) {
    if (!ctx || !seconds || max_rows < 1 || max_rows > NX_SPEC_VERIFY_ROWS_MAX || reps < 1 || reps > 1000)
        return nx_fail(err, NX_ERR_INVALID_ARG, "verify sweep: bad arguments (rows %d, reps %d)", max_rows, reps);
    nx_pos P = nx_seq_pos_next(ctx, seq);
    if (P < 1) return nx_fail(err, NX_ERR_INVALID_ARG, "verify sweep: sequence %d holds no position", seq);
    if ((long)P + (long)max_rows * reps + max_rows > nx_ctx_n_ctx(ctx))
        return nx_fail(err, NX_ERR_RANGE, "verify sweep: needs %d more positions after %d, the context holds %d",
                       max_rows * reps + max_rows, P, nx_ctx_n_ctx(ctx));
    const int V = nx_model_n_vocab(ctx->model);
    nx_batch *b = nx_batch_create(max_rows);
    double *t = malloc((size_t)reps * (size_t)(max_rows + 1) * sizeof *t);
    if (!b || !t) {
        nx_batch_free(b);
        free(t);
        return nx_fail(err, NX_ERR_NOMEM, "verify sweep: out of memory");
    }
    if (costs) nx_spec_costs_init(costs);
    nx_status st = NX_OK;
    /* the sizes in turn, reps times: a machine whose speed drifts affects every size alike */
    for (int r = 0; r < reps && st == NX_OK; r++) {
        for (int n = 1; n <= max_rows; n++) {
            nx_batch_clear(b);
            nx_batch_set_snapshots(b, true);
            for (int i = 0; i < n; i++) nx_batch_add(b, (nx_token)((P * 31 + i * 7 + 1) % V), P + i, seq, true);
            const double t0 = nx_spec_time_now();
            if (nx_decode(ctx, b) != NX_OK) { st = decode_err(err, "verify sweep"); break; }
            t[(size_t)n * reps + r] = nx_spec_time_now() - t0;
            if (n > 1 && nx_seq_rm(ctx, seq, P + 1, -1) != NX_OK) { st = decode_err(err, "verify sweep"); break; }
            P++;
        }
    }
    for (int n = 1; n <= max_rows && st == NX_OK; n++) {
        double *tn = t + (size_t)n * reps;
        qsort(tn, (size_t)reps, sizeof *tn, cmp_double);
        seconds[n] = tn[reps / 2];
        if (costs && seconds[n] > 0) st = nx_spec_costs_set(costs, n, seconds[n], err);
    }
    nx_batch_free(b);
    free(t);
    return st;
}
