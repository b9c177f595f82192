/*
 * cmd_demo.c — `nextn demo`: the main job on the bundled default model (`make demo`).
 *
 *   nextn demo [-m MODEL.gguf] [-f PROMPT_FILE] [-n N] [-t N] [-r REPS] [speculative flags]
 *
 * Tokenizes a held-out Python prompt (models/demo_prompt.py.txt, never seen in training),
 * generates N tokens greedily with speculation off, on (default --spec-type mtp --draft-max 3,
 * fixed k; every flag of spec_params.h is accepted) and, when k is fixed, the same drafters under
 * the adaptive policy (draft-max >= 8), all through the same engine, and prints: the prompt's tail
 * and the generated text, whether every run gave the same tokens (they must), tokens/s (median of
 * REPS runs), the measured speedup and the one predicted from the measured verify-cost sweep and
 * draft cost (speculative.md §5), acceptance, mean accepted length, per-depth acceptance.
 * Exit 1 when the outputs differ or anything fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "core/io.h"
#include "nextn.h"
#include "spec/engine.h"
#include "tokenizer.h"

#define DEMO_REPS_MAX 15

static void demo_usage(FILE *f) {
    fprintf(f,
            "usage: nextn demo [-m MODEL.gguf] [-f PROMPT_FILE] [-n N] [-t N] [-r REPS] [speculative flags]\n"
            "  -m  model (default models/tiny-qwen35-mtp-q8_0.gguf)\n"
            "  -f  prompt text file (default models/demo_prompt.py.txt)\n"
            "  -n  tokens to generate (default 256)   -t  threads (default 2)   -r  runs per mode (default 5)\n"
            "speculation (default: --spec-type mtp --draft-max 3 --draft-adaptive off):\n%s",
            nx_spec_params_usage());
}

typedef struct demo_run {
    double tps;               /* generated tokens / s (the first token, from the prompt, excluded) */
    nx_token *out;
    int n_out;
    nx_spec_stats st;
    double c_d;
} demo_run;

/* One greedy generation through the engine; speculation as p says. */
static int demo_generate(nx_ctx *ctx, const nx_spec_params *sp, const nx_token *prompt, int n_prompt, int n,
                         const nx_token *stop, int n_stop, demo_run *r) {
    nx_spec_engine_params p = nx_spec_engine_default_params();
    p.spec = *sp;
    nx_spec_engine *en = NULL;
    nx_error e = {0};
    nx_seq_id s = -1;
    nx_spec_request rq = {.prompt = prompt, .n_prompt = n_prompt, .n_predict = n, .stop = stop, .n_stop = n_stop};
    int rc = 1;
    if (nx_spec_engine_create(ctx, &p, &en, &e) != NX_OK || nx_spec_engine_add(en, &rq, &s, &e) != NX_OK) goto done;
    while (nx_spec_engine_n_active(en))
        if (nx_spec_engine_step(en, &e) != NX_OK) goto done;
    int n_out = 0;
    const nx_token *o = nx_spec_engine_output(en, s, &n_out);
    free(r->out);
    r->out = malloc((size_t)(n_out ? n_out : 1) * sizeof *o);
    if (!r->out) { nx_fail(&e, NX_ERR_NOMEM, "out of memory"); goto done; }
    memcpy(r->out, o, (size_t)n_out * sizeof *o);
    r->n_out = n_out;
    r->st = *nx_spec_engine_stats_total(en);
    r->tps = nx_spec_stats_tokens_per_s(&r->st);
    r->c_d = nx_spec_engine_draft_cost(en);
    rc = 0;
done:
    if (rc) fprintf(stderr, "nextn demo: %s\n", e.msg);
    nx_spec_engine_free(en);
    nx_seq_rm(ctx, 0, -1, -1);
    return rc;
}

static int cmp_run(const void *a, const void *b) {
    double x = ((const demo_run *)a)->tps, y = ((const demo_run *)b)->tps;
    return x < y ? -1 : x > y;
}

static void print_text(const nx_tokenizer *tok, const nx_token *ids, int n) {
    char *txt = NULL;
    size_t len = 0;
    nx_error e = {0};
    if (nx_detokenize(tok, ids, (size_t)n, 0, &txt, &len, &e) == NX_OK) fwrite(txt, 1, len, stdout);
    free(txt);
}

int nx_cmd_demo(int argc, char **argv) {
    const char *path = "models/tiny-qwen35-mtp-q8_0.gguf", *prompt_path = "models/demo_prompt.py.txt";
    int n = 256, threads = 2, reps = 5;
    nx_spec_params sp = nx_spec_params_default();
    sp.types[0] = NX_SPEC_MTP;
    sp.n_types = 1;
    sp.draft_max = 3;
    sp.adaptive = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool used = false;
        nx_error e = {0};
        if (nx_spec_params_parse_arg(&sp, argc, argv, &i, &used, &e) != NX_OK) {
            fprintf(stderr, "nextn demo: %s\n", e.msg);
            return 2;
        }
        if (used) { i--; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { demo_usage(stdout); return 0; }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long num = v ? strtol(v, NULL, 10) : 0;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) path = v;
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && v) prompt_path = v;
        else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict")) && v && num >= 2 && num <= 100000) n = (int)num;
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && v && num >= 1 && num <= 1024) threads = (int)num;
        else if ((!strcmp(a, "-r") || !strcmp(a, "--repetitions")) && v && num >= 1 && num <= DEMO_REPS_MAX) reps = (int)num;
        else { fprintf(stderr, "nextn demo: bad option '%s'\n", a); demo_usage(stderr); return 2; }
        i++;
    }
    {
        nx_error e = {0};
        if (nx_spec_params_validate(&sp, &e) != NX_OK) { fprintf(stderr, "nextn demo: %s\n", e.msg); return 2; }
    }
    int rc = 1;
    nx_model *m = NULL;
    nx_tokenizer *tok = NULL;
    nx_ctx *ctx = NULL;
    char *text = NULL;
    size_t text_len = 0;
    nx_token_vec ids = {0};
    demo_run (*runs)[DEMO_REPS_MAX] = calloc(3, sizeof *runs);
    nx_error e = {0};
    if (!runs) { fprintf(stderr, "nextn demo: out of memory\n"); return 1; }
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = threads;
    if (nx_model_load(path, &mp, &m) != NX_OK) { fprintf(stderr, "nextn demo: %s\n", nx_last_error()); goto done; }
    if (nx_tokenizer_load(path, &tok, &e) != NX_OK || nx_read_file(prompt_path, 1 << 20, &text, &text_len, &e) != NX_OK ||
        nx_tokenize(tok, text, text_len, NX_TOK_ADD_SPECIAL, &ids, &e) != NX_OK) {
        fprintf(stderr, "nextn demo: %s\n", e.msg);
        goto done;
    }
    if (ids.n == 0) { fprintf(stderr, "nextn demo: the prompt %s is empty\n", prompt_path); goto done; }
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = (int)ids.n + (n > 200 ? n : 200) + 64;   /* room for the verify sweep too */
    cp.n_threads = threads;
    if (nx_ctx_create(m, &cp, &ctx) != NX_OK) { fprintf(stderr, "nextn demo: %s\n", nx_last_error()); goto done; }
    char desc[512];
    nx_model_describe(m, desc, sizeof desc);
    char spd[256];
    nx_spec_params_describe(&sp, spd, sizeof spd);
    printf("== nextn demo: lossless MTP speculative decoding on the CPU ==\n%s", desc);
    if (desc[0] && desc[strlen(desc) - 1] != '\n') printf("\n");
    printf("prompt: %s (%zu tokens, held-out code), greedy, %d tokens, %d threads, %d runs per mode\n"
           "speculation: %s\n\n", prompt_path, ids.n, n, threads, reps, spd);
    const nx_token *stop = NULL;
    int n_stop = nx_tokenizer_eog_ids(tok, &stop);
    nx_spec_params none = nx_spec_params_default(), adapt = sp;
    adapt.adaptive = true;   /* the third column: the same drafters under the adaptive policy */
    if (adapt.draft_max < 8) adapt.draft_max = 8;
    const int n_modes = sp.adaptive ? 2 : 3;
    const nx_spec_params *modes[3] = {&none, &sp, &adapt};
    /* one warm-up of each mode (page faults, caches), then the modes in turn, REPS times */
    for (int k = 0; k < n_modes; k++)
        if (demo_generate(ctx, modes[k], ids.ids, (int)ids.n, n < 32 ? n : 32, stop, n_stop, &runs[k][0])) goto done;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < n_modes; k++)
            if (demo_generate(ctx, modes[k], ids.ids, (int)ids.n, n, stop, n_stop, &runs[k][r])) goto done;
    bool same = true;
    for (int k = 0; k < n_modes; k++)
        for (int r = 0; r < reps; r++)
            same = same && runs[k][r].n_out == runs[0][0].n_out &&
                   !memcmp(runs[k][r].out, runs[0][0].out, (size_t)runs[0][0].n_out * sizeof(nx_token));
    const int tail = ids.n > 24 ? 24 : (int)ids.n;
    printf("---- prompt (last %d tokens) ----\n", tail);
    print_text(tok, ids.ids + ids.n - tail, tail);
    printf("\n---- generated (%d tokens) ----\n", runs[0][0].n_out);
    print_text(tok, runs[0][0].out, runs[0][0].n_out);
    printf("\n----\n\n");
    printf("output with speculation on == off: %s\n", same ? "identical in every run (lossless)" : "DIFFERENT (bug)");
    /* prediction: verify-cost sweep on this context + the measured draft cost per step */
    double sec[NX_SPEC_VERIFY_ROWS_MAX + 1] = {0};
    nx_spec_costs costs;
    const int rows = adapt.draft_max + 1;
    nx_batch *b = nx_batch_create((int)ids.n);
    for (size_t i = 0; b && i < ids.n; i++) nx_batch_add(b, ids.ids[i], (nx_pos)i, 0, false);
    bool swept = b && nx_decode(ctx, b) == NX_OK && nx_spec_verify_sweep(ctx, 0, rows, 15, sec, &costs, &e) == NX_OK;
    nx_batch_free(b);
    nx_seq_rm(ctx, 0, -1, -1);
    const demo_run *med[3];
    for (int k = 0; k < n_modes; k++) {
        qsort(runs[k], (size_t)reps, sizeof runs[k][0], cmp_run);
        med[k] = &runs[k][reps / 2];
    }
    char head2[64], head3[64];
    snprintf(head2, sizeof head2, "k=%d%s", sp.draft_max, sp.adaptive ? " adaptive" : "");
    snprintf(head3, sizeof head3, "adaptive<=%d", adapt.draft_max);
    printf("\n%-24s %12s %12s %12s\n", "", "spec off", head2, n_modes > 2 ? head3 : "");
    printf("%-24s %12.1f", "tokens/s (median)", med[0]->tps);
    for (int k = 1; k < n_modes; k++) printf(" %12.1f", med[k]->tps);
    printf("\n%-24s %12s", "measured speedup", "1");
    for (int k = 1; k < n_modes; k++) printf(" %12.3f", med[0]->tps > 0 ? med[k]->tps / med[0]->tps : 0.0);
    double pred[3] = {1, 0, 0};
    if (swept) {
        printf("\n%-24s %12s", "predicted speedup", "1");
        for (int k = 1; k < n_modes; k++) {
            pred[k] = nx_spec_predicted_speedup_stats(&med[k]->st, med[k]->c_d, &costs);
            printf(" %12.3f", pred[k]);
        }
        printf("\n%-24s %12s", "measured / predicted", "");
        for (int k = 1; k < n_modes; k++)
            printf(" %12.3f", pred[k] > 0 && med[0]->tps > 0 ? med[k]->tps / med[0]->tps / pred[k] : 0.0);
    }
    printf("\n%-24s %12s", "acceptance", "");
    for (int k = 1; k < n_modes; k++) printf(" %12.3f", nx_spec_stats_accept_rate(&med[k]->st));
    printf("\n%-24s %12s", "mean accepted length", "");
    for (int k = 1; k < n_modes; k++) printf(" %12.2f", nx_spec_stats_mean_accepted(&med[k]->st));
    printf("\n%-24s %12s", "tokens per round", "1");
    for (int k = 1; k < n_modes; k++) printf(" %12.2f", nx_spec_stats_tokens_per_round(&med[k]->st));
    printf("\n%-24s %12s", "draft ms per step", "");
    for (int k = 1; k < n_modes; k++) printf(" %12.3f", med[k]->c_d * 1e3);
    printf("\nper-depth acceptance (k=%d):", sp.draft_max);
    for (int d = 1; d <= sp.draft_max && d <= NX_SPEC_DRAFT_CAP; d++) {
        double a = nx_spec_stats_depth_rate(&med[1]->st, d);
        if (a == a) printf(" a%d=%.3f", d, a);
    }
    printf("\n");
    if (swept) {
        printf("verify cost c_v(n)/c_v(1), c_v(1) = %.3f ms:", sec[1] * 1e3);
        for (int k = 2; k <= rows; k++) printf(" %d:%.2f", k, sec[k] / sec[1]);
        printf("\n");
    } else {
        printf("predicted speedup: verify sweep failed: %s\n", e.msg);
    }
    rc = same ? 0 : 1;
done:
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < DEMO_REPS_MAX; r++) free(runs[k][r].out);
    free(runs);
    nx_token_vec_free(&ids);
    free(text);
    nx_ctx_free(ctx);
    nx_tokenizer_free(tok);
    nx_model_free(m);
    return rc;
}
