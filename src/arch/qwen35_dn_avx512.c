/* qwen35_dn_avx512.c — AVX-512 DeltaNet head recurrence (see qwen35_dn.h): two passes per
 * state row (dn_row) (S.k, then update + clamp + store fused with Sd.q), 16 lanes, masked tail. */
#include <immintrin.h>
#include "arch/qwen35_dn.h"
#include <stdint.h>
#include <string.h>

/* One state row: si -> di (may be equal), returns o_i. */
static inline __attribute__((always_inline)) float dn_row_o(const int WANT_O, const float *si, float *di, int dk,
                                                            const float *k, const float *q, float vi, float beta,
                                                            float decay, float scale) {
    const int nf = dk & ~15;
    const __mmask16 tm = (__mmask16)((1u << (dk & 15)) - 1u);
    const __m512 vdec = _mm512_set1_ps(decay), lo = _mm512_set1_ps(-1e6f), hi = _mm512_set1_ps(1e6f);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int c = 0;
    for (; c + 32 <= nf; c += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(si + c), _mm512_loadu_ps(k + c), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(si + c + 16), _mm512_loadu_ps(k + c + 16), a1);
    }
    for (; c < nf; c += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(si + c), _mm512_loadu_ps(k + c), a0);
    if (tm) a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tm, si + c), _mm512_maskz_loadu_ps(tm, k + c), a0);
    const float vn = beta * (vi - decay * _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)));
    const __m512 vvn = _mm512_set1_ps(vn);
    __m512 b0 = _mm512_setzero_ps();
    for (c = 0; c < nf; c += 16) {
        __m512 y = _mm512_fmadd_ps(vdec, _mm512_loadu_ps(si + c), _mm512_mul_ps(vvn, _mm512_loadu_ps(k + c)));
        y = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
        _mm512_storeu_ps(di + c, y);
        if (WANT_O) b0 = _mm512_fmadd_ps(y, _mm512_loadu_ps(q + c), b0);
    }
    if (tm) {
        __m512 y = _mm512_fmadd_ps(vdec, _mm512_maskz_loadu_ps(tm, si + c), _mm512_mul_ps(vvn, _mm512_maskz_loadu_ps(tm, k + c)));
        y = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
        _mm512_mask_storeu_ps(di + c, tm, y);
        if (WANT_O) b0 = _mm512_fmadd_ps(y, _mm512_maskz_loadu_ps(tm, q + c), b0);
    }
    return WANT_O ? _mm512_reduce_add_ps(b0) * scale : 0.0f;
}
#define dn_row(...) dn_row_o(1, __VA_ARGS__)

void qw_dn_head_avx512(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                       float beta, float decay, float scale, float *o) {
    for (int i = 0; i < dv; i++) o[i] = dn_row(S + (size_t)i * dk, Sd + (size_t)i * dk, dk, k, q, v[i], beta, decay, scale);
}

void qw_dn_run_avx512(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                      const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                      float *const *o) {
    float lb[2][QW_DN_RUN_MAX_DK] __attribute__((aligned(64)));
    const size_t rb = (size_t)dk * sizeof(float);
    /* per token: streaming stores for an out-of-place snapshot; ordinary ones for the state
     * updated in place (a prompt chunk, or a verify batch's last token writing the live state),
     * which the next token or forward reads while it is still cached */
    unsigned char nt[QW_DN_RUN_MAX_T];
    for (int t = 0; t < T; t++) nt[t] = Sd[t] && rb % 64 == 0 && ((uintptr_t)Sd[t] & 63) == 0 && Sd[t] != S;
    /* two state rows at a time: a row's tokens are one serial chain (dot, reduce, update, dot,
     * reduce), so a second independent chain fills the latency; each row's arithmetic is
     * unchanged. Replayed tokens (o[t] NULL) skip the output dot. */
    for (int i = 0; i < dv; i += 2) {
        const int nr = i + 1 < dv ? 2 : 1;
        /* the state comes from DRAM (the weights swept it out): keep reads 4 rows ahead */
        for (int p = 4; p < 4 + nr; p++)
            if (i + p < dv)
                for (size_t b = 0; b < rb; b += 64) _mm_prefetch((const char *)(S + (size_t)(i + p) * dk) + b, _MM_HINT_T0);
        for (int r = 0; r < nr; r++) memcpy(lb[r], S + (size_t)(i + r) * dk, rb);
        for (int t = 0; t < T; t++) {
            if (o[t]) {
                const float o0 = dn_row_o(1, lb[0], lb[0], dk, k[t], q[t], v[t][i], beta[t], decay[t], scale);
                if (nr == 2) o[t][i + 1] = dn_row_o(1, lb[1], lb[1], dk, k[t], q[t], v[t][i + 1], beta[t], decay[t], scale);
                o[t][i] = o0;
            } else {
                dn_row_o(0, lb[0], lb[0], dk, k[t], q[t], v[t][i], beta[t], decay[t], scale);
                if (nr == 2) dn_row_o(0, lb[1], lb[1], dk, k[t], q[t], v[t][i + 1], beta[t], decay[t], scale);
            }
            if (!Sd[t]) continue;
            for (int r = 0; r < nr; r++) {
                float *di = Sd[t] + (size_t)(i + r) * dk;
                if (nt[t])
                    for (int c = 0; c < dk; c += 16) _mm512_stream_ps(di + c, _mm512_load_ps(lb[r] + c));
                else
                    memcpy(di, lb[r], rb);
            }
        }
    }
    _mm_sfence();   /* streaming stores are weakly ordered: visible before the next reader */
}
