/*
 * tokenizer_convert.c — Hugging Face tokenizer.json (+ tokenizer_config.json) -> vocab-only GGUF
 * with the `tokenizer.ggml.*` keys llama.cpp's convert_hf_to_gguf.py writes.
 *
 * Supported: model type "BPE". Without byte_fallback it is a byte-level ("gpt2") vocabulary
 * and the pre-tokenizer name is recognised from the regex text (qwen2, qwen35, llama-bpe,
 * gpt-2, deepseek-v3); with byte_fallback (Gemma 3/4 style, ▁ for spaces) it becomes a "gemma4"
 * vocabulary, or a "llama" (SentencePiece-score) one on request, with scores derived from the
 * merge ranks.
 * Token types follow llama.cpp's converter: ids with no token -> "[PADn]" UNUSED; added tokens
 * that are special (or look special: <|...|>, <unused...>, ...) -> CONTROL; other added tokens
 * -> USER_DEFINED (matched as text before BPE, as Hugging Face does); <0xNN> -> BYTE; the unk
 * token -> UNKNOWN; the rest NORMAL.
 * Must never: accept a file it cannot represent faithfully (unknown pre-tokenizer, NUL in
 * strings, conflicting ids) — those are errors naming the problem.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include "core/io.h"
#include "tokenizer_impl.h"

/* Pre-tokenizer regexes exactly as tokenizer.json files spell them. */
static const char HF_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char HF_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char HF_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char HF_DSV3_1[] = "\\p{N}{1,3}";
static const char HF_DSV3_2[] = "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+";
static const char HF_DSV3_3[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct pre_sig {
    const char *name;
    const char *re[4];      /* Split regexes in order; none + ByteLevel(use_regex) = gpt-2 */
    bool bytelevel_regex;
} pre_sig;

static const pre_sig PRE_SIGS[] = {
    {"qwen2", {HF_QWEN2}, false},
    {"qwen35", {HF_QWEN35}, false},
    {"llama-bpe", {HF_LLAMA3}, false},
    {"deepseek-v3", {HF_DSV3_1, HF_DSV3_2, HF_DSV3_3}, false},
    {"gpt-2", {NULL}, true},
};

#define MAX_REGEXES 8

typedef struct pre_found {
    const char *re[MAX_REGEXES];
    int n;
    bool bytelevel_regex;
} pre_found;

/* Collect Split regexes and ByteLevel(use_regex) from a pre_tokenizer node. */
static bool collect_pre(const cJSON *node, pre_found *pf) {
    if (!node || cJSON_IsNull(node)) return true;
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(node, "type"));
    if (!type) return false;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(node, "pretokenizers");
        for (const cJSON *c = list ? list->child : NULL; c; c = c->next)
            if (!collect_pre(c, pf)) return false;
        return true;
    }
    if (!strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(node, "pattern");
        const char *re = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pat, "Regex"));
        if (!re || pf->n >= MAX_REGEXES) return false;
        pf->re[pf->n++] = re;
        return true;
    }
    if (!strcmp(type, "ByteLevel")) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(node, "use_regex");
        if (!ur || cJSON_IsTrue(ur)) pf->bytelevel_regex = true;
        return true;
    }
    return false;   /* Metaspace, Whitespace, Digits, ...: not recognised */
}

static const char *detect_pre(const cJSON *pre_tok) {
    pre_found pf = {0};
    if (!collect_pre(pre_tok, &pf)) return NULL;
    for (size_t i = 0; i < sizeof PRE_SIGS / sizeof PRE_SIGS[0]; i++) {
        const pre_sig *s = &PRE_SIGS[i];
        int n = 0;
        while (n < 4 && s->re[n]) n++;
        if (n != pf.n || s->bytelevel_regex != pf.bytelevel_regex) continue;
        bool same = true;
        for (int k = 0; k < n && same; k++) same = !strcmp(s->re[k], pf.re[k]);
        if (same) return s->name;
    }
    return NULL;
}

/* llama.cpp's does_token_look_special() */
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]")) return true;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return true;
    if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>")) return true;
    if (n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>') return true;
    return false;
}

static bool is_byte_token(const char *s) {
    return strlen(s) == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' &&
           strchr("0123456789abcdefABCDEF", s[3]) && strchr("0123456789abcdefABCDEF", s[4]);
}

/* tokenizer_config.json value: "text", {"content": "text"} or null */
static const char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "content"));
    return NULL;
}

static nx_status read_json(const char *path, char **text, cJSON **root, nx_error *err) {
    size_t len = 0;
    nx_status st = nx_read_file(path, (size_t)1 << 30, text, &len, err);
    if (st) return st;
    /* cJSON ends strings at NUL; a token holding U+0000 could not be represented */
    if (strstr(*text, "\\u0000")) return nx_fail(err, NX_ERR_UNSUPPORTED, "%s: strings containing U+0000 are not supported", path);
    *root = cJSON_ParseWithLength(*text, len);
    if (!*root) return nx_fail(err, NX_ERR_FORMAT, "%s: not valid JSON (near byte %zu)", path,
                               (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - *text : 0));
    return NX_OK;
}

nx_status nx_tokenizer_convert(const nx_tok_convert_opts *o, nx_error *err) {
    if (!o->out_path) return nx_fail(err, NX_ERR_INVALID_ARG, "convert: tokenizer.json and an output path are required");
    nx_gguf_writer *w = nx_gguf_writer_create();
    if (!w) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    nx_status st = nx_tokenizer_convert_kv(o, w, err);
    if (!st) st = nx_gguf_writer_write(w, o->out_path, err);
    nx_gguf_writer_free(w);
    return st;
}

nx_status nx_tokenizer_convert_kv(const nx_tok_convert_opts *o, nx_gguf_writer *w, nx_error *err) {
    nx_status st = NX_OK;
    char *tj_text = NULL, *cfg_text = NULL;
    cJSON *tj = NULL, *cfg = NULL;
    const char **tokens = NULL, **merges = NULL;
    char **owned = NULL;     /* strings we built (padding names, joined merges) */
    size_t n_owned = 0;
    int32_t *types = NULL;
    float *scores = NULL;
    uint8_t *added = NULL;
    nx_strmap map = {0};
    int32_t n = 0, nm = 0;

    if (!o->tokenizer_json) return nx_fail(err, NX_ERR_INVALID_ARG, "convert: tokenizer.json and an output path are required");
    if ((st = read_json(o->tokenizer_json, &tj_text, &tj, err))) goto done;
    if (o->config_json && (st = read_json(o->config_json, &cfg_text, &cfg, err))) goto done;

    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const char *mtype = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(model, "type"));
    if (!mtype || strcmp(mtype, "BPE")) {
        st = nx_fail(err, NX_ERR_UNSUPPORTED, "%s: model type '%s' is not supported (only BPE)", o->tokenizer_json, mtype ? mtype : "?");
        goto done;
    }
    bool byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    const char *kind = o->model ? o->model : (byte_fallback ? "gemma4" : "gpt2");
    if (strcmp(kind, "gpt2") && strcmp(kind, "gemma4") && strcmp(kind, "llama")) {
        st = nx_fail(err, NX_ERR_INVALID_ARG, "--model must be gpt2, gemma4 or llama (got '%s')", kind);
        goto done;
    }
    if (!strcmp(kind, "gpt2") == byte_fallback) {
        st = nx_fail(err, NX_ERR_UNSUPPORTED, "%s: a %s vocabulary cannot be written as model '%s'",
                     o->tokenizer_json, byte_fallback ? "byte-fallback (SentencePiece-style)" : "byte-level", kind);
        goto done;
    }
    const char *pre = NULL;
    if (!strcmp(kind, "gpt2")) {
        pre = o->pre ? o->pre : detect_pre(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"));
        if (!pre) {
            st = nx_fail(err, NX_ERR_UNSUPPORTED, "%s: pre-tokenizer not recognised (known: qwen2, qwen35, llama-bpe, gpt-2, deepseek-v3); "
                         "name it with --pre NAME", o->tokenizer_json);
            goto done;
        }
    }

    /* ids: vocab and added tokens */
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added_list = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
    if (!cJSON_IsObject(vocab)) { st = nx_fail(err, NX_ERR_FORMAT, "%s: model.vocab is not an object", o->tokenizer_json); goto done; }
    int64_t max_id = -1;
    for (const cJSON *c = vocab->child; c; c = c->next) {
        if (!cJSON_IsNumber(c) || c->valuedouble < 0 || c->valuedouble >= (1 << 24)) { st = nx_fail(err, NX_ERR_FORMAT, "%s: vocab entry '%s' has a bad id", o->tokenizer_json, c->string); goto done; }
        if (c->valueint > max_id) max_id = c->valueint;
    }
    for (const cJSON *a = added_list ? added_list->child : NULL; a; a = a->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) ||
            !cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "content"))) {
            st = nx_fail(err, NX_ERR_FORMAT, "%s: an added_tokens entry has no valid id/content", o->tokenizer_json);
            goto done;
        }
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (max_id < 0) { st = nx_fail(err, NX_ERR_FORMAT, "%s: empty vocabulary", o->tokenizer_json); goto done; }
    n = (int32_t)max_id + 1;
    if (o->n_vocab > 0 && o->n_vocab < n) {
        st = nx_fail(err, NX_ERR_FORMAT, "%s: token id %d is beyond the model's vocab_size %d", o->tokenizer_json, n - 1, o->n_vocab);
        goto done;
    }
    if (o->n_vocab > n) n = o->n_vocab;   /* llama.cpp pads to the config's vocab_size with [PADi] */
    tokens = calloc((size_t)n, sizeof *tokens);
    types = malloc((size_t)n * sizeof *types);
    scores = malloc((size_t)n * sizeof *scores);
    added = calloc((size_t)n, 1);
    owned = calloc((size_t)n + 1, sizeof *owned);
    if (!tokens || !types || !scores || !added || !owned) goto oom;
    for (const cJSON *c = vocab->child; c; c = c->next) {
        if (tokens[c->valueint] && strcmp(tokens[c->valueint], c->string)) {
            st = nx_fail(err, NX_ERR_FORMAT, "%s: id %d is used by two tokens", o->tokenizer_json, c->valueint);
            goto done;
        }
        tokens[c->valueint] = c->string;
    }
    for (const cJSON *a = added_list ? added_list->child : NULL; a; a = a->next) {
        int id = cJSON_GetObjectItemCaseSensitive(a, "id")->valueint;
        const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "content"));
        if (tokens[id] && strcmp(tokens[id], content)) {
            st = nx_fail(err, NX_ERR_FORMAT, "%s: added token '%s' reuses id %d of '%s'", o->tokenizer_json, content, id, tokens[id]);
            goto done;
        }
        tokens[id] = content;
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
        added[id] = (special || looks_special(content)) ? 2 : 1;
    }
    const char *unk_text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(model, "unk_token"));
    for (int32_t i = 0; i < n; i++) {
        scores[i] = !strcmp(kind, "gpt2") ? 0.0f : -1000.0f;
        if (!tokens[i]) {
            char buf[32];
            snprintf(buf, sizeof buf, "[PAD%d]", i);
            owned[n_owned] = strdup(buf);
            if (!owned[n_owned]) goto oom;
            tokens[i] = owned[n_owned++];
            types[i] = NX_TOKEN_UNUSED;
        } else if (added[i] == 2) {
            types[i] = (unk_text && !strcmp(tokens[i], unk_text) && byte_fallback) ? NX_TOKEN_UNKNOWN : NX_TOKEN_CONTROL;
        } else if (added[i] == 1) {
            types[i] = NX_TOKEN_USER_DEFINED;
        } else if (byte_fallback && is_byte_token(tokens[i])) {
            types[i] = NX_TOKEN_BYTE;
        } else if (unk_text && byte_fallback && !strcmp(tokens[i], unk_text)) {
            types[i] = NX_TOKEN_UNKNOWN;
        } else {
            types[i] = NX_TOKEN_NORMAL;
        }
        for (const char *const *u = o->user_defined; u && *u; u++)
            if (!strcmp(tokens[i], *u)) types[i] = NX_TOKEN_USER_DEFINED;
        if (!nx_strmap_put(&map, tokens[i], strlen(tokens[i]), i, NULL)) goto oom;
    }

    /* merges: [a, b] pairs or "a b" strings -> "a b" */
    const cJSON *ml = cJSON_GetObjectItemCaseSensitive(model, "merges");
    nm = cJSON_GetArraySize(ml);
    merges = calloc((size_t)nm + 1, sizeof *merges);
    char **merge_owned = realloc(owned, ((size_t)n + (size_t)nm + 1) * sizeof *owned);
    if (!merges || !merge_owned) goto oom;
    owned = merge_owned;
    int32_t k = 0;
    for (const cJSON *m = ml ? ml->child : NULL; m; m = m->next, k++) {
        if (cJSON_IsString(m)) { merges[k] = m->valuestring; continue; }
        const char *a = cJSON_GetStringValue(cJSON_GetArrayItem(m, 0)), *b = cJSON_GetStringValue(cJSON_GetArrayItem(m, 1));
        if (!a || !b || cJSON_GetArraySize(m) != 2) { st = nx_fail(err, NX_ERR_FORMAT, "%s: merge %d is not a pair of strings", o->tokenizer_json, k); goto done; }
        if (strchr(a, ' ') || strchr(b, ' ')) {
            st = nx_fail(err, NX_ERR_UNSUPPORTED, "%s: merge %d has a space inside a symbol (GGUF merges are space-separated)", o->tokenizer_json, k);
            goto done;
        }
        size_t la = strlen(a), lb = strlen(b);
        char *s = malloc(la + lb + 2);
        if (!s) goto oom;
        memcpy(s, a, la);
        s[la] = ' ';
        memcpy(s + la + 1, b, lb + 1);
        owned[n_owned++] = s;
        merges[k] = s;
        /* SentencePiece scores for "llama": a token made by an earlier merge ranks higher */
        if (!strcmp(kind, "llama")) {
            s[la] = '\0';
            char *joined = malloc(la + lb + 1);
            if (!joined) { s[la] = ' '; goto oom; }
            memcpy(joined, a, la);
            memcpy(joined + la, b, lb + 1);
            int32_t id = nx_strmap_get(&map, joined, la + lb);
            free(joined);
            s[la] = ' ';
            if (id >= 0 && scores[id] == -1000.0f) scores[id] = -(float)k;
        }
    }

    /* special ids and flags from tokenizer_config.json (what llama.cpp's SpecialVocab reads) */
    if (o->arch) st = nx_gguf_set_str(w, "general.architecture", o->arch);
    if (!st && o->name) st = nx_gguf_set_str(w, "general.name", o->name);
    if (!st) st = nx_gguf_set_str(w, "tokenizer.ggml.model", kind);
    if (!st && pre) st = nx_gguf_set_str(w, "tokenizer.ggml.pre", pre);
    if (!st) st = nx_gguf_set_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, (uint64_t)n);
    if (!st) st = nx_gguf_set_arr(w, "tokenizer.ggml.token_type", NX_GGUF_I32, types, (uint64_t)n);
    if (!st && strcmp(kind, "gpt2")) st = nx_gguf_set_arr(w, "tokenizer.ggml.scores", NX_GGUF_F32, scores, (uint64_t)n);
    if (!st && strcmp(kind, "llama")) st = nx_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, (uint64_t)nm);
    if (st) { nx_fail(err, st, "building the GGUF metadata failed"); goto done; }
    static const struct { const char *cfg_key, *gguf_key; } SPECIALS[] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"}, {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"}, {"sep_token", "tokenizer.ggml.seperator_token_id"},
        {"pad_token", "tokenizer.ggml.padding_token_id"}, {"mask_token", "tokenizer.ggml.mask_token_id"},
    };
    for (size_t i = 0; i < sizeof SPECIALS / sizeof SPECIALS[0]; i++) {
        const char *text = cfg ? config_token(cfg, SPECIALS[i].cfg_key) : NULL;
        if (!text && !strcmp(SPECIALS[i].cfg_key, "unk_token")) text = unk_text;
        if (!text) continue;
        int32_t id = nx_strmap_get(&map, text, strlen(text));
        if (id < 0) continue;
        if ((st = nx_gguf_set_u32(w, SPECIALS[i].gguf_key, (uint32_t)id))) goto wfail;
    }
    if (cfg) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
        if (cJSON_IsBool(v) && strcmp(kind, "gemma4") && (st = nx_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(v)))) goto wfail;
        v = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
        if (cJSON_IsBool(v) && (st = nx_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", cJSON_IsTrue(v)))) goto wfail;
        const char *tmpl = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"));
        if (tmpl && (st = nx_gguf_set_str(w, "tokenizer.chat_template", tmpl))) goto wfail;
    }
    if (strcmp(kind, "gpt2")) {
        /* Gemma: no leading space (no Prepend normalizer), BOS always (llama.cpp's Gemma 4 converter) */
        if ((st = nx_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", false))) goto wfail;
        if (!strcmp(kind, "gemma4") && (st = nx_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", true))) goto wfail;
    }
    goto done;
wfail:
    nx_fail(err, st, "building the GGUF metadata failed");
    goto done;
oom:
    st = nx_fail(err, NX_ERR_NOMEM, "out of memory converting %s", o->tokenizer_json);
done:
    for (size_t i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(tokens);
    free(merges);
    free(types);
    free(scores);
    free(added);
    nx_strmap_free(&map);
    cJSON_Delete(tj);
    cJSON_Delete(cfg);
    free(tj_text);
    free(cfg_text);
    return st;
}
