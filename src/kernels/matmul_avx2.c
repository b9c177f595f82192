/*
 * matmul_avx2.c — AVX2 (+FMA, F16C) matmul kernels, for x86 CPUs without AVX-512.
 *
 * Each 32 weight values are decoded once per weight row into a ymm of bytes, then dotted
 * with each activation row of the group: maddubs (u8 x s8 -> s16 pairs) and madd (-> 8 int32
 * lanes). Activations arrive as signed codes (nx_mm_act_bias_avx2; Q6_K: the unsigned byte).
 * Signed weights use the sign trick (|w| x sign(a, w)), which cannot saturate because
 * |a| <= 127; unsigned codes (Q4_1, Q5_1, Q4_K, Q5_K, Q2_K; Q3_K's offset by 4) multiply directly. The 32-value types
 * convert and scale per block; the 256-value types sum each super-block's integer dot
 * product exactly (madd by the integer sub-block scales) and convert once.
 *
 * Batch invariance: as in matmul_avx512.c — the per-row instruction sequence is the same for
 * every tile size, float ops are explicit intrinsics, one fixed horizontal-sum tree.
 * Must never: read past the last block of a weight row or past n_in activation values.
 *
 * Compiled again with NX_PK_VNNI and -mavxvnni (matmul_avx2vnni.c: nx_mm_kernel_avx2vnni, the
 * avx2_vnni level's table): the 32-value types' dots become one vpdpbusd (exact: the same
 * int32 sums, so the same bits). The 256-value types weigh each sub-block's pairs by its
 * scale inside madd, which vpdpbusd has no room for: they stay as they are.
 */
#include "kernels/matmul_impl.h"
#include "quant/blocks.h"
#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* Software prefetch distance in the weight stream (see matmul_avx512.c). */
#ifndef NX_MM_PREFETCH
#define NX_MM_PREFETCH 2048
#endif
AI void prefetch_w(const uint8_t *p, size_t bytes) {
    if (NX_MM_PREFETCH > 0)
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(p + NX_MM_PREFETCH + o), _MM_HINT_T0);
}

AI float hsum256(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

AI uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
AI uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
AI float h2f(const uint8_t *p) { return _cvtsh_ss(ld16(p)); }
AI __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* One weight row at a time; the tile's rows in groups of up to G (8, or 4 for the types whose
 * accumulators take two registers per row), each group size a separate compiled body with
 * its accumulators in registers. The groups are balanced (5 rows: one group; 9 rows: 5 + 4),
 * so no batch pays a whole weight-row pass for a lone leftover row. Which group a row lands
 * in changes nothing in its arithmetic. */
static inline int group_rows(int rem, int G) {
    const int ng = (rem + G - 1) / G;
    return (rem + ng - 1) / ng;
}
#define KERNEL_FN(name, G, CALL) \
    static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { \
        for (int64_t o = 0; o < nw; o++) { \
            const uint8_t *wo = w + (size_t)o * ws; \
            for (int r0 = 0; r0 < na;) { \
                const int nr = group_rows(na - r0, G); \
                const nx_mm_act sub = nx_mm_act_rows(a, r0); \
                float *yo = y + (int64_t)r0 * ldy + o; \
                switch (nr) { case 1: CALL(1); break; case 2: CALL(2); break; case 3: CALL(3); break; \
                              case 4: CALL(4); break; \
                              case 5: if (G > 4) CALL(5); break; case 6: if (G > 4) CALL(6); break; \
                              case 7: if (G > 4) CALL(7); break; default: if (G > 4) CALL(8); break; } \
                r0 += nr; \
            } \
        } }

/* 8 int32 lanes: sum of 4 products of signed bytes w and signed bytes x (sign trick). */
AI __m256i dot_ss(__m256i absw, __m256i w, __m256i x) {
#ifdef NX_PK_VNNI
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), absw, _mm256_sign_epi8(x, w));
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(absw, _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
#endif
}
/* Same for unsigned bytes u (< 128) and signed bytes x. */
AI __m256i dot_us(__m256i u, __m256i x) {
#ifdef NX_PK_VNNI
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
#endif
}

/* ===== Float weights: 8 lanes, one accumulator per activation row ===== */

AI __m256 wload8(const int T, const uint8_t *w, int64_t i) {
    if (T == NX_TYPE_F32) return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(w + 2 * i));
    if (T == NX_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AI void float_kernel(const int T, const int NR, int64_t n, const uint8_t *w, size_t ws, int64_t nw,
                     const nx_mm_act *a, float *y, int64_t ldy) {
    const size_t es = T == NX_TYPE_F32 ? 4 : 2;
    for (int64_t o = 0; o < nw; o++) {
        const uint8_t *wr = w + (size_t)o * ws;
        __m256 acc[NX_MM_TILE];
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256 wv = wload8(T, wr, i);
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++)
                acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(a->x + r * a->ldx + i), acc[r]);
        }
        if (i < n) {   /* tail: copy the last < 8 values into zero-padded buffers */
            uint8_t wt[32] = {0};
            memcpy(wt, wr + (size_t)i * es, (size_t)(n - i) * es);
            const __m256 wv = wload8(T, wt, 0);
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++) {
                float xt[8] = {0};
                memcpy(xt, a->x + r * a->ldx + i, (size_t)(n - i) * sizeof(float));
                acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xt), acc[r]);
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) y[r * ldy + o] = hsum256(acc[r]);
    }
}

#define FK_F32(nr) float_kernel(NX_TYPE_F32, nr, n, wo, ws, 1, &sub, yo, ldy)
#define FK_F16(nr) float_kernel(NX_TYPE_F16, nr, n, wo, ws, 1, &sub, yo, ldy)
#define FK_BF16(nr) float_kernel(NX_TYPE_BF16, nr, n, wo, ws, 1, &sub, yo, ldy)
KERNEL_FN(k_f32, 8, FK_F32)
KERNEL_FN(k_f16, 8, FK_F16)
KERNEL_FN(k_bf16, 8, FK_BF16)

/* ===== 32-value blocks ===== */

AI size_t bsize32(const int T) {
    switch (T) {
    case NX_TYPE_Q4_0: return sizeof(nx_block_q4_0);
    case NX_TYPE_Q4_1: return sizeof(nx_block_q4_1);
    case NX_TYPE_Q5_0: return sizeof(nx_block_q5_0);
    case NX_TYPE_Q5_1: return sizeof(nx_block_q5_1);
    case NX_TYPE_Q8_0: return sizeof(nx_block_q8_0);
    default: return sizeof(nx_block_iq4_nl);
    }
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles then high nibbles. */
AI __m256i nibbles16(const uint8_t *p) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p), m4 = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set. */
AI __m256i bits32(uint32_t bits) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

AI __m256i iq4_lut(__m256i n) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)nx_mm_iq4_table));
    return _mm256_shuffle_epi8(lut, n);
}

/* One block -> 32 signed bytes, scale d, min m (Q4_1 / Q5_1). */
AI __m256i dec32(const int T, const uint8_t *b, float *d, float *m) {
    *d = h2f(b);
    switch (T) {
    case NX_TYPE_Q4_0: return _mm256_sub_epi8(nibbles16(b + 2), _mm256_set1_epi8(8));
    case NX_TYPE_Q4_1: *m = h2f(b + 2); return nibbles16(b + 4);
    case NX_TYPE_Q5_0: {
        const __m256i hb = _mm256_and_si256(bits32(ld32(b + 2)), _mm256_set1_epi8(16));
        return _mm256_sub_epi8(_mm256_or_si256(nibbles16(b + 6), hb), _mm256_set1_epi8(16));
    }
    case NX_TYPE_Q5_1: {
        *m = h2f(b + 2);
        return _mm256_or_si256(nibbles16(b + 8), _mm256_and_si256(bits32(ld32(b + 4)), _mm256_set1_epi8(16)));
    }
    case NX_TYPE_Q8_0: return ld256(b + 2);
    default: return iq4_lut(nibbles16(b + 2));
    }
}

/* Activations are signed codes here (nx_mm_act_bias_avx2): the signed weight types use the
 * sign trick, Q4_1 / Q5_1 (codes 0..31) multiply directly. Per (block, row) pair: maddubs,
 * madd, convert, scale product, fma (+ the sign). (Folding four blocks' lanes with hadd to
 * share one convert / product / fma measured slower on Zen 3, the AVX2 machine at hand.) */
AI void b32_kernel(const int T, const int NR, int64_t n, const uint8_t *w, size_t ws, int64_t nw,
                   const nx_mm_act *a, const float *dt, float *y, int64_t ldy) {
    const int has_m = T == NX_TYPE_Q4_1 || T == NX_TYPE_Q5_1;   /* also: unsigned codes */
    const int64_t nb = n / 32;
    const size_t bs = bsize32(T);
    for (int64_t o = 0; o < nw; o++) {
        const uint8_t *wr = w + (size_t)o * ws;
        __m256 acc[NX_MM_TILE];
        __m128 accm[NX_MM_TILE];
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) { acc[r] = _mm256_setzero_ps(); accm[r] = _mm_setzero_ps(); }
        for (int64_t b = 0; b < nb; b++) {
            float dw, mw = 0.0f;
            if (b % 2 == 0) prefetch_w(wr + (size_t)b * bs, 2 * bs);
            const __m256i wq = dec32(T, wr + (size_t)b * bs, &dw, &mw);
            const __m256i absw = has_m ? wq : _mm256_sign_epi8(wq, wq);
            const __m256 D = _mm256_set1_ps(dw);
            const __m128 M = _mm_set_ss(mw);
            float sv[8] __attribute__((aligned(32)));
            const int use_dt = dt && NR >= 2;   /* one row: its own product is as cheap */
            if (use_dt) _mm256_store_ps(sv, _mm256_mul_ps(D, _mm256_loadu_ps(dt + 16 * b)));
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++) {
                const __m256i x = ld256(a->q + r * a->q_stride + 32 * b);
                const __m256 S = use_dt ? _mm256_broadcast_ss(sv + r) : _mm256_mul_ps(D, _mm256_broadcast_ss(a->d + r * a->d_stride + b));
                const __m256i p = has_m ? dot_us(wq, x) : dot_ss(absw, wq, x);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), S, acc[r]);
                if (has_m) accm[r] = _mm_fmadd_ss(M, _mm_load_ss(a->s + r * a->s_stride + b), accm[r]);
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) {
            float v = hsum256(acc[r]);
            if (has_m) v += _mm_cvtss_f32(accm[r]);
            y[r * ldy + o] = v;
        }
    }
}

/* The signed 32-value types take the tile's activation scales transposed once per call into
 * dt[16 b + r] (rows side by side), so a block's scale products for a whole group are one
 * vector multiply instead of one per row. The products are the same floats either way (one
 * rounding of d_w x d_a), so rows with more blocks than the buffer holds use the per-row
 * products and match bit for bit. */
#define DT_BLOCKS 256
#define KERNEL_FN_DT(name, T) \
    static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { \
        float dtb[DT_BLOCKS * 16 + 8] __attribute__((aligned(32))); \
        const int64_t nb = n / 32; \
        const int use_dt = nb <= DT_BLOCKS && na <= 16; \
        if (use_dt) \
            for (int64_t b = 0; b < nb; b++) \
                for (int r = 0; r < 16; r++) dtb[16 * b + r] = r < na ? a->d[r * a->d_stride + b] : 0.0f; \
        for (int64_t o = 0; o < nw; o++) { \
            const uint8_t *wo = w + (size_t)o * ws; \
            for (int r0 = 0; r0 < na;) { \
                const int nr = group_rows(na - r0, 8); \
                const nx_mm_act sub = nx_mm_act_rows(a, r0); \
                const float *dt = use_dt ? dtb + r0 : NULL; \
                float *yo = y + (int64_t)r0 * ldy + o; \
                switch (nr) { \
                case 1: b32_kernel(T, 1, n, wo, ws, 1, &sub, dt, yo, ldy); break; \
                case 2: b32_kernel(T, 2, n, wo, ws, 1, &sub, dt, yo, ldy); break; \
                case 3: b32_kernel(T, 3, n, wo, ws, 1, &sub, dt, yo, ldy); break; \
                case 4: b32_kernel(T, 4, n, wo, ws, 1, &sub, dt, yo, ldy); break; \
                case 5: b32_kernel(T, 5, n, wo, ws, 1, &sub, dt, yo, ldy); break; \
                case 6: b32_kernel(T, 6, n, wo, ws, 1, &sub, dt, yo, ldy); break; \
                case 7: b32_kernel(T, 7, n, wo, ws, 1, &sub, dt, yo, ldy); break; \
                default: b32_kernel(T, 8, n, wo, ws, 1, &sub, dt, yo, ldy); break; \
                } \
                r0 += nr; \
            } \
        } }

#define B32_Q4_1(nr) b32_kernel(NX_TYPE_Q4_1, nr, n, wo, ws, 1, &sub, NULL, yo, ldy)
#define B32_Q5_1(nr) b32_kernel(NX_TYPE_Q5_1, nr, n, wo, ws, 1, &sub, NULL, yo, ldy)
KERNEL_FN(k_q4_1, 4, B32_Q4_1)
KERNEL_FN(k_q5_1, 4, B32_Q5_1)
KERNEL_FN_DT(k_q4_0, NX_TYPE_Q4_0)
KERNEL_FN_DT(k_q5_0, NX_TYPE_Q5_0)
KERNEL_FN_DT(k_q8_0, NX_TYPE_Q8_0)
KERNEL_FN_DT(k_iq4_nl, NX_TYPE_IQ4_NL)

/* ===== 256-value super-blocks: 8 ymm of codes, per-lane float scales ===== */

AI size_t bsize256(const int T) {
    switch (T) {
    case NX_TYPE_Q4_K: return sizeof(nx_block_q4_K);
    case NX_TYPE_Q5_K: return sizeof(nx_block_q5_K);
    case NX_TYPE_Q6_K: return sizeof(nx_block_q6_K);
    case NX_TYPE_Q2_K: return sizeof(nx_block_q2_K);
    case NX_TYPE_Q3_K: return sizeof(nx_block_q3_K);
    default: return sizeof(nx_block_iq4_xs);
    }
}

/* SC[z] from 16 int16 group scales s16 (lane g = group g): lanes 0-7 group 2z, 8-15 group 2z + 1. */
AI void sc_pairs(__m256i s16, __m256i *SC) {
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                          2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
#pragma GCC unroll 8
    for (int z = 0; z < 8; z++) SC[z] = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(s16, _mm256_set1_epi32(z)), pick);
}

/* W[z] = values 32z..32z+31 as bytes; SC[z] their integer sub-block scales as 16 int16 lanes
 * (lane j covers values 2j, 2j+1: lanes 0-7 one group of 16, lanes 8-15 the next); *d the
 * super-block scale. Q4_K / Q5_K / Q2_K: unsigned codes, and the mins as int16 lanes M16 (lane g:
 * group g's min) with dmin. Q3_K: the unsigned code u = q + 4 (0..7), and M16 lane g = sc_g for
 * the correction 4 * sum_g sc_g * bs_g. Q6_K and IQ4_XS: signed values. */
AI void dec256(const int T, const uint8_t *blk, __m256i *W, __m256i *SC, float *d, __m256i *M16, float *dmin) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (T == NX_TYPE_Q4_K || T == NX_TYPE_Q5_K) {
        *d = h2f(blk);
        *dmin = h2f(blk + 2);
        uint8_t sc[8], m[8];
        nx_mm_k4_scales(blk + 4, sc, m);
#pragma GCC unroll 8
        for (int z = 0; z < 8; z++) SC[z] = _mm256_set1_epi16(sc[z]);
        uint64_t mm;
        memcpy(&mm, m, 8);
        const __m128i mb = _mm_cvtsi64_si128((long long)mm);
        *M16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));
        const uint8_t *qs = T == NX_TYPE_Q4_K ? ((const nx_block_q4_K *)(const void *)blk)->qs
                                              : ((const nx_block_q5_K *)(const void *)blk)->qs;
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m256i v = ld256(qs + 32 * c);
            W[2 * c] = _mm256_and_si256(v, m4);
            W[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        if (T == NX_TYPE_Q5_K) {
            const __m256i h = ld256(((const nx_block_q5_K *)(const void *)blk)->qh), c16 = _mm256_set1_epi8(16);
#pragma GCC unroll 8
            for (int z = 0; z < 8; z++) {
                const __m256i bit = _mm256_set1_epi8((char)(1 << z));   /* value 32z + i: bit z of qh[i] */
                W[z] = _mm256_or_si256(W[z], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit), c16));
            }
        }
    } else if (T == NX_TYPE_Q2_K || T == NX_TYPE_Q3_K) {
        /* value 32z + i (z = 4h + s) is bits 2s, 2s+1 of qs[32h + i]; Q3_K's third bit is bit z
         * of hmask[i] (set: code u - 4 >= 0) */
        const uint8_t *qs;
        if (T == NX_TYPE_Q2_K) {
            const nx_block_q2_K *b = (const void *)blk;
            *d = _cvtsh_ss(b->d);
            *dmin = _cvtsh_ss(b->dmin);
            const __m128i sb = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(0x0F);
            *M16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), m4));
            sc_pairs(_mm256_cvtepu8_epi16(_mm_and_si128(sb, m4)), SC);
            qs = b->qs;
        } else {
            const nx_block_q3_K *b = (const void *)blk;
            *d = _cvtsh_ss(b->d);
            uint32_t sw[4];
            nx_mm_q3k_scales(b->scales, sw);
            *M16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)sw)), _mm256_set1_epi16(32));
            sc_pairs(*M16, SC);
            qs = b->qs;
        }
        const __m256i m3 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i v = ld256(qs + 32 * h);
            W[4 * h + 0] = _mm256_and_si256(v, m3);
            W[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 2), m3);
            W[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m3);
            W[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(v, 6), m3);
        }
        if (T == NX_TYPE_Q3_K) {
            const __m256i hm = ld256(((const nx_block_q3_K *)(const void *)blk)->hmask), c4 = _mm256_set1_epi8(4);
#pragma GCC unroll 8
            for (int z = 0; z < 8; z++) {
                const __m256i bit = _mm256_set1_epi8((char)(1 << z));
                W[z] = _mm256_or_si256(W[z], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), c4));
            }
        }
    } else if (T == NX_TYPE_Q6_K) {
        const nx_block_q6_K *b = (const void *)blk;
        *d = _cvtsh_ss(b->d);
        /* 16 int8 scales -> int16; group g's scale over lanes 8(g%2)..8(g%2)+7 of SC[g/2] */
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        const __m256i lo = _mm256_permute4x64_epi64(s16, 0x44), hi = _mm256_permute4x64_epi64(s16, 0xEE);
#pragma GCC unroll 8
        for (int z = 0; z < 8; z++) {
            const __m256i src = z < 4 ? lo : hi;   /* groups 2z, 2z + 1 = int16 lanes 2(z%4), 2(z%4) + 1 of each half */
            const __m256i idx = _mm256_set_epi8(4 * (z % 4) + 3, 4 * (z % 4) + 2, 4 * (z % 4) + 3, 4 * (z % 4) + 2,
                                                4 * (z % 4) + 3, 4 * (z % 4) + 2, 4 * (z % 4) + 3, 4 * (z % 4) + 2,
                                                4 * (z % 4) + 3, 4 * (z % 4) + 2, 4 * (z % 4) + 3, 4 * (z % 4) + 2,
                                                4 * (z % 4) + 3, 4 * (z % 4) + 2, 4 * (z % 4) + 3, 4 * (z % 4) + 2,
                                                4 * (z % 4) + 1, 4 * (z % 4), 4 * (z % 4) + 1, 4 * (z % 4),
                                                4 * (z % 4) + 1, 4 * (z % 4), 4 * (z % 4) + 1, 4 * (z % 4),
                                                4 * (z % 4) + 1, 4 * (z % 4), 4 * (z % 4) + 1, 4 * (z % 4),
                                                4 * (z % 4) + 1, 4 * (z % 4), 4 * (z % 4) + 1, 4 * (z % 4));
            SC[z] = _mm256_shuffle_epi8(src, idx);
        }
        const __m256i m30 = _mm256_set1_epi8(0x30), c32 = _mm256_set1_epi8(32);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = ld256(b->ql + 64 * h), l1 = ld256(b->ql + 64 * h + 32), hb = ld256(b->qh + 32 * h);
            const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30);
            const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30);
            const __m256i h2 = _mm256_and_si256(hb, m30);
            const __m256i h3 = _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30);
            W[4 * h + 0] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, m4), h0), c32);
            W[4 * h + 1] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, m4), h1), c32);
            W[4 * h + 2] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2), c32);
            W[4 * h + 3] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3), c32);
        }
    } else { /* IQ4_XS */
        const nx_block_iq4_xs *b = (const void *)blk;
        *d = _cvtsh_ss(b->d);
#pragma GCC unroll 8
        for (int z = 0; z < 8; z++) {
            const int ls = ((b->scales_l[z / 2] >> (4 * (z % 2))) & 0xF) | (((b->scales_h >> (2 * z)) & 3) << 4);
            SC[z] = _mm256_set1_epi16((short)(ls - 32));
            W[z] = iq4_lut(nibbles16(b->qs + 16 * z));
        }
    }
}

/* Per super-block and activation row the whole integer dot product sum_g sc_g * (w . c)_g is
 * summed exactly in 8 int32 lanes (madd by the sub-block scales instead of by 1), then
 * converted and scaled once: no float op per sub-block.
 *   Q4_K / Q5_K / Q2_K: maddubs(code 0..31, c) directly (activations stored signed).
 *   Q3_K: maddubs(q + 4, c), minus 4 * sum_g sc_g * bs_g per activation row (exact, int32).
 *   Q6_K: maddubs(c + 128, w) with the stored unsigned byte (|w| <= 32: pairs <= 16320, no
 *         saturation), minus 128 * sum_g sc_g * sum w, once per weight super-block.
 *   IQ4_XS: |w| <= 127 needs the sign trick (|w| x sign(c, w)), with signed c.
 * Bounds: |lane| <= 8 sub-blocks * 2 * 2 * 255 * 32 * 128 < 2^27, so int32 is exact; the
 * float result is d_a * (d * isum - dmin * msum), the scalar reference's formula. */
AI void b256_kernel(const int T, const int NR, int64_t n, const uint8_t *w, size_t ws, int64_t nw,
                    const nx_mm_act *a, float *y, int64_t ldy) {
    const int has_m = T == NX_TYPE_Q4_K || T == NX_TYPE_Q5_K || T == NX_TYPE_Q2_K;
    const int64_t nsb = n / 256;
    const size_t bs = bsize256(T);
    const __m256i ones8 = _mm256_set1_epi8(1);
    for (int64_t o = 0; o < nw; o++) {
        const uint8_t *wr = w + (size_t)o * ws;
        __m256 acc[NX_MM_TILE];
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t sb = 0; sb < nsb; sb++) {
            __m256i W[8], SC[8], M16 = _mm256_setzero_si256(), isum[NX_MM_TILE];
            float d, dmin = 0.0f;
            prefetch_w(wr + (size_t)sb * bs, bs);
            dec256(T, wr + (size_t)sb * bs, W, SC, &d, &M16, &dmin);
            __m256i corr = _mm256_setzero_si256();
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int z = 0; z < 8; z++) {
                __m256i aw = W[z];
                if (T == NX_TYPE_Q6_K)
                    corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, W[z]), SC[z]));
                if (T == NX_TYPE_IQ4_XS) aw = _mm256_sign_epi8(W[z], W[z]);
#pragma GCC unroll 16
                for (int r = 0; r < NR; r++) {
                    const __m256i x = ld256(a->q + r * a->q_stride + 256 * sb + 32 * z);
                    __m256i p;
                    if (has_m || T == NX_TYPE_Q3_K) p = _mm256_maddubs_epi16(W[z], x);
                    else if (T == NX_TYPE_Q6_K) p = _mm256_maddubs_epi16(x, W[z]);
                    else p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, W[z]));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, SC[z]));
                }
            }
            if (T == NX_TYPE_Q6_K) corr = _mm256_slli_epi32(corr, 7);
            const __m256 D = _mm256_set1_ps(d), dmn = _mm256_set1_ps(-dmin);
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++) {
                if (T == NX_TYPE_Q6_K) isum[r] = _mm256_sub_epi32(isum[r], corr);
                if (T == NX_TYPE_Q3_K)
                    isum[r] = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(_mm256_madd_epi16(ld256(a->bs + r * a->bs_stride + 16 * sb), M16), 2));
                __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[r]), D);
                if (has_m) {
                    const __m256i ms = _mm256_madd_epi16(ld256(a->bs + r * a->bs_stride + 16 * sb), M16);
                    f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), dmn, f);
                }
                acc[r] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(a->d + r * a->d_stride + sb), acc[r]);
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) y[r * ldy + o] = hsum256(acc[r]);
    }
}

#define B256_Q4_K(nr) b256_kernel(NX_TYPE_Q4_K, nr, n, wo, ws, 1, &sub, yo, ldy)
#define B256_Q5_K(nr) b256_kernel(NX_TYPE_Q5_K, nr, n, wo, ws, 1, &sub, yo, ldy)
#define B256_Q6_K(nr) b256_kernel(NX_TYPE_Q6_K, nr, n, wo, ws, 1, &sub, yo, ldy)
#define B256_IQ4_XS(nr) b256_kernel(NX_TYPE_IQ4_XS, nr, n, wo, ws, 1, &sub, yo, ldy)
#define B256_Q2_K(nr) b256_kernel(NX_TYPE_Q2_K, nr, n, wo, ws, 1, &sub, yo, ldy)
#define B256_Q3_K(nr) b256_kernel(NX_TYPE_Q3_K, nr, n, wo, ws, 1, &sub, yo, ldy)
KERNEL_FN(k_q4_K, 8, B256_Q4_K)
KERNEL_FN(k_q5_K, 8, B256_Q5_K)
KERNEL_FN(k_q6_K, 8, B256_Q6_K)
KERNEL_FN(k_iq4_xs, 8, B256_IQ4_XS)
KERNEL_FN(k_q2_K, 8, B256_Q2_K)
KERNEL_FN(k_q3_K, 8, B256_Q3_K)

/* ===== Activation quantization (bit-identical to the scalar reference in matmul.c) ===== */

#ifndef NX_PK_VNNI   /* level-independent parts: once, in the AVX2 object */
static inline int hsum_epi32_256(__m256i v) {
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(t);
}

void nx_mm_quantize_avx2(const float *x, int64_t n, int B, int bias, uint8_t *q, float *d, float *s, int16_t *bs) {
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i vbias = _mm256_set1_epi32(bias);
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int64_t b = 0; b < n / B; b++) {
        const float *xb = x + b * B;
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < B; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb + i), absmask), m);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        int sum = 0;
        for (int g = 0; g < B; g += 16) {
            int gs = 0;
            for (int i = g; i < g + 16; i += 8) {
                __m256 v = _mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + i), vid), lo);   /* NaN -> -127 */
                const __m256i qi = _mm256_cvtps_epi32(_mm256_min_ps(v, hi));
                gs += hsum_epi32_256(qi);
                const __m256i u = _mm256_shuffle_epi8(_mm256_add_epi32(qi, vbias), pick);
                const uint32_t w0 = (uint32_t)_mm256_extract_epi32(u, 0), w1 = (uint32_t)_mm256_extract_epi32(u, 4);
                memcpy(q + b * B + i, &w0, 4);
                memcpy(q + b * B + i + 4, &w1, 4);
            }
            if (bs) bs[b * (B / 16) + g / 16] = (int16_t)gs;
            sum += gs;
        }
        d[b] = db;
        if (s) s[b] = db * (float)sum;
    }
}

uint64_t nx_mm_stream_read_avx2(const void *p, size_t n) {
    const uint8_t *b = p;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i += 128) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(b + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(b + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(b + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(b + i + 96)));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return (uint64_t)_mm_cvtsi128_si64(t) + (uint64_t)_mm_extract_epi64(t, 1);
}

#endif

#ifdef NX_PK_VNNI
nx_mm_kernel nx_mm_kernel_avx2vnni(nx_type type) {
#else
nx_mm_kernel nx_mm_kernel_avx2(nx_type type) {
#endif
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
