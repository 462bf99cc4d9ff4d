/*
 * bench_paging: paging's account (issue 24, point 6; docs/capacity.md).
 *
 * 1. Memory.  N requests drawn from a stated length distribution
 *    (log-normal prompt and output lengths, parameters below and in the
 *    output; no published distribution was at hand), clipped to a
 *    context of --ctx tokens.  For each, the KV slots three allocators
 *    hold, at the end of the request and averaged over its decode steps
 *    (its length grows from prompt + 1 to prompt + output):
 *      contiguous max-length  --ctx slots from admission to the end;
 *      contiguous reserved    prompt + --max-tokens slots (the request's
 *                             own cap, what an allocator that knows it
 *                             reserves);
 *      paged, block B         ceil(length / B) x B slots, the blocks the
 *                             project's pool gives a table of that length
 *                             (kvs_kv_pool + kvs_kv_table_reserve at the
 *                             end; the per-step figures use the same
 *                             ceiling, checked equal to the pool's).
 *    Waste = (held - used) / held; used = tokens actually in the cache.
 *
 * 2. Attention time on the CPU.  One generated model (--layers, --embd,
 *    --heads: all K/V heads, no GQA, so attention weighs) and S sequences
 *    of L tokens each, decoded one step at a time (S tokens at position
 *    L - 1, no logits) by kvs_cpu_forward over the same K/V storage laid
 *    out three ways, in the same run, interleaved round by round:
 *      contiguous   each sequence's blocks consecutive ids (its K/V one
 *                   run of memory per layer);
 *      paged        the same blocks shuffled across all sequences (a
 *                   pool after churn: every block elsewhere);
 *      short        the same batch at position 0 (context 1): the step's
 *                   cost without attention over the context, subtracted
 *                   to give attention's share.
 *    for block sizes 8, 16, 32 (a pool each).  The cache is zeroed, not
 *    prefilled: attention reads every position whatever its values, and
 *    a prefill of S x L tokens would take minutes on two cores.
 *    Reported: the median step time of each layout, attention time
 *    (step - short) and paged / contiguous, and that ratio again from
 *    each layout's fastest round (the least disturbed by other load).
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/kvs_cpu.h"
#include "gen/kvs_gen.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"
#include "model/kvs_model.h"

#define BP_N_BLOCKS   3
#define BP_ROUNDS_MAX 1000

static const uint32_t  bp_blocks[BP_N_BLOCKS] = { 8, 16, 32 };

typedef struct {
    uint32_t  n_req;
    uint32_t  ctx;
    uint32_t  max_tokens;
    double    p_mu, p_sigma;          /* log-normal prompt lengths */
    double    o_mu, o_sigma;          /* log-normal output lengths */
    uint32_t  seqs, len, rounds;
    uint32_t  layers, embd, heads;
    unsigned  threads;
    uint64_t  seed;
    int       no_attn;
} bp_opts_t;


static uint64_t  bp_rng;


static double
bp_uniform(void)
{
    bp_rng ^= bp_rng << 13;
    bp_rng ^= bp_rng >> 7;
    bp_rng ^= bp_rng << 17;

    return ((double) (bp_rng >> 11) + 0.5) / 9007199254740992.0;
}


/* Box-Muller */
static double
bp_lognormal(double mu, double sigma)
{
    double  z;

    z = sqrt(-2.0 * log(bp_uniform())) * cos(2.0 * M_PI * bp_uniform());

    return exp(mu + sigma * z);
}


static double
bp_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


static uint64_t
bp_ceil(uint64_t n, uint64_t b)
{
    return (n + b - 1) / b * b;
}


static int
bp_memory(const bp_opts_t *o)
{
    uint32_t          i, b, prompt, out, t, len;
    double            end_used, end_max, end_resv, end_paged[BP_N_BLOCKS];
    double            avg_used, avg_max, avg_resv, avg_paged[BP_N_BLOCKS];
    double            sum_p, sum_o, steps;
    kvs_err_t         err;
    kvs_kv_pool_t    *pool[BP_N_BLOCKS];
    kvs_kv_table_t    tab;

    for (b = 0; b < BP_N_BLOCKS; b++) {
        if (kvs_kv_pool_new(&pool[b], o->ctx / bp_blocks[b] + 1,
                            bp_blocks[b], &err) != KVS_OK)
        {
            fprintf(stderr, "bench_paging: pool: %s\n", err.msg);
            return 1;
        }
        end_paged[b] = 0;
        avg_paged[b] = 0;
    }

    end_used = end_max = end_resv = 0;
    avg_used = avg_max = avg_resv = 0;
    sum_p = sum_o = steps = 0;

    for (i = 0; i < o->n_req; i++) {
        prompt = (uint32_t) llround(bp_lognormal(o->p_mu, o->p_sigma));
        out = (uint32_t) llround(bp_lognormal(o->o_mu, o->o_sigma));
        prompt = prompt < 1 ? 1 : prompt;
        out = out < 1 ? 1 : out;
        out = out > o->max_tokens ? o->max_tokens : out;

        if (prompt + o->max_tokens > o->ctx) {
            prompt = o->ctx - o->max_tokens;   /* the API refuses more */
        }

        len = prompt + out;
        sum_p += prompt;
        sum_o += out;

        end_used += len;
        end_max += o->ctx;
        end_resv += prompt + o->max_tokens;

        for (b = 0; b < BP_N_BLOCKS; b++) {
            memset(&tab, 0, sizeof(tab));

            if (kvs_kv_table_reserve(&tab, pool[b], len, &err) != KVS_OK) {
                fprintf(stderr, "bench_paging: reserve: %s\n", err.msg);
                return 1;
            }

            if ((uint64_t) tab.n_blocks * bp_blocks[b]
                != bp_ceil(len, bp_blocks[b]))
            {
                fprintf(stderr, "bench_paging: the pool gave %u blocks "
                        "for %u tokens of %u\n", tab.n_blocks, len,
                        bp_blocks[b]);
                return 1;
            }

            end_paged[b] += (double) tab.n_blocks * bp_blocks[b];
            (void) kvs_kv_table_release(&tab, pool[b], &err);
        }

        /* over its decode steps: length prompt + t after step t */
        for (t = 1; t <= out; t++) {
            steps++;
            avg_used += prompt + t;
            avg_max += o->ctx;
            avg_resv += prompt + o->max_tokens;

            for (b = 0; b < BP_N_BLOCKS; b++) {
                avg_paged[b] += (double) bp_ceil(prompt + t, bp_blocks[b]);
            }
        }
    }

    printf("## KV memory held, %u requests\n\n"
           "prompt ~ lognormal(mu=%.3f, sigma=%.2f) (median %.0f), output ~"
           " lognormal(mu=%.3f, sigma=%.2f) (median %.0f), output capped at"
           " max_tokens=%u, prompt + max_tokens <= ctx=%u; seed %" PRIu64
           "\nmean prompt %.1f, mean output %.1f, mean final length %.1f\n\n",
           o->n_req, o->p_mu, o->p_sigma, exp(o->p_mu), o->o_mu, o->o_sigma,
           exp(o->o_mu), o->max_tokens, o->ctx, o->seed, sum_p / o->n_req,
           sum_o / o->n_req, end_used / o->n_req);

    printf("| allocator | slots held per request, at the end | waste at "
           "the end | slots held per running request, decode-step average "
           "| waste, decode-step average |\n|---|---:|---:|---:|---:|\n");
    printf("| contiguous, max length (%u) | %.1f | %.1f%% | %.1f | %.1f%% |\n",
           o->ctx, end_max / o->n_req, 100 * (1 - end_used / end_max),
           avg_max / steps, 100 * (1 - avg_used / avg_max));
    printf("| contiguous, prompt + max_tokens | %.1f | %.1f%% | %.1f | "
           "%.1f%% |\n", end_resv / o->n_req, 100 * (1 - end_used / end_resv),
           avg_resv / steps, 100 * (1 - avg_used / avg_resv));

    for (b = 0; b < BP_N_BLOCKS; b++) {
        printf("| paged, block %u | %.1f | %.2f%% | %.1f | %.2f%% |\n",
               bp_blocks[b], end_paged[b] / o->n_req,
               100 * (1 - end_used / end_paged[b]), avg_paged[b] / steps,
               100 * (1 - avg_used / avg_paged[b]));
        kvs_kv_pool_free(pool[b]);
    }

    printf("\nsequences in the same memory, paged block 16 against "
           "contiguous max length: %.2fx (decode-step average)\n\n",
           avg_max / avg_paged[1]);

    return 0;
}


static int
bp_cmp(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return x < y ? -1 : x > y;
}


static double
bp_median(double *v, uint32_t n)
{
    qsort(v, n, sizeof(double), bp_cmp);

    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}


static int
bp_attention(const bp_opts_t *o)
{
    int                 rc;
    char                path[512];
    const char         *tmp;
    uint32_t            b, s, i, j, nb, per, r, l, x;
    uint32_t           *ids_c, *ids_p;
    double              t0, *times[3], med[3], lo[3];
    kvs_err_t           err;
    kvs_model_t        *m;
    kvs_gen_spec_t      spec;
    kvs_cpu_model_t    *cm;
    kvs_cpu_kv_t       *kv;
    kvs_kv_table_t     *tc, *tp;
    kvs_batch_tok_t    *toks;
    kvs_batch_t         batch;

    if (kvs_gen_preset(&spec, "tiny", &err) != KVS_OK) {
        fprintf(stderr, "bench_paging: %s\n", err.msg);
        return 1;
    }

    spec.n_layer = o->layers;
    spec.n_embd = o->embd;
    spec.n_head = o->heads;
    spec.n_head_kv = o->heads;
    spec.n_ff = o->embd * 2;
    spec.n_ctx = o->len + 64;
    spec.seed = o->seed;
    snprintf(spec.name, sizeof(spec.name), "bench-paging");

    tmp = getenv("KVS_TMP");
    snprintf(path, sizeof(path), "%s/bench_paging.%d.gguf",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp", (int) getpid());

    if (kvs_gen_write(&spec, path, &err) != KVS_OK
        || kvs_model_open(&m, path, &err) != KVS_OK)
    {
        fprintf(stderr, "bench_paging: model: %s\n", err.msg);
        unlink(path);
        return 1;
    }

    unlink(path);

    if (kvs_cpu_model_new(&cm, m, &err) != KVS_OK) {
        fprintf(stderr, "bench_paging: %s\n", err.msg);
        kvs_model_close(m);
        return 1;
    }

    printf("## Attention time, CPU: %u sequences x %u tokens, %u layers, "
           "%u heads (all K/V) of %u, F32 cache, %u threads, %u rounds\n\n"
           "| block | contiguous step (ms) | paged step (ms) | context-1 "
           "step (ms) | attention, contiguous (ms) | attention, paged (ms) "
           "| paged / contiguous (attention) | the same from each "
           "layout's fastest round |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|\n",
           o->seqs, o->len, m->hp.n_layer, m->hp.n_head, m->hp.head_dim_k,
           o->threads, o->rounds);

    rc = 0;
    toks = calloc(o->seqs, sizeof(kvs_batch_tok_t));
    tc = calloc(o->seqs, sizeof(kvs_kv_table_t));
    tp = calloc(o->seqs, sizeof(kvs_kv_table_t));

    for (i = 0; i < 3; i++) {
        times[i] = calloc(o->rounds, sizeof(double));
    }

    if (toks == NULL || tc == NULL || tp == NULL || times[0] == NULL
        || times[1] == NULL || times[2] == NULL)
    {
        fprintf(stderr, "bench_paging: out of memory\n");
        rc = 1;
        goto done;
    }

    for (b = 0; b < BP_N_BLOCKS && rc == 0; b++) {
        per = (o->len + bp_blocks[b] - 1) / bp_blocks[b];
        nb = per * o->seqs;
        ids_c = malloc(nb * sizeof(uint32_t));
        ids_p = malloc(nb * sizeof(uint32_t));

        if (ids_c == NULL || ids_p == NULL
            || kvs_cpu_kv_new(&kv, cm, nb, bp_blocks[b], &err) != KVS_OK
            || kvs_cpu_kv_set_threads(kv, o->threads ? o->threads : 1, &err)
               != KVS_OK)
        {
            fprintf(stderr, "bench_paging: kv: %s\n", err.msg);
            free(ids_c);
            free(ids_p);
            rc = 1;
            break;
        }

        /* contiguous: sequence s holds ids s*per .. s*per + per - 1;
         * paged: the same ids shuffled across all sequences */
        for (i = 0; i < nb; i++) {
            ids_c[i] = i;
            ids_p[i] = i;
        }

        for (i = nb - 1; i > 0; i--) {
            j = (uint32_t) (bp_uniform() * (i + 1));
            j = j > i ? i : j;
            x = ids_p[i];
            ids_p[i] = ids_p[j];
            ids_p[j] = x;
        }

        for (s = 0; s < o->seqs; s++) {
            tc[s].blocks = ids_c + (size_t) s * per;
            tp[s].blocks = ids_p + (size_t) s * per;
            tc[s].n_blocks = tp[s].n_blocks = per;
            tc[s].cap = tp[s].cap = per;
            tc[s].n_tokens = tp[s].n_tokens = o->len;
            tc[s].block_tokens = tp[s].block_tokens = bp_blocks[b];
        }

        batch.toks = toks;
        batch.n = o->seqs;

        /* one warm-up of each, then rounds of the three interleaved */
        for (r = 0; r <= o->rounds && rc == 0; r++) {
            for (l = 0; l < 3; l++) {
                for (s = 0; s < o->seqs; s++) {
                    toks[s].token = (int32_t) (s % 200);
                    toks[s].pos = l == 2 ? 0 : o->len - 1;
                    toks[s].table = l == 1 ? &tp[s] : &tc[s];
                    toks[s].want_logits = 0;
                }

                t0 = bp_now();

                if (kvs_cpu_forward(cm, kv, &batch, NULL, &err) != KVS_OK) {
                    fprintf(stderr, "bench_paging: forward: %s\n", err.msg);
                    rc = 1;
                    break;
                }

                if (r > 0) {
                    times[l][r - 1] = bp_now() - t0;
                }
            }
        }

        if (rc == 0) {
            for (l = 0; l < 3; l++) {
                med[l] = bp_median(times[l], o->rounds) * 1e3;
                lo[l] = times[l][0] * 1e3;     /* sorted by the median */
            }

            printf("| %u | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f "
                   "|\n", bp_blocks[b], med[0], med[1], med[2],
                   med[0] - med[2], med[1] - med[2],
                   med[0] - med[2] > 0
                   ? (med[1] - med[2]) / (med[0] - med[2]) : 0,
                   lo[0] - lo[2] > 0
                   ? (lo[1] - lo[2]) / (lo[0] - lo[2]) : 0);
        }

        kvs_cpu_kv_free(kv);
        free(ids_c);
        free(ids_p);
    }

done:

    for (i = 0; i < 3; i++) {
        free(times[i]);
    }

    free(toks);
    free(tc);
    free(tp);
    kvs_cpu_model_free(cm);
    kvs_model_close(m);

    return rc;
}


static int
bp_args(int argc, char **argv, bp_opts_t *o)
{
    int     i;
    char   *end;
    double  d;

    memset(o, 0, sizeof(bp_opts_t));
    o->n_req = 10000;
    o->ctx = 4096;
    o->max_tokens = 1024;
    o->p_mu = log(256);
    o->p_sigma = 1.0;
    o->o_mu = log(128);
    o->o_sigma = 1.0;
    o->seqs = 8;
    o->len = 2048;
    o->rounds = 15;
    o->layers = 2;
    o->embd = 256;
    o->heads = 8;
    o->threads = 1;
    o->seed = 1;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: bench_paging [--requests N (10000)] [--ctx N "
                   "(4096)]\n  [--max-tokens N (1024)] [--prompt-median N "
                   "(256)] [--prompt-sigma S (1.0)]\n  [--output-median N "
                   "(128)] [--output-sigma S (1.0)] [--seqs N (8)]\n  "
                   "[--len N (2048)] [--rounds N (15)] [--layers N (2)] "
                   "[--embd N (256)]\n  [--heads N (8)] [--threads N (1)] "
                   "[--seed N (1)] [--no-attention]\n");
            exit(0);
        }

        if (strcmp(argv[i], "--no-attention") == 0) {
            o->no_attn = 1;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "bench_paging: %s needs a value\n", argv[i]);
            return -1;
        }

        d = strtod(argv[i + 1], &end);
        if (*end != '\0' || end == argv[i + 1] || !(d >= 0) || d > 1e9) {
            fprintf(stderr, "bench_paging: %s \"%s\": not a number\n",
                    argv[i], argv[i + 1]);
            return -1;
        }

        if (strcmp(argv[i], "--requests") == 0) {
            o->n_req = (uint32_t) d;
        } else if (strcmp(argv[i], "--ctx") == 0) {
            o->ctx = (uint32_t) d;
        } else if (strcmp(argv[i], "--max-tokens") == 0) {
            o->max_tokens = (uint32_t) d;
        } else if (strcmp(argv[i], "--prompt-median") == 0) {
            o->p_mu = log(d);
        } else if (strcmp(argv[i], "--prompt-sigma") == 0) {
            o->p_sigma = d;
        } else if (strcmp(argv[i], "--output-median") == 0) {
            o->o_mu = log(d);
        } else if (strcmp(argv[i], "--output-sigma") == 0) {
            o->o_sigma = d;
        } else if (strcmp(argv[i], "--seqs") == 0) {
            o->seqs = (uint32_t) d;
        } else if (strcmp(argv[i], "--len") == 0) {
            o->len = (uint32_t) d;
        } else if (strcmp(argv[i], "--rounds") == 0) {
            o->rounds = (uint32_t) d;
        } else if (strcmp(argv[i], "--layers") == 0) {
            o->layers = (uint32_t) d;
        } else if (strcmp(argv[i], "--embd") == 0) {
            o->embd = (uint32_t) d;
        } else if (strcmp(argv[i], "--heads") == 0) {
            o->heads = (uint32_t) d;
        } else if (strcmp(argv[i], "--threads") == 0) {
            o->threads = (unsigned) d;
        } else if (strcmp(argv[i], "--seed") == 0) {
            o->seed = (uint64_t) d;
        } else {
            fprintf(stderr, "bench_paging: unknown option %s\n", argv[i]);
            return -1;
        }

        i++;
    }

    if (o->n_req == 0 || o->max_tokens == 0 || o->ctx <= o->max_tokens
        || o->seqs == 0 || o->len < 2 || o->rounds == 0
        || o->rounds > BP_ROUNDS_MAX || o->layers == 0 || o->heads == 0
        || o->embd % o->heads != 0 || o->seed == 0)
    {
        fprintf(stderr, "bench_paging: requests, max-tokens, seqs, rounds "
                "(<= %d), layers, heads, seed > 0; ctx > max-tokens; len "
                ">= 2; embd a multiple of heads\n", BP_ROUNDS_MAX);
        return -1;
    }

    return 0;
}


int
main(int argc, char **argv)
{
    bp_opts_t  o;

    if (bp_args(argc, argv, &o) != 0) {
        return 2;
    }

    bp_rng = o.seed * 0x9e3779b97f4a7c15ULL;

    if (bp_memory(&o) != 0) {
        return 1;
    }

    return o.no_attn ? 0 : bp_attention(&o);
}
