/* cmd_gen_model.c — `nextn gen-model`: write a random-weight test model, or (--inflate) a
 * larger copy of a real one that predicts the same tokens (genmodel.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"
#include "core/io.h"
#include "genmodel.h"

static void gen_usage(FILE *f) {
    fprintf(f, "usage: nextn gen-model --arch ARCH [--config FILE.json | --config-json TEXT] --out FILE.gguf\n"
               "                       [--seed N] [--type f32|f16|bf16|q8_0|q4_K|q4_K_M|...]\n"
               "       nextn gen-model --inflate --from F.gguf --out G.gguf [--n-layer L] [--n-ff N]\n"
               "                       [--type q8_0|f16|f32|...] [--seed N]\n"
               "archs: %s\n"
               "--inflate: append dead trunk layers up to L (zero output projections and ffn_down) and widen\n"
               "  every FFN to N units (random gate/up rows, zero ffn_down columns): same greedy tokens as F,\n"
               "  the memory traffic of a large model. --type: the FFN tensors' type (default the source's);\n"
               "  N must be a multiple of its block size. Supported sources: qwen35 with dense FFNs.\n",
            nx_genmodel_archs());
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int nx_cmd_gen_model(int argc, char **argv) {
    nx_genmodel_opts o = {.seed = 1, .wtype = NX_TYPE_F32};
    nx_inflate_opts io = {.seed = 1};
    bool inflate = false;
    const char *config_path = NULL, *config_json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { gen_usage(stdout); return 0; }
        if (!strcmp(a, "--inflate")) { inflate = true; continue; }
        if (!v) { fprintf(stderr, "nextn gen-model: %s needs a value\n", a); return 2; }
        char *end = NULL;
        long long num = strtoll(v, &end, 10);
        const bool is_num = end && end != v && !*end;
        if (!strcmp(a, "--from")) io.from_path = v;
        else if (!strcmp(a, "--n-layer") || !strcmp(a, "--n-ff")) {
            if (!is_num || num < 1 || num > (1ll << 40)) {
                fprintf(stderr, "nextn gen-model: %s %s: not a positive number\n", a, v);
                return 2;
            }
            if (a[4] == 'l') io.n_layer = num > 4096 ? 4097 : (int)num;
            else io.n_ff = num;
        } else if (!strcmp(a, "--arch")) o.arch = v;
        else if (!strcmp(a, "--config")) config_path = v;
        else if (!strcmp(a, "--config-json")) config_json = v;
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) o.out_path = v;
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--type")) {
            if (!strcmp(v, "q4_K_M") || !strcmp(v, "Q4_K_M")) { o.wtype = NX_TYPE_Q4_K; o.q4_k_m = true; }
            else if (!nx_type_from_name(v, &o.wtype)) { fprintf(stderr, "nextn gen-model: unknown type '%s'\n", v); return 2; }
            io.set_wtype = true;
            io.wtype = o.wtype;
        } else { fprintf(stderr, "nextn gen-model: unknown option '%s'\n", a); gen_usage(stderr); return 2; }
        i++;
    }
    nx_error err = {0};
    if (inflate) {
        if (!io.from_path || !o.out_path || o.arch || o.q4_k_m) { gen_usage(stderr); return 2; }
        io.out_path = o.out_path;
        io.seed = o.seed;
        nx_inflate_info info;
        const double t0 = now_s();
        if (nx_genmodel_inflate(&io, &info, &err) != NX_OK) { fprintf(stderr, "nextn gen-model: %s\n", err.msg); return 1; }
        printf("inflated %s (%d+%d layers, n_ff %lld) -> %s (%d+%d layers, n_ff %lld): %.1f MB in %.1f s\n",
               io.from_path, info.n_layer_in, info.n_nextn, (long long)info.n_ff_in, io.out_path, info.n_layer_out,
               info.n_nextn, (long long)info.n_ff_out, (double)info.bytes / 1e6, now_s() - t0);
        return 0;
    }
    if (!o.arch || !o.out_path) { gen_usage(stderr); return 2; }
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
