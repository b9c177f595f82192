/*
 * attn_neon_qk.h — the NEON tiers' scores_qk (attn_impl.h, the integer Q.K contract of attn.h),
 * written once and compiled twice: by attn_neon.c (NX_NEON_DOT 0: the aarch64 base, block sums
 * from SMULL/SMLAL2 + SADALP) and by attn_neon_dot.c (NX_NEON_DOT 1, built with
 * -march=armv8.2-a+dotprod: SDOT, run only at the dot product levels). Each includer defines
 * NX_NEON_DOT and NX_QK_FN (the function's name). Not a header of any module: include it
 * nowhere else.
 *
 * Four keys share a float32x4: each block's four exact int32 sums become one vector, and the
 * contract's per-block float steps (w_b = dq_b * dk_b, acc = fmaf(isum_b, w_b, acc)) are one
 * vmulq_f32 and one vfmaq_f32 for the four keys, in block order: every lane does the scalar
 * dot_qk's float operations, so the bits are its bits. Up to four queries share each key load.
 */
#include <arm_neon.h>
#include "kernels/attn.h"
#include "kernels/attn_impl.h"
#include "quant/blocks.h"

/* The prepared tile (attn_neon.c's k_prep): key j's block b as 32 int8 codes (Q4_0's already
 * nibble - 8) at NX_QK_CODE(buf, b, j), its scale as a float at NX_QK_DK(buf, D)[b * TILE + j]:
 * block-major, so four adjacent keys' block is 128 contiguous bytes and one vector of scales.
 * NX_ATTN_PREP_BYTES(D) exactly. */
#define NX_QK_CODE(buf, b, j) ((const int8_t *)(buf) + ((size_t)(b) * NX_ATTN_TILE + (size_t)(j)) * 32)
#define NX_QK_DK(buf, D) ((float *)((int8_t *)(buf) + (size_t)NX_ATTN_TILE * (size_t)(D)))

/* A vector whose lanes total one block's sum of q[i] * k[i] (which lane holds which product
 * differs between the two builds; the total, exact, does not). Query codes are within
 * [-127, 127] (nx_quantize_row's Q8_0), key codes [-128, 127]: the base build's int16 pair sums
 * stay within 2 * 127 * 128 = 32512, no overflow. */
static inline int32x4_t qk_block(int8x16_t q0, int8x16_t q1, int8x16_t k0, int8x16_t k1) {
#if NX_NEON_DOT
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), q0, k0), q1, k1);
#else
    const int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(q0), vget_low_s8(k0)), q0, k0);
    const int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(q1), vget_low_s8(k1)), q1, k1);
    return vpadalq_s16(vpaddlq_s16(p0), p1);
#endif
}

/* NR queries (q0 + r) against the four prepared keys jj[0..3]; out[r] lane l = the score of
 * query r against key jj[l]. contig: jj[l] = jj[0] + l (the scales are one load). */
static inline __attribute__((always_inline)) void qk_group(const int NR, const nx_attn_qq *qq, int q0,
                                                           const void *prep, const int jj[4], bool contig, int D,
                                                           float scale, float32x4_t out[4]) {
    const int nb = qq->nb;
    const float *dk = NX_QK_DK(prep, D);
    float32x4_t acc[4];
    for (int r = 0; r < NR; r++) acc[r] = vdupq_n_f32(0.0f);
    for (int b = 0; b < nb; b++) {
        int8x16_t k[4][2];
        for (int l = 0; l < 4; l++) {
            const int8_t *c = NX_QK_CODE(prep, b, jj[l]);
            k[l][0] = vld1q_s8(c);
            k[l][1] = vld1q_s8(c + 16);
        }
        const float *db = dk + (size_t)b * NX_ATTN_TILE;
        float32x4_t dkv;
        if (contig) {
            dkv = vld1q_f32(db + jj[0]);
        } else {
            const float t[4] = {db[jj[0]], db[jj[1]], db[jj[2]], db[jj[3]]};
            dkv = vld1q_f32(t);
        }
        for (int r = 0; r < NR; r++) {
            const size_t qi = (size_t)(q0 + r) * nb + b;
            const int8x16_t a0 = vld1q_s8(qq->blk[qi].qs), a1 = vld1q_s8(qq->blk[qi].qs + 16);
            const int32x4_t s01 = vpaddq_s32(qk_block(a0, a1, k[0][0], k[0][1]), qk_block(a0, a1, k[1][0], k[1][1]));
            const int32x4_t s23 = vpaddq_s32(qk_block(a0, a1, k[2][0], k[2][1]), qk_block(a0, a1, k[3][0], k[3][1]));
            const int32x4_t is = vpaddq_s32(s01, s23);   /* lane l: key jj[l]'s exact block sum */
            /* (float)isum_b is exact (|isum_b| <= 32 * 127 * 128 < 2^24); w_b = dk_b * dq_b */
            acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(is), vmulq_n_f32(dkv, qq->d[qi]));
        }
    }
    for (int r = 0; r < NR; r++) out[r] = vmulq_n_f32(acc[r], scale);
}

/* NR queries against keys j0..j0+nk-1 in groups of four; a last partial group is redone as the
 * last four keys (the overlap is written twice with the same bits), or with fewer than four keys
 * its lanes repeat the last key and only nk lanes are stored. */
static inline __attribute__((always_inline)) void qk_rows(const int NR, const nx_attn_qq *qq, int q0,
                                                          const void *prep, int j0, int nk, int D, float scale,
                                                          float *S, int ldS) {
    float32x4_t s[4];
    if (nk < 4) {
        int jj[4];
        for (int l = 0; l < 4; l++) jj[l] = j0 + (l < nk ? l : nk - 1);
        qk_group(NR, qq, q0, prep, jj, false, D, scale, s);
        for (int r = 0; r < NR; r++) {
            float t[4];
            vst1q_f32(t, s[r]);
            for (int l = 0; l < nk; l++) S[(size_t)r * ldS + l] = t[l];
        }
        return;
    }
    for (int j = 0;; j += 4) {
        if (j + 4 > nk) j = nk - 4;
        const int jj[4] = {j0 + j, j0 + j + 1, j0 + j + 2, j0 + j + 3};
        qk_group(NR, qq, q0, prep, jj, true, D, scale, s);
        for (int r = 0; r < NR; r++) vst1q_f32(S + (size_t)r * ldS + j, s[r]);
        if (j + 4 >= nk) break;
    }
}

void NX_QK_FN(const nx_attn_qq *qq, int q0, int nq, const void *const *k, const void *prep, int j0, int nk,
              nx_type t, int D, float scale, float *S, int ldS) {
    if (!prep) {   /* the layout is k_prep's; without it the reference reads the rows */
        nx_attn_tier_scalar.scores_qk(qq, q0, nq, k, prep, j0, nk, t, D, scale, S, ldS);
        return;
    }
    if (nk <= 0) return;
    for (int r = 0; r < nq; r += 4) {
        float *Sr = S + (size_t)r * ldS;
        switch (nq - r) {
        case 1: qk_rows(1, qq, q0 + r, prep, j0, nk, D, scale, Sr, ldS); break;
        case 2: qk_rows(2, qq, q0 + r, prep, j0, nk, D, scale, Sr, ldS); break;
        case 3: qk_rows(3, qq, q0 + r, prep, j0, nk, D, scale, Sr, ldS); break;
        default: qk_rows(4, qq, q0 + r, prep, j0, nk, D, scale, Sr, ldS); break;
        }
    }
}
