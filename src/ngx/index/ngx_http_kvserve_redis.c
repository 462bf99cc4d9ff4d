/*
 * ngx_http_kvserve_redis: hiredis' async API on nginx's event loop, for
 * the prefix index (ngx_http_kvserve_redis.h says what callers get).
 *
 * Owns, per worker: the registry of connections by address (plain heap,
 * for the worker's life), each connection's redisAsyncContext and the
 * ngx_connection_t that carries its fd in nginx's event loop, the
 * reconnect timer, and every batch sent until hiredis has called back
 * for all of its commands.  Also the wall clock the index's records are
 * stamped on, which the publisher and the router share.
 *
 * Invariants:
 * - rd->ac is the context we still own, or NULL.  It is set to NULL
 *   before hiredis frees a context (our redisAsyncFree, or hiredis'
 *   own on an error), so a callback that starts a batch while a context
 *   is going finds no connection and fails at once; the connect and
 *   disconnect callbacks of a context that is no longer rd->ac do
 *   nothing.
 * - redisAsyncFree is called only from our timers and exit_process,
 *   never from a hiredis callback (hiredis would defer it, and its
 *   disconnect callback would then see a half-freed context).
 * - The events are level-triggered: hiredis reads and writes one buffer
 *   per call and expects to be called again while the fd is ready.
 * - A batch's memory (its pool: the struct, the converted replies)
 *   lives until hiredis has called back for every command it queued,
 *   whether the batch succeeded, failed, timed out or was canceled,
 *   because each of those callbacks carries the batch as privdata.
 *   hiredis frees each redisReply after its callback returns, so
 *   replies are deep-copied into the batch's pool.
 * - done is called at most once per batch, never after cancel.
 * - Up means Redis answered a PING on this connection (a stopped Redis
 *   still completes TCP connects from its backlog); connecting and the
 *   PING together get CONNECT_MAX.
 * - One log line per change of state: "up" (NOTICE) when a connection
 *   comes up after none or after "down", "down: <reason>" (WARN) when
 *   it is lost or the first connect fails; retries that fail while down
 *   are silent.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "ngx_http_kvserve_redis.h"

#define NGX_HTTP_KVSERVE_REDIS_BACKOFF_MIN   100      /* ms */
#define NGX_HTTP_KVSERVE_REDIS_BACKOFF_MAX   5000     /* ms */
#define NGX_HTTP_KVSERVE_REDIS_CONNECT_MAX   2000     /* ms a connect and
                                                         its PING may
                                                         take */
#define NGX_HTTP_KVSERVE_REDIS_DEPTH_MAX     4        /* nested arrays we
                                                         copy */
#define NGX_HTTP_KVSERVE_REDIS_ELEMENTS_MAX  65536    /* per array; our
                                                         parsers refuse
                                                         far fewer */

typedef enum {
    NGX_HTTP_KVSERVE_REDIS_DOWN = 0,      /* no context: waiting for the
                                             reconnect timer */
    NGX_HTTP_KVSERVE_REDIS_CONNECTING,
    NGX_HTTP_KVSERVE_REDIS_UP
} ngx_http_kvserve_redis_state_e;

typedef enum {
    NGX_HTTP_KVSERVE_REDIS_LOGGED_NONE = 0,
    NGX_HTTP_KVSERVE_REDIS_LOGGED_UP,
    NGX_HTTP_KVSERVE_REDIS_LOGGED_DOWN
} ngx_http_kvserve_redis_logged_e;


struct ngx_http_kvserve_redis_s {
    ngx_queue_t          queue;        /* in the worker's registry */
    ngx_str_t            addr;         /* "host:port" as given: key, logs */
    char                *host;         /* NUL-terminated, for hiredis */
    int                  port;

    redisAsyncContext   *ac;           /* ours, or NULL */
    ngx_connection_t    *c;            /* ac's fd in the event loop */
    ngx_uint_t           state;        /* ngx_http_kvserve_redis_state_e */
    ngx_uint_t           logged;       /* the last state logged */
    ngx_uint_t           closing;      /* the worker is exiting */
    ngx_msec_t           backoff;      /* the next retry's delay */

    ngx_event_t          timer;        /* DOWN: the next try; CONNECTING:
                                          the connect's deadline */
    ngx_connection_t     dummy;        /* the timers' ev->data: the debug
                                          log reads its fd */
    ngx_log_t           *log;
    ngx_uint_t           pending;      /* batches not yet called back for
                                          every command */
};


struct ngx_http_kvserve_redis_batch_s {
    ngx_http_kvserve_redis_t        *rd;
    ngx_pool_t                      *pool;       /* this struct, replies */
    ngx_http_kvserve_redis_done_pt   done;
    void                            *data;
    kvs_index_reply_t               *replies;    /* [n_cmds] */
    size_t                           n_cmds;
    size_t                           n_sent;     /* callbacks hiredis
                                                    owes us */
    size_t                           n_back;     /* callbacks come in
                                                    command order */
    ngx_event_t                      timer;      /* ev->data: rd->dummy */
    unsigned                         finished:1; /* done was called, or
                                                    will never be */
};


static ngx_queue_t  ngx_http_kvserve_redis_all;
static ngx_uint_t   ngx_http_kvserve_redis_inited;


static void ngx_http_kvserve_redis_connect(ngx_http_kvserve_redis_t *rd);
static void ngx_http_kvserve_redis_retry(ngx_http_kvserve_redis_t *rd);
static void ngx_http_kvserve_redis_tick(ngx_event_t *ev);
static void ngx_http_kvserve_redis_set_down(ngx_http_kvserve_redis_t *rd,
    const char *why);
static void ngx_http_kvserve_redis_drop(ngx_http_kvserve_redis_t *rd,
    const char *why);
static void ngx_http_kvserve_redis_on_connect(const redisAsyncContext *ac,
    int status);
static void ngx_http_kvserve_redis_on_disconnect(
    const redisAsyncContext *ac, int status);
static void ngx_http_kvserve_redis_on_ping(redisAsyncContext *ac, void *r,
    void *privdata);
static void ngx_http_kvserve_redis_read(ngx_event_t *rev);
static void ngx_http_kvserve_redis_write(ngx_event_t *wev);
static void ngx_http_kvserve_redis_add_read(void *privdata);
static void ngx_http_kvserve_redis_del_read(void *privdata);
static void ngx_http_kvserve_redis_add_write(void *privdata);
static void ngx_http_kvserve_redis_del_write(void *privdata);
static void ngx_http_kvserve_redis_event_add(ngx_event_t *ev,
    ngx_int_t event, const char *what);
static void ngx_http_kvserve_redis_event_del(ngx_event_t *ev,
    ngx_int_t event);
static void ngx_http_kvserve_redis_cleanup(void *privdata);
static void ngx_http_kvserve_redis_reply(redisAsyncContext *ac, void *r,
    void *privdata);
static void ngx_http_kvserve_redis_timeout(ngx_event_t *ev);
static void ngx_http_kvserve_redis_fail(ngx_http_kvserve_redis_batch_t *b);
static void ngx_http_kvserve_redis_release(
    ngx_http_kvserve_redis_batch_t *b);
static ngx_int_t ngx_http_kvserve_redis_copy(ngx_pool_t *pool,
    const redisReply *r, kvs_index_reply_t *out, ngx_uint_t depth);


/* ---- the registry ------------------------------------------------------ */

ngx_http_kvserve_redis_t *
ngx_http_kvserve_redis_get(ngx_cycle_t *cycle, ngx_str_t *addr)
{
    u_char                    *colon, *h, *end;
    size_t                     hlen;
    ngx_int_t                  port;
    ngx_queue_t               *q;
    ngx_http_kvserve_redis_t  *rd;

    if (!ngx_http_kvserve_redis_inited) {
        ngx_queue_init(&ngx_http_kvserve_redis_all);
        ngx_http_kvserve_redis_inited = 1;
    }

    for (q = ngx_queue_head(&ngx_http_kvserve_redis_all);
         q != ngx_queue_sentinel(&ngx_http_kvserve_redis_all);
         q = ngx_queue_next(q))
    {
        rd = ngx_queue_data(q, ngx_http_kvserve_redis_t, queue);

        if (rd->addr.len == addr->len
            && ngx_strncmp(rd->addr.data, addr->data, addr->len) == 0)
        {
            return rd;
        }
    }

    /* "host:port", "[v6]:port" */
    end = addr->data + addr->len;
    colon = ngx_strlchr(addr->data, end, ':');
    while (colon != NULL) {
        h = ngx_strlchr(colon + 1, end, ':');
        if (h == NULL) {
            break;
        }
        colon = h;
    }

    if (colon == NULL || colon == addr->data) {
        goto invalid;
    }

    port = ngx_atoi(colon + 1, end - colon - 1);
    if (port < 1 || port > 65535) {
        goto invalid;
    }

    h = addr->data;
    hlen = colon - addr->data;
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }

    rd = ngx_calloc(sizeof(ngx_http_kvserve_redis_t) + addr->len + hlen + 1,
                    cycle->log);
    if (rd == NULL) {
        return NULL;
    }

    rd->addr.data = (u_char *) (rd + 1);
    rd->addr.len = addr->len;
    ngx_memcpy(rd->addr.data, addr->data, addr->len);
    rd->host = (char *) rd->addr.data + addr->len;
    ngx_memcpy(rd->host, h, hlen);
    rd->host[hlen] = '\0';
    rd->port = (int) port;

    rd->log = cycle->log;
    rd->backoff = NGX_HTTP_KVSERVE_REDIS_BACKOFF_MIN;
    rd->dummy.fd = (ngx_socket_t) -1;
    rd->timer.handler = ngx_http_kvserve_redis_tick;
    rd->timer.data = &rd->dummy;
    rd->timer.log = cycle->log;
    rd->timer.cancelable = 1;

    ngx_queue_insert_tail(&ngx_http_kvserve_redis_all, &rd->queue);

    ngx_http_kvserve_redis_connect(rd);

    return rd;

invalid:

    ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                  "kvserve redis \"%V\": not host:port", addr);
    return NULL;
}


void
ngx_http_kvserve_redis_exit(ngx_cycle_t *cycle)
{
    ngx_queue_t               *q;
    ngx_http_kvserve_redis_t  *rd;

    if (!ngx_http_kvserve_redis_inited) {
        return;
    }

    while (!ngx_queue_empty(&ngx_http_kvserve_redis_all)) {
        q = ngx_queue_head(&ngx_http_kvserve_redis_all);
        rd = ngx_queue_data(q, ngx_http_kvserve_redis_t, queue);

        ngx_queue_remove(q);
        rd->closing = 1;

        if (rd->timer.timer_set) {
            ngx_del_timer(&rd->timer);
        }

        /* every pending batch fails (done with NULL) in there: freeing a
         * context calls back all its commands */
        ngx_http_kvserve_redis_drop(rd, "the worker is exiting");

        if (rd->pending == 0) {
            ngx_free(rd);
        }
    }
}


ngx_uint_t
ngx_http_kvserve_redis_up(ngx_http_kvserve_redis_t *rd)
{
    return rd->ac != NULL && rd->state == NGX_HTTP_KVSERVE_REDIS_UP;
}


/* ---- connecting -------------------------------------------------------- */

static void
ngx_http_kvserve_redis_connect(ngx_http_kvserve_redis_t *rd)
{
    ngx_connection_t   *c;
    redisAsyncContext  *ac;

    if (rd->closing || ngx_terminate || ngx_quit || ngx_exiting) {
        return;
    }

    /* a non-blocking connect (hiredis resolves a name with getaddrinfo,
     * so callers pass numeric addresses) */
    ac = redisAsyncConnect(rd->host, rd->port);
    if (ac == NULL) {
        ngx_http_kvserve_redis_set_down(rd, "out of memory");
        ngx_http_kvserve_redis_retry(rd);
        return;
    }

    if (ac->err) {
        ngx_http_kvserve_redis_set_down(rd, ac->errstr);
        redisAsyncFree(ac);
        ngx_http_kvserve_redis_retry(rd);
        return;
    }

    c = ngx_get_connection(ac->c.fd, rd->log);
    if (c == NULL) {
        ngx_http_kvserve_redis_set_down(rd, "no free connection");
        redisAsyncFree(ac);
        ngx_http_kvserve_redis_retry(rd);
        return;
    }

    c->data = rd;
    c->log = rd->log;
    c->read->log = rd->log;
    c->write->log = rd->log;
    c->read->handler = ngx_http_kvserve_redis_read;
    c->write->handler = ngx_http_kvserve_redis_write;

    ac->data = rd;
    ac->ev.data = c;
    ac->ev.addRead = ngx_http_kvserve_redis_add_read;
    ac->ev.delRead = ngx_http_kvserve_redis_del_read;
    ac->ev.addWrite = ngx_http_kvserve_redis_add_write;
    ac->ev.delWrite = ngx_http_kvserve_redis_del_write;
    ac->ev.cleanup = ngx_http_kvserve_redis_cleanup;

    rd->ac = ac;
    rd->c = c;
    rd->state = NGX_HTTP_KVSERVE_REDIS_CONNECTING;

    if (rd->timer.timer_set) {
        ngx_del_timer(&rd->timer);
    }

    /* a connect into a black hole would take the kernel's minutes */
    ngx_add_timer(&rd->timer, NGX_HTTP_KVSERVE_REDIS_CONNECT_MAX);

    /* the connect completes on the first write event, which this asks
     * for */
    redisAsyncSetConnectCallback(ac, ngx_http_kvserve_redis_on_connect);
    redisAsyncSetDisconnectCallback(ac,
                                    ngx_http_kvserve_redis_on_disconnect);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, rd->log, 0,
                   "kvserve redis %V: connecting", &rd->addr);
}


static void
ngx_http_kvserve_redis_retry(ngx_http_kvserve_redis_t *rd)
{
    if (rd->timer.timer_set) {
        ngx_del_timer(&rd->timer);
    }

    if (rd->closing || ngx_terminate || ngx_quit || ngx_exiting) {
        return;
    }

    ngx_add_timer(&rd->timer, rd->backoff);

    rd->backoff *= 2;
    if (rd->backoff > NGX_HTTP_KVSERVE_REDIS_BACKOFF_MAX) {
        rd->backoff = NGX_HTTP_KVSERVE_REDIS_BACKOFF_MAX;
    }
}


static void
ngx_http_kvserve_redis_tick(ngx_event_t *ev)
{
    ngx_http_kvserve_redis_t  *rd;

    rd = (ngx_http_kvserve_redis_t *)
             ((u_char *) ev - offsetof(ngx_http_kvserve_redis_t, timer));

    if (rd->ac == NULL) {
        ngx_http_kvserve_redis_connect(rd);
        return;
    }

    /* the connect's deadline: not up yet (or refused by PING's answer
     * and still not closed) */
    if (rd->state != NGX_HTTP_KVSERVE_REDIS_UP) {
        ngx_http_kvserve_redis_drop(rd, "no answer to connect or PING");
    }
}


static void
ngx_http_kvserve_redis_set_down(ngx_http_kvserve_redis_t *rd,
    const char *why)
{
    rd->state = NGX_HTTP_KVSERVE_REDIS_DOWN;

    if (rd->logged != NGX_HTTP_KVSERVE_REDIS_LOGGED_DOWN && !rd->closing) {
        ngx_log_error(NGX_LOG_WARN, rd->log, 0,
                      "kvserve redis %V: down: %s", &rd->addr,
                      why != NULL && why[0] != '\0' ? why : "unknown");
        rd->logged = NGX_HTTP_KVSERVE_REDIS_LOGGED_DOWN;
    }
}


/*
 * We give the connection up (a timeout, exiting): rd->ac is cleared
 * first, then hiredis calls back every pending command with NULL (their
 * batches fail), our cleanup hook releases the nginx connection, and the
 * fd is closed.  Never from inside a hiredis callback.
 */
static void
ngx_http_kvserve_redis_drop(ngx_http_kvserve_redis_t *rd, const char *why)
{
    redisAsyncContext  *ac;

    ac = rd->ac;
    if (ac == NULL) {
        return;
    }

    rd->ac = NULL;
    ngx_http_kvserve_redis_set_down(rd, why);

    redisAsyncFree(ac);

    ngx_http_kvserve_redis_retry(rd);
}


static void
ngx_http_kvserve_redis_on_connect(const redisAsyncContext *ac, int status)
{
    ngx_http_kvserve_redis_t  *rd;

    rd = ac->data;
    if (rd == NULL || rd->ac != ac) {
        return;
    }

    if (status != REDIS_OK) {
        /* hiredis frees ac when this returns, calling our cleanup hook */
        rd->ac = NULL;
        ngx_http_kvserve_redis_set_down(rd, ac->errstr);
        ngx_http_kvserve_redis_retry(rd);
        return;
    }

    /* up once it answers (behind any batch queued during the first
     * connect); the connect's deadline still runs */
    if (redisAsyncCommand((redisAsyncContext *) ac,
                          ngx_http_kvserve_redis_on_ping, rd, "PING")
        != REDIS_OK)
    {
        /* only while the context is going: its disconnect follows */
        return;
    }
}


static void
ngx_http_kvserve_redis_on_ping(redisAsyncContext *ac, void *r,
    void *privdata)
{
    redisReply                *reply = r;
    ngx_http_kvserve_redis_t  *rd = privdata;

    /* NULL: the context is going, its disconnect says why */
    if (reply == NULL || rd->ac != ac
        || rd->state != NGX_HTTP_KVSERVE_REDIS_CONNECTING)
    {
        return;
    }

    if (reply->type == REDIS_REPLY_ERROR) {
        /* e.g. NOAUTH: logged now with Redis' words; no freeing in a
         * callback, so hiredis closes it once the replies queued are
         * read, and the disconnect callback retries */
        ngx_http_kvserve_redis_set_down(rd, reply->str);
        redisAsyncDisconnect(ac);
        return;
    }

    if (rd->timer.timer_set) {
        ngx_del_timer(&rd->timer);
    }

    rd->state = NGX_HTTP_KVSERVE_REDIS_UP;
    rd->backoff = NGX_HTTP_KVSERVE_REDIS_BACKOFF_MIN;

    if (rd->logged != NGX_HTTP_KVSERVE_REDIS_LOGGED_UP) {
        ngx_log_error(NGX_LOG_NOTICE, rd->log, 0,
                      "kvserve redis %V: up", &rd->addr);
        rd->logged = NGX_HTTP_KVSERVE_REDIS_LOGGED_UP;
    }
}


/* After hiredis has failed every pending callback and called cleanup;
 * it frees ac when this returns. */
static void
ngx_http_kvserve_redis_on_disconnect(const redisAsyncContext *ac,
    int status)
{
    ngx_http_kvserve_redis_t  *rd;

    rd = ac->data;
    if (rd == NULL || rd->ac != ac) {
        return;
    }

    rd->ac = NULL;
    ngx_http_kvserve_redis_set_down(rd,
        status == REDIS_OK ? "closed" : ac->errstr);
    ngx_http_kvserve_redis_retry(rd);
}


/* ---- the event adapter ------------------------------------------------- */

static void
ngx_http_kvserve_redis_read(ngx_event_t *rev)
{
    ngx_connection_t          *c;
    ngx_http_kvserve_redis_t  *rd;

    c = rev->data;
    rd = c->data;

    if (rd->c != c || rd->ac == NULL) {
        return;
    }

    /* may free the context and c (cleanup): nothing after this */
    redisAsyncHandleRead(rd->ac);
}


static void
ngx_http_kvserve_redis_write(ngx_event_t *wev)
{
    ngx_connection_t          *c;
    ngx_http_kvserve_redis_t  *rd;

    c = wev->data;
    rd = c->data;

    if (rd->c != c || rd->ac == NULL) {
        return;
    }

    redisAsyncHandleWrite(rd->ac);
}


/* hiredis calls these as often as it likes: they must be idempotent */

static void
ngx_http_kvserve_redis_add_read(void *privdata)
{
    ngx_connection_t  *c = privdata;

    ngx_http_kvserve_redis_event_add(c->read, NGX_READ_EVENT, "read");
}


static void
ngx_http_kvserve_redis_del_read(void *privdata)
{
    ngx_connection_t  *c = privdata;

    ngx_http_kvserve_redis_event_del(c->read, NGX_READ_EVENT);
}


static void
ngx_http_kvserve_redis_add_write(void *privdata)
{
    ngx_connection_t  *c = privdata;

    ngx_http_kvserve_redis_event_add(c->write, NGX_WRITE_EVENT, "write");
}


static void
ngx_http_kvserve_redis_del_write(void *privdata)
{
    ngx_connection_t  *c = privdata;

    ngx_http_kvserve_redis_event_del(c->write, NGX_WRITE_EVENT);
}


static void
ngx_http_kvserve_redis_event_add(ngx_event_t *ev, ngx_int_t event,
    const char *what)
{
    if (!ev->active
        && ngx_add_event(ev, event, NGX_LEVEL_EVENT) != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ALERT, ev->log, 0,
                      "kvserve redis: adding a %s event failed", what);
    }
}


static void
ngx_http_kvserve_redis_event_del(ngx_event_t *ev, ngx_int_t event)
{
    if (ev->active) {
        (void) ngx_del_event(ev, event, 0);
    }
}


/* The context is being freed and hiredis closes the fd right after:
 * the nginx connection goes without a close() of its own. */
static void
ngx_http_kvserve_redis_cleanup(void *privdata)
{
    ngx_connection_t          *c = privdata;
    ngx_http_kvserve_redis_t  *rd;

    rd = c->data;

    if (c->read->active || c->read->disabled) {
        (void) ngx_del_event(c->read, NGX_READ_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->write->active || c->write->disabled) {
        (void) ngx_del_event(c->write, NGX_WRITE_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    ngx_free_connection(c);
    c->fd = (ngx_socket_t) -1;

    if (rd != NULL && rd->c == c) {
        rd->c = NULL;
    }
}


/* ---- batches ----------------------------------------------------------- */

ngx_http_kvserve_redis_batch_t *
ngx_http_kvserve_redis_batch(ngx_http_kvserve_redis_t *rd,
    const kvs_index_cmds_t *cmds, ngx_msec_t timeout_ms,
    ngx_http_kvserve_redis_done_pt done, void *data)
{
    int                              argc;
    size_t                           i;
    ngx_pool_t                      *pool;
    const char                     **argv;
    const size_t                    *argvlen;
    redisAsyncContext               *ac;
    static kvs_index_reply_t         none;
    ngx_http_kvserve_redis_batch_t  *b;

    if (cmds->n_cmds == 0) {
        done(data, &none, 0);
        return NULL;
    }

    ac = rd->ac;

    /* batches wait for the first connect only: after a loss they fail
     * until the connection is up again */
    if (ac == NULL
        || (ac->c.flags & (REDIS_DISCONNECTING|REDIS_FREEING))
        || (rd->state != NGX_HTTP_KVSERVE_REDIS_UP
            && rd->logged != NGX_HTTP_KVSERVE_REDIS_LOGGED_NONE))
    {
        done(data, NULL, 0);
        return NULL;
    }

    pool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE, rd->log);
    if (pool == NULL) {
        done(data, NULL, 0);
        return NULL;
    }

    b = ngx_pcalloc(pool, sizeof(ngx_http_kvserve_redis_batch_t));
    if (b == NULL) {
        ngx_destroy_pool(pool);
        done(data, NULL, 0);
        return NULL;
    }

    b->replies = ngx_pcalloc(pool, cmds->n_cmds * sizeof(kvs_index_reply_t));
    if (b->replies == NULL) {
        ngx_destroy_pool(pool);
        done(data, NULL, 0);
        return NULL;
    }

    b->rd = rd;
    b->pool = pool;
    b->done = done;
    b->data = data;
    b->n_cmds = cmds->n_cmds;
    b->timer.handler = ngx_http_kvserve_redis_timeout;
    b->timer.data = &rd->dummy;
    b->timer.log = rd->log;
    b->timer.cancelable = 1;

    /* hiredis formats (copies) each command into its output buffer and
     * asks for a write event: one write carries the whole batch */
    for (i = 0; i < cmds->n_cmds; i++) {
        kvs_index_cmds_get(cmds, i, &argc, &argv, &argvlen);

        if (redisAsyncCommandArgv(ac, ngx_http_kvserve_redis_reply, b, argc,
                                  argv, argvlen)
            != REDIS_OK)
        {
            break;
        }

        b->n_sent++;
    }

    if (b->n_sent == 0) {
        ngx_destroy_pool(pool);
        done(data, NULL, 0);
        return NULL;
    }

    rd->pending++;

    if (b->n_sent < b->n_cmds) {
        /* the commands queued are answered and dropped */
        ngx_http_kvserve_redis_fail(b);
        return NULL;
    }

    if (timeout_ms != 0) {
        ngx_add_timer(&b->timer, timeout_ms);
    }

    return b;
}


void
ngx_http_kvserve_redis_cancel(ngx_http_kvserve_redis_batch_t *b)
{
    if (b == NULL || b->finished) {
        return;
    }

    b->finished = 1;

    if (b->timer.timer_set) {
        ngx_del_timer(&b->timer);
    }
}


static void
ngx_http_kvserve_redis_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    size_t                           i;
    redisReply                      *reply = r;
    ngx_http_kvserve_redis_batch_t  *b = privdata;

    i = b->n_back++;

    if (!b->finished) {
        if (reply == NULL
            || ngx_http_kvserve_redis_copy(b->pool, reply, &b->replies[i], 0)
               != NGX_OK)
        {
            /* NULL: the connection is going; hiredis calls back every
             * pending command so, and the first fails the batch */
            ngx_http_kvserve_redis_fail(b);

        } else if (b->n_back == b->n_cmds) {
            b->finished = 1;

            if (b->timer.timer_set) {
                ngx_del_timer(&b->timer);
            }

            b->done(b->data, b->replies, b->n_cmds);
        }
    }

    if (b->n_back == b->n_sent) {
        ngx_http_kvserve_redis_release(b);
    }
}


static void
ngx_http_kvserve_redis_fail(ngx_http_kvserve_redis_batch_t *b)
{
    if (b->finished) {
        return;
    }

    b->finished = 1;

    if (b->timer.timer_set) {
        ngx_del_timer(&b->timer);
    }

    b->done(b->data, NULL, 0);
}


static void
ngx_http_kvserve_redis_release(ngx_http_kvserve_redis_batch_t *b)
{
    ngx_http_kvserve_redis_t  *rd;

    rd = b->rd;

    if (b->timer.timer_set) {
        ngx_del_timer(&b->timer);
    }

    ngx_destroy_pool(b->pool);

    rd->pending--;
}


/* A slow Redis is as good as down for routing: the connection goes,
 * which fails every pending batch once, and is retried. */
static void
ngx_http_kvserve_redis_timeout(ngx_event_t *ev)
{
    ngx_http_kvserve_redis_t        *rd;
    ngx_http_kvserve_redis_batch_t  *b;

    b = (ngx_http_kvserve_redis_batch_t *)
            ((u_char *) ev - offsetof(ngx_http_kvserve_redis_batch_t, timer));
    rd = b->rd;

    if (b->finished) {
        return;
    }

    if (rd->ac == NULL) {
        /* cannot be: a context's end calls back all its commands */
        ngx_http_kvserve_redis_fail(b);
        return;
    }

    /* fails b, and may free it: nothing after this */
    ngx_http_kvserve_redis_drop(rd, "a batch timed out");
}


/*
 * Deep copy of a hiredis reply (freed by hiredis after the callback)
 * into the batch's pool.  Arrays nested deeper than DEPTH_MAX or longer
 * than ELEMENTS_MAX become error replies, which every parser refuses.
 */
static ngx_int_t
ngx_http_kvserve_redis_copy(ngx_pool_t *pool, const redisReply *r,
    kvs_index_reply_t *out, ngx_uint_t depth)
{
    size_t              i;
    u_char             *s;
    kvs_index_reply_t  *el;

    ngx_memzero(out, sizeof(kvs_index_reply_t));

    switch (r->type) {

    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        out->type = r->type == REDIS_REPLY_STRING ? KVS_INDEX_REPLY_STRING
                    : r->type == REDIS_REPLY_STATUS ? KVS_INDEX_REPLY_STATUS
                    : KVS_INDEX_REPLY_ERROR;

        s = ngx_pnalloc(pool, r->len + 1);
        if (s == NULL) {
            return NGX_ERROR;
        }

        if (r->len) {
            ngx_memcpy(s, r->str, r->len);
        }

        s[r->len] = '\0';
        out->str = (const char *) s;
        out->len = r->len;
        return NGX_OK;

    case REDIS_REPLY_INTEGER:
        out->type = KVS_INDEX_REPLY_INTEGER;
        out->integer = r->integer;
        return NGX_OK;

    case REDIS_REPLY_NIL:
        out->type = KVS_INDEX_REPLY_NIL;
        return NGX_OK;

    case REDIS_REPLY_ARRAY:
        if (depth >= NGX_HTTP_KVSERVE_REDIS_DEPTH_MAX
            || r->elements > NGX_HTTP_KVSERVE_REDIS_ELEMENTS_MAX)
        {
            break;
        }

        out->type = KVS_INDEX_REPLY_ARRAY;
        out->elements = r->elements;

        if (r->elements == 0) {
            return NGX_OK;
        }

        el = ngx_palloc(pool, r->elements * sizeof(kvs_index_reply_t));
        if (el == NULL) {
            return NGX_ERROR;
        }

        for (i = 0; i < r->elements; i++) {
            if (r->element[i] == NULL) {
                ngx_memzero(&el[i], sizeof(kvs_index_reply_t));
                el[i].type = KVS_INDEX_REPLY_NIL;
                continue;
            }

            if (ngx_http_kvserve_redis_copy(pool, r->element[i], &el[i],
                                            depth + 1)
                != NGX_OK)
            {
                return NGX_ERROR;
            }
        }

        out->element = el;
        return NGX_OK;

    default:
        break;
    }

    ngx_memzero(out, sizeof(kvs_index_reply_t));
    out->type = KVS_INDEX_REPLY_ERROR;
    out->str = "kvserve: reply not copied (unknown type, or too large)";
    out->len = ngx_strlen(out->str);

    return NGX_OK;
}


ngx_int_t
ngx_http_kvserve_redis_resolve(ngx_conf_t *cf, ngx_str_t *directive,
    ngx_str_t *value, ngx_str_t *addr)
{
    ngx_url_t  u;

    ngx_memzero(&u, sizeof(ngx_url_t));
    u.url.data = value->data + sizeof("redis=") - 1;
    u.url.len = value->len - (sizeof("redis=") - 1);
    u.default_port = 6379;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.naddrs == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive: %s",
                           value, directive, u.err ? u.err : "no address");
        return NGX_ERROR;
    }

    if (u.family == AF_UNIX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive: a "
                           "TCP host:port is needed", value, directive);
        return NGX_ERROR;
    }

    *addr = u.addrs[0].name;

    return NGX_OK;
}


/* ---- the index's clock -------------------------------------------------- */

uint64_t
ngx_http_kvserve_redis_now_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (uint64_t) tp->sec * 1000 + tp->msec;
}
