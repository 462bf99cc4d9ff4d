/*
 * gpu_check_pair: what the gpu-check parts that compare the CUDA backend
 * with the CPU one (gpu_check_e2e.c, gpu_check_lora.c) set up alike: the
 * two backends over one model, with one K/V pool for their tables (the
 * CPU standing in for CUDA under --self-test); random prompts; the
 * greedy id of a row of logits.
 *
 * Invariants: a pair is freed whole by gc_pair_free() whatever
 * gc_pair_new() got to (each member NULL until made); conf is the CPU
 * backend's, as made, for a part that wants another like it.
 */

#ifndef GPU_CHECK_PAIR_H
#define GPU_CHECK_PAIR_H

#include "gpu_check.h"
#include "backend/kvs_backend.h"
#include "kv/kvs_kv_pool.h"

typedef struct {
    kvs_kv_pool_t       *pool;
    kvs_backend_t       *cpu;
    kvs_backend_t       *cuda;        /* the CPU's under --self-test */
    kvs_backend_info_t   info;        /* cuda's */
    kvs_backend_conf_t   conf;        /* cpu's */
} gc_pair_t;

/* The pool of n_blocks blocks of bt tokens, then the CPU and CUDA
 * backends over m with as many blocks (conf: the other settings, such as
 * the K/V dtype; NULL: none).  KVS_OK, else err says why and the pair
 * holds what was made. */
int gc_pair_new(gc_ctx_t *c, gc_pair_t *p, kvs_model_t *m,
    const kvs_backend_conf_t *conf, uint32_t n_blocks, uint32_t bt,
    kvs_err_t *err);
void gc_pair_free(gc_pair_t *p);

/* n ids in [3, n_vocab) from rng (0 to 2: the special tokens of
 * stories260K and the generated models) */
void gc_pair_prompt(gc_rng_t *rng, int32_t *tok, uint32_t n,
    uint32_t n_vocab);

/* the id of the largest of n logits, the lowest on ties */
int32_t gc_pair_argmax(const float *l, uint32_t n);

#endif /* GPU_CHECK_PAIR_H */
