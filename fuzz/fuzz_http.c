/*
 * fuzz_http.c — libFuzzer target for the whole HTTP surface: real libmicrohttpd, the real
 * handlers (http.c, http_gen.c, request.c), the fake backend (fast, deterministic), over a
 * loopback socket per input.
 *
 * Input: "METHOD PATH\n" then header lines ("Name: value\n", up to an empty line), then the body.
 * The harness frames it as HTTP/1.1 with its own Host, "Connection: close" and a Content-Length
 * matching the body, after the fuzzed headers (header lines naming Content-Length,
 * Transfer-Encoding, Connection or Host, and folded lines starting with a space or tab, are
 * dropped), so that every input is one complete request and none waits for bytes that never
 * come; libmicrohttpd's own framing is its business. The server has an API key ("k": send
 * "Authorization: Bearer k"), 2 slots of 96 positions, a 4 KiB body limit, drafters ngram + mtp.
 * Promises checked (any broken one traps):
 *   - an answer arrives (the server closes the connection) within 10 s: no hang, no crash;
 *   - a status line HTTP/1.1 NNN; never 500 (no internal error on any input);
 *   - application/json bodies parse; error bodies have OpenAI's shape (message and type strings,
 *     param and code string or null);
 *   - text/event-stream bodies are "data: <json>\n\n" events (or [DONE]);
 *   - HEAD answers carry no body.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "core/log.h"
#include "server/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static nx_gen_backend *g_be;
static nx_server *g_srv;
static int g_port;

static void setup(void) {
    signal(SIGPIPE, SIG_IGN);
    nx_log_set(NULL, NULL, NX_LOG_NONE);
    nx_gen_fake_params fp = nx_gen_fake_default_params();
    fp.alias = "fuzz";
    fp.n_slots = 2;
    fp.n_ctx_slot = 96;
    fp.queue_max = 4;
    fp.step_us = 0;
    fp.spec.n_types = 2;
    fp.spec.types[0] = NX_SPEC_NGRAM;
    fp.spec.types[1] = NX_SPEC_MTP;
    fp.spec.draft_max = 4;
    nx_error err = {0};
    if (nx_gen_fake_create(&fp, &g_be, &err) != NX_OK) __builtin_trap();
    nx_server_params sp = nx_server_default_params();
    sp.port = 0;
    sp.api_key = "k";
    sp.max_body = 4096;
    sp.read_timeout_s = 5;
    if (nx_server_start(&sp, g_be, &g_srv, &err) != NX_OK) __builtin_trap();
    g_port = nx_server_port(g_srv);
}

typedef struct buf { char *p; size_t n, cap; } buf;

static void add(buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) __builtin_trap();
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void adds(buf *b, const char *s) { add(b, s, strlen(s)); }

/* The next '\n'-ended line of [*p, end) without its "\r\n" / "\n"; false at the end. */
static bool next_line(const char **p, const char *end, const char **ls, size_t *ln) {
    if (*p >= end) return false;
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    const char *e = nl ? nl : end;
    *ls = *p;
    *ln = (size_t)(e - *p);
    if (*ln && (*ls)[*ln - 1] == '\r') (*ln)--;
    *p = nl ? nl + 1 : end;
    return true;
}

static bool header_dropped(const char *s, size_t n) {
    static const char *const names[] = {"content-length", "transfer-encoding", "connection", "host"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t k = strlen(names[i]);
        if (n >= k && !strncasecmp(s, names[i], k)) {
            const char *q = s + k;
            while (q < s + n && (*q == ' ' || *q == '\t')) q++;
            if (q == s + n || *q == ':') return true;
        }
    }
    return false;
}

static void check_json_body(const char *body, size_t n, int status) {
    cJSON *j = cJSON_ParseWithLength(body, n);
    if (!j) __builtin_trap();
    if (status >= 400) {
        const cJSON *e = cJSON_GetObjectItem(j, "error");
        const cJSON *c = cJSON_GetObjectItem(e, "code"), *p = cJSON_GetObjectItem(e, "param");
        if (!cJSON_IsString(cJSON_GetObjectItem(e, "message")) || !cJSON_IsString(cJSON_GetObjectItem(e, "type")) ||
            !(cJSON_IsString(c) || cJSON_IsNull(c)) || !(cJSON_IsString(p) || cJSON_IsNull(p)))
            if (!(status == 503 && cJSON_GetObjectItem(j, "status")))   /* /health while loading */
                __builtin_trap();
    }
    cJSON_Delete(j);
}

/* De-chunk in place; returns the body length (or traps on a broken chunk framing). */
static size_t dechunk(char *b, size_t n) {
    size_t o = 0;
    char *p = b, *end = b + n;
    while (p < end) {
        char *e;
        unsigned long len = strtoul(p, &e, 16);
        char *crlf = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!crlf || e == p) __builtin_trap();
        p = crlf + 2;
        if (len == 0) return o;
        if (len > (size_t)(end - p)) __builtin_trap();
        memmove(b + o, p, len);
        o += len;
        p += len + 2;
    }
    return o;   /* a stream may end without its last chunk when generation failed */
}

static void check_sse(const char *b, size_t n) {
    const char *p = b, *end = b + n;
    while (p < end) {
        if ((size_t)(end - p) < 6 || strncmp(p, "data: ", 6) != 0) __builtin_trap();
        const char *e = memmem(p, (size_t)(end - p), "\n\n", 2);
        if (!e) __builtin_trap();
        const char *pl = p + 6;
        size_t len = (size_t)(e - pl);
        if (!(len == 6 && !strncmp(pl, "[DONE]", 6))) {
            cJSON *j = cJSON_ParseWithLength(pl, len);
            if (!j) __builtin_trap();
            cJSON_Delete(j);
        }
        p = e + 2;
    }
}

/* A connection to the server, with 10 s send / receive timeouts. It closes with a reset, so that a
 * million inputs park no ports in TIME_WAIT; a passing shortage of local ports is waited out (the
 * listener itself is always there). */
static int open_conn(void) {
    for (int tries = 0; tries < 200; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) __builtin_trap();
        struct timeval tv = {10, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        int e = errno;
        close(fd);
        if (e != EADDRNOTAVAIL && e != EAGAIN && e != EINTR) {
            fprintf(stderr, "fuzz_http: cannot connect to the server: %s\n", strerror(e));
            break;
        }
        usleep(5000);
    }
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_srv) setup();
    const char *p = (const char *)data, *end = p + size;
    const char *ls;
    size_t ln;
    if (!next_line(&p, end, &ls, &ln)) return 0;
    buf req = {0};
    /* request line: "METHOD PATH" as given */
    add(&req, ls, ln);
    adds(&req, " HTTP/1.1\r\n");
    bool head = ln >= 5 && !strncmp(ls, "HEAD ", 5);
    /* The fuzzed headers, then the framing ones (a folded line, " x", would extend the header
     * before it: it is dropped, so that nothing can change the framing). */
    while (next_line(&p, end, &ls, &ln) && ln > 0) {
        if (header_dropped(ls, ln) || ls[0] == ' ' || ls[0] == '\t') continue;
        add(&req, ls, ln);
        adds(&req, "\r\n");
    }
    char cl[96];
    snprintf(cl, sizeof cl, "Host: fuzz\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n", (size_t)(end - p));
    adds(&req, cl);
    add(&req, p, (size_t)(end - p));

    int fd = open_conn();
    /* The server may answer (and close) before the whole body is in: a send error is fine. */
    for (size_t off = 0; off < req.n;) {
        ssize_t w = send(fd, req.p + off, req.n - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
    }
    buf resp = {0};
    char tmp[16384];
    for (;;) {
        ssize_t r = recv(fd, tmp, sizeof tmp, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) __builtin_trap();   /* no answer in 10 s */
        if (r <= 0) break;
        add(&resp, tmp, (size_t)r);
    }
    close(fd);
    if (!resp.n) {
        free(req.p);   /* libmicrohttpd refused the request line outright: nothing of ours ran */
        free(resp.p);
        return 0;
    }
    if (getenv("NX_FUZZ_HTTP_TRACE")) fprintf(stderr, "--- request:\n%s\n--- response:\n%.2000s\n", req.p, resp.p);
    int status = 0;
    if (resp.n < 12 || sscanf(resp.p, "HTTP/1.%*d %d", &status) != 1) __builtin_trap();
    if (status == 500) __builtin_trap();
    if (getenv("NX_FUZZ_HTTP_TRACE")) fprintf(stderr, "%d %.60s\n", status, (const char *)data);
    char *sep = memmem(resp.p, resp.n, "\r\n\r\n", 4);
    if (!sep) __builtin_trap();
    *sep = 0;
    const char *hdr = resp.p;
    char *body = sep + 4;
    size_t nb = resp.n - (size_t)(body - resp.p);
    free(req.p);
    if (strcasestr(hdr, "\r\nTransfer-Encoding: chunked")) nb = dechunk(body, nb);
    if (head && nb) __builtin_trap();
    if (!head && strcasestr(hdr, "\r\nContent-Type: application/json")) check_json_body(body, nb, status);
    if (!head && strcasestr(hdr, "\r\nContent-Type: text/event-stream")) check_sse(body, nb);
    free(resp.p);
    return 0;
}
