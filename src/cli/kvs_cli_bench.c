/*
 * kvserve bench: an offline load through the whole engine: N sequences
 * of P prompt tokens each generating G tokens, all submitted at once to
 * an engine running on its own thread, read back through its eventfd as
 * a server would.  Prints prefill and decode tokens/s, step times, batch
 * sizes and KV use, then one machine-readable line.
 *
 * Prompts are seeded random token ids (so no tokenizer cost is counted
 * and every sequence differs from its first token: nothing is shared);
 * end-of-text tokens are ignored so every sequence generates exactly G.
 * Greedy sampling unless --temp is given.
 *
 * Prefill tokens/s is prefill tokens over the time of the steps that
 * computed any; decode tokens/s is the tokens of decode-only steps over
 * their time, so with all sequences arriving together the two phases
 * are measured apart.
 */

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs_cli.h"
#include "backend/cpu/kvs_cpu.h"
#include "engine/kvs_engine.h"
#include "kv/kvs_kv_pool.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"
#include "model/kvs_model.h"
#include "base/kvs_clock.h"

#define KVS_CLI_BENCH_MAX_SEQS  4096


typedef struct {
    const char  *path;
    uint32_t     seqs;
    uint32_t     prompt;
    uint32_t     gen;
    uint32_t     block;
    uint32_t     kv_blocks;           /* 0: enough for every sequence */
    uint32_t     max_batch_tokens;
    unsigned     threads;
    int          no_chunked;
    int          no_cache;            /* the prefix cache off */
    int          keep_window;         /* a windowed model keeps every
                                         block (the baseline of freeing) */
    float        temp;
    uint64_t     seed;
    uint32_t     warmup;              /* untimed rounds of the same load
                                         first, other prompts */
    int          backend;             /* kvs_backend_kind_t; the CPU */
    int          device;              /* CUDA device ordinal */
} kvs_cli_bench_opts_t;


static int kvs_cli_bench_args(int argc, char **argv,
    kvs_cli_bench_opts_t *o);
static int kvs_cli_bench_run(const kvs_cli_bench_opts_t *o);
static void kvs_cli_bench_prompts(int32_t *prompt, uint32_t n,
    uint32_t n_vocab, uint64_t seed);
static int kvs_cli_bench_round(kvs_engine_t *e,
    const kvs_cli_bench_opts_t *o, const int32_t *prompt,
    kvs_engine_seq_t **hs, uint64_t *tokens, kvs_err_t *err);
static int kvs_cli_bench_drain(kvs_engine_t *e, kvs_engine_seq_t **hs,
    uint32_t n, uint64_t *tokens, kvs_err_t *err);
static void kvs_cli_bench_usage(FILE *f);


int
kvs_cli_bench(int argc, char **argv)
{
    int                   rc;
    kvs_cli_bench_opts_t  o;

    rc = kvs_cli_bench_args(argc, argv, &o);
    if (rc != 0) {
        return rc < 0 ? 0 : rc;
    }

    return kvs_cli_bench_run(&o);
}


static int
kvs_cli_bench_args(int argc, char **argv, kvs_cli_bench_opts_t *o)
{
    int          i, rc;
    double       d;
    const char  *opt;

    memset(o, 0, sizeof(kvs_cli_bench_opts_t));
    o->seqs = 1;
    o->prompt = 128;
    o->gen = 128;
    o->block = KVS_KV_BLOCK_TOKENS;
    o->max_batch_tokens = 2048;
    o->seed = 1;

    for (i = 1; i < argc; i++) {
        opt = argv[i];

        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
            kvs_cli_bench_usage(stdout);
            return -1;
        }

        if (strcmp(opt, "--no-chunked") == 0) {
            o->no_chunked = 1;
            continue;
        }

        if (strcmp(opt, "--no-prefix-cache") == 0) {
            o->no_cache = 1;
            continue;
        }

        if (strcmp(opt, "--keep-window-blocks") == 0) {
            o->keep_window = 1;
            continue;
        }

        if (opt[0] != '-') {
            if (o->path != NULL) {
                fprintf(stderr, "kvserve bench: more than one model\n");
                return 2;
            }

            o->path = opt;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "kvserve bench: %s needs a value\n", opt);
            return 2;
        }

        i++;

        rc = kvs_cli_backend_opt("bench", opt, argv[i], &o->backend,
                                 &o->device);
        if (rc != 0) {
            if (rc == 1) {
                continue;
            }

            return rc;
        }

        if (strcmp(opt, "--seqs") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 1,
                            KVS_CLI_BENCH_MAX_SEQS, 1, &d) != 0)
            {
                return 2;
            }

            o->seqs = (uint32_t) d;

        } else if (strcmp(opt, "--prompt") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 1, 1 << 20, 1, &d) != 0) {
                return 2;
            }

            o->prompt = (uint32_t) d;

        } else if (strcmp(opt, "--gen") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 1, 1 << 20, 1, &d) != 0) {
                return 2;
            }

            o->gen = (uint32_t) d;

        } else if (strcmp(opt, "--block") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 1,
                            KVS_KV_MAX_BLOCK_TOKENS, 1, &d) != 0)
            {
                return 2;
            }

            o->block = (uint32_t) d;

        } else if (strcmp(opt, "--kv-blocks") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 1, KVS_KV_MAX_BLOCKS, 1,
                            &d) != 0)
            {
                return 2;
            }

            o->kv_blocks = (uint32_t) d;

        } else if (strcmp(opt, "--max-batch-tokens") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 1, 1 << 20, 1, &d) != 0) {
                return 2;
            }

            o->max_batch_tokens = (uint32_t) d;

        } else if (strcmp(opt, "--threads") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 0, 256, 1, &d) != 0) {
                return 2;
            }

            o->threads = (unsigned) d;

        } else if (strcmp(opt, "--temp") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 0, 2, 0, &d) != 0) {
                return 2;
            }

            o->temp = (float) d;

        } else if (strcmp(opt, "--warmup") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 0, 16, 1, &d) != 0) {
                return 2;
            }

            o->warmup = (uint32_t) d;

        } else if (strcmp(opt, "--seed") == 0) {
            if (kvs_cli_num("bench", opt, argv[i], 0, 9007199254740992.0, 1,
                            &d) != 0)
            {
                return 2;
            }

            o->seed = (uint64_t) d;

        } else {
            fprintf(stderr, "kvserve bench: unknown option \"%s\"\n", opt);
            kvs_cli_bench_usage(stderr);
            return 2;
        }
    }

    if (o->path == NULL) {
        fprintf(stderr, "kvserve bench: no model given\n");
        kvs_cli_bench_usage(stderr);
        return 2;
    }

    return 0;
}


static int
kvs_cli_bench_run(const kvs_cli_bench_opts_t *o)
{
    int                  rc;
    char                 h1[32], h2[32], kernels[256];
    double               t0, t1, pre_s, dec_s, pre_tps, dec_tps;
    int32_t             *prompt;
    uint32_t             i, per_seq;
    uint64_t             tokens, dec_tokens;
    kvs_err_t            err;
    kvs_model_t         *m;
    kvs_vocab_t         *v;
    kvs_engine_t        *e;
    kvs_engine_seq_t   **hs;
    kvs_engine_conf_t    conf;
    kvs_engine_stats_t   st, w0;

    const kvs_gguf_tensor_t  *wq;

    kvs_err_clear(&err);
    m = NULL;
    v = NULL;
    e = NULL;
    hs = NULL;
    rc = 1;

    prompt = malloc((size_t) o->seqs * o->prompt * sizeof(int32_t));
    hs = calloc(o->seqs, sizeof(kvs_engine_seq_t *));

    if (prompt == NULL || hs == NULL) {
        kvs_err_set(&err, KVS_ENOMEM, "out of memory");
        goto failed;
    }

    if (kvs_model_open(&m, o->path, &err) != KVS_OK) {
        m = NULL;
        goto failed;
    }

    if (kvs_vocab_load(&v, m->gguf, &err) != KVS_OK) {
        v = NULL;
        goto failed;
    }

    /* what one sequence can hold: prompt + gen - 1 positions */
    per_seq = (o->prompt + o->gen - 1 + o->block - 1) / o->block;

    memset(&conf, 0, sizeof(conf));
    conf.model = m;
    conf.vocab = v;
    conf.block_tokens = o->block;
    conf.n_blocks = o->kv_blocks != 0 ? o->kv_blocks : per_seq * o->seqs;
    conf.threads = o->threads;
    conf.max_batch_tokens = o->max_batch_tokens;
    conf.max_running = o->seqs;
    conf.no_chunked_prefill = o->no_chunked;
    conf.no_prefix_cache = o->no_cache;
    conf.keep_window_blocks = o->keep_window;
    conf.backend = (kvs_backend_kind_t) o->backend;
    conf.device = o->device;

    if (kvs_engine_new(&e, &conf, &err) != KVS_OK) {
        e = NULL;
        goto failed;
    }

    wq = kvs_gguf_find_tensor(m->gguf, "blk.0.attn_q.weight");

    printf("model: %s (%s weights, %" PRIu32 " layers, %" PRIu32 " embd, %"
           PRIu32 " vocab)\n", o->path,
           wq != NULL ? kvs_ggml_type_name(wq->type) : "?", m->hp.n_layer,
           m->hp.n_embd, m->hp.n_vocab);

    kvs_engine_stats(e, &st);

    printf("engine: KV %" PRIu32 " blocks x %" PRIu32 " tokens, "
           "max_batch_tokens %" PRIu32 ", chunked prefill %s; %s\n",
           st.kv_blocks, st.block_tokens, o->max_batch_tokens,
           o->no_chunked ? "off" : "on", kvs_engine_backend(e));

    if (strncmp(kvs_engine_backend(e), "backend: cpu", 12) == 0) {
        printf("cpu kernels: %s\n", kvs_cpu_kernels(kernels,
                                                     sizeof(kernels)));
    }

    printf("load: %" PRIu32 " sequences x (%" PRIu32 " prompt + %" PRIu32
           " generated) tokens, %s\n", o->seqs, o->prompt, o->gen,
           o->temp > 0 ? "sampled" : "greedy");

    if (kvs_engine_start(e, &err) != KVS_OK) {
        goto failed;
    }

    /* warm-up rounds (what llama-bench does before it times): the same
     * load with other prompts, so that first touches of the KV cache and
     * of the buffers are not timed; their steps are taken off below */
    memset(&w0, 0, sizeof(w0));

    for (i = 0; i < o->warmup; i++) {
        kvs_cli_bench_prompts(prompt, o->seqs * o->prompt, m->hp.n_vocab,
                              (o->seed ^ 0x9e3779b97f4a7c15ULL) + i);

        if (kvs_cli_bench_round(e, o, prompt, hs, &tokens, &err) != KVS_OK)
        {
            goto failed;
        }
    }

    if (o->warmup > 0) {
        kvs_engine_stop(e);
        kvs_engine_stats(e, &w0);

        if (kvs_engine_start(e, &err) != KVS_OK) {
            goto failed;
        }
    }

    /* xorshift64*, seeded: the same prompts for every run of a seed */
    kvs_cli_bench_prompts(prompt, o->seqs * o->prompt, m->hp.n_vocab,
                          o->seed);

    t0 = kvs_now_s();

    if (kvs_cli_bench_round(e, o, prompt, hs, &tokens, &err) != KVS_OK) {
        goto failed;
    }

    t1 = kvs_now_s();

    /* the last step publishes its stats after its output: let it end */
    kvs_engine_stop(e);
    kvs_engine_stats(e, &st);

    st.prefill_tokens -= w0.prefill_tokens;
    st.decode_tokens -= w0.decode_tokens;
    st.preemptions -= w0.preemptions;
    st.steps -= w0.steps;
    st.step_ns -= w0.step_ns;
    st.decode_only_steps -= w0.decode_only_steps;
    st.decode_only_tokens -= w0.decode_only_tokens;
    st.decode_only_ns -= w0.decode_only_ns;
    st.batch_seqs -= w0.batch_seqs;

    pre_s = (double) (st.step_ns - st.decode_only_ns) / 1e9;
    dec_s = (double) st.decode_only_ns / 1e9;
    dec_tokens = st.decode_only_tokens;
    pre_tps = pre_s > 0 ? (double) st.prefill_tokens / pre_s : 0;
    dec_tps = dec_s > 0 ? (double) dec_tokens / dec_s : 0;

    printf("prefill: %" PRIu64 " tokens in %.3f s: %.1f tokens/s\n",
           st.prefill_tokens, pre_s, pre_tps);
    printf("decode: %" PRIu64 " tokens in %" PRIu64 " decode-only steps, "
           "%.3f s: %.1f tokens/s (%" PRIu64 " decode tokens in all)\n",
           dec_tokens, st.decode_only_steps, dec_s, dec_tps,
           st.decode_tokens);
    printf("steps: %" PRIu64 ", mean %.3f ms, max %.3f ms, mean batch "
           "%.2f sequences\n", st.steps,
           st.steps ? (double) st.step_ns / st.steps / 1e6 : 0,
           (double) st.step_ns_max / 1e6,
           st.steps ? (double) st.batch_seqs / st.steps : 0);
    printf("kv: peak %" PRIu32 " of %" PRIu32 " blocks (%s of %s), "
           "preemptions %" PRIu64 ", in use at the end %" PRIu32 "\n",
           st.kv_used_max, st.kv_blocks,
           kvs_cli_human((double) st.kv_used_max
                         * kvs_engine_kv_bytes(e) / st.kv_blocks, h1,
                         sizeof(h1)),
           kvs_cli_human((double) kvs_engine_kv_bytes(e), h2, sizeof(h2)),
           st.preemptions, st.kv_used);
    printf("total: %" PRIu64 " tokens generated in %.3f s wall: %.1f "
           "tokens/s\n", tokens, t1 - t0, (double) tokens / (t1 - t0));
    printf("bench model=%s threads=%u seqs=%" PRIu32 " prompt=%" PRIu32
           " gen=%" PRIu32 " prefill_tps=%.1f decode_tps=%.1f "
           "step_ms=%.3f preemptions=%" PRIu64 " kv_peak=%" PRIu32 "\n",
           o->path, kvs_engine_threads(e), o->seqs, o->prompt, o->gen,
           pre_tps, dec_tps,
           st.steps ? (double) st.step_ns / st.steps / 1e6 : 0,
           st.preemptions, st.kv_used_max);

    rc = 0;

failed:

    if (rc != 0) {
        fprintf(stderr, "kvserve bench: %s\n", err.msg);
    }

    kvs_engine_free(e);
    kvs_vocab_free(v);
    kvs_model_close(m);
    free(hs);
    free(prompt);

    return rc;
}


/* Reads every handle's output through the eventfd until all ended;
 * *tokens counts what was generated. */
/* n seeded random token ids (xorshift64*): the same for every run of a
 * seed */
static void
kvs_cli_bench_prompts(int32_t *prompt, uint32_t n, uint32_t n_vocab,
    uint64_t seed)
{
    uint32_t  i;
    uint64_t  rng;

    rng = seed != 0 ? seed : 1;

    for (i = 0; i < n; i++) {
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        prompt[i] = (int32_t) (((rng * 0x2545F4914F6CDD1DULL) >> 32)
                               % n_vocab);
    }
}


/* One round of the load: every sequence submitted at once, then read
 * back to its end. */
static int
kvs_cli_bench_round(kvs_engine_t *e, const kvs_cli_bench_opts_t *o,
    const int32_t *prompt, kvs_engine_seq_t **hs, uint64_t *tokens,
    kvs_err_t *err)
{
    int               rc;
    uint32_t          i, j;
    kvs_engine_req_t  req;

    memset(&req, 0, sizeof(req));
    req.n_prompt = o->prompt;
    req.max_tokens = o->gen;
    req.ignore_eos = 1;
    req.sample.temperature = o->temp;
    req.sample.top_p = 1.0f;

    /* queued while the engine's thread is stopped, then the thread
     * started, so that its first step sees every sequence: submitted to
     * a running thread, the first could be stepped alone, and the
     * round's batches would depend on timing */
    kvs_engine_stop(e);
    rc = KVS_OK;

    for (i = 0; i < o->seqs; i++) {
        req.prompt = prompt + (size_t) i * o->prompt;
        req.sample.seed = o->seed + i;
        req.data = (void *) (uintptr_t) i;

        rc = kvs_engine_submit(e, &req, &hs[i], err);

        if (rc != KVS_OK) {
            break;
        }
    }

    if (rc == KVS_OK) {
        rc = kvs_engine_start(e, err);
    }

    if (rc != KVS_OK) {
        for (j = 0; j < i; j++) {
            kvs_engine_close(e, hs[j]);
        }

        return rc;
    }

    return kvs_cli_bench_drain(e, hs, o->seqs, tokens, err);
}


static int
kvs_cli_bench_drain(kvs_engine_t *e, kvs_engine_seq_t **hs, uint32_t n,
    uint64_t *tokens, kvs_err_t *err)
{
    int                rc;
    size_t             k, got;
    uint32_t           left, i;
    struct pollfd      pfd;
    kvs_engine_out_t   out;
    kvs_engine_seq_t  *ready[64];

    memset(&out, 0, sizeof(out));
    *tokens = 0;
    left = n;
    rc = KVS_OK;

    pfd.fd = kvs_engine_fd(e);
    pfd.events = POLLIN;

    while (left > 0) {
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR) {
            rc = kvs_err_set(err, KVS_EIO, "poll: %s", strerror(errno));
            break;
        }

        while ((got = kvs_engine_ready(e, ready, 64)) > 0) {
            for (k = 0; k < got; k++) {
                i = (uint32_t) (uintptr_t) kvs_engine_seq_data(ready[k]);

                out.n_tokens = 0;
                out.text.len = 0;

                if (kvs_engine_read(e, ready[k], &out) < 0) {
                    rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
                    goto done;
                }

                *tokens += out.n_tokens;

                if (out.finish == KVS_FINISH_NONE) {
                    continue;
                }

                if (out.finish == KVS_FINISH_ERROR) {
                    rc = kvs_err_set(err, KVS_EFORMAT, "sequence %" PRIu32
                                     ": %s", i, out.error);
                    goto done;
                }

                kvs_engine_close(e, ready[k]);
                hs[i] = NULL;
                left--;
            }
        }
    }

done:

    for (i = 0; i < n; i++) {
        if (hs[i] != NULL) {
            kvs_engine_close(e, hs[i]);
            hs[i] = NULL;
        }
    }

    kvs_engine_out_free(&out);

    return rc;
}



static void
kvs_cli_bench_usage(FILE *f)
{
    fprintf(f,
        "usage: kvserve bench model.gguf [--seqs N] [--prompt P] [--gen G]\n"
        "           [--threads T] [--block B] [--kv-blocks N]\n"
        "           [--max-batch-tokens N] [--no-chunked] [--temp T]\n"
        "           [--seed S] [--backend cpu|cuda|auto] [--device N]\n"
        "           [--no-prefix-cache] [--keep-window-blocks]\n"
        "           [--warmup W]\n"
        "  N sequences (default 1) of P random prompt tokens (128) each\n"
        "  generating G tokens (128), submitted at once; --kv-blocks\n"
        "  defaults to what all of them need (fewer forces preemption);\n"
        "  --threads 0 (default): one per online CPU; --backend cpu\n"
        "  (default); auto: CUDA device N (0) when it answers;\n"
        "  --keep-window-blocks: a model windowed on every layer keeps\n"
        "  the blocks its window left (freed by default); --warmup W:\n"
        "  W untimed rounds of the same load first (other prompts), as\n"
        "  llama-bench's warm-up run (0 by default): the figures leave\n"
        "  their steps out, but for the longest step's time\n");
}
