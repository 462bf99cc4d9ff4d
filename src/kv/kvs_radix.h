/*
 * kvs_radix: the prefix cache, a radix tree over KV blocks.
 *
 * Each node's edge is a run of whole blocks: n_blocks * block_tokens
 * token ids and the n_blocks pool blocks that hold their K/V.  A path
 * from a namespace's root spells a prefix; children of a node differ in
 * their first block (two children may share its first tokens, never all
 * of them).  The tree holds one pool reference on every block of every
 * node, so a cached block outlives the sequence that computed it.
 *
 * Namespaces: every node lives under one root per (weight epoch, adapter,
 * cache scope).  A match looks only under its own namespace's root, so
 * other weights, adapters or tenants can never be reused or timed.
 *
 * Matching compares token by token (never a hash) and may end inside a
 * block: the caller then shares that block too and must copy it before
 * writing into it (kvs_kv_table_unshare).  It reuses at most `limit`
 * tokens, which the caller sets below the prompt's length so that the
 * last prompt token is always computed.
 *
 * Locks and pins: a match or an insert may lock the deepest node it
 * reached; a lock counts on that node and every ancestor, and is dropped
 * with kvs_radix_unlock() on the same node (splits keep this true).  A
 * pin (a client cache breakpoint) holds a path the same way until its
 * time-to-live ends.  Only leaves with no lock and no pin are evictable,
 * least recently used first, from a binary heap (O(log n) per change).
 *
 * Miss reasons: names (64-bit chain hashes of the token blocks, not
 * namespaced) of cached and recently evicted blocks are kept only to say
 * why a prefix missed (evicted, other epoch, adapter or scope); they
 * never decide a reuse.
 *
 * Index names (the cross-host prefix index, docs/prefix-index.md): with
 * hooks set, every block that joins the tree gets a 16-byte name from
 * hooks.added (the caller hashes; src/kv knows nothing of the scheme),
 * stored with the block, and every named block that leaves the tree by
 * eviction is reported to hooks.evicted, deepest first (children before
 * parents, a leaf's last block first).  A block named all zero is
 * unnamed, and so are the blocks inserted below it.  The hooks run on
 * the thread that inserts or evicts, in the middle of the change: they
 * must not call back into the tree.  kvs_radix_free() reports nothing
 * (the tree goes away whole).
 *
 * Spilling (the disk tier, kvs_tier.h): with a spill function set,
 * every block that leaves the tree by eviction is reported to it before
 * the tree drops its pool reference (the block's K/V is intact during
 * the call), with its namespace, its path name (kvs_tier_path_id()
 * chained from the namespace's root), its tokens and its pool id, in
 * path order.  It runs on the evicting thread and must not call back
 * into the tree; kvs_radix_free() reports nothing.
 *
 * Invariants (kvs_radix_check() verifies them):
 *   - a node's blocks are held by the tree (pool refcount >= 1), and no
 *     block is in the tree twice; n_blocks counts the tree's blocks;
 *   - lock and pins of a node are the sums over its children plus what
 *     ends at the node itself;
 *   - a node is in the heap iff it is a leaf, not a root, with lock == 0
 *     and pins == 0.
 *
 * Ownership and threads: the engine thread owns the tree; the pool is
 * borrowed and outlives it.  Times are caller-given milliseconds of a
 * monotonic clock.  Failing calls change nothing.
 */

#ifndef KVS_RADIX_H
#define KVS_RADIX_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_kv_pool.h"

#define KVS_RADIX_MAX_SCOPE  256      /* bytes of a cache scope */
#define KVS_RADIX_NAME_LEN   16       /* bytes of an index name */

typedef enum {
    KVS_RADIX_MISS_NONE = 0,          /* all of limit was reused */
    KVS_RADIX_MISS_EMPTY,             /* nothing cached went further */
    KVS_RADIX_MISS_EVICTED,           /* the next block was evicted */
    KVS_RADIX_MISS_EPOCH,             /* cached under other weights */
    KVS_RADIX_MISS_ADAPTER,           /* cached under another adapter */
    KVS_RADIX_MISS_SCOPE,             /* cached for another scope */
    KVS_RADIX_MISS_DIVERGED,          /* the cached tokens differ from
                                         token miss_pos on */
    KVS_RADIX_MISS_OFF                /* no prefix cache */
} kvs_radix_miss_t;

typedef struct {
    uint64_t     epoch;               /* the loaded weights' identity */
    uint32_t     adapter;             /* LoRA adapter, 0: none */
    const char  *scope;               /* [scope_len]; "" (0): global */
    size_t       scope_len;
} kvs_radix_key_t;

/*
 * The prefix index's hooks (see "Index names" above).  added: the n
 * blocks tokens[0, n * block_tokens) join the tree under key, after the
 * block named parent (NULL: they start at the namespace's root); it
 * writes their names into names[n] (zeroed before the call; a name left
 * zero leaves that block and those after it unnamed).  Called only for
 * blocks new to the tree, once the insert can no longer fail, and not
 * when the parent block is itself unnamed.  evicted: a named block left
 * the tree.
 */
typedef struct {
    void   (*added)(void *arg, const kvs_radix_key_t *key,
                    const uint8_t *parent, const int32_t *tokens,
                    uint32_t n, uint8_t (*names)[KVS_RADIX_NAME_LEN]);
    void   (*evicted)(void *arg, const uint8_t *name);
    void    *arg;
} kvs_radix_hooks_t;

/* What eviction reports to the disk tier (see "Spilling" above): path
 * is KVS_RADIX_NAME_LEN bytes, tokens the block's block_tokens. */
typedef void (*kvs_radix_spill_pt)(void *arg, const kvs_radix_key_t *key,
    const uint8_t *path, const int32_t *tokens, uint32_t block);

/* What kvs_radix_list_names() calls for each named block. */
typedef void (*kvs_radix_name_pt)(void *arg, const uint8_t *name);

typedef struct kvs_radix_s       kvs_radix_t;
typedef struct kvs_radix_ns_s    kvs_radix_ns_t;
typedef struct kvs_radix_node_s  kvs_radix_node_t;

typedef struct {
    uint32_t           n_tokens;      /* reusable tokens, <= limit */
    uint32_t           n_blocks;      /* ceil(n_tokens / block_tokens),
                                         ids written to blocks[] */
    kvs_radix_node_t  *node;          /* deepest node used, locked when
                                         asked; NULL if n_tokens == 0 */
    kvs_radix_miss_t   miss;
    uint32_t           miss_pos;      /* where the match stopped */
} kvs_radix_match_t;

typedef struct {
    uint64_t  blocks;                 /* in the tree now */
    uint64_t  pinned_blocks;          /* of those, under a live pin */
    uint64_t  nodes;
    uint64_t  namespaces;
    uint64_t  pins;
    uint64_t  evicted_blocks;         /* since creation */
    uint64_t  expired_pins;
    uint64_t  released_pins;          /* over a scope's pin_max */
    uint64_t  spilled_blocks;         /* reported to the spill function */
    uint64_t  spill_lost;             /* evicted, not reported: no memory */
} kvs_radix_stats_t;


/* A tree over pool's blocks; pin_max_blocks bounds the pinned blocks of
 * each namespace (0: pins are refused).  *out is NULL on failure. */
int kvs_radix_new(kvs_radix_t **out, kvs_kv_pool_t *pool,
    uint32_t pin_max_blocks, kvs_err_t *err);

/* Drops every reference the tree holds and frees it.  Nothing may be
 * locked (sequences ended, namespaces put back). */
void kvs_radix_free(kvs_radix_t *r);

/*
 * The namespace for key, created when new, with one more hold on it
 * (kvs_radix_ns_put() drops it); a namespace with no hold and no node is
 * freed.  KVS_EINVAL for a scope over KVS_RADIX_MAX_SCOPE, KVS_ENOMEM.
 */
int kvs_radix_ns_get(kvs_radix_t *r, const kvs_radix_key_t *key,
    kvs_radix_ns_t **ns, kvs_err_t *err);
void kvs_radix_ns_put(kvs_radix_t *r, kvs_radix_ns_t *ns);

/*
 * Longest cached prefix of tokens[0..limit) under ns: its blocks go to
 * blocks[] (room for ceil(limit / block_tokens) ids), and with lock set
 * the blocks used are locked (a node whose edge is used in part is split
 * after them; m->node is where the lock ends, NULL when nothing could be
 * locked), their path becomes the most recently used
 * (an internal use counter orders eviction) and the pins on it are
 * refreshed from now.  Never fails: a miss is m->n_tokens == 0 with the
 * reason.
 */
void kvs_radix_match(kvs_radix_t *r, kvs_radix_ns_t *ns,
    const int32_t *tokens, uint32_t limit, uint32_t *blocks, int lock,
    uint64_t now, kvs_radix_match_t *m);

/*
 * Caches the whole blocks of tokens[0..n_tokens) whose K/V is in
 * blocks[] (a sequence's table): blocks already cached stay as they are,
 * the others join the tree with one more pool reference each.  A
 * windowed sequence's table may begin with holes (KVS_KV_NONE, blocks it
 * gave back): only the whole blocks up to the first hole past what the
 * tree already holds are cached, so every path stays complete from the
 * root.  *node is the deepest node of the cached prefix (NULL when it
 * has no whole block), locked when lock is set.  KVS_ENOMEM changes
 * nothing.
 */
int kvs_radix_insert(kvs_radix_t *r, kvs_radix_ns_t *ns,
    const int32_t *tokens, uint32_t n_tokens, const uint32_t *blocks,
    int lock, uint64_t now, kvs_radix_node_t **node, kvs_err_t *err);

/* Adds a lock on node (and its path): a second holder of the same
 * prefix, such as the other choices of a request. */
void kvs_radix_lock(kvs_radix_t *r, kvs_radix_node_t *node);

/* Drops a lock taken by match, insert or lock; NULL is a no-op. */
void kvs_radix_unlock(kvs_radix_t *r, kvs_radix_node_t *node);

/*
 * Pins the cached whole blocks of tokens[0..n_tokens) until now + ttl_ms
 * (a pin on the same prefix is refreshed, never shortened).  *pinned is
 * the tokens pinned (whole blocks that are in the tree), *created 1 when
 * the pin is new.  Pins over the namespace's pin_max_blocks release the
 * least recently refreshed ones (hits refresh too); a prefix longer than
 * pin_max_blocks by itself is not pinned (*pinned 0) and releases
 * nothing.  KVS_ENOMEM changes nothing.
 */
int kvs_radix_pin(kvs_radix_t *r, kvs_radix_ns_t *ns, const int32_t *tokens,
    uint32_t n_tokens, uint64_t ttl_ms, uint64_t now, uint32_t *pinned,
    int *created, kvs_err_t *err);

/* Releases pins whose time is up; cheap when none is due. */
void kvs_radix_expire(kvs_radix_t *r, uint64_t now);

/* Evicts least recently used evictable leaves, from their last blocks (a
 * leaf is cut short when fewer are wanted), until the pool has gained
 * want free blocks or nothing is evictable; returns the blocks freed. */
uint32_t kvs_radix_evict(kvs_radix_t *r, uint32_t want);

/* Blocks of the nodes no lock or pin holds: all that kvs_radix_evict()
 * can take out of the tree, leaves first, for the scheduler's planning
 * (each is freed unless a block table still shares it). */
uint32_t kvs_radix_evictable(const kvs_radix_t *r);

void kvs_radix_stats(const kvs_radix_t *r, kvs_radix_stats_t *st);

/* Sets (a copy of) the index hooks; NULL removes them.  Blocks cached
 * before hooks are set stay unnamed. */
void kvs_radix_set_hooks(kvs_radix_t *r, const kvs_radix_hooks_t *hooks);

/* Sets the spill function (NULL: none).  Blocks evicted while the
 * path's scratch cannot grow (out of memory) are not reported, and are
 * counted in the stats' spill_lost. */
void kvs_radix_set_spill(kvs_radix_t *r, kvs_radix_spill_pt fn, void *arg);

/* During a spill call: the index name (hooks.added's) of the block being
 * spilled, KVS_RADIX_NAME_LEN bytes; NULL when it is unnamed (no hooks,
 * or under an unnamed parent) or outside a spill call. */
const uint8_t *kvs_radix_spill_name(const kvs_radix_t *r);

/* The key of namespace ns (its scope points into ns, valid while ns is
 * held): what the disk tier's loads look up under. */
void kvs_radix_ns_key(const kvs_radix_ns_t *ns, kvs_radix_key_t *key);

/* 1 when an index name (KVS_RADIX_NAME_LEN bytes) is not all zero. */
int kvs_radix_named(const uint8_t *name);

/* Calls fn for the name of every named block in the tree, parents before
 * children (pre-order, each edge's blocks in order); returns how many. */
uint64_t kvs_radix_list_names(const kvs_radix_t *r, kvs_radix_name_pt fn,
    void *arg);

/* Verifies the invariants above in O(nodes + blocks); KVS_EFORMAT names
 * the first broken one.  For tests. */
int kvs_radix_check(const kvs_radix_t *r, kvs_err_t *err);

const char *kvs_radix_miss_name(kvs_radix_miss_t miss);

#endif /* KVS_RADIX_H */
