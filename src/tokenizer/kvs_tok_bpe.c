/*
 * kvs_tok_bpe: rank-driven byte-level BPE of one pre-tokenized piece.
 *
 * A piece (raw bytes; token texts are raw bytes too, the GPT-2 byte to
 * unicode mapping having been undone at load) starts as one symbol per
 * byte, v->byte_token[b].  The adjacent pair with the lowest merge rank
 * (kvs_vocab_merge) is merged, the leftmost on a tie, until no adjacent
 * pair has a merge.  With v->ignore_merges a piece that is itself a token
 * is emitted whole first (llama-bpe, tiktoken).
 *
 * Cost, n = piece bytes, m <= n - 1 merges:
 *   n <= KVS_BPE_SMALL  arrays and a linear scan for the best pair per
 *                       merge: O(n * m), at most O(64^2) per piece, which
 *                       beats a heap at these sizes;
 *   longer              a binary heap of candidate pairs over a doubly
 *                       linked list of symbols, stale entries skipped
 *                       when popped (each merge pushes at most 2, so the
 *                       heap holds < 3n): O(n log n) time, O(n) space.
 * Both make the same choices: the heap key is (rank, start byte of the
 * left symbol).
 *
 * A small per-context cache maps recent short pieces to their ids: a
 * fixed table, direct mapped, so it never grows (256 KiB).  It holds the
 * results of one vocabulary at a time, known by its serial (unique per
 * load, so a vocabulary allocated where a freed one was is never taken
 * for it); moving to another vocabulary empties it in O(1).  On text with
 * repeated words it saves about 10%.
 *
 * Scratch lives in ctx->bpe, grows with the longest piece seen and is
 * reused.
 */

#include <stdlib.h>
#include <string.h>

#include "kvs_tok_impl.h"


#define KVS_BPE_SMALL      64         /* bytes: array path up to this */
#define KVS_BPE_NONE       UINT32_MAX /* rank of a pair that never merges */
#define KVS_BPE_DEAD       (-1)       /* id of a symbol merged away */
#define KVS_BPE_NOTOKEN    (-2)       /* id of a byte with no token */

#define KVS_BPE_CACHE_BITS  12
#define KVS_BPE_CACHE_SIZE  (1u << KVS_BPE_CACHE_BITS)
#define KVS_BPE_CACHE_TEXT  24        /* longest cached piece, bytes */
#define KVS_BPE_CACHE_IDS   7         /* most ids a cached piece has */


/* 64 bytes: one cache line. */
typedef struct {
    uint64_t  text[3];                /* the piece, zero-padded */
    uint32_t  gen;                    /* valid if == the scratch's gen */
    uint8_t   len;                    /* piece bytes */
    uint8_t   n;                      /* ids */
    int32_t   ids[KVS_BPE_CACHE_IDS];
} kvs_bpe_cache_ent_t;


/* A candidate merge of node l with the node after it. */
typedef struct {
    uint64_t  key;                    /* rank << 32 | l */
    int32_t   lid;                    /* ids when pushed: the candidate is */
    int32_t   rid;                    /* stale once either has changed */
} kvs_bpe_cand_t;


/* ctx->bpe */
typedef struct {
    /* long pieces: node i is the symbol starting at byte i */
    int32_t              *id;         /* [cap] token id, or DEAD/NOTOKEN */
    uint32_t             *next;       /* [cap] next live node, n at end */
    uint32_t             *prev;       /* [cap] prev live node, UINT32_MAX */
    kvs_bpe_cand_t       *heap;       /* [3 * cap] */
    size_t                cap;

    /* cache */
    kvs_bpe_cache_ent_t  *cache;      /* [KVS_BPE_CACHE_SIZE] */
    uint32_t              gen;        /* bumped when the vocabulary changes */
    uint64_t              v_serial;   /* the vocabulary the cache is for */
} kvs_bpe_scratch_t;


static int kvs_bpe_small(const kvs_vocab_t *v, const uint8_t *p, size_t len,
    int32_t *ids, size_t *nids);
static int kvs_bpe_large(const kvs_vocab_t *v, kvs_bpe_scratch_t *s,
    const uint8_t *p, size_t len, kvs_ids_t *out, kvs_err_t *err);


void
kvs_tok_bpe_scratch_free(kvs_tok_ctx_t *ctx)
{
    kvs_bpe_scratch_t  *s;

    s = ctx->bpe;
    if (s == NULL) {
        return;
    }

    free(s->id);
    free(s->next);
    free(s->prev);
    free(s->heap);
    free(s->cache);
    free(s);
    ctx->bpe = NULL;
}


size_t
kvs_tok_bpe_scratch_bytes(const kvs_tok_ctx_t *ctx)
{
    const kvs_bpe_scratch_t  *s;

    s = ctx->bpe;
    if (s == NULL) {
        return 0;
    }

    return sizeof(*s) + KVS_BPE_CACHE_SIZE * sizeof(kvs_bpe_cache_ent_t)
           + s->cap * (sizeof(int32_t) + 2 * sizeof(uint32_t)
                       + 3 * sizeof(kvs_bpe_cand_t));
}


static kvs_bpe_scratch_t *
kvs_bpe_scratch(kvs_tok_ctx_t *ctx)
{
    kvs_bpe_scratch_t  *s;

    if (ctx->bpe != NULL) {
        return ctx->bpe;
    }

    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NULL;
    }

    /* gen starts at 1 so that calloc()ed entries (gen 0) are empty. */
    s->cache = calloc(KVS_BPE_CACHE_SIZE, sizeof(kvs_bpe_cache_ent_t));
    if (s->cache == NULL) {
        free(s);
        return NULL;
    }

    s->gen = 1;
    ctx->bpe = s;

    return s;
}


/* Points the cache at v, dropping (in O(1)) what it held for another. */
static void
kvs_bpe_cache_bind(kvs_bpe_scratch_t *s, const kvs_vocab_t *v)
{
    if (s->v_serial == v->serial) {
        return;
    }

    s->gen++;
    if (s->gen == 0) {
        memset(s->cache, 0, KVS_BPE_CACHE_SIZE * sizeof(kvs_bpe_cache_ent_t));
        s->gen = 1;
    }

    s->v_serial = v->serial;
}


static uint32_t
kvs_bpe_hash(const uint64_t *w, size_t len)
{
    uint64_t  h;

    h = (w[0] ^ len) * 0x9E3779B97F4A7C15ULL;
    h = (h ^ w[1] ^ (h >> 31)) * 0xFF51AFD7ED558CCDULL;
    h = (h ^ w[2] ^ (h >> 29)) * 0xC4CEB9FE1A85EC53ULL;

    return (uint32_t) (h >> 40) & (KVS_BPE_CACHE_SIZE - 1);
}


/*
 * A byte without a token (Falcon's vocabulary lacks several controls)
 * becomes unk, or is dropped when there is no unk either, as Hugging
 * Face's BPE and llama.cpp do.  The caller reserved the room.
 */
static inline void
kvs_bpe_emit(const kvs_vocab_t *v, kvs_ids_t *out, int32_t id)
{
    if (id == KVS_BPE_NOTOKEN) {
        if (v->unk < 0) {
            return;
        }
        id = v->unk;
    }

    out->ids[out->n++] = id;
}


int
kvs_tok_bpe_piece(const kvs_vocab_t *v, kvs_tok_ctx_t *ctx,
    const char *piece, size_t len, kvs_ids_t *out, kvs_err_t *err)
{
    int32_t               id, ids[KVS_BPE_SMALL];
    size_t                i, n, n0;
    uint64_t              key[3];
    const uint8_t        *p;
    kvs_bpe_scratch_t    *s;
    kvs_bpe_cache_ent_t  *e;

    p = (const uint8_t *) piece;

    if (len == 0) {
        return KVS_OK;
    }

    if (v->ignore_merges || len == 1) {
        id = len == 1 ? v->byte_token[p[0]] : kvs_vocab_find(v, p, len);
        if (id >= 0) {
            return kvs_ids_push(out, id) == KVS_OK
                   ? KVS_OK
                   : kvs_err_set(err, KVS_ENOMEM, "bpe: out of memory");
        }
    }

    s = kvs_bpe_scratch(ctx);
    if (s == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "bpe: out of memory");
    }

    kvs_bpe_cache_bind(s, v);

    if (len > KVS_BPE_SMALL) {
        return kvs_bpe_large(v, s, p, len, out, err);
    }

    e = NULL;
    if (len <= KVS_BPE_CACHE_TEXT) {
        key[0] = key[1] = key[2] = 0;
        memcpy(key, p, len);
        e = &s->cache[kvs_bpe_hash(key, len)];

        if (e->gen == s->gen && e->len == len && e->text[0] == key[0]
            && e->text[1] == key[1] && e->text[2] == key[2])
        {
            if (kvs_ids_reserve(out, e->n) != KVS_OK) {
                return kvs_err_set(err, KVS_ENOMEM, "bpe: out of memory");
            }

            /* a cached empty piece: out->ids may still be NULL */
            if (e->n > 0) {
                memcpy(out->ids + out->n, e->ids, e->n * sizeof(int32_t));
                out->n += e->n;
            }

            return KVS_OK;
        }
    }

    kvs_bpe_small(v, p, len, ids, &n);

    if (kvs_ids_reserve(out, n) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "bpe: out of memory");
    }

    n0 = out->n;

    for (i = 0; i < n; i++) {
        kvs_bpe_emit(v, out, ids[i]);
    }

    n = out->n - n0;

    if (e != NULL && n <= KVS_BPE_CACHE_IDS) {
        e->gen = s->gen;
        e->len = (uint8_t) len;
        e->n = (uint8_t) n;
        memcpy(e->text, key, sizeof(key));
        memcpy(e->ids, out->ids + out->n - n, n * sizeof(int32_t));
    }

    return KVS_OK;
}


static uint32_t
kvs_bpe_rank(const kvs_vocab_t *v, int32_t l, int32_t r, int32_t *merged)
{
    int64_t  rank;

    if (l < 0 || r < 0) {
        return KVS_BPE_NONE;
    }

    rank = kvs_vocab_merge(v, l, r, merged);

    return rank < 0 || rank >= KVS_BPE_NONE ? KVS_BPE_NONE : (uint32_t) rank;
}


/* len <= KVS_BPE_SMALL.  rank[i] and merged[i] describe the pair
 * (ids[i], ids[i + 1]); a merge rewrites ids[i] and closes the gap. */
static int
kvs_bpe_small(const kvs_vocab_t *v, const uint8_t *p, size_t len,
    int32_t *ids, size_t *nids)
{
    int32_t   merged[KVS_BPE_SMALL];
    uint32_t  rank[KVS_BPE_SMALL], best;
    size_t    i, bi, n;

    n = len;
    for (i = 0; i < n; i++) {
        ids[i] = v->byte_token[p[i]];
        if (ids[i] < 0) {
            ids[i] = KVS_BPE_NOTOKEN;
        }
    }

    for (i = 0; i + 1 < n; i++) {
        rank[i] = kvs_bpe_rank(v, ids[i], ids[i + 1], &merged[i]);
    }

    while (n > 1) {
        best = KVS_BPE_NONE;
        bi = 0;
        for (i = 0; i + 1 < n; i++) {
            if (rank[i] < best) {
                best = rank[i];
                bi = i;
            }
        }

        if (best == KVS_BPE_NONE) {
            break;
        }

        ids[bi] = merged[bi];

        /* Symbol bi + 1 and pair bi + 1 go; pair bi is recomputed. */
        memmove(&ids[bi + 1], &ids[bi + 2], (n - bi - 2) * sizeof(int32_t));
        if (bi + 2 < n) {
            memmove(&rank[bi + 1], &rank[bi + 2],
                    (n - bi - 2) * sizeof(uint32_t));
            memmove(&merged[bi + 1], &merged[bi + 2],
                    (n - bi - 2) * sizeof(int32_t));
        }

        n--;

        if (bi > 0) {
            rank[bi - 1] = kvs_bpe_rank(v, ids[bi - 1], ids[bi],
                                        &merged[bi - 1]);
        }

        if (bi + 1 < n) {
            rank[bi] = kvs_bpe_rank(v, ids[bi], ids[bi + 1], &merged[bi]);
        }
    }

    *nids = n;

    return KVS_OK;
}


/* Binary min-heap on key. */

static void
kvs_bpe_heap_push(kvs_bpe_cand_t *h, size_t *n, kvs_bpe_cand_t c)
{
    size_t  i, up;

    i = (*n)++;
    while (i > 0) {
        up = (i - 1) / 2;
        if (h[up].key <= c.key) {
            break;
        }

        h[i] = h[up];
        i = up;
    }

    h[i] = c;
}


static kvs_bpe_cand_t
kvs_bpe_heap_pop(kvs_bpe_cand_t *h, size_t *n)
{
    size_t          i, c, m;
    kvs_bpe_cand_t  top, last;

    top = h[0];
    m = --(*n);
    last = h[m];
    i = 0;

    for ( ;; ) {
        c = 2 * i + 1;
        if (c >= m) {
            break;
        }

        if (c + 1 < m && h[c + 1].key < h[c].key) {
            c++;
        }

        if (last.key <= h[c].key) {
            break;
        }

        h[i] = h[c];
        i = c;
    }

    if (m > 0) {
        h[i] = last;
    }

    return top;
}


/* Pushes the candidate (l, next[l]) if that pair merges. */
static void
kvs_bpe_candidate(const kvs_vocab_t *v, kvs_bpe_scratch_t *s, size_t *nh,
    uint32_t l, uint32_t n)
{
    int32_t         merged;
    uint32_t        r, rank;
    kvs_bpe_cand_t  c;

    r = s->next[l];
    if (r == n) {
        return;
    }

    rank = kvs_bpe_rank(v, s->id[l], s->id[r], &merged);
    if (rank == KVS_BPE_NONE) {
        return;
    }

    c.key = (uint64_t) rank << 32 | l;
    c.lid = s->id[l];
    c.rid = s->id[r];
    kvs_bpe_heap_push(s->heap, nh, c);
}


static int
kvs_bpe_grow(kvs_bpe_scratch_t *s, size_t len)
{
    void    *p;
    size_t   cap;

    if (len <= s->cap) {
        return KVS_OK;
    }

    cap = s->cap ? s->cap : 256;
    while (cap < len) {
        cap *= 2;
    }

    /* Each array is replaced as soon as it is reallocated, so a failure
     * part way leaves some larger than cap, which is harmless. */
    p = realloc(s->id, cap * sizeof(int32_t));
    if (p == NULL) {
        return KVS_ENOMEM;
    }
    s->id = p;

    p = realloc(s->next, cap * sizeof(uint32_t));
    if (p == NULL) {
        return KVS_ENOMEM;
    }
    s->next = p;

    p = realloc(s->prev, cap * sizeof(uint32_t));
    if (p == NULL) {
        return KVS_ENOMEM;
    }
    s->prev = p;

    p = realloc(s->heap, 3 * cap * sizeof(kvs_bpe_cand_t));
    if (p == NULL) {
        return KVS_ENOMEM;
    }
    s->heap = p;

    s->cap = cap;

    return KVS_OK;
}


static int
kvs_bpe_large(const kvs_vocab_t *v, kvs_bpe_scratch_t *s, const uint8_t *p,
    size_t len, kvs_ids_t *out, kvs_err_t *err)
{
    int32_t         merged, id;
    size_t          nh, nout;
    uint32_t        i, n, l, r, rank;
    kvs_bpe_cand_t  c;

    if (len >= UINT32_MAX) {
        return kvs_err_set(err, KVS_EINVAL,
                           "bpe: a piece of %zu bytes is over the 4 GiB "
                           "limit", len);
    }

    if (kvs_bpe_grow(s, len) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM,
                           "bpe: out of memory for a piece of %zu bytes",
                           len);
    }

    n = (uint32_t) len;
    for (i = 0; i < n; i++) {
        id = v->byte_token[p[i]];
        s->id[i] = id < 0 ? KVS_BPE_NOTOKEN : id;
        s->next[i] = i + 1;
        s->prev[i] = i - 1;            /* node 0: UINT32_MAX */
    }

    nh = 0;
    for (i = 0; i + 1 < n; i++) {
        kvs_bpe_candidate(v, s, &nh, i, n);
    }

    nout = n;

    while (nh > 0) {
        c = kvs_bpe_heap_pop(s->heap, &nh);
        l = (uint32_t) c.key;

        if (s->id[l] != c.lid) {
            continue;
        }

        r = s->next[l];
        if (r == n || s->id[r] != c.rid) {
            continue;
        }

        rank = kvs_bpe_rank(v, c.lid, c.rid, &merged);
        if (rank == KVS_BPE_NONE) {
            continue;
        }

        /* Node l absorbs node r. */
        s->id[l] = merged;
        s->id[r] = KVS_BPE_DEAD;
        s->next[l] = s->next[r];
        if (s->next[r] != n) {
            s->prev[s->next[r]] = l;
        }

        nout--;

        if (s->prev[l] != UINT32_MAX) {
            kvs_bpe_candidate(v, s, &nh, s->prev[l], n);
        }

        kvs_bpe_candidate(v, s, &nh, l, n);
    }

    if (kvs_ids_reserve(out, nout) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "bpe: out of memory");
    }

    for (i = 0; i != n; i = s->next[i]) {
        kvs_bpe_emit(v, out, s->id[i]);
    }

    return KVS_OK;
}
