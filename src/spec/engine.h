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
 * Or non-blocking (the server): nx_spec_engine_submit(e, &req, seq, &err) queues the prompt; each
 * step then decodes up to max_prompt_rows prompt rows (oldest submit first) in the SAME target
 * batch as the verify rows of the generating sequences; a sequence is active from submit on.
 * Prefix reuse (req.reuse_prefix): a released sequence keeps its cache — the tokens of its KV,
 * the KV and recurrent state, checkpoints of the recurrent state taken while prompts are decoded
 * (every checkpoint_interval positions and at each prompt's end; DeltaNet state cannot be rolled
 * back, qwen35.md) with the trunk hidden row before each. A new prompt keeps the longest shared
 * prefix that is the cache's end or a checkpoint (any length without recurrent layers); the
 * drafters keep their state below it (drafter.h begin_keep: the MTP head's KV rows + that
 * hidden row); results equal a fresh run bit for bit (tests/test_spec_prefix.c).
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
 *   Prompt rows of submitted requests follow the verify rows (no snapshots for them); a chunk
 *   never crosses a checkpoint position; the step that decodes a prompt's last row samples its
 *   first token (logits of that row).
 * Invariants (tests/test_spec_engine.c, test_spec_prefix.c): greedy output identical for every
 * drafter, draft length, policy, number of sequences, prompt chunking and prefix reuse; at temperature > 0 the token process has the target chain's
 * distribution; after any round the context and drafter state equal a plain run over the committed
 * tokens, bit for bit.
 * Shared on purpose, engine-wide: the verify-cost table, and the policy memory (policy.h): a
 * released sequence's measured acceptance rates and draft cost seed the next sequence's policy,
 * greedy and sampled sequences apart (they accept differently). Both steer speed, never tokens.
 * Never: print (warnings go through the logger), share other per-sequence state between sequences.
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
    int checkpoint_interval;     /* recurrent-state checkpoints every N prompt tokens (default 512; 0 = off) */
    int max_checkpoints;         /* per sequence (default 8; oldest dropped first) */
    int max_prompt_rows;         /* prompt rows per step over all sequences (0 = the context's n_ubatch) */
} nx_spec_engine_params;

/* Speculation off, greedy sampling, budget_slack 1, costs observed online. */
nx_spec_engine_params nx_spec_engine_default_params(void);

typedef struct nx_spec_engine nx_spec_engine;

/* --spec-type auto (sp->auto_type with no drafter named): with --draft-model, assistant for a
 * Gemma 4 assistant GGUF and draft for any other model; else mtp when the model has an MTP layer,
 * else none. nx_spec_engine_create applies it; the
 * CLI calls it after loading to report what runs. */
void nx_spec_params_resolve_auto(nx_spec_params *sp, const nx_model *m);

/* An engine driving ctx (borrowed; it must outlive the engine, and nothing else may decode on it
 * meanwhile). Sequences are ctx's ids 0..n_seq_max-1. Builds the drafters of p->spec in order
 * (more than one: a chain). Errors: mtp on a model without an MTP layer (NX_ERR_UNSUPPORTED,
 * unless spec.fallback: a warning and no mtp stage), a drafter kind not available yet, bad params. */
nx_status nx_spec_engine_create(nx_ctx *ctx, const nx_spec_engine_params *p, nx_spec_engine **out, nx_error *err);
void      nx_spec_engine_free(nx_spec_engine *e);

/* Per-request speculative.* fields (server.md). */
typedef struct nx_spec_overrides {
    bool has_n_max, has_n_min, has_p_min, has_adaptive;
    int n_max, n_min;
    float p_min;
    bool adaptive;
    unsigned stage_mask;         /* 0: every loaded chain stage; else bit i allows stage i (none allowed = no drafting) */
} nx_spec_overrides;

#define NX_SPEC_MAX_PROBS 20
typedef struct nx_token_prob {
    nx_token id;
    float logprob;
} nx_token_prob;

typedef struct nx_spec_request {
    const nx_token *prompt;      /* >= 1 token, fits the context */
    int n_prompt;
    int n_predict;               /* tokens to generate, the first one included (-1: until a stop token
                                    or a full context) */
    const nx_sampler_params *sampler;   /* NULL: the engine's default */
    const nx_token *stop;        /* end-of-generation ids: generation stops after one (it is output) */
    int n_stop;
    const nx_spec_overrides *spec;   /* NULL: the engine's settings */
    int n_probs;                 /* 0: none; 1..NX_SPEC_MAX_PROBS: keep each generated token's logprob + top n_probs */
    bool reuse_prefix;           /* submit only: reuse the sequence's cached prefix (cache_prompt) */
} nx_spec_request;

/* Start a request in the lowest free sequence id (*seq): the drafters' begin, the prompt decoded in
 * ubatch-sized chunks (the drafters see every chunk), the first token sampled (it counts as
 * generated). Blocking; always from position 0 (reuse_prefix is ignored) and without checkpoints
 * (a later submit can reuse only the end of what it leaves). Honours spec and n_probs.
 * Errors: no free sequence (NX_ERR_RANGE), prompt empty / too long, bad sampler / overrides /
 * n_probs (NX_ERR_INVALID_ARG). */
nx_status nx_spec_engine_add(nx_spec_engine *e, const nx_spec_request *req, nx_seq_id *seq, nx_error *err);

/* Non-blocking start of req in sequence seq (0..n_seq-1, must not be in use). The prompt is processed
 * by the following nx_spec_engine_step calls in chunks that share each step's ONE target batch with
 * the other sequences' decode/verify rows (at most max_prompt_rows prompt rows per step in total, so
 * running sequences are never starved); the first generated token appears in the step that finishes
 * the prompt. With reuse_prefix, the longest prefix the prompt shares with seq's cached tokens is
 * kept: attention KV trimmed, recurrent state restored from the deepest checkpoint at or below the
 * shared length (then only the rest is decoded); results identical to processing the whole prompt
 * fresh. At least one prompt token is always decoded (logits are needed). */
nx_status nx_spec_engine_submit(nx_spec_engine *e, const nx_spec_request *req, nx_seq_id seq, nx_error *err);
/* (Errors: seq out of range or in use, bad request: NX_ERR_INVALID_ARG; prompt too long: NX_ERR_RANGE.
 * Overrides: n_max 0..NX_SPEC_DRAFT_CAP (may exceed the engine's draft_max), n_min <= n_max; a
 * lowered n_max lowers the engine's draft_min with it. After a step failure no cache is reused.) */
/* The prompt of seq is not finished yet. */
bool nx_spec_engine_prompt_pending(const nx_spec_engine *e, nx_seq_id seq);
/* Prompt tokens of seq's current request taken from the cache (0 without reuse_prefix). */
int  nx_spec_engine_n_reused(const nx_spec_engine *e, nx_seq_id seq);
/* Logprob of generated token i of seq (log-softmax of the target's raw logits at that position,
 * before any sampler transform, like OpenAI logprobs) and up to max_top best alternatives
 * (descending); returns how many top entries were written, -1 if not recorded (n_probs 0 or i out
 * of range). */
int  nx_spec_engine_logprobs(const nx_spec_engine *e, nx_seq_id seq, int i, nx_token_prob *chosen,
                             nx_token_prob *top, int max_top);

/* One round for every active sequence (nothing to do: NX_OK). On failure the engine stops every
 * active sequence (their outputs stay readable). */
nx_status nx_spec_engine_step(nx_spec_engine *e, nx_error *err);

/* Sequences with work left (a prompt pending or generating), and whether seq is one. */
int  nx_spec_engine_n_active(const nx_spec_engine *e);
bool nx_spec_engine_active(const nx_spec_engine *e, nx_seq_id seq);
/* Every token generated for seq so far (NULL and *n = 0 for an unused id). */
const nx_token *nx_spec_engine_output(const nx_spec_engine *e, nx_seq_id seq, int *n);
/* The tokens generated since the last take (*toks into the output; valid until the next step). */
int  nx_spec_engine_take(nx_spec_engine *e, nx_seq_id seq, const nx_token **toks);
/* Free seq for another request (its stats are kept in the total). The sequence's cache stays:
 * the tokens in its KV (prompt + committed generated tokens), the KV / recurrent state itself
 * and its checkpoints, for a later nx_spec_engine_submit with reuse_prefix. */
void nx_spec_engine_release(nx_spec_engine *e, nx_seq_id seq);
/* The tokens at the KV positions of seq (what reuse_prefix can match against; NULL and *n = 0
 * when nothing is cached). Valid until the next call that changes seq. */
const nx_token *nx_spec_engine_cached(const nx_spec_engine *e, nx_seq_id seq, int *n);
/* Drop the cache of a sequence not in use (its KV emptied, checkpoints forgotten). */
void nx_spec_engine_forget(nx_spec_engine *e, nx_seq_id seq);

/* Stats of one request (NULL for an unused id) and of the whole run (time = wall time of the
 * rounds, so tokens/s counts every sequence). */
const nx_spec_stats *nx_spec_engine_stats(const nx_spec_engine *e, nx_seq_id seq);

/* The draft policy's state of a sequence (its current request): the wall-clock guard (policy.h)
 * and the measured seconds per committed token with drafts / without. false: bad seq. */
typedef struct nx_spec_guard_info {
    bool     off;                /* the guard holds speculation off (plain decoding is faster) */
    uint64_t switches;           /* times it switched (off or back on) */
    double   s_per_tok_spec, s_per_tok_plain;   /* 0 when not measured yet */
    int      k_last;             /* drafts verified in the sequence's last round */
} nx_spec_guard_info;
bool nx_spec_engine_guard(const nx_spec_engine *e, nx_seq_id seq, nx_spec_guard_info *out);
const nx_spec_stats *nx_spec_engine_stats_total(const nx_spec_engine *e);
/* The verify-cost table the policies use (seconds). */
const nx_spec_costs *nx_spec_engine_costs(const nx_spec_engine *e);
/* What released sequences measured (policy.h), greedy or sampled ones; seeds the next ones. */
const nx_spec_policy_memory *nx_spec_engine_memory(const nx_spec_engine *e, bool sampled);
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
