/*
 * kvs_index_gw: the gateway's pure helpers for prefix-aware routing
 * (kvserve_route, src/ngx/route/ngx_http_kvserve_route*.c;
 * docs/prefix-index.md "Routing"): the host table's update rule, an
 * advertise URL's address as nginx names upstream peers, and the pseudo
 * host ids that mode=approximate records its own decisions under.
 *
 * The host table is a gateway worker's view of the engine hosts: their
 * latest accepted records and how many requests the worker sent each
 * since that record's heartbeat (the record's load does not count them
 * yet).  The update rule (kvs_index_gw_accept) keeps the invariants:
 *  - a host whose key is gone (nil: its TTL expired, a clean shutdown)
 *    or whose heartbeat is too old leaves the table at once;
 *  - a new incarnation with a newer heartbeat replaces the old one at
 *    once (a restarted engine), and from then on entries carrying the
 *    old incarnation are misses in every lookup;
 *  - a record of a replaced incarnation (older heartbeat), or one that
 *    is malformed or of a foreign schema, never replaces what is known:
 *    the known record stays (while it is fresh), else the host is left
 *    out;
 *  - the count of requests sent restarts at each new heartbeat.
 * The background refresh and each request's first lookup round (which
 * GETs its candidates' records too) fold replies by this same rule, and
 * kvs_index_gw_cand_update carries the outcome into the request's
 * candidate before its first round's entries are read, so a restart is
 * seen by the first request whose round 1 reads the new record.
 * Nothing here allocates or fails on bad input.
 */

#ifndef KVS_INDEX_GW_H
#define KVS_INDEX_GW_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_index_lookup.h"
#include "kvs_index_schema.h"

#define KVS_INDEX_GW_ADDR_MAX  (KVS_INDEX_URL_MAX + 8)  /* "host:port" */


typedef struct {
    kvs_index_host_t  rec;            /* the latest accepted record */
    uint32_t          sent;           /* requests this worker routed
                                         there since rec.ts_ms */
} kvs_index_gw_host_t;


/*
 * Folds the reply r to GET kvs:v1:host:<id> into the table: known is
 * this id's entry so far (NULL: none).  Returns 1 with *out the entry to
 * keep (the new record, or the known one), 0 when the host leaves the
 * table; *why says what was wrong with r (KVS_INDEX_OK when accepted).
 * max_age_ms bounds a record's heartbeat age (0: none) at now_ms.
 */
int kvs_index_gw_accept(const kvs_index_gw_host_t *known,
    const kvs_index_reply_t *r, const char *id, size_t id_len,
    uint64_t now_ms, uint64_t max_age_ms, kvs_index_gw_host_t *out,
    kvs_index_reject_t *why);

/* running + waiting + sent, saturating at UINT32_MAX. */
uint32_t kvs_index_gw_load(const kvs_index_gw_host_t *h);

/*
 * A request's candidate c, whose lookup names the prompt under (epoch,
 * block_tokens) for model[0, model_len), brought up to date with its
 * host's entry h as kvs_index_gw_accept just left it (NULL: the host
 * left the table), before the lookup reads any block entry:
 *  - h NULL, or h serves another model: c is not up, and its
 *    incarnation is 0, which no entry carries (kvs_index_blk_entry
 *    refuses it): it holds nothing;
 *  - h of another epoch or block size (new weights): c stays up with
 *    h's load, but incarnation 0: the prompt's names are not its names;
 *  - else c takes h's incarnation (a restart: every entry of the old
 *    one is a miss from now on), epoch, load, free blocks and tier
 *    weight (tw).
 * The load is kvs_index_gw_load with h->sent capped at sent_cap (what
 * this worker sent since the heartbeat and still runs there).
 */
void kvs_index_gw_cand_update(kvs_index_cand_t *c,
    const kvs_index_gw_host_t *h, const char *model, size_t model_len,
    uint64_t epoch, uint32_t block_tokens, uint32_t sent_cap);

/*
 * The address part of an advertise URL, as nginx names an upstream
 * peer: "http://10.0.0.7:8080/v1" gives "10.0.0.7:8080"; without a port,
 * the scheme's (http 80, https 443); an IPv6 literal keeps its
 * brackets.  NUL-terminated into out[cap]; KVS_EINVAL for a URL without
 * "scheme://host" or an unknown scheme without a port, KVS_ERANGE when
 * out is too small.
 */
int kvs_index_gw_url_addr(const char *url, size_t len, char *out,
    size_t cap, size_t *out_len, kvs_err_t *err);

/*
 * A pseudo host id for an upstream peer's address (mode=approximate):
 * every byte outside [A-Za-z0-9._-] becomes '_' ("127.0.0.1:8081" gives
 * "127.0.0.1_8081"), at most KVS_INDEX_HOST_ID_MAX bytes (a longer
 * address keeps its last 64, where the port is), NUL-terminated into
 * out[KVS_INDEX_HOST_ID_MAX + 1]; returns its length (0 for an empty
 * address).
 */
size_t kvs_index_gw_pseudo_id(const char *addr, size_t len, char *out);

#endif /* KVS_INDEX_GW_H */
