/*
 * fuzz_tool_stream.c — libFuzzer target for the incremental tool-call parser (src/chat/tool_stream.c).
 *
 * Input: one options byte (bit 0: tools given, bit 1: reasoning, bit 2: parallel, bits 3-4: the
 * turn starts inside <think> / Gemma's channel, bit 5: calls off), then the model's text. The
 * text is fed whole, byte by byte, and in pieces whose sizes come from the text itself. Promises
 * checked (a broken one traps): no error; the three feedings give the same content, reasoning
 * and calls; every call has id call_<index+1> and a name; argument pieces belong to the last
 * call; indices count up from 0; at the end every call's arguments are a JSON object's text and
 * no two calls are equal.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/tool_stream.h"

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"opts\":{\"type\":\"object\"}}}}}]";

typedef struct text { char *p; size_t n; } text;

static void add(text *t, const char *p, size_t n) {
    char *q = realloc(t->p, t->n + n + 1);
    if (!q) __builtin_trap();
    memcpy(q + t->n, p, n);
    t->n += n;
    q[t->n] = 0;
    t->p = q;
}

typedef struct result { text content, reasoning; cJSON *calls; } result;

static void take(result *r, nx_tool_deltas *d) {
    for (int i = 0; i < d->n; i++) {
        const nx_tool_delta *x = &d->v[i];
        if (x->kind == NX_TOOL_DELTA_CONTENT) add(&r->content, x->text, x->len);
        else if (x->kind == NX_TOOL_DELTA_REASONING) add(&r->reasoning, x->text, x->len);
        else if (x->kind == NX_TOOL_DELTA_ARGS) {   /* pieces of the last call's arguments */
            cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r->calls, x->index), "function");
            if (!f || x->index != cJSON_GetArraySize(r->calls) - 1) __builtin_trap();
            text a = {0};
            const char *was = cJSON_GetObjectItemCaseSensitive(f, "arguments")->valuestring;
            add(&a, was, strlen(was));
            add(&a, x->text, x->len);
            cJSON_ReplaceItemInObjectCaseSensitive(f, "arguments", cJSON_CreateString(a.p));
            free(a.p);
        } else {
            if (x->index != cJSON_GetArraySize(r->calls)) __builtin_trap();
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(x->call, "function");
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(x->call, "id");
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name"), *a = cJSON_GetObjectItemCaseSensitive(f, "arguments");
            char want[32];
            snprintf(want, sizeof want, "call_%d", x->index + 1);
            if (!cJSON_IsString(id) || strcmp(id->valuestring, want) || !cJSON_IsString(nm) || !cJSON_IsString(a)) __builtin_trap();
            cJSON_AddItemToArray(r->calls, cJSON_Duplicate(x->call, 1));
        }
    }
    nx_tool_deltas_clear(d);
}

/* the finished calls: arguments a JSON object's text, no two equal */
static void check_calls(const cJSON *calls) {
    const cJSON *c, *e;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const char *nm = cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring, *a = cJSON_GetObjectItemCaseSensitive(f, "arguments")->valuestring;
        cJSON *obj = cJSON_Parse(a);
        if (!cJSON_IsObject(obj)) __builtin_trap();
        cJSON_Delete(obj);
        cJSON_ArrayForEach(e, calls) {
            if (e == c) break;
            const cJSON *g = cJSON_GetObjectItemCaseSensitive(e, "function");
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(g, "name")->valuestring, nm) &&
                !strcmp(cJSON_GetObjectItemCaseSensitive(g, "arguments")->valuestring, a)) __builtin_trap();
        }
    }
}

/* piece: 0 = whole, 1 = byte by byte, 2 = sizes from the text */
static result run(const nx_tool_stream_opts *o, const char *p, size_t n, int piece) {
    result r = { {0}, {0}, cJSON_CreateArray() };
    nx_tool_stream *s = nx_tool_stream_new(o);
    if (!s || !r.calls) __builtin_trap();
    nx_tool_deltas d = {0};
    nx_error err = {0};
    for (size_t at = 0; at < n;) {
        size_t k = piece == 0 ? n - at : piece == 1 ? 1 : 1 + (size_t)((unsigned char)p[at] % 7);
        if (k > n - at) k = n - at;
        if (nx_tool_stream_feed(s, p + at, k, &d, &err) != NX_OK) __builtin_trap();
        take(&r, &d);
        at += k;
    }
    if (nx_tool_stream_finish(s, &d, &err) != NX_OK) __builtin_trap();
    take(&r, &d);
    if (o->calls && nx_tool_stream_n_calls(s) != cJSON_GetArraySize(r.calls)) __builtin_trap();
    check_calls(r.calls);
    nx_tool_stream_free(s);
    return r;
}

static bool same_text(const text *a, const text *b) { return a->n == b->n && (!a->n || !memcmp(a->p, b->p, a->n)); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned f = data[0];
    cJSON *tools = (f & 1) ? cJSON_Parse(TOOLS) : NULL;
    nx_tool_stream_opts o = { .tools = tools, .calls = !(f & 32), .reasoning = (f & 2) != 0, .parallel = (f & 4) != 0,
                              .in_reasoning = (nx_tool_reasoning_open)((f >> 3) & 3) % 3 };
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    result r0 = run(&o, p, n, 0);
    for (int piece = 1; piece <= 2; piece++) {
        result r = run(&o, p, n, piece);
        if (!same_text(&r.content, &r0.content) || !same_text(&r.reasoning, &r0.reasoning) || !cJSON_Compare(r.calls, r0.calls, 1))
            __builtin_trap();
        free(r.content.p); free(r.reasoning.p); cJSON_Delete(r.calls);
    }
    free(r0.content.p); free(r0.reasoning.p); cJSON_Delete(r0.calls);
    cJSON_Delete(tools);
    return 0;
}
