/*
 * fuzz_guard: the guard's streaming matcher (src/guard) against its
 * naive definition (t/unit/kvs_guard_ref.h) over the whole text.  The
 * input's first 8 bytes choose the chunk sizes (1..16 bytes each, from
 * a generator they seed) and the mode; the rest is the text, any bytes.
 * The output, the rules matched and the bound on what is held back
 * must be the same for every chunking, and the whole-text search
 * (kvs_guard_check) must find the same first rule; a difference
 * aborts.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard/kvs_guard.h"
#include "../unit/kvs_guard_ref.h"

static const char *const  pats[] = {
    "\\d{3}-\\d{2}-\\d{4}",
    "sk-[a-z0-9]{4}",
    "\\bab\\b",
    "abc|ab",
    "b(?:cd|c)e?",
    "q.*z",
    "é{1,2}",
    "end$",
    "(?i)kq",
    "(?m)^dd",
    "[^a-z]{3}x",
};

static const char  rules[] =
    "a \\d{3}-\\d{2}-\\d{4}\n"
    "b sk-[a-z0-9]{4}\n"
    "c \\bab\\b\n"
    "d abc|ab\n"
    "e b(?:cd|c)e?\n"
    "f window=6 q.*z\n"
    "g é{1,2}\n"
    "h end$\n"
    "i (?i)kq\n"
    "j (?m)^dd\n"
    "k [^a-z]{3}x\n";

static kvs_guard_t      *g;
static kvs_guard_ref_t   ref;


static void
hit(void *data, uint32_t rule)
{
    ((uint32_t *) data)[rule]++;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t              i, k, n, n_hits;
    uint32_t            want[64], got[64];
    static uint32_t     hits[1024];   /* max_len 512: fewer matches */
    int32_t             first;
    uint64_t            seed;
    kvs_buf_t           a, b;
    kvs_err_t           err;
    kvs_guard_mode_t    mode;
    kvs_guard_stream_t  st;

    if (g == NULL) {
        if (kvs_guard_compile(&g, "fuzz", rules, sizeof(rules) - 1, &err)
            != KVS_OK
            || kvs_guard_ref_init(&ref, g, pats,
                                  sizeof(pats) / sizeof(pats[0])) != 0)
        {
            abort();
        }
    }

    if (size < 8) {
        return 0;
    }

    memcpy(&seed, data, 8);
    data += 8;
    size -= 8;
    mode = (seed & 1) ? KVS_GUARD_STOP : KVS_GUARD_REDACT;

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    memset(want, 0, sizeof(want));
    memset(got, 0, sizeof(got));

    kvs_guard_ref_run(&ref, mode, (const char *) data, size, &a, hits, 1024,
                      &n_hits);
    for (i = 0; i < n_hits && i < 1024; i++) {
        want[hits[i]]++;
    }

    if (kvs_guard_stream_init(&st, g, mode, hit, got, &err) != KVS_OK) {
        abort();
    }

    for (i = 0; i < size; i += n) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        n = 1 + (size_t) ((seed >> 33) % 16);
        n = n < size - i ? n : size - i;
        if (kvs_guard_feed(&st, (const char *) data + i, n, &b, &err)
            != KVS_OK
            || kvs_guard_held(&st) >= kvs_guard_window(g) + KVS_GUARD_CUT)
        {
            abort();
        }
    }

    if (kvs_guard_end(&st, &b, &err) != KVS_OK || kvs_guard_held(&st) != 0
        || a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0))
    {
        fprintf(stderr, "fuzz_guard: stream \"%.*s\" != whole \"%.*s\"\n",
                (int) b.len, (char *) b.data, (int) a.len, (char *) a.data);
        abort();
    }

    for (k = 0; k < 64; k++) {
        if (want[k] != got[k]) {
            abort();
        }
    }

    /* the whole-text search: the first match's rule */
    if (kvs_guard_check(g, (const char *) data, size, &first, &err)
        != KVS_OK
        || first != (n_hits > 0 ? (int32_t) hits[0] : -1))
    {
        abort();
    }

    kvs_guard_stream_free(&st);
    kvs_buf_free(&a);
    kvs_buf_free(&b);

    return 0;
}
