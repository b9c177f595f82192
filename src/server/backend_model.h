/*
 * backend_model.h — the real generation backend for `nextn serve`: a GGUF model, its tokenizer,
 * one context with a sequence per slot, a multi-sequence speculative engine (src/spec/engine.h)
 * and one scheduler thread that runs every busy slot through ONE nx_spec_engine_step per round,
 * so speculation (when --spec-type is given) runs on all slots at once.
 * Promises: the backend.h contract (threads, cancellation, text filtering, timings), and
 *   - continuous batching: slot i is engine sequence i; a new prompt is processed in chunks that
 *     share each step's batch with the decoding slots (at most max_prompt_rows prompt rows per
 *     step, default -ub), so running requests keep producing tokens while a long prompt is read;
 *   - prefix reuse (cache_prompt, default true): a slot keeps its sequence's cache between
 *     requests; the engine reuses the longest shared prefix (recurrent layers from the deepest
 *     checkpoint at or below it; one every checkpoint_interval prompt tokens, at most
 *     max_checkpoints per slot) with results equal to a fresh run; timings.cache_n = tokens
 *     reused, prompt_n = tokens evaluated;
 *   - per-request speculative.{n_max,n_min,p_min,adaptive,type} applied to that request only
 *     (type selects among the chain stages loaded at startup, "none" drafts nothing);
 *   - logprobs: the chosen token's log-softmax of the raw logits and the top n_probs alternatives.
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
    nx_cache_type type_k, type_v;   /* -ctk / -ctv (default F16) */
    bool use_mmap;              /* true (default): weights are views of the file; false: --no-mmap */
    int  queue_max;             /* requests that may wait for a slot (default 64) */
    bool has_chat_format;       /* false: detect from the GGUF */
    nx_chat_format chat_format;
    const char *chat_template;  /* Jinja template text (--chat-template-file); NULL: the GGUF's
                                   tokenizer.chat_template, else the built-in chat_format */
    nx_spec_params spec;        /* drafters and defaults (n_types 0: speculation off) */
    int  checkpoint_interval;   /* --ctx-checkpoint-interval: recurrent-state checkpoint every N prompt
                                   tokens (default 512; 0: no checkpoints, less reuse on hybrid models) */
    int  max_checkpoints;       /* --ctx-checkpoints: per slot (default 8) */
    int  max_prompt_rows;       /* prompt rows per step over all slots (0: n_ubatch) */
} nx_gen_model_params;

nx_gen_model_params nx_gen_model_default_params(void);
/* Loads the model and tokenizer, creates the context and engine, starts the scheduler thread.
 * Errors: the file, a model that cannot run, a slot context under 8 positions, engine errors
 * (mtp on a model without an MTP layer unless spec.fallback). */
nx_status nx_gen_model_create(const nx_gen_model_params *p, nx_gen_backend **out, nx_error *err);

#endif
