/*
 * moe.h — routed-expert execution shared by the mixture-of-experts architectures (qwen35moe,
 * gemma4 MoE). The caller routes (each architecture has its own gating: softmax, renormalise,
 * per-expert scales...) and counts rows per expert; this runs every expert once over the rows
 * that chose it (one batched matmul per expert) and sums each row's experts in the row's own
 * top-k order, so a row's result does not depend on the other rows of the batch.
 * Never allocates: the caller's scratch holds every buffer.
 */
#ifndef NX_ARCH_MOE_H
#define NX_ARCH_MOE_H

#include "ctx.h"

typedef struct nx_moe_experts {
    const nx_tensor *gate_up;        /* merged {E, 2F, X}, gate rows first; or NULL */
    const nx_tensor *gate, *up;      /* {E, F, X} each, when not merged */
    const nx_tensor *down;           /* {F, E, X} */
    int n_expert, n_used, n_embd, n_ff;
    void (*glu)(float *y, const float *g, const float *u, int n);   /* nx_swiglu, nx_geglu */
} nx_moe_experts;

/* Scratch for n rows: e_cnt [X] (filled by the caller's routing: rows per expert), e_off [X+1],
 * e_slot [n*k], gath [n][E], gu [n][2F], hm [n][F], yo [n][E], ys [n*k][E]. */
typedef struct nx_moe_bufs {
    int *e_cnt, *e_off, *e_slot;
    float *gath, *gu, *hm, *yo, *ys;
} nx_moe_bufs;

/* out[r] = sum_i selw[r][i] * expert_{sel[r][i]}(u[r]) for r < n (sel, selw: [n][n_used]). */
nx_status nx_moe_run(nx_ctx *ctx, const nx_moe_experts *ex, const nx_moe_bufs *b, int n, const float *u,
                     const int *sel, const float *selw, float *out, nx_error *err);

/* Expert e's 2-D slice of a 3-D expert tensor. */
nx_tensor nx_moe_expert_view(const nx_tensor *t, int e);

#endif
