/*
 * quant_iq.c — the non-linear 4-bit formats IQ4_NL (32-value blocks) and IQ4_XS (256-value
 * super-blocks of 8 x 32 with 6-bit sub-block scales), and their value table.
 *
 * Dequantizers compute exactly what ggml computes. Quantizers use the search of ggml's
 * quantize_iq4_nl / quantize_iq4_xs without importance matrix (what llama-quantize runs):
 * per 32 values, weights x^2, 15 candidate scales around max/127, each value snapped to the
 * nearest table entry, the least-squares scale of the best candidate kept. No state.
 */
#include <math.h>
#include <string.h>
#include "quant/quant.h"

/* The 16 levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl), sorted ascending. */
const int8_t nx_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

#define ALL_ZERO_EPS 1e-15f
#define IQ4_NTRY 7

static inline int nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Index of the table entry nearest to x; a value exactly between two entries takes the upper
 * one. Compares 2x with the sums of neighbours, which are exact, by binary search. */
static inline int nearest_level(float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        if (x2 >= (float)(nx_iq4nl_values[j - 1] + nx_iq4nl_values[j])) idx = j;
    }
    return idx;
}

/* Best scale for one group of 32 (L gets the codes of the first candidate; the caller
 * re-snaps against the final scale), weights wt (NULL: x^2). Returns 0 for an all-zero group. */
static float fit_iq4_scale(const float *xb, const float *wt, uint8_t *L) {
    float w[32], amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        w[j] = wt ? wt[j] : xb[j] * xb[j];
        float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < ALL_ZERO_EPS) {
        memset(L, 0, 32);
        return 0.0f;
    }
    float d = -max / nx_iq4nl_values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = nearest_level(id * xb[j]);
        L[j] = (uint8_t)l;
        float q = nx_iq4nl_values[l];
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -IQ4_NTRY; itry <= IQ4_NTRY; itry++) {
        id = (itry + nx_iq4nl_values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = nx_iq4nl_values[nearest_level(id * xb[j])];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* 32 codes -> 16 bytes: byte j holds value j (low nibble) and value j+16 (high). */
static inline void pack_nibbles32(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

/* ===== IQ4_NL: x = d * table[q] ===== */

void nx_dequantize_row_iq4_nl(const nx_block_iq4_nl *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK4_NL; i++, y += NX_QK4_NL) {
        const float d = nx_half_to_f32(x[i].d);
        for (int j = 0; j < NX_QK4_NL / 2; j++) {
            y[j] = d * nx_iq4nl_values[x[i].qs[j] & 0xF];
            y[j + NX_QK4_NL / 2] = d * nx_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

/* The imatrix weights of ggml's IQ4 path: qw * sqrt(sigma2 + x^2), sigma2 = 2 * mean x^2 over
 * the n values of the (super-)block. */
static void iq4_weights(const float *x, const float *qw, int n, float *w) {
    float sigma2 = 0;
    for (int j = 0; j < n; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / n;
    for (int j = 0; j < n; j++) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
}

void nx_quantize_row_iq4_nl_ref(const float *x, nx_block_iq4_nl *y, int64_t n) { nx_quantize_row_iq4_nl_imat(x, y, n, NULL); }

void nx_quantize_row_iq4_nl_imat(const float *x, nx_block_iq4_nl *y, int64_t n, const float *qw) {
    uint8_t L[32];
    float w[32];
    for (int64_t i = 0; i < n / NX_QK4_NL; i++, x += NX_QK4_NL, qw = qw ? qw + NX_QK4_NL : NULL) {
        if (qw) iq4_weights(x, qw, NX_QK4_NL, w);
        const float d = fit_iq4_scale(x, qw ? w : NULL, L);
        y[i].d = nx_f32_to_half(d);
        /* re-snap against the (unrounded) final scale */
        const float id = d != 0.0f ? 1 / d : 0.0f;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)nearest_level(id * x[j]);
        pack_nibbles32(L, y[i].qs);
    }
}

/* ===== IQ4_XS: x = d * (ls - 32) * table[q], ls 6-bit per 32 values ===== */

void nx_dequantize_row_iq4_xs(const nx_block_iq4_xs *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_half_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < NX_QK_K / 32; ib++, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * nx_iq4nl_values[qs[j] & 0xF];
                y[j + 16] = dl * nx_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

void nx_quantize_row_iq4_xs_ref(const float *x, nx_block_iq4_xs *y, int64_t n) { nx_quantize_row_iq4_xs_imat(x, y, n, NULL); }

void nx_quantize_row_iq4_xs_imat(const float *x, nx_block_iq4_xs *y, int64_t n, const float *qw) {
    uint8_t L[NX_QK_K];
    float scales[NX_QK_K / 32], w[NX_QK_K];
    for (int64_t i = 0; i < n / NX_QK_K; i++, x += NX_QK_K, qw = qw ? qw + NX_QK_K : NULL) {
        float max_scale = 0, amax_scale = 0;
        if (qw) iq4_weights(x, qw, NX_QK_K, w);
        for (int ib = 0; ib < NX_QK_K / 32; ib++) {
            scales[ib] = fit_iq4_scale(x + 32 * ib, qw ? w + 32 * ib : NULL, L + 32 * ib);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        /* the largest sub-block scale maps to ls - 32 = -32 */
        const float d = -max_scale / 32;
        y[i].d = nx_f32_to_half(d);
        const float id = d != 0.0f ? 1 / d : 0.f;
        uint16_t sh = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int ib = 0; ib < NX_QK_K / 32; ib++) {
            int l = nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * l;
            const float idl = dl != 0.0f ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)nearest_level(idl * x[32 * ib + j]);
            l += 32;
            y[i].scales_l[ib / 2] |= (uint8_t)((l & 0xF) << (4 * (ib % 2)));
            sh |= (uint16_t)((l >> 4) << (2 * ib));
        }
        y[i].scales_h = sh;
        for (int ib = 0; ib < NX_QK_K / 32; ib++) pack_nibbles32(L + 32 * ib, y[i].qs + 16 * ib);
    }
}
