/*
 * tokenizer_bpe.c — BPE merging for "gpt2" (byte-level) and "gemma4" (raw UTF-8 + ▁ + <0xNN>)
 * vocabularies.
 *
 * Merges are keyed by symbol ids: (left id, right id) -> (rank, result id). A merge whose
 * parts or result are not vocabulary tokens gets synthetic ids (>= n_tokens), so any merge list
 * works; a synthetic symbol left at the end falls back to byte tokens.
 * Each pre-token is merged with the standard loop: a binary heap of candidate pairs ordered by
 * (rank, left position), stale entries skipped on pop — O(n log n) per piece. Repeated pieces
 * hit a per-call cache (the tokenizer itself stays immutable).
 * Must never: lose a byte in byte-level mode (every byte has a symbol or is reported).
 */
#include "tokenizer_impl.h"
#include <stdlib.h>
#include <string.h>

/* ===== merge map ===== */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static bool mergemap_reserve(nx_mergemap *m, size_t n) {
    size_t want = 16;
    while (want < 2 * n) want *= 2;
    if (want <= m->cap) return true;
    nx_merge_slot *slots = calloc(want, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = (size_t)mix64(m->slots[i].key) & (want - 1);
        while (slots[j].key) j = (j + 1) & (want - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = want;
    return true;
}

static const nx_merge_slot *mergemap_get(const nx_mergemap *m, int32_t l, int32_t r) {
    if (!m->cap) return NULL;
    uint64_t key = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
    size_t j = (size_t)mix64(key) & (m->cap - 1);
    for (; m->slots[j].key; j = (j + 1) & (m->cap - 1))
        if (m->slots[j].key == key) return &m->slots[j];
    return NULL;
}

/* Insert unless present (the first, lowest-rank entry wins, as in llama.cpp). */
static bool mergemap_put(nx_mergemap *m, int32_t l, int32_t r, int32_t rank, int32_t result) {
    if (mergemap_get(m, l, r)) return true;
    if (!mergemap_reserve(m, m->count + 1)) return false;
    uint64_t key = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
    size_t j = (size_t)mix64(key) & (m->cap - 1);
    while (m->slots[j].key) j = (j + 1) & (m->cap - 1);
    m->slots[j].key = key;
    m->slots[j].rank = rank;
    m->slots[j].result = result;
    m->count++;
    return true;
}

/* ===== building ===== */

typedef struct synth_pool {
    nx_strmap map;       /* text -> synthetic id; keys point into chunks */
    char **chunks;
    size_t n_chunks;
} synth_pool;

static int32_t sym_id(nx_tokenizer *t, synth_pool *sp, const char *s, size_t len, bool *oom) {
    int32_t id = nx_strmap_get(&t->tok_map, s, len);
    if (id >= 0) return id;
    id = nx_strmap_get(&sp->map, s, len);
    if (id >= 0) return id;
    char *copy = malloc(len ? len : 1);
    char **nc = realloc(sp->chunks, (sp->n_chunks + 1) * sizeof *nc);
    if (!copy || !nc) { free(copy); if (nc) sp->chunks = nc; *oom = true; return -1; }
    sp->chunks = nc;
    memcpy(copy, s, len);
    sp->chunks[sp->n_chunks++] = copy;
    id = t->n_symbols++;
    if (!nx_strmap_put(&sp->map, copy, len, id, NULL)) { *oom = true; return -1; }
    return id;
}

nx_status nx_bpe_build(nx_tokenizer *t, const char *const *merges, const size_t *merge_lens,
                       int32_t n_merges, nx_error *err) {
    nx_status st = NX_OK;
    synth_pool sp = {0};
    char *buf = NULL;
    size_t buf_cap = 0;
    t->n_symbols = t->n_tokens;
    if (!mergemap_reserve(&t->merges, (size_t)n_merges)) { st = nx_fail(err, NX_ERR_NOMEM, "out of memory for %d merges", n_merges); goto done; }
    for (int32_t i = 0; i < n_merges; i++) {
        const char *m = merges[i];
        size_t len = merge_lens ? merge_lens[i] : strlen(m);
        const char *sp_at = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!sp_at) { st = nx_fail(err, NX_ERR_FORMAT, "tokenizer.ggml.merges[%d] has no ' ' separating two symbols", i); goto done; }
        size_t ll = (size_t)(sp_at - m), rl = len - ll - 1;
        if (ll + rl > buf_cap) {
            buf_cap = (ll + rl) * 2;
            char *nb = realloc(buf, buf_cap);
            if (!nb) { st = nx_fail(err, NX_ERR_NOMEM, "out of memory building merges"); goto done; }
            buf = nb;
        }
        memcpy(buf, m, ll);
        memcpy(buf + ll, sp_at + 1, rl);
        bool oom = false;
        int32_t l = sym_id(t, &sp, m, ll, &oom);
        int32_t r = sym_id(t, &sp, sp_at + 1, rl, &oom);
        int32_t res = sym_id(t, &sp, buf, ll + rl, &oom);
        if (oom || !mergemap_put(&t->merges, l, r, i, res)) { st = nx_fail(err, NX_ERR_NOMEM, "out of memory building merges"); goto done; }
        if (t->n_symbols < 0 || t->n_symbols == INT32_MAX) { st = nx_fail(err, NX_ERR_RANGE, "too many BPE symbols"); goto done; }
    }
done:
    /* Synthetic symbols are only ever produced by merges (their texts are not needed later:
     * a symbol's bytes are known from its span in the input). */
    for (size_t i = 0; i < sp.n_chunks; i++) free(sp.chunks[i]);
    free(sp.chunks);
    nx_strmap_free(&sp.map);
    free(buf);
    return st;
}

/* ===== encoding ===== */

typedef struct bpe_sym {
    int32_t id;          /* symbol id, -1 = unknown (never merges) */
    int32_t prev, next;
    uint32_t off, len;   /* bytes in the piece; len 0 = merged away */
} bpe_sym;

typedef struct bpe_cand {
    int32_t rank, left, right, lid, rid;
} bpe_cand;

#define CACHE_MAX_PIECE 256
#define CACHE_MAX_ENTRIES (1u << 20)

struct nx_bpe_scratch {
    bpe_sym *syms;
    size_t cap_syms;
    bpe_cand *heap;
    size_t n_heap, cap_heap;
    char *enc;
    size_t cap_enc;
    nx_span_vec spans;
    nx_pretok_scratch pre;
    /* cache: piece bytes (pointing into the caller's text) -> entry index */
    nx_strmap cache;
    uint32_t *ent_off, *ent_n;
    size_t n_ent, cap_ent;
    int32_t *ids;
    size_t n_ids, cap_ids;
};

nx_bpe_scratch *nx_bpe_scratch_new(void) { return calloc(1, sizeof(nx_bpe_scratch)); }

void nx_bpe_scratch_free(nx_bpe_scratch *s) {
    if (!s) return;
    free(s->syms);
    free(s->heap);
    free(s->enc);
    free(s->spans.v);
    nx_pretok_scratch_free(&s->pre);
    nx_strmap_free(&s->cache);
    free(s->ent_off);
    free(s->ent_n);
    free(s->ids);
    free(s);
}

static bool cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static bool heap_push(nx_bpe_scratch *s, bpe_cand c) {
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? s->cap_heap * 2 : 64;
        bpe_cand *nh = realloc(s->heap, cap * sizeof *nh);
        if (!nh) return false;
        s->heap = nh;
        s->cap_heap = cap;
    }
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
    return true;
}

static bpe_cand heap_pop(nx_bpe_scratch *s) {
    bpe_cand top = s->heap[0];
    bpe_cand last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const bpe_cand *best = &last;
        if (l < n && cand_less(&s->heap[l], best)) { m = l; best = &s->heap[l]; }
        if (r < n && cand_less(&s->heap[r], best)) { m = r; }
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n) s->heap[i] = last;
    return top;
}

static bool try_pair(const nx_tokenizer *t, nx_bpe_scratch *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    int32_t lid = s->syms[left].id, rid = s->syms[right].id;
    if (lid < 0 || rid < 0) return true;
    const nx_merge_slot *m = mergemap_get(&t->merges, lid, rid);
    if (!m) return true;
    bpe_cand c = {m->rank, left, right, lid, rid};
    return heap_push(s, c);
}

static int32_t lookup_sym(const nx_tokenizer *t, const char *s, size_t len) {
    return nx_strmap_get(&t->tok_map, s, len);
}

/* Emit the tokens of a final symbol: its id if it is a vocabulary token, else byte tokens. */
static bool emit_sym(const nx_tokenizer *t, const bpe_sym *sym, const unsigned char *piece, nx_token_vec *out) {
    if (sym->id >= 0 && sym->id < t->n_tokens) return nx_token_vec_push(out, sym->id);
    for (uint32_t k = 0; k < sym->len; k++) {
        unsigned char b = piece[sym->off + k];
        int32_t id = t->kind == NX_VOCAB_BPE ? t->byte_sym[b] : t->byte_tok[b];
        if (id < 0 || id >= t->n_tokens) id = t->sp.unk;
        if (id >= 0 && !nx_token_vec_push(out, id)) return false;
    }
    return true;
}

static bool cache_put(nx_bpe_scratch *s, const char *piece, size_t len, const int32_t *ids, size_t n) {
    if (s->n_ent >= CACHE_MAX_ENTRIES) return true;
    if (s->n_ent == s->cap_ent) {
        size_t cap = s->cap_ent ? s->cap_ent * 2 : 256;
        uint32_t *no = realloc(s->ent_off, cap * sizeof *no);
        if (!no) return false;
        s->ent_off = no;
        uint32_t *nn = realloc(s->ent_n, cap * sizeof *nn);
        if (!nn) return false;
        s->ent_n = nn;
        s->cap_ent = cap;
    }
    if (s->n_ids + n > s->cap_ids) {
        size_t cap = s->cap_ids ? s->cap_ids : 1024;
        while (cap < s->n_ids + n) cap *= 2;
        int32_t *ni = realloc(s->ids, cap * sizeof *ni);
        if (!ni) return false;
        s->ids = ni;
        s->cap_ids = cap;
    }
    if (n) memcpy(s->ids + s->n_ids, ids, n * sizeof *ids);
    s->ent_off[s->n_ent] = (uint32_t)s->n_ids;
    s->ent_n[s->n_ent] = (uint32_t)n;
    s->n_ids += n;
    if (!nx_strmap_put(&s->cache, piece, len, (int32_t)s->n_ent, NULL)) return false;
    s->n_ent++;
    return true;
}

static nx_status encode_piece(const nx_tokenizer *t, nx_bpe_scratch *s, const char *piece, size_t n,
                              nx_token_vec *out, nx_error *err) {
    const unsigned char *p = (const unsigned char *)piece;
    if (n == 1 && t->kind == NX_VOCAB_BPE) {
        /* one byte: its token, no merging (the commonest piece in punctuation and binary data) */
        bpe_sym one = {t->byte_sym[p[0]], -1, -1, 0, 1};
        return emit_sym(t, &one, p, out) ? NX_OK : nx_fail(err, NX_ERR_NOMEM, "out of memory while encoding");
    }
    /* short pieces are cheaper to merge than to look up */
    bool cacheable = n >= 4 && n <= CACHE_MAX_PIECE;
    if (cacheable) {
        int32_t e = nx_strmap_get(&s->cache, piece, n);
        if (e >= 0) {
            for (uint32_t k = 0; k < s->ent_n[e]; k++)
                if (!nx_token_vec_push(out, s->ids[s->ent_off[e] + k])) goto oom;
            return NX_OK;
        }
    }
    size_t start = out->n;

    if (t->kind == NX_VOCAB_BPE && t->ignore_merges) {
        /* whole pre-token in the vocabulary -> one token, merges not consulted */
        if (n * 2 > s->cap_enc) {
            size_t cap = n * 2 + 16;
            char *ne = realloc(s->enc, cap);
            if (!ne) goto oom;
            s->enc = ne;
            s->cap_enc = cap;
        }
        size_t el = 0;
        for (size_t i = 0; i < n; i++) el += nx_utf8_encode(t->bl_cp[p[i]], s->enc + el);
        int32_t id = lookup_sym(t, s->enc, el);
        if (id >= 0) {
            if (!nx_token_vec_push(out, id)) goto oom;
            goto store;
        }
    }
    if (t->kind == NX_VOCAB_GEMMA4 && n > 0 && p[0] == '\n') {
        /* a newline run that is itself a token is used whole (llama.cpp's gemma4 rule) */
        size_t k = 0;
        while (k < n && p[k] == '\n') k++;
        if (k == n) {
            int32_t id = lookup_sym(t, piece, n);
            if (id >= 0) {
                if (!nx_token_vec_push(out, id)) goto oom;
                goto store;
            }
        }
    }

    /* initial symbols */
    if (n > s->cap_syms) {
        size_t cap = n + 64;
        bpe_sym *ns = realloc(s->syms, cap * sizeof *ns);
        if (!ns) goto oom;
        s->syms = ns;
        s->cap_syms = cap;
    }
    int32_t nsym = 0;
    for (size_t i = 0; i < n;) {
        bpe_sym *y = &s->syms[nsym];
        if (t->kind == NX_VOCAB_BPE) {
            y->id = t->byte_sym[p[i]];
            y->len = 1;
        } else {
            size_t L = nx_utf8_valid_len(p + i, n - i);
            if (L == 0) {
                y->id = -1;
                y->len = 1;
            } else {
                y->id = lookup_sym(t, piece + i, L);
                y->len = (uint32_t)L;
            }
        }
        y->off = (uint32_t)i;
        y->prev = nsym - 1;
        y->next = nsym + 1;
        i += y->len;
        nsym++;
    }
    if (nsym > 0) s->syms[nsym - 1].next = -1;

    s->n_heap = 0;
    for (int32_t i = 0; i + 1 < nsym; i++)
        if (!try_pair(t, s, i, i + 1)) goto oom;
    while (s->n_heap) {
        bpe_cand c = heap_pop(s);
        bpe_sym *L = &s->syms[c.left], *R = &s->syms[c.right];
        if (L->len == 0 || R->len == 0 || L->next != c.right || L->id != c.lid || R->id != c.rid) continue;
        const nx_merge_slot *m = mergemap_get(&t->merges, c.lid, c.rid);
        L->id = m->result;
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0) s->syms[R->next].prev = c.left;
        if (!try_pair(t, s, L->prev, c.left) || !try_pair(t, s, c.left, L->next)) goto oom;
    }
    for (int32_t i = nsym > 0 ? 0 : -1; i >= 0; i = s->syms[i].next)
        if (!emit_sym(t, &s->syms[i], p, out)) goto oom;

store:
    if (cacheable && out->n > start && !cache_put(s, piece, n, out->ids + start, out->n - start)) goto oom;
    return NX_OK;
oom:
    return nx_fail(err, NX_ERR_NOMEM, "out of memory while encoding");
}

nx_status nx_bpe_encode(const nx_tokenizer *t, nx_bpe_scratch *s, const char *text, size_t len,
                        nx_token_vec *out, nx_error *err) {
    if (len > UINT32_MAX) return nx_fail(err, NX_ERR_RANGE, "text fragment of %zu bytes is too long (max 4 GiB)", len);
    nx_status st = nx_pretok_split(&t->pretok, &s->pre, text, len, &s->spans, err);
    for (size_t i = 0; i < s->spans.n && !st; i++)
        st = encode_piece(t, s, text + s->spans.v[i].off, s->spans.v[i].len, out, err);
    return st;
}
