/*
 * quantize.h — whole-model quantization (`nextn quantize`), as llama.cpp's llama-quantize does it
 * (facts: docs/spec/quantize.md).
 *
 * A preset (llama.cpp's file type: Q4_K_M, Q8_0, IQ4_XS, ...) gives a default weight type and
 * llama.cpp's per-tensor rules (llama_tensor_get_type): the output matrix (or the tied
 * token_embd) Q6_K; in the *_M mixes attn_v and ffn_down Q6_K in the layers use_more_bits picks
 * (the first and last eighth and every third one between), attn_qkv one step up; Q4_K_S /
 * Q3_K_* / Q2_K / IQ4_* their own bumps; a type whose block does not divide a row falls back
 * (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS / Q2_K / Q3_K -> IQ4_NL, then F16).
 * Quantized: 2-D+ tensors named *weight except norms, ssm_conv1d, the MoE router
 * (ffn_gate_inp), position / token-type embeddings (and output.weight with leave_output).
 * Everything else is copied byte for byte, as are all key/values; general.file_type is set.
 *
 * MTP / NextN layers (blk.N.nextn.*, and that layer's attention / FFN): kept, and quantized by the
 * same rules as the trunk layers (they are counted in the layer counters the *_M rules use, as
 * llama.cpp counts them); nextn.eh_proj takes the default type; its norms stay F32.
 *
 * Streaming: the input is mapped; each output tensor is produced by the GGUF writer's fill
 * callback (dequantize rows -> quantize rows, split over the thread pool; rows are independent, so
 * the bytes do not depend on the thread count), and the source pages are dropped from the process
 * once written, so resident memory is about one tensor (696 MB Q8_0 -> Q4_K_M: 23 MB max RSS). A tensor that is already quantized is re-quantized only with
 * allow_requantize (else an error, as llama.cpp). With an imatrix, types that have a weighted
 * path use the tensor's entry (per expert for 3-D tensors); a tensor without an entry
 * quantizes unweighted. Nothing prints: progress goes to an optional callback.
 */
#ifndef NX_QUANTIZE_H
#define NX_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>
#include "core/error.h"
#include "imatrix.h"
#include "tensor.h"

/* A preset: llama.cpp's name and file type id (general.file_type), its default weight type. */
typedef struct nx_quant_preset {
    const char *name;      /* "Q4_K_M" */
    int         ftype;     /* llama_ftype (LLAMA_FTYPE_MOSTLY_Q4_K_M = 15) */
    nx_type     type;      /* default weight type */
    const char *desc;
} nx_quant_preset;

/* By name (case-insensitive, llama-quantize's aliases Q4_K = Q4_K_M, Q5_K = Q5_K_M, Q3_K = Q3_K_M)
 * or by file type number ("15"); NULL when unknown. */
const nx_quant_preset *nx_quant_preset_find(const char *name);
/* The list, for usage text: the i-th preset or NULL past the end. */
const nx_quant_preset *nx_quant_preset_at(int i);

/* What the rules need to know about the model and the tensor's place in it. */
typedef struct nx_quant_ctx {
    int  n_layer;        /* block_count (MTP layers included) */
    int  n_attention_wv; /* tensors named attn_v / attn_qkv / attn_kv_b (llama.cpp's count) */
    int  i_attention_wv; /* attn_v tensors seen so far (the rule advances it) */
    int  i_ffn_down;     /* ffn_down* tensors seen so far (the rule advances it) */
    int  n_gqa;          /* head_count / head_count_kv (0: unknown) */
    int  n_expert;       /* expert_count (0: dense) */
    bool has_output;     /* the model has output.weight (else token_embd is the output) */
    bool has_imatrix;
} nx_quant_ctx;

/* The type llama.cpp's rules give a 2-D+ weight `name` of shape ne under preset p (before the
 * --token-embedding-type / --output-tensor-type overrides and the block-size fallback). Advances
 * the counters in q for attn_v / ffn_down tensors, so call it once per tensor in file order. */
nx_type nx_quant_rule_type(const nx_quant_preset *p, nx_quant_ctx *q, const char *name, const int64_t *ne);
/* The fallback for a type whose block does not divide ne0 (ne0 itself when it does). */
nx_type nx_quant_fallback_type(nx_type t, int64_t ne0);
/* llama.cpp's use_more_bits(i, n). */
bool nx_quant_use_more_bits(int i, int n);
/* Whether a tensor is quantized at all (name / shape rules above). */
bool nx_quant_wants(const char *name, int n_dims, bool leave_output);

/* llama-quantize's --tensor-type PATTERN=TYPE: tensors whose name the (POSIX extended) regular
 * expression matches anywhere take TYPE (the first matching override wins), after the rules. */
typedef struct nx_quant_override {
    const char *pattern;
    nx_type     type;
} nx_quant_override;

typedef struct nx_quantize_opts {
    const char *in_path, *out_path;
    const nx_quant_preset *preset;
    int  n_threads;                  /* <= 0: physical cores */
    bool allow_requantize;           /* --allow-requantize */
    bool leave_output;               /* --leave-output-tensor */
    bool pure;                       /* --pure: every quantized tensor takes the default type */
    nx_type output_type, embd_type;  /* --output-tensor-type / --token-embedding-type (NX_TYPE_COUNT: none) */
    const nx_quant_override *overrides;   /* --tensor-type, n_overrides of them */
    int n_overrides;
    const nx_imatrix *imatrix;       /* NULL: none */
    const char *imatrix_path;        /* recorded in quantize.imatrix.file */
    /* per tensor, before it is written: index, count, name, types, bytes in / out */
    void (*progress)(void *user, int i, int n, const char *name, const int64_t *ne, nx_type from, nx_type to,
                     uint64_t bytes_in, uint64_t bytes_out, bool weighted);
    void *progress_user;
} nx_quantize_opts;

typedef struct nx_quantize_info {
    uint64_t bytes_in, bytes_out;   /* tensor data */
    int n_tensors, n_quantized, n_weighted;
} nx_quantize_info;

/* info may be NULL. No output file is left behind on failure. */
nx_status nx_quantize_model(const nx_quantize_opts *opts, nx_quantize_info *info, nx_error *err);

#endif
