/*
 * kvs_srv_client: the engine process's client connections: accepting
 * them (HELLO first), reading and dispatching their frames, flushing
 * their output buffers, and closing them.
 *
 * Invariants: a client is read once per wake-up (epoll is
 * level-triggered), so one that floods cannot starve the others; its
 * output is appended to c->out as it is produced, [out_off, out.len)
 * unsent, and flushed once per iteration from the dirty list; one whose
 * unsent output passes out_limit, that breaks the protocol or that
 * disconnects is only marked closing (kvs_srv_close), and torn down
 * after the events of the iteration, when its requests are ended (their
 * handles closed, so their KV blocks return to the pool at the engine's
 * next step).  A client's serial is never reused.
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


static int kvs_srv_frame(kvs_srv_t *srv, kvs_srv_client_t *c,
    const kvs_wire_hdr_t *h, const uint8_t *f);


void
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


void
kvs_srv_mark_dirty(kvs_srv_t *srv, kvs_srv_client_t *c)
{
    if (!c->dirty) {
        c->dirty = 1;
        c->dirty_next = srv->dirty;
        srv->dirty = c;
    }
}


/* Reads once and handles every whole frame received. */
void
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

        if (kvs_wire_enc_pong(&c->out, h->id, kvs_now_ns(), &err)
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

    case KVS_WIRE_SUBSCRIBE:
        if (kvs_wire_dec_subscribe(f, h->len, &err) != KVS_OK) {
            break;
        }

        kvs_srv_subscribe(srv, c);
        return KVS_OK;

    case KVS_WIRE_LORA:
        if (kvs_srv_lora(srv, c, f, h->len, &err) != KVS_OK) {
            break;
        }

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
            kvs_engine_tenants(srv->engines[k].e, &st->models[k].tenants);
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


/* Sends what the kernel takes; the rest waits for EPOLLOUT. */
void
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


/* Marks c for teardown at the end of the iteration (see kvs_srv.c). */
void
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


void
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

    kvs_srv_unsubscribe(srv, c);
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
    kvs_srv_lora_free(c);
    kvs_buf_free(&c->in);
    kvs_buf_free(&c->out);
    free(c);
}
