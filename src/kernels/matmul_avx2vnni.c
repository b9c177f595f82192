/*
 * matmul_avx2vnni.c — the avx2_vnni level's unpacked kernels: matmul_avx2.c compiled again with
 * NX_PK_VNNI (and -mavxvnni, CMakeLists.txt): vpdpbusd for the 32-value types' dots, the rest
 * as in AVX2. One body for both levels; see that file for the contract.
 */
#define NX_PK_VNNI 1
#include "matmul_avx2.c"
