/*
 * test_kv_share: one KV budget shared by several models (kvs_kv_share):
 * the needs (whole blocks, saturation), the proportional shares, models
 * with their own budget left alone, the raise to one full context only
 * while the limit holds, and the errors.  Expected numbers are worked
 * out by hand in the comments.
 */

#include "kvs_test.h"

#include "kv/kvs_kv_share.h"

/* kvserve-tiny: 512 B per token (F32), context 512; the 100m preset:
 * 12 layers x 4 KV heads x 64 x (K and V) x 4 bytes = 24576 B per token,
 * context 4096 */
#define TINY_BPT   512
#define BIG_BPT    24576


static void
test_need(void **state)
{
    uint64_t   full, need;
    kvs_err_t  err;

    /* tiny: 512 tokens are 32 blocks of 16: 512 x 512 = 262144 bytes,
     * 4 sequences: 1048576 */
    assert_int_equal(kvs_kv_share_need(TINY_BPT, 512, 16, 4, &full, &need,
                                       &err), KVS_OK);
    assert_true(full == 262144);
    assert_true(need == 1048576);

    /* a context of 500 rounds up to 512 tokens of whole blocks */
    assert_int_equal(kvs_kv_share_need(TINY_BPT, 500, 16, 4, &full, &need,
                                       &err), KVS_OK);
    assert_true(full == 262144);

    /* 100m: 4096 x 24576 = 100663296 (96 MiB), x 4 = 402653184 */
    assert_int_equal(kvs_kv_share_need(BIG_BPT, 4096, 16, 4, &full, &need,
                                       &err), KVS_OK);
    assert_true(full == 100663296);
    assert_true(need == 402653184);

    /* saturates instead of wrapping */
    assert_int_equal(kvs_kv_share_need(UINT64_MAX / 2, 4096, 16, 4, &full,
                                       &need, &err), KVS_OK);
    assert_true(full == UINT64_MAX);
    assert_true(need == UINT64_MAX);

    assert_int_equal(kvs_kv_share_need(1ull << 40, 1 << 20, 16, 1u << 31,
                                       &full, &need, &err), KVS_OK);
    assert_true(full == 1ull << 60);
    assert_true(need == UINT64_MAX);

    assert_int_equal(kvs_kv_share_need(TINY_BPT, 512, 0, 4, &full, &need,
                                       &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "0 tokens"));
}


static void
test_proportional(void **state)
{
    kvs_err_t       err;
    kvs_kv_share_t  m[2];

    /* the case: a 100m model beside the tiny one, 200 MiB: the
     * needs are 402653184 and 1048576, so big gets 384/385 of it */
    memset(m, 0, sizeof(m));
    m[0].need = 402653184;
    m[0].full = 100663296;
    m[1].need = 1048576;
    m[1].full = 262144;

    assert_int_equal(kvs_kv_share(m, 2, 200ull << 20, UINT64_MAX, 0, &err),
                     KVS_OK);

    /* 209715200 x 384 / 385 = 209170485.19..., 209715200 / 385 =
     * 544714.80... */
    assert_true(m[0].budget == 209170485);
    assert_true(m[1].budget == 544714);
    assert_true(m[0].budget + m[1].budget <= 200ull << 20);
    assert_float_equal(m[0].part, 384.0 / 385, 1e-12);
    assert_float_equal(m[1].part, 1.0 / 385, 1e-12);
    assert_false(m[0].raised || m[1].raised);

    /* equal needs: equal halves */
    m[0].need = m[1].need = 1048576;
    assert_int_equal(kvs_kv_share(m, 2, 2097152, UINT64_MAX, 0, &err),
                     KVS_OK);
    assert_true(m[0].budget == 1048576);
    assert_true(m[1].budget == 1048576);

    /* one model: all of it, whatever its need */
    m[0].need = 0;
    assert_int_equal(kvs_kv_share(m, 1, 12345, UINT64_MAX, 0, &err),
                     KVS_OK);
    assert_true(m[0].budget == 0);   /* no need at all: nothing */
    m[0].need = 7;
    assert_int_equal(kvs_kv_share(m, 1, 12345, UINT64_MAX, 0, &err),
                     KVS_OK);
    assert_true(m[0].budget == 12345);

    /* a pool near 2^64 never rounds past itself */
    m[0].need = UINT64_MAX;
    assert_int_equal(kvs_kv_share(m, 1, UINT64_MAX, UINT64_MAX, 0, &err),
                     KVS_OK);
    assert_true(m[0].budget == UINT64_MAX);
}


static void
test_own(void **state)
{
    kvs_err_t       err;
    kvs_kv_share_t  m[3];

    /* b has its own 8 MiB: a and c share the pool by need (1:3) */
    memset(m, 0, sizeof(m));
    m[0].need = 1000;
    m[1].need = 1000000;
    m[1].own = 1;
    m[1].budget = 8 << 20;
    m[2].need = 3000;

    assert_int_equal(kvs_kv_share(m, 3, 4000000, UINT64_MAX, 0, &err),
                     KVS_OK);
    assert_true(m[0].budget == 1000000);
    assert_true(m[1].budget == 8 << 20);
    assert_true(m[1].part == 0);
    assert_true(m[2].budget == 3000000);

    /* every model has its own: nothing is set */
    m[0].own = m[2].own = 1;
    m[0].budget = 11;
    m[2].budget = 33;
    assert_int_equal(kvs_kv_share(m, 3, 4000000, UINT64_MAX, 1, &err),
                     KVS_OK);
    assert_true(m[0].budget == 11 && m[2].budget == 33);
    assert_false(m[0].raised || m[1].raised || m[2].raised);
}


static void
test_raise(void **state)
{
    kvs_err_t       err;
    kvs_kv_share_t  m[2];

    /* a pool of 1 MiB: big's 1045852 bytes are below its 96 MiB
     * context, tiny's 2723 below its 256 KiB */
    memset(m, 0, sizeof(m));
    m[0].need = 402653184;
    m[0].full = 100663296;
    m[1].need = 1048576;
    m[1].full = 262144;

    /* plenty of memory: both raised to one full context */
    assert_int_equal(kvs_kv_share(m, 2, 1 << 20, 1ull << 30, 1, &err),
                     KVS_OK);
    assert_true(m[0].budget == 100663296 && m[0].raised);
    assert_true(m[1].budget == 262144 && m[1].raised);

    /* 96 MiB + 100000 bytes of memory: big's raise (the sum then 96 MiB
     * + 2723 bytes) fits, tiny's (259421 more) no longer does */
    assert_int_equal(kvs_kv_share(m, 2, 1 << 20, (96ull << 20) + 100000, 1,
                                  &err), KVS_OK);
    assert_true(m[0].budget == 100663296 && m[0].raised);
    assert_true(m[1].budget == 2723 && !m[1].raised);

    /* less than big's context: big stays as it was, tiny is raised */
    assert_int_equal(kvs_kv_share(m, 2, 1 << 20, 50ull << 20, 1, &err),
                     KVS_OK);
    assert_true(m[0].budget == 1045852 && !m[0].raised);
    assert_true(m[1].budget == 262144 && m[1].raised);
    assert_true(m[0].budget + m[1].budget <= 50ull << 20);

    /* a share that holds a full context already is not touched */
    assert_int_equal(kvs_kv_share(m, 2, 1ull << 30, UINT64_MAX, 1, &err),
                     KVS_OK);
    assert_false(m[0].raised || m[1].raised);
    assert_true(m[0].budget > m[0].full);
}


static void
test_errors(void **state)
{
    kvs_err_t       err;
    kvs_kv_share_t  m[1];

    memset(m, 0, sizeof(m));
    assert_int_equal(kvs_kv_share(m, 0, 1, 1, 0, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "no model"));
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_need),
        cmocka_unit_test(test_proportional),
        cmocka_unit_test(test_own),
        cmocka_unit_test(test_raise),
        cmocka_unit_test(test_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
