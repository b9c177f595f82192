/*
 * test_server_model.c — `nextn serve`'s model backend (src/server/backend_model.c) end to end on
 * loopback: the bundled tiny qwen35 MTP model, 4 slots, speculation (mtp) on. Checks that greedy
 * completions through the server equal the engine's direct output for 4 concurrent clients, that
 * streaming gives the same text, that a client disconnect frees its slot at once, and that the
 * /metrics speculation counters equal the sums of the per-response timings.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "test.h"
#include "model.h"
#include "server/backend_model.h"
#include "server/server.h"
#include "spec/engine.h"
#include "tokenizer.h"

#define N_PREDICT 40
#define N_CLIENTS 4

static const char *PROMPTS[N_CLIENTS] = {
    "def fib(n):",
    "import numpy as np\n\nclass Matrix:",
    "for i in range(10):\n    print(",
    "# Sort a list of numbers\ndef sort(xs):",
};

static char model_path[1024];

static bool find_model(void) {
    const char *cands[] = {NX_SOURCE_DIR "/models/tiny-qwen35-mtp-q8_0.gguf", NX_SHARED_DIR "/models/tiny-qwen35-mtp-q8_0.gguf"};
    for (int i = 0; i < 2; i++)
        if (access(cands[i], R_OK) == 0) {
            snprintf(model_path, sizeof model_path, "%s", cands[i]);
            return true;
        }
    return false;
}

/* ===== Reference: the engine run directly, one sequence, speculation off ===== */

static char *ref_text[N_CLIENTS];

static bool make_reference(void) {
    nx_model *m = NULL;
    nx_tokenizer *tok = NULL;
    nx_ctx *ctx = NULL;
    nx_spec_engine *e = NULL;
    nx_error err = {0};
    bool ok = false;
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = 1;
    if (nx_model_load(model_path, &mp, &m) != NX_OK) goto done;
    if (nx_tokenizer_from_gguf(m->gguf, &tok, &err) != NX_OK) goto done;
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = 1;
    if (nx_ctx_create(m, &cp, &ctx) != NX_OK) goto done;
    nx_spec_engine_params ep = nx_spec_engine_default_params();
    ep.sampler = nx_sampler_default_params(nx_model_n_vocab(m));
    ep.sampler.temperature = 0;
    if (nx_spec_engine_create(ctx, &ep, &e, &err) != NX_OK) goto done;
    const int32_t *eog;
    int n_eog = nx_tokenizer_eog_ids(tok, &eog);
    for (int c = 0; c < N_CLIENTS; c++) {
        nx_token_vec ids = {0};
        if (nx_tokenize(tok, PROMPTS[c], strlen(PROMPTS[c]), NX_TOK_ADD_SPECIAL | NX_TOK_PARSE_SPECIAL, &ids, &err) != NX_OK) goto done;
        nx_spec_request q = {.prompt = ids.ids, .n_prompt = (int)ids.n, .n_predict = N_PREDICT, .stop = eog, .n_stop = n_eog};
        nx_seq_id seq;
        nx_status st = nx_spec_engine_add(e, &q, &seq, &err);
        while (st == NX_OK && nx_spec_engine_active(e, seq)) st = nx_spec_engine_step(e, &err);
        nx_token_vec_free(&ids);
        if (st != NX_OK) goto done;
        int n;
        const nx_token *out = nx_spec_engine_output(e, seq, &n);
        size_t cap = 16, len = 0;
        char *s = malloc(cap);
        for (int i = 0; i < n && !nx_token_is_eog(tok, out[i]); i++) {
            size_t np;
            const char *p = nx_token_piece(tok, out[i], false, &np);
            while (len + np + 1 > cap) s = realloc(s, cap *= 2);
            memcpy(s + len, p, np);
            len += np;
        }
        s[len] = 0;
        ref_text[c] = s;
        nx_spec_engine_release(e, seq);
    }
    ok = true;
done:
    if (!ok) fprintf(stderr, "  reference failed: %s %s\n", err.msg, nx_last_error());
    nx_spec_engine_free(e);
    nx_ctx_free(ctx);
    nx_tokenizer_free(tok);
    nx_model_free(m);
    return ok;
}

/* ===== The server ===== */

typedef struct srv {
    nx_gen_backend *be;
    nx_server *s;
    int port;
} srv;

static bool srv_start(srv *v, int n_ctx) {
    memset(v, 0, sizeof *v);
    nx_gen_model_params p = nx_gen_model_default_params();
    p.model_path = model_path;
    p.n_slots = 4;
    p.n_ctx = n_ctx;
    p.n_threads = 1;
    p.spec.n_types = 1;
    p.spec.types[0] = NX_SPEC_MTP;
    p.spec.draft_max = 4;
    nx_error err = {0};
    if (nx_gen_model_create(&p, &v->be, &err) != NX_OK) {
        fprintf(stderr, "  backend: %s\n", err.msg);
        return false;
    }
    nx_server_params sp = nx_server_default_params();
    sp.port = 0;
    if (nx_server_start(&sp, v->be, &v->s, &err) != NX_OK) {
        fprintf(stderr, "  server start: %s\n", err.msg);
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

/* ===== A tiny HTTP/1.1 client (Connection: close) ===== */

static int send_req(int port, const char *method, const char *path, const char *body) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); return -1; }
    char head[512];
    size_t nb = body ? strlen(body) : 0;
    int nh = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n",
                      method, path, body ? "Content-Type: application/json\r\n" : "", nb);
    if (send(fd, head, (size_t)nh, MSG_NOSIGNAL) != nh || (nb && send(fd, body, nb, MSG_NOSIGNAL) != (ssize_t)nb)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The whole response body (de-chunked), NULL on failure; *status gets the HTTP status. */
static char *request(int port, const char *method, const char *path, const char *body, int *status) {
    *status = -1;
    int fd = send_req(port, method, path, body);
    if (fd < 0) return NULL;
    size_t cap = 8192, n = 0;
    char *raw = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) raw = realloc(raw, cap *= 2);
        ssize_t r = recv(fd, raw + n, cap - n - 1, 0);
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    raw[n] = 0;
    char *sep = strstr(raw, "\r\n\r\n");
    if (!sep || sscanf(raw, "HTTP/1.%*d %d", status) != 1) { free(raw); return NULL; }
    *sep = 0;
    bool chunked = strcasestr(raw, "transfer-encoding: chunked") != NULL;
    char *b = sep + 4, *end = raw + n;
    char *out = malloc((size_t)(end - b) + 1);
    size_t o = 0;
    if (!chunked) {
        memcpy(out, b, (size_t)(end - b));
        o = (size_t)(end - b);
    } else {
        char *p = b;
        while (p < end) {
            char *e;
            unsigned long len = strtoul(p, &e, 16);
            char *crlf = strstr(p, "\r\n");
            if (!crlf || e == p) break;
            p = crlf + 2;
            if (len == 0 || p + len > end) break;
            memcpy(out + o, p, len);
            o += len;
            p += len + 2;
        }
    }
    out[o] = 0;
    free(raw);
    return out;
}

static char *completion_body(int c, bool stream) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "prompt", PROMPTS[c]);
    cJSON_AddNumberToObject(j, "max_tokens", N_PREDICT);
    cJSON_AddNumberToObject(j, "temperature", 0);
    cJSON_AddBoolToObject(j, "stream", stream);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

typedef struct client {
    int port, idx, status;
    char *text;
    double draft_n, draft_acc;
    int predicted_n;
} client;

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void *client_run(void *arg) {
    client *c = arg;
    char *body = completion_body(c->idx, false);
    char *r = request(c->port, "POST", "/v1/completions", body, &c->status);
    free(body);
    cJSON *j = r ? cJSON_Parse(r) : NULL;
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItem(ch, "text");
    if (cJSON_IsString(t)) c->text = strdup(t->valuestring);
    const cJSON *tm = cJSON_GetObjectItem(j, "timings");
    c->draft_n = num(tm, "draft_n");
    c->draft_acc = num(tm, "draft_n_accepted");
    c->predicted_n = (int)num(tm, "predicted_n");
    if (!c->text) fprintf(stderr, "  client %d: status %d body %s\n", c->idx, c->status, r ? r : "(none)");
    cJSON_Delete(j);
    free(r);
    return NULL;
}

/* A counter of the Prometheus text: the value of the line starting with `series ` (-1: none). */
static double metric(const char *text, const char *series) {
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, series, n) && p[n] == ' ') return strtod(p + n + 1, NULL);
    return -1;
}

static srv S;
static bool S_up;

static void test_concurrent_greedy_equals_engine(void) {
    if (!S_up) SKIP("server not started");
    client cl[N_CLIENTS];
    pthread_t th[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        cl[i] = (client){.port = S.port, .idx = i};
        pthread_create(&th[i], NULL, client_run, &cl[i]);
    }
    double sum_n = 0, sum_acc = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(cl[i].status, 200);
        CHECK_STR(cl[i].text, ref_text[i]);
        CHECK(cl[i].predicted_n > 0 && cl[i].predicted_n <= N_PREDICT);
        CHECK(cl[i].draft_n >= 0 && cl[i].draft_acc >= 0 && cl[i].draft_acc <= cl[i].draft_n);
        sum_n += cl[i].draft_n;
        sum_acc += cl[i].draft_acc;
        free(cl[i].text);
    }
    CHECK_MSG(sum_n > 0, "no speculation happened");
    fprintf(stderr, "    drafted %.0f, accepted %.0f over %d clients\n", sum_n, sum_acc, N_CLIENTS);
    /* /metrics: the counters are the sums of the per-response timings (nothing else ran yet). */
    int st;
    char *m = request(S.port, "GET", "/metrics", NULL, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(m != NULL);
    if (m) {
        CHECK_NEAR(metric(m, "nextn_spec_drafted_total{drafter=\"mtp\"}"), sum_n, 0);
        CHECK_NEAR(metric(m, "nextn_spec_accepted_total{drafter=\"mtp\"}"), sum_acc, 0);
    }
    free(m);
}

static void test_streaming(void) {
    if (!S_up) SKIP("server not started");
    char *body = completion_body(1, true);
    int st;
    char *r = request(S.port, "POST", "/v1/completions", body, &st);
    free(body);
    CHECK_EQ_INT(st, 200);
    size_t cap = 64, len = 0;
    char *text = calloc(1, cap);
    int n_ev = 0;
    bool done = false;
    char *p = r;
    while (p && (p = strstr(p, "data: "))) {
        char *eol = strstr(p, "\n\n");
        if (!eol) break;
        *eol = 0;
        if (!strcmp(p + 6, "[DONE]")) { done = true; break; }
        cJSON *j = cJSON_Parse(p + 6);
        CHECK(j != NULL);
        const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
        if (cJSON_IsString(t)) {
            size_t n = strlen(t->valuestring);
            while (len + n + 1 > cap) text = realloc(text, cap *= 2);
            memcpy(text + len, t->valuestring, n + 1);
            len += n;
        }
        cJSON_Delete(j);
        n_ev++;
        p = eol + 2;
    }
    CHECK(done);
    CHECK(n_ev > 2);
    CHECK_STR(text, ref_text[1]);
    free(text);
    free(r);
}

/* Slots busy and the decoded count of slot `id` (from /slots). */
static int slots_busy(int port, int *n_decoded_max) {
    int st;
    char *r = request(port, "GET", "/slots", NULL, &st);
    cJSON *j = r ? cJSON_Parse(r) : NULL;
    int busy = j ? 0 : -1;
    const cJSON *it;
    *n_decoded_max = 0;
    cJSON_ArrayForEach(it, j) {
        busy += cJSON_IsTrue(cJSON_GetObjectItem(it, "is_processing"));
        int d = (int)num(it, "n_decoded");
        if (d > *n_decoded_max) *n_decoded_max = d;
    }
    cJSON_Delete(j);
    free(r);
    return busy;
}

static void test_disconnect_frees_slot(void) {
    if (!S_up) SKIP("server not started");
    /* Unbounded generation (ignore_eos, until the slot's context is full): only a cancel ends it early. */
    int fd = send_req(S.port, "POST", "/completion",
                      "{\"prompt\":\"def fib(n):\",\"n_predict\":-1,\"ignore_eos\":true,\"temperature\":0,\"stream\":true}");
    CHECK(fd >= 0);
    if (fd < 0) return;
    char buf[4096];
    int seen = 0;
    while (seen < 3) {
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n <= 0) break;
        buf[n] = 0;
        for (char *p = buf; (p = strstr(p, "data: ")); p += 6) seen++;
    }
    CHECK(seen >= 3);
    close(fd);
    int busy = -1, dec = 0;
    for (int i = 0; i < 500; i++) {
        busy = slots_busy(S.port, &dec);
        if (busy == 0) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ_INT(busy, 0);
    int n_ctx_slot = 4096 / 4;
    CHECK_MSG(dec < n_ctx_slot - 16, "the request ran to the context end (%d decoded): the disconnect did not cancel it", dec);
    /* The slot serves again. */
    client c = {.port = S.port, .idx = 2};
    client_run(&c);
    CHECK_EQ_INT(c.status, 200);
    CHECK_STR(c.text, ref_text[2]);
    free(c.text);
}

static void test_bad_model(void) {
    nx_gen_model_params p = nx_gen_model_default_params();
    p.model_path = "/nonexistent/model.gguf";
    nx_gen_backend *be = NULL;
    nx_error err = {0};
    CHECK(nx_gen_model_create(&p, &be, &err) != NX_OK);
    CHECK(be == NULL && strstr(err.msg, "/nonexistent/model.gguf") != NULL);
    p.model_path = model_path;
    p.n_ctx = 16;
    p.n_slots = 4;
    CHECK_EQ_INT(nx_gen_model_create(&p, &be, &err), NX_ERR_INVALID_ARG);
}

int main(void) {
    if (!find_model()) {
        fprintf(stderr, "skip: tiny-qwen35-mtp-q8_0.gguf not found\n");
        return test_summary();
    }
    nx_log_set(NULL, NULL, NX_LOG_WARN);
    if (!make_reference()) {
        fprintf(stderr, "FAIL: cannot compute the reference outputs\n");
        return 1;
    }
    S_up = srv_start(&S, 4096);
    if (!S_up) {
        fprintf(stderr, "FAIL: cannot start the server\n");
        return 1;
    }
    RUN(test_concurrent_greedy_equals_engine);
    RUN(test_streaming);
    RUN(test_disconnect_frees_slot);
    RUN(test_bad_model);
    if (S_up) srv_stop(&S);
    for (int i = 0; i < N_CLIENTS; i++) free(ref_text[i]);
    return test_summary();
}
