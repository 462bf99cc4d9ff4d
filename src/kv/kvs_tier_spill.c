/*
 * kvs_tier_spill: the staging ring and its writer thread (see
 * kvs_tier_spill.h for the invariants).
 *
 * The ring holds depth entries in one allocation; entry i's tokens and
 * KV bytes follow each other at i * entry_bytes.  head is the oldest
 * queued entry (the one the writer works on), count the entries queued
 * including it.  The writer copies nothing: it hands the entry's bytes
 * to kvs_tier_put(), which fills its own aligned buffer.
 */

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_tier_spill.h"

typedef struct {
    kvs_radix_key_t  key;             /* key.scope points at scope */
    char             scope[KVS_RADIX_MAX_SCOPE];
    uint8_t          id[KVS_TIER_ID_LEN];
    uint8_t          name[KVS_RADIX_NAME_LEN];  /* zeros: none */
} spill_entry_t;

struct kvs_tier_spill_s {
    pthread_mutex_t          mu;
    pthread_cond_t           work;    /* writer: an entry or stop */
    pthread_cond_t           idle;    /* waiters: an entry done */
    pthread_t                thread;
    kvs_tier_t              *tier;
    kvs_tier_io_t           *io;
    spill_entry_t           *entries;
    uint8_t                 *bytes;   /* [depth * entry_bytes] */
    uint64_t                 entry_bytes;
    uint64_t                 block_bytes;
    uint32_t                 block_tokens;
    uint32_t                 depth;
    uint32_t                 head;
    uint32_t                 count;
    uint64_t                 done;    /* entries written or failed, in
                                         queue order: the tickets done */
    int                      stop;
    kvs_tier_spill_stats_t   st;
};


static void *
spill_main(void *arg)
{
    int                rc;
    uint8_t           *b;
    spill_entry_t     *e;
    kvs_tier_spill_t  *sp = arg;

    pthread_mutex_lock(&sp->mu);

    for ( ;; ) {
        while (sp->count == 0 && !sp->stop) {
            pthread_cond_wait(&sp->work, &sp->mu);
        }

        if (sp->stop) {
            break;
        }

        e = &sp->entries[sp->head];
        b = sp->bytes + sp->head * sp->entry_bytes;

        pthread_mutex_unlock(&sp->mu);

        rc = kvs_tier_put_named(sp->tier, sp->io, &e->key, e->id,
                                kvs_radix_named(e->name) ? e->name : NULL,
                                (const int32_t *) b,
                                b + 4 * sp->block_tokens, NULL);

        pthread_mutex_lock(&sp->mu);

        if (rc == KVS_OK) {
            sp->st.written++;
        } else {
            sp->st.failed++;
        }

        sp->head = (sp->head + 1) % sp->depth;
        sp->count--;
        sp->done++;

        /* kvs_tier_spill_wait() waits for an empty queue, and
         * kvs_tier_spill_wait_for() for one ticket */
        pthread_cond_broadcast(&sp->idle);
    }

    pthread_mutex_unlock(&sp->mu);

    return NULL;
}


/* Frees what kvs_tier_spill_new() made, once no writer runs. */
static void
spill_destroy(kvs_tier_spill_t *sp)
{
    pthread_cond_destroy(&sp->idle);
    pthread_cond_destroy(&sp->work);
    pthread_mutex_destroy(&sp->mu);
    kvs_tier_io_free(sp->io);
    free(sp->entries);
    free(sp->bytes);
    free(sp);
}


int
kvs_tier_spill_new(kvs_tier_spill_t **out, kvs_tier_t *tier,
    uint32_t depth, kvs_err_t *err)
{
    int                rc;
    sigset_t           all, old;
    kvs_tier_spill_t  *sp;

    *out = NULL;

    if (depth == 0 || depth > KVS_TIER_SPILL_MAX_DEPTH) {
        return kvs_err_set(err, KVS_EINVAL, "kv tier spill: depth %"
                           PRIu32 ", expected 1..%u", depth,
                           KVS_TIER_SPILL_MAX_DEPTH);
    }

    sp = calloc(1, sizeof(kvs_tier_spill_t));
    if (sp == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier spill: out of memory");
    }

    sp->tier = tier;
    sp->depth = depth;
    sp->block_bytes = kvs_tier_block_bytes(tier);
    sp->block_tokens = kvs_tier_block_tokens(tier);
    /* 8-byte aligned entries */
    sp->entry_bytes = (4 * (uint64_t) sp->block_tokens + sp->block_bytes
                       + 7) / 8 * 8;

    sp->entries = calloc(depth, sizeof(spill_entry_t));
    sp->bytes = malloc(depth * sp->entry_bytes);

    if (sp->entries == NULL || sp->bytes == NULL
        || kvs_tier_io_new(tier, &sp->io, err) != KVS_OK)
    {
        rc = kvs_err_set(err, KVS_ENOMEM, "kv tier spill: out of memory "
                         "for %" PRIu32 " entries of %" PRIu64 " bytes",
                         depth, sp->entry_bytes);
        free(sp->entries);
        free(sp->bytes);
        free(sp);
        return rc;
    }

    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->work, NULL);
    pthread_cond_init(&sp->idle, NULL);
    sp->st.depth = depth;

    /* the writer never takes the process's signals */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&sp->thread, NULL, spill_main, sp);
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    if (rc != 0) {
        spill_destroy(sp);
        return kvs_err_set(err, KVS_EIO, "kv tier spill: no writer "
                           "thread: %s", strerror(rc));
    }

    *out = sp;

    return KVS_OK;
}


void
kvs_tier_spill_free(kvs_tier_spill_t *sp)
{
    if (sp == NULL) {
        return;
    }

    pthread_mutex_lock(&sp->mu);
    sp->stop = 1;
    pthread_cond_signal(&sp->work);
    pthread_cond_broadcast(&sp->idle);
    pthread_mutex_unlock(&sp->mu);

    pthread_join(sp->thread, NULL);
    spill_destroy(sp);
}


int
kvs_tier_spill_push_named(kvs_tier_spill_t *sp, const kvs_radix_key_t *key,
    const uint8_t *id, const uint8_t *name, const int32_t *tokens,
    const void *data, kvs_err_t *err)
{
    uint8_t        *b;
    uint32_t        i;
    spill_entry_t  *e;

    if (key->scope_len > KVS_RADIX_MAX_SCOPE) {
        return kvs_err_set(err, KVS_EINVAL, "kv tier spill: scope of %zu "
                           "bytes, at most %u", key->scope_len,
                           KVS_RADIX_MAX_SCOPE);
    }

    pthread_mutex_lock(&sp->mu);

    if (sp->count == sp->depth || sp->stop) {
        sp->st.dropped++;
        pthread_mutex_unlock(&sp->mu);
        return kvs_err_set(err, KVS_KV_EFULL, "kv tier spill: %" PRIu32
                           " blocks queued, block dropped", sp->depth);
    }

    /* the entry past the queued ones: the writer does not touch it
     * until count covers it, and only this producer pushes */
    i = (sp->head + sp->count) % sp->depth;

    pthread_mutex_unlock(&sp->mu);

    e = &sp->entries[i];
    b = sp->bytes + i * sp->entry_bytes;

    e->key = *key;
    e->key.scope = e->scope;

    if (key->scope_len > 0) {
        memcpy(e->scope, key->scope, key->scope_len);
    }

    memcpy(e->id, id, KVS_TIER_ID_LEN);

    if (name != NULL) {
        memcpy(e->name, name, KVS_RADIX_NAME_LEN);
    } else {
        memset(e->name, 0, KVS_RADIX_NAME_LEN);
    }

    memcpy(b, tokens, 4 * (size_t) sp->block_tokens);
    memcpy(b + 4 * sp->block_tokens, data, sp->block_bytes);

    pthread_mutex_lock(&sp->mu);
    sp->count++;
    sp->st.pushed++;
    pthread_cond_signal(&sp->work);
    pthread_mutex_unlock(&sp->mu);

    return KVS_OK;
}


void
kvs_tier_spill_wait(kvs_tier_spill_t *sp)
{
    pthread_mutex_lock(&sp->mu);

    while (sp->count > 0 && !sp->stop) {
        pthread_cond_wait(&sp->idle, &sp->mu);
    }

    pthread_mutex_unlock(&sp->mu);
}


uint64_t
kvs_tier_spill_find(kvs_tier_spill_t *sp, const kvs_radix_key_t *key,
    const uint8_t *id)
{
    uint32_t        k;
    uint64_t        ticket;
    spill_entry_t  *e;

    ticket = 0;

    pthread_mutex_lock(&sp->mu);

    /* newest first: a block queued twice is done with its last push */
    for (k = sp->count; k > 0; k--) {
        e = &sp->entries[(sp->head + k - 1) % sp->depth];

        if (memcmp(e->id, id, KVS_TIER_ID_LEN) == 0
            && e->key.epoch == key->epoch && e->key.adapter == key->adapter
            && e->key.scope_len == key->scope_len
            && (key->scope_len == 0
                || memcmp(e->key.scope, key->scope, key->scope_len) == 0))
        {
            ticket = sp->done + k;
            break;
        }
    }

    pthread_mutex_unlock(&sp->mu);

    return ticket;
}


void
kvs_tier_spill_wait_for(kvs_tier_spill_t *sp, uint64_t ticket)
{
    pthread_mutex_lock(&sp->mu);

    while (sp->done < ticket && !sp->stop) {
        pthread_cond_wait(&sp->idle, &sp->mu);
    }

    pthread_mutex_unlock(&sp->mu);
}


void
kvs_tier_spill_stats(kvs_tier_spill_t *sp, kvs_tier_spill_stats_t *st)
{
    pthread_mutex_lock(&sp->mu);
    *st = sp->st;
    st->queued = sp->count;
    pthread_mutex_unlock(&sp->mu);
}
