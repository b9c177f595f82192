/* bandwidth.c — read bandwidth measurement (see bandwidth.h). */
#include "cli/bandwidth.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "kernels/matmul.h"

#define BW_CHUNK ((size_t)32 << 20)   /* ~1-3 ms per chunk: barrier cost small, preemption rare */
#define BW_MAX_THREADS 256

typedef struct {
    const uint8_t *buf;
    size_t n_chunks;
    int passes, nth;
    pthread_barrier_t bar;
    pthread_mutex_t mu;       /* start gate: threads wait until every one exists */
    pthread_cond_t cv;
    int gate;                 /* 0 wait, 1 go, -1 give up */
    double *best;             /* [n_chunks], written by thread 0 */
} bw_shared;

typedef struct {
    bw_shared *sh;
    int ith;
    uint64_t sum;             /* checksum, so the reads are kept */
} bw_thread;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *bw_main(void *arg) {
    bw_thread *t = arg;
    bw_shared *sh = t->sh;
    const size_t slice = BW_CHUNK / (size_t)sh->nth / 256 * 256;
    pthread_mutex_lock(&sh->mu);
    while (sh->gate == 0) pthread_cond_wait(&sh->cv, &sh->mu);
    const int gate = sh->gate;
    pthread_mutex_unlock(&sh->mu);
    if (gate < 0) return NULL;
    pthread_barrier_wait(&sh->bar);
    double prev = now_s();
    for (int pass = 0; pass <= sh->passes; pass++)
        for (size_t c = 0; c < sh->n_chunks; c++) {
            t->sum += nx_matmul_stream_read(sh->buf + c * BW_CHUNK + (size_t)t->ith * slice, slice);
            pthread_barrier_wait(&sh->bar);
            if (t->ith == 0) {
                double now = now_s(), dt = now - prev;
                prev = now;
                if (pass > 0 && dt < sh->best[c]) sh->best[c] = dt;   /* pass 0 warms TLB and caches */
            }
        }
    return NULL;
}

void *nx_cli_huge_alloc(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

void nx_cli_huge_free(void *p, size_t bytes) {
    if (p) munmap(p, bytes);
}

double nx_cli_read_bandwidth(int n_threads, size_t bytes, int passes) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > BW_MAX_THREADS) n_threads = BW_MAX_THREADS;
    const size_t n_chunks = bytes / BW_CHUNK;
    if (n_chunks == 0 || passes < 1) return 0;
    bw_shared sh = {.n_chunks = n_chunks, .passes = passes, .nth = n_threads, .mu = PTHREAD_MUTEX_INITIALIZER,
                    .cv = PTHREAD_COND_INITIALIZER};
    uint8_t *buf = nx_cli_huge_alloc(n_chunks * BW_CHUNK);
    sh.best = malloc(n_chunks * sizeof *sh.best);
    bw_thread *th = calloc((size_t)n_threads, sizeof *th);
    pthread_t *tid = calloc((size_t)n_threads, sizeof *tid);
    double gbps = 0;
    if (!buf || !sh.best || !th || !tid || pthread_barrier_init(&sh.bar, NULL, (unsigned)n_threads) != 0) goto out;
    /* fault the pages in (page faults are not bandwidth). Zeros, not ones: the AVX-512
     * checksum's final reduction is a signed add that overflows (UBSan) on large sums. */
    memset(buf, 0, n_chunks * BW_CHUNK);
    sh.buf = buf;
    for (size_t c = 0; c < n_chunks; c++) sh.best[c] = 1e30;
    int started = 1;
    for (int i = 0; i < n_threads; i++) th[i] = (bw_thread){.sh = &sh, .ith = i};
    for (; started < n_threads; started++)
        if (pthread_create(&tid[started], NULL, bw_main, &th[started]) != 0) break;
    pthread_mutex_lock(&sh.mu);
    sh.gate = started < n_threads ? -1 : 1;   /* cannot run n side by side: no figure */
    pthread_cond_broadcast(&sh.cv);
    pthread_mutex_unlock(&sh.mu);
    if (started < n_threads) {
        for (int i = 1; i < started; i++) pthread_join(tid[i], NULL);
        pthread_barrier_destroy(&sh.bar);
        goto out;
    }
    bw_main(&th[0]);
    for (int i = 1; i < n_threads; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&sh.bar);
    double total = 0;
    for (size_t c = 0; c < n_chunks; c++) total += sh.best[c];
    const size_t slice = BW_CHUNK / (size_t)n_threads / 256 * 256;
    gbps = (double)(slice * (size_t)n_threads) * (double)n_chunks / total / 1e9;
out:
    nx_cli_huge_free(buf, n_chunks * BW_CHUNK);
    free(sh.best);
    free(th);
    free(tid);
    return gbps;
}
