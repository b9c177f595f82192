/*
 * matmul.c — nx_matmul: argument checks, activation quantization, kernel choice and the
 * split of output rows across threads. The arithmetic lives in matmul_{scalar,avx2,avx512}.c.
 *
 * Owns the promise of batch and thread invariance at the dispatch level: every (weight row,
 * activation row) pair is computed by one kernel call whose result does not depend on which
 * other rows share the call, so splitting rows across threads or tiles changes nothing.
 * Must never: split the reduction dimension, or quantize activations differently per level.
 */
#include "kernels/matmul.h"
#include "kernels/matmul_impl.h"
#include "kernels/cpu.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===== Types ===== */

typedef enum { ACT_FLOAT, ACT_B32, ACT_B256 } act_kind;

static bool mm_type(nx_type type, act_kind *kind) {
    act_kind k;
    switch (type) {
    case NX_TYPE_F32: case NX_TYPE_F16: case NX_TYPE_BF16: k = ACT_FLOAT; break;
    case NX_TYPE_Q4_0: case NX_TYPE_Q4_1: case NX_TYPE_Q5_0: case NX_TYPE_Q5_1:
    case NX_TYPE_Q8_0: case NX_TYPE_IQ4_NL: k = ACT_B32; break;
    case NX_TYPE_Q4_K: case NX_TYPE_Q5_K: case NX_TYPE_Q6_K: case NX_TYPE_IQ4_XS:
    case NX_TYPE_Q2_K: case NX_TYPE_Q3_K: k = ACT_B256; break;
    default: return false;
    }
    if (kind) *kind = k;
    return true;
}

bool nx_matmul_supports(nx_type type) { return mm_type(type, NULL); }

/* ===== Scratch ===== */

#define ALIGN64(n) (((n) + 63) & ~(size_t)63)

void nx_matmul_scratch_init(nx_matmul_scratch *s) {
    if (s) { s->buf = NULL; s->cap = 0; s->observe = NULL; s->observe_user = NULL; }
}

void nx_matmul_scratch_free(nx_matmul_scratch *s) {
    if (!s) return;
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

typedef struct act_plan {
    size_t q_row, d_row, s_row, bs_row, de_row, cs_row;   /* bytes per activation row of each array */
    size_t total;
} act_plan;

/* Per-array row sizes are padded to 64 bytes so every row starts cache-line aligned. */
static act_plan plan_act(act_kind kind, int64_t n_in, int64_t n_rows) {
    act_plan p = {0};
    if (kind == ACT_FLOAT) return p;
    int64_t bsz = kind == ACT_B32 ? 32 : 256, nb = n_in / bsz;
    p.q_row = ALIGN64((size_t)n_in);
    if (p.q_row % 4096 == 0) p.q_row += 64;   /* rows 4 KiB apart share L1 sets: a batch's loads would evict each other */
    p.d_row = ALIGN64((size_t)nb * sizeof(float));
    p.s_row = kind == ACT_B32 ? p.d_row : 0;
    p.bs_row = kind == ACT_B256 ? ALIGN64((size_t)nb * 16 * sizeof(int16_t)) : 0;
    p.de_row = kind == ACT_B32 ? (size_t)(nb + 1) / 2 * 16 * sizeof(float) : 0;   /* multiple of 64 */
    p.cs_row = kind == ACT_B32 ? ALIGN64((size_t)nb * sizeof(int32_t)) : 0;   /* packed kernels only */
    p.total = (p.q_row + p.d_row + p.s_row + p.bs_row + p.de_row + p.cs_row) * (size_t)n_rows;
    return p;
}

/* The AVX-512 Q4_K kernel wants its activations permuted: one more copy of q in the scratch. */
static bool q4k_permuted(nx_type type) { return NX_MM_X86 && type == NX_TYPE_Q4_K && nx_cpu_level_get() == NX_CPU_AVX512; }

/* The prefill copy of the AVX-512 packed kernels (matmul_impl.h: qi, ci): bytes for n_rows
 * rows (whole tiles only; the rows past the last whole tile run from the plain layout). */
static bool pk_b32(nx_type t) { return t == NX_TYPE_Q8_0 || t == NX_TYPE_Q4_0 || t == NX_TYPE_IQ4_NL; }   /* packed, 32-value blocks: cs */
static bool itile_type(nx_type t) {
    return NX_MM_X86 && (pk_b32(t) || t == NX_TYPE_Q4_K || t == NX_TYPE_Q5_K || t == NX_TYPE_Q6_K);
}
static size_t itile_size(nx_type t, int64_t n_in, int64_t n_rows) {
    if (!itile_type(t)) return 0;
    const size_t ci = pk_b32(t) ? NX_MM_ICI_B32 : NX_MM_ICI_B256;
    return (size_t)(n_rows / NX_MM_ITILE) * ((size_t)n_in * NX_MM_ITILE + (size_t)(n_in / (pk_b32(t) ? 32 : 256)) * ci);
}

size_t nx_matmul_scratch_size(nx_type type, int64_t n_in, int64_t n_rows) {
    act_kind kind;
    if (!mm_type(type, &kind) || n_in <= 0 || n_rows <= 0) return 0;
    act_plan p = plan_act(kind, n_in, n_rows);
    return p.total + (q4k_permuted(type) ? p.q_row * (size_t)n_rows : 0) +
           itile_size(type, n_in, n_rows);
}

static nx_status scratch_reserve(nx_matmul_scratch *s, size_t need, nx_error *err) {
    if (s->cap >= need) return NX_OK;
    void *p = aligned_alloc(64, ALIGN64(need));
    if (!p) return nx_fail(err, NX_ERR_NOMEM, "matmul: cannot allocate %zu bytes of activation scratch", need);
    free(s->buf);
    s->buf = p;
    s->cap = ALIGN64(need);
    return NX_OK;
}

/* ===== Activation quantization (identical on every level) ===== */

/* The reference quantizer (see matmul_impl.h). Rounding by adding and subtracting 1.5*2^23
 * is round-half-even in IEEE single precision, like the SIMD conversions, with no libm call. */
void nx_mm_quantize_scalar(const float *x, int64_t n, int B, int bias, uint8_t *q, float *d, float *s, int16_t *bs) {
    for (int64_t b = 0; b < n / B; b++) {
        const float *xb = x + b * B;
        float amax = 0.0f;
        for (int i = 0; i < B; i++) {
            float a = fabsf(xb[i]);
            if (a > amax) amax = a;
        }
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        int sum = 0;
        for (int g = 0; g < B; g += 16) {
            int gs = 0;
            for (int i = g; i < g + 16; i++) {
                float v = xb[i] * id;
                if (!(v >= -127.0f)) v = -127.0f;
                if (v > 127.0f) v = 127.0f;
                int qi = (int)((v + 12582912.0f) - 12582912.0f);
                q[b * B + i] = (uint8_t)(qi + bias);
                gs += qi;
            }
            if (bs) bs[b * (B / 16) + g / 16] = (int16_t)gs;
            sum += gs;
        }
        d[b] = db;
        if (s) s[b] = db * (float)sum;
    }
}

static nx_mm_quant_fn pick_quant(void) {
    switch (nx_cpu_level_get()) {
#if NX_MM_X86
    case NX_CPU_AVX512: return nx_mm_quantize_avx512;
    case NX_CPU_AVX2_VNNI: case NX_CPU_AVX2: return nx_mm_quantize_avx2;
#endif
#if NX_MM_NEON
    case NX_CPU_NEON_I8MM: case NX_CPU_NEON_DOT: case NX_CPU_NEON: return nx_mm_quantize_neon;
#endif
    default: return nx_mm_quantize_scalar;
    }
}

/* One quantize pass: rows x chunks of blocks (every block is quantized on its own, so a chunk's
 * bytes do not depend on the split), plus the Q8_0 scale expansion de and, for the packed
 * kernels, cs[r][b] = -128 * (sum of block b's signed codes), which cancels their flip of the
 * weight codes to unsigned exactly. */
typedef struct quant_job {
    nx_mm_quant_fn quant;
    act_kind kind;
    int bias;
    bool cs;
    const float *x;
    int64_t ldx, nb, chunk, n_chunks;   /* chunk: blocks per task */
    nx_mm_act *a;
} quant_job;

static void quant_chunk(const quant_job *j, int64_t r, int64_t c) {
    const int B = j->kind == ACT_B32 ? 32 : 256;
    nx_mm_act *a = j->a;
    const int64_t b0 = c * j->chunk, b1 = b0 + j->chunk < j->nb ? b0 + j->chunk : j->nb;
    uint8_t *q = (uint8_t *)a->q + r * a->q_stride + b0 * B;
    float *d = (float *)a->d + r * a->d_stride + b0;
    j->quant(j->x + r * j->ldx + b0 * B, (b1 - b0) * B, B, j->bias, q, d,
             j->kind == ACT_B32 ? (float *)a->s + r * a->s_stride + b0 : NULL,
             j->kind == ACT_B256 ? (int16_t *)a->bs + r * a->bs_stride + b0 * (B / 16) : NULL);
    if (j->kind != ACT_B32) return;
    float *der = (float *)a->de + r * a->de_stride;
    for (int64_t b = b0; b < b1; b++) {   /* v local, no branch: vector stores */
        const float v = d[b - b0];
        for (int l = 0; l < 8; l++) der[8 * b + l] = v;
    }
    if (b1 == j->nb && j->nb % 2) memset(der + 8 * j->nb, 0, 8 * sizeof(float));
    if (!j->cs) return;
    int32_t *cs = (int32_t *)a->cs + r * a->cs_stride;
    for (int64_t b = b0; b < b1; b++) {
        const int8_t *qb = (const int8_t *)q + (b - b0) * 32;
        int16_t sum = 0;   /* |sum| <= 32 * 127: int16 lets the loop vectorize narrow */
        for (int i = 0; i < 32; i++) sum = (int16_t)(sum + qb[i]);
        cs[b] = -128 * (int32_t)sum;
    }
}

static void quant_task(void *arg, int i, int n) {
    (void)n;
    const quant_job *j = arg;
    quant_chunk(j, i / j->n_chunks, i % j->n_chunks);
}

/* Values per quantize task: below twice this a call stays on the calling thread (a hand-off
 * costs more than a verify's few thousand values); above, the serial part of a prefill or of a
 * very wide layer (inflated FFNs: 262144 inputs per row) spreads over the pool. */
#define QUANT_TASK_VALUES 32768

static void quantize_rows(nx_threadpool *tp, act_kind kind, int bias, bool want_cs, const float *x, int64_t n_rows,
                          int64_t ldx, int64_t n_in, const act_plan *p, uint8_t *base, nx_mm_act *a) {
    const int B = kind == ACT_B32 ? 32 : 256;
    uint8_t *q = base;
    float *d = (float *)(base + p->q_row * (size_t)n_rows);
    float *s = (float *)((uint8_t *)d + p->d_row * (size_t)n_rows);
    int16_t *bs = (int16_t *)((uint8_t *)s + p->s_row * (size_t)n_rows);
    float *de = (float *)((uint8_t *)bs + p->bs_row * (size_t)n_rows);
    int32_t *cs = (int32_t *)((uint8_t *)de + p->de_row * (size_t)n_rows);
    a->q = q;
    a->d = d;
    a->s = kind == ACT_B32 ? s : NULL;
    a->bs = kind == ACT_B256 ? bs : NULL;
    a->q_stride = (int64_t)p->q_row;
    a->d_stride = (int64_t)(p->d_row / sizeof(float));
    a->s_stride = (int64_t)(p->s_row / sizeof(float));
    a->bs_stride = (int64_t)(p->bs_row / sizeof(int16_t));
    a->de = kind == ACT_B32 ? de : NULL;
    a->de_stride = (int64_t)(p->de_row / sizeof(float));
    a->cs = want_cs && kind == ACT_B32 ? cs : NULL;
    a->qi = a->ci = NULL;
    a->cs_stride = (int64_t)(p->cs_row / sizeof(int32_t));
    const int64_t nb = n_in / B;
    quant_job j = {.quant = pick_quant(), .kind = kind, .bias = bias, .cs = a->cs != NULL, .x = x, .ldx = ldx,
                   .nb = nb, .chunk = nb, .n_chunks = 1, .a = a};
    const int64_t total = n_rows * n_in;
    if (!tp || nx_threadpool_size(tp) < 2 || total < 2 * QUANT_TASK_VALUES) {
        for (int64_t r = 0; r < n_rows; r++) quant_chunk(&j, r, 0);
        return;
    }
    /* rows of at most QUANT_TASK_VALUES values split into chunks; a prefill's rows go whole */
    j.chunk = n_in > QUANT_TASK_VALUES ? QUANT_TASK_VALUES / B : nb;
    j.n_chunks = (nb + j.chunk - 1) / j.chunk;
    const int64_t n_tasks = n_rows * j.n_chunks;
    if (n_tasks > INT_MAX) {
        for (int64_t r = 0; r < n_rows; r++)
            for (int64_t c = 0; c < j.n_chunks; c++) quant_chunk(&j, r, c);
        return;
    }
    nx_threadpool_run_tasks(tp, quant_task, &j, (int)n_tasks);
}

/* ===== Packed weights (layouts: matmul_pack.c) ===== */

static void fill_itile(nx_mm_act *a, uint8_t *buf, int64_t n_rows, int64_t n_in, int B) {
    const int64_t nb = n_in / B, nt = n_rows / NX_MM_ITILE;
    const size_t ci = B == 32 ? NX_MM_ICI_B32 : NX_MM_ICI_B256;
    a->qi = buf;
    a->ci = buf + (size_t)nt * (size_t)n_in * NX_MM_ITILE;
    a->qi_stride = n_in * NX_MM_ITILE;
    a->ci_stride = nb * (int64_t)ci;
    for (int64_t t = 0; t < nt; t++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *q = buf + (size_t)t * (size_t)a->qi_stride + (size_t)b * NX_MM_ITILE * (size_t)B;
            uint8_t *c = (uint8_t *)a->ci + (size_t)t * (size_t)a->ci_stride + (size_t)b * ci;
            for (int r = 0; r < NX_MM_ITILE; r++) {
                const int64_t row = t * NX_MM_ITILE + r;
                memcpy(q + B * r, a->q + row * a->q_stride + B * b, (size_t)B);
                if (B == 32) {
                    memcpy(c + 4 * r, a->cs + row * a->cs_stride + b, 4);
                    memcpy(c + 32 + 4 * r, a->d + row * a->d_stride + b, 4);
                } else {
                    memcpy(c + 32 * r, a->bs + row * a->bs_stride + 16 * b, 32);
                    memcpy(c + 256 + 4 * r, a->d + row * a->d_stride + b, 4);
                }
            }
        }
}

/* ===== Dispatch ===== */

/* The kernel for a type at the machine's level (or the level below that has one), the
 * activation rows it takes per call and the activation bias it reads. */
static nx_mm_kernel pick_kernel(nx_type type, int *tile, int *bias) {
    nx_mm_kernel k = NULL;
    *tile = NX_MM_TILE;
    *bias = nx_mm_act_bias(type);
    switch (nx_cpu_level_get()) {
#if NX_MM_X86
    case NX_CPU_AVX512: k = nx_mm_kernel_avx512(type); if (k) { *tile = nx_mm_tile_avx512(type); break; } /* fall through */
    case NX_CPU_AVX2_VNNI: k = nx_mm_kernel_avx2vnni(type); if (k) { *bias = nx_mm_act_bias_avx2(type); break; } __attribute__((fallthrough));
    case NX_CPU_AVX2:   k = nx_mm_kernel_avx2(type); if (k) { *bias = nx_mm_act_bias_avx2(type); break; } __attribute__((fallthrough));
#endif
#if NX_MM_NEON
    case NX_CPU_NEON_I8MM: k = nx_mm_kernel_neon_i8mm(type); if (k) { *bias = 0; break; } __attribute__((fallthrough));
    case NX_CPU_NEON_DOT: k = nx_mm_kernel_neon_dot(type); if (k) { *bias = 0; break; } __attribute__((fallthrough));
    case NX_CPU_NEON:     k = nx_mm_kernel_neon(type); if (k) { *bias = 0; break; } __attribute__((fallthrough));
#endif
    default: k = nx_mm_kernel_scalar(type); break;
    }
    return k;
}

#define MM_MAX_SEG 8

typedef struct mm_seg {
    const uint8_t *w;      /* first output row of the segment */
    size_t w_stride;
    int64_t n_out;
    float *y;
    int64_t ldy;
    int64_t chunk;         /* weight rows per cache block when n_rows > one tile */
    const uint8_t *wp;     /* packed jobs: the segment's first group of rows */
    nx_mm_pkernel pkern;   /* packed jobs: the segment's kernel, blocks per row, bytes per (group, block) */
    int64_t pk_nb;
    size_t pk_bb;
} mm_seg;

typedef struct mm_job {
    nx_mm_kernel kern;
    nx_mm_pkernel pkern;   /* set: every segment is packed; rows and threads go by groups of 16 */
    bool pk_mixed;         /* packed segments of different K-quant types: threads split by bytes */
    int64_t pk_nb;         /* packed: blocks per row */
    size_t pk_bb;          /* packed: bytes per (group, block) */
    int tile;              /* activation rows per kernel call */
    int64_t n_in, n_rows;
    nx_mm_act act;
    int n_seg;
    int64_t n_total;       /* output rows over all segments (same type and n_in: same bytes per row) */
    mm_seg seg[MM_MAX_SEG];
} mm_job;

/* Output rows [lo, hi) of one segment. */
static void mm_run(const mm_job *j, const mm_seg *g, long lo, long hi) {
    if (lo >= hi) return;
    if (j->n_rows <= j->tile) {
        j->kern(j->n_in, g->w + (size_t)lo * g->w_stride, g->w_stride, hi - lo, &j->act, (int)j->n_rows, g->y + lo, g->ldy);
        return;
    }
    /* Many activation rows (prefill): keep a block of weight rows in L2 and run every tile
     * of activation rows over it before moving on. */
    for (long o = lo; o < hi; o += g->chunk) {
        long n_w = hi - o < g->chunk ? hi - o : g->chunk;
        for (int64_t r = 0; r < j->n_rows; r += j->tile) {
            int n_act = (int)(j->n_rows - r < j->tile ? j->n_rows - r : j->tile);
            nx_mm_act a = nx_mm_act_rows(&j->act, r);
            j->kern(j->n_in, g->w + (size_t)o * g->w_stride, g->w_stride, n_w, &a, n_act, g->y + r * g->ldy + o, g->ldy);
        }
    }
}

/* Packed: groups [lo, hi) of one segment; prefill keeps ~256 KB of groups in L2 while every
 * tile of activation rows runs over them. */
static void mm_run_packed(const mm_job *j, const mm_seg *g, long lo, long hi) {
    const int64_t nb = g->pk_nb;
    const size_t gs = (size_t)nb * g->pk_bb;
    long chunk = (long)((256u << 10) / gs);
    if (chunk < 1) chunk = 1;
    if (j->n_rows <= NX_MM_TILE) chunk = hi - lo;
    for (long o = lo; o < hi; o += chunk) {
        const long n_g = hi - o < chunk ? hi - o : chunk;
        for (int64_t r = 0; r < j->n_rows; r += NX_MM_TILE) {
            const int n_act = (int)(j->n_rows - r < NX_MM_TILE ? j->n_rows - r : NX_MM_TILE);
            const nx_mm_act a = nx_mm_act_rows(&j->act, r);
            g->pkern(nb, g->wp + (size_t)o * gs, n_g, &a, n_act, g->y + r * g->ldy + (int64_t)o * NX_MM_PACK_ROWS, g->ldy);
        }
    }
}

/* A thread's share is a contiguous range of the segments' concatenated output rows (packed
 * jobs: of their groups of 16 rows). */
static void mm_task(void *arg, int ith, int nth) {
    const mm_job *j = arg;
    long lo, hi;
    if (j->pk_mixed) {   /* a thread's share: a contiguous range of the segments' weight bytes */
        long total = 0;
        for (int k = 0; k < j->n_seg; k++) total += (long)(j->seg[k].n_out / NX_MM_PACK_ROWS) * (long)(j->seg[k].pk_nb * (int64_t)j->seg[k].pk_bb);
        nx_split_range(total, ith, nth, &lo, &hi);
        long base = 0;
        for (int k = 0; k < j->n_seg; k++) {
            const mm_seg *g = &j->seg[k];
            const long c = (long)(g->pk_nb * (int64_t)g->pk_bb), ng = (long)(g->n_out / NX_MM_PACK_ROWS);
            /* the groups that start inside [lo, hi) */
            long a = lo > base ? (lo - base + c - 1) / c : 0, b = hi > base ? (hi - base + c - 1) / c : 0;
            if (a > ng) a = ng;
            if (b > ng) b = ng;
            if (a < b) mm_run_packed(j, g, a, b);
            base += ng * c;
        }
        return;
    }
    if (j->pkern) {
        nx_split_range((long)(j->n_total / NX_MM_PACK_ROWS), ith, nth, &lo, &hi);
        long base = 0;
        for (int k = 0; k < j->n_seg && base < hi; k++) {
            const mm_seg *g = &j->seg[k];
            const long ng = (long)(g->n_out / NX_MM_PACK_ROWS);
            long a = lo > base ? lo - base : 0, b = hi - base < ng ? hi - base : ng;
            if (a < b) mm_run_packed(j, g, a, b);
            base += ng;
        }
        return;
    }
    nx_split_range((long)j->n_total, ith, nth, &lo, &hi);
    long base = 0;
    for (int k = 0; k < j->n_seg && base < hi; k++) {
        const mm_seg *g = &j->seg[k];
        long a = lo > base ? lo - base : 0, b = hi - base < g->n_out ? hi - base : (long)g->n_out;
        mm_run(j, g, a, b);
        base += (long)g->n_out;
    }
}

/* Set the job's packed kernel and layout for w (packed) at the current level; false: none. */
static bool pack_job(mm_job *job, const nx_tensor *w) {
    int bv;
    if (!nx_mm_pack_format(w->type, &bv, &job->pk_bb) || !(job->pkern = nx_mm_pick_pkernel(w->type))) return false;
    job->pk_nb = w->ne[0] / bv;
    return true;
}

/* A packed segment: its copy, kernel and layout (pack_job has checked the type has them). */
static void pack_seg(mm_seg *g, const nx_tensor *w) {
    int bv;
    g->wp = w->packed;
    g->pkern = nx_mm_pick_pkernel(w->type);
    nx_mm_pack_format(w->type, &bv, &g->pk_bb);
    g->pk_nb = w->ne[0] / bv;
}

/* True if every weight is a packed K-quant with a packed kernel here and the same input width:
 * they read one activation format (256-value blocks, signed codes, d and bs), so one quantized
 * copy of x serves them all, and their prefill copies (fill_itile) have one layout too. */
static bool mixed_kquants(const nx_mm_out *outs, int n) {
    for (int k = 0; k < n; k++) {
        const nx_tensor *w = outs[k].w;
        if (w->type != NX_TYPE_Q4_K && w->type != NX_TYPE_Q5_K && w->type != NX_TYPE_Q6_K) return false;
        if (!w->packed || !nx_mm_pick_pkernel(w->type) || w->ne[0] != outs[0].w->ne[0]) return false;
    }
    return true;
}

/* Checks of one weight against the call; fills *kind (the activation format it needs). */
static nx_status mm_check(const nx_tensor *w, int64_t o0, int64_t o1, const float *x, int64_t n_rows, int64_t ldx,
                          const float *y, int64_t ldy, act_kind *kind, nx_error *err) {
    if (!w) return nx_fail(err, NX_ERR_INVALID_ARG, "matmul: no weight tensor");
    const char *name = w->name ? w->name : "(unnamed)";
    if (!mm_type(w->type, kind))
        return nx_fail(err, NX_ERR_UNSUPPORTED, "matmul: weight '%s' has type %s, which has no matmul kernel",
                       name, nx_type_name(w->type));
    const nx_type_traits *tt = nx_type_info(w->type);
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    if (w->n_dims > 2 && (w->ne[2] != 1 || w->ne[3] != 1))
        return nx_fail(err, NX_ERR_INVALID_ARG, "matmul: weight '%s' is not 2-D (ne = %lld x %lld x %lld x %lld)",
                       name, (long long)w->ne[0], (long long)w->ne[1], (long long)w->ne[2], (long long)w->ne[3]);
    if (n_in <= 0 || n_out <= 0 || n_in % tt->blck_size != 0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "matmul: weight '%s' has %lld x %lld values; rows must be a positive multiple of %lld (%s blocks)",
                       name, (long long)n_in, (long long)n_out, (long long)tt->blck_size, tt->name);
    const size_t row_bytes = nx_row_size(w->type, n_in);
    if (w->nb[1] < row_bytes || !w->data)
        return nx_fail(err, NX_ERR_INVALID_ARG, "matmul: weight '%s' has row stride %zu < row size %zu or no data",
                       name, w->nb[1], row_bytes);
    if (o0 < 0 || o1 > n_out || o0 > o1)
        return nx_fail(err, NX_ERR_RANGE, "matmul: output rows [%lld, %lld) outside weight '%s' (%lld rows)",
                       (long long)o0, (long long)o1, name, (long long)n_out);
    if (n_rows < 0) return nx_fail(err, NX_ERR_INVALID_ARG, "matmul: negative row count %lld", (long long)n_rows);
    if (n_rows == 0 || o0 == o1) return NX_OK;
    if (!x || !y) return nx_fail(err, NX_ERR_INVALID_ARG, "matmul: NULL activation or output");
    if (ldx < n_in || ldy < o1 - o0)
        return nx_fail(err, NX_ERR_INVALID_ARG, "matmul: strides ldx %lld < %lld or ldy %lld < %lld",
                       (long long)ldx, (long long)n_in, (long long)ldy, (long long)(o1 - o0));
    return NX_OK;
}

static void mm_seg_init(mm_seg *g, const nx_tensor *w, int64_t o0, int64_t o1, float *y, int64_t ldy) {
    g->w = (const uint8_t *)w->data + (size_t)o0 * w->nb[1];
    g->w_stride = w->nb[1];
    g->n_out = o1 - o0;
    g->y = y;
    g->ldy = ldy;
    /* ~256 KB of weights per cache block: a few per L2, many per thread. */
    g->chunk = (int64_t)((256u << 10) / nx_row_size(w->type, w->ne[0]));
    if (g->chunk < 4) g->chunk = 4;
}

/* Quantize the activations for weights of this type (if it needs it) and run the job. */
static nx_status mm_dispatch(nx_threadpool *tp, nx_matmul_scratch *scratch, nx_type type, act_kind kind,
                             const float *x, int64_t ldx, mm_job *job, nx_error *err) {
    int bias;
    job->kern = pick_kernel(type, &job->tile, &bias);
    if (job->pkern) bias = 0;   /* packed kernels take signed codes and cs */
    if (!job->kern) return nx_fail(err, NX_ERR_INTERNAL, "matmul: no kernel for %s", nx_type_name(type));
    nx_matmul_scratch own = {0};
    if (kind == ACT_FLOAT) {
        job->act.x = x;
        job->act.ldx = ldx;
    } else {
        act_plan p = plan_act(kind, job->n_in, job->n_rows);
        nx_matmul_scratch *s = scratch ? scratch : &own;
        const bool perm = q4k_permuted(type) && !job->pkern;   /* packed kernels read the codes in order */
        /* Prefill only: a verify batch (<= one tile of rows) streams each weight once, as is. */
        const size_t it = job->pkern && job->n_rows > NX_MM_TILE && nx_cpu_level_get() == NX_CPU_AVX512
                              ? itile_size(type, job->n_in, job->n_rows) : 0;
        nx_status st = scratch_reserve(s, p.total + (perm ? p.q_row * (size_t)job->n_rows : 0) + it, err);
        if (st != NX_OK) return st;
        quantize_rows(tp, kind, bias, job->pkern && pk_b32(type), x, job->n_rows, ldx, job->n_in, &p, s->buf,
                      &job->act);
        if (it) fill_itile(&job->act, (uint8_t *)s->buf + p.total, job->n_rows, job->n_in, kind == ACT_B32 ? 32 : 256);
#if NX_MM_X86
        if (perm) {
            uint8_t *qp = (uint8_t *)s->buf + p.total;
            for (int64_t r = 0; r < job->n_rows; r++)
                nx_mm_q4k_perm_avx512(job->act.q + r * job->act.q_stride, qp + (size_t)r * p.q_row, job->n_in);
            job->act.q = qp;
        }
#endif
    }
    job->act.prefill = job->n_rows > NX_MM_TILE;
    nx_threadpool_run(tp, mm_task, job);
    nx_matmul_scratch_free(&own);
    return NX_OK;
}

nx_status nx_matmul_rows(nx_threadpool *tp, nx_matmul_scratch *scratch, const nx_tensor *w,
                         int64_t o0, int64_t o1, const float *x, int64_t n_rows, int64_t ldx,
                         float *y, int64_t ldy, nx_error *err) {
    act_kind kind;
    nx_status st = mm_check(w, o0, o1, x, n_rows, ldx, y, ldy, &kind, err);
    if (st != NX_OK || n_rows == 0 || o0 == o1) return st;
    if (scratch && scratch->observe) scratch->observe(scratch->observe_user, w, x, n_rows, ldx);
    mm_job job = {.n_in = w->ne[0], .n_rows = n_rows, .n_seg = 1, .n_total = o1 - o0};
    mm_seg_init(&job.seg[0], w, o0, o1, y, ldy);
    if (w->packed && o0 % NX_MM_PACK_ROWS == 0 && o1 % NX_MM_PACK_ROWS == 0 && pack_job(&job, w)) {
        pack_seg(&job.seg[0], w);
        job.seg[0].wp += (size_t)(o0 / NX_MM_PACK_ROWS) * (size_t)job.pk_nb * job.pk_bb;
    }
    return mm_dispatch(tp, scratch, w->type, kind, x, ldx, &job, err);
}

nx_status nx_matmul_multi(nx_threadpool *tp, nx_matmul_scratch *scratch, const nx_mm_out *outs, int n_outs,
                          const float *x, int64_t n_rows, int64_t ldx, nx_error *err) {
    if (n_outs < 0 || (n_outs > 0 && !outs)) return nx_fail(err, NX_ERR_INVALID_ARG, "matmul: bad output list");
    bool same = n_outs <= MM_MAX_SEG;
    act_kind kind = ACT_FLOAT;
    for (int k = 0; k < n_outs; k++) {
        const nx_tensor *w = outs[k].w;
        nx_status st = mm_check(w, 0, w ? w->ne[1] : 0, x, n_rows, ldx, outs[k].y, outs[k].ldy, &kind, err);
        if (st != NX_OK) return st;
        if (k > 0 && (w->type != outs[0].w->type || w->ne[0] != outs[0].w->ne[0] || w->nb[1] != outs[0].w->nb[1] ||
                      !w->packed != !outs[0].w->packed))
            same = false;
    }
    if (n_rows == 0 || n_outs == 0) return NX_OK;
    if (!same && n_outs <= MM_MAX_SEG && mixed_kquants(outs, n_outs)) {
        /* packed K-quants of different types (a Q4_K_M layer): one quantization of x (their
         * activation format is the same) and one pass of the pool, each segment with its kernel */
        if (scratch && scratch->observe)
            for (int k = 0; k < n_outs; k++) scratch->observe(scratch->observe_user, outs[k].w, x, n_rows, ldx);
        mm_job job = {.n_in = outs[0].w->ne[0], .n_rows = n_rows, .n_seg = n_outs, .pk_mixed = true};
        for (int k = 0; k < n_outs; k++) {
            mm_seg_init(&job.seg[k], outs[k].w, 0, outs[k].w->ne[1], outs[k].y, outs[k].ldy);
            pack_seg(&job.seg[k], outs[k].w);
            job.n_total += outs[k].w->ne[1];
        }
        job.pkern = job.seg[0].pkern;
        return mm_dispatch(tp, scratch, outs[0].w->type, kind, x, ldx, &job, err);
    }
    if (!same) {   /* other mixed types: one call each */
        for (int k = 0; k < n_outs; k++) {
            nx_status st = nx_matmul(tp, scratch, outs[k].w, x, n_rows, ldx, outs[k].y, outs[k].ldy, err);
            if (st != NX_OK) return st;
        }
        return NX_OK;
    }
    if (scratch && scratch->observe)
        for (int k = 0; k < n_outs; k++) scratch->observe(scratch->observe_user, outs[k].w, x, n_rows, ldx);
    mm_job job = {.n_in = outs[0].w->ne[0], .n_rows = n_rows, .n_seg = n_outs};
    if (outs[0].w->packed) pack_job(&job, outs[0].w);
    for (int k = 0; k < n_outs; k++) {
        mm_seg_init(&job.seg[k], outs[k].w, 0, outs[k].w->ne[1], outs[k].y, outs[k].ldy);
        if (job.pkern) pack_seg(&job.seg[k], outs[k].w);
        job.n_total += outs[k].w->ne[1];
    }
    return mm_dispatch(tp, scratch, outs[0].w->type, kind, x, ldx, &job, err);
}

uint64_t nx_matmul_stream_read(const void *p, size_t n) {
    switch (nx_cpu_level_get()) {
#if NX_MM_X86
    case NX_CPU_AVX512: return nx_mm_stream_read_avx512(p, n);
    case NX_CPU_AVX2_VNNI: case NX_CPU_AVX2: return nx_mm_stream_read_avx2(p, n);
#endif
#if NX_MM_NEON
    case NX_CPU_NEON_I8MM: case NX_CPU_NEON_DOT: case NX_CPU_NEON: return nx_mm_stream_read_neon(p, n);
#endif
    default: break;
    }
    uint64_t s = 0;
    const uint64_t *u = p;
    for (size_t i = 0; i < n / 8; i += 4) s += u[i] ^ u[i + 1] ^ u[i + 2] ^ u[i + 3];
    return s;
}

nx_status nx_matmul(nx_threadpool *tp, nx_matmul_scratch *scratch, const nx_tensor *w,
                    const float *x, int64_t n_rows, int64_t ldx, float *y, int64_t ldy, nx_error *err) {
    if (!w) return nx_fail(err, NX_ERR_INVALID_ARG, "matmul: no weight tensor");
    return nx_matmul_rows(tp, scratch, w, 0, w->ne[1], x, n_rows, ldx, y, ldy, err);
}
