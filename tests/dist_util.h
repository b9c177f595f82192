/*
 * dist_util.h — the distribution-preservation harness shared by the speculative tests
 * (test_spec_engine.c, test_spec_draft.c; test_sample.c uses the gamma function): seeded sampled
 * requests through a speculative engine, counted into histograms of tokens 1, 2, 3 and the 3-token
 * prefix (hashed into DIST_NCAT buckets), and a two-sample chi-square between two arms (off / on).
 * Include after test.h (the checks use its CHECK macros).
 */
#ifndef NX_TEST_DIST_UTIL_H
#define NX_TEST_DIST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "spec/engine.h"
#include "nextn.h"

#define DIST_NCAT 4096

/* Histograms of one arm: c[0..2] tokens 1..3, c[3] the 3-token prefix; the engine's totals. */
typedef struct dist_counts {
    int c[4][DIST_NCAT];
    uint64_t drafted, accepted;
} dist_counts;

/* Regularised upper incomplete gamma Q(a, x) (series below a + 1, continued fraction above). */
static inline double dist_gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    const double gln = lgamma(a);
    if (x < a + 1) {
        double ap = a, sum = 1.0 / a, del = sum;
        for (int i = 0; i < 1000; i++) {
            ap += 1;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - gln);
    }
    double b = x + 1 - a, c = 1e300, d = 1.0 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - gln) * h;
}

/* Two-sample chi-square (2 x K contingency) over categories; categories with fewer than 10
 * samples in both arms together are pooled. Returns the p-value; *dof_out the degrees of freedom. */
static inline double dist_chi2_two_sample(const int *ka, const int *kb, int n_cat, int *dof_out) {
    long na = 0, nb = 0;
    for (int i = 0; i < n_cat; i++) { na += ka[i]; nb += kb[i]; }
    double stat = 0;
    int cells = 0;
    long pa = 0, pb = 0;
    for (int i = 0; i <= n_cat; i++) {
        long a, b;
        if (i < n_cat) {
            a = ka[i];
            b = kb[i];
            if (a + b < 10) { pa += a; pb += b; continue; }
        } else {
            a = pa;
            b = pb;
            if (a + b == 0) continue;
        }
        double t = (double)(a + b), ea = t * na / (double)(na + nb), eb = t * nb / (double)(na + nb);
        stat += (a - ea) * (a - ea) / ea + (b - eb) * (b - eb) / eb;
        cells++;
    }
    *dof_out = cells - 1;
    return cells > 1 ? dist_gamma_q((cells - 1) / 2.0, stat / 2.0) : 1.0;
}

/* Runs `runs` requests through en, n_seq (<= 8) at a time: the prompt, n_predict tokens, sampler sp
 * with seeds seed0, seed0 + 1, ...; counts the outputs of at least 3 tokens into out (cleared first)
 * and copies the engine's drafted / accepted totals. */
static inline void dist_count(nx_spec_engine *en, const nx_sampler_params *sp, const nx_token *prompt, int n_prompt,
                              int n_predict, int n_seq, uint32_t seed0, int runs, dist_counts *out) {
    memset(out, 0, sizeof *out);
    nx_error e = {0};
    for (int r0 = 0; en && r0 < runs; r0 += n_seq) {
        nx_seq_id ids[8];
        for (int i = 0; i < n_seq && i < 8; i++) {
            nx_sampler_params s = *sp;
            s.seed = seed0 + (uint32_t)(r0 + i);
            nx_spec_request rq = {.prompt = prompt, .n_prompt = n_prompt, .n_predict = n_predict, .sampler = &s};
            CHECK_MSG(nx_spec_engine_add(en, &rq, &ids[i], &e) == NX_OK, "%s", e.msg);
        }
        while (nx_spec_engine_n_active(en)) CHECK_MSG(nx_spec_engine_step(en, &e) == NX_OK, "%s", e.msg);
        for (int i = 0; i < n_seq && i < 8; i++) {
            int n = 0;
            const nx_token *o = nx_spec_engine_output(en, ids[i], &n);
            if (n >= 3) {
                out->c[0][o[0] % DIST_NCAT]++;
                out->c[1][o[1] % DIST_NCAT]++;
                out->c[2][o[2] % DIST_NCAT]++;
                out->c[3][(unsigned)(o[0] * 1000003u + o[1] * 7919u + o[2]) % DIST_NCAT]++;
            }
            nx_spec_engine_release(en, ids[i]);
        }
    }
    if (en) {
        out->drafted = nx_spec_engine_stats_total(en)->n_drafted;
        out->accepted = nx_spec_engine_stats_total(en)->n_accepted;
    }
}

/* Checks arm `on` against arm `off` (p > 0.01, at least 3 degrees of freedom: a real distribution,
 * not one token) over the first n_what histograms (3: tokens 1..3 only, when a flat distribution
 * leaves the 3-token prefix too sparse); prints each p-value and on's acceptance. */
static inline void dist_compare(const char *name, const dist_counts *off, const dist_counts *on, int n_what) {
    static const char *what[4] = {"token 1", "token 2", "token 3", "tokens 1-3"};
    for (int j = 0; j < n_what; j++) {
        int dof = 0;
        const double pv = dist_chi2_two_sample(off->c[j], on->c[j], DIST_NCAT, &dof);
        fprintf(stderr, "  %s %s: chi-square p = %.3f (%d degrees of freedom)\n", name, what[j], pv, dof);
        CHECK_MSG(pv > 0.01, "%s %s: p = %g", name, what[j], pv);
        CHECK(dof >= 3);
    }
    fprintf(stderr, "  %s: drafted %llu, accepted %llu\n", name, (unsigned long long)on->drafted,
            (unsigned long long)on->accepted);
}

#endif
