/*
 * sbuf.h — a growable byte buffer for the server (response bodies, SSE chunks, prompts).
 * Always NUL-terminated after the first append; an allocation failure sets `oom` and later
 * appends do nothing (checked once at the end instead of after every call).
 */
#ifndef NX_SERVER_SBUF_H
#define NX_SERVER_SBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct nx_sbuf {
    char  *p;
    size_t n, cap;
    bool   oom;
} nx_sbuf;

void nx_sbuf_add(nx_sbuf *b, const void *data, size_t n);
void nx_sbuf_adds(nx_sbuf *b, const char *s);
void nx_sbuf_addf(nx_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nx_sbuf_reset(nx_sbuf *b);          /* n = 0, memory kept */
void nx_sbuf_free(nx_sbuf *b);           /* zeroes *b */
/* Hand the bytes over (malloc'ed, NUL-terminated, never NULL unless oom); *b is zeroed. */
char *nx_sbuf_take(nx_sbuf *b, size_t *n);

#endif
