/*
 * ngx_http_kvserve_route_hosts: each gateway worker's host table for
 * kvserve_route, and mode=approximate's records.
 *
 * mode=index: every NGX_HTTP_KVSERVE_ROUTE_REFRESH ms a worker lists
 * kvs:v1:hosts (ZRANGEBYSCORE, heartbeats of the last MAX_AGE ms) and
 * GETs each host's record in one pipelined batch; kvs_index_gw_accept
 * folds each reply into the table (a restarted engine's new incarnation
 * replaces the old at once, a replaced incarnation's record never comes
 * back, a vanished key drops the host), and each host is matched to an
 * upstream peer by its advertise URL's address (the peer's resolved
 * name or its server as written).  While Redis fails the table is kept
 * as it was: the hash fallback needs the hosts.  One log line when the
 * set of routable hosts (id, incarnation, peer) changes.  Between two
 * refreshes, each request's round 1 reads its candidates' records too
 * (ngx_http_kvserve_route_fresh): the same rule folds them into the
 * table at once, so a restart is not believed away for up to a
 * refresh; only which hosts are listed waits for the refresh.  A
 * BASE:NAME request's candidates are the model's hosts whose record
 * lists the gateway's file of NAME ("lora", kvs_index_host_serves).
 *
 * mode=approximate: no records; the candidates are the upstream's
 * peers under pseudo host ids (their addresses), their load this
 * worker's requests running there, and the gateway writes the block
 * names of each request it routes under the chosen peer (HSET +
 * PEXPIRE, fire and forget), so the next turn finds them.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_route.h"


static void ngx_http_kvserve_route_refresh(ngx_event_t *ev);
static ngx_uint_t ngx_http_kvserve_route_serves(
    ngx_http_kvserve_route_ctx_t *rc, const kvs_index_host_t *rec);


ngx_int_t
ngx_http_kvserve_route_tgt_start(ngx_http_kvserve_route_tgt_t *t,
    ngx_cycle_t *cycle)
{
    t->cycle = cycle;

    if (t->mode != NGX_HTTP_KVSERVE_ROUTE_INDEX) {
        return NGX_OK;
    }

    t->ids = ngx_alloc(NGX_HTTP_KVSERVE_ROUTE_HOSTS_MAX
                       * sizeof(*t->ids), cycle->log);
    if (t->ids == NULL) {
        return NGX_ERROR;
    }

    t->refresh.handler = ngx_http_kvserve_route_refresh;
    t->refresh.data = t;
    t->refresh.log = cycle->log;
    t->refresh.cancelable = 1;

    ngx_add_timer(&t->refresh, 1);

    return NGX_OK;
}


void
ngx_http_kvserve_route_tgt_stop(ngx_http_kvserve_route_tgt_t *t)
{
    if (t->batch != NULL) {
        ngx_http_kvserve_redis_cancel(t->batch);
        t->batch = NULL;
    }

    if (t->refresh.timer_set) {
        ngx_del_timer(&t->refresh);
    }

    if (t->hosts != NULL) {
        ngx_free(t->hosts);
        t->hosts = NULL;
        t->n_hosts = 0;
    }

    if (t->ids != NULL) {
        ngx_free(t->ids);
        t->ids = NULL;
    }
}


static void
ngx_http_kvserve_route_rearm(ngx_http_kvserve_route_tgt_t *t)
{
    if (!ngx_exiting && !ngx_terminate && !ngx_quit
        && !t->refresh.timer_set)
    {
        ngx_add_timer(&t->refresh, NGX_HTTP_KVSERVE_ROUTE_REFRESH);
    }
}


/* Sends cmds for the refresh; NGX_ERROR when it failed at once. */
static ngx_int_t
ngx_http_kvserve_route_tgt_batch(ngx_http_kvserve_route_tgt_t *t,
    kvs_index_cmds_t *cmds, ngx_http_kvserve_redis_done_pt done)
{
    ngx_http_kvserve_redis_batch_t  *b;

    if (t->rd == NULL) {
        t->rd = ngx_http_kvserve_redis_get(t->cycle, &t->redis);
        if (t->rd == NULL) {
            return NGX_ERROR;
        }
    }

    t->sync_fail = 0;
    t->batch = NULL;

    b = ngx_http_kvserve_redis_batch(t->rd, cmds, 1000, done, t);

    if (b == NULL || t->sync_fail) {
        t->batch = NULL;
        return NGX_ERROR;
    }

    t->batch = b;

    return NGX_OK;
}


static void ngx_http_kvserve_route_got_hosts(void *data,
    const kvs_index_reply_t *replies, size_t n);
static void ngx_http_kvserve_route_apply(ngx_http_kvserve_route_tgt_t *t,
    const kvs_index_reply_t *replies);


static void
ngx_http_kvserve_route_listed(void *data, const kvs_index_reply_t *replies,
    size_t n)
{
    ngx_http_kvserve_route_tgt_t  *t = data;

    char              buf[128 * NGX_HTTP_KVSERVE_ROUTE_HOSTS_MAX];
    size_t            i, skipped, argvlen[2 * NGX_HTTP_KVSERVE_ROUTE_HOSTS_MAX];
    size_t            first[NGX_HTTP_KVSERVE_ROUTE_HOSTS_MAX];
    kvs_err_t         err;
    const char       *argv[2 * NGX_HTTP_KVSERVE_ROUTE_HOSTS_MAX];
    kvs_index_cmds_t  cmds;

    if (t->batch == NULL) {
        t->sync_fail = 1;
        return;
    }

    t->batch = NULL;

    if (replies == NULL || n != 1) {
        ngx_http_kvserve_route_rearm(t);
        return;
    }

    if (kvs_index_hosts_parse(&replies[0], t->ids,
                              NGX_HTTP_KVSERVE_ROUTE_HOSTS_MAX, &t->n_ids,
                              &skipped, &err)
        != KVS_OK)
    {
        ngx_log_error(NGX_LOG_WARN, t->cycle->log, 0,
                      "kvserve_route: %s", err.msg);
        ngx_http_kvserve_route_rearm(t);
        return;
    }

    if (t->n_ids == 0) {
        ngx_http_kvserve_route_apply(t, NULL);
        return;
    }

    kvs_index_cmds_init(&cmds, buf, sizeof(buf), argv, argvlen,
                        2 * NGX_HTTP_KVSERVE_ROUTE_HOSTS_MAX, first,
                        NGX_HTTP_KVSERVE_ROUTE_HOSTS_MAX);

    for (i = 0; i < t->n_ids; i++) {
        if (kvs_index_cmd_host_get(&cmds, t->ids[i], ngx_strlen(t->ids[i]),
                                   &err)
            != KVS_OK)
        {
            ngx_http_kvserve_route_rearm(t);
            return;
        }
    }

    /* the GETs go out while the listing is fresh: one batch */
    if (ngx_http_kvserve_route_tgt_batch(t, &cmds,
                                         ngx_http_kvserve_route_got_hosts)
        != NGX_OK)
    {
        ngx_http_kvserve_route_rearm(t);
    }
}


/* The peer whose resolved name or written server is url's address. */
static ngx_int_t
ngx_http_kvserve_route_url_peer(ngx_http_kvserve_route_tgt_t *t,
    const char *url)
{
    char                            addr[KVS_INDEX_GW_ADDR_MAX + 1];
    size_t                          len;
    kvs_err_t                       err;
    ngx_uint_t                      i;
    ngx_http_kvserve_route_peer_t  *p;

    if (kvs_index_gw_url_addr(url, ngx_strlen(url), addr, sizeof(addr),
                              &len, &err)
        != KVS_OK)
    {
        return -1;
    }

    for (i = 0; i < t->n_peers; i++) {
        p = &t->peers[i];

        if ((p->name.len == len
             && ngx_strncasecmp(p->name.data, (u_char *) addr, len) == 0)
            || (p->server.len == len
                && ngx_strncasecmp(p->server.data, (u_char *) addr, len)
                   == 0))
        {
            return (ngx_int_t) i;
        }
    }

    return -1;
}


static ngx_http_kvserve_route_host_t *
ngx_http_kvserve_route_find(ngx_http_kvserve_route_tgt_t *t, const char *id,
    size_t id_len)
{
    ngx_uint_t  i;

    for (i = 0; i < t->n_hosts; i++) {
        if (ngx_strlen(t->hosts[i].h.rec.id) == id_len
            && ngx_strncmp(t->hosts[i].h.rec.id, id, id_len) == 0)
        {
            return &t->hosts[i];
        }
    }

    return NULL;
}


/* The replies to the GETs of t->ids. */
static void
ngx_http_kvserve_route_got_hosts(void *data,
    const kvs_index_reply_t *replies, size_t n)
{
    ngx_http_kvserve_route_tgt_t  *t = data;

    if (t->batch == NULL) {
        t->sync_fail = 1;
        return;
    }

    t->batch = NULL;

    if (replies == NULL || n != t->n_ids) {
        ngx_http_kvserve_route_rearm(t);
        return;
    }

    ngx_http_kvserve_route_apply(t, replies);
}


/* The table from the replies to t->ids' GETs (NULL: none listed). */
static void
ngx_http_kvserve_route_apply(ngx_http_kvserve_route_tgt_t *t,
    const kvs_index_reply_t *replies)
{
    size_t                          i, len;
    uint64_t                        now, sum;
    ngx_uint_t                      k, up;
    kvs_index_reject_t              why;
    ngx_http_kvserve_route_host_t  *tab, *known;

    tab = NULL;

    if (t->n_ids > 0) {
        tab = ngx_alloc(t->n_ids * sizeof(ngx_http_kvserve_route_host_t),
                        t->cycle->log);
        if (tab == NULL) {
            ngx_http_kvserve_route_rearm(t);
            return;
        }
    }

    now = ngx_http_kvserve_redis_now_ms();
    k = 0;

    for (i = 0; i < t->n_ids && replies != NULL; i++) {
        len = ngx_strlen(t->ids[i]);
        known = ngx_http_kvserve_route_find(t, t->ids[i], len);

        if (!kvs_index_gw_accept(known ? &known->h : NULL, &replies[i],
                                 t->ids[i], len, now,
                                 NGX_HTTP_KVSERVE_ROUTE_MAX_AGE, &tab[k].h,
                                 &why))
        {
            if (why != KVS_INDEX_REJECT_MISSING) {
                ngx_log_debug2(NGX_LOG_DEBUG_HTTP, t->cycle->log, 0,
                               "kvserve route: host \"%s\": %s", t->ids[i],
                               kvs_index_reject_name(why));
            }
            continue;
        }

        tab[k].peer = ngx_http_kvserve_route_url_peer(t, tab[k].h.rec.url);
        k++;
    }

    /* one line when the routable set changes: ids, incarnations, peers,
     * in whatever order Redis lists them */
    sum = 0;
    up = 0;

    for (i = 0; i < k; i++) {
        if (tab[i].peer < 0) {
            continue;
        }

        up++;
        sum += (ngx_hash_key((u_char *) tab[i].h.rec.id,
                             ngx_strlen(tab[i].h.rec.id))
                * 1000003 + tab[i].h.rec.incarnation)
               * 1000003 + (uint64_t) tab[i].peer + 1;
    }

    if (sum != t->summary || !t->listed) {
        ngx_log_error(NGX_LOG_NOTICE, t->cycle->log, 0,
                      "kvserve_route: upstream \"%V\": %ui of %uz listed "
                      "hosts routable", &t->uscf->host, up, t->n_ids);

        for (i = 0; i < k; i++) {
            ngx_log_error(NGX_LOG_NOTICE, t->cycle->log, 0,
                          "kvserve_route: host \"%s\" incarnation %016uxL "
                          "epoch %016uxL bt %uD url %s: %s",
                          tab[i].h.rec.id, tab[i].h.rec.incarnation,
                          tab[i].h.rec.epoch, tab[i].h.rec.block_tokens,
                          tab[i].h.rec.url,
                          tab[i].peer >= 0 ? "an upstream peer"
                                           : "no upstream peer: not routed");
        }
    }

    t->summary = sum;
    t->listed = 1;

    if (t->hosts != NULL) {
        ngx_free(t->hosts);
    }

    t->hosts = tab;
    t->n_hosts = k;

    ngx_http_kvserve_route_rearm(t);
}


static void
ngx_http_kvserve_route_refresh(ngx_event_t *ev)
{
    ngx_http_kvserve_route_tgt_t  *t = ev->data;

    char              buf[128];
    size_t            argvlen[8], first[1];
    uint64_t          now;
    kvs_err_t         err;
    const char       *argv[8];
    kvs_index_cmds_t  cmds;

    if (t->batch != NULL) {
        ngx_http_kvserve_route_rearm(t);
        return;
    }

    now = ngx_http_kvserve_redis_now_ms();

    kvs_index_cmds_init(&cmds, buf, sizeof(buf), argv, argvlen, 8, first, 1);

    if (kvs_index_cmd_hosts_list(&cmds, now - NGX_HTTP_KVSERVE_ROUTE_MAX_AGE,
                                 &err)
        != KVS_OK
        || ngx_http_kvserve_route_tgt_batch(t, &cmds,
                                            ngx_http_kvserve_route_listed)
           != NGX_OK)
    {
        ngx_http_kvserve_route_rearm(t);
    }
}


/* ---- a request's candidates ---------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_route_group(ngx_http_kvserve_route_ctx_t *rc,
    uint64_t epoch, uint32_t bt)
{
    ngx_uint_t                       g;
    ngx_http_kvserve_route_group_t  *gr;

    for (g = 0; g < rc->n_groups; g++) {
        if (rc->groups[g].epoch == epoch && rc->groups[g].bt == bt) {
            return (ngx_int_t) g;
        }
    }

    if (rc->n_groups == NGX_HTTP_KVSERVE_ROUTE_GROUPS_MAX || bt == 0
        || bt > KVS_INDEX_BLOCK_TOKENS_MAX)
    {
        return -1;
    }

    gr = &rc->groups[rc->n_groups];
    ngx_memzero(gr, sizeof(*gr));
    gr->epoch = epoch;
    gr->bt = bt;

    return (ngx_int_t) rc->n_groups++;
}


static ngx_int_t
ngx_http_kvserve_route_cand(ngx_http_kvserve_route_ctx_t *rc, ngx_uint_t k,
    const char *id, size_t id_len, uint64_t inc, uint64_t epoch,
    uint32_t load, uint32_t free_blocks, ngx_int_t peer)
{
    char              *p;
    kvs_index_cand_t  *c;

    p = ngx_pnalloc(rc->r->pool, id_len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(p, id, id_len);
    p[id_len] = '\0';

    c = &rc->cands[k];
    c->id = p;
    c->id_len = id_len;
    c->incarnation = inc;
    c->epoch = epoch;
    c->load = load;
    c->free_blocks = free_blocks;
    c->up = 1;
    rc->cand_peer[k] = peer;

    return NGX_OK;
}


/* Whether the host of record rec may serve rc's request: any host of
 * the model for the base; for a BASE:NAME request only one whose record
 * lists the gateway's file of NAME (or lists none: it predates the
 * field), so a host whose NAME is another file, or that has no NAME,
 * is no candidate. */
static ngx_uint_t
ngx_http_kvserve_route_serves(ngx_http_kvserve_route_ctx_t *rc,
    const kvs_index_host_t *rec)
{
    return rc->kctx->lora == NULL
           || kvs_index_host_serves(rec, rc->kctx->lora->epoch);
}


ngx_int_t
ngx_http_kvserve_route_cands(ngx_http_kvserve_route_ctx_t *rc)
{
    size_t                          mlen;
    ngx_int_t                       g, *gi;
    ngx_uint_t                      i, k, n, gg;
    const u_char                   *model;
    kvs_index_gw_host_t             gh;
    ngx_http_kvserve_route_tgt_t   *t;
    ngx_http_kvserve_route_host_t  *h;
    ngx_http_kvserve_route_peer_t  *p;

    t = rc->tgt;
    model = rc->kctx->model->name.data;
    mlen = rc->kctx->model->name.len;
    rc->n_cands = 0;
    rc->n_groups = 0;
    rc->from_table = 0;

    /* the upstream's peers: approximate, or no host table ever read
     * (Redis down since the start: the hash spreads over the peers) */
    if (t->mode == NGX_HTTP_KVSERVE_ROUTE_APPROXIMATE || !t->listed) {
        n = t->n_peers;

        rc->cands = ngx_pcalloc(rc->r->pool, n * sizeof(kvs_index_cand_t));
        rc->cand_peer = ngx_pcalloc(rc->r->pool, n * sizeof(ngx_int_t));
        if (rc->cands == NULL || rc->cand_peer == NULL) {
            return NGX_ERROR;
        }

        if (ngx_http_kvserve_route_group(rc, 0, t->block_tokens) != 0) {
            return NGX_ERROR;
        }

        for (i = 0; i < n; i++) {
            p = &t->peers[i];

            if (ngx_http_kvserve_route_cand(rc, i, p->id, p->id_len,
                                            NGX_HTTP_KVSERVE_ROUTE_APPROX_INC,
                                            0, p->inflight > UINT32_MAX
                                               ? UINT32_MAX
                                               : (uint32_t) p->inflight,
                                            0, (ngx_int_t) i)
                != NGX_OK)
            {
                return NGX_ERROR;
            }
        }

        rc->groups[0].first = 0;
        rc->groups[0].n = (uint32_t) n;
        rc->n_cands = (uint32_t) n;

        return NGX_OK;
    }

    n = t->n_hosts;
    rc->from_table = 1;

    rc->cands = ngx_pcalloc(rc->r->pool, (n + 1) * sizeof(kvs_index_cand_t));
    rc->cand_peer = ngx_pcalloc(rc->r->pool, (n + 1) * sizeof(ngx_int_t));
    gi = ngx_pcalloc(rc->r->pool, (n + 1) * sizeof(ngx_int_t));
    if (rc->cands == NULL || rc->cand_peer == NULL || gi == NULL) {
        return NGX_ERROR;
    }

    /* the model's hosts that are upstream peers, grouped by (epoch,
     * block size): each group's hosts contiguous for its lookup */
    for (i = 0; i < n; i++) {
        h = &t->hosts[i];
        gi[i] = -1;

        if (h->peer < 0 || ngx_strlen(h->h.rec.model) != mlen
            || ngx_strncmp(h->h.rec.model, model, mlen) != 0
            || !ngx_http_kvserve_route_serves(rc, &h->h.rec))
        {
            continue;
        }

        gi[i] = ngx_http_kvserve_route_group(rc, h->h.rec.epoch,
                                             h->h.rec.block_tokens);
    }

    k = 0;

    for (gg = 0; gg < rc->n_groups; gg++) {
        rc->groups[gg].first = (uint32_t) k;

        for (i = 0; i < n; i++) {
            g = gi[i];

            if (g != (ngx_int_t) gg) {
                continue;
            }

            h = &t->hosts[i];

            /* of what was sent since the heartbeat, only what still runs
             * is load the record lacks (and while Redis is away and no
             * heartbeat comes, sent would only grow) */
            gh = h->h;
            if (gh.sent > t->peers[h->peer].inflight) {
                gh.sent = (uint32_t) t->peers[h->peer].inflight;
            }

            if (ngx_http_kvserve_route_cand(rc, k, h->h.rec.id,
                                            ngx_strlen(h->h.rec.id),
                                            h->h.rec.incarnation,
                                            h->h.rec.epoch,
                                            kvs_index_gw_load(&gh),
                                            h->h.rec.free_blocks, h->peer)
                != NGX_OK)
            {
                return NGX_ERROR;
            }

            rc->cands[k].tier_weight = h->h.rec.tier_weight;
            rc->cands[k].host_weight = h->h.rec.host_weight;
            k++;
        }

        rc->groups[gg].n = (uint32_t) k - rc->groups[gg].first;
    }

    rc->n_cands = (uint32_t) k;

    return NGX_OK;
}


/*
 * Folds the replies to GET kvs:v1:host:<id> of cands[0, n_fresh), sent
 * ahead of the request's round 1, into the table as the refresh would
 * (a new incarnation replaces the old, a vanished key drops the host,
 * an unreadable record keeps what was known while fresh), and carries
 * each outcome into the candidate: from here on its lookup counts only
 * entries of the incarnation just read.  A host the refresh dropped
 * while the batch was out follows the reply alone (and stays out of the
 * table: listing hosts is the refresh's).
 */
void
ngx_http_kvserve_route_fresh(ngx_http_kvserve_route_ctx_t *rc,
    const kvs_index_reply_t *replies)
{
    size_t                           mlen;
    uint32_t                         k, cap;
    uint64_t                         now, inc;
    ngx_int_t                        peer;
    ngx_uint_t                       g, i;
    const u_char                    *model;
    kvs_index_cand_t                *c;
    kvs_index_reject_t               why;
    kvs_index_gw_host_t              out, *known;
    ngx_http_kvserve_route_tgt_t    *t;
    ngx_http_kvserve_route_host_t   *h;
    ngx_http_kvserve_route_group_t  *gr;

    t = rc->tgt;
    model = rc->kctx->model->name.data;
    mlen = rc->kctx->model->name.len;
    now = ngx_http_kvserve_redis_now_ms();

    for (k = 0; k < rc->n_fresh; k++) {
        c = &rc->cands[k];
        inc = c->incarnation;

        gr = NULL;
        for (g = 0; g < rc->n_groups; g++) {
            if (k >= rc->groups[g].first
                && k < rc->groups[g].first + rc->groups[g].n)
            {
                gr = &rc->groups[g];
                break;
            }
        }

        if (gr == NULL) {
            continue;                   /* every candidate has a group */
        }

        h = ngx_http_kvserve_route_find(t, c->id, c->id_len);
        known = h != NULL ? &h->h : NULL;

        if (!kvs_index_gw_accept(known, &replies[k], c->id, c->id_len, now,
                                 NGX_HTTP_KVSERVE_ROUTE_MAX_AGE, &out, &why))
        {
            if (h != NULL) {
                /* out of the table now; the refresh lists it again if
                 * its record comes back */
                i = (ngx_uint_t) (h - t->hosts);
                ngx_memmove(h, h + 1, (t->n_hosts - i - 1) * sizeof(*h));
                t->n_hosts--;
            }

            kvs_index_gw_cand_update(c, NULL, (const char *) model, mlen,
                                     gr->epoch, gr->bt, 0);

            ngx_log_debug2(NGX_LOG_DEBUG_HTTP, rc->r->connection->log, 0,
                           "kvserve route: host \"%s\" dropped: %s", c->id,
                           kvs_index_reject_name(why));
            continue;
        }

        peer = rc->cand_peer[k];

        if (h != NULL) {
            if (h->h.rec.incarnation != out.rec.incarnation
                || ngx_strcmp(h->h.rec.url, out.rec.url) != 0)
            {
                h->peer = ngx_http_kvserve_route_url_peer(t, out.rec.url);
            }

            h->h = out;
            peer = h->peer;

        } else if (inc != out.rec.incarnation) {
            peer = ngx_http_kvserve_route_url_peer(t, out.rec.url);
        }

        cap = 0;
        if (peer >= 0 && (ngx_uint_t) peer < t->n_peers) {
            cap = t->peers[peer].inflight > UINT32_MAX
                  ? UINT32_MAX : (uint32_t) t->peers[peer].inflight;
        }

        kvs_index_gw_cand_update(c, &out, (const char *) model, mlen,
                                 gr->epoch, gr->bt, cap);

        if (peer < 0 || !ngx_http_kvserve_route_serves(rc, &out.rec)) {
            /* its new advertise URL is no peer of ours, or its new
             * record no longer lists the request's adapter file */
            c->up = 0;
            c->incarnation = 0;
        }

        rc->cand_peer[k] = peer;

        if (c->incarnation != inc) {
            ngx_log_debug3(NGX_LOG_DEBUG_HTTP, rc->r->connection->log, 0,
                           "kvserve route: host \"%s\" incarnation "
                           "%016uxL, was %016uxL", c->id, c->incarnation,
                           inc);
        }
    }
}


void
ngx_http_kvserve_route_sent(ngx_http_kvserve_route_tgt_t *t, const char *id,
    size_t id_len)
{
    ngx_http_kvserve_route_host_t  *h;

    h = ngx_http_kvserve_route_find(t, id, id_len);

    if (h != NULL && h->h.sent < UINT32_MAX) {
        h->h.sent++;
    }
}


/* ---- mode=approximate: what the gateway sent where --------------------- */

static void
ngx_http_kvserve_route_recorded(void *data, const kvs_index_reply_t *replies,
    size_t n)
{
    /* fire and forget: a lost entry is only a missed hint */
}


void
ngx_http_kvserve_route_record(ngx_http_kvserve_route_ctx_t *rc,
    const kvs_index_name_t *names, size_t from, size_t n, ngx_int_t peer)
{
    char                           *buf;
    size_t                          i, k, cap, *argvlen, *first;
    kvs_err_t                       err;
    const char                    **argv;
    kvs_index_cmds_t                cmds;
    ngx_http_kvserve_route_tgt_t   *t;
    ngx_http_kvserve_route_peer_t  *p;

    t = rc->tgt;
    p = &t->peers[peer];

    /* the whole chain again: HSET is idempotent and PEXPIRE keeps a live
     * conversation's first blocks from expiring before its last */
    (void) from;

    k = ngx_min(n, NGX_HTTP_KVSERVE_ROUTE_APPROX_MAX);
    if (k == 0) {
        return;
    }

    if (t->rd == NULL) {
        t->rd = ngx_http_kvserve_redis_get(t->cycle, &t->redis);
        if (t->rd == NULL) {
            return;
        }
    }

    /* per name: HSET key id inc, PEXPIRE key ttl: 7 arguments, under
     * 256 bytes with a 64-byte id */
    cap = k * 256;
    buf = ngx_alloc(cap + k * 7 * (sizeof(char *) + sizeof(size_t))
                    + k * 2 * sizeof(size_t), rc->r->connection->log);
    if (buf == NULL) {
        return;
    }

    argv = (const char **) (buf + cap);
    argvlen = (size_t *) (argv + k * 7);
    first = argvlen + k * 7;

    kvs_index_cmds_init(&cmds, buf, cap, argv, argvlen, k * 7, first, k * 2);

    for (i = 0; i < k; i++) {
        if (kvs_index_cmd_blk_add(&cmds, &names[i], p->id, p->id_len,
                                  NGX_HTTP_KVSERVE_ROUTE_APPROX_INC,
                                  NGX_HTTP_KVSERVE_ROUTE_APPROX_TTL, &err)
            != KVS_OK)
        {
            break;
        }
    }

    if (cmds.n_cmds > 0) {
        /* hiredis copied the commands when this returns */
        (void) ngx_http_kvserve_redis_batch(t->rd, &cmds, 1000,
                                            ngx_http_kvserve_route_recorded,
                                            NULL);
    }

    ngx_free(buf);
}
