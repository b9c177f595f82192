/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader (and, through a round trip, the writer).
 *
 * Every input goes through nx_gguf_open_memory(). A failure must be NX_ERR_FORMAT (or NOMEM)
 * with a message. A success must survive touching every accessor (keys, values, every array
 * element, every tensor's first and last byte), and copying the whole file through the writer
 * must give a file that opens again with the same content. Anything else traps.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "gguf.h"

static volatile uint64_t sink;

static void touch(const nx_gguf *g) {
    uint64_t acc = nx_gguf_version(g) + nx_gguf_alignment(g) + (uint64_t)nx_gguf_n_splits(g) + nx_gguf_file_size(g);
    acc += nx_gguf_data_offset(g, 0) + (nx_gguf_split_file(g, 0) != NULL);
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) {
        const char *k = nx_gguf_key(g, i);
        if (!k || nx_gguf_find_key(g, k) != i) __builtin_trap();
        int64_t v;
        double d;
        bool b;
        uint64_t len, rs;
        if (nx_gguf_kv_int(g, i, &v)) acc += (uint64_t)v;
        if (nx_gguf_kv_float(g, i, &d)) acc += d == d;
        if (nx_gguf_kv_bool(g, i, &b)) acc += b;
        const char *s = nx_gguf_kv_str(g, i, &len);
        if (s && len) acc += (unsigned char)s[0] + (unsigned char)s[len - 1];
        const uint8_t *raw = nx_gguf_kv_raw(g, i, &rs);
        if (!raw) __builtin_trap();
        if (rs) acc += raw[0] + raw[rs - 1];
        nx_gguf_vtype t = nx_gguf_kv_type(g, i), et = nx_gguf_arr_type(g, i);
        acc += (uint64_t)t + (uint64_t)et;
        uint64_t n = nx_gguf_arr_n(g, i);
        for (uint64_t j = 0; j < n; j++) {
            if (nx_gguf_arr_int(g, i, j, &v)) acc += (uint64_t)v;
            if (nx_gguf_arr_float(g, i, j, &d)) acc += d == d;
            s = nx_gguf_arr_str(g, i, j, &len);
            if (s && len) acc += (unsigned char)s[0] + (unsigned char)s[len - 1];
        }
        const uint8_t *p = nx_gguf_arr_data(g, i);
        if (p && n) acc += p[0];
    }
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        if (!t || nx_gguf_find_tensor(g, t->name) != i) __builtin_trap();
        acc += nx_gguf_tensor_offset(g, i) + (uint64_t)nx_gguf_tensor_split(g, i);
        if (t->nbytes) acc += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    sink = acc;
}

/* Copy everything through the writer and check the copy reads back the same. */
static void roundtrip(const nx_gguf *g) {
    nx_gguf_writer *w = nx_gguf_writer_create();
    if (!w) return;
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) nx_gguf_copy_kv(w, g, i);
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        nx_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    void *buf = NULL;
    size_t size = 0;
    nx_error err = {0};
    nx_status st = nx_gguf_writer_write_mem(w, &buf, &size, &err);
    nx_gguf_writer_free(w);
    if (st == NX_ERR_NOMEM) return;
    if (st) __builtin_trap();
    nx_gguf *h = NULL;
    if (nx_gguf_open_memory(buf, size, &h, &err) != NX_OK) __builtin_trap();
    if (nx_gguf_n_tensors(h) != nx_gguf_n_tensors(g) || nx_gguf_alignment(h) != nx_gguf_alignment(g)) __builtin_trap();
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) {
        const char *k = nx_gguf_key(g, i);
        if (!strcmp(k, "general.alignment")) continue;   /* dropped by the writer when it is 32 */
        int64_t j = nx_gguf_find_key(h, k);
        uint64_t sa, sb;
        const void *ra = nx_gguf_kv_raw(g, i, &sa), *rb = nx_gguf_kv_raw(h, j, &sb);
        if (j < 0 || nx_gguf_kv_type(h, j) != nx_gguf_kv_type(g, i) || sa != sb || memcmp(ra, rb, sa)) __builtin_trap();
    }
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const nx_tensor *a = nx_gguf_tensor(g, i), *b = nx_gguf_tensor(h, i);
        if (strcmp(a->name, b->name) || a->type != b->type || a->nbytes != b->nbytes ||
            memcmp(a->data, b->data, a->nbytes))
            __builtin_trap();
    }
    nx_gguf_close(h);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nx_gguf *g = NULL;
    nx_error err = {0};
    nx_status st = nx_gguf_open_memory(data, size, &g, &err);
    if (st != NX_OK) {
        if ((st != NX_ERR_FORMAT && st != NX_ERR_NOMEM) || !err.msg[0] || g) __builtin_trap();
        return 0;
    }
    touch(g);
    roundtrip(g);
    nx_gguf_close(g);
    return 0;
}
