/*
 * slots.h — slot bookkeeping shared by the generation backends (backend_fake.c, backend_model.c):
 * a slot's cached token sequence, the slot choice rule of server.md (id_slot, else the idle slot
 * with the longest cached prefix of the prompt, else the least recently used idle slot), and
 * ending a request that never reached a slot.
 * A backend embeds nx_slot_base as the FIRST member of its own slot struct and passes its slot
 * array with the struct's size as the stride.
 * Never: lock anything (the caller holds its backend's lock), touch a busy slot's cache.
 */
#ifndef NX_SERVER_SLOTS_H
#define NX_SERVER_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "server/backend.h"

typedef struct nx_slot_base {
    int       id;
    bool      busy;
    nx_token *cache;            /* the slot's sequence: prompt + generated */
    int       n_cache, cap_cache;
    uint64_t  last_used;        /* tick of the last admission (LRU) */
} nx_slot_base;

/* Append one token to the slot's cache (false: out of memory, the cache is unchanged). */
bool nx_slot_cache_push(nx_slot_base *sl, nx_token t);
/* Tokens the slot's cache shares with the start of the prompt. */
int  nx_slot_common_prefix(const nx_slot_base *sl, const nx_token *prompt, int n_prompt);
/* The idle slot for r (see above) among n slots laid out stride bytes apart; NULL: none idle
 * (or r->id_slot is busy). */
nx_slot_base *nx_slot_choose(void *slots, size_t stride, int n, const nx_gen_request *r);
/* The wait list of requests not yet admitted to a slot (FIFO, grows on demand). */
typedef struct nx_wait_list {
    nx_gen_stream **v;
    int n, cap;
} nx_wait_list;

/* Queue s, unless limit requests already wait: then NX_ERR_NOMEM ("all n_slots slots are busy
 * ..."), which the HTTP side turns into 503 + Retry-After. */
nx_status nx_wait_list_push(nx_wait_list *w, nx_gen_stream *s, int limit, int n_slots, int queue_max, nx_error *err);
void nx_wait_list_free(nx_wait_list *w);

/* Finish a stream that was queued but never admitted (cancelled, shutdown) with
 * NX_GEN_FINISH_CANCELLED and timings saying so. */
void nx_slot_finish_unadmitted(nx_gen_stream *s);

#endif
