/*
 * backend_fake.c — a deterministic generation backend for tests and `serve --fake-backend` (see
 * backend.h "The fake backend"). It behaves like the real scheduler where HTTP can see it: one
 * scheduler thread, N slots, a bounded FIFO wait queue, slot choice (id_slot, longest cached
 * prefix, LRU), prompt-cache reuse, stop strings, EOS, n_predict and context limits, immediate
 * cancellation, and speculative-round statistics — but its "model" just echoes the prompt bytes
 * with ASCII letters rot13'd.
 * Never: block an HTTP thread (submit only queues), hold its lock while calling a stream's wake.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "server/backend.h"
#include "chat/chat_template.h"
#include "server/slots.h"

#define FAKE_EOS 256
#define FAKE_BOS 257
#define FAKE_VOCAB 258

typedef struct fake_slot {
    nx_slot_base b;             /* id, busy, prompt cache, LRU tick (slots.h); first member */
    bool prompt_done;
    nx_gen_stream *s;
    const nx_gen_request *req;
    nx_token *src;              /* echo source: the prompt's bytes, rot13'd */
    int n_src;
    int gen_i;
    int round;
    int n_stages;               /* drafters this request uses */
    nx_spec_type stages[NX_SPEC_MAX_STAGES];
    int n_max;
    nx_gen_textout out;
    char *txt;                  /* scratch for released text */
    size_t n_txt, cap_txt;
    nx_gen_timings t;
    double t_admit, t_first;
    uint64_t n_requests, request_id;
    uint64_t draft_n, draft_acc;
    int n_prompt;
} fake_slot;

typedef struct fake_be {
    nx_gen_backend base;
    nx_gen_fake_params p;
    char alias[128];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool th_started, stop, refusing;
    fake_slot *slots;
    nx_chat_template *chat_template;    /* p.chat_template parsed (NULL: none) */
    nx_wait_list wait;                /* requests not yet admitted */
    uint64_t tick;
} fake_be;

nx_gen_fake_params nx_gen_fake_default_params(void) {
    nx_gen_fake_params p;
    memset(&p, 0, sizeof p);
    p.alias = "fake";
    p.n_slots = 4;
    p.n_ctx_slot = 512;
    p.queue_max = 64;
    p.step_us = 1000;
    p.chat_format = NX_CHAT_CHATML;
    p.spec = nx_spec_params_default();
    return p;
}

/* ===== Hooks ===== */

static void fake_info(nx_gen_backend *b, nx_gen_info *o) {
    fake_be *be = (fake_be *)b;
    memset(o, 0, sizeof *o);
    snprintf(o->alias, sizeof o->alias, "%s", be->alias);
    snprintf(o->model_path, sizeof o->model_path, "(fake)");
    snprintf(o->arch, sizeof o->arch, "fake");
    o->ready = !be->p.loading;
    o->n_slots = be->p.n_slots;
    o->n_ctx_slot = be->p.n_ctx_slot;
    o->n_ctx_train = be->p.n_ctx_slot;
    o->n_vocab = FAKE_VOCAB;
    o->queue_max = be->p.queue_max;
    o->chat_format = be->p.chat_format;
    o->chat_template = be->chat_template;
    o->add_bos = true;
    o->n_drafters = be->p.spec.n_types;
    for (int i = 0; i < be->p.spec.n_types && i < NX_SPEC_MAX_STAGES; i++) o->drafters[i] = be->p.spec.types[i];
    o->spec = be->p.spec;
}

static nx_status fake_tokenize(nx_gen_backend *b, const char *text, size_t n, bool add_special, bool parse_special,
                               nx_token_vec *out, nx_error *err) {
    (void)b;
    size_t need = out->n + n + 1;
    if (need > out->cap) {
        int32_t *ids = realloc(out->ids, need * sizeof *ids);
        if (!ids) return nx_fail(err, NX_ERR_NOMEM, "out of memory tokenizing %zu bytes", n);
        out->ids = ids;
        out->cap = need;
    }
    if (add_special) out->ids[out->n++] = FAKE_BOS;
    for (size_t i = 0; i < n;) {
        if (parse_special && n - i >= 4 && !memcmp(text + i, "</s>", 4)) { out->ids[out->n++] = FAKE_EOS; i += 4; continue; }
        if (parse_special && n - i >= 3 && !memcmp(text + i, "<s>", 3)) { out->ids[out->n++] = FAKE_BOS; i += 3; continue; }
        out->ids[out->n++] = (unsigned char)text[i++];
    }
    return NX_OK;
}

static nx_status fake_detokenize(nx_gen_backend *b, const nx_token *ids, size_t n, bool special, char **out,
                                 size_t *out_len, nx_error *err) {
    (void)b;
    char *p = malloc(n * 4 + 1);
    if (!p) return nx_fail(err, NX_ERR_NOMEM, "out of memory detokenizing %zu tokens", n);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= FAKE_VOCAB) {
            free(p);
            return nx_fail(err, NX_ERR_INVALID_ARG, "token %d at index %zu is outside the vocabulary (0..%d)",
                           (int)ids[i], i, FAKE_VOCAB - 1);
        }
        if (ids[i] < 256) p[o++] = (char)ids[i];
        else if (special) {
            const char *s = ids[i] == FAKE_EOS ? "</s>" : "<s>";
            memcpy(p + o, s, strlen(s));
            o += strlen(s);
        }
    }
    p[o] = 0;
    *out = p;
    if (out_len) *out_len = o;
    return NX_OK;
}

static int idle_slots(const fake_be *be) {
    int n = 0;
    for (int i = 0; i < be->p.n_slots; i++) n += !be->slots[i].b.busy;
    return n;
}

static nx_status fake_submit(nx_gen_backend *b, nx_gen_stream *s, nx_error *err) {
    fake_be *be = (fake_be *)b;
    pthread_mutex_lock(&be->mu);
    nx_status st = NX_OK;
    if (be->refusing) st = nx_fail(err, NX_ERR_UNSUPPORTED, "the server is shutting down");
    else st = nx_wait_list_push(&be->wait, s, be->p.queue_max + idle_slots(be), be->p.n_slots, be->p.queue_max, err);
    if (st == NX_OK) pthread_cond_broadcast(&be->cv);
    pthread_mutex_unlock(&be->mu);
    return st;
}

static int fake_slots(nx_gen_backend *b, nx_gen_slot_info *out, int cap, nx_gen_load *load) {
    fake_be *be = (fake_be *)b;
    pthread_mutex_lock(&be->mu);
    long cached = 0;
    int busy = 0;
    for (int i = 0; i < be->p.n_slots; i++) {
        const fake_slot *sl = &be->slots[i];
        cached += sl->b.n_cache;
        busy += sl->b.busy;
        if (i >= cap || !out) continue;
        nx_gen_slot_info *o = &out[i];
        memset(o, 0, sizeof *o);
        o->id = i;
        o->busy = sl->b.busy;
        o->request_id = sl->request_id;
        o->n_ctx = be->p.n_ctx_slot;
        o->n_cached = sl->b.n_cache;
        o->n_prompt = sl->n_prompt;
        o->n_decoded = sl->gen_i;
        o->n_requests = sl->n_requests;
        o->draft_n = sl->draft_n;
        o->draft_n_accepted = sl->draft_acc;
    }
    if (load) {
        load->n_busy = busy;
        load->n_waiting = be->wait.n;
        load->kv_usage = (double)cached / ((double)be->p.n_ctx_slot * be->p.n_slots);
    }
    pthread_mutex_unlock(&be->mu);
    return be->p.n_slots;
}

static void fake_wake(nx_gen_backend *b) {
    fake_be *be = (fake_be *)b;
    pthread_mutex_lock(&be->mu);
    pthread_cond_broadcast(&be->cv);
    pthread_mutex_unlock(&be->mu);
}

/* ===== The scheduler ===== */

static void slot_end(fake_slot *sl, nx_gen_finish f, int stop_index) {
    if (f != NX_GEN_FINISH_STOP && f != NX_GEN_FINISH_CANCELLED) nx_gen_textout_flush(&sl->out, &sl->txt, &sl->n_txt, &sl->cap_txt);
    if (sl->t_first > 0 && sl->t.predicted_n > 0) sl->t.predicted_ms = (nx_gen_now() - sl->t_first) * 1000.0;
    nx_gen_stream_finish(sl->s, f, stop_index, sl->txt, sl->n_txt, &sl->t);
    sl->n_txt = 0;
    sl->draft_n += sl->t.draft_n;
    sl->draft_acc += sl->t.draft_n_accepted;
    sl->n_requests++;
    nx_gen_textout_free(&sl->out);
    free(sl->src);
    sl->src = NULL;
    sl->s = NULL;
    sl->req = NULL;
    sl->b.busy = false;
}

static nx_token rot13(nx_token t) {
    if (t >= 'a' && t <= 'z') return 'a' + (t - 'a' + 13) % 26;
    if (t >= 'A' && t <= 'Z') return 'A' + (t - 'A' + 13) % 26;
    return t;
}

/* A scripted answer: the prompt's last "<<answer:TEXT>>" makes the model say TEXT verbatim
 * (tests of tool calls and templates through any client). */
static void script_answer(fake_slot *sl, const nx_gen_request *r) {
    static const char open[] = "<<answer:";
    const int ol = (int)sizeof open - 1;
    int at = -1;
    for (int i = 0; i + ol <= r->n_prompt; i++) {
        int k = 0;
        while (k < ol && r->prompt[i + k] == (unsigned char)open[k]) k++;
        if (k == ol) at = i + ol;
    }
    if (at < 0 || !sl->src) return;
    int e = at;
    while (e + 1 < r->n_prompt && !(r->prompt[e] == '>' && r->prompt[e + 1] == '>')) e++;
    if (e + 1 >= r->n_prompt) return;
    sl->n_src = 0;
    for (int i = at; i < e; i++) sl->src[sl->n_src++] = r->prompt[i];
}

static void slot_admit(fake_be *be, fake_slot *sl, nx_gen_stream *s) {
    const nx_gen_request *r = nx_gen_stream_request(s);
    nx_gen_timings_init(&sl->t);
    sl->b.busy = true;
    sl->prompt_done = false;
    sl->s = s;
    sl->req = r;
    sl->request_id = nx_gen_stream_id(s);
    sl->b.last_used = ++be->tick;
    sl->gen_i = 0;
    sl->round = 0;
    sl->t_admit = nx_gen_now();
    sl->t_first = 0;
    sl->n_prompt = r->n_prompt;
    sl->t.id_slot = sl->b.id;
    sl->t.n_prompt = r->n_prompt;
    sl->t.queue_ms = (sl->t_admit - nx_gen_stream_t_submit(s)) * 1000.0;
    int reuse = r->cache_prompt ? nx_slot_common_prefix(&sl->b, r->prompt, r->n_prompt) : 0;
    if (reuse >= r->n_prompt) reuse = r->n_prompt - 1;   /* the last prompt token is always evaluated */
    sl->t.cache_n = reuse;
    sl->t.prompt_n = r->n_prompt - reuse;
    sl->b.n_cache = reuse;
    /* Speculation of this request: its own type, else every drafter loaded. */
    sl->n_stages = 0;
    if (r->spec.has_type) {
        if (r->spec.type != NX_SPEC_NONE) sl->stages[sl->n_stages++] = r->spec.type;
    } else {
        for (int i = 0; i < be->p.spec.n_types && i < NX_SPEC_MAX_STAGES; i++) sl->stages[sl->n_stages++] = be->p.spec.types[i];
    }
    sl->n_max = r->spec.n_max >= 0 ? r->spec.n_max : be->p.spec.draft_max;
    const char *names[NX_SPEC_MAX_STAGES];
    for (int i = 0; i < sl->n_stages; i++) names[i] = nx_spec_type_name(sl->stages[i]);
    nx_gen_timings_set_stages(&sl->t, names, sl->n_stages);
    nx_gen_textout_init(&sl->out, r->stop, r->stop_len, r->n_stop);
    sl->src = malloc((size_t)r->n_prompt * sizeof *sl->src);
    sl->n_src = 0;
    if (sl->src)
        for (int i = 0; i < r->n_prompt; i++)
            if (r->prompt[i] < 256) sl->src[sl->n_src++] = rot13(r->prompt[i]);
    script_answer(sl, r);
}

/* One generated token; returns false when the request ended. */
static bool slot_emit(fake_be *be, fake_slot *sl, nx_token tok) {
    const nx_gen_request *r = sl->req;
    if (sl->t_first == 0) sl->t_first = nx_gen_now();
    sl->gen_i++;
    sl->t.predicted_n++;
    nx_slot_cache_push(&sl->b, tok);
    if (tok == FAKE_EOS && !r->ignore_eos) {
        slot_end(sl, NX_GEN_FINISH_EOS, -1);
        return false;
    }
    char piece = (char)tok;
    size_t np = tok < 256 ? 1 : 0;
    sl->n_txt = 0;
    int stop = nx_gen_textout_feed(&sl->out, &piece, np, &sl->txt, &sl->n_txt, &sl->cap_txt);
    float lp = r->want_logprob || r->n_probs ? logf(0.75f) : 0.0f;
    nx_gen_top top[NX_GEN_TOP_MAX];
    int n_top = r->n_probs;
    for (int j = 0; j < n_top; j++) {
        top[j].token = j == 0 ? tok : (tok + j) % 256;
        top[j].logprob = j == 0 ? logf(0.75f) : logf(0.25f / (float)n_top);
    }
    nx_status st = nx_gen_stream_push(sl->s, tok, sl->txt ? sl->txt : "", sl->n_txt, lp, top, n_top, NULL);
    sl->n_txt = 0;
    if (st != NX_OK) {
        nx_gen_stream_fail(sl->s, st, "out of memory streaming a token");
        sl->s = NULL;
        nx_gen_textout_free(&sl->out);
        free(sl->src);
        sl->src = NULL;
        sl->b.busy = false;
        return false;
    }
    if (stop >= 0) { slot_end(sl, NX_GEN_FINISH_STOP, stop); return false; }
    if (r->n_predict >= 0 && sl->gen_i >= r->n_predict) { slot_end(sl, NX_GEN_FINISH_LENGTH, -1); return false; }
    if (sl->b.n_cache >= be->p.n_ctx_slot) { slot_end(sl, NX_GEN_FINISH_CONTEXT, -1); return false; }
    return true;
}

static nx_token next_token(const fake_slot *sl) {
    int i = sl->gen_i;
    if (sl->req->ignore_eos) return sl->n_src ? sl->src[i % sl->n_src] : 'x';
    return i < sl->n_src ? sl->src[i] : FAKE_EOS;
}

static void slot_step(fake_be *be, fake_slot *sl) {
    const nx_gen_request *r = sl->req;
    if (!sl->prompt_done) {
        for (int i = sl->b.n_cache; i < r->n_prompt; i++) nx_slot_cache_push(&sl->b, r->prompt[i]);
        sl->t.prompt_ms = (nx_gen_now() - sl->t_admit) * 1000.0 + (double)be->p.prompt_us_per_token * sl->t.prompt_n / 1000.0;
        sl->prompt_done = true;
        if (r->n_predict == 0) { slot_end(sl, NX_GEN_FINISH_LENGTH, -1); return; }
        return;
    }
    int k = 0;
    if (sl->n_stages > 0 && sl->n_max > 0) {
        /* Tokens left before the echo's natural end or the limits: drafts never cross them. */
        int left = r->ignore_eos ? 1 << 30 : sl->n_src - sl->gen_i + 1;
        if (r->n_predict >= 0 && r->n_predict - sl->gen_i < left) left = r->n_predict - sl->gen_i;
        if (be->p.n_ctx_slot - sl->b.n_cache < left) left = be->p.n_ctx_slot - sl->b.n_cache;
        k = left - 1 < sl->n_max ? left - 1 : sl->n_max;
        if (k < 0) k = 0;
    }
    int n_acc = k > 0 ? (sl->round * 7 + 3) % (k + 1) : 0;
    if (k > 0) nx_gen_timings_round(&sl->t, sl->round % sl->n_stages, k, n_acc);
    sl->round++;
    for (int i = 0; i <= n_acc; i++)
        if (!slot_emit(be, sl, next_token(sl))) return;
}

static void admit_waiting(fake_be *be) {
    int o = 0;
    for (int i = 0; i < be->wait.n; i++) {
        nx_gen_stream *s = be->wait.v[i];
        if (nx_gen_stream_cancelled(s)) {
            nx_slot_finish_unadmitted(s);
            continue;
        }
        fake_slot *sl = (fake_slot *)nx_slot_choose(be->slots, sizeof *be->slots, be->p.n_slots, nx_gen_stream_request(s));
        if (sl) slot_admit(be, sl, s);
        else be->wait.v[o++] = s;
    }
    be->wait.n = o;
}

static void *scheduler(void *arg) {
    fake_be *be = arg;
    pthread_mutex_lock(&be->mu);
    while (!be->stop) {
        admit_waiting(be);
        int busy = 0;
        for (int i = 0; i < be->p.n_slots; i++) {
            fake_slot *sl = &be->slots[i];
            if (!sl->b.busy) continue;
            if (nx_gen_stream_cancelled(sl->s)) { slot_end(sl, NX_GEN_FINISH_CANCELLED, -1); continue; }
            slot_step(be, sl);
            busy += sl->b.busy;
        }
        if (!busy && be->wait.n == 0) {
            pthread_cond_wait(&be->cv, &be->mu);
            continue;
        }
        /* Sleep outside the lock so that submit / slots / cancel never wait on a step. */
        pthread_mutex_unlock(&be->mu);
        if (be->p.step_us > 0) {
            struct timespec ts = {be->p.step_us / 1000000, (long)(be->p.step_us % 1000000) * 1000L};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&be->mu);
    }
    pthread_mutex_unlock(&be->mu);
    return NULL;
}

/* ===== Life cycle ===== */

static void cancel_locked(fake_be *be) {
    for (int i = 0; i < be->wait.n; i++) {
        nx_gen_timings t;
        nx_gen_timings_init(&t);
        nx_gen_stream_finish(be->wait.v[i], NX_GEN_FINISH_CANCELLED, -1, NULL, 0, &t);
    }
    be->wait.n = 0;
    for (int i = 0; i < be->p.n_slots; i++)
        if (be->slots[i].b.busy) slot_end(&be->slots[i], NX_GEN_FINISH_CANCELLED, -1);
}

static void fake_cancel_all(nx_gen_backend *b) {
    fake_be *be = (fake_be *)b;
    pthread_mutex_lock(&be->mu);
    be->refusing = true;
    cancel_locked(be);
    pthread_mutex_unlock(&be->mu);
}

static void fake_free(nx_gen_backend *b) {
    fake_be *be = (fake_be *)b;
    if (be->th_started) {
        pthread_mutex_lock(&be->mu);
        be->stop = true;
        be->refusing = true;
        pthread_cond_broadcast(&be->cv);
        pthread_mutex_unlock(&be->mu);
        pthread_join(be->th, NULL);
    }
    if (be->slots) {
        cancel_locked(be);
        for (int i = 0; i < be->p.n_slots; i++) {
            free(be->slots[i].b.cache);
            free(be->slots[i].txt);
        }
    }
    free(be->slots);
    nx_chat_template_free(be->chat_template);
    nx_wait_list_free(&be->wait);
    pthread_cond_destroy(&be->cv);
    pthread_mutex_destroy(&be->mu);
    free(be);
}

static const nx_gen_backend_ops fake_ops = {
    .name = "fake",
    .info = fake_info,
    .tokenize = fake_tokenize,
    .detokenize = fake_detokenize,
    .submit = fake_submit,
    .slots = fake_slots,
    .wake = fake_wake,
    .cancel_all = fake_cancel_all,
    .free = fake_free,
};

nx_status nx_gen_fake_create(const nx_gen_fake_params *p, nx_gen_backend **out, nx_error *err) {
    *out = NULL;
    if (p->n_slots < 1 || p->n_slots > 256) return nx_fail(err, NX_ERR_INVALID_ARG, "slots must be in 1..256 (got %d)", p->n_slots);
    if (p->n_ctx_slot < 8) return nx_fail(err, NX_ERR_INVALID_ARG, "slot context must be >= 8 (got %d)", p->n_ctx_slot);
    if (p->queue_max < 0) return nx_fail(err, NX_ERR_INVALID_ARG, "queue-max must be >= 0 (got %d)", p->queue_max);
    if (p->step_us < 0 || p->prompt_us_per_token < 0) return nx_fail(err, NX_ERR_INVALID_ARG, "negative step time");
    fake_be *be = calloc(1, sizeof *be);
    if (!be) return nx_fail(err, NX_ERR_NOMEM, "out of memory creating the fake backend");
    be->base.ops = &fake_ops;
    be->p = *p;
    snprintf(be->alias, sizeof be->alias, "%s", p->alias ? p->alias : "fake");
    pthread_mutex_init(&be->mu, NULL);
    pthread_cond_init(&be->cv, NULL);
    be->slots = calloc((size_t)p->n_slots, sizeof *be->slots);
    if (!be->slots) {
        fake_free(&be->base);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory creating %d slots", p->n_slots);
    }
    for (int i = 0; i < p->n_slots; i++) be->slots[i].b.id = i;
    if (p->chat_template) {
        nx_status st = nx_chat_template_create(p->chat_template, strlen(p->chat_template), "<s>", "</s>", &be->chat_template, err);
        if (st != NX_OK) { fake_free(&be->base); return nx_error_prefix(err, "chat template"); }
    }
    if (pthread_create(&be->th, NULL, scheduler, be) != 0) {
        fake_free(&be->base);
        return nx_fail(err, NX_ERR_INTERNAL, "cannot start the fake scheduler thread");
    }
    be->th_started = true;
    *out = &be->base;
    return NX_OK;
}
