/*
 * tokenizer_pretok.c — pre-tokenizer regexes, one set per `tokenizer.ggml.pre`, run with PCRE2
 * (UTF + Unicode properties, JIT when available).
 *
 * Promises: the split covers the whole input (text no regex matches becomes its own piece, as
 * Hugging Face's "Isolated" split does); invalid UTF-8 never breaks matching
 * (PCRE2_MATCH_INVALID_UTF: invalid bytes are never inside a match, so they end up in pieces of
 * their own). Several regexes are applied in turn, each one splitting the previous pieces.
 *
 * `\s` is written out as the Unicode White_Space set (what Hugging Face's Rust tokenizers and
 * llama.cpp use), because PCRE2's UCP `\s` also takes U+180E.
 * Must never: allocate per match, or hold state between calls.
 */
#include "tokenizer_impl.h"
#include <stdlib.h>
#include <string.h>

/* Unicode White_Space, as a character-class body. */
#define WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define S_ "[" WS "]"
#define NS "[^" WS "]"
/* English contractions, case-insensitive on the ASCII letters only (what "(?i:'s|...)" means
 * in the tokenizer.json files, spelled out as llama.cpp and transformers.js do). */
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

static const char RE_QWEN2[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    S_ "*[\\r\\n]+|" S_ "+(?!" NS ")|" S_ "+";
static const char RE_QWEN35[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    S_ "*[\\r\\n]+|" S_ "+(?!" NS ")|" S_ "+";
static const char RE_LLAMA3[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    S_ "*[\\r\\n]+|" S_ "+(?!" NS ")|" S_ "+";
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_ "+(?!" NS ")|" S_ "+";
static const char RE_GPT4O[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" CONTRACTIONS "?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" CONTRACTIONS "?|"
    "\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS ")|" S_ "+";
static const char RE_DSV3_NUM[] = "\\p{N}{1,3}";
static const char RE_DSV3_CJK[] = "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
static const char RE_DSV3_MAIN[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS ")|" S_ "+";
static const char RE_DIGIT[] = "\\p{N}";
static const char RE_DEFAULT_1[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char RE_DEFAULT_2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_ "+(?!" NS ")";
static const char RE_DEFAULT_3[] = "\\p{N}+";
static const char RE_DEFAULT_4[] = "[0-9][0-9][0-9]";
static const char RE_NEWLINES[] = "[^\\n]+|[\\n]+";

typedef struct pre_entry {
    const char *names;         /* '|'-separated tokenizer.ggml.pre values */
    const char *re[4];
    bool ignore_merges, clean_spaces;
} pre_entry;

/* llama.cpp's table of pre-tokenizer names (facts: which name uses which expression, and the
 * ignore_merges / clean_spaces flags). */
static const pre_entry PRE_TABLE[] = {
    {"qwen2|deepseek-r1-qwen|megrez", {RE_QWEN2}, false, false},
    {"stablelm2|hunyuan", {RE_QWEN2}, false, true},
    {"qwen35", {RE_QWEN35}, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", {RE_LLAMA3}, true, true},
    {"dbrx|smaug-bpe|glm4|chatglm-bpe", {RE_LLAMA3}, false, true},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|mpt|olmo|jais|exaone4|"
     "jina-v1-en|jina-v2-code|roberta-bpe|trillion|granite-docling", {RE_GPT2}, false, true},
    {"starcoder|refact|codeshell|exaone|minerva-7b", {RE_DIGIT, RE_GPT2}, false, true},
    {"command-r|smollm", {RE_DIGIT, RE_GPT2}, false, false},
    {"gpt-4o|llama4", {RE_GPT4O}, false, false},
    {"deepseek-v3|hunyuan-dense", {RE_DSV3_NUM, RE_DSV3_CJK, RE_DSV3_MAIN}, false, false},
    {"default", {RE_DEFAULT_1, RE_DEFAULT_2, RE_DEFAULT_3, RE_DEFAULT_4}, false, true},
};

static bool name_in_list(const char *name, const char *list) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static nx_status compile_one(nx_pretok *p, const char *pattern, nx_error *err) {
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(code, msg, sizeof msg);
        return nx_fail(err, NX_ERR_INTERNAL, "pre-tokenizer regex does not compile at %zu: %s",
                       (size_t)off, (const char *)msg);
    }
    /* JIT is an optimisation: without it the interpreter gives the same matches. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    p->re[p->n_re++] = re;
    return NX_OK;
}

nx_status nx_pretok_init(nx_pretok *p, const char *pre, nx_vocab_kind kind, bool *ignore_merges,
                         bool *clean_spaces, nx_error *err) {
    memset(p, 0, sizeof *p);
    *ignore_merges = false;
    *clean_spaces = false;
    const char *const *res = NULL;
    static const char *const newline_only[] = {RE_NEWLINES, NULL};
    if (kind == NX_VOCAB_SPM) return NX_OK;          /* SentencePiece runs on the whole text */
    if (kind == NX_VOCAB_GEMMA4) {
        /* Spaces are ▁ already; BPE runs on whole lines (llama.cpp's gemma4 split). Hugging
         * Face's clean-up is off for Gemma, so no space clean-up here either. */
        res = newline_only;
    } else {
        const char *name = (pre && *pre) ? pre : "default";
        for (size_t i = 0; i < sizeof PRE_TABLE / sizeof PRE_TABLE[0]; i++) {
            if (name_in_list(name, PRE_TABLE[i].names)) {
                res = PRE_TABLE[i].re;
                *ignore_merges = PRE_TABLE[i].ignore_merges;
                *clean_spaces = PRE_TABLE[i].clean_spaces;
                break;
            }
        }
        if (!res) return nx_fail(err, NX_ERR_UNSUPPORTED, "unknown pre-tokenizer type '%s' (tokenizer.ggml.pre)", name);
    }
    for (int i = 0; i < 4 && res[i]; i++) {
        nx_status st = compile_one(p, res[i], err);
        if (st) { nx_pretok_free(p); return st; }
    }
    return NX_OK;
}

void nx_pretok_free(nx_pretok *p) {
    for (int i = 0; i < p->n_re; i++) pcre2_code_free(p->re[i]);
    p->n_re = 0;
}

static bool span_push(nx_span_vec *v, size_t off, size_t len) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        nx_span *nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) return false;
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n].off = off;
    v->v[v->n].len = len;
    v->n++;
    return true;
}

/* Split one piece with one regex, appending the resulting pieces (absolute offsets) to out. */
/* The JIT's own 32 KiB stack suffices for ordinary text; a long run of one class can need
 * more, so a 1 MiB stack is made on first demand and the match retried (a 2 MiB run of spaces
 * matches with it). */
static bool grow_jit_stack(nx_pretok_scratch *s) {
    if (s->js) return false;
    s->mc = pcre2_match_context_create(NULL);
    s->js = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
    if (!s->mc || !s->js) return false;
    pcre2_jit_stack_assign(s->mc, NULL, s->js);
    return true;
}

static nx_status split_piece(const pcre2_code *re, pcre2_match_data *md, nx_pretok_scratch *sc,
                             const char *text, size_t base, size_t len, nx_span_vec *out, nx_error *err) {
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + base);
    size_t pos = 0, gap = 0;   /* [gap, pos) is unmatched text not yet emitted */
    while (pos < len) {
        int rc = pcre2_match(re, subj, len, pos, 0, md, sc->mc);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && grow_jit_stack(sc)) continue;
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return nx_fail(err, NX_ERR_RANGE, "pre-tokenizer regex failed near byte %zu: %s",
                           base + pos, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e <= s) {
            /* empty match: step over one character (it stays in the gap) */
            size_t step = nx_utf8_valid_len((const unsigned char *)subj + s, len - s);
            pos = s + (step ? step : 1);
            continue;
        }
        if (s > gap && !span_push(out, base + gap, s - gap)) goto oom;
        if (!span_push(out, base + s, e - s)) goto oom;
        pos = gap = e;
    }
    if (len > gap && !span_push(out, base + gap, len - gap)) goto oom;
    return NX_OK;
oom:
    return nx_fail(err, NX_ERR_NOMEM, "out of memory splitting text");
}

void nx_pretok_scratch_free(nx_pretok_scratch *s) {
    for (int i = 0; i < NX_PRETOK_MAX_RE; i++) {
        if (s->md[i]) pcre2_match_data_free(s->md[i]);
        s->md[i] = NULL;
    }
    if (s->js) pcre2_jit_stack_free(s->js);
    if (s->mc) pcre2_match_context_free(s->mc);
    free(s->tmp.v);
    memset(s, 0, sizeof *s);
}

nx_status nx_pretok_split(const nx_pretok *p, nx_pretok_scratch *s, const char *text, size_t len,
                          nx_span_vec *out, nx_error *err) {
    out->n = 0;
    if (len == 0) return NX_OK;
    if (!span_push(out, 0, len)) goto oom;
    if (p->n_re == 0) return NX_OK;
    for (int r = 0; r < p->n_re; r++) {
        if (!s->md[r] && !(s->md[r] = pcre2_match_data_create_from_pattern(p->re[r], NULL))) goto oom;
        nx_span_vec *src = out, *dst = &s->tmp;
        dst->n = 0;
        for (size_t i = 0; i < src->n; i++) {
            nx_status st = split_piece(p->re[r], s->md[r], s, text, src->v[i].off, src->v[i].len, dst, err);
            if (st) return st;
        }
        nx_span_vec t = *out; *out = s->tmp; s->tmp = t;
    }
    return NX_OK;
oom:
    return nx_fail(err, NX_ERR_NOMEM, "out of memory splitting text");
}
