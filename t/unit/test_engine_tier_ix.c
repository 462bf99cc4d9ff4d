/*
 * test_engine_tier_ix: the disk tier's blocks in the prefix index
 * (kvs_engine_tier_ix.c): the publish and unpublish plan an engine hands
 * its publisher.
 *
 * A small generated model, a pool of 12 blocks and a disk tier of 8
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
 *
 * Across a restart (same epoch), the blocks the file kept are published
 * by the new engine with the names they were spilled under, in batches
 * of at most 256 disk adds a step, each once; a kept block the tier
 * reclaims later comes out as a disk delete.
 *
 * While the engine serves, one block of a prompt is corrupted on disk
 * between its spill and its load (a flipped KV byte; then the file cut
 * short inside a slot): the load stops at that block, the request
 * computes the rest and replies bit for bit as a cache-off engine, the
 * slot is dropped and its name comes out as a disk delete, the corrupt
 * counter moves and no pool block stays reserved (also under ASan).
 *
 * On the engine's own thread, blocks the writer finishes after the last
 * request's step are published without another request: the watch wakes
 * the idle engine to drain its news.
 */

#include "kvs_test_engine_ix.h"
#include "kvs_test_acopy.h"

#include <fcntl.h>
#include <poll.h>

/* the disk tier's file: one a process */
#define TIER_FILE  kvs_test_tmp_pid("test_engine_tier_ix")

#define BT        16
#define N_BLOCKS  12
#define SLOTS     8                   /* 3 blocks of prompt 0, 3 that
                                         its load evicts, 1 that its
                                         prefill evicts: no reclaim of
                                         what the load just read, however
                                         late the writer is */
#define MODEL     "tiny-tier-index"
#define N_PROMPT  16                  /* prompts a test runs */
#define N_MANY    110                 /* the restart test's, before */
#define N_NEW     40                  /* and after the restart */
#define N_BOOK    (N_MANY + N_NEW)
#define WALK      256                 /* kept slots published a step */
#define LEN       48                  /* their tokens: 3 blocks */
#define PB        (LEN / BT)


typedef struct {
    kvs_index_name_t  name[N_BOOK * PB];
    uint8_t           pool[N_BOOK * PB];     /* the index's view */
    uint8_t           disk[N_BOOK * PB];
    uint8_t           spilled[N_BOOK * PB];
    uint32_t          n;
    uint64_t          dadds, ddels;
} book_t;


/* the asynchronous copies' wrapper (kvs_test_acopy.h) the next engines
 * get; NULL: the CPU backend as it is */
static kvs_test_acopy_t  *acopy;


static kvs_engine_t *
engine_new(const kvs_test_model_t *md, uint64_t tier_size)
{
    uint32_t           delay;
    kvs_engine_conf_t  conf;

    kvs_test_engine_ix_conf(&conf, md, BT, N_BLOCKS, MODEL);
    conf.tier_path = TIER_FILE;
    conf.tier_size = tier_size;
    conf.tier_model = 1;
    conf.tier_load_always = 1;

    if (acopy != NULL) {
        /* a wrapper serves one engine: zeroed but for its delay */
        delay = acopy->delay_us;
        memset(acopy, 0, sizeof(*acopy));
        acopy->delay_us = delay;
        conf.backend_hook = kvs_test_acopy_wrap;
        conf.backend_hook_arg = acopy;
    }

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
        k = kvs_test_engine_ix_find(bk->name, bk->n, ix->names[i]);
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


/* An engine whose tier has exactly slots slots (the slot's size read
 * from an engine with a larger tier first), on a new file. */
static kvs_engine_t *
engine_n_slots(const kvs_test_model_t *md, uint32_t slots)
{
    uint64_t            slot;
    kvs_engine_t       *e;
    kvs_engine_stats_t  st;

    unlink(TIER_FILE);
    e = engine_new(md, 1u << 20);
    kvs_engine_stats(e, &st);
    slot = st.tier.slot_bytes;
    assert_true(slot > 0);
    kvs_engine_free(e);
    unlink(TIER_FILE);

    e = engine_new(md, 4096 + slots * slot);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.tier.slots, slots);

    return e;
}


static kvs_engine_t *
engine_slots(const kvs_test_model_t *md)
{
    return engine_n_slots(md, SLOTS);
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
    unlink(TIER_FILE);
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

    kvs_test_engine_ix_settle(e);
    take(e, &ix, bk);

    for (i = 0; i < PB; i++) {
        assert_false(bk->pool[i]);
        assert_true(bk->disk[i]);
    }

    kvs_engine_stats(e, &st);
    assert_int_equal(kvs_test_engine_ix_count(bk->disk, bk->n), st.tier.used);

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

    /* many more prompts through a tier of SLOTS slots: it reclaims, and
     * every reclaimed block comes out as a disk delete */
    for (s = 5; s < N_PROMPT; s++) {
        (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
        take(e, &ix, bk);
    }

    kvs_test_engine_ix_settle(e);
    take(e, &ix, bk);

    kvs_engine_stats(e, &st);
    assert_true(bk->ddels > 0);
    assert_true(bk->dadds >= bk->ddels + st.tier.used);
    assert_int_equal(kvs_test_engine_ix_count(bk->disk, bk->n), st.tier.used);
    assert_int_equal(st.tier.used, SLOTS);

    /* a resync lists both tiers whole, and nothing changes */
    memcpy(bk->spilled, bk->disk, sizeof(bk->disk));
    kvs_engine_index_resync(e);
    (void) kvs_engine_step(e);
    {
        uint8_t  pool[N_BOOK * PB], disk[N_BOOK * PB];

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

    kvs_test_engine_ix_settle(e);
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


/* The blocks a tier file kept across a restart are published by the
 * new engine, a bounded batch a step, with the names the old engine
 * published them under; the tier's reclaims unpublish them. */
static void
test_kept_published(void **state)
{
    int                 busy;
    int32_t             tok[LEN];
    uint32_t            s, k, steps, used, still;
    uint64_t            slot_bytes, dadds;
    book_t             *bk;
    uint8_t            *was;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_index_t  ix;
    kvs_engine_stats_t  st;

    (void) state;

    kvs_test_model_small(&md, "test-engine-tier-ix3", 256, 0x71e7, 1);

    /* N_MANY prompts of 3 blocks through a pool of 12 and a tier of
     * WALK + 64 slots: over WALK blocks end on disk, all named */
    e = engine_n_slots(&md, WALK + 64);
    bk = calloc(1, sizeof(book_t));
    was = calloc(1, sizeof(bk->disk));
    assert_non_null(bk);
    assert_non_null(was);
    memset(&ix, 0, sizeof(ix));

    kvs_engine_index_subscribe(e, 1);

    for (s = 0; s < N_MANY; s++) {
        kvs_test_engine_ix_prompt(tok, LEN, s + 1000);
        book_names(bk, e, tok, s);
        (void) kvs_test_engine_ix_run1(e, tok, LEN, NULL);
        kvs_test_engine_ix_settle(e);                    /* no spill dropped */
        take(e, &ix, bk);
    }

    kvs_test_engine_ix_settle(e);
    take(e, &ix, bk);

    kvs_engine_stats(e, &st);
    used = (uint32_t) st.tier.used;
    slot_bytes = st.tier.slot_bytes;
    if (used <= WALK) {
        fail_msg("%u blocks on disk, %llu spills dropped", used,
                 (unsigned long long) st.tier.spill_dropped);
    }
    assert_int_equal(kvs_test_engine_ix_count(bk->disk, bk->n), used);
    memcpy(was, bk->disk, sizeof(bk->disk));
    kvs_engine_free(e);

    /* the same file, the same weights: kept, and published a batch a
     * step; the pool is empty, so the disk adds are all there is */
    e = engine_new(&md, 4096 + (WALK + 64) * slot_bytes);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.tier.kept, used);
    assert_string_equal(st.tier.discarded, "");

    memset(bk->pool, 0, sizeof(bk->pool));
    memset(bk->disk, 0, sizeof(bk->disk));
    memset(bk->spilled, 1, sizeof(bk->spilled));
    kvs_engine_index_subscribe(e, 1);

    dadds = 0;
    steps = 0;

    do {
        busy = kvs_engine_step(e);
        take(e, &ix, bk);
        assert_true(ix.n_dadd <= WALK);
        assert_int_equal(ix.n_add + ix.n_del + ix.n_ddel, 0);
        dadds += ix.n_dadd;
        steps++;
        assert_true(steps <= 8);
    } while (busy);

    /* every kept block once, under its old name: WALK + 64 slots are
     * walked in 2 steps */
    printf("restart: %u kept blocks published in %u steps\n", used,
           steps);
    assert_int_equal(steps, 2);
    assert_int_equal(dadds, used);
    assert_memory_equal(was, bk->disk, sizeof(bk->disk));

    /* idle now, and nothing more to say */
    assert_int_equal(kvs_engine_step(e), 0);
    take(e, &ix, bk);
    assert_int_equal(ix.n_dadd + ix.n_ddel, 0);

    /* a resync lists them again, whole */
    kvs_engine_index_resync(e);
    (void) kvs_engine_step(e);
    take(e, &ix, bk);
    assert_int_equal(ix.resync, 1);
    assert_int_equal(ix.n_dadd, used);
    assert_memory_equal(was, bk->disk, sizeof(bk->disk));

    /* new prompts fill the tier: the kept blocks it reclaims come out
     * as disk deletes, and the book stays the tier's count */
    bk->ddels = 0;

    for (s = 0; s < N_NEW; s++) {
        kvs_test_engine_ix_prompt(tok, LEN, s + 5000);
        book_names(bk, e, tok, N_MANY + s);
        (void) kvs_test_engine_ix_run1(e, tok, LEN, NULL);
        take(e, &ix, bk);
    }

    kvs_test_engine_ix_settle(e);
    take(e, &ix, bk);

    kvs_engine_stats(e, &st);

    for (still = 0, k = 0; k < N_MANY * PB; k++) {
        still += bk->disk[k];
    }

    /* some kept blocks were reclaimed, each a disk delete (the rest
     * of the deletes are new blocks reclaimed in turn) */
    assert_true(still < used);
    assert_true(bk->ddels >= used - still);
    assert_int_equal(kvs_test_engine_ix_count(bk->disk, bk->n), st.tier.used);

    kvs_engine_index_free(&ix);
    kvs_engine_free(e);
    kvs_test_model_free(&md);
    unlink(TIER_FILE);
    free(was);
    free(bk);
}


/* The slot of the file that holds the block of tokens tok[BT], found
 * by its tokens (after the slot's 512-byte header); -1 if none. */
static long
slot_of(const kvs_engine_stats_t *st, const int32_t *tok)
{
    int       fd;
    long      i, found;
    uint8_t   want[4 * BT], got[4 * BT];
    uint32_t  k;

    for (k = 0; k < BT; k++) {
        want[4 * k] = (uint8_t) tok[k];
        want[4 * k + 1] = (uint8_t) (tok[k] >> 8);
        want[4 * k + 2] = (uint8_t) (tok[k] >> 16);
        want[4 * k + 3] = (uint8_t) (tok[k] >> 24);
    }

    fd = open(TIER_FILE, O_RDONLY);
    assert_true(fd >= 0);
    found = -1;

    for (i = 0; found < 0 && i < (long) st->tier.slots; i++) {
        if (pread(fd, got, sizeof(got),
                  (off_t) (4096 + i * st->tier.slot_bytes + 512))
            == (ssize_t) sizeof(got)
            && memcmp(got, want, sizeof(got)) == 0)
        {
            found = i;
        }
    }

    close(fd);

    return found;
}


static void
test_corrupt_mid_run(void **state)
{
    int                 cut, fd;
    int32_t             tok[5][LEN];
    uint8_t             b;
    uint32_t            s, k, first;
    uint64_t            off, corrupt, failed, loaded;
    long                slot[PB];
    book_t             *bk;
    kvs_engine_t       *e, *cold;
    kvs_test_model_t    md;
    kvs_engine_req_t    req;
    kvs_engine_out_t    a, c;
    kvs_engine_conf_t   cc;
    kvs_engine_index_t  ix;
    kvs_engine_stats_t  st;

    (void) state;

    kvs_test_model_small(&md, "test-engine-tier-ix4", 256, 0x71e8, 1);
    e = engine_n_slots(&md, 64);
    kvs_test_engine_conf(&cc, &md, BT, 64, 64, 0);
    cold = kvs_test_engine_new(&cc);

    bk = calloc(1, sizeof(book_t));
    assert_non_null(bk);
    memset(&ix, 0, sizeof(ix));
    kvs_engine_index_subscribe(e, 1);

    for (cut = 0; cut <= 1; cut++) {
        /* prompt 0 of this round, evicted to disk by 4 others */
        for (s = 0; s < 5; s++) {
            kvs_test_engine_ix_prompt(tok[s], LEN, 2000 + 10 * cut + s);
            book_names(bk, e, tok[s], 5 * cut + s);
        }

        kvs_test_engine_req(&req, tok[0], LEN, 8, 5);
        kvs_test_engine_run(e, &req, &a, NULL, NULL);
        kvs_engine_out_free(&a);
        take(e, &ix, bk);

        for (s = 1; s < 5; s++) {
            (void) kvs_test_engine_ix_run1(e, tok[s], LEN, NULL);
            kvs_test_engine_ix_settle(e);
            take(e, &ix, bk);
        }

        kvs_engine_stats(e, &st);

        for (k = 0; k < PB; k++) {
            assert_false(bk->pool[5 * cut * PB + k]);
            assert_true(bk->disk[5 * cut * PB + k]);
            slot[k] = slot_of(&st, tok[0] + k * BT);
            assert_true(slot[k] >= 0);
        }

        /* block 1 goes bad: a flipped KV byte, or the file cut inside
         * its slot (which cuts every slot after it, too) */
        fd = open(TIER_FILE, O_RDWR);
        assert_true(fd >= 0);
        off = 4096 + (uint64_t) slot[1] * st.tier.slot_bytes;

        if (!cut) {
            off += 512 + 4 * BT + 100;
            assert_int_equal(pread(fd, &b, 1, (off_t) off), 1);
            b ^= 0x40;
            assert_int_equal(pwrite(fd, &b, 1, (off_t) off), 1);
            first = 1;

        } else {
            assert_int_equal(ftruncate(fd, (off_t) (off + 700)), 0);
            first = slot[0] < slot[1] ? 1 : 0;   /* block 0 cut too? */
        }

        close(fd);

        corrupt = st.tier.corrupt;
        failed = st.tier.load_failed;
        loaded = st.tier.loaded_blocks;

        /* the load stops at the bad block; the rest is computed, and the
         * reply is the cold engine's */
        kvs_test_engine_req(&req, tok[0], LEN, 8, 5);
        kvs_test_engine_run(e, &req, &a, NULL, NULL);
        kvs_test_engine_run(cold, &req, &c, NULL, NULL);
        kvs_test_engine_same(&a, &c, cut ? "after a cut file"
                                         : "after a flipped byte");
        printf("%s: block 1 in slot %ld (block 0 in %ld), %u tokens "
               "loaded\n", cut ? "cut file" : "flipped byte", slot[1],
               slot[0], a.n_cached_tier);
        assert_int_equal(a.n_cached_tier, first * BT);
        kvs_engine_out_free(&a);
        kvs_engine_out_free(&c);

        kvs_test_engine_ix_settle(e);
        take(e, &ix, bk);
        kvs_engine_stats(e, &st);

        assert_int_equal(st.tier.corrupt, corrupt + 1);
        assert_int_equal(st.tier.load_failed, failed + 1);
        assert_int_equal(st.tier.loaded_blocks, loaded + first);
        assert_int_equal(st.tier.load_reserved, 0);
        assert_int_equal(st.tier.loading, 0);

        /* the bad block's slot (the first read that failed) is dropped,
         * its name unpublished; a block loaded before it stays on disk;
         * all are in the pool again */
        assert_false(bk->disk[5 * cut * PB + first]);
        assert_int_equal(bk->disk[5 * cut * PB], first == 1);

        for (k = 0; k < PB; k++) {
            assert_true(bk->pool[5 * cut * PB + k]);
        }

        assert_int_equal(kvs_test_engine_ix_count(bk->disk, bk->n),
                         st.tier.used);
    }

    kvs_engine_index_free(&ix);
    kvs_engine_free(e);
    kvs_engine_free(cold);
    kvs_test_model_free(&md);
    unlink(TIER_FILE);
    free(bk);
}


/* The engine on its own thread goes idle after prompt 4, whose step
 * spilled prompt 0; the writer finishes later, and its names come as
 * disk adds with no request after (the engine thread used to wait for
 * one to drain them). */
static void
idle_drain(void)
{
    int32_t             tok[5][LEN];
    uint32_t            s, i;
    book_t             *bk;
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_req_t    req;
    kvs_engine_out_t    out;
    kvs_engine_seq_t   *h, *hs[1];
    kvs_engine_index_t  ix;
    struct pollfd       pfd;

    e = setup(&md, "test-engine-tier-ix-idle", 0x1d1e, &bk, &ix);

    for (s = 0; s < 5; s++) {
        kvs_test_engine_ix_prompt(tok[s], LEN, 40 + s);
        book_names(bk, e, tok[s], s);
    }

    assert_int_equal(kvs_engine_start(e, &err), KVS_OK);
    kvs_engine_index_subscribe(e, 1);

    pfd.fd = kvs_engine_fd(e);
    pfd.events = POLLIN;

    for (s = 0; s < 5; s++) {
        memset(&req, 0, sizeof(req));
        memset(&out, 0, sizeof(out));
        req.prompt = tok[s];
        req.n_prompt = LEN;
        req.max_tokens = 1;
        req.ignore_eos = 1;
        req.sample.top_p = 1.0f;
        assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_OK);

        while (out.finish == KVS_FINISH_NONE) {
            if (poll(&pfd, 1, 10000) != 1) {
                fail_msg("no wake-up in 10 s (prompt %u)", s);
            }

            while (kvs_engine_ready(e, hs, 1) > 0) {
                assert_true(kvs_engine_read(e, h, &out) >= 0);
            }

            take(e, &ix, bk);
        }

        assert_int_equal(out.finish, KVS_FINISH_LENGTH);
        kvs_engine_close(e, h);
        kvs_engine_out_free(&out);
    }

    /* nothing submitted from here: only the watch's wake-up brings the
     * disk adds of prompt 0's blocks */
    while (kvs_test_engine_ix_count(bk->disk, PB) < PB) {
        if (poll(&pfd, 1, 10000) != 1) {
            fail_msg("no disk add in 10 s after the last request (%u of "
                     "%u)", kvs_test_engine_ix_count(bk->disk, PB), PB);
        }

        take(e, &ix, bk);
    }

    for (i = 0; i < PB; i++) {
        assert_false(bk->pool[i]);
        assert_true(bk->disk[i]);
    }

    teardown(e, &md, bk, &ix);
}


static void
test_idle_drain(void **state)
{
    (void) state;

    idle_drain();
}


/* The same with the spills' copies off the step, each taking 100 ms: at
 * the last request's end prompt 0's blocks are still being copied out
 * of the pool, not yet queued; the idle engine polls them, queues them,
 * and their disk adds come with no request after. */
static void
test_idle_drain_async(void **state)
{
    kvs_test_acopy_t  a;

    (void) state;

    memset(&a, 0, sizeof(a));
    a.delay_us = 100000;
    acopy = &a;
    idle_drain();
    acopy = NULL;

    assert_true(a.reads >= PB);
    assert_int_equal(a.allocs, 2);
    assert_int_equal(a.frees, 2);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_disk_names),
        cmocka_unit_test(test_listing_after_subscribe),
        cmocka_unit_test(test_kept_published),
        cmocka_unit_test(test_corrupt_mid_run),
        cmocka_unit_test(test_idle_drain),
        cmocka_unit_test(test_idle_drain_async),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
