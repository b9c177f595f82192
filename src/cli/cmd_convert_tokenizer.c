/*
 * cmd_convert_tokenizer.c — `nextn convert-tokenizer`: Hugging Face tokenizer.json (and
 * tokenizer_config.json) -> a vocab-only GGUF holding the `tokenizer.ggml.*` keys.
 */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "tokenizer.h"

static void conv_usage(FILE *f) {
    fprintf(f, "usage: nextn convert-tokenizer tokenizer.json [tokenizer_config.json] --out vocab.gguf\n"
               "                                [--pre NAME] [--model gpt2|gemma4|llama] [--arch ARCH] [--name NAME]\n"
               "  --pre    tokenizer.ggml.pre to write (default: recognised from the pre-tokenizer regex)\n"
               "  --model  vocabulary kind (default: gpt2 for byte-level BPE, gemma4 for byte-fallback BPE;\n"
               "           llama writes SentencePiece scores derived from the merge ranks)\n");
}

int nx_cmd_convert_tokenizer(int argc, char **argv) {
    nx_tok_convert_opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { conv_usage(stdout); return 0; }
        const char **dst = !strcmp(a, "--out") || !strcmp(a, "-o") ? &o.out_path
                         : !strcmp(a, "--pre") ? &o.pre : !strcmp(a, "--model") ? &o.model
                         : !strcmp(a, "--arch") ? &o.arch : !strcmp(a, "--name") ? &o.name : NULL;
        if (dst) {
            if (i + 1 >= argc) { fprintf(stderr, "nextn convert-tokenizer: %s needs a value\n", a); return 2; }
            *dst = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "nextn convert-tokenizer: unknown option '%s'\n", a);
            conv_usage(stderr);
            return 2;
        } else if (!o.tokenizer_json) {
            o.tokenizer_json = a;
        } else if (!o.config_json) {
            o.config_json = a;
        } else {
            fprintf(stderr, "nextn convert-tokenizer: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!o.tokenizer_json || !o.out_path) { conv_usage(stderr); return 2; }
    nx_error err = {0};
    if (nx_tokenizer_convert(&o, &err) != NX_OK) {
        fprintf(stderr, "nextn convert-tokenizer: %s\n", err.msg);
        return 1;
    }
    return 0;
}
