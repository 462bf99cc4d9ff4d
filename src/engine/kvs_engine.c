/*
 * kvs_engine: the engine's life and its step loop, on the engine thread:
 * new requests into the scheduler, cancellations out of it, one forward
 * step, a token sampled for every sequence whose logits came back, and
 * the end of sequences (see kvs_engine.h; the shared state and its
 * locking rules are in kvs_engine_impl.h).  What each token does to its
 * sequence, and its end, are kvs_engine_seq.c.
 *
 * Sampling happens on the host from the step's logits, or on the device
 * (the backend's forward_sample, only token ids come back) when every
 * row of the step can be: kvs_sampler_device_ok() and no followers
 * waiting to fork from the row.  The coins are drawn here, from each
 * request's RNG, exactly when kvs_sample() would draw them, so a seed
 * gives the same tokens whichever side samples.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "kv/kvs_kv_pool.h"
#include "kvs_engine_impl.h"
#include "base/kvs_clock.h"


static void kvs_engine_take_inbox(kvs_engine_t *e);
static void kvs_engine_take_cancels(kvs_engine_t *e);
static void kvs_engine_expire(kvs_engine_t *e);
static int kvs_engine_dev_plan(kvs_engine_t *e, const kvs_sched_plan_t *plan);
static void kvs_engine_backend_line(kvs_engine_t *e);
static void kvs_engine_publish_tenants(kvs_engine_t *e);
static int kvs_engine_cache_new(kvs_engine_t *e, kvs_err_t *err);
static void kvs_engine_cache_ns(kvs_engine_t *e, kvs_engine_seq_t *h);
static void kvs_engine_pin(kvs_engine_t *e, kvs_engine_seq_t *h);
static void *kvs_engine_main(void *arg);


/* ms between the idle engine's looks at its queue's deadlines */
#define KVS_ENGINE_QUEUE_TICK  50
#define KVS_ENGINE_COPY_TICK   200    /* us: the tiers' copies' polls */


const uint32_t  kvs_engine_iter_bounds[KVS_ENGINE_ITER_BOUNDS] = {
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384
};



int
kvs_engine_new(kvs_engine_t **out, const kvs_engine_conf_t *conf,
    kvs_err_t *err)
{
    int                 rc, gram;
    kvs_engine_t       *e;
    kvs_sched_conf_t    sc;
    kvs_backend_conf_t  bc;

    *out = NULL;
    gram = 0;

    if (conf->model == NULL || conf->vocab == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "engine: no model or vocab");
    }

    if (conf->vocab->n_tokens != conf->model->hp.n_vocab) {
        return kvs_err_set(err, KVS_EINVAL, "engine: the vocabulary has "
                           "%" PRIu32 " tokens, the model %" PRIu32,
                           (uint32_t) conf->vocab->n_tokens,
                           conf->model->hp.n_vocab);
    }

    e = calloc(1, sizeof(kvs_engine_t));
    if (e == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory");
    }

    e->conf = *conf;
    e->efd = -1;

    if (e->conf.block_tokens == 0) {
        e->conf.block_tokens = KVS_KV_BLOCK_TOKENS;
    }

    if (e->conf.max_batch_tokens == 0) {
        e->conf.max_batch_tokens = 2048;
    }

    if (e->conf.max_running == 0) {
        e->conf.max_running = 256;
    }

    if (e->conf.n_ctx == 0) {
        e->conf.n_ctx = conf->model->hp.n_ctx_train;
    }

    memset(&sc, 0, sizeof(sc));
    sc.max_batch_tokens = e->conf.max_batch_tokens;
    sc.max_running = e->conf.max_running;
    sc.n_ctx = e->conf.n_ctx;
    sc.chunked_prefill = !e->conf.no_chunked_prefill;
    sc.fair_w_prefill = e->conf.fair_w_prefill;
    sc.fair_w_decode = e->conf.fair_w_decode;
    sc.fair_kv_max_milli = e->conf.fair_kv_max_milli;
    sc.no_fair = e->conf.no_fair;
    sc.req_kv_max_milli = e->conf.req_kv_max_milli;
    sc.pool_min_tokens = e->conf.pool_min_tokens;
    sc.pool_share_milli = e->conf.pool_share_milli;
    sc.pool_max_prefill = e->conf.pool_max_prefill;
    sc.pool_chunk = e->conf.pool_chunk;
    sc.queue_timeout_ms = e->conf.queue_timeout_ms;

    /* every layer windowed: what leaves the window is given back */
    sc.window = e->conf.keep_window_blocks
                ? 0 : kvs_hparams_swa_all(&conf->model->hp);

    bc.n_blocks = e->conf.n_blocks;
    bc.block_tokens = e->conf.block_tokens;
    bc.threads = e->conf.threads;
    bc.kind = e->conf.backend;
    bc.device = e->conf.device;
    bc.kv_fraction = e->conf.kv_fraction;
    bc.kv_dtype_set = e->conf.kv_dtype_set;
    bc.kv_dtype = e->conf.kv_dtype;

    /* the pool's limits are checked before the backend allocates for
     * them: the pool refuses, with its own message, what it would refuse
     * later (n_blocks 0 is for a CUDA backend to choose) */
    if (e->conf.block_tokens > KVS_KV_MAX_BLOCK_TOKENS
        || e->conf.n_blocks > KVS_KV_MAX_BLOCKS
        || (e->conf.n_blocks == 0 && e->conf.backend == KVS_BACKEND_CPU))
    {
        rc = kvs_kv_pool_new(&e->pool, e->conf.n_blocks,
                             e->conf.block_tokens, err);
        kvs_kv_pool_free(e->pool);
        e->pool = NULL;
        rc = rc != KVS_OK ? rc : kvs_err_set(err, KVS_EINVAL, "engine: "
                                             "the KV pool's limits");
        goto failed;
    }

    /* the backend first: a CUDA one may size the pool itself */
    rc = kvs_backend_new(&e->be, conf->model, &bc, &e->be_info, err);
    if (rc != KVS_OK) {
        e->be = NULL;
        goto failed;
    }

    if (e->conf.backend_hook != NULL) {
        e->conf.backend_hook(e->be, e->conf.backend_hook_arg);
    }

    e->conf.n_blocks = e->be->n_blocks;
    kvs_engine_backend_line(e);

    rc = kvs_kv_pool_new(&e->pool, e->conf.n_blocks, e->conf.block_tokens,
                         err);
    if (rc != KVS_OK) {
        e->pool = NULL;
        goto failed;
    }

    rc = kvs_sched_init(&e->sched, &sc, e->pool, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    rc = kvs_engine_cache_new(e, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    rc = kvs_engine_tier_new(e, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    rc = kvs_engine_lora_new(e, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    rc = kvs_engine_gram_new(e, err);
    if (rc != KVS_OK) {
        goto failed;
    }
    gram = 1;

    e->fork_logits = malloc(2 * (size_t) e->be->n_vocab * sizeof(float));
    if (e->fork_logits == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "engine: out of memory");
        goto failed;
    }

    e->row = e->fork_logits + e->be->n_vocab;

    e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->efd == -1) {
        rc = kvs_err_set(err, KVS_EIO, "eventfd: %s", strerror(errno));
        goto failed;
    }

    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);

    e->stats.kv_blocks = e->conf.n_blocks;
    e->stats.block_tokens = e->conf.block_tokens;
    e->stats.epoch = e->epoch;
    kvs_engine_tier_publish(e);

    /* the long pool's room before the first step: the host record shows
     * it from the start (kvs_engine_publish keeps it after) */
    e->stats.pools = (uint32_t) e->sched.pools_on;
    e->stats.pool_min_tokens = e->sched.pools_on
                               ? e->sched.conf.pool_min_tokens : 0;
    kvs_sched_long_room(&e->sched, &e->stats.long_room,
                        &e->stats.long_slots);
    e->shown = e->stats;

    *out = e;

    return KVS_OK;

failed:

    if (e->efd != -1) {
        close(e->efd);
    }

    if (gram) {
        kvs_engine_gram_free(e);
    }

    free(e->fork_logits);
    kvs_engine_tier_free(e);
    kvs_engine_lora_free(e);
    kvs_backend_free(e->be);
    kvs_sched_free(&e->sched);
    kvs_radix_free(e->radix);
    kvs_kv_pool_free(e->pool);
    free(e);

    return rc;
}


int
kvs_engine_start(kvs_engine_t *e, kvs_err_t *err)
{
    int  rc;

    rc = pthread_create(&e->thread, NULL, kvs_engine_main, e);
    if (rc != 0) {
        return kvs_err_set(err, KVS_ENOMEM, "engine thread: %s",
                           strerror(rc));
    }

    e->started = 1;

    return KVS_OK;
}


void
kvs_engine_stop(kvs_engine_t *e)
{
    if (!e->started) {
        return;
    }

    pthread_mutex_lock(&e->lock);
    e->quit = 1;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);

    e->started = 0;
    e->quit = 0;
}


void
kvs_engine_free(kvs_engine_t *e)
{
    kvs_seq_t  *seq;

    if (e == NULL) {
        return;
    }

    kvs_engine_stop(e);

    /* no thread now: end whatever is left, then drop the consumer's
     * holds that were never closed */

    kvs_engine_take_inbox(e);
    kvs_engine_lora_end_all(e);
    kvs_engine_tier_end_all(e);

    while ((seq = e->sched.running.head) != NULL
           || (seq = e->sched.waiting.head) != NULL)
    {
        kvs_engine_end(e, (kvs_engine_seq_t *) seq, KVS_FINISH_CANCELLED,
                       NULL, 0);
    }

    kvs_engine_take_cancels(e);

    kvs_sched_free(&e->sched);
    kvs_engine_tier_free(e);
    kvs_radix_free(e->radix);
    kvs_engine_index_done(e);
    kvs_engine_lora_free(e);
    kvs_backend_free(e->be);
    kvs_kv_pool_free(e->pool);
    kvs_buf_free(&e->piece);
    kvs_buf_free(&e->text);
    free(e->fork_logits);
    free(e->logits);
    free(e->dev_params);
    free(e->dev_ids);
    kvs_engine_gram_free(e);
    close(e->efd);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->wake);
    free(e);
}


int
kvs_engine_step_run(kvs_engine_t *e)
{
    int                 rc, dev;
    uint32_t            i, k, used, n_tok;
    uint64_t            t0, dt, now_ns;
    kvs_err_t           err;
    kvs_seq_t          *seq, *next;
    kvs_sched_plan_t    plan;

    kvs_err_clear(&err);

    /* new requests and cancellations first, so a cancelled sequence's
     * blocks serve this very step */

    /* the time first: an arrival's place in its queue is stamped, and
     * what the running sequences held since the last step is counted
     * before cancels and the plan change their blocks */
    now_ns = kvs_now_ns();
    e->sched.now = now_ns / 1000000;
    kvs_engine_kv_count(e, now_ns);

    kvs_engine_take_inbox(e);
    kvs_engine_take_cancels(e);
    kvs_engine_lora_admit(e);
    kvs_engine_tier_admit(e);

    if (e->radix != NULL) {
        kvs_radix_expire(e->radix, e->sched.now);
    }

    kvs_engine_expire(e);
    kvs_sched_plan(&e->sched, &plan);
    kvs_engine_kv_admitted(e, now_ns);

    if (plan.batch.n == 0) {
        return 0;
    }

    t0 = kvs_now_ns();

    /* sampled on the device: only token ids come back, no logits */
    dev = kvs_engine_dev_plan(e, &plan);
    rc = KVS_OK;

    /* logits rows grow with the largest step seen, not with max_running
     * (256 rows of a 128K vocabulary would be 128 MiB) */
    if (!dev) {
        rc = kvs_grow((void **) &e->logits, &e->logits_cap,
                      (size_t) plan.n_logits * e->be->n_vocab,
                      sizeof(float));
        if (rc != KVS_OK) {
            kvs_err_set(&err, rc, "engine: out of memory for logits");
        }
    }

    /* shared blocks this step writes into were swapped for new ones by
     * the plan: give them their contents first */
    for (i = 0; rc == KVS_OK && i < plan.n_cow; i++) {
        rc = kvs_backend_copy_block(e->be, plan.cow_dst[i],
                                    plan.cow_src[i], &err);
        e->stats.kv_copies++;
    }

    if (rc == KVS_OK) {
        rc = dev ? e->be->ops->forward_sample(e->be, &plan.batch,
                                              e->dev_params, e->dev_ids,
                                              &err)
                 : kvs_engine_lora_forward(e, &plan, &err);
    }

    if (rc != KVS_OK) {
        /* nothing was computed; end the step's requests rather than
         * retry a step that may fail the same way forever */
        for (seq = plan.seqs; seq != NULL; seq = next) {
            next = seq->step_next;
            kvs_engine_end(e, (kvs_engine_seq_t *) seq, KVS_FINISH_ERROR,
                           err.msg, 0);
        }

        return 1;
    }

    kvs_sched_commit(&e->sched, &plan);

    for (seq = plan.seqs; seq != NULL; seq = next) {
        next = seq->step_next;
        kvs_engine_pin(e, (kvs_engine_seq_t *) seq);

        if (seq->tail_only) {
            kvs_engine_end(e, (kvs_engine_seq_t *) seq, KVS_FINISH_NONE,
                           NULL, 1);
        }
    }

    used = kvs_kv_pool_used_count(e->pool);

    for (i = 0; i < plan.n_logits; i++) {
        if (dev) {
            kvs_engine_token(e, (kvs_engine_seq_t *) plan.logits_seq[i],
                             e->dev_ids[i]);
            continue;
        }

        kvs_engine_sample(e, (kvs_engine_seq_t *) plan.logits_seq[i],
                          e->logits + (size_t) i * e->be->n_vocab);
    }

    dt = kvs_now_ns() - t0;

    e->stats.steps++;
    e->stats.prefill_tokens += plan.n_prefill;
    e->stats.decode_tokens += plan.n_decode;
    e->stats.step_ns += dt;
    e->stats.step_ns_max = dt > e->stats.step_ns_max ? dt
                                                     : e->stats.step_ns_max;
    e->stats.batch_seqs += plan.n_logits;
    kvs_engine_tier_prefill(e, plan.n_prefill, dt);

    n_tok = plan.n_prefill + plan.n_decode;
    for (k = 0; k < KVS_ENGINE_ITER_BOUNDS; k++) {
        if (n_tok <= kvs_engine_iter_bounds[k]) {
            break;
        }
    }
    e->stats.iter_tokens[k]++;
    e->stats.iter_tokens_sum += n_tok;

    if (plan.n_prefill == 0) {
        e->stats.decode_only_steps++;
        e->stats.decode_only_tokens += plan.n_decode;
        e->stats.decode_only_ns += dt;
    }

    e->stats.kv_used_max = used > e->stats.kv_used_max
                           ? used : e->stats.kv_used_max;

    pthread_mutex_lock(&e->lock);
    kvs_engine_publish(e);
    pthread_mutex_unlock(&e->lock);

    return 1;
}


unsigned
kvs_engine_threads(const kvs_engine_t *e)
{
    return e->be->threads;
}


const char *
kvs_engine_backend(const kvs_engine_t *e)
{
    return e->be_line;
}


static void
kvs_engine_backend_line(kvs_engine_t *e)
{
    const kvs_backend_info_t  *bi;

    bi = &e->be_info;

    if (e->be->kind == KVS_BACKEND_CUDA) {
        snprintf(e->be_line, sizeof(e->be_line), "backend: cuda, device "
                 "%d: %s, %" PRIu64 " MiB, %" PRIu32 " KV blocks (%s)",
                 bi->ordinal, bi->device, bi->device_mem >> 20,
                 e->be->n_blocks, bi->reason);
        return;
    }

    snprintf(e->be_line, sizeof(e->be_line), "backend: cpu, %u thread%s "
             "(%s)", e->be->threads, e->be->threads == 1 ? "" : "s",
             bi->reason);
}


/*
 * Whether this step samples on the device, and if so its rows' params
 * (coins drawn now, in row order, one per non-greedy row as kvs_sample()
 * would).  Every row must qualify: the device returns ids for all rows
 * or none.  A leader with followers needs its logits on the host to
 * fork them.  Out of memory for the params: the host samples.
 */
static int
kvs_engine_dev_plan(kvs_engine_t *e, const kvs_sched_plan_t *plan)
{
    uint32_t               i;
    kvs_engine_seq_t      *h;
    kvs_backend_sample_t  *p;

    if (e->be->ops->forward_sample == NULL || plan->n_logits == 0) {
        return 0;
    }

    for (i = 0; i < plan->n_logits; i++) {
        h = (kvs_engine_seq_t *) plan->logits_seq[i];

        /* the device sampler has no mask: a constrained row samples on
         * the host, and so does its step */
        if (h->followers != NULL || h->gram != NULL
            || !kvs_sampler_device_ok(&h->sampler))
        {
            return 0;
        }
    }

    if (kvs_grow((void **) &e->dev_params, &e->dev_params_cap,
                 plan->n_logits, sizeof(kvs_backend_sample_t)) != KVS_OK
        || kvs_grow((void **) &e->dev_ids, &e->dev_ids_cap, plan->n_logits,
                    sizeof(int32_t)) != KVS_OK)
    {
        return 0;
    }

    for (i = 0; i < plan->n_logits; i++) {
        h = (kvs_engine_seq_t *) plan->logits_seq[i];
        p = &e->dev_params[i];

        p->temperature = h->sampler.params.temperature;
        p->top_k = h->sampler.params.top_k;
        p->top_p = h->sampler.params.top_p;
        p->coin = p->temperature > 0.0f ? kvs_sampler_coin(&h->sampler)
                                        : 0.0f;
        e->dev_ids[i] = -1;
    }

    return 1;
}


uint64_t
kvs_engine_kv_bytes(const kvs_engine_t *e)
{
    return e->be->kv_bytes;
}


kvs_backend_kind_t
kvs_engine_mem(const kvs_engine_t *e, kvs_backend_mem_t *mem)
{
    *mem = e->be->mem;

    return e->be->kind;
}


int
kvs_engine_check(kvs_engine_t *e, kvs_err_t *err)
{
    uint64_t           cached;
    kvs_radix_stats_t  rs;

    if (kvs_kv_pool_check(e->pool, err) != KVS_OK) {
        return err->code;
    }

    cached = 0;

    if (e->radix != NULL) {
        if (kvs_radix_check(e->radix, err) != KVS_OK) {
            return err->code;
        }

        kvs_radix_stats(e->radix, &rs);
        cached = rs.blocks;
    }

    /* with no sequence left, only the prefix cache holds blocks */
    if (e->sched.running.n == 0 && e->sched.waiting.n == 0
        && kvs_kv_pool_used_count(e->pool) != cached)
    {
        return kvs_err_set(err, KVS_EFORMAT, "%" PRIu32 " blocks in use "
                           "with no sequence left and %" PRIu64 " cached",
                           kvs_kv_pool_used_count(e->pool), cached);
    }

    return KVS_OK;
}


void
kvs_engine_stats(kvs_engine_t *e, kvs_engine_stats_t *st)
{
    pthread_mutex_lock(&e->lock);
    *st = e->shown;
    pthread_mutex_unlock(&e->lock);

    /* the tier's own figures as of now: its writer works between steps */
    kvs_engine_tier_live(e, &st->tier);
}


void
kvs_engine_tenants(kvs_engine_t *e, kvs_engine_tenants_t *out)
{
    pthread_mutex_lock(&e->lock);
    *out = e->tenants;
    pthread_mutex_unlock(&e->lock);
}


/* Moves submitted requests into the scheduler, oldest first; ones the
 * consumer closed meanwhile are dropped. */
static void
kvs_engine_take_inbox(kvs_engine_t *e)
{
    kvs_engine_seq_t  *h, *next, *list;

    /* reversed into arrival order; whether the consumer closed it yet is
     * read here, under the lock: a later close finds it scheduled and
     * uses the cancel list */
    pthread_mutex_lock(&e->lock);
    list = NULL;

    for (h = e->inbox; h != NULL; h = next) {
        next = h->next_in;
        h->next_in = list;
        list = h;
        h->scheduled = 1;
        h->drop = h->cancelled;
    }

    e->inbox = NULL;
    kvs_engine_lora_sync(e);          /* before a new adapter id is seen */
    pthread_mutex_unlock(&e->lock);

    for (h = list; h != NULL; h = next) {
        next = h->next_in;

        kvs_engine_cache_ns(e, h);

        if (h->drop) {
            kvs_engine_end(e, h, KVS_FINISH_CANCELLED, NULL, 0);
            continue;
        }

        if (kvs_engine_lora_take(e, h)) {
            continue;                 /* its adapter is being loaded */
        }

        kvs_engine_tier_add(e, h);    /* or waits for its blocks */
    }
}


/*
 * Ends the sequences that waited past the queue timeout without being
 * admitted: an error with the seconds after which a retry could fit
 * (the worker answers 503 with Retry-After).  They held no blocks.
 */
static void
kvs_engine_expire(kvs_engine_t *e)
{
    char               msg[160];
    kvs_seq_t         *seq, *next;
    kvs_engine_seq_t  *h;

    for (seq = kvs_sched_expire(&e->sched); seq != NULL; seq = next) {
        next = seq->step_next;
        h = (kvs_engine_seq_t *) seq;
        h->retry_after = kvs_sched_retry_after(&e->sched, seq);

        snprintf(msg, sizeof(msg), "The server's %s had no room for this "
                 "request's %" PRIu32 " KV blocks within %" PRIu32 " ms; "
                 "retry after %" PRIu32 " s.",
                 !e->sched.pools_on ? "KV cache"
                 : seq->pool == KVS_POOL_LONG ? "long-request KV pool"
                                              : "short-request KV pool",
                 seq->need, e->conf.queue_timeout_ms, h->retry_after);

        kvs_engine_end(e, h, KVS_FINISH_ERROR, msg, 0);
    }
}


/* Ends the sequences whose consumer closed them early. */
static void
kvs_engine_take_cancels(kvs_engine_t *e)
{
    kvs_engine_seq_t  *h, *next, *list;

    pthread_mutex_lock(&e->lock);
    list = e->cancels;
    e->cancels = NULL;
    pthread_mutex_unlock(&e->lock);

    for (h = list; h != NULL; h = next) {
        next = h->next_cancel;

        /* it may have finished in the step during which it was closed */
        kvs_engine_end(e, h, KVS_FINISH_CANCELLED, NULL, 0);

        pthread_mutex_lock(&e->lock);
        kvs_engine_unref(h);
        pthread_mutex_unlock(&e->lock);
    }
}




/* The engine thread's stats, counts of now included, into the copy the
 * consumer reads.  Under e->lock. */
void
kvs_engine_publish(kvs_engine_t *e)
{
    size_t             k;
    uint32_t           used;
    kvs_radix_stats_t  rs;
    kvs_sched_pool_t  *p;

    used = kvs_kv_pool_used_count(e->pool);

    /* as of now, not of the plan: the pools' and tenants' blocks */
    kvs_sched_kv_count(&e->sched);

    for (k = 0; k < KVS_POOL_N; k++) {
        p = &e->sched.pools[k];
        e->stats.pool_max[k] = p->max_blocks;
        e->stats.pool_used[k] = p->used;
        e->stats.pool_queued[k] = p->queued;
        e->stats.pool_admitted[k] = p->admitted;
        e->stats.pool_waited[k] = p->waited;
        e->stats.pool_wait_ms[k] = p->wait_ms;
        e->stats.pool_refused[k] = p->refused;
    }

    e->stats.pools = (uint32_t) e->sched.pools_on;
    e->stats.pool_min_tokens = e->sched.pools_on
                               ? e->sched.conf.pool_min_tokens : 0;
    kvs_sched_long_room(&e->sched, &e->stats.long_room,
                        &e->stats.long_slots);

    e->stats.requests = e->shown.requests;
    e->stats.preemptions = e->sched.n_preemptions;
    e->stats.running = e->sched.running.n;
    e->stats.waiting = e->sched.waiting.n;
    e->stats.epoch = e->epoch;

    if (e->radix != NULL) {
        /* cached blocks nobody uses are as good as free (vLLM counts
         * them so too) */
        used -= kvs_radix_evictable(e->radix);
        kvs_radix_stats(e->radix, &rs);
        e->stats.cache_query_tokens = e->sched.n_query_tokens;
        e->stats.cache_hit_tokens = e->sched.n_hit_tokens;
        e->stats.cache_evicted_blocks = rs.evicted_blocks;
        e->stats.cache_blocks = (uint32_t) rs.blocks;
        e->stats.cache_pinned_blocks = (uint32_t) rs.pinned_blocks;
        e->stats.cache_tier_hit_tokens = e->sched.n_tier_hit_tokens;
        e->stats.cache_host_hit_tokens = e->sched.n_host_hit_tokens;
        kvs_engine_tier_publish(e);
    }

    e->stats.kv_used = used;
    kvs_engine_lora_stats(e);
    e->shown = e->stats;

    kvs_engine_publish_tenants(e);
}


/* The fair share's top tenants into the published copy.  Under
 * e->lock. */
static void
kvs_engine_publish_tenants(kvs_engine_t *e)
{
    size_t                 i, n;
    kvs_fair_row_t         rows[KVS_ENGINE_TOP_TENANTS], all;
    kvs_engine_tenant_t   *t;
    kvs_engine_tenants_t  *out;

    out = &e->tenants;
    n = kvs_fair_rows(&e->sched.fair, rows, KVS_ENGINE_TOP_TENANTS, &all);

    memset(&out->other, 0, sizeof(out->other));
    out->other.prefill = all.prefill;
    out->other.decode = all.decode;
    out->other.kv_blocks = all.kv_blocks;
    out->other.n_seqs = all.n_seqs;

    for (i = 0; i < n; i++) {
        t = &out->top[i];
        t->key_len = rows[i].key_len;
        memcpy(t->key, rows[i].key, rows[i].key_len);
        t->prefill = rows[i].prefill;
        t->decode = rows[i].decode;
        t->kv_blocks = rows[i].kv_blocks;
        t->n_seqs = rows[i].n_seqs;

        out->other.prefill -= t->prefill;
        out->other.decode -= t->decode;
        out->other.kv_blocks -= t->kv_blocks;
        out->other.n_seqs -= t->n_seqs;
    }

    out->n_top = (uint32_t) n;
    out->n_tenants = e->sched.fair.n_tenants;
}


/* The weights' epoch, and the prefix cache unless it is off. */
static int
kvs_engine_cache_new(kvs_engine_t *e, kvs_err_t *err)
{
    int       rc;
    uint64_t  token_bytes, pin_max;

    e->epoch = kvs_gguf_content_hash(e->conf.model->gguf);

    if (e->conf.no_prefix_cache) {
        return KVS_OK;
    }

    token_bytes = e->be->kv_bytes / e->conf.n_blocks
                  / e->conf.block_tokens;
    pin_max = e->conf.n_blocks / 4;

    if (e->conf.pin_max_bytes > 0 && token_bytes > 0) {
        pin_max = e->conf.pin_max_bytes / token_bytes
                  / e->conf.block_tokens;
        pin_max = pin_max < e->conf.n_blocks ? pin_max : e->conf.n_blocks;
    }

    rc = kvs_radix_new(&e->radix, e->pool, (uint32_t) pin_max, err);
    if (rc != KVS_OK) {
        return rc;
    }

    kvs_engine_index_init(e);

    return kvs_sched_set_cache(&e->sched, e->radix, err);
}


/* Gives h and the choices that follow it the request's tenant, its
 * group (the request KV cap) and its namespace in the prefix cache;
 * without memory for them they go nameless, ungrouped or uncached. */
static void
kvs_engine_cache_ns(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    kvs_radix_key_t    key;
    kvs_seq_group_t   *g;
    kvs_engine_seq_t  *f;

    if (kvs_sched_group_new(&g, NULL) != KVS_OK) {
        g = NULL;
    }

    key.epoch = kvs_engine_lora_epoch(e, h->adapter);
    key.adapter = h->adapter;
    key.scope = h->scope;
    key.scope_len = h->scope_len;

    for (f = h; f != NULL; f = f == h ? h->followers : f->next_follower) {
        (void) kvs_sched_tenant(&e->sched, &f->seq, h->tenant,
                                h->tenant_len, NULL);

        if (g != NULL) {
            kvs_sched_group(&f->seq, g);
        }

        if (e->radix != NULL
            && kvs_radix_ns_get(e->radix, &key, &f->seq.ns, NULL) != KVS_OK)
        {
            f->seq.ns = NULL;
        }
    }
}


/* Once h's prompt is cached: its breakpoints pin their prefixes, and
 * what they cover beyond what was reused counts as written. */
static void
kvs_engine_pin(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    int       created;
    uint32_t  i, pinned, most;

    if (h->pins_done || !h->seq.prompt_cached || h->seq.ns == NULL) {
        return;
    }

    h->pins_done = 1;

    if (h->n_pins == 0) {
        return;                       /* a follower keeps its leader's */
    }

    most = 0;

    for (i = 0; i < h->n_pins; i++) {
        (void) kvs_radix_pin(e->radix, h->seq.ns, h->seq.tokens,
                             h->pins[i].n_tokens, h->pins[i].ttl_ms,
                             e->sched.now, &pinned, &created, NULL);

        most = h->pins[i].n_tokens > most ? h->pins[i].n_tokens : most;
    }

    h->n_cache_created = most > h->seq.n_cached ? most - h->seq.n_cached
                                                : 0;
}


static void *
kvs_engine_main(void *arg)
{
    int              busy, tick, copying;
    kvs_engine_t    *e = arg;
    struct timespec  at;

    busy = 0;

    for ( ;; ) {
        pthread_mutex_lock(&e->lock);

        /* idle (the last step found nothing to run): sleep until a
         * submit, a close or quit; with sequences waiting for blocks
         * that nothing running will free (pins), a step at least every
         * KVS_ENGINE_QUEUE_TICK ms ends those past the queue timeout */
        tick = e->sched.waiting.n > 0 && e->conf.queue_timeout_ms > 0;

        /* the tiers' copies in flight (kvs_engine_hcopy.c): polled
         * every KVS_ENGINE_COPY_TICK us, loads' requests waiting and
         * spills' blocks not yet loadable, queued nor published */
        copying = kvs_engine_hcopy_flight(e) > 0;

        /* the disk tier's spills not yet written or published: their
         * names reach the index a tick after the writer, not at the
         * next request (kvs_engine_tier_ix.c); asked only when about to
         * sleep, since a busy engine drains them each step anyway */
        if (!busy && !tick) {
            tick = kvs_engine_tier_ix_pending(e);
        }

        while (!busy && !e->quit && e->inbox == NULL && e->cancels == NULL
               && !kvs_engine_index_pending(e) && !e->lora_ready
               && !e->tier_ready)
        {
            if (!tick && !copying) {
                pthread_cond_wait(&e->wake, &e->lock);
                continue;
            }

            clock_gettime(CLOCK_REALTIME, &at);
            at.tv_nsec += copying ? KVS_ENGINE_COPY_TICK * 1000L
                                  : KVS_ENGINE_QUEUE_TICK * 1000000L;
            at.tv_sec += at.tv_nsec / 1000000000L;
            at.tv_nsec %= 1000000000L;

            if (pthread_cond_timedwait(&e->wake, &e->lock, &at) != 0) {
                break;
            }
        }

        if (e->quit) {
            pthread_mutex_unlock(&e->lock);
            break;
        }

        pthread_mutex_unlock(&e->lock);

        busy = kvs_engine_step(e);
    }

    return NULL;
}


