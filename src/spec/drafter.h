/*
 * drafter.h — the one small interface every speculative drafter implements (speculative.md §3):
 * the MTP head, the Gemma 4 assistant, a separate draft model, n-gram lookup, and chains of them.
 *
 * The protocol, per sequence (the round engine drives it; see src/spec/README.md):
 *   begin(seq, prompt)   the sequence (re)starts. `prompt` = every token that will be committed
 *                        before generation (the target processes them next, possibly partly from
 *                        a cache). Forgets all earlier state of seq. Call it BEFORE the prompt's
 *                        target batches.
 *   process(rows)        after EVERY target nx_decode, the rows of that batch (token, position,
 *                        sequence, post-norm hidden). PROMPT rows are committed as they come;
 *                        VERIFY rows (a generation step: [id_last, d1..dk], k may be 0) are
 *                        pending until accept().
 *   draft(reqs)          propose up to req.k_max tokens after req.id_last for each request, all
 *                        sequences in one call (one drafter batch per step for model drafters).
 *   accept(seq, n)       after a generation step: of seq's pending VERIFY rows the first 1 + n
 *                        (id_last and the n accepted drafts) are committed, the rest discarded.
 *                        Called for every generation step, also when nothing was drafted (n = 0):
 *                        an MTP head must see every committed token (qwen35.md Decisions 3).
 *   free                 everything.
 * So every drafter sees the same committed token stream, whoever drafted: in a chain the n-gram
 * stage learns the MTP stage's accepted drafts from the verify rows, and vice versa.
 *
 * Promises: state is per sequence only (no counter shared across sequences); a drafter never
 * touches the target context's state (it may read what process() hands it); drafts are only
 * proposals, so a drafter can never make the output wrong, only slow. Drafters draft
 * deterministically (q one-hot: q = NULL to nx_sampler_spec_accept) unless a request hands them a
 * sampler (the draft model, MTP head and assistant can: from their full-vocabulary logits): then
 * req.sampled and the q_i they drew from.
 * Never: print, exit, or keep pointers into a rows / req struct after the call returns.
 * A drafter is not thread-safe; one engine thread drives it.
 */
#ifndef NX_SPEC_DRAFTER_H
#define NX_SPEC_DRAFTER_H

#include <stdbool.h>
#include "nextn.h"
#include "core/error.h"
#include "sample.h"

#define NX_SPEC_DRAFT_CAP  32   /* most drafts one request may ask for */
#define NX_SPEC_MAX_STAGES 4    /* most drafters in one chain */

/* ===== What a drafter is told about target batches ===== */

typedef enum nx_rows_kind {
    NX_ROWS_PROMPT = 0,   /* prompt processing: committed at once */
    NX_ROWS_VERIFY = 1,   /* a generation step: pending until accept() */
} nx_rows_kind;

/* The rows of one target batch (a view; valid during the call only). Rows of one sequence have
 * consecutive positions. For a VERIFY batch, a sequence's rows are [id_last, d1..dk]. */
typedef struct nx_target_rows {
    nx_rows_kind kind;
    int n;                       /* rows */
    const nx_token  *tok;        /* [n] */
    const nx_pos    *pos;        /* [n] */
    const nx_seq_id *seq;        /* [n] */
    const float *hidden;         /* [n][n_embd] post-final-norm hidden of every row (nx_ctx_hidden
                                    of rows 0..n-1 is contiguous), or NULL (drafters that need it
                                    fail on NULL) */
    int n_embd;
    const nx_ctx *ctx;           /* the target context, for drafters that read more (assistant:
                                    target KV); may be NULL */
} nx_target_rows;

/* ===== A draft request (one per drafting sequence) ===== */

typedef struct nx_draft_req {
    /* in */
    nx_seq_id seq;
    nx_pos    pos;               /* position id_last will take in the verify batch (= committed
                                    tokens of seq) */
    nx_token  id_last;           /* the last sampled token: not yet committed, row 0 of the verify */
    int       k_max;             /* draft at most this many (0..NX_SPEC_DRAFT_CAP) */
    const int *k_max_by_stage;   /* optional, read by chains only: stage s drafts at most
                                    min(k_max, k_max_by_stage[s]) (0: skip the stage) */
    float     p_min;             /* model drafters: stop when the top probability falls below
                                    (nx_spec_pmin_step in policy.h); 0 = off */
    nx_sampler *sampler;         /* sampled drafts (NULL: greedy drafts, q one-hot): a scratch copy of
                                    the request's chain (history = the committed tokens and id_last,
                                    its own RNG stream). A drafter that samples draws d_i from
                                    q_i = nx_sampler_dist(sampler, its logits for step i), accepts
                                    d_i into sampler, writes q_i to q[i] and sets sampled; others
                                    ignore it (greedy drafts) */
    nx_sample_dist *q;           /* [k_max] caller-owned (room for the vocabulary each), with sampler */
    /* out (caller-owned buffers with room for k_max) */
    nx_token *tok;               /* the drafts d1..dn */
    float    *p;                 /* the drafter's probability of each draft (1 for lookup); may be NULL */
    int       n;                 /* drafts produced, 0..k_max */
    int       stage;             /* chain stage that produced them (0 for a single drafter, -1: none) */
    bool      sampled;           /* the drafts were drawn from q[0..n-1] (verify with q) */
} nx_draft_req;

/* ===== The interface ===== */

typedef struct nx_drafter nx_drafter;

typedef struct nx_drafter_ops {
    const char *name;            /* "ngram", "mtp", "chain", ... */
    nx_status (*begin)(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, nx_error *err);
    nx_status (*process)(nx_drafter *d, const nx_target_rows *rows, nx_error *err);
    /* reqs arrive validated, with n = 0 and stage = -1 */
    nx_status (*draft)(nx_drafter *d, nx_draft_req *reqs, int n_reqs, nx_error *err);
    nx_status (*accept)(nx_drafter *d, nx_seq_id seq, int n_accepted, nx_error *err);
    void      (*free)(nx_drafter *d);
    /* optional (NULL: nothing is ever pending): do now the state updates that committed tokens
     * left pending (e.g. the MTP head's KV rows, batched lazily), so that a draft's time is the
     * cost of drafting alone — the draft-length policy prices k with it. */
    nx_status (*sync)(nx_drafter *d, nx_error *err);
    /* optional: begin() for a sequence whose first `keep` positions stay from its previous
     * stream (prefix reuse: the prompt's first keep tokens are exactly those positions, and the
     * target restored its state after them). A drafter with per-position state of its own (the
     * MTP head's KV) keeps it for positions < keep, as a fresh run would have it after those
     * committed positions; hidden_prev = the target's post-norm hidden at keep - 1. NULL: the
     * drafter needs nothing of the earlier stream beyond begin(prompt) and the rows that follow
     * (n-gram: begin indexes the prompt; assistant: reads the target KV), so begin() is called. */
    nx_status (*begin_keep)(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, int keep,
                            const float *hidden_prev, nx_error *err);
    /* begin_keep works for any keep and without hidden_prev (a draft model keeps its own KV and
     * re-decodes what it cannot keep): the drafter does not count as keeping positions. */
    bool keep_any;
} nx_drafter_ops;

/* Every implementation embeds this as its first member. */
struct nx_drafter {
    const nx_drafter_ops *ops;
    int n_seq;                   /* sequence ids 0..n_seq-1 */
};

/* The calls. They check what is cheap to check (sequence ids, k_max range, buffers present, rows
 * well-formed) and then dispatch; errors are NX_ERR_INVALID_ARG with the drafter's name. */
nx_status nx_drafter_begin(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, nx_error *err);
nx_status nx_drafter_process(nx_drafter *d, const nx_target_rows *rows, nx_error *err);
nx_status nx_drafter_draft(nx_drafter *d, nx_draft_req *reqs, int n_reqs, nx_error *err);
nx_status nx_drafter_accept(nx_drafter *d, nx_seq_id seq, int n_accepted, nx_error *err);
nx_status nx_drafter_sync(nx_drafter *d, nx_error *err);
/* begin() with the first keep positions of seq kept (see begin_keep above; keep 0 = begin).
 * hidden_prev ([n_embd]) may be NULL only when !nx_drafter_keeps_positions(d). Errors: keep
 * outside 0..n_prompt - 1, a drafter whose own state does not reach keep (NX_ERR_INVALID_ARG;
 * the engine then starts the sequence afresh). */
nx_status nx_drafter_begin_keep(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, int keep,
                                const float *hidden_prev, nx_error *err);
/* True if d (or a stage of a chain) keeps per-position state and so needs hidden_prev there. */
bool      nx_drafter_keeps_positions(const nx_drafter *d);
void      nx_drafter_free(nx_drafter *d);      /* NULL-safe */
const char *nx_drafter_name(const nx_drafter *d);

/* ===== Chains (src/spec/chain.c) ===== */

/* A drafter that tries `stages` in order: for each request the first stage whose proposal has
 * at least min_len tokens wins (min_len <= 0 means 1); requests a stage leaves empty go to the
 * next stage in one batch. begin / process / accept go to every stage (each must keep up with
 * the committed stream even when another stage drafted). Takes ownership of the stages (also on
 * failure). All stages must have the same n_seq. */
nx_status nx_drafter_chain_create(nx_drafter **stages, int n_stages, int min_len, nx_drafter **out, nx_error *err);
/* Stage s of a chain (a drafter that is not a chain is its own stage 0; NULL when s is out of
 * range); lets an engine name the stage that produced a draft (req.stage). */
nx_drafter *nx_drafter_chain_stage(nx_drafter *d, int s);
int         nx_drafter_chain_n_stages(const nx_drafter *d);   /* 1 for a non-chain drafter */

#endif
