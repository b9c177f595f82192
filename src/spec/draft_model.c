/*
 * draft_model.c — the `draft` drafter (contract: draft_model.h): a separate draft model with its
 * own context, fused k-step drafting for every sequence, lazy commits, rollback on rejection,
 * and the vocabulary compatibility check shared with the Gemma 4 assistant.
 * Never: calls a kernel (the draft model's architecture computes), prints, allocates after
 * creation.
 */
#include "spec/draft_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ctx.h"
#include "kv.h"
#include "model.h"
#include "spec/policy.h"

/* ===== vocabulary compatibility ===== */

static int64_t gguf_int_or(const nx_gguf *g, const char *key, int64_t dflt) {
    int64_t v;
    return nx_gguf_get_int(g, key, &v) ? v : dflt;
}

nx_status nx_spec_vocab_check(const nx_gguf *tg, int nv_t, const nx_gguf *dg, int nv_d, const char *what,
                              nx_error *err) {
    const int diff = nv_t > nv_d ? nv_t - nv_d : nv_d - nv_t;
    if (diff > NX_SPEC_VOCAB_MAX_SIZE_DIFF)
        return nx_fail(err, NX_ERR_UNSUPPORTED, "%s: vocabulary of %d tokens, the target has %d (at most %d apart)",
                       what, nv_d, nv_t, NX_SPEC_VOCAB_MAX_SIZE_DIFF);
    const int64_t kt = nx_gguf_find_key(tg, "tokenizer.ggml.tokens"), kd = nx_gguf_find_key(dg, "tokenizer.ggml.tokens");
    if (kt < 0 || kd < 0) return NX_OK;   /* no tokenizer metadata on one side: sizes only */
    const char *mt = nx_gguf_get_str(tg, "tokenizer.ggml.model", NULL), *md = nx_gguf_get_str(dg, "tokenizer.ggml.model", NULL);
    if (mt && md && strcmp(mt, md))
        return nx_fail(err, NX_ERR_UNSUPPORTED, "%s: tokenizer model '%s', the target's is '%s'", what, md, mt);
    const uint64_t n = nx_gguf_arr_n(tg, kt) < nx_gguf_arr_n(dg, kd) ? nx_gguf_arr_n(tg, kt) : nx_gguf_arr_n(dg, kd);
    for (uint64_t j = NX_SPEC_VOCAB_CHECK_START; j < n && j < (uint64_t)(nv_t < nv_d ? nv_t : nv_d); j++) {
        uint64_t la = 0, lb = 0;
        const char *a = nx_gguf_arr_str(tg, kt, j, &la), *b = nx_gguf_arr_str(dg, kd, j, &lb);
        if (!a || !b || la != lb || memcmp(a, b, la))
            return nx_fail(err, NX_ERR_UNSUPPORTED, "%s: vocabulary differs from the target's: token %llu is '%.*s' in "
                           "the target but '%.*s' in the draft", what, (unsigned long long)j, (int)(la > 64 ? 64 : la),
                           a ? a : "", (int)(lb > 64 ? 64 : lb), b ? b : "");
    }
    static const char *const special[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    for (int i = 0; i < 2; i++) {
        const int64_t a = gguf_int_or(tg, special[i], -1), b = gguf_int_or(dg, special[i], -1);
        if (a != b)
            return nx_fail(err, NX_ERR_UNSUPPORTED, "%s: %s is %lld, the target's is %lld", what, special[i] + 15,
                           (long long)b, (long long)a);
    }
    return NX_OK;
}

/* ===== the drafter ===== */

typedef struct dm_seq {
    bool begun, lost;            /* lost: no drafting until the next begin */
    int committed;               /* committed positions (tok[0..committed)) */
    nx_token *tok;               /* [cap_tok] committed tokens */
    int vn;                      /* pending verify rows */
    nx_pos vpos;
    nx_token vtok[NX_SPEC_DRAFT_CAP + 1];
    bool has_rec;                /* rec = the recurrent state after vpos + 1 positions (this round) */
    float *rec;                  /* [R] */
} dm_seq;

typedef struct dm_drafter {
    nx_drafter base;
    nx_model *m;                 /* owned */
    nx_ctx *c;                   /* owned */
    int V, Vt, n_ctx, cap_tok;   /* draft vocab, target vocab, draft context, committed-token room */
    int64_t R;                   /* recurrent floats per sequence (0: attention only) */
    dm_seq *s;
    nx_batch *b;
    int b_cap;
    int *row;                    /* per request: its batch row in this step (-1: none) */
    bool *on;
    float *lg;                   /* [Vt] a draft row's logits over the target's ids (sampled drafts) */
} dm_drafter;

static dm_drafter *dm_of(nx_drafter *d) { return (dm_drafter *)d; }

static int kv_len(dm_drafter *D, nx_seq_id s) { return nx_seq_pos_next(D->c, s); }

static void seq_reset(dm_drafter *D, nx_seq_id s) {
    dm_seq *q = &D->s[s];
    nx_seq_rm(D->c, s, -1, -1);
    q->committed = 0;
    q->vn = 0;
    q->lost = false;
    q->has_rec = false;
}

/* Mark s lost when its next row cannot be decoded (unknown token, beyond the draft context). */
static bool row_ok(dm_drafter *D, nx_seq_id s, nx_token t, nx_pos p) {
    if (t < 0 || t >= D->V || p >= D->n_ctx) D->s[s].lost = true;
    return !D->s[s].lost;
}

static nx_status decode(dm_drafter *D, nx_error *err) {
    if (nx_batch_size(D->b) == 0) return NX_OK;
    nx_status st = nx_decode(D->c, D->b);
    nx_batch_clear(D->b);
    /* a failed decode resets the batch's sequences: they start over from their committed tokens */
    return st != NX_OK ? nx_fail(err, NX_ERR_INTERNAL, "draft model: decode: %s", nx_last_error()) : NX_OK;
}

/* Add every sequence's committed rows the draft context does not hold yet, decoding full
 * batches as they fill; leaves the last partial batch for the caller. */
static nx_status add_queues(dm_drafter *D, nx_error *err) {
    for (int s = 0; s < D->base.n_seq; s++) {
        dm_seq *q = &D->s[s];
        if (!q->begun || q->lost) continue;
        for (int p = kv_len(D, s); p < q->committed; p++) {
            if (!row_ok(D, s, q->tok[p], p)) break;
            if (nx_batch_size(D->b) == D->b_cap) {
                nx_status st = decode(D, err);
                if (st != NX_OK) return st;
                p = kv_len(D, s);   /* == p after a successful decode */
            }
            nx_batch_add(D->b, q->tok[p], p, s, false);
        }
    }
    return NX_OK;
}

static nx_status dm_sync(nx_drafter *d, nx_error *err) {
    dm_drafter *D = dm_of(d);
    nx_status st = add_queues(D, err);
    return st != NX_OK ? st : decode(D, err);
}

static nx_status dm_begin(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, nx_error *err) {
    (void)prompt; (void)n_prompt; (void)err;
    dm_drafter *D = dm_of(d);
    seq_reset(D, seq);
    D->s[seq].begun = true;
    return NX_OK;
}

/* The draft context keeps the rows it shares with the prompt's first keep tokens; the rest of
 * the prefix is queued. A recurrent state cannot be cut back: it stays only when nothing goes. */
static nx_status dm_begin_keep(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, int keep,
                               const float *hidden_prev, nx_error *err) {
    (void)n_prompt; (void)hidden_prev; (void)err;
    dm_drafter *D = dm_of(d);
    dm_seq *q = &D->s[seq];
    if (keep > D->cap_tok) keep = D->cap_tok;
    int have = q->begun && !q->lost ? kv_len(D, seq) : 0, m = 0;
    if (have > q->committed) have = q->committed;
    while (m < have && m < keep && q->tok[m] == prompt[m]) m++;
    if (m < kv_len(D, seq)) {
        if (D->R > 0 || m == 0 || nx_seq_rm(D->c, seq, m, -1) != NX_OK) {
            nx_seq_rm(D->c, seq, -1, -1);
            m = 0;
        }
    }
    memcpy(q->tok, prompt, (size_t)keep * sizeof *prompt);
    q->committed = keep;
    q->begun = true;
    q->lost = false;
    q->vn = 0;
    q->has_rec = false;
    return NX_OK;
}

static nx_status dm_process(nx_drafter *d, const nx_target_rows *rows, nx_error *err) {
    dm_drafter *D = dm_of(d);
    for (int r = 0; r < rows->n; r++)
        if (!D->s[rows->seq[r]].begun)
            return nx_fail(err, NX_ERR_INVALID_ARG, "draft: process: sequence %d was not begun", rows->seq[r]);
    if (rows->kind == NX_ROWS_VERIFY) {
        for (int r = 0; r < rows->n; r++) {
            dm_seq *q = &D->s[rows->seq[r]];
            if (r == 0 || rows->seq[r - 1] != rows->seq[r]) {
                if (rows->pos[r] != q->committed)
                    return nx_fail(err, NX_ERR_INVALID_ARG, "draft: verify rows of sequence %d start at %d, but %d "
                                   "positions are committed", rows->seq[r], rows->pos[r], q->committed);
                q->vn = 0;
                q->vpos = rows->pos[r];
            }
            if (q->vn > NX_SPEC_DRAFT_CAP || rows->pos[r] != q->vpos + q->vn)
                return nx_fail(err, NX_ERR_INVALID_ARG, "draft: verify rows of sequence %d: bad row at position %d",
                               rows->seq[r], rows->pos[r]);
            q->vtok[q->vn++] = rows->tok[r];
        }
        return NX_OK;
    }
    for (int r = 0; r < rows->n; r++) {
        const nx_seq_id s = rows->seq[r];
        dm_seq *q = &D->s[s];
        if (rows->pos[r] == 0 && q->committed != 0) seq_reset(D, s);   /* a restart */
        if (rows->pos[r] != q->committed)
            return nx_fail(err, NX_ERR_INVALID_ARG, "draft: prompt row of sequence %d at position %d, but %d positions "
                           "are committed", s, rows->pos[r], q->committed);
        if (q->committed < D->cap_tok) q->tok[q->committed] = rows->tok[r];
        else q->lost = true;
        q->committed++;
        q->vn = 0;
    }
    return NX_OK;
}

static nx_status dm_accept(nx_drafter *d, nx_seq_id seq, int a, nx_error *err) {
    dm_drafter *D = dm_of(d);
    dm_seq *q = &D->s[seq];
    if (!q->begun) return nx_fail(err, NX_ERR_INVALID_ARG, "draft: accept: sequence %d was not begun", seq);
    if (q->vn < a + 1)
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft: accept: sequence %d: %d accepted but %d verify rows pending", seq,
                       a, q->vn);
    const int P = q->vpos, end = P + a + 1;
    for (int i = 0; i <= a; i++) {
        if (P + i < D->cap_tok) q->tok[P + i] = q->vtok[i];
        else q->lost = true;
    }
    q->committed = end;
    q->vn = 0;
    if (kv_len(D, seq) > end) {   /* the draft context holds rejected drafts */
        nx_status st = NX_ERR_INTERNAL;
        if (D->R == 0) st = nx_seq_rm(D->c, seq, end, -1);
        else if (q->has_rec) st = nx_kv_seq_restore(D->c->kv, seq, P + 1, q->rec, NULL);
        if (st != NX_OK) nx_seq_rm(D->c, seq, -1, -1);   /* start over from the committed tokens */
    }
    q->has_rec = false;
    return NX_OK;
}

/* Argmax over the ids both vocabularies share, and its softmax probability. */
static void pick(const dm_drafter *D, const float *lg, nx_token *tok, float *prob) {
    const int n = D->V < D->Vt ? D->V : D->Vt;
    int am = 0;
    for (int v = 1; v < n; v++)
        if (lg[v] > lg[am]) am = v;
    float mx = lg[am];
    for (int v = n; v < D->V; v++)
        if (lg[v] > mx) mx = lg[v];
    double sum = 0;
    for (int v = 0; v < D->V; v++) sum += exp((double)lg[v] - (double)mx);
    *tok = am;
    *prob = (float)(exp((double)lg[am] - (double)mx) / sum);
}

static nx_status dm_draft(nx_drafter *d, nx_draft_req *reqs, int n_reqs, nx_error *err) {
    dm_drafter *D = dm_of(d);
    for (int i = 0; i < n_reqs; i++) {
        const nx_seq_id s = reqs[i].seq;
        dm_seq *q = &D->s[s];
        if (!q->begun) return nx_fail(err, NX_ERR_INVALID_ARG, "draft: draft: sequence %d was not begun", s);
        if (reqs[i].pos != q->committed)
            return nx_fail(err, NX_ERR_INVALID_ARG, "draft: draft: sequence %d drafts at position %d, but %d positions "
                           "are committed", s, reqs[i].pos, q->committed);
        if (kv_len(D, s) > q->committed) nx_seq_rm(D->c, s, -1, -1);   /* a draft without accept: start over */
        q->has_rec = false;
    }
    /* step 0: the queued committed rows, then id_last@P of every request */
    nx_status st = add_queues(D, err);
    if (st != NX_OK) return st;
    int n_on = 0;
    for (int i = 0; i < n_reqs; i++) {
        nx_draft_req *r = &reqs[i];
        dm_seq *q = &D->s[r->seq];
        D->on[i] = r->k_max > 0 && !q->lost && row_ok(D, r->seq, r->id_last, r->pos);
        n_on += D->on[i];
    }
    if (nx_batch_size(D->b) + n_on > D->b_cap && (st = decode(D, err)) != NX_OK) return st;
    for (int i = 0; i < n_reqs; i++) {
        D->row[i] = -1;
        if (!D->on[i]) continue;
        D->row[i] = nx_batch_size(D->b);
        nx_batch_add(D->b, reqs[i].id_last, reqs[i].pos, reqs[i].seq, true);
    }
    for (int step = 0; n_on > 0; step++) {
        const int nb = nx_batch_size(D->b);
        if (nb == 0) break;
        if ((st = nx_decode(D->c, D->b)) != NX_OK) {
            nx_batch_clear(D->b);
            return nx_fail(err, NX_ERR_INTERNAL, "draft model: decode: %s", nx_last_error());
        }
        nx_batch_clear(D->b);
        n_on = 0;
        for (int i = 0; i < n_reqs; i++) {
            if (D->row[i] < 0) continue;
            nx_draft_req *r = &reqs[i];
            dm_seq *q = &D->s[r->seq];
            if (step == 0 && D->R > 0) {   /* rollback point: the state after P + 1 positions */
                nx_kv_rec_save(D->c->kv, r->seq, q->rec);
                q->has_rec = true;
            }
            nx_token t;
            float pr;
            if (r->sampler) {   /* d ~ q = the request's chain over the draft model's logits */
                const float *lg = nx_ctx_logits(D->c, D->row[i]);
                const int n = D->V < D->Vt ? D->V : D->Vt;
                memcpy(D->lg, lg, (size_t)n * sizeof *lg);
                for (int v = n; v < D->Vt; v++) D->lg[v] = -INFINITY;
                nx_sample_dist *q = &r->q[r->n];
                if ((st = nx_sampler_dist(r->sampler, D->lg, q, err)) != NX_OK ||
                    (st = nx_sampler_sample_dist(r->sampler, q, &t, err)) != NX_OK)
                    return nx_error_prefix(err, "draft: sampling");
                pr = nx_sample_dist_prob(q, t);
            } else {
                pick(D, nx_ctx_logits(D->c, D->row[i]), &t, &pr);
            }
            const nx_pmin_verdict v = nx_spec_pmin_step(step, pr, r->p_min);
            D->row[i] = -1;
            if (v == NX_PMIN_DROP_STOP) continue;
            r->tok[r->n] = t;
            if (r->p) r->p[r->n] = pr;
            r->n++;
            r->stage = 0;
            if (r->sampler) {
                r->sampled = true;
                nx_sampler_accept(r->sampler, t, NULL);   /* penalties of the next step see it */
            }
            if (v != NX_PMIN_KEEP || r->n >= r->k_max || r->pos + r->n >= D->n_ctx) continue;
            D->row[i] = nx_batch_size(D->b);
            nx_batch_add(D->b, t, r->pos + r->n, r->seq, true);
            n_on++;
        }
    }
    return NX_OK;
}

static void dm_free(nx_drafter *d) {
    if (!d) return;
    dm_drafter *D = dm_of(d);
    for (int s = 0; D->s && s < d->n_seq; s++) {
        free(D->s[s].tok);
        free(D->s[s].rec);
    }
    free(D->s);
    free(D->row);
    free(D->on);
    free(D->lg);
    nx_batch_free(D->b);
    nx_ctx_free(D->c);
    nx_model_free(D->m);
    free(D);
}

static const nx_drafter_ops dm_ops = {
    .name = "draft", .begin = dm_begin, .process = dm_process, .draft = dm_draft, .accept = dm_accept,
    .free = dm_free, .sync = dm_sync, .begin_keep = dm_begin_keep, .keep_any = true,
};

nx_draft_model_opts nx_draft_model_default_opts(void) {
    return (nx_draft_model_opts){.n_ctx = 0, .n_threads = 0, .type_k = NX_CACHE_F16, .type_v = NX_CACHE_F16};
}

nx_status nx_draft_model_create(nx_ctx *target, const char *path, const nx_draft_model_opts *opts, int n_seq,
                                nx_drafter **out, nx_error *err) {
    if (!out) return nx_fail(err, NX_ERR_INVALID_ARG, "draft: out is NULL");
    *out = NULL;
    if (!target || !path) return nx_fail(err, NX_ERR_INVALID_ARG, "draft: no target context or no --model-draft file");
    if (n_seq < 1 || n_seq > nx_ctx_n_seq_max(target))
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft: %d sequences, the target context has %d", n_seq,
                       nx_ctx_n_seq_max(target));
    nx_draft_model_opts o = opts ? *opts : nx_draft_model_default_opts();
    if (o.n_ctx < 0 || o.n_threads < 0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft: -cd %d / -td %d must be >= 0", o.n_ctx, o.n_threads);
    dm_drafter *D = calloc(1, sizeof *D);
    if (!D) return nx_fail(err, NX_ERR_NOMEM, "draft: out of memory");
    D->base.ops = &dm_ops;
    D->base.n_seq = n_seq;
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = o.n_threads ? o.n_threads : target->params.n_threads;
    nx_status st = nx_model_load(path, &mp, &D->m);
    if (st != NX_OK) {
        st = nx_fail(err, st, "draft model %s: %s", path, nx_last_error());
        goto fail;
    }
    if (!nx_model_can_run(D->m)) {
        st = nx_fail(err, NX_ERR_UNSUPPORTED, "draft model %s: architecture '%s' has no forward pass in nextn", path,
                     nx_model_arch(D->m));
        goto fail;
    }
    D->V = nx_model_n_vocab(D->m);
    D->Vt = nx_model_n_vocab(target->model);
    if ((st = nx_spec_vocab_check(target->model->gguf, D->Vt, D->m->gguf, D->V, path, err)) != NX_OK) goto fail;
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = o.n_ctx ? o.n_ctx : nx_ctx_n_ctx(target);
    cp.n_seq_max = n_seq;
    cp.n_ubatch = target->params.n_ubatch;
    cp.n_threads = mp.n_threads;
    cp.type_k = o.type_k;
    cp.type_v = o.type_v;
    if (nx_ctx_create(D->m, &cp, &D->c) != NX_OK) {
        st = nx_fail(err, NX_ERR_INVALID_ARG, "draft model %s: context: %s", path, nx_last_error());
        goto fail;
    }
    D->n_ctx = nx_ctx_n_ctx(D->c);
    D->cap_tok = nx_ctx_n_ctx(target) + 1;
    D->R = nx_kv_rec_floats(D->c->kv);
    D->b_cap = D->c->params.n_ubatch + n_seq;
    D->b = nx_batch_create(D->b_cap);
    D->s = calloc((size_t)n_seq, sizeof *D->s);
    D->row = malloc((size_t)n_seq * sizeof *D->row);
    D->on = malloc((size_t)n_seq * sizeof *D->on);
    D->lg = malloc((size_t)D->Vt * sizeof *D->lg);
    bool ok = D->b && D->s && D->row && D->on && D->lg;
    for (int s = 0; ok && s < n_seq; s++) {
        D->s[s].tok = malloc((size_t)D->cap_tok * sizeof(nx_token));
        D->s[s].rec = D->R ? malloc((size_t)D->R * sizeof(float)) : NULL;
        ok = D->s[s].tok && (D->s[s].rec || !D->R);
    }
    if (!ok) {
        st = nx_fail(err, NX_ERR_NOMEM, "draft: out of memory for %d sequences", n_seq);
        goto fail;
    }
    *out = &D->base;
    return NX_OK;
fail:
    dm_free(&D->base);
    return st;
}

const nx_model *nx_draft_model_model(const nx_drafter *d) {
    return d && d->ops == &dm_ops ? ((const dm_drafter *)d)->m : NULL;
}

nx_ctx *nx_draft_model_ctx(nx_drafter *d) { return d && d->ops == &dm_ops ? dm_of(d)->c : NULL; }
