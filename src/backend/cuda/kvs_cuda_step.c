/*
 * kvs_cuda_step: the CUDA backend's forward step (forward and
 * forward_sample of kvs_backend_ops_t), following kvs_cpu_forward's order
 * of operations: embedding (times embd_scale: gemma); per layer RMSNorm,
 * q/k/v products, per-head norms (qwen3, gemma3), biases + RoPE (the
 * windowed layers' own table: gemma3) + K/V write, attention over the
 * paged cache (the layer's window, the soft cap: gemma2), wo,
 * post-attention norm (gemma), residual + RMSNorm, gate/up, SwiGLU or
 * GeGLU (gemma), down, post-FFN norm (gemma); residual; final norm of
 * the rows that want logits; output product; the final soft cap
 * (gemma2); then the logits or the sampled ids back.  Which of these
 * run is read from the hyper-parameters, never from the name.
 *
 * A step validates the whole batch first (so a rejected batch writes
 * nothing), then runs it in slices of at most KVS_CUDA_MAX_TOK tokens and
 * KVS_CUDA_MAX_ROWS logits rows; a slice after another sees its K/V in
 * the cache, exactly as one step would.  Per slice: the batch is packed
 * into pinned memory and uploaded with ONE cudaMemcpyAsync, the work is
 * enqueued on the one stream (or a captured graph is launched), the
 * results are copied back, and the stream is synchronized once.
 *
 * Graphs: a decode-only slice (every run one token) whose size has a
 * bucket is padded to the bucket and runs as a graph captured once per
 * (bucket, context bucket, split, sampling) key.  Nothing in a graph is
 * ever updated: its kernels read the packed batch at the fixed address
 * dpack, with offsets that depend only on the bucket.  A capture that
 * fails turns graphs off for this backend and the slice runs eagerly.
 *
 * Products (cublasGemmEx).  Row-major y[n][rows] = x[n][cols] * W^T with
 * W row-major [rows][cols] as the GGUF stores it.  cuBLAS is
 * column-major: a row-major [a][b] matrix with leading dimension b is
 * the column-major b x a matrix, its transpose.  So W is column-major
 * Wc (cols x rows, ld cols) = W^T, x is Xc (cols x n, ld cols) = x^T and
 * y is Yc (rows x n, ld rows) = y^T.  y = x W^T  <=>  y^T = W x^T  <=>
 * Yc = Wc^T * Xc:
 *   cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m = rows, n = n, k = cols,
 *                &1, W, Wtype, lda = cols, x, Wtype, ldb = cols,
 *                &0, y, CUDA_R_32F, ldc = rows (or a wider row stride),
 *                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
 * A = W and B = x have W's type (F32, F16 or BF16; x is written in that
 * type by the norm, convert or SwiGLU kernel), C is F32, sums are F32,
 * and the handle's default math mode never uses TF32.
 */

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include "kvs_cuda_impl.h"
#include "kvs_cuda_lora.h"


_Static_assert(sizeof(kvs_k_sample_param_t) == sizeof(kvs_backend_sample_t)
               && offsetof(kvs_k_sample_param_t, temperature)
                  == offsetof(kvs_backend_sample_t, temperature)
               && offsetof(kvs_k_sample_param_t, top_k)
                  == offsetof(kvs_backend_sample_t, top_k)
               && offsetof(kvs_k_sample_param_t, top_p)
                  == offsetof(kvs_backend_sample_t, top_p)
               && offsetof(kvs_k_sample_param_t, coin)
                  == offsetof(kvs_backend_sample_t, coin),
               "the packed sampling parameters are the kernel's");


/* What one slice enqueues: the same for a capture and an eager run. */
typedef struct {
    kvs_k_batch_t                kb;       /* device arrays in dpack */
    const int32_t               *rows;     /* [n_rows] device, in dpack:
                                              the tokens wanting logits */
    uint32_t                     n_rows;   /* logits rows computed */
    uint32_t                     split;    /* decode attention parts */
    int                          has_dec;  /* some run of one token */
    int                          has_pre;  /* some run of more */
    const kvs_k_sample_param_t  *params;   /* device, or NULL: no
                                              sampling */
    uint32_t                     lora_tasks;  /* the slice's LoRA tasks
                                                 (kvs_cuda_lora.h); 0:
                                                 no adapted row */
} kvs_cuda_prog_t;


static int kvs_cuda_gemm(kvs_cuda_t *cu, const kvs_cuda_mat_t *w,
    uint32_t rows, const void *x, float *y, uint32_t ldc, uint32_t n,
    kvs_err_t *err);
static int kvs_cuda_norm(kvs_cuda_t *cu, int dt, const float *r,
    const float *w, uint32_t n, kvs_err_t *err);
static int kvs_cuda_layer(kvs_cuda_t *cu, const kvs_cuda_prog_t *p,
    uint32_t l, kvs_err_t *err);
static int kvs_cuda_enqueue(kvs_cuda_t *cu, const kvs_cuda_prog_t *p,
    kvs_err_t *err);
static int kvs_cuda_graph_run(kvs_cuda_t *cu, const kvs_cuda_prog_t *p,
    uint64_t key, kvs_err_t *err);
static int kvs_cuda_run(kvs_backend_t *be, const kvs_batch_t *b,
    int sample, const kvs_backend_sample_t *params, const uint32_t *slots,
    float *logits, int32_t *ids, kvs_err_t *err);


#define KVS_K(call, what)                                                    \
    do {                                                                     \
        int  k_ = (call);                                                    \
        if (k_ != 0) {                                                       \
            return kvs_cuda_k(err, what, k_);                                \
        }                                                                    \
    } while (0)

#define KVS_CU(call, what)                                                   \
    do {                                                                     \
        cudaError_t  e_ = (call);                                            \
        if (e_ != cudaSuccess) {                                             \
            return kvs_cuda_fail(err, what, e_);                             \
        }                                                                    \
    } while (0)


/* After the base product of `target` into y: the adapted rows' LoRA
 * products (kvs_cuda_lora_apply), when the slice has any. */
#define KVS_LORA(target, x, x_dt, ldx, y, ldy)                               \
    do {                                                                     \
        if (p->lora_tasks != 0) {                                            \
            int  l_ = kvs_cuda_lora_apply(cu, p->lora_tasks, l, (target),    \
                                          (x), (x_dt), (ldx), (y), (ldy),    \
                                          err);                              \
            if (l_ != KVS_OK) {                                              \
                return l_;                                                   \
            }                                                                \
        }                                                                    \
    } while (0)


/* y[n][rows] (row stride ldc floats) = x[n][w->cols] * W[rows][cols]^T;
 * rows may exceed w->rows for the gate | up pair (see kvs_cuda_layer);
 * the mapping to cuBLAS's column-major call is in the header comment. */
static int
kvs_cuda_gemm(kvs_cuda_t *cu, const kvs_cuda_mat_t *w, uint32_t rows,
    const void *x, float *y, uint32_t ldc, uint32_t n, kvs_err_t *err)
{
    float           one, zero;
    cudaDataType_t  t;
    cublasStatus_t  s;

    one = 1.0f;
    zero = 0.0f;

    t = w->dt == KVS_K_F32 ? CUDA_R_32F
        : w->dt == KVS_K_F16 ? CUDA_R_16F : CUDA_R_16BF;

    s = cublasGemmEx(cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int) rows, (int) n,
                     (int) w->cols, &one, w->data, t, (int) w->cols, x, t,
                     (int) w->cols, &zero, y, CUDA_R_32F, (int) ldc,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        return kvs_cuda_blas_fail(err, "cublasGemmEx", s);
    }

    return KVS_OK;
}


/* in[n][n_embd] of dtype dt := RMSNorm(x (+= r when r is not NULL)). */
static int
kvs_cuda_norm(kvs_cuda_t *cu, int dt, const float *r, const float *w,
    uint32_t n, kvs_err_t *err)
{
    KVS_K(kvs_k_rmsnorm(cu->in, dt, cu->x, r, w, NULL, n, cu->hp.n_embd,
                        cu->eps, cu->st), "kvs_k_rmsnorm");

    return KVS_OK;
}


/* One transformer block over the slice's p->kb.n_tok tokens.  The
 * residual of the previous block (x += r) is fused into this block's
 * first norm; the last block's is done by kvs_cuda_enqueue. */
static int
kvs_cuda_layer(kvs_cuda_t *cu, const kvs_cuda_prog_t *p, uint32_t l,
    kvs_err_t *err)
{
    int                      rc, cur, local;
    size_t                   ld;
    uint32_t                 n, f, win;
    const void              *src;
    const double            *inv_freq;
    double                   mscale;
    const float             *g, *u;
    const kvs_cuda_layer_t  *ly;

    ly = &cu->layers[l];
    n = p->kb.n_tok;
    f = cu->hp.n_ff;

    /* the layer's window (0: global), and gemma3's local layers' RoPE
     * table, as kvs_cpu_forward picks them */
    win = kvs_hparams_swa(&cu->hp, l);
    local = kvs_hparams_rope_swa(&cu->hp, l) && cu->inv_freq_swa != NULL;
    inv_freq = local ? cu->inv_freq_swa : cu->inv_freq;
    mscale = local ? cu->mscale_swa : cu->mscale;

    /* attention: in[n][n_embd] = norm(x), in each product's dtype */
    rc = kvs_cuda_norm(cu, ly->wq.dt, l == 0 ? NULL : cu->r, ly->attn_norm,
                       n, err);
    if (rc != KVS_OK) {
        return rc;
    }

    cur = ly->wq.dt;

    /* q[n][n_head * hd_k], k[n][n_head_kv * hd_k], v[n][n_head_kv * hd_v]:
     * three products, since the RoPE kernel takes them unstrided */
    rc = kvs_cuda_gemm(cu, &ly->wq, ly->wq.rows, cu->in, cu->q, ly->wq.rows,
                       n, err);
    if (rc != KVS_OK) {
        return rc;
    }

    KVS_LORA(KVS_LORA_Q, cu->in, ly->wq.dt, ly->wq.cols, cu->q, ly->wq.rows);

    if (ly->wk.dt != cur) {
        rc = kvs_cuda_norm(cu, ly->wk.dt, NULL, ly->attn_norm, n, err);
        if (rc != KVS_OK) {
            return rc;
        }

        cur = ly->wk.dt;
    }

    rc = kvs_cuda_gemm(cu, &ly->wk, ly->wk.rows, cu->in, cu->k, ly->wk.rows,
                       n, err);
    if (rc != KVS_OK) {
        return rc;
    }

    KVS_LORA(KVS_LORA_K, cu->in, ly->wk.dt, ly->wk.cols, cu->k, ly->wk.rows);

    if (ly->wv.dt != cur) {
        rc = kvs_cuda_norm(cu, ly->wv.dt, NULL, ly->attn_norm, n, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    rc = kvs_cuda_gemm(cu, &ly->wv, ly->wv.rows, cu->in, cu->v, ly->wv.rows,
                       n, err);
    if (rc != KVS_OK) {
        return rc;
    }

    KVS_LORA(KVS_LORA_V, cu->in, ly->wv.dt, ly->wv.cols, cu->v, ly->wv.rows);

    /* qwen3, gemma3: each head of q and k RMS-normed before RoPE (no
     * biases with it: kvs_model_check_tensors refuses them) */
    if (ly->q_norm != NULL) {
        KVS_K(kvs_k_headnorm(cu->q, ly->q_norm, n * cu->hp.n_head,
                             cu->hp.head_dim_k, cu->eps, cu->st),
              "kvs_k_headnorm");
        KVS_K(kvs_k_headnorm(cu->k, ly->k_norm, n * cu->hp.n_head_kv,
                             cu->hp.head_dim_k, cu->eps, cu->st),
              "kvs_k_headnorm");
    }

    /* biases, RoPE on q and k, K/V into the cache: every token of the
     * slice is written before any attends */
    KVS_K(kvs_k_rope_kv(&cu->kv, l, &p->kb, cu->q, cu->k, cu->v, ly->bq,
                        ly->bk, ly->bv, inv_freq, cu->n_rot, mscale,
                        cu->hp.rope_pairing, cu->st), "kvs_k_rope_kv");

    /* att[n][n_head * hd_v] */
    if (p->has_dec) {
        KVS_K(kvs_k_attn_decode(cu->att, cu->q, &cu->kv, l, &p->kb,
                                cu->scale, win,
                                (float) cu->hp.attn_softcap, p->split,
                                cu->part, cu->st), "kvs_k_attn_decode");
    }

    if (p->has_pre) {
        KVS_K(kvs_k_attn_prefill(cu->att, cu->q, &cu->kv, l, &p->kb,
                                 cu->scale, win,
                                 (float) cu->hp.attn_softcap, cu->st),
              "kvs_k_attn_prefill");
    }

    /* r[n][n_embd] = att wo^T, att converted unless wo is F32 */
    src = cu->att;

    if (ly->wo.dt != KVS_K_F32) {
        KVS_K(kvs_k_convert(cu->in, ly->wo.dt, cu->att,
                            (size_t) n * ly->wo.cols, cu->st),
              "kvs_k_convert");
        src = cu->in;
    }

    rc = kvs_cuda_gemm(cu, &ly->wo, ly->wo.rows, src, cu->r, ly->wo.rows, n,
                       err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* src is att itself when wo is F32, else att in wo's dtype */
    KVS_LORA(KVS_LORA_O, src, ly->wo.dt, ly->wo.cols, cu->r, ly->wo.rows);

    /* gemma: r normed before it joins the residual (rows of n_embd, one
     * weight vector: the per-head norm kernel's shape) */
    if (ly->post_attn_norm != NULL) {
        KVS_K(kvs_k_headnorm(cu->r, ly->post_attn_norm, n, cu->hp.n_embd,
                             cu->eps, cu->st), "kvs_k_headnorm(post)");
    }

    /* FFN: x += r, in = norm(x) */
    rc = kvs_cuda_norm(cu, ly->w1.dt, cu->r, ly->ffn_norm, n, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (ly->gate_up) {
        /* h[n][2 * n_ff]: gate in [0, n_ff), up in [n_ff, 2 n_ff) */
        rc = kvs_cuda_gemm(cu, &ly->w1, 2 * f, cu->in, cu->h, 2 * f, n,
                           err);
        if (rc != KVS_OK) {
            return rc;
        }

        KVS_LORA(KVS_LORA_GATE, cu->in, ly->w1.dt, ly->w1.cols, cu->h,
                 2 * (size_t) f);
        KVS_LORA(KVS_LORA_UP, cu->in, ly->w1.dt, ly->w1.cols, cu->h + f,
                 2 * (size_t) f);

        g = cu->h;
        u = cu->h + f;
        ld = 2 * (size_t) f;

    } else {
        /* h: gate [n][n_ff], then up [n][n_ff] */
        rc = kvs_cuda_gemm(cu, &ly->w1, f, cu->in, cu->h, f, n, err);
        if (rc != KVS_OK) {
            return rc;
        }

        /* before in is normed again for w3's dtype */
        KVS_LORA(KVS_LORA_GATE, cu->in, ly->w1.dt, ly->w1.cols, cu->h, f);

        if (ly->w3.dt != ly->w1.dt) {
            rc = kvs_cuda_norm(cu, ly->w3.dt, NULL, ly->ffn_norm, n, err);
            if (rc != KVS_OK) {
                return rc;
            }
        }

        rc = kvs_cuda_gemm(cu, &ly->w3, f, cu->in, cu->h + (size_t) n * f,
                           f, n, err);
        if (rc != KVS_OK) {
            return rc;
        }

        KVS_LORA(KVS_LORA_UP, cu->in, ly->w3.dt, ly->w3.cols,
                 cu->h + (size_t) n * f, f);

        g = cu->h;
        u = cu->h + (size_t) n * f;
        ld = f;
    }

    /* in[n][n_ff] = silu(g) * u (gemma: gelu(g) * u) in w2's dtype */
    if (cu->hp.geglu) {
        KVS_K(kvs_k_geglu(cu->in, ly->w2.dt, g, u, ld, n, f, cu->st),
              "kvs_k_geglu");

    } else {
        KVS_K(kvs_k_swiglu(cu->in, ly->w2.dt, g, u, ld, n, f, cu->st),
              "kvs_k_swiglu");
    }

    /* r = in w2^T, normed (gemma) before the next block adds it */
    rc = kvs_cuda_gemm(cu, &ly->w2, ly->w2.rows, cu->in, cu->r,
                       ly->w2.rows, n, err);
    if (rc != KVS_OK) {
        return rc;
    }

    KVS_LORA(KVS_LORA_DOWN, cu->in, ly->w2.dt, ly->w2.cols, cu->r,
             ly->w2.rows);

    if (ly->post_ffn_norm != NULL) {
        KVS_K(kvs_k_headnorm(cu->r, ly->post_ffn_norm, n, cu->hp.n_embd,
                             cu->eps, cu->st), "kvs_k_headnorm(post)");
    }

    return KVS_OK;
}


/* The whole slice on cu->st; no synchronization, no allocation, nothing
 * that a stream capture refuses. */
static int
kvs_cuda_enqueue(kvs_cuda_t *cu, const kvs_cuda_prog_t *p, kvs_err_t *err)
{
    int       rc;
    uint32_t  l, n;

    n = p->kb.n_tok;

    /* x[n][n_embd] */
    KVS_K(kvs_k_embed(cu->x, cu->tok_embd.data, cu->tok_embd.dt, p->kb.tok,
                      n, cu->hp.n_embd, cu->hp.n_vocab, cu->st),
          "kvs_k_embed");

    /* gemma: embeddings times sqrt(n_embd), an F32 product as the CPU's */
    if (cu->hp.embd_scale != 1.0) {
        KVS_K(kvs_k_scale(cu->x, (size_t) n * cu->hp.n_embd,
                          (float) cu->hp.embd_scale, cu->st),
              "kvs_k_scale");
    }

    for (l = 0; l < cu->hp.n_layer; l++) {
        rc = kvs_cuda_layer(cu, p, l, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    if (p->n_rows == 0) {
        return KVS_OK;
    }

    /* the last residual (its normed rows are discarded), then the final
     * norm of the wanted rows only, gathered in batch order into
     * in[n_rows][n_embd] */
    rc = kvs_cuda_norm(cu, cu->output.dt, cu->r, cu->out_norm, n, err);
    if (rc != KVS_OK) {
        return rc;
    }

    KVS_K(kvs_k_rmsnorm(cu->in, cu->output.dt, cu->x, NULL, cu->out_norm,
                        p->rows, p->n_rows, cu->hp.n_embd, cu->eps, cu->st),
          "kvs_k_rmsnorm(final)");

    /* logits[n_rows][n_vocab] */
    rc = kvs_cuda_gemm(cu, &cu->output, cu->output.rows, cu->in, cu->logits,
                       cu->output.rows, p->n_rows, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* gemma2: logits := c tanh(logits / c), before sampling as before
     * the host's */
    if (cu->hp.final_softcap != 0.0) {
        KVS_K(kvs_k_softcap(cu->logits, (size_t) p->n_rows * cu->hp.n_vocab,
                            (float) cu->hp.final_softcap, cu->st),
              "kvs_k_softcap");
    }

    if (p->params != NULL) {
        KVS_K(kvs_k_sample(cu->ids, cu->logits, p->params, p->n_rows,
                           cu->hp.n_vocab, cu->sample, cu->st),
              "kvs_k_sample");
    }

    return KVS_OK;
}


/*
 * Launches the graph of key, capturing and instantiating it on a miss
 * (evicting the least recently used one when the cache is full).  A
 * capture or instantiation that fails turns graphs off and runs the
 * slice eagerly, which reports any error that is not the capture's.
 */
static int
kvs_cuda_graph_run(kvs_cuda_t *cu, const kvs_cuda_prog_t *p, uint64_t key,
    kvs_err_t *err)
{
    int                rc;
    uint32_t           i;
    cudaError_t        e;
    cudaGraph_t        graph;
    kvs_cuda_graph_t  *gr, *slot;

    slot = NULL;

    for (i = 0; i < KVS_CUDA_GRAPHS; i++) {
        gr = &cu->graphs[i];

        if (gr->exec != NULL && gr->key == key) {
            gr->used = ++cu->tick;
            KVS_CU(cudaGraphLaunch(gr->exec, cu->st), "cudaGraphLaunch");
            return KVS_OK;
        }

        /* an empty entry, else the least recently launched */
        if (slot == NULL
            || (slot->exec != NULL
                && (gr->exec == NULL || gr->used < slot->used)))
        {
            slot = gr;
        }
    }

    if (slot->exec != NULL) {
        KVS_CU(cudaGraphExecDestroy(slot->exec), "cudaGraphExecDestroy");
        slot->exec = NULL;
        slot->key = 0;
    }

    KVS_CU(cudaStreamBeginCapture(cu->st, cudaStreamCaptureModeThreadLocal),
           "cudaStreamBeginCapture");

    graph = NULL;
    rc = kvs_cuda_enqueue(cu, p, err);
    e = cudaStreamEndCapture(cu->st, &graph);

    if (rc == KVS_OK && e == cudaSuccess && graph != NULL) {
        e = cudaGraphInstantiate(&slot->exec, graph, 0);
        (void) cudaGraphDestroy(graph);
        graph = NULL;

        if (e == cudaSuccess) {
            slot->key = key;
            slot->used = ++cu->tick;
            KVS_CU(cudaGraphLaunch(slot->exec, cu->st), "cudaGraphLaunch");
            return KVS_OK;
        }

        slot->exec = NULL;
    }

    if (graph != NULL) {
        (void) cudaGraphDestroy(graph);
    }

    /* the capture's error is not sticky: clear it, run without graphs */
    (void) cudaGetLastError();
    cu->use_graphs = 0;

    return kvs_cuda_enqueue(cu, p, err);
}


void
kvs_cuda_graphs_free(kvs_cuda_t *cu)
{
    uint32_t  i;

    for (i = 0; i < KVS_CUDA_GRAPHS; i++) {
        if (cu->graphs[i].exec != NULL) {
            (void) cudaGraphExecDestroy(cu->graphs[i].exec);
            cu->graphs[i].exec = NULL;
            cu->graphs[i].key = 0;
        }
    }
}


/*
 * forward (sample 0: logits back) and forward_sample (ids back).
 * The batch is checked whole before anything is enqueued, then run slice
 * by slice (kvs_cuda_plan_slice); results land at the slice's offset in
 * logits / ids, in batch order.
 */
static int
kvs_cuda_run(kvs_backend_t *be, const kvs_batch_t *b, int sample,
    const kvs_backend_sample_t *params, const uint32_t *slots, float *logits,
    int32_t *ids, kvs_err_t *err)
{
    int                rc;
    size_t             need;
    uint32_t           i, from, n, bucket, w0, want, nv, lora_tasks;
    uint64_t           key;
    kvs_cuda_t        *cu;
    kvs_cuda_prog_t    p;
    kvs_cuda_packed_t  pd;
    const int32_t     *rl;

    cu = be->impl;
    nv = cu->hp.n_vocab;

    rc = kvs_cuda_plan_check(&cu->pk, b, 0, b != NULL ? b->n : 0, err);
    if (rc != KVS_OK) {
        return rc;
    }

    want = 0;

    for (i = 0; i < b->n; i++) {
        want += b->toks[i].want_logits != 0;
    }

    if (want > 0
        && (sample ? params == NULL || ids == NULL : logits == NULL))
    {
        return kvs_err_set(err, KVS_EINVAL, "cuda forward: %" PRIu32
                           " entries want logits, but no %s buffer", want,
                           sample ? "params or ids" : "logits");
    }

    /* the engine's thread may not be the one that loaded */
    KVS_CU(cudaSetDevice(cu->device), "cudaSetDevice");

    w0 = 0;

    for (from = 0; from < b->n; from += n) {
        n = kvs_cuda_plan_slice(b, from, cu->max_tok, cu->max_rows,
                                cu->max_table, cu->kv.block_tokens);

        /* the slice's adapted rows grouped, their upload enqueued; a
         * slice with any runs eagerly (its tasks change every step) */
        lora_tasks = 0;

        if (slots != NULL) {
            rc = kvs_cuda_lora_slice(cu, slots + from, n, &lora_tasks, err);
            if (rc != KVS_OK) {
                (void) cudaStreamSynchronize(cu->st);
                return rc;
            }
        }

        bucket = 0;

        if (cu->use_graphs && lora_tasks == 0
            && kvs_cuda_plan_decode_only(b, from, n))
        {
            bucket = kvs_cuda_plan_bucket(n, cu->max_rows);
        }

        rc = kvs_cuda_plan_pack(&cu->pk, b, from, n, bucket,
                                sample && params != NULL ? params + w0
                                                         : NULL,
                                &pd, err);
        if (rc != KVS_OK) {
            /* a LoRA grouping upload may be in flight */
            (void) cudaStreamSynchronize(cu->st);
            return rc;
        }

        /* a graph bakes in its row and sequence counts, which only a
         * padded image fixes to the bucket: a slice that fills its
         * bucket exactly but has a row without logits (a tail-only or
         * mid-prompt token) or a repeated sequence runs eagerly, else
         * its graph would be replayed over images it does not fit */
        if (bucket != 0
            && (pd.n_rows != pd.n_pad || pd.n_seq != pd.n_pad))
        {
            bucket = 0;
        }

        /* the one upload of the step's batch */
        KVS_CU(cudaMemcpyAsync(cu->dpack, cu->hpack,
                               pd.n_words * sizeof(int32_t),
                               cudaMemcpyHostToDevice, cu->st),
               "cudaMemcpyAsync(batch)");

        memset(&p, 0, sizeof(kvs_cuda_prog_t));
        p.kb.n_tok = pd.n_pad;
        p.kb.n_seq = pd.n_seq;
        p.kb.n_run = pd.n_run;
        p.kb.tok = cu->dpack + pd.tok;
        p.kb.pos = cu->dpack + pd.pos;
        p.kb.seq = cu->dpack + pd.seq;
        p.kb.table_off = cu->dpack + pd.table_off;
        p.kb.table = cu->dpack + pd.table;
        p.kb.run_tok0 = cu->dpack + pd.run_tok0;
        p.kb.run_len = cu->dpack + pd.run_len;
        /* a graph serves every context up to its bucket */
        p.kb.max_ctx = bucket != 0 ? kvs_cuda_plan_ctx_bucket(pd.max_ctx)
                                   : pd.max_ctx;
        p.rows = cu->dpack + pd.rows;
        p.n_rows = pd.n_rows;
        p.params = sample ? (const kvs_k_sample_param_t *)
                            (cu->dpack + pd.params)
                          : NULL;
        p.lora_tasks = lora_tasks;
        p.split = kvs_cuda_plan_split(p.kb.n_tok, p.kb.max_ctx,
                                      cu->hp.n_head_kv, (uint32_t) cu->n_sm,
                                      KVS_CUDA_MAX_SPLIT,
                                      cu->wl.part_floats,
                                      kvs_k_attn_part_floats(1,
                                          cu->hp.n_head, 1,
                                          cu->hp.head_dim_v));

        need = kvs_k_attn_part_floats(p.kb.n_tok, cu->hp.n_head, p.split,
                                      cu->hp.head_dim_v);
        if (need > cu->wl.part_floats) {
            return kvs_err_set(err, KVS_EINVAL, "cuda forward: attention "
                               "scratch of %zu floats for %" PRIu32
                               " tokens in %" PRIu32 " parts, %zu "
                               "planned", need, p.kb.n_tok, p.split,
                               cu->wl.part_floats);
        }

        rl = cu->hpack + pd.run_len;

        for (i = 0; i < pd.n_run; i++) {
            p.has_dec |= rl[i] == 1;
            p.has_pre |= rl[i] > 1;
        }

        if (bucket != 0) {
            key = kvs_cuda_plan_key(bucket, p.kb.max_ctx, p.split, sample);
            rc = kvs_cuda_graph_run(cu, &p, key, err);

        } else {
            rc = kvs_cuda_enqueue(cu, &p, err);
        }

        if (rc != KVS_OK) {
            (void) cudaStreamSynchronize(cu->st);
            return rc;
        }

        /* the wanted rows are the first pd.n_want of the n_rows */
        if (pd.n_want > 0 && sample) {
            KVS_CU(cudaMemcpyAsync(cu->hids, cu->ids,
                                   (size_t) pd.n_want * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, cu->st),
                   "cudaMemcpyAsync(ids)");

        } else if (pd.n_want > 0) {
            KVS_CU(cudaMemcpyAsync(cu->hlogits, cu->logits,
                                   (size_t) pd.n_want * nv * sizeof(float),
                                   cudaMemcpyDeviceToHost, cu->st),
                   "cudaMemcpyAsync(logits)");
        }

        KVS_CU(cudaStreamSynchronize(cu->st), "cudaStreamSynchronize(step)");

        if (pd.n_want > 0 && sample) {
            memcpy(ids + w0, cu->hids, (size_t) pd.n_want * sizeof(int32_t));

        } else if (pd.n_want > 0) {
            memcpy(logits + (size_t) w0 * nv, cu->hlogits,
                   (size_t) pd.n_want * nv * sizeof(float));
        }

        w0 += pd.n_want;
    }

    return KVS_OK;
}


int
kvs_cuda_forward(kvs_backend_t *be, const kvs_batch_t *b, float *logits,
    kvs_err_t *err)
{
    return kvs_cuda_run(be, b, 0, NULL, NULL, logits, NULL, err);
}


int
kvs_cuda_forward_sample(kvs_backend_t *be, const kvs_batch_t *b,
    const kvs_backend_sample_t *params, int32_t *ids, kvs_err_t *err)
{
    return kvs_cuda_run(be, b, 1, params, NULL, NULL, ids, err);
}


/* forward with each entry's adapter slot (0: none); every slot named is
 * checked before anything runs */
int
kvs_cuda_forward_lora(kvs_backend_t *be, const kvs_batch_t *b,
    const uint32_t *slots, float *logits, kvs_err_t *err)
{
    int  rc;

    if (b != NULL && slots != NULL) {
        rc = kvs_cuda_lora_check_slots(be->impl, slots, b->n, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return kvs_cuda_run(be, b, 0, NULL, slots, logits, NULL, err);
}
