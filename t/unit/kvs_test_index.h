/*
 * kvs_test_index: helpers shared by the prefix index's tests: a routing
 * candidate of epoch 7 with 100 free blocks, a string reply (what the
 * nginx glue makes of a hiredis string), a batch's command as text, and
 * a fake index of block entries that answers a lookup's probes.
 * Header-only, like kvs_test.h.
 */

#ifndef KVS_TEST_INDEX_H
#define KVS_TEST_INDEX_H

#include "kvs_test.h"

#include "index/kvs_index_lookup.h"
#include "index/kvs_index_resv.h"
#include "index/kvs_index_schema.h"


/* An up candidate id (borrowed) of incarnation inc under load. */
static inline void
kvs_test_cand_set(kvs_index_cand_t *c, const char *id, uint64_t inc,
    uint32_t load)
{
    memset(c, 0, sizeof(*c));
    c->id = id;
    c->id_len = strlen(id);
    c->incarnation = inc;
    c->epoch = 7;
    c->load = load;
    c->free_blocks = 100;
    c->up = 1;
}


/* A string reply of s (borrowed). */
static inline kvs_index_reply_t
kvs_test_str_reply(const char *s)
{
    kvs_index_reply_t  r;

    memset(&r, 0, sizeof(r));
    r.type = KVS_INDEX_REPLY_STRING;
    r.str = s;
    r.len = strlen(s);

    return r;
}


/* Command i of c is exactly the words of want, separated by '|'; the
 * long-pool reservation script's text is written "<script>". */
static inline void
kvs_test_assert_cmd(const kvs_index_cmds_t *c, size_t i, const char *want)
{
    int            argc, a;
    char           got[2048];
    size_t         len;
    const char   **argv;
    const size_t  *argvlen;

    assert_true(i < c->n_cmds);
    kvs_index_cmds_get(c, i, &argc, &argv, &argvlen);

    len = 0;
    for (a = 0; a < argc; a++) {
        assert_int_equal(strlen(argv[a]), argvlen[a]);  /* NUL-ended */
        len += (size_t) snprintf(got + len, sizeof(got) - len, "%s%s",
                                 a > 0 ? "|" : "",
                                 strcmp(argv[a], kvs_index_resv_script) == 0
                                 ? "<script>" : argv[a]);
    }

    assert_string_equal(got, want);
}


/* A fake index entry for the lookup tests: field ("a", "d:a", "h:a")
 * with incarnation inc, listed on blocks [from, held). */
#define KVS_TEST_FAKE_MAX  8          /* entries a block lists at most */

typedef struct {
    const char  *field;
    char         hex[17];
    uint32_t     from, held;
} kvs_test_fake_t;


static inline void
kvs_test_fake_set(kvs_test_fake_t *f, const char *field, uint64_t inc,
    uint32_t from, uint32_t held)
{
    f->field = field;
    f->from = from;
    f->held = held;
    snprintf(f->hex, sizeof(f->hex), "%016llx", (unsigned long long) inc);
}


/* Answers lk's current probes from the fake entries f[0, n_fake), as
 * HGETALL would, and hands them to the round (which must take them). */
static inline void
kvs_test_fake_answer(kvs_index_lookup_t *lk, const kvs_test_fake_t *f,
    size_t n_fake)
{
    int                 rc;
    size_t              i, j, m, n;
    kvs_err_t           err;
    kvs_index_reply_t  *r, *e;

    n = lk->n_probe;
    r = calloc(n + 1, sizeof(kvs_index_reply_t));
    e = calloc((n + 1) * 2 * KVS_TEST_FAKE_MAX, sizeof(kvs_index_reply_t));
    assert_non_null(r);
    assert_non_null(e);

    for (i = 0; i < n; i++) {
        m = 0;

        for (j = 0; j < n_fake; j++) {
            if (lk->probe[i] >= f[j].from && lk->probe[i] < f[j].held) {
                e[i * 2 * KVS_TEST_FAKE_MAX + m] =
                    kvs_test_str_reply(f[j].field);
                e[i * 2 * KVS_TEST_FAKE_MAX + m + 1] =
                    kvs_test_str_reply(f[j].hex);
                m += 2;
            }
        }

        r[i].type = KVS_INDEX_REPLY_ARRAY;
        r[i].element = &e[i * 2 * KVS_TEST_FAKE_MAX];
        r[i].elements = m;
    }

    rc = lk->round == 1 ? kvs_index_lookup_round1(lk, r, n, &err)
                        : kvs_index_lookup_round2(lk, r, n, &err);
    assert_int_equal(rc, KVS_OK);

    free(r);
    free(e);
}

#endif /* KVS_TEST_INDEX_H */
