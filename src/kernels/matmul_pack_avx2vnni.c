/*
 * matmul_pack_avx2vnni.c — the avx2_vnni level's packed kernels: matmul_pack_avx2.c compiled
 * again with NX_PK_VNNI (and -mavxvnni, CMakeLists.txt), so one body serves both levels and
 * the two cannot drift apart. See that file for the layouts and the float contract.
 */
#define NX_PK_VNNI 1
#include "matmul_pack_avx2.c"
