/* qwen35_dn_neon.c — aarch64 Advanced SIMD DeltaNet head recurrence (see qwen35_dn.h), for both
 * NEON levels: two passes per state row (S.k, then update + clamp + store fused with Sd.q),
 * 4 lanes, a zero-padded tail (NEON has no masked loads). The multiply-adds are explicit
 * vfmaq_f32 (the aarch64 build has -ffp-contract=off), in one fixed order per row. */
#include <arm_neon.h>
#include "arch/qwen35_dn.h"
#include <string.h>

static inline float32x4_t ld_tail(const float *p, int r) {
    float t[4] = {0, 0, 0, 0};
    memcpy(t, p, (size_t)r * sizeof(float));
    return vld1q_f32(t);
}

/* One state row: si -> di (may be equal), returns o_i. */
static inline __attribute__((always_inline)) float dn_row(const float *si, float *di, int dk, const float *k, const float *q,
                                                          float vi, float beta, float decay, float scale) {
    const int nf = dk & ~3, rem = dk & 3;
    const float32x4_t vdec = vdupq_n_f32(decay), lo = vdupq_n_f32(-1e6f), hi = vdupq_n_f32(1e6f);
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
    int c = 0;
    for (; c + 8 <= nf; c += 8) {
        a0 = vfmaq_f32(a0, vld1q_f32(si + c), vld1q_f32(k + c));
        a1 = vfmaq_f32(a1, vld1q_f32(si + c + 4), vld1q_f32(k + c + 4));
    }
    for (; c < nf; c += 4) a0 = vfmaq_f32(a0, vld1q_f32(si + c), vld1q_f32(k + c));
    if (rem) a0 = vfmaq_f32(a0, ld_tail(si + c, rem), ld_tail(k + c, rem));
    const float vn = beta * (vi - decay * vaddvq_f32(vaddq_f32(a0, a1)));
    const float32x4_t vvn = vdupq_n_f32(vn);
    float32x4_t b0 = vdupq_n_f32(0.0f);
    for (c = 0; c < nf; c += 4) {
        float32x4_t y = vfmaq_f32(vmulq_f32(vvn, vld1q_f32(k + c)), vdec, vld1q_f32(si + c));
        y = vminq_f32(vmaxq_f32(y, lo), hi);
        vst1q_f32(di + c, y);
        b0 = vfmaq_f32(b0, y, vld1q_f32(q + c));
    }
    if (rem) {
        float32x4_t y = vfmaq_f32(vmulq_f32(vvn, ld_tail(k + c, rem)), vdec, ld_tail(si + c, rem));
        y = vminq_f32(vmaxq_f32(y, lo), hi);
        float t[4];
        vst1q_f32(t, y);
        memcpy(di + c, t, (size_t)rem * sizeof(float));
        b0 = vfmaq_f32(b0, y, ld_tail(q + c, rem));   /* padded lanes: y * 0 */
    }
    return vaddvq_f32(b0) * scale;
}

void qw_dn_head_neon(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                     float beta, float decay, float scale, float *o) {
    for (int i = 0; i < dv; i++) o[i] = dn_row(S + (size_t)i * dk, Sd + (size_t)i * dk, dk, k, q, v[i], beta, decay, scale);
}

void qw_dn_run_neon(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                    const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                    float *const *o) {
    float lb[QW_DN_RUN_MAX_DK] __attribute__((aligned(16)));
    const size_t rb = (size_t)dk * sizeof(float);
    for (int i = 0; i < dv; i++) {
        /* the state comes from memory (the weights swept it out): keep reads 4 rows ahead */
        if (i + 4 < dv)
            for (size_t b = 0; b < rb; b += 64) __builtin_prefetch((const char *)(S + (size_t)(i + 4) * dk) + b, 0, 3);
        memcpy(lb, S + (size_t)i * dk, rb);
        for (int t = 0; t < T; t++) {
            /* replayed tokens (o[t] NULL) give no output; Sd[t] NULL: no store (qwen35_dn.h) */
            const float oi = dn_row(lb, lb, dk, k[t], q[t], v[t][i], beta[t], decay[t], scale);
            if (o[t]) o[t][i] = oi;
            if (Sd[t]) memcpy(Sd[t] + (size_t)i * dk, lb, rb);
        }
    }
}
