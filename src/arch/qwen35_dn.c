/* qwen35_dn.c — scalar reference of the DeltaNet head recurrence and the level dispatch
 * (see qwen35_dn.h). */
#include "arch/qwen35_dn.h"
#include "kernels/cpu.h"
#include <string.h>

static float dot_ref(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void qw_dn_head_scalar(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                       float beta, float decay, float scale, float *o) {
    for (int i = 0; i < dv; i++) {
        const float *si = S + (size_t)i * dk;
        float *di = Sd + (size_t)i * dk;
        const float vn = beta * (v[i] - decay * dot_ref(si, k, dk));
        for (int c = 0; c < dk; c++) {
            float y = decay * si[c] + vn * k[c];
            di[c] = y > 1e6f ? 1e6f : (y < -1e6f ? -1e6f : y);
        }
        o[i] = dot_ref(di, q, dk) * scale;
    }
}

void qw_dn_run_scalar(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                      const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                      float *const *o) {
    /* row by row, like the SIMD runs: a row's arithmetic is qw_dn_head_scalar's */
    float lb[QW_DN_RUN_MAX_DK];
    for (int i = 0; i < dv; i++) {
        memcpy(lb, S + (size_t)i * dk, (size_t)dk * sizeof(float));
        for (int t = 0; t < T; t++) {
            float oi;
            qw_dn_head_scalar(lb, lb, 1, dk, k[t], q[t], v[t] + i, beta[t], decay[t], scale, &oi);
            if (o[t]) o[t][i] = oi;
            if (Sd[t]) memcpy(Sd[t] + (size_t)i * dk, lb, (size_t)dk * sizeof(float));
        }
    }
}

qw_dn_run_fn qw_dn_run_pick(void) {
    switch (nx_cpu_level_get()) {
#if defined(__x86_64__) || defined(__i386__)
    case NX_CPU_AVX512: return qw_dn_run_avx512;
    case NX_CPU_AVX2_VNNI: case NX_CPU_AVX2: return qw_dn_run_avx2;
#endif
#if defined(__aarch64__)
    case NX_CPU_NEON_I8MM: case NX_CPU_NEON_DOT: case NX_CPU_NEON: return qw_dn_run_neon;
#endif
    default: return qw_dn_run_scalar;
    }
}

qw_dn_head_fn qw_dn_head_pick(void) {
    switch (nx_cpu_level_get()) {
#if defined(__x86_64__) || defined(__i386__)
    case NX_CPU_AVX512: return qw_dn_head_avx512;
    case NX_CPU_AVX2_VNNI: case NX_CPU_AVX2: return qw_dn_head_avx2;
#endif
#if defined(__aarch64__)
    case NX_CPU_NEON_I8MM: case NX_CPU_NEON_DOT: case NX_CPU_NEON: return qw_dn_head_neon;
#endif
    default: return qw_dn_head_scalar;
    }
}
