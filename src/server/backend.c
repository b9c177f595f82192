/*
 * backend.c — the generation-backend plumbing every backend shares (see backend.h): request
 * defaults and validation, the per-request event stream (a mutex + condvar queue with two
 * references), timings bookkeeping, and the UTF-8 / stop-string text filter.
 * Lock order: a backend's own lock may be held while pushing to a stream; a stream's lock is
 * never held while calling into a backend (cancel calls the wake hook after unlocking).
 */
#include "server/backend.h"
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ===== Requests ===== */

void nx_gen_request_init(nx_gen_request *r, int32_t n_vocab) {
    memset(r, 0, sizeof *r);
    r->n_predict = -1;
    r->id_slot = -1;
    r->cache_prompt = true;
    r->sampling = nx_sampler_default_params(n_vocab);
    r->spec.type = NX_SPEC_NONE;
    r->spec.n_max = -1;
    r->spec.n_min = -1;
    r->spec.p_min = -1.0f;
    r->spec.adaptive = -1;
}

const char *nx_gen_finish_name(nx_gen_finish f) {
    switch (f) {
    case NX_GEN_FINISH_EOS:
    case NX_GEN_FINISH_STOP: return "stop";
    case NX_GEN_FINISH_LENGTH:
    case NX_GEN_FINISH_CONTEXT: return "length";
    case NX_GEN_FINISH_CANCELLED: return "cancelled";
    default: return "none";
    }
}

double nx_gen_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ===== Timings ===== */

void nx_gen_timings_init(nx_gen_timings *t) {
    memset(t, 0, sizeof *t);
    t->id_slot = -1;
}

void nx_gen_timings_set_stages(nx_gen_timings *t, const char *const *names, int n) {
    if (n < 0) n = 0;
    if (n > NX_SPEC_MAX_STAGES) n = NX_SPEC_MAX_STAGES;
    t->n_stages = n;
    for (int s = 0; s < n; s++) {
        const char *nm = names && names[s] ? names[s] : "?";
        snprintf(t->stage[s].name, sizeof t->stage[s].name, "%s", nm);
    }
}

void nx_gen_timings_round(nx_gen_timings *t, int stage, int k, int n) {
    if (k <= 0) return;
    if (k > NX_SPEC_DRAFT_CAP) k = NX_SPEC_DRAFT_CAP;
    if (n < 0) n = 0;
    if (n > k) n = k;
    t->draft_n += (uint64_t)k;
    t->draft_n_accepted += (uint64_t)n;
    for (int i = 0; i < k; i++) t->depth_drafted[i]++;
    for (int i = 0; i < n; i++) t->depth_accepted[i]++;
    if (stage >= 0 && stage < t->n_stages) {
        nx_gen_stage_stats *s = &t->stage[stage];
        s->drafted += (uint64_t)k;
        s->accepted += (uint64_t)n;
        for (int i = 0; i < k; i++) s->depth_drafted[i]++;
        for (int i = 0; i < n; i++) s->depth_accepted[i]++;
    }
}

/* ===== Streams ===== */

typedef struct token_node {
    nx_token token;
    float logprob;
    char *text;
    size_t n_text;
    int n_top;
    nx_gen_top *top;
    double t;
} token_node;

struct nx_gen_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    uint64_t id;
    atomic_bool cancelled;
    bool ended;                 /* finish / fail queued */
    bool end_taken;             /* the HTTP side read the last event */
    token_node *q;              /* token events [head, n) */
    size_t head, n, cap;
    nx_gen_event end;           /* the DONE / ERROR event */
    nx_gen_wake_fn wake;
    void *wake_user;
    double t_submit;
    nx_gen_request req;         /* deep copy */
    nx_token *prompt;
    char **stops;
    size_t *stop_lens;
    nx_logit_bias *bias;
};

static void stream_free(nx_gen_stream *s) {
    for (size_t i = s->head; i < s->n; i++) {
        free(s->q[i].text);
        free(s->q[i].top);
    }
    free(s->q);
    free(s->end.text);
    free(s->prompt);
    if (s->stops)
        for (int i = 0; i < s->req.n_stop; i++) free(s->stops[i]);
    free(s->stops);
    free(s->stop_lens);
    free(s->bias);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static void stream_unref(nx_gen_stream *s) {
    pthread_mutex_lock(&s->mu);
    int left = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (left == 0) stream_free(s);
}

nx_status nx_gen_stream_create(const nx_gen_request *req, uint64_t id, nx_gen_wake_fn wake, void *wake_user,
                               nx_gen_stream **out, nx_error *err) {
    *out = NULL;
    nx_gen_stream *s = calloc(1, sizeof *s);
    if (!s) return nx_fail(err, NX_ERR_NOMEM, "out of memory creating a request");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->refs = 2;
    s->id = id;
    atomic_init(&s->cancelled, false);
    s->wake = wake;
    s->wake_user = wake_user;
    s->t_submit = nx_gen_now();
    s->req = *req;
    s->req.stop = NULL;
    s->req.stop_len = NULL;
    s->req.n_stop = 0;
    s->req.sampling.logit_bias = NULL;
    s->req.sampling.n_logit_bias = 0;
    bool oom = false;
    s->prompt = malloc((size_t)(req->n_prompt > 0 ? req->n_prompt : 1) * sizeof *s->prompt);
    if (!s->prompt) oom = true;
    else if (req->n_prompt > 0) memcpy(s->prompt, req->prompt, (size_t)req->n_prompt * sizeof *s->prompt);
    s->req.prompt = s->prompt;
    if (!oom && req->n_stop > 0) {
        s->stops = calloc((size_t)req->n_stop, sizeof *s->stops);
        s->stop_lens = calloc((size_t)req->n_stop, sizeof *s->stop_lens);
        if (!s->stops || !s->stop_lens) oom = true;
        for (int i = 0; !oom && i < req->n_stop; i++) {
            size_t len = req->stop_len ? req->stop_len[i] : strlen(req->stop[i]);
            s->stops[i] = malloc(len + 1);
            if (!s->stops[i]) { oom = true; break; }
            memcpy(s->stops[i], req->stop[i], len);
            s->stops[i][len] = 0;
            s->stop_lens[i] = len;
            s->req.n_stop = i + 1;
        }
        s->req.stop = (const char *const *)s->stops;
        s->req.stop_len = s->stop_lens;
    }
    if (!oom && req->sampling.n_logit_bias > 0) {
        s->bias = malloc((size_t)req->sampling.n_logit_bias * sizeof *s->bias);
        if (!s->bias) oom = true;
        else {
            memcpy(s->bias, req->sampling.logit_bias, (size_t)req->sampling.n_logit_bias * sizeof *s->bias);
            s->req.sampling.logit_bias = s->bias;
            s->req.sampling.n_logit_bias = req->sampling.n_logit_bias;
        }
    }
    if (oom) {
        stream_free(s);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory copying a request");
    }
    *out = s;
    return NX_OK;
}

const nx_gen_request *nx_gen_stream_request(const nx_gen_stream *s) { return &s->req; }
bool nx_gen_stream_cancelled(const nx_gen_stream *s) { return atomic_load(&((nx_gen_stream *)s)->cancelled); }
double nx_gen_stream_t_submit(const nx_gen_stream *s) { return s->t_submit; }
uint64_t nx_gen_stream_id(const nx_gen_stream *s) { return s->id; }

nx_status nx_gen_stream_push(nx_gen_stream *s, nx_token token, const char *text, size_t n_text, float logprob,
                             const nx_gen_top *top, int n_top, nx_error *err) {
    if (n_top < 0) n_top = 0;
    if (n_top > NX_GEN_TOP_MAX) n_top = NX_GEN_TOP_MAX;
    token_node node = {.token = token, .logprob = logprob, .n_top = n_top, .t = nx_gen_now()};
    node.text = malloc(n_text + 1);
    if (!node.text) return nx_fail(err, NX_ERR_NOMEM, "out of memory queueing a token");
    if (n_text) memcpy(node.text, text, n_text);
    node.text[n_text] = 0;
    node.n_text = n_text;
    if (n_top) {
        node.top = malloc((size_t)n_top * sizeof *node.top);
        if (!node.top) {
            free(node.text);
            return nx_fail(err, NX_ERR_NOMEM, "out of memory queueing a token");
        }
        memcpy(node.top, top, (size_t)n_top * sizeof *node.top);
    }
    pthread_mutex_lock(&s->mu);
    if (s->ended) {
        pthread_mutex_unlock(&s->mu);
        free(node.text);
        free(node.top);
        return nx_fail(err, NX_ERR_INTERNAL, "token pushed after the end of request %llu", (unsigned long long)s->id);
    }
    if (s->head > 0 && s->head == s->n) s->head = s->n = 0;   /* drained: restart at the front */
    if (s->n == s->cap) {
        if (s->head > 0) {   /* reuse the consumed front before growing */
            memmove(s->q, s->q + s->head, (s->n - s->head) * sizeof *s->q);
            s->n -= s->head;
            s->head = 0;
        }
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 16;
            token_node *q = realloc(s->q, cap * sizeof *q);
            if (!q) {
                pthread_mutex_unlock(&s->mu);
                free(node.text);
                free(node.top);
                return nx_fail(err, NX_ERR_NOMEM, "out of memory queueing a token");
            }
            s->q = q;
            s->cap = cap;
        }
    }
    s->q[s->n++] = node;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NX_OK;
}

static void stream_end(nx_gen_stream *s, const nx_gen_event *end) {
    pthread_mutex_lock(&s->mu);
    if (!s->ended) {
        s->end = *end;
        s->end.t = nx_gen_now();
        s->ended = true;
    } else {
        free(end->text);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    stream_unref(s);
}

void nx_gen_stream_finish(nx_gen_stream *s, nx_gen_finish finish, int stop_index, const char *text, size_t n_text,
                          const nx_gen_timings *t) {
    nx_gen_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = NX_GEN_EV_DONE;
    ev.finish = finish;
    ev.stop_index = stop_index;
    ev.text = malloc(n_text + 1);
    if (ev.text) {
        if (n_text) memcpy(ev.text, text, n_text);
        ev.text[n_text] = 0;
        ev.n_text = n_text;
    }
    if (t) ev.timings = *t;
    else nx_gen_timings_init(&ev.timings);
    stream_end(s, &ev);
}

void nx_gen_stream_fail(nx_gen_stream *s, nx_status status, const char *msg) {
    nx_gen_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = NX_GEN_EV_ERROR;
    ev.status = status == NX_OK ? NX_ERR_INTERNAL : status;
    snprintf(ev.msg, sizeof ev.msg, "%s", msg ? msg : "generation failed");
    stream_end(s, &ev);
}

bool nx_gen_stream_next(nx_gen_stream *s, nx_gen_event *ev, int timeout_ms) {
    memset(ev, 0, sizeof *ev);
    pthread_mutex_lock(&s->mu);
    if (timeout_ms > 0 && s->head == s->n && !(s->ended && !s->end_taken)) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
        while (s->head == s->n && !(s->ended && !s->end_taken))
            if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0) break;
    }
    bool got = false;
    if (s->head < s->n) {
        token_node *nd = &s->q[s->head++];
        ev->kind = NX_GEN_EV_TOKEN;
        ev->token = nd->token;
        ev->logprob = nd->logprob;
        ev->text = nd->text;
        ev->n_text = nd->n_text;
        ev->n_top = nd->n_top;
        if (nd->n_top) memcpy(ev->top, nd->top, (size_t)nd->n_top * sizeof *nd->top);
        ev->t = nd->t;
        free(nd->top);
        got = true;
    } else if (s->ended && !s->end_taken) {
        *ev = s->end;
        s->end.text = NULL;
        s->end_taken = true;
        got = true;
    }
    pthread_mutex_unlock(&s->mu);
    return got;
}

void nx_gen_event_clear(nx_gen_event *ev) {
    free(ev->text);
    memset(ev, 0, sizeof *ev);
}

void nx_gen_stream_cancel(nx_gen_stream *s) {
    pthread_mutex_lock(&s->mu);
    bool was = atomic_exchange(&s->cancelled, true);
    bool ended = s->ended;
    pthread_mutex_unlock(&s->mu);
    /* Outside the stream lock: the wake hook takes the backend's lock (see the lock order above). */
    if (!was && !ended && s->wake) s->wake(s->wake_user);
}

void nx_gen_stream_release(nx_gen_stream *s) {
    if (!s) return;
    nx_gen_stream_cancel(s);
    stream_unref(s);
}

/* ===== Text output ===== */

void nx_gen_textout_init(nx_gen_textout *o, const char *const *stop, const size_t *stop_len, int n_stop) {
    memset(o, 0, sizeof *o);
    o->stop = stop;
    o->stop_len = stop_len;
    o->n_stop = n_stop > 0 ? n_stop : 0;
}

void nx_gen_textout_free(nx_gen_textout *o) {
    free(o->hold);
    memset(o, 0, sizeof *o);
}

static bool out_add(char **out, size_t *n_out, size_t *cap_out, const char *p, size_t n) {
    if (*n_out + n + 1 > *cap_out) {
        size_t cap = *cap_out ? *cap_out : 64;
        while (cap < *n_out + n + 1) cap *= 2;
        char *q = realloc(*out, cap);
        if (!q) return false;
        *out = q;
        *cap_out = cap;
    }
    if (n) memcpy(*out + *n_out, p, n);
    *n_out += n;
    (*out)[*n_out] = 0;
    return true;
}

static bool hold_add(nx_gen_textout *o, const char *p, size_t n) {
    return out_add(&o->hold, &o->n_hold, &o->cap_hold, p, n);
}

static void release(nx_gen_textout *o, size_t n, char **out, size_t *n_out, size_t *cap_out) {
    out_add(out, n_out, cap_out, o->hold, n);
    memmove(o->hold, o->hold + n, o->n_hold - n);
    o->n_hold -= n;
}

static size_t slen(const nx_gen_textout *o, int i) { return o->stop_len ? o->stop_len[i] : strlen(o->stop[i]); }

int nx_gen_textout_feed(nx_gen_textout *o, const char *piece, size_t n, char **out, size_t *n_out, size_t *cap_out) {
    if (o->stopped) return -1;
    char small[64];
    char *tmp = n + 4 <= sizeof small ? small : malloc(n + 4);
    if (!tmp) return -1;
    size_t m = nx_utf8_asm_feed(&o->utf8, piece, n, tmp);
    bool ok = hold_add(o, tmp, m);
    if (tmp != small) free(tmp);
    if (!ok) return -1;
    /* The earliest stop string in what is held wins. */
    size_t best_pos = (size_t)-1;
    int best = -1;
    for (int i = 0; i < o->n_stop; i++) {
        size_t L = slen(o, i);
        if (L == 0 || L > o->n_hold) continue;
        for (size_t p = 0; p + L <= o->n_hold && p < best_pos; p++)
            if (!memcmp(o->hold + p, o->stop[i], L)) {
                best_pos = p;
                best = i;
                break;
            }
    }
    if (best >= 0) {
        release(o, best_pos, out, n_out, cap_out);
        o->n_hold = 0;
        o->stopped = true;
        return best;
    }
    /* Keep the longest tail that could still grow into a stop string. */
    size_t keep = 0;
    for (int i = 0; i < o->n_stop; i++) {
        size_t L = slen(o, i);
        size_t lim = L > 0 ? L - 1 : 0;
        if (lim > o->n_hold) lim = o->n_hold;
        for (size_t k = lim; k > keep; k--)
            if (!memcmp(o->hold + o->n_hold - k, o->stop[i], k)) {
                keep = k;
                break;
            }
    }
    size_t rel = o->n_hold - keep;
    while (rel > 0 && rel < o->n_hold && ((unsigned char)o->hold[rel] & 0xC0) == 0x80) rel--;   /* whole characters */
    release(o, rel, out, n_out, cap_out);
    return -1;
}

void nx_gen_textout_flush(nx_gen_textout *o, char **out, size_t *n_out, size_t *cap_out) {
    if (o->stopped) return;
    char tail[4];
    size_t m = nx_utf8_asm_flush(&o->utf8, tail);
    hold_add(o, tail, m);
    release(o, o->n_hold, out, n_out, cap_out);
}

/* ===== Submitting ===== */

static nx_status validate(const nx_gen_info *info, const nx_gen_request *req, nx_error *err) {
    if (!req->prompt || req->n_prompt <= 0) return nx_fail(err, NX_ERR_INVALID_ARG, "the prompt is empty");
    for (int i = 0; i < req->n_prompt; i++)
        if (req->prompt[i] < 0 || req->prompt[i] >= info->n_vocab)
            return nx_fail(err, NX_ERR_INVALID_ARG, "prompt token %d at index %d is outside the vocabulary (0..%d)",
                           (int)req->prompt[i], i, (int)info->n_vocab - 1);
    if (req->n_prompt > info->n_ctx_slot)
        return nx_fail(err, NX_ERR_RANGE, "the request has %d prompt tokens, more than the slot context of %d tokens",
                       req->n_prompt, info->n_ctx_slot);
    if (req->n_predict < -1) return nx_fail(err, NX_ERR_INVALID_ARG, "n_predict must be >= -1 (got %d)", req->n_predict);
    if (req->n_probs < 0 || req->n_probs > NX_GEN_TOP_MAX)
        return nx_fail(err, NX_ERR_INVALID_ARG, "n_probs must be in 0..%d (got %d)", NX_GEN_TOP_MAX, req->n_probs);
    if (req->n_stop < 0 || req->n_stop > NX_GEN_MAX_STOPS)
        return nx_fail(err, NX_ERR_INVALID_ARG, "at most %d stop strings (got %d)", NX_GEN_MAX_STOPS, req->n_stop);
    for (int i = 0; i < req->n_stop; i++) {
        size_t L = req->stop_len ? req->stop_len[i] : (req->stop[i] ? strlen(req->stop[i]) : 0);
        if (!req->stop[i] || L == 0 || L > NX_GEN_STOP_MAX_LEN)
            return nx_fail(err, NX_ERR_INVALID_ARG, "stop string %d must have 1..%d bytes", i, NX_GEN_STOP_MAX_LEN);
    }
    if (req->id_slot < -1 || req->id_slot >= info->n_slots)
        return nx_fail(err, NX_ERR_INVALID_ARG, "id_slot %d does not exist (slots 0..%d)", req->id_slot, info->n_slots - 1);
    const nx_gen_spec *sp = &req->spec;
    if (sp->has_type && sp->type != NX_SPEC_NONE) {
        bool loaded = false;
        for (int i = 0; i < info->n_drafters; i++) loaded |= info->drafters[i] == sp->type;
        if (!loaded) {
            char names[96] = "";
            size_t o = 0;
            for (int i = 0; i < info->n_drafters; i++)
                o += (size_t)snprintf(names + o, o < sizeof names ? sizeof names - o : 0, "%s%s", i ? ", " : "",
                                      nx_spec_type_name(info->drafters[i]));
            return nx_fail(err, NX_ERR_INVALID_ARG,
                           "speculative.type '%s' is not loaded (allowed: %s%snone)", nx_spec_type_name(sp->type),
                           names, info->n_drafters ? ", " : "");
        }
    }
    if (sp->n_max < -1 || sp->n_max > NX_SPEC_DRAFT_CAP)
        return nx_fail(err, NX_ERR_INVALID_ARG, "speculative.n_max must be in 0..%d (got %d)", NX_SPEC_DRAFT_CAP, sp->n_max);
    if (sp->n_min < -1 || sp->n_min > NX_SPEC_DRAFT_CAP)
        return nx_fail(err, NX_ERR_INVALID_ARG, "speculative.n_min must be in 0..%d (got %d)", NX_SPEC_DRAFT_CAP, sp->n_min);
    if (sp->n_min >= 0 && sp->n_max >= 0 && sp->n_min > sp->n_max)
        return nx_fail(err, NX_ERR_INVALID_ARG, "speculative.n_min (%d) is larger than speculative.n_max (%d)", sp->n_min,
                       sp->n_max);
    if (!(sp->p_min <= 1.0f) || isnan(sp->p_min))
        return nx_fail(err, NX_ERR_INVALID_ARG, "speculative.p_min must be <= 1");
    /* The sampler checks its own parameters (finite values, bias tokens in range...). */
    nx_sampler *smp = NULL;
    nx_sampler_params sprm = req->sampling;
    sprm.n_vocab = info->n_vocab;
    nx_status st = nx_sampler_create(&sprm, &smp, err);
    nx_sampler_free(smp);
    return st;
}

static void wake_backend(void *user) {
    nx_gen_backend *be = user;
    if (be->ops->wake) be->ops->wake(be);
}

nx_status nx_gen_submit(nx_gen_backend *be, const nx_gen_request *req, nx_gen_stream **out, nx_error *err) {
    *out = NULL;
    nx_gen_info info;
    be->ops->info(be, &info);
    if (!info.ready) return nx_fail(err, NX_ERR_UNSUPPORTED, "the model is still loading");
    nx_status st = validate(&info, req, err);
    if (st != NX_OK) return st;
    uint64_t id = atomic_fetch_add(&be->next_id, 1) + 1;
    nx_gen_stream *s = NULL;
    st = nx_gen_stream_create(req, id, wake_backend, be, &s, err);
    if (st != NX_OK) return st;
    st = be->ops->submit(be, s, err);
    if (st != NX_OK) {
        /* The backend did not take its reference: drop both. */
        stream_unref(s);
        stream_unref(s);
        return st;
    }
    *out = s;
    return NX_OK;
}

void nx_gen_backend_free(nx_gen_backend *be) {
    if (be) be->ops->free(be);
}
