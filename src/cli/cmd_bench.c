/*
 * cmd_bench.c — `nextn bench`: prompt-processing and decode throughput of a model, in a
 * llama-bench style table, against the machine's read bandwidth measured in the same run.
 *
 *   nextn bench -m FILE.gguf [-p 512] [-n 128] [-r 5] [-d 0[,N...]] [-t N] [-ub 512] [-c N] [-ctk/-ctv TYPE]
 *               [--bw-mib 1024] [--spec-type mtp --draft-max N ... (spec_params.h)] [--verify-sweep]
 *               [-f SPEC_PROMPT_FILE]
 *
 * Tests (each repetition starts sequence 0 afresh at position 0, with random valid token ids
 * from a fixed seed, after one warm-up run):
 *   ppN  decode an N-token prompt in ubatches, logits for the last row only -> N / time
 *   tgN  decode N tokens one at a time, logits every step                   -> N / time
 * -d D (llama-bench's --n-depth, a comma list): every test runs after D random tokens are already
 * in the context ("pp512 @ d4096"). The D tokens are decoded once per depth (untimed, its time
 * printed), the recurrent state after them saved, and each repetition cuts the sequence back to
 * D and restores that state; where a sliding-window ring no longer holds the window before D,
 * the D tokens are decoded again (untimed). The KV cache's memory per token of context (all
 * layers) and its fixed part (recurrent state, rings) are printed before the table.
 * t/s is the median over the repetitions (± sample standard deviation). For tg, "GB/s" is the
 * weight bytes a decode step streams (every tensor the target pass reads: the MTP layer is
 * left out, a tied embedding counts as the output matrix, expert tensors count
 * n_expert_used / n_expert) times tok/s, and "% BW" its share of the read bandwidth measured
 * with the same threads just before. Resident memory (VmRSS / VmHWM of this process) is then
 * compared with the file size + the KV / recurrent state. The load average is printed
 * with the figures, and "cpu" (process CPU time / (wall x threads) during the timed runs) says
 * how much of its cores the benchmark actually got, since other work on the machine moves them.
 *
 * Speculative decoding (--spec-type ...; issue 5): after the pp/tg table, the same greedy
 * generation of -n tokens from the same prompt (the first -p tokens of a built-in piece of Python
 * code, or of -f FILE; random ids when the model has no tokenizer), no stop tokens, runs through
 * the engine (spec/engine.h) with speculation off and on, a warm-up and -r timed runs each
 * (median): tokens/s off and on, measured speedup, acceptance, mean accepted length, tokens per
 * round, per-depth acceptance, and the speedup speculative.md §5 predicts from this run's
 * acceptance (the round-length histogram) with the verify costs of a sweep on this context and
 * the measured draft cost per step (nx_spec_predicted_speedup_stats); the outputs must match.
 * --verify-sweep: the cost of a verify batch of 1..16 rows relative to 1 row (nx_spec_verify_sweep,
 * median of SWEEP_REPS), and the speedup projected at acceptance 0.6 / 0.8 / 0.9 (uniform per
 * depth, best k) from the sweep and the measured draft cost.
 *
 * Structure: a test is a bench_test, its figures a bench_result, and the table is a list of
 * columns (k_cols) filled per row by row_cells(); the speculative part is spec_bench().
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/args.h"
#include "cli/bandwidth.h"
#include "cli/cli.h"
#include "cli/env_args.h"
#include "ctx.h"
#include "core/io.h"
#include "kernels/cpu.h"
#include "kv.h"
#include "model.h"
#include "sample.h"
#include "spec/engine.h"
#include "tokenizer.h"

#define BENCH_FLAGS (NX_ARGS_MODEL | NX_ARGS_RUNTIME | NX_ARGS_BENCH | NX_ARGS_SPEC)
#define BENCH_SEED 1234u
#define BW_BYTES ((size_t)1 << 30)   /* well beyond any last-level cache here (300 MiB L3) */

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: nextn bench -m FILE.gguf [-p N] [-n N] [-r N] [-d N[,N..]] [-t N] [-ub N] [-c N] [-ctk/-ctv TYPE] [--no-mmap] [--bw-mib N]\n"
            "  -p, --n-prompt N      prompt-processing test of N tokens (default 512, 0 = skip)\n"
            "  -n, --n-gen N         decode test of N tokens (default 128, 0 = skip)\n"
            "  -r, --repetitions N   timed repetitions per test, median reported (default 5)\n"
            "  -d, --n-depth N[,N..] run every test after N tokens already in the context (default 0)\n"
            "  -ctk, -ctv TYPE       KV cache types: f16 (default), f32, bf16, q8_0, q4_0\n"
            "  -t, --threads N       threads (default: physical cores)\n"
            "  -ub, --ubatch-size N  prompt rows per forward chunk (default 512)\n"
            "  -c, --ctx-size N      context (default: what the tests need)\n"
            "  --bw-mib N            buffer for the read-bandwidth measurement (default 1024; keep it > the L3)\n"
            "  --verify-sweep        cost of a verify batch of 1..16 rows relative to 1 (+ projected speedups)\n"
            "  -f, --file FILE       prompt text of the speculative test (default: built-in Python code)\n"
            "speculative decoding (greedy tg with speculation off and on, same prompt):\n%s"
            "Prints tok/s, effective weight GB/s and %% of the read bandwidth measured with the same\n"
            "threads, then resident memory vs the file size + KV.\n%s",
            nx_spec_params_usage(), nx_cli_env_usage());
}

/* ===== Tests and results ===== */

typedef enum { BENCH_PP, BENCH_TG } bench_kind;

typedef struct bench_test {
    bench_kind kind;
    int n;                      /* tokens */
    int depth;                  /* tokens already in the context (-d) */
} bench_test;

typedef struct bench_result {
    double tps_med, tps_sd;     /* tokens per second over the repetitions */
    double gbps, pct_bw;        /* tg only (< 0: not applicable) */
    double cpu_pct;             /* process CPU time / (wall time x threads) over the timed runs:
                                   well under 100% means other work took the cores */
} bench_result;

typedef struct bench_env {
    nx_model *m;
    nx_ctx *ctx;
    nx_batch *b;
    int n_ubatch, n_vocab, n_threads;
    nx_rng rng;
    double bw_gbps;             /* measured read bandwidth, same threads */
    size_t bytes_per_token;     /* weights streamed by one decode step */
    int depth;                  /* tokens of the depth prefix now decoded (-1: none) */
    float *rec;                 /* recurrent state after the depth prefix */
    double cpu_timed;           /* process CPU seconds spent in timed parts (not depth refills) */
} bench_env;

static double cpu_seconds(void);

/* n random tokens at positions p0.. of sequence 0 in ubatches, logits for the last row only. */
static int decode_prompt(bench_env *e, int p0, int n) {
    for (int i0 = 0; i0 < n; i0 += e->n_ubatch) {
        const int nb = n - i0 < e->n_ubatch ? n - i0 : e->n_ubatch;
        nx_batch_clear(e->b);
        for (int r = 0; r < nb; r++)
            nx_batch_add(e->b, (nx_token)(nx_rng_next(&e->rng) % (uint64_t)e->n_vocab), p0 + i0 + r, 0, i0 + r == n - 1);
        if (nx_decode(e->ctx, e->b) != NX_OK) return -1;
    }
    return 0;
}

/* Sequence 0 holding exactly the depth prefix of d tokens: cut back and restore the saved
 * recurrent state, or decode the prefix afresh (first time, or a ring no longer holds it). */
static int set_depth(bench_env *e, int d) {
    nx_kv *kv = e->ctx->kv;
    if (d == 0) {
        nx_kv_seq_reset(kv, 0);
        return 0;
    }
    if (e->depth == d && nx_kv_seq_restore(kv, 0, d, e->rec, NULL) == NX_OK) return 0;
    nx_kv_seq_reset(kv, 0);
    e->depth = -1;
    if (decode_prompt(e, 0, d) != 0) return -1;
    nx_kv_rec_save(kv, 0, e->rec);
    e->depth = d;
    return 0;
}

/* One repetition of a test: seconds, or < 0 on a decode error (message in nx_last_error). */
static double bench_once(bench_env *e, const bench_test *t) {
    if (set_depth(e, t->depth) != 0) return -1;
    const double c0 = cpu_seconds(), t0 = nx_cli_now();
    if (t->kind == BENCH_PP) {
        if (decode_prompt(e, t->depth, t->n) != 0) return -1;
    } else {
        for (int i = 0; i < t->n; i++) {
            nx_batch_clear(e->b);
            nx_batch_add(e->b, (nx_token)(nx_rng_next(&e->rng) % (uint64_t)e->n_vocab), t->depth + i, 0, true);
            if (nx_decode(e->ctx, e->b) != NX_OK) return -1;
        }
    }
    const double s = nx_cli_now() - t0;
    e->cpu_timed += cpu_seconds() - c0;
    return s;
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Warm-up, then `reps` timed runs; median and standard deviation of tok/s. */
static int bench_run(bench_env *e, const bench_test *t, int reps, bench_result *out) {
    double *tps = malloc(sizeof(double) * (size_t)reps);
    if (!tps) return -1;
    if (bench_once(e, t) < 0) { free(tps); return -1; }
    double sum = 0, wall = 0, cpu0 = e->cpu_timed;
    for (int r = 0; r < reps; r++) {
        double s = bench_once(e, t);
        if (s < 0) { free(tps); return -1; }
        tps[r] = s > 0 ? t->n / s : 0;
        sum += tps[r];
        wall += s;
    }
    out->cpu_pct = wall > 0 ? 100.0 * (e->cpu_timed - cpu0) / (wall * e->n_threads) : 0;
    const double mean = sum / reps;
    double var = 0;
    for (int r = 0; r < reps; r++) var += (tps[r] - mean) * (tps[r] - mean);
    qsort(tps, (size_t)reps, sizeof *tps, cmp_double);
    out->tps_med = reps % 2 ? tps[reps / 2] : 0.5 * (tps[reps / 2 - 1] + tps[reps / 2]);
    out->tps_sd = reps > 1 ? sqrt(var / (reps - 1)) : 0;
    out->gbps = out->pct_bw = -1;
    if (t->kind == BENCH_TG) {
        out->gbps = (double)e->bytes_per_token * out->tps_med / 1e9;
        out->pct_bw = e->bw_gbps > 0 ? 100.0 * out->gbps / e->bw_gbps : -1;
    }
    free(tps);
    return 0;
}

/* ===== Model facts ===== */

/* Weight bytes one decode step streams (see the file comment). */
static size_t bytes_per_token(const nx_model *m) {
    int64_t n_block = 0, n_nextn = 0, n_exp = 0, n_exp_used = 0;
    nx_model_key_int(m, "block_count", -1, &n_block);
    nx_model_key_int(m, "nextn_predict_layers", -1, &n_nextn);
    nx_model_key_int(m, "expert_count", -1, &n_exp);
    nx_model_key_int(m, "expert_used_count", -1, &n_exp_used);
    const bool tied = nx_gguf_find_tensor(m->gguf, "output.weight") < 0;
    size_t total = 0;
    const int64_t n = nx_gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < n; i++) {
        const nx_tensor *t = nx_gguf_tensor(m->gguf, i);
        long layer = -1;
        if (sscanf(t->name, "blk.%ld.", &layer) == 1 && n_nextn > 0 && layer >= n_block - n_nextn) continue;
        if (!strcmp(t->name, "token_embd.weight") && !tied) { total += t->nb[1]; continue; }   /* one row */
        if (strstr(t->name, "_exps") && n_exp > 0 && n_exp_used > 0) {
            total += (size_t)((double)t->nbytes * (double)n_exp_used / (double)n_exp);
            continue;
        }
        total += t->nbytes;
    }
    return total;
}

static int64_t n_params(const nx_model *m) {
    int64_t p = 0;
    for (int64_t i = 0; i < nx_gguf_n_tensors(m->gguf); i++) p += nx_tensor_nelements(nx_gguf_tensor(m->gguf, i));
    return p;
}

/* The weight type holding the most bytes among matrices (what a model is "in"). */
static const char *main_type(const nx_model *m) {
    size_t bytes[NX_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < nx_gguf_n_tensors(m->gguf); i++) {
        const nx_tensor *t = nx_gguf_tensor(m->gguf, i);
        if (t->n_dims >= 2 && (int)t->type >= 0 && (int)t->type < NX_TYPE_COUNT) bytes[t->type] += t->nbytes;
    }
    int best = 0;
    for (int k = 1; k < NX_TYPE_COUNT; k++) if (bytes[k] > bytes[best]) best = k;
    return nx_type_name((nx_type)best);
}

/* ===== Process facts ===== */

/* VmRSS and VmHWM of this process, bytes (0 if unavailable). */
static void read_mem(size_t *rss, size_t *hwm) {
    *rss = *hwm = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) *rss = (size_t)kb * 1024;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) *hwm = (size_t)kb * 1024;
    }
    fclose(f);
}

/* Reset VmHWM to the current RSS (Linux clear_refs "5"), so the bandwidth buffer does not count. */
static bool reset_hwm(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static void load_avg(char *buf, size_t n) {
    snprintf(buf, n, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(buf, n, "%.2f %.2f %.2f", a, b, c);
    fclose(f);
}

/* ===== Table ===== */

typedef struct bench_col {
    const char *name;
    int width;
    bool left;
} bench_col;

enum { COL_MODEL, COL_SIZE, COL_PARAMS, COL_TYPE, COL_THREADS, COL_TEST, COL_TPS, COL_GBPS, COL_PCT, COL_CPU, N_COLS };

static const bench_col k_cols[N_COLS] = {
    [COL_MODEL] = {"model", 24, true},   [COL_SIZE] = {"size", 10, false},   [COL_PARAMS] = {"params", 8, false},
    [COL_TYPE] = {"type", 6, true},      [COL_THREADS] = {"threads", 7, false}, [COL_TEST] = {"test", 14, false},
    [COL_TPS] = {"t/s", 17, false},      [COL_GBPS] = {"GB/s", 6, false},    [COL_PCT] = {"% BW", 5, false},
    [COL_CPU] = {"cpu", 5, false},
};

typedef char bench_cell[48];

static void print_cells(bench_cell *cells) {
    for (int c = 0; c < N_COLS; c++)
        printf(k_cols[c].left ? "| %-*s " : "| %*s ", k_cols[c].width, cells[c]);
    printf("|\n");
}

static void table_header(void) {
    bench_cell cells[N_COLS];
    for (int c = 0; c < N_COLS; c++) snprintf(cells[c], sizeof cells[c], "%s", k_cols[c].name);
    print_cells(cells);
    for (int c = 0; c < N_COLS; c++) {
        printf("| ");
        for (int k = 0; k < k_cols[c].width - 1; k++) putchar('-');
        printf("%c ", k_cols[c].left ? '-' : ':');
    }
    printf("|\n");
}

static void row_cells(const bench_env *e, const bench_test *t, const bench_result *r, bench_cell *cells) {
    const nx_model *m = e->m;
    const size_t wb = nx_cli_model_weight_bytes(m);
    const int64_t np = n_params(m);
    snprintf(cells[COL_MODEL], sizeof cells[0], "%.24s", m->name);
    if (wb >= ((size_t)1 << 30)) snprintf(cells[COL_SIZE], sizeof cells[0], "%.2f GiB", (double)wb / (1 << 30));
    else snprintf(cells[COL_SIZE], sizeof cells[0], "%.2f MiB", (double)wb / (1 << 20));
    if (np >= 1000000000) snprintf(cells[COL_PARAMS], sizeof cells[0], "%.2f B", (double)np / 1e9);
    else snprintf(cells[COL_PARAMS], sizeof cells[0], "%.2f M", (double)np / 1e6);
    snprintf(cells[COL_TYPE], sizeof cells[0], "%s", main_type(m));
    snprintf(cells[COL_THREADS], sizeof cells[0], "%d", e->n_threads);
    if (t->depth > 0) snprintf(cells[COL_TEST], sizeof cells[0], "%s%d @ d%d", t->kind == BENCH_PP ? "pp" : "tg", t->n, t->depth);
    else snprintf(cells[COL_TEST], sizeof cells[0], "%s%d", t->kind == BENCH_PP ? "pp" : "tg", t->n);
    snprintf(cells[COL_TPS], sizeof cells[0], "%.2f ± %.2f", r->tps_med, r->tps_sd);
    if (r->gbps >= 0) snprintf(cells[COL_GBPS], sizeof cells[0], "%.1f", r->gbps);
    else snprintf(cells[COL_GBPS], sizeof cells[0], "-");
    if (r->pct_bw >= 0) snprintf(cells[COL_PCT], sizeof cells[0], "%.0f%%", r->pct_bw);
    else snprintf(cells[COL_PCT], sizeof cells[0], "-");
    snprintf(cells[COL_CPU], sizeof cells[0], "%.0f%%", r->cpu_pct);
}

/* ===== Speculative decoding: off vs on, verify sweep ===== */

#define SWEEP_ROWS 16
#define SWEEP_REPS 7

/* Prompt of the speculative test when no -f is given: ordinary Python, written for this bench. */
static const char k_spec_prompt[] =
    "import json\n"
    "import os\n"
    "from dataclasses import dataclass, field\n"
    "from typing import Dict, List, Optional\n"
    "\n"
    "\n"
    "@dataclass\n"
    "class Item:\n"
    "    name: str\n"
    "    price: float\n"
    "    tags: List[str] = field(default_factory=list)\n"
    "\n"
    "\n"
    "class Inventory:\n"
    "    def __init__(self, path: str) -> None:\n"
    "        self.path = path\n"
    "        self.items: Dict[str, Item] = {}\n"
    "\n"
    "    def load(self) -> None:\n"
    "        if not os.path.exists(self.path):\n"
    "            return\n"
    "        with open(self.path) as f:\n"
    "            data = json.load(f)\n"
    "        for entry in data:\n"
    "            item = Item(entry[\"name\"], float(entry[\"price\"]), entry.get(\"tags\", []))\n"
    "            self.items[item.name] = item\n"
    "\n"
    "    def find(self, name: str) -> Optional[Item]:\n"
    "        return self.items.get(name)\n"
    "\n"
    "    def total(self) -> float:\n"
    "        return sum(item.price for item in self.items.values())\n"
    "\n"
    "    def by_tag(self, tag: str) -> List[Item]:\n";

typedef struct spec_run {
    double tps;                 /* committed tokens / s of rounds (the engine's clock) */
    nx_spec_stats st;
    double c_d;                 /* seconds per draft step */
    nx_token *out;
    int n_out;
} spec_run;

static int cmp_spec_run(const void *a, const void *b) {
    double x = ((const spec_run *)a)->tps, y = ((const spec_run *)b)->tps;
    return (x > y) - (x < y);
}

/* One greedy generation of n tokens through a fresh engine on sequence 0 (cleared before and after). */
static nx_status spec_generate(nx_ctx *ctx, const nx_spec_params *sp, const nx_token *prompt, int n_prompt, int n,
                               spec_run *r, nx_error *err) {
    nx_spec_engine_params p = nx_spec_engine_default_params();
    p.spec = *sp;
    p.spec.trace_path = NULL;
    nx_spec_engine *en = NULL;
    nx_seq_id s = -1;
    nx_spec_request rq = {.prompt = prompt, .n_prompt = n_prompt, .n_predict = n};
    nx_seq_rm(ctx, 0, -1, -1);
    nx_status st = nx_spec_engine_create(ctx, &p, &en, err);
    if (st == NX_OK) st = nx_spec_engine_add(en, &rq, &s, err);
    while (st == NX_OK && nx_spec_engine_n_active(en)) st = nx_spec_engine_step(en, err);
    if (st == NX_OK) {
        int n_out = 0;
        const nx_token *o = nx_spec_engine_output(en, s, &n_out);
        nx_token *cp = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof *cp);
        if (!cp) st = nx_fail(err, NX_ERR_NOMEM, "out of memory");
        else {
            memcpy(cp, o, (size_t)n_out * sizeof *cp);
            free(r->out);
            r->out = cp;
            r->n_out = n_out;
            r->st = *nx_spec_engine_stats_total(en);
            r->tps = nx_spec_stats_tokens_per_s(&r->st);
            r->c_d = nx_spec_engine_draft_cost(en);
        }
    }
    nx_spec_engine_free(en);
    nx_seq_rm(ctx, 0, -1, -1);
    return st;
}

/* The prompt of the speculative test: -f FILE or the built-in text, tokenized with the model's
 * tokenizer, first n_want tokens (all of them when shorter); random ids without a tokenizer. */
static nx_status spec_prompt(bench_env *e, const char *file, int n_want, nx_token_vec *out, char *what, size_t wsize,
                             nx_error *err) {
    nx_tokenizer *tok = NULL;
    char *text = NULL;
    size_t len = 0;
    nx_status st = nx_tokenizer_from_gguf(e->m->gguf, &tok, err);
    if (st != NX_OK) {
        if (file) return nx_error_prefix(err, "-f needs the model's tokenizer");
        nx_token_vec_free(out);
        out->ids = malloc((size_t)n_want * sizeof *out->ids);
        if (!out->ids) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
        out->cap = out->n = (size_t)n_want;
        for (int i = 0; i < n_want; i++) out->ids[i] = (nx_token)(nx_rng_next(&e->rng) % (uint64_t)e->n_vocab);
        snprintf(what, wsize, "%d random ids (no tokenizer)", n_want);
        return NX_OK;
    }
    if (file) st = nx_read_file(file, (size_t)64 << 20, &text, &len, err);
    if (st == NX_OK)
        st = nx_tokenize(tok, file ? text : k_spec_prompt, file ? len : sizeof k_spec_prompt - 1, NX_TOK_ADD_SPECIAL, out, err);
    if (st == NX_OK && out->n == 0) st = nx_fail(err, NX_ERR_INVALID_ARG, "the speculative test's prompt is empty");
    if (st == NX_OK && (int)out->n > n_want) out->n = (size_t)n_want;
    if (st == NX_OK) snprintf(what, wsize, "%zu tokens of %s", out->n, file ? file : "built-in Python code");
    free(text);
    nx_tokenizer_free(tok);
    return st;
}

/* Sweep verify batches of 1..rows rows on sequence 0 (one position of prompt). */
static nx_status spec_sweep(bench_env *e, int rows, double *sec, nx_spec_costs *costs, nx_error *err) {
    nx_seq_rm(e->ctx, 0, -1, -1);
    nx_batch_clear(e->b);
    nx_batch_add(e->b, 1 % e->n_vocab, 0, 0, false);
    nx_status st = nx_decode(e->ctx, e->b) == NX_OK ? NX_OK : nx_fail(err, NX_ERR_INTERNAL, "%s", nx_last_error());
    if (st == NX_OK) st = nx_spec_verify_sweep(e->ctx, 0, rows, SWEEP_REPS, sec, costs, err);
    nx_seq_rm(e->ctx, 0, -1, -1);
    return st;
}

/* Positions the speculative test and the sweep need. */
static int spec_ctx_need(const nx_cli_args *a, bool sweep) {
    int need = 0;
    if (a->spec.n_types > 0) need = (a->bench_n_prompt > 0 ? a->bench_n_prompt : 1) + a->bench_n_gen + 1;
    const int sw = 1 + (sweep ? SWEEP_ROWS : a->spec.draft_max + 1) * (SWEEP_REPS + 1);
    return need > sw ? need : sw;
}

static int spec_bench(bench_env *e, const nx_cli_args *a, const char *file, bool sweep) {
    const bool on = a->spec.n_types > 0;
    nx_error err = {0};
    int rc = 1;
    nx_token_vec pr = {0};
    spec_run *runs = calloc((size_t)2 * (size_t)(a->bench_reps + 1), sizeof *runs);
    double sec[NX_SPEC_VERIFY_ROWS_MAX + 1] = {0};
    nx_spec_costs costs;
    if (!runs) { fprintf(stderr, "nextn bench: out of memory\n"); return 1; }
    spec_run *off_r = runs, *on_r = runs + a->bench_reps + 1;
    const spec_run *med[2] = {NULL, NULL};
    double c_d = 0;
    bool same = true;
    if (on) {
        char what[320];
        const int n_want = a->bench_n_prompt > 0 ? a->bench_n_prompt : 1;
        if (spec_prompt(e, file, n_want, &pr, what, sizeof what, &err) != NX_OK) {
            fprintf(stderr, "nextn bench: %s\n", err.msg);
            goto done;
        }
        char desc[256];
        nx_spec_params_describe(&a->spec, desc, sizeof desc);
        printf("\nspeculative decoding: greedy tg%d from a prompt of %s; speculation %s; median of %d runs\n",
               a->bench_n_gen, what, desc, a->bench_reps);
        fflush(stdout);
        const nx_spec_params off = nx_spec_params_default();
        /* a warm-up of each mode, then the modes in turn */
        for (int r = 0; r <= a->bench_reps; r++) {
            if (spec_generate(e->ctx, &off, pr.ids, (int)pr.n, a->bench_n_gen, &off_r[r], &err) != NX_OK ||
                spec_generate(e->ctx, &a->spec, pr.ids, (int)pr.n, a->bench_n_gen, &on_r[r], &err) != NX_OK) {
                fprintf(stderr, "nextn bench: %s\n", err.msg);
                goto done;
            }
            same = same && on_r[r].n_out == off_r[r].n_out &&
                   !memcmp(on_r[r].out, off_r[r].out, (size_t)off_r[r].n_out * sizeof(nx_token));
        }
        qsort(off_r + 1, (size_t)a->bench_reps, sizeof *runs, cmp_spec_run);
        qsort(on_r + 1, (size_t)a->bench_reps, sizeof *runs, cmp_spec_run);
        med[0] = &off_r[1 + a->bench_reps / 2];
        med[1] = &on_r[1 + a->bench_reps / 2];
        c_d = med[1]->c_d;
    }
    const int rows = sweep ? SWEEP_ROWS : a->spec.draft_max + 1;
    if (spec_sweep(e, rows, sec, &costs, &err) != NX_OK) {
        fprintf(stderr, "nextn bench: verify sweep: %s\n", err.msg);
        goto done;
    }
    if (on) {
        const nx_spec_stats *st = &med[1]->st;
        const double pred = nx_spec_predicted_speedup_stats(st, c_d, &costs);
        const double speed = med[0]->tps > 0 ? med[1]->tps / med[0]->tps : 0;
        char depth[160] = "-";
        size_t dl = 0;
        for (int d = 1; d <= a->spec.draft_max && d <= NX_SPEC_DRAFT_CAP && dl < sizeof depth - 8; d++) {
            double ad = nx_spec_stats_depth_rate(st, d);
            if (ad != ad) continue;
            dl += (size_t)snprintf(depth + dl, sizeof depth - dl, "%s%.2f", dl ? " " : "", ad);
        }
        printf("| %-10s | %12s | %8s | %9s | %9s | %10s | %-24s | %9s |\n", "mode", "t/s", "speedup", "predicted",
               "accept", "mean acc", "per-depth acceptance", "tok/round");
        printf("| ---------- | -----------: | -------: | --------: | --------: | ---------: | ------------------------ | --------: |\n");
        printf("| %-10s | %12.2f | %8.3f | %9.3f | %9s | %10s | %-24s | %9.2f |\n", "spec off", med[0]->tps, 1.0, 1.0, "-",
               "-", "-", nx_spec_stats_tokens_per_round(&med[0]->st));
        char name[16];
        snprintf(name, sizeof name, "%.10s", nx_spec_type_name(a->spec.types[0]));
        if (a->spec.n_types > 1) snprintf(name, sizeof name, "chain");
        printf("| %-10s | %12.2f | %8.3f | %9.3f | %9.3f | %10.2f | %-24s | %9.2f |\n", name, med[1]->tps, speed, pred,
               nx_spec_stats_accept_rate(st), nx_spec_stats_mean_accepted(st), depth, nx_spec_stats_tokens_per_round(st));
        printf("measured / predicted speedup %.3f | draft %.4f ms/step, verify c_v(1) %.4f ms (sweep) | output %s\n",
               pred > 0 ? speed / pred : 0.0, c_d * 1e3, sec[1] * 1e3,
               same ? "identical with speculation off (lossless)" : "DIFFERENT from speculation off (bug)");
    }
    if (sweep) {
        printf("\nverify sweep: one decode of n rows with recurrent snapshots, median of %d, relative to 1 row\n", SWEEP_REPS);
        printf("| rows |        ms | x c_v(1) |\n| ---: | --------: | -------: |\n");
        for (int n = 1; n <= SWEEP_ROWS; n++) printf("| %4d | %9.4f | %8.3f |\n", n, sec[n] * 1e3, sec[1] > 0 ? sec[n] / sec[1] : 0.0);
        printf("projected speedup (uniform acceptance a at every depth, best k in 1..%d, draft %.4f ms/step%s):\n",
               SWEEP_ROWS - 1, c_d * 1e3, on ? "" : " — no speculative run: drafting assumed free");
        static const double alphas[] = {0.6, 0.8, 0.9};
        for (size_t i = 0; i < sizeof alphas / sizeof alphas[0]; i++) {
            int best = 1;
            double bs = nx_spec_predicted_speedup_uniform(alphas[i], 1, c_d, &costs);
            for (int k = 2; k < SWEEP_ROWS; k++) {
                double sp = nx_spec_predicted_speedup_uniform(alphas[i], k, c_d, &costs);
                if (sp > bs) { bs = sp; best = k; }
            }
            printf("  a = %.1f: %.3fx at k = %d%s\n", alphas[i], bs, best, bs < 1 ? " (below 1: plain decoding wins)" : "");
        }
    }
    fflush(stdout);
    rc = same ? 0 : 1;
done:
    for (int r = 0; r < 2 * (a->bench_reps + 1); r++) free(runs[r].out);
    free(runs);
    nx_token_vec_free(&pr);
    return rc;
}

/* ===== Command ===== */

int nx_cmd_bench(int argc, char **argv) {
    nx_cli_args a;
    nx_cli_args_init(&a);
    nx_error err = {0};
    long bw_mib = (long)(BW_BYTES >> 20);
    bool sweep = false;
    const char *spec_file = NULL;
    for (int i = 1; i < argc;) {
        int r = nx_cli_args_parse_one(&a, BENCH_FLAGS, argc, argv, &i, &err);
        if (r == 0 && !strcmp(argv[i], "--verify-sweep")) {
            sweep = true;
            i++;
            continue;
        }
        if (r == 0 && (!strcmp(argv[i], "-f") || !strcmp(argv[i], "--file"))) {
            if (i + 1 < argc && argv[i + 1][0]) {
                spec_file = argv[i + 1];
                i += 2;
                continue;
            }
            nx_fail(&err, NX_ERR_INVALID_ARG, "%s needs a file name", argv[i]);
            r = -1;
        } else if (r == 0 && !strcmp(argv[i], "--bw-mib")) {
            char *end = NULL;
            bw_mib = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (!end || end == argv[i + 1] || *end || bw_mib < 16 || bw_mib > (1L << 20)) {
                nx_fail(&err, NX_ERR_INVALID_ARG, "--bw-mib: expected a size in MiB >= 16, got '%s'",
                        i + 1 < argc ? argv[i + 1] : "");
                r = -1;
            } else {
                i += 2;
                continue;
            }
        } else if (r == 0) {
            nx_fail(&err, NX_ERR_INVALID_ARG, "unknown flag '%s'", argv[i]);
            r = -1;
        }
        if (r < 0) {
            fprintf(stderr, "nextn bench: %s (see nextn bench --help)\n", err.msg);
            return 2;
        }
    }
    if (a.help) { bench_usage(stdout); return 0; }
    if (!a.model) { fprintf(stderr, "nextn bench: no model: give -m FILE.gguf (see nextn bench --help)\n"); return 2; }
    if (a.bench_n_prompt == 0 && a.bench_n_gen == 0) { fprintf(stderr, "nextn bench: -p and -n are both 0: nothing to measure\n"); return 2; }
    if (nx_spec_params_validate(&a.spec, &err) != NX_OK) { fprintf(stderr, "nextn bench: %s\n", err.msg); return 2; }
    if (a.spec.n_types > 0 && a.bench_n_gen == 0) { fprintf(stderr, "nextn bench: --spec-type needs a decode test (-n > 0)\n"); return 2; }
    const bool spec = a.spec.n_types > 0 || sweep;
    int max_depth = 0;
    for (int i = 0; i < a.bench_n_depth; i++)
        if (a.bench_depth[i] > max_depth) max_depth = a.bench_depth[i];
    int need = (a.bench_n_prompt > a.bench_n_gen ? a.bench_n_prompt : a.bench_n_gen) + max_depth;
    if (spec && a.n_ctx == 0 && spec_ctx_need(&a, sweep) > need) need = spec_ctx_need(&a, sweep);
    if (a.n_ctx > 0 && a.n_ctx < need) {
        fprintf(stderr, "nextn bench: -c %d is smaller than the longest test (%d tokens with its depth)\n", a.n_ctx, need);
        return 2;
    }

    int rc = 1;
    bench_env e = {0};
    double t0 = nx_cli_now();
    if (nx_cli_load_model(&a, &e.m, &err) != NX_OK) { fprintf(stderr, "nextn bench: %s\n", err.msg); goto done; }
    const double t_load = nx_cli_now() - t0;
    nx_ctx_params cp = nx_cli_ctx_params(&a);
    if (!cp.n_ctx) cp.n_ctx = need;
    if (nx_ctx_create(e.m, &cp, &e.ctx) != NX_OK) { fprintf(stderr, "nextn bench: %s\n", nx_last_error()); goto done; }
    e.n_ubatch = a.n_ubatch;
    e.n_vocab = nx_model_n_vocab(e.m);
    e.n_threads = nx_threadpool_size(e.ctx->tp);
    e.b = nx_batch_create(e.n_ubatch);
    if (!e.b) { fprintf(stderr, "nextn bench: out of memory\n"); goto done; }
    nx_rng_seed(&e.rng, BENCH_SEED);
    e.bytes_per_token = bytes_per_token(e.m);
    e.depth = -1;
    e.rec = malloc(((size_t)nx_kv_rec_floats(e.ctx->kv) + 1) * sizeof(float));
    if (!e.rec) { fprintf(stderr, "nextn bench: out of memory\n"); goto done; }

    char la[64];
    load_avg(la, sizeof la);
    e.bw_gbps = nx_cli_read_bandwidth(e.n_threads, (size_t)bw_mib << 20, 8);
    const bool hwm_reset = reset_hwm();
    printf("model: %s (%s, %.2f MiB, loaded in %.2f s)\n", a.model, nx_model_arch(e.m),
           (double)nx_cli_model_weight_bytes(e.m) / (1 << 20), t_load);
    printf("cpu: %s kernels%s%s, %d threads; read bandwidth %.1f GB/s (%ld MiB buffer, %d threads side by side, fastest of 8 passes per 32 MiB chunk)\n",
           nx_cpu_level_name(nx_cpu_level_get()), nx_cpu_amx() ? " + amx prefill" : "", nx_cpu_bf16dot() ? " + bf16 dot" : "",
           e.n_threads, e.bw_gbps, bw_mib, e.n_threads);
    printf("decode streams %.2f MiB of weights per token -> speed of light %.1f tok/s\n",
           (double)e.bytes_per_token / (1 << 20), e.bw_gbps > 0 ? e.bw_gbps * 1e9 / (double)e.bytes_per_token : 0.0);
    const nx_ctx_memory mem = nx_ctx_memory_info(e.ctx);
    printf("KV cache: K %s, V %s: %.2f KiB per token of context (K + V, all layers), %.2f MiB fixed (recurrent state, "
           "sliding-window rings); n_ctx %d -> %.1f MiB\n",
           nx_cache_type_name(cp.type_k), nx_cache_type_name(cp.type_v), (double)mem.per_pos / 1024.0,
           (double)mem.fixed / (1 << 20), nx_ctx_n_ctx(e.ctx), (double)mem.total / (1 << 20));
    printf("load average before: %s\n\n", la);
    fflush(stdout);

    bench_test tests[2 * NX_BENCH_MAX_DEPTHS];
    int n_tests = 0;
    for (int d = 0; d < a.bench_n_depth; d++) {
        if (a.bench_n_prompt > 0)
            tests[n_tests++] = (bench_test){.kind = BENCH_PP, .n = a.bench_n_prompt, .depth = a.bench_depth[d]};
        if (a.bench_n_gen > 0)
            tests[n_tests++] = (bench_test){.kind = BENCH_TG, .n = a.bench_n_gen, .depth = a.bench_depth[d]};
    }
    table_header();
    for (int i = 0; i < n_tests; i++) {
        if (tests[i].depth > 0 && e.depth != tests[i].depth) {
            const double td = nx_cli_now();
            if (set_depth(&e, tests[i].depth) != 0) {
                fprintf(stderr, "nextn bench: %s\n", nx_last_error());
                goto done;
            }
            /* stderr: the table on stdout stays one table */
            fprintf(stderr, "(depth %d: prefix decoded in %.2f s, %.1f tok/s, untimed)\n", tests[i].depth,
                    nx_cli_now() - td, tests[i].depth / (nx_cli_now() - td));
        }
        bench_result r;
        if (bench_run(&e, &tests[i], a.bench_reps, &r) != 0) {
            fprintf(stderr, "nextn bench: %s\n", nx_last_error()[0] ? nx_last_error() : "out of memory");
            goto done;
        }
        bench_cell cells[N_COLS];
        row_cells(&e, &tests[i], &r, cells);
        print_cells(cells);
        fflush(stdout);
    }
    if (spec && spec_bench(&e, &a, spec_file, sweep) != 0) goto done;

    size_t rss, hwm;
    read_mem(&rss, &hwm);
    const size_t file = nx_gguf_file_size(e.m->gguf), kv = nx_kv_bytes(e.ctx->kv), base = file + kv;
    load_avg(la, sizeof la);
    printf("\nmemory: VmRSS %.1f MiB, VmHWM %.1f MiB%s | file %.1f MiB + KV/state %.1f MiB (n_ctx %d) = %.1f MiB"
           " | RSS %.1f%%, HWM %.1f%% of that\n",
           (double)rss / (1 << 20), (double)hwm / (1 << 20), hwm_reset ? "" : " (peak includes the bandwidth buffer)",
           (double)file / (1 << 20), (double)kv / (1 << 20), nx_ctx_n_ctx(e.ctx), (double)base / (1 << 20),
           100.0 * (double)rss / (double)base, 100.0 * (double)hwm / (double)base);
    printf("load average after: %s\n", la);
    rc = 0;
done:
    free(e.rec);
    nx_batch_free(e.b);
    nx_ctx_free(e.ctx);
    nx_model_free(e.m);
    return rc;
}
