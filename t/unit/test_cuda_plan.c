/*
 * test_cuda_plan: the CUDA backend's host arithmetic that needs no GPU
 * (backend/cuda/kvs_cuda_plan.h): batch packing into the uploaded image
 * (several sequences, prefill runs and decodes mixed, tables sharing
 * blocks, one table in two runs, padding to a bucket, every rejection
 * leaving the image untouched), slicing, decode buckets, context
 * buckets, the split count of decode attention, graph keys, weight and
 * workspace sizing, and the KV pool sized from free device memory.
 * Expected values are worked out by hand in the comments.
 */

#include "kvs_test.h"
#include "kvs_test_model.h"

#include <inttypes.h>
#include <math.h>

#include "backend/cuda/kvs_cuda_plan.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"

#define BT        4                   /* tokens per block */
#define NBLK      16                  /* the cache's blocks */
#define VOCAB     32
#define CAP       256                 /* image words */
#define POISON    0x5a5a5a5a


typedef struct {
    int32_t                 words[CAP];
    const kvs_kv_table_t   *seq_tab[16];
    uint32_t                seq_nb[16];
    kvs_cuda_packer_t       pk;
} env_t;


static uint32_t  blk_a[] = { 3, 7, 9 };
static uint32_t  blk_b[] = { 5 };
static uint32_t  blk_c[] = { 1, 2 };
static uint32_t  blk_d[] = { 3, 7, 11 };      /* shares A's first two */

/* A: prefill to 10 positions; B: 3; C: 8; D: 9 */
static kvs_kv_table_t  tab_a = { blk_a, 3, 3, 10, BT, 0 };
static kvs_kv_table_t  tab_b = { blk_b, 1, 1, 3, BT, 0 };
static kvs_kv_table_t  tab_c = { blk_c, 2, 2, 8, BT, 0 };
static kvs_kv_table_t  tab_d = { blk_d, 3, 3, 9, BT, 0 };


static void
env_init(env_t *e)
{
    uint32_t  i;

    for (i = 0; i < CAP; i++) {
        e->words[i] = POISON;
    }

    memset(&e->pk, 0, sizeof(kvs_cuda_packer_t));
    e->pk.n_vocab = VOCAB;
    e->pk.n_blocks = NBLK;
    e->pk.block_tokens = BT;
    e->pk.words = e->words;
    e->pk.cap_words = CAP;
    e->pk.seq_tab = e->seq_tab;
    e->pk.seq_nb = e->seq_nb;
    e->pk.cap_seq = 16;
}


static void
assert_untouched(const env_t *e)
{
    uint32_t  i;

    for (i = 0; i < CAP; i++) {
        if (e->words[i] != POISON) {
            fail_msg("word %u written by a rejected pack", i);
        }
    }
}


static void
assert_words(const int32_t *w, const int32_t *want, uint32_t n,
    const char *what)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        if (w[i] != want[i]) {
            fail_msg("%s[%u] = %d, expected %d", what, i, w[i], want[i]);
        }
    }
}


/* A6 prefill chunk A4..A9 (logits at A9), decodes B2, C7, D8. */
static kvs_batch_tok_t  mixed[] = {
    { 11, 4, &tab_a, 0 }, { 12, 5, &tab_a, 0 }, { 13, 6, &tab_a, 0 },
    { 14, 7, &tab_a, 0 }, { 15, 8, &tab_a, 0 }, { 16, 9, &tab_a, 1 },
    { 21, 2, &tab_b, 1 }, { 22, 7, &tab_c, 1 }, { 23, 8, &tab_d, 1 }
};


static void
test_pack_mixed(void **state)
{
    env_t              e;
    kvs_err_t          err;
    kvs_batch_t        b = { mixed, 9 };
    kvs_cuda_packed_t  pd;

    /* L = 9: tok 0, pos 9, seq 18, table_off 27, run_tok0 36, run_len
     * 45, rows 54, params 63 (4 words each), table 99; 9 ids: A's 3
     * (pos 9 / 4 + 1), B 1, C 2 (7 / 4 + 1), D 3 (8 / 4 + 1) */
    static const int32_t  tok[] = { 11, 12, 13, 14, 15, 16, 21, 22, 23 };
    static const int32_t  pos[] = { 4, 5, 6, 7, 8, 9, 2, 7, 8 };
    static const int32_t  seq[] = { 0, 0, 0, 0, 0, 0, 1, 2, 3 };
    static const int32_t  toff[] = { 0, 3, 4, 6 };
    static const int32_t  run0[] = { 0, 6, 7, 8 };
    static const int32_t  rlen[] = { 6, 1, 1, 1 };
    static const int32_t  rows[] = { 5, 6, 7, 8 };
    static const int32_t  table[] = { 3, 7, 9, 5, 1, 2, 3, 7, 11 };

    env_init(&e);

    assert_int_equal(kvs_cuda_plan_pack(&e.pk, &b, 0, 9, 0, NULL, &pd,
                                        &err), KVS_OK);

    assert_int_equal(pd.n_tok, 9);
    assert_int_equal(pd.n_pad, 9);
    assert_int_equal(pd.n_seq, 4);
    assert_int_equal(pd.n_run, 4);
    assert_int_equal(pd.n_want, 4);
    assert_int_equal(pd.n_rows, 4);
    assert_int_equal(pd.n_table, 9);
    assert_int_equal(pd.max_ctx, 10);
    assert_int_equal(pd.decode, 0);
    assert_int_equal(pd.pos, 9);
    assert_int_equal(pd.seq, 18);
    assert_int_equal(pd.table_off, 27);
    assert_int_equal(pd.run_tok0, 36);
    assert_int_equal(pd.run_len, 45);
    assert_int_equal(pd.rows, 54);
    assert_int_equal(pd.params, 63);
    assert_int_equal(pd.table, 99);
    assert_int_equal(pd.n_words, 108);

    assert_words(e.words + pd.tok, tok, 9, "tok");
    assert_words(e.words + pd.pos, pos, 9, "pos");
    assert_words(e.words + pd.seq, seq, 9, "seq");
    assert_words(e.words + pd.table_off, toff, 4, "table_off");
    assert_words(e.words + pd.run_tok0, run0, 4, "run_tok0");
    assert_words(e.words + pd.run_len, rlen, 4, "run_len");
    assert_words(e.words + pd.rows, rows, 4, "rows");
    assert_words(e.words + pd.table, table, 9, "table");

    /* no params asked for: that region and everything past the image
     * keep their old contents */
    assert_int_equal(e.words[pd.params], POISON);
    assert_int_equal(e.words[108], POISON);

    /* the same batch from entry 6 on: three decodes, decode-only */
    env_init(&e);

    assert_int_equal(kvs_cuda_plan_pack(&e.pk, &b, 6, 3, 0, NULL, &pd,
                                        &err), KVS_OK);
    assert_int_equal(pd.n_tok, 3);
    assert_int_equal(pd.n_run, 3);
    assert_int_equal(pd.decode, 1);
    assert_int_equal(pd.n_table, 6);
    assert_int_equal(pd.max_ctx, 9);
    assert_int_equal(e.words[pd.rows + 0], 0);
    assert_int_equal(e.words[pd.rows + 2], 2);
}


/* One table in two runs (E5, F0, E6): one sequence, its table copied
 * once, covering the larger position; every run one token. */
static void
test_pack_same_table_twice(void **state)
{
    env_t              e;
    kvs_err_t          err;
    kvs_cuda_packed_t  pd;
    uint32_t           be[] = { 4, 6 }, bf[] = { 8 };
    kvs_kv_table_t     te = { be, 2, 2, 7, BT, 0 };
    kvs_kv_table_t     tf = { bf, 1, 1, 1, BT, 0 };
    kvs_batch_tok_t    toks[] = {
        { 1, 5, &te, 1 }, { 2, 0, &tf, 1 }, { 3, 6, &te, 1 }
    };
    kvs_batch_t        b = { toks, 3 };

    static const int32_t  seq[] = { 0, 1, 0 };
    static const int32_t  table[] = { 4, 6, 8 };

    env_init(&e);

    assert_int_equal(kvs_cuda_plan_pack(&e.pk, &b, 0, 3, 0, NULL, &pd,
                                        &err), KVS_OK);
    assert_int_equal(pd.n_seq, 2);
    assert_int_equal(pd.n_run, 3);
    assert_int_equal(pd.decode, 1);
    assert_int_equal(pd.n_table, 3);
    assert_words(e.words + pd.seq, seq, 3, "seq");
    assert_words(e.words + pd.table, table, 3, "table");
    assert_int_equal(e.words[pd.table_off + 1], 2);
}


/* B2, C7, D8 padded to a bucket of 4, with sampling parameters. */
static void
test_pack_padded(void **state)
{
    env_t                 e;
    kvs_err_t             err;
    kvs_batch_t           b = { mixed + 6, 3 };
    kvs_cuda_packed_t     pd;
    kvs_backend_sample_t  p[3], got;

    /* L = 4: pos 4, seq 8, table_off 12, run_tok0 16, run_len 20, rows
     * 24, params 28, table 44; 6 ids; 50 words */
    static const int32_t  tok[] = { 21, 22, 23, 0 };
    static const int32_t  pos[] = { 2, 7, 8, -1 };
    static const int32_t  seq[] = { 0, 1, 2, 0 };
    static const int32_t  toff[] = { 0, 1, 3, 0 };
    static const int32_t  run0[] = { 0, 1, 2, 3 };
    static const int32_t  rlen[] = { 1, 1, 1, 1 };
    static const int32_t  rows[] = { 0, 1, 2, 0 };
    static const int32_t  table[] = { 5, 1, 2, 3, 7, 11 };

    p[0].temperature = 0.0f;
    p[0].top_k = 0;
    p[0].top_p = 1.0f;
    p[0].coin = 0.0f;
    p[1].temperature = 0.7f;
    p[1].top_k = 40;
    p[1].top_p = 0.9f;
    p[1].coin = 0.25f;
    p[2] = p[1];
    p[2].coin = 0.5f;

    env_init(&e);

    assert_int_equal(kvs_cuda_plan_pack(&e.pk, &b, 0, 3, 4, p, &pd, &err),
                     KVS_OK);
    assert_int_equal(pd.n_tok, 3);
    assert_int_equal(pd.n_pad, 4);
    assert_int_equal(pd.n_seq, 4);
    assert_int_equal(pd.n_run, 4);
    assert_int_equal(pd.n_want, 3);
    assert_int_equal(pd.n_rows, 4);
    assert_int_equal(pd.n_table, 6);
    assert_int_equal(pd.table, 44);
    assert_int_equal(pd.n_words, 50);

    assert_words(e.words + pd.tok, tok, 4, "tok");
    assert_words(e.words + pd.pos, pos, 4, "pos");
    assert_words(e.words + pd.seq, seq, 4, "seq");
    assert_words(e.words + pd.table_off, toff, 4, "table_off");
    assert_words(e.words + pd.run_tok0, run0, 4, "run_tok0");
    assert_words(e.words + pd.run_len, rlen, 4, "run_len");
    assert_words(e.words + pd.rows, rows, 4, "rows");
    assert_words(e.words + pd.table, table, 6, "table");

    memcpy(&got, e.words + pd.params + 2 * KVS_CUDA_PARAM_WORDS,
           sizeof(got));
    assert_true(got.temperature == 0.7f && got.top_k == 40
                && got.top_p == 0.9f && got.coin == 0.5f);

    /* the pad row samples greedily */
    memcpy(&got, e.words + pd.params + 3 * KVS_CUDA_PARAM_WORDS,
           sizeof(got));
    assert_true(got.temperature == 0.0f && got.top_k == 0
                && got.top_p == 1.0f);

    assert_int_equal(e.words[50], POISON);
}


static void
pack_bad(kvs_batch_tok_t *toks, uint32_t n, uint32_t pad_to, int code,
    const char *msg)
{
    env_t              e;
    kvs_err_t          err;
    kvs_batch_t        b = { toks, n };
    kvs_cuda_packed_t  pd;

    env_init(&e);
    memset(&pd, 0x77, sizeof(pd));

    assert_int_equal(kvs_cuda_plan_pack(&e.pk, &b, 0, n, pad_to, NULL, &pd,
                                        &err), code);
    assert_untouched(&e);

    if (strstr(err.msg, msg) == NULL) {
        fail_msg("message \"%s\" lacks \"%s\"", err.msg, msg);
    }

    if (code == KVS_EINVAL && pad_to == 0) {
        assert_int_equal(kvs_cuda_plan_check(&e.pk, &b, 0, n, &err), code);
    }
}


static void
test_pack_rejects(void **state)
{
    uint32_t         bad[] = { 3, 16, 9 }, bad2[] = { 3, 7, 99 };
    kvs_kv_table_t   tbad = { bad, 3, 3, 10, BT, 0 };
    kvs_kv_table_t   tbad2 = { bad2, 3, 3, 10, BT, 0 };
    kvs_kv_table_t   t8 = { blk_a, 3, 3, 10, 8, 0 };
    kvs_kv_table_t   tshort = { blk_a, 2, 3, 10, BT, 0 };  /* 2 blocks for
                                                           10 positions */
    kvs_batch_tok_t  t[4];

    t[0] = mixed[6];
    t[1] = mixed[7];
    t[2] = mixed[8];

    t[1].token = -1;
    pack_bad(t, 3, 0, KVS_EINVAL, "entry 1: token -1 outside");
    t[1].token = VOCAB;
    pack_bad(t, 3, 0, KVS_EINVAL, "entry 1: token 32 outside");
    t[1] = mixed[7];

    t[2].table = NULL;
    pack_bad(t, 3, 0, KVS_EINVAL, "entry 2 has no block table");
    t[2] = mixed[8];

    t[0].pos = 3;                               /* B covers 3 positions */
    pack_bad(t, 3, 0, KVS_EINVAL, "entry 0: position 3 is not covered");
    t[0] = mixed[6];

    t[1].table = &tshort;
    t[1].pos = 9;
    pack_bad(t, 3, 0, KVS_EINVAL, "entry 1: position 9 is not covered");
    t[1] = mixed[7];

    t[2].table = &t8;
    pack_bad(t, 3, 0, KVS_EINVAL, "entry 2: table blocks of 8 tokens");
    t[2] = mixed[8];

    /* block id 16 of a 16-block cache, read from position 4 on */
    t[1].table = &tbad;
    t[1].pos = 3;
    assert_true(t[1].pos / BT == 0);
    t[2].table = &tbad;
    t[2].pos = 4;
    pack_bad(t, 3, 0, KVS_EINVAL, "entry 2: block id 16 beyond");
    t[1] = mixed[7];
    t[2] = mixed[8];

    /* a run of three: only its last token (pos 8) reaches block 99 */
    t[0].table = &tbad2;
    t[0].pos = 6;
    t[1].table = &tbad2;
    t[1].pos = 7;
    t[2].table = &tbad2;
    t[2].pos = 8;
    pack_bad(t, 3, 0, KVS_EINVAL, "entry 2: block id 99 beyond");

    /* padding a prefill run, padding below n */
    t[0] = mixed[0];
    t[1] = mixed[1];
    pack_bad(t, 2, 4, KVS_EINVAL, "not all decodes");
    t[0] = mixed[6];
    t[1] = mixed[7];
    t[2] = mixed[8];
    pack_bad(t, 3, 2, KVS_EINVAL, "padded to 2");

    pack_bad(t, 0, 0, KVS_EINVAL, "empty batch");
}


/* With every layer windowed (swa_all), the blocks wholly before a
 * token's window may be holes; one inside it may not, nor any without a
 * window. */
static void
test_check_window_holes(void **state)
{
    env_t            e;
    kvs_err_t        err;
    uint32_t         ids[] = { KVS_KV_HOLE, KVS_KV_HOLE, 9, 10 };
    kvs_kv_table_t   th = { ids, 4, 4, 16, BT, 2 };
    kvs_batch_tok_t  t[1] = { { 1, 13, &th, 1 } };
    kvs_batch_t      b = { t, 1 };

    env_init(&e);
    e.pk.swa_all = 5;

    /* 13 reads 9..13, 12 reads 8..12: block 2 on */
    assert_int_equal(kvs_cuda_plan_check(&e.pk, &b, 0, 1, &err), KVS_OK);
    t[0].pos = 12;
    assert_int_equal(kvs_cuda_plan_check(&e.pk, &b, 0, 1, &err), KVS_OK);

    /* 11 reads 7..11: position 7 is in block 1, a hole */
    t[0].pos = 11;
    assert_int_equal(kvs_cuda_plan_check(&e.pk, &b, 0, 1, &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "block id 4294967295 beyond"));

    t[0].pos = 13;
    e.pk.swa_all = 0;
    assert_int_equal(kvs_cuda_plan_check(&e.pk, &b, 0, 1, &err),
                     KVS_EINVAL);
}


static void
test_pack_capacity(void **state)
{
    env_t              e;
    kvs_err_t          err;
    kvs_batch_t        b = { mixed, 9 };
    kvs_cuda_packed_t  pd;

    /* 108 words needed */
    env_init(&e);
    e.pk.cap_words = 107;
    assert_int_equal(kvs_cuda_plan_pack(&e.pk, &b, 0, 9, 0, NULL, &pd,
                                        &err), KVS_ERANGE);
    assert_untouched(&e);
    assert_non_null(strstr(err.msg, "107 words"));

    e.pk.cap_words = 108;
    assert_int_equal(kvs_cuda_plan_pack(&e.pk, &b, 0, 9, 0, NULL, &pd,
                                        &err), KVS_OK);

    /* four sequences, room for three */
    env_init(&e);
    e.pk.cap_seq = 3;
    assert_int_equal(kvs_cuda_plan_pack(&e.pk, &b, 0, 9, 0, NULL, &pd,
                                        &err), KVS_ERANGE);
    assert_untouched(&e);
    assert_non_null(strstr(err.msg, "entry 8: more than 3 sequences"));
}


static void
test_slice(void **state)
{
    kvs_batch_t  b = { mixed, 9 };

    assert_int_equal(kvs_cuda_plan_slice(&b, 0, 100, 100, 100, BT), 9);
    assert_int_equal(kvs_cuda_plan_slice(&b, 0, 3, 100, 100, BT), 3);
    assert_int_equal(kvs_cuda_plan_slice(&b, 3, 100, 100, 100, BT), 6);

    /* logits at 5, 6, 7, 8: two rows end the slice before entry 7 */
    assert_int_equal(kvs_cuda_plan_slice(&b, 0, 100, 2, 100, BT), 7);
    assert_int_equal(kvs_cuda_plan_slice(&b, 0, 100, 0, 100, BT), 5);

    /* table ids: A4 2, A5..A7 0, A8 1, A9 0 (3), B2 1 (4), C7 2 (6) */
    assert_int_equal(kvs_cuda_plan_slice(&b, 0, 100, 100, 4, BT), 7);
    assert_int_equal(kvs_cuda_plan_slice(&b, 0, 100, 100, 6, BT), 8);

    /* from A6 a run starts afresh: 2 ids, A8 1 more */
    assert_int_equal(kvs_cuda_plan_slice(&b, 2, 100, 100, 2, BT), 2);

    /* always one entry, even over the limits */
    assert_int_equal(kvs_cuda_plan_slice(&b, 8, 100, 0, 0, BT), 1);

    assert_int_equal(kvs_cuda_plan_decode_only(&b, 6, 3), 1);
    assert_int_equal(kvs_cuda_plan_decode_only(&b, 5, 4), 1);
    assert_int_equal(kvs_cuda_plan_decode_only(&b, 0, 9), 0);
    assert_int_equal(kvs_cuda_plan_decode_only(&b, 4, 2), 0);
}


static void
test_buckets(void **state)
{
    assert_int_equal(kvs_cuda_plan_bucket(0, 512), 0);
    assert_int_equal(kvs_cuda_plan_bucket(1, 512), 1);
    assert_int_equal(kvs_cuda_plan_bucket(2, 512), 2);
    assert_int_equal(kvs_cuda_plan_bucket(3, 512), 4);
    assert_int_equal(kvs_cuda_plan_bucket(5, 512), 8);
    assert_int_equal(kvs_cuda_plan_bucket(17, 512), 32);
    assert_int_equal(kvs_cuda_plan_bucket(200, 512), 256);
    assert_int_equal(kvs_cuda_plan_bucket(256, 512), 256);
    assert_int_equal(kvs_cuda_plan_bucket(257, 512), 384);
    assert_int_equal(kvs_cuda_plan_bucket(384, 512), 384);
    assert_int_equal(kvs_cuda_plan_bucket(385, 512), 512);
    assert_int_equal(kvs_cuda_plan_bucket(513, 512), 0);
    assert_int_equal(kvs_cuda_plan_bucket(1000, 1024), 1024);
    assert_int_equal(kvs_cuda_plan_bucket(100, 64), 0);
    /* clamped to a max off the ladder */
    assert_int_equal(kvs_cuda_plan_bucket(33, 40), 40);
    assert_int_equal(kvs_cuda_plan_bucket(300, 300), 300);
    assert_int_equal(kvs_cuda_plan_bucket(UINT32_MAX, UINT32_MAX),
                     UINT32_MAX);

    assert_int_equal(kvs_cuda_plan_ctx_bucket(0), 256);
    assert_int_equal(kvs_cuda_plan_ctx_bucket(1), 256);
    assert_int_equal(kvs_cuda_plan_ctx_bucket(256), 256);
    assert_int_equal(kvs_cuda_plan_ctx_bucket(257), 512);
    assert_int_equal(kvs_cuda_plan_ctx_bucket(1000), 1024);
    assert_int_equal(kvs_cuda_plan_ctx_bucket(8192), 8192);
    assert_true(kvs_cuda_plan_ctx_bucket(UINT32_C(1) << 31)
                == UINT32_C(1) << 31);
    assert_int_equal(kvs_cuda_plan_ctx_bucket((UINT32_C(1) << 31) + 1), 0);
}


static void
test_split(void **state)
{
    /* H200: 132 SMs, aim 264 CTAs; 8 KV heads */
    /* 1 token: 8 CTAs -> 33 parts; 8192 / 256 = 32 by length */
    assert_int_equal(kvs_cuda_plan_split(1, 8192, 8, 132, 64, SIZE_MAX, 0),
                     32);
    /* 4 tokens: 32 CTAs -> ceil(264 / 32) = 9 */
    assert_int_equal(kvs_cuda_plan_split(4, 8192, 8, 132, 64, SIZE_MAX, 0),
                     9);
    /* 64 tokens: 512 CTAs already */
    assert_int_equal(kvs_cuda_plan_split(64, 8192, 8, 132, 64, SIZE_MAX, 0),
                     1);
    /* 1000 positions: ceil(1000 / 256) = 4 parts at most */
    assert_int_equal(kvs_cuda_plan_split(1, 1000, 8, 132, 64, SIZE_MAX, 0),
                     4);
    assert_int_equal(kvs_cuda_plan_split(1, 8192, 8, 132, 16, SIZE_MAX, 0),
                     16);
    /* scratch for 10 token-parts, 4 tokens: 2 parts */
    assert_int_equal(kvs_cuda_plan_split(4, 8192, 8, 132, 64, 10 * 130,
                                         130), 2);
    /* never below one */
    assert_int_equal(kvs_cuda_plan_split(4, 8192, 8, 132, 64, 1, 130), 1);
    assert_int_equal(kvs_cuda_plan_split(0, 8192, 8, 132, 64, SIZE_MAX, 0),
                     1);
    assert_int_equal(kvs_cuda_plan_split(1, 1, 8, 132, 64, SIZE_MAX, 0), 1);

    /* 256 = 2^8 */
    assert_true(kvs_cuda_plan_key(1, 256, 1, 0)
                == ((UINT64_C(1) << 32) | (UINT64_C(8) << 24) | 2));
    assert_true(kvs_cuda_plan_key(8, 1024, 4, 1)
                == ((UINT64_C(8) << 32) | (UINT64_C(10) << 24) | 9));
    assert_true(kvs_cuda_plan_key(1, 256, 1, 0)
                != kvs_cuda_plan_key(1, 256, 1, 1));
    assert_true(kvs_cuda_plan_key(1, 256, 1, 0)
                != kvs_cuda_plan_key(1, 512, 1, 0));
    assert_true(kvs_cuda_plan_key(1, 256, 1, 0)
                != kvs_cuda_plan_key(1, 256, 2, 0));
    assert_true(kvs_cuda_plan_key(1, 256, 1, 0)
                != kvs_cuda_plan_key(2, 256, 1, 0));
}


static void
test_tensor_bytes(void **state)
{
    uint32_t   t;
    size_t     n, total, off;
    kvs_err_t  err;

    assert_int_equal(kvs_cuda_plan_dtype(KVS_GGML_F32, 1), KVS_CUDA_DT_F32);
    assert_int_equal(kvs_cuda_plan_dtype(KVS_GGML_F16, 1), KVS_CUDA_DT_F16);
    assert_int_equal(kvs_cuda_plan_dtype(KVS_GGML_BF16, 1),
                     KVS_CUDA_DT_BF16);
    assert_int_equal(kvs_cuda_plan_dtype(KVS_GGML_Q8_0, 1),
                     KVS_CUDA_DT_BF16);
    assert_int_equal(kvs_cuda_plan_dtype(KVS_GGML_IQ2_XXS, 1), -1);
    assert_int_equal(kvs_cuda_plan_dtype(KVS_GGML_IQ2_XXS, 0), -1);
    assert_int_equal(kvs_cuda_plan_dtype(KVS_GGML_BF16, 0), KVS_CUDA_DT_F32);
    /* a vector of any table type is dequantized on the host */
    assert_int_equal(kvs_cuda_plan_dtype(KVS_GGML_Q8_0, 0), KVS_CUDA_DT_F32);

    /* every table type loads: F32 / F16 as they are, the rest as BF16
     * (2 bytes per element on the device, whatever their bits); every
     * other type is refused */
    for (t = 0; t < KVS_GGML_TYPE_END; t++) {
        if (kvs_quant_type(t) == NULL) {
            assert_int_equal(kvs_cuda_plan_dtype(t, 1), -1);
            assert_int_equal(kvs_cuda_plan_tensor_bytes(t, 1, 256, &n, &err),
                             KVS_EUNSUPPORTED);
            continue;
        }

        assert_int_equal(kvs_cuda_plan_dtype(t, 0), KVS_CUDA_DT_F32);
        assert_int_equal(kvs_cuda_plan_dtype(t, 1),
                         t == KVS_GGML_F32 ? KVS_CUDA_DT_F32
                         : t == KVS_GGML_F16 ? KVS_CUDA_DT_F16
                         : KVS_CUDA_DT_BF16);
        assert_int_equal(kvs_cuda_plan_tensor_bytes(t, 1, 256, &n, &err),
                         KVS_OK);
        assert_int_equal(n, t == KVS_GGML_F32 ? 1024 : 512);
    }

    /* Q8_0 64 elements: 68 bytes in the file, 128 as BF16 */
    assert_int_equal(kvs_cuda_plan_tensor_bytes(KVS_GGML_Q8_0, 1, 64, &n,
                                                &err), KVS_OK);
    assert_int_equal(n, 128);
    assert_int_equal(kvs_cuda_plan_tensor_bytes(KVS_GGML_F32, 1, 10, &n,
                                                &err), KVS_OK);
    assert_int_equal(n, 40);
    assert_int_equal(kvs_cuda_plan_tensor_bytes(KVS_GGML_F16, 1, 10, &n,
                                                &err), KVS_OK);
    assert_int_equal(n, 20);
    /* an F16 vector becomes F32 */
    assert_int_equal(kvs_cuda_plan_tensor_bytes(KVS_GGML_F16, 0, 10, &n,
                                                &err), KVS_OK);
    assert_int_equal(n, 40);
    assert_int_equal(kvs_cuda_plan_tensor_bytes(KVS_GGML_IQ2_XXS, 1, 256,
                                                &n, &err), KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "IQ2_XXS"));
    /* 2^62 floats: 2^64 bytes */
    assert_int_equal(kvs_cuda_plan_tensor_bytes(KVS_GGML_F32, 1,
                                                UINT64_C(1) << 62, &n,
                                                &err), KVS_ERANGE);
    assert_int_equal(n, 0);

    total = 0;
    assert_int_equal(kvs_cuda_plan_carve(&total, 10, &off, &err), KVS_OK);
    assert_int_equal(off, 0);
    assert_int_equal(total, 10);
    assert_int_equal(kvs_cuda_plan_carve(&total, 5, &off, &err), KVS_OK);
    assert_int_equal(off, 256);
    assert_int_equal(total, 261);
    assert_int_equal(kvs_cuda_plan_carve(&total, 0, &off, &err), KVS_OK);
    assert_int_equal(off, 512);
    assert_int_equal(total, 512);

    total = SIZE_MAX - 10;
    off = 7;
    assert_int_equal(kvs_cuda_plan_carve(&total, 1, &off, &err), KVS_ERANGE);
    assert_true(total == SIZE_MAX - 10 && off == 7);
    total = 256;
    assert_int_equal(kvs_cuda_plan_carve(&total, SIZE_MAX - 100, &off,
                                         &err), KVS_ERANGE);
}


static void
test_workspace(void **state)
{
    kvs_err_t           err;
    kvs_cuda_ws_t       ws;
    kvs_cuda_ws_conf_t  c;

    memset(&c, 0, sizeof(c));
    c.n_embd = 8;
    c.n_ff = 16;
    c.q_width = 8;
    c.k_width = 4;
    c.v_width = 4;
    c.o_width = 8;
    c.n_vocab = 32;
    c.n_head_kv = 2;
    c.max_tok = 4;
    c.max_rows = 2;
    c.max_table = 10;
    c.max_split = 4;
    c.max_ctx = 1024;
    c.n_sm = 4;
    c.in_size = 2;
    c.part_unit = 16;
    c.sample_bytes = 100;
    c.blas_bytes = 1000;

    /* parts: bucket 1: 2 CTAs for 8 wanted -> 4; bucket 2: 4 -> 2;
     * most of max_tok 4, 1 x 4, 2 x 2 is 4: 4 x 16 = 64 floats; pack
     * 11 x 4 + 10 = 54 words.  Offsets, 256-aligned:
     *   x 0 +128, r 256 +128, q 512 +128, k 768 +64, v 1024 +64,
     *   att 1280 +128, h 1536 +512 (4 x 32 x 4), in 2048 +128 (4 x 16 x
     *   2), logits 2304 +256, part 2560 +256, sample 2816 +100, ids
     *   3072 +8, blas 3328 +1000, pack 4352 +216 = 4568 */
    assert_int_equal(kvs_cuda_plan_workspace(&ws, &c, &err), KVS_OK);
    assert_int_equal(ws.part_floats, 64);
    assert_int_equal(ws.pack_words, 54);
    assert_int_equal(ws.x, 0);
    assert_int_equal(ws.r, 256);
    assert_int_equal(ws.q, 512);
    assert_int_equal(ws.k, 768);
    assert_int_equal(ws.v, 1024);
    assert_int_equal(ws.att, 1280);
    assert_int_equal(ws.h, 1536);
    assert_int_equal(ws.in, 2048);
    assert_int_equal(ws.logits, 2304);
    assert_int_equal(ws.part, 2560);
    assert_int_equal(ws.sample, 2816);
    assert_int_equal(ws.ids, 3072);
    assert_int_equal(ws.blas, 3328);
    assert_int_equal(ws.pack, 4352);
    assert_int_equal(ws.total, 4568);

    /* 64 SMs, 128 CTAs wanted: decode parts dominate: bucket 1 (2 CTAs)
     * -> 64 parts, capped at 4; bucket 2 -> 32 -> 4: 2 x 4 = 8
     * token-parts, 128 floats */
    c.n_sm = 64;
    assert_int_equal(kvs_cuda_plan_workspace(&ws, &c, &err), KVS_OK);
    assert_int_equal(ws.part_floats, 128);

    c.max_rows = 5;
    assert_int_equal(kvs_cuda_plan_workspace(&ws, &c, &err), KVS_EINVAL);

    c.max_rows = 1;
    c.max_tok = UINT32_MAX;
    c.n_embd = UINT32_MAX;
    c.max_table = UINT32_MAX;
    assert_int_equal(kvs_cuda_plan_workspace(&ws, &c, &err), KVS_ERANGE);
    assert_int_equal(ws.total, 0);
}


static void
test_blocks(void **state)
{
    uint32_t        n;
    uint64_t        bb;
    kvs_err_t       err;
    kvs_cuda_mem_t  m;

    /* 2 layers x 16 tokens x (64 + 64) x 2 bytes */
    assert_int_equal(kvs_cuda_plan_block_bytes(2, 16, 64, 64, 2, &bb, &err),
                     KVS_OK);
    assert_true(bb == 8192);
    assert_int_equal(kvs_cuda_plan_block_bytes(UINT32_MAX, UINT32_MAX,
                                               UINT32_MAX, UINT32_MAX, 8,
                                               &bb, &err), KVS_ERANGE);
    assert_true(bb == 0);

    memset(&m, 0, sizeof(m));
    m.free = 10000000;
    m.weights = 3000000;
    m.workspace = 1000000;
    m.stage = 500000;
    m.reserve = 1000000;
    m.block_bytes = 8192;
    m.fraction = 0.9;
    m.max_blocks = INT32_MAX;

    /* (10M - 5M) x 0.9 = 4.5M; / 8192 = 549.3 */
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_OK);
    assert_int_equal(n, 549);

    m.fraction = 1.0;                           /* 5M / 8192 = 610.4 */
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_OK);
    assert_int_equal(n, 610);

    m.max_blocks = 100;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_OK);
    assert_int_equal(n, 100);
    assert_int_equal(kvs_cuda_plan_blocks(&m, 101, &n, &err), KVS_ERANGE);
    m.max_blocks = INT32_MAX;

    /* asked for: 610 x 8192 = 4997120 fits in 5M, 611 (5005312) not */
    assert_int_equal(kvs_cuda_plan_blocks(&m, 610, &n, &err), KVS_OK);
    assert_int_equal(n, 610);
    assert_int_equal(kvs_cuda_plan_blocks(&m, 611, &n, &err), KVS_ENOMEM);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err.msg, "611 KV blocks of 8192 bytes, 5000000 "
                           "free"));

    /* 3M + 1M + 0.5M + 1M = 5.5M: fits exactly, and not a byte less */
    m.free = 5500000;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_OK);
    assert_int_equal(n, 61);                    /* 500000 / 8192 */
    m.free = 5499999;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_ENOMEM);
    assert_non_null(strstr(err.msg, "weights 3000000 + workspace 1000000 "
                           "+ load staging 500000 + reserve 1000000 = "
                           "5500000 bytes, 5499999 free"));

    /* room for the weights, not for one block (no staging now: 5M) */
    m.stage = 0;
    m.free = 5008191;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_ENOMEM);
    assert_non_null(strstr(err.msg, "no room for one KV block of 8192"));
    m.free = 5008192;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_OK);
    assert_int_equal(n, 1);

    m.fraction = 0.0;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_EINVAL);
    m.fraction = 1.5;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_EINVAL);
    m.fraction = NAN;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_EINVAL);
    m.fraction = 0.5;

    m.block_bytes = 0;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_EINVAL);
    m.block_bytes = 8192;

    m.weights = UINT64_MAX;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 0, &n, &err), KVS_ERANGE);
    m.weights = 3000000;

    /* 3 blocks of 2^63 - 1 bytes: the product overflows */
    m.free = UINT64_MAX;
    m.block_bytes = UINT64_MAX / 2;
    assert_int_equal(kvs_cuda_plan_blocks(&m, 3, &n, &err), KVS_ENOMEM);
    assert_int_equal(kvs_cuda_plan_blocks(&m, 1, &n, &err), KVS_OK);
}


/*
 * Every architecture the CPU backend computes is planned for CUDA: a
 * windowed phi3, gemma2 and gemma3 (generated, tiny) pass
 * kvs_cuda_plan_arch, and kvs_cuda_plan_weights accounts for every
 * tensor in their files (gemma's post-norms included) plus one RoPE
 * table, two for gemma3 (its windowed layers' own base); heads wider
 * than the attention kernels take are refused, naming the width.
 */
static void
test_plan_arch(void **state)
{
    int                       kv_dt;
    size_t                    size, total, off;
    uint64_t                  i, bytes;
    uint32_t                  c, tables;
    kvs_err_t                 err;
    kvs_hparams_t             hp;
    kvs_gen_spec_t            spec;
    kvs_test_model_t          md;
    const kvs_gguf_tensor_t  *t;

    static const struct {
        kvs_arch_t  arch;
        uint32_t    n_swa;
    } cases[] = {
        { KVS_ARCH_PHI3, 8 }, { KVS_ARCH_GEMMA2, 8 }, { KVS_ARCH_GEMMA3, 8 },
        { KVS_ARCH_LLAMA, 0 },
    };

    for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        assert_int_equal(kvs_gen_preset(&spec, "tiny", &err), KVS_OK);
        snprintf(spec.name, sizeof(spec.name), "cuda-plan-arch-%u", c);
        spec.arch = cases[c].arch;
        spec.n_swa = cases[c].n_swa;
        spec.seed = 3;
        spec.tied = cases[c].arch == KVS_ARCH_GEMMA2
                    || cases[c].arch == KVS_ARCH_GEMMA3;
        kvs_test_model_gen(&md, &spec);

        assert_int_equal(md.m->hp.n_swa, cases[c].n_swa);
        assert_int_equal(kvs_cuda_plan_arch(&md.m->hp, &err), KVS_OK);
        assert_int_equal(kvs_cuda_plan_weights(md.m, &bytes, &kv_dt, &err),
                         KVS_OK);

        /* the carve's total does not depend on the order: each buffer
         * starts aligned, so it is the aligned sizes but the last's */
        total = 0;

        for (i = 0; i < kvs_gguf_n_tensors(md.m->gguf); i++) {
            t = kvs_gguf_tensor_at(md.m->gguf, i);
            assert_int_equal(kvs_cuda_plan_tensor_bytes(t->type,
                                 t->nelem != t->ne[0], t->nelem, &size,
                                 &err), KVS_OK);
            assert_int_equal(kvs_cuda_plan_carve(&total, size, &off, &err),
                             KVS_OK);
        }

        tables = cases[c].arch == KVS_ARCH_GEMMA3 ? 2 : 1;
        assert_true((md.m->hp.rope_base_swa != 0.0) == (tables == 2));

        while (tables-- > 0) {
            assert_int_equal(kvs_cuda_plan_carve(&total,
                                 (size_t) md.m->hp.n_rot / 2
                                 * sizeof(double), &off, &err), KVS_OK);
        }

        assert_int_equal(bytes, total);

        if (cases[c].arch == KVS_ARCH_GEMMA2) {
            assert_true(md.m->hp.post_norms && md.m->hp.geglu
                        && md.m->hp.attn_softcap != 0.0
                        && md.m->hp.final_softcap != 0.0);
        }

        kvs_vocab_free(md.v);
        kvs_model_close(md.m);
    }

    memset(&hp, 0, sizeof(hp));
    snprintf(hp.arch, sizeof(hp.arch), "gemma2");
    hp.head_dim_k = KVS_CUDA_HEAD_MAX;
    hp.head_dim_v = KVS_CUDA_HEAD_MAX;
    assert_int_equal(kvs_cuda_plan_arch(&hp, &err), KVS_OK);

    hp.head_dim_k = 2 * KVS_CUDA_HEAD_MAX;
    assert_int_equal(kvs_cuda_plan_arch(&hp, &err), KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "512"));

    hp.head_dim_k = KVS_CUDA_HEAD_MAX;
    hp.head_dim_v = KVS_CUDA_HEAD_MAX + 1;
    assert_int_equal(kvs_cuda_plan_arch(&hp, &err), KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "257"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_pack_mixed),
        cmocka_unit_test(test_pack_same_table_twice),
        cmocka_unit_test(test_pack_padded),
        cmocka_unit_test(test_pack_rejects),
        cmocka_unit_test(test_check_window_holes),
        cmocka_unit_test(test_pack_capacity),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_tensor_bytes),
        cmocka_unit_test(test_workspace),
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_plan_arch),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
