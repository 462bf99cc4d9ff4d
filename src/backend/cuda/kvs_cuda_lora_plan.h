/*
 * kvs_cuda_lora_plan: the arithmetic of the CUDA backend's LoRA adapters
 * that needs no CUDA, built into libkvserve.a so that it is unit-tested
 * on GPU-less hosts (t/unit/test_cuda_lora.c); src/backend/cuda/ and
 * t/gpu/ are its users.
 *
 *   - fit: an adapter checked against the matrices the CUDA forward
 *     multiplies (the CPU backend's rule: q, k, v, o, gate, up, down of
 *     the model's shapes; phi3's fused attn_qkv and gate/up refused);
 *   - layout: a slot's device image, one allocation per adapter: for
 *     each pair, in the file's order, A as BF16 [rank][n_in] and B
 *     transposed, BT as BF16 [rank][n_out], each at a KVS_CUDA_LORA_ALIGN
 *     offset;
 *   - conversion: kvs_cuda_lora_pack_mat(), the one place that reads an
 *     adapter's values, F32 to BF16 rounded to nearest even
 *     (kvs_f32_to_bf16, as the weights' upload);
 *   - the slot table: for every (layer, target) one entry per slot 0..
 *     KVS_CUDA_LORA_SLOTS: device addresses of A and BT, rank, scale; an
 *     entry of rank 0 adapts nothing (slot 0, an empty slot, a matrix
 *     the adapter leaves alone).  The host keeps it and uploads it whole
 *     when a slot changes; the kernel reads entry [slot];
 *   - grouping: a slice's rows with an adapter, sorted by slot (a stable
 *     counting sort) and cut into tasks of at most KVS_CUDA_LORA_GROUP
 *     rows of one slot, written into one int32 image uploaded per step.
 *
 * Why BF16: the adapters' values keep F32's exponent range (a LoRA B is
 * often tiny, and F16 would flush values under 6e-5 to subnormals or
 * zero, or overflow past 65504 with a large alpha folded in), the base's
 * matrices are BF16 on the device already, and an adapter stored in
 * BF16 on the host converts exactly.
 *
 * Invariants: every size is checked (KVS_ERANGE, never a wrapped
 * number); nothing here allocates but kvs_cuda_lora_table_new;
 * grouping trusts its slots, which kvs_cuda_lora_check has passed for the
 * whole batch before anything runs; a slot set to NULL leaves rank 0 in
 * every entry of its column.
 */

#ifndef KVS_CUDA_LORA_PLAN_H
#define KVS_CUDA_LORA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "model/kvs_hparams.h"
#include "model/kvs_lora.h"

#define KVS_CUDA_LORA_SLOTS     64    /* KVS_BACKEND_LORA_SLOTS */
#define KVS_CUDA_LORA_GROUP     8     /* rows of one adapter per task */
#define KVS_CUDA_LORA_RANK_MAX  1024  /* KVS_LORA_MAX_RANK: the expand
                                         kernel's shared T, 32 KiB */
#define KVS_CUDA_LORA_ALIGN     256   /* bytes */
#define KVS_CUDA_LORA_TARGETS   7     /* q, k, v, o, gate, up, down */

/* One (layer, target, slot) entry; the kernels' kvs_k_lora_mat_t, field
 * for field (asserted where both are visible). */
typedef struct {
    uint64_t  a;                      /* device address of A, BF16
                                         [rank][n_in] */
    uint64_t  bt;                     /* of BT, BF16 [rank][n_out] */
    uint32_t  rank;                   /* 0: this slot adapts nothing
                                         here */
    float     scale;
} kvs_cuda_lora_ent_t;

/* Where pair i of an adapter lives in its slot's image. */
typedef struct {
    uint64_t  a;                      /* byte offsets */
    uint64_t  bt;
} kvs_cuda_lora_part_t;

typedef struct {
    uint32_t              n_layer;
    kvs_cuda_lora_ent_t  *ent;        /* [n_layer][TARGETS][SLOTS + 1] */
    uint32_t             *rank_max;   /* [SLOTS + 1]: each slot's largest
                                         rank, 0 when empty */
} kvs_cuda_lora_table_t;

/*
 * KVS_OK when every pair of l is a matrix the CUDA forward adapts, of
 * its shape, with a rank of at most KVS_CUDA_LORA_RANK_MAX;
 * KVS_EUNSUPPORTED naming the tensor otherwise (KVS_EINVAL for another
 * architecture).
 */
int kvs_cuda_lora_fit(const kvs_hparams_t *hp, const kvs_lora_t *l,
    kvs_err_t *err);

/* n_in and n_out of the matrix the forward multiplies for target t
 * (< KVS_CUDA_LORA_TARGETS); 0 when it adapts none (phi3's fused ones). */
void kvs_cuda_lora_dims(const kvs_hparams_t *hp, kvs_lora_target_t t,
    uint64_t *n_in, uint64_t *n_out);

/* parts[l->n_mat] and the image's bytes. */
int kvs_cuda_lora_layout(const kvs_lora_t *l, kvs_cuda_lora_part_t *parts,
    uint64_t *bytes, kvs_err_t *err);

/* The conversion: a[rank][n_in] := bf16(m's A), bt[rank][n_out] :=
 * bf16(m's B) transposed (bt[r][o] is B[o][r]). */
void kvs_cuda_lora_pack_mat(const kvs_lora_mat_t *m, uint16_t *a,
    uint16_t *bt);

/* The whole image into img (bytes from kvs_cuda_lora_layout), padding
 * zeroed. */
void kvs_cuda_lora_pack(const kvs_lora_t *l,
    const kvs_cuda_lora_part_t *parts, uint64_t bytes, void *img);

int kvs_cuda_lora_table_new(kvs_cuda_lora_table_t *t, uint32_t n_layer,
    kvs_err_t *err);
void kvs_cuda_lora_table_free(kvs_cuda_lora_table_t *t);

/* Entry count of the table (its device copy's size over the entry's). */
size_t kvs_cuda_lora_table_len(const kvs_cuda_lora_table_t *t);

/* The entries of (layer, target): SLOTS + 1 of them, slot 0 first. */
kvs_cuda_lora_ent_t *kvs_cuda_lora_table_at(const kvs_cuda_lora_table_t *t,
    uint32_t layer, kvs_lora_target_t target);

/* Slot 1..SLOTS := l (fitted) at device address base with l's parts, or
 * emptied when l is NULL.  KVS_EINVAL for a slot out of range. */
int kvs_cuda_lora_table_set(kvs_cuda_lora_table_t *t, uint32_t slot,
    const kvs_lora_t *l, uint64_t base, const kvs_cuda_lora_part_t *parts,
    kvs_err_t *err);

/* KVS_OK when every slots[i] of the n is 0 or a slot holding an
 * adapter; KVS_EINVAL naming the first entry otherwise. */
int kvs_cuda_lora_check(const kvs_cuda_lora_table_t *t,
    const uint32_t *slots, uint32_t n, kvs_err_t *err);

/*
 * A slice's grouping image for n rows (slots[0..n), checked), capacity
 * cap rows (>= n), in words[kvs_cuda_lora_group_words(cap)]:
 *   rows      [cap]      at 0: the adapted rows, grouped by slot, each
 *                        slot's in row order;
 *   task0     [cap + 1]  at cap: task k's rows are rows[task0[k] ..
 *                        task0[k + 1]);
 *   task_slot [cap]      at 2 cap + 1: task k's slot.
 * Offsets depend on cap only.  *n_task := the tasks (0: no row has an
 * adapter), *rank := the largest rank of the slots used.
 */
size_t kvs_cuda_lora_group_words(uint32_t cap);

void kvs_cuda_lora_group(const kvs_cuda_lora_table_t *t,
    const uint32_t *slots, uint32_t n, uint32_t cap, int32_t *words,
    uint32_t *n_task, uint32_t *rank);

/* The largest rank among tasks' slots in (layer, target)'s entries; 0:
 * none of them adapts that matrix (the launch is skipped). */
uint32_t kvs_cuda_lora_need(const kvs_cuda_lora_table_t *t, uint32_t layer,
    kvs_lora_target_t target, const int32_t *task_slot, uint32_t n_task);

#endif /* KVS_CUDA_LORA_PLAN_H */
