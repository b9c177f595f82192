/*
 * jinja.h — a Jinja2 template engine for chat templates, as Hugging Face's apply_chat_template
 * runs them: an immutable sandbox with trim_blocks, lstrip_blocks and loop controls, `tojson`
 * without ASCII escaping, `raise_exception(msg)` and `strftime_now(fmt)` as globals.
 *
 * A template is parsed once (nx_jinja_parse) and rendered any number of times against variables
 * given as one cJSON object (messages, tools, add_generation_prompt, bos_token, ...). Rendering
 * is bounded: steps, call depth, output bytes and working memory have limits, so no template
 * loops, recurses or grows without end — it fails with NX_ERR_RANGE instead.
 *
 * Errors: a syntax error is NX_ERR_FORMAT with "line L col C: ..."; a runtime error (type error,
 * unknown filter, attribute of an undefined value...) is NX_ERR_INVALID_ARG with its position; a
 * template that calls raise_exception(msg) fails with NX_ERR_INVALID_ARG, *raised = true and
 * err->msg = msg exactly (a server maps that to HTTP 400). Nothing prints; the engine keeps no
 * global state, so templates render on any thread.
 */
#ifndef NX_CHAT_JINJA_H
#define NX_CHAT_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "core/error.h"

typedef struct nx_jinja_template nx_jinja_template;

typedef struct nx_jinja_limits {
    uint64_t max_steps;     /* evaluated nodes + loop iterations; 0 = default (20M) */
    int      max_depth;     /* nested macro calls / expression depth; 0 = default (200) */
    size_t   max_output;    /* bytes of rendered text; 0 = default (16 MiB) */
    size_t   max_memory;    /* bytes of working values; 0 = default (256 MiB) */
    time_t   now;           /* strftime_now's clock (UTC); 0 = the real time */
} nx_jinja_limits;

/* Parse src (len bytes, need not be NUL-terminated). NULL on error (err filled). */
nx_jinja_template *nx_jinja_parse(const char *src, size_t len, nx_error *err);
void nx_jinja_free(nx_jinja_template *t);

/* Render with the members of vars (a cJSON object; NULL = none) as the template's globals.
 * limits may be NULL. On success *out is a malloc'ed NUL-terminated string (*out_len bytes,
 * excluding the NUL) the caller frees. raised may be NULL. */
nx_status nx_jinja_render(const nx_jinja_template *t, const cJSON *vars, const nx_jinja_limits *limits,
                          char **out, size_t *out_len, bool *raised, nx_error *err);

#endif
