/*
 * kvs_backend: which compute backend this host can use, and making it.
 *
 * The CUDA backend is a shared object of its own (libkvserve_cuda.so,
 * path compiled in as KVS_CUDA_SO, or the environment's KVSERVE_CUDA_SO),
 * dlopened only by kvs_backend_probe() and kvs_backend_new(): they run in
 * the engine process (or the CLI), never in nginx's master or workers,
 * which must not map cudart or cuBLAS.  The probe first loads
 * libkvserve_cuda_probe.so beside it (cudart only), so that a host
 * without a device never maps cuBLAS either.  Loaded objects stay loaded
 * for the life of the process.
 *
 * kvs_backend_probe() never fails: when the library was built without
 * CUDA, the shared object cannot be loaded, or no usable CUDA device
 * answers, it reports the CPU backend and says why, so the caller can
 * log one clear line and keep serving.
 *
 * kvs_backend_t is the interface the engine drives, the same for every
 * backend: one forward step over a kvs_batch_t (prefill chunks and
 * decodes of many sequences mixed) reading and writing the K/V of the
 * pool's blocks through the batch's block tables, and a block copy for
 * copy-on-write.  The backend stores K/V; the pool and the tables (owned
 * by the scheduler) decide which block belongs to whom.  One thread (the
 * engine's) calls a backend at a time.
 *
 * Every backend fills be->mem when it is made: what its weights take
 * where, and the element its K/V cache stores, so that the log, HELLO,
 * /v1/models and kv_rate tell the memory the serving backend holds, not
 * a guess from the file.
 */

#ifndef KVS_BACKEND_H
#define KVS_BACKEND_H

#include <stdint.h>

#include "base/kvs_err.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"
#include "kv/kvs_batch.h"
#include "kv/kvs_kv_layout.h"

typedef enum {
    KVS_BACKEND_CPU = 0,
    KVS_BACKEND_CUDA,
    KVS_BACKEND_AUTO                  /* CUDA when a device answers, else
                                         the CPU: kvs_backend_new() only */
} kvs_backend_kind_t;

typedef struct {
    kvs_backend_kind_t  kind;
    int                 cuda_built;    /* compiled with the CUDA sources */
    int                 n_devices;
    int                 ordinal;       /* the device probed or used */
    char                device[128];   /* its name, when CUDA */
    uint64_t            device_mem;    /* its total memory, bytes */
    char                reason[256];   /* why this backend (for the CPU:
                                          why not CUDA) */
} kvs_backend_info_t;

/* Probes CUDA device `device` (an ordinal): kind is CUDA when it runs
 * our kernels, else the CPU with the reason. */
void kvs_backend_probe(kvs_backend_info_t *info, int device);

typedef struct kvs_backend_s  kvs_backend_t;

/* The element a backend's K/V cache stores: kvs_kv_layout's dtypes,
 * the values the wire carries. */
typedef enum {
    KVS_BACKEND_KV_F32 = KVS_KV_F32,
    KVS_BACKEND_KV_BF16 = KVS_KV_BF16,
    KVS_BACKEND_KV_F16 = KVS_KV_F16,
    KVS_BACKEND_KV_INT8 = KVS_KV_INT8,
    KVS_BACKEND_KV_FP8 = KVS_KV_FP8,
    KVS_BACKEND_KV_MAX = KVS_KV_DTYPE_MAX
} kvs_backend_kv_dtype_t;

/* Where a backend's weights live once loaded, bytes.  mapped + owned +
 * device is what the weights take; none counts the K/V cache. */
typedef struct {
    uint64_t  weights_mapped;         /* the model file's mapping, read
                                         by compute as stored */
    uint64_t  weights_owned;          /* host copies the backend made:
                                         converted vectors, repacked
                                         matrices */
    uint64_t  weights_device;         /* device memory, after load-time
                                         conversion (with its padding) */
    uint32_t  kv_dtype;               /* kvs_backend_kv_dtype_t */
} kvs_backend_mem_t;

/* One row's device sampling (kvs_sample.h steps 3 to 10, min-p off):
 * the coin is drawn by the engine from the request's RNG, exactly when
 * kvs_sample() would draw it (non-greedy rows), so seeds mean the same
 * on every backend. */
typedef struct kvs_backend_sample_s {
    float     temperature;            /* 0: greedy */
    int32_t   top_k;                  /* 0 or >= n_vocab: off */
    float     top_p;                  /* 1: off */
    float     coin;                   /* [0, 1); unused when greedy */
} kvs_backend_sample_t;

typedef struct {
    /* writes every token's K/V and, for entries with want_logits, their
     * logits in batch order into logits[n_want][n_vocab]; a rejected
     * batch (KVS_EINVAL) changes nothing */
    int   (*forward)(kvs_backend_t *be, const kvs_batch_t *b,
                     float *logits, kvs_err_t *err);
    /* optional (NULL: the backend samples nothing): forward, then
     * samples every entry with want_logits on the device with params[i]
     * (kvs_backend_sample_t, in batch order), writing only the token
     * ids ids[n_want]; the engine uses it when every such entry's
     * sampler needs nothing the device lacks (logprobs, penalties, logit
     * bias, min-p) */
    int   (*forward_sample)(kvs_backend_t *be, const kvs_batch_t *b,
                            const struct kvs_backend_sample_s *params,
                            int32_t *ids, kvs_err_t *err);
    /* copies the K/V of block src into block dst, every layer */
    int   (*copy_block)(kvs_backend_t *be, uint32_t dst, uint32_t src,
                        kvs_err_t *err);
    void  (*free)(kvs_backend_t *be);
    /* optional (NULL: the backend has no second tier): the K/V bytes of
     * block b, every layer, scales included (be->kv_bytes / n_blocks of
     * them), out into dst or in from src (the disk tier's spill and
     * load); KVS_EINVAL for a block out of range */
    int   (*block_read)(kvs_backend_t *be, uint32_t b, void *dst,
                        kvs_err_t *err);
    int   (*block_write)(kvs_backend_t *be, uint32_t b, const void *src,
                         kvs_err_t *err);
    /* optional, both or neither (NULL: the backend serves no LoRA
     * adapters): set_lora puts adapter l (NULL: none) into slot
     * 1..KVS_BACKEND_LORA_SLOTS, checked against the model (the backend
     * borrows l until the slot is set again or the backend is freed);
     * forward_lora is forward with slots[b->n], each entry's adapter
     * slot (0: the base alone); an entry naming an empty slot is
     * KVS_EINVAL before anything is written */
    int   (*set_lora)(kvs_backend_t *be, uint32_t slot, const kvs_lora_t *l,
                      kvs_err_t *err);
    int   (*forward_lora)(kvs_backend_t *be, const kvs_batch_t *b,
                          const uint32_t *slots, float *logits,
                          kvs_err_t *err);
    /* optional, both or neither (NULL: plain malloc serves): host memory
     * the backend copies blocks to and from fastest (CUDA: pinned), for
     * a host tier of the prefix cache; NULL and err set when refused */
    void *(*host_alloc)(kvs_backend_t *be, size_t bytes, kvs_err_t *err);
    void  (*host_free)(kvs_backend_t *be, void *p);
    /* optional, all three or none (NULL: set_lora does all of it on the
     * engine's thread): set_lora in two halves, so that the costly one
     * (checking and converting the adapter's values) runs on another
     * thread while the engine steps.  lora_prepare builds adapter l's
     * slot image, checked against the model, into *img (the caller's:
     * it reads be's model shapes, fixed since kvs_backend_new, and l,
     * and touches no other backend state, so any thread may run it
     * during a forward; img may borrow l until it is installed or
     * freed).  lora_install, on the engine's thread between steps, puts
     * img (NULL: none) into slot 1..KVS_BACKEND_LORA_SLOTS and takes
     * it; *spent is an image the backend no longer reads (the slot's
     * last, or img's staging copy; NULL: none), for the caller to free
     * with lora_free_image on any thread.  A failed install leaves the
     * slot as it was and img the caller's.  lora_free_image(NULL) does
     * nothing. */
    int   (*lora_prepare)(kvs_backend_t *be, const kvs_lora_t *l,
                          void **img, kvs_err_t *err);
    int   (*lora_install)(kvs_backend_t *be, uint32_t slot, void *img,
                          void **spent, kvs_err_t *err);
    void  (*lora_free_image)(kvs_backend_t *be, void *img);
    /*
     * optional, all four or none (NULL: block_read and block_write copy
     * at once, on the engine thread): the same copies queued off the
     * step (CUDA: on a copy stream of their own), between a block and
     * host_alloc's memory, each given a ticket (> 0, rising).  Copies
     * finish in ticket order: copy_poll's *done is the last ticket
     * finished (every earlier one is), without waiting; copy_wait
     * waits until ticket is finished.
     *   - block_read_async takes block b as every step queued so far
     *     left it, so the block may be given to another sequence, and
     *     written by the next step, at once (CUDA stages it on the
     *     device); dst receives it by its ticket, and stays the
     *     caller's until then;
     *   - block_write_async writes src into block b by its ticket; no
     *     step may read block b, and src must stay, until then.
     * KVS_ERANGE (KVS_KV_EFULL) when the backend holds as many copies
     * in flight (or staged blocks) as it can: nothing queued, the
     * caller copies at once or not at all.  A copy that failed fails
     * copy_poll and copy_wait, and every later ticket with it.  Like
     * every op, these run on the engine thread.
     */
    int   (*block_read_async)(kvs_backend_t *be, uint32_t b, void *dst,
                              uint64_t *ticket, kvs_err_t *err);
    int   (*block_write_async)(kvs_backend_t *be, uint32_t b,
                               const void *src, uint64_t *ticket,
                               kvs_err_t *err);
    int   (*copy_poll)(kvs_backend_t *be, uint64_t *done, kvs_err_t *err);
    int   (*copy_wait)(kvs_backend_t *be, uint64_t ticket, kvs_err_t *err);
} kvs_backend_ops_t;

/* Adapter slots a backend with set_lora holds at once (the CPU's). */
#define KVS_BACKEND_LORA_SLOTS  64

typedef struct {
    uint32_t  n_blocks;               /* K/V storage for this many */
    uint32_t  block_tokens;           /* token slots per block */
    unsigned  threads;                /* compute threads; 0: one per
                                         online CPU */
    kvs_backend_kind_t
              kind;                   /* which backend kvs_backend_new
                                         makes */
    int       device;                 /* CUDA device ordinal */
    double    kv_fraction;            /* CUDA: when n_blocks is 0, size
                                         the pool to this fraction of the
                                         device memory free after weights
                                         and workspace, (0, 1] */
    int       kv_dtype_set;           /* 0: the backend's own K/V dtype
                                         (CPU f32; CUDA bf16, f32 for an
                                         all-F32 model) */
    uint32_t  kv_dtype;               /* else this kvs_kv_dtype_t; one
                                         the backend cannot store is
                                         KVS_EUNSUPPORTED naming it */
} kvs_backend_conf_t;

struct kvs_backend_s {
    const kvs_backend_ops_t  *ops;
    kvs_backend_kind_t        kind;
    uint32_t                  n_vocab;
    uint32_t                  n_blocks;
    uint32_t                  block_tokens;
    unsigned                  threads;
    uint64_t                  kv_bytes;    /* K/V storage, bytes */
    kvs_backend_mem_t         mem;
    void                     *impl;
};

/* The CPU backend over model m (which must outlive it). */
int kvs_backend_cpu_new(kvs_backend_t **out, const kvs_model_t *m,
    const kvs_backend_conf_t *conf, kvs_err_t *err);

/*
 * The backend conf->kind names over model m: the CPU; CUDA on
 * conf->device (KVS_EINVAL or KVS_EIO naming why when the shared object
 * or the device is missing); or, for AUTO, CUDA when the device answers
 * the probe, else the CPU.  info (may be NULL) says what was made, on
 * which device and why.  With CUDA and conf->kv_fraction > 0, the
 * backend sizes the K/V pool itself (n_blocks is passed as 0 and
 * be->n_blocks says how many); n_blocks is the CPU's and an explicit
 * size's.
 */
int kvs_backend_new(kvs_backend_t **out, const kvs_model_t *m,
    const kvs_backend_conf_t *conf, kvs_backend_info_t *info,
    kvs_err_t *err);

/* "cpu", "cuda" or "auto" into *kind; KVS_EINVAL for anything else. */
int kvs_backend_parse(const char *s, size_t len, kvs_backend_kind_t *kind);

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

/* "CPU", "CUDA", "auto" */
const char *kvs_backend_name(kvs_backend_kind_t kind);

/* A kvs_backend_kv_dtype_t's name ("f32", "bf16", "int8") and element
 * bytes (kvs_kv_dtype_name, kvs_kv_dtype_elem); "?" and 0 for another
 * value.  A token's bytes, scales included: kvs_kv_bytes_per_token(). */
const char *kvs_backend_kv_name(uint32_t dtype);
uint32_t kvs_backend_kv_size(uint32_t dtype);

#endif /* KVS_BACKEND_H */
