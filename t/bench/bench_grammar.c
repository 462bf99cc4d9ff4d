/*
 * bench_grammar: time of the grammar engine's steps on a real vocabulary
 * (not a test; prints numbers).  For a few schemas and two tool-call
 * specs (three tools, Hermes syntax, auto and required): the compile
 * time, and
 * over seeded random generations (a random allowed token each step,
 * leaning to tokens that close strings and containers, EOS when allowed
 * one time in three) the time of each token mask, with the matcher's
 * state cache and without it (every mask a full trie walk), p50 / p99 /
 * max in microseconds, and the cache's hit rate.
 *
 *   build/bench_grammar [vocab.gguf] [generations]
 *   default: $KVS_FIXTURES/vocab/ggml-vocab-gpt-2.gguf, 20
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "grammar/kvs_grammar.h"

#define BG_TOOLS(choice) \
    "{\"choice\": \"" choice "\", \"parallel\": true, \"syntax\": " \
    "\"hermes\", \"tools\": [{\"name\": \"get_weather\", \"parameters\": " \
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": " \
    "\"string\"}, \"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"]}}, " \
    "\"required\": [\"city\"], \"additionalProperties\": false}}, " \
    "{\"name\": \"search\", \"parameters\": {\"type\": \"object\", " \
    "\"properties\": {\"query\": {\"type\": \"string\"}, \"limit\": " \
    "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 50}}, " \
    "\"required\": [\"query\"], \"additionalProperties\": false}}, " \
    "{\"name\": \"create_event\", \"parameters\": {\"type\": \"object\", " \
    "\"properties\": {\"title\": {\"type\": \"string\"}, \"date\": " \
    "{\"type\": \"string\", \"format\": \"date\"}, \"attendees\": " \
    "{\"type\": \"array\", \"items\": {\"type\": \"string\", " \
    "\"format\": \"email\"}, \"maxItems\": 5}}, \"required\": " \
    "[\"title\", \"date\"], \"additionalProperties\": false}}]}"

static const char  *bg_schemas[][2] = {
    { "json_object", NULL },
    { "person",
      "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": "
      "\"string\"}, \"age\": {\"type\": \"integer\", \"minimum\": 0, "
      "\"maximum\": 150}, \"email\": {\"type\": \"string\", \"format\": "
      "\"email\"}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": "
      "\"string\"}, \"maxItems\": 5}}, \"required\": [\"name\", \"age\"], "
      "\"additionalProperties\": false}" },
    { "enum+uuid",
      "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": "
      "\"string\", \"format\": \"uuid\"}, \"color\": {\"enum\": [\"red\", "
      "\"green\", \"blue\", \"cyan\", \"magenta\"]}, \"when\": {\"type\": "
      "\"string\", \"format\": \"date-time\"}}, \"required\": [\"id\", "
      "\"color\", \"when\"], \"additionalProperties\": false}" },
    { "tree",
      "{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"v\": "
      "{\"type\": \"number\"}, \"kids\": {\"type\": \"array\", \"items\": "
      "{\"$ref\": \"#/$defs/n\"}}}, \"required\": [\"v\"], "
      "\"additionalProperties\": false}}, \"$ref\": \"#/$defs/n\"}" },
    /* tool calls (kvs_gram_from_tools): three tools, Hermes syntax */
    { "tools auto", BG_TOOLS("auto") },
    { "tools required", BG_TOOLS("required") },
};


static double
bg_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}


static int
bg_cmp(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return x < y ? -1 : x > y;
}


static void
bg_print(const char *what, double *t, size_t n)
{
    if (n == 0) {
        return;
    }

    qsort(t, n, sizeof(double), bg_cmp);
    printf("    %-10s %6zu masks  p50 %9.1f us  p99 %9.1f us  max %9.1f us\n",
           what, n, t[n / 2], t[n * 99 / 100], t[n - 1]);
}


static uint64_t
bg_rand(uint64_t *st)
{
    *st ^= *st << 13;
    *st ^= *st >> 7;
    *st ^= *st << 17;

    return *st;
}


int
main(int argc, char **argv)
{
    int                 rc;
    char                path[1024];
    size_t              s, gen, step, n, nc, nt, ncold, gens;
    double              t0, *tw, *tc;
    uint32_t           *bits, *cand, id, words;
    uint64_t            rng;
    json_t             *js;
    kvs_err_t           err;
    kvs_vocab_t        *v;
    kvs_gram_t          g;
    kvs_gram_vocab_t   *gv;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk, cold;

    if (argc > 1) {
        snprintf(path, sizeof(path), "%s", argv[1]);
    } else {
        snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-gpt-2.gguf",
                 getenv("KVS_FIXTURES") ? getenv("KVS_FIXTURES")
                                        : "../shared/fixtures");
    }
    gens = argc > 2 ? strtoul(argv[2], NULL, 10) : 20;

    if (kvs_vocab_open(&v, path, &err) != KVS_OK) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return 1;
    }

    t0 = bg_now();
    if (kvs_gram_vocab_from_vocab(&gv, v, &err) != KVS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("%s: %u tokens, trie of %u nodes built in %.1f ms\n", path,
           gv->n_tokens, gv->n_nodes, (bg_now() - t0) / 1e3);

    words = (gv->n_tokens + 31) / 32;
    bits = malloc(words * sizeof(uint32_t));
    cand = malloc(gv->n_tokens * sizeof(uint32_t));
    tw = malloc(gens * 400 * sizeof(double));
    tc = malloc(gens * 400 * sizeof(double));

    for (s = 0; s < sizeof(bg_schemas) / sizeof(bg_schemas[0]); s++) {
        t0 = bg_now();
        if (bg_schemas[s][1] == NULL) {
            rc = kvs_gram_json_object(&g, NULL, &err);
        } else {
            js = json_loads(bg_schemas[s][1], 0, NULL);
            rc = strncmp(bg_schemas[s][0], "tools", 5) == 0
                 ? kvs_gram_from_tools(&g, js, NULL, &err)
                 : kvs_gram_from_schema(&g, js, NULL, &err);
            json_decref(js);
        }
        if (rc != KVS_OK) {
            fprintf(stderr, "%s: %s\n", bg_schemas[s][0], err.msg);
            return 1;
        }
        printf("%s: compiled in %.3f ms (%u rules, %u elements)\n",
               bg_schemas[s][0], (bg_now() - t0) / 1e3, g.n_rules,
               g.n_elems);

        rng = 42;
        nt = ncold = 0;

        for (gen = 0; gen < gens; gen++) {
            kvs_gram_matcher_init(&m, &g, NULL, &err);
            kvs_gram_masker_init(&mk, gv, &m, 64, &err);
            kvs_gram_masker_init(&cold, gv, &m, 0, &err);

            for (step = 0; step < 400; step++) {
                t0 = bg_now();
                if (kvs_gram_mask(&mk, bits, &err) != KVS_OK) {
                    fprintf(stderr, "mask: %s\n", err.msg);
                    return 1;
                }
                tw[nt++] = bg_now() - t0;

                if (step % 4 == 0) {
                    t0 = bg_now();
                    kvs_gram_mask(&cold, bits, &err);
                    tc[ncold++] = bg_now() - t0;
                }

                for (id = 0, n = 0, nc = 0; id < gv->n_tokens; id++) {
                    if (!(bits[id >> 5] >> (id & 31) & 1)) {
                        continue;
                    }
                    if (gv->kind[id] == KVS_GRAM_TOK_TEXT
                        && (memchr(gv->bytes + gv->off[id], '"', gv->len[id])
                            || memchr(gv->bytes + gv->off[id], '}',
                                      gv->len[id])
                            || memchr(gv->bytes + gv->off[id], ']',
                                      gv->len[id])))
                    {
                        cand[gv->n_tokens - 1 - nc++] = id;
                    } else {
                        cand[n++] = id;
                    }
                }

                if (nc > 0 && (n == 0 || bg_rand(&rng) % 3 == 0)) {
                    id = cand[gv->n_tokens - 1 - bg_rand(&rng) % nc];
                } else {
                    id = cand[bg_rand(&rng) % n];
                }
                if (kvs_gram_matcher_can_end(&m) && bg_rand(&rng) % 3 == 0) {
                    id = (uint32_t) gv->ids[gv->n_text];
                }

                kvs_gram_accept_token(&m, gv, (int32_t) id, &err);
                if (gv->kind[id] == KVS_GRAM_TOK_END) {
                    break;
                }
            }

            if (gen == gens - 1) {
                printf("    last run: state cache %llu hits, %llu misses; "
                       "context-independent %llu hits, %llu misses, "
                       "%llu tokens checked on the stacks\n",
                       (unsigned long long) mk.hits,
                       (unsigned long long) mk.misses,
                       (unsigned long long) mk.ind_hits,
                       (unsigned long long) mk.ind_misses,
                       (unsigned long long) mk.checked);
            }

            kvs_gram_masker_free(&mk);
            kvs_gram_masker_free(&cold);
            kvs_gram_matcher_free(&m);
        }

        bg_print("cached", tw, nt);
        bg_print("no cache", tc, ncold);
        kvs_gram_free(&g);
    }

    free(bits);
    free(cand);
    free(tw);
    free(tc);
    kvs_gram_vocab_free(gv);
    kvs_vocab_free(v);

    return 0;
}
