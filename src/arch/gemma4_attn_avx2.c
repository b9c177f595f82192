/*
 * gemma4_attn_avx2.c — F16 -> F32 conversion of cached K / V rows with F16C, for the gemma4
 * attention over an f16 KV cache (the scalar reference is nx_dequantize_row_f16). F16C gives
 * exactly the bits of nx_half_to_f32 (core/fp16.h), so every level computes the same values.
 */
#include <immintrin.h>
#include "arch/gemma4.h"
#include "core/fp16.h"

void g4_f16_row_avx2(const nx_half *x, float *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = nx_half_to_f32(x[i]);
}
