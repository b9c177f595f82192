/*
 * model.c — public model handle: load/free/describe, the architecture registry, tensor lookup
 * with shape validation, and batches. Architecture forward passes live in src/arch/.
 */
#include "model.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "arch/arch.h"
#include "kernels/matmul.h"
#include "quant/quant.h"

/* ===== Architecture registry ===== */

static const nx_arch *const g_archs[] = {&nx_arch_qwen35, &nx_arch_qwen35moe, &nx_arch_gemma4,
                                          &nx_arch_gemma4_assistant, &nx_arch_gemma4_mtp, &nx_arch_llama};

const nx_arch *nx_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        if (!strcmp(g_archs[i]->name, name)) return g_archs[i];
    return NULL;
}

const char *nx_arch_names(void) { return "qwen35, qwen35moe, gemma4, llama"; }

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
    if ((m->params.use_mmap ? nx_gguf_open(path, &m->gguf, &err) : nx_gguf_open_copy(path, &m->gguf, &err)) != NX_OK) {
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
    if (memchr(arch, 0, (size_t)len) || len >= sizeof m->arch) {
        nx_fail(&err, NX_ERR_FORMAT, "%s: general.architecture is not a valid name", path);
        nx_model_free(m);
        return nx_error_publish(&err);
    }
    const char *name = nx_gguf_get_str(m->gguf, "general.name", &len);
    if (name) copy_str(m->name, sizeof m->name, name, len);
    else {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        copy_str(m->name, sizeof m->name, base, strlen(base));
    }
    int64_t v;
    if (nx_model_key_int(m, "context_length", -1, &v) && v > 0 && v < (1ll << 31)) m->n_ctx_train = (int)v;
    if (nx_model_key_int(m, "embedding_length", -1, &v) && v > 0 && v < (1ll << 31)) m->n_embd = (int)v;
    m->impl = nx_arch_find(m->arch);
    if (m->impl) {   /* packing's threads; none (one thread packs) is only slower */
        nx_error terr = {0};
        m->load_tp = nx_threadpool_create(m->params.n_threads, &terr);
    }
    const nx_status lst = m->impl ? m->impl->load(m, &err) : NX_OK;
    nx_threadpool_free(m->load_tp);
    m->load_tp = NULL;
    if (lst != NX_OK) {
        nx_error_prefix(&err, "%s", path);
        nx_model_free(m);
        return nx_error_publish(&err);
    }
    *out = m;
    return NX_OK;
}

void nx_model_free(nx_model *m) {
    if (!m) return;
    if (m->impl && m->impl->free) m->impl->free(m);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    nx_gguf_close(m->gguf);
    free(m);
}

const char *nx_model_arch(const nx_model *m) { return m->arch; }
int nx_model_n_vocab(const nx_model *m) { return m->n_vocab; }
int nx_model_n_embd(const nx_model *m) { return m->n_embd; }
int nx_model_n_ctx_train(const nx_model *m) { return m->n_ctx_train; }
bool nx_model_can_run(const nx_model *m) { return m->impl != NULL; }

/* ===== Helpers for architectures ===== */

/* Room for one more owned buffer; false when out of memory. */
static bool owned_reserve(nx_model *m) {
    if (m->n_owned < m->cap_owned) return true;
    size_t cap = m->cap_owned ? m->cap_owned * 2 : 32;
    void **p = realloc(m->owned, cap * sizeof *p);
    if (!p) return false;
    m->owned = p;
    m->cap_owned = cap;
    return true;
}

void *nx_model_alloc(nx_model *m, size_t bytes, nx_error *err) {
    if (!owned_reserve(m)) { nx_fail(err, NX_ERR_NOMEM, "out of memory"); return NULL; }
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) { nx_fail(err, NX_ERR_NOMEM, "out of memory (%zu bytes)", bytes); return NULL; }
    m->owned[m->n_owned++] = p;
    return p;
}

static int shape_str(char *buf, size_t cap, int n_dims, const int64_t *ne) {
    size_t used = 0;
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n_dims && used < cap; i++) {
        if (ne[i] < 0) used += (size_t)snprintf(buf + used, cap - used, "%s*", i ? ", " : "");
        else used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "", (long long)ne[i]);
    }
    if (used < cap) used += (size_t)snprintf(buf + used, cap - used, "]");
    return (int)used;
}

/* A matmul weight gets the current level's packed copy (matmul.h: nx_matmul_pack) when there
 * is one, and only when the file is mapped: the mapped pages of the original are then released
 * (never written, so they come back from the file if anything reads them, e.g. an embedding
 * lookup into a tied output head), and memory stays at one copy. The record is the model's own
 * (its nx_gguf), so setting t->packed here is setting it on the model's tensor. */
void nx_model_pack_weight(nx_model *m, const nx_tensor *ct) {
    nx_tensor *t = (nx_tensor *)ct;
    if (t->packed || !m->params.use_mmap) return;
    const size_t bytes = nx_matmul_pack_size(t);
    if (bytes == 0) return;
    void *p = NULL;
    const size_t huge = (size_t)2 << 20;
    if (posix_memalign(&p, bytes >= huge ? huge : 64, bytes) != 0) return;   /* no copy: the unpacked kernels serve */
    if (bytes >= huge) madvise(p, bytes, MADV_HUGEPAGE);   /* advice only */
    if (!owned_reserve(m)) { free(p); return; }
    m->owned[m->n_owned++] = p;
    nx_matmul_pack_tp(m->load_tp, t, p);
    t->packed = p;
    m->packed_bytes += bytes;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)t->data + pg - 1) & ~(pg - 1), hi = ((uintptr_t)t->data + t->nbytes) & ~(pg - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);   /* advice: failure only costs memory */
}

nx_status nx_model_tensor(nx_model *m, const char *name, int n_dims, const int64_t *ne, unsigned flags,
                          const nx_tensor **out, nx_error *err) {
    *out = NULL;
    char want[96], got[96];
    shape_str(want, sizeof want, n_dims, ne);
    int64_t i = nx_gguf_find_tensor(m->gguf, name);
    if (i < 0) {
        if (flags & NX_T_OPTIONAL) return NX_OK;
        return nx_fail(err, NX_ERR_FORMAT, "missing tensor %s (expected shape %s)", name, want);
    }
    const nx_tensor *t = nx_gguf_tensor(m->gguf, i);
    bool ok = true;
    for (int d = 0; d < NX_MAX_DIMS; d++) {
        int64_t e = d < n_dims ? ne[d] : 1;
        if (e >= 0 && t->ne[d] != e) ok = false;
    }
    if (!ok) {
        shape_str(got, sizeof got, t->n_dims > n_dims ? t->n_dims : n_dims, t->ne);
        return nx_fail(err, NX_ERR_FORMAT, "tensor %s has shape %s, expected %s", name, got, want);
    }
    if ((flags & NX_T_MATMUL) && !nx_matmul_supports(t->type))
        return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor %s has type %s, which has no matmul kernel", name,
                       nx_type_name(t->type));
    if (flags & NX_T_MATMUL) nx_model_pack_weight(m, t);
    *out = t;
    return NX_OK;
}

nx_status nx_model_f32(nx_model *m, const nx_tensor *t, const float **out, nx_error *err) {
    *out = NULL;
    if (t->type == NX_TYPE_F32 && ((uintptr_t)t->data & 3) == 0) {
        *out = t->data;
        return NX_OK;
    }
    int64_t n = nx_tensor_nelements(t), rows = nx_tensor_nrows(t);
    if (!nx_can_dequantize(t->type))
        return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor %s has type %s, which cannot be converted to f32", t->name,
                       nx_type_name(t->type));
    float *p = nx_model_alloc(m, (size_t)n * sizeof(float), err);
    if (!p) return err ? err->code : NX_ERR_NOMEM;
    for (int64_t r = 0; r < rows; r++)
        if (!nx_dequantize_row(t->type, (const char *)t->data + (size_t)r * t->nb[1], p + r * t->ne[0], t->ne[0]))
            return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor %s: cannot dequantize %s", t->name, nx_type_name(t->type));
    *out = p;
    return NX_OK;
}

static int64_t arch_key(const nx_model *m, const char *suffix) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    return nx_gguf_find_key(m->gguf, key);
}

bool nx_model_key_int(const nx_model *m, const char *suffix, int il, int64_t *out) {
    int64_t k = arch_key(m, suffix);
    if (k < 0) return false;
    if (nx_gguf_kv_type(m->gguf, k) == NX_GGUF_ARRAY) {
        uint64_t n = nx_gguf_arr_n(m->gguf, k);
        uint64_t j = il < 0 ? 0 : (uint64_t)il;
        if (j >= n) return false;
        return nx_gguf_arr_int(m->gguf, k, j, out);
    }
    return nx_gguf_kv_int(m->gguf, k, out);
}

bool nx_model_key_float(const nx_model *m, const char *suffix, double *out) {
    int64_t k = arch_key(m, suffix);
    return k >= 0 && nx_gguf_kv_float(m->gguf, k, out);
}

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

void nx_batch_clear(nx_batch *b) { b->n = 0; b->snapshots = false; }

void nx_batch_set_snapshots(nx_batch *b, bool on) { b->snapshots = on; }

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

/* ===== Loader helpers shared by the architectures ===== */

const nx_tensor *nx_loader_tensor(nx_loader *L, unsigned flags, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                                  const char *fmt, ...) {
    if (L->st != NX_OK) return NULL;
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t ne[3] = {ne0, ne1, ne2};
    const nx_tensor *t = NULL;
    L->st = nx_model_tensor(L->m, name, n_dims, ne, flags, &t, L->err);
    return t;
}

const float *nx_loader_vec(nx_loader *L, unsigned flags, int64_t n, const char *fmt, int il) {
    if (L->st != NX_OK) return NULL;
    char name[128];
    snprintf(name, sizeof name, fmt, il);
    const nx_tensor *t = nx_loader_tensor(L, flags & NX_T_OPTIONAL, 1, n, 1, 1, "%s", name);
    if (!t) return NULL;
    const float *p = NULL;
    L->st = nx_model_f32(L->m, t, &p, L->err);
    return p;
}
