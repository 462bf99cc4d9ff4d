/*
 * kvs_threads: a small persistent pool of worker threads for the data
 * parallel parts of a compute step (matrix rows, attention heads).
 *
 * kvs_threads_run() hands out tasks 0..n_tasks-1 to the workers and to
 * the calling thread, and returns once every task has run.  A call costs
 * a generation bump and, when the workers have gone to sleep, one
 * broadcast: workers spin briefly after each call (the next one usually
 * follows within microseconds, the same layer's next product) and then
 * block on a condition variable, so an idle engine burns no CPU.
 *
 * Invariants:
 *   - every task index in [0, n_tasks) runs exactly once per call, on
 *     some thread; thread indexes are 0 (the caller) .. n - 1;
 *   - a call returns only after every worker has finished with it, so
 *     the next call may reuse the argument's memory;
 *   - n == 1 creates no thread: tasks run on the caller, in order.
 *
 * Threads: one kvs_threads_run() at a time per pool (its owner's thread);
 * the workers block every signal, so a process that handles signals
 * (nginx) keeps receiving them on its own threads.  Threads are created
 * by kvs_threads_new() only, never at load time.
 */

#ifndef KVS_THREADS_H
#define KVS_THREADS_H

#include <stdint.h>

#include "kvs_err.h"

#define KVS_THREADS_MAX  256

typedef struct kvs_threads_s  kvs_threads_t;

/* One task: task in [0, n_tasks), thread in [0, n_threads). */
typedef void (*kvs_threads_fn_t)(void *arg, uint32_t task, uint32_t thread);

/* A pool of n threads counting the caller (n - 1 are created), 1 <= n <=
 * KVS_THREADS_MAX, else KVS_EINVAL.  KVS_ENOMEM, KVS_EIO if a thread cannot
 * be created (none is left running).  *out is NULL on failure. */
int kvs_threads_new(kvs_threads_t **out, unsigned n, kvs_err_t *err);

/* Runs fn(arg, task, thread) for every task; a NULL pool runs them on the
 * caller. */
void kvs_threads_run(kvs_threads_t *tp, kvs_threads_fn_t fn, void *arg,
    uint32_t n_tasks);

/* The same, but each thread owns a contiguous range of the tasks, in
 * order: thread i those in [n_tasks * i / n, n_tasks * (i + 1) / n),
 * and runs them in ascending order before it takes, one at a time, what
 * is left of the others' ranges (the next one of thread i + 1's, i + 2's
 * ...).  So when every thread keeps up, each walks one stretch of the
 * task space and claims without touching another core's cache line; a
 * late thread's tasks are still run by the others.  The guarantees of
 * kvs_threads_run() hold. */
void kvs_threads_run_ranges(kvs_threads_t *tp, kvs_threads_fn_t fn,
    void *arg, uint32_t n_tasks);

/* Threads counting the caller; 1 for a NULL pool. */
unsigned kvs_threads_count(const kvs_threads_t *tp);

/* Stops and joins the workers.  NULL is allowed. */
void kvs_threads_free(kvs_threads_t *tp);

#endif /* KVS_THREADS_H */
