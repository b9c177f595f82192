/*
 * attn.c — nx_attn's driver (tiles, runs of queries with equal ranges, the running max / sum)
 * and the scalar reference of every per-tier piece, which defines the float contract of
 * attn.h. The driver's own arithmetic (l = l*c + the tile's sum, o/l) is plain float code the
 * tiers share, so only the pieces in nx_attn_tier differ by level.
 */
#include "kernels/attn.h"

#include <math.h>
#include <string.h>
#include "core/fp16.h"
#include "kernels/attn_impl.h"
#include "kernels/cpu.h"
#include "quant/quant.h"

/* ===== the contract, scalar ===== */

float nx_attn_exp(float x) {
    if (!(x >= NX_ATTN_EXP_MIN)) return 0.0f;   /* also -inf and NaN */
    const float n = rintf(x * NX_ATTN_LOG2E);
    float r = fmaf(n, -NX_ATTN_LN2_HI, x);
    r = fmaf(n, -NX_ATTN_LN2_LO, r);
    float p = NX_ATTN_P7;
    p = fmaf(p, r, NX_ATTN_P6);
    p = fmaf(p, r, NX_ATTN_P5);
    p = fmaf(p, r, NX_ATTN_P4);
    p = fmaf(p, r, NX_ATTN_P3);
    p = fmaf(p, r, NX_ATTN_P2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return p * s;
}

static float dot16(const float *q, const float *k, int D) {
    float acc[16] = {0};
    for (int d = 0; d < D; d++) acc[d & 15] = fmaf(q[d], k[d], acc[d & 15]);
    for (int w = 8; w >= 1; w >>= 1)
        for (int i = 0; i < w; i++) acc[i] += acc[i + w];
    return acc[0];
}

static void scores_scalar(const float *const *q, int nq, const float *const *k, int nk, int D, float scale, float *S,
                          int ldS) {
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < nk; j++) S[(size_t)i * ldS + j] = dot16(q[i], k[j], D) * scale;
}

static void exp_row_scalar(float *s, int n, float m) {
    for (int j = 0; j < n; j++) s[j] = nx_attn_exp(s[j] - m);
}

static void pv_scalar(const float *E, int ldE, int nq, const float *const *v, int nk, float *const *o, const float *c,
                      int Dv) {
    for (int i = 0; i < nq; i++) {
        for (int d = 0; d < Dv; d++) o[i][d] *= c[i];
        for (int p = 0; p < nk; p++) {
            const float e = E[(size_t)i * ldE + p];
            for (int d = 0; d < Dv; d++) o[i][d] = fmaf(e, v[p][d], o[i][d]);
        }
    }
}

static bool row_f32_scalar(nx_type t, const void *row, float *dst, int n) {
    return nx_dequantize_row(t, row, dst, n);
}

/* The integer Q.K contract: isum_b exact, acc = fmaf((float)isum_b, dq_b * dk_b, acc) in block
 * order from 0, times scale. */
static float dot_qk(const nx_block_q8_0 *qb, const float *qd, nx_type t, const void *krow, int nb) {
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int32_t is = 0;
        float dk;
        if (t == NX_TYPE_Q8_0) {
            const nx_block_q8_0 *kb = (const nx_block_q8_0 *)krow + b;
            dk = nx_half_to_f32(kb->d);
            for (int i = 0; i < 32; i++) is += (int32_t)qb[b].qs[i] * kb->qs[i];
        } else {   /* Q4_0: value i in the low nibble of qs[i], value i + 16 in its high nibble */
            const nx_block_q4_0 *kb = (const nx_block_q4_0 *)krow + b;
            dk = nx_half_to_f32(kb->d);
            for (int i = 0; i < 16; i++)
                is += (int32_t)qb[b].qs[i] * ((kb->qs[i] & 15) - 8) + (int32_t)qb[b].qs[i + 16] * ((kb->qs[i] >> 4) - 8);
        }
        acc = fmaf((float)is, qd[b] * dk, acc);
    }
    return acc;
}

static void scores_qk_scalar(const nx_attn_qq *qq, int q0, int nq, const void *const *k, const void *prep, int j0,
                             int nk, nx_type t, int D, float scale, float *S, int ldS) {
    (void)prep; (void)D;
    for (int r = 0; r < nq; r++) {
        const int i = q0 + r;
        for (int j = 0; j < nk; j++)
            S[(size_t)r * ldS + j] = dot_qk(qq->blk + (size_t)i * qq->nb, qq->d + (size_t)i * qq->nb, t, k[j0 + j], qq->nb) * scale;
    }
}

const nx_attn_tier nx_attn_tier_scalar = {scores_scalar, exp_row_scalar, pv_scalar, row_f32_scalar, NULL, NULL,
                                          NULL, scores_qk_scalar, NULL};

/* The tier's softmax (attn_impl.h) where it has none, with its exp_row: the rows side by side,
 * so their dependency chains (one compare or add per key, in position order) overlap. */
static void softmax_rows(const nx_attn_tier *t, float *S, int ldS, int nr, int nk, float *m, float *c, float *ls) {
    for (int r = 0; r < nr; r++) c[r] = -INFINITY;
    for (int p = 0; p < nk; p++)
        for (int r = 0; r < nr; r++) {
            const float x = S[(size_t)r * ldS + p];
            c[r] = x > c[r] ? x : c[r];
        }
    for (int r = 0; r < nr; r++) {
        const float mt = c[r], mo = m[r], mn = mo > mt ? mo : mt;
        c[r] = mo == -INFINITY ? 0.0f : nx_attn_exp(mo - mn);
        m[r] = mn;
        t->exp_row(S + (size_t)r * ldS, nk, mn);
        ls[r] = 0.0f;
    }
    for (int p = 0; p < nk; p++)
        for (int r = 0; r < nr; r++) ls[r] += S[(size_t)r * ldS + p];
}

static const nx_attn_tier *tier(void) {
#if defined(__x86_64__)
    switch (nx_cpu_level_get()) {
    case NX_CPU_AVX512: return &nx_attn_tier_avx512;
    case NX_CPU_AVX2_VNNI: return &nx_attn_tier_avx2vnni;
    case NX_CPU_AVX2: return &nx_attn_tier_avx2;
    default: break;
    }
#elif defined(__aarch64__)
    switch (nx_cpu_level_get()) {
    case NX_CPU_NEON_I8MM: case NX_CPU_NEON_DOT: return &nx_attn_tier_neon_dot;
    case NX_CPU_NEON: return &nx_attn_tier_neon;
    default: break;
    }
#endif
    return &nx_attn_tier_scalar;
}

/* ===== driver ===== */

/* The quantized queries of the integer Q.K path: nb floats of scales, nb int32 sums and nb
 * blocks per query (rounded up to whole floats). */
static size_t qq_floats(int nq, int D) {
    const size_t nb = (size_t)(D / 32), n = (size_t)nq * nb;
    return 2 * n + (n * sizeof(nx_block_q8_0) + sizeof(float) - 1) / sizeof(float);
}

/* The key tile: f32 rows, or the tier's prepared tile (integer Q.K). */
static size_t kt_floats(int D) {
    const size_t f32 = (size_t)NX_ATTN_TILE * (size_t)D, prep = (NX_ATTN_PREP_BYTES(D) + sizeof(float) - 1) / sizeof(float);
    return f32 > prep ? f32 : prep;
}

size_t nx_attn_work_floats(int nq, int D, int Dv) {
    return 4 * (size_t)nq + (size_t)nq * NX_ATTN_TILE + kt_floats(D) + (size_t)NX_ATTN_TILE * (size_t)Dv + qq_floats(nq, D);
}

/* Rows of positions [pa, pb) (inside one tile) as float pointers: into the cache for F32,
 * else converted into buf; each row's counterpart pf bytes on prefetched as it goes (pf = 0:
 * none; rb: a row's bytes). */
static void tile_rows(const nx_attn_tier *t, const uint8_t *base, size_t stride, nx_type ty, int cells, int pa,
                      int pb, int n, float *buf, const float **rows, ptrdiff_t pf, size_t rb) {
    for (int p = pa; p < pb; p++) {
        const int slot = p < cells ? p : p % cells;
        const uint8_t *row = base + (size_t)slot * stride;
        nx_attn_pf(row, pf, 0, rb, rb);
        if (ty == NX_TYPE_F32) {
            rows[p - pa] = (const float *)row;
        } else {
            float *dst = buf + (size_t)(p - pa) * (size_t)n;
            t->row_f32(ty, row, dst, n);
            rows[p - pa] = dst;
        }
    }
}

/* Rows of positions [pa, pb) as they sit in the cache. */
static void tile_raw(const uint8_t *base, size_t stride, int cells, int pa, int pb, const void **rows) {
    for (int p = pa; p < pb; p++) rows[p - pa] = base + (size_t)(p < cells ? p : p % cells) * stride;
}

/* Queries per call up to which K / V are converted inside the dot loops (see nx_attn). */
#define NX_ATTN_FUSED_Q 8

void nx_attn(const nx_attn_kv *kv, const nx_attn_q *q, int nq, int D, int Dv, float scale, float *work) {
    enum { T = NX_ATTN_TILE };
    const nx_attn_tier *t = tier();
    if (nq > NX_ATTN_MAX_Q) nq = NX_ATTN_MAX_Q;
    float *m = work, *l = m + nq, *cw = l + nq, *lw = cw + nq, *S = lw + nq, *kt = S + (size_t)nq * T;
    float *vt = kt + kt_floats(D);
    const float *qp[NX_ATTN_MAX_Q];
    float *op[NX_ATTN_MAX_Q];
    int lo[NX_ATTN_MAX_Q], hi[NX_ATTN_MAX_Q];
    const float *kr[T], *vr[T];
    const void *kraw[T], *vraw[T];
    /* Few queries (a decode, a short verify) read each row about once: convert inside the dot
     * loops instead of through the tile buffer (same bits: the conversion is exact). Many
     * queries convert once into the buffer and reuse it. Probe the tier once per call. */
    const bool few = nq <= NX_ATTN_FUSED_Q;
    const size_t kbytes = nx_row_size(kv->tk, D), vbytes = nx_row_size(kv->tv, Dv);
    /* Q8_0 / Q4_0 keys: the integer Q.K contract (attn.h), the queries quantized once here. */
    const bool qk = (kv->tk == NX_TYPE_Q8_0 || kv->tk == NX_TYPE_Q4_0) && D % 32 == 0;
    const nx_attn_tier *tq = t->scores_qk ? t : &nx_attn_tier_scalar;
    nx_attn_qq qq = {0};
    const bool fk = !qk && few && kv->tk != NX_TYPE_F32 && t->scores_kv && t->scores_kv(qp, 0, kraw, kv->tk, 0, D, scale, S, T, 0);
    const bool fv = few && kv->tv != NX_TYPE_F32 && t->pv_kv && t->pv_kv(S, T, 0, vraw, kv->tv, 0, op, cw, Dv, 0);
    int glo = 0, ghi = -1;
    for (int i = 0; i < nq; i++) {
        qp[i] = q[i].q;
        op[i] = q[i].out;
        lo[i] = q[i].lo < 0 ? 0 : q[i].lo;
        hi[i] = q[i].hi;
        m[i] = -INFINITY;
        l[i] = 0.0f;
        memset(op[i], 0, (size_t)Dv * sizeof(float));
        if (hi[i] < lo[i]) continue;
        if (ghi < glo || lo[i] < glo) glo = lo[i];
        if (hi[i] > ghi) ghi = hi[i];
    }
    if (qk) {
        const int nb = D / 32;
        float *qd = vt + (size_t)T * Dv;
        int32_t *qs = (int32_t *)(qd + (size_t)nq * nb);
        nx_block_q8_0 *qb = (nx_block_q8_0 *)(qs + (size_t)nq * nb);
        for (int i = 0; i < nq; i++) {
            if (hi[i] < lo[i]) continue;
            nx_block_q8_0 *b = qb + (size_t)i * nb;
            nx_quantize_row(NX_TYPE_Q8_0, qp[i], b, D);
            for (int j = 0; j < nb; j++) {
                int32_t sum = 0;
                for (int v = 0; v < 32; v++) sum += b[j].qs[v];
                qd[(size_t)i * nb + j] = nx_half_to_f32(b[j].d);
                qs[(size_t)i * nb + j] = sum;
            }
        }
        qq = (nx_attn_qq){qb, qd, qs, nb};
    }
    for (int t0 = glo - glo % T; t0 <= ghi; t0 += T) {
        const int t1 = t0 + T;
        /* the part of the tile any query sees */
        int pa = t1, pb = t0;
        for (int i = 0; i < nq; i++) {
            const int a = lo[i] > t0 ? lo[i] : t0, b = hi[i] + 1 < t1 ? hi[i] + 1 : t1;
            if (a >= b) continue;
            if (a < pa) pa = a;
            if (b > pb) pb = b;
        }
        if (pa >= pb) continue;
        /* Prefetch distance (nx_attn_pf, attn_impl.h) for the fused loops and tile_rows: the rows
         * NX_ATTN_PF_TILES tiles on, where those are cache rows at the same offset (no ring
         * wrap) and visible to some query; else none. Not for Q4_0 rows (half a byte per
         * value): there the hardware prefetchers keep up, and the prefetches measured
         * 0.92-1.06x. */
        const int fe = pb + NX_ATTN_PF_TILES * T;
        const bool pf_on = fe <= kv->cells && fe <= ghi + 1;
        const ptrdiff_t pf_k = pf_on && kbytes >= (size_t)D ? (ptrdiff_t)(NX_ATTN_PF_TILES * T) * (ptrdiff_t)kv->k_stride : 0;
        const ptrdiff_t pf_v = pf_on && vbytes >= (size_t)Dv ? (ptrdiff_t)(NX_ATTN_PF_TILES * T) * (ptrdiff_t)kv->v_stride : 0;
        if (qk || fk) tile_raw(kv->k, kv->k_stride, kv->cells, pa, pb, kraw);
        else tile_rows(t, kv->k, kv->k_stride, kv->tk, kv->cells, pa, pb, D, kt, kr, pf_k, kbytes);
        if (qk && tq->k_prep) tq->k_prep(kraw, kv->tk, pb - pa, D, kt, pf_k);
        if (fv) tile_raw(kv->v, kv->v_stride, kv->cells, pa, pb, vraw);
        else tile_rows(t, kv->v, kv->v_stride, kv->tv, kv->cells, pa, pb, Dv, vt, vr, pf_v, vbytes);
        for (int i = 0; i < nq;) {
            const int a = lo[i] > t0 ? lo[i] : t0, b = hi[i] + 1 < t1 ? hi[i] + 1 : t1;
            if (a >= b) { i++; continue; }
            int j = i + 1;
            while (j < nq && (lo[j] > t0 ? lo[j] : t0) == a && (hi[j] + 1 < t1 ? hi[j] + 1 : t1) == b) j++;
            const int nk = b - a, nr = j - i;
            if (qk) tq->scores_qk(&qq, i, nr, kraw, tq->k_prep ? kt : NULL, a - pa, nk, kv->tk, D, scale, S, T);
            else if (fk) t->scores_kv(qp + i, nr, kraw + (a - pa), kv->tk, nk, D, scale, S, T, pf_k);
            else t->scores(qp + i, nr, kr + (a - pa), nk, D, scale, S, T);
            /* each row's running max and sum; cr: o's rescale, which pv applies */
            float *cr = cw + i, *ls = lw + i;
            if (t->softmax) t->softmax(S, T, nr, nk, m + i, cr, ls);
            else softmax_rows(t, S, T, nr, nk, m + i, cr, ls);
            for (int r = 0; r < nr; r++) l[i + r] = l[i + r] * cr[r] + ls[r];
            if (fv) t->pv_kv(S, T, nr, vraw + (a - pa), kv->tv, nk, op + i, cr, Dv, pf_v);
            else t->pv(S, T, nr, vr + (a - pa), nk, op + i, cr, Dv);
            i = j;
        }
    }
    for (int i = 0; i < nq; i++) {
        if (!(l[i] > 0.0f)) continue;
        float *o = op[i];
        const float li = l[i];
        for (int d = 0; d < Dv; d++) o[d] = o[d] / li;
    }
}
