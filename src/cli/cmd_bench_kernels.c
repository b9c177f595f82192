/*
 * cmd_bench_kernels.c — `nextn bench-kernels`: matmul throughput per weight type, measured
 * against the machine's read bandwidth in the same run.
 *
 * For each weight type and each shape (1024x4096 and 4096x1024, in x out), batch sizes 1, 2,
 * 4, 8, 16 are timed twice: "cached" (one ~4 MB weight, reused: fits L2/L3) and "streamed"
 * (cycling through copies totalling --stream-mb MB, more than L3, so the weight comes from
 * DRAM as in a real model). Each figure is the weight bytes streamed per second, its ratio to
 * the measured bandwidth, and the time relative to batch 1. `--contended` hands over to the
 * threads module's benchmark, `--attn` to the attention kernel's (bench_attn.c). Timings
 * take the fastest of three segments, which discounts (but cannot remove) other load on a
 * shared machine. `--packed` gives each weight (and each streamed copy) the current level's
 * repacked copy (matmul.h: nx_matmul_pack), as the model loader does, so the figures are those
 * of the kernels a model's decode and verify batches run; types without one are skipped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/bandwidth.h"
#include "cli/cli.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "quant/quant.h"
#include "tensor.h"
#include "threads.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void bk_usage(FILE *f) {
    fprintf(f, "usage: nextn bench-kernels [--types q8_0,q4_K,...] [-t N] [--stream-mb N] [--packed] [--contended]\n"
               "       nextn bench-kernels --attn [-d 4096,16384] [--types f16,q8_0,q4_0] [-r N] [--cold MB]\n"
               "  --types      weight types to time (default: every type with a matmul kernel)\n"
               "  -t N         threads (default: physical cores)\n"
               "  --stream-mb  size of the set of weight copies for the DRAM-bound figure (default 512)\n"
               "  --packed     time the repacked weights the model loader makes (types that have them)\n"
               "  --contended  run the threads module's contended-core benchmark instead\n"
               "  --attn       time the attention kernel instead (1 thread; decode and 16-row prefill blocks;\n"
               "               --cold MB: read an MB-MiB buffer before each call, so K/V come from DRAM)\n");
}

/* ===== Bandwidth ===== */

typedef struct { const uint8_t *buf; size_t n; uint64_t sum[64]; } bw_job;

static void bw_task(void *arg, int ith, int nth) {
    bw_job *j = arg;
    long lo, hi;
    nx_split_range((long)(j->n / 4096), ith, nth, &lo, &hi);
    j->sum[ith % 64] += nx_matmul_stream_read(j->buf + (size_t)lo * 4096, (size_t)(hi - lo) * 4096);
}

/* GB/s reading a 1 GiB buffer with every thread (best of 3 passes). */
static double measure_bandwidth(nx_threadpool *tp) {
    const size_t n = (size_t)1 << 30;
    uint8_t *buf = nx_cli_huge_alloc(n);
    if (!buf) return 0;
    memset(buf, 1, n);
    bw_job j = {.buf = buf, .n = n};
    double best = 1e30;
    for (int pass = 0; pass < 4; pass++) {
        double t0 = now_s();
        nx_threadpool_run(tp, bw_task, &j);
        double dt = now_s() - t0;
        if (pass > 0 && dt < best) best = dt;   /* pass 0 warms up page tables */
    }
    nx_cli_huge_free(buf, n);
    return (double)n / best / 1e9;
}

/* ===== Matmul timing ===== */

typedef struct {
    nx_threadpool *tp;
    nx_matmul_scratch *scratch;
    nx_tensor *w;     /* n_copies views, cycled */
    int n_copies;
    const float *x;
    float *y;
} mm_bench;

/* Seconds per call: fastest of 3 segments, each >= 40 ms and >= one pass over the copies. */
static double time_matmul(mm_bench *b, int n_rows, nx_error *err) {
    const int64_t n_in = b->w[0].ne[0], n_out = b->w[0].ne[1];
    double best = 1e30;
    int c = 0;
    for (int i = 0; i < (b->n_copies > 1 ? b->n_copies : 2); i++)   /* warm-up */
        if (nx_matmul(b->tp, b->scratch, &b->w[i % b->n_copies], b->x, n_rows, n_in, b->y, n_out, err) != NX_OK) return -1;
    for (int seg = 0; seg < 3; seg++) {
        int calls = 0;
        double t0 = now_s(), dt;
        do {
            nx_matmul(b->tp, b->scratch, &b->w[c], b->x, n_rows, n_in, b->y, n_out, err);
            if (++c == b->n_copies) c = 0;
            calls++;
            dt = now_s() - t0;
        } while (dt < 0.04 || calls < b->n_copies);
        if (dt / calls < best) best = dt / calls;
    }
    return best;
}

static const int k_batches[] = {1, 2, 4, 5, 8, 16};
#define N_BATCH 6

static int bench_type(nx_threadpool *tp, nx_type type, double bw, size_t stream_bytes, uint8_t *stream_buf,
                      bool packed) {
    static const int64_t shapes[2][2] = {{1024, 4096}, {4096, 1024}};
    nx_matmul_scratch scratch;
    nx_matmul_scratch_init(&scratch);
    nx_error err = {0};
    int rc = 0;
    for (int s = 0; s < 2 && rc == 0; s++) {
        const int64_t n_in = shapes[s][0], n_out = shapes[s][1];
        const size_t rb = nx_row_size(type, n_in), bytes = rb * (size_t)n_out, stride = (bytes + 63) & ~(size_t)63;
        /* 8 distinct quantized rows of random values, tiled over the matrix */
        float *row = malloc(sizeof(float) * (size_t)n_in);
        uint8_t *w = aligned_alloc(64, stride), *pk = NULL;
        float *x = malloc(sizeof(float) * (size_t)(16 * n_in)), *y = malloc(sizeof(float) * (size_t)(16 * n_out));
        if (!row || !w || !x || !y) { fprintf(stderr, "nextn bench-kernels: out of memory\n"); rc = 1; goto next; }
        uint32_t seed = 12345;
        for (int k = 0; k < 8; k++) {
            for (int64_t i = 0; i < n_in; i++) {
                seed = seed * 1664525u + 1013904223u;
                row[i] = (float)((int)(seed >> 8) % 2001 - 1000) / 1000.0f;
            }
            if (nx_quantize_row(type, row, w + rb * (size_t)k, n_in) != rb) {
                fprintf(stderr, "nextn bench-kernels: cannot quantize to %s\n", nx_type_name(type));
                rc = 1;
                goto next;
            }
        }
        for (int64_t o = 8; o < n_out; o++) memcpy(w + rb * (size_t)o, w + rb * (size_t)(o % 8), rb);
        for (int64_t i = 0; i < 16 * n_in; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;

        const int64_t ne[2] = {n_in, n_out};
        nx_tensor cached;
        nx_tensor_init(&cached, "bench", type, 2, ne, w);
        /* packed: the copies stream the packed bytes (the plain rows, read only for a partial
         * group, stay in w) */
        const size_t pbytes = packed ? nx_matmul_pack_size(&cached) : 0, pstride = (pbytes + 63) & ~(size_t)63;
        if (packed && pbytes == 0) goto next;
        if (pbytes) {
            if (!(pk = aligned_alloc(64, pstride))) { rc = 1; goto next; }
            nx_matmul_pack(&cached, pk);
            cached.packed = pk;
        }
        const size_t cstride = pbytes ? pstride : stride;
        int n_copies = (int)((stream_bytes + cstride - 1) / cstride);
        nx_tensor *views = calloc((size_t)n_copies, sizeof *views);
        if (!views) { rc = 1; goto next; }
        for (int c = 0; c < n_copies; c++) {
            uint8_t *dst = stream_buf + (size_t)c * cstride;
            memcpy(dst, pbytes ? pk : w, pbytes ? pbytes : bytes);
            nx_tensor_init(&views[c], "bench", type, 2, ne, pbytes ? w : dst);
            if (pbytes) views[c].packed = dst;
        }

        for (int mode = 0; mode < 2 && rc == 0; mode++) {
            mm_bench b = {.tp = tp, .scratch = &scratch, .w = mode ? views : &cached, .n_copies = mode ? n_copies : 1,
                          .x = x, .y = y};
            char name[16];
            snprintf(name, sizeof name, "%s%s", nx_type_name(type), pbytes ? "x16" : "");
            printf("%-7s %4lldx%-5lld %-8s", name, (long long)n_in, (long long)n_out,
                   mode ? "streamed" : "cached");
            double t1 = 0;
            for (int bi = 0; bi < N_BATCH; bi++) {
                double t = time_matmul(&b, k_batches[bi], &err);
                if (t < 0) { fprintf(stderr, "\nnextn bench-kernels: %s\n", err.msg); rc = 1; break; }
                if (bi == 0) t1 = t;
                double gbs = (double)bytes / t / 1e9;
                printf(" | %6.1f %4.0f%% %5.2fx", gbs, 100.0 * gbs / bw, t / t1);
            }
            printf("\n");
            fflush(stdout);
        }
        free(views);
    next:
        free(row); free(w); free(pk); free(x); free(y);
    }
    nx_matmul_scratch_free(&scratch);
    return rc;
}

int nx_cmd_bench_kernels(int argc, char **argv) {
    const char *types = NULL;
    int n_threads = 0;
    long stream_mb = 512;
    bool packed = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--contended")) return nx_bench_kernels_contended(argc, argv);
        if (!strcmp(a, "--attn")) return nx_bench_kernels_attn(argc, argv);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { bk_usage(stdout); return 0; }
        if (!strcmp(a, "--packed")) { packed = true; continue; }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "nextn bench-kernels: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--types")) types = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) n_threads = atoi(v);
        else if (!strcmp(a, "--stream-mb")) stream_mb = atol(v);
        else { fprintf(stderr, "nextn bench-kernels: unknown option '%s'\n", a); bk_usage(stderr); return 2; }
        i++;
    }
    if (n_threads < 0 || n_threads > 256 || stream_mb < 1 || stream_mb > 65536) {
        fprintf(stderr, "nextn bench-kernels: -t must be 0..256 and --stream-mb 1..65536\n");
        return 2;
    }
    nx_type list[NX_TYPE_COUNT];
    int n_types = 0;
    if (types) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", types);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            nx_type t;
            if (!nx_type_from_name(tok, &t) || !nx_matmul_supports(t)) {
                fprintf(stderr, "nextn bench-kernels: '%s' is not a weight type with a matmul kernel\n", tok);
                return 2;
            }
            if (n_types < NX_TYPE_COUNT) list[n_types++] = t;
        }
    } else {
        static const nx_type all[] = {NX_TYPE_Q8_0, NX_TYPE_Q4_K, NX_TYPE_Q4_0, NX_TYPE_Q4_1, NX_TYPE_Q5_0,
                                      NX_TYPE_Q5_1, NX_TYPE_Q5_K, NX_TYPE_Q6_K, NX_TYPE_IQ4_NL, NX_TYPE_IQ4_XS,
                                      NX_TYPE_F16, NX_TYPE_BF16, NX_TYPE_F32};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) list[n_types++] = all[k];
    }
    nx_error err = {0};
    nx_threadpool *tp = nx_threadpool_create(n_threads, &err);
    if (!tp) { fprintf(stderr, "nextn bench-kernels: %s\n", err.msg); return 1; }
    const size_t stream_bytes = (size_t)stream_mb << 20;
    /* the copies: stream_bytes plus one matrix of slack for rounding up */
    uint8_t *stream_buf = nx_cli_huge_alloc(stream_bytes + (80u << 20));
    if (!stream_buf) { fprintf(stderr, "nextn bench-kernels: cannot allocate %ld MB\n", stream_mb); nx_threadpool_free(tp); return 1; }

    double bw = measure_bandwidth(tp);
    if (bw <= 0) { fprintf(stderr, "nextn bench-kernels: cannot allocate the 1 GiB bandwidth buffer\n"); nx_cli_huge_free(stream_buf, stream_bytes + (80u << 20)); nx_threadpool_free(tp); return 1; }
    printf("bench-kernels: level %s, %d threads, read bandwidth %.1f GB/s (1 GiB, %s loads)\n",
           nx_cpu_level_name(nx_cpu_level_get()), nx_threadpool_size(tp), bw, nx_cpu_level_name(nx_cpu_level_get()));
    printf("cached = one weight reused (fits L2/L3); streamed = cycling through %ld MB of copies (DRAM)\n", stream_mb);
    printf("each cell: GB/s of weight bytes, %% of read bandwidth, time relative to batch 1\n");
    printf("%-7s %-10s %-8s", "type", "in x out", "mode");
    for (int bi = 0; bi < N_BATCH; bi++) printf(" | batch %-2d            ", k_batches[bi]);
    printf("\n");
    int rc = 0;
    for (int k = 0; k < n_types && rc == 0; k++) rc = bench_type(tp, list[k], bw, stream_bytes, stream_buf, packed);
    nx_cli_huge_free(stream_buf, stream_bytes + (80u << 20));
    nx_threadpool_free(tp);
    return rc;
}
