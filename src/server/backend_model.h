/*
 * backend_model.h — the real generation backend for `nextn serve`: a GGUF model, its tokenizer,
 * one context with a sequence per slot, a multi-sequence speculative engine (src/spec/engine.h)
 * and one scheduler thread that runs every busy slot through ONE nx_spec_engine_step per round,
 * so speculation (when --spec-type is given) runs on all slots at once.
 * Promises: the backend.h contract (threads, cancellation, text filtering, timings).
 * Limits for now: a slot's prompt is decoded whole when it is admitted (no chunk interleaving with
 * other slots' decoding), no prefix reuse (the engine restarts a sequence at position 0; the
 * cached tokens only steer slot choice), per-request `speculative.*` overrides are not applied
 * (the engine's drafters and lengths are fixed at create), logprobs are reported as 0 / no
 * alternatives.
 */
#ifndef NX_SERVER_BACKEND_MODEL_H
#define NX_SERVER_BACKEND_MODEL_H

#include "server/backend.h"

typedef struct nx_gen_model_params {
    const char *model_path;     /* required */
    const char *alias;          /* NULL: the file's base name without .gguf */
    int  n_slots;               /* -np, default 4 */
    int  n_ctx;                 /* -c: total positions, split evenly over the slots (default 4096) */
    int  n_ubatch;              /* prompt chunk rows (0: the context default) */
    int  n_threads;             /* 0: physical cores */
    int  queue_max;             /* requests that may wait for a slot (default 64) */
    bool has_chat_format;       /* false: detect from the GGUF */
    nx_chat_format chat_format;
    nx_spec_params spec;        /* drafters and defaults (n_types 0: speculation off) */
} nx_gen_model_params;

nx_gen_model_params nx_gen_model_default_params(void);
/* Loads the model and tokenizer, creates the context and engine, starts the scheduler thread.
 * Errors: the file, a model that cannot run, a slot context under 8 positions, engine errors
 * (mtp on a model without an MTP layer unless spec.fallback). */
nx_status nx_gen_model_create(const nx_gen_model_params *p, nx_gen_backend **out, nx_error *err);

#endif
