/*
 * bench_contended.c — `nextn bench-kernels --contended`: does the thread pool keep its speed
 * when another process takes a core?
 *
 * Workload: nx_matmul_rows over a 16 MiB F32 weight, one call (= one pool run) per 64-row
 * block, mimicking the per-projection barriers of a decode step, measured with 1 and 2 threads, first
 * alone, then with a forked busy-loop child pinned to one core (killed afterwards). Also
 * times empty pool runs (dispatch + join). Prints figures; the ratio t2/t1 under contention
 * should stay >= 1.0 (an engine that spin-waits at every barrier collapses far below).
 * Never leaves the child running: it is killed and reaped on every path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kernels/matmul.h"
#include "tensor.h"
#include "threads.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    const nx_tensor *w;     /* rows x cols F32 */
    const float *x;         /* cols */
    float *y;               /* rows */
    long rows, block;
} bench_cfg;

/* Passes per second of the full matrix-vector product over `seconds`; each block of rows is
 * one nx_matmul_rows call, i.e. one pool run, like one projection of a decode step. */
static double bench_mv(nx_threadpool *tp, const bench_cfg *c, double seconds, nx_error *err) {
    long passes = 0;
    double t0 = now_s(), t = t0;
    while (t - t0 < seconds) {
        for (long r0 = 0; r0 < c->rows; r0 += c->block) {
            long r1 = c->rows - r0 < c->block ? c->rows : r0 + c->block;
            if (nx_matmul_rows(tp, NULL, c->w, r0, r1, c->x, 1, c->w->ne[0], c->y + r0, r1 - r0, err) != NX_OK)
                return -1;
        }
        passes++;
        t = now_s();
    }
    return passes / (t - t0);
}

/* t1 and t2 measured in alternating slices, so that a change in background load hits both. */
static int bench_pair(nx_threadpool *tp1, nx_threadpool *tp2, const bench_cfg *c, double seconds, double *r1,
                      double *r2, nx_error *err) {
    const int slices = 8;
    double s1 = 0, s2 = 0;
    for (int k = 0; k < slices; k++) {
        double a = bench_mv(tp1, c, seconds / slices, err);
        double b = a < 0 ? -1 : bench_mv(tp2, c, seconds / slices, err);
        if (a < 0 || b < 0) return -1;
        s1 += a;
        s2 += b;
    }
    *r1 = s1 / slices;
    *r2 = s2 / slices;
    return 0;
}

static void empty_task(void *p, int ith, int nth) { (void)p; (void)ith; (void)nth; }

typedef struct { double work_s; } spin_job;
static void spin_task(void *p, int ith, int nth) {
    (void)ith; (void)nth;
    double end = now_s() + ((spin_job *)p)->work_s;
    while (now_s() < end) { }
}

/* Microseconds per run of fn over `runs` runs. */
static double bench_runs(nx_threadpool *tp, nx_task_fn fn, void *arg, int runs) {
    for (int i = 0; i < runs / 10; i++) nx_threadpool_run(tp, fn, arg);
    double t0 = now_s();
    for (int i = 0; i < runs; i++) nx_threadpool_run(tp, fn, arg);
    return (now_s() - t0) * 1e6 / runs;
}

/* Fork a child that spins forever on `cpu` (-1: not pinned). Returns its pid or -1. */
static pid_t start_hog(int cpu) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
    }
    volatile unsigned long spin = 0;
    for (;;) spin++;
}

static void stop_hog(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) { }
}

static int last_allowed_cpu(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    for (int c = CPU_SETSIZE - 1; c >= 0; c--)
        if (CPU_ISSET(c, &set)) return c;
    return -1;
}

static void usage(FILE *f) {
    fprintf(f, "usage: nextn bench-kernels --contended [--rows N] [--cols N] [--block N] [--seconds S] [--unpinned]\n"
               "                                       [--dispatch]\n"
               "  nx_matmul_rows over a rows x cols F32 weight (default 1024 x 4096 = 16 MiB), one pool run\n"
               "  per block of rows (default 64), with 1 and 2 threads, alone and then against a busy\n"
               "  process pinned to the last allowed CPU (--unpinned: not pinned); 2 S seconds per pair of\n"
               "  figures, t1 and t2 measured in alternating slices. --dispatch: only the pool dispatch\n"
               "  figures (empty runs; runs of two 2 us tasks), no busy process.\n");
}

static int fail_cleanup(const char *what, nx_threadpool *a, nx_threadpool *b, float *w, float *x, float *y) {
    fprintf(stderr, "nextn bench-kernels: %s\n", what);
    nx_threadpool_free(a);
    nx_threadpool_free(b);
    free(w); free(x); free(y);
    return 1;
}

int nx_bench_kernels_contended(int argc, char **argv) {
    long rows = 1024, cols = 4096, block = 64;
    double seconds = 0.5;
    int pinned = 1, dispatch_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--contended")) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--unpinned")) { pinned = 0; continue; }
        if (!strcmp(a, "--dispatch")) { dispatch_only = 1; continue; }
        char *end = NULL;
        if (!strcmp(a, "--rows") && v) rows = strtol(v, &end, 10);
        else if (!strcmp(a, "--cols") && v) cols = strtol(v, &end, 10);
        else if (!strcmp(a, "--block") && v) block = strtol(v, &end, 10);
        else if (!strcmp(a, "--seconds") && v) seconds = strtod(v, &end);
        else { fprintf(stderr, "nextn bench-kernels: unknown or incomplete option '%s'\n", a); usage(stderr); return 2; }
        if (!end || *end || end == v) { fprintf(stderr, "nextn bench-kernels: bad value '%s' for %s\n", v, a); return 2; }
        i++;
    }
    if (rows < 1 || cols < 1 || block < 1 || rows > (1L << 24) || cols > (1L << 24) || rows * cols > (1L << 30) ||
        !(seconds > 0 && seconds <= 60)) {
        fprintf(stderr, "nextn bench-kernels: values out of range (rows, cols, block >= 1; rows*cols <= 2^30; "
                        "0 < seconds <= 60)\n");
        return 2;
    }

    float *w = malloc(sizeof(float) * (size_t)(rows * cols));
    float *x = malloc(sizeof(float) * (size_t)cols);
    float *y = malloc(sizeof(float) * (size_t)rows);
    if (!w || !x || !y) return fail_cleanup("out of memory", NULL, NULL, w, x, y);
    for (long i = 0; i < rows * cols; i++) w[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    for (long i = 0; i < cols; i++) x[i] = (float)(i % 7) * 0.25f - 0.75f;
    nx_tensor wt;
    const int64_t ne[2] = {cols, rows};
    if (!nx_tensor_init(&wt, "bench.weight", NX_TYPE_F32, 2, ne, w)) return fail_cleanup("bad weight shape", NULL, NULL, w, x, y);

    nx_error err = {0};
    nx_threadpool *tp1 = nx_threadpool_create(1, &err);
    nx_threadpool *tp2 = tp1 ? nx_threadpool_create(2, &err) : NULL;
    if (!tp1 || !tp2) return fail_cleanup(err.msg, tp1, tp2, w, x, y);
    bench_cfg cfg = {&wt, x, y, rows, block};
    double mib = (double)rows * cols * 4 / (1 << 20);
    printf("bench-kernels --contended: nx_matmul_rows, F32 weight %ldx%ld (%.1f MiB), %ld-row blocks = %ld pool runs per pass\n",
           rows, cols, mib, block, (rows + block - 1) / block);
    printf("cpu: %d physical cores available; the 2-thread pool has %d threads\n", nx_cpu_physical_cores(),
           nx_threadpool_size(tp2));

    /* Dispatch cost. With empty tasks the caller usually finishes every task before a worker
     * claims one; the 2 us variant makes the worker take part (overhead = time - 2 us). */
    spin_job sj = {2e-6};
    double e1 = bench_runs(tp1, empty_task, NULL, 50000);
    double e2 = bench_runs(tp2, empty_task, NULL, 50000);
    double s2 = bench_runs(tp2, spin_task, &sj, 20000);
    printf("empty run: t1 %.3f us, t2 %.3f us; run of 2 x 2 us tasks on t2: %.2f us (ideal 2.00)\n", e1, e2, s2);
    if (dispatch_only) {
        nx_threadpool_free(tp1);
        nx_threadpool_free(tp2);
        free(w); free(x); free(y);
        return 0;
    }

    double a1, a2;
    long st0 = nx_threadpool_stalls(tp2);
    if (bench_pair(tp1, tp2, &cfg, 2 * seconds, &a1, &a2, &err)) return fail_cleanup(err.msg, tp1, tp2, w, x, y);
    printf("alone:     t1 %7.1f passes/s (%6.2f GB/s)  t2 %7.1f passes/s (%6.2f GB/s)  t2/t1 %.2f  (stalls %ld)\n",
           a1, a1 * mib * 1.048576e-3, a2, a2 * mib * 1.048576e-3, a2 / a1, nx_threadpool_stalls(tp2) - st0);

    int cpu = pinned ? last_allowed_cpu() : -1;
    fflush(stdout);
    fflush(stderr);
    pid_t hog = start_hog(cpu);
    if (hog < 0) return fail_cleanup("fork failed", tp1, tp2, w, x, y);
    struct timespec settle = {0, 50 * 1000 * 1000};
    nanosleep(&settle, NULL);
    double c1, c2;
    st0 = nx_threadpool_stalls(tp2);
    int bad = bench_pair(tp1, tp2, &cfg, 2 * seconds, &c1, &c2, &err);
    long stalls = nx_threadpool_stalls(tp2) - st0;
    double ce2 = bench_runs(tp2, empty_task, NULL, 20000);
    double cs2 = bench_runs(tp2, spin_task, &sj, 5000);
    stop_hog(hog);
    if (bad) return fail_cleanup(err.msg, tp1, tp2, w, x, y);

    char where[32];
    if (cpu >= 0) snprintf(where, sizeof where, "pinned to cpu %d", cpu);
    else snprintf(where, sizeof where, "unpinned");
    printf("contended (busy process %s):\n", where);
    printf("           t1 %7.1f passes/s (%6.2f GB/s)  t2 %7.1f passes/s (%6.2f GB/s)  t2/t1 %.2f  (stalls %ld; target >= 1.0)\n",
           c1, c1 * mib * 1.048576e-3, c2, c2 * mib * 1.048576e-3, c2 / c1, stalls);
    printf("           empty run t2 %.3f us; run of 2 x 2 us tasks on t2: %.2f us\n", ce2, cs2);

    nx_threadpool_free(tp1);
    nx_threadpool_free(tp2);
    free(w); free(x); free(y);
    return 0;
}
