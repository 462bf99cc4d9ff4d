/*
 * kvs_cuda_lora: LoRA adapters on the CUDA backend (set_lora of
 * kvs_backend_ops_t, and what kvs_cuda_step.c's forward_lora calls),
 * over kvs_cuda_lora_plan's layout, table and grouping and
 * kernels/kvs_k_lora.cu's product.
 *
 * Ownership: a kvs_cuda_lora_t hangs off kvs_cuda_t (cu->lora, NULL until
 * the first set_lora) and owns every adapter's device image (one
 * allocation per slot), the device copy of the slot table, the shrink
 * scratch T and the grouping image (pinned on the host, and on the
 * device).  The backend copies an adapter's values at set_lora (or
 * lora_install) and never reads the kvs_lora_t again (the engine may
 * close it).  A prepared image is its caller's until installed (then
 * handed back as spent) and borrows its kvs_lora_t until then.
 *
 * Invariants:
 *   - the device table equals the host table after every set_lora that
 *     returned KVS_OK; a slot is changed only once its new image is on
 *     the device (a failed set_lora leaves the slot as it was, unless the
 *     table's own upload failed: then the slot is empty);
 *   - device allocations happen in set_lora / lora_install only
 *     (between steps), never in the step; lora_prepare touches no CUDA
 *     and no state of the backend's but the model's shapes;
 *   - T holds max_tok rows of t_rank floats, t_rank the largest rank ever
 *     set;
 *   - a slice with an adapted row runs eagerly (no graph): its grouping
 *     and tasks change from step to step.
 */

#ifndef KVS_CUDA_LORA_H
#define KVS_CUDA_LORA_H

#include "kvs_cuda_impl.h"
#include "kvs_cuda_lora_plan.h"

typedef struct kvs_cuda_lora_s  kvs_cuda_lora_t;

struct kvs_cuda_lora_s {
    kvs_cuda_lora_table_t   tab;
    void                   *img[KVS_CUDA_LORA_SLOTS + 1];  /* device;
                                                              [0] unused */
    uint64_t                img_bytes[KVS_CUDA_LORA_SLOTS + 1];
    kvs_k_lora_mat_t       *dtab;     /* device copy of tab.ent */
    float                  *t;        /* [max_tok][t_rank], device */
    uint32_t                t_rank;
    uint32_t                cap;      /* rows of the grouping image */
    int32_t                *hwords;   /* [group_words(cap)] pinned */
    int32_t                *dwords;   /* the same, device */
};

int kvs_cuda_set_lora(kvs_backend_t *be, uint32_t slot, const kvs_lora_t *l,
    kvs_err_t *err);

/* set_lora's halves (kvs_backend_ops_t): prepare fits and converts l
 * into a host image (no CUDA call, any thread; the image borrows l until
 * installed); install uploads it into the slot's device memory and the
 * table (the engine's thread), *spent := the image itself, its host copy
 * no longer read. */
int kvs_cuda_lora_prepare(kvs_backend_t *be, const kvs_lora_t *l, void **img,
    kvs_err_t *err);
int kvs_cuda_lora_install(kvs_backend_t *be, uint32_t slot, void *img,
    void **spent, kvs_err_t *err);
void kvs_cuda_lora_free_image(kvs_backend_t *be, void *img);

/* KVS_OK when every slots[i] of the n is 0 or a set slot; KVS_EINVAL
 * naming the first that is not (forward_lora, before anything runs). */
int kvs_cuda_lora_check_slots(const kvs_cuda_t *cu, const uint32_t *slots,
    uint32_t n, kvs_err_t *err);

/* Groups slots[0..n) (checked) of a slice into the pinned image and
 * enqueues its upload; *n_task := its tasks (0: no adapted row, nothing
 * enqueued). */
int kvs_cuda_lora_slice(kvs_cuda_t *cu, const uint32_t *slots, uint32_t n,
    uint32_t *n_task, kvs_err_t *err);

/* After the base product of (layer, target) into y: the slice's adapted
 * rows add their adapters' products; x is that product's input (dtype
 * x_dt, row stride ldx), y F32 at row stride ldy. */
int kvs_cuda_lora_apply(kvs_cuda_t *cu, uint32_t n_task, uint32_t layer,
    kvs_lora_target_t target, const void *x, int x_dt, size_t ldx, float *y,
    size_t ldy, kvs_err_t *err);

void kvs_cuda_lora_free(kvs_cuda_t *cu);

#endif /* KVS_CUDA_LORA_H */
