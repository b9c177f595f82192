/* test_core.c — errors, logging, file reads, the type table, gen-model + model load. */
#include <unistd.h>
#include "core/error.h"
#include "core/io.h"
#include "core/log.h"
#include "genmodel.h"
#include "gguf.h"
#include "nextn.h"
#include "tensor.h"
#include <cjson/cJSON.h>
#include "test.h"

static void test_error_records(void) {
    nx_error e = {0};
    CHECK_EQ_INT(nx_fail(&e, NX_ERR_FORMAT, "offset %d: bad", 12), NX_ERR_FORMAT);
    CHECK_STR(e.msg, "offset 12: bad");
    nx_error_prefix(&e, "file.gguf");
    CHECK_STR(e.msg, "file.gguf: offset 12: bad");
    CHECK_EQ_INT(nx_error_publish(&e), NX_ERR_FORMAT);
    CHECK_STR(nx_last_error(), "file.gguf: offset 12: bad");
    CHECK_EQ_INT(nx_fail(NULL, NX_ERR_IO, "dropped"), NX_ERR_IO);
    CHECK_STR(nx_status_str(NX_ERR_RANGE), "NX_ERR_RANGE");
    CHECK(nx_version()[0] != '\0');
}

static int g_logged;
static void log_cb(nx_log_level l, const char *msg, void *u) { (void)l; (void)u; if (!strcmp(msg, "hello 7")) g_logged++; }

static void test_logging(void) {
    nx_log_set(log_cb, NULL, NX_LOG_INFO);
    NX_DEBUG("hello %d", 7);
    NX_INFO("hello %d", 7);
    nx_log_set(NULL, NULL, NX_LOG_INFO);
    CHECK_EQ_INT(g_logged, 1);
}

/* The line formats of core/log.h: text key=value with quoting, json one object that parses. */
static void test_log_render(void) {
    nx_log_field f[] = {NX_LF_STR("method", "POST"), NX_LF_STR("path", "/v1/x y"), NX_LF_INT("status", 200),
                        NX_LF_NUM("ms", 12.5), NX_LF_STR("error", "bad \"q\"=\\"), NX_LF_STR("none", NULL),
                        NX_LF_NUM("nan", NAN)};
    char line[512];
    double t = 1764620069.125;   /* 2025-12-01T20:14:29.125Z */
    nx_log_render(line, sizeof line, NX_LOG_TEXT, false, NX_LOG_INFO, t, "access", NULL, f, 7);
    CHECK_STR(line, "access method=POST path=\"/v1/x y\" status=200 ms=12.5 error=\"bad \\\"q\\\"=\\\\\" none=\"\" nan=-");
    nx_log_render(line, sizeof line, NX_LOG_TEXT, true, NX_LOG_WARN, t, NULL, "plain", NULL, 0);
    CHECK_STR(line, "2025-12-01T20:14:29.125Z nextn warn: plain");
    nx_log_render(line, sizeof line, NX_LOG_JSON, true, NX_LOG_ERROR, t, "access", NULL, f, 7);
    cJSON *j = cJSON_Parse(line);
    CHECK_MSG(j != NULL, "json line: %s", line);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "time")), "2025-12-01T20:14:29.125Z");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "level")), "error");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "event")), "access");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "path")), "/v1/x y");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "error")), "bad \"q\"=\\");
    CHECK_EQ_INT(cJSON_GetObjectItem(j, "status")->valueint, 200);
    CHECK_NEAR(cJSON_GetObjectItem(j, "ms")->valuedouble, 12.5, 0);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "none")) && cJSON_IsNull(cJSON_GetObjectItem(j, "nan")));
    cJSON_Delete(j);
    nx_log_render(line, sizeof line, NX_LOG_JSON, false, NX_LOG_INFO, t, NULL, "tab\there\x01", NULL, 0);
    j = cJSON_Parse(line);
    CHECK(j && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "msg")), "tab\there\x01"));
    cJSON_Delete(j);
    /* truncation keeps a terminated string */
    char small[16];
    size_t n = nx_log_render(small, sizeof small, NX_LOG_TEXT, false, NX_LOG_INFO, t, "access", NULL, f, 7);
    CHECK(n == 15 && strlen(small) == 15);
}

static void test_read_file_limit(void) {
    char path[] = "/tmp/nx_test_core_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, "0123456789", 10) == 10);
    close(fd);
    char *buf = NULL;
    size_t len = 0;
    nx_error e = {0};
    CHECK_EQ_INT(nx_read_file(path, 100, &buf, &len, &e), NX_OK);
    CHECK_EQ_INT(len, 10);
    CHECK_STR(buf, "0123456789");
    free(buf);
    CHECK_EQ_INT(nx_read_file(path, 4, &buf, &len, &e), NX_ERR_RANGE);
    CHECK_EQ_INT(nx_read_file("/nonexistent/x", 4, &buf, &len, &e), NX_ERR_IO);
    unlink(path);
}

static void test_type_table(void) {
    CHECK_EQ_INT(nx_row_size(NX_TYPE_Q8_0, 64), 68);
    CHECK_EQ_INT(nx_row_size(NX_TYPE_Q4_K, 512), 288);
    CHECK_EQ_INT(nx_row_size(NX_TYPE_Q4_K, 100), 0);
    CHECK_EQ_INT(nx_row_size(NX_TYPE_F16, 3), 6);
    CHECK(nx_type_info(4) == NULL);   /* removed Q4_2 */
    CHECK(nx_type_info(1000) == NULL);
    nx_type t;
    CHECK(nx_type_from_name("Q4_K", &t) && t == NX_TYPE_Q4_K);
    CHECK(nx_type_from_name("bf16", &t) && t == NX_TYPE_BF16);
    CHECK(!nx_type_from_name("q9_9", &t));
    nx_tensor x;
    int64_t ne[2] = {64, 3};
    CHECK(nx_tensor_init(&x, "x", NX_TYPE_Q8_0, 2, ne, NULL));
    CHECK_EQ_INT(x.nbytes, 3 * 68);
    CHECK_EQ_INT(nx_tensor_nrows(&x), 3);
    int64_t bad[2] = {33, 1};
    CHECK(!nx_tensor_init(&x, "x", NX_TYPE_Q8_0, 2, bad, NULL));
}

static void test_genmodel_and_load(void) {
    char path[] = "/tmp/nx_test_gen_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    nx_error e = {0};
    nx_genmodel_opts o = {.arch = "llama", .seed = 42, .wtype = NX_TYPE_Q8_0, .out_path = path,
                          .config_json = "{\"n_embd\":64,\"n_layer\":2,\"n_head\":4,\"n_head_kv\":2,\"n_ff\":128,\"n_vocab\":300}"};
    CHECK_MSG(nx_genmodel_write(&o, &e) == NX_OK, "%s", e.msg);
    nx_gguf *g = NULL;
    CHECK_MSG(nx_gguf_open(path, &g, &e) == NX_OK, "%s", e.msg);
    if (g) {
        int64_t v = 0;
        CHECK(nx_gguf_get_int(g, "llama.block_count", &v) && v == 2);
        int64_t ti = nx_gguf_find_tensor(g, "blk.1.ffn_down.weight");
        CHECK(ti >= 0);
        if (ti >= 0) {
            const nx_tensor *t = nx_gguf_tensor(g, ti);
            CHECK_EQ_INT(t->type, NX_TYPE_Q8_0);
            CHECK_EQ_INT(t->ne[0], 128);
            CHECK_EQ_INT(t->ne[1], 64);
        }
        int64_t ki = nx_gguf_find_key(g, "tokenizer.ggml.tokens");
        CHECK(ki >= 0 && nx_gguf_arr_n(g, ki) == 300);
        nx_gguf_close(g);
    }
    nx_model *m = NULL;
    CHECK_MSG(nx_model_load(path, NULL, &m) == NX_OK, "%s", nx_last_error());
    if (m) {
        CHECK_STR(nx_model_arch(m), "llama");
        char buf[1024];
        nx_model_describe(m, buf, sizeof buf);
        CHECK(strstr(buf, "q8_0") != NULL);
        nx_model_free(m);
    }
    /* same seed -> same bytes */
    char path2[] = "/tmp/nx_test_gen_XXXXXX";
    fd = mkstemp(path2);
    close(fd);
    o.out_path = path2;
    CHECK(nx_genmodel_write(&o, &e) == NX_OK);
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    CHECK(nx_read_file(path, 1 << 26, &a, &la, &e) == NX_OK);
    CHECK(nx_read_file(path2, 1 << 26, &b, &lb, &e) == NX_OK);
    CHECK(a && b && la == lb && memcmp(a, b, la) == 0);
    free(a);
    free(b);
    /* bad inputs */
    o.arch = "nope";
    CHECK_EQ_INT(nx_genmodel_write(&o, &e), NX_ERR_UNSUPPORTED);
    CHECK(strstr(e.msg, "llama") != NULL);
    o.arch = "llama";
    o.config_json = "{\"n_head\":3,\"n_head_kv\":2}";
    CHECK_EQ_INT(nx_genmodel_write(&o, &e), NX_ERR_INVALID_ARG);
    o.config_json = "[1,2";
    CHECK_EQ_INT(nx_genmodel_write(&o, &e), NX_ERR_FORMAT);
    CHECK_EQ_INT(nx_model_load("/nonexistent.gguf", NULL, &m), NX_ERR_IO);
    unlink(path);
    unlink(path2);
}

int main(void) {
    RUN(test_error_records);
    RUN(test_logging);
    RUN(test_log_render);
    RUN(test_read_file_limit);
    RUN(test_type_table);
    RUN(test_genmodel_and_load);
    return test_summary();
}
