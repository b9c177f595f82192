/*
 * ops_neon.c — aarch64 Advanced SIMD versions of the ops in ops.h (4 floats per vector), for
 * every NEON level (the ops need no integer dot or matrix products).
 *
 * The formulas are ops_avx2.c's (polynomial exp / expm1 / log1p, 2^n in two halves), with
 * the multiply-adds written as vfmaq / vfmsq (the aarch64 build has -ffp-contract=off, so
 * nothing else is fused); accuracy against the scalar reference as ops.h states. NaN rules
 * follow the x86 files: FMIN / FMAX propagate a NaN as minps / maxps do with the NaN second,
 * max skips NaN through FMAXNM. NEON has no masked loads: a tail of < 4 values goes through a
 * zero-padded copy on the stack, so nothing past n is read or written, and reductions mask the
 * padded lanes out.
 */
#include "kernels/ops.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* lanes [0, r) set, r in [0, 4] */
AI uint32x4_t tail_mask(int r) {
    static const uint32_t idx[4] = {0, 1, 2, 3};
    return vcltq_u32(vld1q_u32(idx), vdupq_n_u32((uint32_t)r));
}
AI float32x4_t ld_tail(const float *p, int r) {
    float t[4] = {0, 0, 0, 0};
    memcpy(t, p, (size_t)r * sizeof(float));
    return vld1q_f32(t);
}
AI void st_tail(float *p, int r, float32x4_t v) {
    float t[4];
    vst1q_f32(t, v);
    memcpy(p, t, (size_t)r * sizeof(float));
}
AI float32x4_t sel(uint32x4_t m, float32x4_t a, float32x4_t b) { return vbslq_f32(m, a, b); }

#define LOG2E  1.44269504088896341f
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.42860682030941723212e-6f

/* ===== exp / expm1 / log1p (the method of ops_avx512.c) ===== */

AI float32x4_t poly_exp_m1(float32x4_t r) {   /* r/2 + r^2/6 + ... + r^6/5040 */
    float32x4_t p = vdupq_n_f32(1.0f / 5040);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    return vmulq_f32(p, r);
}

/* 2^n for integral n in [-150, 128] as two factors 2^(n>>1) * 2^(n - (n>>1)), both normal. */
AI float32x4_t pow2_split(float32x4_t n, float32x4_t *second) {
    const int32x4_t ni = vcvtq_s32_f32(n), n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    *second = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
}

AI float32x4_t v_exp(float32x4_t x) {
    x = vminq_f32(vdupq_n_f32(89.0f), x);     /* NaN passes through */
    x = vmaxq_f32(vdupq_n_f32(-104.0f), x);
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, LOG2E));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
    float32x4_t p = vfmaq_f32(r, poly_exp_m1(r), r);
    p = vaddq_f32(p, vdupq_n_f32(1.0f));
    float32x4_t s2, s1 = pow2_split(n, &s2);
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

/* e^t - 1 for t in [0, 40] (or NaN). */
AI float32x4_t v_expm1_pos(float32x4_t t) {
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(t, LOG2E));
    float32x4_t r = vfmsq_f32(t, n, vdupq_n_f32(LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
    const float32x4_t q = vfmaq_f32(r, poly_exp_m1(r), r);
    const float32x4_t s = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23));
    return vfmaq_f32(vsubq_f32(s, vdupq_n_f32(1.0f)), s, q);
}

AI float32x4_t v_tanh(float32x4_t x) {
    const uint32x4_t sign = vdupq_n_u32(0x80000000u);
    const float32x4_t ax = vabsq_f32(x);
    const float32x4_t t = vminq_f32(vdupq_n_f32(40.0f), vaddq_f32(ax, ax));
    const float32x4_t em1 = v_expm1_pos(t);   /* NaN: q is NaN, so em1 and y are */
    const float32x4_t y = vdivq_f32(em1, vaddq_f32(em1, vdupq_n_f32(2.0f)));
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(y), vandq_u32(sign, vreinterpretq_u32_f32(x))));
}

AI float32x4_t v_log1p_01(float32x4_t t) {
    const float32x4_t s = vdivq_f32(t, vaddq_f32(t, vdupq_n_f32(2.0f)));
    const float32x4_t s2 = vmulq_f32(s, s);
    float32x4_t p = vdupq_n_f32(1.0f / 17);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 15), p, s2);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 13), p, s2);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 11), p, s2);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 9), p, s2);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 7), p, s2);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 5), p, s2);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 3), p, s2);
    const float32x4_t half = vfmaq_f32(s, p, vmulq_f32(s2, s));
    return vaddq_f32(half, half);
}

AI float32x4_t v_sigmoid(float32x4_t x) {
    const float32x4_t e = v_exp(vnegq_f32(x));
    return vdivq_f32(vdupq_n_f32(1.0f), vaddq_f32(vdupq_n_f32(1.0f), e));
}

AI float32x4_t v_silu(float32x4_t x) {
    const float32x4_t e = v_exp(vnegq_f32(x));
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e));
}

AI float32x4_t v_gelu(float32x4_t x) {
    const float32x4_t ax = vmulq_n_f32(x, 0.044715f);
    const float32x4_t inner = vfmaq_f32(vdupq_n_f32(1.0f), ax, x);
    const float32x4_t u = vmulq_f32(vmulq_n_f32(x, 0.79788456080286535587989211986876f), inner);
    const float32x4_t e = v_exp(vmulq_n_f32(u, -2.0f));
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e));
}

AI float32x4_t v_softplus(float32x4_t x) {
    const float32x4_t nax = vnegq_f32(vabsq_f32(x));
    const float32x4_t y = vaddq_f32(vmaxq_f32(vdupq_n_f32(0.0f), x), v_log1p_01(v_exp(nax)));
    return sel(vcgtq_f32(x, vdupq_n_f32(20.0f)), x, y);
}

/* ===== Loops ===== */

#define UNARY(name, F)                                                       \
    static void name(float *y, const float *x, int n) {                      \
        int i = 0;                                                           \
        for (; i + 4 <= n; i += 4) vst1q_f32(y + i, F(vld1q_f32(x + i)));    \
        if (i < n) st_tail(y + i, n - i, F(ld_tail(x + i, n - i)));          \
    }

#define BINARY(name, EXPR)                                                   \
    static void name(float *y, const float *a, const float *b, int n) {      \
        int i = 0;                                                           \
        for (; i + 4 <= n; i += 4) {                                         \
            const float32x4_t va = vld1q_f32(a + i), vb = vld1q_f32(b + i);  \
            vst1q_f32(y + i, EXPR);                                          \
        }                                                                    \
        if (i < n) {                                                         \
            const float32x4_t va = ld_tail(a + i, n - i), vb = ld_tail(b + i, n - i); \
            st_tail(y + i, n - i, EXPR);                                     \
        }                                                                    \
    }

UNARY(o_exp, v_exp)
UNARY(o_tanh, v_tanh)
UNARY(o_sigmoid, v_sigmoid)
UNARY(o_silu, v_silu)
UNARY(o_gelu, v_gelu)
UNARY(o_softplus, v_softplus)
BINARY(o_add, vaddq_f32(va, vb))
BINARY(o_mul, vmulq_f32(va, vb))
BINARY(o_swiglu, vmulq_f32(v_silu(va), vb))
BINARY(o_geglu, vmulq_f32(v_gelu(va), vb))

/* nx_conv_silu: the taps' products and sums as o_mul / o_add round them, then v_silu */
static void o_conv_silu(float *y, const float *x, const float *w, long w_stride, int K, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t a = vmulq_f32(vld1q_f32(x + i), vld1q_f32(w + i));
        for (int j = 1; j < K; j++)
            a = vaddq_f32(a, vmulq_f32(vld1q_f32(x + (size_t)j * (size_t)n + i), vld1q_f32(w + (size_t)j * (size_t)w_stride + i)));
        vst1q_f32(y + i, v_silu(a));
    }
    if (i < n) {
        float32x4_t a = vmulq_f32(ld_tail(x + i, n - i), ld_tail(w + i, n - i));
        for (int j = 1; j < K; j++)
            a = vaddq_f32(a, vmulq_f32(ld_tail(x + (size_t)j * (size_t)n + i, n - i),
                                       ld_tail(w + (size_t)j * (size_t)w_stride + i, n - i)));
        st_tail(y + i, n - i, v_silu(a));
    }
}

static void o_softcap(float *y, const float *x, int n, float cap) {
    const float32x4_t c = vdupq_n_f32(cap);
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_f32(c, v_tanh(vdivq_f32(vld1q_f32(x + i), c))));
    if (i < n) st_tail(y + i, n - i, vmulq_f32(c, v_tanh(vdivq_f32(ld_tail(x + i, n - i), c))));
}

static void o_scale(float *y, const float *x, float s, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(x + i), s));
    if (i < n) st_tail(y + i, n - i, vmulq_n_f32(ld_tail(x + i, n - i), s));
}

static void o_axpy(float *y, const float *x, float a, int n) {
    const float32x4_t va = vdupq_n_f32(a);
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
    if (i < n) st_tail(y + i, n - i, vfmaq_f32(ld_tail(y + i, n - i), va, ld_tail(x + i, n - i)));
}

static void o_mul_add(float *y, const float *a, const float *b, const float *c, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(c + i), vld1q_f32(a + i), vld1q_f32(b + i)));
    if (i < n) {
        const int r = n - i;
        st_tail(y + i, r, vfmaq_f32(ld_tail(c + i, r), ld_tail(a + i, r), ld_tail(b + i, r)));
    }
}

/* ===== Reductions ===== */

/* Four float lanes added to two double accumulators (lanes 0-1, 2-3). */
AI void acc_pd(float64x2_t *s0, float64x2_t *s1, float32x4_t v) {
    *s0 = vaddq_f64(*s0, vcvt_f64_f32(vget_low_f32(v)));
    *s1 = vaddq_f64(*s1, vcvt_high_f64_f32(v));
}

static double o_sumsq(const float *x, int n) {
    float64x2_t s0 = vdupq_n_f64(0.0), s1 = s0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        acc_pd(&s0, &s1, vmulq_f32(v, v));
    }
    if (i < n) {
        const float32x4_t v = ld_tail(x + i, n - i);   /* zero lanes add 0 */
        acc_pd(&s0, &s1, vmulq_f32(v, v));
    }
    return vaddvq_f64(vaddq_f64(s0, s1));
}

static void o_scale_mul(float *y, const float *x, float s, const float *w, int n) {
    if (!w) { o_scale(y, x, s, n); return; }
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), s), vld1q_f32(w + i)));
    if (i < n) st_tail(y + i, n - i, vmulq_f32(vmulq_n_f32(ld_tail(x + i, n - i), s), ld_tail(w + i, n - i)));
}

static float o_max(const float *x, int n) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    float32x4_t acc = ninf;
    int i = 0;
    for (; i + 4 <= n; i += 4) acc = vmaxnmq_f32(acc, vld1q_f32(x + i));   /* NaN in x: keeps acc */
    if (i < n) acc = vmaxnmq_f32(acc, sel(tail_mask(n - i), ld_tail(x + i, n - i), ninf));
    return vmaxnmvq_f32(acc);
}

static double o_exp_sum(float *y, const float *x, float mx, int n) {
    const float32x4_t vm = vdupq_n_f32(mx);
    float64x2_t s0 = vdupq_n_f64(0.0), s1 = s0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t e = v_exp(vsubq_f32(vld1q_f32(x + i), vm));
        if (y) vst1q_f32(y + i, e);
        acc_pd(&s0, &s1, e);
    }
    if (i < n) {
        const int r = n - i;
        const float32x4_t e = sel(tail_mask(r), v_exp(vsubq_f32(ld_tail(x + i, r), vm)), vdupq_n_f32(0.0f));
        if (y) st_tail(y + i, r, e);
        acc_pd(&s0, &s1, e);
    }
    return vaddvq_f64(vaddq_f64(s0, s1));
}

static void o_scale_add(float *y, const float *x, float s, const float *b, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vaddq_f32(vmulq_n_f32(vld1q_f32(x + i), s), vld1q_f32(b + i)));
    if (i < n) st_tail(y + i, n - i, vaddq_f32(vmulq_n_f32(ld_tail(x + i, n - i), s), ld_tail(b + i, n - i)));
}

/* Per lane the first maximum (NaN never compares), then the lanes' best by value, then index. */
static int o_argmax(const float *x, int n) {
    static const int32_t idx0[4] = {0, 1, 2, 3};
    float32x4_t bv = vdupq_n_f32(-INFINITY);
    int32x4_t bi = vdupq_n_s32(-1), idx = vld1q_s32(idx0);
    for (int i = 0; i < n; i += 4) {
        const int r = n - i < 4 ? n - i : 4;
        const float32x4_t v = r == 4 ? vld1q_f32(x + i) : ld_tail(x + i, r);
        const uint32x4_t gt = vcgtq_f32(v, bv);
        const uint32x4_t first = vandq_u32(vceqq_f32(v, bv), vcltzq_s32(bi));
        const uint32x4_t upd = vandq_u32(vorrq_u32(gt, first), tail_mask(r));
        bv = vbslq_f32(upd, v, bv);
        bi = vbslq_s32(upd, idx, bi);
        idx = vaddq_s32(idx, vdupq_n_s32(4));
    }
    float lv[4];
    int32_t li[4];
    vst1q_f32(lv, bv);
    vst1q_s32(li, bi);
    int best = -1;
    float b = -INFINITY;
    for (int j = 0; j < 4; j++) {
        if (li[j] < 0) continue;
        if (best < 0 || lv[j] > b || (lv[j] == b && li[j] < best)) { b = lv[j]; best = li[j]; }
    }
    return best < 0 ? 0 : best;
}

static int o_topk(const float *x, int n, int k, int *idx, float *val) {
    int count = 0, i = 0;
    for (; i < n && count < k; i++)
        if (x[i] == x[i]) count = nx_topk_insert(idx, val, count, k, x[i], i);
    float32x4_t thr = vdupq_n_f32(val[k - 1]);
    for (; i + 4 <= n; i += 4) {
        if (vmaxvq_u32(vcgtq_f32(vld1q_f32(x + i), thr)) == 0) continue;   /* nothing above the k-th */
        for (int j = i; j < i + 4; j++)
            if (x[j] == x[j]) count = nx_topk_insert(idx, val, count, k, x[j], j);
        thr = vdupq_n_f32(val[k - 1]);
    }
    for (; i < n; i++)
        if (x[i] == x[i]) count = nx_topk_insert(idx, val, count, k, x[i], i);
    return count;
}

static void o_rope_neox(float *x, int n_heads, int head_stride, int n_rot, const float *cache) {
    const int half = n_rot / 2;
    const float *cs = cache, *sn = cache + half;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (long)h * head_stride;
        for (int i = 0; i < half; i += 4) {
            const int r = half - i < 4 ? half - i : 4;
            const float32x4_t x0 = r == 4 ? vld1q_f32(v + i) : ld_tail(v + i, r);
            const float32x4_t x1 = r == 4 ? vld1q_f32(v + half + i) : ld_tail(v + half + i, r);
            const float32x4_t c = r == 4 ? vld1q_f32(cs + i) : ld_tail(cs + i, r);
            const float32x4_t s = r == 4 ? vld1q_f32(sn + i) : ld_tail(sn + i, r);
            const float32x4_t y0 = vsubq_f32(vmulq_f32(x0, c), vmulq_f32(x1, s));
            const float32x4_t y1 = vaddq_f32(vmulq_f32(x0, s), vmulq_f32(x1, c));
            if (r == 4) {
                vst1q_f32(v + i, y0);
                vst1q_f32(v + half + i, y1);
            } else {
                st_tail(v + i, r, y0);
                st_tail(v + half + i, r, y1);
            }
        }
    }
}

/* The fixed order of ops.h: eight accumulators hold lanes 0-3, 4-7, ..., 28-31; the tail's
 * lanes past n keep their accumulator unchanged (a select, as the scalar loop skips them). */
static float o_dot(const float *a, const float *b, int n) {
    float32x4_t acc[8];
    for (int q = 0; q < 8; q++) acc[q] = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int q = 0; q < 8; q++) acc[q] = vfmaq_f32(acc[q], vld1q_f32(a + i + 4 * q), vld1q_f32(b + i + 4 * q));
    for (int q = 0; q < 8 && i + 4 * q < n; q++) {
        const int j = i + 4 * q, r = n - j < 4 ? n - j : 4;
        const float32x4_t f = vfmaq_f32(acc[q], ld_tail(a + j, r), ld_tail(b + j, r));
        acc[q] = sel(tail_mask(r), f, acc[q]);
    }
    for (int q = 0; q < 4; q++) acc[q] = vaddq_f32(acc[q], acc[q + 4]);   /* j += j+16 */
    for (int q = 0; q < 2; q++) acc[q] = vaddq_f32(acc[q], acc[q + 2]);   /* j += j+8 */
    const float32x4_t s4 = vaddq_f32(acc[0], acc[1]);                     /* j += j+4 */
    const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4)); /* j += j+2 */
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

const nx_ops_impl nx_ops_neon = {
    .sumsq = o_sumsq, .scale_mul = o_scale_mul, .max = o_max, .exp_sum = o_exp_sum,
    .scale_add = o_scale_add, .argmax = o_argmax, .topk = o_topk, .rope_neox = o_rope_neox,
    .exp = o_exp, .tanh = o_tanh, .sigmoid = o_sigmoid, .silu = o_silu, .gelu = o_gelu,
    .softplus = o_softplus, .softcap = o_softcap, .swiglu = o_swiglu, .geglu = o_geglu,
    .add = o_add, .mul = o_mul, .scale = o_scale, .axpy = o_axpy, .mul_add = o_mul_add,
    .dot = o_dot, .conv_silu = o_conv_silu,
};
