/*
 * quant.h — scalar reference (de)quantization for the ggml block formats.
 *
 * These are the reference implementations: kernels' SIMD paths are tested against them.
 *
 * Dequantizers are bit-exact with ggml: every value is computed with the same float
 * operations in the same order as ggml's dequantize_row_* (e.g. Q6_K is (d*scale)*q).
 *
 * Quantizers are round-to-nearest in the style of ggml's reference quantizers (no
 * importance matrix): the same scale searches (make_qx_quants / make_qkx2_quants /
 * make_q3_quants style for K-quants, the +-7 step scale search for IQ4), written anew, so
 * for finite input they reproduce ggml's bytes. IQ4_NL / IQ4_XS use the search ggml's
 * llama-quantize uses (ntry = 7). Non-finite input never causes undefined behaviour, but the
 * codes it gives are unspecified; nx_quantize_row() rejects it.
 *
 * Byte equality with ggml assumes plain IEEE float evaluation: the quant_*.c files must not be
 * built with FMA contraction (-mfma / -march=native with -ffp-contract=fast), which moves
 * a few percent of K-quant blocks by one scale step. The default build has none.
 *
 * n must be a multiple of the type's block size. Rows are contiguous arrays of blocks.
 * Nothing here allocates, prints or keeps state.
 */
#ifndef NX_QUANT_H
#define NX_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tensor.h"
#include "quant/blocks.h"

/* ===== Generic entry points ===== */

/* dst[0..n) = values of the row. Returns false for a type without a dequantizer, or when n
 * is negative or not a multiple of the block size. */
bool nx_dequantize_row(nx_type type, const void *src, float *dst, int64_t n);

/* Quantize n floats into dst (nx_row_size(type, n) bytes). Returns bytes written, 0 if the
 * type cannot be quantized, n is not a multiple of the block size, or (block types only)
 * src holds a NaN or an infinity. F32/F16/BF16 copy/convert any value. */
size_t nx_quantize_row(nx_type type, const float *src, void *dst, int64_t n);

/* Importance-weighted quantization, as llama.cpp's quantizer runs with an importance matrix:
 * imatrix[0..n) is the importance of each column of the row (the mean squared activation it
 * meets, nextn imatrix). Types with an imatrix path (nx_quant_uses_imatrix: Q4_0, Q4_1, Q5_0,
 * Q5_1, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS) weigh the scale searches by it (ggml's
 * quantize_row_*_impl: per value qw * sqrt(sigma2 + x^2), Q6_K qw alone); other types, and
 * imatrix NULL, quantize as nx_quantize_row. Same return and input rules as nx_quantize_row;
 * imatrix values must be finite and >= 0. */
size_t nx_quantize_row_imat(nx_type type, const float *src, void *dst, int64_t n, const float *imatrix);
bool nx_quant_uses_imatrix(nx_type type);

/* What this module implements (tensor.c's supported/quantizable flags should agree). */
bool nx_can_dequantize(nx_type type);
bool nx_can_quantize(nx_type type);

/* ===== Typed entry points (n = number of values, a multiple of the block size) ===== */

/* ggml's reference activation quantizers (bit-exact with ggml's _ref). nextn's matmul uses its own
 * activation format (src/kernels/matmul.h: float scale per block, round-half-even); these stay as references.
 * Q8_0: d = max|x|/127 stored as half; q = roundf(x * (1/d)) (half away from zero).
 * Q8_K: m = the value of largest magnitude, iscale = -127/m, q = min(127, round-half-even(
 * iscale*x)), d = 1/iscale (a float, negative when m > 0), bsums[j] = sum of q[16j..16j+15];
 * an all-zero block gives d = 0, q = 0, bsums = 0. */
void nx_quantize_row_q8_0_ref(const float *x, nx_block_q8_0 *y, int64_t n);
void nx_quantize_row_q8_K_ref(const float *x, nx_block_q8_K *y, int64_t n);

/* float formats */
void nx_dequantize_row_f16(const nx_half *x, float *y, int64_t n);
void nx_dequantize_row_bf16(const nx_bf16 *x, float *y, int64_t n);
void nx_quantize_row_f16_ref(const float *x, nx_half *y, int64_t n);
void nx_quantize_row_bf16_ref(const float *x, nx_bf16 *y, int64_t n);

/* legacy 32-value blocks */
void nx_dequantize_row_q4_0(const nx_block_q4_0 *x, float *y, int64_t n);
void nx_dequantize_row_q4_1(const nx_block_q4_1 *x, float *y, int64_t n);
void nx_dequantize_row_q5_0(const nx_block_q5_0 *x, float *y, int64_t n);
void nx_dequantize_row_q5_1(const nx_block_q5_1 *x, float *y, int64_t n);
void nx_dequantize_row_q8_0(const nx_block_q8_0 *x, float *y, int64_t n);
void nx_dequantize_row_q8_1(const nx_block_q8_1 *x, float *y, int64_t n);
void nx_quantize_row_q4_0_ref(const float *x, nx_block_q4_0 *y, int64_t n);
void nx_quantize_row_q4_1_ref(const float *x, nx_block_q4_1 *y, int64_t n);
void nx_quantize_row_q5_0_ref(const float *x, nx_block_q5_0 *y, int64_t n);
void nx_quantize_row_q5_1_ref(const float *x, nx_block_q5_1 *y, int64_t n);
void nx_quantize_row_q8_1_ref(const float *x, nx_block_q8_1 *y, int64_t n);

/* K-quants (256-value super-blocks) */
void nx_dequantize_row_q2_K(const nx_block_q2_K *x, float *y, int64_t n);
void nx_dequantize_row_q3_K(const nx_block_q3_K *x, float *y, int64_t n);
void nx_dequantize_row_q4_K(const nx_block_q4_K *x, float *y, int64_t n);
void nx_dequantize_row_q5_K(const nx_block_q5_K *x, float *y, int64_t n);
void nx_dequantize_row_q6_K(const nx_block_q6_K *x, float *y, int64_t n);
void nx_dequantize_row_q8_K(const nx_block_q8_K *x, float *y, int64_t n);
void nx_quantize_row_q2_K_ref(const float *x, nx_block_q2_K *y, int64_t n);
void nx_quantize_row_q3_K_ref(const float *x, nx_block_q3_K *y, int64_t n);
void nx_quantize_row_q4_K_ref(const float *x, nx_block_q4_K *y, int64_t n);
void nx_quantize_row_q5_K_ref(const float *x, nx_block_q5_K *y, int64_t n);
void nx_quantize_row_q6_K_ref(const float *x, nx_block_q6_K *y, int64_t n);

/* imatrix variants (qw: n importances, NULL = the _ref quantizer) */
void nx_quantize_row_q4_0_imat(const float *x, nx_block_q4_0 *y, int64_t n, const float *qw);
void nx_quantize_row_q4_1_imat(const float *x, nx_block_q4_1 *y, int64_t n, const float *qw);
void nx_quantize_row_q5_0_imat(const float *x, nx_block_q5_0 *y, int64_t n, const float *qw);
void nx_quantize_row_q5_1_imat(const float *x, nx_block_q5_1 *y, int64_t n, const float *qw);
void nx_quantize_row_q4_K_imat(const float *x, nx_block_q4_K *y, int64_t n, const float *qw);
void nx_quantize_row_q5_K_imat(const float *x, nx_block_q5_K *y, int64_t n, const float *qw);
void nx_quantize_row_q6_K_imat(const float *x, nx_block_q6_K *y, int64_t n, const float *qw);

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
static inline void nx_q4k_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* non-linear 4-bit */
void nx_dequantize_row_iq4_nl(const nx_block_iq4_nl *x, float *y, int64_t n);
void nx_dequantize_row_iq4_xs(const nx_block_iq4_xs *x, float *y, int64_t n);
void nx_quantize_row_iq4_nl_ref(const float *x, nx_block_iq4_nl *y, int64_t n);
void nx_quantize_row_iq4_xs_ref(const float *x, nx_block_iq4_xs *y, int64_t n);
void nx_quantize_row_iq4_nl_imat(const float *x, nx_block_iq4_nl *y, int64_t n, const float *qw);
void nx_quantize_row_iq4_xs_imat(const float *x, nx_block_iq4_xs *y, int64_t n, const float *qw);

#endif
