/*
 * ngx_http_kvserve_dispatch: the requests a worker sends to the engine
 * processes (/work/shared/ENGINE-PROCESS-NOTES.md §4.4,
 * docs/engine-process.md): the table of what each engine holds, sending
 * and cancelling, the STATS for every engine, and dispatching the
 * engine's frames to their owners.  The connection itself (connecting,
 * reading, writing, losing it) is ngx_http_kvserve_engine.c.
 *
 * Requests reach the engine as ngx_http_kvserve_sub_t's: each gets a
 * fresh id (slot | sequence << 32, so a late frame for a reused slot is
 * dropped), and frames from the engine are dispatched to it by id.  A sub
 * is in its engine's table (id != 0) or on its waiting queue (waiting),
 * never both; it is taken out of the table before its owner is told
 * REFUSED or STATS, so that the owner may send it again at once.  A sub
 * sent while its engine is not ready is queued until the next engine says
 * HELLO.
 *
 * A STATS for NGX_HTTP_KVSERVE_ALL (kvserve_status, metrics) goes to
 * every ready engine as one part each; the owner gets one answer, the
 * replies merged with each model's entry renumbered to its index.
 *
 * A HELLO naming another file than the model's is answered with DRAIN
 * (unless this worker is of an older configuration) and the connection
 * goes.  With kvserve_index, the publishing worker (worker 0) sends
 * SUBSCRIBE after each HELLO and hands the INDEX frames that answer it to
 * the publisher (ngx_http_kvserve_index.c).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_kvserve_engine.h"
#include "ngx/index/ngx_http_kvserve_index.h"


static ngx_int_t ngx_http_kvserve_engine_put(ngx_http_kvserve_engine_t *e,
    ngx_http_kvserve_sub_t *s);
static ngx_int_t ngx_http_kvserve_stats_all(ngx_http_kvserve_sub_t *s);
static ngx_int_t ngx_http_kvserve_stats_all_forget(
    ngx_http_kvserve_sub_t *s);


/* A STATS for every engine: one part per engine, the replies merged. */
typedef struct {
    ngx_queue_t               queue;       /* in ngx_http_kvserve_alls */
    ngx_http_kvserve_sub_t   *owner;
    ngx_uint_t                pending;     /* parts not yet answered */
    ngx_uint_t                first;       /* none was ready: the first
                                              reply answers */
    ngx_uint_t                answered;
    ngx_uint_t                sending;     /* in stats_all's loop: a
                                              forget there only marks */
    ngx_uint_t                forgotten;
    kvs_wire_stats_t          merged;
    ngx_http_kvserve_sub_t    parts[1];    /* [ngx_http_kvserve_n_engs] */
} ngx_http_kvserve_stats_all_t;


ngx_queue_t                 ngx_http_kvserve_alls;


/* ---- the sub table ---------------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_engine_register(ngx_http_kvserve_engine_t *e,
    ngx_http_kvserve_sub_t *s)
{
    ngx_uint_t                i, n;
    ngx_http_kvserve_sub_t  **subs;

    for (i = e->free_hint; i < e->n_subs; i++) {
        if (e->subs[i] == NULL) {
            goto found;
        }
    }

    for (i = 0; i < e->free_hint && i < e->n_subs; i++) {
        if (e->subs[i] == NULL) {
            goto found;
        }
    }

    /* the table lives for the worker: plain heap, doubled */
    n = e->n_subs ? e->n_subs * 2 : 64;
    subs = ngx_alloc(n * sizeof(ngx_http_kvserve_sub_t *), e->cycle->log);
    if (subs == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(subs, n * sizeof(ngx_http_kvserve_sub_t *));
    if (e->n_subs) {
        ngx_memcpy(subs, e->subs,
                   e->n_subs * sizeof(ngx_http_kvserve_sub_t *));
        ngx_free(e->subs);
    }

    i = e->n_subs;
    e->subs = subs;
    e->n_subs = n;

found:

    e->seq++;
    if (e->seq == 0) {
        e->seq = 1;
    }

    e->subs[i] = s;
    e->free_hint = i + 1;
    s->id = ((uint64_t) e->seq << 32) | (uint64_t) i;

    return NGX_OK;
}


static ngx_http_kvserve_sub_t *
ngx_http_kvserve_engine_find(ngx_http_kvserve_engine_t *e, uint64_t id)
{
    ngx_uint_t               i;
    ngx_http_kvserve_sub_t  *s;

    i = (ngx_uint_t) (id & 0xffffffff);

    if (i >= e->n_subs) {
        return NULL;
    }

    s = e->subs[i];

    return (s != NULL && s->id == id) ? s : NULL;
}


static void
ngx_http_kvserve_engine_unregister(ngx_http_kvserve_engine_t *e,
    ngx_http_kvserve_sub_t *s)
{
    ngx_uint_t  i;

    i = (ngx_uint_t) (s->id & 0xffffffff);

    if (i < e->n_subs && e->subs[i] == s) {
        e->subs[i] = NULL;
        if (i < e->free_hint) {
            e->free_hint = i;
        }
    }

    s->id = 0;
}


/* ---- sending ---------------------------------------------------------- */

ngx_int_t
ngx_http_kvserve_engine_send(ngx_http_kvserve_sub_t *s)
{
    ngx_http_kvserve_engine_t  *e;

    if (s->type == KVS_WIRE_STATS && s->model == NGX_HTTP_KVSERVE_ALL) {
        return ngx_http_kvserve_stats_all(s);
    }

    e = ngx_http_kvserve_engine_of(s->model);
    if (e == NULL) {
        return NGX_ERROR;
    }

    if (s->id != 0 || s->waiting) {
        return NGX_OK;
    }

    if (!e->ready) {
        ngx_queue_insert_tail(&e->waiting, &s->queue);
        s->waiting = 1;

        /* an exiting worker still serves what it accepted */
        if (!e->reconnect.timer_set && e->c == NULL && !ngx_terminate) {
            ngx_add_timer(&e->reconnect, 1);
        }

        return NGX_OK;
    }

    if (ngx_http_kvserve_engine_put(e, s) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_kvserve_engine_flush(e) == NGX_ERROR) {
        /* s was told EV_LOST and may be queued again: that is its
         * answer */
        return NGX_OK;
    }

    return NGX_OK;
}


/* Registers s and appends its frame to the output buffer. */
static ngx_int_t
ngx_http_kvserve_engine_put(ngx_http_kvserve_engine_t *e,
    ngx_http_kvserve_sub_t *s)
{
    int        rc;
    u_char    *p;
    uint64_t   id;
    ngx_uint_t k;
    kvs_err_t  err;

    if (ngx_http_kvserve_engine_register(e, s) != NGX_OK) {
        return NGX_ERROR;
    }

    if (s->type == KVS_WIRE_SUBMIT) {
        if (kvs_buf_append(&e->wbuf, s->frame, s->frame_len) != KVS_OK) {
            ngx_http_kvserve_engine_unregister(e, s);
            return NGX_ERROR;
        }

        /* the header's id: bytes 8..15, little-endian */
        p = e->wbuf.data + e->wbuf.len - s->frame_len + 8;
        id = s->id;
        for (k = 0; k < 8; k++) {
            p[k] = (u_char) (id >> (8 * k));
        }

        return NGX_OK;
    }

    rc = kvs_wire_enc_empty(&e->wbuf, (kvs_wire_type_t) s->type, s->id,
                            &err);
    if (rc != KVS_OK) {
        ngx_http_kvserve_engine_unregister(e, s);
        return NGX_ERROR;
    }

    return NGX_OK;
}


void
ngx_http_kvserve_engine_forget(ngx_http_kvserve_sub_t *s)
{
    kvs_err_t                   err;
    ngx_http_kvserve_engine_t  *e;

    if (s->type == KVS_WIRE_STATS && s->model == NGX_HTTP_KVSERVE_ALL) {
        (void) ngx_http_kvserve_stats_all_forget(s);
        return;
    }

    e = ngx_http_kvserve_engine_of(s->model);

    if (s->waiting) {
        ngx_queue_remove(&s->queue);
        s->waiting = 0;
    }

    if (e == NULL || s->id == 0) {
        s->id = 0;
        return;
    }

    /* a STATS has nothing to cancel; the engine answers it anyway and
     * the answer finds no one */
    if (s->type == KVS_WIRE_SUBMIT && !s->done && e->c != NULL
        && kvs_wire_enc_empty(&e->wbuf, KVS_WIRE_CANCEL, s->id, &err)
           == KVS_OK)
    {
        ngx_http_kvserve_engine_unregister(e, s);
        (void) ngx_http_kvserve_engine_flush(e);
        return;
    }

    ngx_http_kvserve_engine_unregister(e, s);
}


/* ---- a STATS for every engine ----------------------------------------- */

static ngx_http_kvserve_stats_all_t *
ngx_http_kvserve_stats_all_find(ngx_http_kvserve_sub_t *owner)
{
    ngx_queue_t                   *q;
    ngx_http_kvserve_stats_all_t  *a;

    if (ngx_http_kvserve_engs == NULL) {
        return NULL;
    }

    for (q = ngx_queue_head(&ngx_http_kvserve_alls);
         q != ngx_queue_sentinel(&ngx_http_kvserve_alls);
         q = ngx_queue_next(q))
    {
        a = ngx_queue_data(q, ngx_http_kvserve_stats_all_t, queue);
        if (a->owner == owner) {
            return a;
        }
    }

    return NULL;
}


/* Every part still with an engine or waiting for one is forgotten. */
static void
ngx_http_kvserve_stats_all_drop_parts(ngx_http_kvserve_stats_all_t *a)
{
    ngx_uint_t  k;

    for (k = 0; k < ngx_http_kvserve_n_engs; k++) {
        if (a->parts[k].id != 0 || a->parts[k].waiting) {
            ngx_http_kvserve_engine_forget(&a->parts[k]);
        }
    }
}


static void
ngx_http_kvserve_stats_part(ngx_http_kvserve_sub_t *s, ngx_uint_t ev,
    void *msg)
{
    kvs_wire_stats_t              *st, *mg;
    ngx_http_kvserve_sub_t        *owner;
    ngx_http_kvserve_stats_all_t  *a;

    a = s->data;

    if (a->answered) {
        return;
    }

    if (ev == NGX_HTTP_KVSERVE_EV_STATS) {
        st = msg;
        mg = &a->merged;

        mg->clients += st->clients;
        mg->requests += st->requests;

        /* the engine's model 0 is model s->model of the configuration */
        if (st->n_models >= 1 && mg->n_models < KVS_WIRE_MAX_MODELS) {
            mg->models[mg->n_models] = st->models[0];
            mg->models[mg->n_models].index = (uint32_t) s->model;
            mg->n_models++;
        }

    } else if (ev != NGX_HTTP_KVSERVE_EV_LOST) {
        return;
    }

    /* a lost engine's model is left out of the answer */
    if (a->pending > 0) {
        a->pending--;
    }

    if (a->pending > 0 && !(a->first && ev == NGX_HTTP_KVSERVE_EV_STATS)) {
        return;
    }

    ngx_http_kvserve_stats_all_drop_parts(a);

    owner = a->owner;
    a->answered = 1;
    owner->waiting = 0;

    /* the owner may forget (and so free a) from its handler: last */
    owner->handler(owner, NGX_HTTP_KVSERVE_EV_STATS, &a->merged);
}


/*
 * One STATS part per ready engine; when none is ready, one per engine,
 * queued, and the first reply answers (the owner's timer bounds the
 * wait, as for a single engine).
 */
static ngx_int_t
ngx_http_kvserve_stats_all(ngx_http_kvserve_sub_t *s)
{
    ngx_uint_t                     k, n, any;
    ngx_http_kvserve_sub_t        *p;
    ngx_http_kvserve_stats_all_t  *a;

    n = ngx_http_kvserve_n_engs;

    if (n == 0) {
        return NGX_ERROR;
    }

    a = ngx_http_kvserve_stats_all_find(s);
    if (a != NULL) {
        if (!a->answered) {
            return NGX_OK;      /* asked already */
        }

        (void) ngx_http_kvserve_stats_all_forget(s);
    }

    a = ngx_alloc(sizeof(ngx_http_kvserve_stats_all_t)
                  + (n - 1) * sizeof(ngx_http_kvserve_sub_t),
                  ngx_cycle->log);
    if (a == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(a, sizeof(ngx_http_kvserve_stats_all_t)
                   + (n - 1) * sizeof(ngx_http_kvserve_sub_t));

    any = 0;
    for (k = 0; k < n; k++) {
        any |= ngx_http_kvserve_engs[k].ready;
    }

    a->owner = s;
    a->first = !any;
    ngx_queue_insert_tail(&ngx_http_kvserve_alls, &a->queue);

    s->waiting = a->first;

    for (k = 0; k < n; k++) {
        if (any && !ngx_http_kvserve_engs[k].ready) {
            continue;
        }

        p = &a->parts[k];
        p->model = k;
        p->type = KVS_WIRE_STATS;
        p->handler = ngx_http_kvserve_stats_part;
        p->data = a;
        a->pending++;
    }

    /* sent after counting, so that an answer lost at once counts down
     * from the right number */
    a->sending = 1;

    for (k = 0; k < n && !a->answered; k++) {
        p = &a->parts[k];

        if (p->handler != NULL
            && ngx_http_kvserve_engine_send(p) != NGX_OK)
        {
            ngx_http_kvserve_stats_part(p, NGX_HTTP_KVSERVE_EV_LOST, NULL);
        }
    }

    a->sending = 0;

    if (a->forgotten) {
        ngx_http_kvserve_stats_all_drop_parts(a);
        ngx_queue_remove(&a->queue);
        ngx_free(a);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_kvserve_stats_all_forget(ngx_http_kvserve_sub_t *s)
{
    ngx_http_kvserve_stats_all_t  *a;

    s->waiting = 0;
    s->id = 0;

    a = ngx_http_kvserve_stats_all_find(s);
    if (a == NULL) {
        return NGX_DECLINED;
    }

    a->answered = 1;

    if (a->sending) {
        a->forgotten = 1;
        a->owner = NULL;        /* the owner may reuse its sub */
        return NGX_OK;
    }

    ngx_http_kvserve_stats_all_drop_parts(a);
    ngx_queue_remove(&a->queue);
    ngx_free(a);

    return NGX_OK;
}


/* SUBSCRIBE again (kvserve_index: Redis is back and behind): every ready
 * engine answers with a full listing. */
ngx_int_t
ngx_http_kvserve_engine_subscribe(void)
{
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    kvs_err_t                   err;
    ngx_http_kvserve_engine_t  *e;

    rc = NGX_DECLINED;

    for (i = 0; i < ngx_http_kvserve_n_engs; i++) {
        e = &ngx_http_kvserve_engs[i];

        if (e->c == NULL || !e->ready) {
            continue;
        }

        if (kvs_wire_enc_subscribe(&e->wbuf, &err) != KVS_OK) {
            ngx_log_error(NGX_LOG_ALERT, e->cycle->log, 0,
                          "kvserve: SUBSCRIBE not sent: %s", err.msg);
            return NGX_ERROR;
        }

        if (ngx_http_kvserve_engine_flush(e) == NGX_ERROR) {
            return NGX_ERROR;
        }

        rc = NGX_OK;
    }

    return rc;
}


/* ---- the engine's frames ---------------------------------------------- */

static ngx_int_t
ngx_http_kvserve_engine_hello_ok(ngx_http_kvserve_engine_t *e)
{
    ngx_uint_t                 i;
    kvs_wire_model_t          *wm;
    ngx_http_kvserve_model_t  *m;

    m = e->model;

    /* one model per engine process, this one */
    if (e->hello.n_models != 1) {
        return NGX_DECLINED;
    }

    for (i = 0; i < 1; i++) {
        wm = &e->hello.models[i];

        if (ngx_strlen(wm->name) != m[i].name.len
            || ngx_strncmp(wm->name, m[i].name.data, m[i].name.len) != 0
            || wm->file_size != m[i].model->file_size
            || wm->mtime_ns != m[i].model->mtime_ns
            || wm->dev != m[i].model->dev
            || wm->ino != m[i].model->ino
            || (m[i].kv_dtype_set && wm->kv_dtype != m[i].kv_dtype))
        {
            /* another file, or a cache in another dtype than
             * kvserve_kv_dtype now asks: that engine drains, and its
             * blocks go with it; the next one starts a new pool */
            return NGX_DECLINED;
        }
    }

    return NGX_OK;
}


/* One whole frame; NGX_ERROR: the connection must go. */
ngx_int_t
ngx_http_kvserve_engine_frame(ngx_http_kvserve_engine_t *e,
    const uint8_t *f, kvs_wire_hdr_t *h)
{
    int                      rc;
    kvs_err_t                err;
    ngx_queue_t             *q;
    kvs_wire_index_t         index;
    kvs_wire_refused_t       refused;
    ngx_http_kvserve_sub_t  *s;

    switch (h->type) {

    case KVS_WIRE_HELLO:
        if (kvs_wire_dec_hello(f, h->len, &e->hello, &err) != KVS_OK) {
            break;
        }

        if (ngx_http_kvserve_engine_hello_ok(e) != NGX_OK) {
            ngx_http_kvserve_engine_why(e, "(pid %uD) serves another "
                                        "file or KV dtype; waiting for "
                                        "its successor", e->hello.pid);

            if (ngx_exiting || ngx_quit || ngx_terminate) {
                ngx_log_error(NGX_LOG_INFO, e->cycle->log, 0,
                              "kvserve: engine %uD serves another file "
                              "or KV dtype than this (older) "
                              "configuration's model "
                              "\"%V\"", e->hello.pid, &e->model->name);
                return NGX_DECLINED;
            }

            /* the lost connection's close follows the frame: the engine
             * reads DRAIN, then EOF */
            if (kvs_wire_enc_drain(&e->wbuf, &err) != KVS_OK
                || ngx_http_kvserve_engine_flush(e) == NGX_ERROR)
            {
                ngx_log_error(NGX_LOG_ALERT, e->cycle->log, 0,
                              "kvserve: DRAIN to engine %uD not sent",
                              e->hello.pid);
                return NGX_DECLINED;
            }

            ngx_log_error(NGX_LOG_NOTICE, e->cycle->log, 0,
                          "kvserve: engine %uD serves other models than "
                          "this configuration's: DRAIN sent (model \"%V\": "
                          "another file)", e->hello.pid, &e->model->name);
            return NGX_DECLINED;
        }

        ngx_log_error(NGX_LOG_INFO, e->cycle->log, 0,
                      "kvserve: worker %P connected to engine %uD of "
                      "model \"%V\"", ngx_pid, e->hello.pid,
                      &e->model->name);

        e->ready = 1;
        e->reason_len = 0;

        /* its adapter files, before any SUBMIT names one (docs/lora.md,
         * "Reload") */
        if (ngx_http_kvserve_lora_frame(e->model, &e->wbuf, &err)
            != NGX_OK)
        {
            ngx_log_error(NGX_LOG_ALERT, e->cycle->log, 0,
                          "kvserve: LORA to engine %uD not sent: %s",
                          e->hello.pid, err.msg);
            return NGX_DECLINED;
        }

        /* the prefix index's publisher (kvserve_index): the engine
         * answers with INDEX frames, a full listing first; flushed with
         * whatever follows when the read ends */
        if (ngx_http_kvserve_index_subscriber(e->cycle)) {
            if (kvs_wire_enc_subscribe(&e->wbuf, &err) != KVS_OK) {
                ngx_log_error(NGX_LOG_ALERT, e->cycle->log, 0,
                              "kvserve: SUBSCRIBE not sent: %s", err.msg);
            } else {
                ngx_http_kvserve_index_hello(&e->hello, e->index);
            }
        }

        while (!ngx_queue_empty(&e->waiting)) {
            q = ngx_queue_head(&e->waiting);
            ngx_queue_remove(q);
            s = ngx_queue_data(q, ngx_http_kvserve_sub_t, queue);
            s->waiting = 0;

            if (ngx_http_kvserve_engine_put(e, s) != NGX_OK) {
                s->handler(s, NGX_HTTP_KVSERVE_EV_LOST, NULL);
            }
        }

        return NGX_OK;

    case KVS_WIRE_OUT:
        rc = kvs_wire_dec_out(f, h->len, &e->out, &err);
        if (rc != KVS_OK) {
            break;
        }

        s = ngx_http_kvserve_engine_find(e, h->id);
        if (s == NULL) {
            return NGX_OK;
        }

        /* a choice's end is not the request's (n > 1): the owner
         * forgets s once all its choices ended */
        s->handler(s, NGX_HTTP_KVSERVE_EV_OUT, &e->out);

        return NGX_OK;

    case KVS_WIRE_REFUSED:
        if (kvs_wire_dec_refused(f, h->len, &refused, &err) != KVS_OK) {
            break;
        }

        s = ngx_http_kvserve_engine_find(e, h->id);
        if (s == NULL) {
            return NGX_OK;
        }

        ngx_http_kvserve_engine_unregister(e, s);
        s->handler(s, NGX_HTTP_KVSERVE_EV_REFUSED, &refused);

        return NGX_OK;

    case KVS_WIRE_STATS_REPLY:
        if (kvs_wire_dec_stats(f, h->len, &e->stats, &err) != KVS_OK) {
            break;
        }

        s = ngx_http_kvserve_engine_find(e, h->id);
        if (s == NULL) {
            return NGX_OK;
        }

        ngx_http_kvserve_engine_unregister(e, s);
        s->handler(s, NGX_HTTP_KVSERVE_EV_STATS, &e->stats);

        return NGX_OK;

    case KVS_WIRE_PONG:
        return NGX_OK;

    case KVS_WIRE_INDEX:
        if (kvs_wire_dec_index(f, h->len, &index, &err) != KVS_OK) {
            break;
        }

        /* the engine's only model is this one */
        if (index.model != 0) {
            kvs_err_set(&err, KVS_EFORMAT, "INDEX: model %u of an engine "
                        "of one model", (unsigned) index.model);
            break;
        }

        index.model = (uint32_t) e->index;
        ngx_http_kvserve_index_publish(&index);

        return NGX_OK;

    default:
        kvs_err_set(&err, KVS_EFORMAT, "unexpected %s",
                    kvs_wire_type_name(h->type));
        break;
    }

    ngx_log_error(NGX_LOG_ALERT, e->cycle->log, 0,
                  "kvserve: bad frame from the engine: %s", err.msg);

    return NGX_ERROR;
}
