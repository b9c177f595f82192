/*
 * tokenizer_json.c — the small JSON pieces token I/O needs: writing a byte string as a JSON
 * string, and reading an array of strings that may contain any character, NUL included (cJSON
 * stops strings at NUL, so texts are parsed here).
 *
 * Promises: malformed JSON gives NX_ERR_FORMAT with the byte offset; output is always valid
 * JSON (bytes that are not valid UTF-8 are written as U+FFFD).
 * Must never: read past the given length.
 */
#include "tokenizer_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nx_json_write_string(FILE *f, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c < 0x80) {
            switch (c) {
            case '"': fputs("\\\"", f); break;
            case '\\': fputs("\\\\", f); break;
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            default:
                if (c < 0x20 || c == 0x7F) fprintf(f, "\\u%04x", c);
                else fputc(c, f);
            }
            i++;
            continue;
        }
        size_t L = nx_utf8_valid_len(p + i, n - i);
        if (L == 0) { fputs("\\ufffd", f); i++; continue; }
        fwrite(p + i, 1, L, f);
        i += L;
    }
    fputc('"', f);
}

static size_t skip_ws(const char *j, size_t len, size_t i) {
    while (i < len && (j[i] == ' ' || j[i] == '\t' || j[i] == '\n' || j[i] == '\r')) i++;
    return i;
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Parse the string starting at j[i] == '"'; writes the decoded bytes to dst, returns the index
 * after the closing quote or 0 on error. */
static size_t parse_string(const char *j, size_t len, size_t i, char *dst, size_t *dlen, nx_error *err) {
    size_t o = 0;
    i++;
    while (i < len && j[i] != '"') {
        if (j[i] != '\\') { dst[o++] = j[i++]; continue; }
        if (i + 1 >= len) break;
        char e = j[i + 1];
        i += 2;
        switch (e) {
        case '"': dst[o++] = '"'; break;
        case '\\': dst[o++] = '\\'; break;
        case '/': dst[o++] = '/'; break;
        case 'b': dst[o++] = '\b'; break;
        case 'f': dst[o++] = '\f'; break;
        case 'n': dst[o++] = '\n'; break;
        case 'r': dst[o++] = '\r'; break;
        case 't': dst[o++] = '\t'; break;
        case 'u': {
            int v = i + 4 <= len ? hex4(j + i) : -1;
            if (v < 0) { nx_fail(err, NX_ERR_FORMAT, "JSON: bad \\u escape at byte %zu", i - 2); return 0; }
            i += 4;
            uint32_t cp = (uint32_t)v;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                int lo = (i + 6 <= len && j[i] == '\\' && j[i + 1] == 'u') ? hex4(j + i + 2) : -1;
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                    i += 6;
                } else {
                    cp = 0xFFFD;     /* lone surrogate */
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                cp = 0xFFFD;
            }
            /* a \u escape is 6 bytes of input and at most 4 of output (pairs: 12 -> 4) */
            o += nx_utf8_encode(cp, dst + o);
            break;
        }
        default:
            nx_fail(err, NX_ERR_FORMAT, "JSON: bad escape '\\%c' at byte %zu", e, i - 2);
            return 0;
        }
    }
    if (i >= len) { nx_fail(err, NX_ERR_FORMAT, "JSON: unterminated string"); return 0; }
    *dlen = o;
    return i + 1;
}

nx_status nx_json_string_array(const char *json, size_t len, nx_str_list *out, nx_error *err) {
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    out->pool = malloc(len + 1);
    if (!out->pool) return nx_fail(err, NX_ERR_NOMEM, "out of memory reading JSON");
    size_t *offs = NULL, used = 0;
    size_t i = skip_ws(json, len, 0);
    if (i >= len || json[i] != '[') { nx_str_list_free(out); return nx_fail(err, NX_ERR_FORMAT, "JSON: expected an array of strings at byte %zu", i); }
    i = skip_ws(json, len, i + 1);
    if (i < len && json[i] == ']') goto finish;
    for (;;) {
        if (i >= len || json[i] != '"') { free(offs); nx_str_list_free(out); return nx_fail(err, NX_ERR_FORMAT, "JSON: expected a string at byte %zu", i); }
        size_t dl = 0;
        size_t next = parse_string(json, len, i, out->pool + used, &dl, err);
        if (!next) { free(offs); nx_str_list_free(out); return err ? err->code : NX_ERR_FORMAT; }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 64;
            size_t *no = realloc(offs, cap * sizeof *no);
            size_t *nl = realloc(out->len, cap * sizeof *nl);
            if (nl) out->len = nl;
            if (!no || !nl) { free(no ? no : offs); nx_str_list_free(out); return nx_fail(err, NX_ERR_NOMEM, "out of memory reading JSON"); }
            offs = no;
        }
        offs[out->n] = used;
        out->len[out->n] = dl;
        out->n++;
        used += dl;
        i = skip_ws(json, len, next);
        if (i < len && json[i] == ',') { i = skip_ws(json, len, i + 1); continue; }
        if (i < len && json[i] == ']') break;
        free(offs);
        nx_str_list_free(out);
        return nx_fail(err, NX_ERR_FORMAT, "JSON: expected ',' or ']' at byte %zu", i);
    }
finish:
    out->s = malloc((out->n ? out->n : 1) * sizeof *out->s);
    if (!out->s) { free(offs); nx_str_list_free(out); return nx_fail(err, NX_ERR_NOMEM, "out of memory reading JSON"); }
    for (size_t k = 0; k < out->n; k++) out->s[k] = out->pool + offs[k];
    free(offs);
    return NX_OK;
}

void nx_str_list_free(nx_str_list *l) {
    free(l->pool);
    free(l->s);
    free(l->len);
    memset(l, 0, sizeof *l);
}
