/*
 * matmul_avx512.c — AVX-512 (F/BW/VL/VNNI/VBMI) matmul kernels.
 *
 * One weight row is decoded once per step (two 32-blocks, or one 256 super-block) into
 * signed bytes and per-lane float scales, then dotted with each of the tile's activation
 * rows (1..16) with vpdpbusd. Activations are stored as unsigned a+128, so every dot gets a
 * correction -128*sum(w) per lane; it depends only on the weight, so it is computed once per
 * weight step and used as the accumulator's start value (exact in int32).
 *
 * Q4_K has its own kernel (below): lanes pure per sub-block, so one int->float conversion
 * per super-block and row; it reorders the activations once per call (see q4k_kernel).
 *
 * Batches of the 32-block types without mins (Q4_0, Q5_0, Q8_0, IQ4_NL) take up to 64
 * activation rows per call (nx_mm_tile_avx512) and run register tiles of 4 weight rows x 3
 * activation rows over a decoded weight panel (b32_tiled): per pair the same ops, fewer loads
 * and decodes. Batch 1 keeps the two-stream b32_pair1 / q4k_pair1 / b256_pair1.
 *
 * Batch invariance: the per-row work is the same instruction sequence whatever the tile size
 * (the tile size only changes how many rows share one decoded weight step), every float op
 * is an explicit intrinsic (no compiler contraction), and each row's 16 float lanes are
 * reduced by one fixed tree. Tests check bit-identity across tiles and threads.
 * Must never: read past the last block of a weight row or past n_in activation values.
 */
#include "kernels/matmul_impl.h"
#include "quant/blocks.h"
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* Software prefetch distance (bytes ahead in a thread's weight stream). The hardware
 * prefetchers stop at 4 KB page boundaries; this keeps enough DRAM reads in flight for a
 * single core to approach its share of the bandwidth. 0 disables. */
#ifndef NX_MM_PREFETCH
#define NX_MM_PREFETCH 2048
#endif
AI void prefetch_w(const uint8_t *p, size_t bytes) {
    if (NX_MM_PREFETCH > 0)
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(p + NX_MM_PREFETCH + o), _MM_HINT_T0);
}

AI float hsum512(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* out[i] = hsum512(v[i]) for 16 vectors, bit for bit: the same tree (lanes i + i+8, then
 * i + i+4, i + i+2, i + i+1, each add with the same first operand), run on 16 sums at once. */
AI void hsum512x16(const __m512 *v, float *out) {
    __m512 t[8], u[4], w[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44), _mm512_shuffle_f32x4(v[i], v[i + 8], 0xEE));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[i], t[i + 4], 0x88), _mm512_shuffle_f32x4(t[i], t[i + 4], 0xDD));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[i], u[i + 2], 0x44), _mm512_shuffle_ps(u[i], u[i + 2], 0xEE));
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
    /* lane 4L + m of z is the sum of v[base[L] + pos[m]] */
    const __m512i idx = _mm512_set_epi32(15, 13, 14, 12, 7, 5, 6, 4, 11, 9, 10, 8, 3, 1, 2, 0);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(idx, z));
}

AI float hsum128(__m128 b) {
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

AI uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
AI uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Two floats at p as lanes 0 and 1 of an xmm (upper lanes zero). */
AI __m128 ld2f(const float *p) { return _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)p)); }

/* One weight row at a time; the tile's rows in groups (grp512), each group a separate
 * compiled body with its accumulators in registers. */
/* Rows per group: all of them up to 8, balanced halves up to 15 (9 = 5 + 4: no batch pays a
 * second pass over the weight row for one leftover row), 16 beyond. */
static inline int grp512(int rem) { return rem >= 16 ? 16 : rem <= 8 ? rem : (rem + 1) / 2; }
#define KERNEL_FN(name, CALL) KERNEL_FN_P(name, CALL, (void)0)
#define KERNEL_FN_P(name, CALL, PAIR) \
    static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { \
        PAIR; \
        for (int64_t o = 0; o < nw; o++) { \
            const uint8_t *wo = w + (size_t)o * ws; \
            for (int r0 = 0; r0 < na;) { \
                const int nr = grp512(na - r0); \
                const nx_mm_act sub = nx_mm_act_rows(a, r0); \
                float *yo = y + (int64_t)r0 * ldy + o; \
                switch (nr) { case 1: CALL(1); break; case 2: CALL(2); break; case 3: CALL(3); break; \
                              case 4: CALL(4); break; case 5: CALL(5); break; case 6: CALL(6); break; \
                              case 7: CALL(7); break; case 8: CALL(8); break; default: CALL(16); break; } \
                r0 += nr; \
            } \
        } }

/* ===== Float weights: 16 lanes, one accumulator per activation row ===== */

AI __m512 wload16(const int T, const uint8_t *w, int64_t i) {
    if (T == NX_TYPE_F32) return _mm512_loadu_ps((const float *)w + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)(w + 2 * i));
    if (T == NX_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI __m512 wload16_mask(const int T, const uint8_t *w, int64_t i, __mmask16 m) {
    if (T == NX_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, w + 2 * i);
    if (T == NX_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI void float_kernel(const int T, const int NR, int64_t n, const uint8_t *w, size_t ws, int64_t nw,
                     const nx_mm_act *a, float *y, int64_t ldy) {
    for (int64_t o = 0; o < nw; o++) {
        const uint8_t *wr = w + (size_t)o * ws;
        __m512 acc[NX_MM_TILE];
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            const __m512 wv = wload16(T, wr, i);
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++)
                acc[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(a->x + r * a->ldx + i), acc[r]);
        }
        if (i < n) {
            const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
            const __m512 wv = wload16_mask(T, wr, i, m);
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++)
                acc[r] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, a->x + r * a->ldx + i), acc[r]);
        }
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) y[r * ldy + o] = hsum512(acc[r]);
    }
}


#define FK_CALL_NX_TYPE_F32(nr) float_kernel(NX_TYPE_F32, nr, n, wo, ws, 1, &sub, yo, ldy)
#define FK_CALL_NX_TYPE_F16(nr) float_kernel(NX_TYPE_F16, nr, n, wo, ws, 1, &sub, yo, ldy)
#define FK_CALL_NX_TYPE_BF16(nr) float_kernel(NX_TYPE_BF16, nr, n, wo, ws, 1, &sub, yo, ldy)
KERNEL_FN(k_f32, FK_CALL_NX_TYPE_F32)
KERNEL_FN(k_f16, FK_CALL_NX_TYPE_F16)
KERNEL_FN(k_bf16, FK_CALL_NX_TYPE_BF16)

/* ===== 32-value blocks, two per step ===== */

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

AI size_t qs_off32(const int T) {
    switch (T) {
    case NX_TYPE_Q4_1: return 4;
    case NX_TYPE_Q5_0: return 6;
    case NX_TYPE_Q5_1: return 8;
    default: return 2;
    }
}

/* Lanes 0-7 take element 0, lanes 8-15 element 1. */
AI __m512 spread2(__m128 v) {
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* Decode blocks b0 (and b0 + size when TWO) into 64 signed bytes (upper 32 zero when !TWO),
 * the per-lane scales D and the mins M = (m0, m1, 0, 0) for Q4_1 / Q5_1. */
AI void dec32x2(const int T, const int TWO, const uint8_t *b0, __m512i *wq, __m512 *D, __m128 *M) {
    const size_t bs = bsize32(T), off = qs_off32(T);
    const uint8_t *b1 = b0 + bs;
    uint32_t hd = ld16(b0);
    if (TWO) hd |= (uint32_t)ld16(b1) << 16;
    *D = spread2(_mm_cvtph_ps(_mm_cvtsi32_si128((int)hd)));
    if (T == NX_TYPE_Q4_1 || T == NX_TYPE_Q5_1) {
        uint32_t hm = ld16(b0 + 2);
        if (TWO) hm |= (uint32_t)ld16(b1 + 2) << 16;
        *M = _mm_cvtph_ps(_mm_cvtsi32_si128((int)hm));
    }
    if (T == NX_TYPE_Q8_0) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(b0 + off));
        *wq = TWO ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)(b1 + off)), 1)
                  : _mm512_zextsi256_si512(lo);
        return;
    }
    /* Nibble types: 128-bit lanes [qs0, qs0, qs1, qs1] -> [lo0, hi0, lo1, hi1]. */
    __m128i q0 = _mm_loadu_si128((const __m128i *)(b0 + off));
    __m128i q1 = TWO ? _mm_loadu_si128((const __m128i *)(b1 + off)) : _mm_setzero_si128();
    __m512i z = _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1));
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0));
    __m512i n = _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4), _mm512_set1_epi8(0x0F));
    __m512i r;
    switch (T) {
    case NX_TYPE_Q4_0: r = _mm512_sub_epi8(n, _mm512_set1_epi8(8)); break;
    case NX_TYPE_Q4_1: r = n; break;
    case NX_TYPE_Q5_0:
    case NX_TYPE_Q5_1: {
        uint64_t qh = ld32(b0 + (T == NX_TYPE_Q5_0 ? 2 : 4));
        if (TWO) qh |= (uint64_t)ld32(b1 + (T == NX_TYPE_Q5_0 ? 2 : 4)) << 32;
        if (T == NX_TYPE_Q5_0) r = _mm512_mask_sub_epi8(n, _cvtu64_mask64(~qh), n, _mm512_set1_epi8(16));
        else r = _mm512_mask_add_epi8(n, _cvtu64_mask64(qh), n, _mm512_set1_epi8(16));
        break;
    }
    default: /* IQ4_NL */
        r = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)nx_mm_iq4_table)), n);
        break;
    }
    *wq = TWO ? r : _mm512_zextsi256_si512(_mm512_castsi512_si256(r));
}

AI void b32_kernel(const int T, const int NR, int64_t n, const uint8_t *w, size_t ws, int64_t nw,
                   const nx_mm_act *a, float *y, int64_t ldy) {
    const int has_m = T == NX_TYPE_Q4_1 || T == NX_TYPE_Q5_1;
    const int64_t nb = n / 32;
    const size_t bs = bsize32(T);
    const __m512i c128 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    for (int64_t o = 0; o < nw; o++) {
        const uint8_t *wr = w + (size_t)o * ws;
        __m512 acc[NX_MM_TILE];
        __m128 accm[NX_MM_TILE];
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) { acc[r] = _mm512_setzero_ps(); accm[r] = _mm_setzero_ps(); }
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            __m512i wq; __m512 D; __m128 M = _mm_setzero_ps();
            prefetch_w(wr + (size_t)b * bs, 2 * bs);
            dec32x2(T, 1, wr + (size_t)b * bs, &wq, &D, &M);
            const __m512i corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, wq));
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++) {
                const __m512i I = _mm512_dpbusd_epi32(corr, _mm512_loadu_si512(a->q + r * a->q_stride + 32 * b), wq);
                const __m512 S = _mm512_mul_ps(D, _mm512_loadu_ps(a->de + r * a->de_stride + 8 * b));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), S, acc[r]);
                if (has_m) accm[r] = _mm_fmadd_ps(M, ld2f(a->s + r * a->s_stride + b), accm[r]);
            }
        }
        if (b < nb) {   /* odd block count: one block in the low half */
            __m512i wq; __m512 D; __m128 M = _mm_setzero_ps();
            dec32x2(T, 0, wr + (size_t)b * bs, &wq, &D, &M);
            const __m512i corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, wq));
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++) {
                const __m512i q = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(a->q + r * a->q_stride + 32 * b)));
                const __m512i I = _mm512_dpbusd_epi32(corr, q, wq);
                const __m512 S = _mm512_mul_ps(D, _mm512_loadu_ps(a->de + r * a->de_stride + 8 * b));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), S, acc[r]);
                if (has_m) accm[r] = _mm_fmadd_ps(M, _mm_load_ss(a->s + r * a->s_stride + b), accm[r]);
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) {
            float v = hsum512(acc[r]);
            if (has_m) v += hsum128(accm[r]);
            y[r * ldy + o] = v;
        }
    }
}


/* Batch 1: two weight rows far apart (the two halves of the call's range) advance together,
 * so each thread keeps two DRAM streams in flight and twice the independent work per step.
 * Each row's arithmetic is b32_kernel's NR = 1 sequence exactly (batch invariance holds). */
AI void b32_acc1(const int T, const uint8_t *wr, const nx_mm_act *a, int64_t b, int two, __m512 *acc, __m128 *accm) {
    const __m512i c128 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    const size_t bs = bsize32(T);
    __m512i wq; __m512 D; __m128 M = _mm_setzero_ps();
    dec32x2(T, two, wr + (size_t)b * bs, &wq, &D, &M);
    const __m512i corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, wq));
    const __m512i q = two ? _mm512_loadu_si512(a->q + 32 * b)
                          : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(a->q + 32 * b)));
    const __m512i I = _mm512_dpbusd_epi32(corr, q, wq);
    const __m512 S = _mm512_mul_ps(D, _mm512_loadu_ps(a->de + 8 * b));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), S, *acc);
    if (T == NX_TYPE_Q4_1 || T == NX_TYPE_Q5_1)
        *accm = _mm_fmadd_ps(M, two ? ld2f(a->s + b) : _mm_load_ss(a->s + b), *accm);
}

AI float b32_fin1(const int T, __m512 acc, __m128 accm) {
    float v = hsum512(acc);
    if (T == NX_TYPE_Q4_1 || T == NX_TYPE_Q5_1) v += hsum128(accm);
    return v;
}

AI void b32_pair1(const int T, int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, float *y) {
    const int64_t nb = n / 32, h = (nw + 1) / 2;
    const size_t bs = bsize32(T);
    for (int64_t o = 0; o < h; o++) {
        const bool has2 = o + h < nw;
        const uint8_t *w0 = w + (size_t)o * ws, *w1 = has2 ? w + (size_t)(o + h) * ws : w0;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        __m128 am0 = _mm_setzero_ps(), am1 = _mm_setzero_ps();
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            prefetch_w(w0 + (size_t)b * bs, 2 * bs);
            prefetch_w(w1 + (size_t)b * bs, 2 * bs);
            b32_acc1(T, w0, a, b, 1, &acc0, &am0);
            b32_acc1(T, w1, a, b, 1, &acc1, &am1);
        }
        if (b < nb) {
            b32_acc1(T, w0, a, b, 0, &acc0, &am0);
            b32_acc1(T, w1, a, b, 0, &acc1, &am1);
        }
        y[o] = b32_fin1(T, acc0, am0);
        if (has2) y[o + h] = b32_fin1(T, acc1, am1);
    }
}

/* ===== 32-value blocks, batches (na > 1): register tiles over a decoded weight panel =====
 *
 * B32T_WR weight rows are decoded once per chunk of B32T_KC steps into a panel on the stack
 * (wq, corr, D per row and step, exactly what b32_kernel computes per step); then register
 * tiles of B32T_WR weight rows x up to B32T_AR activation rows run over the chunk, so every
 * activation load serves B32T_WR weight rows and every panel load B32T_AR activation rows.
 * Accumulators live in a small stack array between chunks (stores and reloads are exact).
 * The activation scales come from the compact d (2 floats per step, spread in a register to
 * the same 16 lanes as de): half the activation bytes streamed per step.
 * Per (weight row, activation row) the float ops are b32_kernel's / b32_pair1's, in the same
 * order: I = dpbusd(corr, q, wq), S = D * de, acc = fma(cvt(I), S, acc), then hsum512.
 * Types with mins (Q4_1, Q5_1) keep b32_kernel. */
#define B32T_WR 4
#define B32T_AR 3
#define B32T_KC 16
#ifndef B32T_TILE
#define B32T_TILE 64   /* activation rows per call (nx_mm_tile_avx512), <= NX_MM_TILE_MAX */
#endif

typedef struct b32_pstep {
    __m512i wq, corr;
    __m512 D;
} b32_pstep;

/* Steps j0 .. j0+kc-1 of wr weight rows into P[s*wr + w]; step j >= nfull is the odd last block.
 * The block scales (every 32-block type here starts with its fp16 d) of 8 steps are gathered
 * and converted at once; D is then spread from them exactly as dec32x2 does (same floats). */
AI void b32t_panel(const int T, int wr, const uint8_t *w, size_t ws, int64_t j0, int kc, int64_t nb, b32_pstep *P) {
    const __m512i c128 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    const size_t bs = bsize32(T);
    const int64_t nfull = nb / 2;
    const __m512i boff = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)bs));
    const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int k = 0; k < wr; k++) {
        const uint8_t *wk = w + (size_t)k * ws;
        for (int s0 = 0; s0 < kc; s0 += 8) {
            const int64_t b0 = 2 * (j0 + s0);
            const int64_t nblk = nb - b0 < 16 ? nb - b0 : 16;
            const __m512i dw = _mm512_mask_i32gather_epi32(zero, (__mmask16)((1u << nblk) - 1), boff, wk + (size_t)b0 * bs, 1);
            const __m512 dsc = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dw));
            const int ns = kc - s0 < 8 ? kc - s0 : 8;
            for (int s = s0; s < s0 + ns; s++) {
                const int64_t j = j0 + s;
                const uint8_t *blk = wk + (size_t)(2 * j) * bs;
                __m512i wq; __m512 D; __m128 M = _mm_setzero_ps();
                if (j < nfull) dec32x2(T, 1, blk, &wq, &D, &M);
                else dec32x2(T, 0, blk, &wq, &D, &M);
                b32_pstep *p = &P[s * wr + k];
                p->wq = wq;
                p->D = _mm512_permutexvar_ps(_mm512_add_epi32(spread, _mm512_set1_epi32(2 * (s - s0))), dsc);
                p->corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, wq));
            }
        }
    }
}

/* acc[w][r] (A[w*NX_MM_TILE_MAX + r]) over kc panel steps starting at activation step j0; HALF:
 * one step, the odd last block (32 activation bytes). */
AI void b32t_micro(const int WR, const int AR, const int HALF, int first, const b32_pstep *P, int64_t j0, int kc,
                   const uint8_t *q, int64_t qs, const float *de, int64_t ds, __m512 *A) {
    __m512 acc[B32T_WR][B32T_AR];
#pragma GCC unroll 4
    for (int k = 0; k < WR; k++)
#pragma GCC unroll 4
        for (int r = 0; r < AR; r++) acc[k][r] = first ? _mm512_setzero_ps() : A[k * NX_MM_TILE_MAX + r];
    for (int s = 0; s < kc; s++) {
        const int64_t j = j0 + s;
        const b32_pstep *p = P + s * WR;
        __m512i wq[B32T_WR], corr[B32T_WR];
        __m512 D[B32T_WR];
#pragma GCC unroll 4
        for (int k = 0; k < WR; k++) { wq[k] = p[k].wq; corr[k] = p[k].corr; D[k] = p[k].D; }
#pragma GCC unroll 4
        for (int r = 0; r < AR; r++) {
            const __m512i qv = HALF ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(q + r * qs + 64 * j)))
                                    : _mm512_loadu_si512(q + r * qs + 64 * j);
            /* = de[16j .. 16j+15]: the two block scales spread, as quantize_rows lays them out */
            const __m512 dv = spread2(HALF ? _mm_load_ss(de + r * ds + 2 * j) : ld2f(de + r * ds + 2 * j));
#pragma GCC unroll 4
            for (int k = 0; k < WR; k++) {
                const __m512i I = _mm512_dpbusd_epi32(corr[k], qv, wq[k]);
                const __m512 S = _mm512_mul_ps(D[k], dv);
                acc[k][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), S, acc[k][r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < WR; k++)
#pragma GCC unroll 4
        for (int r = 0; r < AR; r++) A[k * NX_MM_TILE_MAX + r] = acc[k][r];
}

#define B32T_CASE(wr, ar) case (wr) * 8 + (ar): \
    if (half) b32t_micro(wr, ar, 1, first, P, j0, 1, q, qs, de, ds, A); \
    else b32t_micro(wr, ar, 0, first, P, j0, kc, q, qs, de, ds, A); \
    break;

static void b32t_run(int wr, int ar, int half, int first, const b32_pstep *P, int64_t j0, int kc,
                     const uint8_t *q, int64_t qs, const float *de, int64_t ds, __m512 *A) {
    switch (wr * 8 + ar) {
    B32T_CASE(1, 1) B32T_CASE(1, 2) B32T_CASE(1, 3)
    B32T_CASE(2, 1) B32T_CASE(2, 2) B32T_CASE(2, 3)
    B32T_CASE(3, 1) B32T_CASE(3, 2) B32T_CASE(3, 3)
    B32T_CASE(4, 1) B32T_CASE(4, 2) default: B32T_CASE(4, 3)
    }
}

/* Prefetch bytes [off, off + len) (clipped to the row's rb bytes) of wr rows. */
AI void b32t_prefetch(const uint8_t *w, size_t ws, int wr, int64_t off, size_t len, size_t rb) {
    if (off >= (int64_t)rb) return;
    const size_t end = (size_t)off + len < rb ? (size_t)off + len : rb;
    for (int k = 0; k < wr; k++)
        for (size_t b = (size_t)off; b < end; b += 64) _mm_prefetch((const char *)(w + (size_t)k * ws + b), _MM_HINT_T0);
}

AI void b32_tiled(const int T, int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na,
                  float *y, int64_t ldy) {
    const int64_t nb = n / 32, nfull = nb / 2, nst = (nb + 1) / 2;
    _Alignas(64) b32_pstep P[B32T_KC * B32T_WR];
    _Alignas(64) __m512 A[B32T_WR * NX_MM_TILE_MAX];
    for (int64_t o = 0; o < nw; o += B32T_WR) {
        const int wr = nw - o >= B32T_WR ? B32T_WR : (int)(nw - o);
        const uint8_t *wo = w + (size_t)o * ws;
        for (int64_t j0 = 0; j0 < nst; j0 += B32T_KC) {
            const int kc = nst - j0 < B32T_KC ? (int)(nst - j0) : B32T_KC;
            b32t_panel(T, wr, wo, ws, j0, kc, nb, P);
            /* the next panel's weight bytes, while the tiles below run (decoding is a burst of
             * loads that would otherwise wait on L2 or DRAM) */
            if (j0 + B32T_KC < nst) b32t_prefetch(wo, ws, wr, 2 * (j0 + B32T_KC) * (int64_t)bsize32(T), 2 * B32T_KC * bsize32(T), n / 32 * bsize32(T));
            else if (o + B32T_WR < nw) b32t_prefetch(wo + B32T_WR * ws, ws, nw - o - B32T_WR < B32T_WR ? (int)(nw - o - B32T_WR) : B32T_WR, 0, 2 * B32T_KC * bsize32(T), n / 32 * bsize32(T));
            const int kfull = j0 + kc > nfull ? kc - 1 : kc;
            for (int r0 = 0; r0 < na; r0 += B32T_AR) {
                const int ar = na - r0 < B32T_AR ? na - r0 : B32T_AR;
                const uint8_t *q = a->q + r0 * a->q_stride;
                const float *de = a->d + r0 * a->d_stride;
                if (kfull > 0) b32t_run(wr, ar, 0, j0 == 0, P, j0, kfull, q, a->q_stride, de, a->d_stride, A + r0);
                if (kfull < kc) b32t_run(wr, ar, 1, j0 + kfull == 0, P + kfull * wr, j0 + kfull, 1, q, a->q_stride, de, a->d_stride, A + r0);
            }
        }
        /* the wr sums of a row go out in one masked store: y rows are far apart, their lines
         * are usually not in L1 any more, and one store per line waits less than three */
        _Alignas(64) float h[B32T_WR][NX_MM_TILE_MAX];
        for (int k = 0; k < wr; k++) {
            int r = 0;
            for (; r + 16 <= na; r += 16) hsum512x16(A + k * NX_MM_TILE_MAX + r, &h[k][r]);
            for (; r < na; r++) h[k][r] = hsum512(A[k * NX_MM_TILE_MAX + r]);
        }
        const __mmask8 m = (__mmask8)((1u << wr) - 1);
        const __m128i gi = _mm_set_epi32(3 * NX_MM_TILE_MAX, 2 * NX_MM_TILE_MAX, NX_MM_TILE_MAX, 0);
        for (int r = 0; r < na; r++)
            _mm_mask_storeu_ps(y + r * ldy + o, m, _mm_mmask_i32gather_ps(_mm_setzero_ps(), m, gi, &h[0][r], 4));
    }
}

#define B32_CALL_NX_TYPE_Q4_1(nr) b32_kernel(NX_TYPE_Q4_1, nr, n, wo, ws, 1, &sub, yo, ldy)
#define B32_CALL_NX_TYPE_Q5_1(nr) b32_kernel(NX_TYPE_Q5_1, nr, n, wo, ws, 1, &sub, yo, ldy)
KERNEL_FN_P(k_q4_1, B32_CALL_NX_TYPE_Q4_1, if (na == 1) { b32_pair1(NX_TYPE_Q4_1, n, w, ws, nw, a, y); return; })
KERNEL_FN_P(k_q5_1, B32_CALL_NX_TYPE_Q5_1, if (na == 1) { b32_pair1(NX_TYPE_Q5_1, n, w, ws, nw, a, y); return; })

#ifndef B32_SMALL
#define B32_SMALL 16
#endif
AI void b32_small(const int T, int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na,
                  float *y, int64_t ldy) {
    for (int64_t o = 0; o < nw; o++) {
        const uint8_t *wo = w + (size_t)o * ws;
        for (int r0 = 0; r0 < na;) {
            const int nr = grp512(na - r0);
            const nx_mm_act sub = nx_mm_act_rows(a, r0);
            float *yo = y + (int64_t)r0 * ldy + o;
            switch (nr) {
            case 1: b32_kernel(T, 1, n, wo, ws, 1, &sub, yo, ldy); break;
            case 2: b32_kernel(T, 2, n, wo, ws, 1, &sub, yo, ldy); break;
            case 3: b32_kernel(T, 3, n, wo, ws, 1, &sub, yo, ldy); break;
            case 4: b32_kernel(T, 4, n, wo, ws, 1, &sub, yo, ldy); break;
            case 5: b32_kernel(T, 5, n, wo, ws, 1, &sub, yo, ldy); break;
            case 6: b32_kernel(T, 6, n, wo, ws, 1, &sub, yo, ldy); break;
            case 7: b32_kernel(T, 7, n, wo, ws, 1, &sub, yo, ldy); break;
            case 8: b32_kernel(T, 8, n, wo, ws, 1, &sub, yo, ldy); break;
            default: b32_kernel(T, 16, n, wo, ws, 1, &sub, yo, ldy); break;
            }
            r0 += nr;
        }
    }
}

#define B32T_FN(name, T) \
    static void name(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, int na, float *y, int64_t ldy) { \
        if (na == 1) b32_pair1(T, n, w, ws, nw, a, y); \
        else if (na <= B32_SMALL) b32_small(T, n, w, ws, nw, a, na, y, ldy); \
        else b32_tiled(T, n, w, ws, nw, a, na, y, ldy); \
    }
B32T_FN(k_q4_0, NX_TYPE_Q4_0)
B32T_FN(k_q5_0, NX_TYPE_Q5_0)
B32T_FN(k_q8_0, NX_TYPE_Q8_0)
B32T_FN(k_iq4_nl, NX_TYPE_IQ4_NL)

/* ===== 256-value super-blocks ===== */

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

/* Per-lane scales for vector z (values 64z..64z+63) from 8 sub-block scales (lanes 0-7 of s8). */
AI __m512 lanes32(__m512 s8, int z) {
    const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                         _mm512_set1_epi32(2 * z));
    return _mm512_permutexvar_ps(idx, s8);
}

/* Per-lane scales for vector z from 16 group scales (groups of 16 values). */
AI __m512 lanes16(__m512 s16, int z) {
    const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                         _mm512_set1_epi32(4 * z));
    return _mm512_permutexvar_ps(idx, s16);
}

/* Q4_K / Q5_K nibbles: 64 bytes -> W[2k] = values of chunk 2k, W[2k+1] = chunk 2k+1. */
AI void nibbles_k4(const uint8_t *qs, __m512i *W) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        const __m512i v = _mm512_loadu_si512(qs + 64 * k);
        const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        W[2 * k] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
        W[2 * k + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
    }
}

/* Decode one super-block: W[4] signed bytes (Q4_K / Q5_K / Q2_K: unsigned codes), SC[4]
 * per-lane float scales (d folded in), and for Q4_K / Q5_K / Q2_K the mins as int16 lanes
 * M16 (zmm, lanes 0..15: the min of each group of 16 values) and dmin. */
AI void dec256(const int T, const uint8_t *blk, __m512i *W, __m512 *SC, __m512i *M16, float *dmin) {
    if (T == NX_TYPE_Q4_K || T == NX_TYPE_Q5_K) {
        const nx_block_q4_K *b4 = (const void *)blk;
        const nx_block_q5_K *b5 = (const void *)blk;
        const float d = _cvtsh_ss(ld16(blk)), dm = _cvtsh_ss(ld16(blk + 2));
        const uint8_t *sc = blk + 4;
        const uint32_t w0 = ld32(sc), w1 = ld32(sc + 4), w2 = ld32(sc + 8);
        const uint32_t sc_lo = w0 & 0x3f3f3f3fu, sc_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
        const uint32_t m_lo = w1 & 0x3f3f3f3fu, m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
        const __m256 s8 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo))),
                                        _mm256_set1_ps(d));
        const __m512 s8z = _mm512_castps256_ps512(s8);
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) SC[z] = lanes32(s8z, z);
        const __m128i mb = _mm_set_epi32(0, 0, (int)m_hi, (int)m_lo);
        *M16 = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb)));
        *dmin = dm;
        if (T == NX_TYPE_Q4_K) {
            nibbles_k4(b4->qs, W);
        } else {
            nibbles_k4(b5->qs, W);
            const __m256i h = _mm256_loadu_si256((const __m256i *)b5->qh);
            const __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
            const __m512i c16 = _mm512_set1_epi8(16);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                /* value 64c + i: bit 2c of qh[i]; value 64c + 32 + i: bit 2c + 1 */
                const __m512i sel = _mm512_mask_blend_epi8(0xFFFFFFFF00000000ull, _mm512_set1_epi8((char)(1 << (2 * c))),
                                                           _mm512_set1_epi8((char)(2 << (2 * c))));
                W[c] = _mm512_mask_add_epi8(W[c], _mm512_test_epi8_mask(hz, sel), W[c], c16);
            }
        }
    } else if (T == NX_TYPE_Q2_K || T == NX_TYPE_Q3_K) {
        /* value 128h + 32s + i is bits 2s, 2s+1 of qs[32h + i], so vector z (h = z/2) takes
         * shift 4(z%2) in its low half and 4(z%2) + 2 in its high half; Q3_K's third bit of
         * value 32k + i is bit k of hmask[i] (clear: code - 4). */
        const uint8_t *qs;
        float d;
        __m512 g;
        if (T == NX_TYPE_Q2_K) {
            const nx_block_q2_K *b = (const void *)blk;
            d = _cvtsh_ss(b->d);
            *dmin = _cvtsh_ss(b->dmin);
            const __m128i sb = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(0x0F);
            *M16 = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), m4)));
            g = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(sb, m4)));
            qs = b->qs;
        } else {
            const nx_block_q3_K *b = (const void *)blk;
            d = _cvtsh_ss(b->d);
            uint32_t sw[4];
            nx_mm_q3k_scales(b->scales, sw);
            g = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sw)), _mm512_set1_epi32(32)));
            qs = b->qs;
        }
        g = _mm512_mul_ps(g, _mm512_set1_ps(d));
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) SC[z] = lanes16(g, z);
        const __m512i m3 = _mm512_set1_epi8(3);
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (z / 2)));
            const __m512i vz = _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1);
            const __m512i cnt = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * (z % 2))), _mm256_set1_epi16((short)(4 * (z % 2) + 2)), 1);
            W[z] = _mm512_and_si512(_mm512_srlv_epi16(vz, cnt), m3);
        }
        if (T == NX_TYPE_Q3_K) {
            const __m256i h = _mm256_loadu_si256((const __m256i *)((const nx_block_q3_K *)(const void *)blk)->hmask);
            const __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1), c4 = _mm512_set1_epi8(4);
#pragma GCC unroll 4
            for (int z = 0; z < 4; z++) {
                const __m512i sel = _mm512_mask_blend_epi8(0xFFFFFFFF00000000ull, _mm512_set1_epi8((char)(1 << (2 * z))),
                                                           _mm512_set1_epi8((char)(2 << (2 * z))));
                W[z] = _mm512_mask_sub_epi8(W[z], _mm512_testn_epi8_mask(hz, sel), W[z], c4);
            }
        }
    } else if (T == NX_TYPE_Q6_K) {
        const nx_block_q6_K *b = (const void *)blk;
        const float d = _cvtsh_ss(b->d);
        const __m512 g = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales))),
                                       _mm512_set1_ps(d));
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) SC[z] = lanes16(g, z);
        const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), c32 = _mm512_set1_epi8(32);
        const __m512i cnt_a = _mm512_set_epi64(0x0002000200020002ll, 0x0002000200020002ll, 0x0002000200020002ll,
                                               0x0002000200020002ll, 0x0004000400040004ll, 0x0004000400040004ll,
                                               0x0004000400040004ll, 0x0004000400040004ll);
        const __m512i cnt_b = _mm512_set_epi64(0x0002000200020002ll, 0x0002000200020002ll, 0x0002000200020002ll,
                                               0x0002000200020002ll, 0, 0, 0, 0);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512(b->ql + 64 * h);
            const __m256i hy = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
            const __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(hy), hy, 1);
            const __m512i lo = _mm512_and_si512(l, m4), hi = _mm512_and_si512(_mm512_srli_epi16(l, 4), m4);
            const __m512i ha = _mm512_and_si512(_mm512_sllv_epi16(hz, cnt_a), m30);
            const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(hz, cnt_b), m30);
            W[2 * h] = _mm512_sub_epi8(_mm512_or_si512(lo, ha), c32);
            W[2 * h + 1] = _mm512_sub_epi8(_mm512_or_si512(hi, hb), c32);
        }
    } else { /* IQ4_XS */
        const nx_block_iq4_xs *b = (const void *)blk;
        const float d = _cvtsh_ss(b->d);
        const __m256i sl = _mm256_set1_epi32((int)ld32(b->scales_l)), sh = _mm256_set1_epi32(b->scales_h);
        const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(sl, _mm256_set_epi32(28, 24, 20, 16, 12, 8, 4, 0)),
                                            _mm256_set1_epi32(15));
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(sh, _mm256_set_epi32(14, 12, 10, 8, 6, 4, 2, 0)),
                                            _mm256_set1_epi32(3));
        const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
        const __m512 s8z = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_cvtepi32_ps(ls), _mm256_set1_ps(d)));
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) SC[z] = lanes32(s8z, z);
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)nx_mm_iq4_table));
        const __m512i i0 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), i1 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    #pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
            const __m512i v = _mm512_loadu_si512(b->qs + 64 * k);
            const __m512i lo4 = _mm512_and_si512(v, m4), hi4 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            W[2 * k] = _mm512_shuffle_epi8(lut, _mm512_permutex2var_epi64(lo4, i0, hi4));
            W[2 * k + 1] = _mm512_shuffle_epi8(lut, _mm512_permutex2var_epi64(lo4, i1, hi4));
        }
    }
}

typedef struct b256_dec {
    __m512i W[4], corr[4], M16;
    __m512 SC[4], dmn;
} b256_dec;

AI void b256_decode(const int T, const uint8_t *blk, b256_dec *D) {
    const int has_m = T == NX_TYPE_Q4_K || T == NX_TYPE_Q5_K || T == NX_TYPE_Q2_K;
    const __m512i c128 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    float dmin = 0.0f;
    D->M16 = zero;
    dec256(T, blk, D->W, D->SC, &D->M16, &dmin);
    /* Q4_K / Q5_K / Q2_K: unsigned weight codes times signed activations, no correction */
    if (!has_m) {
#pragma GCC unroll 4
        for (int z = 0; z < 4; z++) D->corr[z] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, D->W[z]));
    }
    D->dmn = _mm512_set1_ps(-dmin);
}

/* acc += one super-block of one activation row (q: its 256 bytes, bs: its group sums, d: its scale). */
AI __m512 b256_dot(const int T, const b256_dec *D, const uint8_t *q, const int16_t *bs, float d, __m512 acc) {
    const int has_m = T == NX_TYPE_Q4_K || T == NX_TYPE_Q5_K || T == NX_TYPE_Q2_K;
    const __m512i zero = _mm512_setzero_si512();
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps((has_m ? _mm512_dpbusd_epi32(zero, D->W[0], _mm512_loadu_si512(q)) : _mm512_dpbusd_epi32(D->corr[0], _mm512_loadu_si512(q), D->W[0]))), D->SC[0]);
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps((has_m ? _mm512_dpbusd_epi32(zero, D->W[1], _mm512_loadu_si512(q + 64)) : _mm512_dpbusd_epi32(D->corr[1], _mm512_loadu_si512(q + 64), D->W[1]))), D->SC[1], f);
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps((has_m ? _mm512_dpbusd_epi32(zero, D->W[2], _mm512_loadu_si512(q + 128)) : _mm512_dpbusd_epi32(D->corr[2], _mm512_loadu_si512(q + 128), D->W[2]))), D->SC[2], f);
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps((has_m ? _mm512_dpbusd_epi32(zero, D->W[3], _mm512_loadu_si512(q + 192)) : _mm512_dpbusd_epi32(D->corr[3], _mm512_loadu_si512(q + 192), D->W[3]))), D->SC[3], f);
    if (has_m) {
        const __m512i bsum = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)bs));
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(bsum, D->M16)), D->dmn, f);
    }
    return _mm512_fmadd_ps(f, _mm512_set1_ps(d), acc);
}

AI void b256_kernel(const int T, const int NR, int64_t n, const uint8_t *w, size_t ws, int64_t nw,
                    const nx_mm_act *a, float *y, int64_t ldy) {
    const int64_t nsb = n / 256;
    const size_t bs = bsize256(T);
    for (int64_t o = 0; o < nw; o++) {
        const uint8_t *wr = w + (size_t)o * ws;
        __m512 acc[NX_MM_TILE];
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
        for (int64_t sb = 0; sb < nsb; sb++) {
            b256_dec D;
            prefetch_w(wr + (size_t)sb * bs, bs);
            b256_decode(T, wr + (size_t)sb * bs, &D);
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++)
                acc[r] = b256_dot(T, &D, a->q + r * a->q_stride + 256 * sb, a->bs ? a->bs + r * a->bs_stride + 16 * sb : NULL,
                                  a->d[r * a->d_stride + sb], acc[r]);
        }
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) y[r * ldy + o] = hsum512(acc[r]);
    }
}

/* Batch 1, two streams (see b32_pair1); each row's arithmetic is b256_kernel's NR = 1. */
AI void b256_pair1(const int T, int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, float *y) {
    const int64_t nsb = n / 256, h = (nw + 1) / 2;
    const size_t bs = bsize256(T);
    for (int64_t o = 0; o < h; o++) {
        const bool has2 = o + h < nw;
        const uint8_t *w0 = w + (size_t)o * ws, *w1 = has2 ? w + (size_t)(o + h) * ws : w0;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        for (int64_t sb = 0; sb < nsb; sb++) {
            b256_dec D0, D1;
            prefetch_w(w0 + (size_t)sb * bs, bs);
            prefetch_w(w1 + (size_t)sb * bs, bs);
            b256_decode(T, w0 + (size_t)sb * bs, &D0);
            b256_decode(T, w1 + (size_t)sb * bs, &D1);
            const int16_t *bsum = a->bs ? a->bs + 16 * sb : NULL;
            acc0 = b256_dot(T, &D0, a->q + 256 * sb, bsum, a->d[sb], acc0);
            acc1 = b256_dot(T, &D1, a->q + 256 * sb, bsum, a->d[sb], acc1);
        }
        y[o] = hsum512(acc0);
        if (has2) y[o + h] = hsum512(acc1);
    }
}


/* ===== Q4_K: sub-block-pure lanes ===== */

/* The 256 values of a super-block are reordered so that int32 lane j of each of the four
 * 64-byte vectors holds values of sub-block j/2 only: qword k (lanes 2k, 2k+1) of vector z
 * takes values 32k + 8z .. 32k + 8z + 7 (a qword transpose, src qword 4k+z -> dst 8z+k).
 * Then the four vpdpbusd (unsigned codes x signed activation bytes) of a super-block chain
 * into one exact int32 vector (|lane| <= 16*15*127), converted once and multiplied by the
 * per-lane scale d*sc[j/2]; the mins come from the Q8_K group sums (vpmaddwd). The weight
 * reorder is one vpermt2q per vector (shared by all rows); the activations are reordered
 * once per call into the caller's scratch (matmul.c, nx_mm_q4k_perm_avx512). */
AI void q4k_perm(const uint8_t *src, uint8_t *dst) {
    const __m512i i0 = _mm512_set_epi64(12, 8, 4, 0, 12, 8, 4, 0), i1 = _mm512_set_epi64(13, 9, 5, 1, 13, 9, 5, 1);
    const __m512i i2 = _mm512_set_epi64(14, 10, 6, 2, 14, 10, 6, 2), i3 = _mm512_set_epi64(15, 11, 7, 3, 15, 11, 7, 3);
    const __m512i a0 = _mm512_loadu_si512(src), a1 = _mm512_loadu_si512(src + 64);
    const __m512i a2 = _mm512_loadu_si512(src + 128), a3 = _mm512_loadu_si512(src + 192);
    /* lo: qwords k = 0..3 (src 0..127), hi: k = 4..7 (src 128..255); dst lane k < 4 from lo */
    const __mmask8 hi = 0xF0;
    _mm512_storeu_si512(dst, _mm512_mask_blend_epi64(hi, _mm512_permutex2var_epi64(a0, i0, a1), _mm512_permutex2var_epi64(a2, i0, a3)));
    _mm512_storeu_si512(dst + 64, _mm512_mask_blend_epi64(hi, _mm512_permutex2var_epi64(a0, i1, a1), _mm512_permutex2var_epi64(a2, i1, a3)));
    _mm512_storeu_si512(dst + 128, _mm512_mask_blend_epi64(hi, _mm512_permutex2var_epi64(a0, i2, a1), _mm512_permutex2var_epi64(a2, i2, a3)));
    _mm512_storeu_si512(dst + 192, _mm512_mask_blend_epi64(hi, _mm512_permutex2var_epi64(a0, i3, a1), _mm512_permutex2var_epi64(a2, i3, a3)));
}

typedef struct q4k_dec {
    __m512i W[4];
    __m512 SCL;
    __m256i M16;
    __m256 DMN;
} q4k_dec;

/* One super-block: codes in sub-block order, per-lane scales, the mins and -dmin. */
AI void q4k_decode(const uint8_t *blk, q4k_dec *D) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m128i sidx_p = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11);
    const __m128i sidx_q = _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7);
    const __m128i sidx_sc = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m128i sidx_m = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)ld32(blk)));   /* d, dmin */
    const float d = _mm_cvtss_f32(dd), dm = _mm_cvtss_f32(_mm_movehdup_ps(dd));
    /* 12 scale bytes -> bytes 0..7 sc[0..7], 8..15 m[0..7] (nx_mm_k4_scales, vectorized;
     * the load reads 4 bytes of qs, inside the block) */
    const __m128i v = _mm_loadu_si128((const __m128i *)(blk + 4));
    const __m128i P = _mm_shuffle_epi8(v, sidx_p), Q = _mm_shuffle_epi8(v, sidx_q);
    const __m128i Pn = _mm_and_si128(_mm_mask_blend_epi8(0xF000, P, _mm_srli_epi16(P, 4)), _mm_set1_epi8(15));
    const __m128i hi6 = _mm_or_si128(Pn, _mm_and_si128(_mm_srli_epi16(Q, 2), _mm_set1_epi8(0x30)));
    const __m128i scm = _mm_mask_blend_epi8(0xF0F0, _mm_and_si128(P, _mm_set1_epi8(63)), hi6);
    D->SCL = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(scm, sidx_sc))), _mm512_set1_ps(d));
    D->M16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scm, sidx_m));
    D->DMN = _mm256_set1_ps(-dm);
    const __m512i Q0 = _mm512_loadu_si512(blk + 16), Q1 = _mm512_loadu_si512(blk + 80);
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        const __m512i idx = _mm512_add_epi64(_mm512_set_epi64(12, 12, 8, 8, 4, 4, 0, 0), _mm512_set1_epi64(z));
        const __m512i t = _mm512_permutex2var_epi64(Q0, idx, Q1);
        D->W[z] = _mm512_and_si512(_mm512_mask_srli_epi64(t, 0xAA, t, 4), m4);
    }
}

/* acc += super-block sb of one activation row (q: its 256 permuted bytes, bs: its 16 group
 * sums, d: its scale). */
AI __m512 q4k_dot(const q4k_dec *D, const uint8_t *q, const int16_t *bs, float d, __m512 acc) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i is = _mm512_dpbusd_epi32(zero, D->W[0], _mm512_loadu_si512(q));
    is = _mm512_dpbusd_epi32(is, D->W[1], _mm512_loadu_si512(q + 64));
    is = _mm512_dpbusd_epi32(is, D->W[2], _mm512_loadu_si512(q + 128));
    is = _mm512_dpbusd_epi32(is, D->W[3], _mm512_loadu_si512(q + 192));
    const __m256i bsum = _mm256_loadu_si256((const __m256i *)bs);
    const __m256 fm = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bsum, D->M16)), D->DMN);
    const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), D->SCL, _mm512_zextps256_ps512(fm));
    return _mm512_fmadd_ps(f, _mm512_set1_ps(d), acc);
}

AI void q4k_kernel(const int NR, int64_t n, const uint8_t *w, size_t ws, int64_t nw,
                   const nx_mm_act *a, float *y, int64_t ldy) {
    const int64_t nsb = n / 256;
    const size_t bs = sizeof(nx_block_q4_K);
    for (int64_t o = 0; o < nw; o++) {
        const uint8_t *wr = w + (size_t)o * ws;
        __m512 acc[NX_MM_TILE];
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
        for (int64_t sb = 0; sb < nsb; sb++) {
            const uint8_t *blk = wr + (size_t)sb * bs;
            prefetch_w(blk, bs);
            q4k_dec D;
            q4k_decode(blk, &D);
#pragma GCC unroll 16
            for (int r = 0; r < NR; r++)
                acc[r] = q4k_dot(&D, a->q + r * a->q_stride + 256 * sb, a->bs + r * a->bs_stride + 16 * sb,
                                 a->d[r * a->d_stride + sb], acc[r]);
        }
#pragma GCC unroll 16
        for (int r = 0; r < NR; r++) y[r * ldy + o] = hsum512(acc[r]);
    }
}

/* Batch 1, two streams (see b32_pair1); each row's arithmetic is q4k_kernel's NR = 1. */
AI void q4k_pair1(int64_t n, const uint8_t *w, size_t ws, int64_t nw, const nx_mm_act *a, float *y) {
    const int64_t nsb = n / 256, h = (nw + 1) / 2;
    const size_t bs = sizeof(nx_block_q4_K);
    for (int64_t o = 0; o < h; o++) {
        const bool has2 = o + h < nw;
        const uint8_t *w0 = w + (size_t)o * ws, *w1 = has2 ? w + (size_t)(o + h) * ws : w0;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        for (int64_t sb = 0; sb < nsb; sb++) {
            prefetch_w(w0 + (size_t)sb * bs, bs);
            prefetch_w(w1 + (size_t)sb * bs, bs);
            q4k_dec D0, D1;
            q4k_decode(w0 + (size_t)sb * bs, &D0);
            q4k_decode(w1 + (size_t)sb * bs, &D1);
            acc0 = q4k_dot(&D0, a->q + 256 * sb, a->bs + 16 * sb, a->d[sb], acc0);
            acc1 = q4k_dot(&D1, a->q + 256 * sb, a->bs + 16 * sb, a->d[sb], acc1);
        }
        y[o] = hsum512(acc0);
        if (has2) y[o + h] = hsum512(acc1);
    }
}

/* The AVX-512 Q4_K kernel reads activations already in its sub-block order: matmul.c permutes
 * them once per call into the caller's scratch (nx_mm_q4k_perm_avx512), so no allocation here. */
#define Q4K_CALL(nr) q4k_kernel(nr, n, wo, ws, 1, &sub, yo, ldy)
KERNEL_FN_P(k_q4_K, Q4K_CALL, if (na == 1) { q4k_pair1(n, w, ws, nw, a, y); return; })

void nx_mm_q4k_perm_avx512(const uint8_t *src, uint8_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 256) q4k_perm(src + i, dst + i);
}

#define B256_CALL_NX_TYPE_Q5_K(nr) b256_kernel(NX_TYPE_Q5_K, nr, n, wo, ws, 1, &sub, yo, ldy)
#define B256_CALL_NX_TYPE_Q6_K(nr) b256_kernel(NX_TYPE_Q6_K, nr, n, wo, ws, 1, &sub, yo, ldy)
#define B256_CALL_NX_TYPE_IQ4_XS(nr) b256_kernel(NX_TYPE_IQ4_XS, nr, n, wo, ws, 1, &sub, yo, ldy)
KERNEL_FN_P(k_q5_K, B256_CALL_NX_TYPE_Q5_K, if (na == 1) { b256_pair1(NX_TYPE_Q5_K, n, w, ws, nw, a, y); return; })
KERNEL_FN_P(k_q6_K, B256_CALL_NX_TYPE_Q6_K, if (na == 1) { b256_pair1(NX_TYPE_Q6_K, n, w, ws, nw, a, y); return; })
KERNEL_FN_P(k_iq4_xs, B256_CALL_NX_TYPE_IQ4_XS, if (na == 1) { b256_pair1(NX_TYPE_IQ4_XS, n, w, ws, nw, a, y); return; })
#define B256_CALL_NX_TYPE_Q2_K(nr) b256_kernel(NX_TYPE_Q2_K, nr, n, wo, ws, 1, &sub, yo, ldy)
#define B256_CALL_NX_TYPE_Q3_K(nr) b256_kernel(NX_TYPE_Q3_K, nr, n, wo, ws, 1, &sub, yo, ldy)
KERNEL_FN_P(k_q2_K, B256_CALL_NX_TYPE_Q2_K, if (na == 1) { b256_pair1(NX_TYPE_Q2_K, n, w, ws, nw, a, y); return; })
KERNEL_FN_P(k_q3_K, B256_CALL_NX_TYPE_Q3_K, if (na == 1) { b256_pair1(NX_TYPE_Q3_K, n, w, ws, nw, a, y); return; })

/* ===== Activation quantization (bit-identical to the scalar reference in matmul.c) ===== */

void nx_mm_quantize_avx512(const float *x, int64_t n, int B, int bias, uint8_t *q, float *d, float *s, int16_t *bs) {
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    const __m512i vbias = _mm512_set1_epi32(bias);
    for (int64_t b = 0; b < n / B; b++) {
        const float *xb = x + b * B;
        __m512 m = _mm512_setzero_ps();
        for (int i = 0; i < B; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + i)), m);  /* NaN -> m */
        const float amax = _mm512_reduce_max_ps(m);
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        const __m512 vid = _mm512_set1_ps(id);
        int sum = 0;
        for (int i = 0; i < B; i += 16) {
            __m512 v = _mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + i), vid), lo);   /* NaN -> -127 */
            const __m512i qi = _mm512_cvtps_epi32(_mm512_min_ps(v, hi));
            const int gs = _mm512_reduce_add_epi32(qi);
            _mm_storeu_si128((__m128i *)(q + b * B + i), _mm512_cvtepi32_epi8(_mm512_add_epi32(qi, vbias)));
            if (bs) bs[b * (B / 16) + i / 16] = (int16_t)gs;
            sum += gs;
        }
        d[b] = db;
        if (s) s[b] = db * (float)sum;
    }
}

uint64_t nx_mm_stream_read_avx512(const void *p, size_t n) {
    const uint8_t *b = p;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512(b + i));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512(b + i + 64));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512(b + i + 128));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512(b + i + 192));
    }
    /* reduce in unsigned arithmetic: the intrinsic's reduction adds signed lanes (UB on wrap) */
    _Alignas(64) uint64_t lanes[8];
    _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    uint64_t sum = 0;
    for (int i = 0; i < 8; i++) sum += lanes[i];
    return sum;
}

int nx_mm_tile_avx512(nx_type type) {
    switch (type) {
    case NX_TYPE_Q4_0: case NX_TYPE_Q5_0: case NX_TYPE_Q8_0: case NX_TYPE_IQ4_NL: return B32T_TILE;
    default: return NX_MM_TILE;
    }
}

nx_mm_kernel nx_mm_kernel_avx512(nx_type type) {
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
