/*
 * tokenizer_impl.h — private layout of nx_tokenizer shared by src/tokenizer*.c.
 * Not part of any public contract; only tokenizer*.c include it.
 */
#ifndef NX_TOKENIZER_IMPL_H
#define NX_TOKENIZER_IMPL_H

#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ===== String -> int32 hash map (open addressing, keys point into caller-owned memory) ===== */

typedef struct nx_strmap_slot {
    const char *key;     /* NULL = empty */
    uint32_t len;
    uint32_t hash;
    int32_t val;
} nx_strmap_slot;

typedef struct nx_strmap {
    nx_strmap_slot *slots;
    size_t cap, count;   /* cap is a power of two */
} nx_strmap;

uint32_t nx_tok_hash(const char *s, size_t len);
bool     nx_strmap_reserve(nx_strmap *m, size_t n);
/* Returns the value or -1. */
int32_t  nx_strmap_get(const nx_strmap *m, const char *key, size_t len);
/* Insert if absent; returns false on allocation failure. *existing (optional) gets the old value or -1. */
bool     nx_strmap_put(nx_strmap *m, const char *key, size_t len, int32_t val, int32_t *existing);
void     nx_strmap_free(nx_strmap *m);

/* ===== (left id, right id) -> (rank, result id) for BPE merges ===== */

typedef struct nx_merge_slot {
    uint64_t key;        /* (left << 32 | right) + 1; 0 = empty */
    int32_t rank;
    int32_t result;
} nx_merge_slot;

typedef struct nx_mergemap {
    nx_merge_slot *slots;
    size_t cap, count;
} nx_mergemap;

/* ===== Special-token trie (leftmost-longest matching) ===== */

typedef struct nx_trie_node {
    int32_t first_child;  /* -1 = none */
    int32_t next_sibling; /* -1 = none */
    int32_t token;        /* token ending here or -1 */
    unsigned char byte;
} nx_trie_node;

/* ===== Pre-tokenizer ===== */

#define NX_PRETOK_MAX_RE 6

typedef struct nx_pretok {
    int n_re;
    pcre2_code *re[NX_PRETOK_MAX_RE];
} nx_pretok;

/* ===== The tokenizer ===== */

struct nx_tokenizer {
    nx_vocab_kind kind;
    char pre[48];
    int32_t n_tokens;

    /* token texts: pool + offsets (text i = pool[off[i] .. off[i]+len[i])) */
    char *text_pool;
    uint32_t *text_off, *text_len;
    uint8_t *types;
    float *scores;
    nx_strmap tok_map;              /* text -> id */
    size_t max_token_len;

    /* decoded pieces (bytes), rendered as if `special` were on */
    char *piece_pool;
    uint32_t *piece_off, *piece_len;

    /* BPE */
    nx_mergemap merges;
    int32_t n_symbols;              /* ids >= n_tokens are synthetic merge results not in vocab */
    int32_t byte_sym[256];          /* BPE: token of each byte's byte-level char; -1 if missing */
    uint16_t bl_cp[256];            /* GPT-2 byte -> code point */
    int16_t bl_byte[324];           /* code point -> byte, -1 if none */
    int32_t byte_tok[256];          /* SPM/GEMMA4: <0xNN> token of each byte; -1 if missing */
    bool ignore_merges;             /* whole piece in vocab -> use it (llama3 pre) */
    bool clean_spaces;              /* detokenize " ." -> "." etc. */
    bool escape_ws;                 /* ' ' -> ▁ before encoding */
    nx_pretok pretok;

    /* specials */
    nx_tok_specials sp;
    int32_t *eog;
    int32_t n_eog;
    nx_trie_node *trie;
    int32_t n_trie, cap_trie;
    bool has_user_defined;          /* any USER_DEFINED tokens (matched even without parse_special) */
    bool first_byte[256];           /* first bytes of matchable special tokens */
};

/* Byte-level BPE: GPT-2's byte -> code point map and its inverse (code point < 324 -> byte, else -1). */
uint32_t nx_bytelevel_cp(unsigned char b);
int      nx_bytelevel_byte(uint32_t cp);

/* UTF-8 helpers: length of the valid character at s (1..4) or 0 if the bytes at s do not form one. */
size_t nx_utf8_valid_len(const unsigned char *s, size_t n);
size_t nx_utf8_encode(uint32_t cp, char *out);

/* tokenizer_pretok.c */
nx_status nx_pretok_init(nx_pretok *p, const char *pre, nx_vocab_kind kind, bool *ignore_merges,
                         bool *clean_spaces, nx_error *err);
void      nx_pretok_free(nx_pretok *p);

typedef struct nx_span { size_t off, len; } nx_span;
typedef struct nx_span_vec { nx_span *v; size_t n, cap; } nx_span_vec;

/* Per-call matching state (match data, JIT stack), created on first use and reused for every
 * fragment of one nx_tokenize() call. */
typedef struct nx_pretok_scratch {
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    pcre2_match_data *md[NX_PRETOK_MAX_RE];
    nx_span_vec tmp;
} nx_pretok_scratch;

void nx_pretok_scratch_free(nx_pretok_scratch *s);

/* Split text[0..len) into pieces (offsets relative to text) with every regex in turn. */
nx_status nx_pretok_split(const nx_pretok *p, nx_pretok_scratch *s, const char *text, size_t len,
                          nx_span_vec *out, nx_error *err);

/* tokenizer_bpe.c */
nx_status nx_bpe_build(nx_tokenizer *t, const char *const *merges, const size_t *merge_lens,
                       int32_t n_merges, nx_error *err);
typedef struct nx_bpe_scratch nx_bpe_scratch;
nx_bpe_scratch *nx_bpe_scratch_new(void);
void            nx_bpe_scratch_free(nx_bpe_scratch *s);
/* Encode one fragment of raw text (no special tokens inside) with BPE/GEMMA4 rules. */
nx_status nx_bpe_encode(const nx_tokenizer *t, nx_bpe_scratch *s, const char *text, size_t len,
                        nx_token_vec *out, nx_error *err);

/* tokenizer_spm.c */
nx_status nx_spm_encode(const nx_tokenizer *t, const char *text, size_t len, nx_token_vec *out,
                        nx_error *err);

/* tokenizer.c */
bool nx_token_vec_push(nx_token_vec *v, int32_t id);

#endif
