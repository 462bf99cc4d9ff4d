/*
 * test_cli_generate: `kvserve generate` end to end on stories260K, run as
 * a child process (the tool's path is in KVS_CLI).
 *
 * The expected texts are llama2.c run.c's outputs quoted by upstream (see
 * the fixtures' models/README.md).  run.c prints a final "\n" that is not
 * part of the generated text; our tool adds nothing after the text, so
 * the references are compared without their last byte:
 *   - greedy, empty prompt (BOS only), 256 new tokens;
 *   - --temp 1.0 --top-p 0.9 --seed 133742, 256 new tokens;
 *   - the prompt "Once upon a time" (BOS 403 407 261 378, exactly the
 *     greedy run's first ids) continues the greedy run: its output is a
 *     prefix of the greedy text, and with -n 60 it is the text run.c
 *     prints for -n 64 -i "Once upon a time" (64 positions after BOS,
 *     quoted in the README), which ends "...too high.\nLily";
 *   - usage errors exit 2, a missing model exits 1 naming the path.
 * Every case skips when the fixtures or KVS_CLI are absent.
 */

#include "kvs_test_cli.h"

#define MODEL   "models/stories260K-f32.gguf"
#define GREEDY  "models/stories260K.expected-greedy-n256.txt"
#define TOPP    "models/stories260K.expected-t1.0-p0.9-s133742.txt"


/* Runs "$KVS_CLI generate ARGS REDIRECT" (args already shell-quoted). */
static void
run_cli(const char *args, const char *redirect, run_t *r)
{
    char  a[4096];

    snprintf(a, sizeof(a), "generate %s %s", args, redirect);
    kvs_test_cli_run(a, r);
}


/* The reference text without run.c's final newline. */
static uint8_t *
reference(const char *path, size_t *len)
{
    uint8_t  *ref;

    ref = kvs_test_slurp(path, len);
    assert_non_null(ref);
    assert_true(*len > 0);
    assert_int_equal(ref[*len - 1], '\n');
    (*len)--;

    return ref;
}


static void
check_against(const char *opts, const char *ref_rel)
{
    char         args[2048];
    size_t       len;
    run_t        r;
    uint8_t     *ref;
    const char  *model, *ref_path;

    model = kvs_test_fixture(MODEL);
    ref_path = kvs_test_fixture(ref_rel);

    if (model == NULL || ref_path == NULL || kvs_test_cli_path() == NULL) {
        skip();
    }

    ref = reference(ref_path, &len);

    snprintf(args, sizeof(args), "'%s' %s", model, opts);
    run_cli(args, "2>/dev/null", &r);

    assert_int_equal(r.status, 0);

    if (r.len != len || memcmp(r.out, ref, len) != 0) {
        print_message("got %zu bytes:\n%s\nwant %zu bytes:\n%.*s\n",
                      r.len, r.out, len, (int) len, (char *) ref);
        fail();
    }

    free(r.out);
    free(ref);
}


static void
test_greedy(void **state)
{
    check_against("-p '' -n 256 --temp 0", GREEDY);
}


static void
test_top_p(void **state)
{
    check_against("-p '' -n 256 --temp 1.0 --top-p 0.9 --seed 133742",
                  TOPP);
}


static void
test_prompt(void **state)
{
    char         args[2048];
    size_t       len;
    run_t        r;
    uint8_t     *ref;
    const char  *model, *ref_path;

    model = kvs_test_fixture(MODEL);
    ref_path = kvs_test_fixture(GREEDY);

    if (model == NULL || ref_path == NULL || kvs_test_cli_path() == NULL) {
        skip();
    }

    ref = reference(ref_path, &len);

    /* run.c -n 64: 4 prompt tokens after BOS printed, then 60 sampled */
    snprintf(args, sizeof(args),
             "'%s' -p 'Once upon a time' -n 60 --temp 0", model);
    run_cli(args, "2>/dev/null", &r);

    assert_int_equal(r.status, 0);
    assert_true(r.len > strlen("Once upon a time"));
    assert_memory_equal(r.out, "Once upon a time", 16);
    assert_true(r.len < len);
    assert_memory_equal(r.out, ref, r.len);

    assert_true(r.len >= 14);
    assert_memory_equal(r.out + r.len - 14, "too high.\nLily", 14);

    free(r.out);
    free(ref);
}


static void
test_usage(void **state)
{
    size_t       i;
    char         args[2048];
    run_t        r;
    const char  *model;

    static const char  *bad[] = {
        "--temp 3", "--temp x", "--top-p 1.5", "-n 0", "-n 1.5",
        "--top-k -1", "--block 0", "--bogus", "-n", "--seed -1",
    };

    model = kvs_test_fixture(MODEL);

    if (model == NULL || kvs_test_cli_path() == NULL) {
        skip();
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(args, sizeof(args), "'%s' %s", model, bad[i]);
        run_cli(args, "2>/dev/null", &r);

        if (r.status != 2 || r.len != 0) {
            fail_msg("\"%s\": exit %d, %zu bytes on stdout", bad[i],
                     r.status, r.len);
        }

        free(r.out);
    }

    /* no model at all */
    run_cli("-p hi", "2>/dev/null", &r);
    assert_int_equal(r.status, 2);
    free(r.out);
}


static void
test_missing_model(void **state)
{
    char         args[2048];
    run_t        r;
    const char  *path;

    if (kvs_test_cli_path() == NULL) {
        skip();
    }

    path = kvs_test_tmp("no-such-model.gguf");
    unlink(path);

    /* stderr to stdout, stdout dropped: what we read is stderr */
    snprintf(args, sizeof(args), "'%s' -p hi", path);
    run_cli(args, "2>&1 >/dev/null", &r);

    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, path));
    assert_non_null(strchr(r.out, '\n'));
    assert_true(strchr(r.out, '\n') == r.out + r.len - 1);

    free(r.out);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_prompt),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_missing_model),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
