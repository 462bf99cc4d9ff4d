/*
 * kvs_cuda_impl: the CUDA backend's state, shared by kvs_cuda_backend.c
 * (load, free, copy_block), kvs_cuda_weights.c (the weights' upload) and
 * kvs_cuda_step.c (the forward step).
 *
 * Ownership: a kvs_cuda_t owns every device allocation, the pinned host
 * buffers, the cuBLAS handle, the stream and the captured graphs; all of
 * them are made in kvs_cuda_backend_new() and nothing is allocated in
 * the step path (the graph cache's instantiations are the exception:
 * once per bucket, bounded by KVS_CUDA_GRAPHS).
 *
 * Invariants:
 *   - all work goes on one stream, `st`, but the block copies of the
 *     lower tiers (kvs_cuda_tier.c: their own stream `cst`, and
 *     kvs_cuda_acopy.c's asynchronous ones on `ast`, ordered against st
 *     by events); a step ends with one cudaStreamSynchronize,
 *     so between calls the device is idle and the pinned buffers are
 *     free to rewrite;
 *   - the packed batch lives at fixed addresses (hpack on the host, dpack
 *     on the device), so graphs captured over it stay valid;
 *   - every matrix's input is converted to the matrix's own dtype before
 *     its product (cuBLAS takes A and B of one type);
 *   - weights: matrices F32 / F16 / BF16 as stored, Q8_0 as BF16; vectors
 *     F32; the K/V cache is F32 when every matrix is F32, BF16 otherwise.
 */

#ifndef KVS_CUDA_IMPL_H
#define KVS_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kvs_kernels.h"
#include "backend/kvs_backend.h"
#include "kvs_cuda_bcopy.h"
#include "kvs_cuda_plan.h"
#include "model/kvs_hparams.h"

#define KVS_CUDA_MAX_TOK     4096    /* tokens per slice of a step */
#define KVS_CUDA_MAX_ROWS    256     /* logits rows per slice; largest
                                        decode bucket */
#define KVS_CUDA_MAX_TABLE   (1u << 20)   /* block ids per slice */
#define KVS_CUDA_MAX_SPLIT   64      /* decode attention parts */
#define KVS_CUDA_BLAS_BYTES  ((size_t) 32 << 20)  /* cuBLAS workspace */
#define KVS_CUDA_RESERVE     ((uint64_t) 512 << 20)  /* left free */
#define KVS_CUDA_GRAPHS      64      /* captured decode graphs kept */


/* A weight matrix on the device, row-major [rows][cols] as in the GGUF. */
typedef struct {
    void      *data;                  /* device, inside cu->wmem */
    int        dt;                    /* KVS_K_F32 | F16 | BF16 */
    uint32_t   rows;
    uint32_t   cols;
} kvs_cuda_mat_t;

typedef struct {
    float           *attn_norm;       /* [n_embd] */
    kvs_cuda_mat_t   wq;              /* [n_head * hd_k][n_embd] */
    kvs_cuda_mat_t   wk;              /* [n_head_kv * hd_k][n_embd] */
    kvs_cuda_mat_t   wv;              /* [n_head_kv * hd_v][n_embd] */
    float           *bq;              /* [n_head * hd_k] or NULL */
    float           *bk;              /* [n_head_kv * hd_k] or NULL */
    float           *bv;              /* [n_head_kv * hd_v] or NULL */
    float           *q_norm;          /* [hd_k] per-head norm, or NULL */
    float           *k_norm;          /* [hd_k] per-head norm, or NULL */
    kvs_cuda_mat_t   wo;              /* [n_embd][n_head * hd_v] */
    float           *ffn_norm;        /* [n_embd] */
    kvs_cuda_mat_t   w1;              /* gate [n_ff][n_embd] */
    kvs_cuda_mat_t   w3;              /* up [n_ff][n_embd] */
    kvs_cuda_mat_t   w2;              /* down [n_embd][n_ff] */
    float           *post_attn_norm;  /* [n_embd] on wo's output, or
                                         NULL (gemma's post-norms) */
    float           *post_ffn_norm;   /* [n_embd] on w2's output, or
                                         NULL */
    int              gate_up;         /* w3 directly follows w1 in memory,
                                         same dtype: one product of
                                         [2 * n_ff][n_embd] */
} kvs_cuda_layer_t;

typedef struct {
    uint64_t          key;            /* kvs_cuda_plan_key(); 0: empty */
    uint64_t          used;           /* tick of the last launch */
    cudaGraphExec_t   exec;
} kvs_cuda_graph_t;

typedef struct {
    kvs_hparams_t       hp;
    int                 device;
    int                 n_sm;
    cudaStream_t        st;
    cublasHandle_t      blas;

    void               *wmem;         /* every weight and the RoPE table */
    size_t              wbytes;
    kvs_cuda_mat_t      tok_embd;     /* [n_vocab][n_embd] */
    kvs_cuda_mat_t      output;       /* [n_vocab][n_embd]; tok_embd's
                                         storage when tied */
    float              *out_norm;     /* [n_embd] */
    kvs_cuda_layer_t   *layers;       /* [n_layer], host */
    double             *inv_freq;     /* [n_rot / 2], device */
    uint32_t            n_rot;
    double              mscale;
    double             *inv_freq_swa; /* [n_rot / 2], device: windowed
                                         layers' (gemma3), or NULL: they
                                         use inv_freq */
    double              mscale_swa;

    kvs_k_kv_t          kv;           /* k, v: [n_layer][n_blocks][bt]
                                         [width] of kv.dtype, device */

    void               *ws;           /* the workspace, device */
    kvs_cuda_ws_t       wl;           /* its layout */
    float              *x;            /* [max_tok][n_embd] residual */
    float              *r;            /* [max_tok][n_embd] wo, w2 out */
    float              *q;            /* [max_tok][n_head * hd_k] */
    float              *k;            /* [max_tok][n_head_kv * hd_k] */
    float              *v;            /* [max_tok][n_head_kv * hd_v] */
    float              *att;          /* [max_tok][n_head * hd_v] */
    float              *h;            /* [max_tok][2 * n_ff] gate | up */
    void               *in;           /* [max_tok][widest] product input */
    float              *logits;       /* [max_rows][n_vocab] */
    float              *part;         /* [wl.part_floats] */
    void               *sample;       /* [sample scratch bytes] */
    int32_t            *ids;          /* [max_rows] */
    void               *blas_ws;      /* [KVS_CUDA_BLAS_BYTES] */
    int32_t            *dpack;        /* [wl.pack_words] packed batch */

    int32_t            *hpack;        /* [wl.pack_words] pinned */
    float              *hlogits;      /* [max_rows][n_vocab] pinned */
    int32_t            *hids;         /* [max_rows] pinned */
    const kvs_kv_table_t
                      **seq_tab;      /* [max_tok] packing scratch */
    uint32_t           *seq_nb;       /* [max_tok] packing scratch */
    kvs_cuda_packer_t   pk;

    uint32_t            max_tok;
    uint32_t            max_rows;
    uint32_t            max_table;
    float               eps;
    float               scale;        /* hp.attn_scale: the query scale,
                                         1 / sqrt(hd_k) unless the model
                                         says otherwise */

    kvs_cuda_graph_t    graphs[KVS_CUDA_GRAPHS];
    uint64_t            tick;
    int                 use_graphs;   /* 0 after a failed capture, or
                                         KVS_CUDA_GRAPHS=0 */

    struct kvs_cuda_lora_s
                       *lora;         /* LoRA slots (kvs_cuda_lora.h), or
                                         NULL before the first set_lora */

    /* block_read / block_write (kvs_cuda_tier.c) */
    cudaStream_t        cst;          /* their copies' own stream */
    cudaEvent_t         ev_step;      /* recorded on st: the last step */
    cudaEvent_t         ev_copy;      /* recorded on cst: the last write */
    void               *stage;        /* one block, pinned */
    kvs_cuda_bc_geom_t  bc;           /* the pool's geometry for the plan */

    /* block_read_async ... copy_wait (kvs_cuda_acopy.c) */
    struct kvs_cuda_acopy_s
                       *ac;
} kvs_cuda_t;


/* err := "cuda: <what>: <error string>"; returns KVS_EIO, or KVS_ENOMEM
 * for cudaErrorMemoryAllocation. */
int kvs_cuda_fail(kvs_err_t *err, const char *what, cudaError_t e);

/* The same for a cuBLAS status. */
int kvs_cuda_blas_fail(kvs_err_t *err, const char *what, cublasStatus_t s);

/* A launcher's result: KVS_K_EARG is KVS_EINVAL (a shape the kernel
 * refused: our bug), any other non-zero a CUDA error. */
int kvs_cuda_k(kvs_err_t *err, const char *what, int rc);

/* On a failed CUDA or cuBLAS call: rc := the error (kvs_cuda_fail,
 * kvs_cuda_blas_fail, naming `what`), then goto failed; for functions
 * with an int rc, an err and a failed: label that unwinds. */
#define KVS_CUDA_TRY(call, what)                                             \
    do {                                                                     \
        cudaError_t  e_ = (call);                                            \
        if (e_ != cudaSuccess) {                                             \
            rc = kvs_cuda_fail(err, what, e_);                               \
            goto failed;                                                     \
        }                                                                    \
    } while (0)

#define KVS_BLAS_TRY(call, what)                                             \
    do {                                                                     \
        cublasStatus_t  s_ = (call);                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                   \
            rc = kvs_cuda_blas_fail(err, what, s_);                          \
            goto failed;                                                     \
        }                                                                    \
    } while (0)


/* kvs_cuda_step.c: the ops. */
int kvs_cuda_forward(kvs_backend_t *be, const kvs_batch_t *b,
    float *logits, kvs_err_t *err);
int kvs_cuda_forward_sample(kvs_backend_t *be, const kvs_batch_t *b,
    const kvs_backend_sample_t *params, int32_t *ids, kvs_err_t *err);
int kvs_cuda_forward_lora(kvs_backend_t *be, const kvs_batch_t *b,
    const uint32_t *slots, float *logits, kvs_err_t *err);

/* Destroys every captured graph. */
void kvs_cuda_graphs_free(kvs_cuda_t *cu);

/* kvs_cuda_tier.c: the copy stream, events and staging block (after the
 * pool is allocated), their release, and the ops block_read,
 * block_write, host_alloc and host_free. */
int kvs_cuda_tier_init(kvs_cuda_t *cu, kvs_err_t *err);
void kvs_cuda_tier_release(kvs_cuda_t *cu);
int kvs_cuda_block_read(kvs_backend_t *be, uint32_t b, void *dst,
    kvs_err_t *err);
int kvs_cuda_block_write(kvs_backend_t *be, uint32_t b, const void *src,
    kvs_err_t *err);
void *kvs_cuda_host_alloc(kvs_backend_t *be, size_t bytes, kvs_err_t *err);
void kvs_cuda_host_free(kvs_backend_t *be, void *p);
/* Block b's pieces (kvs_cuda_bc_plan) between the pool and the packed
 * block at buf, queued on stream s: into the pool (to_pool) or out of
 * it, kind the copies' direction (host or device memory at buf). */
int kvs_cuda_tier_pieces(kvs_cuda_t *cu, uint32_t b, char *buf,
    int to_pool, enum cudaMemcpyKind kind, cudaStream_t s, kvs_err_t *err);

/* kvs_cuda_acopy.c: the copies off the step, their stream, events and
 * device staging (made by kvs_cuda_tier_init for blocks of block_bytes,
 * released by kvs_cuda_tier_release), and the ops block_read_async,
 * block_write_async, copy_poll and copy_wait. */
int kvs_cuda_acopy_init(kvs_cuda_t *cu, uint64_t block_bytes,
    kvs_err_t *err);
void kvs_cuda_acopy_release(kvs_cuda_t *cu);
int kvs_cuda_block_read_async(kvs_backend_t *be, uint32_t b, void *dst,
    uint64_t *ticket, kvs_err_t *err);
int kvs_cuda_block_write_async(kvs_backend_t *be, uint32_t b,
    const void *src, uint64_t *ticket, kvs_err_t *err);
int kvs_cuda_copy_poll(kvs_backend_t *be, uint64_t *done, kvs_err_t *err);
int kvs_cuda_copy_wait(kvs_backend_t *be, uint64_t ticket, kvs_err_t *err);

#endif /* KVS_CUDA_IMPL_H */
