/*
 * cmd_quantize.c — `nextn quantize`: llama-quantize's command line over quantize.h.
 *
 *   nextn quantize [--imatrix F] [--allow-requantize] [--leave-output-tensor] [--pure]
 *                  [--output-tensor-type T] [--token-embedding-type T] [--tensor-type RE=T]...
 *                  IN.gguf [OUT.gguf] TYPE [nthreads]
 *
 * As llama-quantize: OUT defaults to ggml-model-<type>.gguf beside IN; TYPE is a preset name
 * (Q4_K_M, ...) or its file type number; one line per tensor, then the sizes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/args.h"
#include "quantize.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: nextn quantize [--imatrix F] [--allow-requantize] [--leave-output-tensor] [--pure]\n"
            "                      [--output-tensor-type T] [--token-embedding-type T] [--tensor-type RE=T]...\n"
            "                      IN.gguf [OUT.gguf] TYPE [nthreads]\n"
            "  --imatrix F           importance matrix (GGUF or legacy .dat, nextn imatrix / llama-imatrix)\n"
            "  --allow-requantize    allow tensors that are already quantized to be quantized again\n"
            "  --leave-output-tensor keep output.weight as it is\n"
            "  --pure                every quantized tensor gets TYPE's default type (no per-tensor rules)\n"
            "  --tensor-type RE=T    tensors whose name matches the regular expression RE get type T (repeatable;\n"
            "                        e.g. --tensor-type 'blk\\.4\\.=q8_0' keeps a 4+1-layer model's MTP layer at Q8_0)\n"
            "MTP / NextN layer tensors are kept and quantized by the trunk layers' rules.\nTYPE:\n");
    for (int i = 0; nx_quant_preset_at(i); i++) {
        const nx_quant_preset *p = nx_quant_preset_at(i);
        fprintf(f, "  %2d  %-7s %s\n", p->ftype, p->name, p->desc);
    }
}

typedef struct prog {
    int quiet;
} prog;

static void on_tensor(void *user, int i, int n, const char *name, const int64_t *ne, nx_type from, nx_type to,
                      uint64_t bytes_in, uint64_t bytes_out, bool weighted) {
    (void)user;
    printf("[%4d/%4d] %36s - [%6lld, %6lld, %4lld, %4lld], type = %6s, ", i + 1, n, name, (long long)ne[0],
           (long long)ne[1], (long long)ne[2], (long long)ne[3], nx_type_name(from));
    if (from == to) printf("size = %8.3f MiB\n", bytes_in / 1048576.0);
    else
        printf("converting to %s%s .. size = %8.3f MiB -> %8.3f MiB\n", nx_type_name(to), weighted ? " (imatrix)" : "",
               bytes_in / 1048576.0, bytes_out / 1048576.0);
}

static bool parse_type(const char *v, nx_type *out) {
    return nx_type_from_name(v, out) && *out != NX_TYPE_Q8_K && *out != NX_TYPE_Q8_1;
}

int nx_cmd_quantize(int argc, char **argv) {
    nx_quantize_opts o = {.output_type = NX_TYPE_COUNT, .embd_type = NX_TYPE_COUNT, .progress = on_tensor};
    const char *imat_path = NULL;
    nx_quant_override ovr[64];
    char ovr_buf[64][256];
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--allow-requantize")) o.allow_requantize = true;
        else if (!strcmp(a, "--leave-output-tensor")) o.leave_output = true;
        else if (!strcmp(a, "--pure")) o.pure = true;
        else if (!strcmp(a, "--imatrix") && v) { imat_path = v; i++; }
        else if (!strcmp(a, "--tensor-type") && v) {
            const char *eq = strrchr(v, '=');
            nx_type t;
            if (!eq || eq == v || (size_t)(eq - v) >= sizeof ovr_buf[0] || o.n_overrides == 64 || !parse_type(eq + 1, &t) ||
                !nx_type_info(t)->quantizable) {
                fprintf(stderr, "nextn quantize: --tensor-type: expected REGEX=TYPE with a writable type, got '%s'\n", v);
                return 2;
            }
            snprintf(ovr_buf[o.n_overrides], sizeof ovr_buf[0], "%.*s", (int)(eq - v), v);
            ovr[o.n_overrides] = (nx_quant_override){ovr_buf[o.n_overrides], t};
            o.n_overrides++;
            o.overrides = ovr;
            i++;
        }
        else if ((!strcmp(a, "--output-tensor-type") || !strcmp(a, "--token-embedding-type")) && v) {
            nx_type t;
            if (!parse_type(v, &t) || !nx_type_info(t) || !nx_type_info(t)->quantizable) {
                fprintf(stderr, "nextn quantize: %s: unknown or unwritable type '%s'\n", a, v);
                return 2;
            }
            if (a[2] == 'o') o.output_type = t;
            else o.embd_type = t;
            i++;
        } else {
            fprintf(stderr, "nextn quantize: unknown flag or missing value: %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    const int npos = argc - i;
    if (npos < 2 || npos > 4) { usage(stderr); return 2; }
    o.in_path = argv[i];
    char outbuf[4096];
    int k = i + 1;
    /* IN TYPE [nthreads] or IN OUT TYPE [nthreads] (llama-quantize's rule: try TYPE first) */
    o.preset = nx_quant_preset_find(argv[k]);
    if (o.preset) {
        const char *slash = strrchr(o.in_path, '/');
        const int dir = slash ? (int)(slash - o.in_path + 1) : 0;
        snprintf(outbuf, sizeof outbuf, "%.*sggml-model-%s.gguf", dir, o.in_path, o.preset->name);
        o.out_path = outbuf;
        k++;
    } else {
        o.out_path = argv[k++];
        if (k >= argc || !(o.preset = nx_quant_preset_find(argv[k]))) {
            fprintf(stderr, "nextn quantize: unknown type '%s'\n", k < argc ? argv[k] : "");
            usage(stderr);
            return 2;
        }
        k++;
    }
    if (k < argc) {
        char *end;
        long n = strtol(argv[k], &end, 10);
        if (*end || n < 1 || n > 1024) { fprintf(stderr, "nextn quantize: bad thread count '%s'\n", argv[k]); return 2; }
        o.n_threads = (int)n;
        k++;
    }
    if (k != argc) { usage(stderr); return 2; }

    nx_error err = {0};
    nx_imatrix *im = NULL;
    if (imat_path) {
        if (nx_imatrix_load(imat_path, 512, &im, &err) != NX_OK) {
            fprintf(stderr, "nextn quantize: %s\n", err.msg);
            return 1;
        }
        printf("imatrix: %s, %lld entries, %d chunks\n", imat_path, (long long)nx_imatrix_n_entries(im),
               nx_imatrix_chunk_count(im));
        o.imatrix = im;
        o.imatrix_path = imat_path;
    }
    printf("quantizing '%s' to '%s' as %s\n", o.in_path, o.out_path, o.preset->name);
    nx_quantize_info info;
    const double t0 = nx_cli_now();
    nx_status st = nx_quantize_model(&o, &info, &err);
    nx_imatrix_free(im);
    if (st != NX_OK) {
        fflush(stdout);
        fprintf(stderr, "nextn %s\n", err.msg);   /* the message starts with "quantize: " */
        return 1;
    }
    printf("model size  = %8.2f MiB\nquant size  = %8.2f MiB\n%d tensors, %d quantized (%d with the imatrix), %.2f s\n",
           info.bytes_in / 1048576.0, info.bytes_out / 1048576.0, info.n_tensors, info.n_quantized, info.n_weighted,
           nx_cli_now() - t0);
    return 0;
}
