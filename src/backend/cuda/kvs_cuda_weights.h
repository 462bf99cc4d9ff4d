/*
 * kvs_cuda_weights: the CUDA backend's weights at load (kvs_cuda_weights.c):
 * the upload list, one slot per tensor a step reads, each tensor
 * resolved and checked like the CPU backend's and given its offset in
 * one device allocation; the host RoPE tables placed after them; then
 * the uploads and the layers' device pointers.  Private to
 * src/backend/cuda/; kvs_cuda_backend_new() runs these as its steps 2
 * and 4.
 *
 * Ownership: the caller owns ld->up (calloc'd with ld->n slots) and the
 * RoPE table, and frees both once the weights are uploaded, or on any
 * failure.
 */

#ifndef KVS_CUDA_WEIGHTS_H
#define KVS_CUDA_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_cuda_impl.h"
#include "backend/kvs_rope.h"
#include "model/kvs_model.h"

/* One tensor to upload: where it comes from and where it goes; t is
 * NULL for an optional tensor the model lacks. */
typedef struct {
    const kvs_gguf_tensor_t  *t;
    size_t                    off;    /* in cu->wmem */
    size_t                    bytes;  /* on the device */
    int                       matrix;
} kvs_cuda_up_t;

/* The upload list is indexed by slot: kvs_cuda_plan_globals, then
 * KVS_CUDA_PER_LAYER per layer in the order of kvs_cuda_plan_layer
 * (kvs_cuda_plan.h). */

typedef struct {
    kvs_cuda_up_t  *up;               /* [n] by slot */
    uint32_t        n;
    size_t          total;            /* weights bytes, aligned */
    size_t          stage;            /* largest Q8_0 tensor, raw bytes */
    uint64_t        max_vec;          /* largest non-F32 vector, elems */
    uint64_t        deq;              /* host dequantizing chunk, elems
                                         (whole rows; 0: none needed) */
    int             all_f32;          /* every matrix F32 */
    int             any_f32;          /* some matrix F32: products take
                                         F32 inputs too */
} kvs_cuda_load_t;


/* 2. Every tensor resolved and given its offset in ld->total, the host
 * RoPE tables built and given offsets after them: rope[0] every layer's
 * (rope_off[0]); rope[1] the windowed layers' (gemma3's own base, no
 * scaling, as the CPU backend builds it) when hp.rope_base_swa != 0,
 * else left zeroed.  The caller zeroes both and frees both. */
int kvs_cuda_weights_place(kvs_cuda_t *cu, kvs_cuda_load_t *ld,
    const kvs_model_t *m, kvs_rope_t rope[2], size_t rope_off[2],
    kvs_err_t *err);

/* 4. Every tensor and the RoPE tables uploaded into cu->wmem (allocated
 * with ld->total bytes; Q8_0 through a staging buffer of ld->stage bytes
 * allocated and freed here, before the K/V cache is allocated), the
 * layers' pointers bound, the stream synchronized. */
int kvs_cuda_weights_load(kvs_cuda_t *cu, const kvs_cuda_load_t *ld,
    const kvs_rope_t rope[2], const size_t rope_off[2], kvs_err_t *err);

#endif /* KVS_CUDA_WEIGHTS_H */
