/*
 * http.c — the server's daemon (libmicrohttpd, thread per connection), routing, auth, request
 * bodies with the size limit, graceful stop, and the small endpoints: /health, /v1/models,
 * /props, /slots, /metrics, /tokenize, /detokenize, /apply-template. The completion endpoints are in http_gen.c.
 * Promises: every response is JSON (or Prometheus text) with the error shape of server.md; a
 * request never reaches a handler without passing auth and the body limit.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "core/log.h"
#include "server/http_impl.h"

nx_server_params nx_server_default_params(void) {
    nx_server_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.max_body = 8u << 20;
    p.conn_timeout_s = 60;
    p.max_connections = 256;
    p.max_connections_per_ip = 64;
    p.read_timeout_s = 20;
    p.reasoning_format = NX_REASONING_DEEPSEEK;
    return p;
}

bool nx_reasoning_format_parse(const char *name, nx_reasoning_format *out) {
    if (!name) return false;
    if (!strcmp(name, "deepseek") || !strcmp(name, "auto")) { *out = NX_REASONING_DEEPSEEK; return true; }
    if (!strcmp(name, "none")) { *out = NX_REASONING_NONE; return true; }
    if (!strcmp(name, "deepseek-legacy")) { *out = NX_REASONING_DEEPSEEK_LEGACY; return true; }
    return false;
}

/* ===== Connection records (access-log fields) ===== */

nx_conn *nx_http_conn(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
    return ci ? ci->socket_context : NULL;
}

void nx_http_note_bytes(struct MHD_Connection *c, size_t n) {
    nx_conn *k = nx_http_conn(c);
    if (!k) return;
    nx_conns_lock(k->owner);
    k->acc.bytes += n;
    nx_conns_unlock(k->owner);
}

void nx_http_note_tokens(struct MHD_Connection *c, int n_prompt, int n_gen, uint64_t draft_n, uint64_t draft_acc) {
    nx_conn *k = nx_http_conn(c);
    if (!k) return;
    nx_conns_lock(k->owner);
    k->acc.has_tokens = true;
    k->acc.prompt_tokens = n_prompt;
    k->acc.gen_tokens = n_gen;
    k->acc.draft_n = draft_n;
    k->acc.draft_accepted = draft_acc;
    nx_conns_unlock(k->owner);
}

void nx_http_note_status(struct MHD_Connection *c, unsigned status) {
    nx_conn *k = nx_http_conn(c);
    if (!k) return;
    nx_conns_lock(k->owner);
    k->acc.status = (int)status;
    nx_conns_unlock(k->owner);
}

static void note_status(struct MHD_Connection *c, unsigned status, size_t bytes, const char *err) {
    nx_conn *k = nx_http_conn(c);
    if (!k) return;
    nx_conns_lock(k->owner);
    k->acc.status = (int)status;
    k->acc.bytes += bytes;
    if (err) snprintf(k->acc.error, sizeof k->acc.error, "%s", err);
    nx_conns_unlock(k->owner);
}

/* ===== Responses ===== */

enum MHD_Result nx_http_reply(struct MHD_Connection *c, unsigned status, const char *ctype, const char *body, size_t n) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    if (status == 503) MHD_add_response_header(resp, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    note_status(c, status, n, NULL);
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result nx_http_reply_json(struct MHD_Connection *c, unsigned status, cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        return nx_http_reply(c, 500, "application/json", oom, sizeof oom - 1);
    }
    enum MHD_Result ret = nx_http_reply(c, status, "application/json", s, strlen(s));
    free(s);
    return ret;
}

enum MHD_Result nx_http_reply_err(struct MHD_Connection *c, unsigned status, const char *type, const char *code,
                                  const char *param, const char *msg) {
    cJSON *j = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddItemToObject(e, "message", nx_http_json_bytes(msg, strlen(msg)));
    cJSON_AddStringToObject(e, "type", type);
    if (param && *param) cJSON_AddItemToObject(e, "param", nx_http_json_bytes(param, strlen(param)));
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    note_status(c, status, 0, msg);
    if (status >= 500 && status != 503) NX_ERROR("server: %u %s", status, msg);   /* 503: load, in the access line */
    return nx_http_reply_json(c, status, j);
}

enum MHD_Result nx_http_reply_error(struct MHD_Connection *c, unsigned status, const char *type, const char *msg) {
    const char *code = status == 401 ? "invalid_api_key" : status == 413 ? "request_too_large"
                     : status == 503 ? "unavailable" : NULL;
    if (!strcmp(type, "exceed_context_size_error")) code = "context_length_exceeded";
    return nx_http_reply_err(c, status, type, code, NULL, msg);
}

bool nx_http_client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    return false;
}

/* JSON text of bytes: valid UTF-8 is copied, invalid bytes become U+FFFD, controls are escaped. */
cJSON *nx_http_json_bytes(const char *s, size_t n) {
    nx_sbuf b = {0};
    nx_sbuf_add(&b, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char ch = u[i];
        if (ch < 0x80) {
            if (ch == '"') nx_sbuf_adds(&b, "\\\"");
            else if (ch == '\\') nx_sbuf_adds(&b, "\\\\");
            else if (ch == '\n') nx_sbuf_adds(&b, "\\n");
            else if (ch == '\r') nx_sbuf_adds(&b, "\\r");
            else if (ch == '\t') nx_sbuf_adds(&b, "\\t");
            else if (ch < 0x20 || ch == 0x7f) nx_sbuf_addf(&b, "\\u%04x", ch);
            else nx_sbuf_add(&b, &ch, 1);
            i++;
            continue;
        }
        /* Length and validity of a multi-byte sequence (no overlongs, no surrogates, <= U+10FFFF). */
        size_t len = ch >= 0xF0 && ch <= 0xF4 ? 4 : ch >= 0xE0 ? 3 : ch >= 0xC2 && ch <= 0xDF ? 2 : 0;
        bool ok = len > 0 && ch < 0xF5 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) ok = (u[i + k] & 0xC0) == 0x80;
        if (ok && len == 3) {
            if (ch == 0xE0 && u[i + 1] < 0xA0) ok = false;
            if (ch == 0xED && u[i + 1] >= 0xA0) ok = false;
        }
        if (ok && len == 4) {
            if (ch == 0xF0 && u[i + 1] < 0x90) ok = false;
            if (ch == 0xF4 && u[i + 1] >= 0x90) ok = false;
        }
        if (ok) {
            nx_sbuf_add(&b, u + i, len);
            i += len;
        } else {
            nx_sbuf_adds(&b, "\xEF\xBF\xBD");
            i++;
        }
    }
    nx_sbuf_add(&b, "\"", 1);
    char *p = nx_sbuf_take(&b, NULL);
    cJSON *j = p ? cJSON_CreateRaw(p) : NULL;
    free(p);
    return j ? j : cJSON_CreateString("");
}

void nx_http_active_add(nx_server *s, int d) {
    pthread_mutex_lock(&s->mu);
    s->n_active += d;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ===== Small endpoints ===== */

static enum MHD_Result h_health(nx_http_req *r) {
    nx_gen_info info;
    r->srv->be->ops->info(r->srv->be, &info);
    cJSON *j = cJSON_CreateObject();
    if (!info.ready) {
        cJSON_AddStringToObject(j, "status", "loading");
        return nx_http_reply_json(r->conn, 503, j);
    }
    nx_gen_load load = {0};
    r->srv->be->ops->slots(r->srv->be, NULL, 0, &load);
    cJSON_AddStringToObject(j, "status", "ok");
    cJSON_AddNumberToObject(j, "slots_idle", info.n_slots - load.n_busy);
    cJSON_AddNumberToObject(j, "slots_processing", load.n_busy);
    return nx_http_reply_json(r->conn, 200, j);
}

static cJSON *drafters_json(const nx_gen_info *info) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < info->n_drafters; i++) cJSON_AddItemToArray(a, cJSON_CreateString(nx_spec_type_name(info->drafters[i])));
    return a;
}

/* One /v1/models entry: the alias (slot -1) or its "-slotN" pinning form. */
static cJSON *model_json(const nx_server *srv, const nx_gen_info *info, int s) {
    char id[160];
    if (s < 0) snprintf(id, sizeof id, "%s", info->alias);
    else snprintf(id, sizeof id, "%s-slot%d", info->alias, s);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)srv->created);
    cJSON_AddStringToObject(m, "owned_by", "nextn");
    cJSON_AddNumberToObject(m, "max_model_len", info->n_ctx_slot);   /* vLLM's name: a request's context */
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx_slot", info->n_ctx_slot);
    cJSON_AddNumberToObject(meta, "n_ctx_train", info->n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_vocab", info->n_vocab);
    cJSON_AddNumberToObject(meta, "n_slots", info->n_slots);
    cJSON_AddStringToObject(meta, "chat_format", nx_chat_format_name(info->chat_format));
    cJSON_AddItemToObject(meta, "drafters", drafters_json(info));
    if (s >= 0) cJSON_AddNumberToObject(meta, "slot_pinned", s);
    return m;
}

static enum MHD_Result h_models(nx_http_req *r) {
    nx_gen_info info;
    r->srv->be->ops->info(r->srv->be, &info);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(j, "data");
    for (int s = -1; s < info.n_slots; s++) cJSON_AddItemToArray(data, model_json(r->srv, &info, s));
    return nx_http_reply_json(r->conn, 200, j);
}

/* GET /v1/models/{id}: any name the completion endpoints accept (request.h). */
static enum MHD_Result h_model(nx_http_req *r) {
    nx_gen_info info;
    r->srv->be->ops->info(r->srv->be, &info);
    int slot = -1;
    if (!nx_api_model_known(&info, r->model_id, &slot)) {
        char msg[400];
        snprintf(msg, sizeof msg, "The model '%.160s' does not exist (this server serves '%.100s')", r->model_id, info.alias);
        return nx_http_reply_err(r->conn, 404, "invalid_request_error", "model_not_found", "model", msg);
    }
    cJSON *m = model_json(r->srv, &info, slot);
    cJSON_SetValuestring(cJSON_GetObjectItem(m, "id"), r->model_id);   /* the name asked for */
    return nx_http_reply_json(r->conn, 200, m);
}

static enum MHD_Result h_props(nx_http_req *r) {
    nx_server *srv = r->srv;
    nx_gen_info info;
    srv->be->ops->info(srv->be, &info);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model_alias", info.alias);
    cJSON_AddStringToObject(j, "model_path", info.model_path);
    cJSON_AddStringToObject(j, "arch", info.arch);
    cJSON_AddStringToObject(j, "backend", srv->be->ops->name);
    cJSON_AddNumberToObject(j, "total_slots", info.n_slots);
    cJSON_AddNumberToObject(j, "n_ctx", (double)info.n_ctx_slot * info.n_slots);
    cJSON_AddNumberToObject(j, "n_ctx_slot", info.n_ctx_slot);
    cJSON_AddNumberToObject(j, "n_vocab", info.n_vocab);
    cJSON_AddStringToObject(j, "chat_format", nx_chat_format_name(info.chat_format));
    cJSON_AddNumberToObject(j, "queue_max", info.queue_max);
    cJSON_AddNumberToObject(j, "max_body", (double)srv->p.max_body);
    cJSON_AddBoolToObject(j, "api_key_required", srv->api_key != NULL);
    cJSON_AddStringToObject(j, "build_info", nx_version());
    cJSON *sp = cJSON_AddObjectToObject(j, "speculative");
    cJSON_AddItemToObject(sp, "types", drafters_json(&info));
    cJSON_AddNumberToObject(sp, "n_max", info.spec.draft_max);
    cJSON_AddNumberToObject(sp, "n_min", info.spec.draft_min);
    cJSON_AddNumberToObject(sp, "p_min", info.spec.p_min);
    cJSON_AddBoolToObject(sp, "adaptive", info.spec.adaptive);
    char desc[256];
    nx_spec_params_describe(&info.spec, desc, sizeof desc);
    cJSON_AddStringToObject(sp, "describe", desc);
    cJSON *pc = cJSON_AddObjectToObject(j, "prompt_cache");
    cJSON_AddNumberToObject(pc, "checkpoint_interval", info.checkpoint_interval);
    cJSON_AddNumberToObject(pc, "max_checkpoints", info.max_checkpoints);
    nx_sampler_params d = nx_sampler_default_params(info.n_vocab);
    cJSON *g = cJSON_AddObjectToObject(j, "default_generation_settings");
    cJSON_AddNumberToObject(g, "n_ctx", info.n_ctx_slot);
    cJSON *pp = cJSON_AddObjectToObject(g, "params");
    cJSON_AddNumberToObject(pp, "n_predict", -1);
    cJSON_AddNumberToObject(pp, "temperature", d.temperature);
    cJSON_AddNumberToObject(pp, "top_k", d.top_k);
    cJSON_AddNumberToObject(pp, "top_p", d.top_p);
    cJSON_AddNumberToObject(pp, "min_p", d.min_p);
    cJSON_AddNumberToObject(pp, "repeat_last_n", d.penalty_last_n);
    cJSON_AddNumberToObject(pp, "repeat_penalty", d.repeat_penalty);
    cJSON_AddNumberToObject(pp, "presence_penalty", d.presence_penalty);
    cJSON_AddNumberToObject(pp, "frequency_penalty", d.frequency_penalty);
    return nx_http_reply_json(r->conn, 200, j);
}

static enum MHD_Result h_slots(nx_http_req *r) {
    nx_gen_backend *be = r->srv->be;
    int n = be->ops->slots(be, NULL, 0, NULL);
    nx_gen_slot_info *si = calloc((size_t)(n > 0 ? n : 1), sizeof *si);
    if (!si) return nx_http_reply_error(r->conn, 500, "server_error", "out of memory");
    n = be->ops->slots(be, si, n, NULL);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", si[i].id);
        cJSON_AddBoolToObject(o, "is_processing", si[i].busy);
        cJSON_AddNumberToObject(o, "id_task", (double)si[i].request_id);
        cJSON_AddNumberToObject(o, "n_ctx", si[i].n_ctx);
        cJSON_AddNumberToObject(o, "n_cached", si[i].n_cached);
        cJSON_AddNumberToObject(o, "n_prompt", si[i].n_prompt);
        cJSON_AddNumberToObject(o, "n_decoded", si[i].n_decoded);
        cJSON_AddNumberToObject(o, "n_requests", (double)si[i].n_requests);
        cJSON *sp = cJSON_AddObjectToObject(o, "speculative");
        cJSON_AddNumberToObject(sp, "draft_n", (double)si[i].draft_n);
        cJSON_AddNumberToObject(sp, "draft_n_accepted", (double)si[i].draft_n_accepted);
        cJSON_AddNumberToObject(sp, "draft_acceptance",
                                si[i].draft_n ? (double)si[i].draft_n_accepted / (double)si[i].draft_n : 0.0);
        /* the draft policy's wall-clock guard: "off" while plain decoding measures faster */
        cJSON_AddStringToObject(sp, "guard", si[i].guard_off ? "off" : "on");
        cJSON_AddNumberToObject(sp, "guard_switches", (double)si[i].guard_switches);
        cJSON_AddNumberToObject(sp, "ms_per_token_drafting", si[i].s_per_tok_spec * 1e3);
        cJSON_AddNumberToObject(sp, "ms_per_token_plain", si[i].s_per_tok_plain * 1e3);
        cJSON_AddItemToArray(a, o);
    }
    free(si);
    return nx_http_reply_json(r->conn, 200, a);
}

static enum MHD_Result h_metrics(nx_http_req *r) {
    nx_gen_load load = {0};
    r->srv->be->ops->slots(r->srv->be, NULL, 0, &load);
    pthread_mutex_lock(&r->srv->mu);
    int active = r->srv->n_active;
    pthread_mutex_unlock(&r->srv->mu);
    nx_sbuf o = {0};
    nx_metrics_render(r->srv->metrics, &load, active, &o);
    if (o.oom || !o.p) {
        nx_sbuf_free(&o);
        return nx_http_reply_error(r->conn, 500, "server_error", "out of memory");
    }
    enum MHD_Result ret = nx_http_reply(r->conn, 200, "text/plain; version=0.0.4; charset=utf-8", o.p, o.n);
    nx_sbuf_free(&o);
    return ret;
}

static cJSON *parse_object(nx_http_req *r, nx_api_error *e) {
    const char *end = NULL;
    cJSON *j = r->body.n ? cJSON_ParseWithLengthOpts(r->body.p, r->body.n, &end, false) : NULL;
    if (!j) nx_api_fail(e, 400, "invalid_request_error", "malformed JSON in the request body");
    else if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
        nx_api_fail(e, 400, "invalid_request_error", "the request body must be a JSON object");
    }
    return j;
}

static enum MHD_Result h_tokenize(nx_http_req *r) {
    nx_api_error e = {0};
    cJSON *j = parse_object(r, &e);
    if (!j) return nx_http_reply_error(r->conn, (unsigned)e.http, e.type, e.msg);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(j, "add_special");
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "parse_special");
    const cJSON *wp = cJSON_GetObjectItemCaseSensitive(j, "with_pieces");
    const char *bad = !cJSON_IsString(c) ? "'content' must be a string"
                    : as && !cJSON_IsBool(as) ? "'add_special' must be a boolean"
                    : ps && !cJSON_IsBool(ps) ? "'parse_special' must be a boolean"
                    : wp && !cJSON_IsBool(wp) ? "'with_pieces' must be a boolean" : NULL;
    if (bad) {
        char param[32];
        snprintf(param, sizeof param, "%.*s", (int)(strchr(bad + 1, '\'') - bad - 1), bad + 1);
        cJSON_Delete(j);
        return nx_http_reply_err(r->conn, 400, "invalid_request_error", NULL, param, bad);
    }
    nx_token_vec v = {0};
    nx_error err = {0};
    nx_gen_backend *be = r->srv->be;
    nx_status st = be->ops->tokenize(be, c->valuestring, strlen(c->valuestring), cJSON_IsTrue(as), !ps || cJSON_IsTrue(ps),
                                     &v, &err);
    bool pieces = cJSON_IsTrue(wp);
    cJSON_Delete(j);
    if (st != NX_OK) {
        nx_token_vec_free(&v);
        return nx_http_reply_error(r->conn, 500, "server_error", err.msg);
    }
    cJSON *out = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(out, "tokens");
    for (size_t i = 0; i < v.n; i++) {
        if (!pieces) {
            cJSON_AddItemToArray(a, cJSON_CreateNumber(v.ids[i]));
            continue;
        }
        char *txt = NULL;
        size_t len = 0;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", v.ids[i]);
        if (be->ops->detokenize(be, &v.ids[i], 1, true, &txt, &len, NULL) == NX_OK)
            cJSON_AddItemToObject(o, "piece", nx_http_json_bytes(txt, len));
        free(txt);
        cJSON_AddItemToArray(a, o);
    }
    nx_token_vec_free(&v);
    return nx_http_reply_json(r->conn, 200, out);
}

static enum MHD_Result h_detokenize(nx_http_req *r) {
    nx_api_error e = {0};
    cJSON *j = parse_object(r, &e);
    if (!j) return nx_http_reply_error(r->conn, (unsigned)e.http, e.type, e.msg);
    nx_gen_info info;
    nx_gen_backend *be = r->srv->be;
    be->ops->info(be, &info);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    if (!cJSON_IsArray(t)) {
        cJSON_Delete(j);
        return nx_http_reply_err(r->conn, 400, "invalid_request_error", NULL, "tokens", "'tokens' must be an array of token ids");
    }
    int n = cJSON_GetArraySize(t);
    nx_token *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) {
        cJSON_Delete(j);
        return nx_http_reply_error(r->conn, 500, "server_error", "out of memory");
    }
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, t) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(d >= 0 && d < info.n_vocab && d == (double)(long)d)) {
            char msg[128];
            snprintf(msg, sizeof msg, "'tokens[%d]' must be a token id in 0..%d", k, (int)info.n_vocab - 1);
            free(ids);
            cJSON_Delete(j);
            return nx_http_reply_err(r->conn, 400, "invalid_request_error", NULL, "tokens", msg);
        }
        ids[k++] = (nx_token)d;
    }
    cJSON_Delete(j);
    char *txt = NULL;
    size_t len = 0;
    nx_error err = {0};
    nx_status st = be->ops->detokenize(be, ids, (size_t)k, false, &txt, &len, &err);
    free(ids);
    if (st != NX_OK) return nx_http_reply_error(r->conn, 400, "invalid_request_error", err.msg);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddItemToObject(out, "content", nx_http_json_bytes(txt, len));
    free(txt);
    return nx_http_reply_json(r->conn, 200, out);
}

/* ===== Routing ===== */

enum {
    R_HEALTH, R_MODELS, R_MODEL, R_PROPS, R_SLOTS, R_METRICS, R_TOKENIZE, R_DETOKENIZE,
    R_NATIVE, R_COMPLETIONS, R_CHAT, R_APPLY_TEMPLATE,
};

static const struct route {
    const char *path;
    const char *method;
    int id;
} routes[] = {
    {"/health", "GET", R_HEALTH}, {"/v1/health", "GET", R_HEALTH},
    {"/v1/models", "GET", R_MODELS}, {"/models", "GET", R_MODELS},
    {"/props", "GET", R_PROPS}, {"/v1/props", "GET", R_PROPS},
    {"/slots", "GET", R_SLOTS}, {"/metrics", "GET", R_METRICS},
    {"/tokenize", "POST", R_TOKENIZE}, {"/detokenize", "POST", R_DETOKENIZE},
    {"/completion", "POST", R_NATIVE},
    {"/v1/completions", "POST", R_COMPLETIONS}, {"/completions", "POST", R_COMPLETIONS},
    {"/v1/chat/completions", "POST", R_CHAT}, {"/chat/completions", "POST", R_CHAT},
    {"/apply-template", "POST", R_APPLY_TEMPLATE},
};

static bool key_ok(const nx_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    /* Compare in time independent of where the strings differ. */
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)s->api_key[i] ^ (unsigned char)(i < a ? h[i] : 0);
    return diff == 0;
}

static enum MHD_Result dispatch(nx_http_req *r) {
    switch (r->route) {
    case R_HEALTH: return h_health(r);
    case R_MODELS: return h_models(r);
    case R_MODEL: return h_model(r);
    case R_PROPS: return h_props(r);
    case R_SLOTS: return h_slots(r);
    case R_METRICS: return h_metrics(r);
    case R_TOKENIZE: return h_tokenize(r);
    case R_DETOKENIZE: return h_detokenize(r);
    case R_NATIVE: return nx_http_completion(r, NX_API_NATIVE);
    case R_COMPLETIONS: return nx_http_completion(r, NX_API_COMPLETIONS);
    case R_CHAT: return nx_http_completion(r, NX_API_CHAT);
    case R_APPLY_TEMPLATE: return nx_http_apply_template(r);
    default: return nx_http_reply_error(r->conn, 404, "not_found_error", "not found");
    }
}

static bool is_completion(int route) { return route == R_NATIVE || route == R_COMPLETIONS || route == R_CHAT; }

/* The first call for a request: everything decidable from the headers. Returns true and sets
 * *ret when it answered. */
static bool early_reply(nx_http_req *r, const char *url, const char *method, enum MHD_Result *ret) {
    nx_server *s = r->srv;
    struct MHD_Connection *c = r->conn;
    if (!strcmp(method, "OPTIONS")) {   /* CORS preflight: open, like /health */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        nx_http_note_status(c, 204);
        *ret = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        return true;
    }
    int route = -1;
    bool path_known = false;
    bool head = !strcmp(method, "HEAD");   /* wherever GET is; libmicrohttpd drops the body */
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path) != 0) continue;
        path_known = true;
        if (!strcmp(method, routes[i].method) || (head && !strcmp(routes[i].method, "GET"))) route = routes[i].id;
    }
    const char *mid = !strncmp(url, "/v1/models/", 11) ? url + 11 : !strncmp(url, "/models/", 8) ? url + 8 : NULL;
    if (mid && *mid && strlen(mid) < sizeof r->model_id) {
        path_known = true;
        if (!strcmp(method, "GET") || head) route = R_MODEL;
        snprintf(r->model_id, sizeof r->model_id, "%s", mid);
    }
    r->route = route;
    if (route != R_HEALTH && !key_ok(s, c)) {
        *ret = nx_http_reply_error(c, 401, "authentication_error", "invalid or missing API key (send 'Authorization: Bearer <key>')");
        return true;
    }
    if (route < 0) {
        char msg[300];
        if (path_known) {
            snprintf(msg, sizeof msg, "method %.16s is not allowed on %.200s", method, url);
            *ret = nx_http_reply_err(c, 405, "invalid_request_error", "method_not_allowed", NULL, msg);
        } else {
            snprintf(msg, sizeof msg, "unknown endpoint %.16s %.200s", method, url);
            *ret = nx_http_reply_err(c, 404, "invalid_request_error", "unknown_url", NULL, msg);
        }
        return true;
    }
    if (atomic_load(&s->stopping) && route != R_HEALTH) {
        *ret = nx_http_reply_error(c, 503, "unavailable_error", "the server is shutting down");
        return true;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || *end || n > s->p.max_body) {
            char msg[160];
            snprintf(msg, sizeof msg, "the request body (%.24s bytes) is larger than the limit of %zu bytes", cl, s->p.max_body);
            *ret = nx_http_reply_error(c, 413, "invalid_request_error", msg);
            if (is_completion(route)) nx_metrics_request(s->metrics, 413);
            return true;
        }
    }
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **req_cls) {
    (void)version;
    nx_server *s = cls;
    nx_http_req *r = *req_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = s;
        r->conn = c;
        r->t_arrival = nx_gen_now();
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", url);
        *req_cls = r;
        enum MHD_Result ret;
        if (early_reply(r, url, method, &ret)) {
            r->route = -2;   /* answered: ignore any body */
            nx_conns_busy(&s->conns, nx_http_conn(c));
            return ret;
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (r->route != -2 && !r->too_big) {
            if (r->body.n + *upload_size > s->p.max_body) {
                r->too_big = true;
                nx_sbuf_free(&r->body);
            } else {
                nx_sbuf_add(&r->body, upload_data, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->route == -2) return MHD_YES;   /* the early reply is queued */
    nx_conns_busy(&s->conns, nx_http_conn(c));   /* the whole request is here: no read deadline */
    if (r->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than the limit of %zu bytes", s->p.max_body);
        if (is_completion(r->route)) nx_metrics_request(s->metrics, 413);
        return nx_http_reply_error(c, 413, "invalid_request_error", msg);
    }
    if (r->body.oom) return nx_http_reply_error(c, 500, "server_error", "out of memory reading the request body");
    return dispatch(r);
}

/* The access-log line of a finished request. */
static void log_access(nx_http_req *r, nx_conn *k, bool complete) {
    nx_access a;
    char addr[64] = "?";
    memset(&a, 0, sizeof a);
    if (k) {
        nx_conns_lock(k->owner);
        a = k->acc;
        snprintf(addr, sizeof addr, "%s", k->addr);
        nx_conns_unlock(k->owner);
    }
    if (!strcmp(r->method, "HEAD")) a.bytes = 0;   /* libmicrohttpd sends no body */
    nx_log_field f[14];
    int n = 0;
    f[n++] = NX_LF_STR("remote", addr);
    f[n++] = NX_LF_STR("method", r->method);
    f[n++] = NX_LF_STR("path", r->path);
    f[n++] = NX_LF_INT("status", a.status);
    f[n++] = NX_LF_INT("bytes", a.bytes);
    if (a.has_tokens) {
        f[n++] = NX_LF_INT("prompt_tokens", a.prompt_tokens);
        f[n++] = NX_LF_INT("gen_tokens", a.gen_tokens);
        f[n++] = NX_LF_INT("draft_n", a.draft_n);
        f[n++] = NX_LF_INT("draft_accepted", a.draft_accepted);
        f[n++] = NX_LF_NUM("draft_acceptance", a.draft_n ? (double)a.draft_accepted / (double)a.draft_n : 0.0);
    }
    f[n++] = NX_LF_NUM("ms", (nx_gen_now() - r->t_arrival) * 1e3);
    if (!complete) f[n++] = (nx_log_field){.key = "complete", .kind = NX_LOG_BOOL, .i = 0};
    if (a.error[0]) f[n++] = NX_LF_STR("error", a.error);
    nx_log_level lv = a.status == 503 || !complete ? NX_LOG_WARN : a.status >= 500 || a.status == 0 ? NX_LOG_ERROR : NX_LOG_INFO;
    nx_log_event(lv, "access", f, n);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe) {
    nx_server *s = cls;
    nx_http_req *r = *req_cls;
    if (!r) return;
    nx_conn *k = nx_http_conn(c);
    log_access(r, k, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    nx_conns_idle(&s->conns, k);   /* kept alive: the next request's deadline starts at its first byte */
    nx_sbuf_free(&r->body);
    free(r);
    *req_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    nx_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = nx_conns_open(&s->conns, fd ? fd->connect_fd : -1, ad ? ad->client_addr : NULL);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        nx_conns_close(&s->conns, *socket_context);
        *socket_context = NULL;
    }
}

/* ===== Life cycle ===== */

nx_status nx_server_start(const nx_server_params *p, nx_gen_backend *be, nx_server **out, nx_error *err) {
    *out = NULL;
    if (p->port < 0 || p->port > 65535) return nx_fail(err, NX_ERR_INVALID_ARG, "port %d is out of range", p->port);
    if (p->max_body < 64) return nx_fail(err, NX_ERR_INVALID_ARG, "max body must be at least 64 bytes");
    const char *host = p->host && *p->host ? p->host : "127.0.0.1";
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    bool v6 = strchr(host, ':') != NULL;
    if (v6) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)p->port);
        if (inet_pton(AF_INET6, host, &a6.sin6_addr) != 1) return nx_fail(err, NX_ERR_INVALID_ARG, "bad host address '%s'", host);
    } else {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)p->port);
        if (inet_pton(AF_INET, host, &a4.sin_addr) != 1)
            return nx_fail(err, NX_ERR_INVALID_ARG, "bad host address '%s' (an IPv4 or IPv6 address, or localhost)", host);
    }
    nx_server *s = calloc(1, sizeof *s);
    if (!s) return nx_fail(err, NX_ERR_NOMEM, "out of memory starting the server");
    s->p = *p;
    s->be = be;
    s->created = (long)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    atomic_init(&s->stopping, false);
    nx_status cst = nx_conns_init(&s->conns, p->read_timeout_s, err);
    if (cst != NX_OK) {
        nx_server_free(s);
        return cst;
    }
    s->conns_ok = true;
    if (p->api_key && *p->api_key) s->api_key = strdup(p->api_key);
    s->metrics = nx_metrics_create();
    if (!s->metrics || (p->api_key && *p->api_key && !s->api_key)) {
        nx_server_free(s);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory starting the server");
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC;
    if (v6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, v6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(p->conn_timeout_s > 0 ? p->conn_timeout_s : 60),
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(p->max_connections > 0 ? p->max_connections : 256),
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(p->max_connections_per_ip > 0 ? p->max_connections_per_ip : 0),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_END);
    if (!s->d) {
        int e = errno;
        nx_server_free(s);
        return nx_fail(err, NX_ERR_IO, "cannot listen on %s port %d: %s", host, p->port, e ? strerror(e) : "libmicrohttpd failed");
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    NX_INFO("server: listening on http://%s%s%s:%d (%s backend)", v6 ? "[" : "", host, v6 ? "]" : "", s->port, be->ops->name);
    *out = s;
    return NX_OK;
}

int nx_server_port(const nx_server *s) { return s->port; }

static bool wait_idle(nx_server *s, double seconds) {
    double until = nx_gen_now() + seconds;
    pthread_mutex_lock(&s->mu);
    while (s->n_active > 0 && nx_gen_now() < until) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 20 * 1000000L;
        if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&s->cv, &s->mu, &dl);
    }
    bool idle = s->n_active == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void nx_server_stop(nx_server *s, double grace_s) {
    if (!s || s->stopped) return;
    s->stopped = true;
    if (!s->d) return;   /* never started */
    atomic_store(&s->stopping, true);
    MHD_socket fd = MHD_quiesce_daemon(s->d);   /* no new connections from here on */
    if (fd != MHD_INVALID_SOCKET) close(fd);
    if (!wait_idle(s, grace_s > 0 ? grace_s : 0)) {
        NX_INFO("server: cancelling the requests still running");
        s->be->ops->cancel_all(s->be);
        wait_idle(s, 10.0);
    } else {
        s->be->ops->cancel_all(s->be);
    }
    MHD_stop_daemon(s->d);
    s->d = NULL;
    NX_INFO("server: stopped");
}

void nx_server_free(nx_server *s) {
    if (!s) return;
    nx_server_stop(s, 0);
    if (s->conns_ok) nx_conns_destroy(&s->conns);
    nx_metrics_free(s->metrics);
    free(s->api_key);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
