/*
 * kvs_gram_req: a request's constraint compiled (kind + schema text ->
 * kvs_gram_t), and the engine's bounded cache of compiled grammars
 * (kvs_gram_req.h).
 *
 * Invariants of the cache: the list holds each (kind, text) at most once,
 * most recently used first; n and bytes are the sums over the list; an
 * entry with refs > 0 is never freed; after every put and get the
 * unreferenced tail is trimmed until both bounds hold or nothing
 * unreferenced is left.
 */

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/kvs_hash.h"
#include "grammar/kvs_gram_req.h"


struct kvs_gram_centry_req_s {
    kvs_gram_cached_t  *next;
    kvs_gram_cached_t  *prev;
    unsigned            kind;
    uint64_t            hash;
    char               *text;         /* [len] */
    size_t              len;
    size_t              bytes;        /* grammar + text */
    unsigned            refs;
    kvs_gram_t          g;
    kvs_gram_masker_t   table;        /* its masks, once table_ok */
    int                 table_ok;
    kvs_gram_warm_stats_t  warm;      /* the table's warm */
};


int
kvs_gram_req_compile(kvs_gram_t *g, unsigned kind, const char *text,
    size_t len, kvs_err_t *err)
{
    int              rc;
    json_t          *s;
    const char      *what;
    json_error_t     je;
    kvs_gram_opts_t  o;

    memset(g, 0, sizeof(*g));
    memset(&o, 0, sizeof(o));
    o.lim.max_elems = KVS_GRAM_REQ_MAX_ELEMS;
    o.lim.max_rules = KVS_GRAM_REQ_MAX_RULES;

    if (kind == KVS_GRAM_REQ_OBJECT) {
        return kvs_gram_json_object(g, &o, err);
    }

    if (kind != KVS_GRAM_REQ_SCHEMA && kind != KVS_GRAM_REQ_TOOLS) {
        return kvs_err_set(err, KVS_EINVAL, "constraint kind %u is not "
                           "one of 1 (json_object), 2 (json_schema), "
                           "3 (tools)", kind);
    }

    what = kind == KVS_GRAM_REQ_TOOLS ? "tools spec" : "schema";

    if (len > KVS_GRAM_REQ_MAX_SCHEMA) {
        return kvs_err_set(err, KVS_EINVAL, "%s: %zu bytes of JSON; at "
                           "most %u", what, len, KVS_GRAM_REQ_MAX_SCHEMA);
    }

    s = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                   &je);
    if (s == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "%s: not JSON: %s", what,
                           je.text);
    }

    rc = kind == KVS_GRAM_REQ_TOOLS ? kvs_gram_from_tools(g, s, &o, err)
                                    : kvs_gram_from_schema(g, s, &o, err);
    json_decref(s);

    return rc;
}


size_t
kvs_gram_size(const kvs_gram_t *g)
{
    size_t  n;

    /* elems; per alternative its rule, start and FIRST set; per rule its
     * first alternative, nullable flag and FIRST set */
    n = (size_t) g->cap_elems * sizeof(kvs_gram_elem_t)
        + (size_t) g->cap_alts * (2 * sizeof(uint32_t) + 4 * 8)
        + ((size_t) g->n_rules + 1) * (sizeof(uint32_t) + 1 + 4 * 8);

    return n + sizeof(kvs_gram_t);
}


int
kvs_gram_cache_init(kvs_gram_cache_t *c, uint32_t max_n, size_t max_bytes,
    kvs_err_t *err)
{
    memset(c, 0, sizeof(*c));
    c->max_n = max_n != 0 ? max_n : KVS_GRAM_CACHE_MAX;
    c->max_bytes = max_bytes != 0 ? max_bytes : KVS_GRAM_CACHE_BYTES;

    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        return kvs_err_set(err, KVS_ENOMEM, "grammar cache: no mutex");
    }

    return KVS_OK;
}


static void
kvs_gram_cached_free(kvs_gram_cached_t *ce)
{
    if (ce->table_ok) {
        kvs_gram_masker_free(&ce->table);
    }
    kvs_gram_free(&ce->g);
    free(ce->text);
    free(ce);
}


static void
kvs_gram_cache_unlink(kvs_gram_cache_t *c, kvs_gram_cached_t *ce)
{
    if (ce->prev != NULL) {
        ce->prev->next = ce->next;
    } else {
        c->head = ce->next;
    }

    if (ce->next != NULL) {
        ce->next->prev = ce->prev;
    }

    ce->next = ce->prev = NULL;
}


static void
kvs_gram_cache_push(kvs_gram_cache_t *c, kvs_gram_cached_t *ce)
{
    ce->prev = NULL;
    ce->next = c->head;

    if (c->head != NULL) {
        c->head->prev = ce;
    }

    c->head = ce;
}


/* Unreferenced entries from the cold end while a bound is passed. */
static void
kvs_gram_cache_trim(kvs_gram_cache_t *c)
{
    kvs_gram_cached_t  *ce, *tail, *prev;

    if (c->n <= c->max_n && c->bytes <= c->max_bytes) {
        return;
    }

    for (tail = c->head; tail != NULL && tail->next != NULL;
         tail = tail->next)
    {
        /* the cold end */
    }

    for (ce = tail; ce != NULL; ce = prev) {
        prev = ce->prev;

        if (c->n <= c->max_n && c->bytes <= c->max_bytes) {
            break;
        }

        if (ce->refs == 0) {
            kvs_gram_cache_unlink(c, ce);
            c->n--;
            c->bytes -= ce->bytes;
            kvs_gram_cached_free(ce);
        }
    }
}


void
kvs_gram_cache_free(kvs_gram_cache_t *c)
{
    kvs_gram_cached_t  *ce, *next;

    for (ce = c->head; ce != NULL; ce = next) {
        next = ce->next;
        kvs_gram_cached_free(ce);
    }

    c->head = NULL;
    c->n = 0;
    c->bytes = 0;
    pthread_mutex_destroy(&c->lock);
}


static kvs_gram_cached_t *
kvs_gram_cache_find(kvs_gram_cache_t *c, unsigned kind, uint64_t hash,
    const char *text, size_t len)
{
    kvs_gram_cached_t  *ce;

    for (ce = c->head; ce != NULL; ce = ce->next) {
        if (ce->kind == kind && ce->hash == hash && ce->len == len
            && (len == 0 || memcmp(ce->text, text, len) == 0))
        {
            return ce;
        }
    }

    return NULL;
}


int
kvs_gram_cache_get(kvs_gram_cache_t *c, unsigned kind, const char *text,
    size_t len, kvs_gram_cached_t **out, kvs_err_t *err)
{
    int                 rc;
    uint64_t            hash;
    kvs_gram_cached_t  *ce, *other;

    *out = NULL;

    if (kind == KVS_GRAM_REQ_OBJECT) {
        len = 0;                      /* the text means nothing there */
    }

    hash = kvs_fnv1a64(0xcbf29ce484222325ull + kind, text, len);

    pthread_mutex_lock(&c->lock);
    ce = kvs_gram_cache_find(c, kind, hash, text, len);

    if (ce != NULL) {
        ce->refs++;
        c->hits++;
        kvs_gram_cache_unlink(c, ce);
        kvs_gram_cache_push(c, ce);
        pthread_mutex_unlock(&c->lock);
        *out = ce;
        return KVS_OK;
    }

    c->misses++;
    pthread_mutex_unlock(&c->lock);

    /* compiled outside the lock: another thread's hit need not wait */
    ce = calloc(1, sizeof(kvs_gram_cached_t));
    if (ce == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "grammar cache: out of memory");
    }

    ce->text = malloc(len + 1);
    if (ce->text == NULL) {
        free(ce);
        return kvs_err_set(err, KVS_ENOMEM, "grammar cache: out of memory");
    }

    if (len > 0) {
        memcpy(ce->text, text, len);
    }

    ce->len = len;
    ce->kind = kind;
    ce->hash = hash;

    rc = kvs_gram_req_compile(&ce->g, kind, text, len, err);
    if (rc != KVS_OK) {
        kvs_gram_cached_free(ce);
        return rc;
    }

    ce->bytes = kvs_gram_size(&ce->g) + len + sizeof(*ce) + c->entry_extra;
    ce->refs = 1;

    pthread_mutex_lock(&c->lock);

    /* compiled twice at once: keep the first, drop ours */
    other = kvs_gram_cache_find(c, kind, hash, text, len);

    if (other != NULL) {
        other->refs++;
        pthread_mutex_unlock(&c->lock);
        kvs_gram_cached_free(ce);
        *out = other;
        return KVS_OK;
    }

    kvs_gram_cache_push(c, ce);
    c->n++;
    c->bytes += ce->bytes;
    kvs_gram_cache_trim(c);
    pthread_mutex_unlock(&c->lock);

    *out = ce;

    return KVS_OK;
}


const kvs_gram_t *
kvs_gram_cached_gram(const kvs_gram_cached_t *ce)
{
    return &ce->g;
}


int
kvs_gram_cached_table(kvs_gram_cached_t *ce, const kvs_gram_vocab_t *gv,
    uint32_t entries, const kvs_gram_mlimits_t *lim,
    kvs_gram_masker_t **out, kvs_err_t *err)
{
    int        rc;
    kvs_err_t  werr;

    if (!ce->table_ok) {
        rc = kvs_gram_masker_init_table(&ce->table, gv, entries, err);
        if (rc != KVS_OK) {
            return rc;
        }
        ce->table_ok = 1;

        /* the keys every request of this grammar will meet, built once
         * now rather than by the first requests' masks */
        (void) kvs_gram_masker_warm_until(&ce->table, &ce->g, lim,
                                          KVS_GRAM_WARM_UNITS,
                                          KVS_GRAM_WARM_NS,
                                          KVS_GRAM_WARM_FILL(entries),
                                          &ce->warm, &werr);
    }

    *out = &ce->table;

    return KVS_OK;
}


const kvs_gram_warm_stats_t *
kvs_gram_cached_warm(const kvs_gram_cached_t *ce)
{
    return &ce->warm;
}


void
kvs_gram_cache_put(kvs_gram_cache_t *c, kvs_gram_cached_t *ce)
{
    if (ce == NULL) {
        return;
    }

    pthread_mutex_lock(&c->lock);
    ce->refs--;
    kvs_gram_cache_trim(c);
    pthread_mutex_unlock(&c->lock);
}
