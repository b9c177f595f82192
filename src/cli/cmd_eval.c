/*
 * cmd_eval.c — `nextn eval`: the golden interface (issue 4 item 7).
 *
 *   nextn eval -m FILE.gguf --prompt-ids 1,2,3 | --prompt-ids-file F [--logits-out FILE.f32]
 *              [--hidden-out FILE.f32] [--greedy N] [--greedy-logits-out FILE.f32] [--batch B]
 *              [-ub N] [-t N] [-c N] [-ctk f32|f16] [-ctv f32|f16]
 *
 * Decodes the prompt (one batch, or chunks of B rows; --batch 1 = token by token) at positions
 * 0..n-1 of sequence 0, writes the full-vocab logits of every prompt row ([n][n_vocab] float32
 * little-endian) and the post-norm hidden of every row ([n][n_embd]), then continues greedily
 * for N tokens (one decode per token) and prints them as a JSON array on stdout. Weights stay
 * as stored; the KV cache is F32 unless -ctk / -ctv say otherwise.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "core/io.h"
#include "kernels/ops.h"
#include "nextn.h"

static void eval_usage(FILE *f) {
    fprintf(f,
            "usage: nextn eval -m FILE.gguf (--prompt-ids 1,2,3 | --prompt-ids-file F) [--logits-out FILE.f32]\n"
            "                  [--hidden-out FILE.f32] [--greedy N] [--greedy-logits-out FILE.f32] [--batch B]\n"
            "                  [-ub N] [-t N] [-c N] [-ctk f32|f16] [-ctv f32|f16]\n"
            "Prompt logits [n][n_vocab] and post-norm hidden [n][n_embd] as float32 LE; the greedy continuation\n"
            "is printed as a JSON array of ids. --batch B decodes the prompt in chunks of B (1 = token by token).\n");
}

/* Ids separated by commas / whitespace (a JSON array's brackets are accepted too). */
static int parse_ids(const char *s, int **out, int *n_out) {
    int cap = 64, n = 0;
    int *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    const char *p = s;
    for (;;) {
        while (*p && (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '[' || *p == ']')) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff) { free(ids); return -1; }
        if (n == cap) {
            cap *= 2;
            int *q = realloc(ids, (size_t)cap * sizeof *ids);
            if (!q) { free(ids); return -1; }
            ids = q;
        }
        ids[n++] = (int)v;
        p = end;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

static int parse_cache(const char *v, nx_cache_type *t) {
    if (!strcmp(v, "f32")) *t = NX_CACHE_F32;
    else if (!strcmp(v, "f16")) *t = NX_CACHE_F16;
    else return -1;
    return 0;
}

static int write_f32(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { fprintf(stderr, "nextn eval: cannot open %s: %s\n", path, strerror(errno)); return -1; }
    size_t w = fwrite(x, sizeof(float), n, f);
    if (fclose(f) != 0 || w != n) { fprintf(stderr, "nextn eval: cannot write %s\n", path); return -1; }
    return 0;
}

int nx_cmd_eval(int argc, char **argv) {
    const char *model_path = NULL, *ids_arg = NULL, *ids_file = NULL, *logits_out = NULL, *hidden_out = NULL,
               *greedy_logits_out = NULL;
    int greedy = 0, batch = 0, threads = 0, n_ctx = 0, n_ubatch = 0;
    nx_ctx_params cp = nx_ctx_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { eval_usage(stdout); return 0; }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "nextn eval: %s needs a value\n", a); return 2; }
        char *end = NULL;
        long num = strtol(v, &end, 10);
        bool is_num = end && end != v && !*end && num >= 0 && num <= 0x7fffffff;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--prompt-ids")) ids_arg = v;
        else if (!strcmp(a, "--prompt-ids-file")) ids_file = v;
        else if (!strcmp(a, "--logits-out")) logits_out = v;
        else if (!strcmp(a, "--hidden-out")) hidden_out = v;
        else if (!strcmp(a, "--greedy-logits-out")) greedy_logits_out = v;
        else if (!strcmp(a, "--greedy") && is_num) greedy = (int)num;
        else if (!strcmp(a, "--batch") && is_num) batch = (int)num;
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && is_num) threads = (int)num;
        else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) && is_num) n_ctx = (int)num;
        else if ((!strcmp(a, "-ub") || !strcmp(a, "--ubatch-size")) && is_num && num > 0) n_ubatch = (int)num;
        else if ((!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k")) && !parse_cache(v, &cp.type_k)) {}
        else if ((!strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) && !parse_cache(v, &cp.type_v)) {}
        else { fprintf(stderr, "nextn eval: bad option or value '%s %s'\n", a, v); eval_usage(stderr); return 2; }
        i++;
    }
    if (!model_path || (!ids_arg == !ids_file)) { eval_usage(stderr); return 2; }
    int *ids = NULL, n = 0;
    char *text = NULL;
    if (ids_file) {
        nx_error e = {0};
        if (nx_read_file(ids_file, 64 << 20, &text, NULL, &e) != NX_OK) {
            fprintf(stderr, "nextn eval: %s\n", e.msg);
            return 1;
        }
        ids_arg = text;
    }
    if (parse_ids(ids_arg, &ids, &n) != 0 || n == 0) {
        fprintf(stderr, "nextn eval: prompt ids must be a non-empty list of non-negative integers\n");
        free(text);
        return 2;
    }
    free(text);

    int rc = 1;
    nx_model *m = NULL;
    nx_ctx *ctx = NULL;
    nx_batch *b = NULL;
    float *logits_all = NULL, *hidden_all = NULL, *greedy_rows = NULL;
    int *gen = NULL;
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = threads;
    if (nx_model_load(model_path, &mp, &m) != NX_OK) { fprintf(stderr, "nextn eval: %s\n", nx_last_error()); goto done; }
    const int need = n + (greedy > 1 ? greedy - 1 : 0);
    cp.n_ctx = n_ctx > 0 ? n_ctx : need;
    cp.n_threads = threads;
    cp.n_ubatch = n_ubatch;
    if (need > cp.n_ctx) {
        fprintf(stderr, "nextn eval: the prompt (%d tokens) and %d generated tokens need %d positions, but the context "
                "holds %d\n", n, greedy > 1 ? greedy - 1 : 0, need, cp.n_ctx);
        goto done;
    }
    if (nx_ctx_create(m, &cp, &ctx) != NX_OK) { fprintf(stderr, "nextn eval: %s\n", nx_last_error()); goto done; }
    const int V = nx_model_n_vocab(m), E = nx_model_n_embd(m);
    const int B = batch > 0 && batch < n ? batch : n;
    b = nx_batch_create(B);
    logits_all = logits_out ? malloc((size_t)n * V * sizeof(float)) : NULL;
    hidden_all = malloc((size_t)n * E * sizeof(float));
    greedy_rows = greedy > 0 ? malloc((size_t)greedy * V * sizeof(float)) : NULL;
    gen = greedy > 0 ? malloc((size_t)greedy * sizeof(int)) : NULL;
    float *last = malloc((size_t)V * sizeof(float));
    if (!b || (logits_out && !logits_all) || !hidden_all || (greedy > 0 && (!greedy_rows || !gen)) || !last) {
        free(last);
        fprintf(stderr, "nextn eval: out of memory\n");
        goto done;
    }
    for (int i0 = 0; i0 < n; i0 += B) {
        int nb = n - i0 < B ? n - i0 : B;
        nx_batch_clear(b);
        for (int r = 0; r < nb; r++) {
            bool want = logits_out || i0 + r == n - 1;
            nx_batch_add(b, ids[i0 + r], i0 + r, 0, want);
        }
        if (nx_decode(ctx, b) != NX_OK) { free(last); fprintf(stderr, "nextn eval: %s\n", nx_last_error()); goto done; }
        for (int r = 0; r < nb; r++) {
            memcpy(hidden_all + (size_t)(i0 + r) * E, nx_ctx_hidden(ctx, r), (size_t)E * sizeof(float));
            const float *lg = nx_ctx_logits(ctx, r);
            if (lg && logits_all) memcpy(logits_all + (size_t)(i0 + r) * V, lg, (size_t)V * sizeof(float));
            if (lg && i0 + r == n - 1) memcpy(last, lg, (size_t)V * sizeof(float));
        }
    }
    for (int k = 0; k < greedy; k++) {
        memcpy(greedy_rows + (size_t)k * V, last, (size_t)V * sizeof(float));
        gen[k] = nx_argmax(last, V);
        if (k + 1 == greedy) break;
        nx_batch_clear(b);
        nx_batch_add(b, gen[k], n + k, 0, true);
        if (nx_decode(ctx, b) != NX_OK) { free(last); fprintf(stderr, "nextn eval: %s\n", nx_last_error()); goto done; }
        memcpy(last, nx_ctx_logits(ctx, 0), (size_t)V * sizeof(float));
    }
    free(last);
    if (logits_out && write_f32(logits_out, logits_all, (size_t)n * V)) goto done;
    if (hidden_out && write_f32(hidden_out, hidden_all, (size_t)n * E)) goto done;
    if (greedy_logits_out && greedy > 0 && write_f32(greedy_logits_out, greedy_rows, (size_t)greedy * V)) goto done;
    printf("[");
    for (int k = 0; k < greedy; k++) printf("%s%d", k ? ", " : "", gen[k]);
    printf("]\n");
    rc = 0;
done:
    free(ids);
    free(logits_all);
    free(hidden_all);
    free(greedy_rows);
    free(gen);
    nx_batch_free(b);
    nx_ctx_free(ctx);
    nx_model_free(m);
    return rc;
}
