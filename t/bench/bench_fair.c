/*
 * bench_fair: issue 7's opening scenario through the whole engine, driven
 * on this thread (kvs_engine_step), on a generated model (the "tiny"
 * shape with a long context): tenant A sends requests that fill the KV
 * cache (100k tokens by default), tenant B many short ones (2k), both at
 * saturation, under three policies, each for the same wall time:
 *
 *   none     arrival order (no_fair), no limits
 *   count    arrival order, and each tenant admitted at the same
 *            requests/s (nginx's limit_req, emulated at the submit side:
 *            a kvs_limit bucket per tenant charged 1 request each, burst
 *            one request, nodelay; a refused request is retried when the
 *            bucket can take it)
 *   kvserve  a kvs_limit bucket per tenant at the same tokens/s, charged
 *            prompt + max_tokens before the submit and refunded the
 *            unused output after (what kvserve_limit does), plus the
 *            engine's fair share (VTC weights, KV cap)
 *   kvrate   kv_rate's bucket per tenant (kvs_limit_kv: KiB x s of KV
 *            cache held) at the same KiB/s, each request reserving its
 *            whole KV for one second at the submit and settled, when it
 *            ends, to what it held by the engine's count (its output's
 *            kv_block_us, through kvs_limit_kv_held), what the bucket
 *            has no room for kept as debt (kvs_limit_settle_actual), as
 *            kvserve_limit does; arrival order in the engine (no_fair),
 *            so that the limiter alone shares (with the fair share on,
 *            A's long prefills were preempted over and over and none
 *            finished in a short run)
 *   kvest    kvrate settled instead to the estimate from the request's
 *            own stamps (submit, first token, end), what kvserve_limit
 *            did before the engine counted: the baseline of the fix
 *   kvmeter  an experiment, not what kvserve does: the same bucket, but
 *            charged every step with what each tenant's sequences hold
 *            in the engine (its kv_blocks x the step's time), what went
 *            past a full bucket kept as debt that blocks the tenant's
 *            admissions until paid; a request's one-second reservation
 *            is given back when it ends: kvrate's accounting charged step
 *            by step instead of per request (docs/performance.md,
 *            "kv_rate")
 *
 * Saturation: each tenant keeps a backlog at the client that never runs
 * dry, and up to --a-conc / --b-conc requests submitted (enough that one
 * always waits in the engine: A 2, B the cache's worth plus 2).
 *
 * Measured per tenant over the run: served tokens (prefill tokens
 * computed, recomputes after preemption included, plus decode tokens:
 * kvs_engine_tenants) and KV block-seconds (each tenant's kv_blocks after
 * a step, times the time until the next step ends: exact for what the
 * engine holds, as its tables only change in steps).  A's share of each
 * is A / (A + B).
 *
 * Rates: the limits are meant to bind (the sum of both tenants' limits
 * equals the machine's throughput), so unless given they come from the
 * "none" run's throughput C in tokens/s: count admits C / (A's cost +
 * B's cost) requests/s per tenant, so that both at that rate make C;
 * kvserve admits C / 2 tokens/s per tenant, burst A's cost (a smaller
 * burst would never pass A); kvrate lets each tenant hold half of what
 * "none" held on average (its KV block-seconds per second, in KiB), the
 * bucket --kv-window seconds of that (kvs_limit_kv_conf_init's window).
 *
 * Output: a markdown table, then one "fair_run ..." line per policy for
 * scripts (t/bench/fair.sh, t/bench/fair_plot.py).
 */

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/kvs_engine.h"
#include "limit/kvs_limit.h"
#include "limit/kvs_limit_kv.h"
#include "gen/kvs_gen.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"

#define BF_MAX_SLOTS   512
#define BF_N_TENANTS   2
#define BF_COUNT_UNIT  1000           /* bucket units per request (count) */


typedef enum {
    BF_NONE = 0,
    BF_COUNT,
    BF_KVSERVE,
    BF_KVRATE,
    BF_KVMETER,
    BF_KVEST
} bf_policy_t;

typedef struct {
    uint32_t     cache_tokens;        /* KV pool, tokens */
    uint32_t     a_prompt;            /* 0: the cache's size less room */
    uint32_t     b_prompt;
    uint32_t     a_gen;               /* max_tokens, all generated */
    uint32_t     b_gen;
    uint32_t     a_conc;              /* submitted at once, at most */
    uint32_t     b_conc;              /* 0: the cache's worth + 2 */
    double       seconds;             /* wall time of each policy */
    double       rate_req;            /* count: requests/s per tenant */
    double       rate_tok;            /* kvserve: tokens/s per tenant */
    double       rate_kv;             /* kvrate: KiB/s per tenant */
    double       kv_window;           /* kvrate: bucket, seconds of it */
    const char  *policies;
    uint32_t     block;
    uint32_t     max_batch_tokens;
    uint32_t     w_prefill;
    uint32_t     w_decode;
    uint32_t     kv_max_milli;
    int          no_prefix_cache;
    unsigned     threads;
    uint64_t     seed;
} bf_opts_t;

typedef struct {
    const char          *key;
    uint32_t             prompt;
    uint32_t             gen;
    uint32_t             conc;
    uint32_t             inflight;
    int                  limited;
    kvs_limit_conf_t     lc;
    kvs_limit_state_t    ls;
    uint64_t             retry_at_ms; /* refused: not before */
    uint64_t             kv_forgiven; /* kvrate: KiB x s held beyond
                                         the reservation, not charged
                                         (the bucket was full) */
    uint64_t             kv_settled;  /* kvrate: KiB x s estimated */
    double               kv_owed;     /* kvmeter: KiB x s held, not yet
                                         charged (fractions, debt) */
    uint64_t             submitted;
    uint64_t             finished;
    uint64_t             refused;     /* limiter decisions that said no */
    uint64_t             prefill;
    uint64_t             decode;
    double               kv_bs;       /* block-seconds */
    double               kv_eng;      /* block-seconds by the engine's
                                         count (kv_block_us) */
    double               held_prev;   /* blocks after the last step */
    uint32_t             kv_max;      /* most blocks held at once */
} bf_tenant_t;

typedef struct {
    kvs_engine_seq_t    *h;
    uint32_t             tenant;
    kvs_limit_resv_t     resv;
    uint64_t             submit_ns;   /* kvrate: its stamps */
    uint64_t             first_ns;
    kvs_engine_out_t     out;
} bf_slot_t;

typedef struct {
    bf_policy_t          policy;
    double               rate;        /* per tenant, as applied */
    uint64_t             kv_bpt;      /* KV bytes per token (kvrate) */
    uint32_t             block;       /* tokens per KV block */
    double               wall;
    double               busy;        /* seconds in working steps */
    uint64_t             preemptions;
    double               kv_raw;      /* block-s as the engine counted */
    double               kv_kept;     /* of those, after the correction */
    bf_tenant_t          t[BF_N_TENANTS];
} bf_run_t;


static int bf_args(int argc, char **argv, bf_opts_t *o);
static int bf_model(const bf_opts_t *o, kvs_model_t **m, kvs_vocab_t **v,
    uint32_t *n_ids, kvs_err_t *err);
static int bf_run(const bf_opts_t *o, kvs_model_t *m, kvs_vocab_t *v,
    uint32_t n_ids, bf_run_t *run, kvs_err_t *err);
static int bf_submit(kvs_engine_t *e, const bf_opts_t *o, bf_run_t *run,
    bf_slot_t *slots, int32_t *prompt, uint32_t n_ids, uint64_t *rng,
    uint64_t now_ms, kvs_err_t *err);
static void bf_print(const bf_opts_t *o, const bf_run_t *runs, size_t n);
static const char *bf_policy_name(bf_policy_t p);
static double bf_share(double a, double b);
static uint32_t bf_rand(uint64_t *s, uint32_t n);
static double bf_now(void);
static uint64_t bf_now_ns(void);
static void bf_settle_kv(const bf_run_t *run, bf_tenant_t *t,
    bf_slot_t *slot, uint64_t now_ms);
static int bf_meter(bf_tenant_t *t, uint64_t now_ms, kvs_err_t *err);
static void bf_usage(FILE *f);


int
main(int argc, char **argv)
{
    int           rc;
    char         *list, *tok, *save;
    size_t        n, i;
    uint32_t      n_ids;
    bf_opts_t     o;
    bf_run_t      runs[8];
    kvs_err_t     err;
    kvs_model_t  *m;
    kvs_vocab_t  *v;
    double        cap, cap_kv;

    if (bf_args(argc, argv, &o) != 0) {
        return 2;
    }

    memset(&err, 0, sizeof(err));
    n_ids = 0;

    if (bf_model(&o, &m, &v, &n_ids, &err) != KVS_OK) {
        fprintf(stderr, "bench_fair: model: %s\n", err.msg);
        return 1;
    }

    printf("bench_fair: cache %" PRIu32 " tokens (%" PRIu32 " blocks of %"
           PRIu32 "), A %" PRIu32 "+%" PRIu32 " tokens x%" PRIu32
           " in flight, B %" PRIu32 "+%" PRIu32 " tokens x%" PRIu32
           " in flight, %.0f s per policy, %u threads\n", o.cache_tokens,
           (o.cache_tokens + o.block - 1) / o.block, o.block, o.a_prompt,
           o.a_gen, o.a_conc, o.b_prompt, o.b_gen, o.b_conc, o.seconds,
           o.threads);
    fflush(stdout);

    list = strdup(o.policies);
    if (list == NULL) {
        return 1;
    }

    rc = 0;
    n = 0;
    cap = 0;
    cap_kv = 0;

    for (tok = strtok_r(list, ",", &save); tok != NULL && n < 8;
         tok = strtok_r(NULL, ",", &save))
    {
        memset(&runs[n], 0, sizeof(bf_run_t));

        if (strcmp(tok, "none") == 0) {
            runs[n].policy = BF_NONE;

        } else if (strcmp(tok, "count") == 0) {
            runs[n].policy = BF_COUNT;
            runs[n].rate = o.rate_req;

            if (runs[n].rate <= 0 && cap > 0) {
                runs[n].rate = cap / (o.a_prompt + o.a_gen + o.b_prompt
                                      + o.b_gen);
            }

        } else if (strcmp(tok, "kvserve") == 0) {
            runs[n].policy = BF_KVSERVE;
            runs[n].rate = o.rate_tok;

            if (runs[n].rate <= 0 && cap > 0) {
                runs[n].rate = cap / 2;
            }

        } else if (strcmp(tok, "kvrate") == 0
                   || strcmp(tok, "kvmeter") == 0
                   || strcmp(tok, "kvest") == 0)
        {
            runs[n].policy = tok[2] == 'r' ? BF_KVRATE
                             : tok[2] == 'm' ? BF_KVMETER : BF_KVEST;
            runs[n].rate = o.rate_kv;

            if (runs[n].rate <= 0 && cap_kv > 0) {
                runs[n].rate = cap_kv / 2;
            }

        } else {
            fprintf(stderr, "bench_fair: unknown policy \"%s\" (none, "
                    "count, kvserve, kvrate, kvmeter, kvest)\n", tok);
            rc = 2;
            break;
        }

        if (runs[n].policy != BF_NONE && runs[n].rate <= 0) {
            fprintf(stderr, "bench_fair: %s needs a rate: run \"none\" "
                    "first or give --rate-req / --rate-tok / --rate-kv\n",
                    tok);
            rc = 2;
            break;
        }

        if (bf_run(&o, m, v, n_ids, &runs[n], &err) != KVS_OK) {
            fprintf(stderr, "bench_fair: %s: %s\n", tok, err.msg);
            rc = 1;
            break;
        }

        if (runs[n].policy == BF_NONE) {
            cap = 0;
            for (i = 0; i < BF_N_TENANTS; i++) {
                cap += (double) (runs[n].t[i].prefill + runs[n].t[i].decode);
            }
            cap /= runs[n].wall;

            /* KiB of KV held on average: block-s x block x bytes */
            cap_kv = (runs[n].t[0].kv_bs + runs[n].t[1].kv_bs) * o.block
                     * (double) runs[n].kv_bpt / 1024 / runs[n].wall;
        }

        fprintf(stderr, "bench_fair: %s done\n", tok);
        n++;
    }

    if (n > 0) {
        bf_print(&o, runs, n);
    }

    free(list);
    kvs_vocab_free(v);
    kvs_model_close(m);

    return rc;
}


static int
bf_args(int argc, char **argv, bf_opts_t *o)
{
    int           i, k;
    char         *end;
    const char   *opt;
    double        d;

    static const struct {
        const char  *name;
        size_t       off;
    } nums[] = {
        { "--cache-tokens", offsetof(bf_opts_t, cache_tokens) },
        { "--a-prompt", offsetof(bf_opts_t, a_prompt) },
        { "--b-prompt", offsetof(bf_opts_t, b_prompt) },
        { "--a-gen", offsetof(bf_opts_t, a_gen) },
        { "--b-gen", offsetof(bf_opts_t, b_gen) },
        { "--a-conc", offsetof(bf_opts_t, a_conc) },
        { "--b-conc", offsetof(bf_opts_t, b_conc) },
        { "--block", offsetof(bf_opts_t, block) },
        { "--max-batch-tokens", offsetof(bf_opts_t, max_batch_tokens) },
        { "--w-prefill", offsetof(bf_opts_t, w_prefill) },
        { "--w-decode", offsetof(bf_opts_t, w_decode) },
        { "--kv-max-milli", offsetof(bf_opts_t, kv_max_milli) },
    };

    memset(o, 0, sizeof(bf_opts_t));
    o->cache_tokens = 100000;
    o->b_prompt = 2048;
    o->a_gen = 32;
    o->b_gen = 32;
    o->a_conc = 2;
    o->seconds = 600;
    o->policies = "none,count,kvserve";
    o->block = 16;
    o->max_batch_tokens = 2048;
    o->w_prefill = 1;
    o->w_decode = 2;
    o->kv_max_milli = 500;
    o->kv_window = 10;
    o->seed = 1;

    for (i = 1; i < argc; i++) {
        opt = argv[i];

        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
            bf_usage(stdout);
            exit(0);
        }

        if (strcmp(opt, "--no-prefix-cache") == 0) {
            o->no_prefix_cache = 1;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "bench_fair: %s needs a value\n", opt);
            return -1;
        }

        i++;

        if (strcmp(opt, "--policies") == 0) {
            o->policies = argv[i];
            continue;
        }

        d = strtod(argv[i], &end);
        if (*end != '\0' || end == argv[i] || !(d >= 0) || d > UINT32_MAX) {
            fprintf(stderr, "bench_fair: %s: not a number >= 0 \"%s\"\n",
                    opt, argv[i]);
            return -1;
        }

        if (strcmp(opt, "--seconds") == 0) {
            o->seconds = d;
            continue;
        }

        if (strcmp(opt, "--rate-req") == 0) {
            o->rate_req = d;
            continue;
        }

        if (strcmp(opt, "--rate-tok") == 0) {
            o->rate_tok = d;
            continue;
        }

        if (strcmp(opt, "--rate-kv") == 0) {
            o->rate_kv = d;
            continue;
        }

        if (strcmp(opt, "--kv-window") == 0) {
            o->kv_window = d;
            continue;
        }

        if (strcmp(opt, "--seed") == 0) {
            o->seed = (uint64_t) d;
            continue;
        }

        if (strcmp(opt, "--threads") == 0) {
            o->threads = (unsigned) d;
            continue;
        }

        for (k = 0; k < (int) (sizeof(nums) / sizeof(nums[0])); k++) {
            if (strcmp(opt, nums[k].name) == 0) {
                break;
            }
        }

        if (k == (int) (sizeof(nums) / sizeof(nums[0]))) {
            fprintf(stderr, "bench_fair: bad option %s %s\n", opt, argv[i]);
            bf_usage(stderr);
            return -1;
        }

        *(uint32_t *) ((char *) o + nums[k].off) = (uint32_t) d;
    }

    if (o->block == 0 || o->a_gen == 0 || o->b_gen == 0 || o->a_conc == 0
        || o->b_prompt == 0 || o->seconds <= 0 || o->kv_max_milli > 1000
        || o->kv_window < 1)
    {
        fprintf(stderr, "bench_fair: block, a-gen, b-gen, a-conc, b-prompt"
                " and seconds must be > 0, kv-max-milli <= 1000, "
                "kv-window >= 1\n");
        return -1;
    }

    /* A fills the cache but for its output and a block of slack */
    if (o->a_prompt == 0) {
        if (o->cache_tokens < o->a_gen + 2 * o->block) {
            fprintf(stderr, "bench_fair: cache too small\n");
            return -1;
        }

        o->a_prompt = o->cache_tokens - o->a_gen - o->block;
        if (o->a_prompt > 100000) {
            o->a_prompt = 100000;
        }
    }

    if (o->b_conc == 0) {
        o->b_conc = o->cache_tokens / (o->b_prompt + o->b_gen) + 2;
    }

    if (o->a_conc + o->b_conc > BF_MAX_SLOTS
        || (uint64_t) o->a_prompt + o->a_gen > o->cache_tokens
        || (uint64_t) o->b_prompt + o->b_gen > o->cache_tokens)
    {
        fprintf(stderr, "bench_fair: a-conc + b-conc over %d, or a request "
                "larger than the cache\n", BF_MAX_SLOTS);
        return -1;
    }

    return 0;
}


/* The generated model, written to KVS_TMP and unlinked once open. */
static int
bf_model(const bf_opts_t *o, kvs_model_t **m, kvs_vocab_t **v,
    uint32_t *n_ids, kvs_err_t *err)
{
    int             rc;
    char            path[512];
    const char     *tmp;
    uint32_t        ctx;
    kvs_gen_spec_t  spec;

    *m = NULL;
    *v = NULL;
    *n_ids = 0;

    if (kvs_gen_preset(&spec, "tiny", err) != KVS_OK) {
        return err->code;
    }

    ctx = o->a_prompt + o->a_gen;
    if (ctx < o->b_prompt + o->b_gen) {
        ctx = o->b_prompt + o->b_gen;
    }

    spec.n_ctx = ctx + o->block;
    spec.seed = o->seed;
    snprintf(spec.name, sizeof(spec.name), "bench-fair");

    tmp = getenv("KVS_TMP");
    snprintf(path, sizeof(path), "%s/bench_fair.%d.gguf",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp", (int) getpid());

    if (kvs_gen_write(&spec, path, err) != KVS_OK) {
        return err->code;
    }

    rc = kvs_model_open(m, path, err);

    if (rc == KVS_OK) {
        rc = kvs_vocab_load(v, (*m)->gguf, err);

        if (rc != KVS_OK) {
            *v = NULL;
            kvs_model_close(*m);
        }
    }

    if (rc != KVS_OK) {
        *m = NULL;
    }

    unlink(path);

    if (rc != KVS_OK) {
        return rc;
    }

    /* generated vocabularies end with their special tokens */
    *n_ids = (*m)->hp.n_vocab - KVS_GEN_N_SPECIAL;

    return KVS_OK;
}


static int
bf_run(const bf_opts_t *o, kvs_model_t *m, kvs_vocab_t *v, uint32_t n_ids,
    bf_run_t *run, kvs_err_t *err)
{
    int                   rc, worked;
    size_t                k, i, j;
    uint32_t              s, ti, inflight;
    uint64_t              rng, now_ms, burst;
    int32_t              *prompt;
    double                t0, last, now, step0, raw, scale;
    uint32_t              held[BF_N_TENANTS];
    bf_slot_t            *slots;
    bf_tenant_t          *t;
    kvs_engine_t         *e;
    kvs_engine_conf_t     conf;
    kvs_engine_seq_t     *ready[64];
    kvs_engine_stats_t    st;
    kvs_engine_tenants_t  tn;
    kvs_limit_conf_t      tok;
    const kvs_engine_tenant_t  *row;

    memset(&conf, 0, sizeof(conf));
    conf.model = m;
    conf.vocab = v;
    conf.n_blocks = (o->cache_tokens + o->block - 1) / o->block;
    conf.block_tokens = o->block;
    conf.threads = o->threads;
    conf.max_batch_tokens = o->max_batch_tokens;
    conf.max_running = BF_MAX_SLOTS;
    conf.no_prefix_cache = o->no_prefix_cache;
    conf.no_fair = run->policy != BF_KVSERVE;
    run->kv_bpt = kvs_hparams_kv_bytes_per_token(&m->hp,
                                                 (uint32_t) sizeof(float));
    run->block = o->block;

    if (!conf.no_fair) {
        conf.fair_w_prefill = o->w_prefill;
        conf.fair_w_decode = o->w_decode;
        conf.fair_kv_max_milli = o->kv_max_milli;
    }

    if (kvs_engine_new(&e, &conf, err) != KVS_OK) {
        return err->code;
    }

    slots = calloc(BF_MAX_SLOTS, sizeof(bf_slot_t));
    prompt = malloc((size_t) (o->a_prompt > o->b_prompt
                              ? o->a_prompt : o->b_prompt) * sizeof(int32_t));
    rc = KVS_OK;

    if (slots == NULL || prompt == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    t = run->t;
    t[0].key = "A";
    t[0].prompt = o->a_prompt;
    t[0].gen = o->a_gen;
    t[0].conc = o->a_conc;
    t[1].key = "B";
    t[1].prompt = o->b_prompt;
    t[1].gen = o->b_gen;
    t[1].conc = o->b_conc;

    /* the same burst for both: the larger request's cost */
    burst = (uint64_t) o->a_prompt + o->a_gen;
    if (burst < (uint64_t) o->b_prompt + o->b_gen) {
        burst = (uint64_t) o->b_prompt + o->b_gen;
    }

    for (ti = 0; ti < BF_N_TENANTS; ti++) {
        if (run->policy == BF_NONE) {
            continue;
        }

        t[ti].limited = 1;

        if (run->policy == BF_COUNT) {
            /* a request costs BF_COUNT_UNIT; rate in units per minute */
            rc = kvs_limit_conf_init(&t[ti].lc,
                     (uint64_t) llround(run->rate * 60 * BF_COUNT_UNIT),
                     60000, BF_COUNT_UNIT, KVS_LIMIT_NODELAY, err);

        } else if (run->policy == BF_KVSERVE) {
            rc = kvs_limit_conf_init(&t[ti].lc,
                     (uint64_t) llround(run->rate * 60), 60000, burst,
                     KVS_LIMIT_NODELAY, err);

        } else if (run->policy >= BF_KVRATE) {
            /* a token bucket whose window is kv_window seconds (1 t/s,
             * burst kv_window), which kv_rate's bucket takes for its own
             * size, as kvserve_limit_zone does */
            rc = kvs_limit_conf_init(&tok, 1, 1000,
                                     (uint64_t) o->kv_window,
                                     KVS_LIMIT_NODELAY, err);
            if (rc == KVS_OK) {
                rc = kvs_limit_kv_conf_init(&t[ti].lc, &tok,
                         (uint64_t) llround(run->rate), err);
            }
        }

        if (rc != KVS_OK) {
            goto done;
        }

        kvs_limit_state_init(&t[ti].ls, 0);
    }

    rng = o->seed * 0x9e3779b97f4a7c15ULL + (uint64_t) run->policy + 1;
    t0 = bf_now();
    last = t0;

    for ( ;; ) {
        now = bf_now();
        if (now - t0 >= o->seconds) {
            break;
        }

        now_ms = (uint64_t) ((now - t0) * 1000);

        rc = bf_submit(e, o, run, slots, prompt, n_ids, &rng, now_ms, err);
        if (rc != KVS_OK) {
            goto done;
        }

        step0 = bf_now();
        worked = kvs_engine_step(e);
        now = bf_now();

        if (worked) {
            run->busy += now - step0;
        }

        /*
         * What each tenant held since the last step, until now: from the
         * last step's end to this one's start, what it held after the
         * last step (nothing changes between steps); through this step,
         * what it holds after it, plus (below, as they are read) the
         * blocks of its requests that ended in it, which they held
         * until the step's sampling.  The pool's count after the step
         * is exact, so when the tenants' sum is over it both are scaled
         * down to it (kv_corr: the block-seconds that took off).
         */
        kvs_engine_tenants(e, &tn);
        kvs_engine_stats(e, &st);
        held[0] = 0;
        held[1] = 0;

        for (ti = 0; ti < BF_N_TENANTS; ti++) {
            row = NULL;

            for (j = 0; j < tn.n_top; j++) {
                if (tn.top[j].key_len == 1
                    && tn.top[j].key[0] == t[ti].key[0])
                {
                    row = &tn.top[j];
                }
            }

            if (row == NULL) {
                continue;
            }

            held[ti] = row->kv_blocks;
            t[ti].prefill = row->prefill;
            t[ti].decode = row->decode;
        }

        raw = (double) held[0] + held[1];
        scale = raw > st.kv_used ? st.kv_used / raw : 1.0;
        run->kv_raw += raw * (now - last);

        for (ti = 0; ti < BF_N_TENANTS; ti++) {
            t[ti].kv_bs += t[ti].held_prev * (step0 - last)
                           + held[ti] * scale * (now - step0);
            t[ti].held_prev = held[ti] * scale;

            if (run->policy == BF_KVMETER) {
                t[ti].kv_owed += held[ti] * scale * (now - last) * o->block
                                 * (double) run->kv_bpt / 1024;
            }
            run->kv_kept += held[ti] * scale * (now - last);

            if (held[ti] * scale > t[ti].kv_max) {
                t[ti].kv_max = (uint32_t) (held[ti] * scale);
            }
        }

        last = now;
        now_ms = (uint64_t) ((now - t0) * 1000);

        while ((k = kvs_engine_ready(e, ready, 64)) > 0) {
            for (i = 0; i < k; i++) {
                s = (uint32_t) (uintptr_t) kvs_engine_seq_data(ready[i]);

                if (kvs_engine_read(e, ready[i], &slots[s].out) < 0) {
                    rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
                    goto done;
                }

                if (slots[s].first_ns == 0 && slots[s].out.n_tokens > 0) {
                    slots[s].first_ns = bf_now_ns();
                }

                if (slots[s].out.finish == KVS_FINISH_NONE) {
                    continue;
                }

                ti = slots[s].tenant;

                /* it held its blocks through the step it ended in */
                t[ti].kv_bs += (double) ((t[ti].prompt
                                          + slots[s].out.n_generated
                                          + o->block - 1) / o->block)
                               * (now - step0);
                t[ti].kv_eng += (double) slots[s].out.kv_block_us / 1e6;

                if (slots[s].out.finish != KVS_FINISH_LENGTH) {
                    rc = kvs_err_set(err, KVS_EFORMAT, "tenant %s: a "
                                     "request ended %s: %s", t[ti].key,
                                     kvs_finish_name(slots[s].out.finish),
                                     slots[s].out.error);
                    goto done;
                }

                if (t[ti].limited && (run->policy == BF_KVRATE
                                      || run->policy == BF_KVEST))
                {
                    bf_settle_kv(run, &t[ti], &slots[s], now_ms);

                } else if (t[ti].limited && run->policy == BF_KVMETER) {
                    (void) kvs_limit_cancel(&t[ti].lc, &t[ti].ls, now_ms,
                                            &slots[s].resv);

                } else if (t[ti].limited) {
                    (void) kvs_limit_settle(&t[ti].lc, &t[ti].ls, now_ms,
                                            &slots[s].resv,
                                            slots[s].out.n_generated);
                }

                kvs_engine_close(e, ready[i]);
                slots[s].h = NULL;
                t[ti].inflight--;
                t[ti].finished++;
            }
        }

        inflight = t[0].inflight + t[1].inflight;

        if (!worked && inflight > 0) {
            /* nothing runnable yet but something queued: a bug */
            kvs_engine_stats(e, &st);
            if (st.waiting == 0 && st.running == 0) {
                rc = kvs_err_set(err, KVS_EFORMAT, "engine idle with %"
                                 PRIu32 " requests in flight", inflight);
                goto done;
            }
        }

        if (!worked) {
            /* waiting for a limiter: do not spin */
            usleep(1000);
        }
    }

    run->wall = bf_now() - t0;
    kvs_engine_stats(e, &st);
    run->preemptions = st.preemptions;

done:

    if (slots != NULL) {
        for (s = 0; s < BF_MAX_SLOTS; s++) {
            if (slots[s].h != NULL) {
                /* in flight at the end: its count as of its last read */
                run->t[slots[s].tenant].kv_eng +=
                    (double) slots[s].out.kv_block_us / 1e6;
                kvs_engine_close(e, slots[s].h);
            }

            kvs_engine_out_free(&slots[s].out);
        }
    }

    free(slots);
    free(prompt);
    kvs_engine_free(e);

    return rc;
}


/*
 * Tops up each tenant to its in-flight limit, through its limiter; a
 * refused request is retried once its bucket can take it.  Tenants are
 * visited from a rotating start, so neither always submits first.
 */
static int
bf_submit(kvs_engine_t *e, const bf_opts_t *o, bf_run_t *run,
    bf_slot_t *slots, int32_t *prompt, uint32_t n_ids, uint64_t *rng,
    uint64_t now_ms, kvs_err_t *err)
{
    uint32_t              s, i, x, ti;
    uint64_t              cost, refundable;
    bf_tenant_t          *t;
    kvs_engine_req_t      req;
    kvs_limit_resv_t      resv;
    kvs_limit_decision_t  d;

    memset(&req, 0, sizeof(req));
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;
    s = 0;

    for (x = 0; x < BF_N_TENANTS; x++) {
        ti = (x + (uint32_t) (now_ms & 1)) % BF_N_TENANTS;
        t = &run->t[ti];

        while (t->inflight < t->conc) {
            memset(&resv, 0, sizeof(resv));
            resv.settled = 1;

            if (t->limited) {
                if (now_ms < t->retry_at_ms) {
                    break;
                }

                if (run->policy == BF_COUNT) {
                    cost = BF_COUNT_UNIT;
                    refundable = 0;

                } else if (run->policy >= BF_KVRATE)
                {
                    if (run->policy == BF_KVMETER
                        && bf_meter(t, now_ms, err) != KVS_OK)
                    {
                        return err->code;
                    }

                    if (t->kv_owed >= 1) {
                        /* in debt: no admission until it is paid */
                        t->refused++;
                        t->retry_at_ms = now_ms + 10;
                        break;
                    }

                    cost = kvs_limit_kv_cost((uint64_t) t->prompt + t->gen,
                                             run->kv_bpt);
                    refundable = 0;

                } else {
                    cost = (uint64_t) t->prompt + t->gen;
                    refundable = t->gen;
                }

                if (kvs_limit_reserve(&t->lc, &t->ls, now_ms, cost,
                                      refundable, &resv, &d, err)
                    != KVS_OK)
                {
                    return err->code;
                }

                if (d.verdict == KVS_LIMIT_NEVER) {
                    return kvs_err_set(err, KVS_EINVAL, "tenant %s: a "
                                       "request over the burst", t->key);
                }

                if (d.verdict != KVS_LIMIT_PASSED) {
                    t->refused++;
                    t->retry_at_ms = now_ms + (d.retry_ms > 0
                                               ? d.retry_ms : 1);
                    break;
                }
            }

            while (s < BF_MAX_SLOTS && slots[s].h != NULL) {
                s++;
            }

            if (s == BF_MAX_SLOTS) {
                return kvs_err_set(err, KVS_ENOMEM, "no free slot");
            }

            /* random ids: no prefix is shared between requests */
            for (i = 0; i < t->prompt; i++) {
                prompt[i] = (int32_t) bf_rand(rng, n_ids);
            }

            req.prompt = prompt;
            req.n_prompt = t->prompt;
            req.max_tokens = t->gen;
            req.tenant = t->key;
            req.tenant_len = 1;
            req.data = (void *) (uintptr_t) s;

            if (kvs_engine_submit(e, &req, &slots[s].h, err) != KVS_OK) {
                slots[s].h = NULL;
                return err->code;
            }

            slots[s].tenant = ti;
            slots[s].resv = resv;
            slots[s].submit_ns = bf_now_ns();
            slots[s].first_ns = 0;
            slots[s].out.n_tokens = 0;
            slots[s].out.text.len = 0;
            slots[s].out.finish = KVS_FINISH_NONE;
            t->inflight++;
            t->submitted++;
        }
    }

    (void) o;

    return KVS_OK;
}


static void
bf_print(const bf_opts_t *o, const bf_run_t *runs, size_t n)
{
    size_t              i;
    double              ta, tb, st, sk, ka, kb;
    const bf_run_t     *r;
    const char         *rate_unit;

    printf("\n| policy | limit per tenant | A tokens | B tokens | A share "
           "of tokens | A KV block-s | B KV block-s | A share of KV "
           "block-s | A share, engine's count | A/B tokens | A/B KV | "
           "A done | B done | busy |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");

    for (i = 0; i < n; i++) {
        r = &runs[i];
        ta = (double) (r->t[0].prefill + r->t[0].decode);
        tb = (double) (r->t[1].prefill + r->t[1].decode);
        ka = r->t[0].kv_bs;
        kb = r->t[1].kv_bs;
        st = bf_share(ta, tb);
        sk = bf_share(ka, kb);
        rate_unit = r->policy == BF_COUNT ? "req/s"
                    : r->policy == BF_KVSERVE ? "tok/s"
                    : r->policy >= BF_KVRATE ? "KiB/s" : "";

        if (r->policy == BF_NONE) {
            printf("| %s | - ", bf_policy_name(r->policy));
        } else {
            printf("| %s | %.4g %s ", bf_policy_name(r->policy), r->rate,
                   rate_unit);
        }

        printf("| %.0f | %.0f | %.1f%% | %.0f | %.0f | %.1f%% | %.1f%% "
               "| %.2f | %.2f | %" PRIu64 " | %" PRIu64 " | %.0f%% |\n", ta,
               tb, 100 * st, ka, kb, 100 * sk,
               100 * bf_share(r->t[0].kv_eng, r->t[1].kv_eng),
               tb > 0 ? ta / tb : 0,
               kb > 0 ? ka / kb : 0, r->t[0].finished, r->t[1].finished,
               r->wall > 0 ? 100 * r->busy / r->wall : 0);
    }

    printf("\n");

    for (i = 0; i < n; i++) {
        r = &runs[i];
        printf("fair_run policy=%s rate=%.6g wall=%.1f busy=%.1f "
               "preemptions=%" PRIu64 " kv_corr=%.4f cache_tokens=%" PRIu32
               " a_prompt=%" PRIu32 " b_prompt=%" PRIu32
               " a_prefill=%" PRIu64 " a_decode=%" PRIu64
               " b_prefill=%" PRIu64 " b_decode=%" PRIu64
               " a_kv_bs=%.1f b_kv_bs=%.1f a_kv_max=%" PRIu32
               " b_kv_max=%" PRIu32 " a_done=%" PRIu64 " b_done=%" PRIu64
               " a_refused=%" PRIu64 " b_refused=%" PRIu64
               " a_kv_est=%" PRIu64 " b_kv_est=%" PRIu64
               " a_kv_forgiven=%" PRIu64 " b_kv_forgiven=%" PRIu64
               " a_kv_eng=%.1f b_kv_eng=%.1f"
               " share_tokens=%.4f share_kv=%.4f share_kv_eng=%.4f\n",
               bf_policy_name(r->policy), r->rate, r->wall, r->busy,
               r->preemptions,
               r->kv_raw > 0 ? 1 - r->kv_kept / r->kv_raw : 0,
               o->cache_tokens, o->a_prompt, o->b_prompt,
               r->t[0].prefill, r->t[0].decode, r->t[1].prefill,
               r->t[1].decode, r->t[0].kv_bs, r->t[1].kv_bs, r->t[0].kv_max,
               r->t[1].kv_max, r->t[0].finished, r->t[1].finished,
               r->t[0].refused, r->t[1].refused,
               r->t[0].kv_settled, r->t[1].kv_settled,
               r->t[0].kv_forgiven, r->t[1].kv_forgiven,
               r->t[0].kv_eng, r->t[1].kv_eng,
               bf_share((double) (r->t[0].prefill + r->t[0].decode),
                        (double) (r->t[1].prefill + r->t[1].decode)),
               bf_share(r->t[0].kv_bs, r->t[1].kv_bs),
               bf_share(r->t[0].kv_eng, r->t[1].kv_eng));
    }
}


static const char *
bf_policy_name(bf_policy_t p)
{
    switch (p) {
    case BF_COUNT:
        return "count";
    case BF_KVRATE:
        return "kvrate";
    case BF_KVMETER:
        return "kvmeter";
    case BF_KVEST:
        return "kvest";
    case BF_KVSERVE:
        return "kvserve";
    default:
        return "none";
    }
}


static double
bf_share(double a, double b)
{
    return a + b > 0 ? a / (a + b) : 0;
}


/* xorshift64*: seeded, the same prompts for the same seed */
static uint32_t
bf_rand(uint64_t *s, uint32_t n)
{
    uint64_t  x;

    x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;

    return (uint32_t) ((x * 0x2545f4914f6cdd1dULL) >> 32) % n;
}


/*
 * kvrate: the request's reservation settled to what it held by the
 * engine's count, as a worker does (ngx_http_kvserve_limit_admit.c);
 * kvest: to the estimate from its stamps.  What the bucket did not take
 * is counted as forgiven (none since debt is kept: 0 is the check).
 */
static void
bf_settle_kv(const bf_run_t *run, bf_tenant_t *t, bf_slot_t *slot,
    uint64_t now_ms)
{
    uint64_t             held, more, cost;
    kvs_limit_kv_hold_t  h;

    memset(&h, 0, sizeof(h));
    h.prompt_tokens = t->prompt;
    h.generated = slot->out.n_generated;
    h.bytes_per_token = run->kv_bpt;
    h.submit_ns = slot->submit_ns;
    h.first_ns = slot->first_ns;

    if (run->policy == BF_KVRATE) {
        h.engine_block_us = slot->out.kv_block_us;
        h.engine_ns = bf_now_ns();
        h.block_tokens = run->block;
        h.engine_done = 1;
    }

    held = kvs_limit_kv_held(&h, bf_now_ns());
    cost = slot->resv.cost;

    (void) kvs_limit_settle_actual(&t->lc, &t->ls, now_ms, &slot->resv,
                                   held, &more);

    t->kv_settled += held;

    if (held > cost && held - cost > more) {
        t->kv_forgiven += held - cost - more;
    }
}


/* kvmeter: charges what the tenant held since the last call, as far as
 * its bucket has room; the rest stays owed */
static int
bf_meter(bf_tenant_t *t, uint64_t now_ms, kvs_err_t *err)
{
    uint64_t              room, pay;
    kvs_limit_resv_t      resv;
    kvs_limit_decision_t  d;

    room = kvs_limit_remaining(&t->lc, &t->ls, now_ms);
    pay = (uint64_t) t->kv_owed;
    pay = pay > room ? room : pay;

    if (pay == 0) {
        return KVS_OK;
    }

    if (kvs_limit_reserve(&t->lc, &t->ls, now_ms, pay, 0, &resv, &d, err)
        != KVS_OK)
    {
        return err->code;
    }

    if (d.verdict == KVS_LIMIT_PASSED) {
        t->kv_owed -= (double) pay;
        t->kv_settled += pay;
    }

    return KVS_OK;
}


static uint64_t
bf_now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}


static double
bf_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


static void
bf_usage(FILE *f)
{
    fprintf(f,
        "usage: bench_fair [options]\n"
        "  --cache-tokens N   KV cache size in tokens (100000)\n"
        "  --a-prompt N       A's prompt (0: the cache less a-gen and a "
        "block, at most 100000)\n"
        "  --b-prompt N       B's prompt (2048)\n"
        "  --a-gen N --b-gen N  output tokens, all generated (32)\n"
        "  --a-conc N         A's requests in flight (2)\n"
        "  --b-conc N         B's (0: the cache's worth + 2)\n"
        "  --seconds S        wall time of each policy (600)\n"
        "  --policies LIST    of none,count,kvserve,kvrate,kvmeter,kvest "
        "(the first three)\n"
        "  --rate-req R       count: requests/s per tenant (0: from none)\n"
        "  --rate-tok R       kvserve: tokens/s per tenant (0: from none)\n"
        "  --rate-kv R        kvrate: kv_rate, KiB/s per tenant (0: half "
        "what none held)\n"
        "  --kv-window S      kvrate: the bucket holds S seconds of it "
        "(10)\n"
        "  --w-prefill N --w-decode N  kvserve's VTC weights (1, 2)\n"
        "  --kv-max-milli N   kvserve's KV cap, 1/1000 of the cache (500)\n"
        "  --no-prefix-cache  --block N (16)  --max-batch-tokens N (2048)\n"
        "  --threads N (0: every CPU)  --seed N (1)\n");
}
