/* io.c — whole-file reads with an explicit size limit (bad input must not exhaust memory). */
#include "core/io.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

nx_status nx_read_file(const char *path, size_t max_bytes, char **out, size_t *len, nx_error *err) {
    *out = NULL;
    if (len) *len = 0;
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return nx_fail(err, NX_ERR_IO, "%s: %s", path, strerror(errno));
    /* Read at most max_bytes + 1 bytes: one byte past the limit proves the file is too large. */
    size_t cap = max_bytes < 4096 ? max_bytes + 1 : 4096, n = 0;
    char *buf = malloc(cap + 1);
    nx_status st = NX_OK;
    while (buf) {
        if (n == cap) {
            if (cap > max_bytes) { st = nx_fail(err, NX_ERR_RANGE, "%s: larger than %zu bytes", path, max_bytes); break; }
            cap = cap * 2 > max_bytes ? max_bytes + 1 : cap * 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) st = nx_fail(err, NX_ERR_IO, "%s: read error", path);
            break;
        }
    }
    if (f != stdin) fclose(f);
    if (!buf) return nx_fail(err, NX_ERR_NOMEM, "%s: out of memory", path);
    if (st != NX_OK) { free(buf); return st; }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return NX_OK;
}
