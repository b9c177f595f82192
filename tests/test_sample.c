/* test_sample.c — the sampler chain (src/sample.h): the RNG; greedy ties; top-k / top-p / min-p /
 * temperature on hand-made logits and against a naive full-sort reference (small and full
 * 151936 vocabularies, every selection path); chain order; penalties and logit bias against
 * hand-computed values; seeded determinism, clone / copy / reset replay; chi-square tests of
 * sampling and of the speculative accept/replace step (one-hot and full q, fixed seeds);
 * greedy speculation; bad input; per-token cost at n_vocab 151936 (printed). */
#define _GNU_SOURCE
#include <time.h>
#include "test.h"
#include "dist_util.h"
#include "sample.h"

/* ===== helpers ===== */

static nx_sampler *make(const nx_sampler_params *p) {
    nx_error err = {0};
    nx_sampler *s = NULL;
    nx_status st = nx_sampler_create(p, &s, &err);
    CHECK_MSG(st == NX_OK && s, "create failed: %s", err.msg);
    return s;
}

static nx_sampler_params plain(int32_t n_vocab, float temp) {
    nx_sampler_params p = nx_sampler_default_params(n_vocab);
    p.seed = 1234;
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

static bool rng_equal(nx_rng a, nx_rng b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Chi-square goodness of fit of counts[token] (n_vocab bins, N draws) against dist d; bins with
 * an expected count < 5 are pooled. Returns the p-value; a draw outside d's support gives 0. */
static double chi_square_p(const nx_sample_dist *d, const int *counts, int n_vocab, int N) {
    double *expect = calloc((size_t)n_vocab, sizeof *expect);
    for (int i = 0; i < d->n; i++) expect[d->ids[i]] = (double)d->p[i] * N;
    double chi = 0.0, pool_e = 0.0, pool_o = 0.0;
    int bins = 0;
    for (int t = 0; t < n_vocab; t++) {
        if (expect[t] == 0.0) {
            if (counts[t]) {
                fprintf(stderr, "  token %d drawn %d times but has p = 0\n", t, counts[t]);
                free(expect);
                return 0.0;
            }
            continue;
        }
        if (expect[t] < 5.0) {
            pool_e += expect[t];
            pool_o += counts[t];
            continue;
        }
        chi += (counts[t] - expect[t]) * (counts[t] - expect[t]) / expect[t];
        bins++;
    }
    if (pool_e > 0.0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    free(expect);
    if (bins < 2) return 1.0;
    return dist_gamma_q((bins - 1) / 2.0, chi / 2.0);
}

/* Naive reference of steps 3-6: full sort, then the definitions of sample.h one by one. */
typedef struct { float l; int id; } lid;
static int lid_cmp(const void *a, const void *b) {
    const lid *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}

static int ref_dist(const float *L, int n, const nx_sampler_params *p, int *ids, double *prob) {
    lid *v = malloc(sizeof *v * (size_t)n);
    int cnt = 0;
    for (int i = 0; i < n; i++)
        if (L[i] > -INFINITY) v[cnt++] = (lid){L[i], i};
    qsort(v, (size_t)cnt, sizeof *v, lid_cmp);
    const double m = v[0].l;
    const int keep = p->min_keep > 1 ? p->min_keep : 1;
    if (p->temperature <= 0.0f) cnt = 1;
    if (p->top_k > 0 && p->top_k < cnt) cnt = p->top_k;
    if (p->top_p < 1.0f) {
        double z = 0.0, cum = 0.0;
        for (int i = 0; i < cnt; i++) z += exp(v[i].l - m);
        for (int i = 0; i < cnt; i++) {
            cum += exp(v[i].l - m) / z;
            if (cum >= p->top_p && i + 1 >= keep) {
                cnt = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        const double thr = m + log(p->min_p);
        int i = 1;
        while (i < cnt && (v[i].l >= thr || i < keep)) i++;
        cnt = i;
    }
    double sum = 0.0;
    const double t = p->temperature > 0.0f ? p->temperature : 1.0;
    for (int i = 0; i < cnt; i++) sum += exp((v[i].l - m) / t);
    for (int i = 0; i < cnt; i++) {
        ids[i] = v[i].id;
        prob[i] = exp((v[i].l - m) / t) / sum;
    }
    free(v);
    return cnt;
}

/* Compare the chain's distribution with the reference: same support, probabilities close. */
static void check_against_ref(nx_sampler *s, const float *L, int n, const char *what) {
    const nx_sampler_params *p = nx_sampler_get_params(s);
    int *rid = malloc(sizeof *rid * (size_t)n);
    double *rp = malloc(sizeof *rp * (size_t)n);
    float *dense = calloc((size_t)n, sizeof *dense);
    const int rn = ref_dist(L, n, p, rid, rp);
    nx_sample_dist d;
    nx_error err = {0};
    CHECK(nx_sample_dist_init(&d, n, &err) == NX_OK);
    nx_status st = nx_sampler_dist(s, L, &d, &err);
    CHECK_MSG(st == NX_OK, "%s: %s", what, err.msg);
    CHECK_MSG(d.n == rn, "%s: %d candidates, reference %d", what, d.n, rn);
    double sum = 0.0;
    for (int i = 0; i < d.n; i++) {
        dense[d.ids[i]] = d.p[i];
        sum += d.p[i];
    }
    CHECK_NEAR(sum, 1.0, 1e-4);
    int bad = 0;
    for (int i = 0; i < rn; i++)
        if (fabs(dense[rid[i]] - rp[i]) > 1e-6 + 1e-4 * rp[i]) {
            if (bad++ < 3)
                fprintf(stderr, "  %s: token %d p %g, reference %g\n", what, rid[i], (double)dense[rid[i]], rp[i]);
        }
    CHECK_MSG(bad == 0, "%s: %d probabilities differ", what, bad);
    if (d.sorted)
        for (int i = 1; i < d.n; i++)
            CHECK(d.p[i - 1] > d.p[i] || (d.p[i - 1] == d.p[i] && d.ids[i - 1] < d.ids[i]));
    if (d.n <= NX_SAMPLE_SORT_MAX) CHECK_MSG(d.sorted, "%s: small distribution not sorted", what);
    nx_sample_dist_free(&d);
    free(rid);
    free(rp);
    free(dense);
}

/* Normal(0,1) from a test RNG (Box-Muller). */
static double gauss(nx_rng *r) {
    double u = nx_rng_uniform(r), v = nx_rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

/* LLM-like logits: a Gaussian body plus a few tokens well above it. */
static void fake_logits(float *L, int n, uint64_t seed, double body_sd, int n_peak, double peak) {
    nx_rng r;
    nx_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) L[i] = (float)(body_sd * gauss(&r));
    for (int k = 0; k < n_peak; k++) {
        int t = (int)(nx_rng_next(&r) % (uint64_t)n);
        L[t] = (float)(peak * (1.0 - 0.6 * nx_rng_uniform(&r)));
    }
}

static nx_sample_dist new_dist(int n) {
    nx_sample_dist d;
    nx_error err = {0};
    CHECK(nx_sample_dist_init(&d, n, &err) == NX_OK);
    return d;
}

/* ===== tests ===== */

static void test_rng(void) {
    nx_rng a, b;
    nx_rng_seed(&a, 7);
    nx_rng_seed(&b, 7);
    for (int i = 0; i < 100; i++) CHECK(nx_rng_next(&a) == nx_rng_next(&b));
    nx_rng c = a;                                  /* clone by value */
    CHECK(nx_rng_next(&a) == nx_rng_next(&c));
    nx_rng_seed(&b, 8);
    CHECK(nx_rng_next(&a) != nx_rng_next(&b));
    nx_rng_seed(&a, 0);                            /* seed 0 is fine */
    CHECK(nx_rng_next(&a) != 0 || nx_rng_next(&a) != 0);
    double sum = 0.0, lo = 1.0, hi = 0.0;
    for (int i = 0; i < 100000; i++) {
        double u = nx_rng_uniform(&a);
        CHECK(u >= 0.0 && u < 1.0);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    CHECK_NEAR(sum / 100000, 0.5, 0.005);
    CHECK(lo < 1e-3 && hi > 1.0 - 1e-3);
}

static void test_defaults(void) {
    nx_sampler_params p = nx_sampler_default_params(100);
    CHECK_EQ_INT(p.n_vocab, 100);
    CHECK(p.seed == NX_SAMPLER_SEED_RANDOM);
    CHECK_NEAR(p.temperature, 0.8, 1e-7);
    CHECK_EQ_INT(p.top_k, 40);
    CHECK_NEAR(p.top_p, 0.95, 1e-7);
    CHECK_NEAR(p.min_p, 0.05, 1e-7);
    CHECK_EQ_INT(p.penalty_last_n, 64);
    CHECK(p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f);
    CHECK_EQ_INT(p.n_logit_bias, 0);
    nx_sampler *a = make(&p), *b = make(&p);       /* random seeds, resolved and replayable */
    if (!a || !b) return;
    CHECK(nx_sampler_seed(a) != NX_SAMPLER_SEED_RANDOM);
    CHECK(nx_sampler_seed(a) != nx_sampler_seed(b));
    CHECK(!nx_sampler_is_greedy(a));
    nx_sampler_free(a);
    nx_sampler_free(b);
}

static void test_greedy_ties(void) {
    float L[10] = {0, 1, 2, 5, -3, 4.9f, 0, 5, NAN, -INFINITY};
    nx_sampler_params p = plain(10, 0.0f);
    p.top_k = 3;
    nx_sampler *s = make(&p);
    if (!s) return;
    CHECK(nx_sampler_is_greedy(s));
    nx_rng before = nx_sampler_rng_state(s);
    nx_error err = {0};
    int32_t tok = -1;
    for (int i = 0; i < 5; i++) {
        CHECK(nx_sampler_sample(s, L, &tok, &err) == NX_OK);
        CHECK_EQ_INT(tok, 3);                      /* 5.0 at 3 and 7: the lower id */
    }
    nx_sample_dist d = new_dist(10);
    CHECK(nx_sampler_dist(s, L, &d, &err) == NX_OK);
    CHECK_EQ_INT(d.n, 1);
    CHECK_EQ_INT(d.ids[0], 3);
    CHECK(d.p[0] == 1.0f);
    CHECK(nx_sampler_sample_dist(s, &d, &tok, &err) == NX_OK);
    CHECK_EQ_INT(tok, 3);
    CHECK(rng_equal(before, nx_sampler_rng_state(s)));   /* no randomness consumed */
    nx_sample_dist_free(&d);
    nx_sampler_free(s);
}

static void dist_of(nx_sampler_params p, const float *L, int n, nx_sample_dist *d) {
    nx_sampler *s = make(&p);
    if (!s) return;
    nx_error err = {0};
    nx_rng before = nx_sampler_rng_state(s);
    CHECK_MSG(nx_sampler_dist(s, L, d, &err) == NX_OK, "%s", err.msg);
    CHECK(rng_equal(before, nx_sampler_rng_state(s)));   /* dist consumes no randomness */
    nx_sampler_free(s);
}

static void test_top_k(void) {
    float L[5] = {1, 2, 3, 4, 5};
    nx_sample_dist d = new_dist(6);
    nx_sampler_params p = plain(5, 1.0f);
    p.top_k = 2;
    dist_of(p, L, 5, &d);
    CHECK_EQ_INT(d.n, 2);
    CHECK(d.sorted);
    CHECK_EQ_INT(d.ids[0], 4);
    CHECK_EQ_INT(d.ids[1], 3);
    CHECK_NEAR(d.p[0], 1.0 / (1.0 + exp(-1.0)), 1e-6);
    CHECK_NEAR(d.p[1], exp(-1.0) / (1.0 + exp(-1.0)), 1e-6);
    p.top_k = 5;                                   /* k >= n_vocab: off */
    dist_of(p, L, 5, &d);
    CHECK_EQ_INT(d.n, 5);
    float T[6] = {1, 3, 3, 0, 3, 2};               /* ties at the boundary: lower ids win */
    p = plain(6, 1.0f);
    p.top_k = 2;
    dist_of(p, T, 6, &d);
    CHECK_EQ_INT(d.n, 2);
    CHECK_EQ_INT(d.ids[0], 1);
    CHECK_EQ_INT(d.ids[1], 2);
    CHECK_NEAR(d.p[0], 0.5, 1e-6);
    nx_sample_dist_free(&d);

    /* k > 64 takes the band + selection path; check against the reference, ties included */
    enum { N = 3000 };
    static float R[N];
    fake_logits(R, N, 11, 2.0, 20, 12.0);
    for (int i = 0; i < N; i += 7) R[i] = R[i / 2];   /* many exact duplicates */
    const int ks[] = {1, 40, 64, 65, 100, 1000, 2999};
    for (int i = 0; i < (int)(sizeof ks / sizeof ks[0]); i++) {
        nx_sampler_params q = plain(N, 0.9f);
        q.top_k = ks[i];
        nx_sampler *s = make(&q);
        char what[32];
        snprintf(what, sizeof what, "top_k %d", ks[i]);
        if (s) check_against_ref(s, R, N, what);
        nx_sampler_free(s);
    }
}

/* ids permuted so that probability rank and id order differ */
static const int PERM[5] = {3, 0, 4, 1, 2};
static const double PROBS[5] = {0.5, 0.2, 0.15, 0.1, 0.05};

static void probs_logits(float *L) {
    for (int i = 0; i < 5; i++) L[PERM[i]] = (float)log(PROBS[i]);
}

/* d must hold exactly the first k ranks of PROBS, renormalised (after temperature t). */
static void check_prefix(const nx_sample_dist *d, int k, double t, const char *what) {
    CHECK_MSG(d->n == k, "%s: %d tokens, expected %d", what, d->n, k);
    double z = 0.0;
    for (int i = 0; i < k; i++) z += pow(PROBS[i], 1.0 / t);
    for (int i = 0; i < k && i < d->n; i++) {
        CHECK_MSG(nx_sample_dist_prob(d, PERM[i]) > 0.0f, "%s: rank %d missing", what, i);
        CHECK_NEAR(nx_sample_dist_prob(d, PERM[i]), pow(PROBS[i], 1.0 / t) / z, 1e-5);
    }
}

static void test_top_p(void) {
    float L[5];
    probs_logits(L);
    nx_sample_dist d = new_dist(5);
    for (int path = 0; path < 2; path++) {         /* 0: unsorted selection, 1: sorted top-k path */
        nx_sampler_params p = plain(5, 1.0f);
        p.top_k = path ? 4 : 0;
        p.top_p = 0.75f;                           /* 0.5 + 0.2 < 0.75 <= 0.85 */
        dist_of(p, L, 5, &d);
        check_prefix(&d, 3, 1.0, "top_p 0.75");
        p.top_p = 0.6f;
        dist_of(p, L, 5, &d);
        check_prefix(&d, 2, 1.0, "top_p 0.6");
        p.top_p = 0.0f;                            /* keeps the top token */
        dist_of(p, L, 5, &d);
        check_prefix(&d, 1, 1.0, "top_p 0");
        p.top_p = 0.3f;
        p.min_keep = 3;                            /* min_keep wins */
        dist_of(p, L, 5, &d);
        check_prefix(&d, 3, 1.0, "top_p 0.3 min_keep 3");
    }
    nx_sample_dist_free(&d);
}

/* Exact ties straddling the top-p / top-k boundary: lower ids first, on every path. */
static void test_ties_at_boundary(void) {
    enum { N = 3000 };
    static float L[N];
    for (int i = 0; i < N; i++) L[i] = i % 3 == 0 ? 1.0f : (i % 3 == 1 ? 0.0f : -1.0f);
    L[17] = 4.0f;
    struct { int k; float tp, mp; } cfg[] = {
        {0, 0.5f, 0.0f}, {0, 0.9f, 0.0f}, {500, 1.0f, 0.0f}, {1500, 0.7f, 0.0f}, {50, 0.3f, 0.0f},
        {0, 0.6f, 0.5f}, {2000, 1.0f, 0.3f},
    };
    for (int i = 0; i < (int)(sizeof cfg / sizeof cfg[0]); i++) {
        nx_sampler_params p = plain(N, 1.0f);
        p.top_k = cfg[i].k;
        p.top_p = cfg[i].tp;
        p.min_p = cfg[i].mp;
        nx_sampler *s = make(&p);
        char what[64];
        snprintf(what, sizeof what, "ties k %d p %.2f minp %.2f", cfg[i].k, (double)cfg[i].tp, (double)cfg[i].mp);
        if (s) check_against_ref(s, L, N, what);
        nx_sampler_free(s);
    }
}

static void test_min_p(void) {
    float L[5];
    probs_logits(L);
    nx_sample_dist d = new_dist(5);
    for (int path = 0; path < 2; path++) {
        nx_sampler_params p = plain(5, 1.0f);
        p.top_k = path ? 4 : 0;
        p.min_p = 0.25f;                           /* p >= 0.125: 0.5, 0.2, 0.15 */
        dist_of(p, L, 5, &d);
        check_prefix(&d, 3, 1.0, "min_p 0.25");
        p.min_p = 0.35f;                           /* p >= 0.175: 0.5, 0.2 */
        dist_of(p, L, 5, &d);
        check_prefix(&d, 2, 1.0, "min_p 0.35");
        p.min_p = 2.0f;                            /* above 1: the max alone */
        dist_of(p, L, 5, &d);
        check_prefix(&d, 1, 1.0, "min_p 2");
        p.min_p = 0.9f;
        p.min_keep = 3;
        dist_of(p, L, 5, &d);
        check_prefix(&d, 3, 1.0, "min_p 0.9 min_keep 3");
    }
    nx_sample_dist_free(&d);
}

static void test_temperature_and_order(void) {
    float L[5];
    probs_logits(L);
    nx_sample_dist d = new_dist(5);
    nx_sampler_params p = plain(5, 0.5f);          /* p ~ prob^2 over everything */
    dist_of(p, L, 5, &d);
    check_prefix(&d, 5, 0.5, "temp 0.5");
    p.temperature = 2.0f;                          /* top-p sees temperature-1 probabilities: */
    p.top_p = 0.65f;                               /* 0.5 + 0.2 >= 0.65 -> 2 tokens (at T=2 it would be 3) */
    dist_of(p, L, 5, &d);
    check_prefix(&d, 2, 2.0, "top_p 0.65 then temp 2");

    float Q[4] = {(float)log(0.4), (float)log(0.3), (float)log(0.2), (float)log(0.1)};
    p = plain(4, 1.0f);
    p.top_k = 2;                                   /* top-p after top-k: renormalised 0.571 >= 0.5 */
    p.top_p = 0.5f;
    dist_of(p, Q, 4, &d);
    CHECK_EQ_INT(d.n, 1);
    CHECK_EQ_INT(d.ids[0], 0);
    p = plain(4, 1.0f);                            /* top-p 0.8 keeps 3, then min-p 0.6 (>= 0.24) keeps 2 */
    p.top_p = 0.8f;
    p.min_p = 0.6f;
    dist_of(p, Q, 4, &d);
    CHECK_EQ_INT(d.n, 2);
    CHECK_NEAR(nx_sample_dist_prob(&d, 0), 0.4 / 0.7, 1e-6);
    nx_sample_dist_free(&d);
}

static void test_full_vocab_reference(void) {
    enum { N = 151936 };
    float *L = malloc(sizeof *L * N);
    fake_logits(L, N, 99, 2.0, 30, 14.0);
    L[5] = -INFINITY;
    L[77] = NAN;                                   /* NaN counts as -inf */
    struct { int k; float tp, mp, t; } cfg[] = {
        {40, 0.95f, 0.05f, 0.8f},                  /* llama.cpp defaults */
        {0, 0.95f, 0.0f, 0.8f},                    /* top-p alone: bands + mass selection */
        {0, 0.99f, 0.0f, 1.0f},
        {0, 1.0f, 0.05f, 0.7f},                    /* min-p alone */
        {0, 1.0f, 0.0f, 1.0f},                     /* nothing: every finite token */
        {200, 1.0f, 0.0f, 1.3f},                   /* top-k > 64 */
        {1000, 0.9f, 0.01f, 0.8f},
        {0, 0.9f, 0.001f, 1.0f},
    };
    for (int i = 0; i < (int)(sizeof cfg / sizeof cfg[0]); i++) {
        nx_sampler_params p = plain(N, cfg[i].t);
        p.top_k = cfg[i].k;
        p.top_p = cfg[i].tp;
        p.min_p = cfg[i].mp;
        nx_sampler *s = make(&p);
        char what[64];
        snprintf(what, sizeof what, "k %d p %.2f minp %.3f T %.1f", cfg[i].k, (double)cfg[i].tp,
                 (double)cfg[i].mp, (double)cfg[i].t);
        if (s) check_against_ref(s, L, N, what);
        nx_sampler_free(s);
    }
    /* a flat row (no peak): top-p needs tens of thousands of candidates */
    fake_logits(L, N, 5, 1.0, 0, 0.0);
    nx_sampler_params p = plain(N, 1.0f);
    p.top_p = 0.9f;
    nx_sampler *s = make(&p);
    if (s) check_against_ref(s, L, N, "flat top_p 0.9");
    nx_sampler_free(s);
    free(L);
}

static void test_penalties(void) {
    const float L[5] = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f};
    nx_sampler_params p = plain(5, 1.0f);
    p.penalty_last_n = 4;
    p.repeat_penalty = 1.5f;
    p.frequency_penalty = 0.1f;
    p.presence_penalty = 0.2f;
    nx_sampler *s = make(&p);
    if (!s) return;
    nx_error err = {0};
    const int32_t hist[5] = {3, 0, 1, 0, 2};       /* window of 4: 0 (x2), 1, 2; token 3 fell out */
    for (int i = 0; i < 5; i++) CHECK(nx_sampler_accept(s, hist[i], &err) == NX_OK);
    CHECK_EQ_INT(nx_sampler_history_len(s), 4);
    float out[5];
    CHECK(nx_sampler_apply_bias_penalties(s, L, out, &err) == NX_OK);
    CHECK_NEAR(out[0], 2.0 / 1.5 - (2 * 0.1 + 0.2), 1e-6);
    CHECK_NEAR(out[1], -1.0 * 1.5 - (0.1 + 0.2), 1e-6);   /* negative: multiplied */
    CHECK_NEAR(out[2], 0.5 / 1.5 - (0.1 + 0.2), 1e-6);
    CHECK(out[3] == 3.0f);
    CHECK(out[4] == 1.0f);
    nx_sample_dist d = new_dist(5);                /* the distribution uses the penalised logits */
    CHECK(nx_sampler_dist(s, L, &d, &err) == NX_OK);
    double z = 0.0;
    for (int i = 0; i < 5; i++) z += exp(out[i]);
    for (int i = 0; i < 5; i++) CHECK_NEAR(nx_sample_dist_prob(&d, i), exp(out[i]) / z, 1e-6);

    nx_sampler *c = NULL;                          /* a clone carries the history */
    CHECK(nx_sampler_clone(s, &c, &err) == NX_OK);
    float out2[5];
    CHECK(nx_sampler_apply_bias_penalties(c, L, out2, &err) == NX_OK);
    CHECK(memcmp(out, out2, sizeof out) == 0);
    nx_sampler_reset(s);                           /* reset clears it */
    CHECK_EQ_INT(nx_sampler_history_len(s), 0);
    CHECK(nx_sampler_apply_bias_penalties(s, L, out, &err) == NX_OK);
    CHECK(memcmp(out, L, sizeof out) == 0);
    nx_sampler_free(s);
    nx_sampler_free(c);

    p.penalty_last_n = -1;                         /* the whole history: token 3 counts too */
    s = make(&p);
    if (!s) return;
    for (int i = 0; i < 5; i++) CHECK(nx_sampler_accept(s, hist[i], &err) == NX_OK);
    for (int i = 0; i < 1000; i++) CHECK(nx_sampler_accept(s, 4, &err) == NX_OK);   /* grows */
    CHECK_EQ_INT(nx_sampler_history_len(s), 1005);
    CHECK(nx_sampler_apply_bias_penalties(s, L, out, &err) == NX_OK);
    CHECK_NEAR(out[3], 3.0 / 1.5 - 0.3, 1e-6);
    CHECK_NEAR(out[4], 1.0 / 1.5 - (1000 * 0.1 + 0.2), 1e-4);
    nx_sampler_free(s);

    p.penalty_last_n = 0;                          /* off */
    s = make(&p);
    if (!s) return;
    CHECK(nx_sampler_accept(s, 1, &err) == NX_OK);
    CHECK_EQ_INT(nx_sampler_history_len(s), 0);
    nx_sampler_free(s);
    nx_sample_dist_free(&d);
}

static void test_logit_bias(void) {
    enum { N = 8 };
    const float L[N] = {1, 4, 2, 0, 3, -1, 0.5f, 2.5f};
    nx_logit_bias bias[] = {{1, -INFINITY}, {0, 1.0f}, {0, 0.5f}, {6, -0.25f}};
    nx_sampler_params p = plain(N, 0.0f);
    p.logit_bias = bias;
    p.n_logit_bias = 4;
    nx_sampler *g = make(&p);
    if (!g) return;
    bias[0].bias = 0.0f;                           /* the chain keeps its own copy */
    nx_error err = {0};
    int32_t tok = -1;
    CHECK(nx_sampler_sample(g, L, &tok, &err) == NX_OK);
    CHECK_EQ_INT(tok, 4);                          /* argmax 1 banned: next best */
    float out[N];
    CHECK(nx_sampler_apply_bias_penalties(g, L, out, &err) == NX_OK);
    CHECK(out[1] == -INFINITY);
    CHECK(out[0] == 2.5f);                         /* repeated entries add */
    CHECK(out[6] == 0.25f);
    nx_sampler_free(g);

    bias[0].bias = -INFINITY;
    p.temperature = 1.5f;
    nx_sampler *s = make(&p);
    if (!s) return;
    int seen[N] = {0};
    for (int i = 0; i < 3000; i++) {
        CHECK(nx_sampler_sample(s, L, &tok, &err) == NX_OK);
        if (tok >= 0 && tok < N) seen[tok]++;
    }
    CHECK_EQ_INT(seen[1], 0);
    for (int t = 0; t < N; t++)
        if (t != 1) CHECK(seen[t] > 0);
    nx_sample_dist d = new_dist(N);
    CHECK(nx_sampler_dist(s, L, &d, &err) == NX_OK);
    CHECK(nx_sample_dist_prob(&d, 1) == 0.0f);
    CHECK_EQ_INT(d.n, N - 1);
    nx_sampler_free(s);

    /* +inf forces a token */
    nx_logit_bias force[] = {{5, INFINITY}};
    p.logit_bias = force;
    p.n_logit_bias = 1;
    s = make(&p);
    if (!s) return;
    for (int i = 0; i < 20; i++) {
        CHECK(nx_sampler_sample(s, L, &tok, &err) == NX_OK);
        CHECK_EQ_INT(tok, 5);
    }
    nx_sampler_free(s);

    /* every token banned: a clear error, no crash */
    nx_logit_bias all[N];
    for (int t = 0; t < N; t++) all[t] = (nx_logit_bias){t, -INFINITY};
    p.logit_bias = all;
    p.n_logit_bias = N;
    for (int greedy = 0; greedy < 2; greedy++) {
        p.temperature = greedy ? 0.0f : 1.0f;
        s = make(&p);
        if (!s) return;
        nx_error e2 = {0};
        CHECK(nx_sampler_sample(s, L, &tok, &e2) == NX_ERR_RANGE);
        CHECK(strstr(e2.msg, "no token left") != NULL);
        CHECK(nx_sampler_dist(s, L, &d, &e2) == NX_ERR_RANGE);
        nx_sampler_free(s);
    }
    nx_sample_dist_free(&d);
}

static void test_determinism_and_clone(void) {
    enum { N = 1000, STEPS = 300, FORK = 120 };
    float *L = malloc(sizeof *L * N);
    nx_sampler_params p = nx_sampler_default_params(N);
    p.seed = 42;
    p.top_k = 0;                                   /* wide distribution so that draws matter */
    p.repeat_penalty = 1.1f;
    p.presence_penalty = 0.1f;
    nx_sampler *a = make(&p), *b = make(&p), *fork = NULL, *copy = make(&p);
    p.seed = 43;
    nx_sampler *other = make(&p);
    if (!a || !b || !copy || !other) return;
    nx_error err = {0};
    int32_t seq_a[STEPS], seq_b[STEPS], seq_f[STEPS], seq_c[STEPS], seq_o[STEPS];
    int diff_other = 0;
    for (int i = 0; i < STEPS; i++) {
        fake_logits(L, N, 1000 + (uint64_t)i, 1.0, 5, 4.0);
        if (i == FORK) {
            CHECK(nx_sampler_clone(a, &fork, &err) == NX_OK);
            CHECK(nx_sampler_copy(copy, a, &err) == NX_OK);
        }
        CHECK(nx_sampler_sample(a, L, &seq_a[i], &err) == NX_OK);
        CHECK(nx_sampler_sample(b, L, &seq_b[i], &err) == NX_OK);
        CHECK(nx_sampler_sample(other, L, &seq_o[i], &err) == NX_OK);
        nx_sampler_accept(a, seq_a[i], &err);
        nx_sampler_accept(b, seq_b[i], &err);
        nx_sampler_accept(other, seq_o[i], &err);
        if (i >= FORK) {
            CHECK(nx_sampler_sample(fork, L, &seq_f[i], &err) == NX_OK);
            CHECK(nx_sampler_sample(copy, L, &seq_c[i], &err) == NX_OK);
            nx_sampler_accept(fork, seq_f[i], &err);
            nx_sampler_accept(copy, seq_c[i], &err);
        }
        diff_other += seq_o[i] != seq_a[i];
    }
    CHECK(memcmp(seq_a, seq_b, sizeof seq_a) == 0);                 /* same seed, same tokens */
    CHECK(memcmp(seq_a + FORK, seq_f + FORK, sizeof(int32_t) * (STEPS - FORK)) == 0);   /* clone */
    CHECK(memcmp(seq_a + FORK, seq_c + FORK, sizeof(int32_t) * (STEPS - FORK)) == 0);   /* copy */
    CHECK(diff_other > STEPS / 4);                                   /* another seed differs */
    nx_sampler_reset(b);                                             /* reset replays from the start */
    for (int i = 0; i < STEPS; i++) {
        fake_logits(L, N, 1000 + (uint64_t)i, 1.0, 5, 4.0);
        int32_t t = -1;
        CHECK(nx_sampler_sample(b, L, &t, &err) == NX_OK);
        nx_sampler_accept(b, t, &err);
        if (t != seq_a[i]) {
            CHECK_MSG(0, "reset replay differs at step %d", i);
            break;
        }
    }
    nx_sampler_free(a);
    nx_sampler_free(b);
    nx_sampler_free(fork);
    nx_sampler_free(copy);
    nx_sampler_free(other);
    free(L);
}

static void chi_square_sampling(int N_VOCAB, int top_k, float top_p, float min_p, float temp, uint64_t seed) {
    float *L = malloc(sizeof *L * (size_t)N_VOCAB);
    fake_logits(L, N_VOCAB, seed, 1.5, 6, 4.0);
    nx_sampler_params p = plain(N_VOCAB, temp);
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = (uint32_t)seed;
    nx_sampler *s = make(&p);
    if (!s) return;
    char what[64];
    snprintf(what, sizeof what, "chi2 k %d p %.2f minp %.2f", top_k, (double)top_p, (double)min_p);
    check_against_ref(s, L, N_VOCAB, what);        /* the dist is right ... */
    nx_sample_dist d = new_dist(N_VOCAB);
    nx_error err = {0};
    CHECK(nx_sampler_dist(s, L, &d, &err) == NX_OK);
    int *counts = calloc((size_t)N_VOCAB, sizeof *counts);
    const int TRIALS = 20000;
    for (int i = 0; i < TRIALS; i++) {              /* ... and sampling follows it */
        int32_t t = -1;
        CHECK(nx_sampler_sample(s, L, &t, &err) == NX_OK);
        if (t >= 0 && t < N_VOCAB) counts[t]++;
    }
    const double pv = chi_square_p(&d, counts, N_VOCAB, TRIALS);
    fprintf(stderr, "  %s: %d candidates, p-value %.3f\n", what, d.n, pv);
    CHECK_MSG(pv > 0.01, "%s: p-value %g", what, pv);
    free(counts);
    free(L);
    nx_sample_dist_free(&d);
    nx_sampler_free(s);
}

static void test_chi_square_sampling(void) {
    chi_square_sampling(200, 20, 0.9f, 0.0f, 0.8f, 7);
    chi_square_sampling(300, 0, 0.9f, 0.02f, 0.8f, 8);
    chi_square_sampling(100, 0, 1.0f, 0.0f, 0.8f, 9);
}

/* Run TRIALS speculative steps for a fixed target dist p: the draft comes from q (drawn with a
 * separate RNG) or is the fixed token `fixed` (one-hot q). The emitted tokens must follow p. */
static void spec_trial(nx_sampler *s, const nx_sample_dist *p, const nx_sample_dist *q, int32_t fixed,
                       int n_vocab, int trials, const char *what) {
    int *counts = calloc((size_t)n_vocab, sizeof *counts);
    nx_rng drafter;
    nx_rng_seed(&drafter, 2024);
    nx_error err = {0};
    int n_acc = 0;
    for (int i = 0; i < trials; i++) {
        int32_t d = fixed;
        if (q) {
            const double u = nx_rng_uniform(&drafter);
            double acc = 0.0;
            d = q->ids[q->n - 1];
            for (int j = 0; j < q->n; j++) {
                acc += q->p[j];
                if (u < acc) {
                    d = q->ids[j];
                    break;
                }
            }
        }
        bool ok = false;
        int32_t rep = -1;
        nx_status st = nx_sampler_spec_accept(s, p, d, q, &ok, &rep, &err);
        CHECK_MSG(st == NX_OK, "%s: %s", what, err.msg);
        if (st) break;
        const int32_t out = ok ? d : rep;
        n_acc += ok;
        if (out >= 0 && out < n_vocab) counts[out]++;
    }
    /* acceptance rate = sum_t min(p, q) */
    double expect_acc = 0.0;
    for (int i = 0; i < p->n; i++) {
        const double qq = q ? nx_sample_dist_prob(q, p->ids[i]) : (p->ids[i] == fixed ? 1.0 : 0.0);
        expect_acc += fmin(p->p[i], qq);
    }
    if (expect_acc > 1.0) expect_acc = 1.0;       /* float rounding of p's sum */
    const double rate = (double)n_acc / trials, sd = sqrt(expect_acc * (1 - expect_acc) / trials);
    CHECK_MSG(fabs(rate - expect_acc) <= 4 * sd + 1e-4, "%s: acceptance %.9g, expected %.9g", what, rate, expect_acc);
    const double pv = chi_square_p(p, counts, n_vocab, trials);
    fprintf(stderr, "  %s: acceptance %.3f (expected %.3f), p-value %.3f\n", what, rate, expect_acc, pv);
    CHECK_MSG(pv > 0.01, "%s: p-value %g", what, pv);
    free(counts);
}

static void test_spec_accept_onehot(void) {
    enum { N = 64 };
    float L[N];
    fake_logits(L, N, 31, 1.0, 4, 3.0);
    nx_sampler_params p = plain(N, 0.8f);
    p.top_k = 30;
    p.top_p = 0.95f;
    p.seed = 5;
    nx_sampler *s = make(&p);
    if (!s) return;
    nx_sample_dist d = new_dist(N);
    nx_error err = {0};
    CHECK(nx_sampler_dist(s, L, &d, &err) == NX_OK);
    int32_t outside = -1;                          /* a token with p = 0 */
    for (int t = 0; t < N && outside < 0; t++)
        if (nx_sample_dist_prob(&d, t) == 0.0f) outside = t;
    CHECK(outside >= 0);
    spec_trial(s, &d, NULL, d.ids[0], N, 20000, "one-hot q, draft = top token");
    spec_trial(s, &d, NULL, d.ids[d.n / 2], N, 20000, "one-hot q, draft = mid token");
    spec_trial(s, &d, NULL, outside, N, 20000, "one-hot q, draft outside p");
    nx_sample_dist_free(&d);
    nx_sampler_free(s);
}

static void test_spec_accept_full_q(void) {
    enum { N = 64 };
    float L[N], Ld[N];
    fake_logits(L, N, 41, 1.0, 4, 3.0);
    fake_logits(Ld, N, 42, 1.0, 4, 3.0);           /* the drafter disagrees somewhat */
    for (int i = 0; i < N; i++) Ld[i] = 0.6f * Ld[i] + 0.4f * L[i];
    nx_sampler_params p = plain(N, 0.8f);
    p.top_k = 25;
    p.seed = 6;
    nx_sampler *s = make(&p);
    nx_sampler_params pq = plain(N, 1.2f);
    pq.top_k = 40;                                 /* q covers tokens p excludes */
    nx_sampler *sq = make(&pq);
    if (!s || !sq) return;
    nx_sample_dist d = new_dist(N), q = new_dist(N);
    nx_error err = {0};
    CHECK(nx_sampler_dist(s, L, &d, &err) == NX_OK);
    CHECK(nx_sampler_dist(sq, Ld, &q, &err) == NX_OK);
    spec_trial(s, &d, &q, -1, N, 30000, "full q");
    CHECK(nx_sampler_dist(sq, L, &q, &err) == NX_OK);   /* q close to p: high acceptance */
    spec_trial(s, &d, &q, -1, N, 20000, "full q ~ p");
    spec_trial(s, &d, &d, -1, N, 5000, "q == p");
    /* q given but the draft has q(d) = 0: error */
    bool ok;
    int32_t rep;
    int32_t zero_q = -1;
    for (int t = 0; t < N && zero_q < 0; t++)
        if (nx_sample_dist_prob(&q, t) == 0.0f) zero_q = t;
    if (zero_q >= 0) CHECK(nx_sampler_spec_accept(s, &d, zero_q, &q, &ok, &rep, &err) == NX_ERR_INVALID_ARG);
    nx_sample_dist_free(&d);
    nx_sample_dist_free(&q);
    nx_sampler_free(s);
    nx_sampler_free(sq);
}

static void test_spec_accept_greedy(void) {
    enum { N = 16 };
    float L[N];
    fake_logits(L, N, 51, 1.0, 2, 3.0);
    nx_sampler_params p = plain(N, 0.0f);
    nx_sampler *s = make(&p);
    if (!s) return;
    nx_sample_dist d = new_dist(N), q = new_dist(N);
    nx_error err = {0};
    CHECK(nx_sampler_dist(s, L, &d, &err) == NX_OK);
    int32_t best = -1;
    CHECK(nx_sampler_sample(s, L, &best, &err) == NX_OK);
    const int32_t ids[2] = {best, (best + 1) % N};
    const float w[2] = {0.5f, 0.5f};
    CHECK(nx_sample_dist_set(&q, ids, w, 2, N, &err) == NX_OK);
    nx_rng before = nx_sampler_rng_state(s);
    for (int32_t t = 0; t < N; t++) {
        bool ok = false;
        int32_t rep = -1;
        CHECK(nx_sampler_spec_accept(s, &d, t, NULL, &ok, &rep, &err) == NX_OK);
        CHECK(ok == (t == best));
        CHECK_EQ_INT(rep, best);
        if (t == best || t == (best + 1) % N) {
            CHECK(nx_sampler_spec_accept(s, &d, t, &q, &ok, &rep, &err) == NX_OK);
            CHECK(ok == (t == best));
            CHECK_EQ_INT(rep, best);
        }
    }
    CHECK(rng_equal(before, nx_sampler_rng_state(s)));
    nx_sample_dist_free(&d);
    nx_sample_dist_free(&q);
    nx_sampler_free(s);
}

static void test_bad_input(void) {
    nx_error err = {0};
    nx_sampler *s = NULL;
    nx_sampler_params p = plain(10, 0.8f);
    CHECK(nx_sampler_create(NULL, &s, &err) == NX_ERR_INVALID_ARG);
    p.n_vocab = 0;
    CHECK(nx_sampler_create(&p, &s, &err) == NX_ERR_INVALID_ARG && s == NULL);
    CHECK(strstr(err.msg, "n_vocab") != NULL);
    p = plain(10, NAN);
    CHECK(nx_sampler_create(&p, &s, &err) == NX_ERR_INVALID_ARG);
    p = plain(10, 0.8f);
    p.penalty_last_n = -2;
    CHECK(nx_sampler_create(&p, &s, &err) == NX_ERR_INVALID_ARG);
    p = plain(10, 0.8f);
    p.repeat_penalty = 0.0f;
    CHECK(nx_sampler_create(&p, &s, &err) == NX_ERR_INVALID_ARG);
    p = plain(10, 0.8f);
    p.min_keep = -1;
    CHECK(nx_sampler_create(&p, &s, &err) == NX_ERR_INVALID_ARG);
    nx_logit_bias b[1] = {{10, 1.0f}};
    p = plain(10, 0.8f);
    p.logit_bias = b;
    p.n_logit_bias = 1;
    CHECK(nx_sampler_create(&p, &s, &err) == NX_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "token 10") != NULL);
    p.logit_bias = NULL;
    CHECK(nx_sampler_create(&p, &s, &err) == NX_ERR_INVALID_ARG);

    p = plain(10, 0.8f);
    s = make(&p);
    if (!s) return;
    CHECK(nx_sampler_accept(s, 10, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_sampler_accept(s, -1, &err) == NX_ERR_INVALID_ARG);
    float L[10] = {0};
    nx_sample_dist small = new_dist(5), d = new_dist(10);
    CHECK(nx_sampler_dist(s, L, &small, &err) == NX_ERR_INVALID_ARG);   /* too little room */
    CHECK(nx_sampler_dist(s, NULL, &d, &err) == NX_ERR_INVALID_ARG);
    int32_t tok;
    CHECK(nx_sampler_sample(s, NULL, &tok, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_sampler_dist(s, L, &d, &err) == NX_OK);                      /* all equal: uniform */
    CHECK_EQ_INT(d.n, 10);
    CHECK_NEAR(d.p[9], 0.1, 1e-6);
    bool ok;
    CHECK(nx_sampler_spec_accept(s, &d, 10, NULL, &ok, &tok, &err) == NX_ERR_INVALID_ARG);
    nx_sample_dist empty = {0};
    CHECK(nx_sampler_spec_accept(s, &empty, 1, NULL, &ok, &tok, &err) == NX_ERR_INVALID_ARG);
    CHECK(nx_sampler_sample_dist(s, &empty, &tok, &err) == NX_ERR_INVALID_ARG);
    int32_t ids[3] = {1, 2, 1};
    float w[3] = {1, 1, 1};
    CHECK(nx_sample_dist_set(&small, ids, w, 3, 10, &err) == NX_ERR_INVALID_ARG);   /* duplicate */
    ids[2] = 11;
    CHECK(nx_sample_dist_set(&small, ids, w, 3, 10, &err) == NX_ERR_INVALID_ARG);   /* range */
    ids[2] = 3;
    w[1] = -1;
    CHECK(nx_sample_dist_set(&small, ids, w, 3, 10, &err) == NX_ERR_INVALID_ARG);   /* negative */
    w[1] = 0;
    CHECK(nx_sample_dist_set(&small, ids, w, 3, 10, &err) == NX_OK);
    CHECK_EQ_INT(small.n, 2);                                                      /* zero dropped */
    CHECK(nx_sample_dist_init(&empty, 0, &err) == NX_ERR_INVALID_ARG);
    nx_sample_dist_free(&small);
    nx_sample_dist_free(&d);
    nx_sample_dist_free(NULL);
    nx_sampler_free(s);
    nx_sampler_free(NULL);
}

/* Thread CPU time: the machine is shared, wall time would measure the neighbours. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_perf_full_vocab(void) {
    enum { N = 151936, ROWS = 8 };
    float *L = malloc(sizeof *L * (size_t)N * ROWS);
    for (int r = 0; r < ROWS; r++) fake_logits(L + (size_t)r * N, N, 300 + (uint64_t)r, 2.0, 40, 16.0);
    struct { const char *name; int k; float tp, mp, t, rp; } cfg[] = {
        {"llama.cpp defaults (k40 p.95 minp.05 T.8)", 40, 0.95f, 0.05f, 0.8f, 1.0f},
        {"defaults + repeat 1.1 over 64", 40, 0.95f, 0.05f, 0.8f, 1.1f},
        {"top-p .95 only", 0, 0.95f, 0.0f, 0.8f, 1.0f},
        {"min-p .05 only", 0, 1.0f, 0.05f, 0.8f, 1.0f},
        {"top-k 1000 + top-p .95", 1000, 0.95f, 0.0f, 0.8f, 1.0f},
        {"no filter (all 151936)", 0, 1.0f, 0.0f, 0.8f, 1.0f},
        {"greedy", 40, 0.95f, 0.05f, 0.0f, 1.0f},
    };
    for (int c = 0; c < (int)(sizeof cfg / sizeof cfg[0]); c++) {
        nx_sampler_params p = nx_sampler_default_params(N);
        p.seed = 1;
        p.top_k = cfg[c].k;
        p.top_p = cfg[c].tp;
        p.min_p = cfg[c].mp;
        p.temperature = cfg[c].t;
        p.repeat_penalty = cfg[c].rp;
        nx_sampler *s = make(&p);
        if (!s) return;
        nx_error err = {0};
        for (int i = 0; i < 64; i++) nx_sampler_accept(s, (i * 7919) % N, &err);
        int32_t tok;
        nx_sampler_sample(s, L, &tok, &err);       /* warm-up: scratch allocation */
        const int iters = 40;
        const double t0 = now_s();
        for (int i = 0; i < iters; i++) {
            CHECK(nx_sampler_sample(s, L + (size_t)(i % ROWS) * N, &tok, &err) == NX_OK);
            nx_sampler_accept(s, tok, &err);
        }
        const double us = (now_s() - t0) / iters * 1e6;
        fprintf(stderr, "  %-44s %8.1f us/token (CPU time)\n", cfg[c].name, us);
        nx_sampler_free(s);
    }
    /* printed, never asserted: a slow VM phase under ASan once took 72 ms per token */
    free(L);
}

int main(void) {
    RUN(test_rng);
    RUN(test_defaults);
    RUN(test_greedy_ties);
    RUN(test_top_k);
    RUN(test_top_p);
    RUN(test_min_p);
    RUN(test_ties_at_boundary);
    RUN(test_temperature_and_order);
    RUN(test_full_vocab_reference);
    RUN(test_penalties);
    RUN(test_logit_bias);
    RUN(test_determinism_and_clone);
    RUN(test_chi_square_sampling);
    RUN(test_spec_accept_onehot);
    RUN(test_spec_accept_full_q);
    RUN(test_spec_accept_greedy);
    RUN(test_bad_input);
    RUN(test_perf_full_vocab);
    return test_summary();
}
