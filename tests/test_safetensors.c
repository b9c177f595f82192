/*
 * test_safetensors.c — the safetensors reader (src/safetensors.h): values of every float dtype read
 * back (whole, as double, by range), the header checks (length, JSON, dtype, shape, offsets, sizes,
 * duplicates) each with its message, and sharded directories (index, missing shard, a tensor the
 * index puts in the wrong file).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fp16.h"
#include "safetensors.h"
#include "test.h"

/* A file image: 8-byte length, the header, the data. */
static size_t image(unsigned char *buf, const char *hdr, const void *data, size_t n) {
    uint64_t len = strlen(hdr);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
    memcpy(buf + 8, hdr, len);
    if (n) memcpy(buf + 8 + len, data, n);
    return 8 + len + n;
}

static void test_values(void) {
    unsigned char data[64], buf[512];
    float f[3] = {1.5f, -2.25f, 1e-3f};
    nx_half h[2] = {nx_f32_to_half(0.5f), nx_f32_to_half(-3.0f)};
    nx_bf16 b[2] = {nx_f32_to_bf16(2.0f), nx_f32_to_bf16(-0.125f)};
    double d[1] = {0.1};
    memcpy(data, f, 12);
    memcpy(data + 12, h, 4);
    memcpy(data + 16, b, 4);
    memcpy(data + 20, d, 8);
    size_t n = image(buf, "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                          "\"h\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[12,16]},"
                          "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[16,20]},"
                          "\"d\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[20,28]}}", data, 28);
    nx_safetensors *st = NULL;
    nx_error e = {0};
    REQUIRE_MSG(nx_st_open_memory(buf, n, &st, &e) == NX_OK, "%s", e.msg);
    CHECK_EQ_INT(nx_st_n_tensors(st), 4);
    int64_t ia = nx_st_find(st, "a"), ih = nx_st_find(st, "h"), ib = nx_st_find(st, "b"), id = nx_st_find(st, "d");
    CHECK(ia >= 0 && ih >= 0 && ib >= 0 && id >= 0 && nx_st_find(st, "zz") < 0);
    const nx_st_tensor *th = nx_st_tensor_at(st, ih);
    CHECK(th->n_dims == 2 && th->shape[0] == 1 && th->shape[1] == 2 && th->numel == 2 && th->dtype == NX_ST_F16);
    CHECK(nx_st_tensor_at(st, id)->n_dims == 0 && nx_st_tensor_at(st, id)->numel == 1);
    float o[3];
    double od[3];
    CHECK(nx_st_read_f32(st, ia, o, &e) == NX_OK && o[0] == 1.5f && o[1] == -2.25f && o[2] == 1e-3f);
    CHECK(nx_st_read_f32_range(st, ia, 1, 2, o, &e) == NX_OK && o[0] == -2.25f && o[1] == 1e-3f);
    CHECK(nx_st_read_f32_range(st, ia, 2, 2, o, &e) == NX_ERR_INVALID_ARG);
    CHECK(nx_st_read_f32(st, ih, o, &e) == NX_OK && o[0] == 0.5f && o[1] == -3.0f);
    CHECK(nx_st_read_f32(st, ib, o, &e) == NX_OK && o[0] == 2.0f && o[1] == -0.125f);
    CHECK(nx_st_read_f64(st, id, od, &e) == NX_OK && od[0] == 0.1);
    CHECK(nx_st_read_f64(st, ia, od, &e) == NX_OK && od[2] == (double)1e-3f);
    nx_st_close(st);
    /* an integer tensor parses but does not convert */
    n = image(buf, "{\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", data, 8);
    REQUIRE_MSG(nx_st_open_memory(buf, n, &st, &e) == NX_OK, "%s", e.msg);
    CHECK(nx_st_read_f32(st, 0, o, &e) == NX_ERR_UNSUPPORTED && strstr(e.msg, "I64"));
    nx_st_close(st);
}

static void expect_bad(const char *hdr, size_t data_len, const char *msg) {
    unsigned char buf[1024], data[64] = {0};
    size_t n = image(buf, hdr, data, data_len);
    nx_safetensors *st = NULL;
    nx_error e = {0};
    nx_status s = nx_st_open_memory(buf, n, &st, &e);
    CHECK_MSG(s == NX_ERR_FORMAT && !st && strstr(e.msg, msg), "header %s: status %d, message '%s' (want '%s')", hdr, s,
              e.msg, msg);
    nx_st_close(st);
}

static void test_bad_headers(void) {
    expect_bad("[1,2]", 0, "not a JSON object");
    expect_bad("{\"a\":", 0, "not a JSON object");
    expect_bad("{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "no known dtype");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "bad dimension");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "bad dimension");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "at most 8");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,0]}}", 8, "bad data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the data section");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "need 12");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}", 8, "more than");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
               "\"data_offsets\":[4,8]}}", 8, "appears twice");
    expect_bad("{\"a\":3}", 0, "not an object");
    /* the length itself */
    unsigned char buf[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    nx_safetensors *st = NULL;
    nx_error e = {0};
    CHECK(nx_st_open_memory(buf, 10, &st, &e) == NX_ERR_FORMAT && strstr(e.msg, "header length"));
    CHECK(nx_st_open_memory(buf, 5, &st, &e) == NX_ERR_FORMAT && strstr(e.msg, "too short"));
    /* an empty header object is a valid file with no tensors */
    size_t n = image(buf, "{}", NULL, 0);
    CHECK(nx_st_open_memory(buf, n, &st, &e) == NX_OK && nx_st_n_tensors(st) == 0);
    nx_st_close(st);
}

static void write_file(const char *path, const unsigned char *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(buf, 1, n, f);
        fclose(f);
    }
}

static void test_shards(void) {
    char dir[] = "/tmp/nx_test_st.XXXXXX";
    REQUIRE_MSG(mkdtemp(dir) != NULL, "mkdtemp");
    char p1[256], p2[256], pi[256];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    snprintf(pi, sizeof pi, "%s/model.safetensors.index.json", dir);
    unsigned char buf[512];
    float v[2] = {7.0f, 8.0f};
    size_t n = image(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", v, 4);
    write_file(p1, buf, n);
    n = image(buf, "{\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", v + 1, 4);
    write_file(p2, buf, n);
    const char *idx = "{\"metadata\":{},\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                      "\"y\":\"model-00002-of-00002.safetensors\"}}";
    write_file(pi, (const unsigned char *)idx, strlen(idx));
    nx_safetensors *st = NULL;
    nx_error e = {0};
    REQUIRE_MSG(nx_st_open_dir(dir, &st, &e) == NX_OK, "%s", e.msg);
    CHECK_EQ_INT(nx_st_n_files(st), 2);
    float o = 0;
    CHECK(nx_st_read_f32(st, nx_st_find(st, "y"), &o, &e) == NX_OK && o == 8.0f);
    CHECK(nx_st_tensor_at(st, nx_st_find(st, "y"))->file == 1 && nx_st_total_bytes(st) == 8);
    nx_st_close(st);
    /* the index names the wrong file for y */
    const char *wrong = "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\",\"y\":\"model-00001-of-00002.safetensors\"}}";
    write_file(pi, (const unsigned char *)wrong, strlen(wrong));
    CHECK(nx_st_open_dir(dir, &st, &e) == NX_ERR_FORMAT && strstr(e.msg, "does not hold it") && !st);
    /* a missing shard */
    write_file(pi, (const unsigned char *)idx, strlen(idx));
    unlink(p2);
    CHECK(nx_st_open_dir(dir, &st, &e) == NX_ERR_IO && strstr(e.msg, "missing shard") && !st);
    /* no index, no model.safetensors */
    unlink(pi);
    unlink(p1);
    CHECK(nx_st_open_dir(dir, &st, &e) == NX_ERR_IO && strstr(e.msg, "neither model.safetensors"));
    rmdir(dir);
}

int main(void) {
    RUN(test_values);
    RUN(test_bad_headers);
    RUN(test_shards);
    return test_summary();
}
