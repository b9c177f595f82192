/*
 * attn_avx2vnni.c — the avx2_vnni level's attention tier: attn_avx2.c compiled again with
 * NX_ATTN_VNNI (and -mavxvnni, CMakeLists.txt): the integer Q.K path's block sums through
 * AVX-VNNI's vpdpbusd instead of maddubs + madd (+ sign for Q8_0); every other piece as in
 * AVX2. One body for both levels; the integer sums are exact either way, so the bits agree.
 */
#define NX_ATTN_VNNI 1
#include "attn_avx2.c"
