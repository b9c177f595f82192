/*
 * cmd_gguf_info.c — `nextn gguf-info FILE [--tensors] [--json] [--part]`: a GGUF file's header,
 * every key/value (long arrays and strings abbreviated in text mode), an optional tensor
 * table, and a parameter/byte summary per tensor type. --json prints one JSON document with
 * the same content (arrays as {type, count, head}; strings as UTF-8 with bad bytes replaced
 * by U+FFFD). Reads only; errors are one line "nextn gguf-info: <message>" and exit 1.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "gguf.h"

#define TEXT_STR_MAX   60   /* characters of a string value shown in text mode */
#define TEXT_ELEM_STR  24   /* ... of one element of a string array */
#define TEXT_HEAD_NUM  8    /* numeric array elements shown in text mode */
#define TEXT_HEAD_STR  5    /* string array elements shown in text mode */
#define JSON_HEAD      8    /* array elements in the JSON "head" */

/* ===== Strings ===== */

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

/* Print a GGUF string quoted and escaped, cut after max characters. */
static void print_quoted(const char *str, uint64_t len, size_t max) {
    const unsigned char *s = (const unsigned char *)str;
    size_t chars = 0;
    uint64_t i = 0;
    putchar('"');
    while (i < len && chars < max) {
        unsigned c = s[i];
        size_t k = utf8_seq(s + i, (size_t)(len - i < 4 ? len - i : 4));
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7f || k == 0) printf("\\x%02x", c);
        else { fwrite(s + i, 1, k, stdout); i += k; chars++; continue; }
        i++;
        chars++;
    }
    putchar('"');
    if (i < len) printf("... (%" PRIu64 " bytes)", len);
}

/* A NUL-terminated valid UTF-8 copy for cJSON: invalid bytes and NUL become U+FFFD. */
static char *utf8_clean(const char *str, uint64_t len) {
    const unsigned char *s = (const unsigned char *)str;
    if (len > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc((size_t)len * 3 + 1), *o = out;
    if (!out) return NULL;
    for (uint64_t i = 0; i < len;) {
        size_t k = s[i] ? utf8_seq(s + i, (size_t)(len - i < 4 ? len - i : 4)) : 0;
        if (k) { memcpy(o, s + i, k); o += k; i += k; }
        else { memcpy(o, "\xEF\xBF\xBD", 3); o += 3; i++; }
    }
    *o = '\0';
    return out;
}

static cJSON *json_str(const char *s, uint64_t len) {
    char *c = utf8_clean(s, len);
    cJSON *j = cJSON_CreateString(c ? c : "");
    free(c);
    return j;
}

/* Integers beyond 2^53 are not exact as JSON numbers: emit them as strings. */
static cJSON *json_u64(uint64_t v) {
    if (v <= (1ull << 53)) return cJSON_CreateNumber((double)v);
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, v);
    return cJSON_CreateString(b);
}

static cJSON *json_i64(int64_t v) {
    if (v >= -(1ll << 53) && v <= (1ll << 53)) return cJSON_CreateNumber((double)v);
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    return cJSON_CreateString(b);
}

/* ===== Values ===== */

/* The shortest decimal text that reads back as the same f32 (1e-06, not 9.99999997e-07). */
static void f32_text(float f, char *buf, size_t cap) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, f);
        if (strtof(buf, NULL) == f) return;
    }
}

static void f64_text(double d, char *buf, size_t cap) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) return;
    }
}

/* One numeric element (scalar or array element) in raw little-endian form. */
static void print_num(nx_gguf_vtype t, const unsigned char *p) {
    uint64_t u = 0;
    memcpy(&u, p, t == NX_GGUF_U64 || t == NX_GGUF_I64 || t == NX_GGUF_F64 ? 8
                  : t == NX_GGUF_U32 || t == NX_GGUF_I32 || t == NX_GGUF_F32 ? 4
                  : t == NX_GGUF_U16 || t == NX_GGUF_I16 ? 2 : 1);
    switch (t) {
    case NX_GGUF_U8: case NX_GGUF_U16: case NX_GGUF_U32: case NX_GGUF_U64: printf("%" PRIu64, u); break;
    case NX_GGUF_I8:  printf("%d", (int8_t)u); break;
    case NX_GGUF_I16: printf("%d", (int16_t)u); break;
    case NX_GGUF_I32: printf("%" PRId32, (int32_t)u); break;
    case NX_GGUF_I64: printf("%" PRId64, (int64_t)u); break;
    case NX_GGUF_BOOL: fputs(u ? "true" : "false", stdout); break;
    case NX_GGUF_F32: { float f; char b[40]; memcpy(&f, p, 4); f32_text(f, b, sizeof b); fputs(b, stdout); break; }
    case NX_GGUF_F64: { double d; char b[40]; memcpy(&d, p, 8); f64_text(d, b, sizeof b); fputs(b, stdout); break; }
    default: fputs("?", stdout);
    }
}

static cJSON *json_num(nx_gguf_vtype t, const unsigned char *p) {
    uint64_t u = 0;
    char b[40];
    switch (t) {
    case NX_GGUF_U8:  return cJSON_CreateNumber(p[0]);
    case NX_GGUF_I8:  return cJSON_CreateNumber((int8_t)p[0]);
    case NX_GGUF_BOOL: return cJSON_CreateBool(p[0] != 0);
    case NX_GGUF_U16: memcpy(&u, p, 2); return cJSON_CreateNumber((double)u);
    case NX_GGUF_I16: memcpy(&u, p, 2); return cJSON_CreateNumber((int16_t)u);
    case NX_GGUF_U32: memcpy(&u, p, 4); return cJSON_CreateNumber((double)u);
    case NX_GGUF_I32: memcpy(&u, p, 4); return cJSON_CreateNumber((int32_t)u);
    case NX_GGUF_U64: memcpy(&u, p, 8); return json_u64(u);
    case NX_GGUF_I64: memcpy(&u, p, 8); return json_i64((int64_t)u);
    case NX_GGUF_F32: {
        float f;
        memcpy(&f, p, 4);
        f32_text(f, b, sizeof b);
        return cJSON_CreateNumber(strtod(b, NULL));
    }
    case NX_GGUF_F64: { double d; memcpy(&d, p, 8); return cJSON_CreateNumber(d); }
    default: return cJSON_CreateNull();
    }
}

static size_t elem_size(nx_gguf_vtype t) {
    switch (t) {
    case NX_GGUF_U8: case NX_GGUF_I8: case NX_GGUF_BOOL: return 1;
    case NX_GGUF_U16: case NX_GGUF_I16: return 2;
    case NX_GGUF_U32: case NX_GGUF_I32: case NX_GGUF_F32: return 4;
    case NX_GGUF_U64: case NX_GGUF_I64: case NX_GGUF_F64: return 8;
    default: return 0;
    }
}

static void print_value(const nx_gguf *g, int64_t i) {
    nx_gguf_vtype t = nx_gguf_kv_type(g, i);
    uint64_t len, n;
    const char *s;
    if (t == NX_GGUF_STRING) {
        s = nx_gguf_kv_str(g, i, &len);
        print_quoted(s, len, TEXT_STR_MAX);
        return;
    }
    if (t != NX_GGUF_ARRAY) {
        print_num(t, nx_gguf_kv_raw(g, i, NULL));
        return;
    }
    nx_gguf_vtype et = nx_gguf_arr_type(g, i);
    n = nx_gguf_arr_n(g, i);
    if (et == NX_GGUF_ARRAY) {
        printf("[%" PRIu64 " nested arrays, not shown]", n);
        return;
    }
    uint64_t head = et == NX_GGUF_STRING ? TEXT_HEAD_STR : TEXT_HEAD_NUM;
    putchar('[');
    for (uint64_t j = 0; j < n && j < head; j++) {
        if (j) fputs(", ", stdout);
        if (et == NX_GGUF_STRING) {
            s = nx_gguf_arr_str(g, i, j, &len);
            print_quoted(s, len, TEXT_ELEM_STR);
        } else {
            print_num(et, (const unsigned char *)nx_gguf_arr_data(g, i) + j * elem_size(et));
        }
    }
    if (n > head) printf(", ...] (%" PRIu64 " items)", n);
    else putchar(']');
}

static cJSON *json_value(const nx_gguf *g, int64_t i) {
    nx_gguf_vtype t = nx_gguf_kv_type(g, i);
    uint64_t len;
    const char *s;
    if (t == NX_GGUF_STRING) {
        s = nx_gguf_kv_str(g, i, &len);
        return json_str(s, len);
    }
    if (t != NX_GGUF_ARRAY) return json_num(t, nx_gguf_kv_raw(g, i, NULL));
    nx_gguf_vtype et = nx_gguf_arr_type(g, i);
    uint64_t n = nx_gguf_arr_n(g, i);
    cJSON *o = cJSON_CreateObject(), *head = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "type", nx_gguf_vtype_name(et));
    cJSON_AddItemToObject(o, "count", json_u64(n));
    if (et != NX_GGUF_ARRAY)
        for (uint64_t j = 0; j < n && j < JSON_HEAD; j++) {
            if (et == NX_GGUF_STRING) {
                s = nx_gguf_arr_str(g, i, j, &len);
                cJSON_AddItemToArray(head, json_str(s, len));
            } else {
                cJSON_AddItemToArray(head, json_num(et, (const unsigned char *)nx_gguf_arr_data(g, i) + j * elem_size(et)));
            }
        }
    cJSON_AddItemToObject(o, "head", head);
    return o;
}

static const char *type_label(const nx_gguf *g, int64_t i, char *buf, size_t cap) {
    nx_gguf_vtype t = nx_gguf_kv_type(g, i);
    if (t != NX_GGUF_ARRAY) return nx_gguf_vtype_name(t);
    snprintf(buf, cap, "[%s]", nx_gguf_vtype_name(nx_gguf_arr_type(g, i)));
    return buf;
}

/* ===== Tensors ===== */

typedef struct type_sum {
    int64_t  tensors, params;
    uint64_t bytes;
} type_sum;

static void summarise(const nx_gguf *g, type_sum sums[NX_TYPE_COUNT], type_sum *total) {
    memset(sums, 0, NX_TYPE_COUNT * sizeof *sums);
    memset(total, 0, sizeof *total);
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        type_sum *s = &sums[t->type];
        int64_t nel = nx_tensor_nelements(t);
        s->tensors++, s->params += nel, s->bytes += t->nbytes;
        total->tensors++, total->params += nel, total->bytes += t->nbytes;
    }
}

static void shape_str(const nx_tensor *t, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int d = 0; d < t->n_dims && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static const char *human_bytes(uint64_t b, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int k = 0;
    while (v >= 1024 && k < 4) v /= 1024, k++;
    if (k == 0) snprintf(buf, cap, "%" PRIu64 " B", b);
    else snprintf(buf, cap, "%.2f %s", v, u[k]);
    return buf;
}

/* ===== Output ===== */

static void print_text(const nx_gguf *g, const char *path, bool tensors, bool single_part) {
    char hb[32], tb[32];
    int n_splits = nx_gguf_n_splits(g);
    printf("file:       %s%s\n", path, single_part ? "  (this part only)" : "");
    printf("version:    %u\n", nx_gguf_version(g));
    printf("tensors:    %" PRId64 "\n", nx_gguf_n_tensors(g));
    printf("key/values: %" PRId64 "\n", nx_gguf_n_kv(g));
    printf("alignment:  %u\n", nx_gguf_alignment(g));
    printf("splits:     %d\n", n_splits);
    if (n_splits > 1)
        for (int s = 0; s < n_splits; s++) printf("  part %d:   %s\n", s + 1, nx_gguf_split_file(g, s));
    printf("file size:  %zu bytes (%s)\n", nx_gguf_file_size(g), human_bytes(nx_gguf_file_size(g), hb, sizeof hb));
    if (n_splits == 1) printf("data start: %" PRIu64 "\n", nx_gguf_data_offset(g, 0));

    printf("\nkey/values:\n");
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) {
        printf("  %4" PRId64 "  %-9s %s = ", i, type_label(g, i, tb, sizeof tb), nx_gguf_key(g, i));
        print_value(g, i);
        putchar('\n');
    }

    if (tensors && nx_gguf_n_tensors(g)) {
        printf("\ntensors:\n");
        printf("  %5s  %-8s %-24s %s%12s %12s  %s\n", "index", "type", "shape", n_splits > 1 ? "part " : "",
               "offset", "bytes", "name");
        for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
            const nx_tensor *t = nx_gguf_tensor(g, i);
            char sh[96];
            shape_str(t, sh, sizeof sh);
            printf("  %5" PRId64 "  %-8s %-24s ", i, nx_type_name(t->type), sh);
            if (n_splits > 1) printf("%4d ", nx_gguf_tensor_split(g, i) + 1);
            printf("%12" PRIu64 " %12zu  %s\n", nx_gguf_tensor_offset(g, i), t->nbytes, t->name);
        }
    }

    type_sum sums[NX_TYPE_COUNT], total;
    summarise(g, sums, &total);
    printf("\nsummary:\n  %-8s %8s %14s %14s\n", "type", "tensors", "params", "bytes");
    for (int k = 0; k < NX_TYPE_COUNT; k++)
        if (sums[k].tensors)
            printf("  %-8s %8" PRId64 " %14" PRId64 " %14" PRIu64 "\n", nx_type_name((uint32_t)k), sums[k].tensors,
                   sums[k].params, sums[k].bytes);
    printf("  %-8s %8" PRId64 " %14" PRId64 " %14" PRIu64 "  (%.3f M params, %s)\n", "total", total.tensors,
           total.params, total.bytes, (double)total.params / 1e6, human_bytes(total.bytes, hb, sizeof hb));
}

static int print_json(const nx_gguf *g, const char *path, bool single_part) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return 1;
    int n_splits = nx_gguf_n_splits(g);
    cJSON_AddStringToObject(root, "file", path);
    cJSON_AddBoolToObject(root, "single_part", single_part);
    cJSON_AddNumberToObject(root, "version", nx_gguf_version(g));
    cJSON_AddNumberToObject(root, "n_tensors", (double)nx_gguf_n_tensors(g));
    cJSON_AddNumberToObject(root, "n_kv", (double)nx_gguf_n_kv(g));
    cJSON_AddNumberToObject(root, "alignment", nx_gguf_alignment(g));
    cJSON_AddNumberToObject(root, "n_splits", n_splits);
    cJSON *parts = cJSON_AddArrayToObject(root, "split_files");
    for (int s = 0; s < n_splits; s++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "path", nx_gguf_split_file(g, s));
        cJSON_AddItemToObject(p, "data_offset", json_u64(nx_gguf_data_offset(g, s)));
        cJSON_AddItemToArray(parts, p);
    }
    cJSON_AddItemToObject(root, "file_size", json_u64(nx_gguf_file_size(g)));

    cJSON *kv = cJSON_AddArrayToObject(root, "kv");
    for (int64_t i = 0; i < nx_gguf_n_kv(g); i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "key", nx_gguf_key(g, i));
        cJSON_AddStringToObject(o, "type", nx_gguf_vtype_name(nx_gguf_kv_type(g, i)));
        cJSON_AddItemToObject(o, "value", json_value(g, i));
        cJSON_AddItemToArray(kv, o);
    }

    cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
    for (int64_t i = 0; i < nx_gguf_n_tensors(g); i++) {
        const nx_tensor *t = nx_gguf_tensor(g, i);
        cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "type", nx_type_name(t->type));
        for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(shape, json_i64(t->ne[d]));
        cJSON_AddItemToObject(o, "shape", shape);
        cJSON_AddNumberToObject(o, "split", nx_gguf_tensor_split(g, i));
        cJSON_AddItemToObject(o, "offset", json_u64(nx_gguf_tensor_offset(g, i)));
        cJSON_AddItemToObject(o, "bytes", json_u64(t->nbytes));
        cJSON_AddItemToArray(ts, o);
    }

    type_sum sums[NX_TYPE_COUNT], total;
    summarise(g, sums, &total);
    cJSON *sum = cJSON_AddObjectToObject(root, "summary"), *types = cJSON_CreateArray();
    cJSON_AddItemToObject(sum, "n_params", json_i64(total.params));
    cJSON_AddItemToObject(sum, "n_bytes", json_u64(total.bytes));
    for (int k = 0; k < NX_TYPE_COUNT; k++) {
        if (!sums[k].tensors) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", nx_type_name((uint32_t)k));
        cJSON_AddNumberToObject(o, "tensors", (double)sums[k].tensors);
        cJSON_AddItemToObject(o, "params", json_i64(sums[k].params));
        cJSON_AddItemToObject(o, "bytes", json_u64(sums[k].bytes));
        cJSON_AddItemToArray(types, o);
    }
    cJSON_AddItemToObject(sum, "types", types);

    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "nextn gguf-info: out of memory while printing JSON\n");
        return 1;
    }
    puts(text);
    free(text);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: nextn gguf-info FILE [--tensors] [--json] [--part]\n"
               "  --tensors  also print the tensor table (index, type, shape, offset, bytes, name)\n"
               "  --json     print one JSON document (tensors always included)\n"
               "  --part     open only this file even if it is part of a split model\n");
}

int nx_cmd_gguf_info(int argc, char **argv) {
    const char *path = NULL;
    bool tensors = false, json = false, part = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tensors")) tensors = true;
        else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--part")) part = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "nextn gguf-info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "nextn gguf-info: more than one FILE given\n");
            usage(stderr);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) { usage(stderr); return 2; }

    /* A later part of a split model is shown on its own rather than refused. */
    int no = 0, count = 0;
    if (nx_gguf_split_path(path, &no, &count, NULL) && count > 1 && no != 1) part = true;

    nx_error err = {0};
    nx_gguf *g = NULL;
    nx_status st = part ? nx_gguf_open_part(path, &g, &err) : nx_gguf_open(path, &g, &err);
    if (st) {
        fprintf(stderr, "nextn gguf-info: %s\n", err.msg[0] ? err.msg : nx_status_str(st));
        return 1;
    }
    int rc = 0;
    if (json) rc = print_json(g, path, part);
    else print_text(g, path, tensors, part);
    nx_gguf_close(g);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "nextn gguf-info: cannot write output\n");
        rc = 1;
    }
    return rc;
}
