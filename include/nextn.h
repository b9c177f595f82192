/*
 * nextn.h — the public C API of libnextn.
 *
 * Contract: every function that can fail returns an nx_status (or NULL) and records a
 * specific message retrievable with nx_last_error() on the calling thread. Nothing in the
 * library prints (except through the log callback) or exits. Objects are opaque; whoever
 * creates an object frees it with the matching _free function.
 */
#ifndef NEXTN_H
#define NEXTN_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ===== Status and errors ===== */

typedef enum nx_status {
    NX_OK = 0,
    NX_ERR_INVALID_ARG,   /* caller passed something out of contract */
    NX_ERR_IO,            /* open/read/mmap failed */
    NX_ERR_FORMAT,        /* malformed file or data (GGUF, JSON, ...) */
    NX_ERR_UNSUPPORTED,   /* valid but not implemented (type, arch, feature) */
    NX_ERR_NOMEM,         /* allocation failed or a size limit was exceeded */
    NX_ERR_RANGE,         /* a count or position is out of range (e.g. prompt > context) */
    NX_ERR_INTERNAL,      /* a bug: an invariant failed */
} nx_status;

/* Short constant name of a status ("NX_ERR_FORMAT"). */
const char *nx_status_str(nx_status s);

/* Message of the last failed API call on this thread ("" if none). Valid until the next call. */
const char *nx_last_error(void);

/* ===== Version ===== */

const char *nx_version(void);

/* ===== Logging ===== */

typedef enum nx_log_level {
    NX_LOG_DEBUG = 0,
    NX_LOG_INFO  = 1,
    NX_LOG_WARN  = 2,
    NX_LOG_ERROR = 3,
    NX_LOG_NONE  = 4,
} nx_log_level;

/* Receives every log line at or above the set level. msg has no trailing newline. */
typedef void (*nx_log_fn)(nx_log_level level, const char *msg, void *user);

/* Install a log callback (NULL restores the default: stderr). min_level filters. */
void nx_log_set(nx_log_fn fn, void *user, nx_log_level min_level);

/* ===== Models, contexts, batches ===== */

typedef struct nx_model nx_model;   /* weights (views into the mmapped GGUF) + hyper-parameters */
typedef struct nx_ctx   nx_ctx;     /* per-run state: KV cache, recurrent state, scratch */
typedef struct nx_batch nx_batch;   /* tokens to process in one forward pass */

typedef int32_t nx_token;
typedef int32_t nx_pos;
typedef int32_t nx_seq_id;

typedef struct nx_model_params {
    int  n_threads;       /* 0 = number of physical cores */
    bool use_mmap;        /* true (default): weights stay views into the file */
} nx_model_params;

nx_model_params nx_model_default_params(void);

/* Load a GGUF model (split files `-0000N-of-0000M.gguf` are found from the first part). */
nx_status nx_model_load(const char *path, const nx_model_params *params, nx_model **out);
void      nx_model_free(nx_model *model);

/* Architecture string from general.architecture ("qwen35", "gemma4", ...). */
const char *nx_model_arch(const nx_model *model);
/* Human-readable summary (name, arch, parameters, size, types) into buf; returns bytes needed. */
size_t nx_model_describe(const nx_model *model, char *buf, size_t buf_size);

/* A batch holds up to n_max tokens; each token has a position, a sequence and a logits flag. */
nx_batch *nx_batch_create(int n_max);
void      nx_batch_free(nx_batch *batch);
void      nx_batch_clear(nx_batch *batch);
nx_status nx_batch_add(nx_batch *batch, nx_token tok, nx_pos pos, nx_seq_id seq, bool want_logits);
int       nx_batch_size(const nx_batch *batch);
/* Keep the recurrent state after every token of this batch (speculative verify), so that
 * nx_seq_rm() can roll a sequence back to any position inside the batch without re-decoding.
 * At most NX_SNAPSHOT_MAX tokens per sequence in such a batch. Cleared by nx_batch_clear(). */
#define NX_SNAPSHOT_MAX 64
void      nx_batch_set_snapshots(nx_batch *batch, bool on);

/* Model facts. */
int nx_model_n_vocab(const nx_model *model);
int nx_model_n_embd(const nx_model *model);
int nx_model_n_ctx_train(const nx_model *model);
/* True if this architecture has a forward pass (else the model is inspect-only). */
bool nx_model_can_run(const nx_model *model);

/* ===== Contexts: decoding ===== */

/* KV cache types (llama.cpp's -ctk / -ctv): Q8_0 / Q4_0 are ggml's 32-value blocks and need
 * head dimensions that are multiples of 32 (else nx_ctx_create fails with NX_ERR_UNSUPPORTED). */
typedef enum nx_cache_type {
    NX_CACHE_F32 = 0,
    NX_CACHE_F16 = 1,
    NX_CACHE_Q8_0 = 2,
    NX_CACHE_Q4_0 = 3,
    NX_CACHE_BF16 = 4,
} nx_cache_type;
/* The types' names as the flags spell them: "f32", "f16", "q8_0", "q4_0", "bf16". */
#define NX_CACHE_TYPE_NAMES "f32, f16, bf16, q8_0, q4_0"
const char *nx_cache_type_name(nx_cache_type t);
/* Parse a name (one of NX_CACHE_TYPE_NAMES); false (out unchanged) for anything else. */
bool        nx_cache_type_parse(const char *name, nx_cache_type *out);

typedef struct nx_ctx_params {
    int n_ctx;            /* positions per sequence; 0 = min(training context, 4096) */
    int n_ubatch;         /* rows per forward chunk (-ub); 0 = 512 */
    int n_seq_max;        /* sequences (ids 0..n_seq_max-1); 0 = 1 */
    int n_threads;        /* 0 = the model params' n_threads (0 there: physical cores) */
    nx_cache_type type_k; /* attention K cache (-ctk), default F16 (as llama.cpp) */
    nx_cache_type type_v; /* attention V cache (-ctv), default F16 */
} nx_ctx_params;

nx_ctx_params nx_ctx_default_params(void);

/* A context borrows the model (which must outlive it). Fails with NX_ERR_UNSUPPORTED and the
 * architecture's name when the model cannot run. */
nx_status nx_ctx_create(const nx_model *model, const nx_ctx_params *params, nx_ctx **out);
void      nx_ctx_free(nx_ctx *ctx);
int       nx_ctx_n_ctx(const nx_ctx *ctx);
int       nx_ctx_n_seq_max(const nx_ctx *ctx);
/* Memory of the context's sequence state: per_pos = bytes one more position of context costs a
 * sequence (K + V rows of every attention layer that grows with the context, all layers), fixed
 * = bytes per sequence that do not grow (recurrent state, sliding-window rings), total = bytes
 * allocated for all sequences (n_seq * (n_ctx * per_pos + fixed); snapshots not counted). */
typedef struct nx_ctx_memory { size_t per_pos, fixed, total; } nx_ctx_memory;
nx_ctx_memory nx_ctx_memory_info(const nx_ctx *ctx);

/* Run the model over a batch. Per sequence, the batch's tokens must have consecutive
 * positions starting at the sequence's next position (nx_seq_pos_next) or at 0, which
 * restarts the sequence. Rows from different sequences may be mixed. The values computed
 * for a row do not depend on the other rows of the batch (bit-identical). On failure the
 * batch's sequences are reset. Errors: NX_ERR_INVALID_ARG (bad token / sequence / order),
 * NX_ERR_RANGE (a position beyond the context). */
nx_status nx_decode(nx_ctx *ctx, const nx_batch *batch);

/* Logits (n_vocab floats) of row i of the last decoded batch; NULL unless the row asked. */
const float *nx_ctx_logits(const nx_ctx *ctx, int i);
/* The post-final-norm hidden state (n_embd floats) of row i of the last batch (every row). */
const float *nx_ctx_hidden(const nx_ctx *ctx, int i);

/* ===== Sequence state ===== */

/* Next position of a sequence (= positions held); -1 for a bad id. */
nx_pos    nx_seq_pos_next(const nx_ctx *ctx, nx_seq_id seq);
/* Remove positions [p0, p1) of a sequence (p0 < 0: from 0; p1 < 0: to the end). Only tails
 * can be removed; with recurrent layers a partial removal needs the snapshot of a batch
 * decoded with nx_batch_set_snapshots() (rolls back to the state after position p0 - 1). */
nx_status nx_seq_rm(nx_ctx *ctx, nx_seq_id seq, nx_pos p0, nx_pos p1);
/* dst := the first p1 positions of src (p1 < 0: all; p0 must be <= 0). */
nx_status nx_seq_cp(nx_ctx *ctx, nx_seq_id src, nx_seq_id dst, nx_pos p0, nx_pos p1);

#ifdef __cplusplus
}
#endif
#endif /* NEXTN_H */
