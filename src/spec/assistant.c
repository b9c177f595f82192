/*
 * assistant.c — the `assistant` drafter (contract in assistant.h) over the Gemma 4 assistant draft
 * head (arch/gemma4_assistant.h): per-sequence conditioning hiddens, fused k-step drafting.
 * Never: calls a kernel (the head computes), allocates after creation, prints.
 */
#include "spec/assistant.h"

#include <stdlib.h>
#include <string.h>
#include "ctx.h"
#include "model.h"
#include "spec/draft_model.h"
#include "spec/policy.h"

/* ===== the drafter ===== */

typedef struct as_seq {
    bool has_h;                     /* h holds the conditioning hidden for position next_pos */
    nx_pos next_pos;
    float *h;                       /* [n_bb] target post-norm hidden of the last committed row */
    int n_pend;                     /* pending verify rows */
    nx_pos pend_pos0;
    float *pend;                    /* [NX_SPEC_DRAFT_CAP + 1][n_bb] */
} as_seq;

typedef struct as_drafter {
    nx_drafter base;
    nx_assistant *a;
    as_seq *s;
    /* one step's rows, n_seq at most */
    int *act;                       /* request index of each active row */
    nx_token *tok, *next;
    nx_pos *pos, *end;
    nx_seq_id *seq;
    float *prob, *hin, *hout;
    float *lg;                      /* [n_seq][V] dense logits when a request samples its drafts */
    int V;
} as_drafter;

static as_drafter *as_of(nx_drafter *d) { return (as_drafter *)d; }

static nx_status as_begin(nx_drafter *d, nx_seq_id seq, const nx_token *prompt, int n_prompt, nx_error *err) {
    (void)prompt; (void)n_prompt; (void)err;
    as_seq *s = &as_of(d)->s[seq];
    s->has_h = false;
    s->n_pend = 0;
    return NX_OK;
}

static nx_status as_process(nx_drafter *d, const nx_target_rows *rows, nx_error *err) {
    as_drafter *D = as_of(d);
    const int B = nx_assistant_n_bb(D->a);
    if (rows->n == 0) return NX_OK;
    if (!rows->hidden || rows->n_embd != B)
        return nx_fail(err, NX_ERR_INVALID_ARG, "assistant drafter: needs the target's hidden rows (n_embd %d, got %d%s)",
                       B, rows->n_embd, rows->hidden ? "" : ", none");
    if (rows->kind == NX_ROWS_PROMPT) {
        for (int r = 0; r < rows->n; r++) {   /* the last row of a sequence wins (rows are consecutive) */
            as_seq *s = &D->s[rows->seq[r]];
            memcpy(s->h, rows->hidden + (size_t)r * B, (size_t)B * sizeof(float));
            s->has_h = true;
            s->next_pos = rows->pos[r] + 1;
        }
        return NX_OK;
    }
    for (int r = 0; r < rows->n; r++) D->s[rows->seq[r]].n_pend = -1;
    for (int r = 0; r < rows->n; r++) {
        as_seq *s = &D->s[rows->seq[r]];
        if (s->n_pend < 0) {
            s->n_pend = 0;
            s->pend_pos0 = rows->pos[r];
        }
        if (s->n_pend < NX_SPEC_DRAFT_CAP + 1)
            memcpy(s->pend + (size_t)s->n_pend++ * B, rows->hidden + (size_t)r * B, (size_t)B * sizeof(float));
    }
    return NX_OK;
}

static nx_status as_accept(nx_drafter *d, nx_seq_id seq, int n_accepted, nx_error *err) {
    (void)err;
    as_drafter *D = as_of(d);
    as_seq *s = &D->s[seq];
    const int B = nx_assistant_n_bb(D->a);
    if (n_accepted >= 0 && n_accepted < s->n_pend) {
        /* the row whose logits chose the bonus token conditions the next round */
        memcpy(s->h, s->pend + (size_t)n_accepted * B, (size_t)B * sizeof(float));
        s->next_pos = s->pend_pos0 + n_accepted + 1;
        s->has_h = true;
    } else {
        s->has_h = false;   /* no verify rows seen for this step: wait for the next state */
    }
    s->n_pend = 0;
    return NX_OK;
}

static nx_status as_draft(nx_drafter *d, nx_draft_req *reqs, int n_reqs, nx_error *err) {
    as_drafter *D = as_of(d);
    nx_assistant *a = D->a;
    const int B = nx_assistant_n_bb(a);
    int n_act = 0;
    for (int i = 0; i < n_reqs; i++) {
        nx_draft_req *q = &reqs[i];
        as_seq *s = &D->s[q->seq];
        if (q->k_max <= 0 || !s->has_h || s->next_pos != q->pos || q->pos <= 0) continue;
        if (n_act >= d->n_seq) break;
        D->act[n_act] = i;
        memcpy(D->hin + (size_t)n_act * B, s->h, (size_t)B * sizeof(float));
        n_act++;
    }
    for (int step = 0; n_act > 0; step++) {
        for (int j = 0; j < n_act; j++) {
            const nx_draft_req *q = &reqs[D->act[j]];
            D->tok[j] = step == 0 ? q->id_last : q->tok[step - 1];
            D->pos[j] = nx_assistant_positions(a) == NX_ASST_POS_INCREMENT ? q->pos + step : q->pos;
            D->end[j] = q->pos;
            D->seq[j] = q->seq;
        }
        bool sampled = false;
        for (int j = 0; j < n_act; j++) sampled |= reqs[D->act[j]].sampler != NULL;
        nx_status st = nx_assistant_forward(a, n_act, D->tok, D->pos, D->seq, D->end, D->hin, D->hout,
                                            sampled ? D->lg : NULL, D->next, D->prob, err);
        if (st != NX_OK) return st;
        for (int j = 0; sampled && j < n_act; j++) {   /* sampled drafts: d ~ q = the chain over the dense logits */
            nx_draft_req *q = &reqs[D->act[j]];
            if (!q->sampler) continue;
            nx_sample_dist *qd = &q->q[q->n];
            nx_token t = 0;
            st = nx_sampler_dist(q->sampler, D->lg + (size_t)j * D->V, qd, err);
            if (st == NX_OK) st = nx_sampler_sample_dist(q->sampler, qd, &t, err);
            if (st != NX_OK) return st;
            D->next[j] = t;
            D->prob[j] = nx_sample_dist_prob(qd, t);
        }
        int m = 0;
        for (int j = 0; j < n_act; j++) {
            nx_draft_req *q = &reqs[D->act[j]];
            nx_pmin_verdict v = nx_spec_pmin_step(step, D->prob[j], q->p_min);
            bool go = v == NX_PMIN_KEEP;
            if (v != NX_PMIN_DROP_STOP) {
                q->tok[q->n] = D->next[j];
                if (q->p) q->p[q->n] = D->prob[j];
                q->n++;
                q->stage = 0;
                if (q->sampler) {
                    q->sampled = true;
                    nx_sampler_accept(q->sampler, D->next[j], NULL);
                }
            }
            /* a position increment must stay inside the context */
            if (q->n >= q->k_max || (nx_assistant_positions(a) == NX_ASST_POS_INCREMENT && q->pos + step + 1 >= nx_assistant_target_n_ctx(a)))
                go = false;
            if (go) {
                D->act[m] = D->act[j];
                memmove(D->hin + (size_t)m * B, D->hout + (size_t)j * B, (size_t)B * sizeof(float));
                m++;
            }
        }
        n_act = m;
    }
    return NX_OK;
}

static void as_free(nx_drafter *d) {
    if (!d) return;
    as_drafter *D = as_of(d);
    if (D->s)
        for (int i = 0; i < d->n_seq; i++) {
            free(D->s[i].h);
            free(D->s[i].pend);
        }
    free(D->s);
    free(D->act); free(D->tok); free(D->next); free(D->pos); free(D->end); free(D->seq); free(D->prob);
    free(D->hin); free(D->hout); free(D->lg);
    nx_assistant_free(D->a);
    free(D);
}

static const nx_drafter_ops as_ops = {
    .name = "assistant", .begin = as_begin, .process = as_process, .draft = as_draft, .accept = as_accept,
    .free = as_free,
};

nx_status nx_assistant_create(nx_ctx *target, const char *path, const nx_assistant_opts *opts, int n_seq,
                              nx_drafter **out, nx_error *err) {
    *out = NULL;
    if (!target) return nx_fail(err, NX_ERR_INVALID_ARG, "assistant drafter: no target context");
    if (n_seq < 1 || n_seq > nx_ctx_n_seq_max(target))
        return nx_fail(err, NX_ERR_INVALID_ARG, "assistant drafter: %d sequences, the target context has %d", n_seq,
                       nx_ctx_n_seq_max(target));
    nx_assistant *a = NULL;
    nx_status st = nx_assistant_load(target, path, opts, n_seq, &a, err);
    if (st != NX_OK) return st;
    /* the loader compared the sizes; the token texts too (llama.cpp's rule, draft_model.h) */
    nx_gguf *g = NULL;
    if ((st = nx_gguf_open(path, &g, err)) == NX_OK) {
        const int V = nx_model_n_vocab(target->model);
        st = nx_spec_vocab_check(target->model->gguf, V, g, V, path, err);
        nx_gguf_close(g);
    }
    if (st != NX_OK) {
        nx_assistant_free(a);
        return st;
    }
    as_drafter *D = calloc(1, sizeof *D);
    if (!D) {
        nx_assistant_free(a);
        return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    }
    D->base.ops = &as_ops;
    D->base.n_seq = n_seq;
    D->a = a;
    const size_t N = (size_t)n_seq, B = (size_t)nx_assistant_n_bb(a);
    D->s = calloc(N, sizeof *D->s);
    D->act = malloc(N * sizeof *D->act);
    D->tok = malloc(N * sizeof *D->tok);
    D->next = malloc(N * sizeof *D->next);
    D->pos = malloc(N * sizeof *D->pos);
    D->end = malloc(N * sizeof *D->end);
    D->seq = malloc(N * sizeof *D->seq);
    D->prob = malloc(N * sizeof *D->prob);
    D->hin = malloc(N * B * sizeof(float));
    D->hout = malloc(N * B * sizeof(float));
    D->V = nx_model_n_vocab(target->model);
    D->lg = malloc(N * (size_t)D->V * sizeof(float));
    bool ok = D->lg && D->s && D->act && D->tok && D->next && D->pos && D->end && D->seq && D->prob && D->hin && D->hout;
    for (size_t i = 0; ok && i < N; i++) {
        D->s[i].h = malloc(B * sizeof(float));
        D->s[i].pend = malloc((size_t)(NX_SPEC_DRAFT_CAP + 1) * B * sizeof(float));
        ok = D->s[i].h && D->s[i].pend;
    }
    if (!ok) {
        as_free(&D->base);
        return nx_fail(err, NX_ERR_NOMEM, "cannot allocate the assistant drafter for %d sequences", n_seq);
    }
    *out = &D->base;
    return NX_OK;
}

nx_assistant *nx_assistant_drafter_model(nx_drafter *d) {
    return d && d->ops == &as_ops ? as_of(d)->a : NULL;
}
