/*
 * fuzz_grammar: the schema compiler, the tools spec compiler, the regex
 * compiler, the matcher and the mask on hostile input (src/grammar).
 *
 * The input is "schema JSON \0 bytes" (an object with a "syntax" or
 * "choice" key is a tools spec, kvs_gram_from_tools): it is compiled (any
 * outcome but a crash is fine; an error must carry a message); when it
 * compiles, the bytes are fed to a matcher one at a time while it takes
 * them, with a tiny vocabulary's mask checked against a brute force for
 * the first steps.  Without a \0 the whole input is also tried as a
 * `pattern`.  Checks beyond "no crash, no undefined behaviour, no leak":
 * a refused byte leaves the state as it was; rolling back and re-feeding
 * gives the same state; the mask equals the brute force.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/kvs_grammar.h"


static kvs_gram_vocab_t  *fz_gv;


static void
fz_vocab(void)
{
    static const char  *pieces[] = { "{\"", "\": ", "\", \"", "\"}", "true",
                                     "null", "12", "\\u00", "\xc3\xa9",
                                     "\xe6\x97", "}]", "[{", "<tool_call>",
                                     "[TOOL_CALLS]", "<function=",
                                     "<|python_tag|>" };
    static uint8_t      bytes[256];
    const uint8_t      *texts[256 + 17];
    uint32_t            lens[256 + 17], i;
    uint8_t             kinds[256 + 17];

    for (i = 0; i < 256; i++) {
        bytes[i] = (uint8_t) i;
        texts[i] = &bytes[i];
        lens[i] = 1;
        kinds[i] = KVS_GRAM_TOK_TEXT;
    }
    for (i = 0; i < 16; i++) {
        texts[256 + i] = (const uint8_t *) pieces[i];
        lens[256 + i] = (uint32_t) strlen(pieces[i]);
        kinds[256 + i] = KVS_GRAM_TOK_TEXT;
    }
    texts[272] = (const uint8_t *) "";
    lens[272] = 0;
    kinds[272] = KVS_GRAM_TOK_END;

    if (kvs_gram_vocab_from_bytes(&fz_gv, 273, texts, lens, kinds, NULL)
        != KVS_OK)
    {
        abort();
    }
}


static void
fz_check_mask(kvs_gram_masker_t *mk, kvs_gram_matcher_t *m)
{
    uint32_t  bits[9], id, want;
    size_t    n0;

    if (kvs_gram_mask(mk, bits, NULL) != KVS_OK) {
        return;
    }

    n0 = kvs_gram_matcher_len(m);

    for (id = 0; id < fz_gv->n_tokens; id++) {
        if (fz_gv->kind[id] == KVS_GRAM_TOK_END) {
            want = (uint32_t) kvs_gram_matcher_can_end(m);
        } else {
            want = kvs_gram_matcher_feed(m, fz_gv->bytes + fz_gv->off[id],
                                         fz_gv->len[id], NULL) == KVS_OK;
            if (want) {
                kvs_gram_matcher_rollback(m, fz_gv->len[id]);
            }
        }
        if ((bits[id >> 5] >> (id & 31) & 1) != want) {
            fprintf(stderr, "mask differs at token %u\n", id);
            abort();
        }
    }

    if (kvs_gram_matcher_len(m) != n0) {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int                 rc, end;
    size_t              split, i, fed;
    json_t             *s;
    uint32_t            rule;
    uint64_t            next[4], again[4];
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_opts_t     o;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk;
    kvs_gram_mlimits_t  ml;

    if (fz_gv == NULL) {
        fz_vocab();
    }

    for (split = 0; split < size && data[split] != 0; split++) {
        /* the schema's end */
    }

    memset(&o, 0, sizeof(o));
    o.lim.max_elems = 1 << 16;
    o.lim.max_rules = 1 << 14;
    o.flags = size > 0 && (data[size - 1] & 1) ? KVS_GRAM_COMPACT : 0;

    if (split == size) {
        kvs_err_clear(&err);
        kvs_gram_init(&g, &o.lim);
        rc = kvs_gram_regex(&g, (const char *) data, size, &rule, &err);
        if (rc != KVS_OK && err.msg[0] == '\0') {
            abort();
        }
        kvs_gram_free(&g);
    }

    s = json_loadb((const char *) data, split, JSON_DECODE_ANY, NULL);
    if (s == NULL) {
        return 0;
    }

    kvs_err_clear(&err);
    rc = json_object_get(s, "syntax") != NULL
         || json_object_get(s, "choice") != NULL
         ? kvs_gram_from_tools(&g, s, &o, &err)
         : kvs_gram_from_schema(&g, s, &o, &err);
    json_decref(s);

    if (rc != KVS_OK) {
        if (err.msg[0] == '\0') {
            abort();
        }
        kvs_gram_free(&g);
        return 0;
    }

    memset(&ml, 0, sizeof(ml));
    ml.max_nodes = 1 << 16;
    ml.max_front = 512;

    if (kvs_gram_matcher_init(&m, &g, &ml, &err) != KVS_OK) {
        kvs_gram_free(&g);
        return 0;
    }
    if (kvs_gram_masker_init(&mk, fz_gv, &m, 4, &err) != KVS_OK) {
        abort();
    }

    fed = 0;
    for (i = split + 1; i < size && i < split + 1 + 512; i++) {
        if (fed < 8) {
            fz_check_mask(&mk, &m);
        }

        kvs_gram_matcher_next(&m, next);
        end = kvs_gram_matcher_can_end(&m);
        rc = kvs_gram_matcher_byte(&m, data[i], NULL);

        if (rc != KVS_OK) {
            /* refused: nothing changed */
            kvs_gram_matcher_next(&m, again);
            if (memcmp(next, again, sizeof(next)) != 0
                || end != kvs_gram_matcher_can_end(&m))
            {
                abort();
            }
            if (rc == KVS_EFORMAT && (next[data[i] >> 6]
                                      >> (data[i] & 63) & 1))
            {
                /* a byte in the next set may still die in the closure
                 * only if every stack that takes it dead-ends: never,
                 * since dead alternatives are pruned */
                abort();
            }
            continue;
        }
        fed++;

        /* roll back one and re-feed: the same state */
        kvs_gram_matcher_next(&m, next);
        end = kvs_gram_matcher_can_end(&m);
        kvs_gram_matcher_rollback(&m, 1);
        if (kvs_gram_matcher_byte(&m, data[i], NULL) != KVS_OK) {
            abort();
        }
        kvs_gram_matcher_next(&m, again);
        if (memcmp(next, again, sizeof(next)) != 0
            || end != kvs_gram_matcher_can_end(&m))
        {
            abort();
        }
    }

    kvs_gram_masker_free(&mk);
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);

    return 0;
}
