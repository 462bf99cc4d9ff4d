/*
 * kvs_model: opens a GGUF model, reads its hyper-parameters and checks that
 * every tensor the architecture needs is there with the right shape and
 * of a type kvserve computes with (kvs_quant's table): a model that opens
 * is one every backend can load, so `nginx -t` refuses what the engine
 * would refuse, and no engine is started to fail at load.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvs_model.h"
#include "kvs_quant.h"


typedef struct {
    const char  *name;                /* "blk.%u." prefix added per layer */
    int          per_layer;
    int          optional;
    int          when;                /* KVS_W_*: which architectures */
    uint32_t     n_dims;
    int          d0, d1;              /* dimension selectors, see below */
} kvs_tensor_spec_t;

/* When a spec applies, from the hyper-parameters' architecture facts. */
enum {
    KVS_W_ALL = 0,
    KVS_W_BIAS,                       /* hp->qkv_bias: required */
    KVS_W_SPLIT_QKV,                  /* !hp->fused_qkv */
    KVS_W_FUSED_QKV,                  /* hp->fused_qkv */
    KVS_W_SPLIT_FFN,                  /* !hp->fused_gate_up */
    KVS_W_QK_NORM,                    /* hp->qk_norm */
    KVS_W_LONGROPE,                   /* hp->rope_longrope */
    KVS_W_POST                        /* hp->post_norms */
};

enum {
    KVS_D_EMBD = 1,                   /* n_embd */
    KVS_D_VOCAB,                      /* n_vocab */
    KVS_D_FF,                         /* n_ff */
    KVS_D_Q,                          /* q_width */
    KVS_D_K,                          /* k_width */
    KVS_D_V,                          /* v_width */
    KVS_D_O,                          /* o_width */
    KVS_D_HEAD,                       /* head_dim_k */
    KVS_D_QKV,                        /* q + k + v widths */
    KVS_D_UP,                         /* n_ff, twice that when fused */
    KVS_D_ROT2                        /* n_rot / 2 */
};

static const kvs_tensor_spec_t  kvs_llama_tensors[] = {
    { "token_embd.weight",  0, 0, KVS_W_ALL, 2, KVS_D_EMBD, KVS_D_VOCAB },
    { "output_norm.weight", 0, 0, KVS_W_ALL, 1, KVS_D_EMBD, 0 },
    { "output.weight",      0, 1, KVS_W_ALL, 2, KVS_D_EMBD, KVS_D_VOCAB },
    { "rope_factors_long.weight", 0, 0, KVS_W_LONGROPE, 1, KVS_D_ROT2, 0 },
    { "rope_factors_short.weight", 0, 0, KVS_W_LONGROPE, 1, KVS_D_ROT2,
      0 },
    { "attn_norm.weight",   1, 0, KVS_W_ALL, 1, KVS_D_EMBD, 0 },
    { "attn_q.weight",      1, 0, KVS_W_SPLIT_QKV, 2, KVS_D_EMBD, KVS_D_Q },
    { "attn_k.weight",      1, 0, KVS_W_SPLIT_QKV, 2, KVS_D_EMBD, KVS_D_K },
    { "attn_v.weight",      1, 0, KVS_W_SPLIT_QKV, 2, KVS_D_EMBD, KVS_D_V },
    { "attn_qkv.weight",    1, 0, KVS_W_FUSED_QKV, 2, KVS_D_EMBD,
      KVS_D_QKV },
    { "attn_q_norm.weight", 1, 0, KVS_W_QK_NORM, 1, KVS_D_HEAD, 0 },
    { "attn_k_norm.weight", 1, 0, KVS_W_QK_NORM, 1, KVS_D_HEAD, 0 },
    { "attn_output.weight", 1, 0, KVS_W_ALL, 2, KVS_D_O, KVS_D_EMBD },
    { "attn_q.bias",        1, 0, KVS_W_BIAS, 1, KVS_D_Q, 0 },
    { "attn_k.bias",        1, 0, KVS_W_BIAS, 1, KVS_D_K, 0 },
    { "attn_v.bias",        1, 0, KVS_W_BIAS, 1, KVS_D_V, 0 },
    { "post_attention_norm.weight", 1, 0, KVS_W_POST, 1, KVS_D_EMBD, 0 },
    { "ffn_norm.weight",    1, 0, KVS_W_ALL, 1, KVS_D_EMBD, 0 },
    { "post_ffw_norm.weight", 1, 0, KVS_W_POST, 1, KVS_D_EMBD, 0 },
    { "ffn_gate.weight",    1, 0, KVS_W_SPLIT_FFN, 2, KVS_D_EMBD,
      KVS_D_FF },
    { "ffn_up.weight",      1, 0, KVS_W_ALL, 2, KVS_D_EMBD, KVS_D_UP },
    { "ffn_down.weight",    1, 0, KVS_W_ALL, 2, KVS_D_FF, KVS_D_EMBD },
};

/* Tensors an architecture's forward would silently skip: refused, so a
 * file is computed as written or not at all. */
static const char  *kvs_model_unused_bias[] = {
    "attn_q.bias", "attn_k.bias", "attn_v.bias"
};


static int
kvs_model_applies(const kvs_hparams_t *hp, int when)
{
    switch (when) {
    case KVS_W_BIAS:      return hp->qkv_bias;
    case KVS_W_SPLIT_QKV: return !hp->fused_qkv;
    case KVS_W_FUSED_QKV: return hp->fused_qkv;
    case KVS_W_SPLIT_FFN: return !hp->fused_gate_up;
    case KVS_W_QK_NORM:   return hp->qk_norm;
    case KVS_W_LONGROPE:  return hp->rope_longrope != 0;
    case KVS_W_POST:      return hp->post_norms;
    default:              return 1;
    }
}


static uint64_t
kvs_model_dim(const kvs_hparams_t *hp, int d)
{
    switch (d) {
    case KVS_D_EMBD:  return hp->n_embd;
    case KVS_D_VOCAB: return hp->n_vocab;
    case KVS_D_FF:    return hp->n_ff;
    case KVS_D_Q:     return hp->q_width;
    case KVS_D_K:     return hp->k_width;
    case KVS_D_V:     return hp->v_width;
    case KVS_D_O:     return hp->o_width;
    case KVS_D_HEAD:  return hp->head_dim_k;
    case KVS_D_QKV:   return (uint64_t) hp->q_width + hp->k_width
                             + hp->v_width;
    case KVS_D_UP:    return (uint64_t) hp->n_ff
                             * (hp->fused_gate_up ? 2 : 1);
    case KVS_D_ROT2:  return hp->n_rot / 2;
    default:          return 1;
    }
}


static int
kvs_model_check_one(const kvs_gguf_t *g, const kvs_hparams_t *hp,
    const kvs_tensor_spec_t *spec, const char *name, kvs_err_t *err)
{
    uint64_t                  want0, want1;
    const kvs_gguf_tensor_t  *t;

    t = kvs_gguf_find_tensor(g, name);
    if (t == NULL) {
        if (spec->optional) {
            return KVS_OK;
        }
        return kvs_err_set(err, KVS_EFORMAT, "missing tensor '%s'", name);
    }

    want0 = kvs_model_dim(hp, spec->d0);
    want1 = kvs_model_dim(hp, spec->d1);

    if (t->n_dims != spec->n_dims || t->ne[0] != want0
        || t->ne[1] != want1)
    {
        return kvs_err_set(err, KVS_EFORMAT, "tensor '%s' has shape "
                           "[%llu, %llu] (%u dims), expected [%llu, %llu]",
                           name, (unsigned long long) t->ne[0],
                           (unsigned long long) t->ne[1], t->n_dims,
                           (unsigned long long) want0,
                           (unsigned long long) want1);
    }

    /* the table is the one list of computable types; the reader already
     * checked that the row length is a multiple of the type's block */
    return kvs_quant_check(name, t->type, err);
}


int
kvs_model_check_tensors(const kvs_gguf_t *g, const kvs_hparams_t *hp,
    kvs_err_t *err)
{
    int                       rc;
    char                      name[96];
    size_t                    i;
    uint32_t                  l;
    const kvs_tensor_spec_t  *spec;

    for (i = 0; i < sizeof(kvs_llama_tensors) / sizeof(kvs_llama_tensors[0]);
         i++)
    {
        spec = &kvs_llama_tensors[i];

        if (!kvs_model_applies(hp, spec->when)) {
            continue;
        }

        for (l = 0; l < (spec->per_layer ? hp->n_layer : 1); l++) {
            if (spec->per_layer) {
                snprintf(name, sizeof(name), "blk.%u.%s", l, spec->name);
            } else {
                snprintf(name, sizeof(name), "%s", spec->name);
            }

            rc = kvs_model_check_one(g, hp, spec, name, err);
            if (rc != KVS_OK) {
                return rc;
            }
        }
    }

    /* biases where the forward has no place for them (qwen3 norms Q
     * and K instead; phi3's fused QKV and gemma have none) */
    for (l = 0; (hp->qk_norm || hp->fused_qkv || hp->post_norms)
                && l < hp->n_layer; l++)
    {
        for (i = 0; i < sizeof(kvs_model_unused_bias) / sizeof(char *);
             i++)
        {
            snprintf(name, sizeof(name), "blk.%u.%s", l,
                     kvs_model_unused_bias[i]);

            if (kvs_gguf_find_tensor(g, name) != NULL) {
                return kvs_err_set(err, KVS_EUNSUPPORTED, "tensor '%s': "
                                   "architecture %s has no Q/K/V biases",
                                   name, hp->arch);
            }
        }
    }

    return KVS_OK;
}


int
kvs_model_open(kvs_model_t **out, const char *path, kvs_err_t *err)
{
    int           rc;
    struct stat   st;
    kvs_model_t  *m;

    *out = NULL;

    if (stat(path, &st) == -1) {
        return kvs_err_set(err, KVS_EIO, "cannot open \"%s\": %s", path,
                           strerror(errno));
    }

    m = calloc(1, sizeof(kvs_model_t));
    if (m == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    m->file_size = (uint64_t) st.st_size;
    m->mtime = (int64_t) st.st_mtime;
    m->mtime_ns = (int64_t) st.st_mtim.tv_sec * 1000000000
                  + st.st_mtim.tv_nsec;
    m->dev = (uint64_t) st.st_dev;
    m->ino = (uint64_t) st.st_ino;

    rc = kvs_gguf_open(&m->gguf, path, err);
    if (rc != KVS_OK) {
        free(m);
        return rc;
    }

    rc = kvs_hparams_read(&m->hp, m->gguf, err);
    if (rc == KVS_OK) {
        rc = kvs_model_check_tensors(m->gguf, &m->hp, err);
    }

    if (rc != KVS_OK) {
        kvs_err_prefix(err, "\"%s\"", path);
        kvs_model_close(m);
        return rc;
    }

    *out = m;

    return KVS_OK;
}


void
kvs_model_close(kvs_model_t *m)
{
    if (m != NULL) {
        kvs_gguf_close(m->gguf);
        free(m);
    }
}


int
kvs_model_tensor(const kvs_model_t *m, const char *who, const char *name,
    uint64_t ne0, uint64_t ne1, int optional, const kvs_gguf_tensor_t **out,
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

        return kvs_err_set(err, KVS_ENOTFOUND, "%s: tensor %s is missing",
                           who, name);
    }

    want = ne1 == 0 ? ne0 : ne0 * ne1;

    if (t->ne[0] != ne0 || t->nelem != want) {
        return kvs_err_set(err, KVS_EFORMAT, "%s: tensor %s has %" PRIu64
                           " x %" PRIu64 " elements, expected %" PRIu64
                           " x %" PRIu64, who, name, t->ne[0],
                           t->ne[0] ? t->nelem / t->ne[0] : 0, ne0,
                           ne1 == 0 ? 1 : ne1);
    }

    *out = t;

    return KVS_OK;
}
