/* log.c — logger state (callback, user pointer, level) behind a mutex. */
#include "core/log.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static nx_log_fn g_log_fn = NULL;
static void *g_log_user = NULL;
static nx_log_level g_log_min = NX_LOG_INFO;

void nx_log_set(nx_log_fn fn, void *user, nx_log_level min_level) {
    pthread_mutex_lock(&g_log_mu);
    g_log_fn = fn;
    g_log_user = user;
    g_log_min = min_level;
    pthread_mutex_unlock(&g_log_mu);
}

void nx_log(nx_log_level level, const char *fmt, ...) {
    pthread_mutex_lock(&g_log_mu);
    if (level < g_log_min) { pthread_mutex_unlock(&g_log_mu); return; }
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (g_log_fn) {
        g_log_fn(level, line, g_log_user);
    } else {
        static const char *tags[] = {"debug", "info", "warn", "error", ""};
        fprintf(stderr, "nextn %s: %s\n", tags[level < 4 ? level : 4], line);
    }
    pthread_mutex_unlock(&g_log_mu);
}
