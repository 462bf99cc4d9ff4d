/*
 * bench_gram: what grammar-constrained decoding (response_format) costs
 * the engine, end to end, on the CPU.
 *
 *   bench_gram decode MODEL.gguf [--seqs 32] [--prompt 32] [--gen 128]
 *                     [--threads T] [--reps 3] [--case NAME]
 *     N sequences submitted at once (seeded random prompt ids, seeded
 *     temperature-1 sampling), decoded G tokens each, the engine driven
 *     on this thread (so the masks, computed on the engine thread, count
 *     in the step time), unconstrained and then under each schema below;
 *     decode tokens/s is the tokens of decode-only steps over their time
 *     (engine stats), best of the reps; the ratio is constrained over
 *     unconstrained.  The schemas cannot be completed within G tokens
 *     (minItems, minLength), so every sequence runs its G tokens and the
 *     batch stays N throughout: the same work with and without a mask.
 *
 *   bench_gram trie VOCAB.gguf...
 *     The token trie of each vocabulary (what the engine builds once per
 *     model at load): build time, nodes, and the memory it holds.
 *
 *   bench_gram walk VOCAB.gguf... [--reps 30]
 *     One full mask walk of the trie inside a free JSON string (a
 *     json_object grammar after {"a": "x): a masker without caches, so
 *     every mask is the whole walk; the median and the best of the reps,
 *     with the memo as it is (subtree skipping on), without skipping, and
 *     without the memo; the memo's counters per walk.
 *
 * The machine this was written on is shared (load well above its cores),
 * so wall-clock rates swing by 2x from run to run; each run also
 * measures the process's CPU time (getrusage: every thread, prefill
 * included, which is the same work in every case), and cpu_ratio, the
 * unconstrained run's CPU time over this case's, is the figure that
 * holds up under load.
 *
 * Prints one "bench_gram ..." line per measurement for scripts.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/kvs_clock.h"
#include "engine/kvs_engine.h"
#include "grammar/kvs_gram_req.h"
#include "grammar/kvs_grammar.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"

typedef struct {
    const char  *name;
    unsigned     kind;
    const char  *schema;
} bg_case_t;

static const bg_case_t  bg_cases[] = {
    { "none", KVS_GRAM_REQ_NONE, NULL },
    { "records", KVS_GRAM_REQ_SCHEMA,
      "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\","
      "\"minItems\":1000,\"items\":{\"type\":\"object\",\"properties\":{"
      "\"name\":{\"type\":\"string\",\"maxLength\":12},\"qty\":{\"type\":"
      "\"integer\",\"minimum\":0,\"maximum\":1000},\"ok\":{\"type\":"
      "\"boolean\"},\"tag\":{\"enum\":[\"new\",\"used\",\"refurbished\"]}},"
      "\"required\":[\"name\",\"qty\",\"ok\",\"tag\"],"
      "\"additionalProperties\":false}}},\"required\":[\"items\"],"
      "\"additionalProperties\":false}" },
    { "strings", KVS_GRAM_REQ_SCHEMA,
      "{\"type\":\"object\",\"properties\":{\"notes\":{\"type\":"
      "\"array\",\"minItems\":1000,\"items\":{\"type\":\"string\"}}},"
      "\"required\":[\"notes\"],\"additionalProperties\":false}" },
};

#define BG_CASES  (sizeof(bg_cases) / sizeof(bg_cases[0]))


typedef struct {
    uint32_t  seqs, prompt, gen, threads, reps;
} bg_opts_t;


/* One run: decode tokens/s of decode-only steps, and how many ended by
 * length (all of them, for the comparison to hold). */
static double
bg_cpu(void)
{
    struct rusage  ru;

    getrusage(RUSAGE_SELF, &ru);

    return (double) ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6
           + (double) ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}


static int
bg_run(const kvs_model_t *m, const kvs_vocab_t *v, const bg_opts_t *o,
    const bg_case_t *c, double *tps, double *cpu, uint32_t *n_len)
{
    int                 fin;
    uint32_t            i;
    uint64_t            rng;
    int32_t            *prompt;
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_engine_req_t    req;
    kvs_engine_seq_t  **hs;
    kvs_engine_out_t    out;
    kvs_engine_conf_t   conf;
    kvs_engine_stats_t  st;

    memset(&conf, 0, sizeof(conf));
    conf.model = m;
    conf.vocab = v;
    conf.threads = o->threads;
    conf.n_blocks = o->seqs * ((o->prompt + o->gen) / 16 + 2);
    conf.max_running = o->seqs;
    conf.no_prefix_cache = 1;

    if (kvs_engine_new(&e, &conf, &err) != KVS_OK) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return 1;
    }

    prompt = malloc((size_t) o->seqs * o->prompt * sizeof(int32_t));
    hs = calloc(o->seqs, sizeof(kvs_engine_seq_t *));
    if (prompt == NULL || hs == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }

    rng = 0x9e3779b97f4a7c15ull;
    *cpu = bg_cpu();

    for (i = 0; i < o->seqs * o->prompt; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        /* below the special tokens at the end of a generated vocabulary */
        prompt[i] = (int32_t) (rng % (v->n_tokens > 300 ? v->n_tokens - 300
                                                        : 200));
    }

    for (i = 0; i < o->seqs; i++) {
        memset(&req, 0, sizeof(req));
        req.prompt = prompt + (size_t) i * o->prompt;
        req.n_prompt = o->prompt;
        req.max_tokens = o->gen;
        req.ignore_eos = 1;
        req.sample.temperature = 1.0f;
        req.sample.top_p = 1.0f;
        req.sample.seed = 1000 + i;
        req.gram_kind = c->kind;
        req.schema = c->schema;
        req.schema_len = c->schema != NULL ? strlen(c->schema) : 0;

        if (kvs_engine_submit(e, &req, &hs[i], &err) != KVS_OK) {
            fprintf(stderr, "submit: %s\n", err.msg);
            return 1;
        }
    }

    while (kvs_engine_step(e)) {
        /* to the end */
    }

    *cpu = bg_cpu() - *cpu;
    *n_len = 0;

    for (i = 0; i < o->seqs; i++) {
        memset(&out, 0, sizeof(out));
        fin = kvs_engine_read(e, hs[i], &out);
        if (fin == KVS_FINISH_ERROR) {
            fprintf(stderr, "%s: seq %u: %s\n", c->name, i, out.error);
        }
        *n_len += fin == KVS_FINISH_LENGTH;
        kvs_engine_out_free(&out);
        kvs_engine_close(e, hs[i]);
    }

    kvs_engine_stats(e, &st);
    *tps = st.decode_only_ns > 0
           ? (double) st.decode_only_tokens * 1e9 / (double) st.decode_only_ns
           : 0.0;

    kvs_engine_free(e);
    free(prompt);
    free(hs);

    return 0;
}


static int
bg_decode(int argc, char **argv)
{
    int           i;
    double        tps, cpu, best[BG_CASES], bcpu[BG_CASES];
    uint32_t      c, r, n_len;
    kvs_err_t     err;
    bg_opts_t     o;
    kvs_model_t  *m;
    kvs_vocab_t  *v;
    const char   *only;

    if (argc < 1) {
        fprintf(stderr, "bench_gram decode MODEL.gguf [options]\n");
        return 2;
    }

    o.seqs = 32;
    o.prompt = 32;
    o.gen = 128;
    o.threads = 0;
    o.reps = 3;

    only = NULL;

    for (i = 1; i + 1 < argc; i += 2) {
        uint32_t  x = (uint32_t) strtoul(argv[i + 1], NULL, 10);

        if (strcmp(argv[i], "--case") == 0) {
            only = argv[i + 1];
        } else if (strcmp(argv[i], "--seqs") == 0) {
            o.seqs = x;
        } else if (strcmp(argv[i], "--prompt") == 0) {
            o.prompt = x;
        } else if (strcmp(argv[i], "--gen") == 0) {
            o.gen = x;
        } else if (strcmp(argv[i], "--threads") == 0) {
            o.threads = x;
        } else if (strcmp(argv[i], "--reps") == 0) {
            o.reps = x;
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }

    if (kvs_model_open(&m, argv[0], &err) != KVS_OK
        || kvs_vocab_load(&v, m->gguf, &err) != KVS_OK)
    {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        return 1;
    }

    for (c = 0; c < BG_CASES; c++) {
        best[c] = 0.0;
        bcpu[c] = 1e30;
    }

    /* the cases interleaved within each rep: drift in the machine's load
     * hits them alike */
    for (r = 0; r < o.reps; r++) {
        for (c = 0; c < BG_CASES; c++) {
            if (only != NULL && strcmp(only, bg_cases[c].name) != 0) {
                continue;
            }
            if (bg_run(m, v, &o, &bg_cases[c], &tps, &cpu, &n_len) != 0) {
                return 1;
            }
            if (n_len != o.seqs) {
                fprintf(stderr, "%s: %u of %u sequences ran to max_tokens: "
                        "the batch shrank\n", bg_cases[c].name, n_len,
                        o.seqs);
            }
            best[c] = tps > best[c] ? tps : best[c];
            bcpu[c] = cpu < bcpu[c] ? cpu : bcpu[c];
        }
    }

    printf("%s: vocabulary %u, %u seqs x (%u prompt + %u generated), "
           "best of %u\n", argv[0], (unsigned) v->n_tokens, o.seqs,
           o.prompt, o.gen, o.reps);

    for (c = 0; c < BG_CASES; c++) {
        if (only != NULL && strcmp(only, bg_cases[c].name) != 0) {
            continue;
        }
        /* the ratios need the unconstrained case (not run with --case) */
        printf("bench_gram case=%s decode_tps=%.1f ratio=%.3f cpu_s=%.2f "
               "cpu_ratio=%.3f\n", bg_cases[c].name, best[c],
               best[0] > 0 ? best[c] / best[0] : 0.0, bcpu[c],
               best[0] > 0 ? bcpu[0] / bcpu[c] : 0.0);
    }

    kvs_vocab_free(v);
    kvs_model_close(m);

    return 0;
}


static int
bg_trie(int argc, char **argv)
{
    int                i;
    size_t             mem;
    uint64_t           t0, dt;
    kvs_err_t          err;
    kvs_vocab_t       *v;
    kvs_gram_vocab_t  *gv;

    for (i = 0; i < argc; i++) {
        if (kvs_vocab_open(&v, argv[i], &err) != KVS_OK) {
            fprintf(stderr, "%s: %s\n", argv[i], err.msg);
            return 1;
        }

        t0 = kvs_now_ns();
        if (kvs_gram_vocab_from_vocab(&gv, v, &err) != KVS_OK) {
            fprintf(stderr, "%s: %s\n", argv[i], err.msg);
            return 1;
        }
        dt = kvs_now_ns() - t0;

        /* every array the trie holds, as kvs_gram_mask.c sizes them */
        mem = (size_t) gv->n_tokens * (1 + 4 + 4)
              + ((size_t) gv->n_text + gv->n_end) * 4
              + (size_t) (gv->n_tokens > 0
                          ? gv->off[gv->n_tokens - 1]
                            + gv->len[gv->n_tokens - 1] : 0)
              + ((size_t) gv->n_nodes + 1) * (1 + 2 + 4 + 4 + 4 + 4)
              + ((size_t) gv->n_nodes + 1) * sizeof(kvs_gram_tnode_t);

        printf("bench_gram trie=%s tokens=%u nodes=%u build_ms=%.1f "
               "mem_mib=%.1f\n", argv[i], gv->n_tokens, gv->n_nodes,
               (double) dt / 1e6, (double) mem / (1 << 20));

        kvs_gram_vocab_free(gv);
        kvs_vocab_free(v);
    }

    return 0;
}


static int
bg_u64_cmp(const void *a, const void *b)
{
    uint64_t  x = *(const uint64_t *) a, y = *(const uint64_t *) b;

    return x < y ? -1 : x > y;
}


/* The walks of one vocabulary: mode 0 as built, 1 no skipping, 2 no
 * memo. */
static int
bg_walk_one(const kvs_gram_vocab_t *gv, const char *path, uint32_t reps)
{
    int                  mode, rc;
    uint32_t             r, *bits, n;
    uint64_t            *t, t0, st[4], sk[4], st0[4], sk0[4];
    kvs_err_t            err;
    kvs_gram_t           g;
    kvs_gram_matcher_t   m;
    kvs_gram_masker_t    mk;
    static const char   *names[] = { "skip", "noskip", "nomemo" };
    static const char    text[] = "{\"a\": \"x";

    if (kvs_gram_json_object(&g, NULL, &err) != KVS_OK
        || kvs_gram_matcher_init(&m, &g, NULL, &err) != KVS_OK
        || kvs_gram_matcher_feed(&m, text, sizeof(text) - 1, &err) != KVS_OK)
    {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return 1;
    }

    bits = malloc(((gv->n_tokens + 31) / 32) * sizeof(uint32_t));
    t = malloc(reps * sizeof(uint64_t));
    if (bits == NULL || t == NULL) {
        return 1;
    }

    for (mode = 0; mode < 3; mode++) {
        if (kvs_gram_masker_init(&mk, gv, &m, 0, &err) != KVS_OK
            || (mode == 2 && kvs_gram_masker_memo(&mk, 0, &err) != KVS_OK))
        {
            fprintf(stderr, "%s: %s\n", path, err.msg);
            return 1;
        }
        kvs_gram_memo_skip(mk.memo, mode == 0);

        n = 0;
        for (r = 0; r < reps; r++) {
            kvs_gram_memo_stats(mk.memo, st0);
            kvs_gram_memo_skips(mk.memo, sk0);
            t0 = kvs_now_ns();
            rc = kvs_gram_mask(&mk, bits, &err);
            t[r] = kvs_now_ns() - t0;
            if (rc != KVS_OK) {
                fprintf(stderr, "%s: %s\n", path, err.msg);
                return 1;
            }
        }
        for (r = 0; r < (gv->n_tokens + 31) / 32; r++) {
            n += (uint32_t) __builtin_popcount(bits[r]);
        }
        kvs_gram_memo_stats(mk.memo, st);
        kvs_gram_memo_skips(mk.memo, sk);
        qsort(t, reps, sizeof(uint64_t), bg_u64_cmp);

        printf("bench_gram walk=%s mode=%s tokens=%u allowed=%u "
               "p50_ms=%.3f min_ms=%.3f hits=%llu steps=%llu "
               "skipped=%llu skipped_nodes=%llu\n", path, names[mode],
               gv->n_tokens, n, (double) t[reps / 2] / 1e6,
               (double) t[0] / 1e6,
               (unsigned long long) (st[0] - st0[0]),
               (unsigned long long) (st[1] - st0[1]),
               (unsigned long long) (sk[0] - sk0[0]),
               (unsigned long long) (sk[1] - sk0[1]));

        kvs_gram_masker_free(&mk);
    }

    free(bits);
    free(t);
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);

    return 0;
}


static int
bg_walk(int argc, char **argv)
{
    int                i;
    uint32_t           reps;
    kvs_err_t          err;
    kvs_vocab_t       *v;
    kvs_gram_vocab_t  *gv;

    reps = 30;

    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (uint32_t) strtoul(argv[++i], NULL, 10);
            reps = reps > 0 ? reps : 1;
            continue;
        }

        if (kvs_vocab_open(&v, argv[i], &err) != KVS_OK
            || kvs_gram_vocab_from_vocab(&gv, v, &err) != KVS_OK)
        {
            fprintf(stderr, "%s: %s\n", argv[i], err.msg);
            return 1;
        }

        if (bg_walk_one(gv, argv[i], reps) != 0) {
            return 1;
        }

        kvs_gram_vocab_free(gv);
        kvs_vocab_free(v);
    }

    return 0;
}


int
main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "decode") == 0) {
        return bg_decode(argc - 2, argv + 2);
    }

    if (argc >= 3 && strcmp(argv[1], "trie") == 0) {
        return bg_trie(argc - 2, argv + 2);
    }

    if (argc >= 3 && strcmp(argv[1], "walk") == 0) {
        return bg_walk(argc - 2, argv + 2);
    }

    fprintf(stderr, "usage: bench_gram decode MODEL.gguf [--seqs N] "
            "[--prompt P] [--gen G] [--threads T] [--reps R]\n"
            "       bench_gram trie VOCAB.gguf...\n"
            "       bench_gram walk VOCAB.gguf... [--reps R]\n");

    return 2;
}
