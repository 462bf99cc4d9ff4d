/*
 * test_radix_check: the prefix cache's invariants through a seeded
 * random run (KVS_SEED, KVS_RADIX_OPS) over the simulated sequences of
 * kvs_test_radix.h: matches, inserts, forks, pins with TTLs, evictions
 * and namespace holds, at three block sizes.  After every operation it
 * asks kvs_radix_check() (kv/kvs_radix_check.c) and checks from outside
 * the tree that free + table-only + tree blocks == pool size, with the
 * tree holding exactly one reference on each of its blocks; and it
 * checks every match against an oracle built from outside the tree (the
 * longest cached prefix, the miss reason).  The index hooks: the run
 * names every block with a hash of its own (test_name(), nothing of the
 * tree's) and checks after every operation that the blocks that joined
 * were named exactly once, in order, from the right parent; that the
 * names reported evicted are exactly those of the blocks that left, once
 * each, children before parents; and that kvs_radix_list_names() lists
 * exactly the tree's blocks' names, parents first.  The disk tier's
 * spill function: every evicted block is reported once, while the tree
 * still holds it, with the tokens written into it and its own key.
 */

#include "kvs_test.h"
#include "kvs_test_radix.h"

#include <xxhash.h>

#include "base/kvs_hash.h"


/*
 * The randomized run: live sequences that match, copy a shared partial
 * block, grow (evicting when the pool is short, skipping when still
 * short), fork, insert midway or at the end, cancel; pins with TTLs while
 * time advances; evictions; namespace holds across keys.
 *
 * The oracle: which blocks are in the tree is known without looking
 * inside it (a block's references beyond its tables' are the tree's),
 * and each block that joins the tree is recorded with its key, its index
 * in the prefix and the chain hash of the prefix through it.  From that,
 * the longest cached prefix of any query is computed independently of
 * the tree's shape, and every match must reuse exactly that many tokens.
 */

#define R_KEYS      6
#define R_CONV      6
#define R_CONV_LEN  192
#define R_VOCAB     12
#define R_SEQS      8
#define R_TOKENS    1024          /* the pool, in token positions */
#define R_PIN_MAX   16            /* blocks per namespace */
#define R_LOCKS     4
#define R_EVER      (1u << 19)    /* (key, prefix) pairs ever cached */
#define R_PINREC    64            /* recent pins whose blocks are watched */


static const kvs_radix_key_t  r_keys[R_KEYS] = {
    { 1, 0, "", 0 },
    { 2, 0, "", 0 },
    { 1, 3, "", 0 },
    { 1, 0, "alice", 5 },
    { 1, 0, "bob", 3 },
    { 2, 3, "alice", 5 },
};


typedef struct {
    seq_t               s;
    int                 live;
    kvs_radix_ns_t     *ns;
    int32_t             plan[MAX_TOK];    /* the tokens it will have */
    uint32_t            plan_len;
    kvs_radix_node_t   *lock[R_LOCKS];
    uint32_t            n_locks;
    /* [lock][block] tree blocks each lock keeps in the tree */
    uint32_t            held[R_LOCKS][MAX_BLK];
    uint32_t            n_held[R_LOCKS];
} rseq_t;


/* What a block in the tree caches, recorded when it joined. */
typedef struct {
    uint64_t  hash;                   /* chain hash through this block */
    uint64_t  parent;                 /* chain hash of what precedes it */
    uint32_t  pos;                    /* its index in the prefix */
    int       key;
    uint64_t  stamp;                  /* the op that recorded it */
} rblk_t;


/* A pin made: until its time is up, and unless its namespace released
 * a pin over pin_max since, its blocks stay in the tree. */
typedef struct {
    int                 key;
    uint64_t            until;            /* a lower bound: hits extend */
    uint64_t            rel;              /* rel[key] when made */
    uint32_t            n;
    uint32_t            blocks[R_PIN_MAX];
} rpin_t;


typedef struct {
    env_t               e;
    uint32_t            nb;               /* pool blocks */
    uint32_t            bt;
    rseq_t              seq[R_SEQS];
    int32_t             conv[R_CONV][R_CONV_LEN];
    uint32_t            holds[R_KEYS];
    uint32_t           *refs;             /* [nb] table references */
    uint8_t            *tree;             /* [nb] 1: in the tree */
    uint8_t            *was;              /* [nb] tree[] at the last check */
    uint8_t            *seen;             /* [nb] scratch */
    rblk_t             *info;             /* [nb] valid while tree[b] */
    uint32_t           *set;              /* [mask + 1] tree blocks + 1 by
                                             (key, hash), 0: empty */
    uint32_t            mask;
    rblk_t             *ever;             /* [R_EVER] every (key, hash)
                                             that was ever cached */
    uint32_t            n_ever;
    rpin_t              pinrec[R_PINREC]; /* a ring */
    uint32_t            n_pinrec;
    uint64_t            rel[R_KEYS];      /* pin calls that released */
    uint64_t            rng;
    uint64_t            now;
    uint64_t            op;
    const char         *op_name;
    uint64_t            prev_blocks;
    /* what the run went through */
    uint64_t            n_miss[KVS_RADIX_MISS_OFF + 1];
    uint64_t            hit_tokens, query_tokens, partial_hits, cows;
    uint64_t            skips, forks, inserts, splits, evicted, pins;
    /* index names (see the top): [nb] per tree block, as recorded */
    uint8_t           (*iname)[KVS_RADIX_NAME_LEN];
    uint8_t           (*iparent)[KVS_RADIX_NAME_LEN];  /* zero: root */
    uint8_t             added[MAX_BLK][KVS_RADIX_NAME_LEN];  /* by the
                                             hook, since the last insert */
    uint32_t            n_added;
    uint8_t           (*evl)[KVS_RADIX_NAME_LEN];  /* [nb] reported
                                             evicted since the last check */
    uint32_t            n_evl;
    uint64_t            n_spilled;        /* blocks the spill hook saw */
    uint32_t           *ord;              /* [nb] scratch */
    uint64_t            names_added, names_evicted;
} rt_t;


/* The test's own block name: xxh3-128 of (parent name or 16 zeros,
 * epoch, adapter, scope, the block's tokens); any injective-enough
 * function would do, the tree must only store and report it. */
static void
test_name(const kvs_radix_key_t *key, const uint8_t *parent,
    const int32_t *tokens, uint32_t bt, uint8_t *out)
{
    size_t              n;
    uint8_t             buf[KVS_RADIX_NAME_LEN + 12 + KVS_RADIX_MAX_SCOPE
                            + 64 * sizeof(int32_t)];
    XXH128_canonical_t  c;

    assert_true(bt <= 64);
    memset(buf, 0, KVS_RADIX_NAME_LEN);
    if (parent != NULL) {
        memcpy(buf, parent, KVS_RADIX_NAME_LEN);
    }
    n = KVS_RADIX_NAME_LEN;
    memcpy(buf + n, &key->epoch, 8);
    memcpy(buf + n + 8, &key->adapter, 4);
    n += 12;
    memcpy(buf + n, key->scope, key->scope_len);
    n += key->scope_len;
    memcpy(buf + n, tokens, bt * sizeof(int32_t));
    n += bt * sizeof(int32_t);

    XXH128_canonicalFromHash(&c, XXH3_128bits(buf, n));
    memcpy(out, c.digest, KVS_RADIX_NAME_LEN);
}


static void
rt_hook_added(void *arg, const kvs_radix_key_t *key, const uint8_t *parent,
    const int32_t *tokens, uint32_t n, uint8_t (*names)[KVS_RADIX_NAME_LEN])
{
    uint32_t   i;
    rt_t      *rt = arg;

    for (i = 0; i < n; i++) {
        assert_false(kvs_radix_named(names[i]));      /* zeroed for us */
        test_name(key, i == 0 ? parent : names[i - 1],
                  tokens + (size_t) i * rt->e.bt, rt->e.bt, names[i]);

        if (rt->n_added >= MAX_BLK) {
            fail_msg("op %lu: more than %u names added by one insert",
                     (unsigned long) rt->op, MAX_BLK);
        }
        memcpy(rt->added[rt->n_added++], names[i], KVS_RADIX_NAME_LEN);
    }
}


static void
rt_hook_evicted(void *arg, const uint8_t *name)
{
    rt_t  *rt = arg;

    if (rt->n_evl >= rt->nb) {
        fail_msg("op %lu: more names evicted than the pool has blocks",
                 (unsigned long) rt->op);
    }
    memcpy(rt->evl[rt->n_evl++], name, KVS_RADIX_NAME_LEN);
}


/* The spill hook: a block of the tree, still held, with the tokens
 * written into it, under the key it joined with. */
static void
rt_hook_spill(void *arg, const kvs_radix_key_t *key, const uint8_t *path,
    const int32_t *tokens, uint32_t block)
{
    rt_t                   *rt = arg;
    const kvs_radix_key_t  *k;

    if (block >= rt->nb || !rt->tree[block]
        || kvs_kv_pool_refcount(rt->e.pool, block) == 0)
    {
        fail_msg("op %lu: block %u spilled but not in the tree",
                 (unsigned long) rt->op, block);
    }

    k = &r_keys[rt->info[block].key];

    if (memcmp(tokens, &rt->e.shadow[(size_t) block * rt->bt],
               rt->bt * sizeof(int32_t)) != 0
        || key->epoch != k->epoch || key->adapter != k->adapter
        || key->scope_len != k->scope_len
        || memcmp(key->scope, k->scope, k->scope_len) != 0)
    {
        fail_msg("op %lu: block %u spilled with other tokens or key",
                 (unsigned long) rt->op, block);
    }

    rt->n_spilled++;
}


static const uint8_t (*rt_sort_names)[KVS_RADIX_NAME_LEN];

static int
rt_name_cmp(const void *a, const void *b)
{
    return memcmp(rt_sort_names[*(const uint32_t *) a],
                  rt_sort_names[*(const uint32_t *) b], KVS_RADIX_NAME_LEN);
}


/* Where name is among names[n], through ord (indices sorted by name);
 * -1 when absent. */
static long
rt_name_pos(uint8_t (*names)[KVS_RADIX_NAME_LEN], const uint32_t *ord,
    uint32_t n, const uint8_t *name)
{
    uint32_t  lo, hi, mid;
    int       c;

    lo = 0;
    hi = n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        c = memcmp(names[ord[mid]], name, KVS_RADIX_NAME_LEN);
        if (c == 0) {
            return (long) ord[mid];
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }

    return -1;
}


/* Sorts ord[0, n) as the indices of names[] by name; fails on a
 * duplicate. */
static void
rt_names_sort(rt_t *rt, uint8_t (*names)[KVS_RADIX_NAME_LEN], uint32_t n,
    const char *what)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        rt->ord[i] = i;
    }
    rt_sort_names = (const uint8_t (*)[KVS_RADIX_NAME_LEN]) names;
    qsort(rt->ord, n, sizeof(uint32_t), rt_name_cmp);

    for (i = 1; i < n; i++) {
        if (memcmp(names[rt->ord[i - 1]], names[rt->ord[i]],
                   KVS_RADIX_NAME_LEN) == 0)
        {
            fail_msg("op %lu (%s): a name %s twice", (unsigned long) rt->op,
                     rt->op_name, what);
        }
    }
}


static void
rt_list_one(void *arg, const uint8_t *name)
{
    rt_t  *rt = arg;

    /* into the eviction list's room, which is empty while listing */
    if (rt->n_evl >= rt->nb) {
        fail_msg("op %lu: more names listed than the pool has blocks",
                 (unsigned long) rt->op);
    }
    memcpy(rt->evl[rt->n_evl++], name, KVS_RADIX_NAME_LEN);
}


/*
 * The index names against the blocks that left and stayed since the
 * last check (needs a fresh rt_scan(), was[] still the last check's):
 * those that left were reported once each, children first; the listing
 * is exactly the tree's blocks' names, parents first.
 */
static void
rt_check_names(rt_t *rt)
{
    uint32_t  b, n, gone;
    long      at, up;
    uint64_t  listed;

    rt_names_sort(rt, rt->evl, rt->n_evl, "reported evicted");
    gone = 0;

    for (b = 0; b < rt->nb; b++) {
        if (!rt->was[b] || rt->tree[b]) {
            continue;
        }

        gone++;
        at = rt_name_pos(rt->evl, rt->ord, rt->n_evl, rt->iname[b]);
        if (at < 0) {
            fail_msg("op %lu (%s): block %u left the tree, its name was not "
                     "reported", (unsigned long) rt->op, rt->op_name, b);
        }

        up = rt_name_pos(rt->evl, rt->ord, rt->n_evl, rt->iparent[b]);
        if (up >= 0 && up < at) {
            fail_msg("op %lu (%s): a parent block's name was reported "
                     "evicted before its child's", (unsigned long) rt->op,
                     rt->op_name);
        }
    }

    if (gone != rt->n_evl) {
        fail_msg("op %lu (%s): %u blocks left the tree, %u names reported "
                 "evicted", (unsigned long) rt->op, rt->op_name, gone,
                 rt->n_evl);
    }

    rt->names_evicted += rt->n_evl;
    rt->n_evl = 0;

    /* the listing: the tree's names, each after its parent's (an
     * O(n log n) check: every 16th operation) */
    if (rt->op % 16 != 0) {
        return;
    }

    listed = kvs_radix_list_names(rt->e.r, rt_list_one, rt);
    n = rt->n_evl;
    assert_int_equal(listed, n);
    rt_names_sort(rt, rt->evl, n, "listed");
    gone = 0;

    for (b = 0; b < rt->nb; b++) {
        if (!rt->tree[b]) {
            continue;
        }

        at = rt_name_pos(rt->evl, rt->ord, n, rt->iname[b]);
        if (at < 0) {
            fail_msg("op %lu (%s): block %u is in the tree, its name is not "
                     "listed", (unsigned long) rt->op, rt->op_name, b);
        }

        if (kvs_radix_named(rt->iparent[b])) {
            up = rt_name_pos(rt->evl, rt->ord, n, rt->iparent[b]);
            if (up < 0 || up > at) {
                fail_msg("op %lu (%s): block %u is listed before its parent",
                         (unsigned long) rt->op, rt->op_name, b);
            }
        }
        gone++;
    }

    if (gone != n) {
        fail_msg("op %lu (%s): %u names listed, %u tree blocks",
                 (unsigned long) rt->op, rt->op_name, n, gone);
    }

    rt->n_evl = 0;
}


static uint32_t
rnd(rt_t *rt, uint32_t n)
{
    return (uint32_t) (kvs_splitmix64(&rt->rng) % n);
}


/* h[i]: the chain hash of tokens[0, i * bt), for i in [0, levels]. */
static void
rt_chain(const rt_t *rt, const int32_t *tokens, uint32_t levels,
    uint64_t *h)
{
    uint32_t  i;

    h[0] = KVS_FNV1A64_INIT;
    for (i = 0; i < levels; i++) {
        h[i + 1] = kvs_fnv1a64(h[i], tokens + (size_t) i * rt->bt,
                               rt->bt * sizeof(int32_t));
    }
}


static uint32_t
rt_slot(const rt_t *rt, int key, uint64_t hash)
{
    return (uint32_t) ((hash ^ ((uint64_t) key * 0x9e3779b97f4a7c15ULL))
                       & rt->mask);
}


/* The tree block caching (key, hash), or KVS_KV_NONE. */
static uint32_t
rt_find(const rt_t *rt, int key, uint64_t hash)
{
    uint32_t  i, b;

    for (i = rt_slot(rt, key, hash); rt->set[i] != 0;
         i = (i + 1) & rt->mask)
    {
        b = rt->set[i] - 1;
        if (rt->info[b].key == key && rt->info[b].hash == hash) {
            return b;
        }
    }

    return KVS_KV_NONE;
}


/* Records that (key, hash) was cached; 0 once the record is full. */
static int
rt_ever(rt_t *rt, int key, uint64_t hash, int add)
{
    uint32_t  i;

    for (i = (uint32_t) (hash ^ (uint64_t) key) & (R_EVER - 1);
         rt->ever[i].stamp != 0; i = (i + 1) & (R_EVER - 1))
    {
        if (rt->ever[i].key == key && rt->ever[i].hash == hash) {
            return 1;
        }
    }

    if (!add || rt->n_ever >= R_EVER / 4 * 3) {
        return 0;
    }

    rt->ever[i].key = key;
    rt->ever[i].hash = hash;
    rt->ever[i].stamp = 1;
    rt->n_ever++;

    return 1;
}


/* The reason a block cached under key o is no hit for key q. */
static kvs_radix_miss_t
rt_why(int o, int q)
{
    return r_keys[o].epoch != r_keys[q].epoch ? KVS_RADIX_MISS_EPOCH
           : r_keys[o].adapter != r_keys[q].adapter ? KVS_RADIX_MISS_ADAPTER
           : KVS_RADIX_MISS_SCOPE;
}


static void
rt_refs(rt_t *rt)
{
    uint32_t  i, j, b, d;

    memset(rt->refs, 0, rt->nb * sizeof(uint32_t));

    for (i = 0; i < R_SEQS; i++) {
        if (!rt->seq[i].live) {
            continue;
        }
        for (j = 0; j < rt->seq[i].s.t.n_blocks; j++) {
            rt->refs[rt->seq[i].s.t.blocks[j]]++;
        }
    }

    for (b = 0; b < rt->nb; b++) {
        d = ref(&rt->e, b) - rt->refs[b];
        if (ref(&rt->e, b) < rt->refs[b] || d > 1) {
            fail_msg("op %lu (%s): block %u has %u references, tables "
                     "hold %u (the tree holds at most one)",
                     (unsigned long) rt->op, rt->op_name, b, ref(&rt->e, b),
                     rt->refs[b]);
        }
        rt->tree[b] = (uint8_t) d;
    }
}


/* Recomputes tree[] and the (key, hash) index of the tree's blocks; no
 * two blocks may cache the same prefix under one key. */
static void
rt_scan(rt_t *rt)
{
    uint32_t  b, i;

    rt_refs(rt);
    memset(rt->set, 0, (rt->mask + 1) * sizeof(uint32_t));

    for (b = 0; b < rt->nb; b++) {
        if (!rt->tree[b]) {
            continue;
        }

        for (i = rt_slot(rt, rt->info[b].key, rt->info[b].hash);
             rt->set[i] != 0; i = (i + 1) & rt->mask)
        {
            if (rt->info[rt->set[i] - 1].key == rt->info[b].key
                && rt->info[rt->set[i] - 1].hash == rt->info[b].hash)
            {
                fail_msg("op %lu (%s): blocks %u and %u both cache block "
                         "%u of one prefix under key %d",
                         (unsigned long) rt->op, rt->op_name,
                         rt->set[i] - 1, b, rt->info[b].pos,
                         rt->info[b].key);
            }
        }
        rt->set[i] = b + 1;
    }
}


/*
 * The longest cached prefix of tokens[0, limit) under key, from the
 * recorded blocks alone: whole blocks while the prefix through the next
 * one is cached, then the longest common run with any cached block that
 * follows that prefix.  *whole gets the whole blocks' tokens.  Needs a
 * fresh rt_scan().
 */
static uint32_t
rt_expect(rt_t *rt, int key, const int32_t *tokens, uint32_t limit,
    uint32_t *whole)
{
    uint64_t  h[MAX_BLK + 1];
    uint32_t  w, n, best, b, j, at;

    rt_chain(rt, tokens, limit / rt->bt, h);

    for (w = 0; w < limit / rt->bt; w++) {
        b = rt_find(rt, key, h[w + 1]);
        if (b == KVS_KV_NONE) {
            break;
        }
        assert_int_equal(rt->info[b].pos, w);
    }

    *whole = w * rt->bt;
    best = *whole;
    at = *whole;

    if (at == limit) {
        return best;
    }

    for (b = 0; b < rt->nb; b++) {
        if (!rt->tree[b] || rt->info[b].key != key || rt->info[b].pos != w
            || rt->info[b].parent != h[w])
        {
            continue;
        }

        for (j = 0; j < rt->bt && at + j < limit; j++) {
            if (rt->e.shadow[(size_t) b * rt->bt + j] != tokens[at + j]) {
                break;
            }
        }

        n = at + j;
        best = n > best ? n : best;
    }

    return best;
}


static void
rt_check(rt_t *rt, int evicting)
{
    env_t              *e;
    kvs_radix_stats_t   st;
    kvs_err_t           err;
    const rpin_t       *pr;
    uint32_t            i, j, k, b, table_only, ev, nk, locked;
    uint64_t            in_tree;

    e = &rt->e;

    if (kvs_kv_pool_check(e->pool, &err) != KVS_OK) {
        fail_msg("op %lu (%s): kvs_kv_pool_check: %s",
                 (unsigned long) rt->op, rt->op_name, err.msg);
    }
    if (kvs_radix_check(e->r, &err) != KVS_OK) {
        fail_msg("op %lu (%s): kvs_radix_check: %s",
                 (unsigned long) rt->op, rt->op_name, err.msg);
    }

    for (i = 0; i < R_SEQS; i++) {
        if (rt->seq[i].live
            && kvs_kv_table_check(&rt->seq[i].s.t, e->pool, &err) != KVS_OK)
        {
            fail_msg("op %lu: table %u: %s", (unsigned long) rt->op, i,
                     err.msg);
        }
    }

    rt_scan(rt);
    st = stats(e);
    in_tree = 0;
    table_only = 0;

    for (b = 0; b < rt->nb; b++) {
        in_tree += rt->tree[b];
        table_only += rt->refs[b] > 0 && !rt->tree[b];

        /* blocks join the tree only by an insert of a table's blocks */
        if (rt->tree[b] && !rt->was[b] && rt->info[b].stamp != rt->op + 1) {
            fail_msg("op %lu (%s): block %u joined the tree, not from an "
                     "insert", (unsigned long) rt->op, rt->op_name, b);
        }

        /* the cached prefixes are closed under taking prefixes */
        if (rt->tree[b] && rt->info[b].pos > 0
            && rt_find(rt, rt->info[b].key, rt->info[b].parent)
               == KVS_KV_NONE)
        {
            fail_msg("op %lu (%s): block %u (index %u) is cached without "
                     "the block before it", (unsigned long) rt->op,
                     rt->op_name, b, rt->info[b].pos);
        }
    }
    rt_check_names(rt);
    memcpy(rt->was, rt->tree, rt->nb);

    if (in_tree != st.blocks) {
        fail_msg("op %lu (%s): the tree holds references on %lu blocks, "
                 "stats say %lu", (unsigned long) rt->op, rt->op_name,
                 (unsigned long) in_tree, (unsigned long) st.blocks);
    }

    if (kvs_kv_pool_free_count(e->pool) + table_only + st.blocks != rt->nb) {
        fail_msg("op %lu (%s): free %u + table-only %u + tree %lu != %u",
                 (unsigned long) rt->op, rt->op_name,
                 kvs_kv_pool_free_count(e->pool), table_only,
                 (unsigned long) st.blocks, rt->nb);
    }

    if (!evicting && st.blocks < rt->prev_blocks) {
        fail_msg("op %lu (%s): the tree lost %lu blocks outside eviction",
                 (unsigned long) rt->op, rt->op_name,
                 (unsigned long) (rt->prev_blocks - st.blocks));
    }
    rt->prev_blocks = st.blocks;

    /* locked paths stay in the tree */
    memset(rt->seen, 0, rt->nb);
    locked = 0;
    for (i = 0; i < R_SEQS; i++) {
        if (!rt->seq[i].live) {
            continue;
        }
        for (k = 0; k < rt->seq[i].n_locks; k++) {
            for (j = 0; j < rt->seq[i].n_held[k]; j++) {
                b = rt->seq[i].held[k][j];
                if (!rt->tree[b]) {
                    fail_msg("op %lu (%s): block %u of a locked path left "
                             "the tree", (unsigned long) rt->op,
                             rt->op_name, b);
                }
                locked += !rt->seen[b];
                rt->seen[b] = 1;
            }
        }
    }

    /* live pins stay in the tree */
    for (i = 0; i < R_PINREC && i < rt->n_pinrec; i++) {
        pr = &rt->pinrec[i];

        if (rt->now >= pr->until || rt->rel[pr->key] != pr->rel) {
            continue;
        }
        for (j = 0; j < pr->n; j++) {
            if (!rt->tree[pr->blocks[j]]) {
                fail_msg("op %lu (%s): block %u of a pin live until %lu "
                         "(now %lu) left the tree", (unsigned long) rt->op,
                         rt->op_name, pr->blocks[j],
                         (unsigned long) pr->until, (unsigned long) rt->now);
            }
        }
    }

    ev = kvs_radix_evictable(e->r);
    assert_true(st.pinned_blocks <= st.blocks);
    if (ev + st.pinned_blocks > st.blocks || ev + locked > st.blocks) {
        fail_msg("op %lu (%s): evictable %u, tree %lu, pinned %lu, locked "
                 "%u", (unsigned long) rt->op, rt->op_name, ev,
                 (unsigned long) st.blocks, (unsigned long) st.pinned_blocks,
                 locked);
    }
    assert_true(st.pinned_blocks <= (uint64_t) R_PIN_MAX * st.namespaces);

    nk = 0;
    for (k = 0; k < R_KEYS; k++) {
        nk += rt->holds[k] > 0;
    }
    assert_true(st.namespaces >= nk && st.namespaces <= R_KEYS);
    if (st.blocks == 0 && st.pins == 0 && st.namespaces != nk) {
        fail_msg("op %lu (%s): empty tree, %lu namespaces, %u held",
                 (unsigned long) rt->op, rt->op_name,
                 (unsigned long) st.namespaces, nk);
    }
}


/* kvs_radix_evict(want), checked against evictable and the pool. */
static void
rt_evict(rt_t *rt, uint32_t want)
{
    env_t              *e;
    kvs_radix_stats_t   st0, st1;
    uint32_t            free0, ev0, ev1, freed, gone;

    e = &rt->e;
    st0 = stats(e);
    free0 = kvs_kv_pool_free_count(e->pool);
    ev0 = kvs_radix_evictable(e->r);

    freed = kvs_radix_evict(e->r, want);

    st1 = stats(e);
    ev1 = kvs_radix_evictable(e->r);
    assert_true(st1.blocks <= st0.blocks);
    gone = (uint32_t) (st0.blocks - st1.blocks);

    if (freed != kvs_kv_pool_free_count(e->pool) - free0) {
        fail_msg("op %lu: evict(%u) returned %u, the pool gained %u",
                 (unsigned long) rt->op, want, freed,
                 kvs_kv_pool_free_count(e->pool) - free0);
    }

    if (gone > ev0 || ev1 != ev0 - gone) {
        fail_msg("op %lu: evict(%u): evictable %u before, %u after, %u "
                 "blocks left the tree", (unsigned long) rt->op, want, ev0,
                 ev1, gone);
    }

    if (freed < want && ev1 != 0) {
        fail_msg("op %lu: evict(%u) freed %u and stopped with %u evictable",
                 (unsigned long) rt->op, want, freed, ev1);
    }

    if (st1.evicted_blocks - st0.evicted_blocks != gone) {
        fail_msg("op %lu: evicted_blocks grew by %lu, %u left the tree",
                 (unsigned long) rt->op,
                 (unsigned long) (st1.evicted_blocks - st0.evicted_blocks),
                 gone);
    }

    rt->evicted += gone;
    rt_check(rt, 1);
}


static kvs_radix_ns_t *
rt_ns_get(rt_t *rt, int k)
{
    rt->holds[k]++;
    return ns_get(&rt->e, &r_keys[k]);
}


static void
rt_ns_put(rt_t *rt, int k, kvs_radix_ns_t *ns)
{
    assert_true(rt->holds[k] > 0);
    rt->holds[k]--;
    kvs_radix_ns_put(rt->e.r, ns);
}


/* Grows a live sequence to n tokens of its plan, evicting first when the
 * pool is short; KVS_KV_EFULL when it still is. */
static int
rt_grow(rt_t *rt, rseq_t *q, uint32_t n)
{
    uint32_t  need, nfree;
    int       rc;

    need = seq_need(&rt->e, &q->s, n);
    nfree = kvs_kv_pool_free_count(rt->e.pool);

    if (need > nfree) {
        rt_evict(rt, need - nfree);
        need = seq_need(&rt->e, &q->s, n);
        if (need > kvs_kv_pool_free_count(rt->e.pool)) {
            rt->skips++;
            return KVS_KV_EFULL;
        }
    }

    rc = seq_grow(&rt->e, &q->s, q->plan, n, &rt->cows);
    assert_int_equal(rc, KVS_OK);

    return rc;
}


static void
rt_lock_add(rt_t *rt, rseq_t *q, kvs_radix_node_t *node,
    const uint32_t *blocks, uint32_t n)
{
    assert_true(q->n_locks < R_LOCKS);
    q->lock[q->n_locks] = node;
    memcpy(q->held[q->n_locks], blocks, n * sizeof(uint32_t));
    q->n_held[q->n_locks] = n;
    q->n_locks++;
}


/* Drops the sequence: its locks, its namespace hold, its blocks. */
static void
rt_end(rt_t *rt, rseq_t *q)
{
    uint32_t  i;

    for (i = 0; i < q->n_locks; i++) {
        kvs_radix_unlock(rt->e.r, q->lock[i]);
    }
    q->n_locks = 0;
    rt_ns_put(rt, q->s.key, q->ns);
    seq_end(&rt->e, &q->s);
    q->live = 0;
}


/*
 * Why a match stopped, against the oracle: inside a block only on a
 * divergence; at a block boundary with a whole block left to compare,
 * EVICTED only for a prefix this key once cached, and otherwise the
 * first of EPOCH, ADAPTER, SCOPE that another key's cached copy of the
 * next block shows, EMPTY when there is none.
 */
static void
rt_verify_miss(rt_t *rt, int key, const int32_t *tok, uint32_t limit,
    const kvs_radix_match_t *m)
{
    uint64_t          h[MAX_BLK + 1];
    uint32_t          n, w, b;
    kvs_radix_miss_t  why, o;

    n = m->n_tokens;
    w = n / rt->bt;

    if (n == limit || m->miss == KVS_RADIX_MISS_DIVERGED) {
        return;
    }

    if (n % rt->bt != 0) {
        fail_msg("op %lu (%s): stopped inside a block at %u with miss %s",
                 (unsigned long) rt->op, rt->op_name, n,
                 kvs_radix_miss_name(m->miss));
    }

    if (limit - n < rt->bt) {
        if (m->miss != KVS_RADIX_MISS_EMPTY) {
            fail_msg("op %lu (%s): under a block left at %u, miss %s",
                     (unsigned long) rt->op, rt->op_name, n,
                     kvs_radix_miss_name(m->miss));
        }
        return;
    }

    rt_chain(rt, tok, w + 1, h);

    if (m->miss == KVS_RADIX_MISS_EVICTED) {
        if (!rt_ever(rt, key, h[w + 1], 0)
            && rt->n_ever < R_EVER / 4 * 3)
        {
            fail_msg("op %lu (%s): miss evicted at %u under key %d, which "
                     "never cached that block", (unsigned long) rt->op,
                     rt->op_name, n, key);
        }
        return;
    }

    why = KVS_RADIX_MISS_EMPTY;
    for (b = 0; b < rt->nb; b++) {
        if (rt->tree[b] && rt->info[b].hash == h[w + 1]
            && rt->info[b].pos == w && rt->info[b].key != key)
        {
            o = rt_why(rt->info[b].key, key);
            why = why == KVS_RADIX_MISS_EMPTY || o < why ? o : why;
        }
    }

    if (m->miss != why) {
        fail_msg("op %lu (%s): miss %s at %u under key %d; the other keys' "
                 "cached blocks say %s", (unsigned long) rt->op,
                 rt->op_name, kvs_radix_miss_name(m->miss), n, key,
                 kvs_radix_miss_name(why));
    }
}


/* A match checked against the oracle: exactly the longest cached prefix,
 * from blocks in the tree, written under the same key. */
static void
rt_verify(rt_t *rt, int key, const int32_t *tok, uint32_t limit,
    const kvs_radix_match_t *m, const uint32_t *got)
{
    uint32_t  i, want, whole;

    rt_scan(rt);

    for (i = 0; i < m->n_blocks; i++) {
        if (!rt->tree[got[i]]) {
            fail_msg("op %lu (%s): match returned block %u, not in the "
                     "tree", (unsigned long) rt->op, rt->op_name, got[i]);
        }
    }

    want = rt_expect(rt, key, tok, limit, &whole);
    if (m->n_tokens != want) {
        fail_msg("op %lu (%s): match under key %d, limit %u: reused %u "
                 "tokens, the longest cached prefix is %u (%u in whole "
                 "blocks), miss %s", (unsigned long) rt->op, rt->op_name,
                 key, limit, m->n_tokens, want, whole,
                 kvs_radix_miss_name(m->miss));
    }

    rt_verify_miss(rt, key, tok, limit, m);
}


static void
rt_match(rt_t *rt, rseq_t *q, uint32_t limit, int lock, uint32_t *got,
    kvs_radix_match_t *m)
{
    do_match(&rt->e, q->ns, q->plan, limit, lock, rt->now, q->s.key, m, got);
    rt_verify(rt, q->s.key, q->plan, limit, m, got);

    rt->n_miss[m->miss]++;
    rt->query_tokens += limit;
    rt->hit_tokens += m->n_tokens;
    rt->partial_hits += m->n_tokens % rt->bt != 0;
}


static void
rt_start(rt_t *rt, rseq_t *q)
{
    kvs_radix_match_t   m;
    uint32_t            got[MAX_BLK], p, g, i, c;
    int                 k, lock, follow;

    memset(q, 0, sizeof(rseq_t));
    k = rnd(rt, 3) != 0 ? 0 : (int) rnd(rt, R_KEYS);
    c = rnd(rt, R_CONV);
    p = 1 + rnd(rt, R_CONV_LEN - 1);
    g = rnd(rt, 48);
    follow = rnd(rt, 4) != 0;

    /* a prompt from a conversation, sometimes edited; a reply that either
     * continues the conversation (the next turn hits it) or not */
    q->plan_len = p + g < MAX_TOK ? p + g : MAX_TOK;
    for (i = 0; i < q->plan_len; i++) {
        q->plan[i] = i < p || (follow && i < R_CONV_LEN)
                     ? rt->conv[c][i] : (int32_t) rnd(rt, R_VOCAB);
    }
    if (rnd(rt, 4) == 0) {
        i = rnd(rt, p);
        q->plan[i] = (q->plan[i] + 1 + (int32_t) rnd(rt, R_VOCAB - 1))
                     % R_VOCAB;
    }

    q->ns = rt_ns_get(rt, k);
    q->live = 1;
    q->s.key = k;

    lock = rnd(rt, 4) != 0;
    rt_match(rt, q, p - 1, lock, got, &m);

    seq_adopt(&rt->e, &q->s, k, q->plan, got, m.n_tokens);
    if (lock && m.node != NULL) {
        rt_lock_add(rt, q, m.node, got, m.n_blocks);
    }
    rt_check(rt, 0);

    /* the prompt's prefill */
    if (rt_grow(rt, q, p) != KVS_OK) {
        rt_end(rt, q);
    }
}


static void
rt_insert(rt_t *rt, rseq_t *q, int lock)
{
    kvs_radix_match_t   m;
    kvs_radix_stats_t   st0, st1;
    kvs_radix_node_t   *node;
    uint64_t            h[MAX_BLK + 1];
    uint32_t            got[MAX_BLK], n, w, i, b, first;
    rblk_t             *in;
    uint8_t             want[MAX_BLK][KVS_RADIX_NAME_LEN];

    n = q->s.t.n_tokens;
    w = n / rt->bt;
    rt_chain(rt, q->s.tok, w, h);

    for (i = 0; i < w; i++) {
        test_name(&r_keys[q->s.key], i == 0 ? NULL : want[i - 1],
                  q->s.tok + (size_t) i * rt->bt, rt->bt, want[i]);
    }

    /* a table's block already in the tree caches the same prefix */
    rt_scan(rt);
    for (i = 0; i < w; i++) {
        b = q->s.t.blocks[i];
        in = &rt->info[b];
        if (rt->tree[b] && (in->key != q->s.key || in->pos != i
                            || in->hash != h[i + 1]))
        {
            fail_msg("op %lu: block %u at index %u of a key %d table is in "
                     "the tree as index %u of key %d",
                     (unsigned long) rt->op, b, i, q->s.key, in->pos,
                     in->key);
        }
    }

    st0 = stats(&rt->e);
    rt->n_added = 0;
    node = do_insert(&rt->e, q->ns, &q->s, n, lock, rt->now);
    st1 = stats(&rt->e);
    assert_true(st1.blocks - st0.blocks <= w);
    rt->inserts++;
    rt->splits += st1.nodes >= st0.nodes + 2;

    /* the blocks that joined are the prefix's last ones, named by the
     * hook in order, once each */
    first = (uint32_t) (w - (st1.blocks - st0.blocks));
    if (rt->n_added != w - first
        || (rt->n_added > 0
            && memcmp(rt->added, want[first],
                      (size_t) rt->n_added * KVS_RADIX_NAME_LEN) != 0))
    {
        fail_msg("op %lu: insert of %u blocks (%u new): %u names added, or "
                 "not the blocks' own", (unsigned long) rt->op, w,
                 w - first, rt->n_added);
    }
    rt->names_added += rt->n_added;

    /* record the blocks that joined */
    for (i = 0; i < w; i++) {
        b = q->s.t.blocks[i];
        if (!rt->tree[b] && ref(&rt->e, b) == rt->refs[b] + 1) {
            if (i < first) {
                fail_msg("op %lu: block %u joined at index %u, before the "
                         "new ones (%u..)", (unsigned long) rt->op, b, i,
                         first);
            }
            memcpy(rt->iname[b], want[i], KVS_RADIX_NAME_LEN);
            memset(rt->iparent[b], 0, KVS_RADIX_NAME_LEN);
            if (i > 0) {
                memcpy(rt->iparent[b], want[i - 1], KVS_RADIX_NAME_LEN);
            }
            rt->info[b].hash = h[i + 1];
            rt->info[b].parent = h[i];
            rt->info[b].pos = i;
            rt->info[b].key = q->s.key;
            rt->info[b].stamp = rt->op + 1;
            (void) rt_ever(rt, q->s.key, h[i + 1], 1);
        }
    }

    /* what was inserted is all there */
    do_match(&rt->e, q->ns, q->s.tok, n, 0, rt->now, q->s.key, &m, got);
    rt_verify(rt, q->s.key, q->s.tok, n, &m, got);
    if (m.n_tokens < w * rt->bt) {
        fail_msg("op %lu: inserted %u tokens, a match then reuses %u",
                 (unsigned long) rt->op, n, m.n_tokens);
    }

    if (lock && node != NULL) {
        rt_lock_add(rt, q, node, got, w);
    }
}


static void
rt_step(rt_t *rt)
{
    rseq_t             *q, *src;
    kvs_radix_ns_t     *ns;
    kvs_radix_match_t   m;
    kvs_err_t           err;
    rpin_t             *pr;
    uint64_t            ttl, released;
    uint32_t            i, j, n, pinned, op, whole;
    int                 k, created;

    op = rnd(rt, 1000);
    i = rnd(rt, R_SEQS);
    q = &rt->seq[i];

    if (op < 200) {
        rt->op_name = "start";
        if (!q->live) {
            rt_start(rt, q);
        }

    } else if (op < 450) {
        rt->op_name = "grow";
        if (q->live && q->s.t.n_tokens < q->plan_len) {
            n = q->s.t.n_tokens + 1 + rnd(rt, 8);
            (void) rt_grow(rt, q, n < q->plan_len ? n : q->plan_len);
        }

    } else if (op < 500) {
        rt->op_name = "fork";
        src = &rt->seq[rnd(rt, R_SEQS)];
        if (!q->live && src->live && src != q && src->s.t.n_tokens > 0) {
            memset(q, 0, sizeof(rseq_t));
            q->ns = rt_ns_get(rt, src->s.key);
            assert_ptr_equal(q->ns, src->ns);
            q->live = 1;
            q->s.key = src->s.key;
            if (kvs_kv_table_fork(&q->s.t, &src->s.t, rt->e.pool, &err)
                != KVS_OK)
            {
                fail_msg("fork: %s", err.msg);
            }
            memcpy(q->s.tok, src->s.tok,
                   src->s.t.n_tokens * sizeof(int32_t));

            /* another choice of the same request: same prefix, own reply */
            n = src->s.t.n_tokens;
            memcpy(q->plan, src->s.tok, n * sizeof(int32_t));
            q->plan_len = n + rnd(rt, MAX_TOK - n);
            for (j = n; j < q->plan_len; j++) {
                q->plan[j] = (int32_t) rnd(rt, R_VOCAB);
            }
            if (src->n_locks > 0) {
                kvs_radix_lock(rt->e.r, src->lock[0]);
                rt_lock_add(rt, q, src->lock[0], src->held[0],
                            src->n_held[0]);
            }
            rt->forks++;
        }

    } else if (op < 650) {
        rt->op_name = "finish";
        if (q->live) {
            rt_insert(rt, q, rnd(rt, 2) && q->n_locks < R_LOCKS);
            rt_check(rt, 0);
            if (rnd(rt, 32) == 0) {
                /* the locks hold through a flush */
                rt_evict(rt, ALL);
            }
            rt_end(rt, q);
        }

    } else if (op < 690) {
        rt->op_name = "insert midway";
        if (q->live) {
            rt_insert(rt, q, q->n_locks < R_LOCKS);
        }

    } else if (op < 730) {
        rt->op_name = "cancel";
        if (q->live) {
            rt_end(rt, q);
        }

    } else if (op < 810) {
        rt->op_name = "pin";
        k = rnd(rt, 2) != 0 ? 0 : (int) rnd(rt, R_KEYS);
        ns = rt_ns_get(rt, k);
        n = 1 + rnd(rt, R_PIN_MAX * rt->bt);
        j = rnd(rt, R_CONV);
        ttl = rnd(rt, 3) == 0 ? 100 : rnd(rt, 2) ? 1000 : 10000;
        released = stats(&rt->e).released_pins;
        pinned = do_pin(&rt->e, ns, rt->conv[j], n, ttl, rt->now, &created);
        rt->pins += created;
        rt->rel[k] += stats(&rt->e).released_pins != released;

        /* it pinned exactly the cached whole blocks of the tokens */
        rt_scan(rt);
        (void) rt_expect(rt, k, rt->conv[j], n, &whole);
        if (pinned != whole) {
            fail_msg("op %lu: pin of %u tokens under key %d pinned %u, %u "
                     "are cached in whole blocks", (unsigned long) rt->op,
                     n, k, pinned, whole);
        }
        if (pinned > 0) {
            pr = &rt->pinrec[rt->n_pinrec++ % R_PINREC];
            do_match(&rt->e, ns, rt->conv[j], pinned, 0, rt->now, k, &m,
                     pr->blocks);
            assert_int_equal(m.n_tokens, pinned);
            pr->key = k;
            pr->until = rt->now + ttl;
            pr->rel = rt->rel[k];
            pr->n = m.n_blocks;
        }
        rt_ns_put(rt, k, ns);

    } else if (op < 900) {
        rt->op_name = "time";
        rt->now += rnd(rt, 300);
        kvs_radix_expire(rt->e.r, rt->now);

    } else if (op < 940) {
        rt->op_name = "evict";
        rt_evict(rt, rnd(rt, 16));

    } else if (op < 945) {
        rt->op_name = "evict all";
        rt_evict(rt, ALL);
        assert_int_equal(kvs_radix_evictable(rt->e.r), 0);

    } else {
        rt->op_name = "namespace";
        k = (int) rnd(rt, R_KEYS);
        ns = rt_ns_get(rt, k);
        rt_check(rt, 0);
        rt_ns_put(rt, k, ns);
    }

    rt_check(rt, 0);
}


static void
random_run(uint32_t bt, uint64_t seed, uint64_t n_ops, int coverage)
{
    rt_t               *rt;
    kvs_radix_stats_t   st;
    kvs_radix_hooks_t   hooks;
    uint32_t            i, j;

    rt = calloc(1, sizeof(rt_t));
    assert_non_null(rt);
    rt->bt = bt;
    rt->nb = R_TOKENS / bt;
    for (rt->mask = 1; rt->mask < 2 * rt->nb; rt->mask <<= 1) {
        /* void */
    }
    rt->refs = calloc(rt->nb, sizeof(uint32_t));
    rt->tree = calloc(rt->nb, 1);
    rt->was = calloc(rt->nb, 1);
    rt->seen = calloc(rt->nb, 1);
    rt->info = calloc(rt->nb, sizeof(rblk_t));
    rt->set = calloc(rt->mask, sizeof(uint32_t));
    rt->mask--;
    rt->ever = calloc(R_EVER, sizeof(rblk_t));
    assert_non_null(rt->ever);
    rt->iname = calloc(rt->nb, KVS_RADIX_NAME_LEN);
    rt->iparent = calloc(rt->nb, KVS_RADIX_NAME_LEN);
    rt->evl = calloc(rt->nb, KVS_RADIX_NAME_LEN);
    rt->ord = calloc(rt->nb, sizeof(uint32_t));
    assert_true(rt->iname != NULL && rt->iparent != NULL && rt->evl != NULL
                && rt->ord != NULL);
    assert_true(rt->refs != NULL && rt->tree != NULL && rt->was != NULL
                && rt->seen != NULL && rt->info != NULL && rt->set != NULL);
    rt->rng = seed;
    rt->now = 1000;
    rt->op_name = "init";

    env_init(&rt->e, rt->nb, bt, R_PIN_MAX);

    hooks.added = rt_hook_added;
    hooks.evicted = rt_hook_evicted;
    hooks.arg = rt;
    kvs_radix_set_hooks(rt->e.r, &hooks);
    kvs_radix_set_spill(rt->e.r, rt_hook_spill, rt);

    /* a small vocabulary, so that branches share first tokens */
    for (i = 0; i < R_CONV; i++) {
        for (j = 0; j < R_CONV_LEN; j++) {
            rt->conv[i][j] = (int32_t) rnd(rt, R_VOCAB);
        }
    }

    for (rt->op = 0; rt->op < n_ops; rt->op++) {
        rt_step(rt);
    }

    /* wind down: pins expire, sequences end, everything is evictable */
    rt->now += 100000000;
    kvs_radix_expire(rt->e.r, rt->now);
    st = stats(&rt->e);
    assert_int_equal(st.pins, 0);
    assert_int_equal(st.pinned_blocks, 0);
    rt->op_name = "end";
    for (i = 0; i < R_SEQS; i++) {
        if (rt->seq[i].live) {
            rt_end(rt, &rt->seq[i]);
        }
    }
    rt_evict(rt, ALL);
    st = stats(&rt->e);
    assert_int_equal(st.blocks, 0);
    assert_true(st.evicted_blocks > 0);
    assert_true(st.spilled_blocks == st.evicted_blocks);
    assert_true(rt->n_spilled == st.evicted_blocks);
    assert_int_equal(st.namespaces, 0);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(kvs_kv_pool_free_count(rt->e.pool), rt->nb);

    /* every name added was evicted once (the tree is empty) */
    assert_int_equal(kvs_radix_list_names(rt->e.r, rt_list_one, rt), 0);
    assert_true(rt->names_added > 0);
    assert_int_equal(rt->names_added, rt->names_evicted);

    print_message("radix random: %lu index names added and evicted\n",
                  (unsigned long) rt->names_added);
    print_message("radix random: bt %u, seed %#lx, %lu ops, %lu/%lu tokens "
                  "hit (%lu ending in a block), misses none %lu empty %lu "
                  "evicted %lu epoch %lu adapter %lu scope %lu diverged %lu; "
                  "%lu cows, %lu forks, %lu inserts, %lu splits, %lu "
                  "evicted, %lu skips, %lu pins, %lu expired, %lu "
                  "released\n", bt, (unsigned long) seed,
                  (unsigned long) n_ops, (unsigned long) rt->hit_tokens,
                  (unsigned long) rt->query_tokens,
                  (unsigned long) rt->partial_hits,
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_NONE],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_EMPTY],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_EVICTED],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_EPOCH],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_ADAPTER],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_SCOPE],
                  (unsigned long) rt->n_miss[KVS_RADIX_MISS_DIVERGED],
                  (unsigned long) rt->cows, (unsigned long) rt->forks,
                  (unsigned long) rt->inserts, (unsigned long) rt->splits,
                  (unsigned long) rt->evicted, (unsigned long) rt->skips,
                  (unsigned long) rt->pins,
                  (unsigned long) st.expired_pins,
                  (unsigned long) st.released_pins);

    /* the run must have gone through every path it is meant to test */
    if (coverage && n_ops >= 100000) {
        assert_true(rt->hit_tokens * 8 > rt->query_tokens);
        assert_true(rt->partial_hits > 100);
        assert_true(rt->cows > 100);
        assert_true(rt->splits > 100);
        assert_true(rt->skips > 10);
        assert_true(rt->forks > 100);
        assert_true(rt->n_miss[KVS_RADIX_MISS_EVICTED] > 10);
        assert_true(rt->n_miss[KVS_RADIX_MISS_EPOCH] > 10);
        assert_true(rt->n_miss[KVS_RADIX_MISS_ADAPTER] > 10);
        assert_true(rt->n_miss[KVS_RADIX_MISS_SCOPE] > 10);
        assert_true(rt->n_miss[KVS_RADIX_MISS_DIVERGED] > 10);
        assert_true(st.expired_pins > 10);
        assert_true(st.released_pins > 10);
    }

    env_done(&rt->e);
    free(rt->refs);
    free(rt->tree);
    free(rt->was);
    free(rt->seen);
    free(rt->info);
    free(rt->set);
    free(rt->ever);
    free(rt->iname);
    free(rt->iparent);
    free(rt->evl);
    free(rt->ord);
    free(rt);
}


static void
test_random(void **state)
{
    const char  *s;
    uint64_t     seed, n_ops;

    s = getenv("KVS_SEED");
    seed = s != NULL ? strtoull(s, NULL, 0) : 0x5eed6;
    s = getenv("KVS_RADIX_OPS");
    n_ops = s != NULL ? strtoull(s, NULL, 0) : 100000;

    print_message("radix random: seed %#lx (set KVS_SEED to replay, "
                  "KVS_RADIX_OPS for the length)\n", (unsigned long) seed);

    /* the main run, then whole-token blocks and an odd block size */
    random_run(BT, seed, n_ops, 1);
    random_run(1, seed + 1, n_ops / 5, 0);
    random_run(7, seed + 2, n_ops / 5, 0);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_random),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}