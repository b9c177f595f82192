/* nx_load.c — a load and throughput client for `nextn serve` (loopback only, plain sockets, pthreads).
 *
 * Owns: two modes.
 *   load:  N clients, each POSTs streaming completions in a loop for D seconds; clients with id % 3 == 0
 *          disconnect at a random point mid-stream (seeded). Every stream that runs to the end must be
 *          well-formed SSE: only "data: " lines, each a valid JSON object, the last one "data: [DONE]".
 *   bench: N clients, each sends R greedy non-streaming requests (ignore_eos, max_tokens M); prints the
 *          aggregate generated tokens per second (sum of usage.completion_tokens / wall time).
 * Promises: bounded — every socket has a receive/send timeout, loops stop at the deadline, a request
 * started before the deadline finishes within max_tokens. Prints a summary of "key value" lines on stdout;
 * exit 0 when no malformed stream, no unexpected status and no timeout were seen, else 1; 2 on bad usage.
 * Must never: connect anywhere but the given host (the test passes 127.0.0.1), or retry forever.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *host;
    int port, n_clients, max_tokens, n_requests, timeout_s;
    double duration;
    uint64_t seed;
    bool bench;
    int pid;
} load_cfg;

typedef struct {
    atomic_long started, completed, disconnects, malformed, bad_status, busy_503, timeouts, conn_errors;
    atomic_long tokens, chunks;
    pthread_mutex_t mu;   /* guards first_error */
    char first_error[512];
} load_stats;

typedef struct {
    const load_cfg *cfg;
    load_stats *st;
    int id;
    double t_end;
} client_arg;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s) {   /* splitmix64: seeded, per-client, no shared state */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void note_error(load_stats *st, const char *fmt, const char *detail) {
    pthread_mutex_lock(&st->mu);
    if (!st->first_error[0]) snprintf(st->first_error, sizeof st->first_error, fmt, detail);
    pthread_mutex_unlock(&st->mu);
}

/* ---- a strict little JSON validator (RFC 8259 grammar; no value building) ---- */
typedef struct { const char *p, *e; int depth; } jv;
static void jws(jv *j) { while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++; }
static bool jvalue(jv *j);
static bool jstring(jv *j) {
    if (j->p >= j->e || *j->p != '"') return false;
    j->p++;
    while (j->p < j->e) {
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"') return true;
        if (c < 0x20) return false;
        if (c == '\\') {
            if (j->p >= j->e) return false;
            char x = *j->p++;
            if (x == 'u') {
                for (int k = 0; k < 4; k++, j->p++)
                    if (j->p >= j->e || !strchr("0123456789abcdefABCDEF", *j->p) || !*j->p) return false;
            } else if (!strchr("\"\\/bfnrt", x) || !x) return false;
        }
    }
    return false;
}
static bool jnumber(jv *j) {
    const char *s = j->p;
    if (j->p < j->e && *j->p == '-') j->p++;
    if (j->p >= j->e) return false;
    if (*j->p == '0') j->p++;
    else if (*j->p >= '1' && *j->p <= '9') while (j->p < j->e && *j->p >= '0' && *j->p <= '9') j->p++;
    else return false;
    if (j->p < j->e && *j->p == '.') {
        j->p++;
        if (j->p >= j->e || *j->p < '0' || *j->p > '9') return false;
        while (j->p < j->e && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    if (j->p < j->e && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->e && (*j->p == '+' || *j->p == '-')) j->p++;
        if (j->p >= j->e || *j->p < '0' || *j->p > '9') return false;
        while (j->p < j->e && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    return j->p > s;
}
static bool jlit(jv *j, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(j->e - j->p) < n || memcmp(j->p, w, n)) return false;
    j->p += n;
    return true;
}
static bool jvalue(jv *j) {
    jws(j);
    if (j->p >= j->e || ++j->depth > 64) return false;
    bool ok;
    char c = *j->p;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        jws(j);
        if (j->p < j->e && *j->p == close) { j->p++; j->depth--; return true; }
        for (;;) {
            if (c == '{') {
                jws(j);
                if (!jstring(j)) return false;
                jws(j);
                if (j->p >= j->e || *j->p++ != ':') return false;
            }
            if (!jvalue(j)) return false;
            jws(j);
            if (j->p >= j->e) return false;
            if (*j->p == ',') { j->p++; continue; }
            if (*j->p == close) { j->p++; break; }
            return false;
        }
        ok = true;
    } else if (c == '"') ok = jstring(j);
    else if (c == 't') ok = jlit(j, "true");
    else if (c == 'f') ok = jlit(j, "false");
    else if (c == 'n') ok = jlit(j, "null");
    else ok = jnumber(j);
    j->depth--;
    return ok;
}
static bool json_object_valid(const char *s, size_t n) {
    jv j = {s, s + n, 0};
    jws(&j);
    if (j.p >= j.e || *j.p != '{') return false;
    if (!jvalue(&j)) return false;
    jws(&j);
    return j.p == j.e;
}

/* the integer after "key": in a JSON text, or -1 */
static long json_int_after(const char *s, const char *key) {
    const char *p = strstr(s, key);
    if (!p) return -1;
    p += strlen(key);
    while (*p == ' ') p++;
    return *p >= '0' && *p <= '9' ? strtol(p, NULL, 10) : -1;
}

/* ---- HTTP over one socket ---- */
static int connect_to(const load_cfg *c) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {c->timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)c->port);
    if (inet_pton(AF_INET, c->host, &a.sin_addr) != 1 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *b, size_t n) {
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w <= 0) { if (w < 0 && errno == EINTR) continue; return false; }
        b += w;
        n -= (size_t)w;
    }
    return true;
}

typedef struct { char *d; size_t n, cap; } buf;
static bool buf_add(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->n + n + 1) cap *= 2;
        if (cap > (64u << 20)) return false;   /* a response this large is itself a failure */
        char *d = realloc(b->d, cap);
        if (!d) return false;
        b->d = d;
        b->cap = cap;
    }
    memcpy(b->d + b->n, s, n);
    b->n += n;
    b->d[b->n] = 0;
    return true;
}

enum { RD_OK, RD_TIMEOUT, RD_CONN, RD_DISCONNECTED };

/* Reads the whole response (Connection: close) into raw; when cut_after >= 0, closes the socket once the
 * de-chunked body holds more than cut_after SSE events (a mid-stream disconnect). */
static int read_response(int fd, buf *raw, long cut_after, bool abort_rst) {
    char tmp[16384];
    for (;;) {
        ssize_t r = recv(fd, tmp, sizeof tmp, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? RD_TIMEOUT : RD_CONN;
        if (r == 0) return RD_OK;
        if (!buf_add(raw, tmp, (size_t)r)) return RD_CONN;
        if (cut_after >= 0) {
            long ev = 0;
            for (const char *p = raw->d; (p = strstr(p, "\n\n")); p += 2) ev++;
            if (ev > cut_after) {
                if (abort_rst) {   /* RST instead of FIN: the other way a client vanishes */
                    struct linger lg = {1, 0};
                    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                }
                return RD_DISCONNECTED;
            }
        }
    }
}

/* Splits raw into status and de-chunked body. Returns false on a malformed HTTP framing. */
static bool parse_http(const buf *raw, int *status, buf *body, bool *sse) {
    if (!raw->d || raw->n < 12 || strncmp(raw->d, "HTTP/1.", 7)) return false;
    *status = atoi(raw->d + 9);
    const char *he = strstr(raw->d, "\r\n\r\n");
    if (!he) return false;
    size_t hl = (size_t)(he - raw->d);
    bool chunked = false;
    *sse = false;
    for (const char *p = raw->d; p < he; ) {
        const char *nl = strstr(p, "\r\n");
        if (!nl || nl > he) nl = he;
        if (!strncasecmp(p, "transfer-encoding:", 18) && memmem(p, (size_t)(nl - p), "chunked", 7)) chunked = true;
        if (!strncasecmp(p, "content-type:", 13) && memmem(p, (size_t)(nl - p), "text/event-stream", 17)) *sse = true;
        p = nl + 2;
    }
    const char *p = raw->d + hl + 4, *e = raw->d + raw->n;
    if (!chunked) return buf_add(body, p, (size_t)(e - p)) || p == e;
    for (;;) {
        char *end;
        unsigned long sz = strtoul(p, &end, 16);
        const char *nl = strstr(end, "\r\n");
        if (!nl || end == p) return false;
        p = nl + 2;
        if (sz == 0) return true;
        if ((size_t)(e - p) < sz + 2 || p[sz] != '\r' || p[sz + 1] != '\n') return false;
        if (!buf_add(body, p, sz)) return false;
        p += sz + 2;
    }
}

/* Checks a complete SSE body: events separated by a blank line, each one "data: " line, each payload a
 * JSON object except the last, which is [DONE]. Returns the generated token count (timings.predicted_n of
 * the last chunk carrying it, else the number of content chunks), or -1 with *why set. */
static long check_sse(char *b, size_t n, long *chunks, const char **why) {
    long got = -1, nchunks = 0;
    bool done = false;
    size_t i = 0;
    if (n == 0) { *why = "empty stream"; return -1; }
    while (i < n) {
        char *ev = b + i;
        char *sep = strstr(ev, "\n\n");
        if (!sep) { *why = "event not terminated by a blank line"; return -1; }
        *sep = 0;
        i = (size_t)(sep - b) + 2;
        if (done) { *why = "data after [DONE]"; return -1; }
        if (strncmp(ev, "data: ", 6) || strchr(ev, '\n')) { *why = "event is not one data: line"; return -1; }
        char *payload = ev + 6;
        if (!strcmp(payload, "[DONE]")) { done = true; continue; }
        if (!json_object_valid(payload, strlen(payload))) { *why = "data: payload is not valid JSON"; return -1; }
        if (strstr(payload, "\"error\"") && !strstr(payload, "\"choices\"")) { *why = "error chunk in stream"; return -1; }
        nchunks++;
        long pn = json_int_after(payload, "\"predicted_n\":");
        if (pn >= 0) got = pn;
    }
    if (!done) { *why = "stream did not end with data: [DONE]"; return -1; }
    *chunks = nchunks;
    return got >= 0 ? got : nchunks;
}

static const char *prompts[] = {
    "def fib(n):", "import os", "class Stack:", "# print the numbers 1 to 10", "Once upon a time",
    "The capital of France is", "int main(void) {", "SELECT * FROM users WHERE", "Write a haiku about rain.",
    "List three colours:",
};
#define N_PROMPTS (int)(sizeof prompts / sizeof prompts[0])

static void build_request(const load_cfg *c, uint64_t *rng, int id, char *req, size_t cap, bool *chat) {
    char body[1024];
    const char *p = prompts[rng_next(rng) % N_PROMPTS];
    const char *path;
    if (c->bench) {
        path = "/v1/completions";
        *chat = false;
        snprintf(body, sizeof body,
                 "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stream\":false}",
                 prompts[id % N_PROMPTS], c->max_tokens);
    } else {
        int mt = 1 + (int)(rng_next(rng) % (uint64_t)c->max_tokens);
        double temp = (double)(rng_next(rng) % 4) * 0.4;   /* greedy and sampled both */
        *chat = rng_next(rng) & 1;
        if (*chat) {
            path = "/v1/chat/completions";
            snprintf(body, sizeof body,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d,\"temperature\":%.1f,"
                     "\"seed\":%d,\"stream\":true%s}",
                     p, mt, temp, id, (rng_next(rng) & 1) ? ",\"stream_options\":{\"include_usage\":true}" : "");
        } else {
            path = "/v1/completions";
            snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":%.1f,\"stream\":true}",
                     p, mt, temp);
        }
    }
    snprintf(req, cap,
             "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\nConnection: close\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             path, c->host, c->port, strlen(body), body);
}

static void *client_main(void *v) {
    client_arg *a = v;
    const load_cfg *c = a->cfg;
    load_stats *st = a->st;
    uint64_t rng = c->seed * 1000003u + (uint64_t)a->id;
    bool disconnector = !c->bench && a->id % 3 == 0;
    char req[2048];
    for (int k = 0; c->bench ? k < c->n_requests : now_s() < a->t_end; k++) {
        bool chat;
        build_request(c, &rng, a->id, req, sizeof req, &chat);
        long cut = disconnector ? (long)(rng_next(&rng) % (uint64_t)(c->max_tokens / 2 + 2)) : -1;
        bool rst = rng_next(&rng) & 1;
        atomic_fetch_add(&st->started, 1);
        int fd = connect_to(c);
        if (fd < 0) {
            atomic_fetch_add(&st->conn_errors, 1);
            note_error(st, "connect failed: %s", strerror(errno));
            usleep(100000);
            continue;
        }
        buf raw = {0}, body = {0};
        int rr = send_all(fd, req, strlen(req)) ? read_response(fd, &raw, cut, rst) : RD_CONN;
        close(fd);
        if (rr == RD_DISCONNECTED) {
            atomic_fetch_add(&st->disconnects, 1);
        } else if (rr == RD_TIMEOUT) {
            atomic_fetch_add(&st->timeouts, 1);
            note_error(st, "%s", "a response stalled past the receive timeout");
        } else if (rr == RD_CONN) {
            atomic_fetch_add(&st->conn_errors, 1);
            note_error(st, "receive failed: %s", strerror(errno));
        } else {
            int status = 0;
            bool sse = false;
            if (!parse_http(&raw, &status, &body, &sse)) {
                atomic_fetch_add(&st->malformed, 1);
                note_error(st, "malformed HTTP framing: %.200s", raw.d ? raw.d : "");
            } else if (status == 503) {
                atomic_fetch_add(&st->busy_503, 1);   /* queue full: allowed, back off as Retry-After says */
                usleep(200000);
            } else if (status != 200) {
                atomic_fetch_add(&st->bad_status, 1);
                note_error(st, "unexpected HTTP status: %.200s", raw.d);
            } else if (c->bench) {
                long t = json_int_after(body.d ? body.d : "", "\"completion_tokens\":");
                if (t < 0) { atomic_fetch_add(&st->malformed, 1); note_error(st, "no usage: %.200s", body.d ? body.d : ""); }
                else { atomic_fetch_add(&st->tokens, t); atomic_fetch_add(&st->completed, 1); }
            } else if (!sse) {
                atomic_fetch_add(&st->malformed, 1);
                note_error(st, "stream without Content-Type text/event-stream: %.200s", raw.d);
            } else {
                const char *why = "";
                long chunks = 0;
                long t = check_sse(body.d ? body.d : (char *)"", body.n, &chunks, &why);
                if (t < 0) {
                    atomic_fetch_add(&st->malformed, 1);
                    note_error(st, "malformed stream: %s", why);
                } else {
                    atomic_fetch_add(&st->completed, 1);
                    atomic_fetch_add(&st->tokens, t);
                    atomic_fetch_add(&st->chunks, chunks);
                }
            }
        }
        free(raw.d);
        free(body.d);
    }
    return NULL;
}

static long rss_kb(int pid) {
    if (pid <= 0) return -1;
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) { kb = strtol(line + 6, NULL, 10); break; }
    fclose(f);
    return kb;
}

static int usage(void) {
    fprintf(stderr,
            "usage: nx_load --port P [--host 127.0.0.1] [--clients N] [--duration S] [--seed S] [--max-tokens M]\n"
            "               [--pid SERVER_PID] [--timeout S]   (load mode)\n"
            "       nx_load --bench --port P [--clients N] [--requests R] [--max-tokens M]\n");
    return 2;
}

int main(int argc, char **argv) {
    load_cfg c = {.host = "127.0.0.1", .port = 0, .n_clients = 8, .max_tokens = 32, .n_requests = 2,
                  .timeout_s = 120, .duration = 10, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--bench")) { c.bench = true; continue; }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--host")) c.host = v;
        else if (!strcmp(a, "--port")) c.port = atoi(v);
        else if (!strcmp(a, "--clients")) c.n_clients = atoi(v);
        else if (!strcmp(a, "--duration")) c.duration = atof(v);
        else if (!strcmp(a, "--seed")) c.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--max-tokens")) c.max_tokens = atoi(v);
        else if (!strcmp(a, "--requests")) c.n_requests = atoi(v);
        else if (!strcmp(a, "--pid")) c.pid = atoi(v);
        else if (!strcmp(a, "--timeout")) c.timeout_s = atoi(v);
        else return usage();
    }
    if (c.port <= 0 || c.port > 65535 || c.n_clients < 1 || c.n_clients > 1024 || c.max_tokens < 1 ||
        c.duration <= 0 || c.duration > 3600 || c.n_requests < 1 || c.timeout_s < 1)
        return usage();

    load_stats st = {0};
    pthread_mutex_init(&st.mu, NULL);
    pthread_t *th = calloc((size_t)c.n_clients, sizeof *th);
    client_arg *args = calloc((size_t)c.n_clients, sizeof *args);
    if (!th || !args) return 2;
    long rss0 = rss_kb(c.pid), rss_peak = rss0;
    double t0 = now_s();
    int n_started = 0;
    for (int i = 0; i < c.n_clients; i++) {
        args[i] = (client_arg){&c, &st, i, t0 + c.duration};
        if (pthread_create(&th[i], NULL, client_main, &args[i]) != 0) break;
        n_started++;
    }
    if (!c.bench) {   /* sample the server's RSS while the clients run */
        while (now_s() < t0 + c.duration) {
            usleep(250000);
            long r = rss_kb(c.pid);
            if (r > rss_peak) rss_peak = r;
        }
    }
    for (int i = 0; i < n_started; i++) pthread_join(th[i], NULL);
    double wall = now_s() - t0;
    long rss1 = rss_kb(c.pid);
    if (rss1 > rss_peak) rss_peak = rss1;

    printf("clients %d\nwall_s %.2f\nstarted %ld\ncompleted %ld\ndisconnects %ld\nmalformed %ld\n"
           "bad_status %ld\nbusy_503 %ld\ntimeouts %ld\nconn_errors %ld\ntokens %ld\ntokens_per_s %.1f\n",
           n_started, wall, atomic_load(&st.started), atomic_load(&st.completed), atomic_load(&st.disconnects),
           atomic_load(&st.malformed), atomic_load(&st.bad_status), atomic_load(&st.busy_503),
           atomic_load(&st.timeouts), atomic_load(&st.conn_errors), atomic_load(&st.tokens),
           (double)atomic_load(&st.tokens) / wall);
    if (c.pid > 0) printf("rss_kb_during_start %ld\nrss_kb_peak %ld\nrss_kb_after %ld\n", rss0, rss_peak, rss1);
    if (st.first_error[0]) printf("first_error %s\n", st.first_error);
    free(th);
    free(args);
    bool ok = n_started == c.n_clients && !st.malformed && !st.bad_status && !st.timeouts && !st.conn_errors &&
              st.completed > 0;
    return ok ? 0 : 1;
}
