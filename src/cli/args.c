/*
 * args.c — shared flags of run / bench / eval / serve (see args.h for the list and defaults),
 * model loading with a progress bar, prompt reading.
 *
 * Owns no state beyond the nx_cli_args it fills. Prints nothing except the loading progress
 * bar (stderr, only on a terminal); errors go back in an nx_error for the command to print.
 */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/io.h"
#include "gguf.h"
#include "model.h"

double nx_cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void nx_cli_args_init(nx_cli_args *a) {
    memset(a, 0, sizeof *a);
    a->n_predict = -1;
    a->n_threads = 0;
    a->n_ctx = 0;
    a->n_ubatch = 512;
    a->type_k = NX_CACHE_F16;   /* as llama.cpp */
    a->type_v = NX_CACHE_F16;
    a->temp = 0.8f;
    a->top_k = 40;
    a->top_p = 0.95f;
    a->min_p = 0.05f;
    a->seed = NX_SAMPLER_SEED_RANDOM;
    a->repeat_penalty = 1.0f;
    a->repeat_last_n = 64;
    a->presence_penalty = 0.0f;
    a->frequency_penalty = 0.0f;
    a->bench_n_prompt = 512;
    a->bench_n_gen = 128;
    a->bench_reps = 5;
    a->bench_n_depth = 1;   /* one test series at depth 0 */
    a->bench_depth[0] = 0;
    a->spec = nx_spec_params_default();
}

/* ===== Values ===== */

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out, nx_error *err) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno == ERANGE) {
        nx_fail(err, NX_ERR_INVALID_ARG, "%s: expected an integer, got '%s'", flag, v);
        return -1;
    }
    if (x < lo || x > hi) {
        nx_fail(err, NX_ERR_INVALID_ARG, "%s: %ld is out of range (%ld..%ld)", flag, x, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out, nx_error *err) {
    long x;
    if (parse_long(flag, v, lo, hi, &x, err)) return -1;
    *out = (int)x;
    return 0;
}

static int parse_float(const char *flag, const char *v, double lo, double hi, float *out, nx_error *err) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x)) {
        nx_fail(err, NX_ERR_INVALID_ARG, "%s: expected a number, got '%s'", flag, v);
        return -1;
    }
    if (x < lo || x > hi) {
        nx_fail(err, NX_ERR_INVALID_ARG, "%s: %s is out of range (%g..%g)", flag, v, lo, hi);
        return -1;
    }
    *out = (float)x;
    return 0;
}

/* "N[,N...]" (llama-bench's lists), at most cap values in [lo, hi]. */
static int parse_int_list(const char *flag, const char *v, int lo, int hi, int *out, int cap, int *n_out, nx_error *err) {
    int n = 0;
    const char *s = v;
    for (;;) {
        char *end = NULL;
        long x = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || x < lo || x > hi || n == cap) {
            nx_fail(err, NX_ERR_INVALID_ARG, "%s: expected up to %d comma-separated integers in [%d, %d], got '%s'", flag,
                    cap, lo, hi, v);
            return -1;
        }
        out[n++] = (int)x;
        if (!*end) break;
        s = end + 1;
    }
    *n_out = n;
    return 0;
}

static int parse_cache_type(const char *flag, const char *v, nx_cache_type *out, nx_error *err) {
    if (!nx_cache_type_parse(v, out)) {
        nx_fail(err, NX_ERR_INVALID_ARG, "%s: unsupported cache type '%s' (supported: " NX_CACHE_TYPE_NAMES ")", flag, v);
        return -1;
    }
    return 0;
}

static int parse_seed(const char *flag, const char *v, uint32_t *out, nx_error *err) {
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < -1 || x > 0xFFFFFFFFLL) {
        nx_fail(err, NX_ERR_INVALID_ARG, "%s: expected -1 (random) or an integer 0..4294967295, got '%s'", flag, v);
        return -1;
    }
    *out = x < 0 ? NX_SAMPLER_SEED_RANDOM : (uint32_t)x;
    return 0;
}

/* ===== Flags ===== */

static bool is(const char *name, const char *a, const char *b) { return !strcmp(name, a) || (b && !strcmp(name, b)); }

int nx_cli_args_parse_one(nx_cli_args *a, unsigned groups, int argc, char **argv, int *i, nx_error *err) {
    const char *arg = argv[*i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
        a->help = true;
        (*i)++;
        return 1;
    }
    if (groups & NX_ARGS_SPEC) {
        bool used = false;
        if (nx_spec_params_parse_arg(&a->spec, argc, argv, i, &used, err) != NX_OK) return -1;
        if (used) return 1;
    }
    /* "--flag=value" for long flags */
    char name[64];
    const char *inline_v = NULL;
    const char *eq = !strncmp(arg, "--", 2) ? strchr(arg, '=') : NULL;
    if (eq && (size_t)(eq - arg) < sizeof name) {
        memcpy(name, arg, (size_t)(eq - arg));
        name[eq - arg] = '\0';
        inline_v = eq + 1;
    } else {
        snprintf(name, sizeof name, "%s", arg);
    }
    const bool bench = groups & NX_ARGS_BENCH;
    enum { NONE, MODEL, PROMPT, FILE_, NPRED, THREADS, CTX, UB, CTK, CTV, TEMP, TOPK, TOPP, MINP, SEED, REP, REPN,
           PRES, FREQ, REPS, BP, BN, BD, TMPL } f = NONE;
    bool flag_only = false;
    if ((groups & NX_ARGS_MODEL) && is(name, "-m", "--model")) f = MODEL;
    else if (bench && is(name, "-p", "--n-prompt")) f = BP;
    else if (bench && is(name, "-n", "--n-gen")) f = BN;
    else if (bench && is(name, "-r", "--repetitions")) f = REPS;
    else if (bench && is(name, "-d", "--n-depth")) f = BD;
    else if ((groups & NX_ARGS_PROMPT) && is(name, "-p", "--prompt")) f = PROMPT;
    else if ((groups & NX_ARGS_PROMPT) && is(name, "-f", "--file")) f = FILE_;
    else if ((groups & NX_ARGS_PROMPT) && is(name, "--chat", NULL)) { a->chat = true; flag_only = true; }
    else if ((groups & NX_ARGS_PROMPT) && is(name, "--chat-template-file", NULL)) f = TMPL;
    else if ((groups & NX_ARGS_PREDICT) && is(name, "-n", "--n-predict")) f = NPRED;
    else if ((groups & NX_ARGS_PREDICT) && is(name, "--predict", NULL)) f = NPRED;
    else if ((groups & NX_ARGS_RUNTIME) && is(name, "-t", "--threads")) f = THREADS;
    else if ((groups & NX_ARGS_RUNTIME) && is(name, "-c", "--ctx-size")) f = CTX;
    else if ((groups & NX_ARGS_RUNTIME) && is(name, "-ub", "--ubatch-size")) f = UB;
    else if ((groups & NX_ARGS_RUNTIME) && is(name, "--no-mmap", NULL)) { a->no_mmap = true; flag_only = true; }
    else if ((groups & NX_ARGS_RUNTIME) && is(name, "--mmap", NULL)) { a->no_mmap = false; flag_only = true; }
    else if ((groups & NX_ARGS_RUNTIME) && is(name, "-ctk", "--cache-type-k")) f = CTK;
    else if ((groups & NX_ARGS_RUNTIME) && is(name, "-ctv", "--cache-type-v")) f = CTV;
    else if ((groups & NX_ARGS_SAMPLING) && is(name, "--temp", "--temperature")) f = TEMP;
    else if ((groups & NX_ARGS_SAMPLING) && is(name, "--top-k", NULL)) f = TOPK;
    else if ((groups & NX_ARGS_SAMPLING) && is(name, "--top-p", NULL)) f = TOPP;
    else if ((groups & NX_ARGS_SAMPLING) && is(name, "--min-p", NULL)) f = MINP;
    else if ((groups & NX_ARGS_SAMPLING) && is(name, "-s", "--seed")) f = SEED;
    else if ((groups & NX_ARGS_SAMPLING) && is(name, "--repeat-penalty", NULL)) f = REP;
    else if ((groups & NX_ARGS_SAMPLING) && is(name, "--repeat-last-n", NULL)) f = REPN;
    else if ((groups & NX_ARGS_SAMPLING) && is(name, "--presence-penalty", NULL)) f = PRES;
    else if ((groups & NX_ARGS_SAMPLING) && is(name, "--frequency-penalty", NULL)) f = FREQ;
    else return 0;

    if (flag_only) {
        if (inline_v) { nx_fail(err, NX_ERR_INVALID_ARG, "%s takes no value", name); return -1; }
        (*i)++;
        return 1;
    }
    const char *v = inline_v;
    if (!v) {
        if (*i + 1 >= argc) { nx_fail(err, NX_ERR_INVALID_ARG, "%s needs a value", name); return -1; }
        v = argv[*i + 1];
    }
    int rc = 0;
    switch (f) {
    case MODEL:   a->model = v; break;
    case PROMPT:  a->prompt = v; break;
    case FILE_:   a->prompt_file = v; break;
    case TMPL:    a->chat_template_file = v; a->chat = true; break;
    case NPRED:   rc = parse_int(name, v, -1, 1 << 30, &a->n_predict, err); break;
    case THREADS: rc = parse_int(name, v, 1, 1024, &a->n_threads, err); break;
    case CTX:     rc = parse_int(name, v, 0, 1 << 24, &a->n_ctx, err); break;
    case UB:      rc = parse_int(name, v, 1, 65536, &a->n_ubatch, err); break;
    case CTK:     rc = parse_cache_type(name, v, &a->type_k, err); break;
    case CTV:     rc = parse_cache_type(name, v, &a->type_v, err); break;
    case TEMP:    rc = parse_float(name, v, -1e9, 1e9, &a->temp, err); break;
    case TOPK:    rc = parse_int(name, v, -1, 1 << 30, &a->top_k, err); break;
    case TOPP:    rc = parse_float(name, v, 0.0, 1.0, &a->top_p, err); break;
    case MINP:    rc = parse_float(name, v, 0.0, 1.0, &a->min_p, err); break;
    case SEED:    rc = parse_seed(name, v, &a->seed, err); break;
    case REP:     rc = parse_float(name, v, 1e-6, 1e9, &a->repeat_penalty, err); break;
    case REPN:    rc = parse_int(name, v, -1, 1 << 30, &a->repeat_last_n, err); break;
    case PRES:    rc = parse_float(name, v, -1e9, 1e9, &a->presence_penalty, err); break;
    case FREQ:    rc = parse_float(name, v, -1e9, 1e9, &a->frequency_penalty, err); break;
    case REPS:    rc = parse_int(name, v, 1, 1000, &a->bench_reps, err); break;
    case BP:      rc = parse_int(name, v, 0, 1 << 20, &a->bench_n_prompt, err); break;
    case BN:      rc = parse_int(name, v, 0, 1 << 20, &a->bench_n_gen, err); break;
    case BD:      rc = parse_int_list(name, v, 0, 1 << 24, a->bench_depth, NX_BENCH_MAX_DEPTHS, &a->bench_n_depth, err); break;
    case NONE:    break;
    }
    if (rc) return -1;
    *i += inline_v ? 1 : 2;
    return 1;
}

nx_status nx_cli_args_parse(nx_cli_args *a, unsigned groups, int argc, char **argv, nx_error *err) {
    for (int i = 1; i < argc;) {
        int r = nx_cli_args_parse_one(a, groups, argc, argv, &i, err);
        if (r < 0) return err ? err->code : NX_ERR_INVALID_ARG;
        if (r == 0) {
            if (argv[i][0] == '-' && argv[i][1]) return nx_fail(err, NX_ERR_INVALID_ARG, "unknown flag '%s'", argv[i]);
            return nx_fail(err, NX_ERR_INVALID_ARG, "unexpected argument '%s' (flags come as -x VALUE)", argv[i]);
        }
    }
    if (groups & NX_ARGS_SPEC) return nx_spec_params_validate(&a->spec, err);
    return NX_OK;
}

/* ===== Library parameters ===== */

nx_model_params nx_cli_model_params(const nx_cli_args *a) {
    nx_model_params p = nx_model_default_params();
    p.n_threads = a->n_threads;
    p.use_mmap = !a->no_mmap;
    return p;
}

nx_ctx_params nx_cli_ctx_params(const nx_cli_args *a) {
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = a->n_ctx;
    p.n_ubatch = a->n_ubatch;
    p.n_threads = a->n_threads;
    p.type_k = a->type_k;
    p.type_v = a->type_v;
    return p;
}

nx_sampler_params nx_cli_sampler_params(const nx_cli_args *a, int32_t n_vocab) {
    nx_sampler_params p = nx_sampler_default_params(n_vocab);
    p.seed = a->seed;
    p.temperature = a->temp;
    p.top_k = a->top_k;
    p.top_p = a->top_p;
    p.min_p = a->min_p;
    p.penalty_last_n = a->repeat_last_n;
    p.repeat_penalty = a->repeat_penalty;
    p.presence_penalty = a->presence_penalty;
    p.frequency_penalty = a->frequency_penalty;
    return p;
}

nx_status nx_cli_read_prompt(const nx_cli_args *a, char **out, size_t *len, nx_error *err) {
    if (a->prompt && a->prompt_file) return nx_fail(err, NX_ERR_INVALID_ARG, "give the prompt with -p or -f, not both");
    if (!a->prompt && !a->prompt_file) return nx_fail(err, NX_ERR_INVALID_ARG, "no prompt: give -p TEXT or -f FILE");
    if (a->prompt_file) return nx_read_file(a->prompt_file, (size_t)64 << 20, out, len, err);
    size_t n = strlen(a->prompt);
    char *s = malloc(n + 1);
    if (!s) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    memcpy(s, a->prompt, n + 1);
    *out = s;
    if (len) *len = n;
    return NX_OK;
}

/* ===== Loading ===== */

size_t nx_cli_model_weight_bytes(const nx_model *m) {
    size_t total = 0;
    const int64_t n = nx_gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < n; i++) total += nx_gguf_tensor(m->gguf, i)->nbytes;
    return total;
}

#define BAR_WIDTH 30

static void draw_bar(const char *path, size_t done, size_t total, bool final) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int filled = total ? (int)((double)done / (double)total * BAR_WIDTH) : BAR_WIDTH;
    char bar[BAR_WIDTH + 1];
    for (int k = 0; k < BAR_WIDTH; k++) bar[k] = k < filled ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\rloading %.40s [%s] %3d%% %zu/%zu MiB%s", base, bar,
            total ? (int)((double)done * 100.0 / (double)total) : 100, done >> 20, total >> 20, final ? "\n" : "");
    fflush(stderr);
}

/* Read one byte per page of every tensor, in file order: the weights come into memory now
 * (sequential reads, readahead) rather than by random faults inside the first decode. */
static void prefault(const nx_model *m, const char *path) {
    const size_t page = 4096, chunk = (size_t)16 << 20;
    const size_t total = nx_cli_model_weight_bytes(m);
    const bool tty = isatty(STDERR_FILENO);
    const double t0 = nx_cli_now();
    double last_draw = 0;
    bool shown = false;
    size_t done = 0;
    volatile unsigned char sink = 0;
    const int64_t n = nx_gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < n; i++) {
        const nx_tensor *t = nx_gguf_tensor(m->gguf, i);
        if (t->packed) { done += t->nbytes; continue; }   /* its packed copy is resident; the original's pages were released */
        const unsigned char *p = t->data;
        for (size_t off = 0; off < t->nbytes; off += chunk) {
            size_t end = off + chunk < t->nbytes ? off + chunk : t->nbytes;
            unsigned char acc = 0;
            for (size_t o = off; o < end; o += page) acc ^= p[o];
            sink ^= acc;
            done += end - off;
            if (!tty) continue;
            double el = nx_cli_now() - t0;
            /* show the bar once the load is on course to take more than about a second */
            bool slow = el > 1.0 || (el > 0.2 && el / (double)done * (double)total > 1.0);
            if (slow && el - last_draw > 0.1) {
                draw_bar(path, done, total, false);
                shown = true;
                last_draw = el;
            }
        }
    }
    (void)sink;
    if (shown) draw_bar(path, total, total, true);
}

nx_status nx_cli_load_model(const nx_cli_args *a, nx_model **out, nx_error *err) {
    if (!a->model) return nx_fail(err, NX_ERR_INVALID_ARG, "no model: give -m FILE.gguf");
    nx_model_params mp = nx_cli_model_params(a);
    nx_model *m = NULL;
    nx_status st = nx_model_load(a->model, &mp, &m);
    if (st != NX_OK) return nx_fail(err, st, "%s", nx_last_error());
    prefault(m, a->model);
    *out = m;
    return NX_OK;
}
