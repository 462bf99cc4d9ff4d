/*
 * kvs_tier: the disk tier's file, its format, open, reads and writes
 * (see kvs_tier.h for the invariants; the slot index and LRU are in
 * kvs_tier_slots.c).
 *
 * File header (little-endian, 4096 bytes): "KVSTIER1", version, block
 * tokens, block bytes, slot bytes, slots, epoch, model, xxh3-64 of the
 * bytes before it.  A slot at 4096 + i * slot_bytes: a 512-byte header
 * (magic, version, write sequence, epoch, adapter, scope length, path
 * id, tokens, KV bytes, scope, the block's index name or zeros, xxh3-64
 * of the header so far, xxh3-64 of the header, tokens and KV bytes),
 * the tokens, the KV bytes, padding.  Version 2 added the index name: a
 * file of version 1 is discarded at open ("another version").
 *
 * In memory, per slot: its state, its readers, the namespace's hash and
 * the path id (a hint that finds the slot; the header read back from
 * the file is what is compared), its write sequence, LRU links and the
 * index's chain link (also the free list's).
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/kvs_clock.h"
#include "base/kvs_le.h"
#include "kvs_tier_impl.h"

#define TIER_MAGIC       "KVSTIER1"
#define TIER_VERSION     2
#define TIER_HDR_BYTES   72           /* header fields before its check */
#define SLOT_MAGIC       0x4b56534bu  /* "KSVK" little-endian */
#define SLOT_HDR         512
#define SLOT_OFF_SCOPE   64
#define SLOT_OFF_NAME    (SLOT_OFF_SCOPE + KVS_RADIX_MAX_SCOPE)
#define SLOT_OFF_HSUM    (SLOT_OFF_NAME + KVS_RADIX_NAME_LEN)
#define SLOT_OFF_SUM     (SLOT_OFF_HSUM + 8)

struct kvs_tier_io_s {
    uint8_t  *buf;                    /* [slot_bytes], aligned */
};


static int
tier_scope_bad(const kvs_radix_key_t *key, kvs_err_t *err)
{
    if (key->scope_len <= KVS_RADIX_MAX_SCOPE) {
        return 0;
    }

    kvs_err_set(err, KVS_EINVAL, "kv tier: scope of %zu bytes, at most %u",
                key->scope_len, KVS_RADIX_MAX_SCOPE);

    return 1;
}


/* Tests' slow disk: sleeps us microseconds (0: none). */
static void
tier_sleep_us(uint32_t us)
{
    struct timespec  ts;

    if (us == 0) {
        return;
    }

    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (long) (us % 1000000) * 1000;

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { /* void */ }
}


static uint64_t
tier_off(const kvs_tier_t *t, uint32_t i)
{
    return KVS_TIER_ALIGN + (uint64_t) i * t->slot_bytes;
}


static int
tier_pwrite(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    ssize_t  w;

    while (n > 0) {
        w = pwrite(fd, p, n, (off_t) off);
        if (w < 0 && errno == EINTR) {
            continue;
        }

        if (w <= 0) {
            if (w == 0) {
                errno = ENOSPC;
            }

            return -1;
        }

        p += w;
        n -= (size_t) w;
        off += (uint64_t) w;
    }

    return 0;
}


/* Bytes read, short at the end of the file; -1 on error.  One read:
 * a regular file's read comes back short only at its end, and under
 * O_DIRECT a second read, from an offset off the alignment, would fail
 * with EINVAL instead of saying so (a cut file is then a short read, a
 * corrupt slot dropped, not an I/O error that keeps it indexed). */
static ssize_t
tier_pread(int fd, uint8_t *p, size_t n, uint64_t off)
{
    ssize_t  r;

    do {
        r = pread(fd, p, n, (off_t) off);
    } while (r < 0 && errno == EINTR);

    return r;
}


static void
tier_file_header(const kvs_tier_t *t, uint8_t *h)
{
    memset(h, 0, KVS_TIER_ALIGN);
    memcpy(h, TIER_MAGIC, 8);
    kvs_le_put32(h + 8, TIER_VERSION);
    kvs_le_put32(h + 12, t->conf.block_tokens);
    kvs_le_put64(h + 16, t->conf.block_bytes);
    kvs_le_put64(h + 24, t->slot_bytes);
    kvs_le_put64(h + 32, t->n_slots);
    kvs_le_put64(h + 40, t->conf.epoch);
    kvs_le_put64(h + 48, t->conf.model);
    kvs_le_put64(h + TIER_HDR_BYTES, XXH3_64bits(h, TIER_HDR_BYTES));
}


/* Checks one slot header in buf as the scan at open does: magic,
 * header checksum, geometry, epoch. */
static int
tier_slot_header_ok(const kvs_tier_t *t, const uint8_t *b)
{
    return kvs_le_get32(b) == SLOT_MAGIC
           && kvs_le_get32(b + 4) == TIER_VERSION
           && kvs_le_get64(b + SLOT_OFF_HSUM)
              == XXH3_64bits(b, SLOT_OFF_HSUM)
           && kvs_le_get64(b + 16) == t->conf.epoch
           && kvs_le_get32(b + 28) <= KVS_RADIX_MAX_SCOPE
           && kvs_le_get32(b + 48) == t->conf.block_tokens
           && kvs_le_get64(b + 56) == t->conf.block_bytes;
}


static uint64_t
tier_slot_sum(const kvs_tier_t *t, const uint8_t *b)
{
    return XXH3_64bits_withSeed(b + SLOT_HDR,
                                (size_t) t->conf.block_tokens * 4
                                + t->conf.block_bytes,
                                XXH3_64bits(b, SLOT_OFF_SUM));
}


static int
tier_seq_cmp(const void *a, const void *b, void *arg)
{
    const kvs_tier_slot_t  *s = arg;
    uint64_t       x = s[*(const uint32_t *) a].seq;
    uint64_t       y = s[*(const uint32_t *) b].seq;

    return x < y ? -1 : x > y;
}


/* Rebuilds the index from the slot headers of a kept file, the oldest
 * write least recently used; a path found twice keeps its newest. */
static int
tier_scan(kvs_tier_t *t, uint8_t *buf, kvs_err_t *err)
{
    uint32_t                i, j, n, *order;
    kvs_radix_key_t         key;
    const uint8_t          *b = buf;
    const kvs_tier_slot_t  *s;

    order = malloc((size_t) t->n_slots * sizeof(uint32_t));
    if (order == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory");
    }

    n = 0;

    for (i = 0; i < t->n_slots; i++) {
        if (tier_pread(t->fd, buf, KVS_TIER_ALIGN, tier_off(t, i))
            != KVS_TIER_ALIGN
            || !tier_slot_header_ok(t, b))
        {
            continue;
        }

        key.epoch = kvs_le_get64(b + 16);
        key.adapter = kvs_le_get32(b + 24);
        key.scope_len = kvs_le_get32(b + 28);
        key.scope = (const char *) b + SLOT_OFF_SCOPE;

        t->slots[i].ns = kvs_tier_ns_hash(&key);
        memcpy(t->slots[i].id, b + 32, KVS_TIER_ID_LEN);
        memcpy(t->slots[i].name, b + SLOT_OFF_NAME, KVS_RADIX_NAME_LEN);
        t->slots[i].seq = kvs_le_get64(b + 8);
        order[n++] = i;
    }

    qsort_r(order, n, sizeof(uint32_t), tier_seq_cmp, t->slots);

    /* oldest first: each push makes the later ones more recent */
    for (i = 0; i < n; i++) {
        s = &t->slots[order[i]];
        j = kvs_tier_slot_find(t, s->ns, s->id);
        if (j != KVS_TIER_NONE) {
            kvs_tier_slot_unindex(t, j);
            kvs_tier_slot_release(t, j);
        }

        kvs_tier_slot_index(t, order[i]);

        if (t->slots[order[i]].seq >= t->seq) {
            t->seq = t->slots[order[i]].seq + 1;
        }
    }

    /* the free list: every slot not indexed */
    t->free_head = KVS_TIER_NONE;

    for (i = t->n_slots; i-- > 0; ) {
        if (t->slots[i].state == KVS_TIER_SLOT_FREE) {
            kvs_tier_slot_release(t, i);
        }
    }

    t->st.kept = t->st.used;
    free(order);

    return KVS_OK;
}


/* Whether the open file's header is this tier's; else why not. */
static int
tier_header_matches(kvs_tier_t *t, uint8_t *buf, uint64_t file_size,
    char *why, size_t why_len)
{
    uint8_t  want[KVS_TIER_ALIGN];

    if (file_size < KVS_TIER_ALIGN
        || tier_pread(t->fd, buf, KVS_TIER_ALIGN, 0) != KVS_TIER_ALIGN)
    {
        snprintf(why, why_len, "no header");
        return 0;
    }

    tier_file_header(t, want);

    if (memcmp(buf, TIER_MAGIC, 8) != 0
        || kvs_le_get64(buf + TIER_HDR_BYTES)
           != XXH3_64bits(buf, TIER_HDR_BYTES))
    {
        snprintf(why, why_len, "not a kv tier file, or its header is "
                 "corrupt");
        return 0;
    }

    if (kvs_le_get64(buf + 40) != t->conf.epoch) {
        snprintf(why, why_len, "weight epoch %016" PRIx64 ", expected "
                 "%016" PRIx64, kvs_le_get64(buf + 40), t->conf.epoch);
        return 0;
    }

    if (kvs_le_get64(buf + 48) != t->conf.model) {
        snprintf(why, why_len, "another model");
        return 0;
    }

    if (memcmp(buf, want, TIER_HDR_BYTES) != 0) {
        snprintf(why, why_len, "another version, block or tier size");
        return 0;
    }

    if (file_size < tier_off(t, t->n_slots)) {
        snprintf(why, why_len, "file of %" PRIu64 " bytes, expected %"
                 PRIu64, file_size, tier_off(t, t->n_slots));
        return 0;
    }

    return 1;
}


static int
tier_setup(kvs_tier_t *t, char *why, size_t why_len, kvs_err_t *err)
{
    int           rc, flags;
    uint8_t      *buf;
    uint64_t      total;
    struct stat   sb;

    flags = O_RDWR | O_CREAT | O_CLOEXEC | (t->conf.direct ? O_DIRECT : 0);

    t->fd = open(t->conf.path, flags, 0600);
    if (t->fd < 0) {
        rc = (t->conf.direct && errno == EINVAL) ? KVS_EUNSUPPORTED
                                                 : KVS_EIO;
        return kvs_err_set(err, rc, "kv tier: open \"%s\"%s: %s",
                           t->conf.path,
                           t->conf.direct ? " with O_DIRECT" : "",
                           strerror(errno));
    }

    if (fstat(t->fd, &sb) != 0) {
        return kvs_err_set(err, KVS_EIO, "kv tier: stat \"%s\": %s",
                           t->conf.path, strerror(errno));
    }

    if (posix_memalign((void **) &buf, KVS_TIER_ALIGN, KVS_TIER_ALIGN)
        != 0)
    {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory");
    }

    total = tier_off(t, t->n_slots);

    if (tier_header_matches(t, buf, (uint64_t) sb.st_size, why, why_len)) {
        /* kept: never longer than the tier (nothing of it lies past) */
        if ((uint64_t) sb.st_size > total
            && ftruncate(t->fd, (off_t) total) != 0)
        {
            free(buf);
            return kvs_err_set(err, KVS_EIO, "kv tier: size \"%s\" to %"
                               PRIu64 " bytes: %s", t->conf.path, total,
                               strerror(errno));
        }

        rc = tier_scan(t, buf, err);
        free(buf);
        return rc;
    }

    if (sb.st_size == 0) {
        why[0] = '\0';
    }

    /* discard: the old slots' epochs may still match, so cut the file
     * to nothing before the new header makes it ours */
    if (ftruncate(t->fd, 0) != 0
        || ftruncate(t->fd, (off_t) total) != 0)
    {
        free(buf);
        return kvs_err_set(err, KVS_EIO, "kv tier: size \"%s\" to %"
                           PRIu64 " bytes: %s", t->conf.path, total,
                           strerror(errno));
    }

    rc = posix_fallocate(t->fd, 0, (off_t) total);
    if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
        free(buf);
        return kvs_err_set(err, KVS_EIO, "kv tier: allocate %" PRIu64
                           " bytes for \"%s\": %s", total, t->conf.path,
                           strerror(rc));
    }

    tier_file_header(t, buf);

    if (tier_pwrite(t->fd, buf, KVS_TIER_ALIGN, 0) != 0) {
        free(buf);
        return kvs_err_set(err, KVS_EIO, "kv tier: write \"%s\": %s",
                           t->conf.path, strerror(errno));
    }

    free(buf);

    return KVS_OK;
}


int
kvs_tier_open(kvs_tier_t **out, const kvs_tier_conf_t *conf,
    char *discarded, size_t discarded_len, kvs_err_t *err)
{
    int          rc;
    char         why[160];
    uint64_t     slot_bytes, n;
    kvs_tier_t  *t;

    *out = NULL;
    why[0] = '\0';

    if (discarded != NULL && discarded_len > 0) {
        discarded[0] = '\0';
    }

    if (conf->path == NULL || conf->path[0] == '\0' || conf->size == 0
        || conf->block_bytes == 0 || conf->block_tokens == 0
        || conf->block_tokens > KVS_KV_MAX_BLOCK_TOKENS
        || conf->block_bytes > (1ull << 40))
    {
        return kvs_err_set(err, KVS_EINVAL, "kv tier: a path, a size and "
                           "a block of 1..%u tokens and 1..2^40 bytes "
                           "are needed", KVS_KV_MAX_BLOCK_TOKENS);
    }

    slot_bytes = SLOT_HDR + (uint64_t) conf->block_tokens * 4
                 + conf->block_bytes;
    slot_bytes = (slot_bytes + KVS_TIER_ALIGN - 1)
                 / KVS_TIER_ALIGN * KVS_TIER_ALIGN;

    n = conf->size > KVS_TIER_ALIGN
        ? (conf->size - KVS_TIER_ALIGN) / slot_bytes : 0;

    if (n == 0) {
        return kvs_err_set(err, KVS_ERANGE, "kv tier: size %" PRIu64
                           " holds no block of %" PRIu64 " bytes (at "
                           "least %" PRIu64 ")", conf->size, slot_bytes,
                           slot_bytes + KVS_TIER_ALIGN);
    }

    if (n > KVS_TIER_MAX_SLOTS) {
        n = KVS_TIER_MAX_SLOTS;
    }

    t = calloc(1, sizeof(kvs_tier_t));
    if (t == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory");
    }

    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: no mutex");
    }

    t->fd = -1;
    t->conf = *conf;
    t->conf.path = NULL;
    t->slot_bytes = slot_bytes;
    t->n_slots = (uint32_t) n;

    if (kvs_tier_slots_init(t) != KVS_OK) {
        kvs_tier_close(t);
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory for "
                           "%" PRIu32 " slots", t->n_slots);
    }

    t->st.slots = t->n_slots;
    t->st.slot_bytes = slot_bytes;

    t->conf.path = conf->path;
    rc = tier_setup(t, why, sizeof(why), err);
    t->conf.path = NULL;

    if (rc != KVS_OK) {
        kvs_tier_close(t);
        return rc;
    }

    if (discarded != NULL && discarded_len > 0) {
        snprintf(discarded, discarded_len, "%s", why);
    }

    *out = t;

    return KVS_OK;
}


void
kvs_tier_close(kvs_tier_t *t)
{
    if (t == NULL) {
        return;
    }

    if (t->fd >= 0) {
        close(t->fd);
    }

    pthread_mutex_destroy(&t->mu);

    free(t->slots);
    free(t->buckets);
    free(t);
}


uint64_t
kvs_tier_slot_bytes(const kvs_tier_t *t)
{
    return t->slot_bytes;
}


uint64_t
kvs_tier_block_bytes(const kvs_tier_t *t)
{
    return t->conf.block_bytes;
}


uint32_t
kvs_tier_block_tokens(const kvs_tier_t *t)
{
    return t->conf.block_tokens;
}


int
kvs_tier_io_new(kvs_tier_t *t, kvs_tier_io_t **out, kvs_err_t *err)
{
    kvs_tier_io_t  *io;

    *out = NULL;

    io = calloc(1, sizeof(kvs_tier_io_t));
    if (io == NULL
        || posix_memalign((void **) &io->buf, KVS_TIER_ALIGN,
                          t->slot_bytes) != 0)
    {
        free(io);
        return kvs_err_set(err, KVS_ENOMEM, "kv tier: out of memory for "
                           "a buffer of %" PRIu64 " bytes", t->slot_bytes);
    }

    *out = io;

    return KVS_OK;
}


void
kvs_tier_io_free(kvs_tier_io_t *io)
{
    if (io != NULL) {
        free(io->buf);
        free(io);
    }
}


void
kvs_tier_path_id(const uint8_t *prev, const int32_t *tokens, uint32_t n,
    uint8_t *id)
{
    uint8_t             b[KVS_TIER_ID_LEN + 4 * KVS_KV_MAX_BLOCK_TOKENS];
    size_t              len;
    uint32_t            i;
    XXH128_canonical_t  c;

    if (n > KVS_KV_MAX_BLOCK_TOKENS) {
        n = KVS_KV_MAX_BLOCK_TOKENS;
    }

    memset(b, 0, KVS_TIER_ID_LEN);

    if (prev != NULL) {
        memcpy(b, prev, KVS_TIER_ID_LEN);
    }

    len = KVS_TIER_ID_LEN;

    for (i = 0; i < n; i++) {
        kvs_le_put32(b + len, (uint32_t) tokens[i]);
        len += 4;
    }

    XXH128_canonicalFromHash(&c, XXH3_128bits(b, len));
    memcpy(id, c.digest, KVS_TIER_ID_LEN);
}


int
kvs_tier_put_named(kvs_tier_t *t, kvs_tier_io_t *io,
    const kvs_radix_key_t *key, const uint8_t *id, const uint8_t *name,
    const int32_t *tokens, const void *data, kvs_err_t *err)
{
    int        rc, eno;
    uint8_t   *b = io->buf;
    uint32_t   i, k;
    uint64_t   ns, seq, t0;

    if (tier_scope_bad(key, err)) {
        return KVS_EINVAL;
    }

    ns = kvs_tier_ns_hash(key);

    pthread_mutex_lock(&t->mu);

    i = kvs_tier_slot_find(t, ns, id);
    if (i != KVS_TIER_NONE) {
        kvs_tier_slot_touch(t, i);
        t->st.put_dups++;
        pthread_mutex_unlock(&t->mu);
        return KVS_OK;
    }

    i = kvs_tier_slot_take(t);
    if (i == KVS_TIER_NONE) {
        pthread_mutex_unlock(&t->mu);
        return kvs_err_set(err, KVS_KV_EFULL, "kv tier: all %" PRIu32
                           " slots are busy", t->n_slots);
    }

    t->slots[i].state = KVS_TIER_SLOT_BUSY;
    t->slots[i].ns = ns;
    memcpy(t->slots[i].id, id, KVS_TIER_ID_LEN);

    if (name != NULL) {
        memcpy(t->slots[i].name, name, KVS_RADIX_NAME_LEN);
    } else {
        memset(t->slots[i].name, 0, KVS_RADIX_NAME_LEN);
    }

    seq = t->seq++;
    t->slots[i].seq = seq;

    pthread_mutex_unlock(&t->mu);

    memset(b, 0, SLOT_HDR);
    kvs_le_put32(b, SLOT_MAGIC);
    kvs_le_put32(b + 4, TIER_VERSION);
    kvs_le_put64(b + 8, seq);
    kvs_le_put64(b + 16, key->epoch);
    kvs_le_put32(b + 24, key->adapter);
    kvs_le_put32(b + 28, (uint32_t) key->scope_len);
    memcpy(b + 32, id, KVS_TIER_ID_LEN);
    kvs_le_put32(b + 48, t->conf.block_tokens);
    kvs_le_put64(b + 56, t->conf.block_bytes);

    if (key->scope_len > 0) {
        memcpy(b + SLOT_OFF_SCOPE, key->scope, key->scope_len);
    }

    if (name != NULL) {
        memcpy(b + SLOT_OFF_NAME, name, KVS_RADIX_NAME_LEN);
    }

    kvs_le_put64(b + SLOT_OFF_HSUM, XXH3_64bits(b, SLOT_OFF_HSUM));

    for (k = 0; k < t->conf.block_tokens; k++) {
        kvs_le_put32(b + SLOT_HDR + 4 * k, (uint32_t) tokens[k]);
    }

    memcpy(b + SLOT_HDR + 4 * (size_t) t->conf.block_tokens, data,
           t->conf.block_bytes);
    kvs_le_put64(b + SLOT_OFF_SUM, tier_slot_sum(t, b));

    tier_sleep_us(t->conf.write_delay_us);

    t0 = kvs_now_ns();
    rc = tier_pwrite(t->fd, b, t->slot_bytes, tier_off(t, i));
    eno = errno;
    t0 = kvs_now_ns() - t0;

    pthread_mutex_lock(&t->mu);

    t->st.write_ns += t0;

    if (rc != 0) {
        rc = kvs_err_set(err, KVS_EIO, "kv tier: write slot %" PRIu32
                         ": %s", i, strerror(eno));
        kvs_tier_slot_release(t, i);

    } else if (kvs_tier_slot_find(t, ns, id) != KVS_TIER_NONE) {
        /* another thread stored the same block meanwhile */
        kvs_tier_slot_release(t, i);
        t->st.put_dups++;

    } else {
        kvs_tier_slot_index(t, i);
        t->st.puts++;
        t->st.bytes_written += t->slot_bytes;
    }

    pthread_mutex_unlock(&t->mu);

    return rc;
}


/* Whether a slot read back holds exactly this block: 1, 0 for another
 * block, -1 for a corrupt slot. */
static int
tier_slot_is(const kvs_tier_t *t, const uint8_t *b,
    const kvs_radix_key_t *key, const uint8_t *id, const int32_t *tokens)
{
    uint32_t  k;

    if (!tier_slot_header_ok(t, b)
        || kvs_le_get64(b + SLOT_OFF_SUM) != tier_slot_sum(t, b))
    {
        return -1;
    }

    if (kvs_le_get32(b + 24) != key->adapter
        || kvs_le_get32(b + 28) != key->scope_len
        || (key->scope_len > 0
            && memcmp(b + SLOT_OFF_SCOPE, key->scope, key->scope_len) != 0)
        || kvs_le_get64(b + 16) != key->epoch
        || memcmp(b + 32, id, KVS_TIER_ID_LEN) != 0)
    {
        return 0;
    }

    for (k = 0; k < t->conf.block_tokens; k++) {
        if (kvs_le_get32(b + SLOT_HDR + 4 * k) != (uint32_t) tokens[k]) {
            return 0;
        }
    }

    return 1;
}


int
kvs_tier_get(kvs_tier_t *t, kvs_tier_io_t *io, const kvs_radix_key_t *key,
    const uint8_t *id, const int32_t *tokens, void *data, kvs_err_t *err)
{
    int        is, eno;
    ssize_t    got;
    uint32_t   i;
    uint64_t   ns, t0;

    if (tier_scope_bad(key, err)) {
        return KVS_EINVAL;
    }

    ns = kvs_tier_ns_hash(key);

    pthread_mutex_lock(&t->mu);

    i = kvs_tier_slot_find(t, ns, id);
    if (i == KVS_TIER_NONE) {
        t->st.misses++;
        pthread_mutex_unlock(&t->mu);
        return kvs_err_set(err, KVS_ENOTFOUND, "kv tier: block not stored");
    }

    t->slots[i].readers++;
    pthread_mutex_unlock(&t->mu);

    tier_sleep_us(t->conf.read_delay_us);

    t0 = kvs_now_ns();
    got = tier_pread(t->fd, io->buf, t->slot_bytes, tier_off(t, i));
    eno = errno;
    t0 = kvs_now_ns() - t0;

    is = got == (ssize_t) t->slot_bytes
         ? tier_slot_is(t, io->buf, key, id, tokens) : -1;

    pthread_mutex_lock(&t->mu);

    t->slots[i].readers--;
    t->st.read_ns += t0;

    if (got >= 0 && is < 0) {
        /* never used again: out of the index at once */
        t->st.corrupt++;

        if (t->slots[i].state == KVS_TIER_SLOT_READY) {
            kvs_tier_slot_unindex(t, i);
            t->slots[i].state = KVS_TIER_SLOT_DEAD;
        }
    }

    /* a dead slot is freed by the last read that held it */
    if (t->slots[i].state == KVS_TIER_SLOT_DEAD && t->slots[i].readers == 0) {
        kvs_tier_slot_release(t, i);
    }

    pthread_mutex_unlock(&t->mu);

    if (got < 0) {
        return kvs_err_set(err, KVS_EIO, "kv tier: read slot %" PRIu32
                           ": %s", i, strerror(eno));
    }

    if (is < 0) {
        return kvs_err_set(err, KVS_EFORMAT, "kv tier: slot %" PRIu32
                           " is corrupt (%s)", i,
                           got < (ssize_t) t->slot_bytes
                           ? "short read" : "checksum or header");
    }

    pthread_mutex_lock(&t->mu);

    if (is == 0) {
        t->st.misses++;
        pthread_mutex_unlock(&t->mu);
        return kvs_err_set(err, KVS_ENOTFOUND, "kv tier: block stored for "
                           "other tokens or namespace");
    }

    if (t->slots[i].state == KVS_TIER_SLOT_READY) {
        kvs_tier_slot_touch(t, i);
    }

    t->st.hits++;
    t->st.bytes_read += t->slot_bytes;
    pthread_mutex_unlock(&t->mu);

    memcpy(data, io->buf + SLOT_HDR + 4 * (size_t) t->conf.block_tokens,
           t->conf.block_bytes);

    return KVS_OK;
}


