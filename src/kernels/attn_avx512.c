/*
 * attn_avx512.c — nx_attn's tier pieces with AVX-512: one zmm holds the 16 lanes of dot16, a
 * 4 x 4 block of (query, key) dot products shares its loads, and the 16 sums reduce together
 * in the contract's order (lanes i + i+8, i + i+4, i + i+2, i + i+1). Bit-identical to the
 * scalar reference in attn.c; heads whose sizes are not multiples of 16 take the scalar path.
 */
#include <immintrin.h>
#include <string.h>
#include "core/fp16.h"
#include "kernels/attn.h"
#include "kernels/attn_impl.h"
#include "quant/blocks.h"

#define NX_INLINE static inline __attribute__((always_inline))

/* Reduce 16 accumulators a[m] in the contract's order; lane 4j + i of the result is a[4i + j]. */
NX_INLINE __m512 reduce16(const __m512 *a) {
    __m512 s1[8], s2[4], s3[2];
    /* unrolled: as loops the partial sums went through the stack (a fifth of scores' time) */
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++)
        s1[t] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * t], a[2 * t + 1], 0x44),
                              _mm512_shuffle_f32x4(a[2 * t], a[2 * t + 1], 0xEE));
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++)
        s2[u] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * u], s1[2 * u + 1], 0x88),
                              _mm512_shuffle_f32x4(s1[2 * u], s1[2 * u + 1], 0xDD));
#pragma GCC unroll 2
    for (int w = 0; w < 2; w++) {
        const __m512d x = _mm512_castps_pd(s2[2 * w]), y = _mm512_castps_pd(s2[2 * w + 1]);
        s3[w] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], 0x88), _mm512_shuffle_ps(s3[0], s3[1], 0xDD));
}

NX_INLINE float reduce1(__m512 a) {
    const __m256 v8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
    const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    return _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)));
}


/* Values d..d+15 (d a multiple of 16) of a cache row of type t as floats: exactly what
 * row_f32 writes, converted in registers (a decode reads each row once, so a tile buffer
 * would only add a store and a load per value). t is a constant at every call site. */
NX_INLINE __m512 ld16(nx_type t, const void *row, int d) {
    if (t == NX_TYPE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const nx_half *)row + d)));
    if (t == NX_TYPE_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d))), 16));
    if (t == NX_TYPE_Q8_0) {
        const nx_block_q8_0 *b = (const nx_block_q8_0 *)row + d / 32;
        const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + (d & 16))));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_cvtph_ps(_mm256_set1_epi16((short)b->d)));
    }
    if (t == NX_TYPE_Q4_0) {
        const nx_block_q4_0 *b = (const nx_block_q4_0 *)row + d / 32;
        __m128i x = _mm_loadu_si128((const __m128i *)b->qs);
        if (d & 16) x = _mm_srli_epi16(x, 4);
        x = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x)), _mm512_cvtph_ps(_mm256_set1_epi16((short)b->d)));
    }
    return _mm512_loadu_ps((const float *)row + d);
}

/* S = dot16 * scale for rows of type t; a 4 x 4 block of (query, key) shares its loads. */
NX_INLINE void scores_t(nx_type t, const float *const *q, int nq, const void *const *k, int nk, int D, float scale,
                        float *S, int ldS, ptrdiff_t pf) {
    const __m512 vs = _mm512_set1_ps(scale);
    const size_t b32 = nx_row_size(t, 32), rb = nx_row_size(t, D);   /* b32: nx_attn_pf ranges without a division */
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        const float *q0 = q[i], *q1 = q[i + 1], *q2 = q[i + 2], *q3 = q[i + 3];
        for (int j = 0; j < nk; j += 4) {
            const int kb = nk - j < 4 ? nk - j : 4;
            const void *k0 = k[j], *k1 = k[j + (kb > 1)], *k2 = k[j + (kb > 2 ? 2 : 0)], *k3 = k[j + (kb > 3 ? 3 : 0)];
            __m512 a[16];
            /* straight-line zeros: a loop becomes a memset, which keeps a[] in memory */
            a[0] = a[1] = a[2] = a[3] = a[4] = a[5] = a[6] = a[7] = _mm512_setzero_ps();
            a[8] = a[9] = a[10] = a[11] = a[12] = a[13] = a[14] = a[15] = _mm512_setzero_ps();
            for (int d = 0; d < D; d += 16) {
                const size_t b0 = ((size_t)d * b32 >> 5), b1 = ((size_t)(d + 16) * b32 >> 5);
                nx_attn_pf(k0, pf, b0, b1, rb); nx_attn_pf(k1, pf, b0, b1, rb);
                nx_attn_pf(k2, pf, b0, b1, rb); nx_attn_pf(k3, pf, b0, b1, rb);
                const __m512 x0 = ld16(t, k0, d), x1 = ld16(t, k1, d);
                const __m512 x2 = ld16(t, k2, d), x3 = ld16(t, k3, d);
                __m512 y = _mm512_loadu_ps(q0 + d);
                a[0] = _mm512_fmadd_ps(y, x0, a[0]); a[1] = _mm512_fmadd_ps(y, x1, a[1]);
                a[2] = _mm512_fmadd_ps(y, x2, a[2]); a[3] = _mm512_fmadd_ps(y, x3, a[3]);
                y = _mm512_loadu_ps(q1 + d);
                a[4] = _mm512_fmadd_ps(y, x0, a[4]); a[5] = _mm512_fmadd_ps(y, x1, a[5]);
                a[6] = _mm512_fmadd_ps(y, x2, a[6]); a[7] = _mm512_fmadd_ps(y, x3, a[7]);
                y = _mm512_loadu_ps(q2 + d);
                a[8] = _mm512_fmadd_ps(y, x0, a[8]); a[9] = _mm512_fmadd_ps(y, x1, a[9]);
                a[10] = _mm512_fmadd_ps(y, x2, a[10]); a[11] = _mm512_fmadd_ps(y, x3, a[11]);
                y = _mm512_loadu_ps(q3 + d);
                a[12] = _mm512_fmadd_ps(y, x0, a[12]); a[13] = _mm512_fmadd_ps(y, x1, a[13]);
                a[14] = _mm512_fmadd_ps(y, x2, a[14]); a[15] = _mm512_fmadd_ps(y, x3, a[15]);
            }
            /* lane 4j' + i' = (q i', k j'), turned to lane 4i' + j': each query's 4 scores are
             * then one 128-bit store (16 scalar ones through the stack cost more) */
            const __m512 r = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                                   _mm512_mul_ps(reduce16(a), vs));
            const __mmask8 mk = (__mmask8)((1u << kb) - 1);
            _mm_mask_storeu_ps(S + (size_t)i * ldS + j, mk, _mm512_castps512_ps128(r));
            _mm_mask_storeu_ps(S + (size_t)(i + 1) * ldS + j, mk, _mm512_extractf32x4_ps(r, 1));
            _mm_mask_storeu_ps(S + (size_t)(i + 2) * ldS + j, mk, _mm512_extractf32x4_ps(r, 2));
            _mm_mask_storeu_ps(S + (size_t)(i + 3) * ldS + j, mk, _mm512_extractf32x4_ps(r, 3));
        }
    }
    if (i == nq) return;
    /* the last 1-3 queries: four keys at a time, so a key's conversion is shared */
    for (int j = 0; j < nk; j += 4) {
        const int kb = nk - j < 4 ? nk - j : 4;
        __m512 a[3][4];
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 4; c++) a[r][c] = _mm512_setzero_ps();
        for (int d = 0; d < D; d += 16) {
            const size_t b0 = ((size_t)d * b32 >> 5), b1 = ((size_t)(d + 16) * b32 >> 5);
            __m512 x[4];
            for (int c = 0; c < kb; c++) nx_attn_pf(k[j + c], pf, b0, b1, rb);
            for (int c = 0; c < 4; c++) x[c] = ld16(t, k[j + (c < kb ? c : 0)], d);
            for (int r = 0; r < nq - i; r++) {
                const __m512 y = _mm512_loadu_ps(q[i + r] + d);
                for (int c = 0; c < 4; c++) a[r][c] = _mm512_fmadd_ps(y, x[c], a[r][c]);
            }
        }
        for (int r = 0; r < nq - i; r++)
            for (int c = 0; c < kb; c++) S[(size_t)(i + r) * ldS + j + c] = reduce1(a[r][c]) * scale;
    }
}

static void scores(const float *const *q, int nq, const float *const *k, int nk, int D, float scale, float *S,
                   int ldS) {
    if (D & 15) {
        nx_attn_tier_scalar.scores(q, nq, k, nk, D, scale, S, ldS);
        return;
    }
    scores_t(NX_TYPE_F32, q, nq, (const void *const *)k, nk, D, scale, S, ldS, 0);
}

NX_INLINE bool scores_kv_sw(const float *const *q, int nq, const void *const *k, nx_type tk, int nk, int D,
                            float scale, float *S, int ldS, ptrdiff_t pf) {
    if (D & 31) return false;
    switch (tk) {
    case NX_TYPE_F16: scores_t(NX_TYPE_F16, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    case NX_TYPE_BF16: scores_t(NX_TYPE_BF16, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    case NX_TYPE_Q8_0: scores_t(NX_TYPE_Q8_0, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    case NX_TYPE_Q4_0: scores_t(NX_TYPE_Q4_0, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    case NX_TYPE_F32: scores_t(NX_TYPE_F32, q, nq, k, nk, D, scale, S, ldS, pf); return true;
    default: return false;
    }
}

/* pf == 0 compiled apart: its loops then carry no prefetch branches */
static bool scores_kv(const float *const *q, int nq, const void *const *k, nx_type tk, int nk, int D, float scale,
                      float *S, int ldS, ptrdiff_t pf) {
    return pf ? scores_kv_sw(q, nq, k, tk, nk, D, scale, S, ldS, pf) : scores_kv_sw(q, nq, k, tk, nk, D, scale, S, ldS, 0);
}

static inline __m512 exp16(__m512 x) {
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(NX_ATTN_EXP_MIN), _CMP_GE_OQ);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(NX_ATTN_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-NX_ATTN_LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-NX_ATTN_LN2_LO), r);
    __m512 p = _mm512_set1_ps(NX_ATTN_P7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(NX_ATTN_P6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(NX_ATTN_P5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(NX_ATTN_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(NX_ATTN_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(NX_ATTN_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, p, _mm512_castsi512_ps(e));
}

static void exp_row(float *s, int n, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    int j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(s + j, exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm)));
    if (j < n) {
        const __mmask16 mk = (__mmask16)((1u << (n - j)) - 1);
        _mm512_mask_storeu_ps(s + j, mk, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + j), vm)));
    }
}

/* attn_impl.h's softmax, 16 queries at a time: each row's max from two vectors (the NaN-free
 * running max the second operand of vmaxps, which keeps it on a NaN), the new maxima and
 * rescales as vectors, the exps by row, and the sums in position order down the columns
 * (one gather per key, the 16 queries in lanes). */
static void softmax(float *S, int ldS, int nr, int nk, float *m, float *c, float *ls) {
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    const __mmask16 k0 = nk >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nk) - 1);
    const __mmask16 k1 = nk <= 16 ? 0 : nk >= 32 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nk - 16)) - 1);
    const __m512i ix = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(ldS));
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int nb = nr - r0 < 16 ? nr - r0 : 16;
        const __mmask16 rm = (__mmask16)((1u << nb) - 1);
        float *Sb = S + (size_t)r0 * ldS;
        float mt[16] = {0}, mn[16];
        for (int r = 0; r < nb; r++) {
            const float *s = Sb + (size_t)r * ldS;
            __m512 x = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, k0, s), ninf);
            if (k1) x = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, k1, s + 16), x);
            mt[r] = _mm512_reduce_max_ps(x);
        }
        const __m512 mo = _mm512_maskz_loadu_ps(rm, m + r0), mx = _mm512_max_ps(mo, _mm512_loadu_ps(mt));
        /* e(m - m') is 0 for m = -inf already (also where m' is -inf: e(NaN) = 0) */
        _mm512_mask_storeu_ps(c + r0, rm, exp16(_mm512_sub_ps(mo, mx)));
        _mm512_mask_storeu_ps(m + r0, rm, mx);
        _mm512_storeu_ps(mn, mx);
        for (int r = 0; r < nb; r++) exp_row(Sb + (size_t)r * ldS, nk, mn[r]);
        __m512 acc = _mm512_setzero_ps();
        for (int p = 0; p < nk; p++) acc = _mm512_add_ps(acc, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rm, ix, Sb + p, 4));
        _mm512_mask_storeu_ps(ls + r0, rm, acc);
    }
}

/* o += E v for rows of type t: four queries share each converted chunk of v. */
NX_INLINE void pv_t(nx_type t, const float *E, int ldE, int nq, const void *const *v, int nk, float *const *o, const float *cf, int Dv,
                    ptrdiff_t pf) {
    const size_t b32 = nx_row_size(t, 32), rb = nx_row_size(t, Dv);
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        const float *e0 = E + (size_t)i * ldE, *e1 = e0 + ldE, *e2 = e1 + ldE, *e3 = e2 + ldE;
        int d = 0;
        for (; d + 64 <= Dv; d += 64) {
            const size_t b0 = ((size_t)d * b32 >> 5), b1 = ((size_t)(d + 64) * b32 >> 5);
            __m512 a[4][4];
            /* unrolled, so a stays in registers (as loops it went through the stack) */
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) a[r][c] = _mm512_mul_ps(_mm512_loadu_ps(o[i + r] + d + 16 * c), _mm512_set1_ps(cf[i + r]));
            for (int p = 0; p < nk; p++) {
                const void *vp = v[p];
                nx_attn_pf(vp, pf, b0, b1, rb);
                const __m512 x0 = ld16(t, vp, d), x1 = ld16(t, vp, d + 16);
                const __m512 x2 = ld16(t, vp, d + 32), x3 = ld16(t, vp, d + 48);
                const __m512 w0 = _mm512_set1_ps(e0[p]), w1 = _mm512_set1_ps(e1[p]);
                const __m512 w2 = _mm512_set1_ps(e2[p]), w3 = _mm512_set1_ps(e3[p]);
                a[0][0] = _mm512_fmadd_ps(w0, x0, a[0][0]); a[0][1] = _mm512_fmadd_ps(w0, x1, a[0][1]);
                a[0][2] = _mm512_fmadd_ps(w0, x2, a[0][2]); a[0][3] = _mm512_fmadd_ps(w0, x3, a[0][3]);
                a[1][0] = _mm512_fmadd_ps(w1, x0, a[1][0]); a[1][1] = _mm512_fmadd_ps(w1, x1, a[1][1]);
                a[1][2] = _mm512_fmadd_ps(w1, x2, a[1][2]); a[1][3] = _mm512_fmadd_ps(w1, x3, a[1][3]);
                a[2][0] = _mm512_fmadd_ps(w2, x0, a[2][0]); a[2][1] = _mm512_fmadd_ps(w2, x1, a[2][1]);
                a[2][2] = _mm512_fmadd_ps(w2, x2, a[2][2]); a[2][3] = _mm512_fmadd_ps(w2, x3, a[2][3]);
                a[3][0] = _mm512_fmadd_ps(w3, x0, a[3][0]); a[3][1] = _mm512_fmadd_ps(w3, x1, a[3][1]);
                a[3][2] = _mm512_fmadd_ps(w3, x2, a[3][2]); a[3][3] = _mm512_fmadd_ps(w3, x3, a[3][3]);
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) _mm512_storeu_ps(o[i + r] + d + 16 * c, a[r][c]);
        }
        for (; d < Dv; d += 16) {
            const size_t b0 = ((size_t)d * b32 >> 5), b1 = ((size_t)(d + 16) * b32 >> 5);
            __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(o[i] + d), _mm512_set1_ps(cf[i]));
            __m512 a1 = _mm512_mul_ps(_mm512_loadu_ps(o[i + 1] + d), _mm512_set1_ps(cf[i + 1]));
            __m512 a2 = _mm512_mul_ps(_mm512_loadu_ps(o[i + 2] + d), _mm512_set1_ps(cf[i + 2]));
            __m512 a3 = _mm512_mul_ps(_mm512_loadu_ps(o[i + 3] + d), _mm512_set1_ps(cf[i + 3]));
            for (int p = 0; p < nk; p++) {
                nx_attn_pf(v[p], pf, b0, b1, rb);
                const __m512 x = ld16(t, v[p], d);
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(e0[p]), x, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(e1[p]), x, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(e2[p]), x, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(e3[p]), x, a3);
            }
            _mm512_storeu_ps(o[i] + d, a0); _mm512_storeu_ps(o[i + 1] + d, a1);
            _mm512_storeu_ps(o[i + 2] + d, a2); _mm512_storeu_ps(o[i + 3] + d, a3);
        }
    }
    if (i == nq) return;
    /* the last 1-3 queries together, so each chunk of v is converted once */
    const int nr = nq - i;
    for (int d = 0; d < Dv; d += 16) {
        const size_t b0 = ((size_t)d * b32 >> 5), b1 = ((size_t)(d + 16) * b32 >> 5);
        __m512 a[3];
        for (int r = 0; r < nr; r++) a[r] = _mm512_mul_ps(_mm512_loadu_ps(o[i + r] + d), _mm512_set1_ps(cf[i + r]));
        for (int p = 0; p < nk; p++) {
            nx_attn_pf(v[p], pf, b0, b1, rb);
            const __m512 x = ld16(t, v[p], d);
            for (int r = 0; r < nr; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(E[(size_t)(i + r) * ldE + p]), x, a[r]);
        }
        for (int r = 0; r < nr; r++) _mm512_storeu_ps(o[i + r] + d, a[r]);
    }
}

static void pv(const float *E, int ldE, int nq, const float *const *v, int nk, float *const *o, const float *cf, int Dv) {
    if (Dv & 15) {
        nx_attn_tier_scalar.pv(E, ldE, nq, v, nk, o, cf, Dv);
        return;
    }
    pv_t(NX_TYPE_F32, E, ldE, nq, (const void *const *)v, nk, o, cf, Dv, 0);
}

NX_INLINE bool pv_kv_sw(const float *E, int ldE, int nq, const void *const *v, nx_type tv, int nk, float *const *o,
                        const float *cf, int Dv, ptrdiff_t pf) {
    if (Dv & 31) return false;
    switch (tv) {
    case NX_TYPE_F16: pv_t(NX_TYPE_F16, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    case NX_TYPE_BF16: pv_t(NX_TYPE_BF16, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    case NX_TYPE_Q8_0: pv_t(NX_TYPE_Q8_0, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    case NX_TYPE_Q4_0: pv_t(NX_TYPE_Q4_0, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    case NX_TYPE_F32: pv_t(NX_TYPE_F32, E, ldE, nq, v, nk, o, cf, Dv, pf); return true;
    default: return false;
    }
}

static bool pv_kv(const float *E, int ldE, int nq, const void *const *v, nx_type tv, int nk, float *const *o, const float *cf, int Dv,
                  ptrdiff_t pf) {
    return pf ? pv_kv_sw(E, ldE, nq, v, tv, nk, o, cf, Dv, pf) : pv_kv_sw(E, ldE, nq, v, tv, nk, o, cf, Dv, 0);
}

static bool row_f32(nx_type t, const void *row, float *dst, int n) {
    if (t == NX_TYPE_F16 && (n & 15) == 0) {
        const nx_half *x = row;
        for (int i = 0; i < n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
        return true;
    }
    if (t == NX_TYPE_Q8_0 && (n & 31) == 0) {
        const nx_block_q8_0 *b = row;
        for (int i = 0; i < n / 32; i++) {
            const __m512 d = _mm512_set1_ps(nx_half_to_f32(b[i].d));
            const __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b[i].qs));
            const __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b[i].qs + 16)));
            _mm512_storeu_ps(dst + 32 * i, _mm512_mul_ps(_mm512_cvtepi32_ps(q0), d));
            _mm512_storeu_ps(dst + 32 * i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(q1), d));
        }
        return true;
    }
    if (t == NX_TYPE_Q4_0 && (n & 31) == 0) {
        const nx_block_q4_0 *b = row;
        const __m128i lo4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
        for (int i = 0; i < n / 32; i++) {
            const __m512 d = _mm512_set1_ps(nx_half_to_f32(b[i].d));
            const __m128i x = _mm_loadu_si128((const __m128i *)b[i].qs);
            const __m128i l = _mm_sub_epi8(_mm_and_si128(x, lo4), eight);
            const __m128i h = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), lo4), eight);
            _mm512_storeu_ps(dst + 32 * i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(l)), d));
            _mm512_storeu_ps(dst + 32 * i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(h)), d));
        }
        return true;
    }
    return nx_attn_tier_scalar.row_f32(t, row, dst, n);
}

/* ===== integer Q.K (attn.h) for Q8_0 / Q4_0 keys: keys in lanes =====
 * k_prep transposes the tile once: for block b and 4-byte group g, the keys' 4 codes as
 * unsigned bytes (Q8_0: k ^ 0x80 = k + 128; Q4_0: the nibble, k + 8) side by side, dword
 * (b*8 + g)*32 + j of buf for key j; then the keys' block scales as floats (float b*32 + j after
 * the codes). scores_qk then meets 16 keys at once with one broadcast 4-byte group of the query
 * per vpdpbusd, no horizontal sums, and each lane does the contract's float ops for its key:
 * the integer sum starts at -c * (sum of the query's codes), which cancels the offset c. */

/* 16 keys' 8 dwords of one block (Z[m] = keys 2m, 2m+1) -> O[g] = the 16 keys' dword g. */
NX_INLINE void transpose16x8(__m512i *z) {
    static const int32_t ix[3][2][16] = {
        {{0, 8, 16, 24, 2, 10, 18, 26, 4, 12, 20, 28, 6, 14, 22, 30}, {1, 9, 17, 25, 3, 11, 19, 27, 5, 13, 21, 29, 7, 15, 23, 31}},
        {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}, {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
        {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}, {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}}};
#pragma GCC unroll 3
    for (int s = 0; s < 3; s++) {
        const __m512i x = _mm512_loadu_si512(ix[s][0]), y = _mm512_loadu_si512(ix[s][1]);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            if (r & (1 << s)) continue;
            const __m512i a = z[r], b = z[r | (1 << s)];
            z[r] = _mm512_permutex2var_epi32(a, x, b);
            z[r | (1 << s)] = _mm512_permutex2var_epi32(a, y, b);
        }
    }
}

/* A key block's 32 codes as 8 unsigned dwords (groups 0..7). */
NX_INLINE __m256i codes8(nx_type t, const void *row, int b) {
    if (t == NX_TYPE_Q8_0)
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)((const nx_block_q8_0 *)row + b)->qs),
                                _mm256_set1_epi8((char)0x80));
    const __m128i x = _mm_loadu_si128((const __m128i *)((const nx_block_q4_0 *)row + b)->qs), m4 = _mm_set1_epi8(0x0F);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(x, m4)), _mm_and_si128(_mm_srli_epi16(x, 4), m4), 1);
}

static void k_prep(const void *const *k, nx_type t, int nk, int D, void *buf, ptrdiff_t pf) {
    const int nb = D / 32;
    const size_t bs = t == NX_TYPE_Q8_0 ? sizeof(nx_block_q8_0) : sizeof(nx_block_q4_0), rb = bs * (size_t)nb;
    uint32_t *kt = buf;
    float *dk = (float *)(kt + (size_t)nb * 8 * NX_ATTN_TILE);
    for (int h = 0; h * 16 < nk; h++) {
        const void *rows[16];
        for (int j = 0; j < 16; j++) rows[j] = k[16 * h + j < nk ? 16 * h + j : nk - 1];   /* past nk: a valid row, unused */
        for (int b = 0; b < nb; b++) {
            __m512i z[8];
            if (pf)
                for (int j = 0; j < 16 && 16 * h + j < nk; j++) nx_attn_pf(rows[j], pf, b * bs, (b + 1) * bs, rb);
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++)
                z[m] = _mm512_inserti64x4(_mm512_castsi256_si512(codes8(t, rows[2 * m], b)), codes8(t, rows[2 * m + 1], b), 1);
            transpose16x8(z);
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) _mm512_storeu_si512(kt + (size_t)(b * 8 + g) * NX_ATTN_TILE + 16 * h, z[g]);
            uint16_t hd[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                hd[j] = t == NX_TYPE_Q8_0 ? ((const nx_block_q8_0 *)rows[j] + b)->d : ((const nx_block_q4_0 *)rows[j] + b)->d;
            _mm512_storeu_ps(dk + (size_t)b * NX_ATTN_TILE + 16 * h, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)hd)));
        }
    }
}

/* Scores of NR queries (q0..) against the 16 (masked: mk) prepared keys from j. */
NX_INLINE void qk_block(const int NR, const nx_attn_qq *qq, int q0, const uint32_t *kt, const float *dk, int j,
                        int nb, int c, float scale, __mmask16 mk, float *S, int ldS) {
    __m512 acc[4];
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i e[4], o[4];   /* two chains per query: even and odd groups */
        for (int r = 0; r < NR; r++) {
            e[r] = _mm512_set1_epi32(-c * qq->sum[(size_t)(q0 + r) * nb + b]);
            o[r] = _mm512_setzero_si512();
        }
        for (int g = 0; g < 8; g += 2) {
            const __m512i k0 = _mm512_maskz_loadu_epi32(mk, kt + (size_t)(b * 8 + g) * NX_ATTN_TILE + j);
            const __m512i k1 = _mm512_maskz_loadu_epi32(mk, kt + (size_t)(b * 8 + g + 1) * NX_ATTN_TILE + j);
            for (int r = 0; r < NR; r++) {
                const int8_t *qs = qq->blk[(size_t)(q0 + r) * nb + b].qs;
                int32_t w0, w1;
                memcpy(&w0, qs + 4 * g, 4);
                memcpy(&w1, qs + 4 * g + 4, 4);
                e[r] = _mm512_dpbusd_epi32(e[r], k0, _mm512_set1_epi32(w0));
                o[r] = _mm512_dpbusd_epi32(o[r], k1, _mm512_set1_epi32(w1));
            }
        }
        const __m512 dkv = _mm512_maskz_loadu_ps(mk, dk + (size_t)b * NX_ATTN_TILE + j);
        for (int r = 0; r < NR; r++) {
            const __m512 w = _mm512_mul_ps(_mm512_set1_ps(qq->d[(size_t)(q0 + r) * nb + b]), dkv);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(e[r], o[r])), w, acc[r]);
        }
    }
    for (int r = 0; r < NR; r++) _mm512_mask_storeu_ps(S + (size_t)r * ldS, mk, _mm512_mul_ps(acc[r], _mm512_set1_ps(scale)));
}

static void scores_qk(const nx_attn_qq *qq, int q0, int nq, const void *const *k, const void *prep, int j0, int nk,
                      nx_type t, int D, float scale, float *S, int ldS) {
    (void)k;
    const int nb = D / 32, c = t == NX_TYPE_Q8_0 ? 128 : 8;
    const uint32_t *kt = prep;
    const float *dk = (const float *)(kt + (size_t)nb * 8 * NX_ATTN_TILE);
    for (int j = 0; j < nk; j += 16) {
        const __mmask16 mk = nk - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nk - j)) - 1);
        int r = 0;
        for (; r + 4 <= nq; r += 4) qk_block(4, qq, q0 + r, kt, dk, j0 + j, nb, c, scale, mk, S + (size_t)r * ldS + j, ldS);
        switch (nq - r) {
        case 3: qk_block(3, qq, q0 + r, kt, dk, j0 + j, nb, c, scale, mk, S + (size_t)r * ldS + j, ldS); break;
        case 2: qk_block(2, qq, q0 + r, kt, dk, j0 + j, nb, c, scale, mk, S + (size_t)r * ldS + j, ldS); break;
        case 1: qk_block(1, qq, q0 + r, kt, dk, j0 + j, nb, c, scale, mk, S + (size_t)r * ldS + j, ldS); break;
        default: break;
        }
    }
}

const nx_attn_tier nx_attn_tier_avx512 = {scores, exp_row, pv, row_f32, scores_kv, pv_kv, k_prep, scores_qk, softmax};
