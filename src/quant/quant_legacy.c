/*
 * quant_legacy.c — the 32-value block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
 *
 * Dequantizers compute exactly what ggml computes (same float operations, same order).
 * Quantizers are the round-to-nearest reference ones: one scale per block from the
 * largest-magnitude value (x_0 types) or from min/max (x_1 types), codes by truncating
 * x/d + offset, as ggml's quantize_row_*_ref do, so finite input gives ggml's bytes.
 * Float-to-int conversions are clamped first, so NaN/Inf input is never undefined behaviour.
 */
#include <float.h>
#include <math.h>
#include <string.h>
#include "quant/quant.h"
#include "quant/quant_search.h"

/* (int)v for v in [0, hi]; v below 0 (or NaN) gives 0, above hi gives hi. For the values
 * the quantizers produce this equals ggml's MIN(hi, (int8_t)v) truncation. */
static inline int trunc_code(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* roundf(v) as an int8 (half away from zero); out-of-range and NaN values are clamped / 0. */
static inline int8_t round_i8(float v) {
    if (!(v > -128.5f)) return v != v ? 0 : -128;
    if (v >= 127.5f) return 127;
    return (int8_t)roundf(v);
}

/* Signed value of largest magnitude in x[0..n) (the first one on ties), and its magnitude. */
static inline float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax_out) *amax_out = amax;
    return max;
}

static inline void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* ===== Q4_0: x = d * (q - 8) ===== */

void nx_dequantize_row_q4_0(const nx_block_q4_0 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK4_0; i++, y += NX_QK4_0) {
        const float d = nx_half_to_f32(x[i].d);
        for (int j = 0; j < NX_QK4_0 / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + NX_QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void nx_quantize_row_q4_0_ref(const float *x, nx_block_q4_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK4_0; i++, x += NX_QK4_0) {
        /* the extreme value maps to code 0 (-8), using the full negative range */
        const float d = signed_absmax(x, NX_QK4_0, NULL) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = nx_f32_to_half(d);
        for (int j = 0; j < NX_QK4_0 / 2; j++) {
            int q0 = trunc_code(x[j] * id + 8.5f, 15);
            int q1 = trunc_code(x[j + NX_QK4_0 / 2] * id + 8.5f, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ===== Q4_1: x = d * q + m ===== */

void nx_dequantize_row_q4_1(const nx_block_q4_1 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK4_1; i++, y += NX_QK4_1) {
        const float d = nx_half_to_f32(x[i].d), m = nx_half_to_f32(x[i].m);
        for (int j = 0; j < NX_QK4_1 / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + NX_QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

void nx_quantize_row_q4_1_ref(const float *x, nx_block_q4_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK4_1; i++, x += NX_QK4_1) {
        float mn, mx;
        min_max(x, NX_QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = nx_f32_to_half(d);
        y[i].m = nx_f32_to_half(mn);
        for (int j = 0; j < NX_QK4_1 / 2; j++) {
            int q0 = trunc_code((x[j] - mn) * id + 0.5f, 15);
            int q1 = trunc_code((x[j + NX_QK4_1 / 2] - mn) * id + 0.5f, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ===== Q5_0: x = d * (q - 16), bit 4 of value j in bit j of qh ===== */

static inline uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static inline void store_qh(uint8_t qh[4], uint32_t v) {
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(v >> (8 * k));
}

void nx_dequantize_row_q5_0(const nx_block_q5_0 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK5_0; i++, y += NX_QK5_0) {
        const float d = nx_half_to_f32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < NX_QK5_0 / 2; j++) {
            int q0 = (x[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (q0 - 16) * d;
            y[j + NX_QK5_0 / 2] = (q1 - 16) * d;
        }
    }
}

void nx_quantize_row_q5_0_ref(const float *x, nx_block_q5_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK5_0; i++, x += NX_QK5_0) {
        const float d = signed_absmax(x, NX_QK5_0, NULL) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = nx_f32_to_half(d);
        uint32_t qh = 0;
        for (int j = 0; j < NX_QK5_0 / 2; j++) {
            int q0 = trunc_code(x[j] * id + 16.5f, 31);
            int q1 = trunc_code(x[j + NX_QK5_0 / 2] * id + 16.5f, 31);
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_qh(y[i].qh, qh);
    }
}

/* ===== Q5_1: x = d * q + m ===== */

void nx_dequantize_row_q5_1(const nx_block_q5_1 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK5_1; i++, y += NX_QK5_1) {
        const float d = nx_half_to_f32(x[i].d), m = nx_half_to_f32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < NX_QK5_1 / 2; j++) {
            int q0 = (x[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = q0 * d + m;
            y[j + NX_QK5_1 / 2] = q1 * d + m;
        }
    }
}

void nx_quantize_row_q5_1_ref(const float *x, nx_block_q5_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK5_1; i++, x += NX_QK5_1) {
        float mn, mx;
        min_max(x, NX_QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = nx_f32_to_half(d);
        y[i].m = nx_f32_to_half(mn);
        uint32_t qh = 0;
        for (int j = 0; j < NX_QK5_1 / 2; j++) {
            int q0 = trunc_code((x[j] - mn) * id + 0.5f, 31);
            int q1 = trunc_code((x[j + NX_QK5_1 / 2] - mn) * id + 0.5f, 31);
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_qh(y[i].qh, qh);
    }
}

/* ===== Q8_0 / Q8_1: x = d * q ===== */

void nx_dequantize_row_q8_0(const nx_block_q8_0 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK8_0; i++, y += NX_QK8_0) {
        const float d = nx_half_to_f32(x[i].d);
        for (int j = 0; j < NX_QK8_0; j++) y[j] = x[i].qs[j] * d;
    }
}

void nx_dequantize_row_q8_1(const nx_block_q8_1 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK8_1; i++, y += NX_QK8_1) {
        const float d = nx_half_to_f32(x[i].d);
        for (int j = 0; j < NX_QK8_1; j++) y[j] = x[i].qs[j] * d;
    }
}

void nx_quantize_row_q8_0_ref(const float *x, nx_block_q8_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK8_0; i++, x += NX_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < NX_QK8_0; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = nx_f32_to_half(d);
        for (int j = 0; j < NX_QK8_0; j++) y[i].qs[j] = round_i8(x[j] * id);
    }
}

void nx_quantize_row_q8_1_ref(const float *x, nx_block_q8_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK8_1; i++, x += NX_QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < NX_QK8_1; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = nx_f32_to_half(d);
        int sum = 0;
        for (int j = 0; j < NX_QK8_1; j++) {
            y[i].qs[j] = round_i8(x[j] * id);
            sum += y[i].qs[j];
        }
        /* s uses the unrounded d, as ggml does */
        y[i].s = nx_f32_to_half((float)sum * d);
    }
}

/* ===== Importance-weighted Q4_0 / Q4_1 / Q5_0 / Q5_1 (ggml's quantize_row_q*_impl) =====
 *
 * Per block, weights qw * sqrt(sigma2 + x^2) with sigma2 the mean x^2 of the whole row; the
 * x_0 types take the weighted symmetric scale search of the K-quants (make_qx_quants), the x_1
 * types the weighted affine one (make_qkx3_quants: rmin -0.9, step 0.05, 36 steps). qw NULL:
 * the reference quantizers above. */

static float row_sigma2(const float *x, int64_t n) {
    float s = 0;
    for (int64_t j = 0; j < n; j++) s += x[j] * x[j];
    return n > 0 ? s / (float)n : 0.0f;
}

static void block_weights(const float *xb, const float *qw, float sigma2, float *w) {
    for (int j = 0; j < 32; j++) w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
}

void nx_quantize_row_q4_0_imat(const float *x, nx_block_q4_0 *y, int64_t n, const float *qw) {
    if (!qw) { nx_quantize_row_q4_0_ref(x, y, n); return; }
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    int8_t L[32];
    for (int64_t i = 0; i < n / 32; i++) {
        block_weights(x + 32 * i, qw + 32 * i, sigma2, w);
        y[i].d = nx_f32_to_half(nx_qs_fit_symmetric(32, 8, x + 32 * i, w, L));
        for (int j = 0; j < 16; j++) y[i].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

void nx_quantize_row_q5_0_imat(const float *x, nx_block_q5_0 *y, int64_t n, const float *qw) {
    if (!qw) { nx_quantize_row_q5_0_ref(x, y, n); return; }
    const float sigma2 = row_sigma2(x, n);
    float w[32];
    int8_t L[32];
    for (int64_t i = 0; i < n / 32; i++) {
        block_weights(x + 32 * i, qw + 32 * i, sigma2, w);
        y[i].d = nx_f32_to_half(nx_qs_fit_symmetric(32, 16, x + 32 * i, w, L));
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = L[j], q1 = L[j + 16];
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_qh(y[i].qh, qh);
    }
}

void nx_quantize_row_q4_1_imat(const float *x, nx_block_q4_1 *y, int64_t n, const float *qw) {
    if (!qw) { nx_quantize_row_q4_1_ref(x, y, n); return; }
    const float sigma2 = row_sigma2(x, n);
    float w[32], min;
    uint8_t L[32], Laux[32];
    for (int64_t i = 0; i < n / 32; i++) {
        block_weights(x + 32 * i, qw + 32 * i, sigma2, w);
        const float d = nx_qs_fit_affine(32, 15, x + 32 * i, w, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[i].d = nx_f32_to_half(d);
        y[i].m = nx_f32_to_half(-min);
        for (int j = 0; j < 16; j++) y[i].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

void nx_quantize_row_q5_1_imat(const float *x, nx_block_q5_1 *y, int64_t n, const float *qw) {
    if (!qw) { nx_quantize_row_q5_1_ref(x, y, n); return; }
    const float sigma2 = row_sigma2(x, n);
    float w[32], min;
    uint8_t L[32], Laux[32];
    for (int64_t i = 0; i < n / 32; i++) {
        block_weights(x + 32 * i, qw + 32 * i, sigma2, w);
        const float d = nx_qs_fit_affine(32, 31, x + 32 * i, w, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[i].d = nx_f32_to_half(d);
        y[i].m = nx_f32_to_half(-min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = L[j], q1 = L[j + 16];
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_qh(y[i].qh, qh);
    }
}
