/*
 * llama_forward.c — the `llama` forward pass over a ubatch: token embedding, per layer
 * x += Wo·attention(RoPE(Wq·n), RoPE(Wk·n), Wv·n) with n = RMSNorm(x) (GQA, causal by position,
 * scale 1/sqrt(head dim)), x += down(silu(gate(n)) * up(n)) with n = RMSNorm(x, ffn_norm), final
 * norm, LM head.
 *
 * Row independence (decode == prefill, bit for bit): matmuls are batch-invariant; every other
 * op runs per row in a fixed order — attention of a row reads its own sequence's positions
 * 0..pos in order. Threads split whole (row, head) units, never a reduction, so results do not
 * depend on the thread count either.
 * Must never: allocate (ll_scratch is sized for n_ubatch rows at context creation).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "arch/llama.h"
#include "arch/attn_view.h"
#include "core/fp16.h"
#include "quant/quant.h"

#define LL_FFN_ROWS 64   /* the FFN runs this many rows at a time (its n_ff-wide buffers are the largest) */

typedef struct ll_scratch {
    int n_ctx;
    float *x, *u;               /* [n][E]: residual stream, normed input / block output */
    float *q, *o;               /* [n][H*D] */
    float *k, *v;               /* [n][Hkv*D] */
    float *g, *up;              /* [min(n, LL_FFN_ROWS)][F] */
    float *rope;                /* [n_rot] cos / sin of one position */
    float *thr;                 /* per thread: thr_stride floats (the attention kernel's work) */
    size_t thr_stride;
} ll_scratch;

static void scratch_free(ll_scratch *s) {
    if (!s) return;
    free(s->x); free(s->u); free(s->q); free(s->o); free(s->k); free(s->v); free(s->g); free(s->up);
    free(s->rope); free(s->thr);
    free(s);
}

static nx_status scratch_create(const ll_hparams *hp, int n, int n_ctx, int n_threads, ll_scratch **out,
                                nx_error *err) {
    *out = NULL;
    ll_scratch *s = calloc(1, sizeof *s);
    if (!s) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    const size_t N = (size_t)n, E = (size_t)hp->n_embd, D = (size_t)hp->head_dim;
    const size_t Q = (size_t)hp->n_head * D, KV = (size_t)hp->n_head_kv * D;
    const size_t NF = N < LL_FFN_ROWS ? N : LL_FFN_ROWS, F = (size_t)hp->n_ff;
    s->n_ctx = n_ctx;
    s->x = malloc(N * E * sizeof(float));
    s->u = malloc(N * E * sizeof(float));
    s->q = malloc(N * Q * sizeof(float));
    s->o = malloc(N * Q * sizeof(float));
    s->k = malloc(N * KV * sizeof(float));
    s->v = malloc(N * KV * sizeof(float));
    s->g = malloc(NF * F * sizeof(float));
    s->up = malloc(NF * F * sizeof(float));
    s->rope = malloc(((size_t)hp->n_rot + 2) * sizeof(float));
    s->thr_stride = (nx_attend_work_floats(hp->n_head, hp->n_head_kv, (int)D) + 15) & ~(size_t)15;
    s->thr = malloc((size_t)n_threads * s->thr_stride * sizeof(float));
    if (!(s->x && s->u && s->q && s->o && s->k && s->v && s->g && s->up && s->rope && s->thr)) {
        scratch_free(s);
        return nx_fail(err, NX_ERR_NOMEM, "cannot allocate the forward scratch for %d rows", n);
    }
    *out = s;
    return NX_OK;
}

/* ===== Attention ===== */

typedef struct attn_job {
    const ll_hparams *hp;
    const nx_kv *kv;
    int layer;
    ll_scratch *s;
    int n;
    const nx_pos *pos;
    const nx_seq_id *seq;
} attn_job;

/* Row r sees positions 0..pos[r] of its own sequence. */
static void attn_task(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    const int H = j->hp->n_head, D = j->hp->head_dim;
    nx_attend_rows(j->kv, j->layer, H, j->hp->n_head_kv, D, j->n, j->seq, NULL, j->pos, j->s->q, (size_t)H * D, (size_t)D, j->s->o,
                   j->hp->kq_scale, j->s->thr + (size_t)ith * j->s->thr_stride, ith, nth);
}

static nx_status attn_block(nx_ctx *ctx, ll_scratch *s, const ll_layer *L, int il, const nx_ubatch *ub, float *x,
                            nx_error *err) {
    const ll_model *lm = ll_of(ctx->model);
    const ll_hparams *hp = &lm->hp;
    const int n = ub->n, E = hp->n_embd, H = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    nx_status st;
    nx_rmsnorm_rows(s->u, x, L->attn_norm, E, n, hp->eps);
    const nx_mm_out qkv[3] = {{L->wq, s->q, H * D}, {L->wk, s->k, Hkv * D}, {L->wv, s->v, Hkv * D}};
    if ((st = nx_matmul_multi(ctx->tp, &ctx->mm, qkv, 3, s->u, n, E, err)) != NX_OK) return st;
    for (int r = 0; r < n; r++) {
        float *qr = s->q + (size_t)r * H * D, *kr = s->k + (size_t)r * Hkv * D;
        nx_rope_cache(&lm->rope, ub->pos[r], s->rope);
        nx_rope_apply(qr, H, D, &lm->rope, s->rope);
        nx_rope_apply(kr, Hkv, D, &lm->rope, s->rope);
        nx_kv_put_k(ctx->kv, ub->seq[r], il, ub->pos[r], kr);
        nx_kv_put_v(ctx->kv, ub->seq[r], il, ub->pos[r], s->v + (size_t)r * Hkv * D);
    }
    attn_job job = {.hp = hp, .kv = ctx->kv, .layer = il, .s = s, .n = n, .pos = ub->pos, .seq = ub->seq};
    nx_threadpool_run(ctx->tp, attn_task, &job);
    if ((st = nx_matmul(ctx->tp, &ctx->mm, L->wo, s->o, n, H * D, s->u, E, err)) != NX_OK) return st;
    nx_add(x, x, s->u, n * E);
    return NX_OK;
}

/* ===== FFN ===== */

static nx_status ffn_block(nx_ctx *ctx, ll_scratch *s, const ll_layer *L, int n, float *x, nx_error *err) {
    const ll_hparams *hp = &ll_of(ctx->model)->hp;
    const int E = hp->n_embd, F = hp->n_ff;
    nx_rmsnorm_rows(s->u, x, L->ffn_norm, E, n, hp->eps);
    for (int r0 = 0; r0 < n; r0 += LL_FFN_ROWS) {
        const int nr = n - r0 < LL_FFN_ROWS ? n - r0 : LL_FFN_ROWS;
        const nx_mm_out gu[2] = {{L->gate, s->g, F}, {L->up, s->up, F}};
        nx_status st = nx_matmul_multi(ctx->tp, &ctx->mm, gu, 2, s->u + (size_t)r0 * E, nr, E, err);
        if (st != NX_OK) return st;
        nx_swiglu(s->g, s->g, s->up, nr * F);
        /* the down projection's output reuses the block input rows already consumed */
        float *d = s->u + (size_t)r0 * E;
        if ((st = nx_matmul(ctx->tp, &ctx->mm, L->down, s->g, nr, F, d, E, err)) != NX_OK) return st;
        nx_add(x + (size_t)r0 * E, x + (size_t)r0 * E, d, nr * E);
    }
    return NX_OK;
}

/* ===== Model ===== */

nx_status ll_forward(nx_ctx *ctx, const nx_ubatch *ub, nx_error *err) {
    const ll_model *lm = ll_of(ctx->model);
    const ll_hparams *hp = &lm->hp;
    ll_scratch *s = ctx->arch_state;
    const int n = ub->n, E = hp->n_embd;
    const nx_tensor *te = lm->tok_embd;
    float *x = s->x;
    for (int r = 0; r < n; r++)
        nx_dequantize_row(te->type, (const char *)te->data + (size_t)ub->tok[r] * te->nb[1], x + (size_t)r * E, E);
    for (int il = 0; il < hp->n_layer; il++) {
        nx_status st = attn_block(ctx, s, &lm->layers[il], il, ub, x, err);
        if (st == NX_OK) st = ffn_block(ctx, s, &lm->layers[il], n, x, err);
        if (st != NX_OK) return st;
    }
    /* post-norm hidden of every row; logits of the rows that asked (consecutive output rows) */
    int n_out = 0, first = -1;
    for (int r = 0; r < n; r++) {
        float *h = nx_ctx_hidden_row(ctx, ub->row0 + r);
        nx_rmsnorm(h, x + (size_t)r * E, lm->output_norm, E, hp->eps);
        if (ub->want_logits[r]) {
            if (first < 0) first = r;
            memcpy(s->u + (size_t)n_out * E, h, (size_t)E * sizeof(float));
            n_out++;
        }
    }
    if (!n_out) return NX_OK;
    return nx_matmul(ctx->tp, &ctx->mm, lm->output, s->u, n_out, E, nx_ctx_logits_row(ctx, ub->row0 + first),
                     hp->n_vocab, err);
}

nx_status ll_ctx_init(nx_ctx *ctx, nx_error *err) {
    const ll_hparams *hp = &ll_of(ctx->model)->hp;
    int64_t *w = malloc((size_t)hp->n_layer * sizeof *w);
    if (!w) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < hp->n_layer; i++) w[i] = (int64_t)hp->n_head_kv * hp->head_dim;
    int *heads = malloc((size_t)hp->n_layer * sizeof *heads);
    if (!heads) {
        free(w);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < hp->n_layer; i++) heads[i] = hp->n_head_kv;
    nx_kv_config kc = {
        .n_seq = ctx->params.n_seq_max, .n_ctx = ctx->params.n_ctx,
        .type_k = ctx->params.type_k == NX_CACHE_F16 ? NX_TYPE_F16 : NX_TYPE_F32,
        .type_v = ctx->params.type_v == NX_CACHE_F16 ? NX_TYPE_F16 : NX_TYPE_F32,
        .n_attn = hp->n_layer, .k_width = w, .v_width = w, .heads = heads,
    };
    nx_status st = nx_kv_create(&kc, &ctx->kv, err);
    free(w);
    free(heads);
    if (st != NX_OK) return st;
    ll_scratch *s = NULL;
    st = scratch_create(hp, ctx->params.n_ubatch, ctx->params.n_ctx, nx_threadpool_size(ctx->tp), &s, err);
    if (st != NX_OK) return st;
    ctx->arch_state = s;
    return NX_OK;
}

void ll_ctx_free(nx_ctx *ctx) {
    scratch_free(ctx->arch_state);
    ctx->arch_state = NULL;
}
