/* model.c — public model handle: load/free/describe (architecture forward passes live in src/arch/). */
#include "model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

nx_model_params nx_model_default_params(void) {
    nx_model_params p = {.n_threads = 0, .use_mmap = true};
    return p;
}

static void copy_str(char *dst, size_t cap, const char *src, uint64_t len) {
    size_t n = len < cap - 1 ? (size_t)len : cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

nx_status nx_model_load(const char *path, const nx_model_params *params, nx_model **out) {
    nx_error err = {0};
    *out = NULL;
    nx_model *m = calloc(1, sizeof *m);
    if (!m) { nx_fail(&err, NX_ERR_NOMEM, "out of memory"); return nx_error_publish(&err); }
    m->params = params ? *params : nx_model_default_params();
    if (nx_gguf_open(path, &m->gguf, &err) != NX_OK) {
        free(m);
        return nx_error_publish(&err);
    }
    uint64_t len = 0;
    const char *arch = nx_gguf_get_str(m->gguf, "general.architecture", &len);
    if (!arch) {
        nx_fail(&err, NX_ERR_FORMAT, "%s: missing key general.architecture", path);
        nx_model_free(m);
        return nx_error_publish(&err);
    }
    copy_str(m->arch, sizeof m->arch, arch, len);
    const char *name = nx_gguf_get_str(m->gguf, "general.name", &len);
    if (name) copy_str(m->name, sizeof m->name, name, len);
    else {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        copy_str(m->name, sizeof m->name, base, strlen(base));
    }
    *out = m;
    return NX_OK;
}

void nx_model_free(nx_model *m) {
    if (!m) return;
    nx_gguf_close(m->gguf);
    free(m);
}

const char *nx_model_arch(const nx_model *m) { return m->arch; }

size_t nx_model_describe(const nx_model *m, char *buf, size_t cap) {
    int64_t n_params = 0, bytes_by_type[NX_TYPE_COUNT] = {0}, count_by_type[NX_TYPE_COUNT] = {0};
    int64_t nt = nx_gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < nt; i++) {
        const nx_tensor *t = nx_gguf_tensor(m->gguf, i);
        n_params += nx_tensor_nelements(t);
        bytes_by_type[t->type] += (int64_t)t->nbytes;
        count_by_type[t->type]++;
    }
    size_t used = 0;
#define OUT(...) do { int k_ = snprintf(buf ? buf + used : NULL, used < cap ? cap - used : 0, __VA_ARGS__); \
                      if (k_ > 0) used += (size_t)k_; } while (0)
    OUT("model: %s (arch %s)\n", m->name, m->arch);
    OUT("parameters: %.2f M in %lld tensors, file %.2f MiB\n", n_params / 1e6, (long long)nt,
        nx_gguf_file_size(m->gguf) / 1048576.0);
    OUT("tensor types:");
    for (int t = 0; t < NX_TYPE_COUNT; t++)
        if (count_by_type[t])
            OUT(" %s x%lld (%.2f MiB)", nx_type_name((uint32_t)t), (long long)count_by_type[t], bytes_by_type[t] / 1048576.0);
    OUT("\n");
#undef OUT
    return used + 1;
}

/* ===== Batches ===== */

struct nx_batch {
    int n, cap;
    nx_token *tok;
    nx_pos *pos;
    nx_seq_id *seq;
    bool *logits;
};

nx_batch *nx_batch_create(int n_max) {
    if (n_max <= 0) return NULL;
    nx_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->cap = n_max;
    b->tok = calloc((size_t)n_max, sizeof *b->tok);
    b->pos = calloc((size_t)n_max, sizeof *b->pos);
    b->seq = calloc((size_t)n_max, sizeof *b->seq);
    b->logits = calloc((size_t)n_max, sizeof *b->logits);
    if (!b->tok || !b->pos || !b->seq || !b->logits) { nx_batch_free(b); return NULL; }
    return b;
}

void nx_batch_free(nx_batch *b) {
    if (!b) return;
    free(b->tok);
    free(b->pos);
    free(b->seq);
    free(b->logits);
    free(b);
}

void nx_batch_clear(nx_batch *b) { b->n = 0; }

nx_status nx_batch_add(nx_batch *b, nx_token tok, nx_pos pos, nx_seq_id seq, bool want_logits) {
    if (b->n >= b->cap) {
        nx_error err;
        nx_fail(&err, NX_ERR_RANGE, "batch full (%d tokens)", b->cap);
        return nx_error_publish(&err);
    }
    b->tok[b->n] = tok;
    b->pos[b->n] = pos;
    b->seq[b->n] = seq;
    b->logits[b->n] = want_logits;
    b->n++;
    return NX_OK;
}

int nx_batch_size(const nx_batch *b) { return b->n; }
