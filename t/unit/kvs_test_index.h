/*
 * kvs_test_index: helpers shared by the prefix index's tests: a routing
 * candidate of epoch 7 with 100 free blocks, and a string reply (what
 * the nginx glue makes of a hiredis string).  Header-only, like
 * kvs_test.h.
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

#endif /* KVS_TEST_INDEX_H */
