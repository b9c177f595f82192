#define NX_NEON_DOT 1
#define NX_NEON_FN nx_mm_kernel_neon_dot
#include "kernels/matmul_neon_kernels.h"
