/*
 * ops.c — the public element-wise / norm / RoPE / softmax ops (contract in ops.h): argument
 * handling and dispatch to the per-level table, plus the scalar reference implementation the
 * SIMD files are tested against. The scalar code is written as ggml's CPU ops compute (libm
 * expf/tanhf/log1pf, products and sums in the same order) and favours being obviously right
 * over speed. Nothing here allocates, prints or keeps state.
 */
#include "kernels/ops.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu.h"

/* ===== Scalar reference ===== */

static double s_sumsq(const float *x, int n) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    return sum;
}

static void s_scale_mul(float *y, const float *x, float s, const float *w, int n) {
    if (w)
        for (int i = 0; i < n; i++) y[i] = (x[i] * s) * w[i];
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * s;
}

static float s_max(const float *x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static double s_exp_sum(float *y, const float *x, float m, int n) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        float v = expf(x[i] - m);
        sum += (double)v;
        if (y) y[i] = v;
    }
    return sum;
}

static void s_scale_add(float *y, const float *x, float s, const float *b, int n) {
    for (int i = 0; i < n; i++) {
        float t = x[i] * s;
        y[i] = t + b[i];
    }
}

static int s_argmax(const float *x, int n) {
    int best = -1;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > bv || (best < 0 && x[i] == bv)) { bv = x[i]; best = i; }
    return best < 0 ? 0 : best;
}

int nx_topk_insert(int *idx, float *val, int count, int k, float v, int i) {
    /* Entries arrive in increasing index order, so an equal value goes after its equals. */
    int p = count < k ? count : k - 1;
    if (count >= k && !(v > val[k - 1])) return count;
    while (p > 0 && val[p - 1] < v) {
        val[p] = val[p - 1];
        idx[p] = idx[p - 1];
        p--;
    }
    val[p] = v;
    idx[p] = i;
    return count < k ? count + 1 : k;
}

static int s_topk(const float *x, int n, int k, int *idx, float *val) {
    int count = 0;
    for (int i = 0; i < n; i++)
        if (x[i] == x[i]) count = nx_topk_insert(idx, val, count, k, x[i], i);
    return count;
}

static void s_rope_neox(float *x, int n_heads, int head_stride, int n_rot, const float *cache) {
    const int half = n_rot / 2;
    const float *cs = cache, *sn = cache + half;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (long)h * head_stride;
        for (int i = 0; i < half; i++) {
            float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cs[i] - x1 * sn[i];
            v[i + half] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

static void s_exp(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = expf(x[i]);
}
static void s_tanh(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = tanhf(x[i]);
}
static void s_sigmoid(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
}
static inline float silu1(float x) { return x / (1.0f + expf(-x)); }
static void s_silu(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = silu1(x[i]);
}

#define GELU_COEF_A    0.044715f
#define SQRT_2_OVER_PI 0.79788456080286535587989211986876f

static inline float gelu1(float x) {
    return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x * (1.0f + GELU_COEF_A * x * x)));
}
static void s_gelu(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = gelu1(x[i]);
}
static void s_softplus(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
}
static void s_softcap(float *y, const float *x, int n, float cap) {
    for (int i = 0; i < n; i++) y[i] = cap * tanhf(x[i] / cap);
}
static void s_swiglu(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
static void s_geglu(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) y[i] = gelu1(g[i]) * u[i];
}
static void s_add(float *y, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) y[i] = a[i] + b[i];
}
static void s_mul(float *y, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) y[i] = a[i] * b[i];
}
static void s_scale(float *y, const float *x, float s, int n) {
    for (int i = 0; i < n; i++) y[i] = x[i] * s;
}
static void s_axpy(float *y, const float *x, float a, int n) {
    for (int i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}
static void s_mul_add(float *y, const float *a, const float *b, const float *c, int n) {
    for (int i = 0; i < n; i++) y[i] = fmaf(a[i], b[i], c[i]);
}

static float s_dot(const float *a, const float *b, int n) {
    float acc[32] = {0};
    for (int i = 0; i < n; i += 32) {
        int m = n - i < 32 ? n - i : 32;
        for (int j = 0; j < m; j++) acc[j] = fmaf(a[i + j], b[i + j], acc[j]);
    }
    for (int w = 16; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

static void s_conv_silu(float *y, const float *x, const float *w, long w_stride, int K, int n) {
    for (int c = 0; c < n; c++) {
        float a = x[c] * w[c];
        for (int j = 1; j < K; j++) a = a + x[(size_t)j * (size_t)n + (size_t)c] * w[(size_t)j * (size_t)w_stride + (size_t)c];
        y[c] = silu1(a);
    }
}

const nx_ops_impl nx_ops_scalar = {
    .sumsq = s_sumsq, .scale_mul = s_scale_mul, .max = s_max, .exp_sum = s_exp_sum,
    .scale_add = s_scale_add, .argmax = s_argmax, .topk = s_topk, .rope_neox = s_rope_neox,
    .exp = s_exp, .tanh = s_tanh, .sigmoid = s_sigmoid, .silu = s_silu, .gelu = s_gelu,
    .softplus = s_softplus, .softcap = s_softcap, .swiglu = s_swiglu, .geglu = s_geglu,
    .add = s_add, .mul = s_mul, .scale = s_scale, .axpy = s_axpy, .mul_add = s_mul_add,
    .dot = s_dot, .conv_silu = s_conv_silu,
};

/* ===== Dispatch ===== */

const nx_ops_impl *nx_ops_get(void) {
    switch (nx_cpu_level_get()) {
#if defined(__x86_64__) || defined(__i386__)
    case NX_CPU_AVX512: if (nx_ops_avx512.dot) return &nx_ops_avx512; /* fall through */
    case NX_CPU_AVX2_VNNI: __attribute__((fallthrough));
    case NX_CPU_AVX2:   if (nx_ops_avx2.dot) return &nx_ops_avx2;     __attribute__((fallthrough));
#endif
#if defined(__aarch64__)
    case NX_CPU_NEON_I8MM: case NX_CPU_NEON_DOT: case NX_CPU_NEON: return &nx_ops_neon;
#endif
    default: break;
    }
    return &nx_ops_scalar;
}

/* ===== Norms ===== */

void nx_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    if (n <= 0) return;
    const nx_ops_impl *o = nx_ops_get();
    const float mean = (float)(o->sumsq(x, n) / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    o->scale_mul(y, x, scale, w, n);
}

void nx_rmsnorm_rows(float *y, const float *x, const float *w, int n, int n_rows, float eps) {
    if (n <= 0) return;
    for (int r = 0; r < n_rows; r++) nx_rmsnorm(y + (long)r * n, x + (long)r * n, w, n, eps);
}

void nx_l2norm(float *y, const float *x, int n, float eps) {
    if (n <= 0) return;
    const nx_ops_impl *o = nx_ops_get();
    const float scale = 1.0f / fmaxf(sqrtf((float)o->sumsq(x, n)), eps);
    o->scale_mul(y, x, scale, NULL, n);
}

/* ===== RoPE ===== */

nx_status nx_rope_check(const nx_rope_params *p, int head_dim, nx_error *err) {
    if (!p) return nx_fail(err, NX_ERR_INVALID_ARG, "rope: no parameters");
    if (p->n_rot <= 0 || p->n_rot % 2 || p->n_rot > head_dim)
        return nx_fail(err, NX_ERR_INVALID_ARG, "rope: n_rot %d must be even and in [2, head_dim %d]",
                       p->n_rot, head_dim);
    if (p->mode != NX_ROPE_NORMAL && p->mode != NX_ROPE_NEOX)
        return nx_fail(err, NX_ERR_UNSUPPORTED, "rope: mode %d not supported (0 normal, 2 neox)", (int)p->mode);
    if (!(p->freq_base > 0.0f) || !isfinite(p->freq_base))
        return nx_fail(err, NX_ERR_INVALID_ARG, "rope: freq_base %g must be positive", (double)p->freq_base);
    if (!(p->freq_scale > 0.0f) || !isfinite(p->freq_scale))
        return nx_fail(err, NX_ERR_INVALID_ARG, "rope: freq_scale %g must be positive", (double)p->freq_scale);
    if (p->freq_factors)
        for (int i = 0; i < p->n_rot / 2; i++)
            if (!(p->freq_factors[i] > 0.0f))
                return nx_fail(err, NX_ERR_INVALID_ARG, "rope: freq_factors[%d] = %g must be positive", i,
                               (double)p->freq_factors[i]);
    return NX_OK;
}

/* Angle of pair i as ggml computes it: theta carried by repeated float multiplication. */
void nx_rope_cache(const nx_rope_params *p, int32_t pos, float *cache) {
    const int half = p->n_rot / 2;
    const float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    float theta = (float)pos;
    for (int i = 0; i < half; i++) {
        const float ff = p->freq_factors ? p->freq_factors[i] : 1.0f;
        const float a = p->freq_scale * (theta / ff);
        cache[i] = cosf(a);
        cache[half + i] = sinf(a);
        theta *= theta_scale;
    }
}

static void rope_normal(float *x, int n_heads, int head_stride, int n_rot, const float *cache) {
    const int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (long)h * head_stride;
        for (int i = 0; i < half; i++) {
            const float c = cache[i], s = cache[half + i];
            const float x0 = v[2 * i], x1 = v[2 * i + 1];
            v[2 * i] = x0 * c - x1 * s;
            v[2 * i + 1] = x0 * s + x1 * c;
        }
    }
}

void nx_rope_apply(float *x, int n_heads, int head_stride, const nx_rope_params *p, const float *cache) {
    if (n_heads <= 0 || p->n_rot <= 1) return;
    if (p->mode == NX_ROPE_NEOX)
        nx_ops_get()->rope_neox(x, n_heads, head_stride, p->n_rot & ~1, cache);
    else
        rope_normal(x, n_heads, head_stride, p->n_rot & ~1, cache);
}

void nx_rope(float *x, int n_heads, int head_stride, const nx_rope_params *p, int32_t pos) {
    if (n_heads <= 0 || p->n_rot <= 1) return;
    if (p->n_rot <= NX_ROPE_MAX_DIMS) {
        float cache[NX_ROPE_MAX_DIMS];
        nx_rope_cache(p, pos, cache);
        nx_rope_apply(x, n_heads, head_stride, p, cache);
        return;
    }
    /* Large n_rot: one pair at a time with a 2-entry cache (same angles, same rotation). */
    const int neox = p->mode == NX_ROPE_NEOX;
    const int half = p->n_rot / 2;
    const float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    float theta = (float)pos;
    for (int i = 0; i < half; i++) {
        const float ff = p->freq_factors ? p->freq_factors[i] : 1.0f;
        const float a = p->freq_scale * (theta / ff);
        const float c = cosf(a), s = sinf(a);
        theta *= theta_scale;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (long)h * head_stride;
            const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            const float x0 = v[i0], x1 = v[i1];
            v[i0] = x0 * c - x1 * s;
            v[i1] = x0 * s + x1 * c;
        }
    }
}

/* ===== Softmax, argmax, top-k ===== */

void nx_softmax(float *x, int n, float scale, const float *mask) {
    if (n <= 0) return;
    const nx_ops_impl *o = nx_ops_get();
    if (mask) o->scale_add(x, x, scale, mask, n);
    else if (scale != 1.0f) o->scale(x, x, scale, n);
    const float m = o->max(x, n);
    if (m == -INFINITY) {              /* nothing allowed: all zeros, not NaN */
        memset(x, 0, sizeof(float) * (size_t)n);
        return;
    }
    const double sum = o->exp_sum(x, x, m, n);
    o->scale(x, x, (float)(1.0 / sum), n);
}

int nx_argmax(const float *x, int n) {
    if (n <= 0) return 0;
    return nx_ops_get()->argmax(x, n);
}

int nx_argmax_prob(const float *x, int n, float *prob) {
    if (n <= 0) {
        if (prob) *prob = 0.0f;
        return 0;
    }
    const nx_ops_impl *o = nx_ops_get();
    const int best = o->argmax(x, n);
    if (prob) {
        const float m = x[best];
        if (m != m || m == -INFINITY) *prob = 0.0f;     /* nothing finite: no distribution */
        else if (m == INFINITY) *prob = 1.0f;
        else *prob = (float)(1.0 / o->exp_sum(NULL, x, m, n));
    }
    return best;
}

nx_status nx_topk(const float *x, int n, int k, int *idx, float *val, int *n_out, nx_error *err) {
    if (n_out) *n_out = 0;
    if (k < 0 || k > NX_TOPK_MAX)
        return nx_fail(err, NX_ERR_INVALID_ARG, "top-k: k = %d outside [0, %d]", k, NX_TOPK_MAX);
    if (n < 0) return nx_fail(err, NX_ERR_INVALID_ARG, "top-k: negative length %d", n);
    if (!n_out || (k > 0 && n > 0 && (!x || !idx)))
        return nx_fail(err, NX_ERR_INVALID_ARG, "top-k: NULL input or output");
    if (k == 0 || n == 0) return NX_OK;
    float tmp[NX_TOPK_MAX];
    *n_out = nx_ops_get()->topk(x, n, k, idx, val ? val : tmp);
    return NX_OK;
}

/* ===== Activations and element-wise ===== */

void nx_exp(float *y, const float *x, int n) { if (n > 0) nx_ops_get()->exp(y, x, n); }
void nx_tanh(float *y, const float *x, int n) { if (n > 0) nx_ops_get()->tanh(y, x, n); }
void nx_sigmoid(float *y, const float *x, int n) { if (n > 0) nx_ops_get()->sigmoid(y, x, n); }
void nx_silu(float *y, const float *x, int n) { if (n > 0) nx_ops_get()->silu(y, x, n); }
void nx_gelu(float *y, const float *x, int n) { if (n > 0) nx_ops_get()->gelu(y, x, n); }
void nx_softplus(float *y, const float *x, int n) { if (n > 0) nx_ops_get()->softplus(y, x, n); }
void nx_softcap(float *y, const float *x, int n, float cap) { if (n > 0) nx_ops_get()->softcap(y, x, n, cap); }
void nx_swiglu(float *y, const float *g, const float *u, int n) { if (n > 0) nx_ops_get()->swiglu(y, g, u, n); }
void nx_geglu(float *y, const float *g, const float *u, int n) { if (n > 0) nx_ops_get()->geglu(y, g, u, n); }
void nx_add(float *y, const float *a, const float *b, int n) { if (n > 0) nx_ops_get()->add(y, a, b, n); }
void nx_mul(float *y, const float *a, const float *b, int n) { if (n > 0) nx_ops_get()->mul(y, a, b, n); }
void nx_scale(float *y, const float *x, float s, int n) { if (n > 0) nx_ops_get()->scale(y, x, s, n); }
void nx_axpy(float *y, const float *x, float a, int n) { if (n > 0) nx_ops_get()->axpy(y, x, a, n); }
void nx_mul_add(float *y, const float *a, const float *b, const float *c, int n) {
    if (n > 0) nx_ops_get()->mul_add(y, a, b, c, n);
}
float nx_dot(const float *a, const float *b, int n) { return n > 0 ? nx_ops_get()->dot(a, b, n) : 0.0f; }
void nx_conv_silu(float *y, const float *x, const float *w, long w_stride, int K, int n) {
    if (n > 0 && K > 0) nx_ops_get()->conv_silu(y, x, w, w_stride, K, n);
}
