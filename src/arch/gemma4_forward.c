/*
 * gemma4_forward.c — the Gemma 4 target forward pass over a ubatch (spec gemma4.md §3):
 * scaled token embedding, per-layer embeddings (PLE), iSWA attention (q/k norms, weightless V
 * norm, NEOX RoPE per layer type with proportional factors on full layers, scale 1.0, GQA,
 * KV sharing), dense GELU(tanh) FFN or MoE (router with scale, experts with per-expert scale,
 * dense branch), post norms, PLE injection, layer output scale, final norm, LM head, soft-cap.
 *
 * Row independence (decode == prefill, bit for bit): matmuls are batch-invariant; every other
 * op runs per row in a fixed order — attention of a row reads its own sequence's positions
 * lo..pos in order (whatever ring slot holds them), MoE sums a row's experts in its own top-k
 * order. Threads split whole (row, head) units, never a reduction, so results do not depend on
 * the thread count either.
 * Must never: allocate (g4_scratch is sized for n_ubatch rows at context creation).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "arch/gemma4.h"
#include "arch/moe.h"
#include "arch/attn_view.h"
#include "kernels/cpu.h"
#include "quant/quant.h"

typedef struct g4_scratch {
    int n_rows, n_threads, max_cells;
    float *x, *u, *a;           /* [n][E]: residual stream, normed input, block output */
    float *q, *o;               /* [n][max_q] */
    float *k, *v;               /* [n][max_kv] */
    float *g, *up;              /* [n][max(max_ff, P)] */
    float *pl;                  /* [n][L*P] per-layer inputs */
    float *plt;                 /* [L*P] one token's per-layer embedding */
    float *rc_full, *rc_swa;    /* [n][n_rot] rope cos/sin per row */
    float *thr;                 /* per thread: thr_stride floats (the attention kernel's work) */
    size_t thr_stride;
    int32_t *alo, *ahi;         /* [n] visible positions per row of the current attention layer */
    /* MoE */
    int *sel, *e_cnt, *e_off, *e_slot;
    float *selw, *router, *gath, *gu, *hm, *yo, *ys, *mo;
} g4_scratch;

static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }

static void scratch_free(g4_scratch *s) {
    if (!s) return;
    free(s->x); free(s->u); free(s->a); free(s->q); free(s->o); free(s->k); free(s->v); free(s->g); free(s->up);
    free(s->pl); free(s->plt); free(s->rc_full); free(s->rc_swa); free(s->thr); free(s->alo); free(s->ahi);
    free(s->sel); free(s->e_cnt); free(s->e_off); free(s->e_slot); free(s->selw); free(s->router); free(s->gath);
    free(s->gu); free(s->hm); free(s->yo); free(s->ys); free(s->mo);
    free(s);
}

static nx_status scratch_create(const g4_model *gm, int n, int max_cells, int n_threads, g4_scratch **out,
                                nx_error *err) {
    const g4_hparams *hp = &gm->hp;
    *out = NULL;
    g4_scratch *s = calloc(1, sizeof *s);
    if (!s) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    s->n_rows = n;
    s->n_threads = n_threads;
    s->max_cells = max_cells;
    const size_t N = (size_t)n, E = (size_t)hp->n_embd, PL = (size_t)hp->P * (size_t)hp->n_layer;
    const size_t FF = maxz((size_t)hp->max_ff, (size_t)hp->P);
    s->x = malloc(N * E * sizeof(float));
    s->u = malloc(N * E * sizeof(float));
    s->a = malloc(N * E * sizeof(float));
    s->q = malloc(N * (size_t)hp->max_q * sizeof(float));
    s->o = malloc(N * (size_t)hp->max_q * sizeof(float));
    s->k = malloc(N * (size_t)hp->max_kv * sizeof(float));
    s->v = malloc(N * (size_t)hp->max_kv * sizeof(float));
    s->g = malloc(N * FF * sizeof(float));
    s->up = malloc(N * FF * sizeof(float));
    s->pl = malloc(maxz(N * PL, 1) * sizeof(float));
    s->plt = malloc(maxz(PL, 1) * sizeof(float));
    s->rc_full = malloc(N * (size_t)hp->n_rot_full * sizeof(float));
    s->rc_swa = malloc(N * (size_t)hp->n_rot_swa * sizeof(float));
    size_t aw = 16;
    for (int il = 0; il < hp->n_layer; il++) aw = maxz(aw, nx_attend_work_floats(gm->layers[il].nh, gm->layers[il].nkv, gm->layers[il].hd));
    s->thr_stride = (aw + 15) & ~(size_t)15;
    s->alo = malloc(N * sizeof(int32_t));
    s->ahi = malloc(N * sizeof(int32_t));
    s->thr = malloc((size_t)n_threads * s->thr_stride * sizeof(float));
    bool ok = s->x && s->u && s->a && s->q && s->o && s->k && s->v && s->g && s->up && s->pl && s->plt && s->rc_full &&
              s->rc_swa && s->thr && s->alo && s->ahi;
    if (hp->n_expert > 0) {
        const size_t X = (size_t)hp->n_expert, kx = (size_t)hp->n_expert_used, F = (size_t)hp->n_ff_exp;
        s->sel = malloc(N * kx * sizeof(int));
        s->selw = malloc(N * kx * sizeof(float));
        s->e_cnt = malloc(X * sizeof(int));
        s->e_off = malloc((X + 1) * sizeof(int));
        s->e_slot = malloc(N * kx * sizeof(int));
        s->router = malloc(N * X * sizeof(float));
        s->gath = malloc(N * E * sizeof(float));
        s->gu = malloc(N * 2 * F * sizeof(float));
        s->hm = malloc(N * F * sizeof(float));
        s->yo = malloc(N * E * sizeof(float));
        s->ys = malloc(N * kx * E * sizeof(float));
        s->mo = malloc(N * E * sizeof(float));
        ok = ok && s->sel && s->selw && s->e_cnt && s->e_off && s->e_slot && s->router && s->gath && s->gu && s->hm &&
             s->yo && s->ys && s->mo;
    }
    if (!ok) {
        scratch_free(s);
        return nx_fail(err, NX_ERR_NOMEM, "cannot allocate the gemma4 forward scratch for %d rows", n);
    }
    *out = s;
    return NX_OK;
}

static inline nx_status mm(nx_ctx *ctx, const nx_tensor *w, const float *x, int n, int64_t ldx, float *y, int64_t ldy,
                           nx_error *err) {
    return nx_matmul(ctx->tp, &ctx->mm, w, x, n, ldx, y, ldy, err);
}

/* ===== Attention ===== */

typedef struct attn_job {
    const g4_layer *L;
    const nx_kv *kv;
    g4_scratch *s;
    int n, n_swa;
    const nx_pos *pos;
    const nx_seq_id *seq;
} attn_job;

static void attn_task(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    const g4_layer *L = j->L;
    /* scale 1.0: the q/k norms replace 1/sqrt(d) */
    nx_attend_rows(j->kv, L->kv_layer, L->nh, L->nkv, L->hd, j->n, j->seq, j->s->alo, j->s->ahi, j->s->q,
                   (size_t)L->nh * L->hd, (size_t)L->hd, j->s->o, 1.0f, j->s->thr + (size_t)ith * j->s->thr_stride, ith, nth);
}

static nx_status attn_block(nx_ctx *ctx, g4_scratch *s, const g4_layer *L, const nx_ubatch *ub, float *x,
                            nx_error *err) {
    const g4_model *gm = g4_of(ctx->model);
    const g4_hparams *hp = &gm->hp;
    const int n = ub->n, E = hp->n_embd, H = L->nh, Hkv = L->nkv, D = L->hd;
    const nx_rope_params *rp = g4_rope(gm, L->swa);
    const float *rc = L->swa ? s->rc_swa : s->rc_full;
    const int nr = rp->n_rot;
    nx_status st;
    nx_rmsnorm_rows(s->u, x, L->attn_norm, E, n, hp->eps);
    if ((st = mm(ctx, L->wq, s->u, n, E, s->q, (int64_t)H * D, err)) != NX_OK) return st;
    for (int r = 0; r < n; r++) {
        float *qr = s->q + (size_t)r * H * D;
        for (int h = 0; h < H; h++) nx_rmsnorm(qr + (size_t)h * D, qr + (size_t)h * D, L->q_norm, D, hp->eps);
        nx_rope_apply(qr, H, D, rp, rc + (size_t)r * nr);
    }
    if (L->has_kv) {
        if ((st = mm(ctx, L->wk, s->u, n, E, s->k, (int64_t)Hkv * D, err)) != NX_OK) return st;
        if (L->k_eq_v) memcpy(s->v, s->k, (size_t)n * Hkv * D * sizeof(float));   /* raw K projection */
        else if ((st = mm(ctx, L->wv, s->u, n, E, s->v, (int64_t)Hkv * D, err)) != NX_OK) return st;
        for (int r = 0; r < n; r++) {
            float *kr = s->k + (size_t)r * Hkv * D, *vr = s->v + (size_t)r * Hkv * D;
            for (int h = 0; h < Hkv; h++) {
                nx_rmsnorm(kr + (size_t)h * D, kr + (size_t)h * D, L->k_norm, D, hp->eps);
                nx_rmsnorm(vr + (size_t)h * D, vr + (size_t)h * D, NULL, D, hp->eps);   /* weightless, never roped */
            }
            nx_rope_apply(kr, Hkv, D, rp, rc + (size_t)r * nr);
            nx_kv_put_k(ctx->kv, ub->seq[r], L->kv_layer, ub->pos[r], kr);
            nx_kv_put_v(ctx->kv, ub->seq[r], L->kv_layer, ub->pos[r], vr);
        }
    }
    for (int r = 0; r < n; r++) {
        s->ahi[r] = ub->pos[r];
        s->alo[r] = L->swa ? ub->pos[r] - hp->n_swa + 1 : 0;
    }
    attn_job job = {.L = L, .kv = ctx->kv, .s = s, .n = n, .n_swa = hp->n_swa, .pos = ub->pos, .seq = ub->seq};
    nx_threadpool_run(ctx->tp, attn_task, &job);
    if ((st = mm(ctx, L->wo, s->o, n, (int64_t)H * D, s->a, E, err)) != NX_OK) return st;
    nx_rmsnorm_rows(s->a, s->a, L->post_attn_norm, E, n, hp->eps);
    nx_add(x, x, s->a, n * E);
    return NX_OK;
}

/* ===== FFN ===== */

/* out = down(gelu(gate u) * up u) for n rows of u (no norm). */
static nx_status ffn_dense(nx_ctx *ctx, g4_scratch *s, const g4_layer *L, int n, const float *u, float *out,
                           nx_error *err) {
    const int E = g4_of(ctx->model)->hp.n_embd, F = L->n_ff;
    nx_status st;
    if ((st = mm(ctx, L->gate, u, n, E, s->g, F, err)) != NX_OK) return st;
    if ((st = mm(ctx, L->up, u, n, E, s->up, F, err)) != NX_OK) return st;
    nx_geglu(s->g, s->g, s->up, n * F);
    return mm(ctx, L->down, s->g, n, F, out, E, err);
}

/* Routed experts of n rows: s->mo = sum over the row's top-k of w * scale_e * expert_e(u). */
static nx_status moe_experts(nx_ctx *ctx, g4_scratch *s, const g4_layer *L, int n, const float *u, nx_error *err) {
    const g4_hparams *hp = &g4_of(ctx->model)->hp;
    const int E = hp->n_embd, X = hp->n_expert, kx = hp->n_expert_used, F = hp->n_ff_exp;
    nx_status st;
    memset(s->e_cnt, 0, (size_t)X * sizeof(int));
    for (int r = 0; r < n; r++) {
        float *p = s->router + (size_t)r * X;
        int *sel = s->sel + (size_t)r * kx;
        float *w = s->selw + (size_t)r * kx;
        nx_softmax(p, X, 1.0f, NULL);
        int got = 0;
        if ((st = nx_topk(p, X, kx, sel, w, &got, err)) != NX_OK) return st;
        for (int i = got; i < kx; i++) { sel[i] = 0; w[i] = 0.0f; }   /* NaN router rows only */
        float sum = 0.0f;
        for (int i = 0; i < kx; i++) sum += w[i];
        for (int i = 0; i < kx; i++) {
            w[i] = sum > 0.0f ? w[i] / sum : 0.0f;   /* renormalised to sum 1 */
            if (L->exp_scale) w[i] *= L->exp_scale[sel[i]];
            s->e_cnt[sel[i]]++;
        }
    }
    const nx_moe_experts ex = {.gate_up = L->gate_up_exps, .gate = L->gate_exps, .up = L->up_exps,
                               .down = L->down_exps, .n_expert = X, .n_used = kx, .n_embd = E, .n_ff = F,
                               .glu = nx_geglu};
    const nx_moe_bufs b = {.e_cnt = s->e_cnt, .e_off = s->e_off, .e_slot = s->e_slot, .gath = s->gath,
                           .gu = s->gu, .hm = s->hm, .yo = s->yo, .ys = s->ys};
    return nx_moe_run(ctx, &ex, &b, n, u, s->sel, s->selw, s->mo, err);
}

static nx_status ffn_block(nx_ctx *ctx, g4_scratch *s, const g4_layer *L, int n, float *x, nx_error *err) {
    const g4_hparams *hp = &g4_of(ctx->model)->hp;
    const int E = hp->n_embd;
    nx_status st;
    nx_rmsnorm_rows(s->u, x, L->ffn_norm, E, n, hp->eps);
    if ((st = ffn_dense(ctx, s, L, n, s->u, s->a, err)) != NX_OK) return st;
    if (L->moe) {
        /* router input: rms0(h) * scale / sqrt(n_embd) (the residual h, not the FFN input) */
        for (int r = 0; r < n; r++) {
            float *ur = s->u + (size_t)r * E;
            nx_rmsnorm(ur, x + (size_t)r * E, NULL, E, hp->eps);
            nx_mul(ur, ur, L->router_scale, E);
        }
        if ((st = mm(ctx, L->gate_inp, s->u, n, E, s->router, hp->n_expert, err)) != NX_OK) return st;
        nx_rmsnorm_rows(s->u, x, L->pre_ffw_norm_2, E, n, hp->eps);
        if ((st = moe_experts(ctx, s, L, n, s->u, err)) != NX_OK) return st;
        nx_rmsnorm_rows(s->a, s->a, L->post_ffw_norm_1, E, n, hp->eps);
        nx_rmsnorm_rows(s->mo, s->mo, L->post_ffw_norm_2, E, n, hp->eps);
        nx_add(s->a, s->a, s->mo, n * E);
    }
    nx_rmsnorm_rows(s->a, s->a, L->post_ffw_norm, E, n, hp->eps);
    nx_add(x, x, s->a, n * E);
    return NX_OK;
}

/* ===== Per-layer embeddings ===== */

/* s->pl[r][il*P + i] = (rms(proj(x)[il], eps * n_embd) + tok_pl[il] * sqrt(P)) / sqrt(2). */
static nx_status ple_inputs(nx_ctx *ctx, g4_scratch *s, const nx_ubatch *ub, const float *x, nx_error *err) {
    const g4_model *gm = g4_of(ctx->model);
    const g4_hparams *hp = &gm->hp;
    const int n = ub->n, E = hp->n_embd, P = hp->P, PL = hp->P * hp->n_layer;
    nx_status st;
    if ((st = mm(ctx, gm->ple_proj, x, n, E, s->pl, PL, err)) != NX_OK) return st;
    /* eps * n_embd == scaling the projection by 1/sqrt(n_embd) before the norm */
    nx_rmsnorm_rows(s->pl, s->pl, gm->ple_norm, P, n * hp->n_layer, hp->eps * (float)E);
    const float sp = sqrtf((float)P), inv2 = (float)(1.0 / sqrt(2.0));
    const nx_tensor *t = gm->ple_tok;
    for (int r = 0; r < n; r++) {
        float *pr = s->pl + (size_t)r * PL;
        nx_dequantize_row(t->type, (const char *)t->data + (size_t)ub->tok[r] * t->nb[1], s->plt, PL);
        for (int i = 0; i < PL; i++) pr[i] = (pr[i] + s->plt[i] * sp) * inv2;
    }
    return NX_OK;
}

/* x += rms(proj(gelu(inp_gate x) * pl[il]), post_norm). */
static nx_status ple_block(nx_ctx *ctx, g4_scratch *s, const g4_layer *L, int n, float *x, nx_error *err) {
    const g4_hparams *hp = &g4_of(ctx->model)->hp;
    const int E = hp->n_embd, P = hp->P, PL = hp->P * hp->n_layer;
    nx_status st;
    if ((st = mm(ctx, L->inp_gate, x, n, E, s->g, P, err)) != NX_OK) return st;
    for (int r = 0; r < n; r++) {
        float *gr = s->g + (size_t)r * P;
        nx_gelu(gr, gr, P);
        nx_mul(gr, gr, s->pl + (size_t)r * PL + (size_t)L->il * P, P);
    }
    if ((st = mm(ctx, L->proj, s->g, n, P, s->a, E, err)) != NX_OK) return st;
    nx_rmsnorm_rows(s->a, s->a, L->post_norm, E, n, hp->eps);
    nx_add(x, x, s->a, n * E);
    return NX_OK;
}

/* ===== Forward ===== */

nx_status g4_forward(nx_ctx *ctx, const nx_ubatch *ub, nx_error *err) {
    const g4_model *gm = g4_of(ctx->model);
    const g4_hparams *hp = &gm->hp;
    g4_scratch *s = ctx->arch_state;
    const int n = ub->n, E = hp->n_embd;
    float *x = s->x;
    nx_status st;
    g4_embed(gm, ub->tok, n, x);
    if (hp->P > 0 && (st = ple_inputs(ctx, s, ub, x, err)) != NX_OK) return st;
    for (int r = 0; r < n; r++) {
        nx_rope_cache(&gm->rope_full, ub->pos[r], s->rc_full + (size_t)r * hp->n_rot_full);
        nx_rope_cache(&gm->rope_swa, ub->pos[r], s->rc_swa + (size_t)r * hp->n_rot_swa);
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const g4_layer *L = &gm->layers[il];
        if ((st = attn_block(ctx, s, L, ub, x, err)) != NX_OK) return st;
        if ((st = ffn_block(ctx, s, L, n, x, err)) != NX_OK) return st;
        if (hp->P > 0 && (st = ple_block(ctx, s, L, n, x, err)) != NX_OK) return st;
        if (L->has_out_scale) nx_scale(x, x, L->out_scale, n * E);
    }
    /* post-norm hidden of every row; logits of the rows that asked (consecutive output rows) */
    int n_out = 0, first = -1;
    for (int r = 0; r < n; r++) {
        float *h = nx_ctx_hidden_row(ctx, ub->row0 + r);
        nx_rmsnorm(h, x + (size_t)r * E, gm->output_norm, E, hp->eps);
        if (ub->want_logits[r]) {
            if (first < 0) first = r;
            memcpy(s->u + (size_t)n_out * E, h, (size_t)E * sizeof(float));
            n_out++;
        }
    }
    if (!n_out) return NX_OK;
    float *lg = nx_ctx_logits_row(ctx, ub->row0 + first);
    if ((st = mm(ctx, gm->output, s->u, n_out, E, lg, hp->n_vocab, err)) != NX_OK) return st;
    if (hp->softcap > 0.0f) nx_softcap(lg, lg, n_out * hp->n_vocab, hp->softcap);
    return NX_OK;
}

/* ===== Context ===== */

nx_status g4_ctx_init(nx_ctx *ctx, nx_error *err) {
    const g4_model *gm = g4_of(ctx->model);
    const g4_hparams *hp = &gm->hp;
    const int nk = gm->n_kv;
    for (int il = 0; il < hp->n_layer; il++) {
        nx_status hst = nx_ctx_check_head_dim(&ctx->params, gm->layers[il].hd, "the model", err);
        if (hst != NX_OK) return hst;
    }
    int64_t *w = calloc((size_t)nk, sizeof *w);
    int *ring = calloc((size_t)nk, sizeof *ring), *win = calloc((size_t)nk, sizeof *win);
    int *heads = calloc((size_t)nk, sizeof *heads);
    if (!w || !ring || !win || !heads) {
        free(w); free(ring); free(win); free(heads);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    }
    /* SWA layers: a ring holding the window of the first row of a ubatch plus the ubatch */
    const int64_t cells = (int64_t)hp->n_swa - 1 + ctx->params.n_ubatch;
    for (int il = 0; il < hp->n_layer; il++) {
        const g4_layer *L = &gm->layers[il];
        if (!L->has_kv) continue;
        w[L->kv_layer] = (int64_t)L->nkv * L->hd;
        heads[L->kv_layer] = L->nkv;
        if (L->swa && cells < ctx->params.n_ctx) {
            ring[L->kv_layer] = (int)cells;
            win[L->kv_layer] = hp->n_swa;
        }
    }
    nx_kv_config kc = {
        .n_seq = ctx->params.n_seq_max, .n_ctx = ctx->params.n_ctx,
        .type_k = nx_ctx_kv_type(ctx->params.type_k), .type_v = nx_ctx_kv_type(ctx->params.type_v),
        .n_attn = nk, .k_width = w, .v_width = w, .ring_cells = ring, .window = win,
        .heads = heads,
    };
    nx_status st = nx_kv_create(&kc, &ctx->kv, err);
    free(w); free(ring); free(win); free(heads);
    if (st != NX_OK) return st;
    int max_cells = 1;
    for (int l = 0; l < nk; l++)
        if (nx_kv_cells(ctx->kv, l) > max_cells) max_cells = nx_kv_cells(ctx->kv, l);
    g4_scratch *s = NULL;
    st = scratch_create(gm, ctx->params.n_ubatch, max_cells, nx_threadpool_size(ctx->tp), &s, err);
    if (st != NX_OK) return st;
    ctx->arch_state = s;
    return NX_OK;
}

void g4_ctx_free(nx_ctx *ctx) {
    scratch_free(ctx->arch_state);
    ctx->arch_state = NULL;
}
