/*
 * kvs_cpu: weights, K/V storage and the forward step of the CPU backend
 * (see kvs_cpu.h).  The order of operations follows llama2.c run.c so that
 * stories260K reproduces its reference texts; the matrix products go
 * through one function, kvs_cpu_matmul(), the place where CBLAS plugs in.
 *
 * Non-F32 matrices are dequantized a row at a time inside the product
 * (kvs_cpu_row()), into a scratch row shared by the whole batch: memory
 * stays the mapping's, and every token of a step reads the same floats,
 * so a sequence's results do not depend on what it is batched with.
 * Keeping Q8_0 quantized instead is the alternative; not measured yet.
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

#if KVS_HAVE_CBLAS
#include <cblas.h>
#endif

#include "../base/kvs_buf.h"
#include "../model/kvs_dtype.h"
#include "../model/kvs_ggml_type.h"
#include "kvs_cpu.h"


static int kvs_cpu_tensor(const kvs_model_t *m, const char *name,
    uint64_t ne0, uint64_t ne1, int optional, const kvs_gguf_tensor_t **out,
    kvs_err_t *err);
static int kvs_cpu_mat(const kvs_model_t *m, const char *name, uint64_t ne0,
    uint64_t ne1, int optional, kvs_cpu_mat_t *out, kvs_err_t *err);
static int kvs_cpu_vec(kvs_cpu_model_t *cm, const char *name, uint64_t ne0,
    int optional, const float **out, kvs_err_t *err);
static void kvs_cpu_model_free_owned(kvs_cpu_model_t *cm);
static const float *kvs_cpu_row(const kvs_cpu_mat_t *w, uint32_t r,
    float *scratch);
static void kvs_cpu_matmul(float *y, const float *x, const kvs_cpu_mat_t *w,
    uint32_t n, float *scratch);
static void kvs_cpu_rmsnorm(float *o, const float *x, const float *w,
    uint32_t size, float eps);
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

    free(kv->k);
    free(kv->v);
    free(kv->act);
    free(kv);
}


/* Row r of w as floats: in place for F32, else dequantized into
 * scratch[w->cols]. */
static const float *
kvs_cpu_row(const kvs_cpu_mat_t *w, uint32_t r, float *scratch)
{
    uint32_t         j;
    const uint8_t   *p;
    const uint16_t  *h;

    p = (const uint8_t *) w->data + (size_t) r * w->row_bytes;

    switch (w->type) {
    case KVS_GGML_F16:
        h = (const uint16_t *) p;
        for (j = 0; j < w->cols; j++) {
            scratch[j] = kvs_f16_to_f32(h[j]);
        }
        return scratch;

    case KVS_GGML_BF16:
        h = (const uint16_t *) p;
        for (j = 0; j < w->cols; j++) {
            scratch[j] = kvs_bf16_to_f32(h[j]);
        }
        return scratch;

    case KVS_GGML_Q8_0:
        kvs_q8_0_dequantize(p, scratch, w->cols);
        return scratch;

    default:
        return (const float *) p;
    }
}


/*
 * y[n][rows] = x[n][cols] . w[rows][cols]^T: every row of x through the
 * linear layer w, stored as PyTorch does (row o holds the weights of
 * output o).  Output-row outer, so each weight row is dequantized once
 * per step whatever n is; scratch holds w->cols floats.
 */
static void
kvs_cpu_matmul(float *y, const float *x, const kvs_cpu_mat_t *w,
    uint32_t n, float *scratch)
{
    uint32_t      i, o, j, in, out;
    float         s;
    const float  *xr, *wr;

    in = w->cols;
    out = w->rows;

#if KVS_HAVE_CBLAS
    if (w->type == KVS_GGML_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int) n,
                    (int) out, (int) in, 1.0f, x, (int) in, w->data,
                    (int) in, 0.0f, y, (int) out);
        return;
    }
#endif

    for (o = 0; o < out; o++) {
        wr = kvs_cpu_row(w, o, scratch);

        for (i = 0; i < n; i++) {
            xr = x + (size_t) i * in;
            s = 0.0f;

            for (j = 0; j < in; j++) {
                s += wr[j] * xr[j];
            }

            y[(size_t) i * out + o] = s;
        }
    }
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
    float                  *x, *xb, *q, *k, *v, *att, *h1, *h3, *sc;
    float                  *kc, *vc, *qh, *ah, *row, mx, sum, scale, eps, z;
    size_t                  total, layer_k, layer_v, slot, r;
    uint32_t                n, i, l, h, t, j, max_ctx, e, f, qd, kd, vd;
    uint32_t                od, hdk, hdv, group, bt, blk, want, wrow;
    const float            *kt, *vt;
    const kvs_batch_tok_t  *tk;
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

    hp = &cm->hp;
    n = b->n;
    e = hp->n_embd;
    f = hp->n_ff;
    hdk = hp->head_dim_k;
    hdv = hp->head_dim_v;
    qd = hp->n_head * hdk;
    kd = kv->k_width;
    vd = kv->v_width;
    od = hp->n_head * hdv;
    group = hp->n_head / hp->n_head_kv;
    bt = kv->block_tokens;
    eps = (float) hp->norm_eps;
    scale = 1.0f / sqrtf((float) hdk);

    /* the widest weight row any product dequantizes */
    wrow = e > f ? e : f;
    wrow = wrow > od ? wrow : od;

    /* one buffer for all activations, kept in kv, per token: x, xb [e];
     * q [qd]; k [kd]; v [vd]; att [od]; h1, h3 [f]; then scores [max_ctx]
     * and one weight row [wrow] */
    total = (size_t) n * (2 * (size_t) e + qd + kd + vd + od + 2 * (size_t) f)
            + max_ctx + wrow;

    if (kvs_grow((void **) &kv->act, &kv->act_cap, total, sizeof(float))
        != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "cpu forward: out of memory "
                           "for %zu bytes of activations",
                           total * sizeof(float));
    }

    x = kv->act;                          /* [n][e] residual stream */
    xb = x + (size_t) n * e;              /* [n][e] normed / projected */
    q = xb + (size_t) n * e;              /* [n][qd] */
    k = q + (size_t) n * qd;              /* [n][kd] */
    v = k + (size_t) n * kd;              /* [n][vd] */
    att = v + (size_t) n * vd;            /* [n][od] attention output */
    h1 = att + (size_t) n * od;           /* [n][f] gate, then silu*up */
    h3 = h1 + (size_t) n * f;             /* [n][f] up */
    sc = h3 + (size_t) n * f;             /* [max_ctx] scores */
    row = sc + max_ctx;                   /* [wrow] dequantized weights */

    for (i = 0; i < n; i++) {
        memcpy(x + (size_t) i * e,
               kvs_cpu_row(&cm->tok_embd, (uint32_t) b->toks[i].token, row),
               e * sizeof(float));
    }

    layer_k = (size_t) kv->n_blocks * bt * kd;
    layer_v = (size_t) kv->n_blocks * bt * vd;

    for (l = 0; l < hp->n_layer; l++) {
        ly = &cm->layers[l];
        kc = kv->k + l * layer_k;         /* [n_blocks][bt][kd] */
        vc = kv->v + l * layer_v;         /* [n_blocks][bt][vd] */

        for (i = 0; i < n; i++) {
            kvs_cpu_rmsnorm(xb + (size_t) i * e, x + (size_t) i * e,
                            ly->attn_norm, e, eps);
        }

        kvs_cpu_matmul(q, xb, &ly->wq, n, row);
        kvs_cpu_matmul(k, xb, &ly->wk, n, row);
        kvs_cpu_matmul(v, xb, &ly->wv, n, row);

        /* write this layer's K/V of the whole batch before any token
         * attends, so tokens see earlier positions of their own chunk */
        for (i = 0; i < n; i++) {
            tk = &b->toks[i];

            for (j = 0; ly->bq != NULL && j < qd; j++) {
                q[(size_t) i * qd + j] += ly->bq[j];
            }

            for (j = 0; ly->bk != NULL && j < kd; j++) {
                k[(size_t) i * kd + j] += ly->bk[j];
            }

            for (j = 0; ly->bv != NULL && j < vd; j++) {
                v[(size_t) i * vd + j] += ly->bv[j];
            }

            (void) kvs_rope_apply(&cm->rope, q + (size_t) i * qd,
                                  (int) hp->n_head, (int) hdk,
                                  (int32_t) tk->pos, cm->rope_pairing);
            (void) kvs_rope_apply(&cm->rope, k + (size_t) i * kd,
                                  (int) hp->n_head_kv, (int) hdk,
                                  (int32_t) tk->pos, cm->rope_pairing);

            slot = (size_t) tk->table->blocks[tk->pos / bt] * bt
                   + tk->pos % bt;
            memcpy(kc + slot * kd, k + (size_t) i * kd, kd * sizeof(float));
            memcpy(vc + slot * vd, v + (size_t) i * vd, vd * sizeof(float));
        }

        for (i = 0; i < n; i++) {
            tk = &b->toks[i];

            for (h = 0; h < hp->n_head; h++) {
                qh = q + (size_t) i * qd + (size_t) h * hdk;
                ah = att + (size_t) i * od + (size_t) h * hdv;
                mx = -INFINITY;

                for (t = 0; t <= tk->pos; t++) {
                    blk = tk->table->blocks[t / bt];
                    kt = kc + ((size_t) blk * bt + t % bt) * kd
                         + (size_t) (h / group) * hdk;
                    z = 0.0f;

                    for (j = 0; j < hdk; j++) {
                        z += qh[j] * kt[j];
                    }

                    sc[t] = z * scale;

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
                    vt = vc + ((size_t) blk * bt + t % bt) * vd
                         + (size_t) (h / group) * hdv;
                    z = sc[t] / sum;

                    for (j = 0; j < hdv; j++) {
                        ah[j] += z * vt[j];
                    }
                }
            }
        }

        kvs_cpu_matmul(xb, att, &ly->wo, n, row);

        for (r = 0; r < (size_t) n * e; r++) {
            x[r] += xb[r];
        }

        for (i = 0; i < n; i++) {
            kvs_cpu_rmsnorm(xb + (size_t) i * e, x + (size_t) i * e,
                            ly->ffn_norm, e, eps);
        }

        kvs_cpu_matmul(h1, xb, &ly->w1, n, row);
        kvs_cpu_matmul(h3, xb, &ly->w3, n, row);

        for (r = 0; r < (size_t) n * f; r++) {
            z = h1[r];
            h1[r] = z * (1.0f / (1.0f + expf(-z))) * h3[r];
        }

        kvs_cpu_matmul(xb, h1, &ly->w2, n, row);

        for (r = 0; r < (size_t) n * e; r++) {
            x[r] += xb[r];
        }
    }

    /* only the wanted rows pay for the final norm and the classifier:
     * gather them into xb, in batch order */
    want = 0;

    for (i = 0; i < n; i++) {
        if (b->toks[i].want_logits) {
            kvs_cpu_rmsnorm(xb + (size_t) want * e, x + (size_t) i * e,
                            cm->out_norm, e, eps);
            want++;
        }
    }

    if (want > 0) {
        kvs_cpu_matmul(logits, xb, &cm->output, want, row);
    }

    return KVS_OK;
}
