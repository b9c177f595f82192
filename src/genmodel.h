/*
 * genmodel.h — random-weight test models written as GGUF files (`nextn gen-model`).
 *
 * Each architecture declares its metadata and tensor list from a small JSON config; weights
 * are drawn from a seeded PRNG (deterministic for a given seed and config, on every machine)
 * and optionally quantized. Used by tests and benchmarks: the files must load in nextn and,
 * as far as the architecture goes, in llama.cpp-family engines (same keys and tensor names).
 * nx_genmodel_inflate() instead enlarges a real model without changing its outputs (below).
 */
#ifndef NX_GENMODEL_H
#define NX_GENMODEL_H

#include <stdbool.h>
#include "core/error.h"
#include "tensor.h"

typedef struct nx_genmodel_opts {
    const char *arch;         /* "llama" (generic dense transformer); more arrive with their issues */
    const char *config_json;  /* JSON text with hyper-parameters (NULL or "{}" = defaults) */
    uint64_t    seed;
    nx_type     wtype;        /* type of 2-D weight matrices (F32 default); 1-D tensors stay F32 */
    bool        q4_k_m;       /* with wtype Q4_K: llama.cpp's Q4_K_M mix (Q6_K output / tied token_embd,
                                 Q6_K attn_v and ffn_down in the layers its use_more_bits rule picks) */
    const char *out_path;
} nx_genmodel_opts;

nx_status nx_genmodel_write(const nx_genmodel_opts *opts, nx_error *err);

/* ===== Inflate (`nextn gen-model --inflate`, src/genmodel_inflate.c) =====
 *
 * Writes a larger copy of a real model that predicts exactly the same tokens but streams
 * memory like a large one (a bandwidth-bound benchmark without shipping one):
 *   - dead trunk layers appended up to n_layer, each of the kind the layer pattern gives its
 *     index (qwen35: full attention iff (i+1) % full_attention_interval == 0, else Gated
 *     DeltaNet): a copy of a source layer of that kind whose output projection (ssm_out /
 *     attn_output) and ffn_down are zero, so the residual stream passes unchanged;
 *   - every dense FFN (the MTP layer's too) widened to n_ff by units with random ffn_gate /
 *     ffn_up rows (uniform, std 1/sqrt(n_embd): activations stay finite) and zero ffn_down
 *     columns, so the added units add exactly 0;
 *   - the MTP (NextN) layers stay last, renumbered; block_count, feed_forward_length and the
 *     per-layer arrays follow. Everything else is copied byte for byte.
 * Exactness: a zero weight (zero blocks dequantize to exactly 0) times a finite activation is
 * exactly 0, so hidden states are bit-identical as long as the matmul sums a row's blocks in
 * an order that does not depend on the row length. With a `wtype` other than the source's,
 * the FFN tensors' original rows are converted (exact for F32; F16 / quantized types round).
 * The file is streamed tensor by tensor: memory holds the source mapping and one tensor. */
typedef struct nx_inflate_opts {
    const char *from_path;    /* source model (qwen35 with dense FFNs) */
    const char *out_path;
    int         n_layer;      /* trunk layers in the output (>= the source's; 0 = the source's) */
    int64_t     n_ff;         /* FFN width (>= every source layer's, a multiple of the FFN tensors'
                                 block size; 0 = the source's widest) */
    bool        set_wtype;    /* false: every FFN tensor keeps its source type */
    nx_type     wtype;        /* with set_wtype: type of the (widened) ffn_gate/up/down tensors */
    uint64_t    seed;         /* random gate/up rows */
} nx_inflate_opts;

typedef struct nx_inflate_info {
    int      n_layer_in, n_layer_out;   /* trunk layers */
    int      n_nextn;                   /* MTP layers (kept last) */
    int64_t  n_ff_in, n_ff_out;
    uint64_t bytes;                     /* size of the written file */
} nx_inflate_info;

/* info may be NULL. */
nx_status nx_genmodel_inflate(const nx_inflate_opts *opts, nx_inflate_info *info, nx_error *err);

/* Comma-separated list of the architectures the generator knows. */
const char *nx_genmodel_archs(void);

#endif
