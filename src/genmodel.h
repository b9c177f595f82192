/*
 * genmodel.h — random-weight test models written as GGUF files (`nextn gen-model`).
 *
 * Each architecture declares its metadata and tensor list from a small JSON config; weights
 * are drawn from a seeded PRNG (deterministic for a given seed and config, on every machine)
 * and optionally quantized. Used by tests and benchmarks: the files must load in nextn and,
 * as far as the architecture goes, in llama.cpp-family engines (same keys and tensor names).
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

/* Comma-separated list of the architectures the generator knows. */
const char *nx_genmodel_archs(void);

#endif
