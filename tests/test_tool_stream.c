/*
 * test_tool_stream.c — the incremental tool-call parser (src/chat/tool_stream.c).
 *
 * 1. Equivalence: every tool_segments.json segment (what the real templates write for an
 *    assistant turn with calls) and a set of hand-written turns, split at every byte position,
 *    fed byte by byte and in random pieces: the concatenated deltas equal nx_chat_parse_output's
 *    content and reasoning, the calls (a CALL delta plus its ARGS pieces) equal its calls (ids
 *    included); also 400 random XML calls whose values are made of tag pieces.
 * 2. Timeliness: content comes out as soon as it cannot be the start of a tag; an XML call as
 *    soon as its name is complete, then its arguments piece by piece; another call as soon as its
 *    closer arrives; reasoning while it is generated (or as content: reasoning_in_content).
 */
#include "test.h"
#include "core/io.h"
#include "chat/tool_parse.h"
#include "chat/tool_stream.h"

#define DATA NX_SOURCE_DIR "/tests/data/chat"

typedef struct result { char *content, *reasoning; cJSON *calls; int order_err; } result;

static void result_free(result *r) { free(r->content); free(r->reasoning); cJSON_Delete(r->calls); memset(r, 0, sizeof *r); }

static void append(char **s, const char *p, size_t n) {
    size_t l = *s ? strlen(*s) : 0;
    *s = realloc(*s, l + n + 1);
    memcpy(*s + l, p, n);
    (*s)[l + n] = 0;
}

static void collect(result *r, nx_tool_deltas *d) {
    for (int i = 0; i < d->n; i++) {
        nx_tool_delta *x = &d->v[i];
        if (x->kind == NX_TOOL_DELTA_CONTENT) append(&r->content, x->text, x->len);
        else if (x->kind == NX_TOOL_DELTA_REASONING) append(&r->reasoning, x->text, x->len);
        else if (x->kind == NX_TOOL_DELTA_ARGS) {   /* pieces of the last call's arguments */
            cJSON *f = cJSON_GetObjectItem(cJSON_GetArrayItem(r->calls, x->index), "function");
            if (!f || x->index != cJSON_GetArraySize(r->calls) - 1) { r->order_err++; continue; }
            char *a = strdup(cJSON_GetObjectItem(f, "arguments")->valuestring);
            append(&a, x->text, x->len);
            cJSON_ReplaceItemInObject(f, "arguments", cJSON_CreateString(a));
            free(a);
        } else {
            if (!r->calls) r->calls = cJSON_CreateArray();
            if (x->index != cJSON_GetArraySize(r->calls)) r->order_err++;
            cJSON_AddItemToArray(r->calls, cJSON_Duplicate(x->call, 1));
        }
    }
    nx_tool_deltas_clear(d);
}

/* Feed text cut at the given positions (ascending, inside (0, n)). */
static result run_stream(const char *text, size_t n, const size_t *cuts, int n_cuts, const cJSON *tools,
                         nx_tool_reasoning_open open) {
    nx_tool_stream_opts o = { .tools = tools, .calls = true, .reasoning = true, .parallel = true, .in_reasoning = open };
    nx_tool_stream *s = nx_tool_stream_new(&o);
    result r = {0};
    nx_tool_deltas d = {0};
    size_t at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t e = i < n_cuts ? cuts[i] : n;
        if (nx_tool_stream_feed(s, text + at, e - at, &d, NULL) != NX_OK) r.order_err++;
        collect(&r, &d);
        at = e;
    }
    if (nx_tool_stream_finish(s, &d, NULL) != NX_OK) r.order_err++;
    collect(&r, &d);
    nx_tool_stream_free(s);
    return r;
}

static bool same(const result *r, const nx_chat_parsed *p) {
    const char *rc = r->content ? r->content : "", *rr = r->reasoning ? r->reasoning : "";
    const char *pr = p->reasoning ? p->reasoning : "";
    bool calls_eq = (!r->calls && !p->tool_calls) || (r->calls && p->tool_calls && cJSON_Compare(r->calls, p->tool_calls, 1));
    return !r->order_err && !strcmp(rc, p->content) && !strcmp(rr, pr) && calls_eq;
}

static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;
static unsigned rnd(unsigned m) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(rng_state >> 33) % m;
}

static int n_checked;

/* One turn under every way of splitting it. */
static void check_turn(const char *name, const char *text, const cJSON *tools, nx_tool_reasoning_open open) {
    size_t n = strlen(text);
    nx_chat_parsed want;
    REQUIRE_MSG(nx_chat_parse_output(text, n, tools, &want, NULL) == NX_OK, "parse");
    size_t *cuts = malloc((n + 1) * sizeof *cuts);
    int bad = 0;
    /* whole, then two pieces at every position */
    for (size_t k = 0; k <= n && bad < 3; k++) {
        size_t c = k;
        result r = run_stream(text, n, &c, k > 0 && k < n ? 1 : 0, tools, open);
        if (!same(&r, &want)) {
            char *g = r.calls ? cJSON_PrintUnformatted(r.calls) : NULL, *w = want.tool_calls ? cJSON_PrintUnformatted(want.tool_calls) : NULL;
            CHECK_MSG(0, "%s: cut at %zu: content [%s] reasoning [%s] calls %s; want [%s] [%s] %s", name, k,
                      r.content ? r.content : "", r.reasoning ? r.reasoning : "", g ? g : "null", want.content,
                      want.reasoning ? want.reasoning : "", w ? w : "null");
            free(g); free(w);
            bad++;
        }
        result_free(&r);
        n_checked++;
    }
    /* byte by byte */
    for (size_t k = 1; k < n; k++) cuts[k - 1] = k;
    result r = run_stream(text, n, cuts, n > 1 ? (int)n - 1 : 0, tools, open);
    CHECK_MSG(same(&r, &want), "%s: byte by byte: content [%s]", name, r.content ? r.content : "");
    result_free(&r);
    /* random pieces of 1..12 bytes */
    for (int t = 0; t < 30; t++) {
        int nc = 0;
        for (size_t at = 1 + rnd(12); at < n; at += 1 + rnd(12)) cuts[nc++] = at;
        r = run_stream(text, n, cuts, nc, tools, open);
        CHECK_MSG(same(&r, &want), "%s: random pieces (try %d): content [%s]", name, t, r.content ? r.content : "");
        result_free(&r);
        n_checked++;
    }
    free(cuts);
    nx_chat_parsed_free(&want);
}

static char *read_data(const char *rel) {
    char path[1024], *b = NULL;
    size_t n;
    snprintf(path, sizeof path, DATA "/%s", rel);
    return nx_read_file(path, 1 << 22, &b, &n, NULL) == NX_OK ? b : NULL;
}

/* ===== 1. the templates' tool segments ===== */
static void test_segments(void) {
    char *sb = read_data("tool_segments.json"), *cb = read_data("cases.json");
    REQUIRE_MSG(sb && cb, "data");
    cJSON *segs = cJSON_Parse(sb), *cases = cJSON_Parse(cb);
    free(sb); free(cb);
    int n = 0, with_calls = 0;
    const cJSON *s, *c;
    cJSON_ArrayForEach(s, segs) {
        const char *tname = cJSON_GetObjectItem(s, "template")->valuestring, *name = cJSON_GetObjectItem(s, "name")->valuestring;
        const char *seg = cJSON_GetObjectItem(s, "segment")->valuestring;
        const cJSON *tools = NULL;
        cJSON_ArrayForEach(c, cases)
            if (!strcmp(cJSON_GetObjectItem(c, "template")->valuestring, tname) && !strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name))
                tools = cJSON_GetObjectItem(c, "tools");
        char label[256];
        snprintf(label, sizeof label, "%s/%s", tname, name);
        check_turn(label, seg, tools, NX_TOOL_REASONING_CLOSED);
        /* Qwen3.5's turn starts inside the <think> the prompt opened */
        if (!strncmp(seg, "\n</think>", 9)) check_turn(label, seg, tools, NX_TOOL_REASONING_THINK);
        nx_chat_parsed p;
        if (nx_chat_parse_output(seg, strlen(seg), tools, &p, NULL) == NX_OK) {
            if (p.tool_calls) with_calls++;
            nx_chat_parsed_free(&p);
        }
        n++;
    }
    fprintf(stderr, "  %d segments (%d with calls), %d splits checked\n", n, with_calls, n_checked);
    CHECK(n >= 11 && with_calls >= 11);
    cJSON_Delete(segs);
    cJSON_Delete(cases);
}

/* ===== hand-written turns: formats, failures, markers in odd places ===== */
static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"n\":{\"type\":\"integer\"},\"s\":{\"type\":\"string\"},\"o\":{\"type\":\"object\"}}}}}]";

static void test_turns(void) {
    static const char *const turns[] = {
        "<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n<parameter=s>\n007\n</parameter>\n</function>\n</tool_call>",
        "<think>\nplan\n</think>\n\nOK <tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n</tool_call>",
        "<tool_call>\n{\"name\": broken\n</tool_call>",
        "<tool_call>\n{\"name\": broken\n</tool_call> then <tool_call>{\"name\": \"f\", \"arguments\": {\"n\": 2}}</tool_call> end",
        "<|tool_call>call:f{o:{k:[1,<|\"|>x,y<|\"|>]},n:3}<tool_call|>",
        "{\"name\": \"g\", \"parameters\": {}}",
        "  {\"name\": \"f\", \"parameters\": {\"n\": 2}}<|eot_id|>",
        "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"n\": 2}}",
        "<|pyt",
        "just text",
        "a < b and c <tool is not a tag, <|im_end|> in the middle, x</tool_call> stray closer",
        "Text\n\n<function=f>\n<parameter=n>\n5\n</parameter>\n</function>\n<|im_end|>\n",
        "Before <tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n</tool_call> between <tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 2}}\n</tool_call> after",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 7}}",   /* closer missing: runs to the end */
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 7}}<|im_end|>\n",
        "<|channel>thought\nthe plan<channel|>Answer.<turn|>",
        "<think>\n\n</think>\n\nHello <world>!<|im_end|>",
        "   \n\n",
        "",
        "<|im_end|>",
        "tool_call>call:f{n:1}<tool_call|>tool_call>nope<tool_call|>",
        "<tool_call><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
        "ünïcödé 🎉 <tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"é\"}}\n</tool_call>",
        /* XML calls (streamed as generated): markers in values, missing tags, typed values, duplicates */
        "<tool_call>\n<function=f>\n<parameter=s>\na \"quoted\"\tline\n\nand </function> inside\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=s>\nno close tag\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=s>\nrunning to the end  \n\n</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=s>\ncut short <|im_end|>\n",
        "<tool_call>\n<function=f>\n<parameter=s>x<parameter=n>12 apples</parameter><parameter=o>\n{\"a\": [1, 2]}\n</parameter></function></tool_call>",
        "<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n<parameter=zz",
        "<tool_call>\n<function=f><parameter=q>\n\n\n</parameter></function></tool_call><tool_call>\n<function=f><parameter=q>\n\n\n</parameter></function></tool_call>",
        "<tool_call><function=f><parameter=s>Paris</parameter></function></tool_call><tool_call><function=f><parameter=s>Paris</parameter></function></tool_call>"
        "<tool_call><function=f><parameter=s>Par</parameter></function></tool_call><tool_call><function=f><parameter=s>London</parameter></function></tool_call>",
        "<tool_call>\n<function=>\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n</tool_call>",
        "<tool_call>\n<function=g\n",
        "Text\n\n<function=f>\n<parameter=s>\nbare, to the end\n\n",
        "<function=f>\n<parameter=s>\n\x01ctl\x7f é\\ /\n</parameter>\n</function> after",
    };
    cJSON *tools = cJSON_Parse(TOOLS);
    for (size_t i = 0; i < sizeof turns / sizeof turns[0]; i++) {
        char label[32];
        snprintf(label, sizeof label, "turn %zu", i);
        check_turn(label, turns[i], tools, NX_TOOL_REASONING_CLOSED);
        check_turn(label, turns[i], NULL, NX_TOOL_REASONING_CLOSED);
    }
    /* the turn starts inside <think> */
    check_turn("open think", "thinking\n</think>\n\nHello<|im_end|>", NULL, NX_TOOL_REASONING_THINK);
    check_turn("open think + call", "step 1\nstep 2\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n</tool_call>",
               tools, NX_TOOL_REASONING_THINK);
    /* ... and the model skipped the thinking: its first text is a call */
    check_turn("open think skipped", "\n<tool_call>\n<function=f>\n<parameter=n>\n1\n</parameter>\n</function>\n</tool_call>",
               tools, NX_TOOL_REASONING_THINK);
    check_turn("open channel skipped", "<|tool_call>call:f{n:1}<tool_call|>", tools, NX_TOOL_REASONING_CHANNEL);
    cJSON_Delete(tools);
}

/* Random XML calls whose values are made of pieces of the tags themselves, whitespace, quotes,
 * backslashes, control bytes and UTF-8: the streamed arguments equal the parser's. */
static void test_xml_random(void) {
    static const char *const bits[] = { "<", ">", "/", "\n", " ", "\t", "\"", "\\", "a", "7", "é", "\x01", "</", "</param",
                                        "</parameter", "<parameter", "</function", "</function>", "<|im_end|>", "<|im_", "{\"k\": 1}", "\n\n" };
    static const char *const keys[] = { "s", "n", "o", "zz", "s" };
    cJSON *tools = cJSON_Parse(TOOLS);
    char text[2048];
    int before = n_checked;
    for (int t = 0; t < 400; t++) {
        size_t L = 0;
        bool bare = rnd(4) == 0;
        L += (size_t)snprintf(text + L, sizeof text - L, "%s<function=f>%s", bare ? "" : "<tool_call>\n", rnd(2) ? "\n" : "");
        int np = (int)rnd(4);
        for (int k = 0; k < np; k++) {
            L += (size_t)snprintf(text + L, sizeof text - L, "<parameter=%s>%s", keys[rnd(5)], rnd(2) ? "\n" : "");
            for (int b = (int)rnd(8); b > 0; b--) L += (size_t)snprintf(text + L, sizeof text - L, "%s", bits[rnd(sizeof bits / sizeof bits[0])]);
            if (rnd(5)) L += (size_t)snprintf(text + L, sizeof text - L, "%s</parameter>\n", rnd(2) ? "\n" : "");
        }
        int close = (int)rnd(5);   /* 0: the turn ends inside the call */
        if (close) L += (size_t)snprintf(text + L, sizeof text - L, "%s%s", rnd(4) ? "</function>\n" : "", bare ? "" : "</tool_call>");
        if (!bare && close && rnd(2)) L += (size_t)snprintf(text + L, sizeof text - L, " after");
        /* the tags the value may hold must not complete an end marker the parser strips first */
        if (!close && L >= 10 && !memcmp(text + L - 10, "<|im_end|>", 10)) continue;
        char label[32];
        snprintf(label, sizeof label, "xml random %d", t);
        nx_chat_parsed want;
        REQUIRE_MSG(nx_chat_parse_output(text, L, tools, &want, NULL) == NX_OK, "parse");
        bool has = want.tool_calls != NULL;
        nx_chat_parsed_free(&want);
        if (has) check_turn(label, text, tools, NX_TOOL_REASONING_CLOSED);
    }
    fprintf(stderr, "  %d splits of random XML calls checked\n", n_checked - before);
    cJSON_Delete(tools);
}

/* ===== 2. what comes out when ===== */
typedef struct feeder { nx_tool_stream *s; nx_tool_deltas d; } feeder;

/* feed and return what came out as "c:TEXT|r:TEXT|call:N:NAME" parts */
static char *feed(feeder *f, const char *text) {
    if (text) nx_tool_stream_feed(f->s, text, strlen(text), &f->d, NULL);
    else nx_tool_stream_finish(f->s, &f->d, NULL);
    char *o = calloc(1, 1);
    for (int i = 0; i < f->d.n; i++) {
        nx_tool_delta *x = &f->d.v[i];
        char head[96];
        if (x->kind == NX_TOOL_DELTA_CALL) {
            const cJSON *fn = cJSON_GetObjectItem(x->call, "function");
            snprintf(head, sizeof head, "%scall:%d:%s:%s:%s", i ? "|" : "", x->index, cJSON_GetObjectItem(x->call, "id")->valuestring,
                     cJSON_GetObjectItem(fn, "name")->valuestring, cJSON_GetObjectItem(fn, "arguments")->valuestring);
            append(&o, head, strlen(head));
        } else if (x->kind == NX_TOOL_DELTA_ARGS) {
            snprintf(head, sizeof head, "%sa:%d:", i ? "|" : "", x->index);
            append(&o, head, strlen(head));
            append(&o, x->text, x->len);
        } else {
            snprintf(head, sizeof head, "%s%s:", i ? "|" : "", x->kind == NX_TOOL_DELTA_CONTENT ? "c" : "r");
            append(&o, head, strlen(head));
            append(&o, x->text, x->len);
        }
    }
    nx_tool_deltas_clear(&f->d);
    return o;
}

#define FEED(f, text, want) do { char *_g = feed(&(f), text); CHECK_STR(_g, want); free(_g); } while (0)

static void test_timing(void) {
    cJSON *tools = cJSON_Parse(TOOLS);
    nx_tool_stream_opts o = { .tools = tools, .calls = true, .reasoning = true, .parallel = true };
    feeder f = { nx_tool_stream_new(&o), {0} };
    FEED(f, "\n\nChecking", "c:Checking");     /* leading space trimmed, text out at once */
    FEED(f, " the weather.\n", "c: the weather.");   /* trailing space held */
    FEED(f, "<tool_", "");
    FEED(f, "call>\n{\"name\": \"f\", ", "");
    FEED(f, "\"arguments\": {\"n\": 1}}\n</tool_call", "");
    FEED(f, ">", "call:0:call_1:f:{\"n\":1}");
    FEED(f, "\n<tool_call>{\"name\": \"f\", \"arguments\": {\"n\": 1}}</tool_call>", "");   /* duplicate dropped */
    FEED(f, "\n<tool_call>{\"name\": \"f\", \"arguments\": {\"n\": 2}}</tool_call>", "call:1:call_2:f:{\"n\":2}");
    FEED(f, "<|im_", "");
    FEED(f, "end|>\n", "");
    FEED(f, NULL, "");
    CHECK_EQ_INT(nx_tool_stream_n_calls(f.s), 2);
    nx_tool_stream_free(f.s);

    /* reasoning streams while generated; a '<' that cannot open a tag goes out with the next byte */
    o.in_reasoning = NX_TOOL_REASONING_THINK;
    f.s = nx_tool_stream_new(&o);
    FEED(f, "\nLet me think", "r:Let me think");
    FEED(f, ".\n\n</th", "r:.");
    FEED(f, "ink>\n\nx <", "c:x");
    FEED(f, "b", "c: <b");
    FEED(f, NULL, "");
    CHECK_EQ_INT(nx_tool_stream_n_calls(f.s), 0);
    nx_tool_stream_free(f.s);
    f.s = nx_tool_stream_new(&o);
    FEED(f, "\n<tool", "");   /* may be a call that skips the thinking */
    FEED(f, "s>", "r:<tools>");
    FEED(f, " <tool_call>x", "r: <tool_call>x");   /* inside the thinking a tag is text */
    FEED(f, NULL, "");
    nx_tool_stream_free(f.s);

    /* an XML call: its header as soon as the name is complete, then its arguments as they come */
    f.s = nx_tool_stream_new(&o);
    FEED(f, "<tool_call>\n<function=f", "");
    FEED(f, ">\n", "call:0:call_1:f:{");
    FEED(f, "<parameter=s>\nline 1\n", "a:0:\"s\":\"line 1");   /* the newline may be the value's last */
    FEED(f, "\"two\"", "a:0:\\n\\\"two\\\"");
    FEED(f, "\n</param", "");
    FEED(f, "eter>\n<parameter=n>\n4", "a:0:\",\"n\":");
    FEED(f, "2\n</parameter>\n", "a:0:42");   /* a typed value whole at its end */
    FEED(f, "</function>\n</tool_call>", "a:0:}");
    /* the same name again: held while it may still be a duplicate, then out at once */
    FEED(f, "<tool_call>\n<function=f>\n<parameter=s>\nline", "");
    FEED(f, " 9", "call:1:call_2:f:{\"s\":\"line 9");
    FEED(f, "\n</parameter>\n</function>\n</tool_call>", "a:1:\"}");
    FEED(f, "<tool_call>\n<function=f>\n<parameter=s>\nline 9\n</parameter>\n</function>\n</tool_call>", "");   /* a duplicate */
    FEED(f, NULL, "");
    CHECK_EQ_INT(nx_tool_stream_n_calls(f.s), 2);
    nx_tool_stream_free(f.s);

    /* reasoning in content (llama.cpp's streamed deepseek-legacy): trimmed, inside its tags */
    o = (nx_tool_stream_opts){ .tools = tools, .calls = true, .reasoning = true, .reasoning_in_content = true, .parallel = true,
                               .in_reasoning = NX_TOOL_REASONING_THINK };
    f.s = nx_tool_stream_new(&o);
    FEED(f, "\nplan", "c:<think>plan");
    FEED(f, " more\n</think>\n\nAnswer", "c: more</think>Answer");
    FEED(f, NULL, "");
    nx_tool_stream_free(f.s);
    o.in_reasoning = NX_TOOL_REASONING_CLOSED;
    f.s = nx_tool_stream_new(&o);
    FEED(f, "<|channel>thought\nx<channel|>y", "c:<|channel>thoughtx<channel|>y");
    FEED(f, "<think>left open", "c:<think>left open");   /* one block per turn: this one is content */
    FEED(f, NULL, "");
    nx_tool_stream_free(f.s);

    /* parallel off: only the first call; reasoning off: tags stay content */
    o = (nx_tool_stream_opts){ .tools = tools, .calls = true, .reasoning = false, .parallel = false };
    f.s = nx_tool_stream_new(&o);
    FEED(f, "<think>x</think><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "c:<think>x</think>|call:0:call_1:f:{}");
    FEED(f, "<tool_call>{\"name\": \"f\", \"arguments\": {\"n\": 3}}</tool_call>", "");
    FEED(f, "<tool_call><function=f><parameter=s>x</parameter></function></tool_call>", "");
    FEED(f, NULL, "");
    nx_tool_stream_free(f.s);

    /* calls off (a request without tools): the text as generated, less the reasoning */
    o = (nx_tool_stream_opts){ .calls = false, .reasoning = true };
    f.s = nx_tool_stream_new(&o);
    FEED(f, "\n<thi", "c:\n");
    FEED(f, "nk>\nplan\n</think>\n\n", "r:plan");
    FEED(f, "{\"name\": \"f\", ", "c:{\"name\": \"f\", ");
    FEED(f, "<tool_call> <|im_end|>\n", "c:<tool_call> <|im_end|>\n");
    FEED(f, "<think>x</think>", "c:<think>x</think>");   /* one reasoning block per turn */
    FEED(f, "<", "c:<");   /* no tag is left to wait for */
    FEED(f, NULL, "");
    /* feeding after the end is refused */
    nx_error err = {0};
    CHECK(nx_tool_stream_feed(f.s, "x", 1, &f.d, &err) == NX_ERR_INVALID_ARG);
    nx_tool_stream_free(f.s);
    cJSON_Delete(tools);

    static const char *const prompts[] = { "<|im_start|>assistant\n<think>\n", "<think>\n\n</think>\n\n", "<|turn>model\n<|channel>thought\n" };
    CHECK_EQ_INT(nx_tool_reasoning_open_at(prompts[0], strlen(prompts[0])), NX_TOOL_REASONING_THINK);
    CHECK_EQ_INT(nx_tool_reasoning_open_at(prompts[1], strlen(prompts[1])), NX_TOOL_REASONING_CLOSED);
    CHECK_EQ_INT(nx_tool_reasoning_open_at(prompts[2], strlen(prompts[2])), NX_TOOL_REASONING_CHANNEL);
}

int main(void) {
    RUN(test_timing);
    RUN(test_segments);
    RUN(test_turns);
    RUN(test_xml_random);
    return test_summary();
}
