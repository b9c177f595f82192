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

/* Tile numbers, two blocks in flight (macros: the intrinsics paste them into the asm). */
#define TA0 0
#define TA1 1
#define TB0 2
#define TB1 3
#define TC0 4
#define TC1 5

static void amx_config(void) {
    amx_cfg c = {0};
    c.palette = 1;
    for (int t = TA0; t <= TA1; t++) { c.rows[t] = 16; c.colsb[t] = 32; }   /* 16 rows x 32 codes */
    for (int t = TB0; t <= TB1; t++) { c.rows[t] = 8; c.colsb[t] = 64; }    /* K/4 x 16 rows x 4 */
    for (int t = TC0; t <= TC1; t++) { c.rows[t] = 16; c.colsb[t] = 64; }   /* 16 x 16 int32 */
    _tile_loadconfig(&c);
}

/* The float part of one block for 16 activation rows: C row r holds I_b of row r against the
 * 16 weight rows, so each row is one vector of the contract's per-pair operations. */
#define AMX_ROW(r) acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * (r))), \
                                             _mm512_mul_ps(dw, _mm512_set1_ps(d[(r) * ds])), acc[r])
static inline __attribute__((always_inline)) void amx_epilogue(const int32_t *c, const uint8_t *bp, const float *d,
                                                               int64_t ds, __m512 *acc) {
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)bp));
    AMX_ROW(0); AMX_ROW(1); AMX_ROW(2); AMX_ROW(3); AMX_ROW(4); AMX_ROW(5); AMX_ROW(6); AMX_ROW(7);
    AMX_ROW(8); AMX_ROW(9); AMX_ROW(10); AMX_ROW(11); AMX_ROW(12); AMX_ROW(13); AMX_ROW(14); AMX_ROW(15);
}

/* One group of 16 weight rows against 16 activation rows, blocks in pairs: both products are
 * issued before the float work of the first, so the tile unit runs beside the vector units. */
static void amx_group16(int64_t nb, const uint8_t *g, const nx_mm_act *a, float *y, int64_t ldy) {
    __attribute__((aligned(64))) int32_t c[2][256];
    __m512 acc[16];
    for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
    const uint8_t *q = a->q;
    const size_t qs = (size_t)a->q_stride;
    const int64_t ds = a->d_stride;
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        const uint8_t *b0 = g + (size_t)b * NX_MM_Q8X16_BLOCK, *b1 = b0 + NX_MM_Q8X16_BLOCK;
        _tile_loadd(TA0, q + 32 * b, qs);
        _tile_loadd(TB0, b0 + 32, 64);
        _tile_zero(TC0);
        _tile_dpbssd(TC0, TA0, TB0);
        _tile_loadd(TA1, q + 32 * b + 32, qs);
        _tile_loadd(TB1, b1 + 32, 64);
        _tile_zero(TC1);
        _tile_dpbssd(TC1, TA1, TB1);
        _tile_stored(TC0, c[0], 64);
        _tile_stored(TC1, c[1], 64);
        amx_epilogue(c[0], b0, a->d + b, ds, acc);
        amx_epilogue(c[1], b1, a->d + b + 1, ds, acc);
    }
    if (b < nb) {
        const uint8_t *b0 = g + (size_t)b * NX_MM_Q8X16_BLOCK;
        _tile_loadd(TA0, q + 32 * b, qs);
        _tile_loadd(TB0, b0 + 32, 64);
        _tile_zero(TC0);
        _tile_dpbssd(TC0, TA0, TB0);
        _tile_stored(TC0, c[0], 64);
        amx_epilogue(c[0], b0, a->d + b, ds, acc);
    }
    for (int r = 0; r < 16; r++) _mm512_storeu_ps(y + r * ldy, acc[r]);
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
