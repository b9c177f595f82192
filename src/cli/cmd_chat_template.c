/*
 * cmd_chat_template.c — `nextn chat-template`: check chat templates and tool-call parsing
 * without a model.
 *   nextn chat-template render --cases CASES.json
 *       CASES.json: [{template, messages, tools?, add_generation_prompt?, kwargs?, bos_token,
 *       eos_token}] (template paths relative to the file); prints [{"ok": true, "text": ...} |
 *       {"ok": false, "error": ...}] (the format of tests/data/chat/expected.json).
 *   nextn chat-template parse --text-file T [--tools tools.json]
 *       prints the assistant message parsed from T: content, reasoning_content, tool_calls.
 * strftime_now uses the reference renderer's fixed clock with --fixed-clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/chat_template.h"
#include "chat/tool_parse.h"
#include "cli/cli.h"
#include "core/io.h"

static void usage(FILE *f) {
    fprintf(f, "usage: nextn chat-template render --cases CASES.json [--fixed-clock]\n"
               "       nextn chat-template parse --text-file T [--tools tools.json]\n");
}

static cJSON *read_json(const char *path, nx_error *err) {
    char *buf = NULL;
    size_t n = 0;
    if (nx_read_file(path, 1u << 26, &buf, &n, err) != NX_OK) return NULL;
    cJSON *j = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!j) nx_fail(err, NX_ERR_FORMAT, "%s: not valid JSON", path);
    return j;
}

/* One case -> {"ok":..., "text"|"error": ...} */
static cJSON *render_case(const cJSON *c, const char *dir, bool fixed_clock) {
    cJSON *res = cJSON_CreateObject();
    nx_error err = {0};
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(c, "template");
    char path[4096], *src = NULL;
    size_t sn = 0;
    if (!cJSON_IsString(tp)) nx_fail(&err, NX_ERR_INVALID_ARG, "the case has no template");
    else {
        snprintf(path, sizeof path, "%s/%s", dir, tp->valuestring);
        nx_read_file(path, 1u << 24, &src, &sn, &err);
    }
    cJSON *vars = cJSON_CreateObject();
    if (!err.code) {
        /* the variables apply_chat_template passes, kwargs included (nx_chat_template_render
         * would add bos/eos itself; the cases name them, so the plain engine is used) */
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "messages"), *agp = cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt");
        const cJSON *bos = cJSON_GetObjectItemCaseSensitive(c, "bos_token"), *eos = cJSON_GetObjectItemCaseSensitive(c, "eos_token");
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(c, "tools"), *kw = cJSON_GetObjectItemCaseSensitive(c, "kwargs");
        cJSON_AddItemToObject(vars, "messages", m ? cJSON_Duplicate(m, 1) : cJSON_CreateArray());
        cJSON_AddBoolToObject(vars, "add_generation_prompt", agp ? cJSON_IsTrue(agp) : 1);
        cJSON_AddStringToObject(vars, "bos_token", cJSON_IsString(bos) ? bos->valuestring : "");
        cJSON_AddStringToObject(vars, "eos_token", cJSON_IsString(eos) ? eos->valuestring : "");
        const cJSON *k;
        cJSON_ArrayForEach(k, kw) cJSON_AddItemToObject(vars, k->string, cJSON_Duplicate(k, 1));
        if (tools && !cJSON_IsNull(tools)) cJSON_AddItemToObject(vars, "tools", cJSON_Duplicate(tools, 1));
        nx_jinja_template *t = nx_jinja_parse(src, sn, &err);
        char *out = NULL;
        size_t on = 0;
        if (t) {
            nx_jinja_limits lim = { .now = fixed_clock ? 1767323045 : 0 };
            nx_jinja_render(t, vars, &lim, &out, &on, NULL, &err);
        }
        if (out) {
            cJSON_AddBoolToObject(res, "ok", 1);
            cJSON_AddStringToObject(res, "text", out);
        }
        free(out);
        nx_jinja_free(t);
    }
    if (err.code) {
        cJSON_AddBoolToObject(res, "ok", 0);
        cJSON_AddStringToObject(res, "error", err.msg);
    }
    free(src);
    cJSON_Delete(vars);
    return res;
}

int nx_cmd_chat_template(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) { usage(argc < 2 ? stderr : stdout); return argc < 2 ? 2 : 0; }
    const char *cases = NULL, *text = NULL, *tools_path = NULL;
    bool fixed = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--fixed-clock")) { fixed = true; continue; }
        if (!v) { fprintf(stderr, "nextn chat-template: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--cases")) cases = v;
        else if (!strcmp(a, "--text-file")) text = v;
        else if (!strcmp(a, "--tools")) tools_path = v;
        else if (!strcmp(a, "--template")) { /* accepted for the spelling; parsing needs no template */ }
        else { fprintf(stderr, "nextn chat-template: unknown option %s\n", a); usage(stderr); return 2; }
        i++;
    }
    nx_error err = {0};
    if (!strcmp(argv[1], "render")) {
        if (!cases) { usage(stderr); return 2; }
        cJSON *cs = read_json(cases, &err);
        if (!cJSON_IsArray(cs)) { fprintf(stderr, "nextn chat-template: %s\n", err.code ? err.msg : "the cases must be an array"); cJSON_Delete(cs); return 1; }
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", cases);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
        cJSON *out = cJSON_CreateArray();
        const cJSON *c;
        cJSON_ArrayForEach(c, cs) cJSON_AddItemToArray(out, render_case(c, dir, fixed));
        char *s = cJSON_Print(out);
        if (s) puts(s);
        free(s);
        cJSON_Delete(out);
        cJSON_Delete(cs);
        return 0;
    }
    if (!strcmp(argv[1], "parse")) {
        if (!text) { usage(stderr); return 2; }
        char *buf = NULL;
        size_t n = 0;
        if (nx_read_file(text, 1u << 26, &buf, &n, &err) != NX_OK) { fprintf(stderr, "nextn chat-template: %s\n", err.msg); return 1; }
        cJSON *tools = tools_path ? read_json(tools_path, &err) : NULL;
        if (tools_path && !tools) { fprintf(stderr, "nextn chat-template: %s\n", err.msg); free(buf); return 1; }
        nx_chat_parsed p;
        if (nx_chat_parse_output(buf, n, tools, &p, &err) != NX_OK) { fprintf(stderr, "nextn chat-template: %s\n", err.msg); free(buf); cJSON_Delete(tools); return 1; }
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", p.content);
        if (p.reasoning) cJSON_AddStringToObject(m, "reasoning_content", p.reasoning);
        if (p.tool_calls) { cJSON_AddItemToObject(m, "tool_calls", p.tool_calls); p.tool_calls = NULL; }
        char *s = cJSON_Print(m);
        if (s) puts(s);
        free(s);
        cJSON_Delete(m);
        nx_chat_parsed_free(&p);
        cJSON_Delete(tools);
        free(buf);
        return 0;
    }
    usage(stderr);
    return 2;
}
