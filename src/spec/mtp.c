/*
 * mtp.c — the qwen35 MTP (NextN) head and the `mtp` drafter (contract: mtp.h).
 *
 * The head reuses the trunk's blocks (qw_attn_block on its own one-layer nx_kv, qw_ffn_block)
 * through a private "shadow" nx_ctx that holds the model, the target's thread pool (borrowed) and
 * its own matmul scratch, so nothing of the target context's state is touched.
 * The drafter never runs the head inside accept(): committed rows are queued and written together
 * with the next draft's first step (one head batch for every sequence), which keeps the number of
 * head calls per round at k whatever the number of sequences.
 * Must never: allocate in the per-round path (every buffer is sized at creation), print.
 */
#include "spec/mtp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "arch/qwen35.h"
#include "ctx.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "spec/policy.h"

#define MTP_LM_ROWS 16                        /* LM-head rows per matmul (the kernel's tile) */
#define MTP_QCAP (2 * (NX_SPEC_DRAFT_CAP + 1)) /* queued committed rows per sequence before a flush */

/* ===== support checks ===== */

bool nx_mtp_supported(const nx_model *m) {
    if (!m || !m->impl || !m->arch_data) return false;
    if (strcmp(m->arch, "qwen35") != 0 && strcmp(m->arch, "qwen35moe") != 0) return false;
    return qw_of(m)->hp.n_nextn > 0;
}

nx_status nx_mtp_unsupported_error(const nx_model *m, nx_error *err) {
    if (!m) return nx_fail(err, NX_ERR_INVALID_ARG, "--spec-type mtp: no model");
    if (m->impl && m->arch_data && (!strcmp(m->arch, "qwen35") || !strcmp(m->arch, "qwen35moe")))
        return nx_fail(err, NX_ERR_UNSUPPORTED,
                       "--spec-type mtp: this %s model has no MTP layer (nextn_predict_layers = 0); use a GGUF "
                       "converted with its MTP head, another --spec-type (e.g. ngram), or --spec-fallback",
                       m->arch);
    return nx_fail(err, NX_ERR_UNSUPPORTED,
                   "--spec-type mtp: architecture '%s' has no MTP head nextn can run (supported: qwen35, qwen35moe "
                   "with nextn_predict_layers >= 1)", m->arch);
}

/* ===== the head ===== */

struct nx_mtp_head {
    const qw_model *qm;
    const qw_mtp *mtp;
    struct nx_ctx sh;          /* shadow context: model, params, borrowed thread pool, own matmul scratch */
    nx_kv *kv;                 /* one attention layer */
    qw_scratch *s;
    int rows_cap, n_seq, n_ctx, E, V;
    float *cat;                /* [rows_cap][2E] fused input */
    float *hout;               /* [rows_cap][E] h_mtp of the last chunk */
    float *lbuf;               /* [MTP_LM_ROWS][V] logits for the argmax mode */
    float *lin;                /* [MTP_LM_ROWS][E] gathered LM-head inputs */
    int *first, *last;         /* per sequence, for validation */
};

nx_status nx_mtp_head_create(nx_ctx *target, nx_mtp_head **out, nx_error *err) {
    *out = NULL;
    if (!target) return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: no target context");
    if (!nx_mtp_supported(target->model)) return nx_mtp_unsupported_error(target->model, err);
    nx_mtp_head *h = calloc(1, sizeof *h);
    if (!h) return nx_fail(err, NX_ERR_NOMEM, "mtp: out of memory");
    const qw_model *qm = qw_of(target->model);
    h->qm = qm;
    h->mtp = &qm->mtp[qm->hp.n_nextn - 1];   /* the last head drafts every step (qwen35.md §0) */
    h->sh.model = target->model;
    h->sh.params = target->params;
    h->sh.tp = target->tp;
    nx_matmul_scratch_init(&h->sh.mm);
    h->n_seq = target->params.n_seq_max;
    h->n_ctx = target->params.n_ctx;
    h->E = qm->hp.n_embd;
    h->V = qm->hp.n_vocab;
    h->rows_cap = target->params.n_ubatch < 256 ? target->params.n_ubatch : 256;
    if (h->rows_cap < MTP_LM_ROWS) h->rows_cap = MTP_LM_ROWS;
    const int64_t w = (int64_t)qm->hp.n_head_kv * qm->hp.head_dim;
    nx_kv_config kc = {
        .n_seq = h->n_seq, .n_ctx = h->n_ctx,
        .type_k = target->params.type_k == NX_CACHE_F16 ? NX_TYPE_F16 : NX_TYPE_F32,
        .type_v = target->params.type_v == NX_CACHE_F16 ? NX_TYPE_F16 : NX_TYPE_F32,
        .n_attn = 1, .k_width = &w, .v_width = &w, .n_rec = 0,
    };
    nx_status st = nx_kv_create(&kc, &h->kv, err);
    if (st == NX_OK) st = qw_scratch_create(qm, h->rows_cap, h->n_ctx, nx_threadpool_size(target->tp), &h->s, err);
    if (st != NX_OK) {
        nx_mtp_head_free(h);
        return nx_error_prefix(err, "mtp head");
    }
    const size_t R = (size_t)h->rows_cap, E = (size_t)h->E, V = (size_t)h->V;
    h->cat = malloc(R * 2 * E * sizeof(float));
    h->hout = malloc(R * E * sizeof(float));
    h->lbuf = malloc((size_t)MTP_LM_ROWS * V * sizeof(float));
    h->lin = malloc((size_t)MTP_LM_ROWS * E * sizeof(float));
    h->first = malloc((size_t)h->n_seq * sizeof(int));
    h->last = malloc((size_t)h->n_seq * sizeof(int));
    if (!h->cat || !h->hout || !h->lbuf || !h->lin || !h->first || !h->last) {
        nx_mtp_head_free(h);
        return nx_fail(err, NX_ERR_NOMEM, "mtp head: out of memory");
    }
    *out = h;
    return NX_OK;
}

void nx_mtp_head_free(nx_mtp_head *h) {
    if (!h) return;
    nx_kv_free(h->kv);
    qw_scratch_free(h->s);
    nx_matmul_scratch_free(&h->sh.mm);
    free(h->cat); free(h->hout); free(h->lbuf); free(h->lin); free(h->first); free(h->last);
    free(h);
}

int nx_mtp_head_seq_len(const nx_mtp_head *h, nx_seq_id seq) {
    if (!h || seq < 0 || seq >= h->n_seq) return -1;
    return nx_kv_seq_len(h->kv, seq);
}

void nx_mtp_head_seq_trim(nx_mtp_head *h, nx_seq_id seq, int len) {
    if (!h || seq < 0 || seq >= h->n_seq || len < 0) return;
    if (len < nx_kv_seq_len(h->kv, seq)) nx_kv_seq_set_len(h->kv, seq, len);
}

/* LM head over the n_in rows gathered in h->lin: logits into out (rows of V), or argmax + its
 * softmax probability into am / ap. */
static nx_status lm_rows(nx_mtp_head *h, int n_in, float *out, int *am, float *ap, nx_error *err) {
    float *y = out ? out : h->lbuf;
    nx_status st = nx_matmul(h->sh.tp, &h->sh.mm, h->qm->output_mtp, h->lin, n_in, h->E, y, h->V, err);
    if (st != NX_OK || out) return st;
    for (int i = 0; i < n_in; i++) am[i] = nx_argmax_prob(y + (size_t)i * h->V, h->V, &ap[i]);
    return NX_OK;
}

/* One chunk of n <= rows_cap valid rows. h_mtp of every row -> h->hout. Rows with want[r] (NULL:
 * all, when an output is asked) get logits, packed in row order: into logits ([n_want][V]) when
 * non-NULL, else argmax / probability into am / ap ([n_want]). */
static nx_status head_chunk(nx_mtp_head *h, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                            const float *hid, const bool *want, float *logits, int *am, float *ap, nx_error *err) {
    const qw_hparams *hp = &h->qm->hp;
    const qw_mtp *m = h->mtp;
    const int E = h->E;
    float *x = qw_scratch_x(h->s);
    nx_status st;
    qw_embed(h->qm, tok, n, x);
    for (int r = 0; r < n; r++) {
        float *c = h->cat + (size_t)r * 2 * E;
        nx_rmsnorm(c, x + (size_t)r * E, m->enorm, E, hp->eps);               /* embedding first */
        nx_rmsnorm(c + E, hid + (size_t)r * E, m->hnorm, E, hp->eps);
    }
    if (m->eh_proj) {
        if ((st = nx_matmul(h->sh.tp, &h->sh.mm, m->eh_proj, h->cat, n, 2 * E, x, E, err)) != NX_OK) return st;
    } else {
        for (int r = 0; r < n; r++) nx_add(x + (size_t)r * E, h->cat + (size_t)r * 2 * E, h->cat + (size_t)r * 2 * E + E, E);
    }
    if ((st = qw_attn_block(&h->sh, h->s, &m->layer, h->kv, n, pos, seq, x, err)) != NX_OK) return st;
    for (int r = 0; r < n; r++) nx_kv_seq_set_len(h->kv, seq[r], pos[r] + 1);
    if ((st = qw_ffn_block(&h->sh, h->s, &m->layer, n, x, err)) != NX_OK) return st;
    if (m->shared_head_norm) nx_rmsnorm_rows(h->hout, x, m->shared_head_norm, E, n, hp->eps);
    else memcpy(h->hout, x, (size_t)n * E * sizeof(float));
    if (!logits && !am) return NX_OK;
    int n_in = 0, o = 0;
    for (int r = 0; r < n; r++) {
        if (want && !want[r]) continue;
        memcpy(h->lin + (size_t)n_in * E, h->hout + (size_t)r * E, (size_t)E * sizeof(float));
        if (++n_in == MTP_LM_ROWS || r == n - 1) {
            st = lm_rows(h, n_in, logits ? logits + (size_t)o * h->V : NULL, am ? am + o : NULL, ap ? ap + o : NULL, err);
            if (st != NX_OK) return st;
            o += n_in;
            n_in = 0;
        }
    }
    if (n_in) {
        st = lm_rows(h, n_in, logits ? logits + (size_t)o * h->V : NULL, am ? am + o : NULL, ap ? ap + o : NULL, err);
        if (st != NX_OK) return st;
    }
    return NX_OK;
}

nx_status nx_mtp_head_forward(nx_mtp_head *h, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                              const float *hidden, float *h_out, float *logits, nx_error *err) {
    if (!h || n < 0 || (n > 0 && (!tok || !pos || !seq || !hidden)))
        return nx_fail(err, NX_ERR_INVALID_ARG, "mtp head: bad arguments (%d rows)", n);
    for (int s = 0; s < h->n_seq; s++) h->first[s] = -1;
    for (int r = 0; r < n; r++) {
        const int s = seq[r];
        if (s < 0 || s >= h->n_seq)
            return nx_fail(err, NX_ERR_INVALID_ARG, "mtp head: row %d: sequence %d outside [0, %d)", r, s, h->n_seq);
        if (tok[r] < 0 || tok[r] >= h->V)
            return nx_fail(err, NX_ERR_INVALID_ARG, "mtp head: row %d: token %d outside the vocabulary [0, %d)", r,
                           tok[r], h->V);
        if (pos[r] < 0 || pos[r] >= h->n_ctx)
            return nx_fail(err, NX_ERR_RANGE, "mtp head: row %d: position %d outside the context [0, %d)", r, pos[r],
                           h->n_ctx);
        if (h->first[s] < 0) {
            if (pos[r] > nx_kv_seq_len(h->kv, s))
                return nx_fail(err, NX_ERR_INVALID_ARG, "mtp head: row %d: sequence %d starts at %d but holds %d positions",
                               r, s, pos[r], nx_kv_seq_len(h->kv, s));
            h->first[s] = pos[r];
        } else if (pos[r] != h->last[s] + 1) {
            return nx_fail(err, NX_ERR_INVALID_ARG, "mtp head: row %d: sequence %d position %d does not follow %d", r, s,
                           pos[r], h->last[s]);
        }
        h->last[s] = pos[r];
    }
    for (int s = 0; s < h->n_seq; s++)
        if (h->first[s] >= 0) nx_mtp_head_seq_trim(h, s, h->first[s]);
    for (int r0 = 0; r0 < n; r0 += h->rows_cap) {
        const int c = n - r0 < h->rows_cap ? n - r0 : h->rows_cap;
        nx_status st = head_chunk(h, c, tok + r0, pos + r0, seq + r0, hidden + (size_t)r0 * h->E, NULL,
                                  logits ? logits + (size_t)r0 * h->V : NULL, NULL, NULL, err);
        if (st != NX_OK) return st;
        if (h_out) memcpy(h_out + (size_t)r0 * h->E, h->hout, (size_t)c * h->E * sizeof(float));
    }
    return NX_OK;
}

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
    int E;
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
static nx_status g_flush(mtp_drafter *md, nx_error *err) {
    if (!md->g_n) return NX_OK;
    nx_status st = head_chunk(md->h, md->g_n, md->g_tok, md->g_pos, md->g_seq, md->g_hid, md->g_want, NULL, md->g_am,
                              md->g_ap, err);
    if (st != NX_OK) return st;
    for (int r = 0, o = 0; r < md->g_n; r++) {
        if (!md->g_want[r]) continue;
        const int i = md->g_req[r];
        md->r_am[i] = md->g_am[o];
        md->r_ap[i] = md->g_ap[o];
        memcpy(md->r_h + (size_t)i * md->E, md->h->hout + (size_t)r * md->E, (size_t)md->E * sizeof(float));
        o++;
    }
    md->g_n = 0;
    return NX_OK;
}

static nx_status g_push(mtp_drafter *md, nx_token tok, nx_pos pos, nx_seq_id seq, const float *hid, int req,
                        nx_error *err) {
    if (md->g_n == md->h->rows_cap) {
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
        if (rows->tok[r] >= md->h->V)
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
        if (reqs[i].id_last >= h->V)
            return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: draft: token %d outside the vocabulary", reqs[i].id_last);
        /* a row P left by an earlier draft without accept is rewritten */
        if (q->qn == 0) nx_mtp_head_seq_trim(h, s, q->committed);
    }
    /* Step 0: every queued committed row + one row (id_last, h_{P-1}) at P per request. */
    nx_status st = push_queues(md, err);
    for (int i = 0; i < n_reqs && st == NX_OK; i++) {
        nx_draft_req *r = &reqs[i];
        md->r_on[i] = r->k_max > 0 && r->pos < h->n_ctx;
        if (md->r_on[i]) st = g_push(md, r->id_last, r->pos, r->seq, md->seqs[r->seq].h_last, i, err);
    }
    if (st == NX_OK) st = g_flush(md, err);
    if (st != NX_OK) {
        md->g_n = 0;
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
            }
            md->r_on[i] = v == NX_PMIN_KEEP && r->n < r->k_max && r->pos + r->n < h->n_ctx;
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
    free(md);
}

/* Committed rows queue up between drafts (one head batch for many rows); sync runs them now. */
static nx_status md_sync(nx_drafter *d, nx_error *err) { return flush_queues((mtp_drafter *)d, err); }

static const nx_drafter_ops mtp_ops = {
    .name = "mtp", .begin = md_begin, .process = md_process, .draft = md_draft, .accept = md_accept, .free = md_free,
    .sync = md_sync, .begin_keep = md_begin_keep,
};

nx_status nx_mtp_drafter_create(nx_ctx *target, nx_drafter **out, nx_error *err) {
    if (!out) return nx_fail(err, NX_ERR_INVALID_ARG, "mtp: out is NULL");
    *out = NULL;
    mtp_drafter *md = calloc(1, sizeof *md);
    if (!md) return nx_fail(err, NX_ERR_NOMEM, "mtp: out of memory");
    md->base.ops = &mtp_ops;
    nx_status st = nx_mtp_head_create(target, &md->h, err);
    if (st != NX_OK) {
        free(md);
        return st;
    }
    const int S = md->h->n_seq, E = md->h->E, G = md->h->rows_cap;
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
    bool ok = md->seqs && md->seq_mem && md->g_tok && md->g_pos && md->g_seq && md->g_want && md->g_req && md->g_hid &&
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
