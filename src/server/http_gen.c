/*
 * http_gen.c — the completion endpoints: /v1/chat/completions, /v1/completions (OpenAI) and
 * /completion (llama.cpp native). Parse (request.c) -> tokenize -> context check -> submit to the
 * backend -> either collect the whole answer or stream it as server-sent events.
 * Promises: a client that goes away cancels its generation within one poll interval (50 ms);
 * every request that reached the backend is counted in /metrics with the timings it reported
 * (cancelled ones too); the first event decides the HTTP status of a stream, later errors become
 * a `data: {"error":...}` chunk. Chat answers with tools or reasoning_format deepseek(-legacy) go through
 * the chat parser (chat/tool_stream.h) streaming or not, so both give the same message.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "server/http_impl.h"
#include "chat/tool_stream.h"

#define POLL_MS 50

typedef struct gen_ctx {
    nx_server *srv;
    struct MHD_Connection *conn;
    nx_api_kind kind;
    nx_api_request req;
    nx_gen_info info;
    nx_gen_stream *s;
    char id[48];
    long created;
    double t_arrival, t_first;
    int n_prompt;
    nx_sbuf content;            /* the whole answer (non-streaming) */
    nx_token *toks;             /* generated tokens (native "tokens") */
    int n_toks, cap_toks;
    int n_gen;                  /* token events seen */
    cJSON *probs;               /* accumulated logprob entries (non-streaming) */
    long text_offset;           /* completions logprobs: characters generated before the next token */
    bool finished;              /* the DONE / ERROR event was handled */
    bool failed;                /* ended with ERROR or was cancelled */
    nx_gen_finish finish;
    int stop_index;
    nx_gen_timings t;
    char err_msg[NX_ERROR_MSG_MAX];
    bool tool_calls;            /* the answer parsed into tool calls (finish_reason "tool_calls") */
    bool chat_parse;            /* chat with tools or reasoning_format deepseek: the answer is parsed */
    nx_tool_stream_opts chat_opts;
    nx_tool_stream *ts;         /* streaming chat_parse: the text parsed as it comes */
    nx_sbuf pending;            /* SSE bytes not yet handed to libmicrohttpd */
    size_t pending_off;
} gen_ctx;

/* ===== JSON pieces ===== */

static cJSON *timings_json(const nx_gen_timings *t) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "cache_n", t->cache_n);
    cJSON_AddNumberToObject(j, "prompt_n", t->prompt_n);
    cJSON_AddNumberToObject(j, "prompt_ms", t->prompt_ms);
    cJSON_AddNumberToObject(j, "prompt_per_token_ms", t->prompt_n ? t->prompt_ms / t->prompt_n : 0.0);
    cJSON_AddNumberToObject(j, "prompt_per_second", t->prompt_ms > 0 ? 1e3 * t->prompt_n / t->prompt_ms : 0.0);
    cJSON_AddNumberToObject(j, "predicted_n", t->predicted_n);
    cJSON_AddNumberToObject(j, "predicted_ms", t->predicted_ms);
    cJSON_AddNumberToObject(j, "predicted_per_token_ms", t->predicted_n ? t->predicted_ms / t->predicted_n : 0.0);
    cJSON_AddNumberToObject(j, "predicted_per_second", t->predicted_ms > 0 ? 1e3 * t->predicted_n / t->predicted_ms : 0.0);
    cJSON_AddNumberToObject(j, "draft_n", (double)t->draft_n);
    cJSON_AddNumberToObject(j, "draft_n_accepted", (double)t->draft_n_accepted);
    cJSON_AddNumberToObject(j, "draft_acceptance", t->draft_n ? (double)t->draft_n_accepted / (double)t->draft_n : 0.0);
    cJSON *d = cJSON_AddArrayToObject(j, "draft_by_depth");
    for (int i = 0; i < NX_SPEC_DRAFT_CAP && t->depth_drafted[i]; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "depth", i + 1);
        cJSON_AddNumberToObject(o, "n", (double)t->depth_drafted[i]);
        cJSON_AddNumberToObject(o, "accepted", (double)t->depth_accepted[i]);
        cJSON_AddItemToArray(d, o);
    }
    cJSON *st = cJSON_AddArrayToObject(j, "drafters");
    for (int s = 0; s < t->n_stages; s++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", t->stage[s].name);
        cJSON_AddNumberToObject(o, "draft_n", (double)t->stage[s].drafted);
        cJSON_AddNumberToObject(o, "draft_n_accepted", (double)t->stage[s].accepted);
        cJSON_AddItemToArray(st, o);
    }
    return j;
}

static cJSON *usage_json(const nx_gen_timings *t) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", t->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", t->predicted_n);
    cJSON_AddNumberToObject(u, "total_tokens", t->n_prompt + t->predicted_n);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", t->cache_n);
    return u;
}

static cJSON *bytes_array(const char *p, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)p[i]));
    return a;
}

/* One token's logprob entry in the endpoint's format. */
static cJSON *logprob_entry(gen_ctx *g, nx_token tok, float lp, const nx_gen_top *top, int n_top) {
    nx_gen_backend *be = g->srv->be;
    char *txt = NULL;
    size_t len = 0;
    be->ops->detokenize(be, &tok, 1, true, &txt, &len, NULL);
    cJSON *e = cJSON_CreateObject();
    if (g->kind == NX_API_NATIVE) cJSON_AddNumberToObject(e, "id", tok);
    cJSON_AddItemToObject(e, "token", nx_http_json_bytes(txt ? txt : "", len));
    cJSON_AddNumberToObject(e, "logprob", lp);
    cJSON_AddItemToObject(e, "bytes", bytes_array(txt ? txt : "", len));
    free(txt);
    cJSON *tl = cJSON_AddArrayToObject(e, "top_logprobs");
    for (int i = 0; i < n_top; i++) {
        char *tt = NULL;
        size_t tn = 0;
        be->ops->detokenize(be, &top[i].token, 1, true, &tt, &tn, NULL);
        cJSON *o = cJSON_CreateObject();
        if (g->kind == NX_API_NATIVE) cJSON_AddNumberToObject(o, "id", top[i].token);
        cJSON_AddItemToObject(o, "token", nx_http_json_bytes(tt ? tt : "", tn));
        cJSON_AddNumberToObject(o, "logprob", top[i].logprob);
        cJSON_AddItemToObject(o, "bytes", bytes_array(tt ? tt : "", tn));
        free(tt);
        cJSON_AddItemToArray(tl, o);
    }
    return e;
}

/* OpenAI completions use parallel arrays instead of entries: tokens, token_logprobs,
 * top_logprobs (one {token text: logprob} object per token) and text_offset (characters from the
 * start of the generated text; *offset carries the running count across streamed chunks). */
static cJSON *completions_logprobs(cJSON *entries, long *offset) {
    cJSON *o = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        cJSON_AddItemToArray(toks, cJSON_Duplicate(cJSON_GetObjectItem(e, "token"), true));
        cJSON_AddItemToArray(lps, cJSON_Duplicate(cJSON_GetObjectItem(e, "logprob"), true));
        cJSON *m = cJSON_CreateObject();
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(e, "top_logprobs")) {
            const cJSON *tk = cJSON_GetObjectItem(t, "token");
            cJSON *parsed = cJSON_IsRaw(tk) ? cJSON_Parse(tk->valuestring) : NULL;
            if (parsed && cJSON_IsString(parsed) && !cJSON_GetObjectItemCaseSensitive(m, parsed->valuestring))
                cJSON_AddNumberToObject(m, parsed->valuestring, cJSON_GetObjectItem(t, "logprob")->valuedouble);
            cJSON_Delete(parsed);
        }
        cJSON_AddItemToArray(tops, m);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*offset));
        /* characters = UTF-8 bytes that are not continuation bytes */
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(e, "bytes")) if (((int)b->valuedouble & 0xC0) != 0x80) (*offset)++;
    }
    return o;
}

static const char *stop_type(nx_gen_finish f) {
    switch (f) {
    case NX_GEN_FINISH_EOS: return "eos";
    case NX_GEN_FINISH_STOP: return "word";
    case NX_GEN_FINISH_LENGTH:
    case NX_GEN_FINISH_CONTEXT: return "limit";
    default: return "none";
    }
}

static cJSON *chunk_base(gen_ctx *g, const char *object) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", g->id);
    cJSON_AddStringToObject(j, "object", object);
    cJSON_AddNumberToObject(j, "created", (double)g->created);
    cJSON_AddStringToObject(j, "model", g->req.model ? g->req.model : g->info.alias);
    cJSON_AddStringToObject(j, "system_fingerprint", "nextn");
    return j;
}

/* The native endpoint's summary fields (final chunk / whole response). */
static void native_summary(gen_ctx *g, cJSON *j) {
    cJSON_AddNumberToObject(j, "id_slot", g->t.id_slot);
    cJSON_AddBoolToObject(j, "stop", true);
    cJSON_AddStringToObject(j, "model", g->info.alias);
    cJSON_AddNumberToObject(j, "tokens_predicted", g->t.predicted_n);
    cJSON_AddNumberToObject(j, "tokens_evaluated", g->t.n_prompt);
    cJSON_AddNumberToObject(j, "tokens_cached", g->t.n_prompt + g->t.predicted_n);
    cJSON_AddBoolToObject(j, "truncated", false);
    cJSON_AddStringToObject(j, "stop_type", stop_type(g->finish));
    const char *sw = g->finish == NX_GEN_FINISH_STOP && g->stop_index >= 0 && g->stop_index < g->req.gen.n_stop
                         ? g->req.stops[g->stop_index] : "";
    cJSON_AddItemToObject(j, "stopping_word", nx_http_json_bytes(sw, strlen(sw)));
    cJSON *gs = cJSON_AddObjectToObject(j, "generation_settings");
    cJSON_AddNumberToObject(gs, "n_predict", g->req.gen.n_predict);
    cJSON_AddNumberToObject(gs, "temperature", g->req.gen.sampling.temperature);
    cJSON_AddNumberToObject(gs, "top_k", g->req.gen.sampling.top_k);
    cJSON_AddNumberToObject(gs, "top_p", g->req.gen.sampling.top_p);
    cJSON_AddNumberToObject(gs, "min_p", g->req.gen.sampling.min_p);
    cJSON_AddNumberToObject(gs, "seed", g->req.gen.sampling.seed);
    cJSON_AddItemToObject(j, "timings", timings_json(&g->t));
}

/* ===== Streaming ===== */

static void sse_add(gen_ctx *g, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return;
    nx_sbuf_adds(&g->pending, "data: ");
    nx_sbuf_adds(&g->pending, s);
    nx_sbuf_adds(&g->pending, "\n\n");
    free(s);
}

/* A chunk carrying text (and, for one token, its logprob entry). */
static void stream_text(gen_ctx *g, const char *text, size_t n, cJSON *lp_entry, const nx_token *tok) {
    cJSON *j;
    if (g->kind == NX_API_NATIVE) {
        j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "content", nx_http_json_bytes(text, n));
        cJSON *ta = cJSON_AddArrayToObject(j, "tokens");
        if (tok) cJSON_AddItemToArray(ta, cJSON_CreateNumber(*tok));
        cJSON_AddBoolToObject(j, "stop", false);
        cJSON_AddNumberToObject(j, "index", 0);
        if (lp_entry) {
            cJSON *a = cJSON_AddArrayToObject(j, "completion_probabilities");
            cJSON_AddItemToArray(a, lp_entry);
        }
    } else if (g->kind == NX_API_CHAT) {
        j = chunk_base(g, "chat.completion.chunk");
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", 0);
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        cJSON_AddItemToObject(d, "content", nx_http_json_bytes(text, n));
        if (lp_entry) {
            cJSON *lp = cJSON_AddObjectToObject(ch, "logprobs");
            cJSON_AddItemToArray(cJSON_AddArrayToObject(lp, "content"), lp_entry);
        } else {
            cJSON_AddNullToObject(ch, "logprobs");
        }
        cJSON_AddNullToObject(ch, "finish_reason");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "choices"), ch);
    } else {
        j = chunk_base(g, "text_completion");
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddItemToObject(ch, "text", nx_http_json_bytes(text, n));
        cJSON_AddNumberToObject(ch, "index", 0);
        if (lp_entry) {
            cJSON *one = cJSON_CreateArray();
            cJSON_AddItemToArray(one, lp_entry);
            cJSON_AddItemToObject(ch, "logprobs", completions_logprobs(one, &g->text_offset));
            cJSON_Delete(one);
        } else {
            cJSON_AddNullToObject(ch, "logprobs");
        }
        cJSON_AddNullToObject(ch, "finish_reason");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "choices"), ch);
    }
    sse_add(g, j);
}

static cJSON *chat_delta(gen_ctx *g, cJSON *d) {
    cJSON *j = chunk_base(g, "chat.completion.chunk");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    cJSON_AddItemToObject(ch, "delta", d);
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "choices"), ch);
    return j;
}

/* What the chat parser decided, as OpenAI's deltas: text as content / reasoning_content; a call
 * as one chunk with index, id, type and name (arguments "") and one with its arguments so far,
 * then a chunk with index and an arguments piece for each further piece. A
 * token's logprob entry (taken) rides on the last chunk, or on an empty content delta when the
 * parser holds its text back. */
static void stream_chat_deltas(gen_ctx *g, nx_tool_deltas *ds, cJSON *lp) {
    cJSON *chunks = cJSON_CreateArray();
    for (int i = 0; i < ds->n; i++) {
        nx_tool_delta *x = &ds->v[i];
        cJSON *d = cJSON_CreateObject();
        if (x->kind == NX_TOOL_DELTA_CONTENT || x->kind == NX_TOOL_DELTA_REASONING) {
            cJSON_AddItemToObject(d, x->kind == NX_TOOL_DELTA_CONTENT ? "content" : "reasoning_content", nx_http_json_bytes(x->text, x->len));
            cJSON_AddItemToArray(chunks, chat_delta(g, d));
            continue;
        }
        if (x->kind == NX_TOOL_DELTA_ARGS) {   /* more of a call's arguments */
            cJSON *e = cJSON_CreateObject(), *f = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "index", x->index);
            cJSON_AddItemToObject(f, "arguments", nx_http_json_bytes(x->text, x->len));
            cJSON_AddItemToObject(e, "function", f);
            cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "tool_calls"), e);
            cJSON_AddItemToArray(chunks, chat_delta(g, d));
            continue;
        }
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(x->call, "function");
        const char *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments")->valuestring;
        for (int part = 0; part < 2; part++) {
            if (part && !*args) break;
            if (part) d = cJSON_CreateObject();
            cJSON *e = cJSON_CreateObject(), *f = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "index", x->index);
            if (part == 0) {
                cJSON_AddStringToObject(e, "id", cJSON_GetObjectItemCaseSensitive(x->call, "id")->valuestring);
                cJSON_AddStringToObject(e, "type", "function");
                cJSON_AddStringToObject(f, "name", cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring);
                cJSON_AddStringToObject(f, "arguments", "");
            } else {
                cJSON_AddStringToObject(f, "arguments", args);
            }
            cJSON_AddItemToObject(e, "function", f);
            cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "tool_calls"), e);
            cJSON_AddItemToArray(chunks, chat_delta(g, d));
        }
    }
    nx_tool_deltas_clear(ds);
    if (lp) {
        if (!cJSON_GetArraySize(chunks)) {
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "content", "");
            cJSON_AddItemToArray(chunks, chat_delta(g, d));
        }
        cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(chunks, cJSON_GetArraySize(chunks) - 1), "choices"), 0);
        cJSON *l = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(l, "content"), lp);
        cJSON_ReplaceItemInObjectCaseSensitive(ch, "logprobs", l);
    }
    cJSON *j;
    while ((j = cJSON_DetachItemFromArray(chunks, 0))) sse_add(g, j);
    cJSON_Delete(chunks);
}

/* Feed generated text to the chat parser (end: the turn is over). */
static void stream_chat_feed(gen_ctx *g, const char *text, size_t n, cJSON *lp, bool end) {
    nx_tool_deltas ds = {0};
    if (n) nx_tool_stream_feed(g->ts, text, n, &ds, NULL);   /* fails only when out of memory: what came out is sent */
    if (end) nx_tool_stream_finish(g->ts, &ds, NULL);
    stream_chat_deltas(g, &ds, lp);
    g->tool_calls = nx_tool_stream_n_calls(g->ts) > 0;
}

/* The whole answer through the chat parser -> the assistant message (non-streaming). */
static cJSON *chat_message(gen_ctx *g) {
    nx_tool_stream *ts = nx_tool_stream_new(&g->chat_opts);
    nx_tool_deltas ds = {0};
    if (!ts) return NULL;
    if (g->req.prefill) nx_tool_stream_feed(ts, g->req.prefill, g->req.prefill_len, &ds, NULL);   /* the forced call's start */
    nx_tool_stream_feed(ts, g->content.p ? g->content.p : "", g->content.n, &ds, NULL);
    nx_tool_stream_finish(ts, &ds, NULL);
    nx_sbuf content = {0}, reasoning = {0};
    cJSON *calls = cJSON_CreateArray();
    for (int i = 0; i < ds.n; i++) {
        nx_tool_delta *x = &ds.v[i];
        if (x->kind == NX_TOOL_DELTA_CALL) { cJSON_AddItemToArray(calls, x->call); x->call = NULL; }
        else if (x->kind == NX_TOOL_DELTA_ARGS) {   /* the pieces join into the call's arguments */
            cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(calls, x->index), "function");
            const char *a = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "arguments"));
            nx_sbuf j = {0};
            nx_sbuf_adds(&j, a ? a : "");
            nx_sbuf_add(&j, x->text, x->len);
            if (f) cJSON_ReplaceItemInObjectCaseSensitive(f, "arguments", cJSON_CreateString(j.p ? j.p : ""));
            nx_sbuf_free(&j);
        } else nx_sbuf_add(x->kind == NX_TOOL_DELTA_CONTENT ? &content : &reasoning, x->text, x->len);
    }
    nx_tool_deltas_clear(&ds);
    nx_tool_stream_free(ts);
    g->tool_calls = cJSON_GetArraySize(calls) > 0;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    if (g->tool_calls && !content.n) cJSON_AddNullToObject(m, "content");
    else cJSON_AddItemToObject(m, "content", nx_http_json_bytes(content.p ? content.p : "", content.n));
    if (reasoning.n) cJSON_AddItemToObject(m, "reasoning_content", nx_http_json_bytes(reasoning.p, reasoning.n));
    if (g->tool_calls) cJSON_AddItemToObject(m, "tool_calls", calls);
    else cJSON_Delete(calls);
    nx_sbuf_free(&content);
    nx_sbuf_free(&reasoning);
    return m;
}

static void stream_error(gen_ctx *g, const char *type, const char *msg) {
    cJSON *j = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddItemToObject(e, "message", nx_http_json_bytes(msg, strlen(msg)));
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    sse_add(g, j);
    nx_conn *k = nx_http_conn(g->conn);
    if (k) {
        nx_conns_lock(k->owner);
        snprintf(k->acc.error, sizeof k->acc.error, "%s", msg);
        nx_conns_unlock(k->owner);
    }
}

static void stream_end(gen_ctx *g) {
    if (g->failed) {
        stream_error(g, g->finish == NX_GEN_FINISH_CANCELLED ? "unavailable_error" : "server_error", g->err_msg);
        return;
    }
    if (g->kind == NX_API_NATIVE) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "content", "");
        cJSON_AddArrayToObject(j, "tokens");
        native_summary(g, j);
        sse_add(g, j);
        return;   /* llama-server's native stream ends with this chunk (no [DONE]) */
    }
    bool chat = g->kind == NX_API_CHAT;
    cJSON *j = chunk_base(g, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    if (chat) cJSON_AddObjectToObject(ch, "delta");
    else cJSON_AddStringToObject(ch, "text", "");
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddStringToObject(ch, "finish_reason", g->tool_calls ? "tool_calls" : nx_gen_finish_name(g->finish));
    cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "choices"), ch);
    cJSON_AddItemToObject(j, "timings", timings_json(&g->t));
    sse_add(g, j);
    if (g->req.include_usage) {
        j = chunk_base(g, chat ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(j, "choices");
        cJSON_AddItemToObject(j, "usage", usage_json(&g->t));
        cJSON_AddItemToObject(j, "timings", timings_json(&g->t));
        sse_add(g, j);
    }
    nx_sbuf_adds(&g->pending, "data: [DONE]\n\n");
}

/* ===== Events ===== */

static void on_event(gen_ctx *g, nx_gen_event *ev, bool streaming) {
    if (ev->kind == NX_GEN_EV_TOKEN) {
        if (g->t_first == 0) g->t_first = ev->t;
        if (g->n_toks == g->cap_toks) {
            int cap = g->cap_toks ? g->cap_toks * 2 : 64;
            nx_token *t = realloc(g->toks, (size_t)cap * sizeof *t);
            if (t) {
                g->toks = t;
                g->cap_toks = cap;
            }
        }
        if (g->n_toks < g->cap_toks) g->toks[g->n_toks++] = ev->token;
        g->n_gen++;
        nx_http_note_tokens(g->conn, g->n_prompt, g->n_gen, 0, 0);
        cJSON *lp = g->req.logprobs ? logprob_entry(g, ev->token, ev->logprob, ev->top, ev->n_top) : NULL;
        if (streaming && g->ts) {   /* no half-parsed call or tag reaches content */
            stream_chat_feed(g, ev->text, ev->n_text, lp, false);
        } else if (streaming) {
            if (ev->n_text || lp) stream_text(g, ev->text, ev->n_text, lp, &ev->token);
        } else {
            nx_sbuf_add(&g->content, ev->text, ev->n_text);
            if (lp) cJSON_AddItemToArray(g->probs, lp);
        }
        return;
    }
    g->finished = true;
    if (ev->kind == NX_GEN_EV_ERROR) {
        g->failed = true;
        snprintf(g->err_msg, sizeof g->err_msg, "%s", ev->msg);
        if (streaming) stream_end(g);
        return;
    }
    g->finish = ev->finish;
    g->stop_index = ev->stop_index;
    g->t = ev->timings;
    nx_http_note_tokens(g->conn, g->t.n_prompt, g->t.predicted_n, g->t.draft_n, g->t.draft_n_accepted);
    double ttft = g->t_first > 0 ? g->t_first - g->t_arrival : -1.0;
    nx_metrics_generation(g->srv->metrics, &g->t, ttft);
    if (ev->finish == NX_GEN_FINISH_CANCELLED) {
        g->failed = true;
        snprintf(g->err_msg, sizeof g->err_msg, "the request was cancelled (the server is shutting down)");
    }
    if (streaming && g->ts) {
        if (!g->failed) stream_chat_feed(g, ev->text, ev->n_text, NULL, true);
        stream_end(g);
    } else if (streaming) {
        if (!g->failed && ev->n_text) stream_text(g, ev->text, ev->n_text, NULL, NULL);
        stream_end(g);
    } else {
        nx_sbuf_add(&g->content, ev->text, ev->n_text);
    }
}

/* Wait for the stream to end after a cancel, so its statistics reach /metrics (bounded). */
static void drain(gen_ctx *g) {
    if (!g->s || g->finished) return;
    nx_gen_stream_cancel(g->s);
    double until = nx_gen_now() + 2.0;
    nx_sbuf_reset(&g->pending);
    while (!g->finished && nx_gen_now() < until) {
        nx_gen_event ev;
        if (nx_gen_stream_next(g->s, &ev, POLL_MS)) {
            on_event(g, &ev, false);
            nx_gen_event_clear(&ev);
        }
    }
}

static void ctx_free(gen_ctx *g) {
    if (!g) return;
    if (g->s) {
        drain(g);
        nx_gen_stream_release(g->s);
        nx_http_active_add(g->srv, -1);
    }
    nx_api_request_free(&g->req);
    nx_sbuf_free(&g->content);
    nx_sbuf_free(&g->pending);
    cJSON_Delete(g->probs);
    nx_tool_stream_free(g->ts);
    free(g->toks);
    free(g);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    gen_ctx *g = cls;
    for (;;) {
        if (g->pending_off < g->pending.n) {
            size_t n = g->pending.n - g->pending_off;
            if (n > max) n = max;
            memcpy(buf, g->pending.p + g->pending_off, n);
            g->pending_off += n;
            nx_http_note_bytes(g->conn, n);
            return (ssize_t)n;
        }
        if (g->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        nx_sbuf_reset(&g->pending);
        g->pending_off = 0;
        nx_gen_event ev;
        bool got = nx_gen_stream_next(g->s, &ev, POLL_MS);
        while (got) {   /* batch what is already there into one write */
            on_event(g, &ev, true);
            nx_gen_event_clear(&ev);
            got = !g->finished && g->pending.n < max && nx_gen_stream_next(g->s, &ev, 0);
        }
        if (g->pending.n == 0 && !g->finished && nx_http_client_gone(g->conn)) {
            nx_gen_stream_cancel(g->s);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void sse_free(void *cls) { ctx_free(cls); }

/* ===== Whole responses ===== */

static cJSON *final_json(gen_ctx *g) {
    const nx_gen_timings *t = &g->t;
    if (g->kind == NX_API_NATIVE) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "content", nx_http_json_bytes(g->content.p ? g->content.p : "", g->content.n));
        cJSON *ta = cJSON_AddArrayToObject(j, "tokens");
        if (g->req.return_tokens)
            for (int i = 0; i < g->n_toks; i++) cJSON_AddItemToArray(ta, cJSON_CreateNumber(g->toks[i]));
        native_summary(g, j);
        if (g->req.logprobs) cJSON_AddItemToObject(j, "completion_probabilities", cJSON_Duplicate(g->probs, true));
        return j;
    }
    bool chat = g->kind == NX_API_CHAT;
    cJSON *j = chunk_base(g, chat ? "chat.completion" : "text_completion");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    cJSON *text = nx_http_json_bytes(g->content.p ? g->content.p : "", g->content.n);
    cJSON *tm = chat && g->chat_parse ? chat_message(g) : NULL;
    if (tm) {
        cJSON_AddItemToObject(ch, "message", tm);
        cJSON_Delete(text);
    } else if (chat) {
        cJSON *m = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddItemToObject(m, "content", text);
    } else {
        cJSON_AddItemToObject(ch, "text", text);
    }
    if (!g->req.logprobs) cJSON_AddNullToObject(ch, "logprobs");
    else if (chat) cJSON_AddItemToObject(cJSON_AddObjectToObject(ch, "logprobs"), "content", cJSON_Duplicate(g->probs, true));
    else cJSON_AddItemToObject(ch, "logprobs", completions_logprobs(g->probs, &g->text_offset));
    cJSON_AddStringToObject(ch, "finish_reason", g->tool_calls ? "tool_calls" : nx_gen_finish_name(g->finish));
    cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "choices"), ch);
    cJSON_AddItemToObject(j, "usage", usage_json(t));
    cJSON_AddItemToObject(j, "timings", timings_json(t));
    return j;
}

static unsigned submit_status(nx_status st, const char **type) {
    switch (st) {
    case NX_ERR_NOMEM: *type = "unavailable_error"; return 503;
    case NX_ERR_RANGE: *type = "exceed_context_size_error"; return 400;
    case NX_ERR_INVALID_ARG: *type = "invalid_request_error"; return 400;
    case NX_ERR_UNSUPPORTED: *type = "unavailable_error"; return 503;
    default: *type = "server_error"; return 500;
    }
}

static enum MHD_Result fail(gen_ctx *g, unsigned status, const char *type, const char *msg) {
    nx_metrics_request(g->srv->metrics, (int)status);
    enum MHD_Result ret = nx_http_reply_error(g->conn, status, type, msg);
    ctx_free(g);
    return ret;
}

static enum MHD_Result fail_api(gen_ctx *g, const nx_api_error *e) {
    nx_metrics_request(g->srv->metrics, e->http);
    enum MHD_Result ret = nx_http_reply_err(g->conn, (unsigned)e->http, e->type, e->code, e->param, e->msg);
    ctx_free(g);
    return ret;
}

enum MHD_Result nx_http_apply_template(nx_http_req *r) {
    nx_gen_backend *be = r->srv->be;
    nx_gen_info info;
    be->ops->info(be, &info);
    if (!info.ready) return nx_http_reply_error(r->conn, 503, "unavailable_error", "the model is loading");
    nx_api_request req = {0};
    nx_api_error e = {0};
    if (nx_api_parse(NX_API_CHAT, r->body.p, r->body.n, &info, &req, &e) != NX_OK) {
        nx_api_request_free(&req);
        return nx_http_reply_err(r->conn, (unsigned)e.http, e.type, e.code, e.param, e.msg);
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "prompt", nx_http_json_bytes(req.prompt_text ? req.prompt_text : "", req.prompt_len));
    nx_api_request_free(&req);
    return nx_http_reply_json(r->conn, 200, j);
}

enum MHD_Result nx_http_completion(nx_http_req *r, nx_api_kind kind) {
    nx_server *srv = r->srv;
    nx_gen_backend *be = srv->be;
    gen_ctx *g = calloc(1, sizeof *g);
    if (!g) return nx_http_reply_error(r->conn, 500, "server_error", "out of memory");
    g->srv = srv;
    g->conn = r->conn;
    g->kind = kind;
    g->t_arrival = r->t_arrival;
    g->created = (long)time(NULL);
    g->stop_index = -1;
    be->ops->info(be, &g->info);
    if (!g->info.ready) return fail(g, 503, "unavailable_error", "the model is loading");
    nx_api_error e = {0};
    if (nx_api_parse(kind, r->body.p, r->body.n, &g->info, &g->req, &e) != NX_OK)
        return fail_api(g, &e);
    g->probs = cJSON_CreateArray();
    nx_reasoning_format rf = g->req.reasoning_format != NX_REASONING_UNSET ? g->req.reasoning_format : srv->p.reasoning_format;
    bool reasoning = rf == NX_REASONING_DEEPSEEK || rf == NX_REASONING_DEEPSEEK_LEGACY;
    g->chat_parse = kind == NX_API_CHAT && (g->req.tools || reasoning);
    g->chat_opts = (nx_tool_stream_opts){ .tools = g->req.tools, .calls = g->req.tools != NULL, .reasoning = reasoning,
                                          /* llama.cpp: reasoning_in_content = stream && deepseek-legacy */
                                          .reasoning_in_content = g->req.stream && rf == NX_REASONING_DEEPSEEK_LEGACY,
                                          .parallel = g->req.parallel_tools,
                                          .in_reasoning = g->req.prompt_text ? nx_tool_reasoning_open_at(g->req.prompt_text, g->req.prompt_len)
                                                                             : NX_TOOL_REASONING_CLOSED };
    if (g->req.stream && g->chat_parse && !(g->ts = nx_tool_stream_new(&g->chat_opts)))   /* parsed as the text comes */
        return fail(g, 500, "server_error", "out of memory");
    /* Tokenize (text prompts) and check the prompt against one slot's context. */
    nx_token_vec v = {0};
    nx_error err = {0};
    if (g->req.prompt_text) {
        if (be->ops->tokenize(be, g->req.prompt_text, g->req.prompt_len, true, g->req.prompt_special, &v, &err) != NX_OK) {
            nx_token_vec_free(&v);
            return fail(g, 500, "server_error", err.msg);
        }
    } else {
        v.ids = g->req.prompt_tokens;   /* borrowed */
        v.n = (size_t)g->req.n_prompt_tokens;
    }
    g->n_prompt = (int)v.n;
    nx_http_note_tokens(g->conn, g->n_prompt, 0, 0, 0);
    char msg[NX_ERROR_MSG_MAX];
    if (v.n == 0) {
        if (g->req.prompt_text) nx_token_vec_free(&v);
        return fail(g, 400, "invalid_request_error", "the prompt is empty");
    }
    if ((long)v.n > g->info.n_ctx_slot) {
        snprintf(msg, sizeof msg,
                 "the request exceeds the available context size: the prompt has %zu tokens, a slot's context holds %d tokens",
                 v.n, g->info.n_ctx_slot);
        if (g->req.prompt_text) nx_token_vec_free(&v);
        return fail(g, 400, "exceed_context_size_error", msg);
    }
    g->req.gen.prompt = v.ids;
    g->req.gen.n_prompt = (int)v.n;
    nx_status st = nx_gen_submit(be, &g->req.gen, &g->s, &err);
    if (g->req.prompt_text) nx_token_vec_free(&v);
    g->req.gen.prompt = NULL;
    if (st != NX_OK) {
        const char *type;
        unsigned code = submit_status(st, &type);
        return fail(g, code, type, err.msg);
    }
    nx_http_active_add(srv, 1);
    snprintf(g->id, sizeof g->id, "%s-%llu", kind == NX_API_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)nx_gen_stream_id(g->s));

    bool streaming = g->req.stream;
    if (streaming && kind == NX_API_CHAT) {   /* OpenAI's first chunk opens the assistant message */
        cJSON *j = chunk_base(g, "chat.completion.chunk");
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", 0);
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddStringToObject(d, "content", "");
        cJSON_AddNullToObject(ch, "logprobs");
        cJSON_AddNullToObject(ch, "finish_reason");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "choices"), ch);
        sse_add(g, j);
        if (g->ts && g->req.prefill) stream_chat_feed(g, g->req.prefill, g->req.prefill_len, NULL, false);   /* the forced call's start */
    }
    /* Wait for the first event (streaming) or the last (not): it decides the HTTP status. */
    bool first = false;
    double next_check = nx_gen_now() + POLL_MS / 1000.0;
    while (!g->finished && !(streaming && first)) {
        nx_gen_event ev;
        bool got = nx_gen_stream_next(g->s, &ev, POLL_MS);
        /* Tokens may arrive without pause: look at the socket on a clock, not only when idle. */
        if (!got || nx_gen_now() >= next_check) {
            next_check = nx_gen_now() + POLL_MS / 1000.0;
            if (nx_http_client_gone(g->conn)) {
                if (got) nx_gen_event_clear(&ev);
                ctx_free(g);   /* cancels and accounts the generation */
                return MHD_NO;
            }
        }
        if (got) {
            first = true;
            if (streaming && ev.kind == NX_GEN_EV_ERROR) {
                nx_sbuf_reset(&g->pending);
                on_event(g, &ev, false);
                nx_gen_event_clear(&ev);
                break;
            }
            on_event(g, &ev, streaming);
            nx_gen_event_clear(&ev);
        }
    }
    if (g->failed) {   /* ended before the response started: a plain HTTP error */
        bool cancelled = g->finish == NX_GEN_FINISH_CANCELLED;
        snprintf(msg, sizeof msg, "%s", g->err_msg);
        return fail(g, cancelled ? 503 : 500, cancelled ? "unavailable_error" : "server_error", msg);
    }
    if (!streaming) {
        nx_metrics_request(srv->metrics, 200);
        enum MHD_Result ret = nx_http_reply_json(g->conn, 200, final_json(g));
        ctx_free(g);
        return ret;
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, g, sse_free);
    if (!resp) return fail(g, 500, "server_error", "cannot create the response");
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    nx_metrics_request(srv->metrics, 200);
    nx_http_note_status(r->conn, 200);
    enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);   /* sse_free runs when libmicrohttpd is done with it */
    return ret;
}
