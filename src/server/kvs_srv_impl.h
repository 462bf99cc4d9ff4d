/*
 * kvs_srv_impl.h: private to src/server: the server's, clients' and
 * requests' structs and the functions kvs_srv.c (life cycle, the loop),
 * kvs_srv_client.c (connections) and kvs_srv_req.c (requests) call
 * across files.
 *
 * Ownership: the server owns its engines, its clients and their
 * requests.  A request (kvs_srv_req_t) belongs to one client, is found
 * by (client serial, request id) in an open-addressing map, and holds
 * one engine handle per choice until that choice finishes or the
 * request is cancelled; it is freed when its last handle is closed.
 * Everything here runs on the loop's thread only.
 */

#ifndef KVS_SRV_IMPL_H
#define KVS_SRV_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvs_srv.h"
#include "base/kvs_buf.h"
#include "wire/kvs_wire.h"
#include "base/kvs_clock.h"

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

/* A connection's adapter ids of one model, from its LORA frame
 * (kvs_srv_lora.c): its adapter id i + 1 is the engine's id[i], 0
 * where the engine refused to bind it (why: the first refusal). */
typedef struct {
    uint32_t           n;
    uint32_t           id[KVS_ENGINE_MAX_LORAS];
    char               why[KVS_ERR_MSG_LEN];
} kvs_srv_lora_t;

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
    int                subscribed;    /* sent SUBSCRIBE: may publish */
    uint64_t           ix_frames;     /* INDEX frames sent to it */
    kvs_srv_lora_t    *lora[KVS_WIRE_MAX_MODELS];  /* NULL: no LORA for
                                         that model; its ids are the
                                         engine's own */
    kvs_srv_client_t  *next;          /* all clients */
    kvs_srv_client_t  *prev;
    kvs_srv_client_t  *dirty_next;
    kvs_srv_client_t  *close_next;
    char               why[128];      /* why it is being closed */
};

typedef struct {
    kvs_srv_ev_t   ev;
    kvs_engine_t  *e;
    uint64_t       ix_sent_ns;        /* the last INDEX frame to the
                                         publisher, CLOCK_MONOTONIC */
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

    kvs_srv_client_t   *publisher;    /* gets INDEX frames: the oldest
                                         subscribed client; NULL */
    kvs_engine_index_t  ix;           /* scratch for index takes */

    kvs_wire_submit_t   sub;          /* scratch for SUBMIT */
    kvs_wire_lora_t     lora;         /* scratch for LORA */
    kvs_engine_out_t    out;          /* scratch for reads */
};


/* kvs_srv.c */
void kvs_srv_log(kvs_srv_t *srv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void kvs_srv_drain(kvs_srv_t *srv, kvs_srv_client_t *c);

/* kvs_srv_client.c */
void kvs_srv_accept(kvs_srv_t *srv);
void kvs_srv_read(kvs_srv_t *srv, kvs_srv_client_t *c);
void kvs_srv_mark_dirty(kvs_srv_t *srv, kvs_srv_client_t *c);
void kvs_srv_flush(kvs_srv_t *srv, kvs_srv_client_t *c);
void kvs_srv_close(kvs_srv_t *srv, kvs_srv_client_t *c,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void kvs_srv_teardown(kvs_srv_t *srv, kvs_srv_client_t *c);

/* kvs_srv_index.c */
void kvs_srv_subscribe(kvs_srv_t *srv, kvs_srv_client_t *c);
/* c is going: another subscriber takes over (with a resync), or the
 * engines stop recording. */
void kvs_srv_unsubscribe(kvs_srv_t *srv, kvs_srv_client_t *c);
/* Sends the publisher what the engines recorded, and a load report per
 * model at least once a second. */
void kvs_srv_index_tick(kvs_srv_t *srv);
/* epoll_wait's timeout: ms until the next load report is due; -1 with
 * no publisher. */
int kvs_srv_index_timeout(kvs_srv_t *srv);

/* kvs_srv_lora.c */
/* A LORA frame: binds each file with the model's engine; KVS_EFORMAT
 * (err set) closes the client. */
int kvs_srv_lora(kvs_srv_t *srv, kvs_srv_client_t *c, const uint8_t *f,
    size_t f_len, kvs_err_t *err);
/* srv->sub's adapter id, the connection's, made the engine's: KVS_OK,
 * else a refusal in msg[KVS_ERR_MSG_LEN]. */
int kvs_srv_lora_map(kvs_srv_t *srv, kvs_srv_client_t *c, char *msg);
void kvs_srv_lora_free(kvs_srv_client_t *c);

/* kvs_srv_req.c */
void kvs_srv_submit(kvs_srv_t *srv, kvs_srv_client_t *c, uint64_t id);
void kvs_srv_req_end(kvs_srv_t *srv, kvs_srv_req_t *r);
void kvs_srv_engine_ready(kvs_srv_t *srv, uint32_t m);
kvs_srv_req_t *kvs_srv_map_find(kvs_srv_t *srv, uint64_t serial,
    uint64_t id);

#endif /* KVS_SRV_IMPL_H */
