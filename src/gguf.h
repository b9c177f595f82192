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
 * point into the read-only mapping (never write through them), are aligned to the file's
 * alignment (mappings start on a page), and live until nx_gguf_close().
 *
 * Limits and choices: v1 files are rejected (v2 and v3 share a layout); keys and tensor names
 * are 1..65535 bytes without NUL; n_dims is 1..4, every ne < 2^62; tensor type ids must be
 * known to nx_type_info(); offsets are multiples of the alignment (`general.alignment`, u32,
 * nonzero power of two, default 32). Arrays of arrays (nesting <= 8) are accepted and exposed
 * only as raw bytes (nx_gguf_kv_raw); their arr_type is NX_GGUF_ARRAY and element getters fail.
 *
 * Split models: when the path ends in `-00001-of-0000N.gguf` every part is opened; each must
 * carry split.no / split.count (and the same split.tensors.count); tensors of all parts are
 * merged in part order (data pointers point into their own part's mapping); key/values are
 * those of the first part. A later part given to nx_gguf_open() is an error naming the first
 * part; nx_gguf_open_part() opens exactly one file without following splits.
 *
 * Writer: collects key/values (in insertion order) and tensors (tensor data is borrowed until
 * write, or produced by a fill callback during the write), then writes a v3 file with the requested alignment. Setter errors are sticky: the
 * setter returns the status and the next write reports the first failure's message.
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
/* Same, but each file is read into anonymous (huge-page advised) memory instead of mapped:
 * the model's `use_mmap = false` / `--no-mmap`. */
nx_status nx_gguf_open_copy(const char *path, nx_gguf **out, nx_error *err);
/* Open exactly one file, even a part of a split model (its own key/values and tensors). */
nx_status nx_gguf_open_part(const char *path, nx_gguf **out, nx_error *err);
/* Parse a buffer already in memory (borrowed; must outlive the handle). Used by fuzzing/tests.
 * Split keys are checked for type and range but other parts are not looked for. */
nx_status nx_gguf_open_memory(const void *data, size_t size, nx_gguf **out, nx_error *err);
void nx_gguf_close(nx_gguf *g);

uint32_t nx_gguf_version(const nx_gguf *g);
uint32_t nx_gguf_alignment(const nx_gguf *g);
int      nx_gguf_n_splits(const nx_gguf *g);
size_t   nx_gguf_file_size(const nx_gguf *g);     /* all parts together */
/* Absolute offset of a part's data section, and the path of a part ("<memory>" for buffers). */
uint64_t    nx_gguf_data_offset(const nx_gguf *g, int split);
const char *nx_gguf_split_file(const nx_gguf *g, int split);
/* Does path end in `-NNNNN-of-MMMMM.gguf` (1 <= NNNNN <= MMMMM)? Fills the 1-based part
 * number, the part count and the length of the prefix before "-NNNNN" (any may be NULL). */
bool nx_gguf_split_path(const char *path, int *no, int *count, size_t *prefix_len);

/* -- key/values -- */
int64_t       nx_gguf_n_kv(const nx_gguf *g);
int64_t       nx_gguf_find_key(const nx_gguf *g, const char *key);   /* index or -1 */
const char   *nx_gguf_key(const nx_gguf *g, int64_t i);
nx_gguf_vtype nx_gguf_kv_type(const nx_gguf *g, int64_t i);
/* For arrays: element type and count (count 0 / type U8 for non-arrays). Bad index: type
 * NX_GGUF_VTYPE_COUNT, key NULL. */
nx_gguf_vtype nx_gguf_arr_type(const nx_gguf *g, int64_t i);
uint64_t      nx_gguf_arr_n(const nx_gguf *g, int64_t i);

/* Scalar access by index. Integers of any width/signedness (and bool) convert to int64 when
 * they fit; floats (f32/f64) and integers (not bool) convert to double. Return false on a
 * type that does not convert. */
bool nx_gguf_kv_int(const nx_gguf *g, int64_t i, int64_t *out);
bool nx_gguf_kv_float(const nx_gguf *g, int64_t i, double *out);
bool nx_gguf_kv_bool(const nx_gguf *g, int64_t i, bool *out);
/* String value: pointer into the file and its length; NULL if not a string. */
const char *nx_gguf_kv_str(const nx_gguf *g, int64_t i, uint64_t *len);

/* Array element access (j < nx_gguf_arr_n). Same conversion rules as the scalar getters. */
bool        nx_gguf_arr_int(const nx_gguf *g, int64_t i, uint64_t j, int64_t *out);
bool        nx_gguf_arr_float(const nx_gguf *g, int64_t i, uint64_t j, double *out);
const char *nx_gguf_arr_str(const nx_gguf *g, int64_t i, uint64_t j, uint64_t *len);
/* Raw pointer to a numeric array's packed elements (little-endian, possibly unaligned: read
 * with memcpy), NULL for string arrays and arrays of arrays. */
const void *nx_gguf_arr_data(const nx_gguf *g, int64_t i);
/* The value exactly as encoded in the file (after its type tag; for arrays starting at the
 * element type) and its size. Works for every type, nested arrays included. */
const void *nx_gguf_kv_raw(const nx_gguf *g, int64_t i, uint64_t *size);

/* Convenience by key name: false if absent or of a non-converting type. */
bool        nx_gguf_get_int(const nx_gguf *g, const char *key, int64_t *out);
bool        nx_gguf_get_float(const nx_gguf *g, const char *key, double *out);
bool        nx_gguf_get_bool(const nx_gguf *g, const char *key, bool *out);
const char *nx_gguf_get_str(const nx_gguf *g, const char *key, uint64_t *len);

/* -- tensors -- */
int64_t          nx_gguf_n_tensors(const nx_gguf *g);
int64_t          nx_gguf_find_tensor(const nx_gguf *g, const char *name);  /* index or -1 */
const nx_tensor *nx_gguf_tensor(const nx_gguf *g, int64_t i);   /* data points into the mapping */
uint64_t         nx_gguf_tensor_offset(const nx_gguf *g, int64_t i);  /* absolute offset in its part file */
int              nx_gguf_tensor_split(const nx_gguf *g, int64_t i);   /* part index (0-based) */

/* ===== Writer ===== */

typedef struct nx_gguf_writer nx_gguf_writer;

nx_gguf_writer *nx_gguf_writer_create(void);
void nx_gguf_writer_free(nx_gguf_writer *w);
/* Default 32; must be a nonzero power of two (else a sticky error). Setting the key
 * `general.alignment` (u32) does the same. The key is written only when alignment != 32. */
void nx_gguf_writer_set_alignment(nx_gguf_writer *w, uint32_t alignment);

/* Keys are 1..65535 bytes without NUL. A key set twice keeps its first position and the
 * last value. Errors: NX_ERR_INVALID_ARG (bad key/type), NX_ERR_NOMEM. */
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
/* Copy key/value i of an open file (any type, arrays and nested arrays included). */
nx_status nx_gguf_copy_kv(nx_gguf_writer *w, const nx_gguf *g, int64_t i);
/* Forget a key (no-op when absent). */
void nx_gguf_remove_key(nx_gguf_writer *w, const char *key);

/* Add a tensor; data (nx_row_size(type, ne[0]) * rows bytes) is borrowed until write (NULL
 * writes zeros). Names are unique, 1..65535 bytes. Data is laid out in insertion order,
 * each tensor padded to the alignment (the last one too, as ggml expects). */
nx_status nx_gguf_add_tensor(nx_gguf_writer *w, const char *name, nx_type type, int n_dims,
                             const int64_t *ne, const void *data);
/* A streamed tensor: its nbytes (nx_row_size(type, ne[0]) * rows) are produced at write time
 * by fill(user, name, dst, nbytes, err), one tensor at a time, so a file far larger than
 * memory can be written holding only its largest tensor. fill returns NX_OK or fails with a
 * message in err; a failure aborts the write (no file is left behind). fill may be called
 * once per write (never by the counting pass of write_mem). */
typedef nx_status (*nx_gguf_fill_fn)(void *user, const char *name, void *dst, size_t nbytes, nx_error *err);
nx_status nx_gguf_add_tensor_fill(nx_gguf_writer *w, const char *name, nx_type type, int n_dims,
                                  const int64_t *ne, nx_gguf_fill_fn fill, void *user);

/* A tensor streamed piece by piece: at write time stream(user, name, out, nbytes, err) calls
 * nx_gguf_out_write() for consecutive pieces that add up to exactly nbytes; the pieces go to the
 * file as they come, so no buffer of the whole tensor exists (peak memory is the caller's piece
 * buffer, whatever the tensor's size). Too many or too few bytes fail the write, as does a
 * failed stream (no file is left behind). Not called by the counting pass of write_mem. */
typedef struct nx_gguf_out nx_gguf_out;
typedef nx_status (*nx_gguf_stream_fn)(void *user, const char *name, nx_gguf_out *out, size_t nbytes, nx_error *err);
nx_status nx_gguf_add_tensor_stream(nx_gguf_writer *w, const char *name, nx_type type, int n_dims,
                                    const int64_t *ne, nx_gguf_stream_fn stream, void *user);
nx_status nx_gguf_out_write(nx_gguf_out *out, const void *p, size_t n, nx_error *err);

nx_status nx_gguf_writer_write(nx_gguf_writer *w, const char *path, nx_error *err);
/* Write into a malloc'ed buffer (caller frees *out). */
nx_status nx_gguf_writer_write_mem(nx_gguf_writer *w, void **out, size_t *size, nx_error *err);
/* Write a split model: `<prefix>-00001-of-0000N.gguf` ... with n_parts in 1..99999. Tensors
 * are cut into n_parts consecutive groups of about equal bytes (a part may hold none). The
 * first part carries every key/value; each part carries split.no (u16, 0-based), split.count
 * (u16), split.tensors.count (i32), as llama.cpp's gguf-split writes them (keys of those
 * names set on the writer are replaced). */
nx_status nx_gguf_writer_write_split(nx_gguf_writer *w, const char *path_prefix, int n_parts, nx_error *err);

#endif
