/*
 * quant.c — type dispatch for the reference (de)quantizers.
 *
 * Owns the generic nx_dequantize_row / nx_quantize_row entry points: checks the type and
 * the row length, rejects non-finite input for the block formats, and calls the typed
 * functions of quant_float.c, quant_legacy.c, quant_k.c and quant_iq.c. No state.
 */
#include <math.h>
#include <string.h>
#include "quant/quant.h"

typedef void (*dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*quant_fn)(const float *src, void *dst, int64_t n);

static void dequant_f32(const void *src, float *dst, int64_t n) { memmove(dst, src, (size_t)n * sizeof(float)); }
static void quant_f32(const float *src, void *dst, int64_t n) { memmove(dst, src, (size_t)n * sizeof(float)); }

/* Casts between the typed signatures and the void* ones: the pointee types are only a view
 * of the same bytes, so we wrap rather than cast function pointers. */
#define DEQ(name, blk) static void deq_##name(const void *s, float *d, int64_t n) { nx_dequantize_row_##name((const blk *)s, d, n); }
#define QNT(name, blk) static void qnt_##name(const float *s, void *d, int64_t n) { nx_quantize_row_##name##_ref(s, (blk *)d, n); }
DEQ(f16, nx_half) DEQ(bf16, nx_bf16)
DEQ(q4_0, nx_block_q4_0) DEQ(q4_1, nx_block_q4_1) DEQ(q5_0, nx_block_q5_0) DEQ(q5_1, nx_block_q5_1)
DEQ(q8_0, nx_block_q8_0) DEQ(q8_1, nx_block_q8_1)
DEQ(q2_K, nx_block_q2_K) DEQ(q3_K, nx_block_q3_K) DEQ(q4_K, nx_block_q4_K) DEQ(q5_K, nx_block_q5_K)
DEQ(q6_K, nx_block_q6_K) DEQ(q8_K, nx_block_q8_K)
DEQ(iq4_nl, nx_block_iq4_nl) DEQ(iq4_xs, nx_block_iq4_xs)
QNT(f16, nx_half) QNT(bf16, nx_bf16)
QNT(q4_0, nx_block_q4_0) QNT(q4_1, nx_block_q4_1) QNT(q5_0, nx_block_q5_0) QNT(q5_1, nx_block_q5_1)
QNT(q8_0, nx_block_q8_0) QNT(q8_1, nx_block_q8_1)
QNT(q2_K, nx_block_q2_K) QNT(q3_K, nx_block_q3_K) QNT(q4_K, nx_block_q4_K) QNT(q5_K, nx_block_q5_K)
QNT(q6_K, nx_block_q6_K) QNT(q8_K, nx_block_q8_K)
QNT(iq4_nl, nx_block_iq4_nl) QNT(iq4_xs, nx_block_iq4_xs)
#undef DEQ
#undef QNT

typedef struct { dequant_fn deq; quant_fn qnt; } quant_ops;

static const quant_ops g_ops[NX_TYPE_COUNT] = {
    [NX_TYPE_F32] = {dequant_f32, quant_f32},
    [NX_TYPE_F16] = {deq_f16, qnt_f16},
    [NX_TYPE_BF16] = {deq_bf16, qnt_bf16},
    [NX_TYPE_Q4_0] = {deq_q4_0, qnt_q4_0},
    [NX_TYPE_Q4_1] = {deq_q4_1, qnt_q4_1},
    [NX_TYPE_Q5_0] = {deq_q5_0, qnt_q5_0},
    [NX_TYPE_Q5_1] = {deq_q5_1, qnt_q5_1},
    [NX_TYPE_Q8_0] = {deq_q8_0, qnt_q8_0},
    [NX_TYPE_Q8_1] = {deq_q8_1, qnt_q8_1},
    [NX_TYPE_Q2_K] = {deq_q2_K, qnt_q2_K},
    [NX_TYPE_Q3_K] = {deq_q3_K, qnt_q3_K},
    [NX_TYPE_Q4_K] = {deq_q4_K, qnt_q4_K},
    [NX_TYPE_Q5_K] = {deq_q5_K, qnt_q5_K},
    [NX_TYPE_Q6_K] = {deq_q6_K, qnt_q6_K},
    [NX_TYPE_Q8_K] = {deq_q8_K, qnt_q8_K},
    [NX_TYPE_IQ4_NL] = {deq_iq4_nl, qnt_iq4_nl},
    [NX_TYPE_IQ4_XS] = {deq_iq4_xs, qnt_iq4_xs},
};

static const quant_ops *ops_for(nx_type type) {
    if ((unsigned)type >= NX_TYPE_COUNT) return NULL;
    return &g_ops[type];
}

bool nx_can_dequantize(nx_type type) {
    const quant_ops *o = ops_for(type);
    return o && o->deq;
}

bool nx_can_quantize(nx_type type) {
    const quant_ops *o = ops_for(type);
    return o && o->qnt;
}

bool nx_dequantize_row(nx_type type, const void *src, float *dst, int64_t n) {
    const quant_ops *o = ops_for(type);
    const nx_type_traits *tr = nx_type_info(type);
    if (!o || !o->deq || !tr || n < 0 || n % tr->blck_size != 0) return false;
    o->deq(src, dst, n);
    return true;
}

size_t nx_quantize_row(nx_type type, const float *src, void *dst, int64_t n) {
    const quant_ops *o = ops_for(type);
    const nx_type_traits *tr = nx_type_info(type);
    if (!o || !o->qnt || !tr || n < 0 || n % tr->blck_size != 0) return 0;
    if (tr->blck_size > 1) {
        /* scale searches on NaN/Inf give meaningless blocks: refuse them */
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(src[i])) return 0;
    }
    o->qnt(src, dst, n);
    return nx_row_size(type, n);
}

/* ===== imatrix-weighted ===== */

typedef void (*quant_imat_fn)(const float *src, void *dst, int64_t n, const float *qw);
#define QIM(name, blk) static void qim_##name(const float *s, void *d, int64_t n, const float *w) { nx_quantize_row_##name##_imat(s, (blk *)d, n, w); }
QIM(q4_0, nx_block_q4_0) QIM(q4_1, nx_block_q4_1) QIM(q5_0, nx_block_q5_0) QIM(q5_1, nx_block_q5_1)
QIM(q4_K, nx_block_q4_K) QIM(q5_K, nx_block_q5_K) QIM(q6_K, nx_block_q6_K)
QIM(iq4_nl, nx_block_iq4_nl) QIM(iq4_xs, nx_block_iq4_xs)
#undef QIM

static const quant_imat_fn g_imat[NX_TYPE_COUNT] = {
    [NX_TYPE_Q4_0] = qim_q4_0, [NX_TYPE_Q4_1] = qim_q4_1, [NX_TYPE_Q5_0] = qim_q5_0, [NX_TYPE_Q5_1] = qim_q5_1,
    [NX_TYPE_Q4_K] = qim_q4_K, [NX_TYPE_Q5_K] = qim_q5_K, [NX_TYPE_Q6_K] = qim_q6_K,
    [NX_TYPE_IQ4_NL] = qim_iq4_nl, [NX_TYPE_IQ4_XS] = qim_iq4_xs,
};

bool nx_quant_uses_imatrix(nx_type type) { return (unsigned)type < NX_TYPE_COUNT && g_imat[type]; }

size_t nx_quantize_row_imat(nx_type type, const float *src, void *dst, int64_t n, const float *imatrix) {
    if (!imatrix || !nx_quant_uses_imatrix(type)) return nx_quantize_row(type, src, dst, n);
    const nx_type_traits *tr = nx_type_info(type);
    if (!tr || n < 0 || n % tr->blck_size != 0) return 0;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(src[i]) || !isfinite(imatrix[i]) || imatrix[i] < 0) return 0;
    g_imat[type](src, dst, n, imatrix);
    return nx_row_size(type, n);
}
