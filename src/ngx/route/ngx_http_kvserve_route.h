/*
 * ngx_http_kvserve_route: the gateway's prefix-aware routing (issue 8,
 * docs/prefix-index.md "Routing"), private to its three files:
 * ngx_http_kvserve_route_conf.c (the module, its directives, targets and
 * the upstream balancer kvserve_prefix_balance),
 * ngx_http_kvserve_route.c (the access-phase handler that reads,
 * tokenizes, looks up and chooses; the variables) and
 * ngx_http_kvserve_route_hosts.c (each worker's host table, refreshed
 * from Redis in the background, and mode=approximate's records of its
 * own decisions).
 *
 * A target is one (upstream, Redis address, mode) that kvserve_route
 * locations route to; locations that name the same share it, and so
 * its host table.  Its peers are the upstream's primary servers in
 * round robin's order (the balancer finds them again by index, also in
 * a shared-memory zone's copy).
 *
 * Invariants:
 *  - a request's candidates are a copy of the host table taken when it
 *    is looked up (ids included), so a refresh while its Redis batches
 *    are out changes nothing under it;
 *  - mode=index: a request's round 1 also GETs the record of each of
 *    its candidates (the table's hosts of its model that are upstream
 *    peers: at most HOSTS_MAX), and the replies are folded into the
 *    table and the candidates (kvs_index_gw_accept, then
 *    kvs_index_gw_cand_update) before any block entry is read, so a
 *    restart is seen by the first request after the new record is in
 *    Redis, without a round trip more (round 2 is unchanged);
 *  - a Redis batch belongs to its owner (a request's ctx, a target's
 *    refresh) until done runs or the owner cancels it (pool cleanup,
 *    worker exit); done never runs inside ngx_http_kvserve_redis_batch
 *    for us (a synchronous failure is seen through its NULL return);
 *  - nothing blocks: no reply within the timeout is a failed lookup,
 *    routed by the consistent hash.
 */

#ifndef NGX_HTTP_KVSERVE_ROUTE_H
#define NGX_HTTP_KVSERVE_ROUTE_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx/kvserve/ngx_http_kvserve_completions.h"
#include "ngx/index/ngx_http_kvserve_redis.h"
#include "index/kvs_index_gw.h"
#include "index/kvs_index_lookup.h"
#include "index/kvs_index_resv.h"

#define NGX_HTTP_KVSERVE_ROUTE_INDEX        0
#define NGX_HTTP_KVSERVE_ROUTE_APPROXIMATE  1

#define NGX_HTTP_KVSERVE_ROUTE_REFRESH      1000    /* ms between host
                                                       table refreshes */
#define NGX_HTTP_KVSERVE_ROUTE_MAX_AGE      10000   /* ms: a heartbeat
                                                       older is dead */
#define NGX_HTTP_KVSERVE_ROUTE_HOSTS_MAX    256
#define NGX_HTTP_KVSERVE_ROUTE_GROUPS_MAX   4       /* distinct (epoch,
                                                       block size) */
#define NGX_HTTP_KVSERVE_ROUTE_APPROX_INC   1       /* pseudo hosts'
                                                       incarnation */
#define NGX_HTTP_KVSERVE_ROUTE_APPROX_TTL   600000  /* ms an approximate
                                                       entry lives */
#define NGX_HTTP_KVSERVE_ROUTE_APPROX_MAX   8192    /* names recorded per
                                                       request */
#define NGX_HTTP_KVSERVE_ROUTE_RESV_TTL     5000    /* ms a long-pool
                                                       reservation lives
                                                       unless released */


typedef struct {
    ngx_str_t                       name;     /* resolved: "10.0.0.7:80" */
    ngx_str_t                       server;   /* as written in upstream */
    char                            id[KVS_INDEX_HOST_ID_MAX + 1];
    size_t                          id_len;   /* approximate: its pseudo
                                                 host id */
    ngx_uint_t                      inflight; /* this worker's requests
                                                 routed there, running */
} ngx_http_kvserve_route_peer_t;


typedef struct {
    kvs_index_gw_host_t             h;
    ngx_int_t                       peer;     /* in tgt->peers; -1: its
                                                 URL is no peer here */
} ngx_http_kvserve_route_host_t;


typedef struct {
    ngx_http_upstream_srv_conf_t   *uscf;
    ngx_str_t                       redis;    /* "host:port" */
    ngx_uint_t                      mode;
    ngx_http_kvserve_route_peer_t  *peers;    /* [n_peers] */
    ngx_uint_t                      n_peers;
    uint32_t                        block_tokens;  /* approximate */

    /* each worker's own, after fork */
    ngx_cycle_t                    *cycle;
    ngx_http_kvserve_redis_t       *rd;
    ngx_event_t                     refresh;
    ngx_http_kvserve_redis_batch_t *batch;    /* the refresh's, out */
    ngx_http_kvserve_route_host_t  *hosts;    /* [n_hosts], ngx_alloc */
    ngx_uint_t                      n_hosts;
    char                          (*ids)[KVS_INDEX_HOST_ID_MAX + 1];
                                              /* [HOSTS_MAX]: listed */
    size_t                          n_ids;
    uint64_t                        summary;  /* of the up hosts, to log
                                                 changes once */
    unsigned                        listed:1; /* a refresh ever worked */
    unsigned                        sync_fail:1;
    unsigned                        resv_sha_ok:1;  /* resv_sha loaded */
    char                            resv_sha[KVS_INDEX_RESV_SHA_LEN + 1];
} ngx_http_kvserve_route_tgt_t;


typedef struct {
    ngx_flag_t                      enable;
    ngx_uint_t                      mode;
    ngx_str_t                       redis;
    ngx_str_t                       upstream; /* upstream=; len 0: the
                                                 only balanced one */
    ngx_msec_t                      timeout;
    ngx_msec_t                      reserve_ttl;  /* long-pool
                                                     reservations' */
    double                          load_weight;  /* -1: unset */
    ngx_http_kvserve_route_tgt_t   *tgt;      /* resolved at
                                                 postconfiguration */
    ngx_str_t                       conf_file;    /* where, for errors */
    ngx_uint_t                      line;
} ngx_http_kvserve_route_loc_conf_t;


typedef struct {
    ngx_array_t                     locs;     /* loc conf pointers with
                                                 kvserve_route */
    ngx_array_t                     balanced; /* uscf pointers with
                                                 kvserve_prefix_balance */
    ngx_array_t                     tgts;     /* tgt pointers */
} ngx_http_kvserve_route_main_conf_t;


/* A lookup over the hosts of one (epoch, block size). */
typedef struct {
    uint64_t                        epoch;
    uint32_t                        bt;
    uint32_t                        first;    /* its hosts: cands[first, */
    uint32_t                        n;        /*   first + n) */
    kvs_index_name_t               *names;    /* [n_names] */
    size_t                          n_names;
    kvs_index_lookup_t              lk;
    uint32_t                        n_sent;   /* probes in the batch out */
    unsigned                        active:1;
} ngx_http_kvserve_route_group_t;


typedef struct {
    ngx_http_request_t             *r;
    ngx_http_kvserve_route_loc_conf_t  *rlcf;
    ngx_http_kvserve_route_tgt_t   *tgt;
    ngx_http_kvserve_ctx_t         *kctx;     /* the parse and tokenize
                                                 of the completions */
    ngx_int_t                       status;   /* the access handler's
                                                 answer: NGX_DONE while
                                                 deciding */
    ngx_int_t                       peer;     /* chosen, -1: round robin */
    ngx_int_t                       counted;  /* peer whose inflight this
                                                 request holds, -1 */
    kvs_index_reason_t              reason;
    uint32_t                        cached_tokens;
    ngx_str_t                       host;     /* chosen host id */

    kvs_index_route_conf_t          conf;
    kvs_index_cand_t               *cands;    /* [n_cands] */
    ngx_int_t                      *cand_peer;    /* [n_cands] */
    uint32_t                        n_cands;
    ngx_http_kvserve_route_group_t  groups[NGX_HTTP_KVSERVE_ROUTE_GROUPS_MAX];
    ngx_uint_t                      n_groups;
    uint32_t                        n_fresh;  /* host GETs leading
                                                 round 1: cands[0,
                                                 n_fresh) */
    uint32_t                        round;    /* of the batch out: 1, 2 */
    ngx_http_kvserve_redis_batch_t *batch;
    uint64_t                        start_ns;
    uint64_t                        lookup_ns;    /* tokenized: the
                                                     route hop starts */

    /* long-pool reservations (ngx_http_kvserve_route_resv.c) */
    uint32_t                       *prompt_len;   /* [n_prompts] tokens */
    uint32_t                        n_prompts;
    uint64_t                        max_tokens;   /* per choice, -1 in
                                                     the body: n_ctx */
    uint32_t                        n_choices;
    kvs_index_resv_need_t          *need;     /* [n_cands]: seqs 0 when
                                                 short on that host */
    uint8_t                        *lost;     /* [n_cands]: no room there
                                                 in Redis */
    uint32_t                       *blocks;   /* choose's, kept across a
                                                 reservation */
    kvs_index_choice_t              choice;   /* waiting for its
                                                 reservation */
    char                            member[KVS_INDEX_RESV_MEMBER_MAX + 1];
    size_t                          member_len;
    char                            resv_id[KVS_INDEX_HOST_ID_MAX + 1];
    size_t                          resv_id_len;  /* 0: none held */

    unsigned                        decided:1;
    unsigned                        from_table:1; /* cands are hosts */
    unsigned                        has_reason:1;
    unsigned                        sync_fail:1;
    unsigned                        named:1;      /* choose's */
    unsigned                        long_cut:1;   /* a host was left out
                                                     for its long pool */
    unsigned                        resv_eval:1;  /* EVAL sent after a
                                                     NOSCRIPT */
} ngx_http_kvserve_route_ctx_t;


extern ngx_module_t  ngx_http_kvserve_route_module;

/* the request (ngx_http_kvserve_route.c): the access phase's handler,
 * and the variables (preconfiguration) */
ngx_int_t ngx_http_kvserve_route_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_kvserve_route_add_variables(ngx_conf_t *cf);

/* (ngx_http_kvserve_route_hosts.c) */
ngx_int_t ngx_http_kvserve_route_tgt_start(ngx_http_kvserve_route_tgt_t *t,
    ngx_cycle_t *cycle);
void ngx_http_kvserve_route_tgt_stop(ngx_http_kvserve_route_tgt_t *t);
/* The request's candidates (and groups) from the target's table, or
 * its peers when there is none; NGX_ERROR only when out of memory. */
ngx_int_t ngx_http_kvserve_route_cands(ngx_http_kvserve_route_ctx_t *rc);
/* The replies to the GETs of cands[0, n_fresh) that led round 1: into
 * the target's table and the candidates, before round 1 is read. */
void ngx_http_kvserve_route_fresh(ngx_http_kvserve_route_ctx_t *rc,
    const kvs_index_reply_t *replies);
/* The chosen host was sent one more request. */
void ngx_http_kvserve_route_sent(ngx_http_kvserve_route_tgt_t *t,
    const char *id, size_t id_len);
/* (ngx_http_kvserve_route.c) Chooses a host from the lookups (the hash
 * when failed); then, for a long request, reserves its room first. */
void ngx_http_kvserve_route_choose(ngx_http_kvserve_route_ctx_t *rc,
    ngx_uint_t failed);
/* The choice in rc->choice is final: the phases go on. */
void ngx_http_kvserve_route_commit(ngx_http_kvserve_route_ctx_t *rc);

/* (ngx_http_kvserve_route_resv.c) The prompts' lengths and max_tokens,
 * while the tokenizer's ids are there. */
ngx_int_t ngx_http_kvserve_route_resv_prompts(
    ngx_http_kvserve_route_ctx_t *rc);
/* Each candidate's need on its long pool; candidates whose record shows
 * no room for it, or that lost its reservation, are taken out. */
ngx_int_t ngx_http_kvserve_route_resv_filter(
    ngx_http_kvserve_route_ctx_t *rc);
/* Reserves rc->choice's room in Redis; commits, chooses again (lost) or
 * commits unreserved (Redis failed) when the reply comes. */
void ngx_http_kvserve_route_resv_take(ngx_http_kvserve_route_ctx_t *rc);
/* No host has room: 503 kv_pool_full with Retry-After. */
void ngx_http_kvserve_route_resv_full(ngx_http_kvserve_route_ctx_t *rc);
/* The request ended: its reservation, if any, is given back. */
void ngx_http_kvserve_route_resv_release(ngx_http_kvserve_route_ctx_t *rc);

/* mode=approximate: names[from, n) are now believed held by peer. */
void ngx_http_kvserve_route_record(ngx_http_kvserve_route_ctx_t *rc,
    const kvs_index_name_t *names, size_t from, size_t n,
    ngx_int_t peer);

#endif /* NGX_HTTP_KVSERVE_ROUTE_H */
