/*
 * server.h — `nextn serve`'s HTTP surface (server.md): libmicrohttpd, one thread per connection,
 * JSON with cJSON, on top of a generation backend (backend.h).
 *
 * Endpoints: GET (and HEAD) /health (no auth), /v1/models (+ "<alias>-slotN" entries),
 * /v1/models/{id}, /props, /slots, /metrics; POST /v1/chat/completions, /v1/completions (OpenAI
 * shapes), /completion (llama.cpp's native shape), /tokenize, /detokenize (aliases: /models,
 * /models/{id}, /v1/props, /v1/health, /chat/completions, /completions — the last two OpenAI's).
 * Errors, OpenAI's shape {"error":{"message","type","param","code"}} (param: the field at fault
 * or null; code: a string or null) — 400 malformed JSON / wrong field types / out-of-range values
 * / n != 1 / prompt over the slot context (with the counts) / bad speculative.type; 401 missing or
 * wrong Bearer key; 404 unknown endpoint, unknown model (code "model_not_found"); 405 wrong method;
 * 413 body over max_body; 503 queue full (Retry-After) or shutting down / loading. (Malformed
 * Content-Length headers are refused by libmicrohttpd itself with its own 400 page.)
 * Connections: at most max_connections, max_connections_per_ip per client address, and each
 * request must arrive within read_timeout_s (conns.h). Every request ends with one access-log
 * line (nx_log_event "access": method, path, status, bytes, tokens, drafts, ms).
 * Streaming: SSE `data: {json}\n\n`, OpenAI endpoints end with `data: [DONE]`; llama.cpp's native
 * /completion ends with its `"stop": true` chunk, as llama-server does. Text never splits a
 * UTF-8 character. A client that disconnects cancels its generation at once.
 * Never: print (logs go through nx_log), exit, or crash / hang / leak on any request.
 */
#ifndef NX_SERVER_SERVER_H
#define NX_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include "core/error.h"
#include "server/backend.h"

/* Where a chat answer's reasoning (<think>...</think>, Gemma's thought channel) goes
 * (llama.cpp's --reasoning-format / request "reasoning_format"). */
typedef enum nx_reasoning_format {
    NX_REASONING_UNSET = 0,     /* a request that does not say: the server's */
    NX_REASONING_DEEPSEEK,      /* message.reasoning_content / delta.reasoning_content */
    NX_REASONING_NONE,          /* left in content as generated */
    NX_REASONING_DEEPSEEK_LEGACY, /* llama.cpp's: as deepseek, except that a stream sends the
                                   * thinking in delta.content, as <think>TEXT</think> */
} nx_reasoning_format;

/* "deepseek" | "auto" (= deepseek, as llama.cpp) | "deepseek-legacy" | "none" -> format; false
 * if unknown. */
bool nx_reasoning_format_parse(const char *name, nx_reasoning_format *out);

typedef struct nx_server_params {
    const char *host;           /* "127.0.0.1"; "::1" etc. for IPv6 */
    int    port;                /* 0: an ephemeral port (see nx_server_port) */
    const char *api_key;        /* NULL or "": no auth */
    size_t max_body;            /* bytes; default 8 MiB */
    int    conn_timeout_s;      /* idle keep-alive connections are closed after this; default 60 */
    int    max_connections;     /* open connections at most (more are refused at accept); default 256 */
    int    max_connections_per_ip; /* per client address; default 64; 0: no per-address limit */
    double read_timeout_s;      /* a request's headers and body must arrive within this, however
                                   slowly they trickle (conns.h); default 20; <= 0: none */
    nx_reasoning_format reasoning_format; /* chat answers; default deepseek */
} nx_server_params;

nx_server_params nx_server_default_params(void);

typedef struct nx_server nx_server;

/* Bind and start serving. The backend is borrowed: free it after nx_server_free(). */
nx_status nx_server_start(const nx_server_params *p, nx_gen_backend *be, nx_server **out, nx_error *err);
int  nx_server_port(const nx_server *s);
/* Graceful stop: stop accepting connections, give requests in flight up to grace_s seconds to
 * finish, cancel the rest (their streams end), close every connection. Idempotent. */
void nx_server_stop(nx_server *s, double grace_s);
void nx_server_free(nx_server *s);   /* stops (grace 0) if still running; NULL-safe */

#endif
