/*
 * ngx_http_kvserve_engine.h: private to the worker's side of the engine
 * process: the connection (ngx_http_kvserve_engine.c), the requests sent
 * over it (ngx_http_kvserve_dispatch.c) and the process itself, its lease
 * and its watchdog (ngx_http_kvserve_spawn.c).
 *
 * Invariants: each worker that serves models has one
 * ngx_http_kvserve_engine_t per model (ngx_http_kvserve_engs[i] for
 * kvserve_model i, NULL elsewhere), each with its own socket, lease,
 * timers and table of requests; c is NULL while not connected, and ready
 * is set only once a HELLO naming exactly that model's file has come;
 * reason says why it is not ready.
 */

#ifndef NGX_HTTP_KVSERVE_ENGINE_H
#define NGX_HTTP_KVSERVE_ENGINE_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/un.h>

#include "ngx_http_kvserve.h"


#define NGX_HTTP_KVSERVE_REASON_LEN    256


typedef struct {
    ngx_uint_t                index;       /* the model's, in kvserve_model
                                              order */
    ngx_http_kvserve_model_t *model;
    u_char                    reason[NGX_HTTP_KVSERVE_REASON_LEN];
    size_t                    reason_len;  /* why it is not ready */

    ngx_connection_t         *c;           /* NULL: not connected */
    ngx_uint_t                ready;       /* HELLO seen and checked */
    kvs_wire_hello_t          hello;

    kvs_buf_t                 rbuf;        /* bytes read, not yet a frame */
    kvs_buf_t                 wbuf;        /* frames not yet sent ... */
    size_t                    wpos;        /* ... from here */

    ngx_http_kvserve_sub_t  **subs;        /* [n_subs] by slot, or NULL */
    ngx_uint_t                n_subs;
    ngx_uint_t                free_hint;
    uint32_t                  seq;

    ngx_queue_t               waiting;     /* subs waiting for an engine */

    ngx_event_t               reconnect;
    ngx_connection_t          dummy;       /* the timer's ev->data: the
                                              debug log reads its fd */
    ngx_msec_t                last_spawn;

    ngx_event_t               ping;        /* the watchdog, cancelable */
    ngx_msec_t                last_rx;     /* bytes came from the engine,
                                              or we connected */
    uint64_t                  ping_seq;

    kvs_wire_out_t            out;         /* decode scratch, reused */
    kvs_wire_stats_t          stats;

    ngx_cycle_t              *cycle;
    ngx_http_kvserve_main_conf_t  *kmcf;
    u_char                    sock_path[sizeof(((struct sockaddr_un *) 0)
                                               ->sun_path)];
    u_char                    lock_path[NGX_MAX_PATH];
} ngx_http_kvserve_engine_t;


extern ngx_http_kvserve_engine_t  *ngx_http_kvserve_engs;   /* [n] */
extern ngx_uint_t                  ngx_http_kvserve_n_engs;


/* the connection (ngx_http_kvserve_engine.c) */
/* kvserve_model i's engine, or NULL (none in this process). */
ngx_http_kvserve_engine_t *ngx_http_kvserve_engine_of(ngx_uint_t i);
ngx_int_t ngx_http_kvserve_engine_flush(ngx_http_kvserve_engine_t *e);
void ngx_http_kvserve_engine_lost(ngx_http_kvserve_engine_t *e,
    const char *why);
/* Sets e's reason: "engine for model "x" " then fmt's text. */
void ngx_http_kvserve_engine_why(ngx_http_kvserve_engine_t *e,
    const char *fmt, ...);

/* the requests (ngx_http_kvserve_dispatch.c) */
/* The STATS for every engine in progress, set up by init_process. */
extern ngx_queue_t                 ngx_http_kvserve_alls;
/* One whole frame; NGX_ERROR: the connection must go, NGX_DECLINED: it
 * is not this model's engine. */
ngx_int_t ngx_http_kvserve_engine_frame(ngx_http_kvserve_engine_t *e,
    const uint8_t *f, kvs_wire_hdr_t *h);

/* the process (ngx_http_kvserve_spawn.c) */
void ngx_http_kvserve_engine_watchdog(ngx_event_t *ev);
/* DRAIN to each engine in the directory whose model is none of engs'. */
void ngx_http_kvserve_engine_sweep(ngx_cycle_t *cycle,
    ngx_http_kvserve_engine_t *engs, ngx_uint_t n);
/* Takes the lease and forks the engine, unless the backoff holds. */
void ngx_http_kvserve_engine_spawn(ngx_http_kvserve_engine_t *e);

#endif /* NGX_HTTP_KVSERVE_ENGINE_H */
