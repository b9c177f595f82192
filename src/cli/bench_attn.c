/*
 * bench_attn.c — `nextn bench-kernels --attn`: the attention kernel (kernels/attn.h) alone, one
 * thread, one KV head of head size 256 stored as a contiguous plane (as the KV cache stores
 * it), per cache type and depth: a decode (one row of 4 GQA query heads) and a prefill block
 * (16 rows x 4 heads, the work item of nx_attend_rows). Figures: ms per call, the K/V bytes
 * read per second, and GFLOP/s (4 * queries * keys * 256). The fastest of the repetitions,
 * by thread CPU time, which discounts (but cannot remove) other load on a shared machine.
 * --cold MB reads an MB-MiB buffer before every call, so the K/V come from DRAM as they do in a
 * model, where the weights stream through the caches between layers (warm, a depth's K/V sit
 * partly in L3, which hides what DRAM does to the kernel).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"
#include "kernels/attn.h"
#include "kernels/cpu.h"
#include "quant/quant.h"
#include "tensor.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}
static float frand(uint64_t *s) { return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0)) - 0.5f; }

enum { BA_D = 256, BA_GRP = 4, BA_ROWS = 16 };

/* Reads one byte per cache line of buf: what was cached before is evicted. */
static void evict(const uint8_t *buf, size_t n) {
    uint64_t acc = 0;
    for (size_t i = 0; i < n; i += 64) acc += buf[i];
    volatile uint64_t sink = acc;   /* the reads must happen */
    (void)sink;
}

/* Time one type at one depth; false: out of memory. */
static bool bench_one(nx_type t, int depth, int reps, const uint8_t *cold, size_t cold_n) {
    const size_t rs = nx_row_size(t, BA_D);
    const int nq_max = BA_ROWS * BA_GRP, n = depth + BA_ROWS;
    uint8_t *k = malloc(rs * (size_t)n), *v = malloc(rs * (size_t)n);
    float *q = malloc(sizeof(float) * (size_t)nq_max * BA_D), *o = malloc(sizeof(float) * (size_t)nq_max * BA_D);
    float *work = malloc(sizeof(float) * nx_attn_work_floats(nq_max, BA_D, BA_D)), row[BA_D];
    if (!k || !v || !q || !o || !work) {
        free(k); free(v); free(q); free(o); free(work);
        return false;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int p = 0; p < n; p++) {
        for (int i = 0; i < BA_D; i++) row[i] = frand(&s);
        nx_quantize_row(t, row, k + (size_t)p * rs, BA_D);
        for (int i = 0; i < BA_D; i++) row[i] = frand(&s);
        nx_quantize_row(t, row, v + (size_t)p * rs, BA_D);
    }
    for (int i = 0; i < nq_max * BA_D; i++) q[i] = frand(&s);
    const nx_attn_kv kv = {.k = k, .v = v, .k_stride = rs, .v_stride = rs, .tk = t, .tv = t, .cells = n};
    nx_attn_q qs[BA_ROWS * BA_GRP];
    for (int mode = 0; mode < 2; mode++) {
        const int rows = mode ? BA_ROWS : 1, nq = rows * BA_GRP;
        for (int i = 0; i < nq; i++) {
            const int r = i / BA_GRP;
            qs[i] = (nx_attn_q){q + (size_t)i * BA_D, o + (size_t)i * BA_D, 0, depth + (mode ? r : 0)};
        }
        double best = 1e30;
        double keys = 0;
        for (int i = 0; i < nq; i++) keys += qs[i].hi + 1;
        for (int r = 0; r < reps; r++) {
            if (cold) evict(cold, cold_n);
            const double t0 = cpu_s();
            nx_attn(&kv, qs, nq, BA_D, BA_D, 0.0625f, work);
            const double dt = cpu_s() - t0;
            if (dt < best) best = dt;
        }
        const double bytes = 2.0 * (double)rs * (double)(depth + rows);
        printf("%-5s d %6d %-8s %8.3f ms %7.2f GB/s %7.1f GFLOP/s\n", nx_type_name(t), depth,
               mode ? "prefill" : "decode", best * 1e3, bytes / best * 1e-9, 4.0 * keys * BA_D / best * 1e-9);
    }
    free(k); free(v); free(q); free(o); free(work);
    return true;
}

int nx_bench_kernels_attn(int argc, char **argv) {
    int depths[8] = {4096, 16384}, n_depths = 2, reps = 10;
    nx_type types[8] = {NX_TYPE_F16, NX_TYPE_Q8_0, NX_TYPE_Q4_0};
    int n_types = 3, cold_mb = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--attn")) continue;
        if (!val) { fprintf(stderr, "nextn bench-kernels --attn: %s needs a value\n", a); return 2; }
        char buf[256];
        snprintf(buf, sizeof buf, "%s", val);
        if (!strcmp(a, "-d")) {
            n_depths = 0;
            for (char *tok = strtok(buf, ","); tok && n_depths < 8; tok = strtok(NULL, ",")) {
                const int d = atoi(tok);
                if (d < 0 || d > (1 << 20)) { fprintf(stderr, "nextn bench-kernels --attn: bad depth '%s'\n", tok); return 2; }
                depths[n_depths++] = d;
            }
        } else if (!strcmp(a, "--types")) {
            n_types = 0;
            for (char *tok = strtok(buf, ","); tok && n_types < 8; tok = strtok(NULL, ",")) {
                nx_type t;
                if (!nx_type_from_name(tok, &t) ||
                    (t != NX_TYPE_F32 && t != NX_TYPE_F16 && t != NX_TYPE_BF16 && t != NX_TYPE_Q8_0 && t != NX_TYPE_Q4_0)) {
                    fprintf(stderr, "nextn bench-kernels --attn: '%s' is not a KV cache type\n", tok);
                    return 2;
                }
                types[n_types++] = t;
            }
        } else if (!strcmp(a, "-r")) {
            reps = atoi(val);
            if (reps < 1 || reps > 1000) { fprintf(stderr, "nextn bench-kernels --attn: -r must be 1..1000\n"); return 2; }
        } else if (!strcmp(a, "--cold")) {
            cold_mb = atoi(val);
            if (cold_mb < 1 || cold_mb > 65536) { fprintf(stderr, "nextn bench-kernels --attn: --cold must be 1..65536 (MiB)\n"); return 2; }
        } else {
            fprintf(stderr, "nextn bench-kernels --attn: unknown option '%s' (-d D,D.. --types t,t.. -r N --cold MB)\n", a);
            return 2;
        }
        i++;
    }
    const size_t cold_n = (size_t)cold_mb << 20;
    uint8_t *cold = NULL;
    if (cold_mb) {
        cold = malloc(cold_n);
        if (!cold) { fprintf(stderr, "nextn bench-kernels --attn: out of memory for --cold %d\n", cold_mb); return 1; }
        memset(cold, 1, cold_n);
    }
    char mode[64] = "warm caches";
    if (cold) snprintf(mode, sizeof mode, "cold (a %d MiB read before each call)", cold_mb);
    printf("bench-kernels --attn: level %s, 1 thread, head size 256, %d query heads per KV head, fastest of %d, %s\n",
           nx_cpu_level_name(nx_cpu_level_get()), BA_GRP, reps, mode);
    int rc = 0;
    for (int ti = 0; ti < n_types && !rc; ti++)
        for (int di = 0; di < n_depths && !rc; di++)
            if (!bench_one(types[ti], depths[di], reps, cold, cold_n)) {
                fprintf(stderr, "nextn bench-kernels --attn: out of memory at depth %d\n", depths[di]);
                rc = 1;
            }
    free(cold);
    return rc;
}
