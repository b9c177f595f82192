/*
 * cmd_demo.c — `nextn demo`: MTP speculative decoding shown honestly (`make demo`).
 *
 *   nextn demo [-m MODEL.gguf] [--inflate | --no-inflate] [--cache-dir DIR] [--n-layer L] [--n-ff N]
 *              [-f PROMPT_FILE] [--prompt-tokens N] [-n N] [-t N] [-r REPS] [--k-min K] [speculative flags]
 *
 * The bundled model (models/tiny-qwen35-mtp-q8_0.gguf, 3.5 MB) lives in the CPU cache: a step is
 * compute-bound, a verify of n rows costs nearly n rows, and speculation cannot pay. So the demo
 * first runs it, then inflates it (genmodel.h: dead layers, FFNs widened by units that add exactly
 * 0; the same tokens, 24 + 1 layers and n_ff 45056 in Q8_0 = 696 MB by default) into DIR (default
 * build/, reused while newer than the source and this binary; written to a temporary name, then
 * renamed) and runs that: a memory-bound model, where a verify of n rows reads the weights once.
 * Each model runs greedily, speculation off, at fixed k = k-min..draft-max (default 2..3; the best
 * fixed k on this model is 2 or 3, and each more column costs ~15 s on 2 cores) and adaptive,
 * every mode with its own context and engine (the prompt is decoded once per mode and then reused
 * from the engine's prefix cache), the modes in turn REPS times; printed: the generated text once,
 * tokens/s (median), speedups measured and predicted from a verify-cost sweep, acceptance, the best
 * fixed k, whether every run of both models gave the same tokens (they must), and why.
 * With -m MODEL (another than the bundled one, without --inflate) only that model runs. Exit 1 when outputs differ or anything fails.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli/cli.h"
#include "core/io.h"
#include "genmodel.h"
#include "kernels/cpu.h"
#include "nextn.h"
#include "spec/engine.h"
#include "tokenizer.h"

#define DEMO_REPS_MAX 15
#define DEMO_K_MAX 8
#define DEMO_MODES_MAX (DEMO_K_MAX + 2)
#define DEMO_SWEEP_ROWS 9
#define DEMO_SWEEP_REPS_MAX 15
#define DEMO_BUNDLED "models/tiny-qwen35-mtp-q8_0.gguf"

static void demo_usage(FILE *f) {
    fprintf(f,
            "usage: nextn demo [-m MODEL.gguf] [--inflate | --no-inflate] [--cache-dir DIR] [--n-layer L] [--n-ff N]\n"
            "                  [-f PROMPT_FILE] [--prompt-tokens N] [-n N] [-t N] [-r REPS] [--k-min K] [speculative flags]\n"
            "  -m  model (default " DEMO_BUNDLED "; then also inflated, see --inflate)\n"
            "  --inflate / --no-inflate  also run an inflated copy of the model (default: on for the bundled\n"
            "      model): --n-layer trunk layers (default 24), FFN width --n-ff (default 45056), Q8_0,\n"
            "      cached in --cache-dir (default build)\n"
            "  -f  prompt text file (default models/demo_prompt.py.txt); --prompt-tokens: its last N tokens\n"
            "      (default 128, 0 = all)\n"
            "  -n  tokens to generate (default 128)   -t  threads (default 2)   -r  runs per mode (default 3)\n"
            "speculation (default: --spec-type mtp; fixed k = --k-min (default 2) .. --draft-max (default 3), and\n"
            "adaptive with draft-max max(8, --draft-max)):\n%s",
            nx_spec_params_usage());
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct demo_run {
    double tps;               /* generated tokens / s (the engine's rounds) */
    nx_token *out;
    int n_out;
    nx_spec_stats st;
    double c_d;
} demo_run;

/* One column of the table: its own context and engine, so the prompt is decoded once. */
typedef struct demo_mode {
    char label[24];
    nx_spec_params sp;
    int k;                    /* fixed draft length; 0: off; -1: adaptive */
    nx_ctx *ctx;
    nx_spec_engine *en;
    demo_run runs[DEMO_REPS_MAX];
    const demo_run *med;
} demo_mode;

/* One model's measurements. */
typedef struct demo_model {
    const char *path;
    demo_mode modes[DEMO_MODES_MAX];
    int n_modes;
    double sweep[NX_SPEC_VERIFY_ROWS_MAX + 1];
    nx_spec_costs costs;
    bool swept;
    bool same;                /* every run of every mode gave the same tokens */
    int best;                 /* index of the fastest fixed-k mode */
    char desc[512];
    size_t bytes;
} demo_model;

typedef struct demo_cfg {
    const nx_token *prompt;
    int n_prompt, n, threads, reps;
    const nx_token *stop;
    int n_stop;
    nx_spec_params sp;        /* the drafters; draft_max = the largest fixed k */
    int k_min;                /* the smallest fixed k */
} demo_cfg;

/* One greedy generation of n tokens on the mode's engine, reusing its cached prompt. */
static int demo_generate(demo_mode *md, const demo_cfg *c, int n, demo_run *r) {
    nx_error e = {0};
    nx_spec_request rq = {.prompt = c->prompt, .n_prompt = c->n_prompt, .n_predict = n, .stop = c->stop,
                          .n_stop = c->n_stop, .reuse_prefix = true};
    if (nx_spec_engine_submit(md->en, &rq, 0, &e) != NX_OK) goto fail;
    while (nx_spec_engine_active(md->en, 0))
        if (nx_spec_engine_step(md->en, &e) != NX_OK) goto fail;
    int n_out = 0;
    const nx_token *o = nx_spec_engine_output(md->en, 0, &n_out);
    free(r->out);
    r->out = malloc((size_t)(n_out ? n_out : 1) * sizeof *o);
    if (!r->out) { nx_fail(&e, NX_ERR_NOMEM, "out of memory"); goto fail; }
    memcpy(r->out, o, (size_t)n_out * sizeof *o);
    r->n_out = n_out;
    r->st = *nx_spec_engine_stats(md->en, 0);
    r->tps = nx_spec_stats_tokens_per_s(&r->st);
    r->c_d = nx_spec_engine_draft_cost(md->en);
    nx_spec_engine_release(md->en, 0);
    return 0;
fail:
    fprintf(stderr, "nextn demo: %s: %s\n", md->label, e.msg);
    return 1;
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

static void demo_free_modes(demo_model *dm) {
    for (int k = 0; k < dm->n_modes; k++) {
        nx_spec_engine_free(dm->modes[k].en);
        nx_ctx_free(dm->modes[k].ctx);
        dm->modes[k].en = NULL;
        dm->modes[k].ctx = NULL;
    }
}

/* Runs every mode on one model, then the verify-cost sweep. */
static int demo_measure(demo_model *dm, const demo_cfg *c) {
    int rc = 1;
    nx_model *m = NULL;
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = c->threads;
    if (nx_model_load(dm->path, &mp, &m) != NX_OK) {
        fprintf(stderr, "nextn demo: %s\n", nx_last_error());
        return 1;
    }
    nx_model_describe(m, dm->desc, sizeof dm->desc);
    struct stat sb;
    dm->bytes = stat(dm->path, &sb) == 0 ? (size_t)sb.st_size : 0;
    const int kmax = c->sp.draft_max < DEMO_K_MAX ? c->sp.draft_max : DEMO_K_MAX;
    dm->n_modes = 0;
    for (int k = 0; k <= kmax + 1; k++) {
        if (k > 0 && k < c->k_min && k <= kmax) continue;
        demo_mode *md = &dm->modes[dm->n_modes++];
        md->sp = c->sp;
        md->sp.draft_min = 0;
        if (k == 0) {
            md->sp = nx_spec_params_default();
            md->sp.n_types = 0;
            md->k = 0;
            snprintf(md->label, sizeof md->label, "spec off");
        } else if (k <= kmax) {
            md->sp.draft_max = k;
            md->sp.adaptive = false;
            md->k = k;
            snprintf(md->label, sizeof md->label, "k=%d", k);
        } else {
            md->sp.adaptive = true;
            if (md->sp.draft_max < 8) md->sp.draft_max = 8;
            md->k = -1;
            snprintf(md->label, sizeof md->label, "adaptive");
        }
    }
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = c->n_prompt + c->n + 16 + DEMO_SWEEP_ROWS * (DEMO_SWEEP_REPS_MAX + 1) + 8;
    cp.n_ubatch = c->n_prompt < 128 ? c->n_prompt : 128;   /* small scratch: one context per mode */
    cp.n_threads = c->threads;
    for (int k = 0; k < dm->n_modes; k++) {
        demo_mode *md = &dm->modes[k];
        nx_spec_engine_params p = nx_spec_engine_default_params();
        p.spec = md->sp;
        nx_error e = {0};
        if (nx_ctx_create(m, &cp, &md->ctx) != NX_OK) {
            fprintf(stderr, "nextn demo: %s\n", nx_last_error());
            goto done;
        }
        if (nx_spec_engine_create(md->ctx, &p, &md->en, &e) != NX_OK) {
            fprintf(stderr, "nextn demo: %s: %s\n", md->label, e.msg);
            goto done;
        }
        /* warm-up: decodes the prompt into this mode's cache (and faults the weights in) */
        if (demo_generate(md, c, 8, &md->runs[0])) goto done;
    }
    for (int r = 0; r < c->reps; r++)
        for (int k = 0; k < dm->n_modes; k++)
            if (demo_generate(&dm->modes[k], c, c->n, &dm->modes[k].runs[r])) goto done;
    dm->same = true;
    const demo_run *ref = &dm->modes[0].runs[0];
    for (int k = 0; k < dm->n_modes; k++)
        for (int r = 0; r < c->reps; r++) {
            const demo_run *x = &dm->modes[k].runs[r];
            dm->same = dm->same && x->n_out == ref->n_out && !memcmp(x->out, ref->out, (size_t)ref->n_out * sizeof *x->out);
        }
    /* verify-cost sweep on the first context: c_v(n) for n = 1..DEMO_SWEEP_ROWS, the median of
     * as many timings as fit in ~2 s at the plain decoding speed (3..15: a shared machine is noisy) */
    double tps_off = 0;
    for (int r = 0; r < c->reps; r++)
        if (dm->modes[0].runs[r].tps > tps_off) tps_off = dm->modes[0].runs[r].tps;
    int sweep_reps = (int)(tps_off * 0.2);
    sweep_reps = sweep_reps < 3 ? 3 : sweep_reps > DEMO_SWEEP_REPS_MAX ? DEMO_SWEEP_REPS_MAX : sweep_reps;
    nx_spec_engine_free(dm->modes[0].en);
    dm->modes[0].en = NULL;
    nx_ctx *ctx = dm->modes[0].ctx;
    nx_seq_rm(ctx, 0, -1, -1);
    const int n0 = c->n_prompt < 16 ? c->n_prompt : 16;
    nx_batch *b = nx_batch_create(n0);
    for (int i = 0; b && i < n0; i++) nx_batch_add(b, c->prompt[i], (nx_pos)i, 0, false);
    nx_error e = {0};
    dm->swept = b && nx_decode(ctx, b) == NX_OK &&
                nx_spec_verify_sweep(ctx, 0, DEMO_SWEEP_ROWS, sweep_reps, dm->sweep, &dm->costs, &e) == NX_OK;
    nx_batch_free(b);
    if (!dm->swept) fprintf(stderr, "nextn demo: verify sweep failed: %s\n", e.msg);
    for (int k = 0; k < dm->n_modes; k++) {
        qsort(dm->modes[k].runs, (size_t)c->reps, sizeof dm->modes[k].runs[0], cmp_run);
        dm->modes[k].med = &dm->modes[k].runs[c->reps / 2];
    }
    dm->best = -1;
    for (int k = 0; k < dm->n_modes; k++)
        if (dm->modes[k].k > 0 && (dm->best < 0 || dm->modes[k].med->tps > dm->modes[dm->best].med->tps)) dm->best = k;
    rc = 0;
done:
    demo_free_modes(dm);
    nx_model_free(m);
    return rc;
}

static void demo_free_model(demo_model *dm) {
    for (int k = 0; k < DEMO_MODES_MAX; k++)
        for (int r = 0; r < DEMO_REPS_MAX; r++) free(dm->modes[k].runs[r].out);
}

/* c_v(n)/c_v(1) from the sweep, 0 when unknown. */
static double demo_verify_ratio(const demo_model *dm, int n) {
    return dm->swept && dm->sweep[1] > 0 && n <= DEMO_SWEEP_ROWS ? dm->sweep[n] / dm->sweep[1] : 0.0;
}

static void demo_table(const demo_model *dm) {
    const double off = dm->modes[0].med->tps;
    printf("%-22s", "");
    for (int k = 0; k < dm->n_modes; k++) printf(" %9s", dm->modes[k].label);
    printf("\n%-22s", "tokens/s (median)");
    for (int k = 0; k < dm->n_modes; k++) printf(" %9.1f", dm->modes[k].med->tps);
    printf("\n%-22s", "speedup");
    for (int k = 0; k < dm->n_modes; k++) printf(" %8.2fx", off > 0 ? dm->modes[k].med->tps / off : 0.0);
    if (dm->swept) {
        printf("\n%-22s %9s", "predicted speedup", "");
        for (int k = 1; k < dm->n_modes; k++)
            printf(" %8.2fx", nx_spec_predicted_speedup_stats(&dm->modes[k].med->st, dm->modes[k].med->c_d, &dm->costs));
    }
    printf("\n%-22s %9s", "acceptance", "");
    for (int k = 1; k < dm->n_modes; k++) printf(" %9.3f", nx_spec_stats_accept_rate(&dm->modes[k].med->st));
    printf("\n%-22s %9s", "tokens per round", "1");
    for (int k = 1; k < dm->n_modes; k++) printf(" %9.2f", nx_spec_stats_tokens_per_round(&dm->modes[k].med->st));
    printf("\n%-22s %9s", "draft ms per step", "");
    for (int k = 1; k < dm->n_modes; k++) printf(" %9.3f", dm->modes[k].med->c_d * 1e3);
    printf("\n");
    if (dm->swept) {
        printf("verify cost of n rows / 1 row (1 row = %.3f ms):", dm->sweep[1] * 1e3);
        for (int n = 2; n <= DEMO_SWEEP_ROWS; n++) printf(" %d:%.2f", n, dm->sweep[n] / dm->sweep[1]);
        printf("\n");
    }
    const demo_mode *b = &dm->modes[dm->best], *a = &dm->modes[dm->n_modes - 1];
    printf("best fixed k: %s, %.2fx; adaptive: %.2fx (%.2f of the best fixed k)\n", b->label,
           off > 0 ? b->med->tps / off : 0.0, off > 0 ? a->med->tps / off : 0.0,
           b->med->tps > 0 ? a->med->tps / b->med->tps : 0.0);
}

/* ===== The inflated model, cached ===== */

/* a is newer than b (modification times). */
static bool newer(const struct stat *a, const struct stat *b) {
    return a->st_mtim.tv_sec > b->st_mtim.tv_sec ||
           (a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec > b->st_mtim.tv_nsec);
}

/* The cache is usable: present and newer than the source model and this binary. */
static bool demo_cache_fresh(const char *cache, const char *src) {
    struct stat c, s, x;
    if (stat(cache, &c) != 0 || stat(src, &s) != 0 || !newer(&c, &s)) return false;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return true;
    exe[n] = '\0';
    return stat(exe, &x) != 0 || newer(&c, &x);
}

static int demo_inflate(const char *src, const char *cache_dir, int n_layer, long long n_ff, char *out, size_t cap) {
    const char *base = strrchr(src, '/');
    base = base ? base + 1 : src;
    size_t bl = strlen(base);
    if (bl > 5 && !strcmp(base + bl - 5, ".gguf")) bl -= 5;
    snprintf(out, cap, "%s/demo-%.*s-inflated-L%d-ff%lld-q8_0.gguf", cache_dir, (int)bl, base, n_layer, n_ff);
    if (demo_cache_fresh(out, src)) {
        printf("inflated model: %s (cached; newer than %s and this binary)\n", out, src);
        return 0;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    nx_inflate_opts io = {.from_path = src, .out_path = tmp, .n_layer = n_layer, .n_ff = n_ff, .set_wtype = true,
                          .wtype = NX_TYPE_Q8_0, .seed = 1};
    nx_inflate_info info;
    nx_error e = {0};
    printf("inflating %s -> %s ... ", src, out);
    fflush(stdout);
    const double t0 = now_s();
    if (mkdir(cache_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "\nnextn demo: cannot create %s: %s\n", cache_dir, strerror(errno));
        return 1;
    }
    if (nx_genmodel_inflate(&io, &info, &e) != NX_OK) {
        remove(tmp);
        fprintf(stderr, "\nnextn demo: %s\n", e.msg);
        return 1;
    }
    if (rename(tmp, out) != 0) {
        fprintf(stderr, "\nnextn demo: cannot rename %s to %s: %s\n", tmp, out, strerror(errno));
        remove(tmp);
        return 1;
    }
    printf("%.0f MB in %.1f s (gen-model --inflate --n-layer %d --n-ff %lld --type q8_0)\n", (double)info.bytes / 1e6,
           now_s() - t0, n_layer, n_ff);
    return 0;
}

int nx_cmd_demo(int argc, char **argv) {
    const char *path = DEMO_BUNDLED, *prompt_path = "models/demo_prompt.py.txt", *cache_dir = "build";
    int n = 128, threads = 2, reps = 3, n_layer = 24, prompt_tokens = 128, inflate = -1, k_min = 2;
    long long n_ff = 45056;
    bool explicit_model = false;
    nx_spec_params sp = nx_spec_params_default();
    sp.types[0] = NX_SPEC_MTP;
    sp.n_types = 1;
    sp.draft_max = 3;
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
        if (!strcmp(a, "--inflate")) { inflate = 1; continue; }
        if (!strcmp(a, "--no-inflate")) { inflate = 0; continue; }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long num = v ? strtoll(v, NULL, 10) : 0;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) { path = v; explicit_model = true; }
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && v) prompt_path = v;
        else if (!strcmp(a, "--cache-dir") && v) cache_dir = v;
        else if (!strcmp(a, "--n-layer") && v && num >= 1 && num <= 4000) n_layer = (int)num;
        else if (!strcmp(a, "--n-ff") && v && num >= 1 && num <= (1ll << 24)) n_ff = num;
        else if (!strcmp(a, "--k-min") && v && num >= 1 && num <= DEMO_K_MAX) k_min = (int)num;
        else if (!strcmp(a, "--prompt-tokens") && v && num >= 0 && num <= 100000) prompt_tokens = (int)num;
        else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict")) && v && num >= 2 && num <= 100000) n = (int)num;
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && v && num >= 1 && num <= 1024) threads = (int)num;
        else if ((!strcmp(a, "-r") || !strcmp(a, "--repetitions")) && v && num >= 1 && num <= DEMO_REPS_MAX) reps = (int)num;
        else { fprintf(stderr, "nextn demo: bad option '%s'\n", a); demo_usage(stderr); return 2; }
        i++;
    }
    {
        nx_error e = {0};
        if (nx_spec_params_validate(&sp, &e) != NX_OK) { fprintf(stderr, "nextn demo: %s\n", e.msg); return 2; }
        if (sp.n_types == 0) { fprintf(stderr, "nextn demo: needs a drafter (--spec-type)\n"); return 2; }
        if (k_min > sp.draft_max || k_min > DEMO_K_MAX) {
            fprintf(stderr, "nextn demo: --k-min %d is above --draft-max %d (at most %d)\n", k_min, sp.draft_max, DEMO_K_MAX);
            return 2;
        }
    }
    if (inflate < 0) inflate = !explicit_model || !strcmp(path, DEMO_BUNDLED);
    const double t_start = now_s();
    int rc = 1;
    nx_tokenizer *tok = NULL;
    char *text = NULL;
    size_t text_len = 0;
    nx_token_vec ids = {0};
    demo_model *dm = calloc(2, sizeof *dm);
    char big[4300];
    nx_error e = {0};
    if (!dm) { fprintf(stderr, "nextn demo: out of memory\n"); return 1; }
    if (nx_tokenizer_load(path, &tok, &e) != NX_OK || nx_read_file(prompt_path, 1 << 20, &text, &text_len, &e) != NX_OK ||
        nx_tokenize(tok, text, text_len, NX_TOK_ADD_SPECIAL, &ids, &e) != NX_OK) {
        fprintf(stderr, "nextn demo: %s\n", e.msg);
        goto done;
    }
    if (ids.n == 0) { fprintf(stderr, "nextn demo: the prompt %s is empty\n", prompt_path); goto done; }
    const int n_prompt = prompt_tokens > 0 && (size_t)prompt_tokens < ids.n ? prompt_tokens : (int)ids.n;
    demo_cfg c = {.prompt = ids.ids + ids.n - n_prompt, .n_prompt = n_prompt, .n = n, .threads = threads, .reps = reps,
                  .sp = sp, .k_min = k_min};
    c.n_stop = nx_tokenizer_eog_ids(tok, &c.stop);
    char spd[256];
    nx_spec_params_describe(&sp, spd, sizeof spd);
    printf("== nextn demo: lossless MTP speculative decoding on the CPU ==\n"
           "CPU kernels: %s, %d threads; greedy, %d tokens after the last %d tokens of %s (held-out code);\n"
           "%d runs per mode, median; drafter: %s (fixed k = %d..%d, then adaptive)\n\n",
           nx_cpu_level_name(nx_cpu_level_get()), threads, n, n_prompt, prompt_path, reps, spd, k_min,
           sp.draft_max < DEMO_K_MAX ? sp.draft_max : DEMO_K_MAX);
    dm[0].path = path;
    if (demo_measure(&dm[0], &c)) goto done;
    printf("---- %s (%.1f MB) ----\n", path, (double)dm[0].bytes / 1e6);
    demo_table(&dm[0]);
    printf("\n");
    bool same = dm[0].same;
    const demo_model *shown = &dm[0];
    if (inflate) {
        if (demo_inflate(path, cache_dir, n_layer, n_ff, big, sizeof big)) goto done;
        dm[1].path = big;
        if (demo_measure(&dm[1], &c)) goto done;
        const demo_run *r0 = dm[0].modes[0].med, *r1 = dm[1].modes[0].med;
        const bool both = r0->n_out == r1->n_out && !memcmp(r0->out, r1->out, (size_t)r0->n_out * sizeof *r0->out);
        same = same && dm[1].same && both;
        shown = &dm[1];
        printf("---- %s (%.1f MB) ----\n", big, (double)dm[1].bytes / 1e6);
        demo_table(&dm[1]);
        printf("\n");
    }
    const int tail = n_prompt > 24 ? 24 : n_prompt;
    printf("---- prompt (last %d tokens) ----\n", tail);
    print_text(tok, c.prompt + n_prompt - tail, tail);
    printf("\n---- generated (%d tokens) ----\n", shown->modes[0].med->n_out);
    print_text(tok, shown->modes[0].med->out, shown->modes[0].med->n_out);
    printf("\n----\n\n");
    printf("output: %s\n", same ? (inflate ? "identical in every run, every mode, both models (lossless)"
                                           : "identical in every run and every mode (lossless)")
                                : "DIFFERENT (bug)");
    if (inflate) {   /* the two lines a newcomer needs, with this machine's numbers */
        const int rows = dm[1].modes[dm[1].best].k + 1;
        printf("why the bundled model cannot gain: its %.1f MB of weights live in the CPU cache, so a step is "
               "compute-bound and a verify of n rows costs nearly n rows (%d rows: %.2fx one row here).\n",
               (double)dm[0].bytes / 1e6, rows, demo_verify_ratio(&dm[0], rows));
        printf("why the inflated one can: its %.0f MB stream from memory every step and a verify of n rows reads "
               "them once (%d rows: %.2fx one row), so accepted drafts cost little.\n",
               (double)dm[1].bytes / 1e6, rows, demo_verify_ratio(&dm[1], rows));
    }
    printf("(speeds vary with the machine's load; demo took %.0f s)\n", now_s() - t_start);
    rc = same ? 0 : 1;
done:
    for (int i = 0; i < 2; i++) demo_free_model(&dm[i]);
    free(dm);
    nx_token_vec_free(&ids);
    free(text);
    nx_tokenizer_free(tok);
    return rc;
}
