/*
 * test_gguf.c — GGUF reader and writer: round trips of every value type and several tensor
 * types, split models, a malformed-file corpus (each case built by corrupting a valid writer
 * output and expected to fail with NX_ERR_FORMAT and a specific message), every byte prefix,
 * random corruption, the golden files, and the gguf-info command.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/io.h"
#include "gguf.h"
#include "test.h"

/* ===== Helpers ===== */

static const uint64_t U64_BIG = 0x8000000000000005ull;
static const int64_t I64_NEG = -(INT64_C(1) << 62);

typedef struct sample_data {
    float    a[12];
    uint8_t  b[136];
    uint16_t c[8];
    uint8_t  d[288];
    int32_t  f[5];
} sample_data;

static void fill_sample(sample_data *s) {
    for (int i = 0; i < 12; i++) s->a[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 136; i++) s->b[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 8; i++) s->c[i] = (uint16_t)(0x3c00 + i);
    for (int i = 0; i < 288; i++) s->d[i] = (uint8_t)(i * 13 + 5);
    for (int i = 0; i < 5; i++) s->f[i] = -i * 1000;
}

/* A writer holding every value type and a few tensors; data borrowed from s. */
static nx_gguf_writer *make_sample_writer(const sample_data *s, uint32_t alignment) {
    nx_gguf_writer *w = nx_gguf_writer_create();
    if (alignment != 32) nx_gguf_writer_set_alignment(w, alignment);
    nx_gguf_set_str(w, "general.architecture", "test");
    uint8_t u8 = 200; int8_t i8 = -5; uint16_t u16 = 60000; int16_t i16 = -30000;
    double f64 = 3.25;
    nx_gguf_set_scalar(w, "k.u8", NX_GGUF_U8, &u8);
    nx_gguf_set_scalar(w, "k.i8", NX_GGUF_I8, &i8);
    nx_gguf_set_scalar(w, "k.u16", NX_GGUF_U16, &u16);
    nx_gguf_set_scalar(w, "k.i16", NX_GGUF_I16, &i16);
    nx_gguf_set_u32(w, "k.u32", 4000000000u);
    nx_gguf_set_i32(w, "k.i32", -2000000000);
    nx_gguf_set_f32(w, "k.f32", 1.5f);
    nx_gguf_set_bool(w, "k.bool", true);
    nx_gguf_set_str(w, "k.str", "h\xc3\xa9llo\n");
    nx_gguf_set_u64(w, "k.u64", U64_BIG);
    nx_gguf_set_scalar(w, "k.i64", NX_GGUF_I64, &I64_NEG);
    nx_gguf_set_scalar(w, "k.f64", NX_GGUF_F64, &f64);
    const uint8_t au8[3] = {1, 2, 3};
    const int16_t ai16[2] = {-1, 2};
    const uint32_t au32[4] = {7, 8, 9, 4000000000u};
    const float af32[2] = {0.5f, -2.0f};
    const double af64[2] = {1e300, -0.125};
    const uint8_t abool[3] = {1, 0, 1};
    const int64_t ai64[2] = {INT64_MIN, 42};
    nx_gguf_set_arr(w, "a.u8", NX_GGUF_U8, au8, 3);
    nx_gguf_set_arr(w, "a.i16", NX_GGUF_I16, ai16, 2);
    nx_gguf_set_arr(w, "a.u32", NX_GGUF_U32, au32, 4);
    nx_gguf_set_arr(w, "a.f32", NX_GGUF_F32, af32, 2);
    nx_gguf_set_arr(w, "a.f64", NX_GGUF_F64, af64, 2);
    nx_gguf_set_arr(w, "a.bool", NX_GGUF_BOOL, abool, 3);
    nx_gguf_set_arr(w, "a.i64", NX_GGUF_I64, ai64, 2);
    const char *strs[3] = {"x", "", "with\0nul"};
    const uint64_t lens[3] = {1, 0, 8};
    nx_gguf_set_arr_str(w, "a.str", strs, lens, 3);
    nx_gguf_set_arr(w, "a.empty", NX_GGUF_I32, NULL, 0);
    nx_gguf_set_u32(w, "dup.x1", 1);
    nx_gguf_set_u32(w, "dup.x2", 2);
    nx_gguf_add_tensor(w, "tA.weight", NX_TYPE_F32, 2, (int64_t[]){4, 3}, s->a);
    nx_gguf_add_tensor(w, "tB.weight", NX_TYPE_Q8_0, 2, (int64_t[]){64, 2}, s->b);
    nx_gguf_add_tensor(w, "tC.weight", NX_TYPE_F16, 1, (int64_t[]){8}, s->c);
    nx_gguf_add_tensor(w, "tD.weight", NX_TYPE_Q4_K, 3, (int64_t[]){256, 1, 2}, s->d);
    nx_gguf_add_tensor(w, "tE.empty", NX_TYPE_F32, 2, (int64_t[]){0, 4}, NULL);
    nx_gguf_add_tensor(w, "tF.weight", NX_TYPE_I32, 1, (int64_t[]){5}, s->f);
    return w;
}

static uint8_t *make_sample(uint32_t alignment, size_t *size) {
    static sample_data s;
    fill_sample(&s);
    nx_gguf_writer *w = make_sample_writer(&s, alignment);
    void *buf = NULL;
    nx_error err = {0};
    nx_status st = nx_gguf_writer_write_mem(w, &buf, size, &err);
    nx_gguf_writer_free(w);
    if (st) { fprintf(stderr, "write_mem: %s\n", err.msg); return NULL; }
    return buf;
}

static size_t find_bytes(const uint8_t *buf, size_t size, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= size; i++)
        if (!memcmp(buf + i, s, n)) return i;
    fprintf(stderr, "  (pattern '%s' not found)\n", s);
    abort();
}

/* Offset just after key `k` (its value type field). */
static size_t key_end(const uint8_t *buf, size_t size, const char *k) { return find_bytes(buf, size, k) + strlen(k); }

typedef struct tinfo { size_t name_len_at, ndims_at, ne_at, type_at, off_at; } tinfo;

static tinfo tensor_info(const uint8_t *buf, size_t size, const char *name) {
    tinfo t;
    size_t at = find_bytes(buf, size, name);
    t.name_len_at = at - 8;
    t.ndims_at = at + strlen(name);
    uint32_t nd;
    memcpy(&nd, buf + t.ndims_at, 4);
    t.ne_at = t.ndims_at + 4;
    t.type_at = t.ne_at + 8 * nd;
    t.off_at = t.type_at + 4;
    return t;
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Touch every accessor of an open file (catches out-of-bounds reads under ASan). */
static uint64_t touch_all(const nx_gguf *g) {
    uint64_t acc = nx_gguf_version(g) + nx_gguf_alignment(g) + (uint64_t)nx_gguf_n_splits(g) + nx_gguf_file_size(g);
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) {
        const char *k = nx_gguf_key(g, i);
        acc += strlen(k) + (uint64_t)(nx_gguf_find_key(g, k) == i);
        int64_t v; double d; bool b; uint64_t len, rs;
        acc += nx_gguf_kv_int(g, i, &v) ? (uint64_t)v : 0;
        acc += nx_gguf_kv_float(g, i, &d) ? (uint64_t)(d == d) : 0;
        acc += nx_gguf_kv_bool(g, i, &b) ? b : 0;
        const char *s = nx_gguf_kv_str(g, i, &len);
        if (s && len) acc += (unsigned char)s[len - 1];
        const uint8_t *raw = nx_gguf_kv_raw(g, i, &rs);
        if (rs) acc += raw[rs - 1];
        uint64_t n = nx_gguf_arr_n(g, i);
        for (uint64_t j = 0; j < n; j++) {
            acc += nx_gguf_arr_int(g, i, j, &v) ? (uint64_t)v : 0;
            acc += nx_gguf_arr_float(g, i, j, &d) ? 1 : 0;
            s = nx_gguf_arr_str(g, i, j, &len);
            if (s && len) acc += (unsigned char)s[len - 1] + (unsigned char)s[0];
        }
        acc += nx_gguf_arr_data(g, i) != NULL;
    }
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        acc += (uint64_t)(nx_gguf_find_tensor(g, t->name) == i) + nx_gguf_tensor_offset(g, i);
        if (t->nbytes) acc += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    return acc;
}

/* Open must fail with NX_ERR_FORMAT and a message containing every word. */
static bool expect_format(const uint8_t *buf, size_t size, const char *w1, const char *w2) {
    nx_gguf *g = NULL;
    nx_error err = {0};
    nx_status st = nx_gguf_open_memory(buf, size, &g, &err);
    bool ok = st == NX_ERR_FORMAT && g == NULL && strstr(err.msg, "<memory>: offset ") == err.msg &&
              (!w1 || strstr(err.msg, w1)) && (!w2 || strstr(err.msg, w2));
    if (!ok) fprintf(stderr, "  got status %s, message \"%s\" (wanted \"%s\" \"%s\")\n", nx_status_str(st), err.msg,
                     w1 ? w1 : "", w2 ? w2 : "");
    nx_gguf_close(g);
    return ok;
}

/* Copy the sample, apply a patch, expect failure. */
#define CORRUPT(patch, w1, w2) do { \
    uint8_t *b = malloc(size); memcpy(b, base, size); { patch; } \
    CHECK_MSG(expect_format(b, size, w1, w2), "case: %s", #patch); free(b); } while (0)

static char tmpdir[64];

static void make_tmpdir(void) {
    if (tmpdir[0]) return;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nx_test_gguf_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); abort(); }
}

static char *tmp_path(const char *name) {
    static char buf[32][256];
    static int k;
    make_tmpdir();
    char *p = buf[k++ % 32];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

static bool copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    bool ok = a && b;
    char buf[65536];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b) fclose(b);
    return ok;
}

/* A tiny byte builder for hand-made files. */
typedef struct bb { uint8_t buf[4096]; size_t n; } bb;
static void bb_u32(bb *b, uint32_t v) { memcpy(b->buf + b->n, &v, 4); b->n += 4; }
static void bb_u64(bb *b, uint64_t v) { memcpy(b->buf + b->n, &v, 8); b->n += 8; }
static void bb_str(bb *b, const char *s) { bb_u64(b, strlen(s)); memcpy(b->buf + b->n, s, strlen(s)); b->n += strlen(s); }
static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    memcpy(b->buf, "GGUF", 4);
    b->n = 4;
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}

/* ===== Round trips ===== */

static void test_roundtrip_values(void) {
    size_t size;
    uint8_t *buf = make_sample(32, &size);
    CHECK(buf != NULL);
    if (!buf) return;
    nx_gguf *g = NULL;
    nx_error err = {0};
    CHECK_EQ_INT(nx_gguf_open_memory(buf, size, &g, &err), NX_OK);
    if (!g) { fprintf(stderr, "  %s\n", err.msg); free(buf); return; }
    CHECK_EQ_INT(nx_gguf_version(g), 3);
    CHECK_EQ_INT(nx_gguf_alignment(g), 32);
    CHECK_EQ_INT(nx_gguf_n_splits(g), 1);
    CHECK_EQ_INT(nx_gguf_file_size(g), size);
    CHECK_EQ_INT(nx_gguf_find_key(g, "general.alignment"), -1);   /* default: not written */
    CHECK_EQ_INT(nx_gguf_n_kv(g), 24);
    CHECK_STR(nx_gguf_key(g, 0), "general.architecture");
    CHECK_STR(nx_gguf_key(g, 1), "k.u8");
    CHECK_EQ_INT(nx_gguf_find_key(g, "k.f64"), 12);
    CHECK_EQ_INT(nx_gguf_find_key(g, "nope"), -1);
    CHECK(nx_gguf_key(g, 99) == NULL);

    int64_t v;
    double d;
    bool b;
    uint64_t len;
    CHECK(nx_gguf_get_int(g, "k.u8", &v) && v == 200);
    CHECK(nx_gguf_get_int(g, "k.i8", &v) && v == -5);
    CHECK(nx_gguf_get_int(g, "k.u16", &v) && v == 60000);
    CHECK(nx_gguf_get_int(g, "k.i16", &v) && v == -30000);
    CHECK(nx_gguf_get_int(g, "k.u32", &v) && v == 4000000000ll);
    CHECK(nx_gguf_get_int(g, "k.i32", &v) && v == -2000000000ll);
    CHECK(nx_gguf_get_int(g, "k.i64", &v) && v == I64_NEG);
    CHECK(!nx_gguf_get_int(g, "k.u64", &v));   /* does not fit int64 */
    CHECK(nx_gguf_get_float(g, "k.u64", &d) && d == (double)U64_BIG);
    CHECK(nx_gguf_get_float(g, "k.f32", &d) && d == 1.5);
    CHECK(nx_gguf_get_float(g, "k.f64", &d) && d == 3.25);
    CHECK(nx_gguf_get_float(g, "k.i32", &d) && d == -2e9);
    CHECK(!nx_gguf_get_int(g, "k.f32", &v));
    CHECK(!nx_gguf_get_float(g, "k.str", &d));
    CHECK(nx_gguf_get_bool(g, "k.bool", &b) && b);
    CHECK(!nx_gguf_get_bool(g, "k.u8", &b));
    CHECK(nx_gguf_get_int(g, "k.bool", &v) && v == 1);
    const char *s = nx_gguf_get_str(g, "k.str", &len);
    CHECK(s && len == 7 && !memcmp(s, "h\xc3\xa9llo\n", 7));
    CHECK(nx_gguf_get_str(g, "k.u8", &len) == NULL);
    CHECK_EQ_INT(nx_gguf_kv_type(g, nx_gguf_find_key(g, "k.i16")), NX_GGUF_I16);

    int64_t i = nx_gguf_find_key(g, "a.u32");
    CHECK_EQ_INT(nx_gguf_kv_type(g, i), NX_GGUF_ARRAY);
    CHECK_EQ_INT(nx_gguf_arr_type(g, i), NX_GGUF_U32);
    CHECK_EQ_INT(nx_gguf_arr_n(g, i), 4);
    CHECK(nx_gguf_arr_int(g, i, 3, &v) && v == 4000000000ll);
    CHECK(!nx_gguf_arr_int(g, i, 4, &v));
    const uint8_t *raw = nx_gguf_arr_data(g, i);
    uint32_t u;
    CHECK(raw && (memcpy(&u, raw + 8, 4), u == 9));
    i = nx_gguf_find_key(g, "a.i16");
    CHECK(nx_gguf_arr_int(g, i, 0, &v) && v == -1);
    i = nx_gguf_find_key(g, "a.f32");
    CHECK(nx_gguf_arr_float(g, i, 1, &d) && d == -2.0);
    i = nx_gguf_find_key(g, "a.f64");
    CHECK(nx_gguf_arr_float(g, i, 0, &d) && d == 1e300);
    i = nx_gguf_find_key(g, "a.bool");
    CHECK(nx_gguf_arr_int(g, i, 2, &v) && v == 1);
    i = nx_gguf_find_key(g, "a.i64");
    CHECK(nx_gguf_arr_int(g, i, 0, &v) && v == INT64_MIN);
    i = nx_gguf_find_key(g, "a.u8");
    CHECK(nx_gguf_arr_int(g, i, 2, &v) && v == 3);
    i = nx_gguf_find_key(g, "a.str");
    CHECK_EQ_INT(nx_gguf_arr_type(g, i), NX_GGUF_STRING);
    CHECK_EQ_INT(nx_gguf_arr_n(g, i), 3);
    CHECK(nx_gguf_arr_data(g, i) == NULL);
    s = nx_gguf_arr_str(g, i, 0, &len);
    CHECK(s && len == 1 && s[0] == 'x');
    s = nx_gguf_arr_str(g, i, 1, &len);
    CHECK(s && len == 0);
    s = nx_gguf_arr_str(g, i, 2, &len);
    CHECK(s && len == 8 && !memcmp(s, "with\0nul", 8));
    CHECK(nx_gguf_arr_str(g, i, 3, &len) == NULL);
    CHECK(!nx_gguf_arr_int(g, i, 0, &v));
    i = nx_gguf_find_key(g, "a.empty");
    CHECK_EQ_INT(nx_gguf_arr_n(g, i), 0);
    CHECK_EQ_INT(nx_gguf_arr_type(g, i), NX_GGUF_I32);
    CHECK_EQ_INT(nx_gguf_arr_n(g, nx_gguf_find_key(g, "k.u8")), 0);
    nx_gguf_close(g);
    free(buf);
}

static void check_tensors(const nx_gguf *g, const uint8_t *file, uint32_t alignment) {
    sample_data s;
    fill_sample(&s);
    CHECK_EQ_INT(nx_gguf_n_tensors(g), 6);
    const char *names[6] = {"tA.weight", "tB.weight", "tC.weight", "tD.weight", "tE.empty", "tF.weight"};
    const nx_type types[6] = {NX_TYPE_F32, NX_TYPE_Q8_0, NX_TYPE_F16, NX_TYPE_Q4_K, NX_TYPE_F32, NX_TYPE_I32};
    const void *data[6] = {s.a, s.b, s.c, s.d, NULL, s.f};
    const size_t bytes[6] = {48, 136, 16, 288, 0, 20};
    for (int k = 0; k < 6; k++) {
        int64_t i = nx_gguf_find_tensor(g, names[k]);
        CHECK_EQ_INT(i, k);
        const nx_tensor *t = nx_gguf_tensor(g, i);
        if (!t) continue;
        CHECK_STR(t->name, names[k]);
        CHECK_EQ_INT(t->type, types[k]);
        CHECK_EQ_INT(t->nbytes, bytes[k]);
        CHECK(bytes[k] == 0 || !memcmp(t->data, data[k], bytes[k]));
        CHECK_EQ_INT(nx_gguf_tensor_offset(g, i) % alignment, 0);
        CHECK_EQ_INT(nx_gguf_tensor_split(g, i), 0);
        if (file) CHECK((const uint8_t *)t->data == file + nx_gguf_tensor_offset(g, i));
    }
    const nx_tensor *t = nx_gguf_tensor(g, 3);
    CHECK(t && t->n_dims == 3 && t->ne[0] == 256 && t->ne[1] == 1 && t->ne[2] == 2 && t->ne[3] == 1 &&
          t->nb[1] == 144 && t->nb[2] == 144);
    CHECK(nx_gguf_find_tensor(g, "nope") == -1);
    CHECK(nx_gguf_tensor(g, 6) == NULL && nx_gguf_tensor(g, -1) == NULL);
}

static void test_roundtrip_tensors(void) {
    for (uint32_t alignment = 32; alignment <= 64; alignment *= 2) {
        size_t size;
        uint8_t *buf = make_sample(alignment, &size);
        nx_gguf *g = NULL;
        nx_error err = {0};
        CHECK_EQ_INT(nx_gguf_open_memory(buf, size, &g, &err), NX_OK);
        if (!g) { fprintf(stderr, "  %s\n", err.msg); free(buf); continue; }
        CHECK_EQ_INT(nx_gguf_alignment(g), alignment);
        CHECK_EQ_INT(nx_gguf_data_offset(g, 0) % alignment, 0);
        int64_t v;
        CHECK(alignment == 32 ? nx_gguf_find_key(g, "general.alignment") < 0
                              : nx_gguf_get_int(g, "general.alignment", &v) && v == alignment);
        check_tensors(g, buf, alignment);
        /* the file ends with the last tensor padded to the alignment */
        CHECK_EQ_INT(size % alignment, 0);
        nx_gguf_close(g);
        free(buf);
    }
}

static void test_writer_semantics(void) {
    nx_gguf_writer *w = nx_gguf_writer_create();
    nx_gguf_set_u32(w, "a", 1);
    nx_gguf_set_str(w, "b", "two");
    nx_gguf_set_u32(w, "c", 3);
    nx_gguf_set_f32(w, "a", 9.0f);   /* keeps position 0, new type and value */
    nx_gguf_remove_key(w, "c");
    nx_gguf_set_u32(w, "d", 4);
    nx_gguf_set_u32(w, "general.alignment", 128);
    void *buf;
    size_t size;
    nx_error err = {0};
    CHECK_EQ_INT(nx_gguf_writer_write_mem(w, &buf, &size, &err), NX_OK);
    nx_gguf *g = NULL;
    CHECK_EQ_INT(nx_gguf_open_memory(buf, size, &g, &err), NX_OK);
    if (g) {
        CHECK_EQ_INT(nx_gguf_n_kv(g), 4);
        CHECK_STR(nx_gguf_key(g, 0), "a");
        CHECK_STR(nx_gguf_key(g, 1), "b");
        CHECK_STR(nx_gguf_key(g, 2), "d");
        CHECK_STR(nx_gguf_key(g, 3), "general.alignment");
        CHECK_EQ_INT(nx_gguf_kv_type(g, 0), NX_GGUF_F32);
        CHECK_EQ_INT(nx_gguf_alignment(g), 128);
        nx_gguf_close(g);
    }
    free(buf);
    /* back to 32: the key disappears */
    nx_gguf_writer_set_alignment(w, 32);
    CHECK_EQ_INT(nx_gguf_writer_write_mem(w, &buf, &size, &err), NX_OK);
    CHECK_EQ_INT(nx_gguf_open_memory(buf, size, &g, &err), NX_OK);
    if (g) {
        CHECK_EQ_INT(nx_gguf_n_kv(g), 3);
        CHECK_EQ_INT(nx_gguf_find_key(g, "general.alignment"), -1);
        nx_gguf_close(g);
    }
    free(buf);
    /* no tensors: no padding after the header, however large the alignment */
    nx_gguf_writer_set_alignment(w, 1u << 30);
    CHECK_EQ_INT(nx_gguf_writer_write_mem(w, &buf, &size, &err), NX_OK);
    CHECK(size < 200);
    CHECK_EQ_INT(nx_gguf_open_memory(buf, size, &g, &err), NX_OK);
    if (g) CHECK_EQ_INT(nx_gguf_alignment(g), 1u << 30);
    nx_gguf_close(g);
    free(buf);
    nx_gguf_writer_set_alignment(w, 32);
    /* errors are sticky and reported by the write */
    CHECK_EQ_INT(nx_gguf_add_tensor(w, "q", NX_TYPE_Q8_0, 1, (int64_t[]){33}, NULL), NX_ERR_INVALID_ARG);
    CHECK_EQ_INT(nx_gguf_set_u32(w, "", 1), NX_ERR_INVALID_ARG);
    CHECK_EQ_INT(nx_gguf_writer_write_mem(w, &buf, &size, &err), NX_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "tensor 'q'") != NULL);
    nx_gguf_writer_free(w);

    w = nx_gguf_writer_create();
    float x[4] = {0};
    CHECK_EQ_INT(nx_gguf_add_tensor(w, "t", NX_TYPE_F32, 1, (int64_t[]){4}, x), NX_OK);
    CHECK_EQ_INT(nx_gguf_add_tensor(w, "t", NX_TYPE_F32, 1, (int64_t[]){4}, x), NX_ERR_INVALID_ARG);
    /* byte size past 2^64 (the row size alone overflows) */
    CHECK_EQ_INT(nx_gguf_add_tensor(w, "huge", NX_TYPE_F64, 1, (int64_t[]){INT64_C(1) << 61}, NULL), NX_ERR_INVALID_ARG);
    nx_gguf_writer_free(w);
    w = nx_gguf_writer_create();
    nx_gguf_writer_set_alignment(w, 48);
    CHECK_EQ_INT(nx_gguf_writer_write_mem(w, &buf, &size, &err), NX_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "alignment") != NULL);
    nx_gguf_writer_free(w);
}

/* Copy every key/value and tensor of g into a new writer. */
static nx_gguf_writer *copy_all(const nx_gguf *g) {
    nx_gguf_writer *w = nx_gguf_writer_create();
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) nx_gguf_copy_kv(w, g, i);
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        nx_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    return w;
}

/* Same key/values (type and encoded bytes, in order) and tensors (shape and bytes). */
static bool same_content(const nx_gguf *a, const nx_gguf *b, const char *skip_prefix) {
    int64_t j = 0;
    for (int64_t i = 0; i < nx_gguf_n_kv(a); i++, j++) {
        uint64_t sa, sb;
        const void *ra = nx_gguf_kv_raw(a, i, &sa), *rb = nx_gguf_kv_raw(b, j, &sb);
        if (!rb || strcmp(nx_gguf_key(a, i), nx_gguf_key(b, j)) || nx_gguf_kv_type(a, i) != nx_gguf_kv_type(b, j) ||
            sa != sb || memcmp(ra, rb, sa)) {
            fprintf(stderr, "  key %lld '%s' differs\n", (long long)i, nx_gguf_key(a, i));
            return false;
        }
    }
    for (; j < nx_gguf_n_kv(b); j++)
        if (!skip_prefix || strncmp(nx_gguf_key(b, j), skip_prefix, strlen(skip_prefix))) {
            fprintf(stderr, "  extra key '%s'\n", nx_gguf_key(b, j));
            return false;
        }
    if (nx_gguf_n_tensors(a) != nx_gguf_n_tensors(b)) return false;
    for (int64_t i = 0; i < nx_gguf_n_tensors(a); i++) {
        const nx_tensor *x = nx_gguf_tensor(a, i), *y = nx_gguf_tensor(b, i);
        if (strcmp(x->name, y->name) || x->type != y->type || x->n_dims != y->n_dims ||
            memcmp(x->ne, y->ne, sizeof x->ne) || x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes)) {
            fprintf(stderr, "  tensor '%s' differs\n", x->name);
            return false;
        }
    }
    return true;
}

static void test_copy_kv(void) {
    size_t size;
    uint8_t *buf = make_sample(64, &size);
    nx_gguf *g = NULL, *h = NULL;
    nx_error err = {0};
    CHECK_EQ_INT(nx_gguf_open_memory(buf, size, &g, &err), NX_OK);
    if (!g) { free(buf); return; }
    nx_gguf_writer *w = copy_all(g);
    void *out;
    size_t out_size;
    CHECK_EQ_INT(nx_gguf_writer_write_mem(w, &out, &out_size, &err), NX_OK);
    /* alignment came along with the copied general.alignment key; bytes are identical */
    CHECK_EQ_INT(out_size, size);
    CHECK(out_size == size && !memcmp(out, buf, size));
    CHECK_EQ_INT(nx_gguf_open_memory(out, out_size, &h, &err), NX_OK);
    if (h) CHECK(same_content(g, h, NULL));
    nx_gguf_close(h);
    nx_gguf_writer_free(w);
    free(out);
    nx_gguf_close(g);
    free(buf);
}

static void test_version2_and_nested(void) {
    size_t size;
    uint8_t *buf = make_sample(32, &size);
    nx_gguf *g = NULL;
    nx_error err = {0};
    put32(buf + 4, 2);
    CHECK_EQ_INT(nx_gguf_open_memory(buf, size, &g, &err), NX_OK);
    if (g) CHECK_EQ_INT(nx_gguf_version(g), 2);
    nx_gguf_close(g);
    free(buf);

    /* array of arrays: accepted, exposed raw, copied verbatim */
    static bb b;
    bb_header(&b, 3, 0, 2);
    bb_str(&b, "nested");
    bb_u32(&b, NX_GGUF_ARRAY);
    bb_u32(&b, NX_GGUF_ARRAY);
    bb_u64(&b, 2);
    bb_u32(&b, NX_GGUF_U8); bb_u64(&b, 3); b.buf[b.n++] = 1; b.buf[b.n++] = 2; b.buf[b.n++] = 3;
    bb_u32(&b, NX_GGUF_STRING); bb_u64(&b, 1); bb_str(&b, "hi");
    bb_str(&b, "after");
    bb_u32(&b, NX_GGUF_U32);
    bb_u32(&b, 77);
    g = NULL;
    CHECK_EQ_INT(nx_gguf_open_memory(b.buf, b.n, &g, &err), NX_OK);
    if (!g) { fprintf(stderr, "  %s\n", err.msg); return; }
    CHECK_EQ_INT(nx_gguf_kv_type(g, 0), NX_GGUF_ARRAY);
    CHECK_EQ_INT(nx_gguf_arr_type(g, 0), NX_GGUF_ARRAY);
    CHECK_EQ_INT(nx_gguf_arr_n(g, 0), 2);
    int64_t v;
    uint64_t rs;
    CHECK(!nx_gguf_arr_int(g, 0, 0, &v) && nx_gguf_arr_str(g, 0, 0, NULL) == NULL && !nx_gguf_arr_data(g, 0));
    CHECK(nx_gguf_kv_raw(g, 0, &rs) && rs == 4 + 8 + (4 + 8 + 3) + (4 + 8 + 8 + 2));
    CHECK(nx_gguf_get_int(g, "after", &v) && v == 77);
    nx_gguf_writer *w = nx_gguf_writer_create();
    nx_gguf_copy_kv(w, g, 0);
    nx_gguf_copy_kv(w, g, 1);
    void *out;
    size_t out_size;
    CHECK_EQ_INT(nx_gguf_writer_write_mem(w, &out, &out_size, &err), NX_OK);
    nx_gguf *h = NULL;
    CHECK_EQ_INT(nx_gguf_open_memory(out, out_size, &h, &err), NX_OK);
    if (h) CHECK(same_content(g, h, NULL));
    nx_gguf_close(h);
    free(out);
    nx_gguf_writer_free(w);
    nx_gguf_close(g);

    /* nesting deeper than the limit */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "deep");
    bb_u32(&b, NX_GGUF_ARRAY);
    for (int k = 0; k < 12; k++) { bb_u32(&b, NX_GGUF_ARRAY); bb_u64(&b, 1); }
    bb_u32(&b, NX_GGUF_U8); bb_u64(&b, 0);
    CHECK(expect_format(b.buf, b.n, "nested deeper", "'deep'"));
}

/* ===== Malformed files ===== */

static void test_malformed_header(void) {
    size_t size;
    uint8_t *base = make_sample(32, &size);
    CORRUPT(b[0] = 'X', "bad magic", NULL);
    CORRUPT(put32(b + 4, 1), "version 1", NULL);
    CORRUPT(put32(b + 4, 4), "version 4", NULL);
    CORRUPT(put32(b + 4, 0), "version 0", NULL);
    CORRUPT(put32(b + 4, 0x03000000u), "big-endian", NULL);
    CORRUPT(put64(b + 16, 1ull << 40), "key/value count", "too large");
    CORRUPT(put64(b + 16, UINT64_MAX), "key/value count", NULL);
    CORRUPT(put64(b + 8, 1ull << 40), "tensor count", "too large");
    CORRUPT(put64(b + 8, UINT64_MAX), "tensor count", NULL);
    CORRUPT(put64(b + 16, get64(b + 16) + 1), NULL, NULL);   /* one key too many */
    CORRUPT(put64(b + 8, get64(b + 8) + 1), NULL, NULL);     /* one tensor too many */
    for (size_t n = 0; n < 24; n++) {
        nx_gguf *g = NULL;
        nx_error err = {0};
        CHECK_EQ_INT(nx_gguf_open_memory(n ? base : NULL, n, &g, &err), NX_ERR_FORMAT);
        CHECK_MSG(n < 4 ? strstr(err.msg, "truncated") != NULL : strstr(err.msg, "truncated header") != NULL,
                  "prefix %zu: %s", n, err.msg);
    }
    free(base);
}

static void test_malformed_kv(void) {
    size_t size;
    uint8_t *base = make_sample(64, &size);
    size_t k;
    k = key_end(base, size, "k.u32");
    CORRUPT(put32(b + k, 13), "bad value type 13", "'k.u32'");
    CORRUPT(put32(b + k, 0xffffffffu), "bad value type", NULL);
    k = key_end(base, size, "a.f32");
    CORRUPT(put32(b + k + 4, 99), "bad value type 99", "array");
    CORRUPT(put64(b + k + 8, 1ull << 60), "array count", "too large");
    CORRUPT(put64(b + k + 8, UINT64_MAX), "array count", NULL);
    k = key_end(base, size, "a.str");
    CORRUPT(put64(b + k + 8, 1ull << 59), "array count", "'a.str'");
    CORRUPT(put64(b + k + 16, 1ull << 62), "string length", "element 0");
    k = key_end(base, size, "k.str");
    CORRUPT(put64(b + k + 4, 1ull << 62), "string length", "past end");
    CORRUPT(put64(b + k + 4, UINT64_MAX), "string length", NULL);
    size_t at = find_bytes(base, size, "k.i8") - 8;
    CORRUPT(put64(b + at, 1ull << 50), "name length", "past end");
    CORRUPT(put64(b + at, 0), "empty name", NULL);
    CORRUPT(b[at + 9] = 0, "NUL", NULL);
    /* duplicate key: rename dup.x2 to dup.x1 */
    at = find_bytes(base, size, "dup.x2");
    CORRUPT(b[at + 5] = '1', "duplicate key 'dup.x1'", "first at offset");
    /* alignment: wrong values and wrong type */
    k = key_end(base, size, "general.alignment");
    CORRUPT(put32(b + k + 4, 48), "bad alignment 48", NULL);
    CORRUPT(put32(b + k + 4, 0), "bad alignment 0", NULL);
    CORRUPT(put32(b + k, NX_GGUF_I32), "general.alignment", "must be u32");
    /* split keys of the wrong type */
    free(base);
}

static void test_malformed_tensors(void) {
    size_t size;
    uint8_t *base = make_sample(32, &size);
    tinfo a = tensor_info(base, size, "tA.weight"), bq = tensor_info(base, size, "tB.weight");
    tinfo d = tensor_info(base, size, "tD.weight"), f = tensor_info(base, size, "tF.weight");
    CORRUPT(put32(b + a.type_at, 4), "bad tensor type id 4", "'tA.weight'");
    CORRUPT(put32(b + a.type_at, 1000), "bad tensor type id 1000", NULL);
    CORRUPT(put32(b + a.ndims_at, 5), "n_dims 5", "'tA.weight'");
    CORRUPT(put32(b + a.ndims_at, 0), "n_dims 0", NULL);
    CORRUPT(put32(b + a.ndims_at, 0xffffffffu), "n_dims", NULL);
    CORRUPT(put64(b + a.ne_at, 1ull << 62), "ne[0]", "too large");
    CORRUPT(put64(b + d.ne_at + 8, 1ull << 61); put64(b + d.ne_at + 16, 1ull << 61), "element count overflows", "'tD.weight'");
    CORRUPT(put32(b + a.type_at, NX_TYPE_F64); put64(b + a.ne_at, 1ull << 61); put64(b + a.ne_at + 8, 2),
            "byte size overflows", NULL);
    CORRUPT(put64(b + bq.ne_at, 48), "not a multiple", "block size 32");
    CORRUPT(put64(b + bq.off_at, get64(b + bq.off_at) + 16), "unaligned", "'tB.weight'");
    CORRUPT(put64(b + bq.off_at, get64(b + bq.off_at) + 1), "unaligned", NULL);
    CORRUPT(put64(b + f.off_at, get64(b + f.off_at) + 64), "'tF.weight': data range", "past end of file (size");
    CORRUPT(put64(b + f.off_at, UINT64_MAX - 31), "past end of file", NULL);
    CORRUPT(put64(b + a.ne_at + 8, 1ull << 40), "past end of file", "'tA.weight'");
    CORRUPT(put64(b + bq.off_at, 0), "overlap", "'tA.weight'");
    CORRUPT(put64(b + f.off_at, get64(b + d.off_at) + 32), "overlap", "'tF.weight'");
    /* duplicate tensor names: rename tB.weight to tA.weight */
    CORRUPT(b[bq.ndims_at - 8] = 'A', "duplicate tensor name 'tA.weight'", NULL);
    CORRUPT(put64(b + f.name_len_at, 1ull << 40), "name length", "past end");
    CORRUPT(put64(b + f.name_len_at, 0), "empty name", NULL);
    free(base);
    /* zero-size tensors may share an offset with anything */
    base = make_sample(32, &size);
    tinfo e = tensor_info(base, size, "tE.empty");
    put64(base + e.off_at, 0);
    nx_gguf *g = NULL;
    nx_error err = {0};
    CHECK_EQ_INT(nx_gguf_open_memory(base, size, &g, &err), NX_OK);
    nx_gguf_close(g);
    free(base);
}

static void test_every_prefix(void) {
    size_t size;
    uint8_t *base = make_sample(32, &size);
    nx_gguf *g = NULL;
    nx_error err = {0};
    CHECK_EQ_INT(nx_gguf_open_memory(base, size, &g, &err), NX_OK);
    if (!g) return;
    /* the last tensor's bytes end before the padding that follows it */
    const nx_tensor *last = nx_gguf_tensor(g, nx_gguf_n_tensors(g) - 1);
    size_t data_end = nx_gguf_tensor_offset(g, nx_gguf_n_tensors(g) - 1) + last->nbytes;
    nx_gguf_close(g);
    CHECK(data_end < size);
    int bad = 0;
    for (size_t n = 0; n <= size; n++) {
        uint8_t *b = malloc(n ? n : 1);   /* exact-size copy so ASan sees any overread */
        memcpy(b, base, n);
        g = NULL;
        nx_status st = nx_gguf_open_memory(b, n, &g, &err);
        bool want_ok = n >= data_end;
        if (want_ok ? st != NX_OK : (st != NX_ERR_FORMAT || !err.msg[0])) {
            if (bad++ < 5) fprintf(stderr, "  prefix %zu: %s %s\n", n, nx_status_str(st), err.msg);
        }
        if (g) touch_all(g);
        nx_gguf_close(g);
        free(b);
    }
    CHECK_EQ_INT(bad, 0);
    free(base);
}

/* Random byte corruption: must never crash; failures are NX_ERR_FORMAT. */
static void test_random_corruption(void) {
    size_t size;
    uint8_t *base = make_sample(64, &size);
    uint64_t rng = 0x12345678abcdefull;
    int n_ok = 0, n_bad_status = 0;
    for (int it = 0; it < 4000; it++) {
        uint8_t *b = malloc(size);
        memcpy(b, base, size);
        int flips = 1 + (int)(it % 4);
        for (int k = 0; k < flips; k++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            size_t pos = (size_t)(rng % size);
            /* mostly hit the metadata region, where the parsing happens */
            if (it % 3) pos %= 700;
            b[pos] = (it & 1) ? (uint8_t)(rng >> 32) : (uint8_t)(b[pos] ^ (1u << ((rng >> 40) & 7)));
        }
        nx_gguf *g = NULL;
        nx_error err = {0};
        nx_status st = nx_gguf_open_memory(b, size, &g, &err);
        if (st == NX_OK) { n_ok++; touch_all(g); }
        else if (st != NX_ERR_FORMAT) n_bad_status++;
        nx_gguf_close(g);
        free(b);
    }
    CHECK_EQ_INT(n_bad_status, 0);
    CHECK(n_ok > 0);
    free(base);
}

/* ===== Files and split models ===== */

static void test_files_and_splits(void) {
    sample_data s;
    fill_sample(&s);
    nx_gguf_writer *w = make_sample_writer(&s, 64);
    /* a few more tensors so that three parts each get some */
    static float big[3][1024];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 1024; i++) big[k][i] = (float)(k * 1024 + i);
        char name[32];
        snprintf(name, sizeof name, "big.%d", k);
        nx_gguf_add_tensor(w, name, NX_TYPE_F32, 2, (int64_t[]){256, 4}, big[k]);
    }
    nx_error err = {0};
    const char *whole = tmp_path("whole.gguf");
    CHECK_EQ_INT(nx_gguf_writer_write(w, whole, &err), NX_OK);
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s", tmp_path("model"));
    CHECK_EQ_INT(nx_gguf_writer_write_split(w, prefix, 3, &err), NX_OK);
    char one[300], many[300];
    snprintf(one, sizeof one, "%s", tmp_path("single"));
    CHECK_EQ_INT(nx_gguf_writer_write_split(w, one, 1, &err), NX_OK);
    snprintf(many, sizeof many, "%s", tmp_path("many"));
    CHECK_EQ_INT(nx_gguf_writer_write_split(w, many, 12, &err), NX_OK);   /* more parts than tensors */
    nx_gguf_writer_free(w);

    nx_gguf *a = NULL, *b = NULL;
    CHECK_EQ_INT(nx_gguf_open(whole, &a, &err), NX_OK);
    const char *p1 = tmp_path("model-00001-of-00003.gguf");
    const char *p2 = tmp_path("model-00002-of-00003.gguf");
    const char *p3 = tmp_path("model-00003-of-00003.gguf");
    CHECK_EQ_INT(nx_gguf_open(p1, &b, &err), NX_OK);
    if (!b) fprintf(stderr, "  %s\n", err.msg);
    if (a && b) {
        CHECK_EQ_INT(nx_gguf_n_splits(b), 3);
        CHECK(same_content(a, b, "split."));
        int64_t v;
        CHECK(nx_gguf_get_int(b, "split.count", &v) && v == 3);
        CHECK(nx_gguf_get_int(b, "split.no", &v) && v == 0);
        CHECK(nx_gguf_get_int(b, "split.tensors.count", &v) && v == 9);
        int seen[3] = {0};
        for (int64_t i = 0; i < nx_gguf_n_tensors(b); i++) {
            int sp = nx_gguf_tensor_split(b, i);
            CHECK(sp >= 0 && sp < 3 && (i == 0 || sp >= nx_gguf_tensor_split(b, i - 1)));
            if (sp >= 0 && sp < 3) seen[sp]++;
            CHECK_EQ_INT(nx_gguf_tensor_offset(b, i) % 64, 0);
        }
        CHECK(seen[0] && seen[1] && seen[2]);
        struct stat st1, st2, st3;
        CHECK(!stat(p1, &st1) && !stat(p2, &st2) && !stat(p3, &st3));
        CHECK_EQ_INT(nx_gguf_file_size(b), (size_t)(st1.st_size + st2.st_size + st3.st_size));
        touch_all(b);
    }
    nx_gguf_close(b);
    b = NULL;
    char p[300];
    snprintf(p, sizeof p, "%s-00001-of-00001.gguf", one);
    CHECK_EQ_INT(nx_gguf_open(p, &b, &err), NX_OK);
    if (a && b) CHECK(same_content(a, b, "split."));
    nx_gguf_close(b);
    b = NULL;
    snprintf(p, sizeof p, "%s-00001-of-00012.gguf", many);
    CHECK_EQ_INT(nx_gguf_open(p, &b, &err), NX_OK);
    if (a && b) CHECK(nx_gguf_n_splits(b) == 12 && same_content(a, b, "split."));
    nx_gguf_close(b);
    b = NULL;
    for (int k = 1; k <= 12; k++) {
        snprintf(p, sizeof p, "%s-%05d-of-00012.gguf", many, k);
        unlink(p);
    }

    /* a later part: refused by open (names the first part), accepted by open_part */
    CHECK_EQ_INT(nx_gguf_open(p2, &b, &err), NX_ERR_FORMAT);
    CHECK(strstr(err.msg, "part 2 of 3") && strstr(err.msg, "model-00001-of-00003.gguf"));
    CHECK_EQ_INT(nx_gguf_open_part(p2, &b, &err), NX_OK);
    if (b) {
        int64_t v;
        CHECK(nx_gguf_get_int(b, "split.no", &v) && v == 1);
        CHECK_EQ_INT(nx_gguf_n_splits(b), 1);
        CHECK(nx_gguf_n_tensors(b) > 0 && nx_gguf_n_tensors(b) < 9);
        nx_gguf_close(b);
        b = NULL;
    }
    /* part 3 where part 2 should be */
    const char *q1 = tmp_path("bad-00001-of-00003.gguf"), *q2 = tmp_path("bad-00002-of-00003.gguf");
    const char *q3 = tmp_path("bad-00003-of-00003.gguf");
    CHECK(copy_file(p1, q1) && copy_file(p3, q2) && copy_file(p3, q3));
    CHECK_EQ_INT(nx_gguf_open(q1, &b, &err), NX_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "split.no is 2 (expected 1") != NULL, "%s", err.msg);
    /* a missing part */
    unlink(q2);
    CHECK_EQ_INT(nx_gguf_open(q1, &b, &err), NX_ERR_IO);
    CHECK(strstr(err.msg, "bad-00002-of-00003.gguf") != NULL);
    /* name says split but the file has no split keys; split keys but a plain name */
    const char *r1 = tmp_path("plain-00001-of-00002.gguf"), *r2 = tmp_path("renamed.gguf");
    CHECK(copy_file(whole, r1) && copy_file(p1, r2));
    CHECK_EQ_INT(nx_gguf_open(r1, &b, &err), NX_ERR_FORMAT);
    CHECK(strstr(err.msg, "no split.count") != NULL);
    CHECK_EQ_INT(nx_gguf_open(r2, &b, &err), NX_ERR_FORMAT);
    CHECK(strstr(err.msg, "split.count = 3 (this is part 1)") != NULL);
    /* I/O errors */
    CHECK_EQ_INT(nx_gguf_open(tmp_path("missing.gguf"), &b, &err), NX_ERR_IO);
    CHECK(strstr(err.msg, "missing.gguf: cannot open") != NULL);
    CHECK_EQ_INT(nx_gguf_open(tmpdir, &b, &err), NX_ERR_IO);
    FILE *fe = fopen(tmp_path("empty.gguf"), "wb");
    if (fe) fclose(fe);
    CHECK_EQ_INT(nx_gguf_open(tmp_path("empty.gguf"), &b, &err), NX_ERR_FORMAT);
    CHECK(strstr(err.msg, "truncated") != NULL);
    nx_gguf_close(a);

    const char *names[] = {"whole.gguf", "model-00001-of-00003.gguf", "model-00002-of-00003.gguf",
                           "model-00003-of-00003.gguf", "single-00001-of-00001.gguf", "bad-00001-of-00003.gguf",
                           "bad-00003-of-00003.gguf", "plain-00001-of-00002.gguf", "renamed.gguf", "empty.gguf"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
}

/* ===== Golden files and the CLI ===== */

/* every GGUF of the repository (paths from its root) */
static const char *golden_files[] = {
    "tests/data/golden/qwen35-tiny/model.gguf", "tests/data/golden/qwen35-tiny-q8/model.gguf",
    "tests/data/golden/qwen35-small-q4km/model.gguf", "tests/data/golden/qwen35-small-q4km/f32_subset.gguf",
    "tests/data/golden/gemma4-tiny/model.gguf", "tests/data/golden/gemma4-tiny/assistant.gguf",
    "tests/data/golden/gemma4-tiny-centroid/model.gguf", "tests/data/golden/gemma4-tiny-centroid/assistant.gguf",
    "models/tiny-qwen35-mtp-q8_0.gguf",
};

static void test_golden(void) {
    char path[512];
    for (size_t f = 0; f < sizeof golden_files / sizeof golden_files[0]; f++) {
        snprintf(path, sizeof path, "%s/%s", NX_SOURCE_DIR, golden_files[f]);
        nx_gguf *g = NULL;
        nx_error err = {0};
        nx_status st = nx_gguf_open(path, &g, &err);
        CHECK_MSG(st == NX_OK, "%s: %s", path, err.msg);
        if (!g) continue;
        uint64_t len;
        const char *arch = nx_gguf_get_str(g, "general.architecture", &len);
        CHECK_MSG(arch && len > 0, "%s: no general.architecture", path);
        CHECK(nx_gguf_n_tensors(g) > 0);
        int64_t tok = nx_gguf_find_key(g, "tokenizer.ggml.tokens");
        if (tok >= 0) CHECK(nx_gguf_arr_type(g, tok) == NX_GGUF_STRING && nx_gguf_arr_n(g, tok) > 0);
        touch_all(g);
        /* copy everything through the writer: same content */
        nx_gguf_writer *w = copy_all(g);
        void *buf;
        size_t size;
        CHECK_EQ_INT(nx_gguf_writer_write_mem(w, &buf, &size, &err), NX_OK);
        nx_gguf *h = NULL;
        CHECK_EQ_INT(nx_gguf_open_memory(buf, size, &h, &err), NX_OK);
        if (h) CHECK_MSG(same_content(g, h, NULL), "%s", path);
        nx_gguf_close(h);
        free(buf);
        nx_gguf_writer_free(w);
        nx_gguf_close(g);
    }
}

static int run_cli(const char *args, const char *out_file) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' gguf-info %s >'%s' 2>&1", NX_CLI_PATH, args, out_file);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = '\0';
    fclose(f);
    if (size) *size = got;
    return b;
}

static void test_cli(void) {
    if (access(NX_CLI_PATH, X_OK)) SKIP("%s not built", NX_CLI_PATH);
    char path[512], args[700];
    const char *out = tmp_path("cli.out");
    /* a file of our own, always available */
    size_t size;
    uint8_t *buf = make_sample(64, &size);
    const char *mine = tmp_path("cli.gguf");
    FILE *f = fopen(mine, "wb");
    fwrite(buf, 1, size, f);
    fclose(f);
    free(buf);
    snprintf(args, sizeof args, "'%s' --tensors", mine);
    CHECK_EQ_INT(run_cli(args, out), 0);
    char *text = slurp(out, NULL);
    CHECK(text && strstr(text, "k.str = \"h\xc3\xa9llo\\n\"") && strstr(text, "[string]  a.str = [\"x\", \"\", \"with\\x00nul\"]") &&
          strstr(text, "k.u64 = 9223372036854775813") && strstr(text, "q4_K") && strstr(text, "tD.weight") &&
          strstr(text, "alignment:  64"));
    if (text && !strstr(text, "tD.weight")) fprintf(stderr, "%s\n", text);
    free(text);
    snprintf(args, sizeof args, "'%s' --json", mine);
    CHECK_EQ_INT(run_cli(args, out), 0);
    text = slurp(out, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    CHECK(j != NULL);
    if (j) {
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "n_tensors")->valuedouble, 6);
        CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(j, "kv")), 25);
        CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tensors")), 6);
        cJSON *u64 = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "kv"), 10), "value");
        CHECK(cJSON_IsString(u64) && !strcmp(u64->valuestring, "9223372036854775813"));
        cJSON_Delete(j);
    }
    free(text);
    /* errors: one line, exit 1 */
    snprintf(args, sizeof args, "'%s'", tmp_path("nonexistent.gguf"));
    CHECK_EQ_INT(run_cli(args, out), 1);
    text = slurp(out, NULL);
    CHECK(text && !strncmp(text, "nextn gguf-info: ", 17) && strchr(text, '\n') == text + strlen(text) - 1);
    free(text);
    CHECK_EQ_INT(run_cli("", out), 2);
    unlink(mine);

    snprintf(path, sizeof path, "%s/tests/data/golden/qwen35-tiny/model.gguf", NX_SOURCE_DIR);
    CHECK_MSG(!access(path, R_OK), "%s missing", path);
    snprintf(args, sizeof args, "'%s' --tensors", path);
    CHECK_EQ_INT(run_cli(args, out), 0);
    text = slurp(out, NULL);
    CHECK(text && strstr(text, "qwen35.block_count = 5") && strstr(text, "tokenizer.ggml.tokens = [") &&
          strstr(text, "token_embd.weight"));
    free(text);
    snprintf(args, sizeof args, "'%s' --json", path);
    CHECK_EQ_INT(run_cli(args, out), 0);
    text = slurp(out, NULL);
    j = text ? cJSON_Parse(text) : NULL;
    CHECK(j && cJSON_GetObjectItem(j, "summary"));
    cJSON_Delete(j);
    free(text);
    unlink(out);
}

/* ===== Fuzz seeds ===== */

static bool write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static bool write_writer(nx_gguf_writer *w, const char *path) {
    nx_error err = {0};
    bool ok = nx_gguf_writer_write(w, path, &err) == NX_OK;
    if (!ok) fprintf(stderr, "  %s\n", err.msg);
    nx_gguf_writer_free(w);
    return ok;
}

/* The seed corpus of fuzz/fuzz_gguf.c: small valid files covering every value type, nested
 * arrays, v2, alignments, tokenizer-like arrays and a split part. Regenerate with
 * NX_GGUF_WRITE_SEEDS=1 ./test_gguf (writes into fuzz/corpus/fuzz_gguf/). */
static void write_seeds(const char *dir) {
    char path[512];
    size_t size;
    uint8_t *buf = make_sample(32, &size);
    snprintf(path, sizeof path, "%s/sample_align32.gguf", dir);
    CHECK(write_bytes(path, buf, size));
    put32(buf + 4, 2);
    snprintf(path, sizeof path, "%s/sample_v2.gguf", dir);
    CHECK(write_bytes(path, buf, size));
    free(buf);
    buf = make_sample(64, &size);
    snprintf(path, sizeof path, "%s/sample_align64.gguf", dir);
    CHECK(write_bytes(path, buf, size));
    free(buf);

    static bb b;
    bb_header(&b, 3, 0, 0);
    snprintf(path, sizeof path, "%s/empty.gguf", dir);
    CHECK(write_bytes(path, b.buf, b.n));
    bb_header(&b, 3, 1, 2);
    bb_str(&b, "nested");
    bb_u32(&b, NX_GGUF_ARRAY);
    bb_u32(&b, NX_GGUF_ARRAY);
    bb_u64(&b, 2);
    bb_u32(&b, NX_GGUF_U16); bb_u64(&b, 1); b.buf[b.n++] = 7; b.buf[b.n++] = 0;
    bb_u32(&b, NX_GGUF_STRING); bb_u64(&b, 2); bb_str(&b, "a"); bb_str(&b, "bc");
    bb_str(&b, "general.alignment");
    bb_u32(&b, NX_GGUF_U32);
    bb_u32(&b, 8);
    bb_str(&b, "t");
    bb_u32(&b, 1); bb_u64(&b, 2); bb_u32(&b, NX_TYPE_F32); bb_u64(&b, 0);
    while (b.n % 8) b.buf[b.n++] = 0;
    bb_u64(&b, 0x3f8000003f800000ull);
    snprintf(path, sizeof path, "%s/nested_align8.gguf", dir);
    CHECK(write_bytes(path, b.buf, b.n));

    /* tokenizer-like metadata */
    nx_gguf_writer *w = nx_gguf_writer_create();
    nx_gguf_set_str(w, "general.architecture", "qwen35");
    nx_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    const char *toks[40];
    char tokbuf[40][8];
    float scores[40];
    int32_t types[40];
    for (int i = 0; i < 40; i++) {
        snprintf(tokbuf[i], sizeof tokbuf[i], i < 26 ? "%c" : "\xc4\xa0t%d", i < 26 ? 'a' + i : i);
        toks[i] = tokbuf[i];
        scores[i] = -(float)i;
        types[i] = i < 38 ? 1 : 3;
    }
    nx_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 40);
    nx_gguf_set_arr(w, "tokenizer.ggml.scores", NX_GGUF_F32, scores, 40);
    nx_gguf_set_arr(w, "tokenizer.ggml.token_type", NX_GGUF_I32, types, 40);
    const char *merges[3] = {"a b", "\xc4\xa0 t", "ab c"};
    nx_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 3);
    nx_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 39);
    nx_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    nx_gguf_set_str(w, "tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}\n{% endfor %}");
    static uint8_t q[4 * 34];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 31);
    nx_gguf_add_tensor(w, "token_embd.weight", NX_TYPE_Q8_0, 2, (int64_t[]){64, 2}, q);
    nx_gguf_add_tensor(w, "blk.0.ffn_norm.weight", NX_TYPE_BF16, 4, (int64_t[]){2, 2, 2, 2}, q);
    snprintf(path, sizeof path, "%s/tokenizer_like.gguf", dir);
    CHECK(write_writer(w, path));

    /* the middle part of a 3-way split */
    sample_data s;
    fill_sample(&s);
    w = make_sample_writer(&s, 32);
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s", tmp_path("seed"));
    nx_error err = {0};
    CHECK_EQ_INT(nx_gguf_writer_write_split(w, prefix, 3, &err), NX_OK);
    nx_gguf_writer_free(w);
    char part[400];
    snprintf(part, sizeof part, "%s-00002-of-00003.gguf", prefix);
    snprintf(path, sizeof path, "%s/split_part2.gguf", dir);
    CHECK(copy_file(part, path));
    for (int k = 1; k <= 3; k++) {
        snprintf(part, sizeof part, "%s-%05d-of-00003.gguf", prefix, k);
        unlink(part);
    }
}

static void test_fuzz_seeds(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/fuzz_gguf", NX_SOURCE_DIR);
    if (getenv("NX_GGUF_WRITE_SEEDS")) {
        mkdir(dir, 0755);
        write_seeds(dir);
    }
    DIR *d = opendir(dir);
    REQUIRE_MSG(d != NULL, "%s missing", dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[800];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t size;
        char *buf = slurp(path, &size);
        nx_gguf *g = NULL;
        nx_error err = {0};
        CHECK_MSG(buf && nx_gguf_open_memory(buf, size, &g, &err) == NX_OK, "%s: %s", path, err.msg);
        CHECK_MSG(size < 20000, "%s: %zu bytes", path, size);
        if (g) touch_all(g);
        nx_gguf_close(g);
        free(buf);
        n++;
    }
    closedir(d);
    CHECK(n > 0);
}

/* Streamed tensors: fill produces the bytes at write time, to files and buffers alike; a fill
 * failure aborts the write and leaves no file. */
static nx_status fill_ramp(void *user, const char *name, void *dst, size_t nbytes, nx_error *err) {
    int *calls = user;
    (*calls)++;
    if (!strcmp(name, "bad")) return nx_fail(err, NX_ERR_IO, "fill of %s failed", name);
    for (size_t i = 0; i < nbytes / 4; i++) ((float *)dst)[i] = (float)i;
    return NX_OK;
}

static void test_writer_fill(void) {
    make_tmpdir();
    int calls = 0;
    const float plain[4] = {9, 8, 7, 6};
    nx_gguf_writer *w = nx_gguf_writer_create();
    const int64_t ne[2] = {8, 3}, ne1[1] = {4};
    CHECK(nx_gguf_add_tensor(w, "plain", NX_TYPE_F32, 1, ne1, plain) == NX_OK);
    CHECK(nx_gguf_add_tensor_fill(w, "ramp", NX_TYPE_F32, 2, ne, fill_ramp, &calls) == NX_OK);
    void *buf = NULL;
    size_t size = 0;
    nx_error e = {0};
    CHECK(nx_gguf_writer_write_mem(w, &buf, &size, &e) == NX_OK);
    CHECK_EQ_INT(calls, 1);   /* not called by the counting pass */
    char path[128];
    snprintf(path, sizeof path, "%s/fill.gguf", tmpdir);
    CHECK(nx_gguf_writer_write(w, path, &e) == NX_OK);
    CHECK_EQ_INT(calls, 2);
    nx_gguf *g = NULL;
    CHECK(nx_gguf_open(path, &g, &e) == NX_OK);
    if (g) {
        int64_t i = nx_gguf_find_tensor(g, "ramp");
        CHECK(i >= 0);
        const float *x = i >= 0 ? nx_gguf_tensor(g, i)->data : NULL;
        for (int j = 0; x && j < 24; j++) CHECK(x[j] == (float)j);
        i = nx_gguf_find_tensor(g, "plain");
        CHECK(i >= 0 && !memcmp(nx_gguf_tensor(g, i)->data, plain, sizeof plain));
        CHECK(size == nx_gguf_file_size(g));
        nx_gguf_close(g);
    }
    free(buf);
    CHECK(nx_gguf_add_tensor_fill(w, "bad", NX_TYPE_F32, 2, ne, fill_ramp, &calls) == NX_OK);
    CHECK(nx_gguf_add_tensor_fill(w, "null", NX_TYPE_F32, 2, ne, NULL, NULL) == NX_ERR_INVALID_ARG);
    nx_gguf_writer_free(w);
    w = nx_gguf_writer_create();
    CHECK(nx_gguf_add_tensor_fill(w, "bad", NX_TYPE_F32, 2, ne, fill_ramp, &calls) == NX_OK);
    snprintf(path, sizeof path, "%s/fill_bad.gguf", tmpdir);
    CHECK(nx_gguf_writer_write(w, path, &e) == NX_ERR_IO);
    CHECK(strstr(e.msg, "fill of bad failed") != NULL);
    CHECK(access(path, F_OK) != 0);
    buf = NULL;
    CHECK(nx_gguf_writer_write_mem(w, &buf, &size, &e) == NX_ERR_IO && buf == NULL);
    nx_gguf_writer_free(w);
    snprintf(path, sizeof path, "%s/fill.gguf", tmpdir);
    remove(path);
}

/* Piece-by-piece tensors: the stream writes in pieces of any size (here 5 floats, the last one
 * short); file and buffer outputs equal a plain tensor of the same values; too few or too many
 * bytes and a failing stream abort the write and leave no file. */
typedef struct { int calls; int mode; } stream_case;   /* mode 0 ok, 1 short, 2 long, 3 fail */

static nx_status stream_ramp(void *user, const char *name, nx_gguf_out *out, size_t nbytes, nx_error *err) {
    stream_case *c = user;
    c->calls++;
    if (c->mode == 3) return nx_fail(err, NX_ERR_IO, "stream of %s failed", name);
    size_t n = nbytes / 4 - (c->mode == 1) + (c->mode == 2);
    for (size_t i = 0; i < n; i += 5) {
        float piece[5];
        size_t k = n - i < 5 ? n - i : 5;
        for (size_t j = 0; j < k; j++) piece[j] = (float)(i + j);
        nx_status s = nx_gguf_out_write(out, piece, k * 4, err);
        if (s) return s;
    }
    return NX_OK;
}

static void test_writer_stream(void) {
    make_tmpdir();
    const int64_t ne[2] = {8, 3};
    float ramp[24];
    for (int i = 0; i < 24; i++) ramp[i] = (float)i;
    nx_gguf_writer *ref = nx_gguf_writer_create(), *w = nx_gguf_writer_create();
    stream_case c = {0, 0};
    CHECK(nx_gguf_add_tensor(ref, "ramp", NX_TYPE_F32, 2, ne, ramp) == NX_OK);
    CHECK(nx_gguf_add_tensor_stream(w, "ramp", NX_TYPE_F32, 2, ne, stream_ramp, &c) == NX_OK);
    CHECK(nx_gguf_add_tensor_stream(w, "null", NX_TYPE_F32, 2, ne, NULL, NULL) == NX_ERR_INVALID_ARG);
    nx_gguf_writer_free(w);
    w = nx_gguf_writer_create();
    CHECK(nx_gguf_add_tensor_stream(w, "ramp", NX_TYPE_F32, 2, ne, stream_ramp, &c) == NX_OK);
    void *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    nx_error e = {0};
    CHECK(nx_gguf_writer_write_mem(ref, &a, &na, &e) == NX_OK);
    CHECK(nx_gguf_writer_write_mem(w, &b, &nb, &e) == NX_OK);
    CHECK_EQ_INT(c.calls, 1);   /* not called by the counting pass */
    CHECK(na == nb && a && b && !memcmp(a, b, na));
    char path[128];
    snprintf(path, sizeof path, "%s/stream.gguf", tmpdir);
    CHECK(nx_gguf_writer_write(w, path, &e) == NX_OK);
    char *f = NULL;
    size_t nf = 0;
    CHECK(nx_read_file(path, 1 << 20, &f, &nf, &e) == NX_OK);
    CHECK(f && nf == na && !memcmp(f, a, na));
    free(f);
    free(a);
    free(b);
    remove(path);
    static const char *const want[] = {"", "streamed 92 of 96 bytes", "4 bytes past its size", "stream of ramp failed"};
    for (int mode = 1; mode <= 3; mode++) {
        c.mode = mode;
        CHECK(nx_gguf_writer_write(w, path, &e) != NX_OK);
        CHECK(strstr(e.msg, want[mode]) != NULL);
        CHECK(access(path, F_OK) != 0);
        b = NULL;
        CHECK(nx_gguf_writer_write_mem(w, &b, &nb, &e) != NX_OK && b == NULL);
    }
    nx_gguf_writer_free(w);
    nx_gguf_writer_free(ref);
}

int main(void) {
    RUN(test_roundtrip_values);
    RUN(test_roundtrip_tensors);
    RUN(test_writer_semantics);
    RUN(test_copy_kv);
    RUN(test_writer_fill);
    RUN(test_writer_stream);
    RUN(test_version2_and_nested);
    RUN(test_malformed_header);
    RUN(test_malformed_kv);
    RUN(test_malformed_tensors);
    RUN(test_every_prefix);
    RUN(test_random_corruption);
    RUN(test_files_and_splits);
    RUN(test_golden);
    RUN(test_cli);
    RUN(test_fuzz_seeds);
    if (tmpdir[0]) rmdir(tmpdir);
    return test_summary();
}
