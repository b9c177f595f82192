/*
 * model.h — the loaded model behind the public nx_model handle.
 *
 * A model owns its nx_gguf (the mapping) and refers to weights as views into it. When
 * general.architecture names an architecture with a forward pass (src/arch/arch.h), loading
 * also reads and validates its hyper-parameters and every tensor (one-line errors naming the
 * tensor and the expected shape); other architectures load inspect-only (describe, metadata)
 * and nx_ctx_create() refuses them naming the architecture.
 * Small derived copies (1-D weights converted to F32, transposed conv kernels) are owned by
 * the model and freed with it; large weights are never copied.
 */
#ifndef NX_MODEL_H
#define NX_MODEL_H

#include "nextn.h"
#include "gguf.h"

struct nx_arch;

struct nx_model {
    nx_gguf *gguf;        /* owned */
    char arch[64];        /* general.architecture */
    char name[128];       /* general.name, or the file's base name */
    nx_model_params params;
    const struct nx_arch *impl;  /* NULL: inspect-only */
    void *arch_data;      /* the architecture's hyper-parameters and weight table */
    int n_vocab, n_embd, n_ctx_train;
    void **owned;         /* derived buffers freed with the model */
    size_t packed_bytes;  /* of them, the matmul weights' packed copies (nx_model_pack_weight) */
    size_t n_owned, cap_owned;
    struct nx_threadpool *load_tp;   /* during nx_model_load only (packing); NULL: one thread */
};

/* A batch (nextn.h): parallel arrays of n rows. */
struct nx_batch {
    int n, cap;
    nx_token *tok;
    nx_pos *pos;
    nx_seq_id *seq;
    bool *logits;
    bool snapshots;
};

/* Flags of nx_model_tensor(). */
#define NX_T_OPTIONAL 1u  /* absent: *out = NULL, no error */
#define NX_T_MATMUL   2u  /* must be a type nx_matmul computes with */

/* Look up a tensor and check its shape: ne[0..n_dims-1] (an entry < 0 matches anything; dims
 * beyond n_dims must be 1). Errors name the tensor and the expected shape. */
nx_status nx_model_tensor(nx_model *m, const char *name, int n_dims, const int64_t *ne, unsigned flags,
                          const nx_tensor **out, nx_error *err);
/* The values of a (small) tensor as F32: a view for F32 data, else a dequantized copy owned by
 * the model. */
nx_status nx_model_f32(nx_model *m, const nx_tensor *t, const float **out, nx_error *err);
/* Loading state shared by the architectures' loaders: the first failure sticks in st, and every
 * later call is a no-op returning NULL. */
typedef struct nx_loader {
    nx_model *m;
    nx_error *err;
    nx_status st;
} nx_loader;

/* nx_model_tensor with a printf-formatted name and the shape as ne0, ne1, ne2. */
const nx_tensor *nx_loader_tensor(nx_loader *L, unsigned flags, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                                  const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A 1-D weight of n values (name: fmt with the layer index) as F32; NULL if absent and optional. */
const float *nx_loader_vec(nx_loader *L, unsigned flags, int64_t n, const char *fmt, int il);

/* Give a matmul weight of the model its packed copy (matmul.h: nx_matmul_pack) if the current
 * CPU level has one for it and the file is mapped; the original's mapped pages are released
 * (they come back from the file if read). nx_model_tensor does this for NX_T_MATMUL tensors;
 * call it for a tensor that becomes a matmul weight otherwise (a tied output head). */
void nx_model_pack_weight(nx_model *m, const nx_tensor *t);

/* A zeroed buffer owned by the model. */
void *nx_model_alloc(nx_model *m, size_t bytes, nx_error *err);

/* Metadata `<arch>.<suffix>` as an integer / float; per-layer arrays give element il (a
 * scalar applies to every layer; il < 0 takes element 0). False if absent or not numeric. */
bool nx_model_key_int(const nx_model *m, const char *suffix, int il, int64_t *out);
bool nx_model_key_float(const nx_model *m, const char *suffix, double *out);

#endif
