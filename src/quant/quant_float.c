/*
 * quant_float.c — the plain float formats: F16 and BF16 rows to and from F32.
 *
 * Conversions are the scalar ones of core/fp16.h (round to nearest even, NaNs kept), so a
 * row converted here matches what F16C / AVX-512 BF16 code gives. No state, no allocation.
 */
#include "quant/quant.h"

void nx_dequantize_row_f16(const nx_half *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = nx_half_to_f32(x[i]);
}

void nx_dequantize_row_bf16(const nx_bf16 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = nx_bf16_to_f32(x[i]);
}

void nx_quantize_row_f16_ref(const float *x, nx_half *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = nx_f32_to_half(x[i]);
}

void nx_quantize_row_bf16_ref(const float *x, nx_bf16 *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = nx_f32_to_bf16(x[i]);
}
