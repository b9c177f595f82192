/*
 * test_server_http.c — the HTTP surface of `nextn serve` (server.md), in process: a server on an
 * ephemeral loopback port over the fake backend, driven with raw HTTP/1.1 over sockets.
 * Covers auth, every error path (bad JSON, wrong types, unknown endpoint, missing / wrong key,
 * oversized bodies with and without Content-Length, prompt over the slot context, n > 1, bad
 * speculative.type), the three completion endpoints with and without streaming (SSE checked
 * line by line, UTF-8 never split), stop strings, slot pinning, /tokenize, /detokenize, /slots,
 * /props, /v1/models, a client disconnecting mid-stream (its slot is free at once), queue
 * overflow (503 + Retry-After), graceful stop, and /metrics parsed by a Prometheus text checker
 * whose counters must equal the sums of the responses' timings.
 * Every socket has a receive timeout and every wait loop a deadline.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "test.h"
#include "core/log.h"
#include "server/server.h"

#define KEY "sekret-key"

typedef struct srv {
    nx_gen_backend *be;
    nx_server *s;
    int port;
} srv;

static bool srv_start(srv *v, int slots, int n_ctx, int queue_max, int step_us, const char *key, size_t max_body) {
    memset(v, 0, sizeof *v);
    nx_gen_fake_params fp = nx_gen_fake_default_params();
    fp.alias = "fake";
    fp.n_slots = slots;
    fp.n_ctx_slot = n_ctx;
    fp.queue_max = queue_max;
    fp.step_us = step_us;
    fp.spec.n_types = 2;
    fp.spec.types[0] = NX_SPEC_NGRAM;
    fp.spec.types[1] = NX_SPEC_MTP;
    fp.spec.draft_max = 4;
    nx_error err = {0};
    if (nx_gen_fake_create(&fp, &v->be, &err) != NX_OK) return false;
    nx_server_params sp = nx_server_default_params();
    sp.port = 0;
    sp.api_key = key;
    if (max_body) sp.max_body = max_body;
    if (nx_server_start(&sp, v->be, &v->s, &err) != NX_OK) {
        fprintf(stderr, "server start: %s\n", err.msg);
        nx_gen_backend_free(v->be);
        return false;
    }
    v->port = nx_server_port(v->s);
    return true;
}

static void srv_stop(srv *v) {
    nx_server_free(v->s);
    nx_gen_backend_free(v->be);
}

/* ===== A tiny HTTP client ===== */

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Send a request; `extra` holds whole header lines ("Name: v\r\n"). */
static int send_req(int port, const char *method, const char *path, const char *extra, const char *body) {
    int fd = connect_to(port);
    if (fd < 0) return -1;
    char head[1024];
    size_t n = body ? strlen(body) : 0;
    snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%sContent-Length: %zu\r\n\r\n",
             method, path, extra ? extra : "", body ? "Content-Type: application/json\r\n" : "", n);
    if (!send_all(fd, head, strlen(head)) || (n && !send_all(fd, body, n))) {
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct resp {
    int status;
    char *head;                 /* status line + headers */
    char *body;                 /* de-chunked */
    size_t n_body;
} resp;

static void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

static char *read_all(int fd, size_t *n_out) {
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) p = realloc(p, cap *= 2);
        ssize_t r = recv(fd, p + n, cap - n - 1, 0);
        if (r <= 0) break;
        n += (size_t)r;
    }
    p[n] = 0;
    *n_out = n;
    return p;
}

static bool parse_resp(char *raw, size_t n, resp *r) {
    memset(r, 0, sizeof *r);
    char *sep = strstr(raw, "\r\n\r\n");
    if (!sep || sscanf(raw, "HTTP/1.%*d %d", &r->status) != 1) return false;
    r->head = strndup(raw, (size_t)(sep - raw));
    char *b = sep + 4;
    size_t nb = n - (size_t)(b - raw);
    r->body = malloc(nb + 1);
    bool chunked = strcasestr(r->head, "transfer-encoding: chunked") != NULL;
    if (!chunked) {
        memcpy(r->body, b, nb);
        r->n_body = nb;
    } else {
        size_t o = 0;
        char *p = b, *end = b + nb;
        while (p < end) {
            char *e;
            unsigned long len = strtoul(p, &e, 16);
            char *crlf = strstr(p, "\r\n");
            if (!crlf || e == p) break;
            p = crlf + 2;
            if (len == 0 || p + len > end) break;
            memcpy(r->body + o, p, len);
            o += len;
            p += len + 2;
        }
        r->n_body = o;
    }
    r->body[r->n_body] = 0;
    return true;
}

static int request(int port, const char *method, const char *path, const char *extra, const char *body, resp *r) {
    memset(r, 0, sizeof *r);
    int fd = send_req(port, method, path, extra, body);
    if (fd < 0) { fprintf(stderr, "    request: cannot send (errno %d)\n", errno); return -1; }
    size_t n;
    errno = 0;
    char *raw = read_all(fd, &n);
    int e = errno;
    close(fd);
    bool ok = parse_resp(raw, n, r);
    if (!ok) fprintf(stderr, "    request: no response (read %zu bytes, errno %d)\n", n, e);
    free(raw);
    return ok ? r->status : -1;
}

static const char *AUTH = "Authorization: Bearer " KEY "\r\n";

static int post(int port, const char *path, const char *body, resp *r) { return request(port, "POST", path, AUTH, body, r); }
static int get(int port, const char *path, resp *r) { return request(port, "GET", path, AUTH, NULL, r); }

/* OpenAI's error shape: {"error":{"message":string,"type":string,"param":string|null,
 * "code":string|null}}; the HTTP status is `code` of the call. */
static bool is_error(const resp *r, int code, const char *must_contain) {
    cJSON *j = cJSON_Parse(r->body);
    cJSON *e = cJSON_GetObjectItem(j, "error");
    const cJSON *ec = cJSON_GetObjectItem(e, "code"), *ep = cJSON_GetObjectItem(e, "param");
    bool ok = r->status == code && cJSON_IsString(cJSON_GetObjectItem(e, "message")) &&
              cJSON_IsString(cJSON_GetObjectItem(e, "type")) && (cJSON_IsString(ec) || cJSON_IsNull(ec)) &&
              (cJSON_IsString(ep) || cJSON_IsNull(ep)) &&
              (!must_contain || strstr(cJSON_GetObjectItem(e, "message")->valuestring, must_contain));
    if (!ok) fprintf(stderr, "    unexpected: %d %s\n", r->status, r->body ? r->body : "(null)");
    cJSON_Delete(j);
    return ok;
}

static char *rot13(const char *s) {
    char *o = strdup(s);
    for (char *p = o; *p; p++) {
        if (*p >= 'a' && *p <= 'z') *p = (char)('a' + (*p - 'a' + 13) % 26);
        else if (*p >= 'A' && *p <= 'Z') *p = (char)('A' + (*p - 'A' + 13) % 26);
    }
    return o;
}

static bool valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = u[i] < 0x80 ? 1 : (u[i] & 0xE0) == 0xC0 ? 2 : (u[i] & 0xF0) == 0xE0 ? 3 : (u[i] & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if ((u[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

/* ===== SSE ===== */

typedef struct sse {
    cJSON *ev[512];             /* parsed data payloads */
    int n;
    bool done;                  /* saw data: [DONE] */
    bool well_formed;
    bool utf8_ok;
} sse;

static void sse_free(sse *s) {
    for (int i = 0; i < s->n; i++) cJSON_Delete(s->ev[i]);
}

/* Every event is exactly "data: <json>\n\n"; [DONE] only last. */
static void sse_parse(const char *body, size_t n, sse *s) {
    memset(s, 0, sizeof *s);
    s->well_formed = true;
    s->utf8_ok = valid_utf8(body, n);
    const char *p = body, *end = body + n;
    while (p < end) {
        if (strncmp(p, "data: ", 6) != 0 || s->done) { s->well_formed = false; return; }
        const char *e = strstr(p, "\n\n");
        if (!e) { s->well_formed = false; return; }
        const char *payload = p + 6;
        size_t len = (size_t)(e - payload);
        if (memchr(payload, '\n', len)) { s->well_formed = false; return; }
        if (len == 6 && !strncmp(payload, "[DONE]", 6)) s->done = true;
        else {
            cJSON *j = cJSON_ParseWithLength(payload, len);
            if (!j || s->n == 512) { cJSON_Delete(j); s->well_formed = false; return; }
            s->ev[s->n++] = j;
        }
        p = e + 2;
    }
}

/* Concatenated text of chat / completions / native chunks. */
static char *sse_text(const sse *s) {
    size_t cap = 1 << 16, n = 0;
    char *out = calloc(1, cap);
    for (int i = 0; i < s->n; i++) {
        const cJSON *t = cJSON_GetObjectItem(s->ev[i], "content");
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(s->ev[i], "choices"), 0);
        if (ch) {
            const cJSON *d = cJSON_GetObjectItem(ch, "delta");
            t = d ? cJSON_GetObjectItem(d, "content") : cJSON_GetObjectItem(ch, "text");
        }
        if (cJSON_IsString(t) && n + strlen(t->valuestring) < cap) {
            memcpy(out + n, t->valuestring, strlen(t->valuestring));
            n += strlen(t->valuestring);
        }
    }
    return out;
}

/* ===== Tests ===== */

static srv S;   /* the main server: 2 slots x 256, queue 2, key KEY */

/* Chat with a Jinja template through the fake model's scripted answers: tool calls and reasoning
 * streamed as they are generated, with a logprob entry per generated token. */
static void test_chat_parse_streaming(void) {
    nx_gen_fake_params fp = nx_gen_fake_default_params();
    fp.alias = "fake";
    fp.n_slots = 1;
    fp.n_ctx_slot = 2048;
    fp.step_us = 0;
    fp.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    srv v;
    memset(&v, 0, sizeof v);
    nx_error err = {0};
    REQUIRE_MSG(nx_gen_fake_create(&fp, &v.be, &err) == NX_OK, "%s", err.msg);
    nx_server_params sp = nx_server_default_params();
    sp.port = 0;
    REQUIRE_MSG(nx_server_start(&sp, v.be, &v.s, &err) == NX_OK, "%s", err.msg);
    v.port = nx_server_port(v.s);
    const char *body =
        "{\"stream\":true,\"logprobs\":true,\"stream_options\":{\"include_usage\":true},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"<<answer:<think>\\nplan\\n</think>\\n\\nSure.\\n<tool_call>\\n"
        "{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": {\\\"n\\\": 1}}\\n</tool_call>>>\"}]}";
    resp r;
    CHECK_EQ_INT(request(v.port, "POST", "/v1/chat/completions", NULL, body, &r), 200);
    sse s;
    sse_parse(r.body, r.n_body, &s);
    CHECK(s.well_formed && s.done && s.n > 5);
    char order[64] = "", content[256] = "", reasoning[256] = "";
    int n_lp = 0, n_tokens = -1;
    const char *finish = NULL;
    for (int i = 0; i < s.n; i++) {
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(s.ev[i], "choices"), 0);
        const cJSON *u = cJSON_GetObjectItem(s.ev[i], "usage");
        if (u) n_tokens = cJSON_GetObjectItem(u, "completion_tokens")->valueint;
        if (!ch) continue;
        const cJSON *d = cJSON_GetObjectItem(ch, "delta"), *c = cJSON_GetObjectItem(d, "content");
        const cJSON *rc = cJSON_GetObjectItem(d, "reasoning_content"), *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "tool_calls"), 0);
        n_lp += cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "logprobs"), "content"));
        char k = 0;
        if (cJSON_IsString(rc)) { k = 'r'; strncat(reasoning, rc->valuestring, sizeof reasoning - strlen(reasoning) - 1); }
        if (cJSON_IsString(c) && c->valuestring[0] && i > 0) { k = 'c'; strncat(content, c->valuestring, sizeof content - strlen(content) - 1); }
        if (tc) {
            const cJSON *f = cJSON_GetObjectItem(tc, "function");
            CHECK_EQ_INT(cJSON_GetObjectItem(tc, "index")->valueint, 0);
            if (cJSON_GetObjectItem(tc, "id")) {
                k = 'i';
                CHECK_STR(cJSON_GetObjectItem(tc, "id")->valuestring, "call_1");
                CHECK_STR(cJSON_GetObjectItem(tc, "type")->valuestring, "function");
                CHECK_STR(cJSON_GetObjectItem(f, "name")->valuestring, "f");
                CHECK_STR(cJSON_GetObjectItem(f, "arguments")->valuestring, "");
            } else {
                k = 'a';
                CHECK_STR(cJSON_GetObjectItem(f, "arguments")->valuestring, "{\"n\":1}");
            }
        }
        if (cJSON_IsString(cJSON_GetObjectItem(ch, "finish_reason"))) finish = cJSON_GetObjectItem(ch, "finish_reason")->valuestring;
        size_t o = strlen(order);
        if (k && (!o || order[o - 1] != k) && o + 1 < sizeof order) { order[o] = k; order[o + 1] = 0; }
    }
    CHECK_STR(order, "rcia");          /* reasoning, content, the call's id + name, its arguments */
    CHECK_STR(reasoning, "plan");
    CHECK_STR(content, "Sure.");
    CHECK_STR(finish, "tool_calls");
    /* one entry per generated token; the end-of-generation token (counted) has none */
    CHECK_MSG(n_tokens > 0 && n_lp == n_tokens - 1, "%d logprob entries for %d tokens", n_lp, n_tokens);
    sse_free(&s);
    resp_free(&r);
    srv_stop(&v);
}

static void test_auth(void) {
    resp r;
    CHECK_EQ_INT(request(S.port, "GET", "/health", NULL, NULL, &r), 200);   /* open */
    CHECK(strstr(r.body, "\"status\":\"ok\"") != NULL);
    resp_free(&r);
    CHECK_EQ_INT(request(S.port, "GET", "/v1/models", NULL, NULL, &r), 401);
    CHECK(is_error(&r, 401, "API key"));
    CHECK(strcasestr(r.head, "WWW-Authenticate: Bearer") != NULL);
    resp_free(&r);
    CHECK_EQ_INT(request(S.port, "GET", "/v1/models", "Authorization: Bearer wrong\r\n", NULL, &r), 401);
    CHECK(is_error(&r, 401, NULL));
    resp_free(&r);
    CHECK_EQ_INT(request(S.port, "POST", "/v1/chat/completions", "Authorization: Bearer " KEY "x\r\n", "{}", &r), 401);
    resp_free(&r);
    CHECK_EQ_INT(request(S.port, "GET", "/metrics", "Authorization: Basic " KEY "\r\n", NULL, &r), 401);
    resp_free(&r);
    CHECK_EQ_INT(get(S.port, "/v1/models", &r), 200);
    resp_free(&r);
}

static void test_errors(void) {
    resp r;
    CHECK_EQ_INT(post(S.port, "/v1/chat/completions", "{\"messages\": [", &r), 400);
    CHECK(is_error(&r, 400, "malformed JSON"));
    resp_free(&r);
    CHECK_EQ_INT(post(S.port, "/v1/chat/completions", "", &r), 400);
    CHECK(is_error(&r, 400, NULL));
    resp_free(&r);
    static const struct { const char *path, *body, *needle; } bad[] = {
        {"/v1/chat/completions", "{\"messages\":\"hi\"}", "messages"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"10\"}", "max_tokens"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":[]}", "temperature"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}", "stream"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":{}}", "stop"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":\"1\"}", "seed"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", "'n'"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"speculative\":{\"type\":\"assistant\"}}",
         "allowed: ngram, mtp, none"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"speculative\":{\"n_max\":\"4\"}}", "n_max"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "robot"},
        {"/v1/completions", "{\"prompt\":42}", "prompt"},
        {"/v1/completions", "{\"prompt\":\"x\",\"n\":3}", "'n'"},
        {"/completion", "{\"prompt\":\"x\",\"n_predict\":true}", "n_predict"},
        {"/completion", "{\"prompt\":\"x\",\"speculative.type\":\"draft\"}", "allowed"},
        {"/completion", "[]", "object"},
        {"/tokenize", "{\"content\":5}", "content"},
        {"/detokenize", "{\"tokens\":[-1]}", "tokens"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(post(S.port, bad[i].path, bad[i].body, &r), 400);
        CHECK_MSG(is_error(&r, 400, bad[i].needle), "case %zu: %s", i, bad[i].body);
        resp_free(&r);
    }
    CHECK_EQ_INT(get(S.port, "/v2/nothing", &r), 404);
    CHECK(is_error(&r, 404, "/v2/nothing"));
    resp_free(&r);
    CHECK_EQ_INT(get(S.port, "/v1/chat/completions", &r), 405);
    CHECK(is_error(&r, 405, NULL));
    resp_free(&r);
    /* Prompt over one slot's context (256): 400 with both counts. */
    char big[1200];
    memset(big, 'a', 600);
    big[600] = 0;
    char body[1400];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", big);
    CHECK_EQ_INT(post(S.port, "/v1/completions", body, &r), 400);
    CHECK(is_error(&r, 400, "601 tokens"));
    CHECK(strstr(r.body, "256") && strstr(r.body, "exceed_context_size_error"));
    resp_free(&r);
}

/* Oversized bodies: announced by Content-Length (answered before the body is read) and chunked. */
static void test_body_limit(void) {
    int fd = connect_to(S.port);
    const char *h = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " KEY "\r\n"
                    "Content-Length: 9000000\r\n\r\n{\"prompt\":\"";
    CHECK(send_all(fd, h, strlen(h)));
    size_t n;
    char *raw = read_all(fd, &n);
    close(fd);
    resp r;
    CHECK(parse_resp(raw, n, &r) && r.status == 413);
    CHECK(is_error(&r, 413, "8388608"));
    resp_free(&r);
    free(raw);

    fd = connect_to(S.port);
    h = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " KEY "\r\n"
        "Transfer-Encoding: chunked\r\n\r\n";
    CHECK(send_all(fd, h, strlen(h)));
    size_t chunk = 1 << 20;
    char *blk = malloc(chunk + 32);
    int hl = snprintf(blk, 32, "%zx\r\n", chunk);
    memset(blk + hl, 'a', chunk);
    memcpy(blk + hl + chunk, "\r\n", 2);
    bool sent = true;
    for (int i = 0; i < 9 && sent; i++) sent = send_all(fd, blk, (size_t)hl + chunk + 2);
    if (sent) send_all(fd, "0\r\n\r\n", 5);
    free(blk);
    raw = read_all(fd, &n);
    close(fd);
    CHECK(parse_resp(raw, n, &r) && r.status == 413);
    resp_free(&r);
    free(raw);
}

static void test_chat(void) {
    resp r;
    const char *body = "{\"model\":\"fake\",\"messages\":[{\"role\":\"system\",\"content\":\"Be nice.\"},"
                       "{\"role\":\"user\",\"content\":\"Hello \\u00e9\\u20ac!\"}],\"max_tokens\":1000,\"temperature\":0}";
    CHECK_EQ_INT(post(S.port, "/v1/chat/completions", body, &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *msg = cJSON_GetObjectItem(ch, "message");
    const char *prompt = "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHello \xC3\xA9\xE2\x82\xAC!<|im_end|>\n"
                         "<|im_start|>assistant\n";
    char *want = rot13(prompt);
    CHECK_STR(cJSON_GetObjectItem(msg, "content")->valuestring, want);
    CHECK_STR(cJSON_GetObjectItem(msg, "role")->valuestring, "assistant");
    CHECK_STR(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "stop");
    CHECK_STR(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
    const cJSON *u = cJSON_GetObjectItem(j, "usage");
    int n_prompt = (int)strlen(prompt) + 1;   /* bytes + BOS */
    CHECK_EQ_INT(cJSON_GetObjectItem(u, "prompt_tokens")->valueint, n_prompt);
    CHECK_EQ_INT(cJSON_GetObjectItem(u, "completion_tokens")->valueint, (int)strlen(prompt) + 1);   /* + EOS */
    CHECK_EQ_INT(cJSON_GetObjectItem(u, "total_tokens")->valueint, 2 * n_prompt);
    const cJSON *t = cJSON_GetObjectItem(j, "timings");
    static const char *const keys[] = {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second",
                                       "draft_n", "draft_n_accepted", "draft_acceptance", "draft_by_depth"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) CHECK_MSG(cJSON_GetObjectItem(t, keys[i]), "timings.%s", keys[i]);
    CHECK(cJSON_GetObjectItem(t, "draft_n")->valueint > 0);
    const cJSON *d0 = cJSON_GetArrayItem(cJSON_GetObjectItem(t, "draft_by_depth"), 0);
    CHECK(d0 && cJSON_GetObjectItem(d0, "depth")->valueint == 1 && cJSON_GetObjectItem(d0, "n") && cJSON_GetObjectItem(d0, "accepted"));
    free(want);
    cJSON_Delete(j);
    resp_free(&r);

    /* Speculation off for one request: no drafts. */
    CHECK_EQ_INT(post(S.port, "/v1/chat/completions",
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"abc\"}],\"speculative\":{\"type\":\"none\"}}", &r), 200);
    CHECK(strstr(r.body, "\"draft_n\":0,") != NULL);
    resp_free(&r);
}

static void test_completions_and_stops(void) {
    resp r;
    /* Text prompt; stop string spanning tokens; usage. */
    CHECK_EQ_INT(post(S.port, "/v1/completions", "{\"prompt\":\"hello world\",\"stop\":[\"jb\",\"zzz\"],\"max_tokens\":50}", &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    CHECK_STR(cJSON_GetObjectItem(ch, "text")->valuestring, "uryyb ");
    CHECK_STR(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "stop");
    CHECK_STR(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
    cJSON_Delete(j);
    resp_free(&r);
    /* Token prompt and max_tokens ("length"). */
    CHECK_EQ_INT(post(S.port, "/v1/completions", "{\"prompt\":[72,105,33],\"max_tokens\":2}", &r), 200);
    j = cJSON_Parse(r.body);
    ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    CHECK_STR(cJSON_GetObjectItem(ch, "text")->valuestring, "Uv");
    CHECK_STR(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "length");
    CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens")->valueint, 3);
    cJSON_Delete(j);
    resp_free(&r);
    /* Native, pinned to slot 1 through the model name, with tokens and the stopping word. */
    CHECK_EQ_INT(post(S.port, "/completion",
                      "{\"model\":\"fake-slot1\",\"prompt\":\"abcdef\",\"stop\":[\"qr\"],\"return_tokens\":true}", &r), 200);
    j = cJSON_Parse(r.body);
    CHECK_STR(cJSON_GetObjectItem(j, "content")->valuestring, "nop");
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "id_slot")->valueint, 1);
    CHECK_STR(cJSON_GetObjectItem(j, "stop_type")->valuestring, "word");
    CHECK_STR(cJSON_GetObjectItem(j, "stopping_word")->valuestring, "qr");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")) >= 4);
    CHECK(cJSON_GetObjectItem(j, "timings") != NULL);
    cJSON_Delete(j);
    resp_free(&r);
    /* id_slot wins. */
    CHECK_EQ_INT(post(S.port, "/completion", "{\"prompt\":\"a\",\"id_slot\":0,\"model\":\"fake-slot1\"}", &r), 200);
    CHECK(strstr(r.body, "\"id_slot\":0") != NULL);
    resp_free(&r);
    /* Logprobs (chat format). */
    CHECK_EQ_INT(post(S.port, "/v1/chat/completions",
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":3,\"logprobs\":true,\"top_logprobs\":2}", &r), 200);
    j = cJSON_Parse(r.body);
    const cJSON *lp = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs"), "content");
    CHECK_EQ_INT(cJSON_GetArraySize(lp), 3);
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(lp, 0), "top_logprobs")), 2);
    {
        const cJSON *e0 = cJSON_GetArrayItem(lp, 0);
        CHECK(cJSON_IsString(cJSON_GetObjectItem(e0, "token")) && cJSON_IsNumber(cJSON_GetObjectItem(e0, "logprob")) &&
              cJSON_IsArray(cJSON_GetObjectItem(e0, "bytes")));
        const cJSON *t0 = cJSON_GetArrayItem(cJSON_GetObjectItem(e0, "top_logprobs"), 0);
        CHECK(cJSON_IsString(cJSON_GetObjectItem(t0, "token")) && cJSON_IsNumber(cJSON_GetObjectItem(t0, "logprob")) &&
              cJSON_IsArray(cJSON_GetObjectItem(t0, "bytes")));
    }
    cJSON_Delete(j);
    resp_free(&r);
    /* Logprobs (completions format): parallel arrays, text_offset in characters of the answer. */
    for (int stream = 0; stream < 2; stream++) {
        CHECK_EQ_INT(post(S.port, "/v1/completions",
                          stream ? "{\"prompt\":\"ab\\u00e9c\",\"max_tokens\":5,\"logprobs\":2,\"stream\":true}"
                                 : "{\"prompt\":\"ab\\u00e9c\",\"max_tokens\":5,\"logprobs\":2}", &r), 200);
        /* the fake echoes bytes: n, o, C3, A9, p -> offsets 0 1 2 3 3 */
        static const int want_off[5] = {0, 1, 2, 3, 3};
        int n = 0;
        bool shape = true;
        cJSON *docs[8] = {0};
        int n_docs = 0;
        if (!stream) docs[n_docs++] = cJSON_Parse(r.body);
        else {
            sse sv;
            sse_parse(r.body, r.n_body, &sv);
            for (int k = 0; k < sv.n && n_docs < 8; k++) docs[n_docs++] = cJSON_Duplicate(sv.ev[k], true);
            sse_free(&sv);
        }
        for (int d = 0; d < n_docs; d++) {
            const cJSON *l = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(docs[d], "choices"), 0), "logprobs");
            if (!cJSON_IsObject(l)) continue;
            const cJSON *tk = cJSON_GetObjectItem(l, "tokens"), *tl = cJSON_GetObjectItem(l, "token_logprobs");
            const cJSON *tt = cJSON_GetObjectItem(l, "top_logprobs"), *to = cJSON_GetObjectItem(l, "text_offset");
            int m = cJSON_GetArraySize(tk);
            shape &= cJSON_IsArray(tk) && cJSON_GetArraySize(tl) == m && cJSON_GetArraySize(tt) == m && cJSON_GetArraySize(to) == m;
            for (int i = 0; i < m && n < 5; i++, n++) {
                shape &= cJSON_IsString(cJSON_GetArrayItem(tk, i)) && cJSON_IsNumber(cJSON_GetArrayItem(tl, i));
                const cJSON *top = cJSON_GetArrayItem(tt, i);
                shape &= cJSON_IsObject(top) && cJSON_GetArraySize(top) >= 1 && cJSON_GetArraySize(top) <= 2;
                CHECK_EQ_INT((int)cJSON_GetArrayItem(to, i)->valuedouble, want_off[n]);
            }
        }
        CHECK_MSG(shape, "completions logprobs shape (stream %d)", stream);
        CHECK_EQ_INT(n, 5);
        for (int d = 0; d < n_docs; d++) cJSON_Delete(docs[d]);
        resp_free(&r);
    }
}

static void test_streaming(void) {
    /* Multi-byte characters split over byte tokens: each chunk must hold whole characters. */
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"\\u00e9\\u20ac\\ud83d\\ude00 ok\"}],\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true}}";
    resp r;
    CHECK_EQ_INT(post(S.port, "/v1/chat/completions", body, &r), 200);
    CHECK(strcasestr(r.head, "Content-Type: text/event-stream") != NULL);
    sse s;
    sse_parse(r.body, r.n_body, &s);
    CHECK(s.well_formed);
    CHECK(s.done);
    CHECK(s.utf8_ok);
    CHECK(s.n > 10);
    const cJSON *d0 = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(s.ev[0], "choices"), 0), "delta");
    CHECK(d0 && cJSON_GetObjectItem(d0, "role") && !strcmp(cJSON_GetObjectItem(d0, "role")->valuestring, "assistant"));
    int replacement = 0;
    for (int i = 0; i < s.n; i++) {
        char *txt = cJSON_PrintUnformatted(s.ev[i]);
        if (strstr(txt, "\xEF\xBF\xBD")) replacement++;
        free(txt);
        CHECK_STR(cJSON_GetObjectItem(s.ev[i], "object")->valuestring, "chat.completion.chunk");
    }
    CHECK_EQ_INT(replacement, 0);
    /* The last two events: the finish chunk (with timings) and the usage chunk (no choices). */
    const cJSON *fin = cJSON_GetArrayItem(cJSON_GetObjectItem(s.ev[s.n - 2], "choices"), 0);
    CHECK(fin && !strcmp(cJSON_GetObjectItem(fin, "finish_reason")->valuestring, "stop"));
    CHECK(cJSON_GetObjectItem(s.ev[s.n - 2], "timings") != NULL);
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(s.ev[s.n - 1], "choices")), 0);
    CHECK(cJSON_GetObjectItem(s.ev[s.n - 1], "usage") != NULL);
    char *text = sse_text(&s);
    char *want = rot13("<|im_start|>user\n\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80 ok<|im_end|>\n<|im_start|>assistant\n");
    CHECK_STR(text, want);
    free(text);
    free(want);
    sse_free(&s);
    resp_free(&r);

    /* Completions stream with a stop string. */
    CHECK_EQ_INT(post(S.port, "/v1/completions", "{\"prompt\":\"stream me\",\"stream\":true,\"stop\":\"zr\"}", &r), 200);
    sse_parse(r.body, r.n_body, &s);
    CHECK(s.well_formed && s.done);
    text = sse_text(&s);
    CHECK_STR(text, "fgernz ");
    free(text);
    sse_free(&s);
    resp_free(&r);

    /* Native stream: ends with the stop chunk, no [DONE] (llama-server's behaviour). */
    CHECK_EQ_INT(post(S.port, "/completion", "{\"prompt\":\"native\",\"stream\":true}", &r), 200);
    sse_parse(r.body, r.n_body, &s);
    CHECK(s.well_formed && !s.done && s.n > 2);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(s.ev[s.n - 1], "stop")));
    CHECK(cJSON_GetObjectItem(s.ev[s.n - 1], "timings") != NULL);
    text = sse_text(&s);
    CHECK_STR(text, "angvir");
    free(text);
    sse_free(&s);
    resp_free(&r);
}

static int busy_slots(int port) {
    resp r;
    if (get(port, "/slots", &r) != 200) return -1;
    cJSON *j = cJSON_Parse(r.body);
    int busy = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, j) busy += cJSON_IsTrue(cJSON_GetObjectItem(it, "is_processing"));
    cJSON_Delete(j);
    resp_free(&r);
    return busy;
}

/* Poll /metrics until its text contains `text` (bounded: 5 s). */
static bool wait_metrics(int port, const char *text) {
    bool seen = false;
    for (double t0 = nx_gen_now(); !seen && nx_gen_now() - t0 < 5;) {
        resp r;
        if (get(port, "/metrics", &r) == 200) seen = r.body && strstr(r.body, text) != NULL;
        resp_free(&r);
        if (!seen) usleep(5000);
    }
    return seen;
}

/* Read from fd until `count` SSE events arrived (bounded by the socket timeout). */
static bool read_events(int fd, int count) {
    char buf[4096];
    int seen = 0;
    while (seen < count) {
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n <= 0) return false;
        buf[n] = 0;
        for (char *p = buf; (p = strstr(p, "data: ")); p += 6) seen++;
    }
    return true;
}

static void test_disconnect(void) {
    srv v;
    CHECK(srv_start(&v, 2, 1 << 16, 4, 2000, NULL, 0));
    /* An endless stream (ignore_eos, huge context): the client leaves after a few chunks. */
    int fd = send_req(v.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"forever\",\"stream\":true,\"ignore_eos\":true}");
    CHECK(fd >= 0);
    CHECK(read_events(fd, 5));
    CHECK_EQ_INT(busy_slots(v.port), 1);
    double t0 = nx_gen_now();
    close(fd);
    int busy = 1;
    while (busy != 0 && nx_gen_now() - t0 < 5) {
        usleep(5000);
        busy = busy_slots(v.port);
    }
    double freed_ms = (nx_gen_now() - t0) * 1000;
    CHECK_EQ_INT(busy, 0);   /* within the loop's bound; how fast is printed, not asserted (tests never time) */
    fprintf(stderr, "  slot freed %.0f ms after the disconnect\n", freed_ms);
    /* Same for a non-streaming request waiting for its answer. */
    fd = send_req(v.port, "POST", "/completion", NULL, "{\"prompt\":\"forever\",\"ignore_eos\":true}");
    t0 = nx_gen_now();
    while (busy_slots(v.port) != 1 && nx_gen_now() - t0 < 5) usleep(5000);
    close(fd);
    t0 = nx_gen_now();
    busy = 1;
    while (busy != 0 && nx_gen_now() - t0 < 5) {
        usleep(5000);
        busy = busy_slots(v.port);
    }
    CHECK_EQ_INT(busy, 0);
    resp r;
    CHECK_EQ_INT(get(v.port, "/metrics", &r), 200);
    CHECK(strstr(r.body, "nextn_requests_active 0") != NULL);
    resp_free(&r);
    srv_stop(&v);
}

static void test_queue_overflow(void) {
    srv v;
    CHECK(srv_start(&v, 2, 1 << 16, 2, 2000, NULL, 0));
    int fds[4];
    for (int i = 0; i < 4; i++)
        fds[i] = send_req(v.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"wait\",\"stream\":true,\"ignore_eos\":true}");
    /* Wait until all four were accepted (requests_active 4) and 2 run, 2 are queued. Depth 2 and
     * 2 busy alone, seen in two snapshots, also hold for three requests while one is admitted; a
     * fourth not yet submitted by its slow connection thread then takes the last place and gets
     * the 503, and "one too many" waits behind the endless streams. Once all four are in, every part
     * of this condition stays true. */
    double t0 = nx_gen_now();
    bool full = false;
    while (!full && nx_gen_now() - t0 < 5) {
        resp r;
        if (get(v.port, "/metrics", &r) == 200)
            full = r.body && strstr(r.body, "nextn_requests_active 4\n") && strstr(r.body, "nextn_queue_depth 2\n");
        resp_free(&r);
        full = full && busy_slots(v.port) == 2;
        if (!full) usleep(5000);
    }
    CHECK(full);
    resp r;
    CHECK_EQ_INT(post(v.port, "/v1/completions", "{\"prompt\":\"one too many\"}", &r), 503);
    CHECK(is_error(&r, 503, "queue"));
    CHECK(r.head && strcasestr(r.head, "Retry-After: ") != NULL);
    resp_free(&r);
    CHECK_EQ_INT(get(v.port, "/metrics", &r), 200);
    CHECK(strstr(r.body, "nextn_requests_total{status=\"503\"} 1") != NULL);
    resp_free(&r);
    for (int i = 0; i < 4; i++) close(fds[i]);
    /* Queued requests may reach a slot before their own thread sees the disconnect: wait until
     * nothing is in flight at all. */
    t0 = nx_gen_now();
    bool idle = false;
    while (!idle && nx_gen_now() - t0 < 5) {
        if (get(v.port, "/metrics", &r) == 200) idle = r.body && strstr(r.body, "nextn_requests_active 0\n") != NULL;
        resp_free(&r);
        if (!idle) usleep(5000);
    }
    CHECK(idle);
    CHECK_EQ_INT(busy_slots(v.port), 0);
    /* Served again. */
    CHECK_EQ_INT(post(v.port, "/v1/completions", "{\"prompt\":\"again\"}", &r), 200);
    resp_free(&r);
    srv_stop(&v);
}

static void test_endpoints(void) {
    resp r;
    CHECK_EQ_INT(get(S.port, "/v1/models", &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *data = cJSON_GetObjectItem(j, "data");
    CHECK_EQ_INT(cJSON_GetArraySize(data), 3);
    CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(data, 0), "id")->valuestring, "fake");
    const cJSON *m2 = cJSON_GetArrayItem(data, 2);
    CHECK_STR(cJSON_GetObjectItem(m2, "id")->valuestring, "fake-slot1");
    CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(m2, "meta"), "slot_pinned")->valueint, 1);
    cJSON_Delete(j);
    resp_free(&r);
    CHECK_EQ_INT(post(S.port, "/tokenize", "{\"content\":\"h\\u00e9\",\"add_special\":true}", &r), 200);
    CHECK(strstr(r.body, "{\"tokens\":[257,104,195,169]}") != NULL);
    resp_free(&r);
    CHECK_EQ_INT(post(S.port, "/detokenize", "{\"tokens\":[104,195,169]}", &r), 200);
    CHECK(strstr(r.body, "{\"content\":\"h\xC3\xA9\"}") != NULL);
    resp_free(&r);
    CHECK_EQ_INT(get(S.port, "/props", &r), 200);
    j = cJSON_Parse(r.body);
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "total_slots")->valueint, 2);
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "speculative"), "types")), 2);
    cJSON_Delete(j);
    resp_free(&r);
    CHECK_EQ_INT(get(S.port, "/slots", &r), 200);
    j = cJSON_Parse(r.body);
    CHECK_EQ_INT(cJSON_GetArraySize(j), 2);
    CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "speculative") != NULL);
    cJSON_Delete(j);
    resp_free(&r);
    CHECK_EQ_INT(request(S.port, "OPTIONS", "/v1/chat/completions", NULL, NULL, &r), 204);
    resp_free(&r);
}

/* ===== Prometheus text format checker ===== */

typedef struct prom {
    char name[64][96];
    char labels[64][128];
    double value[64];
    int n;
} prom;

static bool metric_name_ok(const char *s, size_t n) {
    if (!n || !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':')) return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == ':')) return false;
    return true;
}

/* Check the whole exposition: HELP/TYPE lines, sample syntax, a TYPE before the samples of each
 * family, histogram buckets cumulative with +Inf = _count and a _sum. Keeps the samples. */
static bool prom_check(const char *text, prom *out, char *why, size_t why_n) {
    char types[64][96], tkind[64][16];
    int nt = 0;
    out->n = 0;
    double last_bucket = -1;
    char bucket_family[96] = "";
    double inf_count = -1;
    int n_sum_seen = 0, n_count_seen = 0;   /* of the current histogram */
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        if (!e) { snprintf(why, why_n, "last line without newline"); return false; }
        char line[512];
        size_t len = (size_t)(e - p);
        if (len >= sizeof line) { snprintf(why, why_n, "line too long"); return false; }
        memcpy(line, p, len);
        line[len] = 0;
        p = e + 1;
        if (!len) continue;
        if (line[0] == '#') {
            char kw[8], name[96], rest[256];
            if (sscanf(line, "# %7s %95s %255[^\n]", kw, name, rest) < 3) { snprintf(why, why_n, "bad comment: %s", line); return false; }
            if (!metric_name_ok(name, strlen(name))) { snprintf(why, why_n, "bad name: %s", name); return false; }
            if (!strcmp(kw, "TYPE")) {
                if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") && strcmp(rest, "summary") &&
                    strcmp(rest, "untyped")) { snprintf(why, why_n, "bad type: %s", rest); return false; }
                for (int i = 0; i < nt; i++)
                    if (!strcmp(types[i], name)) { snprintf(why, why_n, "TYPE twice: %s", name); return false; }
                if (nt < 64) {
                    snprintf(types[nt], sizeof types[nt], "%s", name);
                    snprintf(tkind[nt], sizeof tkind[nt], "%s", rest);
                    nt++;
                }
            } else if (strcmp(kw, "HELP") != 0) { snprintf(why, why_n, "bad keyword: %s", kw); return false; }
            continue;
        }
        /* name{labels} value */
        size_t nl = strcspn(line, "{ ");
        if (!metric_name_ok(line, nl)) { snprintf(why, why_n, "bad sample name: %s", line); return false; }
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)nl, line);
        char labels[128] = "";
        const char *q = line + nl;
        if (*q == '{') {
            const char *close = strchr(q, '}');
            if (!close) { snprintf(why, why_n, "unclosed labels: %s", line); return false; }
            snprintf(labels, sizeof labels, "%.*s", (int)(close - q - 1), q + 1);
            /* k="v"(,k="v")* */
            const char *l = labels;
            while (*l) {
                size_t kn = strcspn(l, "=");
                if (!metric_name_ok(l, kn) || l[kn] != '=' || l[kn + 1] != '"') { snprintf(why, why_n, "bad label: %s", line); return false; }
                l += kn + 2;
                while (*l && *l != '"') l += *l == '\\' ? 2 : 1;
                if (*l != '"') { snprintf(why, why_n, "bad label value: %s", line); return false; }
                l++;
                if (*l == ',') l++;
                else if (*l) { snprintf(why, why_n, "bad label list: %s", line); return false; }
            }
            q = close + 1;
        }
        if (*q != ' ') { snprintf(why, why_n, "no value: %s", line); return false; }
        char *end;
        double v = strtod(q + 1, &end);
        if (end == q + 1 || (*end && *end != ' ')) { snprintf(why, why_n, "bad value: %s", line); return false; }
        /* Its family must have a TYPE already. */
        char family[96];
        snprintf(family, sizeof family, "%s", name);
        const char *kind = NULL;
        for (int pass = 0; pass < 2 && !kind; pass++) {
            for (int i = 0; i < nt; i++)
                if (!strcmp(types[i], family)) kind = tkind[i];
            if (!kind) {
                static const char *const sfx[] = {"_bucket", "_sum", "_count"};
                for (int s = 0; s < 3; s++) {
                    size_t fl = strlen(family), sl = strlen(sfx[s]);
                    if (fl > sl && !strcmp(family + fl - sl, sfx[s])) { family[fl - sl] = 0; break; }
                }
            }
        }
        if (!kind) { snprintf(why, why_n, "sample before its TYPE: %s", line); return false; }
        if (!strcmp(kind, "histogram")) {
            if (strstr(name, "_bucket")) {
                if (strcmp(bucket_family, family)) {
                    /* a new histogram: the previous one must be complete */
                    if (bucket_family[0] && (n_sum_seen != 1 || n_count_seen != 1)) {
                        snprintf(why, why_n, "histogram %s without exactly one _sum and _count", bucket_family);
                        return false;
                    }
                    snprintf(bucket_family, sizeof bucket_family, "%s", family);
                    last_bucket = -1;
                    inf_count = -1;
                    n_sum_seen = n_count_seen = 0;
                }
                if (v < last_bucket) { snprintf(why, why_n, "buckets not cumulative: %s", line); return false; }
                last_bucket = v;
                if (strstr(labels, "le=\"+Inf\"")) inf_count = v;
                if (n_sum_seen > 0 || n_count_seen > 0) { snprintf(why, why_n, "bucket after _sum/_count: %s", line); return false; }
            } else if (strstr(name, "_count")) {
                if (inf_count < 0) { snprintf(why, why_n, "histogram without a +Inf bucket: %s", line); return false; }
                if (v != inf_count) { snprintf(why, why_n, "+Inf bucket != _count: %s", line); return false; }
                n_count_seen++;
            } else if (strstr(name, "_sum")) {
                if (!(v >= 0)) { snprintf(why, why_n, "negative _sum: %s", line); return false; }
                n_sum_seen++;
            }
        } else if (strcmp(name, family) != 0) { snprintf(why, why_n, "suffix on a %s: %s", kind, line); return false; }
        if (out->n < 64) {
            snprintf(out->name[out->n], sizeof out->name[0], "%s", name);
            snprintf(out->labels[out->n], sizeof out->labels[0], "%s", labels);
            out->value[out->n] = v;
            out->n++;
        }
    }
    if (bucket_family[0] && (n_sum_seen != 1 || n_count_seen != 1)) {
        snprintf(why, why_n, "histogram %s without exactly one _sum and _count", bucket_family);
        return false;
    }
    return true;
}

static double prom_get(const prom *p, const char *name, const char *labels) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->name[i], name) && !strcmp(p->labels[i], labels ? labels : "")) return p->value[i];
    return 0;
}

static void test_metrics(void) {
    srv v;
    CHECK(srv_start(&v, 2, 512, 8, 100, NULL, 0));
    /* Sums over the responses' timings. */
    double prompt_n = 0, predicted_n = 0, drafted[2] = {0}, accepted[2] = {0}, depth1_acc = 0;
    const char *names[2] = {"ngram", "mtp"};
    static const char *const bodies[] = {
        "{\"prompt\":\"metrics one\"}",
        "{\"prompt\":\"metrics two, a longer one\",\"speculative\":{\"n_max\":2}}",
        "{\"prompt\":\"three\",\"speculative\":{\"type\":\"mtp\"},\"stream\":true}",
        "{\"prompt\":\"four\",\"speculative\":{\"type\":\"none\"}}",
        "{\"prompt\":\"metrics one\",\"n_predict\":3}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        resp r;
        CHECK_EQ_INT(request(v.port, "POST", "/completion", NULL, bodies[i], &r), 200);
        cJSON *j = NULL;
        if (strstr(bodies[i], "stream")) {
            sse s;
            sse_parse(r.body, r.n_body, &s);
            j = s.n ? cJSON_Duplicate(s.ev[s.n - 1], true) : NULL;
            sse_free(&s);
        } else {
            j = cJSON_Parse(r.body);
        }
        const cJSON *t = cJSON_GetObjectItem(j, "timings");
        CHECK(t != NULL);
        prompt_n += cJSON_GetObjectItem(t, "prompt_n")->valuedouble;
        predicted_n += cJSON_GetObjectItem(t, "predicted_n")->valuedouble;
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItem(t, "drafters")) {
            for (int k = 0; k < 2; k++)
                if (!strcmp(cJSON_GetObjectItem(d, "type")->valuestring, names[k])) {
                    drafted[k] += cJSON_GetObjectItem(d, "draft_n")->valuedouble;
                    accepted[k] += cJSON_GetObjectItem(d, "draft_n_accepted")->valuedouble;
                }
        }
        const cJSON *d1 = cJSON_GetArrayItem(cJSON_GetObjectItem(t, "draft_by_depth"), 0);
        if (d1) depth1_acc += cJSON_GetObjectItem(d1, "accepted")->valuedouble;
        cJSON_Delete(j);
        resp_free(&r);
    }
    resp r;
    CHECK_EQ_INT(request(v.port, "POST", "/completion", NULL, "{\"prompt\":1}", &r), 400);
    resp_free(&r);
    CHECK_EQ_INT(request(v.port, "GET", "/metrics", NULL, NULL, &r), 200);
    CHECK(strcasestr(r.head, "Content-Type: text/plain") != NULL);
    prom p;
    char why[256] = "";
    bool ok = prom_check(r.body, &p, why, sizeof why);
    CHECK_MSG(ok, "%s", why);
    CHECK_NEAR(prom_get(&p, "nextn_prompt_tokens_total", NULL), prompt_n, 0);
    CHECK_NEAR(prom_get(&p, "nextn_generated_tokens_total", NULL), predicted_n, 0);
    CHECK(drafted[0] > 0 && drafted[1] > 0);
    double depth1_metric = 0;
    for (int k = 0; k < 2; k++) {
        char lab[64];
        snprintf(lab, sizeof lab, "drafter=\"%s\"", names[k]);
        CHECK_NEAR(prom_get(&p, "nextn_spec_drafted_total", lab), drafted[k], 0);
        CHECK_NEAR(prom_get(&p, "nextn_spec_accepted_total", lab), accepted[k], 0);
        snprintf(lab, sizeof lab, "drafter=\"%s\",depth=\"1\"", names[k]);
        depth1_metric += prom_get(&p, "nextn_spec_accepted_by_depth_total", lab);
    }
    CHECK_NEAR(depth1_metric, depth1_acc, 0);
    CHECK_NEAR(prom_get(&p, "nextn_requests_total", "status=\"200\""), 5, 0);
    CHECK_NEAR(prom_get(&p, "nextn_requests_total", "status=\"400\""), 1, 0);
    CHECK_NEAR(prom_get(&p, "nextn_decode_seconds_count", NULL), 5, 0);
    CHECK_NEAR(prom_get(&p, "nextn_time_to_first_token_seconds_count", NULL), 5, 0);
    CHECK_NEAR(prom_get(&p, "nextn_requests_active", NULL), 0, 0);
    CHECK_NEAR(prom_get(&p, "nextn_queue_depth", NULL), 0, 0);
    CHECK(prom_get(&p, "nextn_kv_cache_usage_ratio", NULL) > 0);
    resp_free(&r);
    /* The checker rejects what it should. */
    CHECK(!prom_check("nextn_x 1\n", &p, why, sizeof why));
    CHECK(!prom_check("# TYPE a counter\na{x=1} 1\n", &p, why, sizeof why));
    CHECK(!prom_check("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n", &p, why, sizeof why));
    /* a histogram needs its +Inf bucket, one _sum and one _count equal to +Inf */
    CHECK(prom_check("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3.5\nh_count 2\n", &p, why, sizeof why));
    CHECK(!prom_check("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n", &p, why, sizeof why));
    CHECK(!prom_check("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", &p, why, sizeof why));
    CHECK(!prom_check("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", &p, why, sizeof why));
    srv_stop(&v);
}

/* nx_server_stop() while a stream runs: the stream ends (error chunk), the stop returns, new
 * connections are refused. */
typedef struct stopper { srv *v; double grace; } stopper;
static void *stop_thread(void *arg) {
    stopper *s = arg;
    usleep(100000);
    nx_server_stop(s->v->s, s->grace);
    return NULL;
}

static void test_graceful_stop(void) {
    srv v;
    CHECK(srv_start(&v, 2, 1 << 16, 4, 2000, NULL, 0));
    int fd = send_req(v.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"endless\",\"stream\":true,\"ignore_eos\":true}");
    CHECK(read_events(fd, 3));
    /* A short finite request finishes within the grace period. */
    int fd2 = send_req(v.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"short\",\"stream\":true}");
    /* Stop only once the short one has started (its 200 is counted at its first event): sent is
     * not started, and a connection thread slow under load would meet the stop and get a 503. */
    CHECK(wait_metrics(v.port, "nextn_requests_total{status=\"200\"} 2\n"));
    stopper st = {&v, 0.5};
    pthread_t th;
    double t0 = nx_gen_now();
    pthread_create(&th, NULL, stop_thread, &st);
    size_t n;
    char *raw = read_all(fd, &n);   /* returns when the server closes the stream */
    close(fd);
    pthread_join(th, NULL);
    double took = nx_gen_now() - t0;
    fprintf(stderr, "  stop took %.2f s\n", took);   /* a hang never gets here (read_all waits for the close) */
    CHECK(strstr(raw, "\"error\"") != NULL);          /* the endless one was cancelled */
    free(raw);
    raw = read_all(fd2, &n);
    close(fd2);
    resp r;
    CHECK(parse_resp(raw, n, &r) && r.status == 200);
    sse s;
    sse_parse(r.body, r.n_body, &s);
    CHECK(s.well_formed && s.done);                    /* the short one completed */
    sse_free(&s);
    resp_free(&r);
    free(raw);
    srv_stop(&v);
}

/* While the model loads: /health 503 {"status":"loading"}, completions 503. */
static void test_loading(void) {
    nx_gen_fake_params fp = nx_gen_fake_default_params();
    fp.loading = true;
    nx_gen_backend *be = NULL;
    CHECK(nx_gen_fake_create(&fp, &be, NULL) == NX_OK);
    nx_server_params sp = nx_server_default_params();
    sp.port = 0;
    nx_server *s = NULL;
    CHECK(nx_server_start(&sp, be, &s, NULL) == NX_OK);
    resp r;
    CHECK_EQ_INT(request(nx_server_port(s), "GET", "/health", NULL, NULL, &r), 503);
    CHECK(r.body && strstr(r.body, "{\"status\":\"loading\"}"));
    resp_free(&r);
    CHECK_EQ_INT(request(nx_server_port(s), "POST", "/completion", NULL, "{\"prompt\":\"x\"}", &r), 503);
    CHECK(is_error(&r, 503, "loading"));
    resp_free(&r);
    nx_server_free(s);
    nx_gen_backend_free(be);
}


/* ===== Strict like OpenAI ===== */

static void test_strict(void) {
    resp r;
    static const struct { const char *path, *body, *param; } bad[] = {
        {"/v1/completions", "{\"prompt\":\"x\",\"temperature\":-5}", "temperature"},
        {"/v1/completions", "{\"prompt\":\"x\",\"temperature\":2.5}", "temperature"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":0}", "max_completion_tokens"},
        {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":-1}", "max_tokens"},
        {"/v1/completions", "{\"prompt\":\"x\",\"top_k\":-1}", "top_k"},
        {"/v1/completions", "{\"prompt\":\"x\",\"top_k\":1000000000}", "top_k"},
        {"/v1/completions", "{\"prompt\":\"x\",\"top_p\":1.5}", "top_p"},
        {"/v1/completions", "{\"prompt\":\"x\",\"presence_penalty\":3}", "presence_penalty"},
        {"/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":\"10\"}", "max_tokens"},
        {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs"},
        {"/v1/chat/completions", "{\"messages\":\"hi\"}", "messages"},
        {"/completion", "{\"prompt\":\"x\",\"n_predict\":-2}", "n_predict"},
        {"/tokenize", "{\"content\":5}", "content"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(post(S.port, bad[i].path, bad[i].body, &r), 400);
        cJSON *j = cJSON_Parse(r.body);
        const cJSON *p = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param");
        CHECK_MSG(is_error(&r, 400, bad[i].param) && cJSON_IsString(p) && !strcmp(p->valuestring, bad[i].param),
                  "case %zu: %s -> %s", i, bad[i].body, r.body);
        cJSON_Delete(j);
        resp_free(&r);
    }
    /* In range: llama.cpp's top_k 0 (off), n_predict -1 and any native temperature. */
    static const struct { const char *path, *body; } good[] = {
        {"/v1/completions", "{\"prompt\":\"x\",\"top_k\":0,\"temperature\":2,\"max_tokens\":1}"},
        {"/completion", "{\"prompt\":\"x\",\"n_predict\":-1,\"temperature\":-1}"},
        {"/v1/completions", "{\"model\":\"fake\",\"prompt\":\"x\"}"},
        {"/v1/completions", "{\"model\":\"fake-slot1\",\"prompt\":\"x\"}"},
        {"/v1/completions", "{\"model\":\"fake-s0\",\"prompt\":\"x\"}"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK_MSG(post(S.port, good[i].path, good[i].body, &r) == 200, "good case %zu: %s -> %s", i, good[i].body, r.body);
        resp_free(&r);
    }
    /* Unknown models: 404 model_not_found naming the field. */
    static const char *const unknown[] = {"gpt-4o", "fake-slot2", "fake-slot", "fakex", "fake-s01"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        char body[200];
        snprintf(body, sizeof body, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", unknown[i]);
        CHECK_EQ_INT(post(S.port, "/v1/chat/completions", body, &r), 404);
        CHECK_MSG(is_error(&r, 404, unknown[i]) && strstr(r.body, "\"code\":\"model_not_found\"") &&
                  strstr(r.body, "\"param\":\"model\""), "model %s -> %s", unknown[i], r.body);
        resp_free(&r);
    }
    /* GET /v1/models/{id}. */
    CHECK_EQ_INT(get(S.port, "/v1/models/fake", &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    CHECK_STR(cJSON_GetObjectItem(j, "id")->valuestring, "fake");
    CHECK_STR(cJSON_GetObjectItem(j, "object")->valuestring, "model");
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "max_model_len")) && cJSON_GetObjectItem(j, "max_model_len")->valueint > 0);
    cJSON_Delete(j);
    resp_free(&r);
    CHECK_EQ_INT(get(S.port, "/v1/models/fake-slot1", &r), 200);
    CHECK(strstr(r.body, "\"slot_pinned\":1") != NULL);
    resp_free(&r);
    CHECK_EQ_INT(get(S.port, "/v1/models/nope", &r), 404);
    CHECK(is_error(&r, 404, "nope") && strstr(r.body, "model_not_found"));
    resp_free(&r);
    /* HEAD wherever GET is: the headers of the GET, no body. */
    static const char *const heads[] = {"/health", "/v1/models", "/v1/models/fake", "/props", "/slots", "/metrics"};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        CHECK_MSG(request(S.port, "HEAD", heads[i], i ? AUTH : NULL, NULL, &r) == 200, "HEAD %s: %d", heads[i], r.status);
        CHECK_MSG(r.n_body == 0, "HEAD %s sent %zu body bytes", heads[i], r.n_body);
        resp_free(&r);
    }
    CHECK_EQ_INT(request(S.port, "HEAD", "/v1/completions", AUTH, NULL, &r), 405);
    resp_free(&r);
    /* /completions answers like /v1/completions (OpenAI), /completion in llama.cpp's shape. */
    CHECK_EQ_INT(post(S.port, "/completions", "{\"prompt\":\"abc\",\"max_tokens\":2}", &r), 200);
    j = cJSON_Parse(r.body);
    CHECK_STR(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
    CHECK(cJSON_GetObjectItem(j, "choices") != NULL);
    cJSON_Delete(j);
    resp_free(&r);
    CHECK_EQ_INT(post(S.port, "/completion", "{\"prompt\":\"abc\",\"n_predict\":2}", &r), 200);
    j = cJSON_Parse(r.body);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "content")) && cJSON_GetObjectItem(j, "choices") == NULL);
    cJSON_Delete(j);
    resp_free(&r);
}

/* ===== Access log ===== */

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log_lines[64][1024];
static int g_n_log;

static void log_capture(nx_log_level l, const char *msg, void *u) {
    (void)l;
    (void)u;
    pthread_mutex_lock(&g_log_mu);
    if (g_n_log < 64) snprintf(g_log_lines[g_n_log++], sizeof g_log_lines[0], "%s", msg);
    pthread_mutex_unlock(&g_log_mu);
}

/* The first captured line holding `needle` (copied into out), waiting up to 5 s: the line is
 * written when libmicrohttpd reports the request complete, just after the client has it. */
static bool log_wait(const char *needle, char *out, size_t n) {
    double t0 = nx_gen_now();
    while (nx_gen_now() - t0 < 5) {
        pthread_mutex_lock(&g_log_mu);
        for (int i = 0; i < g_n_log; i++)
            if (strstr(g_log_lines[i], needle)) {
                snprintf(out, n, "%s", g_log_lines[i]);
                pthread_mutex_unlock(&g_log_mu);
                return true;
            }
        pthread_mutex_unlock(&g_log_mu);
        usleep(2000);
    }
    return false;
}

static void test_access_log(void) {
    resp r;
    char line[1024];
    g_n_log = 0;
    nx_log_set(log_capture, NULL, NX_LOG_INFO);
    /* text */
    CHECK_EQ_INT(post(S.port, "/v1/completions", "{\"prompt\":\"log me\",\"max_tokens\":3}", &r), 200);
    resp_free(&r);
    CHECK(log_wait("path=/v1/completions", line, sizeof line));
    fprintf(stderr, "    text: %s\n", line);
    CHECK(!strncmp(line, "access ", 7));
    static const char *const keys[] = {"remote=127.0.0.1", "method=POST", "status=200", "bytes=", "prompt_tokens=7",
                                       "gen_tokens=3", "draft_n=", "draft_accepted=", "draft_acceptance=", "ms="};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) CHECK_MSG(strstr(line, keys[i]), "text line lacks %s", keys[i]);
    CHECK_EQ_INT(get(S.port, "/v2/log-404", &r), 404);
    resp_free(&r);
    CHECK(log_wait("path=/v2/log-404", line, sizeof line));
    CHECK(strstr(line, "status=404") && strstr(line, "error=\"unknown endpoint GET /v2/log-404\""));
    /* json: one object per line with typed fields */
    nx_log_set_format(NX_LOG_JSON);
    CHECK_EQ_INT(post(S.port, "/v1/chat/completions",
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"q\\\"uote\"}],\"max_tokens\":4,\"stream\":true}", &r), 200);
    resp_free(&r);
    CHECK(log_wait("\"path\":\"/v1/chat/completions\"", line, sizeof line));
    fprintf(stderr, "    json: %s\n", line);
    cJSON *j = cJSON_Parse(line);
    CHECK(j != NULL);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "event")), "access");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "level")), "info");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "method")), "POST");
    CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "time")));
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "status") ? cJSON_GetObjectItem(j, "status")->valueint : -1, 200);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "bytes")) && cJSON_GetObjectItem(j, "bytes")->valueint > 0);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "prompt_tokens")) && cJSON_GetObjectItem(j, "prompt_tokens")->valueint > 0);
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "gen_tokens") ? cJSON_GetObjectItem(j, "gen_tokens")->valueint : -1, 4);
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "draft_acceptance")));
    CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "ms")) && cJSON_GetObjectItem(j, "ms")->valuedouble >= 0);
    cJSON_Delete(j);
    nx_log_set_format(NX_LOG_TEXT);
    nx_log_set(NULL, NULL, NX_LOG_WARN);
}

/* ===== Slow clients ===== */

/* A non-blocking connection from `src` (a loopback address) to the server. */
static int connect_from(const char *src, int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    struct sockaddr_in d = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &d.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || connect(fd, (struct sockaddr *)&d, sizeof d) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {0, 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

/* Has the server closed fd? (EOF or reset, without blocking) */
static bool closed_by_peer(int fd) {
    char b[256];
    ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* 300 connections from one address trickle header bytes; a client from another address is
 * still answered at once (the per-address cap refuses all but 64 of them). */
static void test_slow_clients(void) {
    srv v;
    CHECK(srv_start(&v, 2, 256, 8, 200, NULL, 0));
    enum { N = 300 };
    int fds[N], n_open = 0;
    for (int i = 0; i < N; i++) {
        fds[i] = connect_from("127.0.0.2", v.port);
        if (fds[i] >= 0) {
            n_open++;
            send_all(fds[i], "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ", 39);
        }
    }
    CHECK_EQ_INT(n_open, N);
    double lat[3] = {0};
    int answered = 0;
    double t_end = nx_gen_now() + 2.0;
    for (int round = 0; nx_gen_now() < t_end; round++) {
        for (int i = 0; i < N; i++)
            if (fds[i] >= 0) send(fds[i], "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);   /* one byte each */
        if (round % 5 == 2 && answered < 3) {
            resp r;
            double t0 = nx_gen_now();
            int st = request(v.port, "GET", "/health", NULL, NULL, &r);
            double dt = nx_gen_now() - t0;
            resp_free(&r);
            CHECK_MSG(st == 200, "normal client: status %d after %.3f s", st, dt);   /* a starved one times out */
            lat[answered++] = dt;
        }
        usleep(100 * 1000);
    }
    int refused = 0;
    for (int i = 0; i < N; i++) refused += fds[i] >= 0 && closed_by_peer(fds[i]);
    fprintf(stderr, "    300 slow connections from 127.0.0.2: %d refused by the per-address cap (64), %d held; "
            "normal client from 127.0.0.1 answered in %.1f / %.1f / %.1f ms\n",
            refused, N - refused, lat[0] * 1e3, lat[1] * 1e3, lat[2] * 1e3);
    CHECK_EQ_INT(answered, 3);
    CHECK_EQ_INT(refused, N - 64);
    for (int i = 0; i < N; i++)
        if (fds[i] >= 0) close(fds[i]);
    srv_stop(&v);
}

/* --max-connections: past the limit a connection is refused; below it again, served. */
static void test_max_connections(void) {
    nx_gen_fake_params fp = nx_gen_fake_default_params();
    nx_gen_backend *be = NULL;
    nx_error err = {0};
    CHECK(nx_gen_fake_create(&fp, &be, &err) == NX_OK);
    nx_server_params sp = nx_server_default_params();
    sp.port = 0;
    sp.max_connections = 8;
    sp.max_connections_per_ip = 0;
    nx_server *s = NULL;
    CHECK(nx_server_start(&sp, be, &s, &err) == NX_OK);
    int port = nx_server_port(s);
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = connect_from("127.0.0.3", port);
        CHECK(fds[i] >= 0);
    }
    usleep(200 * 1000);   /* libmicrohttpd accepts them */
    resp r;
    int st = request(port, "GET", "/health", NULL, NULL, &r);
    resp_free(&r);
    CHECK_MSG(st < 0, "the 9th connection got status %d", st);
    for (int i = 0; i < 8; i++) close(fds[i]);
    st = -1;
    for (double t0 = nx_gen_now(); st != 200 && nx_gen_now() - t0 < 5;) {
        usleep(20 * 1000);
        st = request(port, "GET", "/health", NULL, NULL, &r);
        resp_free(&r);
    }
    CHECK_EQ_INT(st, 200);
    nx_server_free(s);
    nx_gen_backend_free(be);
}

/* The read deadline is absolute: trickling does not stretch it; a kept-alive idle connection is
 * not cut by it (only the idle timeout closes those). */
static void test_read_deadline(void) {
    nx_gen_fake_params fp = nx_gen_fake_default_params();
    nx_gen_backend *be = NULL;
    nx_error err = {0};
    CHECK(nx_gen_fake_create(&fp, &be, &err) == NX_OK);
    nx_server_params sp = nx_server_default_params();
    sp.port = 0;
    sp.read_timeout_s = 1;
    nx_server *s = NULL;
    CHECK(nx_server_start(&sp, be, &s, &err) == NX_OK);
    int port = nx_server_port(s);
    int fd = connect_from("127.0.0.1", port);
    CHECK(fd >= 0);
    send_all(fd, "POST /completion HTTP/1.1\r\nHost: x\r\n", 36);
    double t0 = nx_gen_now();
    bool closed = false;
    while (!closed && nx_gen_now() - t0 < 5) {
        send(fd, "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        usleep(100 * 1000);
        closed = closed_by_peer(fd);
    }
    fprintf(stderr, "    trickling client closed after %.2f s (read deadline 1 s)\n", nx_gen_now() - t0);
    CHECK(closed);
    close(fd);
    /* Keep-alive: a request, 1.5 s of silence, a second request on the same connection. */
    fd = connect_to(port);
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(send_all(fd, req, strlen(req)));
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    CHECK(n > 0 && !strncmp(buf, "HTTP/1.1 200", 12));
    usleep(1500 * 1000);
    CHECK(send_all(fd, req, strlen(req)));
    n = recv(fd, buf, sizeof buf - 1, 0);
    CHECK_MSG(n > 0 && !strncmp(buf, "HTTP/1.1 200", 12), "second request on a kept-alive connection: %zd", n);
    close(fd);
    nx_server_free(s);
    nx_gen_backend_free(be);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    nx_log_set(NULL, NULL, NX_LOG_WARN);
    if (!srv_start(&S, 2, 256, 2, 200, KEY, 0)) {
        fprintf(stderr, "cannot start the server\n");
        return 1;
    }
    RUN(test_auth);
    RUN(test_errors);
    RUN(test_body_limit);
    RUN(test_chat);
    RUN(test_completions_and_stops);
    RUN(test_streaming);
    RUN(test_endpoints);
    RUN(test_strict);
    RUN(test_access_log);
    srv_stop(&S);
    RUN(test_slow_clients);
    RUN(test_read_deadline);
    RUN(test_max_connections);
    RUN(test_disconnect);
    RUN(test_queue_overflow);
    RUN(test_metrics);
    RUN(test_graceful_stop);
    RUN(test_loading);
    RUN(test_chat_parse_streaming);
    return test_summary();
}
