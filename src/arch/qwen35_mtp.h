/*
 * qwen35_mtp.h — the qwen35 / qwen35moe MTP (NextN) head as a draft head: its forward pass with
 * its own per-sequence KV cache (qwen35.md §6-7 + Decisions). The `mtp` drafter (spec/mtp.h)
 * drives it and computes nothing itself.
 *
 * Forward, per row (token t, position q, sequence s, conditioning hidden h):
 *   x = eh_proj · [enorm(embd[t]) ; hnorm(h)]   (embedding first; enorm(e) + hnorm(h) without eh_proj)
 *   x += gated attention over the head's own KV of s (the row's K/V is written at q first)
 *   x += FFN (skipped when the layer has none)
 *   h_mtp = shared_head_norm(x) (or x), logits = output_mtp · h_mtp
 * embd is the head's blk.L.nextn.embed_tokens when the GGUF carries it, else token_embd;
 * output_mtp is its blk.L.nextn.shared_head_head, else output_extra, else output.
 * Row convention (Decisions 2): the row at q is fed (token q, trunk post-norm hidden q-1; zeros
 * for q = 0) and drafts token q+1. Rows are independent (bit-identical whatever else is in the
 * batch), as in the trunk.
 *
 * The draft LM head (nx_mtp_head_draft_rows) may be cheaper than the model's (opts):
 *   - a vocabulary subset: only the rows of the given token ids (the most frequent tokens), so a
 *     draft step reads N rows instead of n_vocab; the draft is the argmax over the subset and its
 *     probability the softmax over the subset;
 *   - a lower-precision copy (e.g. Q4_0 of a Q8_0 head), of the subset or of the whole head.
 * Drafts only propose tokens: the target verifies with its full head, so output stays lossless;
 * only acceptance can change. nx_mtp_head_forward always uses the model's full head (goldens).
 * Must never: allocate per call after creation, print.
 */
#ifndef NX_ARCH_QWEN35_MTP_H
#define NX_ARCH_QWEN35_MTP_H

#include <stdbool.h>
#include "nextn.h"
#include "core/error.h"
#include "tensor.h"

/* True if the model carries an MTP head nextn can run (qwen35 / qwen35moe with
 * nextn_predict_layers >= 1). */
bool nx_mtp_supported(const nx_model *model);
/* The error for a model without one: "--spec-type mtp: model 'NAME' (arch A) has no MTP layer ...". */
nx_status nx_mtp_unsupported_error(const nx_model *model, nx_error *err);

typedef struct nx_mtp_head nx_mtp_head;

typedef struct nx_mtp_head_opts {
    const int32_t *vocab;   /* draft head over these token ids only (distinct, < n_vocab); NULL: all */
    int n_vocab;            /* entries of vocab (ignored when vocab is NULL) */
    bool requant;           /* draft head requantized to head_type (false: the stored type) */
    nx_type head_type;
} nx_mtp_head_opts;

/* A head for the target's model: its own KV cache (target's n_seq_max sequences, n_ctx positions,
 * K / V cache types), scratch for up to the target's n_ubatch rows per forward chunk, the target's
 * thread pool (borrowed: the target context must outlive the head). opts NULL: the model's head.
 * Errors: no MTP layer (NX_ERR_UNSUPPORTED), a bad subset or head type (NX_ERR_INVALID_ARG),
 * NX_ERR_NOMEM. */
nx_status nx_mtp_head_create(nx_ctx *target, nx_mtp_head **out, nx_error *err);
nx_status nx_mtp_head_create_opts(nx_ctx *target, const nx_mtp_head_opts *opts, nx_mtp_head **out, nx_error *err);
void      nx_mtp_head_free(nx_mtp_head *h);

/* Run n rows (any sequences; per sequence consecutive positions starting at or below the
 * positions it holds, which are dropped from there). hidden: [n][n_embd] conditioning rows.
 * h_out: [n][n_embd] post-shared_head_norm outputs (NULL: not wanted); logits: [n][n_vocab] for
 * every row from the model's full head (NULL: none computed). Errors: bad rows (NX_ERR_INVALID_ARG
 * / NX_ERR_RANGE). */
nx_status nx_mtp_head_forward(nx_mtp_head *h, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                              const float *hidden, float *h_out, float *logits, nx_error *err);
/* The drafting form, n <= nx_mtp_head_max_rows rows, rows checked by the caller (the drafter): every
 * row goes into the KV; rows with want[r] get the draft head's argmax token and its probability,
 * packed in row order into am / ap ([number of wanted rows]). nx_mtp_head_hidden then holds the
 * wanted rows' h_mtp ([number of wanted rows][n_embd], row order; every row's when want is
 * NULL) until the next call: the other rows stop after the attention block (KV only). */
nx_status nx_mtp_head_draft_rows(nx_mtp_head *h, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                                 const float *hidden, const bool *want, int *am, float *ap, nx_error *err);
/* draft_rows with the model's full-head logits of the wanted rows instead ([number of wanted
 * rows][n_vocab], row order): sampled drafts draw from them. */
nx_status nx_mtp_head_draft_logits(nx_mtp_head *h, int n, const nx_token *tok, const nx_pos *pos, const nx_seq_id *seq,
                                   const float *hidden, const bool *want, float *logits, nx_error *err);
const float *nx_mtp_head_hidden(const nx_mtp_head *h);
int  nx_mtp_head_max_rows(const nx_mtp_head *h);
int  nx_mtp_head_n_embd(const nx_mtp_head *h);
int  nx_mtp_head_n_vocab(const nx_mtp_head *h);      /* the model's vocabulary */
int  nx_mtp_head_n_seq(const nx_mtp_head *h);
int  nx_mtp_head_n_ctx(const nx_mtp_head *h);
/* Rows and bytes of the draft head's LM matrix (what one draft step streams for it). */
int64_t nx_mtp_head_draft_vocab(const nx_mtp_head *h);
size_t  nx_mtp_head_draft_bytes(const nx_mtp_head *h);
nx_type nx_mtp_head_draft_type(const nx_mtp_head *h);
/* Positions a sequence holds in the head's KV (-1: bad id); drop everything from len on. */
int  nx_mtp_head_seq_len(const nx_mtp_head *h, nx_seq_id seq);
void nx_mtp_head_seq_trim(nx_mtp_head *h, nx_seq_id seq, int len);

#endif
