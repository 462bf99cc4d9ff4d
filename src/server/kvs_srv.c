/*
 * kvs_srv: the engine process's epoll loop (see kvs_srv.h).
 *
 * Ownership: the server owns its engines, its clients and their
 * requests.  A request (kvs_srv_req_t) belongs to one client, is found
 * by (client serial, request id) in an open-addressing map, and holds
 * one engine handle per choice until that choice finishes or the
 * request is cancelled; it is freed when its last handle is closed.
 *
 * Invariants the loop keeps:
 *   - a handle taken by kvs_engine_ready() is valid until it is
 *     processed, because nothing closes another request's handles while
 *     the ready list is being processed: disconnecting a client only
 *     marks it closing, and the teardown (which closes its handles) runs
 *     after the events of the iteration;
 *   - output is appended to a client's buffer as it is produced and
 *     flushed once per iteration (one send() per client per wake-up, so
 *     a step's tokens for a worker go in one write);
 *   - epoll is level-triggered: a client is read once per wake-up, so
 *     one that floods cannot starve the others;
 *   - draining is one way: once DRAIN came, lfd and conf.lease_fd are
 *     -1 for good and the loop ends when the last client has gone.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kvs_srv.h"
#include "../wire/kvs_wire.h"

#define KVS_SRV_READ     (64u << 10)   /* bytes read per client wake-up */
#define KVS_SRV_EVENTS   64
#define KVS_SRV_READY    64
#define KVS_SRV_KEEP     (1u << 20)    /* buffer bytes kept when empty */

typedef enum {
    KVS_SRV_EV_LISTEN = 1,
    KVS_SRV_EV_STOP,
    KVS_SRV_EV_PARENT,
    KVS_SRV_EV_ENGINE,
    KVS_SRV_EV_CLIENT
} kvs_srv_ev_kind_t;

/* What an epoll event's data.ptr points at. */
typedef struct {
    kvs_srv_ev_kind_t  kind;
    uint32_t           index;         /* ENGINE: the model */
} kvs_srv_ev_t;

typedef struct kvs_srv_client_s  kvs_srv_client_t;
typedef struct kvs_srv_req_s     kvs_srv_req_t;

typedef struct {
    kvs_engine_seq_t  *h;             /* NULL once finished and closed */
    uint64_t           first_ns;      /* first token read, 0 before */
} kvs_srv_choice_t;

struct kvs_srv_req_s {
    uint64_t           id;            /* the worker's */
    kvs_srv_client_t  *c;
    uint32_t           model;
    uint32_t           n;             /* choices */
    uint32_t           n_open;        /* handles not yet closed */
    uint64_t           recv_ns;
    kvs_srv_req_t     *next;          /* the client's requests */
    kvs_srv_req_t     *prev;
    kvs_srv_choice_t   ch[];          /* [n] */
};

struct kvs_srv_client_s {
    kvs_srv_ev_t       ev;            /* first: epoll's data.ptr */
    int                fd;
    uint64_t           serial;        /* never reused, for the map */
    kvs_buf_t          in;            /* received, not yet parsed */
    kvs_buf_t          out;           /* [out_off, out.len) unsent */
    size_t             out_off;
    kvs_srv_req_t     *reqs;
    uint32_t           n_reqs;
    int                pollout;       /* EPOLLOUT registered */
    int                dirty;         /* on the flush list */
    int                closing;       /* on the close list */
    kvs_srv_client_t  *next;          /* all clients */
    kvs_srv_client_t  *prev;
    kvs_srv_client_t  *dirty_next;
    kvs_srv_client_t  *close_next;
    char               why[128];      /* why it is being closed */
};

typedef struct {
    kvs_srv_ev_t   ev;
    kvs_engine_t  *e;
} kvs_srv_engine_t;

struct kvs_srv_s {
    kvs_srv_conf_t      conf;
    char               *path;         /* socket_path, owned */
    char               *tmp_path;     /* path.<pid> */
    dev_t               sock_dev;     /* the inode we renamed onto path */
    ino_t               sock_ino;
    int                 lfd;
    int                 epfd;
    int                 stopfd;
    int                 parent_watched;
    int                 orphaned;
    int                 draining;     /* DRAIN came: no listener, no
                                         lease, exit when no client */
    int                 ran;
    kvs_srv_ev_t        ev_listen;
    kvs_srv_ev_t        ev_stop;
    kvs_srv_ev_t        ev_parent;

    kvs_srv_engine_t   *engines;      /* [n_engines] */
    uint32_t            n_engines;
    kvs_wire_hello_t    hello;

    kvs_srv_client_t   *clients;
    uint32_t            n_clients;
    uint64_t            serial;
    kvs_srv_client_t   *dirty;
    kvs_srv_client_t   *closing;

    kvs_srv_req_t     **map;          /* [map_cap], NULL: empty */
    size_t              map_cap;      /* a power of two */
    size_t              map_used;

    kvs_wire_submit_t   sub;          /* scratch for SUBMIT */
    kvs_engine_out_t    out;          /* scratch for reads */
};


static void kvs_srv_log(kvs_srv_t *srv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int kvs_srv_listen(kvs_srv_t *srv, kvs_err_t *err);
static void kvs_srv_unlisten(kvs_srv_t *srv);
static void kvs_srv_drain(kvs_srv_t *srv, kvs_srv_client_t *c);
static void kvs_srv_accept(kvs_srv_t *srv);
static void kvs_srv_read(kvs_srv_t *srv, kvs_srv_client_t *c);
static int kvs_srv_frame(kvs_srv_t *srv, kvs_srv_client_t *c,
    const kvs_wire_hdr_t *h, const uint8_t *f);
static void kvs_srv_submit(kvs_srv_t *srv, kvs_srv_client_t *c,
    uint64_t id);
static void kvs_srv_engine_ready(kvs_srv_t *srv, uint32_t m);
static void kvs_srv_flush(kvs_srv_t *srv, kvs_srv_client_t *c);
static void kvs_srv_close(kvs_srv_t *srv, kvs_srv_client_t *c,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void kvs_srv_teardown(kvs_srv_t *srv, kvs_srv_client_t *c);
static void kvs_srv_req_end(kvs_srv_t *srv, kvs_srv_req_t *r);
static kvs_srv_req_t *kvs_srv_map_find(kvs_srv_t *srv, uint64_t serial,
    uint64_t id);
static int kvs_srv_map_add(kvs_srv_t *srv, kvs_srv_req_t *r);
static void kvs_srv_map_del(kvs_srv_t *srv, kvs_srv_req_t *r);
static uint64_t kvs_srv_now(void);


/* --- life cycle ---------------------------------------------------------- */

int
kvs_srv_new(kvs_srv_t **out, const kvs_srv_conf_t *conf, kvs_err_t *err)
{
    int                  rc;
    size_t               nl;
    uint32_t             i;
    kvs_srv_t           *srv;
    kvs_gguf_str_t       gs;
    kvs_wire_model_t    *wm;
    kvs_engine_stats_t   st;
    const kvs_model_t   *m;

    *out = NULL;

    if (conf->socket_path == NULL || conf->socket_path[0] == '\0') {
        return kvs_err_set(err, KVS_EINVAL, "socket_path: missing");
    }

    if (conf->n_models == 0 || conf->n_models > KVS_WIRE_MAX_MODELS) {
        return kvs_err_set(err, KVS_EINVAL, "models: %u, not in 1..%d",
                           conf->n_models, KVS_WIRE_MAX_MODELS);
    }

    srv = calloc(1, sizeof(kvs_srv_t));
    if (srv == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    srv->conf = *conf;
    srv->conf.models = NULL;
    srv->lfd = -1;
    srv->epfd = -1;
    srv->stopfd = -1;

    /* the lease stays the caller's until we succeed */
    srv->conf.lease_fd = -1;

    if (srv->conf.out_limit == 0) {
        srv->conf.out_limit = KVS_SRV_OUT_LIMIT;
    }

    if (srv->conf.max_clients == 0) {
        srv->conf.max_clients = KVS_SRV_MAX_CLIENTS;
    }

    srv->engines = calloc(conf->n_models, sizeof(kvs_srv_engine_t));
    if (srv->engines == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto failed;
    }

    srv->hello.version = KVS_WIRE_VERSION;
    srv->hello.pid = (uint32_t) getpid();
    srv->hello.n_models = conf->n_models;

    /* random per start, so a worker tells a restarted engine from the
     * one it knew even when the pid comes back */
    if (getrandom(&srv->hello.incarnation, sizeof(uint64_t), GRND_NONBLOCK)
        != sizeof(uint64_t))
    {
        srv->hello.incarnation = kvs_srv_now()
                                 ^ ((uint64_t) getpid() << 32);
    }

    if (srv->hello.incarnation == 0) {
        srv->hello.incarnation = 1;
    }

    for (i = 0; i < conf->n_models; i++) {
        m = conf->models[i].engine.model;
        wm = &srv->hello.models[i];

        if (m == NULL) {
            rc = kvs_err_set(err, KVS_EINVAL, "models[%u]: no model", i);
            goto failed;
        }

        if (conf->models[i].name != NULL) {
            nl = strlen(conf->models[i].name);
            if (nl == 0 || nl > KVS_WIRE_MAX_NAME) {
                rc = kvs_err_set(err, KVS_EINVAL, "models[%u].name: must be "
                                 "1..%d bytes", i, KVS_WIRE_MAX_NAME);
                goto failed;
            }

            memcpy(wm->name, conf->models[i].name, nl + 1);

        } else if (kvs_gguf_get_str(m->gguf, "general.name", &gs, NULL)
                   == KVS_OK && gs.len > 0 && gs.len <= KVS_WIRE_MAX_NAME
                   && memchr(gs.ptr, '\0', gs.len) == NULL)
        {
            memcpy(wm->name, gs.ptr, gs.len);
            wm->name[gs.len] = '\0';

        } else {
            snprintf(wm->name, sizeof(wm->name), "model%u", i);
        }

        srv->engines[i].ev.kind = KVS_SRV_EV_ENGINE;
        srv->engines[i].ev.index = i;

        rc = kvs_engine_new(&srv->engines[i].e, &conf->models[i].engine,
                            err);
        if (rc != KVS_OK) {
            srv->engines[i].e = NULL;
            kvs_err_prefix(err, "models[%u] (%s)", i, wm->name);
            goto failed;
        }

        srv->n_engines = i + 1;

        kvs_engine_stats(srv->engines[i].e, &st);

        wm->index = i;
        wm->n_ctx = conf->models[i].engine.n_ctx != 0
                    ? conf->models[i].engine.n_ctx : m->hp.n_ctx_train;
        wm->n_vocab = m->hp.n_vocab;
        wm->block_tokens = st.block_tokens;
        wm->kv_blocks = st.kv_blocks;
        wm->file_size = m->file_size;
        wm->mtime = m->mtime;
    }

    rc = kvs_srv_listen(srv, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    srv->conf.lease_fd = conf->lease_fd > 2 ? conf->lease_fd : -1;
    *out = srv;

    return KVS_OK;

failed:

    kvs_srv_free(srv);

    return rc;
}


void
kvs_srv_free(kvs_srv_t *srv)
{
    uint32_t  i;

    if (srv == NULL) {
        return;
    }

    while (srv->clients != NULL) {
        kvs_srv_teardown(srv, srv->clients);
    }

    kvs_srv_unlisten(srv);

    for (i = 0; i < srv->n_engines; i++) {
        kvs_engine_free(srv->engines[i].e);
    }

    if (srv->epfd >= 0) {
        close(srv->epfd);
    }

    if (srv->stopfd >= 0) {
        close(srv->stopfd);
    }

    if (srv->conf.lease_fd >= 0) {
        close(srv->conf.lease_fd);
    }

    kvs_wire_submit_free(&srv->sub);
    kvs_engine_out_free(&srv->out);
    free(srv->map);
    free(srv->engines);
    free(srv->path);
    free(srv->tmp_path);
    free(srv);
}


kvs_engine_t *
kvs_srv_engine(kvs_srv_t *srv, uint32_t i)
{
    return i < srv->n_engines ? srv->engines[i].e : NULL;
}


uint64_t
kvs_srv_incarnation(const kvs_srv_t *srv)
{
    return srv->hello.incarnation;
}


void
kvs_srv_stop(kvs_srv_t *srv)
{
    uint64_t  one;

    one = 1;

    if (write(srv->stopfd, &one, sizeof(one)) < 0) {
        /* the counter is already set: the loop will see it */
    }
}


/* Binds path.<pid> and renames it onto path: a client never finds a
 * socket that is not listening yet, and an older engine's socket is
 * replaced in one step. */
static int
kvs_srv_listen(kvs_srv_t *srv, kvs_err_t *err)
{
    size_t              pl;
    struct stat         sb;
    struct epoll_event  ev;
    struct sockaddr_un  sa;

    pl = strlen(srv->conf.socket_path);

    srv->path = strdup(srv->conf.socket_path);
    srv->tmp_path = malloc(pl + 24);

    if (srv->path == NULL || srv->tmp_path == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "out of memory");
    }

    srv->conf.socket_path = srv->path;
    snprintf(srv->tmp_path, pl + 24, "%s.%d", srv->path, (int) getpid());

    if (strlen(srv->tmp_path) >= sizeof(sa.sun_path)) {
        return kvs_err_set(err, KVS_EINVAL, "socket_path: too long for a "
                           "unix socket (%zu bytes at most, with the .pid "
                           "suffix): \"%s\"", sizeof(sa.sun_path) - 1,
                           srv->path);
    }

    srv->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    srv->epfd = epoll_create1(EPOLL_CLOEXEC);
    srv->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      0);

    if (srv->stopfd < 0 || srv->epfd < 0 || srv->lfd < 0) {
        return kvs_err_set(err, KVS_EIO, "eventfd/epoll/socket: %s",
                           strerror(errno));
    }

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, srv->tmp_path, strlen(srv->tmp_path));

    /* a leftover of a dead process that had our pid */
    unlink(srv->tmp_path);

    if (bind(srv->lfd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
        return kvs_err_set(err, KVS_EIO, "bind %s: %s", srv->tmp_path,
                           strerror(errno));
    }

    if (listen(srv->lfd, SOMAXCONN) != 0
        || stat(srv->tmp_path, &sb) != 0)
    {
        kvs_err_set(err, KVS_EIO, "listen %s: %s", srv->tmp_path,
                    strerror(errno));
        unlink(srv->tmp_path);
        return KVS_EIO;
    }

    if (rename(srv->tmp_path, srv->path) != 0) {
        kvs_err_set(err, KVS_EIO, "rename %s to %s: %s", srv->tmp_path,
                    srv->path, strerror(errno));
        unlink(srv->tmp_path);
        return KVS_EIO;
    }

    srv->sock_dev = sb.st_dev;
    srv->sock_ino = sb.st_ino;

    srv->ev_listen.kind = KVS_SRV_EV_LISTEN;
    srv->ev_stop.kind = KVS_SRV_EV_STOP;
    srv->ev_parent.kind = KVS_SRV_EV_PARENT;

    ev.events = EPOLLIN;
    ev.data.ptr = &srv->ev_listen;

    if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->lfd, &ev) != 0) {
        return kvs_err_set(err, KVS_EIO, "epoll_ctl: %s", strerror(errno));
    }

    ev.data.ptr = &srv->ev_stop;

    if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->stopfd, &ev) != 0) {
        return kvs_err_set(err, KVS_EIO, "epoll_ctl: %s", strerror(errno));
    }

    if (srv->conf.parent_pidfd >= 0) {
        ev.data.ptr = &srv->ev_parent;

        if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->conf.parent_pidfd, &ev)
            != 0)
        {
            return kvs_err_set(err, KVS_EIO, "epoll_ctl parent_pidfd: %s",
                               strerror(errno));
        }

        srv->parent_watched = 1;
    }

    return KVS_OK;
}


/* Stops listening; removes the path only while it is still our inode. */
static void
kvs_srv_unlisten(kvs_srv_t *srv)
{
    struct stat  sb;

    if (srv->lfd < 0) {
        return;
    }

    close(srv->lfd);
    srv->lfd = -1;

    if (srv->sock_ino != 0 && stat(srv->path, &sb) == 0
        && sb.st_dev == srv->sock_dev && sb.st_ino == srv->sock_ino)
    {
        unlink(srv->path);
    }
}


/*
 * DRAIN: a newer configuration wants other models.  The listener goes
 * first and the lease after it, so that a worker that wins the lease
 * cannot still reach us; the clients we have (old workers finishing
 * their streams) keep being served.  Once is enough: later DRAINs (every
 * new worker sends one) change nothing.
 */
static void
kvs_srv_drain(kvs_srv_t *srv, kvs_srv_client_t *c)
{
    int          ours;
    struct stat  sb;

    if (srv->draining) {
        return;
    }

    srv->draining = 1;

    ours = srv->sock_ino != 0 && stat(srv->path, &sb) == 0
           && sb.st_dev == srv->sock_dev && sb.st_ino == srv->sock_ino;

    kvs_srv_unlisten(srv);

    kvs_srv_log(srv, "engine %d: DRAIN from client %" PRIu64 ": no longer "
                "accepting; %s %s", (int) getpid(), c->serial,
                ours ? "removed" : "left (no longer ours)", srv->path);

    if (srv->conf.lease_fd >= 0) {
        /* the file holds the workers' respawn backoff, which is about
         * engines that died: we did not, so the next one starts at once */
        if (ftruncate(srv->conf.lease_fd, 0) != 0) {
            kvs_srv_log(srv, "engine %d: lease file not cleared: %s",
                        (int) getpid(), strerror(errno));
        }

        close(srv->conf.lease_fd);
        srv->conf.lease_fd = -1;
        kvs_srv_log(srv, "engine %d: lease released", (int) getpid());
    }

    kvs_srv_log(srv, "engine %d: draining: serving %u client%s until they "
                "leave", (int) getpid(), srv->n_clients,
                srv->n_clients == 1 ? "" : "s");
}


/* --- the loop ------------------------------------------------------------ */

int
kvs_srv_run(kvs_srv_t *srv, kvs_err_t *err)
{
    int                  n, i, stop, rc;
    uint32_t             k;
    uint64_t             v;
    kvs_srv_ev_t        *sev;
    kvs_srv_client_t    *c;
    struct epoll_event   ev, evs[KVS_SRV_EVENTS];

    if (srv->ran) {
        return kvs_err_set(err, KVS_EINVAL, "kvs_srv_run: called twice");
    }

    srv->ran = 1;
    rc = KVS_OK;

    for (k = 0; k < srv->n_engines; k++) {
        rc = kvs_engine_start(srv->engines[k].e, err);
        if (rc != KVS_OK) {
            goto done;
        }

        ev.events = EPOLLIN;
        ev.data.ptr = &srv->engines[k].ev;

        if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD,
                      kvs_engine_fd(srv->engines[k].e), &ev) != 0)
        {
            rc = kvs_err_set(err, KVS_EIO, "epoll_ctl: %s", strerror(errno));
            goto done;
        }
    }

    kvs_srv_log(srv, "engine %d serving %u model%s on %s (incarnation "
                "%016" PRIx64 ")", (int) getpid(), srv->n_engines,
                srv->n_engines > 1 ? "s" : "", srv->path,
                srv->hello.incarnation);

    stop = 0;

    while (!stop) {
        n = epoll_wait(srv->epfd, evs, KVS_SRV_EVENTS, -1);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }

            rc = kvs_err_set(err, KVS_EIO, "epoll_wait: %s", strerror(errno));
            break;
        }

        for (i = 0; i < n; i++) {
            sev = evs[i].data.ptr;

            switch (sev->kind) {

            case KVS_SRV_EV_LISTEN:
                kvs_srv_accept(srv);
                break;

            case KVS_SRV_EV_STOP:
                if (read(srv->stopfd, &v, sizeof(v)) < 0) {
                    /* cleared by an earlier read */
                }
                stop = 1;
                break;

            case KVS_SRV_EV_PARENT:
                /* a pidfd stays readable: watch it once */
                epoll_ctl(srv->epfd, EPOLL_CTL_DEL, srv->conf.parent_pidfd,
                          NULL);
                srv->parent_watched = 0;
                srv->orphaned = 1;
                kvs_srv_log(srv, "engine %d: parent (nginx master) gone, %u "
                            "client%s connected%s", (int) getpid(),
                            srv->n_clients, srv->n_clients == 1 ? "" : "s",
                            srv->n_clients ? ": staying until they leave"
                                           : "");
                break;

            case KVS_SRV_EV_ENGINE:
                kvs_srv_engine_ready(srv, sev->index);
                break;

            case KVS_SRV_EV_CLIENT:
                c = (kvs_srv_client_t *) sev;

                if (c->closing) {
                    break;
                }

                if (evs[i].events & EPOLLOUT) {
                    kvs_srv_flush(srv, c);
                }

                if (!c->closing
                    && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                {
                    kvs_srv_read(srv, c);
                }

                break;
            }
        }

        /* one write per client per wake-up */
        while ((c = srv->dirty) != NULL) {
            srv->dirty = c->dirty_next;
            c->dirty = 0;
            c->dirty_next = NULL;

            if (!c->closing) {
                kvs_srv_flush(srv, c);
            }
        }

        while ((c = srv->closing) != NULL) {
            srv->closing = c->close_next;
            kvs_srv_teardown(srv, c);
        }

        if ((srv->orphaned || srv->draining) && srv->n_clients == 0) {
            kvs_srv_log(srv, "engine %d: %s and no client left: exiting",
                        (int) getpid(),
                        srv->orphaned ? "orphaned" : "drained");
            break;
        }
    }

done:

    while (srv->clients != NULL) {
        kvs_srv_teardown(srv, srv->clients);
    }

    srv->dirty = NULL;
    srv->closing = NULL;

    kvs_srv_unlisten(srv);

    for (k = 0; k < srv->n_engines; k++) {
        kvs_engine_stop(srv->engines[k].e);
    }

    kvs_srv_log(srv, "engine %d stopped", (int) getpid());

    return rc;
}


static void
kvs_srv_accept(kvs_srv_t *srv)
{
    int                  fd, i;
    kvs_err_t            err;
    kvs_srv_client_t    *c;
    struct epoll_event   ev;

    for (i = 0; i < 64; i++) {
        fd = accept4(srv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR
                && errno != ECONNABORTED)
            {
                kvs_srv_log(srv, "accept: %s", strerror(errno));
            }

            return;
        }

        if (srv->n_clients >= srv->conf.max_clients) {
            kvs_srv_log(srv, "client refused: %u clients already",
                        srv->n_clients);
            close(fd);
            continue;
        }

        c = calloc(1, sizeof(kvs_srv_client_t));
        if (c == NULL) {
            kvs_srv_log(srv, "client refused: out of memory");
            close(fd);
            continue;
        }

        c->ev.kind = KVS_SRV_EV_CLIENT;
        c->fd = fd;
        c->serial = ++srv->serial;

        ev.events = EPOLLIN;
        ev.data.ptr = &c->ev;

        if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            kvs_srv_log(srv, "client refused: epoll_ctl: %s",
                        strerror(errno));
            close(fd);
            free(c);
            continue;
        }

        c->next = srv->clients;
        if (srv->clients != NULL) {
            srv->clients->prev = c;
        }
        srv->clients = c;
        srv->n_clients++;

        if (kvs_wire_enc_hello(&c->out, &srv->hello, &err) != KVS_OK) {
            kvs_srv_close(srv, c, "HELLO: %s", err.msg);
            continue;
        }

        c->dirty = 1;
        c->dirty_next = srv->dirty;
        srv->dirty = c;
    }
}


static void
kvs_srv_mark_dirty(kvs_srv_t *srv, kvs_srv_client_t *c)
{
    if (!c->dirty) {
        c->dirty = 1;
        c->dirty_next = srv->dirty;
        srv->dirty = c;
    }
}


/* Reads once and handles every whole frame received. */
static void
kvs_srv_read(kvs_srv_t *srv, kvs_srv_client_t *c)
{
    int             rc;
    size_t          off;
    ssize_t         got;
    kvs_err_t       err;
    kvs_wire_hdr_t  h;

    if (kvs_buf_reserve(&c->in, KVS_SRV_READ) != KVS_OK) {
        kvs_srv_close(srv, c, "out of memory for input");
        return;
    }

    got = read(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len);

    if (got == 0) {
        kvs_srv_close(srv, c, "disconnected");
        return;
    }

    if (got < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            kvs_srv_close(srv, c, "read: %s", strerror(errno));
        }

        return;
    }

    c->in.len += (size_t) got;
    off = 0;

    while (!c->closing) {
        rc = kvs_wire_frame(c->in.data + off, c->in.len - off, &h, &err);

        if (rc == KVS_WIRE_AGAIN) {
            break;
        }

        if (rc != KVS_OK) {
            kvs_srv_close(srv, c, "%s", err.msg);
            break;
        }

        if (kvs_srv_frame(srv, c, &h, c->in.data + off) != KVS_OK) {
            break;
        }

        off += h.len;
    }

    if (off > 0 && !c->closing) {
        memmove(c->in.data, c->in.data + off, c->in.len - off);
        c->in.len -= off;
    }

    /* a big prompt's buffer is not kept for the connection's life */
    if (c->in.len == 0 && c->in.cap > KVS_SRV_KEEP) {
        kvs_buf_free(&c->in);
    }
}


/* One frame from a worker; a protocol error closes the client. */
static int
kvs_srv_frame(kvs_srv_t *srv, kvs_srv_client_t *c, const kvs_wire_hdr_t *h,
    const uint8_t *f)
{
    int                 rc;
    uint32_t            k;
    kvs_err_t           err;
    kvs_srv_req_t      *r;
    kvs_wire_stats_t   *st;

    switch (h->type) {

    case KVS_WIRE_SUBMIT:
        if (kvs_wire_dec_submit(f, h->len, &srv->sub, &err) != KVS_OK) {
            break;
        }

        kvs_srv_submit(srv, c, h->id);
        return KVS_OK;

    case KVS_WIRE_CANCEL:
        if (kvs_wire_dec_empty(f, h->len, &err) != KVS_OK) {
            break;
        }

        /* unknown ids are fine: the request may have just finished */
        r = kvs_srv_map_find(srv, c->serial, h->id);
        if (r != NULL) {
            kvs_srv_req_end(srv, r);
        }

        return KVS_OK;

    case KVS_WIRE_PING:
        if (kvs_wire_dec_empty(f, h->len, &err) != KVS_OK) {
            break;
        }

        if (kvs_wire_enc_pong(&c->out, h->id, kvs_srv_now(), &err)
            != KVS_OK)
        {
            break;
        }

        kvs_srv_mark_dirty(srv, c);
        return KVS_OK;

    case KVS_WIRE_DRAIN:
        if (kvs_wire_dec_drain(f, h->len, &err) != KVS_OK) {
            break;
        }

        kvs_srv_drain(srv, c);
        return KVS_OK;

    case KVS_WIRE_STATS:
        if (kvs_wire_dec_empty(f, h->len, &err) != KVS_OK) {
            break;
        }

        st = malloc(sizeof(kvs_wire_stats_t));
        if (st == NULL) {
            kvs_err_set(&err, KVS_ENOMEM, "STATS: out of memory");
            break;
        }

        st->clients = srv->n_clients;
        st->requests = (uint32_t) srv->map_used;
        st->n_models = srv->n_engines;

        for (k = 0; k < srv->n_engines; k++) {
            st->models[k].index = k;
            kvs_engine_stats(srv->engines[k].e, &st->models[k].st);
        }

        rc = kvs_wire_enc_stats(&c->out, h->id, st, &err);
        free(st);

        if (rc != KVS_OK) {
            break;
        }

        kvs_srv_mark_dirty(srv, c);
        return KVS_OK;

    default:
        kvs_err_set(&err, KVS_EFORMAT, "%s: not a message a worker sends",
                    kvs_wire_type_name(h->type));
        break;
    }

    kvs_srv_close(srv, c, "%s", err.msg);

    return KVS_EFORMAT;
}


static void
kvs_srv_refuse(kvs_srv_t *srv, kvs_srv_client_t *c, uint64_t id, int code,
    const char *msg)
{
    kvs_err_t  err;

    if (kvs_wire_enc_refused(&c->out, id, code, msg, &err) != KVS_OK) {
        kvs_srv_close(srv, c, "%s", err.msg);
        return;
    }

    kvs_srv_mark_dirty(srv, c);
}


static void
kvs_srv_submit(kvs_srv_t *srv, kvs_srv_client_t *c, uint64_t id)
{
    uint32_t           i, n;
    kvs_err_t          err;
    kvs_engine_t      *e;
    kvs_srv_req_t     *r;
    kvs_engine_seq_t  *hs[KVS_ENGINE_MAX_N];
    char               msg[KVS_ERR_MSG_LEN];

    if (srv->sub.model >= srv->n_engines) {
        snprintf(msg, sizeof(msg), "model: no model %u (this engine serves "
                 "%u)", srv->sub.model, srv->n_engines);
        kvs_srv_refuse(srv, c, id, KVS_EINVAL, msg);
        return;
    }

    if (kvs_srv_map_find(srv, c->serial, id) != NULL) {
        snprintf(msg, sizeof(msg), "id: request %" PRIu64 " is already "
                 "running on this connection", id);
        kvs_srv_refuse(srv, c, id, KVS_EINVAL, msg);
        return;
    }

    e = srv->engines[srv->sub.model].e;
    n = srv->sub.req.n > 1 ? srv->sub.req.n : 1;

    r = calloc(1, sizeof(kvs_srv_req_t) + n * sizeof(kvs_srv_choice_t));
    if (r == NULL) {
        kvs_srv_refuse(srv, c, id, KVS_ENOMEM, "engine process: out of "
                       "memory");
        return;
    }

    r->id = id;
    r->c = c;
    r->model = srv->sub.model;
    r->n = n;
    r->recv_ns = kvs_srv_now();

    if (kvs_srv_map_add(srv, r) != KVS_OK) {
        free(r);
        kvs_srv_refuse(srv, c, id, KVS_ENOMEM, "engine process: out of "
                       "memory");
        return;
    }

    /* in the map before the engine can name it; taken out on refusal */
    srv->sub.req.data = r;

    if (kvs_engine_submit(e, &srv->sub.req, hs, &err) != KVS_OK) {
        kvs_srv_map_del(srv, r);
        free(r);
        kvs_srv_refuse(srv, c, id, err.code, err.msg);
        return;
    }

    for (i = 0; i < n; i++) {
        r->ch[i].h = hs[i];
    }

    r->n_open = n;
    r->next = c->reqs;
    if (c->reqs != NULL) {
        c->reqs->prev = r;
    }
    c->reqs = r;
    c->n_reqs++;
}


/* Closes r's open handles (cancelling what still runs) and frees it. */
static void
kvs_srv_req_end(kvs_srv_t *srv, kvs_srv_req_t *r)
{
    uint32_t           i;
    kvs_engine_t      *e;
    kvs_srv_client_t  *c;

    e = srv->engines[r->model].e;
    c = r->c;

    for (i = 0; i < r->n; i++) {
        if (r->ch[i].h != NULL) {
            kvs_engine_close(e, r->ch[i].h);
            r->ch[i].h = NULL;
        }
    }

    if (r->prev != NULL) {
        r->prev->next = r->next;
    } else {
        c->reqs = r->next;
    }

    if (r->next != NULL) {
        r->next->prev = r->prev;
    }

    c->n_reqs--;
    kvs_srv_map_del(srv, r);
    free(r);
}


static void
kvs_srv_engine_ready(kvs_srv_t *srv, uint32_t m)
{
    int                rc;
    size_t             got, k;
    uint32_t           i;
    uint64_t           now;
    kvs_err_t          err;
    kvs_engine_t      *e;
    kvs_srv_req_t     *r;
    kvs_srv_client_t  *c;
    kvs_engine_out_t  *out;
    kvs_wire_times_t   t;
    kvs_engine_seq_t  *hs[KVS_SRV_READY];

    e = srv->engines[m].e;
    out = &srv->out;

    while ((got = kvs_engine_ready(e, hs, KVS_SRV_READY)) > 0) {
        for (k = 0; k < got; k++) {
            r = kvs_engine_seq_data(hs[k]);
            c = r->c;

            for (i = 0; i < r->n && r->ch[i].h != hs[k]; i++) {
                /* n <= 128: a scan costs less than a lookup structure */
            }

            if (i == r->n) {
                /* not ours: cannot happen while the invariants hold */
                kvs_srv_log(srv, "engine %u: a handle of no request", m);
                kvs_engine_close(e, hs[k]);
                continue;
            }

            out->n_tokens = 0;
            out->n_lp = 0;
            out->text.len = 0;

            rc = kvs_engine_read(e, hs[k], out);
            now = kvs_srv_now();

            if (rc < 0) {
                /* its output is stuck in the handle: end the choice with
                 * an error rather than lose the wake-up */
                out->n_tokens = 0;
                out->n_lp = 0;
                out->text.len = 0;
                out->finish = KVS_FINISH_ERROR;
                snprintf(out->error, sizeof(out->error), "engine process: "
                         "out of memory reading the output");
            }

            if (out->n_tokens > 0 && r->ch[i].first_ns == 0) {
                r->ch[i].first_ns = now;
            }

            if (!c->closing) {
                t.recv_ns = r->recv_ns;
                t.first_ns = r->ch[i].first_ns;
                t.now_ns = now;

                if (kvs_wire_enc_out(&c->out, r->id, i, out, &t, &err)
                    != KVS_OK)
                {
                    kvs_srv_close(srv, c, "%s", err.msg);
                } else {
                    kvs_srv_mark_dirty(srv, c);
                }
            }

            if (out->finish != KVS_FINISH_NONE) {
                kvs_engine_close(e, hs[k]);
                r->ch[i].h = NULL;
                r->n_open--;

                if (r->n_open == 0) {
                    kvs_srv_req_end(srv, r);
                }
            }
        }
    }
}


/* Sends what the kernel takes; the rest waits for EPOLLOUT. */
static void
kvs_srv_flush(kvs_srv_t *srv, kvs_srv_client_t *c)
{
    int                 want;
    size_t              left;
    ssize_t             sent;
    struct epoll_event  ev;

    while (c->out_off < c->out.len) {
        sent = send(c->fd, c->out.data + c->out_off,
                    c->out.len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (sent < 0) {
            if (errno == EINTR) {
                continue;
            }

            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                break;
            }

            kvs_srv_close(srv, c, "send: %s", strerror(errno));
            return;
        }

        c->out_off += (size_t) sent;
    }

    left = c->out.len - c->out_off;

    if (left == 0) {
        c->out.len = 0;
        c->out_off = 0;

        if (c->out.cap > KVS_SRV_KEEP) {
            kvs_buf_free(&c->out);
        }

    } else if (c->out_off > (64u << 10) && c->out_off >= left) {
        /* compact once the sent part dominates */
        memmove(c->out.data, c->out.data + c->out_off, left);
        c->out.len = left;
        c->out_off = 0;
    }

    if (left > srv->conf.out_limit) {
        kvs_srv_close(srv, c, "too slow: %zu bytes unsent (limit %zu)",
                      left, srv->conf.out_limit);
        return;
    }

    want = left > 0;

    if (want != c->pollout) {
        ev.events = EPOLLIN | (want ? EPOLLOUT : 0);
        ev.data.ptr = &c->ev;

        if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
            kvs_srv_close(srv, c, "epoll_ctl: %s", strerror(errno));
            return;
        }

        c->pollout = want;
    }
}


/* Marks c for teardown at the end of the iteration (see the top). */
static void
kvs_srv_close(kvs_srv_t *srv, kvs_srv_client_t *c, const char *fmt, ...)
{
    va_list  ap;

    if (c->closing) {
        return;
    }

    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);

    c->closing = 1;
    c->close_next = srv->closing;
    srv->closing = c;
}


static void
kvs_srv_teardown(kvs_srv_t *srv, kvs_srv_client_t *c)
{
    uint32_t  n;

    n = c->n_reqs;

    while (c->reqs != NULL) {
        kvs_srv_req_end(srv, c->reqs);
    }

    if (n > 0 || (c->closing && strcmp(c->why, "disconnected") != 0)) {
        kvs_srv_log(srv, "client %" PRIu64 " closed: %s; %u request%s "
                    "cancelled", c->serial,
                    c->closing ? c->why : "server stopping", n,
                    n == 1 ? "" : "s");
    }

    epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);

    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        srv->clients = c->next;
    }

    if (c->next != NULL) {
        c->next->prev = c->prev;
    }

    srv->n_clients--;
    kvs_buf_free(&c->in);
    kvs_buf_free(&c->out);
    free(c);
}


/* --- (client, request id) -> request ----------------------------------- */

static size_t
kvs_srv_map_slot(uint64_t serial, uint64_t id, size_t cap)
{
    uint64_t  x;

    /* splitmix64's finaliser over both keys */
    x = id ^ (serial * 0x9e3779b97f4a7c15ULL);
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;

    return (size_t) x & (cap - 1);
}


static kvs_srv_req_t *
kvs_srv_map_find(kvs_srv_t *srv, uint64_t serial, uint64_t id)
{
    size_t          i;
    kvs_srv_req_t  *r;

    if (srv->map_cap == 0) {
        return NULL;
    }

    for (i = kvs_srv_map_slot(serial, id, srv->map_cap);
         (r = srv->map[i]) != NULL;
         i = (i + 1) & (srv->map_cap - 1))
    {
        if (r->id == id && r->c->serial == serial) {
            return r;
        }
    }

    return NULL;
}


/* Places r (its id and client set) in a table with a free slot. */
static void
kvs_srv_map_put(kvs_srv_req_t **map, size_t cap, kvs_srv_req_t *r)
{
    size_t  i;

    for (i = kvs_srv_map_slot(r->c->serial, r->id, cap); map[i] != NULL;
         i = (i + 1) & (cap - 1))
    {
        /* linear probing: the table is at most half full */
    }

    map[i] = r;
}


static int
kvs_srv_map_add(kvs_srv_t *srv, kvs_srv_req_t *r)
{
    size_t           i, cap;
    kvs_srv_req_t  **map;

    /* keep at most half full so probes stay short */
    if ((srv->map_used + 1) * 2 > srv->map_cap) {
        cap = srv->map_cap ? srv->map_cap * 2 : 64;
        map = calloc(cap, sizeof(kvs_srv_req_t *));
        if (map == NULL) {
            return KVS_ENOMEM;
        }

        for (i = 0; i < srv->map_cap; i++) {
            if (srv->map[i] != NULL) {
                kvs_srv_map_put(map, cap, srv->map[i]);
            }
        }

        free(srv->map);
        srv->map = map;
        srv->map_cap = cap;
    }

    kvs_srv_map_put(srv->map, srv->map_cap, r);
    srv->map_used++;

    return KVS_OK;
}


static void
kvs_srv_map_del(kvs_srv_t *srv, kvs_srv_req_t *r)
{
    size_t          i, j, home;
    kvs_srv_req_t  *x;

    if (srv->map_cap == 0) {
        return;
    }

    for (i = kvs_srv_map_slot(r->c->serial, r->id, srv->map_cap);
         srv->map[i] != r;
         i = (i + 1) & (srv->map_cap - 1))
    {
        if (srv->map[i] == NULL) {
            return;
        }
    }

    /* backward-shift deletion: no tombstones, probes stay exact */
    srv->map[i] = NULL;
    srv->map_used--;
    j = i;

    for ( ;; ) {
        j = (j + 1) & (srv->map_cap - 1);
        x = srv->map[j];
        if (x == NULL) {
            break;
        }

        home = kvs_srv_map_slot(x->c->serial, x->id, srv->map_cap);

        /* x may move to i if i lies cyclically in [home, j) */
        if (((j - home) & (srv->map_cap - 1))
            >= ((j - i) & (srv->map_cap - 1)))
        {
            srv->map[i] = x;
            srv->map[j] = NULL;
            i = j;
        }
    }
}


/* --- helpers ------------------------------------------------------------- */

static uint64_t
kvs_srv_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}


static void
kvs_srv_log(kvs_srv_t *srv, const char *fmt, ...)
{
    va_list  ap;
    char     msg[512];

    if (srv->conf.log == NULL) {
        return;
    }

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    srv->conf.log(srv->conf.log_data, msg);
}
