/*
 * kvs_cuda_tier: the CUDA backend's block copies out of the device pool
 * and back (the ops block_read and block_write that the prefix cache's
 * lower tiers use, docs/prefix-cache.md "The second tier"), and the
 * pinned host memory of the host tier (host_alloc, host_free).
 *
 * Ownership: the copy stream `cst`, its two events and one pinned
 * staging block of be->kv_bytes / n_blocks bytes belong to the backend's
 * kvs_cuda_t; kvs_cuda_tier_init() makes them after the pool and
 * kvs_cuda_tier_release() frees them.
 *
 * Invariants:
 *   - a copy runs on cst, never on the step's stream st, and starts
 *     after everything queued on st so far (ev_step recorded on st, cst
 *     waits on it): the step that last wrote the block;
 *   - a write is ordered before the next step (ev_copy recorded on cst,
 *     st waits on it), and both ops return only once cst is drained, so
 *     the staging block is free again and dst holds the bytes;
 *   - the staging block's layout is kvs_cuda_bcopy.h's; the pieces come
 *     from kvs_cuda_bc_plan(), which splits a pitch over the device's
 *     limit into rows;
 *   - like every op, these run on the engine thread only;
 *   - the asynchronous copies (kvs_cuda_acopy.c) have a stream of their
 *     own, so these never wait behind them.
 */

#include <inttypes.h>
#include <string.h>

#include "kvs_cuda_impl.h"


int
kvs_cuda_tier_init(kvs_cuda_t *cu, kvs_err_t *err)
{
    int       rc, max_pitch;
    uint64_t  bytes;

    memset(&cu->bc, 0, sizeof(kvs_cuda_bc_geom_t));
    cu->bc.n_layer = cu->kv.n_layer;
    cu->bc.n_blocks = cu->kv.n_blocks;
    cu->bc.block_tokens = cu->kv.block_tokens;
    cu->bc.k_width = cu->hp.k_width;
    cu->bc.v_width = cu->hp.v_width;
    cu->bc.elem = (uint32_t) kvs_k_dtype_size(cu->kv.dtype);
    cu->bc.n_head_kv = cu->kv.n_head_kv;
    cu->bc.scaled = cu->kv.dtype == KVS_K_I8 || cu->kv.dtype == KVS_K_FP8;

    KVS_CUDA_TRY(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch,
                                        cu->device),
                 "cudaDeviceGetAttribute(max pitch)");
    cu->bc.max_pitch = max_pitch > 0 ? (uint64_t) max_pitch : 1;

    rc = kvs_cuda_bc_bytes(&cu->bc, &bytes, err);
    if (rc != KVS_OK) {
        return rc;
    }

    KVS_CUDA_TRY(cudaStreamCreateWithFlags(&cu->cst, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags(block copies)");
    KVS_CUDA_TRY(cudaEventCreateWithFlags(&cu->ev_step,
                                          cudaEventDisableTiming),
                 "cudaEventCreate(step)");
    KVS_CUDA_TRY(cudaEventCreateWithFlags(&cu->ev_copy,
                                          cudaEventDisableTiming),
                 "cudaEventCreate(block copy)");
    KVS_CUDA_TRY(cudaHostAlloc(&cu->stage, bytes, cudaHostAllocDefault),
                 "cudaHostAlloc(block staging)");

    /* the copies off the step: a stream and device staging of their
     * own (kvs_cuda_acopy.c) */
    return kvs_cuda_acopy_init(cu, bytes, err);

failed:

    return rc;
}


void
kvs_cuda_tier_release(kvs_cuda_t *cu)
{
    kvs_cuda_acopy_release(cu);

    if (cu->cst != NULL) {
        (void) cudaStreamSynchronize(cu->cst);
    }

    if (cu->stage != NULL) {
        (void) cudaFreeHost(cu->stage);
        cu->stage = NULL;
    }

    if (cu->ev_step != NULL) {
        (void) cudaEventDestroy(cu->ev_step);
        cu->ev_step = NULL;
    }

    if (cu->ev_copy != NULL) {
        (void) cudaEventDestroy(cu->ev_copy);
        cu->ev_copy = NULL;
    }

    if (cu->cst != NULL) {
        (void) cudaStreamDestroy(cu->cst);
        cu->cst = NULL;
    }
}


/* The pool's array a piece names. */
static char *
kvs_cuda_tier_array(kvs_cuda_t *cu, uint32_t array)
{
    switch (array) {
    case KVS_CUDA_BC_K:
        return cu->kv.k;
    case KVS_CUDA_BC_V:
        return cu->kv.v;
    case KVS_CUDA_BC_KS:
        return (char *) cu->kv.ks;
    default:
        return (char *) cu->kv.vs;
    }
}


/* Block b's pieces between the pool and the packed block at buf, on
 * stream s: into the pool (to_pool) or out, kind the direction's. */
int
kvs_cuda_tier_pieces(kvs_cuda_t *cu, uint32_t b, char *buf, int to_pool,
    enum cudaMemcpyKind kind, cudaStream_t s, kvs_err_t *err)
{
    int                         rc;
    char                       *dev, *pk;
    uint32_t                    i, r;
    kvs_cuda_bc_plan_t          pl;
    const kvs_cuda_bc_piece_t  *p;

    rc = kvs_cuda_bc_plan(&cu->bc, b, &pl, err);
    if (rc != KVS_OK) {
        return rc;
    }

    for (i = 0; i < pl.n; i++) {
        p = &pl.p[i];
        dev = kvs_cuda_tier_array(cu, p->array) + p->dev_off;
        pk = buf + p->host_off;

        if (p->per_row) {
            for (r = 0; r < p->height; r++) {
                KVS_CUDA_TRY(cudaMemcpyAsync(
                                 to_pool ? dev + r * p->dev_pitch
                                         : pk + r * p->width,
                                 to_pool ? pk + r * p->width
                                         : dev + r * p->dev_pitch,
                                 p->width, kind, s),
                             "cudaMemcpyAsync(block row)");
            }

            continue;
        }

        if (to_pool) {
            KVS_CUDA_TRY(cudaMemcpy2DAsync(dev, p->dev_pitch, pk, p->width,
                                           p->width, p->height, kind, s),
                         "cudaMemcpy2DAsync(block in)");
        } else {
            KVS_CUDA_TRY(cudaMemcpy2DAsync(pk, p->width, dev, p->dev_pitch,
                                           p->width, p->height, kind, s),
                         "cudaMemcpy2DAsync(block out)");
        }
    }

    return KVS_OK;

failed:

    return rc;
}


/* Queues block b's pieces on cst, after the step's work: out of the pool
 * into the staging block (to_dev 0) or back. */
static int
kvs_cuda_tier_copy(kvs_cuda_t *cu, uint32_t b, int to_dev, kvs_err_t *err)
{
    int  rc;

    KVS_CUDA_TRY(cudaEventRecord(cu->ev_step, cu->st),
                 "cudaEventRecord(step)");
    KVS_CUDA_TRY(cudaStreamWaitEvent(cu->cst, cu->ev_step, 0),
                 "cudaStreamWaitEvent(step)");

    return kvs_cuda_tier_pieces(cu, b, cu->stage, to_dev,
                                to_dev ? cudaMemcpyHostToDevice
                                       : cudaMemcpyDeviceToHost,
                                cu->cst, err);

failed:

    return rc;
}


int
kvs_cuda_block_read(kvs_backend_t *be, uint32_t b, void *dst,
    kvs_err_t *err)
{
    int          rc;
    kvs_cuda_t  *cu = be->impl;

    rc = kvs_cuda_tier_copy(cu, b, 0, err);
    if (rc != KVS_OK) {
        return rc;
    }

    KVS_CUDA_TRY(cudaStreamSynchronize(cu->cst),
                 "cudaStreamSynchronize(block out)");

    memcpy(dst, cu->stage, be->kv_bytes / be->n_blocks);

    return KVS_OK;

failed:

    return rc;
}


int
kvs_cuda_block_write(kvs_backend_t *be, uint32_t b, const void *src,
    kvs_err_t *err)
{
    int          rc;
    kvs_cuda_t  *cu = be->impl;

    if (b >= cu->kv.n_blocks) {
        return kvs_err_set(err, KVS_EINVAL, "cuda block write: block %"
                           PRIu32 " of a cache of %" PRIu32, b,
                           cu->kv.n_blocks);
    }

    memcpy(cu->stage, src, be->kv_bytes / be->n_blocks);

    rc = kvs_cuda_tier_copy(cu, b, 1, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* the next step reads the block only after it is in */
    KVS_CUDA_TRY(cudaEventRecord(cu->ev_copy, cu->cst),
                 "cudaEventRecord(block in)");
    KVS_CUDA_TRY(cudaStreamWaitEvent(cu->st, cu->ev_copy, 0),
                 "cudaStreamWaitEvent(block in)");
    KVS_CUDA_TRY(cudaStreamSynchronize(cu->cst),
                 "cudaStreamSynchronize(block in)");

    return KVS_OK;

failed:

    return rc;
}


void *
kvs_cuda_host_alloc(kvs_backend_t *be, size_t bytes, kvs_err_t *err)
{
    void        *p;
    cudaError_t  e;

    p = NULL;
    e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);

    if (e != cudaSuccess) {
        (void) kvs_cuda_fail(err, "cudaHostAlloc(host tier)", e);
        return NULL;
    }

    return p;
}


void
kvs_cuda_host_free(kvs_backend_t *be, void *p)
{
    if (p != NULL) {
        (void) cudaFreeHost(p);
    }
}
