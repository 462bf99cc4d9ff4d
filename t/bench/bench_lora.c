/*
 * bench_lora: decode throughput of the CPU backend with many LoRA
 * adapters in one batch (kvs_cpu_forward_lora) against the merged
 * single-adapter baseline (one adapter merged into the weights, the plain
 * forward), in the same run, on a generated model (F32, preset "small"
 * unless --preset says otherwise).
 *
 * Each configuration runs B sequences (--batch, default 32) of a P-token
 * prompt (--prompt, 16), prefilled together, then D decode steps
 * (--steps, 32) of all B together; only the decode steps are timed (best
 * of R repeats, --repeat, 3).  Configurations: "merged" (the baseline),
 * then 1, 8 and 64 distinct adapters (--adapters, a list) of rank
 * --rank (16) over all seven targets, sequence i using adapter i mod A.
 * --preset: small (default), or any bench_lora.h knows (8b-layer).
 *
 * Output: a markdown table of decode tokens per wall second and per CPU
 * second of the process (steadier on a shared machine) with their ratios
 * to merged, then one "lora_run NAME WALL CPU" line per configuration.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/kvs_cpu.h"
#include "gen/kvs_gen.h"
#include "gen/kvs_gen_lora.h"
#include "kv/kvs_kv_pool.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_lora.h"
#include "bench_lora.h"

#define MAX_AD  64

static double  set_ms;                /* the last run's kvs_cpu_kv_set_lora
                                         per adapter, ms */


static double
now_s(clockid_t clk)
{
    struct timespec  ts;

    clock_gettime(clk, &ts);

    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}


static void
die(const char *what, const kvs_err_t *err)
{
    fprintf(stderr, "bench_lora: %s: %s\n", what, err->msg);
    exit(1);
}


/* Decode tokens per wall second of B sequences under n_ad adapters (0:
 * none), and per CPU second of the process into *cpu_tps. */
static double
run(const kvs_cpu_model_t *cm, kvs_lora_t **ad, uint32_t n_ad, uint32_t B,
    uint32_t P, uint32_t D, unsigned threads, double *cpu_tps)
{
    double            t0, c0, t;
    float            *logits;
    uint32_t          i, s, bt, blocks, *slots;
    kvs_err_t         err;
    kvs_batch_t       b;
    kvs_cpu_kv_t     *kv;
    kvs_kv_pool_t    *pool;
    kvs_kv_table_t   *tabs;
    kvs_batch_tok_t  *toks;

    bt = 16;
    blocks = B * ((P + D + bt - 1) / bt);

    if (kvs_kv_pool_new(&pool, blocks, bt, &err) != KVS_OK
        || kvs_cpu_kv_new(&kv, cm, blocks, bt, &err) != KVS_OK
        || kvs_cpu_kv_set_threads(kv, threads, &err) != KVS_OK)
    {
        die("kv", &err);
    }

    /* putting an adapter into a slot packs it (on the engine's step
     * loop when paging): its mean time */
    t0 = now_s(CLOCK_MONOTONIC);

    for (i = 0; i < n_ad; i++) {
        if (kvs_cpu_kv_set_lora(kv, cm, i + 1, ad[i], &err) != KVS_OK) {
            die("slot", &err);
        }
    }

    if (n_ad != 0) {
        set_ms = (now_s(CLOCK_MONOTONIC) - t0) * 1e3 / n_ad;
    }

    tabs = calloc(B, sizeof(kvs_kv_table_t));
    toks = calloc((size_t) B * P, sizeof(kvs_batch_tok_t));
    slots = calloc((size_t) B * P, sizeof(uint32_t));
    logits = malloc((size_t) B * cm->hp.n_vocab * sizeof(float));
    if (tabs == NULL || toks == NULL || slots == NULL || logits == NULL) {
        fprintf(stderr, "bench_lora: out of memory\n");
        exit(1);
    }

    for (s = 0; s < B; s++) {
        if (kvs_kv_table_reserve(&tabs[s], pool, P + D, &err) != KVS_OK) {
            die("reserve", &err);
        }
    }

    /* the prompts, all at once */
    for (s = 0; s < B; s++) {
        for (i = 0; i < P; i++) {
            toks[s * P + i].token = (int32_t) ((s * 31 + i * 7 + 1)
                                               % cm->hp.n_vocab);
            toks[s * P + i].pos = i;
            toks[s * P + i].table = &tabs[s];
            toks[s * P + i].want_logits = i + 1 == P;
            slots[s * P + i] = n_ad ? s % n_ad + 1 : 0;
        }
    }

    b.toks = toks;
    b.n = B * P;

    if (kvs_cpu_forward_lora(cm, kv, &b, n_ad ? slots : NULL, logits, &err)
        != KVS_OK)
    {
        die("prefill", &err);
    }

    t0 = now_s(CLOCK_MONOTONIC);
    c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);

    for (i = 0; i < D; i++) {
        for (s = 0; s < B; s++) {
            toks[s].token = (int32_t) ((s + i * 13) % cm->hp.n_vocab);
            toks[s].pos = P + i;
            toks[s].table = &tabs[s];
            toks[s].want_logits = 1;
            slots[s] = n_ad ? s % n_ad + 1 : 0;
        }

        b.n = B;

        if (kvs_cpu_forward_lora(cm, kv, &b, n_ad ? slots : NULL, logits,
                                 &err)
            != KVS_OK)
        {
            die("decode", &err);
        }
    }

    t = now_s(CLOCK_MONOTONIC) - t0;
    *cpu_tps = (double) B * D / (now_s(CLOCK_PROCESS_CPUTIME_ID) - c0);

    for (s = 0; s < B; s++) {
        (void) kvs_kv_table_release(&tabs[s], pool, &err);
    }

    free(tabs);
    free(toks);
    free(slots);
    free(logits);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);

    return (double) B * D / t;
}


int
main(int argc, char **argv)
{
    int                  i;
    char                 bp[512], ap[512], mp[512];
    double               base, tps, best, cbase, ctps, cbest;
    uint32_t             B, P, D, R, rank, r, k, n_ad;
    unsigned             threads;
    const char          *tmp, *preset;
    kvs_err_t            err;
    kvs_lora_t          *ad[MAX_AD];
    kvs_model_t         *m, *mm;
    kvs_cpu_model_t     *cm, *cmm;
    kvs_gen_lora_spec_t  ls;
    uint32_t             counts[8], n_counts;
    char                *e;

    B = 32;
    P = 16;
    D = 32;
    R = 3;
    rank = 16;
    threads = 2;
    preset = "small";
    counts[0] = 1;
    counts[1] = 8;
    counts[2] = 64;
    n_counts = 3;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--batch") == 0) {
            B = (uint32_t) atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--prompt") == 0) {
            P = (uint32_t) atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--steps") == 0) {
            D = (uint32_t) atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--repeat") == 0) {
            R = (uint32_t) atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--rank") == 0) {
            rank = (uint32_t) atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = (unsigned) atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--preset") == 0) {
            preset = argv[i + 1];
        } else if (strcmp(argv[i], "--adapters") == 0) {
            /* a comma-separated list of adapter counts, 1..64 */
            e = argv[i + 1];
            for (n_counts = 0; n_counts < 8 && *e != '\0'; n_counts++) {
                counts[n_counts] = (uint32_t) strtoul(e, &e, 10);
                if (counts[n_counts] == 0 || counts[n_counts] > MAX_AD
                    || (*e != '\0' && *e++ != ','))
                {
                    fprintf(stderr, "bench_lora: bad --adapters \"%s\"\n",
                            argv[i + 1]);
                    return 2;
                }
            }
        } else {
            fprintf(stderr, "bench_lora: unknown option %s\n", argv[i]);
            return 2;
        }
    }

    if (B == 0 || P == 0 || D == 0 || R == 0 || rank == 0 || threads == 0)
    {
        fprintf(stderr, "bench_lora: counts must be positive\n");
        return 2;
    }

    tmp = bench_lora_tmp();
    snprintf(mp, sizeof(mp), "%s/bench-lora-merged.%d.gguf", tmp,
             (int) getpid());

    if (bench_lora_base(preset, "bench-lora", bp, sizeof(bp), &err)
        != KVS_OK
        || kvs_model_open(&m, bp, &err) != KVS_OK
        || kvs_cpu_model_new(&cm, m, &err) != KVS_OK)
    {
        die(bp, &err);
    }

    memset(&ls, 0, sizeof(ls));
    ls.rank = rank;
    ls.targets = 0x7f;
    ls.alpha = 2.0f * (float) rank;
    ls.strength = 0.5f;

    for (k = 0; k < MAX_AD; k++) {
        ls.seed = 1000 + k;
        snprintf(ap, sizeof(ap), "%s/bench-lora-a%u.%d.gguf", tmp, k,
                 (int) getpid());
        if (kvs_gen_lora_write(bp, &ls, ap, &err) != KVS_OK
            || kvs_lora_open(&ad[k], ap, m, &err) != KVS_OK)
        {
            die(ap, &err);
        }
        if (k == 0 && kvs_gen_lora_merge(bp, ap, mp, &err) != KVS_OK) {
            die(mp, &err);
        }
        unlink(ap);
    }

    if (kvs_model_open(&mm, mp, &err) != KVS_OK
        || kvs_cpu_model_new(&cmm, mm, &err) != KVS_OK)
    {
        die(mp, &err);
    }

    printf("preset %s (F32), batch %u, prompt %u, %u decode steps, rank %u, "
           "%u threads, best of %u; an adapter is %.2f%% of the base's "
           "parameters\n\n", preset, B, P, D, rank, threads, R,
           100.0 * (double) ad[0]->n_params / (double) bench_lora_params(m));
    printf("| configuration | decode tokens/s (wall) | vs merged | "
           "tokens per CPU second | vs merged |\n");
    printf("| --- | ---: | ---: | ---: | ---: |\n");

    /* the baseline first, then each count; the best of R runs of each */
    base = 0.0;
    cbase = 0.0;
    for (r = 0; r < R; r++) {
        tps = run(cmm, NULL, 0, B, P, D, threads, &ctps);
        base = tps > base ? tps : base;
        cbase = ctps > cbase ? ctps : cbase;
    }

    printf("| merged (1 adapter in the weights) | %.0f | 1.00 | %.0f | "
           "1.00 |\n", base, cbase);
    printf("lora_run merged %.1f %.1f\n", base, cbase);

    for (k = 0; k < n_counts; k++) {
        n_ad = counts[k];
        best = 0.0;
        cbest = 0.0;

        for (r = 0; r < R; r++) {
            tps = run(cm, ad, n_ad, B, P, D, threads, &ctps);
            best = tps > best ? tps : best;
            cbest = ctps > cbest ? ctps : cbest;
        }

        printf("| %u adapters | %.0f | %.2f | %.0f | %.2f |\n", n_ad, best,
               best / base, cbest, cbest / cbase);
        printf("lora_run adapters_%u %.1f %.1f (slot packing %.2f ms per "
               "adapter)\n", n_ad, best, cbest, set_ms);
    }

    for (k = 0; k < MAX_AD; k++) {
        kvs_lora_close(ad[k]);
    }

    kvs_cpu_model_free(cmm);
    kvs_model_close(mm);
    kvs_cpu_model_free(cm);
    kvs_model_close(m);
    unlink(bp);
    unlink(mp);

    return 0;
}
