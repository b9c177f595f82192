/* log.c — logger state (callback, user pointer, level, format, file) behind a mutex; the line
 * formatter; the fatal-signal line. */
#include "core/log.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static nx_log_fn g_log_fn = NULL;
static void *g_log_user = NULL;
static nx_log_level g_log_min = NX_LOG_INFO;
static nx_log_format g_log_fmt = NX_LOG_TEXT;
static volatile int g_log_fd = -1;   /* the log file (-1: stderr only); read by the signal handler */

static const char *level_name(nx_log_level l) {
    static const char *tags[] = {"debug", "info", "warn", "error", ""};
    return tags[l < 4 ? l : 4];
}

void nx_log_set(nx_log_fn fn, void *user, nx_log_level min_level) {
    pthread_mutex_lock(&g_log_mu);
    g_log_fn = fn;
    g_log_user = user;
    g_log_min = min_level;
    pthread_mutex_unlock(&g_log_mu);
}

void nx_log_set_format(nx_log_format f) {
    pthread_mutex_lock(&g_log_mu);
    g_log_fmt = f;
    pthread_mutex_unlock(&g_log_mu);
}

nx_log_format nx_log_get_format(void) {
    pthread_mutex_lock(&g_log_mu);
    nx_log_format f = g_log_fmt;
    pthread_mutex_unlock(&g_log_mu);
    return f;
}

nx_status nx_log_open_file(const char *path, nx_error *err) {
    int fd = -1;
    if (path) {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) return nx_fail(err, NX_ERR_IO, "cannot open the log file '%s': %s", path, strerror(errno));
    }
    pthread_mutex_lock(&g_log_mu);
    int old = g_log_fd;
    g_log_fd = fd;
    pthread_mutex_unlock(&g_log_mu);
    if (old >= 0) close(old);
    return NX_OK;
}

/* ===== Formatting ===== */

typedef struct wbuf { char *p; size_t cap, n; } wbuf;

static void w_add(wbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n && b->n + 1 < b->cap; i++) b->p[b->n++] = s[i];
    if (b->cap) b->p[b->n] = 0;
}
static void w_adds(wbuf *b, const char *s) { w_add(b, s, strlen(s)); }
static void w_addf(wbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_addf(wbuf *b, const char *fmt, ...) {
    char t[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    if (n > 0) w_add(b, t, (size_t)n < sizeof t ? (size_t)n : sizeof t - 1);
}

/* A JSON string: quotes, backslashes and control bytes escaped; other bytes as they are. */
static void w_json_str(wbuf *b, const char *s) {
    w_adds(b, "\"");
    for (const unsigned char *u = (const unsigned char *)(s ? s : ""); *u; u++) {
        if (*u == '"') w_adds(b, "\\\"");
        else if (*u == '\\') w_adds(b, "\\\\");
        else if (*u == '\n') w_adds(b, "\\n");
        else if (*u < 0x20 || *u == 0x7f) w_addf(b, "\\u%04x", *u);
        else w_add(b, (const char *)u, 1);
    }
    w_adds(b, "\"");
}

/* A text value: bare when it has no space, quote, '=' or control byte, else quoted like JSON. */
static void w_text_val(wbuf *b, const char *s) {
    bool bare = s && *s;
    for (const unsigned char *u = (const unsigned char *)(s ? s : ""); *u && bare; u++)
        bare = *u > 0x20 && *u != '"' && *u != '=' && *u != '\\' && *u != 0x7f;
    if (bare) w_adds(b, s);
    else w_json_str(b, s);
}

static void w_num(wbuf *b, const nx_log_field *f, bool json) {
    switch (f->kind) {
    case NX_LOG_INT: w_addf(b, "%lld", f->i); break;
    case NX_LOG_BOOL: w_adds(b, f->i ? "true" : "false"); break;
    default:
        if (!isfinite(f->num)) w_adds(b, json ? "null" : "-");
        else w_addf(b, "%.6g", f->num);
    }
}

size_t nx_log_render(char *buf, size_t cap, nx_log_format fmt, bool with_prefix, nx_log_level level, double unix_time,
                     const char *event, const char *msg, const nx_log_field *f, int n) {
    wbuf b = {buf, cap, 0};
    if (cap) buf[0] = 0;
    char ts[40] = "";
    if (with_prefix || fmt == NX_LOG_JSON) {
        time_t sec = (time_t)unix_time;
        struct tm tm;
        gmtime_r(&sec, &tm);
        int ms = (int)((unix_time - (double)sec) * 1000.0);
        if (ms < 0) ms = 0;
        if (ms > 999) ms = 999;
        snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                 tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
    }
    if (fmt == NX_LOG_JSON) {
        w_adds(&b, "{\"time\":\"");
        w_adds(&b, ts);
        w_adds(&b, "\",\"level\":\"");
        w_adds(&b, level_name(level));
        w_adds(&b, "\"");
        if (event) {
            w_adds(&b, ",\"event\":");
            w_json_str(&b, event);
        }
        if (msg) {
            w_adds(&b, ",\"msg\":");
            w_json_str(&b, msg);
        }
        for (int i = 0; i < n; i++) {
            w_adds(&b, ",");
            w_json_str(&b, f[i].key);
            w_adds(&b, ":");
            if (f[i].kind == NX_LOG_STR) {
                if (f[i].s) w_json_str(&b, f[i].s);
                else w_adds(&b, "null");
            } else {
                w_num(&b, &f[i], true);
            }
        }
        w_adds(&b, "}");
        return b.n;
    }
    if (with_prefix) {
        w_adds(&b, ts);
        w_adds(&b, " nextn ");
        w_adds(&b, level_name(level));
        w_adds(&b, ": ");
    }
    if (event) w_adds(&b, event);
    if (msg) {
        if (event) w_adds(&b, " ");
        w_adds(&b, msg);
    }
    for (int i = 0; i < n; i++) {
        w_adds(&b, " ");
        w_adds(&b, f[i].key);
        w_adds(&b, "=");
        if (f[i].kind == NX_LOG_STR) w_text_val(&b, f[i].s);
        else w_num(&b, &f[i], false);
    }
    return b.n;
}

/* ===== Sinks ===== */

static double now_unix(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Under g_log_mu. */
static void emit(nx_log_level level, const char *event, const char *msg, const nx_log_field *f, int n) {
    char line[4096];
    if (g_log_fn) {
        nx_log_render(line, sizeof line, g_log_fmt, false, level, now_unix(), event, msg, f, n);
        g_log_fn(level, line, g_log_user);
        return;
    }
    size_t len = nx_log_render(line, sizeof line - 1, g_log_fmt, true, level, now_unix(), event, msg, f, n);
    line[len++] = '\n';
    int fd = g_log_fd >= 0 ? g_log_fd : STDERR_FILENO;
    for (size_t off = 0; off < len;) {   /* one write per line keeps lines whole between processes */
        ssize_t w = write(fd, line + off, len - off);
        if (w <= 0 && errno != EINTR) break;
        if (w > 0) off += (size_t)w;
    }
}

void nx_log(nx_log_level level, const char *fmt, ...) {
    pthread_mutex_lock(&g_log_mu);
    if (level < g_log_min) { pthread_mutex_unlock(&g_log_mu); return; }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emit(level, NULL, msg, NULL, 0);
    pthread_mutex_unlock(&g_log_mu);
}

void nx_log_event(nx_log_level level, const char *event, const nx_log_field *f, int n) {
    pthread_mutex_lock(&g_log_mu);
    if (level >= g_log_min) emit(level, event, NULL, f, n);
    pthread_mutex_unlock(&g_log_mu);
}

/* ===== Fatal signals ===== */

static const int g_fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
#define N_FATAL ((int)(sizeof g_fatal / sizeof g_fatal[0]))
static struct sigaction g_old[N_FATAL];
static volatile sig_atomic_t g_in_crash;

static void put(int fd, const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static void on_fatal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    int k = 0;
    while (k < N_FATAL && g_fatal[k] != sig) k++;
    if (!g_in_crash) {
        g_in_crash = 1;
        const char *name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGABRT ? "SIGABRT"
                         : sig == SIGFPE ? "SIGFPE" : "SIGILL";
        /* The format is read without the lock: a torn value only changes the line's shape. */
        bool json = g_log_fmt == NX_LOG_JSON;
        const char *a = json ? "{\"level\":\"fatal\",\"event\":\"signal\",\"signal\":\"" : "nextn fatal: signal ";
        const char *z = json ? "\",\"msg\":\"the process dies\"}\n" : ": the process dies\n";
        put(STDERR_FILENO, a); put(STDERR_FILENO, name); put(STDERR_FILENO, z);
        int fd = g_log_fd;
        if (fd >= 0) { put(fd, a); put(fd, name); put(fd, z); }
    }
    /* Hand the signal on to the handler before ours. A fault raised by the kernel comes back
     * when the instruction reruns; anything else is raised again. */
    if (k < N_FATAL) sigaction(sig, &g_old[k], NULL);
    else signal(sig, SIG_DFL);
    if (!(si && si->si_code > 0 && sig != SIGABRT)) raise(sig);
}

void nx_log_install_crash_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int k = 0; k < N_FATAL; k++) sigaction(g_fatal[k], &sa, &g_old[k]);
}
