/*
 * kvs_lora: reads a LoRA adapter (see kvs_lora.h).  Every key and tensor
 * is checked before it is used: the GGUF reader has already bounded
 * every count, string and offset; here the adapter's own keys are
 * checked for their types and values, each tensor's name is parsed into
 * (layer, target, a|b), its dimensions, type and pair are checked, and
 * against a base each pair's shapes are compared with W's.  Only then
 * are the values converted to f32 (and checked finite); the mapping is
 * closed before a successful open returns.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_ggml_type.h"
#include "kvs_lora.h"
#include "kvs_quant.h"


static const struct {
    const char  *name;
    const char  *stem;
} kvs_lora_targets[KVS_LORA_N_TARGETS] = {
    { "q",    "attn_q" },
    { "k",    "attn_k" },
    { "v",    "attn_v" },
    { "o",    "attn_output" },
    { "gate", "ffn_gate" },
    { "up",   "ffn_up" },
    { "down", "ffn_down" },
    { "qkv",  "attn_qkv" },
};

#define KVS_LORA_MAX_LAYER  100000


const char *
kvs_lora_target_name(kvs_lora_target_t t)
{
    return (unsigned) t < KVS_LORA_N_TARGETS ? kvs_lora_targets[t].name
                                             : "?";
}


const char *
kvs_lora_target_stem(kvs_lora_target_t t)
{
    return (unsigned) t < KVS_LORA_N_TARGETS ? kvs_lora_targets[t].stem
                                             : "?";
}


int
kvs_lora_target_parse(const char *name, size_t len)
{
    int  i;

    for (i = 0; i < KVS_LORA_N_TARGETS; i++) {
        if (strlen(kvs_lora_targets[i].name) == len
            && memcmp(kvs_lora_targets[i].name, name, len) == 0)
        {
            return i;
        }
    }

    return -1;
}


int
kvs_lora_is_adapter(const kvs_gguf_t *g)
{
    kvs_gguf_str_t  s;

    return kvs_gguf_get_str(g, "general.type", &s, NULL) == KVS_OK
           && kvs_gguf_str_eq(s, "adapter");
}


/*
 * Parses "blk.<layer>.<stem>.weight.lora_<a|b>" (len bytes): 0 with the
 * layer, target and which (0: a, 1: b), -1 for another name.
 */
static int
kvs_lora_parse_name(const char *p, size_t len, uint32_t *layer,
    kvs_lora_target_t *target, int *which)
{
    size_t       i, n, sl;
    uint32_t     l;
    const char  *stem;

    if (len < 4 + 1 + 1 + 7 + 7 || memcmp(p, "blk.", 4) != 0) {
        return -1;
    }

    if (memcmp(p + len - 7, ".lora_a", 7) == 0) {
        *which = 0;

    } else if (memcmp(p + len - 7, ".lora_b", 7) == 0) {
        *which = 1;

    } else {
        return -1;
    }

    len -= 7;

    if (len < 7 || memcmp(p + len - 7, ".weight", 7) != 0) {
        return -1;
    }

    len -= 7;

    l = 0;
    for (i = 4; i < len && p[i] >= '0' && p[i] <= '9'; i++) {
        l = l * 10 + (uint32_t) (p[i] - '0');
        if (l >= KVS_LORA_MAX_LAYER || (i > 4 && p[4] == '0')) {
            return -1;
        }
    }

    if (i == 4 || i >= len || p[i] != '.') {
        return -1;
    }

    i++;
    n = len - i;

    for (sl = 0; sl < KVS_LORA_N_TARGETS; sl++) {
        stem = kvs_lora_targets[sl].stem;
        if (strlen(stem) == n && memcmp(stem, p + i, n) == 0) {
            *layer = l;
            *target = (kvs_lora_target_t) sl;
            return 0;
        }
    }

    return -1;
}


static void
kvs_lora_shape(char *buf, size_t size, const kvs_gguf_tensor_t *t)
{
    uint32_t  d;
    size_t    o;

    o = 0;
    buf[0] = '\0';

    for (d = 0; d < t->n_dims && o < size; d++) {
        o += (size_t) snprintf(buf + o, size - o, "%s%llu", d ? ", " : "[",
                               (unsigned long long) t->ne[d]);
    }

    if (o < size) {
        snprintf(buf + o, size - o, "]");
    }
}


/* The tensor's values as f32 (checked finite) into dst[t->nelem]. */
static int
kvs_lora_values(const kvs_gguf_tensor_t *t, const char *name, float *dst,
    kvs_err_t *err)
{
    int       rc;
    uint64_t  i;

    rc = kvs_quant_check(name, t->type, err);
    if (rc != KVS_OK) {
        return kvs_err_prefix(err, "adapter");
    }

    rc = kvs_quant_dequantize(t->type, t->data, dst, (size_t) t->nelem, err);
    if (rc != KVS_OK) {
        return kvs_err_prefix(err, "adapter tensor %s", name);
    }

    for (i = 0; i < t->nelem; i++) {
        if (!isfinite(dst[i])) {
            return kvs_err_set(err, KVS_EFORMAT, "adapter tensor %s: "
                               "element %llu is not finite", name,
                               (unsigned long long) i);
        }
    }

    return KVS_OK;
}


/* The adapter's own keys: type, architecture, alpha, name. */
static int
kvs_lora_keys(kvs_lora_t *l, const kvs_gguf_t *g, const kvs_model_t *base,
    kvs_err_t *err)
{
    int             rc;
    double          alpha;
    kvs_gguf_str_t  s;

    rc = kvs_gguf_get_str(g, "general.type", &s, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (!kvs_gguf_str_eq(s, "adapter")) {
        return kvs_err_set(err, KVS_EFORMAT, "general.type is \"%.*s\", "
                           "not \"adapter\"", (int) (s.len > 64 ? 64 : s.len),
                           s.ptr);
    }

    rc = kvs_gguf_get_str(g, "adapter.type", &s, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (!kvs_gguf_str_eq(s, "lora")) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "adapter.type is "
                           "\"%.*s\"; kvserve reads \"lora\" adapters",
                           (int) (s.len > 64 ? 64 : s.len), s.ptr);
    }

    rc = kvs_gguf_get_str(g, "general.architecture", &s, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (s.len == 0 || s.len >= sizeof(l->arch)) {
        return kvs_err_set(err, KVS_EFORMAT, "general.architecture: %llu "
                           "bytes, expected 1..%u",
                           (unsigned long long) s.len,
                           (unsigned) sizeof(l->arch) - 1);
    }

    memcpy(l->arch, s.ptr, s.len);
    l->arch[s.len] = '\0';

    if (base != NULL && strcmp(l->arch, base->hp.arch) != 0) {
        return kvs_err_set(err, KVS_EINVAL, "adapter architecture \"%s\" "
                           "is not the base model's \"%s\"", l->arch,
                           base->hp.arch);
    }

    if (kvs_gguf_get_str(g, "general.name", &s, NULL) == KVS_OK) {
        snprintf(l->name, sizeof(l->name), "%.*s",
                 (int) (s.len < sizeof(l->name) ? s.len
                                                 : sizeof(l->name) - 1),
                 s.ptr);
    }

    alpha = 0.0;
    rc = kvs_gguf_get_float(g, "adapter.lora.alpha", &alpha, err);
    if (rc != KVS_OK && rc != KVS_ENOTFOUND) {
        return rc;
    }

    if (!isfinite(alpha) || alpha < 0.0 || alpha > 1e6) {
        return kvs_err_set(err, KVS_EFORMAT, "adapter.lora.alpha %g: "
                           "expected 0..1e6", alpha);
    }

    l->alpha = (float) alpha;

    return KVS_OK;
}


/* Checks pair (a, b) of m's name against itself and base's W. */
static int
kvs_lora_check_pair(kvs_lora_mat_t *m, const kvs_gguf_tensor_t *a,
    const kvs_gguf_tensor_t *b, const kvs_model_t *base, kvs_err_t *err)
{
    char                      sa[64], sb[64], sw[64];
    const kvs_gguf_tensor_t  *w;

    kvs_lora_shape(sa, sizeof(sa), a);
    kvs_lora_shape(sb, sizeof(sb), b);

    if (a->n_dims != 2 || b->n_dims != 2) {
        return kvs_err_set(err, KVS_EFORMAT, "adapter tensors %s.lora_a "
                           "%s and .lora_b %s: expected two dimensions "
                           "each", m->name, sa, sb);
    }

    if (a->ne[1] != b->ne[0]) {
        return kvs_err_set(err, KVS_EFORMAT, "adapter tensors %s.lora_a "
                           "%s and .lora_b %s: the rank (lora_a's ne[1], "
                           "lora_b's ne[0]) differs; is lora_a "
                           "transposed?", m->name, sa, sb);
    }

    if (a->ne[1] == 0 || a->ne[1] > KVS_LORA_MAX_RANK
        || a->ne[0] == 0 || b->ne[1] == 0)
    {
        return kvs_err_set(err, KVS_EFORMAT, "adapter tensor %s.lora_a "
                           "%s: rank %llu, expected 1..%u and non-empty "
                           "rows", m->name, sa,
                           (unsigned long long) a->ne[1], KVS_LORA_MAX_RANK);
    }

    m->rank = (uint32_t) a->ne[1];
    m->n_in = a->ne[0];
    m->n_out = b->ne[1];
    m->type_a = a->type;
    m->type_b = b->type;

    if (base == NULL) {
        return KVS_OK;
    }

    w = kvs_gguf_find_tensor(base->gguf, m->name);
    if (w == NULL) {
        return kvs_err_set(err, KVS_ENOTFOUND, "adapter tensor "
                           "%s.lora_a: the base model has no %s", m->name,
                           m->name);
    }

    kvs_lora_shape(sw, sizeof(sw), w);

    if (w->n_dims != 2 || w->ne[0] != m->n_in || w->ne[1] != m->n_out) {
        return kvs_err_set(err, KVS_EINVAL, "adapter tensors %s.lora_a "
                           "%s and .lora_b %s do not fit the base's %s %s "
                           "(expected lora_a [%llu, r], lora_b [r, %llu])",
                           m->name, sa, sb, m->name, sw,
                           (unsigned long long) w->ne[0],
                           (unsigned long long) (w->n_dims > 1 ? w->ne[1]
                                                               : 0));
    }

    return KVS_OK;
}


/* The pairs of g: counted, checked, then copied to f32. */
static int
kvs_lora_pairs(kvs_lora_t *l, const kvs_gguf_t *g, const kvs_model_t *base,
    kvs_err_t *err)
{
    int                       rc, which;
    char                      name[KVS_GGUF_MAX_NAME + 16];
    char                      other[KVS_GGUF_MAX_NAME + 16];
    uint32_t                  layer, k;
    uint64_t                  i, n;
    kvs_lora_mat_t           *m;
    kvs_lora_target_t         target;
    const kvs_gguf_tensor_t  *t, *a, *b;

    n = kvs_gguf_n_tensors(g);

    if (n == 0) {
        return kvs_err_set(err, KVS_EFORMAT, "adapter has no tensors");
    }

    /* names first: every tensor is half of a pair we can apply */
    for (i = 0; i < n; i++) {
        t = kvs_gguf_tensor_at(g, i);

        if (kvs_lora_parse_name(t->name.ptr, t->name.len, &layer, &target,
                                &which) != 0)
        {
            return kvs_err_set(err, KVS_EUNSUPPORTED, "adapter tensor "
                               "%.*s: kvserve applies LoRA pairs "
                               "blk.N.{attn_q,attn_k,attn_v,attn_output,"
                               "ffn_gate,ffn_up,ffn_down,attn_qkv}.weight"
                               ".lora_a/.lora_b only", (int) t->name.len,
                               t->name.ptr);
        }

        if (base != NULL && layer >= base->hp.n_layer) {
            return kvs_err_set(err, KVS_EINVAL, "adapter tensor %.*s: "
                               "layer %u, the base has %u", (int) t->name.len,
                               t->name.ptr, layer, base->hp.n_layer);
        }

        snprintf(other, sizeof(other), "%.*s_%c", (int) t->name.len - 2,
                 t->name.ptr, which ? 'a' : 'b');

        if (kvs_gguf_find_tensor(g, other) == NULL) {
            return kvs_err_set(err, KVS_EFORMAT, "adapter tensor %.*s has "
                               "no %s", (int) t->name.len, t->name.ptr,
                               other);
        }

        if (which == 0) {
            l->n_mat++;
        }
    }

    l->mat = calloc(l->n_mat, sizeof(kvs_lora_mat_t));
    if (l->mat == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    k = 0;

    for (i = 0; i < n; i++) {
        t = kvs_gguf_tensor_at(g, i);
        (void) kvs_lora_parse_name(t->name.ptr, t->name.len, &layer,
                                   &target, &which);
        if (which != 0) {
            continue;
        }

        m = &l->mat[k++];
        snprintf(m->name, sizeof(m->name), "%.*s", (int) t->name.len - 7,
                 t->name.ptr);
        m->layer = layer;
        m->target = target;

        snprintf(name, sizeof(name), "%s.lora_b", m->name);
        a = t;
        b = kvs_gguf_find_tensor(g, name);

        rc = kvs_lora_check_pair(m, a, b, base, err);
        if (rc != KVS_OK) {
            return rc;
        }

        m->scale = l->alpha != 0.0f ? l->alpha / (float) m->rank : 1.0f;

        if (m->rank > l->rank_max) {
            l->rank_max = m->rank;
        }

        if (layer + 1 > l->n_layer_max) {
            l->n_layer_max = layer + 1;
        }

        m->a = malloc(a->nelem * sizeof(float));
        m->b = malloc(b->nelem * sizeof(float));
        if (m->a == NULL || m->b == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "out of memory");
        }

        snprintf(name, sizeof(name), "%s.lora_a", m->name);
        rc = kvs_lora_values(a, name, m->a, err);
        if (rc != KVS_OK) {
            return rc;
        }

        snprintf(name, sizeof(name), "%s.lora_b", m->name);
        rc = kvs_lora_values(b, name, m->b, err);
        if (rc != KVS_OK) {
            return rc;
        }

        l->n_params += a->nelem + b->nelem;
    }

    return KVS_OK;
}


static int
kvs_lora_read(kvs_lora_t **out, kvs_gguf_t *g, const kvs_model_t *base,
    kvs_err_t *err)
{
    int          rc;
    kvs_lora_t  *l;

    l = calloc(1, sizeof(kvs_lora_t));
    if (l == NULL) {
        kvs_gguf_close(g);
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    rc = kvs_lora_keys(l, g, base, err);
    if (rc == KVS_OK) {
        rc = kvs_lora_pairs(l, g, base, err);
    }

    if (rc == KVS_OK) {
        l->epoch = kvs_gguf_content_hash(g);
        l->file_size = kvs_gguf_file_size(g);
    }

    kvs_gguf_close(g);

    if (rc != KVS_OK) {
        kvs_lora_close(l);
        return rc;
    }

    *out = l;

    return KVS_OK;
}


int
kvs_lora_open(kvs_lora_t **out, const char *path, const kvs_model_t *base,
    kvs_err_t *err)
{
    int          rc;
    kvs_gguf_t  *g;

    rc = kvs_gguf_open(&g, path, err);
    if (rc == KVS_OK) {
        rc = kvs_lora_read(out, g, base, err);
    }

    if (rc != KVS_OK) {
        (void) kvs_err_prefix(err, "%s", path);
    }

    return rc;
}


int
kvs_lora_open_mem(kvs_lora_t **out, const void *buf, size_t len,
    const kvs_model_t *base, kvs_err_t *err)
{
    int          rc;
    kvs_gguf_t  *g;

    rc = kvs_gguf_open_mem(&g, buf, len, err);
    if (rc != KVS_OK) {
        return rc;
    }

    return kvs_lora_read(out, g, base, err);
}


void
kvs_lora_close(kvs_lora_t *l)
{
    uint32_t  i;

    if (l == NULL) {
        return;
    }

    for (i = 0; l->mat != NULL && i < l->n_mat; i++) {
        free(l->mat[i].a);
        free(l->mat[i].b);
    }

    free(l->mat);
    free(l);
}


const kvs_lora_mat_t *
kvs_lora_find(const kvs_lora_t *l, uint32_t layer, kvs_lora_target_t target)
{
    uint32_t  i;

    for (i = 0; i < l->n_mat; i++) {
        if (l->mat[i].layer == layer && l->mat[i].target == target) {
            return &l->mat[i];
        }
    }

    return NULL;
}


/* a . b over n floats in 8 interleaved partial sums (lanes the compiler
 * may keep in one vector), added in a fixed order: the result depends
 * only on the inputs. */
static float
kvs_lora_dot(const float *a, const float *b, uint64_t n)
{
    float     acc[8], s;
    uint64_t  i, j;

    memset(acc, 0, sizeof(acc));

    for (i = 0; i + 8 <= n; i += 8) {
        for (j = 0; j < 8; j++) {
            acc[j] += a[i + j] * b[i + j];
        }
    }

    s = ((acc[0] + acc[4]) + (acc[1] + acc[5]))
        + ((acc[2] + acc[6]) + (acc[3] + acc[7]));

    for ( ; i < n; i++) {
        s += a[i] * b[i];
    }

    return s;
}


void
kvs_lora_apply_row(const kvs_lora_mat_t *m, const float *x, float *y,
    float *tmp)
{
    uint32_t  r;
    uint64_t  o;

    for (r = 0; r < m->rank; r++) {
        tmp[r] = kvs_lora_dot(m->a + (uint64_t) r * m->n_in, x, m->n_in)
                 * m->scale;
    }

    for (o = 0; o < m->n_out; o++) {
        y[o] += kvs_lora_dot(m->b + o * m->rank, tmp, m->rank);
    }
}
