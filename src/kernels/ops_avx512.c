/*
 * ops_avx512.c — AVX-512 versions of the ops in ops.h (16 floats per vector, masked tails).
 *
 * Same formulas and rounding steps as the scalar reference in ops.c, except that libm's
 * expf/tanhf/log1pf are replaced by polynomials (accuracy stated in ops.h) and the compiler
 * may fuse a multiply with the following add. Tails are handled with masked loads/stores, so
 * every element goes through the same vector formula. Only called when nx_cpu_level_get()
 * says AVX-512 is available; never reads or writes past n.
 */
#include "kernels/ops.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>

static inline __mmask16 tail_mask(int r) { return (__mmask16)((1u << r) - 1u); }   /* r in [0, 16] */

/* ===== exp / expm1 / log1p =====
 * exp: n = round(x / ln2), r = x - n ln2 (two-part ln2, |r| <= 0.347), e^r by its degree-7
 * Taylor polynomial (truncation 5e-9), times 2^n via scalef (handles overflow to inf and
 * gradual underflow). Max relative error ~2 ulp. */

#define LOG2E  1.44269504088896341f
#define LN2_HI 0.693145751953125f          /* 15 significant bits: n * LN2_HI is exact */
#define LN2_LO 1.42860682030941723212e-6f

static inline __m512 poly_exp_m1(__m512 r) {   /* (e^r - 1) / r - 1, i.e. r/2 + r^2/6 + ... */
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    return _mm512_mul_ps(p, r);
}

static inline __m512 v_exp(__m512 x) {
    /* clamp (NaN passes: min/max return their second operand when one is NaN) */
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    /* e^r = 1 + r + r * (r/2 + r^2/6 + ...) */
    __m512 p = _mm512_fmadd_ps(poly_exp_m1(r), r, r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* e^t - 1 for t in [0, 40] (or NaN), relative error ~2 ulp including t near 0. */
static inline __m512 v_expm1_pos(__m512 t) {
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), t);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    __m512 q = _mm512_fmadd_ps(poly_exp_m1(r), r, r);                 /* e^r - 1 */
    __m512 s = _mm512_scalef_ps(_mm512_set1_ps(1.0f), n);             /* 2^n, n >= 0 */
    /* e^t - 1 = 2^n (e^r - 1) + (2^n - 1); 2^n - 1 is exact for n <= 24 */
    return _mm512_fmadd_ps(s, q, _mm512_sub_ps(s, _mm512_set1_ps(1.0f)));
}

/* tanh(x) = sign(x) * em1 / (em1 + 2), em1 = e^(2|x|) - 1: no cancellation near 0. */
static inline __m512 v_tanh(__m512 x) {
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    __m512 ax = _mm512_andnot_ps(sign, x);
    __m512 t = _mm512_min_ps(_mm512_set1_ps(40.0f), _mm512_add_ps(ax, ax));
    __m512 em1 = v_expm1_pos(t);
    __m512 y = _mm512_div_ps(em1, _mm512_add_ps(em1, _mm512_set1_ps(2.0f)));
    return _mm512_or_ps(y, _mm512_and_ps(sign, x));
}

/* log1p(t) for t in [0, 1]: 2 atanh(s), s = t / (2 + t) in [0, 1/3], odd series to s^17. */
static inline __m512 v_log1p_01(__m512 t) {
    __m512 s = _mm512_div_ps(t, _mm512_add_ps(t, _mm512_set1_ps(2.0f)));
    __m512 s2 = _mm512_mul_ps(s, s);
    __m512 p = _mm512_set1_ps(1.0f / 17);
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 15));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 13));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 11));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 9));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 7));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 5));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 3));
    __m512 s3 = _mm512_mul_ps(s2, s);
    __m512 half = _mm512_fmadd_ps(p, s3, s);                           /* atanh(s) */
    return _mm512_add_ps(half, half);
}

static inline __m512 v_sigmoid(__m512 x) {
    __m512 e = v_exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

static inline __m512 v_silu(__m512 x) {
    __m512 e = v_exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* ggml's 0.5 x (1 + tanh(u)) written as x / (1 + e^(-2u)): same value, no cancellation. */
static inline __m512 v_gelu(__m512 x) {
    __m512 ax = _mm512_mul_ps(_mm512_set1_ps(0.044715f), x);
    __m512 inner = _mm512_fmadd_ps(ax, x, _mm512_set1_ps(1.0f));
    __m512 u = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.79788456080286535587989211986876f), x), inner);
    __m512 e = v_exp(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* softplus = max(x, 0) + log1p(e^-|x|); exactly x above 20 (ggml's threshold). */
static inline __m512 v_softplus(__m512 x) {
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    __m512 nax = _mm512_or_ps(x, sign);                                 /* -|x| */
    __m512 y = _mm512_add_ps(_mm512_max_ps(_mm512_setzero_ps(), x), v_log1p_01(v_exp(nax)));
    __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(20.0f), _CMP_GT_OQ);
    return _mm512_mask_mov_ps(y, big, x);
}

/* ===== Unary / binary loops ===== */

#define UNARY(name, F)                                                                   \
    static void name(float *y, const float *x, int n) {                                  \
        int i = 0;                                                                       \
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i))); \
        if (i < n) {                                                                     \
            __mmask16 m = tail_mask(n - i);                                              \
            _mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));         \
        }                                                                                \
    }

#define BINARY(name, EXPR)                                                                   \
    static void name(float *y, const float *a, const float *b, int n) {                      \
        int i = 0;                                                                           \
        for (; i + 16 <= n; i += 16) {                                                       \
            __m512 va = _mm512_loadu_ps(a + i), vb = _mm512_loadu_ps(b + i);                 \
            _mm512_storeu_ps(y + i, EXPR);                                                   \
        }                                                                                    \
        if (i < n) {                                                                         \
            __mmask16 m = tail_mask(n - i);                                                  \
            __m512 va = _mm512_maskz_loadu_ps(m, a + i), vb = _mm512_maskz_loadu_ps(m, b + i); \
            _mm512_mask_storeu_ps(y + i, m, EXPR);                                           \
        }                                                                                    \
    }

UNARY(o_exp, v_exp)
UNARY(o_tanh, v_tanh)
UNARY(o_sigmoid, v_sigmoid)
UNARY(o_silu, v_silu)
UNARY(o_gelu, v_gelu)
UNARY(o_softplus, v_softplus)
BINARY(o_add, _mm512_add_ps(va, vb))
BINARY(o_mul, _mm512_mul_ps(va, vb))
BINARY(o_swiglu, _mm512_mul_ps(v_silu(va), vb))
BINARY(o_geglu, _mm512_mul_ps(v_gelu(va), vb))

/* nx_conv_silu: the taps' products and sums as o_mul / o_add round them, then v_silu (the
 * barriers keep the compiler from contracting a product and its sum into one fma) */
#define NOFMA(v) __asm__("" : "+v"(v))
static void o_conv_silu(float *y, const float *x, const float *w, long w_stride, int K, int n) {
    for (int i = 0; i < n; i += 16) {   /* full vectors under an all-ones mask, then the tail's */
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, w + i));
        NOFMA(a);
        for (int j = 1; j < K; j++) {
            __m512 pr = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + (size_t)j * (size_t)n + i),
                                      _mm512_maskz_loadu_ps(m, w + (size_t)j * (size_t)w_stride + i));
            NOFMA(pr);
            a = _mm512_add_ps(a, pr);
        }
        _mm512_mask_storeu_ps(y + i, m, v_silu(a));
    }
}

static void o_softcap(float *y, const float *x, int n, float cap) {
    const __m512 c = _mm512_set1_ps(cap);
    int i = 0;
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(c, v_tanh(_mm512_div_ps(v, c))));
    }
}

static void o_scale(float *y, const float *x, float s, int n) {
    const __m512 vs = _mm512_set1_ps(s);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vs));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
    }
}

static void o_axpy(float *y, const float *x, float a, int n) {
    const __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        __m512 r = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

static void o_mul_add(float *y, const float *a, const float *b, const float *c, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 r = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i),
                                   _mm512_maskz_loadu_ps(m, c + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

/* ===== Reductions ===== */

static inline __m512d cvt_lo(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline __m512d cvt_hi(__m512 v) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)); }

static double o_sumsq(const float *x, int n) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 sq = _mm512_mul_ps(v, v);                  /* squares rounded to float, as ggml */
        s0 = _mm512_add_pd(s0, cvt_lo(sq));
        s1 = _mm512_add_pd(s1, cvt_hi(sq));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

static void o_scale_mul(float *y, const float *x, float s, const float *w, int n) {
    if (!w) { o_scale(y, x, s, n); return; }
    const __m512 vs = _mm512_set1_ps(s);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 r = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs), _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

static float o_max(const float *x, int n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 acc = ninf;
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        acc = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, m, x + i), acc);   /* NaN in x: keeps acc */
    }
    return _mm512_reduce_max_ps(acc);
}

static double o_exp_sum(float *y, const float *x, float mx, int n) {
    const __m512 vm = _mm512_set1_ps(mx);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 e = _mm512_maskz_mov_ps(m, v_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vm)));
        if (y) _mm512_mask_storeu_ps(y + i, m, e);
        s0 = _mm512_add_pd(s0, cvt_lo(e));
        s1 = _mm512_add_pd(s1, cvt_hi(e));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

static void o_scale_add(float *y, const float *x, float s, const float *b, int n) {
    const __m512 vs = _mm512_set1_ps(s);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(t, _mm512_maskz_loadu_ps(m, b + i)));
    }
}

/* Per lane: best value and the first index reaching it; then the lowest index among the lanes
 * holding the overall maximum. */
static int o_argmax(const float *x, int n) {
    __m512 bv = _mm512_set1_ps(-INFINITY);
    __m512i bi = _mm512_set1_epi32(-1);
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_set1_epi32(16);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __mmask16 gt = _mm512_mask_cmp_ps_mask(m, v, bv, _CMP_GT_OQ);
        __mmask16 first = _mm512_mask_cmp_ps_mask(m, v, bv, _CMP_EQ_OQ) &
                          _mm512_cmp_epi32_mask(bi, _mm512_setzero_si512(), _MM_CMPINT_LT);
        __mmask16 upd = gt | first;
        bv = _mm512_mask_mov_ps(bv, upd, v);
        bi = _mm512_mask_mov_epi32(bi, upd, idx);
        idx = _mm512_add_epi32(idx, step);
    }
    __mmask16 valid = _mm512_cmp_epi32_mask(bi, _mm512_setzero_si512(), _MM_CMPINT_GE);
    if (!valid) return 0;
    float mx = _mm512_mask_reduce_max_ps(valid, bv);
    __mmask16 at = valid & _mm512_cmp_ps_mask(bv, _mm512_set1_ps(mx), _CMP_EQ_OQ);
    return _mm512_mask_reduce_min_epi32(at, bi);
}

/* Fill the list with the first k non-NaN entries, then only entries above the current k-th
 * value can enter: a vector compare skips 16 entries at a time. Same result as the scalar. */
static int o_topk(const float *x, int n, int k, int *idx, float *val) {
    int count = 0, i = 0;
    for (; i < n && count < k; i++)
        if (x[i] == x[i]) count = nx_topk_insert(idx, val, count, k, x[i], i);
    __m512 thr = _mm512_set1_ps(val[k - 1]);
    for (; i + 16 <= n; i += 16) {
        __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), thr, _CMP_GT_OQ);
        if (!m) continue;
        for (unsigned bits = m; bits; bits &= bits - 1) {
            int j = i + __builtin_ctz(bits);
            count = nx_topk_insert(idx, val, count, k, x[j], j);
        }
        thr = _mm512_set1_ps(val[k - 1]);
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
        for (int i = 0; i < half; i += 16) {
            __mmask16 m = half - i >= 16 ? (__mmask16)0xFFFF : tail_mask(half - i);
            __m512 x0 = _mm512_maskz_loadu_ps(m, v + i), x1 = _mm512_maskz_loadu_ps(m, v + half + i);
            __m512 c = _mm512_maskz_loadu_ps(m, cs + i), s = _mm512_maskz_loadu_ps(m, sn + i);
            _mm512_mask_storeu_ps(v + i, m, _mm512_sub_ps(_mm512_mul_ps(x0, c), _mm512_mul_ps(x1, s)));
            _mm512_mask_storeu_ps(v + half + i, m, _mm512_add_ps(_mm512_mul_ps(x0, s), _mm512_mul_ps(x1, c)));
        }
    }
}

/* The fixed order of ops.h: lanes 0-15 in a0, 16-31 in a1, then the pairwise fold. */
static float o_dot(const float *a, const float *b, int n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
    }
    int rem = n - i;
    if (rem > 0) {
        __mmask16 m0 = tail_mask(rem < 16 ? rem : 16);
        a0 = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m0, a + i), _mm512_maskz_loadu_ps(m0, b + i), a0, m0);
        if (rem > 16) {
            __mmask16 m1 = tail_mask(rem - 16);
            a1 = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m1, a + i + 16), _mm512_maskz_loadu_ps(m1, b + i + 16),
                                       a1, m1);
        }
    }
    __m512 s16 = _mm512_add_ps(a0, a1);
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s16), _mm512_extractf32x8_ps(s16, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

const nx_ops_impl nx_ops_avx512 = {
    .sumsq = o_sumsq, .scale_mul = o_scale_mul, .max = o_max, .exp_sum = o_exp_sum,
    .scale_add = o_scale_add, .argmax = o_argmax, .topk = o_topk, .rope_neox = o_rope_neox,
    .exp = o_exp, .tanh = o_tanh, .sigmoid = o_sigmoid, .silu = o_silu, .gelu = o_gelu,
    .softplus = o_softplus, .softcap = o_softcap, .swiglu = o_swiglu, .geglu = o_geglu,
    .add = o_add, .mul = o_mul, .scale = o_scale, .axpy = o_axpy, .mul_add = o_mul_add,
    .dot = o_dot, .conv_silu = o_conv_silu,
};

#else
const nx_ops_impl nx_ops_avx512 = {0};   /* built without AVX-512: the dispatcher skips it */
#endif
