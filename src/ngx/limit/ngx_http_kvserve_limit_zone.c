/*
 * ngx_http_kvserve_limit_zone: the shared zones of the token rate limits
 * (kvserve_limit_zone): one kvs_limit_state_t per key in a slab pool, as
 * limit_req keeps its nodes: a red-black tree keyed by the key's crc32
 * with ties broken by the key's bytes, and an LRU queue (most recent
 * first); charging and refunding a key's bucket, and the zones' counters
 * as metrics.  The arithmetic is libkvserve's (src/limit/kvs_limit.h).
 *
 * Invariants:
 *  - a bucket is read and changed only under its zone's mutex, so a
 *    charge is seen by every later admission in every worker (no two
 *    requests pass on the same room);
 *  - a reservation is settled once (kvs_limit_resv_t records it); a key
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

#include "ngx_http_kvserve_limit_int.h"


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

            if (zone->kv_rate) {
                kvs_limit_drain(&zone->kv_drain, &ln->kv, now);
            }

            if (ln->st.used != 0 || ln->kv.used != 0) {
                return;
            }

        } else if (ln->st.used != 0 || ln->kv.used != 0) {
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
    kvs_limit_state_init(&ln->kv, now);

    ngx_rbtree_insert(&zone->sh->rbtree, node);
    ngx_queue_insert_head(&zone->sh->queue, &ln->queue);
    zone->sh->keys++;

    return ln;
}


ngx_int_t
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


/* ---- charge and refund -------------------------------------------------- */

/* The buckets of limit in zone: the tokens' (burst defaults to the
 * rate's amount per period, the delay is at most the burst) and, with
 * kv_rate, the KV cache's beside it. */
void
ngx_http_kvserve_limit_conf(ngx_http_kvserve_limit_t *limit,
    ngx_http_kvserve_limit_zone_t *zone, kvs_limit_conf_t *c,
    kvs_limit_conf_t *kc)
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

    if (zone->kv_rate) {
        (void) kvs_limit_kv_conf_init(kc, c, zone->kv_rate, &err);
    }
}


/* Reserves cost in a bucket; a cost over any bucket can never pass. */
static void
ngx_http_kvserve_limit_reserve(kvs_limit_conf_t *c, kvs_limit_state_t *st,
    uint64_t now, uint64_t cost, uint64_t refundable, kvs_limit_resv_t *resv,
    kvs_limit_decision_t *d)
{
    kvs_err_t  err;

    if (kvs_limit_reserve(c, st, now, cost, refundable, resv, d, &err)
        != KVS_OK)
    {
        /* more than any bucket holds */
        d->verdict = KVS_LIMIT_NEVER;
        d->used = st->used;
        d->reset_ms = kvs_limit_reset_ms(c, st);
        d->retry_ms = 0;
    }
}


ngx_int_t
ngx_http_kvserve_limit_charge(ngx_http_kvserve_limit_zone_t *zone,
    ngx_http_kvserve_limit_t *limit, ngx_http_kvserve_limit_resv_t *rv,
    uint64_t cost, uint64_t refundable, uint64_t kv_cost, uint64_t now,
    kvs_limit_decision_t *d, ngx_uint_t *kv_refused)
{
    kvs_limit_conf_t                c, kc;
    kvs_limit_decision_t            kd;
    ngx_http_kvserve_limit_node_t  *ln;

    *kv_refused = 0;
    rv->kv.settled = 1;

    ngx_http_kvserve_limit_conf(limit, zone, &c, &kc);

    ngx_shmtx_lock(&zone->shpool->mutex);

    ln = ngx_http_kvserve_limit_lookup(zone, &rv->key, rv->hash, 1, now);

    if (ln == NULL) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NGX_ERROR;
    }

    ngx_http_kvserve_limit_reserve(&c, &ln->st, now, cost, refundable,
                                   &rv->resv, d);

    if (zone->kv_rate
        && (d->verdict == KVS_LIMIT_PASSED || d->verdict == KVS_LIMIT_DELAYED))
    {
        ngx_http_kvserve_limit_reserve(&kc, &ln->kv, now, kv_cost, kv_cost,
                                       &rv->kv, &kd);

        if (kd.verdict == KVS_LIMIT_PASSED) {
            zone->sh->kv_charged += kv_cost;

        } else {
            /* both or neither: the tokens go back */
            (void) kvs_limit_cancel(&c, &ln->st, now, &rv->resv);
            rv->kv.settled = 1;
            *kv_refused = 1;
            *d = kd;
        }
    }

    switch (d->verdict) {
    case KVS_LIMIT_PASSED:
        zone->sh->passed++;
        zone->sh->charged += cost;
        break;
    case KVS_LIMIT_DELAYED:
        zone->sh->delayed++;
        zone->sh->charged += cost;
        break;
    default:
        zone->sh->rejected++;
        break;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return NGX_OK;
}


/* Settles (cancel: the whole charge; else the unused output) the
 * reservations from..to-1. */
void
ngx_http_kvserve_limit_settle(ngx_http_kvserve_limit_ctx_t *lctx,
    ngx_uint_t from, ngx_uint_t to, ngx_uint_t cancel, uint64_t generated,
    uint64_t kv_held)
{
    uint64_t                        now, back, kv_back, kv_more;
    ngx_uint_t                      i;
    kvs_limit_conf_t                c, kc;
    ngx_http_kvserve_limit_resv_t  *rv;
    ngx_http_kvserve_limit_node_t  *ln;
    ngx_http_kvserve_limit_zone_t  *zone;

    now = (uint64_t) ngx_current_msec;

    for (i = from; i < to; i++) {
        rv = &lctx->resv[i];

        if (rv->resv.settled && rv->kv.settled) {
            continue;
        }

        zone = rv->limit->shm_zone->data;
        ngx_http_kvserve_limit_conf(rv->limit, zone, &c, &kc);

        back = 0;
        kv_back = 0;
        kv_more = 0;

        ngx_shmtx_lock(&zone->shpool->mutex);

        ln = ngx_http_kvserve_limit_lookup(zone, &rv->key, rv->hash, 0, now);

        if (ln == NULL) {
            /* evicted: a new bucket is empty anyway */
            rv->resv.settled = 1;
            rv->kv.settled = 1;

        } else if (cancel) {
            back = kvs_limit_cancel(&c, &ln->st, now, &rv->resv);
            if (!rv->kv.settled) {
                kv_back = kvs_limit_cancel(&kc, &ln->kv, now, &rv->kv);
            }

        } else {
            back = kvs_limit_settle(&c, &ln->st, now, &rv->resv, generated);
            if (!rv->kv.settled) {
                kv_back = kvs_limit_settle_actual(&kc, &ln->kv, now, &rv->kv,
                                                  kv_held, &kv_more);
            }
        }

        zone->sh->refunded += back;
        zone->sh->kv_refunded += kv_back;
        zone->sh->kv_charged += kv_more;

        ngx_shmtx_unlock(&zone->shpool->mutex);
    }
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
        { "kvserve:limit_kv_charged_kib_seconds_total", "counter",
          "kv_rate: KV cache held, in KiB x seconds, charged (reserved at "
          "admission, plus what requests held beyond that).",
          offsetof(ngx_http_kvserve_limit_shctx_t, kv_charged) },
        { "kvserve:limit_kv_refunded_kib_seconds_total", "counter",
          "kv_rate: reserved KiB x seconds given back when requests held "
          "less.",
          offsetof(ngx_http_kvserve_limit_shctx_t, kv_refunded) },
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
