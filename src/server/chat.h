/*
 * chat.h — built-in chat formats: OpenAI-style messages -> the prompt text a model was trained on.
 *
 *   ChatML (Qwen):  <|im_start|>ROLE\nCONTENT<|im_end|>\n ...  then "<|im_start|>assistant\n"
 *   Gemma:          <start_of_turn>user\nCONTENT<end_of_turn>\n ... then "<start_of_turn>model\n"
 *                   (no system role: the system text opens the first user turn, followed by a blank
 *                   line; "assistant" is written "model")
 * The format is chosen from the GGUF's tokenizer.chat_template by fingerprint, else by the
 * architecture name (server.md "Chat formats"). Roles: system, developer (as system), user,
 * assistant, tool (ChatML only; Gemma writes it as a user turn). Content is copied as is: special
 * token text inside a message is not escaped (what llama.cpp's built-in templates do).
 * Never: allocate anything the caller does not free with free(); print.
 */
#ifndef NX_SERVER_CHAT_H
#define NX_SERVER_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include "core/error.h"

typedef enum nx_chat_format {
    NX_CHAT_CHATML = 0,
    NX_CHAT_GEMMA = 1,
} nx_chat_format;

typedef struct nx_chat_msg {
    const char *role;           /* NUL-terminated */
    const char *content;        /* content_len bytes (may hold NUL); NULL = empty */
    size_t content_len;
} nx_chat_msg;

/* "chatml" / "gemma". */
const char *nx_chat_format_name(nx_chat_format f);
/* "chatml" / "gemma" -> format; false if unknown. */
bool nx_chat_format_parse(const char *name, nx_chat_format *out);
/* By template fingerprint (tmpl may be NULL), else by architecture (may be NULL), else ChatML. */
nx_chat_format nx_chat_format_detect(const char *tmpl, const char *arch);

/* Render messages into a malloc'ed NUL-terminated prompt (*out_len excludes the NUL). With
 * add_generation_prompt the assistant's turn is opened. Errors (NX_ERR_INVALID_ARG): no messages,
 * unknown role (named), NULL role. */
nx_status nx_chat_render(nx_chat_format f, const nx_chat_msg *msgs, int n, bool add_generation_prompt,
                         char **out, size_t *out_len, nx_error *err);

/* The end-of-turn texts of a format (NULL-terminated list): what ends an assistant turn. */
const char *const *nx_chat_stop_texts(nx_chat_format f);

/* Tool calls and reasoning in answers: chat/tool_stream.h (used by http_gen.c, streaming or not). */

#endif
