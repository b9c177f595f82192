/*
 * attn_view.h — one KV head of one sequence's cache block as the attention kernel reads it
 * (kernels/attn.h), for every architecture's forward pass. Rows hold Hkv heads of D (K) / Dv
 * (V) values in the cache's type, as head-major planes when the cache was made with heads =
 * Hkv (a head's rows contiguous), else interleaved in one row; a quantized cache needs D and
 * Dv multiples of its block.
 */
#ifndef NX_ARCH_ATTN_VIEW_H
#define NX_ARCH_ATTN_VIEW_H

#include "kernels/attn.h"
#include "kv.h"
#include "nextn.h"

static inline nx_attn_kv nx_attn_view(const nx_kv *kv, int seq, int layer, int kvh, int Hkv, int D, int Dv) {
    const nx_type tk = nx_kv_type_k(kv), tv = nx_kv_type_v(kv);
    nx_attn_kv a = {.tk = tk, .tv = tv, .cells = nx_kv_cells(kv, layer)};
    if (nx_kv_heads(kv, layer) == Hkv) {   /* head-major planes: one head's rows are contiguous */
        a.k = nx_kv_head(kv, seq, layer, kvh, false);
        a.v = nx_kv_head(kv, seq, layer, kvh, true);
        a.k_stride = nx_row_size(tk, D);
        a.v_stride = nx_row_size(tv, Dv);
    } else {   /* one row holds every head */
        a.k = (const uint8_t *)nx_kv_k_base(kv, seq, layer) + nx_row_size(tk, (int64_t)kvh * D);
        a.v = (const uint8_t *)nx_kv_v_base(kv, seq, layer) + nx_row_size(tv, (int64_t)kvh * Dv);
        a.k_stride = nx_row_size(tk, (int64_t)Hkv * D);
        a.v_stride = nx_row_size(tv, (int64_t)Hkv * Dv);
    }
    return a;
}

/* Rows per attention work item: the rows of a chunk share every K/V tile load (fewer for wide
 * groups: the queries of one kernel call are bounded). */
#define NX_ATTN_ROWS 16
static inline int nx_attn_rows(int grp) { return NX_ATTN_ROWS * grp <= NX_ATTN_MAX_Q ? NX_ATTN_ROWS : NX_ATTN_MAX_Q / grp; }

/* Work floats per thread of nx_attend_rows. */
static inline size_t nx_attend_work_floats(int H, int Hkv, int D) {
    const int grp = H / Hkv;
    return nx_attn_work_floats(nx_attn_rows(grp) * grp, D, D);
}

/* Attention of rows [0, n) of a batch over cache layer `layer` (attn_view.c): query head h of
 * row r at q + r*q_row + h*q_head, its output at o + (r*H + h)*D; row r (sequence seq[r]) sees
 * positions lo[r]..hi[r] (lo NULL: from 0). The share of thread ith of nth, for a threadpool
 * task: work items are (chunk of nx_attn_rows rows, KV head), each chunk's rows of one sequence
 * in one kernel call. q_head: floats from one query head of a row to the next (D, or more when
 * other values sit between the heads). */
void nx_attend_rows(const nx_kv *kv, int layer, int H, int Hkv, int D, int n, const nx_seq_id *seq, const int32_t *lo,
                    const int32_t *hi, const float *q, size_t q_row, size_t q_head, float *o, float scale, float *work,
                    int ith, int nth);

#endif
