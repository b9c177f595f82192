/* main.c — `nextn` entry point: dispatches to the subcommand named by argv[1]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/env_args.h"
#include "nextn.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} nx_command;

static const nx_command commands[] = {
    {"demo", nx_cmd_demo, "run the main job on the bundled default model"},
    {"run", nx_cmd_run, "generate text from a prompt (streams to stdout)"},
    {"eval", nx_cmd_eval, "golden interface: logits / greedy continuation / drafts for prompt ids"},
    {"bench", nx_cmd_bench, "prompt and decode throughput of a model"},
    {"serve", nx_cmd_serve, "OpenAI-compatible HTTP server"},
    {"chat-template", nx_cmd_chat_template, "render chat-template cases / parse a generated turn (tools, reasoning)"},
    {"gguf-info", nx_cmd_gguf_info, "print a GGUF file's metadata and tensor table"},
    {"gen-model", nx_cmd_gen_model, "write a random-weight test model GGUF"},
    {"quantize", nx_cmd_quantize, "quantize a GGUF (llama-quantize's presets and per-tensor rules, --imatrix)"},
    {"perplexity", nx_cmd_perplexity, "perplexity of a text (llama-perplexity's method), KL divergence vs a base model"},
    {"imatrix", nx_cmd_imatrix, "importance matrix of a calibration text (MTP layer included) for quantize --imatrix"},
    {"bench-draft", nx_cmd_bench_draft, "MTP draft head: acceptance on a text and step cost, full vs cheap head"},
    {"bench-kernels", nx_cmd_bench_kernels, "matmul throughput per weight type vs memory bandwidth"},
    {"tokenize", nx_cmd_tokenize, "text -> token ids with a model's tokenizer"},
    {"detokenize", nx_cmd_detokenize, "token ids -> text"},
    {"convert", nx_cmd_convert, "Hugging Face checkpoint (safetensors) -> GGUF (qwen35 with its MTP layer)"},
    {"convert-tokenizer", nx_cmd_convert_tokenizer, "tokenizer.json -> vocab-only GGUF"},
};

static void usage(FILE *f) {
    fprintf(f, "nextn %s — LLM inference with multi-token-prediction speculative decoding\n\n", nx_version());
    fprintf(f, "usage: nextn <command> [options]   (nextn <command> --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-18s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-18s %s\n", "version", "print the version");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("nextn %s\n", nx_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            /* LLAMA_ARG_* variables become flags before the command line's (env_args.h) */
            int n = 0;
            char **v = NULL;
            nx_error err = {0};
            if (nx_cli_env_argv(argv[1], argc - 1, argv + 1, &n, &v, &err) != NX_OK) {
                fprintf(stderr, "nextn %s: %s\n", argv[1], err.msg);
                return 1;
            }
            const int rc = commands[i].fn(n, v);
            if (v != argv + 1) free(v);
            return rc;
        }
    fprintf(stderr, "nextn: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
