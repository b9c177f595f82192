/*
 * gguf_read.c — the GGUF reader: maps a file (and every other part of a split model),
 * validates its whole structure before exposing anything, then answers accessor calls.
 *
 * Promises: after nx_gguf_open*() succeeds, every accessor is memory-safe for any index
 * (out-of-range indices give -1 / NULL / false), every tensor's bytes lie inside its part's
 * mapping, and no two tensors of a part overlap. Lookups by key or tensor name are hashed.
 * Must never: read past the buffer, trust a count or length before checking it against the
 * bytes left, allocate more than the input size justifies, or print. All errors are
 * NX_ERR_FORMAT ("FILE: offset N: problem") except I/O (NX_ERR_IO) and allocation (NX_ERR_NOMEM).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gguf_impl.h"

/* Hard caps on top of the "fits in the bytes left" checks: real models have a few hundred
 * keys and at most a few thousand tensors, so these bound memory on hostile input. */
#define MAX_KV       (1u << 20)
#define MAX_TENSORS  (1u << 20)
#define MAX_NE       (1ull << 62)
#define MAX_SPLITS   99999

/* ===== Parsed records ===== */

typedef struct kv_rec {
    char           *key;      /* owned, NUL-terminated (keys never contain NUL) */
    size_t          key_len;
    nx_gguf_vtype   type;
    nx_gguf_vtype   arr_type; /* arrays only (U8 otherwise) */
    uint64_t        arr_n;    /* arrays only */
    const uint8_t  *val;      /* encoded value in the mapping, just after the type tag */
    uint64_t        val_size; /* encoded size of the value */
    const uint8_t  *elems;    /* arrays: first element */
    const uint8_t **strs;     /* string arrays: each element's length field (owned table) */
    uint64_t        offset;   /* file offset of the pair (messages) */
} kv_rec;

typedef struct kv_table {
    kv_rec       *kv;
    int64_t       n;
    nx_gguf_index ix;
} kv_table;

typedef struct tensor_rec {
    nx_tensor t;              /* t.name == name */
    char     *name;           /* owned */
    uint64_t  offset;         /* absolute offset of the data in its part file */
    uint64_t  info_offset;    /* file offset of the tensor info (messages) */
    int       split;
} tensor_rec;

typedef struct part {
    const uint8_t *base;
    size_t         size;
    bool           mapped;     /* munmap on close */
    uint32_t       version;
    uint32_t       alignment;
    uint64_t       data_start; /* absolute offset of the data section */
    char          *label;      /* path or "<memory>", owned */
} part;

struct nx_gguf {
    part         *parts;
    int           n_parts;
    kv_table      kv;          /* key/values of the first part */
    tensor_rec   *tensors;     /* all parts, in file order */
    int64_t       n_tensors;
    nx_gguf_index tensor_ix;
    size_t        total_size;
    bool          copy;        /* parts read into anonymous memory instead of mapped */
};

typedef struct split_keys {
    int64_t no, count, tensors;   /* -1 when absent */
} split_keys;

/* ===== Cursor and messages ===== */

typedef struct cur {
    const uint8_t *p;
    size_t         size;
    size_t         pos;
    const char    *label;
    nx_error      *err;
} cur;

static size_t left(const cur *c) { return c->size - c->pos; }

static nx_status bad_at(const cur *c, uint64_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static nx_status bad_at(const cur *c, uint64_t off, const char *fmt, ...) {
    char msg[NX_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nx_fail(c->err, NX_ERR_FORMAT, "%s: offset %llu: %s", c->label, (unsigned long long)off, msg);
}

static nx_status nomem(const cur *c) {
    return nx_fail(c->err, NX_ERR_NOMEM, "%s: out of memory while reading", c->label);
}

/* A name made safe for a message: printable ASCII kept, other bytes as '?', long ones cut. */
#define SHOW_MAX 96
static const char *show(char buf[SHOW_MAX], const void *s, size_t len) {
    const unsigned char *b = s;
    size_t n = len < SHOW_MAX - 4 ? len : SHOW_MAX - 4, i;
    for (i = 0; i < n; i++) buf[i] = (b[i] >= 0x20 && b[i] < 0x7f) ? (char)b[i] : '?';
    if (n < len) buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
    buf[i] = '\0';
    return buf;
}

static nx_status need(cur *c, uint64_t n, const char *what) {
    if (n > left(c))
        return bad_at(c, c->pos, "truncated %s: need %llu bytes, %zu left", what, (unsigned long long)n, left(c));
    return NX_OK;
}

static nx_status get_u32(cur *c, uint32_t *v, const char *what) {
    nx_status st = need(c, 4, what);
    if (st) return st;
    *v = nx_rd_u32(c->p + c->pos);
    c->pos += 4;
    return NX_OK;
}

static nx_status get_u64(cur *c, uint64_t *v, const char *what) {
    nx_status st = need(c, 8, what);
    if (st) return st;
    *v = nx_rd_u64(c->p + c->pos);
    c->pos += 8;
    return NX_OK;
}

/* A key or tensor name: length-bounded, non-empty, no NUL (names become C strings). */
static nx_status get_name(cur *c, const char *what, int64_t idx, char **out, size_t *out_len) {
    uint64_t at = c->pos, len;
    nx_status st = get_u64(c, &len, what);
    if (st) return st;
    if (len > left(c))
        return bad_at(c, at, "%s #%lld: name length %llu past end of file (%zu bytes left)", what,
                      (long long)idx, (unsigned long long)len, left(c));
    if (len == 0) return bad_at(c, at, "%s #%lld: empty name", what, (long long)idx);
    char sb[SHOW_MAX];
    const uint8_t *s = c->p + c->pos;
    if (len > NX_GGUF_MAX_NAME)
        return bad_at(c, at, "%s #%lld: name length %llu exceeds %u", what, (long long)idx,
                      (unsigned long long)len, NX_GGUF_MAX_NAME);
    if (memchr(s, 0, (size_t)len))
        return bad_at(c, at, "%s '%s': name contains a NUL byte", what, show(sb, s, (size_t)len));
    char *name = malloc((size_t)len + 1);
    if (!name) return nomem(c);
    memcpy(name, s, (size_t)len);
    name[len] = '\0';
    c->pos += (size_t)len;
    *out = name;
    *out_len = (size_t)len;
    return NX_OK;
}

/* ===== Values ===== */

static bool conv_int(nx_gguf_vtype t, const uint8_t *p, int64_t *out) {
    uint16_t u16; uint32_t u32; uint64_t u64;
    switch (t) {
    case NX_GGUF_U8:   *out = p[0]; return true;
    case NX_GGUF_I8:   *out = (int8_t)p[0]; return true;
    case NX_GGUF_BOOL: *out = p[0] != 0; return true;
    case NX_GGUF_U16:  memcpy(&u16, p, 2); *out = u16; return true;
    case NX_GGUF_I16:  memcpy(&u16, p, 2); *out = (int16_t)u16; return true;
    case NX_GGUF_U32:  memcpy(&u32, p, 4); *out = u32; return true;
    case NX_GGUF_I32:  memcpy(&u32, p, 4); *out = (int32_t)u32; return true;
    case NX_GGUF_U64:  memcpy(&u64, p, 8); if (u64 > INT64_MAX) return false; *out = (int64_t)u64; return true;
    case NX_GGUF_I64:  memcpy(&u64, p, 8); *out = (int64_t)u64; return true;
    default: return false;
    }
}

static bool conv_float(nx_gguf_vtype t, const uint8_t *p, double *out) {
    if (t == NX_GGUF_F32) { float f; memcpy(&f, p, 4); *out = f; return true; }
    if (t == NX_GGUF_F64) { double d; memcpy(&d, p, 8); *out = d; return true; }
    if (t == NX_GGUF_U64) { *out = (double)nx_rd_u64(p); return true; }
    if (t == NX_GGUF_BOOL) return false;
    int64_t v;
    if (!conv_int(t, p, &v)) return false;
    *out = (double)v;
    return true;
}

/* Parse one value of type `type` (its tag, if any, already read at type_at). rec, when
 * given, receives the array details of a top-level value. Every element consumes at least
 * one byte, so the work is linear in the file size. */
static nx_status parse_value(cur *c, uint32_t type, uint64_t type_at, int depth, const char *kname, kv_rec *rec) {
    if (type >= NX_GGUF_VTYPE_COUNT)
        return bad_at(c, type_at, "key '%s': bad value type %u", kname, type);
    size_t fs = nx_gguf_vtype_size(type);
    if (fs) {
        if (fs > left(c)) return bad_at(c, c->pos, "key '%s': truncated %s value", kname, nx_gguf_vtype_name(type));
        c->pos += fs;
        return NX_OK;
    }
    nx_status st;
    if (type == NX_GGUF_STRING) {
        uint64_t at = c->pos, len;
        if ((st = get_u64(c, &len, "string length"))) return st;
        if (len > left(c))
            return bad_at(c, at, "key '%s': string length %llu past end of file (%zu bytes left)", kname,
                          (unsigned long long)len, left(c));
        c->pos += (size_t)len;
        return NX_OK;
    }
    /* array */
    if (depth >= NX_GGUF_MAX_NESTING)
        return bad_at(c, c->pos, "key '%s': arrays nested deeper than %d levels", kname, NX_GGUF_MAX_NESTING);
    uint64_t et_at = c->pos, n_at, n;
    uint32_t et;
    if ((st = get_u32(c, &et, "array element type"))) return st;
    if (et >= NX_GGUF_VTYPE_COUNT)
        return bad_at(c, et_at, "key '%s': bad value type %u for array elements", kname, et);
    n_at = c->pos;
    if ((st = get_u64(c, &n, "array count"))) return st;
    size_t efs = nx_gguf_vtype_size(et);
    uint64_t min_elem = efs ? efs : (et == NX_GGUF_STRING ? 8 : 12);
    if (n > left(c) / min_elem)
        return bad_at(c, n_at, "key '%s': array count %llu too large for the %zu bytes left", kname,
                      (unsigned long long)n, left(c));
    if (rec) {
        rec->arr_type = (nx_gguf_vtype)et;
        rec->arr_n = n;
        rec->elems = c->p + c->pos;
    }
    if (efs) {
        c->pos += (size_t)(n * efs);
        return NX_OK;
    }
    if (et == NX_GGUF_STRING) {
        const uint8_t **strs = NULL;
        if (rec && n) {   /* n <= bytes left / 8, so this table is at most the file's size */
            strs = malloc((size_t)n * sizeof *strs);
            if (!strs) return nomem(c);
            rec->strs = strs;
        }
        for (uint64_t j = 0; j < n; j++) {
            uint64_t at = c->pos, len;
            if (strs) strs[j] = c->p + c->pos;
            if (left(c) < 8)
                return bad_at(c, at, "key '%s': element %llu: truncated string", kname, (unsigned long long)j);
            len = nx_rd_u64(c->p + c->pos);
            c->pos += 8;
            if (len > left(c))
                return bad_at(c, at, "key '%s': element %llu: string length %llu past end of file (%zu bytes left)",
                              kname, (unsigned long long)j, (unsigned long long)len, left(c));
            c->pos += (size_t)len;
        }
        return NX_OK;
    }
    /* array of arrays: each element is an array value (element type, count, elements) */
    for (uint64_t j = 0; j < n; j++)
        if ((st = parse_value(c, NX_GGUF_ARRAY, c->pos, depth + 1, kname, NULL))) return st;
    return NX_OK;
}

static void kv_table_free(kv_table *t) {
    for (int64_t i = 0; i < t->n; i++) {
        free(t->kv[i].key);
        free(t->kv[i].strs);
    }
    free(t->kv);
    nx_gguf_index_free(&t->ix);
    memset(t, 0, sizeof *t);
}

/* The integer value of a key that must be an integer if present; -1 when absent. */
static nx_status key_int(cur *c, const kv_table *t, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    *out = -1;
    int64_t i = nx_gguf_index_find(&t->ix, key, strlen(key));
    if (i < 0) return NX_OK;
    const kv_rec *r = &t->kv[i];
    int64_t v;
    if (r->type == NX_GGUF_BOOL || !conv_int(r->type, r->val, &v))
        return bad_at(c, r->offset, "key '%s': must be an integer, found %s", key, nx_gguf_vtype_name(r->type));
    if (v < lo || v > hi)
        return bad_at(c, r->offset, "key '%s': value %lld out of range [%lld, %lld]", key, (long long)v,
                      (long long)lo, (long long)hi);
    *out = v;
    return NX_OK;
}

/* ===== One part ===== */

static nx_status parse_kvs(cur *c, uint64_t n_kv, kv_table *t, uint64_t seed) {
    nx_gguf_index_init(&t->ix, seed);
    if (n_kv == 0) return NX_OK;
    t->kv = calloc((size_t)n_kv, sizeof *t->kv);
    if (!t->kv || !nx_gguf_index_reserve(&t->ix, (size_t)n_kv)) return nomem(c);
    nx_status st;
    for (uint64_t i = 0; i < n_kv; i++) {
        kv_rec *r = &t->kv[i];
        t->n = (int64_t)i + 1;   /* so the table frees this record on failure */
        r->offset = c->pos;
        if ((st = get_name(c, "key", (int64_t)i, &r->key, &r->key_len))) return st;
        uint64_t type_at = c->pos;
        uint32_t type;
        if ((st = get_u32(c, &type, "value type"))) return st;
        r->type = (nx_gguf_vtype)type;
        r->arr_type = NX_GGUF_U8;
        r->val = c->p + c->pos;
        char kb[SHOW_MAX];
        show(kb, r->key, r->key_len);
        if ((st = parse_value(c, type, type_at, 0, kb, r))) return st;
        r->val_size = (uint64_t)(c->p + c->pos - r->val);
        int64_t first;
        int ins = nx_gguf_index_insert(&t->ix, r->key, r->key_len, (int64_t)i, &first);
        if (ins < 0) return nomem(c);
        if (ins == 0)
            return bad_at(c, r->offset, "duplicate key '%s' (first at offset %llu)", kb,
                          (unsigned long long)t->kv[first].offset);
    }
    return NX_OK;
}

/* qsort has no context argument in C11; sort an array of (offset, index) pairs instead. */
typedef struct span { uint64_t start, end; int64_t idx; } span;
static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static nx_status parse_part(nx_gguf *g, int pi, kv_table *kvt, split_keys *sk, nx_error *err) {
    part *pt = &g->parts[pi];
    cur c = {pt->base, pt->size, 0, pt->label, err};
    nx_status st;

    /* -- header -- */
    if (c.size < 4) return bad_at(&c, 0, "truncated header: file is %zu bytes", c.size);
    if (nx_rd_u32(c.p) != NX_GGUF_MAGIC)
        return bad_at(&c, 0, "bad magic %02x %02x %02x %02x: not a GGUF file", c.p[0], c.p[1], c.p[2], c.p[3]);
    if (c.size < 24) return bad_at(&c, c.size, "truncated header: need 24 bytes, file is %zu bytes", c.size);
    uint32_t version = nx_rd_u32(c.p + 4);
    if (version == 1)
        return bad_at(&c, 4, "GGUF version 1 is not supported (it predates 64-bit counts; re-convert the model)");
    if (version == 0x02000000u || version == 0x03000000u)
        return bad_at(&c, 4, "big-endian GGUF files are not supported");
    if (version != 2 && version != 3)
        return bad_at(&c, 4, "unsupported GGUF version %u (nextn reads versions 2 and 3)", version);
    uint64_t n_tensors = nx_rd_u64(c.p + 8), n_kv = nx_rd_u64(c.p + 16);
    c.pos = 24;
    pt->version = version;
    /* the smallest key/value is 14 bytes (u64 length, 1-byte key, u32 type, u8 value) and
     * the smallest tensor info 33 (u64 length, 1-byte name, u32 n_dims, one u64 ne, u32 type, u64 offset) */
    if (n_kv > MAX_KV || n_kv > left(&c) / 14)
        return bad_at(&c, 16, "key/value count %llu too large for a %zu-byte file",
                      (unsigned long long)n_kv, c.size);
    if (n_tensors > MAX_TENSORS || n_tensors > left(&c) / 33)
        return bad_at(&c, 8, "tensor count %llu too large for a %zu-byte file",
                      (unsigned long long)n_tensors, c.size);

    /* -- key/values -- */
    if ((st = parse_kvs(&c, n_kv, kvt, (uint64_t)(uintptr_t)g ^ 0x9e3779b97f4a7c15ull))) return st;

    uint32_t alignment = NX_GGUF_DEFAULT_ALIGN;
    int64_t ai = nx_gguf_index_find(&kvt->ix, "general.alignment", strlen("general.alignment"));
    if (ai >= 0) {
        const kv_rec *r = &kvt->kv[ai];
        if (r->type != NX_GGUF_U32)
            return bad_at(&c, r->offset, "key 'general.alignment': must be u32, found %s",
                          nx_gguf_vtype_name(r->type));
        alignment = nx_rd_u32(r->val);
        if (alignment == 0 || (alignment & (alignment - 1)))
            return bad_at(&c, r->offset, "bad alignment %u: general.alignment must be a nonzero power of two",
                          alignment);
    }
    pt->alignment = alignment;
    if ((st = key_int(&c, kvt, "split.count", 1, MAX_SPLITS, &sk->count))) return st;
    if ((st = key_int(&c, kvt, "split.no", 0, MAX_SPLITS - 1, &sk->no))) return st;
    if ((st = key_int(&c, kvt, "split.tensors.count", 0, INT64_MAX, &sk->tensors))) return st;

    /* -- tensor infos -- */
    int64_t first = g->n_tensors;
    if (n_tensors) {
        tensor_rec *nt = realloc(g->tensors, (size_t)(first + (int64_t)n_tensors) * sizeof *nt);
        if (!nt) return nomem(&c);
        g->tensors = nt;
        if (!nx_gguf_index_reserve(&g->tensor_ix, (size_t)(first + (int64_t)n_tensors))) return nomem(&c);
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        tensor_rec *tr = &g->tensors[first + (int64_t)i];
        memset(tr, 0, sizeof *tr);
        g->n_tensors = first + (int64_t)i + 1;   /* owned from here on, freed by close */
        tr->info_offset = c.pos;
        tr->split = pi;
        size_t name_len;
        if ((st = get_name(&c, "tensor", (int64_t)i, &tr->name, &name_len))) return st;
        char nb[SHOW_MAX];
        show(nb, tr->name, name_len);
        uint32_t n_dims, type;
        uint64_t dims_at = c.pos;
        if ((st = get_u32(&c, &n_dims, "tensor n_dims"))) return st;
        if (n_dims < 1 || n_dims > NX_MAX_DIMS)
            return bad_at(&c, dims_at, "tensor '%s': n_dims %u (must be 1..%d)", nb, n_dims, NX_MAX_DIMS);
        int64_t ne[NX_MAX_DIMS] = {1, 1, 1, 1};
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t v, at = c.pos;
            if ((st = get_u64(&c, &v, "tensor shape"))) return st;
            if (v >= MAX_NE)
                return bad_at(&c, at, "tensor '%s': ne[%u] = %llu is too large", nb, d, (unsigned long long)v);
            ne[d] = (int64_t)v;
        }
        uint64_t type_at = c.pos, rel;
        if ((st = get_u32(&c, &type, "tensor type"))) return st;
        const nx_type_traits *tt = nx_type_info(type);
        if (!tt) return bad_at(&c, type_at, "tensor '%s': bad tensor type id %u", nb, type);
        uint64_t off_at = c.pos;
        if ((st = get_u64(&c, &rel, "tensor offset"))) return st;
        if (ne[0] % tt->blck_size)
            return bad_at(&c, dims_at, "tensor '%s': ne[0] = %lld is not a multiple of the %s block size %lld",
                          nb, (long long)ne[0], tt->name, (long long)tt->blck_size);
        int64_t nel = 1;
        for (int d = 0; d < NX_MAX_DIMS; d++)
            if (__builtin_mul_overflow(nel, ne[d], &nel))
                return bad_at(&c, dims_at, "tensor '%s': element count overflows (shape [%lld, %lld, %lld, %lld])",
                              nb, (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3]);
        uint64_t nbytes;
        if (!nx_gguf_tensor_bytes(tt, ne, &nbytes) ||
            !nx_tensor_init(&tr->t, tr->name, (nx_type)type, (int)n_dims, ne, NULL) || tr->t.nbytes != nbytes)
            return bad_at(&c, dims_at, "tensor '%s': byte size overflows (shape [%lld, %lld, %lld, %lld] of %s)",
                          nb, (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3], tt->name);
        if (rel % alignment)
            return bad_at(&c, off_at, "tensor '%s': offset %llu is unaligned (not a multiple of the alignment %u)",
                          nb, (unsigned long long)rel, alignment);
        tr->offset = rel;   /* relative for now; made absolute below */
        int64_t dup;
        int ins = nx_gguf_index_insert(&g->tensor_ix, tr->name, name_len, first + (int64_t)i, &dup);
        if (ins < 0) return nomem(&c);
        if (ins == 0) {
            const tensor_rec *o = &g->tensors[dup];
            return bad_at(&c, tr->info_offset, "duplicate tensor name '%s' (first at offset %llu of %s)", nb,
                          (unsigned long long)o->info_offset, g->parts[o->split].label);
        }
    }

    /* -- data section: every range inside the file, no overlaps -- */
    uint64_t data_start = ((uint64_t)c.pos + alignment - 1) / alignment * alignment;
    pt->data_start = data_start;
    span *sp = n_tensors ? malloc((size_t)n_tensors * sizeof *sp) : NULL;
    if (n_tensors && !sp) return nomem(&c);
    size_t n_sp = 0;
    for (int64_t k = first; k < g->n_tensors; k++) {
        tensor_rec *tr = &g->tensors[k];
        uint64_t start, end;
        bool over = __builtin_add_overflow(data_start, tr->offset, &start);
        over |= __builtin_add_overflow(start, (uint64_t)tr->t.nbytes, &end);
        if (over || end > c.size) {
            char nb[SHOW_MAX];
            free(sp);
            if (over) end = UINT64_MAX;
            return bad_at(&c, tr->info_offset, "tensor '%s': data range [%llu, %llu) past end of file (size %zu)",
                          show(nb, tr->name, strlen(tr->name)), (unsigned long long)(over ? data_start : start),
                          (unsigned long long)end, c.size);
        }
        tr->offset = start;
        tr->t.data = (void *)(uintptr_t)(c.p + start);   /* read-only mapping; callers must not write */
        if (tr->t.nbytes) sp[n_sp++] = (span){start, end, k};
    }
    if (n_sp > 1) {
        qsort(sp, n_sp, sizeof *sp, cmp_span);
        size_t owner = 0;   /* span reaching furthest so far */
        for (size_t k = 1; k < n_sp; k++) {
            if (sp[k].start < sp[owner].end) {
                const tensor_rec *a = &g->tensors[sp[owner].idx], *b = &g->tensors[sp[k].idx];
                char na[SHOW_MAX], nb[SHOW_MAX];
                nx_status r = bad_at(&c, b->info_offset, "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                                     show(na, a->name, strlen(a->name)), (unsigned long long)sp[owner].start,
                                     (unsigned long long)sp[owner].end, show(nb, b->name, strlen(b->name)),
                                     (unsigned long long)sp[k].start, (unsigned long long)sp[k].end);
                free(sp);
                return r;
            }
            if (sp[k].end > sp[owner].end) owner = k;
        }
    }
    free(sp);
    return NX_OK;
}

/* ===== Opening ===== */

void nx_gguf_close(nx_gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->n_parts; i++) {
        if (g->parts[i].mapped) munmap((void *)(uintptr_t)g->parts[i].base, g->parts[i].size);
        free(g->parts[i].label);
    }
    free(g->parts);
    kv_table_free(&g->kv);
    for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->tensors);
    nx_gguf_index_free(&g->tensor_ix);
    free(g);
}

static nx_gguf *new_handle(int n_parts) {
    nx_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->parts = calloc((size_t)n_parts, sizeof *g->parts);
    if (!g->parts) { free(g); return NULL; }
    nx_gguf_index_init(&g->tensor_ix, (uint64_t)(uintptr_t)g * 0x2545f4914f6cdd1dull);
    return g;
}

/* Weights are streamed once per token, so their pages matter: a 2 MiB-aligned mapping with
 * MADV_HUGEPAGE lets the kernel map huge page-cache folios with single TLB entries (and fill a
 * cold cache with them); without it decode ran ~15% slower here. Still a plain view of the file. */
#define HUGE_ALIGN ((size_t)2 << 20)

static void *map_file(int fd, size_t size) {
    uint8_t *r = mmap(NULL, size + HUGE_ALIGN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    uint8_t *a = (uint8_t *)(((uintptr_t)r + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
    void *m = mmap(a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        munmap(r, size + HUGE_ALIGN);
        errno = e;
        return MAP_FAILED;
    }
    /* give back the reservation around the aligned view */
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *end = a + ((size + pg - 1) & ~(pg - 1)), *r_end = r + size + HUGE_ALIGN;
    if (a > r) munmap(r, (size_t)(a - r));
    if (end < r_end) munmap(end, (size_t)(r_end - end));
    madvise(m, size, MADV_HUGEPAGE);   /* advice only: failure changes nothing */
    return m;
}

/* use_mmap = false: the file read into anonymous huge-page memory (no page-cache mapping). */
static void *copy_file(int fd, size_t size) {
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return m;
    madvise(m, size, MADV_HUGEPAGE);
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, (uint8_t *)m + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int e = n < 0 ? errno : EIO;   /* 0 bytes: the file shrank under us */
            munmap(m, size);
            errno = e;
            return MAP_FAILED;
        }
        got += (size_t)n;
    }
    mprotect(m, size, PROT_READ);
    return m;
}

static nx_status map_part(nx_gguf *g, const char *path, nx_error *err) {
    part *pt = &g->parts[g->n_parts];
    pt->label = strdup(path);
    if (!pt->label) return nx_fail(err, NX_ERR_NOMEM, "%s: out of memory", path);
    g->n_parts++;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nx_fail(err, NX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return nx_fail(err, NX_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return nx_fail(err, NX_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return nx_fail(err, NX_ERR_FORMAT, "%s: offset 0: truncated header: file is empty", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return nx_fail(err, NX_ERR_IO, "%s: file too large to map", path);
    }
    void *m = g->copy ? copy_file(fd, (size_t)st.st_size) : map_file(fd, (size_t)st.st_size);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return nx_fail(err, e == ENOMEM ? NX_ERR_NOMEM : NX_ERR_IO, "%s: %s failed: %s", path,
                       g->copy ? "reading the file into memory" : "mmap", strerror(e));
    pt->base = m;
    pt->size = (size_t)st.st_size;
    pt->mapped = true;
    g->total_size += pt->size;
    return NX_OK;
}

bool nx_gguf_split_path(const char *path, int *no, int *count, size_t *prefix_len) {
    static const char tail[] = "-00000-of-00000.gguf";
    size_t n = path ? strlen(path) : 0, tl = sizeof tail - 1;
    if (n < tl) return false;
    const char *s = path + n - tl;
    int a = 0, b = 0;
    for (size_t i = 0; i < tl; i++) {
        if (tail[i] == '0') {
            if (s[i] < '0' || s[i] > '9') return false;
            if (i < 6) a = a * 10 + (s[i] - '0');
            else b = b * 10 + (s[i] - '0');
        } else if (s[i] != tail[i]) {
            return false;
        }
    }
    if (a < 1 || b < 1 || a > b) return false;
    if (no) *no = a;
    if (count) *count = b;
    if (prefix_len) *prefix_len = n - tl;
    return true;
}

/* A split key's value for a message: the number, or "missing". */
static const char *num_or_missing(int64_t v, char buf[24]) {
    if (v < 0) return "missing";
    snprintf(buf, 24, "%lld", (long long)v);
    return buf;
}

static nx_status open_impl(const char *path, bool follow_splits, bool copy, nx_gguf **out, nx_error *err) {
    if (!path || !out) return nx_fail(err, NX_ERR_INVALID_ARG, "nx_gguf_open: NULL argument");
    *out = NULL;
    int name_no = 0, name_count = 0;
    size_t prefix_len = 0;
    bool named = nx_gguf_split_path(path, &name_no, &name_count, &prefix_len);
    int max_parts = follow_splits && named ? name_count : 1;
    nx_gguf *g = new_handle(max_parts);
    if (!g) return nx_fail(err, NX_ERR_NOMEM, "%s: out of memory", path);
    g->copy = copy;
    split_keys sk0 = {-1, -1, -1};
    nx_status st = map_part(g, path, err);
    if (!st) st = parse_part(g, 0, &g->kv, &sk0, err);
    if (st) { nx_gguf_close(g); return st; }
    if (!follow_splits) { *out = g; return NX_OK; }

    cur c = {g->parts[0].base, g->parts[0].size, 0, path, err};
    char nb[24], nb2[24];
    int64_t count = sk0.count < 0 ? 1 : sk0.count;
    if (named && name_count > 1 && name_no != 1)
        st = nx_fail(err, NX_ERR_FORMAT, "%s: this is part %d of %d of a split model; open the first part "
                     "(%.*s-00001-of-%05d.gguf)", path, name_no, name_count, (int)prefix_len, path, name_count);
    else if (named && name_count > 1 && sk0.count < 0)
        st = bad_at(&c, 0, "file name says part 1 of %d but the file has no split.count key", name_count);
    else if (named && count != name_count)
        st = bad_at(&c, 0, "split.count = %lld but the file name says %d parts", (long long)count, name_count);
    else if (!named && count > 1)
        st = bad_at(&c, 0, "split.count = %lld (this is part %s) but the file name does not end in "
                    "-0000K-of-%05lld.gguf, so the other parts cannot be found", (long long)count,
                    sk0.no >= 0 ? num_or_missing(sk0.no + 1, nb) : "?", (long long)count);
    else if (count > 1 && sk0.no != 0)
        st = bad_at(&c, 0, "split.no is %s in the first part (expected 0)", num_or_missing(sk0.no, nb));
    if (st) { nx_gguf_close(g); return st; }

    for (int k = 1; k < count && !st; k++) {
        char *pp = malloc(prefix_len + 32);
        if (!pp) { st = nx_fail(err, NX_ERR_NOMEM, "%s: out of memory", path); break; }
        snprintf(pp, prefix_len + 32, "%.*s-%05d-of-%05d.gguf", (int)prefix_len, path, k + 1, (int)count);
        kv_table kvt = {0};
        split_keys sk = {-1, -1, -1};
        st = map_part(g, pp, err);
        if (!st) st = parse_part(g, k, &kvt, &sk, err);
        if (!st) {
            cur ck = {g->parts[k].base, g->parts[k].size, 0, g->parts[k].label, err};
            if (sk.no != k)
                st = bad_at(&ck, 0, "split.no is %s (expected %d for part %d of %lld)", num_or_missing(sk.no, nb),
                            k, k + 1, (long long)count);
            else if (sk.count != count)
                st = bad_at(&ck, 0, "split.count is %s but the first part says %lld", num_or_missing(sk.count, nb),
                            (long long)count);
            else if (sk.tensors != sk0.tensors)
                st = bad_at(&ck, 0, "split.tensors.count is %s but the first part says %s",
                            num_or_missing(sk.tensors, nb), num_or_missing(sk0.tensors, nb2));
        }
        kv_table_free(&kvt);
        free(pp);
    }
    if (!st && count > 1 && sk0.tensors >= 0 && sk0.tensors != g->n_tensors)
        st = bad_at(&c, 0, "split.tensors.count = %lld but the %lld parts hold %lld tensors",
                    (long long)sk0.tensors, (long long)count, (long long)g->n_tensors);
    if (st) { nx_gguf_close(g); return st; }
    *out = g;
    return NX_OK;
}

nx_status nx_gguf_open(const char *path, nx_gguf **out, nx_error *err) {
    return open_impl(path, true, false, out, err);
}

nx_status nx_gguf_open_copy(const char *path, nx_gguf **out, nx_error *err) {
    return open_impl(path, true, true, out, err);
}

nx_status nx_gguf_open_part(const char *path, nx_gguf **out, nx_error *err) {
    return open_impl(path, false, false, out, err);
}

nx_status nx_gguf_open_memory(const void *data, size_t size, nx_gguf **out, nx_error *err) {
    if (!out || (!data && size)) return nx_fail(err, NX_ERR_INVALID_ARG, "nx_gguf_open_memory: NULL argument");
    *out = NULL;
    nx_gguf *g = new_handle(1);
    if (!g) return nx_fail(err, NX_ERR_NOMEM, "<memory>: out of memory");
    g->parts[0].label = strdup("<memory>");
    g->n_parts = 1;
    g->parts[0].base = data;
    g->parts[0].size = size;
    g->total_size = size;
    split_keys sk = {-1, -1, -1};
    nx_status st = g->parts[0].label ? parse_part(g, 0, &g->kv, &sk, err)
                                     : nx_fail(err, NX_ERR_NOMEM, "<memory>: out of memory");
    if (st) { nx_gguf_close(g); return st; }
    *out = g;
    return NX_OK;
}

/* ===== Accessors ===== */

uint32_t nx_gguf_version(const nx_gguf *g) { return g->parts[0].version; }
uint32_t nx_gguf_alignment(const nx_gguf *g) { return g->parts[0].alignment; }
int nx_gguf_n_splits(const nx_gguf *g) { return g->n_parts; }
size_t nx_gguf_file_size(const nx_gguf *g) { return g->total_size; }

uint64_t nx_gguf_data_offset(const nx_gguf *g, int split) {
    return split >= 0 && split < g->n_parts ? g->parts[split].data_start : 0;
}

const char *nx_gguf_split_file(const nx_gguf *g, int split) {
    return split >= 0 && split < g->n_parts ? g->parts[split].label : NULL;
}

int64_t nx_gguf_n_kv(const nx_gguf *g) { return g->kv.n; }

static const kv_rec *kv_at(const nx_gguf *g, int64_t i) {
    return i >= 0 && i < g->kv.n ? &g->kv.kv[i] : NULL;
}

int64_t nx_gguf_find_key(const nx_gguf *g, const char *key) {
    return key ? nx_gguf_index_find(&g->kv.ix, key, strlen(key)) : -1;
}

const char *nx_gguf_key(const nx_gguf *g, int64_t i) {
    const kv_rec *r = kv_at(g, i);
    return r ? r->key : NULL;
}

nx_gguf_vtype nx_gguf_kv_type(const nx_gguf *g, int64_t i) {
    const kv_rec *r = kv_at(g, i);
    return r ? r->type : NX_GGUF_VTYPE_COUNT;
}

nx_gguf_vtype nx_gguf_arr_type(const nx_gguf *g, int64_t i) {
    const kv_rec *r = kv_at(g, i);
    return r && r->type == NX_GGUF_ARRAY ? r->arr_type : NX_GGUF_U8;
}

uint64_t nx_gguf_arr_n(const nx_gguf *g, int64_t i) {
    const kv_rec *r = kv_at(g, i);
    return r && r->type == NX_GGUF_ARRAY ? r->arr_n : 0;
}

const void *nx_gguf_kv_raw(const nx_gguf *g, int64_t i, uint64_t *size) {
    const kv_rec *r = kv_at(g, i);
    if (size) *size = r ? r->val_size : 0;
    return r ? r->val : NULL;
}

bool nx_gguf_kv_int(const nx_gguf *g, int64_t i, int64_t *out) {
    const kv_rec *r = kv_at(g, i);
    return r && conv_int(r->type, r->val, out);
}

bool nx_gguf_kv_float(const nx_gguf *g, int64_t i, double *out) {
    const kv_rec *r = kv_at(g, i);
    return r && conv_float(r->type, r->val, out);
}

bool nx_gguf_kv_bool(const nx_gguf *g, int64_t i, bool *out) {
    const kv_rec *r = kv_at(g, i);
    if (!r || r->type != NX_GGUF_BOOL) return false;
    *out = r->val[0] != 0;
    return true;
}

const char *nx_gguf_kv_str(const nx_gguf *g, int64_t i, uint64_t *len) {
    const kv_rec *r = kv_at(g, i);
    if (!r || r->type != NX_GGUF_STRING) return NULL;
    if (len) *len = nx_rd_u64(r->val);
    return (const char *)r->val + 8;
}

static const uint8_t *arr_elem(const nx_gguf *g, int64_t i, uint64_t j, nx_gguf_vtype *t) {
    const kv_rec *r = kv_at(g, i);
    if (!r || r->type != NX_GGUF_ARRAY || j >= r->arr_n) return NULL;
    size_t fs = nx_gguf_vtype_size(r->arr_type);
    if (!fs) return NULL;
    *t = r->arr_type;
    return r->elems + j * fs;
}

bool nx_gguf_arr_int(const nx_gguf *g, int64_t i, uint64_t j, int64_t *out) {
    nx_gguf_vtype t;
    const uint8_t *p = arr_elem(g, i, j, &t);
    return p && conv_int(t, p, out);
}

bool nx_gguf_arr_float(const nx_gguf *g, int64_t i, uint64_t j, double *out) {
    nx_gguf_vtype t;
    const uint8_t *p = arr_elem(g, i, j, &t);
    return p && conv_float(t, p, out);
}

const char *nx_gguf_arr_str(const nx_gguf *g, int64_t i, uint64_t j, uint64_t *len) {
    const kv_rec *r = kv_at(g, i);
    if (!r || r->type != NX_GGUF_ARRAY || r->arr_type != NX_GGUF_STRING || j >= r->arr_n) return NULL;
    if (len) *len = nx_rd_u64(r->strs[j]);
    return (const char *)r->strs[j] + 8;
}

const void *nx_gguf_arr_data(const nx_gguf *g, int64_t i) {
    const kv_rec *r = kv_at(g, i);
    if (!r || r->type != NX_GGUF_ARRAY || !nx_gguf_vtype_size(r->arr_type)) return NULL;
    return r->elems;
}

bool nx_gguf_get_int(const nx_gguf *g, const char *key, int64_t *out) {
    return nx_gguf_kv_int(g, nx_gguf_find_key(g, key), out);
}

bool nx_gguf_get_float(const nx_gguf *g, const char *key, double *out) {
    return nx_gguf_kv_float(g, nx_gguf_find_key(g, key), out);
}

bool nx_gguf_get_bool(const nx_gguf *g, const char *key, bool *out) {
    return nx_gguf_kv_bool(g, nx_gguf_find_key(g, key), out);
}

const char *nx_gguf_get_str(const nx_gguf *g, const char *key, uint64_t *len) {
    return nx_gguf_kv_str(g, nx_gguf_find_key(g, key), len);
}

int64_t nx_gguf_n_tensors(const nx_gguf *g) { return g->n_tensors; }

int64_t nx_gguf_find_tensor(const nx_gguf *g, const char *name) {
    return name ? nx_gguf_index_find(&g->tensor_ix, name, strlen(name)) : -1;
}

const nx_tensor *nx_gguf_tensor(const nx_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i].t : NULL;
}

uint64_t nx_gguf_tensor_offset(const nx_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? g->tensors[i].offset : 0;
}

int nx_gguf_tensor_split(const nx_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? g->tensors[i].split : -1;
}
