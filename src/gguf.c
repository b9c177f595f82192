/*
 * gguf.c — pieces of the GGUF module shared by the reader and the writer: value-type names
 * and the seeded string -> index hash table (gguf_impl.h). Owns no file state.
 */
#include "gguf_impl.h"
#include <stdlib.h>

const char *nx_gguf_vtype_name(nx_gguf_vtype t) {
    static const char *names[NX_GGUF_VTYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
    };
    return (unsigned)t < NX_GGUF_VTYPE_COUNT ? names[t] : "?";
}

/* ===== Hash index ===== */

/* FNV-1a over the bytes, seeded, then a splitmix64 finaliser so the low bits (the bucket)
 * depend on every input bit. */
static uint64_t hash_name(uint64_t seed, const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 30; h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27; h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
}

void nx_gguf_index_init(nx_gguf_index *ix, uint64_t seed) {
    memset(ix, 0, sizeof *ix);
    ix->seed = seed;
}

void nx_gguf_index_free(nx_gguf_index *ix) {
    free(ix->slots);
    ix->slots = NULL;
    ix->cap = ix->count = 0;
}

static void place(nx_gguf_slot *slots, size_t cap, const nx_gguf_slot *s) {
    size_t m = cap - 1, j = (size_t)s->hash & m;
    while (slots[j].name) j = (j + 1) & m;
    slots[j] = *s;
}

bool nx_gguf_index_reserve(nx_gguf_index *ix, size_t n) {
    /* keep the load factor <= 1/2 so linear probing stays short */
    if (n > SIZE_MAX / 4) return false;
    size_t want = 16;
    while (want < 2 * n) want *= 2;
    if (want <= ix->cap) return true;
    nx_gguf_slot *slots = calloc(want, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->slots[i].name) place(slots, want, &ix->slots[i]);
    free(ix->slots);
    ix->slots = slots;
    ix->cap = want;
    return true;
}

int64_t nx_gguf_index_find(const nx_gguf_index *ix, const char *name, size_t len) {
    if (!ix->cap) return -1;
    uint64_t h = hash_name(ix->seed, name, len);
    size_t m = ix->cap - 1;
    for (size_t j = (size_t)h & m; ix->slots[j].name; j = (j + 1) & m) {
        const nx_gguf_slot *s = &ix->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->name, name, len) == 0) return s->idx;
    }
    return -1;
}

int nx_gguf_index_insert(nx_gguf_index *ix, const char *name, size_t len, int64_t idx, int64_t *existing) {
    int64_t found = nx_gguf_index_find(ix, name, len);
    if (found >= 0) {
        if (existing) *existing = found;
        return 0;
    }
    if (!nx_gguf_index_reserve(ix, ix->count + 1)) return -1;
    nx_gguf_slot s = {name, len, hash_name(ix->seed, name, len), idx};
    place(ix->slots, ix->cap, &s);
    ix->count++;
    return 1;
}
