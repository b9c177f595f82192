/*
 * http_impl.h — what the server's HTTP files share (http.c: daemon, routing, auth, bodies, small
 * endpoints; http_gen.c: the completion endpoints). Not a public header.
 */
#ifndef NX_SERVER_HTTP_IMPL_H
#define NX_SERVER_HTTP_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <cjson/cJSON.h>
#include "server/conns.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/sbuf.h"
#include "server/server.h"

struct nx_server {
    nx_server_params p;
    char *api_key;              /* NULL: open */
    nx_gen_backend *be;
    struct MHD_Daemon *d;
    int port;
    nx_metrics *metrics;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_active;               /* completion requests in flight (under mu) */
    atomic_bool stopping;
    bool stopped;
    long created;               /* unix time at start (OpenAI "created" of models) */
    nx_conns conns;             /* open connections, read deadlines, access-log fields */
    bool conns_ok;
};

/* One HTTP request (MHD's per-request closure). */
typedef struct nx_http_req {
    nx_server *srv;
    struct MHD_Connection *conn;
    int route;
    nx_sbuf body;
    bool too_big;
    double t_arrival;
    char method[16];            /* for the access log */
    char path[200];
    char model_id[160];         /* GET /v1/models/{id} */
} nx_http_req;

/* Responses. Every one carries Content-Type and CORS headers. */
enum MHD_Result nx_http_reply(struct MHD_Connection *c, unsigned status, const char *ctype, const char *body, size_t n);
enum MHD_Result nx_http_reply_json(struct MHD_Connection *c, unsigned status, cJSON *j);   /* frees j */
/* OpenAI's error shape {"error":{"message","type","param","code"}}: param and code are strings or
 * null (NULL). nx_http_reply_error() picks the code from the status (401 invalid_api_key, ...). */
enum MHD_Result nx_http_reply_err(struct MHD_Connection *c, unsigned status, const char *type, const char *code,
                                  const char *param, const char *msg);
enum MHD_Result nx_http_reply_error(struct MHD_Connection *c, unsigned status, const char *type, const char *msg);
/* The connection's record (conns.h; NULL when unknown) and helpers that fill its access fields. */
nx_conn *nx_http_conn(struct MHD_Connection *c);
void nx_http_note_status(struct MHD_Connection *c, unsigned status);
void nx_http_note_bytes(struct MHD_Connection *c, size_t n);
void nx_http_note_tokens(struct MHD_Connection *c, int n_prompt, int n_gen, uint64_t draft_n, uint64_t draft_acc);
/* True when the peer closed the connection (checked without blocking). */
bool nx_http_client_gone(struct MHD_Connection *c);

/* The completion endpoints (http_gen.c). */
enum MHD_Result nx_http_completion(nx_http_req *r, nx_api_kind kind);
/* POST /apply-template (llama.cpp's): a chat completion request -> {"prompt": the text the
 * chat endpoint would tokenize (template rendered, BOS text the tokenizer adds stripped, a
 * forced call's start appended)}; nothing is generated. */
enum MHD_Result nx_http_apply_template(nx_http_req *r);

/* Count a completion request in / out of flight (graceful shutdown waits for zero). */
void nx_http_active_add(nx_server *s, int d);

/* JSON string of arbitrary bytes (invalid UTF-8 -> U+FFFD, NUL -> \u0000) as a cJSON raw node. */
cJSON *nx_http_json_bytes(const char *s, size_t n);

#endif
