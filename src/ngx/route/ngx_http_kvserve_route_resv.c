/*
 * ngx_http_kvserve_route_resv: the gateway's long-pool reservations
 * (issue 24 point 3; docs/pools.md "Across hosts", docs/prefix-index.md
 * "Long-pool reservations"): which candidates a long request may go to,
 * the reservation script sent to Redis (kvs_index_resv.h), the 503 when
 * no host has room, and the release when the request ends.
 *
 * Invariants:
 *  - a request holds at most one reservation (resv_id set), released
 *    by ZREM once, from the request pool's cleanup; a reservation the
 *    gateway forgets (a crash) expires by its score and its key's TTL;
 *  - the script is sent by EVALSHA once its SHA-1 is known to this
 *    worker (SCRIPT LOAD leads the first batch), by EVAL after a
 *    NOSCRIPT (a restarted or flushed Redis), never twice per request;
 *  - Redis failing (down, a timeout, an error) sends the request as
 *    before pools: by the choice already made, unreserved;
 *  - a host whose reservation was lost is out of this request's
 *    choice, so choosing again ends: each loss removes a candidate.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_route.h"
#include "ngx/kvserve/ngx_http_kvserve_request.h"


static void ngx_http_kvserve_route_resv_done(void *data,
    const kvs_index_reply_t *replies, size_t n);
static void ngx_http_kvserve_route_resv_dropped(void *data,
    const kvs_index_reply_t *replies, size_t n);
static void ngx_http_kvserve_route_resv_count(
    ngx_http_kvserve_route_ctx_t *rc, ngx_uint_t won, ngx_uint_t lost,
    uint64_t expired);


/* this worker's reservations' names: "<gateway>:<serial>" */
static uint64_t  ngx_http_kvserve_route_resv_gw;
static uint64_t  ngx_http_kvserve_route_resv_serial;


ngx_int_t
ngx_http_kvserve_route_resv_prompts(ngx_http_kvserve_route_ctx_t *rc)
{
    ngx_uint_t                   i;
    ngx_http_kvserve_ctx_t      *kctx;
    ngx_http_kvserve_tok_job_t  *job;

    kctx = rc->kctx;
    job = kctx->tok;

    rc->n_prompts = (uint32_t) job->n_parts;
    rc->prompt_len = ngx_palloc(rc->r->pool,
                                (job->n_parts + 1) * sizeof(uint32_t));
    if (rc->prompt_len == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < job->n_parts; i++) {
        rc->prompt_len[i] = job->ids[i].n > UINT32_MAX
                            ? UINT32_MAX : (uint32_t) job->ids[i].n;
    }

    /* no max_tokens: UINT64_MAX, the rest of the context, per prompt in
     * resv_filter (as the host's budget does) */
    rc->max_tokens = kctx->req.max_tokens >= 0
                     ? (uint64_t) kctx->req.max_tokens : UINT64_MAX;
    rc->n_choices = kctx->req.n > 0 ? kctx->req.n : 1;

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_route_resv_filter(ngx_http_kvserve_route_ctx_t *rc)
{
    uint32_t                        i, k, c, n_ctx;
    uint64_t                        max_tokens;
    ngx_uint_t                      j;
    kvs_index_host_t               *rec;
    ngx_http_kvserve_route_tgt_t   *t;
    ngx_http_kvserve_route_host_t  *h;

    t = rc->tgt;
    rc->long_cut = 0;

    if (!rc->from_table || t->mode != NGX_HTTP_KVSERVE_ROUTE_INDEX
        || rc->n_cands == 0 || rc->prompt_len == NULL)
    {
        return NGX_OK;
    }

    if (rc->need == NULL) {
        rc->need = ngx_pcalloc(rc->r->pool,
                               rc->n_cands * sizeof(kvs_index_resv_need_t));
        rc->lost = ngx_pcalloc(rc->r->pool, rc->n_cands);
        if (rc->need == NULL || rc->lost == NULL) {
            return NGX_ERROR;
        }
    }

    n_ctx = rc->kctx->model != NULL && rc->kctx->model->model != NULL
            ? rc->kctx->model->model->hp.n_ctx_train : 0;

    for (i = 0; i < rc->n_cands; i++) {
        ngx_memzero(&rc->need[i], sizeof(kvs_index_resv_need_t));

        /* the host's latest record (round 1 folded it into the table) */
        rec = NULL;

        for (j = 0; j < t->n_hosts; j++) {
            h = &t->hosts[j];

            if (ngx_strlen(h->h.rec.id) == rc->cands[i].id_len
                && ngx_strncmp(h->h.rec.id, rc->cands[i].id,
                               rc->cands[i].id_len) == 0)
            {
                rec = &h->h.rec;
                break;
            }
        }

        if (rec == NULL || rec->long_min == 0) {
            continue;
        }

        for (k = 0; k < rc->n_prompts; k++) {
            max_tokens = rc->max_tokens;

            if (max_tokens == UINT64_MAX) {
                max_tokens = n_ctx > rc->prompt_len[k]
                             ? n_ctx - rc->prompt_len[k] : 0;
            }

            for (c = 0; c < rc->n_choices; c++) {
                (void) kvs_index_resv_add(rec, rc->prompt_len[k],
                                          max_tokens, &rc->need[i]);
            }
        }

        if (rc->need[i].seqs == 0) {
            continue;                   /* short there */
        }

        if (rc->lost[i] || !kvs_index_resv_fits(rec, &rc->need[i])) {
            if (rc->cands[i].up) {
                rc->long_cut = 1;
            }

            rc->cands[i].up = 0;
        }
    }

    return NGX_OK;
}


void
ngx_http_kvserve_route_resv_take(ngx_http_kvserve_route_ctx_t *rc)
{
    char                            *buf;
    size_t                           len, argvlen[16], first[2];
    kvs_err_t                        err;
    const char                      *argv[16], *sha;
    kvs_index_cmds_t                 cmds;
    const kvs_index_cand_t          *h;
    kvs_index_resv_need_t           *need;
    ngx_http_kvserve_route_tgt_t    *t;
    ngx_http_kvserve_redis_batch_t  *b;

    t = rc->tgt;
    h = &rc->cands[rc->choice.host];
    need = &rc->need[rc->choice.host];

    if (ngx_http_kvserve_route_resv_gw == 0) {
        ngx_http_kvserve_route_resv_gw = ((uint64_t) ngx_random() << 32)
                                         ^ ((uint64_t) ngx_pid << 8)
                                         ^ (uint64_t) ngx_time();
    }

    if (kvs_index_resv_member(need, ngx_http_kvserve_route_resv_gw,
                              ++ngx_http_kvserve_route_resv_serial,
                              rc->member, &rc->member_len, &err)
        != KVS_OK)
    {
        goto unreserved;
    }

    if (t->rd == NULL) {
        t->rd = ngx_http_kvserve_redis_get(t->cycle, &t->redis);
    }

    len = 2 * ngx_strlen(kvs_index_resv_script) + 512;
    buf = ngx_palloc(rc->r->pool, len);
    if (buf == NULL || t->rd == NULL) {
        goto unreserved;
    }

    kvs_index_cmds_init(&cmds, buf, len, argv, argvlen, 16, first, 2);

    sha = t->resv_sha_ok && !rc->resv_eval ? t->resv_sha : NULL;

    if ((sha == NULL && !rc->resv_eval
         && kvs_index_cmd_resv_load(&cmds, &err) != KVS_OK)
        || kvs_index_cmd_resv_take(&cmds, sha, h->id, h->id_len, rc->member,
                                   rc->member_len, need->blocks, need->seqs,
                                   rc->rlcf->reserve_ttl, &err)
           != KVS_OK)
    {
        ngx_log_error(NGX_LOG_WARN, rc->r->connection->log, 0,
                      "kvserve_route: reservation: %s", err.msg);
        goto unreserved;
    }

    rc->sync_fail = 0;

    b = ngx_http_kvserve_redis_batch(t->rd, &cmds, rc->rlcf->timeout,
                                     ngx_http_kvserve_route_resv_done, rc);

    if (b == NULL || rc->sync_fail) {
        rc->batch = NULL;
        goto unreserved;
    }

    rc->batch = b;
    ngx_add_timer(&rc->kctx->timer, rc->rlcf->timeout + 1000);

    return;

unreserved:

    /* as before pools: the choice stands, unreserved */
    ngx_http_kvserve_route_commit(rc);
}


static void
ngx_http_kvserve_route_resv_done(void *data,
    const kvs_index_reply_t *replies, size_t n)
{
    ngx_http_kvserve_route_ctx_t  *rc = data;

    int                            rc_parse;
    kvs_err_t                      err;
    ngx_connection_t              *c;
    const kvs_index_reply_t       *r;
    kvs_index_resv_result_t        res;
    ngx_http_kvserve_route_tgt_t  *t;

    if (rc->batch == NULL) {
        rc->sync_fail = 1;              /* inside _batch: it returns NULL */
        return;
    }

    rc->batch = NULL;
    c = rc->r->connection;
    t = rc->tgt;

    if (rc->kctx->timer.timer_set) {
        ngx_del_timer(&rc->kctx->timer);
    }

    if (replies == NULL || n == 0) {
        ngx_http_kvserve_route_commit(rc);
        goto done;
    }

    if (n == 2) {
        /* SCRIPT LOAD led: its SHA-1 serves this worker from now on */
        if (kvs_index_resv_sha_parse(&replies[0], t->resv_sha, &err)
            == KVS_OK)
        {
            t->resv_sha_ok = 1;
        }
    }

    r = &replies[n - 1];
    rc_parse = kvs_index_resv_parse(r, &res, &err);

    if (rc_parse == KVS_ENOTFOUND && !rc->resv_eval) {
        /* NOSCRIPT: Redis restarted or flushed; EVAL loads it again */
        t->resv_sha_ok = 0;
        rc->resv_eval = 1;
        ngx_http_kvserve_route_resv_take(rc);
        goto done;
    }

    if (rc_parse != KVS_OK) {
        ngx_log_error(NGX_LOG_WARN, c->log, 0,
                      "kvserve_route: reservation: %s", err.msg);
        ngx_http_kvserve_route_commit(rc);
        goto done;
    }

    switch (res.outcome) {

    case KVS_INDEX_RESV_WON:
        ngx_memcpy(rc->resv_id, rc->cands[rc->choice.host].id,
                   rc->cands[rc->choice.host].id_len);
        rc->resv_id_len = rc->cands[rc->choice.host].id_len;
        rc->resv_id[rc->resv_id_len] = '\0';
        ngx_http_kvserve_route_resv_count(rc, 1, 0, res.expired);
        ngx_http_kvserve_route_commit(rc);
        break;

    case KVS_INDEX_RESV_LOST:
    case KVS_INDEX_RESV_NO_RECORD:
        /* another gateway took the room, or the host is gone: choose
         * again without it */
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, c->log, 0,
                       "kvserve route: reservation lost on \"%s\" (%d)",
                       rc->cands[rc->choice.host].id, (int) res.outcome);
        ngx_http_kvserve_route_resv_count(rc, 0, 1, res.expired);
        rc->lost[rc->choice.host] = 1;
        ngx_http_kvserve_route_choose(rc, 0);
        break;

    default: /* KVS_INDEX_RESV_NO_POOL: its record has none now */
        ngx_http_kvserve_route_resv_count(rc, 0, 0, res.expired);
        ngx_http_kvserve_route_commit(rc);
        break;
    }

done:

    ngx_http_run_posted_requests(c);
}


void
ngx_http_kvserve_route_resv_full(ngx_http_kvserve_route_ctx_t *rc)
{
    u_char              *p, *v;
    ngx_int_t            status;
    ngx_uint_t           secs;
    ngx_http_request_t  *r;

    r = rc->r;
    rc->decided = 1;
    rc->status = NGX_DONE;

    /* a reservation nobody uses is gone by its TTL at the latest */
    secs = (rc->rlcf->reserve_ttl + 999) / 1000;
    v = ngx_pnalloc(r->pool, NGX_INT_T_LEN + 1);

    if (v == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    p = ngx_sprintf(v, "%ui", secs > 0 ? secs : 1);
    *p = '\0';

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "kvserve_route: no host has room in its long KV pool "
                  "for this request");

    if (ngx_http_kvserve_add_header(r, "Retry-After", (const char *) v)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    status = ngx_http_kvserve_error_json(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                 "No host's long-request KV pool has room for this "
                 "request now; retry later.", NULL, "kv_pool_full");

    ngx_http_finalize_request(r, status);
}


void
ngx_http_kvserve_route_resv_release(ngx_http_kvserve_route_ctx_t *rc)
{
    char                           buf[256];
    size_t                         argvlen[4], first[1];
    kvs_err_t                      err;
    const char                    *argv[4];
    kvs_index_cmds_t               cmds;
    ngx_http_kvserve_route_tgt_t  *t;

    t = rc->tgt;

    if (rc->resv_id_len == 0 || t == NULL || t->rd == NULL) {
        return;
    }

    kvs_index_cmds_init(&cmds, buf, sizeof(buf), argv, argvlen, 4, first,
                        1);

    if (kvs_index_cmd_resv_drop(&cmds, rc->resv_id, rc->resv_id_len,
                                rc->member, rc->member_len, &err)
        == KVS_OK)
    {
        /* hiredis copies the command; the reply only logs a failure */
        (void) ngx_http_kvserve_redis_batch(t->rd, &cmds, rc->rlcf->timeout,
                                            ngx_http_kvserve_route_resv_dropped,
                                            t);
    }

    rc->resv_id_len = 0;
}


static void
ngx_http_kvserve_route_resv_dropped(void *data,
    const kvs_index_reply_t *replies, size_t n)
{
    kvs_err_t  err;

    if (replies == NULL || n != 1
        || kvs_index_reply_written(&replies[0], &err) != KVS_OK)
    {
        /* the reservation lives until its expiry */
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "kvserve route: a reservation not released");
    }
}


/* kvserve:route_pool_reservations_{won,lost,expired}_total of the
 * request's model. */
static void
ngx_http_kvserve_route_resv_count(ngx_http_kvserve_route_ctx_t *rc,
    ngx_uint_t won, ngx_uint_t lost, uint64_t expired)
{
    kvs_metrics_t  *m;

    m = ngx_http_kvserve_metrics(rc->r);

    if (m != NULL && rc->kctx != NULL && rc->kctx->model != NULL) {
        kvs_metrics_route_pool(m, (uint32_t) rc->kctx->model_index, won,
                               lost, expired);
    }
}
