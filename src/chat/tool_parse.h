/*
 * tool_parse.h — a model's generated assistant turn -> OpenAI message parts: `content`,
 * `reasoning_content` and `tool_calls`, for the formats the common chat templates teach:
 *   Qwen3.5 / Qwen3-Coder XML:  <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>...</function>\n</tool_call>
 *   Hermes / Qwen3 JSON:        <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
 *   Gemma 4:                    <|tool_call>call:NAME{k:<|"|>str<|"|>,n:1}<tool_call|>
 *   Llama 3.x JSON:             {"name": ..., "parameters": {...}} as the whole turn (<|python_tag|> allowed)
 * Reasoning: <think>...</think> (also a turn that starts inside the block, the opening tag
 * being in the prompt) and Gemma 4's <|channel>thought ...<channel|>.
 * XML parameter values get their type back from the tool's JSON schema (a non-string type is
 * parsed as JSON). Duplicate calls (same name, same arguments) are dropped. Text that does not
 * parse as a call stays in content — never an error. End-of-turn markers at the end are dropped.
 */
#ifndef NX_CHAT_TOOL_PARSE_H
#define NX_CHAT_TOOL_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "core/error.h"

typedef struct nx_chat_parsed {
    char  *content;         /* malloc'ed, trimmed; "" when none */
    char  *reasoning;       /* malloc'ed; NULL when the turn has no reasoning */
    cJSON *tool_calls;      /* [{"id","type":"function","function":{"name","arguments": JSON string}}]; NULL if none */
} nx_chat_parsed;

/* tools: the request's tools array (may be NULL). Fails only on out-of-memory. */
nx_status nx_chat_parse_output(const char *text, size_t len, const cJSON *tools, nx_chat_parsed *out, nx_error *err);
void nx_chat_parsed_free(nx_chat_parsed *p);

/* An XML parameter's value (val: its text) as the parser types it: a string, unless the tool's
 * schema gives the parameter a non-string type and val parses as JSON. NULL when out of memory.
 * is_string: the value is a string whatever its text (no schema for it, or a string type). */
/* What may end a turn (dropped at its end), NULL-terminated. */
extern const char *const nx_chat_end_markers[];
/* The longest proper prefix of word that ends p[0..n) (a tag the next bytes may complete). */
size_t nx_chat_partial_len(const char *p, size_t n, const char *word);
/* The first needle in h[0..hn) (NULL: none), and a NUL-terminated copy of p[0..n) (NULL: no memory). */
const char *nx_chat_find(const char *h, size_t hn, const char *needle);
char *nx_chat_dupn(const char *p, size_t n);
/* Bytes at the end of p[0..n) that the end of the turn may still trim: whitespace and end
 * markers, and (unless final) a partial marker at the very end. */
size_t nx_chat_trimmable_tail(const char *p, size_t n, bool final);

bool nx_chat_param_is_string(const cJSON *tools, const char *fn, const char *param);
cJSON *nx_chat_param_value(const cJSON *tools, const char *fn, const char *param, const char *val);

#endif
