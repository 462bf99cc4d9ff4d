/*
 * ngx_http_kvserve_completions: POST /v1/chat/completions and
 * /v1/completions, and Anthropic's /v1/messages (and count_tokens), a
 * chat request in other shapes: reading a request's body, preparing it,
 * and submitting it (count_tokens: answering its prompt's tokens
 * instead); the first phase of a completion and the one that
 * starts the others (ngx_http_kvserve_request.h draws the layers).
 *
 * A request is read (nginx's body reader, client_max_body_size), parsed
 * (kvs_api_req_parse), rendered and tokenized (inline, or for prompt
 * text over kvserve_tokenize_threshold in a task of the
 * kvserve_tokenize_threads pool: ngx_http_kvserve_tokenize.c), checked
 * against the model's vocabulary and context (kvs_api_budget), admitted
 * by kvserve_limit, and sent to the engine process as one SUBMIT per
 * prompt (a part); its answers come back as events on the part
 * (ngx_http_kvserve_answers.c).
 *
 * Invariants:
 *  - a part's SUBMIT frame is built once, with the budget kvserve_limit
 *    reserves for it, and sent again as it is if the engine is lost
 *    before any output;
 *  - what comes back to this file (tokenized, admitted after a delay)
 *    comes through the function pointers it gave, so the later phases
 *    never call it.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/random.h>

#if (NGX_LINUX && defined __GLIBC__)
#include <malloc.h>
#define NGX_HTTP_KVSERVE_TRIM  1
#endif

#include "ngx_http_kvserve_completions.h"
#include "ngx/limit/ngx_http_kvserve_limit.h"
#include "ngx_http_kvserve_guard.h"
#include "api/kvs_api_budget.h"


/* the parser refuses what one SUBMIT could not carry, naming logit_bias,
 * before the wire encoder would */
#if (KVS_API_MAX_BIAS > KVS_WIRE_MAX_BIAS)
#error "KVS_API_MAX_BIAS exceeds KVS_WIRE_MAX_BIAS"
#endif


static void ngx_http_kvserve_body(ngx_http_request_t *r);
static void ngx_http_kvserve_tokenized(ngx_http_kvserve_ctx_t *ctx);


static uint64_t  ngx_http_kvserve_rng;


uint64_t
ngx_http_kvserve_random64(void)
{
    uint64_t  v;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t) sizeof(v)) {
        v = ((uint64_t) ngx_random() << 33) ^ ((uint64_t) ngx_random() << 11)
            ^ (uint64_t) ngx_random() ^ (uint64_t) ngx_current_msec;
    }

    return v;
}


/* ---- the request ------------------------------------------------------- */

void
ngx_http_kvserve_set_kind(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t kind)
{
    ctx->chat = kind != NGX_HTTP_KVSERVE_POST_CMPL;
    ctx->anthropic = kind == NGX_HTTP_KVSERVE_POST_MSG
                     || kind == NGX_HTTP_KVSERVE_POST_MSG_COUNT;
    ctx->count_only = kind == NGX_HTTP_KVSERVE_POST_MSG_COUNT;
    ctx->msg_stop = -1;
}


ngx_int_t
ngx_http_kvserve_parse(ngx_http_kvserve_ctx_t *ctx, u_char *data, size_t len,
    kvs_api_err_t *aerr)
{
    int                        rc;
    size_t                     max;
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_get_module_loc_conf(ctx->r, ngx_http_core_module);
    max = (size_t) clcf->client_max_body_size;

    if (ctx->anthropic) {
        rc = kvs_api_msg_parse(&ctx->req, (const char *) data, len, max,
                               ctx->count_only ? KVS_API_MSG_COUNT : 0,
                               aerr);

    } else {
        rc = kvs_api_req_parse(&ctx->req, ctx->chat ? KVS_API_CHAT
                                                    : KVS_API_COMPLETIONS,
                               (const char *) data, len, max, aerr);
    }

    return rc == KVS_OK ? NGX_OK : NGX_ERROR;
}


ngx_int_t
ngx_http_kvserve_completions(ngx_http_request_t *r, ngx_uint_t kind)
{
    ngx_int_t                  rc;
    kvs_api_err_t              aerr;
    ngx_http_kvserve_ctx_t    *ctx;

    rc = ngx_http_kvserve_body_too_large(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    if ((kind == NGX_HTTP_KVSERVE_POST_MSG
         || kind == NGX_HTTP_KVSERVE_POST_MSG_COUNT)
        && ngx_http_kvserve_msg_version(r, &aerr) != NGX_OK)
    {
        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }

        return ngx_http_kvserve_api_error(r, &aerr);
    }

    ctx = ngx_http_kvserve_ctx_new(r, ngx_http_kvserve_timeout);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the header is in: the body is read from here */
    ctx->t.start_ns = kvs_now_ns();
    ngx_http_kvserve_set_kind(ctx, kind);
    /* count_tokens generates nothing: no completion in the metrics */
    ctx->completion = !ctx->count_only;

    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, ngx_http_kvserve_body);
    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


#if (NGX_HTTP_KVSERVE_TRIM)

/*
 * The body size from which a request's end hands freed memory back to
 * the system.  glibc keeps what is freed in its heaps (and one per pool
 * thread), so the body's copy, the JSON tree, the rendered chat and the
 * tokenizer's scratch of a large request stay in the worker's RSS after
 * it, whether it was served or refused as malformed; malloc_trim()
 * returns the free pages of every heap.  Above 256 KiB a request costs
 * far more than the trim (a few hundred microseconds), and one trim per
 * event-loop turn serves all the large requests that ended in it.
 */
#define NGX_HTTP_KVSERVE_TRIM_BYTES  (256 * 1024)

static ngx_event_t  ngx_http_kvserve_trim_ev;


static void
ngx_http_kvserve_trim(ngx_event_t *ev)
{
    malloc_trim(0);
}


/* r->pool's cleanup: the trim runs once the request's memory is freed,
 * after the handlers of this turn of the event loop. */
static void
ngx_http_kvserve_trim_post(void *data)
{
    ngx_event_t  *ev;

    ev = &ngx_http_kvserve_trim_ev;

    if (!ev->posted) {
        ev->handler = ngx_http_kvserve_trim;
        ev->log = ngx_cycle->log;
        ngx_post_event(ev, &ngx_posted_events);
    }
}

#endif


/* The body in one piece: a pool copy when it is in several buffers or
 * in a file.; a large one has the worker's heaps trimmed
 * once the request is freed. */
ngx_int_t
ngx_http_kvserve_body_bytes(ngx_http_request_t *r, u_char **data,
    size_t *len)
{
    u_char              *p;
    off_t                size;
    ssize_t              n;
    ngx_buf_t           *b;
    ngx_chain_t         *cl;
#if (NGX_HTTP_KVSERVE_TRIM)
    ngx_pool_cleanup_t  *cln;
#endif

    *data = (u_char *) "";
    *len = 0;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return NGX_OK;
    }

    size = 0;
    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        size += ngx_buf_size(cl->buf);
    }

#if (NGX_HTTP_KVSERVE_TRIM)
    if (size >= NGX_HTTP_KVSERVE_TRIM_BYTES) {
        cln = ngx_pool_cleanup_add(r->pool, 0);
        if (cln != NULL) {
            cln->handler = ngx_http_kvserve_trim_post;
        }
    }
#endif

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        *data = cl->buf->pos;
        *len = cl->buf->last - cl->buf->pos;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, (size_t) size + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    *data = p;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            n = ngx_read_file(b->file, p, (size_t) (b->file_last
                                                   - b->file_pos),
                              b->file_pos);
            if (n != b->file_last - b->file_pos) {
                return NGX_ERROR;
            }
            p += n;

        } else {
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
        }
    }

    *len = p - *data;

    return NGX_OK;
}


/* ---- on the event loop -------------------------------------------------- */


/* The template for a chat request: the model's chat_template=, else the
 * location's kvserve_chat_template, else the model's own. */
ngx_int_t
ngx_http_kvserve_chat_resolve(ngx_http_kvserve_ctx_t *ctx, kvs_chat_t *chat,
    kvs_api_err_t *aerr)
{
    const char                   *name;
    kvs_err_t                     err;
    ngx_http_kvserve_loc_conf_t  *klcf;

    klcf = ngx_http_get_module_loc_conf(ctx->r, ngx_http_kvserve_module);

    if (ctx->model->chat_fixed) {
        *chat = ctx->model->chat;
        return NGX_OK;
    }

    if (klcf->chat_template != NGX_CONF_UNSET) {
        name = kvs_chat_name((kvs_chat_kind_t) klcf->chat_template);
        if (kvs_chat_by_name(name, ngx_strlen(name), chat, &err) != KVS_OK) {
            kvs_api_err_set(aerr, 500, NULL, NULL, "%s", err.msg);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (ctx->model->has_chat) {
        *chat = ctx->model->chat;
        return NGX_OK;
    }

    kvs_api_err_set(aerr, 400, "model", NULL,
                    "The model `%.*s` has no chat template: use "
                    "/v1/completions.", (int) ctx->req.model.len,
                    ctx->req.model.ptr);
    return NGX_ERROR;
}


/* One part per prompt: its SUBMIT frame built once, sent by the engine
 * side (again, if the engine is lost before any output). */
static ngx_int_t
ngx_http_kvserve_part_init(ngx_http_kvserve_ctx_t *ctx, ngx_uint_t i,
    kvs_ids_t *ids, uint32_t n_ctx, kvs_api_err_t *aerr)
{
    int                       rc;
    uint32_t                  k;
    kvs_buf_t                 frame;
    kvs_err_t                 err;
    const char               *stop[KVS_API_MAX_STOP];
    size_t                    stop_len[KVS_API_MAX_STOP];
    kvs_api_budget_t          budget;
    kvs_engine_req_t          ereq;
    ngx_http_kvserve_part_t  *part;

    part = &ctx->parts[i];
    part->ctx = ctx;
    part->index = i;

    if (kvs_api_budget(&ctx->req, ids->n, n_ctx, &budget, aerr) != KVS_OK) {
        return NGX_ERROR;
    }

    part->ids = ngx_palloc(ctx->r->pool, ids->n * sizeof(int32_t));
    if (part->ids == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }
    ngx_memcpy(part->ids, ids->ids, ids->n * sizeof(int32_t));
    part->n_ids = ids->n;
    part->reserved = budget.reserved;

    for (k = 0; k < ctx->req.n_stop; k++) {
        stop[k] = ctx->req.stop[k].ptr;
        stop_len[k] = ctx->req.stop[k].len;
    }

    ngx_memzero(&ereq, sizeof(ereq));
    ereq.prompt = part->ids;
    ereq.n_prompt = (uint32_t) part->n_ids;
    ereq.max_tokens = budget.max_tokens;
    ereq.n = ctx->req.n;
    ereq.sample = ctx->req.sample;
    ereq.stop = stop;
    ereq.stop_len = stop_len;
    ereq.n_stop = ctx->req.n_stop;
    ereq.ignore_eos = ctx->req.ignore_eos;
    ereq.gram_kind = ctx->req.rf_kind;
    ereq.schema = ctx->req.rf_schema;
    ereq.schema_len = ctx->req.rf_schema_len;
    ngx_http_kvserve_cache_req(ctx, i, &ereq);
    ereq.tenant = (const char *) ctx->tenant.data;
    ereq.tenant_len = ctx->tenant.len;

    ngx_memzero(&frame, sizeof(frame));

    /* the model's own engine process, whose only model is 0 */
    rc = kvs_wire_enc_submit(&frame, 0, 0, &ereq, kvs_now_ns(), &err);
    if (rc != KVS_OK) {
        kvs_buf_free(&frame);
        kvs_api_err_from_msg(aerr, rc == KVS_ENOMEM ? 500 : 400, NULL,
                             err.msg);
        return NGX_ERROR;
    }

    part->sub.type = KVS_WIRE_SUBMIT;
    part->sub.model = ctx->model_index;
    part->sub.frame = ngx_pnalloc(ctx->r->pool, frame.len);
    if (part->sub.frame == NULL) {
        kvs_buf_free(&frame);
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    ngx_memcpy(part->sub.frame, frame.data, frame.len);
    part->sub.frame_len = frame.len;
    part->sub.handler = ngx_http_kvserve_part_event;
    part->sub.data = part;
    kvs_buf_free(&frame);

    ctx->prompt_tokens += (uint32_t) part->n_ids;

    return NGX_OK;
}


/*
 * Before tokenizing: the model, what is refused outright, the seed, the
 * parts and choices, and everything the tokenizing job reads (so that it
 * need not look at the configuration).
 */
ngx_int_t
ngx_http_kvserve_prepare(ngx_http_kvserve_ctx_t *ctx, kvs_api_err_t *aerr)
{
    ngx_uint_t                     i, n;
    ngx_http_kvserve_lora_t       *lora;
    ngx_http_kvserve_model_t      *m;
    ngx_http_kvserve_tok_job_t    *job;
    ngx_http_kvserve_loc_conf_t   *klcf;
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = ngx_http_get_module_main_conf(ctx->r, ngx_http_kvserve_module);
    m = kmcf->models->elts;
    n = kmcf->models->nelts;

    for (i = 0; i < n; i++) {
        if (m[i].name.len == ctx->req.model.len
            && ngx_strncmp(m[i].name.data, ctx->req.model.ptr,
                           m[i].name.len) == 0)
        {
            break;
        }
    }

    /* not a model: an adapter's id, BASE:NAME */
    lora = i == n ? ngx_http_kvserve_lora_find(kmcf, ctx->req.model.ptr,
                                               ctx->req.model.len, &i)
                  : NULL;

    if (i == n) {
        kvs_api_err_set(aerr, 404, "model", "model_not_found",
                        "The model `%s` does not exist or you do not have "
                        "access to it.", ctx->req.model.ptr);
        return NGX_ERROR;
    }

    ctx->model = &m[i];
    ctx->model_index = i;

    if (ngx_http_kvserve_lora_select(ctx, lora, aerr) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ctx->req.echo) {
        kvs_api_err_set(aerr, 400, "echo", NULL,
                        "echo is not supported yet.");
        return NGX_ERROR;
    }

    klcf = ngx_http_get_module_loc_conf(ctx->r, ngx_http_kvserve_module);

    /* the caps, before anything is allocated, rendered or tokenized for
     * the request: past them a request costs no more than its parse */
    if (kvs_api_req_check_messages(&ctx->req, klcf->max_messages, aerr)
        != KVS_OK
        || kvs_api_budget_seqs(&ctx->req, (uint32_t) klcf->max_sequences,
                               aerr)
        != KVS_OK)
    {
        return NGX_ERROR;
    }

    if (!ctx->req.has_seed) {
        ctx->req.sample.seed = ngx_http_kvserve_random64();
    }

    ctx->n_parts = ctx->chat ? 1 : ctx->req.n_prompts;
    ctx->parts = ngx_pcalloc(ctx->r->pool,
                             ctx->n_parts * sizeof(ngx_http_kvserve_part_t));
    ctx->n_choices = ctx->n_parts * ctx->req.n;
    ctx->choices = ngx_pcalloc(ctx->r->pool, ctx->n_choices
                                        * sizeof(ngx_http_kvserve_choice_t));
    job = ngx_pcalloc(ctx->r->pool, sizeof(ngx_http_kvserve_tok_job_t));
    if (ctx->parts == NULL || ctx->choices == NULL || job == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    job->ids = ngx_pcalloc(ctx->r->pool, ctx->n_parts * sizeof(kvs_ids_t));
    if (job->ids == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    job->ctx = ctx;
    job->req = &ctx->req;
    job->vocab = ctx->model->vocab;
    job->max_ids = ctx->model->model != NULL
                   && ctx->model->model->hp.n_ctx_train > 0
                   ? ctx->model->model->hp.n_ctx_train : KVS_TOK_NO_LIMIT;
    job->n_parts = ctx->n_parts;
    job->chat_req = ctx->chat;
    ctx->tok = job;

    if (ngx_http_kvserve_tenant(ctx) != NGX_OK) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "The tenant could not be "
                        "evaluated.");
        return NGX_ERROR;
    }

    if (ngx_http_kvserve_cache_scope(ctx) != NGX_OK) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "The cache scope could not "
                        "be evaluated.");
        return NGX_ERROR;
    }

    if (ctx->chat
        && (ngx_http_kvserve_chat_resolve(ctx, &job->chat, aerr) != NGX_OK
            || kvs_api_req_tools_plan(&ctx->req,
                                      job->chat.jinja != NULL
                                      ? ctx->model->tool_syntax
                                      : KVS_TOOL_SYN_NONE,
                                      job->chat.jinja != NULL, aerr)
               != KVS_OK))
    {
        return NGX_ERROR;
    }

    /* kvserve_guard and the size caps */
    return ngx_http_kvserve_guard_prepare(ctx, aerr);
}


/* The ids go into the parts (and are freed); then the response's head. */
static ngx_int_t
ngx_http_kvserve_parts_init(ngx_http_kvserve_ctx_t *ctx,
    kvs_api_err_t *aerr)
{
    uint32_t                     n_ctx;
    ngx_int_t                    rc;
    ngx_uint_t                   i;
    ngx_http_kvserve_tok_job_t  *job;

    job = ctx->tok;
    n_ctx = ctx->model->model->hp.n_ctx_train;
    rc = job->rc;

    if (rc != NGX_OK) {
        *aerr = job->aerr;
    }

    /* an input guard's refusal recorded; kvserve_max_prompt_tokens */
    if (ngx_http_kvserve_guard_tokenized(ctx, aerr) != NGX_OK) {
        rc = NGX_ERROR;
    }

    for (i = 0; i < ctx->n_parts && rc == NGX_OK; i++) {
        rc = ngx_http_kvserve_part_init(ctx, i, &job->ids[i], n_ctx, aerr);
    }

    for (i = 0; i < job->n_parts; i++) {
        kvs_ids_free(&job->ids[i]);
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    for (i = 0; i < ctx->n_choices; i++) {
        kvs_api_textpos_init(&ctx->choices[i].pos, ctx->model->vocab,
                             ctx->parts[i / ctx->req.n].ids,
                             ctx->parts[i / ctx->req.n].n_ids, 0);
    }

    ctx->head.kind = ctx->anthropic ? KVS_API_MESSAGES
                     : ctx->chat ? KVS_API_CHAT : KVS_API_COMPLETIONS;
    ctx->head.id_len = kvs_api_resp_id(ctx->id, ctx->head.kind,
                                       &ngx_http_kvserve_rng);
    ctx->head.id = ctx->id;
    ctx->head.model = ctx->req.model.ptr;
    ctx->head.model_len = ctx->req.model.len;
    ctx->head.created = (int64_t) ngx_time();
    ctx->head.logprobs = ctx->req.sample.logprobs;
    ctx->stream = ctx->req.stream ? 1 : 0;

    return NGX_OK;
}


/* The request goes to the engine: one SUBMIT per part. */
static void
ngx_http_kvserve_submit(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_uint_t                     i;
    ngx_http_request_t            *r;
    ngx_http_kvserve_main_conf_t  *kmcf;

    r = ctx->r;
    kmcf = ngx_http_get_module_main_conf(r, ngx_http_kvserve_module);

    /* a client that goes away cancels its sequences (pool cleanup) */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_kvserve_write_handler;

    ngx_http_kvserve_timer_arm(ctx, ngx_http_kvserve_engine_hello_of(
                                        ctx->model_index) != NULL
                                    ? kmcf->engine_timeout
                                    : kmcf->engine_wait);

    ctx->t.submit_ns = kvs_now_ns();
    ngx_http_kvserve_record_hop(ctx, KVS_HOP_LIMIT);

    for (i = 0; i < ctx->n_parts; i++) {
        if (ngx_http_kvserve_engine_send(&ctx->parts[i].sub) != NGX_OK) {
            ngx_http_kvserve_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                  "The request could not be sent to the "
                                  "engine.", "server_error", NULL);
            return;
        }

        if (ctx->finished) {
            return;
        }
    }
}


/* Tokenized (here or in the pool): an error answered, or admitted and
 * submitted. */
static void
ngx_http_kvserve_tokenized(ngx_http_kvserve_ctx_t *ctx)
{
    ngx_int_t      rc;
    kvs_api_err_t  aerr;

    rc = ngx_http_kvserve_parts_init(ctx, &aerr);
    ctx->t.tokenize_ns = kvs_now_ns();

    ngx_http_kvserve_record_hop(ctx, KVS_HOP_BODY);
    ngx_http_kvserve_record_hop(ctx, KVS_HOP_TOKENIZE);

    if (rc != NGX_OK) {
        rc = ngx_http_kvserve_api_error(ctx->r, &aerr);
        ctx->finished = 1;
        ngx_http_finalize_request(ctx->r, rc);
        return;
    }

    if (ctx->count_only) {
        ngx_http_kvserve_msg_count(ctx);
        return;
    }

    /* kvserve_limit: charged now; refused (answered), or delayed (its
     * timer submits) */
    if (ngx_http_kvserve_limit_admit(ctx, ngx_http_kvserve_submit)
        != NGX_OK)
    {
        return;
    }

    ngx_http_kvserve_submit(ctx);
}


static void
ngx_http_kvserve_body(ngx_http_request_t *r)
{
    u_char                    *data;
    size_t                     len;
    ngx_int_t                  rc;
    kvs_api_err_t              aerr;
    ngx_http_kvserve_ctx_t    *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);

    ctx->t.body_ns = kvs_now_ns();

    if (ngx_http_kvserve_body_bytes(r, &data, &len) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ngx_http_kvserve_rng == 0) {
        ngx_http_kvserve_rng = ngx_http_kvserve_random64() | 1;
    }

    rc = ngx_http_kvserve_parse(ctx, data, len, &aerr);

    ctx->t.parse_ns = kvs_now_ns();

    if (rc == NGX_OK) {
        ngx_http_kvserve_log_unknown(r, &ctx->req);
        rc = ngx_http_kvserve_prepare(ctx, &aerr);
    }

    if (rc != NGX_OK) {
        ctx->t.tokenize_ns = kvs_now_ns();
        rc = ngx_http_kvserve_api_error(r, &aerr);
        ctx->finished = 1;
        ngx_http_finalize_request(r, rc);
        return;
    }

    ngx_http_kvserve_tok_start(ctx, ngx_http_kvserve_tokenized);
}
