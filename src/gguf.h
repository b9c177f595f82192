/*
 * gguf.h — reading and writing GGUF files (v2 and v3).
 *
 * Reader: nx_gguf_open() mmaps the file (and, for `<name>-00001-of-0000N.gguf`, every other
 * part) and validates the whole structure up front — every count, length, type, dimension
 * and tensor data range is checked against the file size and sane limits, with overflow-
 * checked arithmetic. A malformed file gives NX_ERR_FORMAT and a message naming the byte
 * offset and the problem; it never crashes. After a successful open every accessor is
 * safe and cheap. Keys and tensor names are copied into NUL-terminated strings; string
 * values point into the mapping (ptr + length, not NUL-terminated). Tensor data pointers
 * point into the mapping and live until nx_gguf_close().
 *
 * Writer: collects key/values and tensors (tensor data is borrowed until write), then
 * writes a v3 file with the requested alignment.
 */
#ifndef NX_GGUF_H
#define NX_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "tensor.h"

typedef enum nx_gguf_vtype {
    NX_GGUF_U8 = 0, NX_GGUF_I8 = 1, NX_GGUF_U16 = 2, NX_GGUF_I16 = 3,
    NX_GGUF_U32 = 4, NX_GGUF_I32 = 5, NX_GGUF_F32 = 6, NX_GGUF_BOOL = 7,
    NX_GGUF_STRING = 8, NX_GGUF_ARRAY = 9, NX_GGUF_U64 = 10, NX_GGUF_I64 = 11,
    NX_GGUF_F64 = 12,
    NX_GGUF_VTYPE_COUNT
} nx_gguf_vtype;

const char *nx_gguf_vtype_name(nx_gguf_vtype t);

/* ===== Reader ===== */

typedef struct nx_gguf nx_gguf;

/* Open and validate a file (split parts are found and merged transparently). */
nx_status nx_gguf_open(const char *path, nx_gguf **out, nx_error *err);
/* Parse a buffer already in memory (borrowed; must outlive the handle). Used by fuzzing/tests. */
nx_status nx_gguf_open_memory(const void *data, size_t size, nx_gguf **out, nx_error *err);
void nx_gguf_close(nx_gguf *g);

uint32_t nx_gguf_version(const nx_gguf *g);
uint32_t nx_gguf_alignment(const nx_gguf *g);
int      nx_gguf_n_splits(const nx_gguf *g);
size_t   nx_gguf_file_size(const nx_gguf *g);     /* all parts together */

/* -- key/values -- */
int64_t       nx_gguf_n_kv(const nx_gguf *g);
int64_t       nx_gguf_find_key(const nx_gguf *g, const char *key);   /* index or -1 */
const char   *nx_gguf_key(const nx_gguf *g, int64_t i);
nx_gguf_vtype nx_gguf_kv_type(const nx_gguf *g, int64_t i);
/* For arrays: element type and count (count 0 / type U8 for non-arrays). */
nx_gguf_vtype nx_gguf_arr_type(const nx_gguf *g, int64_t i);
uint64_t      nx_gguf_arr_n(const nx_gguf *g, int64_t i);

/* Scalar access by index. Integers of any width/signedness (and bool) convert to int64 when
 * they fit; floats (f32/f64) convert to double. Return false on a type that does not convert. */
bool nx_gguf_kv_int(const nx_gguf *g, int64_t i, int64_t *out);
bool nx_gguf_kv_float(const nx_gguf *g, int64_t i, double *out);
bool nx_gguf_kv_bool(const nx_gguf *g, int64_t i, bool *out);
/* String value: pointer into the file and its length; NULL if not a string. */
const char *nx_gguf_kv_str(const nx_gguf *g, int64_t i, uint64_t *len);

/* Array element access (j < nx_gguf_arr_n). Same conversion rules as the scalar getters. */
bool        nx_gguf_arr_int(const nx_gguf *g, int64_t i, uint64_t j, int64_t *out);
bool        nx_gguf_arr_float(const nx_gguf *g, int64_t i, uint64_t j, double *out);
const char *nx_gguf_arr_str(const nx_gguf *g, int64_t i, uint64_t j, uint64_t *len);
/* Raw pointer to a numeric array's packed elements (little-endian), NULL for string arrays. */
const void *nx_gguf_arr_data(const nx_gguf *g, int64_t i);

/* Convenience by key name: false if absent or of a non-converting type. */
bool        nx_gguf_get_int(const nx_gguf *g, const char *key, int64_t *out);
bool        nx_gguf_get_float(const nx_gguf *g, const char *key, double *out);
bool        nx_gguf_get_bool(const nx_gguf *g, const char *key, bool *out);
const char *nx_gguf_get_str(const nx_gguf *g, const char *key, uint64_t *len);

/* -- tensors -- */
int64_t          nx_gguf_n_tensors(const nx_gguf *g);
int64_t          nx_gguf_find_tensor(const nx_gguf *g, const char *name);  /* index or -1 */
const nx_tensor *nx_gguf_tensor(const nx_gguf *g, int64_t i);   /* data points into the mapping */
uint64_t         nx_gguf_tensor_offset(const nx_gguf *g, int64_t i);  /* offset in its part file */
int              nx_gguf_tensor_split(const nx_gguf *g, int64_t i);   /* part index (0-based) */

/* ===== Writer ===== */

typedef struct nx_gguf_writer nx_gguf_writer;

nx_gguf_writer *nx_gguf_writer_create(void);
void nx_gguf_writer_free(nx_gguf_writer *w);
void nx_gguf_writer_set_alignment(nx_gguf_writer *w, uint32_t alignment);  /* default 32 */

/* Scalars (a key set twice keeps the last value). */
nx_status nx_gguf_set_u32(nx_gguf_writer *w, const char *key, uint32_t v);
nx_status nx_gguf_set_i32(nx_gguf_writer *w, const char *key, int32_t v);
nx_status nx_gguf_set_u64(nx_gguf_writer *w, const char *key, uint64_t v);
nx_status nx_gguf_set_f32(nx_gguf_writer *w, const char *key, float v);
nx_status nx_gguf_set_bool(nx_gguf_writer *w, const char *key, bool v);
nx_status nx_gguf_set_str(nx_gguf_writer *w, const char *key, const char *v);
/* Generic scalar of any numeric type from raw little-endian bytes. */
nx_status nx_gguf_set_scalar(nx_gguf_writer *w, const char *key, nx_gguf_vtype t, const void *v);
/* Numeric array (elements copied) and string array (strings copied; lens may be NULL = strlen). */
nx_status nx_gguf_set_arr(nx_gguf_writer *w, const char *key, nx_gguf_vtype elem, const void *data, uint64_t n);
nx_status nx_gguf_set_arr_str(nx_gguf_writer *w, const char *key, const char *const *strs,
                              const uint64_t *lens, uint64_t n);
/* Copy key/value i of an open file (any type, arrays included). */
nx_status nx_gguf_copy_kv(nx_gguf_writer *w, const nx_gguf *g, int64_t i);

/* Add a tensor; data (nx_row_size(type, ne[0]) * rows bytes) is borrowed until write. */
nx_status nx_gguf_add_tensor(nx_gguf_writer *w, const char *name, nx_type type, int n_dims,
                             const int64_t *ne, const void *data);

nx_status nx_gguf_writer_write(nx_gguf_writer *w, const char *path, nx_error *err);
/* Write into a malloc'ed buffer (caller frees *out). */
nx_status nx_gguf_writer_write_mem(nx_gguf_writer *w, void **out, size_t *size, nx_error *err);

#endif
