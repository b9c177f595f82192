/*
 * chain.c — a drafter made of several (`--spec-type ngram,mtp`): the first stage with a proposal
 * wins, per request.
 *
 * Owns its stages. Promises: each stage sees begin / process / accept for every sequence (so a
 * stage that did not draft this round still follows the committed stream), and draft is called
 * once per stage with all the requests still unserved (one batch per stage, never one call per
 * sequence). Never reorders the caller's requests or writes past a request's k_max.
 */
#include "spec/drafter.h"

#include <stdlib.h>
#include <string.h>

typedef struct chain_drafter {
    nx_drafter base;
    nx_drafter *stages[NX_SPEC_MAX_STAGES];
    int n_stages;
    int min_len;
    nx_draft_req *sub;           /* scratch: the requests passed to one stage */
    int *sub_of;                 /* sub[j] serves reqs[sub_of[j]] */
    int cap_sub;
} chain_drafter;

static const nx_drafter_ops chain_ops;

static nx_status ch_begin(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, nx_error *err) {
    chain_drafter *c = (chain_drafter *)d;
    for (int s = 0; s < c->n_stages; s++) {
        nx_status st = nx_drafter_begin(c->stages[s], seq, prompt, n_prompt, err);
        if (st) return st;
    }
    return NX_OK;
}

static nx_status ch_process(nx_drafter *d, const nx_target_rows *rows, nx_error *err) {
    chain_drafter *c = (chain_drafter *)d;
    for (int s = 0; s < c->n_stages; s++) {
        nx_status st = nx_drafter_process(c->stages[s], rows, err);
        if (st) return st;
    }
    return NX_OK;
}

static nx_status ch_accept(nx_drafter *d, nx_seq_id seq, int n_accepted, nx_error *err) {
    chain_drafter *c = (chain_drafter *)d;
    for (int s = 0; s < c->n_stages; s++) {
        nx_status st = nx_drafter_accept(c->stages[s], seq, n_accepted, err);
        if (st) return st;
    }
    return NX_OK;
}

static nx_status ch_draft(nx_drafter *d, nx_draft_req *reqs, int n_reqs, nx_error *err) {
    chain_drafter *c = (chain_drafter *)d;
    if (n_reqs > c->cap_sub) {
        nx_draft_req *ns = realloc(c->sub, (size_t)n_reqs * sizeof *ns);
        if (ns) c->sub = ns;
        int *no = realloc(c->sub_of, (size_t)n_reqs * sizeof *no);
        if (no) c->sub_of = no;
        if (!ns || !no) return nx_fail(err, NX_ERR_NOMEM, "chain: out of memory for %d requests", n_reqs);
        c->cap_sub = n_reqs;
    }
    for (int s = 0; s < c->n_stages; s++) {
        int m = 0;
        for (int i = 0; i < n_reqs; i++) {
            if (reqs[i].n > 0) continue;                       /* served by an earlier stage */
            int k = reqs[i].k_max;
            if (reqs[i].k_max_by_stage && reqs[i].k_max_by_stage[s] < k) k = reqs[i].k_max_by_stage[s];
            if (k <= 0) continue;
            c->sub[m] = reqs[i];
            c->sub[m].k_max = k;
            c->sub[m].k_max_by_stage = NULL;                   /* a nested chain sees one limit */
            c->sub_of[m++] = i;
        }
        if (!m) continue;
        nx_status st = nx_drafter_draft(c->stages[s], c->sub, m, err);
        if (st) return nx_error_prefix(err, "chain stage %d (%s)", s, nx_drafter_name(c->stages[s]));
        for (int j = 0; j < m; j++) {
            if (c->sub[j].n < c->min_len) continue;            /* too short: the next stage tries */
            nx_draft_req *r = &reqs[c->sub_of[j]];
            r->n = c->sub[j].n;
            r->stage = s;
            r->sampled = c->sub[j].sampled;
        }
    }
    /* A short proposal that no later stage beat still wrote into the caller's buffers; it was
     * not taken, so n stays 0 there. */
    return NX_OK;
}

static void ch_free(nx_drafter *d) {
    chain_drafter *c = (chain_drafter *)d;
    for (int s = 0; s < c->n_stages; s++) nx_drafter_free(c->stages[s]);
    free(c->sub);
    free(c->sub_of);
    free(c);
}

static nx_status ch_sync(nx_drafter *d, nx_error *err) {
    chain_drafter *c = (chain_drafter *)d;
    for (int s = 0; s < c->n_stages; s++) {
        nx_status st = nx_drafter_sync(c->stages[s], err);
        if (st) return st;
    }
    return NX_OK;
}

static nx_status ch_begin_keep(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, int keep,
                               const float *hidden_prev, nx_error *err) {
    chain_drafter *c = (chain_drafter *)d;
    for (int s = 0; s < c->n_stages; s++) {
        nx_status st = nx_drafter_begin_keep(c->stages[s], seq, prompt, n_prompt, keep, hidden_prev, err);
        if (st) return st;
    }
    return NX_OK;
}

static const nx_drafter_ops chain_ops = {
    .name = "chain", .begin = ch_begin, .process = ch_process, .draft = ch_draft,
    .accept = ch_accept, .free = ch_free, .sync = ch_sync, .begin_keep = ch_begin_keep,
};

nx_status nx_drafter_chain_create(nx_drafter **stages, int n_stages, int min_len, nx_drafter **out, nx_error *err) {
    nx_status st = NX_OK;
    if (out) *out = NULL;
    if (!out || !stages || n_stages < 1 || n_stages > NX_SPEC_MAX_STAGES) {
        st = nx_fail(err, NX_ERR_INVALID_ARG, "chain: %d stages (1..%d)", n_stages, NX_SPEC_MAX_STAGES);
        goto fail;
    }
    for (int s = 0; s < n_stages; s++) {
        if (!stages[s] || !stages[s]->ops) {
            st = nx_fail(err, NX_ERR_INVALID_ARG, "chain: stage %d is missing", s);
            goto fail;
        }
        if (stages[s]->n_seq != stages[0]->n_seq) {
            st = nx_fail(err, NX_ERR_INVALID_ARG, "chain: stage %d (%s) has %d sequences, stage 0 (%s) %d", s,
                         nx_drafter_name(stages[s]), stages[s]->n_seq, nx_drafter_name(stages[0]), stages[0]->n_seq);
            goto fail;
        }
    }
    chain_drafter *c = calloc(1, sizeof *c);
    if (!c) {
        st = nx_fail(err, NX_ERR_NOMEM, "chain: out of memory");
        goto fail;
    }
    c->base.ops = &chain_ops;
    c->base.n_seq = stages[0]->n_seq;
    c->n_stages = n_stages;
    c->min_len = min_len > 0 ? min_len : 1;
    memcpy(c->stages, stages, (size_t)n_stages * sizeof *stages);
    *out = &c->base;
    return NX_OK;
fail:
    if (stages && n_stages > 0)
        for (int s = 0; s < n_stages; s++) nx_drafter_free(stages[s]);
    return st;
}

nx_drafter *nx_drafter_chain_stage(nx_drafter *d, int s) {
    if (!d) return NULL;
    if (d->ops != &chain_ops) return s == 0 ? d : NULL;
    chain_drafter *c = (chain_drafter *)d;
    return s >= 0 && s < c->n_stages ? c->stages[s] : NULL;
}

int nx_drafter_chain_n_stages(const nx_drafter *d) {
    if (!d) return 0;
    return d->ops == &chain_ops ? ((const chain_drafter *)d)->n_stages : 1;
}
