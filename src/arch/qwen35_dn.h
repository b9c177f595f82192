/*
 * qwen35_dn.h — the Gated DeltaNet recurrence of one V head for one token (the hot loop of
 * the recurrent layers), with a scalar reference and AVX2 / AVX-512 / NEON versions.
 *
 * For every state row i (v index; S is dv rows of dk floats, row-major):
 *   vn   = beta * (v[i] - decay * (S_i . k))
 *   Sd_i = clamp(decay * S_i + vn * k, -1e6, 1e6)      (engine quirk: |S| <= 1e6)
 *   o[i] = (Sd_i . q) * scale
 * Sd may equal S (in place). Each level computes in one fixed order, so a level's result
 * never depends on the batch; levels agree to float rounding (tests/test_qwen35.c).
 *
 * qw_dn_run_*: T tokens of one head in order, token t reading the state after token t-1
 * (token 0 reads S), storing it to Sd[t] unless Sd[t] is NULL and its output to o[t] unless
 * o[t] is NULL (tokens replayed onto a deferred state: no output wanted). Preconditions:
 * dk <= QW_DN_RUN_MAX_DK, T <= QW_DN_RUN_MAX_T. The runs keep each state row in L1 across
 * the T tokens (the forward stores at most the state before a verify batch, in place, so
 * ordinary stores suffice). Bit-identical to T calls of the level's head function (the same
 * per-row operations).
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
void qw_dn_head_neon(const float *S, float *Sd, int dv, int dk, const float *k, const float *q, const float *v,
                     float beta, float decay, float scale, float *o);

typedef void (*qw_dn_run_fn)(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                             const float *const *q, const float *const *v, const float *beta, const float *decay,
                             float scale, float *const *o);
void qw_dn_run_scalar(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                      const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                      float *const *o);
void qw_dn_run_avx2(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                    const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                    float *const *o);
void qw_dn_run_avx512(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                      const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                      float *const *o);
void qw_dn_run_neon(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k,
                    const float *const *q, const float *const *v, const float *beta, const float *decay, float scale,
                    float *const *o);
#define QW_DN_RUN_MAX_DK 512   /* the runs' row buffer (the loader refuses larger heads) */
#define QW_DN_RUN_MAX_T 128    /* tokens of one run call: a deferred replay (<= NX_SNAPSHOT_MAX) + a verify batch */

/* The versions for the CPU level in effect now. */
qw_dn_head_fn qw_dn_head_pick(void);
qw_dn_run_fn qw_dn_run_pick(void);

#endif
