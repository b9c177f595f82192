/*
 * test_matmul.c — nx_matmul on every weight type at every SIMD level:
 *   - against a double-precision reference (W dequantized by the quant module, x quantized
 *     the way the kernels promise: per block d = amax/127, q = rint(x/d)), and against the
 *     plain float product within the activation-quantization error bound;
 *   - SIMD levels against the scalar level;
 *   - batch invariance (row r alone == row r inside a batch of 1..16, 17, 33 rows, bitwise;
 *     and of up to 70 rows across the AVX-512 batched kernels' tiles and panel chunks),
 *     thread invariance (1, 2, 3 threads, bitwise), row subsets, strides, odd shapes;
 *   - extreme codes (all-0x00/0xFF/0x80/0x7F weights, activations at +-127): no int16 /
 *     int32 saturation in the SIMD kernels' integer sums (== scalar, batches 1..9);
 *   - bad arguments give errors, not crashes;
 *   - packed Q8_0 / Q4_0 / IQ4_NL / Q4_K / Q5_K / Q6_K / IQ4_XS / F32 / F16 / BF16 x16 weights (AVX2 and AVX-512): the packed contract bit for bit,
 *     batch / thread invariance, up to prefill batches of 512 (the AVX-512 interleaved tiles);
 *     the AVX-512 level once more with AMX where the machine has it (Q8_0 prefill tiles).
 * Weights are random bytes with sane scale fields, so every code pattern is exercised.
 */
#include "test.h"
#include <stdint.h>
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/matmul_impl.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "tensor.h"
#include "threads.h"

static const nx_type k_types[] = {
    NX_TYPE_F32, NX_TYPE_F16, NX_TYPE_BF16, NX_TYPE_Q8_0, NX_TYPE_Q4_0, NX_TYPE_Q4_1, NX_TYPE_Q5_0,
    NX_TYPE_Q5_1, NX_TYPE_Q4_K, NX_TYPE_Q5_K, NX_TYPE_Q6_K, NX_TYPE_IQ4_NL, NX_TYPE_IQ4_XS,
    NX_TYPE_Q2_K, NX_TYPE_Q3_K,
};
#define N_TYPES (int)(sizeof k_types / sizeof k_types[0])

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float frnd(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); }   /* [-1, 1) */

static void put_half(uint8_t *p, float f) { nx_half h = nx_f32_to_half(f); memcpy(p, &h, 2); }

/* Random weight rows: random bytes, then sane scales (no inf/nan), like a real file. */
static uint8_t *make_weights(nx_type t, int64_t n_in, int64_t n_out, size_t *row_bytes) {
    const nx_type_traits *tt = nx_type_info(t);
    size_t rb = nx_row_size(t, n_in);
    uint8_t *w = malloc(rb * (size_t)n_out);
    for (size_t i = 0; i < rb * (size_t)n_out; i++) w[i] = (uint8_t)rnd();
    int64_t nb = n_in / tt->blck_size;
    for (int64_t o = 0; o < n_out; o++) {
        uint8_t *row = w + rb * (size_t)o;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = row + (size_t)b * tt->type_size;
            switch (t) {
            case NX_TYPE_F32: { float f = frnd(); memcpy(blk, &f, 4); break; }
            case NX_TYPE_F16: put_half(blk, frnd()); break;
            case NX_TYPE_BF16: { nx_bf16 h = nx_f32_to_bf16(frnd()); memcpy(blk, &h, 2); break; }
            case NX_TYPE_Q4_1: case NX_TYPE_Q5_1: case NX_TYPE_Q4_K: case NX_TYPE_Q5_K:
                put_half(blk, 0.01f + 0.02f * (frnd() + 1)); put_half(blk + 2, 0.02f * (frnd() + 1)); break;
            case NX_TYPE_Q6_K: put_half(blk + 208, 0.01f * frnd()); break;
            case NX_TYPE_Q2_K: put_half(blk + 80, 0.01f + 0.02f * (frnd() + 1)); put_half(blk + 82, 0.02f * (frnd() + 1)); break;
            case NX_TYPE_Q3_K: put_half(blk + 108, 0.01f * frnd()); break;
            default: put_half(blk, 0.05f * frnd()); break;   /* d at offset 0 */
            }
        }
    }
    *row_bytes = rb;
    return w;
}

/* The activation format the kernels promise, dequantized: per block of B, d = amax/127. */
static void quantize_x(nx_type t, const float *x, int64_t n, float *xq, float *err_bound_d) {
    int B = 0;
    switch (t) {
    case NX_TYPE_F32: case NX_TYPE_F16: case NX_TYPE_BF16: B = 0; break;
    case NX_TYPE_Q4_K: case NX_TYPE_Q5_K: case NX_TYPE_Q6_K: case NX_TYPE_IQ4_XS:
    case NX_TYPE_Q2_K: case NX_TYPE_Q3_K: B = 256; break;
    default: B = 32; break;
    }
    if (!B) { memcpy(xq, x, (size_t)n * sizeof *x); for (int64_t i = 0; i < n; i++) err_bound_d[i] = 0; return; }
    for (int64_t b = 0; b < n; b += B) {
        float amax = 0;
        for (int i = 0; i < B; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int i = 0; i < B; i++) {
            xq[b + i] = d * nearbyintf(fminf(fmaxf(x[b + i] * id, -127.0f), 127.0f));
            err_bound_d[b + i] = d * 0.5f;
        }
    }
}

typedef struct {
    nx_type type;
    int64_t n_in, n_out;
    size_t rb;
    uint8_t *wbytes;
    nx_tensor w;
    float *wf;          /* dequantized, n_out x n_in */
} wmat;

static void wmat_make(wmat *m, nx_type t, int64_t n_in, int64_t n_out) {
    m->type = t; m->n_in = n_in; m->n_out = n_out;
    m->wbytes = make_weights(t, n_in, n_out, &m->rb);
    int64_t ne[2] = {n_in, n_out};
    CHECK(nx_tensor_init(&m->w, "w", t, 2, ne, m->wbytes));
    m->wf = malloc(sizeof(float) * (size_t)(n_in * n_out));
    for (int64_t o = 0; o < n_out; o++) {
        if (t == NX_TYPE_F32) memcpy(m->wf + o * n_in, m->wbytes + m->rb * (size_t)o, m->rb);
        else CHECK(nx_dequantize_row(t, m->wbytes + m->rb * (size_t)o, m->wf + o * n_in, n_in));
    }
}

static void wmat_free(wmat *m) { free(m->wbytes); free(m->wf); }

static float *make_x(int64_t n_rows, int64_t ldx) {
    float *x = malloc(sizeof(float) * (size_t)(n_rows * ldx));
    for (int64_t i = 0; i < n_rows * ldx; i++) x[i] = frnd() * (i % 7 == 0 ? 4.0f : 1.0f);
    return x;
}

static nx_status run_mm(nx_threadpool *tp, const wmat *m, const float *x, int64_t n_rows, int64_t ldx, float *y, int64_t ldy) {
    nx_matmul_scratch s;
    nx_matmul_scratch_init(&s);
    nx_error err = {0};
    nx_status st = nx_matmul(tp, &s, &m->w, x, n_rows, ldx, y, ldy, &err);
    if (st != NX_OK) fprintf(stderr, "  matmul: %s\n", err.msg);
    nx_matmul_scratch_free(&s);
    return st;
}

/* Scalar first (the reference); a level this machine lacks is skipped (nx_cpu_set_level). */
static const nx_cpu_level k_levels[] = {NX_CPU_SCALAR, NX_CPU_AVX2, NX_CPU_AVX2_VNNI, NX_CPU_AVX512, NX_CPU_NEON,
                                        NX_CPU_NEON_DOT, NX_CPU_NEON_I8MM};

/* Accuracy against the references and the scalar level, for one shape. */
static void check_accuracy(nx_type t, int64_t n_in, int64_t n_out, int64_t n_rows) {
    wmat m;
    wmat_make(&m, t, n_in, n_out);
    const int64_t ldx = n_in + 3, ldy = n_out + 2;
    float *x = make_x(n_rows, ldx);
    float *xq = malloc(sizeof(float) * (size_t)(n_rows * n_in)), *eb = malloc(sizeof(float) * (size_t)(n_rows * n_in));
    for (int64_t r = 0; r < n_rows; r++) quantize_x(t, x + r * ldx, n_in, xq + r * n_in, eb + r * n_in);
    float *ys = malloc(sizeof(float) * (size_t)(n_rows * ldy)), *y = malloc(sizeof(float) * (size_t)(n_rows * ldy));
    for (size_t l = 0; l < sizeof k_levels / sizeof k_levels[0]; l++) {
        nx_cpu_level got = nx_cpu_set_level(k_levels[l]);
        if (got != k_levels[l]) continue;
        float *out = l == 0 ? ys : y;
        for (int64_t i = 0; i < n_rows * ldy; i++) out[i] = NAN;
        CHECK(run_mm(NULL, &m, x, n_rows, ldx, out, ldy) == NX_OK);
        int bad = 0;
        for (int64_t r = 0; r < n_rows && bad < 3; r++) {
            for (int64_t o = 0; o < n_out; o++) {
                double ref = 0, mag = 0, exact = 0, bound = 0;
                for (int64_t i = 0; i < n_in; i++) {
                    double wv = m.wf[o * n_in + i];
                    ref += wv * xq[r * n_in + i];
                    mag += fabs(wv * xq[r * n_in + i]);
                    exact += wv * x[r * ldx + i];
                    bound += fabs(wv) * eb[r * n_in + i];
                }
                double v = out[r * ldy + o];
                double tol = 2e-5 * mag + 1e-6;
                if (!(fabs(v - ref) <= tol) || !(fabs(v - exact) <= bound + tol)) {
                    CHECK_MSG(0, "%s level %s n_in %lld r %lld o %lld: got %.9g ref %.9g (tol %.3g) exact %.9g (bound %.3g)",
                              nx_type_name(t), nx_cpu_level_name(got), (long long)n_in, (long long)r, (long long)o,
                              v, ref, tol, exact, bound + tol);
                    bad++;
                }
                if (l > 0 && !(fabs(v - ys[r * ldy + o]) <= 1e-5 * mag + 1e-6)) {
                    CHECK_MSG(0, "%s level %s vs scalar r %lld o %lld: %.9g vs %.9g", nx_type_name(t),
                              nx_cpu_level_name(got), (long long)r, (long long)o, v, ys[r * ldy + o]);
                    bad++;
                }
            }
            for (int64_t o = n_out; o < ldy; o++) CHECK(isnan(out[r * ldy + o]));   /* padding untouched */
        }
    }
    nx_cpu_set_level(NX_CPU_AVX512);
    free(x); free(xq); free(eb); free(ys); free(y);
    wmat_free(&m);
}

static void test_accuracy(void) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        nx_type t = k_types[ti];
        int64_t B = nx_type_info(t)->blck_size;
        if (B == 1) {
            check_accuracy(t, 1, 3, 2);
            check_accuracy(t, 17, 5, 3);
            check_accuracy(t, 83, 7, 5);
        } else {
            check_accuracy(t, B, 5, 3);          /* one block */
            check_accuracy(t, 3 * B, 7, 2);      /* odd block count */
            check_accuracy(t, 8 * B, 13, 4);
        }
    }
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* Row r alone == row r in a batch of n_rows, bitwise, at every level; plus row subsets. */
static void test_batch_invariance(void) {
    static const int batches[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 33};
    const int max_rows = 33;
    for (int ti = 0; ti < N_TYPES; ti++) {
        nx_type t = k_types[ti];
        int64_t B = nx_type_info(t)->blck_size;
        int64_t n_in = B == 1 ? 45 : 3 * B, n_out = 6, ldx = n_in + 1, ldy = n_out + 1;
        wmat m;
        wmat_make(&m, t, n_in, n_out);
        float *x = make_x(max_rows, ldx);
        float *single = malloc(sizeof(float) * (size_t)(max_rows * n_out));
        float *y = malloc(sizeof(float) * (size_t)(max_rows * ldy));
        for (size_t l = 0; l < sizeof k_levels / sizeof k_levels[0]; l++) {
            if (nx_cpu_set_level(k_levels[l]) != k_levels[l]) continue;
            for (int r = 0; r < max_rows; r++) CHECK(run_mm(NULL, &m, x + r * ldx, 1, ldx, single + r * n_out, n_out) == NX_OK);
            for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                int n = batches[bi];
                /* the batch starts at a varying row so every row sits at several positions */
                int r0 = (int)(bi % 3) * (n <= 16 ? 1 : 0);
                CHECK(run_mm(NULL, &m, x + r0 * ldx, n, ldx, y, ldy) == NX_OK);
                for (int r = 0; r < n; r++)
                    CHECK_MSG(same_bits(y + r * ldy, single + (r0 + r) * n_out, (size_t)n_out), "%s level %s batch %d row %d",
                              nx_type_name(t), nx_cpu_level_name(k_levels[l]), n, r);
            }
            /* a subset of output rows is the same columns of the full result */
            nx_error err = {0};
            float sub[3 * 3];
            CHECK(nx_matmul_rows(NULL, NULL, &m.w, 2, 5, x, 3, ldx, sub, 3, &err) == NX_OK);
            for (int r = 0; r < 3; r++) CHECK(same_bits(sub + 3 * r, single + r * n_out + 2, 3));
        }
        nx_cpu_set_level(NX_CPU_AVX512);
        free(x); free(single); free(y);
        wmat_free(&m);
    }
}

static void test_thread_invariance(void) {
    nx_error err = {0};
    nx_threadpool *tp[3] = {nx_threadpool_create(1, &err), nx_threadpool_create(2, &err), nx_threadpool_create(3, &err)};
    CHECK(tp[0] && tp[1] && tp[2]);
    if (!tp[0] || !tp[1] || !tp[2]) return;
    for (int ti = 0; ti < N_TYPES; ti++) {
        nx_type t = k_types[ti];
        int64_t B = nx_type_info(t)->blck_size;
        int64_t n_in = B == 1 ? 64 : 2 * B, n_out = 37, n_rows = 20;
        wmat m;
        wmat_make(&m, t, n_in, n_out);
        float *x = make_x(n_rows, n_in);
        float *y[3];
        for (int k = 0; k < 3; k++) {
            y[k] = malloc(sizeof(float) * (size_t)(n_rows * n_out));
            CHECK(run_mm(tp[k], &m, x, n_rows, n_in, y[k], n_out) == NX_OK);
        }
        CHECK_MSG(same_bits(y[0], y[1], (size_t)(n_rows * n_out)) && same_bits(y[0], y[2], (size_t)(n_rows * n_out)),
                  "%s", nx_type_name(t));
        for (int k = 0; k < 3; k++) free(y[k]);
        free(x);
        wmat_free(&m);
    }
    for (int k = 0; k < 3; k++) nx_threadpool_free(tp[k]);
}

/* nx_matmul_multi == one nx_matmul per weight, bit for bit: same type (one dispatch, rows of
 * all weights split across threads) and mixed types (fallback), 1 and 20 rows, 1-3 threads. */
static void test_multi(void) {
    nx_error err = {0};
    nx_threadpool *tp[3] = {nx_threadpool_create(1, &err), nx_threadpool_create(2, &err), nx_threadpool_create(3, &err)};
    CHECK(tp[0] && tp[1] && tp[2]);
    if (!tp[0] || !tp[1] || !tp[2]) return;
    const nx_type ts[] = {NX_TYPE_Q8_0, NX_TYPE_Q4_K, NX_TYPE_F16, NX_TYPE_Q4_0};
    const int64_t outs[3] = {37, 5, 64};
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        for (int mixed = 0; mixed < 2; mixed++) {
            const nx_type t = ts[ti];
            const int64_t n_in = 512;
            wmat m[3];
            for (int k = 0; k < 3; k++) wmat_make(&m[k], mixed && k == 1 ? (t == NX_TYPE_Q8_0 ? NX_TYPE_Q6_K : NX_TYPE_Q8_0) : t, n_in, outs[k]);
            for (int nr = 1; nr <= 20; nr += 19) {
                float *x = make_x(nr, n_in);
                float *ref[3], *got[3];
                for (int k = 0; k < 3; k++) {
                    ref[k] = malloc(sizeof(float) * (size_t)(nr * outs[k]));
                    got[k] = malloc(sizeof(float) * (size_t)(nr * outs[k]));
                    CHECK(run_mm(tp[0], &m[k], x, nr, n_in, ref[k], outs[k]) == NX_OK);
                }
                for (int th = 0; th < 3; th++) {
                    nx_matmul_scratch sc;
                    nx_matmul_scratch_init(&sc);
                    const nx_mm_out o[3] = {{&m[0].w, got[0], outs[0]}, {&m[1].w, got[1], outs[1]}, {&m[2].w, got[2], outs[2]}};
                    CHECK(nx_matmul_multi(tp[th], &sc, o, 3, x, nr, n_in, &err) == NX_OK);
                    for (int k = 0; k < 3; k++)
                        CHECK_MSG(same_bits(ref[k], got[k], (size_t)(nr * outs[k])), "%s mixed %d rows %d threads %d weight %d",
                                  nx_type_name(t), mixed, nr, th + 1, k);
                    nx_matmul_scratch_free(&sc);
                }
                for (int k = 0; k < 3; k++) { free(ref[k]); free(got[k]); }
                free(x);
            }
            for (int k = 0; k < 3; k++) wmat_free(&m[k]);
        }
    }
    /* errors name the weight */
    wmat a;
    wmat_make(&a, NX_TYPE_Q8_0, 64, 4);
    float x[64] = {0}, y[4];
    const nx_mm_out bad[2] = {{&a.w, y, 4}, {NULL, y, 4}};
    CHECK(nx_matmul_multi(tp[1], NULL, bad, 2, x, 1, 64, &err) == NX_ERR_INVALID_ARG);
    wmat_free(&a);
    for (int k = 0; k < 3; k++) nx_threadpool_free(tp[k]);
}

/* Many activation rows (tiles of 16 over cache blocks of weight rows) == one row at a time. */
static void test_large_batch(void) {
    const nx_type ts[] = {NX_TYPE_Q8_0, NX_TYPE_Q4_K, NX_TYPE_F16};
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        int64_t n_in = 512, n_out = 300, n_rows = 40;
        wmat m;
        wmat_make(&m, ts[ti], n_in, n_out);
        float *x = make_x(n_rows, n_in);
        float *y = malloc(sizeof(float) * (size_t)(n_rows * n_out)), *y1 = malloc(sizeof(float) * (size_t)n_out);
        CHECK(run_mm(NULL, &m, x, n_rows, n_in, y, n_out) == NX_OK);
        for (int64_t r = 0; r < n_rows; r += 13) {
            CHECK(run_mm(NULL, &m, x + r * n_in, 1, n_in, y1, n_out) == NX_OK);
            CHECK(same_bits(y + r * n_out, y1, (size_t)n_out));
        }
        free(x); free(y); free(y1);
        wmat_free(&m);
    }
    /* rows of 34 KB: cache blocks of 7 weight rows, so 17 rows make 3 blocks per tile */
    wmat m;
    wmat_make(&m, NX_TYPE_Q8_0, 32768, 17);
    float *x = make_x(20, 32768), *y = malloc(sizeof(float) * 20 * 17), *y1 = malloc(sizeof(float) * 17);
    CHECK(run_mm(NULL, &m, x, 20, 32768, y, 17) == NX_OK);
    for (int r = 0; r < 20; r += 19) {
        CHECK(run_mm(NULL, &m, x + (int64_t)r * 32768, 1, 32768, y1, 17) == NX_OK);
        CHECK(same_bits(y + r * 17, y1, 17));
    }
    free(x); free(y); free(y1);
    wmat_free(&m);
}

/* The AVX-512 batched 32-block kernels (register tiles of 4 weight rows x 3 activation rows
 * over a weight panel decoded per 16 steps, up to 64 activation rows per call): every row of
 * a big batch == that row alone, bitwise, across tile edges (70 rows: 64 + 6), panel chunk
 * edges (2048 values: two chunks; 2144: three, the last an odd half step; 32: only the half
 * step), weight-row groups (n_out 11 = 4 + 4 + 3, and 1) and thread counts. */
static void test_tiled_batch(void) {
    const nx_type ts[] = {NX_TYPE_Q8_0, NX_TYPE_Q4_0, NX_TYPE_Q5_0, NX_TYPE_IQ4_NL, NX_TYPE_Q4_1};
    const int64_t shapes[][3] = {{2144, 11, 70}, {2048, 11, 64}, {32, 5, 20}, {96, 1, 17}};   /* n_in, n_out, rows */
    nx_error err = {0};
    nx_threadpool *tp = nx_threadpool_create(2, &err);
    CHECK(tp != NULL);
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t n_in = shapes[si][0], n_out = shapes[si][1], n_rows = shapes[si][2], ldx = n_in + 5;
            wmat m;
            wmat_make(&m, ts[ti], n_in, n_out);
            float *x = make_x(n_rows, ldx);
            float *y = malloc(sizeof(float) * (size_t)(n_rows * n_out)), *y2 = malloc(sizeof(float) * (size_t)(n_rows * n_out));
            float *y1 = malloc(sizeof(float) * (size_t)n_out);
            CHECK(run_mm(NULL, &m, x, n_rows, ldx, y, n_out) == NX_OK);
            CHECK(run_mm(tp, &m, x, n_rows, ldx, y2, n_out) == NX_OK);
            CHECK_MSG(same_bits(y, y2, (size_t)(n_rows * n_out)), "%s n_in %lld: 1 vs 2 threads", nx_type_name(ts[ti]), (long long)n_in);
            int bad = 0;
            for (int64_t r = 0; r < n_rows; r++) {
                CHECK(run_mm(NULL, &m, x + r * ldx, 1, ldx, y1, n_out) == NX_OK);
                if (!same_bits(y + r * n_out, y1, (size_t)n_out)) bad++;
            }
            CHECK_MSG(bad == 0, "%s n_in %lld n_out %lld rows %lld: %d rows differ from batch 1", nx_type_name(ts[ti]),
                      (long long)n_in, (long long)n_out, (long long)n_rows, bad);
            free(x); free(y); free(y1); free(y2);
            wmat_free(&m);
        }
    }
    if (tp) nx_threadpool_free(tp);
}

static void test_errors(void) {
    nx_error err = {0};
    float x[512] = {0}, y[16];
    uint8_t buf[4096] = {0};
    nx_tensor w;
    int64_t ne[2] = {256, 2};
    CHECK(nx_tensor_init(&w, "bad", NX_TYPE_IQ2_XXS, 2, ne, buf));
    CHECK(nx_matmul(NULL, NULL, &w, x, 1, 256, y, 2, &err) == NX_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "iq2_xxs") != NULL);
    CHECK(!nx_matmul_supports(NX_TYPE_IQ2_XXS) && nx_matmul_supports(NX_TYPE_Q4_K));
    CHECK(nx_matmul_supports(NX_TYPE_Q2_K) && nx_matmul_supports(NX_TYPE_Q3_K));
    CHECK(nx_tensor_init(&w, "w", NX_TYPE_Q8_0, 2, ne, buf));
    CHECK(nx_matmul(NULL, NULL, &w, x, 1, 100, y, 2, &err) == NX_ERR_INVALID_ARG);   /* ldx < n_in */
    CHECK(nx_matmul(NULL, NULL, &w, x, 1, 256, y, 1, &err) == NX_ERR_INVALID_ARG);   /* ldy < n_out */
    CHECK(nx_matmul(NULL, NULL, &w, x, -1, 256, y, 2, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_matmul(NULL, NULL, &w, NULL, 1, 256, y, 2, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_matmul_rows(NULL, NULL, &w, 1, 3, x, 1, 256, y, 2, &err) == NX_ERR_RANGE);
    CHECK(nx_matmul(NULL, NULL, NULL, x, 1, 256, y, 2, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_matmul(NULL, NULL, &w, x, 0, 256, y, 2, &err) == NX_OK);              /* nothing to do */
    w.ne[0] = 100;   /* not a multiple of the block size */
    CHECK(nx_matmul(NULL, NULL, &w, x, 1, 256, y, 2, &err) == NX_ERR_INVALID_ARG);
    w.ne[0] = 256;
    w.nb[1] = 10;    /* row stride below the row size */
    CHECK(nx_matmul(NULL, NULL, &w, x, 1, 256, y, 2, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_matmul_scratch_size(NX_TYPE_Q8_0, 256, 4) > 4 * 256);
    CHECK(nx_matmul_scratch_size(NX_TYPE_F32, 256, 4) == 0);
}

/* Extreme codes: every weight byte 0x00, 0xFF, 0x80 or 0x7F (per row; Q6_K's int8 scales
 * -128 or 127 too) against activations at +-127 (all +1, all -1, alternating). The integer
 * sums the SIMD kernels keep in int16 / int32 (maddubs pairs, madd by sub-block scales, the
 * Q6_K offset correction) must not saturate or wrap: every level == the scalar one within
 * float rounding, for batches of 1..9 rows. */
static void test_extremes(void) {
    static const uint8_t fills[4] = {0x00, 0xFF, 0x80, 0x7F};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const nx_type t = k_types[ti];
        const nx_type_traits *tt = nx_type_info(t);
        if (tt->blck_size == 1) continue;
        const int64_t n_in = 512, n_out = 8, nb = n_in / tt->blck_size;
        wmat m;
        wmat_make(&m, t, n_in, n_out);
        for (int64_t o = 0; o < n_out; o++) {
            uint8_t *row = m.wbytes + m.rb * (size_t)o;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *blk = row + (size_t)b * tt->type_size;
                if (t == NX_TYPE_Q6_K) {   /* ql, qh, int8 scales, then d */
                    memset(blk, fills[o % 4], 192);
                    memset(blk + 192, o < 4 ? 0x80 : 0x7F, 16);
                } else if (t == NX_TYPE_Q2_K || t == NX_TYPE_Q3_K) {   /* scales and codes first, then d (, dmin) */
                    memset(blk, fills[o % 4], t == NX_TYPE_Q2_K ? 80 : 108);
                    if (o >= 4) memset(blk, 0xFF, t == NX_TYPE_Q2_K ? 16 : 0);   /* Q2_K: scales / mins 15 */
                } else {
                    const size_t skip = t == NX_TYPE_Q4_1 || t == NX_TYPE_Q5_1 || t == NX_TYPE_Q4_K || t == NX_TYPE_Q5_K ? 4 : 2;
                    memset(blk + skip, fills[o % 4], tt->type_size - skip);
                    if (o >= 4 && (t == NX_TYPE_Q4_K || t == NX_TYPE_Q5_K)) memset(blk + 4, 0xFF, 12);   /* scales / mins 63 */
                }
            }
            CHECK(nx_dequantize_row(t, row, m.wf + o * n_in, n_in));
        }
        enum { R = 9 };
        float *x = malloc(sizeof(float) * (size_t)(R * n_in)), *ys = malloc(sizeof(float) * R * 8), *y = malloc(sizeof(float) * R * 8);
        for (int r = 0; r < R; r++)
            for (int64_t i = 0; i < n_in; i++) x[r * n_in + i] = r % 3 == 0 ? 1.0f : r % 3 == 1 ? -1.0f : (i % 2 ? 1.0f : -1.0f);
        for (size_t l = 0; l < sizeof k_levels / sizeof k_levels[0]; l++) {
            nx_cpu_level got = nx_cpu_set_level(k_levels[l]);
            if (got != k_levels[l]) continue;
            if (l == 0) { CHECK(run_mm(NULL, &m, x, R, n_in, ys, n_out) == NX_OK); continue; }
            for (int n = 1; n <= R; n++) {
                CHECK(run_mm(NULL, &m, x, n, n_in, y, n_out) == NX_OK);
                for (int r = 0; r < n; r++)
                    for (int64_t o = 0; o < n_out; o++) {
                        double mag = 0;
                        for (int64_t i = 0; i < n_in; i++) mag += fabs((double)m.wf[o * n_in + i] * x[r * n_in + i]);
                        CHECK_MSG(fabs(y[r * n_out + o] - ys[r * n_out + o]) <= 1e-5 * mag + 1e-6, "%s level %s batch %d row %d o %lld: %.9g vs scalar %.9g",
                                  nx_type_name(t), nx_cpu_level_name(got), n, r, (long long)o, y[r * n_out + o], ys[r * n_out + o]);
                    }
            }
        }
        nx_cpu_set_level(NX_CPU_AVX512);
        free(x); free(ys); free(y);
        wmat_free(&m);
    }
}

#if defined(__aarch64__)
/* The NEON levels keep the scalar kernels' float operations, one activation row per lane
 * (matmul_neon_kernels.h): every output equals the scalar level's bit for bit, for batches
 * 1..17 (lanes, i8mm row pairs and 16-row tiles, partial groups; 9 weight rows: a lone last
 * row for i8mm, other pairs under 2 threads), random and extreme codes. Built on aarch64 only
 * (every aarch64 CPU has NEON). */
static void test_neon_exact(void) {
    nx_cpu_level neon[3] = {NX_CPU_NEON, NX_CPU_NEON_DOT, NX_CPU_NEON_I8MM};
    static const uint8_t fills[4] = {0x00, 0xFF, 0x80, 0x7F};
    nx_error err = {0};
    nx_threadpool *tp = nx_threadpool_create(2, &err);
    CHECK(tp != NULL);
    enum { R = 17 };
    for (int ti = 0; ti < N_TYPES; ti++) {
        const nx_type t = k_types[ti];
        const nx_type_traits *tt = nx_type_info(t);
        if (tt->blck_size == 1) continue;   /* float weights: AVX2's order (test_float_order) */
        const int64_t n_in = 512, n_out = 9, nb = n_in / tt->blck_size, ldx = n_in + 3;
        wmat m;
        wmat_make(&m, t, n_in, n_out);
        for (int64_t o = 0; o < 4; o++)   /* rows 0..3: extreme codes (Q6_K: and extreme scales) */
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *blk = m.wbytes + m.rb * (size_t)o + (size_t)b * tt->type_size;
                if (t == NX_TYPE_Q6_K) { memset(blk, fills[o], 192); memset(blk + 192, o % 2 ? 0x80 : 0x7F, 16); }
                else if (t == NX_TYPE_Q2_K || t == NX_TYPE_Q3_K) memset(blk, fills[o], t == NX_TYPE_Q2_K ? 80 : 108);
                else {
                    const size_t skip = t == NX_TYPE_Q4_1 || t == NX_TYPE_Q5_1 || t == NX_TYPE_Q4_K || t == NX_TYPE_Q5_K ? 4 : 2;
                    memset(blk + skip, fills[o], tt->type_size - skip);
                }
            }
        float *x = make_x(R, ldx);
        for (int64_t i = 0; i < n_in; i++) x[2 * ldx + i] = i % 2 ? 1.0f : -1.0f;   /* codes at +-127 */
        float *ys = malloc(sizeof(float) * R * (size_t)n_out), *y = malloc(sizeof(float) * R * (size_t)n_out);
        nx_cpu_set_level(NX_CPU_SCALAR);
        CHECK(run_mm(NULL, &m, x, R, ldx, ys, n_out) == NX_OK);
        for (int l = 0; l < 3; l++) {
            if (nx_cpu_set_level(neon[l]) != neon[l]) continue;
            for (int n = 1; n <= R; n++)
                for (int th = 0; th < 2; th++) {
                    if (th && n % 4 != 1) continue;
                    CHECK(run_mm(th ? tp : NULL, &m, x + (R - n) * ldx, n, ldx, y, n_out) == NX_OK);
                    CHECK_MSG(same_bits(y, ys + (R - n) * n_out, (size_t)(n * n_out)), "%s level %s batch %d threads %d: != scalar",
                              nx_type_name(t), nx_cpu_level_name(neon[l]), n, th + 1);
                }
        }
        nx_cpu_set_level(NX_CPU_AVX512);
        free(x); free(ys); free(y);
        wmat_free(&m);
    }
    if (tp) nx_threadpool_free(tp);
}
#endif

/* The float weights' order on the AVX2 and NEON levels (matmul_neon_kernels.h): 8 lanes by
 * fused multiply-add (lane i mod 8), a zero-padded last chunk that updates every lane, then
 * s = lane l + lane l+4, (s0 + s2) + (s1 + s3). Written out here in plain C, it must give the
 * kernels' bits: so NEON results equal AVX2's although no machine runs both. */
static float float_order8(const float *w, const float *x, int64_t n) {
    float acc[8] = {0};
    for (int64_t i = 0; i < n; i += 8)
        for (int l = 0; l < 8; l++) {
            const int in = i + l < n;
            acc[l] = fmaf(in ? w[i + l] : 0.0f, in ? x[i + l] : 0.0f, acc[l]);
        }
    float s[4];
    for (int l = 0; l < 4; l++) s[l] = acc[l] + acc[l + 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
}

static void test_float_order(void) {
    static const nx_cpu_level lv[4] = {NX_CPU_AVX2, NX_CPU_NEON, NX_CPU_NEON_DOT, NX_CPU_NEON_I8MM};
    static const nx_type ft[3] = {NX_TYPE_F32, NX_TYPE_F16, NX_TYPE_BF16};
    static const int64_t sizes[3] = {8, 83, 520};
    enum { R = 11 };
    for (int l = 0; l < 4; l++) {
        if (nx_cpu_set_level(lv[l]) != lv[l]) continue;
        for (int ti = 0; ti < 3; ti++)
            for (int si = 0; si < 3; si++) {
                const int64_t n_in = sizes[si], n_out = 5, ldx = n_in + 1;
                wmat m;
                wmat_make(&m, ft[ti], n_in, n_out);
                float *x = make_x(R, ldx), *y = malloc(sizeof(float) * R * n_out);
                x[3] = -0.0f;
                for (int n = 1; n <= R; n += 3) {
                    CHECK(run_mm(NULL, &m, x, n, ldx, y, n_out) == NX_OK);
                    int bad = 0;
                    for (int r = 0; r < n; r++)
                        for (int64_t o = 0; o < n_out; o++)
                            bad += !same_bits(&y[r * n_out + o], &(float){float_order8(m.wf + o * n_in, x + r * ldx, n_in)}, 1);
                    CHECK_MSG(bad == 0, "%s level %s n_in %lld batch %d: %d outputs off the 8-lane order", nx_type_name(ft[ti]),
                              nx_cpu_level_name(lv[l]), (long long)n_in, n, bad);
                }
                free(x); free(y);
                wmat_free(&m);
            }
    }
    nx_cpu_set_level(NX_CPU_AVX512);
}

/* nx_matmul_stream_read's checksum at the SIMD levels: the 64-bit words' sum (mod 2^64). */
static void test_stream_read(void) {
    enum { N = 4096 };
    uint64_t *buf = aligned_alloc(64, N), want = 0;
    for (int i = 0; i < N / 8; i++) want += buf[i] = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    const int nl = nx_cpu_levels(lv);
    for (int l = 1; l < nl; l++) {
        nx_cpu_set_level(lv[l]);
        CHECK_MSG(nx_matmul_stream_read(buf, N) == want, "level %s", nx_cpu_level_name(lv[l]));
    }
    nx_cpu_set_level(nx_cpu_level_detected());
    free(buf);
}

/* Non-finite activations must not crash or hang (values are then unspecified). */
static void test_nonfinite(void) {
    wmat m;
    wmat_make(&m, NX_TYPE_Q4_K, 256, 4);
    float x[256], y[4];
    for (int i = 0; i < 256; i++) x[i] = i == 5 ? NAN : i == 9 ? INFINITY : 1.0f;
    CHECK(run_mm(NULL, &m, x, 1, 256, y, 4) == NX_OK);
    wmat_free(&m);
}

/* NEXTN_CPU caps the level the first nx_cpu_level_get() picks (so this runs first): the middle
 * level of this architecture by name (avx2 / neon), and a name of the other architecture is
 * ignored (the best level). */
static void test_cpu_env(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    const int n = nx_cpu_levels(lv);
    CHECK(n >= 1 && lv[0] == NX_CPU_SCALAR && lv[n - 1] == nx_cpu_level_detected());
#if defined(__aarch64__)
    setenv("NEXTN_CPU", "neon", 1);
    const nx_cpu_level mid = NX_CPU_NEON, other = NX_CPU_AVX2;
#else
    setenv("NEXTN_CPU", "avx2", 1);
    const nx_cpu_level mid = NX_CPU_AVX2, other = NX_CPU_NEON;
#endif
    const nx_cpu_level got = nx_cpu_level_get();
    unsetenv("NEXTN_CPU");
    CHECK_MSG(got == (n > 1 ? mid : NX_CPU_SCALAR), "NEXTN_CPU capped to %s", nx_cpu_level_name(got));
    CHECK(nx_cpu_set_level(other) == nx_cpu_level_detected());   /* the other architecture's level: the best */
    CHECK(nx_cpu_set_level(NX_CPU_SCALAR) == NX_CPU_SCALAR);
#if NX_MM_X86
    /* avx2_vnni: where AVX-VNNI is (its own packed kernels), else AVX2 (AVX-512 without it: Zen 4) */
    if (nx_cpu_level_detected() >= NX_CPU_AVX2) {
        const nx_cpu_level v = nx_cpu_set_level(NX_CPU_AVX2_VNNI);
        CHECK_MSG(v == (nx_cpu_has_avxvnni() ? NX_CPU_AVX2_VNNI : NX_CPU_AVX2), "avx2_vnni gave %s", nx_cpu_level_name(v));
        CHECK(nx_mm_pick_pkernel(NX_TYPE_Q8_0) == (v == NX_CPU_AVX2_VNNI ? nx_mm_pk_q8_0_avx2vnni : nx_mm_pk_q8_0_avx2));
        CHECK(nx_mm_pick_pkernel(NX_TYPE_Q6_K) == (v == NX_CPU_AVX2_VNNI ? nx_mm_pk_q6_K_avx2vnni : nx_mm_pk_q6_K_avx2));
        CHECK(nx_mm_pick_pkernel(NX_TYPE_Q4_0) == (v == NX_CPU_AVX2_VNNI ? nx_mm_pk_q4_0_avx2vnni : nx_mm_pk_q4_0_avx2));
        CHECK(nx_mm_pick_pkernel(NX_TYPE_IQ4_XS) == (v == NX_CPU_AVX2_VNNI ? nx_mm_pk_iq4_xs_avx2vnni : nx_mm_pk_iq4_xs_avx2));
        CHECK(nx_mm_pick_pkernel(NX_TYPE_IQ4_NL) == (v == NX_CPU_AVX2_VNNI ? nx_mm_pk_iq4_nl_avx2vnni : nx_mm_pk_iq4_nl_avx2));
        bool listed = false;
        for (int i = 0; i < n; i++) listed |= lv[i] == NX_CPU_AVX2_VNNI;
        CHECK(listed == (v == NX_CPU_AVX2_VNNI));
    }
#endif
    /* AMX: a switch on top of the AVX-512 level, never in effect below it or where absent */
    CHECK(!nx_cpu_amx());
    CHECK(nx_cpu_set_amx(1) == nx_cpu_amx_detected());
    CHECK(!nx_cpu_amx());
    nx_cpu_set_level(nx_cpu_level_detected());
    CHECK(nx_cpu_amx() == (nx_cpu_amx_detected() && nx_cpu_level_detected() == NX_CPU_AVX512));
#if NX_MM_X86
    if (nx_cpu_amx()) CHECK(nx_mm_pick_pkernel(NX_TYPE_Q8_0) == nx_mm_pk_q8_0_amx);
    CHECK(nx_cpu_set_amx(0) == 0 && !nx_cpu_amx());
    if (nx_cpu_level_get() == NX_CPU_AVX512) CHECK(nx_mm_pick_pkernel(NX_TYPE_Q8_0) == nx_mm_pk_q8_0_avx512);
    if (nx_cpu_level_get() == NX_CPU_AVX512) CHECK(nx_mm_pick_pkernel(NX_TYPE_Q4_0) == nx_mm_pk_q4_0_avx512);
    nx_cpu_set_amx(1);
#endif
}

/* Activation quantization: the same bytes on every level, including halfway and non-finite values. */
static void test_quantize_levels(void) {
    enum { N = 1024 };
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = frnd() * (float)(1 + i % 5);
    /* block 1: values landing exactly on .5 after scaling (amax 127 -> d = 1) */
    for (int i = 0; i < 32; i++) x[32 + i] = i == 0 ? 127.0f : (float)(i % 9) - 4.5f;
    x[100] = NAN; x[300] = INFINITY; x[600] = -INFINITY;
    for (int i = 768; i < 800; i++) x[i] = 0.0f;   /* all-zero block */
    for (int B = 32; B <= 256; B *= 8) {
        const int bias = B == 32 ? 128 : 0;
        uint8_t q0[N];
        float d0[N / 32], s0[N / 32];
        int16_t b0[N / 16];
        nx_mm_quantize_scalar(x, N, B, bias, q0, d0, B == 32 ? s0 : NULL, B == 256 ? b0 : NULL);
#if NX_MM_NEON   /* both biases: the byte wraps the same way */
        {
            uint8_t q1[N], q3[N];
            float d1[N / 32], s1[N / 32];
            int16_t b1[N / 16];
            nx_mm_quantize_neon(x, N, B, bias, q1, d1, B == 32 ? s1 : NULL, B == 256 ? b1 : NULL);
            CHECK(!memcmp(q0, q1, N) && !memcmp(d0, d1, sizeof(float) * (size_t)(N / B)));
            if (B == 32) CHECK(!memcmp(s0, s1, sizeof(float) * (N / 32)));
            else CHECK(!memcmp(b0, b1, sizeof(int16_t) * (N / 16)));
            const int ob = bias ? 0 : 128;   /* the other bias: scalar and NEON again */
            nx_mm_quantize_scalar(x, N, B, ob, q1, d1, NULL, NULL);
            nx_mm_quantize_neon(x, N, B, ob, q3, d1, NULL, NULL);
            CHECK_MSG(!memcmp(q1, q3, N), "B %d bias %d", B, ob);
        }
#endif
#if NX_MM_X86
        uint8_t q1[N], q2[N];
        float d1[N / 32], d2[N / 32], s1[N / 32], s2[N / 32];
        int16_t b1[N / 16], b2[N / 16];
        if (nx_cpu_level_detected() >= NX_CPU_AVX2) {
            nx_mm_quantize_avx2(x, N, B, bias, q1, d1, B == 32 ? s1 : NULL, B == 256 ? b1 : NULL);
            CHECK(!memcmp(q0, q1, N) && !memcmp(d0, d1, sizeof(float) * (size_t)(N / B)));
            if (B == 32) CHECK(!memcmp(s0, s1, sizeof(float) * (N / 32)));
            else CHECK(!memcmp(b0, b1, sizeof(int16_t) * (N / 16)));
        }
        if (nx_cpu_level_detected() >= NX_CPU_AVX512) {
            nx_mm_quantize_avx512(x, N, B, bias, q2, d2, B == 32 ? s2 : NULL, B == 256 ? b2 : NULL);
            CHECK(!memcmp(q0, q2, N) && !memcmp(d0, d2, sizeof(float) * (size_t)(N / B)));
            if (B == 32) CHECK(!memcmp(s0, s2, sizeof(float) * (N / 32)));
            else CHECK(!memcmp(b0, b2, sizeof(int16_t) * (N / 16)));
        }
#endif
        if (B == 32) {   /* half-even: -3.5 -> -4, -2.5 -> -2, 0.5 -> 0, 1.5 -> 2 */
            CHECK_EQ_INT(q0[33] - 128, -4); CHECK_EQ_INT(q0[34] - 128, -2);
            CHECK_EQ_INT(q0[37] - 128, 0); CHECK_EQ_INT(q0[38] - 128, 2);
            CHECK_EQ_INT(q0[100] - 128, -127);
        }
    }
}

/* Packed weights: each packed kernel bit for bit against its layout's contract, computed
 * here from the original blocks (not the packed bytes), at every batch size 1..20 and 37 and
 * 1..3 threads; close to the unpacked kernels; the scalar packed reference equal to the
 * contract too. At the scalar level: no packed size, and a tensor carrying a packed copy
 * computes exactly what the unpacked tensor does. */
static bool float_type(nx_type t) { return t == NX_TYPE_F32 || t == NX_TYPE_F16 || t == NX_TYPE_BF16; }
static void packed_reference(const wmat *m, const float *x, int64_t n_rows, int64_t ldx, float *y, int64_t ldy) {
    if (float_type(m->type)) {   /* one fma chain over the inputs in order */
        for (int64_t r = 0; r < n_rows; r++)
            for (int64_t o = 0; o < m->n_out; o++) {
                float acc = 0.0f;
                for (int64_t i = 0; i < m->n_in; i++) acc = fmaf(m->wf[o * m->n_in + i], x[r * ldx + i], acc);
                y[r * ldy + o] = acc;
            }
        return;
    }
    const int64_t n_in = m->n_in, B = m->type == NX_TYPE_Q8_0 || m->type == NX_TYPE_Q4_0 || m->type == NX_TYPE_IQ4_NL ? 32 : 256, nb = n_in / B;
    uint8_t *q = malloc((size_t)n_in);
    float *d = malloc(sizeof(float) * (size_t)nb);
    int16_t *bs = malloc(sizeof(int16_t) * (size_t)nb * 16);
    for (int64_t r = 0; r < n_rows; r++) {
        nx_mm_quantize_scalar(x + r * ldx, n_in, (int)B, 0, q, d, NULL, B == 256 ? bs : NULL);
        for (int64_t o = 0; o < m->n_out; o++) {
            const uint8_t *row = m->wbytes + m->rb * (size_t)o;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                if (B == 32) {
                    /* Q4_0 / IQ4_NL value i: nibble i / 16 of byte i % 16, minus 8 or by the table */
                    const bool q4 = m->type == NX_TYPE_Q4_0, nl = m->type == NX_TYPE_IQ4_NL;
                    const uint8_t *blk = row + (q4 || nl ? 18 : 34) * b;
                    nx_half h;
                    memcpy(&h, blk, 2);
                    int32_t I = 0;
                    for (int i = 0; i < 32; i++) {
                        const int c = (blk[2 + i % 16] >> (4 * (i / 16))) & 15;
                        I += (q4 ? c - 8 : nl ? nx_iq4nl_values[c] : (int32_t)(int8_t)blk[2 + i]) * (int8_t)q[32 * b + i];
                    }
                    const float sc = nx_half_to_f32(h) * d[b];
                    acc = fmaf((float)I, sc, acc);
                    continue;
                }
                if (m->type == NX_TYPE_IQ4_XS) {   /* sub-block j: values 0..15 low nibbles, 16..31 high */
                    const nx_block_iq4_xs *blk = (const void *)(row + sizeof(nx_block_iq4_xs) * b);
                    const float dw = nx_half_to_f32(blk->d);
                    float t = 0.0f;
                    for (int j = 0; j < 8; j++) {
                        const int ls = ((blk->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((blk->scales_h >> (2 * j)) & 3) << 4);
                        int32_t I = 0;
                        for (int i = 0; i < 32; i++) {
                            const int c = i < 16 ? blk->qs[16 * j + i] & 15 : blk->qs[16 * j + i - 16] >> 4;
                            I += nx_iq4nl_values[c] * (int8_t)q[256 * b + 32 * j + i];
                        }
                        t = fmaf((float)I, dw * (float)(ls - 32), t);
                    }
                    acc = fmaf(t, d[b], acc);
                    continue;
                }
                if (m->type == NX_TYPE_Q6_K) {
                    const nx_block_q6_K *blk = (const void *)(row + sizeof(nx_block_q6_K) * b);
                    const float dw = nx_half_to_f32(blk->d);
                    int32_t C = 0;
                    for (int g = 0; g < 16; g++) C += blk->scales[g] * bs[16 * b + g];
                    float t = (float)C * (-32.0f * dw);
                    for (int g = 0; g < 16; g++) {
                        int32_t I = 0;
                        for (int i = 0; i < 16; i++) {
                            const int v = 16 * g + i, hh = v / 128, k = (v % 128) / 32, j = v % 32;
                            const uint8_t l = blk->ql[64 * hh + 32 * (k & 1) + j];
                            const int c = (k < 2 ? l & 15 : l >> 4) | (((blk->qh[32 * hh + j] >> (2 * k)) & 3) << 4);
                            I += c * (int8_t)q[256 * b + v];
                        }
                        t = fmaf((float)I, dw * (float)blk->scales[g], t);
                    }
                    acc = fmaf(t, d[b], acc);
                    continue;
                }
                const bool q5 = m->type == NX_TYPE_Q5_K;
                const uint8_t *blk = row + (q5 ? sizeof(nx_block_q5_K) : sizeof(nx_block_q4_K)) * b;
                const uint8_t *qs = blk + (q5 ? 48 : 16), *qh = blk + 16;
                uint8_t sc[8], mn[8];
                nx_mm_k4_scales(blk + 4, sc, mn);
                nx_half hd, hm;
                memcpy(&hd, blk, 2); memcpy(&hm, blk + 2, 2);
                const float dw = nx_half_to_f32(hd), dm = nx_half_to_f32(hm);
                int32_t M = 0;
                for (int j = 0; j < 8; j++) M += mn[j] * (bs[16 * b + 2 * j] + bs[16 * b + 2 * j + 1]);
                float t = (float)M * -dm;
                for (int j = 0; j < 8; j++) {
                    int32_t I = 0;
                    for (int i = 0; i < 32; i++) {
                        const int v = 32 * j + i;
                        int c = (qs[32 * (v / 64) + v % 32] >> (4 * ((v % 64) / 32))) & 15;
                        if (q5) c |= ((qh[v % 32] >> (2 * (v / 64) + (v % 64) / 32)) & 1) << 4;
                        I += c * (int8_t)q[256 * b + v];
                    }
                    t = fmaf((float)I, dw * (float)sc[j], t);
                }
                acc = fmaf(t, d[b], acc);
            }
            y[r * ldy + o] = acc;
        }
    }
    free(q); free(d); free(bs);
}

/* The packed tests' passes: every level, then the AVX-512 level with AMX (skipped where the
 * machine or the OS has none). Sets the level and the AMX switch; false: pass not run here. */
/* The levels, then AVX-512 with AMX, then AVX-512 with the BF16 dot products (each where the
 * machine has it); every other pass has both off. */
#define PK_PASSES (sizeof k_levels / sizeof k_levels[0] + 2)
static bool pk_pass(size_t l, const char **name) {
    const bool amx = l == PK_PASSES - 2, bfd = l == PK_PASSES - 1;
    const nx_cpu_level lv = amx || bfd ? NX_CPU_AVX512 : k_levels[l];
    *name = amx ? "avx512+amx" : bfd ? "avx512+bf16dot" : nx_cpu_level_name(lv);
    return nx_cpu_set_level(lv) == lv && nx_cpu_set_amx(amx) == amx && nx_cpu_set_bf16dot(bfd) == bfd;
}

/* Packed tests leave the AVX-512 level with AMX and the BF16 dot products allowed (where
 * present), the default. */
static void pk_restore(void) {
    nx_cpu_set_level(NX_CPU_AVX512);
    nx_cpu_set_amx(1);
    nx_cpu_set_bf16dot(1);
}

#if NX_MM_X86
/* The AMX kernel called directly on rows 0..n-1 (one tile of 16 plus the rest, as a prefill
 * call): the layout's contract bit for bit, so the AMX tiles themselves ran, not a fallback. */
static void check_amx_direct(int64_t n_in, int64_t n_out, const void *pk, const float *x, int64_t ldx,
                             const float *ref, int64_t ldy, int n) {
    const int64_t nb = n_in / 32, qs = n_in + 64;   /* a row stride that is no multiple of 64 */
    uint8_t *q = malloc((size_t)(qs * n));
    float *d = malloc(sizeof(float) * (size_t)(nb * n));
    int32_t *cs = malloc(sizeof(int32_t) * (size_t)(nb * n));
    float *y = malloc(sizeof(float) * (size_t)(ldy * n));
    for (int r = 0; r < n; r++) {
        nx_mm_quantize_scalar(x + r * ldx, n_in, 32, 0, q + r * qs, d + r * nb, NULL, NULL);
        for (int64_t b = 0; b < nb; b++) {
            int32_t sum = 0;
            for (int i = 0; i < 32; i++) sum += (int8_t)q[r * qs + 32 * b + i];
            cs[r * nb + b] = -128 * sum;
        }
    }
    nx_mm_act act = {.q = q, .d = d, .cs = cs, .prefill = true, .q_stride = qs, .d_stride = nb, .cs_stride = nb};
    nx_mm_pk_q8_0_amx(nb, pk, n_out / 16, &act, n, y, ldy);
    for (int r = 0; r < n; r++)
        CHECK_MSG(same_bits(y + r * ldy, ref + r * ldy, (size_t)n_out), "amx direct %lldx%lld rows %d row %d",
                  (long long)n_in, (long long)n_out, n, r);
    free(q); free(d); free(cs); free(y);
}
#endif

static void check_packed(nx_type type, int64_t n_in, int64_t n_out, bool extreme, nx_threadpool **tp) {
    const int64_t ldx = n_in + 5, ldy = n_out + 3;
    const int B = type == NX_TYPE_Q8_0 || type == NX_TYPE_Q4_0 || type == NX_TYPE_IQ4_NL || float_type(type) ? 32 : 256;
    size_t bb;
    CHECK(nx_mm_pack_format(type, NULL, &bb));
    wmat m;
    wmat_make(&m, type, n_in, n_out);
    if (extreme)   /* extreme codes in some rows: no int16 / int32 saturation */
        for (int64_t o = 0; o < 8; o++)
            for (int64_t b = 0; b < n_in / B; b++) {
                if (type == NX_TYPE_Q8_0) memset(m.wbytes + m.rb * (size_t)o + 34 * b + 2, o % 2 ? 0x80 : 0x7F, 32);
                else if (type == NX_TYPE_Q4_0 || type == NX_TYPE_IQ4_NL)   /* -8, 7 / -127, 113 */
                    memset(m.wbytes + m.rb * (size_t)o + 18 * b + 2, o % 2 ? 0x00 : 0xFF, 16);
                else if (type == NX_TYPE_Q4_K) memset(m.wbytes + m.rb * (size_t)o + 144 * b + 4, 0xFF, 140);   /* sc = m = 63, codes 15 */
                else if (type == NX_TYPE_Q5_K) memset(m.wbytes + m.rb * (size_t)o + 176 * b + 4, 0xFF, 172);   /* codes 31 */
                else if (type == NX_TYPE_IQ4_XS)   /* scales 31 and values 113, or -32 and -127 */
                    memset(m.wbytes + m.rb * (size_t)o + 136 * b + 2, o % 2 ? 0x00 : 0xFF, 134);
                else {   /* codes 63, scales 127 / -128 */
                    memset(m.wbytes + m.rb * (size_t)o + 210 * b, 0xFF, 192);
                    memset(m.wbytes + m.rb * (size_t)o + 210 * b + 192, o % 2 ? 0x80 : 0x7F, 16);
                }
            }
    enum { R = 37 };
    float *x = make_x(R, ldx);
    if (extreme)
        for (int64_t i = 0; i < n_in; i++) { x[i] = 1.0f; x[ldx + i] = i % 2 ? 1.0f : -1.0f; x[2 * ldx + i] = -1.0f; }
    float *ref = malloc(sizeof(float) * R * (size_t)ldy), *y = malloc(sizeof(float) * R * (size_t)ldy);
    float *yu = malloc(sizeof(float) * R * (size_t)ldy);
    const size_t want = (size_t)(n_out / 16) * (size_t)(n_in / B) * bb;
    void *pk = aligned_alloc(64, (want + 63) / 64 * 64);
    { nx_tensor t = m.w; t.packed = NULL; nx_matmul_pack(&t, pk); }   /* the layout, even where unused */
    wmat mp = m;
    mp.w.packed = pk;
    packed_reference(&m, x, R, ldx, ref, ldy);
    { /* the scalar reference reads the packed bytes: equal to the contract from the blocks */
        uint8_t *q = malloc((size_t)n_in);
        float *d = malloc(sizeof(float) * (size_t)(n_in / B));
        int16_t *bs = malloc(sizeof(int16_t) * (size_t)(n_in / 16));
        int32_t *cs = malloc(sizeof(int32_t) * (size_t)(n_in / 32));
        for (int r = 0; r < 3; r++) {
            if (float_type(type)) {
                nx_mm_act act = {.x = x + r * ldx, .ldx = ldx};
                (type == NX_TYPE_F32 ? nx_mm_pk_f32_scalar : type == NX_TYPE_F16 ? nx_mm_pk_f16_scalar : nx_mm_pk_bf16_scalar)(
                    n_in / B, pk, n_out / 16, &act, 1, y, ldy);
                CHECK_MSG(same_bits(y, ref + r * ldy, (size_t)n_out), "%s scalar packed reference row %d", nx_type_name(type), r);
                continue;
            }
            nx_mm_quantize_scalar(x + r * ldx, n_in, B, 0, q, d, NULL, B == 256 ? bs : NULL);
            for (int64_t b = 0; b < n_in / 32; b++) {
                int32_t sum = 0;
                for (int i = 0; i < 32; i++) sum += (int8_t)q[32 * b + i];
                cs[b] = -128 * sum;
            }
            nx_mm_act act = {.q = q, .d = d, .bs = bs, .cs = cs};
            (type == NX_TYPE_Q4_K ? nx_mm_pk_q4_K_scalar : type == NX_TYPE_Q5_K ? nx_mm_pk_q5_K_scalar : type == NX_TYPE_Q6_K ? nx_mm_pk_q6_K_scalar
             : type == NX_TYPE_Q4_0 ? nx_mm_pk_q4_0_scalar : type == NX_TYPE_IQ4_XS ? nx_mm_pk_iq4_xs_scalar
             : type == NX_TYPE_IQ4_NL ? nx_mm_pk_iq4_nl_scalar : nx_mm_pk_q8_0_scalar)(
                n_in / B, pk, n_out / 16, &act, 1, y, ldy);
            CHECK_MSG(same_bits(y, ref + r * ldy, (size_t)n_out), "%s scalar packed reference row %d", nx_type_name(type), r);
        }
        free(q); free(d); free(bs); free(cs);
    }
    for (size_t l = 0; l < PK_PASSES; l++) {
        const char *lname;
        if (!pk_pass(l, &lname)) continue;
#if NX_MM_X86
        if (type == NX_TYPE_Q8_0 && nx_cpu_amx()) {
            check_amx_direct(n_in, n_out, pk, x, ldx, ref, ldy, 16);
            check_amx_direct(n_in, n_out, pk, x, ldx, ref, ldy, 37);
        }
#endif
        if (!nx_mm_pick_pkernel(type)) {   /* a level without a packed kernel ignores the copy */
            CHECK(nx_matmul_pack_size(&m.w) == 0);
            CHECK(run_mm(tp[0], &m, x, 5, ldx, yu, ldy) == NX_OK);
            CHECK(run_mm(tp[0], &mp, x, 5, ldx, y, ldy) == NX_OK);
            for (int r = 0; r < 5; r++) CHECK(same_bits(y + r * ldy, yu + r * ldy, (size_t)n_out));
            continue;
        }
        const size_t bytes = nx_matmul_pack_size(&m.w);
        CHECK_MSG(bytes == want, "%s pack size %zu at %s", nx_type_name(type), bytes, lname);
        CHECK(run_mm(NULL, &m, x, R, ldx, yu, ldy) == NX_OK);
        float *want_y = ref;   /* what every batch, pass and thread must give bit for bit */
        if (nx_cpu_bf16dot() && type == NX_TYPE_BF16) {
            /* the BF16 dot products' own contract (matmul_impl.h): one batch of all rows is
             * its reference, within bf16 rounding of the activations (2^-8 relative each, the
             * products exact) plus f32 sums of the f32 contract */
            want_y = malloc(sizeof(float) * R * (size_t)ldy);
            CHECK(run_mm(NULL, &mp, x, R, ldx, want_y, ldy) == NX_OK);
            for (int r = 0; r < R; r++)
                for (int64_t o = 0; o < n_out; o++) {
                    double mag = 0;
                    for (int64_t i = 0; i < n_in; i++) mag += fabs((double)m.wf[o * n_in + i] * x[r * ldx + i]);
                    CHECK_MSG(fabs(want_y[r * ldy + o] - ref[r * ldy + o]) <= 0x1p-7 * mag + 1e-30,
                              "bf16dot vs the f32 contract r %d o %lld: %g vs %g", r, (long long)o, want_y[r * ldy + o],
                              ref[r * ldy + o]);
                }
        }
        for (int n = 1; n <= R; n = n == 20 ? R : n + 1)
            for (int th = 0; th < 3; th++) {
                for (int64_t i = 0; i < R * ldy; i++) y[i] = NAN;
                CHECK(run_mm(th ? tp[th - 1] : NULL, &mp, x, n, ldx, y, ldy) == NX_OK);
                for (int r = 0; r < n; r++)
                    CHECK_MSG(same_bits(y + r * ldy, want_y + r * ldy, (size_t)n_out), "packed %s %lldx%lld %s batch %d row %d threads %d",
                              nx_type_name(type), (long long)n_in, (long long)n_out, lname, n, r, th + 1);
                CHECK(isnan(y[n_out]));   /* padding untouched */
            }
        for (int r = 0; r < R; r++)
            for (int64_t o = 0; o < n_out; o++) {
                double mag = 0;
                for (int64_t i = 0; i < n_in; i++) mag += fabs((double)m.wf[o * n_in + i] * x[r * ldx + i]);
                CHECK_MSG(fabs(want_y[r * ldy + o] - yu[r * ldy + o]) <= (want_y != ref ? 0x1p-7 : 2e-5) * mag + 1e-6,
                          "packed vs unpacked %s r %d o %lld",
                          nx_type_name(type), r, (long long)o);
            }
        /* two packed weights in one dispatch == one call each */
        float *y2 = malloc(sizeof(float) * R * (size_t)n_out);
        nx_mm_out outs[2] = {{&mp.w, y, ldy}, {&mp.w, y2, n_out}};
        nx_error err = {0};
        CHECK(nx_matmul_multi(tp[0], NULL, outs, 2, x, 9, ldx, &err) == NX_OK);
        for (int r = 0; r < 9; r++)
            CHECK(same_bits(y + r * ldy, want_y + r * ldy, (size_t)n_out) && same_bits(y2 + r * n_out, want_y + r * ldy, (size_t)n_out));
        free(y2);
        if (want_y != ref) free(want_y);
        setenv("NEXTN_REPACK", "0", 1);
        CHECK(nx_matmul_pack_size(&m.w) == 0);
        unsetenv("NEXTN_REPACK");
    }
    pk_restore();
    free(pk); free(x); free(ref); free(y); free(yu);
    wmat_free(&m);
}

/* A 3-D expert stack {n_in, n_out, X} packs as X 2-D copies back to back: each expert's bytes
 * equal its own 2-D view's packed copy, with one thread or split over a pool (groups counted
 * across the experts); a stack whose experts are not contiguous gets none. */
static void test_packed_experts(void) {
    nx_error err = {0};
    nx_threadpool *tp = nx_threadpool_create(2, &err);
    CHECK(tp);
    static const nx_type ts[] = {NX_TYPE_Q4_K, NX_TYPE_Q8_0, NX_TYPE_BF16};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
        const int64_t n_in = 256, n_out = 512, X = 3;
        size_t rb;
        uint8_t *w = make_weights(ts[k], n_in, n_out * X, &rb);
        const int64_t ne[3] = {n_in, n_out, X};
        nx_tensor t;
        CHECK(nx_tensor_init(&t, "exps", ts[k], 3, ne, w));
        if (!nx_mm_pick_pkernel(ts[k])) { CHECK(nx_matmul_pack_size(&t) == 0); free(w); continue; }
        const size_t slice = nx_matmul_pack_slice_size(&t), bytes = nx_matmul_pack_size(&t);
        CHECK(slice > 0 && bytes == slice * (size_t)X);
        uint8_t *pk = aligned_alloc(64, (bytes + 63) / 64 * 64), *pk2 = aligned_alloc(64, (bytes + 63) / 64 * 64);
        uint8_t *one = aligned_alloc(64, (slice + 63) / 64 * 64);
        nx_matmul_pack(&t, pk);
        nx_matmul_pack_tp(tp, &t, pk2);
        CHECK(memcmp(pk, pk2, bytes) == 0);
        for (int64_t e = 0; e < X; e++) {
            nx_tensor v;
            const int64_t ne2[2] = {n_in, n_out};
            CHECK(nx_tensor_init(&v, "expert", ts[k], 2, ne2, w + (size_t)e * rb * (size_t)n_out));
            CHECK(nx_matmul_pack_size(&v) == slice);
            nx_matmul_pack(&v, one);
            CHECK_MSG(memcmp(one, pk + (size_t)e * slice, slice) == 0, "%s expert %lld", nx_type_name(ts[k]), (long long)e);
        }
        nx_tensor gap = t;   /* experts not back to back: no packed copy */
        gap.nb[2] += 64;
        CHECK(nx_matmul_pack_size(&gap) == 0);
        free(pk); free(pk2); free(one); free(w);
    }
    nx_threadpool_free(tp);
}

/* Packed K-quants of different types in one nx_matmul_multi (a Q4_K_M layer's projections: one
 * quantization of x, one pass of the pool, threads split by weight bytes): every output bit for
 * bit the one-call-each result, at decode, verify and prefill row counts, 1 to 3 threads, on every
 * level (a level without packed kernels runs them one call each). */
static void test_multi_kquants(void) {
    nx_error err = {0};
    nx_threadpool *tp[3] = {NULL, nx_threadpool_create(2, &err), nx_threadpool_create(3, &err)};
    CHECK(tp[1] && tp[2]);
    enum { NW = 4 };
    const nx_type ts[NW] = {NX_TYPE_Q5_K, NX_TYPE_Q4_K, NX_TYPE_Q6_K, NX_TYPE_Q4_K};
    const int64_t n_in = 512, outs[NW] = {48, 16, 32, 80};
    wmat m[NW];
    void *pk[NW];
    for (int k = 0; k < NW; k++) {
        wmat_make(&m[k], ts[k], n_in, outs[k]);
        size_t bb;
        CHECK(nx_mm_pack_format(ts[k], NULL, &bb));
        const size_t want = (size_t)(outs[k] / 16) * (size_t)(n_in / 256) * bb;
        pk[k] = aligned_alloc(64, (want + 63) / 64 * 64);
        nx_matmul_pack(&m[k].w, pk[k]);
        m[k].w.packed = pk[k];
    }
    static const int rows[] = {1, 4, 17, 40};
    float *x = make_x(40, n_in + 3);
    for (size_t l = 0; l < PK_PASSES; l++) {
        const char *lname;
        if (!pk_pass(l, &lname)) continue;
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            const int nr = rows[ri];
            float *ref[NW], *got[NW];
            for (int k = 0; k < NW; k++) {
                ref[k] = malloc(sizeof(float) * (size_t)(nr * outs[k]));
                got[k] = malloc(sizeof(float) * (size_t)(nr * outs[k]));
                CHECK(run_mm(NULL, &m[k], x, nr, n_in + 3, ref[k], outs[k]) == NX_OK);
            }
            for (int th = 0; th < 3; th++) {
                nx_matmul_scratch sc;
                nx_matmul_scratch_init(&sc);
                nx_mm_out o[NW];
                for (int k = 0; k < NW; k++) o[k] = (nx_mm_out){&m[k].w, got[k], outs[k]};
                CHECK(nx_matmul_multi(th ? tp[th] : NULL, &sc, o, NW, x, nr, n_in + 3, &err) == NX_OK);
                for (int k = 0; k < NW; k++)
                    CHECK_MSG(same_bits(ref[k], got[k], (size_t)(nr * outs[k])), "mixed packed k-quants %s rows %d threads %d weight %d",
                              lname, nr, th + 1, k);
                nx_matmul_scratch_free(&sc);
            }
            for (int k = 0; k < NW; k++) { free(ref[k]); free(got[k]); }
        }
    }
    pk_restore();
    free(x);
    for (int k = 0; k < NW; k++) { free(pk[k]); wmat_free(&m[k]); }
    nx_threadpool_free(tp[1]);
    nx_threadpool_free(tp[2]);
}

/* Prefill batches through the AVX-512 interleaved-tile kernels (8-row tiles, the rest by the
 * plain pass, tiles of 16 rows per call across L2 chunks of groups) and the AMX tiles: every
 * row bit for bit the layout's contract at batches 17, 64, 100 and 512, 1 to 3 threads, on
 * every level. */
static void check_packed_batches(nx_type type, int64_t n_in, int64_t n_out, nx_threadpool **tp) {
    const int64_t ldx = n_in + 3, ldy = n_out + 1;
    size_t bb;
    CHECK(nx_mm_pack_format(type, NULL, &bb));
    wmat m;
    wmat_make(&m, type, n_in, n_out);
    enum { R = 512 };
    float *x = make_x(R, ldx);
    float *ref = malloc(sizeof(float) * R * (size_t)ldy), *y = malloc(sizeof(float) * R * (size_t)ldy);
    const int B = type == NX_TYPE_Q8_0 || type == NX_TYPE_Q4_0 || type == NX_TYPE_IQ4_NL || float_type(type) ? 32 : 256;
    const size_t want = (size_t)(n_out / 16) * (size_t)(n_in / B) * bb;
    void *pk = aligned_alloc(64, (want + 63) / 64 * 64);
    { nx_tensor t = m.w; t.packed = NULL; nx_matmul_pack(&t, pk); }
    wmat mp = m;
    mp.w.packed = pk;
    packed_reference(&m, x, R, ldx, ref, ldy);
    static const int batches[] = {17, 64, 100, 512};
    for (size_t l = 0; l < PK_PASSES; l++) {
        const char *lname;
        if (!pk_pass(l, &lname) || !nx_mm_pick_pkernel(type)) continue;
        float *want_y = ref;   /* the BF16 dot products: their own one-batch result (check_packed) */
        if (nx_cpu_bf16dot() && type == NX_TYPE_BF16) {
            want_y = malloc(sizeof(float) * R * (size_t)ldy);
            CHECK(run_mm(NULL, &mp, x, R, ldx, want_y, ldy) == NX_OK);
        }
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++)
            for (int th = 0; th < 3; th++) {
                const int n = batches[bi];
                for (int64_t i = 0; i < R * ldy; i++) y[i] = NAN;
                CHECK(run_mm(th ? tp[th - 1] : NULL, &mp, x + (R - n) * ldx, n, ldx, y, ldy) == NX_OK);
                int bad = -1;
                for (int r = 0; r < n && bad < 0; r++)
                    if (!same_bits(y + r * ldy, want_y + (R - n + r) * ldy, (size_t)n_out)) bad = r;
                CHECK_MSG(bad < 0, "packed %s %lldx%lld %s batch %d row %d threads %d", nx_type_name(type),
                          (long long)n_in, (long long)n_out, lname, n, bad, th + 1);
                CHECK(isnan(y[n_out]));
            }
        if (want_y != ref) free(want_y);
    }
    pk_restore();
    free(pk); free(x); free(ref); free(y);
    wmat_free(&m);
}

/* Rows wider than one quantize task (more than 32768 inputs: an inflated FFN's down
 * projection) are quantized in chunks across the pool, packed Q8_0 with its cs sums and the
 * scale expansion (an odd block count: the padding) included: 1, 2 and 3 threads give the same
 * bits, and the packed result is the layout's contract. */
static void test_wide_rows(void) {
    nx_error err = {0};
    nx_threadpool *tp[3] = {NULL, nx_threadpool_create(2, &err), nx_threadpool_create(3, &err)};
    CHECK(tp[1] && tp[2]);
    const struct { nx_type t; int64_t n_in; } cases[] = {{NX_TYPE_Q8_0, 32 * 1103}, {NX_TYPE_Q4_K, 256 * 138}, {NX_TYPE_Q4_0, 32 * 1103}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const nx_type t = cases[c].t;
        const int64_t n_in = cases[c].n_in, n_out = 16, ldx = n_in + 1;
        enum { R = 3 };
        wmat m;
        wmat_make(&m, t, n_in, n_out);
        float *x = make_x(R, ldx), *ref = malloc(sizeof(float) * R * n_out), *y = malloc(sizeof(float) * R * n_out);
        void *pk = NULL;
        if (t != NX_TYPE_Q4_0) {
            size_t bb;
            CHECK(nx_mm_pack_format(t, NULL, &bb));
            const size_t want = (size_t)(n_out / 16) * (size_t)(n_in / (t == NX_TYPE_Q8_0 ? 32 : 256)) * bb;
            pk = aligned_alloc(64, (want + 63) / 64 * 64);
            nx_tensor w = m.w;
            w.packed = NULL;
            nx_matmul_pack(&w, pk);
        }
        for (int packed = 0; packed < (pk ? 2 : 1); packed++) {
            wmat mm = m;
            mm.w.packed = packed && nx_mm_pick_pkernel(t) ? pk : NULL;
            if (packed && !mm.w.packed) continue;
            for (int n = 1; n <= R; n++) {
                CHECK(run_mm(NULL, &mm, x, n, ldx, ref, n_out) == NX_OK);
                if (packed) {
                    float *pr = malloc(sizeof(float) * R * n_out);
                    packed_reference(&m, x, n, ldx, pr, n_out);
                    CHECK_MSG(same_bits(ref, pr, (size_t)(n * n_out)), "wide %s packed contract rows %d", nx_type_name(t), n);
                    free(pr);
                }
                for (int th = 1; th < 3; th++) {
                    for (int64_t i = 0; i < R * n_out; i++) y[i] = NAN;
                    CHECK(run_mm(tp[th], &mm, x, n, ldx, y, n_out) == NX_OK);
                    CHECK_MSG(same_bits(y, ref, (size_t)(n * n_out)), "wide %s %s rows %d threads %d", nx_type_name(t),
                              packed ? "packed" : "unpacked", n, th + 1);
                }
            }
        }
        free(pk); free(x); free(ref); free(y);
        wmat_free(&m);
    }
    nx_threadpool_free(tp[1]);
    nx_threadpool_free(tp[2]);
}

static void test_packed(void) {
    fprintf(stderr, "  bf16 dot products: %s\n", nx_cpu_has_avx512bf16() ? "present: the AVX-512 passes run again with them (BF16 by its own contract)" : "not on this machine: those passes skipped");
    fprintf(stderr, "  amx: %s\n", nx_cpu_amx_detected() ? "present: the AVX-512 passes run again with AMX"
                                                         : "not on this machine (or not granted by the OS): AMX passes skipped");
    nx_error terr = {0};
    nx_threadpool *tp[2] = {nx_threadpool_create(2, &terr), nx_threadpool_create(3, &terr)};
    CHECK(tp[0] && tp[1]);
    check_packed(NX_TYPE_Q8_0, 32, 16, false, tp);
    check_packed(NX_TYPE_Q8_0, 96, 48, true, tp);
    check_packed(NX_TYPE_Q8_0, 1024, 64, false, tp);
    check_packed(NX_TYPE_Q4_0, 32, 16, false, tp);
    check_packed(NX_TYPE_Q4_0, 96, 48, true, tp);
    check_packed(NX_TYPE_Q4_0, 1024, 64, false, tp);
    check_packed(NX_TYPE_IQ4_NL, 32, 16, false, tp);
    check_packed(NX_TYPE_IQ4_NL, 96, 48, true, tp);
    check_packed(NX_TYPE_IQ4_NL, 1024, 64, false, tp);
    check_packed(NX_TYPE_Q4_K, 256, 16, false, tp);
    check_packed(NX_TYPE_Q4_K, 512, 48, true, tp);
    check_packed(NX_TYPE_Q4_K, 1024, 32, false, tp);
    check_packed(NX_TYPE_Q5_K, 256, 16, false, tp);
    check_packed(NX_TYPE_Q5_K, 512, 48, true, tp);
    check_packed(NX_TYPE_Q5_K, 1024, 32, false, tp);
    check_packed(NX_TYPE_Q6_K, 256, 16, false, tp);
    check_packed(NX_TYPE_Q6_K, 512, 48, true, tp);
    check_packed(NX_TYPE_Q6_K, 1024, 32, false, tp);
    check_packed(NX_TYPE_IQ4_XS, 256, 16, false, tp);
    check_packed(NX_TYPE_IQ4_XS, 512, 48, true, tp);
    check_packed(NX_TYPE_IQ4_XS, 1024, 32, false, tp);
    check_packed(NX_TYPE_F32, 32, 16, false, tp);
    check_packed(NX_TYPE_F16, 96, 48, false, tp);
    check_packed(NX_TYPE_BF16, 1024, 32, false, tp);
    check_packed_batches(NX_TYPE_Q8_0, 512, 48, tp);
    check_packed_batches(NX_TYPE_Q4_0, 512, 48, tp);
    check_packed_batches(NX_TYPE_IQ4_NL, 512, 48, tp);
    check_packed_batches(NX_TYPE_Q4_K, 512, 48, tp);
    check_packed_batches(NX_TYPE_Q5_K, 512, 32, tp);
    check_packed_batches(NX_TYPE_Q6_K, 512, 48, tp);
    check_packed_batches(NX_TYPE_IQ4_XS, 512, 48, tp);
    check_packed_batches(NX_TYPE_F16, 512, 48, tp);
    check_packed_batches(NX_TYPE_BF16, 512, 48, tp);
    nx_threadpool_free(tp[0]);
    nx_threadpool_free(tp[1]);
}

int main(void) {
    fprintf(stderr, "cpu level detected: %s\n", nx_cpu_level_name(nx_cpu_level_detected()));
    RUN(test_cpu_env);
    RUN(test_quantize_levels);
    RUN(test_accuracy);
    RUN(test_batch_invariance);
    RUN(test_thread_invariance);
    RUN(test_large_batch);
    RUN(test_tiled_batch);
    RUN(test_multi);
    RUN(test_errors);
    RUN(test_nonfinite);
    RUN(test_extremes);
#if defined(__aarch64__)
    RUN(test_neon_exact);   /* the aarch64 subset (.ci/aarch64.sh) */
#endif
    RUN(test_float_order);
    RUN(test_stream_read);
    RUN(test_packed);
    RUN(test_packed_experts);
    RUN(test_multi_kquants);
    RUN(test_wide_rows);
    return test_summary();
}
