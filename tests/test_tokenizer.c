/*
 * test_tokenizer.c — tokenizer unit tests: byte-level BPE, SentencePiece and gemma4 vocabularies
 * built in memory, special tokens, pre-tokenizer regexes, invalid UTF-8 round trips, streaming
 * UTF-8 assembly, JSON helpers, the tokenizer.json converter, and the golden test vectors
 * (tests/data/golden case.json prompts, models/heldout.py.txt = 2,496 tokens).
 */
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "core/io.h"
#include "test.h"
#include "tokenizer_impl.h"

/* ===== helpers ===== */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* byte-level text of raw bytes (GPT-2 map) */
static size_t bl(const char *raw, char *out) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p; p++) o += nx_utf8_encode(nx_bytelevel_cp(*p), out + o);
    out[o] = 0;
    return o;
}

/* A byte-level BPE vocabulary: 256 byte tokens, then one token per merge, then specials. */
typedef struct test_vocab {
    char *tok[512];
    int32_t type[512];
    char *merge[128];
    int n_tok, n_merge;
} test_vocab;

static void tv_add(test_vocab *v, const char *s, int32_t type) {
    v->tok[v->n_tok] = strdup(s);
    v->type[v->n_tok++] = type;
}

/* raw merges "a b" over raw bytes (spaces written as '_' in the spec, mapped here) */
static void tv_merge(test_vocab *v, const char *a_raw, const char *b_raw) {
    char a[64], b[64], m[160], ab[128];
    bl(a_raw, a);
    bl(b_raw, b);
    snprintf(m, sizeof m, "%s %s", a, b);
    snprintf(ab, sizeof ab, "%s%s", a, b);
    v->merge[v->n_merge++] = strdup(m);
    for (int i = 0; i < v->n_tok; i++)
        if (!strcmp(v->tok[i], ab)) return;
    tv_add(v, ab, NX_TOKEN_NORMAL);
}

static void tv_free(test_vocab *v) {
    for (int i = 0; i < v->n_tok; i++) free(v->tok[i]);
    for (int i = 0; i < v->n_merge; i++) free(v->merge[i]);
}

static nx_tokenizer *make_bpe(test_vocab *v, const char *pre) {
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        char raw[2] = {(char)b, 0}, s[8];
        if (b == 0) { nx_utf8_encode(nx_bytelevel_cp(0), s); s[2] = 0; }
        else bl(raw, s);
        tv_add(v, s, NX_TOKEN_NORMAL);
    }
    tv_merge(v, "h", "e");                 /* 256 he */
    tv_merge(v, "l", "l");                 /* 257 ll */
    tv_merge(v, "he", "ll");               /* 258 hell */
    tv_merge(v, "hell", "o");              /* 259 hello */
    tv_merge(v, " ", "w");                 /* 260 " w" */
    tv_merge(v, "o", "r");                 /* 261 or */
    tv_merge(v, " w", "or");               /* 262 " wor" */
    tv_merge(v, "l", "d");                 /* 263 ld */
    tv_merge(v, " wor", "ld");             /* 264 " world" */
    tv_merge(v, "\xe4\xbd", "\xa0");       /* 265 你 */
    tv_add(v, "<|im_start|>", NX_TOKEN_CONTROL);   /* 266 */
    tv_add(v, "<|im_end|>", NX_TOKEN_CONTROL);     /* 267 */
    tv_add(v, "<think>", NX_TOKEN_USER_DEFINED);   /* 268 */
    tv_add(v, "<|im", NX_TOKEN_CONTROL);           /* 269: a shorter overlapping special */
    tv_merge(v, "\xe4", "\xbd");         /* 270: the first half of 你 (merge ranked after 265's) */
    nx_tokenizer_desc d;
    nx_tokenizer_desc_init(&d);
    d.model = "gpt2";
    d.pre = pre;
    d.n_tokens = v->n_tok;
    d.tokens = (const char *const *)v->tok;
    d.types = v->type;
    d.n_merges = v->n_merge;
    d.merges = (const char *const *)v->merge;
    d.eos = 267;
    d.bos = 266;
    d.add_bos = 0;
    nx_tokenizer *t = NULL;
    nx_error err = {0};
    nx_status st = nx_tokenizer_create(&d, &t, &err);
    if (st) fprintf(stderr, "  create: %s\n", err.msg);
    return t;
}

static int encode(const nx_tokenizer *t, const char *s, size_t n, unsigned flags, int32_t *ids, int max) {
    nx_token_vec v = {0};
    nx_error err = {0};
    if (nx_tokenize(t, s, n, flags, &v, &err) != NX_OK) { fprintf(stderr, "  tokenize: %s\n", err.msg); return -1; }
    int k = (int)v.n;
    for (int i = 0; i < k && i < max; i++) ids[i] = v.ids[i];
    nx_token_vec_free(&v);
    return k;
}

static bool roundtrip(const nx_tokenizer *t, const char *s, size_t n, unsigned tflags, unsigned dflags) {
    nx_token_vec v = {0};
    nx_error err = {0};
    char *out = NULL;
    size_t len = 0;
    bool ok = nx_tokenize(t, s, n, tflags, &v, &err) == NX_OK &&
              nx_detokenize(t, v.ids, v.n, dflags, &out, &len, &err) == NX_OK &&
              len == n && memcmp(out, s, n) == 0;
    nx_token_vec_free(&v);
    free(out);
    return ok;
}

/* ===== tests ===== */

static void test_bytelevel_map(void) {
    int seen[512] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = nx_bytelevel_cp((unsigned char)b);
        CHECK(cp < 324);
        CHECK_EQ_INT(nx_bytelevel_byte(cp), b);
        seen[cp]++;
    }
    for (int i = 0; i < 512; i++) CHECK(seen[i] <= 1);
    CHECK_EQ_INT(nx_bytelevel_cp(' '), 0x120);    /* Ġ */
    CHECK_EQ_INT(nx_bytelevel_cp('\n'), 0x10A);   /* Ċ */
    CHECK_EQ_INT(nx_bytelevel_cp('a'), 'a');
}

static void test_bpe_merges(void) {
    test_vocab v;
    nx_tokenizer *t = make_bpe(&v, "qwen2");
    CHECK(t != NULL);
    if (!t) { tv_free(&v); return; }
    int32_t ids[64];
    int n = encode(t, "hello world", 11, 0, ids, 64);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 259);
    CHECK_EQ_INT(ids[1], 264);
    n = encode(t, "\xe4\xbd\xa0", 3, 0, ids, 64);     /* 你 via a merge of raw bytes */
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(ids[0], 265);
    n = encode(t, "hellx", 5, 0, ids, 64);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 258);
    CHECK_EQ_INT(ids[1], 'x');                        /* byte tokens come first, in byte order */
    CHECK_EQ_INT(nx_token_find(t, "hello", 5), 259);
    CHECK(roundtrip(t, "hello world, hello!\n\tx  y", 26, 0, 0));
    nx_tokenizer_free(t);
    tv_free(&v);
}

static void test_bpe_random_roundtrip(void) {
    test_vocab v;
    nx_tokenizer *t = make_bpe(&v, "qwen35");
    if (!t) { CHECK(t != NULL); tv_free(&v); return; }
    char buf[4096];
    for (int iter = 0; iter < 300; iter++) {
        size_t n = rnd() % sizeof buf;
        for (size_t i = 0; i < n; i++) {
            uint32_t r = rnd();
            /* a mix of ASCII, raw high bytes (mostly invalid UTF-8) and whitespace */
            uint32_t c = (r & 3) == 0 ? (r >> 8) : (r & 3) == 1 ? (uint32_t)(unsigned char)" \t\n\r"[(r >> 8) & 3] : 'a' + (r >> 8) % 26;
            buf[i] = (char)c;
        }
        CHECK_MSG(roundtrip(t, buf, n, 0, 0), "iteration %d, %zu bytes", iter, n);
    }
    /* every single byte and every byte pair */
    for (int a = 0; a < 256; a++) {
        char s[2] = {(char)a, (char)(255 - a)};
        CHECK(roundtrip(t, s, 1, 0, 0));
        CHECK(roundtrip(t, s, 2, 0, 0));
    }
    nx_tokenizer_free(t);
    tv_free(&v);
}

static void test_special_tokens(void) {
    test_vocab v;
    nx_tokenizer *t = make_bpe(&v, "qwen2");
    if (!t) { CHECK(t != NULL); tv_free(&v); return; }
    int32_t ids[64];
    const char *s = "<|im_start|>hello<|im_end|>";
    int n = encode(t, s, strlen(s), NX_TOK_PARSE_SPECIAL, ids, 64);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[0], 266);
    CHECK_EQ_INT(ids[1], 259);
    CHECK_EQ_INT(ids[2], 267);
    /* without parse_special the text is ordinary text */
    n = encode(t, s, strlen(s), 0, ids, 64);
    CHECK(n > 3);
    for (int i = 0; i < n && i < 64; i++) CHECK(ids[i] != 266 && ids[i] != 267 && ids[i] != 269);
    /* user-defined tokens are matched always */
    n = encode(t, "<think>hello", 12, 0, ids, 64);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 268);
    /* leftmost-longest: "<|im_end|>" wins over its prefix "<|im" */
    n = encode(t, "<|im_end|><|im", 14, NX_TOK_PARSE_SPECIAL, ids, 64);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 267);
    CHECK_EQ_INT(ids[1], 269);
    /* decoding: control tokens hidden unless asked */
    int32_t seq[] = {266, 259, 267};
    char *out;
    size_t len;
    nx_error err = {0};
    CHECK(nx_detokenize(t, seq, 3, 0, &out, &len, &err) == NX_OK);
    CHECK_STR(out, "hello");
    free(out);
    CHECK(nx_detokenize(t, seq, 3, NX_DETOK_SPECIAL, &out, &len, &err) == NX_OK);
    CHECK_STR(out, "<|im_start|>hello<|im_end|>");
    free(out);
    CHECK(roundtrip(t, s, strlen(s), NX_TOK_PARSE_SPECIAL, NX_DETOK_SPECIAL));
    /* EOG: EOS and <|im_end|> by text */
    CHECK(nx_token_is_eog(t, 267));
    CHECK(!nx_token_is_eog(t, 259));
    CHECK_EQ_INT(nx_tokenizer_specials(t)->eot, 267);
    /* ADD_SPECIAL with add_bos=false adds nothing */
    n = encode(t, "hello", 5, NX_TOK_ADD_SPECIAL, ids, 64);
    CHECK_EQ_INT(n, 1);
    nx_tokenizer_free(t);
    tv_free(&v);
}

static void test_pretok_regexes(void) {
    bool im, cs;
    nx_error err = {0};
    nx_pretok p;
    nx_span_vec sp = {0};
    nx_pretok_scratch ps = {0};
    struct { const char *pre, *text; const char *pieces[12]; } cases[] = {
        {"qwen2", "Hello world's 123 !!\n\n  x", {"Hello", " world", "'s", " ", "1", "2", "3", " !!\n\n", " ", " x"}},
        {"llama-bpe", "abc 12345", {"abc", " ", "123", "45"}},
        {"gpt-2", "I'm  ok.", {"I", "'m", " ", " ok", "."}},
        {"qwen35", "e\xcc\x81t\xc3\xa9", {"e\xcc\x81t\xc3\xa9"}},              /* marks join letters */
        {"qwen2", "e\xcc\x81t", {"e", "\xcc\x81t"}},                          /* not in qwen2 */
        /* U+0085 is White_Space (Rust tokenizers, llama.cpp), U+180E is not */
        {"qwen2", "\xc2\x85\xc2\x85x", {"\xc2\x85", "\xc2\x85x"}},
        {"qwen2", "a\xe1\xa0\x8e" "b", {"a", "\xe1\xa0\x8e" "b"}},
        /* invalid bytes end up in pieces of their own, nothing is lost */
        {"qwen2", "ab\xff" "cd", {"ab", "\xff", "cd"}},
        {"deepseek-v3", "abc1234\xe4\xbd\xa0\xe5\xa5\xbd!x", {"abc", "123", "4", "\xe4\xbd\xa0\xe5\xa5\xbd", "!x"}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CHECK(nx_pretok_init(&p, cases[c].pre, NX_VOCAB_BPE, &im, &cs, &err) == NX_OK);
        CHECK(nx_pretok_split(&p, &ps, cases[c].text, strlen(cases[c].text), &sp, &err) == NX_OK);
        size_t k = 0;
        for (; cases[c].pieces[k]; k++) {
            bool ok = k < sp.n && sp.v[k].len == strlen(cases[c].pieces[k]) &&
                      !memcmp(cases[c].text + sp.v[k].off, cases[c].pieces[k], sp.v[k].len);
            CHECK_MSG(ok, "case %zu (%s) piece %zu", c, cases[c].pre, k);
        }
        CHECK_MSG(sp.n == k, "case %zu: %zu pieces, expected %zu", c, sp.n, k);
        nx_pretok_free(&p);
        nx_pretok_scratch_free(&ps);
    }
    CHECK(nx_pretok_init(&p, "no-such-pre", NX_VOCAB_BPE, &im, &cs, &err) == NX_ERR_UNSUPPORTED);
    /* a 2 MB run of spaces and one of letters do not hit regex limits */
    size_t big = 2u << 20;
    char *s = malloc(big);
    CHECK(nx_pretok_init(&p, "qwen2", NX_VOCAB_BPE, &im, &cs, &err) == NX_OK);
    memset(s, ' ', big);
    CHECK(nx_pretok_split(&p, &ps, s, big, &sp, &err) == NX_OK);
    memset(s, 'a', big);
    CHECK(nx_pretok_split(&p, &ps, s, big, &sp, &err) == NX_OK);
    CHECK_EQ_INT(sp.n, 1);
    nx_pretok_free(&p);
    nx_pretok_scratch_free(&ps);
    free(s);
    free(sp.v);
}

/* SentencePiece: ▁-escaped pieces with scores, <0xNN> byte fallback, leading space */
static nx_tokenizer *make_spm(void) {
    static const char *toks[300];
    static int32_t types[300];
    static float scores[300];
    static char bytes[256][8];
    int n = 0;
    toks[n] = "<unk>"; types[n++] = NX_TOKEN_UNKNOWN;
    toks[n] = "<s>"; types[n++] = NX_TOKEN_CONTROL;
    toks[n] = "</s>"; types[n++] = NX_TOKEN_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[n] = bytes[b]; types[n++] = NX_TOKEN_BYTE;
    }
    const char *words[] = {"\xe2\x96\x81", "h", "e", "l", "o", "w", "r", "d", "\xe2\x96\x81h", "he", "ll", "llo", "hello",
                           "\xe2\x96\x81hello", "\xe2\x96\x81w", "or", "\xe2\x96\x81wor", "ld", "\xe2\x96\x81world", NULL};
    float sc[] = {-1, -2, -2, -2, -2, -2, -2, -2, -5, -3, -4, -6, -7, -8, -5, -5, -9, -6, -10};
    for (int i = 0; words[i]; i++) {
        toks[n] = words[i];
        types[n] = NX_TOKEN_NORMAL;
        scores[n++] = sc[i];
    }
    nx_tokenizer_desc d;
    nx_tokenizer_desc_init(&d);
    d.model = "llama";
    d.n_tokens = n;
    d.tokens = toks;
    d.types = types;
    d.scores = scores;
    nx_tokenizer *t = NULL;
    nx_error err = {0};
    if (nx_tokenizer_create(&d, &t, &err)) fprintf(stderr, "  create: %s\n", err.msg);
    return t;
}

static void test_spm(void) {
    nx_tokenizer *t = make_spm();
    if (!t) { CHECK(t != NULL); return; }
    int32_t ids[64];
    int32_t hello = nx_token_find(t, "\xe2\x96\x81hello", 8), world = nx_token_find(t, "\xe2\x96\x81world", 8);
    int n = encode(t, "hello world", 11, NX_TOK_ADD_SPECIAL, ids, 64);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[0], 1);          /* BOS (SPM default add_bos) */
    CHECK_EQ_INT(ids[1], hello);      /* leading space added */
    CHECK_EQ_INT(ids[2], world);
    /* an unknown character falls back to its UTF-8 bytes */
    n = encode(t, "h\xc3\xa9", 3, 0, ids, 64);
    CHECK_EQ_INT(n, 3);                                   /* "▁h" <0xC3> <0xA9> */
    CHECK_EQ_INT(ids[0], nx_token_find(t, "\xe2\x96\x81h", 4));
    CHECK_EQ_INT(ids[1], 3 + 0xC3);
    CHECK_EQ_INT(ids[2], 3 + 0xA9);
    /* decode drops the added leading space; invalid bytes round-trip through byte tokens */
    CHECK(roundtrip(t, "hello world", 11, 0, 0));
    CHECK(roundtrip(t, "x\xff\xfe y\xc3", 6, 0, 0));
    /* as in llama.cpp, the leading space is dropped only when no BOS precedes it */
    int32_t seq[] = {1, hello, world};
    char *out = NULL;
    size_t len = 0;
    nx_error err = {0};
    CHECK(nx_detokenize(t, seq, 3, NX_DETOK_REMOVE_SPECIAL, &out, &len, &err) == NX_OK);
    CHECK_STR(out, " hello world");
    free(out);
    CHECK(nx_detokenize(t, seq + 1, 2, 0, &out, &len, &err) == NX_OK);
    CHECK_STR(out, "hello world");
    free(out);
    nx_tokenizer_free(t);
}

static void test_gemma4_style(void) {
    static const char *toks[320];
    static int32_t types[320];
    static char bytes[256][8];
    int n = 0;
    toks[n] = "<pad>"; types[n++] = NX_TOKEN_CONTROL;
    toks[n] = "<eos>"; types[n++] = NX_TOKEN_CONTROL;
    toks[n] = "<bos>"; types[n++] = NX_TOKEN_CONTROL;
    toks[n] = "<unk>"; types[n++] = NX_TOKEN_UNKNOWN;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[n] = bytes[b]; types[n++] = NX_TOKEN_BYTE;
    }
    const char *words[] = {"a", "b", "\xe2\x96\x81", "\n", "\n\n", "ab", "b\xe2\x96\x81", "ab\xe2\x96\x81", "\xe2\x96\x81\xe2\x96\x81", NULL};
    for (int i = 0; words[i]; i++) { toks[n] = words[i]; types[n++] = NX_TOKEN_NORMAL; }
    toks[n] = "<start_of_turn>"; types[n++] = NX_TOKEN_CONTROL;
    const char *merges[] = {"a b", "b \xe2\x96\x81", "ab \xe2\x96\x81", "\n \n", "\xe2\x96\x81 \xe2\x96\x81"};
    nx_tokenizer_desc d;
    nx_tokenizer_desc_init(&d);
    d.model = "gemma4";
    d.n_tokens = n;
    d.tokens = toks;
    d.types = types;
    d.n_merges = 5;
    d.merges = merges;
    d.bos = 2; d.eos = 1; d.unk = 3; d.pad = 0;
    d.add_space_prefix = 0;
    nx_tokenizer *t = NULL;
    nx_error err = {0};
    CHECK(nx_tokenizer_create(&d, &t, &err) == NX_OK);
    if (!t) return;
    int32_t ab_ = nx_token_find(t, "ab\xe2\x96\x81", 5), sp2 = nx_token_find(t, "\xe2\x96\x81\xe2\x96\x81", 6);
    int32_t nl2 = nx_token_find(t, "\n\n", 2), a = nx_token_find(t, "a", 1);
    int32_t ids[64];
    int k = encode(t, "ab   a\n\nc", 9, NX_TOK_ADD_SPECIAL, ids, 64);
    /* <bos> "ab▁" "▁▁" "a" "\n\n" <0x63> */
    CHECK_EQ_INT(k, 6);
    CHECK_EQ_INT(ids[0], 2);
    CHECK_EQ_INT(ids[1], ab_);
    CHECK_EQ_INT(ids[2], sp2);
    CHECK_EQ_INT(ids[3], a);
    CHECK_EQ_INT(ids[4], nl2);
    CHECK_EQ_INT(ids[5], 4 + 'c');
    CHECK(nx_tokenizer_specials(t)->add_bos);
    CHECK(nx_token_is_eog(t, 1));
    CHECK(roundtrip(t, "ab   a\n\nc\xff\xe4\xbd\xa0", 13, 0, 0));
    k = encode(t, "<start_of_turn>a", 16, NX_TOK_PARSE_SPECIAL, ids, 64);
    CHECK_EQ_INT(k, 2);
    nx_tokenizer_free(t);
}

static void test_bad_vocab(void) {
    const char *toks[] = {"a", "b", "ab"};
    const char *bad_merges[] = {"ab"};
    nx_tokenizer_desc d;
    nx_tokenizer *t = NULL;
    nx_error err = {0};
    nx_tokenizer_desc_init(&d);
    d.model = "wordpiece";
    d.n_tokens = 3;
    d.tokens = toks;
    CHECK(nx_tokenizer_create(&d, &t, &err) == NX_ERR_UNSUPPORTED);
    d.model = "gpt2";
    d.pre = "qwen2";
    d.n_merges = 1;
    d.merges = bad_merges;
    CHECK(nx_tokenizer_create(&d, &t, &err) == NX_ERR_FORMAT);
    CHECK(strstr(err.msg, "merges[0]") != NULL);
    d.n_merges = 0;
    d.add_bos = 1;
    CHECK(nx_tokenizer_create(&d, &t, &err) == NX_ERR_FORMAT);
    d.add_bos = -1;
    d.n_tokens = 0;
    CHECK(nx_tokenizer_create(&d, &t, &err) == NX_ERR_FORMAT);
    CHECK(t == NULL);
}

static void test_utf8_assembler(void) {
    const char *text = "a\xe4\xbd\xa0\xe5\xa5\xbd\xf0\x9f\x98\x80z";   /* a 你 好 😀 z */
    size_t n = strlen(text);
    /* feed one byte at a time: output only ever holds whole characters */
    nx_utf8_asm a = {0};
    char out[64], buf[8];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = nx_utf8_asm_feed(&a, text + i, 1, buf);
        CHECK(nx_utf8_valid_len((unsigned char *)buf, k) == k || k == 0 || k > 4);
        memcpy(out + o, buf, k);
        o += k;
    }
    o += nx_utf8_asm_flush(&a, out + o);
    CHECK(o == n && !memcmp(out, text, n));
    /* a truncated character is held back, then flushed at the end: no byte lost */
    a.n = 0;
    size_t k = nx_utf8_asm_feed(&a, "x\xe4\xbd", 3, buf);
    CHECK_EQ_INT(k, 1);
    CHECK_EQ_INT(nx_utf8_asm_flush(&a, buf), 2);
    CHECK((unsigned char)buf[0] == 0xE4 && (unsigned char)buf[1] == 0xBD);
    /* bytes that can never become valid pass through at once */
    k = nx_utf8_asm_feed(&a, "\xff\x80" "b\xe4" "c", 5, buf);
    CHECK_EQ_INT(k, 5);
    CHECK_EQ_INT(a.n, 0);
    /* random streams: concatenated output == input */
    for (int iter = 0; iter < 200; iter++) {
        char in[64], got[200];
        size_t len = rnd() % 64, g = 0;
        for (size_t i = 0; i < len; i++) in[i] = (char)(rnd() & 1 ? rnd() : 0xE0 + rnd() % 16);
        nx_utf8_asm s = {0};
        for (size_t i = 0; i < len;) {
            size_t step = 1 + rnd() % 5;
            if (step > len - i) step = len - i;
            g += nx_utf8_asm_feed(&s, in + i, step, got + g);
            i += step;
        }
        g += nx_utf8_asm_flush(&s, got + g);
        CHECK(g == len && !memcmp(got, in, len));
    }
}

static void test_json_strings(void) {
    const char *j = " [\"a\\u0000b\", \"\\ud83d\\ude00\", \"\\n\\t\\\"\\\\\", \"\\udc00\", \"\"] ";
    nx_str_list l;
    nx_error err = {0};
    CHECK(nx_json_string_array(j, strlen(j), &l, &err) == NX_OK);
    CHECK_EQ_INT(l.n, 5);
    if (l.n == 5) {
        CHECK(l.len[0] == 3 && !memcmp(l.s[0], "a\0b", 3));
        CHECK(l.len[1] == 4 && !memcmp(l.s[1], "\xf0\x9f\x98\x80", 4));
        CHECK(l.len[2] == 4 && !memcmp(l.s[2], "\n\t\"\\", 4));
        CHECK(l.len[3] == 3 && !memcmp(l.s[3], "\xef\xbf\xbd", 3));
        CHECK(l.len[4] == 0);
    }
    nx_str_list_free(&l);
    const char *bad[] = {"", "[", "[\"a\"", "[\"a\" \"b\"]", "{\"a\":1}", "[\"\\x\"]", "[\"\\u12\"]", "[1]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(nx_json_string_array(bad[i], strlen(bad[i]), &l, &err) == NX_ERR_FORMAT, "case %zu", i);
        nx_str_list_free(&l);
    }
}

static void test_convert(void) {
    char dir[] = "/tmp/nx_tok_test_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0); return; }
    char tj[256], cfg[256], out[256];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(out, sizeof out, "%s/vocab.gguf", dir);
    /* a byte-level vocabulary: the needed bytes, two merges, added tokens, a gap at id 9 */
    FILE *f = fopen(tj, "w");
    fputs("{\"added_tokens\": [{\"id\": 10, \"content\": \"<|im_end|>\", \"special\": true},"
          " {\"id\": 11, \"content\": \"<think>\", \"special\": false}],"
          " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
          "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\"},"
          "{\"type\": \"ByteLevel\", \"use_regex\": false}]},"
          " \"model\": {\"type\": \"BPE\", \"byte_fallback\": false, \"vocab\": {\"h\": 0, \"i\": 1, \"\\u0120\": 2, \"hi\": 3, \"\\u0120hi\": 4,"
          " \"x\": 5, \"<\": 6, \">\": 7, \"|\": 8}, \"merges\": [[\"h\", \"i\"], \"\\u0120 hi\"]}}", f);
    fclose(f);
    f = fopen(cfg, "w");
    fputs("{\"add_bos_token\": false, \"eos_token\": \"<|im_end|>\", \"bos_token\": null, \"chat_template\": \"{{x}}\"}", f);
    fclose(f);
    nx_tok_convert_opts o = {.tokenizer_json = tj, .config_json = cfg, .out_path = out};
    nx_error err = {0};
    nx_status st = nx_tokenizer_convert(&o, &err);
    CHECK_MSG(st == NX_OK, "%s", err.msg);
    nx_tokenizer *t = NULL;
    if (!st) st = nx_tokenizer_load(out, &t, &err);
    CHECK_MSG(st == NX_OK, "%s", err.msg);
    if (t) {
        CHECK_STR(nx_tokenizer_pre(t), "qwen2");
        CHECK_EQ_INT(nx_tokenizer_n_vocab(t), 12);
        CHECK_EQ_INT(nx_token_get_type(t, 9), NX_TOKEN_UNUSED);
        CHECK_EQ_INT(nx_token_get_type(t, 10), NX_TOKEN_CONTROL);
        CHECK_EQ_INT(nx_token_get_type(t, 11), NX_TOKEN_USER_DEFINED);
        size_t len;
        const char *pad = nx_token_text(t, 9, &len);
        CHECK(len == 6 && !memcmp(pad, "[PAD9]", 6));
        CHECK_EQ_INT(nx_tokenizer_specials(t)->eos, 10);
        CHECK_EQ_INT(nx_tokenizer_specials(t)->bos, -1);
        int32_t ids[16];
        int n = encode(t, "hi hi<think><|im_end|>", 22, NX_TOK_PARSE_SPECIAL | NX_TOK_ADD_SPECIAL, ids, 16);
        CHECK_EQ_INT(n, 4);
        if (n == 4) { CHECK_EQ_INT(ids[0], 3); CHECK_EQ_INT(ids[1], 4); CHECK_EQ_INT(ids[2], 11); CHECK_EQ_INT(ids[3], 10); }
        nx_tokenizer_free(t);
    }
    /* an unknown pre-tokenizer is refused with a hint */
    f = fopen(tj, "w");
    fputs("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+\"}}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", f);
    fclose(f);
    CHECK(nx_tokenizer_convert(&o, &err) == NX_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "--pre") != NULL);
    f = fopen(tj, "w");
    fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [", f);
    fclose(f);
    CHECK(nx_tokenizer_convert(&o, &err) == NX_ERR_FORMAT);
    unlink(tj);
    unlink(cfg);
    unlink(out);
    rmdir(dir);
}

/* ----- golden vectors ----- */

static bool read_case(const char *name, char **text, int32_t *ids, int *n_ids) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/golden/%s/case.json", NX_SOURCE_DIR, name);
    char *buf = NULL;
    size_t len;
    nx_error err = {0};
    if (nx_read_file(path, 1 << 24, &buf, &len, &err) != NX_OK) return false;
    /* "prompt": {"text": "...", "token_ids": [...]} — the texts hold no quotes or escapes */
    char *p = strstr(buf, "\"prompt\"");
    char *tx = p ? strstr(p, "\"text\": \"") : NULL;
    char *ti = p ? strstr(p, "\"token_ids\": [") : NULL;
    if (!tx || !ti) { free(buf); return false; }
    tx += 9;
    char *end = strchr(tx, '"');
    *text = strndup(tx, (size_t)(end - tx));
    *n_ids = 0;
    for (char *q = ti + 14; *n_ids < 512;) {
        while (*q == ',' || *q == ' ' || *q == '\n' || *q == '\r' || *q == '\t') q++;
        char *e;
        long x = strtol(q, &e, 10);
        if (e == q) break;
        ids[(*n_ids)++] = (int32_t)x;
        q = e;
    }
    free(buf);
    return true;
}

static void check_golden(const char *name) {
    char *text = NULL;
    int32_t want[512];
    int n_want = 0;
    REQUIRE_MSG(read_case(name, &text, want, &n_want), "golden case %s missing or unreadable", name);
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/golden/%s/model.gguf", NX_SOURCE_DIR, name);
    nx_tokenizer *t = NULL;
    nx_error err = {0};
    if (nx_tokenizer_load(path, &t, &err) != NX_OK) { CHECK_MSG(0, "%s", err.msg); free(text); return; }
    int32_t got[512];
    int n = encode(t, text, strlen(text), NX_TOK_ADD_SPECIAL, got, 512);
    CHECK_EQ_INT(n, n_want);
    for (int i = 0; i < n && i < n_want; i++) CHECK_MSG(got[i] == want[i], "%s token %d: %d != %d", name, i, got[i], want[i]);
    char *out = NULL;
    size_t len;
    CHECK(nx_detokenize(t, want, (size_t)n_want, NX_DETOK_REMOVE_SPECIAL, &out, &len, &err) == NX_OK);
    CHECK_STR(out, text);
    free(out);
    nx_tokenizer_free(t);
    free(text);
}

static void test_golden_qwen35(void) { check_golden("qwen35-tiny"); }
static void test_golden_gemma4(void) { check_golden("gemma4-tiny"); }

static void test_heldout_qwen35_mtp(void) {
    char path[512], *text = NULL;
    size_t len;
    nx_error err = {0};
    snprintf(path, sizeof path, "%s/models/heldout.py.txt", NX_SOURCE_DIR);
    REQUIRE_MSG(nx_read_file(path, 1 << 24, &text, &len, &err) == NX_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/models/tiny-qwen35-mtp-q8_0.gguf", NX_SOURCE_DIR);
    nx_tokenizer *t = NULL;
    if (nx_tokenizer_load(path, &t, &err) != NX_OK) { CHECK_MSG(0, "%s", err.msg); free(text); return; }
    nx_token_vec v = {0};
    CHECK(nx_tokenize(t, text, len, NX_TOK_ADD_SPECIAL, &v, &err) == NX_OK);
    CHECK_EQ_INT(v.n, 2496);                       /* models/README.md */
    CHECK(roundtrip(t, text, len, 0, 0));
    const nx_tok_specials *sp = nx_tokenizer_specials(t);
    CHECK_EQ_INT(sp->eos, 4093);
    CHECK(!sp->add_bos);
    CHECK(nx_token_is_eog(t, 4093) && nx_token_is_eog(t, 4095));
    /* streaming decode through the assembler reproduces the text */
    char *out = malloc(len + 64), buf[256];
    size_t o = 0;
    nx_utf8_asm a = {0};
    for (size_t i = 0; i < v.n; i++) {
        size_t pl;
        const char *p = nx_token_piece(t, v.ids[i], false, &pl);
        if (pl + 4 > sizeof buf) { CHECK(0); break; }
        size_t k = nx_utf8_asm_feed(&a, p, pl, buf);
        memcpy(out + o, buf, k);
        o += k;
    }
    o += nx_utf8_asm_flush(&a, out + o);
    CHECK(o == len && !memcmp(out, text, len));
    /* throughput on ~1 MB of code (the same file repeated) */
    size_t reps = (1u << 20) / len + 1, big_len = reps * len;
    char *big = malloc(big_len);
    for (size_t r = 0; r < reps; r++) memcpy(big + r * len, text, len);
    v.n = 0;
    double t0 = now_s();
    CHECK(nx_tokenize(t, big, big_len, 0, &v, &err) == NX_OK);
    double dt = now_s() - t0;
    fprintf(stderr, "  1 MB of code: %zu tokens in %.3f s (%.1f MB/s)\n", v.n, dt, big_len / dt / 1e6);
    free(big);   /* timing is informational: tests never assert wall-clock times */
    free(out);
    nx_token_vec_free(&v);
    nx_tokenizer_free(t);
    free(text);
}

int main(void) {
    RUN(test_bytelevel_map);
    RUN(test_bpe_merges);
    RUN(test_bpe_random_roundtrip);
    RUN(test_special_tokens);
    RUN(test_pretok_regexes);
    RUN(test_spm);
    RUN(test_gemma4_style);
    RUN(test_bad_vocab);
    RUN(test_utf8_assembler);
    RUN(test_json_strings);
    RUN(test_convert);
    RUN(test_golden_qwen35);
    RUN(test_golden_gemma4);
    RUN(test_heldout_qwen35_mtp);
    return test_summary();
}
