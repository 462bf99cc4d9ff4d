/*
 * kvs_fair: the tenant table and its virtual token counters (see
 * kvs_fair.h).  Tenants are few enough (those with queued sequences)
 * that a chained hash table of fixed size and linear scans for the
 * smallest counter are cheaper than anything cleverer.
 */

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "kvs_fair.h"


static int kvs_fair_row_cmp(const void *a, const void *b);
static uint64_t kvs_fair_low(const kvs_fair_t *f);
static void kvs_fair_drop(kvs_fair_t *f, kvs_tenant_t *t);


int
kvs_fair_init(kvs_fair_t *f, uint32_t w_prefill, uint32_t w_decode,
    uint32_t kv_max_milli, kvs_err_t *err)
{
    memset(f, 0, sizeof(kvs_fair_t));

    if (kv_max_milli > 1000) {
        return kvs_err_set(err, KVS_EINVAL, "fair share: a KV cap of %u "
                           "thousandths of the cache; at most 1000",
                           kv_max_milli);
    }

    f->w_prefill = w_prefill > 0 ? w_prefill : 1;
    f->w_decode = w_decode > 0 ? w_decode : 1;
    f->kv_max_milli = kv_max_milli;

    return KVS_OK;
}


void
kvs_fair_free(kvs_fair_t *f)
{
    size_t         b;
    kvs_tenant_t  *t;

    for (b = 0; b < KVS_FAIR_BUCKETS; b++) {
        while ((t = f->buckets[b]) != NULL) {
            f->buckets[b] = t->next;
            free(t);
        }
    }

    f->n_tenants = 0;
    f->n_idle = 0;
}


int
kvs_fair_join(kvs_fair_t *f, const char *key, size_t key_len,
    kvs_tenant_t **out, kvs_err_t *err)
{
    uint64_t       h, low;
    kvs_tenant_t  *t;

    *out = NULL;

    if (key_len > KVS_FAIR_MAX_KEY) {
        return kvs_err_set(err, KVS_EINVAL, "tenant key of %zu bytes; at "
                           "most %d", key_len, KVS_FAIR_MAX_KEY);
    }

    h = XXH3_64bits(key_len > 0 ? key : "", key_len);

    for (t = f->buckets[h % KVS_FAIR_BUCKETS]; t != NULL; t = t->next) {
        if (t->hash == h && t->key_len == key_len
            && (key_len == 0 || memcmp(t->key, key, key_len) == 0))
        {
            break;
        }
    }

    if (t == NULL) {
        t = calloc(1, sizeof(kvs_tenant_t));
        if (t == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "fair share: out of "
                               "memory");
        }

        t->hash = h;
        t->key_len = key_len;
        if (key_len > 0) {
            memcpy(t->key, key, key_len);
        }
        t->next = f->buckets[h % KVS_FAIR_BUCKETS];
        f->buckets[h % KVS_FAIR_BUCKETS] = t;
        f->n_tenants++;
        f->n_idle++;
    }

    if (t->n_seqs == 0) {
        /* back from idle, or new: no lower than the least served
         * active, so time away is no credit against those who kept the
         * engine busy */
        low = kvs_fair_low(f);
        if (low != UINT64_MAX && t->vtc < low) {
            t->vtc = low;
        }

        f->n_idle--;
    }

    t->n_seqs++;
    *out = t;

    return KVS_OK;
}


void
kvs_fair_leave(kvs_fair_t *f, kvs_tenant_t *t)
{
    size_t         b;
    kvs_tenant_t  *o, *old;

    if (t == NULL || --t->n_seqs > 0) {
        return;
    }

    t->idle_since = ++f->clock;
    f->n_idle++;

    if (f->n_idle <= KVS_FAIR_MAX_IDLE) {
        return;
    }

    /* rare (a crowd of one-off tenants): a scan for the longest idle */
    old = NULL;

    for (b = 0; b < KVS_FAIR_BUCKETS; b++) {
        for (o = f->buckets[b]; o != NULL; o = o->next) {
            if (o->n_seqs == 0
                && (old == NULL || o->idle_since < old->idle_since))
            {
                old = o;
            }
        }
    }

    kvs_fair_drop(f, old);
}


void
kvs_fair_served(kvs_fair_t *f, kvs_tenant_t *t, uint32_t tokens,
    int decode)
{
    if (t == NULL) {
        return;
    }

    if (decode) {
        t->decode += tokens;
        t->vtc += (uint64_t) tokens * f->w_decode;
    } else {
        t->prefill += tokens;
        t->vtc += (uint64_t) tokens * f->w_prefill;
    }
}


int
kvs_fair_capped(const kvs_fair_t *f, const kvs_tenant_t *t, uint32_t more,
    uint32_t pool_blocks)
{
    if (t == NULL || f->kv_max_milli == 0 || f->kv_max_milli >= 1000) {
        return 0;
    }

    return ((uint64_t) t->kv_blocks + more) * 1000
           > (uint64_t) pool_blocks * f->kv_max_milli;
}


size_t
kvs_fair_rows(const kvs_fair_t *f, kvs_fair_row_t *rows, size_t max,
    kvs_fair_row_t *all)
{
    size_t           b, n, i;
    kvs_fair_row_t   row;
    kvs_tenant_t    *t;

    n = 0;

    if (all != NULL) {
        memset(all, 0, sizeof(kvs_fair_row_t));
    }

    /* keep the max largest: insertion into a sorted array, fine for the
     * few rows metrics show */
    for (b = 0; b < KVS_FAIR_BUCKETS; b++) {
        for (t = f->buckets[b]; t != NULL; t = t->next) {
            row.key = t->key;
            row.key_len = t->key_len;
            row.vtc = t->vtc;
            row.prefill = t->prefill;
            row.decode = t->decode;
            row.n_seqs = t->n_seqs;
            row.kv_blocks = t->kv_blocks;

            if (all != NULL) {
                all->prefill += t->prefill;
                all->decode += t->decode;
                all->n_seqs += t->n_seqs;
                all->kv_blocks += t->kv_blocks;
            }

            if (n < max) {
                rows[n++] = row;
            } else if (max > 0
                       && kvs_fair_row_cmp(&row, &rows[max - 1]) < 0)
            {
                rows[max - 1] = row;
            } else {
                continue;
            }

            for (i = n - 1; i > 0 && kvs_fair_row_cmp(&rows[i],
                                                      &rows[i - 1]) < 0;
                 i--)
            {
                row = rows[i];
                rows[i] = rows[i - 1];
                rows[i - 1] = row;
            }
        }
    }

    return n;
}


/* The smallest counter of the tenants with sequences; UINT64_MAX when
 * none has. */
static uint64_t
kvs_fair_low(const kvs_fair_t *f)
{
    size_t         b;
    uint64_t       low;
    kvs_tenant_t  *t;

    low = UINT64_MAX;

    for (b = 0; b < KVS_FAIR_BUCKETS; b++) {
        for (t = f->buckets[b]; t != NULL; t = t->next) {
            if (t->n_seqs > 0 && t->vtc < low) {
                low = t->vtc;
            }
        }
    }

    return low;
}


static void
kvs_fair_drop(kvs_fair_t *f, kvs_tenant_t *t)
{
    kvs_tenant_t  **pp;

    for (pp = &f->buckets[t->hash % KVS_FAIR_BUCKETS]; *pp != NULL;
         pp = &(*pp)->next)
    {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }

    f->n_tenants--;
    f->n_idle--;
    free(t);
}


/* Most tokens served first. */
static int
kvs_fair_row_cmp(const void *a, const void *b)
{
    const kvs_fair_row_t  *x = a, *y = b;
    uint64_t               sx, sy;

    sx = x->prefill + x->decode;
    sy = y->prefill + y->decode;

    return sx > sy ? -1 : sx < sy ? 1 : 0;
}
