/*
 * tool_parse.c — generated text -> content / reasoning / tool calls (tool_parse.h).
 * Works on a copy: calls are cut out of the text as they are recognized; what is left is the
 * content.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/tool_parse.h"

typedef struct tbuf { char *p; size_t n; } tbuf;    /* a mutable working copy */

const char *nx_chat_find(const char *h, size_t hn, const char *needle) {
    size_t nn = strlen(needle);
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == needle[0] && memcmp(h + i, needle, nn) == 0) return h + i;
    return NULL;
}

char *nx_chat_dupn(const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}


/* remove [a, b) from the buffer */
static void cut(tbuf *t, size_t a, size_t b) {
    memmove(t->p + a, t->p + b, t->n - b + 1);
    t->n -= b - a;
}

static void trim_span(const char **p, size_t *n) {
    while (*n && isspace((unsigned char)**p)) { (*p)++; (*n)--; }
    while (*n && isspace((unsigned char)(*p)[*n - 1])) (*n)--;
}

/* ===== the tool's schema ===== */
static const cJSON *param_schema(const cJSON *tools, const char *fn, const char *param) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(name) || strcmp(name->valuestring, fn) != 0) continue;
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "parameters"), "properties");
        return cJSON_GetObjectItemCaseSensitive(props, param);
    }
    return NULL;
}

static bool schema_is_string(const cJSON *s) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(ty)) return strcmp(ty->valuestring, "string") == 0;
    if (cJSON_IsArray(ty)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ty) if (cJSON_IsString(e) && strcmp(e->valuestring, "string") != 0 && strcmp(e->valuestring, "null") != 0) return false;
        return true;
    }
    return true;   /* no type: keep the text */
}

/* ===== the calls found ===== */
typedef struct calls { cJSON *arr; int n; } calls;

/* args: an object (taken). Drops a duplicate of an earlier call. */
static bool add_call(calls *c, const char *name, size_t name_len, cJSON *args) {
    if (!c->arr && !(c->arr = cJSON_CreateArray())) { cJSON_Delete(args); return false; }
    char *a = cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    if (!a) return false;
    char *nm = nx_chat_dupn(name, name_len);
    if (!nm) { free(a); return false; }
    const cJSON *e;
    cJSON_ArrayForEach(e, c->arr) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "function");
        if (!strcmp(cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring, nm) &&
            !strcmp(cJSON_GetObjectItemCaseSensitive(f, "arguments")->valuestring, a)) { free(a); free(nm); return true; }
    }
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    char id[32];
    snprintf(id, sizeof id, "call_%d", ++c->n);
    cJSON_AddStringToObject(call, "id", id);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON_AddStringToObject(fn, "name", nm);
    cJSON_AddStringToObject(fn, "arguments", a);
    cJSON_AddItemToObject(call, "function", fn);
    cJSON_AddItemToArray(c->arr, call);
    free(a);
    free(nm);
    return true;
}

/* {"name": ..., "arguments"|"parameters": {...}} */
static bool json_call(calls *c, const char *p, size_t n, const cJSON *tools, bool need_known) {
    char *s = nx_chat_dupn(p, n);
    if (!s) return false;
    cJSON *j = cJSON_Parse(s);
    free(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    bool ok = cJSON_IsObject(j) && cJSON_IsString(name) && (cJSON_IsObject(args) || cJSON_IsString(args));
    if (ok && need_known) {
        ok = false;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
            if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name->valuestring)) ok = true;
        }
    }
    if (ok) {
        cJSON *a = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : cJSON_DetachItemViaPointer(j, args);
        if (!cJSON_IsObject(a)) { cJSON_Delete(a); ok = false; }
        else ok = add_call(c, name->valuestring, strlen(name->valuestring), a);
    }
    cJSON_Delete(j);
    return ok;
}

bool nx_chat_param_is_string(const cJSON *tools, const char *fn, const char *param) {
    const cJSON *ps = param_schema(tools, fn, param);
    return !ps || schema_is_string(ps);
}

cJSON *nx_chat_param_value(const cJSON *tools, const char *fn, const char *param, const char *val) {
    /* a non-string type: JSON when it parses as JSON, else the text */
    cJSON *jv = nx_chat_param_is_string(tools, fn, param) ? NULL : cJSON_Parse(val);
    return jv ? jv : cJSON_CreateString(val);
}

/* <function=NAME>\n<parameter=K>\nV\n</parameter>...</function>. Once NAME is read the call
 * cannot fail (a <parameter= left without its '>' ends the parameters): the streaming reader
 * (tool_args.c) announces the call at that point. */
static bool xml_call(calls *c, const char *p, size_t n, const cJSON *tools) {
    const char *end = p + n;
    if (n < 10 || memcmp(p, "<function=", 10) != 0) return false;
    const char *nm = p + 10, *gt = memchr(nm, '>', (size_t)(end - nm));
    if (!gt || gt == nm) return false;
    char *fname = nx_chat_dupn(nm, (size_t)(gt - nm));
    if (!fname) return false;
    cJSON *args = cJSON_CreateObject();
    const char *q = gt + 1;
    bool ok = args != NULL;
    for (;;) {
        const char *ps = nx_chat_find(q, (size_t)(end - q), "<parameter=");
        if (!ps) break;
        const char *kn = ps + 11, *kg = memchr(kn, '>', (size_t)(end - kn));
        if (!kg) break;
        const char *vs = kg + 1, *ve = nx_chat_find(vs, (size_t)(end - vs), "</parameter>");
        const char *next_p = nx_chat_find(vs, (size_t)(end - vs), "<parameter=");
        const char *fe = nx_chat_find(vs, (size_t)(end - vs), "</function>");
        if (!ve || (next_p && next_p < ve)) ve = next_p ? next_p : fe ? fe : end;   /* a missing close tag */
        const char *v = vs;
        size_t vl = (size_t)(ve - vs);
        if (vl && v[0] == '\n') { v++; vl--; }
        if (vl && v[vl - 1] == '\n') vl--;
        char *key = nx_chat_dupn(kn, (size_t)(kg - kn)), *val = nx_chat_dupn(v, vl);
        cJSON *jv = key && val ? nx_chat_param_value(tools, fname, key, val) : NULL;
        if (!jv) { free(key); free(val); ok = false; break; }
        cJSON_AddItemToObject(args, key, jv);
        free(key);
        free(val);
        q = ve;
        if (q < end && !strncmp(q, "</parameter>", 12)) q += 12;
    }
    if (ok) ok = add_call(c, fname, strlen(fname), args);
    else cJSON_Delete(args);
    free(fname);
    return ok;
}

/* ===== Gemma 4: call:NAME{k:<|"|>s<|"|>,n:1,o:{...},l:[...]} ===== */
static const char QUOTE[] = "<|\"|>";

static cJSON *g_value(const char **pp, const char *end, int depth);

static void g_ws(const char **pp, const char *end) { while (*pp < end && isspace((unsigned char)**pp)) (*pp)++; }

static char *g_string(const char **pp, const char *end) {
    const char *s = *pp + 5, *e = nx_chat_find(s, (size_t)(end - s), QUOTE);
    if (!e) return NULL;
    *pp = e + 5;
    return nx_chat_dupn(s, (size_t)(e - s));
}

static cJSON *g_value(const char **pp, const char *end, int depth) {
    if (depth > 64) return NULL;
    g_ws(pp, end);
    if (*pp >= end) return NULL;
    if ((size_t)(end - *pp) >= 5 && !memcmp(*pp, QUOTE, 5)) {
        char *s = g_string(pp, end);
        if (!s) return NULL;
        cJSON *v = cJSON_CreateString(s);
        free(s);
        return v;
    }
    if (**pp == '{' || **pp == '[') {
        bool obj = **pp == '{';
        char close = obj ? '}' : ']';
        cJSON *v = obj ? cJSON_CreateObject() : cJSON_CreateArray();
        (*pp)++;
        for (;;) {
            g_ws(pp, end);
            if (*pp >= end) { cJSON_Delete(v); return NULL; }
            if (**pp == close) { (*pp)++; return v; }
            char *key = NULL;
            if (obj) {
                if ((size_t)(end - *pp) >= 5 && !memcmp(*pp, QUOTE, 5)) key = g_string(pp, end);
                else {
                    const char *k = *pp;
                    while (*pp < end && **pp != ':') (*pp)++;
                    size_t kl = (size_t)(*pp - k);
                    trim_span(&k, &kl);
                    key = nx_chat_dupn(k, kl);
                }
                g_ws(pp, end);
                if (!key || *pp >= end || **pp != ':') { free(key); cJSON_Delete(v); return NULL; }
                (*pp)++;
            }
            cJSON *item = g_value(pp, end, depth + 1);
            if (!item) { free(key); cJSON_Delete(v); return NULL; }
            if (obj) cJSON_AddItemToObject(v, key, item);
            else cJSON_AddItemToArray(v, item);
            free(key);
            g_ws(pp, end);
            if (*pp < end && **pp == ',') (*pp)++;
        }
    }
    /* a bare number / true / false / null */
    const char *s = *pp;
    while (*pp < end && **pp != ',' && **pp != '}' && **pp != ']') (*pp)++;
    size_t n = (size_t)(*pp - s);
    trim_span(&s, &n);
    if (!n) return NULL;   /* nothing consumed (a stray '}' or ']'): not a value, and no endless loop */
    char *t = nx_chat_dupn(s, n);
    if (!t) return NULL;
    cJSON *v = cJSON_Parse(t);
    if (!v) v = cJSON_CreateString(t);
    free(t);
    return v;
}

static bool gemma_call(calls *c, const char *p, size_t n) {
    const char *end = p + n;
    if (n < 5 || memcmp(p, "call:", 5) != 0) return false;
    const char *nm = p + 5, *br = memchr(nm, '{', (size_t)(end - nm));
    if (!br || br == nm) return false;
    const char *q = br;
    cJSON *args = g_value(&q, end, 0);
    if (!cJSON_IsObject(args)) { cJSON_Delete(args); return false; }
    return add_call(c, nm, (size_t)(br - nm), args);
}

/* ===== the turn ===== */
const char *const nx_chat_end_markers[] = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|tool_response>", "<turn|>", "<end_of_turn>", "</s>", NULL,
};
#define END_MARKERS nx_chat_end_markers

size_t nx_chat_partial_len(const char *p, size_t n, const char *word) {
    size_t wl = strlen(word);
    for (size_t k = wl - 1 < n ? wl - 1 : n; k > 0; k--)
        if (!memcmp(p + n - k, word, k)) return k;
    return 0;
}

size_t nx_chat_trimmable_tail(const char *p, size_t n, bool final) {
    size_t e = n;
    if (!final) {
        size_t k = 0;
        for (int i = 0; END_MARKERS[i]; i++) {
            size_t m = nx_chat_partial_len(p, e, END_MARKERS[i]);
            if (m > k) k = m;
        }
        e -= k;
    }
    for (bool again = true; again;) {
        again = false;
        while (e && isspace((unsigned char)p[e - 1])) { e--; again = true; }
        for (int i = 0; END_MARKERS[i]; i++) {
            size_t k = strlen(END_MARKERS[i]);
            if (e >= k && !memcmp(p + e - k, END_MARKERS[i], k)) { e -= k; again = true; }
        }
    }
    return n - e;
}

static void strip_end(tbuf *t) {
    for (bool again = true; again;) {
        again = false;
        while (t->n && isspace((unsigned char)t->p[t->n - 1])) t->p[--t->n] = 0;
        for (int i = 0; END_MARKERS[i]; i++) {
            size_t k = strlen(END_MARKERS[i]);
            if (t->n >= k && !memcmp(t->p + t->n - k, END_MARKERS[i], k)) { t->n -= k; t->p[t->n] = 0; again = true; }
        }
    }
}

/* Cut every <open>BODY<close> whose body parses as a call; with a missing close the body runs
 * to the end. */
static bool cut_calls(tbuf *t, calls *c, const char *open, const char *close, const cJSON *tools, int kind) {
    size_t from = 0, ol = strlen(open), cl = strlen(close);
    for (;;) {
        const char *o = nx_chat_find(t->p + from, t->n - from, open);
        if (!o) return true;
        size_t a = (size_t)(o - t->p), bs = a + ol;
        const char *e = nx_chat_find(t->p + bs, t->n - bs, close);
        size_t be = e ? (size_t)(e - t->p) : t->n, b = e ? be + cl : t->n;
        const char *body = t->p + bs;
        size_t bn = be - bs;
        trim_span(&body, &bn);
        bool ok;
        if (kind == 3) ok = xml_call(c, t->p + a, b - a, tools);
        else if (kind == 2) ok = gemma_call(c, body, bn);
        else if (bn >= 10 && !memcmp(body, "<function=", 10)) ok = xml_call(c, body, bn, tools);
        else ok = json_call(c, body, bn, tools, false);
        if (!ok) { from = bs; continue; }
        /* Gemma's opener may be cut to "tool_call>" when "<|" ended the prompt */
        if (kind == 2 && a >= 2 && !memcmp(t->p + a - 2, "<|", 2)) a -= 2;
        cut(t, a, b);
        from = a;
    }
}

nx_status nx_chat_parse_output(const char *text, size_t len, const cJSON *tools, nx_chat_parsed *out, nx_error *err) {
    memset(out, 0, sizeof *out);
    tbuf t = { nx_chat_dupn(text, len), len };
    if (!t.p) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    strip_end(&t);
    /* reasoning */
    const char *ce = nx_chat_find(t.p, t.n, "</think>");
    const char *ch = nx_chat_find(t.p, t.n, "<channel|>");
    if (ce) {
        const char *cs = nx_chat_find(t.p, (size_t)(ce - t.p), "<think>");
        const char *r = cs ? cs + 7 : t.p;
        size_t rn = (size_t)(ce - r);
        trim_span(&r, &rn);
        if (rn) out->reasoning = nx_chat_dupn(r, rn);
        cut(&t, cs ? (size_t)(cs - t.p) : 0, (size_t)(ce - t.p) + 8);
    } else if (ch) {
        const char *cs = nx_chat_find(t.p, (size_t)(ch - t.p), "channel>thought");
        if (cs) {
            const char *r = cs + 15;
            size_t rn = (size_t)(ch - r);
            trim_span(&r, &rn);
            if (rn) out->reasoning = nx_chat_dupn(r, rn);
            size_t a = (size_t)(cs - t.p);
            if (a >= 2 && !memcmp(t.p + a - 2, "<|", 2)) a -= 2;
            cut(&t, a, (size_t)(ch - t.p) + 10);
        }
    }
    calls c = {0};
    cut_calls(&t, &c, "<tool_call>", "</tool_call>", tools, 1);
    cut_calls(&t, &c, "tool_call>", "<tool_call|>", tools, 2);
    if (!c.arr) {
        /* Qwen3-Coder sometimes leaves out <tool_call>; Llama writes bare JSON */
        cut_calls(&t, &c, "<function=", "</function>", tools, 3);
    }
    if (!c.arr) {
        const char *p = t.p;
        size_t n = t.n;
        trim_span(&p, &n);
        if (n > 14 && !memcmp(p, "<|python_tag|>", 14)) { p += 14; n -= 14; }
        if (n && p[0] == '{' && json_call(&c, p, n, tools, cJSON_GetArraySize(tools) > 0)) { t.n = 0; t.p[0] = 0; }
    }
    const char *p = t.p;
    size_t n = t.n;
    trim_span(&p, &n);
    out->content = nx_chat_dupn(p, n);
    out->tool_calls = c.arr;
    free(t.p);
    if (!out->content) { nx_chat_parsed_free(out); return nx_fail(err, NX_ERR_NOMEM, "out of memory"); }
    return NX_OK;
}

void nx_chat_parsed_free(nx_chat_parsed *p) {
    free(p->content);
    free(p->reasoning);
    cJSON_Delete(p->tool_calls);
    memset(p, 0, sizeof *p);
}
