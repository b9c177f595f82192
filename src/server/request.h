/*
 * request.h — JSON request bodies of the completion endpoints -> a validated generation request.
 *
 * One parser for /v1/chat/completions (OpenAI chat), /v1/completions (OpenAI completions) and
 * /completion (llama.cpp native). It checks every field it knows for its JSON type and range and
 * fails with an HTTP status, an OpenAI error type and a message naming the field: malformed JSON,
 * wrong types, out-of-range values, `n` != 1, unsupported features (echo, best_of, tools without
 * a template, json response formats, non-text message parts), a tool_choice naming a function
 * not in tools, an unknown reasoning_format are 400. Unknown fields are ignored (clients
 * send many). Chat messages are rendered with the backend's chat format; prompts given as text
 * stay text (the caller tokenizes), prompts given as token ids are kept as ids.
 * `model`, when given, must name the loaded model (nx_api_model_known), else 404
 * model_not_found; its "-slotN" / "-sN" form pins slot N when id_slot is absent.
 * Ranges where OpenAI is strict: temperature 0..2 (the native endpoint keeps llama.cpp's any
 * finite value, <= 0 greedy), top_p / min_p 0..1, max_tokens / max_completion_tokens >= 1 (the
 * native endpoint and `n_predict` keep llama.cpp's -1 = unlimited), top_k 0..n_vocab (0 = off,
 * as llama.cpp), presence / frequency penalty -2..2. Every error names its field in `param`.
 * Speculation fields: a "speculative" object {n_max, n_min, p_min, adaptive, type} or the flat
 * llama.cpp keys "speculative.n_max", ... ; type must name a drafter loaded at startup (else 400
 * naming the allowed ones).
 * Never: keep pointers into the body; crash or hang on any input (fuzzed: fuzz_server_request.c).
 */
#ifndef NX_SERVER_REQUEST_H
#define NX_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "server/backend.h"
#include "server/server.h"

typedef enum nx_api_kind {
    NX_API_CHAT = 0,            /* POST /v1/chat/completions */
    NX_API_COMPLETIONS,         /* POST /v1/completions */
    NX_API_NATIVE,              /* POST /completion */
} nx_api_kind;

typedef struct nx_api_error {
    int  http;                  /* 400, 401, 404, 413, 500, 503 ... */
    const char *type;           /* "invalid_request_error", "exceed_context_size_error", ... */
    const char *code;           /* OpenAI's error.code ("model_not_found", ...); NULL: null */
    char param[64];             /* the field at fault ("" : null) */
    char msg[NX_ERROR_MSG_MAX];
} nx_api_error;

/* Fill e (code and param cleared) and return NX_ERR_INVALID_ARG (NX_ERR_INTERNAL for 5xx). */
nx_status nx_api_fail(nx_api_error *e, int http, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

typedef struct nx_api_request {
    nx_api_kind kind;
    bool   stream;
    bool   include_usage;       /* stream_options.include_usage */
    char  *model;               /* as sent (NULL when absent) */
    char  *prompt_text;         /* text prompt / rendered chat (NULL when prompt_tokens) */
    size_t prompt_len;
    bool   prompt_special;      /* tokenize with special-token parsing (always, see llama.cpp) */
    nx_token *prompt_tokens;    /* prompt given as ids */
    int    n_prompt_tokens;
    bool   logprobs;            /* report logprobs (chat: logprobs; completions: logprobs >= 0; native: n_probs > 0) */
    int    top_logprobs;
    bool   return_tokens;       /* native: "return_tokens" */
    nx_gen_request gen;         /* prompt left empty (the caller tokenizes); stops / bias point below */
    char **stops;
    size_t *stop_lens;
    nx_logit_bias *bias;
    cJSON *tools;               /* chat with a template: the request's tools (calls are parsed back); NULL if none */
    bool   parallel_tools;      /* parallel_tool_calls (default true) */
    nx_reasoning_format reasoning_format; /* chat: "reasoning_format" (UNSET when absent) */
    char  *tool_choice_name;    /* tool_choice {"type":"function","function":{"name"}}; NULL otherwise */
    bool   tool_required;       /* tool_choice "required" or a named function */
    char  *prefill;             /* the answer's start written into the prompt (a forced call's opener,
                                   see request.c force_call); NULL: none. The model's text continues it */
    size_t prefill_len;
} nx_api_request;

/* Parse and validate `body` for `kind`. On failure fills e (http + type + message) and returns
 * the status (out is left freed). info supplies the vocabulary, slots, drafters and chat format. */
nx_status nx_api_parse(nx_api_kind kind, const char *body, size_t len, const nx_gen_info *info,
                       nx_api_request *out, nx_api_error *e);
void nx_api_request_free(nx_api_request *r);   /* zeroes *r */

/* Is `name` a model this server serves? Known: the alias, the model file's base name (with or
 * without ".gguf"), each with "-slotN" or "-sN" (N < n_slots). *slot: N, or -1 for a bare name. */
bool nx_api_model_known(const nx_gen_info *info, const char *name, int *slot);

#endif
