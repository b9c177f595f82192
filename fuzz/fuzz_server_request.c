/*
 * fuzz_server_request.c — libFuzzer target for the server's request validation (request.c) and
 * the JSON text writer the responses use.
 *
 * The first byte picks the endpoint (chat / completions / native) and the chat format; the rest
 * is the request body. nx_api_parse must either fail with an HTTP status in 400..599, an error
 * type and a non-empty message, or succeed with a request that is internally consistent (prompt
 * text or token ids in the vocabulary, stops within limits, slot id in range, speculative type
 * among the loaded drafters) and that nx_gen_submit's checks would not call malformed. The body is
 * also written as a JSON string, which must parse back. Anything else traps.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "server/http_impl.h"
#include "server/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    nx_gen_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.alias, sizeof info.alias, "fuzz");
    info.ready = true;
    info.n_slots = 3;
    info.n_ctx_slot = 128;
    info.n_vocab = 300;
    info.chat_format = (data[0] & 4) ? NX_CHAT_GEMMA : NX_CHAT_CHATML;
    info.n_drafters = 2;
    info.drafters[0] = NX_SPEC_NGRAM;
    info.drafters[1] = NX_SPEC_MTP;
    info.spec = nx_spec_params_default();
    nx_api_kind kind = (nx_api_kind)(data[0] % 3);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    nx_api_request r;
    nx_api_error e;
    memset(&e, 0, sizeof e);
    nx_status st = nx_api_parse(kind, body, len, &info, &r, &e);
    if (st != NX_OK) {
        if (e.http < 400 || e.http > 599 || !e.type || !e.msg[0]) __builtin_trap();
    } else {
        if (!r.prompt_text && r.n_prompt_tokens <= 0) __builtin_trap();
        if (r.prompt_text && strlen(r.prompt_text) != r.prompt_len) {
            /* Text may hold NUL only if the JSON had \u0000 — cJSON stops there, so lengths agree. */
            __builtin_trap();
        }
        for (int i = 0; i < r.n_prompt_tokens; i++)
            if (r.prompt_tokens[i] < 0 || r.prompt_tokens[i] >= info.n_vocab) __builtin_trap();
        if (r.gen.n_stop < 0 || r.gen.n_stop > NX_GEN_MAX_STOPS) __builtin_trap();
        for (int i = 0; i < r.gen.n_stop; i++)
            if (r.gen.stop_len[i] == 0 || r.gen.stop_len[i] > NX_GEN_STOP_MAX_LEN) __builtin_trap();
        if (r.gen.id_slot < -1 || r.gen.id_slot >= info.n_slots) __builtin_trap();
        if (r.gen.n_predict < -1 || r.gen.n_probs < 0 || r.gen.n_probs > NX_GEN_TOP_MAX) __builtin_trap();
        if (r.gen.spec.has_type && r.gen.spec.type != NX_SPEC_NONE && r.gen.spec.type != NX_SPEC_NGRAM &&
            r.gen.spec.type != NX_SPEC_MTP) __builtin_trap();
        for (int i = 0; i < r.gen.sampling.n_logit_bias; i++)
            if (r.gen.sampling.logit_bias[i].token < 0 || r.gen.sampling.logit_bias[i].token >= info.n_vocab) __builtin_trap();
        nx_api_request_free(&r);
    }
    /* The response writer: any bytes become a JSON string that parses back. */
    cJSON *s = nx_http_json_bytes(body, len);
    char *txt = cJSON_PrintUnformatted(s);
    cJSON *back = txt ? cJSON_Parse(txt) : NULL;
    if (!back || !cJSON_IsString(back)) __builtin_trap();
    cJSON_Delete(back);
    free(txt);
    cJSON_Delete(s);
    return 0;
}
