/*
 * quant_search.h — the scale searches shared by the quantizers of quant_k.c and quant_legacy.c
 * (internal to src/quant/). Defined in quant_k.c; see the comments there.
 */
#ifndef NX_QUANT_SEARCH_H
#define NX_QUANT_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

/* Symmetric scale, codes L = l + nmax for l in [-nmax, nmax-1], weights qw (NULL: x^2). */
float nx_qs_fit_symmetric(int n, int nmax, const float *x, const float *qw, int8_t *L);
/* Affine fit x ~ scale * L - *min_out, L in [0, nmax], weights w; Laux: n bytes of scratch. */
float nx_qs_fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *min_out, uint8_t *Laux,
                       float rmin, float rdelta, int nstep, bool use_mad);

#endif
