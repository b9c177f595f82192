/*
 * quant.h — scalar reference (de)quantization for the ggml block formats.
 *
 * These are the reference implementations: kernels' SIMD paths are tested against them.
 * Quantizers are round-to-nearest in the style of ggml's reference quantizers (no
 * importance matrix). n must be a multiple of the type's block size.
 */
#ifndef NX_QUANT_H
#define NX_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tensor.h"

/* dst[0..n) = values of the row. Returns false for a type without a dequantizer. */
bool nx_dequantize_row(nx_type type, const void *src, float *dst, int64_t n);

/* Quantize n floats into dst (nx_row_size(type, n) bytes). Returns bytes written, 0 if the
 * type cannot be quantized or n is not a multiple of the block size. */
size_t nx_quantize_row(nx_type type, const float *src, void *dst, int64_t n);

#endif
