/*
 * kvs_index_lookup: which host holds the longest prefix of a prompt, in
 * at most two pipelined round trips to Redis, and the gateway's choice
 * of a host from that (docs/prefix-index.md, "Lookup" and "Routing").
 *
 * The plan over a prompt's n block names (kvs_index_name_chain), with a
 * stride k (ceil(sqrt(n)) by default):
 *
 *   round 1  HGETALL the blocks k-1, 2k-1, ... and n-1: ceil(n / k)
 *            probes.  A host's prefix is known to reach past its last
 *            probe hit before its first probe miss.
 *   round 2  for hosts whose prefix ends between two probes and that
 *            could still win (their upper bound beats the best lower
 *            bound under the load penalty), HGETALL every block of that
 *            gap: at most k - 1 per gap, at most round2_max in all.
 *
 * For 100k tokens in 16-token blocks: n = 6,250, k = 80, 79 probes in
 * round 1 and at most 79 per gap in round 2.
 *
 * Tiers: an entry is the pool's (field <id>), the host tier's (h:<id>)
 * or the disk tier's (d:<id>); any is a hit for the prefix.  Per host
 * the lookup also keeps, from the same probes, the pool's own prefix
 * and the prefix held in the pool or the host tier (its "fast" one):
 * where such an end falls in a gap that round 2 does not probe, it is
 * known only to the stride, and the blocks between count as the slower
 * tier's (a lower bound of the host's worth).
 *
 * Assumption: an entry for host h at block i means h holds blocks 0..i
 * (its radix tree caches a block only with its parent, and evicts
 * leaves first; publishers add parents first and delete children
 * first).  Entries that break it (a lost HDEL, an expired parent) can
 * only shorten what is believed: a host's prefix ends at its first
 * miss, and hits after a miss are ignored.  Entries of another
 * incarnation than the candidate's current one (a restarted or dead
 * process), of unknown hosts, or malformed, count as misses.  A reply
 * that is not an array (an error, a wrong type) is a miss for every
 * host.  Nothing here is trusted for correctness: the engine compares
 * tokens.
 *
 * Memory: one caller-given block of kvs_index_lookup_mem() bytes (8-byte
 * aligned), nothing allocated; a lookup is for one prompt and is not
 * shared between threads.
 */

#ifndef KVS_INDEX_LOOKUP_H
#define KVS_INDEX_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_index_name.h"
#include "kvs_index_schema.h"

#define KVS_INDEX_LOOKUP_HOSTS_MAX   1024
#define KVS_INDEX_LOOKUP_BLOCKS_MAX  (1u << 20)
#define KVS_INDEX_ENTRIES_MAX        4096   /* host fields of one block */

/* A host the gateway may route to, as it sees it now. */
typedef struct {
    const char  *id;                  /* [id_len] */
    size_t       id_len;
    uint64_t     incarnation;         /* its record's, now */
    uint64_t     epoch;               /* its record's weight epoch */
    uint32_t     load;                /* running + waiting, plus what the
                                         gateway sent since */
    uint32_t     free_blocks;
    int          up;                  /* routable: a fresh, accepted
                                         record (or a configured peer) */
    uint32_t     tier_weight;         /* its record's tw: a disk-tier
                                         block's worth per mille of a
                                         pool block's; 0: not said, the
                                         default is used */
    uint32_t     host_weight;         /* its record's hw: a host-tier
                                         block's, the same way; 0: not
                                         said */
} kvs_index_cand_t;

typedef struct {
    double    load_weight;            /* cached tokens one unit of load
                                         is worth (>= 0) */
    uint32_t  stride;                 /* k; 0: ceil(sqrt(n)); at most n */
    uint32_t  round2_max;             /* round-2 probes; 0: 4 * k; at
                                         most n */
    uint32_t  hash_blocks;            /* fallback key: the name of block
                                         min(n, this) - 1; 0: 4 */
    uint32_t  hash_load_slack;        /* fallback skips hosts loaded more
                                         than the least plus this */
} kvs_index_route_conf_t;

typedef enum {
    KVS_INDEX_ROUTE_PREFIX = 0,       /* the winner holds the longest
                                         prefix */
    KVS_INDEX_ROUTE_LOAD,             /* a longer prefix lost to load */
    KVS_INDEX_ROUTE_LEAST_LOADED,     /* no host holds any prefix */
    KVS_INDEX_ROUTE_SHORT,            /* under one block: nothing to ask */
    KVS_INDEX_ROUTE_NO_INDEX,         /* Redis unavailable: hashed */
    KVS_INDEX_ROUTE_NO_HOSTS          /* no host is up */
} kvs_index_reason_t;

typedef struct {
    int32_t             host;         /* index into the candidates, -1 */
    kvs_index_reason_t  reason;
    uint32_t            cached_tokens;  /* the winner's, believed */
    double              score;
} kvs_index_choice_t;

typedef struct {
    uint32_t  lo;                     /* blocks [0, lo) held */
    uint32_t  hi;                     /* block hi missing (n: none) */
    uint32_t  state;
    uint32_t  plo;                    /* blocks [0, plo) in its pool */
    uint32_t  pmiss;                  /* first block seen not in its
                                         pool (n: none seen) */
    uint32_t  flo;                    /* blocks [0, flo) in its pool or
                                         host tier */
    uint32_t  fmiss;                  /* first block seen in neither */
} kvs_index_lk_host_t;

typedef struct {
    const kvs_index_cand_t  *hosts;   /* [n_hosts], borrowed */
    uint32_t                 n_hosts;
    uint64_t                 epoch;
    uint32_t                 n_blocks;
    uint32_t                 block_tokens;
    uint32_t                 stride;
    uint32_t                 round;   /* next round: 1, 2; 3 done */
    uint32_t                 round2_max;
    double                   load_weight;

    uint32_t                *probe;   /* [probe_cap] block positions of
                                         this round, ascending per gap */
    uint32_t                 n_probe;
    uint32_t                 probe_cap;

    kvs_index_lk_host_t     *host;    /* [n_hosts] */
    uint16_t                *slot;    /* [slot_mask + 1] host + 1, by id */
    uint32_t                 slot_mask;
    uint8_t                 *present; /* [n_hosts] scratch */
    uint8_t                 *gap;     /* [n_r1] gaps chosen in round 2 */
    void                    *order;   /* [n_hosts] scratch */

    /* what happened, for logs, metrics and benches */
    uint32_t                 rounds;  /* round trips used */
    uint32_t                 probes;  /* HGETALLs sent */
    uint32_t                 bad_replies;
    uint32_t                 bad_entries;
    uint32_t                 stale_entries;   /* another incarnation */
    uint32_t                 unknown_entries; /* not a candidate */
    uint32_t                 capped_hosts;    /* not refined: over
                                                 round2_max */
} kvs_index_lookup_t;


/* Bytes of memory a lookup of n_blocks over n_hosts needs under conf. */
size_t kvs_index_lookup_mem(uint32_t n_blocks, uint32_t n_hosts,
    const kvs_index_route_conf_t *conf);

/*
 * Plans the lookup of n_blocks names (block_tokens each) under epoch
 * over hosts[0, n_hosts) in mem (kvs_index_lookup_mem() bytes, 8-byte
 * aligned).  Hosts not up, or of another epoch, never hold a prefix.
 * Afterwards lk->probe[0, n_probe) are round 1's positions (none when
 * n_blocks is 0: the lookup is already done).  KVS_EINVAL for bad
 * arguments or duplicate host ids.
 */
int kvs_index_lookup_init(kvs_index_lookup_t *lk, void *mem, size_t mem_len,
    const kvs_index_cand_t *hosts, uint32_t n_hosts, uint64_t epoch,
    uint32_t n_blocks, uint32_t block_tokens,
    const kvs_index_route_conf_t *conf, kvs_err_t *err);

/* Appends HGETALL of the current round's probes (names[probe[i]]) to c;
 * KVS_ERANGE (c unchanged beyond the commands that fit: the caller
 * resets it) when c is too small. */
int kvs_index_lookup_cmds(const kvs_index_lookup_t *lk,
    const kvs_index_name_t *names, kvs_index_cmds_t *c, kvs_err_t *err);

/*
 * Takes round 1's replies (one per probe, in order) and leaves round 2's
 * positions in lk->probe[0, n_probe); n_probe 0 means done.  KVS_EINVAL
 * for a reply count that is not the probe count, or a call out of
 * order; the lookup is then done with nothing known.
 */
int kvs_index_lookup_round1(kvs_index_lookup_t *lk,
    const kvs_index_reply_t *replies, size_t n, kvs_err_t *err);

/* Takes round 2's replies; the lookup is done.  On KVS_EINVAL, what
 * round 1 proved stands. */
int kvs_index_lookup_round2(kvs_index_lookup_t *lk,
    const kvs_index_reply_t *replies, size_t n, kvs_err_t *err);

/* Per host, the blocks of the prompt it is believed to hold, into
 * blocks[n_hosts] (a lower bound until the lookup is done). */
void kvs_index_lookup_result(const kvs_index_lookup_t *lk, uint32_t *blocks);

/* The same split by tier: pool[h] of blocks[h] are believed in host h's
 * pool, disk[h] = the rest, in its disk tier (either may be NULL). */
void kvs_index_lookup_result_tier(const kvs_index_lookup_t *lk,
    uint32_t *pool, uint32_t *disk);

/* The three-way split: pool[h] blocks believed in host h's pool, then
 * host[h] in its host memory tier (or its pool), then disk[h] in its
 * disk tier (or either faster one); any may be NULL.  A block seen in
 * several tiers counts in the fastest; the sum is what
 * kvs_index_lookup_result() gives. */
void kvs_index_lookup_result_tiers(const kvs_index_lookup_t *lk,
    uint32_t *pool, uint32_t *host, uint32_t *disk);

/* A disk-tier block's worth per mille of a pool block's when a host
 * does not say (unmeasured): half. */
#define KVS_INDEX_TIER_WEIGHT_DEFAULT  500

/* A host-tier block's, the same way: a copy from host memory costs a
 * small share of a block's prefill (docs/prefix-index.md). */
#define KVS_INDEX_HOST_WEIGHT_DEFAULT  900

/*
 * The weights routing gives host c's lower tiers, per mille of a pool
 * block: *tw its disk tier's (its tier_weight, else the default, at
 * most 1000), *hw its host tier's (its host_weight, else the default),
 * at least *tw and at most 1000, so that a block is never worth less in
 * a faster tier.
 */
void kvs_index_tier_weights(const kvs_index_cand_t *c, uint32_t *tw,
    uint32_t *hw);

/*
 * What a host publishes as tw: the share of a block's recompute time
 * that loading it from the disk tier saves, per mille: 1000 * (1 -
 * (slot_bytes / load_bps) / (block_tokens / prefill_tps)), at least 1
 * (a tier slower than recompute: the engine would recompute) and at
 * most 1000; 0 (not said) while either rate is unmeasured.
 */
uint32_t kvs_index_tier_weight(uint32_t block_tokens, uint64_t slot_bytes,
    double load_bps, double prefill_tps);

/* Default routing knobs (load_weight 256, automatic stride and bounds,
 * 4 hash blocks, hash_load_slack 8). */
void kvs_index_route_conf_default(kvs_index_route_conf_t *conf);

/*
 * The host maximising cached_tokens - load_weight * load over hosts that
 * are up, with blocks[h] (NULL: nothing known) whole blocks of
 * block_tokens cached; ties go to the lower load, then the more free
 * blocks, then the smaller id.  out->host is -1 (NO_HOSTS) when none is
 * up.  short_prompt says the prompt had no whole block (reason SHORT).
 */
void kvs_index_choose(const kvs_index_cand_t *hosts, uint32_t n_hosts,
    const uint32_t *blocks, uint32_t block_tokens, int short_prompt,
    const kvs_index_route_conf_t *conf, kvs_index_choice_t *out);

/*
 * kvs_index_choose with tiers: host h's cached tokens are pool[h] blocks
 * at full worth and disk[h] blocks at its tier weight (hosts[h]
 * .tier_weight, or KVS_INDEX_TIER_WEIGHT_DEFAULT) in the score; the
 * choice's cached_tokens are its pool and disk blocks' tokens, and the
 * reason compares them weighted.  disk NULL: kvs_index_choose.
 */
void kvs_index_choose_tier(const kvs_index_cand_t *hosts, uint32_t n_hosts,
    const uint32_t *pool, const uint32_t *disk, uint32_t block_tokens,
    int short_prompt, const kvs_index_route_conf_t *conf,
    kvs_index_choice_t *out);

/* The same with the host tier's host[h] blocks too, at its host weight
 * (kvs_index_tier_weights()); host NULL: kvs_index_choose_tier. */
void kvs_index_choose_tiers(const kvs_index_cand_t *hosts, uint32_t n_hosts,
    const uint32_t *pool, const uint32_t *host, const uint32_t *disk,
    uint32_t block_tokens, int short_prompt,
    const kvs_index_route_conf_t *conf, kvs_index_choice_t *out);

/*
 * Redis unavailable: rendezvous hashing of the name of block
 * min(n_names, hash_blocks) - 1 over the ids of the up hosts whose load
 * is within hash_load_slack of the least (least loaded when there are no
 * names).  Every gateway agrees without talking to anyone, and a
 * conversation keeps its host while the host set stays.
 */
void kvs_index_choose_hash(const kvs_index_cand_t *hosts, uint32_t n_hosts,
    const kvs_index_name_t *names, size_t n_names,
    const kvs_index_route_conf_t *conf, kvs_index_choice_t *out);

/* The rendezvous weight of host id under key (documented, so that other
 * gateways may compute it too). */
uint64_t kvs_index_hrw_weight(const kvs_index_name_t *key, const char *id,
    size_t id_len);

/* "prefix", "load", "least_loaded", "short_prompt", "no_index",
 * "no_hosts": the values of $kvserve_route_reason. */
const char *kvs_index_reason_name(kvs_index_reason_t reason);

#endif /* KVS_INDEX_LOOKUP_H */
