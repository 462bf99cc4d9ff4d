/*
 * kvs_kv_plan: the capacity planner's arithmetic (`kvserve plan`,
 * docs/capacity.md): from a model's attention shape, a cached element's
 * size and a memory size, the KV bytes one token takes, the tokens that
 * fit, the sequences that fit at a context and the longest context that
 * fits at a batch size, all in whole paged blocks as the engine's pool
 * holds them.
 *
 *     bytes per token = layers x KV heads x (K width + V width) x bytes
 *                     = 2 x layers x KV heads x head_dim x bytes
 *                       when K and V are equally wide.
 *
 * A shape comes from a GGUF (the caller reads kvs_hparams) or from text
 * ("layers=80,kv_heads=8,head_dim=128,heads=64").  The "without GQA"
 * figures are the same shape with as many KV heads as query heads (MHA).
 *
 * Invariants: pure functions, no allocation, no I/O; every product is
 * checked (KVS_ERANGE, never a wrapped number); bad input (zero sizes,
 * KV heads that do not divide the heads, weights as large as the memory)
 * is KVS_EINVAL naming what is wrong, and leaves the output zeroed.
 */

#ifndef KVS_KV_PLAN_H
#define KVS_KV_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

#define KVS_KV_PLAN_DIM_MAX   (1u << 20)   /* any one count or width */

/* The elements a KV cache may store. */
typedef enum {
    KVS_KV_PLAN_F32 = 0,
    KVS_KV_PLAN_F16,
    KVS_KV_PLAN_BF16,
    KVS_KV_PLAN_FP8,                  /* e4m3 */
    KVS_KV_PLAN_INT8,
    KVS_KV_PLAN_N
} kvs_kv_plan_dtype_t;

typedef struct {
    uint32_t  n_layer;
    uint32_t  n_head;                 /* query heads; 0: not known */
    uint32_t  n_head_kv;
    uint32_t  head_dim_k;
    uint32_t  head_dim_v;
} kvs_kv_shape_t;

/* One configuration's figures. */
typedef struct {
    uint64_t  bytes_per_token;
    uint64_t  block_bytes;            /* block_tokens tokens */
    uint64_t  n_blocks;               /* of the KV budget */
    uint64_t  tokens;                 /* n_blocks x block_tokens */
    uint64_t  context_bytes;          /* one sequence of `context` tokens */
    uint64_t  seqs_at_context;        /* whole sequences of `context` */
    uint64_t  context_at_batch;       /* the longest context, in whole
                                         blocks, that `batch` sequences
                                         each hold at once; 0: none */
} kvs_kv_plan_t;

/* "f32", "f16", "bf16", "fp8", "int8"; NULL out of range. */
const char *kvs_kv_plan_dtype_name(kvs_kv_plan_dtype_t dt);

/* Bytes one cached element takes: 4, 2, 2, 1, 1; 0 out of range. */
uint32_t kvs_kv_plan_dtype_bytes(kvs_kv_plan_dtype_t dt);

/* The dtype named s[0..len) (exactly one of the names above); KVS_EINVAL
 * quoting the value and listing the names otherwise. */
int kvs_kv_plan_dtype_parse(kvs_kv_plan_dtype_t *dt, const char *s,
    size_t len, kvs_err_t *err);

/*
 * Parses "key=value,..." with keys layers, kv_heads, head_dim (K and V),
 * head_dim_v (V when it differs), heads (query heads, optional); every
 * value a decimal in 1..KVS_KV_PLAN_DIM_MAX.  layers, kv_heads and
 * head_dim are required; heads, when given, a multiple of kv_heads.
 * KVS_EINVAL naming the key or quoting the value; *shape zeroed then.
 */
int kvs_kv_shape_parse(kvs_kv_shape_t *shape, const char *s, size_t len,
    kvs_err_t *err);

/* Checks a shape as kvs_kv_shape_parse() does (a caller filling one from
 * a model's hyper-parameters). */
int kvs_kv_shape_check(const kvs_kv_shape_t *shape, kvs_err_t *err);

/*
 * Bytes of K and V one token takes across all layers with n_head_kv KV
 * heads (the shape's, or its n_head for MHA) of elem_bytes bytes each.
 * KVS_ERANGE when over UINT64_MAX; KVS_EINVAL for a zero factor.
 */
int kvs_kv_plan_bytes_per_token(uint64_t *bytes,
    const kvs_kv_shape_t *shape, uint32_t n_head_kv, uint32_t elem_bytes,
    kvs_err_t *err);

/*
 * Plans kv_budget bytes of cache (memory less weights, the caller's
 * subtraction: kvs_kv_plan_budget()) in blocks of block_tokens for
 * n_head_kv KV heads of elem_bytes each, at context tokens per sequence
 * and batch sequences.  KVS_EINVAL for zero inputs, KVS_ERANGE when a
 * product overflows; a budget under one block plans zero blocks (not an
 * error: "nothing fits" is an answer).
 */
int kvs_kv_plan_compute(kvs_kv_plan_t *plan, const kvs_kv_shape_t *shape,
    uint32_t n_head_kv, uint32_t elem_bytes, uint64_t kv_budget,
    uint32_t block_tokens, uint64_t context, uint64_t batch,
    kvs_err_t *err);

/* The same for a cache of dtype dt as the engine's pool lays it out
 * (kvs_kv_layout): int8's and fp8's per-block scales included, so
 * block_bytes is the pool's block and bytes_per_token its share rounded
 * up (what /v1/models and `kvserve info` report). */
int kvs_kv_plan_compute_dtype(kvs_kv_plan_t *plan,
    const kvs_kv_shape_t *shape, uint32_t n_head_kv, kvs_kv_plan_dtype_t dt,
    uint64_t kv_budget, uint32_t block_tokens, uint64_t context,
    uint64_t batch, kvs_err_t *err);

/* memory less weights into *budget; KVS_EINVAL ("weights ... leave no
 * memory for the KV cache") when weights >= memory. */
int kvs_kv_plan_budget(uint64_t *budget, uint64_t memory, uint64_t weights,
    kvs_err_t *err);

#endif /* KVS_KV_PLAN_H */
