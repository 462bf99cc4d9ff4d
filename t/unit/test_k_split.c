/*
 * test_k_split: the decode attention kernel's split rule
 * (kernels/kvs_k_split.h), on the host, since the kernel itself runs only
 * on a device (gpu-check).  For every split count 1..9, max_ctx 1..48
 * (the split length comes from it), window 0..60 and position 0 ..
 * max_ctx + 20 (past max_ctx: the last split takes the rest):
 *   - the splits' ranges are disjoint and cover exactly the positions
 *     the token sees, first .. pos (kvs_cpu_attn_first's rule);
 *   - every split in [split0, active), the ones whose parts the combine
 *     kernel reads, holds at least one position; no other split does.
 * The rule before 2026-12-04 (an end counted from the window's start)
 * is checked too, and must break the first property: the check can
 * fail, and it is the one that would have caught what the H200's
 * gpu-check found.
 */

#include "kvs_test.h"

#include "../../kernels/kvs_k_split.h"

#define MAX_SPLIT  9
#define MAX_CTX    48
#define MAX_WIN    60
#define PAST       20


/* The rule before the fix: the window moved the start, then the end was
 * counted from it. */
static int
old_range(uint32_t n_split, uint32_t len, uint32_t window, int32_t pos,
    uint32_t s, uint64_t *start, uint64_t *end)
{
    uint64_t  b, e;

    b = (uint64_t) s * len;
    if (b > (uint64_t) pos || s < kvs_ks_split0(n_split, len, window, pos)) {
        return 0;
    }

    if (b < kvs_ks_first(window, pos)) {
        b = kvs_ks_first(window, pos);
    }

    e = s + 1 == n_split ? (uint64_t) pos + 1 : b + len;
    if (e > (uint64_t) pos + 1) {
        e = (uint64_t) pos + 1;
    }

    *start = b;
    *end = e;

    return 1;
}


typedef int (*range_fn)(uint32_t, uint32_t, uint32_t, int32_t, uint32_t,
    uint64_t *, uint64_t *);


/* The first configuration that breaks a property, in why; 0 if none. */
static int
check_rule(range_fn range, char *why, size_t len)
{
    int       has;
    uint8_t   seen[MAX_CTX + PAST + 1];
    uint32_t  n, ctx, l, w, s, s0, na, first, p;
    int32_t   pos;
    uint64_t  b, e, q;

    for (n = 1; n <= MAX_SPLIT; n++) {
        for (ctx = 1; ctx <= MAX_CTX; ctx++) {
            /* the launcher's split length */
            l = (ctx + n - 1) / n;
            l = l == 0 ? 1 : l;

            for (w = 0; w <= MAX_WIN; w++) {
                for (pos = 0; pos <= (int32_t) (ctx + PAST); pos++) {
                    memset(seen, 0, sizeof(seen));
                    s0 = kvs_ks_split0(n, l, w, pos);
                    na = kvs_ks_active(n, l, pos);

                    for (s = 0; s < n; s++) {
                        has = range(n, l, w, pos, s, &b, &e);

                        if (has && b >= e) {
                            has = 0;
                        }

                        if (has != (s >= s0 && s < na)) {
                            snprintf(why, len, "n_split %u max_ctx %u "
                                     "window %u pos %d: split %u %s "
                                     "(split0 %u, active %u)", n, ctx, w,
                                     pos, s, has ? "holds positions"
                                     : "is empty", s0, na);
                            return 1;
                        }

                        for (q = has ? b : e; q < e; q++) {
                            seen[q]++;
                        }
                    }

                    first = kvs_ks_first(w, pos);

                    for (p = 0; p <= (uint32_t) pos; p++) {
                        if (seen[p] != (p >= first)) {
                            snprintf(why, len, "n_split %u max_ctx %u "
                                     "window %u pos %d: position %u "
                                     "counted %u times (first %u)", n, ctx,
                                     w, pos, p, seen[p], first);
                            return 1;
                        }
                    }
                }
            }
        }
    }

    why[0] = '\0';

    return 0;
}


static void
test_split_rule(void **state)
{
    char  why[160];

    (void) state;

    if (check_rule(kvs_ks_range, why, sizeof(why)) != 0) {
        fail_msg("kvs_ks_range: %s", why);
    }
}


static void
test_old_rule_fails(void **state)
{
    char  why[160];

    (void) state;

    assert_int_equal(check_rule(old_range, why, sizeof(why)), 1);
    print_message("the rule before the fix: %s\n", why);
    assert_non_null(strstr(why, "counted 2 times"));
}


static void
test_first(void **state)
{
    (void) state;

    /* no window, or a position still inside it: everything from 0 */
    assert_int_equal(kvs_ks_first(0, 5000), 0);
    assert_int_equal(kvs_ks_first(300, 299), 0);
    /* past it: the last window positions, pos included */
    assert_int_equal(kvs_ks_first(300, 300), 1);
    assert_int_equal(kvs_ks_first(300, 1999), 1700);
    assert_int_equal(kvs_ks_first(1, 7), 7);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_first),
        cmocka_unit_test(test_split_rule),
        cmocka_unit_test(test_old_rule_fails),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
