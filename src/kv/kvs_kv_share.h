/*
 * kvs_kv_share: how one KV cache budget is shared by several models.
 *
 * A model's need is what it takes to run a few sequences of its full
 * context: bytes per token x context (in whole blocks) x sequences.  The
 * models without a budget of their own share the pool in proportion to
 * their needs, so a large model beside a tiny one gets the larger part;
 * optionally, a share too small for one full context is raised to one,
 * in the models' order, while every budget together stays within a limit
 * (the memory available).
 *
 * Invariants: needs and full contexts saturate at UINT64_MAX instead of
 * wrapping; the shares of the models without their own budget never sum
 * to more than the pool unless raised, and never, raised or not, past
 * the limit.  Pure arithmetic: no allocation, no I/O.
 */

#ifndef KVS_KV_SHARE_H
#define KVS_KV_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

typedef struct {
    uint64_t  need;                   /* in: kvs_kv_share_need()'s */
    uint64_t  full;                   /* in: bytes of one full context */
    uint64_t  budget;                 /* in when own, else out */
    int       own;                    /* in: budget is the model's own */
    double    part;                   /* out: its part of the pool, 0..1
                                         (0 when own) */
    int       raised;                 /* out: raised to one full context */
} kvs_kv_share_t;

/*
 * One full context of n_ctx tokens in whole blocks of block_tokens, and
 * seqs of them: *full and *need in bytes, saturated.  KVS_EINVAL for a
 * zero block size.
 */
int kvs_kv_share_need(uint64_t kv_bytes_per_token, uint32_t n_ctx,
    uint32_t block_tokens, uint32_t seqs, uint64_t *full, uint64_t *need,
    kvs_err_t *err);

/*
 * Sets budget and part of every m[i] without own: pool x need / (sum of
 * their needs), floored; with raise_to_full, then raises each share below
 * full to full, in order, while the sum of every budget (own included)
 * stays <= limit.  When no model shares the pool, nothing is set.
 * KVS_EINVAL for n == 0.
 */
int kvs_kv_share(kvs_kv_share_t *m, size_t n, uint64_t pool, uint64_t limit,
    int raise_to_full, kvs_err_t *err);

#endif /* KVS_KV_SHARE_H */
