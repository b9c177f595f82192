/*
 * ngram.h — the `ngram` drafter (prompt / history lookup; speculative.md §3, `--spec-type ngram`).
 *
 * For each sequence it keeps the committed tokens (prompt + generated) and a hash index from
 * every n-gram (ngram_min <= n <= ngram_max) to the end of its most recent occurrence. To draft
 * after id_last it takes the pattern = the last n tokens of (history, id_last), n from ngram_max
 * down to ngram_min; the longest pattern with an earlier occurrence wins, its most recent
 * occurrence is used, and the tokens that followed it are proposed, up to k. When the
 * continuation runs into the pattern itself (a repeating run), it continues periodically through
 * its own drafts ("a b a b" -> "a b a b ...").
 *
 * Cost: indexing a committed token is O(ngram_max) (hashes of all n-grams ending there are built
 * in one backward pass); a draft is O(ngram_max + k). Nothing rescans the history, except
 * begin() indexing the prompt once. Hash hits are confirmed by comparing tokens, so a collision
 * can only cost a proposal, never give a wrong match. Memory per sequence ~ 4 bytes per token
 * plus ~(ngram_max - ngram_min + 1) * 32 bytes per token of index.
 * Drafts carry p = 1 (a deterministic proposal; p_min does not apply).
 */
#ifndef NX_SPEC_NGRAM_H
#define NX_SPEC_NGRAM_H

#include "spec/drafter.h"

#define NX_NGRAM_N_MAX 16        /* largest ngram_max accepted */

typedef struct nx_ngram_params {
    int ngram_max;               /* longest pattern tried (--ngram-max, default 4) */
    int ngram_min;               /* shortest pattern tried (default 1) */
} nx_ngram_params;

nx_ngram_params nx_ngram_default_params(void);

/* An n-gram drafter for sequences 0..n_seq-1. Errors: bad n_seq / params (NX_ERR_INVALID_ARG),
 * NX_ERR_NOMEM. */
nx_status nx_ngram_create(const nx_ngram_params *params, int n_seq, nx_drafter **out, nx_error *err);

/* Committed tokens the drafter holds for seq (prompt + accepted), -1 if seq was never begun.
 * For tests and consistency checks. */
int nx_ngram_seq_len(const nx_drafter *d, nx_seq_id seq);

#endif
