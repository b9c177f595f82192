/*
 * engine.c — the speculative generation engine (contract: engine.h; design: speculative.md §2-6,
 * src/spec/README.md).
 *
 * Owns per sequence: the sampler chain, the adaptive policy, stats, the output tokens and the
 * round state (id_last, P). Owns per engine: the drafter (or chain), the verify batch, the
 * cost table, the trace. Plain decoding is the k = 0 round: one verify row per sequence.
 * Must never: decode a sequence outside the round protocol (the drafters must see every target
 * batch), draw randomness for a greedy chain, let one sequence's state leak into another's.
 */
#include "spec/engine.h"
#include "spec/assistant.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"
#include "ctx.h"
#include "model.h"
#include "spec/mtp.h"
#include "spec/ngram.h"

typedef struct eng_seq {
    bool used, active, in_round;
    nx_sampler *ch;
    nx_spec_policy pol;
    nx_spec_stats st;
    nx_token *out;
    int n_out, cap_out, taken;
    int n_predict;
    nx_token *stop;
    int n_stop;
    nx_token id_last;
    nx_pos P;
    /* this round */
    int k, row0;
    nx_draft_req req;
    nx_token drafts[NX_SPEC_DRAFT_CAP];
    float dp[NX_SPEC_DRAFT_CAP];
} eng_seq;

struct nx_spec_engine {
    nx_ctx *ctx;
    nx_spec_engine_params p;
    int n_seq, n_ctx, V, E;
    nx_drafter *drafter;
    const char *stage_names[NX_SPEC_MAX_STAGES];
    int n_stages;
    nx_spec_policy_params pp;
    nx_spec_costs costs;
    nx_spec_trace *trace;
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
    return p;
}

static nx_status decode_err(nx_error *err, const char *what) {
    return nx_fail(err, NX_ERR_INTERNAL, "%s: %s", what, nx_last_error());
}

/* ===== creation ===== */

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
            st = nx_mtp_drafter_create(e->ctx, &d, err);
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
        default:
            st = nx_fail(err, NX_ERR_UNSUPPORTED, "--spec-type %s: not available yet in nextn (available: mtp, ngram, assistant)",
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
        nx_sampler_free(e->seqs[s].ch);
        free(e->seqs[s].out);
        free(e->seqs[s].stop);
    }
    free(e->seqs);
    nx_drafter_free(e->drafter);
    if (e->trace) nx_spec_trace_stats(e->trace, &e->total, e->stage_names, NULL);   /* the run's summary line */
    nx_spec_trace_close(e->trace, NULL);
    nx_batch_free(e->batch);
    free(e->reqs);
    free(e->req_seq);
    nx_sampler_free(e->row);
    nx_sample_dist_free(&e->dist);
    free(e);
}

nx_status nx_spec_engine_create(nx_ctx *ctx, const nx_spec_engine_params *params, nx_spec_engine **out, nx_error *err) {
    if (!out) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: out is NULL");
    *out = NULL;
    if (!ctx) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: no context");
    nx_spec_engine_params p = params ? *params : nx_spec_engine_default_params();
    nx_status st = nx_spec_params_validate(&p.spec, err);
    if (st != NX_OK) return st;
    if (p.budget_slack < 1 || p.budget_slack > 64)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: budget_slack %d (1..64)", p.budget_slack);
    nx_spec_engine *e = calloc(1, sizeof *e);
    if (!e) return nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory");
    e->ctx = ctx;
    e->p = p;
    e->n_seq = nx_ctx_n_seq_max(ctx);
    e->n_ctx = nx_ctx_n_ctx(ctx);
    e->V = nx_model_n_vocab(ctx->model);
    e->E = nx_model_n_embd(ctx->model);
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
    const int kmax = e->drafter ? p.spec.draft_max : 0;
    e->batch_cap = e->n_seq * (kmax + 1) > ctx->params.n_ubatch ? e->n_seq * (kmax + 1) : ctx->params.n_ubatch;
    e->batch = nx_batch_create(e->batch_cap);
    e->seqs = calloc((size_t)e->n_seq, sizeof *e->seqs);
    e->reqs = calloc((size_t)e->n_seq, sizeof *e->reqs);
    e->req_seq = calloc((size_t)e->n_seq, sizeof *e->req_seq);
    if (!e->batch || !e->seqs || !e->reqs || !e->req_seq) {
        nx_spec_engine_free(e);
        return nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory");
    }
    st = nx_sampler_create(&e->p.sampler, &e->row, err);
    if (st == NX_OK) st = nx_sample_dist_init(&e->dist, e->V, err);
    const char *tp = nx_spec_params_trace_path(&p.spec);
    if (st == NX_OK && tp && e->drafter) st = nx_spec_trace_open(tp, &e->trace, err);
    if (st != NX_OK) {
        nx_spec_engine_free(e);
        return nx_error_prefix(err, "spec engine");
    }
    *out = e;
    return NX_OK;
}

/* ===== requests ===== */

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

/* Append committed tokens; false when the sequence ends (stop token, budget) — what follows the
 * end is dropped. */
static nx_status emit(eng_seq *q, const nx_token *t, int n, bool *ended, nx_error *err) {
    *ended = false;
    for (int i = 0; i < n; i++) {
        nx_status st = out_push(q, t[i], err);
        if (st != NX_OK) return st;
        if (is_stop(q, t[i]) || (q->n_predict > 0 && q->n_out >= q->n_predict)) {
            *ended = true;
            return NX_OK;
        }
    }
    return NX_OK;
}

static void seq_clear(eng_seq *q) {
    nx_sampler_free(q->ch);
    q->ch = NULL;
    free(q->stop);
    q->stop = NULL;
    q->n_stop = 0;
    q->n_out = q->taken = 0;
    q->used = q->active = false;
}

nx_status nx_spec_engine_add(nx_spec_engine *e, const nx_spec_request *r, nx_seq_id *seq_out, nx_error *err) {
    if (!e || !r || !seq_out) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: add: NULL argument");
    *seq_out = -1;
    if (r->n_prompt < 1 || !r->prompt) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: empty prompt");
    if (r->n_prompt >= e->n_ctx)
        return nx_fail(err, NX_ERR_RANGE, "spec engine: the prompt (%d tokens) does not fit the context (%d positions, "
                       "one is needed for the first generated token)", r->n_prompt, e->n_ctx);
    if (r->n_predict == 0 || r->n_predict < -1)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: n_predict %d (>= 1, or -1)", r->n_predict);
    if (r->n_stop < 0 || (r->n_stop > 0 && !r->stop))
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: bad stop list");
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->V)
            return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: prompt token %d is %d, outside the vocabulary [0, %d)",
                           i, r->prompt[i], e->V);
    int s = 0;
    while (s < e->n_seq && e->seqs[s].used) s++;
    if (s == e->n_seq)
        return nx_fail(err, NX_ERR_RANGE, "spec engine: all %d sequences are busy", e->n_seq);
    eng_seq *q = &e->seqs[s];
    nx_sampler_params sp = r->sampler ? *r->sampler : e->p.sampler;
    if (sp.n_vocab == 0) sp.n_vocab = e->V;
    if (sp.n_vocab != e->V)
        return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: sampler for %d tokens, model has %d", sp.n_vocab, e->V);
    nx_status st = nx_sampler_create(&sp, &q->ch, err);
    if (st != NX_OK) return st;
    q->used = true;
    if (r->n_stop) {
        q->stop = malloc((size_t)r->n_stop * sizeof *q->stop);
        if (!q->stop) { seq_clear(q); return nx_fail(err, NX_ERR_NOMEM, "spec engine: out of memory"); }
        memcpy(q->stop, r->stop, (size_t)r->n_stop * sizeof *q->stop);
        q->n_stop = r->n_stop;
    }
    q->n_predict = r->n_predict;
    q->n_out = q->taken = 0;
    nx_spec_stats_reset(&q->st);
    nx_spec_policy_init(&q->pol, &e->pp, NULL);
    if (e->drafter && (st = nx_drafter_begin(e->drafter, s, r->prompt, r->n_prompt, err)) != NX_OK) goto fail;
    /* the prompt, in ubatch-sized chunks; every chunk goes to the drafters */
    const int U = e->batch_cap;
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
        if (i0 + nb == r->n_prompt) {
            for (int i = 0; i < r->n_prompt; i++) nx_sampler_accept(q->ch, r->prompt[i], NULL);  /* penalties see it */
            nx_token t;
            if ((st = nx_sampler_sample(q->ch, nx_ctx_logits(e->ctx, nb - 1), &t, err)) != NX_OK) goto fail;
            nx_sampler_accept(q->ch, t, NULL);
            q->id_last = t;
        }
    }
    q->P = r->n_prompt;
    bool ended = false;
    if ((st = emit(q, &q->id_last, 1, &ended, err)) != NX_OK) goto fail;
    q->active = !ended && q->P < e->n_ctx;
    *seq_out = s;
    return NX_OK;
fail:
    nx_seq_rm(e->ctx, s, -1, -1);
    seq_clear(q);
    return st;
}

/* ===== one round ===== */

/* Acceptance of one sequence's verify rows (speculative.md §2 step 3); *a = drafts accepted,
 * *tok = the target's token after them. */
static nx_status judge(nx_spec_engine *e, eng_seq *q, int n, int *a, nx_token *tok, nx_error *err) {
    nx_status st = nx_sampler_copy(e->row, q->ch, err);
    if (st == NX_OK) st = nx_sampler_dist(e->row, nx_ctx_logits(e->ctx, q->row0), &e->dist, err);
    *a = 0;
    for (int i = 0; i < n && st == NX_OK; i++) {
        bool ok = false;
        nx_token rep = -1;
        st = nx_sampler_spec_accept(q->ch, &e->dist, q->drafts[i], NULL, &ok, &rep, err);
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

static void stop_all(nx_spec_engine *e) {
    for (int s = 0; s < e->n_seq; s++) e->seqs[s].active = false;
}

nx_status nx_spec_engine_step(nx_spec_engine *e, nx_error *err) {
    if (!e) return nx_fail(err, NX_ERR_INVALID_ARG, "spec engine: step: no engine");
    int n_act = 0;
    for (int s = 0; s < e->n_seq; s++) n_act += e->seqs[s].active;
    if (!n_act) return NX_OK;
    const double t0 = nx_spec_time_now();
    /* 1. k per sequence */
    int n_req = 0;
    for (int s = 0; s < e->n_seq; s++) {
        eng_seq *q = &e->seqs[s];
        if (!q->active) continue;
        int k = 0;
        if (e->drafter) {
            k = nx_spec_policy_next_k(&q->pol, &e->costs);
            const int room = e->n_ctx - q->P - 1;
            if (k > room) k = room;
            if (q->n_predict > 0) {
                const int left = q->n_predict - q->n_out - e->p.budget_slack;
                if (k > left) k = left;
            }
            if (k > e->p.spec.draft_max) k = e->p.spec.draft_max;
            if (k < 0) k = 0;
        }
        q->k = k;
        nx_draft_req *r = &q->req;
        memset(r, 0, sizeof *r);
        r->n = 0;
        r->stage = -1;
        if (k > 0) {
            r->seq = s;
            r->pos = q->P;
            r->id_last = q->id_last;
            r->k_max = k;
            r->p_min = e->p.spec.p_min;
            r->tok = q->drafts;
            r->p = q->dp;
            e->reqs[n_req] = *r;
            e->req_seq[n_req++] = s;
        }
    }
    /* 2. draft: one call for every sequence */
    nx_status st = NX_OK;
    double t_draft = 0, t_sync = 0;
    if (n_req) {
        /* Pending drafter updates from plain rounds are not drafting: time them apart, so the
         * policy's per-step draft cost is not inflated after rounds without drafts. */
        st = nx_drafter_sync(e->drafter, err);
        if (st != NX_OK) { stop_all(e); return nx_error_prefix(err, "spec engine: drafter sync"); }
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
            if (steps > 0) nx_spec_policy_observe_draft_cost(&q->pol, t_draft * q->req.n / steps, q->req.n);
            if (e->trace) {
                const char *src = q->req.stage >= 0 && q->req.stage < e->n_stages ? e->stage_names[q->req.stage] : NULL;
                nx_spec_trace_draft(e->trace, e->req_seq[i], q->P, q->k, src, q->drafts, q->dp, q->req.n, NULL);
            }
        }
    }
    /* 3. verify: one batch for every sequence */
    const double t1 = nx_spec_time_now();
    nx_batch_clear(e->batch);
    nx_batch_set_snapshots(e->batch, true);
    for (int s = 0; s < e->n_seq; s++) {
        eng_seq *q = &e->seqs[s];
        if (!q->active) continue;
        q->in_round = true;
        q->row0 = nx_batch_size(e->batch);
        nx_batch_add(e->batch, q->id_last, q->P, s, true);
        for (int i = 0; i < q->req.n; i++) nx_batch_add(e->batch, q->drafts[i], q->P + 1 + i, s, true);
    }
    const int n_rows = nx_batch_size(e->batch);
    if (nx_decode(e->ctx, e->batch) != NX_OK) {
        stop_all(e);
        return decode_err(err, "spec engine: verify");
    }
    const double t2 = nx_spec_time_now(), t_verify = t2 - t1;
    if (e->p.observe_costs && n_rows <= NX_SPEC_VERIFY_ROWS_MAX) nx_spec_costs_observe(&e->costs, n_rows, t_verify, NULL);
    if (e->drafter) {
        nx_target_rows rows = {
            .kind = NX_ROWS_VERIFY, .n = n_rows, .tok = e->batch->tok, .pos = e->batch->pos, .seq = e->batch->seq,
            .hidden = nx_ctx_hidden(e->ctx, 0), .n_embd = e->E, .ctx = e->ctx,
        };
        if ((st = nx_drafter_process(e->drafter, &rows, err)) != NX_OK) {
            stop_all(e);
            return nx_error_prefix(err, "spec engine: drafter");
        }
    }
    /* 4-5. accept and commit, per sequence */
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
        for (int i = 0; i < a; i++) {
            e->ids[i] = q->drafts[i];
            nx_sampler_accept(q->ch, q->drafts[i], NULL);
        }
        e->ids[a] = tok;
        nx_sampler_accept(q->ch, tok, NULL);
        nx_spec_stats_round(&q->st, q->req.stage, n, a);
        nx_spec_stats_round(&e->total, q->req.stage, n, a);
        nx_spec_policy_observe(&q->pol, n, a);
        bool ended = false;
        if ((st = emit(q, e->ids, a + 1, &ended, err)) != NX_OK) break;
        const nx_pos P = q->P;
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
    if (st != NX_OK) {
        stop_all(e);
        return nx_error_prefix(err, "spec engine");
    }
    const double t3 = nx_spec_time_now(), t_other = t3 - t2 + t_sync;
    for (int s = 0; s < e->n_seq; s++) {
        eng_seq *q = &e->seqs[s];
        if (q->in_round)   /* this round's wall time, shared by the sequences that took part */
            nx_spec_stats_add_time(&q->st, t_draft / n_act, t_verify / n_act, t_other / n_act);
        q->in_round = false;
    }
    nx_spec_stats_add_time(&e->total, t_draft, t_verify, t_other);
    return NX_OK;
}

/* ===== queries ===== */

int nx_spec_engine_n_active(const nx_spec_engine *e) {
    int n = 0;
    for (int s = 0; e && s < e->n_seq; s++) n += e->seqs[s].active;
    return n;
}

bool nx_spec_engine_active(const nx_spec_engine *e, nx_seq_id seq) {
    return e && seq >= 0 && seq < e->n_seq && e->seqs[seq].active;
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
    seq_clear(&e->seqs[seq]);
    nx_seq_rm(e->ctx, seq, -1, -1);
}

const nx_spec_stats *nx_spec_engine_stats(const nx_spec_engine *e, nx_seq_id seq) {
    if (!e || seq < 0 || seq >= e->n_seq || !e->seqs[seq].used) return NULL;
    return &e->seqs[seq].st;
}

const nx_spec_stats *nx_spec_engine_stats_total(const nx_spec_engine *e) { return e ? &e->total : NULL; }
const nx_spec_costs *nx_spec_engine_costs(const nx_spec_engine *e) { return e ? &e->costs : NULL; }
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
