/*
 * test_cli_plan: `kvserve plan` (src/cli/kvs_cli_plan.c), run as a child
 * process (the tool's path is in KVS_CLI).
 *
 *   - the seed's example from --shape: 327680 B per token, a 200k
 *     sequence 65536000000 B (61.04 GiB), 262144 tokens in 80 GiB, one
 *     200k sequence, 32768 tokens each at batch 8; the table's MHA row
 *     (2621440 B per token) and int8's (164160 B, scales included);
 *     without heads= no
 *     MHA rows, and the model's rows not called GQA;
 *   - a generated model (the tiny preset, written to KVS_TMP): the shape
 *     and bytes per token the tool prints are the model's
 *     (kvs_hparams_kv_bytes_per_token), its weights the sum of its
 *     tensors' bytes, subtracted from the memory; --weights overrides;
 *   - bad arguments exit 2 with a message naming them (no model or
 *     both, no --memory, a fraction or a malformed size, an unknown
 *     dtype, a zero or malformed context, a bad shape, an unknown
 *     option); a missing or corrupt model exits 1; weights that leave no
 *     memory, or memory under one block, exit 1.
 *
 * Every case skips when KVS_CLI is absent.
 */

#include "kvs_test_cli.h"

#include <inttypes.h>

#include "gen/kvs_gen.h"
#include "model/kvs_gguf.h"
#include "model/kvs_model.h"


/* Runs "$KVS_CLI plan ARGS 2>&1" (args already shell-quoted). */
static void
run_plan(const char *args, run_t *r)
{
    char  a[4096];

    snprintf(a, sizeof(a), "plan %s 2>&1", args);
    kvs_test_cli_run(a, r);
}


static void
expect_has(const run_t *r, const char *what)
{
    if (strstr(r->out, what) == NULL) {
        fail_msg("output lacks \"%s\":\n%s", what, r->out);
    }
}


/* ARGS exit with status and say msg. */
static void
expect_exit(const char *args, int status, const char *msg)
{
    run_t  r;

    run_plan(args, &r);

    if (r.status != status || strstr(r.out, msg) == NULL) {
        fail_msg("plan %s: exit %d (want %d), output lacks \"%s\":\n%s",
                 args, r.status, status, msg, r.out);
    }

    free(r.out);
}


static void
test_seed_example(void **state)
{
    run_t  r;

    if (kvs_test_cli_path() == NULL) {
        skip();
    }

    run_plan("--shape layers=80,kv_heads=8,head_dim=128,heads=64 "
             "--memory 80g --kv-dtype bf16 --context 200k --batch 8", &r);
    assert_int_equal(r.status, 0);
    expect_has(&r, "2 x 80 layers x 8 KV heads x 128 head_dim x 2 B = "
               "327680 B (320.00 KiB)");
    expect_has(&r, "one 200000-token sequence: 65536000000 B (61.04 GiB)");
    expect_has(&r, "tokens that fit: 262144 (16384 blocks of 16)");
    expect_has(&r, "concurrent sequences at 200000 tokens: 1\n");
    expect_has(&r, "longest context at batch 8: 32768 tokens");
    expect_has(&r, "(GQA 8:1)");
    /* the table: MHA at 64 KV heads, and int8 and fp8 with their
     * scales (2 x 80 x 8 floats a block of 16: 320 B a token more) */
    expect_has(&r, "MHA   64      2621440");
    expect_has(&r, "int8  GQA    8       164160");
    expect_has(&r, "fp8   GQA    8       164160");
    free(r.out);

    /* the default element is 16-bit; f32 doubles it */
    run_plan("--shape layers=80,kv_heads=8,head_dim=128 --memory 80g "
             "--kv-dtype f32 --context 200000", &r);
    assert_int_equal(r.status, 0);
    expect_has(&r, "x 4 B = 655360 B");
    expect_has(&r, "concurrent sequences at 200000 tokens: 0\n");
    expect_has(&r, "needs 1.53 x the KV budget");
    expect_has(&r, "(MHA rows need heads= in --shape)");
    /* without heads= the model's own rows say neither GQA nor MHA */
    expect_has(&r, "bf16    -    8       327680");
    free(r.out);
}


static void
test_model(void **state)
{
    char             want[256];
    const char      *path;
    uint64_t         i, weights, bpt;
    kvs_err_t        err;
    run_t            r;
    kvs_model_t     *m;
    kvs_gen_spec_t   spec;
    char             args[1200];

    if (kvs_test_cli_path() == NULL) {
        skip();
    }

    path = kvs_test_tmp("test_cli_plan.gguf");
    assert_int_equal(kvs_gen_preset(&spec, "tiny", &err), KVS_OK);
    assert_int_equal(kvs_gen_write(&spec, path, &err), KVS_OK);
    assert_int_equal(kvs_model_open(&m, path, &err), KVS_OK);

    weights = 0;
    for (i = 0; i < kvs_gguf_n_tensors(m->gguf); i++) {
        weights += kvs_gguf_tensor_at(m->gguf, i)->nbytes;
    }
    bpt = kvs_hparams_kv_bytes_per_token(&m->hp, 2);

    snprintf(args, sizeof(args), "'%s' --memory 64m --context 100", path);
    run_plan(args, &r);
    assert_int_equal(r.status, 0);

    snprintf(want, sizeof(want), "%u layers, %u KV heads of %u query heads",
             m->hp.n_layer, m->hp.n_head_kv, m->hp.n_head);
    expect_has(&r, want);
    snprintf(want, sizeof(want), "x 2 B = %" PRIu64 " B", bpt);
    expect_has(&r, want);
    snprintf(want, sizeof(want), "(%" PRIu64 " B, as stored) = KV budget",
             weights);
    expect_has(&r, want);
    /* the budget is the memory less the weights, in whole blocks */
    snprintf(want, sizeof(want), "tokens that fit: %" PRIu64 " (",
             (uint64_t) ((64ULL * 1024 * 1024 - weights) / (bpt * 16) * 16));
    expect_has(&r, want);
    free(r.out);

    /* --weights overrides what the file says */
    snprintf(args, sizeof(args), "'%s' --memory 64m --weights 32m", path);
    run_plan(args, &r);
    assert_int_equal(r.status, 0);
    snprintf(want, sizeof(want), "tokens that fit: %" PRIu64 " (",
             (uint64_t) ((32ULL * 1024 * 1024) / (bpt * 16) * 16));
    expect_has(&r, want);
    expect_has(&r, "(33554432 B, given)");
    free(r.out);

    /* weights that take the memory, memory under one block: exit 1 */
    snprintf(args, sizeof(args), "'%s' --memory %" PRIu64, path, weights);
    expect_exit(args, 1, "leave no memory for the KV cache");
    snprintf(args, sizeof(args), "'%s' --memory %" PRIu64, path,
             weights + bpt * 16 - 1);
    expect_exit(args, 1, "tokens that fit: 0 (0 blocks");

    kvs_model_close(m);
    unlink(path);
}


static void
test_bad_arguments(void **state)
{
    FILE        *f;
    const char  *junk;
    char         args[1200];

    if (kvs_test_cli_path() == NULL) {
        skip();
    }

    expect_exit("", 2, "give a model or --shape");
    expect_exit("--memory 80g", 2, "give a model or --shape");
    expect_exit("a.gguf --shape layers=1,kv_heads=1,head_dim=1 "
                "--memory 1g", 2, "give a model or --shape");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1", 2,
                "--memory SIZE is required");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 0.5", 2,
                "not a fraction");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 80x", 2,
                "--memory \"80x\"");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 80g "
                "--kv-dtype int4", 2, "\"int4\" is not one of");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 80g "
                "--context 0", 2, "--context \"0\"");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 80g "
                "--context 12q", 2, "--context \"12q\"");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 80g "
                "--context 99999999999999999999999", 2, "--context");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 80g "
                "--batch -1", 2, "--batch \"-1\"");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 80g "
                "--block 0", 2, "--block \"0\"");
    expect_exit("--shape layers=80,kv_heads=0,head_dim=128 --memory 80g",
                2, "kv_heads=\"0\"");
    expect_exit("--shape layers=80,head_dim=128 --memory 80g", 2,
                "shape needs kv_heads=");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 80g "
                "--frobnicate 1", 2, "unknown option \"--frobnicate\"");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory", 2,
                "--memory needs a value");
    expect_exit("--shape layers=1,kv_heads=1,head_dim=1 --memory 80g "
                "--weights 80g", 1, "leave no memory");

    /* a shape whose bytes per token overflow: exit 1, said */
    expect_exit("--shape layers=1048576,kv_heads=1048576,head_dim=1048576 "
                "--memory 80g --kv-dtype f32 --context 2", 1, "overflow");

    /* no such model; not a GGUF */
    expect_exit("/nonexistent/model.gguf --memory 80g", 1,
                "/nonexistent/model.gguf");

    junk = kvs_test_tmp("test_cli_plan.junk.gguf");
    f = fopen(junk, "wb");
    assert_non_null(f);
    fputs("GGUF but not really a model file at all", f);
    fclose(f);
    snprintf(args, sizeof(args), "'%s' --memory 80g", junk);
    expect_exit(args, 1, "kvserve plan: ");
    unlink(junk);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_example),
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_bad_arguments),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
