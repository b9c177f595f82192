/* stub */
#include "kernels/matmul_impl.h"
nx_mm_kernel NX_NEON_FN(nx_type type) { (void)type; return NULL; }
