/* threads.c — PLACEHOLDER pool (mutex + condvar, no spinning); replaced by the threads module. */
#include "threads.h"
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct nx_threadpool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv_go, cv_done;
    nx_task_fn fn;
    void *arg;
    long gen;
    int pending;
    int quit;
};

typedef struct { nx_threadpool *tp; int ith; } worker_arg;

static void *worker(void *p) {
    worker_arg *wa = p;
    nx_threadpool *tp = wa->tp;
    int ith = wa->ith;
    free(wa);
    long seen = 0;
    pthread_mutex_lock(&tp->mu);
    for (;;) {
        while (tp->gen == seen && !tp->quit) pthread_cond_wait(&tp->cv_go, &tp->mu);
        if (tp->quit) break;
        seen = tp->gen;
        nx_task_fn fn = tp->fn;
        void *arg = tp->arg;
        pthread_mutex_unlock(&tp->mu);
        fn(arg, ith, tp->n);
        pthread_mutex_lock(&tp->mu);
        if (--tp->pending == 0) pthread_cond_signal(&tp->cv_done);
    }
    pthread_mutex_unlock(&tp->mu);
    return NULL;
}

int nx_cpu_physical_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

nx_threadpool *nx_threadpool_create(int n_threads, nx_error *err) {
    if (n_threads <= 0) n_threads = nx_cpu_physical_cores();
    nx_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) { nx_fail(err, NX_ERR_NOMEM, "thread pool: out of memory"); return NULL; }
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv_go, NULL);
    pthread_cond_init(&tp->cv_done, NULL);
    tp->th = calloc((size_t)n_threads, sizeof *tp->th);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        wa->tp = tp;
        wa->ith = i;
        pthread_create(&tp->th[i], NULL, worker, wa);
    }
    return tp;
}

void nx_threadpool_free(nx_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    tp->quit = 1;
    pthread_cond_broadcast(&tp->cv_go);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->th[i], NULL);
    free(tp->th);
    free(tp);
}

int nx_threadpool_size(const nx_threadpool *tp) { return tp ? tp->n : 1; }

void nx_threadpool_run(nx_threadpool *tp, nx_task_fn fn, void *arg) {
    if (!tp || tp->n == 1) { fn(arg, 0, 1); return; }
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->arg = arg;
    tp->pending = tp->n - 1;
    tp->gen++;
    pthread_cond_broadcast(&tp->cv_go);
    pthread_mutex_unlock(&tp->mu);
    fn(arg, 0, tp->n);
    pthread_mutex_lock(&tp->mu);
    while (tp->pending > 0) pthread_cond_wait(&tp->cv_done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
