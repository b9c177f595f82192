/*
 * ngram.c — the `ngram` lookup drafter (ngram.h): per-sequence history + incremental n-gram index.
 *
 * Owns, per sequence: the committed tokens, the VERIFY rows pending until accept(), and an
 * open-addressing hash table n-gram -> end position of its most recent occurrence. Promises
 * amortised O(ngram_max) work per committed token and O(ngram_max + k) per draft; never rescans
 * the history after begin(). Never reads the target's hidden rows (it needs tokens only).
 */
#include "spec/ngram.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ===== Hashing: n-grams hashed backwards from their last token ===== */

/* Hashing from the end lets one backward pass produce the keys of all n-grams ending at a
 * position (n = 1, 2, ...), for indexing and for the lookup pattern alike. */
static inline uint64_t hash_step(uint64_t h, nx_token t) {
    h = (h + (uint64_t)(uint32_t)t + 1u) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

static inline uint64_t hash_key(uint64_t h, int n) {
    uint64_t z = h + (uint64_t)n * 0xD1B54A32D192ED03ull;      /* the length is part of the key */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 1;                                           /* 0 marks an empty slot */
}

#define HASH_SEED 0x243F6A8885A308D3ull

/* ===== Per-sequence state ===== */

typedef struct ng_slot {
    uint64_t key;                /* 0 = empty */
    int32_t  end;                /* position of the n-gram's last token, most recent occurrence */
    int32_t  n;                  /* its length (confirms a hit together with the tokens) */
} ng_slot;

typedef struct ng_seq {
    bool active;                 /* begun */
    nx_token *tok;               /* committed tokens [0, n_tok) */
    int n_tok, cap_tok;
    nx_token *pend;              /* VERIFY rows waiting for accept(): positions n_tok.. */
    int n_pend, cap_pend;
    ng_slot *slots;              /* power-of-two table, load <= 1/2 */
    size_t cap_slots, n_used;
} ng_seq;

typedef struct ng_drafter {
    nx_drafter base;
    nx_ngram_params params;
    ng_seq *seqs;                /* [base.n_seq] */
} ng_drafter;

static nx_status grow_tokens(nx_token **buf, int *cap, int need, nx_error *err) {
    if (need <= *cap) return NX_OK;
    int c = *cap ? *cap : 256;
    while (c < need) {
        if (c > (1 << 29)) return nx_fail(err, NX_ERR_NOMEM, "ngram: history of %d tokens is too long", need);
        c *= 2;
    }
    nx_token *p = realloc(*buf, (size_t)c * sizeof *p);
    if (!p) return nx_fail(err, NX_ERR_NOMEM, "ngram: out of memory for %d tokens", c);
    *buf = p;
    *cap = c;
    return NX_OK;
}

static void slot_put(ng_slot *slots, size_t mask, uint64_t key, int32_t end, int32_t n, size_t *n_used) {
    size_t i = (size_t)key & mask;
    while (slots[i].key && slots[i].key != key) i = (i + 1) & mask;
    if (!slots[i].key) { slots[i].key = key; slots[i].n = n; (*n_used)++; }
    slots[i].end = end;          /* indexing runs in position order: the newest wins */
}

static nx_status table_reserve(ng_seq *s, size_t more, nx_error *err) {
    if ((s->n_used + more) * 2 <= s->cap_slots) return NX_OK;
    size_t c = s->cap_slots ? s->cap_slots : 1024;
    while ((s->n_used + more) * 2 > c) {
        if (c > ((size_t)1 << 40) / sizeof(ng_slot)) return nx_fail(err, NX_ERR_NOMEM, "ngram: index too large");
        c *= 2;
    }
    ng_slot *ns = calloc(c, sizeof *ns);
    if (!ns) return nx_fail(err, NX_ERR_NOMEM, "ngram: out of memory for an index of %zu slots", c);
    size_t used = 0;
    for (size_t i = 0; i < s->cap_slots; i++)
        if (s->slots[i].key) slot_put(ns, c - 1, s->slots[i].key, s->slots[i].end, s->slots[i].n, &used);
    free(s->slots);
    s->slots = ns;
    s->cap_slots = c;
    s->n_used = used;
    return NX_OK;
}

static const ng_slot *slot_find(const ng_seq *s, uint64_t key) {
    if (!s->cap_slots) return NULL;
    size_t mask = s->cap_slots - 1, i = (size_t)key & mask;
    while (s->slots[i].key) {
        if (s->slots[i].key == key) return &s->slots[i];
        i = (i + 1) & mask;
    }
    return NULL;
}

/* Append committed tokens and index every n-gram that ends at each of them. */
static nx_status commit_tokens(const ng_drafter *g, ng_seq *s, const nx_token *t, int n, nx_error *err) {
    const int nmax = g->params.ngram_max, nmin = g->params.ngram_min;
    nx_status st = grow_tokens(&s->tok, &s->cap_tok, s->n_tok + n, err);
    if (st) return st;
    if ((st = table_reserve(s, (size_t)n * (size_t)(nmax - nmin + 1), err))) return st;
    for (int j = 0; j < n; j++) {
        int e = s->n_tok;
        s->tok[s->n_tok++] = t[j];
        uint64_t h = HASH_SEED;
        for (int len = 1; len <= nmax && len <= e + 1; len++) {
            h = hash_step(h, s->tok[e - len + 1]);
            if (len >= nmin) slot_put(s->slots, s->cap_slots - 1, hash_key(h, len), e, len, &s->n_used);
        }
    }
    return NX_OK;
}

static ng_seq *seq_of(ng_drafter *g, nx_seq_id seq, const char *what, nx_error *err) {
    ng_seq *s = &g->seqs[seq];
    if (!s->active) {
        nx_fail(err, NX_ERR_INVALID_ARG, "ngram: %s: sequence %d was not begun", what, (int)seq);
        return NULL;
    }
    return s;
}

/* ===== The drafter operations ===== */

static nx_status ng_begin(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, nx_error *err) {
    ng_drafter *g = (ng_drafter *)d;
    ng_seq *s = &g->seqs[seq];
    s->active = false;
    s->n_tok = 0;
    s->n_pend = 0;
    if (s->slots) memset(s->slots, 0, s->cap_slots * sizeof *s->slots);
    s->n_used = 0;
    nx_status st = commit_tokens(g, s, prompt, n_prompt, err);
    if (st) return st;
    s->active = true;
    return NX_OK;
}

static nx_status ng_process(nx_drafter *d, const nx_target_rows *rows, nx_error *err) {
    ng_drafter *g = (ng_drafter *)d;
    for (int i = 0; i < rows->n; i++) {
        ng_seq *s = seq_of(g, rows->seq[i], "process", err);
        if (!s) return err ? err->code : NX_ERR_INVALID_ARG;
        nx_pos p = rows->pos[i];
        if (rows->kind == NX_ROWS_PROMPT) {
            /* begin() normally had the whole prompt; extra prompt rows extend it in order */
            if (p < s->n_tok) continue;
            if (p > s->n_tok || s->n_pend)
                return nx_fail(err, NX_ERR_INVALID_ARG, "ngram: sequence %d: prompt row at position %d, expected <= %d",
                               (int)rows->seq[i], (int)p, s->n_tok);
            nx_status st = commit_tokens(g, s, &rows->tok[i], 1, err);
            if (st) return st;
            continue;
        }
        if (p != s->n_tok + s->n_pend)
            return nx_fail(err, NX_ERR_INVALID_ARG,
                           "ngram: sequence %d: verify row at position %d, expected %d (%d committed, %d pending)",
                           (int)rows->seq[i], (int)p, s->n_tok + s->n_pend, s->n_tok, s->n_pend);
        nx_status st = grow_tokens(&s->pend, &s->cap_pend, s->n_pend + 1, err);
        if (st) return st;
        s->pend[s->n_pend++] = rows->tok[i];
    }
    return NX_OK;
}

static nx_status ng_accept(nx_drafter *d, nx_seq_id seq, int n_accepted, nx_error *err) {
    ng_drafter *g = (ng_drafter *)d;
    ng_seq *s = seq_of(g, seq, "accept", err);
    if (!s) return err ? err->code : NX_ERR_INVALID_ARG;
    if (n_accepted + 1 > s->n_pend)
        return nx_fail(err, NX_ERR_INVALID_ARG, "ngram: accept: sequence %d: %d accepted but only %d verify rows pending",
                       (int)seq, n_accepted, s->n_pend);
    nx_status st = commit_tokens(g, s, s->pend, n_accepted + 1, err);
    s->n_pend = 0;
    return st;
}

/* Token at virtual position v of (history, id_last, drafts so far). */
static inline nx_token virt_tok(const ng_seq *s, nx_token id_last, const nx_token *out, int v) {
    return v < s->n_tok ? s->tok[v] : v == s->n_tok ? id_last : out[v - s->n_tok - 1];
}

static nx_status ng_draft(nx_drafter *d, nx_draft_req *reqs, int n_reqs, nx_error *err) {
    ng_drafter *g = (ng_drafter *)d;
    const int nmax = g->params.ngram_max, nmin = g->params.ngram_min;
    for (int r = 0; r < n_reqs; r++) {
        nx_draft_req *q = &reqs[r];
        ng_seq *s = seq_of(g, q->seq, "draft", err);
        if (!s) return err ? err->code : NX_ERR_INVALID_ARG;
        if (q->pos != s->n_tok || s->n_pend)
            return nx_fail(err, NX_ERR_INVALID_ARG,
                           "ngram: draft: sequence %d at position %d, but %d tokens are committed and %d pending "
                           "(a process/accept call is missing)", (int)q->seq, (int)q->pos, s->n_tok, s->n_pend);
        if (q->k_max <= 0) continue;

        /* keys of the patterns ending at id_last (virtual position n_tok), n = 1..nmax */
        uint64_t keys[NX_NGRAM_N_MAX + 1];
        int lmax = nmax < s->n_tok + 1 ? nmax : s->n_tok + 1;
        uint64_t h = hash_step(HASH_SEED, q->id_last);
        keys[1] = hash_key(h, 1);
        for (int len = 2; len <= lmax; len++) {
            h = hash_step(h, s->tok[s->n_tok - len + 1]);
            keys[len] = hash_key(h, len);
        }
        int end = -1;
        for (int len = lmax; len >= nmin && end < 0; len--) {
            const ng_slot *hit = slot_find(s, keys[len]);
            if (!hit || hit->n != len) continue;
            int e = hit->end, ok = 1;
            for (int i = 0; i < len && ok; i++)
                ok = s->tok[e - i] == virt_tok(s, q->id_last, NULL, s->n_tok - i);
            if (ok) end = e;
        }
        if (end < 0) continue;
        for (int i = 0; i < q->k_max; i++) {
            q->tok[i] = virt_tok(s, q->id_last, q->tok, end + 1 + i);
            if (q->p) q->p[i] = 1.0f;
        }
        q->n = q->k_max;
        q->stage = 0;
    }
    return NX_OK;
}

static void ng_free(nx_drafter *d) {
    ng_drafter *g = (ng_drafter *)d;
    for (int i = 0; i < d->n_seq; i++) {
        free(g->seqs[i].tok);
        free(g->seqs[i].pend);
        free(g->seqs[i].slots);
    }
    free(g->seqs);
    free(g);
}

static const nx_drafter_ops ng_ops = {
    .name = "ngram", .begin = ng_begin, .process = ng_process, .draft = ng_draft,
    .accept = ng_accept, .free = ng_free,
};

/* ===== Public ===== */

nx_ngram_params nx_ngram_default_params(void) {
    return (nx_ngram_params){ .ngram_max = 4, .ngram_min = 1 };
}

nx_status nx_ngram_create(const nx_ngram_params *params, int n_seq, nx_drafter **out, nx_error *err) {
    if (!out) return nx_fail(err, NX_ERR_INVALID_ARG, "ngram: no output pointer");
    *out = NULL;
    nx_ngram_params p = params ? *params : nx_ngram_default_params();
    if (p.ngram_max < 1 || p.ngram_max > NX_NGRAM_N_MAX)
        return nx_fail(err, NX_ERR_INVALID_ARG, "ngram: ngram_max %d not in 1..%d", p.ngram_max, NX_NGRAM_N_MAX);
    if (p.ngram_min < 1 || p.ngram_min > p.ngram_max)
        return nx_fail(err, NX_ERR_INVALID_ARG, "ngram: ngram_min %d not in 1..ngram_max (%d)", p.ngram_min, p.ngram_max);
    if (n_seq < 1 || n_seq > (1 << 16))
        return nx_fail(err, NX_ERR_INVALID_ARG, "ngram: %d sequences (1..65536)", n_seq);
    ng_drafter *g = calloc(1, sizeof *g);
    ng_seq *seqs = calloc((size_t)n_seq, sizeof *seqs);
    if (!g || !seqs) {
        free(g);
        free(seqs);
        return nx_fail(err, NX_ERR_NOMEM, "ngram: out of memory for %d sequences", n_seq);
    }
    g->base.ops = &ng_ops;
    g->base.n_seq = n_seq;
    g->params = p;
    g->seqs = seqs;
    *out = &g->base;
    return NX_OK;
}

int nx_ngram_seq_len(const nx_drafter *d, nx_seq_id seq) {
    if (!d || d->ops != &ng_ops || seq < 0 || seq >= d->n_seq) return -1;
    const ng_drafter *g = (const ng_drafter *)d;
    return g->seqs[seq].active ? g->seqs[seq].n_tok : -1;
}
