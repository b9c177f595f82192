/*
 * mtp.h — the qwen35 / qwen35moe MTP (NextN) head: its forward pass with its own per-sequence
 * KV cache, and the `mtp` drafter built on it (speculative.md §3, qwen35.md §6-7 + Decisions).
 *
 * Head forward, per row (token t, position q, sequence s, conditioning hidden h):
 *   x = eh_proj · [enorm(embd[t]) ; hnorm(h)]   (embedding first; enorm(e) + hnorm(h) without eh_proj)
 *   x += gated attention over the head's own KV of s (the row's K/V is written at q first)
 *   x += FFN (skipped when the layer has none)
 *   h_mtp = shared_head_norm(x) (or x), logits = output_mtp · h_mtp
 * Row convention (Decisions 2): the row at q is fed (token q, trunk post-norm hidden q-1; zeros
 * for q = 0) and drafts token q+1. Rows are independent (bit-identical whatever else is in the
 * batch), as in the trunk.
 *
 * The drafter (drafter.h protocol):
 *   process(PROMPT)  warm-up rows go through the head at once (chunked), all sequences together.
 *   process(VERIFY)  the rows' tokens and hiddens are kept pending.
 *   accept(seq, a)   queues the committed rows (row P = (id_last, h_{P-1}) when drafting did not
 *                    already write it, rows P+i = (d_i, verify hidden i-1)); no forward here, so
 *                    the commits of all sequences are written later in one batch — fused with the
 *                    next draft's first step, or when a queue fills up (Decisions 3: every
 *                    committed token reaches the MTP KV, also on steps without drafts).
 *   draft(reqs)      step 0 = queued rows of every sequence + one row (id_last, h_{P-1}) at P per
 *                    request in ONE head batch; step s = one row (d_s, h_mtp of step s-1) at P+s
 *                    per still-drafting request; greedy argmax with its softmax probability per
 *                    row (no logits copy), --draft-p-min per sequence (nx_spec_pmin_step). Rows
 *                    above P are dropped afterwards (row P is real and stays).
 *   begin_keep(keep) prefix reuse: head KV rows / queued rows below keep stay, the rest goes,
 *                    h_last = the trunk hidden at keep - 1 (the engine saves it per checkpoint).
 * Promises: per-sequence state only; the target context is only borrowed for its model and thread
 * pool (never its KV or outputs); after the drafter has seen a committed stream, its KV equals a
 * fresh warm-up over the same tokens bit for bit.
 * Never: print, allocate per call after creation (buffers are sized at create), keep pointers into
 * the rows / requests it is handed.
 */
#ifndef NX_SPEC_MTP_H
#define NX_SPEC_MTP_H

#include <stdbool.h>
#include "nextn.h"
#include "core/error.h"
#include "spec/drafter.h"

/* True if the model carries an MTP head nextn can run (qwen35 / qwen35moe with
 * nextn_predict_layers >= 1). */
bool nx_mtp_supported(const nx_model *model);
/* The error for a model without one: "--spec-type mtp: model 'NAME' (arch A) has no MTP layer ...". */
nx_status nx_mtp_unsupported_error(const nx_model *model, nx_error *err);

/* ===== The head ===== */

typedef struct nx_mtp_head nx_mtp_head;

/* A head for the target's model: its own KV cache (target's n_seq_max sequences, n_ctx positions,
 * K / V cache types), scratch for up to the target's n_ubatch rows per forward chunk, the target's
 * thread pool (borrowed: the target context must outlive the head). Errors: no MTP layer
 * (NX_ERR_UNSUPPORTED), NX_ERR_NOMEM. */
nx_status nx_mtp_head_create(nx_ctx *target, nx_mtp_head **out, nx_error *err);
void      nx_mtp_head_free(nx_mtp_head *h);

/* Run n rows (any sequences; per sequence consecutive positions starting at or below the
 * positions it holds, which are dropped from there). hidden: [n][n_embd] conditioning rows.
 * h_out: [n][n_embd] post-shared_head_norm outputs (NULL: not wanted); logits: [n][n_vocab] for
 * every row (NULL: none computed). Errors: bad rows (NX_ERR_INVALID_ARG / NX_ERR_RANGE). */
nx_status nx_mtp_head_forward(nx_mtp_head *h, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                              const float *hidden, float *h_out, float *logits, nx_error *err);
/* Positions a sequence holds in the head's KV (-1: bad id); drop everything from len on. */
int  nx_mtp_head_seq_len(const nx_mtp_head *h, nx_seq_id seq);
void nx_mtp_head_seq_trim(nx_mtp_head *h, nx_seq_id seq, int len);

/* ===== The drafter ===== */

/* The `mtp` drafter for sequences 0..n_seq_max-1 of the target context (borrowed; it must
 * outlive the drafter). Errors as nx_mtp_head_create. */
nx_status nx_mtp_drafter_create(nx_ctx *target, nx_drafter **out, nx_error *err);

/* For tests: the drafter's head (NULL if d is not an mtp drafter) and the number of committed
 * rows still queued for a sequence. */
nx_mtp_head *nx_mtp_drafter_head(nx_drafter *d);
int          nx_mtp_drafter_queued(const nx_drafter *d, nx_seq_id seq);

#endif
