/*
 * bench_lora_paging: the cost of paging LoRA adapters (docs/lora.md,
 * "Paging") in the engine, against every adapter resident, in the same
 * run: a generated model (F32, preset "small" unless --preset says
 * otherwise), 64 adapter files of rank 16 on every target, and N
 * requests (default 256) of a 16-token prompt and 16 tokens each,
 * request i under adapter i mod 64, kept 32 in flight (a new one
 * submitted as one ends), the engine on its own thread as nginx's
 * engine process runs it.  Configurations: lora_slots 64 (all
 * resident: the baseline), 16 and 8.
 *
 * Output: a markdown table of generated tokens per wall second with its
 * ratio to the baseline, the adapters loaded and evicted, the requests
 * that waited for theirs and their mean wait, and the longest step (a
 * load on the step loop would show there), then one
 * "lora_paging_run SLOTS TPS LOADS EVICTIONS WAITED MEAN_WAIT_MS
 * LONGEST_STEP_MS" line per configuration (what t/bench/lora.sh's
 * summary reads).
 */

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/kvs_engine.h"
#include "gen/kvs_gen.h"
#include "gen/kvs_gen_lora.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"
#include "bench_lora.h"

#define N_AD      64
#define IN_FLIGHT 32
#define PROMPT    16
#define GEN       16


static void
die(const char *what, const kvs_err_t *err)
{
    fprintf(stderr, "bench_lora_paging: %s: %s\n", what, err->msg);
    exit(1);
}


static double
now_s(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}


static void
submit(kvs_engine_t *e, uint32_t i, int32_t *prompt, uint32_t n_vocab,
    kvs_engine_seq_t **h)
{
    uint32_t          j;
    kvs_err_t         err;
    kvs_engine_req_t  req;

    for (j = 0; j < PROMPT; j++) {
        prompt[j] = (int32_t) ((i * 31 + j * 7 + 1) % n_vocab);
    }

    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = PROMPT;
    req.max_tokens = GEN;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;
    req.adapter = i % N_AD + 1;

    if (kvs_engine_submit(e, &req, h, &err) != KVS_OK) {
        die("submit", &err);
    }
}


/* Generated tokens per wall second of n requests under `slots` slots. */
static double
run(const kvs_model_t *m, const kvs_vocab_t *v, const char *const *paths,
    uint32_t slots, uint32_t n, unsigned threads, kvs_engine_stats_t *st)
{
    size_t              k, j, q;
    double              t0, t;
    int32_t            *prompts;
    uint32_t            next, done, tokens;
    kvs_err_t           err;
    kvs_engine_t       *e;
    struct pollfd       pfd;
    kvs_engine_conf_t   conf;
    kvs_engine_seq_t   *ready[IN_FLIGHT], *hs[IN_FLIGHT];
    kvs_engine_out_t    out[IN_FLIGHT];

    memset(&conf, 0, sizeof(conf));
    conf.model = m;
    conf.vocab = v;
    conf.n_blocks = 4 * IN_FLIGHT;
    conf.threads = threads;
    conf.no_prefix_cache = 1;
    conf.lora_paths = paths;
    conf.n_loras = N_AD;
    conf.lora_slots = slots;

    if (kvs_engine_new(&e, &conf, &err) != KVS_OK
        || kvs_engine_start(e, &err) != KVS_OK)
    {
        die("engine", &err);
    }

    prompts = calloc((size_t) IN_FLIGHT * PROMPT, sizeof(int32_t));
    if (prompts == NULL) {
        fprintf(stderr, "bench_lora_paging: out of memory\n");
        exit(1);
    }

    memset(out, 0, sizeof(out));
    t0 = now_s();

    for (next = 0; next < IN_FLIGHT && next < n; next++) {
        submit(e, next, prompts + (size_t) next * PROMPT, m->hp.n_vocab,
               &hs[next]);
    }

    done = 0;
    tokens = 0;
    pfd.fd = kvs_engine_fd(e);
    pfd.events = POLLIN;

    while (done < n) {
        (void) poll(&pfd, 1, 100);

        while ((k = kvs_engine_ready(e, ready, IN_FLIGHT)) > 0) {
            for (j = 0; j < k; j++) {
                for (q = 0; q < IN_FLIGHT && hs[q] != ready[j]; q++) { }

                if (q == IN_FLIGHT) {
                    continue;
                }

                (void) kvs_engine_read(e, hs[q], &out[q]);

                if (out[q].finish == KVS_FINISH_NONE) {
                    continue;
                }

                if (out[q].finish != KVS_FINISH_LENGTH) {
                    fprintf(stderr, "bench_lora_paging: request ended: "
                            "%s\n", out[q].error);
                    exit(1);
                }

                tokens += (uint32_t) out[q].n_tokens;
                kvs_engine_close(e, hs[q]);
                kvs_engine_out_free(&out[q]);
                memset(&out[q], 0, sizeof(out[q]));
                hs[q] = NULL;
                done++;

                if (next < n) {
                    submit(e, next, prompts + q * PROMPT, m->hp.n_vocab,
                           &hs[q]);
                    next++;
                }
            }
        }
    }

    t = now_s() - t0;
    kvs_engine_stats(e, st);
    kvs_engine_free(e);
    free(prompts);

    return tokens / t;
}


int
main(int argc, char **argv)
{
    int                  i;
    char                 bp[512], ap[N_AD][512];
    double               base, tps;
    uint32_t             n, k;
    unsigned             threads;
    const char          *tmp, *preset, *paths[N_AD];
    kvs_err_t            err;
    kvs_model_t         *m;
    kvs_vocab_t         *v;
    kvs_engine_stats_t   st;
    kvs_gen_lora_spec_t  ls;
    static const uint32_t  slots[] = { 64, 16, 8 };

    n = 256;
    threads = 2;
    preset = "small";

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--requests") == 0) {
            n = (uint32_t) atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = (unsigned) atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--preset") == 0) {
            preset = argv[i + 1];
        } else {
            fprintf(stderr, "bench_lora_paging: unknown option %s\n",
                    argv[i]);
            return 2;
        }
    }

    if (n == 0 || threads == 0) {
        fprintf(stderr, "bench_lora_paging: counts must be positive\n");
        return 2;
    }

    tmp = bench_lora_tmp();

    if (bench_lora_base(preset, "bench-lora-paging", bp, sizeof(bp), &err)
        != KVS_OK
        || kvs_model_open(&m, bp, &err) != KVS_OK
        || kvs_vocab_load(&v, m->gguf, &err) != KVS_OK)
    {
        die(bp, &err);
    }

    memset(&ls, 0, sizeof(ls));
    ls.rank = 16;
    ls.targets = 0x7f;
    ls.alpha = 32.0f;
    ls.strength = 0.5f;

    for (k = 0; k < N_AD; k++) {
        ls.seed = 2000 + k;
        snprintf(ap[k], sizeof(ap[k]), "%s/bench-lora-paging-a%u.%d.gguf",
                 tmp, k, (int) getpid());
        if (kvs_gen_lora_write(bp, &ls, ap[k], &err) != KVS_OK) {
            die(ap[k], &err);
        }
        paths[k] = ap[k];
    }

    printf("preset %s (F32), %u requests of %u + %u tokens, %d in flight, "
           "request i under adapter i mod %d (rank 16), %u threads\n\n",
           preset, n, PROMPT, GEN, IN_FLIGHT, N_AD, threads);
    printf("| slots | tokens/s (wall) | vs all resident | loads | "
           "evictions | requests waited | mean wait (ms) | longest step "
           "(ms) |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");

    base = 0.0;

    for (k = 0; k < sizeof(slots) / sizeof(slots[0]); k++) {
        tps = run(m, v, paths, slots[k], n, threads, &st);
        base = k == 0 ? tps : base;

        printf("| %u | %.0f | %.2f | %llu | %llu | %llu | %.1f | %.1f |\n",
               slots[k], tps, tps / base, (unsigned long long) st.lora_loads,
               (unsigned long long) st.lora_evictions,
               (unsigned long long) st.lora_waited,
               st.lora_waited ? (double) st.lora_wait_ms / st.lora_waited
                              : 0.0,
               st.step_ns_max / 1e6);
        printf("lora_paging_run %u %.1f %llu %llu %llu %.1f %.1f\n",
               slots[k], tps, (unsigned long long) st.lora_loads,
               (unsigned long long) st.lora_evictions,
               (unsigned long long) st.lora_waited,
               st.lora_waited ? (double) st.lora_wait_ms / st.lora_waited
                              : 0.0,
               st.step_ns_max / 1e6);
    }

    for (k = 0; k < N_AD; k++) {
        unlink(ap[k]);
    }

    kvs_vocab_free(v);
    kvs_model_close(m);
    unlink(bp);

    return 0;
}
