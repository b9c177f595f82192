/*
 * tensor.h — ggml-compatible tensor types and a plain tensor view.
 *
 * Type ids are ggml's (they are stored in GGUF files). nx_type_info() knows the block size
 * and byte size of every id a released GGUF may carry, so files with types we cannot compute
 * with still load for inspection; `supported` says whether dequantize/matmul exist for it.
 * A tensor is a view: it never owns its data (weights point into the mmapped file).
 */
#ifndef NX_TENSOR_H
#define NX_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum nx_type {
    NX_TYPE_F32     = 0,
    NX_TYPE_F16     = 1,
    NX_TYPE_Q4_0    = 2,
    NX_TYPE_Q4_1    = 3,
    NX_TYPE_Q5_0    = 6,
    NX_TYPE_Q5_1    = 7,
    NX_TYPE_Q8_0    = 8,
    NX_TYPE_Q8_1    = 9,
    NX_TYPE_Q2_K    = 10,
    NX_TYPE_Q3_K    = 11,
    NX_TYPE_Q4_K    = 12,
    NX_TYPE_Q5_K    = 13,
    NX_TYPE_Q6_K    = 14,
    NX_TYPE_Q8_K    = 15,
    NX_TYPE_IQ2_XXS = 16,
    NX_TYPE_IQ2_XS  = 17,
    NX_TYPE_IQ3_XXS = 18,
    NX_TYPE_IQ1_S   = 19,
    NX_TYPE_IQ4_NL  = 20,
    NX_TYPE_IQ3_S   = 21,
    NX_TYPE_IQ2_S   = 22,
    NX_TYPE_IQ4_XS  = 23,
    NX_TYPE_I8      = 24,
    NX_TYPE_I16     = 25,
    NX_TYPE_I32     = 26,
    NX_TYPE_I64     = 27,
    NX_TYPE_F64     = 28,
    NX_TYPE_IQ1_M   = 29,
    NX_TYPE_BF16    = 30,
    NX_TYPE_TQ1_0   = 34,
    NX_TYPE_TQ2_0   = 35,
    NX_TYPE_MXFP4   = 39,
    NX_TYPE_COUNT   = 40,   /* one past the largest id we know */
} nx_type;

typedef struct nx_type_traits {
    const char *name;       /* "q4_K", as ggml names it */
    int64_t     blck_size;  /* values per block (1 for plain types) */
    size_t      type_size;  /* bytes per block */
    bool        supported;  /* dequantize + matmul implemented */
    bool        quantizable;/* nx_quantize_row implemented */
} nx_type_traits;

/* Traits of a type id, or NULL for an id no GGUF may carry (unknown / removed). */
const nx_type_traits *nx_type_info(uint32_t type);
/* Name or "?" for unknown ids. */
const char *nx_type_name(uint32_t type);
/* Parse "q8_0", "Q4_K", "f16"... (case-insensitive); returns false if unknown. */
bool nx_type_from_name(const char *name, nx_type *out);
/* Bytes for a row of n values; 0 if n is not a multiple of the block size or the type is unknown.
 * Pure (a table lookup): calls whose result goes unused fold away. */
size_t nx_row_size(nx_type type, int64_t n) __attribute__((pure));

#define NX_MAX_DIMS 4

/* A view of an n-dimensional tensor in ggml order: ne[0] is the contiguous dimension. */
typedef struct nx_tensor {
    const char *name;          /* borrowed (points into the GGUF or a static string) */
    nx_type     type;
    int         n_dims;        /* 1..4 */
    int64_t     ne[NX_MAX_DIMS];/* elements per dimension; unused dims are 1 */
    size_t      nb[NX_MAX_DIMS];/* byte strides; nb[1] = row size */
    void       *data;          /* borrowed */
    size_t      nbytes;        /* total bytes */
    /* Optional copy of a 2-D matmul weight in a kernel's repacked layout (nx_matmul_pack),
     * borrowed from whoever made it (the model). NULL: none. A view of other rows (a struct
     * copy with data moved) must clear it. */
    const void *packed;
} nx_tensor;

/* Fill ne/nb/nbytes for a contiguous tensor; returns false on overflow or bad shape. */
bool nx_tensor_init(nx_tensor *t, const char *name, nx_type type, int n_dims, const int64_t *ne, void *data);
int64_t nx_tensor_nelements(const nx_tensor *t);
int64_t nx_tensor_nrows(const nx_tensor *t);   /* ne[1]*ne[2]*ne[3] */

#endif
