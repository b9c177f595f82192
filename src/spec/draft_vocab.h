/*
 * draft_vocab.h — which tokens a draft LM head keeps (`--draft-vocab N`, `--draft-vocab-file F`).
 *
 * A draft step of an MTP head over a large vocabulary (151,936 or 248,320 rows) costs mostly its
 * LM head; a head over the N most frequent tokens costs N / n_vocab of that, and drafts only
 * propose (the target verifies with its full head), so output is unchanged and only acceptance
 * can drop. The N tokens, in this order:
 *   1. the end-of-generation tokens (so a draft can still end a text);
 *   2. with a calibration text: its tokens by decreasing count (ties: lower id first);
 *   3. the rest by increasing id — for BPE vocabularies the merge rank, which follows the
 *      tokenizer's training frequencies — skipping CONTROL / UNUSED / UNKNOWN tokens.
 * Never: keep state, print.
 */
#ifndef NX_SPEC_DRAFT_VOCAB_H
#define NX_SPEC_DRAFT_VOCAB_H

#include <stdint.h>
#include "core/error.h"
#include "gguf.h"
#include "tokenizer.h"

#define NX_DRAFT_VOCAB_DEFAULT 32768   /* --draft-vocab default: smaller vocabularies keep them all */

/* The draft vocabulary size for a model of n_vocab tokens: `request` < 0 = the default (all when
 * n_vocab <= NX_DRAFT_VOCAB_DEFAULT), 0 = all, else min(request, n_vocab). Returns n_vocab for "all". */
int nx_draft_vocab_size(int request, int n_vocab);

/* The first n tokens of the order above into ids[0..n-1] (distinct). calib: text to count
 * (tokenized with t; NULL or empty: none). n must be in 1..n_vocab of t.
 * Errors: bad n (NX_ERR_INVALID_ARG), tokenizer failures, NX_ERR_NOMEM. */
nx_status nx_draft_vocab_pick(const nx_tokenizer *t, const char *calib, size_t calib_len, int n, int32_t *ids,
                              nx_error *err);

/* The whole choice for a model file: the size from `request` (as nx_draft_vocab_size), then the
 * tokens from g's tokenizer with the counts of the text file calib_path (NULL: rank order; a
 * file without a tokenizer: ids 0..n-1, or an error when calib_path is given). *ids = NULL
 * (and *n = n_vocab) when the whole vocabulary stays; else the caller frees *ids.
 * Errors: reading calib_path, the tokenizer, NX_ERR_NOMEM. */
nx_status nx_draft_vocab_build(const nx_gguf *g, int n_vocab, int request, const char *calib_path, int32_t **ids,
                               int *n, nx_error *err);

#endif
