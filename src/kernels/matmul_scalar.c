/*
 * matmul_scalar.c — the reference matmul kernels: plain C, one (weight row, activation row)
 * dot product at a time, written to be obviously right rather than fast.
 *
 * Each weight block is decoded to small integers and integer scales; the dot product with
 * the 8-bit activation codes is exact in integers per block (per super-block for K-quants),
 * and only the scaling and the sum over blocks are in float, in block order. The SIMD
 * kernels are tested against these. Float weights: one float accumulator, in index order.
 * Must never: depend on anything but the (weight row, activation row) pair.
 */
#include "kernels/matmul_impl.h"
#include "quant/blocks.h"
#include <math.h>
#include <string.h>
#include "core/fp16.h"

/* ===== Float weights ===== */

static float wval(nx_type t, const uint8_t *w, int64_t i) {
    uint16_t h;
    switch (t) {
    case NX_TYPE_F16: memcpy(&h, w + 2 * i, 2); return nx_half_to_f32(h);
    case NX_TYPE_BF16: memcpy(&h, w + 2 * i, 2); return nx_bf16_to_f32(h);
    default: { float f; memcpy(&f, w + 4 * i, 4); return f; }
    }
}

static void kern_float(nx_type t, int64_t n_in, const uint8_t *w, size_t w_stride, int64_t n_w,
                       const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    for (int64_t o = 0; o < n_w; o++) {
        const uint8_t *wr = w + (size_t)o * w_stride;
        for (int r = 0; r < n_act; r++) {
            const float *x = a->x + r * a->ldx;
            float sum = 0.0f;
            for (int64_t i = 0; i < n_in; i++) sum += wval(t, wr, i) * x[i];
            y[r * ldy + o] = sum;
        }
    }
}

static void k_f32(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { kern_float(NX_TYPE_F32, n, w, ws, nw, a, na, y, ldy); }
static void k_f16(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { kern_float(NX_TYPE_F16, n, w, ws, nw, a, na, y, ldy); }
static void k_bf16(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { kern_float(NX_TYPE_BF16, n, w, ws, nw, a, na, y, ldy); }

/* ===== 32-value blocks: value = d * q + m ===== */

typedef struct { int8_t q[32]; float d, m; } dec32;

static size_t bsize32(nx_type t) {
    switch (t) {
    case NX_TYPE_Q4_0: return sizeof(nx_block_q4_0);
    case NX_TYPE_Q4_1: return sizeof(nx_block_q4_1);
    case NX_TYPE_Q5_0: return sizeof(nx_block_q5_0);
    case NX_TYPE_Q5_1: return sizeof(nx_block_q5_1);
    case NX_TYPE_Q8_0: return sizeof(nx_block_q8_0);
    default: return sizeof(nx_block_iq4_nl);
    }
}

/* Nibble j < 16 is value j, nibble j >= 16 the high half of byte j - 16. */
static inline int nib(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

static void decode32(nx_type t, const uint8_t *blk, dec32 *o) {
    o->m = 0.0f;
    uint32_t qh;
    switch (t) {
    case NX_TYPE_Q4_0: {
        const nx_block_q4_0 *b = (const void *)blk;
        o->d = nx_half_to_f32(b->d);
        for (int j = 0; j < 32; j++) o->q[j] = (int8_t)(nib(b->qs, j) - 8);
        break;
    }
    case NX_TYPE_Q4_1: {
        const nx_block_q4_1 *b = (const void *)blk;
        o->d = nx_half_to_f32(b->d);
        o->m = nx_half_to_f32(b->m);
        for (int j = 0; j < 32; j++) o->q[j] = (int8_t)nib(b->qs, j);
        break;
    }
    case NX_TYPE_Q5_0: {
        const nx_block_q5_0 *b = (const void *)blk;
        o->d = nx_half_to_f32(b->d);
        memcpy(&qh, b->qh, 4);
        for (int j = 0; j < 32; j++) o->q[j] = (int8_t)((nib(b->qs, j) | (((qh >> j) & 1) << 4)) - 16);
        break;
    }
    case NX_TYPE_Q5_1: {
        const nx_block_q5_1 *b = (const void *)blk;
        o->d = nx_half_to_f32(b->d);
        o->m = nx_half_to_f32(b->m);
        memcpy(&qh, b->qh, 4);
        for (int j = 0; j < 32; j++) o->q[j] = (int8_t)(nib(b->qs, j) | (((qh >> j) & 1) << 4));
        break;
    }
    case NX_TYPE_Q8_0: {
        const nx_block_q8_0 *b = (const void *)blk;
        o->d = nx_half_to_f32(b->d);
        memcpy(o->q, b->qs, 32);
        break;
    }
    default: { /* IQ4_NL */
        const nx_block_iq4_nl *b = (const void *)blk;
        o->d = nx_half_to_f32(b->d);
        for (int j = 0; j < 32; j++) o->q[j] = nx_mm_iq4_table[nib(b->qs, j)];
        break;
    }
    }
}

/* y = sum_b (dw_b * da_b) * sum_i qw_i qa_i  +  mw_b * s_b   (s_b = da_b * sum_i qa_i) */
static void kern_b32(nx_type t, int64_t n_in, const uint8_t *w, size_t w_stride, int64_t n_w,
                     const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    const int64_t nb = n_in / 32;
    const size_t bsz = bsize32(t);
    const int has_m = t == NX_TYPE_Q4_1 || t == NX_TYPE_Q5_1;
    for (int64_t o = 0; o < n_w; o++) {
        const uint8_t *wr = w + (size_t)o * w_stride;
        for (int r = 0; r < n_act; r++) {
            const uint8_t *q = a->q + r * a->q_stride;
            const float *d = a->d + r * a->d_stride;
            float sum = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                dec32 k;
                decode32(t, wr + (size_t)b * bsz, &k);
                int isum = 0;
                for (int j = 0; j < 32; j++) isum += k.q[j] * ((int)q[32 * b + j] - 128);
                sum += (k.d * d[b]) * (float)isum;
                if (has_m) sum += k.m * a->s[r * a->s_stride + b];
            }
            y[r * ldy + o] = sum;
        }
    }
}

#define K32(name, T) static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { kern_b32(T, n, w, ws, nw, a, na, y, ldy); }
K32(k_q4_0, NX_TYPE_Q4_0)
K32(k_q4_1, NX_TYPE_Q4_1)
K32(k_q5_0, NX_TYPE_Q5_0)
K32(k_q5_1, NX_TYPE_Q5_1)
K32(k_q8_0, NX_TYPE_Q8_0)
K32(k_iq4_nl, NX_TYPE_IQ4_NL)

/* ===== 256-value super-blocks: value = d * sc_g * q - dmin * m_j ===== */

typedef struct {
    int8_t q[256];
    int sc[16];      /* integer scale per group of 16 values */
    int m[16];       /* integer min per group of 16 (Q2_K; Q4_K / Q5_K repeat theirs per pair) */
    float d, dmin;
} dec256;

static size_t bsize256(nx_type t) {
    switch (t) {
    case NX_TYPE_Q4_K: return sizeof(nx_block_q4_K);
    case NX_TYPE_Q5_K: return sizeof(nx_block_q5_K);
    case NX_TYPE_Q6_K: return sizeof(nx_block_q6_K);
    case NX_TYPE_Q2_K: return sizeof(nx_block_q2_K);
    case NX_TYPE_Q3_K: return sizeof(nx_block_q3_K);
    default: return sizeof(nx_block_iq4_xs);
    }
}

static void decode256(nx_type t, const uint8_t *blk, dec256 *o) {
    memset(o->m, 0, sizeof o->m);
    o->dmin = 0.0f;
    switch (t) {
    case NX_TYPE_Q4_K:
    case NX_TYPE_Q5_K: {
        const uint8_t *scales, *qs, *qh = NULL;
        if (t == NX_TYPE_Q4_K) {
            const nx_block_q4_K *b = (const void *)blk;
            o->d = nx_half_to_f32(b->d);
            o->dmin = nx_half_to_f32(b->dmin);
            scales = b->scales;
            qs = b->qs;
        } else {
            const nx_block_q5_K *b = (const void *)blk;
            o->d = nx_half_to_f32(b->d);
            o->dmin = nx_half_to_f32(b->dmin);
            scales = b->scales;
            qs = b->qs;
            qh = b->qh;
        }
        uint8_t sc[8], m[8];
        nx_mm_k4_scales(scales, sc, m);
        for (int j = 0; j < 8; j++) {
            o->sc[2 * j] = o->sc[2 * j + 1] = sc[j];
            o->m[2 * j] = o->m[2 * j + 1] = m[j];
        }
        /* 64 values per 32 bytes: low nibbles first, then high nibbles; Q5_K's fifth bit
         * of value 64c + 32h + i is bit 2c + h of qh[i]. */
        for (int c = 0; c < 4; c++)
            for (int i = 0; i < 32; i++) {
                int lo = qs[32 * c + i] & 0xF, hi = qs[32 * c + i] >> 4;
                if (qh) {
                    lo |= ((qh[i] >> (2 * c)) & 1) << 4;
                    hi |= ((qh[i] >> (2 * c + 1)) & 1) << 4;
                }
                o->q[64 * c + i] = (int8_t)lo;
                o->q[64 * c + 32 + i] = (int8_t)hi;
            }
        break;
    }
    case NX_TYPE_Q6_K: {
        const nx_block_q6_K *b = (const void *)blk;
        o->d = nx_half_to_f32(b->d);
        for (int g = 0; g < 16; g++) o->sc[g] = b->scales[g];
        /* Per half of 128 values: ql[0..63] and qh[0..31]; value 32k + i takes the low
         * (k = 0, 1) or high (k = 2, 3) nibble of ql[32(k&1) + i] and bits 2k, 2k+1 of qh[i]. */
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            for (int i = 0; i < 32; i++)
                for (int k = 0; k < 4; k++) {
                    int l = k < 2 ? ql[32 * (k & 1) + i] & 0xF : ql[32 * (k & 1) + i] >> 4;
                    int v = l | (((qh[i] >> (2 * k)) & 3) << 4);
                    o->q[128 * h + 32 * k + i] = (int8_t)(v - 32);
                }
        }
        break;
    }
    case NX_TYPE_Q2_K:
    case NX_TYPE_Q3_K: {
        /* 2-bit codes: value 128h + 32s + i is bits 2s, 2s+1 of qs[32h + i]; Q3_K's third bit
         * is bit 4h + s of hmask[i], and a clear bit means code - 4. */
        const uint8_t *qs, *hm = NULL;
        if (t == NX_TYPE_Q2_K) {
            const nx_block_q2_K *b = (const void *)blk;
            o->d = nx_half_to_f32(b->d);
            o->dmin = nx_half_to_f32(b->dmin);
            for (int g = 0; g < 16; g++) {
                o->sc[g] = b->scales[g] & 0xF;
                o->m[g] = b->scales[g] >> 4;
            }
            qs = b->qs;
        } else {
            const nx_block_q3_K *b = (const void *)blk;
            o->d = nx_half_to_f32(b->d);
            for (int g = 0; g < 16; g++) {
                int lo = g < 8 ? b->scales[g] & 0xF : b->scales[g - 8] >> 4;
                int hi = (b->scales[8 + g % 4] >> (2 * (g / 4))) & 3;
                o->sc[g] = (lo | (hi << 4)) - 32;
            }
            qs = b->qs;
            hm = b->hmask;
        }
        for (int h = 0; h < 2; h++)
            for (int sh = 0; sh < 4; sh++)
                for (int i = 0; i < 32; i++) {
                    int v = (qs[32 * h + i] >> (2 * sh)) & 3;
                    if (hm && !((hm[i] >> (4 * h + sh)) & 1)) v -= 4;
                    o->q[128 * h + 32 * sh + i] = (int8_t)v;
                }
        break;
    }
    default: { /* IQ4_XS: sub-block j = 16 bytes of nibbles, scale 6 bits minus 32 */
        const nx_block_iq4_xs *b = (const void *)blk;
        o->d = nx_half_to_f32(b->d);
        for (int j = 0; j < 8; j++) {
            int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4);
            o->sc[2 * j] = o->sc[2 * j + 1] = ls - 32;
            for (int i = 0; i < 16; i++) {
                o->q[32 * j + i] = nx_mm_iq4_table[b->qs[16 * j + i] & 0xF];
                o->q[32 * j + 16 + i] = nx_mm_iq4_table[b->qs[16 * j + i] >> 4];
            }
        }
        break;
    }
    }
}

/* y = sum_sb da * (d * sum_g sc_g * (q . qa)_g  -  dmin * sum_j m_j * sum_{i in j} qa_i) */
static void kern_b256(nx_type t, int64_t n_in, const uint8_t *w, size_t w_stride, int64_t n_w,
                      const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    const int64_t nsb = n_in / 256;
    const size_t bsz = bsize256(t);
    const int bias = nx_mm_act_bias(t);
    for (int64_t o = 0; o < n_w; o++) {
        const uint8_t *wr = w + (size_t)o * w_stride;
        for (int r = 0; r < n_act; r++) {
            const uint8_t *q = a->q + r * a->q_stride;
            const float *d = a->d + r * a->d_stride;
            const int16_t *bs = a->bs + r * a->bs_stride;
            float sum = 0.0f;
            for (int64_t b = 0; b < nsb; b++) {
                dec256 k;
                decode256(t, wr + (size_t)b * bsz, &k);
                int isum = 0, msum = 0;
                for (int g = 0; g < 16; g++) {
                    int gs = 0;
                    for (int i = 16 * g; i < 16 * g + 16; i++)
                        gs += k.q[i] * (bias ? (int)q[256 * b + i] - 128 : (int)(int8_t)q[256 * b + i]);
                    isum += k.sc[g] * gs;
                }
                for (int g = 0; g < 16; g++) msum += k.m[g] * bs[16 * b + g];
                sum += d[b] * (k.d * (float)isum - k.dmin * (float)msum);
            }
            y[r * ldy + o] = sum;
        }
    }
}

#define K256(name, T) static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { kern_b256(T, n, w, ws, nw, a, na, y, ldy); }
K256(k_q4_K, NX_TYPE_Q4_K)
K256(k_q5_K, NX_TYPE_Q5_K)
K256(k_q6_K, NX_TYPE_Q6_K)
K256(k_iq4_xs, NX_TYPE_IQ4_XS)
K256(k_q2_K, NX_TYPE_Q2_K)
K256(k_q3_K, NX_TYPE_Q3_K)

nx_mm_kernel nx_mm_kernel_scalar(nx_type type) {
    switch (type) {
    case NX_TYPE_F32: return k_f32;
    case NX_TYPE_F16: return k_f16;
    case NX_TYPE_BF16: return k_bf16;
    case NX_TYPE_Q4_0: return k_q4_0;
    case NX_TYPE_Q4_1: return k_q4_1;
    case NX_TYPE_Q5_0: return k_q5_0;
    case NX_TYPE_Q5_1: return k_q5_1;
    case NX_TYPE_Q8_0: return k_q8_0;
    case NX_TYPE_IQ4_NL: return k_iq4_nl;
    case NX_TYPE_Q4_K: return k_q4_K;
    case NX_TYPE_Q5_K: return k_q5_K;
    case NX_TYPE_Q6_K: return k_q6_K;
    case NX_TYPE_IQ4_XS: return k_iq4_xs;
    case NX_TYPE_Q2_K: return k_q2_K;
    case NX_TYPE_Q3_K: return k_q3_K;
    default: return NULL;
    }
}
