/*
 * test_srv_index: the engine process's prefix index frames
 * (src/server/kvs_srv_index.c) over a real unix socket, the server on a
 * thread of this test.  A client subscribes and gets a resync (empty
 * cache), submits a prompt of three blocks and gets INDEX adds whose
 * names are the ones kvs_index_name_root/_chain give here from the
 * prompt, the served name and HELLO's epoch; a bigger prompt on a small
 * pool forces an eviction, reported as dels (the deepest block first);
 * a load report comes once a second with nothing else to say; a second
 * subscriber waits, and when the first disconnects it takes over with a
 * resync listing exactly what the cache holds.
 */

#include "kvs_test.h"
#include "kvs_test_model.h"
#include "kvs_test_srv.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "engine/kvs_engine.h"
#include "index/kvs_index_name.h"
#include "server/kvs_srv.h"
#include "wire/kvs_wire.h"

#define WAIT_MS   30000
#define BT        16
#define N_BLOCKS  12
#define NAME      "test-index-model"
#define MAX_N     64

typedef kvs_test_srv_t  server_t;
typedef kvs_test_cl_t   client_t;

/* What INDEX frames said, summed. */
typedef struct {
    uint8_t   add[4 * MAX_N][16];
    uint32_t  n_add;
    uint8_t   del[4 * MAX_N][16];
    uint32_t  n_del;
    uint32_t  frames;
    uint32_t  resyncs;
    uint32_t  loads;                  /* frames with no name */
    uint32_t  finished;               /* OUT frames with a finish */
} seen_t;


static void
server_start(server_t *s)
{
    kvs_test_model_small(&s->md, "test-srv-index", 512, 0x1d3, 0);

    memset(&s->sm, 0, sizeof(s->sm));
    s->sm.name = NAME;
    s->sm.engine.model = s->md.m;
    s->sm.engine.vocab = s->md.v;
    s->sm.engine.n_blocks = N_BLOCKS;
    s->sm.engine.block_tokens = BT;
    s->sm.engine.threads = 1;
    s->sm.engine.max_batch_tokens = 48;

    kvs_test_srv_start(s, "srvix", 0, -1, -1);
}


static void
server_stop(server_t *s)
{
    kvs_test_srv_stop(s);
    kvs_test_model_free(&s->md);
}


static void
cl_send(client_t *cl, const kvs_buf_t *b)
{
    kvs_test_cl_send(cl, b->data, b->len);
}


static void
cl_connect(client_t *cl, const server_t *s, int subscribe)
{
    kvs_buf_t  b;
    kvs_err_t  err;

    kvs_test_cl_connect(cl, s->path, WAIT_MS);

    if (subscribe) {
        memset(&b, 0, sizeof(b));
        assert_int_equal(kvs_wire_enc_subscribe(&b, &err), KVS_OK);
        cl_send(cl, &b);
        kvs_buf_free(&b);
    }
}


static void
cl_submit(client_t *cl, uint64_t id, const int32_t *tok, uint32_t n)
{
    kvs_buf_t         b;
    kvs_err_t         err;
    kvs_engine_req_t  req;

    memset(&req, 0, sizeof(req));
    req.prompt = tok;
    req.n_prompt = n;
    req.max_tokens = 1;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_wire_enc_submit(&b, id, 0, &req, 0, &err), KVS_OK);
    cl_send(cl, &b);
    kvs_buf_free(&b);
}


/* Reads frames into sn until want(sn) holds; fails after WAIT_MS. */
static void
cl_until(client_t *cl, seen_t *sn, int (*want)(const seen_t *sn))
{
    kvs_err_t         err;
    kvs_wire_out_t    o;
    kvs_wire_index_t  ix;
    uint32_t          i;

    memset(&o, 0, sizeof(o));

    while (!want(sn)) {
        if (kvs_test_cl_read(cl, WAIT_MS) != 0) {
            fail_msg("client: no frame within %d ms (adds %u, dels %u, "
                     "frames %u)", WAIT_MS, sn->n_add, sn->n_del,
                     sn->frames);
        }

        if (cl->h.type == KVS_WIRE_OUT) {
            assert_int_equal(kvs_wire_dec_out(cl->frame, cl->h.len, &o,
                                              &err), KVS_OK);
            sn->finished += o.out.finish != KVS_FINISH_NONE;
            continue;
        }

        assert_int_equal(cl->h.type, KVS_WIRE_INDEX);
        if (kvs_wire_dec_index(cl->frame, cl->h.len, &ix, &err) != KVS_OK) {
            fail_msg("INDEX: %s", err.msg);
        }

        /* every frame says who and what it is about */
        assert_true(ix.incarnation == cl->hello.incarnation);
        assert_true(ix.epoch == cl->hello.models[0].epoch);
        assert_int_equal(ix.block_tokens, BT);
        assert_int_equal(ix.model, 0);
        assert_true(ix.free_blocks <= N_BLOCKS);
        assert_int_equal(cl->h.id, sn->frames + 1);   /* counted */

        sn->frames++;
        sn->resyncs += ix.resync;
        sn->loads += ix.n_add + ix.n_del == 0;

        assert_true(sn->n_add + ix.n_add <= 4 * MAX_N);
        assert_true(sn->n_del + ix.n_del <= 4 * MAX_N);

        for (i = 0; i < ix.n_add; i++) {
            memcpy(sn->add[sn->n_add++], ix.names + (size_t) i * 16, 16);
        }
        for (i = 0; i < ix.n_del; i++) {
            memcpy(sn->del[sn->n_del++],
                   ix.names + ((size_t) ix.n_add + i) * 16, 16);
        }
    }

    kvs_engine_out_free(&o.out);
}


static uint32_t  want_adds, want_fin;

static int
w_resync(const seen_t *sn)
{
    return sn->resyncs > 0;
}


static int
w_adds(const seen_t *sn)
{
    return sn->n_add >= want_adds && sn->finished >= want_fin;
}


static int
w_load(const seen_t *sn)
{
    return sn->loads > 0;
}


static void
names_of(const client_t *cl, const int32_t *tok, uint32_t n,
    kvs_index_name_t *out)
{
    size_t            k;
    kvs_err_t         err;
    kvs_index_ns_t    ns;
    kvs_index_name_t  root;

    memset(&ns, 0, sizeof(ns));
    ns.model = NAME;
    ns.model_len = strlen(NAME);
    ns.epoch = cl->hello.models[0].epoch;
    ns.adapter = "";
    ns.scope = "";

    assert_int_equal(kvs_index_name_root(&ns, &root, &err), KVS_OK);
    assert_int_equal(kvs_index_name_chain(&root, tok, n, BT, out, MAX_N, &k,
                                          &err), KVS_OK);
    assert_int_equal(k, n / BT);
}


static int
has(uint8_t (*set)[16], uint32_t n, const uint8_t *name)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        if (memcmp(set[i], name, 16) == 0) {
            return 1;
        }
    }

    return 0;
}


static void
test_publish(void **state)
{
    uint32_t          i, held;
    server_t          s;
    client_t          c1, c2;
    seen_t           *sn, *sn2;
    kvs_index_name_t  w0[MAX_N], w1[MAX_N];
    int32_t           p0[48], p1[150];

    sn = calloc(1, sizeof(seen_t));
    sn2 = calloc(1, sizeof(seen_t));
    assert_true(sn != NULL && sn2 != NULL);

    memset(&s, 0, sizeof(s));
    server_start(&s);

    /* subscribe: the (empty) cache's listing */
    cl_connect(&c1, &s, 1);
    cl_until(&c1, sn, w_resync);
    assert_int_equal(sn->n_add + sn->n_del, 0);

    /* three whole blocks computed: their names, in order */
    for (i = 0; i < 48; i++) {
        p0[i] = (int32_t) ((i * 7 + 3) % 290 + 5);
    }
    names_of(&c1, p0, 48, w0);
    cl_submit(&c1, 1, p0, 48);
    want_adds = 3;
    want_fin = 1;
    cl_until(&c1, sn, w_adds);
    assert_int_equal(sn->n_add, 3);
    assert_int_equal(sn->n_del, 0);
    for (i = 0; i < 3; i++) {
        assert_memory_equal(sn->add[i], w0[i].b, 16);
    }

    /* ten blocks wanted of twelve, three cached: p0's last goes first */
    for (i = 0; i < 150; i++) {
        p1[i] = (int32_t) ((i * 13 + 11) % 290 + 5);
    }
    names_of(&c1, p1, 150, w1);
    cl_submit(&c1, 2, p1, 150);
    want_adds = 3 + 9;
    want_fin = 2;
    cl_until(&c1, sn, w_adds);
    assert_true(sn->n_del >= 1);
    assert_memory_equal(sn->del[0], w0[2].b, 16);
    for (i = 0; i < sn->n_del; i++) {
        assert_true(has((uint8_t (*)[16]) w0, 3, sn->del[i]));
    }
    for (i = 0; i < 9; i++) {
        assert_memory_equal(sn->add[3 + i], w1[i].b, 16);
    }

    /* nothing to say: a load report within a second or so */
    cl_until(&c1, sn, w_load);

    /* a standby subscriber gets nothing until the publisher goes; then a
     * resync of exactly what is held: p1's nine and what is left of p0 */
    cl_connect(&c2, &s, 1);
    assert_int_equal(kvs_test_cl_read(&c2, 300), 2);
    close(c1.fd);
    kvs_buf_free(&c1.in);

    cl_until(&c2, sn2, w_resync);
    held = 0;
    for (i = 0; i < 3; i++) {
        held += !has(sn->del, sn->n_del, w0[i].b);
    }
    assert_int_equal(sn2->n_add, 9 + held);
    assert_int_equal(sn2->n_del, 0);
    for (i = 0; i < 9; i++) {
        assert_true(has(sn2->add, sn2->n_add, w1[i].b));
    }
    for (i = 0; i < 3; i++) {
        assert_int_equal(has(sn2->add, sn2->n_add, w0[i].b),
                         !has(sn->del, sn->n_del, w0[i].b));
    }

    close(c2.fd);
    kvs_buf_free(&c2.in);
    server_stop(&s);
    free(sn);
    free(sn2);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_publish),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
