/*
 * convert.h — Hugging Face checkpoint directory -> GGUF (`nextn convert`), as llama.cpp's
 * convert_hf_to_gguf.py writes it (facts: its conversion/qwen.py and base.py; nextn's loader
 * src/arch/qwen35.c and docs/spec qwen35.md are the target).
 *
 * Reads DIR/config.json (a nested text_config wins over the top level, as llama.cpp merges it),
 * the weights (model.safetensors, or the shards named by model.safetensors.index.json),
 * tokenizer.json + tokenizer_config.json (through the tokenizer converter, padded to vocab_size),
 * the chat template (tokenizer_config.json's chat_template, else chat_template.jinja) and
 * generation_config.json (general.sampling.* keys). Missing required files or config keys,
 * unsupported architectures and unknown tensors are errors naming the file / key / tensor.
 *
 * Architectures: Qwen3_5ForCausalLM / Qwen3_5ForConditionalGeneration (-> `qwen35`, text part
 * only: vision tensors are skipped), with the `mtp.*` weights as the NextN layer
 * `blk.{n_layer}.nextn.*` and block_count = num_hidden_layers + mtp_num_hidden_layers. Value
 * transforms: every `*norm.weight` but the DeltaNet gated norm stored as 1 + w, A_log as
 * -exp(A_log) (`ssm_a`), dt_bias renamed `ssm_dt.bias`, conv1d squeezed, V heads reordered from
 * grouped-by-K-head to tiled when the K and V head counts differ (in_proj_qkv V rows, in_proj_z /
 * in_proj_a / in_proj_b rows, A_log, dt_bias, conv1d V channels, out_proj columns). Arithmetic on
 * values runs in double and rounds once.
 *
 * Gemma4ForCausalLM / Gemma4ForConditionalGeneration (-> `gemma4`, text part; vision and audio
 * towers skipped) and Gemma4AssistantForCausalLM (-> `gemma4-assistant`): see convert_gemma4.c
 * (norms as they are, generated rope_freqs, layer_scalar / router / expert renames, the
 * assistant's backbone width, projections and centroid head). A quantized checkpoint
 * (config.json quantization_config, or an F8_E4M3 / F8_E5M2 tensor) is refused with a message.
 *
 * Types (--outtype): 1-D tensors, `*_norm.weight`, ssm_conv1d, routers and every name not ending
 * in `.weight` stay F32; the rest take the output type; Q8_0 falls back to F16 for a row length
 * not a multiple of 32 (llama.cpp's rules).
 *
 * Streaming: each tensor is read, transformed and converted in chunks of about 1M values inside
 * the GGUF writer's stream callback, every chunk written as it is done; peak memory is a few chunk
 * buffers, whatever the tensor and checkpoint sizes.
 * Nothing prints: progress goes to an optional callback.
 */
#ifndef NX_CONVERT_H
#define NX_CONVERT_H

#include <stdint.h>
#include "core/error.h"
#include "tensor.h"

typedef struct nx_convert_opts {
    const char *hf_dir;      /* required */
    const char *out_path;    /* required */
    nx_type     outtype;     /* NX_TYPE_F32, F16, BF16 or Q8_0 */
    /* Called before each tensor is written (i of n), may be NULL. */
    void (*progress)(void *user, int64_t i, int64_t n, const char *name, const char *src_dtype, nx_type type,
                     int n_dims, const int64_t *ne);
    void *user;
} nx_convert_opts;

nx_status nx_convert_hf(const nx_convert_opts *o, nx_error *err);

#endif
