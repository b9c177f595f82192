/*
 * env_args.h — llama.cpp's environment variables for command-line flags: LLAMA_ARG_ + the long
 * flag name upper-cased with '-' -> '_' (LLAMA_ARG_CTX_SIZE for --ctx-size, LLAMA_ARG_N_PARALLEL
 * for --parallel, LLAMA_ARG_MODEL_DRAFT for --model-draft, ... the names of llama.cpp's
 * common/arg.cpp, plus the llama.cpp forks' LLAMA_ARG_SPEC_* / LLAMA_ARG_DRAFT_BLOCK_SIZE /
 * LLAMA_ARG_MTP_HEAD). A flag on the command line wins over its variable: the variables become
 * flags placed before argv[1] (every parser lets a later flag override an earlier one).
 * Flags without a value (LLAMA_ARG_NO_MMAP) apply when the variable is 1 / true / on / yes.
 * Never: print, keep state (the returned argv is the caller's to free; its strings point into
 * argv and the environment).
 */
#ifndef NX_CLI_ENV_ARGS_H
#define NX_CLI_ENV_ARGS_H

#include "core/error.h"

/* argv of subcommand cmd ("run", "bench", "eval", "serve"; argv[0] = the subcommand) with the
 * flags of the set variables that cmd accepts inserted after argv[0]. *out_argv is malloc'ed
 * (free it; NULL-safe when *out_argv == argv, i.e. nothing was set). Errors: out of memory. */
nx_status nx_cli_env_argv(const char *cmd, int argc, char **argv, int *out_argc, char ***out_argv, nx_error *err);

/* "  env: LLAMA_ARG_X (--flag), ..." lines for cmd's --help. */
const char *nx_cli_env_usage(void);

#endif
