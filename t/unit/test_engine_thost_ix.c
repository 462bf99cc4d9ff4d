/*
 * test_engine_thost_ix: the host tier's blocks in the prefix index
 * (kvs_engine_tier_ix.c, with the host tier's hooks in
 * kvs_engine_thost.c): the publish plan an engine hands its publisher.
 *
 * A small generated model, a pool of 12 blocks, the CPU backend's ops
 * wrapped with a malloc host memory pair (as test_engine_thost does),
 * and every prompt's block names computed here as a gateway computes
 * them.  The takes are followed in a book of what the index would hold
 * per tier, where a host add must be a name that left the pool, a host
 * delete one in the host tier, a disk add one that left the pool; after
 * every take no name is in both lower tiers (published once, under the
 * host tier).
 *
 * Host tier alone: a prompt evicted from the pool comes in as host adds,
 * as many as the tier holds; copied back into the pool it is a pool add
 * again and stays the host tier's (its slot keeps it); the tier's
 * evictions come out as host deletes; a resync lists the pool and the
 * host tier whole; the host weight is said once a copy was timed.
 *
 * Host tier in front of a disk tier: blocks the host tier hands on are
 * host deletes, then disk adds once written; a prompt loaded back from
 * the disk and evicted again goes into the host tier: a host add and a
 * disk delete, though its disk slot stays; the book's host names equal
 * the tier's slots in use, its disk names those of the disk tier less
 * the blocks also in host memory; a resync lists the same.
 */

#include "kvs_test_engine_ix.h"

#include <inttypes.h>

/* the disk tier's file: one a process */
#define TIER_FILE  kvs_test_tmp_pid("test_engine_thost_ix")

#define BT        16
#define N_BLOCKS  12
#define MODEL     "tiny-host-index"
#define N_PROMPT  16
#define LEN       48                  /* 3 blocks a prompt */
#define PB        (LEN / BT)
#define N_NAMES   (N_PROMPT * PB)


typedef struct {
    kvs_index_name_t  name[N_NAMES];
    uint8_t           pool[N_NAMES];  /* the index's view */
    uint8_t           host[N_NAMES];
    uint8_t           disk[N_NAMES];
    uint8_t           spilled[N_NAMES];   /* left the pool at some time */
    uint8_t           hosted[N_NAMES];    /* a host add at some time */
    uint32_t          n;
    uint64_t          hadds, hdels, dadds, ddels;
} book_t;


static kvs_backend_ops_t  wrapped;


static void *
host_alloc(kvs_backend_t *be, size_t bytes, kvs_err_t *err)
{
    return malloc(bytes);
}


static void
host_free(kvs_backend_t *be, void *p)
{
    free(p);
}


static void
wrap_ops(kvs_backend_t *be, void *arg)
{
    wrapped = *be->ops;
    wrapped.host_alloc = host_alloc;
    wrapped.host_free = host_free;
    be->ops = &wrapped;
}


/* An engine naming its blocks, with a host tier of host_blocks blocks
 * (block_bytes each) and, when disk_size, a disk tier. */
static kvs_engine_t *
engine_new(const kvs_test_model_t *md, uint64_t host_bytes,
    uint64_t disk_size)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_ix_conf(&conf, md, BT, N_BLOCKS, MODEL);
    conf.backend_hook = wrap_ops;
    conf.tier_host_size = host_bytes;

    if (disk_size > 0) {
        conf.tier_path = TIER_FILE;
        conf.tier_size = disk_size;
        conf.tier_model = 1;
        conf.tier_load_always = 1;
    }

    return kvs_test_engine_new(&conf);
}


/* An engine whose host tier has exactly slots slots. */
static kvs_engine_t *
engine_slots(const kvs_test_model_t *md, uint32_t slots, uint64_t disk_size)
{
    uint64_t            bb;
    kvs_engine_t       *e;
    kvs_engine_stats_t  st;

    e = engine_new(md, 1u << 20, 0);
    kvs_engine_stats(e, &st);
    bb = st.tier.host_block_bytes;
    assert_true(bb > 0);
    kvs_engine_free(e);

    unlink(TIER_FILE);
    e = engine_new(md, slots * bb, disk_size);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.tier.host_slots, slots);

    return e;
}


/* How many of the book's names are set in v. */
static uint32_t
count(const book_t *bk, const uint8_t *v)
{
    return kvs_test_engine_ix_count(v, bk->n);
}


/* A test's start: md generated from name and seed, its engine with a
 * host tier of slots slots (and a disk tier of disk bytes, if any),
 * N_PROMPT prompts from seed in tok with their names in a new book,
 * subscribed. */
static kvs_engine_t *
setup(kvs_test_model_t *md, const char *name, uint32_t seed,
    uint32_t slots, uint64_t disk, int32_t (*tok)[LEN], book_t **bk,
    kvs_engine_index_t *ix)
{
    uint32_t       s;
    kvs_engine_t  *e;

    kvs_test_model_small(md, name, 256, seed, 1);
    e = engine_slots(md, slots, disk);
    *bk = calloc(1, sizeof(book_t));
    assert_non_null(*bk);
    memset(ix, 0, sizeof(*ix));

    for (s = 0; s < N_PROMPT; s++) {
        kvs_test_engine_ix_prompt(tok[s], LEN, seed + s);
        (void) kvs_test_engine_ix_names(e, MODEL, tok[s], LEN, BT, NULL,
                                        &(*bk)->name[s * PB], PB);
    }

    (*bk)->n = N_NAMES;
    kvs_engine_index_subscribe(e, 1);

    return e;
}


/* Takes the engine's record, checks it against the book and applies
 * it: the frame's six lists (pool, disk, host tier; adds, deletes). */
static void
take(kvs_engine_t *e, kvs_engine_index_t *ix, book_t *bk)
{
    long       k;
    uint32_t   i, j, end, list, cnt[6];
    kvs_err_t  err;

    if (kvs_engine_index_take(e, ix, &err) != KVS_OK) {
        fail_msg("take: %s", err.msg);
    }

    if (ix->resync) {
        memset(bk->pool, 0, sizeof(bk->pool));
        memset(bk->host, 0, sizeof(bk->host));
        memset(bk->disk, 0, sizeof(bk->disk));
    }

    cnt[0] = ix->n_add;
    cnt[1] = ix->n_del;
    cnt[2] = ix->n_dadd;
    cnt[3] = ix->n_ddel;
    cnt[4] = ix->n_hadd;
    cnt[5] = ix->n_hdel;

    for (i = 0, list = 0, end = cnt[0]; list < 6; list++) {
        if (list > 0) {
            end += cnt[list];
        }

        for ( ; i < end; i++) {
            k = kvs_test_engine_ix_find(bk->name, bk->n, ix->names[i]);
            if (k < 0) {
                fail_msg("name %u of the take is no prompt's block", i);
            }

            switch (list) {

            case 0:
                assert_false(bk->pool[k] && !ix->resync);
                bk->pool[k] = 1;
                break;

            case 1:
                if (!bk->pool[k]) {
                    fail_msg("pool del of block %ld, not in the pool", k);
                }
                bk->pool[k] = 0;
                bk->spilled[k] = 1;
                break;

            case 2:
                if (!bk->spilled[k] || (bk->disk[k] && !ix->resync)) {
                    fail_msg("disk add of block %ld: spilled %d, on disk "
                             "%d", k, bk->spilled[k], bk->disk[k]);
                }
                bk->disk[k] = 1;
                bk->dadds++;
                break;

            case 3:
                if (!bk->disk[k] && !bk->spilled[k]) {
                    fail_msg("disk del of block %ld, never spilled", k);
                }
                bk->ddels += bk->disk[k];
                bk->disk[k] = 0;
                break;

            case 4:
                if (!bk->spilled[k] || (bk->host[k] && !ix->resync)) {
                    fail_msg("host add of block %ld: spilled %d, in host "
                             "memory %d", k, bk->spilled[k], bk->host[k]);
                }
                bk->host[k] = 1;
                bk->hosted[k] = 1;
                bk->hadds++;
                break;

            default:
                if (!bk->host[k]) {
                    fail_msg("host del of block %ld, not in the host tier",
                             k);
                }
                bk->host[k] = 0;
                bk->hdels++;
                break;
            }
        }
    }

    /* one lower tier a name, the faster */
    for (j = 0; j < bk->n; j++) {
        if (bk->host[j] && bk->disk[j]) {
            fail_msg("block %u published in both lower tiers", j);
        }
    }
}


/* The resync's listing: the same book, pool and lower tiers whole. */
static void
resync_same(kvs_engine_t *e, kvs_engine_index_t *ix, book_t *bk)
{
    uint8_t  pool[N_NAMES], host[N_NAMES], disk[N_NAMES];

    memcpy(pool, bk->pool, sizeof(pool));
    memcpy(host, bk->host, sizeof(host));
    memcpy(disk, bk->disk, sizeof(disk));

    kvs_engine_index_resync(e);
    (void) kvs_engine_step(e);
    take(e, ix, bk);

    assert_int_equal(ix->resync, 1);
    assert_int_equal(ix->n_hadd, count(bk, host));
    assert_int_equal(ix->n_dadd, count(bk, disk));
    assert_int_equal(ix->n_hdel + ix->n_ddel, 0);
    assert_memory_equal(pool, bk->pool, sizeof(pool));
    assert_memory_equal(host, bk->host, sizeof(host));
    assert_memory_equal(disk, bk->disk, sizeof(disk));
}


static void
test_host_alone(void **state)
{
    int32_t             tok[N_PROMPT][LEN];
    uint32_t            s, i, loaded;
    book_t             *bk;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_index_t  ix;
    kvs_engine_stats_t  st;

    (void) state;

    e = setup(&md, "test-engine-thost-ix", 300, 8, 0, tok, &bk, &ix);

    /* prompt 0 alone: 3 pool adds, nothing lower; no host weight yet */
    (void) kvs_test_engine_ix_run1(e, tok[0], LEN, NULL);
    take(e, &ix, bk);
    assert_int_equal(ix.n_add, PB);
    assert_int_equal(ix.n_hadd + ix.n_hdel + ix.n_dadd + ix.n_ddel, 0);
    assert_int_equal(ix.host_weight, 0);
    assert_int_equal(ix.tier_weight, 0);

    /* prompts 1..4 fill the pool: prompt 0 leaves it for the host tier,
     * its 3 names host adds */
    for (s = 1; s <= 4; s++) {
        (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
        take(e, &ix, bk);
    }

    for (i = 0; i < PB; i++) {
        assert_false(bk->pool[i]);
        assert_true(bk->host[i]);
    }

    kvs_engine_stats(e, &st);
    assert_true(st.tier.host_used >= PB);
    assert_int_equal(count(bk, bk->host), st.tier.host_used);
    assert_int_equal(bk->hdels, 0);

    /* prompt 0 copied back: the pool's again (3 pool adds), and still
     * the host tier's (its slot keeps the block); the weight is said */
    loaded = (uint32_t) st.tier.host_loaded_blocks;
    (void) kvs_test_engine_ix_run1(e, tok[0], LEN, NULL);
    take(e, &ix, bk);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.tier.host_loaded_blocks - loaded, PB);

    for (i = 0; i < PB; i++) {
        assert_true(bk->pool[i]);
        assert_true(bk->host[i]);
    }

    assert_int_equal(count(bk, bk->host), st.tier.host_used);
    assert_true(ix.host_weight >= 1 && ix.host_weight <= 1000);
    assert_int_equal(ix.tier_weight, 0);          /* no disk tier */
    printf("host weight: %u per mille (%" PRIu64 " bytes copied in %"
           PRIu64 " ns)\n", ix.host_weight, st.tier.host_bytes_out,
           st.tier.host_load_ns);

    /* many more prompts through a tier of 8 slots: it evicts, without a
     * disk the blocks go, each a host delete; the book stays the tier */
    for (s = 5; s < N_PROMPT; s++) {
        (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
        take(e, &ix, bk);
        kvs_engine_stats(e, &st);
        assert_int_equal(count(bk, bk->host), st.tier.host_used);
    }

    kvs_engine_stats(e, &st);
    assert_int_equal(st.tier.host_used, 8);
    assert_true(st.tier.host_evicted > 0);
    assert_true(bk->hdels > 0);
    assert_int_equal(bk->hadds - bk->hdels, st.tier.host_used);
    assert_int_equal(count(bk, bk->pool), st.cache_blocks);

    resync_same(e, &ix, bk);

    kvs_engine_index_free(&ix);
    kvs_engine_free(e);
    kvs_test_model_free(&md);
    free(bk);
}


static void
test_host_and_disk(void **state)
{
    int32_t             tok[N_PROMPT][LEN];
    uint32_t            s, i, both;
    uint64_t            disk_loaded;
    book_t             *bk;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_index_t  ix;
    kvs_engine_stats_t  st;

    (void) state;

    e = setup(&md, "test-engine-thost-ix2", 400, 3, 1u << 20, tok, &bk,
              &ix);

    /* prompts 0..5: the pool holds 4 prompts, the host tier 1: prompt 0
     * went through the host tier and on to the disk */
    for (s = 0; s <= 5; s++) {
        (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
        take(e, &ix, bk);
    }

    kvs_test_engine_ix_settle(e);
    take(e, &ix, bk);

    for (i = 0; i < PB; i++) {
        assert_false(bk->pool[i]);
        assert_false(bk->host[i]);
        assert_true(bk->hosted[i]);       /* host add, then host del */
        assert_true(bk->disk[i]);         /* ... then disk add */
    }

    kvs_engine_stats(e, &st);
    assert_true(st.tier.host_to_disk >= PB);
    assert_int_equal(count(bk, bk->host), st.tier.host_used);
    assert_int_equal(count(bk, bk->disk), st.tier.used);
    assert_true(bk->hdels >= PB);

    /* prompt 0 back from the disk: the pool's again, still on disk */
    disk_loaded = st.tier.loaded_blocks;
    (void) kvs_test_engine_ix_run1(e, tok[0], LEN, NULL);
    take(e, &ix, bk);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.tier.loaded_blocks - disk_loaded, PB);

    for (i = 0; i < PB; i++) {
        assert_true(bk->pool[i]);
        assert_true(bk->disk[i]);
    }

    /* the pool evicts its least recently used blocks first: prompts 3,
     * 4, 5, then prompt 0, which goes into the host tier first:
     * published there and no longer as the disk's (its disk slot
     * stays), the disk's count less those */
    for (s = 6; s <= 9; s++) {
        (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
        take(e, &ix, bk);
    }

    kvs_test_engine_ix_settle(e);
    take(e, &ix, bk);
    kvs_engine_stats(e, &st);

    for (both = 0, i = 0; i < PB; i++) {
        both += bk->host[i];
        assert_false(bk->pool[i]);
        assert_false(bk->disk[i]);
    }

    assert_int_equal(both, PB);
    assert_int_equal(count(bk, bk->host), st.tier.host_used);
    assert_int_equal(count(bk, bk->disk), st.tier.used - both);

    /* prompts 10..12: the host tier hands prompt 0 on to the disk, which
     * has it already: a host delete and a disk add at once */
    for (s = 10; s <= 12; s++) {
        (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
        take(e, &ix, bk);
    }

    for (i = 0; i < PB; i++) {
        assert_false(bk->host[i]);
        assert_true(bk->disk[i]);
    }

    kvs_test_engine_ix_settle(e);
    take(e, &ix, bk);
    kvs_engine_stats(e, &st);

    /* every block in one lower tier at most (take checks it), the host
     * tier's names its slots in use */
    assert_int_equal(count(bk, bk->host), st.tier.host_used);
    assert_true(count(bk, bk->disk) <= st.tier.used);
    assert_true(ix.tier_weight >= 1 && ix.tier_weight <= 1000);

    resync_same(e, &ix, bk);

    kvs_engine_index_free(&ix);
    kvs_engine_free(e);
    kvs_test_model_free(&md);
    unlink(TIER_FILE);
    free(bk);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_host_alone),
        cmocka_unit_test(test_host_and_disk),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
