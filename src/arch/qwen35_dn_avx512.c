/* qwen35_dn_avx512.c — AVX-512 DeltaNet head recurrence (see qwen35_dn.h): two passes per
 * state row (S.k, then update + clamp + store fused with Sd.q), 16 lanes, masked tail. */
#include <immintrin.h>
#include "arch/qwen35_dn.h"

void qw_dn_head_avx512(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                       float beta, float decay, float scale, float *o) {
    const int nf = dk & ~15;
    const __mmask16 tm = (__mmask16)((1u << (dk & 15)) - 1u);
    const __m512 vdec = _mm512_set1_ps(decay), lo = _mm512_set1_ps(-1e6f), hi = _mm512_set1_ps(1e6f);
    for (int i = 0; i < dv; i++) {
        const float *si = S + (size_t)i * dk;
        float *di = Sd + (size_t)i * dk;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int c = 0;
        for (; c + 32 <= nf; c += 32) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(si + c), _mm512_loadu_ps(k + c), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(si + c + 16), _mm512_loadu_ps(k + c + 16), a1);
        }
        for (; c < nf; c += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(si + c), _mm512_loadu_ps(k + c), a0);
        if (tm) a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tm, si + c), _mm512_maskz_loadu_ps(tm, k + c), a0);
        const float vn = beta * (v[i] - decay * _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)));
        const __m512 vvn = _mm512_set1_ps(vn);
        __m512 b0 = _mm512_setzero_ps();
        for (c = 0; c < nf; c += 16) {
            __m512 y = _mm512_fmadd_ps(vdec, _mm512_loadu_ps(si + c), _mm512_mul_ps(vvn, _mm512_loadu_ps(k + c)));
            y = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
            _mm512_storeu_ps(di + c, y);
            b0 = _mm512_fmadd_ps(y, _mm512_loadu_ps(q + c), b0);
        }
        if (tm) {
            __m512 y = _mm512_fmadd_ps(vdec, _mm512_maskz_loadu_ps(tm, si + c), _mm512_mul_ps(vvn, _mm512_maskz_loadu_ps(tm, k + c)));
            y = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
            _mm512_mask_storeu_ps(di + c, tm, y);
            b0 = _mm512_fmadd_ps(y, _mm512_maskz_loadu_ps(tm, q + c), b0);
        }
        o[i] = _mm512_reduce_add_ps(b0) * scale;
    }
}
