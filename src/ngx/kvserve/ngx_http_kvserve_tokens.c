/*
 * ngx_http_kvserve_tokens: POST /tokenize and /detokenize in kvserve
 * locations (vLLM's and llama-server's shapes, kvs_api_tok.h), routed by
 * the path's last segment, so that `location = /tokenize { kvserve; }`
 * and a location holding /v1/ alike serve them.
 *
 * A body is read as a completion's is (client_max_body_size, the same
 * 413), parsed by kvs_api_tok, and its model chosen: the named one, or
 * the only one served when none is named (llama-server's clients name
 * none).  /tokenize renders and tokenizes with the completions' job
 * (ngx_http_kvserve_tokenize.c), so a long prompt goes to the
 * kvserve_tokenize_threads pool and never holds the event loop, and
 * messages render with the same template a chat completion would use;
 * /detokenize decodes on the event loop (a decode is a table lookup per
 * id, bounded by the body's size).
 *
 * Invariants: the parsed body moves into the request's context at once,
 * so its pool cleanup frees it on every path; nothing reaches the
 * engine, and nothing is counted in /metrics.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"
#include "api/kvs_api_tok.h"


static void ngx_http_kvserve_tokens_body(ngx_http_request_t *r);
static void ngx_http_kvserve_tokens_done(ngx_http_kvserve_ctx_t *ctx);


ngx_int_t
ngx_http_kvserve_tokens(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    ngx_http_kvserve_ctx_t    *ctx;

    rc = ngx_http_kvserve_body_too_large(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    ctx = ngx_http_kvserve_ctx_new(r, ngx_http_kvserve_timeout);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->t.start_ns = kvs_now_ns();

    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, ngx_http_kvserve_tokens_body);
    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


/* The named model, or the only one; NGX_ERROR with *aerr otherwise. */
static ngx_int_t
ngx_http_kvserve_tokens_model(ngx_http_kvserve_ctx_t *ctx,
    const kvs_api_str_t *name, kvs_api_err_t *aerr)
{
    ngx_uint_t                     i, n;
    ngx_http_kvserve_model_t      *m;
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = ngx_http_get_module_main_conf(ctx->r, ngx_http_kvserve_module);
    m = kmcf->models->elts;
    n = kmcf->models->nelts;

    if (name->ptr == NULL) {
        if (n != 1) {
            kvs_api_err_set(aerr, 400, "model", "missing_required_parameter",
                            "Missing required parameter: 'model' (this "
                            "server serves %u models).", (unsigned) n);
            return NGX_ERROR;
        }

        i = 0;

    } else {
        for (i = 0; i < n; i++) {
            if (m[i].name.len == name->len
                && ngx_strncmp(m[i].name.data, name->ptr, name->len) == 0)
            {
                break;
            }
        }

        if (i == n) {
            kvs_api_err_set(aerr, 404, "model", "model_not_found",
                            "The model `%s` does not exist or you do not "
                            "have access to it.", name->ptr);
            return NGX_ERROR;
        }
    }

    ctx->model = &m[i];
    ctx->model_index = i;

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_detokenize(ngx_http_kvserve_ctx_t *ctx, const u_char *data,
    size_t len, size_t max_body, kvs_api_err_t *aerr)
{
    int                 rc;
    kvs_buf_t           text, body;
    kvs_err_t           err;
    kvs_api_tok_t       t;
    const kvs_vocab_t  *v;

    if (kvs_api_detokenize_parse(&t, (const char *) data, len, max_body,
                                 aerr)
        != KVS_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_kvserve_tokens_model(ctx, &t.req.model, aerr) != NGX_OK) {
        kvs_api_tok_free(&t);
        return NGX_ERROR;
    }

    v = ctx->model->vocab;

    if (kvs_api_tok_check_ids(&t, v->n_tokens, aerr) != KVS_OK) {
        kvs_api_tok_free(&t);
        return NGX_ERROR;
    }

    ngx_memzero(&text, sizeof(text));
    ngx_memzero(&body, sizeof(body));

    /* special tokens' text shown, as both servers' detokenize do */
    rc = kvs_tok_decode(v, t.ids, t.n_ids, KVS_DETOK_SPECIAL, &text, &err);

    if (rc == KVS_OK) {
        rc = kvs_api_detokenize_json(&t, (const char *) text.data, text.len,
                                     &body);
    }

    kvs_buf_free(&text);
    kvs_api_tok_free(&t);

    if (rc != KVS_OK) {
        kvs_buf_free(&body);
        kvs_api_err_set(aerr, 500, NULL, NULL, "The text could not be "
                        "decoded.");
        if (aerr != NULL) {
            ngx_cpystrn((u_char *) aerr->type, (u_char *) "server_error",
                        sizeof(aerr->type));
        }
        return NGX_ERROR;
    }

    ctx->finished = 1;
    ngx_http_finalize_request(ctx->r,
                              ngx_http_kvserve_send_json(ctx->r, NGX_HTTP_OK,
                                                         &body));
    return NGX_OK;
}


/* The body moves into ctx->req; the tokenizing job is set up as for a
 * completion, with /tokenize's options. */
static ngx_int_t
ngx_http_kvserve_tokenize_start(ngx_http_kvserve_ctx_t *ctx,
    const u_char *data, size_t len, size_t max_body, kvs_api_err_t *aerr)
{
    kvs_api_tok_t                t;
    const kvs_vocab_t           *v;
    ngx_http_kvserve_tok_job_t  *job;

    if (kvs_api_tokenize_parse(&t, (const char *) data, len, max_body, aerr)
        != KVS_OK)
    {
        return NGX_ERROR;
    }

    ctx->req = t.req;
    ngx_memzero(&t.req, sizeof(t.req));

    if (ngx_http_kvserve_tokens_model(ctx, &ctx->req.model, aerr)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* the template's errors name the model as the client would */
    ctx->req.model.ptr = (const char *) ctx->model->name.data;
    ctx->req.model.len = ctx->model->name.len;

    /* cache breakpoints are a completion's business */
    ctx->req.n_breaks = 0;

    /* no parts: nothing goes to the engine (the job has its one) */
    ctx->chat = ctx->req.kind == KVS_API_CHAT;

    job = ngx_pcalloc(ctx->r->pool, sizeof(ngx_http_kvserve_tok_job_t));
    if (job == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    job->ids = ngx_pcalloc(ctx->r->pool, sizeof(kvs_ids_t));
    if (job->ids == NULL) {
        kvs_api_err_set(aerr, 500, NULL, NULL, "out of memory");
        return NGX_ERROR;
    }

    v = ctx->model->vocab;

    job->ctx = ctx;
    job->req = &ctx->req;
    job->vocab = v;
    job->max_ids = KVS_TOK_NO_LIMIT;       /* the client compares */
    job->n_parts = 1;
    job->chat_req = ctx->chat;
    job->tokenize = 1 + t.shape;
    job->tok_flags = (t.add_special && v->add_bos ? KVS_TOK_ADD_BOS : 0)
                     | (t.parse_special ? KVS_TOK_SPECIAL : 0);
    job->add_gen = t.add_generation_prompt ? 1 : 0;
    ctx->tok = job;

    if (ctx->chat
        && ngx_http_kvserve_chat_resolve(ctx, &job->chat, aerr) != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_http_kvserve_tok_start(ctx, ngx_http_kvserve_tokens_done);

    return NGX_OK;
}


static void
ngx_http_kvserve_tokens_body(ngx_http_request_t *r)
{
    u_char                    *data;
    size_t                     len;
    ngx_int_t                  rc;
    kvs_api_err_t              aerr;
    ngx_http_kvserve_ctx_t    *ctx;
    ngx_http_core_loc_conf_t  *clcf;

    ctx = ngx_http_get_module_ctx(r, ngx_http_kvserve_module);
    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    ctx->t.body_ns = kvs_now_ns();

    if (ngx_http_kvserve_body_bytes(r, &data, &len) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ngx_http_kvserve_route_tokens(r) == 1) {
        rc = ngx_http_kvserve_detokenize(ctx, data, len,
                                         (size_t) clcf->client_max_body_size,
                                         &aerr);
    } else {
        rc = ngx_http_kvserve_tokenize_start(ctx, data, len,
                                             (size_t)
                                             clcf->client_max_body_size,
                                             &aerr);
    }

    if (rc != NGX_OK) {
        rc = ngx_http_kvserve_api_error(r, &aerr);
        ctx->finished = 1;
        ngx_http_finalize_request(r, rc);
    }
}


/* Tokenized (here or in the pool): the ids, or the error. */
static void
ngx_http_kvserve_tokens_done(ngx_http_kvserve_ctx_t *ctx)
{
    uint32_t                     n_ctx;
    ngx_int_t                    rc;
    kvs_buf_t                    body;
    kvs_api_tok_t                t;
    ngx_http_kvserve_tok_job_t  *job;

    job = ctx->tok;
    ctx->t.tokenize_ns = kvs_now_ns();

    if (job->rc != NGX_OK) {
        kvs_ids_free(&job->ids[0]);
        rc = ngx_http_kvserve_api_error(ctx->r, &job->aerr);
        ctx->finished = 1;
        ngx_http_finalize_request(ctx->r, rc);
        return;
    }

    /* only the shape is read from it */
    ngx_memzero(&t, sizeof(t));
    t.shape = (unsigned) (job->tokenize - 1);

    n_ctx = ctx->model->model != NULL ? ctx->model->model->hp.n_ctx_train
                                      : 0;

    ngx_memzero(&body, sizeof(body));

    if (kvs_api_tokenize_json(&t, job->ids[0].ids, job->ids[0].n, n_ctx,
                              &body)
        != KVS_OK)
    {
        kvs_ids_free(&job->ids[0]);
        kvs_buf_free(&body);
        rc = ngx_http_kvserve_error_json(ctx->r,
                                         NGX_HTTP_INTERNAL_SERVER_ERROR,
                                         "out of memory", NULL, NULL);
        ctx->finished = 1;
        ngx_http_finalize_request(ctx->r, rc);
        return;
    }

    kvs_ids_free(&job->ids[0]);

    ctx->finished = 1;
    ngx_http_finalize_request(ctx->r,
                              ngx_http_kvserve_send_json(ctx->r, NGX_HTTP_OK,
                                                         &body));
}
