/*
 * matmul_neon_kernels.h — the aarch64 Advanced SIMD matmul kernels, written once and compiled
 * three times: by matmul_neon.c (NX_NEON_DOT 0: the aarch64 base, integer dot products from
 * SMULL/SMLAL2 + SADALP), by matmul_neon_dot.c (NX_NEON_DOT 1, built with
 * -march=armv8.2-a+dotprod: SDOT) and by matmul_neon_i8mm.c (NX_NEON_I8MM 1 as well, built
 * with +i8mm: SMMLA for two weight rows x two activation rows). Each includer defines
 * NX_NEON_DOT, NX_NEON_FN (the name of the kernel table function) and optionally NX_NEON_I8MM.
 * Not a header of any module: include it nowhere else.
 *
 * Contract (matmul_impl.h): activations are signed codes (bias 0) for every type. Per (weight
 * row, activation row) the integer dot product of each block (super-block for the 256-types) is
 * exact, as in the scalar kernels, and the float operations are the scalar kernels' own, in the
 * same order, one activation row per vector lane (the build has -ffp-contract=off, and no fused
 * multiply-add is written in the integer kernels). So every result equals the scalar level's bit for bit, whatever
 * the batch, the row's lane or the thread count: batch invariance follows from the reference's.
 * Float weights (F32 / F16 / BF16) are the exception: a sequential float sum per pair would
 * leave decode no faster than scalar, so they take the AVX2 kernel's order instead (8 lanes,
 * lane i mod 8 by fused multiply-add, a zero-padded last chunk, then the lanes folded as
 * (l + l+4), then (0 + 2) + (1 + 3)): the same bits as the AVX2 level, batch invariant, and
 * within float rounding of scalar (tests/test_matmul.c test_float_order checks the order).
 * Must never: read outside the weight rows and activation rows it is given.
 */
#include "kernels/matmul_impl.h"
#include "quant/blocks.h"
#include <arm_neon.h>

#ifndef NX_NEON_I8MM
#define NX_NEON_I8MM 0
#endif
#include <string.h>

/* ===== Integer dot products and conversions ===== */

/* acc + the products w[i] * a[i] in four partial lane sums (which lane holds which product
 * differs between the two builds; the lanes' total does not). Every |w| <= 128, |a| <= 127:
 * the base build's int16 pair sums stay below 2 * 128 * 127 = 32512, no overflow. */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
#if NX_NEON_DOT
    return vdotq_s32(acc, w, a);
#else
    const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(a)), w, a);
    return vpadalq_s16(acc, p);
#endif
}

/* The four vectors' lane totals, as lanes 0..3. */
static inline int32x4_t sum4(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    return vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, d));
}

/* fp16 -> f32 by FCVT: exact, NaNs quieted with their payload, the bits of nx_half_to_f32. */
static inline float h2f(const uint8_t *p) {
    __fp16 h;
    memcpy(&h, p, 2);
    return (float)h;
}

/* ===== Float weights: 8 lanes (two vectors) per activation row, AVX2's order ===== */

/* Four weights from i on as floats: FCVT widens fp16 exactly, BF16 is a float's top half. */
static inline float32x4_t wload4(nx_type t, const uint8_t *w, int64_t i) {
    if (t == NX_TYPE_F32) return vld1q_f32((const float *)w + i);
    const uint16x4_t h = vld1_u16((const uint16_t *)w + i);
    if (t == NX_TYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

/* NR (<= 8) activation rows against weight row wr; y[r * ldy] for r < NR. */
static inline __attribute__((always_inline)) void float_rows(nx_type t, const int NR, int64_t n, const uint8_t *wr,
                                                             const float *x, int64_t ldx, float *y, int64_t ldy) {
    float32x4_t acc[8][2];
    for (int r = 0; r < NR; r++) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t w0 = wload4(t, wr, i), w1 = wload4(t, wr, i + 4);
        for (int r = 0; r < NR; r++) {
            acc[r][0] = vfmaq_f32(acc[r][0], w0, vld1q_f32(x + r * ldx + i));
            acc[r][1] = vfmaq_f32(acc[r][1], w1, vld1q_f32(x + r * ldx + i + 4));
        }
    }
    if (i < n) {   /* tail: the last < 8 values in zero-padded buffers, every lane updated (as AVX2) */
        const size_t es = t == NX_TYPE_F32 ? 4 : 2;
        uint8_t wt[32] = {0};
        memcpy(wt, wr + (size_t)i * es, (size_t)(n - i) * es);
        const float32x4_t w0 = wload4(t, wt, 0), w1 = wload4(t, wt, 4);
        for (int r = 0; r < NR; r++) {
            float xt[8] = {0};
            memcpy(xt, x + r * ldx + i, (size_t)(n - i) * sizeof(float));
            acc[r][0] = vfmaq_f32(acc[r][0], w0, vld1q_f32(xt));
            acc[r][1] = vfmaq_f32(acc[r][1], w1, vld1q_f32(xt + 4));
        }
    }
    for (int r = 0; r < NR; r++) {
        const float32x4_t s = vaddq_f32(acc[r][0], acc[r][1]);
        const float32x2_t s2 = vadd_f32(vget_low_f32(s), vget_high_f32(s));
        y[r * ldy] = vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
    }
}

/* Rows in balanced groups of at most 8 (9 rows: 5 + 4), each group size its own body with
 * the accumulators in registers; a row's group changes nothing in its arithmetic. */
static inline __attribute__((always_inline)) void kern_float(nx_type t, int64_t n, const uint8_t *w, size_t ws, int64_t nw,
                                                             const nx_mm_act *a, int na, float *y, int64_t ldy) {
    for (int64_t o = 0; o < nw; o++) {
        const uint8_t *wr = w + (size_t)o * ws;
        for (int r0 = 0; r0 < na;) {
            const int ng = (na - r0 + 7) / 8, nr = (na - r0 + ng - 1) / ng;
            const float *x = a->x + r0 * a->ldx;
            float *yo = y + (int64_t)r0 * ldy + o;
            switch (nr) {
            case 1: float_rows(t, 1, n, wr, x, a->ldx, yo, ldy); break;
            case 2: float_rows(t, 2, n, wr, x, a->ldx, yo, ldy); break;
            case 3: float_rows(t, 3, n, wr, x, a->ldx, yo, ldy); break;
            case 4: float_rows(t, 4, n, wr, x, a->ldx, yo, ldy); break;
            case 5: float_rows(t, 5, n, wr, x, a->ldx, yo, ldy); break;
            case 6: float_rows(t, 6, n, wr, x, a->ldx, yo, ldy); break;
            case 7: float_rows(t, 7, n, wr, x, a->ldx, yo, ldy); break;
            default: float_rows(t, 8, n, wr, x, a->ldx, yo, ldy); break;
            }
            r0 += nr;
        }
    }
}

#define KF(name, T) static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { kern_float(T, n, w, ws, nw, a, na, y, ldy); }
KF(k_f32, NX_TYPE_F32)
KF(k_f16, NX_TYPE_F16)
KF(k_bf16, NX_TYPE_BF16)

/* ===== 32-value blocks: y = sum_b (dw_b * da_b) * I_b (+ mw_b * s_b) ===== */

/* One weight block decoded: its 32 codes (values 0..15, 16..31), scale and min (or 0). */
typedef struct { int8x16_t w0, w1; float d, m; } nb32;

static inline nb32 dec32(nx_type t, const uint8_t *blk) {
    nb32 o;
    o.m = 0.0f;
    const uint8x16_t lo4 = vdupq_n_u8(0x0F);
    switch (t) {
    case NX_TYPE_Q8_0:
        o.d = h2f(blk);
        o.w0 = vld1q_s8((const int8_t *)blk + 2);
        o.w1 = vld1q_s8((const int8_t *)blk + 18);
        break;
    case NX_TYPE_Q4_0: {
        const uint8x16_t v = vld1q_u8(blk + 2);
        o.d = h2f(blk);
        o.w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, lo4)), vdupq_n_s8(8));
        o.w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
        break;
    }
    case NX_TYPE_Q4_1: {
        const uint8x16_t v = vld1q_u8(blk + 4);
        o.d = h2f(blk);
        o.m = h2f(blk + 2);
        o.w0 = vreinterpretq_s8_u8(vandq_u8(v, lo4));
        o.w1 = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        break;
    }
    case NX_TYPE_Q5_0: case NX_TYPE_Q5_1: {
        /* the fifth bit of value j is bit j of the 32-bit qh: byte j / 8, bit j % 8 */
        const int has_m = t == NX_TYPE_Q5_1;
        const uint8_t *qh = blk + (has_m ? 4 : 2);
        const uint8x16_t v = vld1q_u8(qh + 4);
        static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        const uint8x16_t bits = vld1q_u8(bit), b4 = vdupq_n_u8(0x10);
        const uint8x16_t h0 = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), bits), b4);
        const uint8x16_t h1 = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), bits), b4);
        o.d = h2f(blk);
        o.w0 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, lo4), h0));
        o.w1 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v, 4), h1));
        if (has_m) o.m = h2f(blk + 2);
        else {
            o.w0 = vsubq_s8(o.w0, vdupq_n_s8(16));
            o.w1 = vsubq_s8(o.w1, vdupq_n_s8(16));
        }
        break;
    }
    default: { /* IQ4_NL: each nibble indexes the value table */
        const uint8x16_t v = vld1q_u8(blk + 2);
        const int8x16_t tab = vld1q_s8(nx_mm_iq4_table);
        o.d = h2f(blk);
        o.w0 = vqtbl1q_s8(tab, vandq_u8(v, lo4));
        o.w1 = vqtbl1q_s8(tab, vshrq_n_u8(v, 4));
        break;
    }
    }
    return o;
}

static inline size_t bsize32(nx_type t) {
    switch (t) {
    case NX_TYPE_Q8_0: return sizeof(nx_block_q8_0);
    case NX_TYPE_Q4_0: return sizeof(nx_block_q4_0);
    case NX_TYPE_Q4_1: return sizeof(nx_block_q4_1);
    case NX_TYPE_Q5_0: return sizeof(nx_block_q5_0);
    case NX_TYPE_Q5_1: return sizeof(nx_block_q5_1);
    default: return sizeof(nx_block_iq4_nl);
    }
}

/* The activation rows of a tile in groups of 4 (one per lane); up to NX_MM_TILE rows. */
#define NG_MAX (NX_MM_TILE / 4)

/* Lanes j < n of v into y[(r0 + j) * ldy]. */
static inline void store_lanes(float32x4_t v, int n, float *y, int64_t ldy) {
    float t[4];
    vst1q_f32(t, v);
    for (int j = 0; j < n; j++) y[j * ldy] = t[j];
}

/* Per lane: sum = sum + (dw * da) * (float)I  [+ sum = sum + mw * s], the scalar kernel's ops. */
static inline __attribute__((always_inline)) void kern_b32(nx_type t, int64_t n_in, const uint8_t *w, size_t w_stride,
                                                           int64_t n_w, const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    const int64_t nb = n_in / 32;
    const size_t bsz = bsize32(t);
    const int has_m = t == NX_TYPE_Q4_1 || t == NX_TYPE_Q5_1;
    const int ng = (n_act + 3) / 4;
    for (int64_t o = 0; o < n_w; o++) {
        const uint8_t *wr = w + (size_t)o * w_stride;
        float32x4_t acc[NG_MAX];
        for (int g = 0; g < ng; g++) acc[g] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; b++) {
            const nb32 k = dec32(t, wr + (size_t)b * bsz);
            for (int g = 0; g < ng; g++) {
                int32x4_t p[4];
                float da[4] = {0, 0, 0, 0}, sa[4] = {0, 0, 0, 0};
                for (int j = 0; j < 4; j++) {
                    const int r = 4 * g + j;
                    p[j] = vdupq_n_s32(0);
                    if (r >= n_act) continue;
                    const int8_t *q = (const int8_t *)a->q + r * a->q_stride + 32 * b;
                    p[j] = dot16(dot16(p[j], k.w0, vld1q_s8(q)), k.w1, vld1q_s8(q + 16));
                    da[j] = a->d[r * a->d_stride + b];
                    if (has_m) sa[j] = a->s[r * a->s_stride + b];
                }
                const float32x4_t isum = vcvtq_f32_s32(sum4(p[0], p[1], p[2], p[3]));
                acc[g] = vaddq_f32(acc[g], vmulq_f32(vmulq_n_f32(vld1q_f32(da), k.d), isum));
                if (has_m) acc[g] = vaddq_f32(acc[g], vmulq_n_f32(vld1q_f32(sa), k.m));
            }
        }
        for (int g = 0; g < ng; g++) {
            const int n = n_act - 4 * g < 4 ? n_act - 4 * g : 4;
            store_lanes(acc[g], n, y + (int64_t)(4 * g) * ldy + o, ldy);
        }
    }
}

#define K32(name, T) static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { kern_b32(T, n, w, ws, nw, a, na, y, ldy); }
#if !NX_NEON_I8MM   /* the i8mm build wraps kern_b32 itself */
K32(k_q8_0, NX_TYPE_Q8_0)
K32(k_q4_0, NX_TYPE_Q4_0)
K32(k_q4_1, NX_TYPE_Q4_1)
K32(k_q5_0, NX_TYPE_Q5_0)
K32(k_q5_1, NX_TYPE_Q5_1)
K32(k_iq4_nl, NX_TYPE_IQ4_NL)
#endif

/* ===== 256-value super-blocks: y = sum_sb da * (d * I - dmin * M) ===== */

/* One super-block decoded: 256 signed codes, an integer scale per group of 16 values, an
 * integer min per sub-block of 32 (Q4_K; else 0), d and dmin (else 0). */
typedef struct {
    int8_t q[256];
    int32_t sc[16];
    int32_t m[8];
    float d, dmin;
} nb256;

static inline void dec_q4_K(const uint8_t *blk, nb256 *o) {
    const nx_block_q4_K *b = (const void *)blk;
    uint8_t sc[8], m[8];
    nx_mm_k4_scales(b->scales, sc, m);
    for (int j = 0; j < 8; j++) {
        o->sc[2 * j] = o->sc[2 * j + 1] = sc[j];
        o->m[j] = m[j];
    }
    o->d = h2f((const uint8_t *)&b->d);
    o->dmin = h2f((const uint8_t *)&b->dmin);
    /* 64 values per 32 bytes: the low nibbles are values 64c + i, the high ones 64c + 32 + i */
    const uint8x16_t lo4 = vdupq_n_u8(0x0F);
    for (int c = 0; c < 4; c++)
        for (int h = 0; h < 2; h++) {
            const uint8x16_t v = vld1q_u8(b->qs + 32 * c + 16 * h);
            vst1q_u8((uint8_t *)o->q + 64 * c + 16 * h, vandq_u8(v, lo4));
            vst1q_u8((uint8_t *)o->q + 64 * c + 32 + 16 * h, vshrq_n_u8(v, 4));
        }
}

static inline void dec_q5_K(const uint8_t *blk, nb256 *o) {
    const nx_block_q5_K *b = (const void *)blk;
    uint8_t sc[8], m[8];
    nx_mm_k4_scales(b->scales, sc, m);
    for (int j = 0; j < 8; j++) {
        o->sc[2 * j] = o->sc[2 * j + 1] = sc[j];
        o->m[j] = m[j];
    }
    o->d = h2f((const uint8_t *)&b->d);
    o->dmin = h2f((const uint8_t *)&b->dmin);
    /* as Q4_K, plus the fifth bit of value 64c + 32h + i: bit 2c + h of qh[i] */
    const uint8x16_t lo4 = vdupq_n_u8(0x0F), b4 = vdupq_n_u8(0x10);
    for (int c = 0; c < 4; c++)
        for (int s = 0; s < 2; s++) {
            const uint8x16_t v = vld1q_u8(b->qs + 32 * c + 16 * s), qh = vld1q_u8(b->qh + 16 * s);
            const uint8x16_t h0 = vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(1u << (2 * c)))), b4);
            const uint8x16_t h1 = vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(2u << (2 * c)))), b4);
            vst1q_u8((uint8_t *)o->q + 64 * c + 16 * s, vorrq_u8(vandq_u8(v, lo4), h0));
            vst1q_u8((uint8_t *)o->q + 64 * c + 32 + 16 * s, vorrq_u8(vshrq_n_u8(v, 4), h1));
        }
}

static inline void dec_iq4_xs(const uint8_t *blk, nb256 *o) {
    const nx_block_iq4_xs *b = (const void *)blk;
    o->d = h2f((const uint8_t *)&b->d);
    o->dmin = 0.0f;
    memset(o->m, 0, sizeof o->m);
    const int8x16_t tab = vld1q_s8(nx_mm_iq4_table);
    const uint8x16_t lo4 = vdupq_n_u8(0x0F);
    for (int j = 0; j < 8; j++) {   /* sub-block j: 16 bytes of nibbles, a 6-bit scale minus 32 */
        const int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4);
        o->sc[2 * j] = o->sc[2 * j + 1] = ls - 32;
        const uint8x16_t v = vld1q_u8(b->qs + 16 * j);
        vst1q_s8(o->q + 32 * j, vqtbl1q_s8(tab, vandq_u8(v, lo4)));
        vst1q_s8(o->q + 32 * j + 16, vqtbl1q_s8(tab, vshrq_n_u8(v, 4)));
    }
}

static inline void dec_q6_K(const uint8_t *blk, nb256 *o) {
    const nx_block_q6_K *b = (const void *)blk;
    for (int g = 0; g < 16; g++) o->sc[g] = b->scales[g];
    memset(o->m, 0, sizeof o->m);
    o->d = h2f((const uint8_t *)&b->d);
    o->dmin = 0.0f;
    /* value 128h + 32k + i: nibble (low for k < 2) of ql[64h + 32(k & 1) + i], bits 2k, 2k+1 of qh[32h + i] */
    const uint8x16_t lo4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 2; s++) {   /* i in 16s .. 16s + 15 */
            const uint8x16_t l0 = vld1q_u8(b->ql + 64 * h + 16 * s), l1 = vld1q_u8(b->ql + 64 * h + 32 + 16 * s);
            const uint8x16_t qh = vld1q_u8(b->qh + 32 * h + 16 * s);
            const uint8x16_t v[4] = {
                vorrq_u8(vandq_u8(l0, lo4), vshlq_n_u8(vandq_u8(qh, m2), 4)),
                vorrq_u8(vandq_u8(l1, lo4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 2), m2), 4)),
                vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 4), m2), 4)),
                vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(qh, 6), 4)),
            };
            for (int k = 0; k < 4; k++)
                vst1q_s8(o->q + 128 * h + 32 * k + 16 * s, vsubq_s8(vreinterpretq_s8_u8(v[k]), off));
        }
}

/* Per lane: sum = sum + da * (d * (float)I - dmin * (float)M), the scalar kernel's ops. */
static inline __attribute__((always_inline)) void kern_b256(nx_type t, int64_t n_in, const uint8_t *w, size_t w_stride,
                                                            int64_t n_w, const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    const int64_t nsb = n_in / 256;
    const int has_m = t == NX_TYPE_Q4_K || t == NX_TYPE_Q5_K;
    const size_t bsz = t == NX_TYPE_Q4_K ? sizeof(nx_block_q4_K) : t == NX_TYPE_Q5_K ? sizeof(nx_block_q5_K)
                     : t == NX_TYPE_Q6_K ? sizeof(nx_block_q6_K) : sizeof(nx_block_iq4_xs);
    const int ng = (n_act + 3) / 4;
    nb256 k;
    for (int64_t o = 0; o < n_w; o++) {
        const uint8_t *wr = w + (size_t)o * w_stride;
        float32x4_t acc[NG_MAX];
        for (int g = 0; g < ng; g++) acc[g] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nsb; b++) {
            const uint8_t *blk = wr + (size_t)b * bsz;
            if (t == NX_TYPE_Q4_K) dec_q4_K(blk, &k);
            else if (t == NX_TYPE_Q5_K) dec_q5_K(blk, &k);
            else if (t == NX_TYPE_Q6_K) dec_q6_K(blk, &k);
            else dec_iq4_xs(blk, &k);
            for (int g = 0; g < ng; g++) {
                int32x4_t p[4];
                int32_t ms[4] = {0, 0, 0, 0};
                float da[4] = {0, 0, 0, 0};
                for (int j = 0; j < 4; j++) {
                    const int r = 4 * g + j;
                    p[j] = vdupq_n_s32(0);
                    if (r >= n_act) continue;
                    const int8_t *q = (const int8_t *)a->q + r * a->q_stride + 256 * b;
                    for (int gi = 0; gi < 16; gi++)
                        p[j] = vmlaq_n_s32(p[j], dot16(vdupq_n_s32(0), vld1q_s8(k.q + 16 * gi), vld1q_s8(q + 16 * gi)), k.sc[gi]);
                    if (has_m) {
                        const int16_t *bs = a->bs + r * a->bs_stride + 16 * b;
                        /* pairs of 16-value group sums: the 8 sub-block sums, times the mins */
                        const int32x4_t s0 = vpaddlq_s16(vld1q_s16(bs)), s1 = vpaddlq_s16(vld1q_s16(bs + 8));
                        ms[j] = vaddvq_s32(vaddq_s32(vmulq_s32(s0, vld1q_s32(k.m)), vmulq_s32(s1, vld1q_s32(k.m + 4))));
                    }
                    da[j] = a->d[r * a->d_stride + b];
                }
                const float32x4_t isum = vcvtq_f32_s32(sum4(p[0], p[1], p[2], p[3]));
                const float32x4_t msum = vcvtq_f32_s32(vld1q_s32(ms));
                const float32x4_t v = vsubq_f32(vmulq_n_f32(isum, k.d), vmulq_n_f32(msum, k.dmin));
                acc[g] = vaddq_f32(acc[g], vmulq_f32(vld1q_f32(da), v));
            }
        }
        for (int g = 0; g < ng; g++) {
            const int n = n_act - 4 * g < 4 ? n_act - 4 * g : 4;
            store_lanes(acc[g], n, y + (int64_t)(4 * g) * ldy + o, ldy);
        }
    }
}

#define K256(name, T) static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { kern_b256(T, n, w, ws, nw, a, na, y, ldy); }
#if !NX_NEON_I8MM   /* the i8mm build wraps kern_b256 itself */
K256(k_q4_K, NX_TYPE_Q4_K)
K256(k_q5_K, NX_TYPE_Q5_K)
K256(k_q6_K, NX_TYPE_Q6_K)
K256(k_iq4_xs, NX_TYPE_IQ4_XS)
#endif

#if NX_NEON_I8MM
/* ===== i8mm: SMMLA multiplies a 2x8 block of two weight rows by two activation rows =====
 * The 2x2 result [w0.x0, w0.x1, w1.x0, w1.x1] is exact in int32, so a pair's integer dot
 * products are the ones above, and the float operations per lane are the same as there: the
 * scalar level's bits again, whichever rows share a register. A lone weight or activation
 * row is paired with itself and the duplicate lanes are dropped. */

/* rows a, b of 8 bytes each from the halves (lo: bytes 0-7, hi: 8-15) of two vectors */
static inline int8x16_t zlo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
static inline int8x16_t zhi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* Lane 0: (r0, o), 1: (r1, o), 2: (r0, o + 1), 3: (r1, o + 1); missing ones are skipped. */
static inline void store_2x2(float32x4_t v, float *y, int64_t ldy, int64_t o, int r0, int two_r, int two_o) {
    float t[4];
    vst1q_f32(t, v);
    y[r0 * ldy + o] = t[0];
    if (two_r) y[(r0 + 1) * ldy + o] = t[1];
    if (two_o) {
        y[r0 * ldy + o + 1] = t[2];
        if (two_r) y[(r0 + 1) * ldy + o + 1] = t[3];
    }
}

static inline __attribute__((always_inline)) void kern_b32_mm(nx_type t, int64_t n_in, const uint8_t *w, size_t w_stride,
                                                              int64_t n_w, const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    const int64_t nb = n_in / 32;
    const size_t bsz = bsize32(t);
    const int has_m = t == NX_TYPE_Q4_1 || t == NX_TYPE_Q5_1;
    const int np = (n_act + 1) / 2;
    for (int64_t o = 0; o < n_w; o += 2) {
        const int two_o = o + 1 < n_w;
        const uint8_t *w0 = w + (size_t)o * w_stride, *w1 = two_o ? w0 + w_stride : w0;
        float32x4_t acc[NX_MM_TILE / 2];
        for (int p = 0; p < np; p++) acc[p] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; b++) {
            const nb32 k0 = dec32(t, w0 + (size_t)b * bsz), k1 = dec32(t, w1 + (size_t)b * bsz);
            const int8x16_t A0 = zlo(k0.w0, k1.w0), A1 = zhi(k0.w0, k1.w0), A2 = zlo(k0.w1, k1.w1), A3 = zhi(k0.w1, k1.w1);
            const float dwa[4] = {k0.d, k0.d, k1.d, k1.d}, mwa[4] = {k0.m, k0.m, k1.m, k1.m};
            const float32x4_t dw = vld1q_f32(dwa), mw = vld1q_f32(mwa);
            for (int p = 0; p < np; p++) {
                const int r0 = 2 * p, r1 = r0 + 1 < n_act ? r0 + 1 : r0;
                const int8_t *q0 = (const int8_t *)a->q + r0 * a->q_stride + 32 * b;
                const int8_t *q1 = (const int8_t *)a->q + r1 * a->q_stride + 32 * b;
                const int8x16_t x0 = vld1q_s8(q0), x1 = vld1q_s8(q1), x0h = vld1q_s8(q0 + 16), x1h = vld1q_s8(q1 + 16);
                int32x4_t i4 = vmmlaq_s32(vdupq_n_s32(0), A0, zlo(x0, x1));
                i4 = vmmlaq_s32(i4, A1, zhi(x0, x1));
                i4 = vmmlaq_s32(i4, A2, zlo(x0h, x1h));
                i4 = vmmlaq_s32(i4, A3, zhi(x0h, x1h));
                const float d0 = a->d[r0 * a->d_stride + b], d1 = a->d[r1 * a->d_stride + b];
                const float daa[4] = {d0, d1, d0, d1};
                acc[p] = vaddq_f32(acc[p], vmulq_f32(vmulq_f32(dw, vld1q_f32(daa)), vcvtq_f32_s32(i4)));
                if (has_m) {
                    const float s0 = a->s[r0 * a->s_stride + b], s1 = a->s[r1 * a->s_stride + b];
                    const float saa[4] = {s0, s1, s0, s1};
                    acc[p] = vaddq_f32(acc[p], vmulq_f32(mw, vld1q_f32(saa)));
                }
            }
        }
        for (int p = 0; p < np; p++) store_2x2(acc[p], y, ldy, o, 2 * p, 2 * p + 1 < n_act, two_o);
    }
}

static inline void dec256(nx_type t, const uint8_t *blk, nb256 *k) {
    if (t == NX_TYPE_Q4_K) dec_q4_K(blk, k);
    else if (t == NX_TYPE_Q5_K) dec_q5_K(blk, k);
    else if (t == NX_TYPE_Q6_K) dec_q6_K(blk, k);
    else dec_iq4_xs(blk, k);
}

/* The 8 sub-block sums of an activation row's super-block (pairs of its 16-value group sums). */
static inline void sub_sums(const int16_t *bs, int32x4_t *s0, int32x4_t *s1) {
    *s0 = vpaddlq_s16(vld1q_s16(bs));
    *s1 = vpaddlq_s16(vld1q_s16(bs + 8));
}
static inline int32_t min_sum(const nb256 *k, int32x4_t s0, int32x4_t s1) {
    return vaddvq_s32(vaddq_s32(vmulq_s32(s0, vld1q_s32(k->m)), vmulq_s32(s1, vld1q_s32(k->m + 4))));
}

static inline __attribute__((always_inline)) void kern_b256_mm(nx_type t, int64_t n_in, const uint8_t *w, size_t w_stride,
                                                               int64_t n_w, const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    const int64_t nsb = n_in / 256;
    const int has_m = t == NX_TYPE_Q4_K || t == NX_TYPE_Q5_K;
    const size_t bsz = t == NX_TYPE_Q4_K ? sizeof(nx_block_q4_K) : t == NX_TYPE_Q5_K ? sizeof(nx_block_q5_K)
                     : t == NX_TYPE_Q6_K ? sizeof(nx_block_q6_K) : sizeof(nx_block_iq4_xs);
    const int np = (n_act + 1) / 2;
    nb256 k0, k1;
    for (int64_t o = 0; o < n_w; o += 2) {
        const int two_o = o + 1 < n_w;
        const uint8_t *w0 = w + (size_t)o * w_stride, *w1 = two_o ? w0 + w_stride : w0;
        float32x4_t acc[NX_MM_TILE / 2];
        for (int p = 0; p < np; p++) acc[p] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nsb; b++) {
            dec256(t, w0 + (size_t)b * bsz, &k0);
            dec256(t, w1 + (size_t)b * bsz, &k1);
            int8x16_t A[32];
            int32x4_t sc[16];
            for (int g = 0; g < 16; g++) {
                const int8x16_t u = vld1q_s8(k0.q + 16 * g), v = vld1q_s8(k1.q + 16 * g);
                A[2 * g] = zlo(u, v);
                A[2 * g + 1] = zhi(u, v);
                const int32_t sca[4] = {k0.sc[g], k0.sc[g], k1.sc[g], k1.sc[g]};
                sc[g] = vld1q_s32(sca);
            }
            const float dwa[4] = {k0.d, k0.d, k1.d, k1.d}, mwa[4] = {k0.dmin, k0.dmin, k1.dmin, k1.dmin};
            const float32x4_t dw = vld1q_f32(dwa), dm = vld1q_f32(mwa);
            for (int p = 0; p < np; p++) {
                const int r0 = 2 * p, r1 = r0 + 1 < n_act ? r0 + 1 : r0;
                const int8_t *q0 = (const int8_t *)a->q + r0 * a->q_stride + 256 * b;
                const int8_t *q1 = (const int8_t *)a->q + r1 * a->q_stride + 256 * b;
                int32x4_t i4 = vdupq_n_s32(0);
                for (int g = 0; g < 16; g++) {
                    const int8x16_t x0 = vld1q_s8(q0 + 16 * g), x1 = vld1q_s8(q1 + 16 * g);
                    const int32x4_t gd = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), A[2 * g], zlo(x0, x1)), A[2 * g + 1], zhi(x0, x1));
                    i4 = vmlaq_s32(i4, gd, sc[g]);
                }
                int32_t ms[4] = {0, 0, 0, 0};
                if (has_m) {
                    int32x4_t s00, s01, s10, s11;
                    sub_sums(a->bs + r0 * a->bs_stride + 16 * b, &s00, &s01);
                    sub_sums(a->bs + r1 * a->bs_stride + 16 * b, &s10, &s11);
                    ms[0] = min_sum(&k0, s00, s01);
                    ms[1] = min_sum(&k0, s10, s11);
                    ms[2] = min_sum(&k1, s00, s01);
                    ms[3] = min_sum(&k1, s10, s11);
                }
                const float d0 = a->d[r0 * a->d_stride + b], d1 = a->d[r1 * a->d_stride + b];
                const float daa[4] = {d0, d1, d0, d1};
                const float32x4_t v = vsubq_f32(vmulq_f32(vcvtq_f32_s32(i4), dw), vmulq_f32(vcvtq_f32_s32(vld1q_s32(ms)), dm));
                acc[p] = vaddq_f32(acc[p], vmulq_f32(vld1q_f32(daa), v));
            }
        }
        for (int p = 0; p < np; p++) store_2x2(acc[p], y, ldy, o, 2 * p, 2 * p + 1 < n_act, two_o);
    }
}

/* One activation row (a decode) wastes half of each SMMLA: the dot product kernels serve it. */
#define KMM(name, T, MM, ONE) static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { \
        if (na == 1) ONE(T, n, w, ws, nw, a, na, y, ldy); else MM(T, n, w, ws, nw, a, na, y, ldy); }
KMM(m_q8_0, NX_TYPE_Q8_0, kern_b32_mm, kern_b32)
KMM(m_q4_0, NX_TYPE_Q4_0, kern_b32_mm, kern_b32)
KMM(m_q4_1, NX_TYPE_Q4_1, kern_b32_mm, kern_b32)
KMM(m_q5_0, NX_TYPE_Q5_0, kern_b32_mm, kern_b32)
KMM(m_q5_1, NX_TYPE_Q5_1, kern_b32_mm, kern_b32)
KMM(m_iq4_nl, NX_TYPE_IQ4_NL, kern_b32_mm, kern_b32)
KMM(m_q4_K, NX_TYPE_Q4_K, kern_b256_mm, kern_b256)
KMM(m_q5_K, NX_TYPE_Q5_K, kern_b256_mm, kern_b256)
KMM(m_q6_K, NX_TYPE_Q6_K, kern_b256_mm, kern_b256)
KMM(m_iq4_xs, NX_TYPE_IQ4_XS, kern_b256_mm, kern_b256)
#define K_(x) m_##x
#else
#define K_(x) k_##x
#endif

nx_mm_kernel NX_NEON_FN(nx_type type) {
    switch (type) {
    case NX_TYPE_F32: return k_f32;
    case NX_TYPE_F16: return k_f16;
    case NX_TYPE_BF16: return k_bf16;
    case NX_TYPE_Q8_0: return K_(q8_0);
    case NX_TYPE_Q4_0: return K_(q4_0);
    case NX_TYPE_Q4_1: return K_(q4_1);
    case NX_TYPE_Q5_0: return K_(q5_0);
    case NX_TYPE_Q5_1: return K_(q5_1);
    case NX_TYPE_IQ4_NL: return K_(iq4_nl);
    case NX_TYPE_Q4_K: return K_(q4_K);
    case NX_TYPE_Q5_K: return K_(q5_K);
    case NX_TYPE_Q6_K: return K_(q6_K);
    case NX_TYPE_IQ4_XS: return K_(iq4_xs);
    default: return NULL;
    }
}
