/*
 * attn_neon.c — nx_attn's tier pieces with aarch64 Advanced SIMD: the 16 lanes of dot16 are
 * four q registers (lanes 0-3, 4-7, 8-11, 12-15), so the contract's first two reduction steps
 * are (a0 + a2) + (a1 + a3); four queries share each key load. Multiply-adds are explicit
 * vfmaq_f32 (one rounding, as fmaf) and everything else is a separate add or multiply (the
 * aarch64 build has -ffp-contract=off): bit-identical to the scalar reference in attn.c.
 * Heads whose sizes are not multiples of 16 take the scalar path. A decode's few queries read
 * K / V in the cache's type inside the dot loops (scores_kv / pv_kv, heads of multiples of
 * 32), with row_f32's exact conversions: the same bits as through the tile buffer.
 * Q8_0 / Q4_0 keys take the integer Q.K contract: k_prep unpacks a tile's codes to int8 once,
 * scores_qk (attn_neon_qk.h, here without the dot product; attn_neon_dot.c with it) multiplies
 * them with the quantized queries in exact int32.
 */
#include <arm_neon.h>
#include <string.h>
#include "core/fp16.h"
#include "kernels/attn.h"
#include "kernels/attn_impl.h"
#include "quant/blocks.h"

#define NX_NEON_DOT 0
#define NX_QK_FN nx_attn_scores_qk_neon
#include "kernels/attn_neon_qk.h"

/* lanes i + i+8, then i + i+4 of a 16-lane sum held as four vectors */
static inline float32x4_t reduce_to4(float32x4_t a0, float32x4_t a1, float32x4_t a2, float32x4_t a3) {
    return vaddq_f32(vaddq_f32(a0, a2), vaddq_f32(a1, a3));
}

/* the last two steps (i + i+2, i + i+1) of four sums at once: lane i of the result is x_i's */
static inline float32x4_t reduce4x4(float32x4_t x0, float32x4_t x1, float32x4_t x2, float32x4_t x3) {
    const float32x4_t u = vaddq_f32(vcombine_f32(vget_low_f32(x0), vget_low_f32(x1)),
                                    vcombine_f32(vget_high_f32(x0), vget_high_f32(x1)));
    const float32x4_t w = vaddq_f32(vcombine_f32(vget_low_f32(x2), vget_low_f32(x3)),
                                    vcombine_f32(vget_high_f32(x2), vget_high_f32(x3)));
    return vpaddq_f32(u, w);   /* lane 0: u0 + u1, ... */
}

static inline float reduce1(float32x4_t v4) {
    const float32x2_t v2 = vadd_f32(vget_low_f32(v4), vget_high_f32(v4));
    return vget_lane_f32(v2, 0) + vget_lane_f32(v2, 1);
}

#define NX_INLINE static inline __attribute__((always_inline))

/* Values d..d+15 (d a multiple of 16) of a row of type t as four vectors, each converted
 * exactly as row_f32 converts it (so reading the cache here gives row_f32's bits). */
NX_INLINE void ld16(nx_type t, const void *row, int d, float32x4_t x[4]) {
    if (t == NX_TYPE_F16 || t == NX_TYPE_BF16) {
        const uint16x8_t h0 = vld1q_u16((const uint16_t *)row + d), h1 = vld1q_u16((const uint16_t *)row + d + 8);
        if (t == NX_TYPE_F16) {
            x[0] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h0)));
            x[1] = vcvt_high_f32_f16(vreinterpretq_f16_u16(h0));
            x[2] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h1)));
            x[3] = vcvt_high_f32_f16(vreinterpretq_f16_u16(h1));
        } else {
            x[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
            x[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16));
            x[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
            x[3] = vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16));
        }
        return;
    }
    if (t == NX_TYPE_Q8_0 || t == NX_TYPE_Q4_0) {
        int8x16_t c;
        float sc;
        if (t == NX_TYPE_Q8_0) {
            const nx_block_q8_0 *b = (const nx_block_q8_0 *)row + d / 32;
            sc = nx_half_to_f32(b->d);
            c = vld1q_s8(b->qs + (d & 16));
        } else {   /* values 0..15 of a block are the low nibbles, 16..31 the high ones */
            const nx_block_q4_0 *b = (const nx_block_q4_0 *)row + d / 32;
            sc = nx_half_to_f32(b->d);
            const uint8x16_t v = vld1q_u8(b->qs);
            c = vsubq_s8(vreinterpretq_s8_u8(d & 16 ? vshrq_n_u8(v, 4) : vandq_u8(v, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
        }
        const int16x8_t lo = vmovl_s8(vget_low_s8(c)), hi = vmovl_high_s8(c);
        x[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), sc);
        x[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), sc);
        x[2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), sc);
        x[3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), sc);
        return;
    }
    const float *f = (const float *)row + d;
    for (int c = 0; c < 4; c++) x[c] = vld1q_f32(f + 4 * c);
}

/* S = dot16 * scale for key rows of type t; four queries share each key's loads. */
NX_INLINE void scores_t(nx_type t, const float *const *q, int nq, const void *const *k, int nk, int D, float scale,
                        float *S, int ldS, ptrdiff_t pf) {
    const size_t b32 = nx_row_size(t, 32), rb = nx_row_size(t, D);   /* b32: nx_attn_pf ranges without a division */
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        const float *qq[4] = {q[i], q[i + 1], q[i + 2], q[i + 3]};
        for (int j = 0; j < nk; j++) {
            float32x4_t a[4][4];
            for (int r = 0; r < 4; r++)
                for (int c = 0; c < 4; c++) a[r][c] = vdupq_n_f32(0.0f);
            for (int d = 0; d < D; d += 16) {
                float32x4_t x[4];
                nx_attn_pf(k[j], pf, ((size_t)d * b32 >> 5), ((size_t)(d + 16) * b32 >> 5), rb);
                ld16(t, k[j], d, x);
                for (int r = 0; r < 4; r++)
                    for (int c = 0; c < 4; c++) a[r][c] = vfmaq_f32(a[r][c], vld1q_f32(qq[r] + d + 4 * c), x[c]);
            }
            float rs[4];
            vst1q_f32(rs, vmulq_n_f32(reduce4x4(reduce_to4(a[0][0], a[0][1], a[0][2], a[0][3]),
                                                reduce_to4(a[1][0], a[1][1], a[1][2], a[1][3]),
                                                reduce_to4(a[2][0], a[2][1], a[2][2], a[2][3]),
                                                reduce_to4(a[3][0], a[3][1], a[3][2], a[3][3])),
                                      scale));
            for (int ii = 0; ii < 4; ii++) S[(size_t)(i + ii) * ldS + j] = rs[ii];
        }
    }
    if (i == nq) return;
    /* the last 1-3 queries together, so each key is converted once */
    const int nr = nq - i;
    for (int j = 0; j < nk; j++) {
        float32x4_t a[3][4];
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < 4; c++) a[r][c] = vdupq_n_f32(0.0f);
        for (int d = 0; d < D; d += 16) {
            float32x4_t x[4];
            nx_attn_pf(k[j], pf, ((size_t)d * b32 >> 5), ((size_t)(d + 16) * b32 >> 5), rb);
            ld16(t, k[j], d, x);
            for (int r = 0; r < nr; r++)
                for (int c = 0; c < 4; c++) a[r][c] = vfmaq_f32(a[r][c], vld1q_f32(q[i + r] + d + 4 * c), x[c]);
        }
        for (int r = 0; r < nr; r++)
            S[(size_t)(i + r) * ldS + j] = reduce1(reduce_to4(a[r][0], a[r][1], a[r][2], a[r][3])) * scale;
    }
}

static void scores(const float *const *q, int nq, const float *const *k, int nk, int D, float scale, float *S,
                   int ldS) {
    if (D & 15) {
        nx_attn_tier_scalar.scores(q, nq, k, nk, D, scale, S, ldS);
        return;
    }
    scores_t(NX_TYPE_F32, q, nq, (const void *const *)k, nk, D, scale, S, ldS, 0);
}

/* Few queries (a decode): keys read in the cache's type, no tile buffer. */
NX_INLINE bool scores_kv_sw(const float *const *q, int nq, const void *const *k, nx_type tk, int nk, int D,
                            float scale, float *S, int ldS, ptrdiff_t pf) {
    if (D & 31) return false;
    switch (tk) {
    case NX_TYPE_F16: scores_t(NX_TYPE_F16, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    case NX_TYPE_BF16: scores_t(NX_TYPE_BF16, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    case NX_TYPE_Q8_0: scores_t(NX_TYPE_Q8_0, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    case NX_TYPE_Q4_0: scores_t(NX_TYPE_Q4_0, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    case NX_TYPE_F32: scores_t(NX_TYPE_F32, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    default: return false;
    }
}

/* pf == 0 compiled apart: its loops then carry no prefetch branches */
static bool scores_kv(const float *const *q, int nq, const void *const *k, nx_type tk, int nk, int D, float scale,
                      float *S, int ldS, ptrdiff_t pf) {
    return pf ? scores_kv_sw(q, nq, k, tk, nk, D, scale, S, ldS, pf) : scores_kv_sw(q, nq, k, tk, nk, D, scale, S, ldS, 0);
}

/* nx_attn_exp on four lanes: rintf is FRINTN (ties to even, the default mode) */
static inline float32x4_t exp4(float32x4_t x) {
    const uint32x4_t ok = vcgeq_f32(x, vdupq_n_f32(NX_ATTN_EXP_MIN));   /* false for NaN */
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, NX_ATTN_LOG2E));
    float32x4_t r = vfmaq_f32(x, n, vdupq_n_f32(-NX_ATTN_LN2_HI));
    r = vfmaq_f32(r, n, vdupq_n_f32(-NX_ATTN_LN2_LO));
    float32x4_t p = vdupq_n_f32(NX_ATTN_P7);
    p = vfmaq_f32(vdupq_n_f32(NX_ATTN_P6), p, r);
    p = vfmaq_f32(vdupq_n_f32(NX_ATTN_P5), p, r);
    p = vfmaq_f32(vdupq_n_f32(NX_ATTN_P4), p, r);
    p = vfmaq_f32(vdupq_n_f32(NX_ATTN_P3), p, r);
    p = vfmaq_f32(vdupq_n_f32(NX_ATTN_P2), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(y), ok));
}

static void exp_row(float *s, int n, float m) {
    const float32x4_t vm = vdupq_n_f32(m);
    int j = 0;
    for (; j + 4 <= n; j += 4) vst1q_f32(s + j, exp4(vsubq_f32(vld1q_f32(s + j), vm)));
    for (; j < n; j++) s[j] = nx_attn_exp(s[j] - m);
}

/* o += E v for value rows of type t: four queries share each converted chunk of v. */
NX_INLINE void pv_t(nx_type t, const float *E, int ldE, int nq, const void *const *v, int nk, float *const *o, const float *cf, int Dv,
                    ptrdiff_t pf) {
    const size_t b32 = nx_row_size(t, 32), rb = nx_row_size(t, Dv);
    for (int i = 0; i < nq; i += 4) {
        const int nr = nq - i < 4 ? nq - i : 4;
        for (int d = 0; d < Dv; d += 16) {
            float32x4_t a[4][4];
            for (int r = 0; r < nr; r++)
                for (int c = 0; c < 4; c++) a[r][c] = vmulq_n_f32(vld1q_f32(o[i + r] + d + 4 * c), cf[i + r]);
            for (int p = 0; p < nk; p++) {
                float32x4_t x[4];
                nx_attn_pf(v[p], pf, ((size_t)d * b32 >> 5), ((size_t)(d + 16) * b32 >> 5), rb);
                ld16(t, v[p], d, x);
                for (int r = 0; r < nr; r++) {
                    const float32x4_t w = vdupq_n_f32(E[(size_t)(i + r) * ldE + p]);
                    for (int c = 0; c < 4; c++) a[r][c] = vfmaq_f32(a[r][c], w, x[c]);
                }
            }
            for (int r = 0; r < nr; r++)
                for (int c = 0; c < 4; c++) vst1q_f32(o[i + r] + d + 4 * c, a[r][c]);
        }
    }
}

static void pv(const float *E, int ldE, int nq, const float *const *v, int nk, float *const *o, const float *cf, int Dv) {
    if (Dv & 15) {
        nx_attn_tier_scalar.pv(E, ldE, nq, v, nk, o, cf, Dv);
        return;
    }
    pv_t(NX_TYPE_F32, E, ldE, nq, (const void *const *)v, nk, o, cf, Dv, 0);
}

NX_INLINE bool pv_kv_sw(const float *E, int ldE, int nq, const void *const *v, nx_type tv, int nk, float *const *o,
                        const float *cf, int Dv, ptrdiff_t pf) {
    if (Dv & 31) return false;
    switch (tv) {
    case NX_TYPE_F16: pv_t(NX_TYPE_F16, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    case NX_TYPE_BF16: pv_t(NX_TYPE_BF16, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    case NX_TYPE_Q8_0: pv_t(NX_TYPE_Q8_0, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    case NX_TYPE_Q4_0: pv_t(NX_TYPE_Q4_0, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    case NX_TYPE_F32: pv_t(NX_TYPE_F32, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    default: return false;
    }
}

static bool pv_kv(const float *E, int ldE, int nq, const void *const *v, nx_type tv, int nk, float *const *o, const float *cf, int Dv,
                  ptrdiff_t pf) {
    return pf ? pv_kv_sw(E, ldE, nq, v, tv, nk, o, cf, Dv, pf) : pv_kv_sw(E, ldE, nq, v, tv, nk, o, cf, Dv, 0);
}

/* Conversions are exact, so they equal nx_dequantize_row's bits: FCVT widens fp16 exactly
 * (NaNs quieted with their payload, as nx_half_to_f32), BF16 is the top half of a float, and
 * the block types are code * d with one rounding. */
static bool row_f32(nx_type t, const void *row, float *dst, int n) {
    if (t == NX_TYPE_F16 && (n & 7) == 0) {
        const uint16_t *x = row;
        for (int i = 0; i < n; i += 8) {
            const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(x + i));
            vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
            vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
        }
        return true;
    }
    if (t == NX_TYPE_BF16 && (n & 7) == 0) {
        const uint16_t *x = row;
        for (int i = 0; i < n; i += 8) {
            const uint16x8_t h = vld1q_u16(x + i);
            vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
            vst1q_f32(dst + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
        }
        return true;
    }
    if ((t == NX_TYPE_Q8_0 || t == NX_TYPE_Q4_0) && (n & 31) == 0) {
        for (int i = 0; i < n / 32; i++) {
            int8x16_t c0, c1;   /* values 0..15, 16..31 of the block */
            float d;
            if (t == NX_TYPE_Q8_0) {
                const nx_block_q8_0 *b = (const nx_block_q8_0 *)row + i;
                d = nx_half_to_f32(b->d);
                c0 = vld1q_s8(b->qs);
                c1 = vld1q_s8(b->qs + 16);
            } else {
                const nx_block_q4_0 *b = (const nx_block_q4_0 *)row + i;
                d = nx_half_to_f32(b->d);
                const uint8x16_t x = vld1q_u8(b->qs);
                c0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
                c1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(x, 4)), vdupq_n_s8(8));
            }
            const int8x16_t c[2] = {c0, c1};
            for (int h = 0; h < 2; h++) {
                const int16x8_t lo = vmovl_s8(vget_low_s8(c[h])), hi = vmovl_high_s8(c[h]);
                float *o = dst + 32 * i + 16 * h;
                vst1q_f32(o, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
                vst1q_f32(o + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
                vst1q_f32(o + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
                vst1q_f32(o + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
            }
        }
        return true;
    }
    return nx_attn_tier_scalar.row_f32(t, row, dst, n);
}

/* The tile's keys in attn_neon_qk.h's layout: codes as int8 (Q4_0's low nibbles are values
 * 0..15, the high ones 16..31, each minus 8) and scales as floats, so the queries of every run
 * of the tile read them without converting again. */
static void k_prep(const void *const *k, nx_type t, int nk, int D, void *buf, ptrdiff_t pf) {
    const int nb = D / 32;
    float *dk = NX_QK_DK(buf, D);
    const size_t b32 = nx_row_size(t, 32), rb = nx_row_size(t, D);
    for (int j = 0; j < nk; j++)
        for (int b = 0; b < nb; b++) {
            nx_attn_pf(k[j], pf, (size_t)b * b32, (size_t)(b + 1) * b32, rb);
            int8_t *c = (int8_t *)NX_QK_CODE(buf, b, j);
            if (t == NX_TYPE_Q8_0) {
                const nx_block_q8_0 *kb = (const nx_block_q8_0 *)k[j] + b;
                vst1q_s8(c, vld1q_s8(kb->qs));
                vst1q_s8(c + 16, vld1q_s8(kb->qs + 16));
                dk[(size_t)b * NX_ATTN_TILE + j] = nx_half_to_f32(kb->d);
            } else {
                const nx_block_q4_0 *kb = (const nx_block_q4_0 *)k[j] + b;
                const uint8x16_t v = vld1q_u8(kb->qs);
                vst1q_s8(c, vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), vdupq_n_s8(8)));
                vst1q_s8(c + 16, vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8)));
                dk[(size_t)b * NX_ATTN_TILE + j] = nx_half_to_f32(kb->d);
            }
        }
}

const nx_attn_tier nx_attn_tier_neon = {scores, exp_row, pv, row_f32, scores_kv, pv_kv, k_prep,
                                        nx_attn_scores_qk_neon};
/* the dot product levels: the same pieces, scores_qk with SDOT (attn_neon_dot.c) */
const nx_attn_tier nx_attn_tier_neon_dot = {scores, exp_row, pv, row_f32, scores_kv, pv_kv, k_prep,
                                            nx_attn_scores_qk_neon_dot};
