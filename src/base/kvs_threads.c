/*
 * kvs_threads: the worker pool (see kvs_threads.h).
 *
 * A call publishes its job (fn, arg, n_tasks), resets the task counter and
 * the count of workers still busy, then bumps the generation and takes
 * the mutex to broadcast only if some worker sleeps.  Tasks are claimed
 * with an atomic counter, so a worker that wakes late finds them taken
 * and a slow one does not hold the others.  kvs_threads_run_ranges()
 * claims them from one counter per thread instead (its range, set by the
 * caller before the generation bump like the job), and a thread done
 * with its own range claims from the others' counters: there too every
 * task runs once and a late thread holds no one up.  The job fields
 * (ranges' ends included) are read by workers only between their seeing
 * the new generation and their check-out, and the caller rewrites them
 * only after every worker checked out: they need no atomics.
 *
 * No mutex on the fast path (every call, when the threads spin): a lock
 * that one side holds while the other wants it parks the other in the
 * kernel, a risk two threads meeting 60 times a decode step run.  The
 * sleeps are safe without it by store-then-load pairs, all seq_cst: a
 * worker counts itself in `sleeping` and then reads `gen`, the caller
 * bumps `gen` and then reads `sleeping`, so one of them sees the other
 * (the worker does not sleep, or the caller broadcasts under the mutex,
 * which the worker holds until it waits); likewise the caller's `waiting`
 * against the last worker's decrement of `busy`.  The counters written by
 * different threads live on cache lines of their own.
 */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_threads.h"

/* Spin iterations before sleeping; with the pause hint one is ~30-100 ns,
 * so a worker stays hot for tens of microseconds after a call. */
#define KVS_THREADS_SPIN  2000

#if defined(__x86_64__) || defined(__i386__)
#define kvs_threads_pause()  __builtin_ia32_pause()
#else
#define kvs_threads_pause()
#endif


typedef struct {
    kvs_threads_t  *tp;
    uint32_t        index;            /* 1 .. n - 1 */
} kvs_threads_worker_t;

/* kvs_threads_run_ranges: thread i's range of tasks, [next, end) left;
 * one cache line each, so a thread claiming its own tasks moves no line
 * between cores */
typedef struct {
    _Alignas(64) atomic_uint  next;
    uint32_t                  end;
} kvs_threads_range_t;

struct kvs_threads_s {
    pthread_mutex_t        mu;
    pthread_cond_t         wake;      /* workers: a new generation */
    pthread_cond_t         done;      /* caller: busy reached 0 */
    pthread_t             *threads;   /* [n - 1] */
    kvs_threads_worker_t  *workers;   /* [n - 1] */
    kvs_threads_range_t   *ranges;    /* [n] */
    unsigned               n;

    /* the job of the current generation */
    kvs_threads_fn_t       fn;
    void                  *arg;
    uint32_t               n_tasks;
    int                    ranged;    /* tasks claimed from ranges */

    int                    stop;      /* under mu */

    _Alignas(64) atomic_uint  gen;    /* the caller's: a new job */
    _Alignas(64) atomic_uint  next;   /* next unclaimed task */
    _Alignas(64) atomic_uint  busy;   /* workers not done with gen */
    atomic_uint            sleeping;  /* workers in (or going to) wake */
    atomic_int             waiting;   /* the caller in (or going to) done */
};


static void *kvs_threads_main(void *p);
static void kvs_threads_call(kvs_threads_t *tp, kvs_threads_fn_t fn,
    void *arg, uint32_t n_tasks, int ranged);
static void kvs_threads_work(kvs_threads_t *tp, uint32_t thread);


static void
kvs_threads_work(kvs_threads_t *tp, uint32_t thread)
{
    uint32_t              t, i;
    kvs_threads_range_t  *r;

    if (tp->ranged) {
        /* its own range in order, then what is left of the others' */
        for (i = 0; i < tp->n; i++) {
            r = &tp->ranges[(thread + i) % tp->n];

            for ( ;; ) {
                t = atomic_fetch_add_explicit(&r->next, 1,
                                              memory_order_relaxed);
                if (t >= r->end) {
                    break;
                }

                tp->fn(tp->arg, t, thread);
            }
        }

        return;
    }

    for ( ;; ) {
        t = atomic_fetch_add_explicit(&tp->next, 1, memory_order_relaxed);
        if (t >= tp->n_tasks) {
            return;
        }

        tp->fn(tp->arg, t, thread);
    }
}


static void *
kvs_threads_main(void *p)
{
    unsigned               seen, g, i;
    kvs_threads_t         *tp;
    kvs_threads_worker_t  *w;

    w = p;
    tp = w->tp;
    seen = 0;

    for ( ;; ) {
        for (i = 0; i < KVS_THREADS_SPIN; i++) {
            g = atomic_load_explicit(&tp->gen, memory_order_acquire);
            if (g != seen) {
                break;
            }
            kvs_threads_pause();
        }

        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->sleeping, 1);

            while (!tp->stop && atomic_load(&tp->gen) == seen) {
                pthread_cond_wait(&tp->wake, &tp->mu);
            }

            atomic_fetch_sub(&tp->sleeping, 1);

            if (tp->stop) {
                pthread_mutex_unlock(&tp->mu);
                return NULL;
            }

            g = atomic_load(&tp->gen);
            pthread_mutex_unlock(&tp->mu);
        }

        seen = g;
        kvs_threads_work(tp, w->index);

        /* the last one out wakes the caller if it sleeps (or is about
         * to: it set waiting before its last look at busy) */
        if (atomic_fetch_sub(&tp->busy, 1) == 1
            && atomic_load(&tp->waiting))
        {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}


int
kvs_threads_new(kvs_threads_t **out, unsigned n, kvs_err_t *err)
{
    int             rc;
    unsigned        i;
    sigset_t        all, old;
    kvs_threads_t  *tp;

    *out = NULL;

    if (n == 0 || n > KVS_THREADS_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "threads: %u threads, 1 to %d "
                           "allowed", n, KVS_THREADS_MAX);
    }

    /* the counters' cache lines: the struct's size is a multiple of 64 */
    tp = aligned_alloc(64, sizeof(kvs_threads_t));
    if (tp == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "threads: out of memory");
    }

    memset(tp, 0, sizeof(kvs_threads_t));

    tp->n = n;

    if (n == 1) {
        *out = tp;
        return KVS_OK;
    }

    tp->threads = calloc(n - 1, sizeof(pthread_t));
    tp->workers = calloc(n - 1, sizeof(kvs_threads_worker_t));
    tp->ranges = aligned_alloc(64, n * sizeof(kvs_threads_range_t));

    if (tp->threads == NULL || tp->workers == NULL || tp->ranges == NULL) {
        free(tp->threads);
        free(tp->workers);
        free(tp->ranges);
        free(tp);
        return kvs_err_set(err, KVS_ENOMEM, "threads: out of memory");
    }

    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->next, 0);
    atomic_init(&tp->busy, 0);
    atomic_init(&tp->sleeping, 0);
    atomic_init(&tp->waiting, 0);

    for (i = 0; i < n; i++) {
        atomic_init(&tp->ranges[i].next, 0);
        tp->ranges[i].end = 0;
    }

    /* workers inherit the mask: they never take the process's signals */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);

    rc = 0;

    for (i = 0; i < n - 1; i++) {
        tp->workers[i].tp = tp;
        tp->workers[i].index = i + 1;

        rc = pthread_create(&tp->threads[i], NULL, kvs_threads_main,
                            &tp->workers[i]);
        if (rc != 0) {
            break;
        }
    }

    pthread_sigmask(SIG_SETMASK, &old, NULL);

    if (rc != 0) {
        /* stop the ones started: tp->n counts only them */
        tp->n = i + 1;
        kvs_threads_free(tp);
        return kvs_err_set(err, KVS_EIO, "threads: cannot create thread "
                           "%u of %u: %s", i + 1, n, strerror(rc));
    }

    *out = tp;

    return KVS_OK;
}


void
kvs_threads_run(kvs_threads_t *tp, kvs_threads_fn_t fn, void *arg,
    uint32_t n_tasks)
{
    kvs_threads_call(tp, fn, arg, n_tasks, 0);
}


void
kvs_threads_run_ranges(kvs_threads_t *tp, kvs_threads_fn_t fn, void *arg,
    uint32_t n_tasks)
{
    kvs_threads_call(tp, fn, arg, n_tasks, 1);
}


static void
kvs_threads_call(kvs_threads_t *tp, kvs_threads_fn_t fn, void *arg,
    uint32_t n_tasks, int ranged)
{
    uint32_t  t;
    unsigned  i;

    if (tp == NULL || tp->n == 1 || n_tasks <= 1) {
        for (t = 0; t < n_tasks; t++) {
            fn(arg, t, 0);
        }
        return;
    }

    tp->fn = fn;
    tp->arg = arg;
    tp->n_tasks = n_tasks;
    tp->ranged = ranged;
    atomic_store_explicit(&tp->next, 0, memory_order_relaxed);

    if (ranged) {
        /* thread i: tasks [n_tasks * i / n, n_tasks * (i + 1) / n) */
        for (i = 0; i < tp->n; i++) {
            atomic_store_explicit(&tp->ranges[i].next,
                                  (uint32_t) ((uint64_t) n_tasks * i / tp->n),
                                  memory_order_relaxed);
            tp->ranges[i].end = (uint32_t) ((uint64_t) n_tasks * (i + 1)
                                            / tp->n);
        }
    }

    atomic_store_explicit(&tp->busy, tp->n - 1, memory_order_relaxed);

    /* seq_cst (so release too: the job above is visible to whoever sees
     * the new gen), then the look at sleeping */
    atomic_fetch_add(&tp->gen, 1);

    if (atomic_load(&tp->sleeping) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->mu);
    }

    kvs_threads_work(tp, 0);

    for (i = 0; i < KVS_THREADS_SPIN; i++) {
        if (atomic_load_explicit(&tp->busy, memory_order_acquire) == 0) {
            return;
        }
        kvs_threads_pause();
    }

    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->waiting, 1);

    while (atomic_load(&tp->busy) != 0) {
        pthread_cond_wait(&tp->done, &tp->mu);
    }

    atomic_store(&tp->waiting, 0);
    pthread_mutex_unlock(&tp->mu);
}


unsigned
kvs_threads_count(const kvs_threads_t *tp)
{
    return tp == NULL ? 1 : tp->n;
}


void
kvs_threads_free(kvs_threads_t *tp)
{
    unsigned  i;

    if (tp == NULL) {
        return;
    }

    if (tp->n > 1) {
        pthread_mutex_lock(&tp->mu);
        tp->stop = 1;
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->mu);

        for (i = 0; i < tp->n - 1; i++) {
            pthread_join(tp->threads[i], NULL);
        }

        pthread_cond_destroy(&tp->done);
        pthread_cond_destroy(&tp->wake);
        pthread_mutex_destroy(&tp->mu);
    }

    free(tp->threads);
    free(tp->workers);
    free(tp->ranges);
    free(tp);
}
