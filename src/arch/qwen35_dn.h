/*
 * qwen35_dn.h — the Gated DeltaNet recurrence of one V head for one token (the hot loop of
 * the recurrent layers), with a scalar reference and AVX2 / AVX-512 versions.
 *
 * For every state row i (v index; S is dv rows of dk floats, row-major):
 *   vn   = beta * (v[i] - decay * (S_i . k))
 *   Sd_i = clamp(decay * S_i + vn * k, -1e6, 1e6)      (engine quirk: |S| <= 1e6)
 *   o[i] = (Sd_i . q) * scale
 * Sd may equal S (in place). Each level computes in one fixed order, so a level's result
 * never depends on the batch; levels agree to float rounding (tests/test_qwen35.c).
 * Must never: allocate or touch memory outside the dv x dk state and the vectors.
 */
#ifndef NX_ARCH_QWEN35_DN_H
#define NX_ARCH_QWEN35_DN_H

#include <stddef.h>

typedef void (*qw_dn_head_fn)(const float *S, float *Sd, int dv, int dk, const float *k, const float *q,
                              const float *v, float beta, float decay, float scale, float *o);

void qw_dn_head_scalar(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                       float beta, float decay, float scale, float *o);
void qw_dn_head_avx2(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                     float beta, float decay, float scale, float *o);
void qw_dn_head_avx512(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                       float beta, float decay, float scale, float *o);

/* The version for the CPU level in effect now. */
qw_dn_head_fn qw_dn_head_pick(void);

#endif
