/*
 * matmul_pack_avx512.c — AVX-512 (VNNI) kernels for the packed layouts (matmul_impl.h,
 * matmul_pack.c). Each weight vector holds one 4-byte group of 16 rows, so an activation's 4
 * bytes, broadcast, meet 16 rows in one vpdpbusd and each row's sum stays in its lane: no
 * horizontal sums, and the per-block scale work serves 16 rows.
 *
 * The float ops per (weight row, activation row) are the layout's contract whatever the pass,
 * tile or thread (bit-identical to nx_mm_pk_*_scalar, tested).
 * Must never: read outside the packed group or past n_act activation rows.
 */
#include "kernels/matmul_impl.h"
#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#ifndef NX_MM_PREFETCH
#define NX_MM_PREFETCH 2048
#endif

AI uint32_t ld32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
AI void prefetch_blk(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(p + NX_MM_PREFETCH + o), _MM_HINT_T0);
}
/* A decode / verify step's prefetch. From NX_MM_PF_L2_ROWS rows on, a block's compute is long
 * enough that its DRAM reads were served one after another instead of under the compute: the
 * L1 fill buffers held too few misses. Prefetched into L2 (T1, which has more) from further
 * ahead, 4 and 8 rows ran 1.10-1.2x faster in the model (Qwen3.5-0.8B-shaped Q8_0 / Q4_K_M,
 * Zen 4, 2 threads); 1 and 2 rows were faster with T0, whose lines reach L1. */
#ifndef NX_MM_PREFETCH_L2
#define NX_MM_PREFETCH_L2 4096
#endif
#define NX_MM_PF_L2_ROWS 3
AI void prefetch_rows(const int NR, const uint8_t *p, size_t bytes) {
    if (NR < NX_MM_PF_L2_ROWS) {
        prefetch_blk(p, bytes);
        return;
    }
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(p + NX_MM_PREFETCH_L2 + o), _MM_HINT_T1);
}

/* A type's kernel is a per-block STEP(NR, bp, a, b, acc) over NR activation rows, and
 * STEP2(NR, bp0, bp1, a, b, acc0, acc1), the same for two groups at once. The driver runs
 * rows in passes of at most 8 (balanced: 9 = 5 + 4), each a compiled body, over the group's
 * blocks in order; a pass takes two groups at once (g and g + n_groups/2): two weight streams
 * keep more DRAM reads in flight than one, and STEP2 loads each broadcast activation once for
 * both (fewer loads: 6-14% off the in-cache compute of 4-8 rows). None of this changes a
 * (weight row, activation row) pair's arithmetic. */
#define PK_KERNELS(fname, STEP, STEP2, BLOCK) \
    AI void fname##_run(const int NR, const int TWO, int64_t nb, const uint8_t *g0, const uint8_t *g1, \
                        const nx_mm_act *a, float *y0, float *y1, int64_t ldy) { \
        __m512 acc0[8], acc1[8]; \
        for (int r = 0; r < NR; r++) acc0[r] = acc1[r] = _mm512_setzero_ps(); \
        for (int64_t b = 0; b < nb; b++) { \
            if (TWO) STEP2(NR, g0 + (size_t)b * (BLOCK), g1 + (size_t)b * (BLOCK), a, b, acc0, acc1); \
            else STEP(NR, g0 + (size_t)b * (BLOCK), a, b, acc0); \
        } \
        for (int r = 0; r < NR; r++) { \
            _mm512_storeu_ps(y0 + r * ldy, acc0[r]); \
            if (TWO) _mm512_storeu_ps(y1 + r * ldy, acc1[r]); \
        } \
    } \
    static void fname##_pass(int nr, int two, int64_t nb, const uint8_t *g0, const uint8_t *g1, const nx_mm_act *a, \
                             float *y0, float *y1, int64_t ldy) { \
        if (two) \
            switch (nr) { \
            case 1: fname##_run(1, 1, nb, g0, g1, a, y0, y1, ldy); return; \
            case 2: fname##_run(2, 1, nb, g0, g1, a, y0, y1, ldy); return; \
            case 3: fname##_run(3, 1, nb, g0, g1, a, y0, y1, ldy); return; \
            case 4: fname##_run(4, 1, nb, g0, g1, a, y0, y1, ldy); return; \
            case 5: fname##_run(5, 1, nb, g0, g1, a, y0, y1, ldy); return; \
            case 6: fname##_run(6, 1, nb, g0, g1, a, y0, y1, ldy); return; \
            case 7: fname##_run(7, 1, nb, g0, g1, a, y0, y1, ldy); return; \
            default: fname##_run(8, 1, nb, g0, g1, a, y0, y1, ldy); return; \
            } \
        switch (nr) { \
        case 1: fname##_run(1, 0, nb, g0, g0, a, y0, y0, ldy); break; \
        case 2: fname##_run(2, 0, nb, g0, g0, a, y0, y0, ldy); break; \
        case 3: fname##_run(3, 0, nb, g0, g0, a, y0, y0, ldy); break; \
        case 4: fname##_run(4, 0, nb, g0, g0, a, y0, y0, ldy); break; \
        case 5: fname##_run(5, 0, nb, g0, g0, a, y0, y0, ldy); break; \
        case 6: fname##_run(6, 0, nb, g0, g0, a, y0, y0, ldy); break; \
        case 7: fname##_run(7, 0, nb, g0, g0, a, y0, y0, ldy); break; \
        default: fname##_run(8, 0, nb, g0, g0, a, y0, y0, ldy); break; \
        } \
        if (two) fname##_pass(nr, 0, nb, g1, g1, a, y1, y1, ldy); \
    } \
    void fname(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y, int64_t ldy) { \
        const size_t gs = (size_t)nb * (BLOCK); \
        const int64_t h = n_groups / 2; \
        for (int64_t g = 0; g < h + n_groups % 2; g++) { \
            const int two = g < h; \
            const int64_t g1 = two ? g + h : g; \
            for (int r0 = 0; r0 < n_act;) { \
                const int np = (n_act - r0 + 7) / 8, nr = (n_act - r0 + np - 1) / np; \
                const nx_mm_act sub = nx_mm_act_rows(a, r0); \
                fname##_pass(nr, two, nb, wp + (size_t)(two ? g : 2 * h) * gs, wp + (size_t)g1 * gs, &sub, \
                             y + (int64_t)r0 * ldy + NX_MM_PACK_ROWS * (two ? g : 2 * h), \
                             y + (int64_t)r0 * ldy + NX_MM_PACK_ROWS * g1, ldy); \
                r0 += nr; \
            } \
        } \
    }

/* ===== Q8_0 x16 =====
 * Per block: the 8 code vectors (flipped to unsigned: w + 128) are loaded once and serve
 * every activation row; per activation row, 8 vpdpbusd with its broadcast 4-byte groups (two
 * chains, for latency) start from cs = -128 * sum(codes), which cancels the flip exactly.
 * Then one convert, one scale product and one fma for 16 weight rows. */
/* The rows of one 32-value block of one stream (W: the unsigned codes), each row's sums from
 * cs / DIV (the offset of the codes, exact); then Q8_0 x16's float step. */
AI void b32_rows(const int NR, const int DIV, const __m512i *W, __m512 dw, const nx_mm_act *a, int64_t b, __m512 *acc) {
    const __m512i zero = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const uint8_t *q = a->q + r * a->q_stride + 32 * b;
        __m512i I0 = _mm512_set1_epi32(a->cs[r * a->cs_stride + b] / DIV), I1 = zero;
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
            I0 = _mm512_dpbusd_epi32(I0, W[k], _mm512_set1_epi32((int)ld32(q + 4 * k)));
            I1 = _mm512_dpbusd_epi32(I1, W[k + 1], _mm512_set1_epi32((int)ld32(q + 4 * k + 4)));
        }
        const __m512 S = _mm512_mul_ps(dw, _mm512_set1_ps(a->d[r * a->d_stride + b]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0, I1)), S, acc[r]);
    }
}
AI void q8_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m512 *acc) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    prefetch_rows(NR, bp, NX_MM_Q8X16_BLOCK);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp));
    __m512i W[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) W[k] = _mm512_xor_si512(_mm512_loadu_si512(bp + 32 + 64 * k), flip);
    b32_rows(NR, 1, W, dw, a, b, acc);
}
/* The rows of one 32-value block of both streams (W0, W1: the unsigned codes): each row's sums
 * from cs / DIV (the offset of the codes, exact), each broadcast activation serving both
 * streams; then Q8_0 x16's float step. */
AI void b32_rows2(const int NR, const int DIV, const __m512i *W0, const __m512i *W1, __m512 dw0, __m512 dw1,
                  const nx_mm_act *a, int64_t b, __m512 *acc0, __m512 *acc1) {
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const uint8_t *q = a->q + r * a->q_stride + 32 * b;
        __m512i I0 = _mm512_set1_epi32(a->cs[r * a->cs_stride + b] / DIV), I1 = I0, J0 = _mm512_setzero_si512(), J1 = J0;
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
            const __m512i x = _mm512_set1_epi32((int)ld32(q + 4 * k)), z = _mm512_set1_epi32((int)ld32(q + 4 * k + 4));
            I0 = _mm512_dpbusd_epi32(I0, W0[k], x);
            I1 = _mm512_dpbusd_epi32(I1, W1[k], x);
            J0 = _mm512_dpbusd_epi32(J0, W0[k + 1], z);
            J1 = _mm512_dpbusd_epi32(J1, W1[k + 1], z);
        }
        const __m512 dx = _mm512_set1_ps(a->d[r * a->d_stride + b]);
        acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0, J0)), _mm512_mul_ps(dw0, dx), acc0[r]);
        acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I1, J1)), _mm512_mul_ps(dw1, dx), acc1[r]);
    }
}
/* Both streams of a pass at once: each broadcast activation serves the two groups' weight
 * vectors (half the loads of two q8_step calls); the same arithmetic per stream (the integer
 * sum from cs is exact, so how its chains split does not change it). */
AI void q8_step2(const int NR, const uint8_t *bp0, const uint8_t *bp1, const nx_mm_act *a, int64_t b, __m512 *acc0, __m512 *acc1) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    prefetch_rows(NR, bp0, NX_MM_Q8X16_BLOCK);
    prefetch_rows(NR, bp1, NX_MM_Q8X16_BLOCK);
    const __m512 dw0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp0));
    const __m512 dw1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp1));
    __m512i W0[8], W1[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        W0[k] = _mm512_xor_si512(_mm512_loadu_si512(bp0 + 32 + 64 * k), flip);
        W1[k] = _mm512_xor_si512(_mm512_loadu_si512(bp1 + 32 + 64 * k), flip);
    }
    b32_rows2(NR, 1, W0, W1, dw0, dw1, a, b, acc0, acc1);
}
NX_MM_PK_DECL(nx_mm_pk_q8_0_avx512_plain)
PK_KERNELS(nx_mm_pk_q8_0_avx512_plain, q8_step, q8_step2, NX_MM_Q8X16_BLOCK)

/* Prefill: one group of 16 weight rows against one tile of 8 activation rows in the
 * interleaved copy (matmul_impl.h: qi, ci), every accumulator in a register and every
 * activation operand an embedded broadcast off one pointer. q8_step's arithmetic exactly:
 * the integer sum from cs (exact, so one chain or two is the same value), then
 * fma(cvt(I), d_w * d_x, acc). */
#define Q8T_ROW(r) do { \
        __m512i I = _mm512_set1_epi32(cs[r]), J = _mm512_setzero_si512(); \
        I = _mm512_dpbusd_epi32(I, W0, _mm512_set1_epi32((int)ld32(q + 32 * (r) + 0))); \
        J = _mm512_dpbusd_epi32(J, W1, _mm512_set1_epi32((int)ld32(q + 32 * (r) + 4))); \
        I = _mm512_dpbusd_epi32(I, W2, _mm512_set1_epi32((int)ld32(q + 32 * (r) + 8))); \
        J = _mm512_dpbusd_epi32(J, W3, _mm512_set1_epi32((int)ld32(q + 32 * (r) + 12))); \
        I = _mm512_dpbusd_epi32(I, W4, _mm512_set1_epi32((int)ld32(q + 32 * (r) + 16))); \
        J = _mm512_dpbusd_epi32(J, W5, _mm512_set1_epi32((int)ld32(q + 32 * (r) + 20))); \
        I = _mm512_dpbusd_epi32(I, W6, _mm512_set1_epi32((int)ld32(q + 32 * (r) + 24))); \
        J = _mm512_dpbusd_epi32(J, W7, _mm512_set1_epi32((int)ld32(q + 32 * (r) + 28))); \
        acc##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I, J)), _mm512_mul_ps(dw, _mm512_set1_ps(d[r])), acc##r); \
    } while (0)
/* A tile's 8 rows of 16 outputs (acc0..acc7) to y, ldy apart. */
#define TILE8_STORE() do { \
        _mm512_storeu_ps(y, acc0); _mm512_storeu_ps(y + ldy, acc1); \
        _mm512_storeu_ps(y + 2 * ldy, acc2); _mm512_storeu_ps(y + 3 * ldy, acc3); \
        _mm512_storeu_ps(y + 4 * ldy, acc4); _mm512_storeu_ps(y + 5 * ldy, acc5); \
        _mm512_storeu_ps(y + 6 * ldy, acc6); _mm512_storeu_ps(y + 7 * ldy, acc7); \
    } while (0)

static void q8_tile8(int64_t nb, const uint8_t *g, const uint8_t *qi, const uint8_t *ci, float *y, int64_t ldy) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0, acc6 = acc0, acc7 = acc0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *bp = g + (size_t)b * NX_MM_Q8X16_BLOCK, *q = qi + 256 * b;
        const int32_t *cs = (const int32_t *)(ci + 64 * b);
        const float *d = (const float *)(ci + 64 * b + 32);
        prefetch_blk(bp, NX_MM_Q8X16_BLOCK);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp));
        const __m512i W0 = _mm512_xor_si512(_mm512_loadu_si512(bp + 32), flip);
        const __m512i W1 = _mm512_xor_si512(_mm512_loadu_si512(bp + 96), flip);
        const __m512i W2 = _mm512_xor_si512(_mm512_loadu_si512(bp + 160), flip);
        const __m512i W3 = _mm512_xor_si512(_mm512_loadu_si512(bp + 224), flip);
        const __m512i W4 = _mm512_xor_si512(_mm512_loadu_si512(bp + 288), flip);
        const __m512i W5 = _mm512_xor_si512(_mm512_loadu_si512(bp + 352), flip);
        const __m512i W6 = _mm512_xor_si512(_mm512_loadu_si512(bp + 416), flip);
        const __m512i W7 = _mm512_xor_si512(_mm512_loadu_si512(bp + 480), flip);
        Q8T_ROW(0); Q8T_ROW(1); Q8T_ROW(2); Q8T_ROW(3);
        Q8T_ROW(4); Q8T_ROW(5); Q8T_ROW(6); Q8T_ROW(7);
    }
    TILE8_STORE();
}

/* ===== Q4_0 / IQ4_NL x16 =====
 * Q8_0's kernels with the stored codes (nibbles, two vectors per 64-byte load) in place of the
 * flipped ones. Q4_0 (NL = 0): the codes u = q + 8 as they are, each row's sum from cs / 16 =
 * -8 * (sum of its codes); IQ4_NL (NL = 1): one vpshufb gives the values + 128, the sum from
 * cs = -128 * (sum of its codes). Either way the offset comes out exactly. */
AI __m512i iq4_lut(void) {
    static const uint8_t u[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)u));   /* nx_mm_iq4_table + 128 */
}
AI void q4_codes(const int NL, const uint8_t *bp, __m512i *W) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), lut = iq4_lut();
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; kk++) {
        const __m512i v = _mm512_loadu_si512(bp + 32 + 64 * kk);
        W[2 * kk] = _mm512_and_si512(v, m4);
        W[2 * kk + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (NL) {
            W[2 * kk] = _mm512_shuffle_epi8(lut, W[2 * kk]);
            W[2 * kk + 1] = _mm512_shuffle_epi8(lut, W[2 * kk + 1]);
        }
    }
}
AI int32_t q4_cs(const int NL, int32_t cs) { return NL ? cs : cs / 16; }
AI void q4x_step(const int NL, const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m512 *acc) {
    prefetch_rows(NR, bp, NX_MM_Q40X16_BLOCK);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp));
    __m512i W[8];
    q4_codes(NL, bp, W);
    b32_rows(NR, NL ? 1 : 16, W, dw, a, b, acc);
}
AI void q4x_step2(const int NL, const int NR, const uint8_t *bp0, const uint8_t *bp1, const nx_mm_act *a, int64_t b,
                  __m512 *acc0, __m512 *acc1) {
    prefetch_rows(NR, bp0, NX_MM_Q40X16_BLOCK);
    prefetch_rows(NR, bp1, NX_MM_Q40X16_BLOCK);
    const __m512 dw0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp0));
    const __m512 dw1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp1));
    __m512i W0[8], W1[8];
    q4_codes(NL, bp0, W0);
    q4_codes(NL, bp1, W1);
    b32_rows2(NR, NL ? 1 : 16, W0, W1, dw0, dw1, a, b, acc0, acc1);
}
AI void q4_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m512 *acc) { q4x_step(0, NR, bp, a, b, acc); }
AI void nl_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m512 *acc) { q4x_step(1, NR, bp, a, b, acc); }
AI void q4_step2(const int NR, const uint8_t *b0, const uint8_t *b1, const nx_mm_act *a, int64_t b, __m512 *acc0, __m512 *acc1) {
    q4x_step2(0, NR, b0, b1, a, b, acc0, acc1);
}
AI void nl_step2(const int NR, const uint8_t *b0, const uint8_t *b1, const nx_mm_act *a, int64_t b, __m512 *acc0, __m512 *acc1) {
    q4x_step2(1, NR, b0, b1, a, b, acc0, acc1);
}
NX_MM_PK_DECL(nx_mm_pk_q4_0_avx512_plain)
NX_MM_PK_DECL(nx_mm_pk_iq4_nl_avx512_plain)
PK_KERNELS(nx_mm_pk_q4_0_avx512_plain, q4_step, q4_step2, NX_MM_Q40X16_BLOCK)
PK_KERNELS(nx_mm_pk_iq4_nl_avx512_plain, nl_step, nl_step2, NX_MM_Q40X16_BLOCK)

/* Prefill, as q8_tile8 (the same rows, from q4_cs). */
AI void q4x_tile8(const int NL, int64_t nb, const uint8_t *g, const uint8_t *qi, const uint8_t *ci, float *y, int64_t ldy) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0, acc6 = acc0, acc7 = acc0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *bp = g + (size_t)b * NX_MM_Q40X16_BLOCK, *q = qi + 256 * b;
        const int32_t *cs0 = (const int32_t *)(ci + 64 * b);
        const float *d = (const float *)(ci + 64 * b + 32);
        int32_t cs[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) cs[r] = q4_cs(NL, cs0[r]);
        prefetch_blk(bp, NX_MM_Q40X16_BLOCK);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp));
        __m512i W[8];
        q4_codes(NL, bp, W);
        const __m512i W0 = W[0], W1 = W[1], W2 = W[2], W3 = W[3], W4 = W[4], W5 = W[5], W6 = W[6], W7 = W[7];
        Q8T_ROW(0); Q8T_ROW(1); Q8T_ROW(2); Q8T_ROW(3);
        Q8T_ROW(4); Q8T_ROW(5); Q8T_ROW(6); Q8T_ROW(7);
    }
    TILE8_STORE();
}
static void q4_tile8(int64_t nb, const uint8_t *g, const uint8_t *qi, const uint8_t *ci, float *y, int64_t ldy) {
    q4x_tile8(0, nb, g, qi, ci, y, ldy);
}
static void nl_tile8(int64_t nb, const uint8_t *g, const uint8_t *qi, const uint8_t *ci, float *y, int64_t ldy) {
    q4x_tile8(1, nb, g, qi, ci, y, ldy);
}

/* ===== Q4_K x16 =====
 * Per super-block, shared by the activation rows: the 8 scale vectors d*sc_j and the mins as
 * int16 pairs (m_j, m_j), kept in a small stack buffer; per sub-block the 4 code vectors give
 * 8 nibble vectors (and, shift-and). Per activation row: the mins term from 8 vpdpwssd with
 * its broadcast group-sum pairs, then per sub-block 8 vpdpbusd (unsigned codes x signed
 * activation bytes, two chains), one convert and one fma; one fma by d_x per super-block. */
AI void k4_step(const int Q5, const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m512 *acc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10), zero = _mm512_setzero_si512();
    __m512 t[8], DS[8];
    __m512i MD[8];
    prefetch_rows(NR, bp, 320);   /* the rest per sub-block: a burst of 37 prefetches stalls on the fill buffers */
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp));
    const __m512 ndm = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(bp + 32)))), _mm512_set1_epi32((int)0x80000000u)));
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        DS[j] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(bp + 64 + 16 * j)))));
        const __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(bp + 192 + 16 * j)));
        MD[j] = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const int16_t *bs = a->bs + r * a->bs_stride + 16 * sb;
        __m512i mn = zero;
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) mn = _mm512_dpwssd_epi32(mn, MD[j], _mm512_set1_epi32((int)ld32(bs + 2 * j)));
        t[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(mn), ndm);
    }
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
        const uint8_t *cp = bp + 320 + (Q5 ? 320 : 256) * j;
        prefetch_rows(NR, cp, Q5 ? 320 : 256);
        __m512i W[8];
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; kk++) {
            const __m512i v = _mm512_loadu_si512(cp + 64 * kk);
            W[2 * kk] = _mm512_and_si512(v, m4);
            W[2 * kk + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        if (Q5) {   /* fifth bits: bit k of each byte to bit 4 of W[k] (a | (b & c): 0xF8) */
            const __m512i hb = _mm512_loadu_si512(cp + 256);
            W[0] = _mm512_ternarylogic_epi32(W[0], _mm512_slli_epi16(hb, 4), m10, 0xF8);
            W[1] = _mm512_ternarylogic_epi32(W[1], _mm512_slli_epi16(hb, 3), m10, 0xF8);
            W[2] = _mm512_ternarylogic_epi32(W[2], _mm512_slli_epi16(hb, 2), m10, 0xF8);
            W[3] = _mm512_ternarylogic_epi32(W[3], _mm512_slli_epi16(hb, 1), m10, 0xF8);
            W[4] = _mm512_ternarylogic_epi32(W[4], hb, m10, 0xF8);
            W[5] = _mm512_ternarylogic_epi32(W[5], _mm512_srli_epi16(hb, 1), m10, 0xF8);
            W[6] = _mm512_ternarylogic_epi32(W[6], _mm512_srli_epi16(hb, 2), m10, 0xF8);
            W[7] = _mm512_ternarylogic_epi32(W[7], _mm512_srli_epi16(hb, 3), m10, 0xF8);
        }
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const uint8_t *q = a->q + r * a->q_stride + 256 * sb + 32 * j;
            __m512i I0 = zero, I1 = zero;
#pragma GCC unroll 4
            for (int k = 0; k < 8; k += 2) {
                I0 = _mm512_dpbusd_epi32(I0, W[k], _mm512_set1_epi32((int)ld32(q + 4 * k)));
                I1 = _mm512_dpbusd_epi32(I1, W[k + 1], _mm512_set1_epi32((int)ld32(q + 4 * k + 4)));
            }
            t[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0, I1)), DS[j], t[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) acc[r] = _mm512_fmadd_ps(t[r], _mm512_set1_ps(a->d[r * a->d_stride + sb]), acc[r]);
}

AI void q4k_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m512 *acc) { k4_step(0, NR, bp, a, sb, acc); }
AI void q5k_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m512 *acc) { k4_step(1, NR, bp, a, sb, acc); }
NX_MM_PK_DECL(nx_mm_pk_q4_K_avx512_plain)
NX_MM_PK_DECL(nx_mm_pk_q5_K_avx512_plain)
/* The super-block header of one stream: d*sc_j per sub-block, the mins as (m_j, m_j) pairs,
 * -dmin (k4_step's values). */
AI void k4_head(const uint8_t *bp, __m512 *DS, __m512i *MD, __m512 *ndm) {
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp));
    *ndm = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(bp + 32)))), _mm512_set1_epi32((int)0x80000000u)));
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        DS[j] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(bp + 64 + 16 * j)))));
        const __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(bp + 192 + 16 * j)));
        MD[j] = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
    }
}

/* Sub-block j's 8 code vectors of one stream (k4_step's unpack). */
AI void k4_codes(const int Q5, const uint8_t *cp, __m512i *W) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; kk++) {
        const __m512i v = _mm512_loadu_si512(cp + 64 * kk);
        W[2 * kk] = _mm512_and_si512(v, m4);
        W[2 * kk + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    if (Q5) {
        const __m512i hb = _mm512_loadu_si512(cp + 256);
        W[0] = _mm512_ternarylogic_epi32(W[0], _mm512_slli_epi16(hb, 4), m10, 0xF8);
        W[1] = _mm512_ternarylogic_epi32(W[1], _mm512_slli_epi16(hb, 3), m10, 0xF8);
        W[2] = _mm512_ternarylogic_epi32(W[2], _mm512_slli_epi16(hb, 2), m10, 0xF8);
        W[3] = _mm512_ternarylogic_epi32(W[3], _mm512_slli_epi16(hb, 1), m10, 0xF8);
        W[4] = _mm512_ternarylogic_epi32(W[4], hb, m10, 0xF8);
        W[5] = _mm512_ternarylogic_epi32(W[5], _mm512_srli_epi16(hb, 1), m10, 0xF8);
        W[6] = _mm512_ternarylogic_epi32(W[6], _mm512_srli_epi16(hb, 2), m10, 0xF8);
        W[7] = _mm512_ternarylogic_epi32(W[7], _mm512_srli_epi16(hb, 3), m10, 0xF8);
    }
}

/* The K-quant steps' shared ends, both streams at once: each row's exact int16-pair sum of the
 * 8 (scale or min) pairs of a super-block against its group sums, times the block's factor
 * (t = cvt(C) * f, the start of the contract's t); and acc = fma(t, d_x, acc) at the end. */
AI void pair_sums2(const int NR, const nx_mm_act *a, int64_t sb, const __m512i *M0, const __m512i *M1, __m512 f0,
                   __m512 f1, __m512 *t0, __m512 *t1) {
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const int16_t *bs = a->bs + r * a->bs_stride + 16 * sb;
        __m512i c0 = _mm512_setzero_si512(), c1 = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            const __m512i x = _mm512_set1_epi32((int)ld32(bs + 2 * p));
            c0 = _mm512_dpwssd_epi32(c0, M0[p], x);
            c1 = _mm512_dpwssd_epi32(c1, M1[p], x);
        }
        t0[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(c0), f0);
        t1[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(c1), f1);
    }
}
AI void scale_rows2(const int NR, const nx_mm_act *a, int64_t sb, const __m512 *t0, const __m512 *t1, __m512 *acc0,
                    __m512 *acc1) {
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const __m512 dx = _mm512_set1_ps(a->d[r * a->d_stride + sb]);
        acc0[r] = _mm512_fmadd_ps(t0[r], dx, acc0[r]);
        acc1[r] = _mm512_fmadd_ps(t1[r], dx, acc1[r]);
    }
}

/* -128 * (row r's code sum over sub-block j): the offset of the values + 128, exact */
AI __m512i iq4xs_start(const nx_mm_act *a, int r, int64_t sb, int j) {
    const int16_t *bs = a->bs + r * a->bs_stride + 16 * sb + 2 * j;
    return _mm512_set1_epi32(-128 * ((int32_t)bs[0] + bs[1]));
}
/* Sub-block j of both streams for NR rows (W0, W1: their 8 code vectors, values 4k..4k+3 in
 * W[k]): each broadcast activation serves both; the exact sums, from 0 or (OFS: IQ4_XS's values
 * + 128) from iq4xs_start, then t = fma(cvt(I), DS, t). */
AI void sub_rows2(const int NR, const int OFS, const __m512i *W0, const __m512i *W1, const nx_mm_act *a, int64_t sb,
                  int j, __m512 DS0, __m512 DS1, __m512 *t0, __m512 *t1) {
    const __m512i zero = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const uint8_t *q = a->q + r * a->q_stride + 256 * sb + 32 * j;
        const __m512i c = OFS ? iq4xs_start(a, r, sb, j) : zero;
        __m512i I0 = c, I1 = c, J0 = zero, J1 = zero;
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
            const __m512i x = _mm512_set1_epi32((int)ld32(q + 4 * k)), z = _mm512_set1_epi32((int)ld32(q + 4 * k + 4));
            I0 = _mm512_dpbusd_epi32(I0, W0[k], x);
            I1 = _mm512_dpbusd_epi32(I1, W1[k], x);
            J0 = _mm512_dpbusd_epi32(J0, W0[k + 1], z);
            J1 = _mm512_dpbusd_epi32(J1, W1[k + 1], z);
        }
        t0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0, J0)), DS0, t0[r]);
        t1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I1, J1)), DS1, t1[r]);
    }
}

/* Both streams at once, as q8_step2: each broadcast activation (and group-sum pair) serves
 * the two groups; per stream k4_step's arithmetic exactly. */
AI void k4_step2(const int Q5, const int NR, const uint8_t *bp0, const uint8_t *bp1, const nx_mm_act *a, int64_t sb,
                 __m512 *acc0, __m512 *acc1) {
    __m512 t0[8], t1[8], DS0[8], DS1[8], ndm0, ndm1;
    __m512i MD0[8], MD1[8];
    prefetch_rows(NR, bp0, 320);
    prefetch_rows(NR, bp1, 320);
    k4_head(bp0, DS0, MD0, &ndm0);
    k4_head(bp1, DS1, MD1, &ndm1);
    pair_sums2(NR, a, sb, MD0, MD1, ndm0, ndm1, t0, t1);
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
        const size_t off = 320 + (size_t)(Q5 ? 320 : 256) * j;
        prefetch_rows(NR, bp0 + off, Q5 ? 320 : 256);
        prefetch_rows(NR, bp1 + off, Q5 ? 320 : 256);
        __m512i W0[8], W1[8];
        k4_codes(Q5, bp0 + off, W0);
        k4_codes(Q5, bp1 + off, W1);
        sub_rows2(NR, 0, W0, W1, a, sb, j, DS0[j], DS1[j], t0, t1);
    }
    scale_rows2(NR, a, sb, t0, t1, acc0, acc1);
}
AI void q4k_step2(const int NR, const uint8_t *b0, const uint8_t *b1, const nx_mm_act *a, int64_t sb, __m512 *acc0, __m512 *acc1) { k4_step2(0, NR, b0, b1, a, sb, acc0, acc1); }
AI void q5k_step2(const int NR, const uint8_t *b0, const uint8_t *b1, const nx_mm_act *a, int64_t sb, __m512 *acc0, __m512 *acc1) { k4_step2(1, NR, b0, b1, a, sb, acc0, acc1); }
PK_KERNELS(nx_mm_pk_q4_K_avx512_plain, q4k_step, q4k_step2, NX_MM_Q4KX16_BLOCK)
PK_KERNELS(nx_mm_pk_q5_K_avx512_plain, q5k_step, q5k_step2, NX_MM_Q5KX16_BLOCK)

/* ===== IQ4_XS x16 =====
 * Per super-block: d*sc_j per sub-block (exact), shared by the rows. Per sub-block the 4 code
 * vectors give 8 nibble vectors, and one vpshufb each turns them into the values + 128
 * (unsigned); per row, 8 vpdpbusd from -128 * (the sub-block's activation code sum), which
 * leaves the exact signed dot product, then one convert and one fma; one fma by d_x per
 * super-block. */
AI void iq4xs_head(const uint8_t *bp, __m512 *DS) {
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp));
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        DS[j] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(bp + 32 + 16 * j)))));
}
AI void iq4xs_codes(const uint8_t *cp, __m512i lut, __m512i *W) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; kk++) {
        const __m512i v = _mm512_loadu_si512(cp + 64 * kk);
        W[2 * kk] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
        W[2 * kk + 1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    }
}
AI void iq4xs_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m512 *acc) {
    const __m512i lut = iq4_lut(), zero = _mm512_setzero_si512();
    __m512 t[8], DS[8];
    prefetch_rows(NR, bp, 192);
    iq4xs_head(bp, DS);
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) t[r] = _mm512_setzero_ps();
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
        const uint8_t *cp = bp + 192 + 256 * j;
        prefetch_rows(NR, cp, 256);
        __m512i W[8];
        iq4xs_codes(cp, lut, W);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const uint8_t *q = a->q + r * a->q_stride + 256 * sb + 32 * j;
            __m512i I0 = iq4xs_start(a, r, sb, j), I1 = zero;
#pragma GCC unroll 4
            for (int k = 0; k < 8; k += 2) {
                I0 = _mm512_dpbusd_epi32(I0, W[k], _mm512_set1_epi32((int)ld32(q + 4 * k)));
                I1 = _mm512_dpbusd_epi32(I1, W[k + 1], _mm512_set1_epi32((int)ld32(q + 4 * k + 4)));
            }
            t[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0, I1)), DS[j], t[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) acc[r] = _mm512_fmadd_ps(t[r], _mm512_set1_ps(a->d[r * a->d_stride + sb]), acc[r]);
}
/* Both streams at once: each broadcast activation serves the two groups. */
AI void iq4xs_step2(const int NR, const uint8_t *bp0, const uint8_t *bp1, const nx_mm_act *a, int64_t sb, __m512 *acc0,
                    __m512 *acc1) {
    const __m512i lut = iq4_lut();
    __m512 t0[8], t1[8], DS0[8], DS1[8];
    prefetch_rows(NR, bp0, 192);
    prefetch_rows(NR, bp1, 192);
    iq4xs_head(bp0, DS0);
    iq4xs_head(bp1, DS1);
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) t0[r] = t1[r] = _mm512_setzero_ps();
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
        const size_t off = 192 + (size_t)256 * j;
        prefetch_rows(NR, bp0 + off, 256);
        prefetch_rows(NR, bp1 + off, 256);
        __m512i W0[8], W1[8];
        iq4xs_codes(bp0 + off, lut, W0);
        iq4xs_codes(bp1 + off, lut, W1);
        sub_rows2(NR, 1, W0, W1, a, sb, j, DS0[j], DS1[j], t0, t1);
    }
    scale_rows2(NR, a, sb, t0, t1, acc0, acc1);
}
PK_KERNELS(nx_mm_pk_iq4_xs_avx512, iq4xs_step, iq4xs_step2, NX_MM_IQ4XSX16_BLOCK)

/* ===== F32 / F16 / BF16 x16 =====
 * Per input k: the 16 rows' weights in one vector (converted exactly), one broadcast of each
 * activation row's x_k and one fma: the contract's chain, the rows in lanes. */
AI __m512 fw16(const int T, const uint8_t *p) {
    if (T == NX_TYPE_F32) return _mm512_loadu_ps((const float *)p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (T == NX_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
AI void fl_step(const int T, const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m512 *acc) {
    const int es = T == NX_TYPE_F32 ? 64 : 32;
    prefetch_rows(NR, bp, (size_t)32 * es);
#pragma GCC unroll 4
    for (int k = 0; k < 32; k++) {
        const __m512 w = fw16(T, bp + k * es);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) acc[r] = _mm512_fmadd_ps(w, _mm512_set1_ps(a->x[r * a->ldx + 32 * b + k]), acc[r]);
    }
}
AI void fl_step2(const int T, const int NR, const uint8_t *bp0, const uint8_t *bp1, const nx_mm_act *a, int64_t b,
                 __m512 *acc0, __m512 *acc1) {
    const int es = T == NX_TYPE_F32 ? 64 : 32;
    prefetch_rows(NR, bp0, (size_t)32 * es);
    prefetch_rows(NR, bp1, (size_t)32 * es);
#pragma GCC unroll 4
    for (int k = 0; k < 32; k++) {
        const __m512 w0 = fw16(T, bp0 + k * es), w1 = fw16(T, bp1 + k * es);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const __m512 x = _mm512_set1_ps(a->x[r * a->ldx + 32 * b + k]);
            acc0[r] = _mm512_fmadd_ps(w0, x, acc0[r]);
            acc1[r] = _mm512_fmadd_ps(w1, x, acc1[r]);
        }
    }
}
#define FL_STEPS(tn, T) \
    AI void tn##_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m512 *acc) { fl_step(T, NR, bp, a, b, acc); } \
    AI void tn##_step2(const int NR, const uint8_t *b0, const uint8_t *b1, const nx_mm_act *a, int64_t b, __m512 *acc0, __m512 *acc1) { \
        fl_step2(T, NR, b0, b1, a, b, acc0, acc1); \
    }
FL_STEPS(f32, NX_TYPE_F32)
FL_STEPS(f16, NX_TYPE_F16)
FL_STEPS(bf16, NX_TYPE_BF16)
PK_KERNELS(nx_mm_pk_f32_avx512, f32_step, f32_step2, NX_MM_F32X16_BLOCK)
PK_KERNELS(nx_mm_pk_f16_avx512, f16_step, f16_step2, NX_MM_F16X16_BLOCK)
PK_KERNELS(nx_mm_pk_bf16_avx512, bf16_step, bf16_step2, NX_MM_F16X16_BLOCK)

/* BF16 x16 through VDPBF16PS (matmul_impl.h: its contract). Per block, each activation row's
 * 32 inputs rounded to bf16 pairs once (a 64-byte stack row: one convert, one store) and
 * broadcast from there; per input pair p the two stored 32-byte rows (inputs 2p, 2p + 1)
 * interleaved by one vpermw into each weight row's (w_2p, w_2p+1) dword, shared by the rows and
 * the passes' activation rows. Twice the products of an f32 fma per instruction: a 16-row
 * prefill call ran 2.2x faster in the kernel alone (Zen 4). */
#pragma GCC push_options
#pragma GCC target("avx512bf16")
AI void bfd_x(const int NR, const nx_mm_act *a, int64_t b, uint32_t (*xs)[16]) {
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const float *x = a->x + r * a->ldx + 32 * b;
        _mm512_storeu_si512(xs[r], (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x)));
    }
}
AI __m512i bfd_w(const uint8_t *bp, int p) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20,
                                         4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(bp + 64 * p));
}
AI void bfd_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m512 *acc) {
    uint32_t xs[8][16];
    prefetch_rows(NR, bp, 1024);
    bfd_x(NR, a, b, xs);
#pragma GCC unroll 4
    for (int p = 0; p < 16; p++) {
        const __m512bh w = (__m512bh)bfd_w(bp, p);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) acc[r] = _mm512_dpbf16_ps(acc[r], w, (__m512bh)_mm512_set1_epi32((int)xs[r][p]));
    }
}
AI void bfd_step2(const int NR, const uint8_t *bp0, const uint8_t *bp1, const nx_mm_act *a, int64_t b, __m512 *acc0,
                  __m512 *acc1) {
    uint32_t xs[8][16];
    prefetch_rows(NR, bp0, 1024);
    prefetch_rows(NR, bp1, 1024);
    bfd_x(NR, a, b, xs);
#pragma GCC unroll 4
    for (int p = 0; p < 16; p++) {
        const __m512bh w0 = (__m512bh)bfd_w(bp0, p), w1 = (__m512bh)bfd_w(bp1, p);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const __m512bh x = (__m512bh)_mm512_set1_epi32((int)xs[r][p]);
            acc0[r] = _mm512_dpbf16_ps(acc0[r], w0, x);
            acc1[r] = _mm512_dpbf16_ps(acc1[r], w1, x);
        }
    }
}
PK_KERNELS(nx_mm_pk_bf16_avx512bf16, bfd_step, bfd_step2, NX_MM_F16X16_BLOCK)
#pragma GCC pop_options

/* Prefill, as q8_tile8: one group against one tile of 8 rows of the interleaved copy, the 8
 * partial sums t in registers, the scale vectors on the stack. k4_step's arithmetic exactly
 * (integer sums exact; t = cvt(Mn) * -dmin, then per sub-block fma(cvt(I), d*sc_j, t), then
 * acc = fma(t, d_x, acc)). */
#define K4T_ROW(r) do { \
        const uint8_t *q = qs + 256 * (r); \
        __m512i I = _mm512_dpbusd_epi32(zero, W0, _mm512_set1_epi32((int)ld32(q + 0))); \
        __m512i J = _mm512_dpbusd_epi32(zero, W1, _mm512_set1_epi32((int)ld32(q + 4))); \
        I = _mm512_dpbusd_epi32(I, W2, _mm512_set1_epi32((int)ld32(q + 8))); \
        J = _mm512_dpbusd_epi32(J, W3, _mm512_set1_epi32((int)ld32(q + 12))); \
        I = _mm512_dpbusd_epi32(I, W4, _mm512_set1_epi32((int)ld32(q + 16))); \
        J = _mm512_dpbusd_epi32(J, W5, _mm512_set1_epi32((int)ld32(q + 20))); \
        I = _mm512_dpbusd_epi32(I, W6, _mm512_set1_epi32((int)ld32(q + 24))); \
        J = _mm512_dpbusd_epi32(J, W7, _mm512_set1_epi32((int)ld32(q + 28))); \
        t##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I, J)), DSj, t##r); \
    } while (0)
#define K4T_MIN(r) do { \
        const int16_t *bs = (const int16_t *)(c + 32 * (r)); \
        __m512i mn = _mm512_setzero_si512(); \
        for (int j = 0; j < 8; j++) mn = _mm512_dpwssd_epi32(mn, MD[j], _mm512_set1_epi32((int)ld32(bs + 2 * j))); \
        t##r = _mm512_mul_ps(_mm512_cvtepi32_ps(mn), ndm); \
    } while (0)
#define T8_ACC(r) acc[r] = _mm512_fmadd_ps(t##r, _mm512_set1_ps(dx[r]), acc[r])

AI void k4_tile8(const int Q5, int64_t nb, const uint8_t *g, const uint8_t *qi, const uint8_t *ci, float *y, int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10), zero = _mm512_setzero_si512();
    const size_t BLK = Q5 ? NX_MM_Q5KX16_BLOCK : NX_MM_Q4KX16_BLOCK;
    __m512 acc[8], DS[8];
    __m512i MD[8];
    for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nb; sb++) {
        const uint8_t *bp = g + (size_t)sb * BLK, *c = ci + (size_t)sb * NX_MM_ICI_B256;
        const float *dx = (const float *)(c + 256);
        prefetch_blk(bp, 320);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp));
        const __m512 ndm = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(bp + 32)))), _mm512_set1_epi32((int)0x80000000u)));
        for (int j = 0; j < 8; j++) {
            DS[j] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(bp + 64 + 16 * j)))));
            const __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(bp + 192 + 16 * j)));
            MD[j] = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
        }
        __m512 t0, t1, t2, t3, t4, t5, t6, t7;
        K4T_MIN(0); K4T_MIN(1); K4T_MIN(2); K4T_MIN(3); K4T_MIN(4); K4T_MIN(5); K4T_MIN(6); K4T_MIN(7);
#pragma GCC unroll 1
        for (int j = 0; j < 8; j++) {
            const uint8_t *cp = bp + 320 + (Q5 ? 320 : 256) * j, *qs = qi + 2048 * sb + 32 * j;
            prefetch_blk(cp, Q5 ? 320 : 256);
            const __m512i v0 = _mm512_loadu_si512(cp), v1 = _mm512_loadu_si512(cp + 64);
            const __m512i v2 = _mm512_loadu_si512(cp + 128), v3 = _mm512_loadu_si512(cp + 192);
            __m512i W0 = _mm512_and_si512(v0, m4), W1 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
            __m512i W2 = _mm512_and_si512(v1, m4), W3 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
            __m512i W4 = _mm512_and_si512(v2, m4), W5 = _mm512_and_si512(_mm512_srli_epi16(v2, 4), m4);
            __m512i W6 = _mm512_and_si512(v3, m4), W7 = _mm512_and_si512(_mm512_srli_epi16(v3, 4), m4);
            if (Q5) {   /* fifth bits as in k4_step */
                const __m512i hb = _mm512_loadu_si512(cp + 256);
                W0 = _mm512_ternarylogic_epi32(W0, _mm512_slli_epi16(hb, 4), m10, 0xF8);
                W1 = _mm512_ternarylogic_epi32(W1, _mm512_slli_epi16(hb, 3), m10, 0xF8);
                W2 = _mm512_ternarylogic_epi32(W2, _mm512_slli_epi16(hb, 2), m10, 0xF8);
                W3 = _mm512_ternarylogic_epi32(W3, _mm512_slli_epi16(hb, 1), m10, 0xF8);
                W4 = _mm512_ternarylogic_epi32(W4, hb, m10, 0xF8);
                W5 = _mm512_ternarylogic_epi32(W5, _mm512_srli_epi16(hb, 1), m10, 0xF8);
                W6 = _mm512_ternarylogic_epi32(W6, _mm512_srli_epi16(hb, 2), m10, 0xF8);
                W7 = _mm512_ternarylogic_epi32(W7, _mm512_srli_epi16(hb, 3), m10, 0xF8);
            }
            const __m512 DSj = DS[j];
            K4T_ROW(0); K4T_ROW(1); K4T_ROW(2); K4T_ROW(3); K4T_ROW(4); K4T_ROW(5); K4T_ROW(6); K4T_ROW(7);
        }
        T8_ACC(0); T8_ACC(1); T8_ACC(2); T8_ACC(3); T8_ACC(4); T8_ACC(5); T8_ACC(6); T8_ACC(7);
    }
    for (int r = 0; r < 8; r++) _mm512_storeu_ps(y + r * ldy, acc[r]);
}
static void q4k_tile8(int64_t nb, const uint8_t *g, const uint8_t *qi, const uint8_t *ci, float *y, int64_t ldy) { k4_tile8(0, nb, g, qi, ci, y, ldy); }
static void q5k_tile8(int64_t nb, const uint8_t *g, const uint8_t *qi, const uint8_t *ci, float *y, int64_t ldy) { k4_tile8(1, nb, g, qi, ci, y, ldy); }

/* Whole tiles of the interleaved copy through TILE8 (each group against every tile while it
 * is in L1), the remaining rows through the plain kernel. */
#define PK_TILED(fname, TILE8, BLOCK) \
    void fname(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y, int64_t ldy) { \
        const int nt = a->qi ? n_act / NX_MM_ITILE : 0; \
        const size_t gs = (size_t)nb * (BLOCK); \
        for (int64_t g = 0; g < n_groups && nt; g++) \
            for (int t = 0; t < nt; t++) \
                TILE8(nb, wp + (size_t)g * gs, a->qi + t * a->qi_stride, a->ci + t * a->ci_stride, \
                      y + (int64_t)t * NX_MM_ITILE * ldy + NX_MM_PACK_ROWS * g, ldy); \
        if (n_act > nt * NX_MM_ITILE) { \
            const nx_mm_act sub = nx_mm_act_rows(a, nt * NX_MM_ITILE); \
            fname##_plain(nb, wp, n_groups, &sub, n_act - nt * NX_MM_ITILE, y + (int64_t)nt * NX_MM_ITILE * ldy, ldy); \
        } \
    }
PK_TILED(nx_mm_pk_q8_0_avx512, q8_tile8, NX_MM_Q8X16_BLOCK)
PK_TILED(nx_mm_pk_q4_0_avx512, q4_tile8, NX_MM_Q40X16_BLOCK)
PK_TILED(nx_mm_pk_iq4_nl_avx512, nl_tile8, NX_MM_Q40X16_BLOCK)
PK_TILED(nx_mm_pk_q4_K_avx512, q4k_tile8, NX_MM_Q4KX16_BLOCK)
PK_TILED(nx_mm_pk_q5_K_avx512, q5k_tile8, NX_MM_Q5KX16_BLOCK)

/* ===== Q6_K x16 =====
 * Per super-block, shared by the activation rows: the scale pairs (one sign-extending load
 * per pair of groups gives the int16 pairs for the vpdpwssd of the -32 correction), the 16
 * vectors d*sc_g (stack), and per group the 4 code vectors (low nibble | high bit pair, one
 * vpternlogd each). Per activation row: 8 vpdpwssd for C, then per group 4 vpdpbusd (codes
 * 0..63 unsigned x signed activation bytes), one convert and one fma. */
AI void q6k_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m512 *acc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), zero = _mm512_setzero_si512();
    __m512 t[8], DS[16];
    __m512i P[8];
    prefetch_rows(NR, bp, 320);   /* the codes per group */
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(bp)));
    const __m512 n32d = _mm512_mul_ps(dw, _mm512_set1_ps(-32.0f));   /* exact */
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        P[p] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(bp + 32 + 32 * p)));
        DS[2 * p] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(P[p], 16), 16)));
        DS[2 * p + 1] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_srai_epi32(P[p], 16)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const int16_t *bs = a->bs + r * a->bs_stride + 16 * sb;
        __m512i c = zero;
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) c = _mm512_dpwssd_epi32(c, P[p], _mm512_set1_epi32((int)ld32(bs + 2 * p)));
        t[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(c), n32d);
    }
#pragma GCC unroll 1
    for (int g = 0; g < 16; g++) {
        const uint8_t *gp = bp + 320 + 192 * g;
        prefetch_rows(NR, gp, 192);
        const __m512i L0 = _mm512_loadu_si512(gp), L1 = _mm512_loadu_si512(gp + 64), H = _mm512_loadu_si512(gp + 128);
        /* a | (b & c): 0xF8 */
        const __m512i W0 = _mm512_ternarylogic_epi32(_mm512_and_si512(L0, m4), _mm512_slli_epi16(H, 4), m30, 0xF8);
        const __m512i W1 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4), _mm512_slli_epi16(H, 2), m30, 0xF8);
        const __m512i W2 = _mm512_ternarylogic_epi32(_mm512_and_si512(L1, m4), H, m30, 0xF8);
        const __m512i W3 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4), _mm512_srli_epi16(H, 2), m30, 0xF8);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const uint8_t *q = a->q + r * a->q_stride + 256 * sb + 16 * g;
            __m512i I0 = _mm512_dpbusd_epi32(zero, W0, _mm512_set1_epi32((int)ld32(q)));
            __m512i I1 = _mm512_dpbusd_epi32(zero, W1, _mm512_set1_epi32((int)ld32(q + 4)));
            I0 = _mm512_dpbusd_epi32(I0, W2, _mm512_set1_epi32((int)ld32(q + 8)));
            I1 = _mm512_dpbusd_epi32(I1, W3, _mm512_set1_epi32((int)ld32(q + 12)));
            t[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0, I1)), DS[g], t[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) acc[r] = _mm512_fmadd_ps(t[r], _mm512_set1_ps(a->d[r * a->d_stride + sb]), acc[r]);
}
NX_MM_PK_DECL(nx_mm_pk_q6_K_avx512_plain)
/* Q6_K's super-block header of one stream: the scale pairs and d*sc_g (q6k_step's values). */
AI void q6_head(const uint8_t *bp, __m512i *P, __m512 *DS, __m512 *n32d) {
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(bp)));
    *n32d = _mm512_mul_ps(dw, _mm512_set1_ps(-32.0f));   /* exact */
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        P[p] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(bp + 32 + 32 * p)));
        DS[2 * p] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(P[p], 16), 16)));
        DS[2 * p + 1] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_srai_epi32(P[p], 16)));
    }
}

/* Group g's 4 code vectors of one stream (q6k_step's unpack). */
AI void q6_codes(const uint8_t *gp, __m512i *W) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i L0 = _mm512_loadu_si512(gp), L1 = _mm512_loadu_si512(gp + 64), H = _mm512_loadu_si512(gp + 128);
    W[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(L0, m4), _mm512_slli_epi16(H, 4), m30, 0xF8);
    W[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4), _mm512_slli_epi16(H, 2), m30, 0xF8);
    W[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(L1, m4), H, m30, 0xF8);
    W[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4), _mm512_srli_epi16(H, 2), m30, 0xF8);
}

/* Both streams at once, as q8_step2; per stream q6k_step's arithmetic exactly. */
AI void q6k_step2(const int NR, const uint8_t *bp0, const uint8_t *bp1, const nx_mm_act *a, int64_t sb, __m512 *acc0, __m512 *acc1) {
    const __m512i zero = _mm512_setzero_si512();
    __m512 t0[8], t1[8], DS0[16], DS1[16], n32d0, n32d1;
    __m512i P0[8], P1[8];
    prefetch_rows(NR, bp0, 320);
    prefetch_rows(NR, bp1, 320);
    q6_head(bp0, P0, DS0, &n32d0);
    q6_head(bp1, P1, DS1, &n32d1);
    pair_sums2(NR, a, sb, P0, P1, n32d0, n32d1, t0, t1);
#pragma GCC unroll 1
    for (int g = 0; g < 16; g++) {
        const size_t off = 320 + 192 * (size_t)g;
        prefetch_rows(NR, bp0 + off, 192);
        prefetch_rows(NR, bp1 + off, 192);
        __m512i W0[4], W1[4];
        q6_codes(bp0 + off, W0);
        q6_codes(bp1 + off, W1);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const uint8_t *q = a->q + r * a->q_stride + 256 * sb + 16 * g;
            const __m512i x0 = _mm512_set1_epi32((int)ld32(q)), x1 = _mm512_set1_epi32((int)ld32(q + 4));
            const __m512i x2 = _mm512_set1_epi32((int)ld32(q + 8)), x3 = _mm512_set1_epi32((int)ld32(q + 12));
            __m512i I0 = _mm512_dpbusd_epi32(zero, W0[0], x0), J0 = _mm512_dpbusd_epi32(zero, W0[1], x1);
            __m512i I1 = _mm512_dpbusd_epi32(zero, W1[0], x0), J1 = _mm512_dpbusd_epi32(zero, W1[1], x1);
            I0 = _mm512_dpbusd_epi32(I0, W0[2], x2);
            J0 = _mm512_dpbusd_epi32(J0, W0[3], x3);
            I1 = _mm512_dpbusd_epi32(I1, W1[2], x2);
            J1 = _mm512_dpbusd_epi32(J1, W1[3], x3);
            t0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0, J0)), DS0[g], t0[r]);
            t1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I1, J1)), DS1[g], t1[r]);
        }
    }
    scale_rows2(NR, a, sb, t0, t1, acc0, acc1);
}
PK_KERNELS(nx_mm_pk_q6_K_avx512_plain, q6k_step, q6k_step2, NX_MM_Q6KX16_BLOCK)

/* Prefill, as k4_tile8, with q6k_step's arithmetic exactly. */
#define Q6T_ROW(r) do { \
        const uint8_t *q = qs + 256 * (r); \
        __m512i I = _mm512_dpbusd_epi32(zero, W0, _mm512_set1_epi32((int)ld32(q))); \
        __m512i J = _mm512_dpbusd_epi32(zero, W1, _mm512_set1_epi32((int)ld32(q + 4))); \
        I = _mm512_dpbusd_epi32(I, W2, _mm512_set1_epi32((int)ld32(q + 8))); \
        J = _mm512_dpbusd_epi32(J, W3, _mm512_set1_epi32((int)ld32(q + 12))); \
        t##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I, J)), DSg, t##r); \
    } while (0)
#define Q6T_C(r) do { \
        const int16_t *bs = (const int16_t *)(c + 32 * (r)); \
        __m512i cc = _mm512_setzero_si512(); \
        for (int p = 0; p < 8; p++) cc = _mm512_dpwssd_epi32(cc, P[p], _mm512_set1_epi32((int)ld32(bs + 2 * p))); \
        t##r = _mm512_mul_ps(_mm512_cvtepi32_ps(cc), n32d); \
    } while (0)

static void q6k_tile8(int64_t nb, const uint8_t *g, const uint8_t *qi, const uint8_t *ci, float *y, int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), zero = _mm512_setzero_si512();
    __m512 acc[8], DS[16];
    __m512i P[8];
    for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nb; sb++) {
        const uint8_t *bp = g + (size_t)sb * NX_MM_Q6KX16_BLOCK, *c = ci + (size_t)sb * NX_MM_ICI_B256;
        const float *dx = (const float *)(c + 256);
        prefetch_blk(bp, 320);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(bp)));
        const __m512 n32d = _mm512_mul_ps(dw, _mm512_set1_ps(-32.0f));
        for (int p = 0; p < 8; p++) {
            P[p] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(bp + 32 + 32 * p)));
            DS[2 * p] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(P[p], 16), 16)));
            DS[2 * p + 1] = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_srai_epi32(P[p], 16)));
        }
        __m512 t0, t1, t2, t3, t4, t5, t6, t7;
        Q6T_C(0); Q6T_C(1); Q6T_C(2); Q6T_C(3); Q6T_C(4); Q6T_C(5); Q6T_C(6); Q6T_C(7);
#pragma GCC unroll 1
        for (int gg = 0; gg < 16; gg++) {
            const uint8_t *gp = bp + 320 + 192 * gg, *qs = qi + 2048 * sb + 16 * gg;
            prefetch_blk(gp, 192);
            const __m512i L0 = _mm512_loadu_si512(gp), L1 = _mm512_loadu_si512(gp + 64), H = _mm512_loadu_si512(gp + 128);
            const __m512i W0 = _mm512_ternarylogic_epi32(_mm512_and_si512(L0, m4), _mm512_slli_epi16(H, 4), m30, 0xF8);
            const __m512i W1 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4), _mm512_slli_epi16(H, 2), m30, 0xF8);
            const __m512i W2 = _mm512_ternarylogic_epi32(_mm512_and_si512(L1, m4), H, m30, 0xF8);
            const __m512i W3 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4), _mm512_srli_epi16(H, 2), m30, 0xF8);
            const __m512 DSg = DS[gg];
            Q6T_ROW(0); Q6T_ROW(1); Q6T_ROW(2); Q6T_ROW(3); Q6T_ROW(4); Q6T_ROW(5); Q6T_ROW(6); Q6T_ROW(7);
        }
        T8_ACC(0); T8_ACC(1); T8_ACC(2); T8_ACC(3); T8_ACC(4); T8_ACC(5); T8_ACC(6); T8_ACC(7);
    }
    for (int r = 0; r < 8; r++) _mm512_storeu_ps(y + r * ldy, acc[r]);
}
PK_TILED(nx_mm_pk_q6_K_avx512, q6k_tile8, NX_MM_Q6KX16_BLOCK)
