/*
 * jinja_lex.c — template source -> tokens, with Hugging Face's environment settings applied
 * here: trim_blocks (one newline after a block or comment tag is dropped), lstrip_blocks
 * (spaces/tabs before a block or comment tag on its own line are dropped), `-` whitespace
 * control on either side of any tag, `+` to turn either off, comments, {% raw %} blocks, and
 * the one trailing newline Jinja drops (keep_trailing_newline=False).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/jinja_impl.h"

typedef struct lexer {
    const char *s;
    size_t n, i;
    int line, col;              /* of position i */
    jarena *a;
    jtoks *out;
    nx_error *err;
} lexer;

static void adv(lexer *L, size_t k) {
    for (size_t j = 0; j < k && L->i < L->n; j++, L->i++) {
        if (L->s[L->i] == '\n') { L->line++; L->col = 1; }
        else L->col++;
    }
}

static jtok *emit(lexer *L, int type, int line, int col) {
    if (L->out->n == L->out->cap) {
        size_t cap = L->out->cap ? L->out->cap * 2 : 256;
        jtok *nv = ja_alloc(L->a, cap * sizeof *nv);
        if (!nv) return NULL;
        if (L->out->n) memcpy(nv, L->out->v, L->out->n * sizeof *nv);
        L->out->v = nv; L->out->cap = cap;
    }
    jtok *t = &L->out->v[L->out->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type; t->line = line; t->col = col;
    return t;
}

static bool at(const lexer *L, const char *lit) {
    size_t k = strlen(lit);
    return L->n - L->i >= k && memcmp(L->s + L->i, lit, k) == 0;
}

static int put_utf8(char *o, unsigned long cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) cp = 0xFFFD;
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal's body with Python's escapes (what Jinja's unicode-escape decoding does). */
static nx_status lex_string(lexer *L, jtok *t) {
    char q = L->s[L->i];
    int line = L->line, col = L->col;
    adv(L, 1);
    size_t start = L->i;
    while (L->i < L->n && L->s[L->i] != q) {
        if (L->s[L->i] == '\\' && L->i + 1 < L->n) adv(L, 1);
        adv(L, 1);
    }
    if (L->i >= L->n) return nx_fail(L->err, NX_ERR_FORMAT, "line %d col %d: unterminated string", line, col);
    size_t end = L->i;
    adv(L, 1);
    char *o = ja_alloc(L->a, (end - start) + 1);
    if (!o) return nx_fail(L->err, NX_ERR_NOMEM, "template too large");
    size_t k = 0;
    for (size_t i = start; i < end; i++) {
        char c = L->s[i];
        if (c != '\\' || i + 1 >= end) { o[k++] = c; continue; }
        char e = L->s[++i];
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case 'a': o[k++] = '\a'; break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            unsigned long cp = 0;
            int j = 0;
            for (; j < nd && i + 1 + (size_t)j < end && hexval(L->s[i + 1 + j]) >= 0; j++)
                cp = cp * 16 + (unsigned long)hexval(L->s[i + 1 + j]);
            if (j < nd) return nx_fail(L->err, NX_ERR_FORMAT, "line %d col %d: truncated \\%c escape", line, col, e);
            i += (size_t)nd;
            /* the escape can only grow the text if it is longer than its encoding */
            k += (size_t)put_utf8(o + k, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                unsigned long cp = (unsigned long)(e - '0');
                for (int j = 0; j < 2 && i + 1 < end && L->s[i + 1] >= '0' && L->s[i + 1] <= '7'; j++)
                    cp = cp * 8 + (unsigned long)(L->s[++i] - '0');
                k += (size_t)put_utf8(o + k, cp);
            } else { o[k++] = '\\'; o[k++] = e; }
        }
    }
    t->p = o; t->n = k;
    return NX_OK;
}

static const char *const OPS[] = {
    "**", "//", "==", "!=", "<=", ">=",
    "+", "-", "*", "/", "%", "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", ";", NULL,
};

/* Tokens of one tag up to its end marker ("}}" or "%}"); sets *strip_after / *keep_nl. */
static nx_status lex_tag(lexer *L, bool block, bool *strip_after, bool *keep_nl) {
    int depth = 0;
    int tl = L->line, tc = L->col;
    for (;;) {
        while (L->i < L->n && isspace((unsigned char)L->s[L->i])) adv(L, 1);
        if (L->i >= L->n) return nx_fail(L->err, NX_ERR_FORMAT, "line %d col %d: unclosed tag", tl, tc);
        int line = L->line, col = L->col;
        if (depth == 0) {
            const char *e = block ? "%}" : "}}";
            if (L->s[L->i] == '-' || L->s[L->i] == '+') {
                if (L->n - L->i >= 3 && memcmp(L->s + L->i + 1, e, 2) == 0) {
                    *strip_after = L->s[L->i] == '-';
                    *keep_nl = L->s[L->i] == '+';
                    adv(L, 3);
                    return emit(L, block ? JT_BLOCK_END : JT_VAR_END, line, col) ? NX_OK : nx_fail(L->err, NX_ERR_NOMEM, "template too large");
                }
            }
            if (at(L, e)) {
                adv(L, 2);
                return emit(L, block ? JT_BLOCK_END : JT_VAR_END, line, col) ? NX_OK : nx_fail(L->err, NX_ERR_NOMEM, "template too large");
            }
        }
        char c = L->s[L->i];
        jtok *t = emit(L, JT_EOF, line, col);
        if (!t) return nx_fail(L->err, NX_ERR_NOMEM, "template too large");
        if (isalpha((unsigned char)c) || c == '_') {
            size_t s = L->i;
            while (L->i < L->n && (isalnum((unsigned char)L->s[L->i]) || L->s[L->i] == '_')) adv(L, 1);
            t->type = JT_NAME; t->p = L->s + s; t->n = L->i - s;
        } else if (isdigit((unsigned char)c)) {
            char num[64];
            size_t k = 0;
            bool is_float = false;
            while (L->i < L->n && (isdigit((unsigned char)L->s[L->i]) || L->s[L->i] == '_')) {
                if (L->s[L->i] != '_' && k < 63) num[k++] = L->s[L->i];
                adv(L, 1);
            }
            if (L->i + 1 < L->n && L->s[L->i] == '.' && isdigit((unsigned char)L->s[L->i + 1])) {
                is_float = true;
                if (k < 63) num[k++] = '.';
                adv(L, 1);
                while (L->i < L->n && (isdigit((unsigned char)L->s[L->i]) || L->s[L->i] == '_')) {
                    if (L->s[L->i] != '_' && k < 63) num[k++] = L->s[L->i];
                    adv(L, 1);
                }
            }
            if (L->i < L->n && (L->s[L->i] == 'e' || L->s[L->i] == 'E')) {
                size_t j = L->i + 1;
                if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
                if (j < L->n && isdigit((unsigned char)L->s[j])) {
                    is_float = true;
                    while (L->i < j) { if (k < 63) num[k++] = L->s[L->i]; adv(L, 1); }
                    while (L->i < L->n && isdigit((unsigned char)L->s[L->i])) { if (k < 63) num[k++] = L->s[L->i]; adv(L, 1); }
                }
            }
            num[k] = 0;
            if (is_float) { t->type = JT_FLOAT; t->f = strtod(num, NULL); }
            else {
                unsigned long long v = 0;
                for (size_t j = 0; j < k; j++) {
                    if (v > (unsigned long long)INT64_MAX / 10) return nx_fail(L->err, NX_ERR_FORMAT, "line %d col %d: integer too large", line, col);
                    v = v * 10 + (unsigned long long)(num[j] - '0');
                }
                if (v > (unsigned long long)INT64_MAX) return nx_fail(L->err, NX_ERR_FORMAT, "line %d col %d: integer too large", line, col);
                t->type = JT_INT; t->i = (int64_t)v;
            }
        } else if (c == '\'' || c == '"') {
            t->type = JT_STRING;
            nx_status st = lex_string(L, t);
            if (st) return st;
        } else {
            int k = 0;
            for (; OPS[k]; k++) if (at(L, OPS[k])) break;
            if (!OPS[k]) return nx_fail(L->err, NX_ERR_FORMAT, "line %d col %d: unexpected character '%c'", line, col, c);
            t->type = JT_OP; t->p = OPS[k]; t->n = strlen(OPS[k]);
            if (c == '(' || c == '[' || c == '{') depth++;
            else if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
            adv(L, t->n);
        }
    }
}

/* Emit text [s, e) after the whitespace rules; lstrip tells whether the tag that follows
 * strips the spaces of its own line (lstrip_blocks), rstrip whether it strips all (`{%-`). */
static nx_status emit_text(lexer *L, size_t s, size_t e, int line, int col, bool strip_before, bool trim_nl,
                           bool rstrip, bool lstrip) {
    if (strip_before) while (s < e && isspace((unsigned char)L->s[s])) s++;
    else if (trim_nl && s < e && L->s[s] == '\n') s++;
    else if (trim_nl && s + 1 < e && L->s[s] == '\r' && L->s[s + 1] == '\n') s += 2;
    if (rstrip) while (e > s && isspace((unsigned char)L->s[e - 1])) e--;
    else if (lstrip) {
        size_t k = e;
        while (k > s && (L->s[k - 1] == ' ' || L->s[k - 1] == '\t')) k--;
        /* only when the whitespace starts its line (or the template) */
        if (k == 0 || L->s[k - 1] == '\n') e = k;
    }
    if (e <= s) return NX_OK;
    jtok *t = emit(L, JT_TEXT, line, col);
    if (!t) return nx_fail(L->err, NX_ERR_NOMEM, "template too large");
    t->p = L->s + s; t->n = e - s;
    return NX_OK;
}

nx_status jinja_lex(const char *src, size_t len, jarena *a, jtoks *out, nx_error *err) {
    if (len && src[len - 1] == '\n') { len--; if (len && src[len - 1] == '\r') len--; }
    lexer L = { .s = src, .n = len, .line = 1, .col = 1, .a = a, .out = out, .err = err };
    bool strip_before = false, trim_nl = false;
    while (L.i < L.n) {
        /* find the next tag opener */
        size_t s = L.i, j = L.i;
        int line = L.line, col = L.col;
        while (j + 1 < L.n && !(L.s[j] == '{' && (L.s[j + 1] == '{' || L.s[j + 1] == '%' || L.s[j + 1] == '#'))) j++;
        if (j + 1 >= L.n) j = L.n;
        char kind = j < L.n ? L.s[j + 1] : 0;
        char mod = j + 2 < L.n ? L.s[j + 2] : 0;
        bool rstrip = kind && mod == '-';
        bool lstrip = (kind == '%' || kind == '#') && mod != '+';
        nx_status st = emit_text(&L, s, j, line, col, strip_before, trim_nl, rstrip, lstrip);
        if (st) return st;
        strip_before = trim_nl = false;
        adv(&L, j - L.i);
        if (!kind) break;
        int tl = L.line, tc = L.col;
        adv(&L, (mod == '-' || mod == '+') ? 3 : 2);
        if (kind == '#') {
            size_t k = L.i;
            while (k + 1 < L.n && !(L.s[k] == '#' && L.s[k + 1] == '}')) k++;
            if (k + 1 >= L.n) return nx_fail(err, NX_ERR_FORMAT, "line %d col %d: unclosed comment", tl, tc);
            bool minus = k > L.i && L.s[k - 1] == '-', plus = k > L.i && L.s[k - 1] == '+';
            adv(&L, k + 2 - L.i);
            strip_before = minus;
            trim_nl = !minus && !plus;
            continue;
        }
        if (kind == '%') {
            /* {% raw %} ... {% endraw %}: the text in between is not parsed */
            size_t k = L.i;
            while (k < L.n && isspace((unsigned char)L.s[k])) k++;
            if (L.n - k >= 3 && memcmp(L.s + k, "raw", 3) == 0) {
                size_t m = k + 3;
                while (m < L.n && isspace((unsigned char)L.s[m])) m++;
                bool minus = m < L.n && L.s[m] == '-';
                if (minus || (m < L.n && L.s[m] == '+')) m++;
                if (L.n - m >= 2 && memcmp(L.s + m, "%}", 2) == 0) {
                    size_t body = m + 2, q = body;
                    for (;;) {
                        while (q + 1 < L.n && !(L.s[q] == '{' && L.s[q + 1] == '%')) q++;
                        if (q + 1 >= L.n) return nx_fail(err, NX_ERR_FORMAT, "line %d col %d: missing endraw", tl, tc);
                        size_t r = q + 2;
                        bool emin = r < L.n && L.s[r] == '-';
                        if (emin || (r < L.n && L.s[r] == '+')) r++;
                        while (r < L.n && isspace((unsigned char)L.s[r])) r++;
                        if (L.n - r >= 6 && memcmp(L.s + r, "endraw", 6) == 0) {
                            size_t z = r + 6;
                            while (z < L.n && isspace((unsigned char)L.s[z])) z++;
                            bool zmin = z < L.n && L.s[z] == '-';
                            bool zplus = z < L.n && L.s[z] == '+';
                            if (zmin || zplus) z++;
                            if (L.n - z >= 2 && memcmp(L.s + z, "%}", 2) == 0) {
                                int bl = L.line, bc = L.col;
                                st = emit_text(&L, body, q, bl, bc, minus, !minus, emin, !emin);
                                if (st) return st;
                                adv(&L, z + 2 - L.i);
                                strip_before = zmin;
                                trim_nl = !zmin && !zplus;
                                break;
                            }
                        }
                        q += 2;
                    }
                    continue;
                }
            }
        }
        if (!emit(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, tl, tc)) return nx_fail(err, NX_ERR_NOMEM, "template too large");
        bool strip_after = false, keep_nl = false;
        st = lex_tag(&L, kind == '%', &strip_after, &keep_nl);
        if (st) return st;
        strip_before = strip_after;
        trim_nl = kind == '%' && !strip_after && !keep_nl;
    }
    return emit(&L, JT_EOF, L.line, L.col) ? NX_OK : nx_fail(err, NX_ERR_NOMEM, "template too large");
}
