/*
 * slots.c — slot bookkeeping shared by the generation backends (see slots.h): prompt caches,
 * slot choice, and ending requests that never got a slot.
 * Never: lock (callers hold their backend's lock), allocate beyond a slot's cache.
 */
#include <stdlib.h>
#include "server/slots.h"

bool nx_slot_cache_push(nx_slot_base *sl, nx_token t) {
    if (sl->n_cache == sl->cap_cache) {
        int cap = sl->cap_cache ? sl->cap_cache * 2 : 64;
        nx_token *c = realloc(sl->cache, (size_t)cap * sizeof *c);
        if (!c) return false;
        sl->cache = c;
        sl->cap_cache = cap;
    }
    sl->cache[sl->n_cache++] = t;
    return true;
}

int nx_slot_common_prefix(const nx_slot_base *sl, const nx_token *prompt, int n_prompt) {
    int n = 0;
    while (n < sl->n_cache && n < n_prompt && sl->cache[n] == prompt[n]) n++;
    return n;
}

static nx_slot_base *at(void *slots, size_t stride, int i) { return (nx_slot_base *)((char *)slots + (size_t)i * stride); }

nx_slot_base *nx_slot_choose(void *slots, size_t stride, int n, const nx_gen_request *r) {
    if (r->id_slot >= 0) {
        if (r->id_slot >= n) return NULL;
        nx_slot_base *sl = at(slots, stride, r->id_slot);
        return sl->busy ? NULL : sl;
    }
    nx_slot_base *best = NULL;
    int best_common = 0;
    for (int i = 0; i < n; i++) {
        nx_slot_base *sl = at(slots, stride, i);
        if (sl->busy) continue;
        int c = nx_slot_common_prefix(sl, r->prompt, r->n_prompt);
        if (c > best_common) { best = sl; best_common = c; }
    }
    if (best) return best;
    for (int i = 0; i < n; i++) {
        nx_slot_base *sl = at(slots, stride, i);
        if (!sl->busy && (!best || sl->last_used < best->last_used)) best = sl;
    }
    return best;
}

void nx_slot_finish_unadmitted(nx_gen_stream *s) {
    nx_gen_timings t;
    nx_gen_timings_init(&t);
    t.n_prompt = nx_gen_stream_request(s)->n_prompt;
    t.queue_ms = (nx_gen_now() - nx_gen_stream_t_submit(s)) * 1000.0;
    nx_gen_stream_finish(s, NX_GEN_FINISH_CANCELLED, -1, NULL, 0, &t);
}

nx_status nx_wait_list_push(nx_wait_list *w, nx_gen_stream *s, int limit, int n_slots, int queue_max, nx_error *err) {
    if (w->n >= limit)
        return nx_fail(err, NX_ERR_NOMEM, "all %d slots are busy and %d requests are queued (--queue-max %d)", n_slots,
                       w->n, queue_max);
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 16;
        nx_gen_stream **v = realloc(w->v, (size_t)cap * sizeof *v);
        if (!v) return nx_fail(err, NX_ERR_NOMEM, "out of memory queueing a request");
        w->v = v;
        w->cap = cap;
    }
    w->v[w->n++] = s;
    return NX_OK;
}

void nx_wait_list_free(nx_wait_list *w) {
    free(w->v);
    w->v = NULL;
    w->n = w->cap = 0;
}
