/*
 * policy.c — the draft-length policy and the speedup formulas (policy.h, speculative.md §5).
 *
 * Owns only caller-provided plain structs. Promises: the choice of k is a pure function of the
 * policy's estimates and the cost table (plus the probe counter in next_k); O(draft_max) per
 * round. Never allocates, prints or keeps global state.
 */
#include "spec/policy.h"

#include <math.h>
#include <string.h>

/* ===== Verify cost table ===== */

#define NX_SPEC_COST_CLIP 1.3    /* an observation counts as at most this times the estimate */
#define NX_SPEC_EXPLORE_BACKOFF 8  /* explorations that find nothing stretch up to this x explore_every */
#define NX_SPEC_STEADY_AGE 0.9   /* per round at another k: the weight of a k's steady measurements */
#define NX_SPEC_SPEED_ALPHA 0.3  /* EMA weight of the speed factor: follows an episode in a few rounds */
#define NX_SPEC_MEMORY_ALPHA 0.3 /* EMA weight of a finished sequence in the memory */
#define NX_SPEC_MEMORY_MIN_OBS 4 /* a sequence's own observations of a depth before it is folded */

/* est <- x for the first observation, then the plain mean while fewer than 1/alpha are in, then
 * the EMA alpha; *n counts them. */
static void mean_then_ema(double *est, uint32_t *n, double x, double alpha) {
    double w = 1.0 / (double)(*n + 1);
    if (w < alpha) w = alpha;
    *est = *n ? *est + w * (x - *est) : x;
    if (*n < UINT32_MAX) (*n)++;
}

static int clamp_rows(int n) {
    return n < 1 ? 1 : n > NX_SPEC_VERIFY_ROWS_MAX ? NX_SPEC_VERIFY_ROWS_MAX : n;
}

/* The prior's shape 1 + slope (n - 1), scaled so that it passes through (m, v). */
static double prior_through(const nx_spec_costs *c, int n, int m, double v) {
    double s = c->slope_prior;
    return v * (1.0 + s * (n - 1)) / (1.0 + s * (m - 1));
}

/* Rebuild cv[] from the measurements: interpolate, extrapolate, then make it non-decreasing.
 * O(rows^2) = ~1000 steps, once per measurement. */
static void costs_derive(nx_spec_costs *c) {
    const int N = NX_SPEC_VERIFY_ROWS_MAX;
    for (int n = 1; n <= N; n++) {
        if (c->n_obs[n]) { c->cv[n] = c->meas[n]; continue; }
        int lo = 0, lo2 = 0, hi = 0;
        for (int m = n - 1; m >= 1; m--)
            if (c->n_obs[m]) { if (!lo) lo = m; else { lo2 = m; break; } }
        for (int m = n + 1; m <= N; m++)
            if (c->n_obs[m]) { hi = m; break; }
        double v;
        if (lo && hi)
            v = c->meas[lo] + (c->meas[hi] - c->meas[lo]) * (double)(n - lo) / (double)(hi - lo);
        else if (lo && lo2) {
            double slope = (c->meas[lo] - c->meas[lo2]) / (double)(lo - lo2);
            v = c->meas[lo] + (slope > 0 ? slope : 0) * (double)(n - lo);
        } else if (lo)
            v = prior_through(c, n, lo, c->meas[lo]);
        else if (hi)
            v = prior_through(c, n, hi, c->meas[hi]);
        else
            v = 1.0 + c->slope_prior * (n - 1);
        c->cv[n] = v;
    }
    for (int n = 2; n <= N; n++)
        if (c->cv[n] < c->cv[n - 1]) c->cv[n] = c->cv[n - 1];
    for (int n = 1; n <= N; n++) c->cv[n] *= c->speed;
    c->cv[0] = c->cv[1];
}

void nx_spec_costs_init(nx_spec_costs *c) {
    memset(c, 0, sizeof *c);
    c->speed = 1.0;
    c->alpha = 0.1;
    c->slope_prior = 0.2;
    costs_derive(c);
}

static nx_status check_cost(int n, double cost, nx_error *err) {
    if (n < 1 || n > NX_SPEC_VERIFY_ROWS_MAX)
        return nx_fail(err, NX_ERR_INVALID_ARG, "verify cost: %d rows (1..%d)", n, NX_SPEC_VERIFY_ROWS_MAX);
    if (!isfinite(cost) || cost <= 0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "verify cost of %d rows: %g is not a positive number", n, cost);
    return NX_OK;
}

nx_status nx_spec_costs_set(nx_spec_costs *c, int n_rows, double cost, nx_error *err) {
    nx_status st = check_cost(n_rows, cost, err);
    if (st) return st;
    c->meas[n_rows] = cost;
    c->n_obs[n_rows] = 1;
    costs_derive(c);
    return NX_OK;
}

nx_status nx_spec_costs_observe(nx_spec_costs *c, int n_rows, double cost, nx_error *err) {
    nx_status st = check_cost(n_rows, cost, err);
    if (st) return st;
    uint32_t k = c->n_obs[n_rows];
    /* Timing noise is one-sided (interference only slows a step): an observation counts as at most
     * NX_SPEC_COST_CLIP times what the table predicts (nothing to clip against before the first
     * measurement), so a slow outlier moves the estimates by a bounded step. */
    const double pred = nx_spec_costs_measured_rows(c) ? c->cv[n_rows] : 0.0;
    if (pred > 0 && cost > pred * NX_SPEC_COST_CLIP) cost = pred * NX_SPEC_COST_CLIP;
    /* The machine's speed moves in episodes (a VM at 22, 28 or 40 ms for the same verify for
     * dozens of rounds), so cost = speed x shape(n): a row count measured now is compared with the
     * others at today's speed. One log residual r = log(cost / prediction) moves the speed by 0.3 r
     * and the row's shape by the same estimator for every row count (the mean while few are in,
     * then the EMA alpha), so one measured 3 times and one measured 30 times are comparable. The
     * earlier linear updates (speed from cost / shape, then the shape from cost / the new speed)
     * let the pair drift apart (speed x34 over 20000 noisy rounds) and the rarely measured rows
     * lagged the drift (2 rows read as 0.905x one row, not 1.037x: test_spec_policy), and in a
     * policy simulator a server's 6000-token requests after its first scored 0.91 of the best
     * fixed k instead of 0.95. */
    const double r = k ? log(cost / (c->speed * c->meas[n_rows])) : 0.0;   /* a first one: no residual */
    double shape = k ? log(c->meas[n_rows]) : 0.0;
    mean_then_ema(&shape, &c->n_obs[n_rows], log(cost / c->speed), c->alpha);
    c->meas[n_rows] = exp(shape);
    c->speed *= exp(NX_SPEC_SPEED_ALPHA * r);
    costs_derive(c);
    return NX_OK;
}

double nx_spec_costs_verify(const nx_spec_costs *c, int n_rows) {
    return c->cv[clamp_rows(n_rows)];
}

int nx_spec_costs_measured_rows(const nx_spec_costs *c) {
    for (int n = NX_SPEC_VERIFY_ROWS_MAX; n >= 1; n--)
        if (c->n_obs[n]) return n;
    return 0;
}

/* ===== Formulas ===== */

double nx_spec_expected_tokens(const double *a, int k) {
    double e = 1.0, prod = 1.0;
    for (int i = 0; i < k; i++) {
        prod *= a[i];
        e += prod;
    }
    return e;
}

double nx_spec_predicted_speedup(const double *a, int k, double c_d, const nx_spec_costs *c) {
    if (k <= 0) return 1.0;
    double cost = (double)k * c_d + nx_spec_costs_verify(c, k + 1);
    return cost > 0 ? nx_spec_expected_tokens(a, k) * nx_spec_costs_verify(c, 1) / cost : 0.0;
}

double nx_spec_predicted_speedup_uniform(double alpha, int k, double c_d, const nx_spec_costs *c) {
    double a[NX_SPEC_DRAFT_CAP];
    if (k > NX_SPEC_DRAFT_CAP) k = NX_SPEC_DRAFT_CAP;
    for (int i = 0; i < k; i++) a[i] = alpha;
    return nx_spec_predicted_speedup(a, k, c_d, c);
}

/* The k in [k_lo, k_hi] maximising e[k] c_v(1) / (k c_d + c_v(k + 1)), 0 when none beats 1. */
static int best_k_of(const double *e, int k_lo, int k_hi, double c_d, const nx_spec_costs *c, double *speedup) {
    const double c1 = nx_spec_costs_verify(c, 1);
    double best = 1.0;
    int best_k = 0;
    for (int k = k_lo; k <= k_hi; k++) {
        double cost = (double)k * c_d + nx_spec_costs_verify(c, k + 1);
        double s = cost > 0 ? e[k] * c1 / cost : 0.0;
        if (s > best * (1.0 + 1e-9)) {                /* strictly better: ties keep the smaller k */
            best = s;
            best_k = k;
        }
    }
    if (speedup) *speedup = best;
    return best_k;
}

int nx_spec_best_k(const double *a, int k_lo, int k_hi, double c_d, const nx_spec_costs *c, double *speedup) {
    if (k_lo < 1) k_lo = 1;
    if (k_hi > NX_SPEC_DRAFT_CAP) k_hi = NX_SPEC_DRAFT_CAP;
    double e[NX_SPEC_DRAFT_CAP + 1];
    for (int k = 1; k <= k_hi; k++) e[k] = nx_spec_expected_tokens(a, k);
    return best_k_of(e, k_lo, k_hi, c_d, c, speedup);
}

double nx_spec_predicted_speedup_stats(const nx_spec_stats *st, double c_d, const nx_spec_costs *c) {
    if (!st || !st->n_rounds) return 1.0;
    double cost = 0.0;
    for (int k = 0; k <= NX_SPEC_DRAFT_CAP; k++)
        if (st->rounds_by_k[k])
            cost += (double)st->rounds_by_k[k] * ((double)k * c_d + nx_spec_costs_verify(c, k + 1));
    return cost > 0 ? (double)st->n_committed * nx_spec_costs_verify(c, 1) / cost : 0.0;
}

/* ===== Policy ===== */

nx_spec_policy_params nx_spec_policy_default_params(void) {
    return (nx_spec_policy_params){
        .draft_max = 8, .draft_min = 0, .adaptive = true, .p_min = 0.0f, .ema_alpha = 0.1,
        .accept_prior = 0.8, .draft_cost_prior = 0.05, .probe_every = 8, .shadow_every = 4, .guard = true,
        .guard_margin = 0.03, .guard_probe_every = 32, .guard_confirm = 16, .plain_every = 64, .explore_every = 16,
        .explore_len = 4, .steady_prior = 2.0, .memory_weight = 3, .replay = true,
    };
}

nx_status nx_spec_policy_init(nx_spec_policy *pol, const nx_spec_policy_params *params, nx_error *err) {
    if (!pol) return nx_fail(err, NX_ERR_INVALID_ARG, "draft policy: no policy");
    nx_spec_policy_params p = params ? *params : nx_spec_policy_default_params();
    if (p.draft_max < 0 || p.draft_max > NX_SPEC_DRAFT_CAP)
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft policy: draft_max %d not in 0..%d", p.draft_max, NX_SPEC_DRAFT_CAP);
    if (p.draft_min < 0 || p.draft_min > p.draft_max)
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft policy: draft_min %d not in 0..draft_max (%d)", p.draft_min, p.draft_max);
    if (!(p.p_min >= 0.0f && p.p_min <= 1.0f))
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft policy: p_min %g not in [0, 1]", (double)p.p_min);
    if (!(p.ema_alpha > 0.0 && p.ema_alpha <= 1.0))
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft policy: ema_alpha %g not in (0, 1]", p.ema_alpha);
    if (!(p.accept_prior >= 0.0 && p.accept_prior <= 1.0))
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft policy: accept_prior %g not in [0, 1]", p.accept_prior);
    if (!(p.draft_cost_prior >= 0.0) || !isfinite(p.draft_cost_prior))
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft policy: draft_cost_prior %g < 0", p.draft_cost_prior);
    if (p.probe_every < 1)
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft policy: probe_every %d < 1", p.probe_every);
    if (p.shadow_every < 0 || p.guard_probe_every < 1 || p.guard_confirm < 0 || p.plain_every < 1 || !(p.guard_margin >= 0.0) ||
        p.explore_every < 0 || p.explore_len < 1 || !(p.steady_prior > 0.0) || p.memory_weight < 1)
        return nx_fail(err, NX_ERR_INVALID_ARG, "draft policy: shadow_every %d (>= 0), guard_probe_every %d, plain_every "
                       "%d (>= 1), guard_margin %g (>= 0), explore_len %d (>= 1), steady_prior %g (> 0), "
                       "memory_weight %d (>= 1)", p.shadow_every, p.guard_probe_every, p.plain_every, p.guard_margin,
                       p.explore_len, p.steady_prior, p.memory_weight);
    memset(pol, 0, sizeof *pol);
    pol->p = p;
    return NX_OK;
}

void nx_spec_policy_reset(nx_spec_policy *pol) {
    nx_spec_policy_params p = pol->p;
    memset(pol, 0, sizeof *pol);
    pol->p = p;
}

void nx_spec_policy_seed(nx_spec_policy *pol, const nx_spec_policy_memory *m) {
    if (!pol || !m) return;
    for (int i = 0; i < NX_SPEC_DRAFT_CAP; i++) {
        if (!m->n_a[i] || pol->n_a[i]) continue;
        pol->a[i] = m->a[i];
        pol->n_a[i] = pol->n_seed[i] = (uint32_t)pol->p.memory_weight;   /* as that many observations */
    }
    if (m->n_cd && !pol->n_cd) {
        pol->c_d = m->c_d;
        pol->n_cd = pol->n_seed_cd = 1;
    }
}

void nx_spec_memory_fold(nx_spec_policy_memory *m, const nx_spec_policy *pol) {
    if (!m || !pol) return;
    for (int i = 0; i < NX_SPEC_DRAFT_CAP; i++)
        if (pol->n_a[i] >= pol->n_seed[i] + NX_SPEC_MEMORY_MIN_OBS) mean_then_ema(&m->a[i], &m->n_a[i], pol->a[i], NX_SPEC_MEMORY_ALPHA);
    if (pol->n_cd > pol->n_seed_cd) mean_then_ema(&m->c_d, &m->n_cd, pol->c_d, NX_SPEC_MEMORY_ALPHA);
}

/* Estimates of a_1..a_k into a[0..k-1]: measured depths their EMA, unmeasured ones the depth below. */
static void accept_estimates(const nx_spec_policy *pol, double *a, int k) {
    double prev = pol->p.accept_prior;
    for (int i = 0; i < k; i++) {
        a[i] = pol->n_a[i] ? pol->a[i] : prev;
        prev = a[i];
    }
}

double nx_spec_policy_accept_est(const nx_spec_policy *pol, int depth) {
    double a[NX_SPEC_DRAFT_CAP];
    if (depth < 1) depth = 1;
    if (depth > NX_SPEC_DRAFT_CAP) depth = NX_SPEC_DRAFT_CAP;
    accept_estimates(pol, a, depth);
    return a[depth - 1];
}

double nx_spec_policy_draft_cost(const nx_spec_policy *pol, const nx_spec_costs *c) {
    return pol->n_cd ? pol->c_d : pol->p.draft_cost_prior * nx_spec_costs_verify(c, 1);
}

/* ===== Replay ===== */

#define NX_SPEC_REPLAY_MIN 16     /* recorded positions before the replay stands in for the model's E(k) */
#define NX_SPEC_REPLAY_W0 2.0     /* pseudo-observations of "no decay" in w_d (a decay must be shown) */
#define NX_SPEC_REPLAY_PRIOR 30.0 /* pseudo-rounds of the replay against steady rounds measured at k */

static void hist_push(nx_spec_policy *pol, int label) {
    pol->hist[pol->n_hist % NX_SPEC_REPLAY_LEN] = (int8_t)label;
    if (pol->n_hist < UINT32_MAX) pol->n_hist++;
}

/* P(the depth-d draft at a position is accepted | its label), under: accepted = the position is
 * easy and the drafter is good enough at that depth (w_d <= 1, non-increasing: how much worse a
 * deeper draft is). A position accepted at depth o is taken again at any depth <= o, and deeper
 * with w_d / w_o; one rejected at o is rejected again at any depth >= o, and at a shallower one
 * with the chance that it was easy after all (u = a_1); an unlabelled one (a bonus token: the
 * target's, after all drafts passed) with b w_d, b = how often shadow drafts of bonus tokens pass.
 * On the bundled model's text hardness is a property of the position (accepted at depth 1 ->
 * accepted at depths 2..8 in 1239 of 1245 cases), so w stays near 1 there. */
static double replay_p(int label, int d, double u, double b, const double *w) {
    if (label == 0) return b * w[d];
    const int o = label > 0 ? label : -label;
    if (label > 0) return d <= o ? 1.0 : w[o] > 0 ? w[d] / w[o] : 0.0;
    if (d >= o) return 0.0;
    const double q = 1.0 - u * w[o];
    return q > 0 ? fmax(0.0, u * (w[d] - w[o]) / q) : 0.0;
}

/* The replay's view of the drafter, built once per decision for every depth a label can carry
 * (labels may be deeper than the k being replayed): w_d = a_d / a_1 (per-depth rates also carry
 * the text's hardness at that slot, so this errs towards decay), shrunk towards 1 by W0
 * pseudo-observations, made non-increasing; u = a_1; b = the shadow drafts' pass rate. */
typedef struct replay_model {
    double w[NX_SPEC_DRAFT_CAP + 1];
    double u, b;
} replay_model;

static void replay_model_of(const nx_spec_policy *pol, replay_model *rm) {
    double a[NX_SPEC_DRAFT_CAP];
    accept_estimates(pol, a, NX_SPEC_DRAFT_CAP);
    rm->w[0] = rm->w[1] = 1.0;
    for (int d = 2; d <= NX_SPEC_DRAFT_CAP; d++) {
        const double r = a[0] > 0 ? fmin(1.0, a[d - 1] / a[0]) : 0.0, m = (double)pol->n_a[d - 1];
        rm->w[d] = fmin(rm->w[d - 1], (m * r + NX_SPEC_REPLAY_W0) / (m + NX_SPEC_REPLAY_W0));
    }
    rm->u = a[0];
    rm->b = pol->n_bonus ? pol->bonus : a[0];
}

/* Tokens a round at fixed k would commit on the recorded positions (oldest first, rounds start
 * where the previous one ended: this is what sees the text's alignment with k), in expectation
 * over the labels' probabilities. Needs at least one recorded position. O(LEN k). */
static double replay_tokens(const nx_spec_policy *pol, const replay_model *rm, int k) {
    enum { L = NX_SPEC_REPLAY_LEN };
    const int n = pol->n_hist < L ? (int)pol->n_hist : L;
    const int first = pol->n_hist < L ? 0 : (int)(pol->n_hist % L);
    /* T[i], R[i]: expected tokens and rounds from position i to past the end */
    double T[L + NX_SPEC_DRAFT_CAP + 2], R[L + NX_SPEC_DRAFT_CAP + 2];
    for (int i = n; i <= n + k + 1; i++) T[i] = R[i] = 0.0;
    for (int i = n - 1; i >= 0; i--) {
        double reach = 1.0, t = 0.0, r = 1.0;
        for (int j = 0; j < k; j++) {
            const int lab = i + j < n ? pol->hist[(first + i + j) % L] : 0;
            const double p = replay_p(lab, j + 1, rm->u, rm->b, rm->w), stop = reach * (1.0 - p);
            t += stop * ((double)(j + 1) + T[i + j + 1]);
            r += stop * R[i + j + 1];
            reach *= p;
        }
        T[i] = t + reach * ((double)(k + 1) + T[i + k + 1]);
        R[i] = r + reach * R[i + k + 1];
    }
    return T[0] / R[0];   /* R[0] >= 1: a round starts at position 0 */
}

int nx_spec_policy_best_k(const nx_spec_policy *pol, const nx_spec_costs *c, double *speedup) {
    if (!pol->p.adaptive || pol->p.draft_max == 0) {
        if (speedup) {
            double a[NX_SPEC_DRAFT_CAP];
            accept_estimates(pol, a, pol->p.draft_max);
            *speedup = nx_spec_predicted_speedup(a, pol->p.draft_max, nx_spec_policy_draft_cost(pol, c), c);
        }
        return pol->p.draft_max;
    }
    double a[NX_SPEC_DRAFT_CAP];
    accept_estimates(pol, a, pol->p.draft_max);
    /* k + 1 verify rows at most two past the largest measured batch: a cost extrapolated from the
     * prior's slope once sent k from 3 to 8 where 9 rows cost 2.6x one row (AVX2), and the table
     * then held k there. Two rows a round still reach a flat table's deep k quickly (AVX-512: one
     * row a round walked up to 8 and stayed near it, below k = 4-5). */
    int k_hi = pol->p.draft_max;
    const int R = nx_spec_costs_measured_rows(c);
    if (R > 0 && k_hi > R + 1) k_hi = R + 1 < pol->p.draft_min ? pol->p.draft_min : R + 1;
    /* E(k): the model's, blended with what steady rounds at k committed (policy.h) */
    const bool replay = pol->p.replay && pol->n_hist >= NX_SPEC_REPLAY_MIN;
    replay_model rm;
    if (replay) replay_model_of(pol, &rm);
    const double cap = 1.0 / pol->p.ema_alpha, m = replay ? NX_SPEC_REPLAY_PRIOR : pol->p.steady_prior;
    double e[NX_SPEC_DRAFT_CAP + 1];
    for (int k = 1; k <= k_hi; k++) {
        const double n = (pol->n_tpr[k] < cap ? (double)pol->n_tpr[k] : cap) * pol->tpr_w[k];
        e[k] = (n * pol->tpr[k] + m * (replay ? replay_tokens(pol, &rm, k) : nx_spec_expected_tokens(a, k))) / (n + m);
    }
    return best_k_of(e, pol->p.draft_min < 1 ? 1 : pol->p.draft_min, k_hi, nx_spec_policy_draft_cost(pol, c), c, speedup);
}

/* Rounds between shadow drafts at k* > 0: shadow_every, stretched so that the extra draft step
 * costs at most ~1% of the rounds in between (round cost ~ c_v(1) or more). */
static int shadow_period(const nx_spec_policy *pol, const nx_spec_costs *c) {
    if (pol->p.shadow_every <= 0) return 0;
    const double rel = nx_spec_policy_draft_cost(pol, c) / nx_spec_costs_verify(c, 1);
    int every = pol->p.shadow_every;
    if (rel > 0 && 100.0 * rel > every) every = (int)(100.0 * rel);
    return every > 1000 ? 1000 : every;
}

nx_spec_plan nx_spec_policy_plan(nx_spec_policy *pol, const nx_spec_costs *c) {
    nx_spec_plan plan = {nx_spec_policy_best_k(pol, c, NULL), false};
    pol->retry = false;
    if (!pol->p.adaptive || pol->p.draft_max == 0) {
        pol->idle_rounds = 0;
        return plan;
    }
    if (pol->p.guard && pol->off) {
        if (plan.k > 0 && ++pol->since_retry >= pol->p.guard_probe_every) {
            pol->since_retry = 0;
            pol->retry = true;         /* the model's k once more, measured */
            return plan;
        }
        plan.k = 0;
    } else if (pol->p.guard && plan.k > 0 && ++pol->since_plain >= pol->p.plain_every) {
        pol->since_plain = 0;          /* plain speed, for the guard's comparison */
        return (nx_spec_plan){0, false};
    }
    if (plan.k == 0) {
        if (++pol->idle_rounds >= pol->p.probe_every) {
            pol->idle_rounds = 0;
            pol->n_probes++;
            plan.shadow = true;        /* d_1 against the token this plain round samples */
        }
        return plan;
    }
    pol->idle_rounds = 0;
    if (pol->explore_left > 0) {       /* the rest of an exploration run */
        if (--pol->explore_left == 0) pol->explore_judge = true;
        plan.k = pol->explore_k;
        return plan;
    }
    if (pol->explore_judge) {          /* the first plan after a run: did it move k*? */
        pol->explore_judge = false;
        const int lim = NX_SPEC_EXPLORE_BACKOFF * pol->p.explore_every;
        pol->explore_period = plan.k >= pol->explore_k ? pol->p.explore_every
                            : pol->explore_period * 2 > lim ? lim : pol->explore_period * 2;
    }
    if (pol->explore_period < pol->p.explore_every) pol->explore_period = pol->p.explore_every;
    if (pol->p.explore_every && plan.k < pol->p.draft_max && ++pol->since_explore >= pol->explore_period) {
        pol->since_explore = 0;
        /* verified: measures c_v(k + 2) and depth k + 1 for real. Every other run goes two
         * deeper (within one row of the measured costs): on text with period p, k* + 1 can be
         * no better than k* while p - 1 is (k* = 2, p = 5). */
        const int R = nx_spec_costs_measured_rows(c);
        plan.k += (pol->n_explore++ & 1) && plan.k + 2 <= pol->p.draft_max && plan.k + 2 <= R ? 2 : 1;
        pol->explore_k = plan.k;
        pol->explore_left = pol->p.explore_len - 1;
        if (pol->explore_left == 0) pol->explore_judge = true;
        return plan;
    }
    const int every = shadow_period(pol, c);
    if (every && plan.k < pol->p.draft_max && ++pol->since_shadow >= every) {
        pol->since_shadow = 0;
        plan.shadow = true;
    }
    return plan;
}

int nx_spec_policy_next_k(nx_spec_policy *pol, const nx_spec_costs *c) {
    return nx_spec_policy_plan(pol, c).k;
}

void nx_spec_policy_observe_shadow(nx_spec_policy *pol, int depth, bool accepted) {
    if (depth < 1 || depth > NX_SPEC_DRAFT_CAP) return;
    double est[NX_SPEC_DRAFT_CAP];
    accept_estimates(pol, est, depth);
    const int i = depth - 1;
    double w = 1.0 / (double)(pol->n_a[i] + 2);
    if (w < pol->p.ema_alpha) w = pol->p.ema_alpha;
    pol->a[i] = est[i] + w * ((accepted ? 1.0 : 0.0) - est[i]);
    if (pol->n_a[i] < UINT32_MAX) pol->n_a[i]++;
    mean_then_ema(&pol->bonus, &pol->n_bonus, accepted ? 1.0 : 0.0, pol->p.ema_alpha);
    if (pol->n_hist) {                 /* the round's last token was the one shadowed */
        int8_t *h = &pol->hist[(pol->n_hist - 1) % NX_SPEC_REPLAY_LEN];
        if (*h == 0) *h = (int8_t)(accepted ? depth : -depth);
    }
    pol->n_shadow++;
    pol->n_shadow_ok += accepted;
}

int nx_spec_policy_observe_round(nx_spec_policy *pol, int k, int committed, double seconds) {
    if (committed <= 0 || !isfinite(seconds) || seconds <= 0) return 0;
    const double x = seconds / committed;
    double *t = k > 0 ? &pol->t_spec : &pol->t_plain;
    uint32_t *n = k > 0 ? &pol->n_spec : &pol->n_plain;
    double w = 1.0 / (double)(*n + 1);
    if (w < pol->p.ema_alpha) w = pol->p.ema_alpha;
    if (pol->retry && k > 0) w = 1.0;   /* a re-try measures speculation as it is now */
    *t = *n ? *t + w * (x - *t) : x;
    if (*n < UINT32_MAX) (*n)++;
    if (!pol->p.guard || !pol->p.adaptive) return 0;
    const double m = 1.0 + pol->p.guard_margin;
    if (!pol->off && pol->n_spec >= 8 && pol->n_plain >= 2 && pol->t_spec > pol->t_plain * m) {
        if (k > 0 && ++pol->off_votes < pol->p.guard_confirm) return 0;
        if (k == 0 && pol->off_votes < pol->p.guard_confirm) return 0;
        pol->off = true;
        pol->off_votes = 0;
        pol->since_retry = 0;
        pol->n_switches++;
        return 1;
    }
    if (!pol->off && k > 0) pol->off_votes = 0;   /* found no slower: the count starts again */
    if (pol->off && pol->retry && pol->t_spec * m < pol->t_plain) {
        pol->off = false;
        pol->n_switches++;
        return -1;
    }
    return 0;
}

void nx_spec_policy_observe(nx_spec_policy *pol, int k_drafted, int n_accepted) {
    const int prev_k = pol->last_k;
    pol->last_k = k_drafted < 0 ? 0 : k_drafted;
    if (k_drafted <= 0) {
        hist_push(pol, 0);             /* a plain round's token: not drafted */
        return;
    }
    if (k_drafted > NX_SPEC_DRAFT_CAP) k_drafted = NX_SPEC_DRAFT_CAP;
    if (n_accepted < 0) n_accepted = 0;
    if (n_accepted > k_drafted) n_accepted = k_drafted;
    for (int d = 1; d <= n_accepted; d++) hist_push(pol, d);
    hist_push(pol, n_accepted < k_drafted ? -(n_accepted + 1) : 0);   /* the target's token */
    for (int k = 1; k <= NX_SPEC_DRAFT_CAP; k++)   /* the other k's measurements age */
        if (k != k_drafted) pol->tpr_w[k] *= NX_SPEC_STEADY_AGE;
    if (prev_k == k_drafted) {         /* a steady round (policy.h) */
        pol->tpr_w[k_drafted] = 1.0;
        mean_then_ema(&pol->tpr[k_drafted], &pol->n_tpr[k_drafted], (double)(n_accepted + 1), pol->p.ema_alpha);
    }
    int judged = n_accepted < k_drafted ? n_accepted + 1 : k_drafted;
    double est[NX_SPEC_DRAFT_CAP];
    accept_estimates(pol, est, judged);               /* before any update: carries use old values */
    for (int i = 0; i < judged; i++) {
        double x = i < n_accepted ? 1.0 : 0.0;
        /* the estimate counts as one pseudo-observation, then plain mean, then the EMA */
        double w = 1.0 / (double)(pol->n_a[i] + 2);
        if (w < pol->p.ema_alpha) w = pol->p.ema_alpha;
        pol->a[i] = est[i] + w * (x - est[i]);
        if (pol->n_a[i] < UINT32_MAX) pol->n_a[i]++;
    }
}

void nx_spec_policy_observe_draft_cost(nx_spec_policy *pol, double cost, int steps) {
    if (steps <= 0 || !isfinite(cost) || cost < 0) return;
    mean_then_ema(&pol->c_d, &pol->n_cd, cost / (double)steps, pol->p.ema_alpha);
}

/* ===== p_min ===== */

nx_pmin_verdict nx_spec_pmin_step(int step, float p, float p_min) {
    if (p_min <= 0.0f || p >= p_min) return NX_PMIN_KEEP;
    return step == 0 ? NX_PMIN_KEEP_STOP : NX_PMIN_DROP_STOP;
}

int nx_spec_pmin_cut(const float *p, int n, float p_min) {
    for (int i = 0; i < n; i++) {
        nx_pmin_verdict v = nx_spec_pmin_step(i, p[i], p_min);
        if (v == NX_PMIN_KEEP_STOP) return i + 1;
        if (v == NX_PMIN_DROP_STOP) return i;
    }
    return n;
}
