/*
 * blocks.h — byte layouts of the ggml block formats nextn reads and writes.
 *
 * Facts from ggml's public format description (ggml-common.h, checked field by field); the
 * structs are ours. Every struct has exactly the on-disk size with no padding (static_asserts
 * below), so a weight row in a mmapped GGUF is an array of these blocks. All multi-byte fields
 * little-endian. The exact value formulas and bit orders live in quant/quant_*.c.
 */
#ifndef NX_QUANT_BLOCKS_H
#define NX_QUANT_BLOCKS_H

#include <assert.h>
#include <stdint.h>
#include "core/fp16.h"

#define NX_QK4_0 32
#define NX_QK4_1 32
#define NX_QK5_0 32
#define NX_QK5_1 32
#define NX_QK8_0 32
#define NX_QK8_1 32
#define NX_QK4_NL 32
#define NX_QK_K 256
#define NX_K_SCALE_SIZE 12

/* Q4_0: x = d * (q - 8), q in 0..15; low nibbles hold values 0..15, high nibbles 16..31. */
typedef struct { nx_half d; uint8_t qs[NX_QK4_0 / 2]; } nx_block_q4_0;
/* Q4_1: x = d * q + m. */
typedef struct { nx_half d, m; uint8_t qs[NX_QK4_1 / 2]; } nx_block_q4_1;
/* Q5_0: x = d * (q - 16); bit 4 of value j is bit j of qh. */
typedef struct { nx_half d; uint8_t qh[4]; uint8_t qs[NX_QK5_0 / 2]; } nx_block_q5_0;
/* Q5_1: x = d * q + m. */
typedef struct { nx_half d, m; uint8_t qh[4]; uint8_t qs[NX_QK5_1 / 2]; } nx_block_q5_1;
/* Q8_0: x = d * q. */
typedef struct { nx_half d; int8_t qs[NX_QK8_0]; } nx_block_q8_0;
/* Q8_1: x = d * q; s = d * sum(q) (used as an activation format). */
typedef struct { nx_half d, s; int8_t qs[NX_QK8_1]; } nx_block_q8_1;

/* Q2_K: 16 sub-blocks of 16; scales byte = (min << 4) | scale, 4-bit each. */
typedef struct { uint8_t scales[NX_QK_K / 16]; uint8_t qs[NX_QK_K / 4]; nx_half d, dmin; } nx_block_q2_K;
/* Q3_K: 16 sub-blocks of 16; 6-bit scales packed in 12 bytes; high bit in hmask. */
typedef struct { uint8_t hmask[NX_QK_K / 8]; uint8_t qs[NX_QK_K / 4]; uint8_t scales[12]; nx_half d; } nx_block_q3_K;
/* Q4_K: 8 sub-blocks of 32; 6-bit scales and mins packed in 12 bytes (nx_q4k_scale_min);
 * x = d*sc*q - dmin*m; qs byte l of 32-byte group g holds values 64g+l (low) and 64g+32+l (high). */
typedef struct { nx_half d, dmin; uint8_t scales[NX_K_SCALE_SIZE]; uint8_t qs[NX_QK_K / 2]; } nx_block_q4_K;
/* Q5_K: as Q4_K plus a fifth bit per value in qh. */
typedef struct { nx_half d, dmin; uint8_t scales[NX_K_SCALE_SIZE]; uint8_t qh[NX_QK_K / 8]; uint8_t qs[NX_QK_K / 2]; } nx_block_q5_K;
/* Q6_K: 16 sub-blocks of 16; x = d * scale * (q - 32), q 6-bit split in ql (4) + qh (2). */
typedef struct { uint8_t ql[NX_QK_K / 2]; uint8_t qh[NX_QK_K / 4]; int8_t scales[NX_QK_K / 16]; nx_half d; } nx_block_q6_K;
/* Q8_K: activation format for K-quant dot products; d is a float (not half); bsums[j] =
 * sum of qs[16j..16j+15]. */
typedef struct { float d; int8_t qs[NX_QK_K]; int16_t bsums[NX_QK_K / 16]; } nx_block_q8_K;

/* IQ4_NL: 4-bit indices into a fixed non-linear table of 16 int8 values; x = d * table[q]. */
typedef struct { nx_half d; uint8_t qs[NX_QK4_NL / 2]; } nx_block_iq4_nl;
/* IQ4_XS: 8 sub-blocks of 32 with 6-bit scales ls (low 4 bits in scales_l, high 2 in scales_h);
 * x = d * (ls - 32) * table[q]. */
typedef struct { nx_half d; uint16_t scales_h; uint8_t scales_l[NX_QK_K / 64]; uint8_t qs[NX_QK_K / 2]; } nx_block_iq4_xs;

static_assert(sizeof(nx_block_q4_0) == 18, "q4_0 size");
static_assert(sizeof(nx_block_q4_1) == 20, "q4_1 size");
static_assert(sizeof(nx_block_q5_0) == 22, "q5_0 size");
static_assert(sizeof(nx_block_q5_1) == 24, "q5_1 size");
static_assert(sizeof(nx_block_q8_0) == 34, "q8_0 size");
static_assert(sizeof(nx_block_q8_1) == 36, "q8_1 size");
static_assert(sizeof(nx_block_q2_K) == 84, "q2_K size");
static_assert(sizeof(nx_block_q3_K) == 110, "q3_K size");
static_assert(sizeof(nx_block_q4_K) == 144, "q4_K size");
static_assert(sizeof(nx_block_q5_K) == 176, "q5_K size");
static_assert(sizeof(nx_block_q6_K) == 210, "q6_K size");
static_assert(sizeof(nx_block_q8_K) == 292, "q8_K size");
static_assert(sizeof(nx_block_iq4_nl) == 18, "iq4_nl size");
static_assert(sizeof(nx_block_iq4_xs) == 136, "iq4_xs size");

/* The IQ4_NL / IQ4_XS value table. */
extern const int8_t nx_iq4nl_values[16];

#endif
