/*
 * mtp.c — the `mtp` drafter (contract: mtp.h) over the qwen35 MTP head (arch/qwen35_mtp.h).
 *
 * The drafter never runs the head inside accept(): committed rows are queued and written together
 * with the next draft's first step (one head batch for every sequence), which keeps the number of
 * head calls per round at k whatever the number of sequences.
 * Must never: allocate in the per-round path (every buffer is sized at creation), print.
 */
#include "spec/mtp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spec/policy.h"

#define MTP_QCAP (2 * (NX_SPEC_DRAFT_CAP + 1)) /* queued committed rows per sequence before a flush */

/* ===== the drafter ===== */

typedef struct mtp_seq {
    bool begun;
    int committed;             /* positions committed (= the next round's P) */
    float *h_last;             /* [E] trunk hidden at committed - 1 (zeros when committed == 0) */
    int qn;                    /* queued rows: positions kv_len .. kv_len + qn - 1 */
    nx_token *q_tok;           /* [MTP_QCAP] */
    float *q_hid;              /* [MTP_QCAP][E] */
    int vn;                    /* pending verify rows (0: none) */
    nx_pos vpos;
    nx_token *v_tok;           /* [NX_SPEC_DRAFT_CAP + 1] */
    float *v_hid;              /* [NX_SPEC_DRAFT_CAP + 1][E] */
} mtp_seq;

typedef struct mtp_drafter {
    nx_drafter base;
    nx_mtp_head *h;
    int E, V, n_ctx;
    mtp_seq *seqs;
    float *seq_mem;
    /* gather batch for the head (rows_cap rows) */
    int g_n;
    nx_token *g_tok;
    nx_pos *g_pos;
    nx_seq_id *g_seq;
    bool *g_want;
    int *g_req;                /* wanted row -> request index */
    float *g_hid;              /* [rows_cap][E] */
    int *g_am;
    float *g_ap;
    /* per request (n_seq at most) */
    float *r_h;                /* [n_seq][E] chained hidden */
    int *r_am;
    float *r_ap;
    bool *r_on;
    nx_draft_req *cur;         /* the requests of the draft call in progress (NULL outside one) */
    float *s_lg;               /* [n_seq][V] full-head logits of sampled requests' rows */
} mtp_drafter;

static const nx_drafter_ops mtp_ops;

static void seq_reset(mtp_drafter *md, mtp_seq *q, nx_seq_id seq) {
    q->committed = 0;
    q->qn = 0;
    q->vn = 0;
    memset(q->h_last, 0, (size_t)md->E * sizeof(float));
    nx_mtp_head_seq_trim(md->h, seq, 0);
}

/* Run the gathered rows; wanted rows deliver argmax / prob / h_mtp to their request. */
/* A draw from q = the request's chain over a full-head logits row (sampled drafts), or the
 * argmax and its softmax probability for a greedy request in the same batch. */
static nx_status pick_row(mtp_drafter *md, nx_draft_req *r, const float *lg, int *tok, float *prob, nx_error *err) {
    if (r->sampler) {
        nx_sample_dist *q = &r->q[r->n];
        nx_status st = nx_sampler_dist(r->sampler, lg, q, err);
        nx_token t = 0;
        if (st == NX_OK) st = nx_sampler_sample_dist(r->sampler, q, &t, err);
        *tok = t;
        *prob = nx_sample_dist_prob(q, t);
        return st;
    }
    int am = 0;
    for (int v = 1; v < md->V; v++)
        if (lg[v] > lg[am]) am = v;
    double sum = 0;
    for (int v = 0; v < md->V; v++) sum += exp((double)lg[v] - (double)lg[am]);
    *tok = am;
    *prob = (float)(1.0 / sum);
    return NX_OK;
}

static nx_status g_flush(mtp_drafter *md, nx_error *err) {
    if (!md->g_n) return NX_OK;
    bool sampled = false;
    for (int r = 0; md->cur && r < md->g_n; r++) sampled |= md->g_want[r] && md->cur[md->g_req[r]].sampler;
    nx_status st = sampled ? nx_mtp_head_draft_logits(md->h, md->g_n, md->g_tok, md->g_pos, md->g_seq, md->g_hid,
                                                      md->g_want, md->s_lg, err)
                           : nx_mtp_head_draft_rows(md->h, md->g_n, md->g_tok, md->g_pos, md->g_seq, md->g_hid,
                                                    md->g_want, md->g_am, md->g_ap, err);
    if (st != NX_OK) return st;
    for (int r = 0, o = 0; r < md->g_n; r++) {
        if (!md->g_want[r]) continue;
        const int i = md->g_req[r];
        if (sampled) {
            st = pick_row(md, &md->cur[i], md->s_lg + (size_t)o * md->V, &md->g_am[o], &md->g_ap[o], err);
            if (st != NX_OK) return st;
        }
        md->r_am[i] = md->g_am[o];
        md->r_ap[i] = md->g_ap[o];
        memcpy(md->r_h + (size_t)i * md->E, nx_mtp_head_hidden(md->h) + (size_t)o * md->E, (size_t)md->E * sizeof(float));
        o++;
    }
    md->g_n = 0;
    return NX_OK;
}

static nx_status g_push(mtp_drafter *md, nx_token tok, nx_pos pos, nx_seq_id seq, const float *hid, int req,
                        nx_error *err) {
    if (md->g_n == nx_mtp_head_max_rows(md->h)) {
        nx_status st = g_flush(md, err);
        if (st != NX_OK) return st;
    }
    const int r = md->g_n++;
    md->g_tok[r] = tok;
    md->g_pos[r] = pos;
    md->g_seq[r] = seq;
    md->g_want[r] = req >= 0;
    md->g_req[r] = req;
    memcpy(md->g_hid + (size_t)r * md->E, hid, (size_t)md->E * sizeof(float));
    return NX_OK;
}

/* Push every sequence's queued committed rows (the caller flushes). */
static nx_status push_queues(mtp_drafter *md, nx_error *err) {
    for (int s = 0; s < md->base.n_seq; s++) {
        mtp_seq *q = &md->seqs[s];
        if (!q->qn) continue;
        const int p0 = nx_mtp_head_seq_len(md->h, s);
        for (int i = 0; i < q->qn; i++) {
            nx_status st = g_push(md, q->q_tok[i], p0 + i, s, q->q_hid + (size_t)i * md->E, -1, err);
            if (st != NX_OK) return st;
        }
        q->qn = 0;
    }
    return NX_OK;
}

static nx_status flush_queues(mtp_drafter *md, nx_error *err) {
    nx_status st = push_queues(md, err);
    return st != NX_OK ? st : g_flush(md, err);
}

static nx_status md_begin(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, nx_error *err) {
    (void)prompt; (void)n_prompt; (void)err;
    mtp_drafter *md = (mtp_drafter *)d;
    mtp_seq *q = &md->seqs[seq];
    seq_reset(md, q, seq);
    q->begun = true;
    return NX_OK;
}

/* Prefix reuse: the head KV rows and queued committed rows below keep are what a fresh warm-up
 * over the same tokens would hold (rows depend only on their token, the trunk hidden before and
 * the rows below), so they stay; the rest goes, and h_last becomes the trunk hidden at keep - 1. */
static nx_status md_begin_keep(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, int keep,
                               const float *hidden_prev, nx_error *err) {
    (void)prompt; (void)n_prompt;
    mtp_drafter *md = (mtp_drafter *)d;
    mtp_seq *q = &md->seqs[seq];
    if (!hidden_prev) return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: begin: keeping a prefix needs the trunk's hidden row");
    const int kv_len = nx_mtp_head_seq_len(md->h, seq);
    if (!q->begun || keep > q->committed || keep > kv_len + q->qn)
        return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: begin: sequence %d keeps %d positions, but %d are committed",
                       seq, keep, q->begun ? q->committed : 0);
    if (keep <= kv_len) {
        nx_mtp_head_seq_trim(md->h, seq, keep);
        q->qn = 0;
    } else {
        q->qn = keep - kv_len;     /* the queue holds positions kv_len.. in order */
    }
    q->committed = keep;
    q->vn = 0;
    memcpy(q->h_last, hidden_prev, (size_t)md->E * sizeof(float));
    return NX_OK;
}

static nx_status md_process(nx_drafter *d, const nx_target_rows *rows, nx_error *err) {
    mtp_drafter *md = (mtp_drafter *)d;
    const int E = md->E;
    if (rows->n == 0) return NX_OK;
    if (!rows->hidden || rows->n_embd != E)
        return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: process: needs the target's hidden rows (%d values each, got %s%d)",
                       E, rows->hidden ? "" : "none, ", rows->n_embd);
    for (int r = 0; r < rows->n; r++) {
        if (!md->seqs[rows->seq[r]].begun)
            return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: process: sequence %d was not begun", rows->seq[r]);
        if (rows->tok[r] >= md->V)
            return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: process: token %d outside the vocabulary", rows->tok[r]);
    }
    if (rows->kind == NX_ROWS_VERIFY) {
        for (int r = 0; r < rows->n; r++) {
            mtp_seq *q = &md->seqs[rows->seq[r]];
            const bool first = r == 0 || rows->seq[r - 1] != rows->seq[r];
            if (first) {
                if (rows->pos[r] != q->committed)
                    return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: verify rows of sequence %d start at %d, but %d "
                                   "positions are committed", rows->seq[r], rows->pos[r], q->committed);
                q->vn = 0;
                q->vpos = rows->pos[r];
            }
            if (q->vn > NX_SPEC_DRAFT_CAP || rows->pos[r] != q->vpos + q->vn)
                return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: verify rows of sequence %d: bad row at position %d",
                               rows->seq[r], rows->pos[r]);
            q->v_tok[q->vn] = rows->tok[r];
            memcpy(q->v_hid + (size_t)q->vn * E, rows->hidden + (size_t)r * E, (size_t)E * sizeof(float));
            q->vn++;
        }
        return NX_OK;
    }
    /* Prompt rows: committed at once. Queued rows go first so positions stay in order. */
    nx_status st = push_queues(md, err);
    for (int r = 0; r < rows->n && st == NX_OK; r++) {
        const nx_seq_id s = rows->seq[r];
        mtp_seq *q = &md->seqs[s];
        if (rows->pos[r] == 0 && q->committed != 0) {
            /* a restart: nothing of this sequence may stay in the gather batch */
            st = g_flush(md, err);
            if (st != NX_OK) break;
            seq_reset(md, q, s);
        }
        if (rows->pos[r] != q->committed) {
            st = nx_fail(err, NX_ERR_INVALID_ARG, "mtp: prompt row of sequence %d at position %d, but %d positions are "
                         "committed", s, rows->pos[r], q->committed);
            break;
        }
        st = g_push(md, rows->tok[r], rows->pos[r], s, q->h_last, -1, err);
        memcpy(q->h_last, rows->hidden + (size_t)r * E, (size_t)E * sizeof(float));
        q->committed++;
        q->vn = 0;
    }
    if (st == NX_OK) st = g_flush(md, err);
    if (st != NX_OK) md->g_n = 0;
    return st;
}

static nx_status md_accept(nx_drafter *d, nx_seq_id seq, int a, nx_error *err) {
    mtp_drafter *md = (mtp_drafter *)d;
    mtp_seq *q = &md->seqs[seq];
    const int E = md->E;
    if (!q->begun) return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: accept: sequence %d was not begun", seq);
    if (q->vn < a + 1)
        return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: accept: sequence %d: %d accepted but %d verify rows pending", seq, a,
                       q->vn);
    if (q->qn + a + 1 > MTP_QCAP) {
        nx_status st = flush_queues(md, err);
        if (st != NX_OK) return st;
    }
    const int P = q->vpos;
    const int kv_len = nx_mtp_head_seq_len(md->h, seq);
    /* Row P (id_last, h_{P-1}) is in the KV when this round drafted with the MTP head. */
    const bool have_p = q->qn == 0 && kv_len == P + 1;
    if (!have_p) {
        q->q_tok[q->qn] = q->v_tok[0];
        memcpy(q->q_hid + (size_t)q->qn * E, q->h_last, (size_t)E * sizeof(float));
        q->qn++;
    }
    for (int i = 1; i <= a; i++) {
        q->q_tok[q->qn] = q->v_tok[i];
        memcpy(q->q_hid + (size_t)q->qn * E, q->v_hid + (size_t)(i - 1) * E, (size_t)E * sizeof(float));
        q->qn++;
    }
    memcpy(q->h_last, q->v_hid + (size_t)a * E, (size_t)E * sizeof(float));
    q->committed = P + a + 1;
    q->vn = 0;
    return NX_OK;
}

static nx_status md_draft(nx_drafter *d, nx_draft_req *reqs, int n_reqs, nx_error *err) {
    mtp_drafter *md = (mtp_drafter *)d;
    nx_mtp_head *h = md->h;
    const int E = md->E;
    for (int i = 0; i < n_reqs; i++) {
        const nx_seq_id s = reqs[i].seq;
        mtp_seq *q = &md->seqs[s];
        if (!q->begun) return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: draft: sequence %d was not begun", s);
        if (reqs[i].pos != q->committed)
            return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: draft: sequence %d drafts at position %d, but %d positions "
                           "are committed", s, reqs[i].pos, q->committed);
        if (reqs[i].id_last >= md->V)
            return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: draft: token %d outside the vocabulary", reqs[i].id_last);
        /* a row P left by an earlier draft without accept is rewritten */
        if (q->qn == 0) nx_mtp_head_seq_trim(h, s, q->committed);
    }
    /* Step 0: every queued committed row + one row (id_last, h_{P-1}) at P per request. */
    md->cur = reqs;
    nx_status st = push_queues(md, err);
    for (int i = 0; i < n_reqs && st == NX_OK; i++) {
        nx_draft_req *r = &reqs[i];
        md->r_on[i] = r->k_max > 0 && r->pos < md->n_ctx;
        if (md->r_on[i]) st = g_push(md, r->id_last, r->pos, r->seq, md->seqs[r->seq].h_last, i, err);
    }
    if (st == NX_OK) st = g_flush(md, err);
    if (st != NX_OK) {
        md->g_n = 0;
        md->cur = NULL;
        return st;
    }
    for (int step = 0;; step++) {
        int active = 0;
        for (int i = 0; i < n_reqs; i++) {
            if (!md->r_on[i]) continue;
            nx_draft_req *r = &reqs[i];
            const nx_pmin_verdict v = nx_spec_pmin_step(step, md->r_ap[i], r->p_min);
            if (v != NX_PMIN_DROP_STOP) {
                r->tok[r->n] = md->r_am[i];
                if (r->p) r->p[r->n] = md->r_ap[i];
                r->n++;
                r->stage = 0;
                if (r->sampler) {
                    r->sampled = true;
                    nx_sampler_accept(r->sampler, md->r_am[i], NULL);   /* the next step's penalties */
                }
            }
            md->r_on[i] = v == NX_PMIN_KEEP && r->n < r->k_max && r->pos + r->n < md->n_ctx;
            active += md->r_on[i];
        }
        if (!active) break;
        /* Step s: (d_s, h_mtp of step s-1) at P + s for every request still drafting. */
        for (int i = 0; i < n_reqs && st == NX_OK; i++)
            if (md->r_on[i]) {
                nx_draft_req *r = &reqs[i];
                st = g_push(md, r->tok[r->n - 1], r->pos + r->n, r->seq, md->r_h + (size_t)i * E, i, err);
            }
        if (st == NX_OK) st = g_flush(md, err);
        if (st != NX_OK) {
            md->g_n = 0;
            break;
        }
    }
    md->cur = NULL;
    /* Draft rows are not kept; row P is real data (Decisions 3). */
    for (int i = 0; i < n_reqs; i++) nx_mtp_head_seq_trim(h, reqs[i].seq, reqs[i].pos + 1);
    return st;
}

static void md_free(nx_drafter *d) {
    mtp_drafter *md = (mtp_drafter *)d;
    if (!md) return;
    nx_mtp_head_free(md->h);
    for (int s = 0; md->seqs && s < md->base.n_seq; s++) {
        free(md->seqs[s].q_tok);
        free(md->seqs[s].v_tok);
    }
    free(md->seqs);
    free(md->seq_mem);
    free(md->g_tok); free(md->g_pos); free(md->g_seq); free(md->g_want); free(md->g_req); free(md->g_hid);
    free(md->g_am); free(md->g_ap);
    free(md->r_h); free(md->r_am); free(md->r_ap); free(md->r_on);
    free(md->s_lg);
    free(md);
}

/* Committed rows queue up between drafts (one head batch for many rows); sync runs them now. */
static nx_status md_sync(nx_drafter *d, nx_error *err) { return flush_queues((mtp_drafter *)d, err); }

static const nx_drafter_ops mtp_ops = {
    .name = "mtp", .begin = md_begin, .process = md_process, .draft = md_draft, .accept = md_accept, .free = md_free,
    .sync = md_sync, .begin_keep = md_begin_keep,
};

nx_status nx_mtp_drafter_create(nx_ctx *target, nx_drafter **out, nx_error *err) {
    return nx_mtp_drafter_create_opts(target, NULL, out, err);
}

nx_status nx_mtp_drafter_create_opts(nx_ctx *target, const nx_mtp_head_opts *opts, nx_drafter **out, nx_error *err) {
    if (!out) return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: out is NULL");
    *out = NULL;
    mtp_drafter *md = calloc(1, sizeof *md);
    if (!md) return nx_fail(err, NX_ERR_NOMEM, "mtp: out of memory");
    md->base.ops = &mtp_ops;
    nx_status st = nx_mtp_head_create_opts(target, opts, &md->h, err);
    if (st != NX_OK) {
        free(md);
        return st;
    }
    const int S = nx_mtp_head_n_seq(md->h), E = nx_mtp_head_n_embd(md->h), G = nx_mtp_head_max_rows(md->h);
    md->V = nx_mtp_head_n_vocab(md->h);
    md->n_ctx = nx_mtp_head_n_ctx(md->h);
    md->base.n_seq = S;
    md->E = E;
    const size_t per_seq = (size_t)E * (1 + MTP_QCAP + NX_SPEC_DRAFT_CAP + 1);
    md->seqs = calloc((size_t)S, sizeof *md->seqs);
    md->seq_mem = calloc((size_t)S * per_seq, sizeof(float));
    md->g_tok = malloc((size_t)G * sizeof(nx_token));
    md->g_pos = malloc((size_t)G * sizeof(nx_pos));
    md->g_seq = malloc((size_t)G * sizeof(nx_seq_id));
    md->g_want = malloc((size_t)G * sizeof(bool));
    md->g_req = malloc((size_t)G * sizeof(int));
    md->g_hid = malloc((size_t)G * E * sizeof(float));
    md->g_am = malloc((size_t)G * sizeof(int));
    md->g_ap = malloc((size_t)G * sizeof(float));
    md->r_h = malloc((size_t)S * E * sizeof(float));
    md->r_am = malloc((size_t)S * sizeof(int));
    md->r_ap = malloc((size_t)S * sizeof(float));
    md->r_on = malloc((size_t)S * sizeof(bool));
    md->s_lg = malloc((size_t)S * (size_t)md->V * sizeof(float));
    bool ok = md->s_lg && md->seqs && md->seq_mem && md->g_tok && md->g_pos && md->g_seq && md->g_want && md->g_req && md->g_hid &&
              md->g_am && md->g_ap && md->r_h && md->r_am && md->r_ap && md->r_on;
    for (int s = 0; ok && s < S; s++) {
        mtp_seq *q = &md->seqs[s];
        q->q_tok = malloc(MTP_QCAP * sizeof(nx_token));
        q->v_tok = malloc((NX_SPEC_DRAFT_CAP + 1) * sizeof(nx_token));
        ok = q->q_tok && q->v_tok;
        float *m = md->seq_mem + (size_t)s * per_seq;
        q->h_last = m;
        q->q_hid = m + E;
        q->v_hid = m + (size_t)E * (1 + MTP_QCAP);
    }
    if (!ok) {
        md_free(&md->base);
        return nx_fail(err, NX_ERR_NOMEM, "mtp: out of memory");
    }
    *out = &md->base;
    return NX_OK;
}

nx_mtp_head *nx_mtp_drafter_head(nx_drafter *d) {
    return d && d->ops == &mtp_ops ? ((mtp_drafter *)d)->h : NULL;
}

int nx_mtp_drafter_queued(const nx_drafter *d, nx_seq_id seq) {
    if (!d || d->ops != &mtp_ops || seq < 0 || seq >= d->n_seq) return -1;
    return ((const mtp_drafter *)d)->seqs[seq].qn;
}
