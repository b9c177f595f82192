/*
 * matmul_impl.h — internal contract between matmul.c (dispatch, threads, activation
 * quantization) and the per-level kernels (matmul_scalar.c, matmul_avx2.c, matmul_avx512.c).
 * Not part of any public API.
 *
 * Activation layout ("vec dot" format), per activation row r, for the integer weight types:
 *   q[r*q_stride + i]   = bias + rint(x_i / d_b)  (a byte; the code c = rint(..) is in
 *                         [-127, 127]; bias = nx_mm_act_bias(type): 128 stores c + 128 as
 *                         unsigned, for dot products with signed weight bytes; 0 stores c as
 *                         int8, for types whose weight codes are unsigned: Q4_K, Q5_K, Q2_K; the
 *                         AVX2 kernels' choice differs, see nx_mm_act_bias_avx2)
 *   d[r*d_stride + b]   = d_b = amax_b / 127      (float, one per block of B values)
 *   s[r*s_stride + b]   = d_b * sum_{i in b} (q_i - 128)        (B = 32 layouts only)
 *   de[r*de_stride + 16p + l] = d_{2p + l/8}  (B = 32 only: each pair of block scales spread
 *                         over 16 lanes, the shape the AVX-512 kernel multiplies with; a
 *                         missing odd last block gives 0)
 *   bs[r*bs_stride + g] = sum over the 16 values of group g of (q_i - 128)  (B = 256 only)
 * with B = 32 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL and B = 256 for Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS.
 * The float weight types read x directly (x, ldx).
 *
 * A kernel computes, for weight rows o < n_w (row o at w + o*w_stride) and activation rows
 * r < n_act (n_act <= NX_MM_TILE, or <= nx_mm_tile_avx512(type) for that level's kernel),
 * y[r*ldy + o]. It must give bit-identical results for a given (weight row, activation row)
 * whatever n_w, n_act and the row's position in the tile.
 */
#ifndef NX_KERNELS_MATMUL_IMPL_H
#define NX_KERNELS_MATMUL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tensor.h"

/* The SIMD kernels built for the target (CMakeLists.txt leaves the other architecture's out). */
#if defined(__x86_64__) || defined(__i386__)
#define NX_MM_X86 1
#else
#define NX_MM_X86 0
#endif
#if defined(__aarch64__)
#define NX_MM_NEON 1
#else
#define NX_MM_NEON 0
#endif

#define NX_MM_TILE 16   /* activation rows per pass over a weight row */
#define NX_MM_TILE_MAX 64   /* the most any kernel takes (see nx_mm_tile_avx512) */

typedef struct nx_mm_act {
    const uint8_t *q;
    const float   *d;
    const float   *s;
    const int16_t *bs;
    const float   *de;
    const float   *x;
    const int32_t *cs;   /* packed kernels: cs[r*cs_stride + b] = -128 * sum of block b's signed codes */
    /* Prefill copy for the AVX-512 packed kernels (NULL when absent, or when the view does not
     * start on a tile): the same codes, cs / bs and d, interleaved per tile of NX_MM_ITILE = 8
     * rows so one pointer walks a tile's blocks of B values: tile t, block b, row r at
     * qi + t*qi_stride + 8Bb + Br; at ci + t*ci_stride + b*NX_MM_ICI_B<B>: B = 32 (Q8_0): the
     * 8 rows' cs (int32), then their d (float); B = 256 (K-quants): the 8 rows' 16 bs (int16),
     * then their d (float). */
    const uint8_t *qi, *ci;
    bool prefill;   /* the call has more than NX_MM_TILE rows (kernels may choose their pass shape by it) */
    int64_t q_stride, d_stride, s_stride, bs_stride, de_stride, ldx, cs_stride, qi_stride, ci_stride;
} nx_mm_act;

#define NX_MM_ITILE 8
#define NX_MM_ICI_B32 64
#define NX_MM_ICI_B256 288

/* The view advanced by r activation rows. */
static inline nx_mm_act nx_mm_act_rows(const nx_mm_act *a, int64_t r) {
    nx_mm_act o = *a;
    if (a->q) o.q = a->q + r * a->q_stride;
    if (a->d) o.d = a->d + r * a->d_stride;
    if (a->s) o.s = a->s + r * a->s_stride;
    if (a->bs) o.bs = a->bs + r * a->bs_stride;
    if (a->de) o.de = a->de + r * a->de_stride;
    if (a->x) o.x = a->x + r * a->ldx;
    if (a->cs) o.cs = a->cs + r * a->cs_stride;
    if (a->qi && r % NX_MM_ITILE == 0) {
        o.qi = a->qi + r / NX_MM_ITILE * a->qi_stride;
        o.ci = a->ci + r / NX_MM_ITILE * a->ci_stride;
    } else {
        o.qi = o.ci = NULL;
    }
    return o;
}

/* ===== Packed weights (matmul.h: nx_matmul_pack; layouts in matmul_pack.c) =====
 * Weight rows in groups of 16; group g, block b (32 values, or a 256-value super-block) at
 * wp + (g*nb + b)*block_bytes. Activations: signed codes (bias 0) with d, and cs (Q8_0) or
 * bs (K-quants). A packed kernel computes output rows 16g..16g+15 of n_groups groups for n_act
 * activation rows (<= NX_MM_TILE): y[r*ldy + 16g + l]. Each layout's float contract is its
 * scalar reference's; the SIMD kernels match it bit for bit.
 *
 * Q8_0 x16 (544 bytes): 16 fp16 scales (row order), then for k = 0..7 the 4 codes
 *   4k..4k+3 of rows 0..15 (64 bytes per k). Per pair: acc = fma((float)I_b, d_w*d_x, acc).
 * Q4_0 x16 (288 bytes, the size of the 16 rows' Q4_0 blocks): 16 fp16 scales, then for
 *   kk = 0..3, 64 bytes: byte 4l + i holds in its low nibble the stored code (q + 8) of value
 *   8kk + i of row l and in its high nibble that of value 8kk + 4 + i. Q8_0 x16's contract with
 *   I_b = sum (code - 8) * x (exact; the kernels start it from cs / 16 = -8 * sum x).
 * IQ4_NL x16: Q4_0 x16's bytes (the same block fields), Q8_0 x16's contract with
 *   I_b = sum nx_mm_iq4_table[code] * x (exact).
 * Q4_K x16 (2368 bytes): d[16], dmin[16] (fp16), sc[8][16], m[8][16] (the 6-bit scales and
 *   mins, bytes, [sub-block][row]), then for sub-block j and kk = 0..3, 64 bytes at
 *   320 + 256j + 64kk: byte 4l + i holds in its low nibble the code of value 32j + 8kk + i of
 *   row l and in its high nibble that of value 32j + 8kk + 4 + i. Per pair and super-block:
 *   t = (float)Mn * -dmin with Mn = sum_j m_j*(bs[2j] + bs[2j+1]) (exact), then for j = 0..7
 *   t = fma((float)I_j, d*sc_j, t) (I_j the exact sub-block dot product, d*sc_j one rounding),
 *   then acc = fma(t, d_x, acc).
 * Q5_K x16 (2880 bytes): Q4_K x16's header, then per sub-block j 320 bytes at 320 + 320j: the
 *   4 nibble vectors as in Q4_K, then one vector of fifth bits (byte 4l + i, bit k: value
 *   32j + 4k + i of row l). The contract is Q4_K's with codes 0..31.
 * Q6_K x16 (3392 bytes): d[16] (fp16); at 32 the int8 scales, 32 bytes per pair p of groups
 *   (byte 2l + e: sc[2p + e] of row l); 32 bytes of padding; then for each group g of 16
 *   values, 192 bytes at 320 + 192g: two vectors of low nibbles (byte 4l + i: value
 *   16g + 8h + i in the low nibble, 16g + 8h + 4 + i in the high, h = 0, 1) and one of high
 *   bit pairs (byte 4l + i, bits 2k..2k+1: value 16g + 4k + i), of the 6-bit codes c = q + 32
 *   of row l. Per pair and super-block: t = (float)C * (-32 d) with C = sum_g sc_g*bs[g]
 *   (exact), then for g = 0..15 t = fma((float)I_g, d*sc_g, t) (I_g = sum c*x over the
 *   group, exact), then acc = fma(t, d_x, acc).
 * F32 / F16 / BF16 x16 (2048 / 1024 / 1024 bytes per 32 inputs): for k = 0..31 the 16 rows'
 *   weights at input 32b + k side by side (64 or 32 bytes, row order, the stored bits). Per pair:
 *   acc = fma((float)w_k, x_k, acc) over the inputs k in order from acc = 0 (one chain; the
 *   conversions are exact). Activations: the float rows (x, ldx).
 * IQ4_XS x16 (2240 bytes): d[16] (fp16); at 32 the signed sub-block scales ls - 32, bytes
 *   [sub-block j][row l] (128 bytes); 32 bytes of padding (the codes start on a cache line); then
 *   for sub-block j and kk = 0..3, 64 bytes at 192 + 256j + 64kk: byte 4l + i holds in its low
 *   nibble the code of value 32j + 8kk + i of row l and in its high nibble that of value
 *   32j + 8kk + 4 + i (Q4_K x16's sub-block layout). Per pair and super-block: t = 0, then for
 *   j = 0..7 t = fma((float)I_j, d*sc_j, t) (I_j = sum nx_mm_iq4_table[code]*x over the
 *   sub-block, exact; d*sc_j exact in float), then acc = fma(t, d_x, acc). The SIMD kernels take
 *   the values + 128 (unsigned, by table) against the signed codes, each sub-block's sum started
 *   at -128 * (bs[2j] + bs[2j+1]) to take the offset out exactly, or |value| x sign(x, value). */
#define NX_MM_PACK_ROWS 16
#define NX_MM_Q8X16_BLOCK 544
#define NX_MM_Q40X16_BLOCK 288
#define NX_MM_Q4KX16_BLOCK 2368
#define NX_MM_Q5KX16_BLOCK 2880
#define NX_MM_Q6KX16_BLOCK 3392
#define NX_MM_IQ4XSX16_BLOCK 2240
#define NX_MM_F32X16_BLOCK 2048
#define NX_MM_F16X16_BLOCK 1024
typedef void (*nx_mm_pkernel)(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act,
                              float *y, int64_t ldy);
/* The layout of a type: values per block and packed bytes per (group, block); false: none. */
bool nx_mm_pack_format(nx_type type, int *block_values, size_t *block_bytes);
/* The packed kernel of the current level for a type, or NULL (scalar level, other types). */
nx_mm_pkernel nx_mm_pick_pkernel(nx_type type);
#define NX_MM_PK_DECL(name) \
    void name(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y, int64_t ldy);
NX_MM_PK_DECL(nx_mm_pk_q8_0_scalar)
NX_MM_PK_DECL(nx_mm_pk_q8_0_avx2)
NX_MM_PK_DECL(nx_mm_pk_q8_0_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_q8_0_avx512)
/* AMX-INT8 (matmul_pack_amx.c): whole tiles of 16 rows of a prefill call; other calls and
 * rows go to nx_mm_pk_q8_0_avx512. Picked only where nx_cpu_amx(). */
NX_MM_PK_DECL(nx_mm_pk_q8_0_amx)
NX_MM_PK_DECL(nx_mm_pk_q4_0_scalar)
NX_MM_PK_DECL(nx_mm_pk_q4_0_avx2)
NX_MM_PK_DECL(nx_mm_pk_q4_0_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_q4_0_avx512)
NX_MM_PK_DECL(nx_mm_pk_iq4_nl_scalar)
NX_MM_PK_DECL(nx_mm_pk_iq4_nl_avx2)
NX_MM_PK_DECL(nx_mm_pk_iq4_nl_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_iq4_nl_avx512)
NX_MM_PK_DECL(nx_mm_pk_q4_K_scalar)
NX_MM_PK_DECL(nx_mm_pk_q4_K_avx2)
NX_MM_PK_DECL(nx_mm_pk_q4_K_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_q4_K_avx512)
NX_MM_PK_DECL(nx_mm_pk_q5_K_scalar)
NX_MM_PK_DECL(nx_mm_pk_q5_K_avx2)
NX_MM_PK_DECL(nx_mm_pk_q5_K_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_q5_K_avx512)
NX_MM_PK_DECL(nx_mm_pk_q6_K_scalar)
NX_MM_PK_DECL(nx_mm_pk_q6_K_avx2)
NX_MM_PK_DECL(nx_mm_pk_q6_K_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_q6_K_avx512)
NX_MM_PK_DECL(nx_mm_pk_f32_scalar)
NX_MM_PK_DECL(nx_mm_pk_f32_avx2)
NX_MM_PK_DECL(nx_mm_pk_f32_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_f32_avx512)
NX_MM_PK_DECL(nx_mm_pk_f16_scalar)
NX_MM_PK_DECL(nx_mm_pk_f16_avx2)
NX_MM_PK_DECL(nx_mm_pk_f16_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_f16_avx512)
NX_MM_PK_DECL(nx_mm_pk_bf16_scalar)
NX_MM_PK_DECL(nx_mm_pk_bf16_avx2)
NX_MM_PK_DECL(nx_mm_pk_bf16_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_bf16_avx512)
/* BF16 x16 through VDPBF16PS (AVX512_BF16; picked only where nx_cpu_bf16dot()). Its own
 * contract, not the scalar one's bits (as llama.cpp, which rounds a BF16 matmul's activations to
 * bf16): per (weight row, activation row), x rounded to bf16 (VCVTNE2PS2BF16: nearest even),
 * then for each block's input pairs (2p, 2p+1), p = 0..15 in order, one VDPBF16PS step into one
 * accumulator from 0 (the instruction's own rounding and denormal flushing). The same for every
 * batch size, pass and thread (tested), and within a bound of the f32 contract. */
NX_MM_PK_DECL(nx_mm_pk_bf16_avx512bf16)
NX_MM_PK_DECL(nx_mm_pk_iq4_xs_scalar)
NX_MM_PK_DECL(nx_mm_pk_iq4_xs_avx2)
NX_MM_PK_DECL(nx_mm_pk_iq4_xs_avx2vnni)
NX_MM_PK_DECL(nx_mm_pk_iq4_xs_avx512)

/* Row groups per kernel call: matmul_avx512.c grp512, matmul_avx2.c group_rows (both balanced). */

typedef void (*nx_mm_kernel)(int64_t n_in, const uint8_t *w, size_t w_stride, int64_t n_w,
                             const nx_mm_act *a, int n_act, float *y, int64_t ldy);

/* The kernel for a weight type at each level, or NULL if that level has none for the type
 * (the dispatcher then falls back to the level below). */
nx_mm_kernel nx_mm_kernel_scalar(nx_type type);
nx_mm_kernel nx_mm_kernel_avx2(nx_type type);
nx_mm_kernel nx_mm_kernel_avx2vnni(nx_type type);   /* the avx2_vnni level (matmul_avx2vnni.c) */
nx_mm_kernel nx_mm_kernel_avx512(nx_type type);
/* aarch64 (matmul_neon.c, matmul_neon_dot.c, matmul_neon_i8mm.c): signed activation codes (bias 0) for every type,
 * NX_MM_TILE rows per call, and the scalar kernels' float operations in the same order per
 * (weight row, activation row), so their results equal the scalar level's bit for bit; float
 * weights take the AVX2 kernel's order instead (matmul_neon_kernels.h), the AVX2 level's bits. */
nx_mm_kernel nx_mm_kernel_neon(nx_type type);
nx_mm_kernel nx_mm_kernel_neon_dot(nx_type type);
nx_mm_kernel nx_mm_kernel_neon_i8mm(nx_type type);   /* SMMLA for 2+ activation rows */
/* Activation rows the AVX-512 kernel of a type takes per call (NX_MM_TILE .. NX_MM_TILE_MAX):
 * kernels that decode a weight panel once per call amortize it over more rows. */
int nx_mm_tile_avx512(nx_type type);

/* Quantize one activation row of n values (n % B == 0, B = 32 or 256) into the layout
 * above: q, d, and s (if non-NULL) or bs (if non-NULL). Every level gives identical bytes:
 * amax = max |x| (NaN ignored), d = amax / 127, id = d ? 1/d : 0, v = x * id clamped to
 * [-127, 127] (NaN -> -127), q = round-half-even(v) + bias. */
typedef void (*nx_mm_quant_fn)(const float *x, int64_t n, int B, int bias, uint8_t *q, float *d, float *s, int16_t *bs);
void nx_mm_quantize_scalar(const float *x, int64_t n, int B, int bias, uint8_t *q, float *d, float *s, int16_t *bs);
void nx_mm_quantize_avx512(const float *x, int64_t n, int B, int bias, uint8_t *q, float *d, float *s, int16_t *bs);
void nx_mm_quantize_avx2(const float *x, int64_t n, int B, int bias, uint8_t *q, float *d, float *s, int16_t *bs);
void nx_mm_quantize_neon(const float *x, int64_t n, int B, int bias, uint8_t *q, float *d, float *s, int16_t *bs);

/* The bias of the scalar and AVX-512 kernels. */
static inline int nx_mm_act_bias(nx_type t) {
    return t == NX_TYPE_Q4_K || t == NX_TYPE_Q5_K || t == NX_TYPE_Q2_K ? 0 : 128;
}
/* The AVX2 kernels take signed codes (bias 0) for every type but Q6_K, whose kernel multiplies
 * the unsigned byte: AVX2 has no u8 x s8 dot, and maddubs with the signed code saves a flip
 * per (block, activation row) pair. The dispatcher quantizes with the bias of the level whose
 * kernel it picked. */
static inline int nx_mm_act_bias_avx2(nx_type t) { return t == NX_TYPE_Q6_K ? 128 : 0; }

/* Streaming reads for the bandwidth measurement (p 64-byte aligned, n % 256 == 0). */
uint64_t nx_mm_stream_read_avx512(const void *p, size_t n);
/* Reorder n (a multiple of 256) quantized activations into the AVX-512 Q4_K kernel's order. */
void nx_mm_q4k_perm_avx512(const uint8_t *src, uint8_t *dst, int64_t n);
uint64_t nx_mm_stream_read_avx2(const void *p, size_t n);
uint64_t nx_mm_stream_read_neon(const void *p, size_t n);

/* IQ4_NL / IQ4_XS value table (our copy, so the kernels do not depend on the quant module). */
static const int8_t nx_mm_iq4_table[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* Q3_K: the 16 six-bit scales (stored + 32, 0..63) packed in 12 bytes, as 16 bytes in 4 words
 * (byte j = scale j): scale j's low nibble is the low (j < 8) or high nibble of byte j % 8, its
 * top 2 bits are bits 2(j/4), 2(j/4)+1 of byte 8 + j % 4. Word-wide, for the SIMD decoders. */
static inline void nx_mm_q3k_scales(const uint8_t *s, uint32_t out[4]) {
    const uint32_t w0 = s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
    const uint32_t w1 = s[4] | (uint32_t)s[5] << 8 | (uint32_t)s[6] << 16 | (uint32_t)s[7] << 24;
    const uint32_t w2 = s[8] | (uint32_t)s[9] << 8 | (uint32_t)s[10] << 16 | (uint32_t)s[11] << 24;
    const uint32_t l4 = 0x0F0F0F0Fu, h2 = 0x03030303u;
    out[0] = (w0 & l4) | ((w2 & h2) << 4);
    out[1] = (w1 & l4) | (((w2 >> 2) & h2) << 4);
    out[2] = ((w0 >> 4) & l4) | (((w2 >> 4) & h2) << 4);
    out[3] = ((w1 >> 4) & l4) | (((w2 >> 6) & h2) << 4);
}

/* Q4_K / Q5_K: the 8 six-bit scales and mins packed in 12 bytes (sc[j], m[j], j < 8). */
static inline void nx_mm_k4_scales(const uint8_t *s, uint8_t *sc, uint8_t *m) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

#endif
