/*
 * jinja_value.c — the engine's values: the arena they live in, strings, lists, dicts, and the
 * Python semantics templates rely on: truthiness, equality, ordering, str()/repr() text and
 * json.dumps (ensure_ascii=False) output, byte for byte as CPython writes them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/jinja_impl.h"

/* ===== Arena ===== */
struct jarena_chunk { jarena_chunk *next; size_t size, used; _Alignas(16) unsigned char data[]; };

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (a->failed || n > a->limit - a->used) { a->failed = true; return NULL; }
    jarena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t sz = n > 65536 ? n : 65536;
        c = malloc(sizeof *c + sz);
        if (!c) { a->failed = true; return NULL; }
        c->next = a->head; c->size = sz; c->used = 0;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void ja_free_all(jarena *a) {
    jarena_chunk *c = a->head;
    while (c) { jarena_chunk *nx = c->next; free(c); c = nx; }
    a->head = NULL; a->used = 0; a->failed = false;
}

/* ===== Strings, lists, dicts ===== */
jstr *js_new(jarena *a, const char *p, size_t n) {
    jstr *s = ja_alloc(a, sizeof *s + n + 1);
    if (!s) return NULL;
    s->len = n;
    if (n) memcpy(s->p, p, n);
    s->p[n] = 0;
    return s;
}

jv jv_str(jarena *a, const char *p, size_t n) {
    jv v = {0};
    jstr *s = js_new(a, p, n);
    if (!s) return v;
    v.t = JV_STR; v.u.s = s;
    return v;
}

jv jv_strz(jarena *a, const char *s) { return jv_str(a, s, strlen(s)); }

jv jv_list(jarena *a) {
    jv v = {0};
    jlist *l = ja_alloc(a, sizeof *l);
    if (!l) return v;
    v.t = JV_LIST; v.u.l = l;
    return v;
}

jv jv_dict(jarena *a) {
    jv v = {0};
    jdict *d = ja_alloc(a, sizeof *d);
    if (!d) return v;
    v.t = JV_DICT; v.u.d = d;
    return v;
}

bool jl_push(jarena *a, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = ja_alloc(a, cap * sizeof *nv);
        if (!nv) return false;
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv; l->cap = cap;
    }
    l->v[l->n++] = v;
    return true;
}

jv *jd_get(const jdict *d, jv k) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k)) return &d->v[i];
    return NULL;
}

jv *jd_getz(const jdict *d, const char *k) {
    size_t n = strlen(k);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == n && memcmp(d->k[i].u.s->p, k, n) == 0) return &d->v[i];
    return NULL;
}

bool jd_set(jarena *a, jdict *d, jv k, jv v) {
    jv *old = jd_get(d, k);
    if (old) { *old = v; return true; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = ja_alloc(a, cap * sizeof *nk), *nv = ja_alloc(a, cap * sizeof *nv);
        if (!nk || !nv) return false;
        if (d->n) { memcpy(nk, d->k, d->n * sizeof *nk); memcpy(nv, d->v, d->n * sizeof *nv); }
        d->k = nk; d->v = nv; d->cap = cap;
    }
    d->k[d->n] = k; d->v[d->n] = v; d->n++;
    return true;
}

/* ===== Python semantics ===== */
bool jv_is_str(jv v) { return v.t == JV_STR; }
bool jv_is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
double jv_num(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? v.u.b : 0; }

bool jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: case JV_NS: return v.u.d->n != 0;
    default: return true;
    }
}

bool jv_equal(jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
            return x == y;
        }
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++) if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT: case JV_NS:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jd_get(b.u.d, a.u.d->k[i]);
            if (!o || !jv_equal(a.u.d->v[i], *o)) return false;
        }
        return true;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_BUILTIN: return a.u.fn == b.u.fn;
    case JV_METHOD: return a.u.bm == b.u.bm;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

int jv_compare(jv a, jv b, bool *ok) {
    *ok = true;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
            return (x > y) - (x < y);
        }
        double x = jv_num(a), y = jv_num(b);
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->p, b.u.s->p, n);
        if (c) return c < 0 ? -1 : 1;
        return (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_compare(a.u.l->v[i], b.u.l->v[i], ok);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    *ok = false;
    return 0;
}

const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_LOOP: return "LoopContext";
    default: return "function";
    }
}

/* ===== Text ===== */
bool jb_put(jbuf *b, const char *p, size_t n) {
    if (b->failed) return false;
    if (n > b->limit - b->n) { b->failed = true; return false; }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np;
        if (b->a) {
            np = ja_alloc(b->a, cap);
            if (np && b->n) memcpy(np, b->p, b->n);
        } else np = realloc(b->p, cap);
        if (!np) { b->failed = true; return false; }
        b->p = np; b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}
void jb_free(jbuf *b) { if (!b->a) free(b->p); b->p = NULL; }
bool jb_putc(jbuf *b, char c) { return jb_put(b, &c, 1); }
bool jb_puts(jbuf *b, const char *s) { return jb_put(b, s, strlen(s)); }

/* Python's repr(float): the shortest digits that round-trip, fixed notation for exponents
 * -4..15, else d.ddde+XX. */
static bool put_float(jbuf *b, double f, bool json) {
    if (isnan(f)) return jb_puts(b, json ? "NaN" : "nan");
    if (isinf(f)) return jb_puts(b, f < 0 ? (json ? "-Infinity" : "-inf") : (json ? "Infinity" : "inf"));
    char tmp[64];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0, neg = 0;
    const char *p = tmp;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++) if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char o[64];
    int k = 0;
    if (neg) o[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            o[k++] = '0'; o[k++] = '.';
            for (int i = -1; i > exp; i--) o[k++] = '0';
            for (int i = 0; i < nd; i++) o[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) o[k++] = i < nd ? digits[i] : '0';
            o[k++] = '.';
            if (nd > exp + 1) for (int i = exp + 1; i < nd; i++) o[k++] = digits[i];
            else o[k++] = '0';
        }
    } else {
        o[k++] = digits[0];
        if (nd > 1) { o[k++] = '.'; for (int i = 1; i < nd; i++) o[k++] = digits[i]; }
        k += snprintf(o + k, sizeof o - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    return jb_put(b, o, (size_t)k);
}

static bool put_int(jbuf *b, int64_t i) {
    char t[32];
    int n = snprintf(t, sizeof t, "%lld", (long long)i);
    return jb_put(b, t, (size_t)n);
}

static bool repr_str(jbuf *b, const jstr *s) {
    bool has_sq = memchr(s->p, '\'', s->len) != NULL, has_dq = memchr(s->p, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_putc(b, q);
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->p[i];
        if (c == '\\') jb_puts(b, "\\\\");
        else if (c == (unsigned char)q) { jb_putc(b, '\\'); jb_putc(b, q); }
        else if (c == '\n') jb_puts(b, "\\n");
        else if (c == '\r') jb_puts(b, "\\r");
        else if (c == '\t') jb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) { char t[8]; snprintf(t, sizeof t, "\\x%02x", c); jb_puts(b, t); }
        else jb_putc(b, (char)c);
    }
    return jb_putc(b, q);
}

bool jv_repr(jbuf *b, jv v) {
    switch (v.t) {
    case JV_STR: return repr_str(b, v.u.s);
    case JV_LIST: {
        jb_putc(b, v.tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_puts(b, ", ");
            if (!jv_repr(b, v.u.l->v[i])) return false;
        }
        if (v.tuple && v.u.l->n == 1) jb_putc(b, ',');
        return jb_putc(b, v.tuple ? ')' : ']');
    }
    case JV_DICT: {
        jb_putc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jb_puts(b, ", ");
            jv_repr(b, v.u.d->k[i]);
            jb_puts(b, ": ");
            if (!jv_repr(b, v.u.d->v[i])) return false;
        }
        return jb_putc(b, '}');
    }
    default: return jv_to_text(b, v);
    }
}

bool jv_to_text(jbuf *b, jv v) {
    switch (v.t) {
    case JV_UNDEF: return true;
    case JV_NONE: return jb_puts(b, "None");
    case JV_BOOL: return jb_puts(b, v.u.b ? "True" : "False");
    case JV_INT: return put_int(b, v.u.i);
    case JV_FLOAT: return put_float(b, v.u.f, false);
    case JV_STR: return jb_put(b, v.u.s->p, v.u.s->len);
    case JV_LIST: case JV_DICT: return jv_repr(b, v);
    case JV_NS: return jb_puts(b, "<Namespace>");
    case JV_MACRO: return jb_puts(b, "<Macro>");
    case JV_LOOP: return jb_puts(b, "<LoopContext>");
    default: return jb_puts(b, "<built-in function>");
    }
}

static bool json_str(jbuf *b, const char *p, size_t n) {
    jb_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (c) {
        case '"': jb_puts(b, "\\\""); break;
        case '\\': jb_puts(b, "\\\\"); break;
        case '\n': jb_puts(b, "\\n"); break;
        case '\r': jb_puts(b, "\\r"); break;
        case '\t': jb_puts(b, "\\t"); break;
        case '\b': jb_puts(b, "\\b"); break;
        case '\f': jb_puts(b, "\\f"); break;
        default:
            if (c < 0x20) { char t[8]; snprintf(t, sizeof t, "\\u%04x", c); jb_puts(b, t); }
            else jb_putc(b, (char)c);
        }
    }
    return jb_putc(b, '"');
}

static void json_nl(jbuf *b, int indent, int level) {
    jb_putc(b, '\n');
    for (int i = 0; i < indent * level; i++) jb_putc(b, ' ');
}

static int key_cmp(const void *x, const void *y) {
    const jv *a = *(const jv *const *)x, *c = *(const jv *const *)y;
    bool ok;
    return jv_compare(*a, *c, &ok);
}

/* depth is the nesting level (for indentation); the caller bounds it through the input. */
bool jv_to_json(jbuf *b, jv v, int indent, const char *item_sep, const char *key_sep, bool sort_keys, int depth) {
    if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep) key_sep = ": ";
    if (depth > 512) return false;
    switch (v.t) {
    case JV_NONE: case JV_UNDEF: return jb_puts(b, "null");
    case JV_BOOL: return jb_puts(b, v.u.b ? "true" : "false");
    case JV_INT: return put_int(b, v.u.i);
    case JV_FLOAT: return put_float(b, v.u.f, true);
    case JV_STR: return json_str(b, v.u.s->p, v.u.s->len);
    case JV_LIST:
        if (!v.u.l->n) return jb_puts(b, "[]");
        jb_putc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_puts(b, item_sep);
            if (indent >= 0) json_nl(b, indent, depth + 1);
            if (!jv_to_json(b, v.u.l->v[i], indent, item_sep, key_sep, sort_keys, depth + 1)) return false;
        }
        if (indent >= 0) json_nl(b, indent, depth);
        return jb_putc(b, ']');
    case JV_DICT: case JV_NS: {
        const jdict *d = v.u.d;
        if (!d->n) return jb_puts(b, "{}");
        size_t *order = malloc(d->n * sizeof *order);
        const jv **keys = malloc(d->n * sizeof *keys);
        if (!order || !keys) { free(order); free(keys); return false; }
        for (size_t i = 0; i < d->n; i++) keys[i] = &d->k[i];
        if (sort_keys) qsort(keys, d->n, sizeof *keys, key_cmp);
        for (size_t i = 0; i < d->n; i++) order[i] = (size_t)(keys[i] - d->k);
        free(keys);
        bool ok = jb_putc(b, '{');
        for (size_t j = 0; ok && j < d->n; j++) {
            size_t i = order[j];
            if (j) jb_puts(b, item_sep);
            if (indent >= 0) json_nl(b, indent, depth + 1);
            jv k = d->k[i];
            if (k.t == JV_STR) json_str(b, k.u.s->p, k.u.s->len);
            else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                jb_putc(b, '"'); jv_to_json(b, k, -1, NULL, NULL, false, depth); jb_putc(b, '"');
            } else ok = false;
            jb_puts(b, key_sep);
            if (ok) ok = jv_to_json(b, d->v[i], indent, item_sep, key_sep, sort_keys, depth + 1);
        }
        free(order);
        if (!ok) return false;
        if (indent >= 0) json_nl(b, indent, depth);
        return jb_putc(b, '}');
    }
    default: return false;
    }
}

jv jv_from_cjson(jarena *a, const cJSON *j, int depth) {
    if (!j || depth > 512) return jv_none();
    if (cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* cJSON keeps no int/float distinction: whole numbers within int64 are ints */
        if (d == floor(d) && fabs(d) < 9.2e18) {
            /* a literal written with '.' or an exponent would be a float in Python; cJSON
             * loses that, so integral values become ints */
            return jv_int((int64_t)d);
        }
        return jv_float(d);
    }
    if (cJSON_IsString(j)) return jv_strz(a, j->valuestring ? j->valuestring : "");
    if (cJSON_IsArray(j)) {
        jv l = jv_list(a);
        if (l.t != JV_LIST) return l;
        for (const cJSON *c = j->child; c; c = c->next) jl_push(a, l.u.l, jv_from_cjson(a, c, depth + 1));
        return l;
    }
    if (cJSON_IsObject(j)) {
        jv d = jv_dict(a);
        if (d.t != JV_DICT) return d;
        for (const cJSON *c = j->child; c; c = c->next)
            jd_set(a, d.u.d, jv_strz(a, c->string ? c->string : ""), jv_from_cjson(a, c, depth + 1));
        return d;
    }
    return jv_none();
}

jv jv_stringify(jarena *a, jv v) {
    if (v.t == JV_STR) return v;
    jbuf b = { .limit = a->limit, .a = a };
    if (!jv_to_text(&b, v)) return jv_undef();
    jv s = jv_str(a, b.p ? b.p : "", b.n);
    return s;
}

/* ===== UTF-8 ===== */
size_t u8_len(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

size_t u8_off(const char *p, size_t n, size_t i) {
    size_t c = 0, k = 0;
    for (; k < n; k++) {
        if (((unsigned char)p[k] & 0xC0) != 0x80) {
            if (c == i) return k;
            c++;
        }
    }
    return n;
}
