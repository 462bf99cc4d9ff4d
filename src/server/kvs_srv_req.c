/*
 * kvs_srv_req: the engine process's requests: SUBMIT to an engine (or
 * REFUSED), the engines' ready handles turned into OUT frames, the end
 * of a request, and the (client serial, request id) -> request map.
 *
 * Invariants: a request belongs to one client (on its reqs list) and is
 * in the map exactly while it exists; it holds one engine handle per
 * choice until that choice finishes (closed as its last OUT is encoded)
 * or the request ends; it is freed when its last handle is closed.  A
 * handle taken by kvs_engine_ready() is valid until it is processed,
 * because closing a client only marks it (see kvs_srv.c).  The map is
 * open addressing with linear probing over a power-of-two table, and
 * deletion shifts entries back rather than leaving tombstones.
 *
 * The prefix cache and fair share fields travel as decoded: SUBMIT's
 * scope, adapter, pins and tenant are already in the kvs_engine_req_t
 * the decoder filled (checked there), and an output's cache fields go
 * out only when the engine set them for this read (has_cache is cleared
 * before each), so one request's figures never leak into another's
 * frame.
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


static int kvs_srv_map_add(kvs_srv_t *srv, kvs_srv_req_t *r);
static void kvs_srv_map_del(kvs_srv_t *srv, kvs_srv_req_t *r);


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


void
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

    if (kvs_srv_lora_map(srv, c, msg) != KVS_OK) {
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
    r->recv_ns = kvs_now_ns();

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
void
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


/* An output's cache fields as OUT may carry them (kvs_wire.h): figures
 * out of range are dropped, and logged, rather than failing the frame
 * (which would close the worker's connection). */
static void
kvs_srv_out_cache(kvs_srv_t *srv, uint32_t m, kvs_engine_out_t *out)
{
    if (!out->has_cache) {
        out->n_cached = 0;
        out->n_cache_created = 0;
        out->miss = KVS_RADIX_MISS_NONE;
        out->miss_pos = 0;
        return;
    }

    if ((unsigned) out->miss > KVS_RADIX_MISS_OFF
        || out->n_cached > out->n_prompt
        || out->n_cache_created > out->n_prompt
        || out->miss_pos > out->n_prompt)
    {
        kvs_srv_log(srv, "engine %u: cache figures out of range (miss %d at "
                    "%u, %u cached, %u created, %u prompt tokens): not sent",
                    m, (int) out->miss, out->miss_pos, out->n_cached,
                    out->n_cache_created, out->n_prompt);
        out->has_cache = 0;
        kvs_srv_out_cache(srv, m, out);
    }
}


void
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
            out->has_cache = 0;

            rc = kvs_engine_read(e, hs[k], out);
            kvs_srv_out_cache(srv, m, out);
            now = kvs_now_ns();

            if (rc < 0) {
                /* its output is stuck in the handle: end the choice with
                 * an error rather than lose the wake-up */
                out->n_tokens = 0;
                out->n_lp = 0;
                out->text.len = 0;
                out->finish = KVS_FINISH_ERROR;
                out->has_cache = 0;
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


kvs_srv_req_t *
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
