/*
 * bench_tier: the disk tier's bandwidth, buffered against O_DIRECT, in
 * the same run, with a memcpy of the same blocks as the baseline:
 *
 *   bench_tier -f FILE [-m MiB of tier] [-k KiB per block] [-n blocks]
 *
 * For each mode: a fresh tier file of -m MiB, -n blocks of -k KiB put
 * in order (write MB/s: kvs_tier_put(), header, checksum and pwrite),
 * then every block read back in a shuffled order (read MB/s:
 * kvs_tier_get(), pread and checksum).  Buffered reads are measured
 * twice: right after the writes (the page cache holds the file: what a
 * host with free memory sees) and after the file was synced and dropped
 * from the cache (posix_fadvise DONTNEED: the disk).  O_DIRECT never
 * uses the cache.  "memcpy" copies the same bytes in memory, the bound
 * of any tier.  The blocks are random bytes; tokens are the block's
 * index, so every read is checked against what was written.
 */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/kvs_clock.h"
#include "base/kvs_hash.h"
#include "kv/kvs_tier.h"

#define BT  16


static const kvs_radix_key_t  bench_key = { 1, 0, "", 0 };


static void
bench_block(uint32_t b, int32_t *tok, uint8_t *id)
{
    uint32_t  i;

    for (i = 0; i < BT; i++) {
        tok[i] = (int32_t) (b * BT + i);
    }

    kvs_tier_path_id(NULL, tok, BT, id);
}


static void
bench_drop_cache(const char *path)
{
    int  fd;

    fd = open(path, O_RDONLY);
    if (fd >= 0) {
        (void) fdatasync(fd);
        (void) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}


static int
bench_read(kvs_tier_t *t, kvs_tier_io_t *io, const uint32_t *order,
    uint32_t n, uint64_t bytes, uint8_t *out, const uint8_t *data,
    const char *what)
{
    int32_t    tok[BT];
    uint8_t    id[KVS_TIER_ID_LEN];
    uint32_t   i;
    double     t0, dt;
    kvs_err_t  err;

    t0 = kvs_now_s();

    for (i = 0; i < n; i++) {
        bench_block(order[i], tok, id);

        if (kvs_tier_get(t, io, &bench_key, id, tok, out, &err) != KVS_OK
            || memcmp(out, data + (uint64_t) order[i] * bytes, bytes) != 0)
        {
            fprintf(stderr, "bench_tier: block %u: %s\n", order[i],
                    err.msg);
            return -1;
        }
    }

    dt = kvs_now_s() - t0;
    printf("  %-22s %8.0f MB/s  %7.1f us/block\n", what,
           n * (double) bytes / dt / 1e6, dt / n * 1e6);

    return 0;
}


static int
bench_mode(const char *path, uint64_t size, uint64_t bytes, uint32_t n,
    int direct, const uint8_t *data, const uint32_t *order)
{
    int               rc;
    int32_t           tok[BT];
    uint8_t           id[KVS_TIER_ID_LEN], *out;
    uint32_t          i;
    double            t0, dt;
    kvs_err_t         err;
    kvs_tier_t       *t;
    kvs_tier_io_t    *io;
    kvs_tier_conf_t   c;

    memset(&c, 0, sizeof(c));
    c.path = path;
    c.size = size;
    c.block_bytes = bytes;
    c.block_tokens = BT;
    c.epoch = 1;
    c.direct = direct;
    unlink(path);

    if (kvs_tier_open(&t, &c, NULL, 0, &err) != KVS_OK) {
        printf("%s: %s\n", direct ? "O_DIRECT" : "buffered", err.msg);
        return err.code == KVS_EUNSUPPORTED ? 0 : -1;
    }

    out = malloc(bytes);
    if (out == NULL || kvs_tier_io_new(t, &io, &err) != KVS_OK) {
        free(out);
        kvs_tier_close(t);
        return -1;
    }

    memset(out, 0, bytes);

    printf("%s (slot %" PRIu64 " bytes)\n",
           direct ? "O_DIRECT" : "buffered", kvs_tier_slot_bytes(t));

    t0 = kvs_now_s();

    for (i = 0; i < n; i++) {
        bench_block(i, tok, id);

        if (kvs_tier_put(t, io, &bench_key, id, tok,
                         data + (uint64_t) i * bytes, &err) != KVS_OK)
        {
            fprintf(stderr, "bench_tier: put %u: %s\n", i, err.msg);
            rc = -1;
            goto done;
        }
    }

    dt = kvs_now_s() - t0;
    printf("  %-22s %8.0f MB/s  %7.1f us/block\n", "write",
           n * (double) bytes / dt / 1e6, dt / n * 1e6);

    if (direct) {
        rc = bench_read(t, io, order, n, bytes, out, data, "read");

    } else {
        rc = bench_read(t, io, order, n, bytes, out, data,
                        "read (page cache)");
        bench_drop_cache(path);

        if (rc == 0) {
            rc = bench_read(t, io, order, n, bytes, out, data,
                            "read (cache dropped)");
        }
    }

done:

    kvs_tier_io_free(io);
    kvs_tier_close(t);
    free(out);
    unlink(path);

    return rc;
}


int
main(int argc, char **argv)
{
    int          o;
    uint8_t     *data, *copy;
    uint32_t     i, j, n = 512, *order, tmp;
    uint64_t     mib = 256, kib = 256, state = 7, k;
    double       t0, dt;
    const char  *path = NULL;

    while ((o = getopt(argc, argv, "f:m:k:n:")) != -1) {
        switch (o) {
        case 'f': path = optarg; break;
        case 'm': mib = strtoull(optarg, NULL, 10); break;
        case 'k': kib = strtoull(optarg, NULL, 10); break;
        case 'n': n = (uint32_t) strtoul(optarg, NULL, 10); break;
        default: path = NULL; optind = argc; break;
        }
    }

    if (path == NULL || n == 0 || kib == 0
        || (kib * 1024 + 8192) * n > mib << 20)
    {
        fprintf(stderr, "usage: bench_tier -f FILE [-m MiB] [-k KiB] "
                "[-n blocks], with the blocks fitting in the tier\n");
        return 2;
    }

    data = malloc(n * kib * 1024);
    copy = malloc(n * kib * 1024);
    order = malloc(n * sizeof(uint32_t));

    if (data == NULL || copy == NULL || order == NULL) {
        return 1;
    }

    for (k = 0; k < n * kib * 1024 / 8; k++) {
        ((uint64_t *) data)[k] = kvs_splitmix64(&state);
    }

    for (i = 0; i < n; i++) {
        order[i] = i;
    }

    for (i = n - 1; i > 0; i--) {
        j = (uint32_t) (kvs_splitmix64(&state) % (i + 1));
        tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }

    printf("bench_tier: %u blocks of %" PRIu64 " KiB, tier of %" PRIu64
           " MiB at %s\n", n, kib, mib, path);

    /* touched before the clock starts: no page faults in the baseline */
    memset(copy, 0, n * kib * 1024);
    t0 = kvs_now_s();

    for (i = 0; i < n; i++) {
        memcpy(copy + (uint64_t) order[i] * kib * 1024,
               data + (uint64_t) order[i] * kib * 1024, kib * 1024);
    }

    dt = kvs_now_s() - t0;
    printf("memcpy\n  %-22s %8.0f MB/s  %7.1f us/block\n", "copy",
           n * (double) kib * 1024 / dt / 1e6, dt / n * 1e6);

    if (bench_mode(path, mib << 20, kib * 1024, n, 0, data, order) != 0
        || bench_mode(path, mib << 20, kib * 1024, n, 1, data, order) != 0)
    {
        return 1;
    }

    free(data);
    free(copy);
    free(order);

    return 0;
}
