/* test_ops.c — element-wise / norm / RoPE / softmax / argmax / top-k kernels: every SIMD level
 * against the scalar reference on odd lengths, known values, accuracy sweeps against double
 * precision, ties, non-finite inputs, and RoPE against a double-precision formula. */
#include <float.h>
#include <time.h>
#include <stdint.h>
#include "test.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"

static const int LENS[] = {1, 7, 31, 33, 1000, 4097};
#define N_LENS ((int)(sizeof LENS / sizeof LENS[0]))
#define MAXN 4097

/* ===== helpers ===== */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(float lo, float hi) {   /* deterministic xorshift */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) * (1.0 / 16777216.0));
}
static void fill(float *x, int n, float lo, float hi) {
    for (int i = 0; i < n; i++) x[i] = frand(lo, hi);
}

/* Levels this CPU supports, each set in turn; the scalar one is always there. */
static int levels(nx_cpu_level *out) { return nx_cpu_levels(out); }

/* |a - b| <= rel * |b| + abs_tol, element-wise; NaN must match NaN. Returns # of violations. */
static int cmp_tol(const float *a, const float *b, int n, double rel, double abs_tol, double *worst) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(b[i]) || isnan(a[i])) { bad += isnan(a[i]) != isnan(b[i]); continue; }
        if (isinf(b[i]) || isinf(a[i])) { bad += a[i] != b[i]; continue; }
        double d = fabs((double)a[i] - (double)b[i]);
        double lim = rel * fabs((double)b[i]) + abs_tol;
        if (worst && fabs((double)b[i]) > 1e-30 && d / fabs((double)b[i]) > *worst) *worst = d / fabs((double)b[i]);
        if (d > lim) {
            if (bad < 3) fprintf(stderr, "    [%d] got %.9g want %.9g (diff %.3g > %.3g)\n", i, a[i], b[i], d, lim);
            bad++;
        }
    }
    return bad;
}

static float xa[MAXN + 16], xb[MAXN + 16], xc[MAXN + 16], ref[MAXN + 16], got[MAXN + 16];

/* ===== SIMD vs scalar, all unary / binary ops ===== */

typedef struct {
    const char *name;
    float lo, hi;           /* input range */
    double rel, abs_tol;    /* tolerance vs scalar */
    int kind;               /* 0 unary, 1 binary (g,u) */
    void (*unary)(float *, const float *, int);
    void (*binary)(float *, const float *, const float *, int);
} op_case;

static void softcap30(float *y, const float *x, int n) { nx_softcap(y, x, n, 30.0f); }
static void scale_m3(float *y, const float *x, int n) { nx_scale(y, x, -3.25f, n); }

static void test_simd_vs_scalar_unary(void) {
    const op_case cases[] = {
        {"exp", -90, 88, 3e-7, 1e-37, 0, nx_exp, NULL},
        {"exp_small", -2, 2, 3e-7, 0, 0, nx_exp, NULL},
        {"tanh", -12, 12, 4e-7, 1e-37, 0, nx_tanh, NULL},
        {"tanh_small", -0.01f, 0.01f, 4e-7, 1e-37, 0, nx_tanh, NULL},
        {"sigmoid", -30, 30, 4e-7, 1e-37, 0, nx_sigmoid, NULL},
        {"silu", -30, 30, 4e-7, 1e-37, 0, nx_silu, NULL},
        {"softplus", -30, 30, 4e-7, 1e-37, 0, nx_softplus, NULL},
        {"softplus_small", -1, 1, 4e-7, 1e-37, 0, nx_softplus, NULL},
        {"softcap30", -200, 200, 4e-7, 1e-37, 0, softcap30, NULL},
        {"scale", -100, 100, 0, 0, 0, scale_m3, NULL},
        {"add", -100, 100, 0, 0, 1, NULL, nx_add},
        {"mul", -100, 100, 0, 0, 1, NULL, nx_mul},
        {"swiglu", -20, 20, 4e-7, 1e-37, 1, NULL, nx_swiglu},
    };
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const op_case *oc = &cases[c];
        double worst_all = 0;
        for (int li = 0; li < N_LENS; li++) {
            int n = LENS[li];
            fill(xa, n, oc->lo, oc->hi);
            fill(xb, n, -3, 3);
            nx_cpu_set_level(NX_CPU_SCALAR);
            if (oc->kind == 0) oc->unary(ref, xa, n); else oc->binary(ref, xa, xb, n);
            for (int l = 1; l < nl; l++) {
                nx_cpu_set_level(lv[l]);
                for (int i = 0; i < MAXN + 16; i++) got[i] = 12345.0f;
                if (oc->kind == 0) oc->unary(got, xa, n); else oc->binary(got, xa, xb, n);
                double worst = 0;
                int bad = cmp_tol(got, ref, n, oc->rel, oc->abs_tol, &worst);
                if (worst > worst_all) worst_all = worst;
                CHECK_MSG(bad == 0, "%s n=%d level %s: %d mismatches", oc->name, n, nx_cpu_level_name(lv[l]), bad);
                CHECK_MSG(got[n] == 12345.0f, "%s n=%d level %s wrote past n", oc->name, n, nx_cpu_level_name(lv[l]));
                /* in place (y == x) gives the same */
                memcpy(got, xa, sizeof(float) * (size_t)n);
                if (oc->kind == 0) oc->unary(got, got, n); else oc->binary(got, got, xb, n);
                CHECK(cmp_tol(got, ref, n, oc->rel, oc->abs_tol, NULL) == 0);
            }
        }
        if (nl > 1) fprintf(stderr, "  %-15s SIMD vs scalar max rel diff %.2e (tolerance %.0e)\n", oc->name, worst_all, oc->rel);
    }
    nx_cpu_set_level(nx_cpu_level_detected());
}

/* GELU: the ggml formula 0.5x(1+tanh(u)) cancels for negative x, so the tolerance is absolute in |x|. */
static void test_gelu(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    for (int li = 0; li < N_LENS; li++) {
        int n = LENS[li];
        fill(xa, n, -12, 12);
        fill(xb, n, -2, 2);
        nx_cpu_set_level(NX_CPU_SCALAR);
        nx_gelu(ref, xa, n);
        nx_geglu(xc, xa, xb, n);
        for (int l = 1; l < nl; l++) {
            nx_cpu_set_level(lv[l]);
            nx_gelu(got, xa, n);
            int bad = 0;
            for (int i = 0; i < n; i++) bad += fabs(got[i] - ref[i]) > 3e-7 * (fabs(xa[i]) + fabs(ref[i])) + 1e-37;
            CHECK_MSG(bad == 0, "gelu n=%d level %s: %d mismatches", n, nx_cpu_level_name(lv[l]), bad);
            nx_geglu(got, xa, xb, n);
            bad = 0;
            for (int i = 0; i < n; i++)
                bad += fabs(got[i] - xc[i]) > 3e-7 * (fabs(xa[i]) + fabs(ref[i])) * fabs(xb[i]) + 1e-37;
            CHECK_MSG(bad == 0, "geglu n=%d level %s: %d mismatches", n, nx_cpu_level_name(lv[l]), bad);
        }
    }
    nx_cpu_set_level(nx_cpu_level_detected());
}

/* axpy / mul_add / dot are fused and bit-identical at every level. */
static void test_fused_exact(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    for (int li = 0; li < N_LENS; li++) {
        int n = LENS[li];
        fill(xa, n, -10, 10);
        fill(xb, n, -10, 10);
        fill(xc, n, -10, 10);
        nx_cpu_set_level(NX_CPU_SCALAR);
        float dref = nx_dot(xa, xb, n);
        nx_mul_add(ref, xa, xb, xc, n);
        float axref[MAXN];
        memcpy(axref, xc, sizeof(float) * (size_t)n);
        nx_axpy(axref, xa, 0.37f, n);
        double dd = 0, da = 0;
        for (int i = 0; i < n; i++) { dd += (double)xa[i] * xb[i]; da += fabs((double)xa[i] * xb[i]); }
        CHECK_MSG(fabs(dref - dd) <= 1e-6 * da + 1e-30, "dot n=%d: %.9g vs double %.9g", n, dref, dd);
        for (int l = 1; l < nl; l++) {
            nx_cpu_set_level(lv[l]);
            float d = nx_dot(xa, xb, n);
            CHECK_MSG(d == dref, "dot n=%d level %s: %.9g != scalar %.9g", n, nx_cpu_level_name(lv[l]), d, dref);
            nx_mul_add(got, xa, xb, xc, n);
            CHECK(cmp_tol(got, ref, n, 0, 0, NULL) == 0);
            memcpy(got, xc, sizeof(float) * (size_t)n);
            nx_axpy(got, xa, 0.37f, n);
            CHECK(cmp_tol(got, axref, n, 0, 0, NULL) == 0);
        }
    }
    nx_cpu_set_level(nx_cpu_level_detected());
    CHECK(nx_dot(xa, xb, 0) == 0.0f);
}

/* nx_conv_silu at every level: bit for bit the composition of that level's nx_mul, nx_add and
 * nx_silu in tap order (the forward's old sequence), with y aliasing the window's last row
 * too; K from 1 to 4, every length of LENS and a 128-channel block with a wider weight stride. */
static void test_conv_silu(void) {
    enum { KM = 4 };
    static float win[KM * MAXN], w[KM * (MAXN + 8)], acc[MAXN], p[MAXN], want[MAXN], alias[KM * MAXN];
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    for (int li = 0; li <= N_LENS; li++) {
        const int n = li < N_LENS ? LENS[li] : 128;
        const long ws = li < N_LENS ? n : 6144;   /* the model's conv weights: [K][channels] */
        if ((size_t)(KM - 1) * (size_t)ws + (size_t)n > sizeof w / sizeof w[0]) continue;
        fill(win, KM * n, -3, 3);
        fill(w, (int)((KM - 1) * ws + n), -1, 1);
        for (int K = 1; K <= KM; K++)
            for (int l = 0; l < nl; l++) {
                nx_cpu_set_level(lv[l]);
                nx_mul(acc, win, w, n);
                for (int j = 1; j < K; j++) {
                    nx_mul(p, win + (size_t)j * n, w + (size_t)j * ws, n);
                    nx_add(acc, acc, p, n);
                }
                nx_silu(want, acc, n);
                nx_conv_silu(got, win, w, ws, K, n);
                CHECK_MSG(memcmp(got, want, sizeof(float) * (size_t)n) == 0, "conv_silu n=%d K=%d level %s", n, K,
                          nx_cpu_level_name(lv[l]));
                memcpy(alias, win, sizeof(float) * (size_t)(K * n));
                nx_conv_silu(alias + (size_t)(K - 1) * n, alias, w, ws, K, n);
                CHECK_MSG(memcmp(alias + (size_t)(K - 1) * n, want, sizeof(float) * (size_t)n) == 0,
                          "conv_silu in place n=%d K=%d level %s", n, K, nx_cpu_level_name(lv[l]));
            }
    }
    nx_cpu_set_level(nx_cpu_level_detected());
}

/* ===== accuracy sweeps against double precision (every level) ===== */

static void test_accuracy_sweeps(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    static float xs[20001], ys[20001];
    const int n = 20001;
    for (int l = 0; l < nl; l++) {
        nx_cpu_set_level(lv[l]);
        /* exp over the normal range */
        for (int i = 0; i < n; i++) xs[i] = -87.0f + 175.5f * (float)i / (n - 1);
        nx_exp(ys, xs, n);
        double worst = 0;
        for (int i = 0; i < n; i++) {
            double e = exp((double)xs[i]);
            double r = fabs(ys[i] - e) / e;
            if (r > worst) worst = r;
        }
        CHECK_MSG(worst < 3e-7, "exp level %s: max rel err %.3g", nx_cpu_level_name(lv[l]), worst);
        fprintf(stderr, "  %-6s exp max rel err %.2e", nx_cpu_level_name(lv[l]), worst);
        /* tanh over [-10, 10] (relative, including tiny arguments) */
        for (int i = 0; i < n; i++) xs[i] = -10.0f + 20.0f * (float)i / (n - 1);
        xs[n / 2] = 1e-20f;
        nx_tanh(ys, xs, n);
        worst = 0;
        for (int i = 0; i < n; i++) {
            double t = tanh((double)xs[i]);
            if (t == 0) continue;
            double r = fabs(ys[i] - t) / fabs(t);
            if (r > worst) worst = r;
        }
        CHECK_MSG(worst < 3e-7, "tanh level %s: max rel err %.3g", nx_cpu_level_name(lv[l]), worst);
        fprintf(stderr, ", tanh %.2e", worst);
        /* softplus over [-40, 40] against log1p(exp(x)) in double */
        for (int i = 0; i < n; i++) xs[i] = -40.0f + 80.0f * (float)i / (n - 1);
        nx_softplus(ys, xs, n);
        worst = 0;
        for (int i = 0; i < n; i++) {
            double t = xs[i] > 20.0f ? xs[i] : log1p(exp((double)xs[i]));
            double r = fabs(ys[i] - t) / fabs(t);
            if (r > worst) worst = r;
        }
        CHECK_MSG(worst < 3e-7, "softplus level %s: max rel err %.3g", nx_cpu_level_name(lv[l]), worst);
        fprintf(stderr, ", softplus %.2e", worst);
        /* sigmoid over [-30, 30] */
        for (int i = 0; i < n; i++) xs[i] = -30.0f + 60.0f * (float)i / (n - 1);
        nx_sigmoid(ys, xs, n);
        worst = 0;
        for (int i = 0; i < n; i++) {
            double t = 1.0 / (1.0 + exp(-(double)xs[i]));
            double r = fabs(ys[i] - t) / t;
            if (r > worst) worst = r;
        }
        CHECK_MSG(worst < 3e-7, "sigmoid level %s: max rel err %.3g", nx_cpu_level_name(lv[l]), worst);
        fprintf(stderr, ", sigmoid %.2e\n", worst);
    }
    nx_cpu_set_level(nx_cpu_level_detected());
}

/* ===== known values and non-finite inputs ===== */

static void test_known_values(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    for (int l = 0; l < nl; l++) {
        nx_cpu_set_level(lv[l]);
        float x[9] = {0.0f, 1.0f, -1.0f, 0.5f, 25.0f, -200.0f, INFINITY, -INFINITY, NAN}, y[9];
        nx_exp(y, x, 9);
        CHECK(y[0] == 1.0f);
        CHECK_NEAR(y[1], 2.718281828, 3e-7 * 2.72);
        CHECK(y[5] == 0.0f);
        CHECK(isinf(y[6]) && y[6] > 0);
        CHECK(y[7] == 0.0f);
        CHECK(isnan(y[8]));
        float big = 89.0f;
        nx_exp(y, &big, 1);
        CHECK(isinf(y[0]));
        nx_sigmoid(y, x, 9);
        CHECK(y[0] == 0.5f);
        CHECK_NEAR(y[1], 0.7310585786, 3e-7);
        CHECK(y[6] == 1.0f && y[7] == 0.0f && isnan(y[8]));
        nx_silu(y, x, 9);
        CHECK(y[0] == 0.0f);
        CHECK_NEAR(y[1], 0.7310585786, 3e-7);
        CHECK_NEAR(y[2], -0.2689414214, 3e-7);
        CHECK(isnan(y[8]));
        nx_tanh(y, x, 9);
        CHECK(y[0] == 0.0f);
        CHECK_NEAR(y[3], 0.4621171573, 3e-7);
        CHECK(y[4] == 1.0f && y[5] == -1.0f && y[6] == 1.0f && y[7] == -1.0f && isnan(y[8]));
        nx_gelu(y, x, 9);
        CHECK(y[0] == 0.0f);
        CHECK_NEAR(y[1], 0.8411919906, 3e-7);     /* tanh-approx GELU(1) */
        CHECK_NEAR(y[2], -0.1588080094, 3e-7);
        CHECK(y[4] == 25.0f);
        CHECK(fabsf(y[5]) < 1e-30f);
        nx_softplus(y, x, 9);
        CHECK_NEAR(y[0], 0.6931471806, 3e-7);
        CHECK_NEAR(y[1], 1.3132616875, 4e-7);
        CHECK(y[4] == 25.0f);                     /* above 20: exactly x */
        CHECK(y[5] == 0.0f && y[7] == 0.0f);
        CHECK(isnan(y[8]));
        nx_softcap(y, x, 5, 30.0f);
        CHECK_NEAR(y[4], 30.0 * tanh(25.0 / 30.0), 3e-7 * 30);
    }
    nx_cpu_set_level(nx_cpu_level_detected());
}

/* ===== norms ===== */

static void test_norms(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    static float w[MAXN];
    for (int li = 0; li < N_LENS; li++) {
        int n = LENS[li];
        fill(xa, n, -4, 4);
        fill(w, n, 0.5f, 1.5f);
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xa[i] * xa[i];
        const float eps = 1e-6f;
        for (int l = 0; l < nl; l++) {
            nx_cpu_set_level(lv[l]);
            nx_rmsnorm(got, xa, w, n, eps);
            int bad = 0;
            double sc = 1.0 / sqrt(ss / n + eps);
            for (int i = 0; i < n; i++) bad += fabs(got[i] - xa[i] * sc * w[i]) > 4e-7 * fabs(xa[i] * sc * w[i]) + 1e-30;
            CHECK_MSG(bad == 0, "rmsnorm n=%d level %s: %d off", n, nx_cpu_level_name(lv[l]), bad);
            /* no weight, in place */
            memcpy(got, xa, sizeof(float) * (size_t)n);
            nx_rmsnorm(got, got, NULL, n, eps);
            bad = 0;
            for (int i = 0; i < n; i++) bad += fabs(got[i] - xa[i] * sc) > 3e-7 * fabs(xa[i] * sc) + 1e-30;
            CHECK(bad == 0);
            /* L2 */
            nx_l2norm(got, xa, n, 1e-6f);
            double l2 = 1.0 / fmax(sqrt(ss), 1e-6);
            bad = 0;
            for (int i = 0; i < n; i++) bad += fabs(got[i] - xa[i] * l2) > 3e-7 * fabs(xa[i] * l2) + 1e-30;
            CHECK(bad == 0);
        }
    }
    /* rows: each row normalised on its own; eps guards an all-zero vector */
    for (int l = 0; l < nl; l++) {
        nx_cpu_set_level(lv[l]);
        float x[3 * 5], y[3 * 5];
        for (int i = 0; i < 15; i++) x[i] = (float)(i % 5 + 1) * (float)(i / 5 + 1);
        nx_rmsnorm_rows(y, x, NULL, 5, 3, 0.0f);
        for (int r = 0; r < 3; r++) {
            double ms = 0;
            for (int i = 0; i < 5; i++) ms += (double)y[r * 5 + i] * y[r * 5 + i];
            CHECK_NEAR(ms / 5, 1.0, 1e-6);
            CHECK_NEAR(y[r * 5 + 4], y[4], 1e-6);
        }
        float z[4] = {0, 0, 0, 0};
        nx_l2norm(z, z, 4, 1e-6f);
        CHECK(z[0] == 0.0f && !isnan(z[3]));
        nx_rmsnorm(z, z, NULL, 4, 1e-6f);
        CHECK(z[0] == 0.0f);
    }
    nx_cpu_set_level(nx_cpu_level_detected());
}

/* ===== softmax ===== */

static void test_softmax(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    static float mask[MAXN];
    for (int li = 0; li < N_LENS; li++) {
        int n = LENS[li];
        fill(xa, n, -20, 20);
        for (int i = 0; i < n; i++) mask[i] = (i % 3 == 1) ? -INFINITY : 0.0f;
        mask[0] = 0.0f;
        /* double reference of softmax(x * 0.125 + mask) */
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) {
            double v = (double)(xa[i] * 0.125f) + mask[i];
            if (v > mx) mx = v;
        }
        for (int i = 0; i < n; i++) sum += exp((double)(xa[i] * 0.125f) + mask[i] - mx);
        for (int l = 0; l < nl; l++) {
            nx_cpu_set_level(lv[l]);
            memcpy(got, xa, sizeof(float) * (size_t)n);
            nx_softmax(got, n, 0.125f, mask);
            int bad = 0;
            double tot = 0;
            for (int i = 0; i < n; i++) {
                double p = exp((double)(xa[i] * 0.125f) + mask[i] - mx) / sum;
                bad += fabs(got[i] - p) > 5e-7 * p + 1e-30;
                if (mask[i] == -INFINITY) bad += got[i] != 0.0f;
                tot += got[i];
            }
            CHECK_MSG(bad == 0, "softmax n=%d level %s: %d off", n, nx_cpu_level_name(lv[l]), bad);
            CHECK_NEAR(tot, 1.0, 1e-5);
            /* no mask, no scale */
            memcpy(got, xa, sizeof(float) * (size_t)n);
            nx_softmax(got, n, 1.0f, NULL);
            tot = 0;
            for (int i = 0; i < n; i++) tot += got[i];
            CHECK_NEAR(tot, 1.0, 1e-5);
        }
    }
    for (int l = 0; l < nl; l++) {
        nx_cpu_set_level(lv[l]);
        /* all -INF except one entry */
        for (int n = 1; n <= 40; n += 13) {
            for (int i = 0; i < n; i++) got[i] = -INFINITY;
            got[n / 2] = 3.0f;
            nx_softmax(got, n, 1.0f, NULL);
            for (int i = 0; i < n; i++) CHECK(got[i] == (i == n / 2 ? 1.0f : 0.0f));
            /* every entry masked out: zeros, not NaN */
            for (int i = 0; i < n; i++) { got[i] = 1.0f; mask[i] = -INFINITY; }
            nx_softmax(got, n, 1.0f, mask);
            for (int i = 0; i < n; i++) CHECK(got[i] == 0.0f);
        }
        /* equal entries: uniform */
        for (int i = 0; i < 33; i++) got[i] = 7.0f;
        nx_softmax(got, 33, 1.0f, NULL);
        for (int i = 0; i < 33; i++) CHECK_NEAR(got[i], 1.0 / 33, 1e-8);
    }
    nx_cpu_set_level(nx_cpu_level_detected());
}

/* ===== argmax, argmax_prob, top-k ===== */

static void test_argmax(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    for (int l = 0; l < nl; l++) {
        nx_cpu_set_level(lv[l]);
        for (int li = 0; li < N_LENS; li++) {
            int n = LENS[li];
            fill(xa, n, -5, 5);
            int want = 0;
            for (int i = 1; i < n; i++) if (xa[i] > xa[want]) want = i;
            CHECK_EQ_INT(nx_argmax(xa, n), want);
            /* ties: the max appears at several places, first wins */
            if (n >= 7) {
                xa[n - 1] = 9.0f; xa[n / 2] = 9.0f; xa[3] = 9.0f;
                CHECK_EQ_INT(nx_argmax(xa, n), 3);
                xa[0] = NAN;
                CHECK_EQ_INT(nx_argmax(xa, n), 3);
            }
            /* all equal, all -INF: index 0; all NaN: 0 */
            for (int i = 0; i < n; i++) xb[i] = -INFINITY;
            CHECK_EQ_INT(nx_argmax(xb, n), 0);
            if (n > 1) { xb[n - 1] = -1e30f; CHECK_EQ_INT(nx_argmax(xb, n), n - 1); }
            for (int i = 0; i < n; i++) xb[i] = NAN;
            CHECK_EQ_INT(nx_argmax(xb, n), 0);
            if (n > 2) { xb[n - 2] = -INFINITY; CHECK_EQ_INT(nx_argmax(xb, n), n - 2); }
            /* argmax_prob against a materialised softmax */
            fill(xa, n, -8, 8);
            float p = -1;
            int am = nx_argmax_prob(xa, n, &p);
            memcpy(got, xa, sizeof(float) * (size_t)n);
            nx_softmax(got, n, 1.0f, NULL);
            CHECK_EQ_INT(am, nx_argmax(xa, n));
            CHECK_NEAR(p, got[am], 1e-6 * got[am]);
        }
        float p = -1;
        CHECK_EQ_INT(nx_argmax_prob(xa, 0, &p), 0);
        CHECK(p == 0.0f);
        for (int i = 0; i < 5; i++) xb[i] = -INFINITY;
        nx_argmax_prob(xb, 5, &p);
        CHECK(p == 0.0f);
        xb[2] = 1.0f;
        CHECK_EQ_INT(nx_argmax_prob(xb, 5, &p), 2);
        CHECK(p == 1.0f);
        CHECK_EQ_INT(nx_argmax_prob(xb, 5, NULL), 2);
    }
    nx_cpu_set_level(nx_cpu_level_detected());
}

static void topk_ref(const float *x, int n, int k, int *idx, float *val, int *cnt) {
    /* selection by repeated scan: largest value, lowest index among equals, not yet taken */
    static unsigned char taken[MAXN + 8];
    memset(taken, 0, sizeof taken);
    *cnt = 0;
    for (int r = 0; r < k; r++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (taken[i] || isnan(x[i])) continue;
            if (best < 0 || x[i] > x[best]) best = i;
        }
        if (best < 0) break;
        taken[best] = 1;
        idx[r] = best;
        val[r] = x[best];
        (*cnt)++;
    }
}

static void test_topk(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    const int ks[] = {1, 2, 5, 40, 64};
    for (int li = 0; li < N_LENS; li++) {
        int n = LENS[li];
        /* coarse values: many ties */
        for (int i = 0; i < n; i++) xa[i] = (float)((int)frand(0, 50)) * 0.5f;
        if (n > 10) { xa[5] = NAN; xa[9] = -INFINITY; }
        for (size_t kk = 0; kk < sizeof ks / sizeof ks[0]; kk++) {
            int k = ks[kk], ridx[64], rcnt;
            float rval[64];
            topk_ref(xa, n, k, ridx, rval, &rcnt);
            for (int l = 0; l < nl; l++) {
                nx_cpu_set_level(lv[l]);
                int idx[64], cnt = -1;
                float val[64];
                nx_error err = {0};
                CHECK_EQ_INT(nx_topk(xa, n, k, idx, val, &cnt, &err), NX_OK);
                CHECK_EQ_INT(cnt, rcnt);
                int bad = 0;
                for (int r = 0; r < cnt && r < rcnt; r++) bad += idx[r] != ridx[r] || val[r] != rval[r];
                CHECK_MSG(bad == 0, "top-%d n=%d level %s: %d differ", k, n, nx_cpu_level_name(lv[l]), bad);
            }
        }
    }
    /* increasing run (worst case for insertion) and a plain check of ordering */
    for (int i = 0; i < 1000; i++) xa[i] = (float)i;
    for (int l = 0; l < nl; l++) {
        nx_cpu_set_level(lv[l]);
        int idx[64], cnt;
        CHECK_EQ_INT(nx_topk(xa, 1000, 64, idx, NULL, &cnt, NULL), NX_OK);
        CHECK_EQ_INT(cnt, 64);
        for (int r = 0; r < 64; r++) CHECK_EQ_INT(idx[r], 999 - r);
    }
    /* errors and edge cases */
    int idx[64], cnt = 5;
    float val[64];
    nx_error err = {0};
    CHECK_EQ_INT(nx_topk(xa, 10, 65, idx, val, &cnt, &err), NX_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "k = 65") != NULL);
    CHECK_EQ_INT(nx_topk(xa, 10, -1, idx, val, &cnt, NULL), NX_ERR_INVALID_ARG);
    CHECK_EQ_INT(nx_topk(xa, -3, 4, idx, val, &cnt, NULL), NX_ERR_INVALID_ARG);
    CHECK_EQ_INT(nx_topk(NULL, 10, 4, idx, val, &cnt, NULL), NX_ERR_INVALID_ARG);
    CHECK_EQ_INT(nx_topk(xa, 10, 4, idx, val, NULL, NULL), NX_ERR_INVALID_ARG);
    CHECK_EQ_INT(nx_topk(xa, 10, 0, idx, val, &cnt, NULL), NX_OK);
    CHECK_EQ_INT(cnt, 0);
    CHECK_EQ_INT(nx_topk(xa, 3, 10, idx, val, &cnt, NULL), NX_OK);   /* k > n */
    CHECK_EQ_INT(cnt, 3);
    CHECK(idx[0] == 2 && idx[1] == 1 && idx[2] == 0);
    float nans[3] = {NAN, NAN, NAN};
    CHECK_EQ_INT(nx_topk(nans, 3, 2, idx, val, &cnt, NULL), NX_OK);
    CHECK_EQ_INT(cnt, 0);
    nx_cpu_set_level(nx_cpu_level_detected());
}

/* ===== RoPE ===== */

/* Double-precision rotation with the angles ggml uses: theta_i carried in float by repeated
 * multiplication (that rounding is part of the reference behaviour), then
 * angle = freq_scale * theta_i / ff_i, cos/sin and the rotation in double. */
static void rope_ref(double *out, const float *x, int head_dim, const nx_rope_params *p, int pos, int ggml_angles) {
    int half = p->n_rot / 2;
    for (int i = 0; i < head_dim; i++) out[i] = x[i];
    float theta = (float)pos;
    const float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    for (int i = 0; i < half; i++) {
        double ff = p->freq_factors ? p->freq_factors[i] : 1.0;
        double a = ggml_angles ? (double)p->freq_scale * ((double)theta / ff)
                               : p->freq_scale * pos * pow(p->freq_base, -2.0 * i / p->n_rot) / ff;
        theta *= theta_scale;
        int i0 = p->mode == NX_ROPE_NEOX ? i : 2 * i, i1 = p->mode == NX_ROPE_NEOX ? i + half : 2 * i + 1;
        out[i0] = x[i0] * cos(a) - x[i1] * sin(a);
        out[i1] = x[i0] * sin(a) + x[i1] * cos(a);
    }
}

static void test_rope(void) {
    nx_cpu_level lv[NX_CPU_MAX_LEVELS];
    int nl = levels(lv);
    enum { HD = 256, NH = 3, STRIDE = 2 * HD };      /* q interleaved with gate: stride 2*head_dim */
    static float x[NH * STRIDE], y[NH * STRIDE];
    static double r[HD];
    float ff[128];
    for (int i = 0; i < 128; i++) ff[i] = i < 20 ? 1.0f : 1e30f;      /* gemma4-style proportional */
    const struct { int n_rot; nx_rope_mode mode; float base, scale; const float *ff; } cfgs[] = {
        {64, NX_ROPE_NEOX, 1e7f, 1.0f, NULL},           /* qwen3.5: partial rotary 64 of 256 */
        {256, NX_ROPE_NEOX, 1e6f, 1.0f, ff},            /* gemma4 full layer with freq factors */
        {250, NX_ROPE_NEOX, 1e4f, 0.25f, NULL},          /* odd half (125): masked tails */
        {128, NX_ROPE_NORMAL, 1e4f, 1.0f, NULL},
        {6, NX_ROPE_NEOX, 1e4f, 1.0f, NULL},
    };
    const int poss[] = {0, 1, 7, 1000, 40000};
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        nx_rope_params p = {cfgs[c].n_rot, cfgs[c].mode, cfgs[c].base, cfgs[c].scale, cfgs[c].ff};
        CHECK_EQ_INT(nx_rope_check(&p, HD, NULL), NX_OK);
        for (size_t pi = 0; pi < sizeof poss / sizeof poss[0]; pi++) {
            int pos = poss[pi];
            fill(x, NH * STRIDE, -2, 2);
            for (int l = 0; l < nl; l++) {
                nx_cpu_set_level(lv[l]);
                memcpy(y, x, sizeof x);
                nx_rope(y, NH, STRIDE, &p, pos);
                int bad = 0, touched = 0;
                for (int h = 0; h < NH; h++) {
                    rope_ref(r, x + h * STRIDE, HD, &p, pos, 1);
                    for (int i = 0; i < HD; i++) {
                        double d = fabs(y[h * STRIDE + i] - r[i]);
                        if (d > 1e-6 * (fabs(r[i]) + 1.0)) {
                            if (bad < 3) fprintf(stderr, "    rope cfg %zu pos %d h %d i %d: %.9g vs %.9g\n", c, pos, h, i,
                                                 y[h * STRIDE + i], r[i]);
                            bad++;
                        }
                    }
                    /* the gate half of each head (stride gap) is untouched, bit for bit */
                    for (int i = HD; i < STRIDE; i++) touched += y[h * STRIDE + i] != x[h * STRIDE + i];
                    /* dims past n_rot are untouched */
                    for (int i = p.n_rot; i < HD; i++) touched += y[h * STRIDE + i] != x[h * STRIDE + i];
                }
                CHECK_MSG(bad == 0, "rope cfg %zu pos %d level %s: %d off", c, pos, nx_cpu_level_name(lv[l]), bad);
                CHECK_EQ_INT(touched, 0);
                /* cache + apply gives the same as nx_rope */
                float cache[NX_ROPE_MAX_DIMS], z[NH * STRIDE];
                memcpy(z, x, sizeof x);
                nx_rope_cache(&p, pos, cache);
                nx_rope_apply(z, NH, STRIDE, &p, cache);
                CHECK(memcmp(z, y, sizeof z) == 0);
            }
            /* against the exact formula (angles in double): tight for small positions */
            if (pos <= 7 && !cfgs[c].ff) {
                nx_cpu_set_level(nx_cpu_level_detected());
                memcpy(y, x, sizeof x);
                nx_rope(y, 1, HD, &p, pos);
                rope_ref(r, x, HD, &p, pos, 0);
                int bad = 0;
                for (int i = 0; i < HD; i++) bad += fabs(y[i] - r[i]) > 2e-6 * (fabs(r[i]) + 1.0);
                CHECK_MSG(bad == 0, "rope exact-angle cfg %zu pos %d: %d off", c, pos, bad);
            }
        }
    }
    /* pos 0 is the identity */
    nx_rope_params p0 = {64, NX_ROPE_NEOX, 1e7f, 1.0f, NULL};
    fill(x, HD, -1, 1);
    memcpy(y, x, sizeof(float) * HD);
    nx_rope(y, 1, HD, &p0, 0);
    CHECK(memcmp(x, y, sizeof(float) * HD) == 0);
    /* n_rot beyond the stack cache: per-pair path, same results as the reference */
    {
        enum { BIG = 1200 };
        static float bx[BIG], by[BIG];
        static double br[BIG];
        nx_rope_params pb = {BIG, NX_ROPE_NEOX, 1e4f, 1.0f, NULL};
        fill(bx, BIG, -1, 1);
        memcpy(by, bx, sizeof bx);
        nx_rope(by, 1, BIG, &pb, 123);
        rope_ref(br, bx, BIG, &pb, 123, 1);
        int bad = 0;
        for (int i = 0; i < BIG; i++) bad += fabs(by[i] - br[i]) > 1e-6 * (fabs(br[i]) + 1.0);
        CHECK(bad == 0);
    }
    /* parameter checks */
    nx_error err = {0};
    nx_rope_params bad = {63, NX_ROPE_NEOX, 1e4f, 1.0f, NULL};
    CHECK_EQ_INT(nx_rope_check(&bad, 128, &err), NX_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "n_rot 63") != NULL);
    bad.n_rot = 256;
    CHECK_EQ_INT(nx_rope_check(&bad, 128, NULL), NX_ERR_INVALID_ARG);
    bad.n_rot = 64; bad.freq_base = 0;
    CHECK_EQ_INT(nx_rope_check(&bad, 128, NULL), NX_ERR_INVALID_ARG);
    bad.freq_base = 1e4f; bad.mode = (nx_rope_mode)1;
    CHECK_EQ_INT(nx_rope_check(&bad, 128, NULL), NX_ERR_UNSUPPORTED);
    float zf[32] = {0};
    bad.mode = NX_ROPE_NEOX; bad.freq_factors = zf;
    CHECK_EQ_INT(nx_rope_check(&bad, 128, NULL), NX_ERR_INVALID_ARG);
    CHECK_EQ_INT(nx_rope_check(NULL, 128, NULL), NX_ERR_INVALID_ARG);
    nx_cpu_set_level(nx_cpu_level_detected());
}

/* n == 0 and negative lengths are no-ops everywhere (nothing read or written). */
static void test_empty(void) {
    float a = 5.0f;
    nx_exp(&a, &a, 0); nx_silu(&a, &a, -1); nx_add(&a, &a, &a, 0); nx_softmax(&a, 0, 1.0f, NULL);
    nx_rmsnorm(&a, &a, NULL, 0, 1e-6f); nx_l2norm(&a, &a, 0, 1e-6f); nx_axpy(&a, &a, 2.0f, 0);
    CHECK(a == 5.0f);
    CHECK_EQ_INT(nx_argmax(&a, 0), 0);
}

/* Informational timing of the common ops at the detected level. */
static void test_timing(void) {
    static float big[151936], tmp[151936];
    fill(big, 151936, -10, 10);
    nx_cpu_set_level(nx_cpu_level_detected());
    clock_t t0 = clock();
    int reps = 50;
    volatile int sink = 0;
    for (int r = 0; r < reps; r++) sink += nx_argmax(big, 151936);
    double ta = (double)(clock() - t0) / CLOCKS_PER_SEC / reps * 1e6;
    t0 = clock();
    float p;
    for (int r = 0; r < reps; r++) sink += nx_argmax_prob(big, 151936, &p);
    double tp = (double)(clock() - t0) / CLOCKS_PER_SEC / reps * 1e6;
    t0 = clock();
    for (int r = 0; r < reps; r++) { memcpy(tmp, big, sizeof big); nx_softmax(tmp, 151936, 1.0f, NULL); }
    double ts = (double)(clock() - t0) / CLOCKS_PER_SEC / reps * 1e6;
    fprintf(stderr, "  %s, vocab 151936: argmax %.0f us, argmax+prob %.0f us, softmax %.0f us\n",
            nx_cpu_level_name(nx_cpu_level_get()), ta, tp, ts);
    (void)sink;
    CHECK(1);
}

int main(void) {
    RUN(test_simd_vs_scalar_unary);
    RUN(test_gelu);
    RUN(test_fused_exact);
    RUN(test_conv_silu);
    RUN(test_accuracy_sweeps);
    RUN(test_known_values);
    RUN(test_norms);
    RUN(test_softmax);
    RUN(test_argmax);
    RUN(test_topk);
    RUN(test_rope);
    RUN(test_empty);
    RUN(test_timing);
    return test_summary();
}
