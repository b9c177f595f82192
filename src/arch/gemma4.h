/*
 * gemma4.h — Gemma 4 (`gemma4`): hyper-parameters, weight table and the pieces of the target
 * forward pass that the assistant drafter (`gemma4-assistant`, src/spec/) reuses: the token
 * embedding, the RoPE settings per layer type and Q-only attention over the target's KV cache.
 *
 * Facts: docs/spec/gemma4.md (Decisions first). Layer i is sliding-window (SWA) iff
 * sliding_window_pattern[i]; SWA and full layers have their own head dims, kv heads, RoPE base
 * and n_rot; full layers use the proportional partial RoPE factors of `rope_freqs`. Layers
 * il >= n_layer - shared_kv_layers own no KV and read the cache of the last KV-owning layer of
 * their type. Attention scale 1.0; V is RMS-normed without weight and never roped; a missing
 * attn_v means V = K projection (k_eq_v). Norm weights are used as stored.
 * KV: KV-owning layers get cache layers 0..n_kv-1; SWA ones are rings of sliding_window - 1 +
 * n_ubatch cells per sequence (kv.h), so their memory does not grow with the context.
 * Must never: allocate in the forward pass (scratch is sized at context creation).
 */
#ifndef NX_ARCH_GEMMA4_H
#define NX_ARCH_GEMMA4_H

#include "arch/arch.h"
#include "ctx.h"
#include "kernels/ops.h"

typedef struct g4_layer {
    int il;
    bool swa;                       /* sliding-window layer */
    bool has_kv;                    /* computes and stores its own K / V */
    bool k_eq_v;                    /* no attn_v: V = rms0(raw K projection) */
    bool moe;                       /* ffn_gate_inp present */
    int hd, nh, nkv, n_ff;          /* head dim, q heads, kv heads, dense FFN width */
    int kv_layer;                   /* cache layer read (own, or the source of a shared layer) */
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm;
    const nx_tensor *wq, *wk, *wv, *wo;
    const nx_tensor *gate, *up, *down;   /* dense FFN (the "shared" branch of MoE layers) */
    bool has_out_scale;
    float out_scale;                /* layer_output_scale */
    /* MoE */
    const nx_tensor *gate_inp;      /* router {n_embd, n_expert} */
    const nx_tensor *gate_up_exps;  /* fused {n_embd, 2F, X}: gate rows [0,F), up rows [F,2F); or NULL */
    const nx_tensor *gate_exps, *up_exps, *down_exps;
    const float *router_scale;      /* ffn_gate_inp.scale / sqrt(n_embd) (model-owned) */
    const float *exp_scale;         /* ffn_down_exps.scale [X] or NULL */
    const float *pre_ffw_norm_2, *post_ffw_norm_1, *post_ffw_norm_2;
    /* per-layer embeddings (P > 0) */
    const nx_tensor *inp_gate, *proj;
    const float *post_norm;
} g4_layer;

typedef struct g4_hparams {
    int n_layer, n_embd, n_vocab, n_ctx_train;
    float eps;
    int hd_full, hd_swa;            /* key_length, key_length_swa */
    int n_swa;                      /* sliding_window: a query at p sees p-n_swa+1..p */
    int n_shared, n_kv_from_start;  /* shared_kv_layers; layers below n_kv_from_start own KV */
    int n_rot_full, n_rot_swa;
    float base_full, base_swa, freq_scale;
    int P;                          /* embedding_length_per_layer_input (0: no PLE) */
    int n_expert, n_expert_used, n_ff_exp;
    float softcap;                  /* final_logit_softcapping; 0 = none */
    /* maxima over layers (scratch sizes) */
    int max_q, max_kv, max_hd, max_ff;
} g4_hparams;

typedef struct g4_model {
    g4_hparams hp;
    g4_layer *layers;
    int n_kv;                       /* KV-owning layers = cache layers */
    int last_kv[2];                 /* [swa?1:0]: last KV-owning layer of each type, -1 if none */
    const nx_tensor *tok_embd, *output;   /* output = token_embd when tied */
    const float *output_norm;
    const nx_tensor *ple_tok;       /* per_layer_token_embd {P*L, n_vocab} */
    const nx_tensor *ple_proj;      /* per_layer_model_proj {n_embd, P*L} */
    const float *ple_norm;          /* per_layer_proj_norm {P} */
    const float *rope_freqs;        /* [n_rot_full/2] or NULL */
    nx_rope_params rope_full, rope_swa;
} g4_model;

static inline const g4_model *g4_of(const nx_model *m) { return (const g4_model *)m->arch_data; }
static inline const nx_rope_params *g4_rope(const g4_model *gm, bool swa) { return swa ? &gm->rope_swa : &gm->rope_full; }

/* x[r] = token_embd[tok[r]] * sqrt(n_embd) (dequantized), r < n. */
void g4_embed(const g4_model *gm, const nx_token *tok, int n, float *x);

#endif
