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

#endif /* KVS_TEST_INDEX_H */
