/*
 * gguf_write.c — the GGUF writer: collects key/values (stored already encoded, in insertion
 * order) and borrowed (or streamed) tensors, then writes a v3 file, a memory buffer, or a split model.
 *
 * Promises: output is always readable by nx_gguf_open() (keys and names unique and bounded,
 * every tensor shape valid for its type, offsets aligned, each tensor padded to the
 * alignment as ggml expects); `general.alignment` is written only when it differs from 32.
 * Must never: write a partial file and report success, or print. Setter failures are
 * remembered and reported by the next write.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gguf_impl.h"

#define ALIGN_KEY "general.alignment"

typedef struct wkv {
    char         *key;      /* owned */
    size_t        key_len;
    nx_gguf_vtype type;
    uint8_t      *blob;     /* encoded value (owned), as it appears after the type tag */
    size_t        size;
} wkv;

typedef struct wtensor {
    char       *name;       /* owned */
    size_t      name_len;
    nx_type     type;
    int         n_dims;
    int64_t     ne[NX_MAX_DIMS];
    const void *data;       /* borrowed; NULL = zeros (unless fill is set) */
    size_t      nbytes;
    nx_gguf_fill_fn fill;   /* produces the bytes at write time (streaming); NULL = use data */
    void       *fill_user;
    nx_gguf_stream_fn stream;   /* writes the bytes piece by piece at write time (fill_user is its user) */
} wtensor;

struct nx_gguf_writer {
    uint32_t      alignment;
    wkv          *kv;
    size_t        n_kv, cap_kv;
    nx_gguf_index kix;
    wtensor      *t;
    size_t        n_t, cap_t;
    nx_gguf_index tix;
    nx_error      err;      /* first setter failure (sticky); code NX_OK when none */
};

static nx_status wfail(nx_gguf_writer *w, nx_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static nx_status wfail(nx_gguf_writer *w, nx_status code, const char *fmt, ...) {
    if (w->err.code == NX_OK) {
        char msg[NX_ERROR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        nx_fail(&w->err, code, "gguf writer: %s", msg);
    }
    return code;
}

/* ===== Lifetime ===== */

nx_gguf_writer *nx_gguf_writer_create(void) {
    nx_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = NX_GGUF_DEFAULT_ALIGN;
    nx_gguf_index_init(&w->kix, (uint64_t)(uintptr_t)w);
    nx_gguf_index_init(&w->tix, (uint64_t)(uintptr_t)w * 0x9e3779b97f4a7c15ull);
    nx_error_clear(&w->err);
    return w;
}

void nx_gguf_writer_free(nx_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].blob);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    nx_gguf_index_free(&w->kix);
    nx_gguf_index_free(&w->tix);
    free(w);
}

static bool is_pow2(uint32_t a) { return a && !(a & (a - 1)); }

static void put_le32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

void nx_gguf_writer_set_alignment(nx_gguf_writer *w, uint32_t alignment) {
    if (!is_pow2(alignment)) {
        wfail(w, NX_ERR_INVALID_ARG, "alignment %u is not a nonzero power of two", alignment);
        return;
    }
    w->alignment = alignment;
    /* keep an explicitly set general.alignment key in step */
    int64_t i = nx_gguf_index_find(&w->kix, ALIGN_KEY, strlen(ALIGN_KEY));
    if (i >= 0) put_le32(w->kv[i].blob, alignment);
}

/* ===== Key/values ===== */

static nx_status check_name(nx_gguf_writer *w, const char *what, const char *name, size_t *len) {
    if (!name) return wfail(w, NX_ERR_INVALID_ARG, "%s name is NULL", what);
    *len = strlen(name);
    if (*len == 0 || *len > NX_GGUF_MAX_NAME)
        return wfail(w, NX_ERR_INVALID_ARG, "%s name length %zu (must be 1..%u)", what, *len, NX_GGUF_MAX_NAME);
    return NX_OK;
}

/* Store key = (type, blob); takes ownership of blob in every case. */
static nx_status set_value(nx_gguf_writer *w, const char *key, nx_gguf_vtype type, uint8_t *blob, size_t size) {
    size_t len;
    nx_status st = check_name(w, "key", key, &len);
    if (st) { free(blob); return st; }
    if (!strcmp(key, ALIGN_KEY)) {
        uint32_t a = 0;
        if (type == NX_GGUF_U32) memcpy(&a, blob, 4);
        if (type != NX_GGUF_U32 || !is_pow2(a)) {
            free(blob);
            return wfail(w, NX_ERR_INVALID_ARG, "general.alignment must be a u32 nonzero power of two");
        }
        w->alignment = a;
    }
    int64_t i = nx_gguf_index_find(&w->kix, key, len);
    if (i >= 0) {   /* keep the first position, take the new value */
        free(w->kv[i].blob);
        w->kv[i].type = type;
        w->kv[i].blob = blob;
        w->kv[i].size = size;
        return NX_OK;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *nk = realloc(w->kv, cap * sizeof *nk);
        if (!nk) { free(blob); return wfail(w, NX_ERR_NOMEM, "out of memory"); }
        w->kv = nk;
        w->cap_kv = cap;
    }
    char *k = malloc(len + 1);
    if (!k) { free(blob); return wfail(w, NX_ERR_NOMEM, "out of memory"); }
    memcpy(k, key, len + 1);
    if (nx_gguf_index_insert(&w->kix, k, len, (int64_t)w->n_kv, NULL) < 0) {
        free(k);
        free(blob);
        return wfail(w, NX_ERR_NOMEM, "out of memory");
    }
    w->kv[w->n_kv++] = (wkv){k, len, type, blob, size};
    return NX_OK;
}

static uint8_t *dup_bytes(const void *p, size_t n) {
    uint8_t *b = malloc(n ? n : 1);
    if (b && n) memcpy(b, p, n);
    return b;
}

nx_status nx_gguf_set_scalar(nx_gguf_writer *w, const char *key, nx_gguf_vtype t, const void *v) {
    size_t fs = nx_gguf_vtype_size(t);
    if (!fs || !v) return wfail(w, NX_ERR_INVALID_ARG, "key '%s': %s is not a numeric scalar type", key ? key : "(null)",
                                nx_gguf_vtype_name(t));
    uint8_t *b = dup_bytes(v, fs);
    if (!b) return wfail(w, NX_ERR_NOMEM, "out of memory");
    return set_value(w, key, t, b, fs);
}

nx_status nx_gguf_set_u32(nx_gguf_writer *w, const char *key, uint32_t v) { return nx_gguf_set_scalar(w, key, NX_GGUF_U32, &v); }
nx_status nx_gguf_set_i32(nx_gguf_writer *w, const char *key, int32_t v) { return nx_gguf_set_scalar(w, key, NX_GGUF_I32, &v); }
nx_status nx_gguf_set_u64(nx_gguf_writer *w, const char *key, uint64_t v) { return nx_gguf_set_scalar(w, key, NX_GGUF_U64, &v); }
nx_status nx_gguf_set_f32(nx_gguf_writer *w, const char *key, float v) { return nx_gguf_set_scalar(w, key, NX_GGUF_F32, &v); }

nx_status nx_gguf_set_bool(nx_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return nx_gguf_set_scalar(w, key, NX_GGUF_BOOL, &b);
}

nx_status nx_gguf_set_str(nx_gguf_writer *w, const char *key, const char *v) {
    if (!v) return wfail(w, NX_ERR_INVALID_ARG, "key '%s': NULL string", key ? key : "(null)");
    uint64_t len = strlen(v);
    uint8_t *b = malloc(8 + (size_t)len);
    if (!b) return wfail(w, NX_ERR_NOMEM, "out of memory");
    memcpy(b, &len, 8);
    memcpy(b + 8, v, (size_t)len);
    return set_value(w, key, NX_GGUF_STRING, b, 8 + (size_t)len);
}

nx_status nx_gguf_set_arr(nx_gguf_writer *w, const char *key, nx_gguf_vtype elem, const void *data, uint64_t n) {
    size_t fs = nx_gguf_vtype_size(elem), bytes;
    if (!fs) return wfail(w, NX_ERR_INVALID_ARG, "key '%s': nx_gguf_set_arr needs a numeric element type, not %s",
                          key ? key : "(null)", nx_gguf_vtype_name(elem));
    if (n > SIZE_MAX / fs - 12 || (n && !data))
        return wfail(w, NX_ERR_INVALID_ARG, "key '%s': bad array (%llu elements)", key ? key : "(null)",
                     (unsigned long long)n);
    bytes = (size_t)n * fs;
    uint8_t *b = malloc(12 + bytes);
    if (!b) return wfail(w, NX_ERR_NOMEM, "out of memory");
    put_le32(b, (uint32_t)elem);
    memcpy(b + 4, &n, 8);
    if (bytes) memcpy(b + 12, data, bytes);
    return set_value(w, key, NX_GGUF_ARRAY, b, 12 + bytes);
}

nx_status nx_gguf_set_arr_str(nx_gguf_writer *w, const char *key, const char *const *strs,
                              const uint64_t *lens, uint64_t n) {
    const char *kn = key ? key : "(null)";
    if (n && !strs) return wfail(w, NX_ERR_INVALID_ARG, "key '%s': NULL string array", kn);
    size_t total = 12;
    for (uint64_t j = 0; j < n; j++) {
        if (!strs[j] && (!lens || lens[j]))
            return wfail(w, NX_ERR_INVALID_ARG, "key '%s': string %llu is NULL", kn, (unsigned long long)j);
        uint64_t len = lens ? lens[j] : strlen(strs[j]);
        if (len > SIZE_MAX - 8 || total > SIZE_MAX - 8 - (size_t)len)
            return wfail(w, NX_ERR_NOMEM, "key '%s': string array too large", kn);
        total += 8 + (size_t)len;
    }
    uint8_t *b = malloc(total), *p = b;
    if (!b) return wfail(w, NX_ERR_NOMEM, "out of memory");
    put_le32(p, NX_GGUF_STRING);
    memcpy(p + 4, &n, 8);
    p += 12;
    for (uint64_t j = 0; j < n; j++) {
        uint64_t len = lens ? lens[j] : strlen(strs[j]);
        memcpy(p, &len, 8);
        if (len) memcpy(p + 8, strs[j], (size_t)len);
        p += 8 + len;
    }
    return set_value(w, key, NX_GGUF_ARRAY, b, total);
}

nx_status nx_gguf_copy_kv(nx_gguf_writer *w, const nx_gguf *g, int64_t i) {
    uint64_t size;
    const void *raw = g ? nx_gguf_kv_raw(g, i, &size) : NULL;
    if (!raw) return wfail(w, NX_ERR_INVALID_ARG, "nx_gguf_copy_kv: no key/value #%lld", (long long)i);
    uint8_t *b = dup_bytes(raw, (size_t)size);
    if (!b) return wfail(w, NX_ERR_NOMEM, "out of memory");
    return set_value(w, nx_gguf_key(g, i), nx_gguf_kv_type(g, i), b, (size_t)size);
}

void nx_gguf_remove_key(nx_gguf_writer *w, const char *key) {
    int64_t i = key ? nx_gguf_index_find(&w->kix, key, strlen(key)) : -1;
    if (i < 0) return;
    if (!strcmp(key, ALIGN_KEY)) w->alignment = NX_GGUF_DEFAULT_ALIGN;
    free(w->kv[i].key);
    free(w->kv[i].blob);
    memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - (size_t)i - 1) * sizeof *w->kv);
    w->n_kv--;
    /* renumber: rebuild the index (removal is rare) */
    nx_gguf_index_free(&w->kix);
    for (size_t k = 0; k < w->n_kv; k++)
        if (nx_gguf_index_insert(&w->kix, w->kv[k].key, w->kv[k].key_len, (int64_t)k, NULL) < 0) {
            wfail(w, NX_ERR_NOMEM, "out of memory");
            return;
        }
}

/* ===== Tensors ===== */

static nx_status add_tensor(nx_gguf_writer *w, const char *name, nx_type type, int n_dims, const int64_t *ne,
                            const void *data, nx_gguf_fill_fn fill, void *user) {
    size_t len;
    nx_status st = check_name(w, "tensor", name, &len);
    if (st) return st;
    nx_tensor t;
    if (n_dims < 1 || n_dims > NX_MAX_DIMS || !ne)
        return wfail(w, NX_ERR_INVALID_ARG, "tensor '%s': n_dims %d (must be 1..%d)", name, n_dims, NX_MAX_DIMS);
    for (int d = 0; d < n_dims; d++)
        if (ne[d] < 0 || (uint64_t)ne[d] >= (1ull << 62))
            return wfail(w, NX_ERR_INVALID_ARG, "tensor '%s': ne[%d] = %lld out of range", name, d, (long long)ne[d]);
    int64_t ne4[NX_MAX_DIMS] = {1, 1, 1, 1};
    for (int d = 0; d < n_dims; d++) ne4[d] = ne[d];
    const nx_type_traits *tt = nx_type_info(type);
    uint64_t nbytes;
    if (!tt || !nx_gguf_tensor_bytes(tt, ne4, &nbytes) || !nx_tensor_init(&t, name, type, n_dims, ne, NULL) ||
        t.nbytes != nbytes)
        return wfail(w, NX_ERR_INVALID_ARG, "tensor '%s': shape does not fit type %s (ne[0] = %lld)", name,
                     nx_type_name(type), (long long)ne[0]);
    if (nx_gguf_index_find(&w->tix, name, len) >= 0)
        return wfail(w, NX_ERR_INVALID_ARG, "duplicate tensor name '%s'", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return wfail(w, NX_ERR_NOMEM, "out of memory");
        w->t = nt;
        w->cap_t = cap;
    }
    char *nm = malloc(len + 1);
    if (!nm) return wfail(w, NX_ERR_NOMEM, "out of memory");
    memcpy(nm, name, len + 1);
    if (nx_gguf_index_insert(&w->tix, nm, len, (int64_t)w->n_t, NULL) < 0) {
        free(nm);
        return wfail(w, NX_ERR_NOMEM, "out of memory");
    }
    wtensor *wt = &w->t[w->n_t++];
    *wt = (wtensor){nm, len, type, n_dims, {1, 1, 1, 1}, data, t.nbytes, fill, user, NULL};
    for (int d = 0; d < n_dims; d++) wt->ne[d] = ne[d];
    return NX_OK;
}

nx_status nx_gguf_add_tensor(nx_gguf_writer *w, const char *name, nx_type type, int n_dims,
                             const int64_t *ne, const void *data) {
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL);
}

nx_status nx_gguf_add_tensor_fill(nx_gguf_writer *w, const char *name, nx_type type, int n_dims,
                                  const int64_t *ne, nx_gguf_fill_fn fill, void *user) {
    if (!fill) return wfail(w, NX_ERR_INVALID_ARG, "tensor '%s': NULL fill function", name ? name : "(null)");
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, user);
}

nx_status nx_gguf_add_tensor_stream(nx_gguf_writer *w, const char *name, nx_type type, int n_dims,
                                    const int64_t *ne, nx_gguf_stream_fn stream, void *user) {
    if (!stream) return wfail(w, NX_ERR_INVALID_ARG, "tensor '%s': NULL stream function", name ? name : "(null)");
    nx_status st = add_tensor(w, name, type, n_dims, ne, NULL, NULL, user);
    if (st == NX_OK) w->t[w->n_t - 1].stream = stream;
    return st;
}

/* ===== Output ===== */

/* Where bytes go: a FILE, a buffer of known size, or nowhere (counting pass). A fill
 * function's failure is kept in st/err and stops the output. */
typedef struct sink {
    FILE     *f;
    uint8_t  *buf;
    uint64_t  pos;
    bool      failed;
    nx_status st;
    nx_error *err;
    uint8_t  *tmp;        /* FILE sinks: one tensor's bytes from its fill function (owned) */
    size_t    tmp_cap;
} sink;

/* A streamed tensor's bytes: produced straight into the buffer, through tmp into the file,
 * not at all while counting. */
static void put_fill(sink *s, const wtensor *t) {
    if (s->st != NX_OK || s->failed) return;
    if (s->buf) {
        s->st = t->fill(t->fill_user, t->name, s->buf + s->pos, t->nbytes, s->err);
    } else if (s->f) {
        if (t->nbytes > s->tmp_cap) {
            uint8_t *nt = realloc(s->tmp, t->nbytes);
            if (!nt) {
                s->st = nx_fail(s->err, NX_ERR_NOMEM, "gguf writer: out of memory for tensor '%s' (%zu bytes)",
                                t->name, t->nbytes);
                return;
            }
            s->tmp = nt;
            s->tmp_cap = t->nbytes;
        }
        s->st = t->fill(t->fill_user, t->name, s->tmp, t->nbytes, s->err);
        if (s->st == NX_OK && fwrite(s->tmp, 1, t->nbytes, s->f) != t->nbytes) s->failed = true;
    }
    s->pos += t->nbytes;
}

static void put(sink *s, const void *p, size_t n);

/* What a stream function writes through: the sink and the bytes still owed. */
struct nx_gguf_out {
    sink       *s;
    const char *name;
    size_t      left;
};

nx_status nx_gguf_out_write(nx_gguf_out *o, const void *p, size_t n, nx_error *err) {
    if (n > o->left)
        return nx_fail(err, NX_ERR_INTERNAL, "gguf writer: tensor '%s' streamed %zu bytes past its size", o->name,
                       n - o->left);
    put(o->s, p, n);
    o->left -= n;
    if (o->s->failed) return nx_fail(err, NX_ERR_IO, "gguf writer: write failed in tensor '%s'", o->name);
    return NX_OK;
}

/* A piece-by-piece tensor: its bytes go straight to the sink (no whole-tensor buffer); while
 * counting only its size is added. */
static void put_stream(sink *s, const wtensor *t) {
    if (s->st != NX_OK || s->failed) return;
    if (!s->f && !s->buf) {
        s->pos += t->nbytes;
        return;
    }
    nx_gguf_out o = {s, t->name, t->nbytes};
    uint64_t start = s->pos;
    s->st = t->stream(t->fill_user, t->name, &o, t->nbytes, s->err);
    if (s->st == NX_OK && o.left)
        s->st = nx_fail(s->err, NX_ERR_INTERNAL, "gguf writer: tensor '%s' streamed %zu of %zu bytes", t->name,
                        t->nbytes - o.left, t->nbytes);
    s->pos = start + t->nbytes;
}

static void put(sink *s, const void *p, size_t n) {
    if (!n) return;
    if (s->f) {
        if (!s->failed && fwrite(p, 1, n, s->f) != n) s->failed = true;
    } else if (s->buf) {
        memcpy(s->buf + s->pos, p, n);
    }
    s->pos += n;
}

static void put_zeros(sink *s, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        put(s, zeros, k);
        n -= k;
    }
}

static void put_u32(sink *s, uint32_t v) { put(s, &v, 4); }
static void put_u64(sink *s, uint64_t v) { put(s, &v, 8); }
static void put_str(sink *s, const char *p, size_t n) { put_u64(s, n); put(s, p, n); }

static uint64_t align_up(uint64_t x, uint32_t a) { return (x + a - 1) / a * a; }

/* What one output file holds. split_count == 0: a plain file. */
typedef struct plan {
    size_t   t0, t1;        /* tensors [t0, t1) */
    bool     all_kv;        /* every key/value (else only general.alignment) */
    int      split_no, split_count;
    int32_t  split_tensors;
} plan;

static bool is_split_key(const char *k) {
    return !strcmp(k, "split.no") || !strcmp(k, "split.count") || !strcmp(k, "split.tensors.count");
}

static bool emit_kv(const nx_gguf_writer *w, const plan *pl, const wkv *kv) {
    if (!strcmp(kv->key, ALIGN_KEY)) return w->alignment != NX_GGUF_DEFAULT_ALIGN;
    if (pl->split_count && is_split_key(kv->key)) return false;
    return pl->all_kv;
}

static void emit(const nx_gguf_writer *w, const plan *pl, sink *s) {
    bool has_align = nx_gguf_index_find(&w->kix, ALIGN_KEY, strlen(ALIGN_KEY)) >= 0;
    bool add_align = !has_align && w->alignment != NX_GGUF_DEFAULT_ALIGN;
    uint64_t n_kv = (add_align ? 1 : 0) + (pl->split_count ? 3 : 0);
    for (size_t i = 0; i < w->n_kv; i++) n_kv += emit_kv(w, pl, &w->kv[i]);

    put(s, "GGUF", 4);
    put_u32(s, 3);
    put_u64(s, pl->t1 - pl->t0);
    put_u64(s, n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *kv = &w->kv[i];
        if (!emit_kv(w, pl, kv)) continue;
        put_str(s, kv->key, kv->key_len);
        put_u32(s, kv->type);
        put(s, kv->blob, kv->size);
    }
    if (add_align) {
        put_str(s, ALIGN_KEY, strlen(ALIGN_KEY));
        put_u32(s, NX_GGUF_U32);
        put_u32(s, w->alignment);
    }
    if (pl->split_count) {
        uint16_t no = (uint16_t)pl->split_no, count = (uint16_t)pl->split_count;
        put_str(s, "split.no", 8);
        put_u32(s, NX_GGUF_U16);
        put(s, &no, 2);
        put_str(s, "split.count", 11);
        put_u32(s, NX_GGUF_U16);
        put(s, &count, 2);
        put_str(s, "split.tensors.count", 19);
        put_u32(s, NX_GGUF_I32);
        put(s, &pl->split_tensors, 4);
    }
    uint64_t off = 0;
    for (size_t i = pl->t0; i < pl->t1; i++) {
        const wtensor *t = &w->t[i];
        put_str(s, t->name, t->name_len);
        put_u32(s, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(s, (uint64_t)t->ne[d]);
        put_u32(s, (uint32_t)t->type);
        put_u64(s, off);
        off = align_up(off + t->nbytes, w->alignment);
    }
    /* No tensors, no data section: skip the padding (with a large alignment it could be
     * far bigger than the file; readers do not need it). */
    if (pl->t1 > pl->t0) put_zeros(s, align_up(s->pos, w->alignment) - s->pos);
    for (size_t i = pl->t0; i < pl->t1; i++) {
        const wtensor *t = &w->t[i];
        if (t->stream) put_stream(s, t);
        else if (t->fill) put_fill(s, t);
        else if (t->data) put(s, t->data, t->nbytes);
        else put_zeros(s, t->nbytes);
        put_zeros(s, align_up(t->nbytes, w->alignment) - t->nbytes);
    }
}

static nx_status write_file(const nx_gguf_writer *w, const plan *pl, const char *path, nx_error *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return nx_fail(err, NX_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    sink s = {f, NULL, 0, false, NX_OK, err, NULL, 0};
    emit(w, pl, &s);
    free(s.tmp);
    int e = s.failed ? errno : 0;
    if (fclose(f) != 0 && !s.failed) { s.failed = true; e = errno; }
    if (s.failed || s.st != NX_OK) {
        remove(path);
        if (s.st != NX_OK) return s.st;
        return nx_fail(err, NX_ERR_IO, "%s: write failed: %s", path, strerror(e ? e : EIO));
    }
    return NX_OK;
}

static nx_status check_sticky(const nx_gguf_writer *w, nx_error *err) {
    if (w->err.code == NX_OK) return NX_OK;
    return nx_fail(err, w->err.code, "%s", w->err.msg);
}

nx_status nx_gguf_writer_write(nx_gguf_writer *w, const char *path, nx_error *err) {
    if (!w || !path) return nx_fail(err, NX_ERR_INVALID_ARG, "nx_gguf_writer_write: NULL argument");
    nx_status st = check_sticky(w, err);
    if (st) return st;
    plan pl = {0, w->n_t, true, 0, 0, 0};
    return write_file(w, &pl, path, err);
}

nx_status nx_gguf_writer_write_mem(nx_gguf_writer *w, void **out, size_t *size, nx_error *err) {
    if (!w || !out || !size) return nx_fail(err, NX_ERR_INVALID_ARG, "nx_gguf_writer_write_mem: NULL argument");
    *out = NULL;
    *size = 0;
    nx_status st = check_sticky(w, err);
    if (st) return st;
    plan pl = {0, w->n_t, true, 0, 0, 0};
    sink count = {NULL, NULL, 0, false, NX_OK, err, NULL, 0};
    emit(w, &pl, &count);
    if (count.pos > SIZE_MAX) return nx_fail(err, NX_ERR_NOMEM, "gguf writer: output too large for memory");
    uint8_t *buf = malloc((size_t)count.pos);
    if (!buf) return nx_fail(err, NX_ERR_NOMEM, "gguf writer: out of memory (%llu bytes)",
                             (unsigned long long)count.pos);
    sink s = {NULL, buf, 0, false, NX_OK, err, NULL, 0};
    emit(w, &pl, &s);
    if (s.st != NX_OK) {
        free(buf);
        return s.st;
    }
    *out = buf;
    *size = (size_t)s.pos;
    return NX_OK;
}

nx_status nx_gguf_writer_write_split(nx_gguf_writer *w, const char *path_prefix, int n_parts, nx_error *err) {
    if (!w || !path_prefix) return nx_fail(err, NX_ERR_INVALID_ARG, "nx_gguf_writer_write_split: NULL argument");
    if (n_parts < 1 || n_parts > 65535)
        return nx_fail(err, NX_ERR_INVALID_ARG, "nx_gguf_writer_write_split: n_parts %d (must be 1..65535)", n_parts);
    if (w->n_t > INT32_MAX) return nx_fail(err, NX_ERR_INVALID_ARG, "gguf writer: too many tensors to split");
    nx_status st = check_sticky(w, err);
    if (st) return st;
    unsigned __int128 total = 0, cum = 0;
    for (size_t i = 0; i < w->n_t; i++) total += w->t[i].nbytes;
    /* part of tensor i: where its first byte falls in the whole (by count when all are empty) */
    size_t t0 = 0;
    size_t plen = strlen(path_prefix) + 32;
    char *path = malloc(plen);
    if (!path) return nx_fail(err, NX_ERR_NOMEM, "gguf writer: out of memory");
    for (int p = 0; p < n_parts && !st; p++) {
        size_t t1 = t0;
        while (t1 < w->n_t) {
            unsigned __int128 at = total ? cum * (unsigned)n_parts / total
                                         : (unsigned __int128)t1 * (unsigned)n_parts / w->n_t;
            if (at > (unsigned)p) break;
            cum += w->t[t1].nbytes;
            t1++;
        }
        if (p == n_parts - 1) t1 = w->n_t;
        plan pl = {t0, t1, p == 0, p, n_parts, (int32_t)w->n_t};
        snprintf(path, plen, "%s-%05d-of-%05d.gguf", path_prefix, p + 1, n_parts);
        st = write_file(w, &pl, path, err);
        t0 = t1;
    }
    free(path);
    return st;
}
