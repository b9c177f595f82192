/*
 * drafter.c — the checked entry points of the drafter interface (drafter.h).
 *
 * Owns the argument checks every drafter would otherwise repeat, so an engine wiring bug (a bad
 * sequence id, a missing output buffer, a row from an unknown sequence) fails here with the
 * drafter's name instead of deep inside one. Never changes a drafter's state when a check fails.
 */
#include "spec/drafter.h"

#include <stddef.h>

const char *nx_drafter_name(const nx_drafter *d) {
    return d && d->ops && d->ops->name ? d->ops->name : "(none)";
}

static nx_status check_seq(const nx_drafter *d, nx_seq_id seq, const char *what, nx_error *err) {
    if (seq < 0 || seq >= d->n_seq)
        return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: %s: sequence %d out of range (0..%d)",
                       nx_drafter_name(d), what, (int)seq, d->n_seq - 1);
    return NX_OK;
}

nx_status nx_drafter_begin(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, nx_error *err) {
    if (!d || !d->ops) return nx_fail(err, NX_ERR_INVALID_ARG, "drafter begin: no drafter");
    nx_status st = check_seq(d, seq, "begin", err);
    if (st) return st;
    if (n_prompt < 0 || (n_prompt > 0 && !prompt))
        return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: begin: bad prompt (%d tokens%s)",
                       nx_drafter_name(d), n_prompt, prompt ? "" : ", NULL");
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0)
            return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: begin: prompt token %d is negative (%d)",
                           nx_drafter_name(d), i, (int)prompt[i]);
    return d->ops->begin(d, seq, prompt, n_prompt, err);
}

nx_status nx_drafter_process(nx_drafter *d, const nx_target_rows *rows, nx_error *err) {
    if (!d || !d->ops || !rows) return nx_fail(err, NX_ERR_INVALID_ARG, "drafter process: no drafter or rows");
    if (rows->kind != NX_ROWS_PROMPT && rows->kind != NX_ROWS_VERIFY)
        return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: process: bad rows kind %d", nx_drafter_name(d), (int)rows->kind);
    if (rows->n < 0 || (rows->n > 0 && (!rows->tok || !rows->pos || !rows->seq)))
        return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: process: bad rows (n = %d)", nx_drafter_name(d), rows->n);
    if (rows->hidden && rows->n_embd <= 0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: process: hidden rows without n_embd", nx_drafter_name(d));
    for (int i = 0; i < rows->n; i++) {
        nx_status st = check_seq(d, rows->seq[i], "process", err);
        if (st) return st;
        if (rows->tok[i] < 0 || rows->pos[i] < 0)
            return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: process: row %d has token %d at position %d",
                           nx_drafter_name(d), i, (int)rows->tok[i], (int)rows->pos[i]);
    }
    return d->ops->process(d, rows, err);
}

nx_status nx_drafter_draft(nx_drafter *d, nx_draft_req *reqs, int n_reqs, nx_error *err) {
    if (!d || !d->ops) return nx_fail(err, NX_ERR_INVALID_ARG, "drafter draft: no drafter");
    if (n_reqs < 0 || (n_reqs > 0 && !reqs))
        return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: draft: bad request list (%d)", nx_drafter_name(d), n_reqs);
    for (int i = 0; i < n_reqs; i++) {
        nx_draft_req *r = &reqs[i];
        nx_status st = check_seq(d, r->seq, "draft", err);
        if (st) return st;
        for (int j = 0; j < i; j++)
            if (reqs[j].seq == r->seq)
                return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: draft: sequence %d asked twice",
                               nx_drafter_name(d), (int)r->seq);
        if (r->k_max < 0 || r->k_max > NX_SPEC_DRAFT_CAP)
            return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: draft: sequence %d asks for %d drafts (0..%d)",
                           nx_drafter_name(d), (int)r->seq, r->k_max, NX_SPEC_DRAFT_CAP);
        if (r->k_max > 0 && !r->tok)
            return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: draft: sequence %d has no output buffer",
                           nx_drafter_name(d), (int)r->seq);
        if (r->id_last < 0 || r->pos < 0)
            return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: draft: sequence %d: id_last %d at position %d",
                           nx_drafter_name(d), (int)r->seq, (int)r->id_last, (int)r->pos);
        if (!(r->p_min >= 0.0f && r->p_min <= 1.0f))
            return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: draft: p_min %g not in [0, 1]",
                           nx_drafter_name(d), (double)r->p_min);
    }
    for (int i = 0; i < n_reqs; i++) {
        reqs[i].n = 0;
        reqs[i].stage = -1;
        reqs[i].sampled = false;
        if (reqs[i].sampler && reqs[i].k_max > 0 && !reqs[i].q)
            return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: draft: sequence %d samples without q buffers",
                           nx_drafter_name(d), (int)reqs[i].seq);
    }
    return n_reqs ? d->ops->draft(d, reqs, n_reqs, err) : NX_OK;
}

nx_status nx_drafter_accept(nx_drafter *d, nx_seq_id seq, int n_accepted, nx_error *err) {
    if (!d || !d->ops) return nx_fail(err, NX_ERR_INVALID_ARG, "drafter accept: no drafter");
    nx_status st = check_seq(d, seq, "accept", err);
    if (st) return st;
    if (n_accepted < 0 || n_accepted > NX_SPEC_DRAFT_CAP)
        return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: accept: sequence %d: %d accepted (0..%d)",
                       nx_drafter_name(d), (int)seq, n_accepted, NX_SPEC_DRAFT_CAP);
    return d->ops->accept(d, seq, n_accepted, err);
}

nx_status nx_drafter_sync(nx_drafter *d, nx_error *err) {
    if (!d || !d->ops) return nx_fail(err, NX_ERR_INVALID_ARG, "drafter sync: no drafter");
    return d->ops->sync ? d->ops->sync(d, err) : NX_OK;
}

nx_status nx_drafter_begin_keep(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, int keep,
                                const float *hidden_prev, nx_error *err) {
    if (!d || !d->ops) return nx_fail(err, NX_ERR_INVALID_ARG, "drafter begin: no drafter");
    if (keep == 0 || !d->ops->begin_keep) return nx_drafter_begin(d, seq, prompt, n_prompt, err);
    if (keep < 0 || keep >= n_prompt)
        return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: begin: keeps %d positions of a %d-token prompt",
                       nx_drafter_name(d), keep, n_prompt);
    nx_status st = check_seq(d, seq, "begin", err);
    if (st) return st;
    if (!prompt) return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: begin: no prompt", nx_drafter_name(d));
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0)
            return nx_fail(err, NX_ERR_INVALID_ARG, "drafter %s: begin: prompt token %d is negative (%d)",
                           nx_drafter_name(d), i, (int)prompt[i]);
    return d->ops->begin_keep(d, seq, prompt, n_prompt, keep, hidden_prev, err);
}

bool nx_drafter_keeps_positions(const nx_drafter *d) {
    if (!d || !d->ops) return false;
    if (nx_drafter_chain_stage((nx_drafter *)d, 0) == d) return d->ops->begin_keep != NULL && !d->ops->keep_any;   /* not a chain */
    for (int s = 0; s < nx_drafter_chain_n_stages(d); s++)
        if (nx_drafter_keeps_positions(nx_drafter_chain_stage((nx_drafter *)d, s))) return true;
    return false;
}

void nx_drafter_free(nx_drafter *d) {
    if (d && d->ops && d->ops->free) d->ops->free(d);
}
