/*
 * kvs_tier: the prefix cache's disk tier, a bounded store of KV blocks
 * in one preallocated file.
 *
 * A block that the radix tree evicts from the pool may be kept here and
 * loaded back later instead of recomputing its prefill.  Each stored
 * block carries what decides whether it may be reused:
 *   - its namespace: weight epoch, adapter and cache scope (the radix
 *     tree's kvs_radix_key_t), stored whole and compared whole on read;
 *   - its path identity: a 16-byte chain name of every token from the
 *     namespace's root to the block's end (kvs_tier_path_id()), plus the
 *     block's own tokens, compared token by token on read;
 *   - a checksum (xxh3-64) over the slot's header, tokens and KV bytes:
 *     a flipped byte or a short read makes the read fail (KVS_EFORMAT),
 *     the slot is dropped and the caller recomputes the block.
 * The KV bytes are opaque: block_bytes comes from the caller (the pool's
 * size of one block, whatever the KV dtype).
 *
 * The file: a 4096-byte header (magic, version, geometry, the weight
 * epoch and a model tag, its own checksum) and n_slots slots of
 * slot_bytes each (a multiple of 4096, so that O_DIRECT works), all
 * allocated at open; the file never grows past the configured size.
 * Opening a file whose header matches (geometry, epoch, model) keeps
 * its blocks (slot headers are scanned, least recently written first
 * in the LRU); any mismatch or a short file discards them.
 *
 * Invariants:
 *   - every slot is free, being written, or ready; only ready slots are
 *     in the index and the LRU list, and a (namespace, path) pair names
 *     at most one ready slot;
 *   - a put that needs room reclaims the least recently used ready slot
 *     that no read holds; a slot being read is never overwritten;
 *   - file I/O is done without the lock: a slow disk delays only the
 *     thread that writes or reads, never a lookup (kvs_tier_has()).
 *
 * Threads: every call may come from any thread (one mutex guards the
 * index); each thread that reads or writes blocks brings its own
 * kvs_tier_io_t.  Library code: no nginx, no abort on bad input.
 */

#ifndef KVS_TIER_H
#define KVS_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_radix.h"

#define KVS_TIER_ID_LEN      16
#define KVS_TIER_ALIGN       4096       /* file header, slot alignment */
#define KVS_TIER_MAX_SLOTS   (1u << 28)

typedef struct {
    const char  *path;                /* the file (created when absent) */
    uint64_t     size;                /* bytes of file at most */
    uint64_t     block_bytes;         /* KV bytes of one block */
    uint32_t     block_tokens;        /* tokens per block */
    uint64_t     epoch;               /* weight epoch the file is kept for */
    uint64_t     model;               /* the caller's model tag */
    int          direct;              /* 1: O_DIRECT */
    uint32_t     write_delay_us;      /* tests only: a slow disk, slept
                                         before each slot write */
    uint32_t     read_delay_us;       /* tests only: and before each
                                         slot read */
} kvs_tier_conf_t;

typedef struct {
    uint64_t  slots;                  /* capacity */
    uint64_t  used;                   /* ready slots */
    uint64_t  slot_bytes;             /* bytes of file per block */
    uint64_t  puts;                   /* blocks written */
    uint64_t  put_dups;               /* already stored: not written */
    uint64_t  hits;                   /* blocks read back and verified */
    uint64_t  misses;                 /* gets of blocks not stored */
    uint64_t  corrupt;                /* checksum, header or short read */
    uint64_t  reclaimed;              /* ready slots overwritten (LRU) */
    uint64_t  bytes_written;
    uint64_t  bytes_read;
    uint64_t  write_ns;               /* time in pwrite() */
    uint64_t  read_ns;                /* time in pread() */
    uint64_t  kept;                   /* blocks kept from the file at open */
} kvs_tier_stats_t;

typedef struct kvs_tier_s     kvs_tier_t;
typedef struct kvs_tier_io_s  kvs_tier_io_t;


/*
 * Opens or creates conf->path with the file's whole size allocated.
 * KVS_EINVAL for a bad conf (no path, zero sizes), KVS_ERANGE when not
 * one slot fits in size, KVS_EIO for a file that cannot be opened,
 * sized or written (KVS_EUNSUPPORTED: O_DIRECT refused by the file
 * system), KVS_ENOMEM.  *discarded (may be NULL) tells why blocks found
 * in an existing file were not kept ("" when kept or new).  *out is
 * NULL on failure.
 */
int kvs_tier_open(kvs_tier_t **out, const kvs_tier_conf_t *conf,
    char *discarded, size_t discarded_len, kvs_err_t *err);

/* Closes the file (its blocks stay for the next open) and frees. */
void kvs_tier_close(kvs_tier_t *t);

/* Bytes of one slot in the file: header, tokens, KV bytes, aligned. */
uint64_t kvs_tier_slot_bytes(const kvs_tier_t *t);

/* The geometry the tier was opened with. */
uint64_t kvs_tier_block_bytes(const kvs_tier_t *t);
uint32_t kvs_tier_block_tokens(const kvs_tier_t *t);

/* A thread's aligned I/O buffer for this tier; *out NULL on failure. */
int kvs_tier_io_new(kvs_tier_t *t, kvs_tier_io_t **out, kvs_err_t *err);
void kvs_tier_io_free(kvs_tier_io_t *io);

/*
 * The path name of a block: prev is the name of the block before it
 * (NULL for a namespace's first block), tokens its block_tokens tokens.
 */
void kvs_tier_path_id(const uint8_t *prev, const int32_t *tokens,
    uint32_t n, uint8_t *id);

/*
 * Stores one block: tokens[block_tokens], data[block_bytes], and its
 * prefix index name (KVS_RADIX_NAME_LEN bytes; NULL: none), which a
 * later open hands back with the block (kvs_tier_names()).  A block
 * already stored under key and id is refreshed, not written.  Reclaims
 * the least recently used slot when full; KVS_KV_EFULL when every slot
 * is busy (written or read), KVS_EINVAL for a scope over
 * KVS_RADIX_MAX_SCOPE, KVS_EIO on a failed write (the slot is freed).
 */
int kvs_tier_put_named(kvs_tier_t *t, kvs_tier_io_t *io,
    const kvs_radix_key_t *key, const uint8_t *id, const uint8_t *name,
    const int32_t *tokens, const void *data, kvs_err_t *err);

static inline int
kvs_tier_put(kvs_tier_t *t, kvs_tier_io_t *io, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, const void *data,
    kvs_err_t *err)
{
    return kvs_tier_put_named(t, io, key, id, NULL, tokens, data, err);
}

/*
 * 1 when a block is stored under key and id (a lookup of the index, no
 * I/O: what the file holds is verified only by kvs_tier_get()).  With
 * touch, a stored block also becomes the most recently used: a run
 * chosen for loading is not reclaimed by the spills that making room
 * for it in the pool causes.
 */
int kvs_tier_find(kvs_tier_t *t, const kvs_radix_key_t *key,
    const uint8_t *id, int touch);

static inline int
kvs_tier_has(kvs_tier_t *t, const kvs_radix_key_t *key, const uint8_t *id)
{
    return kvs_tier_find(t, key, id, 0);
}

static inline int
kvs_tier_touch(kvs_tier_t *t, const kvs_radix_key_t *key, const uint8_t *id)
{
    return kvs_tier_find(t, key, id, 1);
}

/*
 * Reads a block back into data[block_bytes], only when its slot holds
 * exactly key, id and tokens[block_tokens] and its checksum is right:
 * KVS_ENOTFOUND when not stored (or stored for other tokens),
 * KVS_EFORMAT when the slot is corrupt or short (the slot is dropped;
 * recompute), KVS_EIO on a failed read.  data is written only on
 * KVS_OK.  The block becomes the most recently used.
 */
int kvs_tier_get(kvs_tier_t *t, kvs_tier_io_t *io, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, void *data, kvs_err_t *err);

void kvs_tier_stats(kvs_tier_t *t, kvs_tier_stats_t *st);

/*
 * Watching the slots (the prefix index's disk entries, kvs_engine_
 * tier_ix.c): fn is called with a block's namespace hash and path id
 * when its slot becomes ready (ready 1: written) and when it leaves the
 * index (0: reclaimed, or found corrupt).  It runs under the tier's
 * lock, on whichever thread wrote or read: it must be short and must
 * not call back into the tier.  Slots kept at open are not reported.
 * NULL: none.
 */
typedef void (*kvs_tier_watch_pt)(void *arg, uint64_t ns, const uint8_t *id,
    int ready);

void kvs_tier_set_watch(kvs_tier_t *t, kvs_tier_watch_pt fn, void *arg);

/*
 * The stored blocks' index names, a few slots at a time (the prefix
 * index's entries for the blocks kept at open, kvs_engine_tier_ix.c):
 * fn is called, under the tier's lock like the watch, for each ready
 * slot among slots[from, from + n) that carries a name.  Returns the
 * slot to go on from; the walk is done when it returns the tier's slots
 * (kvs_tier_stats()).  A slot written or dropped meanwhile is reported
 * by the watch as well: a walker that heard of a block here hears of
 * its drop there, after it.
 */
typedef void (*kvs_tier_name_pt)(void *arg, uint64_t ns, const uint8_t *id,
    const uint8_t *name);

uint32_t kvs_tier_names(kvs_tier_t *t, uint32_t from, uint32_t n,
    kvs_tier_name_pt fn, void *arg);

/* The namespace hash the tier files a block under (epoch, adapter,
 * scope), as the watch reports it. */
uint64_t kvs_tier_ns_hash(const kvs_radix_key_t *key);

#endif /* KVS_TIER_H */
