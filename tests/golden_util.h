/*
 * golden_util.h — helpers shared by the tests that compare with the golden cases in
 * tests/data/golden (formats: its README.md): raw float32 files, case.json parsing, max |a - b|,
 * and a context with explicit settings. The cases are part of the repository, so a missing file
 * is a broken checkout and the tests fail on it (they never skip).
 */
#ifndef NX_TEST_GOLDEN_UTIL_H
#define NX_TEST_GOLDEN_UTIL_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/io.h"
#include "nextn.h"

/* The golden cases (one directory each), with a trailing slash. */
#define NX_GOLDEN_DIR NX_SOURCE_DIR "/tests/data/golden/"

/* A raw little-endian float32 file (malloc'ed; *n = number of floats), or NULL. */
static inline float *read_f32(const char *path, size_t *n) {
    char *buf = NULL;
    size_t len = 0;
    nx_error e = {0};
    if (nx_read_file(path, 1u << 28, &buf, &len, &e) != NX_OK) return NULL;
    float *x = malloc(len ? len : 1);
    memcpy(x, buf, len);
    free(buf);
    *n = len / sizeof(float);
    return x;
}

static inline cJSON *read_json(const char *path) {
    char *buf = NULL;
    nx_error e = {0};
    if (nx_read_file(path, 1u << 24, &buf, NULL, &e) != NX_OK) return NULL;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}

/* The numbers of a JSON array as ints (at most cap); returns how many. */
static inline int json_ints(const cJSON *arr, int *out, int cap) {
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) if (n < cap) out[n++] = (int)it->valuedouble;
    return n;
}

static inline double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;   /* NaN propagates as a failure */
    }
    return m;
}

/* A context with explicit settings (prints the error and returns NULL on failure). */
static inline nx_ctx *test_ctx(nx_model *m, int n_ctx, int n_seq, int ub, int threads, nx_cache_type tk,
                               nx_cache_type tv) {
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_ubatch = ub;
    p.n_threads = threads;
    p.type_k = tk;
    p.type_v = tv;
    nx_ctx *c = NULL;
    if (nx_ctx_create(m, &p, &c) != NX_OK) fprintf(stderr, "  ctx: %s\n", nx_last_error());
    return c;
}

#endif
