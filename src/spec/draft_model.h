/*
 * draft_model.h — the `draft` drafter: classic draft-model speculation with a separate, smaller
 * model of any architecture nextn runs (qwen35, qwen35moe, gemma4, llama), driven only through
 * the model / context API (nx_model_load, nx_ctx_create, nx_decode, nx_seq_rm) plus the
 * recurrent-state save / restore the engine's checkpoints use (kv.h).
 *
 * State: the draft model, its own context (KV per sequence, -cd positions, -ctkd / -ctvd cache
 * types, -td threads) and per sequence the committed tokens and how many of them the draft
 * context holds. Committed tokens (prompt rows, accepted drafts) are decoded lazily: together
 * with the next draft's first step (one draft batch for every sequence) or in sync().
 * Drafting: step 0 decodes [queued rows, id_last@P] for every request in one batch, step i
 * decodes d_i@P+i for every request still drafting; a draft is the argmax of the draft model's
 * logits (over the ids both vocabularies share), its probability the softmax's (p_min).
 * Rollback on accept(a): attention-only draft models drop the rows above P+a (nx_seq_rm);
 * draft models with recurrent layers (qwen35's DeltaNet) restore the state saved after step 0
 * (position P) and re-decode the accepted drafts with the next round's first step.
 * Prefix reuse: begin_keep keeps the rows shared with the new prompt (attention-only: any
 * length; recurrent: only when nothing must be cut, else the prompt prefix is re-decoded), no
 * hidden row needed.
 * A committed token the draft model does not know, or a position beyond its context, ends
 * drafting for the sequence until its next begin (output stays correct: drafts are proposals).
 * Never: print, touch the target context, allocate in the per-round path.
 */
#ifndef NX_SPEC_DRAFT_MODEL_H
#define NX_SPEC_DRAFT_MODEL_H

#include "nextn.h"
#include "core/error.h"
#include "gguf.h"
#include "spec/drafter.h"

typedef struct nx_draft_model_opts {
    int n_ctx;                   /* draft context positions (-cd); 0: the target context's */
    int n_threads;               /* -td; 0: the target context's */
    nx_cache_type type_k, type_v;/* -ctkd / -ctvd (default F16) */
} nx_draft_model_opts;

nx_draft_model_opts nx_draft_model_default_opts(void);

/* Load the draft model at path and make the drafter for n_seq sequences (ids 0..n_seq-1, at
 * most the target context's). Errors: the file (nx_model_load's message), an architecture
 * without a forward pass, a vocabulary the target cannot share (nx_spec_vocab_check). */
nx_status nx_draft_model_create(nx_ctx *target, const char *path, const nx_draft_model_opts *opts, int n_seq,
                                nx_drafter **out, nx_error *err);

/* The draft model / context of a `draft` drafter (NULL for another drafter). */
const nx_model *nx_draft_model_model(const nx_drafter *d);
nx_ctx         *nx_draft_model_ctx(nx_drafter *d);

/* Tokens a vocabulary may have more or fewer than the target's, and the first id whose text is
 * compared (llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE / SPEC_VOCAB_CHECK_START_TOKEN_ID). */
#define NX_SPEC_VOCAB_MAX_SIZE_DIFF 128
#define NX_SPEC_VOCAB_CHECK_START   5

/* llama.cpp's compatibility rule for a drafter's vocabulary: the same tokenizer model, the same
 * bos / eos ids, sizes within NX_SPEC_VOCAB_MAX_SIZE_DIFF, and the same token text for every id
 * from NX_SPEC_VOCAB_CHECK_START below the smaller size. A file without tokenizer metadata
 * (tokenizer.ggml.tokens) is checked by size only. what names the drafter's file in the error,
 * which names the first differing token ("... token 509 is '<|im_end|>' in the target but
 * '<|filler_509|>' in draft.gguf"). NX_ERR_UNSUPPORTED. */
nx_status nx_spec_vocab_check(const nx_gguf *target, int n_vocab_target, const nx_gguf *draft, int n_vocab_draft,
                              const char *what, nx_error *err);

#endif
