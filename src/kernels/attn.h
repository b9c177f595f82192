/*
 * attn.h — causal attention of query vectors over a K/V cache, flash style: keys in tiles,
 * a running max and sum per query, no context-wide score buffer.
 *
 * One call serves the queries that share one KV head (the GQA heads of some rows of one
 * sequence): every key and value row is read (and converted from the cache type) once per
 * tile for all of them. Callers pass the rows' visible range per query, so causal masks,
 * sliding windows and rings are theirs; the kernel knows no model.
 *
 * Float contract (what every tier computes, bit for bit; tests/test_attn.c compares):
 *   score(q, k) = dot16(q, k) * scale, where dot16 keeps 16 partial sums (value d goes to
 *     lane d mod 16, fmaf in order of d), then adds lanes i + i+8, i + i+4, i + i+2, i + i+1;
 *   keys are taken in tiles of NX_ATTN_TILE positions aligned to absolute position 0; per tile
 *     (visible part [a, b)): m' = max(m, max s_p) (the max of the scores that are not NaN,
 *     from -inf: so in any order); c = e(m - m') (0 for the first tile);
 *     e_p = e(s_p - m'); l = l*c + (e_a + e_a+1 + ...) in position order;
 *     o = o*c, then o = fmaf(e_p, v_p, o) for p in order; out = o / l at the end;
 *   e(x) is the kernel's own exp (nx_attn_exp): Cody-Waite reduction, a degree-7 polynomial
 *     with fmaf, 0 below -87 (relative error vs exp <= 2e-7).
 * Q8_0 / Q4_0 keys (D a multiple of 32) take the integer Q.K contract instead of dot16, as
 * llama.cpp does for quantized K: the query is quantized once per call to Q8_0 blocks
 * (nx_quantize_row: scale dq_b, codes qq_b), and with the key's blocks (dk_b, codes kk_b, Q4_0's
 * being nibble - 8), isum_b = sum of qq_b[i] * kk_b[i] (exact int32) and
 *   score = acc * scale, acc = fmaf((float)isum_b, dq_b * dk_b, acc) for b in order from 0.0f.
 * Integer products where the CPU has them (VNNI, dotprod) instead of converting every key value
 * to float; the query's rounding (<= 1/254 of its block's max) is that of llama.cpp's.
 * So a query's result depends only on its own q, its visible rows and their positions — not on
 * the other queries of the call, the batch, the chunking or the thread: decode, prefill and
 * verify give identical bits, at every SIMD level.
 * K / V rows are read in the cache's type: F32, F16, BF16, Q8_0, Q4_0 (converted exactly: a
 * call with few queries converts inside the dot loops, one with many through a tile buffer;
 * the bits are the same). A head's rows are best contiguous (stride = row size): a decode
 * streams them from memory, and every other part of a cache line defeats the prefetchers.
 * Must never: allocate, or read a row outside the queries' visible ranges.
 */
#ifndef NX_KERNELS_ATTN_H
#define NX_KERNELS_ATTN_H

#include <stddef.h>
#include <stdint.h>
#include "tensor.h"

#define NX_ATTN_TILE 32     /* keys per tile: part of the float contract */
#define NX_ATTN_MAX_Q 512   /* queries per call */

/* One KV head of one sequence's cache block: position p lives in row (p mod cells). */
typedef struct nx_attn_kv {
    const uint8_t *k, *v;        /* row 0, already offset to the KV head */
    size_t k_stride, v_stride;   /* bytes from one row (position) to the next */
    nx_type tk, tv;
    int cells;                   /* rows in the block (n_ctx, or a sliding-window ring's size) */
} nx_attn_kv;

typedef struct nx_attn_q {
    const float *q;   /* D floats */
    float *out;       /* Dv floats, written (never aliasing q); zeros when nothing is visible */
    int lo, hi;       /* visible positions lo..hi inclusive (lo clamped to 0; hi < lo: none) */
} nx_attn_q;

/* Floats of `work` a call with nq queries needs. */
size_t nx_attn_work_floats(int nq, int D, int Dv);

/* Attention for nq (<= NX_ATTN_MAX_Q) queries; queries with equal ranges should be adjacent
 * (rows in order, their heads together), which lets them share the kernel's blocking. */
void nx_attn(const nx_attn_kv *kv, const nx_attn_q *q, int nq, int D, int Dv, float scale, float *work);

/* The contract's exp, for tests. */
float nx_attn_exp(float x);

#endif
