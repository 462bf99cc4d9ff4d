/*
 * ngx_http_kvserve_engine: the worker's side of the engine process
 * (/work/shared/ENGINE-PROCESS-NOTES.md §4.4, docs/engine-process.md):
 * the worker's connection to each engine (connecting, reading frames,
 * writing, losing it) and what the rest of the module may ask of it
 * (whether a model's engine is available, and why not; its HELLO).  The
 * requests sent over it and the dispatch of its frames are
 * ngx_http_kvserve_dispatch.c; the process itself (fork, lease, backoff,
 * watchdog) is ngx_http_kvserve_spawn.c.
 *
 * One engine process per model: each worker keeps one unix stream
 * connection to each model's engine (<engine_dir>/m-<key>.sock, key the
 * FNV-1a 64 of the model's name, so that a reload that reorders models
 * finds each where it was), registered as an ordinary nginx connection
 * (edge-triggered: read and write until EAGAIN), and reconnects from a
 * cancelable timer when it is lost, so a quitting worker is never held up
 * by it.  A model's engine that is lost or cannot start stops only that
 * model: its requests wait for the next one (and get 503 naming the
 * model and the reason after kvserve_engine_wait), the others go on.
 *
 * When the engine goes away every sub it held is told (EV_LOST) after
 * being taken out of the table, so its owner may send it again at once:
 * it is then queued until the next engine says HELLO.
 *
 * `nginx -s reload` leaves the engines running, the new workers connect
 * to them (HELLO names the same files) and the old ones finish their
 * streams on their own connections.  A reload that changes a model's
 * file finds that model's HELLO naming another file: the new worker
 * sends DRAIN and reconnects after the usual delay; that old engine stops
 * listening, releases its lease, serves the old workers to the end and
 * exits, and the next worker that finds no socket forks the engine of
 * the new file.  The other models' engines, and their caches, stay.  A
 * worker shutting down never sends DRAIN: it is the older configuration,
 * and the engine it finds may be the newer one's.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/socket.h>
#include <sys/un.h>

#include "ngx_http_kvserve_engine.h"
#include "base/kvs_hash.h"

#define NGX_HTTP_KVSERVE_RECONNECT    50      /* ms between tries */
#define NGX_HTTP_KVSERVE_READ_CHUNK   65536


static void ngx_http_kvserve_engine_connect(ngx_event_t *ev);
static void ngx_http_kvserve_engine_read(ngx_event_t *rev);
static void ngx_http_kvserve_engine_write(ngx_event_t *wev);


ngx_http_kvserve_engine_t  *ngx_http_kvserve_engs;
ngx_uint_t                  ngx_http_kvserve_n_engs;


ngx_http_kvserve_engine_t *
ngx_http_kvserve_engine_of(ngx_uint_t i)
{
    return (ngx_http_kvserve_engs != NULL && i < ngx_http_kvserve_n_engs)
           ? &ngx_http_kvserve_engs[i] : NULL;
}


void
ngx_http_kvserve_engine_why(ngx_http_kvserve_engine_t *e, const char *fmt,
    ...)
{
    u_char   *p, *last;
    va_list   args;

    last = e->reason + sizeof(e->reason);
    p = ngx_snprintf(e->reason, last - e->reason, "engine for model \"%V\" ",
                     &e->model->name);

    va_start(args, fmt);
    p = ngx_vslprintf(p, last, fmt, args);
    va_end(args);

    e->reason_len = p - e->reason;
}


ngx_int_t
ngx_http_kvserve_engine_init_process(ngx_cycle_t *cycle)
{
    uint64_t                       key;
    ngx_uint_t                     i, n;
    ngx_http_kvserve_model_t      *m;
    ngx_http_kvserve_engine_t     *e, *engs;
    ngx_http_kvserve_main_conf_t  *kmcf;

    kmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_kvserve_module);

    if (kmcf == NULL || !kmcf->used || kmcf->models->nelts == 0
        || kmcf->engine_dir == NULL)
    {
        return NGX_OK;
    }

    /* the cache manager and loader run init_process too */
    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    n = kmcf->models->nelts;
    m = kmcf->models->elts;

    /* the socket takes "<dir>/m-<16 hex>.sock.<pid>" while it is bound */
    if (kmcf->engine_dir->name.len + sizeof("/m-0123456789abcdef.sock."
                                            "4294967295")
        > sizeof(engs->sock_path))
    {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "kvserve_engine_dir \"%V\" is too long for a unix "
                      "socket path", &kmcf->engine_dir->name);
        return NGX_ERROR;
    }

    engs = ngx_pcalloc(cycle->pool, n * sizeof(ngx_http_kvserve_engine_t));
    if (engs == NULL) {
        return NGX_ERROR;
    }

    ngx_queue_init(&ngx_http_kvserve_alls);

    for (i = 0; i < n; i++) {
        e = &engs[i];
        e->index = i;
        e->model = &m[i];
        e->cycle = cycle;
        e->kmcf = kmcf;
        ngx_queue_init(&e->waiting);

        key = m[i].key;

        ngx_sprintf(e->sock_path, "%V/m-%016uxL.sock%Z",
                    &kmcf->engine_dir->name, key);
        ngx_sprintf(e->lock_path, "%V/m-%016uxL.lock%Z",
                    &kmcf->engine_dir->name, key);

        ngx_http_kvserve_engine_why(e, "is starting");

        e->dummy.fd = (ngx_socket_t) -1;
        e->dummy.data = e;
        e->reconnect.handler = ngx_http_kvserve_engine_connect;
        e->reconnect.data = &e->dummy;
        e->reconnect.log = cycle->log;
        e->reconnect.cancelable = 1;

        e->ping.handler = ngx_http_kvserve_engine_watchdog;
        e->ping.data = &e->dummy;
        e->ping.log = cycle->log;
        e->ping.cancelable = 1;
    }

    ngx_http_kvserve_engs = engs;
    ngx_http_kvserve_n_engs = n;

    /* one worker of the new configuration retires the engines of the
     * models it dropped */
    if (ngx_worker == 0 || ngx_process == NGX_PROCESS_SINGLE) {
        ngx_http_kvserve_engine_sweep(cycle, engs, n);
    }

    for (i = 0; i < n; i++) {
        ngx_http_kvserve_engine_connect(&engs[i].reconnect);
    }

    return NGX_OK;
}


void
ngx_http_kvserve_engine_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                  i;
    ngx_http_kvserve_engine_t  *e;

    for (i = 0; i < ngx_http_kvserve_n_engs; i++) {
        e = &ngx_http_kvserve_engs[i];

    if (e->reconnect.timer_set) {
        ngx_del_timer(&e->reconnect);
    }

    if (e->ping.timer_set) {
        ngx_del_timer(&e->ping);
    }

    /* nginx checks for open sockets after exit_process */
    if (e->c != NULL) {
        ngx_close_connection(e->c);
        e->c = NULL;
    }

    kvs_buf_free(&e->rbuf);
    kvs_buf_free(&e->wbuf);
    kvs_engine_out_free(&e->out.out);
    }

    ngx_http_kvserve_engs = NULL;
    ngx_http_kvserve_n_engs = 0;
}


const kvs_wire_hello_t *
ngx_http_kvserve_engine_hello(void)
{
    ngx_uint_t  i;

    for (i = 0; i < ngx_http_kvserve_n_engs; i++) {
        if (ngx_http_kvserve_engs[i].ready) {
            return &ngx_http_kvserve_engs[i].hello;
        }
    }

    return NULL;
}


const kvs_wire_hello_t *
ngx_http_kvserve_engine_hello_of(ngx_uint_t i)
{
    ngx_http_kvserve_engine_t  *e;

    e = ngx_http_kvserve_engine_of(i);

    return (e != NULL && e->ready) ? &e->hello : NULL;
}


ngx_int_t
ngx_http_kvserve_engine_available(ngx_uint_t i, ngx_str_t *why)
{
    ngx_http_kvserve_engine_t  *e;

    e = ngx_http_kvserve_engine_of(i);

    if (e == NULL) {
        ngx_str_set(why, "no engine in this process");
        return NGX_DECLINED;
    }

    if (e->ready) {
        ngx_str_null(why);
        return NGX_OK;
    }

    why->data = e->reason;
    why->len = e->reason_len;

    return NGX_DECLINED;
}


const kvs_wire_model_t *
ngx_http_kvserve_engine_model(const ngx_http_kvserve_model_t *m)
{
    ngx_uint_t  i;

    /* a ready HELLO names exactly its model (checked by
     * ngx_http_kvserve_engine_hello_ok) */
    for (i = 0; i < ngx_http_kvserve_n_engs; i++) {
        if (ngx_http_kvserve_engs[i].model == m) {
            return ngx_http_kvserve_engs[i].ready
                   ? &ngx_http_kvserve_engs[i].hello.models[0] : NULL;
        }
    }

    return NULL;
}


uint32_t
ngx_http_kvserve_kv_dtype(const ngx_http_kvserve_model_t *m)
{
    const kvs_wire_model_t  *wm;

    wm = ngx_http_kvserve_engine_model(m);

    return wm != NULL && kvs_kv_dtype_elem(wm->kv_dtype) != 0
           ? wm->kv_dtype : m->kv_dtype;
}


uint64_t
ngx_http_kvserve_kv_bpt(const ngx_http_kvserve_model_t *m)
{
    const kvs_hparams_t  *hp;

    hp = &m->model->hp;

    return kvs_kv_bytes_per_token(ngx_http_kvserve_kv_dtype(m), hp->n_layer,
                                  hp->n_head_kv, hp->head_dim_k,
                                  hp->head_dim_v, m->kv_block);
}


/* Sends until the kernel takes no more; NGX_ERROR: the engine is lost
 * (and every sub was told). */
ngx_int_t
ngx_http_kvserve_engine_flush(ngx_http_kvserve_engine_t *e)
{
    ssize_t            n;
    ngx_err_t          errn;
    ngx_connection_t  *c;

    c = e->c;
    if (c == NULL) {
        return NGX_ERROR;
    }

    while (e->wpos < e->wbuf.len) {
        n = send(c->fd, e->wbuf.data + e->wpos, e->wbuf.len - e->wpos,
                 MSG_NOSIGNAL);

        if (n > 0) {
            e->wpos += n;
            continue;
        }

        errn = ngx_socket_errno;

        if (n == -1 && errn == NGX_EINTR) {
            continue;
        }

        if (n == -1 && errn == NGX_EAGAIN) {
            if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
                ngx_http_kvserve_engine_lost(e, "write event failed");
                return NGX_ERROR;
            }
            return NGX_AGAIN;
        }

        ngx_log_error(NGX_LOG_ERR, e->cycle->log, errn,
                      "kvserve: send() to the engine failed");
        ngx_http_kvserve_engine_lost(e, "send failed");
        return NGX_ERROR;
    }

    e->wbuf.len = 0;
    e->wpos = 0;

    return NGX_OK;
}


static void
ngx_http_kvserve_engine_write(ngx_event_t *wev)
{
    ngx_connection_t           *c;
    ngx_http_kvserve_engine_t  *e;

    c = wev->data;
    e = c->data;

    if (ngx_http_kvserve_engs == NULL || e->c != c) {
        return;
    }

    (void) ngx_http_kvserve_engine_flush(e);
}


/* ---- connecting ------------------------------------------------------- */

static void
ngx_http_kvserve_engine_connect(ngx_event_t *ev)
{
    int                         fd;
    ngx_err_t                   errn;
    ngx_event_t                *rev, *wev;
    ngx_connection_t           *c;
    struct sockaddr_un          sa;
    ngx_connection_t           *dummy;
    ngx_http_kvserve_engine_t  *e;

    dummy = ev->data;
    e = dummy->data;

    if (ngx_http_kvserve_engs == NULL || e->c != NULL || ngx_terminate) {
        return;
    }

    /* a worker shutting down reconnects only for requests it holds */
    if ((ngx_exiting || ngx_quit) && ngx_queue_empty(&e->waiting)) {
        return;
    }

    fd = socket(AF_UNIX, SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC, 0);
    if (fd == -1) {
        ngx_log_error(NGX_LOG_ALERT, e->cycle->log, ngx_socket_errno,
                      "kvserve: socket(AF_UNIX) failed");
        goto retry;
    }

    ngx_memzero(&sa, sizeof(sa));
    sa.sun_family = AF_UNIX;
    ngx_cpystrn((u_char *) sa.sun_path, e->sock_path, sizeof(sa.sun_path));

    if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == -1) {
        errn = ngx_socket_errno;
        close(fd);

        if (errn == NGX_ENOENT || errn == NGX_ECONNREFUSED) {
            /* no engine: start one unless another is starting */
            ngx_http_kvserve_engine_spawn(e);
        } else if (errn != NGX_EAGAIN) {
            ngx_log_error(NGX_LOG_ERR, e->cycle->log, errn,
                          "kvserve: connect() to \"%s\" failed",
                          e->sock_path);
        }

        goto retry;
    }

    c = ngx_get_connection(fd, e->cycle->log);
    if (c == NULL) {
        close(fd);
        goto retry;
    }

    rev = c->read;
    wev = c->write;
    c->log = e->cycle->log;
    rev->log = c->log;
    wev->log = c->log;
    rev->handler = ngx_http_kvserve_engine_read;
    wev->handler = ngx_http_kvserve_engine_write;
    c->data = e;

    if (ngx_add_conn) {
        if (ngx_add_conn(c) == NGX_ERROR) {
            ngx_close_connection(c);
            goto retry;
        }

    } else if (ngx_add_event(rev, NGX_READ_EVENT, NGX_CLEAR_EVENT)
               != NGX_OK)
    {
        ngx_close_connection(c);
        goto retry;
    }

    e->c = c;
    e->ready = 0;
    e->rbuf.len = 0;
    e->wbuf.len = 0;
    e->wpos = 0;
    e->last_rx = ngx_current_msec;

    if (e->kmcf->engine_ping != 0 && !e->ping.timer_set) {
        ngx_add_timer(&e->ping, e->kmcf->engine_ping);
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, e->cycle->log, 0,
                   "kvserve: connected to the engine of model \"%V\"",
                   &e->model->name);

    /* HELLO may already be there */
    ngx_http_kvserve_engine_read(rev);

    return;

retry:

    if (!e->reconnect.timer_set) {
        ngx_add_timer(&e->reconnect, NGX_HTTP_KVSERVE_RECONNECT);
    }
}


/*
 * The engine went away (EOF, an error, a bad frame): every sub it held is
 * taken out of the table first and then told, so that its owner can send
 * it again (it queues); the reconnect timer starts.
 */
void
ngx_http_kvserve_engine_lost(ngx_http_kvserve_engine_t *e, const char *why)
{
    ngx_uint_t               i, n, level;
    ngx_queue_t              lost, *q;
    ngx_http_kvserve_sub_t  *s;

    if (e->c != NULL) {
        level = e->ready ? NGX_LOG_WARN : NGX_LOG_INFO;
        ngx_log_error(level, e->cycle->log, 0,
                      "kvserve: engine %uD of model \"%V\" connection "
                      "lost: %s", e->hello.pid, &e->model->name, why);

        /* the watchdog and a HELLO for another file said why already */
        if (e->ready && ngx_strcmp(why, "hung") != 0) {
            ngx_http_kvserve_engine_why(e, "(pid %uD) exited; restarting",
                                        e->hello.pid);
        }

        ngx_close_connection(e->c);
        e->c = NULL;
    }

    e->ready = 0;
    e->rbuf.len = 0;
    e->wbuf.len = 0;
    e->wpos = 0;

    ngx_queue_init(&lost);
    n = 0;

    for (i = 0; i < e->n_subs; i++) {
        s = e->subs[i];
        if (s == NULL) {
            continue;
        }
        e->subs[i] = NULL;
        s->id = 0;
        ngx_queue_insert_tail(&lost, &s->queue);
        n++;
    }

    e->free_hint = 0;

    if (e->ping.timer_set) {
        ngx_del_timer(&e->ping);
    }

    while (!ngx_queue_empty(&lost)) {
        q = ngx_queue_head(&lost);
        ngx_queue_remove(q);
        s = ngx_queue_data(q, ngx_http_kvserve_sub_t, queue);
        s->handler(s, NGX_HTTP_KVSERVE_EV_LOST, NULL);
    }

    if (!e->reconnect.timer_set && !ngx_terminate
        && (!ngx_exiting || !ngx_queue_empty(&e->waiting)))
    {
        ngx_add_timer(&e->reconnect, 1);
    }
}


/* ---- reading ---------------------------------------------------------- */

static void
ngx_http_kvserve_engine_read(ngx_event_t *rev)
{
    int                         rc;
    size_t                      off;
    ssize_t                     n;
    ngx_err_t                   errn;
    kvs_err_t                   err;
    kvs_wire_hdr_t              h;
    ngx_connection_t           *c;
    ngx_http_kvserve_engine_t  *e;

    c = rev->data;
    e = c->data;

    if (ngx_http_kvserve_engs == NULL || e->c != c) {
        return;
    }

    for ( ;; ) {
        if (kvs_buf_reserve(&e->rbuf, NGX_HTTP_KVSERVE_READ_CHUNK)
            != KVS_OK)
        {
            ngx_http_kvserve_engine_lost(e, "out of memory");
            return;
        }

        n = recv(c->fd, e->rbuf.data + e->rbuf.len,
                 e->rbuf.cap - e->rbuf.len, 0);

        if (n == 0) {
            ngx_http_kvserve_engine_lost(e, "the engine closed it");
            return;
        }

        if (n == -1) {
            errn = ngx_socket_errno;

            if (errn == NGX_EINTR) {
                continue;
            }

            if (errn == NGX_EAGAIN) {
                break;
            }

            ngx_http_kvserve_engine_lost(e, "recv() failed");
            return;
        }

        e->rbuf.len += n;
        e->last_rx = ngx_current_msec;

        /* frames are handed out as they come, so that a long burst does
         * not pile up here */
        off = 0;

        for ( ;; ) {
            rc = kvs_wire_frame(e->rbuf.data + off, e->rbuf.len - off, &h,
                                &err);

            if (rc == KVS_WIRE_AGAIN) {
                break;
            }

            if (rc != KVS_OK) {
                ngx_log_error(NGX_LOG_ALERT, e->cycle->log, 0,
                              "kvserve: bad frame from the engine: %s",
                              err.msg);
                ngx_http_kvserve_engine_lost(e, "bad frame");
                return;
            }

            rc = ngx_http_kvserve_engine_frame(e, e->rbuf.data + off, &h);

            if (rc == NGX_DECLINED && e->c == c) {
                /* not our engine: after the usual delay, its socket is
                 * gone (DRAIN) or it is still there (we wait) */
                ngx_http_kvserve_engine_lost(e, "other models");

                if (e->reconnect.timer_set) {
                    ngx_del_timer(&e->reconnect);
                    ngx_add_timer(&e->reconnect,
                                  NGX_HTTP_KVSERVE_RECONNECT);
                }

                return;
            }

            if (rc != NGX_OK) {
                if (e->c == c) {
                    ngx_http_kvserve_engine_lost(e, "bad frame");
                }
                return;
            }

            if (e->c != c) {
                /* a handler's send lost the connection */
                return;
            }

            off += h.len;
        }

        if (off > 0) {
            ngx_memmove(e->rbuf.data, e->rbuf.data + off,
                        e->rbuf.len - off);
            e->rbuf.len -= off;
        }
    }

    if (e->wpos < e->wbuf.len) {
        (void) ngx_http_kvserve_engine_flush(e);
    }
}
