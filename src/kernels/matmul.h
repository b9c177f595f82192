/*
 * matmul.h — y = x · Wᵀ for quantized and float weights: the CPU engine's hot loop.
 *
 * Contract:
 *   y[r*ldy + (o - o0)] = sum_i W[o][i] * x[r*ldx + i]   for r < n_rows, o0 <= o < o1,
 *   where W is a 2-D tensor view (ne[0] = n_in values per row, ne[1] = n_out rows, row
 *   stride nb[1]) of type F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
 *   Q5_K, Q6_K, IQ4_NL or IQ4_XS.
 *
 * How: the activation rows are quantized once per call to the weight type's "vec dot" format
 * (8-bit, per 32 values for the 32-blocks, per 256 values for K-quants and IQ4_XS; float
 * types use x as is), then each weight row is loaded once and dotted with up to 16
 * activation rows while it is in cache (larger batches are tiled by 16 rows, 64 for AVX-512 Q4_0/Q5_0/Q8_0/IQ4_NL). Output rows are
 * split across the pool's threads; the reduction dimension never is.
 *
 * Promises (tested in tests/test_matmul.c):
 *   - Batch invariance: the value computed for an activation row is bit-identical whether
 *     the row is alone or in a batch of any size, at any position in it, and for any
 *     thread count. Every code path of one SIMD level uses the same reduction order per
 *     (weight row, activation row). (Results may differ between SIMD levels.)
 *   - The scalar level is the reference. Integer dot products are exact on every level; the
 *     levels differ only in the float rounding of the per-block scaling and the order of the
 *     float sum (SIMD keeps 8 or 16 lanes), within 1e-5 * sum_i |W[o][i] xq[i]| (tested),
 *     where xq is x after activation quantization.
 *   - Activations are quantized identically on every level (bit-exact, tested): per block of
 *     B values (B = 32, or 256 for K-quants and IQ4_XS), d = amax/127 kept as a float,
 *     q = round-half-even(x/d) in [-127, 127]. (ggml keeps Q8_0's d as fp16 and rounds half
 *     away from zero, so results differ from ggml's by activation-rounding noise.)
 * Must never: allocate in the hot path when the caller passes a scratch, touch global state,
 *   print, or read outside W's rows o0..o1-1 and x's first n_in values of each row (software
 *   prefetches may touch addresses past them; those never fault).
 */
#ifndef NX_KERNELS_MATMUL_H
#define NX_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "tensor.h"
#include "threads.h"

/* An observer of the activations the matmuls through one scratch read (`nextn imatrix` sums
 * their squares per weight column): called on the calling thread once per weight and call,
 * before the product, with the weight view and the float activation rows. It must not write
 * anything the matmul reads. */
typedef void (*nx_matmul_observe_fn)(void *user, const nx_tensor *w, const float *x, int64_t n_rows, int64_t ldx);

/* Caller-owned scratch for the quantized activations; grows on demand, reused across calls.
 * Zero-initialise (or nx_matmul_scratch_init) before first use; one scratch per concurrent
 * caller (a context owns one). */
typedef struct nx_matmul_scratch {
    void  *buf;   /* 64-byte aligned, owned */
    size_t cap;   /* bytes */
    nx_matmul_observe_fn observe;   /* NULL (the default): no observer */
    void  *observe_user;
} nx_matmul_scratch;

void nx_matmul_scratch_init(nx_matmul_scratch *s);
void nx_matmul_scratch_free(nx_matmul_scratch *s);

/* True if nx_matmul computes with weights of this type. */
bool nx_matmul_supports(nx_type type);

/* Bytes of scratch nx_matmul needs for this weight type, n_in and n_rows (0 for float types). */
size_t nx_matmul_scratch_size(nx_type type, int64_t n_in, int64_t n_rows);

/* All output rows (o0 = 0, o1 = ne[1]). tp may be NULL (single-threaded); scratch may be NULL
 * (then the call allocates and frees its own — convenient for tests, not for the hot path). */
nx_status nx_matmul(nx_threadpool *tp, nx_matmul_scratch *scratch, const nx_tensor *w,
                    const float *x, int64_t n_rows, int64_t ldx, float *y, int64_t ldy, nx_error *err);

/* Only output rows [o0, o1) (vocabulary subsets, experts); y[r*ldy + (o - o0)]. */
nx_status nx_matmul_rows(nx_threadpool *tp, nx_matmul_scratch *scratch, const nx_tensor *w,
                         int64_t o0, int64_t o1, const float *x, int64_t n_rows, int64_t ldx,
                         float *y, int64_t ldy, nx_error *err);

/* Several weights applied to the same activations in ONE dispatch: the activations are
 * quantized once and the threads split the weights' concatenated output rows, so small
 * projections (gate + up, q + k + v, ...) share a thread-pool run. Results are bit-identical
 * to one nx_matmul per weight. Weights of different types / widths fall back to one call each. */
typedef struct nx_mm_out {
    const nx_tensor *w;
    float *y;
    int64_t ldy;
} nx_mm_out;
nx_status nx_matmul_multi(nx_threadpool *tp, nx_matmul_scratch *scratch, const nx_mm_out *outs, int n_outs,
                          const float *x, int64_t n_rows, int64_t ldx, nx_error *err);

/* Repacked weights (issue #11: verify batches of a few rows at close to one row's cost).
 * Q8_0 weights with a multiple of 16 rows can be stored interleaved for the AVX-512 level
 * ("q8_0 x16": per 16 rows and 32-value block, the 16 fp16 scales, then the codes in 4-byte
 * groups of the 16 rows side by side), so one activation's 4 bytes, broadcast, meet 16 weight
 * rows in one vpdpbusd and each row's sum lives in a lane: no horizontal sums, and the scale
 * multiply-add per block serves 16 rows. Per (weight row, activation row) the float ops are
 * acc = fma((float)I_b, d_w[b] * d_x[b], acc) over the blocks b in order, from acc = 0 (I_b the
 * exact integer dot product of block b) — the same for every batch size, tile and thread
 * count, so batch invariance holds; values differ from the unpacked kernels only by that
 * rounding order (within the tolerance of the levels, tested).
 * Prefill batches (more than 16 rows) on AVX-512 also get an interleaved copy of the quantized
 * activations in the scratch (8-row tiles, matmul_impl.h) so the packed kernels keep a tile's
 * accumulators in registers; the per-pair arithmetic is the same, so results are too.
 * nx_matmul_pack_size: bytes of w's packed copy at the current level, 0 when it has none
 * (type, shape, level, or NEXTN_REPACK=0). nx_matmul_pack fills dst (64-byte aligned, that
 * many bytes). With w->packed set, nx_matmul / nx_matmul_multi use it whenever the current
 * level has its kernel (else the unpacked data, which must stay readable). */
size_t nx_matmul_pack_size(const nx_tensor *w);
void nx_matmul_pack(const nx_tensor *w, void *dst);
/* A 3-D stack of experts {n_in, n_out, X} packs as X 2-D copies back to back, each this many
 * bytes (0: w's type or 2-D shape has no packed layout); expert e's copy starts at
 * packed + e * nx_matmul_pack_slice_size(w) (arch/moe.c: nx_moe_expert_view). */
size_t nx_matmul_pack_slice_size(const nx_tensor *w);
/* The same bytes, the groups split over tp's threads (tp NULL: this thread), so a large
 * model's load packs at the speed of all its cores (the first touch of dst's pages too). */
void nx_matmul_pack_tp(nx_threadpool *tp, const nx_tensor *w, void *dst);

/* Read n bytes (64-byte aligned, n a multiple of 256) with the current level's widest loads;
 * returns a checksum so the reads are not optimised away. For bench-kernels' bandwidth figure. */
uint64_t nx_matmul_stream_read(const void *p, size_t n);

#endif
