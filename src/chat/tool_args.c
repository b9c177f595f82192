/*
 * tool_args.c — an XML-parameter call's arguments streamed as JSON text (tool_args.h).
 * It follows tool_parse.c's xml_call step by step over the body seen so far: a parameter's
 * value ends at the first `<parameter=` or `</parameter>` after it, else at `</function>`,
 * else at the body's end; one leading and one trailing newline are not part of it.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/tool_args.h"
#include "chat/tool_parse.h"

enum { A_OPEN, A_NAME, A_SEARCH, A_KEY, A_VALUE, A_DONE, A_REFUSED };

struct nx_tool_args {
    const cJSON *tools;
    bool bare;
    int st;
    size_t pos;                 /* body bytes read (the next search starts here) */
    char *name, *key;
    bool str_value;             /* the current value is a string whatever its text */
    size_t vs;                  /* the value's first byte (after the key's '>') */
    size_t v_out;               /* value bytes up to here given out (string values) */
    bool v_nul;                 /* a NUL byte met: the string ends there (C strings) */
    size_t v_scan;              /* the value's bytes before here hold no tag (searched) */
    size_t v_fe;                /* where its first </function> is (0: none yet) */
    int n_params;
    char *out;
    size_t out_n, out_cap;
};

static const char P_OPEN[] = "<parameter=", P_CLOSE[] = "</parameter>", F_CLOSE[] = "</function>", F_OPEN[] = "<function=";


static bool put(nx_tool_args *a, const char *p, size_t n) {
    if (a->out_n + n + 1 > a->out_cap) {
        size_t cap = a->out_cap ? a->out_cap : 64;
        while (cap < a->out_n + n + 1) cap *= 2;
        char *q = realloc(a->out, cap);
        if (!q) return false;
        a->out = q;
        a->out_cap = cap;
    }
    memcpy(a->out + a->out_n, p, n);
    a->out_n += n;
    a->out[a->out_n] = 0;
    return true;
}

static bool put_json(nx_tool_args *a, cJSON *v) {   /* takes v */
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    bool ok = s && put(a, s, strlen(s));
    free(s);
    return ok;
}

/* string bytes escaped as cJSON prints them, up to the first NUL */
static bool put_escaped(nx_tool_args *a, const char *p, size_t n) {
    for (size_t i = 0; i < n && !a->v_nul; i++) {
        unsigned char c = (unsigned char)p[i];
        char e[8];
        const char *w = e;
        size_t wl = 2;
        e[0] = '\\';
        switch (c) {
        case 0: a->v_nul = true; continue;
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\b': e[1] = 'b'; break;
        case '\f': e[1] = 'f'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default:
            if (c < 32) { snprintf(e, sizeof e, "\\u%04x", c); wl = 6; }
            else { w = (const char *)&p[i]; wl = 1; }
        }
        if (!put(a, w, wl)) return false;
    }
    return true;
}

nx_tool_args *nx_tool_args_new(const cJSON *tools, bool bare) {
    nx_tool_args *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->tools = tools;
    a->bare = bare;
    a->st = bare ? A_NAME : A_OPEN;
    return a;
}

void nx_tool_args_free(nx_tool_args *a) {
    if (!a) return;
    free(a->name);
    free(a->key);
    free(a->out);
    free(a);
}

const char *nx_tool_args_name(const nx_tool_args *a) { return a->name; }

const char *nx_tool_args_take(nx_tool_args *a, size_t *n) {
    *n = a->out_n;
    a->out_n = 0;
    return a->out ? a->out : "";
}

/* the value's start after the parser's one leading newline */
static size_t v_start(const nx_tool_args *a, const char *p, size_t ve) {
    return ve > a->vs && p[a->vs] == '\n' ? a->vs + 1 : a->vs;
}

/* The value ends at ve (its raw end): the rest of it, the closing quote or the typed value. */
static bool value_end(nx_tool_args *a, const char *p, size_t ve) {
    size_t s = v_start(a, p, ve), e = ve;
    if (e > s && p[e - 1] == '\n') e--;
    bool ok;
    if (a->str_value) {
        size_t from = a->v_out > s ? a->v_out : s;
        ok = put_escaped(a, p + from, e > from ? e - from : 0) && put(a, "\"", 1);
    } else {
        char *val = nx_chat_dupn(p + s, e - s);
        ok = val && put_json(a, nx_chat_param_value(a->tools, a->name, a->key, val));
        free(val);
    }
    free(a->key);
    a->key = NULL;
    return ok;
}

/* One step of the reader; *progress when it moved on. */
static bool step(nx_tool_args *a, const char *p, size_t n, nx_tool_args_end end, bool *progress) {
    switch (a->st) {
    case A_OPEN: {   /* <tool_call> block: space, then <function= (anything else: not ours) */
        size_t i = a->pos;
        while (i < n && isspace((unsigned char)p[i])) i++;
        size_t k = n - i < 10 ? n - i : 10;
        if (memcmp(p + i, F_OPEN, k)) { a->st = A_REFUSED; return true; }
        if (k < 10) { if (end) a->st = A_REFUSED; return true; }
        a->pos = i + 10;
        a->st = A_NAME;
        *progress = true;
        return true;
    }
    case A_NAME: {
        const char *gt = memchr(p + a->pos, '>', n - a->pos);
        if (!gt) { if (end) a->st = A_REFUSED; return true; }
        if (gt == p + a->pos) { a->st = A_REFUSED; return true; }   /* <function=>: the parser rejects it */
        if (!(a->name = nx_chat_dupn(p + a->pos, (size_t)(gt - p) - a->pos))) return false;
        a->pos = (size_t)(gt - p) + 1;
        a->st = A_SEARCH;
        *progress = true;
        return put(a, "{", 1);
    }
    case A_SEARCH: {
        const char *ps = nx_chat_find(p + a->pos, n - a->pos, P_OPEN);
        if (!ps) {
            if (end) { a->st = A_DONE; *progress = true; return put(a, "}", 1); }
            return true;
        }
        a->pos = (size_t)(ps - p) + 11;
        a->st = A_KEY;
        *progress = true;
        return true;
    }
    case A_KEY: {
        const char *kg = memchr(p + a->pos, '>', n - a->pos);
        if (!kg) {   /* a <parameter= without '>': the parameters end (tool_parse.c) */
            if (end) { a->st = A_DONE; *progress = true; return put(a, "}", 1); }
            return true;
        }
        if (!(a->key = nx_chat_dupn(p + a->pos, (size_t)(kg - p) - a->pos))) return false;
        a->vs = a->v_out = (size_t)(kg - p) + 1;
        a->v_nul = false;
        a->v_scan = a->vs;
        a->v_fe = 0;
        a->str_value = nx_chat_param_is_string(a->tools, a->name, a->key);
        a->st = A_VALUE;
        *progress = true;
        if (a->n_params++ && !put(a, ",", 1)) return false;
        cJSON *k = cJSON_CreateString(a->key);
        if (!put_json(a, k) || !put(a, ":", 1)) return false;
        return !a->str_value || put(a, "\"", 1);
    }
    case A_VALUE: {
        size_t vs = a->vs, from = a->v_scan >= vs + 12 ? a->v_scan - 12 : vs;   /* a tag may straddle the last end */
        const char *e1 = nx_chat_find(p + from, n - from, P_CLOSE), *e2 = nx_chat_find(p + from, n - from, P_OPEN);
        if (e2 && (!e1 || e2 < e1)) {   /* the next parameter starts: this one ends there */
            if (!value_end(a, p, (size_t)(e2 - p))) return false;
            a->pos = (size_t)(e2 - p);
            a->st = A_SEARCH;
            *progress = true;
            return true;
        }
        if (e1) {
            if (!value_end(a, p, (size_t)(e1 - p))) return false;
            a->pos = (size_t)(e1 - p) + 12;
            a->st = A_SEARCH;
            *progress = true;
            return true;
        }
        if (!a->v_fe) {
            const char *f = nx_chat_find(p + from, n - from, F_CLOSE);
            if (f) a->v_fe = (size_t)(f - p);
        }
        a->v_scan = n;
        const char *fe = a->v_fe ? p + a->v_fe : NULL;
        if (end) {   /* the body is over: the value runs to </function>, else to the body's end */
            size_t ve = n;
            if (fe) ve = (size_t)(fe - p);
            else if (!a->bare || end == NX_TOOL_ARGS_TURN_END) {
                /* <tool_call>'s body is trimmed; a turn's end loses its end markers */
                if (end == NX_TOOL_ARGS_TURN_END) ve -= nx_chat_trimmable_tail(p + vs, n - vs, true);
                while (ve > vs && isspace((unsigned char)p[ve - 1])) ve--;
            }
            if (!value_end(a, p, ve)) return false;
            a->st = A_DONE;
            *progress = true;
            return put(a, "}", 1);
        }
        if (!a->str_value) return true;   /* typed: given out whole at its end */
        /* what is surely value: before a </function> (it may end there), a partial tag, and
         * the space and end markers that its end may still drop */
        size_t lim = n, k = 0;
        const char *tags[] = { P_CLOSE, P_OPEN, F_CLOSE };
        for (int i = 0; i < 3; i++) {
            size_t m = nx_chat_partial_len(p + vs, n - vs, tags[i]);
            if (m > k) k = m;
        }
        lim -= k;
        if (fe && (size_t)(fe - p) < lim) lim = (size_t)(fe - p);
        if (lim == vs) return true;                         /* the leading newline is not decided */
        size_t s = p[vs] == '\n' ? vs + 1 : vs;
        if (lim <= s) return true;
        lim -= nx_chat_trimmable_tail(p + s, lim - s, false);
        if (a->v_out < s) a->v_out = s;
        if (lim > a->v_out) {
            if (!put_escaped(a, p + a->v_out, lim - a->v_out)) return false;
            a->v_out = lim;
        }
        return true;
    }
    default: return true;
    }
}

nx_status nx_tool_args_step(nx_tool_args *a, const char *body, size_t n, nx_tool_args_end end,
                            nx_tool_args_state *state, nx_error *err) {
    for (bool progress = true; progress;) {
        progress = false;
        if (!step(a, body, n, end, &progress)) return nx_fail(err, NX_ERR_NOMEM, "out of memory in the tool-call arguments");
    }
    *state = a->st == A_REFUSED ? NX_TOOL_ARGS_REFUSED : a->st >= A_SEARCH ? NX_TOOL_ARGS_NAMED : NX_TOOL_ARGS_WAIT;
    return NX_OK;
}
