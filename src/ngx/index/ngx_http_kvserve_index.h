/*
 * ngx_http_kvserve_index: the engine host's side of the prefix index
 * (docs/prefix-index.md): the directive
 *
 *   kvserve_index redis=<host:port> [host_id=<id>] [advertise=<url>]
 *                 [heartbeat=<time>] [ttl=<time>];          http
 *
 * and its publisher, a module of its own in the module's .so
 * (ngx_http_kvserve_index_module).  One worker per nginx publishes (the
 * subscriber: worker 0, or the single process): after the engine's
 * HELLO it sends SUBSCRIBE, the engine answers with INDEX frames (a full
 * listing, then what each step inserted into and evicted from its radix
 * tree), and each frame becomes one pipelined batch of HSET + PEXPIRE /
 * HDEL on this worker's Redis connection (ngx_http_kvserve_redis.c); a
 * heartbeat timer writes the host record (SET .. PX 3 heartbeats) and
 * its member of kvs:v1:hosts.  When Redis comes back after a failure the
 * publisher asks the engine for a full listing again (SUBSCRIBE), so
 * Redis catches up without anyone blocking.
 *
 * Host ids: the first model's is host_id= (default: this machine's
 * hostname and the first listen port, "<hostname>-<port>", characters
 * outside [A-Za-z0-9._-] replaced by '-', the hostname cut to 58
 * bytes; the hostname alone without a listen); a second model's is
 * "<host_id>.1", and so on.  advertise= defaults to
 * "http://<first listen address>:<port>", 127.0.0.1 for a wildcard.
 */

#ifndef NGX_HTTP_KVSERVE_INDEX_H
#define NGX_HTTP_KVSERVE_INDEX_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "wire/kvs_wire.h"
#include "ngx_http_kvserve_redis.h"


extern ngx_module_t  ngx_http_kvserve_index_module;

/* 1 when this process publishes: kvserve_index is set, the http block
 * serves models, and this is worker 0 (or the only process). */
ngx_uint_t ngx_http_kvserve_index_subscriber(ngx_cycle_t *cycle);

/* The address ("ip:port", resolved when the configuration was read) of
 * kvserve_index's Redis, or NULL when it is not set: for other users of
 * ngx_http_kvserve_redis_get (the gateway may share it). */
ngx_str_t *ngx_http_kvserve_index_redis_addr(ngx_cycle_t *cycle);

/* The engine said HELLO and this worker subscribed (engine.c): its
 * incarnation, epochs and block sizes start the heartbeat at once. */
void ngx_http_kvserve_index_hello(const kvs_wire_hello_t *hello,
    ngx_uint_t model);

/* One decoded INDEX frame (engine.c): names and load into Redis. */
void ngx_http_kvserve_index_publish(const kvs_wire_index_t *ix);

/* (ngx_http_kvserve_engine.c) Sends SUBSCRIBE to the engine connected
 * now: NGX_OK, or NGX_DECLINED when none is ready, NGX_ERROR when the
 * connection was lost on the way. */
ngx_int_t ngx_http_kvserve_engine_subscribe(void);

#endif /* NGX_HTTP_KVSERVE_INDEX_H */
