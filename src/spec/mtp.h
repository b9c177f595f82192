/*
 * mtp.h — the `mtp` drafter over the qwen35 / qwen35moe MTP (NextN) head (arch/qwen35_mtp.h:
 * the head's forward, its draft LM head options), speculative.md §3, qwen35.md §6-7 + Decisions.
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
 *                    per still-drafting request; the draft head's argmax with its probability per
 *                    row (no logits copy), --draft-p-min per sequence (nx_spec_pmin_step). Rows
 *                    above P are dropped afterwards (row P is real and stays).
 *   begin_keep(keep) prefix reuse: head KV rows / queued rows below keep stay, the rest goes,
 *                    h_last = the trunk hidden at keep - 1 (the engine saves it per checkpoint).
 * Promises: per-sequence state only; the target context is only borrowed for its model and thread
 * pool (never its KV or outputs); after the drafter has seen a committed stream, its KV equals a
 * fresh warm-up over the same tokens bit for bit (whatever the draft head: it only picks drafts).
 * Never: print, allocate per call after creation (buffers are sized at create), keep pointers into
 * the rows / requests it is handed, call a kernel (the head computes).
 */
#ifndef NX_SPEC_MTP_H
#define NX_SPEC_MTP_H

#include <stdbool.h>
#include "nextn.h"
#include "core/error.h"
#include "spec/drafter.h"
#include "arch/qwen35_mtp.h"

/* ===== The drafter ===== */

/* The `mtp` drafter for sequences 0..n_seq_max-1 of the target context (borrowed; it must
 * outlive the drafter). Errors as nx_mtp_head_create. */
nx_status nx_mtp_drafter_create(nx_ctx *target, nx_drafter **out, nx_error *err);
/* The same with a cheaper draft head (opts: qwen35_mtp.h; NULL = the model's head). */
nx_status nx_mtp_drafter_create_opts(nx_ctx *target, const nx_mtp_head_opts *opts, nx_drafter **out, nx_error *err);

/* For tests: the drafter's head (NULL if d is not an mtp drafter) and the number of committed
 * rows still queued for a sequence. */
nx_mtp_head *nx_mtp_drafter_head(nx_drafter *d);
int          nx_mtp_drafter_queued(const nx_drafter *d, nx_seq_id seq);

#endif
