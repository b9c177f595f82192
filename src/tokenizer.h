/*
 * tokenizer.h — text <-> token ids, built from a GGUF's `tokenizer.ggml.*` metadata.
 *
 * Contract:
 *   - Three vocabulary kinds, chosen by `tokenizer.ggml.model`:
 *       "gpt2"   byte-level BPE (GPT-2 byte<->unicode map, merges by rank, a pre-tokenizer regex
 *                chosen by `tokenizer.ggml.pre`: qwen2, qwen35, llama3/llama-bpe, gpt-2,
 *                deepseek-v3, default, ...);
 *       "llama"  SentencePiece (merges by token score, `▁` space marker, <0xNN> byte fallback,
 *                add_space_prefix);
 *       "gemma4" BPE over raw UTF-8 with `▁` for spaces and <0xNN> byte fallback (Gemma 3/4
 *                tokenizer.json style); the text is split only at newline runs.
 *   - Encoding accepts any bytes. Invalid UTF-8 never fails and never crashes: with byte-level
 *     BPE every byte round-trips (decode(encode(x)) == x); with the other kinds invalid bytes
 *     become <0xNN> byte tokens.
 *   - Special tokens: CONTROL / UNKNOWN token text in the input is matched as one token only
 *     with NX_TOK_PARSE_SPECIAL; USER_DEFINED tokens are always matched as text (llama.cpp and
 *     Hugging Face behaviour). Matching is leftmost-longest.
 *   - A built tokenizer is immutable: every function taking a `const nx_tokenizer *` may be
 *     called from several threads at once. Encoding cost is near-linear in the input.
 *   - Decoding: a token's piece is its bytes; CONTROL/UNKNOWN tokens render as nothing unless
 *     NX_DETOK_SPECIAL. nx_utf8_asm assembles streamed pieces into whole UTF-8 characters
 *     and never loses bytes (flush emits what is left, even if it is not valid UTF-8).
 *   - Nothing here prints or exits; failures fill nx_error.
 */
#ifndef NX_TOKENIZER_H
#define NX_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/error.h"
#include "gguf.h"

typedef struct nx_tokenizer nx_tokenizer;

/* Token types, numbered as `tokenizer.ggml.token_type` stores them. */
typedef enum nx_token_type {
    NX_TOKEN_UNDEFINED = 0,
    NX_TOKEN_NORMAL = 1,
    NX_TOKEN_UNKNOWN = 2,
    NX_TOKEN_CONTROL = 3,
    NX_TOKEN_USER_DEFINED = 4,
    NX_TOKEN_UNUSED = 5,
    NX_TOKEN_BYTE = 6,
} nx_token_type;

typedef enum nx_vocab_kind {
    NX_VOCAB_BPE,      /* "gpt2": byte-level BPE */
    NX_VOCAB_SPM,      /* "llama": SentencePiece scores */
    NX_VOCAB_GEMMA4,   /* "gemma4": BPE on raw UTF-8 with ▁ and <0xNN> fallback */
} nx_vocab_kind;

/* A vocabulary described in memory (what a GGUF holds). Used by nx_tokenizer_create(); tests
 * and the fuzzer build small vocabularies with it. Strings are copied. */
typedef struct nx_tokenizer_desc {
    const char *model;              /* "gpt2", "llama", "gemma4" */
    const char *pre;                /* tokenizer.ggml.pre, NULL = none */
    int32_t n_tokens;
    const char *const *tokens;      /* n_tokens strings */
    const size_t *token_lens;       /* NULL = strlen */
    const int32_t *types;           /* NULL = all NORMAL */
    const float *scores;            /* NULL = all 0 */
    int32_t n_merges;
    const char *const *merges;      /* "left right" */
    const size_t *merge_lens;       /* NULL = strlen */
    /* special ids: -2 = key absent (kind default applies), -1 = none */
    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    /* -1 = key absent (kind default applies), 0 = false, 1 = true */
    int add_bos, add_eos, add_space_prefix;
} nx_tokenizer_desc;

/* A desc with every special id "absent" and every flag "absent". */
void nx_tokenizer_desc_init(nx_tokenizer_desc *d);

nx_status nx_tokenizer_create(const nx_tokenizer_desc *d, nx_tokenizer **out, nx_error *err);
/* Build from an open GGUF (the tokenizer copies what it needs; the file may be closed after). */
nx_status nx_tokenizer_from_gguf(const nx_gguf *g, nx_tokenizer **out, nx_error *err);
/* Open a GGUF file, build, close. */
nx_status nx_tokenizer_load(const char *path, nx_tokenizer **out, nx_error *err);
void nx_tokenizer_free(nx_tokenizer *t);

/* ===== Vocabulary ===== */

nx_vocab_kind nx_tokenizer_kind(const nx_tokenizer *t);
const char   *nx_tokenizer_pre(const nx_tokenizer *t);       /* "" when none */
int32_t       nx_tokenizer_n_vocab(const nx_tokenizer *t);
/* Token text as stored in the vocabulary (byte-level chars for BPE, ▁ for SPM); NULL if out of range. */
const char   *nx_token_text(const nx_tokenizer *t, int32_t id, size_t *len);
nx_token_type nx_token_get_type(const nx_tokenizer *t, int32_t id);
float         nx_token_score(const nx_tokenizer *t, int32_t id);
/* Exact vocabulary lookup of a token text; -1 if absent. */
int32_t       nx_token_find(const nx_tokenizer *t, const char *text, size_t len);

/* Special ids (-1 = none) and flags. */
typedef struct nx_tok_specials {
    int32_t bos, eos, eot, eom, unk, sep, pad, mask, nl;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix;
} nx_tok_specials;
const nx_tok_specials *nx_tokenizer_specials(const nx_tokenizer *t);

/* End of generation: EOS, EOT, EOM and EOT-like tokens found by text (<|im_end|>,
 * <|endoftext|>, <end_of_turn>, <|eot_id|>, ...). */
bool    nx_token_is_eog(const nx_tokenizer *t, int32_t id);
int32_t nx_tokenizer_eog_ids(const nx_tokenizer *t, const int32_t **ids);

/* ===== Encoding ===== */

typedef struct nx_token_vec {
    int32_t *ids;
    size_t n, cap;
} nx_token_vec;

void nx_token_vec_free(nx_token_vec *v);

enum {
    NX_TOK_ADD_SPECIAL   = 1u << 0,   /* add BOS/EOS as the vocabulary asks (add_bos/add_eos) */
    NX_TOK_PARSE_SPECIAL = 1u << 1,   /* match CONTROL/UNKNOWN token text in the input */
};

/* Append the tokens of text[0..len) to out (out may hold tokens already). */
nx_status nx_tokenize(const nx_tokenizer *t, const char *text, size_t len, unsigned flags,
                      nx_token_vec *out, nx_error *err);

/* ===== Decoding ===== */

enum {
    NX_DETOK_SPECIAL        = 1u << 0,  /* render CONTROL/UNKNOWN tokens as their text */
    NX_DETOK_REMOVE_SPECIAL = 1u << 1,  /* drop a leading BOS / trailing EOS the vocab adds */
};

/* Bytes of one token (not NUL-terminated; points into the tokenizer). Out-of-range ids and
 * hidden tokens give length 0. */
const char *nx_token_piece(const nx_tokenizer *t, int32_t id, bool special, size_t *len);

/* Whole-sequence decode into a malloc'ed NUL-terminated buffer (*out_len excludes the NUL).
 * Applies the vocabulary's leading-space removal (SPM) and space clean-up (some BPE pre types). */
nx_status nx_detokenize(const nx_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        char **out, size_t *out_len, nx_error *err);

/* Streaming UTF-8 assembler: feed the pieces of generated tokens; only complete characters
 * come out. Bytes that can never start or continue a valid character are passed through at
 * once (so nothing stalls); nx_utf8_asm_flush() emits any incomplete tail at the end. */
typedef struct nx_utf8_asm {
    unsigned char pend[4];
    unsigned n;
} nx_utf8_asm;

/* out must have room for n + 4 bytes. Returns the number of bytes written. */
size_t nx_utf8_asm_feed(nx_utf8_asm *a, const char *in, size_t n, char *out);
size_t nx_utf8_asm_flush(nx_utf8_asm *a, char *out);   /* out: room for 4 bytes */

/* ===== Conversion: Hugging Face tokenizer.json -> vocab-only GGUF ===== */

typedef struct nx_tok_convert_opts {
    const char *tokenizer_json;   /* required */
    const char *config_json;      /* tokenizer_config.json, may be NULL */
    const char *out_path;         /* required */
    const char *pre;              /* tokenizer.ggml.pre override (NULL = recognise the regex) */
    const char *model;            /* "gpt2" | "gemma4" | "llama"; NULL = gpt2 for byte-level, gemma4 for byte-fallback */
    const char *arch;             /* general.architecture to write, NULL = none */
    const char *name;             /* general.name to write, NULL = none */
    int32_t     n_vocab;          /* > 0: pad the token list to this size with [PADi] (the model's vocab_size) */
    const char *const *user_defined;   /* NULL-terminated texts typed USER_DEFINED even when special
                                          (always rendered: Gemma 4's channel / tool-call markers), or NULL */
} nx_tok_convert_opts;

nx_status nx_tokenizer_convert(const nx_tok_convert_opts *o, nx_error *err);
/* The same keys, added to an open writer (`nextn convert` writes them beside the weights). */
nx_status nx_tokenizer_convert_kv(const nx_tok_convert_opts *o, nx_gguf_writer *w, nx_error *err);

/* ===== JSON helpers for token I/O (CLI, server) ===== */

/* Write bytes as a JSON string; bytes that are not valid UTF-8 are written as \ufffd. */
void nx_json_write_string(FILE *f, const char *s, size_t n);

/* A parsed array of strings: s[i] has len[i] bytes (may contain NUL), all inside pool. */
typedef struct nx_str_list {
    char *pool;
    const char **s;
    size_t *len;
    size_t n;
} nx_str_list;

nx_status nx_json_string_array(const char *json, size_t len, nx_str_list *out, nx_error *err);
void      nx_str_list_free(nx_str_list *l);

#endif
