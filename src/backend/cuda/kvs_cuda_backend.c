/*
 * kvs_cuda_backend: loading and freeing the CUDA backend, and its block
 * copy (the step is kvs_cuda_step.c; the state is kvs_cuda_impl.h; the
 * weights' placing and upload, steps 2 and 4, kvs_cuda_weights.c).
 *
 * Load order, one function per step (kvs_cuda_backend_new() lists them),
 * everything undone by kvs_cuda_release() on any failure:
 *   1. device, stream, cuBLAS handle bound to the stream;
 *   2. every tensor resolved and checked like the CPU backend, and given
 *      an offset in one weights allocation (w3 right after w1, so the
 *      gate and up products can run as one);
 *   3. sizes planned (kvs_cuda_plan): weights, workspace, Q8_0 staging
 *      and the KV pool against cudaMemGetInfo, so that a model that does
 *      not fit is one clear KVS_ENOMEM with the numbers, before any big
 *      allocation;
 *   4. allocations, uploads (Q8_0 through a staging buffer and
 *      kvs_k_q8_0_to, the other quantized types of kvs_quant's table
 *      dequantized on the host and uploaded as BF16), the RoPE table,
 *      the zeroed K/V, pinned buffers.
 * All uploads go on the backend's stream, synchronized once at the end.
 */

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cuda_backend.h"
#include "kvs_cuda_impl.h"
#include "kvs_cuda_lora.h"
#include "kvs_cuda_weights.h"
#include "backend/kvs_rope.h"
#include "model/kvs_model.h"


_Static_assert(KVS_CUDA_DT_F32 == KVS_K_F32 && KVS_CUDA_DT_F16 == KVS_K_F16
               && KVS_CUDA_DT_BF16 == KVS_K_BF16,
               "plan and kernel dtypes agree");


static int kvs_cuda_copy_block(kvs_backend_t *be, uint32_t dst,
    uint32_t src, kvs_err_t *err);
static void kvs_cuda_free(kvs_backend_t *be);
static void kvs_cuda_release(kvs_cuda_t *cu);
static int kvs_cuda_init(kvs_cuda_t *cu, kvs_cuda_load_t *ld,
    const kvs_hparams_t *hp, const kvs_backend_conf_t *conf,
    kvs_err_t *err);
static int kvs_cuda_open_device(kvs_cuda_t *cu, int device,
    kvs_err_t *err);
static int kvs_cuda_plan_ws(kvs_cuda_t *cu, const kvs_cuda_load_t *ld,
    kvs_err_t *err);
static int kvs_cuda_plan_kv(kvs_cuda_t *cu, const kvs_cuda_load_t *ld,
    const kvs_backend_conf_t *conf, uint64_t *block_bytes, kvs_err_t *err);
static int kvs_cuda_alloc(kvs_cuda_t *cu, const kvs_cuda_load_t *ld,
    kvs_err_t *err);
static int kvs_cuda_alloc_kv(kvs_cuda_t *cu, kvs_err_t *err);
static int kvs_cuda_bind_step(kvs_cuda_t *cu, kvs_err_t *err);


static const kvs_backend_ops_t  kvs_cuda_ops = {
    kvs_cuda_forward,
    kvs_cuda_forward_sample,
    kvs_cuda_copy_block,
    kvs_cuda_free,
    kvs_cuda_block_read,                    /* kvs_cuda_tier.c */
    kvs_cuda_block_write,
    kvs_cuda_set_lora,                      /* kvs_cuda_lora.c */
    kvs_cuda_forward_lora,
    kvs_cuda_host_alloc,                    /* kvs_cuda_tier.c */
    kvs_cuda_host_free,
    kvs_cuda_lora_prepare,                  /* kvs_cuda_lora.c */
    kvs_cuda_lora_install,
    kvs_cuda_lora_free_image,
    kvs_cuda_block_read_async,              /* kvs_cuda_acopy.c */
    kvs_cuda_block_write_async,
    kvs_cuda_copy_poll,
    kvs_cuda_copy_wait
};



int
kvs_cuda_fail(kvs_err_t *err, const char *what, cudaError_t e)
{
    return kvs_err_set(err, e == cudaErrorMemoryAllocation ? KVS_ENOMEM
                                                           : KVS_EIO,
                       "cuda: %s: %s (%d)", what, cudaGetErrorString(e),
                       (int) e);
}


int
kvs_cuda_blas_fail(kvs_err_t *err, const char *what, cublasStatus_t s)
{
    return kvs_err_set(err, s == CUBLAS_STATUS_ALLOC_FAILED ? KVS_ENOMEM
                                                           : KVS_EIO,
                       "cublas: %s: %s (%d)", what,
                       cublasGetStatusString(s), (int) s);
}


int
kvs_cuda_k(kvs_err_t *err, const char *what, int rc)
{
    if (rc == KVS_K_EARG) {
        return kvs_err_set(err, KVS_EINVAL, "cuda: %s refused its "
                           "arguments", what);
    }

    return kvs_cuda_fail(err, what, (cudaError_t) rc);
}


int
kvs_cuda_backend_new(kvs_backend_t **out, const kvs_model_t *m,
    const kvs_backend_conf_t *conf, kvs_err_t *err)
{
    int                   rc;
    size_t                rope_off[2];
    uint64_t              block_bytes;
    kvs_rope_t            rope[2];
    kvs_cuda_t           *cu;
    kvs_backend_t        *be;
    kvs_cuda_load_t       ld;
    const kvs_hparams_t  *hp;

    *out = NULL;
    hp = &m->hp;
    rope_off[0] = 0;
    rope_off[1] = 0;
    block_bytes = 0;
    memset(&ld, 0, sizeof(kvs_cuda_load_t));
    memset(rope, 0, sizeof(rope));

    if (conf->block_tokens == 0 || hp->n_vocab > INT32_MAX
        || hp->n_embd > INT32_MAX / 4 || hp->n_ff > INT32_MAX / 4
        || hp->n_layer == 0)
    {
        return kvs_err_set(err, KVS_EINVAL, "cuda backend: blocks of %"
                           PRIu32 " tokens, or a model too wide for int "
                           "dimensions", conf->block_tokens);
    }

    be = calloc(1, sizeof(kvs_backend_t) + sizeof(kvs_cuda_t));
    if (be == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cuda backend: out of memory");
    }

    cu = (kvs_cuda_t *) (be + 1);
    be->impl = cu;

    rc = kvs_cuda_init(cu, &ld, hp, conf, err);

    /* 1. device, stream, cuBLAS */
    if (rc == KVS_OK) {
        rc = kvs_cuda_open_device(cu, conf->device, err);
    }

    /* 2. tensors, offsets, the RoPE table after them */
    if (rc == KVS_OK) {
        rc = kvs_cuda_weights_place(cu, &ld, m, rope, rope_off, err);
    }

    /* 3. sizes */
    if (rc == KVS_OK) {
        rc = kvs_cuda_plan_ws(cu, &ld, err);
    }

    if (rc == KVS_OK) {
        rc = kvs_cuda_plan_kv(cu, &ld, conf, &block_bytes, err);
    }

    /* 4. allocations and uploads */
    if (rc == KVS_OK) {
        rc = kvs_cuda_alloc(cu, &ld, err);
    }

    if (rc == KVS_OK) {
        rc = kvs_cuda_weights_load(cu, &ld, rope, rope_off, err);
    }

    if (rc == KVS_OK) {
        rc = kvs_cuda_alloc_kv(cu, err);
    }

    if (rc == KVS_OK) {
        rc = kvs_cuda_bind_step(cu, err);
    }

    /* the block copies' stream, events and staging (kvs_cuda_tier.c) */
    if (rc == KVS_OK) {
        rc = kvs_cuda_tier_init(cu, err);
    }

    /* the host copies of the upload list and the RoPE table are spent,
     * whatever happened */
    kvs_rope_free(&rope[0]);
    kvs_rope_free(&rope[1]);
    free(ld.up);

    if (rc != KVS_OK) {
        kvs_cuda_release(cu);
        free(be);
        return rc;
    }

    be->ops = &kvs_cuda_ops;
    be->kind = KVS_BACKEND_CUDA;
    be->n_vocab = hp->n_vocab;
    be->n_blocks = cu->kv.n_blocks;
    be->block_tokens = conf->block_tokens;
    be->threads = 1;
    be->kv_bytes = (uint64_t) cu->kv.n_blocks * block_bytes;
    /* the host copies are spent: the weights live on the device alone,
     * the RoPE table with them (kvs_cuda_plan_weights carves the same) */
    be->mem.weights_device = cu->wbytes;
    be->mem.kv_dtype = cu->kv.dtype == KVS_K_F32 ? KVS_BACKEND_KV_F32
                       : cu->kv.dtype == KVS_K_F16 ? KVS_BACKEND_KV_F16
                       : cu->kv.dtype == KVS_K_I8 ? KVS_BACKEND_KV_INT8
                       : cu->kv.dtype == KVS_K_FP8 ? KVS_BACKEND_KV_FP8
                       : KVS_BACKEND_KV_BF16;

    *out = be;

    return KVS_OK;
}


/* 0. cu's settings and host arrays; ld's upload list, one slot per
 * tensor. */
static int
kvs_cuda_init(kvs_cuda_t *cu, kvs_cuda_load_t *ld, const kvs_hparams_t *hp,
    const kvs_backend_conf_t *conf, kvs_err_t *err)
{
    int          rc;
    const char  *env;

    rc = kvs_cuda_plan_arch(hp, err);
    if (rc != KVS_OK) {
        return rc;
    }

    cu->hp = *hp;
    cu->device = conf->device;
    cu->max_tok = KVS_CUDA_MAX_TOK;
    cu->max_rows = KVS_CUDA_MAX_ROWS;
    cu->max_table = KVS_CUDA_MAX_TABLE;
    cu->eps = (float) hp->norm_eps;
    cu->scale = (float) hp->attn_scale;
    env = getenv("KVS_CUDA_GRAPHS");
    cu->use_graphs = env == NULL || strcmp(env, "0") != 0;

    ld->n = KVS_CUDA_GLOBALS + KVS_CUDA_PER_LAYER * hp->n_layer;
    ld->up = calloc(ld->n, sizeof(kvs_cuda_up_t));
    ld->all_f32 = 1;
    cu->layers = calloc(hp->n_layer, sizeof(kvs_cuda_layer_t));
    cu->seq_tab = calloc(cu->max_tok, sizeof(kvs_kv_table_t *));
    cu->seq_nb = calloc(cu->max_tok, sizeof(uint32_t));

    if (ld->up == NULL || cu->layers == NULL || cu->seq_tab == NULL
        || cu->seq_nb == NULL)
    {
        return kvs_err_set(err, KVS_ENOMEM, "cuda backend: out of memory");
    }

    return KVS_OK;
}


/* 1. The device, the stream and the cuBLAS handle bound to it. */
static int
kvs_cuda_open_device(kvs_cuda_t *cu, int device, kvs_err_t *err)
{
    int  rc;

    KVS_CUDA_TRY(cudaSetDevice(device), "cudaSetDevice");
    KVS_CUDA_TRY(cudaDeviceGetAttribute(&cu->n_sm,
                                        cudaDevAttrMultiProcessorCount,
                                        device),
                 "cudaDeviceGetAttribute(multiprocessors)");
    KVS_CUDA_TRY(cudaStreamCreateWithFlags(&cu->st, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
    KVS_BLAS_TRY(cublasCreate(&cu->blas), "cublasCreate");
    KVS_BLAS_TRY(cublasSetStream(cu->blas, cu->st), "cublasSetStream");
    /* default math never uses TF32: F32 weights give the CPU's sums */
    KVS_BLAS_TRY(cublasSetMathMode(cu->blas, CUBLAS_DEFAULT_MATH),
                 "cublasSetMathMode");

    return KVS_OK;

failed:

    return rc;
}


/* 3. The workspace's layout, cu->wl, for the widest slice a step takes. */
static int
kvs_cuda_plan_ws(kvs_cuda_t *cu, const kvs_cuda_load_t *ld, kvs_err_t *err)
{
    kvs_cuda_ws_conf_t    wc;
    const kvs_hparams_t  *hp;

    hp = &cu->hp;

    memset(&wc, 0, sizeof(kvs_cuda_ws_conf_t));
    wc.n_embd = hp->n_embd;
    wc.n_ff = hp->n_ff;
    wc.q_width = hp->q_width;
    wc.k_width = hp->k_width;
    wc.v_width = hp->v_width;
    wc.o_width = hp->o_width;
    wc.n_vocab = hp->n_vocab;
    wc.n_head_kv = hp->n_head_kv;
    wc.max_tok = cu->max_tok;
    wc.max_rows = cu->max_rows;
    wc.max_table = cu->max_table;
    wc.max_split = KVS_CUDA_MAX_SPLIT;
    wc.max_ctx = hp->n_ctx_train;
    wc.n_sm = (uint32_t) cu->n_sm;
    wc.in_size = ld->any_f32 ? 4 : 2;
    wc.part_unit = kvs_k_attn_part_floats(1, hp->n_head, 1,
                                          hp->head_dim_v);
    wc.sample_bytes = kvs_k_sample_scratch_bytes(cu->max_rows, hp->n_vocab);
    wc.blas_bytes = KVS_CUDA_BLAS_BYTES;

    return kvs_cuda_plan_workspace(&cu->wl, &wc, err);
}


/* 3. The K/V pool's geometry, cu->kv but its arrays, its block count
 * planned against the device's free memory after weights, workspace
 * and staging; *block_bytes is one block's K and V over every layer,
 * in int8 and fp8 with their scales (a float per layer, K or V, and
 * K/V head: kvs_kv_layout's count, in arrays of their own here). */
static int
kvs_cuda_plan_kv(kvs_cuda_t *cu, const kvs_cuda_load_t *ld,
    const kvs_backend_conf_t *conf, uint64_t *block_bytes, kvs_err_t *err)
{
    int                   rc, kv_dt;
    size_t                free_b, total_b;
    uint32_t              n_blocks;
    kvs_cuda_mem_t        mem;
    const kvs_hparams_t  *hp;

    hp = &cu->hp;
    kv_dt = ld->all_f32 ? KVS_K_F32 : KVS_K_BF16;

    /* kvserve_kv_dtype: every dtype; int8 and fp8 (the attention
     * kernels' 8-byte copies) for head sizes of 8n elements */
    if (conf->kv_dtype_set) {
        switch (conf->kv_dtype) {
        case KVS_KV_F32:
            kv_dt = KVS_K_F32;
            break;
        case KVS_KV_F16:
            kv_dt = KVS_K_F16;
            break;
        case KVS_KV_BF16:
            kv_dt = KVS_K_BF16;
            break;
        case KVS_KV_INT8:
            kv_dt = KVS_K_I8;
            break;
        case KVS_KV_FP8:
            kv_dt = KVS_K_FP8;
            break;
        default:
            return kvs_err_set(err, KVS_EUNSUPPORTED, "cuda: a \"%s\" KV "
                               "cache is not one the device stores",
                               kvs_kv_dtype_name(conf->kv_dtype));
        }

        if ((kv_dt == KVS_K_I8 || kv_dt == KVS_K_FP8)
            && (hp->head_dim_k % 8 != 0 || hp->head_dim_v % 8 != 0))
        {
            return kvs_err_set(err, KVS_EUNSUPPORTED, "cuda: a \"%s\" KV "
                               "cache needs heads of a multiple of 8 "
                               "elements (this model's: %" PRIu32 " / %"
                               PRIu32 ")",
                               kvs_kv_dtype_name(conf->kv_dtype),
                               hp->head_dim_k, hp->head_dim_v);
        }
    }

    rc = kvs_cuda_plan_block_bytes(hp->n_layer, conf->block_tokens,
                                   hp->k_width, hp->v_width,
                                   kvs_k_dtype_size(kv_dt), block_bytes,
                                   err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* n_layer x 2 x n_head_kv floats: far from 64 bits' end after a
     * block's elements passed */
    if (kv_dt == KVS_K_I8 || kv_dt == KVS_K_FP8) {
        *block_bytes += (uint64_t) hp->n_layer * 2 * hp->n_head_kv
                        * sizeof(float);
    }

    KVS_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    (void) total_b;

    memset(&mem, 0, sizeof(kvs_cuda_mem_t));
    mem.free = free_b;
    mem.weights = ld->total;
    mem.workspace = cu->wl.total;
    mem.stage = ld->stage;
    mem.reserve = KVS_CUDA_RESERVE;
    mem.block_bytes = *block_bytes;
    /* 0: unset, kvserve_kv_cache's default */
    mem.fraction = conf->kv_fraction == 0.0 ? 0.9 : conf->kv_fraction;
    /* the engine's pool refuses more (KVS_KV_MAX_BLOCKS); a device with
     * room for more leaves the rest unused */
    mem.max_blocks = KVS_KV_MAX_BLOCKS;

    rc = kvs_cuda_plan_blocks(&mem, conf->n_blocks, &n_blocks, err);
    if (rc != KVS_OK) {
        return rc;
    }

    cu->kv.dtype = kv_dt;
    cu->kv.n_layer = hp->n_layer;
    cu->kv.n_blocks = n_blocks;
    cu->kv.block_tokens = conf->block_tokens;
    cu->kv.n_head = hp->n_head;
    cu->kv.n_head_kv = hp->n_head_kv;
    cu->kv.hd_k = hp->head_dim_k;
    cu->kv.hd_v = hp->head_dim_v;

    return KVS_OK;

failed:

    return rc;
}


/* 4. The device memory of the weights (and RoPE table) and of the
 * workspace. */
static int
kvs_cuda_alloc(kvs_cuda_t *cu, const kvs_cuda_load_t *ld, kvs_err_t *err)
{
    int  rc;

    KVS_CUDA_TRY(cudaMalloc(&cu->wmem, ld->total), "cudaMalloc(weights)");
    cu->wbytes = ld->total;
    KVS_CUDA_TRY(cudaMalloc(&cu->ws, cu->wl.total),
                 "cudaMalloc(workspace)");

    return KVS_OK;

failed:

    return rc;
}


/* 4. The K/V cache, [n_layer][n_blocks][bt][width] each, and in int8
 * and fp8 the scales, [n_layer][n_blocks][n_head_kv] each, zeroed; their
 * sum, n_blocks * block_bytes, was checked against free memory by the
 * plan. */
static int
kvs_cuda_alloc_kv(kvs_cuda_t *cu, kvs_err_t *err)
{
    int     rc;
    size_t  elem, kv_k, kv_v, sc;

    elem = kvs_k_dtype_size(cu->kv.dtype);
    kv_k = (size_t) cu->kv.n_layer * cu->kv.n_blocks * cu->kv.block_tokens
           * cu->hp.k_width * elem;
    kv_v = (size_t) cu->kv.n_layer * cu->kv.n_blocks * cu->kv.block_tokens
           * cu->hp.v_width * elem;

    KVS_CUDA_TRY(cudaMalloc(&cu->kv.k, kv_k), "cudaMalloc(K cache)");
    KVS_CUDA_TRY(cudaMalloc(&cu->kv.v, kv_v), "cudaMalloc(V cache)");
    KVS_CUDA_TRY(cudaMemsetAsync(cu->kv.k, 0, kv_k, cu->st),
                 "cudaMemsetAsync(K cache)");
    KVS_CUDA_TRY(cudaMemsetAsync(cu->kv.v, 0, kv_v, cu->st),
                 "cudaMemsetAsync(V cache)");

    if (cu->kv.dtype == KVS_K_I8 || cu->kv.dtype == KVS_K_FP8) {
        sc = (size_t) cu->kv.n_layer * cu->kv.n_blocks * cu->kv.n_head_kv
             * sizeof(float);

        KVS_CUDA_TRY(cudaMalloc((void **) &cu->kv.ks, sc),
                     "cudaMalloc(K scales)");
        KVS_CUDA_TRY(cudaMalloc((void **) &cu->kv.vs, sc),
                     "cudaMalloc(V scales)");
        KVS_CUDA_TRY(cudaMemsetAsync(cu->kv.ks, 0, sc, cu->st),
                     "cudaMemsetAsync(K scales)");
        KVS_CUDA_TRY(cudaMemsetAsync(cu->kv.vs, 0, sc, cu->st),
                     "cudaMemsetAsync(V scales)");
    }

    return KVS_OK;

failed:

    return rc;
}


/* 4. What a step reads at fixed addresses: the workspace's arrays (and
 * cuBLAS's own, so that it allocates nothing during capture), the pinned
 * host buffers and the batch packer over them; then the stream drained
 * of the load's work. */
static int
kvs_cuda_bind_step(kvs_cuda_t *cu, kvs_err_t *err)
{
    int  rc;

#define KVS_CUDA_WS(field, type)                                             \
    cu->field = (type) ((char *) cu->ws + cu->wl.field)

    KVS_CUDA_WS(x, float *);
    KVS_CUDA_WS(r, float *);
    KVS_CUDA_WS(q, float *);
    KVS_CUDA_WS(k, float *);
    KVS_CUDA_WS(v, float *);
    KVS_CUDA_WS(att, float *);
    KVS_CUDA_WS(h, float *);
    KVS_CUDA_WS(in, void *);
    KVS_CUDA_WS(logits, float *);
    KVS_CUDA_WS(part, float *);
    KVS_CUDA_WS(sample, void *);
    KVS_CUDA_WS(ids, int32_t *);
    cu->dpack = (int32_t *) ((char *) cu->ws + cu->wl.pack);
    cu->blas_ws = (char *) cu->ws + cu->wl.blas;

#undef KVS_CUDA_WS

    KVS_BLAS_TRY(cublasSetWorkspace(cu->blas, cu->blas_ws,
                                    KVS_CUDA_BLAS_BYTES),
                 "cublasSetWorkspace");

    KVS_CUDA_TRY(cudaHostAlloc((void **) &cu->hpack,
                               cu->wl.pack_words * sizeof(int32_t),
                               cudaHostAllocDefault),
                 "cudaHostAlloc(packed batch)");
    KVS_CUDA_TRY(cudaHostAlloc((void **) &cu->hlogits,
                               (size_t) cu->max_rows * cu->hp.n_vocab
                               * sizeof(float), cudaHostAllocDefault),
                 "cudaHostAlloc(logits)");
    KVS_CUDA_TRY(cudaHostAlloc((void **) &cu->hids,
                               (size_t) cu->max_rows * sizeof(int32_t),
                               cudaHostAllocDefault),
                 "cudaHostAlloc(ids)");

    cu->pk.n_vocab = cu->hp.n_vocab;
    cu->pk.n_blocks = cu->kv.n_blocks;
    cu->pk.block_tokens = cu->kv.block_tokens;
    cu->pk.swa_all = kvs_hparams_swa_all(&cu->hp);
    cu->pk.words = cu->hpack;
    cu->pk.cap_words = cu->wl.pack_words;
    cu->pk.seq_tab = cu->seq_tab;
    cu->pk.seq_nb = cu->seq_nb;
    cu->pk.cap_seq = cu->max_tok;

    KVS_CUDA_TRY(cudaStreamSynchronize(cu->st),
                 "cudaStreamSynchronize(load)");

    return KVS_OK;

failed:

    return rc;
}


/* Frees whatever of cu exists; errors are ignored (nothing to report
 * them to, and the next free must still run). */
static void
kvs_cuda_release(kvs_cuda_t *cu)
{
    if (cu->st != NULL || cu->wmem != NULL) {
        (void) cudaSetDevice(cu->device);
    }

    if (cu->st != NULL) {
        (void) cudaStreamSynchronize(cu->st);
    }

    kvs_cuda_graphs_free(cu);
    kvs_cuda_lora_free(cu);
    kvs_cuda_tier_release(cu);

    if (cu->blas != NULL) {
        (void) cublasDestroy(cu->blas);
    }

    if (cu->kv.k != NULL) {
        (void) cudaFree(cu->kv.k);
    }

    if (cu->kv.v != NULL) {
        (void) cudaFree(cu->kv.v);
    }

    if (cu->kv.ks != NULL) {
        (void) cudaFree(cu->kv.ks);
    }

    if (cu->kv.vs != NULL) {
        (void) cudaFree(cu->kv.vs);
    }

    if (cu->ws != NULL) {
        (void) cudaFree(cu->ws);
    }

    if (cu->wmem != NULL) {
        (void) cudaFree(cu->wmem);
    }

    if (cu->hpack != NULL) {
        (void) cudaFreeHost(cu->hpack);
    }

    if (cu->hlogits != NULL) {
        (void) cudaFreeHost(cu->hlogits);
    }

    if (cu->hids != NULL) {
        (void) cudaFreeHost(cu->hids);
    }

    if (cu->st != NULL) {
        (void) cudaStreamDestroy(cu->st);
    }

    free(cu->layers);
    free(cu->seq_tab);
    free(cu->seq_nb);
}


static void
kvs_cuda_free(kvs_backend_t *be)
{
    kvs_cuda_release(be->impl);
    free(be);
}


/* dst's K/V := src's, every layer: one copy per layer and cache, since a
 * block's slots are contiguous only within a layer; in int8 and fp8 the
 * block's scales too. */
static int
kvs_cuda_copy_block(kvs_backend_t *be, uint32_t dst, uint32_t src,
    kvs_err_t *err)
{
    int          rc;
    size_t       kb, vb, ko, vo, sb;
    uint32_t     l;
    kvs_cuda_t  *cu = be->impl;

    if (dst >= cu->kv.n_blocks || src >= cu->kv.n_blocks) {
        return kvs_err_set(err, KVS_EINVAL, "copy block %" PRIu32 " to %"
                           PRIu32 ": the cache has %" PRIu32 " blocks",
                           src, dst, cu->kv.n_blocks);
    }

    if (dst == src) {
        return KVS_OK;
    }

    /* bytes of one block of one layer */
    kb = (size_t) cu->kv.block_tokens * cu->kv.n_head_kv * cu->kv.hd_k
         * kvs_k_dtype_size(cu->kv.dtype);
    vb = (size_t) cu->kv.block_tokens * cu->kv.n_head_kv * cu->kv.hd_v
         * kvs_k_dtype_size(cu->kv.dtype);

    for (l = 0; l < cu->kv.n_layer; l++) {
        ko = (size_t) l * cu->kv.n_blocks;
        vo = ko;

        KVS_CUDA_TRY(cudaMemcpyAsync((char *) cu->kv.k + (ko + dst) * kb,
                                     (char *) cu->kv.k + (ko + src) * kb,
                                     kb, cudaMemcpyDeviceToDevice, cu->st),
                     "cudaMemcpyAsync(copy K block)");
        KVS_CUDA_TRY(cudaMemcpyAsync((char *) cu->kv.v + (vo + dst) * vb,
                                     (char *) cu->kv.v + (vo + src) * vb,
                                     vb, cudaMemcpyDeviceToDevice, cu->st),
                     "cudaMemcpyAsync(copy V block)");

        if (cu->kv.ks != NULL) {
            sb = (size_t) cu->kv.n_head_kv * sizeof(float);

            KVS_CUDA_TRY(cudaMemcpyAsync((char *) cu->kv.ks + (ko + dst) * sb,
                                         (char *) cu->kv.ks + (ko + src) * sb,
                                         sb, cudaMemcpyDeviceToDevice,
                                         cu->st),
                         "cudaMemcpyAsync(copy K scales)");
            KVS_CUDA_TRY(cudaMemcpyAsync((char *) cu->kv.vs + (vo + dst) * sb,
                                         (char *) cu->kv.vs + (vo + src) * sb,
                                         sb, cudaMemcpyDeviceToDevice,
                                         cu->st),
                         "cudaMemcpyAsync(copy V scales)");
        }
    }

    KVS_CUDA_TRY(cudaStreamSynchronize(cu->st),
                 "cudaStreamSynchronize(copy block)");

    return KVS_OK;

failed:

    return rc;
}
