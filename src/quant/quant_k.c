/*
 * quant_k.c — the K-quants (256-value super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
 *
 * Dequantizers compute exactly what ggml computes (same float operations, same order).
 * Quantizers are the reference (no importance matrix) ones ggml's llama-quantize uses:
 *   - each sub-block gets its own scale (and min) from a small least-squares search,
 *   - the sub-block scales are then quantized against one fp16 super-block scale,
 *   - finally every value is re-rounded against its quantized sub-block scale.
 * The searches are written here from the math (see the comment on each); they follow ggml's
 * operation order so that finite input reproduces ggml's bytes. No state, no allocation.
 */
#include <math.h>
#include <string.h>
#include "quant/quant.h"
#include "quant/quant_search.h"

/* Below this the group is treated as all zeros (ggml's GROUP_MAX_EPS). */
#define ALL_ZERO_EPS 1e-15f

/* Round to nearest, ties to even, by the float "magic number" trick ggml uses (the result
 * is what the rounding of v + 1.5*2^23 gives). Exact for |v| <= 2^22; beyond that (or for
 * NaN) the result is some int in [-2^22, 2^22) — never undefined behaviour. */
static inline int nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Signed value of largest magnitude (the first one on ties) and its magnitude. */
static inline float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    *amax_out = amax;
    return max;
}

/* ===== Scale searches ===== */

/*
 * Symmetric scale for codes l in [-nmax, nmax-1], weights qw (NULL: w = x^2; ggml's make_qx_quants
 * with rmse_type 1). Start from the scale that maps the extreme value to -nmax, then try 18 nearby
 * inverse scales (nmax +- 0.1..0.9); keep the one maximizing (sum w x l)^2 / sum w l^2, i.e.
 * minimizing the weighted error with the optimal scale sum(wxl)/sum(wll). L gets l + nmax.
 */
float nx_qs_fit_symmetric(int n, int nmax, const float *x, const float *qw, int8_t *L) {
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < ALL_ZERO_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/*
 * Symmetric 3-bit scale (codes -nmax..nmax-1, weights x^2; ggml's make_q3_quants with
 * do_rmse): round against the extreme value, then up to 5 passes of coordinate descent —
 * move one code to the value the current least-squares scale asks for, keep it if the
 * weighted error drops. L gets l + nmax.
 */
static float fit_q3_scale(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < ALL_ZERO_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/*
 * Affine fit x ~ scale * l - min_out, l in [0, nmax], min_out >= 0 (ggml's make_qkx2_quants).
 * Start from the min/max mapping; then for nstep+1 inverse scales (nmax + rmin + rdelta*is)
 * / range, round, solve the weighted 2x2 least-squares problem for (scale, min) (min clamped
 * to <= 0), and keep the candidate with the smallest weighted error (|e| if use_mad, else e^2).
 * Later candidates are rounded against the best min found so far, as ggml does.
 */
float nx_qs_fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L,
                              float *min_out, uint8_t *Laux, float rmin, float rdelta,
                              int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *min_out = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += w[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *min_out = -min;
    return scale;
}

/* ===== Q2_K: x = d*sc*q - dmin*m, 16 sub-blocks of 16, q 2-bit, sc/m 4-bit ===== */

/* Four 2-bit codes per byte: byte l of each 32-byte group holds values l, l+32, l+64, l+96. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < NX_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void nx_dequantize_row_q2_K(const nx_block_q2_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_half_to_f32(x[i].d);
        const float min = nx_half_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * ((q[l + 16 * k] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void nx_quantize_row_q2_K_ref(const float *x, nx_block_q2_K *y, int64_t n) {
    uint8_t L[NX_QK_K], Laux[16];
    float w[16], mins[NX_QK_K / 16], scales[NX_QK_K / 16];
    for (int64_t i = 0; i < n / NX_QK_K; i++, x += NX_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < NX_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            scales[j] = nx_qs_fit_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < NX_QK_K / 16; j++) y[i].scales[j] = (uint8_t)clampi(nearest_int(iscale * scales[j]), 0, 15);
            y[i].d = nx_f32_to_half(max_scale / 15.f);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = nx_f32_to_half(0.f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < NX_QK_K / 16; j++)
                y[i].scales[j] |= (uint8_t)(clampi(nearest_int(iscale * mins[j]), 0, 15) << 4);
            y[i].dmin = nx_f32_to_half(max_min / 15.f);
        } else {
            y[i].dmin = nx_f32_to_half(0.f);
        }
        for (int j = 0; j < NX_QK_K / 16; j++) {
            const float d = nx_half_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = nx_half_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clampi(nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

/* ===== Q3_K: x = d*(sc-32)*(q-4), 16 sub-blocks of 16, q 3-bit (2 in qs + 1 in hmask) ===== */

/* 6-bit scale j (0..15): low 4 bits in nibbles of bytes 0..7, high 2 bits in bytes 8..11. */
static inline int q3k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

void nx_dequantize_row_q3_K(const nx_block_q3_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d_all = nx_half_to_f32(x[i].d);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++) {
                    const float dl = d_all * q3k_scale(x[i].scales, is++);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (((q[l + 16 * k] >> shift) & 3) - ((hm[l + 16 * k] & m) ? 0 : 4));
                }
            }
        }
    }
}

void nx_quantize_row_q3_K_ref(const float *x, nx_block_q3_K *y, int64_t n) {
    int8_t L[NX_QK_K];
    float scales[NX_QK_K / 16];
    for (int64_t i = 0; i < n / NX_QK_K; i++, x += NX_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < NX_QK_K / 16; j++) {
            scales[j] = fit_q3_scale(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale != 0.0f) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < NX_QK_K / 16; j++) {
                int l = clampi(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = nx_f32_to_half(1 / iscale);
        } else {
            y[i].d = nx_f32_to_half(0.f);
        }
        for (int j = 0; j < NX_QK_K / 16; j++) {
            const float d = nx_half_to_f32(y[i].d) * q3k_scale(y[i].scales, j);
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* high bit of value j goes to hmask[j % 32], bit j / 32 */
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t L2[NX_QK_K];
        for (int j = 0; j < NX_QK_K; j++) {
            if (L[j] > 3) y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
            L2[j] = (uint8_t)(L[j] & 3);
        }
        pack_2bit(L2, y[i].qs);
    }
}

/* ===== Q4_K / Q5_K: x = d*sc*q - dmin*m, 8 sub-blocks of 32, sc/m 6-bit ===== */

/* Pack 8 6-bit scales and mins into 12 bytes (inverse of nx_q4k_scale_min). */
static void pack_scale_min_k4(const uint8_t *ls, const uint8_t *lm, uint8_t *s) {
    for (int j = 0; j < 4; j++) {
        s[j] = ls[j];
        s[j + 4] = lm[j];
    }
    for (int j = 4; j < 8; j++) {
        s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
        s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
        s[j] |= (uint8_t)((lm[j] >> 4) << 6);
    }
}

/*
 * 6-bit codes L[i] in [0, nmax] for n non-negative sub-block scales x, weighted by w (ggml's
 * make_qp_quants, the imatrix path): the plain max -> nmax mapping and 8 nearby inverse scales
 * (nmax +- 0.1..0.4) by weighted squared error, then up to 5 passes of coordinate descent on
 * the codes against the least-squares scale, which is returned.
 */
static float fit_scale_codes(int n, int nmax, const float *x, uint8_t *L, const float *w) {
    float max = 0;
    for (int i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    if (max < ALL_ZERO_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    float scale = 1 / iscale, best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max, scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            float diff = x[i] - scale_is * l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * L[i], sl2 = suml2 - w[i] * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != L[i]) {
                    slx += w[i] * x[i] * new_l;
                    sl2 += w[i] * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): sub-block fits, 6-bit scale quantization,
 * and the final codes L[256] against the quantized scales. qw (the importance of each of the
 * 256 values, NULL: none) switches to ggml's imatrix path: weights qw * sqrt(sigma2 + x^2)
 * (sigma2 = 2 * mean x^2 of the super-block), a finer affine search (rmin -0.9, step 0.05, 36
 * steps) and weighted fits of the 6-bit scale and min codes (fit_scale_codes). */
static void quantize_k4_superblock(const float *x, int nmax, float rmin, int nstep, const float *qw,
                                   nx_half *d_out, nx_half *dmin_out, uint8_t *packed, uint8_t *L) {
    uint8_t Laux[32], ls[8], lm[8];
    float w[32], mins[8], scales[8], sw[8];
    float max_scale = 0, max_min = 0;
    float sigma2 = 0;
    if (qw) {
        for (int l = 0; l < NX_QK_K; l++) sigma2 += x[l] * x[l];
        sigma2 = 2 * sigma2 / NX_QK_K;
    }
    for (int j = 0; j < NX_QK_K / 32; j++) {
        if (qw) {
            float sumw = 0;
            for (int l = 0; l < 32; l++) {
                w[l] = qw[32 * j + l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
                sumw += w[l];
            }
            sw[j] = sumw;
            scales[j] = nx_qs_fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
            continue;
        }
        /* weight = rms of the sub-block + |x|: big values matter more, small ones still count */
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = nx_qs_fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float d_block, m_block;
    if (qw) {
        d_block = fit_scale_codes(NX_QK_K / 32, 63, scales, ls, sw);
        m_block = fit_scale_codes(NX_QK_K / 32, 63, mins, lm, sw);
    } else {
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < NX_QK_K / 32; j++) {
            /* uint8 wrap-around then MIN(63), as ggml (never hit for finite input) */
            uint8_t a = (uint8_t)nearest_int(inv_scale * scales[j]);
            uint8_t b = (uint8_t)nearest_int(inv_min * mins[j]);
            ls[j] = a < 63 ? a : 63;
            lm[j] = b < 63 ? b : 63;
        }
        d_block = max_scale / 63.f;
        m_block = max_min / 63.f;
    }
    memset(packed, 0, NX_K_SCALE_SIZE);
    pack_scale_min_k4(ls, lm, packed);
    *d_out = nx_f32_to_half(d_block);
    *dmin_out = nx_f32_to_half(m_block);
    for (int j = 0; j < NX_QK_K / 32; j++) {
        uint8_t sc, m;
        nx_q4k_scale_min(j, packed, &sc, &m);
        const float d = nx_half_to_f32(*d_out) * sc;
        if (d == 0.0f) continue;
        const float dm = nx_half_to_f32(*dmin_out) * m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void nx_dequantize_row_q4_K(const nx_block_q4_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_half_to_f32(x[i].d), min = nx_half_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int j = 0; j < NX_QK_K / 32; j += 2, q += 32) {
            uint8_t sc, m;
            nx_q4k_scale_min(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            nx_q4k_scale_min(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void nx_quantize_row_q4_K_ref(const float *x, nx_block_q4_K *y, int64_t n) { nx_quantize_row_q4_K_imat(x, y, n, NULL); }

void nx_quantize_row_q4_K_imat(const float *x, nx_block_q4_K *y, int64_t n, const float *qw) {
    uint8_t L[NX_QK_K];
    for (int64_t i = 0; i < n / NX_QK_K; i++, x += NX_QK_K, qw = qw ? qw + NX_QK_K : NULL) {
        quantize_k4_superblock(x, 15, -1.f, 20, qw, &y[i].d, &y[i].dmin, y[i].scales, L);
        /* byte l of each 32-byte group: value l (low nibble) and l+32 (high) of a 64-group */
        for (int j = 0; j < NX_QK_K; j += 64)
            for (int l = 0; l < 32; l++) y[i].qs[j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void nx_dequantize_row_q5_K(const nx_block_q5_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_half_to_f32(x[i].d), min = nx_half_to_f32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < NX_QK_K / 32; j += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            nx_q4k_scale_min(j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            nx_q4k_scale_min(j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void nx_quantize_row_q5_K_ref(const float *x, nx_block_q5_K *y, int64_t n) { nx_quantize_row_q5_K_imat(x, y, n, NULL); }

void nx_quantize_row_q5_K_imat(const float *x, nx_block_q5_K *y, int64_t n, const float *qw) {
    uint8_t L[NX_QK_K];
    for (int64_t i = 0; i < n / NX_QK_K; i++, x += NX_QK_K, qw = qw ? qw + NX_QK_K : NULL) {
        quantize_k4_superblock(x, 31, -0.5f, 15, qw, &y[i].d, &y[i].dmin, y[i].scales, L);
        /* low 4 bits as Q4_K; bit 4 of value 64*g + l (+32) in qh[l] bit 2g (2g+1) */
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int g = 0; g < 4; g++) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * g + l], l2 = L[64 * g + l + 32];
                y[i].qh[l] |= (uint8_t)(((l1 >> 4) << (2 * g)) | ((l2 >> 4) << (2 * g + 1)));
                y[i].qs[32 * g + l] = (uint8_t)((l1 & 0xF) | ((l2 & 0xF) << 4));
            }
        }
    }
}

/* ===== Q6_K: x = d*sc*(q-32), 16 sub-blocks of 16, sc int8, q 6-bit (4 in ql + 2 in qh) ===== */

void nx_dequantize_row_q6_K(const nx_block_q6_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_half_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                /* (d * sc) * q, in this order, as ggml */
                y[l] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

void nx_quantize_row_q6_K_ref(const float *x, nx_block_q6_K *y, int64_t n) { nx_quantize_row_q6_K_imat(x, y, n, NULL); }

/* With qw the sub-block scale search weighs value j by qw[j] itself (ggml's imatrix Q6_K). */
void nx_quantize_row_q6_K_imat(const float *x, nx_block_q6_K *y, int64_t n, const float *qw) {
    int8_t L[NX_QK_K];
    float scales[NX_QK_K / 16];
    for (int64_t i = 0; i < n / NX_QK_K; i++, x += NX_QK_K, qw = qw ? qw + NX_QK_K : NULL) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < NX_QK_K / 16; ib++) {
            scales[ib] = nx_qs_fit_symmetric(16, 32, x + 16 * ib, qw ? qw + 16 * ib : NULL, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < ALL_ZERO_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = nx_f32_to_half(1 / iscale);
        for (int ib = 0; ib < NX_QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)clampi(nearest_int(iscale * scales[ib]), -128, 127);
        for (int j = 0; j < NX_QK_K / 16; j++) {
            const float d = nx_half_to_f32(y[i].d) * y[i].scales[j];
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }
        /* per 128 values: ql[l] = v[l] | v[l+64] << 4, ql[l+32] = v[l+32] | v[l+96] << 4,
         * qh[l] = the top 2 bits of v[l], v[l+32], v[l+64], v[l+96] */
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < NX_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
                ql[l] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
                ql[l + 32] = (uint8_t)((b & 0xF) | ((e & 0xF) << 4));
                qh[l] = (uint8_t)((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
            }
        }
    }
}

/* ===== Q8_K: x = d * q, d float; bsums for the K-quant dot products ===== */

void nx_dequantize_row_q8_K(const nx_block_q8_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK_K; i++, y += NX_QK_K)
        for (int j = 0; j < NX_QK_K; j++) y[j] = x[i].d * x[i].qs[j];
}

void nx_quantize_row_q8_K_ref(const float *x, nx_block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / NX_QK_K; i++, x += NX_QK_K) {
        float amax;
        const float max = signed_absmax(x, NX_QK_K, &amax);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127 (not -128) keeps every code in [-127, 127] */
        const float iscale = -127.f / max;
        for (int j = 0; j < NX_QK_K; j++) y[i].qs[j] = (int8_t)clampi(nearest_int(iscale * x[j]), -128, 127);
        for (int j = 0; j < NX_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}
