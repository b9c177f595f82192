/*
 * qwen35.h — Qwen3.5 / 3.6 (`qwen35`, `qwen35moe`): hyper-parameters, weight table and the
 * layer blocks, shared by the trunk forward (qwen35_forward.c) and the MTP head (issue 5).
 *
 * Facts: docs/spec/qwen35.md. Layer kind by tensor presence (ssm_conv1d => Gated
 * DeltaNet, attn_q => gated attention; full_attention_interval only as fallback). Layers
 * n_main..n_layer-1 are the MTP (NextN) layers: loaded and validated, not run by the trunk.
 * Norm weights are used as stored (the converter already added the +1).
 *
 * Blocks (all rows independent, bit-identical whatever else is in the batch):
 *   qw_attn_block:   x += gated attention(RMSNorm(x)) over a KV cache layer (any nx_kv, so the
 *                    MTP head can pass its own cache), rows at (seq, pos), causal by position.
 *   qw_ffn_block:    x += FFN(RMSNorm(x, post_attention_norm)) (dense SwiGLU or MoE + shared
 *                    expert); a layer without FFN (MTP of some dense models) leaves x as is.
 *   qw_output:       post-norm hidden of every row, logits of the rows asked for (LM head W).
 * Must never: allocate (scratch is sized at context creation for n_ubatch rows).
 */
#ifndef NX_ARCH_QWEN35_H
#define NX_ARCH_QWEN35_H

#include "arch/arch.h"
#include "ctx.h"
#include "kernels/ops.h"

typedef enum { QW_DELTANET = 0, QW_ATTN = 1 } qw_kind;

typedef struct qw_ffn {
    bool present;
    /* dense */
    const nx_tensor *gate, *up, *down;
    /* MoE: router, experts (3-D: {in, out, n_expert}), shared expert */
    const nx_tensor *gate_inp;
    const nx_tensor *gate_exps, *up_exps, *down_exps, *gate_up_exps;  /* gate_up_exps: merged, or NULL */
    nx_tensor gate_inp_shexp;          /* {E} seen as a 1-row matrix; data NULL if absent */
    const nx_tensor *gate_shexp, *up_shexp, *down_shexp;
} qw_ffn;

typedef struct qw_layer {
    int il;
    qw_kind kind;
    const float *attn_norm, *ffn_norm;     /* ffn_norm = post_attention_norm */
    /* gated attention */
    const nx_tensor *wq, *wk, *wv, *wo;    /* wq: per head [q (D) | gate (D)] */
    const float *q_norm, *k_norm;
    int kv_layer;                          /* attention layer index in the trunk's nx_kv */
    /* Gated DeltaNet */
    const nx_tensor *wqkv, *wz, *wbeta, *walpha, *wout;
    const float *conv_t;                   /* ssm_conv1d transposed: [d_conv][conv_dim] (model-owned) */
    const float *dt_bias, *ssm_a, *ssm_norm;
    int rec_layer;                         /* recurrent layer index in the trunk's nx_kv */
    qw_ffn ffn;
} qw_layer;

typedef struct qw_mtp {
    qw_layer layer;                        /* kind QW_ATTN; kv_layer 0 (its own cache) */
    const nx_tensor *eh_proj;              /* {2E, E} or NULL: fusion is enorm(e) + hnorm(h) */
    const float *enorm, *hnorm;
    const float *shared_head_norm;         /* NULL if absent */
    /* The head's own embedding and LM head ({E, V}; NULL if absent, then the trunk's are used).
     * llama.cpp's NextN names; Qwen3.5 checkpoints normally share the trunk's, some conversions
     * carry copies (possibly fine-tuned or quantized differently). */
    const nx_tensor *embed_tokens, *shared_head_head;
} qw_mtp;

typedef struct qw_hparams {
    bool moe;
    int n_layer, n_main, n_nextn;
    int n_embd, n_vocab, n_ctx_train;
    float eps;
    /* attention */
    int n_head, n_head_kv, head_dim, n_rot, sections[4], interval;
    float freq_base, freq_scale;
    /* Gated DeltaNet */
    int d_conv, dk, dv, nk, nv, key_dim, value_dim, conv_dim;
    /* FFN */
    int n_ff, n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
} qw_hparams;

typedef struct qw_model {
    qw_hparams hp;
    qw_layer *layers;                      /* n_main trunk layers */
    qw_mtp *mtp;                           /* n_nextn heads; the last one is used (spec §0) */
    int n_attn, n_rec;                     /* trunk attention / DeltaNet layers */
    const nx_tensor *tok_embd, *output;    /* output = token_embd when tied */
    const nx_tensor *tok_embd_mtp;         /* the used head's embed_tokens, else token_embd */
    const nx_tensor *output_mtp;           /* the used head's shared_head_head, else output_extra, else output */
    const float *output_norm;
    nx_rope_params rope;
    unsigned char *rope_pos0;              /* [n_rot/2]: 1 = IMROPE pair in the e-section (position 0 for text) */
} qw_model;

/* Per-context scratch for n_ubatch rows (see qwen35_forward.c for the sizes). */
typedef struct qw_scratch qw_scratch;

static inline const qw_model *qw_of(const nx_model *m) { return (const qw_model *)m->arch_data; }

/* Embedding rows: x[r] = table[tok[r]] (dequantized); table is token_embd or tok_embd_mtp. */
void qw_embed(const qw_model *qm, const nx_tensor *table, const nx_token *tok, int n, float *x);

/* The blocks (see top). x is [n][n_embd]; pos / seq per row. */
nx_status qw_attn_block(nx_ctx *ctx, qw_scratch *s, const qw_layer *L, nx_kv *kv, int n, const nx_pos *pos,
                        const nx_seq_id *seq, float *x, nx_error *err);
nx_status qw_ffn_block(nx_ctx *ctx, qw_scratch *s, const qw_layer *L, int n, float *x, nx_error *err);

/* Scratch for a context (n_rows rows, attention over up to n_ctx positions). */
nx_status qw_scratch_create(const qw_model *qm, int n_rows, int n_ctx, int n_threads, qw_scratch **out, nx_error *err);
void qw_scratch_free(qw_scratch *s);
/* A [n_rows][n_embd] float buffer of the scratch that blocks never touch (for callers). */
float *qw_scratch_x(qw_scratch *s);

#endif
