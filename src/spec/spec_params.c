/*
 * spec_params.c — parsing of the speculative-decoding flags (spec_params.h).
 *
 * Owns no memory: parsed strings stay pointers into argv. Promises: every bad value is an error
 * naming the flag; numbers must be complete, finite and in range. Never prints or exits.
 */
#include "spec/spec_params.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[NX_SPEC_TYPE_COUNT] = {
    [NX_SPEC_NONE] = "none", [NX_SPEC_MTP] = "mtp", [NX_SPEC_ASSISTANT] = "assistant",
    [NX_SPEC_DRAFT] = "draft", [NX_SPEC_NGRAM] = "ngram",
};

nx_spec_params nx_spec_params_default(void) {
    nx_spec_policy_params pp = nx_spec_policy_default_params();
    nx_ngram_params ng = nx_ngram_default_params();
    return (nx_spec_params){
        .n_types = 0, .draft_max = pp.draft_max, .draft_min = pp.draft_min, .p_min = pp.p_min,
        .adaptive = pp.adaptive, .ngram_max = ng.ngram_max, .ngram_min = ng.ngram_min,
        .draft_positions = NX_ASST_POS_CONSTANT, .assistant_dense_head = false,
        .auto_type = false, .draft_vocab = -1, .draft_type_k = NX_CACHE_F16, .draft_type_v = NX_CACHE_F16,
        .guard = pp.guard,
    };
}

const char *nx_spec_type_name(nx_spec_type t) {
    return t >= 0 && t < NX_SPEC_TYPE_COUNT ? type_names[t] : "?";
}

const char *nx_spec_type_list(void) {
    return "mtp, assistant, draft, ngram, none";
}

nx_status nx_spec_type_parse(const char *name, nx_spec_type *out, nx_error *err) {
    /* the names of llama.cpp forks (llamafile's draft-mtp for NextN, draft-assistant for Gemma 4) */
    if (name && !strcmp(name, "draft-mtp")) { *out = NX_SPEC_MTP; return NX_OK; }
    if (name && !strcmp(name, "draft-assistant")) { *out = NX_SPEC_ASSISTANT; return NX_OK; }
    for (int t = 0; t < NX_SPEC_TYPE_COUNT; t++)
        if (name && !strcmp(name, type_names[t])) {
            *out = (nx_spec_type)t;
            return NX_OK;
        }
    return nx_fail(err, NX_ERR_INVALID_ARG, "unknown speculative type '%s' (known: %s)",
                   name ? name : "", nx_spec_type_list());
}

nx_status nx_spec_types_parse(const char *list, nx_spec_type *out, int cap, int *n, nx_error *err) {
    *n = 0;
    if (!list) return nx_fail(err, NX_ERR_INVALID_ARG, "--spec-type: missing list (known: %s)", nx_spec_type_list());
    int cnt = 0;
    bool none = false;
    const char *s = list;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        while (len && isspace((unsigned char)*s)) { s++; len--; }
        while (len && isspace((unsigned char)s[len - 1])) len--;
        char name[32];
        if (!len)
            return nx_fail(err, NX_ERR_INVALID_ARG, "--spec-type '%s': empty entry (known: %s)", list, nx_spec_type_list());
        if (len >= sizeof name)
            return nx_fail(err, NX_ERR_INVALID_ARG, "unknown speculative type '%.*s' (known: %s)",
                           (int)(len > 64 ? 64 : len), s, nx_spec_type_list());
        memcpy(name, s, len);
        name[len] = '\0';
        nx_spec_type t = NX_SPEC_NONE;
        nx_status st = nx_spec_type_parse(name, &t, err);
        if (st) return st;
        if (t == NX_SPEC_NONE) none = true;
        else {
            for (int j = 0; j < cnt; j++)
                if (out[j] == t)
                    return nx_fail(err, NX_ERR_INVALID_ARG, "--spec-type '%s': '%s' appears twice", list, name);
            if (cnt >= cap)
                return nx_fail(err, NX_ERR_INVALID_ARG, "--spec-type '%s': at most %d drafters", list, cap);
            out[cnt++] = t;
        }
        if (!e) break;
        s = e + 1;
    }
    if (none && cnt)
        return nx_fail(err, NX_ERR_INVALID_ARG, "--spec-type '%s': 'none' cannot be combined with drafters", list);
    *n = cnt;
    return NX_OK;
}

/* ===== Values ===== */

static nx_status parse_int(const char *flag, const char *v, int lo, int hi, int *out, nx_error *err) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi)
        return nx_fail(err, NX_ERR_INVALID_ARG, "%s: '%s' is not an integer in %d..%d", flag, v ? v : "", lo, hi);
    *out = (int)x;
    return NX_OK;
}

static nx_status parse_prob(const char *flag, const char *v, float *out, nx_error *err) {
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || errno || !isfinite(x) || x < 0.0 || x > 1.0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "%s: '%s' is not a probability in [0, 1]", flag, v ? v : "");
    *out = (float)x;
    return NX_OK;
}

static nx_status parse_onoff(const char *flag, const char *v, bool *out, nx_error *err) {
    static const char *const on[] = {"on", "true", "1", "yes"}, *const off[] = {"off", "false", "0", "no"};
    for (int i = 0; v && i < 4; i++) {
        if (!strcmp(v, on[i])) { *out = true; return NX_OK; }
        if (!strcmp(v, off[i])) { *out = false; return NX_OK; }
    }
    return nx_fail(err, NX_ERR_INVALID_ARG, "%s: '%s' is not on or off", flag, v ? v : "");
}

/* ===== Flags ===== */

enum { F_TYPE, F_DMAX, F_DMIN, F_PMIN, F_ADAPT, F_NGMAX, F_NGMIN, F_MODEL, F_TRACE, F_FALLBACK, F_DPOS, F_DENSE,
       F_DVOCAB, F_DVFILE, F_DHTYPE, F_CD, F_TD, F_CTKD, F_CTVD, F_BLOCK, F_MTP, F_NOMTP, F_MTPADAPT, F_DSAMPLE };

static const struct flag { const char *name; int id; bool has_value; } flags[] = {
    {"--spec-type", F_TYPE, true},       {"--draft-max", F_DMAX, true},
    {"--draft-min", F_DMIN, true},       {"--draft-p-min", F_PMIN, true},
    {"--draft-adaptive", F_ADAPT, true}, {"--ngram-max", F_NGMAX, true},
    {"--ngram-min", F_NGMIN, true},      {"--draft-model", F_MODEL, true},
    {"--mtp-head", F_MODEL, true},       {"--spec-trace", F_TRACE, true},
    {"--spec-fallback", F_FALLBACK, false},
    {"--draft-positions", F_DPOS, true}, {"--assistant-dense-head", F_DENSE, false},
    {"--draft-vocab", F_DVOCAB, true},   {"--draft-vocab-file", F_DVFILE, true},
    {"--draft-head-type", F_DHTYPE, true},
    {"-md", F_MODEL, true},              {"--model-draft", F_MODEL, true},
    {"-cd", F_CD, true},                 {"--ctx-size-draft", F_CD, true},
    {"-td", F_TD, true},                 {"--threads-draft", F_TD, true},
    {"-ctkd", F_CTKD, true},             {"--cache-type-k-draft", F_CTKD, true},
    {"-ctvd", F_CTVD, true},             {"--cache-type-v-draft", F_CTVD, true},
    {"--draft", F_DMAX, true},           {"--draft-n", F_DMAX, true},
    {"--draft-block-size", F_BLOCK, true},
    {"-mtp", F_MTP, false},              {"--multi-token-prediction", F_MTP, false},
    {"-no-mtp", F_NOMTP, false},         {"--no-multi-token-prediction", F_NOMTP, false},
    {"--mtp-adaptive", F_MTPADAPT, false},
    {"--draft-sample", F_DSAMPLE, true},
};

static nx_status parse_cache(const char *flag, const char *v, nx_cache_type *out, nx_error *err) {
    if (!nx_cache_type_parse(v, out))
        return nx_fail(err, NX_ERR_INVALID_ARG,
                       "%s: unsupported cache type '%s' for the draft model (supported: " NX_CACHE_TYPE_NAMES ")", flag, v);
    return NX_OK;
}

nx_status nx_spec_params_parse_arg(nx_spec_params *p, int argc, char **argv, int *i, bool *consumed, nx_error *err) {
    *consumed = false;
    if (!p || !argv || *i < 0 || *i >= argc || !argv[*i]) return NX_OK;
    const char *a = argv[*i];
    const char *eq = strchr(a, '=');
    size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
    const struct flag *f = NULL;
    for (size_t j = 0; j < sizeof flags / sizeof flags[0]; j++)
        if (strlen(flags[j].name) == nlen && !strncmp(a, flags[j].name, nlen)) { f = &flags[j]; break; }
    if (!f) return NX_OK;
    const char *v = NULL;
    int used = 1;
    if (f->has_value) {
        if (eq) v = eq + 1;
        else if (*i + 1 < argc && argv[*i + 1]) { v = argv[*i + 1]; used = 2; }
        else return nx_fail(err, NX_ERR_INVALID_ARG, "%s needs a value", f->name);
    } else if (eq)
        return nx_fail(err, NX_ERR_INVALID_ARG, "%s takes no value", f->name);

    nx_status st = NX_OK;
    switch (f->id) {
    case F_TYPE: {
        if (!strcmp(v, "auto")) {
            memset(p->types, 0, sizeof p->types);
            p->n_types = 0;
            p->auto_type = true;
            break;
        }
        nx_spec_type t[NX_SPEC_MAX_STAGES] = {NX_SPEC_NONE};
        int n = 0;
        if (!(st = nx_spec_types_parse(v, t, NX_SPEC_MAX_STAGES, &n, err))) {
            memcpy(p->types, t, sizeof t);
            p->n_types = n;
            p->auto_type = false;
        }
        break;
    }
    case F_DVOCAB: st = parse_int(f->name, v, 0, 1 << 24, &p->draft_vocab, err); break;
    case F_DVFILE:
        if (!*v) { st = nx_fail(err, NX_ERR_INVALID_ARG, "%s: empty file name", f->name); break; }
        p->draft_vocab_file = v;
        break;
    case F_DHTYPE: {
        nx_type t;
        if (!nx_type_from_name(v, &t)) {
            st = nx_fail(err, NX_ERR_INVALID_ARG, "%s: unknown weight type '%s' (e.g. q4_0, q8_0, f16)", f->name, v);
            break;
        }
        p->draft_head_requant = true;
        p->draft_head_type = t;
        break;
    }
    case F_DMAX:  st = parse_int(f->name, v, 1, NX_SPEC_DRAFT_CAP, &p->draft_max, err); break;
    case F_DMIN:  st = parse_int(f->name, v, 0, NX_SPEC_DRAFT_CAP, &p->draft_min, err); break;
    case F_PMIN:  st = parse_prob(f->name, v, &p->p_min, err); break;
    case F_ADAPT: st = parse_onoff(f->name, v, &p->adaptive, err); break;
    case F_NGMAX: st = parse_int(f->name, v, 1, NX_NGRAM_N_MAX, &p->ngram_max, err); break;
    case F_NGMIN: st = parse_int(f->name, v, 1, NX_NGRAM_N_MAX, &p->ngram_min, err); break;
    case F_MODEL:
    case F_TRACE:
        if (!*v) { st = nx_fail(err, NX_ERR_INVALID_ARG, "%s: empty file name", f->name); break; }
        if (f->id == F_MODEL) p->draft_model = v; else p->trace_path = v;
        break;
    case F_FALLBACK: p->fallback = true; break;
    case F_CD: st = parse_int(f->name, v, 0, 1 << 24, &p->draft_n_ctx, err); break;
    case F_TD: st = parse_int(f->name, v, 0, 1024, &p->draft_threads, err); break;
    case F_CTKD: st = parse_cache(f->name, v, &p->draft_type_k, err); break;
    case F_CTVD: st = parse_cache(f->name, v, &p->draft_type_v, err); break;
    case F_BLOCK: {   /* a block = id_last + the drafts */
        int b = 0;
        if (!(st = parse_int(f->name, v, 2, NX_SPEC_DRAFT_CAP + 1, &b, err))) p->draft_max = b - 1;
        break;
    }
    case F_MTP:
    case F_NOMTP:
        memset(p->types, 0, sizeof p->types);
        p->n_types = 0;
        p->auto_type = false;
        if (f->id == F_MTP) p->types[p->n_types++] = NX_SPEC_MTP;
        break;
    case F_MTPADAPT: p->adaptive = true; p->guard = true; break;
    case F_DSAMPLE: st = parse_onoff(f->name, v, &p->sample_drafts, err); break;
    case F_DPOS:  st = nx_assistant_parse_positions(v, &p->draft_positions, err); break;
    case F_DENSE: p->assistant_dense_head = true; break;
    }
    if (st) return st;
    *i += used;
    *consumed = true;
    return NX_OK;
}

bool nx_spec_params_has(const nx_spec_params *p, nx_spec_type t) {
    for (int i = 0; p && i < p->n_types; i++)
        if (p->types[i] == t) return true;
    return false;
}

nx_status nx_spec_params_validate(const nx_spec_params *p, nx_error *err) {
    if (!p) return nx_fail(err, NX_ERR_INVALID_ARG, "speculative options: none given");
    if (p->n_types < 0 || p->n_types > NX_SPEC_MAX_STAGES)
        return nx_fail(err, NX_ERR_INVALID_ARG, "speculative options: %d drafters", p->n_types);
    for (int i = 0; i < p->n_types; i++)
        if (p->types[i] <= NX_SPEC_NONE || p->types[i] >= NX_SPEC_TYPE_COUNT)
            return nx_fail(err, NX_ERR_INVALID_ARG, "speculative options: bad drafter %d (known: %s)",
                           (int)p->types[i], nx_spec_type_list());
    if (p->draft_max < 1 || p->draft_max > NX_SPEC_DRAFT_CAP)
        return nx_fail(err, NX_ERR_INVALID_ARG, "--draft-max %d not in 1..%d", p->draft_max, NX_SPEC_DRAFT_CAP);
    if (p->draft_min < 0 || p->draft_min > p->draft_max)
        return nx_fail(err, NX_ERR_INVALID_ARG, "--draft-min %d is larger than --draft-max %d", p->draft_min, p->draft_max);
    if (!(p->p_min >= 0.0f && p->p_min <= 1.0f))
        return nx_fail(err, NX_ERR_INVALID_ARG, "--draft-p-min %g not in [0, 1]", (double)p->p_min);
    if (p->ngram_max < 1 || p->ngram_max > NX_NGRAM_N_MAX)
        return nx_fail(err, NX_ERR_INVALID_ARG, "--ngram-max %d not in 1..%d", p->ngram_max, NX_NGRAM_N_MAX);
    if (p->ngram_min < 1 || p->ngram_min > p->ngram_max)
        return nx_fail(err, NX_ERR_INVALID_ARG, "--ngram-min %d is larger than --ngram-max %d", p->ngram_min, p->ngram_max);
    for (int i = 0; i < p->n_types; i++)
        if ((p->types[i] == NX_SPEC_ASSISTANT || p->types[i] == NX_SPEC_DRAFT) && !p->draft_model)
            return nx_fail(err, NX_ERR_INVALID_ARG, "--spec-type %s needs --draft-model FILE",
                           nx_spec_type_name(p->types[i]));
    return NX_OK;
}

const char *nx_spec_params_trace_path(const nx_spec_params *p) {
    if (p && p->trace_path) return p->trace_path;
    const char *e = getenv("NEXTN_SPEC_TRACE");
    return e && *e ? e : NULL;
}

nx_spec_policy_params nx_spec_params_policy(const nx_spec_params *p) {
    nx_spec_policy_params pp = nx_spec_policy_default_params();
    pp.draft_max = p->draft_max;
    pp.draft_min = p->draft_min;
    pp.p_min = p->p_min;
    pp.adaptive = p->adaptive;
    pp.guard = p->guard;
    return pp;
}

nx_ngram_params nx_spec_params_ngram(const nx_spec_params *p) {
    return (nx_ngram_params){ .ngram_max = p->ngram_max, .ngram_min = p->ngram_min };
}

size_t nx_spec_params_describe(const nx_spec_params *p, char *buf, size_t size) {
    char types[96] = "none";
    size_t len = 0;
    for (int i = 0; i < p->n_types && len < sizeof types; i++) {
        int w = snprintf(types + len, sizeof types - len, "%s%s", i ? "," : "", nx_spec_type_name(p->types[i]));
        if (w > 0) len += (size_t)w;
    }
    int w = snprintf(buf, buf ? size : 0, "%s draft-max %d draft-min %d p-min %g adaptive %s", types,
                     p->draft_max, p->draft_min, (double)p->p_min, p->adaptive ? "on" : "off");
    return w > 0 ? (size_t)w : 0;
}

const char *nx_spec_params_usage(void) {
    return "  --spec-type LIST         drafters tried in order, comma-separated: mtp, assistant, draft, ngram\n"
           "                           (e.g. ngram,mtp), none, or auto (with --draft-model: assistant or draft,\n"
           "                           else mtp when the model has an MTP layer, else none)\n"
           "  --draft-max N            largest draft length (default 8)\n"
           "  --draft-min N            smallest draft length when drafting (default 0)\n"
           "  --draft-p-min P          stop drafting below this drafter probability (default 0: off)\n"
           "  --draft-adaptive on|off  choose the draft length from measured acceptance and costs\n"
           "                           (default on); off: always --draft-max\n"
           "  --ngram-max N            longest n-gram the ngram drafter matches (default 4)\n"
           "  --ngram-min N            shortest n-gram it matches (default 1)\n"
           "  --draft-model FILE       drafter GGUF for assistant / draft (aliases -md, --model-draft,\n"
           "                           --mtp-head); with auto: assistant for a Gemma 4 assistant GGUF, else draft\n"
           "  --draft-sample on|off    at temperature > 0 model drafters (draft, mtp, assistant) sample their\n"
           "                           drafts; exact acceptance with their distribution (default off: greedy)\n"
           "  -cd, --ctx-size-draft N  draft model context (default 0: the target's)\n"
           "  -td, --threads-draft N   draft model threads (default 0: the target's)\n"
           "  -ctkd, -ctvd TYPE        draft model KV cache types: f16 (default), f32, bf16, q8_0, q4_0\n"
           "  --draft, --draft-n N     alias of --draft-max; --draft-block-size B = --draft-max B-1\n"
           "  -mtp / -no-mtp           --spec-type mtp / none; --spec-type draft-mtp / draft-assistant = mtp / assistant\n"
           "  --mtp-adaptive           adaptive draft length with the wall-clock guard (plain decoding when faster)\n"
           "  --draft-positions P      assistant draft positions: constant (default) or increment\n"
           "  --assistant-dense-head   the assistant drafts with its dense head even when it has centroids\n"
           "  --spec-trace FILE        write one JSON line per draft and accept (or env NEXTN_SPEC_TRACE)\n"
           "  --draft-vocab N          MTP draft head over the N most frequent tokens (default 32768 when the\n"
           "                           vocabulary is larger; 0 = whole vocabulary); output stays lossless\n"
           "  --draft-vocab-file F     text whose token counts pick those tokens (default: BPE rank order)\n"
           "  --draft-head-type T      MTP draft head requantized to T, e.g. q4_0 (default: as stored)\n"
           "  --spec-fallback          plain decoding with a warning when the model has no such drafter\n";
}
