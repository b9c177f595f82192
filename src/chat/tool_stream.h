/*
 * tool_stream.h — the incremental form of tool_parse.h: a generated assistant turn fed piece by
 * piece (each token's text as it is sampled) -> content, reasoning and tool calls, each given out
 * as soon as it is decided.
 *
 * What it holds back, and why:
 *   - content: only a suffix that could still become a tool-call or reasoning opener
 *     (`<tool_call>`, `<|tool_call>`/`tool_call>`, `<function=` before any call, `<think>`,
 *     `</think>`, `<|channel>thought`), trailing whitespace and end-of-turn markers (the
 *     non-streaming parse trims them at the end of the turn) and a partial such marker;
 *   - an XML-parameter call (Qwen3.5 / Qwen3-Coder `<function=NAME>...`, in `<tool_call>` or
 *     bare) streams while generated (tool_args.h): its start (CALL: id, name, arguments "{")
 *     as soon as the name is complete, then ARGS pieces of the arguments' JSON text, whose
 *     concatenation is the finished call's arguments. It is held back only while its arguments
 *     so far are a prefix of an earlier call's of the same name (it may be a duplicate);
 *   - any other call block (JSON in `<tool_call>`, Gemma's `call:`): everything from its
 *     opener to its closer (`</tool_call>`, `<tool_call|>`); it is then parsed with
 *     nx_chat_parse_output and comes out as a whole call (CALL with all its arguments). Why not
 *     streamed: whether such a block is a call at all is only known once its text parses, and
 *     a call already announced cannot be taken back. A block that does not parse comes back
 *     as content (its opener, then the rest is read again). A Gemma block whose body does not
 *     start with `call:` fails at once;
 *   - a turn whose content starts with `{` or `<|python_tag|>` (Llama's bare JSON call, which
 *     must be the whole turn): everything until the end;
 *   - reasoning: trailing whitespace and a partial closer.
 * Without calls (opts.calls false: a request without tools) the content is the text as generated,
 * less the reasoning block and the space right after it; nothing else is trimmed or held.
 * Calls get ids call_1, call_2, ... in the order they complete; a duplicate of an earlier call
 * (same name, same arguments) is dropped, as is every call after the first when parallel is off.
 *
 * Promise: for a turn the non-streaming parser reads as content / reasoning / calls, the
 * concatenated deltas equal its content and reasoning, and the calls (CALL plus its ARGS
 * pieces) equal its calls, however
 * the text is split (tests/test_tool_stream.c). Known differences, all in malformed turns: the
 * one of tool_args.h (a turn ending, without closer, in an end marker inside a parameter tag); a
 * reasoning block left open at the end streams as reasoning (non-streaming: content); an end
 * marker before a final call is dropped; `</think>` after content only ends reasoning detection.
 * The turn starts inside a reasoning block when the prompt opened one (opts.in_reasoning); as
 * in llama.cpp, such a block left open streams as reasoning, except that a turn whose first text
 * is a call opener (`<tool_call>`, `<|tool_call>`, `<function=`) skipped the thinking.
 * Never: an error other than out-of-memory; allocation the caller does not free with
 * nx_tool_deltas_clear / nx_tool_stream_free.
 */
#ifndef NX_CHAT_TOOL_STREAM_H
#define NX_CHAT_TOOL_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "core/error.h"

typedef enum nx_tool_delta_kind {
    NX_TOOL_DELTA_CONTENT = 0,
    NX_TOOL_DELTA_REASONING = 1,
    NX_TOOL_DELTA_CALL = 2,     /* a call's start: id, name and its arguments so far */
    NX_TOOL_DELTA_ARGS = 3,     /* more of call `index`'s arguments text */
} nx_tool_delta_kind;

typedef struct nx_tool_delta {
    nx_tool_delta_kind kind;
    char  *text;                /* content / reasoning / args: malloc'ed bytes (NUL after them), len of them */
    size_t len;
    int    index;               /* call / args: the call's place among the turn's calls (0, 1, ...) */
    cJSON *call;                /* call: {"id","type":"function","function":{"name","arguments": JSON text so far}} */
} nx_tool_delta;

typedef struct nx_tool_deltas {
    nx_tool_delta *v;           /* in stream order; adjacent text of one kind is merged */
    int n, cap;
} nx_tool_deltas;

typedef enum nx_tool_reasoning_open {
    NX_TOOL_REASONING_CLOSED = 0,
    NX_TOOL_REASONING_THINK = 1,   /* the prompt ends inside <think>: text until </think> is reasoning */
    NX_TOOL_REASONING_CHANNEL = 2, /* the prompt ends inside Gemma's <|channel>thought: until <channel|> */
} nx_tool_reasoning_open;

typedef struct nx_tool_stream_opts {
    const cJSON *tools;         /* the request's tools (borrowed, must outlive the stream); NULL = none */
    bool calls;                 /* look for tool calls (and trim the content as tool_parse.c does) */
    bool reasoning;             /* separate reasoning blocks (false: they stay in content) */
    bool reasoning_in_content;  /* with reasoning: the block's text goes out as content instead,
                                 * trimmed and wrapped in its tags (<think>TEXT</think>, the closer
                                 * only when the block closed): llama.cpp's streamed deepseek-legacy */
    bool parallel;              /* keep every call (false: only the first) */
    nx_tool_reasoning_open in_reasoning;
} nx_tool_stream_opts;

typedef struct nx_tool_stream nx_tool_stream;

/* NULL only when out of memory. */
nx_tool_stream *nx_tool_stream_new(const nx_tool_stream_opts *opts);
void nx_tool_stream_free(nx_tool_stream *s);

/* Feed the next n bytes; the deltas decided by them are appended to out. After finish, feeding
 * is an error (NX_ERR_INVALID_ARG). Otherwise fails only when out of memory. */
nx_status nx_tool_stream_feed(nx_tool_stream *s, const char *text, size_t n, nx_tool_deltas *out, nx_error *err);
/* The turn ended: everything still held comes out (trailing whitespace and end markers dropped). */
nx_status nx_tool_stream_finish(nx_tool_stream *s, nx_tool_deltas *out, nx_error *err);
/* Calls given out so far (finish_reason "tool_calls" when > 0). */
int nx_tool_stream_n_calls(const nx_tool_stream *s);

/* The prompt's end -> where the turn starts (the prompt's last non-space text is <think> or
 * <|channel>thought). */
nx_tool_reasoning_open nx_tool_reasoning_open_at(const char *prompt, size_t n);

void nx_tool_deltas_clear(nx_tool_deltas *d);

#endif
