/*
 * ngx_http_kvserve_metrics: the per-request variables ($kvserve_ttft_ms
 * ...), the shared memory zone that every worker adds its requests to,
 * and the `kvserve_metrics` location that writes it in Prometheus text
 * format (kvs_metrics.c), with the engine's gauges from a STATS asked
 * at scrape time.
 *
 * Invariants:
 *  - the zone is laid out once per configuration (kvs_metrics_init) and
 *    kept across reloads while the model list is the same, so counters
 *    only grow; workers only add to it, never lock;
 *  - a scrape never waits for long: without a connected engine, or when
 *    its STATS reply does not come within a second, or the engine is
 *    lost, it answers at once without the engine's gauges;
 *  - variables read the request's figures through
 *    ngx_http_kvserve_req_info() (ngx_http_kvserve_timing.c) and
 *    are "-" where a figure does not apply.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve.h"
#include "ngx/limit/ngx_http_kvserve_limit.h"
#include "ngx_http_kvserve_guard.h"
#include "backend/kvs_backend.h"


/* the engine's iteration buckets are the exposition's */
#if (KVS_ENGINE_ITER_BOUNDS != KVS_METRICS_ITER_BOUNDS)
#error "KVS_ENGINE_ITER_BOUNDS differs from KVS_METRICS_ITER_BOUNDS"
#endif

#define NGX_HTTP_KVSERVE_SCRAPE_WAIT  1000     /* ms for the STATS reply */


typedef struct {
    ngx_http_request_t       *r;
    ngx_http_kvserve_sub_t    stats;
    ngx_event_t               timer;       /* data: r->connection */
    unsigned                  finished:1;
} ngx_http_kvserve_scrape_t;


static void ngx_http_kvserve_scrape_tier(kvs_metrics_gauges_t *g,
    const kvs_engine_stats_t *st);
static void ngx_http_kvserve_scrape_pools(kvs_metrics_gauges_t *g,
    const kvs_engine_stats_t *st);


/* ---- variables -------------------------------------------------------- */

typedef enum {
    NGX_HTTP_KVSERVE_VAR_PROMPT = KVS_HOP_N,
    NGX_HTTP_KVSERVE_VAR_CACHED,
    NGX_HTTP_KVSERVE_VAR_COMPLETION,
    NGX_HTTP_KVSERVE_VAR_REASON,
    NGX_HTTP_KVSERVE_VAR_MODEL,
    NGX_HTTP_KVSERVE_VAR_MISS,
    NGX_HTTP_KVSERVE_VAR_KV_BLOCK_MS
} ngx_http_kvserve_var_e;


/* A request's figure; "-" where it does not apply. */
static ngx_int_t
ngx_http_kvserve_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                       *p;
    uint64_t                      ns;
    ngx_str_t                     s;
    ngx_http_kvserve_req_info_t   info;

    ngx_str_set(&s, "-");

    if (ngx_http_kvserve_req_info(r, &info) != NGX_OK) {
        goto done;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN + KVS_METRICS_MS_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    switch (data) {

    case NGX_HTTP_KVSERVE_VAR_PROMPT:
    case NGX_HTTP_KVSERVE_VAR_CACHED:
    case NGX_HTTP_KVSERVE_VAR_COMPLETION:
        if (!info.submitted) {
            break;
        }
        s.data = p;
        s.len = ngx_sprintf(p, "%uD",
                            data == NGX_HTTP_KVSERVE_VAR_PROMPT
                            ? info.prompt_tokens
                            : data == NGX_HTTP_KVSERVE_VAR_COMPLETION
                            ? info.completion_tokens : info.cached_tokens)
                - p;
        break;

    case NGX_HTTP_KVSERVE_VAR_REASON:
        if (info.reason < 0) {
            break;
        }
        s.data = (u_char *) kvs_reason_name((kvs_reason_t) info.reason);
        s.len = ngx_strlen(s.data);
        break;

    case NGX_HTTP_KVSERVE_VAR_MISS:
        if (!info.submitted || info.cache_miss < 0) {
            break;
        }
        if (ngx_http_kvserve_cache_miss_text(r, info.cache_miss,
                                             info.cache_miss_pos, &s)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
        break;

    case NGX_HTTP_KVSERVE_VAR_KV_BLOCK_MS:
        /* KV blocks x ms the engine counted (kv_rate's charge) */
        if (!info.kv_counted) {
            break;
        }
        s.data = p;
        s.len = ngx_sprintf(p, "%uL.%03uL", info.kv_block_us / 1000,
                            info.kv_block_us % 1000)
                - p;
        break;

    case NGX_HTTP_KVSERVE_VAR_MODEL:
        if (info.model.len != 0) {
            s = info.model;
        }
        break;

    default:
        if (kvs_req_times_hop(&info.t, (kvs_hop_t) data, &ns) != KVS_OK) {
            break;
        }
        s.data = p;
        s.len = kvs_metrics_fmt_ms((char *) p, ns);
        break;
    }

done:

    v->data = s.data;
    v->len = s.len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


static ngx_http_variable_t  ngx_http_kvserve_vars[] = {

    { ngx_string("kvserve_body_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_BODY, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_parse_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_PARSE, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_tokenize_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_TOKENIZE, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_limit_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_LIMIT, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_queue_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_QUEUE, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_prefill_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_PREFILL, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_ttft_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_TTFT, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_decode_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_DECODE, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_itl_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_ITL, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_total_ms"), NULL, ngx_http_kvserve_variable,
      KVS_HOP_TOTAL, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_prompt_tokens"), NULL, ngx_http_kvserve_variable,
      NGX_HTTP_KVSERVE_VAR_PROMPT, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_cached_tokens"), NULL, ngx_http_kvserve_variable,
      NGX_HTTP_KVSERVE_VAR_CACHED, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_completion_tokens"), NULL,
      ngx_http_kvserve_variable, NGX_HTTP_KVSERVE_VAR_COMPLETION,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_finish_reason"), NULL, ngx_http_kvserve_variable,
      NGX_HTTP_KVSERVE_VAR_REASON, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_model"), NULL, ngx_http_kvserve_variable,
      NGX_HTTP_KVSERVE_VAR_MODEL, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_cache_miss_reason"), NULL,
      ngx_http_kvserve_variable, NGX_HTTP_KVSERVE_VAR_MISS,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_kv_block_ms"), NULL, ngx_http_kvserve_variable,
      NGX_HTTP_KVSERVE_VAR_KV_BLOCK_MS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


ngx_int_t
ngx_http_kvserve_add_variables(ngx_conf_t *cf)
{
    if (ngx_http_kvserve_add_vars(cf, ngx_http_kvserve_vars) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_kvserve_tenant_add_variables(cf);
}


ngx_int_t
ngx_http_kvserve_add_vars(ngx_conf_t *cf, ngx_http_variable_t *vars)
{
    ngx_http_variable_t  *var, *v;

    for (v = vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


/* ---- the shared zone -------------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_metrics_init_zone(ngx_shm_zone_t *zone, void *data)
{
    size_t                         size;
    kvs_err_t                      err;
    kvs_metrics_t                 *m;
    ngx_slab_pool_t               *shpool;
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = zone->data;
    size = kvs_metrics_size(kmcf->models->nelts);

    if (data != NULL) {
        /* a reload with a zone of the same size: same models, same
         * counters; otherwise they start again */
        m = data;
        zone->data = m;

        if (kvs_metrics_same(m, size, kmcf->models->nelts,
                             kmcf->metrics_names, kmcf->metrics_lens))
        {
            return NGX_OK;
        }

    } else {
        shpool = (ngx_slab_pool_t *) zone->shm.addr;

        if (zone->shm.exists) {
            zone->data = shpool->data;
            return NGX_OK;
        }

        m = ngx_slab_alloc(shpool, size);
        if (m == NULL) {
            return NGX_ERROR;
        }

        shpool->data = m;
        zone->data = m;
    }

    if (kvs_metrics_init(m, size, kmcf->models->nelts, kmcf->metrics_names,
                         kmcf->metrics_lens, &err)
        != KVS_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, zone->shm.log, 0, "kvserve: %s",
                      err.msg);
        return NGX_ERROR;
    }

    return NGX_OK;
}


char *
ngx_http_kvserve_metrics_zone(ngx_conf_t *cf,
    ngx_http_kvserve_main_conf_t *kmcf)
{
    u_char                    *p;
    size_t                     size;
    ngx_str_t                  name;
    ngx_uint_t                 i, n;
    ngx_http_kvserve_model_t  *m;

    n = kmcf->models->nelts;
    m = kmcf->models->elts;

    kmcf->metrics_names = ngx_palloc(cf->pool, n * sizeof(char *));
    kmcf->metrics_lens = ngx_palloc(cf->pool, n * sizeof(uint32_t));
    if (kmcf->metrics_names == NULL || kmcf->metrics_lens == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < n; i++) {
        /* NUL-terminated for kvs_metrics */
        p = ngx_pnalloc(cf->pool, m[i].name.len + 1);
        if (p == NULL) {
            return NGX_CONF_ERROR;
        }
        ngx_cpystrn(p, m[i].name.data, m[i].name.len + 1);
        kmcf->metrics_names[i] = (const char *) p;

        kmcf->metrics_lens[i] = m[i].model->hp.n_ctx_train
                                ? m[i].model->hp.n_ctx_train : 1;
    }

    /* the slab pool's own pages, then the counters */
    size = ngx_align(kvs_metrics_size(n), ngx_pagesize) + 8 * ngx_pagesize;

    ngx_str_set(&name, "kvserve_metrics");

    kmcf->metrics_zone = ngx_shared_memory_add(cf, &name, size,
                                               &ngx_http_kvserve_module);
    if (kmcf->metrics_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    kmcf->metrics_zone->init = ngx_http_kvserve_metrics_init_zone;
    kmcf->metrics_zone->data = kmcf;

    return NGX_CONF_OK;
}


kvs_metrics_t *
ngx_http_kvserve_metrics(ngx_http_request_t *r)
{
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_module);

    if (kmcf == NULL || kmcf->metrics_zone == NULL) {
        return NULL;
    }

    return kmcf->metrics_zone->data;
}


/* ---- the kvserve_metrics location ------------------------------------- */

/* The pool's cleanup, and the end of an answered scrape: the STATS
 * forgotten, the timer gone. */
static void
ngx_http_kvserve_scrape_cleanup(void *data)
{
    ngx_http_kvserve_scrape_t  *sc = data;

    ngx_http_kvserve_engine_forget(&sc->stats);

    if (sc->timer.timer_set) {
        ngx_del_timer(&sc->timer);
    }
}


/* The engine's tenants as the exposition reads them; the keys stay in
 * the STATS answer, which outlives the exposition. */
static void
ngx_http_kvserve_scrape_tenant(kvs_metrics_tenant_t *dst,
    const kvs_engine_tenant_t *src)
{
    dst->key = src->key;
    dst->key_len = src->key_len;
    dst->prefill = src->prefill;
    dst->decode = src->decode;
    dst->kv_blocks = src->kv_blocks;
}


static void
ngx_http_kvserve_scrape_tenants(kvs_metrics_tenants_t *dst,
    const kvs_engine_tenants_t *src)
{
    uint32_t  i;

    dst->n_top = ngx_min(src->n_top, KVS_METRICS_TOP_TENANTS);

    for (i = 0; i < dst->n_top; i++) {
        ngx_http_kvserve_scrape_tenant(&dst->top[i], &src->top[i]);
    }

    ngx_http_kvserve_scrape_tenant(&dst->other, &src->other);
    dst->n_tenants = src->n_tenants;
}


/* The exposition, with the engine's gauges when st is not NULL. */
static ngx_int_t
ngx_http_kvserve_scrape_send(ngx_http_request_t *r, kvs_wire_stats_t *st)
{
    uint32_t               i, k;
    ngx_int_t              rc;
    ngx_str_t              why;
    kvs_buf_t              body;
    kvs_err_t              err;
    ngx_buf_t             *b;
    ngx_chain_t            out;
    kvs_metrics_t                 *m;
    kvs_metrics_gauges_t          *g;
    const kvs_wire_model_t        *wm;
    ngx_http_kvserve_model_t      *mc;
    ngx_http_kvserve_main_conf_t  *kmcf;

    m = ngx_http_kvserve_metrics(r);
    g = NULL;

    ngx_memzero(&body, sizeof(body));

    if (m != NULL) {
        g = ngx_pcalloc(r->pool, (m->n_models + 1)
                                 * sizeof(kvs_metrics_gauges_t));
        if (g == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        kmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_module);
        mc = kmcf->models->elts;

        for (k = 0; k < m->n_models; k++) {
            g[k].available = ngx_http_kvserve_engine_available(k, &why)
                             == NGX_OK ? KVS_METRICS_AVAIL_UP
                                       : KVS_METRICS_AVAIL_DOWN;

            if (k >= kmcf->models->nelts) {
                continue;
            }

            /* cache_config_info: the serving engine's figures once it
             * said hello, the configuration's plan before */
            wm = ngx_http_kvserve_engine_model(&mc[k]);
            g[k].block_size = (uint32_t) kmcf->kv_block;
            g[k].num_blocks = wm != NULL ? wm->kv_blocks
                                         : mc[k].kv_plan.n_blocks;
            g[k].cache_dtype = kvs_kv_dtype_name(
                                   ngx_http_kvserve_kv_dtype(&mc[k]));
            g[k].prefix_caching = kmcf->prefix_cache == 1;
        }
    }

    if (g != NULL && st != NULL) {
        for (i = 0; i < st->n_models; i++) {
            k = st->models[i].index;
            if (k >= m->n_models) {
                continue;
            }
            g[k].have = 1;
            g[k].running = st->models[i].st.running;
            g[k].waiting = st->models[i].st.waiting;
            g[k].kv_blocks = st->models[i].st.kv_blocks;
            g[k].kv_used = st->models[i].st.kv_used;
            g[k].cache_evicted_blocks =
                st->models[i].st.cache_evicted_blocks;
            ngx_memcpy(g[k].iter_tokens, st->models[i].st.iter_tokens,
                       sizeof(g[k].iter_tokens));
            g[k].iter_tokens_sum = st->models[i].st.iter_tokens_sum;
            ngx_http_kvserve_scrape_pools(&g[k], &st->models[i].st);
            ngx_http_kvserve_scrape_tier(&g[k], &st->models[i].st);
            g[k].lora_adapters = st->models[i].st.lora_adapters;
            g[k].lora_slots = st->models[i].st.lora_slots;
            g[k].lora_resident = st->models[i].st.lora_resident;
            g[k].lora_parked = st->models[i].st.lora_parked;
            g[k].lora_loads = st->models[i].st.lora_loads;
            g[k].lora_evictions = st->models[i].st.lora_evictions;
            g[k].lora_waited = st->models[i].st.lora_waited;
            g[k].lora_wait_ms = st->models[i].st.lora_wait_ms;
            g[k].lora_load_ns = st->models[i].st.lora_load_ns;
            g[k].lora_install_ns = st->models[i].st.lora_install_ns;
            g[k].lora_install_max_ns = st->models[i].st.lora_install_max_ns;
            ngx_http_kvserve_scrape_tenants(&g[k].tenants,
                                            &st->models[i].tenants);
        }
    }

    if (m != NULL && kvs_metrics_write(m, g, &body, &err) != KVS_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "kvserve: %s",
                      err.msg);
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the kvserve_limit zones' counters */
    if (ngx_http_kvserve_limit_metrics(r, &body) != NGX_OK
        || ngx_http_kvserve_guard_metrics(r, &body) != NGX_OK)
    {
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b = ngx_create_temp_buf(r->pool, body.len ? body.len : 1);
    if (b == NULL) {
        kvs_buf_free(&body);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (body.len) {
        b->last = ngx_cpymem(b->last, body.data, body.len);
    }
    kvs_buf_free(&body);

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type,
                "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = sizeof("text/plain") - 1;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b->last_buf = (r == r->main);
    b->last_in_chain = 1;

    if (b->last == b->pos) {
        b->temporary = 0;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


static void
ngx_http_kvserve_scrape_done(ngx_http_kvserve_scrape_t *sc,
    kvs_wire_stats_t *st)
{
    if (sc->finished) {
        return;
    }

    sc->finished = 1;

    ngx_http_kvserve_scrape_cleanup(sc);

    ngx_http_finalize_request(sc->r, ngx_http_kvserve_scrape_send(sc->r,
                                                                   st));
}


static void
ngx_http_kvserve_scrape_event(ngx_http_kvserve_sub_t *s, ngx_uint_t ev,
    void *msg)
{
    ngx_http_kvserve_scrape_t  *sc = s->data;

    if (ev == NGX_HTTP_KVSERVE_EV_STATS) {
        ngx_http_kvserve_scrape_done(sc, msg);
        return;
    }

    /* lost with the engine: answer with what the workers know */
    ngx_http_kvserve_scrape_done(sc, NULL);
}


static void
ngx_http_kvserve_scrape_timeout(ngx_event_t *ev)
{
    ngx_http_kvserve_scrape_t  *sc;

    sc = (ngx_http_kvserve_scrape_t *)
         ((u_char *) ev - offsetof(ngx_http_kvserve_scrape_t, timer));

    ngx_log_error(NGX_LOG_WARN, sc->r->connection->log, 0,
                  "kvserve: the engine did not answer STATS within %ui ms; "
                  "metrics without its gauges",
                  (ngx_uint_t) NGX_HTTP_KVSERVE_SCRAPE_WAIT);

    ngx_http_kvserve_scrape_done(sc, NULL);
}


ngx_int_t
ngx_http_kvserve_metrics_handler(ngx_http_request_t *r)
{
    ngx_int_t                   rc;
    ngx_pool_cleanup_t         *cln;
    ngx_http_kvserve_scrape_t  *sc;

    rc = ngx_http_kvserve_cors_preflight(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_kvserve_metrics(r) == NULL
        || ngx_http_kvserve_engine_hello() == NULL)
    {
        return ngx_http_kvserve_scrape_send(r, NULL);
    }

    sc = ngx_pcalloc(r->pool, sizeof(ngx_http_kvserve_scrape_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (sc == NULL || cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sc->r = r;
    sc->stats.type = KVS_WIRE_STATS;
    sc->stats.model = NGX_HTTP_KVSERVE_ALL;
    sc->stats.handler = ngx_http_kvserve_scrape_event;
    sc->stats.data = sc;
    sc->timer.handler = ngx_http_kvserve_scrape_timeout;
    sc->timer.data = r->connection;
    sc->timer.log = r->connection->log;

    cln->handler = ngx_http_kvserve_scrape_cleanup;
    cln->data = sc;

    r->read_event_handler = ngx_http_test_reading;

    /* held before sending: the answer may come back from inside send */
    r->main->count++;

    ngx_add_timer(&sc->timer, NGX_HTTP_KVSERVE_SCRAPE_WAIT);

    if (ngx_http_kvserve_engine_send(&sc->stats) != NGX_OK) {
        ngx_http_kvserve_scrape_done(sc, NULL);
    }

    return NGX_DONE;
}


/* The engine's KV pools' figures into the scrape's gauges. */
static void
ngx_http_kvserve_scrape_pools(kvs_metrics_gauges_t *g,
    const kvs_engine_stats_t *st)
{
    ngx_uint_t  p;

    g->pools = st->pools != 0;

    for (p = 0; p < 2; p++) {
        g->pool_max[p] = st->pool_max[p];
        g->pool_used[p] = st->pool_used[p];
        g->pool_queued[p] = st->pool_queued[p];
        g->pool_admitted[p] = st->pool_admitted[p];
        g->pool_waited[p] = st->pool_waited[p];
        g->pool_wait_ms[p] = st->pool_wait_ms[p];
        g->pool_refused[p] = st->pool_refused[p];
    }
}


/* The lower tiers' figures (kvs_metrics_tier.c), when it has one. */
static void
ngx_http_kvserve_scrape_tier(kvs_metrics_gauges_t *g,
    const kvs_engine_stats_t *st)
{
    uint64_t  lower;

    g->tier = st->tier.on != 0;
    g->tier_host = st->tier.host_on != 0;

    if (!g->tier && !g->tier_host) {
        return;
    }

    lower = st->cache_tier_hit_tokens + st->cache_host_hit_tokens;
    g->tier_hit_tokens_disk = st->cache_tier_hit_tokens;
    g->tier_hit_tokens_host = st->cache_host_hit_tokens;
    g->tier_hit_tokens_pool = st->cache_hit_tokens >= lower
                              ? st->cache_hit_tokens - lower : 0;
    g->host_blocks = st->tier.host_used;
    g->host_capacity = st->tier.host_slots;
    g->host_loaded = st->tier.host_loaded_blocks;
    g->host_load_ns = st->tier.host_load_ns;
    g->host_in_bytes = st->tier.host_bytes_in;
    g->host_out_bytes = st->tier.host_bytes_out;
    g->host_spilled = st->tier.host_spilled;
    g->host_evicted = st->tier.host_evicted;
    g->host_copies = st->tier.host_copies;
    g->host_copy_wait_ns = st->tier.host_copy_wait_ns;
    g->host_copy_full = st->tier.host_copy_full;
    g->tier_blocks = st->tier.used;
    g->tier_capacity = st->tier.slots;
    g->tier_loaded = st->tier.loaded_blocks;
    g->tier_load_ns = st->tier.load_ns;
    g->tier_read_bytes = st->tier.bytes_read;
    g->tier_written_bytes = st->tier.bytes_written;
    g->tier_spilled = st->tier.spilled;
    g->tier_dropped = st->tier.spill_dropped;
    g->tier_corrupt = st->tier.corrupt;
    g->tier_recomputed = st->tier.recomputed_blocks;
    g->tier_load_waits = st->tier.load_waits;
    g->tier_load_wait_ns = st->tier.load_wait_ns;
    g->tier_loading = st->tier.loading;
}
