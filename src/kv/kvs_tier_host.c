/*
 * kvs_tier_host: the prefix cache's host memory tier (kvs_tier_host.h
 * says what it owns and the invariants it keeps): slots in one
 * allocation from the caller's hook, a chained hash table from
 * (namespace hash, path id) to a slot, an LRU list of the slots in use
 * (head: most recent) and a free list.
 */

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/kvs_le.h"
#include "kvs_kv_pool.h"
#include "kvs_tier_host.h"


typedef struct {
    uint64_t   ns;                    /* kvs_tier_host_ns() of the key */
    uint64_t   epoch;
    uint32_t   adapter;
    uint32_t   scope_len;
    uint32_t   holds;
    uint32_t   used;                  /* holds a block */
    uint32_t   named;                 /* name[] is the block's */
    uint32_t   pending;               /* reserved, its bytes still on
                                         their way: held, found by puts
                                         only */
    uint32_t   chain;                 /* next in its bucket */
    uint32_t   prev;                  /* LRU neighbours, or the free */
    uint32_t   next;                  /* list's next */
    uint8_t    id[KVS_TIER_ID_LEN];
    uint8_t    name[KVS_RADIX_NAME_LEN];  /* its prefix index name */
    char       scope[KVS_RADIX_MAX_SCOPE];
} kvs_tier_host_slot_t;

struct kvs_tier_host_s {
    kvs_tier_host_conf_t    conf;
    pthread_mutex_t         lock;
    uint8_t                *mem;      /* [n][block_bytes], the hook's */
    int32_t                *tokens;   /* [n][block_tokens] */
    kvs_tier_host_slot_t   *slots;    /* [n] */
    uint32_t               *buckets;  /* [mask + 1] */
    uint32_t                n;
    uint32_t                mask;
    uint32_t                lru_head;
    uint32_t                lru_tail;
    uint32_t                free_head;
    kvs_tier_host_stats_t   st;
};


/* The namespace's hash: epoch, adapter, then the scope's bytes. */
static uint64_t
kvs_tier_host_ns(const kvs_radix_key_t *key)
{
    uint8_t  b[12];

    kvs_le_put64(b, key->epoch);
    kvs_le_put32(b + 8, key->adapter);

    return XXH3_64bits_withSeed(key->scope_len > 0 ? key->scope : "",
                                key->scope_len, XXH3_64bits(b, 12));
}


static void *
kvs_tier_host_malloc(void *arg, size_t bytes, kvs_err_t *err)
{
    void  *p;

    p = malloc(bytes);
    if (p == NULL) {
        (void) kvs_err_set(err, KVS_ENOMEM, "host tier: out of memory for "
                           "%zu bytes", bytes);
    }

    return p;
}


static void
kvs_tier_host_mfree(void *arg, void *p)
{
    free(p);
}


int
kvs_tier_host_new(kvs_tier_host_t **out, const kvs_tier_host_conf_t *conf,
    kvs_err_t *err)
{
    int               rc;
    uint32_t          i, nb;
    uint64_t          n;
    kvs_tier_host_t  *h;

    *out = NULL;

    if (conf->size == 0 || conf->block_bytes == 0
        || conf->block_tokens == 0)
    {
        return kvs_err_set(err, KVS_EINVAL, "host tier: a zero size");
    }

    if ((conf->alloc == NULL) != (conf->free == NULL)) {
        return kvs_err_set(err, KVS_EINVAL, "host tier: an alloc hook "
                           "without its free, or the reverse");
    }

    n = conf->size / conf->block_bytes;
    if (n == 0 || n > KVS_TIER_HOST_MAX_SLOTS) {
        return kvs_err_set(err, KVS_ERANGE, "host tier: %" PRIu64 " bytes "
                           "hold %" PRIu64 " blocks of %" PRIu64 " bytes "
                           "(1 to %u)", conf->size, n, conf->block_bytes,
                           KVS_TIER_HOST_MAX_SLOTS);
    }

    h = calloc(1, sizeof(kvs_tier_host_t));
    if (h == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "host tier: out of memory");
    }

    h->conf = *conf;
    h->conf.alloc = conf->alloc != NULL ? conf->alloc
                                        : kvs_tier_host_malloc;
    h->conf.free = conf->free != NULL ? conf->free : kvs_tier_host_mfree;
    h->n = (uint32_t) n;

    for (nb = 1; nb < 2 * h->n; nb <<= 1) {
        /* void */
    }

    h->mask = nb - 1;
    h->slots = calloc(h->n, sizeof(kvs_tier_host_slot_t));
    h->tokens = calloc((size_t) h->n * conf->block_tokens, sizeof(int32_t));
    h->buckets = malloc((size_t) nb * sizeof(uint32_t));

    if (h->slots == NULL || h->tokens == NULL || h->buckets == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "host tier: out of memory for "
                         "%u slots", h->n);
        goto failed;
    }

    h->mem = h->conf.alloc(h->conf.mem_arg, (size_t) n * conf->block_bytes,
                           err);
    if (h->mem == NULL) {
        rc = KVS_ENOMEM;
        goto failed;
    }

    for (i = 0; i < nb; i++) {
        h->buckets[i] = KVS_TIER_HOST_NONE;
    }

    for (i = 0; i < h->n; i++) {
        h->slots[i].next = i + 1 < h->n ? i + 1 : KVS_TIER_HOST_NONE;
        h->slots[i].prev = KVS_TIER_HOST_NONE;
        h->slots[i].chain = KVS_TIER_HOST_NONE;
    }

    h->free_head = 0;
    h->lru_head = KVS_TIER_HOST_NONE;
    h->lru_tail = KVS_TIER_HOST_NONE;
    h->st.slots = h->n;
    h->st.block_bytes = conf->block_bytes;
    pthread_mutex_init(&h->lock, NULL);

    *out = h;

    return KVS_OK;

failed:

    free(h->slots);
    free(h->tokens);
    free(h->buckets);
    free(h);

    return rc;
}


void
kvs_tier_host_free(kvs_tier_host_t *h)
{
    if (h == NULL) {
        return;
    }

    h->conf.free(h->conf.mem_arg, h->mem);
    pthread_mutex_destroy(&h->lock);
    free(h->slots);
    free(h->tokens);
    free(h->buckets);
    free(h);
}


static uint32_t
kvs_tier_host_bucket(const kvs_tier_host_t *h, uint64_t ns,
    const uint8_t *id)
{
    return (uint32_t) XXH3_64bits_withSeed(id, KVS_TIER_ID_LEN, ns)
           & h->mask;
}


/* The key whole, not only its hash. */
static int
kvs_tier_host_same_key(const kvs_tier_host_slot_t *s, uint64_t ns,
    const kvs_radix_key_t *key, const uint8_t *id)
{
    return s->ns == ns && s->epoch == key->epoch
           && s->adapter == key->adapter && s->scope_len == key->scope_len
           && (key->scope_len == 0
               || memcmp(s->scope, key->scope, key->scope_len) == 0)
           && memcmp(s->id, id, KVS_TIER_ID_LEN) == 0;
}


static uint32_t
kvs_tier_host_find(const kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id)
{
    uint32_t  i;
    uint64_t  ns;

    if (key->scope_len > KVS_RADIX_MAX_SCOPE) {
        return KVS_TIER_HOST_NONE;
    }

    ns = kvs_tier_host_ns(key);

    for (i = h->buckets[kvs_tier_host_bucket(h, ns, id)];
         i != KVS_TIER_HOST_NONE; i = h->slots[i].chain)
    {
        if (kvs_tier_host_same_key(&h->slots[i], ns, key, id)) {
            return i;
        }
    }

    return KVS_TIER_HOST_NONE;
}


static void
kvs_tier_host_lru_unlink(kvs_tier_host_t *h, uint32_t i)
{
    kvs_tier_host_slot_t  *s = &h->slots[i];

    if (s->prev != KVS_TIER_HOST_NONE) {
        h->slots[s->prev].next = s->next;
    } else {
        h->lru_head = s->next;
    }

    if (s->next != KVS_TIER_HOST_NONE) {
        h->slots[s->next].prev = s->prev;
    } else {
        h->lru_tail = s->prev;
    }

    s->prev = KVS_TIER_HOST_NONE;
    s->next = KVS_TIER_HOST_NONE;
}


static void
kvs_tier_host_lru_push(kvs_tier_host_t *h, uint32_t i)
{
    kvs_tier_host_slot_t  *s = &h->slots[i];

    s->prev = KVS_TIER_HOST_NONE;
    s->next = h->lru_head;

    if (h->lru_head != KVS_TIER_HOST_NONE) {
        h->slots[h->lru_head].prev = i;
    } else {
        h->lru_tail = i;
    }

    h->lru_head = i;
}


/* Takes slot i (in use, not held) out of its bucket and the LRU list,
 * and puts it on the free list. */
static void
kvs_tier_host_unuse(kvs_tier_host_t *h, uint32_t i)
{
    uint32_t              *p;
    kvs_tier_host_slot_t  *s = &h->slots[i];

    for (p = &h->buckets[kvs_tier_host_bucket(h, s->ns, s->id)];
         *p != i; p = &h->slots[*p].chain)
    {
        /* void */
    }

    *p = s->chain;
    s->chain = KVS_TIER_HOST_NONE;
    kvs_tier_host_lru_unlink(h, i);
    s->used = 0;
    s->next = h->free_head;
    h->free_head = i;
    h->st.used--;
}


/* A slot for a new block: a free one, else the least recently used that
 * no hold pins, its block handed to the evict hook first. */
static uint32_t
kvs_tier_host_take(kvs_tier_host_t *h)
{
    uint32_t               i;
    kvs_radix_key_t        key;
    kvs_tier_host_slot_t  *s;

    if (h->free_head == KVS_TIER_HOST_NONE) {
        for (i = h->lru_tail; i != KVS_TIER_HOST_NONE && h->slots[i].holds;
             i = h->slots[i].prev)
        {
            /* void */
        }

        if (i == KVS_TIER_HOST_NONE) {
            return KVS_TIER_HOST_NONE;
        }

        s = &h->slots[i];

        if (h->conf.evict != NULL) {
            key.epoch = s->epoch;
            key.adapter = s->adapter;
            key.scope = s->scope;
            key.scope_len = s->scope_len;
            h->conf.evict(h->conf.evict_arg, &key, s->id,
                          s->named ? s->name : NULL,
                          h->tokens + (size_t) i * h->conf.block_tokens,
                          h->mem + (size_t) i * h->conf.block_bytes);
        }

        kvs_tier_host_unuse(h, i);
        h->st.evicted++;
    }

    i = h->free_head;
    h->free_head = h->slots[i].next;
    h->slots[i].next = KVS_TIER_HOST_NONE;

    return i;
}


typedef struct {
    const void  *data;
    size_t       bytes;
} kvs_tier_host_copy_t;


static int
kvs_tier_host_copy(void *arg, void *dst, kvs_err_t *err)
{
    kvs_tier_host_copy_t  *c = arg;

    memcpy(dst, c->data, c->bytes);

    return KVS_OK;
}


int
kvs_tier_host_put(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, const void *data,
    kvs_err_t *err)
{
    kvs_tier_host_copy_t  c;

    c.data = data;
    c.bytes = h->conf.block_bytes;

    return kvs_tier_host_put_with(h, key, id, NULL, tokens,
                                  kvs_tier_host_copy, &c, 0, NULL, err);
}


/* put_with, and reserve (pending: the slot stays held and pending, at
 * *slot, until kvs_tier_host_ready or kvs_tier_host_cancel). */
static int
kvs_tier_host_store(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const uint8_t *name, const int32_t *tokens,
    kvs_tier_host_fill_pt fill, void *fill_arg, int no_evict, int pending,
    int *stored, uint32_t *slot, kvs_err_t *err)
{
    int                    rc;
    uint32_t               i, bk;
    kvs_tier_host_slot_t  *s;

    if (stored != NULL) {
        *stored = 0;
    }

    *slot = KVS_TIER_HOST_NONE;

    if (key->scope_len > KVS_RADIX_MAX_SCOPE) {
        return kvs_err_set(err, KVS_EINVAL, "host tier: a scope of %zu "
                           "bytes", key->scope_len);
    }

    if (key->epoch != h->conf.epoch) {
        return kvs_err_set(err, KVS_EINVAL, "host tier: a block of weight "
                           "epoch %016" PRIx64 " in a tier of %016" PRIx64,
                           key->epoch, h->conf.epoch);
    }

    pthread_mutex_lock(&h->lock);

    i = kvs_tier_host_find(h, key, id);
    if (i != KVS_TIER_HOST_NONE) {
        kvs_tier_host_lru_unlink(h, i);
        kvs_tier_host_lru_push(h, i);
        h->st.put_dups++;
        pthread_mutex_unlock(&h->lock);
        return KVS_OK;
    }

    if (no_evict && h->free_head == KVS_TIER_HOST_NONE) {
        pthread_mutex_unlock(&h->lock);
        return kvs_err_set(err, KVS_KV_EFULL, "host tier: all %u slots are "
                           "in use", h->n);
    }

    i = kvs_tier_host_take(h);
    if (i == KVS_TIER_HOST_NONE) {
        pthread_mutex_unlock(&h->lock);
        return kvs_err_set(err, KVS_KV_EFULL, "host tier: all %u slots are "
                           "held", h->n);
    }

    rc = fill(fill_arg, h->mem + (size_t) i * h->conf.block_bytes, err);
    if (rc != KVS_OK) {
        h->slots[i].next = h->free_head;
        h->free_head = i;
        pthread_mutex_unlock(&h->lock);
        return rc;
    }

    s = &h->slots[i];
    s->ns = kvs_tier_host_ns(key);
    s->epoch = key->epoch;
    s->adapter = key->adapter;
    s->scope_len = (uint32_t) key->scope_len;
    if (key->scope_len > 0) {
        memcpy(s->scope, key->scope, key->scope_len);
    }
    memcpy(s->id, id, KVS_TIER_ID_LEN);
    s->named = name != NULL;
    if (name != NULL) {
        memcpy(s->name, name, KVS_RADIX_NAME_LEN);
    }
    memcpy(h->tokens + (size_t) i * h->conf.block_tokens, tokens,
           (size_t) h->conf.block_tokens * sizeof(int32_t));
    s->used = 1;
    s->holds = pending ? 1 : 0;
    s->pending = pending ? 1 : 0;
    h->st.held += pending ? 1 : 0;

    bk = kvs_tier_host_bucket(h, s->ns, id);
    s->chain = h->buckets[bk];
    h->buckets[bk] = i;
    kvs_tier_host_lru_push(h, i);
    h->st.used++;
    h->st.puts++;

    pthread_mutex_unlock(&h->lock);

    if (stored != NULL) {
        *stored = 1;
    }

    *slot = i;

    return KVS_OK;
}


int
kvs_tier_host_put_with(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const uint8_t *name, const int32_t *tokens,
    kvs_tier_host_fill_pt fill, void *fill_arg, int no_evict, int *stored,
    kvs_err_t *err)
{
    uint32_t  slot;

    return kvs_tier_host_store(h, key, id, name, tokens, fill, fill_arg,
                               no_evict, 0, stored, &slot, err);
}


/* reserve's fill: the slot's bytes are the caller's to write */
static int
kvs_tier_host_where(void *arg, void *dst, kvs_err_t *err)
{
    *(void **) arg = dst;

    return KVS_OK;
}


int
kvs_tier_host_reserve(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const uint8_t *name, const int32_t *tokens,
    int no_evict, int *stored, uint32_t *slot, void **dst, kvs_err_t *err)
{
    *dst = NULL;

    return kvs_tier_host_store(h, key, id, name, tokens,
                               kvs_tier_host_where, dst, no_evict, 1,
                               stored, slot, err);
}


/* A pending slot's hold back; cancel: and its block forgotten. */
static void
kvs_tier_host_settle(kvs_tier_host_t *h, uint32_t slot, int cancel)
{
    kvs_tier_host_slot_t  *s;

    if (slot >= h->n) {
        return;
    }

    pthread_mutex_lock(&h->lock);

    s = &h->slots[slot];

    if (s->used && s->pending) {
        s->pending = 0;
        s->holds--;
        if (s->holds == 0) {
            h->st.held--;
        }

        if (cancel) {
            /* nothing else holds a pending slot: hold refuses it */
            kvs_tier_host_unuse(h, slot);
            h->st.puts--;
        }
    }

    pthread_mutex_unlock(&h->lock);
}


void
kvs_tier_host_ready(kvs_tier_host_t *h, uint32_t slot)
{
    kvs_tier_host_settle(h, slot, 0);
}


void
kvs_tier_host_cancel(kvs_tier_host_t *h, uint32_t slot)
{
    kvs_tier_host_settle(h, slot, 1);
}


static int
kvs_tier_host_lookup(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, int touch)
{
    uint32_t  i;

    pthread_mutex_lock(&h->lock);

    i = kvs_tier_host_find(h, key, id);
    if (i != KVS_TIER_HOST_NONE && h->slots[i].pending) {
        i = KVS_TIER_HOST_NONE;
    }

    if (i != KVS_TIER_HOST_NONE && touch) {
        kvs_tier_host_lru_unlink(h, i);
        kvs_tier_host_lru_push(h, i);
    }

    pthread_mutex_unlock(&h->lock);

    return i != KVS_TIER_HOST_NONE;
}


int
kvs_tier_host_has(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id)
{
    return kvs_tier_host_lookup(h, key, id, 0);
}


int
kvs_tier_host_touch(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id)
{
    return kvs_tier_host_lookup(h, key, id, 1);
}


int
kvs_tier_host_hold(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, const void **data,
    uint32_t *slot, kvs_err_t *err)
{
    uint32_t  i;

    *data = NULL;
    *slot = KVS_TIER_HOST_NONE;

    pthread_mutex_lock(&h->lock);

    i = kvs_tier_host_find(h, key, id);

    /* the block's own tokens, one by one: another block under the same
     * name is a miss */
    if (i == KVS_TIER_HOST_NONE || h->slots[i].pending
        || memcmp(h->tokens + (size_t) i * h->conf.block_tokens, tokens,
                  (size_t) h->conf.block_tokens * sizeof(int32_t)) != 0)
    {
        h->st.misses++;
        pthread_mutex_unlock(&h->lock);
        return kvs_err_set(err, KVS_ENOTFOUND, "host tier: block not "
                           "stored");
    }

    h->slots[i].holds++;
    if (h->slots[i].holds == 1) {
        h->st.held++;
    }

    kvs_tier_host_lru_unlink(h, i);
    kvs_tier_host_lru_push(h, i);
    h->st.hits++;
    *data = h->mem + (size_t) i * h->conf.block_bytes;
    *slot = i;

    pthread_mutex_unlock(&h->lock);

    return KVS_OK;
}


void
kvs_tier_host_release(kvs_tier_host_t *h, uint32_t slot)
{
    if (slot >= h->n) {
        return;
    }

    pthread_mutex_lock(&h->lock);

    if (h->slots[slot].holds > 0) {
        h->slots[slot].holds--;
        if (h->slots[slot].holds == 0) {
            h->st.held--;
        }
    }

    pthread_mutex_unlock(&h->lock);
}


int
kvs_tier_host_get(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, void *dst, kvs_err_t *err)
{
    int          rc;
    uint32_t     slot;
    const void  *data;

    rc = kvs_tier_host_hold(h, key, id, tokens, &data, &slot, err);
    if (rc != KVS_OK) {
        return rc;
    }

    memcpy(dst, data, h->conf.block_bytes);
    kvs_tier_host_release(h, slot);

    return KVS_OK;
}


int
kvs_tier_host_drop(kvs_tier_host_t *h, const kvs_radix_key_t *key,
    const uint8_t *id)
{
    uint32_t  i;

    pthread_mutex_lock(&h->lock);

    i = kvs_tier_host_find(h, key, id);
    if (i != KVS_TIER_HOST_NONE && h->slots[i].holds == 0) {
        kvs_tier_host_unuse(h, i);
    } else {
        i = KVS_TIER_HOST_NONE;
    }

    pthread_mutex_unlock(&h->lock);

    return i != KVS_TIER_HOST_NONE;
}


void
kvs_tier_host_stats(kvs_tier_host_t *h, kvs_tier_host_stats_t *st)
{
    pthread_mutex_lock(&h->lock);
    *st = h->st;
    pthread_mutex_unlock(&h->lock);
}
