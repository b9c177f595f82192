/*
 * matmul_pack_avx2.c — AVX2 kernels for the packed layouts (matmul_impl.h, matmul_pack.c).
 * Each 64-byte group of 16 rows is taken as two halves of 8 rows (one ymm each); an
 * activation's 4 bytes, broadcast, meet 8 rows in one maddubs and each row's sum stays in its
 * int32 lane after madd: no horizontal sums, and the scale work serves 8 rows.
 *
 * AVX2 has no u8 x s8 -> int32 dot (no VNNI on the CPUs this tier is for): Q8_0 uses the
 * sign trick (|w| x sign(x, w), no saturation as |x| <= 127), with |w| computed once per block
 * into a stack buffer shared by the activation rows (tried instead: both sides widened to int16
 * for one vpmaddwd per 16 products, which frees the multiply pipes of vpsignb on Zen 4 and Intel:
 * 1.18x in a bare loop, but 0.97-1.07x as a kernel, per-block hadd and widening included, and
 * llvm-mca's Zen 3, where vpsignb runs beside the multiplies, predicts 0.84x). Q4_K's unsigned
 * 4-bit codes let 8 maddubs results add in int16 exactly (8 * 2 * 15 * 127 < 2^15) before one
 * madd. The K-quants have their own driver (PK_KERNELS_K) and work one 8-row half of a block at
 * a time, so a pass's live vectors fit the 16 ymm.
 * The float ops per (weight row, activation row) are the layout's contract (bit-identical to
 * nx_mm_pk_*_scalar, tested). Must never: read outside the packed group.
 *
 * The same file, compiled with NX_PK_VNNI and -mavxvnni (matmul_pack_avx2vnni.c), gives the
 * avx2_vnni level's kernels (names ending _avx2vnni): AVX-VNNI's vpdpbusd adds four u8 x s8
 * products into an int32 lane in one instruction where AVX2 needs maddubs + madd + add. Every
 * integer sum is exact in both (no saturation: see each kernel), so both give the same bits.
 */
#include "kernels/matmul_impl.h"
#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#ifdef NX_PK_VNNI
#define PK(name) name##_avx2vnni
#else
#define PK(name) name##_avx2
#endif
#ifndef NX_MM_PREFETCH
#define NX_MM_PREFETCH 2048
#endif

AI uint32_t ld32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
AI void prefetch_blk(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(p + NX_MM_PREFETCH + o), _MM_HINT_T0);
}
/* The K-quants', IQ4_XS's and the floats' distance: a block with 4+ rows takes longer than a
 * DRAM miss. From 2 rows on into L2 (T1): their reads were served one after another when the
 * L1 fill buffers held them (2-4 rows 1.06-1.16x faster in the model, Qwen3.5-0.8B-shaped
 * Q4_K_M, Zen 4 at NEXTN_CPU=avx2, 2 threads); Q8_0 / Q4_0 gained nothing and keep T0. */
#ifndef NX_MM_PREFETCH_K
#define NX_MM_PREFETCH_K 4096
#endif
AI void prefetch_k(const int NR, const uint8_t *p, size_t bytes) {
    if (NR >= 2)
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(p + NX_MM_PREFETCH_K + o), _MM_HINT_T1);
    else
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(p + NX_MM_PREFETCH_K + o), _MM_HINT_T0);
}
AI __m256i bcast4(const void *p) { return _mm256_set1_epi32((int)ld32(p)); }
/* An optimization barrier on a vector: GCC otherwise reassociates a row's 16 integer adds
 * into a tree whose partial sums spill. */
#define KEEP(v) __asm__("" : "+x"(v))
AI __m256 neg(__m256 v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }
/* Row r's pointer base + r * stride for NR rows, and PIN(NR, p) at the top of a loop body: one
 * register per row, addressed with constant offsets. Without it GCC keeps a pointer per (row,
 * offset) pair, runs out of registers and spills them in the inner loop (4-row Q4_K: 40 scalar
 * ops per 131 vector ones; 90 -> 97 MAC/ns, Zen 4 at NEXTN_CPU=avx2, one thread). */
#define ROWS(NR, p, base, stride) \
    _Pragma("GCC unroll 6") for (int r_ = 0; r_ < (NR); r_++) (p)[r_] = (base) + r_ * (stride)
#define PIN(NR, p) \
    _Pragma("GCC unroll 6") for (int r_ = 0; r_ < (NR); r_++) __asm__("" : "+r"((p)[r_]))

/* ===== Q8_0 x16 =====
 * Every activation row of the call in one pass over the weights: per block, |w| of its 16
 * half-vectors once (a stack buffer in L1), then the rows two at a time, their accumulators in
 * memory (a load and a store per row-half and block, against 64 integer ops). One pass keeps
 * the weight stream and its prefetch running under all the rows' work: with passes of a few
 * rows each, every later pass is compute with no DRAM reads to hide behind it. */

#ifdef NX_PK_VNNI
/* VNNI: the weight codes flipped to unsigned (w ^ 0x80 = w + 128) meet the signed activation
 * codes in vpdpbusd; each row's sum starts at cs = -128 * (sum of its codes), which cancels
 * the flip exactly. Two chains per row half (even and odd k) halve the dependent latency.
 * uw: the block's flipped codes, or NULL to flip them here; cs: row j's at cs[j*css]. */
AI void q8_rows(const int R, const uint8_t *bp, const __m256i *uw, __m256 dw0, __m256 dw1, const uint8_t *q,
                int64_t qs, const float *d, int64_t ds, const int32_t *cs, int64_t css, __m256 *acc) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256i I[2][2], J[2][2];
    for (int j = 0; j < R; j++) {
        I[j][0] = I[j][1] = _mm256_set1_epi32(cs[j * css]);
        J[j][0] = J[j][1] = _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i u = uw ? uw[2 * k + h]
                                 : _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(bp + 32 + 64 * k + 32 * h)), flip);
#pragma GCC unroll 2
            for (int j = 0; j < R; j++) {
                if (k % 2) J[j][h] = _mm256_dpbusd_avx_epi32(J[j][h], u, bcast4(q + j * qs + 4 * k));
                else I[j][h] = _mm256_dpbusd_avx_epi32(I[j][h], u, bcast4(q + j * qs + 4 * k));
            }
        }
#pragma GCC unroll 2
    for (int j = 0; j < R; j++) {
        const __m256 dx = _mm256_set1_ps(d[j * ds]);
        const __m256i S0 = _mm256_add_epi32(I[j][0], J[j][0]), S1 = _mm256_add_epi32(I[j][1], J[j][1]);
        acc[2 * j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S0), _mm256_mul_ps(dw0, dx), acc[2 * j]);
        acc[2 * j + 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S1), _mm256_mul_ps(dw1, dx), acc[2 * j + 1]);
    }
}
#else
/* R (1 or 2) rows from q (row j at q + j*qs, this block's codes) and d (row j's block scale at
 * d[j*ds]) into acc[2j + h]; absw: the block's |w|, or NULL to compute them here. */
AI void q8_rows(const int R, const uint8_t *bp, const __m256i *absw, __m256 dw0, __m256 dw1, const uint8_t *q,
                int64_t qs, const float *d, int64_t ds, __m256 *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i I[2][2];
    for (int j = 0; j < R; j++) I[j][0] = I[j][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(bp + 32 + 64 * k + 32 * h));
            const __m256i aw = absw ? absw[2 * k + h] : _mm256_sign_epi8(w, w);
#pragma GCC unroll 2
            for (int j = 0; j < R; j++) {
                const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(q + j * qs + 4 * k), w));
                I[j][h] = _mm256_add_epi32(I[j][h], _mm256_madd_epi16(p, ones));
                KEEP(I[j][h]);
            }
        }
#pragma GCC unroll 2
    for (int j = 0; j < R; j++) {
        const __m256 dx = _mm256_set1_ps(d[j * ds]);
        acc[2 * j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[j][0]), _mm256_mul_ps(dw0, dx), acc[2 * j]);
        acc[2 * j + 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[j][1]), _mm256_mul_ps(dw1, dx), acc[2 * j + 1]);
    }
}
#endif
#ifdef NX_PK_VNNI
#define Q8_ROWS(R, bp, wv, dw0, dw1, q, qs, d, ds, cs, css, acc) q8_rows(R, bp, wv, dw0, dw1, q, qs, d, ds, cs, css, acc)
#define Q8_WV(w) _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80))
#else
#define Q8_ROWS(R, bp, wv, dw0, dw1, q, qs, d, ds, cs, css, acc) q8_rows(R, bp, wv, dw0, dw1, q, qs, d, ds, acc)
#define Q8_WV(w) _mm256_sign_epi8(w, w)
#endif

/* Block b of one group for n rows (N = 1 or 2: that many, |w| inline; N = 0: any n). */
AI void q8_block(const int N, const uint8_t *bp, const nx_mm_act *a, int64_t b, int n, __m256 *acc) {
    const int64_t qs = a->q_stride, ds = a->d_stride;
    const uint8_t *q = a->q + 32 * b;
    const float *d = a->d + b;
    const int64_t css = a->cs_stride;
    const int32_t *cs = a->cs ? a->cs + b : NULL;
    (void)css, (void)cs;
    prefetch_blk(bp, NX_MM_Q8X16_BLOCK);
    const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)bp));
    const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(bp + 16)));
    if (N) {
        Q8_ROWS(N, bp, NULL, dw0, dw1, q, qs, d, ds, cs, css, acc);
        return;
    }
    __m256i absw[16];   /* VNNI: the flipped codes */
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) absw[k] = Q8_WV(_mm256_loadu_si256((const __m256i *)(bp + 32 + 32 * k)));
    int r = 0;
#pragma GCC unroll 1
    for (; r + 2 <= n; r += 2) {
        __asm__("" : "+r"(bp));   /* w read from L1 per row pair: hoisted out of the loop, 16 vectors would spill */
        Q8_ROWS(2, bp, absw, dw0, dw1, q + r * qs, qs, d + r * ds, ds, cs + r * css, css, acc + 2 * r);
    }
    if (r < n) Q8_ROWS(1, bp, absw, dw0, dw1, q + r * qs, qs, d + r * ds, ds, cs + r * css, css, acc + 2 * r);
}

/* The driver of the kernels that run every row of a call in one pass (Q8_0, Q4_0, IQ4_XS):
 * one group (TWO = 0) or two (g0, g1: two weight streams keep more DRAM reads in flight),
 * blocks in order (the per-pair float order of the contract), BLOCKFN(N, bp, a, b, n, acc) per
 * block; n_act of 1 and 2 get bodies of their own. */
/* fname##_run: one group (TWO = 0) or two (g0, g1), blocks in order, BLOCKFN(N, bp, a, b, n,
 * acc) per block into 2 accumulators per row (ACC of them at most), then n rows stored. */
#define PK_RUN(fname, BLOCKFN, BLOCK, ACC) PK_RUN_F(fname, BLOCKFN, BLOCK, ACC, pk_fin_none)
/* The same with FIN(acc, n) on each group's accumulators before they are stored (a kernel whose
 * lanes hold the group's rows in another order puts them back). */
AI void pk_fin_none(__m256 *acc, int n) { (void)acc, (void)n; }
#define PK_RUN_F(fname, BLOCKFN, BLOCK, ACC, FIN) \
    AI void fname##_run(const int N, const int TWO, int64_t nb, const uint8_t *g0, const uint8_t *g1, \
                        const nx_mm_act *a, int n, float *y0, float *y1, int64_t ldy) { \
        __m256 acc0[ACC], acc1[ACC]; \
        for (int r = 0; r < 2 * n; r++) acc0[r] = acc1[r] = _mm256_setzero_ps(); \
        for (int64_t b = 0; b < nb; b++) { \
            BLOCKFN(N, g0 + (size_t)b * (BLOCK), a, b, n, acc0); \
            if (TWO) BLOCKFN(N, g1 + (size_t)b * (BLOCK), a, b, n, acc1); \
        } \
        FIN(acc0, n); \
        if (TWO) FIN(acc1, n); \
        for (int r = 0; r < n; r++) { \
            _mm256_storeu_ps(y0 + r * ldy, acc0[2 * r]); \
            _mm256_storeu_ps(y0 + r * ldy + 8, acc0[2 * r + 1]); \
            if (TWO) { \
                _mm256_storeu_ps(y1 + r * ldy, acc1[2 * r]); \
                _mm256_storeu_ps(y1 + r * ldy + 8, acc1[2 * r + 1]); \
            } \
        } \
    }
/* One run shape (N: 1, 2 or 0 = any rows; TWO groups) as a function of its own (as PK_K_ONE). */
#define PK_ONE(fname, N, TWO) \
    static __attribute__((noinline)) void fname##_o##N##TWO(int64_t nb, const uint8_t *g0, const uint8_t *g1, \
                                                          const nx_mm_act *a, int n, float *y0, float *y1, int64_t ldy) { \
        fname##_run(N, TWO, nb, g0, g1, a, n, y0, y1, ldy); \
    }
#define PK_DRIVER(fname, BLOCKFN, BLOCK) \
    PK_RUN(fname, BLOCKFN, BLOCK, 2 * NX_MM_TILE) \
    PK_ONE(fname, 1, 1) PK_ONE(fname, 2, 1) PK_ONE(fname, 0, 1) PK_ONE(fname, 1, 0) PK_ONE(fname, 2, 0) PK_ONE(fname, 0, 0) \
    void PK(fname)(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y, \
                   int64_t ldy) { \
        const size_t gs = (size_t)nb * (BLOCK); \
        const int64_t h = n_groups / 2; \
        for (int64_t g = 0; g < h + n_groups % 2; g++) { \
            const int64_t g0 = g < h ? g : 2 * h, g1 = g + h; \
            const uint8_t *w0 = wp + (size_t)g0 * gs, *w1 = wp + (size_t)g1 * gs; \
            float *y0 = y + NX_MM_PACK_ROWS * g0, *y1 = y + NX_MM_PACK_ROWS * g1; \
            if (g < h) { \
                if (n_act == 1) fname##_o11(nb, w0, w1, a, 1, y0, y1, ldy); \
                else if (n_act == 2) fname##_o21(nb, w0, w1, a, 2, y0, y1, ldy); \
                else fname##_o01(nb, w0, w1, a, n_act, y0, y1, ldy); \
            } else { \
                if (n_act == 1) fname##_o10(nb, w0, w0, a, 1, y0, y0, ldy); \
                else if (n_act == 2) fname##_o20(nb, w0, w0, a, 2, y0, y0, ldy); \
                else fname##_o00(nb, w0, w0, a, n_act, y0, y0, ldy); \
            } \
        } \
    }
PK_DRIVER(nx_mm_pk_q8_0, q8_block, NX_MM_Q8X16_BLOCK)

/* ===== Q4_0 x16 =====
 * The stored codes u = q + 8 (nibbles, <= 15) meet the signed activation codes unsigned, so
 * no sign trick: AVX2 adds the 8 maddubs of a block in int16 exactly (8 * 2 * 15 * 127 < 2^15)
 * before one madd; VNNI takes them in vpdpbusd. Each row's sum starts at cs / 16 = -8 * (sum
 * of its codes), which takes the offset out exactly. Then Q8_0's float step. u: the block's 16
 * unpacked half-vectors, or NULL to unpack them here (two per 32-byte load). */
AI void q4_rows(const int R, const uint8_t *bp, const __m256i *u, __m256 dw0, __m256 dw1, const uint8_t *q, int64_t qs,
                const float *d, int64_t ds, const int32_t *cs, int64_t css, __m256 *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i I[2][2];
#ifndef NX_PK_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i S[2][2];
    for (int j = 0; j < R; j++) S[j][0] = S[j][1] = _mm256_setzero_si256();
#else
    __m256i J[2][2];
    for (int j = 0; j < R; j++) {
        I[j][0] = I[j][1] = _mm256_set1_epi32(cs[j * css] / 16);
        J[j][0] = J[j][1] = _mm256_setzero_si256();
    }
#endif
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; kk++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i lo, hi;
            if (u) {
                lo = u[2 * (2 * kk) + h];
                hi = u[2 * (2 * kk + 1) + h];
            } else {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(bp + 32 + 64 * kk + 32 * h));
                lo = _mm256_and_si256(v, m4);
                hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
#pragma GCC unroll 2
            for (int j = 0; j < R; j++) {
                const __m256i x0 = bcast4(q + j * qs + 8 * kk), x1 = bcast4(q + j * qs + 8 * kk + 4);
#ifdef NX_PK_VNNI
                I[j][h] = _mm256_dpbusd_avx_epi32(I[j][h], lo, x0);
                J[j][h] = _mm256_dpbusd_avx_epi32(J[j][h], hi, x1);
#else
                S[j][h] = _mm256_add_epi16(S[j][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_maddubs_epi16(hi, x1)));
                KEEP(S[j][h]);
#endif
            }
        }
#pragma GCC unroll 2
    for (int j = 0; j < R; j++) {
#ifdef NX_PK_VNNI
        I[j][0] = _mm256_add_epi32(I[j][0], J[j][0]);
        I[j][1] = _mm256_add_epi32(I[j][1], J[j][1]);
#else
        const __m256i c = _mm256_set1_epi32(cs[j * css] / 16);
        I[j][0] = _mm256_add_epi32(_mm256_madd_epi16(S[j][0], ones), c);
        I[j][1] = _mm256_add_epi32(_mm256_madd_epi16(S[j][1], ones), c);
#endif
        const __m256 dx = _mm256_set1_ps(d[j * ds]);
        acc[2 * j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[j][0]), _mm256_mul_ps(dw0, dx), acc[2 * j]);
        acc[2 * j + 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[j][1]), _mm256_mul_ps(dw1, dx), acc[2 * j + 1]);
    }
}

/* Block b of one group for n rows (N = 1 or 2: that many, unpacked inline; N = 0: any n, the
 * block unpacked once into L1 for all of them), as q8_block. */
AI void q4_block(const int N, const uint8_t *bp, const nx_mm_act *a, int64_t b, int n, __m256 *acc) {
    const int64_t qs = a->q_stride, ds = a->d_stride, css = a->cs_stride;
    const uint8_t *q = a->q + 32 * b;
    const float *d = a->d + b;
    const int32_t *cs = a->cs + b;
    prefetch_blk(bp, NX_MM_Q40X16_BLOCK);
    const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)bp));
    const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(bp + 16)));
    if (N) {
        q4_rows(N, bp, NULL, dw0, dw1, q, qs, d, ds, cs, css, acc);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i u[16];
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; kk++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(bp + 32 + 64 * kk + 32 * h));
            u[2 * (2 * kk) + h] = _mm256_and_si256(v, m4);
            u[2 * (2 * kk + 1) + h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
    int r = 0;
#pragma GCC unroll 1
    for (; r + 2 <= n; r += 2) {
        __asm__("" : "+r"(bp));
        q4_rows(2, bp, u, dw0, dw1, q + r * qs, qs, d + r * ds, ds, cs + r * css, css, acc + 2 * r);
    }
    if (r < n) q4_rows(1, bp, u, dw0, dw1, q + r * qs, qs, d + r * ds, ds, cs + r * css, css, acc + 2 * r);
}

PK_DRIVER(nx_mm_pk_q4_0, q4_block, NX_MM_Q40X16_BLOCK)

/* IQ4_NL x16 (Q4_0 x16's bytes, values by table): each block turned into a Q8_0 x16 block in
 * L1 (the scales, then the values by one vpshufb per code vector), which Q8_0's kernel takes as
 * it is (both contracts are fma((float)I_b, d_w*d_x, acc) with I_b the exact dot product). */
AI void nl_block(const int N, const uint8_t *bp, const nx_mm_act *a, int64_t b, int n, __m256 *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)nx_mm_iq4_table));
    __m256i blk[NX_MM_Q8X16_BLOCK / 32];
    prefetch_blk(bp, NX_MM_Q40X16_BLOCK);
    blk[0] = _mm256_loadu_si256((const __m256i *)bp);   /* the 16 fp16 scales */
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; kk++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(bp + 32 + 64 * kk + 32 * h));
            blk[1 + 2 * (2 * kk) + h] = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
            blk[1 + 2 * (2 * kk + 1) + h] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        }
    q8_block(N, (const uint8_t *)blk, a, b, n, acc);
}
PK_DRIVER(nx_mm_pk_iq4_nl, nl_block, NX_MM_Q40X16_BLOCK)

/* ===== IQ4_XS x16 =====
 * Per sub-block, both 8-row halves' codes turned into values by one vpshufb each, once for all
 * the call's rows (16 vectors, in L1); VNNI takes the values + 128 unsigned in vpdpbusd from
 * -128 * (the sub-block's activation code sum), which leaves the exact signed sum; AVX2 takes
 * |value| x sign(x, value) in maddubs (no saturation: |value|, |x| <= 127), then madd. */
#ifdef NX_PK_VNNI
static const uint8_t k_iq4_lut[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
#else
static const uint8_t k_iq4_abs[16] = {127, 104, 83, 65, 49, 35, 22, 10, 1, 13, 25, 38, 53, 69, 89, 113};
#endif
/* Sub-block codes at cp into U[2k + h] (values 4k..4k+3 of rows 8h..8h+7; VNNI: + 128) and,
 * for AVX2, their magnitudes into A. */
AI void iq4xs_unpack(const uint8_t *cp, __m256i *U, __m256i *A) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#ifdef NX_PK_VNNI
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)k_iq4_lut));
    (void)A;
#else
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)nx_mm_iq4_table));
    const __m256i alut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)k_iq4_abs));
#endif
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; kk++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(cp + 64 * kk + 32 * h));
            const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            U[2 * (2 * kk) + h] = _mm256_shuffle_epi8(lut, lo);
            U[2 * (2 * kk + 1) + h] = _mm256_shuffle_epi8(lut, hi);
#ifndef NX_PK_VNNI
            A[2 * (2 * kk) + h] = _mm256_shuffle_epi8(alut, lo);
            A[2 * (2 * kk + 1) + h] = _mm256_shuffle_epi8(alut, hi);
#endif
        }
}
/* R (1 or 2) rows of one sub-block: q, bs at row 0's codes and group sums of it; t[2j + h]. */
AI void iq4xs_rows(const int R, const __m256i *U, const __m256i *A, __m256 DS0, __m256 DS1, const uint8_t *q,
                   int64_t qs, const int16_t *bs, int64_t bss, __m256 *t) {
    __m256i I[2][2];
#ifdef NX_PK_VNNI
    __m256i J[2][2];
    (void)A;
    for (int j = 0; j < R; j++) {
        I[j][0] = I[j][1] = _mm256_set1_epi32(-128 * ((int32_t)bs[j * bss] + bs[j * bss + 1]));
        J[j][0] = J[j][1] = _mm256_setzero_si256();
    }
#else
    const __m256i ones = _mm256_set1_epi16(1);
    (void)bs, (void)bss;
    for (int j = 0; j < R; j++) I[j][0] = I[j][1] = _mm256_setzero_si256();
#endif
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
            for (int j = 0; j < R; j++) {
                const __m256i x = bcast4(q + j * qs + 4 * k);
#ifdef NX_PK_VNNI
                if (k % 2) J[j][h] = _mm256_dpbusd_avx_epi32(J[j][h], U[2 * k + h], x);
                else I[j][h] = _mm256_dpbusd_avx_epi32(I[j][h], U[2 * k + h], x);
#else
                const __m256i p = _mm256_maddubs_epi16(A[2 * k + h], _mm256_sign_epi8(x, U[2 * k + h]));
                I[j][h] = _mm256_add_epi32(I[j][h], _mm256_madd_epi16(p, ones));
                KEEP(I[j][h]);
#endif
            }
#pragma GCC unroll 2
    for (int j = 0; j < R; j++) {
#ifdef NX_PK_VNNI
        I[j][0] = _mm256_add_epi32(I[j][0], J[j][0]);
        I[j][1] = _mm256_add_epi32(I[j][1], J[j][1]);
#endif
        t[2 * j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[j][0]), DS0, t[2 * j]);
        t[2 * j + 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[j][1]), DS1, t[2 * j + 1]);
    }
}
/* Super-block sb of one group for n rows (N = 1 or 2: that many; N = 0: any n <= NX_MM_TILE). */
AI void iq4xs_block(const int N, const uint8_t *bp, const nx_mm_act *a, int64_t sb, int n, __m256 *acc) {
    const int nn = N ? N : n;
    const int64_t qs = a->q_stride, bss = a->bs_stride;
    const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)bp));
    const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(bp + 16)));
    __m256 t[2 * NX_MM_TILE];
    for (int r = 0; r < 2 * nn; r++) t[r] = _mm256_setzero_ps();
    prefetch_k(n, bp, 192);
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
        const uint8_t *cp = bp + 192 + 256 * j;
        prefetch_k(n, cp, 256);
        const __m256 DS0 = _mm256_mul_ps(dw0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(bp + 32 + 16 * j)))));
        const __m256 DS1 = _mm256_mul_ps(dw1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(bp + 40 + 16 * j)))));
        __m256i U[16], A[16];
        iq4xs_unpack(cp, U, A);
        const uint8_t *q = a->q + 256 * sb + 32 * j;
        const int16_t *bs = a->bs + 16 * sb + 2 * j;
        if (N) {
            iq4xs_rows(N, U, A, DS0, DS1, q, qs, bs, bss, t);
            continue;
        }
        int r = 0;
#pragma GCC unroll 1
        for (; r + 2 <= n; r += 2) iq4xs_rows(2, U, A, DS0, DS1, q + r * qs, qs, bs + r * bss, bss, t + 2 * r);
        if (r < n) iq4xs_rows(1, U, A, DS0, DS1, q + r * qs, qs, bs + r * bss, bss, t + 2 * r);
    }
    for (int r = 0; r < nn; r++) {
        const __m256 dx = _mm256_set1_ps(a->d[r * a->d_stride + sb]);
        acc[2 * r] = _mm256_fmadd_ps(t[2 * r], dx, acc[2 * r]);
        acc[2 * r + 1] = _mm256_fmadd_ps(t[2 * r + 1], dx, acc[2 * r + 1]);
    }
}
PK_DRIVER(nx_mm_pk_iq4_xs, iq4xs_block, NX_MM_IQ4XSX16_BLOCK)

/* ===== K-quant driver =====
 * The K-quant steps work one half (8 weight rows) of a block at a time: a half's 8 unpacked
 * weight vectors plus one accumulator per activation row fit the 16 ymm for up to 4 rows
 * (Q4_K/Q5_K) or 6 (Q6_K), where both halves' accumulators at once spill. The second half
 * re-reads the block from L1. Passes of at most MAXR rows (balanced), each a compiled body,
 * over the group's blocks in order, two groups at once (g and g + n_groups/2: two weight
 * streams keep more DRAM reads in flight than one); neither changes a (weight row, activation row) pair's arithmetic. Prefill
 * (a->prefill): one group at a time, its blocks in L2 across the passes. The prefetch runs
 * further ahead than Q8_0's: a K-quant block with 4+ rows takes longer than a DRAM miss.
 * The cases of 5 and 6 rows exist only where MAXR allows (the bound keeps NR <= MAXR for
 * the arrays; the guarded calls fold away). */
/* One pass shape (NR rows, capped at MAXR; TWO groups) as a function of its own: inlined into
 * one dispatcher, the shapes shared its register allocation, and one shape's code moved with
 * another's (4-row Q4_K passes 81-90 MAC/ns by which other shapes took which order). */
#define PK_K_ONE(fname, NR, TWO, MAXR) \
    static __attribute__((noinline, unused)) void fname##_o##NR##TWO(int64_t nb, const uint8_t *g0, const uint8_t *g1, \
                                                                   const nx_mm_act *a, float *y0, float *y1, int64_t ldy) { \
        fname##_run((NR) < (MAXR) ? (NR) : (MAXR), TWO, nb, g0, g1, a, y0, y1, ldy); \
    }
#define PK_KERNELS_K(fname, STEP, BLOCK, MAXR, PREFILL) PK_KERNELS_K_(fname, STEP, BLOCK, MAXR, PREFILL, pk_fin_none)   /* fname expanded first */
#define PK_KERNELS_KF(fname, STEP, BLOCK, MAXR, FIN) PK_KERNELS_K_(fname, STEP, BLOCK, MAXR, (nx_mm_pkernel)0, FIN)
#define PK_KERNELS_K_(fname, STEP, BLOCK, MAXR, PREFILL, FIN) \
    AI void fname##_blk(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, int n, __m256 *acc) { \
        (void)n; \
        STEP(NR, bp, a, b, acc); \
    } \
    PK_RUN_F(fname##_k, fname##_blk, BLOCK, 2 * (MAXR), FIN) \
    AI void fname##_run(const int NR, const int TWO, int64_t nb, const uint8_t *g0, const uint8_t *g1, \
                        const nx_mm_act *a, float *y0, float *y1, int64_t ldy) { \
        fname##_k_run(NR, TWO, nb, g0, g1, a, NR, y0, y1, ldy); \
    } \
    PK_K_ONE(fname, 1, 0, MAXR) PK_K_ONE(fname, 2, 0, MAXR) PK_K_ONE(fname, 3, 0, MAXR) PK_K_ONE(fname, 4, 0, MAXR) \
    PK_K_ONE(fname, 5, 0, MAXR) PK_K_ONE(fname, 6, 0, MAXR) PK_K_ONE(fname, 1, 1, MAXR) PK_K_ONE(fname, 2, 1, MAXR) \
    PK_K_ONE(fname, 3, 1, MAXR) PK_K_ONE(fname, 4, 1, MAXR) PK_K_ONE(fname, 5, 1, MAXR) PK_K_ONE(fname, 6, 1, MAXR) \
    static void fname##_pass(int nr, int two, int64_t nb, const uint8_t *g0, const uint8_t *g1, const nx_mm_act *a, \
                             float *y0, float *y1, int64_t ldy) { \
        if (!two) g1 = g0, y1 = y0; \
        switch (nr + 8 * !!two) { \
        case 1: fname##_o10(nb, g0, g1, a, y0, y1, ldy); return; \
        case 2: fname##_o20(nb, g0, g1, a, y0, y1, ldy); return; \
        case 3: fname##_o30(nb, g0, g1, a, y0, y1, ldy); return; \
        case 4: fname##_o40(nb, g0, g1, a, y0, y1, ldy); return; \
        case 5: if ((MAXR) >= 5) fname##_o50(nb, g0, g1, a, y0, y1, ldy); return; \
        case 6: if ((MAXR) >= 6) fname##_o60(nb, g0, g1, a, y0, y1, ldy); return; \
        case 9: fname##_o11(nb, g0, g1, a, y0, y1, ldy); return; \
        case 10: fname##_o21(nb, g0, g1, a, y0, y1, ldy); return; \
        case 11: fname##_o31(nb, g0, g1, a, y0, y1, ldy); return; \
        case 12: fname##_o41(nb, g0, g1, a, y0, y1, ldy); return; \
        case 13: if ((MAXR) >= 5) fname##_o51(nb, g0, g1, a, y0, y1, ldy); return; \
        default: if ((MAXR) >= 6) fname##_o61(nb, g0, g1, a, y0, y1, ldy); return; \
        } \
    } \
    void fname(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y, int64_t ldy) { \
        const nx_mm_pkernel pf = (PREFILL); \
        if (pf && a->prefill) {   /* the type's prefill path, if it has one */ \
            pf(nb, wp, n_groups, a, n_act, y, ldy); \
            return; \
        } \
        const size_t gs = (size_t)nb * (BLOCK); \
        const int64_t h = a->prefill ? 0 : n_groups / 2;   /* prefill: one group at a time (in L2) */ \
        for (int64_t g = 0; g < (a->prefill ? n_groups : h + n_groups % 2); g++) { \
            const int two = g < h; \
            const int64_t g0 = two || a->prefill ? g : 2 * h, g1 = two ? g + h : g0; \
            for (int r0 = 0; r0 < n_act;) { \
                const int np = (n_act - r0 + (MAXR) - 1) / (MAXR), nr = (n_act - r0 + np - 1) / np; \
                const nx_mm_act sub = nx_mm_act_rows(a, r0); \
                fname##_pass(nr, two, nb, wp + (size_t)g0 * gs, wp + (size_t)g1 * gs, &sub, \
                             y + (int64_t)r0 * ldy + NX_MM_PACK_ROWS * g0, y + (int64_t)r0 * ldy + NX_MM_PACK_ROWS * g1, ldy); \
                r0 += nr; \
            } \
        } \
    }

/* ===== Q4_K x16 ===== */
/* The codes of half h (rows 8h..8h+7) of the sub-block at cp: W[k] holds, for its 8 rows, the
 * 4 codes 4k..4k+3 as bytes (Q5_K: with the fifth bit, bit k of each byte of the bit vector). */
/* Q5_K's fifth bits of code vector k: bit k of each byte of hb to bit 4. */
AI __m256i k5_fifth(__m256i hb, const int k) {
    const __m256i sh = k < 4 ? _mm256_slli_epi16(hb, 4 - k) : k > 4 ? _mm256_srli_epi16(hb, k - 4) : hb;
    return _mm256_and_si256(sh, _mm256_set1_epi8(0x10));
}
AI void k4_codes(const int Q5, const uint8_t *cp, const int h, __m256i *W) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; kk++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(cp + 64 * kk + 32 * h));
        W[2 * kk] = _mm256_and_si256(v, m4);
        W[2 * kk + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    if (Q5) {
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(cp + 256 + 32 * h));
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) W[k] = _mm256_or_si256(W[k], k5_fifth(hb, k));
    }
}

/* The start of a K-quant half's sums for NR rows: t[r] = cvt(Mn) * -dmin, Mn = sum_j m_j *
 * (bs[2j] + bs[2j+1]) (the (m_j, m_j) pairs madd the rows' group-sum pairs); and its end,
 * acc[2r + h] = fma(t[r], d_x, acc[2r + h]). */
AI void k4_start(const int NR, const int h, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m256 *t) {
    const __m256 ndm = neg(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(bp + 32 + 16 * h))));
    __m256i mn[6];
    for (int r = 0; r < NR; r++) mn[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const __m256i m = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(bp + 192 + 16 * j + 8 * h)));
        const __m256i md = _mm256_or_si256(m, _mm256_slli_epi32(m, 16));
#pragma GCC unroll 6
        for (int r = 0; r < NR; r++)
            mn[r] = _mm256_add_epi32(mn[r], _mm256_madd_epi16(md, bcast4(a->bs + r * a->bs_stride + 16 * sb + 2 * j)));
    }
#pragma GCC unroll 6
    for (int r = 0; r < NR; r++) t[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(mn[r]), ndm);
}
AI void k_end(const int NR, const int h, const __m256 *t, const nx_mm_act *a, int64_t sb, __m256 *acc) {
#pragma GCC unroll 6
    for (int r = 0; r < NR; r++) acc[2 * r + h] = _mm256_fmadd_ps(t[r], _mm256_set1_ps(a->d[r * a->d_stride + sb]), acc[2 * r + h]);
}

/* Half h (rows 8h..8h+7) of one block for NR activation rows: acc[2r + h]. */
AI void k4_half(const int Q5, const int NR, const int h, const uint8_t *bp, const __m256i *ub, const nx_mm_act *a,
                int64_t sb, __m256 *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    (void)ones;   /* unused with VNNI */
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(bp + 16 * h)));
    __m256 t[6];
    if (!h) prefetch_k(NR, bp, 320);   /* the rest per sub-block: a burst of 37 prefetches stalls on the fill buffers */
    k4_start(NR, h, bp, a, sb, t);
    const uint8_t *qr[6];
    ROWS(NR, qr, a->q + 256 * sb, a->q_stride);
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
        const uint8_t *cp = bp + 320 + (Q5 ? 320 : 256) * j;
        __m256i W[8];
        PIN(NR, qr);
        if (ub) {   /* prefill: the codes unpacked once per call (k4_unpack) */
            const __m256i *u = ub + 8 * (2 * j + h);
            __asm__("" : "+r"(u));   /* loaded here, not hoisted */
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) W[k] = _mm256_load_si256(u + k);
        } else {
            if (!h) prefetch_k(NR, cp, Q5 ? 320 : 256);
            k4_codes(Q5, cp, h, W);
        }
        const __m256 D = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(bp + 64 + 16 * j + 8 * h)))));
#pragma GCC unroll 6
        for (int r = 0; r < NR; r++) {
            const uint8_t *q = qr[r] + 32 * j;
            __m256i I;
#ifdef NX_PK_VNNI
            {   /* two chains of 4 (the sum is exact in any order) */
                __m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    i0 = _mm256_dpbusd_avx_epi32(i0, W[k], bcast4(q + 4 * k));
                    i1 = _mm256_dpbusd_avx_epi32(i1, W[k + 4], bcast4(q + 4 * k + 16));
                }
                I = _mm256_add_epi32(i0, i1);
            }
#else
            if (!Q5) {   /* codes <= 15: 8 maddubs add in int16 exactly */
                __m256i s = _mm256_maddubs_epi16(W[0], bcast4(q));
#pragma GCC unroll 7
                for (int k = 1; k < 8; k++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(W[k], bcast4(q + 4 * k)));
                I = _mm256_madd_epi16(s, ones);
            } else {     /* codes <= 31: 4 at a time (4 * 2 * 31 * 127 < 2^15) */
                __m256i s0 = _mm256_maddubs_epi16(W[0], bcast4(q)), s1 = _mm256_maddubs_epi16(W[4], bcast4(q + 16));
#pragma GCC unroll 3
                for (int k = 1; k < 4; k++) {
                    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(W[k], bcast4(q + 4 * k)));
                    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(W[k + 4], bcast4(q + 4 * k + 16)));
                }
                I = _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones));
            }
#endif
            t[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), D, t[r]);
        }
    }
    k_end(NR, h, t, a, sb, acc);
}
#ifndef NX_PK_VNNI
AI void k4_half_ub(const int Q5, const int NR, const int h, const uint8_t *bp, const __m256i *ub, const nx_mm_act *a,
                   int64_t sb, __m256 *acc);
#endif
/* A decode step of a Q4_K / Q5_K block: passes of 2+ rows in k4_half_ub's order (k4_half_ub's
 * comment), a single row in k4_half's. */
AI void k4_step(const int Q5, const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m256 *acc) {
#ifndef NX_PK_VNNI
    if (NR >= 2) {
        k4_half_ub(Q5, NR, 0, bp, NULL, a, sb, acc);
        k4_half_ub(Q5, NR, 1, bp, NULL, a, sb, acc);
        return;
    }
#endif
    k4_half(Q5, NR, 0, bp, NULL, a, sb, acc);
    k4_half(Q5, NR, 1, bp, NULL, a, sb, acc);
}
AI void q4k_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m256 *acc) { k4_step(0, NR, bp, a, sb, acc); }
AI void q5k_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m256 *acc) { k4_step(1, NR, bp, a, sb, acc); }
#ifndef NX_K4_MAXR
#define NX_K4_MAXR 4
#endif

/* Prefill (Q4_K / Q5_K): the driver's passes of at most 4 rows each unpack a block's nibbles
 * again (12 ops per half sub-block, 17 more for Q5_K's fifth bits, against 11 per row with
 * VNNI). Here a super-block's codes are unpacked once per call into an L1 buffer (4 KB: for
 * sub-block j and half h, the 8 vectors W[k] of k4_half), and the call's passes run over it
 * one super-block at a time, their float accumulators in memory: the same ops per (weight
 * row, activation row) in the same order. */
AI void k4_unpack(const int Q5, const uint8_t *bp, __m256i *ub) {
    prefetch_k(1, bp, Q5 ? NX_MM_Q5KX16_BLOCK : NX_MM_Q4KX16_BLOCK);
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
        const uint8_t *cp = bp + 320 + (Q5 ? 320 : 256) * j;
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) k4_codes(Q5, cp, h, ub + 8 * (2 * j + h));
    }
}
#ifndef NX_PK_VNNI
/* k4_half with the loop order turned: code vector k outer, rows inner, so each W[k] is
 * loaded (prefill: from the unpacked codes ub) or unpacked (ub NULL: from the packed block)
 * once and meets every row while live (with the rows outer, the 8 live vectors plus the rows'
 * sums spill). The same int16 sums (exact in any order: Q4_K 8 maddubs, Q5_K two groups of 4,
 * as k4_half), then k4_half's float steps. One thread, 1024 x 3584, 64 rows, Zen 4 at
 * NEXTN_CPU=avx2: Q4_K 85 -> 97, Q5_K 81 -> 91 MAC/ns. Decode passes of 2-4 rows take it too,
 * each pass shape a function of its own (PK_K_ONE; 1024 x 3584 in cache: Q4_K 2 / 3 / 4 rows
 * 70 / 86 / 82 -> 80 / 87 / 87, Q5_K 54 / 68 / 67 -> 57-63 / 69-72 / 76 MAC/ns). */
AI void k4_half_ub(const int Q5, const int NR, const int h, const uint8_t *bp, const __m256i *ub, const nx_mm_act *a,
                   int64_t sb, __m256 *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(bp + 16 * h)));
    __m256 t[6];
    if (!ub && !h) prefetch_k(NR, bp, 320);
    k4_start(NR, h, bp, a, sb, t);
    const uint8_t *qr[6];
    ROWS(NR, qr, a->q + 256 * sb, a->q_stride);
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
        const __m256i *u = ub ? ub + 8 * (2 * j + h) : NULL;
        const uint8_t *cp = bp + 320 + (Q5 ? 320 : 256) * j;
        if (!ub && !h) prefetch_k(NR, cp, Q5 ? 320 : 256);
        PIN(NR, qr);
        __m256i s0[6], s1[6], v = _mm256_setzero_si256();
        const __m256i hb = Q5 && !ub ? _mm256_loadu_si256((const __m256i *)(cp + 256 + 32 * h)) : v;
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m256i W;
            if (ub) W = _mm256_load_si256(u + k);
            else {   /* k4_codes' W[k] */
                const __m256i m4 = _mm256_set1_epi8(0x0F);
                if (k % 2 == 0) v = _mm256_loadu_si256((const __m256i *)(cp + 64 * (k / 2) + 32 * h));
                W = k % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
                if (Q5) W = _mm256_or_si256(W, k5_fifth(hb, k));
            }
#pragma GCC unroll 6
            for (int r = 0; r < NR; r++) {
                const __m256i p = _mm256_maddubs_epi16(W, bcast4(qr[r] + 32 * j + 4 * k));
                if (Q5 && k >= 4) s1[r] = k == 4 ? p : _mm256_add_epi16(s1[r], p);
                else s0[r] = k == 0 ? p : _mm256_add_epi16(s0[r], p);
                if (Q5 && k >= 4) KEEP(s1[r]);
                else KEEP(s0[r]);
            }
        }
        const __m256 D = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(bp + 64 + 16 * j + 8 * h)))));
#pragma GCC unroll 6
        for (int r = 0; r < NR; r++) {
            const __m256i I = Q5 ? _mm256_add_epi32(_mm256_madd_epi16(s0[r], ones), _mm256_madd_epi16(s1[r], ones))
                                 : _mm256_madd_epi16(s0[r], ones);
            t[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), D, t[r]);
        }
    }
    k_end(NR, h, t, a, sb, acc);
}
#endif
/* Both halves of a block for NR rows from the unpacked codes. */
AI void k4_both(const int Q5, const int NR, const uint8_t *bp, const __m256i *ub, const nx_mm_act *a, int64_t sb, __m256 *acc) {
#ifndef NX_PK_VNNI
    k4_half_ub(Q5, NR, 0, bp, ub, a, sb, acc);
    k4_half_ub(Q5, NR, 1, bp, ub, a, sb, acc);
#else
    k4_half(Q5, NR, 0, bp, ub, a, sb, acc);
    k4_half(Q5, NR, 1, bp, ub, a, sb, acc);
#endif
}
#define KQ_PREFILL(fname, UNPACK, BOTH, BLOCK, MAXR) \
    static void fname(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y, int64_t ldy) { \
        __m256i ub[128]; \
        __m256 acc[2 * NX_MM_TILE]; \
        nx_mm_act sub[NX_MM_TILE]; \
        int tr[NX_MM_TILE], nt = 0;   /* balanced passes of at most (MAXR) rows, as the driver's */ \
        for (int r0 = 0; r0 < n_act; nt++) { \
            const int np = (n_act - r0 + (MAXR) - 1) / (MAXR); \
            tr[nt] = (n_act - r0 + np - 1) / np; \
            sub[nt] = nx_mm_act_rows(a, r0); \
            r0 += tr[nt]; \
        } \
        for (int64_t g = 0; g < n_groups; g++) { \
            const uint8_t *gp = wp + (size_t)g * (size_t)nb * (BLOCK); \
            for (int r = 0; r < 2 * n_act; r++) acc[r] = _mm256_setzero_ps(); \
            for (int64_t b = 0; b < nb; b++) { \
                const uint8_t *bp = gp + (size_t)b * (BLOCK); \
                UNPACK(bp, ub); \
                for (int t = 0, r0 = 0; t < nt; r0 += tr[t++]) { \
                    __m256 *ac = acc + 2 * r0; \
                    switch (tr[t]) {   /* as the driver's _pass: NR a constant, at most (MAXR) */ \
                    case 1: BOTH(1, bp, ub, &sub[t], b, ac); break; \
                    case 2: BOTH(2, bp, ub, &sub[t], b, ac); break; \
                    case 3: BOTH(3, bp, ub, &sub[t], b, ac); break; \
                    case 4: BOTH(4, bp, ub, &sub[t], b, ac); break; \
                    case 5: if ((MAXR) >= 5) BOTH(5 < (MAXR) ? 5 : (MAXR), bp, ub, &sub[t], b, ac); break; \
                    default: if ((MAXR) >= 6) BOTH(6 < (MAXR) ? 6 : (MAXR), bp, ub, &sub[t], b, ac); break; \
                    } \
                } \
            } \
            for (int r = 0; r < n_act; r++) { \
                _mm256_storeu_ps(y + r * ldy + NX_MM_PACK_ROWS * g, acc[2 * r]); \
                _mm256_storeu_ps(y + r * ldy + NX_MM_PACK_ROWS * g + 8, acc[2 * r + 1]); \
            } \
        } \
    }
AI void q4k_unpack(const uint8_t *bp, __m256i *ub) { k4_unpack(0, bp, ub); }
AI void q5k_unpack(const uint8_t *bp, __m256i *ub) { k4_unpack(1, bp, ub); }
AI void q4k_both(const int NR, const uint8_t *bp, const __m256i *ub, const nx_mm_act *a, int64_t sb, __m256 *acc) { k4_both(0, NR, bp, ub, a, sb, acc); }
AI void q5k_both(const int NR, const uint8_t *bp, const __m256i *ub, const nx_mm_act *a, int64_t sb, __m256 *acc) { k4_both(1, NR, bp, ub, a, sb, acc); }
KQ_PREFILL(q4k_prefill, q4k_unpack, q4k_both, NX_MM_Q4KX16_BLOCK, NX_K4_MAXR)
KQ_PREFILL(q5k_prefill, q5k_unpack, q5k_both, NX_MM_Q5KX16_BLOCK, NX_K4_MAXR)
PK_KERNELS_K(PK(nx_mm_pk_q4_K), q4k_step, NX_MM_Q4KX16_BLOCK, NX_K4_MAXR, q4k_prefill)
PK_KERNELS_K(PK(nx_mm_pk_q5_K), q5k_step, NX_MM_Q5KX16_BLOCK, NX_K4_MAXR, q5k_prefill)

/* ===== Q6_K x16 =====
 * Codes 0..63 unsigned: two maddubs results add in int16 exactly (2 * 2 * 63 * 127 < 2^15)
 * before one madd; the -32 correction C = sum sc_g * bs_g from madd of the sign-extended
 * scale pairs with the broadcast group-sum pairs. */
/* Group g's 4 code vectors for half h (gp: the group's 192 bytes): low nibble | high bit pair. */
AI void q6_codes(const uint8_t *gp, const int h, __m256i *W) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i L0 = _mm256_loadu_si256((const __m256i *)(gp + 32 * h));
    const __m256i L1 = _mm256_loadu_si256((const __m256i *)(gp + 64 + 32 * h));
    const __m256i H = _mm256_loadu_si256((const __m256i *)(gp + 128 + 32 * h));
    W[0] = _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
    W[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
    W[2] = _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_and_si256(H, m30));
    W[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
}
/* The start of a Q6_K half's sums for NR rows: t[r] = cvt(C) * (d * -32), C = sum_g sc_g * bs_g
 * from madd of the sign-extended scale pairs with the rows' group-sum pairs. */
AI void q6_start(const int NR, const int h, __m256 dw, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m256 *t) {
    __m256i c[6];
    for (int r = 0; r < NR; r++) c[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        const __m256i P = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bp + 32 + 32 * p + 16 * h)));
#pragma GCC unroll 6
        for (int r = 0; r < NR; r++)
            c[r] = _mm256_add_epi32(c[r], _mm256_madd_epi16(P, bcast4(a->bs + r * a->bs_stride + 16 * sb + 2 * p)));
    }
    const __m256 n32 = _mm256_mul_ps(dw, _mm256_set1_ps(-32.0f));
#pragma GCC unroll 6
    for (int r = 0; r < NR; r++) t[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(c[r]), n32);
}
AI void q6k_half(const int NR, const int h, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m256 *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    (void)ones;   /* unused with VNNI */
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(bp + 16 * h)));
    __m256 t[6];
    if (!h) prefetch_k(NR, bp, 320);
    q6_start(NR, h, dw, bp, a, sb, t);
    const uint8_t *qr[6];
    ROWS(NR, qr, a->q + 256 * sb, a->q_stride);
#pragma GCC unroll 1
    for (int p = 0; p < 8; p++) {   /* groups 2p, 2p + 1: one scale-pair vector */
        const __m256i P = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bp + 32 + 32 * p + 16 * h)));
        PIN(NR, qr);
#pragma GCC unroll 2
        for (int e = 0; e < 2; e++) {
            const int g = 2 * p + e;
            const uint8_t *gp = bp + 320 + 192 * g;
            if (!h) prefetch_k(NR, gp, 192);
            __m256i Wq[4];
            q6_codes(gp, h, Wq);
            const __m256i W0 = Wq[0], W1 = Wq[1], W2 = Wq[2], W3 = Wq[3];
            /* d * sc_g: group 2p + 1's scale is the high int16 of each 32-bit lane */
            const __m256i S = e ? _mm256_srai_epi32(P, 16) : _mm256_srai_epi32(_mm256_slli_epi32(P, 16), 16);
            const __m256 D = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(S));
#pragma GCC unroll 6
            for (int r = 0; r < NR; r++) {
                const uint8_t *q = qr[r] + 16 * g;
#ifdef NX_PK_VNNI
                const __m256i i01 = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), W0, bcast4(q)), W1, bcast4(q + 4));
                const __m256i i23 = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), W2, bcast4(q + 8)), W3, bcast4(q + 12));
                const __m256i I = _mm256_add_epi32(i01, i23);
#else
                const __m256i s01 = _mm256_add_epi16(_mm256_maddubs_epi16(W0, bcast4(q)), _mm256_maddubs_epi16(W1, bcast4(q + 4)));
                const __m256i s23 = _mm256_add_epi16(_mm256_maddubs_epi16(W2, bcast4(q + 8)), _mm256_maddubs_epi16(W3, bcast4(q + 12)));
                const __m256i I = _mm256_add_epi32(_mm256_madd_epi16(s01, ones), _mm256_madd_epi16(s23, ones));
#endif
                t[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), D, t[r]);
            }
        }
    }
    k_end(NR, h, t, a, sb, acc);
}
AI void q6k_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t sb, __m256 *acc) {
    q6k_half(NR, 0, bp, a, sb, acc);
    q6k_half(NR, 1, bp, a, sb, acc);
}
#ifndef NX_Q6_MAXR
#define NX_Q6_MAXR 6
#endif
#ifndef NX_PK_VNNI
/* Prefill (Q6_K, the maddubs level), as Q4_K / Q5_K's: a super-block's codes unpacked once per
 * call (for group g and half h, q6k_half's W0..W3 at ub + 8g + 4h), then q6k_half's arithmetic
 * per row with the code vectors outer (k4_half_ub's order). The same exact integer sums, the
 * same float steps in the same order (one thread, 1024 x 3584, 64 rows, Zen 4 at
 * NEXTN_CPU=avx2: 70-72 -> 77-80 MAC/ns). The avx2_vnni level keeps the driver's passes: no
 * machine here had AVX-VNNI to test a prefill path of its own. */
AI void q6k_unpack(const uint8_t *bp, __m256i *ub) {
    prefetch_k(1, bp, NX_MM_Q6KX16_BLOCK);
#pragma GCC unroll 1
    for (int g = 0; g < 16; g++) {
        const uint8_t *gp = bp + 320 + 192 * g;
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            q6_codes(gp, h, ub + 8 * g + 4 * h);
        }
    }
}
AI void q6k_half_ub(const int NR, const int h, const uint8_t *bp, const __m256i *ub, const nx_mm_act *a, int64_t sb,
                    __m256 *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(bp + 16 * h)));
    __m256 t[6];
    q6_start(NR, h, dw, bp, a, sb, t);
#pragma GCC unroll 1
    for (int p = 0; p < 8; p++) {
        const __m256i P = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bp + 32 + 32 * p + 16 * h)));
#pragma GCC unroll 2
        for (int e = 0; e < 2; e++) {
            const int g = 2 * p + e;
            const __m256i *u = ub + 8 * g + 4 * h;
            __asm__("" : "+r"(u));   /* loaded here, not hoisted */
            const __m256i S = e ? _mm256_srai_epi32(P, 16) : _mm256_srai_epi32(_mm256_slli_epi32(P, 16), 16);
            const __m256 D = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(S));
            const uint8_t *q0 = a->q + 256 * sb + 16 * g;
            __m256i s01[6], s23[6];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i W = _mm256_load_si256(u + k);
#pragma GCC unroll 6
                for (int r = 0; r < NR; r++) {
                    const __m256i pr = _mm256_maddubs_epi16(W, bcast4(q0 + r * a->q_stride + 4 * k));
                    __m256i *sp = k < 2 ? &s01[r] : &s23[r];
                    *sp = k % 2 ? _mm256_add_epi16(*sp, pr) : pr;
                    KEEP(*sp);
                }
            }
#pragma GCC unroll 6
            for (int r = 0; r < NR; r++) {
                const __m256i I = _mm256_add_epi32(_mm256_madd_epi16(s01[r], ones), _mm256_madd_epi16(s23[r], ones));
                t[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), D, t[r]);
            }
        }
    }
    k_end(NR, h, t, a, sb, acc);
}
AI void q6k_both(const int NR, const uint8_t *bp, const __m256i *ub, const nx_mm_act *a, int64_t sb, __m256 *acc) {
    q6k_half_ub(NR, 0, bp, ub, a, sb, acc);
    q6k_half_ub(NR, 1, bp, ub, a, sb, acc);
}
#ifndef NX_Q6P_MAXR
#define NX_Q6P_MAXR 4
#endif
KQ_PREFILL(q6k_prefill, q6k_unpack, q6k_both, NX_MM_Q6KX16_BLOCK, NX_Q6P_MAXR)
#define Q6_PREFILL q6k_prefill
#else
#define Q6_PREFILL ((nx_mm_pkernel)0)
#endif
PK_KERNELS_K(PK(nx_mm_pk_q6_K), q6k_step, NX_MM_Q6KX16_BLOCK, NX_Q6_MAXR, Q6_PREFILL)

/* ===== F32 / F16 / BF16 x16 =====
 * Per input k: the two 8-row halves' weights (converted exactly), one broadcast of each
 * activation row's x_k and two fmas: the contract's chain, the rows in lanes. Passes of at most
 * 6 rows (12 accumulators, 2 weight vectors, the broadcast: 15 of 16 registers) through
 * PK_KERNELS_K's driver: each converted weight vector serves 6 rows, not 4 (the conversions share
 * ports with the fmas; one thread, 64 rows, 1024 x 3584, Zen 4 at NEXTN_CPU=avx2, best of four:
 * F16 49.9 -> 53.4 MAC/ns, F32 unchanged). */
/* The k's two 8-row halves, exactly as f32. BF16: a bf16 is the top half of its f32, so one
 * 32-byte load of the k's 16 weights and two word unpacks against zero give them, in lanes of rows
 * [0-3, 8-11] and [4-7, 12-15] (the unpacks work per 128-bit half) instead of two widening loads
 * and two shifts: the same chain per (row, column), the rows put back in order once per pass
 * (bf16_fin). With 6-row passes, same harness: 4 rows 47.2 -> 51.9, 64 rows 46.2 -> 52.3 MAC/ns. */
AI void fw16(const int T, const uint8_t *p, __m256 *w0, __m256 *w1) {
    if (T == NX_TYPE_F32) {
        *w0 = _mm256_loadu_ps((const float *)p);
        *w1 = _mm256_loadu_ps((const float *)p + 8);
    } else if (T == NX_TYPE_F16) {
        *w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        *w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + 1));
    } else {
        const __m256i v = _mm256_loadu_si256((const __m256i *)p), z = _mm256_setzero_si256();
        *w0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v));
        *w1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v));
    }
}
AI void fl_step(const int T, const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m256 *acc) {
    const int es = T == NX_TYPE_F32 ? 64 : 32;
    prefetch_k(NR, bp, (size_t)32 * es);
#pragma GCC unroll 4
    for (int k = 0; k < 32; k++) {
        __m256 w0, w1;
        fw16(T, bp + k * es, &w0, &w1);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const __m256 x = _mm256_set1_ps(a->x[r * a->ldx + 32 * b + k]);
            acc[2 * r] = _mm256_fmadd_ps(w0, x, acc[2 * r]);
            acc[2 * r + 1] = _mm256_fmadd_ps(w1, x, acc[2 * r + 1]);
        }
    }
}
AI void f32_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m256 *acc) { fl_step(NX_TYPE_F32, NR, bp, a, b, acc); }
AI void f16_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m256 *acc) { fl_step(NX_TYPE_F16, NR, bp, a, b, acc); }
AI void bf16_step(const int NR, const uint8_t *bp, const nx_mm_act *a, int64_t b, __m256 *acc) { fl_step(NX_TYPE_BF16, NR, bp, a, b, acc); }
AI void bf16_fin(__m256 *acc, int n) {
    for (int r = 0; r < n; r++) {
        const __m256 p = acc[2 * r], q = acc[2 * r + 1];
        acc[2 * r] = _mm256_permute2f128_ps(p, q, 0x20);
        acc[2 * r + 1] = _mm256_permute2f128_ps(p, q, 0x31);
    }
}
PK_KERNELS_K(PK(nx_mm_pk_f32), f32_step, NX_MM_F32X16_BLOCK, 6, (nx_mm_pkernel)0)
PK_KERNELS_K(PK(nx_mm_pk_f16), f16_step, NX_MM_F16X16_BLOCK, 6, (nx_mm_pkernel)0)
PK_KERNELS_KF(PK(nx_mm_pk_bf16), bf16_step, NX_MM_F16X16_BLOCK, 6, bf16_fin)
