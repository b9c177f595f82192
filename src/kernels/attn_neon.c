/*
 * attn_neon.c — nx_attn's tier pieces with aarch64 Advanced SIMD: the 16 lanes of dot16 are
 * four q registers (lanes 0-3, 4-7, 8-11, 12-15), so the contract's first two reduction steps
 * are (a0 + a2) + (a1 + a3); four queries share each key load. Multiply-adds are explicit
 * vfmaq_f32 (one rounding, as fmaf) and everything else is a separate add or multiply (the
 * aarch64 build has -ffp-contract=off): bit-identical to the scalar reference in attn.c.
 * Heads whose sizes are not multiples of 16 take the scalar path.
 */
#include <arm_neon.h>
#include <string.h>
#include "core/fp16.h"
#include "kernels/attn.h"
#include "kernels/attn_impl.h"
#include "quant/blocks.h"

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

static void scores(const float *const *q, int nq, const float *const *k, int nk, int D, float scale, float *S,
                   int ldS) {
    if (D & 15) {
        nx_attn_tier_scalar.scores(q, nq, k, nk, D, scale, S, ldS);
        return;
    }
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        const float *qq[4] = {q[i], q[i + 1], q[i + 2], q[i + 3]};
        for (int j = 0; j < nk; j++) {
            const float *kj = k[j];
            float32x4_t a[4][4];
            for (int r = 0; r < 4; r++)
                for (int c = 0; c < 4; c++) a[r][c] = vdupq_n_f32(0.0f);
            for (int d = 0; d < D; d += 16) {
                const float32x4_t x0 = vld1q_f32(kj + d), x1 = vld1q_f32(kj + d + 4);
                const float32x4_t x2 = vld1q_f32(kj + d + 8), x3 = vld1q_f32(kj + d + 12);
                for (int r = 0; r < 4; r++) {
                    a[r][0] = vfmaq_f32(a[r][0], vld1q_f32(qq[r] + d), x0);
                    a[r][1] = vfmaq_f32(a[r][1], vld1q_f32(qq[r] + d + 4), x1);
                    a[r][2] = vfmaq_f32(a[r][2], vld1q_f32(qq[r] + d + 8), x2);
                    a[r][3] = vfmaq_f32(a[r][3], vld1q_f32(qq[r] + d + 12), x3);
                }
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
    for (; i < nq; i++)
        for (int j = 0; j < nk; j++) {
            float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
            for (int d = 0; d < D; d += 16) {
                a0 = vfmaq_f32(a0, vld1q_f32(q[i] + d), vld1q_f32(k[j] + d));
                a1 = vfmaq_f32(a1, vld1q_f32(q[i] + d + 4), vld1q_f32(k[j] + d + 4));
                a2 = vfmaq_f32(a2, vld1q_f32(q[i] + d + 8), vld1q_f32(k[j] + d + 8));
                a3 = vfmaq_f32(a3, vld1q_f32(q[i] + d + 12), vld1q_f32(k[j] + d + 12));
            }
            S[(size_t)i * ldS + j] = reduce1(reduce_to4(a0, a1, a2, a3)) * scale;
        }
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

static void pv(const float *E, int ldE, int nq, const float *const *v, int nk, float *const *o, int Dv) {
    if (Dv & 15) {
        nx_attn_tier_scalar.pv(E, ldE, nq, v, nk, o, Dv);
        return;
    }
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        const float *e[4] = {E + (size_t)i * ldE, E + (size_t)(i + 1) * ldE, E + (size_t)(i + 2) * ldE,
                             E + (size_t)(i + 3) * ldE};
        for (int d = 0; d < Dv; d += 8) {
            float32x4_t a[4][2];
            for (int r = 0; r < 4; r++) {
                a[r][0] = vld1q_f32(o[i + r] + d);
                a[r][1] = vld1q_f32(o[i + r] + d + 4);
            }
            for (int p = 0; p < nk; p++) {
                const float32x4_t x0 = vld1q_f32(v[p] + d), x1 = vld1q_f32(v[p] + d + 4);
                for (int r = 0; r < 4; r++) {
                    const float32x4_t w = vdupq_n_f32(e[r][p]);
                    a[r][0] = vfmaq_f32(a[r][0], w, x0);
                    a[r][1] = vfmaq_f32(a[r][1], w, x1);
                }
            }
            for (int r = 0; r < 4; r++) {
                vst1q_f32(o[i + r] + d, a[r][0]);
                vst1q_f32(o[i + r] + d + 4, a[r][1]);
            }
        }
    }
    for (; i < nq; i++) {
        const float *e = E + (size_t)i * ldE;
        for (int d = 0; d < Dv; d += 16) {
            float32x4_t a0 = vld1q_f32(o[i] + d), a1 = vld1q_f32(o[i] + d + 4);
            float32x4_t a2 = vld1q_f32(o[i] + d + 8), a3 = vld1q_f32(o[i] + d + 12);
            for (int p = 0; p < nk; p++) {
                const float32x4_t w = vdupq_n_f32(e[p]);
                a0 = vfmaq_f32(a0, w, vld1q_f32(v[p] + d));
                a1 = vfmaq_f32(a1, w, vld1q_f32(v[p] + d + 4));
                a2 = vfmaq_f32(a2, w, vld1q_f32(v[p] + d + 8));
                a3 = vfmaq_f32(a3, w, vld1q_f32(v[p] + d + 12));
            }
            vst1q_f32(o[i] + d, a0);
            vst1q_f32(o[i] + d + 4, a1);
            vst1q_f32(o[i] + d + 8, a2);
            vst1q_f32(o[i] + d + 12, a3);
        }
    }
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

const nx_attn_tier nx_attn_tier_neon = {scores, exp_row, pv, row_f32};
