/*
 * kvs_gen_lora: tooling for LoRA adapters (`kvserve gen-lora`,
 * `kvserve merge-lora`): a seeded random adapter for a base model, in
 * llama.cpp's GGUF adapter layout (kvs_lora.h), and a base model with
 * an adapter merged into its weights, W' = W + scale * B A, the oracle
 * the batched adapter path is checked against.
 *
 * Determinism: the same base, spec and seed give the same adapter file,
 * byte for byte; a pair's values depend only on the seed and its name.
 */

#ifndef KVS_GEN_LORA_H
#define KVS_GEN_LORA_H

#include <stdint.h>

#include "base/kvs_err.h"

typedef struct {
    uint32_t   rank;                  /* 1..KVS_LORA_MAX_RANK */
    uint32_t   targets;               /* bit (1 << kvs_lora_target_t) */
    uint64_t   seed;
    float      alpha;                 /* adapter.lora.alpha; scale is
                                         alpha / rank */
    float      strength;              /* std of B A's entries against the
                                         base weights' 0.02, e.g. 0.5 */
} kvs_gen_lora_spec_t;

/* Parses "q,k,v,o,gate,up,down" (any subset, in any order) into a
 * target mask; the message names an unknown target. */
int kvs_gen_lora_targets(const char *list, uint32_t *mask, kvs_err_t *err);

/* Writes an adapter for the model at base_path to path.  A target the
 * base has no matrix for is an error naming it. */
int kvs_gen_lora_write(const char *base_path, const kvs_gen_lora_spec_t *spec,
    const char *path, kvs_err_t *err);

/* Writes base_path's model with adapter_path merged (the adapter checked
 * against it first) to path: adapted matrices become F32, every other
 * tensor and every metadata key is copied as it is. */
int kvs_gen_lora_merge(const char *base_path, const char *adapter_path,
    const char *path, kvs_err_t *err);

#endif /* KVS_GEN_LORA_H */
