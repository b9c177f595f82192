/* qwen35_dn_avx512.c — AVX-512 DeltaNet head recurrence (see qwen35_dn.h): two passes per
 * state row (dn_row) (S.k, then update + clamp + store fused with Sd.q), 16 lanes, masked tail. */
#include <immintrin.h>
#include "arch/qwen35_dn.h"
#include <stdint.h>
#include <math.h>
#include <string.h>

/* The clamp |y| <= 1e6 in one op: VRANGEPS picks the smaller magnitude of y and 1e6 and keeps
 * y's sign, i.e. min(max(y, -1e6), 1e6) for every non-NaN y; the 512-bit FP port is the
 * recurrence's bottleneck. A NaN y gives 1e6 with its sign (tested: the scalar reference keeps
 * NaN, AVX2's max/min gives -1e6): a state that met a NaN is garbage on every tier alike. */
static inline __attribute__((always_inline)) __m512 clamp6(__m512 y, __m512 hi) { return _mm512_range_ps(y, hi, 0x02); }

/* One state row: si -> di (may be equal), returns o_i. */
static inline __attribute__((always_inline)) float dn_row_o(const int WANT_O, const float *si, float *di, int dk,
                                                            const float *k, const float *q, float vi, float beta,
                                                            float decay, float scale) {
    const int nf = dk & ~15;
    const __mmask16 tm = (__mmask16)((1u << (dk & 15)) - 1u);
    const __m512 vdec = _mm512_set1_ps(decay), hi = _mm512_set1_ps(1e6f);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int c = 0;
    for (; c + 32 <= nf; c += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(si + c), _mm512_loadu_ps(k + c), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(si + c + 16), _mm512_loadu_ps(k + c + 16), a1);
    }
    for (; c < nf; c += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(si + c), _mm512_loadu_ps(k + c), a0);
    if (tm) a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tm, si + c), _mm512_maskz_loadu_ps(tm, k + c), a0);
    const float vn = beta * fmaf(-decay, _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)), vi);
    const __m512 vvn = _mm512_set1_ps(vn);
    __m512 b0 = _mm512_setzero_ps();
    for (c = 0; c < nf; c += 16) {
        __m512 y = _mm512_fmadd_ps(vdec, _mm512_loadu_ps(si + c), _mm512_mul_ps(vvn, _mm512_loadu_ps(k + c)));
        y = clamp6(y, hi);
        _mm512_storeu_ps(di + c, y);
        if (WANT_O) b0 = _mm512_fmadd_ps(y, _mm512_loadu_ps(q + c), b0);
    }
    if (tm) {
        __m512 y = _mm512_fmadd_ps(vdec, _mm512_maskz_loadu_ps(tm, si + c), _mm512_mul_ps(vvn, _mm512_maskz_loadu_ps(tm, k + c)));
        y = clamp6(y, hi);
        _mm512_mask_storeu_ps(di + c, tm, y);
        if (WANT_O) b0 = _mm512_fmadd_ps(y, _mm512_maskz_loadu_ps(tm, q + c), b0);
    }
    return WANT_O ? _mm512_reduce_add_ps(b0) * scale : 0.0f;
}
#define dn_row(...) dn_row_o(1, __VA_ARGS__)

void qw_dn_run_avx512(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                      const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                      float *const *o);

/* _mm512_reduce_add_ps's tree (lo8 + hi8, lo4 + hi4, [0]+[2] | [1]+[3], then their sum) for 4
 * vectors at once: row r's sum lands in lane 4r, bit-identical to reducing each alone. */
static inline __attribute__((always_inline)) __m512 red4(__m512 x0, __m512 x1, __m512 x2, __m512 x3) {
    const __m512 e01 = _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 e23 = _mm512_add_ps(_mm512_shuffle_f32x4(x2, x3, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(x2, x3, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 f = _mm512_add_ps(_mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 g = _mm512_add_ps(f, _mm512_permute_ps(f, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_add_ps(g, _mm512_permute_ps(g, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* acc[r] = the S_r . k accumulators of dn_row (a0: the 16-chunks at c % 32 == 0, a1: the others) */
static inline __attribute__((always_inline)) void dot4(float (*L)[QW_DN_RUN_MAX_DK], int dk, const float *k,
                                                       __m512 *a0, __m512 *a1) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) a0[r] = a1[r] = _mm512_setzero_ps();
    for (int c = 0; c < dk; c += 16) {
        const __m512 kc = _mm512_loadu_ps(k + c);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (c & 16) a1[r] = _mm512_fmadd_ps(_mm512_load_ps(L[r] + c), kc, a1[r]);
            else a0[r] = _mm512_fmadd_ps(_mm512_load_ps(L[r] + c), kc, a0[r]);
        }
    }
}

/* Four state rows (L[r], dk % 16 == 0, in place) through the T tokens, each row with dn_row's
 * arithmetic. The update pass of token t also accumulates token t+1's S.k from the values it
 * just produced (in dn_row's chunk order), so a row is read once per token and the serial chain
 * (dot, reduce, update) of one token overlaps the next; the four rows share the reductions. */
static inline __attribute__((always_inline)) void dn_rows4_run(float (*L)[QW_DN_RUN_MAX_DK], int T, int dk, int i,
                                                               const float *const *k, const float *const *q,
                                                               const float *const *v, const float *beta,
                                                               const float *decay, float scale, float *const *o,
                                                               float *const *Sd, const float *pf) {
    const __m512 hi = _mm512_set1_ps(1e6f);
    const size_t rb = (size_t)dk * sizeof(float);
    __m512 a0[4], a1[4];
    dot4(L, dk, k[0], a0, a1);
    for (int t = 0; t < T; t++) {
        const int WANT_O = o[t] != NULL, NEXT = t + 1 < T;
        const __m512 vdec = _mm512_set1_ps(decay[t]);
        /* vn per row in lanes 0, 4, 8, 12 (vector math: a scalar read of a just-stored vector lane
         * stalls store forwarding), then broadcast */
        const __m512 R = red4(_mm512_add_ps(a0[0], a1[0]), _mm512_add_ps(a0[1], a1[1]), _mm512_add_ps(a0[2], a1[2]),
                              _mm512_add_ps(a0[3], a1[3]));
        /* v[r] into lanes 4r..4r+3 (expand loads and compress stores are slow on some cores) */
        const __m512 V = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                               _mm512_castps128_ps512(_mm_loadu_ps(v[t] + i)));
        const __m512 VN = _mm512_mul_ps(_mm512_set1_ps(beta[t]), _mm512_fnmadd_ps(vdec, R, V));
        __m512 vvn[4], b[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            vvn[r] = _mm512_permutexvar_ps(_mm512_set1_epi32(4 * r), VN);
            b[r] = a0[r] = a1[r] = _mm512_setzero_ps();
        }
        const float *kt = k[t], *qt = q[t], *kn = NEXT ? k[t + 1] : k[t];
        const float *p = t ? NULL : pf;
        for (int c = 0; c < dk; c += 16) {
            /* pf: 4 rows to come, one line of each per 16 values (a burst of 32 prefetches would
             * stall on the fill buffers) */
            if (p) {
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) _mm_prefetch((const char *)(p + (size_t)r * dk + c), _MM_HINT_T0);
            }
            const __m512 kc = _mm512_loadu_ps(kt + c), qc = _mm512_loadu_ps(qt + c), nc = _mm512_loadu_ps(kn + c);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const __m512 y = clamp6(_mm512_fmadd_ps(vdec, _mm512_load_ps(L[r] + c), _mm512_mul_ps(vvn[r], kc)), hi);
                _mm512_store_ps(L[r] + c, y);
                if (WANT_O) b[r] = _mm512_fmadd_ps(y, qc, b[r]);
                if (NEXT) {
                    if (c & 16) a1[r] = _mm512_fmadd_ps(y, nc, a1[r]);
                    else a0[r] = _mm512_fmadd_ps(y, nc, a0[r]);
                }
            }
        }
        if (WANT_O) {
            const __m512 O = _mm512_mul_ps(red4(b[0], b[1], b[2], b[3]), _mm512_set1_ps(scale));
            _mm_storeu_ps(o[t] + i, _mm512_castps512_ps128(_mm512_permutexvar_ps(
                                        _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), O)));
        }
        if (Sd[t])
            for (int r = 0; r < 4; r++) memcpy(Sd[t] + (size_t)(i + r) * dk, L[r], rb);
    }
}

void qw_dn_head_avx512(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                       float beta, float decay, float scale, float *o) {
    if (dk > QW_DN_RUN_MAX_DK) {   /* tests' odd sizes only: the loader refuses such heads */
        for (int i = 0; i < dv; i++) o[i] = dn_row(S + (size_t)i * dk, Sd + (size_t)i * dk, dk, k, q, v[i], beta, decay, scale);
        return;
    }
    float *sd[1] = {Sd}, *op[1] = {o};
    const float *kp[1] = {k}, *qp[1] = {q}, *vp[1] = {v};
    qw_dn_run_avx512(S, sd, 1, dv, dk, kp, qp, vp, &beta, &decay, scale, op);
}

#define DN_RUN_NAME qw_dn_run_avx512
#define DN_LANES 16
#define DN_BYTES 64
#include "arch/qwen35_dn_run.h"
