/*
 * tokenizer.c — the tokenizer object: vocabulary tables, special tokens (ids, end-of-generation
 * set, text matching), the encode driver that splits special-token text from plain text, and
 * decoding (pieces, whole-sequence detokenize, streaming UTF-8 assembly).
 *
 * Promises: a built tokenizer is immutable and thread-safe to use; all input bytes are
 * accepted; every table index is checked at build time so encode/decode never index out of
 * range. The kind-specific algorithms live in tokenizer_bpe.c, tokenizer_spm.c and
 * tokenizer_pretok.c.
 * Must never: print, exit, or keep global state.
 */
#include "tokenizer_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"

/* ===== small helpers ===== */

uint32_t nx_tok_hash(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

bool nx_strmap_reserve(nx_strmap *m, size_t n) {
    size_t want = 16;
    while (want < 2 * n) want *= 2;
    if (want <= m->cap) return true;
    nx_strmap_slot *slots = calloc(want, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = m->slots[i].hash & (want - 1);
        while (slots[j].key) j = (j + 1) & (want - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = want;
    return true;
}

int32_t nx_strmap_get(const nx_strmap *m, const char *key, size_t len) {
    if (!m->cap || len > UINT32_MAX) return -1;
    uint32_t h = nx_tok_hash(key, len);
    for (size_t j = h & (m->cap - 1); m->slots[j].key; j = (j + 1) & (m->cap - 1)) {
        const nx_strmap_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s->val;
    }
    return -1;
}

bool nx_strmap_put(nx_strmap *m, const char *key, size_t len, int32_t val, int32_t *existing) {
    int32_t old = nx_strmap_get(m, key, len);
    if (existing) *existing = old;
    if (old >= 0) return true;
    if (!nx_strmap_reserve(m, m->count + 1)) return false;
    uint32_t h = nx_tok_hash(key, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].key) j = (j + 1) & (m->cap - 1);
    /* an empty key still needs a non-NULL marker */
    m->slots[j].key = key ? key : "";
    m->slots[j].len = (uint32_t)len;
    m->slots[j].hash = h;
    m->slots[j].val = val;
    m->count++;
    return true;
}

void nx_strmap_free(nx_strmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

bool nx_token_vec_push(nx_token_vec *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *ni = realloc(v->ids, cap * sizeof *ni);
        if (!ni) return false;
        v->ids = ni;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return true;
}

void nx_token_vec_free(nx_token_vec *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

/* ===== UTF-8 and the GPT-2 byte map ===== */

size_t nx_utf8_valid_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned char b = s[0];
    if (b < 0x80) return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 2;
    else if (b >= 0xE0 && b <= 0xEF) { need = 3; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { need = 4; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < need || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < need; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return need;
}

size_t nx_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2: printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves; the other 68
 * bytes map, in byte order, to U+0100 upwards. */
static bool bytelevel_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t nx_bytelevel_cp(unsigned char b) {
    if (bytelevel_printable(b)) return b;
    uint32_t k = 0;
    for (unsigned i = 0; i < b; i++)
        if (!bytelevel_printable(i)) k++;
    return 256 + k;
}

int nx_bytelevel_byte(uint32_t cp) {
    if (cp < 256) return bytelevel_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = cp - 256;
    for (unsigned i = 0; i < 256; i++)
        if (!bytelevel_printable(i) && k-- == 0) return (int)i;
    return -1;
}

/* ===== building ===== */

void nx_tokenizer_desc_init(nx_tokenizer_desc *d) {
    memset(d, 0, sizeof *d);
    int32_t *ids[] = {&d->bos, &d->eos, &d->eot, &d->eom, &d->unk, &d->sep, &d->pad, &d->mask,
                      &d->fim_pre, &d->fim_suf, &d->fim_mid, &d->fim_pad, &d->fim_rep, &d->fim_sep};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) *ids[i] = -2;
    d->add_bos = d->add_eos = d->add_space_prefix = -1;
}

static int32_t find_cstr(const nx_tokenizer *t, const char *s) {
    return nx_strmap_get(&t->tok_map, s, strlen(s));
}

/* First token (in list order) present in the vocabulary, or -1. */
static int32_t first_present(nx_tokenizer *t, const char *const *names) {
    for (size_t i = 0; names[i]; i++) {
        int32_t id = find_cstr(t, names[i]);
        if (id >= 0) return id;
    }
    return -1;
}

static bool eog_add(nx_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_tokens) return true;
    for (int32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    int32_t *ne = realloc(t->eog, (size_t)(t->n_eog + 1) * sizeof *ne);
    if (!ne) return false;
    t->eog = ne;
    t->eog[t->n_eog++] = id;
    return true;
}

static nx_status detect_specials(nx_tokenizer *t, nx_error *err) {
    /* EOT / EOM / FIM by text when the file does not name them (llama.cpp's lists) */
    static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
        "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "<end_of_utterance>", NULL};
    static const char *const eom_names[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>",
        "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
    static const char *const fim_suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>",
        "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
    static const char *const fim_mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>",
        "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
    static const char *const fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
    static const char *const fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
    static const char *const fim_sep[] = {"<|file_sep|>", NULL};
    struct { int32_t *id; const char *const *names; } auto_ids[] = {
        {&t->sp.eot, eot_names}, {&t->sp.eom, eom_names}, {&t->sp.fim_pre, fim_pre},
        {&t->sp.fim_suf, fim_suf}, {&t->sp.fim_mid, fim_mid}, {&t->sp.fim_pad, fim_pad},
        {&t->sp.fim_rep, fim_rep}, {&t->sp.fim_sep, fim_sep},
    };
    for (size_t i = 0; i < sizeof auto_ids / sizeof auto_ids[0]; i++) {
        if (*auto_ids[i].id >= 0) continue;
        *auto_ids[i].id = first_present(t, auto_ids[i].names);
    }

    /* end-of-generation set */
    static const char *const eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
        "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
        "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", NULL};
    bool has_return = find_cstr(t, "<|return|>") >= 0, has_call = find_cstr(t, "<|call|>") >= 0 || find_cstr(t, "<|calls|>") >= 0;
    bool has_flush = find_cstr(t, "<|flush|>") >= 0, has_tool_response = find_cstr(t, "<|tool_response>") >= 0;
    for (size_t i = 0; eog_names[i]; i++) {
        int32_t id = find_cstr(t, eog_names[i]);
        if (id < 0) continue;
        /* llama.cpp: with <|return|>/<|call|> (or <|calls|>/<|flush|>) "<|end|>" is not EOG;
         * with <|tool_response> (gemma4) "</s>" is an ordinary token */
        if (!strcmp(eog_names[i], "<|end|>") && ((has_return && has_call) || (has_call && has_flush))) continue;
        if (!strcmp(eog_names[i], "</s>") && has_tool_response) continue;
        /* llama.cpp also turns such NORMAL tokens into CONTROL ones; nextn keeps the file's
         * types (so "</s>" in Qwen's vocabulary stays ordinary text, as in Hugging Face) and
         * only takes non-NORMAL tokens as end-of-generation by their text */
        if (t->types[id] == NX_TOKEN_NORMAL) continue;
        if (!eog_add(t, id)) goto oom;
    }
    if (!eog_add(t, t->sp.fim_pad) || !eog_add(t, t->sp.fim_rep) || !eog_add(t, t->sp.fim_sep) ||
        !eog_add(t, t->sp.eos) || !eog_add(t, t->sp.eot) || !eog_add(t, t->sp.eom))
        goto oom;
    return NX_OK;
oom:
    return nx_fail(err, NX_ERR_NOMEM, "out of memory building the special-token tables");
}

/* ----- special-token trie ----- */

static int32_t trie_new_node(nx_tokenizer *t, unsigned char byte) {
    if (t->n_trie == t->cap_trie) {
        int32_t cap = t->cap_trie ? t->cap_trie * 2 : 256;
        nx_trie_node *nn = realloc(t->trie, (size_t)cap * sizeof *nn);
        if (!nn) return -1;
        t->trie = nn;
        t->cap_trie = cap;
    }
    nx_trie_node *n = &t->trie[t->n_trie];
    n->first_child = n->next_sibling = n->token = -1;
    n->byte = byte;
    return t->n_trie++;
}

static int32_t trie_child(const nx_tokenizer *t, int32_t node, unsigned char b) {
    for (int32_t c = t->trie[node].first_child; c >= 0; c = t->trie[c].next_sibling)
        if (t->trie[c].byte == b) return c;
    return -1;
}

static bool trie_insert(nx_tokenizer *t, const char *s, size_t len, int32_t id) {
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t c = trie_child(t, node, b);
        if (c < 0) {
            c = trie_new_node(t, b);
            if (c < 0) return false;
            t->trie[c].next_sibling = t->trie[node].first_child;
            t->trie[node].first_child = c;
        }
        node = c;
    }
    if (t->trie[node].token < 0) t->trie[node].token = id;
    return true;
}

static bool is_matchable(nx_token_type ty) {
    return ty == NX_TOKEN_CONTROL || ty == NX_TOKEN_USER_DEFINED || ty == NX_TOKEN_UNKNOWN;
}

static nx_status build_trie(nx_tokenizer *t, nx_error *err) {
    if (trie_new_node(t, 0) < 0) goto oom;
    for (int32_t id = 0; id < t->n_tokens; id++) {
        if (!is_matchable((nx_token_type)t->types[id]) || t->text_len[id] == 0) continue;
        if (t->types[id] == NX_TOKEN_USER_DEFINED) t->has_user_defined = true;
        t->first_byte[(unsigned char)t->text_pool[t->text_off[id]]] = true;
        if (!trie_insert(t, t->text_pool + t->text_off[id], t->text_len[id], id)) goto oom;
    }
    return NX_OK;
oom:
    return nx_fail(err, NX_ERR_NOMEM, "out of memory building the special-token trie");
}

/* ----- pieces ----- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* <0xNN> -> NN, else -1 */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int h = hexval(s[3]), l = hexval(s[4]);
    return (h < 0 || l < 0) ? -1 : h * 16 + l;
}

/* Decoded bytes of token id into out (room for 4 * text_len); returns the length. */
static size_t render_piece(const nx_tokenizer *t, int32_t id, char *out) {
    const char *s = t->text_pool + t->text_off[id];
    size_t n = t->text_len[id], o = 0;
    switch ((nx_token_type)t->types[id]) {
    case NX_TOKEN_CONTROL: case NX_TOKEN_UNKNOWN:
        memcpy(out, s, n);
        return n;
    case NX_TOKEN_USER_DEFINED:
        /* ▁-escaped vocabularies decode user-defined tokens like normal ones (Hugging Face runs
         * its decoder over added tokens too: Gemma's "▁▁▁▁" is four spaces) */
        if (t->kind == NX_VOCAB_BPE) { memcpy(out, s, n); return n; }
        break;
    case NX_TOKEN_BYTE: {
        int b = parse_byte_token(s, n);
        if (b >= 0) { out[0] = (char)b; return 1; }
        memcpy(out, s, n);
        return n;
    }
    case NX_TOKEN_NORMAL:
        break;
    default:
        return 0;     /* unused / undefined tokens render as nothing (llama.cpp) */
    }
    if (t->kind == NX_VOCAB_BPE) {
        for (size_t i = 0; i < n;) {
            size_t L = nx_utf8_valid_len((const unsigned char *)s + i, n - i);
            if (L == 0) { out[o++] = s[i++]; continue; }
            uint32_t cp = (unsigned char)s[i];
            if (L == 2) cp = ((cp & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F);
            int b = (L <= 2 && cp < 324) ? t->bl_byte[cp] : -1;
            if (b >= 0) out[o++] = (char)b;
            else { memcpy(out + o, s + i, L); o += L; }
            i += L;
        }
        return o;
    }
    /* SPM / gemma4: ▁ (E2 96 81) -> ' ' */
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && (unsigned char)s[i] == 0xE2 && (unsigned char)s[i + 1] == 0x96 && (unsigned char)s[i + 2] == 0x81) {
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = s[i++];
        }
    }
    return o;
}

static nx_status build_pieces(nx_tokenizer *t, nx_error *err) {
    size_t total = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) total += t->text_len[i];
    t->piece_pool = malloc(total + 1);
    t->piece_off = malloc((size_t)t->n_tokens * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)t->n_tokens * sizeof *t->piece_len);
    if (!t->piece_pool || !t->piece_off || !t->piece_len)
        return nx_fail(err, NX_ERR_NOMEM, "out of memory for token pieces");
    /* every rendering is at most as long as the token text (▁ -> ' ' and byte-level chars shrink) */
    size_t o = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        t->piece_off[i] = (uint32_t)o;
        t->piece_len[i] = (uint32_t)render_piece(t, i, t->piece_pool + o);
        o += t->piece_len[i];
    }
    return NX_OK;
}

static int32_t pick_id(int32_t given, int32_t dflt, int32_t n_tokens) {
    int32_t id = given == -2 ? dflt : given;
    return (id >= 0 && id < n_tokens) ? id : -1;
}

nx_status nx_tokenizer_create(const nx_tokenizer_desc *d, nx_tokenizer **out, nx_error *err) {
    *out = NULL;
    if (!d->model) return nx_fail(err, NX_ERR_FORMAT, "tokenizer.ggml.model is missing");
    if (d->n_tokens <= 0 || !d->tokens) return nx_fail(err, NX_ERR_FORMAT, "tokenizer.ggml.tokens is missing or empty");
    if (d->n_tokens > (1 << 26)) return nx_fail(err, NX_ERR_RANGE, "vocabulary of %d tokens is too large", d->n_tokens);
    nx_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    nx_status st = NX_OK;
    if (!strcmp(d->model, "gpt2")) t->kind = NX_VOCAB_BPE;
    else if (!strcmp(d->model, "llama")) t->kind = NX_VOCAB_SPM;
    else if (!strcmp(d->model, "gemma4")) t->kind = NX_VOCAB_GEMMA4;
    else { st = nx_fail(err, NX_ERR_UNSUPPORTED, "unsupported tokenizer model '%s' (tokenizer.ggml.model)", d->model); goto fail; }
    snprintf(t->pre, sizeof t->pre, "%s", d->pre ? d->pre : "");
    t->n_tokens = d->n_tokens;
    int32_t n = d->n_tokens;

    /* token texts */
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
        if (len > (1u << 20)) { st = nx_fail(err, NX_ERR_RANGE, "token %d is %zu bytes long", i, len); goto fail; }
        total += len;
        if (total > UINT32_MAX / 4) { st = nx_fail(err, NX_ERR_RANGE, "token texts are too large"); goto fail; }
    }
    t->text_pool = malloc(total + 1);
    t->text_off = malloc((size_t)n * sizeof *t->text_off);
    t->text_len = malloc((size_t)n * sizeof *t->text_len);
    t->types = malloc((size_t)n);
    t->scores = calloc((size_t)n, sizeof *t->scores);
    if (!t->text_pool || !t->text_off || !t->text_len || !t->types || !t->scores || !nx_strmap_reserve(&t->tok_map, (size_t)n))
        goto oom;
    size_t o = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
        memcpy(t->text_pool + o, d->tokens[i], len);
        t->text_off[i] = (uint32_t)o;
        t->text_len[i] = (uint32_t)len;
        o += len;
        int32_t ty = d->types ? d->types[i] : NX_TOKEN_NORMAL;
        t->types[i] = (ty >= NX_TOKEN_NORMAL && ty <= NX_TOKEN_BYTE) ? (uint8_t)ty : NX_TOKEN_UNDEFINED;
        if (d->scores) t->scores[i] = d->scores[i];
        if (len > t->max_token_len) t->max_token_len = len;
    }
    /* the map keys point into text_pool, which never moves again */
    for (int32_t i = 0; i < n; i++) {
        if (t->text_len[i] == 0) continue;
        int32_t old;
        if (!nx_strmap_put(&t->tok_map, t->text_pool + t->text_off[i], t->text_len[i], i, &old)) goto oom;
        if (old >= 0) NX_DEBUG("tokenizer: token %d duplicates token %d; the first one is used", i, old);
    }

    /* kind defaults (llama.cpp), then what the file says */
    int32_t dbos = -1, deos = -1, dunk = -1;
    bool add_bos = false, add_eos = false, add_space_prefix = false;
    if (t->kind == NX_VOCAB_SPM) {
        dbos = 1; deos = 2; dunk = 0;
        add_bos = true;
        add_space_prefix = true;
    } else if (t->kind == NX_VOCAB_GEMMA4) {
        add_bos = true;
    }
    t->escape_ws = t->kind != NX_VOCAB_BPE;
    st = nx_pretok_init(&t->pretok, t->pre, t->kind, &t->ignore_merges, &t->clean_spaces, err);
    if (st) goto fail;
    if (t->kind == NX_VOCAB_BPE && t->ignore_merges) add_bos = true;   /* llama3 family */

    nx_tok_specials *sp = &t->sp;
    sp->bos = pick_id(d->bos, dbos, n);
    sp->eos = pick_id(d->eos, deos, n);
    sp->unk = pick_id(d->unk, dunk, n);
    sp->eot = pick_id(d->eot, -1, n);
    sp->eom = pick_id(d->eom, -1, n);
    sp->sep = pick_id(d->sep, -1, n);
    sp->pad = pick_id(d->pad, -1, n);
    sp->mask = pick_id(d->mask, -1, n);
    sp->fim_pre = pick_id(d->fim_pre, -1, n);
    sp->fim_suf = pick_id(d->fim_suf, -1, n);
    sp->fim_mid = pick_id(d->fim_mid, -1, n);
    sp->fim_pad = pick_id(d->fim_pad, -1, n);
    sp->fim_rep = pick_id(d->fim_rep, -1, n);
    sp->fim_sep = pick_id(d->fim_sep, -1, n);
    sp->add_bos = d->add_bos >= 0 ? d->add_bos != 0 : add_bos;
    sp->add_eos = d->add_eos >= 0 ? d->add_eos != 0 : add_eos;
    sp->add_space_prefix = d->add_space_prefix >= 0 ? d->add_space_prefix != 0 : add_space_prefix;
    if (t->kind == NX_VOCAB_GEMMA4) sp->add_bos = true;   /* llama.cpp forces it for Gemma 4 */
    if (sp->add_bos && sp->bos < 0) { st = nx_fail(err, NX_ERR_FORMAT, "add_bos_token is true but there is no valid BOS token id"); goto fail; }
    if (sp->add_eos && sp->eos < 0) { st = nx_fail(err, NX_ERR_FORMAT, "add_eos_token is true but there is no valid EOS token id"); goto fail; }

    /* byte tables */
    for (int c = 0; c < 324; c++) t->bl_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        t->bl_cp[b] = (uint16_t)nx_bytelevel_cp((unsigned char)b);
        t->bl_byte[t->bl_cp[b]] = (int16_t)b;
    }
    for (int b = 0; b < 256; b++) {
        char buf[8];
        if (t->kind == NX_VOCAB_BPE) {
            size_t L = nx_utf8_encode(t->bl_cp[b], buf);
            t->byte_sym[b] = nx_strmap_get(&t->tok_map, buf, L);
            t->byte_tok[b] = -1;
        } else {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            t->byte_tok[b] = find_cstr(t, buf);
            t->byte_sym[b] = -1;
        }
    }
    if (t->kind != NX_VOCAB_SPM) {
        st = nx_bpe_build(t, d->merges, d->merge_lens, d->n_merges, err);
        if (st) goto fail;
    }
    st = detect_specials(t, err);
    if (!st) st = build_trie(t, err);
    if (!st) st = build_pieces(t, err);
    if (st) goto fail;

    /* newline token (llama.cpp: the byte token for SPM, the encoding of "\n" otherwise) */
    sp->nl = -1;
    if (t->kind == NX_VOCAB_SPM) {
        sp->nl = t->byte_tok['\n'] >= 0 ? t->byte_tok['\n'] : find_cstr(t, "\n");
    } else {
        nx_token_vec v = {0};
        nx_error e2 = {0};
        if (nx_tokenize(t, "\n", 1, 0, &v, &e2) == NX_OK && v.n > 0) sp->nl = v.ids[0];
        nx_token_vec_free(&v);
    }
    *out = t;
    return NX_OK;
oom:
    st = nx_fail(err, NX_ERR_NOMEM, "out of memory building a %d-token vocabulary", d->n_tokens);
fail:
    nx_tokenizer_free(t);
    return st;
}

void nx_tokenizer_free(nx_tokenizer *t) {
    if (!t) return;
    free(t->text_pool);
    free(t->text_off);
    free(t->text_len);
    free(t->types);
    free(t->scores);
    nx_strmap_free(&t->tok_map);
    free(t->piece_pool);
    free(t->piece_off);
    free(t->piece_len);
    free(t->merges.slots);
    nx_pretok_free(&t->pretok);
    free(t->eog);
    free(t->trie);
    free(t);
}

/* ===== GGUF ===== */

static nx_status gguf_str_array(const nx_gguf *g, const char *key, bool required, const char ***strs,
                                size_t **lens, int32_t *n, nx_error *err) {
    *strs = NULL;
    *lens = NULL;
    *n = 0;
    int64_t k = nx_gguf_find_key(g, key);
    if (k < 0) return required ? nx_fail(err, NX_ERR_FORMAT, "%s is missing", key) : NX_OK;
    if (nx_gguf_kv_type(g, k) != NX_GGUF_ARRAY || nx_gguf_arr_type(g, k) != NX_GGUF_STRING)
        return nx_fail(err, NX_ERR_FORMAT, "%s must be an array of strings", key);
    uint64_t cnt = nx_gguf_arr_n(g, k);
    if (cnt > (1u << 26)) return nx_fail(err, NX_ERR_RANGE, "%s has %llu entries (too many)", key, (unsigned long long)cnt);
    *strs = malloc((cnt ? cnt : 1) * sizeof **strs);
    *lens = malloc((cnt ? cnt : 1) * sizeof **lens);
    if (!*strs || !*lens) return nx_fail(err, NX_ERR_NOMEM, "out of memory reading %s", key);
    for (uint64_t j = 0; j < cnt; j++) {
        uint64_t len = 0;
        const char *s = nx_gguf_arr_str(g, k, j, &len);
        if (!s) return nx_fail(err, NX_ERR_FORMAT, "%s[%llu] is not a string", key, (unsigned long long)j);
        (*strs)[j] = s;
        (*lens)[j] = (size_t)len;
    }
    *n = (int32_t)cnt;
    return NX_OK;
}

nx_status nx_tokenizer_from_gguf(const nx_gguf *g, nx_tokenizer **out, nx_error *err) {
    *out = NULL;
    nx_tokenizer_desc d;
    nx_tokenizer_desc_init(&d);
    char model[64] = "", pre[64] = "";
    uint64_t len = 0;
    const char *s = nx_gguf_get_str(g, "tokenizer.ggml.model", &len);
    if (!s) return nx_fail(err, NX_ERR_FORMAT, "tokenizer.ggml.model is missing (the file has no tokenizer)");
    snprintf(model, sizeof model, "%.*s", (int)(len < 63 ? len : 63), s);
    s = nx_gguf_get_str(g, "tokenizer.ggml.pre", &len);
    if (s) snprintf(pre, sizeof pre, "%.*s", (int)(len < 63 ? len : 63), s);
    d.model = model;
    d.pre = pre;

    const char **toks = NULL, **merges = NULL;
    size_t *tok_lens = NULL, *merge_lens = NULL;
    int32_t *types = NULL;
    float *scores = NULL;
    int32_t n = 0, nm = 0;
    nx_status st = gguf_str_array(g, "tokenizer.ggml.tokens", true, &toks, &tok_lens, &n, err);
    if (!st) st = gguf_str_array(g, "tokenizer.ggml.merges", false, &merges, &merge_lens, &nm, err);
    if (st) goto done;
    if (!merges && (!strcmp(model, "gpt2") || !strcmp(model, "gemma4"))) {
        st = nx_fail(err, NX_ERR_FORMAT, "tokenizer.ggml.merges is missing (required for a %s vocabulary)", model);
        goto done;
    }
    d.n_tokens = n;
    d.tokens = toks;
    d.token_lens = tok_lens;
    d.n_merges = nm;
    d.merges = merges;
    d.merge_lens = merge_lens;

    int64_t k = nx_gguf_find_key(g, "tokenizer.ggml.token_type");
    if (k >= 0) {
        if (nx_gguf_kv_type(g, k) != NX_GGUF_ARRAY || nx_gguf_arr_n(g, k) < (uint64_t)n) {
            st = nx_fail(err, NX_ERR_FORMAT, "tokenizer.ggml.token_type must be an integer array with one entry per token");
            goto done;
        }
        types = malloc((size_t)n * sizeof *types);
        if (!types) { st = nx_fail(err, NX_ERR_NOMEM, "out of memory"); goto done; }
        for (int32_t i = 0; i < n; i++) {
            int64_t v;
            if (!nx_gguf_arr_int(g, k, (uint64_t)i, &v)) { st = nx_fail(err, NX_ERR_FORMAT, "tokenizer.ggml.token_type[%d] is not an integer", i); goto done; }
            types[i] = (v >= 0 && v <= 6) ? (int32_t)v : 0;
        }
        d.types = types;
    }
    k = nx_gguf_find_key(g, "tokenizer.ggml.scores");
    if (k >= 0) {
        if (nx_gguf_kv_type(g, k) != NX_GGUF_ARRAY || nx_gguf_arr_n(g, k) < (uint64_t)n) {
            st = nx_fail(err, NX_ERR_FORMAT, "tokenizer.ggml.scores must be a numeric array with one entry per token");
            goto done;
        }
        scores = malloc((size_t)n * sizeof *scores);
        if (!scores) { st = nx_fail(err, NX_ERR_NOMEM, "out of memory"); goto done; }
        for (int32_t i = 0; i < n; i++) {
            double v;
            if (!nx_gguf_arr_float(g, k, (uint64_t)i, &v)) {
                int64_t iv;
                if (!nx_gguf_arr_int(g, k, (uint64_t)i, &iv)) { st = nx_fail(err, NX_ERR_FORMAT, "tokenizer.ggml.scores[%d] is not a number", i); goto done; }
                v = (double)iv;
            }
            scores[i] = (float)v;
        }
        d.scores = scores;
    }
    struct { const char *key; int32_t *dst; } ids[] = {
        {"tokenizer.ggml.bos_token_id", &d.bos}, {"tokenizer.ggml.eos_token_id", &d.eos},
        {"tokenizer.ggml.eot_token_id", &d.eot}, {"tokenizer.ggml.eom_token_id", &d.eom},
        {"tokenizer.ggml.unknown_token_id", &d.unk}, {"tokenizer.ggml.seperator_token_id", &d.sep},
        {"tokenizer.ggml.padding_token_id", &d.pad}, {"tokenizer.ggml.mask_token_id", &d.mask},
        {"tokenizer.ggml.fim_pre_token_id", &d.fim_pre}, {"tokenizer.ggml.fim_suf_token_id", &d.fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &d.fim_mid}, {"tokenizer.ggml.fim_pad_token_id", &d.fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &d.fim_rep}, {"tokenizer.ggml.fim_sep_token_id", &d.fim_sep},
        {"tokenizer.ggml.prefix_token_id", &d.fim_pre}, {"tokenizer.ggml.suffix_token_id", &d.fim_suf},
        {"tokenizer.ggml.middle_token_id", &d.fim_mid},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int64_t v;
        if (*ids[i].dst == -2 && nx_gguf_get_int(g, ids[i].key, &v))
            *ids[i].dst = (v >= 0 && v < n) ? (int32_t)v : -2;   /* out of range: keep the default */
    }
    struct { const char *key; int *dst; } flags[] = {
        {"tokenizer.ggml.add_bos_token", &d.add_bos}, {"tokenizer.ggml.add_eos_token", &d.add_eos},
        {"tokenizer.ggml.add_space_prefix", &d.add_space_prefix},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        bool b;
        if (nx_gguf_get_bool(g, flags[i].key, &b)) *flags[i].dst = b ? 1 : 0;
    }
    st = nx_tokenizer_create(&d, out, err);
done:
    free(toks);
    free(tok_lens);
    free(merges);
    free(merge_lens);
    free(types);
    free(scores);
    return st;
}

nx_status nx_tokenizer_load(const char *path, nx_tokenizer **out, nx_error *err) {
    *out = NULL;
    nx_gguf *g = NULL;
    nx_status st = nx_gguf_open(path, &g, err);
    if (st) return st;
    st = nx_tokenizer_from_gguf(g, out, err);
    if (st) nx_error_prefix(err, "%s", path);
    nx_gguf_close(g);
    return st;
}

/* ===== accessors ===== */

nx_vocab_kind nx_tokenizer_kind(const nx_tokenizer *t) { return t->kind; }
const char *nx_tokenizer_pre(const nx_tokenizer *t) { return t->pre; }
int32_t nx_tokenizer_n_vocab(const nx_tokenizer *t) { return t->n_tokens; }
const nx_tok_specials *nx_tokenizer_specials(const nx_tokenizer *t) { return &t->sp; }

const char *nx_token_text(const nx_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_tokens) { if (len) *len = 0; return NULL; }
    if (len) *len = t->text_len[id];
    return t->text_pool + t->text_off[id];
}

nx_token_type nx_token_get_type(const nx_tokenizer *t, int32_t id) {
    return (id < 0 || id >= t->n_tokens) ? NX_TOKEN_UNDEFINED : (nx_token_type)t->types[id];
}

float nx_token_score(const nx_tokenizer *t, int32_t id) {
    return (id < 0 || id >= t->n_tokens) ? 0.0f : t->scores[id];
}

int32_t nx_token_find(const nx_tokenizer *t, const char *text, size_t len) {
    return nx_strmap_get(&t->tok_map, text, len);
}

bool nx_token_is_eog(const nx_tokenizer *t, int32_t id) {
    for (int32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

int32_t nx_tokenizer_eog_ids(const nx_tokenizer *t, const int32_t **ids) {
    if (ids) *ids = t->eog;
    return t->n_eog;
}

/* ===== encoding ===== */

/* Longest special token starting at text[pos] that the flags allow; returns its length or 0. */
static size_t match_special(const nx_tokenizer *t, const char *text, size_t len, size_t pos,
                            bool parse_special, int32_t *id) {
    if (!t->first_byte[(unsigned char)text[pos]]) return 0;
    int32_t node = 0;
    size_t best = 0;
    for (size_t i = pos; i < len; i++) {
        node = trie_child(t, node, (unsigned char)text[i]);
        if (node < 0) break;
        int32_t tok = t->trie[node].token;
        if (tok >= 0 && (parse_special || t->types[tok] == NX_TOKEN_USER_DEFINED)) {
            best = i + 1 - pos;
            *id = tok;
        }
    }
    return best;
}

typedef struct enc_state {
    nx_bpe_scratch *bpe;
    char *esc;          /* escaped copies of fragments (SPM / gemma4), never reused in a call */
    size_t esc_used, esc_cap;
    bool prev_special;  /* SPM: add the leading space after a special token / at the start */
} enc_state;

static nx_status encode_fragment(const nx_tokenizer *t, enc_state *es, const char *s, size_t n,
                                 nx_token_vec *out, nx_error *err) {
    if (t->kind == NX_VOCAB_BPE) return nx_bpe_encode(t, es->bpe, s, n, out, err);
    /* escape spaces as ▁ (and add SentencePiece's leading space) */
    char *dst = es->esc + es->esc_used;
    size_t o = 0;
    if (t->kind == NX_VOCAB_SPM && t->sp.add_space_prefix && es->prev_special) {
        memcpy(dst, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(dst + o, "\xe2\x96\x81", 3); o += 3; }
        else dst[o++] = s[i];
    }
    es->esc_used += o;
    es->prev_special = false;
    if (t->kind == NX_VOCAB_SPM) return nx_spm_encode(t, dst, o, out, err);
    return nx_bpe_encode(t, es->bpe, dst, o, out, err);
}

nx_status nx_tokenize(const nx_tokenizer *t, const char *text, size_t len, unsigned flags,
                      nx_token_vec *out, nx_error *err) {
    if (!text && len) return nx_fail(err, NX_ERR_INVALID_ARG, "nx_tokenize: NULL text");
    if (len > ((size_t)1 << 31)) return nx_fail(err, NX_ERR_RANGE, "text of %zu bytes is too long to tokenize (max 2 GiB)", len);
    nx_status st = NX_OK;
    bool parse_special = (flags & NX_TOK_PARSE_SPECIAL) != 0;
    bool add_special = (flags & NX_TOK_ADD_SPECIAL) != 0;
    enc_state es = {0};
    es.prev_special = true;
    if (t->kind != NX_VOCAB_SPM) {
        es.bpe = nx_bpe_scratch_new();
        if (!es.bpe) goto oom;
    }
    if (t->kind != NX_VOCAB_BPE && len) {
        es.esc_cap = 3 * len + 3 * (len / 2 + 1) + 16;   /* ▁ per space + one leading ▁ per fragment */
        es.esc = malloc(es.esc_cap);
        if (!es.esc) goto oom;
    }
    if (add_special && t->sp.add_bos && !nx_token_vec_push(out, t->sp.bos)) goto oom;
    bool any_special = parse_special || t->has_user_defined;
    size_t frag = 0;
    for (size_t pos = 0; any_special && pos < len;) {
        int32_t id = -1;
        size_t m = match_special(t, text, len, pos, parse_special, &id);
        if (!m) { pos++; continue; }
        if (pos > frag) {
            st = encode_fragment(t, &es, text + frag, pos - frag, out, err);
            if (st) goto done;
        }
        if (!nx_token_vec_push(out, id)) goto oom;
        es.prev_special = true;
        pos += m;
        frag = pos;
    }
    if (len > frag) {
        st = encode_fragment(t, &es, text + frag, len - frag, out, err);
        if (st) goto done;
    }
    if (add_special && t->sp.add_eos && !nx_token_vec_push(out, t->sp.eos)) goto oom;
    goto done;
oom:
    st = nx_fail(err, NX_ERR_NOMEM, "out of memory while tokenizing %zu bytes", len);
done:
    nx_bpe_scratch_free(es.bpe);
    free(es.esc);
    return st;
}

/* ===== decoding ===== */

const char *nx_token_piece(const nx_tokenizer *t, int32_t id, bool special, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->n_tokens) return "";
    nx_token_type ty = (nx_token_type)t->types[id];
    if (!special && (ty == NX_TOKEN_CONTROL || ty == NX_TOKEN_UNKNOWN)) return "";
    *len = t->piece_len[id];
    return t->piece_pool + t->piece_off[id];
}

/* llama.cpp's clean_up_tokenization_spaces passes, in place; returns the new length. */
static size_t clean_spaces(char *s, size_t n) {
    size_t o = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {            /* " ?", " !", " .", " ," */
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) o--;
        s[o++] = x;
    }
    n = o;
    o = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {            /* " ' " -> "'" */
        char x = s[i];
        if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
            o--;
            s[++i] = '\0';
        }
        s[o++] = x;
    }
    n = o;
    o = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {            /* " 's", " 'm", " 're", " 've" */
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = s[i + 1];
            if (x1 == 's' || x1 == 'm') o--;
            else if (i + 2 < n && ((x1 == 'r' && s[i + 2] == 'e') || (x1 == 'v' && s[i + 2] == 'e'))) o--;
        }
        s[o++] = x;
    }
    return o;
}

nx_status nx_detokenize(const nx_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        char **out, size_t *out_len, nx_error *err) {
    *out = NULL;
    *out_len = 0;
    bool special = (flags & NX_DETOK_SPECIAL) != 0;
    bool remove_space = t->sp.add_space_prefix;
    if ((flags & NX_DETOK_REMOVE_SPECIAL) && t->sp.add_bos && n > 0 && ids[0] == t->sp.bos) {
        remove_space = false;
        ids++;
        n--;
    }
    if ((flags & NX_DETOK_REMOVE_SPECIAL) && t->sp.add_eos && n > 0 && ids[n - 1] == t->sp.eos) n--;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t L;
        nx_token_piece(t, ids[i], special, &L);
        total += L;
    }
    char *buf = malloc(total + 1);
    if (!buf) return nx_fail(err, NX_ERR_NOMEM, "out of memory decoding %zu tokens", n);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t L;
        const char *p = nx_token_piece(t, ids[i], special, &L);
        if (remove_space && L > 0 && p[0] == ' ') { p++; L--; }
        remove_space = false;
        memcpy(buf + o, p, L);
        o += L;
    }
    if (t->clean_spaces) o = clean_spaces(buf, o);
    buf[o] = '\0';
    *out = buf;
    *out_len = o;
    return NX_OK;
}

/* ----- streaming UTF-8 ----- */

static unsigned utf8_need(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Can bytes s[0..k) (1 <= k < need) still grow into a valid character? */
static bool utf8_prefix_ok(const unsigned char *s, unsigned k) {
    if (k < 2) return true;                 /* a valid lead byte alone always can */
    unsigned char lo = 0x80, hi = 0xBF;
    if (s[0] == 0xE0) lo = 0xA0;
    if (s[0] == 0xED) hi = 0x9F;
    if (s[0] == 0xF0) lo = 0x90;
    if (s[0] == 0xF4) hi = 0x8F;
    if (s[1] < lo || s[1] > hi) return false;
    for (unsigned i = 2; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return false;
    return true;
}

size_t nx_utf8_asm_feed(nx_utf8_asm *a, const char *in, size_t n, char *out) {
    size_t o = 0, total = a->n + n, i = 0;
    unsigned char pend[4];
    unsigned pn = a->n;
    memcpy(pend, a->pend, pn);
    a->n = 0;
#define AT(k) ((k) < pn ? pend[k] : (unsigned char)in[(k) - pn])
    while (i < total) {
        unsigned char b = AT(i);
        unsigned need = utf8_need(b);
        if (need <= 1) { out[o++] = (char)b; i++; continue; }   /* ASCII or a byte that never starts a character */
        unsigned char cand[4];
        unsigned have = 0;
        while (have < need && i + have < total) { cand[have] = AT(i + have); have++; }
        if (have == need) {
            if (nx_utf8_valid_len(cand, need) == need) {
                memcpy(out + o, cand, need);
                o += need;
                i += need;
            } else {
                out[o++] = (char)b;     /* broken sequence: pass the lead byte through */
                i++;
            }
            continue;
        }
        /* incomplete at the end of the input: keep it if it can still become valid */
        if (utf8_prefix_ok(cand, have)) {
            memcpy(a->pend, cand, have);
            a->n = have;
            break;
        }
        out[o++] = (char)b;
        i++;
    }
#undef AT
    return o;
}

size_t nx_utf8_asm_flush(nx_utf8_asm *a, char *out) {
    size_t n = a->n;
    memcpy(out, a->pend, n);
    a->n = 0;
    return n;
}
