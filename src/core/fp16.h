/*
 * fp16.h — IEEE half and bfloat16 <-> float conversions (scalar, bit-exact, round-to-nearest-even).
 *
 * Promise: nx_half_to_f32 / nx_f32_to_half give exactly the bits the F16C instructions give
 * (vcvtph2ps / vcvtps2ph with rounding mode 0), NaNs included: a NaN keeps its sign and the top
 * payload bits and comes out quiet. So SIMD code may use F16C / AVX-512 conversions freely.
 * nx_f32_to_bf16 rounds to nearest even (as ggml and AVX-512 BF16 do); NaNs stay NaN (quieted).
 * Never depends on the FPU rounding mode being anything but the default.
 */
#ifndef NX_CORE_FP16_H
#define NX_CORE_FP16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t nx_half;   /* IEEE 754 binary16 bits */
typedef uint16_t nx_bf16;   /* bfloat16 bits */

static inline uint32_t nx_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float nx_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float nx_half_to_f32(nx_half h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return nx_bits_f32(sign);
        /* subnormal: value = man * 2^-24, exact in float */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    if (exp == 31) {
        if (man == 0) return nx_bits_f32(sign | 0x7f800000u);
        return nx_bits_f32(sign | 0x7fc00000u | (man << 13));   /* NaN, quieted like F16C */
    }
    return nx_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline nx_half nx_f32_to_half(float f) {
    uint32_t x = nx_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* nan: quiet, keep the top 9 payload bits (as F16C) */
        return (nx_half)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000u) return (nx_half)(sign | 0x7c00); /* inf, or rounds to >= 65520 -> inf */
    if (ax < 0x38800000u) { /* below min normal half: subnormal or zero */
        /* add 0.5 (as float) to shift mantissa into place; the FPU rounds to nearest even */
        float a = nx_bits_f32(ax) + 0.5f;
        return (nx_half)(sign | (nx_f32_bits(a) - 0x3f000000u));
    }
    uint32_t mant_odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + mant_odd;   /* rebias exponent (-112<<23) and round to nearest even */
    return (nx_half)(sign | (ax >> 13));
}

static inline float nx_bf16_to_f32(nx_bf16 h) { return nx_bits_f32((uint32_t)h << 16); }

static inline nx_bf16 nx_f32_to_bf16(float f) {
    uint32_t x = nx_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (nx_bf16)((x >> 16) | 64); /* quiet nan */
    return (nx_bf16)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

#endif
