/* qwen35_dn_avx2.c — AVX2 + FMA DeltaNet head recurrence (see qwen35_dn.h): two passes per
 * state row (S.k, then update + clamp + store fused with Sd.q), 8 lanes, masked tail. */
#include <immintrin.h>
#include "arch/qwen35_dn.h"
#include <stdint.h>
#include <math.h>
#include <string.h>

static inline float hsum8(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* One state row: si -> di (may be equal), returns o_i. */
static inline __attribute__((always_inline)) float dn_row_o(const int WANT_O, const float *si, float *di, int dk,
                                                            const float *k, const float *q, float vi, float beta,
                                                            float decay, float scale) {
    const int nf = dk & ~7, rem = dk & 7;
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i tm = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), idx);
    const __m256 vdec = _mm256_set1_ps(decay), lo = _mm256_set1_ps(-1e6f), hi = _mm256_set1_ps(1e6f);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= nf; c += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(si + c), _mm256_loadu_ps(k + c), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(si + c + 8), _mm256_loadu_ps(k + c + 8), a1);
    }
    for (; c < nf; c += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(si + c), _mm256_loadu_ps(k + c), a0);
    if (rem) a0 = _mm256_fmadd_ps(_mm256_maskload_ps(si + c, tm), _mm256_maskload_ps(k + c, tm), a0);
    const float vn = beta * fmaf(-decay, hsum8(_mm256_add_ps(a0, a1)), vi);
    const __m256 vvn = _mm256_set1_ps(vn);
    __m256 b0 = _mm256_setzero_ps();
    for (c = 0; c < nf; c += 8) {
        __m256 y = _mm256_fmadd_ps(vdec, _mm256_loadu_ps(si + c), _mm256_mul_ps(vvn, _mm256_loadu_ps(k + c)));
        y = _mm256_min_ps(_mm256_max_ps(y, lo), hi);
        _mm256_storeu_ps(di + c, y);
        if (WANT_O) b0 = _mm256_fmadd_ps(y, _mm256_loadu_ps(q + c), b0);
    }
    if (rem) {
        __m256 y = _mm256_fmadd_ps(vdec, _mm256_maskload_ps(si + c, tm), _mm256_mul_ps(vvn, _mm256_maskload_ps(k + c, tm)));
        y = _mm256_min_ps(_mm256_max_ps(y, lo), hi);
        _mm256_maskstore_ps(di + c, tm, y);
        if (WANT_O) b0 = _mm256_fmadd_ps(y, _mm256_maskload_ps(q + c, tm), b0);
    }
    return WANT_O ? hsum8(b0) * scale : 0.0f;
}
#define dn_row(...) dn_row_o(1, __VA_ARGS__)

void qw_dn_run_avx2(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                    const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                    float *const *o);

/* hsum8's tree (lo4 + hi4, [0]+[2] | [1]+[3], their sum) for two vectors at once: x0's sum in
 * lane 0, x1's in lane 4, bit-identical to hsum8 of each. */
static inline __attribute__((always_inline)) __m256 red2(__m256 x0, __m256 x1) {
    const __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(x0, x1, 0x20), _mm256_permute2f128_ps(x0, x1, 0x31));
    const __m256 g = _mm256_add_ps(s, _mm256_permute_ps(s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_add_ps(g, _mm256_permute_ps(g, _MM_SHUFFLE(2, 3, 0, 1)));
}
static inline float lane0(__m256 x) { return _mm256_cvtss_f32(x); }
static inline float lane4(__m256 x) { return _mm_cvtss_f32(_mm256_extractf128_ps(x, 1)); }

/* Four state rows (L[r], dk % 8 == 0, in place) through the T tokens, each row with dn_row's
 * arithmetic, fused as in the AVX-512 run: token t's update pass accumulates token t+1's S.k
 * (a0: the 8-chunks at c % 16 == 0, a1: the others, as dn_row). vn goes through memory
 * (broadcast loads: the 16 registers hold the 12 accumulators and the chunk's operands). */
static inline __attribute__((always_inline)) void dn_rows4_run(float (*L)[QW_DN_RUN_MAX_DK], int T, int dk, int i,
                                                               const float *const *k, const float *const *q,
                                                               const float *const *v, const float *beta,
                                                               const float *decay, float scale, float *const *o,
                                                               float *const *Sd, const float *pf) {
    const size_t rb = (size_t)dk * sizeof(float);
    __m256 a0[4], a1[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) a0[r] = a1[r] = _mm256_setzero_ps();
    for (int c = 0; c < dk; c += 8) {
        const __m256 kc = _mm256_loadu_ps(k[0] + c);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (c & 8) a1[r] = _mm256_fmadd_ps(_mm256_load_ps(L[r] + c), kc, a1[r]);
            else a0[r] = _mm256_fmadd_ps(_mm256_load_ps(L[r] + c), kc, a0[r]);
        }
    }
    for (int t = 0; t < T; t++) {
        const int WANT_O = o[t] != NULL, NEXT = t + 1 < T;
        const float dec = decay[t];
        const __m256 R01 = red2(_mm256_add_ps(a0[0], a1[0]), _mm256_add_ps(a0[1], a1[1]));
        const __m256 R23 = red2(_mm256_add_ps(a0[2], a1[2]), _mm256_add_ps(a0[3], a1[3]));
        const float red[4] = {lane0(R01), lane4(R01), lane0(R23), lane4(R23)};
        float vn[4];
        __m256 b[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            vn[r] = beta[t] * fmaf(-dec, red[r], v[t][i + r]);
            b[r] = a0[r] = a1[r] = _mm256_setzero_ps();
        }
        const float *kt = k[t], *qt = q[t], *kn = NEXT ? k[t + 1] : k[t];
        const float *p = t ? NULL : pf;
        const __m256 vdec = _mm256_set1_ps(dec), lo = _mm256_set1_ps(-1e6f), hi = _mm256_set1_ps(1e6f);
        for (int c = 0; c < dk; c += 8) {
            if (p && c % 16 == 0) {   /* 4 rows to come, one line of each per 16 values */
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) _mm_prefetch((const char *)(p + (size_t)r * dk + c), _MM_HINT_T0);
            }
            const __m256 kc = _mm256_loadu_ps(kt + c), qc = _mm256_loadu_ps(qt + c), nc = _mm256_loadu_ps(kn + c);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m256 y = _mm256_fmadd_ps(vdec, _mm256_load_ps(L[r] + c), _mm256_mul_ps(_mm256_broadcast_ss(vn + r), kc));
                y = _mm256_min_ps(_mm256_max_ps(y, lo), hi);
                _mm256_store_ps(L[r] + c, y);
                if (WANT_O) b[r] = _mm256_fmadd_ps(y, qc, b[r]);
                if (NEXT) {
                    if (c & 8) a1[r] = _mm256_fmadd_ps(y, nc, a1[r]);
                    else a0[r] = _mm256_fmadd_ps(y, nc, a0[r]);
                }
            }
        }
        if (WANT_O) {
            const __m256 B01 = red2(b[0], b[1]), B23 = red2(b[2], b[3]);
            float *ot = o[t] + i;
            ot[0] = lane0(B01) * scale;
            ot[1] = lane4(B01) * scale;
            ot[2] = lane0(B23) * scale;
            ot[3] = lane4(B23) * scale;
        }
        if (Sd[t])
            for (int r = 0; r < 4; r++) memcpy(Sd[t] + (size_t)(i + r) * dk, L[r], rb);
    }
}

void qw_dn_head_avx2(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                     float beta, float decay, float scale, float *o) {
    if (dk > QW_DN_RUN_MAX_DK) {   /* tests' odd sizes only: the loader refuses such heads */
        for (int i = 0; i < dv; i++) o[i] = dn_row(S + (size_t)i * dk, Sd + (size_t)i * dk, dk, k, q, v[i], beta, decay, scale);
        return;
    }
    float *sd[1] = {Sd}, *op[1] = {o};
    const float *kp[1] = {k}, *qp[1] = {q}, *vp[1] = {v};
    qw_dn_run_avx2(S, sd, 1, dv, dk, kp, qp, vp, &beta, &decay, scale, op);
}

#define DN_RUN_NAME qw_dn_run_avx2
#define DN_LANES 8
#define DN_BYTES 32
#include "arch/qwen35_dn_run.h"
