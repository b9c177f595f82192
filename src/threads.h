/*
 * threads.h — a persistent pthread worker pool for per-layer parallel-for.
 *
 * nx_threadpool_run(tp, fn, arg) calls fn(arg, ith, nth) once for every ith in [0, nth)
 * (nth = nx_threadpool_size(tp); the caller runs ith 0) and returns when all have finished.
 * Kernels split work by ith deterministically (e.g. by output rows), never by the reduction
 * dimension, so results do not depend on nth.
 *
 * Tasks are claimed, not bound to threads: ith 0 always runs on the caller, every other ith
 * runs on whichever thread claims it first — a worker, or the caller itself once it is done
 * with ith 0. So a worker that is descheduled (another process took its core) or still waking
 * up does not stall the run. Consequence for fn: it must not wait for another ith of the same
 * run (no barrier inside fn) — two ith may run one after the other on the same thread. Scratch
 * indexed by ith is safe (each ith runs exactly once, never two at a time).
 *
 * Waiting threads spin briefly (pause, then pause + sched_yield, bounded to tens of µs), then
 * sleep on a futex: the pool never burns CPU when idle and yields its core to whoever needs it.
 * When a run had to wait for a worker that lost its core mid-task, the caller runs the next
 * tasks itself for a few ms (doubling while it keeps happening) instead of waiting again.
 * A NULL pool (or a pool of 1) runs everything inline on the caller. One run at a time per
 * pool: a nested or concurrent run on a busy pool runs its tasks inline on the calling thread
 * (correct, just not parallel) instead of deadlocking.
 */
#ifndef NX_THREADS_H
#define NX_THREADS_H

#include "core/error.h"

typedef struct nx_threadpool nx_threadpool;
typedef void (*nx_task_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 means nx_cpu_physical_cores(). Threads that cannot be created are dropped
 * (the pool is smaller); NULL only when not even the pool struct can be allocated. */
nx_threadpool *nx_threadpool_create(int n_threads, nx_error *err);
void nx_threadpool_free(nx_threadpool *tp);          /* NULL is fine; must not be called mid-run */
int  nx_threadpool_size(const nx_threadpool *tp);   /* 1 for NULL */
void nx_threadpool_run(nx_threadpool *tp, nx_task_fn fn, void *arg);

/* Like nx_threadpool_run but with n_tasks independent tasks: fn(arg, i, n_tasks) for every i in
 * [0, n_tasks), claimed dynamically by the threads (the caller takes i = 0 first). Splitting a
 * kernel into a few tasks per thread (e.g. 4 x size) balances load when cores are shared or
 * uneven. n_tasks <= 0 does nothing. */
void nx_threadpool_run_tasks(nx_threadpool *tp, nx_task_fn fn, void *arg, int n_tasks);

/* Runs so far in which the caller waited on a descheduled worker longer than it worked itself;
 * after each, the caller runs tasks alone for a short, growing period (diagnostics). */
long nx_threadpool_stalls(const nx_threadpool *tp);

/* Physical cores available to this process (affinity-aware, SMT siblings counted once), >= 1. */
int nx_cpu_physical_cores(void);

/* Split [0, n) into nth nearly equal ranges; range of ith in [*lo, *hi). */
static inline void nx_split_range(long n, int ith, int nth, long *lo, long *hi) {
    long base = n / nth, rem = n % nth;
    *lo = ith * base + (ith < rem ? ith : rem);
    *hi = *lo + base + (ith < rem ? 1 : 0);
}

#endif
