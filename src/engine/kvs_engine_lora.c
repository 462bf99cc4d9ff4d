/*
 * kvs_engine_lora: the engine's LoRA adapters (docs/lora.md): opened at
 * load from conf.lora_paths against the served model, served from a
 * bounded set of backend slots (the resident set), and a step's forward
 * with every batch entry under its sequence's adapter (kvs_backend's
 * forward_lora: the base products once for the whole batch, then each
 * adapted row's own low-rank product), so one step mixes sequences of
 * different adapters and of the base.
 *
 * Paging: with fewer slots than adapters, a sequence whose adapter is
 * not resident when it arrives is parked (kept out of the scheduler)
 * and its adapter is loaded by a thread of its own, never on the step
 * loop: kvs_lora_open of the file (checked against the model and
 * against the epoch it was bound with), then the backend's lora_prepare
 * (the slot image: the CPU's F16 packing, CUDA's BF16 host image).  The
 * step that finds the load done puts the image into its slot
 * (lora_install: a pointer swap on the CPU, the upload on CUDA; timed,
 * kvs_engine_lora_put) and the parked sequences into the scheduler.  A
 * load takes a free slot, else the least recently used resident adapter
 * that no sequence holds (evicted: its slot emptied, the same swap).
 * What the step loop lets go of (an evicted adapter, a slot's last
 * image) is freed by the loader, not the step loop.  With every slot
 * held a load waits until one is let go.  A backend without
 * lora_prepare gets set_lora on the step loop instead (none today).
 *
 * Reload (kvs_engine_lora_bind): a worker names the adapter files of its
 * configuration (path and epoch, the LORA frame); a file the engine
 * serves already keeps its id, any other gets the next id (its file
 * opened when a request first needs it), so an engine kept across a
 * reload that replaced, added or removed adapters serves each
 * configuration's files under ids of their own, and the base's cache
 * stays.  Ids are never reused: at most KVS_ENGINE_MAX_LORAS files over
 * the engine's life.
 *
 * Invariants:
 *   - adapter id i (1..n) is ad[i - 1]; ad has room for
 *     KVS_ENGINE_MAX_LORAS and is never moved; an entry's path,
 *     file_epoch and ns_epoch are written once, before n_pub (under
 *     e->lock) counts it, and never change: any thread may read them
 *     for ids up to n_pub; the engine thread's n follows n_pub when it
 *     takes its inbox (kvs_engine_lora_sync), before it sees a request
 *     naming a new id; it is resident (ad->l set) in
 *     ad->slot, or loading into ad->slot, or neither (slot 0); a slot
 *     holds one adapter at most (slot_of); a request naming an id past
 *     n is refused at submit;
 *   - ad->refs counts the sequences holding the adapter (parked or in
 *     the scheduler, and a request's other choices from choice 0's
 *     take), to their end; an adapter with refs is never evicted, so a
 *     scheduled sequence's adapter is resident in every step it runs;
 *     the choices of a parked choice 0 that ends are parked in its
 *     place (kvs_engine_lora_release runs before kvs_engine_unfollow);
 *   - a sequence's prefix cache namespace has the adapter's id and
 *     ns_epoch, a hash of the weights' epoch and the adapter file's
 *     (xxh3-64 of its bytes), never the weights' own: the same prompt
 *     under two adapters, or under a replaced file, never shares a
 *     block; a load whose file's epoch is no longer the one it was
 *     bound with fails the sequences waiting for it;
 *   - every batch entry's table is its sequence's kvs_seq_t.table (the
 *     scheduler's contract, kvs_sched.c), and kvs_seq_t is the first
 *     member of kvs_engine_seq_t: an entry's sequence is found from its
 *     table;
 *   - a step with no adapted sequence takes the plain forward: serving
 *     the base costs what it did;
 *   - ownership: a load's kvs_lora_t and slot image are the loader's
 *     until it puts them in done (under lk), then the engine thread's;
 *     an installed image is the backend's; an image the backend hands
 *     back (spent) and an evicted adapter go to the loader through
 *     spent (under lk), which frees images before the adapters they
 *     may borrow (CUDA's borrows its kvs_lora_t until installed); the
 *     loader reads only the model, an entry's write-once path and
 *     file_epoch, and the backend's lora_prepare (which reads only the
 *     model's shapes), so it runs beside any step;
 *   - locks: the loader takes lk, and e->lock alone (never both) to
 *     wake the engine thread; the engine thread takes lk alone.
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/kvs_buf.h"
#include "base/kvs_clock.h"
#include "index/kvs_index_lora.h"
#include "kvs_engine_impl.h"


typedef struct {
    kvs_lora_t   *l;                  /* resident: the opened file */
    char         *path;               /* owned */
    uint64_t      file_epoch;         /* the file's, read at start */
    uint64_t      ns_epoch;           /* the cache namespace's */
    uint32_t      slot;               /* resident or loading: 1.. */
    uint32_t      refs;               /* sequences holding it */
    uint64_t      used;               /* clock of its last let-go */
    uint8_t       loading;
} kvs_engine_ad_t;

typedef struct {
    uint32_t      id;
    int           rc;
    kvs_lora_t   *l;
    void         *img;                /* its slot image (lora_prepare),
                                         NULL for a set_lora backend */
    uint64_t      ns;                 /* the loader's time on it */
    char          msg[KVS_ERR_MSG_LEN];
} kvs_engine_load_t;

/* What the step loop let go of, for the loader to free. */
typedef struct {
    kvs_lora_t   *l;
    void         *img;
} kvs_engine_spent_t;

/* spent entries waiting at once: each is a load installed or an
 * eviction for a load asked for, and the loader frees them before it
 * reads its next file; past this the engine thread frees its own */
#define KVS_ENGINE_LORA_SPENT  (2 * KVS_ENGINE_LORA_SLOTS + 8)

struct kvs_engine_lora_s {
    kvs_engine_ad_t     *ad;          /* [KVS_ENGINE_MAX_LORAS] */
    uint32_t             n;           /* the engine thread's */
    uint32_t             n_pub;       /* under e->lock: bound so far */
    uint32_t             n_slots;
    uint32_t             max_slots;   /* conf.lora_slots, 0: the most;
                                         n_slots is min(n, max_slots) */
    uint32_t             slot_of[KVS_ENGINE_LORA_SLOTS + 1];  /* id */
    uint32_t             n_resident;
    uint64_t             clock;
    uint32_t            *slots;       /* [slots_cap] a step's */
    size_t               slots_cap;
    kvs_engine_seq_t    *park_head;   /* oldest first */
    kvs_engine_seq_t    *park_tail;
    uint32_t             n_parked;
    uint64_t             loads;
    uint64_t             evictions;
    uint64_t             waited;
    uint64_t             wait_ms;
    uint64_t             load_ns;     /* the loads' (loader's) time */
    uint64_t             install_ns;  /* the step loop's: kvs_engine_
                                         lora_put */
    uint64_t             install_max_ns;

    /* the loader (paging only) */
    const kvs_model_t   *model;
    int                  thread_on;
    pthread_t            thread;
    pthread_mutex_t      lk;
    pthread_cond_t       cv;
    int                  quit;
    uint32_t            *queue;       /* [MAX] ids to load, under lk */
    uint32_t             n_queue;
    kvs_engine_load_t   *done;        /* [MAX] finished, under lk */
    uint32_t             n_done;
    kvs_engine_spent_t   spent[KVS_ENGINE_LORA_SPENT];  /* under lk */
    uint32_t             n_spent;
    uint32_t             delay_us;    /* tests: conf.lora_load_delay_us */
};


static void *kvs_engine_lora_main(void *arg);
static int kvs_engine_lora_start(kvs_engine_t *e, kvs_err_t *err);


/* A backend's slot image freed (NULL: nothing); any thread. */
static void
kvs_engine_lora_free_image(kvs_engine_t *e, void *img)
{
    if (img != NULL) {
        e->be->ops->lora_free_image(e->be, img);
    }
}


/* never the base's namespace; the prefix index names the adapter's
 * blocks under the same (kvs_engine_index.c), as a gateway does */
static uint64_t
kvs_engine_lora_ns_epoch(uint64_t base, uint64_t file)
{
    return kvs_index_lora_epoch(base, file);
}


int
kvs_engine_lora_new(kvs_engine_t *e, kvs_err_t *err)
{
    int                  rc;
    size_t               len;
    uint32_t             i, n, slots, max_slots;
    kvs_engine_ad_t     *ad;
    struct kvs_engine_lora_s  *lo;

    n = e->conf.n_loras;
    slots = e->conf.lora_slots;

    if (n == 0) {
        e->conf.lora_paths = NULL;

        /* none yet: a reload may bind some (kvs_engine_lora_bind) */
        if (e->be->ops->set_lora == NULL
            || e->be->ops->forward_lora == NULL)
        {
            return KVS_OK;
        }
    }

    if (n > KVS_ENGINE_MAX_LORAS) {
        return kvs_err_set(err, KVS_EINVAL, "engine: %" PRIu32 " LoRA "
                           "adapters; at most %d", n, KVS_ENGINE_MAX_LORAS);
    }

    if (slots > KVS_ENGINE_LORA_SLOTS
        || (slots == 0 && n > KVS_ENGINE_LORA_SLOTS))
    {
        return kvs_err_set(err, KVS_EINVAL, "engine: %" PRIu32 " LoRA "
                           "adapter slots for %" PRIu32 " adapters; at "
                           "most %d", slots == 0 ? n : slots, n,
                           KVS_ENGINE_LORA_SLOTS);
    }

    max_slots = slots == 0 ? KVS_ENGINE_LORA_SLOTS : slots;
    slots = max_slots > n ? n : max_slots;

    if (e->be->ops->set_lora == NULL || e->be->ops->forward_lora == NULL) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "engine: the %s backend "
                           "serves no LoRA adapters (%" PRIu32
                           " configured); use the CPU backend",
                           kvs_backend_name(e->be->kind), n);
    }

    lo = calloc(1, sizeof(*lo));
    if (lo == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory for "
                           "the adapters");
    }

    e->lora = lo;
    lo->model = e->conf.model;
    lo->delay_us = e->conf.lora_load_delay_us;
    lo->n_slots = slots;
    lo->max_slots = max_slots;
    lo->ad = calloc(KVS_ENGINE_MAX_LORAS, sizeof(kvs_engine_ad_t));
    lo->queue = calloc(KVS_ENGINE_MAX_LORAS, sizeof(uint32_t));
    lo->done = calloc(KVS_ENGINE_MAX_LORAS, sizeof(kvs_engine_load_t));
    pthread_mutex_init(&lo->lk, NULL);
    pthread_cond_init(&lo->cv, NULL);
    if (lo->ad == NULL || lo->queue == NULL || lo->done == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory for "
                           "the adapters");
    }

    /* every file is read once now: checked against the model, its
     * epoch known for the namespace; the first `slots` stay resident */
    for (i = 0; i < n; i++) {
        ad = &lo->ad[i];
        lo->n = i + 1;
        lo->n_pub = i + 1;

        len = strlen(e->conf.lora_paths[i]);
        ad->path = malloc(len + 1);
        if (ad->path == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory "
                               "for the adapters");
        }
        memcpy(ad->path, e->conf.lora_paths[i], len + 1);

        rc = kvs_lora_open(&ad->l, ad->path, e->conf.model, err);
        if (rc != KVS_OK) {
            ad->l = NULL;
            return rc;
        }

        ad->file_epoch = ad->l->epoch;
        ad->ns_epoch = kvs_engine_lora_ns_epoch(e->epoch, ad->file_epoch);

        if (i >= slots) {
            kvs_lora_close(ad->l);
            ad->l = NULL;
            continue;
        }

        ad->slot = i + 1;
        lo->slot_of[i + 1] = i + 1;
        lo->n_resident++;

        rc = e->be->ops->set_lora(e->be, ad->slot, ad->l, err);
        if (rc != KVS_OK) {
            kvs_err_prefix(err, "adapter %" PRIu32, i + 1);
            return rc;
        }
    }

    e->conf.lora_paths = NULL;        /* borrowed for kvs_engine_new */

    if (slots == n) {
        return KVS_OK;                /* the loader: when one is needed */
    }

    return kvs_engine_lora_start(e, err);
}


/* The loader thread, once. */
static int
kvs_engine_lora_start(kvs_engine_t *e, kvs_err_t *err)
{
    int                        rc;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;

    if (lo->thread_on) {
        return KVS_OK;
    }

    rc = pthread_create(&lo->thread, NULL, kvs_engine_lora_main, e);
    if (rc != 0) {
        return kvs_err_set(err, KVS_ENOMEM, "engine: the adapter loader "
                           "thread: %s", strerror(rc));
    }

    lo->thread_on = 1;

    return KVS_OK;
}


int
kvs_engine_lora_bind(kvs_engine_t *e, const char *path, size_t path_len,
    uint64_t file_epoch, uint32_t *id, kvs_err_t *err)
{
    int                        rc;
    char                      *copy;
    uint32_t                   i;
    kvs_engine_ad_t           *ad;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;
    *id = 0;

    if (lo == NULL) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "engine: the %s backend "
                           "serves no LoRA adapters; use the CPU backend",
                           kvs_backend_name(e->be->kind));
    }

    if (path_len == 0 || memchr(path, '\0', path_len) != NULL) {
        return kvs_err_set(err, KVS_EINVAL, "engine: an adapter path "
                           "empty or holding a NUL byte");
    }

    copy = malloc(path_len + 1);
    if (copy == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory for "
                           "an adapter");
    }

    memcpy(copy, path, path_len);
    copy[path_len] = '\0';

    rc = KVS_OK;

    pthread_mutex_lock(&e->lock);

    for (i = 0; i < lo->n_pub; i++) {
        ad = &lo->ad[i];
        if (ad->file_epoch == file_epoch && strcmp(ad->path, copy) == 0) {
            *id = i + 1;
            break;
        }
    }

    if (*id == 0 && lo->n_pub == KVS_ENGINE_MAX_LORAS) {
        rc = kvs_err_set(err, KVS_ERANGE, "engine: %d LoRA adapter files "
                         "served since it started, the most; %s is "
                         "another: restart the engine",
                         KVS_ENGINE_MAX_LORAS, copy);

    } else if (*id == 0) {
        ad = &lo->ad[lo->n_pub];
        ad->path = copy;
        copy = NULL;
        ad->file_epoch = file_epoch;
        ad->ns_epoch = kvs_engine_lora_ns_epoch(e->epoch, file_epoch);
        *id = ++lo->n_pub;
    }

    pthread_mutex_unlock(&e->lock);

    free(copy);

    return rc;
}


void
kvs_engine_lora_sync(kvs_engine_t *e)
{
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;

    if (lo == NULL || lo->n == lo->n_pub) {
        return;
    }

    lo->n = lo->n_pub;
    lo->n_slots = lo->n < lo->max_slots ? lo->n : lo->max_slots;
}


uint32_t
kvs_engine_lora_bound(kvs_engine_t *e)
{
    uint32_t  n;

    if (e->lora == NULL) {
        return 0;
    }

    pthread_mutex_lock(&e->lock);
    n = e->lora->n_pub;
    pthread_mutex_unlock(&e->lock);

    return n;
}


void
kvs_engine_lora_free(kvs_engine_t *e)
{
    uint32_t                   i;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;
    if (lo == NULL) {
        return;
    }

    if (lo->thread_on) {
        pthread_mutex_lock(&lo->lk);
        lo->quit = 1;
        pthread_cond_signal(&lo->cv);
        pthread_mutex_unlock(&lo->lk);
        pthread_join(lo->thread, NULL);
    }

    pthread_mutex_destroy(&lo->lk);
    pthread_cond_destroy(&lo->cv);

    /* images before the adapters they may borrow */
    for (i = 0; i < lo->n_spent; i++) {
        kvs_engine_lora_free_image(e, lo->spent[i].img);
        kvs_lora_close(lo->spent[i].l);
    }

    for (i = 0; i < lo->n_done; i++) {
        kvs_engine_lora_free_image(e, lo->done[i].img);
        kvs_lora_close(lo->done[i].l);
    }

    for (i = 0; lo->ad != NULL && i < lo->n_pub; i++) {
        kvs_lora_close(lo->ad[i].l);
        free(lo->ad[i].path);
    }

    free(lo->ad);
    free(lo->queue);
    free(lo->done);
    free(lo->slots);
    free(lo);
    e->lora = NULL;
}


/* The loader's part of a load: the file opened and checked (against
 * the model and the epoch it was bound with), then packed into the
 * backend's slot image; what the step loop does with it is a pointer
 * swap (kvs_engine_lora_put). */
static void
kvs_engine_lora_read(kvs_engine_t *e, kvs_engine_load_t *d)
{
    kvs_err_t                  err;
    kvs_lora_t                *l;
    struct timespec            ts;
    const kvs_engine_ad_t     *ad;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;
    ad = &lo->ad[d->id - 1];
    d->img = NULL;

    if (lo->delay_us > 0) {
        ts.tv_sec = lo->delay_us / 1000000;
        ts.tv_nsec = (long) (lo->delay_us % 1000000) * 1000;
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { /* void */ }
    }

    /* the path and epoch are written once, before the id was queued */
    kvs_err_clear(&err);
    if (kvs_lora_open(&l, ad->path, lo->model, &err) != KVS_OK) {
        l = NULL;

    } else if (l->epoch != ad->file_epoch) {
        kvs_err_set(&err, KVS_EINVAL, "its file changed since the "
                    "configuration read it (epoch %016" PRIx64 ", was %016"
                    PRIx64 "); reload", l->epoch, ad->file_epoch);
        kvs_lora_close(l);
        l = NULL;

    } else if (e->be->ops->lora_prepare != NULL
               && e->be->ops->lora_prepare(e->be, l, &d->img, &err)
                  != KVS_OK)
    {
        kvs_lora_close(l);
        l = NULL;
        d->img = NULL;
    }

    d->l = l;
    d->rc = l != NULL ? KVS_OK : err.code;
    snprintf(d->msg, sizeof(d->msg), "%s", err.msg);
}


/* The loader: frees what the step loop let go of, then reads what the
 * engine thread queued, one at a time. */
static void *
kvs_engine_lora_main(void *arg)
{
    uint32_t                   i, n;
    uint64_t                   t0;
    kvs_engine_t              *e = arg;
    kvs_engine_load_t          d;
    kvs_engine_spent_t         spent[KVS_ENGINE_LORA_SPENT];
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;

    pthread_mutex_lock(&lo->lk);

    for ( ;; ) {
        while (!lo->quit && lo->n_queue == 0 && lo->n_spent == 0) {
            pthread_cond_wait(&lo->cv, &lo->lk);
        }

        if (lo->quit) {
            break;
        }

        if (lo->n_spent > 0) {
            n = lo->n_spent;
            memcpy(spent, lo->spent, n * sizeof(kvs_engine_spent_t));
            lo->n_spent = 0;
            pthread_mutex_unlock(&lo->lk);

            for (i = 0; i < n; i++) {
                kvs_engine_lora_free_image(e, spent[i].img);
                kvs_lora_close(spent[i].l);
            }

            pthread_mutex_lock(&lo->lk);
            continue;
        }

        memset(&d, 0, sizeof(d));
        d.id = lo->queue[0];
        lo->n_queue--;
        memmove(lo->queue, lo->queue + 1, lo->n_queue * sizeof(uint32_t));
        pthread_mutex_unlock(&lo->lk);

        t0 = kvs_now_ns();
        kvs_engine_lora_read(e, &d);
        d.ns = kvs_now_ns() - t0;

        pthread_mutex_lock(&lo->lk);
        lo->done[lo->n_done++] = d;     /* one load per id at a time */
        pthread_mutex_unlock(&lo->lk);

        pthread_mutex_lock(&e->lock);
        e->lora_ready = 1;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->lock);

        pthread_mutex_lock(&lo->lk);
    }

    pthread_mutex_unlock(&lo->lk);

    return NULL;
}


static void
kvs_engine_lora_unpark(struct kvs_engine_lora_s *lo, kvs_engine_seq_t *h)
{
    if (h->lora_prev != NULL) {
        h->lora_prev->lora_next = h->lora_next;
    } else {
        lo->park_head = h->lora_next;
    }

    if (h->lora_next != NULL) {
        h->lora_next->lora_prev = h->lora_prev;
    } else {
        lo->park_tail = h->lora_prev;
    }

    h->lora_prev = NULL;
    h->lora_next = NULL;
    h->lora_parked = 0;
    lo->n_parked--;
}


static void
kvs_engine_lora_park(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;

    h->lora_parked = 1;
    h->lora_since = e->sched.now;
    h->lora_next = NULL;
    h->lora_prev = lo->park_tail;

    if (lo->park_tail != NULL) {
        lo->park_tail->lora_next = h;
    } else {
        lo->park_head = h;
    }

    lo->park_tail = h;
    lo->n_parked++;
}


int
kvs_engine_lora_take(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    kvs_err_t                  err;
    kvs_engine_ad_t           *ad;
    kvs_engine_seq_t          *f;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;

    if (h->adapter == 0 || lo == NULL) {
        return 0;
    }

    /* the request's other choices hold it too, from now: they run
     * when choice 0 forks them (or ends), never through a take */
    ad = &lo->ad[h->adapter - 1];

    for (f = h; f != NULL; f = f == h ? h->followers : f->next_follower) {
        ad->refs++;
        f->lora_held = 1;
    }

    if (ad->l != NULL) {
        return 0;
    }

    /* an adapter bound after the start may need the loader first */
    if (kvs_engine_lora_start(e, &err) != KVS_OK) {
        kvs_engine_end(e, h, KVS_FINISH_ERROR, err.msg, 0);
        return 1;
    }

    kvs_engine_lora_park(e, h);

    return 1;
}


void
kvs_engine_lora_release(kvs_engine_t *e, kvs_engine_seq_t *h)
{
    kvs_engine_ad_t           *ad;
    kvs_engine_seq_t          *f, *next;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;

    if (!h->lora_held || lo == NULL) {
        return;
    }

    if (h->lora_parked) {
        kvs_engine_lora_unpark(lo, h);

        /* its choices, which would go to the scheduler in its place,
         * wait for the adapter as it did */
        for (f = h->followers; f != NULL; f = next) {
            next = f->next_follower;
            f->leader = NULL;
            f->next_follower = NULL;
            kvs_engine_lora_park(e, f);
        }

        h->followers = NULL;
    }

    ad = &lo->ad[h->adapter - 1];
    ad->refs--;
    ad->used = ++lo->clock;
    h->lora_held = 0;
}


/* What the step loop no longer reads (an adapter, a slot image: a large
 * free unmaps pages), handed to the loader to free; freed here when its
 * list is full. */
static void
kvs_engine_lora_spend(kvs_engine_t *e, kvs_lora_t *l, void *img)
{
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;

    if (l == NULL && img == NULL) {
        return;
    }

    if (lo->thread_on) {
        pthread_mutex_lock(&lo->lk);

        if (lo->n_spent < KVS_ENGINE_LORA_SPENT) {
            lo->spent[lo->n_spent].l = l;
            lo->spent[lo->n_spent].img = img;
            lo->n_spent++;
            pthread_cond_signal(&lo->cv);
            pthread_mutex_unlock(&lo->lk);
            return;
        }

        pthread_mutex_unlock(&lo->lk);
    }

    kvs_engine_lora_free_image(e, img);
    kvs_lora_close(l);
}


/* Adapter l, packed into img by the loader (NULL for a backend without
 * lora_install: set_lora packs it here), into slot s; NULL, NULL empties
 * it.  The step loop's whole part of a load or an eviction, timed: with
 * lora_install a pointer swap, the slot's last image handed to the
 * loader.  A failed put leaves img the caller's. */
static int
kvs_engine_lora_put(kvs_engine_t *e, uint32_t s, const kvs_lora_t *l,
    void *img, kvs_err_t *err)
{
    int                        rc;
    void                      *spent;
    uint64_t                   t0, dt;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;
    spent = NULL;
    t0 = kvs_now_ns();

    if (e->be->ops->lora_install != NULL) {
        rc = e->be->ops->lora_install(e->be, s, img, &spent, err);
    } else {
        rc = e->be->ops->set_lora(e->be, s, l, err);
    }

    dt = kvs_now_ns() - t0;
    lo->install_ns += dt;
    lo->install_max_ns = dt > lo->install_max_ns ? dt : lo->install_max_ns;

    if (rc == KVS_OK) {
        kvs_engine_lora_spend(e, NULL, spent);
    }

    return rc;
}


/* A slot for a load: a free one, else the least recently let go
 * resident adapter's that nobody holds (evicted); 0: none now. */
static uint32_t
kvs_engine_lora_slot(kvs_engine_t *e)
{
    uint32_t                   s, i, victim;
    kvs_err_t                  err;
    kvs_engine_ad_t           *ad;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;

    for (s = 1; s <= lo->n_slots; s++) {
        if (lo->slot_of[s] == 0) {
            return s;
        }
    }

    victim = 0;

    for (i = 0; i < lo->n; i++) {
        ad = &lo->ad[i];
        if (ad->l != NULL && ad->refs == 0
            && (victim == 0 || ad->used < lo->ad[victim - 1].used))
        {
            victim = i + 1;
        }
    }

    if (victim == 0) {
        return 0;
    }

    ad = &lo->ad[victim - 1];
    s = ad->slot;

    /* emptying a slot cannot fail; its image and the adapter are freed
     * by the loader */
    (void) kvs_engine_lora_put(e, s, NULL, NULL, &err);
    kvs_engine_lora_spend(e, ad->l, NULL);
    ad->l = NULL;
    ad->slot = 0;
    lo->slot_of[s] = 0;
    lo->n_resident--;
    lo->evictions++;

    return s;
}


/* A finished load into its slot, or its waiting sequences failed. */
static void
kvs_engine_lora_loaded(kvs_engine_t *e, kvs_engine_load_t *d)
{
    char                       msg[KVS_ERR_MSG_LEN];
    kvs_err_t                  err;
    kvs_engine_ad_t           *ad;
    kvs_engine_seq_t          *h, *next;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;
    ad = &lo->ad[d->id - 1];
    ad->loading = 0;
    lo->load_ns += d->ns;

    if (d->rc == KVS_OK
        && kvs_engine_lora_put(e, ad->slot, d->l, d->img, &err) != KVS_OK)
    {
        snprintf(d->msg, sizeof(d->msg), "%s", err.msg);
        d->rc = err.code;
    }

    if (d->rc == KVS_OK) {
        ad->l = d->l;
        d->l = NULL;
        lo->n_resident++;
        lo->loads++;
        return;
    }

    kvs_engine_lora_spend(e, d->l, d->img);
    d->l = NULL;
    d->img = NULL;
    lo->slot_of[ad->slot] = 0;
    ad->slot = 0;

    snprintf(msg, sizeof(msg), "LoRA adapter %" PRIu32 " could not be "
             "loaded: %s", d->id, d->msg);

    for (h = lo->park_head; h != NULL; h = next) {
        next = h->lora_next;
        if (h->adapter == d->id) {
            kvs_engine_end(e, h, KVS_FINISH_ERROR, msg, 0);
        }
    }
}


void
kvs_engine_lora_admit(kvs_engine_t *e)
{
    uint32_t                   i, n, s;
    kvs_engine_ad_t           *ad;
    kvs_engine_seq_t          *h, *next;
    kvs_engine_load_t          done[8];
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;

    if (lo == NULL || !lo->thread_on) {
        return;
    }

    pthread_mutex_lock(&e->lock);
    e->lora_ready = 0;
    pthread_mutex_unlock(&e->lock);

    /* the finished loads, a few at a time (the rest next step) */
    pthread_mutex_lock(&lo->lk);
    n = lo->n_done < 8 ? lo->n_done : 8;
    memcpy(done, lo->done, n * sizeof(kvs_engine_load_t));
    lo->n_done -= n;
    memmove(lo->done, lo->done + n,
            lo->n_done * sizeof(kvs_engine_load_t));
    if (lo->n_done > 0) {
        pthread_mutex_unlock(&lo->lk);
        pthread_mutex_lock(&e->lock);
        e->lora_ready = 1;
        pthread_mutex_unlock(&e->lock);
    } else {
        pthread_mutex_unlock(&lo->lk);
    }

    for (i = 0; i < n; i++) {
        kvs_engine_lora_loaded(e, &done[i]);
    }

    /* the parked: in the scheduler once resident, in arrival order;
     * else their adapter's load, when a slot can be had */
    for (h = lo->park_head; h != NULL; h = next) {
        next = h->lora_next;
        ad = &lo->ad[h->adapter - 1];

        if (ad->l != NULL) {
            kvs_engine_lora_unpark(lo, h);
            lo->waited++;
            lo->wait_ms += e->sched.now - h->lora_since;
            kvs_engine_tier_add(e, h);    /* or waits for its blocks */
            continue;
        }

        if (ad->loading) {
            continue;
        }

        s = kvs_engine_lora_slot(e);
        if (s == 0) {
            continue;                 /* every slot held: later */
        }

        ad->slot = s;
        ad->loading = 1;
        lo->slot_of[s] = h->adapter;

        pthread_mutex_lock(&lo->lk);
        lo->queue[lo->n_queue++] = h->adapter;
        pthread_cond_signal(&lo->cv);
        pthread_mutex_unlock(&lo->lk);
    }
}


void
kvs_engine_lora_end_all(kvs_engine_t *e)
{
    while (e->lora != NULL && e->lora->park_head != NULL) {
        kvs_engine_end(e, e->lora->park_head, KVS_FINISH_CANCELLED, NULL,
                       0);
    }
}


void
kvs_engine_lora_stats(kvs_engine_t *e)
{
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;
    if (lo == NULL) {
        return;
    }

    e->stats.lora_adapters = lo->n;
    e->stats.lora_slots = lo->n_slots;
    e->stats.lora_resident = lo->n_resident;
    e->stats.lora_parked = lo->n_parked;
    e->stats.lora_loads = lo->loads;
    e->stats.lora_evictions = lo->evictions;
    e->stats.lora_waited = lo->waited;
    e->stats.lora_wait_ms = lo->wait_ms;
    e->stats.lora_load_ns = lo->load_ns;
    e->stats.lora_install_ns = lo->install_ns;
    e->stats.lora_install_max_ns = lo->install_max_ns;
}


int
kvs_engine_lora_forward(kvs_engine_t *e, const kvs_sched_plan_t *plan,
    kvs_err_t *err)
{
    uint32_t                   i, adapted;
    kvs_seq_t                 *seq;
    const kvs_kv_table_t      *table;
    const kvs_engine_seq_t    *h;
    struct kvs_engine_lora_s  *lo;

    lo = e->lora;
    adapted = 0;

    for (seq = plan->seqs; seq != NULL; seq = seq->step_next) {
        adapted |= ((kvs_engine_seq_t *) seq)->adapter;
    }

    if (adapted == 0 || lo == NULL) {
        return kvs_backend_forward(e->be, &plan->batch, e->logits, err);
    }

    if (kvs_grow((void **) &lo->slots, &lo->slots_cap, plan->batch.n,
                 sizeof(uint32_t)) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "engine: out of memory for "
                           "the step's adapters");
    }

    table = NULL;
    h = NULL;

    for (i = 0; i < plan->batch.n; i++) {
        if (plan->batch.toks[i].table != table) {
            table = plan->batch.toks[i].table;
            h = (const kvs_engine_seq_t *)
                ((const char *) table - offsetof(kvs_seq_t, table));
        }

        /* resident: a held adapter is never evicted */
        lo->slots[i] = h->adapter != 0 ? lo->ad[h->adapter - 1].slot : 0;
    }

    return e->be->ops->forward_lora(e->be, &plan->batch, lo->slots,
                                    e->logits, err);
}


uint32_t
kvs_engine_n_loras(const kvs_engine_t *e)
{
    return e->lora != NULL ? e->lora->n : 0;
}


const kvs_lora_t *
kvs_engine_lora(const kvs_engine_t *e, uint32_t id)
{
    return e->lora != NULL && id >= 1 && id <= e->lora->n
           ? e->lora->ad[id - 1].l : NULL;
}


uint64_t
kvs_engine_lora_file_epoch(const kvs_engine_t *e, uint32_t id)
{
    return e->lora != NULL && id >= 1 && id <= e->lora->n
           ? e->lora->ad[id - 1].file_epoch : 0;
}


uint64_t
kvs_engine_lora_epoch(const kvs_engine_t *e, uint32_t id)
{
    return e->lora != NULL && id >= 1 && id <= e->lora->n
           ? e->lora->ad[id - 1].ns_epoch : e->epoch;
}
