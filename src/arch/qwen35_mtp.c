/*
 * qwen35_mtp.c — the qwen35 MTP (NextN) head (contract: qwen35_mtp.h).
 *
 * The head reuses the trunk's blocks (qw_attn_block on its own one-layer nx_kv, qw_ffn_block)
 * through a private "shadow" nx_ctx that holds the model, the target's thread pool (borrowed) and
 * its own matmul scratch, so nothing of the target context's state is touched.
 */
#include "arch/qwen35_mtp.h"

#include <stdlib.h>
#include <string.h>
#include "arch/qwen35.h"
#include "ctx.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "quant/quant.h"

#define MTP_LM_ROWS 16                        /* LM-head rows per matmul (the kernel's tile) */

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
    float *lbuf;               /* [MTP_LM_ROWS][DV] draft-head logits for the argmax mode */
    const nx_tensor *dhead;    /* the draft LM head: output_mtp, or &own (subset / requantized) */
    nx_tensor own;
    void *own_data;
    int32_t *dvocab;           /* [DV] token of draft-head row j (NULL: row j is token j) */
    int DV;
    float *lin;                /* [MTP_LM_ROWS][E] gathered LM-head inputs */
    int *first, *last;         /* per sequence, for validation */
};

/* The draft LM head: rows of the subset (or all), copied as stored or requantized. */
static nx_status build_draft_head(nx_mtp_head *h, const nx_mtp_head_opts *o, nx_error *err) {
    const nx_tensor *W = h->qm->output_mtp;
    h->dhead = W;
    h->DV = h->V;
    const bool sub = o && o->vocab && o->n_vocab > 0 && o->n_vocab < h->V;
    const bool rq = o && o->requant && o->head_type != W->type;
    if (!sub && !rq) return NX_OK;
    const int64_t E = h->E, DV = sub ? o->n_vocab : h->V;
    if (sub) {
        h->dvocab = malloc((size_t)DV * sizeof *h->dvocab);
        uint8_t *seen = calloc((size_t)h->V, 1);
        if (!h->dvocab || !seen) { free(seen); return nx_fail(err, NX_ERR_NOMEM, "mtp head: out of memory"); }
        for (int64_t j = 0; j < DV; j++) {
            const int32_t t = o->vocab[j];
            if (t < 0 || t >= h->V || seen[t]) {
                free(seen);
                return nx_fail(err, NX_ERR_INVALID_ARG, "draft vocabulary entry %lld: token %d is %s",
                               (long long)j, t, t < 0 || t >= h->V ? "outside the vocabulary" : "repeated");
            }
            seen[t] = 1;
            h->dvocab[j] = t;
        }
        free(seen);
    }
    const nx_type ty = rq ? o->head_type : W->type;
    const nx_type_traits *tt = nx_type_info(ty);
    if (rq && (!tt || !nx_can_quantize(ty) || !nx_can_dequantize(W->type) || !nx_matmul_supports(ty) ||
               E % tt->blck_size != 0))
        return nx_fail(err, NX_ERR_INVALID_ARG, "cannot make a %s draft head from %s rows of %lld values",
                       tt ? tt->name : "?", nx_type_name(W->type), (long long)E);
    const size_t rs = nx_row_size(ty, E);
    h->own_data = malloc(rs * (size_t)DV);
    float *row = rq ? malloc((size_t)E * sizeof(float)) : NULL;
    if (!h->own_data || (rq && !row)) { free(row); return nx_fail(err, NX_ERR_NOMEM, "out of memory for the draft head"); }
    for (int64_t j = 0; j < DV; j++) {
        const int64_t t = sub ? h->dvocab[j] : j;
        const uint8_t *src = (const uint8_t *)W->data + (size_t)t * W->nb[1];
        uint8_t *dst = (uint8_t *)h->own_data + (size_t)j * rs;
        if (!rq) { memcpy(dst, src, rs); continue; }   /* rows are quantized independently */
        nx_dequantize_row(W->type, src, row, E);
        nx_quantize_row(ty, row, dst, E);
    }
    free(row);
    const int64_t ne[2] = {E, DV};
    if (!nx_tensor_init(&h->own, "mtp.draft_head", ty, 2, ne, h->own_data))
        return nx_fail(err, NX_ERR_INTERNAL, "draft head shape");
    h->dhead = &h->own;
    h->DV = (int)DV;
    return NX_OK;
}

nx_status nx_mtp_head_create(nx_ctx *target, nx_mtp_head **out, nx_error *err) {
    return nx_mtp_head_create_opts(target, NULL, out, err);
}

nx_status nx_mtp_head_create_opts(nx_ctx *target, const nx_mtp_head_opts *opts, nx_mtp_head **out, nx_error *err) {
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
    /* the head's matmuls are observed like the target's (nextn imatrix's MTP warmup) */
    h->sh.mm.observe = target->mm.observe;
    h->sh.mm.observe_user = target->mm.observe_user;
    h->n_seq = target->params.n_seq_max;
    h->n_ctx = target->params.n_ctx;
    h->E = qm->hp.n_embd;
    h->V = qm->hp.n_vocab;
    h->rows_cap = target->params.n_ubatch < 256 ? target->params.n_ubatch : 256;
    if (h->rows_cap < MTP_LM_ROWS) h->rows_cap = MTP_LM_ROWS;
    const int64_t w = (int64_t)qm->hp.n_head_kv * qm->hp.head_dim;
    nx_kv_config kc = {
        .n_seq = h->n_seq, .n_ctx = h->n_ctx,
        .type_k = nx_ctx_kv_type(target->params.type_k), .type_v = nx_ctx_kv_type(target->params.type_v),
        .n_attn = 1, .k_width = &w, .v_width = &w, .n_rec = 0, .heads = &qm->hp.n_head_kv,
    };
    nx_status st = nx_kv_create(&kc, &h->kv, err);
    if (st == NX_OK) st = qw_scratch_create(qm, h->rows_cap, h->n_ctx, nx_threadpool_size(target->tp), &h->s, err);
    if (st == NX_OK) st = build_draft_head(h, opts, err);
    if (st != NX_OK) {
        nx_mtp_head_free(h);
        return nx_error_prefix(err, "mtp head");
    }
    const size_t R = (size_t)h->rows_cap, E = (size_t)h->E;
    h->cat = malloc(R * 2 * E * sizeof(float));
    h->hout = malloc(R * E * sizeof(float));
    h->lbuf = malloc((size_t)MTP_LM_ROWS * (size_t)h->DV * sizeof(float));
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
    free(h->own_data); free(h->dvocab);
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

/* LM head over the n_in rows gathered in h->lin: the model's full logits into out (rows of V),
 * or the draft head's argmax token + its softmax probability (over the draft rows) into am / ap. */
static nx_status lm_rows(nx_mtp_head *h, int n_in, float *out, int *am, float *ap, nx_error *err) {
    if (out) return nx_matmul(h->sh.tp, &h->sh.mm, h->qm->output_mtp, h->lin, n_in, h->E, out, h->V, err);
    nx_status st = nx_matmul(h->sh.tp, &h->sh.mm, h->dhead, h->lin, n_in, h->E, h->lbuf, h->DV, err);
    if (st != NX_OK) return st;
    for (int i = 0; i < n_in; i++) {
        const int j = nx_argmax_prob(h->lbuf + (size_t)i * h->DV, h->DV, &ap[i]);
        am[i] = h->dvocab ? h->dvocab[j] : j;
    }
    return NX_OK;
}

/* One chunk of n <= rows_cap valid rows. Every row goes into the KV; rows with want[r] (NULL: all)
 * go on through the FFN, their h_mtp into h->hout and their logits (when asked), packed in row
 * order: into logits ([n_want][V]) when non-NULL, else argmax / probability into am / ap
 * ([n_want]). A row that only writes the KV (an accepted draft catching up) needs nothing after
 * the attention block: its FFN would be compute thrown away (rows are batch invariant, so the
 * wanted rows' values do not change). */
static nx_status head_chunk(nx_mtp_head *h, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                            const float *hid, const bool *want, float *logits, int *am, float *ap, nx_error *err) {
    const qw_hparams *hp = &h->qm->hp;
    const qw_mtp *m = h->mtp;
    const int E = h->E;
    float *x = qw_scratch_x(h->s);
    nx_status st;
    qw_embed(h->qm, h->qm->tok_embd_mtp, tok, n, x);   /* nextn.embed_tokens if present */
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
    int nw = n;
    if (want) {
        nw = 0;
        for (int r = 0; r < n; r++)
            if (want[r]) {
                if (nw != r) memcpy(x + (size_t)nw * E, x + (size_t)r * E, (size_t)E * sizeof(float));
                nw++;
            }
        if (!nw) return NX_OK;
    }
    if ((st = qw_ffn_block(&h->sh, h->s, &m->layer, nw, x, err)) != NX_OK) return st;
    if (m->shared_head_norm) nx_rmsnorm_rows(h->hout, x, m->shared_head_norm, E, nw, hp->eps);
    else memcpy(h->hout, x, (size_t)nw * E * sizeof(float));
    if (!logits && !am) return NX_OK;
    int n_in = 0, o = 0;
    for (int r = 0; r < nw; r++) {
        memcpy(h->lin + (size_t)n_in * E, h->hout + (size_t)r * E, (size_t)E * sizeof(float));
        if (++n_in == MTP_LM_ROWS || r == nw - 1) {
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

nx_status nx_mtp_head_draft_rows(nx_mtp_head *h, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                                 const float *hidden, const bool *want, int *am, float *ap, nx_error *err) {
    if (!h || n < 0 || n > h->rows_cap || !am || !ap)
        return nx_fail(err, NX_ERR_INVALID_ARG, "mtp head: draft rows: bad arguments (%d rows)", n);
    return head_chunk(h, n, tok, pos, seq, hidden, want, NULL, am, ap, err);
}

nx_status nx_mtp_head_draft_logits(nx_mtp_head *h, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                                   const float *hidden, const bool *want, float *logits, nx_error *err) {
    if (!h || n < 0 || n > h->rows_cap || !logits)
        return nx_fail(err, NX_ERR_INVALID_ARG, "mtp head: draft logits: bad arguments (%d rows)", n);
    return head_chunk(h, n, tok, pos, seq, hidden, want, logits, NULL, NULL, err);
}

const float *nx_mtp_head_hidden(const nx_mtp_head *h) { return h ? h->hout : NULL; }
int nx_mtp_head_max_rows(const nx_mtp_head *h) { return h ? h->rows_cap : 0; }
int nx_mtp_head_n_embd(const nx_mtp_head *h) { return h ? h->E : 0; }
int nx_mtp_head_n_vocab(const nx_mtp_head *h) { return h ? h->V : 0; }
int nx_mtp_head_n_seq(const nx_mtp_head *h) { return h ? h->n_seq : 0; }
int nx_mtp_head_n_ctx(const nx_mtp_head *h) { return h ? h->n_ctx : 0; }
int64_t nx_mtp_head_draft_vocab(const nx_mtp_head *h) { return h ? h->DV : 0; }
size_t nx_mtp_head_draft_bytes(const nx_mtp_head *h) { return h ? nx_row_size(h->dhead->type, h->E) * (size_t)h->DV : 0; }
nx_type nx_mtp_head_draft_type(const nx_mtp_head *h) { return h ? h->dhead->type : NX_TYPE_F32; }
