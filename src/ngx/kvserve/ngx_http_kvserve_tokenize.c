/*
 * ngx_http_kvserve_tokenize: rendering and tokenizing a completion
 * request's prompts, inline or as a task of the kvserve_tokenize_threads
 * pool, and the task's way there and back; a phase of a completion
 * (ngx_http_kvserve_request.h draws the layers), started by
 * ngx_http_kvserve_completions.c and by kvserve_route, each giving the
 * function to call when the ids are there.
 *
 * POST /tokenize (ngx_http_kvserve_tokens.c) uses the same job with
 * job->tokenize set: its own special-token flags and generation prompt,
 * no context limit, an empty result allowed.
 *
 * Invariants:
 *  - while a tokenizing task runs, the request is blocked
 *    (r->main->blocked, as nginx does for aio): nginx does not free it
 *    even if the client leaves, the task only reads the request's parsed
 *    tree and the shared vocabulary and writes its job, and the task's
 *    completion (on the event loop) drops a request whose client left;
 *  - each pool thread has its own tokenizer scratch (a thread key), the
 *    event loop has its own (ngx_http_kvserve_tok, one per worker); each
 *    keeps at most KVS_TOK_SCRATCH_KEEP between tasks (kvs_tok trims it
 *    after every call), so a worker's tokenizing memory is bounded by
 *    its threads, not by the longest prompt it ever saw;
 *  - a part is tokenized up to its model's context and no further
 *    (job->max_ids): a prompt over it is refused as
 *    context_length_exceeded for the cost of its first tokens.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#if (NGX_THREADS)
#include <pthread.h>
#endif

#include "ngx_http_kvserve_completions.h"
#include "api/kvs_api_budget.h"
#include "tokenizer/kvs_chat_jinja.h"
#include "ngx_http_kvserve_guard.h"


static size_t ngx_http_kvserve_prompt_bytes(ngx_http_kvserve_ctx_t *ctx);
static ngx_int_t ngx_http_kvserve_tokenize(ngx_http_kvserve_tok_job_t *job,
    kvs_tok_ctx_t *tok);
#if (NGX_THREADS)
static ngx_int_t ngx_http_kvserve_tok_post(ngx_http_kvserve_ctx_t *ctx,
    ngx_thread_pool_t *tp);
#endif


static kvs_tok_ctx_t  ngx_http_kvserve_tok;




void
ngx_http_kvserve_tok_start(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_tok_done_pt done)
{
#if (NGX_THREADS)
    ngx_http_kvserve_loc_conf_t  *klcf;
#endif

    ctx->tok->done = done;

    /* a hop to a pool thread costs more than tokenizing a short prompt
     * here; a long one would hold every other request of the worker */
    ctx->tok->bytes = ngx_http_kvserve_prompt_bytes(ctx);

#if (NGX_THREADS)

    klcf = ngx_http_get_module_loc_conf(ctx->r, ngx_http_kvserve_module);

    if (klcf->tokenize_pool != NULL
        && klcf->tokenize_pool != NGX_CONF_UNSET_PTR
        && ctx->tok->bytes > klcf->tokenize_threshold)
    {
        ctx->tok_where = NGX_HTTP_KVSERVE_TOK_POOL;

        if (ngx_http_kvserve_tok_post(ctx, klcf->tokenize_pool) == NGX_OK) {
            return;
        }
    }

#endif

    ctx->tok_where = NGX_HTTP_KVSERVE_TOK_INLINE;
    ctx->tok->rc = ngx_http_kvserve_tokenize(ctx->tok,
                                             &ngx_http_kvserve_tok);

    done(ctx);
}


/*
 * ---- rendering and tokenizing ------------------------------------------
 *
 * What follows down to ngx_http_kvserve_tokenize() runs in a thread-pool
 * thread for long prompts, so it touches no nginx pool, log, event or
 * configuration: its inputs were resolved on the event loop (the job),
 * its outputs are malloc'd ids and an error in the job.  The request's
 * JSON tree and the vocabulary are only read, and nothing on the event
 * loop touches this request's tree while the task runs (the request is
 * blocked).
 */

/* Chat: render with the template resolved on the event loop (the
 * request's tools in its context), tokenize with control tokens only
 * where the template wrote them (a Jinja template's prompt is refused
 * when client text, messages or tools, holds control-token text),
 * and with no BOS added: the template writes it where it wants one; the
 * cache_control breakpoints become pins (ngx_http_kvserve_cache.c). */
static ngx_int_t
ngx_http_kvserve_chat_ids(ngx_http_kvserve_tok_job_t *job,
    kvs_tok_ctx_t *tok, kvs_ids_t *ids, kvs_api_err_t *aerr)
{
    int                 rc;
    kvs_buf_t           text, spans;
    kvs_err_t           err;
    kvs_chat_args_t     args;
    const kvs_vocab_t  *v;

    v = job->vocab;

    ngx_memzero(&args, sizeof(args));
    ngx_memzero(&text, sizeof(text));
    ngx_memzero(&spans, sizeof(spans));

    if (v->bos >= 0) {
        args.bos = v->tokens[v->bos].text;
        args.bos_len = v->tokens[v->bos].len;
    }

    if (v->eos >= 0) {
        args.eos = v->tokens[v->eos].text;
        args.eos_len = v->tokens[v->eos].len;
    }

    args.add_generation_prompt = job->tokenize ? job->add_gen : 1;
    args.spans = &spans;
    args.tools = job->req->tools;

    rc = kvs_chat_render(&job->chat, job->req->messages, &args, &text, &err);

    /* a template run as written reports no content spans to guard */
    if (rc == KVS_OK && job->chat.jinja != NULL) {
        rc = kvs_chat_jinja_guard(v, job->req->messages, job->req->tools,
                                  &err);
    }

    /* kvserve_guard input=reject: the whole rendered prompt, once */
    if (rc == KVS_OK
        && ngx_http_kvserve_guard_check(job, (const char *) text.data,
                                        text.len, aerr)
           != NGX_OK)
    {
        kvs_buf_free(&text);
        kvs_buf_free(&spans);
        return NGX_ERROR;
    }

    if (rc == KVS_OK) {
        rc = kvs_tok_encode_limit(v, tok, (const char *) text.data, text.len,
                                  KVS_TOK_SPECIAL,
                                  (const kvs_span_t *) spans.data,
                                  spans.len / sizeof(kvs_span_t),
                                  job->max_ids, ids, &err);
    }

    if (rc == KVS_OK) {
        rc = ngx_http_kvserve_cache_pins(job, tok, &args,
                                         (const char *) text.data, text.len,
                                         (const kvs_span_t *) spans.data,
                                         spans.len / sizeof(kvs_span_t), ids,
                                         &err);
    }

    kvs_buf_free(&text);
    kvs_buf_free(&spans);

    if (rc == KVS_ETOOLONG) {
        kvs_api_budget_too_long(job->req, (uint32_t) job->max_ids, aerr);
        return NGX_ERROR;
    }

    /* KVS_EUNSUPPORTED: tool calling through a built-in chat format,
     * which the request asked for and the operator's format cannot do */
    if (rc == KVS_EINVAL || rc == KVS_EUNSUPPORTED) {
        kvs_api_err_from_msg(aerr, 400, NULL, err.msg);
        return NGX_ERROR;
    }

    if (rc != KVS_OK) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "%s", err.msg);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Completions: text with the vocabulary's BOS rule, or ids checked
 * against the vocabulary. */
static ngx_int_t
ngx_http_kvserve_prompt_ids(ngx_http_kvserve_tok_job_t *job, ngx_uint_t i,
    kvs_tok_ctx_t *tok, kvs_ids_t *ids, kvs_api_err_t *aerr)
{
    int                 rc;
    char                param[32];
    size_t              k;
    kvs_err_t           err;
    kvs_api_prompt_t   *p;
    const kvs_vocab_t  *v;

    v = job->vocab;
    p = &job->req->prompts[i];

    if (job->req->n_prompts > 1) {
        ngx_sprintf((u_char *) param, "prompt[%ui]%Z", i);
    } else {
        ngx_sprintf((u_char *) param, "prompt%Z");
    }

    if (p->text.ptr != NULL
        && ngx_http_kvserve_guard_check(job, p->text.ptr, p->text.len, aerr)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (p->text.ptr != NULL) {
        rc = kvs_tok_encode_limit(v, tok, p->text.ptr, p->text.len,
                                  job->tokenize
                                  ? job->tok_flags
                                  : (v->add_bos ? KVS_TOK_ADD_BOS : 0),
                                  NULL, 0, job->max_ids, ids, &err);
        if (rc == KVS_ETOOLONG) {
            kvs_api_budget_too_long(job->req, (uint32_t) job->max_ids, aerr);
            return NGX_ERROR;
        }

        if (rc != KVS_OK) {
            kvs_api_err_set(aerr, rc == KVS_EINVAL ? 400 : 500, param, NULL,
                            "%s", err.msg);
            return NGX_ERROR;
        }

    } else {
        for (k = 0; k < p->n_ids; k++) {
            if (p->ids[k] < 0 || (uint32_t) p->ids[k] >= v->n_tokens) {
                kvs_api_err_set(aerr, 400, param, NULL,
                                "Token id %d is out of the vocabulary of "
                                "%u tokens.", (int) p->ids[k],
                                (unsigned) v->n_tokens);
                return NGX_ERROR;
            }
        }

        if (kvs_ids_reserve(ids, p->n_ids) != KVS_OK) {
            kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
            return NGX_ERROR;
        }

        ngx_memcpy(ids->ids + ids->n, p->ids, p->n_ids * sizeof(int32_t));
        ids->n += p->n_ids;
    }

    /* /tokenize answers what there is, nothing included */
    if (ids->n == 0 && !job->tokenize) {
        kvs_api_err_set(aerr, 400, param, NULL,
                        "The prompt is empty and the model has no "
                        "beginning-of-text token to start from.");
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* Every part's ids into job->ids[]; stops at the first error (in
 * job->aerr), as the inline order did. */
static ngx_int_t
ngx_http_kvserve_tokenize(ngx_http_kvserve_tok_job_t *job,
    kvs_tok_ctx_t *tok)
{
    ngx_int_t   rc;
    ngx_uint_t  i;

    rc = NGX_OK;

    for (i = 0; i < job->n_parts && rc == NGX_OK; i++) {
        rc = job->chat_req
             ? ngx_http_kvserve_chat_ids(job, tok, &job->ids[i], &job->aerr)
             : ngx_http_kvserve_prompt_ids(job, i, tok, &job->ids[i],
                                           &job->aerr);
    }

    return rc;
}


#if (NGX_THREADS)

/*
 * Each pool thread's tokenizer scratch, kept warm between tasks and
 * freed when the thread exits (nginx ends its pool threads with
 * pthread_exit(), which runs the key's destructor).
 */
static pthread_key_t   ngx_http_kvserve_tok_key;
static pthread_once_t  ngx_http_kvserve_tok_once = PTHREAD_ONCE_INIT;
static int             ngx_http_kvserve_tok_key_ok;


static void
ngx_http_kvserve_tok_key_free(void *data)
{
    kvs_tok_ctx_free(data);
    free(data);
}


static void
ngx_http_kvserve_tok_key_init(void)
{
    ngx_http_kvserve_tok_key_ok =
        (pthread_key_create(&ngx_http_kvserve_tok_key,
                            ngx_http_kvserve_tok_key_free) == 0);
}


/* This thread's context, or NULL (the caller then uses one of its own
 * for the task). */
static kvs_tok_ctx_t *
ngx_http_kvserve_thread_tok(void)
{
    kvs_tok_ctx_t  *tok;

    if (pthread_once(&ngx_http_kvserve_tok_once,
                     ngx_http_kvserve_tok_key_init)
        != 0
        || !ngx_http_kvserve_tok_key_ok)
    {
        return NULL;
    }

    tok = pthread_getspecific(ngx_http_kvserve_tok_key);
    if (tok != NULL) {
        return tok;
    }

    tok = calloc(1, sizeof(kvs_tok_ctx_t));
    if (tok == NULL) {
        return NULL;
    }

    if (pthread_setspecific(ngx_http_kvserve_tok_key, tok) != 0) {
        free(tok);
        return NULL;
    }

    return tok;
}


/* The task, in a pool thread. */
static void
ngx_http_kvserve_tok_thread(void *data, ngx_log_t *log)
{
    ngx_http_kvserve_tok_job_t  *job = data;

    kvs_tok_ctx_t   own, *tok;

    job->start_ns = kvs_now_ns();

    tok = ngx_http_kvserve_thread_tok();
    if (tok == NULL) {
        ngx_memzero(&own, sizeof(own));
        tok = &own;
    }

    job->rc = ngx_http_kvserve_tokenize(job, tok);

    if (tok == &own) {
        kvs_tok_ctx_free(&own);
    }

    job->end_ns = kvs_now_ns();
}

#endif


/* Bytes of a JSON value's strings and keys, a few more per value: what a
 * template printing it with tojson writes, roughly. */
static size_t
ngx_http_kvserve_json_bytes(const json_t *j)
{
    size_t         i, n;
    const char    *key;
    const json_t  *v;

    n = 4;

    if (json_is_string(j)) {
        n += json_string_length(j);

    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v) {
            n += ngx_http_kvserve_json_bytes(v);
        }

    } else if (json_is_object(j)) {
        /* jansson's iteration takes no const; nothing here writes */
        json_object_foreach((json_t *) j, key, v) {
            n += ngx_strlen(key) + ngx_http_kvserve_json_bytes(v);
        }
    }

    return n;
}


/* Bytes of prompt text to tokenize: chat, the messages' contents (string
 * or text parts) and the tools and tool calls a template prints, once
 * more per cache breakpoint (its prefix is rendered and tokenized again,
 * at most the whole); completions, the text prompts (id prompts need
 * none). */
static size_t
ngx_http_kvserve_prompt_bytes(ngx_http_kvserve_ctx_t *ctx)
{
    size_t         n, i, k;
    const json_t  *m, *content, *part, *text;

    n = 0;

    if (!ctx->chat) {
        for (i = 0; i < ctx->req.n_prompts; i++) {
            if (ctx->req.prompts[i].text.ptr != NULL) {
                n += ctx->req.prompts[i].text.len;
            }
        }

        return n;
    }

    if (ctx->req.tools != NULL) {
        n += ngx_http_kvserve_json_bytes(ctx->req.tools);
    }

    for (i = 0; i < json_array_size(ctx->req.messages); i++) {
        m = json_array_get(ctx->req.messages, i);
        content = json_object_get(m, "content");

        if (json_object_get(m, "tool_calls") != NULL) {
            n += ngx_http_kvserve_json_bytes(json_object_get(m,
                                                             "tool_calls"));
        }

        if (json_is_string(content)) {
            n += json_string_length(content);
            continue;
        }

        for (k = 0; k < json_array_size(content); k++) {
            part = json_array_get(content, k);
            text = json_object_get(part, "text");

            if (json_is_string(text)) {
                n += json_string_length(text);
            }
        }
    }

    return n * (1 + ctx->req.n_breaks);
}


#if (NGX_THREADS)

/*
 * Back on the event loop.  The request was blocked (r->main->blocked),
 * as nginx blocks it for aio, so it is still here even if the client
 * left: then nginx has already terminated it as far as it could
 * (c->error) and finalizing it again frees it.
 */
static void
ngx_http_kvserve_tok_done(ngx_event_t *ev)
{
    uint64_t                     now;
    ngx_uint_t                   i;
    ngx_connection_t            *c;
    ngx_http_request_t          *r;
    ngx_http_kvserve_ctx_t      *ctx;
    ngx_http_kvserve_tok_job_t  *job;

    job = ev->data;
    ctx = job->ctx;
    r = ctx->r;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    r->main->blocked--;
    r->aio = 0;

    now = kvs_now_ns();

    ngx_log_debug6(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "kvserve: tokenized %uz bytes in the thread pool: "
                   "queued %uL ns, ran %uL ns, back %uL ns, hop %uL ns, "
                   "rc %i", job->bytes, job->start_ns - job->post_ns,
                   job->end_ns - job->start_ns, now - job->end_ns,
                   (now - job->post_ns) - (job->end_ns - job->start_ns),
                   job->rc);

    /* a client that closed just after its body gave no event of its
     * own (it came with the body's last bytes): epoll's RDHUP left
     * pending_eof, which ngx_http_test_reading() treats as gone too */
    if (!c->error && (c->read->eof || c->read->pending_eof)) {
        c->error = 1;
    }

    if (c->error) {
        /* already terminated by nginx (blocked) or not: finalizing it
         * once here frees it */
        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "kvserve: the client left while its prompt was "
                      "tokenized; the request is dropped");

        for (i = 0; i < job->n_parts; i++) {
            kvs_ids_free(&job->ids[i]);
        }

        ctx->finished = 1;
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        ngx_http_run_posted_requests(c);
        return;
    }

    job->done(ctx);

    ngx_http_run_posted_requests(c);
}


/* NGX_OK: the task is posted and the request blocked until it is back;
 * NGX_DECLINED: tokenize inline instead (the pool's queue is full). */
static ngx_int_t
ngx_http_kvserve_tok_post(ngx_http_kvserve_ctx_t *ctx, ngx_thread_pool_t *tp)
{
    ngx_thread_task_t           *task;
    ngx_http_request_t          *r;
    ngx_http_kvserve_tok_job_t  *job;

    r = ctx->r;
    job = ctx->tok;

    task = ngx_thread_task_alloc(r->pool, 0);
    if (task == NULL) {
        return NGX_DECLINED;
    }

    task->ctx = job;
    task->handler = ngx_http_kvserve_tok_thread;
    task->event.data = job;
    task->event.handler = ngx_http_kvserve_tok_done;

    job->post_ns = kvs_now_ns();

    if (ngx_thread_task_post(tp, task) != NGX_OK) {
        return NGX_DECLINED;
    }

    r->main->blocked++;
    r->aio = 1;

    /* a client that leaves now is seen (c->error) when the task is back */
    r->read_event_handler = ngx_http_test_reading;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "kvserve: %uz bytes of prompt to the thread pool",
                   job->bytes);

    return NGX_OK;
}

#endif
