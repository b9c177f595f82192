/* cmd_gen_model.c — `nextn gen-model`: write a random-weight test model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "core/io.h"
#include "genmodel.h"

static void gen_usage(FILE *f) {
    fprintf(f, "usage: nextn gen-model --arch ARCH [--config FILE.json | --config-json TEXT] --out FILE.gguf\n"
               "                       [--seed N] [--type f32|f16|bf16|q8_0|q4_K|q4_K_M|...]\n"
               "archs: %s\n", nx_genmodel_archs());
}

int nx_cmd_gen_model(int argc, char **argv) {
    nx_genmodel_opts o = {.seed = 1, .wtype = NX_TYPE_F32};
    const char *config_path = NULL, *config_json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { gen_usage(stdout); return 0; }
        if (!v) { fprintf(stderr, "nextn gen-model: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--arch")) o.arch = v;
        else if (!strcmp(a, "--config")) config_path = v;
        else if (!strcmp(a, "--config-json")) config_json = v;
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) o.out_path = v;
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--type")) {
            if (!strcmp(v, "q4_K_M") || !strcmp(v, "Q4_K_M")) { o.wtype = NX_TYPE_Q4_K; o.q4_k_m = true; }
            else if (!nx_type_from_name(v, &o.wtype)) { fprintf(stderr, "nextn gen-model: unknown type '%s'\n", v); return 2; }
        } else { fprintf(stderr, "nextn gen-model: unknown option '%s'\n", a); gen_usage(stderr); return 2; }
        i++;
    }
    if (!o.arch || !o.out_path) { gen_usage(stderr); return 2; }
    nx_error err = {0};
    char *text = NULL;
    if (config_path && nx_read_file(config_path, 1 << 20, &text, NULL, &err) != NX_OK) {
        fprintf(stderr, "nextn gen-model: %s\n", err.msg);
        return 1;
    }
    o.config_json = text ? text : config_json;
    nx_status st = nx_genmodel_write(&o, &err);
    free(text);
    if (st != NX_OK) { fprintf(stderr, "nextn gen-model: %s\n", err.msg); return 1; }
    return 0;
}
