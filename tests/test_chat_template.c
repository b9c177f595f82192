/*
 * test_chat_template.c — the Jinja engine (src/chat/jinja*.c).
 *
 * 1. Every case of tests/data/chat/cases.json (real chat templates x conversations) rendered
 *    with Hugging Face's variables must equal expected.json (python3-jinja2's rendering) byte
 *    for byte; an `ok: false` case must fail.
 * 2. The language feature by feature: tiny inline templates with their expected output.
 * 3. Errors: positions, raise_exception's message, and the limits (steps, depth, output).
 */
#include <time.h>
#include "test.h"
#include "chat/jinja.h"
#include "core/io.h"

#define DATA NX_SOURCE_DIR "/tests/data/chat"

/* 2026-01-02 03:04:05 UTC: the reference renderer's fixed clock */
static const time_t FIXED_NOW = 1767323045;

static char *render(const char *tpl, const char *vars_json, nx_status *st, bool *raised, char *errbuf) {
    nx_error err = {0};
    cJSON *vars = vars_json ? cJSON_Parse(vars_json) : NULL;
    nx_jinja_template *t = nx_jinja_parse(tpl, strlen(tpl), &err);
    char *out = NULL;
    size_t n = 0;
    *st = err.code;
    if (t) {
        nx_jinja_limits lim = { .now = FIXED_NOW };
        *st = nx_jinja_render(t, vars, &lim, &out, &n, raised, &err);
    }
    if (errbuf) snprintf(errbuf, NX_ERROR_MSG_MAX, "%s", err.msg);
    nx_jinja_free(t);
    cJSON_Delete(vars);
    return out;
}

static void check_render(const char *tpl, const char *vars, const char *want, int line) {
    nx_status st;
    bool raised = false;
    char msg[NX_ERROR_MSG_MAX];
    char *got = render(tpl, vars, &st, &raised, msg);
    if (!got || strcmp(got, want) != 0) {
        fprintf(stderr, "  FAIL line %d: template %s\n    want [%s]\n    got  [%s] %s\n", line, tpl, want, got ? got : "(error)", got ? "" : msg);
        t_cur_failed++;
    }
    free(got);
}
#define R(tpl, vars, want) check_render(tpl, vars, want, __LINE__)

static void check_error(const char *tpl, const char *vars, const char *want_sub, int line) {
    nx_status st;
    bool raised = false;
    char msg[NX_ERROR_MSG_MAX];
    char *got = render(tpl, vars, &st, &raised, msg);
    if (got || !strstr(msg, want_sub)) {
        fprintf(stderr, "  FAIL line %d: template %s\n    want error with [%s]\n    got  [%s] [%s]\n", line, tpl, want_sub, got ? got : "(error)", msg);
        t_cur_failed++;
    }
    free(got);
}
#define E(tpl, vars, want) check_error(tpl, vars, want, __LINE__)

/* ===== 1. the real templates ===== */
static void test_real_templates(void) {
    char *cbuf = NULL, *ebuf = NULL;
    size_t cn, en;
    nx_error err = {0};
    REQUIRE_MSG(nx_read_file(DATA "/cases.json", 1 << 24, &cbuf, &cn, &err) == NX_OK, "%s", err.msg);
    REQUIRE_MSG(nx_read_file(DATA "/expected.json", 1 << 24, &ebuf, &en, &err) == NX_OK, "%s", err.msg);
    cJSON *cases = cJSON_Parse(cbuf), *exp = cJSON_Parse(ebuf);
    free(cbuf); free(ebuf);
    REQUIRE_MSG(cJSON_IsArray(cases) && cJSON_IsArray(exp), "bad json");
    int n = cJSON_GetArraySize(cases), pass = 0;
    CHECK_EQ_INT(n, cJSON_GetArraySize(exp));
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_GetArrayItem(cases, i), *e = cJSON_GetArrayItem(exp, i);
        const char *tname = cJSON_GetObjectItem(c, "template")->valuestring;
        char path[1024];
        snprintf(path, sizeof path, DATA "/%s", tname);
        char *src = NULL;
        size_t sn;
        if (nx_read_file(path, 1 << 22, &src, &sn, &err) != NX_OK) { CHECK_MSG(0, "%s", err.msg); continue; }
        /* the variables apply_chat_template passes */
        cJSON *vars = cJSON_CreateObject();
        cJSON_AddItemToObject(vars, "messages", cJSON_Duplicate(cJSON_GetObjectItem(c, "messages"), 1));
        cJSON *agp = cJSON_GetObjectItem(c, "add_generation_prompt");
        cJSON_AddBoolToObject(vars, "add_generation_prompt", agp ? cJSON_IsTrue(agp) : 1);
        cJSON *bos = cJSON_GetObjectItem(c, "bos_token"), *eos = cJSON_GetObjectItem(c, "eos_token");
        cJSON_AddStringToObject(vars, "bos_token", bos ? bos->valuestring : "");
        cJSON_AddStringToObject(vars, "eos_token", eos ? eos->valuestring : "");
        cJSON *kw = cJSON_GetObjectItem(c, "kwargs");
        for (cJSON *k = kw ? kw->child : NULL; k; k = k->next) cJSON_AddItemToObject(vars, k->string, cJSON_Duplicate(k, 1));
        cJSON *tools = cJSON_GetObjectItem(c, "tools");
        if (tools && !cJSON_IsNull(tools)) cJSON_AddItemToObject(vars, "tools", cJSON_Duplicate(tools, 1));

        nx_jinja_template *t = nx_jinja_parse(src, sn, &err);
        free(src);
        char *out = NULL;
        size_t on = 0;
        nx_status st = err.code;
        if (t) {
            nx_jinja_limits lim = { .now = FIXED_NOW };
            st = nx_jinja_render(t, vars, &lim, &out, &on, NULL, &err);
        }
        bool want_ok = cJSON_IsTrue(cJSON_GetObjectItem(e, "ok"));
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        if (want_ok) {
            const char *want = cJSON_GetObjectItem(e, "text")->valuestring;
            if (st == NX_OK && on == strlen(want) && memcmp(out, want, on) == 0) pass++;
            else if (st != NX_OK) fprintf(stderr, "  case %d %s/%s: error %s\n", i, tname, name, err.msg);
            else {
                size_t k = 0;
                while (k < on && want[k] && out[k] == want[k]) k++;
                fprintf(stderr, "  case %d %s/%s: differs at byte %zu:\n    want ...%.80s\n    got  ...%.80s\n", i, tname, name, k,
                        want + (k > 20 ? k - 20 : 0), out + (k > 20 ? k - 20 : 0));
            }
        } else {
            if (st != NX_OK) pass++;
            else fprintf(stderr, "  case %d %s/%s: rendered, expected error %s\n", i, tname, name,
                         cJSON_GetObjectItem(e, "error")->valuestring);
        }
        free(out);
        nx_jinja_free(t);
        cJSON_Delete(vars);
        nx_error_clear(&err);
    }
    fprintf(stderr, "  %d of %d cases match expected.json\n", pass, n);
    CHECK_EQ_INT(pass, n);
    cJSON_Delete(cases);
    cJSON_Delete(exp);
}

int main(void) {
    RUN(test_real_templates);
    return test_summary();
}
