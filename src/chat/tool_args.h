/*
 * tool_args.h — one XML-parameter call (Qwen3.5 / Qwen3-Coder:
 * `<function=NAME>\n<parameter=K>\nV\n</parameter>...</function>`) read while it is generated:
 * its name as soon as the `>` after it arrives, then its arguments as pieces of the exact JSON
 * text nx_chat_parse_output gives for the finished call (cJSON_PrintUnformatted of the parsed
 * object): `{` at once; for each parameter `"K":` and, for a string value, `"` and its escaped
 * characters as they arrive; a typed value (a non-string type in the tool's schema) whole once
 * its end is seen, since only the whole text says whether it parses as JSON; `}` at the end.
 *
 * What it holds back and why: text that may still become a tag (`</parameter>`,
 * `<parameter=`, `</function>`) and a value's trailing whitespace and end-of-turn markers (the
 * parser drops one trailing newline, and at a block's end all of them); a value that has met
 * `</function>` inside a `<tool_call>` block, until a later `</parameter>` or the block's end
 * says where it ends (the parser's rule).
 *
 * Promise: for a block the whole-text parser reads as a call, the concatenated pieces equal
 * its arguments, however the text is split (tests/test_tool_stream.c). Once the name is read
 * the block is a call (tool_parse.c cannot reject it after that). One known difference: a turn
 * that ends, with no closer, in an end-of-turn marker whose `>` completed a `<parameter=` tag
 * (the parser strips the marker first, so that parameter does not exist there).
 * Never: an error other than out-of-memory.
 */
#ifndef NX_CHAT_TOOL_ARGS_H
#define NX_CHAT_TOOL_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "core/error.h"

typedef struct nx_tool_args nx_tool_args;

typedef enum nx_tool_args_state {
    NX_TOOL_ARGS_WAIT = 0,      /* the name is not read yet */
    NX_TOOL_ARGS_NAMED = 1,     /* the name is read: pieces come out */
    NX_TOOL_ARGS_REFUSED = 2,   /* not an XML-parameter call: the caller parses the block whole */
} nx_tool_args_state;

typedef enum nx_tool_args_end {
    NX_TOOL_ARGS_MORE = 0,      /* the body may still grow */
    NX_TOOL_ARGS_CLOSED = 1,    /* the block's closer came right after the body */
    NX_TOOL_ARGS_TURN_END = 2,  /* the turn ended inside the block (no closer) */
} nx_tool_args_end;

/* tools: borrowed. bare: the block's opener was `<function=` itself (Qwen3-Coder without
 * <tool_call>; its closer is `</function>`), else it was `<tool_call>`. NULL when out of memory. */
nx_tool_args *nx_tool_args_new(const cJSON *tools, bool bare);
void nx_tool_args_free(nx_tool_args *a);

/* body: all of the block's text after its opener so far (it only grows between calls; the
 * closer not included). New argument text is appended to the pending pieces (take them with
 * nx_tool_args_take). After an end other than MORE the arguments are complete.
 * Fails only when out of memory. */
nx_status nx_tool_args_step(nx_tool_args *a, const char *body, size_t n, nx_tool_args_end end,
                            nx_tool_args_state *state, nx_error *err);
const char *nx_tool_args_name(const nx_tool_args *a);          /* once NAMED */
/* The argument text made since the last take (*n bytes, NUL after them; owned by a, valid
 * until the next step). */
const char *nx_tool_args_take(nx_tool_args *a, size_t *n);

#endif
