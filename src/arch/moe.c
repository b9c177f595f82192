/* moe.c — routed-expert execution (see moe.h). */
#include "arch/moe.h"
#include <string.h>
#include "kernels/matmul.h"
#include "kernels/ops.h"

nx_tensor nx_moe_expert_view(const nx_tensor *t, int e) {
    nx_tensor v = *t;
    v.n_dims = 2;
    v.ne[2] = v.ne[3] = 1;
    v.data = (char *)t->data + (size_t)e * t->nb[2];
    v.nbytes = t->nb[2];
    /* the whole stack's packed copy holds one 2-D copy per expert (matmul.h) */
    v.packed = t->packed ? (const char *)t->packed + (size_t)e * nx_matmul_pack_slice_size(t) : NULL;
    return v;
}

static nx_status mm(nx_ctx *ctx, const nx_tensor *w, const float *x, int n, int64_t ldx, float *y, int64_t ldy,
                    nx_error *err) {
    return nx_matmul(ctx->tp, &ctx->mm, w, x, n, ldx, y, ldy, err);
}

nx_status nx_moe_run(nx_ctx *ctx, const nx_moe_experts *ex, const nx_moe_bufs *b, int n, const float *u,
                     const int *sel, const float *selw, float *out, nx_error *err) {
    const int X = ex->n_expert, kx = ex->n_used, E = ex->n_embd, F = ex->n_ff;
    nx_status st;
    /* group the (row, choice) pairs by expert: e_slot[e_off[e] ..] lists expert e's pairs */
    b->e_off[0] = 0;
    for (int e = 0; e < X; e++) b->e_off[e + 1] = b->e_off[e] + b->e_cnt[e];
    memset(b->e_cnt, 0, (size_t)X * sizeof(int));
    for (int i = 0; i < n * kx; i++) {
        const int e = sel[i];
        b->e_slot[b->e_off[e] + b->e_cnt[e]++] = i;
    }
    for (int e = 0; e < X; e++) {
        const int cnt = b->e_off[e + 1] - b->e_off[e];
        if (!cnt) continue;
        const int *slots = b->e_slot + b->e_off[e];
        for (int i = 0; i < cnt; i++)
            memcpy(b->gath + (size_t)i * E, u + (size_t)(slots[i] / kx) * E, (size_t)E * sizeof(float));
        if (ex->gate_up) {
            nx_tensor w = nx_moe_expert_view(ex->gate_up, e);
            if ((st = mm(ctx, &w, b->gath, cnt, E, b->gu, 2 * F, err)) != NX_OK) return st;
        } else {
            nx_tensor wg = nx_moe_expert_view(ex->gate, e), wu = nx_moe_expert_view(ex->up, e);
            if ((st = mm(ctx, &wg, b->gath, cnt, E, b->gu, 2 * F, err)) != NX_OK) return st;
            if ((st = mm(ctx, &wu, b->gath, cnt, E, b->gu + F, 2 * F, err)) != NX_OK) return st;
        }
        for (int i = 0; i < cnt; i++)
            ex->glu(b->hm + (size_t)i * F, b->gu + (size_t)i * 2 * F, b->gu + (size_t)i * 2 * F + F, F);
        nx_tensor wd = nx_moe_expert_view(ex->down, e);
        if ((st = mm(ctx, &wd, b->hm, cnt, F, b->yo, E, err)) != NX_OK) return st;
        for (int i = 0; i < cnt; i++)
            memcpy(b->ys + (size_t)slots[i] * E, b->yo + (size_t)i * E, (size_t)E * sizeof(float));
    }
    /* each row sums its experts in its own top-k order: independent of the batch */
    for (int r = 0; r < n; r++) {
        float *y = out + (size_t)r * E;
        memset(y, 0, (size_t)E * sizeof(float));
        for (int i = 0; i < kx; i++) nx_axpy(y, b->ys + ((size_t)r * kx + i) * E, selw[(size_t)r * kx + i], E);
    }
    return NX_OK;
}
