/*
 * kvs_test_acopy: a backend wrapper for tests that models a device's
 * asynchronous block copies (kvs_backend.h: block_read_async,
 * block_write_async, copy_poll, copy_wait) on the CPU backend, with a
 * copy thread that takes delay_us for each copy, one at a time in ticket
 * order, as a copy stream does; and host_alloc/host_free (counted
 * malloc) for the host tier.
 *
 * A read is staged at once (the block's bytes copied on the calling
 * thread into one of n_stage staging blocks, as CUDA stages it on the
 * device), then copied into dst by the thread; a write is done by the
 * thread, straight into the pool block.  So an engine that used a slot
 * or a pool block before its ticket is done reads stale bytes (and
 * TSan sees the race).  With sync set, the wrapper offers no
 * asynchronous ops and its block_read/block_write take delay_us on the
 * calling thread (today's synchronous path on a slow copy).  With
 * slow_sync set beside the asynchronous ops, block_write takes delay_us
 * on the calling thread too (a synchronous write the engine still
 * makes shows as a slow step); with max_writes set, the asynchronous
 * writes after the first max_writes are refused (KVS_KV_EFULL, as at the
 * backend's limit).
 *
 * The state is the caller's (kvs_engine_conf_t.backend_hook_arg), one a
 * backend; its ops are its first member, so be->ops finds it.
 */

#ifndef KVS_TEST_ACOPY_H
#define KVS_TEST_ACOPY_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/kvs_backend.h"
#include "kv/kvs_kv_pool.h"

#define KVS_TEST_ACOPY_MAX  256       /* copies in flight at most */

typedef struct {
    int            write;
    uint32_t       b;
    void          *dst;               /* read: where to */
    const void    *src;               /* write: from */
    uint32_t       stage;             /* read: its staging block */
    uint64_t       ticket;
} kvs_test_acopy_job_t;

typedef struct {
    kvs_backend_ops_t         ops;    /* first: be->ops points here */
    const kvs_backend_ops_t  *inner;
    kvs_backend_t            *be;

    /* set by the test before the engine is made */
    uint32_t                  delay_us;
    uint32_t                  n_stage;    /* 0: 64 */
    int                       sync;
    int                       slow_sync;
    uint32_t                  max_writes; /* taken; 0: no bound */

    /* counts */
    int                       allocs;
    int                       frees;
    uint64_t                  reads;
    uint64_t                  writes;
    uint64_t                  refused;

    pthread_t                 thread;
    int                       on;
    pthread_mutex_t           lk;
    pthread_cond_t            cv;
    int                       quit;
    kvs_test_acopy_job_t      jobs[KVS_TEST_ACOPY_MAX];
    uint32_t                  head;
    uint32_t                  count;
    uint64_t                  ticket;     /* the last queued */
    uint64_t                  done;       /* the last done */
    uint8_t                  *stage;      /* [n_stage][block_bytes] */
    uint32_t                  s_head;
    uint32_t                  s_count;
    uint32_t                  w_count;    /* writes taken */
    size_t                    block_bytes;
} kvs_test_acopy_t;


static inline kvs_test_acopy_t *
kvs_test_acopy_of(kvs_backend_t *be)
{
    return (kvs_test_acopy_t *) be->ops;
}


static void *
kvs_test_acopy_host_alloc(kvs_backend_t *be, size_t bytes, kvs_err_t *err)
{
    kvs_test_acopy_of(be)->allocs++;

    return malloc(bytes);
}


static void
kvs_test_acopy_host_free(kvs_backend_t *be, void *p)
{
    kvs_test_acopy_of(be)->frees++;
    free(p);
}


static void *
kvs_test_acopy_main(void *arg)
{
    kvs_err_t              err;
    kvs_test_acopy_t      *a = arg;
    kvs_test_acopy_job_t   j;

    pthread_mutex_lock(&a->lk);

    for ( ;; ) {
        if (a->count == 0) {
            if (a->quit) {
                break;
            }

            pthread_cond_wait(&a->cv, &a->lk);
            continue;
        }

        j = a->jobs[a->head];
        pthread_mutex_unlock(&a->lk);

        /* the copy's time, then the copy */
        usleep(a->delay_us);

        if (j.write) {
            (void) a->inner->block_write(a->be, j.b, j.src, &err);
        } else {
            memcpy(j.dst, a->stage + (size_t) j.stage * a->block_bytes,
                   a->block_bytes);
        }

        pthread_mutex_lock(&a->lk);
        a->head = (a->head + 1) % KVS_TEST_ACOPY_MAX;
        a->count--;
        a->done = j.ticket;

        if (!j.write) {
            a->s_head = (a->s_head + 1) % a->n_stage;
            a->s_count--;
        }

        pthread_cond_broadcast(&a->cv);
    }

    pthread_mutex_unlock(&a->lk);

    return NULL;
}


static int
kvs_test_acopy_queue(kvs_test_acopy_t *a, kvs_test_acopy_job_t *j,
    uint64_t *ticket, kvs_err_t *err)
{
    uint32_t  n, s;

    pthread_mutex_lock(&a->lk);

    if (a->count == KVS_TEST_ACOPY_MAX
        || (!j->write && a->s_count == a->n_stage)
        || (j->write && a->max_writes > 0 && a->w_count == a->max_writes))
    {
        a->refused++;
        n = a->count;
        s = a->s_count;
        pthread_mutex_unlock(&a->lk);
        return kvs_err_set(err, KVS_KV_EFULL, "test copies: %u in flight, "
                           "%u staged", n, s);
    }

    if (!j->write) {
        j->stage = (a->s_head + a->s_count) % a->n_stage;
        a->s_count++;
    } else {
        a->w_count++;
    }

    j->ticket = ++a->ticket;
    a->jobs[(a->head + a->count) % KVS_TEST_ACOPY_MAX] = *j;
    a->count++;
    *ticket = j->ticket;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->lk);

    return KVS_OK;
}


static int
kvs_test_acopy_read_async(kvs_backend_t *be, uint32_t b, void *dst,
    uint64_t *ticket, kvs_err_t *err)
{
    int                    rc;
    uint32_t               s;
    kvs_test_acopy_t      *a = kvs_test_acopy_of(be);
    kvs_test_acopy_job_t   j;

    memset(&j, 0, sizeof(j));
    j.b = b;
    j.dst = dst;

    /* the staging block this read will take, filled now ("on the
     * device"): only this thread queues, so it stays the next one */
    pthread_mutex_lock(&a->lk);
    s = (a->s_head + a->s_count) % a->n_stage;
    rc = a->s_count < a->n_stage ? KVS_OK : KVS_KV_EFULL;
    pthread_mutex_unlock(&a->lk);

    if (rc == KVS_OK) {
        rc = a->inner->block_read(be, b,
                                  a->stage + (size_t) s * a->block_bytes,
                                  err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    rc = kvs_test_acopy_queue(a, &j, ticket, err);
    a->reads += rc == KVS_OK;

    return rc;
}


static int
kvs_test_acopy_write_async(kvs_backend_t *be, uint32_t b, const void *src,
    uint64_t *ticket, kvs_err_t *err)
{
    int                    rc;
    kvs_test_acopy_t      *a = kvs_test_acopy_of(be);
    kvs_test_acopy_job_t   j;

    if (b >= be->n_blocks) {
        return kvs_err_set(err, KVS_EINVAL, "test copies: block %u", b);
    }

    memset(&j, 0, sizeof(j));
    j.write = 1;
    j.b = b;
    j.src = src;

    rc = kvs_test_acopy_queue(a, &j, ticket, err);
    a->writes += rc == KVS_OK;

    return rc;
}


static int
kvs_test_acopy_poll(kvs_backend_t *be, uint64_t *done, kvs_err_t *err)
{
    kvs_test_acopy_t  *a = kvs_test_acopy_of(be);

    pthread_mutex_lock(&a->lk);
    *done = a->done;
    pthread_mutex_unlock(&a->lk);

    return KVS_OK;
}


static int
kvs_test_acopy_wait(kvs_backend_t *be, uint64_t ticket, kvs_err_t *err)
{
    kvs_test_acopy_t  *a = kvs_test_acopy_of(be);

    pthread_mutex_lock(&a->lk);

    while (a->done < ticket) {
        pthread_cond_wait(&a->cv, &a->lk);
    }

    pthread_mutex_unlock(&a->lk);

    return KVS_OK;
}


/* sync: the copies at once, each taking delay_us */
static int
kvs_test_acopy_read_sync(kvs_backend_t *be, uint32_t b, void *dst,
    kvs_err_t *err)
{
    kvs_test_acopy_t  *a = kvs_test_acopy_of(be);

    usleep(a->delay_us);
    a->reads++;

    return a->inner->block_read(be, b, dst, err);
}


static int
kvs_test_acopy_write_sync(kvs_backend_t *be, uint32_t b, const void *src,
    kvs_err_t *err)
{
    kvs_test_acopy_t  *a = kvs_test_acopy_of(be);

    usleep(a->delay_us);
    a->writes++;

    return a->inner->block_write(be, b, src, err);
}


static void
kvs_test_acopy_free(kvs_backend_t *be)
{
    kvs_test_acopy_t  *a = kvs_test_acopy_of(be);

    if (a->on) {
        pthread_mutex_lock(&a->lk);
        a->quit = 1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->lk);
        pthread_join(a->thread, NULL);
        pthread_mutex_destroy(&a->lk);
        pthread_cond_destroy(&a->cv);
        a->on = 0;
    }

    free(a->stage);
    a->stage = NULL;
    be->ops = a->inner;
    a->inner->free(be);
}


/* The backend hook (arg: a kvs_test_acopy_t, zeroed but for its
 * settings): the CPU backend's ops, wrapped. */
static inline void
kvs_test_acopy_wrap(kvs_backend_t *be, void *arg)
{
    kvs_test_acopy_t  *a = arg;

    a->inner = be->ops;
    a->be = be;
    a->ops = *be->ops;
    a->ops.host_alloc = kvs_test_acopy_host_alloc;
    a->ops.host_free = kvs_test_acopy_host_free;
    a->ops.free = kvs_test_acopy_free;
    a->block_bytes = (size_t) (be->kv_bytes / be->n_blocks);
    a->n_stage = a->n_stage > 0 ? a->n_stage : 64;
    be->ops = &a->ops;

    if (a->sync) {
        a->ops.block_read = kvs_test_acopy_read_sync;
        a->ops.block_write = kvs_test_acopy_write_sync;
        return;
    }

    a->ops.block_read_async = kvs_test_acopy_read_async;
    a->ops.block_write_async = kvs_test_acopy_write_async;
    a->ops.copy_poll = kvs_test_acopy_poll;
    a->ops.copy_wait = kvs_test_acopy_wait;

    if (a->slow_sync) {
        a->ops.block_write = kvs_test_acopy_write_sync;
    }

    a->stage = malloc((size_t) a->n_stage * a->block_bytes);
    pthread_mutex_init(&a->lk, NULL);
    pthread_cond_init(&a->cv, NULL);

    if (a->stage == NULL
        || pthread_create(&a->thread, NULL, kvs_test_acopy_main, a) != 0)
    {
        abort();                      /* a test's own setup */
    }

    a->on = 1;
}

#endif /* KVS_TEST_ACOPY_H */
