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

#ifdef __cplusplus
}
#endif
#endif /* NEXTN_H */
