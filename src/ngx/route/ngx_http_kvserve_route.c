/*
 * ngx_http_kvserve_route: prefix-aware routing in a gateway nginx (issue
 * 8), the request's side; the module ngx_http_kvserve_route_module (a
 * module of its own in the kvserve .so) and its directives are in
 * ngx_http_kvserve_route_conf.c:
 *
 *   kvserve_route [redis=<host:port>] [mode=index|approximate]
 *                 [timeout=<time>] [reserve_ttl=<time>]
 *                 [upstream=<name>];                       location
 *   kvserve_route_load_weight <number>;            http, server, location
 *   kvserve_prefix_balance;                                upstream
 *   $kvserve_route_reason, $kvserve_route_cached_tokens,
 *   $kvserve_route_host
 *
 * In the access phase a completion POST's body is read, parsed, rendered
 * and tokenized by the completions code (ngx_http_kvserve_prepare,
 * ngx_http_kvserve_tok_start: what an engine host does, with the
 * gateway's kvserve_model for the tokenizer and template only, and no
 * stop at that model's context), its
 * blocks are named for each (epoch, block size) the hosts advertise, the
 * two-round lookup asks Redis who holds the longest prefix (round 1
 * also reads the candidates' host records, so a restarted host's old
 * entries count for nothing from the first request after its new
 * record is written), and
 * kvs_index_choose picks a host (kvs_index_choose_hash when Redis fails).
 * The choice waits in the request's ctx; the handler then declines, so
 * proxy_pass sends the body it finds in r->request_body, and the
 * upstream's balancer (kvserve_prefix_balance, round robin underneath)
 * returns the chosen peer, or round robin's when there is none or it
 * failed.  The response is never touched: SSE streams through with
 * proxy_buffering off.
 *
 * A gateway is a pass-through: a body it cannot parse or tokenize (bad
 * JSON, an unknown model) is not answered here but routed by round robin
 * for the backend to answer; only nginx's own limit (client_max_body_size,
 * its 413) is enforced.  No engine runs on a gateway: the engine process
 * is spawned only where some location has `kvserve`
 * (ngx_http_kvserve_engine_init_process checks kmcf->used).
 *
 * Invariants: see ngx_http_kvserve_route.h.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_route.h"
#include "index/kvs_index_lora.h"


static void ngx_http_kvserve_route_body(ngx_http_request_t *r);
static void ngx_http_kvserve_route_tokenized(ngx_http_kvserve_ctx_t *kctx);
static void ngx_http_kvserve_route_send(ngx_http_kvserve_route_ctx_t *rc);
static void ngx_http_kvserve_route_observe(ngx_http_kvserve_route_ctx_t *rc);


/*
 * kctx->timer, armed while a Redis batch of the request is out: the
 * batch's own timer (cancelable) decides the timeout; this one is not
 * cancelable, so that a worker shutting down gracefully (a reload) waits
 * for the lookup instead of exiting under the request.
 */
static void
ngx_http_kvserve_route_hold(ngx_event_t *ev)
{
    (void) ev;
}


/* ---- the request --------------------------------------------------------- */

static void
ngx_http_kvserve_route_cleanup(void *data)
{
    ngx_http_kvserve_route_ctx_t  *rc = data;

    if (rc->batch != NULL) {
        ngx_http_kvserve_redis_cancel(rc->batch);
        rc->batch = NULL;
    }

    if (rc->counted >= 0 && rc->tgt != NULL
        && (ngx_uint_t) rc->counted < rc->tgt->n_peers
        && rc->tgt->peers[rc->counted].inflight > 0)
    {
        rc->tgt->peers[rc->counted].inflight--;
    }

    rc->counted = -1;

    ngx_http_kvserve_route_resv_release(rc);
}


/*
 * The access phase.  A completion POST is read here (nginx's own 413
 * above client_max_body_size), then routed; anything else goes by round
 * robin.  While the decision is made the handler answers NGX_DONE; when
 * it is made the phases run again and it declines.
 */
ngx_int_t
ngx_http_kvserve_route_handler(ngx_http_request_t *r)
{
    ngx_int_t                           rc, chat;
    ngx_pool_cleanup_t                 *cln;
    ngx_http_kvserve_route_ctx_t       *ctx;
    ngx_http_kvserve_route_loc_conf_t  *rlcf;

    rlcf = ngx_http_get_module_loc_conf(r, ngx_http_kvserve_route_module);

    if (!rlcf->enable || rlcf->tgt == NULL || r != r->main) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_route_module);
    if (ctx != NULL) {
        return ctx->status;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_kvserve_route_ctx_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (ctx == NULL || cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->r = r;
    ctx->rlcf = rlcf;
    ctx->tgt = rlcf->tgt;
    ctx->peer = -1;
    ctx->counted = -1;
    ctx->status = NGX_DECLINED;
    cln->handler = ngx_http_kvserve_route_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_kvserve_route_module);

    chat = ngx_http_kvserve_route_post(r);

    if (r->method != NGX_HTTP_POST || chat == NGX_DECLINED) {
        return NGX_DECLINED;
    }

    ctx->status = NGX_DONE;
    ctx->start_ns = kvs_now_ns();

    /* the engine hosts read it the same way */
    r->request_body_in_single_buf = 1;

    ctx->kctx = ngx_http_kvserve_ctx_new(r, ngx_http_kvserve_route_hold);
    if (ctx->kctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_kvserve_set_kind(ctx->kctx, (ngx_uint_t) chat);

    rc = ngx_http_read_client_request_body(r, ngx_http_kvserve_route_body);
    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    ngx_http_finalize_request(r, NGX_DONE);

    return NGX_DONE;
}


/* Decided: the phases go on (the access handler declines from now). */
static void
ngx_http_kvserve_route_resume(ngx_http_kvserve_route_ctx_t *rc)
{
    ngx_http_request_t  *r;

    r = rc->r;
    rc->status = NGX_DECLINED;

    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}


/* Not routed by the index: round robin, for the backend to answer. */
static void
ngx_http_kvserve_route_pass(ngx_http_kvserve_route_ctx_t *rc,
    const char *why)
{
    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, rc->r->connection->log, 0,
                   "kvserve route: round robin: %s", why);

    rc->decided = 1;
    ngx_http_kvserve_route_resume(rc);
}


static void
ngx_http_kvserve_route_body(ngx_http_request_t *r)
{
    u_char                        *data;
    size_t                         len;
    kvs_api_err_t                  aerr;
    ngx_http_kvserve_ctx_t        *kctx;
    ngx_http_kvserve_route_ctx_t  *rc;

    rc = ngx_http_get_module_ctx(r, ngx_http_kvserve_route_module);
    kctx = rc->kctx;

    if (ngx_http_kvserve_body_bytes(r, &data, &len) != NGX_OK) {
        ngx_http_kvserve_route_pass(rc, "the body could not be read");
        return;
    }

    if (ngx_http_kvserve_parse(kctx, data, len, &aerr) != NGX_OK) {
        ngx_http_kvserve_route_pass(rc, "the body does not parse");
        return;
    }

    if (ngx_http_kvserve_prepare(kctx, &aerr) != NGX_OK) {
        ngx_http_kvserve_route_pass(rc, "the request is refused");
        return;
    }

    /* the backend judges the prompt against its own context: a prompt
     * over this model's is still routed by its prefix (what the gateway
     * keeps of it is bounded by the tokenizer's scratch bound all the
     * same) */
    kctx->tok->max_ids = KVS_TOK_NO_LIMIT;

    ngx_http_kvserve_tok_start(kctx, ngx_http_kvserve_route_tokenized);
}


/* Names of the first prompt's blocks for each group; a BASE:NAME
 * request's under its adapter's namespace, as the hosts name them
 * (kvs_index_lora.h: from the adapter file's epoch, which the gateway's
 * kvserve_lora of the same file read). */
static ngx_int_t
ngx_http_kvserve_route_names(ngx_http_kvserve_route_ctx_t *rc,
    const kvs_ids_t *ids)
{
    size_t                           n;
    char                             adapter[KVS_INDEX_LORA_FIELD_LEN + 1];
    kvs_err_t                        err;
    ngx_uint_t                       g;
    kvs_index_ns_t                   ns;
    kvs_index_name_t                 root;
    ngx_http_kvserve_ctx_t          *kctx;
    ngx_http_kvserve_route_group_t  *gr;

    kctx = rc->kctx;

    ngx_memzero(&ns, sizeof(ns));
    ns.model = (const char *) kctx->model->name.data;
    ns.model_len = kctx->model->name.len;
    ns.adapter = "";
    ns.scope = kctx->cache_scope.len ? (const char *) kctx->cache_scope.data
                                     : "";
    ns.scope_len = kctx->cache_scope.len;

    if (kctx->lora != NULL) {
        kvs_index_lora_field(kctx->lora->epoch, adapter);
        ns.adapter = adapter;
        ns.adapter_len = KVS_INDEX_LORA_FIELD_LEN;
    }

    for (g = 0; g < rc->n_groups; g++) {
        gr = &rc->groups[g];
        ns.epoch = kctx->lora != NULL
                   ? kvs_index_lora_epoch(gr->epoch, kctx->lora->epoch)
                   : gr->epoch;

        if (kvs_index_name_root(&ns, &root, &err) != KVS_OK) {
            return NGX_ERROR;
        }

        n = ids->n / gr->bt;
        if (n > KVS_INDEX_LOOKUP_BLOCKS_MAX) {
            n = KVS_INDEX_LOOKUP_BLOCKS_MAX;
        }

        gr->n_names = 0;

        if (n == 0) {
            continue;
        }

        gr->names = ngx_palloc(rc->r->pool, n * sizeof(kvs_index_name_t));
        if (gr->names == NULL) {
            return NGX_ERROR;
        }

        if (kvs_index_name_chain(&root, ids->ids, n * gr->bt, gr->bt,
                                 gr->names, n, &gr->n_names, &err)
            != KVS_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static void
ngx_http_kvserve_route_tokenized(ngx_http_kvserve_ctx_t *kctx)
{
    size_t                           mem_len;
    void                            *mem;
    kvs_err_t                        err;
    ngx_int_t                        rc_names;
    ngx_uint_t                       i, g;
    ngx_http_kvserve_tok_job_t      *job;
    ngx_http_kvserve_route_ctx_t    *rc;
    ngx_http_kvserve_route_group_t  *gr;

    rc = ngx_http_get_module_ctx(kctx->r, ngx_http_kvserve_route_module);
    job = kctx->tok;

    if (job->rc != NGX_OK) {
        for (i = 0; i < job->n_parts; i++) {
            kvs_ids_free(&job->ids[i]);
        }

        ngx_http_kvserve_route_pass(rc, "the prompt does not tokenize");
        return;
    }

    rc->lookup_ns = kvs_now_ns();

    if (ngx_http_kvserve_route_resv_prompts(rc) != NGX_OK) {
        for (i = 0; i < job->n_parts; i++) {
            kvs_ids_free(&job->ids[i]);
        }

        ngx_http_kvserve_route_pass(rc, "out of memory");
        return;
    }

    kvs_index_route_conf_default(&rc->conf);
    rc->conf.load_weight = rc->rlcf->load_weight;

    if (ngx_http_kvserve_route_cands(rc) != NGX_OK) {
        rc_names = NGX_ERROR;

    } else {
        rc_names = ngx_http_kvserve_route_names(rc, &job->ids[0]);
    }

    for (i = 0; i < job->n_parts; i++) {
        kvs_ids_free(&job->ids[i]);
    }

    if (rc_names != NGX_OK) {
        ngx_http_kvserve_route_pass(rc, "out of memory");
        return;
    }

    if (rc->n_cands == 0) {
        ngx_http_kvserve_route_choose(rc, 0);
        return;
    }

    for (g = 0; g < rc->n_groups; g++) {
        gr = &rc->groups[g];

        if (gr->n_names == 0) {
            continue;
        }

        mem_len = kvs_index_lookup_mem((uint32_t) gr->n_names, gr->n,
                                       &rc->conf);
        mem = ngx_palloc(rc->r->pool, mem_len);

        if (mem == NULL
            || kvs_index_lookup_init(&gr->lk, mem, mem_len,
                                     rc->cands + gr->first, gr->n,
                                     gr->epoch, (uint32_t) gr->n_names,
                                     gr->bt, &rc->conf, &err)
               != KVS_OK)
        {
            ngx_log_error(NGX_LOG_WARN, rc->r->connection->log, 0,
                          "kvserve_route: lookup: %s",
                          mem == NULL ? "out of memory" : err.msg);
            ngx_http_kvserve_route_choose(rc, 1);
            return;
        }

        gr->active = 1;
    }

    rc->round = 1;
    ngx_http_kvserve_route_send(rc);
}


static void
ngx_http_kvserve_route_done(void *data, const kvs_index_reply_t *replies,
    size_t n);


/* The current round's probes of every active group in one batch; the
 * choice when no group has any. */
static void
ngx_http_kvserve_route_send(ngx_http_kvserve_route_ctx_t *rc)
{
    char                            *buf;
    size_t                           probes, fresh, len, *argvlen, *first;
    kvs_err_t                        err;
    ngx_uint_t                       g, i;
    const char                     **argv;
    kvs_index_cmds_t                 cmds;
    ngx_http_kvserve_route_tgt_t    *t;
    ngx_http_kvserve_route_group_t  *gr;
    ngx_http_kvserve_redis_batch_t  *b;

    t = rc->tgt;
    probes = 0;
    rc->n_fresh = 0;

    for (g = 0; g < rc->n_groups; g++) {
        gr = &rc->groups[g];
        gr->n_sent = 0;

        if (gr->active && gr->lk.n_probe > 0) {
            probes += gr->lk.n_probe;
        }
    }

    if (probes == 0) {
        ngx_http_kvserve_route_choose(rc, 0);
        return;
    }

    /* round 1 leads with a GET of every candidate's record (cands come
     * from the table: at most HOSTS_MAX), so that a restart counts from
     * this request on; a prompt with nothing to look up reads none */
    fresh = rc->round == 1 && rc->from_table ? rc->n_cands : 0;

    if (t->rd == NULL) {
        t->rd = ngx_http_kvserve_redis_get(t->cycle, &t->redis);
    }

    /* HGETALL kvs:v1:blk:<32 hex>: 2 arguments, under 64 bytes; GET
     * kvs:v1:host:<id>: 2 arguments, under 96 bytes with a 64-byte id */
    len = probes * 64 + fresh * 96;
    buf = ngx_palloc(rc->r->pool, len);
    argv = ngx_palloc(rc->r->pool, (probes + fresh) * 2 * sizeof(char *));
    argvlen = ngx_palloc(rc->r->pool, (probes + fresh) * 2 * sizeof(size_t));
    first = ngx_palloc(rc->r->pool, (probes + fresh) * sizeof(size_t));

    if (t->rd == NULL || buf == NULL || argv == NULL || argvlen == NULL
        || first == NULL)
    {
        ngx_http_kvserve_route_choose(rc, 1);
        return;
    }

    kvs_index_cmds_init(&cmds, buf, len, argv, argvlen,
                        (probes + fresh) * 2, first, probes + fresh);

    for (i = 0; i < fresh; i++) {
        if (kvs_index_cmd_host_get(&cmds, rc->cands[i].id,
                                   rc->cands[i].id_len, &err)
            != KVS_OK)
        {
            ngx_log_error(NGX_LOG_WARN, rc->r->connection->log, 0,
                          "kvserve_route: lookup: %s", err.msg);
            ngx_http_kvserve_route_choose(rc, 1);
            return;
        }
    }

    rc->n_fresh = (uint32_t) fresh;

    for (g = 0; g < rc->n_groups; g++) {
        gr = &rc->groups[g];

        if (!gr->active || gr->lk.n_probe == 0) {
            continue;
        }

        if (kvs_index_lookup_cmds(&gr->lk, gr->names, &cmds, &err)
            != KVS_OK)
        {
            ngx_log_error(NGX_LOG_WARN, rc->r->connection->log, 0,
                          "kvserve_route: lookup: %s", err.msg);
            ngx_http_kvserve_route_choose(rc, 1);
            return;
        }

        gr->n_sent = gr->lk.n_probe;
    }

    rc->sync_fail = 0;

    b = ngx_http_kvserve_redis_batch(t->rd, &cmds, rc->rlcf->timeout,
                                     ngx_http_kvserve_route_done, rc);

    if (b == NULL || rc->sync_fail) {
        rc->batch = NULL;
        ngx_http_kvserve_route_choose(rc, 1);
        return;
    }

    rc->batch = b;

    /* well after the batch's own timeout, which fails it */
    ngx_add_timer(&rc->kctx->timer, rc->rlcf->timeout + 1000);
}


/* A round's replies (NULL: Redis failed), on the event loop. */
static void
ngx_http_kvserve_route_done(void *data, const kvs_index_reply_t *replies,
    size_t n)
{
    ngx_http_kvserve_route_ctx_t  *rc = data;

    size_t                           off;
    kvs_err_t                        err;
    ngx_uint_t                       g, failed;
    ngx_connection_t                *c;
    ngx_http_kvserve_route_group_t  *gr;

    if (rc->batch == NULL) {
        /* inside ngx_http_kvserve_redis_batch: it returns NULL */
        rc->sync_fail = 1;
        return;
    }

    rc->batch = NULL;
    c = rc->r->connection;
    failed = 0;

    if (rc->kctx->timer.timer_set) {
        ngx_del_timer(&rc->kctx->timer);
    }

    if (replies == NULL) {
        /* round 2 lost: what round 1 proved stands */
        failed = (rc->round == 1);

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, c->log, 0,
                       "kvserve route: round %uD failed", rc->round);

        if (!failed) {
            for (g = 0; g < rc->n_groups; g++) {
                rc->groups[g].lk.n_probe = 0;
            }
        }

    } else {
        off = 0;

        if (rc->round == 1 && rc->n_fresh > 0) {
            if (n >= rc->n_fresh) {
                ngx_http_kvserve_route_fresh(rc, replies);
                off = rc->n_fresh;

            } else {
                off = n;                /* a short batch: nothing known */
            }
        }

        for (g = 0; g < rc->n_groups; g++) {
            gr = &rc->groups[g];

            if (gr->n_sent == 0) {
                continue;
            }

            if (off + gr->n_sent > n) {
                /* the lookup then knows nothing (round 1) or keeps
                 * round 1 (round 2) */
                off = n;
            }

            if (rc->round == 1) {
                (void) kvs_index_lookup_round1(&gr->lk, replies + off,
                                               n - off < gr->n_sent
                                               ? n - off : gr->n_sent,
                                               &err);
            } else {
                (void) kvs_index_lookup_round2(&gr->lk, replies + off,
                                               n - off < gr->n_sent
                                               ? n - off : gr->n_sent,
                                               &err);
                gr->lk.n_probe = 0;
            }

            off += gr->n_sent;
        }
    }

    if (!failed && rc->round == 1) {
        rc->round = 2;
        ngx_http_kvserve_route_send(rc);

    } else {
        ngx_http_kvserve_route_choose(rc, failed);
    }

    ngx_http_run_posted_requests(c);
}


/*
 * The choice, from the lookups (or the hash when failed), into the ctx.
 * With Redis answering, a request long on some host goes only to a host
 * whose record shows room in its long pool, and that room is reserved
 * before the choice is final (ngx_http_kvserve_route_resv.c); a lost
 * reservation comes back here with that host out.
 */
void
ngx_http_kvserve_route_choose(ngx_http_kvserve_route_ctx_t *rc,
    ngx_uint_t failed)
{
    uint32_t                        *blocks, *tokens, *host, *disk;
    ngx_uint_t                       g, i, named;
    kvs_index_choice_t               ch;
    ngx_http_kvserve_route_group_t  *gr, *first;

    named = 0;
    first = NULL;

    for (g = 0; g < rc->n_groups; g++) {
        if (rc->groups[g].n_names > 0) {
            named = 1;

            if (first == NULL) {
                first = &rc->groups[g];
            }
        }
    }

    blocks = NULL;
    tokens = NULL;
    host = NULL;
    disk = NULL;

    if (rc->n_cands > 0) {
        blocks = ngx_pcalloc(rc->r->pool, rc->n_cands * sizeof(uint32_t));
        tokens = ngx_pcalloc(rc->r->pool, rc->n_cands * sizeof(uint32_t));
        host = ngx_pcalloc(rc->r->pool, rc->n_cands * sizeof(uint32_t));
        disk = ngx_pcalloc(rc->r->pool, rc->n_cands * sizeof(uint32_t));

        if (blocks == NULL || tokens == NULL || host == NULL
            || disk == NULL)
        {
            ngx_http_kvserve_route_pass(rc, "out of memory");
            return;
        }
    }

    if (failed && named) {
        kvs_index_choose_hash(rc->cands, rc->n_cands, first->names,
                              first->n_names, &rc->conf, &ch);

    } else {
        for (g = 0; g < rc->n_groups; g++) {
            gr = &rc->groups[g];

            if (!gr->active) {
                continue;
            }

            /* blocks: all a host holds; tokens, host and disk: its
             * pool's, its host tier's and its disk tier's share, in
             * tokens */
            kvs_index_lookup_result_tiers(&gr->lk, blocks + gr->first,
                                          host + gr->first,
                                          disk + gr->first);

            for (i = gr->first; i < gr->first + gr->n; i++) {
                tokens[i] = blocks[i] * gr->bt;
                blocks[i] += host[i] + disk[i];
                host[i] *= gr->bt;
                disk[i] *= gr->bt;
            }
        }

        /* Redis answers: the long pools' room counts (Redis down: as
         * before pools, unreserved) */
        if (!failed && ngx_http_kvserve_route_resv_filter(rc) != NGX_OK) {
            ngx_http_kvserve_route_pass(rc, "out of memory");
            return;
        }

        /* hosts of several block sizes compare in tokens; a lower
         * tier's block is worth its host's weight for that tier */
        kvs_index_choose_tiers(rc->cands, rc->n_cands, tokens, host, disk,
                               1, !named, &rc->conf, &ch);

        if (failed) {
            ch.reason = KVS_INDEX_ROUTE_NO_INDEX;
        }
    }

    rc->choice = ch;
    rc->blocks = blocks;
    rc->named = named;

    if (rc->long_cut
        && (ch.host < 0 || (uint32_t) ch.host >= rc->n_cands))
    {
        ngx_http_kvserve_route_resv_full(rc);
        return;
    }

    if (!failed && rc->need != NULL && ch.host >= 0
        && (uint32_t) ch.host < rc->n_cands && rc->need[ch.host].seqs > 0)
    {
        ngx_http_kvserve_route_resv_take(rc);
        return;
    }

    ngx_http_kvserve_route_commit(rc);
}


/* The choice made (and reserved when it had to be): into the ctx;
 * mode=approximate records the names the chosen peer now holds.  The
 * phases go on. */
void
ngx_http_kvserve_route_commit(ngx_http_kvserve_route_ctx_t *rc)
{
    uint32_t                        *blocks;
    ngx_int_t                        peer;
    ngx_uint_t                       g, named, failed;
    kvs_index_choice_t               ch;
    const kvs_index_cand_t          *h;
    ngx_http_kvserve_route_tgt_t    *t;
    ngx_http_kvserve_route_group_t  *gr;

    t = rc->tgt;
    ch = rc->choice;
    blocks = rc->blocks;
    named = rc->named;
    failed = ch.reason == KVS_INDEX_ROUTE_NO_INDEX;

    rc->decided = 1;
    rc->has_reason = 1;
    rc->reason = ch.reason;
    rc->cached_tokens = ch.cached_tokens;

    if (ch.host >= 0 && (uint32_t) ch.host < rc->n_cands) {
        h = &rc->cands[ch.host];
        peer = rc->cand_peer[ch.host];

        rc->host.data = (u_char *) h->id;
        rc->host.len = h->id_len;
        rc->peer = peer;

        if (t->mode == NGX_HTTP_KVSERVE_ROUTE_INDEX) {
            ngx_http_kvserve_route_sent(t, h->id, h->id_len);
        }

        if (peer >= 0 && (ngx_uint_t) peer < t->n_peers) {
            t->peers[peer].inflight++;
            rc->counted = peer;
        }

        if (t->mode == NGX_HTTP_KVSERVE_ROUTE_APPROXIMATE && named
            && peer >= 0 && !failed)
        {
            for (g = 0; g < rc->n_groups; g++) {
                gr = &rc->groups[g];

                if (gr->n_names > 0) {
                    ngx_http_kvserve_route_record(rc, gr->names,
                        gr->active ? blocks[ch.host] : 0, gr->n_names,
                        peer);
                }
            }
        }
    }

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, rc->r->connection->log, 0,
                   "kvserve route: %s, host \"%V\", peer %i, cached %uD, "
                   "%uL ns", kvs_index_reason_name(ch.reason), &rc->host,
                   rc->peer, ch.cached_tokens,
                   kvs_now_ns() - rc->start_ns);

    ngx_http_kvserve_route_observe(rc);

    ngx_http_kvserve_route_resume(rc);
}


/* The route hop, tokenized to chosen, into the gateway's shared
 * histogram (kvserve:request_route_time_seconds) of the request's
 * model. */
static void
ngx_http_kvserve_route_observe(ngx_http_kvserve_route_ctx_t *rc)
{
    kvs_metrics_t  *m;

    m = ngx_http_kvserve_metrics(rc->r);

    if (m != NULL && rc->lookup_ns != 0 && rc->kctx != NULL
        && rc->kctx->model != NULL)
    {
        kvs_metrics_observe(m, (uint32_t) rc->kctx->model_index,
                            KVS_HIST_ROUTE, kvs_now_ns() - rc->lookup_ns, 1);
    }
}


/* ---- variables ----------------------------------------------------------- */

#define NGX_HTTP_KVSERVE_ROUTE_VAR_REASON  0
#define NGX_HTTP_KVSERVE_ROUTE_VAR_CACHED  1
#define NGX_HTTP_KVSERVE_ROUTE_VAR_HOST    2


static ngx_int_t
ngx_http_kvserve_route_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                        *p;
    const char                    *s;
    ngx_http_kvserve_route_ctx_t  *rc;

    rc = ngx_http_get_module_ctx(r->main, ngx_http_kvserve_route_module);

    if (rc == NULL || !rc->has_reason) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    switch (data) {

    case NGX_HTTP_KVSERVE_ROUTE_VAR_REASON:
        s = kvs_index_reason_name(rc->reason);
        v->data = (u_char *) s;
        v->len = ngx_strlen(s);
        break;

    case NGX_HTTP_KVSERVE_ROUTE_VAR_CACHED:
        p = ngx_pnalloc(r->pool, NGX_INT32_LEN);
        if (p == NULL) {
            return NGX_ERROR;
        }

        v->data = p;
        v->len = ngx_sprintf(p, "%uD", rc->cached_tokens) - p;
        break;

    default: /* NGX_HTTP_KVSERVE_ROUTE_VAR_HOST */
        if (rc->host.len == 0) {
            v->valid = 0;
            v->not_found = 1;
            return NGX_OK;
        }

        v->data = rc->host.data;
        v->len = rc->host.len;
        break;
    }

    return NGX_OK;
}


static ngx_http_variable_t  ngx_http_kvserve_route_vars[] = {

    { ngx_string("kvserve_route_reason"), NULL,
      ngx_http_kvserve_route_variable, NGX_HTTP_KVSERVE_ROUTE_VAR_REASON,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_route_cached_tokens"), NULL,
      ngx_http_kvserve_route_variable, NGX_HTTP_KVSERVE_ROUTE_VAR_CACHED,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("kvserve_route_host"), NULL,
      ngx_http_kvserve_route_variable, NGX_HTTP_KVSERVE_ROUTE_VAR_HOST,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


ngx_int_t
ngx_http_kvserve_route_add_variables(ngx_conf_t *cf)
{
    return ngx_http_kvserve_add_vars(cf, ngx_http_kvserve_route_vars);
}
