/*
 * kvs_gen_lora: generated LoRA adapters and merged models (see
 * kvs_gen_lora.h).  The base is opened with kvs_model_open(), so its
 * shapes are checked before an adapter is shaped after them; a merge
 * opens the adapter against that base (kvs_lora_open), so it merges
 * only what the serving path would accept.
 *
 * Values: A is uniform with std 1 / sqrt(n_in) (the usual Kaiming-style
 * start); B is uniform with the std that makes scale * B A's entries
 * have std `strength` x 0.02, the generated base weights' std, so the
 * adapter changes a model's greedy tokens without swamping it.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_hash.h"
#include "kvs_gen_lora.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"
#include "model/kvs_quant.h"

#define KVS_GEN_LORA_STD  0.02f       /* kvs_gen's weight std */


int
kvs_gen_lora_targets(const char *list, uint32_t *mask, kvs_err_t *err)
{
    int          t;
    size_t       n;
    const char  *p, *comma;

    *mask = 0;
    p = list;

    for ( ;; ) {
        comma = strchr(p, ',');
        n = comma != NULL ? (size_t) (comma - p) : strlen(p);

        t = kvs_lora_target_parse(p, n);
        if (t < 0) {
            return kvs_err_set(err, KVS_EINVAL, "--targets: unknown target "
                               "\"%.*s\" (q, k, v, o, gate, up, down, qkv)",
                               (int) (n > 32 ? 32 : n), p);
        }

        *mask |= 1u << t;

        if (comma == NULL) {
            return KVS_OK;
        }

        p = comma + 1;
    }
}


typedef struct {
    const kvs_gguf_t           *base;
    const kvs_gen_lora_spec_t  *spec;
} kvs_gen_lora_ctx_t;


static int
kvs_gen_lora_fill(void *arg, const char *name, void *dst, uint64_t nbytes,
    kvs_err_t *err)
{
    char                      w[KVS_GGUF_MAX_NAME + 1];
    size_t                    len;
    float                    *f, scale, std, amp;
    uint64_t                  rng, i;
    kvs_gen_lora_ctx_t       *c;
    const kvs_gguf_tensor_t  *t;

    c = arg;
    len = strlen(name);

    if (len <= 7 || len - 7 >= sizeof(w)) {
        return kvs_err_set(err, KVS_EINVAL, "no tensor %s", name);
    }

    memcpy(w, name, len - 7);
    w[len - 7] = '\0';

    t = kvs_gguf_find_tensor(c->base, w);
    if (t == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "no base tensor %s", w);
    }

    scale = c->spec->alpha != 0.0f ? c->spec->alpha / (float) c->spec->rank
                                   : 1.0f;
    std = 1.0f / sqrtf((float) t->ne[0]);

    if (name[len - 1] == 'b') {
        std = c->spec->strength * KVS_GEN_LORA_STD
              / (scale * sqrtf((float) c->spec->rank) * std);
    }

    amp = std * 1.7320508f;
    rng = kvs_fnv1a64(c->spec->seed, name, len);
    f = dst;

    for (i = 0; i < nbytes / sizeof(float); i++) {
        f[i] = amp * (2.0f * (float) (kvs_splitmix64(&rng) >> 40)
                      / (float) (1 << 24) - 1.0f);
    }

    return KVS_OK;
}


int
kvs_gen_lora_write(const char *base_path, const kvs_gen_lora_spec_t *spec,
    const char *path, kvs_err_t *err)
{
    int                       rc, t;
    char                      name[KVS_GGUF_MAX_NAME + 16];
    uint32_t                  l;
    uint64_t                  ne[2];
    kvs_model_t              *m;
    kvs_gguf_writer_t        *w;
    kvs_gen_lora_ctx_t        ctx;
    const kvs_gguf_tensor_t  *bt;

    if (spec->rank == 0 || spec->rank > KVS_LORA_MAX_RANK) {
        return kvs_err_set(err, KVS_EINVAL, "--rank %u: expected 1..%u",
                           spec->rank, KVS_LORA_MAX_RANK);
    }

    if (spec->targets == 0
        || spec->targets >= (1u << KVS_LORA_N_TARGETS))
    {
        return kvs_err_set(err, KVS_EINVAL, "--targets: none given");
    }

    if (!isfinite(spec->alpha) || spec->alpha < 0.0f
        || !isfinite(spec->strength) || spec->strength <= 0.0f)
    {
        return kvs_err_set(err, KVS_EINVAL, "--alpha %g / strength %g: "
                           "expected alpha >= 0 and strength > 0",
                           spec->alpha, spec->strength);
    }

    rc = kvs_model_open(&m, base_path, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_gguf_writer_new(&w, 3, err);
    if (rc != KVS_OK) {
        kvs_model_close(m);
        return rc;
    }

    kvs_gguf_set_str(w, "general.architecture", m->hp.arch);
    kvs_gguf_set_str(w, "general.type", "adapter");
    kvs_gguf_set_str(w, "general.name", "kvserve gen-lora");
    kvs_gguf_set_str(w, "adapter.type", "lora");
    kvs_gguf_set_f32(w, "adapter.lora.alpha", spec->alpha);

    for (l = 0; rc == KVS_OK && l < m->hp.n_layer; l++) {
        for (t = 0; t < KVS_LORA_N_TARGETS; t++) {
            if (!(spec->targets & (1u << t))) {
                continue;
            }

            snprintf(name, sizeof(name), "blk.%u.%s.weight", l,
                     kvs_lora_target_stem((kvs_lora_target_t) t));

            bt = kvs_gguf_find_tensor(m->gguf, name);
            if (bt == NULL || bt->n_dims != 2) {
                rc = kvs_err_set(err, KVS_EINVAL, "--targets %s: the base "
                                 "(%s) has no matrix %s",
                                 kvs_lora_target_name((kvs_lora_target_t) t),
                                 m->hp.arch, name);
                break;
            }

            ne[0] = bt->ne[0];
            ne[1] = spec->rank;
            snprintf(name, sizeof(name), "blk.%u.%s.weight.lora_a", l,
                     kvs_lora_target_stem((kvs_lora_target_t) t));
            kvs_gguf_w_tensor(w, name, KVS_GGML_F32, 2, ne, NULL);

            ne[0] = spec->rank;
            ne[1] = bt->ne[1];
            snprintf(name, sizeof(name), "blk.%u.%s.weight.lora_b", l,
                     kvs_lora_target_stem((kvs_lora_target_t) t));
            kvs_gguf_w_tensor(w, name, KVS_GGML_F32, 2, ne, NULL);
        }
    }

    if (rc == KVS_OK) {
        ctx.base = m->gguf;
        ctx.spec = spec;
        rc = kvs_gguf_writer_write(w, path, kvs_gen_lora_fill, &ctx, err);
    }

    kvs_gguf_writer_free(w);
    kvs_model_close(m);

    return rc;
}


typedef struct {
    const kvs_gguf_t  *base;
    const kvs_lora_t  *lora;
} kvs_gen_merge_ctx_t;


/* An adapted matrix: W dequantized to f32, plus scale * B A. */
static int
kvs_gen_lora_merge_fill(void *arg, const char *name, void *dst,
    uint64_t nbytes, kvs_err_t *err)
{
    int                       rc;
    float                    *w, c;
    uint32_t                  i, r;
    uint64_t                  o, k;
    kvs_gen_merge_ctx_t      *mc;
    const kvs_lora_mat_t     *m;
    const kvs_gguf_tensor_t  *t;

    mc = arg;
    m = NULL;

    for (i = 0; i < mc->lora->n_mat; i++) {
        if (strcmp(mc->lora->mat[i].name, name) == 0) {
            m = &mc->lora->mat[i];
            break;
        }
    }

    t = kvs_gguf_find_tensor(mc->base, name);

    if (m == NULL || t == NULL || nbytes != t->nelem * sizeof(float)) {
        return kvs_err_set(err, KVS_EINVAL, "merge: no adapted tensor %s",
                           name);
    }

    w = dst;

    rc = kvs_quant_dequantize(t->type, t->data, w, (size_t) t->nelem, err);
    if (rc != KVS_OK) {
        return kvs_err_prefix(err, "merge: %s", name);
    }

    for (o = 0; o < m->n_out; o++) {
        for (r = 0; r < m->rank; r++) {
            c = m->scale * m->b[o * m->rank + r];
            for (k = 0; k < m->n_in; k++) {
                w[o * m->n_in + k] += c * m->a[(uint64_t) r * m->n_in + k];
            }
        }
    }

    return KVS_OK;
}


int
kvs_gen_lora_merge(const char *base_path, const char *adapter_path,
    const char *path, kvs_err_t *err)
{
    int                       rc, adapted;
    char                      name[KVS_GGUF_MAX_NAME + 1];
    uint32_t                  k;
    uint64_t                  i;
    kvs_lora_t               *l;
    kvs_model_t              *m;
    kvs_gguf_writer_t        *w;
    kvs_gen_merge_ctx_t       ctx;
    const kvs_gguf_tensor_t  *t;

    rc = kvs_model_open(&m, base_path, err);
    if (rc != KVS_OK) {
        return rc;
    }

    l = NULL;
    w = NULL;

    rc = kvs_lora_open(&l, adapter_path, m, err);
    if (rc != KVS_OK) {
        goto done;
    }

    rc = kvs_gguf_writer_new(&w, 3, err);
    if (rc != KVS_OK) {
        goto done;
    }

    for (i = 0; rc == KVS_OK && i < kvs_gguf_n_kv(m->gguf); i++) {
        rc = kvs_gguf_w_copy(w, kvs_gguf_kv_at(m->gguf, i));
    }

    for (i = 0; rc == KVS_OK && i < kvs_gguf_n_tensors(m->gguf); i++) {
        t = kvs_gguf_tensor_at(m->gguf, i);
        snprintf(name, sizeof(name), "%.*s", (int) t->name.len, t->name.ptr);

        adapted = 0;
        for (k = 0; k < l->n_mat; k++) {
            if (strcmp(l->mat[k].name, name) == 0) {
                adapted = 1;
                break;
            }
        }

        rc = kvs_gguf_w_tensor(w, name, adapted ? KVS_GGML_F32 : t->type,
                               t->n_dims, t->ne, adapted ? NULL : t->data);
    }

    if (rc != KVS_OK) {
        rc = kvs_err_set(err, rc, "merge: cannot copy the base's header");
        goto done;
    }

    ctx.base = m->gguf;
    ctx.lora = l;
    rc = kvs_gguf_writer_write(w, path, kvs_gen_lora_merge_fill, &ctx, err);

done:

    kvs_gguf_writer_free(w);
    kvs_lora_close(l);
    kvs_model_close(m);

    return rc;
}
