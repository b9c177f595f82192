/*
 * env_args.c — LLAMA_ARG_* environment variables as command-line flags (contract: env_args.h).
 */
#include "cli/env_args.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { C_RUN = 1, C_BENCH = 2, C_EVAL = 4, C_SERVE = 8, C_SPEC = C_RUN | C_BENCH | C_EVAL | C_SERVE };

static const struct env_flag {
    const char *env, *flag;
    bool has_value;
    unsigned cmds;
} table[] = {
    {"LLAMA_ARG_MODEL", "--model", true, C_RUN | C_BENCH | C_EVAL | C_SERVE},
    {"LLAMA_ARG_THREADS", "--threads", true, C_RUN | C_BENCH | C_SERVE},
    {"LLAMA_ARG_CTX_SIZE", "--ctx-size", true, C_RUN | C_BENCH | C_SERVE},
    {"LLAMA_ARG_UBATCH", "--ubatch-size", true, C_RUN | C_BENCH | C_SERVE},
    {"LLAMA_ARG_N_PREDICT", "--n-predict", true, C_RUN},
    {"LLAMA_ARG_CACHE_TYPE_K", "--cache-type-k", true, C_RUN | C_BENCH | C_EVAL | C_SERVE},
    {"LLAMA_ARG_CACHE_TYPE_V", "--cache-type-v", true, C_RUN | C_BENCH | C_EVAL | C_SERVE},
    {"LLAMA_ARG_NO_MMAP", "--no-mmap", false, C_RUN | C_BENCH | C_SERVE},
    {"LLAMA_ARG_N_PARALLEL", "--parallel", true, C_SERVE},
    {"LLAMA_ARG_HOST", "--host", true, C_SERVE},
    {"LLAMA_ARG_PORT", "--port", true, C_SERVE},
    {"LLAMA_ARG_ALIAS", "--alias", true, C_SERVE},
    {"LLAMA_ARG_TIMEOUT", "--timeout", true, C_SERVE},
    {"LLAMA_ARG_THINK", "--reasoning-format", true, C_SERVE},
    /* speculative decoding (spec_params.h) */
    {"LLAMA_ARG_SPEC_TYPE", "--spec-type", true, C_SPEC},
    {"LLAMA_ARG_DRAFT_MAX", "--draft-max", true, C_SPEC},
    {"LLAMA_ARG_DRAFT_MIN", "--draft-min", true, C_SPEC},
    {"LLAMA_ARG_DRAFT_P_MIN", "--draft-p-min", true, C_SPEC},
    {"LLAMA_ARG_MODEL_DRAFT", "--model-draft", true, C_SPEC},
    {"LLAMA_ARG_CTX_SIZE_DRAFT", "--ctx-size-draft", true, C_SPEC},
    {"LLAMA_ARG_THREADS_DRAFT", "--threads-draft", true, C_SPEC},
    {"LLAMA_ARG_CACHE_TYPE_K_DRAFT", "--cache-type-k-draft", true, C_SPEC},
    {"LLAMA_ARG_CACHE_TYPE_V_DRAFT", "--cache-type-v-draft", true, C_SPEC},
    {"LLAMA_ARG_SPEC_DRAFT_MODEL", "--model-draft", true, C_SPEC},
    {"LLAMA_ARG_SPEC_DRAFT_CTX_SIZE", "--ctx-size-draft", true, C_SPEC},
    {"LLAMA_ARG_SPEC_DRAFT_P_MIN", "--draft-p-min", true, C_SPEC},
    {"LLAMA_ARG_SPEC_DRAFT_N_MIN", "--draft-min", true, C_SPEC},
    {"LLAMA_ARG_DRAFT_BLOCK_SIZE", "--draft-block-size", true, C_SPEC},
    {"LLAMA_ARG_MTP_HEAD", "--mtp-head", true, C_SPEC},
};

static bool truthy(const char *v) {
    return !strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "yes");
}

nx_status nx_cli_env_argv(const char *cmd, int argc, char **argv, int *out_argc, char ***out_argv, nx_error *err) {
    *out_argc = argc;
    *out_argv = argv;
    unsigned c = !strcmp(cmd, "run") ? C_RUN : !strcmp(cmd, "bench") ? C_BENCH : !strcmp(cmd, "eval") ? C_EVAL
               : !strcmp(cmd, "serve") ? C_SERVE : 0;
    const size_t n_tab = sizeof table / sizeof table[0];
    char **v = NULL;
    int n = 0;
    for (size_t i = 0; c && i < n_tab; i++) {
        const char *val = (table[i].cmds & c) ? getenv(table[i].env) : NULL;
        if (!val || !*val || (!table[i].has_value && !truthy(val))) continue;
        if (!v) {
            v = malloc(((size_t)argc + 2 * n_tab + 1) * sizeof *v);
            if (!v) return nx_fail(err, NX_ERR_NOMEM, "out of memory for the environment's flags");
            v[n++] = argv[0];
        }
        v[n++] = (char *)table[i].flag;
        if (table[i].has_value) v[n++] = (char *)val;
    }
    if (!v) return NX_OK;
    for (int i = 1; i < argc; i++) v[n++] = argv[i];
    v[n] = NULL;
    *out_argc = n;
    *out_argv = v;
    return NX_OK;
}

const char *nx_cli_env_usage(void) {
    return "environment (a flag on the command line wins): LLAMA_ARG_MODEL, LLAMA_ARG_THREADS, LLAMA_ARG_CTX_SIZE,\n"
           "  LLAMA_ARG_UBATCH, LLAMA_ARG_N_PREDICT, LLAMA_ARG_CACHE_TYPE_K/_V, LLAMA_ARG_NO_MMAP, LLAMA_ARG_N_PARALLEL,\n"
           "  LLAMA_ARG_HOST, LLAMA_ARG_PORT, LLAMA_ARG_ALIAS, LLAMA_ARG_TIMEOUT (serve), LLAMA_ARG_SPEC_TYPE,\n"
           "  LLAMA_ARG_DRAFT_MAX/_MIN/_P_MIN, LLAMA_ARG_MODEL_DRAFT, LLAMA_ARG_CTX_SIZE_DRAFT, LLAMA_ARG_THREADS_DRAFT,\n"
           "  LLAMA_ARG_CACHE_TYPE_K_DRAFT/_V_DRAFT, LLAMA_ARG_SPEC_DRAFT_MODEL/_CTX_SIZE/_P_MIN/_N_MIN,\n"
           "  LLAMA_ARG_DRAFT_BLOCK_SIZE, LLAMA_ARG_MTP_HEAD; LLAMA_MTP_ACC_TRACE (1 = stderr, else a file: NDJSON\n"
           "  mtp_draft / mtp_accept events), LLAMA_MTP_SKIP_STREAK_THRESHOLD N (1..32: skip one draft after N\n"
           "  rounds without an accepted draft), NEXTN_SPEC_TRACE\n";
}
