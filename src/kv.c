/*
 * kv.c — attention KV cache and recurrent state per sequence (see kv.h for the contract).
 *
 * Layout: one calloc per sequence for the attention rows ([layer][K: head][row][V: head][row],
 * each head's row k_width / heads values of the cache type; n_ctx rows, or `cells` for a ring
 * layer: head-major, so attention streams one head's rows contiguously), one per
 * sequence for the positions held by ring rows ([ring layer][cell], -1 = empty), one per
 * sequence for the live recurrent state ([layer][conv | ssm] floats) and one growable block
 * per sequence for snapshot slots (each slot is a copy of the live recurrent layout).
 * Slots are separate buffers behind pointers: rewinding to a snapshot swaps that slot's
 * buffer with the live one instead of copying ~the whole recurrent state (tens of MB on real
 * shapes) on every partly accepted verify.
 */
#include "kv.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "core/fp16.h"
#include "quant/quant.h"

/* Huge pages for a big calloc'd block (advice only): a decode at depth streams every head's
 * rows once per token, and with 4 KB pages each 4 KB of them is a TLB miss and a stop for the
 * hardware prefetchers. Pages are still only allocated when first written (2 MB at a time). */
static void advise_huge(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    if (!p || bytes < 2 * huge) return;
    const uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p; (void)bytes;
#endif
}

/* A recurrent-state buffer: calloc'd (untouched pages stay unallocated), used from a 64-byte
 * boundary so the kernels' state rows start on cache lines. */
typedef struct rec_buf {
    void *mem;
    float *f;
} rec_buf;

static bool rec_buf_alloc(rec_buf *b, int64_t floats) {
    b->mem = calloc(1, (size_t)floats * sizeof(float) + 64);
    b->f = b->mem ? (float *)(((uintptr_t)b->mem + 63) & ~(uintptr_t)63) : NULL;
    return b->mem != NULL;
}

typedef struct kv_seq {
    uint8_t *attn;      /* all attention layers */
    int32_t *cell_pos;  /* ring layers: position held by each cell (-1: none) */
    rec_buf rec;        /* live recurrent state, rec_size floats */
    rec_buf *snap;      /* snap_cap slots of rec_size floats each, separately allocated */
    int snap_cap;
    int snap_pos0, snap_n;  /* tokens pos0..pos0+n-1 have states: slots 0..n-2 and the live one */
    float *log[2];      /* deferred: replay logs of log_cap tokens, [cur] = the last snapshot batch's */
    int log_cap, log_cur, pend;
    int len;
} kv_seq;

struct nx_kv {
    int n_seq, n_ctx, n_attn, n_rec;
    nx_type tk, tv;
    int64_t *kw, *vw;       /* values per row, per attention layer */
    size_t *krb, *vrb;      /* bytes per row (all heads), per attention layer */
    int *heads;             /* heads per row, per attention layer (each head's rows a plane) */
    size_t *k_off, *v_off;  /* byte offsets of a layer's K / V block in kv_seq.attn */
    size_t attn_size;
    int *cells;             /* rows per attention layer (n_ctx, or the ring size) */
    int *ring;              /* per attention layer: ring size, 0 = plain cache */
    int *window;            /* per ring layer: positions a query sees */
    size_t *cp_off;         /* per ring layer: offset in kv_seq.cell_pos */
    size_t n_cell_pos;
    int64_t *conv_off, *ssm_off, *conv_n, *ssm_n;  /* float offsets / sizes per recurrent layer */
    int64_t rec_size;
    /* deferred SSM: per recurrent layer the log offset; log floats per token; conv-only slots */
    bool deferred;
    int64_t *log_off, log_tok, *conv_soff, conv_slot;
    void (*apply)(void *user, const struct nx_kv *kv, int seq, float *rec, int n);
    void *apply_user;
    kv_seq *seqs;
};

bool nx_kv_type_ok(nx_type t) {
    return t == NX_TYPE_F32 || t == NX_TYPE_F16 || t == NX_TYPE_BF16 || t == NX_TYPE_Q8_0 || t == NX_TYPE_Q4_0;
}

int nx_kv_type_block(nx_type t) { return t == NX_TYPE_Q8_0 || t == NX_TYPE_Q4_0 ? 32 : 1; }

size_t nx_kv_type_bytes(nx_type t, int64_t n) {
    switch (t) {
    case NX_TYPE_F32: return (size_t)n * 4;
    case NX_TYPE_F16:
    case NX_TYPE_BF16: return (size_t)n * 2;
    case NX_TYPE_Q8_0: return (size_t)(n / NX_QK8_0) * sizeof(nx_block_q8_0);
    case NX_TYPE_Q4_0: return (size_t)(n / NX_QK4_0) * sizeof(nx_block_q4_0);
    default: return 0;
    }
}

const float *nx_kv_to_f32(nx_type t, const void *p, int64_t n, float *tmp) {
    switch (t) {
    case NX_TYPE_F32: return p;
    case NX_TYPE_F16: nx_dequantize_row_f16(p, tmp, n); break;
    case NX_TYPE_BF16: nx_dequantize_row_bf16(p, tmp, n); break;
    case NX_TYPE_Q8_0: nx_dequantize_row_q8_0(p, tmp, n); break;
    case NX_TYPE_Q4_0: nx_dequantize_row_q4_0(p, tmp, n); break;
    default: break;   /* nx_kv_create admits no other type */
    }
    return tmp;
}

nx_status nx_kv_create(const nx_kv_config *c, nx_kv **out, nx_error *err) {
    *out = NULL;
    if (c->n_seq <= 0 || c->n_seq > 4096 || c->n_ctx <= 0 || c->n_attn < 0 || c->n_rec < 0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "kv: bad config (n_seq %d, n_ctx %d, %d attention / %d recurrent layers)",
                       c->n_seq, c->n_ctx, c->n_attn, c->n_rec);
    if (!nx_kv_type_ok(c->type_k) || !nx_kv_type_ok(c->type_v))
        return nx_fail(err, NX_ERR_UNSUPPORTED, "kv: cache types must be f32, f16, bf16, q8_0 or q4_0 (got K %s, V %s)",
                       nx_type_name(c->type_k), nx_type_name(c->type_v));
    nx_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return nx_fail(err, NX_ERR_NOMEM, "kv: out of memory");
    kv->n_seq = c->n_seq;
    kv->n_ctx = c->n_ctx;
    kv->n_attn = c->n_attn;
    kv->n_rec = c->n_rec;
    kv->tk = c->type_k;
    kv->tv = c->type_v;
    int na = c->n_attn ? c->n_attn : 1, nr = c->n_rec ? c->n_rec : 1;
    kv->kw = calloc((size_t)na, sizeof *kv->kw);
    kv->vw = calloc((size_t)na, sizeof *kv->vw);
    kv->krb = calloc((size_t)na, sizeof *kv->krb);
    kv->vrb = calloc((size_t)na, sizeof *kv->vrb);
    kv->k_off = calloc((size_t)na, sizeof *kv->k_off);
    kv->v_off = calloc((size_t)na, sizeof *kv->v_off);
    kv->cells = calloc((size_t)na, sizeof *kv->cells);
    kv->heads = calloc((size_t)na, sizeof *kv->heads);
    kv->ring = calloc((size_t)na, sizeof *kv->ring);
    kv->window = calloc((size_t)na, sizeof *kv->window);
    kv->cp_off = calloc((size_t)na, sizeof *kv->cp_off);
    kv->conv_off = calloc((size_t)nr, sizeof *kv->conv_off);
    kv->ssm_off = calloc((size_t)nr, sizeof *kv->ssm_off);
    kv->conv_n = calloc((size_t)nr, sizeof *kv->conv_n);
    kv->ssm_n = calloc((size_t)nr, sizeof *kv->ssm_n);
    kv->log_off = calloc((size_t)nr, sizeof *kv->log_off);
    kv->conv_soff = calloc((size_t)nr, sizeof *kv->conv_soff);
    kv->seqs = calloc((size_t)c->n_seq, sizeof *kv->seqs);
    if (!kv->kw || !kv->vw || !kv->krb || !kv->vrb || !kv->k_off || !kv->v_off || !kv->cells || !kv->heads || !kv->ring || !kv->window || !kv->cp_off ||
        !kv->conv_off || !kv->ssm_off || !kv->conv_n || !kv->log_off || !kv->conv_soff ||
        !kv->ssm_n || !kv->seqs) {
        nx_kv_free(kv);
        return nx_fail(err, NX_ERR_NOMEM, "kv: out of memory");
    }
    /* sizes, with overflow guards: a row is at most 2^24 values, the context at most 2^24 */
    size_t off = 0;
    for (int l = 0; l < c->n_attn; l++) {
        if (c->k_width[l] <= 0 || c->v_width[l] <= 0 || c->k_width[l] > (1 << 24) || c->v_width[l] > (1 << 24) ||
            c->n_ctx > (1 << 24)) {
            nx_kv_free(kv);
            return nx_fail(err, NX_ERR_INVALID_ARG, "kv: attention layer %d: bad row width %lld / %lld", l,
                           (long long)c->k_width[l], (long long)c->v_width[l]);
        }
        const int bk = nx_kv_type_block(c->type_k), bv = nx_kv_type_block(c->type_v);
        const int nh = c->heads && c->heads[l] > 0 ? c->heads[l] : 1;
        if (nh > 4096 || c->k_width[l] % nh != 0 || c->v_width[l] % nh != 0) {
            nx_kv_free(kv);
            return nx_fail(err, NX_ERR_INVALID_ARG, "kv: attention layer %d: rows of %lld / %lld values do not split "
                           "into %d heads", l, (long long)c->k_width[l], (long long)c->v_width[l], nh);
        }
        kv->heads[l] = nh;
        if ((c->k_width[l] / nh) % bk != 0 || (c->v_width[l] / nh) % bv != 0) {
            nx_kv_free(kv);
            return nx_fail(err, NX_ERR_UNSUPPORTED,
                           "kv: attention layer %d: K / V rows of %lld / %lld values cannot be stored as %s / %s "
                           "(blocks of %d / %d values per head)", l, (long long)c->k_width[l], (long long)c->v_width[l],
                           nx_type_name(c->type_k), nx_type_name(c->type_v), bk, bv);
        }
        int ring = c->ring_cells ? c->ring_cells[l] : 0;
        if (ring < 0 || (ring > 0 && (!c->window || c->window[l] < 1 || c->window[l] > ring))) {
            nx_kv_free(kv);
            return nx_fail(err, NX_ERR_INVALID_ARG, "kv: attention layer %d: bad ring of %d cells for a window of %d",
                           l, ring, c->window ? c->window[l] : 0);
        }
        if (ring >= c->n_ctx) ring = 0;   /* a ring as large as the context is a plain cache */
        kv->ring[l] = ring;
        kv->cells[l] = ring ? ring : c->n_ctx;
        if (ring) {
            kv->window[l] = c->window[l];
            kv->cp_off[l] = kv->n_cell_pos;
            kv->n_cell_pos += (size_t)ring;
        }
        kv->kw[l] = c->k_width[l];
        kv->vw[l] = c->v_width[l];
        kv->krb[l] = nx_kv_type_bytes(c->type_k, c->k_width[l]);
        kv->vrb[l] = nx_kv_type_bytes(c->type_v, c->v_width[l]);
        kv->k_off[l] = off;
        off += (size_t)kv->cells[l] * kv->krb[l];
        kv->v_off[l] = off;
        off += (size_t)kv->cells[l] * kv->vrb[l];
    }
    kv->attn_size = off;
    int64_t roff = 0;
    for (int l = 0; l < c->n_rec; l++) {
        if (c->conv_size[l] < 0 || c->ssm_size[l] < 0 || c->conv_size[l] > (1ll << 32) || c->ssm_size[l] > (1ll << 32)) {
            nx_kv_free(kv);
            return nx_fail(err, NX_ERR_INVALID_ARG, "kv: recurrent layer %d: bad state size", l);
        }
        kv->conv_off[l] = roff;
        kv->conv_n[l] = c->conv_size[l];
        roff += c->conv_size[l];
        kv->ssm_off[l] = roff;
        kv->ssm_n[l] = c->ssm_size[l];
        roff += c->ssm_size[l];
    }
    kv->rec_size = roff;
    if (c->log_size && c->n_rec > 0) {
        if (!c->apply) {
            nx_kv_free(kv);
            return nx_fail(err, NX_ERR_INVALID_ARG, "kv: a deferred-SSM config needs an apply function");
        }
        kv->deferred = true;
        kv->apply = c->apply;
        kv->apply_user = c->apply_user;
        for (int l = 0; l < c->n_rec; l++) {
            if (c->log_size[l] < 0 || c->log_size[l] > (1ll << 28)) {
                nx_kv_free(kv);
                return nx_fail(err, NX_ERR_INVALID_ARG, "kv: recurrent layer %d: bad log size", l);
            }
            kv->log_off[l] = kv->log_tok;
            kv->log_tok += c->log_size[l];
            kv->conv_soff[l] = kv->conv_slot;
            kv->conv_slot += c->conv_size[l];
        }
    }
    for (int s = 0; s < c->n_seq; s++) {
        kv_seq *q = &kv->seqs[s];
        q->attn = kv->attn_size ? calloc(1, kv->attn_size) : NULL;
        advise_huge(q->attn, kv->attn_size);
        if (kv->rec_size) rec_buf_alloc(&q->rec, kv->rec_size);
        q->cell_pos = kv->n_cell_pos ? malloc(kv->n_cell_pos * sizeof(int32_t)) : NULL;
        if (q->cell_pos) memset(q->cell_pos, 0xff, kv->n_cell_pos * sizeof(int32_t));   /* -1: empty */
        if ((kv->attn_size && !q->attn) || (kv->rec_size && !q->rec.mem) || (kv->n_cell_pos && !q->cell_pos)) {
            nx_kv_free(kv);
            return nx_fail(err, NX_ERR_NOMEM, "kv: cannot allocate the cache for %d sequences x %d positions",
                           c->n_seq, c->n_ctx);
        }
    }
    *out = kv;
    return NX_OK;
}

void nx_kv_free(nx_kv *kv) {
    if (!kv) return;
    if (kv->seqs)
        for (int s = 0; s < kv->n_seq; s++) {
            free(kv->seqs[s].attn);
            free(kv->seqs[s].rec.mem);
            for (int i = 0; i < kv->seqs[s].snap_cap; i++) free(kv->seqs[s].snap[i].mem);
            free(kv->seqs[s].snap);
            free(kv->seqs[s].log[0]);
            free(kv->seqs[s].log[1]);
            free(kv->seqs[s].cell_pos);
        }
    free(kv->seqs);
    free(kv->log_off);
    free(kv->conv_soff);
    free(kv->kw);
    free(kv->vw);
    free(kv->krb);
    free(kv->vrb);
    free(kv->k_off);
    free(kv->v_off);
    free(kv->cells);
    free(kv->heads);
    free(kv->ring);
    free(kv->window);
    free(kv->cp_off);
    free(kv->conv_off);
    free(kv->ssm_off);
    free(kv->conv_n);
    free(kv->ssm_n);
    free(kv);
}

int nx_kv_n_seq(const nx_kv *kv) { return kv->n_seq; }
int nx_kv_n_ctx(const nx_kv *kv) { return kv->n_ctx; }
int nx_kv_n_rec(const nx_kv *kv) { return kv->n_rec; }
nx_type nx_kv_type_k(const nx_kv *kv) { return kv->tk; }
nx_type nx_kv_type_v(const nx_kv *kv) { return kv->tv; }
size_t nx_kv_bytes(const nx_kv *kv) {
    return (kv->attn_size + (size_t)kv->rec_size * sizeof(float) + kv->n_cell_pos * sizeof(int32_t)) *
           (size_t)kv->n_seq;
}

size_t nx_kv_bytes_per_pos(const nx_kv *kv) {
    size_t b = 0;
    for (int l = 0; l < kv->n_attn; l++)
        if (!kv->ring[l]) b += kv->krb[l] + kv->vrb[l];
    return b;
}

size_t nx_kv_bytes_fixed(const nx_kv *kv) {
    size_t b = (size_t)kv->rec_size * sizeof(float) + kv->n_cell_pos * sizeof(int32_t);
    for (int l = 0; l < kv->n_attn; l++)
        if (kv->ring[l]) b += (size_t)kv->ring[l] * (kv->krb[l] + kv->vrb[l]);
    return b;
}

size_t nx_kv_row_bytes(const nx_kv *kv, int l, bool v) { return v ? kv->vrb[l] : kv->krb[l]; }

/* ---- attention rows ---- */

/* The typed reference quantizers: llama.cpp's bytes for finite input, no UB (and no rejection:
 * a decode must not fail here) for NaN / Inf. */
static void put_row(void *dst, nx_type t, const float *src, int64_t n) {
    switch (t) {
    case NX_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case NX_TYPE_F16: nx_quantize_row_f16_ref(src, dst, n); break;
    case NX_TYPE_BF16: nx_quantize_row_bf16_ref(src, dst, n); break;
    case NX_TYPE_Q8_0: nx_quantize_row_q8_0_ref(src, dst, n); break;
    case NX_TYPE_Q4_0: nx_quantize_row_q4_0_ref(src, dst, n); break;
    default: break;
    }
}

int nx_kv_cells(const nx_kv *kv, int l) { return kv->cells[l]; }
int nx_kv_slot(const nx_kv *kv, int l, int pos) { return nx_kv_slot_of(kv->cells[l], pos); }

/* Row of head h at position pos: heads are planes of `cells` rows each. */
static inline uint8_t *head_row(const nx_kv *kv, int seq, int l, int pos, int h, bool v) {
    const size_t hb = (v ? kv->vrb[l] : kv->krb[l]) / (size_t)kv->heads[l];
    return kv->seqs[seq].attn + (v ? kv->v_off[l] : kv->k_off[l]) +
           ((size_t)h * (size_t)kv->cells[l] + (size_t)nx_kv_slot_of(kv->cells[l], pos)) * hb;
}

static inline void note_cell(nx_kv *kv, int seq, int l, int pos) {
    if (kv->ring[l]) kv->seqs[seq].cell_pos[kv->cp_off[l] + (size_t)(pos % kv->ring[l])] = pos;
}

static void put(nx_kv *kv, int seq, int l, int pos, const float *src, bool v) {
    const int nh = kv->heads[l];
    const int64_t hw = (v ? kv->vw[l] : kv->kw[l]) / nh;
    for (int h = 0; h < nh; h++) put_row(head_row(kv, seq, l, pos, h, v), v ? kv->tv : kv->tk, src + h * hw, hw);
    note_cell(kv, seq, l, pos);
}

void nx_kv_put_k(nx_kv *kv, int seq, int l, int pos, const float *src) { put(kv, seq, l, pos, src, false); }
void nx_kv_put_v(nx_kv *kv, int seq, int l, int pos, const float *src) { put(kv, seq, l, pos, src, true); }

static const float *get(const nx_kv *kv, int seq, int l, int pos, float *tmp, bool v) {
    const int nh = kv->heads[l];
    const nx_type t = v ? kv->tv : kv->tk;
    const int64_t hw = (v ? kv->vw[l] : kv->kw[l]) / nh;
    if (nh == 1) return nx_kv_to_f32(t, head_row(kv, seq, l, pos, 0, v), hw, tmp);
    for (int h = 0; h < nh; h++) {
        const float *r = nx_kv_to_f32(t, head_row(kv, seq, l, pos, h, v), hw, tmp + h * hw);
        if (r != tmp + h * hw) memcpy(tmp + h * hw, r, (size_t)hw * sizeof(float));
    }
    return tmp;
}

const float *nx_kv_get_k(const nx_kv *kv, int seq, int l, int pos, float *tmp) { return get(kv, seq, l, pos, tmp, false); }
const float *nx_kv_get_v(const nx_kv *kv, int seq, int l, int pos, float *tmp) { return get(kv, seq, l, pos, tmp, true); }

const void *nx_kv_k_base(const nx_kv *kv, int seq, int l) { return kv->seqs[seq].attn + kv->k_off[l]; }
const void *nx_kv_v_base(const nx_kv *kv, int seq, int l) { return kv->seqs[seq].attn + kv->v_off[l]; }
int nx_kv_heads(const nx_kv *kv, int l) { return kv->heads[l]; }
const void *nx_kv_head(const nx_kv *kv, int seq, int l, int h, bool v) { return head_row(kv, seq, l, 0, h, v); }

int nx_kv_seq_len(const nx_kv *kv, int seq) { return kv->seqs[seq].len; }
void nx_kv_seq_set_len(nx_kv *kv, int seq, int len) { kv->seqs[seq].len = len; }

/* ---- recurrent state ---- */

static float *rec_base(nx_kv *kv, int seq, int slot) {
    kv_seq *q = &kv->seqs[seq];
    return slot < 0 ? q->rec.f : q->snap[slot].f;
}

float *nx_kv_conv(nx_kv *kv, int seq, int rl, int slot) {
    if (kv->deferred && slot >= 0) return kv->seqs[seq].snap[slot].f + kv->conv_soff[rl];
    return rec_base(kv, seq, slot) + kv->conv_off[rl];
}
float *nx_kv_ssm(nx_kv *kv, int seq, int rl, int slot) {
    if (kv->deferred && slot >= 0) return NULL;
    return rec_base(kv, seq, slot) + kv->ssm_off[rl];
}

bool nx_kv_deferred(const nx_kv *kv) { return kv->deferred; }
int64_t nx_kv_ssm_offset(const nx_kv *kv, int rl) { return kv->ssm_off[rl]; }
int nx_kv_pending(const nx_kv *kv, int seq) { return kv->deferred ? kv->seqs[seq].pend : 0; }
const float *nx_kv_log_prev(const nx_kv *kv, int seq, int rl, int t) {
    const kv_seq *q = &kv->seqs[seq];
    return q->log[q->log_cur] + (size_t)t * (size_t)kv->log_tok + (size_t)kv->log_off[rl];
}
float *nx_kv_log_next(nx_kv *kv, int seq, int rl, int t) {
    kv_seq *q = &kv->seqs[seq];
    return q->log[1 - q->log_cur] + (size_t)t * (size_t)kv->log_tok + (size_t)kv->log_off[rl];
}
void nx_kv_log_commit(nx_kv *kv, int seq, int n) {
    if (!kv->deferred) return;
    kv_seq *q = &kv->seqs[seq];
    if (n > 1) {
        q->log_cur = 1 - q->log_cur;
        q->pend = n;
    } else {
        q->pend = 0;
    }
}

/* rec (live layout) := seq's whole state after the first `pend` logged tokens of its last
 * snapshot batch (deferred) with conv parts from slot `cslot` (>= 0) or live. */
static void rec_materialize(const nx_kv *kv, int seq, int cslot, int pend, float *rec) {
    const kv_seq *q = &kv->seqs[seq];
    if (rec != q->rec.f) memcpy(rec, q->rec.f, (size_t)kv->rec_size * sizeof(float));
    if (cslot >= 0)
        for (int l = 0; l < kv->n_rec; l++)
            memcpy(rec + kv->conv_off[l], q->snap[cslot].f + kv->conv_soff[l], (size_t)kv->conv_n[l] * sizeof(float));
    if (pend > 0) kv->apply(kv->apply_user, kv, seq, rec, pend);
}

nx_status nx_kv_snap_reserve(nx_kv *kv, int seq, int n_slots, nx_error *err) {
    kv_seq *q = &kv->seqs[seq];
    if ((n_slots <= q->snap_cap && (!kv->deferred || n_slots + 1 <= q->log_cap)) || kv->rec_size == 0) return NX_OK;
    if (kv->deferred && n_slots + 1 > q->log_cap) {
        /* both logs grow together; prev's pending entries are kept */
        for (int i = 0; i < 2; i++) {
            float *l = realloc(q->log[i], (size_t)(n_slots + 1) * (size_t)kv->log_tok * sizeof(float));
            if (!l) goto nomem;
            q->log[i] = l;
        }
        q->log_cap = n_slots + 1;
    }
    const int64_t slot_floats = kv->deferred ? kv->conv_slot : kv->rec_size;
    rec_buf *p = realloc(q->snap, (size_t)n_slots * sizeof *p);
    if (!p) goto nomem;
    q->snap = p;
    for (; q->snap_cap < n_slots; q->snap_cap++) {
        /* written now, so the pages are faulted in here and not in a request's first verify
         * rounds (first-touch faults of tens of MB showed up as ~16% of a short benchmark) */
        rec_buf *b = &q->snap[q->snap_cap];
        if (!rec_buf_alloc(b, slot_floats)) goto nomem;
        memset(b->f, 0, (size_t)slot_floats * sizeof(float));
    }
    return NX_OK;
nomem:
    return nx_fail(err, NX_ERR_NOMEM, "kv: cannot allocate %d recurrent snapshots for sequence %d (%.1f MiB each)",
                   n_slots, seq, (double)kv->rec_size * 4.0 / 1048576.0);
}

void nx_kv_snap_set(nx_kv *kv, int seq, int pos0, int n) {
    kv->seqs[seq].snap_pos0 = pos0;
    kv->seqs[seq].snap_n = n;
}

/* ---- sequence operations ---- */

void nx_kv_seq_reset(nx_kv *kv, int seq) {
    kv_seq *q = &kv->seqs[seq];
    q->len = 0;
    q->snap_n = 0;
    q->pend = 0;
    if (kv->rec_size) memset(q->rec.f, 0, (size_t)kv->rec_size * sizeof(float));
    if (kv->n_cell_pos) memset(q->cell_pos, 0xff, kv->n_cell_pos * sizeof(int32_t));
}

/* Can the first n positions of seq stand as the whole sequence? Every ring must still hold
 * the window before n (positions n-window+1 .. n-1), which the next query at n reads. */
static nx_status ring_check(const nx_kv *kv, int seq, int n, const char *what, nx_error *err) {
    const kv_seq *q = &kv->seqs[seq];
    for (int l = 0; l < kv->n_attn; l++) {
        if (!kv->ring[l]) continue;
        const int32_t *cp = q->cell_pos + kv->cp_off[l];
        int lo = n - kv->window[l] + 1;
        for (int p = lo < 0 ? 0 : lo; p < n; p++)
            if (cp[p % kv->ring[l]] != p)
                return nx_fail(err, NX_ERR_UNSUPPORTED,
                               "kv: sequence %d: cannot %s %d positions: sliding-window layer %d keeps a ring of %d "
                               "cells and position %d (in the window of %d before the new end) was overwritten",
                               seq, what, n, l, kv->ring[l], p, kv->window[l]);
    }
    return NX_OK;
}

/* Where the recurrent state after the first n positions of seq lives: -1 live, >= 0 a slot,
 * -2 not available. */
static int rec_slot_for(const nx_kv *kv, int seq, int n) {
    const kv_seq *q = &kv->seqs[seq];
    if (n == q->len) return -1;
    int t = n - 1 - q->snap_pos0;
    if (q->snap_n > 0 && t >= 0 && t < q->snap_n - 1) return t;
    return -2;
}

static nx_status check_seq(const nx_kv *kv, int seq, nx_error *err) {
    if (seq < 0 || seq >= kv->n_seq)
        return nx_fail(err, NX_ERR_INVALID_ARG, "kv: sequence %d out of range [0, %d)", seq, kv->n_seq);
    return NX_OK;
}

nx_status nx_kv_seq_rm(nx_kv *kv, int seq, int p0, int p1, nx_error *err) {
    nx_status st = check_seq(kv, seq, err);
    if (st != NX_OK) return st;
    kv_seq *q = &kv->seqs[seq];
    if (p0 < 0) p0 = 0;
    if (p1 < 0 || p1 > q->len) p1 = q->len;
    if (p0 >= p1) return NX_OK;
    if (p0 == 0 && p1 == q->len) {
        nx_kv_seq_reset(kv, seq);
        return NX_OK;
    }
    if (p1 < q->len)
        return nx_fail(err, NX_ERR_UNSUPPORTED, "kv: sequence %d: cannot remove positions [%d, %d) from the middle of [0, %d)",
                       seq, p0, p1, q->len);
    st = ring_check(kv, seq, p0, "cut the sequence back to", err);
    if (st != NX_OK) return st;
    if (kv->n_rec > 0) {
        int slot = rec_slot_for(kv, seq, p0);
        if (slot == -2) {
            if (q->snap_n > 0)
                return nx_fail(err, NX_ERR_UNSUPPORTED,
                               "kv: sequence %d: cannot rewind the recurrent state to position %d (snapshots hold %d..%d)",
                               seq, p0, q->snap_pos0 + 1, q->snap_pos0 + q->snap_n);
            return nx_fail(err, NX_ERR_UNSUPPORTED,
                           "kv: sequence %d: cannot rewind the recurrent state to position %d (no snapshot; decode with snapshots first)",
                           seq, p0);
        }
        if (kv->deferred) {   /* conv from its slot; the SSM needs only the count of pending tokens */
            if (slot >= 0) {
                for (int l = 0; l < kv->n_rec; l++)
                    memcpy(q->rec.f + kv->conv_off[l], q->snap[slot].f + kv->conv_soff[l],
                           (size_t)kv->conv_n[l] * sizeof(float));
                q->pend = p0 - q->snap_pos0 ;
            }
        } else if (slot >= 0) {   /* swap, not copy: the old live buffer becomes a free slot */
            rec_buf t = q->rec;
            q->rec = q->snap[slot];
            q->snap[slot] = t;
        }
        q->snap_n = slot + 1;   /* slots 0..slot-1 still valid, slot == live now */
    }
    q->len = p0;
    return NX_OK;
}

nx_status nx_kv_seq_cp(nx_kv *kv, int src, int dst, int p0, int p1, nx_error *err) {
    nx_status st = check_seq(kv, src, err);
    if (st == NX_OK) st = check_seq(kv, dst, err);
    if (st != NX_OK) return st;
    if (p0 > 0)
        return nx_fail(err, NX_ERR_UNSUPPORTED, "kv: seq_cp copies prefixes only (p0 = %d)", p0);
    if (src == dst) return NX_OK;
    kv_seq *s = &kv->seqs[src], *d = &kv->seqs[dst];
    int n = (p1 < 0 || p1 > s->len) ? s->len : p1;
    if (n < s->len && (st = ring_check(kv, src, n, "copy the first", err)) != NX_OK) return st;
    int slot = -1;
    if (kv->n_rec > 0) {
        slot = rec_slot_for(kv, src, n);
        if (slot == -2)
            return nx_fail(err, NX_ERR_UNSUPPORTED, "kv: seq_cp %d -> %d: no recurrent state of sequence %d after %d positions",
                           src, dst, src, n);
    }
    for (int l = 0; l < kv->n_attn; l++) {
        /* a ring is copied whole: its rows are not in position order */
        size_t rows = kv->ring[l] ? (size_t)kv->ring[l] : (size_t)n;
        const int nh = kv->heads[l];
        const size_t kb = kv->krb[l] / (size_t)nh, vb = kv->vrb[l] / (size_t)nh, cells = (size_t)kv->cells[l];
        for (int h = 0; h < nh; h++) {
            memcpy(d->attn + kv->k_off[l] + h * cells * kb, s->attn + kv->k_off[l] + h * cells * kb, rows * kb);
            memcpy(d->attn + kv->v_off[l] + h * cells * vb, s->attn + kv->v_off[l] + h * cells * vb, rows * vb);
        }
    }
    if (kv->n_cell_pos) memcpy(d->cell_pos, s->cell_pos, kv->n_cell_pos * sizeof(int32_t));
    if (kv->rec_size && kv->deferred)
        rec_materialize(kv, src, slot, slot >= 0 ? n - s->snap_pos0 : s->pend, d->rec.f);
    else if (kv->rec_size)
        memcpy(d->rec.f, rec_base(kv, src, slot), (size_t)kv->rec_size * sizeof(float));
    d->len = n;
    d->snap_n = 0;
    d->pend = 0;
    return NX_OK;
}

/* ---- checkpoints ---- */

int64_t nx_kv_rec_floats(const nx_kv *kv) { return kv->rec_size; }

void nx_kv_rec_save(const nx_kv *kv, int seq, float *dst) {
    if (kv->rec_size && kv->deferred) rec_materialize(kv, seq, -1, kv->seqs[seq].pend, dst);
    else if (kv->rec_size) memcpy(dst, kv->seqs[seq].rec.f, (size_t)kv->rec_size * sizeof(float));
}

nx_status nx_kv_seq_restore(nx_kv *kv, int seq, int len, const float *rec, nx_error *err) {
    nx_status st = check_seq(kv, seq, err);
    if (st != NX_OK) return st;
    kv_seq *q = &kv->seqs[seq];
    if (len < 0 || len > q->len)
        return nx_fail(err, NX_ERR_INVALID_ARG, "kv: sequence %d: cannot restore %d positions (it holds %d)", seq, len,
                       q->len);
    if (len == 0) {
        nx_kv_seq_reset(kv, seq);
        return NX_OK;
    }
    if (kv->rec_size && !rec && len != q->len)
        return nx_fail(err, NX_ERR_INVALID_ARG, "kv: sequence %d: restoring %d of %d positions needs a recurrent state",
                       seq, len, q->len);
    if (len < q->len && (st = ring_check(kv, seq, len, "cut the sequence back to", err)) != NX_OK) return st;
    if (kv->rec_size && rec) {
        memcpy(q->rec.f, rec, (size_t)kv->rec_size * sizeof(float));
        q->pend = 0;
    }   /* else the live state stays, pending tokens included (the log outlives the slots) */
    q->snap_n = 0;
    q->len = len;
    return NX_OK;
}
