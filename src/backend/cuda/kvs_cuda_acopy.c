/*
 * kvs_cuda_acopy: the CUDA backend's block copies off the step (the ops
 * block_read_async, block_write_async, copy_poll and copy_wait,
 * kvs_backend.h), which the host tier of the prefix cache uses so that
 * no step waits on a device-to-host or host-to-device copy
 * (docs/prefix-cache.md, "Copies off the step").
 *
 * Ownership: a stream `ast` of these copies' own, one event recorded on
 * the step's stream before each copy, a ring of KVS_CUDA_ACOPY_MAX
 * events (ticket t's end is ev[t % KVS_CUDA_ACOPY_MAX]) and n_stage
 * blocks of device staging; kvs_cuda_acopy_init() makes them after the
 * pool, kvs_cuda_acopy_release() waits for the stream and frees them.
 *
 * Invariants:
 *   - a read first copies the block, on the step's stream st, into a
 *     staging block on the device (device to device: microseconds, in
 *     order with the steps), then on ast from there into the caller's
 *     pinned memory: the pool block may be given to another sequence
 *     and written by the next step at once, since st orders that write
 *     after the staging copy; holding the pool block until the copy is
 *     done instead would leave the pool short exactly when eviction was
 *     asked for room;
 *   - a staging block is reused only once its read's ticket is done (a
 *     FIFO: reads finish in ticket order); none free, or
 *     KVS_CUDA_ACOPY_MAX tickets in flight: KVS_KV_EFULL, nothing
 *     queued;
 *   - a write goes straight from pinned memory into the pool block, on
 *     ast after everything queued on st so far; the engine lets no step
 *     read the block before its ticket is done;
 *   - one stream: tickets finish in order, so the last done is one
 *     number; a failed event makes every later call fail (sticky, as a
 *     CUDA error in the context is);
 *   - the synchronous ops (kvs_cuda_tier.c) use their own stream cst,
 *     and never wait behind these.
 * Engine thread only, like every op.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cuda_impl.h"

#define KVS_CUDA_ACOPY_MAX          1024    /* tickets in flight */
#define KVS_CUDA_ACOPY_STAGE_BYTES  (64ull << 20)
#define KVS_CUDA_ACOPY_STAGE_MAX    256     /* staging blocks at most */

typedef struct kvs_cuda_acopy_s {
    cudaStream_t   ast;
    cudaEvent_t    ev_from;             /* recorded on st before a copy */
    cudaEvent_t    ev[KVS_CUDA_ACOPY_MAX];
    uint32_t       n_ev;                /* made so far */
    char          *dstage;              /* [n_stage][block_bytes] */
    uint64_t      *s_ticket;            /* [n_stage] its read's ticket */
    uint32_t       n_stage;
    uint32_t       s_head;              /* the oldest staging block used */
    uint32_t       s_count;
    uint64_t       block_bytes;
    uint64_t       ticket;              /* the last queued */
    uint64_t       done;                /* the last seen done */
    int            failed;
} kvs_cuda_acopy_t;


int
kvs_cuda_acopy_init(kvs_cuda_t *cu, uint64_t block_bytes, kvs_err_t *err)
{
    int                rc;
    uint64_t           n;
    cudaError_t        e;
    kvs_cuda_acopy_t  *ac;

    ac = calloc(1, sizeof(kvs_cuda_acopy_t));
    if (ac == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cuda: out of memory for the "
                           "asynchronous copies");
    }

    cu->ac = ac;
    ac->block_bytes = block_bytes;

    KVS_CUDA_TRY(cudaStreamCreateWithFlags(&ac->ast, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags(copies off the step)");
    KVS_CUDA_TRY(cudaEventCreateWithFlags(&ac->ev_from,
                                          cudaEventDisableTiming),
                 "cudaEventCreate(before a copy)");

    for ( /* void */ ; ac->n_ev < KVS_CUDA_ACOPY_MAX; ac->n_ev++) {
        KVS_CUDA_TRY(cudaEventCreateWithFlags(&ac->ev[ac->n_ev],
                                              cudaEventDisableTiming),
                     "cudaEventCreate(a copy's end)");
    }

    /* the staging: 64 MiB of blocks (1 to 256); the pool took its share
     * of the device first, so on a device short of memory halve it down
     * to none, when reads are refused (the engine counts them) */
    n = KVS_CUDA_ACOPY_STAGE_BYTES / block_bytes;
    n = n < 1 ? 1 : n;
    n = n > KVS_CUDA_ACOPY_STAGE_MAX ? KVS_CUDA_ACOPY_STAGE_MAX : n;

    for ( /* void */ ; n > 0; n /= 2) {
        e = cudaMalloc((void **) &ac->dstage, n * block_bytes);
        if (e == cudaSuccess) {
            break;
        }

        (void) cudaGetLastError();
        ac->dstage = NULL;

        if (e != cudaErrorMemoryAllocation) {
            rc = kvs_cuda_fail(err, "cudaMalloc(copy staging)", e);
            goto failed;
        }
    }

    ac->n_stage = (uint32_t) n;
    ac->s_ticket = calloc(n > 0 ? n : 1, sizeof(uint64_t));

    if (ac->s_ticket == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "cuda: out of memory for the "
                         "asynchronous copies");
        goto failed;
    }

    return KVS_OK;

failed:

    return rc;
}


void
kvs_cuda_acopy_release(kvs_cuda_t *cu)
{
    uint32_t           i;
    kvs_cuda_acopy_t  *ac = cu->ac;

    if (ac == NULL) {
        return;
    }

    if (ac->ast != NULL) {
        (void) cudaStreamSynchronize(ac->ast);
    }

    if (ac->dstage != NULL) {
        (void) cudaFree(ac->dstage);
    }

    for (i = 0; i < ac->n_ev; i++) {
        (void) cudaEventDestroy(ac->ev[i]);
    }

    if (ac->ev_from != NULL) {
        (void) cudaEventDestroy(ac->ev_from);
    }

    if (ac->ast != NULL) {
        (void) cudaStreamDestroy(ac->ast);
    }

    free(ac->s_ticket);
    free(ac);
    cu->ac = NULL;
}


/* The tickets done so far (never waits), and the staging they free. */
static int
kvs_cuda_acopy_poll(kvs_cuda_acopy_t *ac, kvs_err_t *err)
{
    cudaError_t  e;

    if (ac->failed) {
        return kvs_err_set(err, KVS_EIO, "cuda: a copy off the step "
                           "failed");
    }

    while (ac->done < ac->ticket) {
        e = cudaEventQuery(ac->ev[(ac->done + 1) % KVS_CUDA_ACOPY_MAX]);

        if (e == cudaErrorNotReady) {
            break;
        }

        if (e != cudaSuccess) {
            ac->failed = 1;
            return kvs_cuda_fail(err, "cudaEventQuery(a copy's end)", e);
        }

        ac->done++;
    }

    while (ac->s_count > 0 && ac->s_ticket[ac->s_head] <= ac->done) {
        ac->s_head = (ac->s_head + 1) % ac->n_stage;
        ac->s_count--;
    }

    return KVS_OK;
}


/* Room for one more copy (a staging block too, for a read): polls
 * first; KVS_KV_EFULL when there is none. */
static int
kvs_cuda_acopy_room(kvs_cuda_acopy_t *ac, int read, kvs_err_t *err)
{
    int  rc;

    rc = kvs_cuda_acopy_poll(ac, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (ac->ticket - ac->done >= KVS_CUDA_ACOPY_MAX
        || (read && ac->s_count >= ac->n_stage))
    {
        return kvs_err_set(err, KVS_KV_EFULL, "cuda: %" PRIu64 " copies "
                           "in flight, %" PRIu32 " of %" PRIu32 " staging "
                           "blocks used", ac->ticket - ac->done,
                           ac->s_count, ac->n_stage);
    }

    return KVS_OK;
}


/* The copy queued: ast after st's work so far (ev_from). */
static int
kvs_cuda_acopy_after_step(kvs_cuda_t *cu, kvs_err_t *err)
{
    int                rc;
    kvs_cuda_acopy_t  *ac = cu->ac;

    KVS_CUDA_TRY(cudaEventRecord(ac->ev_from, cu->st),
                 "cudaEventRecord(before a copy)");
    KVS_CUDA_TRY(cudaStreamWaitEvent(ac->ast, ac->ev_from, 0),
                 "cudaStreamWaitEvent(before a copy)");

    return KVS_OK;

failed:

    ac->failed = 1;

    return rc;
}


/* The copy's end: a new ticket. */
static int
kvs_cuda_acopy_end(kvs_cuda_acopy_t *ac, uint64_t *ticket, kvs_err_t *err)
{
    int  rc;

    KVS_CUDA_TRY(cudaEventRecord(ac->ev[(ac->ticket + 1)
                                        % KVS_CUDA_ACOPY_MAX], ac->ast),
                 "cudaEventRecord(a copy's end)");

    *ticket = ++ac->ticket;

    return KVS_OK;

failed:

    ac->failed = 1;

    return rc;
}


int
kvs_cuda_block_read_async(kvs_backend_t *be, uint32_t b, void *dst,
    uint64_t *ticket, kvs_err_t *err)
{
    int                rc;
    char              *stg;
    uint32_t           s;
    kvs_cuda_t        *cu = be->impl;
    kvs_cuda_acopy_t  *ac = cu->ac;

    if (b >= cu->kv.n_blocks) {
        return kvs_err_set(err, KVS_EINVAL, "cuda block read: block %"
                           PRIu32 " of a cache of %" PRIu32, b,
                           cu->kv.n_blocks);
    }

    rc = kvs_cuda_acopy_room(ac, 1, err);
    if (rc != KVS_OK) {
        return rc;
    }

    s = (ac->s_head + ac->s_count) % ac->n_stage;
    stg = ac->dstage + (size_t) s * ac->block_bytes;

    /* into the device staging on the step's stream, in order with the
     * steps; then out to dst on ast, after it */
    rc = kvs_cuda_tier_pieces(cu, b, stg, 0, cudaMemcpyDeviceToDevice,
                              cu->st, err);
    if (rc != KVS_OK) {
        ac->failed = 1;
        return rc;
    }

    rc = kvs_cuda_acopy_after_step(cu, err);
    if (rc != KVS_OK) {
        return rc;
    }

    KVS_CUDA_TRY(cudaMemcpyAsync(dst, stg, ac->block_bytes,
                                 cudaMemcpyDeviceToHost, ac->ast),
                 "cudaMemcpyAsync(a block out)");

    rc = kvs_cuda_acopy_end(ac, ticket, err);
    if (rc != KVS_OK) {
        return rc;
    }

    ac->s_ticket[s] = *ticket;
    ac->s_count++;

    return KVS_OK;

failed:

    ac->failed = 1;

    return rc;
}


int
kvs_cuda_block_write_async(kvs_backend_t *be, uint32_t b, const void *src,
    uint64_t *ticket, kvs_err_t *err)
{
    int                rc;
    kvs_cuda_t        *cu = be->impl;
    kvs_cuda_acopy_t  *ac = cu->ac;

    if (b >= cu->kv.n_blocks) {
        return kvs_err_set(err, KVS_EINVAL, "cuda block write: block %"
                           PRIu32 " of a cache of %" PRIu32, b,
                           cu->kv.n_blocks);
    }

    rc = kvs_cuda_acopy_room(ac, 0, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_cuda_acopy_after_step(cu, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_cuda_tier_pieces(cu, b, (char *) src, 1,
                              cudaMemcpyHostToDevice, ac->ast, err);
    if (rc != KVS_OK) {
        ac->failed = 1;
        return rc;
    }

    return kvs_cuda_acopy_end(ac, ticket, err);
}


int
kvs_cuda_copy_poll(kvs_backend_t *be, uint64_t *done, kvs_err_t *err)
{
    int                rc;
    kvs_cuda_t        *cu = be->impl;
    kvs_cuda_acopy_t  *ac = cu->ac;

    rc = kvs_cuda_acopy_poll(ac, err);
    *done = ac->done;

    return rc;
}


int
kvs_cuda_copy_wait(kvs_backend_t *be, uint64_t ticket, kvs_err_t *err)
{
    int                rc;
    kvs_cuda_t        *cu = be->impl;
    kvs_cuda_acopy_t  *ac = cu->ac;

    if (ac->failed) {
        return kvs_err_set(err, KVS_EIO, "cuda: a copy off the step "
                           "failed");
    }

    ticket = ticket < ac->ticket ? ticket : ac->ticket;

    if (ticket > ac->done) {
        KVS_CUDA_TRY(cudaEventSynchronize(ac->ev[ticket
                                                 % KVS_CUDA_ACOPY_MAX]),
                     "cudaEventSynchronize(a copy's end)");
        ac->done = ticket;
    }

    return kvs_cuda_acopy_poll(ac, err);

failed:

    ac->failed = 1;

    return rc;
}
