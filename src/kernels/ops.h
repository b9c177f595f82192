/*
 * ops.h — the non-matmul kernels of a transformer step on F32 vectors: RMS/L2 norms, RoPE,
 * softmax, activations, element-wise arithmetic, dot product, argmax and top-k.
 *
 * Each op has a scalar reference (ops.c) and AVX2 / AVX-512 / NEON versions (ops_avx2.c,
 * ops_avx512.c, ops_neon.c); the public functions dispatch on nx_cpu_level_get() at every call, so
 * nx_cpu_set_level() switches them at once. Formulas follow ggml's CPU ops (noted per op)
 * so results agree with the reference engine to float rounding.
 *
 * Contract for every op: n >= 0 (n == 0 does nothing); outputs may alias inputs exactly
 * (y == x) but must not partially overlap; no allocation, no error path (the few calls that
 * can be misused return nx_status). Accuracy of the SIMD paths against the scalar reference
 * (tested in tests/test_ops.c at every level, lengths 1..4097; measured maxima in brackets):
 *   bit-identical:   add, mul, scale, axpy, mul_add (fused), argmax, top-k, dot (one fixed
 *                    order, see nx_dot)
 *   float rounding:  rmsnorm / l2norm (scale from a double sum; |err| <= 4e-7 |y|), rope (the
 *                    compiler may fuse products: |err| <= 1e-6 (|y| + 1)), softmax (5e-7 rel)
 *   SIMD vs scalar, relative:  exp <= 3e-7 [1.2e-7]; sigmoid, silu, tanh, softplus, softcap
 *                    <= 4e-7 [2.4e-7]; swiglu <= 4e-7 [2.1e-7]
 *   gelu, geglu:     |err| <= 3e-7 (|x| + |y|)   (ggml's 0.5x(1+tanh u) itself cancels for x < 0)
 *   vs exact math (double), every level: exp 8e-8, tanh 1.4e-7, softplus 1.8e-7, sigmoid 1.4e-7
 * Non-finite inputs: exp(+inf) = inf, exp(-inf) = 0, NaN propagates through element-wise
 * ops; argmax / top-k skip NaN.
 */
#ifndef NX_KERNELS_OPS_H
#define NX_KERNELS_OPS_H

#include <stdint.h>
#include "core/error.h"

/* ===== Norms ===== */

/* y = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no weight). The mean of squares is
 * summed in double as ggml's rms_norm does, then y = (x * scale) * w in float. */
void nx_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* n_rows consecutive rows of n floats each (row i at x + i*n), same weight for every row. */
void nx_rmsnorm_rows(float *y, const float *x, const float *w, int n, int n_rows, float eps);
/* y = x / max(||x||_2, eps)   (ggml_l2_norm; Gated DeltaNet's q/k normalisation). */
void nx_l2norm(float *y, const float *x, int n, float eps);

/* One step of a causal depthwise convolution, then SiLU (Gated DeltaNet's and Mamba's conv):
 * y[c] = silu(((x_0[c]*w_0[c] + x_1[c]*w_1[c]) + ...) + x_{K-1}[c]*w_{K-1}[c]) for c < n, with
 * x_j = x + j*n (the window's K rows, oldest first) and w_j = w + j*w_stride; each product and
 * each sum rounded on its own as nx_mul / nx_add round them, in tap order, so at every level
 * the bits are those of nx_mul + nx_add + nx_silu at that level (one pass instead of 2K; a
 * prefill makes one call per row and channel block). K >= 1; y may alias x_{K-1}. */
void nx_conv_silu(float *y, const float *x, const float *w, long w_stride, int K, int n);

/* ===== RoPE ===== */

typedef enum nx_rope_mode {
    NX_ROPE_NORMAL = 0,   /* GPT-J: rotates adjacent pairs (x[2i], x[2i+1]) */
    NX_ROPE_NEOX   = 2,   /* rotate-half: pairs (x[i], x[i + n_rot/2]) (Qwen, Gemma) */
} nx_rope_mode;

#define NX_ROPE_MAX_DIMS 1024   /* n_rot limit of the on-stack cache in nx_rope() */

typedef struct nx_rope_params {
    int n_rot;                  /* rotated dims at the start of each head; even, <= head dim */
    nx_rope_mode mode;
    float freq_base;            /* theta base, e.g. 10000 or 1e7 */
    float freq_scale;           /* 1 / rope.scaling.factor (linear scaling); 1 = none */
    const float *freq_factors;  /* n_rot/2 divisors of theta_i (gemma4 rope_freqs) or NULL */
} nx_rope_params;

/* Validates p against a head of head_dim floats (once, at load time). */
nx_status nx_rope_check(const nx_rope_params *p, int head_dim, nx_error *err);

/* cos/sin per pair at position pos: cache[i] = cos(theta_i), cache[n_rot/2 + i] = sin(theta_i),
 * i in [0, n_rot/2). Computed as ggml does, in float: theta_0 = pos, theta_{i+1} = theta_i *
 * base^(-2/n_rot) (repeated multiplication), angle = freq_scale * theta_i / freq_factors[i]. */
void nx_rope_cache(const nx_rope_params *p, int32_t pos, float *cache);

/* Rotate the first n_rot dims of n_heads heads; head h starts at x + h*head_stride (the rest of
 * each head is untouched). cache from nx_rope_cache (same p). */
void nx_rope_apply(float *x, int n_heads, int head_stride, const nx_rope_params *p, const float *cache);

/* nx_rope_cache + nx_rope_apply in one call (cache on the stack; n_rot > NX_ROPE_MAX_DIMS
 * falls back to per-pair sin/cos, same results). */
void nx_rope(float *x, int n_heads, int head_stride, const nx_rope_params *p, int32_t pos);

/* ===== Softmax, argmax, top-k ===== */

/* In place: x = softmax(x * scale + mask) (mask may be NULL; -INF entries give 0). Max-
 * subtracted, the sum in double (ggml's soft_max). A row whose every entry is -INF (or that
 * has n == 0) becomes all zeros instead of NaN. */
void nx_softmax(float *x, int n, float scale, const float *mask);

/* Index of the maximum (the first one on ties); NaN entries are skipped; 0 if n <= 0 or
 * every entry is NaN. */
int nx_argmax(const float *x, int n);

/* nx_argmax plus the softmax probability of that entry (temperature 1), without writing any
 * probabilities: 1 / sum_i exp(x_i - max), sum in double. prob may be NULL; *prob = 0 when
 * no entry is finite or above -INF (no distribution), 1 when the max is +INF. */
int nx_argmax_prob(const float *x, int n, float *prob);

#define NX_TOPK_MAX 64
/* The k largest entries, sorted by value descending, ties by lower index; NaN skipped.
 * Writes *n_out = min(k, number of non-NaN entries) pairs to idx/val (val may be NULL).
 * Errors: k outside [0, NX_TOPK_MAX], n < 0, NULL pointers. */
nx_status nx_topk(const float *x, int n, int k, int *idx, float *val, int *n_out, nx_error *err);

/* ===== Activations (y may alias x) ===== */

void nx_exp(float *y, const float *x, int n);
void nx_tanh(float *y, const float *x, int n);
void nx_sigmoid(float *y, const float *x, int n);          /* 1 / (1 + exp(-x)) */
void nx_silu(float *y, const float *x, int n);             /* x / (1 + exp(-x)) */
/* GELU, tanh approximation (ggml_gelu, exact float, no fp16 table):
 * 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))). */
void nx_gelu(float *y, const float *x, int n);
void nx_softplus(float *y, const float *x, int n);         /* x > 20 ? x : log1p(exp(x)) */
void nx_softcap(float *y, const float *x, int n, float cap); /* cap * tanh(x / cap) */
void nx_swiglu(float *y, const float *g, const float *u, int n);   /* silu(g) * u */
void nx_geglu(float *y, const float *g, const float *u, int n);    /* gelu(g) * u */

/* ===== Element-wise arithmetic and reductions ===== */

void nx_add(float *y, const float *a, const float *b, int n);      /* y = a + b */
void nx_mul(float *y, const float *a, const float *b, int n);      /* y = a * b */
void nx_scale(float *y, const float *x, float s, int n);           /* y = x * s */
void nx_axpy(float *y, const float *x, float a, int n);            /* y += a * x (fused) */
void nx_mul_add(float *y, const float *a, const float *b, const float *c, int n); /* y = a*b + c (fused) */

/* Dot product in one fixed order at every level (so results are bit-identical across
 * scalar / AVX2 / AVX-512): 32 lane accumulators (element i goes to lane i % 32, fused
 * multiply-add), then lanes folded pairwise: j += j+16, j += j+8, j += j+4, j += j+2, 0 += 1. */
float nx_dot(const float *a, const float *b, int n);

/* ===== Per-level implementation table (for ops.c's dispatcher and the tests) ===== */

typedef struct nx_ops_impl {
    double (*sumsq)(const float *x, int n);                          /* sum (double)(x*x) */
    void (*scale_mul)(float *y, const float *x, float s, const float *w, int n); /* (x*s)*w, w may be NULL */
    float (*max)(const float *x, int n);                             /* n >= 1; NaN skipped */
    double (*exp_sum)(float *y, const float *x, float m, int n);     /* y = exp(x - m) (y may be NULL), sum */
    void (*scale_add)(float *y, const float *x, float s, const float *b, int n); /* x*s + b, rounded twice */
    int (*argmax)(const float *x, int n);
    int (*topk)(const float *x, int n, int k, int *idx, float *val); /* 1 <= k <= NX_TOPK_MAX */
    void (*rope_neox)(float *x, int n_heads, int head_stride, int n_rot, const float *cache);
    void (*exp)(float *y, const float *x, int n);
    void (*tanh)(float *y, const float *x, int n);
    void (*sigmoid)(float *y, const float *x, int n);
    void (*silu)(float *y, const float *x, int n);
    void (*gelu)(float *y, const float *x, int n);
    void (*softplus)(float *y, const float *x, int n);
    void (*softcap)(float *y, const float *x, int n, float cap);
    void (*swiglu)(float *y, const float *g, const float *u, int n);
    void (*geglu)(float *y, const float *g, const float *u, int n);
    void (*add)(float *y, const float *a, const float *b, int n);
    void (*mul)(float *y, const float *a, const float *b, int n);
    void (*scale)(float *y, const float *x, float s, int n);
    void (*axpy)(float *y, const float *x, float a, int n);
    void (*mul_add)(float *y, const float *a, const float *b, const float *c, int n);
    float (*dot)(const float *a, const float *b, int n);
    void (*conv_silu)(float *y, const float *x, const float *w, long w_stride, int K, int n);
} nx_ops_impl;

extern const nx_ops_impl nx_ops_scalar;
extern const nx_ops_impl nx_ops_avx2;     /* only meaningful when the CPU level allows it */
extern const nx_ops_impl nx_ops_avx512;
#if defined(__aarch64__)
extern const nx_ops_impl nx_ops_neon;     /* ops_neon.c: every NEON level */
#endif

/* The table for the level in effect now. */
const nx_ops_impl *nx_ops_get(void);

/* Shared scalar helper used by every level's top-k: insert (v, i) into the sorted list. */
int nx_topk_insert(int *idx, float *val, int count, int k, float v, int i);

#endif
