/*
 * fuzz_jinja.c — libFuzzer target for the Jinja engine (src/chat/jinja*.c).
 *
 * Input: a template, optionally followed by a NUL byte and a JSON object of variables (else a
 * fixed chat: messages with tool calls, tools, add_generation_prompt). The template is parsed
 * and, when that works, rendered under small limits (steps, depth, output, memory), so every
 * input finishes quickly. A failure must carry a status and a message; a success must give a
 * buffer of the stated length; nothing may crash, leak or hang. Broken promises trap.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "chat/jinja.h"

static const char DEFAULT_VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Weather in Paris?\"}]},"
    " {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"think\","
    "  \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": 2.5}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"{\\\"t\\\": 21}\"},"
    " {\"role\": \"assistant\", \"content\": \"21 \\u00b0C <think>x</think>\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\","
    "  \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"enum\": [\"a\"]}},"
    "  \"required\": [\"city\"]}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    cJSON *vars = NULL;
    if (nul) {
        size_t jlen = size - tlen - 1;
        char *j = malloc(jlen + 1);
        if (!j) return 0;
        memcpy(j, nul + 1, jlen);
        j[jlen] = 0;
        vars = cJSON_Parse(j);
        free(j);
    }
    if (!vars) vars = cJSON_Parse(DEFAULT_VARS);
    nx_error err = {0};
    nx_jinja_template *t = nx_jinja_parse(src, tlen, &err);
    if (!t) {
        if (err.code == NX_OK || !err.msg[0]) __builtin_trap();
    } else {
        nx_jinja_limits lim = { .max_steps = 200000, .max_depth = 64, .max_output = 1 << 20, .max_memory = 32u << 20, .now = 1767323045 };
        for (int round = 0; round < 2; round++) {   /* a template renders again the same way */
            char *out = NULL;
            size_t n = 0;
            bool raised = false;
            nx_error e2 = {0};
            nx_status st = nx_jinja_render(t, vars, &lim, &out, &n, &raised, &e2);
            if (st == NX_OK) {
                if (!out || out[n] != 0 || n > lim.max_output) __builtin_trap();
                free(out);
            } else {
                if (out || e2.code != st) __builtin_trap();
                if (!raised && !e2.msg[0]) __builtin_trap();
            }
        }
        nx_jinja_free(t);
    }
    cJSON_Delete(vars);
    return 0;
}
