/*
 * kvs_gram_req: a request's output constraint (OpenAI's response_format,
 * or the tool calls' grammar) as it travels from the API to the engine,
 * and the engine's cache of compiled grammars.
 *
 * A constraint is a kind and, for KVS_GRAM_REQ_SCHEMA, the schema's
 * canonical JSON text (jansson, sorted keys, compact; for
 * KVS_GRAM_REQ_TOOLS the tools spec's, kvs_gram_from_tools()): the API compiles
 * it once to refuse what is not supported (the 400 names the keyword),
 * the wire carries the text, and the engine compiles it again through
 * the cache, keyed by (kind, text), since a compiled grammar is not
 * worth a wire format and the compile is cheap.
 *
 * The cache: entries are reference counted (a sequence holds its grammar
 * while it runs, so eviction never frees one in use), at most
 * KVS_GRAM_CACHE_MAX entries and KVS_GRAM_CACHE_BYTES of grammar memory
 * counted together; past either, the least recently used unreferenced
 * entries go.  Entries in use may push it past its bound (a busy engine
 * never refuses a request for the cache's sake); the bound is met again
 * as they are released.  Thread-safe: its own mutex, taken briefly; it
 * never calls out while holding it, except the compile itself (a few
 * milliseconds at most, bounded by KVS_GRAM_REQ_MAX_SCHEMA).
 */

#ifndef KVS_GRAM_REQ_H
#define KVS_GRAM_REQ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "grammar/kvs_grammar.h"

#define KVS_GRAM_REQ_NONE     0       /* no constraint (text) */
#define KVS_GRAM_REQ_OBJECT   1       /* json_object: any JSON object */
#define KVS_GRAM_REQ_SCHEMA   2       /* json_schema: schema text given */
#define KVS_GRAM_REQ_TOOLS    3       /* tool calls: the text is a tools
                                         spec (kvs_gram_from_tools) */
#define KVS_GRAM_REQ_KIND_MAX 3

/* The schema's canonical text, bytes; a larger one is a 400. */
#define KVS_GRAM_REQ_MAX_SCHEMA  (64u << 10)

/* The grammar a constraint compiles to is capped tighter than the
 * library's default: an element is 8 bytes, so this is 16 MiB at most. */
#define KVS_GRAM_REQ_MAX_ELEMS   (1u << 21)
#define KVS_GRAM_REQ_MAX_RULES   (1u << 18)

#define KVS_GRAM_CACHE_MAX       256            /* entries */
#define KVS_GRAM_CACHE_BYTES     (64u << 20)    /* their grammars */

/*
 * Compiles a constraint into g (initialised here; kvs_gram_free() it,
 * also after an error).  kind SCHEMA: text[len] is the schema's JSON
 * (KVS_EINVAL if it is not JSON or too long); the messages are the
 * schema compiler's, starting with the keyword's path inside the schema
 * ("properties.a.format: ...").  Kind TOOLS: text[len] is a tools spec
 * (same bound; messages name the spec's field, "tools[0].parameters.
 * properties.a.format: ...").  Kind OBJECT ignores text.
 */
int kvs_gram_req_compile(kvs_gram_t *g, unsigned kind, const char *text,
    size_t len, kvs_err_t *err);

/* The memory a compiled grammar takes, as the cache counts it. */
size_t kvs_gram_size(const kvs_gram_t *g);

typedef struct kvs_gram_centry_req_s  kvs_gram_cached_t;

typedef struct {
    pthread_mutex_t      lock;
    kvs_gram_cached_t   *head;        /* most recently used first */
    uint32_t             n;
    size_t               bytes;
    uint32_t             max_n;
    size_t               max_bytes;
    size_t               entry_extra; /* bytes counted per entry for its
                                         mask table (kvs_gram_cached_table:
                                         entries x mask bytes), set by the
                                         owner after init */
    uint64_t             hits, misses;
} kvs_gram_cache_t;

/* max_n 0: KVS_GRAM_CACHE_MAX; max_bytes 0: KVS_GRAM_CACHE_BYTES. */
int kvs_gram_cache_init(kvs_gram_cache_t *c, uint32_t max_n,
    size_t max_bytes, kvs_err_t *err);

/* Frees every entry; none may still be held. */
void kvs_gram_cache_free(kvs_gram_cache_t *c);

/* The compiled grammar of (kind, text[len]), compiled on a miss; *out is
 * held until kvs_gram_cache_put().  A compile error is returned as is
 * and nothing is cached. */
int kvs_gram_cache_get(kvs_gram_cache_t *c, unsigned kind, const char *text,
    size_t len, kvs_gram_cached_t **out, kvs_err_t *err);

const kvs_gram_t *kvs_gram_cached_gram(const kvs_gram_cached_t *ce);

void kvs_gram_cache_put(kvs_gram_cache_t *c, kvs_gram_cached_t *ce);

/*
 * The entry's table of context-independent masks over gv (made on the
 * first call, `entries` at most, and warmed then: kvs_gram_masker_warm
 * with KVS_GRAM_WARM_UNITS of work and KVS_GRAM_WARM_FILL, for maskers
 * whose matchers have limits lim), for kvs_gram_masker_share(): the
 * maskers of every sequence constrained by this grammar build each entry
 * once.  Not locked: a cache serves one vocabulary, and only one thread
 * (the engine's) may call this and mask with the table; the entry's
 * table is freed with the entry, when nothing holds it.  A warm that
 * fails (no memory) leaves whole entries or none: the masks build the
 * rest, so it is not an error.
 */
int kvs_gram_cached_table(kvs_gram_cached_t *ce, const kvs_gram_vocab_t *gv,
    uint32_t entries, const kvs_gram_mlimits_t *lim,
    kvs_gram_masker_t **out, kvs_err_t *err);

/* What the entry's warm did (zero before the table is made). */
const kvs_gram_warm_stats_t *kvs_gram_cached_warm(const kvs_gram_cached_t *ce);

#endif /* KVS_GRAM_REQ_H */
