/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader (src/safetensors.c): the whole
 * input is one .safetensors file. A failure must be NX_ERR_FORMAT / NX_ERR_NOMEM with a message
 * and no handle; a success must give tensors whose byte ranges lie inside the input and match
 * shape x dtype, whose names are found again, and whose float ones read back (as f32 and f64) with
 * the same values, and whose integer ones read as int32 (or fail as out of range). Anything else
 * traps.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nx_safetensors *st = NULL;
    nx_error err = {0};
    nx_status s = nx_st_open_memory(data, size, &st, &err);
    if (s != NX_OK) {
        if (st || !err.msg[0] || (s != NX_ERR_FORMAT && s != NX_ERR_NOMEM)) __builtin_trap();
        return 0;
    }
    for (int64_t i = 0; i < nx_st_n_tensors(st); i++) {
        const nx_st_tensor *t = nx_st_tensor_at(st, i);
        if (!t || nx_st_find(st, t->name) != i || t->offset > size || t->nbytes > size - t->offset ||
            (uint64_t)t->numel * nx_st_dtype_size(t->dtype) != t->nbytes)
            __builtin_trap();
        if (!nx_st_dtype_is_float(t->dtype)) {
            if (nx_st_read_f32(st, i, NULL, &err) != NX_ERR_UNSUPPORTED) __builtin_trap();
            /* integer tensors read as int32 (a value outside int32 is a FORMAT error); bool / F8 refused */
            bool is_int = t->dtype != NX_ST_BOOL && t->dtype != NX_ST_F8_E4M3 && t->dtype != NX_ST_F8_E5M2;
            int32_t *v = malloc((size_t)t->numel * sizeof *v + 1);
            if (v) {
                nx_status r = nx_st_read_i32(st, i, v, &err);
                if (is_int ? (r != NX_OK && r != NX_ERR_FORMAT) : r != NX_ERR_UNSUPPORTED) __builtin_trap();
            }
            free(v);
            continue;
        }
        float *f = malloc((size_t)t->numel * sizeof *f + 1);
        double *d = malloc((size_t)t->numel * sizeof *d + 1);
        if (f && d) {
            if (nx_st_read_f32(st, i, f, &err) != NX_OK || nx_st_read_f64(st, i, d, &err) != NX_OK) __builtin_trap();
            for (int64_t j = 0; j < t->numel; j++)
                if (!isnan(d[j]) && (float)d[j] != f[j]) __builtin_trap();
        }
        free(f);
        free(d);
    }
    nx_st_close(st);
    return 0;
}
