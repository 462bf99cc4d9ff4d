/*
 * bench_grammar: time of the grammar engine's steps on a real vocabulary
 * (not a test; prints numbers).  For each schema: the compile time (the
 * median of 11), and over seeded random generations (a random allowed
 * token each step, leaning to tokens that close strings and containers,
 * EOS when allowed one time in three) the time of each token mask with
 * three maskers on the same walk: "cached", a masker of its own (the
 * state cache and a context-independent table of its own, warmed at
 * compile as the engine warms a grammar's: a fresh request);
 * "shared", a masker sharing one table per grammar with the earlier
 * walks (the engine's arrangement); "no cache", every mask a full trie
 * walk (every 4th step; --no-cold leaves it out).  p50 / p99 / max in
 * microseconds (and the mean), and the cache's hit rate.
 *
 *   build/bench_grammar [vocab.gguf] [generations] [--schemas FILE]
 *       [--walks OUT] [--vocab-out OUT] [--no-cold] [--nosrc] [--nokeep]
 *       [--nocheckmemo] [--noslices] [--noruns] [--nolong] [--noexits]
 *       [--nolevels] [--nofans]
 *       [--budget] [--replay]
 *       [--no-warm] [--warm-units N] [--warm-ns N] [--warm-fill N]
 *       [--table N]
 *   default: $KVS_FIXTURES/vocab/ggml-vocab-gpt-2.gguf, 20, the four
 *   built-in schemas and two tool-call specs (three tools, Hermes
 *   syntax, auto and required; a --schemas entry whose name starts with
 *   "tools" is such a spec too)
 *
 * --schemas: a JSON array of {"name", "schema"} (null: json_object mode),
 * t/bench/gram_schemas.json.  --walks: one JSON line per schema (compile
 * ms) and per walk (its token ids, the number of tokens each step's mask
 * allows, and the per-step mask times of the cached and shared maskers),
 * which t/bench/gram_peer.py replays through the peers.  --vocab-out:
 * each token's kind and output bytes (hex), one line per id: the byte
 * strings the peers are given.  --nosrc: every
 * context-independent entry built by a full walk (kvs_gram_masker_t's
 * nosrc), the arrangement before entries were built from a source.
 * --nokeep: every entry's walk from an empty memo (kvs_gram_masker_t's
 * nokeep), as before the memo was kept across a masker's walks.
 * --nocheckmemo: every dependent token checked on the matcher one by
 * one (kvs_gram_masker_t's nocheckmemo), as before the check memo.
 * --noslices: no entry taken from the vocabulary's slices
 * (kvs_gram_masker_t's noslices, kvs_gram_slice.c), as before them.
 * --noruns: a class run's counts walked, not taken from its largest
 * count's entry (kvs_gram_masker_t's noruns, kvs_gram_run.c).
 * --nolong: a low tier's long tokens checked on the real stacks as any
 * dependent one, not walked at the key's own counts (kvs_gram_masker_t's
 * nolong, kvs_gram_long.c).
 * --noexits: a string's closing tokens checked on the real stacks, not
 * decided by what follows their quote (kvs_gram_masker_t's noexits,
 * kvs_gram_exit.c).
 * --nolevels: a class run's counts by a DFS of the trie each, not from
 * the table's levels of the class (kvs_gram_masker_t's nolevels,
 * kvs_gram_run.c).
 * --nofans: every child of a trie node read by the walks, not passed by
 * its byte in the vocabulary's fan lists (kvs_gram_memo_fans).
 * --replay: after a schema's walks, each walk replayed as
 * t/bench/gram_peer.py times the peers (bg_replay): "replayed", and with
 * --walks one "replay" line per walk (its mask times).
 * --no-warm: no table warmed at compile (kvs_gram_masker_warm), as
 * before it: the own masker has a table of its own, the shared table
 * fills as the walks meet keys.  --warm-units N, --warm-fill N: the
 * warm's bounds (default the engine's, KVS_GRAM_WARM_*; units 0: no
 * bound; fill 0: the engine's, KVS_GRAM_WARM_FILL); --warm-ns N: its
 * time bound (default the engine's, KVS_GRAM_WARM_NS; 0: none).
 * --table N: the tables' entries (default the engine's 256,
 * KVS_ENGINE_GRAM_TABLE).
 * --budget: the maskers bounded as the engine's are
 * (kvs_gram_work_budget); a mask over it ends its generation, timed
 * ("over budget").
 * Last, all schemas pooled.  Per schema and pooled too, the most work
 * one mask took (kvs_gram_work_t's units; the engine's budget is chosen
 * from it: docs/grammar.md, "A mask's work budget"), the own masker's
 * and the shared one's, and the own masks' time per unit.
 * GRAM_CLOCK=thread times with the thread's
 * CPU clock instead of the monotonic one.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

/* the tables' entries unless --table says: the engine's
 * (KVS_ENGINE_GRAM_TABLE, kvs_engine_gram.c) */
#define BG_TABLE  256

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
    static int       clk = -1;

    /* GRAM_CLOCK=thread: the thread's CPU time, which a loaded machine's
     * preemptions do not inflate (t/bench/gram_peer.sh) */
    if (clk < 0) {
        clk = getenv("GRAM_CLOCK") != NULL
              && strcmp(getenv("GRAM_CLOCK"), "thread") == 0;
    }

    clock_gettime(clk ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);

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
    size_t  i;
    double  sum;

    if (n == 0) {
        return;
    }

    /* the mean too: a p99 is the few slowest masks of a run and moves
     * with them; the mean carries every mask's cost, so an A/B of a
     * change to the common path reads there first */
    for (i = 0, sum = 0; i < n; i++) {
        sum += t[i];
    }

    qsort(t, n, sizeof(double), bg_cmp);
    printf("    %-10s %6zu masks  p50 %9.1f us  p99 %9.1f us  max %9.1f us"
           "  mean %7.1f us\n",
           what, n, t[n / 2], t[n * 99 / 100], t[n - 1], sum / (double) n);
}


static uint64_t
bg_rand(uint64_t *st)
{
    *st ^= *st << 13;
    *st ^= *st >> 7;
    *st ^= *st << 17;

    return *st;
}


/* The schemas of --schemas FILE (an array of {"name", "schema"}; a null
 * schema is json_object mode), or the four built-in ones. */
typedef struct {
    char    *name;
    json_t  *schema;                  /* NULL: json_object */
} bg_schema_t;


static int
bg_load_schemas(const char *file, bg_schema_t **out, size_t *n)
{
    size_t        i;
    json_t       *arr, *it, *sc;
    json_error_t  je;
    bg_schema_t  *s;

    if (file == NULL) {
        *n = sizeof(bg_schemas) / sizeof(bg_schemas[0]);
        s = calloc(*n, sizeof(bg_schema_t));
        for (i = 0; i < *n; i++) {
            s[i].name = strdup(bg_schemas[i][0]);
            s[i].schema = bg_schemas[i][1] == NULL
                          ? NULL : json_loads(bg_schemas[i][1], 0, NULL);
        }
        *out = s;
        return 0;
    }

    arr = json_load_file(file, 0, &je);
    if (arr == NULL || !json_is_array(arr)) {
        fprintf(stderr, "%s: %s\n", file, arr ? "not an array" : je.text);
        return -1;
    }

    *n = json_array_size(arr);
    s = calloc(*n, sizeof(bg_schema_t));
    json_array_foreach(arr, i, it) {
        s[i].name = strdup(json_string_value(json_object_get(it, "name"))
                           ? json_string_value(json_object_get(it, "name"))
                           : "?");
        sc = json_object_get(it, "schema");
        s[i].schema = json_is_object(sc) ? json_incref(sc) : NULL;
    }
    json_decref(arr);
    *out = s;

    return 0;
}


static int
bg_compile(kvs_gram_t *g, const bg_schema_t *s, kvs_err_t *err)
{
    if (s->schema == NULL) {
        return kvs_gram_json_object(g, NULL, err);
    }

    /* a tool-call spec, by its name */
    if (strncmp(s->name, "tools", 5) == 0) {
        return kvs_gram_from_tools(g, s->schema, NULL, err);
    }

    return kvs_gram_from_schema(g, s->schema, NULL, err);
}


/* Each token's output bytes as the mask sees them, one line per id:
 * "KIND HEX" (KIND a KVS_GRAM_TOK_*; HEX empty for none), so that a peer
 * is given exactly the byte strings our mask is computed over. */
static int
bg_dump_vocab(const kvs_gram_vocab_t *gv, const char *file)
{
    FILE      *f;
    uint32_t   id, i;

    f = fopen(file, "w");
    if (f == NULL) {
        perror(file);
        return -1;
    }

    for (id = 0; id < gv->n_tokens; id++) {
        fprintf(f, "%u ", gv->kind[id]);
        for (i = 0; i < gv->len[id]; i++) {
            fprintf(f, "%02x", gv->bytes[gv->off[id] + i]);
        }
        fputc('\n', f);
    }

    return fclose(f) == 0 ? 0 : -1;
}


static void
bg_put_times(FILE *f, const char *key, const double *t, size_t n)
{
    size_t  i;

    fprintf(f, ", \"%s\": [", key);
    for (i = 0; i < n; i++) {
        fprintf(f, "%s%.2f", i ? ", " : "", t[i]);
    }
    fputc(']', f);
}


/*
 * One schema's walks replayed the way t/bench/gram_peer.py times the
 * peers: per walk a fresh matcher and a masker on a table warmed anew
 * (the warm not timed, as a fresh request's), and at each step the mask
 * timed, then counted through a byte per token (the peers' numpy
 * popcount) and the walk's token accepted.  The walks' own generation
 * reads every allowed token's bytes and writes a candidate list between
 * two masks (up to 600 KB), which leaves the next mask's data out of
 * the cache; the peers' replay does not.  The maskers are the engine's
 * (the reference switches above do not apply; --budget does).  rw: the
 * walks' token ids, 400 a walk, rl their lengths, ra the tokens each of
 * their masks allowed (a replayed mask that allows another number is
 * reported); one: n_tokens bytes of scratch; the times go to t, their
 * count returned (0: a failure, reported).
 */
static size_t
bg_replay(const kvs_gram_t *g, const kvs_gram_vocab_t *gv, const char *name,
    const uint32_t *rw, const uint32_t *rl, const uint32_t *ra, size_t gens,
    uint32_t tents,
    uint64_t wunits, uint64_t wns, uint32_t wfill, int budget,
    uint32_t *bits,
    uint8_t *one, double *t, FILE *wf)
{
    size_t                 gen, k, q, n, n0;
    uint32_t               id;
    uint64_t               c, differ;
    double                 t0;
    kvs_err_t              err;
    kvs_gram_matcher_t     m;
    kvs_gram_masker_t      mk, tab;
    kvs_gram_warm_stats_t  wst;

    n = 0;
    differ = 0;
    for (gen = 0; gen < gens; gen++) {
        if (kvs_gram_matcher_init(&m, g, NULL, &err) != KVS_OK
            || kvs_gram_masker_init(&mk, gv, &m, 64, &err) != KVS_OK
            || kvs_gram_masker_init_table(&tab, gv, tents, &err) != KVS_OK
            || kvs_gram_masker_warm_until(&tab, g, NULL, wunits, wns,
                                          wfill, &wst, &err) != KVS_OK)
        {
            fprintf(stderr, "replay: %s\n", err.msg);
            return 0;
        }
        kvs_gram_masker_share(&mk, &tab);
        kvs_gram_masker_budget(&mk, budget ? kvs_gram_work_budget(gv) : 0);
        n0 = n;

        for (k = 0; k < rl[gen]; k++) {
            id = rw[gen * 400 + k];
            t0 = bg_now();
            if (kvs_gram_mask(&mk, bits, &err) != KVS_OK) {
                break;                /* over budget, as the walk was */
            }
            t[n++] = bg_now() - t0;

            for (q = 0; q < gv->n_tokens; q++) {
                one[q] = (uint8_t) (bits[q >> 5] >> (q & 31) & 1);
            }
            for (q = 0, c = 0; q < gv->n_tokens; q++) {
                c += one[q];
            }
            differ += c != ra[gen * 400 + k];

            if (kvs_gram_accept_token(&m, gv, (int32_t) id, &err) != KVS_OK
                || gv->kind[id] == KVS_GRAM_TOK_END)
            {
                break;
            }
        }

        if (wf != NULL && n > n0) {
            fprintf(wf, "{\"type\": \"replay\", \"schema\": \"%s\", "
                    "\"gen\": %zu", name, gen);
            bg_put_times(wf, "own_us", t + n0, n - n0);
            fputs("}\n", wf);
        }

        kvs_gram_masker_free(&mk);
        kvs_gram_masker_free(&tab);
        kvs_gram_matcher_free(&m);
    }

    if (differ > 0) {
        /* the same walk through the same grammar: never expected */
        fprintf(stderr, "replay: %s: %llu masks allow another number of "
                "tokens than the walk's\n", name,
                (unsigned long long) differ);
    }

    return n;
}


int
main(int argc, char **argv)
{
    int                 rc, cold_on, nosrc, nokeep, nocm, nosl, over, budget;
    int                 noruns, nolong, noexits, nolevels, nofans, replay;
    int                 warm;
    uint32_t            wfill, tents;
    uint64_t            wunits, wns;
    double              twarm, twarm_own;
    kvs_gram_warm_stats_t  wst;
    char                path[1024];
    const char         *schemas_file, *walks_file, *vocab_file;
    size_t              s, gen, step, n, nc, nt, ncold, nsh, gens, ns, k;
    size_t              w0, ai, na, nlate;
    double              t0, *tw, *tc, *tsh, comp[11], *aw, *ash, *trp;
    uint32_t           *bits, *cand, id, words, *walk, *nallow, *rw, *rl;
    uint32_t           *ra;
    uint8_t            *one;
    uint64_t            rng, mst[4], wown, wsh, wsum, wall[2];
    double              tsum, twmax;
    FILE               *wf;
    kvs_err_t           err;
    kvs_vocab_t        *v;
    kvs_gram_t          g;
    bg_schema_t        *sch;
    kvs_gram_vocab_t   *gv;
    kvs_gram_matcher_t  m;
    kvs_gram_masker_t   mk, cold, shm, table, otab;

    schemas_file = walks_file = vocab_file = NULL;
    cold_on = 1;
    nosrc = 0;
    noruns = 0;
    nolong = 0;
    noexits = 0;
    nolevels = 0;
    nofans = 0;
    replay = 0;
    nokeep = 0;
    nocm = 0;
    nosl = 0;
    budget = 0;
    warm = 1;
    wunits = KVS_GRAM_WARM_UNITS;
    wns = KVS_GRAM_WARM_NS;
    tents = BG_TABLE;
    wfill = 0;
    path[0] = '\0';
    gens = 20;

    for (ai = 1, k = 0; ai < (size_t) argc; ai++) {
        if (strcmp(argv[ai], "--schemas") == 0 && ai + 1 < (size_t) argc) {
            schemas_file = argv[++ai];
        } else if (strcmp(argv[ai], "--walks") == 0
                   && ai + 1 < (size_t) argc)
        {
            walks_file = argv[++ai];
        } else if (strcmp(argv[ai], "--vocab-out") == 0
                   && ai + 1 < (size_t) argc)
        {
            vocab_file = argv[++ai];
        } else if (strcmp(argv[ai], "--no-cold") == 0) {
            cold_on = 0;
        } else if (strcmp(argv[ai], "--nosrc") == 0) {
            nosrc = 1;
        } else if (strcmp(argv[ai], "--noruns") == 0) {
            noruns = 1;
        } else if (strcmp(argv[ai], "--nolong") == 0) {
            nolong = 1;
        } else if (strcmp(argv[ai], "--noexits") == 0) {
            noexits = 1;
        } else if (strcmp(argv[ai], "--nolevels") == 0) {
            nolevels = 1;
        } else if (strcmp(argv[ai], "--nofans") == 0) {
            nofans = 1;
        } else if (strcmp(argv[ai], "--replay") == 0) {
            replay = 1;
        } else if (strcmp(argv[ai], "--nokeep") == 0) {
            nokeep = 1;
        } else if (strcmp(argv[ai], "--nocheckmemo") == 0) {
            nocm = 1;
        } else if (strcmp(argv[ai], "--noslices") == 0) {
            nosl = 1;
        } else if (strcmp(argv[ai], "--no-warm") == 0) {
            warm = 0;
        } else if (strcmp(argv[ai], "--warm-units") == 0
                   && ai + 1 < (size_t) argc)
        {
            wunits = strtoull(argv[++ai], NULL, 10);
        } else if (strcmp(argv[ai], "--warm-ns") == 0
                   && ai + 1 < (size_t) argc)
        {
            wns = strtoull(argv[++ai], NULL, 10);
        } else if (strcmp(argv[ai], "--warm-fill") == 0
                   && ai + 1 < (size_t) argc)
        {
            wfill = (uint32_t) strtoul(argv[++ai], NULL, 10);
        } else if (strcmp(argv[ai], "--table") == 0
                   && ai + 1 < (size_t) argc)
        {
            tents = (uint32_t) strtoul(argv[++ai], NULL, 10);
            tents = tents != 0 ? tents : BG_TABLE;
        } else if (strcmp(argv[ai], "--budget") == 0) {
            budget = 1;
        } else if (k == 0) {
            snprintf(path, sizeof(path), "%s", argv[ai]);
            k++;
        } else {
            gens = strtoul(argv[ai], NULL, 10);
        }
    }

    if (path[0] == '\0') {
        snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-gpt-2.gguf",
                 getenv("KVS_FIXTURES") ? getenv("KVS_FIXTURES")
                                        : "../shared/fixtures");
    }

    if (bg_load_schemas(schemas_file, &sch, &ns) != 0) {
        return 1;
    }

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

    /* the slices again, timed alone (part of the time above) */
    t0 = bg_now();
    if (kvs_gram_vocab_slices(gv, &err) != KVS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("    %u slices built in %.1f ms (once per vocabulary)\n",
           kvs_gram_vocab_n_slices(gv), (bg_now() - t0) / 1e3);
    printf("    %u tokens close a string after whole characters, %u "
           "tails\n", kvs_gram_exits_tokens(gv), kvs_gram_vocab_n_exits(gv));
    if (gv->fan_at != NULL) {
        printf("    fan lists: the root's %u children and %u nodes' %u\n",
               gv->fan_at[1], gv->n_fan,
               gv->fan_at[gv->n_fan + 1] - gv->fan_at[1]);
    }

    if (vocab_file != NULL && bg_dump_vocab(gv, vocab_file) != 0) {
        return 1;
    }

    wf = NULL;
    if (walks_file != NULL) {
        wf = fopen(walks_file, "w");
        if (wf == NULL) {
            perror(walks_file);
            return 1;
        }
        fprintf(wf, "{\"type\": \"vocab\", \"path\": \"%s\", "
                "\"n_tokens\": %u}\n", path, gv->n_tokens);
    }

    wall[0] = wall[1] = 0;
    words = (gv->n_tokens + 31) / 32;
    bits = malloc(words * sizeof(uint32_t));
    cand = malloc(gv->n_tokens * sizeof(uint32_t));
    tw = malloc(gens * 400 * sizeof(double));
    tc = malloc(gens * 400 * sizeof(double));
    tsh = malloc(gens * 400 * sizeof(double));
    aw = malloc((ns + 1) * gens * 400 * sizeof(double));
    ash = malloc((ns + 1) * gens * 400 * sizeof(double));
    na = 0;
    walk = malloc(400 * sizeof(uint32_t));
    nallow = malloc(400 * sizeof(uint32_t));
    rw = replay ? malloc(gens * 400 * sizeof(uint32_t)) : NULL;
    rl = replay ? calloc(gens, sizeof(uint32_t)) : NULL;
    ra = replay ? malloc(gens * 400 * sizeof(uint32_t)) : NULL;
    one = replay ? malloc(gv->n_tokens) : NULL;
    trp = replay ? malloc(gens * 400 * sizeof(double)) : NULL;
    if (replay && (rw == NULL || rl == NULL || ra == NULL || one == NULL
                   || trp == NULL))
    {
        fprintf(stderr, "replay: no memory\n");
        return 1;
    }

    if (wfill == 0) {
        wfill = KVS_GRAM_WARM_FILL(tents);
    }

    for (s = 0; s < ns; s++) {
        /* the median of 11 compiles: one takes ~0.1 ms, below the noise
         * of a shared machine */
        for (k = 0; k < 11; k++) {
            t0 = bg_now();
            rc = bg_compile(&g, &sch[s], &err);
            comp[k] = (bg_now() - t0) / 1e3;
            if (rc != KVS_OK) {
                fprintf(stderr, "%s: %s\n", sch[s].name, err.msg);
                return 1;
            }
            if (k < 10) {
                kvs_gram_free(&g);
            }
        }
        t0 = comp[0];
        qsort(comp, 11, sizeof(double), bg_cmp);
        printf("%s: compiled in %.3f ms (first %.3f; %u rules, "
               "%u elements)\n", sch[s].name, comp[5], t0, g.n_rules,
               g.n_elems);
        if (wf != NULL) {
            fprintf(wf, "{\"type\": \"schema\", \"schema\": \"%s\", "
                    "\"compile_ms\": %.4f, \"compile_first_ms\": %.4f}\n",
                    sch[s].name, comp[5], t0);
        }

        /* the engine's arrangement: one table of context-independent
         * masks per grammar, shared by its requests' maskers */
        if (kvs_gram_masker_init_table(&table, gv, tents, &err) != KVS_OK) {
            fprintf(stderr, "table: %s\n", err.msg);
            return 1;
        }
        table.nolevels = nolevels;
        kvs_gram_memo_fans(table.memo, !nofans);

        /* the engine warms a grammar's table once, at compile */
        twarm = 0;
        if (warm) {
            t0 = bg_now();
            if (kvs_gram_masker_warm_until(&table, &g, NULL, wunits, wns,
                                           wfill, &wst, &err)
                != KVS_OK)
            {
                fprintf(stderr, "warm: %s\n", err.msg);
                return 1;
            }
            twarm = (bg_now() - t0) / 1e3;
            printf("    warmed in %.3f ms: %u keys tried, %u entries built "
                   "(%u from slices, %u of them first, %u skipped, %u on "
                   "the runs' %llu units), %llu units%s%s\n", twarm,
                   wst.keys, wst.built, wst.slices, wst.lent, wst.skipped,
                   wst.runs,
                   (unsigned long long) wst.run_units,
                   (unsigned long long) wst.units,
                   wst.done ? ", every key" : "",
                   wst.late ? ", ended by the time bound" : "");
        }
        if (wf != NULL) {
            fprintf(wf, "{\"type\": \"warm\", \"schema\": \"%s\", "
                    "\"warm_ms\": %.4f}\n", sch[s].name, twarm);
        }
        twarm_own = 0;
        nlate = 0;

        rng = 42;
        nt = ncold = nsh = 0;
        wown = wsh = wsum = 0;
        tsum = twmax = 0;

        for (gen = 0; gen < gens; gen++) {
            kvs_gram_matcher_init(&m, &g, NULL, &err);
            kvs_gram_masker_init(&mk, gv, &m, 64, &err);
            if (warm) {
                /* a fresh request's table: the compile's warm alone */
                if (kvs_gram_masker_init_table(&otab, gv, tents, &err)
                    != KVS_OK)
                {
                    fprintf(stderr, "table: %s\n", err.msg);
                    return 1;
                }
                otab.nolevels = nolevels;
                kvs_gram_memo_fans(otab.memo, !nofans);
                t0 = bg_now();
                if (kvs_gram_masker_warm_until(&otab, &g, NULL, wunits,
                                               wns, wfill, &wst, &err)
                    != KVS_OK)
                {
                    fprintf(stderr, "warm: %s\n", err.msg);
                    return 1;
                }
                twarm_own += (bg_now() - t0) / 1e3;
                nlate += wst.late;
                kvs_gram_masker_share(&mk, &otab);
            }
            kvs_gram_masker_init(&shm, gv, &m, 16, &err);
            kvs_gram_masker_share(&shm, &table);
            kvs_gram_masker_init(&cold, gv, &m, 0, &err);
            mk.nosrc = nosrc;
            shm.nosrc = nosrc;
            mk.noruns = noruns;
            shm.noruns = noruns;
            mk.nolong = nolong;
            shm.nolong = nolong;
            mk.noexits = noexits;
            shm.noexits = noexits;
            mk.nolevels = nolevels;
            shm.nolevels = nolevels;
            kvs_gram_memo_fans(mk.memo, !nofans);
            kvs_gram_memo_fans(shm.memo, !nofans);
            mk.nokeep = nokeep;
            shm.nokeep = nokeep;
            mk.nocheckmemo = nocm;
            shm.nocheckmemo = nocm;
            mk.noslices = nosl;
            shm.noslices = nosl;
            kvs_gram_masker_budget(&mk, budget ? kvs_gram_work_budget(gv)
                                               : 0);
            kvs_gram_masker_budget(&shm, budget ? kvs_gram_work_budget(gv)
                                                : 0);
            w0 = nt;
            over = 0;

            for (step = 0; step < 400; step++) {
                t0 = bg_now();
                rc = kvs_gram_mask(&mk, bits, &err);
                if (rc != KVS_OK && kvs_gram_work_over(&mk.work)) {
                    printf("    over budget at step %zu: %.1f us, %llu "
                           "units\n", step, bg_now() - t0,
                           (unsigned long long) mk.work.used);
                    over = 1;
                }
                if (rc != KVS_OK && !over) {
                    fprintf(stderr, "mask: %s\n", err.msg);
                    return 1;
                }
                if (over) {
                    break;
                }
                tw[nt++] = bg_now() - t0;
                tsum += tw[nt - 1];
                wsum += mk.work.used;
                if (mk.work.used > wown) {
                    wown = mk.work.used;
                    twmax = tw[nt - 1];
                }

                t0 = bg_now();
                if (kvs_gram_mask(&shm, bits, &err) != KVS_OK) {
                    if (kvs_gram_work_over(&shm.work)) {
                        printf("    shared over budget at step %zu: %.1f "
                               "us\n", step, bg_now() - t0);
                        break;
                    }
                    fprintf(stderr, "shared mask: %s\n", err.msg);
                    return 1;
                }
                tsh[nsh++] = bg_now() - t0;
                if (shm.work.used > wsh) {
                    wsh = shm.work.used;
                }

                if (cold_on && step % 4 == 0) {
                    t0 = bg_now();
                    kvs_gram_mask(&cold, bits, &err);
                    tc[ncold++] = bg_now() - t0;
                }

                for (id = 0, n = 0; id < words; id++) {
                    n += (size_t) __builtin_popcount(bits[id]);
                }
                nallow[step] = (uint32_t) n;

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

                walk[step] = id;
                kvs_gram_accept_token(&m, gv, (int32_t) id, &err);
                if (gv->kind[id] == KVS_GRAM_TOK_END) {
                    step++;
                    break;
                }
            }

            if (replay) {
                memcpy(rw + gen * 400, walk, step * sizeof(uint32_t));
                memcpy(ra + gen * 400, nallow, step * sizeof(uint32_t));
                rl[gen] = (uint32_t) step;
            }

            if (wf != NULL && step > 0) {
                fprintf(wf, "{\"type\": \"walk\", \"schema\": \"%s\", "
                        "\"gen\": %zu, \"ended\": %s, \"tokens\": [",
                        sch[s].name, gen,
                        gv->kind[walk[step - 1]] == KVS_GRAM_TOK_END
                        ? "true" : "false");
                for (k = 0; k < step; k++) {
                    fprintf(wf, "%s%u", k ? ", " : "", walk[k]);
                }
                fputs("], \"allowed\": [", wf);
                for (k = 0; k < step; k++) {
                    fprintf(wf, "%s%u", k ? ", " : "", nallow[k]);
                }
                fputc(']', wf);
                bg_put_times(wf, "own_us", tw + w0, nt - w0);
                bg_put_times(wf, "shared_us", tsh + w0, nsh - w0);
                fputs("}\n", wf);
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
                printf("    last run: %llu entries taken from slices, "
                       "%llu built from a source, %llu from a "
                       "class run's, %llu trie nodes taken from "
                       "sources\n",
                       (unsigned long long) mk.ind_slices,
                       (unsigned long long) mk.ind_src,
                       (unsigned long long) mk.ind_runs,
                       (unsigned long long) kvs_gram_memo_copied(mk.memo));
                printf("    last run: dependent verdicts kept %llu times, "
                       "taken %llu times; long tokens walked %llu times, "
                       "found %llu; closing tokens decided by tails %llu "
                       "times (%llu tails fed)\n",
                       (unsigned long long) mk.verdict_fills,
                       (unsigned long long) mk.verdict_hits,
                       (unsigned long long) mk.long_builds,
                       (unsigned long long) mk.long_hits,
                       (unsigned long long) mk.exits,
                       (unsigned long long) mk.exit_tails);
                kvs_gram_memo_stats(mk.memo, mst);
                printf("    last run: walk memo %llu hits, %llu matcher "
                       "steps, %llu states, %llu clears\n",
                       (unsigned long long) mst[0],
                       (unsigned long long) mst[1],
                       (unsigned long long) mst[2],
                       (unsigned long long) mst[3]);
            }

            kvs_gram_masker_free(&mk);
            if (warm) {
                kvs_gram_masker_free(&otab);
            }
            kvs_gram_masker_free(&shm);
            kvs_gram_masker_free(&cold);
            kvs_gram_matcher_free(&m);
        }

        if (aw != NULL && ash != NULL && nt == nsh) {
            memcpy(aw + na, tw, nt * sizeof(double));
            memcpy(ash + na, tsh, nt * sizeof(double));
            na += nt;
        }
        if (warm) {
            printf("    own tables warmed in %.3f ms each (mean), %zu of "
                   "%zu ended by the time bound\n",
                   twarm_own / (double) gens, nlate, gens);
        }
        bg_print("cached", tw, nt);
        if (replay && warm) {
            n = bg_replay(&g, gv, sch[s].name, rw, rl, ra, gens, tents,
                          wunits, wns, wfill, budget, bits, one, trp, wf);
            bg_print("replayed", trp, n);
        }
        bg_print("shared", tsh, nsh);
        bg_print("no cache", tc, ncold);
        printf("    work: one mask at most %llu units own (%.1f us), %llu "
               "shared; own masks %.2f ns a unit\n",
               (unsigned long long) wown, twmax, (unsigned long long) wsh,
               wsum > 0 ? tsum * 1e3 / (double) wsum : 0.0);
        wall[0] = wown > wall[0] ? wown : wall[0];
        wall[1] = wsh > wall[1] ? wsh : wall[1];
        kvs_gram_masker_free(&table);
        kvs_gram_free(&g);
    }

    if (aw != NULL && ash != NULL) {
        printf("all schemas%s%s:\n", nosrc ? " (--nosrc)" : "",
               nokeep ? " (--nokeep)" : "");
        bg_print("cached", aw, na);
        bg_print("shared", ash, na);
    }
    printf("work: one mask at most %llu units own, %llu shared\n",
           (unsigned long long) wall[0], (unsigned long long) wall[1]);
    free(aw);
    free(ash);

    if (wf != NULL && fclose(wf) != 0) {
        perror(walks_file);
        return 1;
    }

    for (s = 0; s < ns; s++) {
        free(sch[s].name);
        json_decref(sch[s].schema);
    }
    free(sch);
    free(bits);
    free(cand);
    free(tw);
    free(tc);
    free(tsh);
    free(walk);
    free(nallow);
    free(rw);
    free(rl);
    free(ra);
    free(one);
    free(trp);
    kvs_gram_vocab_free(gv);
    kvs_vocab_free(v);

    return 0;
}
