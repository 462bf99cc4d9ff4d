/*
 * kvs_kv_share: one KV budget shared by several models in proportion to
 * their needs (kvs_kv_share.h).  Ratios are taken in double: the needs
 * may be near 2^64, and a share off by a few bytes only moves a block
 * boundary the plan floors anyway.
 */

#include "kvs_kv_share.h"


int
kvs_kv_share_need(uint64_t kv_bytes_per_token, uint32_t n_ctx,
    uint32_t block_tokens, uint32_t seqs, uint64_t *full, uint64_t *need,
    kvs_err_t *err)
{
    uint64_t  tokens;

    if (block_tokens == 0) {
        return kvs_err_set(err, KVS_EINVAL, "kv share: blocks of 0 tokens");
    }

    tokens = ((uint64_t) n_ctx + block_tokens - 1) / block_tokens
             * block_tokens;

    *full = kv_bytes_per_token != 0 && tokens > UINT64_MAX
                                               / kv_bytes_per_token
            ? UINT64_MAX : tokens * kv_bytes_per_token;

    *need = seqs != 0 && *full > UINT64_MAX / seqs
            ? UINT64_MAX : *full * seqs;

    return KVS_OK;
}


int
kvs_kv_share(kvs_kv_share_t *m, size_t n, uint64_t pool, uint64_t limit,
    int raise_to_full, kvs_err_t *err)
{
    size_t    i;
    double    total, v;
    uint64_t  sum, extra;

    if (n == 0) {
        return kvs_err_set(err, KVS_EINVAL, "kv share: no model");
    }

    total = 0;
    for (i = 0; i < n; i++) {
        m[i].raised = 0;
        m[i].part = 0;
        if (!m[i].own) {
            total += (double) m[i].need;
        }
    }

    sum = 0;

    for (i = 0; i < n; i++) {
        if (!m[i].own) {
            m[i].part = total > 0 ? (double) m[i].need / total : 0;
            v = (double) pool * m[i].part;

            /* the double of a pool near 2^64 may round past it */
            m[i].budget = v >= (double) pool ? pool : (uint64_t) v;
        }

        sum = m[i].budget > UINT64_MAX - sum ? UINT64_MAX
                                             : sum + m[i].budget;
    }

    if (!raise_to_full) {
        return KVS_OK;
    }

    for (i = 0; i < n; i++) {
        if (m[i].own || m[i].budget >= m[i].full) {
            continue;
        }

        extra = m[i].full - m[i].budget;

        if (sum > limit || extra > limit - sum) {
            continue;
        }

        m[i].budget = m[i].full;
        m[i].raised = 1;
        sum += extra;
    }

    return KVS_OK;
}
