/*
 * ctx.c — nx_ctx: creation, batch validation and ubatch scheduling, outputs, sequence ops.
 * The arithmetic is the architecture's (src/arch/); see ctx.h for the contract.
 */
#include "ctx.h"
#include <stdlib.h>
#include <string.h>
#include "arch/arch.h"

nx_ctx_params nx_ctx_default_params(void) {
    nx_ctx_params p = {.n_ctx = 0, .n_ubatch = 0, .n_seq_max = 0, .n_threads = 0,
                       .type_k = NX_CACHE_F16, .type_v = NX_CACHE_F16};
    return p;
}

static const char *const cache_names[] = {"f32", "f16", "q8_0", "q4_0", "bf16"};
static const nx_type cache_nx_types[] = {NX_TYPE_F32, NX_TYPE_F16, NX_TYPE_Q8_0, NX_TYPE_Q4_0, NX_TYPE_BF16};
#define N_CACHE_TYPES ((int)(sizeof cache_names / sizeof cache_names[0]))

static bool cache_type_ok(nx_cache_type t) { return (int)t >= 0 && (int)t < N_CACHE_TYPES; }

const char *nx_cache_type_name(nx_cache_type t) { return cache_type_ok(t) ? cache_names[t] : "?"; }

bool nx_cache_type_parse(const char *name, nx_cache_type *out) {
    for (int i = 0; name && i < N_CACHE_TYPES; i++)
        if (!strcmp(name, cache_names[i])) {
            *out = (nx_cache_type)i;
            return true;
        }
    return false;
}

nx_ctx_memory nx_ctx_memory_info(const nx_ctx *c) {
    nx_ctx_memory m = {0, 0, 0};
    if (c && c->kv) {
        m.per_pos = nx_kv_bytes_per_pos(c->kv);
        m.fixed = nx_kv_bytes_fixed(c->kv);
        m.total = nx_kv_bytes(c->kv);
    }
    return m;
}

nx_type nx_ctx_kv_type(nx_cache_type t) { return cache_type_ok(t) ? cache_nx_types[t] : NX_TYPE_F32; }

nx_status nx_ctx_check_head_dim(const nx_ctx_params *p, int head_dim, const char *what, nx_error *err) {
    const nx_type tk = nx_ctx_kv_type(p->type_k), tv = nx_ctx_kv_type(p->type_v);
    if (head_dim % nx_kv_type_block(tk) == 0 && head_dim % nx_kv_type_block(tv) == 0) return NX_OK;
    return nx_fail(err, NX_ERR_UNSUPPORTED,
                   "KV cache types K %s / V %s store blocks of 32 values, which %s's head dimension %d is not a "
                   "multiple of (use -ctk / -ctv f16)",
                   nx_cache_type_name(p->type_k), nx_cache_type_name(p->type_v), what, head_dim);
}

static void ctx_release(nx_ctx *c) {
    if (!c) return;
    if (c->model && c->model->impl && c->arch_state) c->model->impl->ctx_free(c);
    nx_kv_free(c->kv);
    nx_threadpool_free(c->tp);
    nx_matmul_scratch_free(&c->mm);
    free(c->out_idx);
    free(c->logits);
    free(c->hidden);
    free(c->order);
    free(c->grp_seq);
    free(c->grp_off);
    free(c->rec_src);
    free(c->rec_dst);
    free(c->rec_done);
    free(c->rec_log);
    free(c->b_first);
    free(c->b_last);
    free(c->b_count);
    free(c->seen);
    free(c->snap_skip);
    free(c);
}

void nx_ctx_free(nx_ctx *c) { ctx_release(c); }

nx_status nx_ctx_create(const nx_model *model, const nx_ctx_params *params, nx_ctx **out) {
    nx_error err = {0};
    if (!out) { nx_fail(&err, NX_ERR_INVALID_ARG, "nx_ctx_create: out is NULL"); return nx_error_publish(&err); }
    *out = NULL;
    if (!model) { nx_fail(&err, NX_ERR_INVALID_ARG, "nx_ctx_create: no model"); return nx_error_publish(&err); }
    if (!model->impl) {
        nx_fail(&err, NX_ERR_UNSUPPORTED, "architecture '%s' cannot run in nextn (supported: %s)", model->arch,
                nx_arch_names());
        return nx_error_publish(&err);
    }
    nx_ctx_params p = params ? *params : nx_ctx_default_params();
    if (p.n_ctx < 0 || p.n_ubatch < 0 || p.n_seq_max < 0 || p.n_threads < 0 || p.n_ctx > (1 << 24) ||
        p.n_ubatch > 65536 || p.n_seq_max > 256 || p.n_threads > 1024 ||
        !cache_type_ok(p.type_k) || !cache_type_ok(p.type_v)) {
        nx_fail(&err, NX_ERR_INVALID_ARG, "nx_ctx_create: bad parameters (n_ctx %d, n_ubatch %d, n_seq_max %d, n_threads %d)",
                p.n_ctx, p.n_ubatch, p.n_seq_max, p.n_threads);
        return nx_error_publish(&err);
    }
    if (!p.n_ctx) p.n_ctx = model->n_ctx_train > 0 && model->n_ctx_train < 4096 ? model->n_ctx_train : 4096;
    if (!p.n_ubatch) p.n_ubatch = 512;
    if (!p.n_seq_max) p.n_seq_max = 1;
    if (!p.n_threads) p.n_threads = model->params.n_threads > 0 ? model->params.n_threads : nx_cpu_physical_cores();
    nx_ctx *c = calloc(1, sizeof *c);
    if (!c) { nx_fail(&err, NX_ERR_NOMEM, "out of memory"); return nx_error_publish(&err); }
    c->model = model;
    c->params = p;
    nx_matmul_scratch_init(&c->mm);
    c->tp = nx_threadpool_create(p.n_threads, &err);
    size_t U = (size_t)p.n_ubatch, S = (size_t)p.n_seq_max;
    c->order = malloc(U * sizeof(int));
    c->grp_seq = malloc(U * sizeof(int));
    c->grp_off = malloc((U + 1) * sizeof(int));
    c->rec_src = malloc(U * sizeof(int));
    c->rec_dst = malloc(U * sizeof(int));
    c->rec_done = malloc(U * sizeof(int));
    c->rec_log = malloc(U * sizeof(bool));
    c->b_first = malloc(S * sizeof(int));
    c->b_last = malloc(S * sizeof(int));
    c->b_count = malloc(S * sizeof(int));
    c->seen = calloc(S, sizeof(int));
    c->snap_skip = calloc(S, sizeof(bool));
    if (!c->tp || !c->order || !c->grp_seq || !c->grp_off || !c->rec_src || !c->rec_dst || !c->rec_done || !c->rec_log || !c->b_first || !c->b_last ||
        !c->b_count || !c->seen || !c->snap_skip) {
        if (err.code == NX_OK) nx_fail(&err, NX_ERR_NOMEM, "out of memory");
        ctx_release(c);
        return nx_error_publish(&err);
    }
    if (model->impl->ctx_init(c, &err) != NX_OK) {
        ctx_release(c);
        return nx_error_publish(&err);
    }
    *out = c;
    return NX_OK;
}

int nx_ctx_n_ctx(const nx_ctx *c) { return c->params.n_ctx; }
int nx_ctx_n_seq_max(const nx_ctx *c) { return c->params.n_seq_max; }

/* Grow the output buffers (only when a batch needs more than any before). */
static nx_status reserve_outputs(nx_ctx *c, int n, int n_out, nx_error *err) {
    if (n > c->rows_cap) {
        int *oi = realloc(c->out_idx, (size_t)n * sizeof *oi);
        if (oi) c->out_idx = oi;
        float *h = realloc(c->hidden, (size_t)n * (size_t)c->model->n_embd * sizeof *h);
        if (h) c->hidden = h;
        if (!oi || !h) return nx_fail(err, NX_ERR_NOMEM, "cannot allocate outputs for %d rows", n);
        c->rows_cap = n;
    }
    if (n_out > c->out_cap) {
        float *l = realloc(c->logits, (size_t)n_out * (size_t)c->model->n_vocab * sizeof *l);
        if (!l) return nx_fail(err, NX_ERR_NOMEM, "cannot allocate logits for %d rows (%d x %d floats)", n_out, n_out,
                               c->model->n_vocab);
        c->logits = l;
        c->out_cap = n_out;
    }
    return NX_OK;
}

/* Check every row before anything changes: token range, sequence id, consecutive positions
 * per sequence starting at the sequence's next position or 0, context bound. */
static nx_status validate(nx_ctx *c, const nx_batch *b, nx_error *err) {
    const int S = c->params.n_seq_max, V = c->model->n_vocab, n_ctx = c->params.n_ctx;
    for (int s = 0; s < S; s++) { c->b_first[s] = -1; c->b_count[s] = 0; }
    for (int i = 0; i < b->n; i++) {
        const int s = b->seq[i], p = b->pos[i];
        if (b->tok[i] < 0 || b->tok[i] >= V)
            return nx_fail(err, NX_ERR_INVALID_ARG, "batch row %d: token %d is outside the vocabulary [0, %d)", i, b->tok[i], V);
        if (s < 0 || s >= S)
            return nx_fail(err, NX_ERR_INVALID_ARG, "batch row %d: sequence %d is outside [0, %d)", i, s, S);
        if (p < 0)
            return nx_fail(err, NX_ERR_INVALID_ARG, "batch row %d: negative position %d", i, p);
        if (c->b_first[s] < 0) {
            int next = nx_kv_seq_len(c->kv, s);
            if (p != 0 && p != next)
                return nx_fail(err, NX_ERR_INVALID_ARG, "batch row %d: sequence %d starts at position %d but holds %d "
                               "positions (continue at %d, restart at 0, or nx_seq_rm first)", i, s, p, next, next);
            c->b_first[s] = p;
        } else if (p != c->b_last[s] + 1) {
            return nx_fail(err, NX_ERR_INVALID_ARG, "batch row %d: sequence %d position %d does not follow %d", i, s, p,
                           c->b_last[s]);
        }
        c->b_last[s] = p;
        c->b_count[s]++;
    }
    for (int s = 0; s < S; s++)
        if (b->snapshots && !c->snap_skip[s] && c->b_count[s] > NX_SNAPSHOT_MAX)
            return nx_fail(err, NX_ERR_RANGE, "sequence %d: %d tokens in a snapshot batch; snapshots are kept for at most "
                           "%d tokens per sequence", s, c->b_count[s], NX_SNAPSHOT_MAX);
    for (int s = 0; s < S; s++)
        if (c->b_count[s] && c->b_last[s] >= n_ctx)
            return nx_fail(err, NX_ERR_RANGE, "sequence %d needs %d positions (this batch: %d tokens at %d..%d) but the "
                           "context holds %d", s, c->b_last[s] + 1, c->b_count[s], c->b_first[s], c->b_last[s], n_ctx);
    return NX_OK;
}

void nx_ctx_skip_snapshots(nx_ctx *c, nx_seq_id seq) {
    if (c && seq >= 0 && seq < c->params.n_seq_max) c->snap_skip[seq] = true;
}

static nx_status decode(nx_ctx *c, const nx_batch *b);

nx_status nx_decode(nx_ctx *c, const nx_batch *b) {
    nx_status st = decode(c, b);
    if (c) memset(c->snap_skip, 0, (size_t)c->params.n_seq_max * sizeof *c->snap_skip);
    return st;
}

static nx_status decode(nx_ctx *c, const nx_batch *b) {
    nx_error err = {0};
    if (!c || !b) { nx_fail(&err, NX_ERR_INVALID_ARG, "nx_decode: NULL argument"); return nx_error_publish(&err); }
    c->n_rows = 0;
    c->n_out = 0;
    if (b->n <= 0) { nx_fail(&err, NX_ERR_INVALID_ARG, "nx_decode: empty batch"); return nx_error_publish(&err); }
    if (validate(c, b, &err) != NX_OK) return nx_error_publish(&err);
    const int S = c->params.n_seq_max;
    int n_out = 0;
    for (int i = 0; i < b->n; i++) n_out += b->logits[i] ? 1 : 0;
    if (reserve_outputs(c, b->n, n_out, &err) != NX_OK) return nx_error_publish(&err);
    for (int s = 0; s < S; s++) {
        if (!c->b_count[s]) continue;
        int n_snap = b->snapshots && !c->snap_skip[s] ? c->b_count[s] : 0;
        if (n_snap > 1 && nx_kv_snap_reserve(c->kv, s, n_snap - 1, &err) != NX_OK) return nx_error_publish(&err);
    }
    for (int s = 0; s < S; s++) {
        if (!c->b_count[s]) continue;
        if (c->b_first[s] == 0) nx_kv_seq_reset(c->kv, s);
        nx_kv_snap_set(c->kv, s, c->b_first[s], b->snapshots && !c->snap_skip[s] ? c->b_count[s] : 0);
    }
    for (int i = 0, o = 0; i < b->n; i++) c->out_idx[i] = b->logits[i] ? o++ : -1;

    const int U = c->params.n_ubatch;
    nx_status st = NX_OK;
    for (int u0 = 0; u0 < b->n && st == NX_OK; u0 += U) {
        const int nu = b->n - u0 < U ? b->n - u0 : U;
        /* group rows by sequence (stable: increasing position inside a group) */
        int n_groups = 0;
        for (int r = 0; r < nu; r++) {
            int s = b->seq[u0 + r];
            if (!c->seen[s]) { c->grp_seq[n_groups] = s; c->seen[s] = ++n_groups; }
        }
        for (int g = 0; g <= n_groups; g++) c->grp_off[g] = 0;
        for (int r = 0; r < nu; r++) c->grp_off[c->seen[b->seq[u0 + r]]]++;
        for (int g = 0; g < n_groups; g++) c->grp_off[g + 1] += c->grp_off[g];
        /* grp_off[g] is now the end of group g-1 = start of group g; fill by advancing a cursor */
        for (int r = 0; r < nu; r++) {
            int g = c->seen[b->seq[u0 + r]] - 1;
            c->order[c->grp_off[g]++] = r;
        }
        for (int g = n_groups; g > 0; g--) c->grp_off[g] = c->grp_off[g - 1];
        c->grp_off[0] = 0;
        for (int r = 0; r < nu; r++) {
            int s = b->seq[u0 + r], p = b->pos[u0 + r];
            if (b->snapshots && !c->snap_skip[s]) {
                int t = p - c->b_first[s];
                c->rec_dst[r] = p == c->b_last[s] ? -1 : t;
                c->rec_src[r] = t == 0 ? -1 : t - 1;
            } else {
                c->rec_src[r] = c->rec_dst[r] = -1;
            }
        }
        for (int g = 0; g < n_groups; g++) {
            const int s = c->grp_seq[g];
            c->seen[s] = 0;
            c->rec_done[g] = b->pos[u0 + c->order[c->grp_off[g]]] - c->b_first[s];
            c->rec_log[g] = b->snapshots && !c->snap_skip[s] && c->b_count[s] > 1;
        }
        nx_ubatch ub = {
            .n = nu, .row0 = u0, .tok = b->tok + u0, .pos = b->pos + u0, .seq = b->seq + u0,
            .want_logits = b->logits + u0, .n_groups = n_groups, .grp_seq = c->grp_seq, .grp_off = c->grp_off,
            .order = c->order, .rec_src = c->rec_src, .rec_dst = c->rec_dst,
            .rec_done = c->rec_done, .rec_log = c->rec_log,
        };
        st = c->model->impl->forward(c, &ub, &err);
        if (st == NX_OK)
            for (int g = 0; g < n_groups; g++) {
                int last = c->order[c->grp_off[g + 1] - 1];
                nx_kv_seq_set_len(c->kv, c->grp_seq[g], b->pos[u0 + last] + 1);
            }
    }
    if (st != NX_OK) {
        for (int s = 0; s < S; s++)
            if (c->b_count[s]) nx_kv_seq_reset(c->kv, s);
        return nx_error_publish(&err);
    }
    for (int s = 0; s < S; s++)
        if (c->b_count[s]) nx_kv_log_commit(c->kv, s, b->snapshots && !c->snap_skip[s] ? c->b_count[s] : 0);
    c->n_rows = b->n;
    c->n_out = n_out;
    return NX_OK;
}

const float *nx_ctx_logits(const nx_ctx *c, int i) {
    if (!c || i < 0 || i >= c->n_rows || c->out_idx[i] < 0) return NULL;
    return c->logits + (size_t)c->out_idx[i] * (size_t)c->model->n_vocab;
}

const float *nx_ctx_hidden(const nx_ctx *c, int i) {
    if (!c || i < 0 || i >= c->n_rows) return NULL;
    return c->hidden + (size_t)i * (size_t)c->model->n_embd;
}

nx_pos nx_seq_pos_next(const nx_ctx *c, nx_seq_id seq) {
    if (!c || seq < 0 || seq >= c->params.n_seq_max) return -1;
    return nx_kv_seq_len(c->kv, seq);
}

nx_status nx_seq_rm(nx_ctx *c, nx_seq_id seq, nx_pos p0, nx_pos p1) {
    nx_error err = {0};
    if (!c) { nx_fail(&err, NX_ERR_INVALID_ARG, "nx_seq_rm: no context"); return nx_error_publish(&err); }
    if (nx_kv_seq_rm(c->kv, seq, p0, p1, &err) != NX_OK) return nx_error_publish(&err);
    return NX_OK;
}

nx_status nx_seq_cp(nx_ctx *c, nx_seq_id src, nx_seq_id dst, nx_pos p0, nx_pos p1) {
    nx_error err = {0};
    if (!c) { nx_fail(&err, NX_ERR_INVALID_ARG, "nx_seq_cp: no context"); return nx_error_publish(&err); }
    if (nx_kv_seq_cp(c->kv, src, dst, p0, p1, &err) != NX_OK) return nx_error_publish(&err);
    return NX_OK;
}
