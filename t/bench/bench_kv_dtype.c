/*
 * bench_kv_dtype: the KV cache's dtypes (kvserve_kv_dtype) against the
 * f32 cache, in one run, on the CPU backend, for each model named:
 *
 *   bytes    real bytes per token (kvs_kv_layout, scales included) and
 *            the ratio to f32 and f16;
 *   agree    greedy decode of 64 tokens after the prompt, free-running
 *            in each dtype: tokens equal to f32's at the same position,
 *            and the first position where they differ (64: none);
 *   logit    mean |logit - f32's logit| over the 64 steps x vocabulary,
 *            each dtype teacher-forced on f32's tokens (so every step
 *            compares the same context), and the largest;
 *   speed    decode tokens/s of those 64 steps (one token per forward,
 *            the prompt already cached), best of `reps` runs, and the
 *            ratio to f32's.
 *
 * The prompt: a text tokenized with the model's vocabulary (BOS first),
 * repeated up to `prompt` tokens (default: the model's context less the
 * 64 generated, at most 448), so attention reads a long cache.
 *
 * Usage: bench_kv_dtype [-t threads] [-p prompt] [-r reps] model.gguf...
 * One table row per (model, dtype), tab-separated, after a header.
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/kvs_cpu.h"
#include "kv/kvs_kv_layout.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_tok.h"
#include "tokenizer/kvs_vocab.h"

#define N_GEN   64
#define BT      16

static const char  text[] =
    "Once upon a time, there was a little girl named Lily. She liked to "
    "play in the park with her friends. One day, she saw a big red ball "
    "under a tree and ran to get it. ";

static const uint32_t  dtypes[] = {
    KVS_KV_F32, KVS_KV_F16, KVS_KV_BF16, KVS_KV_INT8, KVS_KV_FP8
};

#define N_DT  (sizeof(dtypes) / sizeof(dtypes[0]))


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


static void
die(const char *what, const kvs_err_t *err)
{
    fprintf(stderr, "bench_kv_dtype: %s: %s\n", what, err->msg);
    exit(1);
}


/*
 * One run in dtype dt: the prompt ids[0..np) in one batch, then N_GEN
 * decode steps; with force, step i feeds ids[np + i] (f32's), else its
 * own greedy pick, which it writes there.  Each step's logits into
 * lg[N_GEN][n_vocab]; returns the decode time in seconds.
 */
static double
run(const kvs_cpu_model_t *cm, unsigned threads, uint32_t dt, int32_t *ids,
    uint32_t np, int force, float *lg)
{
    float            *plg;
    double            t0, t;
    uint32_t          i, j, nb, nv, best;
    kvs_err_t         err;
    kvs_batch_t       b;
    kvs_cpu_kv_t     *kv;
    kvs_kv_pool_t    *pool;
    kvs_kv_table_t    table;
    kvs_batch_tok_t  *toks;

    nv = cm->hp.n_vocab;
    nb = (np + N_GEN) / BT + 1;
    toks = calloc(np, sizeof(kvs_batch_tok_t));
    plg = malloc((size_t) nv * sizeof(float));

    if (toks == NULL || plg == NULL) {
        fprintf(stderr, "bench_kv_dtype: out of memory\n");
        exit(1);
    }

    memset(&table, 0, sizeof(table));

    if (kvs_kv_pool_new(&pool, nb, BT, &err) != KVS_OK
        || kvs_cpu_kv_new_dtype(&kv, cm, nb, BT, dt, &err) != KVS_OK
        || kvs_cpu_kv_set_threads(kv, threads, &err) != KVS_OK
        || kvs_kv_table_reserve(&table, pool, np + N_GEN, &err) != KVS_OK)
    {
        die("setup", &err);
    }

    for (i = 0; i < np; i++) {
        toks[i].token = ids[i];
        toks[i].pos = i;
        toks[i].table = &table;
        toks[i].want_logits = i + 1 == np;
    }

    b.toks = toks;
    b.n = np;

    if (kvs_cpu_forward(cm, kv, &b, plg, &err) != KVS_OK) {
        die("prefill", &err);
    }

    t0 = now();

    for (i = 0; i < N_GEN; i++) {
        const float  *prev;

        prev = i == 0 ? plg : lg + (size_t) (i - 1) * nv;

        if (!force) {
            best = 0;

            for (j = 1; j < nv; j++) {
                best = prev[j] > prev[best] ? j : best;
            }

            ids[np + i] = (int32_t) best;
        }

        toks[0].token = ids[np + i];
        toks[0].pos = np + i;
        toks[0].want_logits = 1;
        b.n = 1;

        if (kvs_cpu_forward(cm, kv, &b, lg + (size_t) i * nv, &err)
            != KVS_OK)
        {
            die("decode", &err);
        }
    }

    t = now() - t0;

    (void) kvs_kv_table_release(&table, pool, &err);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
    free(toks);
    free(plg);

    return t;
}


static void
bench_model(const char *path, unsigned threads, uint32_t want_np,
    unsigned reps)
{
    float            *ref, *lg;
    double            t, best[N_DT], mean, mx, d;
    int32_t          *ids, *own;
    size_t            i, nl;
    uint32_t          np, k, r, agree, first, bpt[N_DT];
    const char       *name;
    kvs_err_t         err;
    kvs_ids_t         tok;
    kvs_model_t      *m;
    kvs_vocab_t      *v;
    kvs_tok_ctx_t     ctx;
    kvs_cpu_model_t  *cm;

    if (kvs_model_open(&m, path, &err) != KVS_OK
        || kvs_vocab_load(&v, m->gguf, &err) != KVS_OK
        || kvs_cpu_model_new(&cm, m, &err) != KVS_OK)
    {
        die(path, &err);
    }

    name = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    np = want_np;

    if (np == 0) {
        np = m->hp.n_ctx_train > N_GEN + 1 ? m->hp.n_ctx_train - N_GEN : 1;
        np = np > 448 ? 448 : np;
    }

    memset(&tok, 0, sizeof(tok));
    memset(&ctx, 0, sizeof(ctx));

    while (tok.n < np) {
        if (kvs_tok_encode(v, &ctx, text, sizeof(text) - 1,
                           tok.n == 0 ? KVS_TOK_ADD_BOS : 0, &tok, &err)
            != KVS_OK)
        {
            die("tokenize", &err);
        }
    }

    kvs_tok_ctx_free(&ctx);

    ids = malloc(2 * (size_t) (np + N_GEN) * sizeof(int32_t));
    nl = (size_t) N_GEN * m->hp.n_vocab;
    ref = malloc(2 * nl * sizeof(float));

    if (ids == NULL || ref == NULL) {
        fprintf(stderr, "bench_kv_dtype: out of memory\n");
        exit(1);
    }

    own = ids + np + N_GEN;
    lg = ref + nl;
    memcpy(ids, tok.ids, np * sizeof(int32_t));
    memcpy(own, tok.ids, np * sizeof(int32_t));
    kvs_ids_free(&tok);

    /* f32's greedy tokens and logits: the reference */
    run(cm, threads, KVS_KV_F32, ids, np, 0, ref);

    /* speed: the dtypes interleaved, rep by rep, so load hits all alike */
    for (k = 0; k < N_DT; k++) {
        best[k] = 0.0;
        bpt[k] = (uint32_t) kvs_kv_bytes_per_token(dtypes[k],
                     m->hp.n_layer, m->hp.n_head_kv, m->hp.head_dim_k,
                     m->hp.head_dim_v, BT);
    }

    for (r = 0; r < reps; r++) {
        for (k = 0; k < N_DT; k++) {
            t = run(cm, threads, dtypes[k], ids, np, 1, lg);
            best[k] = N_GEN / t > best[k] ? N_GEN / t : best[k];
        }
    }

    for (k = 0; k < N_DT; k++) {
        /* logit error, teacher-forced on f32's tokens */
        run(cm, threads, dtypes[k], ids, np, 1, lg);
        mean = 0.0;
        mx = 0.0;

        for (i = 0; i < nl; i++) {
            d = fabs((double) lg[i] - (double) ref[i]);
            mean += d;
            mx = d > mx ? d : mx;
        }

        mean /= (double) nl;

        /* agreement, free-running */
        run(cm, threads, dtypes[k], own, np, 0, lg);
        agree = 0;
        first = N_GEN;

        for (i = 0; i < N_GEN; i++) {
            if (own[np + i] == ids[np + i]) {
                agree++;

            } else if (first == N_GEN) {
                first = (uint32_t) i;
            }
        }

        printf("%s\t%u\t%s\t%" PRIu32 "\t%.3f\t%.3f\t%" PRIu32 "/%d\t%"
               PRIu32 "\t%.2e\t%.2e\t%.1f\t%.2f\n", name, np,
               kvs_kv_dtype_name(dtypes[k]), bpt[k],
               (double) bpt[k] / bpt[0], (double) bpt[k] / bpt[1], agree,
               N_GEN, first, mean, mx, best[k], best[k] / best[0]);
        fflush(stdout);
    }

    free(ids);
    free(ref);
    kvs_cpu_model_free(cm);
    kvs_vocab_free(v);
    kvs_model_close(m);
}


int
main(int argc, char **argv)
{
    int       c;
    unsigned  threads, reps;
    uint32_t  np;

    threads = 1;
    reps = 3;
    np = 0;

    while ((c = getopt(argc, argv, "t:p:r:")) != -1) {
        switch (c) {
        case 't':
            threads = (unsigned) strtoul(optarg, NULL, 10);
            break;
        case 'p':
            np = (uint32_t) strtoul(optarg, NULL, 10);
            break;
        case 'r':
            reps = (unsigned) strtoul(optarg, NULL, 10);
            break;
        default:
            fprintf(stderr, "usage: bench_kv_dtype [-t threads] "
                    "[-p prompt] [-r reps] model.gguf...\n");
            return 2;
        }
    }

    if (optind >= argc || threads == 0 || reps == 0) {
        fprintf(stderr, "usage: bench_kv_dtype [-t threads] [-p prompt] "
                "[-r reps] model.gguf...\n");
        return 2;
    }

    printf("model\tprompt\tdtype\tbytes/token\tvs f32\tvs f16\tagree\t"
           "first diff\tmean |dlogit|\tmax |dlogit|\tdecode tok/s\t"
           "vs f32\n");

    for (c = optind; c < argc; c++) {
        bench_model(argv[c], threads, np, reps);
    }

    return 0;
}
