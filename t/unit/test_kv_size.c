/*
 * test_kv_size: kvserve_kv_cache values (sizes with nginx's suffixes and
 * fractions, every malformed or out-of-range form refused with the value
 * quoted), MemAvailable parsed from /proc/meminfo text, the cache plan
 * (blocks, bytes, tokens, whether a full context fits) and the byte
 * formatter.  Expected numbers are worked out by hand in the comments.
 */

#include "kvs_test.h"

#include <inttypes.h>

#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_size.h"

/* kvserve-tiny (gen-model --preset tiny): 2 layers, 2 KV heads of 16,
 * F32 cache: 2 x 2 x (16 + 16) x 4 bytes per token */
#define TINY_BPT  512


static void
parse_ok(const char *s, uint64_t bytes, double fraction)
{
    kvs_err_t            err;
    kvs_kv_cache_spec_t  spec;

    if (kvs_kv_cache_parse(&spec, s, strlen(s), &err) != KVS_OK) {
        fail_msg("\"%s\": %s", s, err.msg);
    }

    assert_true(spec.bytes == bytes);
    assert_float_equal(spec.fraction, fraction, 1e-12);
}


static void
parse_bad(const char *s, int code, const char *msg)
{
    kvs_err_t            err;
    kvs_kv_cache_spec_t  spec;
    char                 quoted[128];

    memset(&spec, 0x5a, sizeof(spec));

    assert_int_equal(kvs_kv_cache_parse(&spec, s, strlen(s), &err), code);
    assert_true(spec.bytes == 0);
    assert_true(spec.fraction == 0);

    snprintf(quoted, sizeof(quoted), "\"%s\": ", s);
    if (strncmp(err.msg, quoted, strlen(quoted)) != 0) {
        fail_msg("\"%s\": message does not quote the value: %s", s,
                 err.msg);
    }

    if (msg != NULL) {
        assert_string_equal(err.msg, msg);
    }
}


static void
test_parse_sizes(void **state)
{
    parse_ok("1048576", 1048576, 0);
    parse_ok("1", 1, 0);
    parse_ok("64k", 65536, 0);
    parse_ok("64K", 65536, 0);
    parse_ok("512m", 512ull * 1024 * 1024, 0);
    parse_ok("512M", 536870912ull, 0);
    parse_ok("2g", 2147483648ull, 0);
    parse_ok("2G", 2147483648ull, 0);
    parse_ok("007", 7, 0);

    /* the largest values that fit: 2^64 - 1 bytes, (2^34 - 1) GiB */
    parse_ok("18446744073709551615", UINT64_MAX, 0);
    parse_ok("17179869183g", (((uint64_t) 1 << 34) - 1) << 30, 0);
}


static void
test_parse_fractions(void **state)
{
    parse_ok("0.9", 0, 0.9);
    parse_ok("0.5", 0, 0.5);
    parse_ok(".25", 0, 0.25);
    parse_ok("1.0", 0, 1.0);
    parse_ok("1.", 0, 1.0);
    parse_ok("1.000", 0, 1.0);
    parse_ok("0.001", 0, 0.001);
    parse_ok("00.75", 0, 0.75);
}


static void
test_parse_errors(void **state)
{
    parse_bad("1.5", KVS_ERANGE, "\"1.5\": fraction must be in (0, 1]");
    parse_bad("0.0", KVS_ERANGE, "\"0.0\": fraction must be in (0, 1]");
    parse_bad("1.0000001", KVS_ERANGE, NULL);
    parse_bad("0", KVS_EINVAL, "\"0\": size must be greater than 0");
    parse_bad("0k", KVS_EINVAL, "\"0k\": size must be greater than 0");
    parse_bad("12x", KVS_EINVAL, "\"12x\": not a size (bytes, or with a "
              "k, m or g suffix) or a fraction in (0, 1]");
    parse_bad("-1", KVS_EINVAL, NULL);
    parse_bad("+1", KVS_EINVAL, NULL);
    parse_bad(" 1", KVS_EINVAL, NULL);
    parse_bad("1 ", KVS_EINVAL, NULL);
    parse_bad("k", KVS_EINVAL, NULL);
    parse_bad("1kb", KVS_EINVAL, NULL);
    parse_bad("1t", KVS_EINVAL, NULL);
    parse_bad("1mk", KVS_EINVAL, NULL);
    parse_bad("inf", KVS_EINVAL, NULL);
    parse_bad("nan", KVS_EINVAL, NULL);
    parse_bad("0x10", KVS_EINVAL, NULL);
    parse_bad("1e-1", KVS_EINVAL, NULL);
    parse_bad("0.5m", KVS_EINVAL, "\"0.5m\": not a fraction such as 0.5");
    parse_bad("0.5.5", KVS_EINVAL, NULL);
    parse_bad(".", KVS_EINVAL, NULL);
    parse_bad("-0.5", KVS_EINVAL, NULL);
    parse_bad("", KVS_EINVAL, NULL);

    /* 2^64 bytes, and 2^34 GiB = 2^64 bytes */
    parse_bad("18446744073709551616", KVS_ERANGE,
              "\"18446744073709551616\": size overflows 64 bits");
    parse_bad("17179869184g", KVS_ERANGE,
              "\"17179869184g\": size overflows 64 bits");
    parse_bad("99999999999999999999999999k", KVS_ERANGE, NULL);
}


static void
test_parse_edges(void **state)
{
    char                 big[201];
    kvs_err_t            err;
    kvs_kv_cache_spec_t  spec;

    /* only len bytes are read: nginx values are not NUL-terminated */
    assert_int_equal(kvs_kv_cache_parse(&spec, "64kXYZ", 3, &err), KVS_OK);
    assert_true(spec.bytes == 65536);
    assert_int_equal(kvs_kv_cache_parse(&spec, "0.5", 1, &err),
                     KVS_EINVAL);
    assert_string_equal(err.msg, "\"0\": size must be greater than 0");

    /* a long value is quoted in part, marked as cut */
    memset(big, 'x', 200);
    big[200] = '\0';
    assert_int_equal(kvs_kv_cache_parse(&spec, big, 200, &err), KVS_EINVAL);
    assert_int_equal(err.msg[0], '"');
    assert_memory_equal(err.msg + 1, big, 64);
    assert_memory_equal(err.msg + 65, "...\": ", 6);

    /* a NULL err is allowed */
    assert_int_equal(kvs_kv_cache_parse(&spec, "12x", 3, NULL), KVS_EINVAL);
}


static const char  meminfo[] =
    "MemTotal:       16318480 kB\n"
    "MemFree:         1234567 kB\n"
    "MemAvailable:    8000000 kB\n"
    "Buffers:          345678 kB\n"
    "HugePages_Total:       0\n";


static void
meminfo_bad(const char *text, int code)
{
    kvs_err_t  err;
    uint64_t   bytes;

    bytes = 1;
    assert_int_equal(kvs_meminfo_parse(text, strlen(text), &bytes, &err),
                     code);
    assert_true(bytes == 0);
    assert_non_null(strstr(err.msg, "MemAvailable"));
}


static void
test_meminfo(void **state)
{
    kvs_err_t  err;
    uint64_t   bytes;

    /* 8000000 kB = 8000000 x 1024 bytes */
    assert_int_equal(kvs_meminfo_parse(meminfo, strlen(meminfo), &bytes,
                                       &err), KVS_OK);
    assert_true(bytes == 8192000000ull);

    /* first line, no newline at the end, a tab before the number */
    assert_int_equal(kvs_meminfo_parse("MemAvailable:\t1 kB", 18, &bytes,
                                       &err), KVS_OK);
    assert_true(bytes == 1024);

    /* the text stops where len says, mid-line */
    assert_int_equal(kvs_meminfo_parse(meminfo, 40, &bytes, &err),
                     KVS_ENOTFOUND);

    /* (2^54 - 1) kB is the most that fits 64 bits in bytes */
    assert_int_equal(kvs_meminfo_parse("MemAvailable: 18014398509481983 kB\n",
                                       35, &bytes, &err), KVS_OK);
    assert_true(bytes == (((uint64_t) 1 << 54) - 1) * 1024);

    meminfo_bad("MemTotal: 1 kB\nMemFree: 1 kB\n", KVS_ENOTFOUND);
    meminfo_bad("XMemAvailable: 5 kB\n", KVS_ENOTFOUND);
    meminfo_bad(" MemAvailable: 5 kB\n", KVS_ENOTFOUND);
    meminfo_bad("", KVS_ENOTFOUND);
    meminfo_bad("MemAvailable: abc kB\n", KVS_EFORMAT);
    meminfo_bad("MemAvailable: kB\n", KVS_EFORMAT);
    meminfo_bad("MemAvailable: 5 MB\n", KVS_EFORMAT);
    meminfo_bad("MemAvailable: 5\n", KVS_EFORMAT);
    meminfo_bad("MemAvailable: 5 kB junk\n", KVS_EFORMAT);
    meminfo_bad("MemAvailable: 18014398509481984 kB\n", KVS_ERANGE);
    meminfo_bad("MemAvailable: 99999999999999999999999 kB\n", KVS_ERANGE);
}


static void
test_mem_available(void **state)
{
    kvs_err_t    err;
    uint64_t     bytes;
    struct stat  st;

    if (stat("/proc/meminfo", &st) != 0) {
        print_message("SKIP: no /proc/meminfo\n");
        return;
    }

    if (kvs_mem_available(&bytes, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    /* whatever this host has, it is some memory, and a whole kB count */
    assert_true(bytes > 0);
    assert_true(bytes % 1024 == 0);
}


static void
plan_ok(kvs_kv_cache_plan_t *plan, const char *spec_str, uint64_t avail,
    uint64_t bpt, uint32_t block_tokens, uint32_t n_ctx)
{
    kvs_err_t            err;
    kvs_kv_cache_spec_t  spec;

    assert_int_equal(kvs_kv_cache_parse(&spec, spec_str, strlen(spec_str),
                                        &err), KVS_OK);

    if (kvs_kv_cache_plan(plan, &spec, avail, bpt, block_tokens, n_ctx,
                          &err)
        != KVS_OK)
    {
        fail_msg("%s: %s", spec_str, err.msg);
    }

    /* the invariants every plan keeps */
    assert_true(plan->n_blocks >= 1);
    assert_true(plan->tokens == (uint64_t) plan->n_blocks * block_tokens);
    assert_true(plan->bytes == plan->tokens * bpt);
    assert_true(plan->bytes <= plan->budget);
    assert_int_equal(plan->block_tokens, block_tokens);
    assert_true(plan->kv_bytes_per_token == bpt);
}


static void
test_plan(void **state)
{
    kvs_kv_cache_plan_t  plan;

    /* 1 MiB / (512 B x 16) = 128 blocks, 2048 tokens; a 512-token context
     * needs 32 */
    plan_ok(&plan, "1m", 0, TINY_BPT, 16, 512);
    assert_true(plan.budget == 1048576);
    assert_int_equal(plan.n_blocks, 128);
    assert_true(plan.tokens == 2048);
    assert_true(plan.bytes == 1048576);
    assert_int_equal(plan.full_ctx_blocks, 32);
    assert_true(plan.full_ctx_fits);

    /* 64 KiB: 8 blocks, 128 tokens, short of the 512-token context */
    plan_ok(&plan, "64k", 1ull << 40, TINY_BPT, 16, 512);
    assert_int_equal(plan.n_blocks, 8);
    assert_true(plan.tokens == 128);
    assert_false(plan.full_ctx_fits);

    /* 0.5 of 1000000 = 500000 bytes; 8192-byte blocks: 61 (499712) */
    plan_ok(&plan, "0.5", 1000000, TINY_BPT, 16, 512);
    assert_true(plan.budget == 500000);
    assert_int_equal(plan.n_blocks, 61);
    assert_true(plan.bytes == 499712);
    assert_true(plan.tokens == 976);
    assert_true(plan.full_ctx_fits);

    /* a context of 100 tokens needs ceil(100 / 16) = 7 blocks: 7 fit
     * exactly (7 x 8192 = 57344), 6 do not */
    plan_ok(&plan, "57344", 0, TINY_BPT, 16, 100);
    assert_int_equal(plan.n_blocks, 7);
    assert_int_equal(plan.full_ctx_blocks, 7);
    assert_true(plan.full_ctx_fits);
    plan_ok(&plan, "57343", 0, TINY_BPT, 16, 100);
    assert_int_equal(plan.n_blocks, 6);
    assert_false(plan.full_ctx_fits);

    /* block size 1 and 64 on the same 1 MiB: 2048 and 32 blocks */
    plan_ok(&plan, "1m", 0, TINY_BPT, 1, 512);
    assert_int_equal(plan.n_blocks, 2048);
    assert_int_equal(plan.full_ctx_blocks, 512);
    plan_ok(&plan, "1m", 0, TINY_BPT, 64, 512);
    assert_int_equal(plan.n_blocks, 32);
    assert_int_equal(plan.full_ctx_blocks, 8);

    /* exactly one block */
    plan_ok(&plan, "8k", 0, TINY_BPT, 16, 512);
    assert_int_equal(plan.n_blocks, 1);

    /* more blocks than a pool may hold: capped, the rest unused */
    plan_ok(&plan, "18446744073709551615", 0, 1, 1, 1);
    assert_int_equal(plan.n_blocks, KVS_KV_MAX_BLOCKS);
    assert_true(plan.bytes == KVS_KV_MAX_BLOCKS);
    assert_true(plan.budget == UINT64_MAX);

    /* the whole of a huge avail; one block of 2^63 bytes per token */
    plan_ok(&plan, "1.0", UINT64_MAX, (uint64_t) 1 << 63, 1, 1);
    assert_true(plan.budget == UINT64_MAX);
    assert_int_equal(plan.n_blocks, 1);
}


static void
plan_bad(const kvs_kv_cache_spec_t *spec, uint64_t avail, uint64_t bpt,
    uint32_t block_tokens, uint32_t n_ctx, int code)
{
    kvs_err_t            err;
    kvs_kv_cache_plan_t  plan;

    memset(&plan, 0x5a, sizeof(plan));
    assert_int_equal(kvs_kv_cache_plan(&plan, spec, avail, bpt, block_tokens,
                                       n_ctx, &err), code);
    assert_true(plan.n_blocks == 0 && plan.bytes == 0 && plan.budget == 0);
    assert_true(err.msg[0] != '\0');
}


static void
test_plan_errors(void **state)
{
    kvs_err_t            err;
    kvs_kv_cache_plan_t  plan;
    kvs_kv_cache_spec_t  s1m = { 1048576, 0 }, sfr = { 0, 0.5 };
    kvs_kv_cache_spec_t  both = { 1048576, 0.5 }, none = { 0, 0 };
    kvs_kv_cache_spec_t  over = { 0, 1.5 }, neg = { 0, -0.5 };
    kvs_kv_cache_spec_t  s8k = { 8191, 0 };

    plan_bad(&both, 0, TINY_BPT, 16, 512, KVS_EINVAL);
    plan_bad(&none, 0, TINY_BPT, 16, 512, KVS_EINVAL);
    plan_bad(&over, 1000, TINY_BPT, 16, 512, KVS_EINVAL);
    plan_bad(&neg, 1000, TINY_BPT, 16, 512, KVS_EINVAL);
    plan_bad(&s1m, 0, 0, 16, 512, KVS_EINVAL);
    plan_bad(&s1m, 0, TINY_BPT, 0, 512, KVS_EINVAL);
    plan_bad(&s1m, 0, TINY_BPT, KVS_KV_MAX_BLOCK_TOKENS + 1, 512,
             KVS_EINVAL);
    plan_bad(&s1m, 0, TINY_BPT, 16, 0, KVS_EINVAL);

    /* 8191 bytes hold no 8192-byte block; neither does half of nothing */
    plan_bad(&s8k, 0, TINY_BPT, 16, 512, KVS_ERANGE);
    plan_bad(&sfr, 0, TINY_BPT, 16, 512, KVS_ERANGE);
    plan_bad(&sfr, 16383, TINY_BPT, 16, 512, KVS_ERANGE);

    /* one block's bytes overflow 64 bits */
    plan_bad(&s1m, 0, UINT64_MAX / 2, 16, 512, KVS_ERANGE);

    assert_int_equal(kvs_kv_cache_plan(&plan, &s8k, 0, TINY_BPT, 16, 512,
                                       &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "8191 bytes"));
}


static void
test_budget(void **state)
{
    kvs_kv_cache_spec_t  s;

    s.bytes = 0;

    /* floor(fraction x avail), by hand */
    s.fraction = 0.9;
    assert_true(kvs_kv_cache_budget(&s, 1000) == 900);
    s.fraction = 0.25;
    assert_true(kvs_kv_cache_budget(&s, 4096) == 1024);
    s.fraction = 0.5;
    assert_true(kvs_kv_cache_budget(&s, 1001) == 500);
    assert_true(kvs_kv_cache_budget(&s, 0) == 0);
    assert_true(kvs_kv_cache_budget(&s, UINT64_MAX) <= UINT64_MAX / 2 + 1);
    s.fraction = 1;
    assert_true(kvs_kv_cache_budget(&s, UINT64_MAX) == UINT64_MAX);
    s.fraction = 0.999999999;
    assert_true(kvs_kv_cache_budget(&s, UINT64_MAX) <= UINT64_MAX);
    assert_true(kvs_kv_cache_budget(&s, 1000) == 999);

    /* a size ignores what is available */
    s.bytes = 12345;
    s.fraction = 0;
    assert_true(kvs_kv_cache_budget(&s, 0) == 12345);
    assert_true(kvs_kv_cache_budget(&s, UINT64_MAX) == 12345);
}


static void
fmt_is(uint64_t bytes, const char *want)
{
    char  buf[KVS_SIZE_FORMAT_LEN];

    assert_string_equal(kvs_size_format(buf, sizeof(buf), bytes), want);
}


static void
test_format(void **state)
{
    fmt_is(0, "0 B");
    fmt_is(512, "512 B");
    fmt_is(1023, "1023 B");
    fmt_is(1024, "1.0 KiB");
    fmt_is(1536, "1.5 KiB");
    fmt_is(8192, "8.0 KiB");
    fmt_is(1048575, "1.0 MiB");
    fmt_is(1048576, "1.0 MiB");
    fmt_is(536870912, "512.0 MiB");
    fmt_is(3ull << 29, "1.5 GiB");
    fmt_is(7ull << 40, "7.0 TiB");
    fmt_is(UINT64_MAX, "16.0 EiB");
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_sizes),
        cmocka_unit_test(test_parse_fractions),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_edges),
        cmocka_unit_test(test_meminfo),
        cmocka_unit_test(test_mem_available),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_plan_errors),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_format),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
