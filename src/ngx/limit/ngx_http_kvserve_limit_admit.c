/*
 * ngx_http_kvserve_limit_admit: the request side of the token rate
 * limits: admission of a tokenized request in every kvserve_limit zone
 * that applies, the delay timer, the x-ratelimit headers and the 429
 * answer, the refund of unused output when the request ends (a body
 * filter on the last buffer, else the pool cleanup), the variable
 * $kvserve_limit_status, and a request's tenant for the engine's fair
 * share (docs/limits.md).
 *
 * Invariants:
 *  - a request's reservations (lctx->resv[0..n-1]) are settled exactly
 *    once, by the body filter or the pool cleanup, whatever ended it;
 *  - a rejection gives back what the zones charged before it, so a
 *    refused request holds nothing;
 *  - a delayed request waits on a timer, never blocking; its cleanup
 *    removes the timer before it refunds;
 *  - a tenant is the hash of a zone's key, never the key: API keys stay
 *    in the worker;
 *  - a request whose key is empty (or over 65535 bytes) meets its
 *    kvserve_limit's empty= rule: shared (charged, refunded and given
 *    its tenant under the zone's one keyless key, the empty key),
 *    reject (401, nothing charged anywhere) or unlimited (skipped).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_limit_int.h"


static ngx_int_t ngx_http_kvserve_limit_header(ngx_http_request_t *r,
    u_char **p, const char *key, uint64_t n);


/* The key of a zone's shared keyless bucket: empty, never a real key's
 * (ngx_http_kvserve_limit_int.h); data not NULL for the tree's
 * comparisons. */
static ngx_str_t  ngx_http_kvserve_limit_keyless = ngx_string("");


/* ---- admission ---------------------------------------------------------- */

static ngx_str_t  ngx_http_kvserve_limit_status_names[] = {
    ngx_string("PASSED"),
    ngx_string("DELAYED"),
    ngx_string("REJECTED"),
    ngx_string("DELAYED_DRY_RUN"),
    ngx_string("REJECTED_DRY_RUN")
};


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


/* ---- the refund --------------------------------------------------------- */

/* The request ended, or its output is all generated: every zone gets
 * back the output it did not generate, and kv_rate's reservation becomes
 * what it held (kvs_limit_kv_held()): the engine's count of its blocks x
 * time, whole when every choice's last frame came, else topped up to now
 * (a client that left, an engine that timed out or failed); an estimate
 * from its timings when no count came at all. */
static void
ngx_http_kvserve_limit_end(ngx_http_kvserve_limit_ctx_t *lctx)
{
    uint64_t                 generated;
    kvs_limit_kv_hold_t      h;
    ngx_http_kvserve_ctx_t  *kctx;

    kctx = lctx->kctx;
    generated = ngx_http_kvserve_completion_tokens(kctx);

    ngx_memzero(&h, sizeof(h));
    h.prompt_tokens = kctx->prompt_tokens;
    h.generated = generated;
    h.bytes_per_token = lctx->kv_bpt;
    h.submit_ns = kctx->t.submit_ns;
    h.first_ns = kctx->t.first_ns;
    h.engine_block_us = kctx->kv_block_us;
    h.engine_ns = kctx->kv_ns;
    h.block_tokens = kctx->model != NULL ? kctx->model->kv_block : 0;
    h.engine_done = kctx->n_choices > 0 && kctx->kv_done >= kctx->n_choices;

    ngx_http_kvserve_limit_settle(lctx, 0, lctx->n, 0, generated,
                                  kvs_limit_kv_held(&h, kvs_now_ns()));
}


static void
ngx_http_kvserve_limit_cleanup(void *data)
{
    ngx_http_kvserve_limit_ctx_t  *lctx = data;

    if (lctx->delay.timer_set) {
        ngx_del_timer(&lctx->delay);
    }

    ngx_http_kvserve_limit_end(lctx);
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
    ngx_chain_t                   *cl;
    ngx_http_kvserve_limit_ctx_t  *lctx;

    lctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_limit_module);

    if (lctx == NULL || lctx->n == 0 || r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    for (cl = in; cl; cl = cl->next) {
        if (cl->buf->last_buf) {
            ngx_http_kvserve_limit_end(lctx);
            break;
        }
    }

    return ngx_http_next_body_filter(r, in);
}


ngx_int_t
ngx_http_kvserve_limit_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_kvserve_limit_body_filter;

    return NGX_OK;
}


/* ---- answers ------------------------------------------------------------ */

/* The x-ratelimit-*-tokens headers (unless v is a KV bucket's) and
 * the retry advice. */
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

    if (!v->kv) {
        if (ngx_http_kvserve_limit_header(r, &p, "x-ratelimit-limit-tokens",
                                          v->limit)
            != NGX_OK
            || ngx_http_kvserve_limit_header(r, &p,
                                             "x-ratelimit-remaining-tokens",
                                             v->remaining)
               != NGX_OK)
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
    }

    if (never) {
        /* waiting does not help: openai-python honours this */
        return ngx_http_kvserve_add_header(r, "x-should-retry", "false");
    }

    if (v->retry_ms == 0) {
        return NGX_OK;
    }

    if (ngx_http_kvserve_limit_header(r, &p, "retry-after",
                                      kvs_limit_retry_after_s(v->retry_ms))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_kvserve_limit_header(r, &p, "retry-after-ms",
                                         v->retry_ms);
}


/* key: n in decimal, written at *p, which moves past it and its NUL. */
static ngx_int_t
ngx_http_kvserve_limit_header(ngx_http_request_t *r, u_char **p,
    const char *key, uint64_t n)
{
    u_char  *s;

    s = *p;
    *p = ngx_sprintf(s, "%uL%Z", n);

    return ngx_http_kvserve_add_header(r, key, (char *) s);
}


/* The 429 (or kvserve_limit_status) with OpenAI's body and the headers. */
static void
ngx_http_kvserve_limit_reject(ngx_http_kvserve_limit_ctx_t *lctx,
    ngx_http_kvserve_limit_view_t *v, ngx_uint_t never)
{
    char                                dur[KVS_LIMIT_DUR_LEN];
    const char                         *per;
    ngx_int_t                           rc;
    kvs_api_err_t                       aerr;
    ngx_http_request_t                 *r;
    ngx_http_kvserve_ctx_t             *kctx;
    ngx_http_kvserve_limit_loc_conf_t  *llcf;

    kctx = lctx->kctx;
    r = kctx->r;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_kvserve_limit_module);

    per = v->kv ? "KV cache held (kv_rate, KiB x s)"
          : v->period_ms == 60000 ? "tokens per min (TPM)"
          : "tokens per sec (TPS)";

    if (never) {
        kvs_api_err_set(&aerr, (int) llcf->status_code, NULL,
                        "rate_limit_exceeded",
                        "Request too large for %.*s on %s in "
                        "zone \"%.*s\": Limit %llu, Requested %llu. The "
                        "input or output tokens must be reduced in order "
                        "to run successfully.",
                        (int) kctx->req.model.len, kctx->req.model.ptr, per,
                        (int) v->zone.len, v->zone.data,
                        (unsigned long long) v->limit,
                        (unsigned long long) v->asked);
    } else {
        kvs_limit_fmt_duration(dur, v->retry_ms);
        kvs_api_err_set(&aerr, (int) llcf->status_code, NULL,
                        "rate_limit_exceeded",
                        "Rate limit reached for %.*s on %s in "
                        "zone \"%.*s\": Limit %llu, Used %llu, Requested "
                        "%llu. Please try again in %s.",
                        (int) kctx->req.model.len, kctx->req.model.ptr, per,
                        (int) v->zone.len, v->zone.data,
                        (unsigned long long) v->limit,
                        (unsigned long long) v->used,
                        (unsigned long long) v->asked, dur);
    }

    ngx_cpystrn((u_char *) aerr.type, (u_char *) "tokens",
                sizeof(aerr.type));

    if (ngx_http_kvserve_limit_headers(r, v, never) != NGX_OK) {
        ngx_http_kvserve_finish(kctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* OpenAI's shape, or Anthropic's on the Messages endpoints */
    rc = ngx_http_kvserve_api_error(r, &aerr);
    ngx_http_kvserve_finish(kctx, rc);
}


/*
 * empty=reject: 401, as OpenAI answers a request without an API key
 * (type invalid_request_error, code null; openai-python raises
 * AuthenticationError and does not retry), with the WWW-Authenticate
 * challenge a 401 must carry.  Not kvserve_limit_status: a missing key
 * is not a rate limit, and a client must not wait and retry it.
 */
static void
ngx_http_kvserve_limit_keyless_reject(ngx_http_kvserve_limit_ctx_t *lctx,
    ngx_http_kvserve_limit_zone_t *zone)
{
    ngx_int_t                rc;
    kvs_api_err_t            aerr;
    ngx_http_request_t      *r;
    ngx_http_kvserve_ctx_t  *kctx;

    kctx = lctx->kctx;
    r = kctx->r;

    kvs_api_err_set(&aerr, NGX_HTTP_UNAUTHORIZED, NULL, NULL,
                    "You didn't provide a key: this request has no value "
                    "for \"%.*s\", the key of rate limit zone \"%.*s\". "
                    "Send your API key, e.g. in an Authorization header "
                    "using Bearer auth (Authorization: Bearer YOUR_KEY).",
                    (int) zone->key.value.len, zone->key.value.data,
                    (int) zone->name.len, zone->name.data);

    if (ngx_http_kvserve_add_header(r, "www-authenticate", "Bearer")
        != NGX_OK)
    {
        ngx_http_kvserve_finish(kctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    rc = ngx_http_kvserve_api_error(r, &aerr);
    ngx_http_kvserve_finish(kctx, rc);
}


ngx_int_t
ngx_http_kvserve_limit_admit(ngx_http_kvserve_ctx_t *kctx,
    ngx_http_kvserve_limit_resume_pt resume)
{
    uint64_t                            now, delay_ms;
    ngx_str_t                           key;
    ngx_uint_t                          i, n, level, status, kv_refused;
    kvs_limit_conf_t                    c, kc;
    kvs_limit_decision_t                d;
    ngx_pool_cleanup_t                 *cln;
    ngx_http_request_t                 *r;
    ngx_http_kvserve_limit_t           *limits;
    ngx_http_kvserve_limit_ctx_t       *lctx;
    ngx_http_kvserve_limit_resv_t      *rv;
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

    /* the reservation: the prompts and each prompt's output budget for
     * all its choices (the budget its part was submitted with); kv_rate's,
     * all that may be held for one second, settled to what was held when
     * it ends */
    for (i = 0; i < kctx->n_parts; i++) {
        lctx->refundable += kctx->parts[i].reserved;
    }

    lctx->cost = kctx->prompt_tokens + lctx->refundable;
    /* the serving cache's real bytes: a bf16 cache holds half an
     * f32's, an int8 one a quarter and its scales */
    lctx->kv_bpt = ngx_http_kvserve_kv_bpt(kctx->model);
    lctx->kv_cost = kvs_limit_kv_cost(lctx->cost, lctx->kv_bpt);

    now = (uint64_t) ngx_current_msec;
    delay_ms = 0;
    status = 0;
    view.set = 0;

    for (i = 0; i < n; i++) {
        zone = limits[i].shm_zone->data;

        if (ngx_http_complex_value(r, &zone->key, &key) != NGX_OK) {
            goto failed;
        }

        if (key.len > 65535) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "the value of the \"%V\" key is more than 65535 "
                          "bytes, counted as no key: \"%*s...\"",
                          &zone->key.value, (size_t) 64, key.data);
            key.len = 0;
        }

        if (key.len == 0) {

            if (limits[i].empty == NGX_HTTP_KVSERVE_LIMIT_EMPTY_UNLIMITED) {
                continue;
            }

            if (limits[i].empty == NGX_HTTP_KVSERVE_LIMIT_EMPTY_REJECT) {
                ngx_log_error(llcf->limit_log_level, r->connection->log, 0,
                              "rejecting a request without a key%s by "
                              "zone \"%V\" (empty=reject)",
                              llcf->dry_run ? ", dry run" : "",
                              &zone->name);

                if (llcf->dry_run) {
                    status = NGX_HTTP_KVSERVE_LIMIT_REJECTED_DRY_RUN;
                    continue;
                }

                ngx_http_kvserve_limit_settle(lctx, 0, lctx->n, 1, 0, 0);

                lctx->status = NGX_HTTP_KVSERVE_LIMIT_REJECTED;
                ngx_http_kvserve_limit_keyless_reject(lctx, zone);
                return NGX_DONE;
            }

            if (!zone->keyless_logged) {
                zone->keyless_logged = 1;
                ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                              "kvserve_limit_zone \"%V\": requests "
                              "without a key (\"%V\" empty) share one "
                              "bucket (empty=shared); said once per "
                              "worker", &zone->name, &zone->key.value);
            }

            key = ngx_http_kvserve_limit_keyless;
        }

        rv = &lctx->resv[lctx->n];
        rv->limit = &limits[i];
        rv->key = key;
        rv->hash = ngx_crc32_short(key.data, key.len);

        if (ngx_http_kvserve_limit_charge(zone, &limits[i], rv, lctx->cost,
                                          lctx->refundable,
                                          zone->kv_rate ? lctx->kv_cost : 0,
                                          now, &d, &kv_refused)
            != NGX_OK)
        {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "kvserve_limit_zone \"%V\": could not allocate a "
                          "key even after evicting", &zone->name);
            ngx_http_kvserve_limit_settle(lctx, 0, lctx->n, 1, 0, 0);
            goto failed;
        }

        ngx_http_kvserve_limit_conf(&limits[i], zone, &c, &kc);

        if (kv_refused) {
            c = kc;
        }

        v.set = 1;
        v.kv = kv_refused;
        v.asked = kv_refused ? lctx->kv_cost : lctx->cost;
        v.limit = c.burst / KVS_LIMIT_MILLI;
        /* a KV bucket may be past full: a request's debt */
        v.remaining = d.used < c.burst ? (c.burst - d.used) / KVS_LIMIT_MILLI
                                       : 0;
        v.reset_ms = d.reset_ms;
        v.retry_ms = d.retry_ms;
        v.zone = zone->name;
        v.period_ms = zone->period_ms;

        if (d.verdict == KVS_LIMIT_REJECTED || d.verdict == KVS_LIMIT_NEVER) {
            /* in the bucket before this request, whole tokens */
            v.used = (d.used + KVS_LIMIT_MILLI - 1) / KVS_LIMIT_MILLI;

            ngx_log_error(llcf->limit_log_level, r->connection->log, 0,
                          "limiting %s%s, %s, used: %uL, requested: "
                          "%uL, burst: %uL by zone \"%V\"",
                          kv_refused ? "KV cache (KiB x s)" : "tokens",
                          llcf->dry_run ? ", dry run" : "",
                          d.verdict == KVS_LIMIT_NEVER ? "over the burst"
                                                       : "no room",
                          v.used, v.asked, v.limit, &zone->name);

            if (llcf->dry_run) {
                status = NGX_HTTP_KVSERVE_LIMIT_REJECTED_DRY_RUN;
                view = v;
                continue;
            }

            /* the zones that took it give it back */
            ngx_http_kvserve_limit_settle(lctx, 0, lctx->n, 1, 0, 0);

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


/* ---- the tenant --------------------------------------------------------- */

ngx_int_t
ngx_http_kvserve_limit_tenant(ngx_http_kvserve_ctx_t *kctx)
{
    ngx_str_t                           key;
    ngx_uint_t                          i;
    ngx_http_kvserve_limit_t           *limits;
    ngx_http_kvserve_limit_zone_t      *zone;
    ngx_http_kvserve_limit_loc_conf_t  *llcf;

    ngx_str_null(&kctx->tenant);

    llcf = ngx_http_get_module_loc_conf(kctx->r,
                                        ngx_http_kvserve_limit_module);

    if (llcf->limits == NULL) {
        return NGX_OK;
    }

    limits = llcf->limits->elts;

    for (i = 0; i < llcf->limits->nelts; i++) {
        zone = limits[i].shm_zone->data;

        if (ngx_http_complex_value(kctx->r, &zone->key, &key) != NGX_OK) {
            return NGX_ERROR;
        }

        /* as admission: an empty or oversized key is keyless; only
         * empty=shared gives keyless requests a tenant, the one of
         * their shared bucket (the hash of the empty key) */
        if (key.len > 65535) {
            key.len = 0;
        }

        if (key.len == 0
            && limits[i].empty != NGX_HTTP_KVSERVE_LIMIT_EMPTY_SHARED)
        {
            continue;
        }

        /* hashed: the key (an API key) never leaves the worker */
        return ngx_http_kvserve_hash_hex(kctx->r->pool, &key,
                                         &kctx->tenant);
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


static ngx_http_variable_t  ngx_http_kvserve_limit_vars[] = {

    { ngx_string("kvserve_limit_status"), NULL,
      ngx_http_kvserve_limit_status_variable, 0, NGX_HTTP_VAR_NOCACHEABLE,
      0 },

      ngx_http_null_variable
};


ngx_int_t
ngx_http_kvserve_limit_add_variables(ngx_conf_t *cf)
{
    return ngx_http_kvserve_add_vars(cf, ngx_http_kvserve_limit_vars);
}
