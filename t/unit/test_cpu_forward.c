/*
 * test_cpu_forward: the CPU backend's forward pass over the paged KV cache
 * reproduces llama2.c run.c on stories260K: the greedy ids of the
 * fixtures' derived file (one token per step, and with a prefill chunk),
 * the logits run.c printed after BOS, the same ids for sequences batched
 * together and for block sizes 1, 16 and 64, and the upstream reference
 * texts (n200 and n256) once the ids are decoded.  Bad batches are
 * refused, changing nothing, and every block is back in the pool at the
 * end.
 */

#include "kvs_test_cpu.h"

#include <math.h>
#include <time.h>

#include "base/kvs_buf.h"
#include "sample/kvs_sample.h"
#include "tokenizer/kvs_tok.h"
#include "tokenizer/kvs_vocab.h"

#define N_REF     257                 /* BOS + 256 greedy ids */
#define N_SEQ     3


typedef struct {
    kvs_model_t      *m;
    kvs_cpu_model_t  *cm;
    int32_t           ref[N_REF];     /* greedy_t0_n256 of the fixture */
} fx_t;


/* Reads the line "<key>: BOS + 256 ids" of the derived ids file. */
static int
fx_read_ids(const char *key, int32_t *ref)
{
    const char  *path, *p;
    char        *end, *txt;
    size_t       len, i;
    long         id;

    path = kvs_test_fixture("models/stories260K.derived-token-ids.txt");
    if (path == NULL) {
        return -1;
    }

    txt = (char *) kvs_test_slurp(path, &len);
    assert_non_null(txt);

    p = strstr(txt, key);
    assert_non_null(p);
    p += strlen(key);

    for (i = 0; i < N_REF; i++) {
        id = strtol(p, &end, 10);
        assert_true(end != p);
        assert_true(id >= 0 && id < 512);
        ref[i] = (int32_t) id;
        p = end;
    }

    /* the line holds exactly BOS + 256 ids */
    while (*p == ' ') {
        p++;
    }
    assert_true(*p == '\n' || *p == '\0');
    assert_int_equal(ref[0], 1);

    free(txt);

    return 0;
}


static int
fx_setup(void **state)
{
    fx_t        *fx;
    kvs_err_t    err;
    const char  *path;

    fx = calloc(1, sizeof(fx_t));
    assert_non_null(fx);
    *state = fx;

    path = kvs_test_fixture("models/stories260K-f32.gguf");
    if (path == NULL || fx_read_ids("\ngreedy_t0_n256:", fx->ref) != 0) {
        return 0;
    }

    if (kvs_model_open(&fx->m, path, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    if (kvs_cpu_model_new(&fx->cm, fx->m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    return 0;
}


static int
fx_teardown(void **state)
{
    fx_t  *fx;

    fx = *state;
    kvs_cpu_model_free(fx->cm);
    kvs_model_close(fx->m);
    free(fx);

    return 0;
}


/* Greedy run of one sequence from the first n_prompt reference ids, with
 * prefill chunks of `chunk`; the ids must be the reference's. */
static void
greedy_one(fx_t *fx, uint32_t block_tokens, uint32_t n_prompt,
    uint32_t chunk, double *tok_per_s)
{
    int32_t          ids[N_REF];
    uint32_t         n_blocks;
    kvs_err_t        err;
    kvs_cpu_kv_t    *kv;
    kvs_kv_pool_t   *pool;
    kvs_test_seq_t   seq;
    struct timespec  t0, t1;

    n_blocks = (N_REF + block_tokens - 1) / block_tokens;
    assert_int_equal(kvs_kv_pool_new(&pool, n_blocks, block_tokens, &err),
                     KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, fx->cm, n_blocks, block_tokens,
                                    &err), KVS_OK);

    memset(&seq, 0, sizeof(seq));
    seq.ids = ids;
    memcpy(seq.ids, fx->ref, n_prompt * sizeof(int32_t));
    seq.n_prompt = n_prompt;
    seq.n_ids = n_prompt;
    seq.n_total = N_REF;
    seq.chunk = chunk;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    kvs_test_run_seqs(fx->cm, kv, pool, &seq, 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);

    if (tok_per_s != NULL) {
        *tok_per_s = (N_REF - n_prompt)
                     / ((t1.tv_sec - t0.tv_sec)
                        + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    }

    assert_int_equal(seq.n_ids, N_REF);
    assert_memory_equal(seq.ids, fx->ref, N_REF * sizeof(int32_t));

    assert_int_equal(kvs_kv_table_release(&seq.table, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);

    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
}


/* After BOS at position 0 the logits are run.c's (the fixtures' README,
 * "Derived values"), within the float tolerance it recommends. */
static void
test_bos_logits(void **state)
{
    static const float    first[8] = {
        -6.222911f, 8.404342f, -6.223737f, -6.222542f,
        -6.221951f, -6.222875f, -6.221880f, -6.223416f
    };
    static const int32_t  top_id[5] = { 403, 385, 410, 317, 407 };
    static const float    top_val[5] = {
        17.023516f, 15.406213f, 13.108263f, 12.769166f, 12.418087f
    };

    fx_t             *fx;
    float            *lg;
    int               i;
    kvs_err_t         err;
    kvs_cpu_kv_t     *kv;
    kvs_batch_tok_t   tok;
    kvs_kv_pool_t    *pool;
    kvs_kv_table_t    table;
    kvs_batch_t       b;

    fx = *state;
    if (fx->cm == NULL) {
        skip();
    }

    assert_int_equal(fx->cm->hp.n_vocab, 512);
    assert_int_equal(kvs_kv_pool_new(&pool, 1, 16, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, fx->cm, 1, 16, &err), KVS_OK);
    memset(&table, 0, sizeof(table));
    assert_int_equal(kvs_kv_table_reserve(&table, pool, 1, &err), KVS_OK);

    lg = malloc(512 * sizeof(float));
    assert_non_null(lg);

    tok.token = 1;
    tok.pos = 0;
    tok.table = &table;
    tok.want_logits = 1;
    b.toks = &tok;
    b.n = 1;
    assert_int_equal(kvs_cpu_forward(fx->cm, kv, &b, lg, &err), KVS_OK);

    for (i = 0; i < 8; i++) {
        assert_true(fabsf(lg[i] - first[i]) < 1e-4f);
    }

    for (i = 0; i < 5; i++) {
        assert_true(fabsf(lg[top_id[i]] - top_val[i]) < 1e-4f);
    }

    assert_int_equal(kvs_test_argmax(lg, 512), 403);

    free(lg);
    assert_int_equal(kvs_kv_table_release(&table, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
}


static void
test_greedy_decode(void **state)
{
    fx_t    *fx;
    double   tps;

    fx = *state;
    if (fx->cm == NULL) {
        skip();
    }

    greedy_one(fx, 16, 1, 1, &tps);
    print_message("decode: %.0f tokens/s (256 steps, batch 1)\n", tps);
}


static void
test_greedy_prefill(void **state)
{
    fx_t  *fx;

    fx = *state;
    if (fx->cm == NULL) {
        skip();
    }

    /* the first 10 ids as one batch, then decode */
    greedy_one(fx, 16, 10, 10, NULL);
    /* a 40-token prompt in chunks of 7 (chunks cross block borders) */
    greedy_one(fx, 16, 40, 7, NULL);
}


static void
test_block_sizes(void **state)
{
    fx_t  *fx;

    fx = *state;
    if (fx->cm == NULL) {
        skip();
    }

    greedy_one(fx, 1, 1, 1, NULL);
    greedy_one(fx, 64, 1, 1, NULL);
    greedy_one(fx, 1, 20, 20, NULL);
    greedy_one(fx, 64, 100, 33, NULL);
}


/* Three sequences of different prompt and output lengths, interleaved in
 * the same batches from one pool, each get the ids they get alone: the
 * reference's, since every prompt is a prefix of it. */
static void
test_batched(void **state)
{
    static const uint32_t  prompt[N_SEQ] = { 1, 10, 23 };
    static const uint32_t  total[N_SEQ] = { N_REF, 100, 180 };
    static const uint32_t  chunk[N_SEQ] = { 1, 10, 5 };
    static const uint32_t  bts[3] = { 1, 16, 64 };

    fx_t             *fx;
    int32_t          *ids;              /* [N_SEQ][N_REF] */
    uint32_t          s, i, n_blocks;
    kvs_err_t         err;
    kvs_cpu_kv_t     *kv;
    kvs_kv_pool_t    *pool;
    kvs_test_seq_t   *seqs;

    fx = *state;
    if (fx->cm == NULL) {
        skip();
    }

    seqs = calloc(N_SEQ, sizeof(kvs_test_seq_t));
    ids = calloc(N_SEQ * N_REF, sizeof(int32_t));
    assert_non_null(seqs);
    assert_non_null(ids);

    for (i = 0; i < 3; i++) {
        n_blocks = N_SEQ * ((N_REF + bts[i] - 1) / bts[i]);
        assert_int_equal(kvs_kv_pool_new(&pool, n_blocks, bts[i], &err),
                         KVS_OK);
        assert_int_equal(kvs_cpu_kv_new(&kv, fx->cm, n_blocks, bts[i],
                                        &err), KVS_OK);

        memset(seqs, 0, N_SEQ * sizeof(kvs_test_seq_t));

        for (s = 0; s < N_SEQ; s++) {
            seqs[s].ids = ids + (size_t) s * N_REF;
            memcpy(seqs[s].ids, fx->ref, prompt[s] * sizeof(int32_t));
            seqs[s].n_prompt = prompt[s];
            seqs[s].n_ids = prompt[s];
            seqs[s].n_total = total[s];
            seqs[s].chunk = chunk[s];
        }

        kvs_test_run_seqs(fx->cm, kv, pool, seqs, N_SEQ);

        for (s = 0; s < N_SEQ; s++) {
            assert_int_equal(seqs[s].n_ids, total[s]);
            assert_memory_equal(seqs[s].ids, fx->ref,
                                total[s] * sizeof(int32_t));
            assert_int_equal(kvs_kv_table_release(&seqs[s].table, pool,
                                                  &err), KVS_OK);
        }

        kvs_test_pool_ok(pool);
        kvs_cpu_kv_free(kv);
        kvs_kv_pool_free(pool);
    }

    free(ids);
    free(seqs);
}


/* The first 200 generated ids decode to llama2.c test_all.py's text.
 * run.c prints each piece after BOS, dropping the leading space of the
 * first one; our decoder, given the ids without BOS, drops the
 * SentencePiece dummy prefix of the first token the same way. */
static void
test_text(void **state)
{
    fx_t         *fx;
    uint8_t      *want;
    size_t        want_len = 0;
    kvs_buf_t     out;
    kvs_err_t     err;
    kvs_vocab_t  *v;
    const char   *path;

    fx = *state;
    if (fx->cm == NULL) {
        skip();
    }

    path = kvs_test_fixture("models/stories260K.expected-greedy-n200.txt");
    if (path == NULL) {
        skip();
    }

    want = kvs_test_slurp(path, &want_len);
    assert_non_null(want);
    assert_int_equal(want_len, 464);

    if (kvs_vocab_open(&v, kvs_test_fixture("models/stories260K-f32.gguf"),
                       &err) != KVS_OK)
    {
        fail_msg("%s", err.msg);
    }

    memset(&out, 0, sizeof(out));

    if (kvs_tok_decode(v, fx->ref + 1, 200, 0, &out, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    if (out.len != want_len || memcmp(out.data, want, want_len) != 0) {
        fail_msg("decoded %zu bytes, expected %zu: \"%.*s\"", out.len,
                 want_len, (int) out.len, (const char *) out.data);
    }

    /* with the BOS in front (a control token, decoding to nothing) the
     * dummy prefix still goes: it is dropped from the first text token */
    out.len = 0;

    if (kvs_tok_decode(v, fx->ref, 201, 0, &out, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(out.len, want_len);
    assert_memory_equal(out.data, want, want_len);

    free(want);

    /* all 256 ids are doc/stories260K.md's text, which ends with the
     * newline run.c prints after generating */
    path = kvs_test_fixture("models/stories260K.expected-greedy-n256.txt");
    assert_non_null(path);
    want = kvs_test_slurp(path, &want_len);
    assert_non_null(want);
    assert_int_equal(want_len, 566);

    out.len = 0;

    if (kvs_tok_decode(v, fx->ref, N_REF, 0, &out, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(kvs_buf_append(&out, "\n", 1), KVS_OK);
    assert_int_equal(out.len, want_len);
    assert_memory_equal(out.data, want, want_len);

    kvs_buf_free(&out);
    kvs_vocab_free(v);
    free(want);
}


/*
 * run.c -t 1.0 -p 0.9 -s 133742: the forward pass and the sampler
 * together draw llama2.c's 256 ids (one coin per step, from the seed) and
 * so its text, byte for byte (doc/stories260K.md, with run.c's final
 * newline).
 */
static void
test_top_p(void **state)
{
    fx_t                 *fx;
    float                *lg;
    size_t                want_len;
    int32_t               ref[N_REF], tok;
    uint32_t              pos;
    uint8_t              *want;
    kvs_buf_t             out;
    kvs_err_t             err;
    const char           *path;
    kvs_vocab_t          *v;
    kvs_cpu_kv_t         *kv;
    kvs_batch_tok_t       t;
    kvs_kv_pool_t        *pool;
    kvs_kv_table_t        table;
    kvs_batch_t           b;
    kvs_sampler_t         smp;
    kvs_sample_params_t   sp;

    fx = *state;
    path = kvs_test_fixture(
        "models/stories260K.expected-t1.0-p0.9-s133742.txt");
    if (fx->cm == NULL || path == NULL) {
        skip();
    }

    assert_int_equal(fx_read_ids("\ntopp_t1.0_p0.9_s133742_n256:", ref), 0);

    memset(&sp, 0, sizeof(sp));
    sp.temperature = 1.0f;
    sp.top_p = 0.9f;
    sp.seed = 133742;
    assert_int_equal(kvs_sampler_init(&smp, &sp, fx->cm->hp.n_vocab, &err),
                     KVS_OK);

    assert_int_equal(kvs_kv_pool_new(&pool, 32, 16, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, fx->cm, 32, 16, &err), KVS_OK);
    lg = malloc(fx->cm->hp.n_vocab * sizeof(float));
    assert_non_null(lg);
    memset(&table, 0, sizeof(table));

    tok = 1;

    for (pos = 0; pos + 1 < N_REF; pos++) {
        assert_int_equal(kvs_kv_table_reserve(&table, pool, pos + 1, &err),
                         KVS_OK);

        t.token = tok;
        t.pos = pos;
        t.table = &table;
        t.want_logits = 1;
        b.toks = &t;
        b.n = 1;

        if (kvs_cpu_forward(fx->cm, kv, &b, lg, &err) != KVS_OK
            || kvs_sample(&smp, lg, &tok, &err) != KVS_OK)
        {
            fail_msg("step %u: %s", pos, err.msg);
        }

        if (tok != ref[pos + 1]) {
            fail_msg("step %u: drew %d, llama2.c drew %d", pos, tok,
                     ref[pos + 1]);
        }
    }

    want = kvs_test_slurp(path, &want_len);
    assert_non_null(want);
    assert_int_equal(kvs_vocab_open(&v, kvs_test_fixture(
                         "models/stories260K-f32.gguf"), &err), KVS_OK);

    memset(&out, 0, sizeof(out));
    assert_int_equal(kvs_tok_decode(v, ref, N_REF, 0, &out, &err), KVS_OK);
    assert_int_equal(kvs_buf_append(&out, "\n", 1), KVS_OK);
    assert_int_equal(out.len, want_len);
    assert_memory_equal(out.data, want, want_len);

    assert_int_equal(kvs_kv_table_release(&table, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);

    kvs_buf_free(&out);
    kvs_vocab_free(v);
    free(want);
    free(lg);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
    kvs_sampler_free(&smp);
}


/* Bad entries are refused before anything is written: the cache bytes
 * stay as they were. */
static void
test_bad_batch(void **state)
{
    fx_t             *fx;
    float             lg[2 * 512];  /* two rows want logits */
    size_t            nk;
    uint8_t          *snap;
    kvs_err_t         err;
    kvs_cpu_kv_t     *kv;
    kvs_batch_tok_t   tok[2];
    kvs_kv_pool_t    *pool;
    kvs_kv_table_t    table, other;
    kvs_batch_t       b;

    fx = *state;
    if (fx->cm == NULL) {
        skip();
    }

    assert_int_equal(kvs_kv_pool_new(&pool, 2, 16, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, fx->cm, 2, 16, &err), KVS_OK);
    memset(&table, 0, sizeof(table));
    memset(&other, 0, sizeof(other));
    assert_int_equal(kvs_kv_table_reserve(&table, pool, 4, &err), KVS_OK);

    nk = (size_t) kv->n_blocks * kv->lo.block_bytes;
    snap = malloc(nk);
    assert_non_null(snap);
    memcpy(snap, kv->mem, nk);

    b.toks = tok;
    b.n = 2;
    tok[0].token = 1;
    tok[0].pos = 0;
    tok[0].table = &table;
    tok[0].want_logits = 1;
    tok[1] = tok[0];

    tok[1].token = 512;
    assert_int_equal(kvs_cpu_forward(fx->cm, kv, &b, lg, &err), KVS_EINVAL);
    tok[1].token = -1;
    assert_int_equal(kvs_cpu_forward(fx->cm, kv, &b, lg, &err), KVS_EINVAL);
    tok[1].token = 5;
    tok[1].pos = 4;                   /* the table covers 0..3 */
    assert_int_equal(kvs_cpu_forward(fx->cm, kv, &b, lg, &err), KVS_EINVAL);
    tok[1].pos = 1;
    tok[1].table = NULL;
    assert_int_equal(kvs_cpu_forward(fx->cm, kv, &b, lg, &err), KVS_EINVAL);
    tok[1].table = &other;            /* empty table */
    assert_int_equal(kvs_cpu_forward(fx->cm, kv, &b, lg, &err), KVS_EINVAL);
    tok[1].table = &table;
    assert_int_equal(kvs_cpu_forward(fx->cm, kv, &b, NULL, &err),
                     KVS_EINVAL);
    b.n = 0;
    assert_int_equal(kvs_cpu_forward(fx->cm, kv, &b, lg, &err), KVS_EINVAL);

    assert_memory_equal(snap, kv->mem, nk);

    /* and the same batch, corrected, goes through */
    b.n = 2;
    assert_int_equal(kvs_cpu_forward(fx->cm, kv, &b, lg, &err), KVS_OK);

    free(snap);
    assert_int_equal(kvs_kv_table_release(&table, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_bos_logits),
        cmocka_unit_test(test_greedy_decode),
        cmocka_unit_test(test_greedy_prefill),
        cmocka_unit_test(test_block_sizes),
        cmocka_unit_test(test_batched),
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_bad_batch),
    };

    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
