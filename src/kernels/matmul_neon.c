#define NX_NEON_DOT 0
#define NX_NEON_FN nx_mm_kernel_neon
#include "kernels/matmul_neon_kernels.h"
