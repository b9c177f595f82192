/*
 * attn_impl.h — the per-tier pieces of nx_attn (attn.c drives them). Each tier computes the
 * float contract of attn.h exactly; the scalar versions (attn.c) define it.
 */
#ifndef NX_KERNELS_ATTN_IMPL_H
#define NX_KERNELS_ATTN_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "tensor.h"
#include "quant/blocks.h"

/* A call's queries quantized for the integer Q.K contract (attn.h): query i's nb Q8_0 blocks
 * at blk + i*nb, their scales as floats at d + i*nb and their code sums at sum + i*nb. */
typedef struct nx_attn_qq {
    const nx_block_q8_0 *blk;
    const float *d;
    const int32_t *sum;
    int nb;
} nx_attn_qq;

/* Bytes of the tile buffer a tier's k_prep may use (at most NX_ATTN_TILE rows of D values). */
#define NX_ATTN_PREP_BYTES(D) ((size_t)NX_ATTN_TILE * (size_t)(D) + (size_t)NX_ATTN_TILE * (size_t)((D) / 32) * 4)

typedef struct nx_attn_tier {
    /* S[i*ldS + j] = dot16(q[i], k[j]) * scale, i < nq, j < nk */
    void (*scores)(const float *const *q, int nq, const float *const *k, int nk, int D, float scale, float *S,
                   int ldS);
    /* s[j] = nx_attn_exp(s[j] - m), j < n */
    void (*exp_row)(float *s, int n, float m);
    /* o[i][d] = o[i][d] * c[i] (the running max's rescale, fused here: o is in registers
     * anyway; c[i] = 1 leaves o as it is), then o[i][d] = fmaf(E[i*ldE + p], v[p][d], o[i][d])
     * for p = 0..nk-1 in order, i < nq, d < Dv */
    void (*pv)(const float *E, int ldE, int nq, const float *const *v, int nk, float *const *o, const float *c,
               int Dv);
    /* n values of a cache row of type t (F16 / Q8_0 / Q4_0 / BF16) as floats; false: type unknown */
    bool (*row_f32)(nx_type t, const void *row, float *dst, int n);
    /* scores / pv reading the rows in the cache's type t, each value converted exactly as
     * row_f32 would (so the bits are those of row_f32 + scores / pv); false: not for this
     * type or size (the driver converts into its tile buffer instead). NULL: never.
     * pf (here and in k_prep): prefetch each row's counterpart pf bytes further on (the same
     * row of a later tile, nx_attn_pf) while reading the row; 0: none. */
    bool (*scores_kv)(const float *const *q, int nq, const void *const *k, nx_type t, int nk, int D, float scale,
                      float *S, int ldS, ptrdiff_t pf);
    bool (*pv_kv)(const float *E, int ldE, int nq, const void *const *v, nx_type t, int nk, float *const *o,
                  const float *c, int Dv, ptrdiff_t pf);
    /* The integer Q.K contract (attn.h) for Q8_0 / Q4_0 keys (D a multiple of 32):
     * k_prep lays the tile's nk raw rows k[0..nk-1] out in buf (NX_ATTN_PREP_BYTES(D) bytes,
     * the tier's own layout), once per tile; NULL: scores_qk reads the rows themselves.
     * scores_qk: S[r*ldS + j] = score of query q0 + r (r < nq) against tile key j0 + j (j < nk),
     * from the prepared tile (prep) or the rows k[j0 + j]. NULL: the scalar tier's serves. */
    void (*k_prep)(const void *const *k, nx_type t, int nk, int D, void *buf, ptrdiff_t pf);
    void (*scores_qk)(const nx_attn_qq *qq, int q0, int nq, const void *const *k, const void *prep, int j0, int nk,
                      nx_type t, int D, float scale, float *S, int ldS);
    /* One tile's running-max step for nr queries, their scores in S[r*ldS + p], p < nk <= NX_ATTN_TILE:
     * mt = the max of S[r][.] (NaN left out, from -inf); mn = m[r] > mt ? m[r] : mt;
     * c[r] = m[r] == -inf ? 0 : e(m[r] - mn); m[r] = mn; S[r][p] = e(S[r][p] - mn) (as exp_row);
     * ls[r] = 0 + S[r][0] + S[r][1] + ... in position order. NULL: attn.c's, through exp_row
     * (its scalar loops carry each query's chains through memory: a tenth of a prefill). */
    void (*softmax)(float *S, int ldS, int nr, int nk, float *m, float *c, float *ls);
} nx_attn_tier;

extern const nx_attn_tier nx_attn_tier_scalar;
#if defined(__x86_64__)
extern const nx_attn_tier nx_attn_tier_avx2;
extern const nx_attn_tier nx_attn_tier_avx2vnni;   /* attn_avx2.c with AVX-VNNI for the integer Q.K */
extern const nx_attn_tier nx_attn_tier_avx512;
#endif
#if defined(__aarch64__)
extern const nx_attn_tier nx_attn_tier_neon;       /* NX_CPU_NEON: plain NEON throughout */
extern const nx_attn_tier nx_attn_tier_neon_dot;   /* the dot product levels: scores_qk with SDOT */
/* scores_qk of the two (attn_neon_qk.h, compiled by attn_neon.c and attn_neon_dot.c) */
void nx_attn_scores_qk_neon(const nx_attn_qq *qq, int q0, int nq, const void *const *k, const void *prep, int j0,
                            int nk, nx_type t, int D, float scale, float *S, int ldS);
void nx_attn_scores_qk_neon_dot(const nx_attn_qq *qq, int q0, int nq, const void *const *k, const void *prep,
                                int j0, int nk, nx_type t, int D, float scale, float *S, int ldS);
#endif

/* A decode streams each KV head's rows from memory once. The fused loops (scores_kv, pv_kv,
 * k_prep) and the driver's tile conversion prefetch the rows of the tile NX_ATTN_PF_TILES ahead
 * while they read a row: the call for bytes [lo, hi) of a row (of rb bytes) prefetches the
 * lines at row offsets 64i in that range of the row pf bytes on, and its last byte with the
 * range that ends the row, so the prefetches spread over the tile's work. A tile's worth of
 * prefetches issued at once (2 x 32 rows x 8 lines for f16) stalls on the core's few line-fill
 * buffers: the burst took 1.34-1.43x the time of the spread on a 16k-deep f16 decode. Offsets
 * relative to the row, not to the lines of memory, give every row the same branch pattern
 * (memory lines, whose counts per call vary from row to row, measured 1.25-1.3x). A hint only:
 * never faults, no bit changes. */
#define NX_ATTN_PF_TILES 2
/* Into L2 (prefetcht1), not L1: the L1's few miss buffers held a decode's stream to 6-8 GB/s
 * per thread from DRAM; L2 keeps more misses in flight. Qwen3.5-0.8B-shaped Q8_0, f16 KV, tg32
 * at depth 8192, 2 threads, Zen 4: AVX-512 31.4 / 33.6 -> 43.7 / 38.2 tok/s, AVX2 28.5 / 33.7
 * -> 32.3 / 35.6 (alternating runs); pp512 at depth 4096 unchanged. */
#define NX_ATTN_PF_HINT 2
static inline void nx_attn_pf(const void *row, ptrdiff_t pf, size_t lo, size_t hi, size_t rb) {
    if (!pf) return;
    const char *a = (const char *)((uintptr_t)row + (uintptr_t)pf);
    for (size_t o = (lo + 63) & ~(size_t)63; o < hi; o += 64) __builtin_prefetch(a + o, 0, NX_ATTN_PF_HINT);
    if (hi >= rb) __builtin_prefetch(a + rb - 1, 0, NX_ATTN_PF_HINT);
}

/* The contract's constants, shared by every tier. */
#define NX_ATTN_EXP_MIN   (-87.0f)
#define NX_ATTN_LOG2E     1.44269504088896341f
#define NX_ATTN_LN2_HI    0.693145751953125f
#define NX_ATTN_LN2_LO    1.42860682030941723212e-6f
#define NX_ATTN_P7 (1.0f / 5040.0f)
#define NX_ATTN_P6 (1.0f / 720.0f)
#define NX_ATTN_P5 (1.0f / 120.0f)
#define NX_ATTN_P4 (1.0f / 24.0f)
#define NX_ATTN_P3 (1.0f / 6.0f)
#define NX_ATTN_P2 0.5f

#endif
