/*
 * kvs_cpu_model: the CPU backend's weights (see kvs_cpu.h): each
 * layer's matrices found in the model's mapping and checked against the
 * shapes its hyper-parameters give, the vectors (copied to f32 when
 * stored otherwise), the RoPE tables, the packed copies of the quantized
 * matrices, and the memory all of it takes.  Split from kvs_cpu.c, which
 * keeps the K/V storage and the forward step.
 *
 * Invariants: a mat's data points into the mapping, or into the one
 * packed buffer the model owns (made once, in kvs_cpu_model_new(), on
 * AVX-512 VNNI CPUs); what the model owns is freed by
 * kvs_cpu_model_free(), and a load that fails frees what it made.
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include "base/kvs_buf.h"
#include "base/kvs_threads.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "kvs_cpu_impl.h"
#include "kvs_cpu_qdot.h"


static int kvs_cpu_mat(const kvs_model_t *m, const char *name, uint64_t ne0,
    uint64_t ne1, int optional, kvs_cpu_mat_t *out, kvs_err_t *err);
static int kvs_cpu_vec(kvs_cpu_model_t *cm, const char *name, uint64_t ne0,
    int optional, const float **out, kvs_err_t *err);
static void kvs_cpu_view(kvs_cpu_mat_t *dst, const kvs_cpu_mat_t *src,
    uint32_t r0, uint32_t rows);
static void kvs_cpu_model_free_owned(kvs_cpu_model_t *cm);
static size_t kvs_cpu_pack_size(const kvs_cpu_model_t *cm);
static int kvs_cpu_pack(kvs_cpu_model_t *cm, kvs_err_t *err);
static int kvs_cpu_model_load(kvs_cpu_model_t **out, const kvs_model_t *m,
    int pack, kvs_err_t *err);


/* A weight matrix of ne1 rows of ne0 elements, left in the mapping. */
static int
kvs_cpu_mat(const kvs_model_t *m, const char *name, uint64_t ne0,
    uint64_t ne1, int optional, kvs_cpu_mat_t *out, kvs_err_t *err)
{
    int                          rc;
    size_t                       row;
    const kvs_quant_type_t      *q;
    const kvs_gguf_tensor_t     *t;
    const kvs_ggml_type_info_t  *info;

    memset(out, 0, sizeof(kvs_cpu_mat_t));

    rc = kvs_model_tensor(m, "cpu backend", name, ne0, ne1, optional, &t,
                          err);
    if (rc != KVS_OK || t == NULL) {
        return rc;
    }

    /* any type of kvs_quant's table: F32, F16, BF16 and Q8_0 have their
     * own kernels, the others go through the table's row conversion */
    rc = kvs_quant_check(name, t->type, err);
    if (rc != KVS_OK) {
        return kvs_err_prefix(err, "cpu backend");
    }

    q = kvs_quant_type(t->type);
    info = kvs_ggml_type_info(t->type);

    if (info == NULL || ne0 % info->block != 0) {
        return kvs_err_set(err, KVS_EFORMAT, "cpu backend: tensor %s is "
                           "%s with rows of %" PRIu64 " elements, not a "
                           "multiple of its block", name,
                           kvs_ggml_type_name(t->type), ne0);
    }

    row = ne0 / info->block * info->size;

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
    out->deq = q->dequantize;
    out->qd = kvs_cpu_qdot_find(t->type);
    out->rows = (uint32_t) ne1;
    out->cols = (uint32_t) ne0;

    return KVS_OK;
}


/* dst := rows r0 .. r0 + rows of src (before packing): a fused
 * tensor's part, an ordinary matrix to every kernel.  src may be dst. */
static void
kvs_cpu_view(kvs_cpu_mat_t *dst, const kvs_cpu_mat_t *src, uint32_t r0,
    uint32_t rows)
{
    kvs_cpu_mat_t  w;

    w = *src;
    w.data = (const uint8_t *) src->data + (size_t) r0 * src->row_bytes;
    w.rows = rows;
    *dst = w;
}


/* A vector's floats: F32 in the mapping, or any other table type
 * converted into a copy that cm owns. */
static int
kvs_cpu_vec(kvs_cpu_model_t *cm, const char *name, uint64_t ne0,
    int optional, const float **out, kvs_err_t *err)
{
    int                       rc;
    float                    *f, **owned;
    const kvs_gguf_tensor_t  *t;

    *out = NULL;

    rc = kvs_model_tensor(cm->model, "cpu backend", name, ne0, 0, optional,
                          &t, err);
    if (rc != KVS_OK || t == NULL) {
        return rc;
    }

    if (t->type == KVS_GGML_F32) {
        cm->vec_mapped += ne0 * sizeof(float);
        *out = t->data;
        return KVS_OK;
    }

    rc = kvs_quant_check(name, t->type, err);
    if (rc != KVS_OK) {
        return kvs_err_prefix(err, "cpu backend");
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

    /* the block check (a vector of a block type) happens here */
    rc = kvs_quant_dequantize(t->type, t->data, f, ne0, err);
    if (rc != KVS_OK) {
        free(f);
        return kvs_err_prefix(err, "cpu backend: tensor %s", name);
    }

    cm->owned[cm->n_owned++] = f;
    cm->vec_owned += ne0 * sizeof(float);
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
    free(cm->pack_mem);
    cm->pack_mem = NULL;
}


/*
 * On AVX-512 VNNI CPUs, every quantized matrix of a product (Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K .. Q6_K, IQ4_XS; not tok_embd, which is
 * only looked up) packed for kvs_cpu_q8p_rows_avx512(),
 * kvs_cpu_qlp_rows_avx512() or kvs_cpu_qkp_rows_avx512() into one
 * buffer (kvs_cpu_wpack_fill): the product kernel then reads 16 rows per
 * vector.  Nothing to do elsewhere, or for other types.
 */
static size_t
kvs_cpu_pack_size(const kvs_cpu_model_t *cm)
{
    size_t                  total;
    uint32_t                l;
    const kvs_cpu_layer_t  *ly;

    if (kvs_cpu_simd() < KVS_CPU_SIMD_AVX512) {
        return 0;
    }

    total = kvs_cpu_wpack_size(&cm->output);

    for (l = 0; l < cm->hp.n_layer; l++) {
        ly = &cm->layers[l];

        total += kvs_cpu_wpack_size(&ly->wq)
                 + kvs_cpu_wpack_size(&ly->wk)
                 + kvs_cpu_wpack_size(&ly->wv)
                 + kvs_cpu_wpack_size(&ly->wo)
                 + kvs_cpu_wpack_size(&ly->w1)
                 + kvs_cpu_wpack_size(&ly->w2)
                 + kvs_cpu_wpack_size(&ly->w3);
    }

    return total;
}


/* bytes of a huge page: the packed weights' alignment from this size */
#define KVS_CPU_HUGE  ((size_t) 2 << 20)


static int
kvs_cpu_pack(kvs_cpu_model_t *cm, kvs_err_t *err)
{
    int             huge;
    size_t          total, size, cap;
    uint8_t        *p;
    uint32_t        l, m, n_mats;
    kvs_cpu_mat_t  *mats[8], *w;

    total = kvs_cpu_pack_size(cm);

    if (total == 0) {
        return KVS_OK;
    }

    /* on 2 MB pages where Linux gives them on request: a decode step
     * streams every packed weight, and on 4 KB pages that is a TLB miss
     * every 4 KB (1.1B Q4_0 batch-1 decode, docs/performance.md) */
    huge = total >= KVS_CPU_HUGE;
    cap = huge ? (total + KVS_CPU_HUGE - 1) & ~(KVS_CPU_HUGE - 1) : total;
    cm->pack_mem = aligned_alloc(huge ? KVS_CPU_HUGE : 64, cap);
    if (cm->pack_mem == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cpu backend: out of memory "
                           "for %zu bytes of packed weights", total);
    }

#ifdef MADV_HUGEPAGE
    if (huge) {
        /* advice only: without it the pages are 4 KB, nothing else */
        (void) madvise(cm->pack_mem, cap, MADV_HUGEPAGE);
    }
#endif

    p = cm->pack_mem;

    for (l = 0; l <= cm->hp.n_layer; l++) {
        if (l == cm->hp.n_layer) {
            mats[0] = &cm->output;
            n_mats = 1;

        } else {
            mats[0] = &cm->layers[l].wq;
            mats[1] = &cm->layers[l].wk;
            mats[2] = &cm->layers[l].wv;
            mats[3] = &cm->layers[l].wo;
            mats[4] = &cm->layers[l].w1;
            mats[5] = &cm->layers[l].w2;
            mats[6] = &cm->layers[l].w3;
            n_mats = 7;
        }

        for (m = 0; m < n_mats; m++) {
            w = mats[m];
            size = kvs_cpu_wpack_size(w);

            if (size != 0) {
                kvs_cpu_wpack_fill(w, p);
                w->pack = p;
                p += size;
            }
        }
    }

    return KVS_OK;
}


int
kvs_cpu_model_new(kvs_cpu_model_t **out, const kvs_model_t *m,
    kvs_err_t *err)
{
    return kvs_cpu_model_load(out, m, 1, err);
}


int
kvs_cpu_model_footprint(const kvs_model_t *m, uint64_t *mapped,
    uint64_t *owned, kvs_err_t *err)
{
    int               rc;
    kvs_cpu_model_t  *cm;

    *mapped = 0;
    *owned = 0;

    /* resolved and sized as a load would, but not repacked: asking
     * what the weights take must not cost their copy */
    rc = kvs_cpu_model_load(&cm, m, 0, err);
    if (rc != KVS_OK) {
        return rc;
    }

    kvs_cpu_model_mem(cm, mapped, owned);
    kvs_cpu_model_free(cm);

    return KVS_OK;
}


/*
 * A matrix's bytes count in the mapping unless it is repacked (at this
 * SIMD level, whether or not cm was packed yet): its products then read
 * the copy, and the mapping's pages only once, at load.  tok_embd is
 * never repacked (only looked up), so a tied output packed for its
 * products leaves it counted once, in the mapping.
 */
void
kvs_cpu_model_mem(const kvs_cpu_model_t *cm, uint64_t *mapped,
    uint64_t *owned)
{
    int                     packs;
    size_t                  pack;
    uint32_t                l, i;
    uint64_t                map;
    const kvs_cpu_mat_t    *mats[7];
    const kvs_cpu_layer_t  *ly;

    pack = kvs_cpu_pack_size(cm);
    packs = pack > 0;

#define KVS_CPU_MAPPED(w)                                                    \
    (packs && kvs_cpu_wpack_size(w) != 0                                     \
     ? 0 : (uint64_t) (w)->rows * (w)->row_bytes)

    map = cm->vec_mapped + (uint64_t) cm->tok_embd.rows
                           * cm->tok_embd.row_bytes;

    if (cm->output.data != cm->tok_embd.data) {
        map += KVS_CPU_MAPPED(&cm->output);
    }

    for (l = 0; l < cm->hp.n_layer; l++) {
        ly = &cm->layers[l];
        mats[0] = &ly->wq;
        mats[1] = &ly->wk;
        mats[2] = &ly->wv;
        mats[3] = &ly->wo;
        mats[4] = &ly->w1;
        mats[5] = &ly->w2;
        mats[6] = &ly->w3;

        for (i = 0; i < 7; i++) {
            map += KVS_CPU_MAPPED(mats[i]);
        }
    }

#undef KVS_CPU_MAPPED

    *mapped = map;
    *owned = cm->vec_owned + pack;
}


static int
kvs_cpu_model_load(kvs_cpu_model_t **out, const kvs_model_t *m, int pack,
    kvs_err_t *err)
{
    int                       rc;
    char                      name[64];
    uint32_t                  l, e, f, q, kd, vd, o;
    const char               *fname;
    const float              *freqs;
    kvs_hparams_t             swa_hp;
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

    cm->layers = calloc(hp->n_layer, sizeof(kvs_cpu_layer_t));
    if (cm->layers == NULL) {
        free(cm);
        return kvs_err_set(err, KVS_ENOMEM, "cpu backend: out of memory");
    }

    e = hp->n_embd;
    f = hp->n_ff;
    q = hp->q_width;
    kd = hp->k_width;
    vd = hp->v_width;
    o = hp->o_width;

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

        if (hp->fused_qkv) {
            /* Q, K and V rows of one tensor, in that order */
            KVS_CPU_LM(wq, "attn_qkv.weight", e, (uint64_t) q + kd + vd);
            kvs_cpu_view(&ly->wk, &ly->wq, q, kd);
            kvs_cpu_view(&ly->wv, &ly->wq, q + kd, vd);
            kvs_cpu_view(&ly->wq, &ly->wq, 0, q);

        } else {
            KVS_CPU_LM(wq, "attn_q.weight", e, q);
            KVS_CPU_LM(wk, "attn_k.weight", e, kd);
            KVS_CPU_LM(wv, "attn_v.weight", e, vd);
            KVS_CPU_LV(bq, "attn_q.bias", q, 1);
            KVS_CPU_LV(bk, "attn_k.bias", kd, 1);
            KVS_CPU_LV(bv, "attn_v.bias", vd, 1);
        }

        if (hp->qk_norm) {
            KVS_CPU_LV(q_norm, "attn_q_norm.weight", hp->head_dim_k, 0);
            KVS_CPU_LV(k_norm, "attn_k_norm.weight", hp->head_dim_k, 0);
        }

        KVS_CPU_LM(wo, "attn_output.weight", o, e);
        KVS_CPU_LV(ffn_norm, "ffn_norm.weight", e, 0);

        if (hp->post_norms) {
            KVS_CPU_LV(post_attn_norm, "post_attention_norm.weight", e, 0);
            KVS_CPU_LV(post_ffn_norm, "post_ffw_norm.weight", e, 0);
        }
        KVS_CPU_LM(w2, "ffn_down.weight", f, e);

        if (hp->fused_gate_up) {
            /* gate rows first, then up: llama.cpp's fused SwiGLU split */
            KVS_CPU_LM(w3, "ffn_up.weight", e, 2 * (uint64_t) f);
            kvs_cpu_view(&ly->w1, &ly->w3, 0, f);
            kvs_cpu_view(&ly->w3, &ly->w3, f, f);

        } else {
            KVS_CPU_LM(w1, "ffn_gate.weight", e, f);
            KVS_CPU_LM(w3, "ffn_up.weight", e, f);
        }

#undef KVS_CPU_LM
#undef KVS_CPU_LV
    }

    /* llama.cpp stores Llama 3.1 frequency bands as rope_freqs, Phi-3's
     * LongRoPE as two sets, one of which the hyper-parameters chose */
    freqs = NULL;
    fname = kvs_hparams_rope_factors(hp);
    if (fname != NULL) {
        KVS_CPU_V(freqs, fname, hp->n_rot / 2, 0);
    }

#undef KVS_CPU_M
#undef KVS_CPU_V

    rc = kvs_rope_init(&cm->rope, hp, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    /* local layers: their own base; gemma3's unscaled, gemma2's scaled
     * as the model (kvs_hparams_t.rope_swa_scaled) */
    if (hp->rope_base_swa != 0.0) {
        swa_hp = *hp;
        swa_hp.rope_freq_base = hp->rope_base_swa;
        if (!hp->rope_swa_scaled) {
            swa_hp.rope_scaling = KVS_ROPE_SCALING_NONE;
            swa_hp.rope_factor = 1.0;
            swa_hp.rope_longrope = 0;
        }

        rc = kvs_rope_init(&cm->rope_swa, &swa_hp, err);
        if (rc != KVS_OK) {
            kvs_rope_free(&cm->rope);
            goto failed;
        }

        cm->has_rope_swa = 1;
    }

    if (freqs != NULL) {
        rc = kvs_rope_set_freq_factors(&cm->rope, freqs, hp->n_rot / 2, err);
        if (rc != KVS_OK) {
            kvs_rope_free(&cm->rope);
            kvs_rope_free(&cm->rope_swa);
            goto failed;
        }
    }

    rc = pack ? kvs_cpu_pack(cm, err) : KVS_OK;
    if (rc != KVS_OK) {
        kvs_rope_free(&cm->rope);
        kvs_rope_free(&cm->rope_swa);
        goto failed;
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
    kvs_rope_free(&cm->rope_swa);
    kvs_cpu_model_free_owned(cm);
    free(cm->layers);
    free(cm);
}
