/*
 * attn_avx2.c — nx_attn's tier pieces with AVX2 + FMA + F16C: the 16 lanes of dot16 are two
 * ymm halves (lanes 0-7, 8-15), so the contract's first reduction step is their sum; four
 * queries share each key load (3 queries x 2 keys from the float tile buffer). Q8_0 / Q4_0 keys (the integer Q.K contract) go 8 keys per ymm
 * through maddubs from a transposed tile (k_prep). Bit-identical to the scalar reference in
 * attn.c; heads whose sizes are not multiples of 16 take the scalar path.
 */
#include <immintrin.h>
#include <string.h>
#include "core/fp16.h"
#include "kernels/attn.h"
#include "kernels/attn_impl.h"
#include "quant/blocks.h"

/* lanes i + i+8, then i + i+4 of a 16-lane sum held as (lo, hi) */
static inline __m128 reduce_to4(__m256 lo, __m256 hi) {
    const __m256 v8 = _mm256_add_ps(lo, hi);
    return _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
}

/* the last two steps (i + i+2, i + i+1) of four sums at once: lane i of the result is x_i's */
static inline __m128 reduce4x4(__m128 x0, __m128 x1, __m128 x2, __m128 x3) {
    const __m128d a = _mm_castps_pd(x0), b = _mm_castps_pd(x1), c = _mm_castps_pd(x2), d = _mm_castps_pd(x3);
    const __m128 u = _mm_add_ps(_mm_castpd_ps(_mm_unpacklo_pd(a, b)), _mm_castpd_ps(_mm_unpackhi_pd(a, b)));
    const __m128 w = _mm_add_ps(_mm_castpd_ps(_mm_unpacklo_pd(c, d)), _mm_castpd_ps(_mm_unpackhi_pd(c, d)));
    return _mm_add_ps(_mm_shuffle_ps(u, w, 0x88), _mm_shuffle_ps(u, w, 0xDD));
}

static inline float reduce1(__m256 lo, __m256 hi) {
    const __m128 v4 = reduce_to4(lo, hi);
    const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    return _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)));
}

#define NX_INLINE static inline __attribute__((always_inline))
#define NX_REG(x) __asm__("" : "+x"(x))

/* Values d..d+7 (d a multiple of 8) of a cache row of type t as floats: exactly what row_f32
 * writes, converted in registers (a decode reads each row once, so a tile buffer would only
 * add a store and a load per value). t is a constant at every call site. */
NX_INLINE __m256 ld8(nx_type t, const void *row, int d) {
    if (t == NX_TYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const nx_half *)row + d)));
    if (t == NX_TYPE_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d))), 16));
    if (t == NX_TYPE_Q8_0) {
        const nx_block_q8_0 *b = (const nx_block_q8_0 *)row + d / 32;
        const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + (d & 31))));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_cvtph_ps(_mm_set1_epi16((short)b->d)));
    }
    if (t == NX_TYPE_Q4_0) {
        const nx_block_q4_0 *b = (const nx_block_q4_0 *)row + d / 32;
        __m128i x = _mm_loadl_epi64((const __m128i *)(b->qs + (d & 15)));
        if (d & 16) x = _mm_srli_epi16(x, 4);
        x = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), _mm256_cvtph_ps(_mm_set1_epi16((short)b->d)));
    }
    return _mm256_loadu_ps((const float *)row + d);
}

/* S = dot16 * scale for rows of type t; four queries share each key's loads. */
NX_INLINE void scores_t(nx_type t, const float *const *q, int nq, const void *const *k, int nk, int D, float scale,
                        float *S, int ldS, ptrdiff_t pf) {
    const __m128 vs = _mm_set1_ps(scale);
    const size_t b32 = nx_row_size(t, 32), rb = nx_row_size(t, D);   /* b32: nx_attn_pf ranges without a division */
    int i = 0;
    /* Float rows (the tile buffer of a call with many queries): 3 queries x 2 keys, 12
     * accumulators, 10 loads per 12 FMAs where 4 x 1 needs 10 per 8 (and its 8 chains of FMA
     * latency just meet two FMAs a cycle). Converted rows keep 4 x 1, which converts each key
     * once for a decode's 4 GQA queries. */
    if (t == NX_TYPE_F32)
        for (; i + 3 <= nq && nq - i != 4; i += 3) {
            const float *q0 = q[i], *q1 = q[i + 1], *q2 = q[i + 2];
            for (int j = 0; j < nk; j += 2) {
                const float *k0 = k[j], *k1 = k[j + 1 < nk ? j + 1 : j];
                /* named, not an array: GCC kept an array of them in memory */
                __m256 a00l = _mm256_setzero_ps(), a00h = a00l, a01l = a00l, a01h = a00l, a10l = a00l, a10h = a00l;
                __m256 a11l = a00l, a11h = a00l, a20l = a00l, a20h = a00l, a21l = a00l, a21h = a00l;
                for (int d = 0; d < D; d += 16) {
                    /* NX_REG: each load once into a register (GCC folds it into both FMAs else) */
                    __m256 x0 = _mm256_loadu_ps(k0 + d), x1 = _mm256_loadu_ps(k1 + d), y = _mm256_loadu_ps(q0 + d);
                    NX_REG(y);
                    a00l = _mm256_fmadd_ps(y, x0, a00l); a01l = _mm256_fmadd_ps(y, x1, a01l);
                    y = _mm256_loadu_ps(q1 + d);
                    NX_REG(y);
                    a10l = _mm256_fmadd_ps(y, x0, a10l); a11l = _mm256_fmadd_ps(y, x1, a11l);
                    y = _mm256_loadu_ps(q2 + d);
                    NX_REG(y);
                    a20l = _mm256_fmadd_ps(y, x0, a20l); a21l = _mm256_fmadd_ps(y, x1, a21l);
                    x0 = _mm256_loadu_ps(k0 + d + 8); x1 = _mm256_loadu_ps(k1 + d + 8); y = _mm256_loadu_ps(q0 + d + 8);
                    NX_REG(y);
                    a00h = _mm256_fmadd_ps(y, x0, a00h); a01h = _mm256_fmadd_ps(y, x1, a01h);
                    y = _mm256_loadu_ps(q1 + d + 8);
                    NX_REG(y);
                    a10h = _mm256_fmadd_ps(y, x0, a10h); a11h = _mm256_fmadd_ps(y, x1, a11h);
                    y = _mm256_loadu_ps(q2 + d + 8);
                    NX_REG(y);
                    a20h = _mm256_fmadd_ps(y, x0, a20h); a21h = _mm256_fmadd_ps(y, x1, a21h);
                }
                /* lane i of u: (q i, k0) for i < 3, lane 3: (q0, k1); of w: (q1, k1), (q2, k1) */
                const __m128 u = _mm_mul_ps(reduce4x4(reduce_to4(a00l, a00h), reduce_to4(a10l, a10h), reduce_to4(a20l, a20h),
                                                      reduce_to4(a01l, a01h)),
                                            vs);
                const __m128 x11 = reduce_to4(a11l, a11h), x21 = reduce_to4(a21l, a21h);
                const __m128 w = _mm_mul_ps(reduce4x4(x11, x21, x11, x21), vs);
                float ru[4], rw[4];
                _mm_storeu_ps(ru, u);
                _mm_storeu_ps(rw, w);
                float *s0 = S + (size_t)i * ldS + j, *s1 = s0 + ldS, *s2 = s1 + ldS;
                s0[0] = ru[0]; s1[0] = ru[1]; s2[0] = ru[2];
                if (j + 1 < nk) { s0[1] = ru[3]; s1[1] = rw[0]; s2[1] = rw[1]; }
            }
        }
    for (; i + 4 <= nq; i += 4) {
        const float *q0 = q[i], *q1 = q[i + 1], *q2 = q[i + 2], *q3 = q[i + 3];
        for (int j = 0; j < nk; j++) {
            const void *kj = k[j];
            __m256 a0l = _mm256_setzero_ps(), a0h = a0l, a1l = a0l, a1h = a0l, a2l = a0l, a2h = a0l, a3l = a0l,
                   a3h = a0l;
            for (int d = 0; d < D; d += 16) {
                nx_attn_pf(kj, pf, ((size_t)d * b32 >> 5), ((size_t)(d + 16) * b32 >> 5), rb);
                const __m256 xl = ld8(t, kj, d), xh = ld8(t, kj, d + 8);
                a0l = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), xl, a0l);
                a0h = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d + 8), xh, a0h);
                a1l = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d), xl, a1l);
                a1h = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d + 8), xh, a1h);
                a2l = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + d), xl, a2l);
                a2h = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + d + 8), xh, a2h);
                a3l = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + d), xl, a3l);
                a3h = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + d + 8), xh, a3h);
            }
            float r[4];
            _mm_storeu_ps(r, _mm_mul_ps(reduce4x4(reduce_to4(a0l, a0h), reduce_to4(a1l, a1h), reduce_to4(a2l, a2h),
                                                  reduce_to4(a3l, a3h)),
                                        vs));
            for (int ii = 0; ii < 4; ii++) S[(size_t)(i + ii) * ldS + j] = r[ii];
        }
    }
    if (i == nq) return;
    /* the last 1-3 queries together, so each key is converted once */
    const int nr = nq - i;
    for (int j = 0; j < nk; j++) {
        __m256 lo[3], hi[3];
        for (int r = 0; r < nr; r++) lo[r] = hi[r] = _mm256_setzero_ps();
        for (int d = 0; d < D; d += 16) {
            nx_attn_pf(k[j], pf, ((size_t)d * b32 >> 5), ((size_t)(d + 16) * b32 >> 5), rb);
            const __m256 xl = ld8(t, k[j], d), xh = ld8(t, k[j], d + 8);
            for (int r = 0; r < nr; r++) {
                lo[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[i + r] + d), xl, lo[r]);
                hi[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[i + r] + d + 8), xh, hi[r]);
            }
        }
        for (int r = 0; r < nr; r++) S[(size_t)(i + r) * ldS + j] = reduce1(lo[r], hi[r]) * scale;
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

static inline __m256 exp8(__m256 x) {
    const __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(NX_ATTN_EXP_MIN), _CMP_GE_OQ);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(NX_ATTN_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-NX_ATTN_LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-NX_ATTN_LN2_LO), r);
    __m256 p = _mm256_set1_ps(NX_ATTN_P7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(NX_ATTN_P6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(NX_ATTN_P5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(NX_ATTN_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(NX_ATTN_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(NX_ATTN_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), ok);
}

static void exp_row(float *s, int n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    int j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm)));
    for (; j < n; j++) s[j] = nx_attn_exp(s[j] - m);
}

/* attn_impl.h's softmax, 8 queries at a time: each row's max from its vectors (the NaN-free
 * running max the second operand of vmaxps, which keeps it on a NaN) and its tail, the new
 * maxima and rescales as vectors, the exps by row (as exp_row), and the sums in position order
 * down the columns (one gather per key, the 8 queries in lanes). */
static void softmax(float *S, int ldS, int nr, int nk, float *m, float *c, float *ls) {
    const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
    const __m256i ix = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(ldS));
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int nb = nr - r0 < 8 ? nr - r0 : 8;
        const __m256i rm = _mm256_cmpgt_epi32(_mm256_set1_epi32(nb), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        float *Sb = S + (size_t)r0 * ldS;
        float mt[8] = {0}, mn[8];
        for (int r = 0; r < nb; r++) {
            const float *s = Sb + (size_t)r * ldS;
            __m256 x = ninf;
            int j = 0;
            for (; j + 8 <= nk; j += 8) x = _mm256_max_ps(_mm256_loadu_ps(s + j), x);
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            float v = _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
            for (; j < nk; j++) v = s[j] > v ? s[j] : v;
            mt[r] = v;
        }
        const __m256 mo = _mm256_maskload_ps(m + r0, rm), mx = _mm256_max_ps(mo, _mm256_loadu_ps(mt));
        /* e(m - m') is 0 for m = -inf already (also where m' is -inf: e(NaN) = 0) */
        _mm256_maskstore_ps(c + r0, rm, exp8(_mm256_sub_ps(mo, mx)));
        _mm256_maskstore_ps(m + r0, rm, mx);
        _mm256_storeu_ps(mn, mx);
        for (int r = 0; r < nb; r++) exp_row(Sb + (size_t)r * ldS, nk, mn[r]);
        __m256 acc = _mm256_setzero_ps();
        const __m256 rmf = _mm256_castsi256_ps(rm);
        for (int p = 0; p < nk; p++) acc = _mm256_add_ps(acc, _mm256_mask_i32gather_ps(_mm256_setzero_ps(), Sb + p, ix, rmf, 4));
        _mm256_maskstore_ps(ls + r0, rm, acc);
    }
}

/* o += E v for rows of type t: four queries share each converted chunk of v. */
NX_INLINE void pv_t(nx_type t, const float *E, int ldE, int nq, const void *const *v, int nk, float *const *o, const float *cf, int Dv,
                    ptrdiff_t pf) {
    const size_t b32 = nx_row_size(t, 32), rb = nx_row_size(t, Dv);
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        const float *e0 = E + (size_t)i * ldE, *e1 = e0 + ldE, *e2 = e1 + ldE, *e3 = e2 + ldE;
        float *o0 = o[i], *o1 = o[i + 1], *o2 = o[i + 2], *o3 = o[i + 3];
        const __m256 c0 = _mm256_set1_ps(cf[i]), c1 = _mm256_set1_ps(cf[i + 1]);
        const __m256 c2 = _mm256_set1_ps(cf[i + 2]), c3 = _mm256_set1_ps(cf[i + 3]);
        for (int d = 0; d < Dv; d += 16) {
            __m256 a0l = _mm256_mul_ps(_mm256_loadu_ps(o0 + d), c0), a0h = _mm256_mul_ps(_mm256_loadu_ps(o0 + d + 8), c0);
            __m256 a1l = _mm256_mul_ps(_mm256_loadu_ps(o1 + d), c1), a1h = _mm256_mul_ps(_mm256_loadu_ps(o1 + d + 8), c1);
            __m256 a2l = _mm256_mul_ps(_mm256_loadu_ps(o2 + d), c2), a2h = _mm256_mul_ps(_mm256_loadu_ps(o2 + d + 8), c2);
            __m256 a3l = _mm256_mul_ps(_mm256_loadu_ps(o3 + d), c3), a3h = _mm256_mul_ps(_mm256_loadu_ps(o3 + d + 8), c3);
            for (int p = 0; p < nk; p++) {
                nx_attn_pf(v[p], pf, ((size_t)d * b32 >> 5), ((size_t)(d + 16) * b32 >> 5), rb);
                const __m256 xl = ld8(t, v[p], d), xh = ld8(t, v[p], d + 8);
                __m256 w = _mm256_broadcast_ss(e0 + p);
                a0l = _mm256_fmadd_ps(w, xl, a0l); a0h = _mm256_fmadd_ps(w, xh, a0h);
                w = _mm256_broadcast_ss(e1 + p);
                a1l = _mm256_fmadd_ps(w, xl, a1l); a1h = _mm256_fmadd_ps(w, xh, a1h);
                w = _mm256_broadcast_ss(e2 + p);
                a2l = _mm256_fmadd_ps(w, xl, a2l); a2h = _mm256_fmadd_ps(w, xh, a2h);
                w = _mm256_broadcast_ss(e3 + p);
                a3l = _mm256_fmadd_ps(w, xl, a3l); a3h = _mm256_fmadd_ps(w, xh, a3h);
            }
            _mm256_storeu_ps(o0 + d, a0l); _mm256_storeu_ps(o0 + d + 8, a0h);
            _mm256_storeu_ps(o1 + d, a1l); _mm256_storeu_ps(o1 + d + 8, a1h);
            _mm256_storeu_ps(o2 + d, a2l); _mm256_storeu_ps(o2 + d + 8, a2h);
            _mm256_storeu_ps(o3 + d, a3l); _mm256_storeu_ps(o3 + d + 8, a3h);
        }
    }
    if (i == nq) return;
    /* the last 1-3 queries together, so each chunk of v is converted once */
    const int nr = nq - i;
    for (int d = 0; d < Dv; d += 16) {
        __m256 lo[3], hi[3];
        for (int r = 0; r < nr; r++) {
            const __m256 cr = _mm256_set1_ps(cf[i + r]);
            lo[r] = _mm256_mul_ps(_mm256_loadu_ps(o[i + r] + d), cr);
            hi[r] = _mm256_mul_ps(_mm256_loadu_ps(o[i + r] + d + 8), cr);
        }
        for (int p = 0; p < nk; p++) {
            nx_attn_pf(v[p], pf, ((size_t)d * b32 >> 5), ((size_t)(d + 16) * b32 >> 5), rb);
            const __m256 xl = ld8(t, v[p], d), xh = ld8(t, v[p], d + 8);
            for (int r = 0; r < nr; r++) {
                const __m256 w = _mm256_broadcast_ss(E + (size_t)(i + r) * ldE + p);
                lo[r] = _mm256_fmadd_ps(w, xl, lo[r]);
                hi[r] = _mm256_fmadd_ps(w, xh, hi[r]);
            }
        }
        for (int r = 0; r < nr; r++) _mm256_storeu_ps(o[i + r] + d, lo[r]), _mm256_storeu_ps(o[i + r] + d + 8, hi[r]);
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
    if (t == NX_TYPE_F16 && (n & 7) == 0) {
        const nx_half *x = row;
        for (int i = 0; i < n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
        return true;
    }
    if (t == NX_TYPE_Q8_0 && (n & 31) == 0) {
        const nx_block_q8_0 *b = row;
        for (int i = 0; i < n / 32; i++) {
            const __m256 d = _mm256_set1_ps(nx_half_to_f32(b[i].d));
            for (int c = 0; c < 4; c++) {
                const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b[i].qs + 8 * c)));
                _mm256_storeu_ps(dst + 32 * i + 8 * c, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
        return true;
    }
    if (t == NX_TYPE_Q4_0 && (n & 31) == 0) {
        const nx_block_q4_0 *b = row;
        const __m128i lo4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
        for (int i = 0; i < n / 32; i++) {
            const __m256 d = _mm256_set1_ps(nx_half_to_f32(b[i].d));
            const __m128i x = _mm_loadu_si128((const __m128i *)b[i].qs);
            const __m128i l = _mm_sub_epi8(_mm_and_si128(x, lo4), eight);
            const __m128i h = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), lo4), eight);
            const __m128i parts[4] = {l, _mm_srli_si128(l, 8), h, _mm_srli_si128(h, 8)};
            for (int c = 0; c < 4; c++)
                _mm256_storeu_ps(dst + 32 * i + 8 * c, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[c])), d));
        }
        return true;
    }
    return nx_attn_tier_scalar.row_f32(t, row, dst, n);
}

/* ===== the integer Q.K contract (Q8_0 / Q4_0 keys), keys in lanes =====
 * The prepared tile holds, per block b and 4-byte group g (values 4g..4g+3 of the block), the
 * tile's keys' groups side by side: row (b, g) is NX_ATTN_TILE dwords, slot j = key j; then per
 * block a row of the keys' scales as floats. A query's group, broadcast, then meets 8 keys per
 * ymm. Q8_0 codes are stored signed (AVX2 has no s8 x s8 dot: maddubs takes |k| and the query
 * with k's signs); Q4_0 as nibbles 0..15, whose query products maddubs takes directly. */

#define QK_ROW(b, g) ((size_t)((b) * 8 + (g)) * NX_ATTN_TILE * 4)   /* bytes to row (b, g) */

/* 4x4 dword transposes in each 128-bit lane: x[i] dword d -> out[d] dword i; x[0..3] then
 * hold keys 0-3 (low lane) and 4-7 (high lane), so out[d] is group d of the 8 keys. */
static inline void transpose4(const __m256i x[4], __m256i out[4]) {
    const __m256i t0 = _mm256_unpacklo_epi32(x[0], x[1]), t1 = _mm256_unpackhi_epi32(x[0], x[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(x[2], x[3]), t3 = _mm256_unpackhi_epi32(x[2], x[3]);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* 16 bytes of key i and 16 of key i + 4 in one ymm (the insert from memory needs no shuffle port) */
static inline __m256i ld2x16(const uint8_t *lo, const uint8_t *hi) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)lo)),
                                   _mm_loadu_si128((const __m128i *)hi), 1);
}

static void k_prep(const void *const *k, nx_type t, int nk, int D, void *buf, ptrdiff_t pf) {
    const int nb = D / 32;
    uint8_t *codes = buf;
    float *ds = (float *)(codes + (size_t)NX_ATTN_TILE * D);
    const size_t bs = t == NX_TYPE_Q8_0 ? sizeof(nx_block_q8_0) : sizeof(nx_block_q4_0), rb = bs * (size_t)nb;
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (int j8 = 0; j8 < nk; j8 += 8) {
        /* past the tile's last key its row again: the slots are never scored, and no row
         * outside the tile is read */
        const uint8_t *r[8];
        for (int i = 0; i < 8; i++) r[i] = k[j8 + i < nk ? j8 + i : nk - 1];
        for (int b = 0; b < nb; b++) {
            const size_t o = (size_t)b * bs;
            if (pf)
                for (int i = 0; i < 8 && j8 + i < nk; i++) nx_attn_pf(r[i], pf, o, o + bs, rb);
            __m256i x[4], y[4], gx[4], gy[4];
            if (t == NX_TYPE_Q8_0) {
                for (int i = 0; i < 4; i++) {
                    const uint8_t *a = r[i] + o + 2, *c = r[i + 4] + o + 2;   /* qs follow the half d */
                    x[i] = ld2x16(a, c);              /* groups 0-3 */
                    y[i] = ld2x16(a + 16, c + 16);    /* groups 4-7 */
                }
            } else {   /* values 0-15 are the low nibbles, 16-31 the high ones */
                for (int i = 0; i < 4; i++) {
                    const __m256i v = ld2x16(r[i] + o + 2, r[i + 4] + o + 2);
                    x[i] = _mm256_and_si256(v, lo4);
                    y[i] = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
                }
            }
            transpose4(x, gx);
            transpose4(y, gy);
            for (int g = 0; g < 4; g++) {
                _mm256_storeu_si256((__m256i *)(codes + QK_ROW(b, g) + (size_t)j8 * 4), gx[g]);
                _mm256_storeu_si256((__m256i *)(codes + QK_ROW(b, g + 4) + (size_t)j8 * 4), gy[g]);
            }
            for (int i = 0; i < 8; i++) {
                nx_half h;
                memcpy(&h, r[i] + o, sizeof h);
                ds[(size_t)b * NX_ATTN_TILE + j8 + i] = _cvtsh_ss(h);
            }
        }
    }
}

/* Scores of R queries against the 8 keys at slots s..s+7 of the prepared tile; with `tail`
 * only the first n (< 8) are read and written (masked: the slots past the tile's keys, and past
 * the prepared region, stay untouched). R, t and tail are constants at every call site, and
 * the loops over queries and groups unrolled keep the sums in registers. */
NX_INLINE void qk_vec(int R, nx_type t, bool tail, const nx_attn_qq *qq, int q0, const uint8_t *codes, const float *ds,
                      int s, int n, __m256 vs, float *S, int ldS) {
    const int nb = qq->nb;
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i ones = _mm256_set1_epi16(1);
    (void)ones;   /* unused with VNNI */
    const nx_block_q8_0 *qb[4];
    const float *qd[4];
    const int32_t *qs[4];
    __m256 acc[4];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        const size_t i = (size_t)(q0 + r) * nb;
        qb[r] = qq->blk + i;
        qd[r] = qq->d + i;
        qs[r] = qq->sum + i;
        acc[r] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const float *db = ds + (size_t)b * NX_ATTN_TILE + s;
        const __m256 dk = tail ? _mm256_maskload_ps(db, m) : _mm256_loadu_ps(db);
        __m256i is[4];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) is[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const int *kp = (const int *)(codes + QK_ROW(b, g)) + s;
            const __m256i kv = tail ? _mm256_maskload_epi32(kp, m) : _mm256_loadu_si256((const __m256i *)kp);
#ifdef NX_ATTN_VNNI
            /* VNNI: u8 x s8 into int32 lanes in one instruction; Q8_0 codes flipped to
             * unsigned (k ^ 0x80 = k + 128), the offset taken off after the block */
            const __m256i ku = t == NX_TYPE_Q8_0 ? _mm256_xor_si256(kv, _mm256_set1_epi8((char)0x80)) : kv;
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                int32_t w;
                memcpy(&w, qb[r][b].qs + 4 * g, sizeof w);
                is[r] = _mm256_dpbusd_avx_epi32(is[r], ku, _mm256_set1_epi32(w));
            }
#else
            if (t == NX_TYPE_Q8_0) {
                /* |k| * (q with k's sign): each pair sum <= 2 * 128 * 127 fits int16, two do not */
                const __m256i ak = _mm256_abs_epi8(kv);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    int32_t w;
                    memcpy(&w, qb[r][b].qs + 4 * g, sizeof w);
                    const __m256i p = _mm256_maddubs_epi16(ak, _mm256_sign_epi8(_mm256_set1_epi32(w), kv));
                    is[r] = _mm256_add_epi32(is[r], _mm256_madd_epi16(p, ones));
                }
            } else {
                /* nibble * q: 8 groups of pair sums <= 8 * 2 * 15 * 127 add exactly in int16 */
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    int32_t w;
                    memcpy(&w, qb[r][b].qs + 4 * g, sizeof w);
                    is[r] = _mm256_add_epi16(is[r], _mm256_maddubs_epi16(kv, _mm256_set1_epi32(w)));
                }
            }
#endif
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256i x = is[r];
#ifdef NX_ATTN_VNNI   /* sum (k + c) q = sum k q + c sum q, c = 128 (Q8_0) or 8 (Q4_0) */
            x = _mm256_sub_epi32(x, _mm256_slli_epi32(_mm256_set1_epi32(qs[r][b]), t == NX_TYPE_Q8_0 ? 7 : 3));
#else
            if (t == NX_TYPE_Q4_0)   /* sum (n - 8) q = sum n q - 8 sum q */
                x = _mm256_sub_epi32(_mm256_madd_epi16(x, ones), _mm256_slli_epi32(_mm256_set1_epi32(qs[r][b]), 3));
#endif
            const __m256 w = _mm256_mul_ps(_mm256_set1_ps(qd[r][b]), dk);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(x), w, acc[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        float *o = S + (size_t)r * ldS;
        const __m256 y = _mm256_mul_ps(acc[r], vs);
        if (tail) _mm256_maskstore_ps(o, m, y);
        else _mm256_storeu_ps(o, y);
    }
}

NX_INLINE void scores_qk_t(nx_type t, const nx_attn_qq *qq, int q0, int nq, const uint8_t *codes, const float *ds,
                           int j0, int nk, __m256 vs, float *S, int ldS) {
    int r = 0;
    for (; r + 4 <= nq; r += 4) {
        float *Sr = S + (size_t)r * ldS;
        int v = 0;
        for (; v + 8 <= nk; v += 8) qk_vec(4, t, false, qq, q0 + r, codes, ds, j0 + v, 8, vs, Sr + v, ldS);
        if (v < nk) qk_vec(4, t, true, qq, q0 + r, codes, ds, j0 + v, nk - v, vs, Sr + v, ldS);
    }
    if (r == nq) return;
    float *Sr = S + (size_t)r * ldS;
    for (int v = 0; v < nk; v += 8) {
        const bool tail = nk - v < 8;
        switch ((nq - r) * 2 + tail) {
        case 2: qk_vec(1, t, false, qq, q0 + r, codes, ds, j0 + v, 8, vs, Sr + v, ldS); break;
        case 3: qk_vec(1, t, true, qq, q0 + r, codes, ds, j0 + v, nk - v, vs, Sr + v, ldS); break;
        case 4: qk_vec(2, t, false, qq, q0 + r, codes, ds, j0 + v, 8, vs, Sr + v, ldS); break;
        case 5: qk_vec(2, t, true, qq, q0 + r, codes, ds, j0 + v, nk - v, vs, Sr + v, ldS); break;
        case 6: qk_vec(3, t, false, qq, q0 + r, codes, ds, j0 + v, 8, vs, Sr + v, ldS); break;
        default: qk_vec(3, t, true, qq, q0 + r, codes, ds, j0 + v, nk - v, vs, Sr + v, ldS); break;
        }
    }
}

static void scores_qk(const nx_attn_qq *qq, int q0, int nq, const void *const *k, const void *prep, int j0, int nk,
                      nx_type t, int D, float scale, float *S, int ldS) {
    if (!prep) {
        nx_attn_tier_scalar.scores_qk(qq, q0, nq, k, prep, j0, nk, t, D, scale, S, ldS);
        return;
    }
    const uint8_t *codes = prep;
    const float *ds = (const float *)(codes + (size_t)NX_ATTN_TILE * D);
    const __m256 vs = _mm256_set1_ps(scale);
    if (t == NX_TYPE_Q8_0) scores_qk_t(NX_TYPE_Q8_0, qq, q0, nq, codes, ds, j0, nk, vs, S, ldS);
    else scores_qk_t(NX_TYPE_Q4_0, qq, q0, nq, codes, ds, j0, nk, vs, S, ldS);
}

#ifdef NX_ATTN_VNNI
const nx_attn_tier nx_attn_tier_avx2vnni = {scores, exp_row, pv, row_f32, scores_kv, pv_kv, k_prep, scores_qk, softmax};
#else
const nx_attn_tier nx_attn_tier_avx2 = {scores, exp_row, pv, row_f32, scores_kv, pv_kv, k_prep, scores_qk, softmax};
#endif
