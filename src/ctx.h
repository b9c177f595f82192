/*
 * ctx.h — the context behind nx_ctx: thread pool, KV / recurrent state, scratch, outputs.
 *
 * nx_decode() validates a batch (tokens, sequence ids, consecutive positions per sequence,
 * context bounds), resets sequences that restart at position 0, reserves recurrent snapshot
 * slots for batches that ask for them, then feeds the batch to the architecture in ubatches
 * of at most n_ubatch rows. Outputs (logits of the rows that asked, post-norm hidden of every
 * row) stay valid until the next decode.
 * Promises: after the first decode of a given batch shape, a decode allocates nothing (output
 * buffers grow only when a batch needs more rows than any before). Never prints.
 */
#ifndef NX_CTX_H
#define NX_CTX_H

#include "nextn.h"
#include "kernels/matmul.h"
#include "kv.h"
#include "model.h"
#include "threads.h"

/* The nx_type a cache type stores (kv.h). */
nx_type   nx_ctx_kv_type(nx_cache_type t);
/* NX_ERR_UNSUPPORTED (naming `what`) unless head_dim is a multiple of the K and V types' block:
 * attention reads a head's slice of a row, which must be whole blocks. */
nx_status nx_ctx_check_head_dim(const nx_ctx_params *p, int head_dim, const char *what, nx_error *err);

struct nx_ctx {
    const nx_model *model;
    nx_ctx_params params;           /* resolved (no zeros) */
    nx_threadpool *tp;
    nx_kv *kv;                      /* created by the arch's ctx_init */
    nx_matmul_scratch mm;           /* activation scratch of the matmuls */
    void *arch_state;               /* the arch's scratch */

    /* outputs of the last batch */
    int n_rows;                     /* rows of the last batch */
    int n_out;                      /* rows with logits */
    int *out_idx;                   /* per batch row: logits row or -1 */
    float *logits;                  /* [n_out][n_vocab] */
    float *hidden;                  /* [n_rows][n_embd] */
    int rows_cap, out_cap;

    /* ubatch bookkeeping, n_ubatch entries each (grp_off: +1) */
    int *order, *grp_seq, *grp_off, *rec_src, *rec_dst, *rec_done;
    bool *rec_log;
    /* per sequence: first / last position in the current batch (-1: absent) */
    int *b_first, *b_last, *b_count, *seen;
    bool *snap_skip;                /* per sequence: no snapshots in the next decode */
};

/* In the next nx_decode only (cleared by it), seq takes no recurrent snapshots even when the
 * batch asks for them: a prompt chunk riding in a verify batch (one snapshot per token would cost
 * a state copy each and count against NX_SNAPSHOT_MAX). Bad ids are ignored. */
void nx_ctx_skip_snapshots(struct nx_ctx *c, nx_seq_id seq);

/* Where the arch writes row r (batch index) of the outputs. */
static inline float *nx_ctx_hidden_row(struct nx_ctx *c, int r) { return c->hidden + (size_t)r * (size_t)c->model->n_embd; }
static inline float *nx_ctx_logits_row(struct nx_ctx *c, int r) {
    return c->out_idx[r] < 0 ? NULL : c->logits + (size_t)c->out_idx[r] * (size_t)c->model->n_vocab;
}

#endif
