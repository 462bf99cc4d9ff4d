/*
 * kvs_backend: which compute backend this host can use.
 *
 * kvs_backend_probe() never fails: when the library was built without
 * CUDA, or no usable CUDA device answers, it reports the CPU backend and
 * says why, so the caller can log one clear line and keep serving.  It
 * touches the CUDA runtime, so it must run in the process that will use
 * the device (a worker or the engine), never in nginx's master before
 * fork.
 *
 * kvs_backend_t is the interface the engine drives, the same for every
 * backend: one forward step over a kvs_batch_t (prefill chunks and
 * decodes of many sequences mixed) reading and writing the K/V of the
 * pool's blocks through the batch's block tables, and a block copy for
 * copy-on-write.  The backend stores K/V; the pool and the tables (owned
 * by the scheduler) decide which block belongs to whom.  One thread (the
 * engine's) calls a backend at a time.
 */

#ifndef KVS_BACKEND_H
#define KVS_BACKEND_H

#include <stdint.h>

#include "../base/kvs_err.h"
#include "../model/kvs_model.h"
#include "kvs_batch.h"

typedef enum {
    KVS_BACKEND_CPU = 0,
    KVS_BACKEND_CUDA
} kvs_backend_kind_t;

typedef struct {
    kvs_backend_kind_t  kind;
    int                 cuda_built;    /* compiled with the CUDA sources */
    int                 n_devices;
    char                device[128];   /* device 0's name, when CUDA */
    uint64_t            device_mem;    /* its total memory, bytes */
    char                reason[256];   /* why the CPU, when it is */
} kvs_backend_info_t;

void kvs_backend_probe(kvs_backend_info_t *info);

typedef struct kvs_backend_s  kvs_backend_t;

typedef struct {
    /* writes every token's K/V and, for entries with want_logits, their
     * logits in batch order into logits[n_want][n_vocab]; a rejected
     * batch (KVS_EINVAL) changes nothing */
    int   (*forward)(kvs_backend_t *be, const kvs_batch_t *b,
                     float *logits, kvs_err_t *err);
    /* copies the K/V of block src into block dst, every layer */
    int   (*copy_block)(kvs_backend_t *be, uint32_t dst, uint32_t src,
                        kvs_err_t *err);
    void  (*free)(kvs_backend_t *be);
} kvs_backend_ops_t;

typedef struct {
    uint32_t  n_blocks;               /* K/V storage for this many */
    uint32_t  block_tokens;           /* token slots per block */
    unsigned  threads;                /* compute threads; 0: one per
                                         online CPU */
} kvs_backend_conf_t;

struct kvs_backend_s {
    const kvs_backend_ops_t  *ops;
    kvs_backend_kind_t        kind;
    uint32_t                  n_vocab;
    uint32_t                  n_blocks;
    uint32_t                  block_tokens;
    unsigned                  threads;
    uint64_t                  kv_bytes;    /* K/V storage, bytes */
    void                     *impl;
};

/* The CPU backend over model m (which must outlive it). */
int kvs_backend_cpu_new(kvs_backend_t **out, const kvs_model_t *m,
    const kvs_backend_conf_t *conf, kvs_err_t *err);

static inline int
kvs_backend_forward(kvs_backend_t *be, const kvs_batch_t *b, float *logits,
    kvs_err_t *err)
{
    return be->ops->forward(be, b, logits, err);
}

static inline int
kvs_backend_copy_block(kvs_backend_t *be, uint32_t dst, uint32_t src,
    kvs_err_t *err)
{
    return be->ops->copy_block(be, dst, src, err);
}

static inline void
kvs_backend_free(kvs_backend_t *be)
{
    if (be != NULL) {
        be->ops->free(be);
    }
}

const char *kvs_backend_name(kvs_backend_kind_t kind);

#endif /* KVS_BACKEND_H */
