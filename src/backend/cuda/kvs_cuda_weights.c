/*
 * kvs_cuda_weights: the CUDA backend's weights at load (see
 * kvs_cuda_weights.h): tensors resolved and placed, the host RoPE
 * tables (gemma3's windowed layers have a second one), the uploads (Q8_0
 * through a staging buffer and kvs_k_q8_0_to, every other quantized type
 * of kvs_quant's table dequantized on the host through the table and
 * rounded to BF16, a chunk of rows at a time, non-F32 vectors widened on
 * the host) and the layers' device pointers.
 *
 * Invariant: every offset is carved with kvs_cuda_plan_carve (aligned,
 * never wrapping) before anything is allocated, so the device
 * allocation's size is known when step 3 plans memory.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cuda_weights.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"

/* elements dequantized on the host per upload of a quantized matrix
 * (whole rows; at least one): 6 MiB of scratch, not a tensor's worth */
#define KVS_CUDA_DEQ_CHUNK  (1u << 20)


static int kvs_cuda_tensor(kvs_cuda_load_t *ld, uint32_t slot,
    const kvs_model_t *m, const char *name, uint64_t ne0, uint64_t ne1,
    int optional, int matrix, kvs_err_t *err);
static int kvs_cuda_resolve(kvs_cuda_load_t *ld, const kvs_model_t *m,
    kvs_err_t *err);
static int kvs_cuda_rope_table(kvs_rope_t *rope, const kvs_model_t *m,
    kvs_err_t *err);
static void kvs_cuda_bind(kvs_cuda_t *cu, const kvs_cuda_load_t *ld);
static int kvs_cuda_upload(kvs_cuda_t *cu, const kvs_cuda_load_t *ld,
    void *stage, kvs_err_t *err);
static int kvs_cuda_upload_deq(kvs_cuda_t *cu, const kvs_cuda_up_t *u,
    void *dst, float *f, uint16_t *h, uint64_t chunk, const char *what,
    kvs_err_t *err);


/* A matrix the device takes neither as stored nor through a kernel of
 * its own: dequantized on the host through the table, uploaded as BF16
 * (kvs_cuda_plan_dtype says BF16 for it). */
static int
kvs_cuda_host_deq(uint32_t type)
{
    return type != KVS_GGML_F32 && type != KVS_GGML_F16
           && type != KVS_GGML_BF16 && type != KVS_GGML_Q8_0;
}


int
kvs_cuda_weights_place(kvs_cuda_t *cu, kvs_cuda_load_t *ld,
    const kvs_model_t *m, kvs_rope_t rope[2], size_t rope_off[2],
    kvs_err_t *err)
{
    int            rc;
    kvs_hparams_t  swa_hp;

    rc = kvs_cuda_resolve(ld, m, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_cuda_rope_table(&rope[0], m, err);
    if (rc != KVS_OK) {
        return rc;
    }

    cu->n_rot = rope[0].n_rot;
    cu->mscale = rope[0].mscale;
    cu->mscale_swa = rope[0].mscale;

    rc = kvs_cuda_plan_carve(&ld->total, (size_t) rope[0].n_rot / 2
                             * sizeof(double), &rope_off[0], err);
    if (rc != KVS_OK || m->hp.rope_base_swa == 0.0) {
        return rc;
    }

    /* the windowed layers' own base (gemma3's unscaled, gemma2's
     * scaled as the model), exactly the CPU backend's second table */
    swa_hp = m->hp;
    swa_hp.rope_freq_base = m->hp.rope_base_swa;
    if (!m->hp.rope_swa_scaled) {
        swa_hp.rope_scaling = KVS_ROPE_SCALING_NONE;
        swa_hp.rope_factor = 1.0;
        swa_hp.rope_longrope = 0;
    }

    rc = kvs_rope_init(&rope[1], &swa_hp, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (rope[1].n_rot != rope[0].n_rot) {
        return kvs_err_set(err, KVS_EINVAL, "cuda backend: the windowed "
                           "layers' RoPE turns %" PRIu32 " dimensions, "
                           "the others %" PRIu32, rope[1].n_rot,
                           rope[0].n_rot);
    }

    cu->mscale_swa = rope[1].mscale;

    return kvs_cuda_plan_carve(&ld->total, (size_t) rope[1].n_rot / 2
                               * sizeof(double), &rope_off[1], err);
}


int
kvs_cuda_weights_load(kvs_cuda_t *cu, const kvs_cuda_load_t *ld,
    const kvs_rope_t rope[2], const size_t rope_off[2], kvs_err_t *err)
{
    int    rc;
    void  *stage;

    stage = NULL;

    if (ld->stage > 0) {
        KVS_CUDA_TRY(cudaMalloc(&stage, ld->stage),
                     "cudaMalloc(Q8_0 staging)");
    }

    kvs_cuda_bind(cu, ld);

    rc = kvs_cuda_upload(cu, ld, stage, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    cu->inv_freq = (double *) ((char *) cu->wmem + rope_off[0]);
    KVS_CUDA_TRY(cudaMemcpyAsync(cu->inv_freq, rope[0].inv_freq,
                                 (size_t) rope[0].n_rot / 2
                                 * sizeof(double),
                                 cudaMemcpyHostToDevice, cu->st),
                 "upload of the RoPE table");

    cu->inv_freq_swa = NULL;

    if (rope[1].inv_freq != NULL) {
        cu->inv_freq_swa = (double *) ((char *) cu->wmem + rope_off[1]);
        KVS_CUDA_TRY(cudaMemcpyAsync(cu->inv_freq_swa, rope[1].inv_freq,
                                     (size_t) rope[1].n_rot / 2
                                     * sizeof(double),
                                     cudaMemcpyHostToDevice, cu->st),
                     "upload of the windowed layers' RoPE table");
    }
    KVS_CUDA_TRY(cudaStreamSynchronize(cu->st),
                 "cudaStreamSynchronize(weights)");

    if (stage != NULL) {
        KVS_CUDA_TRY(cudaFree(stage), "cudaFree(Q8_0 staging)");
        stage = NULL;
    }

    return KVS_OK;

failed:

    if (stage != NULL) {
        (void) cudaFree(stage);
    }

    return rc;
}


/* A tensor of the shape compute expects (ne1 == 0: a vector) put in its
 * slot with a device offset; a missing optional one leaves t NULL. */
static int
kvs_cuda_tensor(kvs_cuda_load_t *ld, uint32_t slot, const kvs_model_t *m,
    const char *name, uint64_t ne0, uint64_t ne1, int optional, int matrix,
    kvs_err_t *err)
{
    int                       rc;
    size_t                    bytes;
    uint64_t                  raw, rows;
    kvs_cuda_up_t            *u;
    const kvs_gguf_tensor_t  *t;

    rc = kvs_model_tensor(m, "cuda backend", name, ne0, ne1, optional, &t,
                          err);
    if (rc != KVS_OK || t == NULL) {
        return rc;
    }

    /* cuBLAS takes int dimensions */
    if (ne0 > INT32_MAX || ne1 > INT32_MAX) {
        return kvs_err_set(err, KVS_EFORMAT, "cuda backend: tensor %s: "
                           "%" PRIu64 " x %" PRIu64 " elements is over "
                           "cuBLAS' int dimensions", name, ne0,
                           ne1 == 0 ? 1 : ne1);
    }

    rc = kvs_cuda_plan_tensor_bytes(t->type, matrix, t->nelem, &bytes, err);
    if (rc != KVS_OK) {
        return kvs_err_prefix(err, "tensor %s", name);
    }

    /* the reader checked nbytes against the type; this guards the bytes
     * we copy against a reader that did not */
    if (kvs_ggml_nbytes(t->type, ne0, t->nelem, &raw, err) != KVS_OK
        || raw > t->nbytes || raw > SIZE_MAX)
    {
        return kvs_err_set(err, KVS_EFORMAT, "cuda backend: tensor %s holds "
                           "%" PRIu64 " bytes, fewer than its shape needs",
                           name, t->nbytes);
    }

    u = &ld->up[slot];

    rc = kvs_cuda_plan_carve(&ld->total, bytes, &u->off, err);
    if (rc != KVS_OK) {
        return rc;
    }

    u->t = t;
    u->bytes = bytes;
    u->matrix = matrix;

    if (matrix && t->type == KVS_GGML_Q8_0 && raw > ld->stage) {
        ld->stage = (size_t) raw;
    }

    if (matrix && kvs_cuda_host_deq(t->type)) {
        /* whole rows per chunk, at least one */
        rows = KVS_CUDA_DEQ_CHUNK / ne0 > 0 ? KVS_CUDA_DEQ_CHUNK / ne0 : 1;
        if (rows * ne0 > ld->deq) {
            ld->deq = rows * ne0;
        }
    }

    if (matrix && t->type != KVS_GGML_F32) {
        ld->all_f32 = 0;
    }

    if (matrix && t->type == KVS_GGML_F32) {
        ld->any_f32 = 1;
    }

    if (!matrix && t->type != KVS_GGML_F32 && t->nelem > ld->max_vec) {
        ld->max_vec = t->nelem;
    }

    return KVS_OK;
}


/* Every tensor a step reads, with the CPU backend's names and shapes, in
 * the plan's slot order (kvs_cuda_plan_weights carves the same). */
static int
kvs_cuda_resolve(kvs_cuda_load_t *ld, const kvs_model_t *m, kvs_err_t *err)
{
    int                          rc;
    char                         name[64];
    uint32_t                     s;
    uint64_t                     dim[KVS_CUDA_D_N];
    const kvs_cuda_plan_name_t  *nm;

    kvs_cuda_plan_dims(&m->hp, dim);
    rc = KVS_OK;

    for (s = 0; rc == KVS_OK && s < ld->n; s++) {
        nm = kvs_cuda_plan_slot(s, name, sizeof(name));

        rc = kvs_cuda_tensor(ld, s, m, name, dim[nm->ne0],
                             nm->ne1 < 0 ? 0 : dim[nm->ne1], nm->optional,
                             nm->matrix, err);
    }

    return rc;
}


/* The host RoPE table, with the factors of the tensor the
 * hyper-parameters name (rope_freqs, or phi3's longrope set) when
 * present. */
static int
kvs_cuda_rope_table(kvs_rope_t *rope, const kvs_model_t *m, kvs_err_t *err)
{
    int                       rc;
    float                    *fl;
    uint32_t                  n;
    uint64_t                  raw;
    const char               *fname;
    const kvs_gguf_tensor_t  *t;

    rc = kvs_rope_init(rope, &m->hp, err);
    if (rc != KVS_OK) {
        return rc;
    }

    fname = kvs_hparams_rope_factors(&m->hp);
    t = fname == NULL ? NULL : kvs_gguf_find_tensor(m->gguf, fname);
    if (t == NULL) {
        return KVS_OK;
    }

    n = m->hp.n_rot / 2;

    if (t->nelem != n || kvs_cuda_plan_dtype(t->type, 0) < 0
        || kvs_ggml_nbytes(t->type, t->ne[0], t->nelem, &raw, err) != KVS_OK
        || t->nbytes < raw)
    {
        kvs_rope_free(rope);
        return kvs_err_set(err, KVS_EFORMAT, "cuda backend: tensor "
                           "%s: %" PRIu64 " elements of %s, "
                           "expected %" PRIu32 " of a type kvserve "
                           "computes with", fname, t->nelem,
                           kvs_ggml_type_name(t->type), n);
    }

    fl = malloc((size_t) n * sizeof(float));
    if (fl == NULL) {
        kvs_rope_free(rope);
        return kvs_err_set(err, KVS_ENOMEM, "cuda backend: out of memory");
    }

    rc = kvs_quant_dequantize(t->type, t->data, fl, n, err);
    if (rc != KVS_OK) {
        free(fl);
        kvs_rope_free(rope);
        return kvs_err_prefix(err, "cuda backend: %s", fname);
    }

    rc = kvs_rope_set_freq_factors(rope, fl, n, err);
    free(fl);

    if (rc != KVS_OK) {
        kvs_rope_free(rope);
    }

    return rc;
}


/* Slot offsets turned into device pointers, once wmem exists. */
static void
kvs_cuda_bind(kvs_cuda_t *cu, const kvs_cuda_load_t *ld)
{
    uint32_t                l;
    kvs_cuda_layer_t       *ly;
    const kvs_cuda_up_t    *u;

#define KVS_CUDA_PTR(slot)                                                   \
    (ld->up[slot].t == NULL ? NULL                                           \
                            : (void *) ((char *) cu->wmem                    \
                                        + ld->up[slot].off))

#define KVS_CUDA_MAT(w, slot)                                                \
    u = &ld->up[slot];                                                       \
    (w).data = KVS_CUDA_PTR(slot);                                           \
    (w).dt = kvs_cuda_plan_dtype(u->t->type, 1);                             \
    (w).cols = (uint32_t) u->t->ne[0];                                       \
    (w).rows = (uint32_t) (u->t->nelem / u->t->ne[0])

    KVS_CUDA_MAT(cu->tok_embd, 0);
    cu->out_norm = KVS_CUDA_PTR(1);

    if (ld->up[2].t != NULL) {
        KVS_CUDA_MAT(cu->output, 2);

    } else {
        cu->output = cu->tok_embd;          /* tied */
    }

    for (l = 0; l < cu->hp.n_layer; l++) {
        uint32_t  b = KVS_CUDA_GLOBALS + l * KVS_CUDA_PER_LAYER;

        ly = &cu->layers[l];
        ly->attn_norm = KVS_CUDA_PTR(b + 0);

        if (ld->up[b + 14].t != NULL) {
            /* phi3's attn_qkv: Q, K and V as views of its rows */
            KVS_CUDA_MAT(ly->wq, b + 14);
            ly->wk = ly->wq;
            ly->wv = ly->wq;
            ly->wq.rows = cu->hp.q_width;
            ly->wk.rows = cu->hp.k_width;
            ly->wv.rows = cu->hp.v_width;
            ly->wk.data = (char *) ly->wq.data
                          + (size_t) ly->wq.rows * ly->wq.cols
                            * kvs_cuda_plan_dt_size(ly->wq.dt);
            ly->wv.data = (char *) ly->wk.data
                          + (size_t) ly->wk.rows * ly->wk.cols
                            * kvs_cuda_plan_dt_size(ly->wk.dt);

        } else {
            KVS_CUDA_MAT(ly->wq, b + 1);
            KVS_CUDA_MAT(ly->wk, b + 2);
            KVS_CUDA_MAT(ly->wv, b + 3);
        }

        ly->bq = KVS_CUDA_PTR(b + 4);
        ly->bk = KVS_CUDA_PTR(b + 5);
        ly->bv = KVS_CUDA_PTR(b + 6);
        KVS_CUDA_MAT(ly->wo, b + 7);
        ly->ffn_norm = KVS_CUDA_PTR(b + 8);
        KVS_CUDA_MAT(ly->w3, b + 10);

        if (ld->up[b + 9].t != NULL) {
            KVS_CUDA_MAT(ly->w1, b + 9);

        } else {
            /* phi3's ffn_up of 2 n_ff rows: gate first, then up */
            ly->w1 = ly->w3;
            ly->w1.rows = cu->hp.n_ff;
            ly->w3.rows = cu->hp.n_ff;
            ly->w3.data = (char *) ly->w1.data
                          + (size_t) ly->w1.rows * ly->w1.cols
                            * kvs_cuda_plan_dt_size(ly->w1.dt);
        }

        KVS_CUDA_MAT(ly->w2, b + 11);
        ly->q_norm = cu->hp.qk_norm ? KVS_CUDA_PTR(b + 12) : NULL;
        ly->k_norm = cu->hp.qk_norm ? KVS_CUDA_PTR(b + 13) : NULL;
        ly->post_attn_norm = cu->hp.post_norms ? KVS_CUDA_PTR(b + 15)
                                               : NULL;
        ly->post_ffn_norm = cu->hp.post_norms ? KVS_CUDA_PTR(b + 16)
                                              : NULL;

        /* one [2 * n_ff][n_embd] product when up follows gate exactly
         * (always so for a fused ffn_up) */
        ly->gate_up = ld->up[b + 9].t == NULL
                      || (ly->w1.dt == ly->w3.dt
                          && ld->up[b + 10].off
                             == ld->up[b + 9].off + ld->up[b + 9].bytes);
    }

#undef KVS_CUDA_MAT
#undef KVS_CUDA_PTR
}


/* Every slot copied to the device on cu->st: matrices and F32 vectors as
 * they are, F16 / BF16 vectors converted to F32 on the host, Q8_0
 * through `stage` and kvs_k_q8_0_to.  A pageable cudaMemcpyAsync returns
 * once its source is staged, so the host scratch may be reused at once;
 * `stage` is reused in stream order. */
static int
kvs_cuda_upload(kvs_cuda_t *cu, const kvs_cuda_load_t *ld, void *stage,
    kvs_err_t *err)
{
    int                  rc;
    char                 what[160];
    float               *vec, *deq;
    uint16_t            *deq16;
    uint32_t             s;
    uint64_t             raw;
    void                *dst;
    const kvs_cuda_up_t *u;

    vec = NULL;
    deq = NULL;
    deq16 = NULL;

    if (ld->max_vec > 0) {
        vec = malloc((size_t) ld->max_vec * sizeof(float));
        if (vec == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "cuda backend: out of "
                               "memory");
        }
    }

    if (ld->deq > 0) {
        deq = malloc((size_t) ld->deq * sizeof(float));
        deq16 = malloc((size_t) ld->deq * sizeof(uint16_t));
        if (deq == NULL || deq16 == NULL) {
            free(vec);
            free(deq);
            free(deq16);
            return kvs_err_set(err, KVS_ENOMEM, "cuda backend: out of "
                               "memory");
        }
    }

    rc = KVS_OK;

    for (s = 0; rc == KVS_OK && s < ld->n; s++) {
        u = &ld->up[s];

        if (u->t == NULL) {
            continue;
        }

        dst = (char *) cu->wmem + u->off;
        snprintf(what, sizeof(what), "upload of %.*s",
                 (int) (u->t->name.len > 100 ? 100 : u->t->name.len),
                 (const char *) u->t->name.ptr);

        if (u->matrix && u->t->type == KVS_GGML_Q8_0) {
            raw = u->t->nelem / 32 * 34;
            KVS_CUDA_TRY(cudaMemcpyAsync(stage, u->t->data, (size_t) raw,
                                         cudaMemcpyHostToDevice, cu->st),
                         what);
            rc = kvs_k_q8_0_to(dst, KVS_K_BF16, stage, (size_t) u->t->nelem,
                               cu->st);
            if (rc != 0) {
                rc = kvs_cuda_k(err, what, rc);
            }

            continue;
        }

        if (u->matrix && kvs_cuda_host_deq(u->t->type)) {
            rc = kvs_cuda_upload_deq(cu, u, dst, deq, deq16, ld->deq, what,
                                     err);
            continue;
        }

        if (!u->matrix && u->t->type != KVS_GGML_F32) {
            rc = kvs_quant_dequantize(u->t->type, u->t->data, vec,
                                      (size_t) u->t->nelem, err);
            if (rc != KVS_OK) {
                (void) kvs_err_prefix(err, "cuda backend: %s", what);
                continue;
            }

            KVS_CUDA_TRY(cudaMemcpyAsync(dst, vec, u->bytes,
                                         cudaMemcpyHostToDevice, cu->st),
                         what);
            continue;
        }

        KVS_CUDA_TRY(cudaMemcpyAsync(dst, u->t->data, u->bytes,
                                     cudaMemcpyHostToDevice, cu->st),
                     what);
    }

failed:

    free(vec);
    free(deq);
    free(deq16);

    return rc;
}


/* u's rows dequantized through the table a chunk at a time (the same f32
 * values the CPU backend computes with), rounded to BF16 and copied to
 * dst.  A pageable cudaMemcpyAsync returns once it has staged its
 * source, so h is free again when it returns. */
static int
kvs_cuda_upload_deq(kvs_cuda_t *cu, const kvs_cuda_up_t *u, void *dst,
    float *f, uint16_t *h, uint64_t chunk, const char *what, kvs_err_t *err)
{
    int                          rc;
    uint64_t                     ne0, done, n, i, row_bytes;
    const uint8_t               *src;
    const kvs_ggml_type_info_t  *info;

    ne0 = u->t->ne[0];
    info = kvs_ggml_type_info(u->t->type);
    row_bytes = ne0 / info->block * info->size;
    src = u->t->data;

    /* chunk is whole rows of the widest such matrix: whole rows here */
    chunk -= chunk % ne0;

    for (done = 0; done < u->t->nelem; done += n) {
        n = u->t->nelem - done < chunk ? u->t->nelem - done : chunk;

        rc = kvs_quant_dequantize(u->t->type, src + done / ne0 * row_bytes,
                                  f, (size_t) n, err);
        if (rc != KVS_OK) {
            return kvs_err_prefix(err, "cuda backend: %s", what);
        }

        for (i = 0; i < n; i++) {
            h[i] = kvs_f32_to_bf16(f[i]);
        }

        KVS_CUDA_TRY(cudaMemcpyAsync((uint16_t *) dst + done, h,
                                     (size_t) n * sizeof(uint16_t),
                                     cudaMemcpyHostToDevice, cu->st),
                     what);
    }

    return KVS_OK;

failed:

    return rc;
}
