/*
 * threads.c — the worker pool behind nx_threadpool_run (contract in threads.h).
 *
 * One run: the caller writes the task (fn, arg, counts), publishes a claim word
 * (generation | task count | next index) and bumps the generation futex word. Workers
 * and the caller then take task indices with a CAS on the claim word; the CAS checks the
 * generation, so a worker that wakes late can never take a task of a later run. Each
 * finished task increments `done`; the caller returns when done == count.
 *
 * Waiting (workers for the next run, the caller for stragglers) spins on pause for a few
 * µs, then mixes in sched_yield up to a time budget, then sleeps on a futex. Sleepers
 * announce themselves in a counter/flag before re-checking, and wakers check the flag
 * after publishing (both seq_cst), so a wake is never lost and no futex syscall is made
 * when nobody sleeps.
 *
 * Straggler backoff: if the caller had to wait for a worker's task longer than it worked
 * itself (the worker lost its core mid-task), the next runs execute inline on the caller for
 * a short, doubling period (1 ms .. 64 ms), then parallel runs are tried again. Results do
 * not change (same tasks, same split); only who runs them.
 *
 * Never: a lock on the hot path, an unbounded spin, a barrier inside a task.
 */
#define _GNU_SOURCE
#include "threads.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* ===== Tuning ===== */

#define SPIN_PURE_ITERS 64         /* pause-only iterations before yielding (~3-8 µs) */
#define SPIN_BUDGET_NS  40000      /* total spin+yield time before sleeping on the futex */
#define ROUND_MAX       0xFFFF     /* tasks per claim round (16-bit index in the claim word) */
/* Straggler backoff: a run where the caller waited for a worker longer than it worked itself
 * (and > STALL_MIN_NS) means a worker lost its core mid-task. The caller then runs alone for
 * a while (SOLO_MIN_NS, doubling per repeated stall up to SOLO_MAX_NS) before trying again. */
#define STALL_MIN_NS    50000
#define SOLO_MIN_NS     1000000
#define SOLO_MAX_NS     64000000

/* ===== Platform helpers ===== */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#if defined(__linux__)
static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
    /* Returns on wake, on EAGAIN (value already changed) or EINTR; callers re-check. */
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *addr, int n) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
#else
/* Portable fallback: a short sleep instead of a futex (correct, a little slower to wake). */
static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
    if (atomic_load(addr) == expected) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}
static void futex_wake(_Atomic uint32_t *addr, int n) { (void)addr; (void)n; }
#endif

/* ===== Pool state ===== */

#define CLAIM(gen, n, idx) (((uint64_t)(gen) << 32) | ((uint64_t)(n) << 16) | (uint64_t)(idx))
#define CLAIM_GEN(c)       ((uint32_t)((c) >> 32))
#define CLAIM_N(c)         ((uint32_t)(((c) >> 16) & 0xFFFF))
#define CLAIM_IDX(c)       ((uint32_t)((c) & 0xFFFF))

struct nx_threadpool {
    int n;                          /* threads including the caller */
    pthread_t *th;                  /* th[1..n-1] */

    /* Written by the caller once per run; read by workers after they see `gen` change. */
    _Alignas(64) _Atomic uint32_t gen;      /* futex word the idle workers wait on */
    _Atomic uint32_t n_sleeping;            /* workers in (or entering) futex_wait on gen */
    _Atomic(nx_task_fn) fn;
    _Atomic(void *) arg;
    _Atomic int base;                       /* first task index of this round */
    _Atomic int nth;                        /* task count passed to fn */
    _Atomic int quit;
    _Atomic int busy;                       /* a run is in progress (guards nesting) */

    /* Caller-only (protected by `busy`): straggler backoff state. */
    int64_t solo_until;                     /* run tasks inline until this time (ns) */
    int64_t solo_len;                       /* length of the next solo period (ns) */
    long n_stalls;                          /* stalled runs seen (for tests / benchmarks) */

    /* Task claiming: CLAIM(gen, tasks in this round, next index). */
    _Alignas(64) _Atomic uint64_t claim;

    /* Completion: tasks finished this round; futex word the caller may sleep on. */
    _Alignas(64) _Atomic uint32_t done;
    _Atomic uint32_t caller_sleeping;
};

/* Spin until *word != seen or the budget runs out; returns the last value read. */
static uint32_t spin_until_changed(_Atomic uint32_t *word, uint32_t seen) {
    int64_t t0 = 0;
    for (unsigned it = 0;; it++) {
        uint32_t v = atomic_load_explicit(word, memory_order_acquire);
        if (v != seen) return v;
        if (it < SPIN_PURE_ITERS) { cpu_relax(); continue; }
        if ((it & 7) == 0) {
            int64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_BUDGET_NS) return v;
            /* Give the core to a runnable thread (ours or another process's) that needs it. */
            sched_yield();
        } else {
            cpu_relax();
        }
    }
}

/* Take and run tasks of generation g until none is left. */
static void claim_and_run(nx_threadpool *tp, uint32_t g) {
    for (;;) {
        uint64_t c = atomic_load_explicit(&tp->claim, memory_order_acquire);
        if (CLAIM_GEN(c) != g || CLAIM_IDX(c) >= CLAIM_N(c)) return;
        /* Read the task before the CAS: a successful CAS proves the round is still open,
         * so these are this round's values (the caller rewrites them only after `done`). */
        nx_task_fn fn = atomic_load_explicit(&tp->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&tp->arg, memory_order_relaxed);
        int base = atomic_load_explicit(&tp->base, memory_order_relaxed);
        int nth = atomic_load_explicit(&tp->nth, memory_order_relaxed);
        uint32_t n = CLAIM_N(c);
        if (!atomic_compare_exchange_weak_explicit(&tp->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        fn(arg, base + (int)CLAIM_IDX(c), nth);
        if (atomic_fetch_add(&tp->done, 1) + 1 == n && atomic_load(&tp->caller_sleeping))
            futex_wake(&tp->done, 1);
    }
}

static void *worker_main(void *p) {
    nx_threadpool *tp = p;
    uint32_t seen = 0;               /* gen is 0 when the workers start */
    for (;;) {
        uint32_t g = spin_until_changed(&tp->gen, seen);
        while (g == seen) {
            atomic_fetch_add(&tp->n_sleeping, 1);
            if (atomic_load(&tp->gen) == seen) futex_wait(&tp->gen, seen);
            atomic_fetch_sub(&tp->n_sleeping, 1);
            g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        }
        if (atomic_load_explicit(&tp->quit, memory_order_acquire)) break;
        seen = g;
        claim_and_run(tp, g);
    }
    return NULL;
}

/* ===== Public API ===== */

static int read_sysfs_int(int cpu, const char *leaf, long *out) {
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, leaf);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fscanf(f, "%ld", out) == 1;
    fclose(f);
    return ok;
}

int nx_cpu_physical_cores(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1) online = 1;
#if defined(__linux__)
    const int max_cpus = 8192;
    cpu_set_t *set = CPU_ALLOC(max_cpus);
    if (!set) return (int)online;
    size_t set_size = CPU_ALLOC_SIZE(max_cpus);
    CPU_ZERO_S(set_size, set);
    if (sched_getaffinity(0, set_size, set) != 0) {
        CPU_FREE(set);
        return (int)online;
    }
    int n_avail = CPU_COUNT_S(set_size, set);
    long *keys = malloc(sizeof(long) * (size_t)(n_avail > 0 ? n_avail : 1));
    int n_keys = 0;
    for (int cpu = 0; keys && cpu < max_cpus; cpu++) {
        if (!CPU_ISSET_S(cpu, set_size, set)) continue;
        long core, pkg, key;
        if (read_sysfs_int(cpu, "core_id", &core) && read_sysfs_int(cpu, "physical_package_id", &pkg))
            key = (pkg << 24) ^ core;
        else
            key = -1 - cpu;                /* topology unknown: count this CPU as its own core */
        int dup = 0;
        for (int i = 0; i < n_keys && !dup; i++) dup = keys[i] == key;
        if (!dup) keys[n_keys++] = key;
    }
    free(keys);
    CPU_FREE(set);
    if (n_keys > 0) return n_keys;
    return n_avail > 0 ? n_avail : (int)online;
#else
    return (int)online;
#endif
}

nx_threadpool *nx_threadpool_create(int n_threads, nx_error *err) {
    if (n_threads <= 0) n_threads = nx_cpu_physical_cores();
    if (n_threads > 1024) n_threads = 1024;
    size_t sz = (sizeof(nx_threadpool) + 63) / 64 * 64;
    nx_threadpool *tp = aligned_alloc(64, sz);
    if (!tp) { nx_fail(err, NX_ERR_NOMEM, "thread pool: out of memory"); return NULL; }
    memset(tp, 0, sz);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->n_sleeping, 0);
    atomic_init(&tp->fn, NULL);
    atomic_init(&tp->arg, NULL);
    atomic_init(&tp->base, 0);
    atomic_init(&tp->nth, 1);
    atomic_init(&tp->quit, 0);
    atomic_init(&tp->busy, 0);
    atomic_init(&tp->claim, CLAIM(0, 0, 0));
    atomic_init(&tp->done, 0);
    atomic_init(&tp->caller_sleeping, 0);
    tp->n = 1;
    tp->solo_len = SOLO_MIN_NS;
    if (n_threads > 1) {
        tp->th = calloc((size_t)n_threads, sizeof *tp->th);
        if (!tp->th) return tp;                    /* degrade to an inline pool of 1 */
        for (int i = 1; i < n_threads; i++) {
            if (pthread_create(&tp->th[i], NULL, worker_main, tp) != 0) break;
            tp->n = i + 1;
        }
    }
    return tp;
}

void nx_threadpool_free(nx_threadpool *tp) {
    if (!tp) return;
    atomic_store(&tp->quit, 1);
    atomic_fetch_add(&tp->gen, 1);
    futex_wake(&tp->gen, INT_MAX);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->th[i], NULL);
    free(tp->th);
    free(tp);
}

int nx_threadpool_size(const nx_threadpool *tp) { return tp ? tp->n : 1; }

long nx_threadpool_stalls(const nx_threadpool *tp) { return tp ? tp->n_stalls : 0; }

/* One claim round: tasks [base, base + n) of nth. The caller takes index 0 first.
 * Returns the time (ns) the caller waited for workers after it ran out of tasks to take,
 * and in *worked the time it spent running tasks. */
static int64_t run_round(nx_threadpool *tp, nx_task_fn fn, void *arg, int base, int n, int nth, int64_t *worked) {
    const int64_t t_start = now_ns();
    uint32_t g = atomic_load_explicit(&tp->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&tp->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&tp->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&tp->base, base, memory_order_relaxed);
    atomic_store_explicit(&tp->nth, nth, memory_order_relaxed);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->claim, CLAIM(g, n, 1), memory_order_release);
    atomic_store(&tp->gen, g);                                   /* seq_cst: pairs with n_sleeping */
    if (atomic_load(&tp->n_sleeping)) futex_wake(&tp->gen, INT_MAX);

    fn(arg, base, nth);
    atomic_fetch_add(&tp->done, 1);
    claim_and_run(tp, g);            /* help with whatever the workers have not taken yet */

    const uint32_t target = (uint32_t)n;
    uint32_t d = atomic_load_explicit(&tp->done, memory_order_acquire);
    if (d == target) { *worked = now_ns() - t_start; return 0; }
    const int64_t t_idle = now_ns();
    *worked = t_idle - t_start;
    for (unsigned it = 0; d != target; it++) {
        if (it < SPIN_PURE_ITERS) {
            cpu_relax();
        } else if ((it & 7) == 0) {
            if (now_ns() - t_idle > SPIN_BUDGET_NS) {
                atomic_store(&tp->caller_sleeping, 1);
                d = atomic_load(&tp->done);
                if (d != target) futex_wait(&tp->done, d);
                atomic_store(&tp->caller_sleeping, 0);
            } else {
                sched_yield();
            }
        } else {
            cpu_relax();
        }
        d = atomic_load_explicit(&tp->done, memory_order_acquire);
    }
    return now_ns() - t_idle;
}

void nx_threadpool_run_tasks(nx_threadpool *tp, nx_task_fn fn, void *arg, int n_tasks) {
    if (n_tasks <= 0) return;
    if (!tp || tp->n == 1 || n_tasks == 1 || atomic_exchange(&tp->busy, 1)) {
        /* Inline: no pool, nothing to share, or the pool is busy (nested/concurrent run). */
        for (int i = 0; i < n_tasks; i++) fn(arg, i, n_tasks);
        return;
    }
    if (tp->solo_until && now_ns() < tp->solo_until) {
        /* Backing off after a stall: same tasks, same results, no waiting on a worker that
         * has no core. The workers sleep meanwhile. */
        for (int i = 0; i < n_tasks; i++) fn(arg, i, n_tasks);
    } else {
        int64_t waited = 0, worked = 0;
        for (int base = 0; base < n_tasks; base += ROUND_MAX) {
            int n = n_tasks - base < ROUND_MAX ? n_tasks - base : ROUND_MAX;
            int64_t w = 0;
            waited += run_round(tp, fn, arg, base, n, n_tasks, &w);
            worked += w;
        }
        if (waited > STALL_MIN_NS && waited > worked) {
            tp->n_stalls++;
            tp->solo_until = now_ns() + tp->solo_len;
            tp->solo_len = tp->solo_len * 2 > SOLO_MAX_NS ? SOLO_MAX_NS : tp->solo_len * 2;
        } else if (tp->solo_until) {
            /* A clean parallel run: shrink the next backoff again. */
            tp->solo_len = tp->solo_len / 2 < SOLO_MIN_NS ? SOLO_MIN_NS : tp->solo_len / 2;
            if (tp->solo_len == SOLO_MIN_NS) tp->solo_until = 0;
        }
    }
    atomic_store_explicit(&tp->busy, 0, memory_order_release);
}

void nx_threadpool_run(nx_threadpool *tp, nx_task_fn fn, void *arg) {
    if (!tp || tp->n == 1) { fn(arg, 0, 1); return; }
    nx_threadpool_run_tasks(tp, fn, arg, tp->n);
}
