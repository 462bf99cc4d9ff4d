/*
 * gpu_check_pair: the CPU and CUDA backends side by side, for the parts
 * that compare them (gpu_check_pair.h says what and its invariants).
 */

#include <string.h>

#include "gpu_check_pair.h"


int
gc_pair_new(gc_ctx_t *c, gc_pair_t *p, kvs_model_t *m,
    const kvs_backend_conf_t *conf, uint32_t n_blocks, uint32_t bt,
    kvs_err_t *err)
{
    int                 rc;
    kvs_backend_conf_t  cc;

    memset(p, 0, sizeof(gc_pair_t));

    if (conf != NULL) {
        p->conf = *conf;
    }

    p->conf.n_blocks = n_blocks;
    p->conf.block_tokens = bt;
    p->conf.device = c->device;
    p->conf.kind = KVS_BACKEND_CPU;

    rc = kvs_kv_pool_new(&p->pool, n_blocks, bt, err);

    if (rc == KVS_OK) {
        rc = kvs_backend_new(&p->cpu, m, &p->conf, NULL, err);
    }

    if (rc == KVS_OK) {
        cc = p->conf;
        cc.kind = c->self_test ? KVS_BACKEND_CPU : KVS_BACKEND_CUDA;
        rc = kvs_backend_new(&p->cuda, m, &cc, &p->info, err);
    }

    return rc;
}


void
gc_pair_free(gc_pair_t *p)
{
    kvs_backend_free(p->cuda);
    kvs_backend_free(p->cpu);
    kvs_kv_pool_free(p->pool);
    memset(p, 0, sizeof(gc_pair_t));
}


void
gc_pair_prompt(gc_rng_t *rng, int32_t *tok, uint32_t n, uint32_t n_vocab)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        tok[i] = 3 + (int32_t) gc_rng_below(rng, n_vocab - 3);
    }
}


int32_t
gc_pair_argmax(const float *l, uint32_t n)
{
    uint32_t  i, best;

    best = 0;
    for (i = 1; i < n; i++) {
        if (l[i] > l[best]) {
            best = i;
        }
    }

    return (int32_t) best;
}
