/*
 * kvs_kv_plan: the capacity planner's arithmetic (see the header).  All
 * products go through kvs_kv_plan_mul(), which refuses to wrap; parsing
 * is strict (digits only, no sign, no blanks, no strtoul).
 */

#include <string.h>

#include "kvs_kv_layout.h"
#include "kvs_kv_plan.h"

#define KVS_KV_PLAN_BLOCK_MAX  65536   /* block_tokens, at most */
#define KVS_KV_PLAN_QUOTE      48      /* value bytes quoted in errors */


static const struct {
    const char  *name;
    uint32_t     bytes;
} kvs_kv_plan_dtypes[KVS_KV_PLAN_N] = {
    { "f32", 4 },
    { "f16", 2 },
    { "bf16", 2 },
    { "fp8", 1 },
    { "int8", 1 },
};


const char *
kvs_kv_plan_dtype_name(kvs_kv_plan_dtype_t dt)
{
    return (unsigned) dt < KVS_KV_PLAN_N ? kvs_kv_plan_dtypes[dt].name
                                         : NULL;
}


uint32_t
kvs_kv_plan_dtype_bytes(kvs_kv_plan_dtype_t dt)
{
    return (unsigned) dt < KVS_KV_PLAN_N ? kvs_kv_plan_dtypes[dt].bytes : 0;
}


int
kvs_kv_plan_dtype_parse(kvs_kv_plan_dtype_t *dt, const char *s, size_t len,
    kvs_err_t *err)
{
    unsigned  i;

    for (i = 0; i < KVS_KV_PLAN_N; i++) {
        if (strlen(kvs_kv_plan_dtypes[i].name) == len
            && memcmp(kvs_kv_plan_dtypes[i].name, s, len) == 0)
        {
            *dt = (kvs_kv_plan_dtype_t) i;
            return KVS_OK;
        }
    }

    *dt = KVS_KV_PLAN_F32;

    return kvs_err_set(err, KVS_EINVAL, "kv dtype \"%.*s%s\" is not one of "
                       "f32, f16, bf16, fp8, int8",
                       (int) (len > KVS_KV_PLAN_QUOTE ? KVS_KV_PLAN_QUOTE
                                                      : len),
                       s, len > KVS_KV_PLAN_QUOTE ? "..." : "");
}


/* a x b into *r, or 0 when it would pass UINT64_MAX */
static int
kvs_kv_plan_mul(uint64_t a, uint64_t b, uint64_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}


/* A decimal in 1..KVS_KV_PLAN_DIM_MAX from s[0..len). */
static int
kvs_kv_plan_dim(const char *s, size_t len, uint32_t *v)
{
    size_t    i;
    uint64_t  n;

    if (len == 0 || len > 8) {
        return 0;
    }

    n = 0;

    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return 0;
        }

        n = n * 10 + (uint64_t) (s[i] - '0');
    }

    if (n < 1 || n > KVS_KV_PLAN_DIM_MAX) {
        return 0;
    }

    *v = (uint32_t) n;

    return 1;
}


int
kvs_kv_shape_check(const kvs_kv_shape_t *shape, kvs_err_t *err)
{
    if (shape->n_layer == 0 || shape->n_head_kv == 0
        || shape->head_dim_k == 0 || shape->head_dim_v == 0)
    {
        return kvs_err_set(err, KVS_EINVAL, "layers, kv_heads and head_dim "
                           "must all be given and above 0");
    }

    if (shape->n_layer > KVS_KV_PLAN_DIM_MAX
        || shape->n_head_kv > KVS_KV_PLAN_DIM_MAX
        || shape->n_head > KVS_KV_PLAN_DIM_MAX
        || shape->head_dim_k > KVS_KV_PLAN_DIM_MAX
        || shape->head_dim_v > KVS_KV_PLAN_DIM_MAX)
    {
        return kvs_err_set(err, KVS_EINVAL, "a shape's counts and widths "
                           "are at most %u", KVS_KV_PLAN_DIM_MAX);
    }

    if (shape->n_head != 0 && shape->n_head % shape->n_head_kv != 0) {
        return kvs_err_set(err, KVS_EINVAL, "heads=%u is not a multiple of "
                           "kv_heads=%u", shape->n_head, shape->n_head_kv);
    }

    return KVS_OK;
}


int
kvs_kv_shape_parse(kvs_kv_shape_t *shape, const char *s, size_t len,
    kvs_err_t *err)
{
    int          rc;
    size_t       i, end, eq, klen;
    uint32_t     v, *field;
    const char  *key;

    memset(shape, 0, sizeof(kvs_kv_shape_t));

    for (i = 0; i <= len; i = end + 1) {
        for (end = i; end < len && s[end] != ','; end++) { /* void */ }

        for (eq = i; eq < end && s[eq] != '='; eq++) { /* void */ }

        key = s + i;
        klen = eq - i;

        if (eq == end) {
            rc = kvs_err_set(err, KVS_EINVAL, "shape item \"%.*s\" is not "
                             "key=value (layers, kv_heads, head_dim, "
                             "head_dim_v, heads)",
                             (int) (end - i > KVS_KV_PLAN_QUOTE
                                    ? KVS_KV_PLAN_QUOTE : end - i), key);
            goto failed;
        }

#define KVS_KEY_IS(lit) \
        (klen == sizeof(lit) - 1 && memcmp(key, lit, klen) == 0)

        if (KVS_KEY_IS("layers")) {
            field = &shape->n_layer;
        } else if (KVS_KEY_IS("kv_heads")) {
            field = &shape->n_head_kv;
        } else if (KVS_KEY_IS("head_dim")) {
            field = &shape->head_dim_k;
        } else if (KVS_KEY_IS("head_dim_v")) {
            field = &shape->head_dim_v;
        } else if (KVS_KEY_IS("heads")) {
            field = &shape->n_head;
        } else {
            rc = kvs_err_set(err, KVS_EINVAL, "unknown shape key \"%.*s\" "
                             "(layers, kv_heads, head_dim, head_dim_v, "
                             "heads)",
                             (int) (klen > KVS_KV_PLAN_QUOTE
                                    ? KVS_KV_PLAN_QUOTE : klen), key);
            goto failed;
        }

#undef KVS_KEY_IS

        if (!kvs_kv_plan_dim(s + eq + 1, end - eq - 1, &v)) {
            rc = kvs_err_set(err, KVS_EINVAL, "shape %.*s=\"%.*s\": expected "
                             "a whole number 1..%u", (int) klen, key,
                             (int) (end - eq - 1 > KVS_KV_PLAN_QUOTE
                                    ? KVS_KV_PLAN_QUOTE : end - eq - 1),
                             s + eq + 1, KVS_KV_PLAN_DIM_MAX);
            goto failed;
        }

        if (*field != 0) {
            rc = kvs_err_set(err, KVS_EINVAL, "shape key \"%.*s\" given "
                             "twice", (int) klen, key);
            goto failed;
        }

        *field = v;
    }

    if (shape->head_dim_v == 0) {
        shape->head_dim_v = shape->head_dim_k;
    }

    if (shape->n_layer == 0 || shape->n_head_kv == 0
        || shape->head_dim_k == 0)
    {
        rc = kvs_err_set(err, KVS_EINVAL, "shape needs %s",
                         shape->n_layer == 0 ? "layers="
                         : shape->n_head_kv == 0 ? "kv_heads="
                         : "head_dim=");
        goto failed;
    }

    rc = kvs_kv_shape_check(shape, err);
    if (rc == KVS_OK) {
        return KVS_OK;
    }

failed:

    memset(shape, 0, sizeof(kvs_kv_shape_t));

    return rc;
}


int
kvs_kv_plan_bytes_per_token(uint64_t *bytes, const kvs_kv_shape_t *shape,
    uint32_t n_head_kv, uint32_t elem_bytes, kvs_err_t *err)
{
    uint64_t  b;

    *bytes = 0;

    if (shape->n_layer == 0 || n_head_kv == 0 || elem_bytes == 0
        || shape->head_dim_k == 0 || shape->head_dim_v == 0)
    {
        return kvs_err_set(err, KVS_EINVAL, "bytes per token: layers, KV "
                           "heads, head widths and element bytes must be "
                           "above 0");
    }

    if (!kvs_kv_plan_mul((uint64_t) shape->head_dim_k + shape->head_dim_v,
                         shape->n_layer, &b)
        || !kvs_kv_plan_mul(b, n_head_kv, &b)
        || !kvs_kv_plan_mul(b, elem_bytes, &b))
    {
        return kvs_err_set(err, KVS_ERANGE, "bytes per token overflow: %u "
                           "layers x %u KV heads x (%u + %u) x %u B",
                           shape->n_layer, n_head_kv, shape->head_dim_k,
                           shape->head_dim_v, elem_bytes);
    }

    *bytes = b;

    return KVS_OK;
}


int
kvs_kv_plan_budget(uint64_t *budget, uint64_t memory, uint64_t weights,
    kvs_err_t *err)
{
    *budget = 0;

    if (memory == 0) {
        return kvs_err_set(err, KVS_EINVAL, "memory must be above 0");
    }

    if (weights >= memory) {
        return kvs_err_set(err, KVS_EINVAL, "weights of %llu B leave no "
                           "memory for the KV cache out of %llu B",
                           (unsigned long long) weights,
                           (unsigned long long) memory);
    }

    *budget = memory - weights;

    return KVS_OK;
}


/* The figures of blocks of block_bytes, bpt a token's share of one;
 * zeroed and KVS_ERANGE when a context's bytes overflow. */
static int
kvs_kv_plan_fill(kvs_kv_plan_t *plan, uint64_t bpt, uint64_t block_bytes,
    uint64_t kv_budget, uint32_t block_tokens, uint64_t context,
    uint64_t batch, kvs_err_t *err)
{
    uint64_t  per_seq;

    memset(plan, 0, sizeof(kvs_kv_plan_t));

    if (!kvs_kv_plan_mul(bpt, context, &plan->context_bytes)) {
        memset(plan, 0, sizeof(kvs_kv_plan_t));
        return kvs_err_set(err, KVS_ERANGE, "%llu B per token x %llu "
                           "tokens overflows", (unsigned long long) bpt,
                           (unsigned long long) context);
    }

    plan->bytes_per_token = bpt;
    plan->block_bytes = block_bytes;
    plan->n_blocks = kv_budget / block_bytes;
    /* n_blocks x block_tokens <= kv_budget (a block holds at least a
     * byte per token), so this product fits */
    plan->tokens = plan->n_blocks * block_tokens;

    /* blocks one sequence of `context` tokens needs, rounded up */
    per_seq = context / block_tokens + (context % block_tokens != 0);
    plan->seqs_at_context = plan->n_blocks / per_seq;

    plan->context_at_batch = plan->n_blocks / batch * block_tokens;

    return KVS_OK;
}


int
kvs_kv_plan_compute(kvs_kv_plan_t *plan, const kvs_kv_shape_t *shape,
    uint32_t n_head_kv, uint32_t elem_bytes, uint64_t kv_budget,
    uint32_t block_tokens, uint64_t context, uint64_t batch,
    kvs_err_t *err)
{
    int       rc;
    uint64_t  bpt, bb;

    memset(plan, 0, sizeof(kvs_kv_plan_t));

    if (block_tokens == 0 || block_tokens > KVS_KV_PLAN_BLOCK_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "block of %u tokens: expected "
                           "1..%u", block_tokens, KVS_KV_PLAN_BLOCK_MAX);
    }

    if (context == 0 || batch == 0) {
        return kvs_err_set(err, KVS_EINVAL, "context and batch must be "
                           "above 0");
    }

    rc = kvs_kv_plan_bytes_per_token(&bpt, shape, n_head_kv, elem_bytes,
                                     err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (!kvs_kv_plan_mul(bpt, block_tokens, &bb)) {
        return kvs_err_set(err, KVS_ERANGE, "%llu B per token x %u tokens "
                           "overflows", (unsigned long long) bpt,
                           block_tokens);
    }

    return kvs_kv_plan_fill(plan, bpt, bb, kv_budget, block_tokens,
                            context, batch, err);
}


int
kvs_kv_plan_compute_dtype(kvs_kv_plan_t *plan, const kvs_kv_shape_t *shape,
    uint32_t n_head_kv, kvs_kv_plan_dtype_t dt, uint64_t kv_budget,
    uint32_t block_tokens, uint64_t context, uint64_t batch,
    kvs_err_t *err)
{
    int              rc;
    kvs_kv_layout_t  lo;

    /* every check of the plain computation, and the unscaled dtypes */
    rc = kvs_kv_plan_compute(plan, shape, n_head_kv,
                             kvs_kv_plan_dtype_bytes(dt), kv_budget,
                             block_tokens, context, batch, err);

    if (rc != KVS_OK || (dt != KVS_KV_PLAN_INT8 && dt != KVS_KV_PLAN_FP8)) {
        return rc;
    }

    rc = kvs_kv_layout_init(&lo, dt == KVS_KV_PLAN_FP8 ? KVS_KV_FP8
                                                       : KVS_KV_INT8,
                            shape->n_layer, n_head_kv, shape->head_dim_k,
                            shape->head_dim_v, block_tokens, err);
    if (rc != KVS_OK) {
        memset(plan, 0, sizeof(kvs_kv_plan_t));
        return rc;
    }

    return kvs_kv_plan_fill(plan, kvs_kv_layout_bytes_per_token(&lo),
                            lo.block_bytes, kv_budget, block_tokens,
                            context, batch, err);
}
