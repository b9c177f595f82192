/*
 * args.h — the flags `run`, `bench`, `eval` and `serve` share, and the helpers around them
 * (model loading with a progress bar, prompt reading, sampler / context parameters).
 *
 * Flags keep llama.cpp's names and defaults where llama.cpp has them:
 *   -m, --model FILE          model GGUF
 *   -p, --prompt TEXT         prompt text (bench: -p N = prompt tokens, llama-bench's meaning)
 *   -f, --file FILE           prompt from a file ('-' = stdin)
 *   -n, --n-predict N         tokens to generate, -1 = until end of generation (bench: -n N)
 *   -t, --threads N           threads (default: physical cores)
 *   -c, --ctx-size N          context positions, 0 = the model's (at most 4096)
 *   -ub, --ubatch-size N      rows per forward chunk (512)
 *   -ctk / -ctv TYPE          KV cache type: f16 (default, as llama.cpp) | f32 | bf16 | q8_0 | q4_0
 *   --no-mmap / --mmap        read the weights into (huge-page) memory instead of mapping the file
 *   --temp 0.8  --top-k 40  --top-p 0.95  --min-p 0.05  -s, --seed -1 (random)
 *   --repeat-penalty 1.0  --repeat-last-n 64  --presence-penalty 0  --frequency-penalty 0
 *   --chat                    wrap the prompt as one user turn: the GGUF's chat template, else ChatML
 *   --chat-template-file F    the Jinja chat template --chat uses
 *   -r, --repetitions N       bench: repetitions per test (5)
 *   -d, --n-depth N[,N...]    bench: each test runs after N tokens are already in the context (0)
 *   --spec-type ... --spec-fallback   speculative decoding (spec/spec_params.h, group NX_ARGS_SPEC)
 * "--flag=value" is accepted for long flags. Every error names the flag and says why, in one
 * line (NX_ERR_INVALID_ARG in an nx_error, for the command to print as "nextn CMD: MSG").
 *
 * Never: print (commands print their errors; the one exception is the loading progress bar of
 * nx_cli_load_model, on a terminal only), exit, or keep state outside the nx_cli_args it is given.
 */
#ifndef NX_CLI_ARGS_H
#define NX_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "nextn.h"
#include "sample.h"
#include "spec/spec_params.h"

/* Flag groups a command accepts (bit mask). */
enum {
    NX_ARGS_MODEL    = 1u << 0,   /* -m */
    NX_ARGS_PROMPT   = 1u << 1,   /* -p TEXT, -f, --chat */
    NX_ARGS_PREDICT  = 1u << 2,   /* -n (-1 allowed) */
    NX_ARGS_RUNTIME  = 1u << 3,   /* -t, -c, -ub, -ctk, -ctv */
    NX_ARGS_SAMPLING = 1u << 4,   /* --temp ... --frequency-penalty, -s/--seed */
    NX_ARGS_BENCH    = 1u << 5,   /* -p N, -n N, -r N (exclusive with PROMPT / PREDICT) */
    NX_ARGS_SPEC     = 1u << 6,   /* --spec-type, --draft-max, ... (spec_params.h) */
};

typedef struct nx_cli_args {
    const char *model;          /* -m; NULL if not given */
    const char *prompt;         /* -p TEXT; NULL if not given */
    const char *prompt_file;    /* -f; NULL if not given */
    bool chat;                  /* --chat */
    const char *chat_template_file; /* --chat-template-file; NULL: the GGUF's template */
    int n_predict;              /* -n: -1 = until end of generation or a full context */
    int n_threads;              /* -t: 0 = physical cores */
    int n_ctx;                  /* -c: 0 = the model's training context, at most 4096 */
    int n_ubatch;               /* -ub: 512 */
    bool no_mmap;               /* --no-mmap: weights copied into memory (default: mapped) */
    nx_cache_type type_k;       /* -ctk: F16 */
    nx_cache_type type_v;       /* -ctv: F16 */
    /* sampling, llama.cpp's common defaults */
    float temp;                 /* 0.8; <= 0 = greedy */
    int top_k;                  /* 40; <= 0 = off */
    float top_p;                /* 0.95; >= 1 = off */
    float min_p;                /* 0.05; 0 = off */
    uint32_t seed;              /* NX_SAMPLER_SEED_RANDOM (-1) or a fixed seed */
    float repeat_penalty;       /* 1.0 = off */
    int repeat_last_n;          /* 64; 0 = off; -1 = the whole context */
    float presence_penalty;     /* 0 = off */
    float frequency_penalty;    /* 0 = off */
    /* bench */
    int bench_n_prompt;         /* -p N: 512 (0 = no prompt test) */
    int bench_n_gen;            /* -n N: 128 (0 = no decode test) */
    int bench_reps;             /* -r N: 5 */
#define NX_BENCH_MAX_DEPTHS 16
    int bench_depth[NX_BENCH_MAX_DEPTHS];   /* -d / --n-depth N[,N...]: tokens already in the context */
    int bench_n_depth;          /* entries of bench_depth: 1 (depth 0) by default */
    /* speculative decoding (NX_ARGS_SPEC): speculation off unless --spec-type is given */
    nx_spec_params spec;
    bool help;                  /* -h / --help was given */
} nx_cli_args;

/* llama.cpp's defaults (listed above). */
void nx_cli_args_init(nx_cli_args *a);

/* Try to parse argv[*i] (and its value, argv[*i + 1]) as one of the flags of `groups`.
 * Returns 1 and advances *i past what it used when the flag is ours, 0 when it is not one of
 * ours (*i unchanged: the command may know it), -1 on a bad or missing value (err says which
 * flag and why). -h / --help set a->help and count as ours. */
int nx_cli_args_parse_one(nx_cli_args *a, unsigned groups, int argc, char **argv, int *i, nx_error *err);

/* Parse argv[1..argc) (argv[0] = the subcommand) with only the flags of `groups`; anything
 * else is an error naming it; with NX_ARGS_SPEC the speculative flags are cross-checked
 * (nx_spec_params_validate) at the end. NX_OK or NX_ERR_INVALID_ARG. */
nx_status nx_cli_args_parse(nx_cli_args *a, unsigned groups, int argc, char **argv, nx_error *err);

/* Parameters for the library, from the parsed flags. */
nx_model_params   nx_cli_model_params(const nx_cli_args *a);
nx_ctx_params     nx_cli_ctx_params(const nx_cli_args *a);
nx_sampler_params nx_cli_sampler_params(const nx_cli_args *a, int32_t n_vocab);

/* The prompt text of -p or -f (exactly one must be given) into a malloc'ed NUL-terminated
 * buffer (the caller frees). Files are limited to 64 MiB. */
nx_status nx_cli_read_prompt(const nx_cli_args *a, char **out, size_t *len, nx_error *err);

/* Load a model (nx_model_load with a's threads), then touch every weight page in order so the
 * first decode does not pay for page faults, drawing a progress bar on stderr when stderr is
 * a terminal and the load is taking more than about a second. Errors: nx_model_load's. */
nx_status nx_cli_load_model(const nx_cli_args *a, nx_model **out, nx_error *err);

/* Bytes of weight data held by the model's file (sum of its tensors). */
size_t nx_cli_model_weight_bytes(const nx_model *m);

/* Monotonic clock, seconds. */
double nx_cli_now(void);

#endif
