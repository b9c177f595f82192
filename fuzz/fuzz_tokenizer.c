/*
 * fuzz_tokenizer.c — libFuzzer target for the tokenizers.
 *
 * Every input is encoded and decoded with:
 *   - a byte-level BPE vocabulary (the qwen35 golden GGUF: NX_FUZZ_TOK_GGUF, else the repo's
 *     tests/data/golden/qwen35-tiny/model.gguf; NX_FUZZ_TOK_GGUF=builtin: a vocabulary built in
 *     code): decode(encode(x)) must equal x byte for byte, with and without special-token parsing;
 *   - gemma4-style and SentencePiece vocabularies built in code: the round trip must equal x
 *     with U+2581 read as a space (those vocabularies write spaces as U+2581);
 *   - the streaming UTF-8 assembler fed token pieces must reproduce the decoded text.
 * Inputs starting with "GGUF" are also parsed as a GGUF and, when that works, built into a
 * tokenizer and used on a fixed text: a malformed vocabulary must give an error, never a crash.
 * Any broken promise traps.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer_impl.h"

typedef struct fuzz_vocabs {
    nx_tokenizer *bpe, *gemma, *spm;
} fuzz_vocabs;

static char *dup_bytes(const char *s, size_t n) {
    char *p = malloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* A small byte-level vocabulary: 256 byte tokens, merges of common English pieces, specials. */
static nx_tokenizer *builtin_bpe(void) {
    static const char *pairs[][2] = {{"t", "h"}, {"th", "e"}, {" ", "t"}, {" t", "he"}, {"i", "n"}, {"e", "r"},
                                     {"a", "n"}, {" ", "a"}, {"o", "n"}, {"r", "e"}, {" ", " "}, {"  ", "  "}, {"\n", "\n"}};
    char *toks[300], *merges[16];
    int32_t types[300];
    int n = 0, nm = 0;
    char buf[64];
    for (int b = 0; b < 256; b++) {
        size_t L = nx_utf8_encode(nx_bytelevel_cp((unsigned char)b), buf);
        toks[n] = dup_bytes(buf, L);
        types[n++] = NX_TOKEN_NORMAL;
    }
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char a[16], b[16];
        size_t la = 0, lb = 0;
        for (const char *p = pairs[i][0]; *p; p++) la += nx_utf8_encode(nx_bytelevel_cp((unsigned char)*p), a + la);
        for (const char *p = pairs[i][1]; *p; p++) lb += nx_utf8_encode(nx_bytelevel_cp((unsigned char)*p), b + lb);
        snprintf(buf, sizeof buf, "%.*s %.*s", (int)la, a, (int)lb, b);
        merges[nm++] = strdup(buf);
        snprintf(buf, sizeof buf, "%.*s%.*s", (int)la, a, (int)lb, b);
        toks[n] = strdup(buf);
        types[n++] = NX_TOKEN_NORMAL;
    }
    const char *specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int i = 0; i < 3; i++) { toks[n] = strdup(specials[i]); types[n++] = NX_TOKEN_CONTROL; }
    toks[n] = strdup("<think>");
    types[n++] = NX_TOKEN_USER_DEFINED;
    nx_tokenizer_desc d;
    nx_tokenizer_desc_init(&d);
    d.model = "gpt2";
    d.pre = "qwen35";
    d.n_tokens = n;
    d.tokens = (const char *const *)toks;
    d.types = types;
    d.n_merges = nm;
    d.merges = (const char *const *)merges;
    d.eos = n - 2;
    nx_tokenizer *t = NULL;
    nx_error err = {0};
    if (nx_tokenizer_create(&d, &t, &err)) { fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg); abort(); }
    for (int i = 0; i < n; i++) free(toks[i]);
    for (int i = 0; i < nm; i++) free(merges[i]);
    return t;
}

/* gemma4-style (merges) or SentencePiece (scores) vocabulary over ▁, a few letters, <0xNN>. */
static nx_tokenizer *builtin_sp(const char *model) {
    const char *words[] = {"\xe2\x96\x81", "a", "b", "c", "\n", "ab", "\xe2\x96\x81\x61", "\xe2\x96\x81\x61\x62", "\xe2\x96\x81\xe2\x96\x81", "bc", "abc", NULL};
    const char *merges[] = {"a b", "\xe2\x96\x81 a", "\xe2\x96\x81\x61 b", "\xe2\x96\x81 \xe2\x96\x81", "b c", "ab c"};
    char *toks[300];
    int32_t types[300];
    float scores[300];
    int n = 0;
    const char *ctl[] = {"<pad>", "<eos>", "<bos>", "<unk>"};
    for (int i = 0; i < 4; i++) { toks[n] = strdup(ctl[i]); types[n] = i == 3 ? NX_TOKEN_UNKNOWN : NX_TOKEN_CONTROL; scores[n++] = 0; }
    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        toks[n] = strdup(buf);
        types[n] = NX_TOKEN_BYTE;
        scores[n++] = 0;
    }
    for (int i = 0; words[i]; i++) { toks[n] = strdup(words[i]); types[n] = NX_TOKEN_NORMAL; scores[n++] = -(float)i; }
    nx_tokenizer_desc d;
    nx_tokenizer_desc_init(&d);
    d.model = model;
    d.n_tokens = n;
    d.tokens = (const char *const *)toks;
    d.types = types;
    d.scores = scores;
    d.n_merges = 6;
    d.merges = merges;
    d.bos = 2; d.eos = 1; d.unk = 3; d.pad = 0;
    d.add_space_prefix = !strcmp(model, "llama");
    nx_tokenizer *t = NULL;
    nx_error err = {0};
    if (nx_tokenizer_create(&d, &t, &err)) { fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg); abort(); }
    for (int i = 0; i < n; i++) free(toks[i]);
    return t;
}

static fuzz_vocabs *vocabs(void) {
    static fuzz_vocabs v;   /* built once per fuzzing process */
    if (v.bpe) return &v;
    const char *path = getenv("NX_FUZZ_TOK_GGUF");
    nx_error err = {0};
    if (!path) path = NX_SOURCE_DIR "/tests/data/golden/qwen35-tiny/model.gguf";   /* set by CMake */
    if (!strcmp(path, "builtin")) v.bpe = builtin_bpe();
    else if (nx_tokenizer_load(path, &v.bpe, &err) != NX_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s (NX_FUZZ_TOK_GGUF=builtin for the built-in vocabulary)\n", err.msg);
        abort();   /* a missing golden is a broken checkout, not a reason to fuzz less */
    }
    v.gemma = builtin_sp("gemma4");
    v.spm = builtin_sp("llama");
    return &v;
}

/* expected decode for ▁-escaping vocabularies: U+2581 reads back as a space */
static size_t unescape_expect(const uint8_t *in, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && in[i] == 0xE2 && in[i + 1] == 0x96 && in[i + 2] == 0x81) { out[o++] = ' '; i += 3; }
        else out[o++] = (char)in[i++];
    }
    return o;
}

static void check_roundtrip(const nx_tokenizer *t, const uint8_t *data, size_t size, unsigned tflags,
                            const char *want, size_t want_len) {
    nx_token_vec v = {0};
    nx_error err = {0};
    if (nx_tokenize(t, (const char *)data, size, tflags, &v, &err) != NX_OK) __builtin_trap();
    char *out = NULL;
    size_t len = 0;
    if (nx_detokenize(t, v.ids, v.n, NX_DETOK_SPECIAL, &out, &len, &err) != NX_OK) __builtin_trap();
    if (len != want_len || memcmp(out, want, len) != 0) __builtin_trap();
    /* streaming: pieces through the UTF-8 assembler give the same bytes */
    char *stream = malloc(len + 8), buf[1024];
    size_t o = 0;
    nx_utf8_asm a = {0};
    for (size_t i = 0; i < v.n; i++) {
        size_t pl;
        const char *p = nx_token_piece(t, v.ids[i], true, &pl);
        /* SentencePiece: decoding drops the first token's added leading space */
        if (i == 0 && pl && nx_tokenizer_specials(t)->add_space_prefix && p[0] == ' ') { p++; pl--; }
        if (pl + 4 > sizeof buf || o + pl > len + 4) __builtin_trap();
        size_t k = nx_utf8_asm_feed(&a, p, pl, buf);
        memcpy(stream + o, buf, k);
        o += k;
    }
    o += nx_utf8_asm_flush(&a, stream + o);
    if (o != len || memcmp(stream, out, len) != 0) __builtin_trap();
    free(stream);
    free(out);
    nx_token_vec_free(&v);
}

static void fuzz_gguf_vocab(const uint8_t *data, size_t size) {
    nx_gguf *g = NULL;
    nx_error err = {0};
    if (nx_gguf_open_memory(data, size, &g, &err) != NX_OK) return;
    nx_tokenizer *t = NULL;
    if (nx_tokenizer_from_gguf(g, &t, &err) == NX_OK) {
        static const char text[] = "Hello, world! <|im_start|> 123 \xe4\xbd\xa0\xe5\xa5\xbd \xff\n\n  x";
        nx_token_vec v = {0};
        if (nx_tokenize(t, text, sizeof text - 1, NX_TOK_ADD_SPECIAL | NX_TOK_PARSE_SPECIAL, &v, &err) == NX_OK) {
            char *out = NULL;
            size_t len;
            if (nx_detokenize(t, v.ids, v.n, NX_DETOK_SPECIAL, &out, &len, &err) == NX_OK) free(out);
            for (size_t i = 0; i < v.n; i++)
                if (v.ids[i] < 0 || v.ids[i] >= nx_tokenizer_n_vocab(t)) __builtin_trap();
        }
        nx_token_vec_free(&v);
        nx_tokenizer_free(t);
    } else if (err.msg[0] == '\0') {
        __builtin_trap();     /* a failure must say why */
    }
    nx_gguf_close(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    fuzz_vocabs *fv = vocabs();
    if (size >= 4 && !memcmp(data, "GGUF", 4)) fuzz_gguf_vocab(data, size);
    check_roundtrip(fv->bpe, data, size, 0, (const char *)data, size);
    check_roundtrip(fv->bpe, data, size, NX_TOK_PARSE_SPECIAL | NX_TOK_ADD_SPECIAL, (const char *)data, size);
    char *want = malloc(size + 1);
    size_t wl = unescape_expect(data, size, want);
    check_roundtrip(fv->gemma, data, size, NX_TOK_PARSE_SPECIAL, want, wl);
    check_roundtrip(fv->spm, data, size, 0, want, wl);
    free(want);
    /* the JSON string-array reader must never crash */
    nx_str_list l;
    nx_error err = {0};
    if (nx_json_string_array((const char *)data, size, &l, &err) == NX_OK) {
        for (size_t i = 0; i < l.n; i++)
            if (l.s[i] < l.pool || l.s[i] + l.len[i] > l.pool + size) __builtin_trap();
    }
    nx_str_list_free(&l);
    return 0;
}
