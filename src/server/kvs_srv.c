/*
 * kvs_srv: the engine process's life cycle, listening socket, DRAIN and
 * epoll loop (see kvs_srv.h); the clients are in kvs_srv_client.c, their
 * requests and the engines' output in kvs_srv_req.c, the structs and
 * the ownership rules in kvs_srv_impl.h.
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

#include "kvs_srv_impl.h"
#include "backend/cpu/kvs_cpu.h"


static int kvs_srv_listen(kvs_srv_t *srv, kvs_err_t *err);
static void kvs_srv_unlisten(kvs_srv_t *srv);


/* --- life cycle ---------------------------------------------------------- */

int
kvs_srv_new(kvs_srv_t **out, const kvs_srv_conf_t *conf, kvs_err_t *err)
{
    int                  rc;
    char                 kernels[256];
    size_t               nl;
    uint32_t             i;
    kvs_srv_t           *srv;
    kvs_gguf_str_t       gs;
    kvs_wire_model_t    *wm;
    kvs_backend_mem_t    mem;
    kvs_engine_stats_t   st;
    kvs_engine_conf_t    ec;
    kvs_backend_kind_t   kind;
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
        srv->hello.incarnation = kvs_now_ns()
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

        /* the prefix index names blocks under the served name */
        ec = conf->models[i].engine;
        ec.index_model = wm->name;

        rc = kvs_engine_new(&srv->engines[i].e, &ec, err);
        if (rc != KVS_OK) {
            srv->engines[i].e = NULL;
            kvs_err_prefix(err, "models[%u] (%s)", i, wm->name);
            goto failed;
        }

        srv->n_engines = i + 1;

        /* which backend computes and why: one line per model */
        kvs_srv_log(srv, "model \"%s\": %s", wm->name,
                    kvs_engine_backend(srv->engines[i].e));

        /* what the weights and the K/V take, as the backend holds them:
         * the figures HELLO gives /v1/models and kv_rate */
        kind = kvs_engine_mem(srv->engines[i].e, &mem);
        kvs_srv_log(srv, "model \"%s\": weights on %s: %" PRIu64 " bytes "
                    "mapped, %" PRIu64 " owned, %" PRIu64 " on the device; "
                    "KV %s, %" PRIu64 " bytes per token", wm->name,
                    kind == KVS_BACKEND_CUDA ? "cuda" : "cpu",
                    mem.weights_mapped, mem.weights_owned,
                    mem.weights_device, kvs_backend_kv_name(mem.kv_dtype),
                    kvs_kv_bytes_per_token(mem.kv_dtype, m->hp.n_layer,
                                           m->hp.n_head_kv,
                                           m->hp.head_dim_k,
                                           m->hp.head_dim_v,
                                           conf->models[i].engine
                                           .block_tokens));

        /* the CPU's product kernels, AMX tiles or why not (issue 19) */
        if (kind == KVS_BACKEND_CPU) {
            kvs_srv_log(srv, "model \"%s\": cpu kernels: %s", wm->name,
                        kvs_cpu_kernels(kernels, sizeof(kernels)));
        }

        kvs_engine_stats(srv->engines[i].e, &st);

        /* the disk tier: what it kept of its file, or why not */
        if (st.tier.on) {
            kvs_srv_log(srv, "model \"%s\": disk tier \"%s\" (%s): %" PRIu64
                        " blocks of %" PRIu64 " bytes, %" PRIu64 " kept%s%s",
                        wm->name, ec.tier_path,
                        st.tier.direct ? "O_DIRECT" : "buffered",
                        st.tier.slots, st.tier.slot_bytes, st.tier.kept,
                        st.tier.discarded[0] ? "; discarded: " : "",
                        st.tier.discarded);
        }

        if (st.tier.host_on) {
            kvs_srv_log(srv, "model \"%s\": host tier: %" PRIu64 " blocks "
                        "of %" PRIu64 " bytes", wm->name,
                        st.tier.host_slots, st.tier.host_block_bytes);
        }

        wm->index = i;
        wm->n_ctx = conf->models[i].engine.n_ctx != 0
                    ? conf->models[i].engine.n_ctx : m->hp.n_ctx_train;
        wm->n_vocab = m->hp.n_vocab;
        wm->block_tokens = st.block_tokens;
        wm->kv_blocks = st.kv_blocks;
        wm->file_size = m->file_size;
        wm->mtime_ns = m->mtime_ns;
        wm->dev = m->dev;
        wm->ino = m->ino;
        wm->epoch = st.epoch;
        wm->backend = kind == KVS_BACKEND_CUDA;
        wm->kv_dtype = mem.kv_dtype;
        wm->weights_mapped = mem.weights_mapped;
        wm->weights_owned = mem.weights_owned;
        wm->weights_device = mem.weights_device;
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
    kvs_engine_index_free(&srv->ix);
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
void
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
        n = epoll_wait(srv->epfd, evs, KVS_SRV_EVENTS,
                       kvs_srv_index_timeout(srv));

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

        kvs_srv_index_tick(srv);

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


/* --- helpers ------------------------------------------------------------- */

void
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
