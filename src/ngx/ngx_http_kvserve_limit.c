/*
 * ngx_http_kvserve_limit: token-weighted rate limits, an nginx module of
 * its own (ngx_http_kvserve_limit_module, in the kvserve .so): the
 * directives kvserve_limit_zone, kvserve_limit, kvserve_limit_status,
 * kvserve_limit_log_level, kvserve_limit_dry_run, the variable
 * $kvserve_limit_status, the shared zones of per-key buckets, admission
 * of a tokenized request and the refund when it ends (docs/limits.md).
 *
 * The arithmetic is libkvserve's (src/limit/kvs_limit.h); this file keeps
 * one kvs_limit_state_t per key in a shared zone, as limit_req does: a
 * slab pool, a red-black tree keyed by the key's crc32 with ties broken
 * by the key's bytes, and an LRU queue (most recent first).
 *
 * Invariants:
 *  - a bucket is read and changed only under its zone's mutex, so a
 *    charge is seen by every later admission in every worker (no two
 *    requests pass on the same room);
 *  - a request's reservations are settled exactly once, by its pool
 *    cleanup (kvs_limit_resv_t records it), whatever ended it; a key
 *    evicted meanwhile is looked up again and found gone, never touched
 *    through a stale pointer;
 *  - a full zone evicts least recently used keys (those drained empty
 *    and idle first, any when an allocation fails) rather than refuse;
 *  - a reload with the same zone keeps its keys (shm_zone->data reuse)
 *    as long as the key expression is the same;
 *  - the zone's counters change under the same mutex as the buckets.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_limit.h"
#include "limit/kvs_limit.h"


#define NGX_HTTP_KVSERVE_LIMIT_PASSED            1
#define NGX_HTTP_KVSERVE_LIMIT_DELAYED           2
#define NGX_HTTP_KVSERVE_LIMIT_REJECTED          3
#define NGX_HTTP_KVSERVE_LIMIT_DELAYED_DRY_RUN   4
#define NGX_HTTP_KVSERVE_LIMIT_REJECTED_DRY_RUN  5

/* a key idle this long with an empty bucket is forgotten */
#define NGX_HTTP_KVSERVE_LIMIT_IDLE_MS           60000


typedef struct {
    u_char                     color;
    u_char                     dummy;
    u_short                    len;
    ngx_queue_t                queue;
    kvs_limit_state_t          st;
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
} ngx_http_kvserve_limit_zone_t;


/* a kvserve_limit */
typedef struct {
    ngx_shm_zone_t            *shm_zone;
    uint64_t                   burst;       /* tokens; 0: the rate's
                                               amount per period */
    uint64_t                   delay;       /* tokens, or
                                               KVS_LIMIT_NODELAY */
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
} ngx_http_kvserve_limit_resv_t;


/* What the headers say: the bucket closest to refusing. */
typedef struct {
    uint64_t                   limit;       /* tokens: the burst */
    uint64_t                   remaining;   /* tokens */
    uint64_t                   used;        /* tokens, before the charge */
    uint64_t                   reset_ms;
    uint64_t                   retry_ms;
    ngx_str_t                  zone;
    uint64_t                   period_ms;
    unsigned                   set:1;
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
} ngx_http_kvserve_limit_ctx_t;


static ngx_int_t ngx_http_kvserve_limit_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_kvserve_limit_filter_init(ngx_conf_t *cf);
static void *ngx_http_kvserve_limit_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_kvserve_limit_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_limit_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static char *ngx_http_kvserve_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve_limit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_kvserve_limit_status_code(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);


static ngx_conf_enum_t  ngx_http_kvserve_limit_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_kvserve_limit_commands[] = {

    { ngx_string("kvserve_limit_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE3|NGX_CONF_TAKE4,
      ngx_http_kvserve_limit_zone,
      0,
      0,
      NULL },

    { ngx_string("kvserve_limit"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE123,
      ngx_http_kvserve_limit,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_limit_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_limit_status_code,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_kvserve_limit_loc_conf_t, status_code),
      NULL },

    { ngx_string("kvserve_limit_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_kvserve_limit_loc_conf_t, limit_log_level),
      &ngx_http_kvserve_limit_log_levels },

    { ngx_string("kvserve_limit_dry_run"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_kvserve_limit_loc_conf_t, dry_run),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_kvserve_limit_module_ctx = {
    ngx_http_kvserve_limit_add_variables,  /* preconfiguration */
    ngx_http_kvserve_limit_filter_init,    /* postconfiguration */

    ngx_http_kvserve_limit_create_main_conf,  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_kvserve_limit_create_loc_conf,   /* create location conf */
    ngx_http_kvserve_limit_merge_loc_conf     /* merge location conf */
};


ngx_module_t  ngx_http_kvserve_limit_module = {
    NGX_MODULE_V1,
    &ngx_http_kvserve_limit_module_ctx,    /* module context */
    ngx_http_kvserve_limit_commands,       /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_str_t  ngx_http_kvserve_limit_status_names[] = {
    ngx_string("PASSED"),
    ngx_string("DELAYED"),
    ngx_string("REJECTED"),
    ngx_string("DELAYED_DRY_RUN"),
    ngx_string("REJECTED_DRY_RUN")
};


/* ---- the shared zone ---------------------------------------------------- */

static void
ngx_http_kvserve_limit_rbtree_insert(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t              **p;
    ngx_http_kvserve_limit_node_t   *ln, *lnt;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else {
            ln = (ngx_http_kvserve_limit_node_t *) &node->color;
            lnt = (ngx_http_kvserve_limit_node_t *) &temp->color;

            p = (ngx_memn2cmp(ln->data, lnt->data, ln->len, lnt->len) < 0)
                ? &temp->left : &temp->right;
        }

        if (*p == sentinel) {
            break;
        }

        temp = *p;
    }

    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}


static void
ngx_http_kvserve_limit_free_node(ngx_http_kvserve_limit_zone_t *zone,
    ngx_http_kvserve_limit_node_t *ln)
{
    ngx_rbtree_node_t  *node;

    node = (ngx_rbtree_node_t *)
               ((u_char *) ln - offsetof(ngx_rbtree_node_t, color));

    ngx_queue_remove(&ln->queue);
    ngx_rbtree_delete(&zone->sh->rbtree, node);
    ngx_slab_free_locked(zone->shpool, node);
    zone->sh->keys--;
}


/*
 * From the LRU end: without force, up to 2 keys idle for a minute whose
 * buckets have drained empty (they are as good as new); with force (an
 * allocation failed), up to 3 keys whatever they hold.
 */
static void
ngx_http_kvserve_limit_expire(ngx_http_kvserve_limit_zone_t *zone,
    ngx_uint_t force, uint64_t now)
{
    ngx_uint_t                      n;
    ngx_queue_t                    *q;
    ngx_http_kvserve_limit_node_t  *ln;

    for (n = 0; n < (force ? 3 : 2); n++) {

        if (ngx_queue_empty(&zone->sh->queue)) {
            return;
        }

        q = ngx_queue_last(&zone->sh->queue);
        ln = ngx_queue_data(q, ngx_http_kvserve_limit_node_t, queue);

        if (!force) {
            if (now < ln->st.last_ms + NGX_HTTP_KVSERVE_LIMIT_IDLE_MS) {
                return;
            }

            kvs_limit_drain(&zone->drain, &ln->st, now);

            if (ln->st.used != 0) {
                return;
            }

        } else if (ln->st.used != 0) {
            zone->sh->evicted++;
        }

        ngx_http_kvserve_limit_free_node(zone, ln);
    }
}


/* The key's node (most recently used from now on), a new one when
 * create is set, or NULL. */
static ngx_http_kvserve_limit_node_t *
ngx_http_kvserve_limit_lookup(ngx_http_kvserve_limit_zone_t *zone,
    ngx_str_t *key, uint32_t hash, ngx_uint_t create, uint64_t now)
{
    size_t                          size;
    ngx_int_t                       rc;
    ngx_rbtree_node_t              *node, *sentinel;
    ngx_http_kvserve_limit_node_t  *ln;

    node = zone->sh->rbtree.root;
    sentinel = zone->sh->rbtree.sentinel;

    while (node != sentinel) {

        if (hash < node->key) {
            node = node->left;
            continue;
        }

        if (hash > node->key) {
            node = node->right;
            continue;
        }

        ln = (ngx_http_kvserve_limit_node_t *) &node->color;

        rc = ngx_memn2cmp(key->data, ln->data, key->len, (size_t) ln->len);

        if (rc == 0) {
            ngx_queue_remove(&ln->queue);
            ngx_queue_insert_head(&zone->sh->queue, &ln->queue);
            return ln;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    if (!create) {
        return NULL;
    }

    ngx_http_kvserve_limit_expire(zone, 0, now);

    size = offsetof(ngx_rbtree_node_t, color)
           + offsetof(ngx_http_kvserve_limit_node_t, data)
           + key->len;

    node = ngx_slab_alloc_locked(zone->shpool, size);

    if (node == NULL) {
        ngx_http_kvserve_limit_expire(zone, 1, now);

        node = ngx_slab_alloc_locked(zone->shpool, size);
        if (node == NULL) {
            return NULL;
        }
    }

    node->key = hash;

    ln = (ngx_http_kvserve_limit_node_t *) &node->color;
    ln->len = (u_short) key->len;
    ngx_memcpy(ln->data, key->data, key->len);
    kvs_limit_state_init(&ln->st, now);

    ngx_rbtree_insert(&zone->sh->rbtree, node);
    ngx_queue_insert_head(&zone->sh->queue, &ln->queue);
    zone->sh->keys++;

    return ln;
}


static ngx_int_t
ngx_http_kvserve_limit_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_kvserve_limit_zone_t  *octx = data;

    size_t                          len;
    ngx_http_kvserve_limit_zone_t  *zone;

    zone = shm_zone->data;

    if (octx) {
        if (zone->key.value.len != octx->key.value.len
            || ngx_strncmp(zone->key.value.data, octx->key.value.data,
                           zone->key.value.len) != 0)
        {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "kvserve_limit_zone \"%V\" uses the \"%V\" key "
                          "while previously it used the \"%V\" key",
                          &shm_zone->shm.name, &zone->key.value,
                          &octx->key.value);
            return NGX_ERROR;
        }

        /* a reload: the keys and their buckets carry on */
        zone->sh = octx->sh;
        zone->shpool = octx->shpool;

        return NGX_OK;
    }

    zone->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        zone->sh = zone->shpool->data;
        return NGX_OK;
    }

    zone->sh = ngx_slab_alloc(zone->shpool,
                              sizeof(ngx_http_kvserve_limit_shctx_t));
    if (zone->sh == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(zone->sh, sizeof(ngx_http_kvserve_limit_shctx_t));
    zone->shpool->data = zone->sh;

    ngx_rbtree_init(&zone->sh->rbtree, &zone->sh->sentinel,
                    ngx_http_kvserve_limit_rbtree_insert);
    ngx_queue_init(&zone->sh->queue);

    len = sizeof(" in kvserve_limit_zone \"\"") + shm_zone->shm.name.len;

    zone->shpool->log_ctx = ngx_slab_alloc(zone->shpool, len);
    if (zone->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(zone->shpool->log_ctx, " in kvserve_limit_zone \"%V\"%Z",
                &shm_zone->shm.name);

    /* a full zone evicts: running out is expected, not an alert */
    zone->shpool->log_nomem = 0;

    return NGX_OK;
}


/* ---- admission ---------------------------------------------------------- */

/* The bucket of limit in zone: burst defaults to the rate's amount per
 * period, the delay is at most the burst. */
static void
ngx_http_kvserve_limit_conf(ngx_http_kvserve_limit_t *limit,
    ngx_http_kvserve_limit_zone_t *zone, kvs_limit_conf_t *c)
{
    uint64_t   burst, delay;
    kvs_err_t  err;

    burst = limit->burst ? limit->burst : zone->rate;
    delay = limit->delay;

    if (delay != KVS_LIMIT_NODELAY && delay > burst) {
        delay = burst;
    }

    /* every value was checked when the configuration was read */
    (void) kvs_limit_conf_init(c, zone->rate, zone->period_ms, burst, delay,
                               &err);
}


static ngx_http_kvserve_limit_ctx_t *
ngx_http_kvserve_limit_ctx_of(ngx_event_t *ev)
{
    return (ngx_http_kvserve_limit_ctx_t *)
           ((u_char *) ev - offsetof(ngx_http_kvserve_limit_ctx_t, delay));
}


static void
ngx_http_kvserve_limit_delayed(ngx_event_t *ev)
{
    ngx_connection_t              *c;
    ngx_http_request_t            *r;
    ngx_http_kvserve_limit_ctx_t  *lctx;

    lctx = ngx_http_kvserve_limit_ctx_of(ev);
    r = lctx->kctx->r;
    c = r->connection;

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "kvserve limit: delay done");

    lctx->resume(lctx->kctx);

    ngx_http_run_posted_requests(c);
}


/* Output tokens the request's choices generated (an end token counts: it
 * was computed). */
static uint64_t
ngx_http_kvserve_limit_generated(ngx_http_kvserve_ctx_t *kctx)
{
    uint64_t    n;
    ngx_uint_t  i;

    n = 0;

    for (i = 0; i < kctx->n_choices; i++) {
        n += kctx->choices[i].ended ? kctx->choices[i].n_generated
                                    : kctx->choices[i].n_seen;
    }

    return n;
}


/* Settles (cancel: the whole charge; else the unused output) the
 * reservations from..to-1. */
static void
ngx_http_kvserve_limit_settle(ngx_http_kvserve_limit_ctx_t *lctx,
    ngx_uint_t from, ngx_uint_t to, ngx_uint_t cancel, uint64_t generated)
{
    uint64_t                        now, back;
    ngx_uint_t                      i;
    kvs_limit_conf_t                c;
    ngx_http_kvserve_limit_resv_t  *rv;
    ngx_http_kvserve_limit_node_t  *ln;
    ngx_http_kvserve_limit_zone_t  *zone;

    now = (uint64_t) ngx_current_msec;

    for (i = from; i < to; i++) {
        rv = &lctx->resv[i];

        if (rv->resv.settled) {
            continue;
        }

        zone = rv->limit->shm_zone->data;
        ngx_http_kvserve_limit_conf(rv->limit, zone, &c);

        ngx_shmtx_lock(&zone->shpool->mutex);

        ln = ngx_http_kvserve_limit_lookup(zone, &rv->key, rv->hash, 0, now);

        if (ln != NULL) {
            back = cancel ? kvs_limit_cancel(&c, &ln->st, now, &rv->resv)
                          : kvs_limit_settle(&c, &ln->st, now, &rv->resv,
                                             generated);
        } else {
            /* evicted: a new bucket is empty anyway */
            rv->resv.settled = 1;
            back = 0;
        }

        zone->sh->refunded += back;

        ngx_shmtx_unlock(&zone->shpool->mutex);
    }
}


static void
ngx_http_kvserve_limit_cleanup(void *data)
{
    ngx_http_kvserve_limit_ctx_t  *lctx = data;

    uint64_t  generated;

    if (lctx->delay.timer_set) {
        ngx_del_timer(&lctx->delay);
    }

    generated = ngx_http_kvserve_limit_generated(lctx->kctx);
    ngx_http_kvserve_limit_settle(lctx, 0, lctx->n, 0, generated);
}


static ngx_http_output_body_filter_pt  ngx_http_next_body_filter;


/*
 * The response's last buffer: the request's output is all generated, so
 * the unused part goes back before the client can see the end (and send
 * its next request); the pool cleanup then finds nothing to settle.
 */
static ngx_int_t
ngx_http_kvserve_limit_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    uint64_t                       generated;
    ngx_chain_t                   *cl;
    ngx_http_kvserve_limit_ctx_t  *lctx;

    lctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_limit_module);

    if (lctx == NULL || lctx->n == 0 || r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    for (cl = in; cl; cl = cl->next) {
        if (cl->buf->last_buf) {
            generated = ngx_http_kvserve_limit_generated(lctx->kctx);
            ngx_http_kvserve_limit_settle(lctx, 0, lctx->n, 0, generated);
            break;
        }
    }

    return ngx_http_next_body_filter(r, in);
}


static ngx_int_t
ngx_http_kvserve_limit_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_kvserve_limit_body_filter;

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_limit_headers(ngx_http_request_t *r,
    ngx_http_kvserve_limit_view_t *v, ngx_uint_t never)
{
    u_char  *p, *s;

    /* the values live in the request's pool, NUL-terminated */
    p = ngx_pnalloc(r->pool, 4 * (NGX_INT64_LEN + 1) + KVS_LIMIT_DUR_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    s = p;
    p = ngx_sprintf(p, "%uL%Z", v->limit);
    if (ngx_http_kvserve_add_header(r, "x-ratelimit-limit-tokens",
                                    (char *) s) != NGX_OK)
    {
        return NGX_ERROR;
    }

    s = p;
    p = ngx_sprintf(p, "%uL%Z", v->remaining);
    if (ngx_http_kvserve_add_header(r, "x-ratelimit-remaining-tokens",
                                    (char *) s) != NGX_OK)
    {
        return NGX_ERROR;
    }

    s = p;
    p += kvs_limit_fmt_duration((char *) p, v->reset_ms) + 1;
    if (ngx_http_kvserve_add_header(r, "x-ratelimit-reset-tokens",
                                    (char *) s) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (never) {
        /* waiting does not help: openai-python honours this */
        return ngx_http_kvserve_add_header(r, "x-should-retry", "false");
    }

    if (v->retry_ms == 0) {
        return NGX_OK;
    }

    s = p;
    p = ngx_sprintf(p, "%uL%Z", kvs_limit_retry_after_s(v->retry_ms));
    if (ngx_http_kvserve_add_header(r, "retry-after", (char *) s) != NGX_OK) {
        return NGX_ERROR;
    }

    s = p;
    (void) ngx_sprintf(p, "%uL%Z", v->retry_ms);

    return ngx_http_kvserve_add_header(r, "retry-after-ms", (char *) s);
}


/* The 429 (or kvserve_limit_status) with OpenAI's body and the headers. */
static void
ngx_http_kvserve_limit_reject(ngx_http_kvserve_limit_ctx_t *lctx,
    ngx_http_kvserve_limit_view_t *v, ngx_uint_t never)
{
    char                                dur[KVS_LIMIT_DUR_LEN];
    const char                         *per;
    ngx_int_t                           rc;
    kvs_buf_t                           body;
    kvs_api_err_t                       aerr;
    ngx_http_request_t                 *r;
    ngx_http_kvserve_ctx_t             *kctx;
    ngx_http_kvserve_limit_loc_conf_t  *llcf;

    kctx = lctx->kctx;
    r = kctx->r;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_kvserve_limit_module);

    per = v->period_ms == 60000 ? "min (TPM)" : "sec (TPS)";

    if (never) {
        kvs_api_err_set(&aerr, (int) llcf->status_code, NULL,
                        "rate_limit_exceeded",
                        "Request too large for %.*s on tokens per %s in "
                        "zone \"%.*s\": Limit %llu, Requested %llu. The "
                        "input or output tokens must be reduced in order "
                        "to run successfully.",
                        (int) kctx->req.model.len, kctx->req.model.ptr, per,
                        (int) v->zone.len, v->zone.data,
                        (unsigned long long) v->limit,
                        (unsigned long long) lctx->cost);
    } else {
        kvs_limit_fmt_duration(dur, v->retry_ms);
        kvs_api_err_set(&aerr, (int) llcf->status_code, NULL,
                        "rate_limit_exceeded",
                        "Rate limit reached for %.*s on tokens per %s in "
                        "zone \"%.*s\": Limit %llu, Used %llu, Requested "
                        "%llu. Please try again in %s.",
                        (int) kctx->req.model.len, kctx->req.model.ptr, per,
                        (int) v->zone.len, v->zone.data,
                        (unsigned long long) v->limit,
                        (unsigned long long) v->used,
                        (unsigned long long) lctx->cost, dur);
    }

    ngx_cpystrn((u_char *) aerr.type, (u_char *) "tokens",
                sizeof(aerr.type));

    ngx_memzero(&body, sizeof(body));

    if (ngx_http_kvserve_limit_headers(r, v, never) != NGX_OK
        || kvs_api_err_json(&aerr, &body) != KVS_OK)
    {
        kvs_buf_free(&body);
        ngx_http_kvserve_finish(kctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rc = ngx_http_kvserve_send_json(r, llcf->status_code, &body);
    ngx_http_kvserve_finish(kctx, rc);
}


ngx_int_t
ngx_http_kvserve_limit_admit(ngx_http_kvserve_ctx_t *kctx,
    ngx_http_kvserve_limit_resume_pt resume)
{
    int                                 rc;
    uint32_t                            n_ctx;
    uint64_t                            now, delay_ms, mt;
    ngx_str_t                           key;
    ngx_uint_t                          i, n, level, status;
    kvs_err_t                           err;
    kvs_limit_conf_t                    c;
    kvs_limit_decision_t                d;
    ngx_pool_cleanup_t                 *cln;
    ngx_http_request_t                 *r;
    ngx_http_kvserve_limit_t           *limits;
    ngx_http_kvserve_limit_ctx_t       *lctx;
    ngx_http_kvserve_limit_resv_t      *rv;
    ngx_http_kvserve_limit_node_t      *ln;
    ngx_http_kvserve_limit_zone_t      *zone;
    ngx_http_kvserve_limit_view_t       view, v;
    ngx_http_kvserve_limit_loc_conf_t  *llcf;

    r = kctx->r;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_kvserve_limit_module);

    if (llcf->limits == NULL || llcf->limits->nelts == 0) {
        return NGX_OK;
    }

    limits = llcf->limits->elts;
    n = llcf->limits->nelts;

    lctx = ngx_pcalloc(r->pool, sizeof(ngx_http_kvserve_limit_ctx_t));
    if (lctx == NULL) {
        goto failed;
    }

    lctx->resv = ngx_pcalloc(r->pool,
                             n * sizeof(ngx_http_kvserve_limit_resv_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (lctx->resv == NULL || cln == NULL) {
        goto failed;
    }

    lctx->kctx = kctx;
    lctx->resume = resume;
    lctx->delay.handler = ngx_http_kvserve_limit_delayed;
    lctx->delay.data = r->connection;      /* the debug log reads its fd */
    lctx->delay.log = r->connection->log;

    cln->handler = ngx_http_kvserve_limit_cleanup;
    cln->data = lctx;

    ngx_http_set_ctx(r, lctx, ngx_http_kvserve_limit_module);

    /* the reservation: each prompt's max_tokens for each of its n
     * choices; without max_tokens (chat), the rest of the context, as
     * the part's own check computes it */
    n_ctx = kctx->model->model->hp.n_ctx_train;

    for (i = 0; i < kctx->n_parts; i++) {
        mt = kctx->req.max_tokens >= 0
             ? (uint64_t) kctx->req.max_tokens
             : (uint64_t) n_ctx - kctx->parts[i].n_ids;
        lctx->refundable += mt * kctx->req.n;
    }

    lctx->cost = kctx->prompt_tokens + lctx->refundable;

    now = (uint64_t) ngx_current_msec;
    delay_ms = 0;
    status = 0;
    view.set = 0;

    for (i = 0; i < n; i++) {
        zone = limits[i].shm_zone->data;

        if (ngx_http_complex_value(r, &zone->key, &key) != NGX_OK) {
            goto failed;
        }

        if (key.len == 0) {
            /* an empty key is not accounted, as in limit_req */
            continue;
        }

        if (key.len > 65535) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "the value of the \"%V\" key is more than 65535 "
                          "bytes: \"%V\"", &zone->key.value, &key);
            continue;
        }

        rv = &lctx->resv[lctx->n];
        rv->limit = &limits[i];
        rv->key = key;
        rv->hash = ngx_crc32_short(key.data, key.len);

        ngx_http_kvserve_limit_conf(&limits[i], zone, &c);

        ngx_shmtx_lock(&zone->shpool->mutex);

        ln = ngx_http_kvserve_limit_lookup(zone, &key, rv->hash, 1, now);

        if (ln == NULL) {
            ngx_shmtx_unlock(&zone->shpool->mutex);
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "kvserve_limit_zone \"%V\": could not allocate a "
                          "key even after evicting", &zone->name);
            ngx_http_kvserve_limit_settle(lctx, 0, lctx->n, 1, 0);
            goto failed;
        }

        rc = kvs_limit_reserve(&c, &ln->st, now, lctx->cost,
                               lctx->refundable, &rv->resv, &d, &err);
        if (rc != KVS_OK) {
            /* more tokens than any bucket holds */
            d.verdict = KVS_LIMIT_NEVER;
            d.used = ln->st.used;
            d.reset_ms = kvs_limit_reset_ms(&c, &ln->st);
            d.retry_ms = 0;
        }

        switch (d.verdict) {
        case KVS_LIMIT_PASSED:
            zone->sh->passed++;
            zone->sh->charged += lctx->cost;
            break;
        case KVS_LIMIT_DELAYED:
            zone->sh->delayed++;
            zone->sh->charged += lctx->cost;
            break;
        default:
            zone->sh->rejected++;
            break;
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);

        v.set = 1;
        v.limit = c.burst / KVS_LIMIT_MILLI;
        v.remaining = (c.burst - d.used) / KVS_LIMIT_MILLI;
        v.reset_ms = d.reset_ms;
        v.retry_ms = d.retry_ms;
        v.zone = zone->name;
        v.period_ms = zone->period_ms;

        if (d.verdict == KVS_LIMIT_REJECTED || d.verdict == KVS_LIMIT_NEVER) {
            /* in the bucket before this request, whole tokens */
            v.used = (d.used + KVS_LIMIT_MILLI - 1) / KVS_LIMIT_MILLI;

            ngx_log_error(llcf->limit_log_level, r->connection->log, 0,
                          "limiting tokens%s, %s, used: %uL, requested: "
                          "%uL, burst: %uL by zone \"%V\"",
                          llcf->dry_run ? ", dry run" : "",
                          d.verdict == KVS_LIMIT_NEVER ? "over the burst"
                                                       : "no room",
                          v.used, lctx->cost, v.limit, &zone->name);

            if (llcf->dry_run) {
                status = NGX_HTTP_KVSERVE_LIMIT_REJECTED_DRY_RUN;
                view = v;
                continue;
            }

            /* the zones that took it give it back */
            ngx_http_kvserve_limit_settle(lctx, 0, lctx->n, 1, 0);

            lctx->status = NGX_HTTP_KVSERVE_LIMIT_REJECTED;
            ngx_http_kvserve_limit_reject(lctx, &v,
                                          d.verdict == KVS_LIMIT_NEVER);
            return NGX_DONE;
        }

        lctx->n++;

        if (d.verdict == KVS_LIMIT_DELAYED) {
            ngx_log_error(llcf->delay_log_level, r->connection->log, 0,
                          "delaying request%s, %uL ms, requested: %uL by "
                          "zone \"%V\"", llcf->dry_run ? ", dry run" : "",
                          d.delay_ms, lctx->cost, &zone->name);

            delay_ms = ngx_max(delay_ms, d.delay_ms);
        }

        /* the headers tell of the bucket with the least room */
        if (status != NGX_HTTP_KVSERVE_LIMIT_REJECTED_DRY_RUN
            && (!view.set || v.remaining < view.remaining))
        {
            view = v;
        }
    }

    if (status == 0 && view.set) {
        status = delay_ms == 0 ? NGX_HTTP_KVSERVE_LIMIT_PASSED
                 : llcf->dry_run ? NGX_HTTP_KVSERVE_LIMIT_DELAYED_DRY_RUN
                 : NGX_HTTP_KVSERVE_LIMIT_DELAYED;
    }

    lctx->status = status;

    if (view.set) {
        /* an admitted request (dry run: not refused) waits for nothing */
        view.retry_ms = 0;

        if (ngx_http_kvserve_limit_headers(r, &view, 0) != NGX_OK) {
            goto failed;
        }
    }

    if (status != NGX_HTTP_KVSERVE_LIMIT_DELAYED) {
        return NGX_OK;
    }

    /* like limit_req: wait on a timer; a client that goes away meanwhile
     * ends the request, and the cleanup refunds */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    level = delay_ms > NGX_MAX_INT32_VALUE ? NGX_MAX_INT32_VALUE : delay_ms;
    ngx_add_timer(&lctx->delay, (ngx_msec_t) level);

    return NGX_AGAIN;

failed:

    ngx_http_kvserve_fail(kctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                          "The rate limit could not be applied.",
                          "server_error", NULL);
    return NGX_DONE;
}


/* ---- metrics ------------------------------------------------------------ */

/* The zone name as a Prometheus label value. */
static ngx_int_t
ngx_http_kvserve_limit_label(kvs_buf_t *out, ngx_str_t *name)
{
    u_char  *p, *last;

    last = name->data + name->len;

    for (p = name->data; p < last; p++) {
        if (*p == '\\' || *p == '"') {
            if (kvs_buf_append(out, "\\", 1) != KVS_OK) {
                return NGX_ERROR;
            }
        }

        if (*p == '\n') {
            if (kvs_buf_append(out, "\\n", 2) != KVS_OK) {
                return NGX_ERROR;
            }
            continue;
        }

        if (kvs_buf_append(out, p, 1) != KVS_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_limit_metrics(ngx_http_request_t *r, kvs_buf_t *out)
{
    static const struct {
        const char  *name;
        const char  *type;
        const char  *help;
        size_t       off;
    } metrics[] = {
        { "kvserve:limit_passed_total", "counter",
          "Requests a kvserve_limit zone admitted without delay (dry run: "
          "would have).", offsetof(ngx_http_kvserve_limit_shctx_t, passed) },
        { "kvserve:limit_delayed_total", "counter",
          "Requests a kvserve_limit zone admitted after a delay (dry run: "
          "would have).", offsetof(ngx_http_kvserve_limit_shctx_t, delayed) },
        { "kvserve:limit_rejected_total", "counter",
          "Requests a kvserve_limit zone rejected (dry run: would have).",
          offsetof(ngx_http_kvserve_limit_shctx_t, rejected) },
        { "kvserve:limit_tokens_charged_total", "counter",
          "Tokens charged at admission: prompt plus reserved output.",
          offsetof(ngx_http_kvserve_limit_shctx_t, charged) },
        { "kvserve:limit_tokens_refunded_total", "counter",
          "Reserved tokens given back: output not generated, or a charge "
          "another zone refused.",
          offsetof(ngx_http_kvserve_limit_shctx_t, refunded) },
        { "kvserve:limit_evicted_keys_total", "counter",
          "Keys evicted from a full zone while their buckets held tokens.",
          offsetof(ngx_http_kvserve_limit_shctx_t, evicted) },
        { "kvserve:limit_keys", "gauge",
          "Keys a kvserve_limit zone holds.",
          offsetof(ngx_http_kvserve_limit_shctx_t, keys) }
    };

    uint64_t                             val;
    ngx_uint_t                           i, k, n;
    ngx_shm_zone_t                     **zones;
    ngx_http_kvserve_limit_zone_t       *zone;
    ngx_http_kvserve_limit_main_conf_t  *lmcf;

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_limit_module);

    zones = lmcf->zones.elts;
    n = lmcf->zones.nelts;

    if (n == 0) {
        return NGX_OK;
    }

    for (k = 0; k < sizeof(metrics) / sizeof(metrics[0]); k++) {

        if (kvs_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n",
                           metrics[k].name, metrics[k].help,
                           metrics[k].name, metrics[k].type) != KVS_OK)
        {
            return NGX_ERROR;
        }

        for (i = 0; i < n; i++) {
            zone = zones[i]->data;

            if (zone == NULL || zone->sh == NULL) {
                continue;
            }

            ngx_shmtx_lock(&zone->shpool->mutex);
            val = *(uint64_t *) ((u_char *) zone->sh + metrics[k].off);
            ngx_shmtx_unlock(&zone->shpool->mutex);

            if (kvs_buf_printf(out, "%s{zone=\"", metrics[k].name) != KVS_OK
                || ngx_http_kvserve_limit_label(out, &zone->name) != NGX_OK
                || kvs_buf_printf(out, "\"} %llu\n",
                                  (unsigned long long) val) != KVS_OK)
            {
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


/* ---- the variable ------------------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_limit_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_kvserve_limit_ctx_t  *lctx;

    lctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_limit_module);

    if (lctx == NULL || lctx->status == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = ngx_http_kvserve_limit_status_names[lctx->status - 1].len;
    v->data = ngx_http_kvserve_limit_status_names[lctx->status - 1].data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_limit_add_variables(ngx_conf_t *cf)
{
    ngx_str_t             name = ngx_string("kvserve_limit_status");
    ngx_http_variable_t  *var;

    var = ngx_http_add_variable(cf, &name, NGX_HTTP_VAR_NOCACHEABLE);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->get_handler = ngx_http_kvserve_limit_status_variable;

    return NGX_OK;
}


/* ---- configuration ------------------------------------------------------ */

static void *
ngx_http_kvserve_limit_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_limit_main_conf_t  *lmcf;

    lmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_limit_main_conf_t));
    if (lmcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&lmcf->zones, cf->pool, 4, sizeof(ngx_shm_zone_t *))
        != NGX_OK)
    {
        return NULL;
    }

    return lmcf;
}


static void *
ngx_http_kvserve_limit_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_limit_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_limit_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /* set by ngx_pcalloc(): conf->limits = NULL */

    conf->limit_log_level = NGX_CONF_UNSET_UINT;
    conf->status_code = NGX_CONF_UNSET_UINT;
    conf->dry_run = NGX_CONF_UNSET;

    return conf;
}


static char *
ngx_http_kvserve_limit_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_kvserve_limit_loc_conf_t  *prev = parent;
    ngx_http_kvserve_limit_loc_conf_t  *conf = child;

    /* as limit_req: inherited only where a level sets none */
    if (conf->limits == NULL) {
        conf->limits = prev->limits;
    }

    ngx_conf_merge_uint_value(conf->limit_log_level, prev->limit_log_level,
                              NGX_LOG_ERR);

    conf->delay_log_level = (conf->limit_log_level == NGX_LOG_INFO)
                            ? NGX_LOG_INFO : conf->limit_log_level + 1;

    ngx_conf_merge_uint_value(conf->status_code, prev->status_code,
                              NGX_HTTP_TOO_MANY_REQUESTS);

    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);

    return NGX_CONF_OK;
}


/* "<N>" followed by suffix: N in 1..KVS_LIMIT_TOKENS_MAX, or
 * NGX_ERROR. */
static int64_t
ngx_http_kvserve_limit_number(u_char *p, size_t len)
{
    int64_t  n;

    n = ngx_atoof(p, len);

    if (n == NGX_ERROR || n < 1 || (uint64_t) n > KVS_LIMIT_TOKENS_MAX) {
        return NGX_ERROR;
    }

    return n;
}


/* kvserve_limit_zone <key> zone=<name>:<size> rate=<N>t/s|t/m */
static char *
ngx_http_kvserve_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    u_char                              *p;
    size_t                               len;
    ssize_t                              size;
    int64_t                              rate;
    uint64_t                             period;
    ngx_str_t                           *value, name, s;
    ngx_uint_t                           i;
    kvs_err_t                            err;
    ngx_shm_zone_t                      *shm_zone, **zp;
    ngx_http_kvserve_limit_zone_t       *zone;
    ngx_http_compile_complex_value_t     ccv;
    ngx_http_kvserve_limit_main_conf_t  *lmcf;

    value = cf->args->elts;

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_limit_zone_t));
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = &zone->key;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    size = 0;
    rate = 0;
    period = 0;
    name.len = 0;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {

            name.data = value[i].data + 5;

            p = (u_char *) ngx_strchr(name.data, ':');

            if (p == NULL) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid zone size \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            name.len = p - name.data;

            s.data = p + 1;
            s.len = value[i].data + value[i].len - s.data;

            size = ngx_parse_size(&s);

            if (size == NGX_ERROR || name.len == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid zone size \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            if (size < (ssize_t) (8 * ngx_pagesize)) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "zone \"%V\" is too small", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "rate=", 5) == 0) {

            len = value[i].len;
            p = value[i].data + len - 3;

            if (len > 8 && ngx_strncmp(p, "t/s", 3) == 0) {
                period = 1000;
            } else if (len > 8 && ngx_strncmp(p, "t/m", 3) == 0) {
                period = 60000;
            }

            rate = period ? ngx_http_kvserve_limit_number(value[i].data + 5,
                                                          len - 8)
                          : NGX_ERROR;

            if (rate == NGX_ERROR) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid rate \"%V\": a whole number of "
                                   "tokens per second or minute, as "
                                   "1000t/s or 50000t/m", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "kv_rate=", 8) == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"%V\": kv_rate is not supported yet",
                               &value[i]);
            return NGX_CONF_ERROR;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (rate == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"rate\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    zone->name = name;
    zone->rate = (uint64_t) rate;
    zone->period_ms = period;

    if (kvs_limit_conf_init(&zone->drain, zone->rate, period, zone->rate,
                            KVS_LIMIT_NODELAY, &err) != KVS_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "kvserve_limit_zone "
                           "\"%V\": %s", &name, err.msg);
        return NGX_CONF_ERROR;
    }

    shm_zone = ngx_shared_memory_add(cf, &name, size,
                                     &ngx_http_kvserve_limit_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (shm_zone->data) {
        zone = shm_zone->data;

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V \"%V\" is already bound to key \"%V\"",
                           &cmd->name, &name, &zone->key.value);
        return NGX_CONF_ERROR;
    }

    shm_zone->init = ngx_http_kvserve_limit_init_zone;
    shm_zone->data = zone;

    lmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_kvserve_limit_module);

    zp = ngx_array_push(&lmcf->zones);
    if (zp == NULL) {
        return NGX_CONF_ERROR;
    }

    *zp = shm_zone;

    return NGX_CONF_OK;
}


/* kvserve_limit zone=<name> [burst=<N>] [nodelay | delay=<N>] */
static char *
ngx_http_kvserve_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_kvserve_limit_loc_conf_t  *llcf = conf;

    int64_t                    burst, delay;
    ngx_str_t                 *value, s;
    ngx_uint_t                 i, nodelay;
    ngx_shm_zone_t            *shm_zone;
    ngx_http_kvserve_limit_t  *limit, *limits;

    value = cf->args->elts;

    shm_zone = NULL;
    burst = 0;
    delay = 0;
    nodelay = 0;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {

            s.len = value[i].len - 5;
            s.data = value[i].data + 5;

            if (s.len == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid zone \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            shm_zone = ngx_shared_memory_add(cf, &s, 0,
                                             &ngx_http_kvserve_limit_module);
            if (shm_zone == NULL) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "burst=", 6) == 0) {

            burst = ngx_http_kvserve_limit_number(value[i].data + 6,
                                                  value[i].len - 6);
            if (burst == NGX_ERROR) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid burst value \"%V\": tokens, "
                                   "1..%uL", &value[i],
                                   (uint64_t) KVS_LIMIT_TOKENS_MAX);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "delay=", 6) == 0) {

            delay = ngx_atoof(value[i].data + 6, value[i].len - 6);

            if (delay == NGX_ERROR
                || (uint64_t) delay > KVS_LIMIT_TOKENS_MAX)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid delay value \"%V\"",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strcmp(value[i].data, "nodelay") == 0) {
            nodelay = 1;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (shm_zone == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (nodelay && delay) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"nodelay\" and \"delay=%L\" together",
                           delay);
        return NGX_CONF_ERROR;
    }

    if (burst && delay > burst) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"delay=%L\" is over \"burst=%L\"", delay, burst);
        return NGX_CONF_ERROR;
    }

    if (llcf->limits == NULL) {
        llcf->limits = ngx_array_create(cf->pool, 1,
                                        sizeof(ngx_http_kvserve_limit_t));
        if (llcf->limits == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    limits = llcf->limits->elts;

    for (i = 0; i < llcf->limits->nelts; i++) {
        if (shm_zone == limits[i].shm_zone) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "zone \"%V\" is duplicate",
                               &shm_zone->shm.name);
            return NGX_CONF_ERROR;
        }
    }

    limit = ngx_array_push(llcf->limits);
    if (limit == NULL) {
        return NGX_CONF_ERROR;
    }

    limit->shm_zone = shm_zone;
    limit->burst = (uint64_t) burst;
    limit->delay = nodelay ? KVS_LIMIT_NODELAY : (uint64_t) delay;

    return NGX_CONF_OK;
}


/* kvserve_limit_status <code>: 400..599, as limit_req_status */
static char *
ngx_http_kvserve_limit_status_code(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_limit_loc_conf_t  *llcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (llcf->status_code != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR || n < 400 || n > 599) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid status \"%V\": a code from 400 to 599",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    llcf->status_code = (ngx_uint_t) n;

    return NGX_CONF_OK;
}
