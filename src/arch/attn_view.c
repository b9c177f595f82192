/*
 * attn_view.c — the rows-to-kernel driver every architecture's attention shares (attn_view.h).
 */
#include "arch/attn_view.h"

void nx_attend_rows(const nx_kv *kv, int layer, int H, int Hkv, int D, int n, const nx_seq_id *seq, const int32_t *lo,
                    const int32_t *hi, const float *q, size_t q_row, size_t q_head, float *o, float scale, float *work,
                    int ith, int nth) {
    const int grp = H / Hkv, rb = nx_attn_rows(grp), n_chunks = (n + rb - 1) / rb;
    nx_attn_q qs[NX_ATTN_MAX_Q];
    for (long w = ith; w < (long)n_chunks * Hkv; w += nth) {
        const int c = (int)(w / Hkv), kvh = (int)(w % Hkv);
        const int r1 = (c + 1) * rb < n ? (c + 1) * rb : n;
        for (int r0 = c * rb; r0 < r1;) {
            const int sq = seq[r0];
            int re = r0 + 1;
            while (re < r1 && seq[re] == sq) re++;
            int nq = 0;
            for (int r = r0; r < re; r++)
                for (int h = kvh * grp; h < (kvh + 1) * grp; h++)
                    qs[nq++] = (nx_attn_q){q + (size_t)r * q_row + (size_t)h * q_head, o + ((size_t)r * H + h) * D,
                                           lo ? lo[r] : 0, hi[r]};
            const nx_attn_kv v = nx_attn_view(kv, sq, layer, kvh, Hkv, D, D);
            nx_attn(&v, qs, nq, D, D, scale, work);
            r0 = re;
        }
    }
}
