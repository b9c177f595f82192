/*
 * llama.h — llama.cpp's `llama` architecture: a dense pre-norm transformer (RMSNorm, GQA
 * attention with NORM RoPE, SwiGLU FFN). It is the generic small model of the tests (issue 16:
 * a draft or a target next to qwen35 / gemma4) and reads the llama GGUFs llama.cpp writes.
 *
 * Facts (llama.cpp's loader and graph for LLM_ARCH_LLAMA): tensors token_embd, blk.N.{attn_norm,
 * attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm,
 * output (absent: tied to token_embd), optional rope_freqs (per-pair divisors of theta, Llama 3.1);
 * keys llama.{context_length, embedding_length, block_count, feed_forward_length,
 * attention.head_count, attention.head_count_kv, attention.key_length / value_length (default
 * n_embd / n_head), attention.layer_norm_rms_epsilon, rope.dimension_count (default head dim),
 * rope.freq_base (default 10000), rope.scaling.type / factor (linear only), attention.scale
 * (default 1/sqrt(head dim))}. RoPE is LLAMA_ROPE_TYPE_NORM: adjacent pairs (x[2i], x[2i+1])
 * (the converter permutes Q and K rows so that this equals the checkpoint's rotate-half).
 * Refused with a message: attention biases, MoE layers (Mixtral's ffn_gate_inp), YaRN scaling.
 *
 * Rows are independent (decode == prefill, bit for bit; results do not depend on the batch or
 * the thread count): see llama_forward.c.
 */
#ifndef NX_ARCH_LLAMA_H
#define NX_ARCH_LLAMA_H

#include "arch/arch.h"
#include "ctx.h"
#include "kernels/ops.h"

typedef struct ll_layer {
    const float *attn_norm, *ffn_norm;
    const nx_tensor *wq, *wk, *wv, *wo;     /* {E, H*D}, {E, Hkv*D}, {E, Hkv*D}, {H*D, E} */
    const nx_tensor *gate, *up, *down;      /* {E, F}, {E, F}, {F, E} */
} ll_layer;

typedef struct ll_hparams {
    int n_layer, n_embd, n_vocab, n_ctx_train;
    int n_head, n_head_kv, head_dim, n_rot, n_ff;
    float eps, kq_scale;
} ll_hparams;

typedef struct ll_model {
    ll_hparams hp;
    ll_layer *layers;                       /* [n_layer] */
    const nx_tensor *tok_embd, *output;     /* output = token_embd when tied */
    const float *output_norm;
    nx_rope_params rope;                    /* NX_ROPE_NORMAL */
} ll_model;

static inline const ll_model *ll_of(const nx_model *m) { return (const ll_model *)m->arch_data; }

/* The context hooks (llama_forward.c). */
nx_status ll_ctx_init(nx_ctx *ctx, nx_error *err);
void ll_ctx_free(nx_ctx *ctx);
nx_status ll_forward(nx_ctx *ctx, const nx_ubatch *ub, nx_error *err);

#endif
