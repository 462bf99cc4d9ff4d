/*
 * kvs_radix_impl: the prefix cache's insides, shared by kvs_radix.c (tree,
 * namespaces, locks, eviction), kvs_radix_pin.c (pins and their expiry),
 * kvs_radix_names.c (block names for miss reasons) and kvs_radix_check.c.
 * Not for use outside src/kv.
 *
 * A node is "held" while lock > 0 or pins > 0; held_blocks counts the
 * blocks of held nodes, so the tree's blocks less held_blocks is what
 * eviction can take.  A split keeps the original node struct as the
 * lower half, so node pointers given out (locks, pins) stay valid and
 * keep meaning "the prefix that ends here".
 */

#ifndef KVS_RADIX_IMPL_H
#define KVS_RADIX_IMPL_H

#include "kvs_radix.h"

#define KVS_RADIX_SEED       0x6b76736572766531ULL   /* "kvserve1" */
#define KVS_RADIX_NS_BUCKETS 1024
#define KVS_RADIX_NONE_IDX   UINT32_MAX

typedef struct kvs_radix_pin_s  kvs_radix_pin_t;

struct kvs_radix_node_s {
    kvs_radix_node_t  *parent;        /* NULL: a namespace root */
    kvs_radix_node_t  *child;         /* first child */
    kvs_radix_node_t  *prev;          /* siblings */
    kvs_radix_node_t  *next;
    kvs_radix_ns_t    *ns;
    int32_t           *tokens;        /* [n_blocks * block_tokens] */
    uint32_t          *blocks;        /* [n_blocks] pool ids, one tree
                                         reference each */
    uint64_t          *chains;        /* [n_blocks] names of the blocks */
    uint8_t          (*inames)[KVS_RADIX_NAME_LEN];  /* [n_blocks] index
                                         names (hooks.added's), all zero:
                                         unnamed */
    uint32_t           n_blocks;      /* 0 only for a root */
    uint32_t           depth;         /* tokens before this edge */
    uint32_t           lock;          /* locks through this node */
    uint32_t           lock_here;     /* of those, ending at it */
    uint32_t           pins;          /* pins through this node */
    kvs_radix_pin_t   *pin;           /* the pin ending here, or NULL */
    uint64_t           used;          /* r->clock at the last use */
    uint32_t           heap_idx;      /* KVS_RADIX_NONE_IDX: not in it */
};

struct kvs_radix_ns_s {
    kvs_radix_node_t   root;
    uint64_t           epoch;
    uint32_t           adapter;
    uint64_t           scope_hash;    /* for block names only */
    uint64_t           key_hash;      /* of all three, for the table */
    size_t             scope_len;
    char               scope[KVS_RADIX_MAX_SCOPE];
    unsigned           holds;         /* kvs_radix_ns_get()s not put */
    uint32_t           pinned_blocks; /* blocks of nodes with pins > 0 */
    kvs_radix_pin_t   *pin_head;      /* least recently refreshed */
    kvs_radix_pin_t   *pin_tail;
    kvs_radix_ns_t    *hnext;         /* bucket chain */
};

struct kvs_radix_pin_s {
    kvs_radix_node_t  *node;          /* the pinned prefix ends here */
    uint64_t           until;         /* ms */
    uint64_t           ttl;           /* ms, the longest asked */
    kvs_radix_pin_t   *prev;          /* in the namespace's list */
    kvs_radix_pin_t   *next;
    kvs_radix_pin_t   *gprev;         /* in the tree's list */
    kvs_radix_pin_t   *gnext;
};

/* A block name: the chain hash of a block under one namespace key;
 * live counts the tree's blocks with that name, 0 marks an evicted
 * one (a ghost, kept until the ghost ring wraps). */
typedef struct {
    uint64_t  chain;
    uint64_t  epoch;
    uint64_t  scope_hash;
    uint32_t  adapter;
    uint32_t  live;
    uint8_t   used;                   /* slot taken */
} kvs_radix_name_t;

struct kvs_radix_s {
    kvs_kv_pool_t      *pool;         /* borrowed */
    uint32_t            bt;           /* tokens per block */
    uint32_t            pin_max;      /* pinned blocks per namespace */
    uint64_t            clock;        /* use counter, for LRU */
    uint64_t            n_blocks;     /* in the tree */
    uint64_t            held_blocks;
    uint64_t            n_nodes;
    uint64_t            n_ns;
    uint64_t            n_pins;
    uint64_t            evicted;
    uint64_t            expired;
    uint64_t            released;
    uint64_t            next_expiry;  /* no pin ends before; ms */

    kvs_radix_ns_t     *buckets[KVS_RADIX_NS_BUCKETS];

    kvs_radix_node_t  **heap;         /* [n_blocks of the pool]: min-heap
                                         of evictable leaves by used */
    uint32_t            heap_n;

    kvs_radix_pin_t    *pins;         /* every pin, unordered */

    kvs_radix_hooks_t   hooks;        /* the prefix index's; zero: none */

    kvs_radix_spill_pt  spill;        /* the disk tier's; NULL: none */
    void               *spill_arg;
    kvs_radix_node_t  **spill_path;   /* [spill_cap] scratch: a path's
                                         nodes, root's child first */
    uint32_t            spill_cap;
    uint64_t            spilled;
    uint64_t            spill_lost;
    const uint8_t      *spill_name;   /* the index name of the block
                                         being spilled, during the call;
                                         NULL: unnamed */

    kvs_radix_name_t   *names;        /* [names_cap], linear probing from
                                         the chain's home slot */
    uint32_t            names_cap;    /* a power of two */
    uint32_t            names_n;
    kvs_radix_name_t   *ghosts;       /* [ghosts_cap] ring of evicted
                                         names, oldest at ghosts_head */
    uint32_t            ghosts_cap;
    uint32_t            ghosts_head;
    uint32_t            ghosts_n;
};


/* kvs_radix.c */

/* kvs_radix_spill.c: reports node's blocks [from, n_blocks) to the
 * spill function (set), before they are dropped. */
void kvs_radix_spill_blocks(kvs_radix_t *r, kvs_radix_node_t *node,
    uint32_t from);

/* Re-derives whether node belongs in the heap and moves it in or out. */
void kvs_radix_update(kvs_radix_t *r, kvs_radix_node_t *node);

/* Adds d (+1 or -1) to the pins of node and its ancestors, keeping
 * held_blocks and the namespace's pinned_blocks. */
void kvs_radix_pins_add(kvs_radix_t *r, kvs_radix_node_t *node, int d);

/* Walks the whole blocks of tokens[0..nb * bt) that ns caches: returns
 * how many; *x is the last node passed whole, *c (when not NULL) the
 * node they end or diverge in, after its first *j blocks; *chain names
 * the last cached block. */
uint32_t kvs_radix_walk(const kvs_radix_t *r, kvs_radix_ns_t *ns,
    const int32_t *tokens, uint32_t nb, kvs_radix_node_t **x,
    kvs_radix_node_t **c, uint32_t *j, uint64_t *chain);

/* Splits node after k of its blocks (0 < k < n_blocks): a new node takes
 * the first k and becomes node's parent.  KVS_ENOMEM changes nothing. */
int kvs_radix_split(kvs_radix_t *r, kvs_radix_node_t *node, uint32_t k,
    kvs_radix_node_t **upper, kvs_err_t *err);

/* Frees ns if nothing holds it and it caches nothing. */
void kvs_radix_ns_gc(kvs_radix_t *r, kvs_radix_ns_t *ns);

/* The name of the block of tokens[0..bt) after the block named chain. */
uint64_t kvs_radix_chain(const kvs_radix_t *r, uint64_t chain,
    const int32_t *tokens);


/* kvs_radix_pin.c */

void kvs_radix_pin_release(kvs_radix_t *r, kvs_radix_pin_t *pin);

/* A hit on the pinned prefix at now: its time-to-live starts again, and
 * it becomes its namespace's most recently refreshed pin. */
void kvs_radix_pin_touch(kvs_radix_t *r, kvs_radix_pin_t *pin,
    uint64_t now);


/*
 * The node after x in a pre-order walk of ns's tree, without a stack:
 * down to the first child, else along to the next sibling of the
 * nearest ancestor that has one; NULL at the end.
 */
static inline const kvs_radix_node_t *
kvs_radix_preorder_next(const kvs_radix_ns_t *ns, const kvs_radix_node_t *x)
{
    if (x->child != NULL) {
        return x->child;
    }

    while (x != NULL && x->next == NULL) {
        x = x->parent;
        if (x == &ns->root) {
            return NULL;
        }
    }

    return x != NULL ? x->next : NULL;
}


/* kvs_radix_names.c */

int kvs_radix_names_init(kvs_radix_t *r, kvs_err_t *err);
void kvs_radix_names_free(kvs_radix_t *r);

/* Counts a block named chain under ns in (d = 1) or out (d = -1, it
 * was evicted: it becomes a ghost when no other is left). */
void kvs_radix_names_add(kvs_radix_t *r, const kvs_radix_ns_t *ns,
    uint64_t chain, int d);

/* Why a block named chain is not under ns: EVICTED, EPOCH, ADAPTER,
 * SCOPE, or EMPTY when nothing of that name is known. */
kvs_radix_miss_t kvs_radix_names_why(const kvs_radix_t *r,
    const kvs_radix_ns_t *ns, uint64_t chain);

#endif /* KVS_RADIX_IMPL_H */
