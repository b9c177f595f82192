/*
 * cmd_convert.c — `nextn convert HF_DIR --out F.gguf [--outtype f16|bf16|f32|q8_0]`: a Hugging Face
 * checkpoint directory -> GGUF, as llama.cpp's convert_hf_to_gguf.py writes it (src/convert.h).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "cli/cli.h"
#include "convert.h"

static void convert_usage(FILE *f) {
    fprintf(f, "usage: nextn convert HF_DIR --out F.gguf [--outtype f16|bf16|f32|q8_0] [-q]\n"
               "  HF_DIR    config.json, model.safetensors (or shards + model.safetensors.index.json),\n"
               "            tokenizer.json, tokenizer_config.json, [generation_config.json], [chat_template.jinja]\n"
               "  --outtype type of the weight matrices (default f16); norms, 1-D tensors and ssm_conv1d stay f32\n"
               "  -q        no per-tensor progress lines\n"
               "architectures: Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration (qwen35, MTP layer as blk.N.nextn.*),\n"
               "               Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration (qwen35moe),\n"
               "               Gemma4ForCausalLM, Gemma4ForConditionalGeneration (gemma4, text part),\n"
               "               Gemma4AssistantForCausalLM (gemma4-assistant, the drafter of a gemma4 target)\n");
}

static void progress(void *user, int64_t i, int64_t n, const char *name, const char *src_dtype, nx_type type, int n_dims,
                     const int64_t *ne) {
    (void)user;
    char shape[96];
    int k = snprintf(shape, sizeof shape, "{");
    for (int d = 0; d < n_dims && k < (int)sizeof shape - 24; d++)
        k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%lld", d ? ", " : "", (long long)ne[d]);
    snprintf(shape + k, sizeof shape - (size_t)k, "}");
    fprintf(stderr, "[%4lld/%4lld] %-40s %-5s -> %-5s %s\n", (long long)i + 1, (long long)n, name, src_dtype,
            nx_type_name(type), shape);
}

int nx_cmd_convert(int argc, char **argv) {
    nx_convert_opts o = {.outtype = NX_TYPE_F16, .progress = progress};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { convert_usage(stdout); return 0; }
        if (!strcmp(a, "--out") || !strcmp(a, "-o") || !strcmp(a, "--outfile")) {
            if (i + 1 >= argc) { fprintf(stderr, "nextn convert: %s needs a value\n", a); return 2; }
            o.out_path = argv[++i];
        } else if (!strcmp(a, "--outtype")) {
            if (i + 1 >= argc) { fprintf(stderr, "nextn convert: --outtype needs a value\n"); return 2; }
            const char *t = argv[++i];
            if (!strcasecmp(t, "f32")) o.outtype = NX_TYPE_F32;
            else if (!strcasecmp(t, "f16")) o.outtype = NX_TYPE_F16;
            else if (!strcasecmp(t, "bf16")) o.outtype = NX_TYPE_BF16;
            else if (!strcasecmp(t, "q8_0")) o.outtype = NX_TYPE_Q8_0;
            else { fprintf(stderr, "nextn convert: --outtype must be f32, f16, bf16 or q8_0 (got '%s')\n", t); return 2; }
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o.progress = NULL;
        } else if (a[0] == '-') {
            fprintf(stderr, "nextn convert: unknown option '%s'\n", a);
            convert_usage(stderr);
            return 2;
        } else if (!o.hf_dir) {
            o.hf_dir = a;
        } else {
            fprintf(stderr, "nextn convert: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!o.hf_dir || !o.out_path) { convert_usage(stderr); return 2; }
    nx_error err = {0};
    if (nx_convert_hf(&o, &err) != NX_OK) {
        fprintf(stderr, "nextn convert: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "nextn convert: wrote %s\n", o.out_path);
    return 0;
}
