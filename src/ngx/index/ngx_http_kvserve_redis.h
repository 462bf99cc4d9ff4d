/*
 * ngx_http_kvserve_redis: Redis for the prefix index (issue 8,
 * docs/prefix-index.md) on nginx's event loop: hiredis' async API with
 * an adapter for nginx events, in the style of hiredis' adapters/ (the
 * connection's fd becomes an ngx_connection_t whose read and write
 * events call redisAsyncHandleRead/Write).
 *
 * One connection per worker and per address, made on first use and
 * shared by the index publisher (engine hosts) and the router
 * (gateways).  Nothing here blocks: the connect is non-blocking, a batch
 * of commands is pipelined in one write, replies come back through a
 * callback.  While the connection is down every batch fails at once
 * (done called with replies NULL, before ..._batch returns; batches
 * made before the very first connect completes wait for it), the
 * connection is retried with backoff (100 ms doubling to 5 s), and one
 * log line is written per change of state (up; down, with hiredis'
 * reason), not per failed batch.  A batch that takes longer than its
 * timeout fails the same way and the connection is dropped (a Redis that
 * answers slowly is as good as down for routing).
 *
 * Replies are converted into kvs_index_reply_t (src/index), whose
 * parsers trust nothing; they live in a pool that is destroyed after
 * done returns.
 *
 * Ownership: a batch's owner may cancel it (its request ended): done is
 * then never called, and the replies, when they come, are read and
 * dropped.  The command bytes are copied by hiredis at send time, so the
 * caller's kvs_index_cmds_t may be reused at once.
 */

#ifndef NGX_HTTP_KVSERVE_REDIS_H
#define NGX_HTTP_KVSERVE_REDIS_H

#include <ngx_config.h>
#include <ngx_core.h>

#include "index/kvs_index_schema.h"


typedef struct ngx_http_kvserve_redis_s        ngx_http_kvserve_redis_t;
typedef struct ngx_http_kvserve_redis_batch_s  ngx_http_kvserve_redis_batch_t;

/* replies [n] in the order of the commands, or NULL (n 0) when the batch
 * failed: Redis down, the connection lost, or the timeout */
typedef void (*ngx_http_kvserve_redis_done_pt)(void *data,
    const kvs_index_reply_t *replies, size_t n);


/*
 * Resolves the "redis=<host>[:port]" parameter value (port 6379 when
 * none) at configuration time into "ip:port" in *addr: hiredis would
 * resolve a name with a blocking getaddrinfo at every connect.  Logs the
 * error, naming the value and the directive, and returns NGX_ERROR.
 */
ngx_int_t ngx_http_kvserve_redis_resolve(ngx_conf_t *cf, ngx_str_t *directive,
    ngx_str_t *value, ngx_str_t *addr);

/* This worker's connection to addr ("host:port", "[v6]:port"), made on
 * first use; NULL when out of memory or addr is not host:port (logged).
 * Give a numeric address (ngx_parse_url's addrs[0].name): hiredis would
 * resolve a name with a blocking getaddrinfo at every connect. */
ngx_http_kvserve_redis_t *ngx_http_kvserve_redis_get(ngx_cycle_t *cycle,
    ngx_str_t *addr);

/* 1 while connected, else 0. */
ngx_uint_t ngx_http_kvserve_redis_up(ngx_http_kvserve_redis_t *rd);

/*
 * Sends every command of cmds, pipelined; done(data, replies, n) once
 * when all have answered, or with NULL on failure (possibly before this
 * returns).  timeout_ms 0: none.  Returns a handle for cancel, or NULL
 * when the batch failed at once (done was called).
 */
ngx_http_kvserve_redis_batch_t *ngx_http_kvserve_redis_batch(
    ngx_http_kvserve_redis_t *rd, const kvs_index_cmds_t *cmds,
    ngx_msec_t timeout_ms, ngx_http_kvserve_redis_done_pt done, void *data);

/* done will not be called for this batch.  Only before done was
 * called: the handle is invalid from then on. */
void ngx_http_kvserve_redis_cancel(ngx_http_kvserve_redis_batch_t *b);

/* Closes every connection of this worker: pending batches fail (done
 * with NULL), later batches too.  The index module's exit_process calls
 * it, after the other kvserve modules' (it is the last module). */
void ngx_http_kvserve_redis_exit(ngx_cycle_t *cycle);

/* Wall-clock ms since 1970, from nginx's cached time: what the index's
 * records are stamped with and aged by (host records, trims), on every
 * host alike; kvs_now_ns() is per host and does not compare. */
uint64_t ngx_http_kvserve_redis_now_ms(void);

#endif /* NGX_HTTP_KVSERVE_REDIS_H */
