/*
 * safetensors.c — the safetensors reader (contract in safetensors.h).
 *
 * Open = read the 8-byte length and the JSON header only (pread), parse with cJSON, validate every
 * entry against the file size. Reads go through a fixed bounce buffer and convert on the fly, so
 * nothing larger than the caller's destination is ever held.
 */
#include "safetensors.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fp16.h"
#include "core/io.h"

#define ST_MAX_HEADER ((uint64_t)100 << 20)   /* the safetensors spec's own limit is 100 MB */
#define ST_BOUNCE (1u << 20)

typedef struct st_file {
    char       *path;
    int         fd;         /* -1 for a memory buffer */
    const unsigned char *mem;
    uint64_t    size;
    uint64_t    data_start; /* 8 + header length */
} st_file;

struct nx_safetensors {
    st_file      *files;
    int           n_files;
    nx_st_tensor *t;
    int64_t       n, cap;
    int64_t      *slots;      /* open-addressing name index: tensor index + 1, 0 = empty */
    uint64_t      n_slots;    /* power of two, > 2 n */
};

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Insert tensor i (its name not yet present); grows the table to keep it under half full. */
static bool index_put(nx_safetensors *st, int64_t i) {
    if ((uint64_t)(st->n + 1) * 2 > st->n_slots) {
        uint64_t ns = st->n_slots ? st->n_slots * 2 : 256;
        int64_t *nt = calloc(ns, sizeof *nt);
        if (!nt) return false;
        for (uint64_t k = 0; k < st->n_slots; k++)
            if (st->slots[k]) {
                uint64_t h = name_hash(st->t[st->slots[k] - 1].name) & (ns - 1);
                while (nt[h]) h = (h + 1) & (ns - 1);
                nt[h] = st->slots[k];
            }
        free(st->slots);
        st->slots = nt;
        st->n_slots = ns;
    }
    uint64_t h = name_hash(st->t[i].name) & (st->n_slots - 1);
    while (st->slots[h]) h = (h + 1) & (st->n_slots - 1);
    st->slots[h] = i + 1;
    return true;
}

static const struct { const char *name; size_t size; } DTYPES[NX_ST_DTYPE_COUNT] = {
    [NX_ST_F64] = {"F64", 8}, [NX_ST_F32] = {"F32", 4}, [NX_ST_F16] = {"F16", 2}, [NX_ST_BF16] = {"BF16", 2},
    [NX_ST_I64] = {"I64", 8}, [NX_ST_I32] = {"I32", 4}, [NX_ST_I16] = {"I16", 2}, [NX_ST_I8] = {"I8", 1},
    [NX_ST_U64] = {"U64", 8}, [NX_ST_U32] = {"U32", 4}, [NX_ST_U16] = {"U16", 2}, [NX_ST_U8] = {"U8", 1},
    [NX_ST_BOOL] = {"BOOL", 1}, [NX_ST_F8_E4M3] = {"F8_E4M3", 1}, [NX_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *nx_st_dtype_name(nx_st_dtype t) { return (unsigned)t < NX_ST_DTYPE_COUNT ? DTYPES[t].name : "?"; }
size_t nx_st_dtype_size(nx_st_dtype t) { return (unsigned)t < NX_ST_DTYPE_COUNT ? DTYPES[t].size : 0; }
bool nx_st_dtype_is_float(nx_st_dtype t) { return t == NX_ST_F64 || t == NX_ST_F32 || t == NX_ST_F16 || t == NX_ST_BF16; }

/* ===== Reading bytes ===== */

static nx_status file_read(const st_file *f, uint64_t off, void *dst, size_t n, nx_error *err) {
    if (off > f->size || n > f->size - off)
        return nx_fail(err, NX_ERR_FORMAT, "%s: read of %zu bytes at %llu is past the end (%llu bytes)", f->path, n,
                       (unsigned long long)off, (unsigned long long)f->size);
    if (f->fd < 0) {
        memcpy(dst, f->mem + off, n);
        return NX_OK;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, (char *)dst + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return nx_fail(err, NX_ERR_IO, "%s: read failed at byte %llu: %s", f->path,
                                   (unsigned long long)(off + done), r < 0 ? strerror(errno) : "unexpected end of file");
        done += (size_t)r;
    }
    return NX_OK;
}

/* ===== Header ===== */

static bool parse_dtype(const char *s, nx_st_dtype *out) {
    for (int i = 0; i < NX_ST_DTYPE_COUNT; i++)
        if (!strcmp(s, DTYPES[i].name)) { *out = (nx_st_dtype)i; return true; }
    return false;
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static bool json_u53(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < 9007199254740992.0) || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

static nx_status add_tensor(nx_safetensors *st, int file, const cJSON *e, nx_error *err) {
    const st_file *f = &st->files[file];
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return nx_fail(err, NX_ERR_FORMAT, "%s: entry '%s' is not an object", f->path, name);
    const char *ds = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "dtype"));
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    nx_st_tensor t = {0};
    if (!ds || !parse_dtype(ds, &t.dtype))
        return nx_fail(err, NX_ERR_FORMAT, "%s: tensor '%s' has no known dtype (got '%s')", f->path, name, ds ? ds : "none");
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > NX_ST_MAX_DIMS)
        return nx_fail(err, NX_ERR_FORMAT, "%s: tensor '%s' has no shape array of at most %d dimensions", f->path, name,
                       NX_ST_MAX_DIMS);
    uint64_t numel = 1;
    bool overflow = false;
    for (const cJSON *d = shape->child; d; d = d->next) {
        uint64_t v;
        if (!json_u53(d, &v)) return nx_fail(err, NX_ERR_FORMAT, "%s: tensor '%s' has a bad dimension", f->path, name);
        t.shape[t.n_dims++] = (int64_t)v;
        if (v && numel > UINT64_MAX / v) overflow = true;
        numel *= v;
    }
    uint64_t b, en;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_u53(cJSON_GetArrayItem(offs, 0), &b) ||
        !json_u53(cJSON_GetArrayItem(offs, 1), &en) || b > en)
        return nx_fail(err, NX_ERR_FORMAT, "%s: tensor '%s' has bad data_offsets", f->path, name);
    uint64_t data_size = f->size - f->data_start;
    if (en > data_size)
        return nx_fail(err, NX_ERR_FORMAT, "%s: tensor '%s' ends at data byte %llu, past the data section (%llu bytes)",
                       f->path, name, (unsigned long long)en, (unsigned long long)data_size);
    size_t es = DTYPES[t.dtype].size;
    if (overflow || numel > UINT64_MAX / es || numel * es != en - b)
        return nx_fail(err, NX_ERR_FORMAT, "%s: tensor '%s' holds %llu bytes, its shape and dtype need %s%llu", f->path,
                       name, (unsigned long long)(en - b), overflow ? "more than " : "",
                       (unsigned long long)(overflow ? UINT64_MAX : numel * es));
    if (nx_st_find(st, name) >= 0) return nx_fail(err, NX_ERR_FORMAT, "%s: tensor '%s' appears twice", f->path, name);
    t.numel = (int64_t)numel;
    t.offset = f->data_start + b;
    t.nbytes = en - b;
    t.file = file;
    if (st->n == st->cap) {
        int64_t nc = st->cap ? st->cap * 2 : 64;
        nx_st_tensor *nt = realloc(st->t, (size_t)nc * sizeof *nt);
        if (!nt) return nx_fail(err, NX_ERR_NOMEM, "out of memory reading %s", f->path);
        st->t = nt;
        st->cap = nc;
    }
    t.name = strdup(name);
    if (!t.name) return nx_fail(err, NX_ERR_NOMEM, "out of memory reading %s", f->path);
    st->t[st->n] = t;
    if (!index_put(st, st->n)) {
        free(t.name);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory reading %s", f->path);
    }
    st->n++;
    return NX_OK;
}

/* Parse the header of the file just appended to st->files. */
static nx_status parse_header(nx_safetensors *st, int file, nx_error *err) {
    st_file *f = &st->files[file];
    unsigned char lb[8];
    if (f->size < 8) return nx_fail(err, NX_ERR_FORMAT, "%s: %llu bytes is too short for a safetensors file", f->path,
                                    (unsigned long long)f->size);
    nx_status s = file_read(f, 0, lb, 8, err);
    if (s) return s;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | lb[i];
    if (n > f->size - 8 || n > ST_MAX_HEADER)
        return nx_fail(err, NX_ERR_FORMAT, "%s: header length %llu does not fit the file (%llu bytes)", f->path,
                       (unsigned long long)n, (unsigned long long)f->size);
    f->data_start = 8 + n;
    char *text = malloc((size_t)n + 1);
    if (!text) return nx_fail(err, NX_ERR_NOMEM, "out of memory reading the header of %s", f->path);
    if ((s = file_read(f, 8, text, (size_t)n, err))) { free(text); return s; }
    text[n] = '\0';
    cJSON *root = cJSON_ParseWithLength(text, (size_t)n);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return nx_fail(err, NX_ERR_FORMAT, "%s: the header is not a JSON object", f->path);
    }
    for (const cJSON *e = root->child; e && !s; e = e->next) {
        if (!e->string) { s = nx_fail(err, NX_ERR_FORMAT, "%s: header entry without a name", f->path); break; }
        if (!strcmp(e->string, "__metadata__")) continue;
        s = add_tensor(st, file, e, err);
    }
    cJSON_Delete(root);
    return s;
}

static nx_status add_file(nx_safetensors *st, const char *path, const void *mem, size_t mem_size, nx_error *err) {
    st_file *nf = realloc(st->files, (size_t)(st->n_files + 1) * sizeof *nf);
    if (!nf) return nx_fail(err, NX_ERR_NOMEM, "out of memory opening %s", path);
    st->files = nf;
    st_file *f = &st->files[st->n_files];
    *f = (st_file){.fd = -1};
    f->path = strdup(path);
    if (!f->path) return nx_fail(err, NX_ERR_NOMEM, "out of memory opening %s", path);
    st->n_files++;
    if (mem) {
        f->mem = mem;
        f->size = mem_size;
    } else {
        f->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (f->fd < 0) return nx_fail(err, NX_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        struct stat sb;
        if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode))
            return nx_fail(err, NX_ERR_IO, "%s is not a regular file", path);
        f->size = (uint64_t)sb.st_size;
    }
    return parse_header(st, st->n_files - 1, err);
}

void nx_st_close(nx_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_files; i++) {
        if (st->files[i].fd >= 0) close(st->files[i].fd);
        free(st->files[i].path);
    }
    for (int64_t i = 0; i < st->n; i++) free(st->t[i].name);
    free(st->files);
    free(st->t);
    free(st->slots);
    free(st);
}

nx_status nx_st_open_memory(const void *data, size_t size, nx_safetensors **out, nx_error *err) {
    *out = NULL;
    nx_safetensors *st = calloc(1, sizeof *st);
    if (!st) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    nx_status s = add_file(st, "<memory>", data ? data : "", size, err);
    if (s) { nx_st_close(st); return s; }
    *out = st;
    return NX_OK;
}

nx_status nx_st_open_file(const char *path, nx_safetensors **out, nx_error *err) {
    *out = NULL;
    nx_safetensors *st = calloc(1, sizeof *st);
    if (!st) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    nx_status s = add_file(st, path, NULL, 0, err);
    if (s) { nx_st_close(st); return s; }
    *out = st;
    return NX_OK;
}

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The index: open each shard once (in order of first mention), then check the weight map. */
static nx_status open_index(nx_safetensors *st, const char *dir, const char *index_path, nx_error *err) {
    char *text = NULL;
    size_t len = 0;
    nx_status s = nx_read_file(index_path, (size_t)256 << 20, &text, &len, err);
    if (s) return s;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm) || !wm->child) {
        cJSON_Delete(root);
        return nx_fail(err, NX_ERR_FORMAT, "%s: no weight_map object", index_path);
    }
    char path[4096];
    for (const cJSON *e = wm->child; e && !s; e = e->next) {
        const char *fn = cJSON_GetStringValue(e);
        if (!fn || !*fn || strchr(fn, '/') || !strcmp(fn, "..")) {
            s = nx_fail(err, NX_ERR_FORMAT, "%s: tensor '%s' has a bad file name", index_path, e->string);
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, fn);
        int k = 0;
        while (k < st->n_files && strcmp(st->files[k].path, path)) k++;
        if (k < st->n_files) continue;
        if (!is_file(path)) {
            s = nx_fail(err, NX_ERR_IO, "missing shard %s (named by %s)", path, index_path);
            break;
        }
        s = add_file(st, path, NULL, 0, err);
    }
    for (const cJSON *e = wm->child; e && !s; e = e->next) {
        snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(e));
        int64_t i = nx_st_find(st, e->string);
        if (i < 0 || strcmp(st->files[st->t[i].file].path, path))
            s = nx_fail(err, NX_ERR_FORMAT, "%s names tensor '%s' in %s, which does not hold it", index_path, e->string, path);
    }
    if (!s) {
        int64_t n_map = cJSON_GetArraySize(wm);
        if (n_map != st->n)
            s = nx_fail(err, NX_ERR_FORMAT, "%s lists %lld tensors, the shards hold %lld", index_path, (long long)n_map,
                        (long long)st->n);
    }
    cJSON_Delete(root);
    return s;
}

nx_status nx_st_open_dir(const char *dir, nx_safetensors **out, nx_error *err) {
    *out = NULL;
    char path[4096];
    nx_safetensors *st = calloc(1, sizeof *st);
    if (!st) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    nx_status s;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (is_file(path)) {
        s = open_index(st, dir, path, err);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (is_file(path)) s = add_file(st, path, NULL, 0, err);
        else s = nx_fail(err, NX_ERR_IO, "%s has neither model.safetensors nor model.safetensors.index.json", dir);
    }
    if (s) { nx_st_close(st); return s; }
    *out = st;
    return NX_OK;
}

/* ===== Accessors ===== */

int64_t nx_st_n_tensors(const nx_safetensors *st) { return st->n; }
const nx_st_tensor *nx_st_tensor_at(const nx_safetensors *st, int64_t i) { return i >= 0 && i < st->n ? &st->t[i] : NULL; }
int nx_st_n_files(const nx_safetensors *st) { return st->n_files; }
const char *nx_st_file_path(const nx_safetensors *st, int file) {
    return file >= 0 && file < st->n_files ? st->files[file].path : NULL;
}

int64_t nx_st_find(const nx_safetensors *st, const char *name) {
    if (!st->n_slots) return -1;
    for (uint64_t h = name_hash(name) & (st->n_slots - 1); st->slots[h]; h = (h + 1) & (st->n_slots - 1))
        if (!strcmp(st->t[st->slots[h] - 1].name, name)) return st->slots[h] - 1;
    return -1;
}

uint64_t nx_st_total_bytes(const nx_safetensors *st) {
    uint64_t n = 0;
    for (int i = 0; i < st->n_files; i++) n += st->files[i].size - st->files[i].data_start;
    return n;
}

/* ===== Conversion ===== */

static double elem(nx_st_dtype t, const unsigned char *p) {
    switch (t) {
    case NX_ST_F64: { double d; memcpy(&d, p, 8); return d; }
    case NX_ST_F32: { float f; memcpy(&f, p, 4); return f; }
    case NX_ST_F16: { uint16_t h; memcpy(&h, p, 2); return nx_half_to_f32(h); }
    default: { uint16_t h; memcpy(&h, p, 2); return nx_bf16_to_f32(h); }
    }
}

static nx_status read_conv(const nx_safetensors *st, int64_t i, int64_t first, int64_t count, void *dst, bool dbl,
                           nx_error *err) {
    const nx_st_tensor *t = nx_st_tensor_at(st, i);
    if (!t) return nx_fail(err, NX_ERR_INVALID_ARG, "no tensor %lld", (long long)i);
    if (!nx_st_dtype_is_float(t->dtype))
        return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor '%s' has dtype %s, which does not convert to float", t->name,
                       nx_st_dtype_name(t->dtype));
    if (first < 0 || count < 0 || first > t->numel || count > t->numel - first)
        return nx_fail(err, NX_ERR_INVALID_ARG, "tensor '%s': range [%lld, +%lld) outside its %lld values", t->name,
                       (long long)first, (long long)count, (long long)t->numel);
    size_t es = DTYPES[t->dtype].size;
    size_t per = ST_BOUNCE / es;
    unsigned char *buf = malloc(ST_BOUNCE);
    if (!buf) return nx_fail(err, NX_ERR_NOMEM, "out of memory reading '%s'", t->name);
    nx_status s = NX_OK;
    for (int64_t j = 0; j < count && !s; j += (int64_t)per) {
        size_t n = (size_t)(count - j) < per ? (size_t)(count - j) : per;
        s = file_read(&st->files[t->file], t->offset + (uint64_t)(first + j) * es, buf, n * es, err);
        if (s) break;
        if (dbl) {
            double *d = (double *)dst + j;
            for (size_t k = 0; k < n; k++) d[k] = elem(t->dtype, buf + k * es);
        } else if (t->dtype == NX_ST_F32) {
            memcpy((float *)dst + j, buf, n * 4);
        } else {
            float *d = (float *)dst + j;
            for (size_t k = 0; k < n; k++) d[k] = (float)elem(t->dtype, buf + k * es);
        }
    }
    free(buf);
    return s;
}

nx_status nx_st_read_f32(const nx_safetensors *st, int64_t i, float *dst, nx_error *err) {
    const nx_st_tensor *t = nx_st_tensor_at(st, i);
    return read_conv(st, i, 0, t ? t->numel : 0, dst, false, err);
}

nx_status nx_st_read_f32_range(const nx_safetensors *st, int64_t i, int64_t first, int64_t count, float *dst,
                               nx_error *err) {
    return read_conv(st, i, first, count, dst, false, err);
}

nx_status nx_st_read_f64(const nx_safetensors *st, int64_t i, double *dst, nx_error *err) {
    const nx_st_tensor *t = nx_st_tensor_at(st, i);
    return read_conv(st, i, 0, t ? t->numel : 0, dst, true, err);
}

/* Integer tensors (a token permutation stored as I64): each value must fit int32. */
nx_status nx_st_read_i32(const nx_safetensors *st, int64_t i, int32_t *dst, nx_error *err) {
    const nx_st_tensor *t = nx_st_tensor_at(st, i);
    if (!t) return nx_fail(err, NX_ERR_INVALID_ARG, "no tensor %lld", (long long)i);
    nx_st_dtype d = t->dtype;
    if (d != NX_ST_I64 && d != NX_ST_I32 && d != NX_ST_U32 && d != NX_ST_I16 && d != NX_ST_U16 && d != NX_ST_I8 &&
        d != NX_ST_U8 && d != NX_ST_U64)
        return nx_fail(err, NX_ERR_UNSUPPORTED, "tensor '%s' has dtype %s, not an integer type", t->name,
                       nx_st_dtype_name(d));
    size_t es = DTYPES[d].size, per = ST_BOUNCE / es;
    unsigned char *buf = malloc(ST_BOUNCE);
    if (!buf) return nx_fail(err, NX_ERR_NOMEM, "out of memory reading '%s'", t->name);
    nx_status s = NX_OK;
    for (int64_t j = 0; j < t->numel && !s; j += (int64_t)per) {
        size_t n = (size_t)(t->numel - j) < per ? (size_t)(t->numel - j) : per;
        s = file_read(&st->files[t->file], t->offset + (uint64_t)j * es, buf, n * es, err);
        for (size_t k = 0; k < n && !s; k++) {
            const unsigned char *p = buf + k * es;
            int64_t v;
            switch (d) {
            case NX_ST_I64: { int64_t x; memcpy(&x, p, 8); v = x; break; }
            case NX_ST_U64: { uint64_t x; memcpy(&x, p, 8); v = x > INT64_MAX ? -1 : (int64_t)x; break; }
            case NX_ST_I32: { int32_t x; memcpy(&x, p, 4); v = x; break; }
            case NX_ST_U32: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
            case NX_ST_I16: { int16_t x; memcpy(&x, p, 2); v = x; break; }
            case NX_ST_U16: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
            case NX_ST_I8: v = (int8_t)p[0]; break;
            default: v = p[0]; break;
            }
            if (v < INT32_MIN || v > INT32_MAX)
                s = nx_fail(err, NX_ERR_FORMAT, "tensor '%s': value %lld at %lld does not fit int32", t->name,
                            (long long)v, (long long)(j + (int64_t)k));
            else dst[j + (int64_t)k] = (int32_t)v;
        }
    }
    free(buf);
    return s;
}
