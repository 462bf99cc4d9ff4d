/*
 * test_engine_index: the engine's side of the prefix index
 * (kvs_engine_index_*): the names it gives cached blocks are the ones
 * kvs_index_name_root/_chain give for the same (model, epoch, adapter,
 * scope, tokens), computed here from the prompts alone; only new blocks
 * are reported added; a subscribe or a resync lists the whole cache
 * parents first; eviction reports the evicted names, each once; a take
 * nets a block added and evicted before it into one delete; nothing is
 * recorded unsubscribed; the load figures; and the same with the engine
 * on its own thread (the eventfd wakes the taker), for TSan.
 */

#include "kvs_test_engine_ix.h"

#include <poll.h>

#define BT        16
#define N_BLOCKS  12
#define MODEL     "tiny-index"
#define MAX_N     64                  /* names a test follows */


typedef struct {
    kvs_index_name_t  name;
    kvs_index_name_t  parent;         /* all zero: the root */
} known_t;

/* Every name the test computed, with its parent, and the names the
 * cache should hold now (added and not evicted). */
typedef struct {
    known_t   known[4 * MAX_N];
    uint32_t  n_known;
    uint8_t   held[4 * MAX_N];
} book_t;


static kvs_engine_t *
engine_new(const kvs_test_model_t *md)
{
    kvs_engine_conf_t  conf;

    kvs_test_engine_ix_conf(&conf, md, BT, N_BLOCKS, MODEL);

    return kvs_test_engine_new(&conf);
}


static void
model_new(kvs_test_model_t *md)
{
    kvs_test_model_small(md, "test-engine-index", 256, 0x1dec5, 1);
}


/* The names of tok's whole blocks, as a gateway computes them, recorded
 * in the book with their parents. */
static uint32_t
names_of(kvs_engine_t *e, book_t *bk, const int32_t *tok, uint32_t n,
    const char *scope, kvs_index_name_t *out)
{
    uint32_t  k, i;

    k = kvs_test_engine_ix_names(e, MODEL, tok, n, BT, scope, out, MAX_N);

    for (i = 0; i < k; i++) {
        assert_true(bk->n_known < 4 * MAX_N);
        bk->known[bk->n_known].name = out[i];
        memset(&bk->known[bk->n_known].parent, 0, KVS_INDEX_NAME_LEN);
        if (i > 0) {
            bk->known[bk->n_known].parent = out[i - 1];
        }
        bk->n_known++;
    }

    return k;
}


static long
book_find(const book_t *bk, const uint8_t *name)
{
    uint32_t  i;

    for (i = 0; i < bk->n_known; i++) {
        if (memcmp(bk->known[i].name.b, name, KVS_INDEX_NAME_LEN) == 0) {
            return i;
        }
    }

    return -1;
}


/* The take's names against the book: adds are known and not held yet
 * (or a resync), dels are held; no name twice.  Updates held. */
static void
book_apply(book_t *bk, const kvs_engine_index_t *ix)
{
    uint32_t  i, j;
    long      k;

    for (i = 0; i < ix->n_add + ix->n_del; i++) {
        for (j = 0; j < i; j++) {
            if (memcmp(ix->names[i], ix->names[j], KVS_INDEX_NAME_LEN)
                == 0)
            {
                fail_msg("name %u of the take is also name %u", i, j);
            }
        }

        k = book_find(bk, ix->names[i]);
        if (k < 0) {
            fail_msg("%s %u is no name of a prompt's block",
                     i < ix->n_add ? "add" : "del", i);
        }

        if (i < ix->n_add) {
            if (bk->held[k] && !ix->resync) {
                fail_msg("add %u: already held", i);
            }
            bk->held[k] = 1;

        } else {
            if (!bk->held[k]) {
                fail_msg("del %u: not held", i - ix->n_add);
            }
            bk->held[k] = 0;
        }
    }
}


static void
take(kvs_engine_t *e, kvs_engine_index_t *ix)
{
    kvs_err_t  err;

    if (kvs_engine_index_take(e, ix, &err) != KVS_OK) {
        fail_msg("take: %s", err.msg);
    }
}


static void
expect_adds(const kvs_engine_index_t *ix, const kvs_index_name_t *want,
    uint32_t n)
{
    uint32_t  i;

    assert_int_equal(ix->n_add, n);
    for (i = 0; i < n; i++) {
        assert_memory_equal(ix->names[i], want[i].b, KVS_INDEX_NAME_LEN);
    }
}


static void
test_names(void **state)
{
    uint32_t            i, n, held, first;
    long                k, up;
    book_t             *bk;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_index_t  ix;
    kvs_engine_stats_t  st;
    kvs_index_name_t    w[MAX_N], w2[MAX_N], wa[MAX_N], wb[MAX_N];
    int32_t             p0[48], p1[65], p2[100], pa[48], pb[180], pc[100];

    model_new(&md);
    e = engine_new(&md);
    bk = calloc(1, sizeof(book_t));
    assert_non_null(bk);
    memset(&ix, 0, sizeof(ix));

    /* not subscribed: the cache is named, nothing is recorded */
    kvs_test_engine_ix_prompt(p0, 48, 1);
    (void) kvs_test_engine_ix_run1(e, p0, 48, NULL);
    take(e, &ix);
    assert_int_equal(ix.n_add + ix.n_del, 0);
    assert_int_equal(ix.resync, 0);

    /* subscribe: the listing of what was cached before */
    kvs_engine_index_subscribe(e, 1);
    (void) kvs_engine_step(e);
    take(e, &ix);
    assert_int_equal(ix.resync, 1);
    n = names_of(e, bk, p0, 48, NULL, w);
    assert_int_equal(n, 3);
    expect_adds(&ix, w, 3);
    assert_int_equal(ix.n_del, 0);
    book_apply(bk, &ix);

    /* the load as of the last step; the epoch and block size */
    kvs_engine_stats(e, &st);
    assert_int_equal(ix.running, 0);
    assert_int_equal(ix.waiting, 0);
    assert_int_equal(ix.free_blocks, N_BLOCKS);
    assert_int_equal(ix.block_tokens, BT);
    assert_true(ix.epoch == st.epoch && st.epoch != 0);

    /* two blocks shared, two new: only the new ones, in order */
    memcpy(p1, p0, 32 * sizeof(int32_t));
    kvs_test_engine_ix_prompt(p1 + 32, 33, 2);
    (void) kvs_test_engine_ix_run1(e, p1, 65, NULL);
    take(e, &ix);
    assert_int_equal(ix.resync, 0);
    n = names_of(e, bk, p1, 65, NULL, w);
    assert_int_equal(n, 4);
    expect_adds(&ix, w + 2, 2);
    assert_int_equal(ix.n_del, 0);
    book_apply(bk, &ix);

    /* another scope: the same tokens, other names */
    (void) kvs_test_engine_ix_run1(e, p0, 48, "t1");
    take(e, &ix);
    n = names_of(e, bk, p0, 48, "t1", w2);
    expect_adds(&ix, w2, 3);
    assert_memory_not_equal(w2[0].b, w[0].b, KVS_INDEX_NAME_LEN);
    book_apply(bk, &ix);

    /* 8 of 12 blocks cached; 7 more wanted: evictions, reported */
    kvs_test_engine_ix_prompt(p2, 100, 3);
    (void) kvs_test_engine_ix_run1(e, p2, 100, NULL);
    take(e, &ix);
    n = names_of(e, bk, p2, 100, NULL, w);
    expect_adds(&ix, w, 6);
    assert_true(ix.n_del >= 3);
    book_apply(bk, &ix);

    /* a resync lists exactly what is held, each after its parent */
    kvs_engine_index_resync(e);
    (void) kvs_engine_step(e);
    take(e, &ix);
    assert_int_equal(ix.resync, 1);
    assert_int_equal(ix.n_del, 0);
    held = 0;
    for (i = 0; i < bk->n_known; i++) {
        held += bk->held[i];
    }
    assert_int_equal(ix.n_add, held);
    for (i = 0; i < ix.n_add; i++) {
        k = book_find(bk, ix.names[i]);
        assert_true(k >= 0 && bk->held[k]);
        if (kvs_radix_named(bk->known[k].parent.b)) {
            for (up = -1, first = 0; first < i; first++) {
                if (memcmp(ix.names[first], bk->known[k].parent.b,
                           KVS_INDEX_NAME_LEN) == 0)
                {
                    up = first;
                }
            }
            if (up < 0) {
                fail_msg("listing: name %u comes before its parent", i);
            }
        }
    }

    /* added and evicted between two takes: one delete, no add */
    kvs_test_engine_ix_prompt(pa, 48, 4);
    (void) kvs_test_engine_ix_run1(e, pa, 48, NULL);
    kvs_test_engine_ix_prompt(pb, 180, 5);
    (void) kvs_test_engine_ix_run1(e, pb, 180, NULL);
    take(e, &ix);
    n = names_of(e, bk, pa, 48, NULL, wa);
    n = names_of(e, bk, pb, 180, NULL, wb);
    assert_int_equal(n, 11);
    expect_adds(&ix, wb, 11);
    for (i = 0; i < 3; i++) {
        for (first = 0; first < ix.n_del; first++) {
            if (memcmp(ix.names[ix.n_add + first], wa[i].b,
                       KVS_INDEX_NAME_LEN) == 0)
            {
                break;
            }
        }
        if (first == ix.n_del) {
            fail_msg("block %u of a prompt added and evicted between two "
                     "takes is not among the deletes", i);
        }
        bk->held[book_find(bk, wa[i].b)] = 1;     /* as if published */
    }
    book_apply(bk, &ix);

    /* evictions not yet taken when a resync comes still go out, as
     * deletes beside the listing (else their entries would stay) */
    kvs_test_engine_ix_prompt(pc, 100, 7);
    (void) kvs_test_engine_ix_run1(e, pc, 100, NULL);
    kvs_engine_index_resync(e);
    (void) kvs_engine_step(e);
    take(e, &ix);
    (void) names_of(e, bk, pc, 100, NULL, w);
    assert_int_equal(ix.resync, 1);
    assert_true(ix.n_del >= 1);
    for (i = 0; i < ix.n_del; i++) {
        k = book_find(bk, ix.names[ix.n_add + i]);
        assert_true(k >= 0 && bk->held[k]);
    }
    book_apply(bk, &ix);
    held = 0;
    for (i = 0; i < bk->n_known; i++) {
        held += bk->held[i];
    }
    assert_int_equal(ix.n_add, held);

    /* unsubscribed: nothing recorded, nothing kept */
    kvs_engine_index_subscribe(e, 0);
    kvs_test_engine_ix_prompt(p0, 48, 6);
    (void) kvs_test_engine_ix_run1(e, p0, 48, NULL);
    take(e, &ix);
    assert_int_equal(ix.n_add + ix.n_del, 0);
    assert_int_equal(ix.resync, 0);

    kvs_engine_index_free(&ix);
    kvs_engine_free(e);
    kvs_test_model_free(&md);
    free(bk);
}


/* The engine on its own thread: the eventfd says when to take. */
static void
test_threaded(void **state)
{
    int                 got_resync;
    uint32_t            n, adds;
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_test_model_t    md;
    kvs_engine_req_t    req;
    kvs_engine_out_t    out;
    kvs_engine_seq_t   *h, *hs[1];
    kvs_engine_index_t  ix;
    kvs_index_name_t    w[MAX_N];
    book_t             *bk;
    struct pollfd       pfd;
    int32_t             p0[80];

    model_new(&md);
    e = engine_new(&md);
    bk = calloc(1, sizeof(book_t));
    assert_non_null(bk);
    memset(&ix, 0, sizeof(ix));
    memset(&out, 0, sizeof(out));

    assert_int_equal(kvs_engine_start(e, &err), KVS_OK);
    kvs_engine_index_subscribe(e, 1);

    kvs_test_engine_ix_prompt(p0, 80, 7);
    n = names_of(e, bk, p0, 80, NULL, w);
    memset(&req, 0, sizeof(req));
    req.prompt = p0;
    req.n_prompt = 80;
    req.max_tokens = 3;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;
    assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_OK);

    pfd.fd = kvs_engine_fd(e);
    pfd.events = POLLIN;
    adds = 0;
    got_resync = 0;

    /* the empty listing, then the prompt's five blocks, some time */
    while (adds < n || out.finish == KVS_FINISH_NONE) {
        if (poll(&pfd, 1, 10000) != 1) {
            fail_msg("no wake-up in 10 s (%u of %u names)", adds, n);
        }

        while (kvs_engine_ready(e, hs, 1) > 0) {
            assert_true(kvs_engine_read(e, h, &out) >= 0);
        }

        take(e, &ix);
        got_resync |= ix.resync;
        assert_true(adds + ix.n_add <= n);
        expect_adds(&ix, w + adds, ix.n_add);
        adds += ix.n_add;
        assert_int_equal(ix.n_del, 0);
    }

    assert_true(got_resync);
    kvs_engine_close(e, h);
    kvs_engine_index_free(&ix);
    kvs_engine_out_free(&out);
    kvs_engine_free(e);
    kvs_test_model_free(&md);
    free(bk);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_threaded),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
