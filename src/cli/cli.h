/*
 * cli.h — the `nextn` command-line tool: one function per subcommand (src/cli/cmd_*.c).
 * Each takes the arguments after the subcommand name (argv[0] = subcommand) and returns
 * the process exit code (0 ok, 1 runtime error, 2 usage error). Errors go to stderr as one
 * line starting with "nextn <cmd>: ".
 */
#ifndef NX_CLI_H
#define NX_CLI_H

int nx_cmd_gguf_info(int argc, char **argv);
int nx_cmd_gen_model(int argc, char **argv);
int nx_cmd_bench_kernels(int argc, char **argv);
int nx_cmd_bench_draft(int argc, char **argv);
int nx_cmd_tokenize(int argc, char **argv);
int nx_cmd_detokenize(int argc, char **argv);
int nx_cmd_convert_tokenizer(int argc, char **argv);
int nx_cmd_convert(int argc, char **argv);
int nx_cmd_demo(int argc, char **argv);
int nx_cmd_eval(int argc, char **argv);
int nx_cmd_run(int argc, char **argv);
int nx_cmd_bench(int argc, char **argv);
int nx_cmd_serve(int argc, char **argv);
int nx_cmd_chat_template(int argc, char **argv);
int nx_cmd_quantize(int argc, char **argv);
int nx_cmd_perplexity(int argc, char **argv);
int nx_cmd_imatrix(int argc, char **argv);
/* `bench-kernels --contended` (owned by the threads module, called from cmd_bench_kernels.c). */
int nx_bench_kernels_contended(int argc, char **argv);
/* `bench-kernels --attn` (bench_attn.c): the attention kernel alone, per KV type and depth. */
int nx_bench_kernels_attn(int argc, char **argv);

#endif
