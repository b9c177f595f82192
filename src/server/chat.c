/*
 * chat.c — the built-in chat formats (see chat.h): ChatML and Gemma, detection and rendering.
 */
#include "server/chat.h"
#include <stdlib.h>
#include <string.h>
#include "server/sbuf.h"

const char *nx_chat_format_name(nx_chat_format f) { return f == NX_CHAT_GEMMA ? "gemma" : "chatml"; }

bool nx_chat_format_parse(const char *name, nx_chat_format *out) {
    if (!name) return false;
    if (!strcmp(name, "chatml")) { *out = NX_CHAT_CHATML; return true; }
    if (!strcmp(name, "gemma")) { *out = NX_CHAT_GEMMA; return true; }
    return false;
}

nx_chat_format nx_chat_format_detect(const char *tmpl, const char *arch) {
    if (tmpl) {
        if (strstr(tmpl, "<|im_start|>")) return NX_CHAT_CHATML;
        if (strstr(tmpl, "<start_of_turn>")) return NX_CHAT_GEMMA;
    }
    if (arch && !strncmp(arch, "gemma", 5)) return NX_CHAT_GEMMA;
    return NX_CHAT_CHATML;
}

typedef enum { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL } role_kind;

static bool role_of(const char *role, role_kind *out) {
    static const struct { const char *name; role_kind k; } t[] = {
        {"system", R_SYSTEM}, {"developer", R_SYSTEM}, {"user", R_USER},
        {"assistant", R_ASSISTANT}, {"tool", R_TOOL},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(role, t[i].name)) { *out = t[i].k; return true; }
    return false;
}

static void add_content(nx_sbuf *b, const nx_chat_msg *m) {
    if (m->content) nx_sbuf_add(b, m->content, m->content_len);
}

static void render_chatml(nx_sbuf *b, const nx_chat_msg *msgs, const role_kind *kinds, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        nx_sbuf_adds(b, "<|im_start|>");
        nx_sbuf_adds(b, kinds[i] == R_SYSTEM ? "system" : msgs[i].role);
        nx_sbuf_adds(b, "\n");
        add_content(b, &msgs[i]);
        nx_sbuf_adds(b, "<|im_end|>\n");
    }
    if (gen) nx_sbuf_adds(b, "<|im_start|>assistant\n");
}

static void render_gemma(nx_sbuf *b, const nx_chat_msg *msgs, const role_kind *kinds, int n, bool gen) {
    /* System turns are folded into the next user turn: Gemma was trained without a system role. */
    nx_sbuf sys = {0};
    for (int i = 0; i < n; i++) {
        if (kinds[i] == R_SYSTEM) {
            add_content(&sys, &msgs[i]);
            nx_sbuf_adds(&sys, "\n\n");
            continue;
        }
        bool model = kinds[i] == R_ASSISTANT;
        nx_sbuf_adds(b, model ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
        if (!model && sys.n) {
            nx_sbuf_add(b, sys.p, sys.n);
            nx_sbuf_reset(&sys);
        }
        add_content(b, &msgs[i]);
        nx_sbuf_adds(b, "<end_of_turn>\n");
    }
    if (sys.n) {   /* only system text: it becomes a user turn of its own */
        nx_sbuf_adds(b, "<start_of_turn>user\n");
        nx_sbuf_add(b, sys.p, sys.n - 2);
        nx_sbuf_adds(b, "<end_of_turn>\n");
    }
    if (sys.oom) b->oom = true;
    nx_sbuf_free(&sys);
    if (gen) nx_sbuf_adds(b, "<start_of_turn>model\n");
}

nx_status nx_chat_render(nx_chat_format f, const nx_chat_msg *msgs, int n, bool add_generation_prompt,
                         char **out, size_t *out_len, nx_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!msgs || n <= 0) return nx_fail(err, NX_ERR_INVALID_ARG, "'messages' must hold at least one message");
    role_kind *kinds = malloc((size_t)n * sizeof *kinds);
    if (!kinds) return nx_fail(err, NX_ERR_NOMEM, "out of memory rendering the chat");
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role) {
            free(kinds);
            return nx_fail(err, NX_ERR_INVALID_ARG, "messages[%d]: missing 'role'", i);
        }
        if (!role_of(msgs[i].role, &kinds[i])) {
            nx_status st = nx_fail(err, NX_ERR_INVALID_ARG,
                                   "messages[%d]: unknown role '%.64s' (known: system, developer, user, assistant, tool)",
                                   i, msgs[i].role);
            free(kinds);
            return st;
        }
    }
    nx_sbuf b = {0};
    if (f == NX_CHAT_GEMMA) render_gemma(&b, msgs, kinds, n, add_generation_prompt);
    else render_chatml(&b, msgs, kinds, n, add_generation_prompt);
    free(kinds);
    size_t len = 0;
    char *p = nx_sbuf_take(&b, &len);
    if (!p) return nx_fail(err, NX_ERR_NOMEM, "out of memory rendering the chat");
    *out = p;
    if (out_len) *out_len = len;
    return NX_OK;
}

const char *const *nx_chat_stop_texts(nx_chat_format f) {
    static const char *const chatml[] = {"<|im_end|>", "<|endoftext|>", NULL};
    static const char *const gemma[] = {"<end_of_turn>", "<eos>", NULL};
    return f == NX_CHAT_GEMMA ? gemma : chatml;
}
