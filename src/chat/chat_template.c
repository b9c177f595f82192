/*
 * chat_template.c — a chat template (chat_template.h): the parsed Jinja template plus the
 * vocabulary's BOS/EOS texts, and the OpenAI -> Hugging Face message adaptation.
 */
#include <stdlib.h>
#include <string.h>
#include "chat/chat_template.h"

struct nx_chat_template {
    nx_jinja_template *tpl;
    char *bos, *eos;
};

static char *dupz(const char *s) {
    size_t n = strlen(s ? s : "");
    char *p = malloc(n + 1);
    if (p) memcpy(p, s ? s : "", n + 1);
    return p;
}

nx_status nx_chat_template_create(const char *src, size_t len, const char *bos, const char *eos,
                                  nx_chat_template **out, nx_error *err) {
    *out = NULL;
    nx_chat_template *t = calloc(1, sizeof *t);
    if (!t) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    t->bos = dupz(bos);
    t->eos = dupz(eos);
    if (!t->bos || !t->eos) { nx_chat_template_free(t); return nx_fail(err, NX_ERR_NOMEM, "out of memory"); }
    t->tpl = nx_jinja_parse(src, len, err);
    if (!t->tpl) { nx_chat_template_free(t); return err ? err->code : NX_ERR_FORMAT; }
    *out = t;
    return NX_OK;
}

void nx_chat_template_free(nx_chat_template *t) {
    if (!t) return;
    nx_jinja_free(t->tpl);
    free(t->bos);
    free(t->eos);
    free(t);
}

const char *nx_chat_template_bos(const nx_chat_template *t) { return t->bos; }

/* content: [{"type":"text","text":...}, ...] with text parts only -> one string; else as is */
static void flatten_content(cJSON *m) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsArray(c)) return;
    size_t total = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") != 0 || !cJSON_IsString(tx)) return;
        total += strlen(tx->valuestring);
    }
    char *s = malloc(total + 1);
    if (!s) return;
    size_t off = 0;
    cJSON_ArrayForEach(part, c) {
        const char *tx = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(tx);
        memcpy(s + off, tx, n);
        off += n;
    }
    s[off] = 0;
    cJSON *str = cJSON_CreateString(s);
    free(s);
    if (str) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", str);
}

/* tool_calls[].function.arguments: a JSON string -> the object it encodes */
static void decode_arguments(cJSON *m) {
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    cJSON *call;
    cJSON_ArrayForEach(call, calls) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(args)) continue;
        cJSON *obj = cJSON_Parse(args->valuestring);
        if (cJSON_IsObject(obj)) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
        else cJSON_Delete(obj);
    }
}

nx_status nx_chat_template_render(const nx_chat_template *t, const cJSON *messages, const cJSON *tools,
                                  const cJSON *kwargs, bool add_generation_prompt, char **out, size_t *out_len,
                                  bool *raised, nx_error *err) {
    *out = NULL;
    if (raised) *raised = false;
    if (!cJSON_IsArray(messages)) return nx_fail(err, NX_ERR_INVALID_ARG, "messages must be an array");
    cJSON *vars = cJSON_CreateObject();
    cJSON *msgs = cJSON_Duplicate(messages, 1);
    if (!vars || !msgs) { cJSON_Delete(vars); cJSON_Delete(msgs); return nx_fail(err, NX_ERR_NOMEM, "out of memory"); }
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (!cJSON_IsObject(m)) continue;
        flatten_content(m);
        decode_arguments(m);
    }
    cJSON_AddItemToObject(vars, "messages", msgs);
    if (tools && !cJSON_IsNull(tools)) cJSON_AddItemToObject(vars, "tools", cJSON_Duplicate(tools, 1));
    cJSON_AddBoolToObject(vars, "add_generation_prompt", add_generation_prompt);
    cJSON_AddStringToObject(vars, "bos_token", t->bos);
    cJSON_AddStringToObject(vars, "eos_token", t->eos);
    const cJSON *k;
    if (cJSON_IsObject(kwargs))
        cJSON_ArrayForEach(k, kwargs) {
            if (!k->string || cJSON_GetObjectItemCaseSensitive(vars, k->string)) continue;
            cJSON_AddItemToObject(vars, k->string, cJSON_Duplicate(k, 1));
        }
    nx_status st = nx_jinja_render(t->tpl, vars, NULL, out, out_len, raised, err);
    cJSON_Delete(vars);
    return st;
}
