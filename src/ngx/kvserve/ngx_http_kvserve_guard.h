/*
 * ngx_http_kvserve_guard.h: the safety layer's nginx side (its own
 * module, ngx_http_kvserve_guard_module): kvserve_guard_zone,
 * kvserve_guard, kvserve_max_prompt_tokens, kvserve_max_tokens, the
 * $kvserve_guard variable and the guard's metrics; docs/guard.md.
 *
 * The phases call it at four points: prepare (the caps on the request,
 * the input guard given to the tokenizing job), the job itself (the
 * rendered prompt checked once, in whatever thread tokenizes), after
 * tokenizing (the prompt tokens' cap, the input refusal recorded), and
 * each OUT frame of a choice (its text through the choice's stream).
 */

#ifndef NGX_HTTP_KVSERVE_GUARD_H
#define NGX_HTTP_KVSERVE_GUARD_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_completions.h"

extern ngx_module_t  ngx_http_kvserve_guard_module;

/* On the event loop, before tokenizing: caps and the job's guard. */
ngx_int_t ngx_http_kvserve_guard_prepare(ngx_http_kvserve_ctx_t *ctx,
    kvs_api_err_t *aerr);
/* In the tokenizing job (any thread): NGX_ERROR with *aerr when the
 * text is refused. */
ngx_int_t ngx_http_kvserve_guard_check(ngx_http_kvserve_tok_job_t *job,
    const char *text, size_t len, kvs_api_err_t *aerr);
/* On the event loop, once tokenized: the refusal recorded, the prompt
 * tokens' cap. */
ngx_int_t ngx_http_kvserve_guard_tokenized(ngx_http_kvserve_ctx_t *ctx,
    kvs_api_err_t *aerr);
/* A choice's OUT frame: o->text replaced by what the guard lets out; a
 * stop sets o->finish to KVS_FINISH_CONTENT_FILTER. */
ngx_int_t ngx_http_kvserve_guard_out(ngx_http_kvserve_ctx_t *ctx,
    ngx_uint_t index, kvs_engine_out_t *o);
/* The matches counters in Prometheus text. */
ngx_int_t ngx_http_kvserve_guard_metrics(ngx_http_request_t *r,
    kvs_buf_t *out);

#endif /* NGX_HTTP_KVSERVE_GUARD_H */
