/*
 * gguf_impl.h — private helpers shared by the GGUF reader (gguf_read.c) and writer
 * (gguf_write.c): the value-type size table, little-endian loads, and a string -> index
 * hash table. Not part of any public contract; nothing outside src/gguf_*.c includes it.
 *
 * The hash table maps borrowed NUL-free names (the caller keeps them alive and unmoved)
 * to int64 indices. Its hash is seeded per table so that a crafted file cannot force
 * every key into one probe chain (lookups stay O(1) on hostile input).
 */
#ifndef NX_GGUF_IMPL_H
#define NX_GGUF_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "gguf.h"

#define NX_GGUF_MAGIC          0x46554747u  /* "GGUF" read as a little-endian u32 */
#define NX_GGUF_DEFAULT_ALIGN  32u
#define NX_GGUF_MAX_NAME       65535u       /* keys and tensor names (GGUF spec: < 2^16 bytes) */
#define NX_GGUF_MAX_NESTING    8            /* arrays of arrays deeper than this are rejected */

/* Encoded size of a fixed-size value type; 0 for string, array and unknown ids. */
static inline size_t nx_gguf_vtype_size(uint32_t t) {
    static const uint8_t sz[NX_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < NX_GGUF_VTYPE_COUNT ? sz[t] : 0;
}

static inline uint32_t nx_rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t nx_rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Bytes of a contiguous tensor, overflow-checked at every step (nx_row_size() itself does not
 * check its multiplication, so do not rely on nx_tensor_init() alone for hostile shapes).
 * ne has NX_MAX_DIMS entries (unused ones 1); false on overflow or a bad ne[0]. */
static inline bool nx_gguf_tensor_bytes(const nx_type_traits *tt, const int64_t *ne, uint64_t *out) {
    if (ne[0] < 0 || ne[0] % tt->blck_size) return false;
    uint64_t n;
    if (__builtin_mul_overflow((uint64_t)(ne[0] / tt->blck_size), (uint64_t)tt->type_size, &n)) return false;
    for (int d = 1; d < NX_MAX_DIMS; d++)
        if (ne[d] < 0 || __builtin_mul_overflow(n, (uint64_t)ne[d], &n)) return false;
    if (n > SIZE_MAX) return false;
    *out = n;
    return true;
}

typedef struct nx_gguf_slot {
    const char *name;   /* borrowed; NULL = empty slot */
    size_t      len;
    uint64_t    hash;
    int64_t     idx;
} nx_gguf_slot;

typedef struct nx_gguf_index {
    nx_gguf_slot *slots;
    size_t        cap;    /* power of two, or 0 before the first insert */
    size_t        count;
    uint64_t      seed;
} nx_gguf_index;

void    nx_gguf_index_init(nx_gguf_index *ix, uint64_t seed);
void    nx_gguf_index_free(nx_gguf_index *ix);
/* Make room for n entries without rehashing; false on allocation failure. */
bool    nx_gguf_index_reserve(nx_gguf_index *ix, size_t n);
int64_t nx_gguf_index_find(const nx_gguf_index *ix, const char *name, size_t len);
/* Insert name -> idx. Returns 1 when inserted, 0 when the name is already present
 * (*existing = its index), -1 on allocation failure. */
int     nx_gguf_index_insert(nx_gguf_index *ix, const char *name, size_t len, int64_t idx, int64_t *existing);

#endif
