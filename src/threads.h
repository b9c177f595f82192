/*
 * threads.h — a persistent pthread worker pool for per-layer parallel-for.
 *
 * nx_threadpool_run(tp, fn, arg) calls fn(arg, ith, nth) once for every ith in [0, nth)
 * (the caller runs ith 0) and returns when all have finished. Kernels split work by ith
 * deterministically (e.g. by output rows), never by the reduction dimension, so results do
 * not depend on nth. Waiting workers spin briefly, then sleep (futex/condvar): the pool
 * must not collapse when another process takes a core, and must not burn CPU when idle.
 * A NULL pool runs fn(arg, 0, 1) inline. One run at a time per pool (not reentrant).
 */
#ifndef NX_THREADS_H
#define NX_THREADS_H

#include "core/error.h"

typedef struct nx_threadpool nx_threadpool;
typedef void (*nx_task_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 means nx_cpu_physical_cores(). */
nx_threadpool *nx_threadpool_create(int n_threads, nx_error *err);
void nx_threadpool_free(nx_threadpool *tp);
int  nx_threadpool_size(const nx_threadpool *tp);   /* 1 for NULL */
void nx_threadpool_run(nx_threadpool *tp, nx_task_fn fn, void *arg);

/* Physical cores available to this process (affinity-aware), at least 1. */
int nx_cpu_physical_cores(void);

/* Split [0, n) into nth nearly equal ranges; range of ith in [*lo, *hi). */
static inline void nx_split_range(long n, int ith, int nth, long *lo, long *hi) {
    long base = n / nth, rem = n % nth;
    *lo = ith * base + (ith < rem ? ith : rem);
    *hi = *lo + base + (ith < rem ? 1 : 0);
}

#endif
