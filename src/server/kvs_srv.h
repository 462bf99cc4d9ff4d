/*
 * kvs_srv: the engine process's server loop: one engine per model, and
 * nginx workers (or any client) talking kvs_wire over a unix stream
 * socket, one connection each (docs/engine-process.md).
 *
 * One thread runs an epoll loop over the listening socket, the clients,
 * each engine's eventfd, a stop eventfd and optionally the nginx
 * master's pidfd; the engines step on threads of their own.  Nothing in
 * the loop blocks: a client's output waits in its own buffer until the
 * kernel takes it (EPOLLOUT), so a slow worker never holds up the engine
 * or the other workers; one whose unsent output passes out_limit is
 * disconnected.  A client that disconnects, breaks the protocol or is
 * cut off has every request of its own cancelled (their handles closed,
 * so their KV blocks return to the pool at the engine's next step).
 *
 * The socket: bound at path.<pid> and renamed onto path, so it appears
 * atomically and only once the models are loaded; at exit it is
 * unlinked only if path is still our inode (a newer engine may have
 * renamed its own onto it).
 *
 * DRAIN (a worker of a newer configuration found our models are not its
 * own): the server stops accepting (the listening socket closed, path
 * unlinked while still ours), then releases the lease by closing
 * lease_fd (its file emptied first: the workers keep their respawn
 * backoff there, and a drained engine did not die), so that a worker can
 * fork the engine of the new models at once; it
 * keeps serving the clients it has and exits when none remain, as the
 * orphan rule does.
 */

#ifndef KVS_SRV_H
#define KVS_SRV_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "engine/kvs_engine.h"

#define KVS_SRV_OUT_LIMIT    (64u << 20)   /* unsent bytes per client */
#define KVS_SRV_MAX_CLIENTS  1024

typedef void (*kvs_srv_log_pt)(void *data, const char *msg);

typedef struct {
    const char         *name;         /* served name, 1..255 bytes; NULL:
                                         the GGUF's general.name, else
                                         "model<i>" */
    kvs_engine_conf_t   engine;       /* model, vocab (borrowed, they
                                         outlive the server), sizes */
} kvs_srv_model_t;

typedef struct {
    const char             *socket_path;
    const kvs_srv_model_t  *models;       /* [n_models], copied */
    uint32_t                n_models;     /* 1..KVS_WIRE_MAX_MODELS */
    int                     parent_pidfd; /* >= 0: readable when the nginx
                                             master is gone; then serve
                                             while clients remain, exit
                                             when none do.  Not closed. */
    int                     lease_fd;     /* the flock lease (the
                                             engine holds the only open
                                             file description left), or
                                             -1; 0..2 are stdio, never a
                                             lease, and are ignored too.
                                             Owned once kvs_srv_new()
                                             succeeds: closed on DRAIN,
                                             else by kvs_srv_free() */
    size_t                  out_limit;    /* 0: KVS_SRV_OUT_LIMIT */
    uint32_t                max_clients;  /* 0: KVS_SRV_MAX_CLIENTS */
    kvs_srv_log_pt          log;          /* one line per event; NULL */
    void                   *log_data;
} kvs_srv_conf_t;

typedef struct kvs_srv_s  kvs_srv_t;


/* Builds the engines (loads nothing twice: models are the caller's),
 * then binds and listens; *out is NULL on failure. */
int kvs_srv_new(kvs_srv_t **out, const kvs_srv_conf_t *conf,
    kvs_err_t *err);

/* Starts the engines and serves until kvs_srv_stop() or, orphaned or
 * drained, until the last client leaves; then cancels what is left,
 * stops the engines and removes the socket.  Call once. */
int kvs_srv_run(kvs_srv_t *srv, kvs_err_t *err);

/* Makes kvs_srv_run() return; async-signal-safe, any thread. */
void kvs_srv_stop(kvs_srv_t *srv);

/* After kvs_srv_run() has returned (or was never called). */
void kvs_srv_free(kvs_srv_t *srv);

/* Model i's engine, for its stats and sizes (not to submit to). */
kvs_engine_t *kvs_srv_engine(kvs_srv_t *srv, uint32_t i);

/* The random id HELLO carries. */
uint64_t kvs_srv_incarnation(const kvs_srv_t *srv);

#endif /* KVS_SRV_H */
