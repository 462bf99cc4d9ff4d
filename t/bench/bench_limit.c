/*
 * bench_limit: admission decisions per second on one core from a zone of
 * 100k keys, the way ngx_http_kvserve_limit_zone.c makes them, without
 * nginx:
 *
 *   crc32 of the key (table-driven, as ngx_crc32_short), the zone's lock
 *   (an atomic spin lock in MAP_SHARED memory, nginx's ngx_shmtx fast
 *   path), a lookup by hash then key bytes over a balanced search
 *   structure (here a sorted array searched by halves: the same
 *   log2(100k) = 17 comparisons and random memory touches as the zone's
 *   red-black tree), the LRU relink, kvs_limit_reserve(), the counters,
 *   the unlock.
 *
 *   bench_limit [-k KEYS] [-n DECISIONS]
 *       prints "reserve <decisions/s>", "reserve+settle <pairs/s>" and
 *       the share of decisions that passed
 *
 * The clock is read every 1024 decisions, as nginx workers read a cached
 * ngx_current_msec.  Keys are "tenant-%08u", picked uniformly at random.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "limit/kvs_limit.h"


typedef struct bench_node_s  bench_node_t;

struct bench_node_s {
    uint32_t            hash;
    uint16_t            len;
    char                key[32];
    kvs_limit_state_t   st;
    bench_node_t       *prev;          /* LRU */
    bench_node_t       *next;
};

typedef struct {
    volatile int        lock;
    uint64_t            passed;
    uint64_t            rejected;
    uint64_t            charged;
    uint64_t            refunded;
    bench_node_t        lru;           /* sentinel */
} bench_zone_t;


static uint32_t  bench_crc_table[256];


static void
bench_crc_init(void)
{
    uint32_t  c, i, k;

    for (i = 0; i < 256; i++) {
        c = i;
        for (k = 0; k < 8; k++) {
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        }
        bench_crc_table[i] = c;
    }
}


static uint32_t
bench_crc32(const char *p, size_t len)
{
    uint32_t  crc;

    crc = 0xffffffffu;

    while (len--) {
        crc = bench_crc_table[(crc ^ (uint8_t) *p++) & 0xff] ^ (crc >> 8);
    }

    return crc ^ 0xffffffffu;
}


static int
bench_cmp(const void *a, const void *b)
{
    const bench_node_t  *x = a, *y = b;

    if (x->hash != y->hash) {
        return x->hash < y->hash ? -1 : 1;
    }

    return strcmp(x->key, y->key);
}


static bench_node_t *
bench_lookup(bench_node_t *nodes, size_t n, uint32_t hash, const char *key,
    size_t len)
{
    int      c;
    size_t   lo, hi, mid;

    lo = 0;
    hi = n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (hash != nodes[mid].hash) {
            c = hash < nodes[mid].hash ? -1 : 1;
        } else {
            c = memcmp(key, nodes[mid].key, len < nodes[mid].len
                                            ? len : nodes[mid].len);
            if (c == 0) {
                c = (int) len - (int) nodes[mid].len;
            }
        }

        if (c == 0) {
            return &nodes[mid];
        }

        if (c < 0) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }

    return NULL;
}


static void
bench_lock(bench_zone_t *z)
{
    while (__atomic_exchange_n(&z->lock, 1, __ATOMIC_ACQUIRE)) {
        /* uncontended here */
    }
}


static void
bench_unlock(bench_zone_t *z)
{
    __atomic_store_n(&z->lock, 0, __ATOMIC_RELEASE);
}


static void
bench_lru_touch(bench_zone_t *z, bench_node_t *nd)
{
    nd->prev->next = nd->next;
    nd->next->prev = nd->prev;
    nd->next = z->lru.next;
    nd->prev = &z->lru;
    z->lru.next->prev = nd;
    z->lru.next = nd;
}


static uint64_t
bench_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}


static double
bench_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


static uint64_t
bench_rnd(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545f4914f6cdd1dULL;
}


/* n decisions (with settle: each admitted one settled at once with a
 * random part of its output used); returns the seconds. */
static double
bench_run(bench_zone_t *z, bench_node_t *nodes, size_t n_keys,
    char (*keys)[32], const kvs_limit_conf_t *c, uint64_t n, int settle)
{
    size_t                 i, len;
    double                 t0;
    uint64_t               k, x, now, cost, out;
    uint32_t               hash;
    kvs_err_t              err;
    bench_node_t          *nd;
    kvs_limit_resv_t       resv;
    kvs_limit_decision_t   d;

    x = 0x9e3779b97f4a7c15ULL;
    now = bench_ms();
    t0 = bench_now();

    for (k = 0; k < n; k++) {
        if ((k & 1023) == 0) {
            now = bench_ms();
        }

        i = (size_t) (bench_rnd(&x) % n_keys);
        out = 1 + bench_rnd(&x) % 1000;
        cost = out + 1 + bench_rnd(&x) % 1000;
        len = strlen(keys[i]);

        hash = bench_crc32(keys[i], len);

        bench_lock(z);

        nd = bench_lookup(nodes, n_keys, hash, keys[i], len);
        if (nd == NULL) {
            bench_unlock(z);
            fprintf(stderr, "bench_limit: key not found\n");
            exit(1);
        }

        bench_lru_touch(z, nd);

        if (kvs_limit_reserve(c, &nd->st, now, cost, out, &resv, &d, &err)
            != KVS_OK)
        {
            bench_unlock(z);
            fprintf(stderr, "bench_limit: %s\n", err.msg);
            exit(1);
        }

        if (d.verdict <= KVS_LIMIT_DELAYED) {
            z->passed++;
            z->charged += cost;
        } else {
            z->rejected++;
        }

        bench_unlock(z);

        if (!settle || resv.settled) {
            continue;
        }

        /* the request's end: looked up again, as the glue does */
        bench_lock(z);
        nd = bench_lookup(nodes, n_keys, hash, keys[i], len);
        z->refunded += kvs_limit_settle(c, &nd->st, now, &resv,
                                        bench_rnd(&x) % (out + 1));
        bench_unlock(z);
    }

    return bench_now() - t0;
}


int
main(int argc, char **argv)
{
    int                i;
    size_t             k, n_keys;
    double             s;
    uint64_t           n, now;
    kvs_err_t          err;
    bench_zone_t      *z;
    bench_node_t      *nodes;
    kvs_limit_conf_t   c;
    char             (*keys)[32];

    n_keys = 100000;
    n = 5000000;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-k") == 0) {
            n_keys = (size_t) strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-n") == 0) {
            n = strtoull(argv[i + 1], NULL, 10);
        } else {
            fprintf(stderr, "usage: bench_limit [-k KEYS] [-n N]\n");
            return 2;
        }
    }

    if (n_keys == 0) {
        return 2;
    }

    bench_crc_init();

    /* the zone in shared memory, as nginx has it */
    z = mmap(NULL, sizeof(bench_zone_t) + n_keys * sizeof(bench_node_t),
             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    keys = malloc(n_keys * sizeof(*keys));
    if (z == MAP_FAILED || keys == NULL) {
        fprintf(stderr, "bench_limit: out of memory\n");
        return 1;
    }

    memset(z, 0, sizeof(bench_zone_t));
    nodes = (bench_node_t *) (z + 1);
    now = bench_ms();

    for (k = 0; k < n_keys; k++) {
        snprintf(keys[k], sizeof(keys[k]), "tenant-%08zu", k);
        snprintf(nodes[k].key, sizeof(nodes[k].key), "%s", keys[k]);
        nodes[k].len = (uint16_t) strlen(keys[k]);
        nodes[k].hash = bench_crc32(keys[k], nodes[k].len);
        kvs_limit_state_init(&nodes[k].st, now);
    }

    qsort(nodes, n_keys, sizeof(bench_node_t), bench_cmp);

    z->lru.next = z->lru.prev = &z->lru;
    for (k = 0; k < n_keys; k++) {
        nodes[k].prev = &z->lru;
        nodes[k].next = z->lru.next;
        z->lru.next->prev = &nodes[k];
        z->lru.next = &nodes[k];
    }

    /* a key comes up every n_keys decisions (about 40 ms at 100k): 10000
     * t/s, a bucket of 10000, nodelay, costs of 2..2000: a mix of passes
     * and rejections */
    if (kvs_limit_conf_init(&c, 10000, 1000, 10000, KVS_LIMIT_NODELAY, &err)
        != KVS_OK)
    {
        fprintf(stderr, "bench_limit: %s\n", err.msg);
        return 1;
    }

    s = bench_run(z, nodes, n_keys, keys, &c, n, 0);
    printf("keys %zu decisions %llu\n", n_keys, (unsigned long long) n);
    printf("reserve %.0f decisions/s (%.0f ns each), %.1f%% passed\n",
           (double) n / s, s * 1e9 / (double) n,
           100.0 * (double) z->passed / (double) (z->passed + z->rejected));

    z->passed = z->rejected = z->charged = z->refunded = 0;
    now = bench_ms();
    for (k = 0; k < n_keys; k++) {
        kvs_limit_state_init(&nodes[k].st, now);
    }

    s = bench_run(z, nodes, n_keys, keys, &c, n, 1);
    printf("reserve+settle %.0f decisions/s (%.0f ns each), %.1f%% passed, "
           "%llu of %llu tokens refunded\n",
           (double) n / s, s * 1e9 / (double) n,
           100.0 * (double) z->passed / (double) (z->passed + z->rejected),
           (unsigned long long) z->refunded,
           (unsigned long long) z->charged);

    return 0;
}
