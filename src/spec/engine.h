/*
 * engine.h — the speculative generation engine: many sequences, one round at a time
 * (speculative.md §2 and §4). Speculation off is the same code path with k = 0 everywhere, so
 * "on" and "off" differ only in drafting.
 *
 * Use:
 *   nx_spec_engine_params p = nx_spec_engine_default_params();
 *   p.spec = ...parsed flags...;  p.sampler = ...;          (nx_spec_params / nx_sampler_params)
 *   nx_spec_engine_create(ctx, &p, &e, &err);                (drafters from p.spec.types)
 *   nx_spec_engine_add(e, &req, &seq, &err);                 (prompt -> first token, per sequence)
 *   while (nx_spec_engine_n_active(e)) {
 *       nx_spec_engine_step(e, &err);                        (one round for every active sequence)
 *       n = nx_spec_engine_take(e, seq, &toks);              (tokens new since the last take)
 *   }
 *   nx_spec_engine_stats_total(e) / nx_spec_engine_stats(e, seq); nx_spec_engine_release(e, seq);
 *
 * One round (all active sequences together):
 *   1. k per sequence from its policy (policy.h; fixed k with adaptive off), capped by the room
 *      left in the context (n_ctx - P - 1) and by the budget (n_predict - generated - budget_slack).
 *   2. ONE drafter call for every sequence with k > 0 (drafter.h; MTP: one head batch per step).
 *   3. ONE target batch: [id_last@P, d1@P+1 .. dn@P+n] per sequence, every row with logits, with
 *      recurrent snapshots; then the drafter sees the rows (process VERIFY).
 *   4. Acceptance per sequence with the sequence's own sampler chain: p_i from a scratch copy of
 *      the chain whose history holds d1..di, nx_sampler_spec_accept with one-hot q (every drafter
 *      here is deterministic), bonus token from p_n when all drafts pass. Greedy chains reduce to
 *      argmax matching and consume no randomness.
 *   5. Commit: nx_seq_rm(P + a + 1) (attention trimmed, recurrent state restored from the snapshot,
 *      no re-decode), drafter accept(seq, a), chain history, stop tokens / budget, policy, stats,
 *      trace (--spec-trace NDJSON), the on_round callback.
 * Invariants (tests/test_spec_engine.c): greedy output identical for every drafter, draft length,
 * policy and number of sequences; at temperature > 0 the token process has the target chain's
 * distribution; after any round the context and drafter state equal a plain run over the committed
 * tokens, bit for bit.
 * Never: print (warnings go through the logger), share per-sequence state between sequences.
 * Not thread-safe: one thread drives an engine (it owns the context while it runs).
 */
#ifndef NX_SPEC_ENGINE_H
#define NX_SPEC_ENGINE_H

#include <stdbool.h>
#include "nextn.h"
#include "core/error.h"
#include "sample.h"
#include "spec/drafter.h"
#include "spec/policy.h"
#include "spec/spec_params.h"
#include "spec/stats.h"

/* What one round of one sequence did (for tests, eval --spec, live displays). Pointers are valid
 * during the callback only. */
typedef struct nx_spec_round_info {
    nx_seq_id seq;
    nx_pos pos;                  /* P: position of id_last (the verify batch starts there) */
    nx_token id_last;
    int k;                       /* drafts asked for (0: a plain decoding step) */
    const nx_token *drafts;      /* what the drafter proposed */
    const float *p;              /* its probabilities */
    int n_drafted;
    int stage;                   /* chain stage that drafted (-1: none) */
    const nx_token *ids;         /* committed by the round: accepted drafts + the target's token */
    int n_ids;
    int n_accepted;
    bool finished;               /* the sequence ended in this round (stop token, budget, context) */
} nx_spec_round_info;

typedef void (*nx_spec_round_fn)(void *user, const nx_spec_round_info *info);

typedef struct nx_spec_engine_params {
    nx_spec_params spec;         /* drafters (none: plain decoding), lengths, policy, trace, fallback */
    nx_sampler_params sampler;   /* the default chain of a request (n_vocab 0: the model's) */
    int budget_slack;            /* 1: a round drafts at most n_predict - generated - 1 tokens; the golden
                                    spec_trace files use 2 (then single-token rounds at the end) */
    const nx_spec_costs *costs;  /* initial verify-cost table (NULL: priors) */
    bool observe_costs;          /* fold every verify's measured time into the table (default true) */
    nx_spec_round_fn on_round;   /* NULL: none */
    void *user;
} nx_spec_engine_params;

/* Speculation off, greedy sampling, budget_slack 1, costs observed online. */
nx_spec_engine_params nx_spec_engine_default_params(void);

typedef struct nx_spec_engine nx_spec_engine;

/* An engine driving ctx (borrowed; it must outlive the engine, and nothing else may decode on it
 * meanwhile). Sequences are ctx's ids 0..n_seq_max-1. Builds the drafters of p->spec in order
 * (more than one: a chain). Errors: mtp on a model without an MTP layer (NX_ERR_UNSUPPORTED,
 * unless spec.fallback: a warning and no mtp stage), a drafter kind not available yet, bad params. */
nx_status nx_spec_engine_create(nx_ctx *ctx, const nx_spec_engine_params *p, nx_spec_engine **out, nx_error *err);
void      nx_spec_engine_free(nx_spec_engine *e);

typedef struct nx_spec_request {
    const nx_token *prompt;      /* >= 1 token, fits the context */
    int n_prompt;
    int n_predict;               /* tokens to generate, the first one included (-1: until a stop token
                                    or a full context) */
    const nx_sampler_params *sampler;   /* NULL: the engine's default */
    const nx_token *stop;        /* end-of-generation ids: generation stops after one (it is output) */
    int n_stop;
} nx_spec_request;

/* Start a request in the lowest free sequence id (*seq): the drafters' begin, the prompt decoded in
 * ubatch-sized chunks (the drafters see every chunk), the first token sampled (it counts as
 * generated). Errors: no free sequence (NX_ERR_RANGE), prompt empty / too long, bad sampler. */
nx_status nx_spec_engine_add(nx_spec_engine *e, const nx_spec_request *req, nx_seq_id *seq, nx_error *err);

/* One round for every active sequence (nothing to do: NX_OK). On failure the engine stops every
 * active sequence (their outputs stay readable). */
nx_status nx_spec_engine_step(nx_spec_engine *e, nx_error *err);

int  nx_spec_engine_n_active(const nx_spec_engine *e);
bool nx_spec_engine_active(const nx_spec_engine *e, nx_seq_id seq);
/* Every token generated for seq so far (NULL and *n = 0 for an unused id). */
const nx_token *nx_spec_engine_output(const nx_spec_engine *e, nx_seq_id seq, int *n);
/* The tokens generated since the last take (*toks into the output; valid until the next step). */
int  nx_spec_engine_take(nx_spec_engine *e, nx_seq_id seq, const nx_token **toks);
/* Free seq for another request (its stats are kept in the total). */
void nx_spec_engine_release(nx_spec_engine *e, nx_seq_id seq);

/* Stats of one request (NULL for an unused id) and of the whole run (time = wall time of the
 * rounds, so tokens/s counts every sequence). */
const nx_spec_stats *nx_spec_engine_stats(const nx_spec_engine *e, nx_seq_id seq);
const nx_spec_stats *nx_spec_engine_stats_total(const nx_spec_engine *e);
/* The verify-cost table the policies use (seconds). */
const nx_spec_costs *nx_spec_engine_costs(const nx_spec_engine *e);
/* The drafter (NULL when speculation is off) and the names of its chain stages (n entries). */
nx_drafter *nx_spec_engine_drafter(nx_spec_engine *e);
const char *const *nx_spec_engine_stage_names(const nx_spec_engine *e, int *n);
/* Seconds of drafting per draft step over the run (0 when nothing was drafted). */
double nx_spec_engine_draft_cost(const nx_spec_engine *e);

/* Verify-cost sweep (`bench --verify-sweep`): the median of `reps` timings of a decode of n rows
 * (with snapshots, as a verify) for n = 1..max_rows on sequence seq of ctx, which must hold at
 * least one position; after each timing the sequence keeps one more position (the first row), so
 * it needs max_rows + reps * max_rows positions of room. seconds[n] (n = 1..max_rows) gets the
 * timings, costs (may be NULL) the table. Errors: no room, decode failures. */
nx_status nx_spec_verify_sweep(nx_ctx *ctx, nx_seq_id seq, int max_rows, int reps, double *seconds,
                               nx_spec_costs *costs, nx_error *err);

#endif
