/* qwen35_dn_avx2.c — AVX2 + FMA DeltaNet head recurrence (see qwen35_dn.h): two passes per
 * state row (S.k, then update + clamp + store fused with Sd.q), 8 lanes, masked tail. */
#include <immintrin.h>
#include "arch/qwen35_dn.h"
#include <stdint.h>
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
    const float vn = beta * (vi - decay * hsum8(_mm256_add_ps(a0, a1)));
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

void qw_dn_head_avx2(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                     float beta, float decay, float scale, float *o) {
    for (int i = 0; i < dv; i++) o[i] = dn_row(S + (size_t)i * dk, Sd + (size_t)i * dk, dk, k, q, v[i], beta, decay, scale);
}

void qw_dn_run_avx2(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                    const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                    float *const *o) {
    float lb[2][QW_DN_RUN_MAX_DK] __attribute__((aligned(32)));
    const size_t rb = (size_t)dk * sizeof(float);
    /* per token: streaming stores for an out-of-place snapshot; ordinary ones for the state
     * updated in place (a prompt chunk, or a verify batch's last token writing the live state),
     * which the next token or forward reads while it is still cached */
    unsigned char nt[QW_DN_RUN_MAX_T];
    for (int t = 0; t < T; t++) nt[t] = Sd[t] && rb % 32 == 0 && ((uintptr_t)Sd[t] & 31) == 0 && Sd[t] != S;
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
                    for (int c = 0; c < dk; c += 8) _mm256_stream_ps(di + c, _mm256_load_ps(lb[r] + c));
                else
                    memcpy(di, lb[r], rb);
            }
        }
    }
    _mm_sfence();   /* streaming stores are weakly ordered: visible before the next reader */
}
