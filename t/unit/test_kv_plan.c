/*
 * test_kv_plan: the capacity planner's arithmetic (src/kv/kvs_kv_plan.c).
 *
 *   - the seed's example, Llama-3-70B (80 layers, 64 query heads, 8 KV
 *     heads of 128): 2 x 80 x 8 x 128 x 2 = 327,680 B per token in
 *     16-bit; a 200,000-token sequence 65,536,000,000 B (61.04 GiB); 80
 *     GiB hold 85,899,345,920 / (327,680 x 16) = 16,384 blocks = 262,144
 *     tokens, one 200k sequence (12,500 blocks), 32,768 tokens each at
 *     batch 8; MHA (64 KV heads) 8 x that per token, no 200k sequence;
 *     int8 half of bf16, f32 twice;
 *   - K and V of different widths (head_dim_v), and whole blocks: a
 *     context one token over a block needs one more block;
 *   - dtypes by name, every bad name refused quoting it;
 *   - shapes parsed from text: every key, defaults, and each malformed,
 *     missing, repeated, zero or oversized value refused with the key or
 *     value named and the shape zeroed;
 *   - overflow: widths at the maximum, contexts near 2^64, budgets of
 *     2^64 - 1 give KVS_ERANGE or exact answers, never wrapped ones;
 *     weights as large as the memory, zero context, batch or block are
 *     KVS_EINVAL;
 *   - a randomised check against 128-bit arithmetic.
 */

#include "kvs_test.h"

#include "kv/kvs_kv_layout.h"
#include "kv/kvs_kv_plan.h"

#define GIB  (1024ULL * 1024 * 1024)


static const kvs_kv_shape_t  llama70b = { 80, 64, 8, 128, 128 };


static void
test_seed_example(void **state)
{
    uint64_t       bpt;
    kvs_err_t      err;
    kvs_kv_plan_t  p;

    assert_int_equal(kvs_kv_plan_bytes_per_token(&bpt, &llama70b, 8, 2,
                                                 &err), KVS_OK);
    assert_true(bpt == 327680);

    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8,
                         kvs_kv_plan_dtype_bytes(KVS_KV_PLAN_BF16),
                         80 * GIB, 16, 200000, 8, &err), KVS_OK);
    assert_true(p.bytes_per_token == 327680);
    assert_true(p.block_bytes == 5242880);
    assert_true(p.context_bytes == 65536000000ULL);
    /* 61.035... GiB: the seed's "about 61 GiB" */
    assert_true(p.context_bytes / GIB == 61);
    assert_true(p.n_blocks == 16384);
    assert_true(p.tokens == 262144);
    assert_true(p.seqs_at_context == 1);
    assert_true(p.context_at_batch == 32768);

    /* without GQA: 64 KV heads, 2,621,440 B per token, 2,048 blocks */
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 64, 2, 80 * GIB, 16,
                                         200000, 8, &err), KVS_OK);
    assert_true(p.bytes_per_token == 2621440);
    assert_true(p.n_blocks == 2048);
    assert_true(p.tokens == 32768);
    assert_true(p.seqs_at_context == 0);
    assert_true(p.context_at_batch == 4096);

    /* int8: 163,840 B, 32,768 blocks, two 200k sequences (12,500 each) */
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8,
                         kvs_kv_plan_dtype_bytes(KVS_KV_PLAN_INT8),
                         80 * GIB, 16, 200000, 1, &err), KVS_OK);
    assert_true(p.bytes_per_token == 163840);
    assert_true(p.n_blocks == 32768);
    assert_true(p.seqs_at_context == 2);
    assert_true(p.context_at_batch == 524288);

    /* ... as the engine's pool holds it: a float scale per (layer, K or
     * V, KV head) of a block, 2 x 80 x 8 x 4 B = 5,120 B a block of 16:
     * blocks of 2,626,560 B, 164,160 B a token, kvs_kv_layout's figures
     * (fp8 the same); f16 unchanged by the _dtype form */
    assert_int_equal(kvs_kv_plan_compute_dtype(&p, &llama70b, 8,
                         KVS_KV_PLAN_INT8, 80 * GIB, 16, 200000, 1, &err),
                     KVS_OK);
    assert_true(p.block_bytes == 2626560);
    assert_true(p.bytes_per_token == 164160);
    assert_true(p.bytes_per_token
                == kvs_kv_bytes_per_token(KVS_KV_INT8, 80, 8, 128, 128, 16));
    assert_true(p.n_blocks == 32704);
    assert_true(p.tokens == 32704 * 16);
    assert_true(p.seqs_at_context == 2);
    assert_true(p.context_at_batch == 523264);
    assert_int_equal(kvs_kv_plan_compute_dtype(&p, &llama70b, 8,
                         KVS_KV_PLAN_FP8, 80 * GIB, 16, 200000, 1, &err),
                     KVS_OK);
    assert_true(p.bytes_per_token == 164160);
    assert_int_equal(kvs_kv_plan_compute_dtype(&p, &llama70b, 8,
                         KVS_KV_PLAN_F16, 80 * GIB, 16, 200000, 1, &err),
                     KVS_OK);
    assert_true(p.bytes_per_token == 327680);
    assert_true(p.block_bytes == 327680 * 16);

    /* f32: 655,360 B per token; 80 GiB less 140 GiB of weights is an
     * error, 160 GiB less 140 leaves 20 GiB = 2,048 blocks of 10 MiB */
    assert_int_equal(kvs_kv_plan_budget(&bpt, 80 * GIB, 140 * GIB, &err),
                     KVS_EINVAL);
    assert_true(bpt == 0);
    assert_non_null(strstr(err.msg, "no memory for the KV cache"));
    assert_int_equal(kvs_kv_plan_budget(&bpt, 160 * GIB, 140 * GIB, &err),
                     KVS_OK);
    assert_true(bpt == 20 * GIB);
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8, 4, bpt, 16,
                                         200000, 1, &err), KVS_OK);
    assert_true(p.bytes_per_token == 655360);
    assert_true(p.n_blocks == 2048);
    assert_true(p.seqs_at_context == 0);
}


static void
test_blocks_and_widths(void **state)
{
    kvs_err_t       err;
    kvs_kv_plan_t   p;
    kvs_kv_shape_t  s = { 2, 4, 2, 16, 8 };

    /* 2 layers x 2 KV heads x (16 + 8) x 4 B = 384 B per token, blocks of
     * 16 tokens: 6,144 B; a budget of 10 blocks less a byte: 9 blocks */
    assert_int_equal(kvs_kv_plan_compute(&p, &s, 2, 4, 10 * 6144 - 1, 16,
                                         17, 4, &err), KVS_OK);
    assert_true(p.bytes_per_token == 384);
    assert_true(p.block_bytes == 6144);
    assert_true(p.n_blocks == 9);
    assert_true(p.tokens == 144);
    /* 17 tokens need 2 blocks: 4 sequences in 9 blocks */
    assert_true(p.seqs_at_context == 4);
    /* batch 4: 2 blocks each, 32 tokens */
    assert_true(p.context_at_batch == 32);

    /* 16 tokens fit one block: 9 sequences */
    assert_int_equal(kvs_kv_plan_compute(&p, &s, 2, 4, 10 * 6144 - 1, 16,
                                         16, 10, &err), KVS_OK);
    assert_true(p.seqs_at_context == 9);
    /* batch 10 over 9 blocks: no context fits them all */
    assert_true(p.context_at_batch == 0);

    /* a budget under one block: nothing fits, not an error */
    assert_int_equal(kvs_kv_plan_compute(&p, &s, 2, 4, 6143, 16, 1, 1,
                                         &err), KVS_OK);
    assert_true(p.n_blocks == 0 && p.tokens == 0 && p.seqs_at_context == 0
                && p.bytes_per_token == 384);
}


static void
test_dtypes(void **state)
{
    unsigned             i;
    kvs_err_t            err;
    kvs_kv_plan_dtype_t  dt;

    static const struct {
        const char  *name;
        uint32_t     bytes;
    } want[] = {
        { "f32", 4 }, { "f16", 2 }, { "bf16", 2 }, { "fp8", 1 },
        { "int8", 1 },
    };

    for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_int_equal(kvs_kv_plan_dtype_parse(&dt, want[i].name,
                                                 strlen(want[i].name), &err),
                         KVS_OK);
        assert_int_equal(kvs_kv_plan_dtype_bytes(dt), want[i].bytes);
        assert_string_equal(kvs_kv_plan_dtype_name(dt), want[i].name);
    }

    assert_int_equal(kvs_kv_plan_dtype_parse(&dt, "int4", 4, &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "\"int4\""));
    assert_int_equal(kvs_kv_plan_dtype_parse(&dt, "f16x", 3, &err), KVS_OK);
    assert_int_equal(dt, KVS_KV_PLAN_F16);
    assert_int_equal(kvs_kv_plan_dtype_parse(&dt, "F16", 3, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_dtype_parse(&dt, "", 0, &err), KVS_EINVAL);
    assert_null(kvs_kv_plan_dtype_name(KVS_KV_PLAN_N));
    assert_int_equal(kvs_kv_plan_dtype_bytes(KVS_KV_PLAN_N), 0);
}


static void
shape_bad(const char *s, const char *msg)
{
    kvs_err_t       err;
    kvs_kv_shape_t  sh;

    memset(&sh, 0xff, sizeof(sh));
    err.msg[0] = '\0';

    if (kvs_kv_shape_parse(&sh, s, strlen(s), &err) != KVS_EINVAL) {
        fail_msg("\"%s\" was taken", s);
    }

    if (strstr(err.msg, msg) == NULL) {
        fail_msg("\"%s\": \"%s\" lacks \"%s\"", s, err.msg, msg);
    }

    assert_true(sh.n_layer == 0 && sh.n_head == 0 && sh.n_head_kv == 0
                && sh.head_dim_k == 0 && sh.head_dim_v == 0);
}


static void
test_shape_parse(void **state)
{
    const char      *s;
    kvs_err_t        err;
    kvs_kv_shape_t   sh;

    s = "layers=80,kv_heads=8,head_dim=128,heads=64";
    assert_int_equal(kvs_kv_shape_parse(&sh, s, strlen(s), &err), KVS_OK);
    assert_memory_equal(&sh, &llama70b, sizeof(sh));

    /* order free, heads optional, head_dim_v its own */
    s = "head_dim_v=64,kv_heads=2,layers=3,head_dim=32";
    assert_int_equal(kvs_kv_shape_parse(&sh, s, strlen(s), &err), KVS_OK);
    assert_true(sh.n_layer == 3 && sh.n_head == 0 && sh.n_head_kv == 2
                && sh.head_dim_k == 32 && sh.head_dim_v == 64);

    /* only len bytes are read */
    s = "layers=1,kv_heads=1,head_dim=1,junk";
    assert_int_equal(kvs_kv_shape_parse(&sh, s, 30, &err), KVS_OK);
    assert_true(sh.head_dim_k == 1 && sh.head_dim_v == 1);

    shape_bad("", "is not key=value");
    shape_bad("layers=80", "shape needs kv_heads=");
    shape_bad("kv_heads=8,head_dim=128", "shape needs layers=");
    shape_bad("layers=80,kv_heads=8", "shape needs head_dim=");
    shape_bad("layers=80,kv_heads=8,head_dim=128,", "is not key=value");
    shape_bad("layers=80,,kv_heads=8,head_dim=128", "is not key=value");
    shape_bad("layers=80,kv_heads=8,head_dim=128,experts=8",
              "unknown shape key \"experts\"");
    shape_bad("layers=0,kv_heads=8,head_dim=128", "layers=\"0\"");
    shape_bad("layers=-1,kv_heads=8,head_dim=128", "layers=\"-1\"");
    shape_bad("layers=8 0,kv_heads=8,head_dim=128", "layers=\"8 0\"");
    shape_bad("layers=,kv_heads=8,head_dim=128", "layers=\"\"");
    shape_bad("layers=1048577,kv_heads=8,head_dim=128",
              "layers=\"1048577\"");
    shape_bad("layers=99999999999999999999,kv_heads=8,head_dim=128",
              "layers=\"99999999999999999999\"");
    shape_bad("layers=80,kv_heads=8,head_dim=128,layers=80",
              "\"layers\" given twice");
    shape_bad("layers=80,kv_heads=8,head_dim=128,heads=12",
              "heads=12 is not a multiple of kv_heads=8");
    shape_bad("layers=80,kv_heads=8,head_dim=0x80", "head_dim=\"0x80\"");
}


static void
test_overflow(void **state)
{
    uint64_t        bpt;
    kvs_err_t       err;
    kvs_kv_plan_t   p;
    kvs_kv_shape_t  big = { 1u << 20, 0, 1u << 20, 1u << 20, 1u << 20 };
    kvs_kv_shape_t  zero = { 80, 64, 8, 0, 128 };

    /* 2^20 x 2^20 x 2^21 x 4 = 2^63: fits; 8 bytes would not */
    assert_int_equal(kvs_kv_plan_bytes_per_token(&bpt, &big, 1u << 20, 4,
                                                 &err), KVS_OK);
    assert_true(bpt == 1ULL << 63);
    assert_int_equal(kvs_kv_plan_bytes_per_token(&bpt, &big, 1u << 20, 8,
                                                 &err), KVS_ERANGE);
    assert_true(bpt == 0);
    assert_non_null(strstr(err.msg, "overflow"));

    /* a block of that overflows */
    assert_int_equal(kvs_kv_plan_compute(&p, &big, 1u << 20, 4, UINT64_MAX,
                                         16, 1, 1, &err), KVS_ERANGE);
    assert_true(p.n_blocks == 0 && p.bytes_per_token == 0);

    /* a context near 2^64 tokens overflows its bytes */
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8, 2, 80 * GIB, 16,
                                         UINT64_MAX / 1000, 1, &err),
                     KVS_ERANGE);

    /* the largest budget, context and batch: exact, not wrapped */
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8, 2, UINT64_MAX,
                                         16, UINT64_MAX / 327680, UINT64_MAX,
                                         &err), KVS_OK);
    assert_true(p.n_blocks == UINT64_MAX / 5242880);
    assert_true(p.tokens == p.n_blocks * 16);
    assert_true(p.context_at_batch == 0);
    /* (2^64 - 1) / 327,680 tokens is 3 over a whole block: it needs one
     * block more than the 3,518,437,208,883 there are */
    assert_true(p.n_blocks == 3518437208883ULL);
    assert_true(p.seqs_at_context == 0);

    assert_int_equal(kvs_kv_plan_compute(&p, &zero, 8, 2, GIB, 16, 1, 1,
                                         &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 0, 2, GIB, 16, 1, 1,
                                         &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8, 0, GIB, 16, 1, 1,
                                         &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8, 2, GIB, 0, 1, 1,
                                         &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8, 2, GIB, 65537, 1,
                                         1, &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8, 2, GIB, 16, 0, 1,
                                         &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_compute(&p, &llama70b, 8, 2, GIB, 16, 1, 0,
                                         &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_budget(&bpt, 0, 0, &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_budget(&bpt, GIB, GIB, &err), KVS_EINVAL);
    assert_int_equal(kvs_kv_plan_budget(&bpt, UINT64_MAX, 0, &err), KVS_OK);
    assert_true(bpt == UINT64_MAX);

    /* a shape filled by hand is checked like a parsed one */
    assert_int_equal(kvs_kv_shape_check(&llama70b, &err), KVS_OK);
    assert_int_equal(kvs_kv_shape_check(&zero, &err), KVS_EINVAL);
    big.n_layer = (1u << 20) + 1;
    assert_int_equal(kvs_kv_shape_check(&big, &err), KVS_EINVAL);
}


/* xorshift64 */
static uint64_t
rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;

    return *s;
}


static void
test_random_against_128(void **state)
{
    int              i, rc;
    uint64_t         seed, budget, ctx, batch;
    uint32_t         kvh, elem, block;
    unsigned __int128  bpt, blk, cb, nb, per;
    kvs_err_t        err;
    kvs_kv_plan_t    p;
    kvs_kv_shape_t   s;

    seed = 0x9e3779b97f4a7c15ULL;

    for (i = 0; i < 200000; i++) {
        s.n_layer = (uint32_t) (rnd(&seed) % (1u << 20)) + 1;
        s.n_head = 0;
        s.head_dim_k = (uint32_t) (rnd(&seed) % (1u << 20)) + 1;
        s.head_dim_v = (uint32_t) (rnd(&seed) % (1u << 20)) + 1;
        kvh = (uint32_t) (rnd(&seed) % (1u << (rnd(&seed) % 21))) + 1;
        s.n_head_kv = kvh;
        elem = (uint32_t) (rnd(&seed) % 4) + 1;
        block = (uint32_t) (rnd(&seed) % 65536) + 1;
        budget = rnd(&seed) >> (rnd(&seed) % 64);
        ctx = (rnd(&seed) >> (rnd(&seed) % 64)) | 1;
        batch = (rnd(&seed) >> (rnd(&seed) % 64)) | 1;

        rc = kvs_kv_plan_compute(&p, &s, kvh, elem, budget, block, ctx,
                                 batch, &err);

        bpt = (unsigned __int128) s.n_layer * kvh
              * ((uint64_t) s.head_dim_k + s.head_dim_v) * elem;
        blk = bpt * block;
        cb = bpt * ctx;

        if (bpt > UINT64_MAX || blk > UINT64_MAX || cb > UINT64_MAX) {
            assert_int_equal(rc, KVS_ERANGE);
            continue;
        }

        assert_int_equal(rc, KVS_OK);
        nb = budget / blk;
        per = ((unsigned __int128) ctx + block - 1) / block;
        assert_true(p.bytes_per_token == (uint64_t) bpt);
        assert_true(p.n_blocks == (uint64_t) nb);
        assert_true(p.tokens == (uint64_t) (nb * block));
        assert_true(p.context_bytes == (uint64_t) cb);
        assert_true(p.seqs_at_context == (uint64_t) (nb / per));
        assert_true(p.context_at_batch == (uint64_t) (nb / batch * block));
    }
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_example),
        cmocka_unit_test(test_blocks_and_widths),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_shape_parse),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_random_against_128),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
