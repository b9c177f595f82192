/*
 * imatrix.h — importance matrices: per matmul weight, the sum of squared activations each input
 * column met over a calibration text, with the number of activation rows (`nextn imatrix`
 * collects them, `nextn quantize --imatrix` weighs its scale searches by them).
 *
 * One entry per weight tensor name: n_mat matrices (experts of a 3-D tensor; 1 for dense) of
 * n_per_mat columns (the weight's ne[0]); sum2[m][j] = sum of x_j^2 over the rows matrix m saw,
 * counts[m] = those rows. The importance quantize uses is the mean, sum2 / count (1 for a
 * matrix that saw nothing, as llama.cpp's loader).
 *
 * Files, as llama.cpp reads and writes them (tools/imatrix/imatrix.cpp):
 *   - GGUF (default): general.type = "imatrix", imatrix.datasets (string array),
 *     imatrix.chunk_count / imatrix.chunk_size (u32); per entry, sorted by name, tensors
 *     `<name>.in_sum2` (F32, {n_per_mat, n_mat}) and `<name>.counts` (F32, {1, n_mat}).
 *   - legacy .dat: i32 n_entries; per entry (sorted) i32 name length, the name, i32 ncall =
 *     ceil(max count / chunk_size), i32 nval = n_per_mat * n_mat, f32[nval] = (sum2 / count) *
 *     ncall; then i32 chunk count, i32 length + the dataset name. Loading gives back sum2 =
 *     value * chunk_size, count = ncall * chunk_size (the chunk size is not stored).
 * Loading validates everything (sizes, counts, finite non-negative values): a bad file is an
 * error with a message, never a crash. Nothing here prints.
 */
#ifndef NX_IMATRIX_H
#define NX_IMATRIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

typedef struct nx_imatrix_entry {
    char    *name;        /* weight tensor name (owned) */
    int64_t  n_per_mat;   /* columns */
    int64_t  n_mat;       /* matrices (experts) */
    double  *sum2;        /* [n_mat][n_per_mat] */
    int64_t *counts;      /* [n_mat] */
} nx_imatrix_entry;

typedef struct nx_imatrix nx_imatrix;

nx_imatrix *nx_imatrix_create(void);
void        nx_imatrix_free(nx_imatrix *im);

int64_t                 nx_imatrix_n_entries(const nx_imatrix *im);
const nx_imatrix_entry *nx_imatrix_entry_at(const nx_imatrix *im, int64_t i);
const nx_imatrix_entry *nx_imatrix_find(const nx_imatrix *im, const char *name);   /* NULL: none */

/* Mean squared activation of matrix m of e into out[0..n_per_mat) (1 where the matrix saw
 * nothing). False for a bad m. */
bool nx_imatrix_values(const nx_imatrix_entry *e, int64_t m, float *out);

/* Accumulate n_rows activation rows (stride ldx) into matrix m of the entry `name`, created with
 * n_per_mat columns and n_mat matrices on first use. Errors: a different shape than before
 * (NX_ERR_INVALID_ARG), a non-finite sum (NX_ERR_RANGE), NX_ERR_NOMEM. */
nx_status nx_imatrix_add(nx_imatrix *im, const char *name, int64_t n_per_mat, int64_t n_mat, int64_t m,
                         const float *x, int64_t n_rows, int64_t ldx, nx_error *err);

/* Add entry e's sums and counts (of another imatrix) to im's entry of that name (created with e's
 * shape). Errors as nx_imatrix_add. */
nx_status nx_imatrix_merge_entry(nx_imatrix *im, const nx_imatrix_entry *e, nx_error *err);

/* Metadata: the calibration text(s), chunks processed and their size (tokens). */
nx_status   nx_imatrix_add_dataset(nx_imatrix *im, const char *name, nx_error *err);
int64_t     nx_imatrix_n_datasets(const nx_imatrix *im);
const char *nx_imatrix_dataset(const nx_imatrix *im, int64_t i);
void        nx_imatrix_set_chunks(nx_imatrix *im, int chunk_count, int chunk_size);
int         nx_imatrix_chunk_count(const nx_imatrix *im);
int         nx_imatrix_chunk_size(const nx_imatrix *im);

/* Load a GGUF imatrix or a legacy .dat file (told apart by the GGUF magic). The legacy format
 * does not store the chunk size: chunk_size (> 0, llama.cpp's default 512) is assumed. */
nx_status nx_imatrix_load(const char *path, int chunk_size, nx_imatrix **out, nx_error *err);
nx_status nx_imatrix_load_memory(const void *data, size_t size, int chunk_size, nx_imatrix **out, nx_error *err);

/* Write as GGUF, or as legacy .dat when legacy is true. */
nx_status nx_imatrix_save(const nx_imatrix *im, const char *path, bool legacy, nx_error *err);

#endif
