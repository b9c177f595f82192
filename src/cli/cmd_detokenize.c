/*
 * cmd_detokenize.c — `nextn detokenize`: token ids -> text with a GGUF's tokenizer.
 *
 *   nextn detokenize -m FILE.gguf [--special] IDS...       ids as arguments: "1 2 3", "1,2,3" or "[1,2,3]"
 *   nextn detokenize -m FILE.gguf [--special] --json-in FILE   (JSON array of id arrays)
 *
 * Prints the text's bytes exactly (followed by a newline); with --json-in, a JSON array of
 * strings, one line per sequence. An id outside the vocabulary is an error, not a crash.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "core/io.h"
#include "tokenizer.h"

static void detok_usage(FILE *f) {
    fprintf(f, "usage: nextn detokenize -m FILE.gguf [--special] IDS...\n"
               "       nextn detokenize -m FILE.gguf [--special] --json-in FILE\n"
               "  IDS        token ids, e.g. 1 2 3 or 1,2,3 or [1,2,3]\n"
               "  --special  render control tokens (BOS, <|im_end|>, ...) as their text\n"
               "  --json-in  read a JSON array of id arrays ('-' = stdin), print a JSON array of strings\n");
}

/* Append every integer in s to v; false on anything that is not a number or separator. */
static bool parse_ids(const char *s, nx_token_vec *v) {
    const char *p = s;
    while (*p) {
        if (isspace((unsigned char)*p) || *p == ',' || *p == '[' || *p == ']') { p++; continue; }
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < INT32_MIN || x > INT32_MAX) return false;
        if (!(*end == '\0' || isspace((unsigned char)*end) || *end == ',' || *end == ']')) return false;
        int32_t id = (int32_t)x;
        int32_t *ni = v->n == v->cap ? realloc(v->ids, (v->cap ? v->cap * 2 : 64) * sizeof *ni) : v->ids;
        if (!ni) return false;
        if (v->n == v->cap) { v->ids = ni; v->cap = v->cap ? v->cap * 2 : 64; }
        v->ids[v->n++] = id;
        p = end;
    }
    return true;
}

static bool check_ids(const nx_tokenizer *t, const int32_t *ids, size_t n, nx_error *err) {
    int32_t nv = nx_tokenizer_n_vocab(t);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= nv) {
            nx_fail(err, NX_ERR_RANGE, "token id %d at position %zu is outside the vocabulary (0..%d)", ids[i], i, nv - 1);
            return false;
        }
    }
    return true;
}

int nx_cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *json_in = NULL;
    bool special = false;
    nx_token_vec v = {0};
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { detok_usage(stdout); return 0; }
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--json-in")) {
            if (i + 1 >= argc) { fprintf(stderr, "nextn detokenize: %s needs a value\n", a); nx_token_vec_free(&v); return 2; }
            if (!strcmp(a, "--json-in")) json_in = argv[++i];
            else model = argv[++i];
        } else if (a[0] == '-' && !isdigit((unsigned char)a[1])) {
            fprintf(stderr, "nextn detokenize: unknown option '%s'\n", a);
            detok_usage(stderr);
            nx_token_vec_free(&v);
            return 2;
        } else if (!parse_ids(a, &v)) {
            fprintf(stderr, "nextn detokenize: '%s' is not a list of token ids\n", a);
            nx_token_vec_free(&v);
            return 2;
        }
    }
    if (!model || (json_in && v.n)) { detok_usage(stderr); nx_token_vec_free(&v); return 2; }

    nx_error err = {0};
    nx_tokenizer *t = NULL;
    char *text = NULL, *buf = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    unsigned flags = special ? NX_DETOK_SPECIAL : 0;
    if (nx_tokenizer_load(model, &t, &err) != NX_OK) goto fail;
    if (!json_in) {
        if (!check_ids(t, v.ids, v.n, &err)) goto fail;
        if (nx_detokenize(t, v.ids, v.n, flags, &text, &len, &err) != NX_OK) goto fail;
        fwrite(text, 1, len, stdout);
        putchar('\n');
        goto done;
    }
    if (nx_read_file(json_in, (size_t)1 << 30, &buf, &len, &err) != NX_OK) goto fail;
    root = cJSON_ParseWithLength(buf, len);
    if (!cJSON_IsArray(root)) { nx_fail(&err, NX_ERR_FORMAT, "%s: expected a JSON array of id arrays", json_in); goto fail; }
    fputs("[\n", stdout);
    int n = cJSON_GetArraySize(root), k = 0;
    for (cJSON *seq = root->child; seq; seq = seq->next, k++) {
        if (!cJSON_IsArray(seq)) { nx_fail(&err, NX_ERR_FORMAT, "%s: element %d is not an array", json_in, k); goto fail; }
        v.n = 0;
        for (cJSON *x = seq->child; x; x = x->next) {
            double d = cJSON_IsNumber(x) ? x->valuedouble : -1.0;
            if (d < 0 || d > INT32_MAX || d != (double)(int32_t)d) { nx_fail(&err, NX_ERR_FORMAT, "%s: sequence %d holds a value that is not a token id", json_in, k); goto fail; }
            int32_t *ni = v.n == v.cap ? realloc(v.ids, (v.cap ? v.cap * 2 : 64) * sizeof *ni) : v.ids;
            if (!ni) { nx_fail(&err, NX_ERR_NOMEM, "out of memory"); goto fail; }
            if (v.n == v.cap) { v.ids = ni; v.cap = v.cap ? v.cap * 2 : 64; }
            v.ids[v.n++] = (int32_t)d;
        }
        if (!check_ids(t, v.ids, v.n, &err)) { nx_error_prefix(&err, "sequence %d", k); goto fail; }
        free(text);
        text = NULL;
        if (nx_detokenize(t, v.ids, v.n, flags, &text, &len, &err) != NX_OK) goto fail;
        nx_json_write_string(stdout, text, len);
        fputs(k + 1 < n ? ",\n" : "\n", stdout);
    }
    fputs("]\n", stdout);
    goto done;
fail:
    fprintf(stderr, "nextn detokenize: %s\n", err.msg);
    rc = 1;
done:
    if (fflush(stdout) != 0) rc = 1;
    cJSON_Delete(root);
    free(buf);
    free(text);
    nx_token_vec_free(&v);
    nx_tokenizer_free(t);
    return rc;
}
