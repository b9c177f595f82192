/*
 * request.c — parse and validate completion request bodies (see request.h).
 * Every check names the field; nothing here touches a backend beyond its info.
 */
#include "server/request.h"
#include "chat/chat_template.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

nx_status nx_api_fail(nx_api_error *e, int http, const char *type, const char *fmt, ...) {
    e->http = http;
    e->type = type;
    e->code = NULL;
    e->param[0] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return http >= 500 ? NX_ERR_INTERNAL : NX_ERR_INVALID_ARG;
}

#define BAD(...) nx_api_fail(e, 400, "invalid_request_error", __VA_ARGS__)

/* A 400 naming the field at fault. */
static nx_status bad_param(nx_api_error *e, const char *param, nx_status st) {
    snprintf(e->param, sizeof e->param, "%s", param);
    return st;
}
#define BADP(param, ...) bad_param(e, (param), BAD(__VA_ARGS__))

/* ===== Typed field access: absent or null keeps the default ===== */

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static nx_status get_bool(const cJSON *o, const char *key, bool *out, nx_api_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return NX_OK;
    if (!cJSON_IsBool(v)) return BADP(key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return NX_OK;
}

static nx_status as_int(const cJSON *v, const char *key, long long lo, long long hi, long long *out, nx_api_error *e) {
    if (!cJSON_IsNumber(v)) return BADP(key, "'%s' must be an integer", key);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d)) return BADP(key, "'%s' must be an integer", key);
    if (d < (double)lo || d > (double)hi) {
        if (hi == INT32_MAX || hi == INT64_MAX / 2) return BADP(key, "'%s' must be at least %lld (got %.17g)", key, lo, d);
        return BADP(key, "'%s' must be in %lld..%lld (got %.17g)", key, lo, hi, d);
    }
    *out = (long long)d;
    return NX_OK;
}

static nx_status get_int(const cJSON *o, const char *key, long long lo, long long hi, int *out, nx_api_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return NX_OK;
    long long x;
    nx_status st = as_int(v, key, lo, hi, &x, e);
    if (st == NX_OK) *out = (int)x;
    return st;
}

static nx_status get_num(const cJSON *o, const char *key, double lo, double hi, float *out, nx_api_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return NX_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return BADP(key, "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi) return BADP(key, "'%s' must be in %g..%g (got %g)", key, lo, hi, v->valuedouble);
    *out = (float)v->valuedouble;
    return NX_OK;
}

#define TRY(x) do { nx_status _st = (x); if (_st != NX_OK) return _st; } while (0)

/* ===== Pieces ===== */

static char *dup_bytes(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

static nx_status parse_stop(const cJSON *root, nx_api_request *r, nx_api_error *e) {
    const cJSON *v = field(root, "stop");
    if (!v) return NX_OK;
    int n = 0;
    if (cJSON_IsString(v)) n = 1;
    else if (cJSON_IsArray(v)) n = cJSON_GetArraySize(v);
    else return BADP("stop", "'stop' must be a string or an array of strings");
    if (n > NX_GEN_MAX_STOPS) return BADP("stop", "'stop' holds %d strings; at most %d are allowed", n, NX_GEN_MAX_STOPS);
    r->stops = calloc((size_t)(n ? n : 1), sizeof *r->stops);
    r->stop_lens = calloc((size_t)(n ? n : 1), sizeof *r->stop_lens);
    if (!r->stops || !r->stop_lens) return nx_api_fail(e, 500, "server_error", "out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s)) return BADP("stop", "'stop[%d]' must be a string", i);
        size_t len = strlen(s->valuestring);
        if (len == 0) continue;   /* an empty stop string would end every generation at once */
        if (len > NX_GEN_STOP_MAX_LEN) return BADP("stop", "'stop' strings have at most %d bytes", NX_GEN_STOP_MAX_LEN);
        int k = r->gen.n_stop;
        r->stops[k] = dup_bytes(s->valuestring, len);
        if (!r->stops[k]) return nx_api_fail(e, 500, "server_error", "out of memory");
        r->stop_lens[k] = len;
        r->gen.n_stop = k + 1;
    }
    r->gen.stop = (const char *const *)r->stops;
    r->gen.stop_len = r->stop_lens;
    return NX_OK;
}

static nx_status add_bias(nx_api_request *r, int *n, long long tok, const cJSON *val, const char *what,
                          const nx_gen_info *info, nx_api_error *e) {
    if (tok < 0 || tok >= info->n_vocab) return BADP("logit_bias", "'logit_bias': token %lld is outside the vocabulary (0..%d)", tok, (int)info->n_vocab - 1);
    float b;
    if (cJSON_IsFalse(val)) b = -INFINITY;
    else if (cJSON_IsNumber(val) && isfinite(val->valuedouble)) b = (float)val->valuedouble;
    else return BADP("logit_bias", "'logit_bias' %s must be a number (or false)", what);
    r->bias[*n].token = (int32_t)tok;
    r->bias[*n].bias = b;
    (*n)++;
    return NX_OK;
}

static nx_status parse_logit_bias(const cJSON *root, nx_api_request *r, const nx_gen_info *info, nx_api_error *e) {
    const cJSON *v = field(root, "logit_bias");
    if (!v) return NX_OK;
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return BADP("logit_bias", "'logit_bias' must be an object {\"token id\": bias} or an array of [id, bias]");
    int n = cJSON_GetArraySize(v);
    if (n > 4096) return BADP("logit_bias", "'logit_bias' has %d entries; at most 4096 are allowed", n);
    r->bias = calloc((size_t)(n ? n : 1), sizeof *r->bias);
    if (!r->bias) return nx_api_fail(e, 500, "server_error", "out of memory");
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (cJSON_IsObject(v)) {
            const char *key = it->string;
            char *end = NULL;
            long long tok = key && *key ? strtoll(key, &end, 10) : -1;
            if (!end || *end) return BADP("logit_bias", "'logit_bias' keys must be token ids (got \"%.32s\")", key ? key : "");
            TRY(add_bias(r, &k, tok, it, "values", info, e));
        } else {
            if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2) return BADP("logit_bias", "'logit_bias' entries must be [token id, bias]");
            long long tok;
            TRY(as_int(cJSON_GetArrayItem(it, 0), "logit_bias[i][0]", 0, INT32_MAX, &tok, e));
            TRY(add_bias(r, &k, tok, cJSON_GetArrayItem(it, 1), "entries' second items", info, e));
        }
    }
    r->gen.sampling.logit_bias = r->bias;
    r->gen.sampling.n_logit_bias = k;
    return NX_OK;
}

static nx_status parse_spec_fields(const cJSON *o, const char *pfx, nx_gen_spec *sp, const nx_gen_info *info, nx_api_error *e) {
    char key[64];
    snprintf(key, sizeof key, "%sn_max", pfx);
    TRY(get_int(o, key, 0, NX_SPEC_DRAFT_CAP, &sp->n_max, e));
    snprintf(key, sizeof key, "%sn_min", pfx);
    TRY(get_int(o, key, 0, NX_SPEC_DRAFT_CAP, &sp->n_min, e));
    snprintf(key, sizeof key, "%sp_min", pfx);
    TRY(get_num(o, key, 0.0, 1.0, &sp->p_min, e));
    snprintf(key, sizeof key, "%sadaptive", pfx);
    bool ad = sp->adaptive > 0;
    const cJSON *av = field(o, key);
    TRY(get_bool(o, key, &ad, e));
    if (av) sp->adaptive = ad ? 1 : 0;
    /* the llama.cpp fork's name (ik_llama.cpp mtp_adaptive): adaptive k with the wall-clock guard */
    snprintf(key, sizeof key, "%smtp_adaptive", pfx);
    av = field(o, key);
    ad = sp->adaptive > 0;
    TRY(get_bool(o, key, &ad, e));
    if (av) sp->adaptive = ad ? 1 : 0;
    snprintf(key, sizeof key, "%stype", pfx);
    const cJSON *t = field(o, key);
    if (t) {
        char allowed[128] = "";
        size_t off = 0;
        for (int i = 0; i < info->n_drafters && i < NX_SPEC_MAX_STAGES; i++)
            off += (size_t)snprintf(allowed + off, off < sizeof allowed ? sizeof allowed - off : 0, "%s, ",
                                    nx_spec_type_name(info->drafters[i]));
        if (off < sizeof allowed) snprintf(allowed + off, sizeof allowed - off, "none");
        if (!cJSON_IsString(t)) return BADP(key, "'%s' must be a string (allowed: %s)", key, allowed);
        nx_spec_type ty;
        if (nx_spec_type_parse(t->valuestring, &ty, NULL) != NX_OK)
            return BADP(key, "'%s': unknown speculative type '%.32s' (allowed: %s)", key, t->valuestring, allowed);
        bool ok = ty == NX_SPEC_NONE;
        for (int i = 0; i < info->n_drafters; i++) ok |= info->drafters[i] == ty;
        if (!ok) return BADP(key, "'%s': '%s' was not loaded at startup (allowed: %s)", key, nx_spec_type_name(ty), allowed);
        sp->has_type = true;
        sp->type = ty;
    }
    if (sp->n_min >= 0 && sp->n_max >= 0 && sp->n_min > sp->n_max)
        return BADP("speculative.n_min", "speculative n_min (%d) is larger than n_max (%d)", sp->n_min, sp->n_max);
    return NX_OK;
}

static nx_status parse_prompt(const cJSON *root, nx_api_request *r, const nx_gen_info *info, nx_api_error *e) {
    const cJSON *v = field(root, "prompt");
    if (!v) return BADP("prompt", "'prompt' is required");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(cJSON_GetArrayItem(v, 0)))
        v = cJSON_GetArrayItem(v, 0);
    if (cJSON_IsString(v)) {
        r->prompt_len = strlen(v->valuestring);
        r->prompt_text = dup_bytes(v->valuestring, r->prompt_len);
        if (!r->prompt_text) return nx_api_fail(e, 500, "server_error", "out of memory");
        return NX_OK;
    }
    if (!cJSON_IsArray(v)) return BADP("prompt", "'prompt' must be a string or an array of token ids");
    int n = cJSON_GetArraySize(v);
    if (n == 0) return BADP("prompt", "'prompt' is empty");
    const cJSON *it;
    cJSON_ArrayForEach(it, v) if (cJSON_IsString(it) || cJSON_IsArray(it))
        return BADP("prompt", "'prompt' holds several prompts; only one prompt per request is supported");
    r->prompt_tokens = malloc((size_t)n * sizeof *r->prompt_tokens);
    if (!r->prompt_tokens) return nx_api_fail(e, 500, "server_error", "out of memory");
    int i = 0;
    cJSON_ArrayForEach(it, v) {
        long long tok;
        TRY(as_int(it, "prompt[i]", 0, (long long)info->n_vocab - 1, &tok, e));
        r->prompt_tokens[i++] = (nx_token)tok;
    }
    r->n_prompt_tokens = n;
    return NX_OK;
}

/* tool_choice "required" / a named function without a grammar: the answer is begun in the
 * prompt. The template renders the chat once more with an assistant turn calling the function
 * (a probe name for "required"); that turn's text up to the name's start ("required") or end
 * (named) is the prefill: the model has to go on with a name / the arguments. The call format
 * is thus the template's own, for any family. When the probe turn does not continue the prompt
 * (a template that rewrites earlier turns), nothing is forced: the tools are only offered. */
static nx_status force_call(const cJSON *msgs, nx_api_request *r, const nx_chat_template *tpl, const cJSON *kw,
                            nx_api_error *e) {
    static const char PROBE[] = "nx_required_fn_probe";
    const char *name = r->tool_choice_name ? r->tool_choice_name : PROBE;
    cJSON *m2 = cJSON_Duplicate(msgs, 1), *turn = cJSON_CreateObject();
    if (!m2 || !turn) { cJSON_Delete(m2); cJSON_Delete(turn); return nx_api_fail(e, 500, "server_error", "out of memory"); }
    cJSON_AddStringToObject(turn, "role", "assistant");
    cJSON_AddStringToObject(turn, "content", "");
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddStringToObject(call, "id", "call_1");
    cJSON_AddStringToObject(call, "type", "function");
    cJSON_AddStringToObject(fn, "name", name);
    cJSON_AddObjectToObject(fn, "arguments");
    cJSON_AddItemToObject(call, "function", fn);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(turn, "tool_calls"), call);
    cJSON_AddItemToArray(m2, turn);
    char *full = NULL;
    size_t fl = 0;
    bool raised = false;
    nx_status st = nx_chat_template_render(tpl, m2, r->tools, kw, false, &full, &fl, &raised, NULL);
    cJSON_Delete(m2);
    if (st != NX_OK) return NX_OK;   /* the template refuses the probe: offered only */
    /* The probe turn's text starts where it leaves the prompt, from that line's start: a
     * generation prompt may end with a tail the turn does not write (Gemma 4's empty thought
     * block), then the turn's own text goes after that tail. */
    size_t L = 0;
    while (L < fl && L < r->prompt_len && full[L] == r->prompt_text[L]) L++;
    if (L < r->prompt_len)
        while (L > 0 && full[L - 1] != '\n') L--;
    const char *at = r->prompt_len - L <= 128 ? strstr(full + L, name) : NULL;
    if (at && (size_t)(at - full) - L <= 256) {
        size_t end = (size_t)(at - full) + (r->tool_choice_name ? strlen(name) : 0), n = end - L;
        char *p = realloc(r->prompt_text, r->prompt_len + n + 1);
        r->prefill = malloc(n + 1);
        if (!p || !r->prefill) { if (p) r->prompt_text = p; free(full); return nx_api_fail(e, 500, "server_error", "out of memory"); }
        r->prompt_text = p;
        memcpy(r->prefill, full + L, n);
        r->prefill[n] = 0;
        r->prefill_len = n;
        memcpy(r->prompt_text + r->prompt_len, r->prefill, n + 1);
        r->prompt_len += n;
    }
    free(full);
    return NX_OK;
}

/* The model's Jinja template (chat_template.h): messages as sent (text parts joined, string
 * arguments decoded), chat_template_kwargs as extra variables; raise_exception -> 400 with its
 * message. */
static nx_status render_template(const cJSON *root, const cJSON *msgs, nx_api_request *r, const nx_gen_info *info,
                                 nx_api_error *e) {
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (!cJSON_IsObject(m)) return BADP("messages", "'messages[%d]' must be an object", i);
        if (!cJSON_IsString(field(m, "role"))) return BADP("messages", "'messages[%d].role' must be a string", i);
        i++;
    }
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw)) return BADP("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    bool agp = true;
    TRY(get_bool(root, "add_generation_prompt", &agp, e));
    nx_error err = {0};
    bool raised = false;
    const nx_chat_template *tpl = r->tools && info->chat_template_tools ? info->chat_template_tools : info->chat_template;
    if (nx_chat_template_render(tpl, msgs, r->tools, kw, agp, &r->prompt_text, &r->prompt_len,
                                &raised, &err) != NX_OK) {
        if (raised) return BAD("%s", err.msg);
        if (err.code == NX_ERR_NOMEM || err.code == NX_ERR_RANGE) return nx_api_fail(e, 500, "server_error", "chat template: %s", err.msg);
        return BAD("chat template: %s", err.msg);
    }
    if (r->tool_required) TRY(force_call(msgs, r, tpl, kw, e));
    /* a template that writes bos_token itself (Llama 3) must not get a second one from the
     * tokenizer's add_bos */
    const char *bos = nx_chat_template_bos(tpl);
    size_t bl = strlen(bos);
    if (info->add_bos && bl && r->prompt_len >= bl && memcmp(r->prompt_text, bos, bl) == 0) {
        memmove(r->prompt_text, r->prompt_text + bl, r->prompt_len - bl + 1);
        r->prompt_len -= bl;
    }
    r->prompt_special = true;
    return NX_OK;
}

/* Message content: a string, null, or an array of {"type":"text","text":...} parts (joined). */
static nx_status parse_messages(const cJSON *root, nx_api_request *r, const nx_gen_info *info, nx_api_error *e) {
    const cJSON *v = field(root, "messages");
    if (!v) return BADP("messages", "'messages' is required");
    if (!cJSON_IsArray(v)) return BADP("messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(v);
    if (n == 0) return BADP("messages", "'messages' must hold at least one message");
    if (info->chat_template) return render_template(root, v, r, info, e);
    nx_chat_msg *msgs = calloc((size_t)n, sizeof *msgs);
    char **owned = calloc((size_t)n, sizeof *owned);
    nx_status st = NX_OK;
    if (!msgs || !owned) st = nx_api_fail(e, 500, "server_error", "out of memory");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        if (st != NX_OK) break;
        if (!cJSON_IsObject(m)) { st = BADP("messages", "'messages[%d]' must be an object", i); break; }
        const cJSON *role = field(m, "role");
        if (!cJSON_IsString(role)) { st = BADP("messages", "'messages[%d].role' must be a string", i); break; }
        msgs[i].role = role->valuestring;
        const cJSON *c = field(m, "content");
        if (!c) {
            msgs[i].content = "";
        } else if (cJSON_IsString(c)) {
            msgs[i].content = c->valuestring;
            msgs[i].content_len = strlen(c->valuestring);
        } else if (cJSON_IsArray(c)) {
            size_t total = 0;
            const cJSON *part;
            int j = 0;
            cJSON_ArrayForEach(part, c) {
                const cJSON *ty = cJSON_IsObject(part) ? field(part, "type") : NULL;
                const cJSON *tx = cJSON_IsObject(part) ? field(part, "text") : NULL;
                if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") != 0) {
                    st = BADP("messages", "'messages[%d].content[%d]': only parts of type \"text\" are supported", i, j);
                    break;
                }
                if (!cJSON_IsString(tx)) { st = BADP("messages", "'messages[%d].content[%d].text' must be a string", i, j); break; }
                total += strlen(tx->valuestring);
                j++;
            }
            if (st != NX_OK) break;
            owned[i] = malloc(total + 1);
            if (!owned[i]) { st = nx_api_fail(e, 500, "server_error", "out of memory"); break; }
            size_t off = 0;
            cJSON_ArrayForEach(part, c) {
                size_t L = strlen(field(part, "text")->valuestring);
                memcpy(owned[i] + off, field(part, "text")->valuestring, L);
                off += L;
            }
            owned[i][off] = 0;
            msgs[i].content = owned[i];
            msgs[i].content_len = off;
        } else {
            st = BADP("messages", "'messages[%d].content' must be a string or an array of text parts", i);
            break;
        }
        i++;
    }
    if (st == NX_OK) {
        nx_error err = {0};
        if (nx_chat_render(info->chat_format, msgs, n, true, &r->prompt_text, &r->prompt_len, &err) != NX_OK)
            st = err.code == NX_ERR_NOMEM ? nx_api_fail(e, 500, "server_error", "%s", err.msg) : BADP("messages", "%s", err.msg);
        r->prompt_special = true;
    }
    for (int k = 0; owned && k < n; k++) free(owned[k]);
    free(owned);
    free(msgs);
    return st;
}

/* ===== The whole request ===== */

static nx_status parse_body(nx_api_kind kind, const cJSON *root, const nx_gen_info *info, nx_api_request *r,
                            nx_api_error *e) {
    if (!cJSON_IsObject(root)) return BAD("the request body must be a JSON object");
    nx_gen_request *g = &r->gen;
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model)) return BADP("model", "'model' must be a string");
    if (model) {
        r->model = dup_bytes(model->valuestring, strlen(model->valuestring));
        if (!r->model) return nx_api_fail(e, 500, "server_error", "out of memory");
    }
    TRY(get_bool(root, "stream", &r->stream, e));
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return BADP("stream_options", "'stream_options' must be an object");
        TRY(get_bool(so, "include_usage", &r->include_usage, e));
    }
    int n = 1;
    TRY(get_int(root, "n", INT32_MIN, INT32_MAX, &n, e));
    if (n != 1) return BADP("n", "'n' must be 1 (got %d): one choice per request", n);
    /* Lengths: OpenAI names first, llama.cpp's n_predict too. */
    bool openai = kind != NX_API_NATIVE;
    TRY(get_int(root, "n_predict", -1, INT32_MAX, &g->n_predict, e));
    TRY(get_int(root, "max_tokens", openai ? 1 : -1, INT32_MAX, &g->n_predict, e));
    if (kind == NX_API_CHAT) TRY(get_int(root, "max_completion_tokens", 1, INT32_MAX, &g->n_predict, e));
    /* Sampling: OpenAI's ranges; llama.cpp's native endpoint takes any temperature (<= 0: greedy). */
    nx_sampler_params *sp = &g->sampling;
    TRY(get_num(root, "temperature", openai ? 0.0 : -1e9, openai ? 2.0 : 1e9, &sp->temperature, e));
    TRY(get_num(root, "top_p", 0.0, 1.0, &sp->top_p, e));
    TRY(get_int(root, "top_k", 0, info->n_vocab, &sp->top_k, e));   /* 0: off, as llama.cpp */
    TRY(get_num(root, "min_p", 0.0, 1.0, &sp->min_p, e));
    TRY(get_int(root, "min_keep", 0, 1 << 20, &sp->min_keep, e));
    TRY(get_num(root, "presence_penalty", -2.0, 2.0, &sp->presence_penalty, e));
    TRY(get_num(root, "frequency_penalty", -2.0, 2.0, &sp->frequency_penalty, e));
    TRY(get_num(root, "repeat_penalty", 1e-6, 1e6, &sp->repeat_penalty, e));
    TRY(get_int(root, "repeat_last_n", -1, 1 << 20, &sp->penalty_last_n, e));
    const cJSON *seed = field(root, "seed");
    if (seed) {
        long long s;
        TRY(as_int(seed, "seed", INT64_MIN / 2, INT64_MAX / 2, &s, e));
        sp->seed = s == -1 ? NX_SAMPLER_SEED_RANDOM : (uint32_t)s;
    }
    TRY(parse_logit_bias(root, r, info, e));
    TRY(parse_stop(root, r, e));
    TRY(get_bool(root, "cache_prompt", &g->cache_prompt, e));
    TRY(get_bool(root, "ignore_eos", &g->ignore_eos, e));
    TRY(get_int(root, "id_slot", -1, info->n_slots - 1, &g->id_slot, e));
    if (r->model) {
        int pin = -1;
        if (!nx_api_model_known(info, r->model, &pin)) {
            nx_api_fail(e, 404, "invalid_request_error", "The model '%.100s' does not exist (this server serves '%.100s')",
                        r->model, info->alias);
            e->code = "model_not_found";
            snprintf(e->param, sizeof e->param, "model");
            return NX_ERR_INVALID_ARG;
        }
        if (g->id_slot < 0) g->id_slot = pin;
    }
    /* Log probabilities. */
    if (kind == NX_API_CHAT) {
        TRY(get_bool(root, "logprobs", &r->logprobs, e));
        TRY(get_int(root, "top_logprobs", 0, NX_GEN_TOP_MAX, &r->top_logprobs, e));
    } else if (kind == NX_API_COMPLETIONS) {
        int lp = -1;
        TRY(get_int(root, "logprobs", 0, NX_GEN_TOP_MAX, &lp, e));
        r->logprobs = lp >= 0;
        r->top_logprobs = lp > 0 ? lp : 0;
    } else {
        TRY(get_int(root, "n_probs", 0, NX_GEN_TOP_MAX, &r->top_logprobs, e));
        r->logprobs = r->top_logprobs > 0;
        TRY(get_bool(root, "return_tokens", &r->return_tokens, e));
    }
    g->want_logprob = r->logprobs;
    g->n_probs = r->logprobs ? r->top_logprobs : 0;   /* alternatives are only reported with logprobs */
    /* Speculation: a nested object and / or llama.cpp's flat keys. */
    const cJSON *spec = field(root, "speculative");
    if (spec) {
        if (!cJSON_IsObject(spec)) return BADP("speculative", "'speculative' must be an object");
        /* Check the nested fields under their flat names, so that messages say "speculative.x". */
        cJSON *flat = cJSON_CreateObject();
        if (!flat) return nx_api_fail(e, 500, "server_error", "out of memory");
        const cJSON *it;
        cJSON_ArrayForEach(it, spec) {
            char key[80];
            snprintf(key, sizeof key, "speculative.%.60s", it->string ? it->string : "");
            cJSON_AddItemReferenceToObject(flat, key, (cJSON *)it);
        }
        nx_status st = parse_spec_fields(flat, "speculative.", &g->spec, info, e);
        cJSON_Delete(flat);
        TRY(st);
    }
    TRY(parse_spec_fields(root, "speculative.", &g->spec, info, e));
    /* Features not supported (yet): refuse instead of silently ignoring. */
    if (kind == NX_API_COMPLETIONS) {
        bool echo = false;
        TRY(get_bool(root, "echo", &echo, e));
        if (echo) return BADP("echo", "'echo' is not supported");
        int best_of = 1;
        TRY(get_int(root, "best_of", INT32_MIN, INT32_MAX, &best_of, e));
        if (best_of != 1) return BADP("best_of", "'best_of' must be 1");
        const cJSON *suffix = field(root, "suffix");
        if (suffix && (!cJSON_IsString(suffix) || suffix->valuestring[0])) return BADP("suffix", "'suffix' is not supported");
    }
    if (kind == NX_API_CHAT) {
        const cJSON *tools = field(root, "tools");
        if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) return BADP("tools", "'tools' must be an array");
        if (cJSON_GetArraySize(tools) > 0 && !info->chat_template)
            return BADP("tools", "'tools' needs the model's chat template (the GGUF has none; see --chat-template-file)");
        /* tool_choice: "none" hides the tools; "auto" offers them; "required" and a named function
         * begin the answer with a call (force_call) */
        const cJSON *tc = field(root, "tool_choice");
        bool none = cJSON_IsString(tc) && !strcmp(tc->valuestring, "none");
        if (tc && !cJSON_IsNull(tc) && !cJSON_IsString(tc) && !cJSON_IsObject(tc)) return BADP("tool_choice", "'tool_choice' must be a string or an object");
        if (cJSON_IsString(tc) && !none && strcmp(tc->valuestring, "auto") && strcmp(tc->valuestring, "required"))
            return BADP("tool_choice", "'tool_choice' must be none, auto, required or a function");
        r->tool_required = cJSON_IsString(tc) && !strcmp(tc->valuestring, "required");
        if (cJSON_IsObject(tc)) {
            const cJSON *ty = field(tc, "type"), *nm = field(field(tc, "function"), "name");
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(nm))
                return BADP("tool_choice", "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
            bool known = false;
            const cJSON *t, *arr = cJSON_IsArray(tools) ? tools : NULL;
            cJSON_ArrayForEach(t, arr) {
                const cJSON *tn = field(field(t, "function"), "name");
                if (cJSON_IsString(tn) && !strcmp(tn->valuestring, nm->valuestring)) known = true;
            }
            if (!known) return BADP("tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'", nm->valuestring);
            if (!(r->tool_choice_name = strdup(nm->valuestring))) return nx_api_fail(e, 500, "server_error", "out of memory");
            r->tool_required = true;
        }
        if (r->tool_required && cJSON_GetArraySize(tools) == 0)
            return BADP("tool_choice", "'tool_choice' %s needs 'tools'", r->tool_choice_name ? "with a function" : "required");
        r->parallel_tools = true;
        TRY(get_bool(root, "parallel_tool_calls", &r->parallel_tools, e));
        if (cJSON_GetArraySize(tools) > 0 && !none) {
            r->tools = cJSON_Duplicate(tools, 1);
            if (!r->tools) return nx_api_fail(e, 500, "server_error", "out of memory");
        }
        const cJSON *rsf = field(root, "reasoning_format");
        if (rsf && !cJSON_IsNull(rsf) && (!cJSON_IsString(rsf) || !nx_reasoning_format_parse(rsf->valuestring, &r->reasoning_format)))
            return BADP("reasoning_format", "'reasoning_format' must be deepseek, deepseek-legacy, auto or none");
        const cJSON *rf = field(root, "response_format");
        if (rf) {
            const cJSON *t = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
            if (!cJSON_IsString(t)) return BADP("response_format", "'response_format.type' must be a string");
            if (strcmp(t->valuestring, "text") != 0) return BADP("response_format", "'response_format' type '%.32s' is not supported", t->valuestring);
        }
        TRY(parse_messages(root, r, info, e));
    } else {
        TRY(parse_prompt(root, r, info, e));
        r->prompt_special = true;
    }
    return NX_OK;
}

nx_status nx_api_parse(nx_api_kind kind, const char *body, size_t len, const nx_gen_info *info,
                       nx_api_request *out, nx_api_error *e) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    nx_gen_request_init(&out->gen, info->n_vocab);
    if (!body || len == 0) return BAD("the request body is empty (expected a JSON object)");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return BAD("malformed JSON in the request body (near byte %zu)", at);
    }
    nx_status st = parse_body(kind, root, info, out, e);
    cJSON_Delete(root);
    if (st != NX_OK) nx_api_request_free(out);
    return st;
}

/* name == base, or base followed by "-slotN" / "-sN" with N a slot. */
static bool model_match(const char *name, const char *base, size_t nb, int n_slots, int *slot) {
    if (nb == 0 || strncmp(name, base, nb) != 0) return false;
    const char *p = name + nb;
    if (!*p) { *slot = -1; return true; }
    if (!strncmp(p, "-slot", 5)) p += 5;
    else if (!strncmp(p, "-s", 2)) p += 2;
    else return false;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1])) return false;
    char *end;
    long s = strtol(p, &end, 10);
    if (*end || s >= n_slots) return false;
    *slot = (int)s;
    return true;
}

bool nx_api_model_known(const nx_gen_info *info, const char *name, int *slot) {
    int dummy;
    if (!slot) slot = &dummy;
    if (!name) return false;
    if (model_match(name, info->alias, strlen(info->alias), info->n_slots, slot)) return true;
    const char *b = strrchr(info->model_path, '/');
    b = b ? b + 1 : info->model_path;
    size_t nb = strlen(b);
    if (!strchr(b, '(') && model_match(name, b, nb, info->n_slots, slot)) return true;
    if (nb > 5 && !strcmp(b + nb - 5, ".gguf") && model_match(name, b, nb - 5, info->n_slots, slot)) return true;
    return false;
}

void nx_api_request_free(nx_api_request *r) {
    free(r->model);
    free(r->prompt_text);
    free(r->prompt_tokens);
    if (r->stops)
        for (int i = 0; i < r->gen.n_stop; i++) free(r->stops[i]);
    free(r->stops);
    free(r->stop_lens);
    free(r->bias);
    cJSON_Delete(r->tools);
    free(r->tool_choice_name);
    free(r->prefill);
    memset(r, 0, sizeof *r);
}
