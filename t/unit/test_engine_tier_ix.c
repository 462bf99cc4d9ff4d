/*
 * test_engine_tier_ix: the disk tier's blocks in the prefix index
 * (kvs_engine_tier_ix.c): the publish and unpublish plan an engine hands
 * its publisher.
 *
 * A small generated model, a pool of 12 blocks and a disk tier of 6
 * slots; every prompt's block names are computed here as a gateway
 * computes them.  The takes are followed in a book of what the index
 * would hold per tier: a pool add is a name not in the pool, a pool
 * delete one in it; a disk add is a name that left the pool (spilled)
 * and is not on disk yet, a disk delete one on disk (or one written and
 * reclaimed between two takes, which nets into the delete).  After the writer
 * is done, the book's disk names are exactly as many as the tier holds,
 * every prompt's evicted blocks came in as disk adds once written, the
 * tier's reclaims came out as disk deletes, a prompt loaded back from
 * the disk is in both tiers, a resync lists both tiers whole, and the
 * tier weight is said once loads and prefills were measured.
 */

#include "kvs_test_engine_ix.h"

#define BT        16
#define N_BLOCKS  12
#define SLOTS     6
#define MODEL     "tiny-tier-index"
#define N_PROMPT  16                  /* prompts a test runs */
#define LEN       48                  /* their tokens: 3 blocks */
#define PB        (LEN / BT)


typedef struct {
    kvs_index_name_t  name[N_PROMPT * PB];
    uint8_t           pool[N_PROMPT * PB];   /* the index's view */
    uint8_t           disk[N_PROMPT * PB];
    uint8_t           spilled[N_PROMPT * PB];
    uint32_t          n;
    uint64_t          dadds, ddels;
} book_t;


static const char *
tier_path(void)
{
    static char  path[256];

    snprintf(path, sizeof(path), "%s.%d",
             kvs_test_tmp("test_engine_tier_ix"), (int) getpid());

    return path;
}


static kvs_engine_t *
engine_new(const kvs_test_model_t *md, uint64_t tier_size)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_ix_conf(&conf, md, BT, N_BLOCKS, MODEL);
    conf.tier_path = tier_path();
    conf.tier_size = tier_size;
    conf.tier_model = 1;
    conf.tier_load_always = 1;

    return kvs_test_engine_new(&conf);
}


/* Prompt seed's block names into the book (at seed * PB). */
static void
book_names(book_t *bk, kvs_engine_t *e, const int32_t *tok, uint32_t seed)
{
    (void) kvs_test_engine_ix_names(e, MODEL, tok, LEN, BT, NULL,
                                    &bk->name[seed * PB], PB);

    if (bk->n < (seed + 1) * PB) {
        bk->n = (seed + 1) * PB;
    }
}


static long
book_find(const book_t *bk, const uint8_t *name)
{
    uint32_t  i;

    for (i = 0; i < bk->n; i++) {
        if (memcmp(bk->name[i].b, name, KVS_INDEX_NAME_LEN) == 0) {
            return i;
        }
    }

    return -1;
}


/* Takes and checks the engine's record against the book, and applies
 * it.  A resync (the listing) replaces both tiers' views. */
static void
take(kvs_engine_t *e, kvs_engine_index_t *ix, book_t *bk)
{
    long       k;
    uint32_t   i, d;
    kvs_err_t  err;

    if (kvs_engine_index_take(e, ix, &err) != KVS_OK) {
        fail_msg("take: %s", err.msg);
    }

    if (ix->resync) {
        memset(bk->pool, 0, sizeof(bk->pool));
        memset(bk->disk, 0, sizeof(bk->disk));
    }

    d = ix->n_add + ix->n_del;

    for (i = 0; i < d + ix->n_dadd + ix->n_ddel; i++) {
        k = book_find(bk, ix->names[i]);
        if (k < 0) {
            fail_msg("name %u of the take is no prompt's block", i);
        }

        if (i < ix->n_add) {
            assert_false(bk->pool[k] && !ix->resync);
            bk->pool[k] = 1;

        } else if (i < d) {
            if (!bk->pool[k]) {
                fail_msg("pool del of block %ld, not in the pool", k);
            }
            bk->pool[k] = 0;
            bk->spilled[k] = 1;

        } else if (i < d + ix->n_dadd) {
            /* only what left the pool at some time reaches the disk */
            if (!bk->spilled[k] || (bk->disk[k] && !ix->resync)) {
                fail_msg("disk add of block %ld: spilled %d, on disk %d",
                         k, bk->spilled[k], bk->disk[k]);
            }
            bk->disk[k] = 1;
            bk->dadds++;

        } else {
            /* written and reclaimed between two takes nets into a
             * delete alone (the last event wins, as in the pool's) */
            if (!bk->disk[k] && !bk->spilled[k]) {
                fail_msg("disk del of block %ld, never spilled", k);
            }
            bk->ddels += bk->disk[k];
            bk->disk[k] = 0;
        }
    }
}


static uint32_t
count(const uint8_t *v, uint32_t n)
{
    uint32_t  i, c;

    for (c = 0, i = 0; i < n; i++) {
        c += v[i];
    }

    return c;
}


/* An engine whose tier has exactly SLOTS slots (the slot's size read
 * from an engine with a larger tier first), on a new file. */
static kvs_engine_t *
engine_slots(const kvs_test_model_t *md)
{
    uint64_t            slot;
    kvs_engine_t       *e;
    kvs_engine_stats_t  st;

    unlink(tier_path());
    e = engine_new(md, 1u << 20);
    kvs_engine_stats(e, &st);
    slot = st.tier.slot_bytes;
    assert_true(slot > 0);
    kvs_engine_free(e);
    unlink(tier_path());

    e = engine_new(md, 4096 + SLOTS * slot);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.tier.slots, SLOTS);

    return e;
}


/* Lets the writer finish, and one step drain what it reported. */
static void
settle(kvs_engine_t *e)
{
    kvs_engine_tier_wait(e);
    (void) kvs_engine_step(e);
}


/* A test's start: md generated from name and seed, its engine on a tier
 * of SLOTS slots, an empty book and take. */
static kvs_engine_t *
setup(kvs_test_model_t *md, const char *name, uint64_t seed, book_t **bk,
    kvs_engine_index_t *ix)
{
    kvs_engine_t  *e;

    kvs_test_model_small(md, name, 256, seed, 1);
    e = engine_slots(md);

    *bk = calloc(1, sizeof(book_t));
    assert_non_null(*bk);
    memset(ix, 0, sizeof(*ix));

    return e;
}


static void
teardown(kvs_engine_t *e, kvs_test_model_t *md, book_t *bk,
    kvs_engine_index_t *ix)
{
    kvs_engine_index_free(ix);
    kvs_engine_free(e);
    kvs_test_model_free(md);
    unlink(tier_path());
    free(bk);
}


static void
test_disk_names(void **state)
{
    int32_t             tok[N_PROMPT][LEN];
    uint32_t            s, i, loaded;
    book_t             *bk;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_index_t  ix;
    kvs_engine_stats_t  st;

    (void) state;

    e = setup(&md, "test-engine-tier-ix", 0x71e5, &bk, &ix);

    for (s = 0; s < N_PROMPT; s++) {
        kvs_test_engine_ix_prompt(tok[s], LEN, s);
        book_names(bk, e, tok[s], s);
    }

    kvs_engine_index_subscribe(e, 1);

    /* prompt 0 alone: 3 pool adds, nothing on disk */
    (void) kvs_test_engine_ix_run1(e, tok[0], LEN, NULL);
    take(e, &ix, bk);
    assert_int_equal(ix.n_add, PB);
    assert_int_equal(ix.n_dadd + ix.n_ddel, 0);
    assert_int_equal(ix.tier_weight, 0);      /* no load measured yet */

    /* prompts 1..4 (4 x 3 blocks, a pool of 12): prompt 0 is evicted,
     * spilled, and once written its 3 names come as disk adds */
    for (s = 1; s <= 4; s++) {
        (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
        take(e, &ix, bk);
    }

    settle(e);
    take(e, &ix, bk);

    for (i = 0; i < PB; i++) {
        assert_false(bk->pool[i]);
        assert_true(bk->disk[i]);
    }

    kvs_engine_stats(e, &st);
    assert_int_equal(count(bk->disk, bk->n), st.tier.used);

    /* prompt 0 comes back from the disk: in the pool again, and still on
     * disk (the slot stays); the weight is said now */
    loaded = kvs_test_engine_ix_run1(e, tok[0], LEN, NULL);
    assert_int_equal(loaded, LEN - 1);        /* all but the last token */
    take(e, &ix, bk);

    for (i = 0; i < PB; i++) {
        assert_true(bk->pool[i]);
        assert_true(bk->disk[i]);
    }

    assert_true(ix.tier_weight >= 1 && ix.tier_weight <= 1000);

    /* many more prompts through a tier of 6 slots: it reclaims, and
     * every reclaimed block comes out as a disk delete */
    for (s = 5; s < N_PROMPT; s++) {
        (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
        take(e, &ix, bk);
    }

    settle(e);
    take(e, &ix, bk);

    kvs_engine_stats(e, &st);
    assert_true(bk->ddels > 0);
    assert_true(bk->dadds >= bk->ddels + st.tier.used);
    assert_int_equal(count(bk->disk, bk->n), st.tier.used);
    assert_int_equal(st.tier.used, SLOTS);

    /* a resync lists both tiers whole, and nothing changes */
    memcpy(bk->spilled, bk->disk, sizeof(bk->disk));
    kvs_engine_index_resync(e);
    (void) kvs_engine_step(e);
    {
        uint8_t  pool[N_PROMPT * PB], disk[N_PROMPT * PB];

        memcpy(pool, bk->pool, sizeof(pool));
        memcpy(disk, bk->disk, sizeof(disk));
        take(e, &ix, bk);
        assert_int_equal(ix.resync, 1);
        assert_int_equal(ix.n_dadd, SLOTS);
        assert_memory_equal(pool, bk->pool, sizeof(pool));
        assert_memory_equal(disk, bk->disk, sizeof(disk));
    }

    teardown(e, &md, bk, &ix);
}


/* Without a subscriber nothing is recorded, yet the disk names are
 * kept: a later subscribe lists them. */
static void
test_listing_after_subscribe(void **state)
{
    int32_t             tok[6][LEN];
    uint32_t            s;
    book_t             *bk;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_index_t  ix;
    kvs_engine_stats_t  st;

    (void) state;

    e = setup(&md, "test-engine-tier-ix2", 0x71e6, &bk, &ix);

    for (s = 0; s < 6; s++) {
        kvs_test_engine_ix_prompt(tok[s], LEN, s + 100);
        book_names(bk, e, tok[s], s);
        (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
    }

    settle(e);
    kvs_engine_stats(e, &st);
    assert_true(st.tier.used > 0);

    /* every name may have left the pool: the listing's disk adds are
     * checked against the tier's count */
    memset(bk->spilled, 1, sizeof(bk->spilled));
    kvs_engine_index_subscribe(e, 1);
    (void) kvs_engine_step(e);
    take(e, &ix, bk);
    assert_int_equal(ix.resync, 1);
    assert_int_equal(ix.n_dadd, st.tier.used);
    assert_int_equal(ix.n_add, st.cache_blocks);

    teardown(e, &md, bk, &ix);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_disk_names),
        cmocka_unit_test(test_listing_after_subscribe),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
