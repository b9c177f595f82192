/*
 * backend.h — the interface between the HTTP surface (src/server/http*.c) and whatever generates
 * tokens: the real scheduler (one thread that runs the model over N slots with continuous batching
 * and speculation) or the deterministic fake (backend_fake.c) the tests use.
 *
 * Threads. HTTP connection threads call nx_gen_submit() / the tokenization hooks / info / slots;
 * the backend's own scheduler thread produces events. They meet in an nx_gen_stream: a
 * thread-safe event queue per request, reference-counted by its two ends:
 *
 *   HTTP thread                                   scheduler thread
 *   nx_gen_submit(be, req) -> stream   --->       ops->submit(stream): queue it (or refuse: full)
 *   nx_gen_stream_next(stream, 50 ms)  <---       nx_gen_stream_push(stream, token, text)   (many)
 *                                      <---       nx_gen_stream_finish(stream, reason, timings)
 *   nx_gen_stream_release(stream)                 (or nx_gen_stream_fail(stream, status, msg))
 *
 * Cancellation: nx_gen_stream_cancel() (and release() of an unfinished stream) sets a flag and
 * calls the backend's wake hook; the scheduler must look at nx_gen_stream_cancelled() before every
 * step, drop the request from its queue or slot at once and finish it with
 * NX_GEN_FINISH_CANCELLED. The HTTP side calls it when the client disconnects.
 *
 * Text. Token events carry the token id and the bytes to show for it, already
 *   - assembled into whole UTF-8 characters (a multi-byte character split over tokens arrives
 *     with the token that completes it; that token's text then holds the whole character), and
 *   - stop-string filtered: text that could be the start of a stop string is held back until
 *     it is known not to be; a matched stop string and everything after it are never sent.
 * nx_gen_textout (below) does both; every backend runs one per request.
 *
 * Statistics. Every finished request carries nx_gen_timings (prompt / generation counts and
 * times, draft counts per depth and per drafter); nx_gen_timings_round() counts one speculative
 * round the way the server reports it (`timings.draft_by_depth`, /metrics).
 *
 * Never: an event after finish/fail; a stream freed while either end holds it; printing.
 */
#ifndef NX_SERVER_BACKEND_H
#define NX_SERVER_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "nextn.h"
#include "core/error.h"
#include "sample.h"
#include "tokenizer.h"
#include "spec/drafter.h"
#include "spec/spec_params.h"
#include "server/chat.h"

#define NX_GEN_MAX_STOPS 16     /* stop strings per request */
#define NX_GEN_STOP_MAX_LEN 256 /* bytes per stop string */
#define NX_GEN_TOP_MAX 20       /* top_logprobs / n_probs */

/* ===== A request ===== */

/* Per-request speculation overrides (server.md "Per-request speculation fields"). */
typedef struct nx_gen_spec {
    bool         has_type;      /* speculative.type given: use only this drafter (NX_SPEC_NONE: off) */
    nx_spec_type type;
    int          n_max;         /* -1: server default */
    int          n_min;         /* -1: server default */
    float        p_min;         /* < 0: server default */
    int          adaptive;      /* -1: server default, 0 off, 1 on */
} nx_gen_spec;

typedef struct nx_gen_request {
    const nx_token *prompt;     /* tokenized prompt (BOS included if the vocab adds one) */
    int n_prompt;               /* >= 1 */
    int n_predict;              /* most tokens to generate; -1: until EOS or the slot's context end */
    int id_slot;                /* -1: the backend chooses (longest cached prefix, else LRU) */
    bool cache_prompt;          /* reuse the slot's cached prefix (default true) */
    bool ignore_eos;            /* EOS / EOT tokens do not end generation */
    int n_probs;                /* 0..NX_GEN_TOP_MAX: alternatives reported per token (logprobs) */
    bool want_logprob;          /* report the sampled token's log-probability */
    nx_sampler_params sampling; /* n_vocab filled; logit_bias points at n_logit_bias entries */
    nx_gen_spec spec;
    const char *const *stop;    /* stop strings (not NUL-free: stop_len gives the bytes) */
    const size_t *stop_len;
    int n_stop;                 /* 0..NX_GEN_MAX_STOPS */
} nx_gen_request;

/* Defaults: n_predict -1, id_slot -1, cache_prompt true, spec all "server default", sampling =
 * nx_sampler_default_params(n_vocab). */
void nx_gen_request_init(nx_gen_request *r, int32_t n_vocab);

/* ===== What a finished request reports ===== */

typedef struct nx_gen_stage_stats {
    char     name[16];          /* drafter name: "mtp", "ngram", ... */
    uint64_t drafted, accepted;
    uint64_t depth_drafted[NX_SPEC_DRAFT_CAP];   /* [i]: rounds of this stage with k >= i + 1 */
    uint64_t depth_accepted[NX_SPEC_DRAFT_CAP];  /* [i]: rounds of this stage with n >= i + 1 */
} nx_gen_stage_stats;

typedef struct nx_gen_timings {
    int      id_slot;           /* slot that ran it (-1: never admitted) */
    int      n_prompt;          /* prompt tokens of the request (= cache_n + prompt_n) */
    int      cache_n;           /* prompt tokens reused from the slot's cache */
    int      prompt_n;          /* prompt tokens evaluated */
    double   prompt_ms;
    int      predicted_n;       /* tokens generated */
    double   predicted_ms;      /* first generated token to the last */
    double   queue_ms;          /* submit to admission into a slot */
    uint64_t draft_n, draft_n_accepted;
    uint64_t depth_drafted[NX_SPEC_DRAFT_CAP];
    uint64_t depth_accepted[NX_SPEC_DRAFT_CAP];
    int      n_stages;
    nx_gen_stage_stats stage[NX_SPEC_MAX_STAGES];
} nx_gen_timings;

void nx_gen_timings_init(nx_gen_timings *t);
/* Name the drafters (chain stages) before counting rounds. n > NX_SPEC_MAX_STAGES is clamped. */
void nx_gen_timings_set_stages(nx_gen_timings *t, const char *const *names, int n);
/* One speculative round of the request: stage s drafted k tokens, n of them were accepted
 * (k = 0: a plain step, nothing counted). k and n are clamped to 0..NX_SPEC_DRAFT_CAP, n <= k. */
void nx_gen_timings_round(nx_gen_timings *t, int stage, int k, int n);

typedef enum nx_gen_finish {
    NX_GEN_FINISH_NONE = 0,
    NX_GEN_FINISH_EOS,          /* an end-of-generation token ("stop") */
    NX_GEN_FINISH_STOP,         /* a stop string matched ("stop") */
    NX_GEN_FINISH_LENGTH,       /* n_predict reached ("length") */
    NX_GEN_FINISH_CONTEXT,      /* the slot's context is full ("length") */
    NX_GEN_FINISH_CANCELLED,    /* cancelled (client gone, shutdown) */
} nx_gen_finish;

/* OpenAI's finish_reason: "stop", "length" or "cancelled". */
const char *nx_gen_finish_name(nx_gen_finish f);

/* ===== Events ===== */

typedef enum nx_gen_event_kind {
    NX_GEN_EV_TOKEN = 1,        /* one generated token */
    NX_GEN_EV_DONE,             /* the request ended normally (always the last event) */
    NX_GEN_EV_ERROR,            /* the request failed (always the last event) */
} nx_gen_event_kind;

typedef struct nx_gen_top {
    nx_token token;
    float    logprob;
} nx_gen_top;

typedef struct nx_gen_event {
    nx_gen_event_kind kind;
    char    *text;              /* bytes to show (may be empty; NUL-terminated; owned by the event).
                                   DONE: text released at the end (held-back bytes) */
    size_t   n_text;
    /* TOKEN */
    nx_token token;
    float    logprob;           /* of the sampled token (0 unless want_logprob) */
    int      n_top;
    nx_gen_top top[NX_GEN_TOP_MAX];
    /* DONE */
    nx_gen_finish finish;
    int      stop_index;        /* NX_GEN_FINISH_STOP: which stop string */
    nx_gen_timings timings;
    /* ERROR */
    nx_status status;
    char     msg[NX_ERROR_MSG_MAX];
    double   t;                 /* nx_gen_now() when it was pushed */
} nx_gen_event;

/* Free what an event owns (its text) and zero it. */
void nx_gen_event_clear(nx_gen_event *ev);

/* Monotonic clock in seconds. */
double nx_gen_now(void);

/* ===== Streams ===== */

typedef struct nx_gen_stream nx_gen_stream;

/* --- the HTTP side --- */

/* Wait up to timeout_ms for the next event (0: do not wait). Returns true and fills *ev (which
 * the caller clears) when there was one. After DONE / ERROR nothing more comes. */
bool nx_gen_stream_next(nx_gen_stream *s, nx_gen_event *ev, int timeout_ms);
/* Ask the backend to stop this request at once (idempotent, any thread). */
void nx_gen_stream_cancel(nx_gen_stream *s);
/* Drop the HTTP side's reference; cancels the request first if it has not ended. NULL-safe. */
void nx_gen_stream_release(nx_gen_stream *s);
uint64_t nx_gen_stream_id(const nx_gen_stream *s);

/* --- the backend side --- */

typedef void (*nx_gen_wake_fn)(void *user);

/* A stream holding a deep copy of req (prompt, stops, logit bias), with two references (the
 * HTTP side and the backend). wake(user) is called on cancel (may be NULL). */
nx_status nx_gen_stream_create(const nx_gen_request *req, uint64_t id, nx_gen_wake_fn wake, void *wake_user,
                               nx_gen_stream **out, nx_error *err);
const nx_gen_request *nx_gen_stream_request(const nx_gen_stream *s);
bool   nx_gen_stream_cancelled(const nx_gen_stream *s);
double nx_gen_stream_t_submit(const nx_gen_stream *s);
/* Queue a TOKEN event (text copied; top may be NULL when n_top = 0). */
nx_status nx_gen_stream_push(nx_gen_stream *s, nx_token token, const char *text, size_t n_text, float logprob,
                             const nx_gen_top *top, int n_top, nx_error *err);
/* Queue the DONE event with the released tail text and drop the backend's reference. */
void nx_gen_stream_finish(nx_gen_stream *s, nx_gen_finish finish, int stop_index, const char *text, size_t n_text,
                          const nx_gen_timings *t);
/* Queue an ERROR event and drop the backend's reference. */
void nx_gen_stream_fail(nx_gen_stream *s, nx_status status, const char *msg);

/* ===== Text output: UTF-8 assembly + stop strings (one per request, backend side) ===== */

typedef struct nx_gen_textout {
    nx_utf8_asm utf8;
    char  *hold;                /* complete characters not yet released */
    size_t n_hold, cap_hold;
    const char *const *stop;    /* borrowed from the request */
    const size_t *stop_len;
    int    n_stop;
    bool   stopped;
} nx_gen_textout;

void nx_gen_textout_init(nx_gen_textout *o, const char *const *stop, const size_t *stop_len, int n_stop);
void nx_gen_textout_free(nx_gen_textout *o);
/* Feed a token's piece. The bytes now safe to show are appended to *out / *n_out (malloc'ed,
 * grown as needed; the caller frees). Returns the index of the stop string that matched (the
 * text before it is released, it and the rest are dropped, later feeds release nothing), or -1. */
int nx_gen_textout_feed(nx_gen_textout *o, const char *piece, size_t n, char **out, size_t *n_out, size_t *cap_out);
/* End of generation: release whatever is held (incomplete UTF-8 included). */
void nx_gen_textout_flush(nx_gen_textout *o, char **out, size_t *n_out, size_t *cap_out);

/* ===== The backend ===== */

typedef struct nx_gen_info {
    char   alias[128];          /* model name the API shows (--alias, default the file's base name) */
    char   model_path[512];
    char   arch[64];
    bool   ready;               /* false while loading (/health 503) */
    int    n_slots;
    int    n_ctx_slot;          /* positions per slot */
    int    n_ctx_train;
    int32_t n_vocab;
    int    queue_max;           /* requests that may wait for a slot */
    nx_chat_format chat_format;
    const struct nx_chat_template *chat_template; /* the model's Jinja template, owned by the backend
                                   (NULL: the built-in chat_format) */
    const struct nx_chat_template *chat_template_tools; /* tokenizer.chat_template.tool_use: for requests
                                   with tools (NULL: chat_template) */
    bool   add_bos;             /* tokenize(add_special) prepends BOS */
    int    n_drafters;          /* drafters loaded at startup (chain order); 0: no speculation */
    nx_spec_type drafters[NX_SPEC_MAX_STAGES];
    nx_spec_params spec;        /* the server's speculation defaults */
    int    checkpoint_interval; /* prompt-cache checkpoints (model backend; 0 elsewhere) */
    int    max_checkpoints;
} nx_gen_info;

typedef struct nx_gen_slot_info {
    int      id;
    bool     busy;
    uint64_t request_id;        /* current (busy) or last request; 0: none yet */
    int      n_ctx;
    int      n_cached;          /* tokens of the slot's cached sequence */
    int      n_prompt, n_decoded;  /* of the current / last request */
    uint64_t n_requests;        /* requests served */
    uint64_t draft_n, draft_n_accepted;   /* since start */
    /* the draft policy's wall-clock guard (spec/policy.h) of the current / last request */
    bool     guard_off;         /* speculation held off: plain decoding measured faster */
    uint64_t guard_switches;    /* switches since start (all requests) */
    double   s_per_tok_spec, s_per_tok_plain;   /* measured, current / last request (0: none) */
} nx_gen_slot_info;

typedef struct nx_gen_load {
    int    n_busy;              /* slots generating */
    int    n_waiting;           /* requests queued for a slot */
    double kv_usage;            /* cached tokens / total context, 0..1 */
    int    n_guard_off;         /* slots whose guard holds speculation off */
    uint64_t guard_switches;    /* guard switches since start, all slots */
    /* what the draft policy learned, engine-wide (spec/policy.h; 0 = not measured): the verify
     * cost of n rows in seconds, and the greedy sequences' acceptance at depth i + 1 */
    double verify_s[NX_SPEC_DRAFT_CAP + 2];   /* [n], n = 1..NX_SPEC_VERIFY_ROWS_MAX (policy.h) */
    double accept_mem[NX_SPEC_DRAFT_CAP];
} nx_gen_load;

typedef struct nx_gen_backend nx_gen_backend;

typedef struct nx_gen_backend_ops {
    const char *name;           /* "fake", "model" */
    void      (*info)(nx_gen_backend *be, nx_gen_info *out);
    /* Text -> tokens (any thread). add_special: BOS/EOS as the vocab asks; parse_special: special
     * token text becomes the special token. Appends to out. */
    nx_status (*tokenize)(nx_gen_backend *be, const char *text, size_t n, bool add_special, bool parse_special,
                          nx_token_vec *out, nx_error *err);
    /* Tokens -> malloc'ed NUL-terminated text (any thread). special: render control tokens. */
    nx_status (*detokenize)(nx_gen_backend *be, const nx_token *ids, size_t n, bool special, char **out,
                            size_t *out_len, nx_error *err);
    /* Take a new stream (ownership of the backend's reference passes on success). Refusals:
     * NX_ERR_NOMEM "queue full" (-> 503 + Retry-After), NX_ERR_RANGE prompt longer than a slot,
     * NX_ERR_INVALID_ARG bad slot id / token / field, NX_ERR_UNSUPPORTED shutting down. */
    nx_status (*submit)(nx_gen_backend *be, nx_gen_stream *s, nx_error *err);
    /* Fill up to cap slots (returns the number of slots) and the load (may be NULL). */
    int       (*slots)(nx_gen_backend *be, nx_gen_slot_info *out, int cap, nx_gen_load *load);
    /* A stream was cancelled (any thread, no stream lock held): wake the scheduler. May be NULL. */
    void      (*wake)(nx_gen_backend *be);
    /* Refuse new requests and cancel every queued and running one (shutdown). */
    void      (*cancel_all)(nx_gen_backend *be);
    void      (*free)(nx_gen_backend *be);
} nx_gen_backend_ops;

/* Every implementation embeds this as its first member. */
struct nx_gen_backend {
    const nx_gen_backend_ops *ops;
    _Atomic uint64_t next_id;   /* request ids (nx_gen_submit); start zeroed */
};

/* The backend must outlive every stream it was given (free it after the HTTP side is stopped).
 * Validates req (prompt present and in the vocabulary, n_predict, n_probs, stops, id_slot range,
 * sampling params, speculative type among the drafters loaded), makes a stream with a fresh id
 * and hands it to the backend. Error codes as ops->submit. */
nx_status nx_gen_submit(nx_gen_backend *be, const nx_gen_request *req, nx_gen_stream **out, nx_error *err);
void nx_gen_backend_free(nx_gen_backend *be);   /* NULL-safe */

/* ===== The fake backend (tests, `serve --fake-backend`) ===== */

/* A deterministic "model" over a byte vocabulary: tokens 0..255 are bytes, 256 is EOS ("</s>"),
 * 257 BOS ("<s>", added by tokenize(add_special)). It generates the prompt's bytes back with
 * ASCII letters rot13'd (BOS skipped), then EOS; with ignore_eos it starts over. One scheduler
 * thread runs n_slots slots, one token (or one speculative round) per busy slot per step, then
 * sleeps step_us. With drafters "loaded", each round drafts k = min(n_max, left) tokens and
 * accepts (round * 7 + 3) % (k + 1) of them (stage = round % n_drafters), and emits n + 1
 * tokens. Slots keep their last sequence as a prompt cache. */
typedef struct nx_gen_fake_params {
    const char *alias;          /* default "fake" */
    int  n_slots;               /* default 4 */
    int  n_ctx_slot;            /* default 512 */
    int  queue_max;             /* default 64 */
    int  step_us;               /* sleep per step, default 1000 */
    int  prompt_us_per_token;   /* simulated prompt cost, default 0 */
    nx_chat_format chat_format; /* default ChatML */
    const char *chat_template;  /* Jinja template text (NULL: none); a prompt's last "<<answer:TEXT>>"
                                   makes the fake answer TEXT verbatim (scripted model output) */
    nx_spec_params spec;        /* drafters "loaded" and defaults (default: none) */
    bool loading;               /* report ready = false (health 503 test) */
} nx_gen_fake_params;

nx_gen_fake_params nx_gen_fake_default_params(void);
nx_status nx_gen_fake_create(const nx_gen_fake_params *p, nx_gen_backend **out, nx_error *err);

#endif
