/*
 * arch.h — the interface every architecture with a forward pass implements (qwen35,
 * qwen35moe, gemma4 and its assistant, llama).
 *
 * load:     read hyper-parameters and the weight table of an opened model (m->gguf), validate
 *           every tensor (name + expected shape in the error), set m->n_vocab / n_embd /
 *           n_ctx_train and m->arch_data. Weights stay views into the mapping.
 * free:     release m->arch_data (buffers from nx_model_alloc are freed by the model).
 * ctx_init: create ctx->kv for ctx->params and the architecture's scratch (ctx->arch_state),
 *           sized for ctx->params.n_ubatch rows, so that forward never allocates.
 * forward:  run one ubatch (rows of one or more sequences, see nx_ubatch) through the model:
 *           update the KV / recurrent state, write the post-norm hidden of every row to
 *           nx_ctx_hidden_row() and the logits of rows that asked to nx_ctx_logits_row().
 * Every arch must keep rows independent (a row's values never depend on the other rows).
 */
#ifndef NX_ARCH_H
#define NX_ARCH_H

#include "core/error.h"
#include "model.h"

struct nx_ctx;

/* A chunk of a batch, rows grouped by sequence for the recurrent layers. */
typedef struct nx_ubatch {
    int n;                      /* rows */
    int row0;                   /* batch index of row 0 */
    const nx_token *tok;        /* per row (already offset by row0) */
    const nx_pos *pos;
    const nx_seq_id *seq;
    const bool *want_logits;
    int n_groups;               /* sequences present */
    const int *grp_seq;         /* [n_groups] */
    const int *grp_off;         /* [n_groups + 1]: rows of group g are order[grp_off[g] .. grp_off[g+1]) */
    const int *order;           /* row indices, grouped by sequence, increasing position */
    const int *rec_src;         /* per row: recurrent state read from slot (-1: live) */
    const int *rec_dst;         /* per row: recurrent state written to slot (-1: live) */
    /* per group, for deferred SSM state (kv.h): rows of the sequence in earlier ubatches of
     * this decode (0: its first ubatch, which applies the pending tokens), and whether its rows
     * are a snapshot batch (logged, not applied) */
    const int *rec_done;
    const bool *rec_log;
} nx_ubatch;

typedef struct nx_arch {
    const char *name;
    nx_status (*load)(nx_model *m, nx_error *err);
    void (*free)(nx_model *m);
    nx_status (*ctx_init)(struct nx_ctx *ctx, nx_error *err);
    void (*ctx_free)(struct nx_ctx *ctx);
    nx_status (*forward)(struct nx_ctx *ctx, const nx_ubatch *ub, nx_error *err);
} nx_arch;

extern const nx_arch nx_arch_qwen35;
extern const nx_arch nx_arch_qwen35moe;
extern const nx_arch nx_arch_gemma4, nx_arch_gemma4_assistant, nx_arch_gemma4_mtp;  /* gemma4.c */
extern const nx_arch nx_arch_llama;                                                  /* llama.c */

/* The implementation for general.architecture, or NULL. */
const nx_arch *nx_arch_find(const char *name);
/* Comma-separated names of the architectures that run. */
const char *nx_arch_names(void);

#endif
