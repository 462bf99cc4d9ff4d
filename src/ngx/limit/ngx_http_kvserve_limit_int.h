/*
 * ngx_http_kvserve_limit_int.h: what the files of the token rate limit
 * module (ngx_http_kvserve_limit_module) share, and nothing else sees:
 *
 *   ngx_http_kvserve_limit_conf.c   the module, its directives and
 *                                   configuration;
 *   ngx_http_kvserve_limit_zone.c   the shared zones: slab, rbtree, LRU,
 *                                   charge and refund under the mutex,
 *                                   the zones' counters as metrics;
 *   ngx_http_kvserve_limit_admit.c  the request side: admission, the
 *                                   delay timer, headers and the 429,
 *                                   the refund filter and cleanup, the
 *                                   variable, the tenant.
 *
 * The public side (admission, metrics) is ngx_http_kvserve_limit.h.
 */

#ifndef NGX_HTTP_KVSERVE_LIMIT_INT_H
#define NGX_HTTP_KVSERVE_LIMIT_INT_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_limit.h"
#include "limit/kvs_limit.h"
#include "limit/kvs_limit_kv.h"



#define NGX_HTTP_KVSERVE_LIMIT_PASSED            1
#define NGX_HTTP_KVSERVE_LIMIT_DELAYED           2
#define NGX_HTTP_KVSERVE_LIMIT_REJECTED          3
#define NGX_HTTP_KVSERVE_LIMIT_DELAYED_DRY_RUN   4
#define NGX_HTTP_KVSERVE_LIMIT_REJECTED_DRY_RUN  5

/* a key idle this long with an empty bucket is forgotten */
#define NGX_HTTP_KVSERVE_LIMIT_IDLE_MS           60000

/*
 * kvserve_limit empty=: what a request whose key is empty (or over
 * 65535 bytes) meets in that zone.  The shared bucket is the zone's
 * node of the empty key: no real key can be empty (an empty value is
 * what keyless means), so no client can land in it, or out of it, by
 * spelling its key some way.
 */
#define NGX_HTTP_KVSERVE_LIMIT_EMPTY_SHARED      0   /* one bucket for
                                                        all of them */
#define NGX_HTTP_KVSERVE_LIMIT_EMPTY_REJECT      1   /* 401 */
#define NGX_HTTP_KVSERVE_LIMIT_EMPTY_UNLIMITED   2   /* not accounted */


typedef struct {
    u_char                     color;
    u_char                     dummy;
    u_short                    len;
    ngx_queue_t                queue;
    kvs_limit_state_t          st;
    kvs_limit_state_t          kv;          /* kv_rate: KiB x s held */
    u_char                     data[1];     /* [len]: the key */
} ngx_http_kvserve_limit_node_t;


typedef struct {
    ngx_rbtree_t               rbtree;
    ngx_rbtree_node_t          sentinel;
    ngx_queue_t                queue;       /* LRU, most recent first */

    /* counters, under the mutex */
    uint64_t                   passed;
    uint64_t                   delayed;
    uint64_t                   rejected;
    uint64_t                   charged;     /* tokens */
    uint64_t                   refunded;    /* tokens */
    uint64_t                   kv_charged;  /* kv_rate: KiB x s, at
                                               admission and after */
    uint64_t                   kv_refunded; /* KiB x s */
    uint64_t                   evicted;     /* keys dropped while their
                                               buckets held something */
    uint64_t                   keys;
} ngx_http_kvserve_limit_shctx_t;


/* a kvserve_limit_zone (shm_zone->data) */
typedef struct {
    ngx_http_kvserve_limit_shctx_t  *sh;
    ngx_slab_pool_t           *shpool;
    ngx_str_t                  name;
    ngx_http_complex_value_t   key;
    uint64_t                   rate;        /* tokens per period_ms */
    uint64_t                   period_ms;   /* 1000 or 60000 */
    kvs_limit_conf_t           drain;       /* the rate, for expiring */
    uint64_t                   kv_rate;     /* KiB held per second; 0:
                                               no kv_rate */
    kvs_limit_conf_t           kv_drain;    /* kv_rate, for expiring */
    ngx_uint_t                 keyless_logged;  /* this worker said once
                                                   that keyless requests
                                                   share a bucket */
} ngx_http_kvserve_limit_zone_t;


/* a kvserve_limit */
typedef struct {
    ngx_shm_zone_t            *shm_zone;
    uint64_t                   burst;       /* tokens; 0: the rate's
                                               amount per period */
    uint64_t                   delay;       /* tokens, or
                                               KVS_LIMIT_NODELAY */
    ngx_uint_t                 empty;       /* NGX_HTTP_KVSERVE_LIMIT_
                                               EMPTY_* */
} ngx_http_kvserve_limit_t;


typedef struct {
    ngx_array_t                zones;       /* ngx_shm_zone_t *, for the
                                               metrics */
} ngx_http_kvserve_limit_main_conf_t;


typedef struct {
    ngx_array_t               *limits;      /* ngx_http_kvserve_limit_t */
    ngx_uint_t                 limit_log_level;
    ngx_uint_t                 delay_log_level;
    ngx_uint_t                 status_code;
    ngx_flag_t                 dry_run;
} ngx_http_kvserve_limit_loc_conf_t;


/* One bucket a request was charged in. */
typedef struct {
    ngx_http_kvserve_limit_t  *limit;
    ngx_str_t                  key;         /* request pool */
    uint32_t                   hash;
    kvs_limit_resv_t           resv;
    kvs_limit_resv_t           kv;          /* kv_rate's, KiB x s */
} ngx_http_kvserve_limit_resv_t;


/* What the headers say: the bucket closest to refusing. */
typedef struct {
    uint64_t                   limit;       /* tokens: the burst */
    uint64_t                   remaining;   /* tokens */
    uint64_t                   used;        /* tokens, before the charge */
    uint64_t                   asked;       /* the request's cost in the
                                               bucket (tokens, or KiB x s
                                               in a KV bucket) */
    uint64_t                   reset_ms;
    uint64_t                   retry_ms;
    ngx_str_t                  zone;
    uint64_t                   period_ms;
    unsigned                   set:1;
    unsigned                   kv:1;        /* the KV bucket's (KiB x s):
                                               no x-ratelimit-*-tokens */
} ngx_http_kvserve_limit_view_t;


typedef struct {
    ngx_http_kvserve_ctx_t    *kctx;
    ngx_http_kvserve_limit_resume_pt  resume;
    ngx_event_t                delay;       /* data: r->connection */
    ngx_uint_t                 status;      /* NGX_HTTP_KVSERVE_LIMIT_*,
                                               0: no zone applied */
    ngx_http_kvserve_limit_resv_t  *resv;   /* [n] */
    ngx_uint_t                 n;
    uint64_t                   cost;        /* tokens, per bucket */
    uint64_t                   refundable;  /* reserved output */
    uint64_t                   kv_cost;     /* kv_rate's reservation:
                                               KiB x s */
    uint64_t                   kv_bpt;      /* the model's KV bytes per
                                               token */
} ngx_http_kvserve_limit_ctx_t;


/* ---- ngx_http_kvserve_limit_zone.c ---------------------------------- */

/* shm_zone->init of a kvserve_limit_zone */
ngx_int_t ngx_http_kvserve_limit_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);

/* The buckets of limit in zone: its tokens' (c: burst defaults to the
 * rate's amount per period, the delay is at most the burst) and, in a
 * zone with kv_rate, its KV cache's (kc: kvs_limit_kv_conf_init()). */
void ngx_http_kvserve_limit_conf(ngx_http_kvserve_limit_t *limit,
    ngx_http_kvserve_limit_zone_t *zone, kvs_limit_conf_t *c,
    kvs_limit_conf_t *kc);

/*
 * Charges cost (of which refundable may come back) to rv's key in zone,
 * and with kv_rate kv_cost KiB x s to its KV bucket, both or neither,
 * under the zone's mutex, and counts the verdict d (*kv_refused: the KV
 * bucket refused, d is its decision); NGX_ERROR: no room for the key
 * even after evicting, nothing charged.
 */
ngx_int_t ngx_http_kvserve_limit_charge(ngx_http_kvserve_limit_zone_t *zone,
    ngx_http_kvserve_limit_t *limit, ngx_http_kvserve_limit_resv_t *rv,
    uint64_t cost, uint64_t refundable, uint64_t kv_cost, uint64_t now,
    kvs_limit_decision_t *d, ngx_uint_t *kv_refused);

/* Settles the reservations from..to-1 of lctx that are not settled yet:
 * cancel: the whole charges; else the unused output comes back and the
 * KV bucket is charged kv_held KiB x s instead of its reservation. */
void ngx_http_kvserve_limit_settle(ngx_http_kvserve_limit_ctx_t *lctx,
    ngx_uint_t from, ngx_uint_t to, ngx_uint_t cancel, uint64_t generated,
    uint64_t kv_held);


/* ---- ngx_http_kvserve_limit_admit.c --------------------------------- */

/* preconfiguration: $kvserve_limit_status */
ngx_int_t ngx_http_kvserve_limit_add_variables(ngx_conf_t *cf);

/* postconfiguration: the body filter that refunds on the last buffer */
ngx_int_t ngx_http_kvserve_limit_filter_init(ngx_conf_t *cf);

#endif /* NGX_HTTP_KVSERVE_LIMIT_INT_H */
