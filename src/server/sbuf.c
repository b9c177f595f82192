/* sbuf.c — growable byte buffer (see sbuf.h). */
#include "server/sbuf.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool grow(nx_sbuf *b, size_t extra) {
    if (b->oom) return false;
    if (b->n + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) {
        if (cap > ((size_t)-1) / 2) { b->oom = true; return false; }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = true; return false; }
    b->p = p;
    b->cap = cap;
    return true;
}

void nx_sbuf_add(nx_sbuf *b, const void *data, size_t n) {
    if (!grow(b, n)) return;
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
}

void nx_sbuf_adds(nx_sbuf *b, const char *s) { nx_sbuf_add(b, s, strlen(s)); }

void nx_sbuf_addf(nx_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int len = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (len < 0) return;
    if ((size_t)len < sizeof tmp) { nx_sbuf_add(b, tmp, (size_t)len); return; }
    if (!grow(b, (size_t)len)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)len;
}

void nx_sbuf_reset(nx_sbuf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

void nx_sbuf_free(nx_sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

char *nx_sbuf_take(nx_sbuf *b, size_t *n) {
    if (!b->p && grow(b, 0)) b->p[0] = 0;
    char *p = b->oom ? NULL : b->p;
    if (n) *n = b->oom ? 0 : b->n;
    if (b->oom) free(b->p);
    memset(b, 0, sizeof *b);
    return p;
}
