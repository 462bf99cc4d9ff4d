/*
 * ngx_http_kvserve_route_conf: the kvserve_route module's definition,
 * directives and balancer (issue 8; the request's side is
 * ngx_http_kvserve_route.c, the host tables _route_hosts.c):
 *
 *   kvserve_route [redis=<host:port>] [mode=index|approximate]
 *                 [timeout=<time>] [reserve_ttl=<time>]
 *                 [upstream=<name>];                       location
 *   kvserve_route_load_weight <number>;            http, server, location
 *   kvserve_prefix_balance;                                upstream
 *
 * At the end of the configuration each kvserve_route location is bound
 * to a target: the upstream with kvserve_prefix_balance it routes to
 * (upstream=, or the only one), its Redis address and mode; the
 * target's peers are copied (names, servers, pseudo host ids) in round
 * robin's order.
 *
 * The balancer wraps round robin: init_peer takes the peer kvserve_route
 * chose for the request (when chosen for this very upstream), get_peer
 * returns it once when it can be tried now (not down, not failed within
 * fail_timeout, under max_conns, not tried: the checks ip_hash makes),
 * and round robin's choice otherwise and on every retry.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <stdlib.h>

#include "ngx_http_kvserve_route.h"
#include "ngx/kvserve/ngx_http_kvserve_param.h"


static ngx_int_t ngx_http_kvserve_route_postconf(ngx_conf_t *cf);
static void *ngx_http_kvserve_route_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_kvserve_route_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_kvserve_route_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static char *ngx_http_kvserve_route_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_kvserve_route_load_weight(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_kvserve_prefix_balance(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_kvserve_route_init_process(ngx_cycle_t *cycle);
static void ngx_http_kvserve_route_exit_process(ngx_cycle_t *cycle);


static ngx_command_t  ngx_http_kvserve_route_commands[] = {

    { ngx_string("kvserve_route"),
      NGX_HTTP_LOC_CONF|NGX_CONF_ANY,
      ngx_http_kvserve_route_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_route_load_weight"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_kvserve_route_load_weight,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("kvserve_prefix_balance"),
      NGX_HTTP_UPS_CONF|NGX_CONF_NOARGS,
      ngx_http_kvserve_prefix_balance,
      0,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_kvserve_route_module_ctx = {
    ngx_http_kvserve_route_add_variables,  /* preconfiguration */
    ngx_http_kvserve_route_postconf,       /* postconfiguration */

    ngx_http_kvserve_route_create_main_conf,  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_kvserve_route_create_loc_conf,   /* create location conf */
    ngx_http_kvserve_route_merge_loc_conf     /* merge location conf */
};


ngx_module_t  ngx_http_kvserve_route_module = {
    NGX_MODULE_V1,
    &ngx_http_kvserve_route_module_ctx,    /* module context */
    ngx_http_kvserve_route_commands,       /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_kvserve_route_init_process,   /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_kvserve_route_exit_process,   /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* ---- configuration ------------------------------------------------------ */

static void *
ngx_http_kvserve_route_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_route_main_conf_t  *rmcf;

    rmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_route_main_conf_t));
    if (rmcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&rmcf->locs, cf->pool, 2, sizeof(void *)) != NGX_OK
        || ngx_array_init(&rmcf->balanced, cf->pool, 2, sizeof(void *))
           != NGX_OK
        || ngx_array_init(&rmcf->tgts, cf->pool, 2, sizeof(void *))
           != NGX_OK)
    {
        return NULL;
    }

    return rmcf;
}


static void *
ngx_http_kvserve_route_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_kvserve_route_loc_conf_t  *rlcf;

    rlcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_route_loc_conf_t));
    if (rlcf == NULL) {
        return NULL;
    }

    /* enable, tgt: 0, NULL; kvserve_route is not inherited, as
     * proxy_pass is not */
    rlcf->load_weight = -1;

    return rlcf;
}


static char *
ngx_http_kvserve_route_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_kvserve_route_loc_conf_t  *prev = parent;
    ngx_http_kvserve_route_loc_conf_t  *conf = child;

    kvs_index_route_conf_t        dflt;
    ngx_http_kvserve_loc_conf_t  *klcf;

    if (conf->load_weight < 0) {
        conf->load_weight = prev->load_weight;
    }

    if (conf->load_weight < 0) {
        kvs_index_route_conf_default(&dflt);
        conf->load_weight = dflt.load_weight;
    }

    if (!conf->enable) {
        return NGX_CONF_OK;
    }

    /* long prompts are tokenized in nginx's "default" thread pool, as in
     * kvserve locations, unless kvserve_tokenize_threads says otherwise
     * (the kvserve module's merge ran before this one: it is earlier in
     * the module list, and cf->ctx is this location's) */
    klcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_kvserve_module);

    return ngx_http_kvserve_tokenize_pool_default(cf, klcf);
}


static char *
ngx_http_kvserve_route_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_route_loc_conf_t  *rlcf = conf;

    ngx_str_t                            *value, v;
    ngx_uint_t                            i;
    ngx_http_kvserve_route_loc_conf_t   **slot;
    ngx_http_kvserve_route_main_conf_t   *rmcf;

    if (rlcf->enable) {
        return "is duplicate";
    }

    rlcf->enable = 1;
    rlcf->mode = NGX_HTTP_KVSERVE_ROUTE_INDEX;
    rlcf->timeout = 50;
    rlcf->reserve_ttl = NGX_HTTP_KVSERVE_ROUTE_RESV_TTL;
    ngx_str_set(&rlcf->redis, "127.0.0.1:6379");
    rlcf->conf_file = cf->conf_file->file.name;
    rlcf->line = cf->conf_file->line;

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_kvserve_param(&value[i], "redis", &v) == NGX_OK) {
            if (ngx_http_kvserve_redis_resolve(cf, &cmd->name, &value[i],
                                               &rlcf->redis)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strcmp(value[i].data, "mode=index") == 0) {
            rlcf->mode = NGX_HTTP_KVSERVE_ROUTE_INDEX;
            continue;
        }

        if (ngx_strcmp(value[i].data, "mode=approximate") == 0) {
            rlcf->mode = NGX_HTTP_KVSERVE_ROUTE_APPROXIMATE;
            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "timeout", &v) == NGX_OK) {
            rlcf->timeout = ngx_parse_time(&v, 0);
            if (rlcf->timeout == (ngx_msec_t) NGX_ERROR
                || rlcf->timeout == 0)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "kvserve_route: \"%V\": expected a time "
                                   "over 0, such as timeout=50ms",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "reserve_ttl", &v) == NGX_OK) {
            rlcf->reserve_ttl = ngx_parse_time(&v, 0);
            if (rlcf->reserve_ttl == (ngx_msec_t) NGX_ERROR
                || kvs_index_resv_ttl_check(rlcf->reserve_ttl, NULL)
                   != KVS_OK)
            {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "kvserve_route: \"%V\": expected a time "
                                   "from 100ms to 1h, such as "
                                   "reserve_ttl=5s", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_http_kvserve_param(&value[i], "upstream", &v) == NGX_OK
            && v.len > 0)
        {
            rlcf->upstream = v;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "kvserve_route: unknown parameter \"%V\" "
                           "(redis=<host:port>, mode=index|approximate, "
                           "timeout=<time>, reserve_ttl=<time>, "
                           "upstream=<name>)", &value[i]);
        return NGX_CONF_ERROR;
    }

    rmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_kvserve_route_module);

    slot = ngx_array_push(&rmcf->locs);
    if (slot == NULL) {
        return NGX_CONF_ERROR;
    }

    *slot = rlcf;

    return NGX_CONF_OK;
}


static char *
ngx_http_kvserve_route_load_weight(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_kvserve_route_loc_conf_t  *rlcf = conf;

    char       *end, buf[64];
    double      d;
    ngx_str_t  *value;

    if (rlcf->load_weight >= 0) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0 || value[1].len >= sizeof(buf)) {
        goto bad;
    }

    ngx_memcpy(buf, value[1].data, value[1].len);
    buf[value[1].len] = '\0';

    d = strtod(buf, &end);

    if (*end != '\0' || !(d >= 0) || d > 1e9) {
        goto bad;
    }

    rlcf->load_weight = d;

    return NGX_CONF_OK;

bad:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "kvserve_route_load_weight \"%V\": expected a number "
                       "of tokens from 0 to 1e9", &value[1]);
    return NGX_CONF_ERROR;
}


/* ---- the balancer -------------------------------------------------------- */

typedef struct {
    ngx_http_upstream_rr_peer_data_t  rrp;     /* first: round robin's */
    ngx_int_t                         peer;    /* to try first, -1 */
} ngx_http_kvserve_route_pd_t;


/* The chosen peer when it can be tried now, as ip_hash tries one; else
 * round robin's choice among the rest. */
static ngx_int_t
ngx_http_kvserve_route_get_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_kvserve_route_pd_t  *pd = data;

    time_t                         now;
    uintptr_t                      m;
    ngx_int_t                      p;
    ngx_uint_t                     i, n;
    ngx_http_upstream_rr_peer_t   *peer;
    ngx_http_upstream_rr_peers_t  *peers;

    p = pd->peer;
    pd->peer = -1;

    if (p < 0) {
        return ngx_http_upstream_get_round_robin_peer(pc, &pd->rrp);
    }

    peers = pd->rrp.peers;

    ngx_http_upstream_rr_peers_rlock(peers);

    if ((ngx_uint_t) p >= peers->number) {
        ngx_http_upstream_rr_peers_unlock(peers);
        return ngx_http_upstream_get_round_robin_peer(pc, &pd->rrp);
    }

    for (peer = peers->peer, i = 0; i < (ngx_uint_t) p; i++) {
        peer = peer->next;
    }

    n = p / (8 * sizeof(uintptr_t));
    m = (uintptr_t) 1 << p % (8 * sizeof(uintptr_t));
    now = ngx_time();

    ngx_http_upstream_rr_peer_lock(peers, peer);

    if ((pd->rrp.tried[n] & m)
        || peer->down
        || (peer->max_fails && peer->fails >= peer->max_fails
            && now - peer->checked <= peer->fail_timeout)
        || (peer->max_conns && peer->conns >= peer->max_conns))
    {
        ngx_http_upstream_rr_peer_unlock(peers, peer);
        ngx_http_upstream_rr_peers_unlock(peers);

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, pc->log, 0,
                       "kvserve route: peer %i unavailable, round robin",
                       p);

        return ngx_http_upstream_get_round_robin_peer(pc, &pd->rrp);
    }

    pd->rrp.current = peer;

    pc->sockaddr = peer->sockaddr;
    pc->socklen = peer->socklen;
    pc->name = &peer->name;
    pc->cached = 0;
    pc->connection = NULL;

    peer->conns++;

    if (now - peer->checked > peer->fail_timeout) {
        peer->checked = now;
    }

    ngx_http_upstream_rr_peer_unlock(peers, peer);
    ngx_http_upstream_rr_peers_unlock(peers);

    pd->rrp.tried[n] |= m;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, pc->log, 0,
                   "kvserve route: peer %i \"%V\"", p, &peer->name);

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_route_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_kvserve_route_pd_t   *pd;
    ngx_http_kvserve_route_ctx_t  *rc;

    pd = ngx_pcalloc(r->pool, sizeof(ngx_http_kvserve_route_pd_t));
    if (pd == NULL) {
        return NGX_ERROR;
    }

    r->upstream->peer.data = &pd->rrp;

    if (ngx_http_upstream_init_round_robin_peer(r, us) != NGX_OK) {
        return NGX_ERROR;
    }

    r->upstream->peer.get = ngx_http_kvserve_route_get_peer;

    pd->peer = -1;

    rc = ngx_http_get_module_ctx(r->main, ngx_http_kvserve_route_module);

    /* a choice made for this upstream (another would index other
     * peers); backups are never chosen, round robin reaches them */
    if (rc != NULL && rc->tgt != NULL && rc->tgt->uscf == us
        && rc->peer >= 0)
    {
        pd->peer = rc->peer;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_route_init_upstream(ngx_conf_t *cf,
    ngx_http_upstream_srv_conf_t *us)
{
    if (ngx_http_upstream_init_round_robin(cf, us) != NGX_OK) {
        return NGX_ERROR;
    }

    us->peer.init = ngx_http_kvserve_route_init_peer;

    return NGX_OK;
}


static char *
ngx_http_kvserve_prefix_balance(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_upstream_srv_conf_t        *uscf, **slot;
    ngx_http_kvserve_route_main_conf_t  *rmcf;

    uscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_upstream_module);

    if (uscf->peer.init_upstream == ngx_http_kvserve_route_init_upstream) {
        return "is duplicate";
    }

    if (uscf->peer.init_upstream) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "load balancing method redefined");
    }

    uscf->peer.init_upstream = ngx_http_kvserve_route_init_upstream;

    uscf->flags = NGX_HTTP_UPSTREAM_CREATE
                  |NGX_HTTP_UPSTREAM_WEIGHT
                  |NGX_HTTP_UPSTREAM_MAX_CONNS
                  |NGX_HTTP_UPSTREAM_MAX_FAILS
                  |NGX_HTTP_UPSTREAM_FAIL_TIMEOUT
                  |NGX_HTTP_UPSTREAM_DOWN
                  |NGX_HTTP_UPSTREAM_BACKUP;

    rmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_kvserve_route_module);

    slot = ngx_array_push(&rmcf->balanced);
    if (slot == NULL) {
        return NGX_CONF_ERROR;
    }

    *slot = uscf;

    return NGX_CONF_OK;
}


/* ---- targets, at the end of the configuration --------------------------- */

static ngx_int_t
ngx_http_kvserve_route_peers(ngx_conf_t *cf, ngx_http_kvserve_route_tgt_t *t)
{
    ngx_uint_t                      i;
    ngx_http_upstream_rr_peer_t    *peer;
    ngx_http_upstream_rr_peers_t   *peers;
    ngx_http_kvserve_route_peer_t  *p;

    peers = t->uscf->peer.data;

    if (peers == NULL || peers->number == 0) {
        return NGX_ERROR;
    }

    t->peers = ngx_pcalloc(cf->pool, peers->number
                                     * sizeof(ngx_http_kvserve_route_peer_t));
    if (t->peers == NULL) {
        return NGX_ERROR;
    }

    for (peer = peers->peer, i = 0; peer && i < peers->number;
         peer = peer->next, i++)
    {
        p = &t->peers[i];
        p->name = peer->name;
        p->server = peer->server;
        p->id_len = kvs_index_gw_pseudo_id((const char *) peer->name.data,
                                           peer->name.len, p->id);
    }

    t->n_peers = i;

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_route_resolve(ngx_conf_t *cf,
    ngx_http_kvserve_route_main_conf_t *rmcf,
    ngx_http_kvserve_route_loc_conf_t *rlcf, uint32_t block_tokens)
{
    ngx_uint_t                       i;
    ngx_http_upstream_srv_conf_t    *uscf, **bal;
    ngx_http_kvserve_route_tgt_t    *t, **tp;

    bal = rmcf->balanced.elts;
    uscf = NULL;

    for (i = 0; i < rmcf->balanced.nelts; i++) {
        if (rlcf->upstream.len == 0
            || (bal[i]->host.len == rlcf->upstream.len
                && ngx_strncmp(bal[i]->host.data, rlcf->upstream.data,
                               rlcf->upstream.len) == 0))
        {
            if (uscf != NULL) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "kvserve_route in %V:%ui: several upstreams "
                              "have kvserve_prefix_balance; name one with "
                              "upstream=<name>", &rlcf->conf_file,
                              rlcf->line);
                return NGX_ERROR;
            }

            uscf = bal[i];
        }
    }

    if (uscf == NULL) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "kvserve_route in %V:%ui: no upstream%s%V%s has "
                      "kvserve_prefix_balance", &rlcf->conf_file,
                      rlcf->line, rlcf->upstream.len ? " \"" : "",
                      &rlcf->upstream, rlcf->upstream.len ? "\"" : "");
        return NGX_ERROR;
    }

    tp = rmcf->tgts.elts;

    for (i = 0; i < rmcf->tgts.nelts; i++) {
        t = tp[i];

        if (t->uscf == uscf && t->mode == rlcf->mode
            && t->redis.len == rlcf->redis.len
            && ngx_strncmp(t->redis.data, rlcf->redis.data, t->redis.len)
               == 0)
        {
            rlcf->tgt = t;
            return NGX_OK;
        }
    }

    t = ngx_pcalloc(cf->pool, sizeof(ngx_http_kvserve_route_tgt_t));
    tp = ngx_array_push(&rmcf->tgts);
    if (t == NULL || tp == NULL) {
        return NGX_ERROR;
    }

    *tp = t;
    t->uscf = uscf;
    t->mode = rlcf->mode;
    t->redis = rlcf->redis;
    t->block_tokens = block_tokens;

    if (ngx_http_kvserve_route_peers(cf, t) != NGX_OK) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "kvserve_route in %V:%ui: upstream \"%V\" has no "
                      "servers", &rlcf->conf_file, rlcf->line, &uscf->host);
        return NGX_ERROR;
    }

    rlcf->tgt = t;

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_route_postconf(ngx_conf_t *cf)
{
    ngx_uint_t                            i;
    ngx_http_handler_pt                  *h;
    ngx_http_core_main_conf_t            *cmcf;
    ngx_http_kvserve_main_conf_t         *kmcf;
    ngx_http_kvserve_route_loc_conf_t   **locs;
    ngx_http_kvserve_route_main_conf_t   *rmcf;

    rmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_kvserve_route_module);

    if (rmcf->locs.nelts == 0) {
        return NGX_OK;
    }

    kmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_kvserve_module);

    if (kmcf->models->nelts == 0) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"kvserve_route\" needs a \"kvserve_model\" in the "
                      "http block: the tokenizer and chat template of the "
                      "model the hosts serve");
        return NGX_ERROR;
    }

    locs = rmcf->locs.elts;

    for (i = 0; i < rmcf->locs.nelts; i++) {
        if (ngx_http_kvserve_route_resolve(cf, rmcf, locs[i],
                                           (uint32_t) kmcf->kv_block)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_ACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_kvserve_route_handler;

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_route_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                            i;
    ngx_http_kvserve_route_tgt_t        **t;
    ngx_http_kvserve_route_main_conf_t   *rmcf;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    rmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_kvserve_route_module);
    if (rmcf == NULL) {
        return NGX_OK;
    }

    t = rmcf->tgts.elts;

    for (i = 0; i < rmcf->tgts.nelts; i++) {
        if (ngx_http_kvserve_route_tgt_start(t[i], cycle) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static void
ngx_http_kvserve_route_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                            i;
    ngx_http_kvserve_route_tgt_t        **t;
    ngx_http_kvserve_route_main_conf_t   *rmcf;

    rmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_kvserve_route_module);
    if (rmcf == NULL) {
        return;
    }

    t = rmcf->tgts.elts;

    for (i = 0; i < rmcf->tgts.nelts; i++) {
        ngx_http_kvserve_route_tgt_stop(t[i]);
    }
}
