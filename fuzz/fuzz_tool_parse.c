/*
 * fuzz_tool_parse.c — libFuzzer target for the tool-call / reasoning parser (src/chat/tool_parse.c).
 *
 * Input: model text. It is parsed with a fixed tools array (schema types for the XML values).
 * The result must be well formed: content non-NULL, every call an object with an id, a name and
 * arguments that are a JSON object's text; no two calls equal. Broken promises trap.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "chat/tool_parse.h"

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"opts\":{\"type\":\"object\"}}}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *tools = cJSON_Parse(TOOLS);
    nx_chat_parsed p;
    nx_error err = {0};
    if (nx_chat_parse_output((const char *)data, size, tools, &p, &err) != NX_OK) {
        if (err.code != NX_ERR_NOMEM) __builtin_trap();
        cJSON_Delete(tools);
        return 0;
    }
    if (!p.content) __builtin_trap();
    int n = cJSON_GetArraySize(p.tool_calls);
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(p.tool_calls, i);
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name"), *a = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "id")) || !cJSON_IsString(nm) || !cJSON_IsString(a)) __builtin_trap();
        cJSON *obj = cJSON_Parse(a->valuestring);
        if (!cJSON_IsObject(obj)) __builtin_trap();
        cJSON_Delete(obj);
        for (int j = 0; j < i; j++) {
            const cJSON *g = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(p.tool_calls, j), "function");
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(g, "name")->valuestring, nm->valuestring) &&
                !strcmp(cJSON_GetObjectItemCaseSensitive(g, "arguments")->valuestring, a->valuestring)) __builtin_trap();
        }
    }
    nx_chat_parsed_free(&p);
    cJSON_Delete(tools);
    return 0;
}
