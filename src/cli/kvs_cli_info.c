/*
 * kvs_cli_info: `kvserve info`: what a GGUF file holds and what serving it
 * costs.  Text output is for people (long arrays abridged); --json prints
 * every value so that other GGUF readers can be compared with ours.
 *
 * Tensors of a type kvserve cannot compute with (outside kvs_quant's
 * table) are marked in both outputs ("computable": false, and the list
 * "not_computable"), so a file that would be refused at load says why
 * before anyone configures it.
 *
 * What the weights take in memory is said per backend, as each would
 * hold them loaded on this host: the CPU backend's bytes in the file's
 * mapping and in its own copies (kvs_cpu_model_footprint, the figures
 * its engine logs and /v1/models shows), the CUDA backend's device bytes
 * after its load-time conversion (kvs_cuda_plan_weights), and the K/V
 * element each caches.
 *
 * JSON conventions: integers above INT64_MAX, non-finite floats and
 * strings that are not valid UTF-8 cannot be JSON numbers or strings, so
 * they are written as "18446744073709551615", "nan"/"inf"/"-inf" and
 * {"hex": "..."} respectively.
 */

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kvs_cpu.h"
#include "backend/cuda/kvs_cuda_plan.h"
#include "base/kvs_hash.h"
#include "kv/kvs_kv_pool.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"
#include "model/kvs_hparams.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"
#include "model/kvs_quant.h"
#include "kvs_cli.h"

#define KVS_INFO_LONG_CTX  200000     /* the long-context example, tokens */
#define KVS_INFO_SHOW      6          /* array items shown in text mode */


/* The weights' memory per backend (rc KVS_OK, else err says why that
 * backend would refuse the file), and the file's tensor bytes by type. */
typedef struct {
    int        cpu_rc;
    uint64_t   cpu_mapped;
    uint64_t   cpu_owned;
    kvs_err_t  cpu_err;
    int        cpu_kv;                /* KVS_BACKEND_KV_*: the dtype its
                                         cache would store */
    int        cuda_rc;
    int        cuda_kv;               /* KVS_BACKEND_KV_* */
    uint64_t   cuda_device;
    kvs_err_t  cuda_err;
    uint64_t   by_type[KVS_GGML_TYPE_END];
} kvs_info_mem_t;


const char *
kvs_cli_human(double bytes, char *buf, unsigned len)
{
    int                 u;
    static const char  *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };

    for (u = 0; u < 4 && bytes >= 1024.0; u++) {
        bytes /= 1024.0;
    }

    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);

    return buf;
}


/* JSON. */

static json_t *kvs_info_json_arr(const kvs_gguf_arr_t *a);
static void kvs_info_memory(const char *path, const kvs_gguf_t *g,
    kvs_info_mem_t *mem);
static void kvs_info_kv_dtype(kvs_info_mem_t *mem, uint32_t dt,
    const kvs_hparams_t *hp);


static json_t *
kvs_info_json_str(kvs_gguf_str_t s)
{
    char     *hex;
    json_t   *j;
    uint64_t  i;

    j = json_stringn(s.ptr, s.len);
    if (j != NULL) {
        return j;
    }

    hex = malloc(s.len * 2 + 1);
    if (hex == NULL) {
        return NULL;
    }
    for (i = 0; i < s.len; i++) {
        snprintf(hex + i * 2, 3, "%02x", (unsigned char) s.ptr[i]);
    }
    hex[s.len * 2] = '\0';

    j = json_pack("{s:s}", "hex", hex);
    free(hex);

    return j;
}


/* A scalar from its little-endian encoding at p. */
static json_t *
kvs_info_json_scalar(const uint8_t *p, uint32_t type)
{
    char      buf[32];
    double    f;
    int64_t   i;
    uint64_t  u;
    float     f32;

    switch (type) {
    case KVS_GGUF_BOOL:
        return json_boolean(p[0]);
    case KVS_GGUF_F32:
    case KVS_GGUF_F64:
        if (type == KVS_GGUF_F32) {
            memcpy(&f32, p, 4);
            f = f32;
        } else {
            memcpy(&f, p, 8);
        }
        if (isnan(f)) {
            return json_string("nan");
        }
        if (isinf(f)) {
            return json_string(f > 0 ? "inf" : "-inf");
        }
        return json_real(f);
    case KVS_GGUF_U64:
        memcpy(&u, p, 8);
        if (u > (uint64_t) INT64_MAX) {
            snprintf(buf, sizeof(buf), "%" PRIu64, u);
            return json_string(buf);
        }
        return json_integer((json_int_t) u);
    default:
        break;
    }

    switch (type) {
    case KVS_GGUF_U8:  i = p[0]; break;
    case KVS_GGUF_I8:  i = (int8_t) p[0]; break;
    case KVS_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); i = v; } break;
    case KVS_GGUF_I16: { int16_t v; memcpy(&v, p, 2); i = v; } break;
    case KVS_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); i = v; } break;
    case KVS_GGUF_I32: { int32_t v; memcpy(&v, p, 4); i = v; } break;
    default:           memcpy(&i, p, 8); break;     /* I64 */
    }

    return json_integer((json_int_t) i);
}


static json_t *
kvs_info_json_arr(const kvs_gguf_arr_t *a)
{
    size_t           size;
    json_t          *items, *item;
    uint64_t         i;
    kvs_gguf_str_t   s;
    kvs_gguf_arr_t   sub;
    kvs_gguf_iter_t  it;

    items = json_array();
    if (items == NULL) {
        return NULL;
    }

    size = kvs_gguf_vtype_size(a->type);
    kvs_gguf_iter_init(&it, a);

    for (i = 0; i < a->n; i++) {
        if (size != 0) {
            item = kvs_info_json_scalar(a->data + i * size, a->type);
        } else if (a->type == KVS_GGUF_STR && kvs_gguf_iter_str(&it, &s)) {
            item = kvs_info_json_str(s);
        } else if (a->type == KVS_GGUF_ARR && kvs_gguf_iter_arr(&it, &sub)) {
            item = kvs_info_json_arr(&sub);
        } else {
            item = NULL;
        }

        if (item == NULL || json_array_append_new(items, item) != 0) {
            json_decref(items);
            return NULL;
        }
    }

    return json_pack("{s:s,s:o}", "elem", kvs_gguf_vtype_name(a->type),
                     "items", items);
}


static json_t *
kvs_info_json_value(const kvs_gguf_kv_t *kv)
{
    kvs_gguf_str_t  s;

    if (kv->type == KVS_GGUF_STR) {
        memcpy(&s.len, kv->val, 8);
        s.ptr = (const char *) kv->val + 8;
        return kvs_info_json_str(s);
    }

    if (kv->type == KVS_GGUF_ARR) {
        return kvs_info_json_arr(&kv->arr);
    }

    return kvs_info_json_scalar(kv->val, kv->type);
}


static json_t *
kvs_info_json_hparams(const kvs_hparams_t *hp, uint32_t kv_bytes)
{
    return json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,"
                     "s:s,s:f,s:i,s:b,s:I,s:I}",
                     "architecture", hp->arch,
                     "n_layer", (int) hp->n_layer,
                     "n_head", (int) hp->n_head,
                     "n_head_kv", (int) hp->n_head_kv,
                     "head_dim_k", (int) hp->head_dim_k,
                     "head_dim_v", (int) hp->head_dim_v,
                     "n_embd", (int) hp->n_embd,
                     "n_ff", (int) hp->n_ff,
                     "n_ctx_train", (int) hp->n_ctx_train,
                     "n_vocab", (int) hp->n_vocab,
                     "n_rot", (int) hp->n_rot,
                     "rope_freq_base", hp->rope_freq_base,
                     "norm_eps", hp->norm_eps,
                     "rope_scaling", kvs_rope_scaling_name(hp->rope_scaling),
                     "rope_factor", hp->rope_factor,
                     "rope_orig_ctx", (int) hp->rope_orig_ctx,
                     "tied_embeddings", hp->tied_embeddings,
                     "n_params", (json_int_t) hp->n_params,
                     "kv_bytes_per_token",
                     (json_int_t) kvs_hparams_kv_bytes_per_token(hp,
                                                                 kv_bytes));
}


/* A token's real K/V bytes in dtype kv, scales included, in blocks of
 * the default size (kvs_kv_layout). */
static uint64_t
kvs_info_kv_bpt(const kvs_hparams_t *hp, uint32_t kv)
{
    return kvs_kv_bytes_per_token(kv, hp->n_layer, hp->n_head_kv,
                                  hp->head_dim_k, hp->head_dim_v,
                                  KVS_KV_BLOCK_TOKENS);
}


static json_t *
kvs_info_json_backend(int rc, const kvs_err_t *err, uint64_t mapped,
    uint64_t owned, uint64_t device, uint32_t kv, const kvs_hparams_t *hp)
{
    if (rc != KVS_OK) {
        return json_pack("{s:s}", "error", err->msg);
    }

    return json_pack("{s:I,s:I,s:I,s:s,s:I}",
                     "weights_mapped", (json_int_t) mapped,
                     "weights_owned", (json_int_t) owned,
                     "weights_device", (json_int_t) device,
                     "kv_dtype", kvs_backend_kv_name(kv),
                     "kv_bytes_per_token",
                     (json_int_t) kvs_info_kv_bpt(hp, kv));
}


static json_t *
kvs_info_json_memory(const kvs_info_mem_t *mem, const kvs_hparams_t *hp)
{
    char       kernels[256];
    uint32_t   t;
    json_t    *o, *types, *cpu;

    types = json_object();

    for (t = 0; types != NULL && t < KVS_GGML_TYPE_END; t++) {
        if (mem->by_type[t] != 0
            && json_object_set_new(types, kvs_ggml_type_name(t),
                   json_integer((json_int_t) mem->by_type[t])) != 0)
        {
            json_decref(types);
            return NULL;
        }
    }

    o = json_pack("{s:o,s:{s:o,s:o}}", "stored_by_type", types,
                  "backends",
                  "cpu", kvs_info_json_backend(mem->cpu_rc, &mem->cpu_err,
                                               mem->cpu_mapped,
                                               mem->cpu_owned, 0,
                                               (uint32_t) mem->cpu_kv, hp),
                  "cuda", kvs_info_json_backend(mem->cuda_rc,
                                                &mem->cuda_err, 0, 0,
                                                mem->cuda_device,
                                                (uint32_t) mem->cuda_kv,
                                                hp));

    /* the kernels the CPU backend would compute with here */
    cpu = json_object_get(json_object_get(o, "backends"), "cpu");
    if (mem->cpu_rc == KVS_OK && cpu != NULL
        && json_object_set_new(cpu, "kernels",
               json_string(kvs_cpu_kernels(kernels, sizeof(kernels)))) != 0)
    {
        json_decref(o);
        return NULL;
    }

    return o;
}


static int
kvs_info_json(const kvs_gguf_t *g, const kvs_hparams_t *hp, int hp_ok,
    const char *hp_err, uint32_t kv_bytes, const kvs_info_mem_t *mem)
{
    char                      hash[24];
    char                     *text;
    json_t                   *root, *meta, *tensors, *dims, *o, *bad;
    uint32_t                  d;
    uint64_t                  i;
    const kvs_gguf_kv_t      *kv;
    const kvs_gguf_tensor_t  *t;

    meta = json_array();
    tensors = json_array();
    bad = json_array();
    root = json_pack("{s:i,s:i,s:I,s:I,s:o,s:o,s:o}",
                     "version", (int) kvs_gguf_version(g),
                     "alignment", (int) kvs_gguf_alignment(g),
                     "data_offset", (json_int_t) kvs_gguf_data_offset(g),
                     "file_size", (json_int_t) kvs_gguf_file_size(g),
                     "metadata", meta, "tensors", tensors,
                     "not_computable", bad);
    if (root == NULL) {
        return 1;
    }

    for (i = 0; i < kvs_gguf_n_kv(g); i++) {
        kv = kvs_gguf_kv_at(g, i);
        o = json_pack("{s:s#,s:s,s:o}", "key", kv->key.ptr,
                      (int) kv->key.len, "type",
                      kvs_gguf_vtype_name(kv->type), "value",
                      kvs_info_json_value(kv));
        if (o == NULL || json_array_append_new(meta, o) != 0) {
            json_decref(root);
            return 1;
        }
    }

    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        t = kvs_gguf_tensor_at(g, i);
        dims = json_array();
        for (d = 0; d < t->n_dims; d++) {
            json_array_append_new(dims, json_integer((json_int_t) t->ne[d]));
        }
        snprintf(hash, sizeof(hash), "%016" PRIx64,
                 kvs_fnv1a64(KVS_FNV1A64_INIT, t->data, t->nbytes));
        o = json_pack("{s:s#,s:s,s:i,s:o,s:I,s:I,s:s,s:b}",
                      "name", t->name.ptr, (int) t->name.len,
                      "type", kvs_ggml_type_name(t->type),
                      "type_id", (int) t->type, "dims", dims,
                      "offset", (json_int_t) t->offset,
                      "nbytes", (json_int_t) t->nbytes, "fnv1a64", hash,
                      "computable", kvs_quant_type(t->type) != NULL);
        if (o == NULL || json_array_append_new(tensors, o) != 0) {
            json_decref(root);
            return 1;
        }

        if (kvs_quant_type(t->type) == NULL
            && json_array_append_new(bad,
                   json_pack("{s:s#,s:s}", "name", t->name.ptr,
                             (int) t->name.len, "type",
                             kvs_ggml_type_name(t->type))) != 0)
        {
            json_decref(root);
            return 1;
        }
    }

    if (hp_ok) {
        json_object_set_new(root, "hparams",
                            kvs_info_json_hparams(hp, kv_bytes));
        json_object_set_new(root, "memory", kvs_info_json_memory(mem, hp));
    } else {
        json_object_set_new(root, "hparams_error", json_string(hp_err));
    }

    text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER
                            | JSON_REAL_PRECISION(17));
    json_decref(root);

    if (text == NULL) {
        return 1;
    }

    puts(text);
    free(text);

    return 0;
}


/* Text. */

static void
kvs_info_print_str(kvs_gguf_str_t s, uint64_t max)
{
    uint64_t       i;
    unsigned char  c;

    putchar('"');
    for (i = 0; i < s.len && i < max; i++) {
        c = (unsigned char) s.ptr[i];
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
        } else if (c < 0x20 || c == 0x7f) {
            printf(c == '\n' ? "\\n" : "\\x%02x", c);
        } else {
            putchar(c);
        }
    }
    printf(s.len > max ? "\"..." : "\"");
}


static void
kvs_info_print_value(const kvs_gguf_kv_t *kv)
{
    json_t           *j;
    char             *text;
    uint64_t          i;
    kvs_gguf_str_t    s;
    kvs_gguf_iter_t   it;
    const kvs_gguf_arr_t  *a;

    if (kv->type == KVS_GGUF_STR) {
        memcpy(&s.len, kv->val, 8);
        s.ptr = (const char *) kv->val + 8;
        kvs_info_print_str(s, 72);
        return;
    }

    if (kv->type != KVS_GGUF_ARR) {
        j = kvs_info_json_scalar(kv->val, kv->type);
        text = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_REAL_PRECISION(9))
                 : NULL;
        printf("%s", text ? text : "?");
        free(text);
        json_decref(j);
        return;
    }

    a = &kv->arr;
    printf("[%s x %" PRIu64 "]", kvs_gguf_vtype_name(a->type), a->n);

    if (a->type == KVS_GGUF_STR) {
        kvs_gguf_iter_init(&it, a);
        for (i = 0; i < KVS_INFO_SHOW && kvs_gguf_iter_str(&it, &s); i++) {
            printf(i ? ", " : " ");
            kvs_info_print_str(s, 24);
        }
    } else if (kvs_gguf_vtype_size(a->type) != 0) {
        for (i = 0; i < KVS_INFO_SHOW && i < a->n; i++) {
            j = kvs_info_json_scalar(a->data + i * kvs_gguf_vtype_size(
                                         a->type), a->type);
            text = j ? json_dumps(j, JSON_ENCODE_ANY
                                     | JSON_REAL_PRECISION(9)) : NULL;
            printf("%s%s", i ? ", " : " ", text ? text : "?");
            free(text);
            json_decref(j);
        }
    }

    if (a->n > KVS_INFO_SHOW && a->type != KVS_GGUF_ARR) {
        printf(", ...");
    }
}


static void
kvs_info_kv_line(const char *what, uint64_t tokens, uint64_t per_token)
{
    char  buf[32];

    printf("  %-24s %12" PRIu64 " tokens  %s\n", what, tokens,
           kvs_cli_human((double) tokens * (double) per_token, buf,
                         sizeof(buf)));
}


static void
kvs_info_text_model(const kvs_hparams_t *hp, uint32_t kv_bytes)
{
    char      buf[32];
    uint64_t  per_token;

    printf("\nmodel\n");
    printf("  architecture %s, %u layers, embedding %u, FFN %u, vocab %u\n",
           hp->arch, hp->n_layer, hp->n_embd, hp->n_ff, hp->n_vocab);
    printf("  heads %u, KV heads %u (GQA %u:1), head_dim %u",
           hp->n_head, hp->n_head_kv, hp->n_head / hp->n_head_kv,
           hp->head_dim_k);
    if (hp->head_dim_v != hp->head_dim_k) {
        printf(" (values %u)", hp->head_dim_v);
    }
    printf("\n  context length %u, RMSNorm eps %g\n", hp->n_ctx_train,
           hp->norm_eps);
    printf("  RoPE base %g over %u dims, scaling %s", hp->rope_freq_base,
           hp->n_rot, kvs_rope_scaling_name(hp->rope_scaling));
    if (hp->rope_scaling != KVS_ROPE_SCALING_NONE) {
        printf(" (factor %g, original context %u)", hp->rope_factor,
               hp->rope_orig_ctx);
    }
    printf("\n  tied embeddings %s, parameters %" PRIu64 " (%.2fM)\n",
           hp->tied_embeddings ? "yes" : "no", hp->n_params,
           (double) hp->n_params / 1e6);

    per_token = kvs_hparams_kv_bytes_per_token(hp, kv_bytes);

    printf("\nKV cache (%u bytes per element)\n", kv_bytes);
    if (hp->head_dim_k == hp->head_dim_v) {
        printf("  per token: 2 x %u layers x %u KV heads x %u head_dim x "
               "%u B = %" PRIu64 " B (%s)\n", hp->n_layer, hp->n_head_kv,
               hp->head_dim_k, kv_bytes, per_token,
               kvs_cli_human((double) per_token, buf, sizeof(buf)));
    } else {
        printf("  per token: %u layers x %u KV heads x (%u + %u) x %u B = "
               "%" PRIu64 " B\n", hp->n_layer, hp->n_head_kv,
               hp->head_dim_k, hp->head_dim_v, kv_bytes, per_token);
    }
    kvs_info_kv_line("one full context:", hp->n_ctx_train, per_token);
    kvs_info_kv_line("a 200k-token context:", KVS_INFO_LONG_CTX, per_token);
}


static void
kvs_info_text_memory(const kvs_info_mem_t *mem, const kvs_hparams_t *hp)
{
    char      b1[32], b2[32], kernels[256];
    uint32_t  t, kv;

    printf("\nmemory per backend, as loaded on this host\n  stored by "
           "type:");
    for (t = 0; t < KVS_GGML_TYPE_END; t++) {
        if (mem->by_type[t] != 0) {
            printf(" %s %s (%" PRIu64 " B)", kvs_ggml_type_name(t),
                   kvs_cli_human((double) mem->by_type[t], b1, sizeof(b1)),
                   mem->by_type[t]);
        }
    }
    putchar('\n');

    if (mem->cpu_rc == KVS_OK) {
        kv = (uint32_t) mem->cpu_kv;
        printf("  cpu:  weights %s mapped as stored (%" PRIu64 " B), %s "
               "owned (%" PRIu64 " B of converted vectors and repacked "
               "matrices); "
               "KV %s, %" PRIu64 " B per token\n",
               kvs_cli_human((double) mem->cpu_mapped, b1, sizeof(b1)),
               mem->cpu_mapped,
               kvs_cli_human((double) mem->cpu_owned, b2, sizeof(b2)),
               mem->cpu_owned, kvs_backend_kv_name(kv),
               kvs_info_kv_bpt(hp, kv));
        printf("  cpu kernels: %s\n",
               kvs_cpu_kernels(kernels, sizeof(kernels)));
    } else {
        printf("  cpu:  %s\n", mem->cpu_err.msg);
    }

    if (mem->cuda_rc == KVS_OK) {
        kv = (uint32_t) mem->cuda_kv;
        printf("  cuda: weights %s on the device after conversion (%" PRIu64
               " B); KV %s, %" PRIu64 " B per token\n",
               kvs_cli_human((double) mem->cuda_device, b1, sizeof(b1)),
               mem->cuda_device, kvs_backend_kv_name(kv),
               kvs_info_kv_bpt(hp, kv));
    } else {
        printf("  cuda: %s\n", mem->cuda_err.msg);
    }
}


static int
kvs_info_text(const char *path, const kvs_gguf_t *g, const kvs_hparams_t *hp,
    int hp_ok, const char *hp_err, uint32_t kv_bytes,
    const kvs_info_mem_t *mem)
{
    char                      buf[32], names[KVS_QUANT_NAMES_LEN];
    uint32_t                  d;
    uint64_t                  i, n_bad;
    const kvs_gguf_kv_t      *kv;
    const kvs_gguf_tensor_t  *t;

    printf("%s: GGUF v%u, %s (%" PRIu64 " bytes), alignment %u, tensor "
           "data at byte %" PRIu64 "\n", path, kvs_gguf_version(g),
           kvs_cli_human((double) kvs_gguf_file_size(g), buf, sizeof(buf)),
           kvs_gguf_file_size(g), kvs_gguf_alignment(g),
           kvs_gguf_data_offset(g));

    printf("\nmetadata (%" PRIu64 " keys)\n", kvs_gguf_n_kv(g));
    for (i = 0; i < kvs_gguf_n_kv(g); i++) {
        kv = kvs_gguf_kv_at(g, i);
        printf("  %-44.*s %-4s ", (int) kv->key.len, kv->key.ptr,
               kvs_gguf_vtype_name(kv->type));
        kvs_info_print_value(kv);
        putchar('\n');
    }

    printf("\ntensors (%" PRIu64 ")\n", kvs_gguf_n_tensors(g));
    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        t = kvs_gguf_tensor_at(g, i);
        printf("  %-32.*s %-6s [", (int) t->name.len, t->name.ptr,
               kvs_ggml_type_name(t->type));
        for (d = 0; d < t->n_dims; d++) {
            printf(d ? ", %" PRIu64 : "%" PRIu64, t->ne[d]);
        }
        printf("]  %s at +%" PRIu64 "%s\n",
               kvs_cli_human((double) t->nbytes, buf, sizeof(buf)),
               t->offset,
               kvs_quant_type(t->type) == NULL ? "  (cannot compute)" : "");
    }

    n_bad = 0;
    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        t = kvs_gguf_tensor_at(g, i);
        if (kvs_quant_type(t->type) != NULL) {
            continue;
        }

        if (n_bad++ == 0) {
            kvs_quant_names(names, sizeof(names));
            printf("\nnot computable (kvserve computes with %s)\n", names);
        }

        printf("  %-32.*s %s\n", (int) t->name.len, t->name.ptr,
               kvs_ggml_type_name(t->type));
    }

    if (hp_ok) {
        kvs_info_text_model(hp, kv_bytes);
        kvs_info_text_memory(mem, hp);
    } else {
        printf("\nmodel\n  not a servable model: %s\n", hp_err);
    }

    return 0;
}


int
kvs_cli_info(int argc, char **argv)
{
    int              i, json, hp_ok;
    char            *end;
    const char      *path, *base;
    uint32_t         kv_bytes, kv_dt;
    kvs_err_t        err, hp_err;
    kvs_gguf_t      *g;
    kvs_hparams_t    hp;
    kvs_info_mem_t   mem;

    memset(&mem, 0, sizeof(kvs_info_mem_t));
    json = 0;
    kv_bytes = 2;
    kv_dt = KVS_KV_DTYPE_DEFAULT;
    path = NULL;
    base = NULL;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--kv-bytes") == 0 && i + 1 < argc) {
            kv_bytes = (uint32_t) strtoul(argv[++i], &end, 10);
            if (*end != '\0' || kv_bytes == 0 || kv_bytes > 8) {
                fprintf(stderr, "kvserve info: --kv-bytes \"%s\" is not "
                        "1..8\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--base") == 0 && i + 1 < argc) {
            base = argv[++i];
        } else if (strcmp(argv[i], "--kv-dtype") == 0 && i + 1 < argc) {
            if (kvs_kv_dtype_parse(argv[i + 1], strlen(argv[i + 1]), &kv_dt)
                != KVS_OK)
            {
                fprintf(stderr, "kvserve info: --kv-dtype \"%s\" is not "
                        "f32, f16, bf16, int8 or fp8\n", argv[i + 1]);
                return 2;
            }
            i++;
        } else if (argv[i][0] == '-' || path != NULL) {
            fprintf(stderr, "kvserve info: unexpected argument \"%s\"\n",
                    argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }

    if (path == NULL) {
        fprintf(stderr, "usage: kvserve info [--json] [--kv-bytes N] "
                "[--kv-dtype f32|f16|bf16|int8|fp8] [--base BASE.gguf] "
                "model.gguf\n");
        return 2;
    }

    if (kvs_gguf_open(&g, path, &err) != KVS_OK) {
        fprintf(stderr, "kvserve info: %s\n", err.msg);
        return 1;
    }

    if (kvs_lora_is_adapter(g)) {
        kvs_gguf_close(g);
        return kvs_cli_lora_info(path, base, json);
    }

    if (base != NULL) {
        kvs_gguf_close(g);
        fprintf(stderr, "kvserve info: --base is for adapters; %s is not "
                "one (general.type is not \"adapter\")\n", path);
        return 2;
    }

    kvs_err_clear(&hp_err);
    hp_ok = kvs_hparams_read(&hp, g, &hp_err) == KVS_OK
            && kvs_model_check_tensors(g, &hp, &hp_err) == KVS_OK;

    if (hp_ok) {
        kvs_info_memory(path, g, &mem);
        kvs_info_kv_dtype(&mem, kv_dt, &hp);
    }

    i = json ? kvs_info_json(g, &hp, hp_ok, hp_err.msg, kv_bytes, &mem)
             : kvs_info_text(path, g, &hp, hp_ok, hp_err.msg, kv_bytes,
                             &mem);

    kvs_gguf_close(g);

    return i;
}


/* The model opened as for serving (a second mapping of the same file):
 * each backend's figures come from the code that loads it. */
static void
kvs_info_memory(const char *path, const kvs_gguf_t *g, kvs_info_mem_t *mem)
{
    int                       kv_dt;
    uint64_t                  i;
    kvs_model_t              *m;
    const kvs_gguf_tensor_t  *t;

    memset(mem, 0, sizeof(kvs_info_mem_t));

    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        t = kvs_gguf_tensor_at(g, i);
        if (t->type < KVS_GGML_TYPE_END) {
            mem->by_type[t->type] += t->nbytes;
        }
    }

    mem->cpu_rc = kvs_model_open(&m, path, &mem->cpu_err);
    if (mem->cpu_rc != KVS_OK) {
        mem->cuda_rc = mem->cpu_rc;
        mem->cuda_err = mem->cpu_err;
        return;
    }

    mem->cpu_rc = kvs_cpu_model_footprint(m, &mem->cpu_mapped,
                                          &mem->cpu_owned, &mem->cpu_err);
    mem->cuda_rc = kvs_cuda_plan_weights(m, &mem->cuda_device, &kv_dt,
                                         &mem->cuda_err);
    mem->cuda_kv = kv_dt == KVS_CUDA_DT_F32 ? KVS_BACKEND_KV_F32
                                            : KVS_BACKEND_KV_BF16;
    mem->cpu_kv = KVS_BACKEND_KV_F32;

    kvs_model_close(m);
}


/* --kv-dtype: each backend's cache in that dtype, as kvserve_kv_dtype
 * would make it, or why that backend cannot store it (the CPU: every
 * dtype; CUDA: every dtype, int8 and fp8 for heads of 8n elements). */
static void
kvs_info_kv_dtype(kvs_info_mem_t *mem, uint32_t dt, const kvs_hparams_t *hp)
{
    if (dt == KVS_KV_DTYPE_DEFAULT) {
        return;
    }

    if (mem->cpu_rc == KVS_OK) {
        mem->cpu_kv = (int) dt;
    }

    if (mem->cuda_rc == KVS_OK) {
        if ((dt == KVS_KV_INT8 || dt == KVS_KV_FP8)
            && (hp->head_dim_k % 8 != 0 || hp->head_dim_v % 8 != 0))
        {
            mem->cuda_rc = kvs_err_set(&mem->cuda_err, KVS_EUNSUPPORTED,
                                       "a \"%s\" KV cache needs heads of "
                                       "a multiple of 8 elements",
                                       kvs_kv_dtype_name(dt));
        } else {
            mem->cuda_kv = (int) dt;
        }
    }
}
