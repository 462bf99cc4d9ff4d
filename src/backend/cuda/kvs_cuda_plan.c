/*
 * kvs_cuda_plan: sizes, buckets and batch packing of the CUDA backend
 * (see kvs_cuda_plan.h).  Pure C, no CUDA: the backend's host side in
 * src/backend/cuda/ calls it with the numbers it read from the device.
 *
 * Every multiplication and addition of sizes goes through kvs_cuda_mul()
 * or kvs_cuda_add(), which refuse to wrap.  Packing runs in two passes:
 * the first validates and counts using only the caller's scratch arrays,
 * the second, which cannot fail, writes the image.
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"
#include "kvs_cuda_plan.h"


_Static_assert(sizeof(kvs_backend_sample_t) == KVS_CUDA_PARAM_WORDS * 4,
               "a sampling parameter is four int32 words");


const kvs_cuda_plan_name_t  kvs_cuda_plan_globals[KVS_CUDA_GLOBALS] = {
    { "token_embd.weight", 1, 0, KVS_CUDA_D_EMBD, KVS_CUDA_D_VOCAB },
    { "output_norm.weight", 0, 0, KVS_CUDA_D_EMBD, -1 },
    { "output.weight", 1, 1, KVS_CUDA_D_EMBD, KVS_CUDA_D_VOCAB }
};

const kvs_cuda_plan_name_t  kvs_cuda_plan_layer[KVS_CUDA_PER_LAYER] = {
    { "attn_norm.weight", 0, 0, KVS_CUDA_D_EMBD, -1 },
    { "attn_q.weight", 1, 1, KVS_CUDA_D_EMBD, KVS_CUDA_D_Q },
    { "attn_k.weight", 1, 1, KVS_CUDA_D_EMBD, KVS_CUDA_D_K },
    { "attn_v.weight", 1, 1, KVS_CUDA_D_EMBD, KVS_CUDA_D_V },
    { "attn_q.bias", 0, 1, KVS_CUDA_D_Q, -1 },
    { "attn_k.bias", 0, 1, KVS_CUDA_D_K, -1 },
    { "attn_v.bias", 0, 1, KVS_CUDA_D_V, -1 },
    { "attn_output.weight", 1, 0, KVS_CUDA_D_O, KVS_CUDA_D_EMBD },
    { "ffn_norm.weight", 0, 0, KVS_CUDA_D_EMBD, -1 },
    { "ffn_gate.weight", 1, 1, KVS_CUDA_D_EMBD, KVS_CUDA_D_FF },
    { "ffn_up.weight", 1, 0, KVS_CUDA_D_EMBD, KVS_CUDA_D_UP },
    { "ffn_down.weight", 1, 0, KVS_CUDA_D_FF, KVS_CUDA_D_EMBD },
    { "attn_q_norm.weight", 0, 1, KVS_CUDA_D_HEAD, -1 },
    { "attn_k_norm.weight", 0, 1, KVS_CUDA_D_HEAD, -1 },
    { "attn_qkv.weight", 1, 1, KVS_CUDA_D_EMBD, KVS_CUDA_D_QKV },
    { "post_attention_norm.weight", 0, 1, KVS_CUDA_D_EMBD, -1 },
    { "post_ffw_norm.weight", 0, 1, KVS_CUDA_D_EMBD, -1 }
};


/* What packing's first pass counts over a slice's own entries. */
typedef struct {
    uint32_t  n_seq;                  /* distinct tables, in pk->seq_tab */
    uint32_t  n_run;
    uint32_t  n_want;
    uint32_t  max_ctx;                /* max pos + 1 */
    uint64_t  n_table;                /* block ids of every sequence */
} kvs_cuda_pack_count_t;


static int kvs_cuda_mul(size_t a, size_t b, size_t *out);
static int kvs_cuda_add(size_t a, size_t b, size_t *out);
static uint32_t kvs_cuda_seq_find(const kvs_cuda_packer_t *pk,
    uint32_t n_seq, const kvs_kv_table_t *t, uint32_t hint);
static int kvs_cuda_pack_count(kvs_cuda_packer_t *pk,
    const kvs_batch_t *b, uint32_t from, uint32_t n,
    kvs_cuda_pack_count_t *c, kvs_err_t *err);
static int kvs_cuda_pack_layout(const kvs_cuda_packer_t *pk,
    const kvs_cuda_pack_count_t *c, uint32_t n, uint32_t L, int decode,
    kvs_cuda_packed_t *pd, kvs_err_t *err);
static void kvs_cuda_pack_tables(kvs_cuda_packer_t *pk, uint32_t n_seq,
    const kvs_cuda_packed_t *pd);
static uint32_t kvs_cuda_pack_tokens(kvs_cuda_packer_t *pk,
    const kvs_batch_t *b, uint32_t from, uint32_t n_seq,
    const kvs_backend_sample_t *params, const kvs_cuda_packed_t *pd);
static void kvs_cuda_pack_pad(kvs_cuda_packer_t *pk, uint32_t n_seq,
    uint32_t runs, const kvs_backend_sample_t *params,
    const kvs_cuda_packed_t *pd);


static int
kvs_cuda_mul(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? KVS_ERANGE : KVS_OK;
}


static int
kvs_cuda_add(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out) ? KVS_ERANGE : KVS_OK;
}


void
kvs_cuda_plan_dims(const kvs_hparams_t *hp, uint64_t *dim)
{
    dim[KVS_CUDA_D_EMBD] = hp->n_embd;
    dim[KVS_CUDA_D_Q] = hp->q_width;
    dim[KVS_CUDA_D_K] = hp->k_width;
    dim[KVS_CUDA_D_V] = hp->v_width;
    dim[KVS_CUDA_D_O] = hp->o_width;
    dim[KVS_CUDA_D_FF] = hp->n_ff;
    dim[KVS_CUDA_D_VOCAB] = hp->n_vocab;
    dim[KVS_CUDA_D_HEAD] = hp->head_dim_k;
    dim[KVS_CUDA_D_QKV] = (uint64_t) hp->q_width + hp->k_width
                          + hp->v_width;
    dim[KVS_CUDA_D_UP] = (uint64_t) hp->n_ff * (hp->fused_gate_up ? 2 : 1);
}


const kvs_cuda_plan_name_t *
kvs_cuda_plan_slot(uint32_t s, char *name, size_t size)
{
    const kvs_cuda_plan_name_t  *nm;

    if (s < KVS_CUDA_GLOBALS) {
        nm = &kvs_cuda_plan_globals[s];
        snprintf(name, size, "%s", nm->name);
        return nm;
    }

    nm = &kvs_cuda_plan_layer[(s - KVS_CUDA_GLOBALS) % KVS_CUDA_PER_LAYER];
    snprintf(name, size, "blk.%" PRIu32 ".%s",
             (s - KVS_CUDA_GLOBALS) / KVS_CUDA_PER_LAYER, nm->name);

    return nm;
}


int
kvs_cuda_plan_arch(const kvs_hparams_t *hp, kvs_err_t *err)
{
    /* windows, soft-caps, GeGLU, post-norms, scaled embeddings and a
     * second RoPE base all have kernels or launch arguments now; what
     * is left is the attention kernels' head width */
    if (hp->head_dim_k > KVS_CUDA_HEAD_MAX
        || hp->head_dim_v > KVS_CUDA_HEAD_MAX)
    {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "cuda backend: %s's "
                           "heads of %" PRIu32 " (K) and %" PRIu32 " (V) "
                           "floats are wider than the attention kernels' "
                           "%d; the CPU backend computes them", hp->arch,
                           hp->head_dim_k, hp->head_dim_v,
                           KVS_CUDA_HEAD_MAX);
    }

    return KVS_OK;
}


int
kvs_cuda_plan_weights(const kvs_model_t *m, uint64_t *bytes, int *kv_dt,
    kvs_err_t *err)
{
    int                           rc, all_f32;
    char                          name[64];
    size_t                        total, size, off;
    uint32_t                      s, n;
    uint64_t                      dim[KVS_CUDA_D_N];
    const kvs_gguf_tensor_t      *t;
    const kvs_cuda_plan_name_t   *nm;

    *bytes = 0;
    *kv_dt = KVS_CUDA_DT_F32;

    rc = kvs_cuda_plan_arch(&m->hp, err);
    if (rc != KVS_OK) {
        return rc;
    }

    kvs_cuda_plan_dims(&m->hp, dim);
    total = 0;
    all_f32 = 1;
    n = KVS_CUDA_GLOBALS + m->hp.n_layer * KVS_CUDA_PER_LAYER;

    /* slot order, as the loader carves: the offsets' padding depends on
     * it */
    for (s = 0; s < n; s++) {
        nm = kvs_cuda_plan_slot(s, name, sizeof(name));

        rc = kvs_model_tensor(m, "cuda backend", name, dim[nm->ne0],
                              nm->ne1 < 0 ? 0 : dim[nm->ne1], nm->optional,
                              &t, err);
        if (rc != KVS_OK) {
            return rc;
        }

        if (t == NULL) {
            continue;
        }

        rc = kvs_cuda_plan_tensor_bytes(t->type, nm->matrix, t->nelem,
                                        &size, err);
        if (rc == KVS_OK) {
            rc = kvs_cuda_plan_carve(&total, size, &off, err);
        }

        if (rc != KVS_OK) {
            return kvs_err_prefix(err, "tensor %s", name);
        }

        if (nm->matrix && t->type != KVS_GGML_F32) {
            all_f32 = 0;
        }
    }

    rc = kvs_cuda_plan_carve(&total, (size_t) m->hp.n_rot / 2
                             * sizeof(double), &off, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* gemma3's windowed layers: their own table, after the first */
    if (m->hp.rope_base_swa != 0.0) {
        rc = kvs_cuda_plan_carve(&total, (size_t) m->hp.n_rot / 2
                                 * sizeof(double), &off, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    *bytes = total;
    *kv_dt = all_f32 ? KVS_CUDA_DT_F32 : KVS_CUDA_DT_BF16;

    return KVS_OK;
}


int
kvs_cuda_plan_dtype(uint32_t type, int matrix)
{
    /* what the table cannot compute, the device cannot take either */
    if (kvs_quant_type(type) == NULL) {
        return -1;
    }

    if (!matrix) {
        return KVS_CUDA_DT_F32;
    }

    switch (type) {
    case KVS_GGML_F32:
        return KVS_CUDA_DT_F32;
    case KVS_GGML_F16:
        return KVS_CUDA_DT_F16;
    default:
        /* BF16 as it is, Q8_0 widened on the device, every other table
         * type dequantized on the host at load (kvs_cuda_weights.c) */
        return KVS_CUDA_DT_BF16;
    }
}


size_t
kvs_cuda_plan_dt_size(int dt)
{
    switch (dt) {
    case KVS_CUDA_DT_F32:
        return 4;
    case KVS_CUDA_DT_F16:
    case KVS_CUDA_DT_BF16:
        return 2;
    default:
        return 0;
    }
}


int
kvs_cuda_plan_tensor_bytes(uint32_t type, int matrix, uint64_t nelem,
    size_t *bytes, kvs_err_t *err)
{
    int  dt;

    *bytes = 0;

    dt = kvs_cuda_plan_dtype(type, matrix);
    if (dt < 0) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "cuda backend: a %s of "
                           "type %s, which kvserve cannot compute with",
                           matrix ? "matrix" : "vector",
                           kvs_ggml_type_name(type));
    }

    if (nelem > SIZE_MAX
        || kvs_cuda_mul((size_t) nelem, kvs_cuda_plan_dt_size(dt), bytes)
           != KVS_OK)
    {
        *bytes = 0;
        return kvs_err_set(err, KVS_ERANGE, "cuda backend: %" PRIu64
                           " elements overflow a size", nelem);
    }

    return KVS_OK;
}


int
kvs_cuda_plan_carve(size_t *total, size_t bytes, size_t *off,
    kvs_err_t *err)
{
    size_t  start, end;

    if (kvs_cuda_add(*total, KVS_CUDA_ALIGN - 1, &start) != KVS_OK) {
        goto overflow;
    }

    start &= ~(size_t) (KVS_CUDA_ALIGN - 1);

    if (kvs_cuda_add(start, bytes, &end) != KVS_OK) {
        goto overflow;
    }

    *off = start;
    *total = end;

    return KVS_OK;

overflow:

    return kvs_err_set(err, KVS_ERANGE, "cuda backend: %zu bytes after "
                       "%zu overflow a size", bytes, *total);
}


int
kvs_cuda_plan_pack_words(uint32_t L, uint32_t n_table, size_t *words,
    kvs_err_t *err)
{
    size_t  per;

    /* tok, pos, seq, table_off, run_tok0, run_len, rows, then params */
    per = 7 + KVS_CUDA_PARAM_WORDS;

    if (kvs_cuda_mul(per, L, words) != KVS_OK
        || kvs_cuda_add(*words, n_table, words) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ERANGE, "cuda backend: a packed batch "
                           "of %" PRIu32 " tokens and %" PRIu32 " block "
                           "ids overflows a size", L, n_table);
    }

    return KVS_OK;
}


int
kvs_cuda_plan_workspace(kvs_cuda_ws_t *ws, const kvs_cuda_ws_conf_t *c,
    kvs_err_t *err)
{
    int       rc;
    size_t    t, n, wmax, units, most, bytes;
    uint32_t  b, next, s;

    memset(ws, 0, sizeof(kvs_cuda_ws_t));

    if (c->max_tok == 0 || c->max_rows == 0 || c->max_rows > c->max_tok
        || c->max_split == 0 || c->in_size == 0 || c->n_head_kv == 0)
    {
        return kvs_err_set(err, KVS_EINVAL, "cuda workspace: %" PRIu32
                           " tokens, %" PRIu32 " logits rows (at most the "
                           "tokens), %" PRIu32 " parts, input elements of "
                           "%zu bytes", c->max_tok, c->max_rows,
                           c->max_split, c->in_size);
    }

    t = c->max_tok;
    wmax = c->n_embd;
    wmax = c->o_width > wmax ? c->o_width : wmax;
    wmax = c->n_ff > wmax ? c->n_ff : wmax;

    /* split attention scratch: the eager worst case is max_tok tokens in
     * one part; a decode bucket B runs B * split(B) token-parts */
    most = t;

    for (b = kvs_cuda_plan_bucket(1, c->max_rows); b != 0; b = next) {
        s = kvs_cuda_plan_split(b, c->max_ctx, c->n_head_kv, c->n_sm,
                                c->max_split, SIZE_MAX, 0);

        if ((size_t) b * s > most) {
            most = (size_t) b * s;
        }

        next = kvs_cuda_plan_bucket(b + 1, c->max_rows);
        if (next <= b) {
            break;
        }
    }

    if (kvs_cuda_mul(most, c->part_unit, &units) != KVS_OK) {
        goto overflow;
    }

    ws->part_floats = units;

    rc = kvs_cuda_plan_pack_words(c->max_tok, c->max_table, &ws->pack_words,
                                  err);
    if (rc != KVS_OK) {
        return rc;
    }

#define KVS_CUDA_WS(field, rows, width, size)                                \
    if (kvs_cuda_mul((size_t) (rows), (size_t) (width), &n) != KVS_OK       \
        || kvs_cuda_mul(n, (size_t) (size), &bytes) != KVS_OK               \
        || kvs_cuda_plan_carve(&ws->total, bytes, &ws->field, err)          \
           != KVS_OK)                                                        \
    {                                                                        \
        goto overflow;                                                       \
    }

    KVS_CUDA_WS(x, t, c->n_embd, 4);
    KVS_CUDA_WS(r, t, c->n_embd, 4);
    KVS_CUDA_WS(q, t, c->q_width, 4);
    KVS_CUDA_WS(k, t, c->k_width, 4);
    KVS_CUDA_WS(v, t, c->v_width, 4);
    KVS_CUDA_WS(att, t, c->o_width, 4);
    KVS_CUDA_WS(h, t, 2 * (size_t) c->n_ff, 4);
    KVS_CUDA_WS(in, t, wmax, c->in_size);
    KVS_CUDA_WS(logits, c->max_rows, c->n_vocab, 4);
    KVS_CUDA_WS(part, ws->part_floats, 1, 4);
    KVS_CUDA_WS(sample, c->sample_bytes, 1, 1);
    KVS_CUDA_WS(ids, c->max_rows, 1, 4);
    KVS_CUDA_WS(blas, c->blas_bytes, 1, 1);
    KVS_CUDA_WS(pack, ws->pack_words, 1, 4);

#undef KVS_CUDA_WS

    return KVS_OK;

overflow:

    memset(ws, 0, sizeof(kvs_cuda_ws_t));

    return kvs_err_set(err, KVS_ERANGE, "cuda workspace: %" PRIu32
                       " tokens of widths up to %zu overflow a size",
                       c->max_tok, wmax);
}


int
kvs_cuda_plan_block_bytes(uint32_t n_layer, uint32_t block_tokens,
    uint32_t k_width, uint32_t v_width, size_t elem, uint64_t *bytes,
    kvs_err_t *err)
{
    uint64_t  b;

    *bytes = 0;

    if (__builtin_mul_overflow((uint64_t) n_layer, block_tokens, &b)
        || __builtin_mul_overflow(b, (uint64_t) k_width + v_width, &b)
        || __builtin_mul_overflow(b, (uint64_t) elem, &b))
    {
        return kvs_err_set(err, KVS_ERANGE, "cuda kv: a block of %" PRIu32
                           " tokens over %" PRIu32 " layers overflows",
                           block_tokens, n_layer);
    }

    *bytes = b;

    return KVS_OK;
}


int
kvs_cuda_plan_blocks(const kvs_cuda_mem_t *m, uint32_t requested,
    uint32_t *n_blocks, kvs_err_t *err)
{
    uint64_t  fixed, need, avail, kv, n;

    *n_blocks = 0;

    if (m->block_bytes == 0) {
        return kvs_err_set(err, KVS_EINVAL, "cuda kv: blocks of 0 bytes");
    }

    if (__builtin_add_overflow(m->weights, m->workspace, &fixed)
        || __builtin_add_overflow(fixed, m->reserve, &fixed)
        || __builtin_add_overflow(fixed, m->stage, &need))
    {
        return kvs_err_set(err, KVS_ERANGE, "cuda kv: weights %" PRIu64
                           " + workspace %" PRIu64 " bytes overflow",
                           m->weights, m->workspace);
    }

    if (need > m->free) {
        return kvs_err_set(err, KVS_ENOMEM, "cuda: out of device memory: "
                           "weights %" PRIu64 " + workspace %" PRIu64
                           " + load staging %" PRIu64 " + reserve %" PRIu64
                           " = %" PRIu64 " bytes, %" PRIu64 " free",
                           m->weights, m->workspace, m->stage, m->reserve,
                           need, m->free);
    }

    /* the staging is freed before the KV is allocated */
    avail = m->free - fixed;

    if (requested != 0) {
        if (requested > m->max_blocks) {
            return kvs_err_set(err, KVS_ERANGE, "cuda kv: %" PRIu32
                               " blocks, at most %" PRIu32, requested,
                               m->max_blocks);
        }

        if (__builtin_mul_overflow((uint64_t) requested, m->block_bytes,
                                   &kv)
            || kv > avail)
        {
            return kvs_err_set(err, KVS_ENOMEM, "cuda: out of device "
                               "memory: %" PRIu32 " KV blocks of %" PRIu64
                               " bytes, %" PRIu64 " free after weights %"
                               PRIu64 ", workspace %" PRIu64 " and "
                               "reserve %" PRIu64, requested, m->block_bytes,
                               avail, m->weights, m->workspace, m->reserve);
        }

        *n_blocks = requested;

        return KVS_OK;
    }

    if (!(m->fraction > 0.0 && m->fraction <= 1.0)) {
        return kvs_err_set(err, KVS_EINVAL, "cuda kv: fraction %g, "
                           "expected (0, 1]", m->fraction);
    }

    /* doubles hold every byte count below 2^53 exactly; the product is
     * at most avail, so it converts back without overflow */
    kv = (uint64_t) floor((double) avail * m->fraction);
    kv = kv > avail ? avail : kv;
    n = kv / m->block_bytes;

    if (n == 0) {
        return kvs_err_set(err, KVS_ENOMEM, "cuda: out of device memory: "
                           "no room for one KV block of %" PRIu64 " bytes: "
                           "%" PRIu64 " free after weights %" PRIu64
                           ", workspace %" PRIu64 " and reserve %" PRIu64
                           ", fraction %g", m->block_bytes, avail,
                           m->weights, m->workspace, m->reserve,
                           m->fraction);
    }

    *n_blocks = n > m->max_blocks ? m->max_blocks : (uint32_t) n;

    return KVS_OK;
}


uint32_t
kvs_cuda_plan_bucket(uint32_t n, uint32_t max)
{
    uint32_t  b;
    uint64_t  r;

    if (n == 0 || n > max) {
        return 0;
    }

    if (n <= KVS_CUDA_BUCKET_POW) {
        b = 1;

        while (b < n) {
            b *= 2;
        }

    } else {
        /* in 64 bits: n + 127 may pass 2^32 */
        r = ((uint64_t) n + KVS_CUDA_BUCKET_STEP - 1) / KVS_CUDA_BUCKET_STEP
            * KVS_CUDA_BUCKET_STEP;
        b = r > max ? max : (uint32_t) r;
    }

    return b > max ? max : b;
}


uint32_t
kvs_cuda_plan_ctx_bucket(uint32_t max_ctx)
{
    uint32_t  c;

    if (max_ctx > (UINT32_C(1) << 31)) {
        return 0;
    }

    c = KVS_CUDA_CTX_MIN;

    while (c < max_ctx) {
        c *= 2;
    }

    return c;
}


uint32_t
kvs_cuda_plan_split(uint32_t n_tok, uint32_t max_ctx, uint32_t n_head_kv,
    uint32_t n_sm, uint32_t max_split, size_t part_cap, size_t part_unit)
{
    uint64_t  base, target, s, by_ctx, by_mem;

    if (n_tok == 0) {
        return 1;
    }

    base = (uint64_t) n_tok * (n_head_kv ? n_head_kv : 1);
    target = (uint64_t) n_sm * KVS_CUDA_CTA_PER_SM;
    s = base >= target ? 1 : (target + base - 1) / base;

    by_ctx = ((uint64_t) max_ctx + KVS_CUDA_SPLIT_MIN - 1)
             / KVS_CUDA_SPLIT_MIN;
    s = s > by_ctx ? by_ctx : s;
    s = s > max_split ? max_split : s;

    if (part_unit != 0) {
        by_mem = part_cap / part_unit / n_tok;
        s = s > by_mem ? by_mem : s;
    }

    return s == 0 ? 1 : (uint32_t) s;
}


uint64_t
kvs_cuda_plan_key(uint32_t bucket, uint32_t ctx, uint32_t split, int sample)
{
    uint32_t  lg;

    lg = 0;

    while (lg < 32 && (UINT64_C(1) << lg) < ctx) {
        lg++;
    }

    return (uint64_t) bucket << 32 | (uint64_t) lg << 24
           | (uint64_t) (split & 0x7fffff) << 1 | (sample != 0);
}



int
kvs_cuda_plan_check(const kvs_cuda_packer_t *pk, const kvs_batch_t *b,
    uint32_t from, uint32_t n, kvs_err_t *err)
{
    uint32_t                i, j, nb, checked, bt, first;
    const kvs_batch_tok_t  *t, *prev;

    if (b == NULL || b->toks == NULL || n == 0 || from > b->n
        || n > b->n - from)
    {
        return kvs_err_set(err, KVS_EINVAL, "cuda forward: empty batch or "
                           "entries %" PRIu32 "+%" PRIu32 " beyond it",
                           from, n);
    }

    bt = pk->block_tokens;
    checked = 0;
    prev = NULL;

    for (i = from; i < from + n; i++) {
        t = &b->toks[i];

        if (t->token < 0 || (uint32_t) t->token >= pk->n_vocab) {
            return kvs_err_set(err, KVS_EINVAL, "cuda forward: entry %"
                               PRIu32 ": token %" PRId32 " outside the "
                               "vocabulary of %" PRIu32, i, t->token,
                               pk->n_vocab);
        }

        if (t->table == NULL) {
            return kvs_err_set(err, KVS_EINVAL, "cuda forward: entry %"
                               PRIu32 " has no block table", i);
        }

        if (t->table->block_tokens != bt || bt == 0) {
            return kvs_err_set(err, KVS_EINVAL, "cuda forward: entry %"
                               PRIu32 ": table blocks of %" PRIu32
                               " tokens, the cache's are %" PRIu32, i,
                               t->table->block_tokens, bt);
        }

        if (t->pos >= t->table->n_tokens || t->pos > INT32_MAX - 1
            || t->pos / bt >= t->table->n_blocks)
        {
            return kvs_err_set(err, KVS_EINVAL, "cuda forward: entry %"
                               PRIu32 ": position %" PRIu32 " is not "
                               "covered by its table (%" PRIu32 " positions"
                               ", %" PRIu32 " blocks)", i, t->pos,
                               t->table->n_tokens, t->table->n_blocks);
        }

        /* a run's blocks are checked once: the next position of the same
         * table needs at most one block more */
        if (prev == NULL || prev->table != t->table
            || t->pos != prev->pos + 1)
        {
            checked = 0;
        }

        nb = t->pos / bt + 1;

        /* blocks wholly before the window are read by no layer, and may
         * be holes (the scheduler gave them back) */
        first = pk->swa_all != 0 && t->pos >= pk->swa_all
                ? (t->pos + 1 - pk->swa_all) / bt : 0;
        checked = first > checked ? first : checked;

        for (j = checked; j < nb; j++) {
            if (t->table->blocks[j] >= pk->n_blocks) {
                return kvs_err_set(err, KVS_EINVAL, "cuda forward: entry "
                                   "%" PRIu32 ": block id %" PRIu32
                                   " beyond the cache's %" PRIu32, i,
                                   t->table->blocks[j], pk->n_blocks);
            }
        }

        checked = nb > checked ? nb : checked;
        prev = t;
    }

    return KVS_OK;
}


uint32_t
kvs_cuda_plan_slice(const kvs_batch_t *b, uint32_t from, uint32_t max_tok,
    uint32_t max_rows, uint32_t max_table, uint32_t block_tokens)
{
    uint32_t                i, n, want, w, nb, prev_nb, cost;
    uint64_t                tab;
    const kvs_batch_tok_t  *t, *prev;

    n = 0;
    want = 0;
    tab = 0;
    prev = NULL;
    prev_nb = 0;

    for (i = from; i < b->n; i++) {
        t = &b->toks[i];
        w = t->want_logits != 0;
        nb = t->pos / block_tokens + 1;

        if (prev == NULL || prev->table != t->table
            || t->pos != prev->pos + 1)
        {
            cost = nb;

        } else {
            cost = nb - prev_nb;          /* positions only grow */
        }

        if (n > 0 && (n + 1 > max_tok || want + w > max_rows
                      || tab + cost > max_table))
        {
            break;
        }

        n++;
        want += w;
        tab += cost;
        prev = t;
        prev_nb = nb;
    }

    return n;
}


int
kvs_cuda_plan_decode_only(const kvs_batch_t *b, uint32_t from, uint32_t n)
{
    uint32_t                i;
    const kvs_batch_tok_t  *t, *prev;

    for (i = from + 1; i < from + n; i++) {
        t = &b->toks[i];
        prev = t - 1;

        if (prev->table == t->table && t->pos == prev->pos + 1) {
            return 0;
        }
    }

    return 1;
}


/* The sequence index of table t among seq_tab[0, n_seq), trying hint
 * first; n_seq when it is new. */
static uint32_t
kvs_cuda_seq_find(const kvs_cuda_packer_t *pk, uint32_t n_seq,
    const kvs_kv_table_t *t, uint32_t hint)
{
    uint32_t  s;

    if (hint < n_seq && pk->seq_tab[hint] == t) {
        return hint;
    }

    for (s = 0; s < n_seq; s++) {
        if (pk->seq_tab[s] == t) {
            return s;
        }
    }

    return n_seq;
}


int
kvs_cuda_plan_pack(kvs_cuda_packer_t *pk, const kvs_batch_t *b,
    uint32_t from, uint32_t n, uint32_t pad_to,
    const kvs_backend_sample_t *params, kvs_cuda_packed_t *out,
    kvs_err_t *err)
{
    int                    rc, decode;
    uint32_t               L, runs;
    kvs_cuda_packed_t      pd;
    kvs_cuda_pack_count_t  c;

    rc = kvs_cuda_plan_check(pk, b, from, n, err);
    if (rc != KVS_OK) {
        return rc;
    }

    L = pad_to == 0 ? n : pad_to;
    decode = kvs_cuda_plan_decode_only(b, from, n);

    if (L < n || (L > n && !decode)) {
        return kvs_err_set(err, KVS_EINVAL, "cuda pack: %" PRIu32 " tokens "
                           "padded to %" PRIu32 "%s", n, L,
                           L > n ? ", not all decodes" : "");
    }

    /* pass 1: sequences (in the scratch), counts, capacity */
    memset(&pd, 0, sizeof(kvs_cuda_packed_t));

    rc = kvs_cuda_pack_count(pk, b, from, n, &c, err);
    if (rc == KVS_OK) {
        rc = kvs_cuda_pack_layout(pk, &c, n, L, decode, &pd, err);
    }

    if (rc != KVS_OK) {
        return rc;
    }

    /* pass 2: the image; nothing below fails */
    kvs_cuda_pack_tables(pk, c.n_seq, &pd);
    runs = kvs_cuda_pack_tokens(pk, b, from, c.n_seq, params, &pd);
    kvs_cuda_pack_pad(pk, c.n_seq, runs, params, &pd);

    *out = pd;

    return KVS_OK;
}


/* Pass 1 over entries [from, from + n): each distinct table gets the
 * next sequence index, its pointer in pk->seq_tab and the blocks it
 * needs in pk->seq_nb; runs, rows wanting logits and the context are
 * counted.  KVS_ERANGE when the sequences outgrow the scratch. */
static int
kvs_cuda_pack_count(kvs_cuda_packer_t *pk, const kvs_batch_t *b,
    uint32_t from, uint32_t n, kvs_cuda_pack_count_t *c, kvs_err_t *err)
{
    int                     cont;
    uint32_t                i, s, nb;
    const kvs_batch_tok_t  *t, *prev;

    memset(c, 0, sizeof(kvs_cuda_pack_count_t));
    s = 0;
    prev = NULL;

    for (i = from; i < from + n; i++) {
        t = &b->toks[i];

        s = kvs_cuda_seq_find(pk, c->n_seq, t->table, s);

        if (s == c->n_seq) {
            if (c->n_seq == pk->cap_seq) {
                return kvs_err_set(err, KVS_ERANGE, "cuda pack: entry %"
                                   PRIu32 ": more than %" PRIu32
                                   " sequences in a step", i, pk->cap_seq);
            }

            pk->seq_tab[c->n_seq] = t->table;
            pk->seq_nb[c->n_seq] = 0;
            c->n_seq++;
        }

        nb = t->pos / pk->block_tokens + 1;
        pk->seq_nb[s] = nb > pk->seq_nb[s] ? nb : pk->seq_nb[s];

        cont = prev != NULL && prev->table == t->table
               && t->pos == prev->pos + 1;
        c->n_run += !cont;
        c->n_want += t->want_logits != 0;
        c->max_ctx = t->pos + 1 > c->max_ctx ? t->pos + 1 : c->max_ctx;
        prev = t;
    }

    for (s = 0; s < c->n_seq; s++) {
        c->n_table += pk->seq_nb[s];
    }

    return KVS_OK;
}


/* The image's counts and word offsets for n tokens padded to L, once
 * its size is known to fit pk->words; KVS_ERANGE when it does not.  pd
 * comes zeroed. */
static int
kvs_cuda_pack_layout(const kvs_cuda_packer_t *pk,
    const kvs_cuda_pack_count_t *c, uint32_t n, uint32_t L, int decode,
    kvs_cuda_packed_t *pd, kvs_err_t *err)
{
    size_t  words;

    if (c->n_table > UINT32_MAX
        || kvs_cuda_plan_pack_words(L, (uint32_t) c->n_table, &words, err)
           != KVS_OK
        || words > pk->cap_words)
    {
        return kvs_err_set(err, KVS_ERANGE, "cuda pack: %" PRIu32 " tokens "
                           "and %" PRIu64 " block ids need more than the "
                           "%zu words of the step buffer", L, c->n_table,
                           pk->cap_words);
    }

    pd->n_tok = n;
    pd->n_pad = L;
    pd->n_seq = L > n ? L : c->n_seq;
    pd->n_run = c->n_run + (L - n);
    pd->n_want = c->n_want;
    pd->n_rows = L > n ? L : c->n_want;
    pd->n_table = (uint32_t) c->n_table;
    pd->max_ctx = c->max_ctx;
    pd->decode = decode;
    pd->tok = 0;
    pd->pos = (size_t) L;
    pd->seq = 2 * (size_t) L;
    pd->table_off = 3 * (size_t) L;
    pd->run_tok0 = 4 * (size_t) L;
    pd->run_len = 5 * (size_t) L;
    pd->rows = 6 * (size_t) L;
    pd->params = 7 * (size_t) L;
    pd->table = (7 + KVS_CUDA_PARAM_WORDS) * (size_t) L;
    pd->n_words = words;

    return KVS_OK;
}


/* Each of the n_seq sequences' table prefix, copied once, and its
 * offset. */
static void
kvs_cuda_pack_tables(kvs_cuda_packer_t *pk, uint32_t n_seq,
    const kvs_cuda_packed_t *pd)
{
    size_t    off;
    int32_t  *w;
    uint32_t  s, j;

    w = pk->words;
    off = 0;

    for (s = 0; s < n_seq; s++) {
        w[pd->table_off + s] = (int32_t) off;

        for (j = 0; j < pk->seq_nb[s]; j++) {
            w[pd->table + off + j] = (int32_t) pk->seq_tab[s]->blocks[j];
        }

        off += pk->seq_nb[s];
    }
}


/* The slice's own tokens: token, position and sequence each, the runs
 * they make, and the rows (with their sampling parameters, when given)
 * of those wanting logits.  Returns the number of runs written. */
static uint32_t
kvs_cuda_pack_tokens(kvs_cuda_packer_t *pk, const kvs_batch_t *b,
    uint32_t from, uint32_t n_seq, const kvs_backend_sample_t *params,
    const kvs_cuda_packed_t *pd)
{
    int                     cont;
    int32_t                *w;
    uint32_t                i, j, s, n, n_want, run0;
    const kvs_batch_tok_t  *t, *prev;

    w = pk->words;
    n = pd->n_tok;
    s = 0;
    j = 0;                                  /* runs */
    n_want = 0;
    run0 = 0;
    prev = NULL;

    for (i = 0; i < n; i++) {
        t = &b->toks[from + i];
        s = kvs_cuda_seq_find(pk, n_seq, t->table, s);

        w[pd->tok + i] = t->token;
        w[pd->pos + i] = (int32_t) t->pos;
        w[pd->seq + i] = (int32_t) s;

        cont = prev != NULL && prev->table == t->table
               && t->pos == prev->pos + 1;

        if (!cont) {
            if (i > 0) {
                w[pd->run_len + j] = (int32_t) (i - run0);
                j++;
            }

            w[pd->run_tok0 + j] = (int32_t) i;
            run0 = i;
        }

        if (t->want_logits) {
            w[pd->rows + n_want] = (int32_t) i;

            if (params != NULL) {
                memcpy(&w[pd->params + (size_t) n_want
                          * KVS_CUDA_PARAM_WORDS],
                       &params[n_want], sizeof(kvs_backend_sample_t));
            }

            n_want++;
        }

        prev = t;
    }

    w[pd->run_len + j] = (int32_t) (n - run0);

    return j + 1;
}


/* Padding from n_tok to n_pad: tokens at pos -1, a run each after the
 * slice's `runs`; table offsets of the sequences past n_seq, rows past
 * n_want, and greedy parameters for them. */
static void
kvs_cuda_pack_pad(kvs_cuda_packer_t *pk, uint32_t n_seq, uint32_t runs,
    const kvs_backend_sample_t *params, const kvs_cuda_packed_t *pd)
{
    int32_t               *w;
    uint32_t               i, j, s;
    kvs_backend_sample_t   greedy;

    w = pk->words;
    j = runs;

    greedy.temperature = 0.0f;
    greedy.top_k = 0;
    greedy.top_p = 1.0f;
    greedy.coin = 0.0f;

    for (i = pd->n_tok; i < pd->n_pad; i++) {
        w[pd->tok + i] = 0;
        w[pd->pos + i] = -1;
        w[pd->seq + i] = 0;
        w[pd->run_tok0 + j] = (int32_t) i;
        w[pd->run_len + j] = 1;
        j++;
    }

    for (s = n_seq; s < pd->n_seq; s++) {
        w[pd->table_off + s] = 0;
    }

    for (i = pd->n_want; i < pd->n_rows; i++) {
        w[pd->rows + i] = 0;

        if (params != NULL) {
            memcpy(&w[pd->params + (size_t) i * KVS_CUDA_PARAM_WORDS],
                   &greedy, sizeof(kvs_backend_sample_t));
        }
    }
}
