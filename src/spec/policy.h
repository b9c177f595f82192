/*
 * policy.h — how many tokens to draft (speculative.md §5) and what speculation should gain.
 *
 * Model: a round with k drafts costs k c_d (drafter steps) + c_v(k+1) (one target verify of k+1
 * rows) and commits E(k) = 1 + a_1 + a_1 a_2 + ... + a_1...a_k tokens on average, where a_i =
 * P(d_i accepted | d_1..d_{i-1} accepted). Plain decoding commits 1 token per c_v(1). So
 *     k* = argmax_k E(k) / (k c_d + c_v(k+1)),  k in [max(1, draft_min), draft_max],
 * and k* = 0 (plain decoding) when no k beats 1 / c_v(1); while at 0 the policy re-probes with
 * k = max(1, draft_min) every probe_every rounds so a sequence whose text became predictable
 * gets speculation back. The predicted speedup of a k is E(k) c_v(1) / (k c_d + c_v(k+1)).
 *
 * Pieces:
 *   nx_spec_costs   the verify cost table c_v(n), n = 1..NX_SPEC_VERIFY_ROWS_MAX, measured by
 *                   the engine (a sweep, or online); engine-wide, read-only for the policies.
 *                   Units are the caller's (seconds, or relative to c_v(1)); only ratios matter.
 *   nx_spec_policy  one per sequence (per chain stage if the engine wishes): EMAs of a_i and c_d,
 *                   the probe counter. Plain data, no allocation.
 * Unmeasured depths borrow the estimate of the depth below (depth 1: accept_prior), so a policy
 * can grow k past what it has tried, but only two verify rows past the largest batch measured
 * (k <= that row count + 1, once one is measured): extrapolated costs are not trusted further.
 * Exploration without verify cost (shadow drafts): every shadow_every rounds the plan asks the
 * drafter for one draft more than it verifies; when the verified drafts all pass, the round's
 * bonus token equals that extra draft exactly when the target would have accepted it (greedy: the
 * argmax; sampled: P(bonus = d) = p(d), the acceptance probability of a deterministic draft), so
 * depth k+1 is observed for one draft step. At k* = 0 the shadow draft is d_1 itself. Without it
 * a depth whose estimate once fell would never be measured again (k stays below it).
 * Steady rounds: E(k) from per-depth rates assumes each round starts anywhere in the text. Rounds
 * at a fixed k start where the last one ended, and on text with a period (code lines, repeated
 * structure: one hard token every p) k = p - 1 drafts the easy tokens and takes the hard one as the
 * bonus every round, which the per-depth rates do not see (a 24-layer model at AVX2: k = 4 made
 * 4.5 tokens a round, k = 3 3.4). So the tokens committed by a round at k that follows a round at
 * k are measured per k, and E(k) is their mean blended with the model's value as steady_prior
 * pseudo-rounds; the mean's weight fades while k is not used (the text moves on). Explorations
 * run explore_len rounds in a row so k + 1 is seen aligned.
 * Replay: the steady rounds measure only the k in use, and the model's E(k) for the others cannot
 * see alignment, so the policy compared a measured k with modelled ones. It now records the last
 * NX_SPEC_REPLAY_LEN committed positions with what was seen there (accepted as the depth-d draft,
 * rejected at depth d, or not drafted: the bonus token after a full acceptance, a plain round's
 * token) and replays every k on them: rounds start where the previous one ended, a position keeps
 * its label at other depths (accepted -> accepted when drafted earlier, rejected -> rejected when
 * drafted later; hardness is a property of the position: on the bundled model 1239 of 1245
 * positions accepted at depth 1 were accepted at every depth), with a_d / a_1 as the drafter's
 * decay at depth d and the shadow drafts' pass rate for unlabelled positions. E(k) is the replay's,
 * blended with the steady rounds at k. The same recorded text for every k: a 24-layer model at
 * AVX2 sat at k = 2 (3 tokens a round) where k = 4 made 4.3 once aligned; in the policy simulator
 * with the demo text's hard positions, a server's 128-token requests went 0.926 -> 0.947 of the
 * best fixed k.
 * Wall-clock guard (adaptive mode): the measured seconds per committed token of rounds with
 * drafts against rounds without (plain rounds come every plain_every rounds while speculating);
 * when speculation is slower by more than guard_margin the policy decodes plainly (k = 0) and
 * re-tries the model's k once every guard_probe_every rounds; it turns back on when a re-try is
 * faster. This catches every cost the model leaves out (sampling, bookkeeping, a drafter's
 * queued work). Costs: unmeasured row counts are interpolated between
 * measured ones, or follow c_v(1) (1 + slope_prior (n - 1)) scaled to the nearest measurement;
 * the table is made non-decreasing in n (noise must not make a larger verify look cheaper).
 * Memory across sequences: a sequence starts from the prior above, and the first draft of a text
 * is often its hard token (a prompt's continuation); one rejection then halves a_1 and holds k at
 * 1-2 for several rounds (a server's warm requests: 6/0 2/1 1/1 1/1 2/2 ... before k = 5-7). An
 * engine that serves many sequences of one model folds each finished sequence's measured rates
 * into an nx_spec_policy_memory and seeds the next sequence's estimates with it, standing for
 * memory_weight observations: the next sequence still adapts to its own text within a few rounds.
 * Never: global state, allocation, printing.
 */
#ifndef NX_SPEC_POLICY_H
#define NX_SPEC_POLICY_H

#include <stdbool.h>
#include <stdint.h>
#include "core/error.h"
#include "spec/drafter.h"
#include "spec/stats.h"

#define NX_SPEC_VERIFY_ROWS_MAX (NX_SPEC_DRAFT_CAP + 1)
#define NX_SPEC_REPLAY_LEN 128   /* committed positions the replay remembers (policy.h, "Replay") */

/* ===== Verify cost table ===== */

typedef struct nx_spec_costs {
    double   meas[NX_SPEC_VERIFY_ROWS_MAX + 1];  /* [n]: measured cost of n rows (EMA when online) */
    uint32_t n_obs[NX_SPEC_VERIFY_ROWS_MAX + 1]; /* [n]: measurements folded in; 0 = none */
    double   cv[NX_SPEC_VERIFY_ROWS_MAX + 1];    /* [n]: the derived, non-decreasing table */
    double   alpha;                              /* EMA weight of an online observation (0.1) */
    double   slope_prior;                        /* relative cost of one more row when unmeasured (0.2) */
    double   speed;                              /* online: the machine's speed now; cv[n] = speed x the
                                                    shape meas[] (1 until a row count is re-measured) */
} nx_spec_costs;

/* Nothing measured: c_v(n) = 1 + slope_prior (n - 1). */
void      nx_spec_costs_init(nx_spec_costs *c);
/* A measured cost for n rows (replaces earlier ones; e.g. from `bench --verify-sweep`).
 * Errors: n outside 1..NX_SPEC_VERIFY_ROWS_MAX, cost not finite or <= 0. */
nx_status nx_spec_costs_set(nx_spec_costs *c, int n_rows, double cost, nx_error *err);
/* One online measurement. A cost is speed x shape(n): a re-measured row count's log residual
 * against the table moves the speed factor by 0.3 of it (the machine's speed shifts in episodes)
 * and its own shape by the mean while few are in, then the EMA alpha; a first one sets its shape
 * at today's speed. An observation above 1.3x the table's prediction counts as 1.3x (timing noise
 * only ever slows a step). Same errors. */
nx_status nx_spec_costs_observe(nx_spec_costs *c, int n_rows, double cost, nx_error *err);
/* c_v(n); n is clamped to 1..NX_SPEC_VERIFY_ROWS_MAX. */
double    nx_spec_costs_verify(const nx_spec_costs *c, int n_rows);
/* The largest row count measured so far (0: none). */
int       nx_spec_costs_measured_rows(const nx_spec_costs *c);

/* ===== Pure formulas (also used by `nextn bench`) ===== */

/* E(k) = 1 + a[0] + a[0] a[1] + ... + a[0]..a[k-1]; a[i] = acceptance at depth i + 1. */
double nx_spec_expected_tokens(const double *a, int k);
/* E(k) c_v(1) / (k c_d + c_v(k + 1)); k = 0 gives 1. */
double nx_spec_predicted_speedup(const double *a, int k, double c_d, const nx_spec_costs *c);
/* The same with one acceptance rate at every depth: E(k) = (1 - alpha^(k+1)) / (1 - alpha). */
double nx_spec_predicted_speedup_uniform(double alpha, int k, double c_d, const nx_spec_costs *c);
/* k in [k_lo, k_hi] (k_lo >= 1) maximising the predicted speedup, or 0 when none is > 1 (plain
 * decoding is best); ties go to the smaller k. *speedup (may be NULL) = the winner's prediction
 * (1 for k = 0). a needs k_hi entries. */
int    nx_spec_best_k(const double *a, int k_lo, int k_hi, double c_d, const nx_spec_costs *c, double *speedup);
/* What a finished run should have gained given what it actually did: committed tokens x c_v(1)
 * over the modelled cost sum_k rounds_k (k c_d + c_v(k + 1)) (the round-length histogram of
 * stats). For one sequence at a time; 1 when there were no rounds. */
double nx_spec_predicted_speedup_stats(const nx_spec_stats *st, double c_d, const nx_spec_costs *c);

/* ===== Per-sequence adaptive policy ===== */

typedef struct nx_spec_policy_params {
    int    draft_max;            /* 8: largest k; the k of every round when !adaptive */
    int    draft_min;            /* 0: smallest k when drafting (k* = 0 stays possible) */
    bool   adaptive;             /* true; false = fixed k = draft_max */
    float  p_min;                /* 0: the drafter's early-stop threshold (req.p_min), see below */
    double ema_alpha;            /* 0.1: weight of a new observation once warmed up */
    double accept_prior;         /* 0.8: a_1 before any observation (one pseudo-observation); MTP
                                    heads accept 0.65-0.9, and a prior of 0.6 drafted 1 token for the
                                    first rounds (policy simulator: 128-token runs 0.89 -> 0.91 of the
                                    best fixed k, 6000-token runs unchanged, 40-80% acceptance) */
    double draft_cost_prior;     /* 0.05: c_d before any measurement, as a fraction of c_v(1) */
    int    probe_every;          /* 8: rounds at k* = 0 between shadow probes of depth 1 */
    int    shadow_every;         /* 4: rounds between shadow drafts at k* > 0 (0: none); stretched
                                    so that shadow steps stay under ~1% of the rounds' cost */
    bool   guard;                /* true: the wall-clock guard (adaptive mode only) */
    double guard_margin;         /* 0.03: speculation must not be slower than plain by more */
    int    guard_probe_every;    /* 32: rounds between re-tries while the guard holds k at 0 */
    int    guard_confirm;        /* 16: speculative rounds in a row that must find speculation
                                    slower before the guard turns it off (a request's first rounds
                                    pay one-time costs: cold caches, first-touch pages) */
    int    plain_every;          /* 64: a plain round among speculative ones (measures plain speed) */
    int    explore_every;        /* 16: rounds between verified runs at k* + 1 (its verify cost is
                                    measured too: an entry of the cost table is only refreshed when
                                    used; 0: none); every other run tries k* + 2; a run after which
                                    k* stays below it doubles the period, up to 8x, one that moves k*
                                    resets it */
    int    explore_len;          /* 4: rounds in such a run (the first finds k + 1's own alignment) */
    double steady_prior;         /* 2: pseudo-rounds of the model's E(k) against measured tokens per
                                    round at k (see "Steady rounds" above); the replay, once 16
                                    positions are recorded, counts as 30 (policy simulator: 2 let the
                                    measured k win too often, 100-300 the same as 30) */
    int    memory_weight;        /* 3: earlier observations a seeded acceptance rate stands for (>= 1;
                                    with the estimate's own weight it counts as 4: one rejection moves
                                    it by a fifth) */
    bool   replay;               /* true: E(k) from replaying the recent positions (see "Replay");
                                    false: the per-depth model blended with steady rounds */
} nx_spec_policy_params;

typedef struct nx_spec_policy {
    nx_spec_policy_params p;
    double   a[NX_SPEC_DRAFT_CAP];     /* [i]: EMA of the acceptance at depth i + 1 */
    uint32_t n_a[NX_SPEC_DRAFT_CAP];   /* observations per depth */
    double   c_d;                      /* EMA of the drafter cost per step (caller's units) */
    uint32_t n_cd;                     /* cost measurements */
    int      idle_rounds;              /* rounds at k = 0 since the last probe */
    uint64_t n_probes;                 /* probes made (shadow probes at k* = 0) */
    int      since_shadow;             /* rounds since the last shadow draft at k* > 0 */
    uint64_t n_shadow, n_shadow_ok;    /* shadow observations, how many the target would have taken */
    /* the wall-clock guard */
    double   t_spec, t_plain;          /* EMA seconds per committed token: rounds with / without drafts */
    uint32_t n_spec, n_plain;
    bool     off;                      /* the guard holds k at 0 */
    bool     retry;                    /* this round is a re-try while off */
    int      since_plain, since_retry, since_explore;
    int      off_votes;                /* speculative rounds in a row found slower */
    /* steady rounds: a round at k after a round at k */
    double   tpr[NX_SPEC_DRAFT_CAP + 1];   /* [k]: EMA of the tokens such a round committed */
    double   tpr_w[NX_SPEC_DRAFT_CAP + 1]; /* [k]: their weight, x0.9 per round at another k (the
                                          text moves on while k rests) */
    uint32_t n_tpr[NX_SPEC_DRAFT_CAP + 1];
    int      last_k;                   /* drafts verified by the last observed round */
    int      explore_left;             /* rounds still to run at explore_k */
    int      explore_k;
    int      explore_period;           /* rounds between runs now: explore_every, doubled (up to 8x)
                                          by each run after which k* did not take its k */
    bool     explore_judge;
    uint32_t n_explore;                /* runs so far (every other one tries k* + 2) */
    uint64_t n_switches;               /* times the guard turned speculation off or back on */
    int8_t   hist[NX_SPEC_REPLAY_LEN];   /* ring of the last committed positions: +d accepted as the
                                            depth-d draft, -d rejected at depth d, 0 not drafted */
    uint32_t n_hist;                     /* positions recorded; the newest is at (n_hist - 1) % LEN */
    double   bonus;                      /* EMA: shadow drafts of bonus tokens that would have passed */
    uint32_t n_bonus;
    uint32_t n_seed[NX_SPEC_DRAFT_CAP];  /* [i]: how much of n_a[i] a memory seeded */
    uint32_t n_seed_cd;                  /* likewise of n_cd */
} nx_spec_policy;

/* What finished sequences measured (see "Memory across sequences"): per depth the mean of their
 * acceptance estimates, then an EMA (0.3: requests differ, recent ones weigh more); the drafter's
 * cost per step likewise. Zeroed = empty. */
typedef struct nx_spec_policy_memory {
    double   a[NX_SPEC_DRAFT_CAP];
    uint32_t n_a[NX_SPEC_DRAFT_CAP];   /* sequences folded in per depth */
    double   c_d;
    uint32_t n_cd;
} nx_spec_policy_memory;

/* One round's plan: verify k drafts; shadow: ask the drafter for k + 1 and keep the last one
 * unverified (see above). */
typedef struct nx_spec_plan {
    int  k;
    bool shadow;
} nx_spec_plan;

nx_spec_policy_params nx_spec_policy_default_params(void);

/* Errors (NX_ERR_INVALID_ARG, naming the field): draft_max outside 0..NX_SPEC_DRAFT_CAP,
 * draft_min outside 0..draft_max, p_min outside [0, 1], ema_alpha outside (0, 1], accept_prior
 * outside [0, 1], draft_cost_prior < 0, probe_every < 1. */
nx_status nx_spec_policy_init(nx_spec_policy *pol, const nx_spec_policy_params *params, nx_error *err);
/* Forget the observations, keep the params. */
void      nx_spec_policy_reset(nx_spec_policy *pol);
/* Before a sequence's first round: its acceptance estimates at the depths the memory holds (as
 * memory_weight observations each) and its draft cost (as one) start from the memory's. */
void      nx_spec_policy_seed(nx_spec_policy *pol, const nx_spec_policy_memory *m);
/* A finished sequence: the depths it observed itself at least 4 times (fewer say little) and its
 * draft cost, if measured, go into the memory. */
void      nx_spec_memory_fold(nx_spec_policy_memory *m, const nx_spec_policy *pol);

/* This round's plan (call once per round: it counts rounds for probes, shadows and the guard). */
nx_spec_plan nx_spec_policy_plan(nx_spec_policy *pol, const nx_spec_costs *c);
/* The plan's k alone (the shadow draft not wanted). */
int    nx_spec_policy_next_k(nx_spec_policy *pol, const nx_spec_costs *c);
/* k* without side effects (speedup as in nx_spec_best_k; fixed mode gives draft_max). */
int    nx_spec_policy_best_k(const nx_spec_policy *pol, const nx_spec_costs *c, double *speedup);

/* A round drafted k_drafted tokens (what the drafter produced, not what was asked) of which
 * n_accepted were accepted: depths 1..n_accepted succeeded, depth n_accepted + 1 failed. */
void   nx_spec_policy_observe(nx_spec_policy *pol, int k_drafted, int n_accepted);
/* A shadow draft at `depth` (1 + the verified drafts, all of which passed) would have been
 * accepted or not. */
void   nx_spec_policy_observe_shadow(nx_spec_policy *pol, int depth, bool accepted);
/* A whole round (draft + verify + the rest) took `seconds` and committed `committed` tokens with
 * k drafts verified; feeds the guard. Returns +1 when the guard turned speculation off in this
 * call, -1 when it turned it back on, 0 otherwise (so the caller can log a switch once). */
int    nx_spec_policy_observe_round(nx_spec_policy *pol, int k, int committed, double seconds);
/* The drafter took `cost` for `steps` steps (ignored when steps <= 0 or cost is not finite). */
void   nx_spec_policy_observe_draft_cost(nx_spec_policy *pol, double cost, int steps);

/* The estimates the policy uses: a_depth (depth 1..NX_SPEC_DRAFT_CAP) and c_d. */
double nx_spec_policy_accept_est(const nx_spec_policy *pol, int depth);
double nx_spec_policy_draft_cost(const nx_spec_policy *pol, const nx_spec_costs *c);

/* ===== Early stop on the drafter's confidence (--draft-p-min) ===== */

typedef enum nx_pmin_verdict {
    NX_PMIN_KEEP      = 0,       /* keep this draft, go on */
    NX_PMIN_KEEP_STOP = 1,       /* keep it (the first draft always stays), then stop */
    NX_PMIN_DROP_STOP = 2,       /* drop it and stop */
} nx_pmin_verdict;

/* For draft step `step` (0-based) whose top probability is p: below p_min (or NaN), step 0 is
 * kept and drafting stops, a later step is dropped and drafting stops. p_min <= 0: always keep. */
nx_pmin_verdict nx_spec_pmin_step(int step, float p, float p_min);
/* How many of n drafts with probabilities p survive the rule above. */
int             nx_spec_pmin_cut(const float *p, int n, float p_min);

#endif
