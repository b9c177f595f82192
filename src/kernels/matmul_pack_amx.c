/*
 * matmul_pack_amx.c — AMX-INT8 prefill kernel for the packed Q8_0 x16 layout (matmul_impl.h).
 *
 * A packed block is an AMX B tile as it lies: after the 16 fp16 scales, 8 rows of 64 bytes,
 * row k holding codes 4k..4k+3 of the 16 weight rows, which is TDPBSSD's K/4 x (N*4) layout
 * for K = 32, N = 16. The A tile is 16 activation rows x 32 signed codes of one block, read in
 * place with the row stride q_stride. One TDPBSSD per (group, block) gives the 16 x 16 exact
 * int32 dot products I_b; the float work is then the contract's, per activation row and block
 * in order: acc = fma((float)I_b, d_w * d_x, acc), the same ops as nx_mm_pk_q8_0_avx512 and
 * the scalar reference, so the bits do not depend on which kernel ran a row.
 *
 * Cost (Sapphire Rapids, measured): one thread's tile loads, stores and products run one after
 * another, ~28 ns per (group, block) of 16 rows, and the float work (3 vector ops per row) adds
 * ~19 ns (they overlap little); the AVX-512 kernel needs ~67 ns. K is 32, half a product's
 * depth: the block scales forbid summing two blocks in int32.
 *
 * Only whole tiles of 16 activation rows of a prefill call run here; shorter calls and verify
 * batches go to the AVX-512 kernel. The tile configuration is per thread: each call loads it
 * and releases the tiles on return, so no tile state outlives a call.
 * Must never: run where nx_cpu_amx() is false (the OS must have granted the tile state), or
 * read outside the packed groups and the n_act activation rows.
 */
#include "kernels/matmul_impl.h"
#include <immintrin.h>

/* LDTILECFG's 64-byte operand (palette 1): bytes per row and rows of each tile. */
typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* Tile numbers (macros: the intrinsics paste them into the asm): A and B of two blocks, and
 * two pairs of C tiles, so one pair's products run while the other pair's results are used. */
#define TA0 0
#define TA1 1
#define TB0 2
#define TB1 3
#define TC0 4
#define TC1 5
#define TC2 6
#define TC3 7

static void amx_config(void) {
    amx_cfg c = {0};
    c.palette = 1;
    for (int t = TA0; t <= TA1; t++) { c.rows[t] = 16; c.colsb[t] = 32; }   /* 16 rows x 32 codes */
    for (int t = TB0; t <= TB1; t++) { c.rows[t] = 8; c.colsb[t] = 64; }    /* K/4 x 16 rows x 4 */
    for (int t = TC0; t <= TC3; t++) { c.rows[t] = 16; c.colsb[t] = 64; }   /* 16 x 16 int32 */
    /* GCC does not always see LDTILECFG read the struct: a variant of this function built with
     * GCC 12 lost the stores above (the tiles were then unconfigured: SIGILL). */
    __asm__ volatile("" : : "m"(c));
    _tile_loadconfig(&c);
}

/* The float part of one block for 16 activation rows: C row r holds I_b of row r against the
 * 16 weight rows, so each row is one vector of the contract's per-pair operations. The
 * accumulators are 16 named variables, not an array: the tile intrinsics are asm with a
 * memory clobber, which would keep an array on the stack. */
#define AMX_ROW(r) acc##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c_ + 16 * (r))), \
                                             _mm512_mul_ps(dw, _mm512_set1_ps(d_[(r) * ds])), acc##r)
#define AMX_EPILOGUE(cbuf, bp, dptr) do { \
        const int32_t *c_ = (cbuf); \
        const float *d_ = (dptr); \
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(bp))); \
        AMX_ROW(0); AMX_ROW(1); AMX_ROW(2); AMX_ROW(3); AMX_ROW(4); AMX_ROW(5); AMX_ROW(6); AMX_ROW(7); \
        AMX_ROW(8); AMX_ROW(9); AMX_ROW(10); AMX_ROW(11); AMX_ROW(12); AMX_ROW(13); AMX_ROW(14); AMX_ROW(15); \
    } while (0)

/* Weights two pairs ahead into L1: a tile load waits for its whole 512 bytes. */
#ifndef AMX_PREFETCH
#define AMX_PREFETCH (4 * NX_MM_Q8X16_BLOCK)
#endif

/* The products of blocks b and b + 1 (if any) into C tiles CX, CY. */
#define AMX_ISSUE(CX, CY, b) do { \
        const uint8_t *p0 = g + (size_t)(b) * NX_MM_Q8X16_BLOCK; \
        for (int o = 0; o < 2 * NX_MM_Q8X16_BLOCK; o += 64) \
            _mm_prefetch((const char *)(p0 + AMX_PREFETCH + o), _MM_HINT_T0); \
        _tile_loadd(TA0, q + 32 * (b), qs); \
        _tile_loadd(TB0, p0 + 32, 64); \
        _tile_zero(CX); \
        _tile_dpbssd(CX, TA0, TB0); \
        if ((b) + 1 < nb) { \
            _tile_loadd(TA1, q + 32 * (b) + 32, qs); \
            _tile_loadd(TB1, p0 + NX_MM_Q8X16_BLOCK + 32, 64); \
            _tile_zero(CY); \
            _tile_dpbssd(CY, TA1, TB1); \
        } \
    } while (0)
/* Pair p of blocks (2p, 2p + 1): store its C tiles CX, CY to buffer pair bc, start pair p + 1's
 * products in NX, NY, then the float work of pair p - 1 from the other buffer pair: the
 * vector loads read stores made a whole step earlier (a tile store does not forward to
 * loads), and the tile unit works meanwhile. */
#define AMX_STAGE(CX, CY, NX, NY, bc, p) do { \
        const int64_t b_ = 2 * (p); \
        _tile_stored(CX, c[bc][0], 64); \
        if (b_ + 1 < nb) _tile_stored(CY, c[bc][1], 64); \
        if (b_ + 2 < nb) AMX_ISSUE(NX, NY, b_ + 2); \
        if ((p) > 0) AMX_EPI(1 - (bc), b_ - 2); \
    } while (0)
#define AMX_EPI(bc, b) do { \
        AMX_EPILOGUE(c[bc][0], g + (size_t)(b) * NX_MM_Q8X16_BLOCK, a->d + (b)); \
        if ((b) + 1 < nb) AMX_EPILOGUE(c[bc][1], g + (size_t)((b) + 1) * NX_MM_Q8X16_BLOCK, a->d + (b) + 1); \
    } while (0)

/* One group of 16 weight rows against 16 activation rows, blocks in pairs, software-pipelined
 * over two pairs of C tiles and two pairs of buffers. Blocks are still added to each
 * accumulator in order. */
static void amx_group16(int64_t nb, const uint8_t *g, const nx_mm_act *a, float *y, int64_t ldy) {
    __attribute__((aligned(64))) int32_t c[2][2][256];
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0, acc6 = acc0,
           acc7 = acc0, acc8 = acc0, acc9 = acc0, acc10 = acc0, acc11 = acc0, acc12 = acc0, acc13 = acc0, acc14 = acc0,
           acc15 = acc0;
    const uint8_t *q = a->q;
    const size_t qs = (size_t)a->q_stride;
    const int64_t ds = a->d_stride;
    const int64_t np = (nb + 1) / 2;
    AMX_ISSUE(TC0, TC1, 0);
    for (int64_t p = 0; p < np; p += 2) {
        AMX_STAGE(TC0, TC1, TC2, TC3, 0, p);
        if (p + 1 >= np) break;
        AMX_STAGE(TC2, TC3, TC0, TC1, 1, p + 1);
    }
    AMX_EPI((np - 1) % 2, 2 * (np - 1));
#define AMX_OUT(r) _mm512_storeu_ps(y + (r) * ldy, acc##r)
    AMX_OUT(0); AMX_OUT(1); AMX_OUT(2); AMX_OUT(3); AMX_OUT(4); AMX_OUT(5); AMX_OUT(6); AMX_OUT(7);
    AMX_OUT(8); AMX_OUT(9); AMX_OUT(10); AMX_OUT(11); AMX_OUT(12); AMX_OUT(13); AMX_OUT(14); AMX_OUT(15);
}

void nx_mm_pk_q8_0_amx(int64_t nb, const uint8_t *wp, int64_t n_groups, const nx_mm_act *a, int n_act, float *y,
                       int64_t ldy) {
    if (!a->prefill || n_act < 16) {
        nx_mm_pk_q8_0_avx512(nb, wp, n_groups, a, n_act, y, ldy);
        return;
    }
    amx_config();
    const size_t gs = (size_t)nb * NX_MM_Q8X16_BLOCK;
    for (int64_t g = 0; g < n_groups; g++)
        amx_group16(nb, wp + (size_t)g * gs, a, y + NX_MM_PACK_ROWS * g, ldy);
    _tile_release();
    if (n_act > 16) {
        const nx_mm_act sub = nx_mm_act_rows(a, 16);
        nx_mm_pk_q8_0_amx(nb, wp, n_groups, &sub, n_act - 16, y + 16 * ldy, ldy);
    }
}
