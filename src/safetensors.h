/*
 * safetensors.h — reading Hugging Face `.safetensors` checkpoints (one file or a sharded set).
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON
 * `{"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}}`,
 * then the data section; offsets are relative to the data section's start (8 + N).
 *
 * Opening parses and validates the whole header up front: N within the file, the JSON an object,
 * every entry with a known dtype string, a shape of 0..8 non-negative dimensions, offsets
 * begin <= end inside the data section, and end - begin == numel * element size (overflow-checked).
 * A malformed file is NX_ERR_FORMAT with a message naming the file and the tensor; never a crash.
 * Tensor data is not read at open: nx_st_read_f32() reads one tensor with pread (streamed, so a
 * checkpoint far larger than memory can be converted holding one tensor) and converts it.
 *
 * Sharded checkpoints: nx_st_open_dir() uses `model.safetensors.index.json` (its `weight_map`
 * names the file of every tensor) when present, else `model.safetensors`. Every tensor the index
 * names must be in the file it names, and a name may appear only once across the shards.
 *
 * Dtypes: every safetensors dtype string is accepted when parsing (so a header that holds, say,
 * an I64 buffer parses); only F64 / F32 / F16 / BF16 convert to float.
 */
#ifndef NX_SAFETENSORS_H
#define NX_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

#define NX_ST_MAX_DIMS 8

typedef enum nx_st_dtype {
    NX_ST_F64, NX_ST_F32, NX_ST_F16, NX_ST_BF16,
    NX_ST_I64, NX_ST_I32, NX_ST_I16, NX_ST_I8, NX_ST_U64, NX_ST_U32, NX_ST_U16, NX_ST_U8, NX_ST_BOOL,
    NX_ST_F8_E4M3, NX_ST_F8_E5M2,
    NX_ST_DTYPE_COUNT
} nx_st_dtype;

typedef struct nx_st_tensor {
    char       *name;                    /* owned, NUL-terminated */
    nx_st_dtype dtype;
    int         n_dims;                  /* 0 (scalar) .. NX_ST_MAX_DIMS */
    int64_t     shape[NX_ST_MAX_DIMS];   /* HF (row-major) order: shape[n_dims-1] is contiguous */
    int64_t     numel;
    uint64_t    offset;                  /* absolute byte offset in its file */
    uint64_t    nbytes;
    int         file;                    /* index of its shard */
} nx_st_tensor;

typedef struct nx_safetensors nx_safetensors;

/* The dtype's name ("BF16") and element size in bytes. */
const char *nx_st_dtype_name(nx_st_dtype t);
size_t      nx_st_dtype_size(nx_st_dtype t);
bool        nx_st_dtype_is_float(nx_st_dtype t);   /* F64 / F32 / F16 / BF16 */

/* A checkpoint directory (index or model.safetensors), or one file. */
nx_status nx_st_open_dir(const char *dir, nx_safetensors **out, nx_error *err);
nx_status nx_st_open_file(const char *path, nx_safetensors **out, nx_error *err);
/* Parse a buffer holding a whole .safetensors file (borrowed; must outlive the handle). For
 * fuzzing and tests: reads then copy from the buffer. */
nx_status nx_st_open_memory(const void *data, size_t size, nx_safetensors **out, nx_error *err);
void nx_st_close(nx_safetensors *st);

int64_t             nx_st_n_tensors(const nx_safetensors *st);
const nx_st_tensor *nx_st_tensor_at(const nx_safetensors *st, int64_t i);
int64_t             nx_st_find(const nx_safetensors *st, const char *name);   /* index or -1 */
int                 nx_st_n_files(const nx_safetensors *st);
const char         *nx_st_file_path(const nx_safetensors *st, int file);
/* Bytes of all shards' data sections together. */
uint64_t            nx_st_total_bytes(const nx_safetensors *st);

/* Read tensor i converted to float32 (dst: numel floats) or to double (numel doubles; keeps F64
 * sources exact). The raw bytes go through a small bounce buffer, so reading costs dst only.
 * Errors: not a float dtype (NX_ERR_UNSUPPORTED), a short read (NX_ERR_IO). */
nx_status nx_st_read_f32(const nx_safetensors *st, int64_t i, float *dst, nx_error *err);
nx_status nx_st_read_f64(const nx_safetensors *st, int64_t i, double *dst, nx_error *err);
/* Values [first, first + count) of tensor i (row-major order) as float32: streaming by rows. */
nx_status nx_st_read_f32_range(const nx_safetensors *st, int64_t i, int64_t first, int64_t count, float *dst,
                               nx_error *err);

/* An integer tensor (any I* / U* dtype) as int32 (dst: numel values); a value outside int32 is
 * NX_ERR_FORMAT, a float dtype NX_ERR_UNSUPPORTED. */
nx_status nx_st_read_i32(const nx_safetensors *st, int64_t i, int32_t *dst, nx_error *err);

#endif
