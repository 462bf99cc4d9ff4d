/*
 * kvs_index_route: the gateway's choice of a host from what the lookup
 * found (kvs_index_choose), or without Redis (kvs_index_choose_hash).
 *
 * Both are pure and deterministic: the same candidates, loads and
 * prompt give the same host in every worker of every gateway, which is
 * what keeps a conversation on one host when two gateways take turns.
 */

#include <math.h>
#include <string.h>

#include <xxhash.h>

#include "kvs_index_lookup.h"

#define KVS_INDEX_HASH_BLOCKS  4


static int kvs_index_route_before(const kvs_index_cand_t *a, double sa,
    const kvs_index_cand_t *b, double sb);
static int kvs_index_id_cmp(const kvs_index_cand_t *a,
    const kvs_index_cand_t *b);


void
kvs_index_route_conf_default(kvs_index_route_conf_t *conf)
{
    memset(conf, 0, sizeof(*conf));
    conf->load_weight = 256;
    conf->hash_blocks = KVS_INDEX_HASH_BLOCKS;
    conf->hash_load_slack = 8;
}


const char *
kvs_index_reason_name(kvs_index_reason_t reason)
{
    static const char  *names[] = {
        "prefix", "load", "least_loaded", "short_prompt", "no_index",
        "no_hosts"
    };

    if ((unsigned) reason >= sizeof(names) / sizeof(names[0])) {
        return "unknown";
    }

    return names[reason];
}


void
kvs_index_choose(const kvs_index_cand_t *hosts, uint32_t n_hosts,
    const uint32_t *blocks, uint32_t block_tokens, int short_prompt,
    const kvs_index_route_conf_t *conf, kvs_index_choice_t *out)
{
    kvs_index_choose_tier(hosts, n_hosts, blocks, NULL, block_tokens,
                          short_prompt, conf, out);
}


void
kvs_index_choose_tier(const kvs_index_cand_t *hosts, uint32_t n_hosts,
    const uint32_t *pool, const uint32_t *disk, uint32_t block_tokens,
    int short_prompt, const kvs_index_route_conf_t *conf,
    kvs_index_choice_t *out)
{
    kvs_index_choose_tiers(hosts, n_hosts, pool, NULL, disk, block_tokens,
                           short_prompt, conf, out);
}


void
kvs_index_choose_tiers(const kvs_index_cand_t *hosts, uint32_t n_hosts,
    const uint32_t *pool, const uint32_t *host, const uint32_t *disk,
    uint32_t block_tokens, int short_prompt,
    const kvs_index_route_conf_t *conf, kvs_index_choice_t *out)
{
    double    s, worth, most, won;
    uint32_t  h, tw, hw;
    uint64_t  cached, lower, mem;

    out->host = -1;
    out->reason = KVS_INDEX_ROUTE_NO_HOSTS;
    out->cached_tokens = 0;
    out->score = 0;
    most = 0;
    won = 0;

    for (h = 0; h < n_hosts; h++) {
        if (!hosts[h].up) {
            continue;
        }

        cached = pool != NULL ? (uint64_t) pool[h] * block_tokens : 0;
        mem = host != NULL ? (uint64_t) host[h] * block_tokens : 0;
        lower = disk != NULL ? (uint64_t) disk[h] * block_tokens : 0;

        /* a lower tier's block saves its recompute less its load: worth
         * its weight per mille of a pool block, the host tier's between
         * the disk's and the pool's */
        kvs_index_tier_weights(&hosts[h], &tw, &hw);
        worth = (double) cached
                + (double) mem * hw / KVS_INDEX_TIER_WEIGHT_ONE
                + (double) lower * tw / KVS_INDEX_TIER_WEIGHT_ONE;

        cached += mem + lower;
        if (cached > UINT32_MAX) {
            cached = UINT32_MAX;
        }

        most = worth > most ? worth : most;
        s = worth - conf->load_weight * hosts[h].load;

        if (out->host < 0
            || kvs_index_route_before(&hosts[h], s, &hosts[out->host],
                                      out->score))
        {
            out->host = (int32_t) h;
            out->score = s;
            out->cached_tokens = (uint32_t) cached;
            won = worth;
        }
    }

    if (out->host < 0) {
        return;
    }

    /* load: a prefix worth more than the winner's lost on load, whether
     * the winner holds a lesser one or none */
    out->reason = short_prompt ? KVS_INDEX_ROUTE_SHORT
                  : most == 0 ? KVS_INDEX_ROUTE_LEAST_LOADED
                  : won < most ? KVS_INDEX_ROUTE_LOAD
                  : KVS_INDEX_ROUTE_PREFIX;
}


void
kvs_index_tier_weights(const kvs_index_cand_t *c, uint32_t *tw,
    uint32_t *hw)
{
    uint32_t  t, m;

    t = c->tier_weight != 0 ? c->tier_weight : KVS_INDEX_TIER_WEIGHT_DEFAULT;
    t = t < KVS_INDEX_TIER_WEIGHT_ONE ? t : KVS_INDEX_TIER_WEIGHT_ONE;

    m = c->host_weight != 0 ? c->host_weight : KVS_INDEX_HOST_WEIGHT_DEFAULT;
    m = m < KVS_INDEX_TIER_WEIGHT_ONE ? m : KVS_INDEX_TIER_WEIGHT_ONE;
    m = m > t ? m : t;

    *tw = t;
    *hw = m;
}


uint32_t
kvs_index_tier_weight(uint32_t block_tokens, uint64_t slot_bytes,
    double load_bps, double prefill_tps)
{
    double  load_s, compute_s, w;

    if (!(load_bps > 0) || !(prefill_tps > 0) || block_tokens == 0
        || isinf(load_bps) || isinf(prefill_tps))
    {
        return 0;
    }

    load_s = (double) slot_bytes / load_bps;
    compute_s = (double) block_tokens / prefill_tps;
    w = 1.0 - load_s / compute_s;
    w = floor(w * KVS_INDEX_TIER_WEIGHT_ONE + 0.5);

    if (!(w >= 1)) {
        return 1;
    }

    return w >= KVS_INDEX_TIER_WEIGHT_ONE ? KVS_INDEX_TIER_WEIGHT_ONE
                                          : (uint32_t) w;
}


void
kvs_index_choose_hash(const kvs_index_cand_t *hosts, uint32_t n_hosts,
    const kvs_index_name_t *names, size_t n_names,
    const kvs_index_route_conf_t *conf, kvs_index_choice_t *out)
{
    int                      up;
    int32_t                  best;
    uint32_t                 h, least, k;
    uint64_t                 w, best_w, limit;
    const kvs_index_name_t  *key;

    out->host = -1;
    out->reason = KVS_INDEX_ROUTE_NO_HOSTS;
    out->cached_tokens = 0;
    out->score = 0;

    up = 0;
    least = UINT32_MAX;

    for (h = 0; h < n_hosts; h++) {
        if (hosts[h].up) {
            up = 1;
            least = hosts[h].load < least ? hosts[h].load : least;
        }
    }

    if (!up) {
        return;
    }

    if (n_names == 0) {
        kvs_index_choose(hosts, n_hosts, NULL, 1, 0, conf, out);

        if (out->host >= 0) {
            out->reason = KVS_INDEX_ROUTE_NO_INDEX;
        }

        return;
    }

    k = conf->hash_blocks > 0 ? conf->hash_blocks : KVS_INDEX_HASH_BLOCKS;
    key = &names[(n_names < k ? n_names : k) - 1];
    limit = (uint64_t) least + conf->hash_load_slack;

    best = -1;
    best_w = 0;

    for (h = 0; h < n_hosts; h++) {
        if (!hosts[h].up || hosts[h].load > limit) {
            continue;
        }

        w = kvs_index_hrw_weight(key, hosts[h].id, hosts[h].id_len);

        if (best < 0 || w > best_w
            || (w == best_w && kvs_index_id_cmp(&hosts[h], &hosts[best]) < 0))
        {
            best = (int32_t) h;
            best_w = w;
        }
    }

    if (best < 0) {
        return;
    }

    out->host = best;
    out->reason = KVS_INDEX_ROUTE_NO_INDEX;
    out->score = -conf->load_weight * hosts[best].load;
}


/*
 * XXH3-64 of the host id, seeded with the key's first 8 canonical bytes
 * read little-endian, xor KVS_INDEX_NAME_SEED.
 */
uint64_t
kvs_index_hrw_weight(const kvs_index_name_t *key, const char *id,
    size_t id_len)
{
    size_t    i;
    uint64_t  seed;

    seed = 0;
    for (i = 0; i < 8; i++) {
        seed |= (uint64_t) key->b[i] << (8 * i);
    }

    return XXH3_64bits_withSeed(id, id_len, seed ^ KVS_INDEX_NAME_SEED);
}


/* Whether a (score sa) goes before b (score sb): higher score, lower
 * load, more free blocks, smaller id. */
static int
kvs_index_route_before(const kvs_index_cand_t *a, double sa,
    const kvs_index_cand_t *b, double sb)
{
    if (sa != sb) {
        return sa > sb;
    }

    if (a->load != b->load) {
        return a->load < b->load;
    }

    if (a->free_blocks != b->free_blocks) {
        return a->free_blocks > b->free_blocks;
    }

    return kvs_index_id_cmp(a, b) < 0;
}


static int
kvs_index_id_cmp(const kvs_index_cand_t *a, const kvs_index_cand_t *b)
{
    int     c;
    size_t  n;

    n = a->id_len < b->id_len ? a->id_len : b->id_len;
    c = memcmp(a->id, b->id, n);

    if (c != 0) {
        return c;
    }

    return a->id_len < b->id_len ? -1 : (a->id_len > b->id_len);
}
