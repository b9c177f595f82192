/*
 * qwen35_dn_run.h — the body of a DeltaNet run (qwen35_dn.h) shared by the x86 tiers: included
 * once by each ISA file after it defines dn_row_o (one state row, one token), dn_rows4_run (four
 * rows through the T tokens, each with dn_row_o's arithmetic), DN_RUN_NAME, DN_LANES (floats per vector)
 * and DN_BYTES (its alignment). The run walks the state rows four at a time, keeps them in L1
 * across the T tokens and stores per token as qwen35_dn.h says; the ISA files differ only in
 * those pieces.
 */
/* One state row (l, row i of the state) through the T tokens: the tail rows of a 4-row head, or
 * every row when dk is not a multiple of the vector. */
static inline void dn_row_run(float *l, int i, size_t rb, int T, int dk, const float *const *k, const float *const *q,
                              const float *const *v, const float *beta, const float *decay, float scale,
                              float *const *o, float *const *Sd) {
    for (int t = 0; t < T; t++) {
        if (o[t]) o[t][i] = dn_row_o(1, l, l, dk, k[t], q[t], v[t][i], beta[t], decay[t], scale);
        else dn_row_o(0, l, l, dk, k[t], q[t], v[t][i], beta[t], decay[t], scale);
        if (Sd[t]) memcpy(Sd[t] + (size_t)i * dk, l, rb);
    }
}

void DN_RUN_NAME(const float *S, float *const *Sd, int T, int dv, int dk, const float *const *k, const float *const *q,
                 const float *const *v, const float *beta, const float *decay, float scale, float *const *o) {
    float lb[4][QW_DN_RUN_MAX_DK] __attribute__((aligned(DN_BYTES)));
    const size_t rb = (size_t)dk * sizeof(float);
    /* four state rows at a time (dn_rows4_run), single rows for the rest; replayed tokens (o[t]
     * NULL) skip the output dot */
    for (int i = 0; i < dv;) {
        if (dk % DN_LANES == 0 && i + 4 <= dv) {
            /* the state comes from DRAM (the weights swept it out): the first token's pass
             * prefetches the rows 8 ahead, spread over its loop */
            const float *pf = i + 12 <= dv ? S + (size_t)(i + 8) * dk : NULL;
            for (int r = 0; r < 4; r++) memcpy(lb[r], S + (size_t)(i + r) * dk, rb);
            dn_rows4_run(lb, T, dk, i, k, q, v, beta, decay, scale, o, Sd, pf);
            i += 4;
            continue;
        }
        if (i + 4 < dv)
            for (size_t bo = 0; bo < rb; bo += 64) _mm_prefetch((const char *)(S + (size_t)(i + 4) * dk) + bo, _MM_HINT_T0);
        memcpy(lb[0], S + (size_t)i * dk, rb);
        dn_row_run(lb[0], i, rb, T, dk, k, q, v, beta, decay, scale, o, Sd);
        i++;
    }
}
