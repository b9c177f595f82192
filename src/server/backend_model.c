/*
 * backend_model.c — the model backend of `nextn serve` (see backend_model.h, backend.h).
 * One scheduler thread owns the context and the speculative engine: each iteration it ends
 * cancelled requests, admits waiting ones into idle slots (slots.h choice rule), submits their
 * prompts to the engine without decoding them (nx_spec_engine_submit: slot i is engine sequence i
 * for good, so the slot's cached prefix lives in its sequence), runs ONE engine step in which the
 * pending prompt chunks share the batch with every decoding slot's rows, and streams the committed
 * tokens (with their logprobs when asked) through each request's text filter.
 * Lock: be->mu guards the wait list, the slots' visible state and the flags; the scheduler drops
 * it while the engine runs (submit / step), so submit / slots never wait on the model.
 * Never: touch the engine or context off the scheduler thread; hold be->mu while calling a
 * stream's cancel (which calls back into wake); print.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"
#include "server/backend_model.h"
#include "chat/chat_template.h"
#include "core/log.h"
#include "server/slots.h"
#include "spec/engine.h"

/* ADMITTED: has a slot, not yet submitted to the engine; RUNNING: submitted (prompt pending or
 * generating). */
typedef enum { SLOT_IDLE = 0, SLOT_ADMITTED, SLOT_RUNNING } slot_state;

typedef struct model_slot {
    nx_slot_base b;             /* first member (slots.h) */
    slot_state state;
    nx_gen_stream *s;
    const nx_gen_request *req;
    bool in_engine;             /* submitted: the engine's sequence b.id holds the request */
    int n_taken;                /* generated tokens taken from the engine so far */
    nx_spec_overrides ov;       /* the request's speculative.* fields for the engine */
    nx_gen_textout out;
    char *txt;
    size_t n_txt, cap_txt;
    nx_gen_timings t;
    double t_admit, t_submit, t_first;
    int n_prompt, n_decoded;
    uint64_t n_requests, request_id, draft_n, draft_acc;
    nx_spec_guard_info guard;   /* the engine's, copied after each step (scheduler thread, under mu) */
    uint64_t guard_switches_done;   /* of finished requests */
    /* set by the unlocked engine phase, read back under the lock */
    nx_status sub_st;
    char sub_msg[NX_ERROR_MSG_MAX];
} model_slot;

typedef struct model_be {
    nx_gen_backend base;
    nx_gen_model_params p;
    char alias[128], path[512], arch[64];
    nx_model *model;
    nx_tokenizer *tok;
    nx_ctx *ctx;
    nx_spec_engine *eng;
    nx_chat_format chat_format;
    nx_chat_template *chat_template;    /* NULL: the built-in chat_format */
    nx_chat_template *chat_template_tools;  /* the GGUF's tokenizer.chat_template.tool_use (NULL: none) */
    int n_ctx_slot, n_drafters;
    nx_spec_type drafters[NX_SPEC_MAX_STAGES];
    const char *stage_names[NX_SPEC_MAX_STAGES];
    nx_spec_type stage_type[NX_SPEC_MAX_STAGES];   /* NX_SPEC_NONE: a stage name that is no type */
    int n_stages;
    const int32_t *eog;
    int n_eog;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool th_started, stop, refusing, cancel_running;
    model_slot *slots;          /* slot i drives engine sequence i */
    nx_wait_list wait;                /* requests not yet admitted */
    uint64_t tick;
    double verify_s[NX_SPEC_VERIFY_ROWS_MAX + 1];   /* the engine's learned policy state for /metrics */
    double accept_mem[NX_SPEC_DRAFT_CAP];           /* (nx_gen_load): copied under mu after each step
                                                       and each release (learned_copy) */
} model_be;

nx_gen_model_params nx_gen_model_default_params(void) {
    nx_gen_model_params p;
    memset(&p, 0, sizeof p);
    p.n_slots = 4;
    p.n_ctx = 4096;
    p.queue_max = 64;
    p.checkpoint_interval = 512;
    p.max_checkpoints = 8;
    p.use_mmap = true;
    p.type_k = p.type_v = NX_CACHE_F16;
    p.spec = nx_spec_params_default();
    return p;
}

/* ===== Hooks (any thread) ===== */

static void model_info(nx_gen_backend *b, nx_gen_info *o) {
    model_be *be = (model_be *)b;
    memset(o, 0, sizeof *o);
    snprintf(o->alias, sizeof o->alias, "%s", be->alias);
    snprintf(o->model_path, sizeof o->model_path, "%s", be->path);
    snprintf(o->arch, sizeof o->arch, "%s", be->arch);
    o->ready = true;
    o->n_slots = be->p.n_slots;
    o->n_ctx_slot = be->n_ctx_slot;
    o->n_ctx_train = nx_model_n_ctx_train(be->model);
    o->n_vocab = nx_model_n_vocab(be->model);
    o->queue_max = be->p.queue_max;
    o->chat_format = be->chat_format;
    o->chat_template = be->chat_template;
    o->chat_template_tools = be->chat_template_tools;
    o->add_bos = nx_tokenizer_specials(be->tok)->add_bos;
    o->n_drafters = be->n_drafters;
    for (int i = 0; i < be->n_drafters; i++) o->drafters[i] = be->drafters[i];
    o->spec = be->p.spec;
    o->checkpoint_interval = be->p.checkpoint_interval;
    o->max_checkpoints = be->p.max_checkpoints;
}

static nx_status model_tokenize(nx_gen_backend *b, const char *text, size_t n, bool add_special, bool parse_special,
                                nx_token_vec *out, nx_error *err) {
    model_be *be = (model_be *)b;
    unsigned f = (add_special ? NX_TOK_ADD_SPECIAL : 0u) | (parse_special ? NX_TOK_PARSE_SPECIAL : 0u);
    return nx_tokenize(be->tok, text, n, f, out, err);
}

static nx_status model_detokenize(nx_gen_backend *b, const nx_token *ids, size_t n, bool special, char **out,
                                  size_t *out_len, nx_error *err) {
    model_be *be = (model_be *)b;
    return nx_detokenize(be->tok, ids, n, special ? NX_DETOK_SPECIAL : 0u, out, out_len, err);
}

static int idle_slots(const model_be *be) {
    int n = 0;
    for (int i = 0; i < be->p.n_slots; i++) n += !be->slots[i].b.busy;
    return n;
}

static nx_status model_submit(nx_gen_backend *b, nx_gen_stream *s, nx_error *err) {
    model_be *be = (model_be *)b;
    pthread_mutex_lock(&be->mu);
    nx_status st = NX_OK;
    int n_prompt = nx_gen_stream_request(s)->n_prompt;
    if (be->refusing) st = nx_fail(err, NX_ERR_UNSUPPORTED, "the server is shutting down");
    else if (n_prompt >= be->n_ctx_slot)   /* the first generated token needs a position too */
        st = nx_fail(err, NX_ERR_RANGE, "the prompt (%d tokens) leaves no room to generate in a slot's context (%d positions)",
                     n_prompt, be->n_ctx_slot);
    else st = nx_wait_list_push(&be->wait, s, be->p.queue_max + idle_slots(be), be->p.n_slots, be->p.queue_max, err);
    if (st == NX_OK) pthread_cond_broadcast(&be->cv);
    pthread_mutex_unlock(&be->mu);
    return st;
}

static int model_slots(nx_gen_backend *b, nx_gen_slot_info *out, int cap, nx_gen_load *load) {
    model_be *be = (model_be *)b;
    pthread_mutex_lock(&be->mu);
    long cached = 0;
    int busy = 0;
    for (int i = 0; i < be->p.n_slots; i++) {
        const model_slot *sl = &be->slots[i];
        cached += sl->b.n_cache;
        busy += sl->b.busy;
        if (i >= cap || !out) continue;
        nx_gen_slot_info *o = &out[i];
        memset(o, 0, sizeof *o);
        o->id = i;
        o->busy = sl->b.busy;
        o->request_id = sl->request_id;
        o->n_ctx = be->n_ctx_slot;
        o->n_cached = sl->b.n_cache;
        o->n_prompt = sl->n_prompt;
        o->n_decoded = sl->n_decoded;
        o->n_requests = sl->n_requests;
        o->draft_n = sl->draft_n;
        o->draft_n_accepted = sl->draft_acc;
        o->guard_off = sl->guard.off;
        o->guard_switches = sl->guard_switches_done + sl->guard.switches;
        o->s_per_tok_spec = sl->guard.s_per_tok_spec;
        o->s_per_tok_plain = sl->guard.s_per_tok_plain;
    }
    if (load) {
        load->n_guard_off = 0;
        load->guard_switches = 0;
        for (int i = 0; i < be->p.n_slots; i++) {
            load->n_guard_off += be->slots[i].b.busy && be->slots[i].guard.off;
            load->guard_switches += be->slots[i].guard_switches_done + be->slots[i].guard.switches;
        }
        memcpy(load->verify_s, be->verify_s, sizeof load->verify_s);
        memcpy(load->accept_mem, be->accept_mem, sizeof load->accept_mem);
        load->n_busy = busy;
        load->n_waiting = be->wait.n;
        load->kv_usage = (double)cached / ((double)be->n_ctx_slot * be->p.n_slots);
    }
    pthread_mutex_unlock(&be->mu);
    return be->p.n_slots;
}

static void model_wake(nx_gen_backend *b) {
    model_be *be = (model_be *)b;
    pthread_mutex_lock(&be->mu);
    pthread_cond_broadcast(&be->cv);
    pthread_mutex_unlock(&be->mu);
}

/* ===== The scheduler (its thread only; be->mu held unless said otherwise) ===== */

/* The draft policy's engine-wide learned state, for /metrics (nx_gen_load). */
static void learned_copy(model_be *be) {
    const nx_spec_costs *c = nx_spec_engine_costs(be->eng);
    const nx_spec_policy_memory *m = nx_spec_engine_memory(be->eng, false);
    for (int n = 0; n <= NX_SPEC_VERIFY_ROWS_MAX; n++) be->verify_s[n] = c && n && c->n_obs[n] ? c->cv[n] : 0.0;
    for (int i = 0; i < NX_SPEC_DRAFT_CAP; i++) be->accept_mem[i] = m && m->n_a[i] ? m->a[i] : 0.0;
}

/* Free the slot's engine sequence (its cache stays for a later prefix reuse) and the request's
 * scratch. */
static void slot_clear(model_be *be, model_slot *sl) {
    if (sl->in_engine) {
        nx_spec_engine_release(be->eng, sl->b.id);
        learned_copy(be);   /* the release folded the sequence into the policy memory */
        /* The slot's record becomes exactly what the sequence holds (what a later request can
         * reuse; nothing after a failed step). */
        int n = 0;
        const nx_token *c = nx_spec_engine_cached(be->eng, sl->b.id, &n);
        sl->b.n_cache = 0;
        for (int i = 0; i < n && c; i++)
            if (!nx_slot_cache_push(&sl->b, c[i])) break;
    }
    sl->in_engine = false;
    nx_gen_textout_free(&sl->out);
    sl->s = NULL;
    sl->req = NULL;
    sl->state = SLOT_IDLE;
    sl->b.busy = false;
}

static void slot_end(model_be *be, model_slot *sl, nx_gen_finish f, int stop_index) {
    sl->n_txt = 0;
    if (f != NX_GEN_FINISH_STOP && f != NX_GEN_FINISH_CANCELLED) nx_gen_textout_flush(&sl->out, &sl->txt, &sl->n_txt, &sl->cap_txt);
    if (sl->t_first > 0 && sl->t.predicted_n > 0) sl->t.predicted_ms = (nx_gen_now() - sl->t_first) * 1000.0;
    else if (sl->t_submit > 0) sl->t.prompt_ms = (nx_gen_now() - sl->t_submit) * 1000.0;   /* ended in its prompt */
    nx_gen_stream_finish(sl->s, f, stop_index, sl->txt, sl->n_txt, &sl->t);
    sl->n_txt = 0;
    sl->draft_n += sl->t.draft_n;
    sl->draft_acc += sl->t.draft_n_accepted;
    sl->guard_switches_done += sl->guard.switches;
    sl->guard.switches = 0;
    sl->n_requests++;
    slot_clear(be, sl);
}

static void slot_fail(model_be *be, model_slot *sl, nx_status st, const char *msg) {
    nx_gen_stream_fail(sl->s, st, msg);
    sl->n_requests++;
    slot_clear(be, sl);
}

/* The request's speculative.* fields as engine overrides; false: none given. */
static bool spec_overrides(const model_be *be, const nx_gen_spec *g, nx_spec_overrides *o) {
    memset(o, 0, sizeof *o);
    bool any = false;
    if (g->n_max >= 0) { o->has_n_max = true; o->n_max = g->n_max; any = true; }
    if (g->n_min >= 0) { o->has_n_min = true; o->n_min = g->n_min; any = true; }
    if (g->p_min >= 0) { o->has_p_min = true; o->p_min = g->p_min; any = true; }
    if (g->adaptive >= 0) { o->has_adaptive = true; o->adaptive = g->adaptive > 0; any = true; }
    if (g->has_type) {
        any = true;
        if (g->type == NX_SPEC_NONE) {   /* "none": no drafting at all */
            o->has_n_max = o->has_n_min = true;
            o->n_max = o->n_min = 0;
        } else {
            for (int i = 0; i < be->n_stages; i++)
                if (be->stage_type[i] == g->type) o->stage_mask |= 1u << i;
            /* nx_gen_submit refused types not loaded, so the mask is never empty here */
        }
    }
    /* A lone n_min above the server's draft length: the longest draft the server allows. */
    int n_max = o->has_n_max ? o->n_max : be->p.spec.draft_max;
    if (o->has_n_min && o->n_min > n_max) o->n_min = n_max;
    return any;
}

static void slot_admit(model_be *be, model_slot *sl, nx_gen_stream *s) {
    const nx_gen_request *r = nx_gen_stream_request(s);
    nx_gen_timings_init(&sl->t);
    sl->b.busy = true;
    sl->b.last_used = ++be->tick;
    sl->state = SLOT_ADMITTED;
    sl->s = s;
    sl->req = r;
    sl->in_engine = false;
    sl->n_taken = 0;
    sl->request_id = nx_gen_stream_id(s);
    sl->t_admit = nx_gen_now();
    sl->t_submit = 0;
    sl->t_first = 0;
    sl->n_prompt = r->n_prompt;
    sl->n_decoded = 0;
    sl->t.id_slot = sl->b.id;
    sl->t.n_prompt = r->n_prompt;
    sl->t.cache_n = 0;
    sl->t.prompt_n = r->n_prompt;
    sl->t.queue_ms = (sl->t_admit - nx_gen_stream_t_submit(s)) * 1000.0;
    nx_gen_timings_set_stages(&sl->t, be->stage_names, be->n_stages);
    nx_gen_textout_init(&sl->out, r->stop, r->stop_len, r->n_stop);
}

/* The log-probabilities of generated token i (the engine records them when the request asked). */
static float token_logprob(model_be *be, model_slot *sl, int i, nx_gen_top *top, int *n_top) {
    const nx_gen_request *r = sl->req;
    *n_top = 0;
    if (!r->want_logprob && r->n_probs == 0) return 0.0f;
    nx_token_prob chosen = {0, 0.0f};
    nx_token_prob tp[NX_SPEC_MAX_PROBS];
    int max_top = r->n_probs < NX_SPEC_MAX_PROBS ? r->n_probs : NX_SPEC_MAX_PROBS;
    int n = nx_spec_engine_logprobs(be->eng, sl->b.id, i, &chosen, tp, max_top);
    if (n < 0) return 0.0f;
    for (int j = 0; j < n && j < NX_GEN_TOP_MAX; j++) {
        top[j].token = tp[j].id;
        top[j].logprob = tp[j].logprob;
        *n_top = j + 1;
    }
    return chosen.logprob;
}

/* One committed token (generated token number i of the request); returns false when the request
 * ended (the slot is idle again). */
static bool slot_emit(model_be *be, model_slot *sl, nx_token tok, int i) {
    const nx_gen_request *r = sl->req;
    if (sl->t_first == 0) sl->t_first = nx_gen_now();
    sl->n_decoded++;
    sl->t.predicted_n++;
    nx_slot_cache_push(&sl->b, tok);
    if (!r->ignore_eos && nx_token_is_eog(be->tok, tok)) {
        slot_end(be, sl, NX_GEN_FINISH_EOS, -1);
        return false;
    }
    size_t np = 0;
    const char *piece = nx_token_piece(be->tok, tok, false, &np);
    sl->n_txt = 0;
    int stop = nx_gen_textout_feed(&sl->out, piece, np, &sl->txt, &sl->n_txt, &sl->cap_txt);
    nx_gen_top top[NX_GEN_TOP_MAX];
    int n_top = 0;
    float lp = token_logprob(be, sl, i, top, &n_top);
    nx_status st = nx_gen_stream_push(sl->s, tok, sl->txt ? sl->txt : "", sl->n_txt, lp, top, n_top, NULL);
    sl->n_txt = 0;
    if (st != NX_OK) { slot_fail(be, sl, st, "out of memory streaming a token"); return false; }
    if (stop >= 0) { slot_end(be, sl, NX_GEN_FINISH_STOP, stop); return false; }
    if (r->n_predict >= 0 && sl->n_decoded >= r->n_predict) { slot_end(be, sl, NX_GEN_FINISH_LENGTH, -1); return false; }
    return true;
}

/* Stream what the engine committed for the slot since the last take; end the request when the
 * engine finished its sequence (a stop token, the budget or a full context). */
static void slot_take(model_be *be, model_slot *sl) {
    if (nx_spec_engine_prompt_pending(be->eng, sl->b.id)) return;
    if (sl->t_first == 0) sl->t.prompt_ms = (nx_gen_now() - sl->t_submit) * 1000.0;
    const nx_token *toks = NULL;
    int n = nx_spec_engine_take(be->eng, sl->b.id, &toks);
    int base = sl->n_taken;
    sl->n_taken += n;
    for (int i = 0; i < n; i++)
        if (!slot_emit(be, sl, toks[i], base + i)) return;
    if (!nx_spec_engine_active(be->eng, sl->b.id)) {
        /* EOS and n_predict were caught per token; what is left is the context end. */
        slot_end(be, sl, NX_GEN_FINISH_CONTEXT, -1);
    }
}

static void on_round(void *user, const nx_spec_round_info *info) {
    model_be *be = user;
    if (info->seq < 0 || info->seq >= be->p.n_slots) return;
    model_slot *sl = &be->slots[info->seq];
    if (!sl->in_engine) return;
    if (info->n_drafted > 0) nx_gen_timings_round(&sl->t, info->stage < 0 ? 0 : info->stage, info->n_drafted, info->n_accepted);
}

static void admit_waiting(model_be *be) {
    int o = 0;
    for (int i = 0; i < be->wait.n; i++) {
        nx_gen_stream *s = be->wait.v[i];
        if (nx_gen_stream_cancelled(s)) { nx_slot_finish_unadmitted(s); continue; }
        model_slot *sl = (model_slot *)nx_slot_choose(be->slots, sizeof *be->slots, be->p.n_slots, nx_gen_stream_request(s));
        if (sl) slot_admit(be, sl, s);
        else be->wait.v[o++] = s;
    }
    be->wait.n = o;
}

/* Hand an admitted slot's request to the engine (be->mu NOT held: touches only the slot's private
 * fields and the engine). Nothing is decoded here: the next steps process the prompt. */
static void slot_submit_unlocked(model_be *be, model_slot *sl) {
    const nx_gen_request *r = sl->req;
    sl->sub_st = NX_OK;
    sl->sub_msg[0] = 0;
    if (r->n_predict == 0) return;
    nx_spec_request q;
    memset(&q, 0, sizeof q);
    q.prompt = r->prompt;
    q.n_prompt = r->n_prompt;
    q.n_predict = r->n_predict;
    q.sampler = &r->sampling;
    if (!r->ignore_eos) {
        q.stop = be->eog;
        q.n_stop = be->n_eog;
    }
    if (spec_overrides(be, &r->spec, &sl->ov)) q.spec = &sl->ov;
    /* The chosen token's logprob needs the engine to record at least one entry. */
    q.n_probs = r->n_probs > 0 ? r->n_probs : (r->want_logprob ? 1 : 0);
    if (q.n_probs > NX_SPEC_MAX_PROBS) q.n_probs = NX_SPEC_MAX_PROBS;
    q.reuse_prefix = r->cache_prompt;
    nx_error err = {0};
    sl->t_submit = nx_gen_now();
    sl->sub_st = nx_spec_engine_submit(be->eng, &q, sl->b.id, &err);
    if (sl->sub_st != NX_OK) {
        snprintf(sl->sub_msg, sizeof sl->sub_msg, "%s", err.msg);
        return;
    }
    sl->in_engine = true;
}

/* After a successful submit (lock held): the slot's token record becomes the new prompt and the
 * timings say how much of it came from the cache. */
static void slot_submitted(model_be *be, model_slot *sl) {
    const nx_gen_request *r = sl->req;
    int reused = nx_spec_engine_n_reused(be->eng, sl->b.id);
    if (reused < 0) reused = 0;
    if (reused > r->n_prompt) reused = r->n_prompt;
    sl->t.cache_n = reused;
    sl->t.prompt_n = r->n_prompt - reused;
    sl->b.n_cache = 0;
    for (int i = 0; i < r->n_prompt; i++)
        if (!nx_slot_cache_push(&sl->b, r->prompt[i])) break;
    sl->state = SLOT_RUNNING;
}

static void end_all(model_be *be, nx_status st, const char *msg) {
    for (int i = 0; i < be->p.n_slots; i++) {
        model_slot *sl = &be->slots[i];
        if (!sl->b.busy) continue;
        if (st == NX_OK) slot_end(be, sl, NX_GEN_FINISH_CANCELLED, -1);
        else slot_fail(be, sl, st, msg);
    }
}

static void *scheduler(void *arg) {
    model_be *be = arg;
    pthread_mutex_lock(&be->mu);
    while (!be->stop) {
        if (be->cancel_running) {
            end_all(be, NX_OK, NULL);
            be->cancel_running = false;
        }
        for (int i = 0; i < be->p.n_slots; i++) {
            model_slot *sl = &be->slots[i];
            if (sl->b.busy && nx_gen_stream_cancelled(sl->s)) slot_end(be, sl, NX_GEN_FINISH_CANCELLED, -1);
        }
        admit_waiting(be);
        int busy = 0;
        for (int i = 0; i < be->p.n_slots; i++) busy += be->slots[i].b.busy;
        if (!busy) {
            pthread_cond_wait(&be->cv, &be->mu);
            continue;
        }
        pthread_mutex_unlock(&be->mu);
        /* ---- the model, without the lock ---- */
        for (int i = 0; i < be->p.n_slots; i++)
            if (be->slots[i].state == SLOT_ADMITTED) slot_submit_unlocked(be, &be->slots[i]);
        int n_in = 0;
        for (int i = 0; i < be->p.n_slots; i++) n_in += be->slots[i].in_engine;
        nx_error err = {0};
        nx_status st = n_in > 0 ? nx_spec_engine_step(be->eng, &err) : NX_OK;
        pthread_mutex_lock(&be->mu);
        learned_copy(be);
        for (int i = 0; i < be->p.n_slots; i++) {
            model_slot *sl = &be->slots[i];
            if (sl->state == SLOT_ADMITTED) {
                if (sl->sub_st != NX_OK) { slot_fail(be, sl, sl->sub_st, sl->sub_msg); continue; }
                if (sl->req->n_predict == 0) { slot_end(be, sl, NX_GEN_FINISH_LENGTH, -1); continue; }
                slot_submitted(be, sl);
            }
            if (sl->state != SLOT_RUNNING) continue;
            if (sl->in_engine) nx_spec_engine_guard(be->eng, sl->b.id, &sl->guard);
            if (st != NX_OK) {
                /* The engine stopped every sequence it was running: fail those requests (what they
                 * cached is not trusted for slot choice any more). */
                sl->b.n_cache = 0;
                slot_fail(be, sl, st, err.msg);
                continue;
            }
            slot_take(be, sl);
        }
    }
    pthread_mutex_unlock(&be->mu);
    return NULL;
}

/* ===== Life cycle ===== */

static void cancel_waiting_locked(model_be *be) {
    for (int i = 0; i < be->wait.n; i++) nx_slot_finish_unadmitted(be->wait.v[i]);
    be->wait.n = 0;
}

static void model_cancel_all(nx_gen_backend *b) {
    model_be *be = (model_be *)b;
    pthread_mutex_lock(&be->mu);
    be->refusing = true;
    cancel_waiting_locked(be);
    /* Running requests belong to the scheduler thread (the engine is not thread-safe): it ends
     * them at its next iteration. */
    be->cancel_running = true;
    pthread_cond_broadcast(&be->cv);
    pthread_mutex_unlock(&be->mu);
}

static void model_free(nx_gen_backend *b) {
    model_be *be = (model_be *)b;
    if (be->th_started) {
        pthread_mutex_lock(&be->mu);
        be->stop = true;
        be->refusing = true;
        pthread_cond_broadcast(&be->cv);
        pthread_mutex_unlock(&be->mu);
        pthread_join(be->th, NULL);
    }
    if (be->slots) {
        cancel_waiting_locked(be);
        if (be->eng) end_all(be, NX_OK, NULL);
        for (int i = 0; i < be->p.n_slots; i++) {
            free(be->slots[i].b.cache);
            free(be->slots[i].txt);
        }
    }
    nx_spec_engine_free(be->eng);
    nx_ctx_free(be->ctx);
    nx_tokenizer_free(be->tok);
    nx_model_free(be->model);
    nx_chat_template_free(be->chat_template);
    nx_chat_template_free(be->chat_template_tools);
    free(be->slots);
    nx_wait_list_free(&be->wait);
    pthread_cond_destroy(&be->cv);
    pthread_mutex_destroy(&be->mu);
    free(be);
}

static const nx_gen_backend_ops model_ops = {
    .name = "model",
    .info = model_info,
    .tokenize = model_tokenize,
    .detokenize = model_detokenize,
    .submit = model_submit,
    .slots = model_slots,
    .wake = model_wake,
    .cancel_all = model_cancel_all,
    .free = model_free,
};

/* The Jinja chat template: --chat-template-file's text, else the GGUF's tokenizer.chat_template.
 * A given file that does not parse is an error; a GGUF template that does not parse is logged
 * and the built-in format serves instead. */
static nx_status load_chat_template(model_be *be, nx_error *err) {
    const nx_tok_specials *sp = nx_tokenizer_specials(be->tok);
    size_t bl = 0, el = 0;
    const char *bos = sp->bos >= 0 ? nx_token_text(be->tok, sp->bos, &bl) : NULL;
    const char *eos = sp->eos >= 0 ? nx_token_text(be->tok, sp->eos, &el) : NULL;
    char bz[256] = "", ez[256] = "";
    if (bos) snprintf(bz, sizeof bz, "%.*s", (int)bl, bos);
    if (eos) snprintf(ez, sizeof ez, "%.*s", (int)el, eos);
    if (be->p.has_chat_format && !be->p.chat_template) return NX_OK;   /* --chat-format: the built-in format */
    if (be->p.chat_template) {
        nx_status st = nx_chat_template_create(be->p.chat_template, strlen(be->p.chat_template), bz, ez, &be->chat_template, err);
        return st == NX_OK ? st : nx_error_prefix(err, "chat template");
    }
    uint64_t len = 0;
    const char *tmpl = nx_gguf_get_str(be->model->gguf, "tokenizer.chat_template", &len);
    if (!tmpl) return NX_OK;
    nx_error e = {0};
    if (nx_chat_template_create(tmpl, (size_t)len, bz, ez, &be->chat_template, &e) != NX_OK)
        nx_log(NX_LOG_WARN, "the GGUF's chat template does not parse (%s); using the built-in %s format", e.msg,
               nx_chat_format_name(be->chat_format));
    /* the named variant Hugging Face picks for requests with tools */
    const char *tu = be->chat_template ? nx_gguf_get_str(be->model->gguf, "tokenizer.chat_template.tool_use", &len) : NULL;
    if (tu && nx_chat_template_create(tu, (size_t)len, bz, ez, &be->chat_template_tools, &e) != NX_OK)
        nx_log(NX_LOG_WARN, "the GGUF's tool_use chat template does not parse (%s); tools use the default one", e.msg);
    return NX_OK;
}

static nx_status load(model_be *be, nx_error *err) {
    const nx_gen_model_params *p = &be->p;
    nx_model_params mp = nx_model_default_params();
    mp.n_threads = p->n_threads;
    mp.use_mmap = p->use_mmap;
    if (nx_model_load(p->model_path, &mp, &be->model) != NX_OK)
        return nx_fail(err, NX_ERR_IO, "%s: %s", p->model_path, nx_last_error());
    if (!nx_model_can_run(be->model))
        return nx_fail(err, NX_ERR_UNSUPPORTED, "%s: architecture '%s' has no forward pass", p->model_path,
                       nx_model_arch(be->model));
    nx_status st = nx_tokenizer_from_gguf(be->model->gguf, &be->tok, err);
    if (st != NX_OK) return st;
    be->n_eog = nx_tokenizer_eog_ids(be->tok, &be->eog);
    snprintf(be->arch, sizeof be->arch, "%s", nx_model_arch(be->model));
    if (p->has_chat_format) be->chat_format = p->chat_format;
    else {
        uint64_t len = 0;
        const char *tmpl = nx_gguf_get_str(be->model->gguf, "tokenizer.chat_template", &len);
        char *z = NULL;
        if (tmpl && (z = malloc(len + 1))) {
            memcpy(z, tmpl, len);
            z[len] = 0;
        }
        be->chat_format = nx_chat_format_detect(z, be->arch);
        free(z);
    }
    st = load_chat_template(be, err);
    if (st != NX_OK) return st;
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = p->n_ctx / p->n_slots;
    cp.n_seq_max = p->n_slots;
    cp.n_ubatch = p->n_ubatch;
    cp.n_threads = p->n_threads;
    cp.type_k = p->type_k;
    cp.type_v = p->type_v;
    if (nx_ctx_create(be->model, &cp, &be->ctx) != NX_OK) return nx_fail(err, NX_ERR_UNSUPPORTED, "%s", nx_last_error());
    be->n_ctx_slot = nx_ctx_n_ctx(be->ctx);
    {
        const nx_ctx_memory mem = nx_ctx_memory_info(be->ctx);
        nx_log(NX_LOG_INFO,
               "KV cache: K %s, V %s; %.1f KiB per token of context, %.2f MiB fixed per slot (recurrent state, "
               "sliding-window rings); %d slots x %d positions = %.1f MiB",
               nx_cache_type_name(cp.type_k), nx_cache_type_name(cp.type_v), (double)mem.per_pos / 1024.0,
               (double)mem.fixed / 1048576.0, p->n_slots, be->n_ctx_slot, (double)mem.total / 1048576.0);
    }
    nx_spec_engine_params ep = nx_spec_engine_default_params();
    ep.spec = p->spec;
    ep.sampler = nx_sampler_default_params(nx_model_n_vocab(be->model));
    ep.on_round = on_round;
    ep.user = be;
    ep.checkpoint_interval = p->checkpoint_interval;
    ep.max_checkpoints = p->max_checkpoints;
    ep.max_prompt_rows = p->max_prompt_rows;
    st = nx_spec_engine_create(be->ctx, &ep, &be->eng, err);
    if (st != NX_OK) return st;
    const char *const *names = nx_spec_engine_stage_names(be->eng, &be->n_stages);
    if (be->n_stages > NX_SPEC_MAX_STAGES) be->n_stages = NX_SPEC_MAX_STAGES;
    for (int i = 0; i < be->n_stages; i++) {
        be->stage_names[i] = names[i];
        nx_spec_type t;
        be->stage_type[i] = nx_spec_type_parse(names[i], &t, NULL) == NX_OK ? t : NX_SPEC_NONE;
        if (be->stage_type[i] != NX_SPEC_NONE) be->drafters[be->n_drafters++] = be->stage_type[i];
    }
    return NX_OK;
}

nx_status nx_gen_model_create(const nx_gen_model_params *p, nx_gen_backend **out, nx_error *err) {
    *out = NULL;
    if (!p->model_path) return nx_fail(err, NX_ERR_INVALID_ARG, "no model file given");
    if (p->n_slots < 1 || p->n_slots > 256) return nx_fail(err, NX_ERR_INVALID_ARG, "slots must be in 1..256 (got %d)", p->n_slots);
    if (p->n_ctx / p->n_slots < 8)
        return nx_fail(err, NX_ERR_INVALID_ARG, "-c %d over %d slots leaves fewer than 8 positions per slot", p->n_ctx, p->n_slots);
    if (p->queue_max < 0) return nx_fail(err, NX_ERR_INVALID_ARG, "queue-max must be >= 0 (got %d)", p->queue_max);
    if (p->checkpoint_interval < 0 || p->max_checkpoints < 0 || p->max_prompt_rows < 0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "ctx-checkpoint-interval, ctx-checkpoints and max-prompt-rows must be >= 0");
    model_be *be = calloc(1, sizeof *be);
    if (!be) return nx_fail(err, NX_ERR_NOMEM, "out of memory creating the model backend");
    be->base.ops = &model_ops;
    be->p = *p;
    pthread_mutex_init(&be->mu, NULL);
    pthread_cond_init(&be->cv, NULL);
    snprintf(be->path, sizeof be->path, "%s", p->model_path);
    if (p->alias) snprintf(be->alias, sizeof be->alias, "%s", p->alias);
    else {
        const char *base = strrchr(p->model_path, '/');
        snprintf(be->alias, sizeof be->alias, "%s", base ? base + 1 : p->model_path);
        char *dot = strstr(be->alias, ".gguf");
        if (dot) *dot = 0;
    }
    be->slots = calloc((size_t)p->n_slots, sizeof *be->slots);
    if (!be->slots) {
        model_free(&be->base);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory creating %d slots", p->n_slots);
    }
    for (int i = 0; i < p->n_slots; i++) be->slots[i].b.id = i;
    nx_status st = load(be, err);
    if (st != NX_OK) {
        model_free(&be->base);
        return st;
    }
    if (pthread_create(&be->th, NULL, scheduler, be) != 0) {
        model_free(&be->base);
        return nx_fail(err, NX_ERR_INTERNAL, "cannot start the scheduler thread");
    }
    be->th_started = true;
    *out = &be->base;
    return NX_OK;
}
