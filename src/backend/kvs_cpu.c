/*
 * kvs_cpu: weights, K/V storage and the forward step of the CPU backend
 * (see kvs_cpu.h).  The order of operations follows llama2.c run.c so that
 * stories260K reproduces its reference texts; the matrix products go
 * through one function, kvs_cpu_matmul().
 *
 * Products: each output of our kernel is one 8-lane FMA sum over the
 * row, then a fixed horizontal sum, then the tail in order; that order
 * does not depend on the batch, the thread or the tile, so a token's
 * results are the same alone or batched (stories260K's texts stay byte
 * exact with it).  Non-F32 rows are converted four at a time into the
 * thread's scratch (exact conversions), reused by every token of the
 * step.  From KVS_CPU_BLAS_MIN tokens on, F32 / F16 / BF16 go to sgemm
 * instead (~1.4x on a 512-token prefill); those sums differ from ours in
 * the last bits (~2e-7 relative).  Q8_0 on AVX2 stays quantized: the
 * input is quantized to int8 blocks (float scale) and dotted in int8,
 * for every batch size so that batching still changes nothing.
 *
 * Threads: every heavy part runs as tasks of kv's pool: product tiles of
 * output rows, attention per (token, head), per-token norms, RoPE, K/V
 * writes and SwiGLU; a part too small to pay for waking a worker runs on
 * the caller.  Per-thread scratch (scores, weight rows) sits in kv->act.
 *
 * A step runs layer by layer over the whole batch: every token's K and V
 * of a layer are written to their slots before any token of that layer
 * attends, so a prefill chunk sees its own earlier positions and a decode
 * token the cache, with no special case for either.
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "../base/kvs_buf.h"
#include "../base/kvs_threads.h"
#include "../model/kvs_dtype.h"
#include "../model/kvs_ggml_type.h"
#include "kvs_cpu.h"


#if defined(__x86_64__) && defined(__GNUC__)
#define KVS_CPU_X86  1
#include <immintrin.h>
#else
#define KVS_CPU_X86  0
#endif

/* Output rows per task of a product: small enough that two threads share
 * even stories260K's 64-row matrices, large enough that claiming a task
 * costs nothing next to it. */
#define KVS_CPU_TILE       16

/* Work (multiply-adds, roughly) below which a step's part runs on the
 * caller alone: waking a worker costs more than it saves (stories260K's
 * products), and a worker whose core is taken would hold the caller. */
#define KVS_CPU_PAR_MIN    (1u << 16)

/* From this many tokens on, F32 / F16 / BF16 products go to sgemm on
 * tiles of KVS_CPU_BLAS_TILE rows (dequantized first unless F32): a
 * prefill chunk's products run ~1.4x faster than in our kernel; below
 * it, decode batches, ours is as fast and keeps a token's sums
 * independent of its batch. */
#define KVS_CPU_BLAS_MIN   64
#define KVS_CPU_BLAS_TILE  128

/* OpenBLAS's own; declared here so that any cblas.h will do.  Our pool
 * splits the work, so OpenBLAS must not start threads of its own. */
void openblas_set_num_threads(int n);


/* An activation block quantized for the int8 product. */
typedef struct {
    float    d;
    int8_t   q[32];
} kvs_cpu_q8_t;


/* One forward step's shapes and buffers, shared by its tasks. */
typedef struct {
    const kvs_cpu_model_t  *cm;
    kvs_cpu_kv_t           *kv;
    const kvs_batch_t      *b;
    const kvs_cpu_layer_t  *ly;       /* the current layer */
    float                  *x;        /* [n][e] residual stream */
    float                  *xb;       /* [n][e] normed / projected */
    float                  *q;        /* [n][qd] */
    float                  *k;        /* [n][kd] */
    float                  *v;        /* [n][vd] */
    float                  *att;      /* [n][od] */
    float                  *h1;       /* [n][f] */
    float                  *h3;       /* [n][f] */
    float                  *kc;       /* the layer's K [n_blocks][bt][kd] */
    float                  *vc;       /* the layer's V [n_blocks][bt][vd] */
    float                  *sc;       /* [n_threads][sc_stride] scores */
    float                  *wscratch; /* [n_threads][wscratch_stride]
                                         dequantized weight rows */
    size_t                  sc_stride;
    size_t                  wscratch_stride;
    const float            *norm;     /* kvs_cpu_tok_task: weights or NULL */
    int                     resid;    /* kvs_cpu_tok_task: add xb first */
    int                     simd;     /* AVX2 + FMA + F16C kernels */
    kvs_cpu_q8_t           *xq;       /* [n][wrow / 32] Q8_0 inputs */
    uint32_t                e, f, qd, kd, vd, od;
    float                   eps, scale;
} kvs_cpu_fw_t;

/* Up to three products of one input, split into row tiles. */
typedef struct {
    const float            *x;        /* [n][cols] */
    const kvs_cpu_mat_t    *w[3];     /* NULL when unused */
    float                  *y[3];     /* [n][w->rows] */
    uint32_t                first[5]; /* first task of w[m]; [3] is the
                                         count, [4] a sentinel */
    uint32_t                n;
    uint32_t                tile;     /* rows per task */
    int                     simd;
    float                  *scratch;  /* [n_threads][scratch_stride] */
    size_t                  scratch_stride;
    kvs_cpu_q8_t           *xq;       /* [n][cols / 32] or NULL */
} kvs_cpu_mm_job_t;


static int kvs_cpu_tensor(const kvs_model_t *m, const char *name,
    uint64_t ne0, uint64_t ne1, int optional, const kvs_gguf_tensor_t **out,
    kvs_err_t *err);
static int kvs_cpu_mat(const kvs_model_t *m, const char *name, uint64_t ne0,
    uint64_t ne1, int optional, kvs_cpu_mat_t *out, kvs_err_t *err);
static int kvs_cpu_vec(kvs_cpu_model_t *cm, const char *name, uint64_t ne0,
    int optional, const float **out, kvs_err_t *err);
static void kvs_cpu_model_free_owned(kvs_cpu_model_t *cm);
static int kvs_cpu_simd(void);
static const float *kvs_cpu_row(const kvs_cpu_mat_t *w, uint32_t r,
    float *scratch, int simd);
static void kvs_cpu_mm_rows(float *y, size_t ldy, const float *x,
    uint32_t n, uint32_t cols, const float *const *w, uint32_t nr);
#if KVS_CPU_X86
static void kvs_cpu_mm_rows_avx2(float *y, size_t ldy, const float *x,
    uint32_t n, uint32_t cols, const float *const *w, uint32_t nr);
static void kvs_cpu_row_avx2(const kvs_cpu_mat_t *w, const uint8_t *p,
    float *dst);
static float kvs_cpu_q8_dot_avx2(const uint8_t *p, const kvs_cpu_q8_t *xq,
    uint32_t cols);
#endif
static void kvs_cpu_q8_quant(const float *x, kvs_cpu_q8_t *dst,
    uint32_t cols);
static float kvs_cpu_q8_dot(const uint8_t *p, const kvs_cpu_q8_t *xq,
    uint32_t cols);
static kvs_threads_t *kvs_cpu_pool(const kvs_cpu_fw_t *fw, double work);
static void kvs_cpu_mm_task(void *arg, uint32_t task, uint32_t thread);
static void kvs_cpu_matmul(kvs_cpu_fw_t *fw, const float *x, uint32_t n,
    const kvs_cpu_mat_t *w0, float *y0, const kvs_cpu_mat_t *w1, float *y1,
    const kvs_cpu_mat_t *w2, float *y2);
static void kvs_cpu_rmsnorm(float *o, const float *x, const float *w,
    uint32_t size, float eps);
static void kvs_cpu_tok_task(void *arg, uint32_t i, uint32_t thread);
static void kvs_cpu_qkv_task(void *arg, uint32_t i, uint32_t thread);
static void kvs_cpu_attn_task(void *arg, uint32_t task, uint32_t thread);
static void kvs_cpu_swiglu_task(void *arg, uint32_t i, uint32_t thread);
static int kvs_cpu_check_batch(const kvs_cpu_model_t *cm,
    const kvs_cpu_kv_t *kv, const kvs_batch_t *b, uint32_t *max_ctx,
    kvs_err_t *err);


/* A tensor, checked against the [ne0, ne1] shape compute expects; ne1 ==
 * 0 means a vector.  NULL and KVS_OK for a missing optional tensor. */
static int
kvs_cpu_tensor(const kvs_model_t *m, const char *name, uint64_t ne0,
    uint64_t ne1, int optional, const kvs_gguf_tensor_t **out,
    kvs_err_t *err)
{
    uint64_t                  want;
    const kvs_gguf_tensor_t  *t;

    *out = NULL;

    t = kvs_gguf_find_tensor(m->gguf, name);
    if (t == NULL) {
        if (optional) {
            return KVS_OK;
        }

        return kvs_err_set(err, KVS_ENOTFOUND, "cpu backend: tensor %s "
                           "is missing", name);
    }

    want = ne1 == 0 ? ne0 : ne0 * ne1;

    if (t->ne[0] != ne0 || t->nelem != want) {
        return kvs_err_set(err, KVS_EFORMAT, "cpu backend: tensor %s has "
                           "%" PRIu64 " x %" PRIu64 " elements, expected "
                           "%" PRIu64 " x %" PRIu64, name, t->ne[0],
                           t->ne[0] ? t->nelem / t->ne[0] : 0, ne0,
                           ne1 == 0 ? 1 : ne1);
    }

    *out = t;

    return KVS_OK;
}


/* A weight matrix of ne1 rows of ne0 elements, left in the mapping. */
static int
kvs_cpu_mat(const kvs_model_t *m, const char *name, uint64_t ne0,
    uint64_t ne1, int optional, kvs_cpu_mat_t *out, kvs_err_t *err)
{
    int                       rc;
    size_t                    row;
    const kvs_gguf_tensor_t  *t;

    memset(out, 0, sizeof(kvs_cpu_mat_t));

    rc = kvs_cpu_tensor(m, name, ne0, ne1, optional, &t, err);
    if (rc != KVS_OK || t == NULL) {
        return rc;
    }

    switch (t->type) {
    case KVS_GGML_F32:
        row = ne0 * 4;
        break;
    case KVS_GGML_F16:
    case KVS_GGML_BF16:
        row = ne0 * 2;
        break;
    case KVS_GGML_Q8_0:
        if (ne0 % KVS_Q8_0_BLOCK != 0) {
            return kvs_err_set(err, KVS_EFORMAT, "cpu backend: tensor %s is "
                               "Q8_0 with rows of %" PRIu64 " elements, not "
                               "a multiple of %d", name, ne0,
                               KVS_Q8_0_BLOCK);
        }
        row = ne0 / KVS_Q8_0_BLOCK * KVS_Q8_0_BYTES;
        break;
    default:
        return kvs_err_set(err, KVS_EUNSUPPORTED, "cpu backend: tensor %s "
                           "is %s; F32, F16, BF16 and Q8_0 are supported",
                           name, kvs_ggml_type_name(t->type));
    }

    /* the reader checked nbytes against the type; this guards the rows
     * this file will index against a reader that did not */
    if (t->nbytes < row * ne1) {
        return kvs_err_set(err, KVS_EFORMAT, "cpu backend: tensor %s holds "
                           "%" PRIu64 " bytes, %zu expected", name,
                           t->nbytes, row * ne1);
    }

    out->data = t->data;
    out->row_bytes = row;
    out->type = t->type;
    out->rows = (uint32_t) ne1;
    out->cols = (uint32_t) ne0;

    return KVS_OK;
}


/* A vector's floats: F32 in the mapping, or F16 / BF16 converted into a
 * copy that cm owns. */
static int
kvs_cpu_vec(kvs_cpu_model_t *cm, const char *name, uint64_t ne0,
    int optional, const float **out, kvs_err_t *err)
{
    int                       rc;
    float                    *f, **owned;
    uint64_t                  i;
    const uint16_t           *h;
    const kvs_gguf_tensor_t  *t;

    *out = NULL;

    rc = kvs_cpu_tensor(cm->model, name, ne0, 0, optional, &t, err);
    if (rc != KVS_OK || t == NULL) {
        return rc;
    }

    if (t->type == KVS_GGML_F32) {
        *out = t->data;
        return KVS_OK;
    }

    if (t->type != KVS_GGML_F16 && t->type != KVS_GGML_BF16) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "cpu backend: tensor %s "
                           "is %s; vectors must be F32, F16 or BF16", name,
                           kvs_ggml_type_name(t->type));
    }

    owned = realloc(cm->owned, (cm->n_owned + 1) * sizeof(float *));
    if (owned == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cpu backend: out of memory");
    }

    cm->owned = owned;

    f = malloc(ne0 * sizeof(float));
    if (f == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cpu backend: out of memory");
    }

    h = t->data;

    for (i = 0; i < ne0; i++) {
        f[i] = t->type == KVS_GGML_F16 ? kvs_f16_to_f32(h[i])
                                       : kvs_bf16_to_f32(h[i]);
    }

    cm->owned[cm->n_owned++] = f;
    *out = f;

    return KVS_OK;
}


static void
kvs_cpu_model_free_owned(kvs_cpu_model_t *cm)
{
    uint32_t  i;

    for (i = 0; i < cm->n_owned; i++) {
        free(cm->owned[i]);
    }

    free(cm->owned);
    cm->owned = NULL;
    cm->n_owned = 0;
}


int
kvs_cpu_model_new(kvs_cpu_model_t **out, const kvs_model_t *m,
    kvs_err_t *err)
{
    int                       rc;
    char                      name[64];
    uint32_t                  l, e, f, q, kd, vd, o;
    const float              *freqs;
    kvs_cpu_model_t          *cm;
    kvs_cpu_layer_t          *ly;
    const kvs_hparams_t      *hp;

    *out = NULL;
    hp = &m->hp;

    cm = calloc(1, sizeof(kvs_cpu_model_t));
    if (cm == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cpu backend: out of memory");
    }

    cm->model = m;
    cm->hp = *hp;
    cm->rope_pairing = strcmp(hp->arch, "qwen2") == 0 ? KVS_ROPE_NEOX
                                                      : KVS_ROPE_NORM;

    cm->layers = calloc(hp->n_layer, sizeof(kvs_cpu_layer_t));
    if (cm->layers == NULL) {
        free(cm);
        return kvs_err_set(err, KVS_ENOMEM, "cpu backend: out of memory");
    }

    e = hp->n_embd;
    f = hp->n_ff;
    q = hp->n_head * hp->head_dim_k;
    kd = hp->n_head_kv * hp->head_dim_k;
    vd = hp->n_head_kv * hp->head_dim_v;
    o = hp->n_head * hp->head_dim_v;

#define KVS_CPU_M(field, nm, ne0, ne1, opt)                                  \
    rc = kvs_cpu_mat(m, nm, ne0, ne1, opt, &(field), err);                   \
    if (rc != KVS_OK) {                                                      \
        goto failed;                                                         \
    }

#define KVS_CPU_V(field, nm, ne0, opt)                                       \
    rc = kvs_cpu_vec(cm, nm, ne0, opt, &(field), err);                       \
    if (rc != KVS_OK) {                                                      \
        goto failed;                                                         \
    }

    KVS_CPU_M(cm->tok_embd, "token_embd.weight", e, hp->n_vocab, 0);
    KVS_CPU_V(cm->out_norm, "output_norm.weight", e, 0);
    KVS_CPU_M(cm->output, "output.weight", e, hp->n_vocab, 1);

    if (cm->output.data == NULL) {
        cm->output = cm->tok_embd;
    }

    for (l = 0; l < hp->n_layer; l++) {
        ly = &cm->layers[l];

#define KVS_CPU_LM(field, suffix, ne0, ne1)                                  \
    snprintf(name, sizeof(name), "blk.%" PRIu32 ".%s", l, suffix);          \
    KVS_CPU_M(ly->field, name, ne0, ne1, 0)

#define KVS_CPU_LV(field, suffix, ne0, opt)                                  \
    snprintf(name, sizeof(name), "blk.%" PRIu32 ".%s", l, suffix);          \
    KVS_CPU_V(ly->field, name, ne0, opt)

        KVS_CPU_LV(attn_norm, "attn_norm.weight", e, 0);
        KVS_CPU_LM(wq, "attn_q.weight", e, q);
        KVS_CPU_LM(wk, "attn_k.weight", e, kd);
        KVS_CPU_LM(wv, "attn_v.weight", e, vd);
        KVS_CPU_LV(bq, "attn_q.bias", q, 1);
        KVS_CPU_LV(bk, "attn_k.bias", kd, 1);
        KVS_CPU_LV(bv, "attn_v.bias", vd, 1);
        KVS_CPU_LM(wo, "attn_output.weight", o, e);
        KVS_CPU_LV(ffn_norm, "ffn_norm.weight", e, 0);
        KVS_CPU_LM(w1, "ffn_gate.weight", e, f);
        KVS_CPU_LM(w2, "ffn_down.weight", f, e);
        KVS_CPU_LM(w3, "ffn_up.weight", e, f);

#undef KVS_CPU_LM
#undef KVS_CPU_LV
    }

    /* llama.cpp stores Llama 3.1 frequency bands as this tensor */
    KVS_CPU_V(freqs, "rope_freqs.weight", hp->n_rot / 2, 1);

#undef KVS_CPU_M
#undef KVS_CPU_V

    rc = kvs_rope_init(&cm->rope, hp, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    if (freqs != NULL) {
        rc = kvs_rope_set_freq_factors(&cm->rope, freqs, hp->n_rot / 2, err);
        if (rc != KVS_OK) {
            kvs_rope_free(&cm->rope);
            goto failed;
        }
    }

    *out = cm;

    return KVS_OK;

failed:

    kvs_cpu_model_free_owned(cm);
    free(cm->layers);
    free(cm);

    return rc;
}


void
kvs_cpu_model_free(kvs_cpu_model_t *cm)
{
    if (cm == NULL) {
        return;
    }

    kvs_rope_free(&cm->rope);
    kvs_cpu_model_free_owned(cm);
    free(cm->layers);
    free(cm);
}


int
kvs_cpu_kv_new(kvs_cpu_kv_t **out, const kvs_cpu_model_t *cm,
    uint32_t n_blocks, uint32_t block_tokens, kvs_err_t *err)
{
    size_t         slots, nk, nv;
    kvs_cpu_kv_t  *kv;

    *out = NULL;

    if (n_blocks == 0 || block_tokens == 0) {
        return kvs_err_set(err, KVS_EINVAL, "cpu kv: %" PRIu32 " blocks "
                           "of %" PRIu32 " tokens", n_blocks, block_tokens);
    }

    kv = calloc(1, sizeof(kvs_cpu_kv_t));
    if (kv == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cpu kv: out of memory");
    }

    /* idempotent; here rather than at load so that nothing runs then */
    openblas_set_num_threads(1);

    kv->n_layer = cm->hp.n_layer;
    kv->n_blocks = n_blocks;
    kv->block_tokens = block_tokens;
    kv->k_width = cm->hp.n_head_kv * cm->hp.head_dim_k;
    kv->v_width = cm->hp.n_head_kv * cm->hp.head_dim_v;

    /* slots across all layers; each factor is a uint32_t, so check every
     * product against SIZE_MAX / sizeof(float) before taking it */
    slots = (size_t) n_blocks * block_tokens;

    if (slots / block_tokens != n_blocks
        || slots > SIZE_MAX / sizeof(float) / kv->n_layer
        || slots * kv->n_layer > SIZE_MAX / sizeof(float) / kv->k_width
        || slots * kv->n_layer > SIZE_MAX / sizeof(float) / kv->v_width)
    {
        free(kv);
        return kvs_err_set(err, KVS_ERANGE, "cpu kv: %" PRIu32 " blocks "
                           "of %" PRIu32 " tokens overflow the address "
                           "space", n_blocks, block_tokens);
    }

    nk = slots * kv->n_layer * kv->k_width;
    nv = slots * kv->n_layer * kv->v_width;

    kv->k = calloc(nk, sizeof(float));
    kv->v = calloc(nv, sizeof(float));

    if (kv->k == NULL || kv->v == NULL) {
        kvs_cpu_kv_free(kv);
        return kvs_err_set(err, KVS_ENOMEM, "cpu kv: out of memory for "
                           "%zu bytes", (nk + nv) * sizeof(float));
    }

    *out = kv;

    return KVS_OK;
}


void
kvs_cpu_kv_free(kvs_cpu_kv_t *kv)
{
    if (kv == NULL) {
        return;
    }

    kvs_threads_free(kv->threads);
    free(kv->k);
    free(kv->v);
    free(kv->act);
    free(kv);
}


int
kvs_cpu_kv_set_threads(kvs_cpu_kv_t *kv, unsigned n, kvs_err_t *err)
{
    int             rc;
    kvs_threads_t  *tp;

    if (n == kvs_threads_count(kv->threads)) {
        return KVS_OK;
    }

    tp = NULL;

    if (n != 1) {
        rc = kvs_threads_new(&tp, n, err);
        if (rc != KVS_OK) {
            (void) kvs_err_prefix(err, "cpu kv");
            return rc;
        }
    }

    kvs_threads_free(kv->threads);
    kv->threads = tp;

    return KVS_OK;
}


/* Whether this CPU runs the AVX2 + FMA + F16C kernels; the build stays
 * generic x86-64 and each kernel carries its own target attribute.
 * KVSERVE_CPU_SIMD=0 in the environment selects the portable kernels
 * (to compare them, or to rule the AVX2 ones out). */
static int
kvs_cpu_simd(void)
{
#if KVS_CPU_X86
    const char  *env;

    env = getenv("KVSERVE_CPU_SIMD");
    if (env != NULL && strcmp(env, "0") == 0) {
        return 0;
    }

    __builtin_cpu_init();

    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
           && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}


/* Row r of w as floats: in place for F32, else dequantized into
 * scratch[w->cols].  The AVX2 twin converts the same values (every
 * conversion here is exact, or one float product for Q8_0), so which one
 * runs never changes a result. */
static const float *
kvs_cpu_row(const kvs_cpu_mat_t *w, uint32_t r, float *scratch, int simd)
{
    uint32_t         j;
    const uint8_t   *p;
    const uint16_t  *h;

    p = (const uint8_t *) w->data + (size_t) r * w->row_bytes;

    if (w->type == KVS_GGML_F32) {
        return (const float *) p;
    }

#if KVS_CPU_X86
    if (simd) {
        kvs_cpu_row_avx2(w, p, scratch);
        return scratch;
    }
#endif

    switch (w->type) {
    case KVS_GGML_F16:
        h = (const uint16_t *) p;
        for (j = 0; j < w->cols; j++) {
            scratch[j] = kvs_f16_to_f32(h[j]);
        }
        break;

    case KVS_GGML_BF16:
        h = (const uint16_t *) p;
        for (j = 0; j < w->cols; j++) {
            scratch[j] = kvs_bf16_to_f32(h[j]);
        }
        break;

    default: /* Q8_0 */
        kvs_q8_0_dequantize(p, scratch, w->cols);
        break;
    }

    return scratch;
}


/*
 * y[i][r] = x[i] . w[r] for the nr (1..4) rows w[0..nr) and every token
 * i < n, in run.c's order: one float sum from j = 0 up.  The portable
 * path, for CPUs without AVX2/FMA.
 */
static void
kvs_cpu_mm_rows(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *const *w, uint32_t nr)
{
    uint32_t      i, r, j;
    float         s;
    const float  *xr, *wr;

    for (r = 0; r < nr; r++) {
        wr = w[r];

        for (i = 0; i < n; i++) {
            xr = x + (size_t) i * cols;
            s = 0.0f;

            for (j = 0; j < cols; j++) {
                s += wr[j] * xr[j];
            }

            y[(size_t) i * ldy + r] = s;
        }
    }
}


#if KVS_CPU_X86

/* Lanes of a summed in a fixed order: (0+4, 1+5, 2+6, 3+7), then pairs. */
__attribute__((target("avx2,fma"))) static inline float
kvs_cpu_hsum(__m256 a)
{
    __m128  s;

    s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));

    return _mm_cvtss_f32(s);
}


/*
 * The AVX2 product of kvs_cpu_mm_rows(): each output keeps one 8-lane
 * FMA accumulator over j in steps of 8, then kvs_cpu_hsum(), then the
 * tail of cols % 8 in order.  That order is the same for every output
 * whatever n, nr or the thread is, so a token's results do not depend on
 * its batch.  Two tokens by up to four rows per pass: eight independent
 * accumulators hide the FMA latency, and each load feeds several FMAs.
 */
__attribute__((target("avx2,fma"))) static void
kvs_cpu_mm_rows_avx2(float *y, size_t ldy, const float *x, uint32_t n,
    uint32_t cols, const float *const *w, uint32_t nr)
{
    float         t0, t1;
    uint32_t      i, r, j, c8;
    __m256        a0, a1, a2, a3, b0, b1, b2, b3, x0, x1, wv;
    const float  *w0, *w1, *w2, *w3, *p0, *p1;

    c8 = cols & ~7u;
    w0 = w[0];
    w1 = w[nr > 1 ? 1 : 0];
    w2 = w[nr > 2 ? 2 : 0];
    w3 = w[nr > 3 ? 3 : 0];

    for (i = 0; i + 1 < n; i += 2) {
        p0 = x + (size_t) i * cols;
        p1 = p0 + cols;
        a0 = a1 = a2 = a3 = _mm256_setzero_ps();
        b0 = b1 = b2 = b3 = _mm256_setzero_ps();

        for (j = 0; j < c8; j += 8) {
            x0 = _mm256_loadu_ps(p0 + j);
            x1 = _mm256_loadu_ps(p1 + j);
            wv = _mm256_loadu_ps(w0 + j);
            a0 = _mm256_fmadd_ps(wv, x0, a0);
            b0 = _mm256_fmadd_ps(wv, x1, b0);
            wv = _mm256_loadu_ps(w1 + j);
            a1 = _mm256_fmadd_ps(wv, x0, a1);
            b1 = _mm256_fmadd_ps(wv, x1, b1);
            wv = _mm256_loadu_ps(w2 + j);
            a2 = _mm256_fmadd_ps(wv, x0, a2);
            b2 = _mm256_fmadd_ps(wv, x1, b2);
            wv = _mm256_loadu_ps(w3 + j);
            a3 = _mm256_fmadd_ps(wv, x0, a3);
            b3 = _mm256_fmadd_ps(wv, x1, b3);
        }

        {
            __m256  acc[2][4] = { { a0, a1, a2, a3 }, { b0, b1, b2, b3 } };

            for (r = 0; r < nr; r++) {
                t0 = kvs_cpu_hsum(acc[0][r]);
                t1 = kvs_cpu_hsum(acc[1][r]);

                for (j = c8; j < cols; j++) {
                    t0 += w[r][j] * p0[j];
                    t1 += w[r][j] * p1[j];
                }

                y[(size_t) i * ldy + r] = t0;
                y[(size_t) (i + 1) * ldy + r] = t1;
            }
        }
    }

    if (i < n) {
        p0 = x + (size_t) i * cols;
        a0 = a1 = a2 = a3 = _mm256_setzero_ps();

        for (j = 0; j < c8; j += 8) {
            x0 = _mm256_loadu_ps(p0 + j);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + j), x0, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + j), x0, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + j), x0, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + j), x0, a3);
        }

        {
            __m256  acc[4] = { a0, a1, a2, a3 };

            for (r = 0; r < nr; r++) {
                t0 = kvs_cpu_hsum(acc[r]);

                for (j = c8; j < cols; j++) {
                    t0 += w[r][j] * p0[j];
                }

                y[(size_t) i * ldy + r] = t0;
            }
        }
    }
}


/* Q8_0 row p[cols] . quantized activation xq: int8 products summed in
 * int32 per block, scaled and accumulated in floats. */
__attribute__((target("avx2,fma,f16c"))) static float
kvs_cpu_q8_dot_avx2(const uint8_t *p, const kvs_cpu_q8_t *xq, uint32_t cols)
{
    uint16_t  dh;
    uint32_t  b;
    __m256    acc;
    __m256i   qw, qx, aw, sx, ones;

    acc = _mm256_setzero_ps();
    ones = _mm256_set1_epi16(1);

    for (b = 0; b < cols / KVS_Q8_0_BLOCK; b++) {
        memcpy(&dh, p, 2);
        qw = _mm256_loadu_si256((const __m256i *) (p + 2));
        qx = _mm256_loadu_si256((const __m256i *) xq[b].q);
        aw = _mm256_sign_epi8(qw, qw);
        sx = _mm256_sign_epi8(qx, qw);
        qx = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(dh) * xq[b].d),
                              _mm256_cvtepi32_ps(qx), acc);
        p += KVS_Q8_0_BYTES;
    }

    return kvs_cpu_hsum(acc);
}


/* kvs_cpu_row()'s conversions, 8 or 32 values at a time. */
__attribute__((target("avx2,fma,f16c"))) static void
kvs_cpu_row_avx2(const kvs_cpu_mat_t *w, const uint8_t *p, float *dst)
{
    float            d;
    uint16_t         dh;
    uint32_t         j, b, c8;
    __m256           dv;
    __m256i          q;
    const uint16_t  *h;

    h = (const uint16_t *) p;
    c8 = w->cols & ~7u;

    switch (w->type) {
    case KVS_GGML_F16:
        for (j = 0; j < c8; j += 8) {
            _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *) (h + j))));
        }
        for (j = c8; j < w->cols; j++) {
            dst[j] = kvs_f16_to_f32(h[j]);
        }
        return;

    case KVS_GGML_BF16:
        for (j = 0; j < c8; j += 8) {
            q = _mm256_cvtepu16_epi32(
                _mm_loadu_si128((const __m128i *) (h + j)));
            _mm256_storeu_ps(dst + j,
                             _mm256_castsi256_ps(_mm256_slli_epi32(q, 16)));
        }
        for (j = c8; j < w->cols; j++) {
            dst[j] = kvs_bf16_to_f32(h[j]);
        }
        return;

    default: /* Q8_0: cols is a multiple of 32 */
        for (b = 0; b < w->cols / KVS_Q8_0_BLOCK; b++) {
            memcpy(&dh, p, 2);
            d = kvs_f16_to_f32(dh);
            dv = _mm256_set1_ps(d);

            for (j = 0; j < KVS_Q8_0_BLOCK; j += 8) {
                q = _mm256_cvtepi8_epi32(
                    _mm_loadl_epi64((const __m128i *) (p + 2 + j)));
                _mm256_storeu_ps(dst + j,
                                 _mm256_mul_ps(dv, _mm256_cvtepi32_ps(q)));
            }

            p += KVS_Q8_0_BYTES;
            dst += KVS_Q8_0_BLOCK;
        }
        return;
    }
}

#endif /* KVS_CPU_X86 */


/* x[cols] as Q8_0-like blocks with a float scale: dst[cols / 32].  The
 * same on every CPU, so a Q8_0 model's results do not depend on AVX2. */
static void
kvs_cpu_q8_quant(const float *x, kvs_cpu_q8_t *dst, uint32_t cols)
{
    float     amax, d, id;
    uint32_t  b, j;

    for (b = 0; b < cols / KVS_Q8_0_BLOCK; b++) {
        amax = 0.0f;

        for (j = 0; j < KVS_Q8_0_BLOCK; j++) {
            amax = fmaxf(amax, fabsf(x[j]));
        }

        d = amax / 127.0f;
        id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = d;

        for (j = 0; j < KVS_Q8_0_BLOCK; j++) {
            dst[b].q[j] = (int8_t) lrintf(x[j] * id);
        }

        x += KVS_Q8_0_BLOCK;
    }
}


/* Q8_0 row p[cols] . xq without AVX2: the same int8 block sums; only
 * the float accumulation order differs from the AVX2 kernel. */
static float
kvs_cpu_q8_dot(const uint8_t *p, const kvs_cpu_q8_t *xq, uint32_t cols)
{
    float          acc;
    int32_t        sum;
    uint16_t       dh;
    uint32_t       b, j;
    const int8_t  *qw;

    acc = 0.0f;

    for (b = 0; b < cols / KVS_Q8_0_BLOCK; b++) {
        memcpy(&dh, p, 2);
        qw = (const int8_t *) (p + 2);
        sum = 0;

        for (j = 0; j < KVS_Q8_0_BLOCK; j++) {
            sum += (int32_t) qw[j] * xq[b].q[j];
        }

        acc += kvs_f16_to_f32(dh) * xq[b].d * (float) sum;
        p += KVS_Q8_0_BYTES;
    }

    return acc;
}


/* kv's pool when work is worth splitting, else NULL: the caller alone. */
static kvs_threads_t *
kvs_cpu_pool(const kvs_cpu_fw_t *fw, double work)
{
    return work < KVS_CPU_PAR_MIN ? NULL : fw->kv->threads;
}


/*
 * One task of a product: rows [r0, r0 + KVS_CPU_TILE) of one of the job's
 * matrices, four at a time, dequantized (if not F32) into the thread's
 * scratch, for every token.
 */
static void
kvs_cpu_mm_task(void *arg, uint32_t task, uint32_t thread)
{
    float                *s;
    uint32_t              m, r0, r, nr, k;
    const float          *w[4], *wt;
    kvs_cpu_mm_job_t     *job;
    const kvs_cpu_mat_t  *mat;

    job = arg;

    for (m = 0; task >= job->first[m + 1]; m++) {
        /* find the matrix this task's rows belong to */
    }

    mat = job->w[m];
    r0 = (task - job->first[m]) * job->tile;
    s = job->scratch + (size_t) thread * job->scratch_stride;

    if (job->xq != NULL && mat->type == KVS_GGML_Q8_0) {
        uint32_t             i;
        const uint8_t       *wq;
        const kvs_cpu_q8_t  *xq;

        for (r = r0; r < r0 + job->tile && r < mat->rows; r++) {
            wq = (const uint8_t *) mat->data + (size_t) r * mat->row_bytes;

            for (i = 0; i < job->n; i++) {
                xq = job->xq + (size_t) i * (mat->cols / KVS_Q8_0_BLOCK);
#if KVS_CPU_X86
                if (job->simd) {
                    job->y[m][(size_t) i * mat->rows + r] =
                        kvs_cpu_q8_dot_avx2(wq, xq, mat->cols);
                    continue;
                }
#endif
                job->y[m][(size_t) i * mat->rows + r] =
                    kvs_cpu_q8_dot(wq, xq, mat->cols);
            }
        }
        return;
    }

    if (job->tile == KVS_CPU_BLAS_TILE) {
        nr = mat->rows - r0 < job->tile ? mat->rows - r0 : job->tile;

        if (mat->type == KVS_GGML_F32) {
            wt = (const float *) ((const uint8_t *) mat->data
                                  + (size_t) r0 * mat->row_bytes);
        } else {
            for (k = 0; k < nr; k++) {
                (void) kvs_cpu_row(mat, r0 + k, s + (size_t) k * mat->cols,
                                   job->simd);
            }
            wt = s;
        }

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int) job->n,
                    (int) nr, (int) mat->cols, 1.0f, job->x, (int) mat->cols,
                    wt, (int) mat->cols, 0.0f, job->y[m] + r0,
                    (int) mat->rows);
        return;
    }

    for (r = r0; r < r0 + job->tile && r < mat->rows; r += 4) {
        nr = mat->rows - r < 4 ? mat->rows - r : 4;

        for (k = 0; k < nr; k++) {
            w[k] = kvs_cpu_row(mat, r + k, s + (size_t) k * mat->cols,
                               job->simd);
        }

#if KVS_CPU_X86
        if (job->simd) {
            kvs_cpu_mm_rows_avx2(job->y[m] + r, mat->rows, job->x, job->n,
                                 mat->cols, w, nr);
            continue;
        }
#endif

        kvs_cpu_mm_rows(job->y[m] + r, mat->rows, job->x, job->n, mat->cols,
                        w, nr);
    }
}


/*
 * y_m[n][rows_m] = x[n][cols] . w_m[rows_m][cols]^T for the n_w (1..3)
 * matrices of one input (q, k, v; gate and up), as one run of the pool:
 * tiles of KVS_CPU_TILE output rows are the tasks, so the threads split
 * the weights and each weight row is read (and dequantized) once per step
 * whatever n is.
 */
static void
kvs_cpu_matmul(kvs_cpu_fw_t *fw, const float *x, uint32_t n,
    const kvs_cpu_mat_t *w0, float *y0, const kvs_cpu_mat_t *w1, float *y1,
    const kvs_cpu_mat_t *w2, float *y2)
{
    uint32_t           m, i;
    kvs_cpu_mm_job_t   job;

    job.x = x;
    job.n = n;
    job.simd = fw->simd;
    job.scratch = fw->wscratch;
    job.scratch_stride = fw->wscratch_stride;
    job.w[0] = w0;
    job.w[1] = w1;
    job.w[2] = w2;
    job.y[0] = y0;
    job.y[1] = y1;
    job.y[2] = y2;
    job.first[0] = 0;
    job.xq = NULL;
    job.tile = n >= KVS_CPU_BLAS_MIN ? KVS_CPU_BLAS_TILE : KVS_CPU_TILE;

    /* Q8_0 stays quantized: the input is quantized once here, for every
     * n, so a token's sums do not depend on its batch */
    for (m = 0; m < 3; m++) {
        if (job.w[m] != NULL && job.w[m]->type == KVS_GGML_Q8_0) {
            job.xq = fw->xq;
        }
    }

    for (i = 0; job.xq != NULL && i < n; i++) {
        kvs_cpu_q8_quant(x + (size_t) i * w0->cols,
                         job.xq + (size_t) i * (w0->cols / KVS_Q8_0_BLOCK),
                         w0->cols);
    }

    for (m = 0; m < 3; m++) {
        job.first[m + 1] = job.first[m]
            + (job.w[m] == NULL ? 0
               : (job.w[m]->rows + job.tile - 1) / job.tile);
    }

    /* a sentinel past the last task ends the search in kvs_cpu_mm_task */
    job.first[4] = UINT32_MAX;

    kvs_threads_run(kvs_cpu_pool(fw, (double) n * w0->cols
                                     * (w0->rows + (w1 ? w1->rows : 0)
                                        + (w2 ? w2->rows : 0))),
                    kvs_cpu_mm_task, &job, job.first[3]);
}


/* o = w * x / sqrt(mean(x^2) + eps), as run.c rounds it (float sums). */
static void
kvs_cpu_rmsnorm(float *o, const float *x, const float *w, uint32_t size,
    float eps)
{
    uint32_t  j;
    float     ss;

    ss = 0.0f;

    for (j = 0; j < size; j++) {
        ss += x[j] * x[j];
    }

    ss = 1.0f / sqrtf(ss / (float) size + eps);

    for (j = 0; j < size; j++) {
        o[j] = w[j] * (ss * x[j]);
    }
}


/* Per token i: x[i] += xb[i] when fw->resid, then xb[i] = the norm of
 * x[i] with fw->norm when set. */
static void
kvs_cpu_tok_task(void *arg, uint32_t i, uint32_t thread)
{
    float         *x, *xb;
    uint32_t       j, e;
    kvs_cpu_fw_t  *fw;

    fw = arg;
    e = fw->e;
    x = fw->x + (size_t) i * e;
    xb = fw->xb + (size_t) i * e;

    if (fw->resid) {
        for (j = 0; j < e; j++) {
            x[j] += xb[j];
        }
    }

    if (fw->norm != NULL) {
        kvs_cpu_rmsnorm(xb, x, fw->norm, e, fw->eps);
    }
}


/* Per token i: biases, RoPE, and its K/V written to its slot. */
static void
kvs_cpu_qkv_task(void *arg, uint32_t i, uint32_t thread)
{
    float                  *q, *k, *v;
    size_t                  slot;
    uint32_t                j, bt;
    kvs_cpu_fw_t           *fw;
    const kvs_cpu_layer_t  *ly;
    const kvs_batch_tok_t  *tk;
    const kvs_hparams_t    *hp;

    fw = arg;
    ly = fw->ly;
    hp = &fw->cm->hp;
    tk = &fw->b->toks[i];
    bt = fw->kv->block_tokens;
    q = fw->q + (size_t) i * fw->qd;
    k = fw->k + (size_t) i * fw->kd;
    v = fw->v + (size_t) i * fw->vd;

    for (j = 0; ly->bq != NULL && j < fw->qd; j++) {
        q[j] += ly->bq[j];
    }

    for (j = 0; ly->bk != NULL && j < fw->kd; j++) {
        k[j] += ly->bk[j];
    }

    for (j = 0; ly->bv != NULL && j < fw->vd; j++) {
        v[j] += ly->bv[j];
    }

    (void) kvs_rope_apply(&fw->cm->rope, q, (int) hp->n_head,
                          (int) hp->head_dim_k, (int32_t) tk->pos,
                          fw->cm->rope_pairing);
    (void) kvs_rope_apply(&fw->cm->rope, k, (int) hp->n_head_kv,
                          (int) hp->head_dim_k, (int32_t) tk->pos,
                          fw->cm->rope_pairing);

    slot = (size_t) tk->table->blocks[tk->pos / bt] * bt + tk->pos % bt;
    memcpy(fw->kc + slot * fw->kd, k, fw->kd * sizeof(float));
    memcpy(fw->vc + slot * fw->vd, v, fw->vd * sizeof(float));
}


/* Task i * n_head + h: head h of token i attends over positions 0..pos
 * of its sequence, in run.c's order; scores in the thread's scratch. */
static void
kvs_cpu_attn_task(void *arg, uint32_t task, uint32_t thread)
{
    float                  *qh, *ah, *sc, mx, sum, z;
    uint32_t                i, h, t, j, bt, blk, hdk, hdv, kvh;
    kvs_cpu_fw_t           *fw;
    const float            *kt, *vt;
    const kvs_batch_tok_t  *tk;
    const kvs_hparams_t    *hp;

    fw = arg;
    hp = &fw->cm->hp;
    i = task / hp->n_head;
    h = task % hp->n_head;
    tk = &fw->b->toks[i];
    bt = fw->kv->block_tokens;
    hdk = hp->head_dim_k;
    hdv = hp->head_dim_v;
    kvh = h / (hp->n_head / hp->n_head_kv);
    qh = fw->q + (size_t) i * fw->qd + (size_t) h * hdk;
    ah = fw->att + (size_t) i * fw->od + (size_t) h * hdv;
    sc = fw->sc + (size_t) thread * fw->sc_stride;
    mx = -INFINITY;

    for (t = 0; t <= tk->pos; t++) {
        blk = tk->table->blocks[t / bt];
        kt = fw->kc + ((size_t) blk * bt + t % bt) * fw->kd
             + (size_t) kvh * hdk;
        z = 0.0f;

        for (j = 0; j < hdk; j++) {
            z += qh[j] * kt[j];
        }

        sc[t] = z * fw->scale;

        if (sc[t] > mx) {
            mx = sc[t];
        }
    }

    sum = 0.0f;

    for (t = 0; t <= tk->pos; t++) {
        sc[t] = expf(sc[t] - mx);
        sum += sc[t];
    }

    memset(ah, 0, hdv * sizeof(float));

    for (t = 0; t <= tk->pos; t++) {
        blk = tk->table->blocks[t / bt];
        vt = fw->vc + ((size_t) blk * bt + t % bt) * fw->vd
             + (size_t) kvh * hdv;
        z = sc[t] / sum;

        for (j = 0; j < hdv; j++) {
            ah[j] += z * vt[j];
        }
    }
}


/* Per token i: h1[i] = silu(h1[i]) * h3[i]. */
static void
kvs_cpu_swiglu_task(void *arg, uint32_t i, uint32_t thread)
{
    float         *h1, *h3, z;
    uint32_t       j;
    kvs_cpu_fw_t  *fw;

    fw = arg;
    h1 = fw->h1 + (size_t) i * fw->f;
    h3 = fw->h3 + (size_t) i * fw->f;

    for (j = 0; j < fw->f; j++) {
        z = h1[j];
        h1[j] = z * (1.0f / (1.0f + expf(-z))) * h3[j];
    }
}


/* Every entry checked before anything is written; *max_ctx is the
 * longest attention span, pos + 1, for sizing the score scratch. */
static int
kvs_cpu_check_batch(const kvs_cpu_model_t *cm, const kvs_cpu_kv_t *kv,
    const kvs_batch_t *b, uint32_t *max_ctx, kvs_err_t *err)
{
    uint32_t               i, j, nb;
    const kvs_batch_tok_t *t;

    *max_ctx = 0;

    if (b == NULL || b->toks == NULL || b->n == 0) {
        return kvs_err_set(err, KVS_EINVAL, "cpu forward: empty batch");
    }

    for (i = 0; i < b->n; i++) {
        t = &b->toks[i];

        if (t->token < 0 || (uint32_t) t->token >= cm->hp.n_vocab) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %" PRIu32
                               ": token %" PRId32 " outside the vocabulary "
                               "of %" PRIu32, i, t->token, cm->hp.n_vocab);
        }

        if (t->table == NULL) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %" PRIu32
                               " has no block table", i);
        }

        if (t->pos >= t->table->n_tokens || t->pos > INT32_MAX) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %" PRIu32
                               ": position %" PRIu32 " is not covered by "
                               "its table (%" PRIu32 " positions)", i,
                               t->pos, t->table->n_tokens);
        }

        if (t->table->block_tokens != kv->block_tokens) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %" PRIu32
                               ": table blocks of %" PRIu32 " tokens, the "
                               "cache's are %" PRIu32, i,
                               t->table->block_tokens, kv->block_tokens);
        }

        nb = t->pos / kv->block_tokens + 1;

        for (j = 0; j < nb; j++) {
            if (t->table->blocks[j] >= kv->n_blocks) {
                return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry "
                                   "%" PRIu32 ": block id %" PRIu32 " beyond "
                                   "the cache's %" PRIu32, i,
                                   t->table->blocks[j], kv->n_blocks);
            }
        }

        if (t->pos + 1 > *max_ctx) {
            *max_ctx = t->pos + 1;
        }
    }

    return KVS_OK;
}


int
kvs_cpu_forward(const kvs_cpu_model_t *cm, kvs_cpu_kv_t *kv,
    const kvs_batch_t *b, float *logits, kvs_err_t *err)
{
    int                     rc;
    size_t                  total, layer_k, layer_v;
    uint32_t                n, i, l, max_ctx, want, wrow, nth;
    kvs_cpu_fw_t            fw;
    kvs_threads_t          *tokp, *ffnp, *attp;
    const kvs_cpu_layer_t  *ly;
    const kvs_hparams_t    *hp;

    rc = kvs_cpu_check_batch(cm, kv, b, &max_ctx, err);
    if (rc != KVS_OK) {
        return rc;
    }

    want = 0;

    for (i = 0; i < b->n; i++) {
        want += b->toks[i].want_logits != 0;
    }

    if (want > 0 && logits == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "cpu forward: %" PRIu32
                           " entries want logits, but no logits buffer",
                           want);
    }

    memset(&fw, 0, sizeof(kvs_cpu_fw_t));

    hp = &cm->hp;
    n = b->n;
    nth = kvs_threads_count(kv->threads);

    fw.cm = cm;
    fw.kv = kv;
    fw.b = b;
    fw.e = hp->n_embd;
    fw.f = hp->n_ff;
    fw.qd = hp->n_head * hp->head_dim_k;
    fw.kd = kv->k_width;
    fw.vd = kv->v_width;
    fw.od = hp->n_head * hp->head_dim_v;
    fw.eps = (float) hp->norm_eps;
    fw.scale = 1.0f / sqrtf((float) hp->head_dim_k);
    fw.simd = kvs_cpu_simd();

    /* the widest weight row any product dequantizes */
    wrow = fw.e > fw.f ? fw.e : fw.f;
    wrow = wrow > fw.od ? wrow : fw.od;

    /* one buffer for all activations, kept in kv, per token: x, xb [e];
     * q [qd]; k [kd]; v [vd]; att [od]; h1, h3 [f]; then per thread the
     * scores [max_ctx] and four weight rows [4][wrow] */
    fw.sc_stride = max_ctx;
    fw.wscratch_stride = (n >= KVS_CPU_BLAS_MIN ? KVS_CPU_BLAS_TILE : 4)
                         * (size_t) wrow;
    total = (size_t) n * (2 * (size_t) fw.e + fw.qd + fw.kd + fw.vd + fw.od
                          + 2 * (size_t) fw.f)
            + nth * (fw.sc_stride + fw.wscratch_stride)
            + (size_t) n * (wrow / 32) * (sizeof(kvs_cpu_q8_t) / 4 + 1);

    if (kvs_grow((void **) &kv->act, &kv->act_cap, total, sizeof(float))
        != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "cpu forward: out of memory "
                           "for %zu bytes of activations",
                           total * sizeof(float));
    }

    fw.x = kv->act;                       /* [n][e] residual stream */
    fw.xb = fw.x + (size_t) n * fw.e;     /* [n][e] normed / projected */
    fw.q = fw.xb + (size_t) n * fw.e;     /* [n][qd] */
    fw.k = fw.q + (size_t) n * fw.qd;     /* [n][kd] */
    fw.v = fw.k + (size_t) n * fw.kd;     /* [n][vd] */
    fw.att = fw.v + (size_t) n * fw.vd;   /* [n][od] attention output */
    fw.h1 = fw.att + (size_t) n * fw.od;  /* [n][f] gate, then silu*up */
    fw.h3 = fw.h1 + (size_t) n * fw.f;    /* [n][f] up */
    fw.sc = fw.h3 + (size_t) n * fw.f;    /* [nth][max_ctx] scores */
    fw.wscratch = fw.sc + nth * fw.sc_stride;  /* [nth][4][wrow] */
    /* [n][wrow / 32] quantized activations, Q8_0 models only */
    fw.xq = (kvs_cpu_q8_t *) (fw.wscratch + nth * fw.wscratch_stride);

    for (i = 0; i < n; i++) {
        memcpy(fw.x + (size_t) i * fw.e,
               kvs_cpu_row(&cm->tok_embd, (uint32_t) b->toks[i].token,
                           fw.wscratch, fw.simd),
               fw.e * sizeof(float));
    }

    layer_k = (size_t) kv->n_blocks * kv->block_tokens * fw.kd;
    layer_v = (size_t) kv->n_blocks * kv->block_tokens * fw.vd;

    tokp = kvs_cpu_pool(&fw, (double) n * fw.e);
    ffnp = kvs_cpu_pool(&fw, (double) n * fw.f);
    attp = kvs_cpu_pool(&fw, (double) n * max_ctx * (fw.qd + fw.od));

    fw.resid = 0;
    fw.norm = cm->layers[0].attn_norm;
    kvs_threads_run(tokp, kvs_cpu_tok_task, &fw, n);

    for (l = 0; l < hp->n_layer; l++) {
        ly = &cm->layers[l];
        fw.ly = ly;
        fw.kc = kv->k + l * layer_k;      /* [n_blocks][bt][kd] */
        fw.vc = kv->v + l * layer_v;      /* [n_blocks][bt][vd] */

        kvs_cpu_matmul(&fw, fw.xb, n, &ly->wq, fw.q, &ly->wk, fw.k,
                       &ly->wv, fw.v);

        /* this layer's K/V of the whole batch is written before any token
         * attends, so tokens see earlier positions of their own chunk */
        kvs_threads_run(tokp, kvs_cpu_qkv_task, &fw, n);
        kvs_threads_run(attp, kvs_cpu_attn_task, &fw, n * hp->n_head);

        kvs_cpu_matmul(&fw, fw.att, n, &ly->wo, fw.xb, NULL, NULL, NULL,
                       NULL);

        fw.resid = 1;
        fw.norm = ly->ffn_norm;
        kvs_threads_run(tokp, kvs_cpu_tok_task, &fw, n);

        kvs_cpu_matmul(&fw, fw.xb, n, &ly->w1, fw.h1, &ly->w3, fw.h3, NULL,
                       NULL);
        kvs_threads_run(ffnp, kvs_cpu_swiglu_task, &fw, n);
        kvs_cpu_matmul(&fw, fw.h1, n, &ly->w2, fw.xb, NULL, NULL, NULL,
                       NULL);

        /* the residual, and the next layer's attention norm with it */
        fw.norm = l + 1 < hp->n_layer ? cm->layers[l + 1].attn_norm : NULL;
        kvs_threads_run(tokp, kvs_cpu_tok_task, &fw, n);
    }

    /* only the wanted rows pay for the final norm and the classifier:
     * gather them into xb, in batch order */
    want = 0;

    for (i = 0; i < n; i++) {
        if (b->toks[i].want_logits) {
            kvs_cpu_rmsnorm(fw.xb + (size_t) want * fw.e,
                            fw.x + (size_t) i * fw.e, cm->out_norm, fw.e,
                            fw.eps);
            want++;
        }
    }

    if (want > 0) {
        kvs_cpu_matmul(&fw, fw.xb, want, &cm->output, logits, NULL, NULL,
                       NULL, NULL);
    }

    return KVS_OK;
}
