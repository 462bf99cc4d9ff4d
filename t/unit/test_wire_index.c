/*
 * test_wire_index: the prefix index's frames, SUBSCRIBE and INDEX
 * (wire/kvs_wire.h), against their definitions written out here byte by
 * byte: round trips, a frame cut anywhere, counts over the length (and
 * overflowing), bytes after the names, every field the decoder refuses
 * (and the encoder refuses alike, leaving the buffer as it was), and the
 * frame limit at KVS_WIRE_INDEX_MAX_NAMES.  Version 15 added the host
 * tier's counts and weight after the disk tier's.
 */

#include "kvs_test.h"

#include "wire/kvs_wire.h"


static uint8_t *
put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
    p[2] = (uint8_t) (v >> 16);
    p[3] = (uint8_t) (v >> 24);
    return p + 4;
}


static uint8_t *
put64(uint8_t *p, uint64_t v)
{
    p = put32(p, (uint32_t) v);
    return put32(p, (uint32_t) (v >> 32));
}


/* An INDEX frame as docs/engine-process.md defines it, by hand. */
static size_t
index_by_hand(uint8_t *f, uint64_t id, uint32_t model, uint64_t inc,
    uint64_t epoch, uint32_t bt, uint32_t resync, uint32_t n_add,
    uint32_t n_del, uint32_t n_dadd, uint32_t n_ddel, uint32_t tw,
    uint32_t n_hadd, uint32_t n_hdel, uint32_t hw, const uint8_t *names,
    size_t n_bytes)
{
    uint8_t  *p;
    size_t    len;

    len = 16 + 84 + n_bytes;
    p = put32(f, (uint32_t) len);
    p[0] = 12;                        /* INDEX */
    p[1] = 0;
    p[2] = KVS_WIRE_VERSION;          /* version */
    p[3] = 0;
    p = put64(p + 4, id);
    p = put32(p, model);
    p = put64(p, inc);
    p = put64(p, epoch);
    p = put32(p, bt);
    p = put32(p, 2);                  /* running */
    p = put32(p, 5);                  /* waiting */
    p = put32(p, 77);                 /* free blocks */
    p = put32(p, resync);
    p = put32(p, n_add);
    p = put32(p, n_del);
    p = put32(p, 2048);               /* long_min (version 8) */
    p = put32(p, 300);                /* long_room */
    p = put32(p, 1);                  /* long_slots */
    p = put32(p, n_dadd);             /* the disk tier's (version 11) */
    p = put32(p, n_ddel);
    p = put32(p, tw);
    p = put32(p, n_hadd);             /* the host tier's (version 15) */
    p = put32(p, n_hdel);
    p = put32(p, hw);
    memcpy(p, names, n_bytes);

    return len;
}


static void
names_fill(uint8_t *names, size_t n)
{
    size_t  i;

    for (i = 0; i < n * 16; i++) {
        names[i] = (uint8_t) (i * 37 + 1);
    }
}


static void
test_round_trip(void **state)
{
    uint8_t           names[10 * 16], f[512];
    uint32_t          lists[KVS_WIRE_INDEX_LISTS];
    size_t            len;
    kvs_buf_t         b;
    kvs_err_t         err;
    kvs_wire_hdr_t    h;
    kvs_wire_index_t  ix, got;

    assert_int_equal(KVS_WIRE_SUBSCRIBE, 11);
    assert_int_equal(KVS_WIRE_INDEX, 12);
    assert_string_equal(kvs_wire_type_name(KVS_WIRE_INDEX), "INDEX");
    assert_string_equal(kvs_wire_type_name(KVS_WIRE_SUBSCRIBE),
                        "SUBSCRIBE");

    names_fill(names, 10);
    memset(&ix, 0, sizeof(ix));
    ix.model = 1;
    ix.incarnation = 0x0102030405060708ULL;
    ix.epoch = 0xfedcba9876543210ULL;
    ix.block_tokens = 16;
    ix.running = 2;
    ix.waiting = 5;
    ix.free_blocks = 77;
    ix.resync = 1;
    ix.n_add = 3;
    ix.n_del = 2;
    ix.long_min = 2048;
    ix.long_room = 300;
    ix.long_slots = 1;
    ix.n_dadd = 1;
    ix.n_ddel = 1;
    ix.tier_weight = 870;
    ix.n_hadd = 2;
    ix.n_hdel = 1;
    ix.host_weight = 990;
    ix.names = names;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_wire_enc_index(&b, 9, &ix, &err), KVS_OK);

    len = index_by_hand(f, 9, 1, ix.incarnation, ix.epoch, 16, 1, 3, 2, 1,
                        1, 870, 2, 1, 990, names, sizeof(names));
    assert_int_equal(b.len, len);
    assert_memory_equal(b.data, f, len);

    assert_int_equal(kvs_wire_frame(b.data, b.len, &h, &err), KVS_OK);
    assert_int_equal(h.type, KVS_WIRE_INDEX);
    assert_int_equal(h.id, 9);
    assert_int_equal(kvs_wire_dec_index(b.data, b.len, &got, &err), KVS_OK);
    assert_int_equal(got.model, 1);
    assert_true(got.incarnation == ix.incarnation);
    assert_true(got.epoch == ix.epoch);
    assert_int_equal(got.block_tokens, 16);
    assert_int_equal(got.running, 2);
    assert_int_equal(got.waiting, 5);
    assert_int_equal(got.free_blocks, 77);
    assert_int_equal(got.resync, 1);
    assert_int_equal(got.n_add, 3);
    assert_int_equal(got.n_del, 2);
    assert_int_equal(got.long_min, 2048);
    assert_int_equal(got.long_room, 300);
    assert_int_equal(got.long_slots, 1);
    assert_int_equal(got.n_dadd, 1);
    assert_int_equal(got.n_ddel, 1);
    assert_int_equal(got.tier_weight, 870);
    assert_int_equal(got.n_hadd, 2);
    assert_int_equal(got.n_hdel, 1);
    assert_int_equal(got.host_weight, 990);
    assert_int_equal(kvs_wire_index_lists(&got, lists), 10);
    assert_int_equal(lists[0], 3);
    assert_int_equal(lists[1], 2);
    assert_int_equal(lists[2], 1);
    assert_int_equal(lists[3], 1);
    assert_int_equal(lists[4], 2);
    assert_int_equal(lists[5], 1);
    assert_ptr_equal(got.names, b.data + 16 + 84);     /* into the frame */
    assert_memory_equal(got.names, names, sizeof(names));

    /* a load report: no names */
    b.len = 0;
    ix.n_add = 0;
    ix.n_del = 0;
    ix.n_dadd = 0;
    ix.n_ddel = 0;
    ix.n_hadd = 0;
    ix.n_hdel = 0;
    ix.resync = 0;
    ix.names = NULL;
    assert_int_equal(kvs_wire_enc_index(&b, 10, &ix, &err), KVS_OK);
    assert_int_equal(b.len, 16 + 84);
    assert_int_equal(kvs_wire_dec_index(b.data, b.len, &got, &err), KVS_OK);
    assert_int_equal(got.n_add + got.n_del, 0);
    assert_int_equal(got.resync, 0);

    /* SUBSCRIBE: a bare header, id 0 */
    b.len = 0;
    assert_int_equal(kvs_wire_enc_subscribe(&b, &err), KVS_OK);
    assert_int_equal(b.len, 16);
    memset(f, 0, 16);
    put32(f, 16);
    f[4] = 11;
    f[6] = KVS_WIRE_VERSION;
    assert_memory_equal(b.data, f, 16);
    assert_int_equal(kvs_wire_dec_subscribe(b.data, b.len, &err), KVS_OK);
    assert_int_equal(kvs_wire_dec_empty(b.data, b.len, &err), KVS_OK);

    /* with a body, or another type: refused */
    f[0] = 17;
    assert_int_equal(kvs_wire_dec_subscribe(f, 17, &err), KVS_EFORMAT);
    f[0] = 16;
    f[4] = KVS_WIRE_DRAIN;
    assert_int_equal(kvs_wire_dec_subscribe(f, 16, &err), KVS_EFORMAT);

    kvs_buf_free(&b);
}


static void
test_truncated(void **state)
{
    uint8_t           names[4 * 16], f[256], g[256];
    size_t            len, n;
    kvs_err_t         err;
    kvs_wire_hdr_t    h;
    kvs_wire_index_t  got;

    names_fill(names, 4);
    len = index_by_hand(f, 1, 0, 7, 8, 16, 0, 2, 1, 1, 0, 0, 0, 0, 0, names,
                        sizeof(names));

    /* any prefix: more bytes needed, nothing decided */
    for (n = 0; n < len; n++) {
        assert_int_equal(kvs_wire_frame(f, n, &h, &err), KVS_WIRE_AGAIN);
    }
    assert_int_equal(kvs_wire_frame(f, len, &h, &err), KVS_OK);

    /* a frame whose length cuts its own body, anywhere */
    for (n = 16; n < len; n++) {
        memcpy(g, f, len);
        put32(g, (uint32_t) n);
        if (kvs_wire_dec_index(g, n, &got, &err) != KVS_EFORMAT) {
            fail_msg("a frame cut at %zu bytes of %zu decoded", n, len);
        }
    }

    /* counts over the length */
    memcpy(g, f, len);
    put32(g + 16 + 40, 3);            /* 3 + 1 + 1 > 4 names */
    assert_int_equal(kvs_wire_dec_index(g, len, &got, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "names"));

    put32(g + 16 + 40, 2);            /* the disk tier's too: 2 + 1 + 2 */
    put32(g + 16 + 60, 2);
    assert_int_equal(kvs_wire_dec_index(g, len, &got, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "names"));

    put32(g + 16 + 60, 1);            /* the host tier's too: 2 + 1 + 1 + 1 */
    put32(g + 16 + 72, 1);
    assert_int_equal(kvs_wire_dec_index(g, len, &got, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "names"));
    put32(g + 16 + 72, 0);
    put32(g + 16 + 76, 1);
    assert_int_equal(kvs_wire_dec_index(g, len, &got, &err), KVS_EFORMAT);
    put32(g + 16 + 76, 0);

    put32(g + 16 + 40, UINT32_MAX);   /* the sum would wrap in 32 bits */
    put32(g + 16 + 44, UINT32_MAX);
    put32(g + 16 + 60, UINT32_MAX);
    put32(g + 16 + 64, UINT32_MAX);
    put32(g + 16 + 72, UINT32_MAX);
    put32(g + 16 + 76, UINT32_MAX);
    assert_int_equal(kvs_wire_dec_index(g, len, &got, &err), KVS_EFORMAT);

    put32(g + 16 + 40, 1);            /* fewer: bytes left after them */
    put32(g + 16 + 44, 2);
    put32(g + 16 + 60, 0);
    put32(g + 16 + 64, 0);
    put32(g + 16 + 72, 0);
    put32(g + 16 + 76, 0);
    assert_int_equal(kvs_wire_dec_index(g, len, &got, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "after the last field"));
}


static void
test_bad_fields(void **state)
{
    uint8_t           names[16], f[128], g[128];
    size_t            len, i;
    kvs_buf_t         b;
    kvs_err_t         err;
    kvs_wire_index_t  got, ix;

    struct {
        size_t     off;               /* in the body */
        int        wide;              /* u64 */
        uint64_t   v;
        const char *field;
    } bad[] = {
        { 0, 0, 32, "model" },
        { 4, 1, 0, "incarnation" },
        { 20, 0, 0, "block_tokens" },
        { 20, 0, 1025, "block_tokens" },
        { 36, 0, 2, "resync" },
        { 68, 0, 1001, "tier_weight" },
        { 80, 0, 1001, "host_weight" },
    };

    names_fill(names, 1);
    len = index_by_hand(f, 1, 0, 7, 8, 16, 0, 1, 0, 0, 0, 0, 0, 0, 0, names,
                        16);
    assert_int_equal(kvs_wire_dec_index(f, len, &got, &err), KVS_OK);

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_buf_append(&b, "x", 1), KVS_OK);

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memcpy(g, f, len);
        if (bad[i].wide) {
            put64(g + 16 + bad[i].off, bad[i].v);
        } else {
            put32(g + 16 + bad[i].off, (uint32_t) bad[i].v);
        }

        if (kvs_wire_dec_index(g, len, &got, &err) != KVS_EFORMAT) {
            fail_msg("%s = %llu decoded", bad[i].field,
                     (unsigned long long) bad[i].v);
        }
        assert_non_null(strstr(err.msg, bad[i].field));

        /* the encoder refuses the same, appending nothing */
        memset(&ix, 0, sizeof(ix));
        ix.incarnation = 7;
        ix.epoch = 8;
        ix.block_tokens = 16;
        ix.n_add = 1;
        ix.names = names;
        switch (i) {
        case 0: ix.model = 32; break;
        case 1: ix.incarnation = 0; break;
        case 2: ix.block_tokens = 0; break;
        case 3: ix.block_tokens = 1025; break;
        case 4: ix.resync = 2; break;
        case 5: ix.tier_weight = 1001; break;
        default: ix.host_weight = 1001; break;
        }
        assert_int_equal(kvs_wire_enc_index(&b, 1, &ix, &err), KVS_ERANGE);
        assert_int_equal(b.len, 1);
    }

    /* handed another type's frame */
    memcpy(g, f, len);
    g[4] = KVS_WIRE_OUT;
    assert_int_equal(kvs_wire_dec_index(g, len, &got, &err), KVS_EFORMAT);

    kvs_buf_free(&b);
}


/* The frame limit: KVS_WIRE_INDEX_MAX_NAMES fit, one more does not. */
static void
test_oversize(void **state)
{
    uint8_t           *names;
    kvs_buf_t          b;
    kvs_err_t          err;
    kvs_wire_index_t   ix, got;
    size_t             max;

    max = KVS_WIRE_INDEX_MAX_NAMES;
    assert_true(16 + 84 + max * 16 <= KVS_WIRE_MAX_FRAME);
    assert_true(16 + 84 + (max + 1) * 16 > KVS_WIRE_MAX_FRAME);

    names = calloc(max + 1, 16);
    assert_non_null(names);
    names_fill(names, 4);

    memset(&ix, 0, sizeof(ix));
    ix.incarnation = 1;
    ix.block_tokens = 16;
    ix.n_add = (uint32_t) (max + 1) / 2;
    ix.n_dadd = 3;                    /* the disk tier's count too */
    ix.n_hdel = 2;                    /* and the host tier's */
    ix.n_del = (uint32_t) (max + 1 - ix.n_add - ix.n_dadd - ix.n_hdel);
    ix.names = names;

    memset(&b, 0, sizeof(b));
    assert_int_equal(kvs_wire_enc_index(&b, 1, &ix, &err), KVS_ERANGE);
    assert_int_equal(b.len, 0);

    ix.n_del--;
    assert_int_equal(kvs_wire_enc_index(&b, 1, &ix, &err), KVS_OK);
    assert_int_equal(kvs_wire_dec_index(b.data, b.len, &got, &err), KVS_OK);
    assert_int_equal(got.n_add + got.n_del + got.n_dadd + got.n_hdel, max);
    assert_int_equal(got.n_dadd, 3);
    assert_int_equal(got.n_hdel, 2);
    assert_memory_equal(got.names, names, 64);

    kvs_buf_free(&b);
    free(names);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_oversize),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
