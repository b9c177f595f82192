/* matmul_neon.c — the aarch64 base level's matmul kernels (matmul_neon_kernels.h, no dot
 * product instructions), and what every NEON level shares: the activation quantizer and the
 * bandwidth measurement's streaming read. */
#define NX_NEON_DOT 0
#define NX_NEON_FN nx_mm_kernel_neon
#include "kernels/matmul_neon_kernels.h"

/* nx_mm_quantize_scalar's bytes (matmul_impl.h): FMAXNM skips NaN as the scalar `a > amax`
 * does, NaN codes become -127 through the >= compare, FCVTNS rounds half to even, and the
 * group sums are exact integers. */
void nx_mm_quantize_neon(const float *x, int64_t n, int B, int bias, uint8_t *q, float *d, float *s, int16_t *bs) {
    const float32x4_t lo = vdupq_n_f32(-127.0f), hi = vdupq_n_f32(127.0f);
    const int32x4_t vbias = vdupq_n_s32(bias);
    for (int64_t b = 0; b < n / B; b++) {
        const float *xb = x + b * B;
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int i = 0; i < B; i += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(xb + i)));
        const float amax = vmaxnmvq_f32(m);
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        int sum = 0;
        for (int g = 0; g < B; g += 16) {
            int32x4_t c[4];
            for (int k = 0; k < 4; k++) {
                float32x4_t v = vmulq_n_f32(vld1q_f32(xb + g + 4 * k), id);
                v = vbslq_f32(vcgeq_f32(v, lo), v, lo);   /* NaN -> -127 */
                c[k] = vcvtnq_s32_f32(vminq_f32(v, hi));
            }
            const int gs = vaddvq_s32(vaddq_s32(vaddq_s32(c[0], c[1]), vaddq_s32(c[2], c[3])));
            const int16x8_t h0 = vcombine_s16(vmovn_s32(vaddq_s32(c[0], vbias)), vmovn_s32(vaddq_s32(c[1], vbias)));
            const int16x8_t h1 = vcombine_s16(vmovn_s32(vaddq_s32(c[2], vbias)), vmovn_s32(vaddq_s32(c[3], vbias)));
            vst1q_u8(q + b * B + g, vreinterpretq_u8_s8(vcombine_s8(vmovn_s16(h0), vmovn_s16(h1))));
            if (bs) bs[b * (B / 16) + g / 16] = (int16_t)gs;
            sum += gs;
        }
        d[b] = db;
        if (s) s[b] = db * (float)sum;
    }
}

/* The bandwidth measurement's reads (matmul.h nx_matmul_stream_read): four q registers per
 * 64-byte line, LD1 of four vectors at a time, as the kernels stream weights. */
uint64_t nx_mm_stream_read_neon(const void *p, size_t n) {
    const uint64_t *u = p;
    uint64x2_t s0 = vdupq_n_u64(0), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n / 8; i += 8) {
        const uint64x2x4_t v = vld1q_u64_x4(u + i);
        s0 = vaddq_u64(s0, v.val[0]);
        s1 = vaddq_u64(s1, v.val[1]);
        s2 = vaddq_u64(s2, v.val[2]);
        s3 = vaddq_u64(s3, v.val[3]);
    }
    return vaddvq_u64(vaddq_u64(vaddq_u64(s0, s1), vaddq_u64(s2, s3)));
}
