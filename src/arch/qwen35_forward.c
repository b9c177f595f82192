/*
 * qwen35_forward.c — the Qwen3.5 trunk forward pass over a ubatch (spec qwen35.md §3-5):
 * Gated DeltaNet (causal conv, delta rule with the engine's clamps, gated RMSNorm), gated
 * full attention (interleaved Q/gate, q/k norms, partial NEOX RoPE = IMROPE for text, GQA,
 * sigmoid gate), dense SwiGLU or MoE FFN, final norm, LM head.
 *
 * Row independence (decode == prefill, bit for bit): matmuls are batch-invariant; every other
 * op runs per row with a fixed order — attention of a row reads its own sequence's positions
 * 0..pos in order, the recurrence walks a sequence's tokens in order, MoE sums a row's experts
 * in its own top-k order. Threads split whole (row, head) / (sequence, head) units, never a
 * reduction, so results do not depend on the thread count either.
 * Must never: allocate (qw_scratch is sized for n_ubatch rows at context creation).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "arch/qwen35.h"
#include "arch/moe.h"
#include "arch/qwen35_dn.h"
#include "arch/attn_view.h"
#include "core/fp16.h"

#define QW_FFN_ROWS 64
#define QW_CONV_SLIDE 16   /* rows a conv window slides before its taps move back (dn_conv_block) */
#define QW_PAR_MIN 4096   /* element-wise work below this many values stays on the caller */

/* A token's inputs to one V head's recurrence: q, k of its K head, v, beta, decay. */
typedef struct dn_tok {
    const float *q, *k, *v;
    float beta, decay;
    float *o;   /* output row (NULL: a replayed token) */
} dn_tok;


struct qw_scratch {
    int n_rows, n_ctx, n_threads;
    float *x, *u;               /* [n][E] residual stream, normed input / block output */
    float *b1, *b2, *b3, *b4;   /* stage buffers shared by the blocks (sizes below) */
    float *thr;                 /* per thread: thr_stride floats (attention scores, row conversions) */
    size_t thr_stride;
    dn_tok *dn_toks;            /* per thread: dn_toks_stride tokens (deferred replay + a group's rows) */
    size_t dn_toks_stride;
    /* MoE */
    int *sel, *e_cnt, *e_off, *e_slot;
    float *selw, *gath, *gu, *hm, *yo, *ys, *moe_out, *gs;
};

static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }

nx_status qw_scratch_create(const qw_model *qm, int n, int n_ctx, int n_threads, qw_scratch **out, nx_error *err) {
    const qw_hparams *hp = &qm->hp;
    *out = NULL;
    qw_scratch *s = calloc(1, sizeof *s);
    if (!s) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    s->n_rows = n;
    s->n_ctx = n_ctx;
    s->n_threads = n_threads;
    size_t N = (size_t)n, E = (size_t)hp->n_embd, H = (size_t)hp->n_head, Hkv = (size_t)hp->n_head_kv,
           D = (size_t)hp->head_dim, C = (size_t)hp->conv_dim, VD = (size_t)hp->value_dim, nv = (size_t)hp->nv;
    size_t FF = (size_t)hp->n_ff, X = (size_t)hp->n_expert, F = (size_t)hp->n_ff_exp, Fs = (size_t)hp->n_ff_shexp;
    size_t K = (size_t)hp->d_conv, kx = (size_t)hp->n_expert_used;
    /* the dense FFN runs QW_FFN_ROWS rows at a time (its n_ff-wide buffers are the largest) */
    const size_t NF = N < QW_FFN_ROWS ? N : QW_FFN_ROWS;
    size_t sb1 = maxz(N * maxz(maxz(2 * H * D, C), Fs), NF * FF);
    size_t sb2 = maxz(N * maxz(maxz(Hkv * D, VD), Fs), NF * FF);
    size_t sb3 = maxz(maxz(Hkv * D, 2 * nv), X);
    size_t sb4 = maxz(maxz(H * D, VD), E);
    s->x = malloc(N * E * sizeof(float));
    s->u = malloc(N * E * sizeof(float));
    s->b1 = malloc(sb1 * sizeof(float));
    s->b2 = malloc(sb2 * sizeof(float));
    s->b3 = malloc(N * sb3 * sizeof(float));
    s->b4 = malloc(N * sb4 * sizeof(float));
    /* per thread: attention scores, a head's gate / norm rows, a conv block's sliding window, a
     * row's RoPE cache */
    s->thr_stride = (maxz(maxz(nx_attend_work_floats(hp->n_head, hp->n_head_kv, (int)D), 3 * maxz(D, (size_t)hp->dv)),
                          maxz((QW_CONV_SLIDE + K) * maxz((size_t)hp->dk, (size_t)hp->dv), (size_t)hp->n_rot)) + 15) & ~(size_t)15;
    s->thr = malloc((size_t)n_threads * s->thr_stride * sizeof(float));
    s->dn_toks_stride = (size_t)NX_SNAPSHOT_MAX + N;
    s->dn_toks = malloc((size_t)n_threads * s->dn_toks_stride * sizeof *s->dn_toks);
    bool ok = s->x && s->u && s->b1 && s->b2 && s->b3 && s->b4 && s->thr && s->dn_toks;
    if (hp->moe) {
        s->sel = malloc(N * kx * sizeof(int));
        s->selw = malloc(N * kx * sizeof(float));
        s->e_cnt = malloc(X * sizeof(int));
        s->e_off = malloc((X + 1) * sizeof(int));
        s->e_slot = malloc(N * kx * sizeof(int));
        s->gath = malloc(N * E * sizeof(float));
        s->gu = malloc(N * 2 * F * sizeof(float));
        s->hm = malloc(N * F * sizeof(float));
        s->yo = malloc(N * E * sizeof(float));
        s->ys = malloc(N * kx * E * sizeof(float));
        s->moe_out = malloc(N * E * sizeof(float));
        s->gs = malloc(N * sizeof(float));
        ok = ok && s->sel && s->selw && s->e_cnt && s->e_off && s->e_slot && s->gath && s->gu && s->hm && s->yo &&
             s->ys && s->moe_out && s->gs;
    }
    if (!ok) {
        qw_scratch_free(s);
        return nx_fail(err, NX_ERR_NOMEM, "cannot allocate the forward scratch for %d rows", n);
    }
    *out = s;
    return NX_OK;
}

void qw_scratch_free(qw_scratch *s) {
    if (!s) return;
    free(s->x); free(s->u); free(s->b1); free(s->b2); free(s->b3); free(s->b4);
    free(s->thr); free(s->dn_toks);
    free(s->sel); free(s->selw); free(s->e_cnt); free(s->e_off); free(s->e_slot); free(s->gath);
    free(s->gu); free(s->hm); free(s->yo); free(s->ys); free(s->moe_out); free(s->gs);
    free(s);
}

float *qw_scratch_x(qw_scratch *s) { return s->x; }

static inline nx_status mm(nx_ctx *ctx, const nx_tensor *w, const float *x, int n, int64_t ldx, float *y, int64_t ldy,
                           nx_error *err) {
    return nx_matmul(ctx->tp, &ctx->mm, w, x, n, ldx, y, ldy, err);
}

/* ===== Gated attention ===== */

typedef struct attn_job {
    const qw_model *qm;
    const qw_layer *L;
    const nx_kv *kv;
    qw_scratch *s;
    int n;
    const nx_pos *pos;
    const nx_seq_id *seq;
    const float *qa;   /* [n][H][q D | gate D] */
    float *o;          /* [n][H*D] */
} attn_job;

static void attn_task(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    const qw_hparams *hp = &j->qm->hp;
    const int H = hp->n_head, D = hp->head_dim;
    nx_attend_rows(j->kv, j->L->kv_layer, H, hp->n_head_kv, D, j->n, j->seq, NULL, j->pos, j->qa, (size_t)2 * H * D,
                   (size_t)2 * D, j->o, 1.0f / sqrtf((float)D), j->s->thr + (size_t)ith * j->s->thr_stride, ith, nth);
}

/* out *= sigmoid(gate) per (row, head), after every head's attention is done. */
static void gate_task(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    const nx_ops_impl *ops = nx_ops_get();
    const int H = j->qm->hp.n_head, D = j->qm->hp.head_dim;
    float *gate = j->s->thr + (size_t)ith * j->s->thr_stride;
    for (long w = ith; w < (long)j->n * H; w += nth) {
        const int r = (int)(w / H), h = (int)(w % H);
        ops->sigmoid(gate, j->qa + (size_t)r * 2 * H * D + (size_t)h * 2 * D + D, D);
        float *out = j->o + (size_t)r * H * D + (size_t)h * D;
        ops->mul(out, out, gate, D);
    }
}

/* Per row: q / k head norms, RoPE, K / V into the cache (rows are distinct positions: no two
 * threads write one cell). Rows split across the threads; each thread its own RoPE cache. */
typedef struct qkv_job {
    const qw_model *qm;
    const qw_layer *L;
    nx_kv *kv;
    qw_scratch *s;
    int n;
    const nx_pos *pos;
    const nx_seq_id *seq;
    float *qa, *k, *v;
} qkv_job;

static void qkv_task(void *arg, int ith, int nth) {
    const qkv_job *j = arg;
    const qw_model *qm = j->qm;
    const qw_hparams *hp = &qm->hp;
    const int H = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, half = hp->n_rot / 2;
    float *rope = j->s->thr + (size_t)ith * j->s->thr_stride;
    for (int r = ith; r < j->n; r += nth) {
        float *qr = j->qa + (size_t)r * 2 * H * D, *kr = j->k + (size_t)r * Hkv * D, *vr = j->v + (size_t)r * Hkv * D;
        for (int h = 0; h < H; h++) nx_rmsnorm(qr + (size_t)h * 2 * D, qr + (size_t)h * 2 * D, j->L->q_norm, D, hp->eps);
        for (int h = 0; h < Hkv; h++) nx_rmsnorm(kr + (size_t)h * D, kr + (size_t)h * D, j->L->k_norm, D, hp->eps);
        if (hp->n_rot > 0) {
            nx_rope_cache(&qm->rope, j->pos[r], rope);
            for (int i = 0; i < half; i++)
                if (qm->rope_pos0[i]) { rope[i] = 1.0f; rope[half + i] = 0.0f; }
            nx_rope_apply(qr, H, 2 * D, &qm->rope, rope);
            nx_rope_apply(kr, Hkv, D, &qm->rope, rope);
        }
        nx_kv_put_k(j->kv, j->seq[r], j->L->kv_layer, j->pos[r], kr);
        nx_kv_put_v(j->kv, j->seq[r], j->L->kv_layer, j->pos[r], vr);
    }
}

nx_status qw_attn_block(nx_ctx *ctx, qw_scratch *s, const qw_layer *L, nx_kv *kv, int n, const nx_pos *pos,
                        const nx_seq_id *seq, float *x, nx_error *err) {
    const qw_model *qm = qw_of(ctx->model);
    const qw_hparams *hp = &qm->hp;
    const int E = hp->n_embd, H = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    nx_status st;
    nx_rmsnorm_rows(s->u, x, L->attn_norm, E, n, hp->eps);
    float *qa = s->b1, *k = s->b2, *v = s->b3, *o = s->b4;
    const nx_mm_out qkv[3] = {{L->wq, qa, 2 * H * D}, {L->wk, k, Hkv * D}, {L->wv, v, Hkv * D}};
    if ((st = nx_matmul_multi(ctx->tp, &ctx->mm, qkv, 3, s->u, n, E, err)) != NX_OK) return st;
    qkv_job qj = {.qm = qm, .L = L, .kv = kv, .s = s, .n = n, .pos = pos, .seq = seq, .qa = qa, .k = k, .v = v};
    if (n == 1) qkv_task(&qj, 0, 1);   /* one row: no hand-off */
    else nx_threadpool_run(ctx->tp, qkv_task, &qj);
    attn_job job = {.qm = qm, .L = L, .kv = kv, .s = s, .n = n, .pos = pos, .seq = seq, .qa = qa, .o = o};
    nx_threadpool_run(ctx->tp, attn_task, &job);
    nx_threadpool_run(ctx->tp, gate_task, &job);
    if ((st = mm(ctx, L->wo, o, n, H * D, s->u, E, err)) != NX_OK) return st;
    nx_add(x, x, s->u, n * E);
    return NX_OK;
}

/* ===== Gated DeltaNet ===== */

typedef struct dn_job {
    const qw_model *qm;
    const qw_layer *L;
    nx_kv *kv;
    qw_scratch *s;
    const nx_ubatch *ub;
    const float *m;       /* [n][conv_dim]: conv + silu output, q/k L2-normalised */
    const float *beta;    /* [n][nv] */
    const float *decay;   /* [n][nv] */
    const float *z;       /* [n][value_dim]: the output gate's projection (silu applied per head here) */
    float *o;             /* [n][value_dim] */
} dn_job;

/* Replay log entry (kv.h "deferred SSM") of a token: its m row (q | k | v), beta, decay. */
static int64_t dn_log_floats(const qw_hparams *hp) { return (int64_t)hp->conv_dim + 2 * hp->nv; }
static dn_tok dn_tok_of_log(const qw_hparams *hp, const float *e, int h) {
    const int kh = h % hp->nk;
    return (dn_tok){.q = e + (size_t)kh * hp->dk, .k = e + hp->key_dim + (size_t)kh * hp->dk,
                    .v = e + 2 * hp->key_dim + (size_t)h * hp->dv, .beta = e[hp->conv_dim + h],
                    .decay = e[hp->conv_dim + hp->nv + h], .o = NULL};
}

/* Tokens toks[0..n) of one head onto the state S in runs of the kernel: the state after token
 * `keep` (< 0: none) is stored back to S, and the last one's too when store_last. */
static void dn_chain(qw_dn_run_fn run, float *S, int dv, int dk, float scale, const dn_tok *toks, int n, int keep,
                     bool store_last) {
    enum { RUN = QW_DN_RUN_MAX_T };
    const float *kp[RUN], *qp[RUN], *vp[RUN];
    float *sdp[RUN], *op[RUN], bt[RUN], dc[RUN];
    for (int t0 = 0; t0 < n; t0 += RUN) {
        const int T = n - t0 < RUN ? n - t0 : RUN;
        for (int t = 0; t < T; t++) {
            const dn_tok *x = &toks[t0 + t];
            qp[t] = x->q; kp[t] = x->k; vp[t] = x->v; bt[t] = x->beta; dc[t] = x->decay; op[t] = x->o;
            sdp[t] = (t0 + t == keep || (store_last && t0 + t == n - 1)) ? S : NULL;
        }
        /* more runs follow: the state must carry over through S (only prompt chunks get here,
         * which store their last token in place anyway) */
        if (t0 + T < n) sdp[T - 1] = S;
        run(S, sdp, T, dv, dk, kp, qp, vp, bt, dc, scale, op);
    }
}

/* One (sequence, V head) over the sequence's rows in order: the delta rule on the live state
 * S (dv rows x dk cols, row-major), deferred (kv.h): the pending tokens of the last snapshot
 * batch are replayed first (the result stored once, in place); a snapshot batch's own rows then
 * only give outputs (the next forward or a rewind decides which of them stay), other rows
 * leave the state after the last one in place. */
static void dn_task(void *arg, int ith, int nth) {
    const dn_job *j = arg;
    const qw_hparams *hp = &j->qm->hp;
    const nx_ops_impl *ops = nx_ops_get();
    const int nv = hp->nv, nk = hp->nk, dk = hp->dk, dv = hp->dv, C = hp->conv_dim, VD = hp->value_dim;
    const int rl = j->L->rec_layer;
    const float scale = 1.0f / sqrtf((float)dk);
    float *tmp = j->s->thr + (size_t)ith * j->s->thr_stride;
    const qw_dn_run_fn run = qw_dn_run_pick();
    for (long w = ith; w < (long)j->ub->n_groups * nv; w += nth) {
        const int g = (int)(w / nv), h = (int)(w % nv), kh = h % nk;   /* tiled V->K pairing */
        const int sq = j->ub->grp_seq[g];
        const int r0 = j->ub->grp_off[g], r1 = j->ub->grp_off[g + 1];
        dn_tok *toks = j->s->dn_toks + (size_t)ith * j->s->dn_toks_stride;
        int n = 0, keep = -1;
        const bool log = j->ub->rec_log[g];
        if (j->ub->rec_done[g] == 0) {
            const int pend = nx_kv_pending(j->kv, sq);
            for (int t = 0; t < pend; t++) toks[n++] = dn_tok_of_log(hp, nx_kv_log_prev(j->kv, sq, rl, t), h);
            if (log && pend > 0) keep = pend - 1;   /* the state before this batch, stored once */
        } else if (log) {   /* this batch's rows in earlier ubatches: not applied yet */
            for (int t = 0; t < j->ub->rec_done[g]; t++)
                toks[n++] = dn_tok_of_log(hp, nx_kv_log_next(j->kv, sq, rl, t), h);
        }
        for (int t = r0; t < r1; t++) {
            const int r = j->ub->order[t];
            const float *mr = j->m + (size_t)r * C;
            toks[n++] = (dn_tok){.q = mr + (size_t)kh * dk, .k = mr + hp->key_dim + (size_t)kh * dk,
                                 .v = mr + 2 * hp->key_dim + (size_t)h * dv, .beta = j->beta[(size_t)r * nv + h],
                                 .decay = j->decay[(size_t)r * nv + h], .o = j->o + (size_t)r * VD + (size_t)h * dv};
        }
        float *S = nx_kv_ssm(j->kv, sq, rl, -1) + (size_t)h * dv * dk;
        dn_chain(run, S, dv, dk, scale, toks, n, keep, !log);
        for (int t = r0; t < r1; t++) {
            const int r = j->ub->order[t];
            float *o = j->o + (size_t)r * VD + (size_t)h * dv;
            nx_rmsnorm(tmp, o, j->L->ssm_norm, dv, hp->eps);
            ops->silu(tmp + dv, j->z + (size_t)r * VD + (size_t)h * dv, dv);
            ops->mul(o, tmp, tmp + dv, dv);
        }
    }
}

/* ===== DeltaNet inputs: conv, SiLU, q/k L2 norms, replay log ===== */

/* Channel blocks of the conv: one head's q, k or v channels. Channels are independent through
 * the depthwise conv and SiLU, and the L2 norms act on whole q / k heads, so a block's rows can
 * run on any thread in one go (each value computed by the same expressions in the same order as
 * a whole-row pass: the split changes no bit). */
static int dn_blocks(const qw_hparams *hp) { return 2 * hp->nk + hp->nv; }
static void dn_block(const qw_hparams *hp, int b, int *c0, int *bw) {
    if (b < 2 * hp->nk) { *c0 = b * hp->dk; *bw = hp->dk; }
    else { *c0 = 2 * hp->key_dim + (b - 2 * hp->nk) * hp->dv; *bw = hp->dv; }
}

typedef struct conv_job {
    const qw_model *qm;
    const qw_layer *L;
    nx_kv *kv;
    qw_scratch *s;
    const nx_ubatch *ub;
    float *m;             /* [n][conv_dim]: projections in, conv + silu (+ q/k L2 norm) out */
    const float *beta, *decay;
} conv_job;

/* Causal depthwise conv of one channel block [c0, c0 + bw) over every sequence's rows, in place
 * in m, updating / snapshotting that block of the conv state (the last d_conv-1 pre-activation
 * inputs, oldest first, [tap][channel]); then SiLU, the q/k head's L2 norm and, for a snapshot
 * batch, the block's part of each row's replay log entry (kv.h "deferred SSM"). */
static void dn_conv_block(const conv_job *j, int c0, int bw, bool qk, float *win) {
    const qw_hparams *hp = &j->qm->hp;
    const nx_ubatch *ub = j->ub;
    const int K = hp->d_conv, C = hp->conv_dim, rl = j->L->rec_layer;
    const size_t rb = (size_t)bw * sizeof(float);
    /* win: a sliding window of QW_CONV_SLIDE + K - 1 rows of bw; the taps of the current row are
     * rows at..at+K-2 and the row itself goes to at+K-1, so a row costs one copy in, and the
     * last K-1 rows move back to the front once per QW_CONV_SLIDE rows (a move per row was ~1%
     * of a prefill) */
    const float *w = j->L->conv_t + c0;
    const bool log = nx_kv_deferred(j->kv);
    for (int g = 0; g < ub->n_groups; g++) {
        const int sq = ub->grp_seq[g], t0 = ub->grp_off[g], t1 = ub->grp_off[g + 1];
        const float *src = nx_kv_conv(j->kv, sq, rl, ub->rec_src[ub->order[t0]]) + c0;
        for (int jj = 0; jj < K - 1; jj++) memcpy(win + (size_t)jj * bw, src + (size_t)jj * C, rb);
        int at = 0;
        for (int t = t0; t < t1; t++) {
            const int r = ub->order[t];
            float *mr = j->m + (size_t)r * C + c0;
            /* per channel: silu(x0*w0 + x1*w1 + ...) in tap order, the row itself the last tap
             * (a product, then a sum, each rounded: nx_conv_silu) */
            if (K > 1) {
                if (at == QW_CONV_SLIDE) {
                    memmove(win, win + (size_t)at * bw, (size_t)(K - 1) * rb);
                    at = 0;
                }
                memcpy(win + (size_t)(at + K - 1) * bw, mr, rb);
                nx_conv_silu(mr, win + (size_t)at * bw, w, C, K, bw);
                at++;
            } else {
                nx_conv_silu(mr, mr, w, C, 1, bw);
            }
            const int dst = ub->rec_dst[r];
            if (K > 1 && (dst >= 0 || t == t1 - 1)) {
                float *d = nx_kv_conv(j->kv, sq, rl, dst) + c0;
                for (int jj = 0; jj < K - 1; jj++) memcpy(d + (size_t)jj * C, win + (size_t)(at + jj) * bw, rb);
            }
            if (qk) nx_l2norm(mr, mr, bw, hp->eps);
            if (log && ub->rec_log[g])
                memcpy(nx_kv_log_next(j->kv, sq, j->L->rec_layer, ub->rec_done[g] + t - t0) + c0, mr, rb);
        }
    }
}

static void conv_task(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    const qw_hparams *hp = &j->qm->hp;
    const nx_ubatch *ub = j->ub;
    const int C = hp->conv_dim, nv = hp->nv;
    float *win = j->s->thr + (size_t)ith * j->s->thr_stride;
    for (int b = ith; b < dn_blocks(hp); b += nth) {
        int c0, bw;
        dn_block(hp, b, &c0, &bw);
        dn_conv_block(j, c0, bw, b < 2 * hp->nk, win);
    }
    /* the log entries' beta and decay (a few floats per row) */
    if (ith == 0 && nx_kv_deferred(j->kv))
        for (int g = 0; g < ub->n_groups; g++) {
            if (!ub->rec_log[g]) continue;
            for (int t = ub->grp_off[g]; t < ub->grp_off[g + 1]; t++) {
                const int r = ub->order[t];
                float *e = nx_kv_log_next(j->kv, ub->grp_seq[g], j->L->rec_layer, ub->rec_done[g] + t - ub->grp_off[g]);
                memcpy(e + C, j->beta + (size_t)r * nv, (size_t)nv * sizeof(float));
                memcpy(e + C + nv, j->decay + (size_t)r * nv, (size_t)nv * sizeof(float));
            }
        }
}

static nx_status qw_deltanet_block(nx_ctx *ctx, qw_scratch *s, const qw_layer *L, const nx_ubatch *ub, float *x,
                                   nx_error *err) {
    const qw_model *qm = qw_of(ctx->model);
    const qw_hparams *hp = &qm->hp;
    const int n = ub->n, E = hp->n_embd, C = hp->conv_dim, VD = hp->value_dim, nv = hp->nv;
    nx_status st;
    nx_rmsnorm_rows(s->u, x, L->attn_norm, E, n, hp->eps);
    float *m = s->b1, *z = s->b2, *beta = s->b3, *decay = s->b3 + (size_t)n * nv, *o = s->b4;
    const nx_mm_out proj[4] = {{L->wqkv, m, C}, {L->wz, z, VD}, {L->wbeta, beta, nv}, {L->walpha, decay, nv}};
    if ((st = nx_matmul_multi(ctx->tp, &ctx->mm, proj, 4, s->u, n, E, err)) != NX_OK) return st;
    nx_sigmoid(beta, beta, n * nv);
    for (int r = 0; r < n; r++) {
        float *a = decay + (size_t)r * nv;
        nx_add(a, a, L->dt_bias, nv);
        nx_softplus(a, a, nv);
        nx_mul(a, a, L->ssm_a, nv);
        for (int h = 0; h < nv; h++) a[h] = a[h] < 50.0f ? a[h] : 50.0f;   /* engine quirk: g <= 50 */
        nx_exp(a, a, nv);
    }
    conv_job cj = {.qm = qm, .L = L, .kv = ctx->kv, .s = s, .ub = ub, .m = m, .beta = beta, .decay = decay};
    nx_threadpool_run(ctx->tp, conv_task, &cj);
    dn_job job = {.qm = qm, .L = L, .kv = ctx->kv, .s = s, .ub = ub, .m = m, .beta = beta, .decay = decay, .z = z, .o = o};
    nx_threadpool_run(ctx->tp, dn_task, &job);
    if ((st = mm(ctx, L->wout, o, n, VD, s->u, E, err)) != NX_OK) return st;
    nx_add(x, x, s->u, n * E);
    return NX_OK;
}

/* ===== FFN ===== */

/* g = swiglu(g, up) over n values, split across the threads in ranges of whole cache lines
 * (element-wise: the split changes no bit); a verify batch's few rows are tens of µs of it. */
typedef struct swiglu_job { float *g; const float *up; long n; } swiglu_job;
static void swiglu_task(void *arg, int ith, int nth) {
    const swiglu_job *j = arg;
    const long lines = (j->n + 15) / 16;
    long lo, hi;
    nx_split_range(lines, ith, nth, &lo, &hi);
    lo *= 16;
    hi = hi * 16 < j->n ? hi * 16 : j->n;
    if (hi > lo) nx_swiglu(j->g + lo, j->g + lo, j->up + lo, (int)(hi - lo));
}
static void swiglu_rows(nx_ctx *ctx, float *g, const float *up, long n) {
    swiglu_job j = {g, up, n};
    if (n < QW_PAR_MIN) swiglu_task(&j, 0, 1);   /* one row of a small model: not worth a hand-off */
    else nx_threadpool_run(ctx->tp, swiglu_task, &j);
}

static nx_status moe_block(nx_ctx *ctx, qw_scratch *s, const qw_layer *L, int n, float *x, nx_error *err) {
    const qw_hparams *hp = &qw_of(ctx->model)->hp;
    const qw_ffn *f = &L->ffn;
    const int E = hp->n_embd, X = hp->n_expert, kx = hp->n_expert_used, F = hp->n_ff_exp, Fs = hp->n_ff_shexp;
    const float *u = s->u;
    nx_status st;
    float *router = s->b3;
    if ((st = mm(ctx, f->gate_inp, u, n, E, router, X, err)) != NX_OK) return st;
    memset(s->e_cnt, 0, (size_t)X * sizeof(int));
    for (int r = 0; r < n; r++) {
        float *p = router + (size_t)r * X;
        nx_softmax(p, X, 1.0f, NULL);
        int got = 0;
        if ((st = nx_topk(p, X, kx, s->sel + (size_t)r * kx, s->selw + (size_t)r * kx, &got, err)) != NX_OK) return st;
        for (int i = got; i < kx; i++) { s->sel[(size_t)r * kx + i] = 0; s->selw[(size_t)r * kx + i] = 0.0f; }
        float sum = 0.0f;
        for (int i = 0; i < kx; i++) sum += s->selw[(size_t)r * kx + i];
        sum = sum > 6.1e-5f ? sum : 6.1e-5f;
        for (int i = 0; i < kx; i++) {
            s->selw[(size_t)r * kx + i] /= sum;
            s->e_cnt[s->sel[(size_t)r * kx + i]]++;
        }
    }
    const nx_moe_experts ex = {.gate_up = f->gate_up_exps, .gate = f->gate_exps, .up = f->up_exps,
                               .down = f->down_exps, .n_expert = X, .n_used = kx, .n_embd = E, .n_ff = F,
                               .glu = nx_swiglu};
    const nx_moe_bufs b = {.e_cnt = s->e_cnt, .e_off = s->e_off, .e_slot = s->e_slot, .gath = s->gath,
                           .gu = s->gu, .hm = s->hm, .yo = s->yo, .ys = s->ys};
    if ((st = nx_moe_run(ctx, &ex, &b, n, u, s->sel, s->selw, s->moe_out, err)) != NX_OK) return st;
    if (f->up_shexp) {
        float *g = s->b1, *up = s->b2, *d = s->b4;
        if ((st = mm(ctx, &f->gate_inp_shexp, u, n, E, s->gs, 1, err)) != NX_OK) return st;
        if ((st = mm(ctx, f->gate_shexp, u, n, E, g, Fs, err)) != NX_OK) return st;
        if ((st = mm(ctx, f->up_shexp, u, n, E, up, Fs, err)) != NX_OK) return st;
        nx_swiglu(g, g, up, n * Fs);
        if ((st = mm(ctx, f->down_shexp, g, n, Fs, d, E, err)) != NX_OK) return st;
        nx_sigmoid(s->gs, s->gs, n);
        for (int r = 0; r < n; r++) nx_axpy(s->moe_out + (size_t)r * E, d + (size_t)r * E, s->gs[r], E);
    }
    nx_add(x, x, s->moe_out, n * E);
    return NX_OK;
}

nx_status qw_ffn_block(nx_ctx *ctx, qw_scratch *s, const qw_layer *L, int n, float *x, nx_error *err) {
    const qw_hparams *hp = &qw_of(ctx->model)->hp;
    const qw_ffn *f = &L->ffn;
    if (!f->present) return NX_OK;
    const int E = hp->n_embd, FF = hp->n_ff;
    nx_rmsnorm_rows(s->u, x, L->ffn_norm, E, n, hp->eps);
    if (hp->moe) return moe_block(ctx, s, L, n, x, err);
    nx_status st;
    float *g = s->b1, *up = s->b2, *d = s->b4;
    /* rows are independent here: chunks keep the n_ff-wide buffers small (prompt batches) */
    for (int r0 = 0; r0 < n; r0 += QW_FFN_ROWS) {
        const int nr = n - r0 < QW_FFN_ROWS ? n - r0 : QW_FFN_ROWS;
        const float *u = s->u + (size_t)r0 * E;
        const nx_mm_out gu[2] = {{f->gate, g, FF}, {f->up, up, FF}};
        if ((st = nx_matmul_multi(ctx->tp, &ctx->mm, gu, 2, u, nr, E, err)) != NX_OK) return st;
        swiglu_rows(ctx, g, up, (long)nr * FF);
        if ((st = mm(ctx, f->down, g, nr, FF, d, E, err)) != NX_OK) return st;
        nx_add(x + (size_t)r0 * E, x + (size_t)r0 * E, d, nr * E);
    }
    return NX_OK;
}

/* ===== Trunk ===== */

nx_status qw_forward(nx_ctx *ctx, const nx_ubatch *ub, nx_error *err) {
    const qw_model *qm = qw_of(ctx->model);
    const qw_hparams *hp = &qm->hp;
    qw_scratch *s = ctx->arch_state;
    const int n = ub->n, E = hp->n_embd;
    float *x = s->x;
    nx_status st;
    qw_embed(qm, qm->tok_embd, ub->tok, n, x);
    for (int il = 0; il < hp->n_main; il++) {
        const qw_layer *L = &qm->layers[il];
        st = L->kind == QW_ATTN ? qw_attn_block(ctx, s, L, ctx->kv, n, ub->pos, ub->seq, x, err)
                                : qw_deltanet_block(ctx, s, L, ub, x, err);
        if (st == NX_OK) st = qw_ffn_block(ctx, s, L, n, x, err);
        if (st != NX_OK) return st;
    }
    /* post-norm hidden of every row; logits of the rows that asked (consecutive output rows) */
    int n_out = 0, first = -1;
    for (int r = 0; r < n; r++) {
        float *h = nx_ctx_hidden_row(ctx, ub->row0 + r);
        nx_rmsnorm(h, x + (size_t)r * E, qm->output_norm, E, hp->eps);
        if (ub->want_logits[r]) {
            if (first < 0) first = r;
            memcpy(s->u + (size_t)n_out * E, h, (size_t)E * sizeof(float));
            n_out++;
        }
    }
    if (n_out)
        return mm(ctx, qm->output, s->u, n_out, E, nx_ctx_logits_row(ctx, ub->row0 + first), hp->n_vocab, err);
    return NX_OK;
}

/* kv apply hook: the first n logged tokens of seq's last snapshot batch onto rec's SSM parts. */
static void dn_apply(void *user, const nx_kv *kv, int seq, float *rec, int n) {
    const qw_model *qm = user;
    const qw_hparams *hp = &qm->hp;
    const qw_dn_run_fn run = qw_dn_run_pick();
    const float scale = 1.0f / sqrtf((float)hp->dk);
    dn_tok toks[NX_SNAPSHOT_MAX];
    for (int rl = 0; rl < qm->n_rec; rl++) {
        float *S = rec + nx_kv_ssm_offset(kv, rl);
        for (int h = 0; h < hp->nv; h++) {
            for (int t = 0; t < n; t++) toks[t] = dn_tok_of_log(hp, nx_kv_log_prev(kv, seq, rl, t), h);
            dn_chain(run, S + (size_t)h * hp->dv * hp->dk, hp->dv, hp->dk, scale, toks, n, -1, true);
        }
    }
}

nx_status qw_ctx_init(nx_ctx *ctx, nx_error *err) {
    const qw_model *qm = qw_of(ctx->model);
    const qw_hparams *hp = &qm->hp;
    int na = qm->n_attn ? qm->n_attn : 1, nr = qm->n_rec ? qm->n_rec : 1;
    if (qm->n_attn > 0) {
        nx_status hst = nx_ctx_check_head_dim(&ctx->params, hp->head_dim, "the model", err);
        if (hst != NX_OK) return hst;
    }
    int64_t *w = calloc((size_t)(2 * na + 2 * nr), sizeof *w);
    int *heads = calloc((size_t)na, sizeof *heads);
    if (!w || !heads) {
        free(w); free(heads);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < qm->n_attn; i++) w[i] = w[na + i] = (int64_t)hp->n_head_kv * hp->head_dim;
    for (int i = 0; i < qm->n_attn; i++) heads[i] = hp->n_head_kv;
    for (int i = 0; i < qm->n_rec; i++) {
        w[2 * na + i] = (int64_t)(hp->d_conv - 1) * hp->conv_dim;
        w[2 * na + nr + i] = (int64_t)hp->nv * hp->dv * hp->dk;
    }
    int64_t *lw = malloc((size_t)nr * sizeof *lw);
    if (!lw) { free(w); free(heads); return nx_fail(err, NX_ERR_NOMEM, "out of memory"); }
    for (int i = 0; i < nr; i++) lw[i] = dn_log_floats(hp);
    nx_kv_config kc = {
        .n_seq = ctx->params.n_seq_max, .n_ctx = ctx->params.n_ctx,
        .type_k = nx_ctx_kv_type(ctx->params.type_k), .type_v = nx_ctx_kv_type(ctx->params.type_v),
        .n_attn = qm->n_attn, .k_width = w, .v_width = w + na, .heads = heads,
        .n_rec = qm->n_rec, .conv_size = w + 2 * na, .ssm_size = w + 2 * na + nr,
        /* the SSM state is tens of MB per sequence: verify batches log their tokens instead of
         * snapshotting it per token (kv.h "deferred SSM") */
        .log_size = lw, .apply = dn_apply, .apply_user = (void *)qm,
    };
    nx_status st = nx_kv_create(&kc, &ctx->kv, err);
    free(w);
    free(lw);
    free(heads);
    if (st != NX_OK) return st;
    qw_scratch *s = NULL;
    st = qw_scratch_create(qm, ctx->params.n_ubatch, ctx->params.n_ctx, nx_threadpool_size(ctx->tp), &s, err);
    if (st != NX_OK) return st;
    ctx->arch_state = s;
    return NX_OK;
}

void qw_ctx_free(nx_ctx *ctx) {
    qw_scratch_free(ctx->arch_state);
    ctx->arch_state = NULL;
}
