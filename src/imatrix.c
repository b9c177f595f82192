/*
 * imatrix.c — importance matrices in memory and in llama.cpp's two file formats (imatrix.h).
 *
 * Sums are kept in double while collecting (a long calibration text adds millions of squares
 * per column) and written as F32, as llama.cpp writes them. Entries are few (one per weight):
 * a linear search by name is enough.
 */
#include "imatrix.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gguf.h"

struct nx_imatrix {
    nx_imatrix_entry *e;
    int64_t n, cap;
    char **datasets;
    int64_t n_datasets;
    int chunk_count, chunk_size;
};

nx_imatrix *nx_imatrix_create(void) { return calloc(1, sizeof(nx_imatrix)); }

void nx_imatrix_free(nx_imatrix *im) {
    if (!im) return;
    for (int64_t i = 0; i < im->n; i++) {
        free(im->e[i].name);
        free(im->e[i].sum2);
        free(im->e[i].counts);
    }
    for (int64_t i = 0; i < im->n_datasets; i++) free(im->datasets[i]);
    free(im->datasets);
    free(im->e);
    free(im);
}

int64_t nx_imatrix_n_entries(const nx_imatrix *im) { return im ? im->n : 0; }
const nx_imatrix_entry *nx_imatrix_entry_at(const nx_imatrix *im, int64_t i) {
    return im && i >= 0 && i < im->n ? &im->e[i] : NULL;
}

const nx_imatrix_entry *nx_imatrix_find(const nx_imatrix *im, const char *name) {
    if (!im || !name) return NULL;
    for (int64_t i = 0; i < im->n; i++)
        if (!strcmp(im->e[i].name, name)) return &im->e[i];
    return NULL;
}

bool nx_imatrix_values(const nx_imatrix_entry *e, int64_t m, float *out) {
    if (!e || m < 0 || m >= e->n_mat) return false;
    const double *s = e->sum2 + (size_t)m * (size_t)e->n_per_mat;
    const int64_t c = e->counts[m];
    for (int64_t j = 0; j < e->n_per_mat; j++) out[j] = c > 0 ? (float)(s[j] / (double)c) : 1.0f;
    return true;
}

/* The entry `name` (created with this shape), or NULL with err set. */
static nx_imatrix_entry *get_entry(nx_imatrix *im, const char *name, int64_t n_per_mat, int64_t n_mat, nx_error *err) {
    for (int64_t i = 0; i < im->n; i++) {
        nx_imatrix_entry *e = &im->e[i];
        if (strcmp(e->name, name)) continue;
        if (e->n_per_mat != n_per_mat || e->n_mat != n_mat) {
            nx_fail(err, NX_ERR_INVALID_ARG, "imatrix: '%s' is %lld x %lld, not %lld x %lld", name,
                    (long long)e->n_per_mat, (long long)e->n_mat, (long long)n_per_mat, (long long)n_mat);
            return NULL;
        }
        return e;
    }
    if (n_per_mat <= 0 || n_mat <= 0 || n_per_mat > ((int64_t)1 << 30) / n_mat) {
        nx_fail(err, NX_ERR_INVALID_ARG, "imatrix: '%s': bad shape %lld x %lld", name, (long long)n_per_mat,
                (long long)n_mat);
        return NULL;
    }
    if (im->n == im->cap) {
        int64_t cap = im->cap ? 2 * im->cap : 64;
        nx_imatrix_entry *ne = realloc(im->e, (size_t)cap * sizeof *ne);
        if (!ne) { nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory"); return NULL; }
        im->e = ne;
        im->cap = cap;
    }
    nx_imatrix_entry e = {.name = strdup(name), .n_per_mat = n_per_mat, .n_mat = n_mat,
                          .sum2 = calloc((size_t)(n_per_mat * n_mat), sizeof(double)),
                          .counts = calloc((size_t)n_mat, sizeof(int64_t))};
    if (!e.name || !e.sum2 || !e.counts) {
        free(e.name); free(e.sum2); free(e.counts);
        nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory");
        return NULL;
    }
    im->e[im->n] = e;
    return &im->e[im->n++];
}

nx_status nx_imatrix_add(nx_imatrix *im, const char *name, int64_t n_per_mat, int64_t n_mat, int64_t m,
                         const float *x, int64_t n_rows, int64_t ldx, nx_error *err) {
    if (!im || !name || m < 0 || m >= n_mat || n_rows < 0 || (n_rows > 0 && (!x || ldx < n_per_mat)))
        return nx_fail(err, NX_ERR_INVALID_ARG, "imatrix: bad accumulation arguments");
    nx_imatrix_entry *e = get_entry(im, name, n_per_mat, n_mat, err);
    if (!e) return err ? err->code : NX_ERR_INVALID_ARG;
    double *s = e->sum2 + (size_t)m * (size_t)n_per_mat;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * (size_t)ldx;
        for (int64_t j = 0; j < n_per_mat; j++) s[j] += (double)xr[j] * xr[j];
    }
    for (int64_t j = 0; j < n_per_mat; j++)
        if (!isfinite(s[j])) return nx_fail(err, NX_ERR_RANGE, "imatrix: non-finite activation sum in %s", name);
    e->counts[m] += n_rows;
    return NX_OK;
}

nx_status nx_imatrix_merge_entry(nx_imatrix *im, const nx_imatrix_entry *e, nx_error *err) {
    if (!im || !e) return nx_fail(err, NX_ERR_INVALID_ARG, "imatrix: nothing to merge");
    nx_imatrix_entry *d = get_entry(im, e->name, e->n_per_mat, e->n_mat, err);
    if (!d) return err ? err->code : NX_ERR_INVALID_ARG;
    for (int64_t j = 0; j < e->n_per_mat * e->n_mat; j++) d->sum2[j] += e->sum2[j];
    for (int64_t m = 0; m < e->n_mat; m++) d->counts[m] += e->counts[m];
    return NX_OK;
}

nx_status nx_imatrix_add_dataset(nx_imatrix *im, const char *name, nx_error *err) {
    char **nd = realloc(im->datasets, (size_t)(im->n_datasets + 1) * sizeof *nd);
    if (!nd) return nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory");
    im->datasets = nd;
    if (!(nd[im->n_datasets] = strdup(name ? name : ""))) return nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory");
    im->n_datasets++;
    return NX_OK;
}

int64_t nx_imatrix_n_datasets(const nx_imatrix *im) { return im ? im->n_datasets : 0; }
const char *nx_imatrix_dataset(const nx_imatrix *im, int64_t i) {
    return im && i >= 0 && i < im->n_datasets ? im->datasets[i] : NULL;
}
void nx_imatrix_set_chunks(nx_imatrix *im, int chunk_count, int chunk_size) {
    im->chunk_count = chunk_count;
    im->chunk_size = chunk_size;
}
int nx_imatrix_chunk_count(const nx_imatrix *im) { return im ? im->chunk_count : 0; }
int nx_imatrix_chunk_size(const nx_imatrix *im) { return im ? im->chunk_size : 0; }

/* ===== GGUF format ===== */

static bool has_suffix(const char *s, const char *suf, size_t *stem) {
    size_t n = strlen(s), k = strlen(suf);
    if (n <= k || strcmp(s + n - k, suf)) return false;
    *stem = n - k;
    return true;
}

static nx_status load_gguf(const nx_gguf *g, nx_imatrix *im, nx_error *err) {
    const int64_t nt = nx_gguf_n_tensors(g);
    int64_t used = 0;
    for (int64_t i = 0; i < nt; i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        size_t stem;
        if (!has_suffix(t->name, ".in_sum2", &stem)) continue;
        char name[1024];
        if (stem >= sizeof name) return nx_fail(err, NX_ERR_FORMAT, "imatrix: tensor name too long");
        memcpy(name, t->name, stem);
        name[stem] = 0;
        char cname[1100];
        snprintf(cname, sizeof cname, "%s.counts", name);
        const int64_t ci = nx_gguf_find_tensor(g, cname);
        if (ci < 0) return nx_fail(err, NX_ERR_FORMAT, "imatrix: %s has no %s", t->name, cname);
        const nx_tensor *c = nx_gguf_tensor(g, ci);
        if (t->type != NX_TYPE_F32 || c->type != NX_TYPE_F32 || t->n_dims > 2 || c->n_dims > 2 || c->ne[0] != 1 ||
            c->ne[1] != t->ne[1] || t->ne[0] < 1)
            return nx_fail(err, NX_ERR_FORMAT, "imatrix: %s / %s: expected F32 {n, m} and {1, m}", t->name, cname);
        const int64_t n = t->ne[0], m = t->ne[1];
        nx_imatrix_entry *e = get_entry(im, name, n, m, err);
        if (!e) return err ? err->code : NX_ERR_FORMAT;
        for (int64_t k = 0; k < m; k++) {
            float cnt;
            memcpy(&cnt, (const char *)c->data + 4 * k, 4);
            if (!isfinite(cnt) || cnt < 0 || cnt > 9e15f)
                return nx_fail(err, NX_ERR_FORMAT, "imatrix: %s: bad count %g", cname, (double)cnt);
            e->counts[k] += (int64_t)llround(cnt);
        }
        for (int64_t j = 0; j < n * m; j++) {
            float v;
            memcpy(&v, (const char *)t->data + 4 * j, 4);
            if (!isfinite(v) || v < 0) return nx_fail(err, NX_ERR_FORMAT, "imatrix: %s: bad value %g", t->name, (double)v);
            e->sum2[j] += v;
        }
        used++;
    }
    if (!used) return nx_fail(err, NX_ERR_FORMAT, "imatrix: no <name>.in_sum2 tensors");
    const int64_t dk = nx_gguf_find_key(g, "imatrix.datasets");
    if (dk >= 0 && nx_gguf_arr_type(g, dk) == NX_GGUF_STRING) {
        for (uint64_t j = 0; j < nx_gguf_arr_n(g, dk); j++) {
            uint64_t len;
            const char *s = nx_gguf_arr_str(g, dk, j, &len);
            char buf[1024];
            snprintf(buf, sizeof buf, "%.*s", (int)(len < 1000 ? len : 1000), s ? s : "");
            nx_status st = nx_imatrix_add_dataset(im, buf, err);
            if (st != NX_OK) return st;
        }
    }
    int64_t v;
    if (nx_gguf_get_int(g, "imatrix.chunk_count", &v) && v >= 0 && v < (1 << 30)) im->chunk_count = (int)v;
    if (nx_gguf_get_int(g, "imatrix.chunk_size", &v) && v >= 0 && v < (1 << 30)) im->chunk_size = (int)v;
    return NX_OK;
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(const nx_imatrix_entry *const *)a)->name, (*(const nx_imatrix_entry *const *)b)->name);
}

/* Entries in name order (llama.cpp writes them sorted); caller frees. */
static const nx_imatrix_entry **sorted_entries(const nx_imatrix *im) {
    const nx_imatrix_entry **s = malloc((size_t)(im->n ? im->n : 1) * sizeof *s);
    if (!s) return NULL;
    for (int64_t i = 0; i < im->n; i++) s[i] = &im->e[i];
    qsort(s, (size_t)im->n, sizeof *s, cmp_entry_name);
    return s;
}

static nx_status save_gguf(const nx_imatrix *im, const char *path, nx_error *err) {
    nx_gguf_writer *w = nx_gguf_writer_create();
    const nx_imatrix_entry **s = sorted_entries(im);
    float **bufs = calloc((size_t)(2 * im->n + 1), sizeof *bufs);
    nx_status st = NX_OK;
    if (!w || !s || !bufs) { st = nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory"); goto done; }
    nx_gguf_set_str(w, "general.type", "imatrix");
    nx_gguf_set_arr_str(w, "imatrix.datasets", (const char *const *)im->datasets, NULL, (uint64_t)im->n_datasets);
    nx_gguf_set_u32(w, "imatrix.chunk_count", (uint32_t)im->chunk_count);
    nx_gguf_set_u32(w, "imatrix.chunk_size", (uint32_t)im->chunk_size);
    for (int64_t i = 0; i < im->n; i++) {
        const nx_imatrix_entry *e = s[i];
        float *v = bufs[2 * i] = malloc((size_t)(e->n_per_mat * e->n_mat) * sizeof(float));
        float *c = bufs[2 * i + 1] = malloc((size_t)e->n_mat * sizeof(float));
        if (!v || !c) { st = nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory"); goto done; }
        for (int64_t j = 0; j < e->n_per_mat * e->n_mat; j++) {
            if (e->sum2[j] > FLT_MAX) { st = nx_fail(err, NX_ERR_RANGE, "imatrix: %s: a sum is too large for F32", e->name); goto done; }
            v[j] = (float)e->sum2[j];
        }
        for (int64_t j = 0; j < e->n_mat; j++) c[j] = (float)e->counts[j];
        char name[1100];
        const int64_t ne_v[2] = {e->n_per_mat, e->n_mat}, ne_c[2] = {1, e->n_mat};
        snprintf(name, sizeof name, "%s.in_sum2", e->name);
        nx_gguf_add_tensor(w, name, NX_TYPE_F32, 2, ne_v, v);
        snprintf(name, sizeof name, "%s.counts", e->name);
        nx_gguf_add_tensor(w, name, NX_TYPE_F32, 2, ne_c, c);
    }
    st = nx_gguf_writer_write(w, path, err);
done:
    if (bufs)
        for (int64_t i = 0; i < 2 * im->n; i++) free(bufs[i]);
    free(bufs);
    free(s);
    nx_gguf_writer_free(w);
    return st;
}

/* ===== Legacy .dat format ===== */

typedef struct rd {
    const uint8_t *p;
    size_t n, off;
} rd;

static bool rd_i32(rd *r, int32_t *v) {
    if (r->n - r->off < 4) return false;
    memcpy(v, r->p + r->off, 4);
    r->off += 4;
    return true;
}

static nx_status load_legacy(const uint8_t *p, size_t size, int chunk_size, nx_imatrix *im, nx_error *err) {
    rd r = {p, size, 0};
    int32_t n_entries;
    if (!rd_i32(&r, &n_entries) || n_entries < 1)
        return nx_fail(err, NX_ERR_FORMAT, "imatrix: legacy file: no entries");
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        if (!rd_i32(&r, &len) || len < 1 || len > 1000 || r.n - r.off < (size_t)len)
            return nx_fail(err, NX_ERR_FORMAT, "imatrix: legacy entry %d: bad name at byte %zu", i, r.off);
        char name[1001];
        memcpy(name, r.p + r.off, (size_t)len);
        name[len] = 0;
        r.off += (size_t)len;
        if (memchr(name, 0, (size_t)len)) return nx_fail(err, NX_ERR_FORMAT, "imatrix: legacy entry %d: NUL in name", i);
        if (!rd_i32(&r, &ncall) || ncall < 0 || !rd_i32(&r, &nval) || nval < 1 || (r.n - r.off) / 4 < (size_t)nval)
            return nx_fail(err, NX_ERR_FORMAT, "imatrix: legacy entry '%s': bad counts at byte %zu", name, r.off);
        /* the legacy format folds experts into one row of values: one matrix */
        nx_imatrix_entry *e = get_entry(im, name, nval, 1, err);
        if (!e) return err ? err->code : NX_ERR_FORMAT;
        const int64_t calls = ncall > 0 ? ncall : 1;   /* ncall 0: the values are taken as they are */
        for (int32_t j = 0; j < nval; j++) {
            float v;
            memcpy(&v, r.p + r.off + 4 * (size_t)j, 4);
            /* the sums must stay F32 numbers, as in llama.cpp's own state */
            if (!isfinite(v) || v < 0 || (double)v * chunk_size > FLT_MAX)
                return nx_fail(err, NX_ERR_FORMAT, "imatrix: legacy entry '%s': bad value %g", name, (double)v);
            e->sum2[j] += (double)v * chunk_size;
        }
        r.off += 4 * (size_t)nval;
        e->counts[0] += calls * chunk_size;
    }
    int32_t last = 0, dlen = 0;
    if (rd_i32(&r, &last) && last >= 0) im->chunk_count = last;
    im->chunk_size = chunk_size;
    if (rd_i32(&r, &dlen) && dlen > 0 && dlen <= 4096 && r.n - r.off >= (size_t)dlen) {
        char ds[4097];
        memcpy(ds, r.p + r.off, (size_t)dlen);
        ds[dlen] = 0;
        return nx_imatrix_add_dataset(im, ds, err);
    }
    return NX_OK;
}

static nx_status save_legacy(const nx_imatrix *im, const char *path, nx_error *err) {
    const nx_imatrix_entry **s = sorted_entries(im);
    if (!s) return nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory");
    FILE *f = fopen(path, "wb");
    if (!f) { free(s); return nx_fail(err, NX_ERR_IO, "imatrix: cannot create %s", path); }
    const int64_t cs = im->chunk_size > 0 ? im->chunk_size : 512;
    bool ok = true;
    int32_t n = 0;
    for (int64_t i = 0; i < im->n; i++) {
        bool any = false;
        for (int64_t m = 0; m < s[i]->n_mat; m++) any |= s[i]->counts[m] > 0;
        n += any;   /* entries without data are skipped, as llama.cpp does */
    }
    ok &= fwrite(&n, 4, 1, f) == 1;
    for (int64_t i = 0; i < im->n && ok; i++) {
        const nx_imatrix_entry *e = s[i];
        int64_t maxc = 0;
        for (int64_t m = 0; m < e->n_mat; m++) maxc = e->counts[m] > maxc ? e->counts[m] : maxc;
        if (!maxc) continue;
        const int32_t len = (int32_t)strlen(e->name), ncall = (int32_t)((maxc + cs - 1) / cs);
        const int32_t nval = (int32_t)(e->n_per_mat * e->n_mat);
        ok &= fwrite(&len, 4, 1, f) == 1 && fwrite(e->name, 1, (size_t)len, f) == (size_t)len;
        ok &= fwrite(&ncall, 4, 1, f) == 1 && fwrite(&nval, 4, 1, f) == 1;
        for (int64_t m = 0; m < e->n_mat && ok; m++)
            for (int64_t j = 0; j < e->n_per_mat && ok; j++) {
                const int64_t c = e->counts[m];
                /* a matrix without data is stored as 1 (llama.cpp's choice for partial data) */
                const float v = c > 0 ? (float)(e->sum2[m * e->n_per_mat + j] / (double)c) * (float)ncall : (float)ncall;
                ok &= fwrite(&v, 4, 1, f) == 1;
            }
    }
    const int32_t last = im->chunk_count;
    const char *ds = im->n_datasets ? im->datasets[im->n_datasets - 1] : "";
    const int32_t dlen = (int32_t)strlen(ds);
    ok &= fwrite(&last, 4, 1, f) == 1 && fwrite(&dlen, 4, 1, f) == 1 && fwrite(ds, 1, (size_t)dlen, f) == (size_t)dlen;
    ok &= fclose(f) == 0;
    free(s);
    return ok ? NX_OK : nx_fail(err, NX_ERR_IO, "imatrix: write error on %s", path);
}

/* ===== Entry points ===== */

nx_status nx_imatrix_load_memory(const void *data, size_t size, int chunk_size, nx_imatrix **out, nx_error *err) {
    *out = NULL;
    if (chunk_size <= 0) return nx_fail(err, NX_ERR_INVALID_ARG, "imatrix: chunk size must be > 0");
    nx_imatrix *im = nx_imatrix_create();
    if (!im) return nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory");
    nx_status st;
    if (size >= 4 && !memcmp(data, "GGUF", 4)) {
        nx_gguf *g = NULL;
        st = nx_gguf_open_memory(data, size, &g, err);
        if (st == NX_OK) st = load_gguf(g, im, err);
        nx_gguf_close(g);
    } else {
        st = load_legacy(data, size, chunk_size, im, err);
    }
    if (st != NX_OK) {
        nx_imatrix_free(im);
        return st;
    }
    *out = im;
    return NX_OK;
}

nx_status nx_imatrix_load(const char *path, int chunk_size, nx_imatrix **out, nx_error *err) {
    *out = NULL;
    nx_gguf *g = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return nx_fail(err, NX_ERR_IO, "imatrix: cannot open %s", path);
    char magic[4] = {0};
    const bool is_gguf = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    fclose(f);
    if (is_gguf) {
        /* mapped: an imatrix of a large model is hundreds of MB */
        nx_status st = nx_gguf_open_part(path, &g, err);
        if (st != NX_OK) return st;
        nx_imatrix *im = nx_imatrix_create();
        if (!im) { nx_gguf_close(g); return nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory"); }
        st = load_gguf(g, im, err);
        nx_gguf_close(g);
        if (st != NX_OK) { nx_imatrix_free(im); return nx_error_prefix(err, "%s", path); }
        *out = im;
        return NX_OK;
    }
    f = fopen(path, "rb");
    if (!f) return nx_fail(err, NX_ERR_IO, "imatrix: cannot open %s", path);
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); return nx_fail(err, NX_ERR_NOMEM, "imatrix: out of memory"); }
            buf = nb;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    fclose(f);
    nx_status st = nx_imatrix_load_memory(buf, n, chunk_size, out, err);
    free(buf);
    return st == NX_OK ? st : nx_error_prefix(err, "%s", path);
}

nx_status nx_imatrix_save(const nx_imatrix *im, const char *path, bool legacy, nx_error *err) {
    if (!im || !path) return nx_fail(err, NX_ERR_INVALID_ARG, "imatrix: nothing to save");
    return legacy ? save_legacy(im, path, err) : save_gguf(im, path, err);
}
