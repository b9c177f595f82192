/*
 * tokenizer_spm.c — SentencePiece-style encoding for "llama" vocabularies (scores, ▁, <0xNN>).
 *
 * The text arrives already escaped (spaces -> ▁, optional leading space added by the caller).
 * Symbols start as UTF-8 characters (an invalid byte is a one-byte symbol); the adjacent pair
 * whose concatenation is a vocabulary token with the highest score is merged first (ties: the
 * leftmost), as SentencePiece's BPE and llama.cpp do. Symbols that are not tokens at the end
 * become <0xNN> byte tokens (or UNK when a byte token is missing). O(n log n).
 * Must never: read outside the text, or keep state between calls.
 */
#include "tokenizer_impl.h"
#include <stdlib.h>
#include <string.h>

typedef struct spm_sym {
    int32_t prev, next;
    uint32_t off, len;    /* len 0 = merged away */
} spm_sym;

typedef struct spm_cand {
    float score;
    int32_t left, right;
    uint32_t size;
} spm_cand;

typedef struct spm_heap {
    spm_cand *v;
    size_t n, cap;
} spm_heap;

/* higher score first; on equal scores the leftmost pair */
static bool better(const spm_cand *a, const spm_cand *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool push(spm_heap *h, spm_cand c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        spm_cand *nv = realloc(h->v, cap * sizeof *nv);
        if (!nv) return false;
        h->v = nv;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!better(&c, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
    return true;
}

static spm_cand pop(spm_heap *h) {
    spm_cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const spm_cand *best = &last;
        if (l < h->n && better(&h->v[l], best)) { m = l; best = &h->v[l]; }
        if (r < h->n && better(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static bool try_bigram(const nx_tokenizer *t, const char *text, const spm_sym *syms, spm_heap *h,
                       int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    uint32_t size = syms[left].len + syms[right].len;
    if (size > t->max_token_len) return true;
    int32_t id = nx_strmap_get(&t->tok_map, text + syms[left].off, size);
    if (id < 0) return true;
    spm_cand c = {t->scores[id], left, right, size};
    return push(h, c);
}

nx_status nx_spm_encode(const nx_tokenizer *t, const char *text, size_t len, nx_token_vec *out,
                        nx_error *err) {
    if (len == 0) return NX_OK;
    if (len > UINT32_MAX / 2) return nx_fail(err, NX_ERR_RANGE, "text of %zu bytes is too long", len);
    nx_status st = NX_OK;
    spm_heap h = {0};
    spm_sym *syms = malloc(len * sizeof *syms);
    if (!syms) return nx_fail(err, NX_ERR_NOMEM, "out of memory while encoding");
    const unsigned char *p = (const unsigned char *)text;
    int32_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t L = nx_utf8_valid_len(p + i, len - i);
        if (L == 0) L = 1;
        syms[n].off = (uint32_t)i;
        syms[n].len = (uint32_t)L;
        syms[n].prev = n - 1;
        syms[n].next = n + 1;
        i += L;
        n++;
    }
    syms[n - 1].next = -1;
    for (int32_t i = 1; i < n; i++)
        if (!try_bigram(t, text, syms, &h, i - 1, i)) goto oom;
    while (h.n) {
        spm_cand c = pop(&h);
        spm_sym *L = &syms[c.left], *R = &syms[c.right];
        if (L->len == 0 || R->len == 0 || L->len + R->len != c.size) continue;
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0) syms[R->next].prev = c.left;
        if (!try_bigram(t, text, syms, &h, L->prev, c.left) || !try_bigram(t, text, syms, &h, c.left, L->next)) goto oom;
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) {
        int32_t id = nx_strmap_get(&t->tok_map, text + syms[i].off, syms[i].len);
        if (id >= 0) {
            if (!nx_token_vec_push(out, id)) goto oom;
            continue;
        }
        for (uint32_t k = 0; k < syms[i].len; k++) {
            int32_t b = t->byte_tok[p[syms[i].off + k]];
            if (b < 0) b = t->sp.unk;
            if (b >= 0 && !nx_token_vec_push(out, b)) goto oom;
        }
    }
    goto done;
oom:
    st = nx_fail(err, NX_ERR_NOMEM, "out of memory while encoding");
done:
    free(syms);
    free(h.v);
    return st;
}
