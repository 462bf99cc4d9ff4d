/*
 * kvs_index_lookup: the two-round longest-prefix plan over a prompt's
 * block names (kvs_index_lookup.h states the plan and its assumptions).
 *
 * Per host, [lo, hi) is what is not known yet: blocks [0, lo) are held,
 * block hi is not (hi == n_blocks: none missing).  Round 1 moves lo up
 * to the probe after the last contiguous hit and hi down to the first
 * probe miss, so a gap is always one whole segment between two round-1
 * probes, shared by every host that missed at the same probe.  Round 2
 * probes chosen gaps block by block, in ascending order, and moves lo.
 *
 * Tiers: present[h] has bit 1 for a pool entry, bit 2 for a disk-tier
 * entry, bit 4 for a host-tier entry; any is a hit.  The pool's own
 * prefix is followed on the same probes: plo after its last pool hit
 * before pmiss, its first pool miss (a pool hit after a pool miss is
 * ignored, as hits after a miss are); and so is the prefix in the pool
 * or the host tier, flo before fmiss.
 *
 * Invariants: 0 <= lo <= hi <= n_blocks; lo only grows; a host that is
 * not up, or of another epoch, stays at lo = 0 (state INELIGIBLE);
 * plo and flo only grow, plo <= pmiss <= fmiss and flo <= fmiss.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "kvs_index_lookup.h"

#define KVS_LK_INELIGIBLE  0
#define KVS_LK_OPEN        1          /* no miss seen yet */
#define KVS_LK_GAP         2          /* missed: [lo, hi) unknown */
#define KVS_LK_REFINE      3          /* its gap is probed in round 2 */
#define KVS_LK_DONE        4

#define KVS_LK_POOL        1          /* present[]: a pool entry */
#define KVS_LK_DISK        2          /*   a disk-tier entry */
#define KVS_LK_HOST        4          /*   a host-tier entry */
#define KVS_LK_FAST        (KVS_LK_POOL | KVS_LK_HOST)

#define KVS_LK_ALIGN(n)    (((n) + 7) & ~(size_t) 7)

typedef struct {
    double    ub;                     /* best score it could reach */
    uint32_t  load;
    uint32_t  h;
} kvs_index_lk_order_t;


static void kvs_index_lk_sizes(uint32_t n, const kvs_index_route_conf_t *conf,
    uint32_t *k, uint32_t *n_r1, uint32_t *r2);
static uint32_t kvs_index_lk_slots(uint32_t n_hosts);
static int kvs_index_lk_find(const kvs_index_lookup_t *lk, const char *id,
    size_t len);
static void kvs_index_lk_mark(kvs_index_lookup_t *lk,
    const kvs_index_reply_t *r);
static void kvs_index_lk_pool(kvs_index_lk_host_t *hs, uint32_t pos,
    uint8_t present);
static double kvs_index_lk_worth(const kvs_index_lookup_t *lk, uint32_t h,
    uint32_t pool, uint32_t fast, uint32_t blocks);
static uint32_t kvs_index_lk_pool_n(const kvs_index_lookup_t *lk,
    uint32_t h);
static uint32_t kvs_index_lk_fast(const kvs_index_lookup_t *lk, uint32_t h);
static void kvs_index_lk_plan2(kvs_index_lookup_t *lk);
static int kvs_index_lk_refuse(kvs_index_lookup_t *lk, uint32_t round,
    size_t n, kvs_err_t *err);
static int kvs_index_lk_order_cmp(const void *a, const void *b);


size_t
kvs_index_lookup_mem(uint32_t n_blocks, uint32_t n_hosts,
    const kvs_index_route_conf_t *conf)
{
    uint32_t  n_r1, k, r2, cap;

    kvs_index_lk_sizes(n_blocks, conf, &k, &n_r1, &r2);
    cap = n_r1 > r2 ? n_r1 : r2;

    return KVS_LK_ALIGN(n_hosts * sizeof(kvs_index_lk_order_t))
           + KVS_LK_ALIGN(n_hosts * sizeof(kvs_index_lk_host_t))
           + KVS_LK_ALIGN(cap * sizeof(uint32_t))
           + KVS_LK_ALIGN(kvs_index_lk_slots(n_hosts) * sizeof(uint16_t))
           + KVS_LK_ALIGN(n_hosts)
           + KVS_LK_ALIGN(n_r1);
}


int
kvs_index_lookup_init(kvs_index_lookup_t *lk, void *mem, size_t mem_len,
    const kvs_index_cand_t *hosts, uint32_t n_hosts, uint64_t epoch,
    uint32_t n_blocks, uint32_t block_tokens,
    const kvs_index_route_conf_t *conf, kvs_err_t *err)
{
    uint8_t   *p;
    uint32_t   h, i, n_r1, k, r2, slots;

    memset(lk, 0, sizeof(*lk));
    lk->round = 3;

    if (n_hosts > KVS_INDEX_LOOKUP_HOSTS_MAX
        || n_blocks > KVS_INDEX_LOOKUP_BLOCKS_MAX
        || block_tokens == 0 || block_tokens > KVS_INDEX_BLOCK_TOKENS_MAX
        || !(conf->load_weight >= 0) || isinf(conf->load_weight))
    {
        return kvs_err_set(err, KVS_EINVAL, "prefix lookup: %u hosts, %u "
                           "blocks of %u tokens, load weight %g: out of "
                           "range", n_hosts, n_blocks, block_tokens,
                           conf->load_weight);
    }

    if (mem_len < kvs_index_lookup_mem(n_blocks, n_hosts, conf)
        || ((uintptr_t) mem & 7) != 0)
    {
        return kvs_err_set(err, KVS_EINVAL, "prefix lookup: %zu bytes of "
                           "memory at %p, need %zu, 8-byte aligned",
                           mem_len, mem,
                           kvs_index_lookup_mem(n_blocks, n_hosts, conf));
    }

    kvs_index_lk_sizes(n_blocks, conf, &k, &n_r1, &r2);
    slots = kvs_index_lk_slots(n_hosts);

    lk->hosts = hosts;
    lk->n_hosts = n_hosts;
    lk->epoch = epoch;
    lk->n_blocks = n_blocks;
    lk->block_tokens = block_tokens;
    lk->stride = k;
    lk->load_weight = conf->load_weight;
    lk->round2_max = r2;
    lk->probe_cap = n_r1 > lk->round2_max ? n_r1 : lk->round2_max;
    lk->slot_mask = slots - 1;

    p = mem;
    lk->order = p;
    p += KVS_LK_ALIGN(n_hosts * sizeof(kvs_index_lk_order_t));
    lk->host = (kvs_index_lk_host_t *) p;
    p += KVS_LK_ALIGN(n_hosts * sizeof(kvs_index_lk_host_t));
    lk->probe = (uint32_t *) p;
    p += KVS_LK_ALIGN(lk->probe_cap * sizeof(uint32_t));
    lk->slot = (uint16_t *) p;
    p += KVS_LK_ALIGN(slots * sizeof(uint16_t));
    lk->present = p;
    p += KVS_LK_ALIGN(n_hosts);
    lk->gap = p;

    memset(lk->slot, 0, slots * sizeof(uint16_t));
    memset(lk->gap, 0, n_r1);

    for (h = 0; h < n_hosts; h++) {
        if (kvs_index_host_id_check(hosts[h].id, hosts[h].id_len, err)
            != KVS_OK)
        {
            return kvs_err_prefix(err, "prefix lookup: host %u", h);
        }

        i = (uint32_t) XXH3_64bits(hosts[h].id, hosts[h].id_len)
            & lk->slot_mask;

        while (lk->slot[i] != 0) {
            if (hosts[lk->slot[i] - 1].id_len == hosts[h].id_len
                && memcmp(hosts[lk->slot[i] - 1].id, hosts[h].id,
                          hosts[h].id_len) == 0)
            {
                return kvs_err_set(err, KVS_EINVAL, "prefix lookup: host "
                                   "\"%.*s\" twice", (int) hosts[h].id_len,
                                   hosts[h].id);
            }

            i = (i + 1) & lk->slot_mask;
        }

        lk->slot[i] = (uint16_t) (h + 1);

        lk->host[h].lo = 0;
        lk->host[h].hi = n_blocks;
        lk->host[h].plo = 0;
        lk->host[h].pmiss = n_blocks;
        lk->host[h].flo = 0;
        lk->host[h].fmiss = n_blocks;
        lk->host[h].state = hosts[h].up && hosts[h].epoch == epoch
                            ? KVS_LK_OPEN : KVS_LK_INELIGIBLE;
    }

    for (i = 0; i < n_r1; i++) {
        lk->probe[i] = ((i + 1) * k < n_blocks ? (i + 1) * k : n_blocks) - 1;
    }

    lk->n_probe = n_r1;
    lk->round = n_r1 > 0 ? 1 : 3;

    return KVS_OK;
}


int
kvs_index_lookup_cmds(const kvs_index_lookup_t *lk,
    const kvs_index_name_t *names, kvs_index_cmds_t *c, kvs_err_t *err)
{
    int       rc;
    uint32_t  i;

    for (i = 0; i < lk->n_probe; i++) {
        rc = kvs_index_cmd_blk_get(c, &names[lk->probe[i]], err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


int
kvs_index_lookup_round1(kvs_index_lookup_t *lk,
    const kvs_index_reply_t *replies, size_t n, kvs_err_t *err)
{
    uint32_t              h, j, pos;
    kvs_index_lk_host_t  *hs;

    if (lk->round != 1 || n != lk->n_probe) {
        for (h = 0; h < lk->n_hosts; h++) {
            lk->host[h].lo = 0;
        }

        return kvs_index_lk_refuse(lk, 1, n, err);
    }

    lk->rounds = 1;
    lk->probes = lk->n_probe;

    for (j = 0; j < lk->n_probe; j++) {
        pos = lk->probe[j];
        kvs_index_lk_mark(lk, &replies[j]);

        for (h = 0; h < lk->n_hosts; h++) {
            hs = &lk->host[h];

            if (hs->state != KVS_LK_OPEN) {
                continue;
            }

            kvs_index_lk_pool(hs, pos, lk->present[h]);

            if (lk->present[h]) {
                hs->lo = pos + 1;

            } else {
                hs->hi = pos;
                hs->state = hs->lo < pos ? KVS_LK_GAP : KVS_LK_DONE;
            }
        }
    }

    for (h = 0; h < lk->n_hosts; h++) {
        if (lk->host[h].state == KVS_LK_OPEN) {
            lk->host[h].state = KVS_LK_DONE;     /* held the last block */
        }
    }

    kvs_index_lk_plan2(lk);

    lk->round = lk->n_probe > 0 ? 2 : 3;

    return KVS_OK;
}


int
kvs_index_lookup_round2(kvs_index_lookup_t *lk,
    const kvs_index_reply_t *replies, size_t n, kvs_err_t *err)
{
    uint32_t              h, j, pos;
    kvs_index_lk_host_t  *hs;

    if (lk->round != 2 || n != lk->n_probe) {
        return kvs_index_lk_refuse(lk, 2, n, err);
    }

    lk->rounds = 2;
    lk->probes += lk->n_probe;

    for (j = 0; j < lk->n_probe; j++) {
        pos = lk->probe[j];
        kvs_index_lk_mark(lk, &replies[j]);

        for (h = 0; h < lk->n_hosts; h++) {
            hs = &lk->host[h];

            if (hs->state != KVS_LK_REFINE || hs->lo != pos) {
                continue;
            }

            kvs_index_lk_pool(hs, pos, lk->present[h]);

            if (lk->present[h]) {
                hs->lo = pos + 1;

            } else {
                hs->state = KVS_LK_DONE;
            }
        }
    }

    for (h = 0; h < lk->n_hosts; h++) {
        if (lk->host[h].state == KVS_LK_REFINE) {
            lk->host[h].state = KVS_LK_DONE;     /* held up to its miss */
        }
    }

    lk->round = 3;
    lk->n_probe = 0;

    return KVS_OK;
}


void
kvs_index_lookup_result(const kvs_index_lookup_t *lk, uint32_t *blocks)
{
    uint32_t  h;

    for (h = 0; h < lk->n_hosts; h++) {
        blocks[h] = lk->host[h].state == KVS_LK_INELIGIBLE
                    ? 0 : lk->host[h].lo;
    }
}


void
kvs_index_lookup_result_tier(const kvs_index_lookup_t *lk, uint32_t *pool,
    uint32_t *disk)
{
    uint32_t  h;

    kvs_index_lookup_result_tiers(lk, pool, NULL, disk);

    /* the two-way split: the host tier's blocks are not the pool's */
    if (disk != NULL) {
        for (h = 0; h < lk->n_hosts; h++) {
            disk[h] += kvs_index_lk_fast(lk, h) - kvs_index_lk_pool_n(lk, h);
        }
    }
}


void
kvs_index_lookup_result_tiers(const kvs_index_lookup_t *lk, uint32_t *pool,
    uint32_t *host, uint32_t *disk)
{
    uint32_t  h, lo, p, f;

    for (h = 0; h < lk->n_hosts; h++) {
        lo = lk->host[h].state == KVS_LK_INELIGIBLE ? 0 : lk->host[h].lo;
        p = kvs_index_lk_pool_n(lk, h);
        f = kvs_index_lk_fast(lk, h);

        if (pool != NULL) {
            pool[h] = p;
        }

        if (host != NULL) {
            host[h] = f - p;
        }

        if (disk != NULL) {
            disk[h] = lo - f;
        }
    }
}


/* Host h's blocks believed in its pool: plo, within what it holds. */
static uint32_t
kvs_index_lk_pool_n(const kvs_index_lookup_t *lk, uint32_t h)
{
    uint32_t  lo;

    lo = lk->host[h].state == KVS_LK_INELIGIBLE ? 0 : lk->host[h].lo;

    return lk->host[h].plo < lo ? lk->host[h].plo : lo;
}


/* ... and in its pool or host tier: flo, from plo to what it holds. */
static uint32_t
kvs_index_lk_fast(const kvs_index_lookup_t *lk, uint32_t h)
{
    uint32_t  lo, f;

    lo = lk->host[h].state == KVS_LK_INELIGIBLE ? 0 : lk->host[h].lo;
    f = lk->host[h].flo < lo ? lk->host[h].flo : lo;

    return f > kvs_index_lk_pool_n(lk, h) ? f : kvs_index_lk_pool_n(lk, h);
}


/* A probe at pos, not before the host's any-tier miss: its pool's
 * prefix moves on a pool hit before any pool miss, and ends at a
 * pool miss; its fast prefix likewise on pool or host hits. */
static void
kvs_index_lk_pool(kvs_index_lk_host_t *hs, uint32_t pos, uint8_t present)
{
    if (present & KVS_LK_POOL) {
        if (pos < hs->pmiss && pos + 1 > hs->plo) {
            hs->plo = pos + 1;
        }

    } else if (pos < hs->pmiss) {
        hs->pmiss = pos;
    }

    if (present & KVS_LK_FAST) {
        if (pos < hs->fmiss && pos + 1 > hs->flo) {
            hs->flo = pos + 1;
        }

    } else if (pos < hs->fmiss) {
        hs->fmiss = pos;
    }
}


/* Host h's worth in tokens with blocks [0, blocks) held, the first pool
 * of them in its pool, then up to the first fast in its host tier, the
 * rest in its disk tier.  With 1000 >= hw >= tw it grows with each
 * argument, so the bounds of plan2 are bounds of the worth. */
static double
kvs_index_lk_worth(const kvs_index_lookup_t *lk, uint32_t h, uint32_t pool,
    uint32_t fast, uint32_t blocks)
{
    uint32_t  tw, hw;

    kvs_index_tier_weights(&lk->hosts[h], &tw, &hw);
    pool = pool < blocks ? pool : blocks;
    fast = fast < blocks ? fast : blocks;
    fast = fast > pool ? fast : pool;

    return ((double) pool
            + (double) (fast - pool) * hw / KVS_INDEX_TIER_WEIGHT_ONE
            + (double) (blocks - fast) * tw / KVS_INDEX_TIER_WEIGHT_ONE)
           * lk->block_tokens;
}


/*
 * The stride k (ceil(sqrt(n)) balances the rounds: n / k + (k - 1) is
 * least), round 1's probe count and round 2's bound, all at most n so
 * that no product overflows and no memory is sized for probes that
 * cannot happen.
 */
static void
kvs_index_lk_sizes(uint32_t n, const kvs_index_route_conf_t *conf,
    uint32_t *k, uint32_t *n_r1, uint32_t *r2)
{
    uint32_t  s;

    s = conf->stride;

    if (s == 0) {
        for (s = (uint32_t) sqrt((double) n); (uint64_t) s * s < n; s++) {
            /* void: sqrt may round down */
        }
    }

    s = s < n ? s : n;
    s = s > 0 ? s : 1;

    *k = s;
    *n_r1 = n == 0 ? 0 : (n - 1) / s + 1;
    *r2 = conf->round2_max > 0 ? conf->round2_max : 4 * s;
    *r2 = *r2 < n ? *r2 : n;
}


static uint32_t
kvs_index_lk_slots(uint32_t n_hosts)
{
    uint32_t  s;

    for (s = 8; s < 2 * n_hosts; s *= 2) {
        /* void */
    }

    return s;
}


static int
kvs_index_lk_find(const kvs_index_lookup_t *lk, const char *id, size_t len)
{
    uint32_t                 i;
    const kvs_index_cand_t  *c;

    i = (uint32_t) XXH3_64bits(id, len) & lk->slot_mask;

    for ( ;; ) {
        if (lk->slot[i] == 0) {
            return -1;
        }

        c = &lk->hosts[lk->slot[i] - 1];

        if (c->id_len == len && memcmp(c->id, id, len) == 0) {
            return lk->slot[i] - 1;
        }

        i = (i + 1) & lk->slot_mask;
    }
}


/* present[h]: the tiers (KVS_LK_POOL, _DISK, _HOST) in which r lists
 * host h's current incarnation; 0: none. */
static void
kvs_index_lk_mark(kvs_index_lookup_t *lk, const kvs_index_reply_t *r)
{
    int               h;
    size_t            i, id_len;
    uint64_t          inc;
    const char       *id;
    kvs_index_tier_t  tier;

    memset(lk->present, 0, lk->n_hosts);

    if (r->type == KVS_INDEX_REPLY_NIL) {
        return;                       /* no entry: a miss */
    }

    if (r->type != KVS_INDEX_REPLY_ARRAY || r->elements % 2 != 0
        || r->elements > 2 * KVS_INDEX_ENTRIES_MAX
        || (r->elements > 0 && r->element == NULL))
    {
        lk->bad_replies++;
        return;
    }

    for (i = 0; i < r->elements; i += 2) {
        if (kvs_index_blk_entry_tier(&r->element[i], &r->element[i + 1],
                                     &id, &id_len, &inc, &tier)
            != KVS_OK)
        {
            lk->bad_entries++;
            continue;
        }

        h = kvs_index_lk_find(lk, id, id_len);

        if (h < 0) {
            lk->unknown_entries++;

        } else if (lk->hosts[h].incarnation != inc) {
            lk->stale_entries++;

        } else {
            lk->present[h] |= tier == KVS_INDEX_TIER_DISK ? KVS_LK_DISK
                              : tier == KVS_INDEX_TIER_HOST ? KVS_LK_HOST
                              : KVS_LK_POOL;
        }
    }
}


/* Replies that are not this round's: the lookup ends with what it has. */
static int
kvs_index_lk_refuse(kvs_index_lookup_t *lk, uint32_t round, size_t n,
    kvs_err_t *err)
{
    kvs_err_set(err, KVS_EINVAL, "prefix lookup: %zu replies to round %u "
                "of %u probes (in round %u)", n, round, lk->n_probe,
                lk->round);

    lk->round = 3;
    lk->n_probe = 0;

    return KVS_EINVAL;
}


/*
 * Chooses round 2's gaps: a host's score lies between the worth of its
 * lo blocks (the first plo in its pool, up to flo in its host tier) and
 * that of hi blocks (the first pmiss in its pool, up to fmiss in its
 * host tier), less w * load; a gap is worth probing only
 * for a host whose best case is at least the best worst case of any
 * host that is up (who would win otherwise).  Best cases first, whole
 * gaps, until round2_max.
 */
static void
kvs_index_lk_plan2(kvs_index_lookup_t *lk)
{
    double                 best, s;
    uint32_t               h, n, g, pos;
    kvs_index_lk_order_t  *order;
    kvs_index_lk_host_t   *hs;

    order = lk->order;
    best = -INFINITY;

    for (h = 0; h < lk->n_hosts; h++) {
        if (!lk->hosts[h].up) {
            continue;
        }

        s = kvs_index_lk_worth(lk, h, lk->host[h].plo, lk->host[h].flo,
                               lk->host[h].lo)
            - lk->load_weight * lk->hosts[h].load;

        if (s > best) {
            best = s;
        }
    }

    n = 0;

    for (h = 0; h < lk->n_hosts; h++) {
        hs = &lk->host[h];

        if (hs->state != KVS_LK_GAP) {
            continue;
        }

        s = kvs_index_lk_worth(lk, h, hs->pmiss, hs->fmiss, hs->hi)
            - lk->load_weight * lk->hosts[h].load;

        if (s < best) {
            hs->state = KVS_LK_DONE;  /* cannot win: lo is enough */
            continue;
        }

        order[n].ub = s;
        order[n].load = lk->hosts[h].load;
        order[n].h = h;
        n++;
    }

    qsort(order, n, sizeof(kvs_index_lk_order_t), kvs_index_lk_order_cmp);

    lk->n_probe = 0;

    for (h = 0; h < n; h++) {
        hs = &lk->host[order[h].h];
        g = hs->hi / lk->stride;      /* the round-1 probe that missed */

        if (!lk->gap[g]) {
            if (hs->hi - hs->lo > lk->round2_max - lk->n_probe) {
                hs->state = KVS_LK_DONE;
                lk->capped_hosts++;
                continue;
            }

            for (pos = hs->lo; pos < hs->hi; pos++) {
                lk->probe[lk->n_probe++] = pos;
            }

            lk->gap[g] = 1;
        }

        hs->state = KVS_LK_REFINE;
    }
}


static int
kvs_index_lk_order_cmp(const void *a, const void *b)
{
    const kvs_index_lk_order_t  *x = a, *y = b;

    if (x->ub != y->ub) {
        return x->ub > y->ub ? -1 : 1;
    }

    if (x->load != y->load) {
        return x->load < y->load ? -1 : 1;
    }

    return x->h < y->h ? -1 : (x->h > y->h);
}
