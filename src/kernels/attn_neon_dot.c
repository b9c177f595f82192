/* attn_neon_dot.c — the dot product levels' scores_qk (attn_neon_qk.h with SDOT; built with
 * -march=armv8.2-a+dotprod, run only where the CPU level says so). The other pieces of
 * nx_attn_tier_neon_dot are attn_neon.c's. */
#define NX_NEON_DOT 1
#define NX_QK_FN nx_attn_scores_qk_neon_dot
#include "kernels/attn_neon_qk.h"
