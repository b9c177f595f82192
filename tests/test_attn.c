/*
 * test_attn.c — nx_attn (src/kernels/attn.h): every SIMD level bit-identical to the scalar
 * reference for every cache type, head size and range shape; a query's result independent of
 * the other queries of the call (decode == prefill == chunked); rings; agreement with exact
 * softmax attention in double; the contract's exp against exp().
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/attn.h"
#include "kernels/attn_impl.h"
#include "kernels/cpu.h"
#include "quant/quant.h"
#include "tensor.h"
#include "test.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

typedef struct cache {
    nx_type t;
    int n, cells;
    size_t stride;
    uint8_t *data;     /* cells rows of the cache type */
    float *ref;        /* the same rows dequantized (what the kernel must see) */
} cache;

static void cache_make(cache *c, nx_type t, int n, int cells, float amp) {
    c->t = t; c->n = n; c->cells = cells;
    c->stride = nx_row_size(t, n);
    c->data = calloc((size_t)cells, c->stride);
    c->ref = calloc((size_t)cells * n, sizeof(float));
    float *row = malloc((size_t)n * sizeof(float));
    for (int r = 0; r < cells; r++) {
        for (int i = 0; i < n; i++) row[i] = amp * frand();
        if (t == NX_TYPE_F32) memcpy(c->data + (size_t)r * c->stride, row, (size_t)n * sizeof(float));
        else nx_quantize_row(t, row, c->data + (size_t)r * c->stride, n);
        nx_dequantize_row(t, c->data + (size_t)r * c->stride, c->ref + (size_t)r * n, n);
    }
    free(row);
}
static void cache_free(cache *c) { free(c->data); free(c->ref); }

/* Exact attention in double over the dequantized rows; with Q8_0 / Q4_0 keys the query is
 * first quantized to Q8_0 (attn.h's integer Q.K contract) unless `raw`. */
static void attn_double_q(const cache *k, const cache *v, const float *q_in, int lo, int hi, float scale, float *out,
                          bool raw) {
    const int D = k->n, Dv = v->n;
    float qbuf[512];
    const float *q = q_in;
    if (!raw && (k->t == NX_TYPE_Q8_0 || k->t == NX_TYPE_Q4_0) && D % 32 == 0 && D <= 512) {
        uint8_t blk[512 / 32 * 34];
        nx_quantize_row(NX_TYPE_Q8_0, q_in, blk, D);
        nx_dequantize_row(NX_TYPE_Q8_0, blk, qbuf, D);
        q = qbuf;
    }
    if (lo < 0) lo = 0;
    for (int d = 0; d < Dv; d++) out[d] = 0;
    if (hi < lo) return;
    double mx = -INFINITY, *s = malloc(sizeof(double) * (size_t)(hi - lo + 1)), sum = 0;
    for (int p = lo; p <= hi; p++) {
        const float *kr = k->ref + (size_t)(p % k->cells) * D;
        double a = 0;
        for (int d = 0; d < D; d++) a += (double)q[d] * kr[d];
        s[p - lo] = a * scale;
        if (s[p - lo] > mx) mx = s[p - lo];
    }
    for (int p = lo; p <= hi; p++) sum += (s[p - lo] = exp(s[p - lo] - mx));
    for (int d = 0; d < Dv; d++) {
        double a = 0;
        for (int p = lo; p <= hi; p++) a += s[p - lo] * v->ref[(size_t)(p % v->cells) * Dv + d];
        out[d] = (float)(a / sum);
    }
    free(s);
}
static void attn_double(const cache *k, const cache *v, const float *q, int lo, int hi, float scale, float *out) {
    attn_double_q(k, v, q, lo, hi, scale, out, false);
}

static void run(const cache *k, const cache *v, const float *q, const int *lo, const int *hi, int nq, float scale,
                float *out) {
    const int D = k->n, Dv = v->n;
    nx_attn_kv kv = {.k = k->data, .v = v->data, .k_stride = k->stride, .v_stride = v->stride, .tk = k->t,
                     .tv = v->t, .cells = k->cells};
    nx_attn_q *qs = malloc(sizeof *qs * (size_t)nq);
    for (int i = 0; i < nq; i++) qs[i] = (nx_attn_q){q + (size_t)i * D, out + (size_t)i * Dv, lo[i], hi[i]};
    float *work = malloc(sizeof(float) * nx_attn_work_floats(nq, D, Dv));
    nx_attn(&kv, qs, nq, D, Dv, scale, work);
    free(work);
    free(qs);
}

/* nq queries: `grp` heads per row, rows at positions p0, p0+1, ... (causal), optional window. */
static void ranges(int nq, int grp, int p0, int window, int *lo, int *hi) {
    for (int i = 0; i < nq; i++) {
        hi[i] = p0 + i / grp;
        lo[i] = window > 0 ? hi[i] - window + 1 : 0;
    }
}

static void check_case(nx_type tk, nx_type tv, int D, int Dv, int grp, int rows, int p0, int window, int cells) {
    const int nq = grp * rows, n_pos = p0 + rows;
    if (cells <= 0) cells = n_pos;
    cache k, v;
    cache_make(&k, tk, D, cells, 1.0f);
    cache_make(&v, tv, Dv, cells, 1.0f);
    float *q = malloc(sizeof(float) * (size_t)nq * D);
    for (int i = 0; i < nq * D; i++) q[i] = 2.0f * frand();
    int *lo = malloc(sizeof(int) * (size_t)nq), *hi = malloc(sizeof(int) * (size_t)nq);
    ranges(nq, grp, p0, window, lo, hi);
    const float scale = 1.0f / sqrtf((float)D);
    float *ref = malloc(sizeof(float) * (size_t)nq * Dv), *got = malloc(sizeof(float) * (size_t)nq * Dv);
    float *one = malloc(sizeof(float) * (size_t)grp * Dv), *dbl = malloc(sizeof(float) * (size_t)Dv);
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    const int nl = nx_cpu_levels(lv);
    nx_cpu_set_level(NX_CPU_SCALAR);
    run(&k, &v, q, lo, hi, nq, scale, ref);
    /* against double */
    double maxerr = 0;
    for (int i = 0; i < nq; i++) {
        attn_double(&k, &v, q + (size_t)i * D, lo[i], hi[i], scale, dbl);
        for (int d = 0; d < Dv; d++) {
            const double e = fabs((double)ref[(size_t)i * Dv + d] - dbl[d]);
            if (e > maxerr) maxerr = e;
        }
    }
    CHECK_MSG(maxerr < 2e-5, "D %d Dv %d types %d/%d: |attn - exact| %.3g", D, Dv, tk, tv, maxerr);
    if (tk == NX_TYPE_Q8_0 || tk == NX_TYPE_Q4_0) {
        /* what quantizing the query costs against the float query: |q| <= 2 in 32-blocks of
         * step max/127 (<= 0.0079 rounding <= 0.004 per value), random K of |k| <= 1, scale
         * 1/sqrt(D): each score moves by <= ~0.004 * sqrt(D/3) * 1/sqrt(D) ~ 0.0023 (rms far
         * less), and outputs (averages of |v| <= 1) by about as much. */
        double qerr = 0;
        for (int i = 0; i < nq; i++) {
            attn_double_q(&k, &v, q + (size_t)i * D, lo[i], hi[i], scale, dbl, true);
            for (int d = 0; d < Dv; d++) {
                const double e = fabs((double)ref[(size_t)i * Dv + d] - dbl[d]);
                if (e > qerr) qerr = e;
            }
        }
        CHECK_MSG(qerr < 1e-2, "D %d types %d/%d: |attn - float-query attn| %.3g", D, tk, tv, qerr);
    }
    for (int l = 0; l < nl; l++) {
        nx_cpu_set_level(lv[l]);
        run(&k, &v, q, lo, hi, nq, scale, got);
        CHECK_MSG(!memcmp(got, ref, sizeof(float) * (size_t)nq * Dv), "level %s D %d Dv %d types %d/%d grp %d rows %d p0 %d",
                  nx_cpu_level_name(lv[l]), D, Dv, tk, tv, grp, rows, p0);
        /* each row alone (a decode) gives the bits of the batch (a prefill) */
        for (int r = 0; r < rows; r += 1 + rows / 5) {
            run(&k, &v, q + (size_t)r * grp * D, lo + r * grp, hi + r * grp, grp, scale, one);
            CHECK_MSG(!memcmp(one, ref + (size_t)r * grp * Dv, sizeof(float) * (size_t)grp * Dv),
                      "level %s row %d alone differs", nx_cpu_level_name(lv[l]), r);
            if (grp > 1) {   /* and one head alone */
                run(&k, &v, q + (size_t)r * grp * D, lo + r * grp, hi + r * grp, 1, scale, one);
                CHECK_MSG(!memcmp(one, ref + (size_t)r * grp * Dv, sizeof(float) * (size_t)Dv),
                          "level %s row %d head 0 alone differs", nx_cpu_level_name(lv[l]), r);
            }
        }
    }
    nx_cpu_set_level(lv[nl - 1]);
    free(q); free(lo); free(hi); free(ref); free(got); free(one); free(dbl);
    cache_free(&k); cache_free(&v);
}

static void test_levels_exact(void) {
    const nx_type types[] = {NX_TYPE_F32, NX_TYPE_F16, NX_TYPE_BF16, NX_TYPE_Q8_0, NX_TYPE_Q4_0};
    for (int t = 0; t < 5; t++) {
        check_case(types[t], types[t], 64, 64, 4, 9, 0, 0, 0);
        check_case(types[t], types[t], 128, 128, 2, 5, 70, 0, 0);
        check_case(types[t], types[t], 256, 256, 4, 3, 300, 0, 0);
    }
    check_case(NX_TYPE_F16, NX_TYPE_Q8_0, 256, 256, 8, 2, 33, 0, 0);
    check_case(NX_TYPE_Q4_0, NX_TYPE_F16, 32, 32, 1, 40, 5, 0, 0);
    /* the largest head the integer Q.K path takes (16 blocks per key) */
    check_case(NX_TYPE_Q8_0, NX_TYPE_F16, 512, 512, 2, 3, 40, 0, 0);
    check_case(NX_TYPE_Q4_0, NX_TYPE_F16, 512, 512, 2, 3, 40, 0, 0);
    /* runs of three queries, an odd block count */
    check_case(NX_TYPE_Q8_0, NX_TYPE_F16, 96, 64, 3, 5, 29, 0, 0);
    check_case(NX_TYPE_Q4_0, NX_TYPE_Q8_0, 96, 64, 3, 5, 29, 0, 0);
    /* sizes not multiples of 16: the scalar path at every level */
    check_case(NX_TYPE_F32, NX_TYPE_F32, 8, 8, 2, 7, 3, 0, 0);
    check_case(NX_TYPE_F16, NX_TYPE_F16, 24, 40, 3, 6, 50, 0, 0);
    check_case(NX_TYPE_F32, NX_TYPE_F32, 16, 48, 5, 3, 17, 0, 0);
    /* odd group sizes and tile edges */
    for (int p0 = 28; p0 <= 36; p0++) check_case(NX_TYPE_F16, NX_TYPE_F16, 64, 64, 3, 5, p0, 0, 0);
    /* the integer Q.K path at tile edges, key runs not starting on a vector, many queries */
    for (int p0 = 12; p0 <= 36; p0 += 3) {
        check_case(NX_TYPE_Q8_0, NX_TYPE_F16, 64, 64, 3, 19, p0, 0, 0);
        check_case(NX_TYPE_Q4_0, NX_TYPE_Q8_0, 96, 96, 5, 7, p0, 0, 0);
    }
    /* and many queries (runs of 4 and their 1-3 rest, key runs starting and ending anywhere
     * in a tile) */
    for (int p0 = 28; p0 <= 36; p0++) {
        check_case(NX_TYPE_Q8_0, NX_TYPE_F16, 64, 64, 8, 9, p0, 0, 0);
        check_case(NX_TYPE_Q4_0, NX_TYPE_F16, 64, 64, 8, 9, p0, 0, 0);
    }
    check_case(NX_TYPE_Q8_0, NX_TYPE_F16, 96, 96, 5, 7, 61, 0, 0);
    check_case(NX_TYPE_Q4_0, NX_TYPE_F16, 96, 96, 7, 5, 61, 0, 0);
}

/* Decodes deep enough that the fused loops prefetch the rows two tiles on (attn_impl.h): the
 * bits must not change, at every level; and a ring whose later tiles would wrap, where the
 * prefetch stops before the ring's end. */
static void test_prefetch_depth(void) {
    const nx_type types[] = {NX_TYPE_F16, NX_TYPE_BF16, NX_TYPE_Q8_0, NX_TYPE_Q4_0, NX_TYPE_F32};
    for (int t = 0; t < 5; t++) check_case(types[t], types[t], 256, 256, 4, 2, 700, 0, 0);
    check_case(NX_TYPE_F16, NX_TYPE_Q8_0, 128, 128, 2, 1, 333, 0, 0);
    check_case(NX_TYPE_Q8_0, NX_TYPE_F16, 256, 256, 8, 1, 150, 150, 160);
    check_case(NX_TYPE_F16, NX_TYPE_F16, 256, 256, 4, 1, 200, 150, 160);
}

static void test_window_ring(void) {
    /* a sliding window of 20 over a 24-cell ring (positions wrap) */
    check_case(NX_TYPE_F16, NX_TYPE_F16, 64, 64, 2, 4, 90, 20, 24);
    check_case(NX_TYPE_F32, NX_TYPE_F32, 256, 256, 4, 8, 200, 37, 45);
    check_case(NX_TYPE_Q8_0, NX_TYPE_Q8_0, 128, 128, 2, 3, 70, 64, 67);
    check_case(NX_TYPE_Q4_0, NX_TYPE_Q4_0, 128, 128, 3, 6, 70, 45, 50);
}

/* Keys whose scores are NaN (a NaN in the row, or in a Q8_0 block's scale) at the first
 * position of a tile and inside tiles: the running max leaves them out (attn.h), so they get
 * weight e(NaN) = 0 and the outputs stay finite, bit for bit at every level, for runs of many
 * queries (the tiers' softmax) and a decode's few. */
static void test_nan_scores(void) {
    const nx_type types[] = {NX_TYPE_F32, NX_TYPE_F16, NX_TYPE_Q8_0};
    const int bad[] = {0, 5, 32, 33, 70};
    for (int t = 0; t < 3; t++)
        for (int rows = 1; rows <= 20; rows += 19) {
            const int D = 64, grp = 4, nq = grp * rows, p0 = 80, cells = p0 + rows;
            cache k, v;
            cache_make(&k, types[t], D, cells, 1.0f);
            cache_make(&v, NX_TYPE_F16, D, cells, 1.0f);
            for (int b = 0; b < 5; b++) {
                uint8_t *row = k.data + (size_t)bad[b] * k.stride;
                if (types[t] == NX_TYPE_F32) ((float *)row)[3] = NAN;
                else if (types[t] == NX_TYPE_F16) ((nx_half *)row)[3] = 0x7E00;
                else ((nx_block_q8_0 *)row)->d = 0x7E00;
            }
            float *q = malloc(sizeof(float) * (size_t)nq * D), *ref = malloc(sizeof(float) * (size_t)nq * D);
            float *got = malloc(sizeof(float) * (size_t)nq * D);
            for (int i = 0; i < nq * D; i++) q[i] = 2.0f * frand();
            int lo[80], hi[80];
            ranges(nq, grp, p0, 0, lo, hi);
            nx_cpu_level lv[NX_CPU_MAX_LEVELS];
            const int nl = nx_cpu_levels(lv);
            nx_cpu_set_level(NX_CPU_SCALAR);
            run(&k, &v, q, lo, hi, nq, 0.125f, ref);
            for (int i = 0; i < nq * D; i++) CHECK_MSG(isfinite(ref[i]), "type %d rows %d: output %d not finite", types[t], rows, i);
            for (int l = 0; l < nl; l++) {
                nx_cpu_set_level(lv[l]);
                run(&k, &v, q, lo, hi, nq, 0.125f, got);
                CHECK_MSG(!memcmp(got, ref, sizeof(float) * (size_t)nq * D), "level %s type %d rows %d: NaN keys differ",
                          nx_cpu_level_name(lv[l]), types[t], rows);
            }
            nx_cpu_set_level(lv[nl - 1]);
            free(q); free(ref); free(got);
            cache_free(&k); cache_free(&v);
        }
}

static void test_empty_range(void) {
    cache k, v;
    cache_make(&k, NX_TYPE_F32, 16, 4, 1.0f);
    cache_make(&v, NX_TYPE_F32, 16, 4, 1.0f);
    float q[32] = {1}, out[32];
    for (int i = 0; i < 32; i++) out[i] = 7.0f;
    int lo[2] = {0, 3}, hi[2] = {-1, 2};
    run(&k, &v, q, lo, hi, 2, 1.0f, out);
    for (int i = 0; i < 32; i++) CHECK(out[i] == 0.0f);
    cache_free(&k); cache_free(&v);
}

static void test_exp(void) {
    double worst = 0;
    for (float x = -87.0f; x <= 0.0f; x += 0.00731f) {
        const double e = fabs((double)nx_attn_exp(x) / exp((double)x) - 1.0);
        if (e > worst) worst = e;
    }
    CHECK_MSG(worst <= 2e-7, "exp rel err %.3g", worst);
    CHECK(nx_attn_exp(0.0f) == 1.0f);
    CHECK(nx_attn_exp(-INFINITY) == 0.0f);
    CHECK(nx_attn_exp(-100.0f) == 0.0f);
}

/* Row conversions of every tier: every half value (NaN payloads included) and random Q8_0 /
 * Q4_0 / BF16 rows, bit for bit against the scalar dequantizers. */
static void test_rows(void) {
    const nx_attn_tier *tiers[3] = {&nx_attn_tier_scalar, NULL, NULL};
    int nt = 1;
#if defined(__x86_64__)
    if (nx_cpu_level_detected() >= NX_CPU_AVX2) tiers[nt++] = &nx_attn_tier_avx2;
    if (nx_cpu_level_detected() >= NX_CPU_AVX512) tiers[nt++] = &nx_attn_tier_avx512;
#endif
    uint16_t *h = malloc(65536 * sizeof *h);
    float *a = malloc(65536 * 4), *b = malloc(65536 * 4);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int t = 0; t < nt; t++) {
        nx_dequantize_row(NX_TYPE_F16, h, a, 65536);
        CHECK(tiers[t]->row_f32(NX_TYPE_F16, h, b, 65536));
        CHECK_MSG(!memcmp(a, b, 65536 * 4), "tier %d f16", t);
        const nx_type qt[3] = {NX_TYPE_Q8_0, NX_TYPE_Q4_0, NX_TYPE_BF16};
        for (int k = 0; k < 3; k++) {
            float src[256];
            uint8_t row[1024];
            for (int i = 0; i < 256; i++) src[i] = 3.0f * frand();
            nx_quantize_row(qt[k], src, row, 256);
            nx_dequantize_row(qt[k], row, a, 256);
            CHECK(tiers[t]->row_f32(qt[k], row, b, 256));
            CHECK_MSG(!memcmp(a, b, 256 * 4), "tier %d type %d", t, qt[k]);
        }
    }
    free(h); free(a); free(b);
}

int main(void) {
    RUN(test_rows);
    RUN(test_exp);
    RUN(test_levels_exact);
    RUN(test_nan_scores);
    RUN(test_prefetch_depth);
    RUN(test_window_ring);
    RUN(test_empty_range);
    return test_summary();
}
