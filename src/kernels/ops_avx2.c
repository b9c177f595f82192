/*
 * ops_avx2.c — AVX2 + FMA versions of the ops in ops.h (8 floats per vector).
 *
 * Same formulas as ops_avx512.c (polynomial exp/expm1/log1p, accuracy stated in ops.h); 2^n is
 * built from exponent bits in two halves so that overflow gives inf and small results
 * underflow gradually. Tails use maskload/maskstore, so every element goes through the same
 * vector formula and nothing past n is touched. Only called when nx_cpu_level_get() says
 * AVX2 is available.
 */
#include "kernels/ops.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>

static inline __m256i tail_mask(int r) {   /* lanes [0, r) set, r in [0, 8] */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline __m256i mask_at(int n, int i) { return tail_mask(n - i >= 8 ? 8 : n - i); }

#define LOG2E  1.44269504088896341f
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.42860682030941723212e-6f

/* ===== exp / expm1 / log1p (see ops_avx512.c for the method) ===== */

static inline __m256 poly_exp_m1(__m256 r) {   /* r/2 + r^2/6 + ... + r^6/5040 */
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    return _mm256_mul_ps(p, r);
}

/* 2^n for integral n in [-150, 128] as two factors 2^(n>>1) * 2^(n - (n>>1)), both normal. */
static inline __m256 pow2_split(__m256 n, __m256 *second) {
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    *second = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
}

static inline __m256 v_exp(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);     /* NaN passes through (second operand) */
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(poly_exp_m1(r), r, r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    __m256 s2, s1 = pow2_split(n, &s2);
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* e^t - 1 for t in [0, 40] (or NaN). */
static inline __m256 v_expm1_pos(__m256 t) {
    __m256 n = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), t);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    __m256 q = _mm256_fmadd_ps(poly_exp_m1(r), r, r);
    __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    return _mm256_fmadd_ps(s, q, _mm256_sub_ps(s, _mm256_set1_ps(1.0f)));
}

static inline __m256 v_tanh(__m256 x) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 t = _mm256_min_ps(_mm256_set1_ps(40.0f), _mm256_add_ps(ax, ax));
    __m256 em1 = v_expm1_pos(t);
    /* NaN: cvtps_epi32 gives garbage bits for s, but q is NaN, so em1 and y are NaN */
    __m256 y = _mm256_div_ps(em1, _mm256_add_ps(em1, _mm256_set1_ps(2.0f)));
    return _mm256_or_ps(y, _mm256_and_ps(sign, x));
}

static inline __m256 v_log1p_01(__m256 t) {
    __m256 s = _mm256_div_ps(t, _mm256_add_ps(t, _mm256_set1_ps(2.0f)));
    __m256 s2 = _mm256_mul_ps(s, s);
    __m256 p = _mm256_set1_ps(1.0f / 17);
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 15));
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 13));
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 11));
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 9));
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 7));
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 5));
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 3));
    __m256 half = _mm256_fmadd_ps(p, _mm256_mul_ps(s2, s), s);
    return _mm256_add_ps(half, half);
}

static inline __m256 v_sigmoid(__m256 x) {
    __m256 e = v_exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 v_silu(__m256 x) {
    __m256 e = v_exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 v_gelu(__m256 x) {
    __m256 ax = _mm256_mul_ps(_mm256_set1_ps(0.044715f), x);
    __m256 inner = _mm256_fmadd_ps(ax, x, _mm256_set1_ps(1.0f));
    __m256 u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.79788456080286535587989211986876f), x), inner);
    __m256 e = v_exp(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 v_softplus(__m256 x) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    __m256 nax = _mm256_or_ps(x, sign);
    __m256 y = _mm256_add_ps(_mm256_max_ps(_mm256_setzero_ps(), x), v_log1p_01(v_exp(nax)));
    __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(20.0f), _CMP_GT_OQ);
    return _mm256_blendv_ps(y, x, big);
}

/* ===== Loops ===== */

#define LD(p, m)     _mm256_maskload_ps((p), (m))
#define ST(p, m, v)  _mm256_maskstore_ps((p), (m), (v))

#define UNARY(name, F)                                                                   \
    static void name(float *y, const float *x, int n) {                                  \
        int i = 0;                                                                       \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));   \
        if (i < n) {                                                                     \
            __m256i m = tail_mask(n - i);                                                \
            ST(y + i, m, F(LD(x + i, m)));                                               \
        }                                                                                \
    }

#define BINARY(name, EXPR)                                                               \
    static void name(float *y, const float *a, const float *b, int n) {                  \
        int i = 0;                                                                       \
        for (; i + 8 <= n; i += 8) {                                                     \
            __m256 va = _mm256_loadu_ps(a + i), vb = _mm256_loadu_ps(b + i);             \
            _mm256_storeu_ps(y + i, EXPR);                                               \
        }                                                                                \
        if (i < n) {                                                                     \
            __m256i m = tail_mask(n - i);                                                \
            __m256 va = LD(a + i, m), vb = LD(b + i, m);                                 \
            ST(y + i, m, EXPR);                                                          \
        }                                                                                \
    }

UNARY(o_exp, v_exp)
UNARY(o_tanh, v_tanh)
UNARY(o_sigmoid, v_sigmoid)
UNARY(o_silu, v_silu)
UNARY(o_gelu, v_gelu)
UNARY(o_softplus, v_softplus)
BINARY(o_add, _mm256_add_ps(va, vb))
BINARY(o_mul, _mm256_mul_ps(va, vb))
BINARY(o_swiglu, _mm256_mul_ps(v_silu(va), vb))
BINARY(o_geglu, _mm256_mul_ps(v_gelu(va), vb))

/* nx_conv_silu: the taps' products and sums as o_mul / o_add round them, then v_silu (the
 * barriers keep the compiler from contracting a product and its sum into one fma) */
#define NOFMA(v) __asm__("" : "+x"(v))
static void o_conv_silu(float *y, const float *x, const float *w, long w_stride, int K, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(w + i));
        NOFMA(a);
        for (int j = 1; j < K; j++) {
            __m256 pr = _mm256_mul_ps(_mm256_loadu_ps(x + (size_t)j * (size_t)n + i),
                                      _mm256_loadu_ps(w + (size_t)j * (size_t)w_stride + i));
            NOFMA(pr);
            a = _mm256_add_ps(a, pr);
        }
        _mm256_storeu_ps(y + i, v_silu(a));
    }
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 a = _mm256_mul_ps(LD(x + i, m), LD(w + i, m));
        NOFMA(a);
        for (int j = 1; j < K; j++) {
            __m256 pr = _mm256_mul_ps(LD(x + (size_t)j * (size_t)n + i, m), LD(w + (size_t)j * (size_t)w_stride + i, m));
            NOFMA(pr);
            a = _mm256_add_ps(a, pr);
        }
        ST(y + i, m, v_silu(a));
    }
}

static void o_softcap(float *y, const float *x, int n, float cap) {
    const __m256 c = _mm256_set1_ps(cap);
    for (int i = 0; i < n; i += 8) {
        __m256i m = mask_at(n, i);
        ST(y + i, m, _mm256_mul_ps(c, v_tanh(_mm256_div_ps(LD(x + i, m), c))));
    }
}

static void o_scale(float *y, const float *x, float s, int n) {
    const __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    if (i < n) {
        __m256i m = tail_mask(n - i);
        ST(y + i, m, _mm256_mul_ps(LD(x + i, m), vs));
    }
}

static void o_axpy(float *y, const float *x, float a, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i < n) {
        __m256i m = tail_mask(n - i);
        ST(y + i, m, _mm256_fmadd_ps(va, LD(x + i, m), LD(y + i, m)));
    }
}

static void o_mul_add(float *y, const float *a, const float *b, const float *c, int n) {
    for (int i = 0; i < n; i += 8) {
        __m256i m = mask_at(n, i);
        ST(y + i, m, _mm256_fmadd_ps(LD(a + i, m), LD(b + i, m), LD(c + i, m)));
    }
}

/* ===== Reductions ===== */

static inline double hsum_pd(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

static double o_sumsq(const float *x, int n) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (int i = 0; i < n; i += 8) {
        __m256 v = LD(x + i, mask_at(n, i));
        __m256 sq = _mm256_mul_ps(v, v);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    return hsum_pd(_mm256_add_pd(s0, s1));
}

static void o_scale_mul(float *y, const float *x, float s, const float *w, int n) {
    if (!w) { o_scale(y, x, s, n); return; }
    const __m256 vs = _mm256_set1_ps(s);
    for (int i = 0; i < n; i += 8) {
        __m256i m = mask_at(n, i);
        ST(y + i, m, _mm256_mul_ps(_mm256_mul_ps(LD(x + i, m), vs), LD(w + i, m)));
    }
}

static float o_max(const float *x, int n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 acc = ninf;
    for (int i = 0; i < n; i += 8) {
        __m256i m = mask_at(n, i);
        __m256 v = _mm256_blendv_ps(ninf, LD(x + i, m), _mm256_castsi256_ps(m));
        acc = _mm256_max_ps(v, acc);                       /* NaN in x: keeps acc */
    }
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static double o_exp_sum(float *y, const float *x, float mx, int n) {
    const __m256 vm = _mm256_set1_ps(mx);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (int i = 0; i < n; i += 8) {
        __m256i m = mask_at(n, i);
        __m256 e = _mm256_and_ps(v_exp(_mm256_sub_ps(LD(x + i, m), vm)), _mm256_castsi256_ps(m));
        if (y) ST(y + i, m, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    return hsum_pd(_mm256_add_pd(s0, s1));
}

static void o_scale_add(float *y, const float *x, float s, const float *b, int n) {
    const __m256 vs = _mm256_set1_ps(s);
    for (int i = 0; i < n; i += 8) {
        __m256i m = mask_at(n, i);
        __m256 t = _mm256_mul_ps(LD(x + i, m), vs);
        ST(y + i, m, _mm256_add_ps(t, LD(b + i, m)));
    }
}

static int o_argmax(const float *x, int n) {
    __m256 bv = _mm256_set1_ps(-INFINITY);
    __m256i bi = _mm256_set1_epi32(-1);
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i step = _mm256_set1_epi32(8);
    for (int i = 0; i < n; i += 8) {
        __m256i m = mask_at(n, i);
        __m256 v = LD(x + i, m);
        __m256 gt = _mm256_cmp_ps(v, bv, _CMP_GT_OQ);
        __m256 first = _mm256_and_ps(_mm256_cmp_ps(v, bv, _CMP_EQ_OQ),
                                     _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_setzero_si256(), bi)));
        __m256 upd = _mm256_and_ps(_mm256_or_ps(gt, first), _mm256_castsi256_ps(m));
        bv = _mm256_blendv_ps(bv, v, upd);
        bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi), _mm256_castsi256_ps(idx), upd));
        idx = _mm256_add_epi32(idx, step);
    }
    float lv[8];
    int li[8];
    _mm256_storeu_ps(lv, bv);
    _mm256_storeu_si256((__m256i *)li, bi);
    int best = -1;
    float b = -INFINITY;
    for (int j = 0; j < 8; j++) {
        if (li[j] < 0) continue;
        if (best < 0 || lv[j] > b || (lv[j] == b && li[j] < best)) { b = lv[j]; best = li[j]; }
    }
    return best < 0 ? 0 : best;
}

static int o_topk(const float *x, int n, int k, int *idx, float *val) {
    int count = 0, i = 0;
    for (; i < n && count < k; i++)
        if (x[i] == x[i]) count = nx_topk_insert(idx, val, count, k, x[i], i);
    __m256 thr = _mm256_set1_ps(val[k - 1]);
    for (; i + 8 <= n; i += 8) {
        int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), thr, _CMP_GT_OQ));
        if (!m) continue;
        for (unsigned bits = (unsigned)m; bits; bits &= bits - 1) {
            int j = i + __builtin_ctz(bits);
            count = nx_topk_insert(idx, val, count, k, x[j], j);
        }
        thr = _mm256_set1_ps(val[k - 1]);
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
        for (int i = 0; i < half; i += 8) {
            __m256i m = mask_at(half, i);
            __m256 x0 = LD(v + i, m), x1 = LD(v + half + i, m);
            __m256 c = LD(cs + i, m), s = LD(sn + i, m);
            ST(v + i, m, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
            ST(v + half + i, m, _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c)));
        }
    }
}

/* The fixed order of ops.h: four accumulators hold lanes 0-7, 8-15, 16-23, 24-31. */
static float o_dot(const float *a, const float *b, int n) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int q = 0; q < 4; q++)
            acc[q] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * q), _mm256_loadu_ps(b + i + 8 * q), acc[q]);
    for (int q = 0; q < 4 && i + 8 * q < n; q++) {
        __m256i m = mask_at(n, i + 8 * q);
        __m256 f = _mm256_fmadd_ps(LD(a + i + 8 * q, m), LD(b + i + 8 * q, m), acc[q]);
        acc[q] = _mm256_blendv_ps(acc[q], f, _mm256_castsi256_ps(m));
    }
    __m256 s8 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

const nx_ops_impl nx_ops_avx2 = {
    .sumsq = o_sumsq, .scale_mul = o_scale_mul, .max = o_max, .exp_sum = o_exp_sum,
    .scale_add = o_scale_add, .argmax = o_argmax, .topk = o_topk, .rope_neox = o_rope_neox,
    .exp = o_exp, .tanh = o_tanh, .sigmoid = o_sigmoid, .silu = o_silu, .gelu = o_gelu,
    .softplus = o_softplus, .softcap = o_softcap, .swiglu = o_swiglu, .geglu = o_geglu,
    .add = o_add, .mul = o_mul, .scale = o_scale, .axpy = o_axpy, .mul_add = o_mul_add,
    .dot = o_dot, .conv_silu = o_conv_silu,
};

#else
const nx_ops_impl nx_ops_avx2 = {0};   /* built without AVX2: the dispatcher skips it */
#endif
