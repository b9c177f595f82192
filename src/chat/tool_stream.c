/*
 * tool_stream.c — the incremental tool-call / reasoning parser (tool_stream.h).
 *
 * The text read so far is in one of four modes: content, reasoning, a call block, or a whole
 * JSON turn. `pend` holds the raw text of the current mode not yet decided; `hold` (content)
 * and `rhold` (reasoning) hold text that is decided but may still be trimmed away at the end.
 * Call blocks are parsed by nx_chat_parse_output once complete, so both parsers agree on what
 * a call is.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/tool_args.h"
#include "chat/tool_parse.h"
#include "chat/tool_stream.h"

/* ===== a growable byte buffer ===== */
typedef struct buf { char *p; size_t n, cap; } buf;

static bool buf_add(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

/* drop the first k bytes */
static void buf_drop(buf *b, size_t k) {
    if (k >= b->n) { b->n = 0; if (b->p) b->p[0] = 0; return; }
    memmove(b->p, b->p + k, b->n - k + 1);
    b->n -= k;
}

static void buf_free(buf *b) { free(b->p); memset(b, 0, sizeof *b); }

/* ===== the markers ===== */
enum { T_CALL_XMLJSON, T_CALL_GEMMA, T_CALL_BARE_XML, T_THINK_OPEN, T_THINK_CLOSE, T_CHANNEL_OPEN };

typedef struct trigger { const char *text; int kind; const char *closer; } trigger;

static const trigger TRIGGERS[] = {
    {"<tool_call>", T_CALL_XMLJSON, "</tool_call>"},
    {"<|tool_call>", T_CALL_GEMMA, "<tool_call|>"},
    {"tool_call>", T_CALL_GEMMA, "<tool_call|>"},      /* "<|" may have ended the prompt */
    {"<function=", T_CALL_BARE_XML, "</function>"},    /* Qwen3-Coder without <tool_call> */
    {"<think>", T_THINK_OPEN, "</think>"},
    {"</think>", T_THINK_CLOSE, NULL},
    {"<|channel>thought", T_CHANNEL_OPEN, "<channel|>"},
    {"channel>thought", T_CHANNEL_OPEN, "<channel|>"},
};
#define N_TRIGGERS (int)(sizeof TRIGGERS / sizeof TRIGGERS[0])

static const char PYTHON_TAG[] = "<|python_tag|>";

enum { M_CONTENT, M_REASONING, M_BLOCK, M_TURN };

struct nx_tool_stream {
    nx_tool_stream_opts o;
    int mode;
    buf pend;                   /* undecided text of the current mode */
    buf hold;                   /* content decided, not yet given out */
    buf rhold;                  /* reasoning decided, not yet given out */
    buf blk;                    /* the call block (opener included) or the whole JSON turn */
    size_t opener_len;          /* of the block's opener */
    size_t scanned;             /* blk bytes already searched for the closer */
    int blk_kind;
    const char *closer;         /* of the block / reasoning being read */
    bool content_started;       /* non-space content seen */
    bool skip_ws;               /* drop space before the next content (the turn's start; after reasoning) */
    bool reasoning_started;
    bool reasoning_done;        /* one reasoning block was read: later tags are content */
    bool forced;                /* the reasoning block was opened by the prompt */
    bool finished;
    bool rc_open;               /* reasoning_in_content: the opening tag went out */
    cJSON *calls;               /* given out so far (duplicates are checked against them) */
    int n_calls;
    /* an XML-parameter call block read as it comes (tool_args.h) */
    nx_tool_args *args;
    bool args_refused;          /* not one: the block is parsed whole at its closer */
    bool announced;             /* its header went out (index call_index) */
    bool dropped;               /* a call after the first with parallel off: never given out */
    buf canon;                  /* its arguments text so far */
    size_t canon_sent;          /* of which given out */
    int call_index;
};

static bool trigger_active(const nx_tool_stream *s, const trigger *t) {
    switch (t->kind) {
    case T_CALL_XMLJSON:
    case T_CALL_GEMMA: return s->o.calls;
    case T_CALL_BARE_XML: return s->o.calls && s->n_calls == 0;   /* as tool_parse.c: only when nothing else matched */
    default: return s->o.reasoning && !s->reasoning_done;
    }
}

static const char *find(const char *h, size_t hn, const char *needle) {
    size_t nn = strlen(needle);
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == needle[0] && memcmp(h + i, needle, nn) == 0) return h + i;
    return NULL;
}

/* ===== output ===== */
static nx_status oom(nx_error *err) { return nx_fail(err, NX_ERR_NOMEM, "out of memory in the tool-call stream"); }

static bool out_grow(nx_tool_deltas *out) {
    if (out->n < out->cap) return true;
    int cap = out->cap ? out->cap * 2 : 8;
    nx_tool_delta *v = realloc(out->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    out->v = v;
    out->cap = cap;
    return true;
}

/* A text piece of a kind (argument pieces of call `index`), merged into the last delta when that
 * is of the same kind (and call). */
static bool out_piece(nx_tool_deltas *out, nx_tool_delta_kind kind, int index, const char *p, size_t n) {
    if (!n) return true;
    nx_tool_delta *last = out->n ? &out->v[out->n - 1] : NULL;
    if (last && last->kind == kind && (kind != NX_TOOL_DELTA_ARGS || last->index == index)) {
        char *t = realloc(last->text, last->len + n + 1);
        if (!t) return false;
        memcpy(t + last->len, p, n);
        last->len += n;
        t[last->len] = 0;
        last->text = t;
        return true;
    }
    if (!out_grow(out)) return false;
    char *t = malloc(n + 1);
    if (!t) return false;
    memcpy(t, p, n);
    t[n] = 0;
    out->v[out->n++] = (nx_tool_delta){ .kind = kind, .text = t, .len = n, .index = kind == NX_TOOL_DELTA_ARGS ? index : 0 };
    return true;
}

static bool out_text(nx_tool_deltas *out, nx_tool_delta_kind kind, const char *p, size_t n) {
    return out_piece(out, kind, 0, p, n);
}

static bool out_call(nx_tool_deltas *out, int index, cJSON *call) {
    if (!out_grow(out)) { cJSON_Delete(call); return false; }
    out->v[out->n++] = (nx_tool_delta){ .kind = NX_TOOL_DELTA_CALL, .index = index, .call = call };
    return true;
}

static bool out_args(nx_tool_deltas *out, int index, const char *p, size_t n) {
    return out_piece(out, NX_TOOL_DELTA_ARGS, index, p, n);
}

void nx_tool_deltas_clear(nx_tool_deltas *d) {
    for (int i = 0; i < d->n; i++) {
        free(d->v[i].text);
        cJSON_Delete(d->v[i].call);
    }
    free(d->v);
    memset(d, 0, sizeof *d);
}

/* ===== content and reasoning text ===== */

/* text decided to be content: given out except what the turn's end may trim */
static bool content_add(nx_tool_stream *s, const char *p, size_t n, bool final, nx_tool_deltas *out) {
    if (s->skip_ws) {
        while (n && isspace((unsigned char)*p)) { p++; n--; }
        if (!n && !s->hold.n) return true;
        if (n) s->skip_ws = false;
    }
    if (n) s->content_started = true;
    if (!buf_add(&s->hold, p, n)) return false;
    /* without calls the content is the text as generated: nothing trimmed at its end */
    size_t give = s->hold.n - (s->o.calls ? nx_chat_trimmable_tail(s->hold.p, s->hold.n, final) : 0);
    if (!out_text(out, NX_TOOL_DELTA_CONTENT, s->hold.p, give)) return false;
    buf_drop(&s->hold, final ? s->hold.n : give);   /* at the end the trimmable tail is dropped */
    return true;
}

/* reasoning text out: as reasoning, or as content inside the block's tags (opts.reasoning_in_content) */
static bool reasoning_out(nx_tool_stream *s, const char *p, size_t n, nx_tool_deltas *out) {
    if (!n) return true;
    if (!s->o.reasoning_in_content) return out_text(out, NX_TOOL_DELTA_REASONING, p, n);
    if (!s->rc_open) {
        s->rc_open = true;
        if (!out_text(out, NX_TOOL_DELTA_CONTENT, s->closer && !strcmp(s->closer, "<channel|>") ? "<|channel>thought" : "<think>",
                      s->closer && !strcmp(s->closer, "<channel|>") ? 17 : 7)) return false;
    }
    return out_text(out, NX_TOOL_DELTA_CONTENT, p, n);
}

static bool reasoning_add(nx_tool_stream *s, const char *p, size_t n, nx_tool_deltas *out) {
    if (!s->reasoning_started) {
        while (n && isspace((unsigned char)*p)) { p++; n--; }
        if (!n) return true;
        s->reasoning_started = true;
    }
    if (!buf_add(&s->rhold, p, n)) return false;
    size_t e = s->rhold.n;
    while (e && isspace((unsigned char)s->rhold.p[e - 1])) e--;
    if (!reasoning_out(s, s->rhold.p, e, out)) return false;
    buf_drop(&s->rhold, e);
    return true;
}

/* ===== calls ===== */
static const char *fn_str(const cJSON *call, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(call, "function"), key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static bool is_duplicate(const nx_tool_stream *s, const cJSON *call) {
    const cJSON *e;
    cJSON_ArrayForEach(e, s->calls)
        if (!strcmp(fn_str(e, "name"), fn_str(call, "name")) && !strcmp(fn_str(e, "arguments"), fn_str(call, "arguments"))) return true;
    return false;
}

/* Parse text as the non-streaming parser does and give out what it finds; *n_found = calls in
 * it (kept or dropped as duplicates). */
static bool parse_piece(nx_tool_stream *s, const char *p, size_t n, bool final, nx_tool_deltas *out, int *n_found) {
    nx_chat_parsed r;
    if (nx_chat_parse_output(p, n, s->o.tools, &r, NULL) != NX_OK) return false;
    bool ok = true;
    *n_found = cJSON_GetArraySize(r.tool_calls);
    if (*n_found && r.reasoning && s->o.reasoning) ok = out_text(out, NX_TOOL_DELTA_REASONING, r.reasoning, strlen(r.reasoning));
    if (ok && *n_found) ok = content_add(s, r.content, strlen(r.content), final, out);
    cJSON *c;
    while (ok && r.tool_calls && (c = cJSON_DetachItemFromArray(r.tool_calls, 0))) {
        if (is_duplicate(s, c) || (!s->o.parallel && s->n_calls > 0)) { cJSON_Delete(c); continue; }
        char id[32];
        snprintf(id, sizeof id, "call_%d", s->n_calls + 1);
        cJSON *copy = cJSON_Duplicate(c, 1);
        ok = copy && cJSON_ReplaceItemInObjectCaseSensitive(c, "id", cJSON_CreateString(id)) &&
             cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_CreateString(id));
        if (!ok) { cJSON_Delete(c); cJSON_Delete(copy); break; }
        cJSON_AddItemToArray(s->calls, copy);
        ok = out_call(out, s->n_calls++, c);
    }
    nx_chat_parsed_free(&r);
    return ok;
}

/* ===== a call streamed while generated ===== */
static cJSON *call_json(const char *id, const char *name, const char *args, size_t n) {
    cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
    char *a = malloc(n + 1);
    if (!c || !f || !a) { cJSON_Delete(c); cJSON_Delete(f); free(a); return NULL; }
    memcpy(a, args, n);
    a[n] = 0;
    if (id) cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", a);
    cJSON_AddItemToObject(c, "function", f);
    free(a);
    return c;
}

/* the arguments so far may still become those of an earlier call of the same name (a
 * duplicate, dropped at its end): nothing of it goes out yet */
static bool may_be_duplicate(const nx_tool_stream *s, const char *name, bool done) {
    const cJSON *e;
    cJSON_ArrayForEach(e, s->calls) {
        const char *a = fn_str(e, "arguments");
        if (strcmp(fn_str(e, "name"), name)) continue;
        if (done ? strlen(a) == s->canon.n && !memcmp(a, s->canon.p, s->canon.n)
                 : strlen(a) >= s->canon.n && !memcmp(a, s->canon.p, s->canon.n)) return true;
    }
    return false;
}

/* New argument text of the streamed call -> its header (once it cannot be a duplicate) and
 * argument pieces; done: the call is complete. */
static bool args_out(nx_tool_stream *s, bool done, nx_tool_deltas *out) {
    size_t n;
    const char *t = nx_tool_args_take(s->args, &n);
    if (!buf_add(&s->canon, t, n)) return false;
    const char *name = nx_tool_args_name(s->args);
    if (!s->announced && !s->dropped) {
        if (!s->o.parallel && s->n_calls > 0) s->dropped = true;
        else if (may_be_duplicate(s, name, done)) { if (done) s->dropped = true; }
        else {
            char id[32];
            snprintf(id, sizeof id, "call_%d", s->n_calls + 1);
            cJSON *c = call_json(id, name, s->canon.p, s->canon.n);
            if (!c) return false;
            s->call_index = s->n_calls++;
            s->announced = true;
            s->canon_sent = s->canon.n;
            if (!out_call(out, s->call_index, c)) return false;
        }
    } else if (s->announced) {
        if (!out_args(out, s->call_index, s->canon.p + s->canon_sent, s->canon.n - s->canon_sent)) return false;
        s->canon_sent = s->canon.n;
    }
    if (done && s->announced) {
        cJSON *c = call_json(NULL, name, s->canon.p, s->canon.n);
        if (!c) return false;
        cJSON_AddItemToArray(s->calls, c);
    }
    return true;
}

static void args_reset(nx_tool_stream *s) {
    nx_tool_args_free(s->args);
    s->args = NULL;
    s->args_refused = s->announced = s->dropped = false;
    buf_drop(&s->canon, s->canon.n);
    s->canon_sent = 0;
}

/* ===== the modes ===== */

/* Content: find the first opener; text before it is content. */
static bool step_content(nx_tool_stream *s, bool final, nx_tool_deltas *out, bool *progress) {
    buf *pd = &s->pend;
    /* Llama's bare JSON call is the whole turn: a turn that starts with it is read to the end */
    if (s->o.calls && s->n_calls == 0 && !s->content_started) {
        size_t i = 0;
        while (i < pd->n && isspace((unsigned char)pd->p[i])) i++;
        size_t rest = pd->n - i, tl = sizeof PYTHON_TAG - 1;
        if (rest && (pd->p[i] == '{' || (rest >= tl && !memcmp(pd->p + i, PYTHON_TAG, tl)))) {
            s->mode = M_TURN;
            if (!buf_add(&s->blk, pd->p, pd->n)) return false;
            buf_drop(pd, pd->n);
            *progress = true;
            return true;
        }
        if (!final && rest && rest < tl && !memcmp(pd->p + i, PYTHON_TAG, rest)) return true;   /* wait */
    }
    const trigger *best = NULL;
    size_t at = 0;
    for (int t = 0; t < N_TRIGGERS; t++) {
        if (!trigger_active(s, &TRIGGERS[t])) continue;
        size_t lim = best ? at + strlen(TRIGGERS[t].text) : pd->n;   /* only an earlier start can win */
        const char *f = find(pd->p, lim < pd->n ? lim : pd->n, TRIGGERS[t].text);
        if (f && (!best || (size_t)(f - pd->p) < at)) { best = &TRIGGERS[t]; at = (size_t)(f - pd->p); }
    }
    if (!best) {
        size_t keep = 0;
        if (!final)
            for (int t = 0; t < N_TRIGGERS; t++)
                if (trigger_active(s, &TRIGGERS[t])) {
                    size_t k = nx_chat_partial_len(pd->p, pd->n, TRIGGERS[t].text);
                    if (k > keep) keep = k;
                }
        if (!content_add(s, pd->p, pd->n - keep, final, out)) return false;
        buf_drop(pd, pd->n - keep);
        return true;
    }
    if (!content_add(s, pd->p, at, false, out)) return false;
    size_t tl = strlen(best->text);
    *progress = true;
    switch (best->kind) {
    case T_THINK_CLOSE:
        /* the turn started inside a block the prompt opened: what came before was reasoning
         * (only space, or content already given out: then the tag only ends detection) */
        if (!s->content_started) buf_drop(&s->hold, s->hold.n);
        s->reasoning_done = true;
        if (!s->o.calls && !s->content_started) s->skip_ws = true;
        buf_drop(pd, at + tl);
        return true;
    case T_THINK_OPEN:
    case T_CHANNEL_OPEN:
        s->mode = M_REASONING;
        s->closer = best->closer;
        buf_drop(pd, at + tl);
        return true;
    default:
        s->mode = M_BLOCK;
        s->blk_kind = best->kind;
        s->closer = best->closer;
        s->opener_len = tl;
        s->scanned = tl;
        args_reset(s);
        buf_drop(&s->blk, s->blk.n);
        if (!buf_add(&s->blk, pd->p + at, pd->n - at)) return false;
        buf_drop(pd, pd->n);
        return true;
    }
}

static bool step_reasoning(nx_tool_stream *s, bool final, nx_tool_deltas *out, bool *progress) {
    buf *pd = &s->pend;
    /* A model that skips the thinking the prompt opened and starts with a call: the block is over
     * (without this its call would stream as reasoning). */
    if (s->forced && s->o.calls && !s->reasoning_started) {
        size_t i = 0;
        while (i < pd->n && isspace((unsigned char)pd->p[i])) i++;
        for (int t = 0; t < N_TRIGGERS && i < pd->n; t++) {
            const trigger *tr = &TRIGGERS[t];
            if (tr->kind != T_CALL_XMLJSON && tr->kind != T_CALL_BARE_XML && strcmp(tr->text, "<|tool_call>")) continue;
            size_t tl = strlen(tr->text), k = pd->n - i < tl ? pd->n - i : tl;
            if (memcmp(pd->p + i, tr->text, k)) continue;
            if (k < tl && !final) return true;   /* wait: it may become the opener */
            if (k == tl) {
                s->mode = M_CONTENT;
                s->reasoning_done = true;
                *progress = true;
                return true;
            }
        }
    }
    const char *c = find(pd->p, pd->n, s->closer);
    if (c) {
        size_t at = (size_t)(c - pd->p);
        if (!reasoning_add(s, pd->p, at, out)) return false;
        buf_drop(&s->rhold, s->rhold.n);   /* trailing space of the block */
        if (s->rc_open && !out_text(out, NX_TOOL_DELTA_CONTENT, s->closer, strlen(s->closer))) return false;
        s->rc_open = false;
        buf_drop(pd, at + strlen(s->closer));
        s->mode = M_CONTENT;
        s->reasoning_done = true;
        if (!s->o.calls) s->skip_ws = true;   /* llama.cpp: the space after </think> is no content */
        *progress = true;
        return true;
    }
    size_t keep = final ? 0 : nx_chat_partial_len(pd->p, pd->n, s->closer);
    if (!reasoning_add(s, pd->p, pd->n - keep, out)) return false;
    buf_drop(pd, pd->n - keep);
    return true;
}

/* A block that is not a call: its opener is content and the rest is read again as content. */
static bool block_reject(nx_tool_stream *s, nx_tool_deltas *out) {
    if (!content_add(s, s->blk.p, s->opener_len, false, out)) return false;
    buf rest = {0};
    if (!buf_add(&rest, s->blk.p + s->opener_len, s->blk.n - s->opener_len) || !buf_add(&rest, s->pend.p, s->pend.n)) {
        buf_free(&rest);
        return false;
    }
    buf_free(&s->pend);
    s->pend = rest;
    buf_drop(&s->blk, s->blk.n);
    s->mode = M_CONTENT;
    return true;
}

static bool step_block(nx_tool_stream *s, bool final, nx_tool_deltas *out, bool *progress) {
    if (!buf_add(&s->blk, s->pend.p, s->pend.n)) return false;
    buf_drop(&s->pend, s->pend.n);
    if (s->blk_kind == T_CALL_GEMMA) {   /* a Gemma call's body starts with "call:" */
        size_t i = s->opener_len;
        while (i < s->blk.n && isspace((unsigned char)s->blk.p[i])) i++;
        size_t k = s->blk.n - i < 5 ? s->blk.n - i : 5;
        if (memcmp(s->blk.p + i, "call:", k) != 0) { *progress = true; return block_reject(s, out); }
    }
    size_t cl = strlen(s->closer), from = s->scanned;
    const char *c = find(s->blk.p + from, s->blk.n - from, s->closer);
    if (!c) {
        s->scanned = s->blk.n >= cl ? s->blk.n - cl + 1 : 0;
        if (s->scanned < s->opener_len) s->scanned = s->opener_len;
    }
    size_t end = c ? (size_t)(c - s->blk.p) + cl : s->blk.n;
    /* an XML-parameter call streams while generated; other blocks are parsed whole below */
    if ((s->blk_kind == T_CALL_XMLJSON || s->blk_kind == T_CALL_BARE_XML) && !s->args_refused) {
        bool bare = s->blk_kind == T_CALL_BARE_XML;
        if (!s->args && !(s->args = nx_tool_args_new(s->o.tools, bare))) return false;
        const char *body = s->blk.p + s->opener_len;
        size_t bn = c ? (size_t)(c - body) : s->blk.n - s->opener_len;
        if (!c && !final) bn -= nx_chat_partial_len(body, bn, s->closer);
        nx_tool_args_end ae = c ? NX_TOOL_ARGS_CLOSED : final ? NX_TOOL_ARGS_TURN_END : NX_TOOL_ARGS_MORE;
        nx_tool_args_state st;
        if (nx_tool_args_step(s->args, body, bn, ae, &st, NULL) != NX_OK) return false;
        if (st == NX_TOOL_ARGS_REFUSED) {
            nx_tool_args_free(s->args);
            s->args = NULL;
            s->args_refused = true;
        } else if (st == NX_TOOL_ARGS_NAMED) {
            if (!args_out(s, ae != NX_TOOL_ARGS_MORE, out)) return false;
            if (ae == NX_TOOL_ARGS_MORE) return true;
            *progress = true;
            args_reset(s);
            if (!buf_add(&s->pend, s->blk.p + end, s->blk.n - end)) return false;
            buf_drop(&s->blk, s->blk.n);
            s->mode = M_CONTENT;
            return true;
        }
    }
    if (!c && !final) return true;
    *progress = true;
    int found = 0;
    if (!parse_piece(s, s->blk.p, end, false, out, &found)) return false;
    if (!found) return block_reject(s, out);
    /* the text after the closer is content again */
    if (!buf_add(&s->pend, s->blk.p + end, s->blk.n - end)) return false;
    buf_drop(&s->blk, s->blk.n);
    s->mode = M_CONTENT;
    return true;
}

static nx_status run(nx_tool_stream *s, bool final, nx_tool_deltas *out, nx_error *err) {
    for (;;) {
        bool progress = false, ok = true;
        switch (s->mode) {
        case M_CONTENT: ok = step_content(s, final, out, &progress); break;
        case M_REASONING: ok = step_reasoning(s, final, out, &progress); break;
        case M_BLOCK: ok = step_block(s, final, out, &progress); break;
        case M_TURN:
            ok = buf_add(&s->blk, s->pend.p, s->pend.n);
            buf_drop(&s->pend, s->pend.n);
            if (ok && final) {
                int found;
                ok = parse_piece(s, s->blk.p, s->blk.n, true, out, &found);
                if (ok && !found) ok = content_add(s, s->blk.p, s->blk.n, true, out);   /* plain JSON content */
                buf_drop(&s->blk, s->blk.n);
                s->mode = M_CONTENT;
            }
            break;
        }
        if (!ok) return oom(err);
        if (!progress) break;
    }
    if (final && !content_add(s, "", 0, true, out)) return oom(err);   /* drop the trimmable tail */
    return NX_OK;
}

/* ===== API ===== */
nx_tool_stream *nx_tool_stream_new(const nx_tool_stream_opts *opts) {
    nx_tool_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o = *opts;
    s->skip_ws = opts->calls;   /* the non-streaming parse trims the content of a turn with calls */
    s->calls = cJSON_CreateArray();
    if (!s->calls) { free(s); return NULL; }
    if (opts->reasoning && opts->in_reasoning != NX_TOOL_REASONING_CLOSED) {
        s->mode = M_REASONING;
        s->closer = opts->in_reasoning == NX_TOOL_REASONING_CHANNEL ? "<channel|>" : "</think>";
        s->forced = true;
    }
    return s;
}

void nx_tool_stream_free(nx_tool_stream *s) {
    if (!s) return;
    buf_free(&s->pend);
    buf_free(&s->hold);
    buf_free(&s->rhold);
    buf_free(&s->blk);
    buf_free(&s->canon);
    nx_tool_args_free(s->args);
    cJSON_Delete(s->calls);
    free(s);
}

nx_status nx_tool_stream_feed(nx_tool_stream *s, const char *text, size_t n, nx_tool_deltas *out, nx_error *err) {
    if (s->finished) return nx_fail(err, NX_ERR_INVALID_ARG, "the tool-call stream has ended");
    if (!buf_add(&s->pend, text, n)) return oom(err);
    return run(s, false, out, err);
}

nx_status nx_tool_stream_finish(nx_tool_stream *s, nx_tool_deltas *out, nx_error *err) {
    if (s->finished) return NX_OK;
    s->finished = true;
    return run(s, true, out, err);
}

int nx_tool_stream_n_calls(const nx_tool_stream *s) { return s->n_calls; }

nx_tool_reasoning_open nx_tool_reasoning_open_at(const char *prompt, size_t n) {
    while (n && isspace((unsigned char)prompt[n - 1])) n--;
    if (n >= 7 && !memcmp(prompt + n - 7, "<think>", 7)) return NX_TOOL_REASONING_THINK;
    if (n >= 15 && !memcmp(prompt + n - 15, "channel>thought", 15)) return NX_TOOL_REASONING_CHANNEL;
    return NX_TOOL_REASONING_CLOSED;
}
