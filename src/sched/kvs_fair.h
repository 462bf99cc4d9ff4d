/*
 * kvs_fair: tenants and their virtual token counters, for a fair share
 * of the engine between them (the waiting queue's order).
 *
 * A tenant's counter (vtc) grows by the tokens the engine computes for
 * it, weighted by kind (w_prefill per prompt or recomputed token,
 * w_decode per generated one); tokens reused from the prefix cache cost
 * nothing.  The scheduler admits next the waiting sequence of the tenant
 * with the smallest counter (the oldest of its sequences), so a tenant
 * that sends more waits more.  A tenant that comes back from idle (no
 * sequence queued) is lifted to the smallest counter of those active,
 * so idleness banks no credit.  Idle tenants are kept, with what they
 * were served, up to KVS_FAIR_MAX_IDLE; past that the one idle longest
 * goes.
 *
 * The KV cap: while other tenants wait, a tenant holding more than
 * kv_max_milli thousandths of the pool's blocks is not admitted more.
 *
 * Ownership: the scheduler owns the table and every tenant; a sequence
 * points at its tenant while queued.  Engine thread only; no locks.
 */

#ifndef KVS_FAIR_H
#define KVS_FAIR_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

#define KVS_FAIR_MAX_KEY   256        /* bytes of a tenant key */
#define KVS_FAIR_BUCKETS   256
#define KVS_FAIR_MAX_IDLE  1024       /* tenants kept with no sequence */

typedef struct kvs_tenant_s  kvs_tenant_t;

struct kvs_tenant_s {
    kvs_tenant_t  *next;              /* bucket chain */
    uint64_t       hash;
    uint64_t       vtc;               /* weighted tokens served */
    uint64_t       prefill;           /* tokens computed, by kind */
    uint64_t       decode;
    uint32_t       n_seqs;            /* queued, waiting or running */
    uint64_t       idle_since;        /* f->clock when n_seqs became 0 */
    uint32_t       kv_blocks;         /* its running sequences' blocks,
                                         as of the current plan */
    size_t         key_len;
    char           key[KVS_FAIR_MAX_KEY];
};

typedef struct {
    uint32_t       w_prefill;         /* counter units per token */
    uint32_t       w_decode;
    uint32_t       kv_max_milli;      /* 1..1000; 0: no cap */
    uint32_t       n_tenants;         /* in the table */
    uint32_t       n_idle;            /* of those, with no sequence */
    uint64_t       clock;             /* counts leaves, for idle order */
    kvs_tenant_t  *buckets[KVS_FAIR_BUCKETS];
} kvs_fair_t;

typedef struct {
    const char  *key;                 /* the tenant's own copy */
    size_t       key_len;
    uint64_t     vtc;
    uint64_t     prefill;
    uint64_t     decode;
    uint32_t     n_seqs;
    uint32_t     kv_blocks;
} kvs_fair_row_t;


/* Weights of 0 become 1; kv_max_milli over 1000 is refused. */
int kvs_fair_init(kvs_fair_t *f, uint32_t w_prefill, uint32_t w_decode,
    uint32_t kv_max_milli, kvs_err_t *err);
void kvs_fair_free(kvs_fair_t *f);

/* The tenant of key with one more queued sequence (created, or lifted
 * from idle, at least to the smallest active counter).  KVS_EINVAL for a
 * key over KVS_FAIR_MAX_KEY, KVS_ENOMEM; *t is NULL then. */
int kvs_fair_join(kvs_fair_t *f, const char *key, size_t key_len,
    kvs_tenant_t **t, kvs_err_t *err);

/* One sequence fewer; with its last the tenant turns idle, and the
 * idle one idle longest goes when too many are.  NULL: no-op. */
void kvs_fair_leave(kvs_fair_t *f, kvs_tenant_t *t);

/* Counts tokens computed for t (NULL: no-op). */
void kvs_fair_served(kvs_fair_t *f, kvs_tenant_t *t, uint32_t tokens,
    int decode);

/* 1 when t may not take more blocks: it holds over its cap of pool
 * blocks (others waiting is the caller's condition). */
int kvs_fair_capped(const kvs_fair_t *f, const kvs_tenant_t *t,
    uint32_t more, uint32_t pool_blocks);

/* The max tenants served most tokens (prefill and decode), most first,
 * for metrics; returns how many rows were written.  *all (may be NULL)
 * gets the sums over every tenant in the table (its key NULL). */
size_t kvs_fair_rows(const kvs_fair_t *f, kvs_fair_row_t *rows, size_t max,
    kvs_fair_row_t *all);

#endif /* KVS_FAIR_H */
