/*
 * ngx_http_kvserve_limit.h: token-weighted rate limits
 * (ngx_http_kvserve_limit_{conf,zone,admit}.c, its own nginx module in
 * the same .so), as the completion request's flow and the metrics see
 * them.
 *
 * A request is admitted after it is tokenized and before it is sent to
 * the engine: every kvserve_limit zone that applies charges it its prompt
 * plus its reserved output at once, under the zone's mutex; when the
 * request's pool goes (finished, stopped early, failed, client gone) the
 * output it did not generate is refunded, once.
 */

#ifndef NGX_HTTP_KVSERVE_LIMIT_H
#define NGX_HTTP_KVSERVE_LIMIT_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx/kvserve/ngx_http_kvserve_completions.h"


/* What admission calls when a delayed request may go on. */
typedef void (*ngx_http_kvserve_limit_resume_pt)(ngx_http_kvserve_ctx_t *ctx);

extern ngx_module_t  ngx_http_kvserve_limit_module;

/*
 * NGX_OK: admitted, go on now (no limit applies, or it passed);
 * NGX_AGAIN: admitted after a delay: resume(ctx) is called from a timer;
 * NGX_DONE: rejected, answered and finalized here (ctx->finished set).
 */
ngx_int_t ngx_http_kvserve_limit_admit(ngx_http_kvserve_ctx_t *ctx,
    ngx_http_kvserve_limit_resume_pt resume);

/* ctx->tenant: the hashed key (ngx_http_kvserve_hash_hex) of the first
 * kvserve_limit zone that applies (its key not empty, or empty under
 * empty=shared: then the hash of the empty key, one tenant for every
 * keyless request), the fair share's tenant in the engine; none
 * applies: empty. */
ngx_int_t ngx_http_kvserve_limit_tenant(ngx_http_kvserve_ctx_t *ctx);

/* Appends every zone's counters (Prometheus text) to out. */
ngx_int_t ngx_http_kvserve_limit_metrics(ngx_http_request_t *r,
    kvs_buf_t *out);

#endif /* NGX_HTTP_KVSERVE_LIMIT_H */
