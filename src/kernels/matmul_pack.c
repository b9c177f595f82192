/*
 * matmul_pack.c — the packed weight layouts (matmul.h: nx_matmul_pack), which packed kernel
 * serves a type at the current level, and the scalar references that define each layout's
 * float contract (matmul_impl.h). The SIMD packed kernels live in matmul_pack_{avx2,avx512,amx}.c
 * and are tested bit for bit against these references.
 *
 * A layout does not depend on the level: one packed copy serves the AVX2 and the AVX-512
 * kernels (the AVX2 ones take each 16-row vector as two halves of 8 rows), so forcing a
 * level at run time never meets a copy made for another.
 * Must never: change a layout without changing every kernel and reference that reads it.
 */
#include "kernels/matmul.h"
#include "kernels/matmul_impl.h"
#include "kernels/cpu.h"
#include "quant/blocks.h"
#include "core/fp16.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===== Layouts ===== */

bool nx_mm_pack_format(nx_type type, int *block_values, size_t *block_bytes) {
    int bv;
    size_t bb;
    switch (type) {
    case NX_TYPE_Q8_0: bv = 32; bb = NX_MM_Q8X16_BLOCK; break;
    case NX_TYPE_Q4_0: case NX_TYPE_IQ4_NL: bv = 32; bb = NX_MM_Q40X16_BLOCK; break;
    case NX_TYPE_Q4_K: bv = 256; bb = NX_MM_Q4KX16_BLOCK; break;
    case NX_TYPE_Q5_K: bv = 256; bb = NX_MM_Q5KX16_BLOCK; break;
    case NX_TYPE_Q6_K: bv = 256; bb = NX_MM_Q6KX16_BLOCK; break;
    case NX_TYPE_IQ4_XS: bv = 256; bb = NX_MM_IQ4XSX16_BLOCK; break;
    case NX_TYPE_F32: bv = 32; bb = NX_MM_F32X16_BLOCK; break;
    case NX_TYPE_F16: case NX_TYPE_BF16: bv = 32; bb = NX_MM_F16X16_BLOCK; break;
    default: return false;
    }
    if (block_values) *block_values = bv;
    if (block_bytes) *block_bytes = bb;
    return true;
}

nx_mm_pkernel nx_mm_pick_pkernel(nx_type type) {
#if !NX_MM_X86
    (void)type;
    return NULL;   /* no NEON packed kernels yet: the unpacked NEON kernels serve */
#else
    const nx_cpu_level l = nx_cpu_level_get();
    const bool v = l == NX_CPU_AVX2_VNNI, v2 = l == NX_CPU_AVX2;
    switch (type) {
    case NX_TYPE_Q8_0:   /* AMX: same bits as the AVX-512 kernel, which it calls for short calls */
        return l == NX_CPU_AVX512 ? (nx_cpu_amx() ? nx_mm_pk_q8_0_amx : nx_mm_pk_q8_0_avx512)
             : v ? nx_mm_pk_q8_0_avx2vnni : v2 ? nx_mm_pk_q8_0_avx2 : NULL;
    case NX_TYPE_Q4_0:   /* no AMX kernel: its codes would need unpacking into tile rows */
        return l == NX_CPU_AVX512 ? nx_mm_pk_q4_0_avx512 : v ? nx_mm_pk_q4_0_avx2vnni : v2 ? nx_mm_pk_q4_0_avx2 : NULL;
    case NX_TYPE_IQ4_NL:
        return l == NX_CPU_AVX512 ? nx_mm_pk_iq4_nl_avx512 : v ? nx_mm_pk_iq4_nl_avx2vnni : v2 ? nx_mm_pk_iq4_nl_avx2 : NULL;
    case NX_TYPE_Q4_K: return l == NX_CPU_AVX512 ? nx_mm_pk_q4_K_avx512 : v ? nx_mm_pk_q4_K_avx2vnni : v2 ? nx_mm_pk_q4_K_avx2 : NULL;
    case NX_TYPE_Q5_K: return l == NX_CPU_AVX512 ? nx_mm_pk_q5_K_avx512 : v ? nx_mm_pk_q5_K_avx2vnni : v2 ? nx_mm_pk_q5_K_avx2 : NULL;
    case NX_TYPE_Q6_K: return l == NX_CPU_AVX512 ? nx_mm_pk_q6_K_avx512 : v ? nx_mm_pk_q6_K_avx2vnni : v2 ? nx_mm_pk_q6_K_avx2 : NULL;
    case NX_TYPE_IQ4_XS:
        return l == NX_CPU_AVX512 ? nx_mm_pk_iq4_xs_avx512 : v ? nx_mm_pk_iq4_xs_avx2vnni : v2 ? nx_mm_pk_iq4_xs_avx2 : NULL;
    case NX_TYPE_F32: return l == NX_CPU_AVX512 ? nx_mm_pk_f32_avx512 : v ? nx_mm_pk_f32_avx2vnni : v2 ? nx_mm_pk_f32_avx2 : NULL;
    case NX_TYPE_F16: return l == NX_CPU_AVX512 ? nx_mm_pk_f16_avx512 : v ? nx_mm_pk_f16_avx2vnni : v2 ? nx_mm_pk_f16_avx2 : NULL;
    case NX_TYPE_BF16: return l == NX_CPU_AVX512 ? (nx_cpu_bf16dot() ? nx_mm_pk_bf16_avx512bf16 : nx_mm_pk_bf16_avx512) : v ? nx_mm_pk_bf16_avx2vnni : v2 ? nx_mm_pk_bf16_avx2 : NULL;
    default: return NULL;
    }
#endif
}

size_t nx_matmul_pack_slice_size(const nx_tensor *w) {
    int bv;
    size_t bb;
    if (!w || !nx_mm_pack_format(w->type, &bv, &bb) || w->ne[0] <= 0 || w->ne[0] % bv || w->ne[1] <= 0 ||
        w->ne[1] % NX_MM_PACK_ROWS)
        return 0;
    return (size_t)(w->ne[1] / NX_MM_PACK_ROWS) * (size_t)(w->ne[0] / bv) * bb;
}

size_t nx_matmul_pack_size(const nx_tensor *w) {
    const char *env = getenv("NEXTN_REPACK");
    if (env && !strcmp(env, "0")) return 0;
    if (!w || !w->data || !nx_mm_pick_pkernel(w->type)) return 0;
    /* 2-D, or 3-D expert stacks (one 2-D copy per expert, back to back), rows contiguous */
    if (w->ne[2] < 1 || w->ne[3] != 1 || w->nb[1] != nx_row_size(w->type, w->ne[0]) ||
        (w->ne[2] > 1 && w->nb[2] != w->nb[1] * (size_t)w->ne[1]))
        return 0;
    return nx_matmul_pack_slice_size(w) * (size_t)w->ne[2];
}

/* Q8_0 x16: per block, the 16 fp16 scales, then for k = 0..7 the codes 4k..4k+3 of rows 0..15. */
static void pack_q8_0(const uint8_t *src, size_t rb, uint8_t *bp, int64_t b) {
    for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
        const uint8_t *blk = src + (size_t)l * rb + (size_t)b * sizeof(nx_block_q8_0);
        memcpy(bp + 2 * l, blk, 2);   /* the fp16 scale */
        for (int k = 0; k < 8; k++) memcpy(bp + 32 + 64 * k + 4 * l, blk + 2 + 4 * k, 4);
    }
}

/* One 32-value run stored as Q4_0 / IQ4_NL / IQ4_XS keep it (16 bytes: values 0..15 in the
 * low nibbles, 16..31 in the high ones) into the x16 code vectors at dst, row l: byte
 * 64kk + 4l + i = value 8kk + i | value 8kk + 4 + i << 4. */
static void pack_nibbles32(const uint8_t *qs, uint8_t *dst, int l) {
    uint8_t c[32];
    for (int i = 0; i < 16; i++) {
        c[i] = qs[i] & 15;
        c[16 + i] = qs[i] >> 4;
    }
    for (int kk = 0; kk < 4; kk++)
        for (int i = 0; i < 4; i++) dst[64 * kk + 4 * l + i] = (uint8_t)(c[8 * kk + i] | c[8 * kk + 4 + i] << 4);
}

/* Q4_0 x16 (matmul_impl.h): the 16 fp16 scales, then the stored nibbles regrouped so that
 * each 64-byte vector holds 4 consecutive values of the 16 rows (low nibbles) and the next 4
 * (high nibbles), as Q4_K x16's sub-blocks. The bytes equal the rows' Q4_0 blocks in number. */
static void pack_q4_0(const uint8_t *src, size_t rb, uint8_t *bp, int64_t b) {
    for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
        const nx_block_q4_0 *blk = (const void *)(src + (size_t)l * rb + (size_t)b * sizeof(nx_block_q4_0));
        memcpy(bp + 2 * l, &blk->d, 2);
        pack_nibbles32(blk->qs, bp + 32, l);
    }
}

/* IQ4_XS x16 (matmul_impl.h): the 16 fp16 d, the 6-bit scales unpacked to ls - 32 per
 * [sub-block][row], then each sub-block's nibbles regrouped as Q4_K x16's (IQ4_XS keeps a
 * sub-block's values 0..15 in the low nibbles of its 16 bytes and 16..31 in the high ones). */
static void pack_iq4_xs(const uint8_t *src, size_t rb, uint8_t *bp, int64_t b) {
    memset(bp, 0, NX_MM_IQ4XSX16_BLOCK);
    for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
        const nx_block_iq4_xs *blk = (const void *)(src + (size_t)l * rb + (size_t)b * sizeof(nx_block_iq4_xs));
        memcpy(bp + 2 * l, &blk->d, 2);
        for (int j = 0; j < 8; j++) {
            const int ls = ((blk->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((blk->scales_h >> (2 * j)) & 3) << 4);
            bp[32 + 16 * j + l] = (uint8_t)(int8_t)(ls - 32);
            pack_nibbles32(blk->qs + 16 * j, bp + 192 + 256 * j, l);
        }
    }
}

/* Q4_K / Q5_K x16 (matmul_impl.h): d, dmin, the unpacked 6-bit scales and mins, then per
 * sub-block the nibbles regrouped so that each 64-byte vector holds 4 consecutive values of
 * the 16 rows (low nibbles) and the next 4 (high nibbles); Q5_K adds each sub-block's fifth
 * bits, one vector (byte 4l + i, bit k: value 32j + 4k + i). */
static void pack_k4(bool q5, const uint8_t *src, size_t rb, uint8_t *bp, int64_t b) {
    const size_t bs = q5 ? sizeof(nx_block_q5_K) : sizeof(nx_block_q4_K), sbs = q5 ? 320 : 256;
    memset(bp, 0, q5 ? NX_MM_Q5KX16_BLOCK : NX_MM_Q4KX16_BLOCK);
    for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
        const uint8_t *blk = src + (size_t)l * rb + (size_t)b * bs;
        const uint8_t *scales = blk + 4, *qh = q5 ? blk + 16 : NULL, *qs = blk + (q5 ? 48 : 16);
        memcpy(bp + 2 * l, blk, 2);            /* d */
        memcpy(bp + 32 + 2 * l, blk + 2, 2);   /* dmin */
        uint8_t sc[8], m[8];
        nx_mm_k4_scales(scales, sc, m);
        for (int j = 0; j < 8; j++) {
            bp[64 + 16 * j + l] = sc[j];
            bp[192 + 16 * j + l] = m[j];
        }
        /* the codes (and fifth bits) in value order, then each packed byte written once */
        uint8_t code[256], fifth[256];
        for (int c = 0; c < 4; c++)   /* value 64c + 32h + i: nibble h of qs[32c + i] */
            for (int i = 0; i < 32; i++) {
                code[64 * c + i] = qs[32 * c + i] & 15;
                code[64 * c + 32 + i] = qs[32 * c + i] >> 4;
            }
        if (q5)   /* value 32j + i: bit j of qh[i] */
            for (int j = 0; j < 8; j++)
                for (int i = 0; i < 32; i++) fifth[32 * j + i] = (uint8_t)((qh[i] >> j) & 1);
        for (int j = 0; j < 8; j++) {
            uint8_t *sp = bp + 320 + sbs * (size_t)j;
            const uint8_t *cj = code + 32 * j, *fj = fifth + 32 * j;
            for (int kk = 0; kk < 4; kk++)
                for (int i = 0; i < 4; i++) sp[64 * kk + 4 * l + i] = (uint8_t)(cj[8 * kk + i] | cj[8 * kk + 4 + i] << 4);
            if (q5)
                for (int i = 0; i < 4; i++) {
                    uint8_t bits = 0;
                    for (int k = 0; k < 8; k++) bits |= (uint8_t)(fj[4 * k + i] << k);
                    sp[256 + 4 * l + i] = bits;
                }
        }
    }
}

/* Q6_K x16 (matmul_impl.h): d, the int8 scales in (g, g+1) pairs per row, then per group of
 * 16 values the low nibbles (two vectors) and the high bit pairs (one vector) of 16 rows. */
static void pack_q6_K(const uint8_t *src, size_t rb, uint8_t *bp, int64_t b) {
    memset(bp, 0, NX_MM_Q6KX16_BLOCK);
    for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
        const nx_block_q6_K *blk = (const void *)(src + (size_t)l * rb + (size_t)b * sizeof(nx_block_q6_K));
        memcpy(bp + 2 * l, &blk->d, 2);
        for (int g = 0; g < 16; g++) bp[32 + 32 * (g / 2) + 2 * l + g % 2] = (uint8_t)blk->scales[g];
        uint8_t code[256];
        for (int h = 0; h < 2; h++)   /* the 6-bit codes c = q + 32: value 128h + 32k + i has nibble k / 2 of
                                         * ql[64h + 32(k % 2) + i] and bits 2k.. of qh[32h + i] */
            for (int i = 0; i < 32; i++) {
                const uint8_t l0 = blk->ql[64 * h + i], l1 = blk->ql[64 * h + 32 + i], hb = blk->qh[32 * h + i];
                code[128 * h + i] = (uint8_t)((l0 & 15) | (hb & 3) << 4);
                code[128 * h + 32 + i] = (uint8_t)((l1 & 15) | ((hb >> 2) & 3) << 4);
                code[128 * h + 64 + i] = (uint8_t)((l0 >> 4) | ((hb >> 4) & 3) << 4);
                code[128 * h + 96 + i] = (uint8_t)((l1 >> 4) | ((hb >> 6) & 3) << 4);
            }
        for (int g = 0; g < 16; g++) {
            uint8_t *gp = bp + 320 + 192 * g;
            const uint8_t *cg = code + 16 * g;
            for (int i = 0; i < 4; i++) {
                gp[4 * l + i] = (uint8_t)((cg[i] & 15) | (cg[4 + i] & 15) << 4);
                gp[64 + 4 * l + i] = (uint8_t)((cg[8 + i] & 15) | (cg[12 + i] & 15) << 4);
                gp[128 + 4 * l + i] = (uint8_t)(cg[i] >> 4 | (cg[4 + i] >> 4) << 2 | (cg[8 + i] >> 4) << 4 | (cg[12 + i] >> 4) << 6);
            }
        }
    }
}

/* Float x16 (matmul_impl.h): per input k of the block, the 16 rows' stored weights side by side. */
static void pack_float(const uint8_t *src, size_t rb, uint8_t *bp, int64_t b, size_t es) {
    for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
        const uint8_t *row = src + (size_t)l * rb + (size_t)b * 32 * es;
        for (int k = 0; k < 32; k++) memcpy(bp + (size_t)k * NX_MM_PACK_ROWS * es + (size_t)l * es, row + (size_t)k * es, es);
    }
}

/* Groups [g0, g1) of w's packed copy, counted over all its 2-D slices (experts) in order. */
static void pack_groups(const nx_tensor *w, uint8_t *out, int64_t g0, int64_t g1) {
    int bv;
    size_t bb;
    if (!nx_mm_pack_format(w->type, &bv, &bb)) return;
    const int64_t nb = w->ne[0] / bv, ng = w->ne[1] / NX_MM_PACK_ROWS;
    for (int64_t gg = g0; gg < g1; gg++) {
        const int64_t e = gg / ng, g = gg % ng;
        const uint8_t *src = (const uint8_t *)w->data + (size_t)e * w->nb[2] + (size_t)(g * NX_MM_PACK_ROWS) * w->nb[1];
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *bp = out + (size_t)(gg * nb + b) * bb;
            if (w->type == NX_TYPE_Q8_0) pack_q8_0(src, w->nb[1], bp, b);
            else if (w->type == NX_TYPE_Q4_0 || w->type == NX_TYPE_IQ4_NL) pack_q4_0(src, w->nb[1], bp, b);   /* same fields */
            else if (w->type == NX_TYPE_Q4_K || w->type == NX_TYPE_Q5_K) pack_k4(w->type == NX_TYPE_Q5_K, src, w->nb[1], bp, b);
            else if (w->type == NX_TYPE_IQ4_XS) pack_iq4_xs(src, w->nb[1], bp, b);
            else if (w->type == NX_TYPE_F32) pack_float(src, w->nb[1], bp, b, 4);
            else if (w->type == NX_TYPE_F16 || w->type == NX_TYPE_BF16) pack_float(src, w->nb[1], bp, b, 2);
            else pack_q6_K(src, w->nb[1], bp, b);
        }
    }
}

static int64_t pack_n_groups(const nx_tensor *w) { return w->ne[1] / NX_MM_PACK_ROWS * (w->ne[2] > 1 ? w->ne[2] : 1); }

void nx_matmul_pack(const nx_tensor *w, void *dst) { pack_groups(w, dst, 0, pack_n_groups(w)); }

typedef struct { const nx_tensor *w; uint8_t *dst; int64_t ng; } pack_job;

static void pack_task(void *arg, int ith, int nth) {
    const pack_job *j = arg;
    pack_groups(j->w, j->dst, j->ng * ith / nth, j->ng * (ith + 1) / nth);
}

void nx_matmul_pack_tp(nx_threadpool *tp, const nx_tensor *w, void *dst) {
    pack_job j = {.w = w, .dst = dst, .ng = pack_n_groups(w)};
    if (!tp || j.ng < 64) { nx_matmul_pack(w, dst); return; }   /* small: not worth a hand-off */
    nx_threadpool_run(tp, pack_task, &j);
}

/* ===== Scalar references (the contracts, one lane at a time) ===== */

static float ld_half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return nx_half_to_f32(h);
}

/* The 32-value layouts' weight value (exact): Q8_0's stored code, Q4_0's code - 8, IQ4_NL's
 * table value; value 4k + j of row l of the block at bp. */
static int b32_value(nx_type t, const uint8_t *bp, int l, int k, int j) {
    if (t == NX_TYPE_Q8_0) return (int8_t)bp[32 + 64 * k + 4 * l + j];
    const int c = (bp[32 + 64 * (k / 2) + 4 * l + j] >> (4 * (k % 2))) & 15;
    return t == NX_TYPE_Q4_0 ? c - 8 : nx_mm_iq4_table[c];
}
static void pk_b32_scalar(nx_type t, int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act,
                          float *y, int64_t ldy) {
    const size_t bb = t == NX_TYPE_Q8_0 ? NX_MM_Q8X16_BLOCK : NX_MM_Q40X16_BLOCK;
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *gp = wp + (size_t)g * (size_t)nb * bb;
        for (int r = 0; r < n_act; r++) {
            const int8_t *q = (const int8_t *)(a->q + r * a->q_stride);
            const float *d = a->d + r * a->d_stride;
            for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *bp = gp + (size_t)b * bb;
                    int32_t I = 0;
                    for (int k = 0; k < 8; k++)
                        for (int j = 0; j < 4; j++) I += b32_value(t, bp, l, k, j) * q[32 * b + 4 * k + j];
                    const float s = ld_half(bp + 2 * l) * d[b];   /* one rounding, as the SIMD multiply */
                    acc = fmaf((float)I, s, acc);                  /* one rounding, as the SIMD fma */
                }
                y[r * ldy + NX_MM_PACK_ROWS * g + l] = acc;
            }
        }
    }
}
void nx_mm_pk_q8_0_scalar(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y,
                          int64_t ldy) {
    pk_b32_scalar(NX_TYPE_Q8_0, nb, wp, n_groups, a, n_act, y, ldy);
}
void nx_mm_pk_q4_0_scalar(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y,
                          int64_t ldy) {
    pk_b32_scalar(NX_TYPE_Q4_0, nb, wp, n_groups, a, n_act, y, ldy);
}
void nx_mm_pk_iq4_nl_scalar(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y,
                            int64_t ldy) {
    pk_b32_scalar(NX_TYPE_IQ4_NL, nb, wp, n_groups, a, n_act, y, ldy);
}

static void pk_k4_scalar(bool q5, int64_t nsb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act,
                         float *y, int64_t ldy) {
    const size_t blk = q5 ? NX_MM_Q5KX16_BLOCK : NX_MM_Q4KX16_BLOCK, sbs = q5 ? 320 : 256;
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *gp = wp + (size_t)g * (size_t)nsb * blk;
        for (int r = 0; r < n_act; r++) {
            const int8_t *q = (const int8_t *)(a->q + r * a->q_stride);
            const int16_t *bs = a->bs + r * a->bs_stride;
            const float *d = a->d + r * a->d_stride;
            for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
                float acc = 0.0f;
                for (int64_t sb = 0; sb < nsb; sb++) {
                    const uint8_t *bp = gp + (size_t)sb * blk;
                    const float dw = ld_half(bp + 2 * l), ndm = -ld_half(bp + 32 + 2 * l);
                    int32_t mn = 0;
                    for (int j = 0; j < 8; j++)
                        mn += (int32_t)bp[192 + 16 * j + l] * (bs[16 * sb + 2 * j] + bs[16 * sb + 2 * j + 1]);
                    float t = (float)mn * ndm;
                    for (int j = 0; j < 8; j++) {
                        const uint8_t *sp = bp + 320 + sbs * (size_t)j;
                        int32_t I = 0;
                        for (int k = 0; k < 8; k++)
                            for (int i = 0; i < 4; i++) {
                                int c = (sp[64 * (k / 2) + 4 * l + i] >> (4 * (k % 2))) & 15;
                                if (q5) c |= ((sp[256 + 4 * l + i] >> k) & 1) << 4;
                                I += c * q[256 * sb + 32 * j + 4 * k + i];
                            }
                        const float dsc = dw * (float)bp[64 + 16 * j + l];
                        t = fmaf((float)I, dsc, t);
                    }
                    acc = fmaf(t, d[sb], acc);
                }
                y[r * ldy + NX_MM_PACK_ROWS * g + l] = acc;
            }
        }
    }
}

void nx_mm_pk_q4_K_scalar(int64_t nsb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act,
                          float *y, int64_t ldy) {
    pk_k4_scalar(false, nsb, wp, n_groups, a, n_act, y, ldy);
}

void nx_mm_pk_q5_K_scalar(int64_t nsb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act,
                          float *y, int64_t ldy) {
    pk_k4_scalar(true, nsb, wp, n_groups, a, n_act, y, ldy);
}

void nx_mm_pk_q6_K_scalar(int64_t nsb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act,
                          float *y, int64_t ldy) {
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *gp = wp + (size_t)g * (size_t)nsb * NX_MM_Q6KX16_BLOCK;
        for (int r = 0; r < n_act; r++) {
            const int8_t *q = (const int8_t *)(a->q + r * a->q_stride);
            const int16_t *bs = a->bs + r * a->bs_stride;
            const float *d = a->d + r * a->d_stride;
            for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
                float acc = 0.0f;
                for (int64_t sb = 0; sb < nsb; sb++) {
                    const uint8_t *bp = gp + (size_t)sb * NX_MM_Q6KX16_BLOCK;
                    const float dw = ld_half(bp + 2 * l);
                    int sc[16];
                    for (int u = 0; u < 16; u++) sc[u] = (int8_t)bp[32 + 32 * (u / 2) + 2 * l + u % 2];
                    int32_t c = 0;
                    for (int u = 0; u < 16; u++) c += sc[u] * bs[16 * sb + u];
                    float t = (float)c * (-32.0f * dw);   /* -32 d: exact */
                    for (int u = 0; u < 16; u++) {
                        const uint8_t *up = bp + 320 + 192 * u;
                        int32_t I = 0;
                        for (int k = 0; k < 4; k++)
                            for (int i = 0; i < 4; i++) {
                                const int lo = (up[64 * (k / 2) + 4 * l + i] >> (4 * (k % 2))) & 15;
                                const int hi = (up[128 + 4 * l + i] >> (2 * k)) & 3;
                                I += (lo | hi << 4) * q[256 * sb + 16 * u + 4 * k + i];
                            }
                        t = fmaf((float)I, dw * (float)sc[u], t);
                    }
                    acc = fmaf(t, d[sb], acc);
                }
                y[r * ldy + NX_MM_PACK_ROWS * g + l] = acc;
            }
        }
    }
}

void nx_mm_pk_iq4_xs_scalar(int64_t nsb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act,
                            float *y, int64_t ldy) {
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *gp = wp + (size_t)g * (size_t)nsb * NX_MM_IQ4XSX16_BLOCK;
        for (int r = 0; r < n_act; r++) {
            const int8_t *q = (const int8_t *)(a->q + r * a->q_stride);
            const float *d = a->d + r * a->d_stride;
            for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
                float acc = 0.0f;
                for (int64_t sb = 0; sb < nsb; sb++) {
                    const uint8_t *bp = gp + (size_t)sb * NX_MM_IQ4XSX16_BLOCK;
                    const float dw = ld_half(bp + 2 * l);
                    float t = 0.0f;
                    for (int j = 0; j < 8; j++) {
                        int32_t I = 0;
                        for (int k = 0; k < 8; k++)
                            for (int i = 0; i < 4; i++) {
                                const int c = (bp[192 + 256 * j + 64 * (k / 2) + 4 * l + i] >> (4 * (k % 2))) & 15;
                                I += nx_mm_iq4_table[c] * q[256 * sb + 32 * j + 4 * k + i];
                            }
                        t = fmaf((float)I, dw * (float)(int8_t)bp[32 + 16 * j + l], t);
                    }
                    acc = fmaf(t, d[sb], acc);
                }
                y[r * ldy + NX_MM_PACK_ROWS * g + l] = acc;
            }
        }
    }
}

/* Float x16: (float)w as the kernels convert it (exact). */
static float pk_wf(nx_type t, const uint8_t *p) {
    if (t == NX_TYPE_F32) { float f; memcpy(&f, p, 4); return f; }
    uint16_t h;
    memcpy(&h, p, 2);
    if (t == NX_TYPE_F16) return nx_half_to_f32(h);
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void pk_float_scalar(nx_type t, int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act,
                            float *y, int64_t ldy) {
    const size_t es = t == NX_TYPE_F32 ? 4 : 2, bb = 32 * NX_MM_PACK_ROWS * es;
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *gp = wp + (size_t)g * (size_t)nb * bb;
        for (int r = 0; r < n_act; r++) {
            const float *x = a->x + r * a->ldx;
            for (int l = 0; l < NX_MM_PACK_ROWS; l++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < 32 * nb; k++)
                    acc = fmaf(pk_wf(t, gp + (size_t)k * NX_MM_PACK_ROWS * es + (size_t)l * es), x[k], acc);
                y[r * ldy + NX_MM_PACK_ROWS * g + l] = acc;
            }
        }
    }
}
void nx_mm_pk_f32_scalar(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    pk_float_scalar(NX_TYPE_F32, nb, wp, n_groups, a, n_act, y, ldy);
}
void nx_mm_pk_f16_scalar(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    pk_float_scalar(NX_TYPE_F16, nb, wp, n_groups, a, n_act, y, ldy);
}
void nx_mm_pk_bf16_scalar(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y, int64_t ldy) {
    pk_float_scalar(NX_TYPE_BF16, nb, wp, n_groups, a, n_act, y, ldy);
}
