/*
 * jinja_builtins.c — what a template can call: Jinja's filters and tests, the Python str /
 * list / dict methods templates use, and the globals Hugging Face adds (raise_exception,
 * strftime_now) beside Jinja's (namespace, range, dict). Mutating methods (list.append,
 * dict.update...) fail as in the immutable sandbox. Case mapping is ASCII-only.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/jinja_impl.h"

/* ===== Argument helpers ===== */
static jv arg(const jargs *g, int pos, const char *name) {
    for (int i = 0; i < g->nkw; i++) if (!strcmp(g->kwn[i], name)) return g->kwv[i];
    if (pos >= 0 && pos < g->npos) return g->pos[pos];
    return jv_undef();
}
static bool has(jv v) { return v.t != JV_UNDEF; }

static const jstr *need_str(jctx *x, const jnode *at, jv v, const char *what) {
    if (v.t != JV_STR) jx_fail(x, at, "%s expects a string, not '%s'", what, jv_type_name(v));
    return v.u.s;
}

static int64_t need_int(jctx *x, const jnode *at, jv v, const char *what) {
    if (v.t == JV_INT) return v.u.i;
    if (v.t == JV_BOOL) return v.u.b;
    jx_fail(x, at, "%s expects an integer, not '%s'", what, jv_type_name(v));
}

static jv mkstr(jctx *x, const jnode *at, const char *p, size_t n) {
    jv s = jv_str(x->a, p, n);
    if (s.t != JV_STR) jx_oom(x, at);
    return s;
}

static jv mklist(jctx *x, const jnode *at) {
    jv l = jv_list(x->a);
    if (l.t != JV_LIST) jx_oom(x, at);
    return l;
}

static void push(jctx *x, const jnode *at, jv l, jv v) { if (!jl_push(x->a, l.u.l, v)) jx_oom(x, at); }

static jv pair(jctx *x, const jnode *at, jv a, jv b) {
    jv t = mklist(x, at);
    t.tuple = true;
    push(x, at, t, a); push(x, at, t, b);
    return t;
}

/* A built string (arena buffer) as a value. */
static jv sb_done(jctx *x, const jnode *at, jbuf *b) {
    if (b->failed) { jb_free(b); jx_oom(x, at); }
    jv s = jv_str(x->a, b->p ? b->p : "", b->n);
    jb_free(b);
    if (s.t != JV_STR) jx_oom(x, at);
    return s;
}

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* ===== Sorting (stable; the comparator may fail through jx_fail) ===== */
typedef struct sort_ctx { jctx *x; const jnode *at; bool icase; bool reverse; } sort_ctx;

static jv lower_if(jctx *x, const jnode *at, jv v, bool icase) {
    if (!icase || v.t != JV_STR) return v;
    jv s = mkstr(x, at, v.u.s->p, v.u.s->len);
    for (size_t i = 0; i < s.u.s->len; i++) s.u.s->p[i] = (char)tolower((unsigned char)s.u.s->p[i]);
    return s;
}

static int cmp_keys(sort_ctx *c, jv a, jv b) {
    bool ok;
    int r = jv_compare(a, b, &ok);
    if (!ok) jx_fail(c->x, c->at, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
    return c->reverse ? -r : r;
}

/* sort items by keys (parallel arrays), stable */
static void msort(sort_ctx *c, jv *keys, jv *items, size_t n) {
    if (n < 2) return;
    jv *tk = ja_alloc(c->x->a, n * sizeof *tk), *ti = ja_alloc(c->x->a, n * sizeof *ti);
    if (!tk || !ti) jx_oom(c->x, c->at);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                jx_step(c->x, c->at);
                if (cmp_keys(c, keys[j], keys[i]) < 0) { tk[k] = keys[j]; ti[k++] = items[j++]; }
                else { tk[k] = keys[i]; ti[k++] = items[i++]; }
            }
            while (i < mid) { tk[k] = keys[i]; ti[k++] = items[i++]; }
            while (j < hi) { tk[k] = keys[j]; ti[k++] = items[j++]; }
        }
        memcpy(keys, tk, n * sizeof *keys);
        memcpy(items, ti, n * sizeof *items);
    }
}

/* item.a.b / item.0 (Jinja's make_attrgetter) */
static jv attr_path(jctx *x, const jnode *at, jv v, jv path) {
    if (path.t == JV_INT) return jx_getattr(x, at, v, path, true);
    const jstr *p = need_str(x, at, path, "attribute");
    size_t s = 0;
    while (s <= p->len) {
        size_t e = s;
        while (e < p->len && p->p[e] != '.') e++;
        jv key;
        bool digits = e > s;
        for (size_t i = s; i < e; i++) if (!isdigit((unsigned char)p->p[i])) digits = false;
        if (digits) key = jv_int(strtoll(p->p + s, NULL, 10));
        else key = mkstr(x, at, p->p + s, e - s);
        if (v.t == JV_UNDEF) return v;
        v = jx_getattr(x, at, v, key, true);
        s = e + 1;
    }
    return v;
}

/* ===== Tests ===== */
bool jx_test(jctx *x, const jnode *at, const char *name, jv v, const jargs *g) {
    jv a0 = arg(g, 0, "value");
    if (!strcmp(name, "defined")) return v.t != JV_UNDEF;
    if (!strcmp(name, "undefined")) return v.t == JV_UNDEF;
    if (!strcmp(name, "none")) return v.t == JV_NONE;
    if (!strcmp(name, "boolean")) return v.t == JV_BOOL;
    if (!strcmp(name, "true")) return v.t == JV_BOOL && v.u.b;
    if (!strcmp(name, "false")) return v.t == JV_BOOL && !v.u.b;
    if (!strcmp(name, "integer")) return v.t == JV_INT;
    if (!strcmp(name, "float")) return v.t == JV_FLOAT;
    if (!strcmp(name, "number")) return jv_is_num(v);
    if (!strcmp(name, "string")) return v.t == JV_STR;
    if (!strcmp(name, "mapping")) return v.t == JV_DICT;
    if (!strcmp(name, "iterable")) return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF || v.t == JV_LOOP;
    if (!strcmp(name, "sequence")) return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    if (!strcmp(name, "callable")) return v.t == JV_MACRO || v.t == JV_BUILTIN || v.t == JV_METHOD;
    if (!strcmp(name, "escaped")) return false;
    if (!strcmp(name, "sameas")) return v.t == a0.t && (v.t == JV_NONE || v.t == JV_UNDEF || jv_equal(v, a0));
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        int64_t i = need_int(x, at, v, name);
        return (i % 2 != 0) == (name[0] == 'o');
    }
    if (!strcmp(name, "divisibleby")) {
        int64_t d = need_int(x, at, a0, name);
        if (!d) jx_fail(x, at, "integer division or modulo by zero");
        return need_int(x, at, v, name) % d == 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        const jstr *s = need_str(x, at, v, name);
        bool cased = false;
        for (size_t i = 0; i < s->len; i++) {
            unsigned char c = (unsigned char)s->p[i];
            if (name[0] == 'l' ? isupper(c) : islower(c)) return false;
            if (isalpha(c)) cased = true;
        }
        return cased;
    }
    if (!strcmp(name, "in")) {
        if (a0.t == JV_STR) return v.t == JV_STR && (v.u.s->len == 0 || jmemmem(a0.u.s->p, a0.u.s->len, v.u.s->p, v.u.s->len));
        if (a0.t == JV_LIST) { for (size_t i = 0; i < a0.u.l->n; i++) if (jv_equal(a0.u.l->v[i], v)) return true; return false; }
        if (a0.t == JV_DICT) return jd_get(a0.u.d, v) != NULL;
        jx_fail(x, at, "argument of type '%s' is not iterable", jv_type_name(a0));
    }
    static const char *const cmp_names[][3] = {
        { "eq", "equalto", "==" }, { "ne", "!=", "" }, { "lt", "lessthan", "<" }, { "le", "<=", "" },
        { "gt", "greaterthan", ">" }, { "ge", ">=", "" },
    };
    for (int k = 0; k < 6; k++)
        for (int j = 0; j < 3; j++)
            if (cmp_names[k][j][0] && !strcmp(name, cmp_names[k][j])) {
                if (k == 0) return jv_equal(v, a0);
                if (k == 1) return !jv_equal(v, a0);
                bool ok;
                int c = jv_compare(v, a0, &ok);
                if (!ok) jx_fail(x, at, "cannot compare '%s' and '%s'", jv_type_name(v), jv_type_name(a0));
                return k == 2 ? c < 0 : k == 3 ? c <= 0 : k == 4 ? c > 0 : c >= 0;
            }
    jx_fail(x, at, "no test named '%s'", name);
}

/* ===== String operations shared by filters and methods ===== */
static jv str_case(jctx *x, const jnode *at, const jstr *s, int mode /* 0 lower 1 upper 2 capitalize 3 title */) {
    jv r = mkstr(x, at, s->p, s->len);
    char *p = r.u.s->p;
    bool word_start = true;
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (mode) {
        case 0: p[i] = (char)tolower(c); break;
        case 1: p[i] = (char)toupper(c); break;
        case 2: p[i] = (char)(i == 0 ? toupper(c) : tolower(c)); break;
        case 3:
            p[i] = (char)(word_start ? toupper(c) : tolower(c));
            word_start = !isalpha(c) && !(c & 0x80);
            break;
        }
    }
    return r;
}

static bool in_set(unsigned char c, const jstr *chars) {
    if (!chars) return is_ws(c);
    return memchr(chars->p, c, chars->len) != NULL;
}

static jv str_strip(jctx *x, const jnode *at, const jstr *s, jv chars, bool left, bool right) {
    const jstr *cs = chars.t == JV_STR ? chars.u.s : NULL;
    if (chars.t != JV_STR && chars.t != JV_UNDEF && chars.t != JV_NONE) jx_fail(x, at, "strip arg must be None or str");
    size_t b = 0, e = s->len;
    if (left) while (b < e && in_set((unsigned char)s->p[b], cs)) b++;
    if (right) while (e > b && in_set((unsigned char)s->p[e - 1], cs)) e--;
    return mkstr(x, at, s->p + b, e - b);
}

static jv str_replace(jctx *x, const jnode *at, const jstr *s, const jstr *old, const jstr *new, int64_t count) {
    jbuf b = { .limit = x->max_output, .a = x->a };
    size_t i = 0;
    int64_t done = 0;
    if (!old->len) {
        /* Python inserts `new` between every character and at both ends */
        for (size_t k = 0; k <= s->len; k++) {
            if ((count < 0 || done < count) && (k == s->len || ((unsigned char)s->p[k] & 0xC0) != 0x80)) { jb_put(&b, new->p, new->len); done++; }
            if (k < s->len) jb_putc(&b, s->p[k]);
            jx_step(x, at);
        }
        return sb_done(x, at, &b);
    }
    while (i < s->len) {
        const char *hit = (count < 0 || done < count) ? jmemmem(s->p + i, s->len - i, old->p, old->len) : NULL;
        if (!hit) { jb_put(&b, s->p + i, s->len - i); break; }
        jb_put(&b, s->p + i, (size_t)(hit - (s->p + i)));
        jb_put(&b, new->p, new->len);
        i = (size_t)(hit - s->p) + old->len;
        done++;
        jx_step(x, at);
    }
    return sb_done(x, at, &b);
}

static jv str_split(jctx *x, const jnode *at, const jstr *s, jv sep, int64_t maxsplit, bool from_right) {
    jv out = mklist(x, at);
    if (sep.t == JV_UNDEF || sep.t == JV_NONE) {
        /* runs of whitespace; no empty strings */
        jv parts = mklist(x, at);
        size_t i = 0;
        int64_t n = 0;
        if (!from_right) {
            while (i < s->len) {
                while (i < s->len && is_ws((unsigned char)s->p[i])) i++;
                if (i >= s->len) break;
                if (maxsplit >= 0 && n >= maxsplit) {
                    size_t e = s->len;
                    while (e > i && is_ws((unsigned char)s->p[e - 1])) e--;
                    push(x, at, parts, mkstr(x, at, s->p + i, e - i));
                    break;
                }
                size_t j = i;
                while (j < s->len && !is_ws((unsigned char)s->p[j])) j++;
                push(x, at, parts, mkstr(x, at, s->p + i, j - i));
                n++;
                i = j;
            }
            return parts;
        }
        size_t e = s->len;
        jv rev = mklist(x, at);
        while (e > 0) {
            while (e > 0 && is_ws((unsigned char)s->p[e - 1])) e--;
            if (!e) break;
            if (maxsplit >= 0 && n >= maxsplit) {
                size_t b = 0;
                while (b < e && is_ws((unsigned char)s->p[b])) b++;
                push(x, at, rev, mkstr(x, at, s->p + b, e - b));
                break;
            }
            size_t b = e;
            while (b > 0 && !is_ws((unsigned char)s->p[b - 1])) b--;
            push(x, at, rev, mkstr(x, at, s->p + b, e - b));
            n++;
            e = b;
        }
        for (size_t k = rev.u.l->n; k > 0; k--) push(x, at, out, rev.u.l->v[k - 1]);
        return out;
    }
    const jstr *sp = need_str(x, at, sep, "split");
    if (!sp->len) jx_fail(x, at, "empty separator");
    int64_t n = 0;
    if (!from_right) {
        size_t i = 0;
        for (;;) {
            jx_step(x, at);
            const char *hit = (maxsplit < 0 || n < maxsplit) ? jmemmem(s->p + i, s->len - i, sp->p, sp->len) : NULL;
            if (!hit) { push(x, at, out, mkstr(x, at, s->p + i, s->len - i)); break; }
            push(x, at, out, mkstr(x, at, s->p + i, (size_t)(hit - (s->p + i))));
            i = (size_t)(hit - s->p) + sp->len;
            n++;
        }
        return out;
    }
    jv rev = mklist(x, at);
    size_t e = s->len;
    for (;;) {
        jx_step(x, at);
        size_t hit = (size_t)-1;
        if ((maxsplit < 0 || n < maxsplit) && e >= sp->len)
            for (size_t k = e - sp->len + 1; k-- > 0;)
                if (memcmp(s->p + k, sp->p, sp->len) == 0) { hit = k; break; }
        if (hit == (size_t)-1) { push(x, at, rev, mkstr(x, at, s->p, e)); break; }
        push(x, at, rev, mkstr(x, at, s->p + hit + sp->len, e - hit - sp->len));
        e = hit;
        n++;
    }
    for (size_t k = rev.u.l->n; k > 0; k--) push(x, at, out, rev.u.l->v[k - 1]);
    return out;
}

static bool str_affix(jctx *x, const jnode *at, const jstr *s, jv affix, bool end) {
    if (affix.t == JV_LIST) {
        for (size_t i = 0; i < affix.u.l->n; i++) if (str_affix(x, at, s, affix.u.l->v[i], end)) return true;
        return false;
    }
    const jstr *a = need_str(x, at, affix, end ? "endswith" : "startswith");
    if (a->len > s->len) return false;
    return memcmp(end ? s->p + s->len - a->len : s->p, a->p, a->len) == 0;
}

/* Python's "{} {0} {name}".format(...), without format specs beyond an empty one */
static jv str_format(jctx *x, const jnode *at, const jstr *s, const jargs *g) {
    jbuf b = { .limit = x->max_output, .a = x->a };
    int auto_i = 0;
    for (size_t i = 0; i < s->len; i++) {
        char c = s->p[i];
        if (c == '{' && i + 1 < s->len && s->p[i + 1] == '{') { jb_putc(&b, '{'); i++; continue; }
        if (c == '}' && i + 1 < s->len && s->p[i + 1] == '}') { jb_putc(&b, '}'); i++; continue; }
        if (c != '{') { jb_putc(&b, c); continue; }
        size_t e = i + 1;
        while (e < s->len && s->p[e] != '}') e++;
        if (e >= s->len) { jb_free(&b); jx_fail(x, at, "Single '{' encountered in format string"); }
        char key[64];
        size_t kl = e - i - 1 < 63 ? e - i - 1 : 63;
        memcpy(key, s->p + i + 1, kl);
        key[kl] = 0;
        char *colon = strchr(key, ':');
        if (colon) *colon = 0;
        jv v;
        if (!key[0]) v = auto_i < g->npos ? g->pos[auto_i++] : jv_undef();
        else if (isdigit((unsigned char)key[0])) { int k = atoi(key); v = k < g->npos ? g->pos[k] : jv_undef(); }
        else v = arg(g, -1, key);
        if (v.t == JV_UNDEF) { jb_free(&b); jx_fail(x, at, "format: missing argument '%s'", key); }
        jv_to_text(&b, v);
        i = e;
    }
    return sb_done(x, at, &b);
}

/* Python's "%s" % args (the format filter): %s %r %d %i %f %% only */
static jv percent_format(jctx *x, const jnode *at, const jstr *s, const jargs *g) {
    jbuf b = { .limit = x->max_output, .a = x->a };
    int k = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->p[i] != '%' || i + 1 >= s->len) { jb_putc(&b, s->p[i]); continue; }
        char c = s->p[++i];
        if (c == '%') { jb_putc(&b, '%'); continue; }
        if (k >= g->npos) { jb_free(&b); jx_fail(x, at, "not enough arguments for format string"); }
        jv v = g->pos[k++];
        if (c == 's') jv_to_text(&b, v);
        else if (c == 'r') jv_repr(&b, v);
        else if ((c == 'd' || c == 'i') && jv_is_num(v)) { char t[32]; snprintf(t, sizeof t, "%lld", (long long)(v.t == JV_FLOAT ? (int64_t)v.u.f : v.t == JV_BOOL ? v.u.b : v.u.i)); jb_puts(&b, t); }
        else if (c == 'f' && jv_is_num(v)) { char t[64]; snprintf(t, sizeof t, "%f", jv_num(v)); jb_puts(&b, t); }
        else { jb_free(&b); jx_fail(x, at, "unsupported format character '%c'", c); }
    }
    return sb_done(x, at, &b);
}

jv jx_percent(jctx *x, const jnode *at, jv fmt, jv args) {
    jargs g = {0};
    if (args.t == JV_LIST && args.tuple) { g.pos = args.u.l->v; g.npos = (int)args.u.l->n; }
    else { g.pos = &args; g.npos = 1; }
    return percent_format(x, at, fmt.u.s, &g);
}

static int64_t str_find(const jstr *s, const jstr *sub, bool from_right) {
    if (sub->len > s->len) return -1;
    if (!from_right) {
        const char *h = sub->len ? jmemmem(s->p, s->len, sub->p, sub->len) : s->p;
        return h ? (int64_t)u8_len(s->p, (size_t)(h - s->p)) : -1;
    }
    for (size_t k = s->len - sub->len + 1; k-- > 0;)
        if (memcmp(s->p + k, sub->p, sub->len) == 0) return (int64_t)u8_len(s->p, k);
    return -1;
}

static int64_t str_count(const jstr *s, const jstr *sub) {
    if (!sub->len) return (int64_t)u8_len(s->p, s->len) + 1;
    int64_t n = 0;
    for (size_t i = 0; i + sub->len <= s->len;) {
        const char *h = jmemmem(s->p + i, s->len - i, sub->p, sub->len);
        if (!h) break;
        n++;
        i = (size_t)(h - s->p) + sub->len;
    }
    return n;
}

static jv join(jctx *x, const jnode *at, jv items, jv sep, jv attribute) {
    jv l = jx_list_of(x, at, items);
    const jstr *sp = sep.t == JV_STR ? sep.u.s : NULL;
    jbuf b = { .limit = x->max_output, .a = x->a };
    for (size_t i = 0; i < l.u.l->n; i++) {
        jx_step(x, at);
        if (i && sp) jb_put(&b, sp->p, sp->len);
        jv v = l.u.l->v[i];
        if (has(attribute)) v = attr_path(x, at, v, attribute);
        jv_to_text(&b, v);
    }
    return sb_done(x, at, &b);
}

/* ===== Methods ===== */
static const char *const STR_METHODS[] = {
    "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "replace", "upper", "lower",
    "title", "capitalize", "find", "rfind", "index", "count", "format", "join", "splitlines", "isdigit",
    "isalpha", "isalnum", "isspace", "isupper", "islower", NULL,
};
static const char *const LIST_METHODS[] = { "count", "index", "append", "extend", "pop", "insert", "remove", "sort", "reverse", "clear", NULL };
static const char *const DICT_METHODS[] = { "items", "keys", "values", "get", "copy", "pop", "update", "setdefault", "clear", "popitem", NULL };

static bool in_names(const char *const *names, const char *n) {
    for (int i = 0; names[i]; i++) if (!strcmp(names[i], n)) return true;
    return false;
}

bool jx_has_method(jv self, const char *name) {
    switch (self.t) {
    case JV_STR: return in_names(STR_METHODS, name);
    case JV_LIST: return in_names(LIST_METHODS, name);
    case JV_DICT: return in_names(DICT_METHODS, name);
    default: return false;
    }
}

static jv dict_items(jctx *x, const jnode *at, jv d, int which /* 0 items 1 keys 2 values */) {
    jv out = mklist(x, at);
    if (d.t == JV_UNDEF) return out;
    if (d.t != JV_DICT && d.t != JV_NS) jx_fail(x, at, "'%s' object has no attribute 'items'", jv_type_name(d));
    for (size_t i = 0; i < d.u.d->n; i++)
        push(x, at, out, which == 0 ? pair(x, at, d.u.d->k[i], d.u.d->v[i]) : which == 1 ? d.u.d->k[i] : d.u.d->v[i]);
    return out;
}

jv jx_method(jctx *x, const jnode *at, jv self, const char *name, const jargs *g) {
    if (self.t == JV_LOOP && !strcmp(name, "cycle")) {
        if (!g->npos) jx_fail(x, at, "no items for cycling given");
        return g->pos[self.u.loop->i % (size_t)g->npos];
    }
    if (self.t == JV_DICT) {
        if (!strcmp(name, "items")) return dict_items(x, at, self, 0);
        if (!strcmp(name, "keys")) return dict_items(x, at, self, 1);
        if (!strcmp(name, "values")) return dict_items(x, at, self, 2);
        if (!strcmp(name, "copy")) return self;
        if (!strcmp(name, "get")) {
            jv *v = jd_get(self.u.d, arg(g, 0, "key"));
            jv d = arg(g, 1, "default");
            return v ? *v : has(d) ? d : jv_none();
        }
        jx_fail(x, at, "access to attribute '%s' of 'dict' object is unsafe", name);
    }
    if (self.t == JV_LIST) {
        jv a0 = arg(g, 0, "value");
        if (!strcmp(name, "count")) {
            int64_t n = 0;
            for (size_t i = 0; i < self.u.l->n; i++) n += jv_equal(self.u.l->v[i], a0);
            return jv_int(n);
        }
        if (!strcmp(name, "index")) {
            for (size_t i = 0; i < self.u.l->n; i++) if (jv_equal(self.u.l->v[i], a0)) return jv_int((int64_t)i);
            jx_fail(x, at, "value is not in list");
        }
        jx_fail(x, at, "access to attribute '%s' of 'list' object is unsafe", name);
    }
    if (self.t != JV_STR) jx_fail(x, at, "'%s' object has no attribute '%s'", jv_type_name(self), name);
    const jstr *s = self.u.s;
    jv a0 = g->npos > 0 ? g->pos[0] : jv_undef();
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) return jv_bool(str_affix(x, at, s, a0, name[0] == 'e'));
    if (!strcmp(name, "strip")) return str_strip(x, at, s, arg(g, 0, "chars"), true, true);
    if (!strcmp(name, "lstrip")) return str_strip(x, at, s, arg(g, 0, "chars"), true, false);
    if (!strcmp(name, "rstrip")) return str_strip(x, at, s, arg(g, 0, "chars"), false, true);
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        jv ms = arg(g, 1, "maxsplit");
        return str_split(x, at, s, arg(g, 0, "sep"), has(ms) ? need_int(x, at, ms, "maxsplit") : -1, name[0] == 'r');
    }
    if (!strcmp(name, "replace")) {
        jv c = arg(g, 2, "count");
        return str_replace(x, at, s, need_str(x, at, arg(g, 0, "old"), "replace"), need_str(x, at, arg(g, 1, "new"), "replace"),
                           has(c) ? need_int(x, at, c, "count") : -1);
    }
    if (!strcmp(name, "lower")) return str_case(x, at, s, 0);
    if (!strcmp(name, "upper")) return str_case(x, at, s, 1);
    if (!strcmp(name, "capitalize")) return str_case(x, at, s, 2);
    if (!strcmp(name, "title")) return str_case(x, at, s, 3);
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index")) {
        int64_t r = str_find(s, need_str(x, at, a0, name), name[0] == 'r');
        if (r < 0 && name[0] == 'i') jx_fail(x, at, "substring not found");
        return jv_int(r);
    }
    if (!strcmp(name, "count")) return jv_int(str_count(s, need_str(x, at, a0, name)));
    if (!strcmp(name, "format")) return str_format(x, at, s, g);
    if (!strcmp(name, "join")) return join(x, at, a0, self, jv_undef());
    if (!strcmp(name, "splitlines")) {
        jv out = mklist(x, at);
        size_t i = 0;
        while (i < s->len) {
            size_t j = i;
            while (j < s->len && s->p[j] != '\n' && s->p[j] != '\r') j++;
            push(x, at, out, mkstr(x, at, s->p + i, j - i));
            if (j < s->len && s->p[j] == '\r' && j + 1 < s->len && s->p[j + 1] == '\n') j++;
            i = j + 1;
        }
        return out;
    }
    if (!strncmp(name, "is", 2)) {
        if (!s->len) return jv_bool(false);
        bool cased = false, ok = true;
        for (size_t i = 0; i < s->len; i++) {
            unsigned char c = (unsigned char)s->p[i];
            if (!strcmp(name, "isdigit")) ok &= isdigit(c) != 0;
            else if (!strcmp(name, "isalpha")) ok &= isalpha(c) != 0;
            else if (!strcmp(name, "isalnum")) ok &= isalnum(c) != 0;
            else if (!strcmp(name, "isspace")) ok &= is_ws(c);
            else if (!strcmp(name, "isupper")) { ok &= !islower(c); cased |= isupper(c) != 0; }
            else if (!strcmp(name, "islower")) { ok &= !isupper(c); cased |= islower(c) != 0; }
        }
        if (!strcmp(name, "isupper") || !strcmp(name, "islower")) ok &= cased;
        return jv_bool(ok);
    }
    jx_fail(x, at, "'str' object has no attribute '%s'", name);
}

/* ===== Global functions ===== */
int jx_builtin_id(const char *name) {
    static const char *const names[] = { "raise_exception", "strftime_now", "namespace", "range", "dict", "joiner", "cycler" };
    for (int i = 0; i < JB_COUNT; i++) if (!strcmp(names[i], name)) return i;
    return -1;
}

jv jx_call_builtin(jctx *x, const jnode *at, int fn, const jargs *g) {
    switch (fn) {
    case JB_RAISE: {
        jv m = g->npos ? jx_str(x, at, g->pos[0]) : jv_strz(x->a, "");
        x->raised = true;
        nx_fail(x->err, NX_ERR_INVALID_ARG, "%s", m.t == JV_STR ? m.u.s->p : "");
        longjmp(x->fail, 1);
    }
    case JB_STRFTIME: {
        const jstr *f = need_str(x, at, arg(g, 0, "format"), "strftime_now");
        struct tm tm;
        time_t now = x->now;
        gmtime_r(&now, &tm);
        char out[512];
        size_t n = f->len ? strftime(out, sizeof out, f->p, &tm) : 0;
        return mkstr(x, at, out, n);
    }
    case JB_NAMESPACE: case JB_DICT: {
        jv d = jv_dict(x->a);
        if (d.t != JV_DICT) jx_oom(x, at);
        if (g->npos && (g->pos[0].t == JV_DICT || g->pos[0].t == JV_NS))
            for (size_t i = 0; i < g->pos[0].u.d->n; i++)
                if (!jd_set(x->a, d.u.d, g->pos[0].u.d->k[i], g->pos[0].u.d->v[i])) jx_oom(x, at);
        for (int i = 0; i < g->nkw; i++)
            if (!jd_set(x->a, d.u.d, jv_strz(x->a, g->kwn[i]), g->kwv[i])) jx_oom(x, at);
        if (fn == JB_NAMESPACE) d.t = JV_NS;
        return d;
    }
    case JB_RANGE: {
        int64_t start = 0, stop, step = 1;
        if (g->npos == 1) stop = need_int(x, at, g->pos[0], "range");
        else if (g->npos >= 2) {
            start = need_int(x, at, g->pos[0], "range");
            stop = need_int(x, at, g->pos[1], "range");
            if (g->npos >= 3) step = need_int(x, at, g->pos[2], "range");
        } else jx_fail(x, at, "range expected at least 1 argument");
        if (!step) jx_fail(x, at, "range() arg 3 must not be zero");
        jv l = mklist(x, at);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            jx_step(x, at);
            push(x, at, l, jv_int(i));
            if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
        }
        return l;
    }
    default: jx_fail(x, at, "this global function is not supported");
    }
}

/* ===== Filters ===== */
static jv do_sort(jctx *x, const jnode *at, jv v, bool reverse, bool icase, jv attribute) {
    jv l = jx_list_of(x, at, v), out = mklist(x, at);
    size_t n = l.u.l->n;
    jv *keys = ja_alloc(x->a, (n ? n : 1) * sizeof *keys);
    if (!keys) jx_oom(x, at);
    for (size_t i = 0; i < n; i++) {
        push(x, at, out, l.u.l->v[i]);
        keys[i] = lower_if(x, at, has(attribute) ? attr_path(x, at, l.u.l->v[i], attribute) : l.u.l->v[i], icase);
    }
    sort_ctx c = { x, at, icase, reverse };
    msort(&c, keys, out.u.l->v, n);
    return out;
}

static jv select_common(jctx *x, const jnode *at, jv v, const jargs *g, bool attr, bool keep) {
    jv l = jx_list_of(x, at, v), out = mklist(x, at);
    int first = attr ? 1 : 0;
    const char *test = NULL;
    if (g->npos > first) test = need_str(x, at, g->pos[first], "select")->p;
    jargs rest = { .pos = g->npos > first + 1 ? g->pos + first + 1 : NULL, .npos = g->npos > first + 1 ? g->npos - first - 1 : 0 };
    for (size_t i = 0; i < l.u.l->n; i++) {
        jx_step(x, at);
        jv item = l.u.l->v[i], subj = item;
        if (attr) {
            if (!g->npos) jx_fail(x, at, "selectattr needs an attribute");
            subj = attr_path(x, at, item, g->pos[0]);
        }
        bool t = test ? jx_test(x, at, test, subj, &rest) : jv_truthy(subj);
        if (t == keep) push(x, at, out, item);
    }
    return out;
}

static jv json_filter(jctx *x, const jnode *at, jv v, const jargs *g) {
    jv ind = arg(g, 0, "indent"), seps = arg(g, -1, "separators"), sk = arg(g, -1, "sort_keys");
    int indent = -1;
    if (ind.t == JV_INT) indent = (int)(ind.u.i < 0 ? 0 : ind.u.i > 64 ? 64 : ind.u.i);
    const char *item_sep = NULL, *key_sep = NULL;
    if (seps.t == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].t == JV_STR && seps.u.l->v[1].t == JV_STR) {
        item_sep = seps.u.l->v[0].u.s->p; key_sep = seps.u.l->v[1].u.s->p;
    }
    jbuf b = { .limit = x->max_output, .a = x->a };
    if (!jv_to_json(&b, v, indent, item_sep, key_sep, jv_truthy(sk), 0)) {
        bool oom = b.failed;
        jb_free(&b);
        if (oom) jx_oom(x, at);
        jx_fail(x, at, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
    return sb_done(x, at, &b);
}

static jv indent_filter(jctx *x, const jnode *at, jv v, const jargs *g) {
    jv s = jx_str(x, at, v), w = arg(g, 0, "width");
    bool first = jv_truthy(arg(g, 1, "first")), blank = jv_truthy(arg(g, 2, "blank"));
    jv ind;
    if (w.t == JV_STR) ind = w;
    else {
        int64_t n = has(w) ? need_int(x, at, w, "indent") : 4;
        if (n < 0) n = 0;
        if (n > 4096) jx_fail(x, at, "indent width too large");
        char sp[4097];
        memset(sp, ' ', (size_t)n);
        ind = mkstr(x, at, sp, (size_t)n);
    }
    /* Jinja appends "\n" and splits lines, which is splitting on "\n"; empty lines stay
     * unindented unless blank */
    const jstr *t = s.u.s;
    jbuf b = { .limit = x->max_output, .a = x->a };
    if (first) jb_put(&b, ind.u.s->p, ind.u.s->len);
    size_t i = 0;
    for (bool line0 = true;; line0 = false) {
        size_t j = i;
        while (j < t->len && t->p[j] != '\n') j++;
        if (!line0) {
            jb_putc(&b, '\n');
            if (j > i || blank) jb_put(&b, ind.u.s->p, ind.u.s->len);
        }
        jb_put(&b, t->p + i, j - i);
        jx_step(x, at);
        if (j >= t->len) break;
        i = j + 1;
    }
    return sb_done(x, at, &b);
}

jv jx_filter(jctx *x, const jnode *at, const char *name, jv v, const jargs *g) {
    jv a0 = g->npos > 0 ? g->pos[0] : jv_undef();
    if (!strcmp(name, "safe") || !strcmp(name, "mark_safe")) return v;
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv dv = arg(g, 0, "default_value");
        bool boolean = jv_truthy(arg(g, 1, "boolean"));
        if (v.t == JV_UNDEF || (boolean && !jv_truthy(v))) return has(dv) ? dv : jv_strz(x->a, "");
        return v;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        switch (v.t) {
        case JV_STR: return jv_int((int64_t)u8_len(v.u.s->p, v.u.s->len));
        case JV_LIST: return jv_int((int64_t)v.u.l->n);
        case JV_DICT: case JV_NS: return jv_int((int64_t)v.u.d->n);
        case JV_UNDEF: return jv_int(0);
        default: jx_fail(x, at, "object of type '%s' has no len()", jv_type_name(v));
        }
    }
    if (!strcmp(name, "string")) return jx_str(x, at, v);
    if (!strcmp(name, "tojson")) return json_filter(x, at, v, g);
    if (!strcmp(name, "items")) return dict_items(x, at, v, 0);
    if (!strcmp(name, "list")) return v.t == JV_LIST ? (v.tuple ? (jv){ .t = JV_LIST, .u.l = v.u.l } : v) : jx_list_of(x, at, v);
    if (!strcmp(name, "join")) return join(x, at, v, has(arg(g, 0, "d")) ? jx_str(x, at, arg(g, 0, "d")) : jv_undef(), arg(g, 1, "attribute"));
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        jv l = jx_list_of(x, at, v);
        if (!l.u.l->n) return jv_undef();
        return name[0] == 'f' ? l.u.l->v[0] : l.u.l->v[l.u.l->n - 1];
    }
    if (!strcmp(name, "reverse")) {
        if (v.t == JV_STR) {
            jv l = jx_list_of(x, at, v);
            jbuf b = { .limit = x->max_output, .a = x->a };
            for (size_t i = l.u.l->n; i > 0; i--) jb_put(&b, l.u.l->v[i - 1].u.s->p, l.u.l->v[i - 1].u.s->len);
            return sb_done(x, at, &b);
        }
        jv l = jx_list_of(x, at, v), out = mklist(x, at);
        for (size_t i = l.u.l->n; i > 0; i--) push(x, at, out, l.u.l->v[i - 1]);
        return out;
    }
    if (!strcmp(name, "sort"))
        return do_sort(x, at, v, jv_truthy(arg(g, 0, "reverse")), !jv_truthy(arg(g, 1, "case_sensitive")), arg(g, 2, "attribute"));
    if (!strcmp(name, "dictsort")) {
        if (v.t != JV_DICT && v.t != JV_NS) jx_fail(x, at, "You can only sort by either a mapping");
        bool icase = !jv_truthy(arg(g, 0, "case_sensitive")), reverse = jv_truthy(arg(g, 2, "reverse"));
        jv by = arg(g, 1, "by");
        bool by_value = by.t == JV_STR && !strcmp(by.u.s->p, "value");
        jv items = dict_items(x, at, v, 0);
        size_t n = items.u.l->n;
        jv *keys = ja_alloc(x->a, (n ? n : 1) * sizeof *keys);
        if (!keys) jx_oom(x, at);
        for (size_t i = 0; i < n; i++) keys[i] = lower_if(x, at, items.u.l->v[i].u.l->v[by_value ? 1 : 0], icase);
        sort_ctx c = { x, at, icase, reverse };
        msort(&c, keys, items.u.l->v, n);
        return items;
    }
    if (!strcmp(name, "unique")) {
        jv l = jx_list_of(x, at, v), out = mklist(x, at), seen = mklist(x, at);
        bool icase = !jv_truthy(arg(g, 0, "case_sensitive"));
        jv attribute = arg(g, 1, "attribute");
        for (size_t i = 0; i < l.u.l->n; i++) {
            jv k = lower_if(x, at, has(attribute) ? attr_path(x, at, l.u.l->v[i], attribute) : l.u.l->v[i], icase);
            bool dup = false;
            for (size_t j = 0; j < seen.u.l->n && !dup; j++) { jx_step(x, at); dup = jv_equal(seen.u.l->v[j], k); }
            if (!dup) { push(x, at, seen, k); push(x, at, out, l.u.l->v[i]); }
        }
        return out;
    }
    if (!strcmp(name, "map")) {
        jv l = jx_list_of(x, at, v), out = mklist(x, at);
        jv attribute = arg(g, -1, "attribute");
        for (size_t i = 0; i < l.u.l->n; i++) {
            jx_step(x, at);
            jv item = l.u.l->v[i];
            if (has(attribute)) {
                jv r = attr_path(x, at, item, attribute);
                if (r.t == JV_UNDEF) { jv d = arg(g, -1, "default"); if (has(d)) r = d; }
                push(x, at, out, r);
            } else {
                if (!g->npos) jx_fail(x, at, "map needs a filter name or attribute=");
                const char *fname = need_str(x, at, g->pos[0], "map")->p;
                jargs rest = { .pos = g->pos + 1, .npos = g->npos - 1, .kwn = g->kwn, .kwv = g->kwv, .nkw = g->nkw };
                push(x, at, out, jx_filter(x, at, fname, item, &rest));
            }
        }
        return out;
    }
    if (!strcmp(name, "select")) return select_common(x, at, v, g, false, true);
    if (!strcmp(name, "reject")) return select_common(x, at, v, g, false, false);
    if (!strcmp(name, "selectattr")) return select_common(x, at, v, g, true, true);
    if (!strcmp(name, "rejectattr")) return select_common(x, at, v, g, true, false);
    if (!strcmp(name, "attr")) return jx_getattr(x, at, v, a0, false);
    if (!strcmp(name, "batch")) {
        int64_t n = need_int(x, at, a0, "batch");
        if (n <= 0) jx_fail(x, at, "batch size must be positive");
        jv fill = arg(g, 1, "fill_with");
        jv l = jx_list_of(x, at, v), out = mklist(x, at), cur = mklist(x, at);
        for (size_t i = 0; i < l.u.l->n; i++) {
            push(x, at, cur, l.u.l->v[i]);
            if ((int64_t)cur.u.l->n == n) { push(x, at, out, cur); cur = mklist(x, at); }
        }
        if (cur.u.l->n) {
            if (has(fill)) while ((int64_t)cur.u.l->n < n) { jx_step(x, at); push(x, at, cur, fill); }
            push(x, at, out, cur);
        }
        return out;
    }
    if (!strcmp(name, "sum") || !strcmp(name, "min") || !strcmp(name, "max")) {
        jv l = jx_list_of(x, at, v);
        jv attribute = arg(g, name[1] == 'u' ? 0 : 1, "attribute");
        if (name[1] == 'u') {
            jv acc = has(arg(g, 1, "start")) ? arg(g, 1, "start") : jv_int(0);
            for (size_t i = 0; i < l.u.l->n; i++) {
                jv item = has(attribute) ? attr_path(x, at, l.u.l->v[i], attribute) : l.u.l->v[i];
                if (!jv_is_num(acc) || !jv_is_num(item)) jx_fail(x, at, "unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(acc), jv_type_name(item));
                acc = (acc.t == JV_FLOAT || item.t == JV_FLOAT) ? jv_float(jv_num(acc) + jv_num(item))
                                                                : jv_int((int64_t)jv_num(acc) + (int64_t)jv_num(item));
            }
            return acc;
        }
        if (!l.u.l->n) return jv_undef();
        bool icase = !jv_truthy(arg(g, 0, "case_sensitive"));
        jv best = l.u.l->v[0];
        sort_ctx c = { x, at, icase, false };
        for (size_t i = 1; i < l.u.l->n; i++) {
            jv ka = lower_if(x, at, has(attribute) ? attr_path(x, at, l.u.l->v[i], attribute) : l.u.l->v[i], icase);
            jv kb = lower_if(x, at, has(attribute) ? attr_path(x, at, best, attribute) : best, icase);
            int r = cmp_keys(&c, ka, kb);
            if (name[1] == 'i' ? r < 0 : r > 0) best = l.u.l->v[i];
        }
        return best;
    }
    if (!strcmp(name, "abs")) {
        if (v.t == JV_INT) { if (v.u.i == INT64_MIN) jx_fail(x, at, "integer overflow"); return jv_int(v.u.i < 0 ? -v.u.i : v.u.i); }
        if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
        if (v.t == JV_BOOL) return jv_int(v.u.b);
        jx_fail(x, at, "bad operand type for abs(): '%s'", jv_type_name(v));
    }
    if (!strcmp(name, "round")) {
        if (!jv_is_num(v)) jx_fail(x, at, "round expects a number");
        jv pv = arg(g, 0, "precision"), mv = arg(g, 1, "method");
        int64_t p = has(pv) ? need_int(x, at, pv, "round") : 0;
        if (p > 15) p = 15;
        if (p < -15) p = -15;
        double m = pow(10, (double)p), f = jv_num(v) * m;
        const char *meth = mv.t == JV_STR ? mv.u.s->p : "common";
        if (!strcmp(meth, "ceil")) f = ceil(f);
        else if (!strcmp(meth, "floor")) f = floor(f);
        else if (!strcmp(meth, "common")) f = nearbyint(f);   /* Python 3 rounds half to even */
        else jx_fail(x, at, "method must be 'common', 'ceil' or 'floor'");
        return jv_float(f / m);
    }
    if (!strcmp(name, "int")) {
        jv dv = arg(g, 0, "default");
        jv def = has(dv) ? dv : jv_int(0);
        if (v.t == JV_INT) return v;
        if (v.t == JV_BOOL) return jv_int(v.u.b);
        if (v.t == JV_FLOAT) return isfinite(v.u.f) && fabs(v.u.f) < 9.2e18 ? jv_int((int64_t)v.u.f) : def;
        if (v.t == JV_STR) {
            char *end;
            const char *p = v.u.s->p;
            long long r = strtoll(p, &end, 10);
            while (is_ws((unsigned char)*end)) end++;
            if (end != p && !*end) return jv_int(r);
            double d = strtod(p, &end);
            while (is_ws((unsigned char)*end)) end++;
            if (end != p && !*end && isfinite(d) && fabs(d) < 9.2e18) return jv_int((int64_t)d);
        }
        return def;
    }
    if (!strcmp(name, "float")) {
        jv dv = arg(g, 0, "default");
        if (jv_is_num(v)) return jv_float(jv_num(v));
        if (v.t == JV_STR) {
            char *end;
            double d = strtod(v.u.s->p, &end);
            if (end != v.u.s->p && !*end) return jv_float(d);
        }
        return has(dv) ? dv : jv_float(0);
    }
    if (!strcmp(name, "indent")) return indent_filter(x, at, v, g);
    if (!strcmp(name, "format")) return percent_format(x, at, need_str(x, at, v, "format"), g);
    if (!strcmp(name, "escape") || !strcmp(name, "e") || !strcmp(name, "forceescape")) {
        jv s = jx_str(x, at, v);
        jbuf b = { .limit = x->max_output, .a = x->a };
        for (size_t i = 0; i < s.u.s->len; i++) {
            char c = s.u.s->p[i];
            if (c == '&') jb_puts(&b, "&amp;");
            else if (c == '<') jb_puts(&b, "&lt;");
            else if (c == '>') jb_puts(&b, "&gt;");
            else if (c == '"') jb_puts(&b, "&#34;");
            else if (c == '\'') jb_puts(&b, "&#39;");
            else jb_putc(&b, c);
        }
        return sb_done(x, at, &b);
    }
    if (!strcmp(name, "wordcount")) {
        jv w = str_split(x, at, jx_str(x, at, v).u.s, jv_undef(), -1, false);
        return jv_int((int64_t)w.u.l->n);
    }
    if (!strcmp(name, "pprint")) {
        jbuf b = { .limit = x->max_output, .a = x->a };
        jv_repr(&b, v);
        return sb_done(x, at, &b);
    }
    /* string filters */
    if (!strcmp(name, "trim")) return str_strip(x, at, jx_str(x, at, v).u.s, arg(g, 0, "chars"), true, true);
    if (!strcmp(name, "upper")) return str_case(x, at, jx_str(x, at, v).u.s, 1);
    if (!strcmp(name, "lower")) return str_case(x, at, jx_str(x, at, v).u.s, 0);
    if (!strcmp(name, "capitalize")) return str_case(x, at, jx_str(x, at, v).u.s, 2);
    if (!strcmp(name, "title")) return str_case(x, at, jx_str(x, at, v).u.s, 3);
    if (!strcmp(name, "replace")) {
        jv c = arg(g, 2, "count");
        return str_replace(x, at, jx_str(x, at, v).u.s, jx_str(x, at, arg(g, 0, "old")).u.s, jx_str(x, at, arg(g, 1, "new")).u.s,
                           has(c) && c.t != JV_NONE ? need_int(x, at, c, "count") : -1);
    }
    if (!strcmp(name, "center")) {
        jv s = jx_str(x, at, v), wv = arg(g, 0, "width");
        int64_t w = has(wv) ? need_int(x, at, wv, "center") : 80, len = (int64_t)u8_len(s.u.s->p, s.u.s->len);
        if (w <= len) return s;
        if (w > 4096) jx_fail(x, at, "center width too large");
        jbuf b = { .limit = x->max_output, .a = x->a };
        int64_t left = (w - len) / 2 + ((w - len) & w & 1);
        for (int64_t i = 0; i < left; i++) jb_putc(&b, ' ');
        jb_put(&b, s.u.s->p, s.u.s->len);
        for (int64_t i = 0; i < w - len - left; i++) jb_putc(&b, ' ');
        return sb_done(x, at, &b);
    }
    jx_fail(x, at, "no filter named '%s'", name);
}
