/*
 * kvs_tier_slots: the disk tier's slot index (see kvs_tier_impl.h):
 * the namespace hash, the hash table from (namespace, path id) to a
 * ready slot, the LRU list of ready slots, the free list, and the
 * reclaim of the least recently used slot that no read holds.  No I/O
 * here: kvs_tier.c reads and writes the file outside the lock.
 *
 * Invariants: a (namespace hash, path id) pair names at most one ready
 * slot; a slot with readers is never taken for a write; the watch, when
 * set, hears of every slot that enters or leaves the index after it was
 * set (both happen here only).
 */

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/kvs_le.h"
#include "kvs_tier_impl.h"


uint64_t
kvs_tier_ns_hash(const kvs_radix_key_t *key)
{
    uint8_t  b[12];

    kvs_le_put64(b, key->epoch);
    kvs_le_put32(b + 8, key->adapter);

    return XXH3_64bits_withSeed(key->scope_len > 0 ? key->scope : "",
                                key->scope_len, XXH3_64bits(b, 12));
}


static uint32_t
tier_bucket(const kvs_tier_t *t, uint64_t ns, const uint8_t *id)
{
    return (uint32_t) XXH3_64bits_withSeed(id, KVS_TIER_ID_LEN, ns)
           & t->mask;
}


static void
tier_lru_unlink(kvs_tier_t *t, uint32_t i)
{
    kvs_tier_slot_t  *s = &t->slots[i];

    if (s->prev != KVS_TIER_NONE) {
        t->slots[s->prev].next = s->next;
    } else {
        t->lru_head = s->next;
    }

    if (s->next != KVS_TIER_NONE) {
        t->slots[s->next].prev = s->prev;
    } else {
        t->lru_tail = s->prev;
    }

    s->prev = KVS_TIER_NONE;
    s->next = KVS_TIER_NONE;
}


static void
tier_lru_push(kvs_tier_t *t, uint32_t i)
{
    kvs_tier_slot_t  *s = &t->slots[i];

    s->prev = KVS_TIER_NONE;
    s->next = t->lru_head;

    if (t->lru_head != KVS_TIER_NONE) {
        t->slots[t->lru_head].prev = i;
    } else {
        t->lru_tail = i;
    }

    t->lru_head = i;
}


uint32_t
kvs_tier_slot_find(const kvs_tier_t *t, uint64_t ns, const uint8_t *id)
{
    uint32_t  i;

    for (i = t->buckets[tier_bucket(t, ns, id)]; i != KVS_TIER_NONE;
         i = t->slots[i].link)
    {
        if (t->slots[i].ns == ns
            && memcmp(t->slots[i].id, id, KVS_TIER_ID_LEN) == 0)
        {
            return i;
        }
    }

    return KVS_TIER_NONE;
}


void
kvs_tier_slot_unindex(kvs_tier_t *t, uint32_t i)
{
    uint32_t  *p;

    p = &t->buckets[tier_bucket(t, t->slots[i].ns, t->slots[i].id)];

    while (*p != i) {
        p = &t->slots[*p].link;
    }

    *p = t->slots[i].link;
    t->slots[i].link = KVS_TIER_NONE;
    tier_lru_unlink(t, i);
    t->st.used--;

    if (t->watch != NULL) {
        t->watch(t->watch_arg, t->slots[i].ns, t->slots[i].id, 0);
    }
}


void
kvs_tier_slot_index(kvs_tier_t *t, uint32_t i)
{
    uint32_t  b;

    b = tier_bucket(t, t->slots[i].ns, t->slots[i].id);
    t->slots[i].link = t->buckets[b];
    t->buckets[b] = i;
    t->slots[i].state = KVS_TIER_SLOT_READY;
    tier_lru_push(t, i);
    t->st.used++;

    if (t->watch != NULL) {
        t->watch(t->watch_arg, t->slots[i].ns, t->slots[i].id, 1);
    }
}


void
kvs_tier_set_watch(kvs_tier_t *t, kvs_tier_watch_pt fn, void *arg)
{
    pthread_mutex_lock(&t->mu);
    t->watch = fn;
    t->watch_arg = fn != NULL ? arg : NULL;
    pthread_mutex_unlock(&t->mu);
}


void
kvs_tier_slot_release(kvs_tier_t *t, uint32_t i)
{
    t->slots[i].state = KVS_TIER_SLOT_FREE;
    t->slots[i].link = t->free_head;
    t->free_head = i;
}


void
kvs_tier_slot_touch(kvs_tier_t *t, uint32_t i)
{
    tier_lru_unlink(t, i);
    tier_lru_push(t, i);
}


int
kvs_tier_slots_init(kvs_tier_t *t)
{
    uint32_t  i;

    for (i = 1; i < t->n_slots * 2; i <<= 1) { /* void */ }

    t->mask = i - 1;
    t->slots = malloc((size_t) t->n_slots * sizeof(kvs_tier_slot_t));
    t->buckets = malloc((size_t) i * sizeof(uint32_t));

    if (t->slots == NULL || t->buckets == NULL) {
        return KVS_ENOMEM;
    }

    memset(t->buckets, 0xff, (size_t) i * sizeof(uint32_t));
    t->free_head = KVS_TIER_NONE;
    t->lru_head = KVS_TIER_NONE;
    t->lru_tail = KVS_TIER_NONE;

    for (i = t->n_slots; i-- > 0; ) {
        t->slots[i].readers = 0;
        t->slots[i].prev = KVS_TIER_NONE;
        t->slots[i].next = KVS_TIER_NONE;
        kvs_tier_slot_release(t, i);
    }

    return KVS_OK;
}


uint32_t
kvs_tier_slot_take(kvs_tier_t *t)
{
    uint32_t  i;

    if (t->free_head != KVS_TIER_NONE) {
        i = t->free_head;
        t->free_head = t->slots[i].link;
        t->slots[i].link = KVS_TIER_NONE;
        return i;
    }

    for (i = t->lru_tail; i != KVS_TIER_NONE; i = t->slots[i].prev) {
        if (t->slots[i].readers == 0) {
            kvs_tier_slot_unindex(t, i);
            t->st.reclaimed++;
            return i;
        }
    }

    return KVS_TIER_NONE;
}


int
kvs_tier_find(kvs_tier_t *t, const kvs_radix_key_t *key, const uint8_t *id,
    int touch)
{
    uint32_t  i;

    if (key->scope_len > KVS_RADIX_MAX_SCOPE) {
        return 0;
    }

    pthread_mutex_lock(&t->mu);
    i = kvs_tier_slot_find(t, kvs_tier_ns_hash(key), id);

    /* only a ready slot is in the LRU */
    if (touch && i != KVS_TIER_NONE
        && t->slots[i].state == KVS_TIER_SLOT_READY)
    {
        kvs_tier_slot_touch(t, i);
    }

    pthread_mutex_unlock(&t->mu);

    return i != KVS_TIER_NONE;
}


uint32_t
kvs_tier_names(kvs_tier_t *t, uint32_t from, uint32_t n,
    kvs_tier_name_pt fn, void *arg)
{
    uint32_t          end;
    kvs_tier_slot_t  *s;

    if (from >= t->n_slots) {
        return t->n_slots;
    }

    end = n < t->n_slots - from ? from + n : t->n_slots;

    pthread_mutex_lock(&t->mu);

    for ( ; from < end; from++) {
        s = &t->slots[from];

        if (s->state == KVS_TIER_SLOT_READY && kvs_radix_named(s->name)) {
            fn(arg, s->ns, s->id, s->name);
        }
    }

    pthread_mutex_unlock(&t->mu);

    return end;
}


void
kvs_tier_stats(kvs_tier_t *t, kvs_tier_stats_t *st)
{
    pthread_mutex_lock(&t->mu);
    *st = t->st;
    pthread_mutex_unlock(&t->mu);
}
