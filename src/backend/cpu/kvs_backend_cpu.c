/*
 * kvs_backend_cpu: the CPU backend behind the kvs_backend_t interface: a
 * kvs_cpu_model_t (weights resolved in the model's mapping) and a
 * kvs_cpu_kv_t (K/V storage and scratch) owned together.
 *
 * Invariant: impl's kv has exactly be->n_blocks blocks of
 * be->block_tokens slots, so every block id the pool hands out has
 * storage here.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/kvs_backend.h"
#include "kvs_cpu.h"


typedef struct {
    kvs_cpu_model_t  *cm;
    kvs_cpu_kv_t     *kv;
} kvs_backend_cpu_t;


static int kvs_backend_cpu_forward(kvs_backend_t *be, const kvs_batch_t *b,
    float *logits, kvs_err_t *err);
static int kvs_backend_cpu_copy_block(kvs_backend_t *be, uint32_t dst,
    uint32_t src, kvs_err_t *err);
static void kvs_backend_cpu_free(kvs_backend_t *be);
static int kvs_backend_cpu_block_read(kvs_backend_t *be, uint32_t b,
    void *dst, kvs_err_t *err);
static int kvs_backend_cpu_block_write(kvs_backend_t *be, uint32_t b,
    const void *src, kvs_err_t *err);
static int kvs_backend_cpu_set_lora(kvs_backend_t *be, uint32_t slot,
    const kvs_lora_t *l, kvs_err_t *err);
static int kvs_backend_cpu_forward_lora(kvs_backend_t *be,
    const kvs_batch_t *b, const uint32_t *slots, float *logits,
    kvs_err_t *err);
static int kvs_backend_cpu_lora_prepare(kvs_backend_t *be,
    const kvs_lora_t *l, void **img, kvs_err_t *err);
static int kvs_backend_cpu_lora_install(kvs_backend_t *be, uint32_t slot,
    void *img, void **spent, kvs_err_t *err);
static void kvs_backend_cpu_lora_free_image(kvs_backend_t *be, void *img);


static const kvs_backend_ops_t  kvs_backend_cpu_ops = {
    kvs_backend_cpu_forward,
    NULL,                                   /* samples on the host */
    kvs_backend_cpu_copy_block,
    kvs_backend_cpu_free,
    kvs_backend_cpu_block_read,
    kvs_backend_cpu_block_write,
    kvs_backend_cpu_set_lora,
    kvs_backend_cpu_forward_lora,
    NULL,                                   /* its pool is host memory: */
    NULL,                                   /* no host tier */
    kvs_backend_cpu_lora_prepare,
    kvs_backend_cpu_lora_install,
    kvs_backend_cpu_lora_free_image,
    NULL,                                   /* copies at once: */
    NULL,                                   /* none off the step */
    NULL,
    NULL
};

#if KVS_BACKEND_LORA_SLOTS != KVS_CPU_LORA_SLOTS
#error "the backend's adapter slots are the CPU kv's"
#endif


int
kvs_backend_cpu_new(kvs_backend_t **out, const kvs_model_t *m,
    const kvs_backend_conf_t *conf, kvs_err_t *err)
{
    long                n;
    unsigned            threads;
    kvs_backend_t      *be;
    kvs_backend_cpu_t  *cpu;

    *out = NULL;

    threads = conf->threads;

    if (threads == 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (unsigned) n : 1;
    }

    be = calloc(1, sizeof(kvs_backend_t) + sizeof(kvs_backend_cpu_t));
    if (be == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cpu backend: out of memory");
    }

    cpu = (kvs_backend_cpu_t *) (be + 1);

    if (kvs_cpu_model_new(&cpu->cm, m, err) != KVS_OK
        || kvs_cpu_kv_new_dtype(&cpu->kv, cpu->cm, conf->n_blocks,
                                conf->block_tokens,
                                conf->kv_dtype_set ? conf->kv_dtype
                                                   : KVS_KV_F32,
                                err) != KVS_OK
        || kvs_cpu_kv_set_threads(cpu->kv, threads, err) != KVS_OK)
    {
        kvs_cpu_kv_free(cpu->kv);
        kvs_cpu_model_free(cpu->cm);
        free(be);
        return err->code;
    }

    be->ops = &kvs_backend_cpu_ops;
    be->kind = KVS_BACKEND_CPU;
    be->n_vocab = m->hp.n_vocab;
    be->n_blocks = conf->n_blocks;
    be->block_tokens = conf->block_tokens;
    be->threads = threads;
    be->kv_bytes = (uint64_t) conf->n_blocks * cpu->kv->lo.block_bytes;
    kvs_cpu_model_mem(cpu->cm, &be->mem.weights_mapped,
                      &be->mem.weights_owned);
    be->mem.kv_dtype = cpu->kv->lo.dtype;
    be->impl = cpu;

    *out = be;

    return KVS_OK;
}


static int
kvs_backend_cpu_forward(kvs_backend_t *be, const kvs_batch_t *b,
    float *logits, kvs_err_t *err)
{
    kvs_backend_cpu_t  *cpu = be->impl;

    return kvs_cpu_forward(cpu->cm, cpu->kv, b, logits, err);
}


static int
kvs_backend_cpu_set_lora(kvs_backend_t *be, uint32_t slot,
    const kvs_lora_t *l, kvs_err_t *err)
{
    kvs_backend_cpu_t  *cpu = be->impl;

    return kvs_cpu_kv_set_lora(cpu->kv, cpu->cm, slot, l, err);
}


/* the model's shapes only: any thread, while the engine steps */
static int
kvs_backend_cpu_lora_prepare(kvs_backend_t *be, const kvs_lora_t *l,
    void **img, kvs_err_t *err)
{
    int                   rc;
    kvs_backend_cpu_t    *cpu = be->impl;
    kvs_cpu_lora_slot_t  *s;

    rc = kvs_cpu_lora_image(cpu->cm, l, &s, err);
    *img = s;

    return rc;
}


static int
kvs_backend_cpu_lora_install(kvs_backend_t *be, uint32_t slot, void *img,
    void **spent, kvs_err_t *err)
{
    int                   rc;
    kvs_backend_cpu_t    *cpu = be->impl;
    kvs_cpu_lora_slot_t  *old;

    rc = kvs_cpu_kv_lora_install(cpu->kv, slot, img, &old, err);
    *spent = old;

    return rc;
}


static void
kvs_backend_cpu_lora_free_image(kvs_backend_t *be, void *img)
{
    kvs_cpu_lora_image_free(img);
}


static int
kvs_backend_cpu_forward_lora(kvs_backend_t *be, const kvs_batch_t *b,
    const uint32_t *slots, float *logits, kvs_err_t *err)
{
    kvs_backend_cpu_t  *cpu = be->impl;

    return kvs_cpu_forward_lora(cpu->cm, cpu->kv, b, slots, logits, err);
}


static int
kvs_backend_cpu_copy_block(kvs_backend_t *be, uint32_t dst, uint32_t src,
    kvs_err_t *err)
{
    kvs_cpu_kv_t       *kv;
    kvs_backend_cpu_t  *cpu = be->impl;

    kv = cpu->kv;

    if (dst >= kv->n_blocks || src >= kv->n_blocks) {
        return kvs_err_set(err, KVS_EINVAL, "copy block %" PRIu32 " to %"
                           PRIu32 ": the cache has %" PRIu32 " blocks",
                           src, dst, kv->n_blocks);
    }

    if (dst == src) {
        return KVS_OK;
    }

    /* a block is one run of bytes, scales included (kvs_kv_layout.h) */
    memcpy(kvs_cpu_kv_block(kv, dst), kvs_cpu_kv_block(kv, src),
           (size_t) kv->lo.block_bytes);

    return KVS_OK;
}


/* The disk tier's copies: a block is one run of bytes on the host. */
static int
kvs_backend_cpu_block_read(kvs_backend_t *be, uint32_t b, void *dst,
    kvs_err_t *err)
{
    kvs_backend_cpu_t  *cpu = be->impl;

    if (b >= cpu->kv->n_blocks) {
        return kvs_err_set(err, KVS_EINVAL, "read block %" PRIu32 ": the "
                           "cache has %" PRIu32 " blocks", b,
                           cpu->kv->n_blocks);
    }

    memcpy(dst, kvs_cpu_kv_block(cpu->kv, b),
           (size_t) cpu->kv->lo.block_bytes);

    return KVS_OK;
}


static int
kvs_backend_cpu_block_write(kvs_backend_t *be, uint32_t b, const void *src,
    kvs_err_t *err)
{
    kvs_backend_cpu_t  *cpu = be->impl;

    if (b >= cpu->kv->n_blocks) {
        return kvs_err_set(err, KVS_EINVAL, "write block %" PRIu32 ": the "
                           "cache has %" PRIu32 " blocks", b,
                           cpu->kv->n_blocks);
    }

    memcpy(kvs_cpu_kv_block(cpu->kv, b), src,
           (size_t) cpu->kv->lo.block_bytes);

    return KVS_OK;
}


static void
kvs_backend_cpu_free(kvs_backend_t *be)
{
    kvs_backend_cpu_t  *cpu = be->impl;

    kvs_cpu_kv_free(cpu->kv);
    kvs_cpu_model_free(cpu->cm);
    free(be);
}
