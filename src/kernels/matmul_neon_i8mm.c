/* matmul_neon_i8mm.c — the aarch64 i8mm level's matmul kernels (matmul_neon_kernels.h with
 * SMMLA; built with -march=armv8.2-a+dotprod+i8mm, run only where HWCAP2_I8MM says so). */
#define NX_NEON_DOT 1
#define NX_NEON_I8MM 1
#define NX_NEON_FN nx_mm_kernel_neon_i8mm
#include "kernels/matmul_neon_kernels.h"
