/*
 * chat_template.h — a model's Jinja chat template applied to an OpenAI-style chat, the way
 * Hugging Face's apply_chat_template calls it: the template's variables are `messages`,
 * `tools` (when given), `add_generation_prompt`, `bos_token`, `eos_token`, plus the request's
 * `chat_template_kwargs` (e.g. enable_thinking).
 *
 * What it adapts from the OpenAI shape before rendering (what servers do for HF templates):
 * a content given as an array of text parts only is joined into one string (older templates
 * cannot take lists); tool_calls[].function.arguments given as a JSON string is decoded to an
 * object when it parses as one. The caller's JSON is never modified.
 * Never: print; keep state between renders (a template renders on any thread at once).
 */
#ifndef NX_CHAT_CHAT_TEMPLATE_H
#define NX_CHAT_CHAT_TEMPLATE_H

#include "chat/jinja.h"

typedef struct nx_chat_template nx_chat_template;

/* Parse src (len bytes). bos/eos: the vocabulary's BOS/EOS token texts (NULL = ""). */
nx_status nx_chat_template_create(const char *src, size_t len, const char *bos, const char *eos,
                                  nx_chat_template **out, nx_error *err);
void nx_chat_template_free(nx_chat_template *t);
/* The BOS text the template sees as bos_token ("" if none). */
const char *nx_chat_template_bos(const nx_chat_template *t);

/* Render a chat. messages: a JSON array (required); tools: array or NULL; kwargs: an object
 * or NULL (its members become variables; they do not override messages/tools).
 * On success *out is malloc'ed and NUL-terminated. A template's raise_exception(msg) fails with
 * *raised = true and err->msg = msg (the caller's 400); other failures are template errors. */
nx_status nx_chat_template_render(const nx_chat_template *t, const cJSON *messages, const cJSON *tools,
                                  const cJSON *kwargs, bool add_generation_prompt, char **out, size_t *out_len,
                                  bool *raised, nx_error *err);

#endif
