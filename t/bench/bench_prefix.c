/*
 * bench_prefix: what the prefix cache saves (issue 6), through the whole
 * engine driven on this thread (kvs_engine_step), on a generated model
 * (seeded random weights; the "tiny" shape with a long context) or a
 * given one.  Prompts are random token ids below the special tokens;
 * replies are greedy with end tokens ignored, so their lengths are known.
 *
 *   bench_prefix trace [options]
 *     A seeded multi-turn chat: U users, T turns each, all opening with
 *     the same S-token system prompt; turn t's prompt is the system
 *     prompt, the user's earlier messages with the model's actual replies,
 *     and a new message, so it is built only once turn t-1 has ended.
 *     Each user's first message starts with a token of its own, so users
 *     share exactly the system prompt.  With --turns-mean M each user's
 *     number of turns is instead drawn geometric with mean M (at most
 *     T), so most conversations are short and users come and go.  C
 *     requests run at once; users arrive in a seeded random order (or
 *     round robin).  Runs with the cache off, then on for pools sized
 *     to fractions of the working set (below).  Prints prompt tokens,
 *     prefill tokens computed (engine stats), the hit rate (sum of
 *     n_cached over sum of prompt tokens), the best possible hit rate
 *     for that trace and pool (below), their ratio, reference replays
 *     (LRU, LRU knowing each conversation's last turn, the earlier
 *     bound), and whether every reply equals the cache-off run's.
 *
 *   bench_prefix ttft [options]
 *     Time to first token for prompts of 8k..64k random tokens: cold
 *     (cache off; and a fresh prompt with the cache on), the same prompt
 *     again (a full-prefix hit), and a follow-up: prompt + reply + a new
 *     message.
 *
 * The best possible hit rate replays the run's events (submissions,
 * first tokens, ends, in the order they happened) over whole blocks (a
 * block: block_tokens tokens after a given prefix) through a pool of the
 * engine's size that holds, as the engine's must, the blocks of the
 * running requests as well as the cache.  A request looks up at its
 * submission: its leading cached blocks, then the leading matching
 * tokens of one more cached block (a copy-on-write share), capped at its
 * prompt length - 1; it locks what it reuses and takes blocks for the
 * rest of its prompt; its prompt's blocks become cacheable (locked) at
 * its first token, the prompt's being computed then, and its reply's at
 * its end, when it takes their blocks (the engine needs them sooner:
 * generous) and lets go.  Eviction, when a request needs blocks, takes
 * any unlocked block by Belady's rule: the one next read furthest in the
 * future, deepest first on ties; no eviction rule gets more block hits
 * from the same pool and events.  With a pool that holds the working set
 * nothing is evicted and this is the infinite-cache bound ("best, inf
 * cache").  The same replay evicting the least recently used leaf is
 * "LRU replay" (the engine's rule: it follows the engine to 0.2 points),
 * and evicting leaves of conversations that have ended first, "LRU,
 * last turns known": an online cache that knew which turn is a
 * conversation's last, which none does.  "Belady, no room for running"
 * is the earlier bound: requests replayed in submission order, a block
 * cacheable from the submission of a request holding it, a cache of the
 * whole pool as if running requests needed no room, Belady with bypass;
 * it is reachable by no engine (with the pool full of cached blocks, a
 * running request must still hold its whole conversation somewhere).
 *
 * Pools: "fraction x working set" is that many blocks of the trace's
 * working set (the distinct whole blocks of all conversations) plus what
 * the running requests add (a message and a reply each); the cache-off
 * run gets the whole working set.  The ttft part's cold time beyond
 * --off-max is the cache-on engine's on a fresh prompt (a 64k-token cold
 * prefill takes minutes on two cores).
 *
 * Output: markdown tables, then one "prefix_trace ..." or "prefix_ttft
 * ..." line per row for scripts.
 */

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/kvs_engine.h"
#include "gen/kvs_gen.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"

#define BP_MAX_CONC    64
#define BP_MAX_ROWS    8
#define BP_NONE        UINT32_MAX     /* no block, no next use */

/* a run's events, (request << 2) | kind, in the order they happened */
#define BP_EV_SUBMIT   0              /* submitted and looked up */
#define BP_EV_PREFILL  1              /* first token: prompt computed */
#define BP_EV_END      2              /* reply ended */

/* the pool replays' eviction rules */
#define BP_BELADY      0              /* furthest next use */
#define BP_LRU         1              /* least recently used leaf */
#define BP_LRU_ENDS    2              /* LRU, ended conversations first */


typedef struct {
    const char  *model;               /* NULL: generate one */
    uint32_t     users;
    uint32_t     turns;               /* each; with turns_mean, at most */
    uint32_t     turns_mean;          /* 0: every user has `turns` */
    uint32_t     system;              /* tokens of the shared prompt */
    uint32_t     msg_min;
    uint32_t     msg_max;
    uint32_t     reply;               /* tokens of every reply */
    uint32_t     conc;                /* requests in flight */
    int          rr;                  /* round robin arrivals */
    uint32_t     off_max;             /* ttft: longest prompt timed with
                                         the cache off too */
    const char  *cache;               /* fractions of the working set */
    const char  *sizes;               /* ttft prompt lengths */
    uint32_t     ttft_reply;
    uint32_t     ttft_msg;            /* follow-up message tokens */
    uint32_t     ctx;                 /* generated model's context */
    uint32_t     block;
    uint32_t     max_batch_tokens;
    unsigned     threads;
    uint64_t     seed;
    double       tier;                /* trace: a disk tier of this
                                         fraction of the working set for
                                         every cache-on run; 0: none */
    int          no_off;              /* trace: no cache-off run; the
                                         first cache-on run's replies
                                         are the reference */
    int          tier_always;         /* load whatever the cost model
                                         says */
} bp_opts_t;

typedef struct {
    kvs_model_t  *m;
    kvs_vocab_t  *v;
    uint32_t      n_ids;              /* ids below the special tokens */
} bp_model_t;

/* The chat, the same for every run; replies come from each run. */
typedef struct {
    int32_t    *system;               /* [n_system] */
    int32_t    *msgs;                 /* every message's tokens */
    uint32_t   *msg_off;              /* [users * turns] into msgs */
    uint32_t   *msg_len;              /* [users * turns] */
    uint32_t   *plan;                 /* [n_req] arrival order */
    uint32_t   *n_turns;              /* [users] turns of each user */
    uint32_t    n_req;                /* requests: the sum of n_turns */
    uint32_t    hist_cap;             /* tokens of a whole conversation */
    uint32_t    max_seq;              /* blocks one request may need */
    uint32_t    max_new;              /* of those, past its last turn's */
    uint64_t    ws;                   /* working set, blocks */
} bp_trace_t;

typedef struct {
    int32_t          **hist;          /* [users][hist_cap] conversations */
    uint32_t          *hist_len;      /* [users] */
    uint32_t          *reply_off;     /* [users * turns] into hist[u] */
    uint32_t          *reply_len;
    uint32_t          *cached;        /* [users * turns] n_cached */
    uint32_t          *ord_user;      /* [n] in submission order */
    uint32_t          *ord_prompt;    /* prompt tokens */
    uint32_t          *ord_kv;        /* prompt + reply tokens */
    double            *ttft;          /* [n] in submission order, s */
    uint32_t          *ev;            /* [3 * n] BP_EV_* events */
    uint32_t           n_ev;
    uint32_t           n_req;         /* requests submitted */
    uint64_t           prompt_tokens;
    uint64_t           cached_tokens;
    double             wall;
    kvs_engine_stats_t st;
} bp_run_t;

/* A whole block of some conversation, for the best-possible replay. */
typedef struct {
    const int32_t  *tok;              /* [block] */
    uint32_t        parent;           /* BP_NONE: the first block */
    uint32_t        depth;
    uint32_t       *use;              /* [n_use] requests reading it */
    uint32_t        n_use;
    uint32_t        use_cap;
    uint32_t        next;             /* first use not yet passed */
    uint32_t        last;             /* LRU: last event touching it */
    uint32_t        lock;             /* running requests holding it */
    uint32_t        slot;             /* in the cached list, BP_NONE */
    uint32_t        hnext;            /* hash chain */
} bp_blk_t;

typedef struct {
    bp_blk_t   *b;
    uint32_t    n;
    uint32_t    cap;
    uint32_t   *head;                 /* [n_head] hash chains */
    uint32_t    n_head;
    uint32_t  **ids;                  /* [users][blocks] */
    uint32_t   *n_ids;                /* [users] */
    uint32_t   *cached;               /* [n_cached] block ids */
    uint32_t    n_cached;
} bp_blocks_t;


static int bp_args(int argc, char **argv, bp_opts_t *o);
static int bp_model(const bp_opts_t *o, bp_model_t *md, kvs_err_t *err);
static int bp_engine(kvs_engine_t **e, const bp_opts_t *o,
    const bp_model_t *md, uint32_t n_blocks, int cache, uint64_t tier_blocks,
    kvs_err_t *err);
static void bp_tier_report(const bp_opts_t *o, const bp_run_t *run,
    const bp_run_t *off, double f);
static int bp_trace(const bp_opts_t *o);
static void bp_events_write(const bp_run_t *run, double frac);
static int bp_trace_make(const bp_opts_t *o, const bp_model_t *md,
    bp_trace_t *tr);
static int bp_trace_run(kvs_engine_t *e, const bp_opts_t *o,
    const bp_trace_t *tr, bp_run_t *run, kvs_err_t *err);
static int bp_run_alloc(const bp_opts_t *o, const bp_trace_t *tr,
    bp_run_t *run);
static void bp_run_free(const bp_opts_t *o, bp_run_t *run);
static uint32_t bp_replies_diff(const bp_opts_t *o, const bp_run_t *a,
    const bp_run_t *b);
static uint64_t bp_replies_hash(const bp_opts_t *o, const bp_run_t *a);
static int bp_blocks_build(const bp_opts_t *o, const bp_run_t *run,
    bp_blocks_t *bl);
static void bp_blocks_free(const bp_opts_t *o, bp_blocks_t *bl);
static uint64_t bp_replay(const bp_opts_t *o, const bp_run_t *run,
    bp_blocks_t *bl, uint64_t cap, int lru);
static uint64_t bp_replay_pool(const bp_opts_t *o, const bp_run_t *run,
    bp_blocks_t *bl, uint64_t cap, int rule, uint64_t *shortfall);
static int bp_ttft(const bp_opts_t *o);
static int bp_ttft_one(kvs_engine_t *e, const bp_opts_t *o,
    const int32_t *prompt, uint32_t n, kvs_engine_out_t *out,
    double *ttft, kvs_err_t *err);
static void bp_fill(int32_t *t, uint32_t n, uint64_t *rng, uint32_t n_ids);
static uint32_t bp_rand(uint64_t *s, uint32_t n);
static double bp_now(void);
static void bp_usage(FILE *f);


int
main(int argc, char **argv)
{
    bp_opts_t  o;

    if (argc < 2) {
        bp_usage(stderr);
        return 2;
    }

    if (bp_args(argc, argv, &o) != 0) {
        return 2;
    }

    if (strcmp(argv[1], "trace") == 0) {
        return bp_trace(&o);
    }

    if (strcmp(argv[1], "ttft") == 0) {
        return bp_ttft(&o);
    }

    bp_usage(stderr);

    return 2;
}


static int
bp_args(int argc, char **argv, bp_opts_t *o)
{
    int           i, k;
    char         *end;
    const char   *opt;
    unsigned long long  n;

    static const struct {
        const char  *name;
        size_t       off;
    } nums[] = {
        { "--users", offsetof(bp_opts_t, users) },
        { "--turns", offsetof(bp_opts_t, turns) },
        { "--turns-mean", offsetof(bp_opts_t, turns_mean) },
        { "--system", offsetof(bp_opts_t, system) },
        { "--msg-min", offsetof(bp_opts_t, msg_min) },
        { "--msg-max", offsetof(bp_opts_t, msg_max) },
        { "--reply", offsetof(bp_opts_t, reply) },
        { "--conc", offsetof(bp_opts_t, conc) },
        { "--ttft-reply", offsetof(bp_opts_t, ttft_reply) },
        { "--ttft-msg", offsetof(bp_opts_t, ttft_msg) },
        { "--off-max", offsetof(bp_opts_t, off_max) },
        { "--ctx", offsetof(bp_opts_t, ctx) },
        { "--block", offsetof(bp_opts_t, block) },
        { "--max-batch-tokens", offsetof(bp_opts_t, max_batch_tokens) },
    };

    memset(o, 0, sizeof(bp_opts_t));
    o->users = 32;
    o->turns = 8;
    o->system = 512;
    o->msg_min = 32;
    o->msg_max = 96;
    o->reply = 32;
    o->conc = 4;
    o->cache = "1,0.5,0.25";
    o->sizes = "8192,16384,32768,65536";
    o->ttft_reply = 16;
    o->ttft_msg = 64;
    o->off_max = 32768;
    o->ctx = 65536 + 4096;
    o->block = 16;
    o->max_batch_tokens = 2048;
    o->seed = 1;

    for (i = 2; i < argc; i++) {
        opt = argv[i];

        if (strcmp(opt, "--rr") == 0) {
            o->rr = 1;
            continue;
        }

        if (strcmp(opt, "--tier-always") == 0) {
            o->tier_always = 1;
            continue;
        }

        if (strcmp(opt, "--no-off") == 0) {
            o->no_off = 1;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "bench_prefix: %s needs a value\n", opt);
            return -1;
        }

        i++;

        if (strcmp(opt, "--model") == 0) {
            o->model = argv[i];
            continue;
        }

        if (strcmp(opt, "--cache") == 0) {
            o->cache = argv[i];
            continue;
        }

        if (strcmp(opt, "--sizes") == 0) {
            o->sizes = argv[i];
            continue;
        }

        if (strcmp(opt, "--tier") == 0) {
            o->tier = strtod(argv[i], &end);
            if (*end != '\0' || end == argv[i] || !(o->tier >= 0.0)
                || o->tier > 100.0)
            {
                fprintf(stderr, "bench_prefix: --tier: not a fraction "
                        "0..100 \"%s\"\n", argv[i]);
                return -1;
            }
            continue;
        }

        n = strtoull(argv[i], &end, 10);
        if (*end != '\0' || end == argv[i]) {
            fprintf(stderr, "bench_prefix: %s: not a number \"%s\"\n", opt,
                    argv[i]);
            return -1;
        }

        if (strcmp(opt, "--seed") == 0) {
            o->seed = n;
            continue;
        }

        if (strcmp(opt, "--threads") == 0) {
            o->threads = (unsigned) n;
            continue;
        }

        for (k = 0; k < (int) (sizeof(nums) / sizeof(nums[0])); k++) {
            if (strcmp(opt, nums[k].name) == 0) {
                break;
            }
        }

        if (k == (int) (sizeof(nums) / sizeof(nums[0])) || n > UINT32_MAX) {
            fprintf(stderr, "bench_prefix: bad option %s %s\n", opt,
                    argv[i]);
            bp_usage(stderr);
            return -1;
        }

        *(uint32_t *) ((char *) o + nums[k].off) = (uint32_t) n;
    }

    if (o->users == 0 || o->turns == 0 || o->msg_min == 0
        || o->msg_max < o->msg_min || o->reply == 0 || o->conc == 0
        || o->conc > BP_MAX_CONC || o->block == 0 || o->ttft_reply == 0
        || o->ttft_msg == 0 || o->turns_mean > o->turns)
    {
        fprintf(stderr, "bench_prefix: users, turns, msg-min, reply, "
                "block, ttft-reply and ttft-msg must be >= 1, msg-max >= "
                "msg-min, turns-mean <= turns, conc 1..%d\n", BP_MAX_CONC);
        return -1;
    }

    return 0;
}


/* Opens o->model, or writes the generated one to KVS_TMP and opens it
 * (the file is unlinked once open). */
static int
bp_model(const bp_opts_t *o, bp_model_t *md, kvs_err_t *err)
{
    char            path[512];
    const char     *tmp;
    kvs_gen_spec_t  spec;

    md->m = NULL;
    md->v = NULL;

    if (o->model != NULL) {
        snprintf(path, sizeof(path), "%s", o->model);

    } else {
        if (kvs_gen_preset(&spec, "tiny", err) != KVS_OK) {
            return err->code;
        }

        spec.n_ctx = o->ctx;
        spec.seed = o->seed;
        snprintf(spec.name, sizeof(spec.name), "bench-prefix");

        tmp = getenv("KVS_TMP");
        snprintf(path, sizeof(path), "%s/bench_prefix.%d.gguf",
                 tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp",
                 (int) getpid());

        if (kvs_gen_write(&spec, path, err) != KVS_OK) {
            return err->code;
        }
    }

    if (kvs_model_open(&md->m, path, err) != KVS_OK) {
        md->m = NULL;
        goto failed;
    }

    if (kvs_vocab_load(&md->v, md->m->gguf, err) != KVS_OK) {
        md->v = NULL;
        kvs_model_close(md->m);
        md->m = NULL;
        goto failed;
    }

    /* generated vocabularies end with their special tokens */
    md->n_ids = md->m->hp.n_vocab > KVS_GEN_N_SPECIAL + 1
                ? md->m->hp.n_vocab - KVS_GEN_N_SPECIAL : md->m->hp.n_vocab;

failed:

    if (o->model == NULL) {
        unlink(path);
    }

    return md->m != NULL ? KVS_OK : err->code;
}


/* The disk tier's file of a trace run (KVS_TMP), one per process. */
static const char *
bp_tier_path(void)
{
    static char  path[4096];

    snprintf(path, sizeof(path), "%s/bench_prefix.%d.tier",
             getenv("KVS_TMP") != NULL ? getenv("KVS_TMP") : "/tmp",
             (int) getpid());

    return path;
}


/* An engine; with tier_blocks > 0 (and the cache on), a disk tier that
 * holds that many blocks, in a fresh file. */
static int
bp_engine(kvs_engine_t **e, const bp_opts_t *o, const bp_model_t *md,
    uint32_t n_blocks, int cache, uint64_t tier_blocks, kvs_err_t *err)
{
    uint64_t           slot;
    kvs_engine_conf_t  conf;

    slot = 0;

    if (cache && tier_blocks > 0) {
        /* the block's bytes, from an engine of the same shape */
        if (bp_engine(e, o, md, n_blocks, 1, 0, err) != KVS_OK) {
            return err->code;
        }

        slot = 512 + 4 * (uint64_t) o->block
               + kvs_engine_kv_bytes(*e) / n_blocks;
        slot = (slot + 4095) / 4096 * 4096;
        kvs_engine_free(*e);
        *e = NULL;
        unlink(bp_tier_path());
    }

    memset(&conf, 0, sizeof(conf));
    conf.model = md->m;
    conf.vocab = md->v;
    conf.n_blocks = n_blocks;
    conf.block_tokens = o->block;
    conf.threads = o->threads;
    conf.max_batch_tokens = o->max_batch_tokens;
    conf.no_prefix_cache = !cache;

    if (cache && tier_blocks > 0) {
        conf.tier_path = bp_tier_path();
        conf.tier_size = 4096 + tier_blocks * slot;
        conf.tier_model = 1;
        conf.tier_load_always = o->tier_always;
    }

    if (kvs_engine_new(e, &conf, err) != KVS_OK) {
        *e = NULL;
        return err->code;
    }

    return KVS_OK;
}


/* The p-th percentile (0..100) of v[n], nearest rank; 0 for n 0. */
static double
bp_pct(const double *v, uint32_t n, double p)
{
    double    x, *c;
    uint32_t  i, j, k;

    if (n == 0 || (c = malloc(n * sizeof(double))) == NULL) {
        return 0.0;
    }

    memcpy(c, v, n * sizeof(double));

    for (i = 1; i < n; i++) {
        x = c[i];
        for (j = i; j > 0 && c[j - 1] > x; j--) {
            c[j] = c[j - 1];
        }
        c[j] = x;
    }

    k = (uint32_t) (p / 100.0 * n + 0.999999);
    k = k < 1 ? 1 : k > n ? n : k;
    x = c[k - 1];
    free(c);

    return x;
}


/* A run's TTFT p50/p99 against the cache-off run's, and what its disk
 * tier did: one line for the table's reader, one for scripts. */
static void
bp_tier_report(const bp_opts_t *o, const bp_run_t *run, const bp_run_t *off,
    double f)
{
    double                          p50, p99;
    const kvs_engine_tier_stats_t  *ts = &run->st.tier;

    p50 = bp_pct(run->ttft, run->n_req, 50.0);
    p99 = bp_pct(run->ttft, run->n_req, 99.0);

    printf("  ttft p50 %.1f ms, p99 %.1f ms", p50 * 1e3, p99 * 1e3);

    if (ts->on) {
        printf("; disk tier: %" PRIu64 " prompt tokens loaded (%.2f%% of "
               "prompts), %" PRIu64 " blocks read in %.1f ms by the "
               "loader, %" PRIu64 " requests waited %.1f ms in all, %"
               PRIu64 " spilled, %" PRIu64 " dropped, %" PRIu64
               " corrupt, %" PRIu64 " left to compute (%" PRIu64
               " probes); %" PRIu64 " loads planned at admission, %"
               PRIu64 " blocks loaded from the spill queue",
               run->st.cache_tier_hit_tokens,
               100.0 * (double) run->st.cache_tier_hit_tokens
               / (double) (run->prompt_tokens ? run->prompt_tokens : 1),
               ts->loaded_blocks, (double) ts->load_ns / 1e6,
               ts->load_waits, (double) ts->load_wait_ns / 1e6,
               ts->spilled, ts->spill_dropped, ts->corrupt,
               ts->recomputed_blocks, ts->probes, ts->admit_loads,
               ts->queued_blocks);
    }

    printf("\nprefix_tier frac=%g tier=%g on=%u ttft_p50=%.6f "
           "ttft_p99=%.6f tier_hit=%" PRIu64 " loaded=%" PRIu64
           " load_ns=%" PRIu64 " load_waits=%" PRIu64 " load_wait_ns=%"
           PRIu64 " spilled=%" PRIu64 " dropped=%" PRIu64
           " corrupt=%" PRIu64 " admit_loads=%" PRIu64 " queued=%" PRIu64
           " recomputed=%" PRIu64 "\n", f, ts->on ? o->tier : 0.0,
           (unsigned) ts->on, p50, p99, run->st.cache_tier_hit_tokens,
           ts->loaded_blocks, ts->load_ns, ts->load_waits,
           ts->load_wait_ns, ts->spilled, ts->spill_dropped, ts->corrupt,
           ts->admit_loads, ts->queued_blocks, ts->recomputed_blocks);
    (void) off;
}


/* Part 1: the chat trace. */

static int
bp_trace(const bp_opts_t *o)
{
    int           rc, nr, r, on;
    char         *end, turns[64];
    double        frac[BP_MAX_ROWS], f, hit, best, lru, inf, ends, loose;
    uint32_t      n_blocks, diff;
    uint64_t      best_t, lru_t, inf_t, ends_t, loose_t, cap, sh[4];
    const char   *p;
    kvs_err_t     err;
    bp_model_t    md;
    bp_trace_t    tr;
    bp_run_t      run, off;
    bp_blocks_t   bl;
    kvs_engine_t *e;

    kvs_err_clear(&err);
    memset(&tr, 0, sizeof(tr));
    memset(&off, 0, sizeof(off));
    memset(&run, 0, sizeof(run));
    memset(&bl, 0, sizeof(bl));
    e = NULL;
    rc = 1;

    /* the "off" row, then one per fraction */
    nr = 0;
    p = o->cache;

    while (*p != '\0' && nr < BP_MAX_ROWS) {
        f = strtod(p, &end);
        if (end == p || f <= 0) {
            fprintf(stderr, "bench_prefix: bad --cache \"%s\"\n", o->cache);
            return 2;
        }

        frac[nr++] = f;
        p = *end == ',' ? end + 1 : end;
    }

    if (bp_model(o, &md, &err) != KVS_OK) {
        fprintf(stderr, "bench_prefix: %s\n", err.msg);
        return 1;
    }

    if (bp_trace_make(o, &md, &tr) != KVS_OK) {
        kvs_err_set(&err, KVS_ENOMEM, "out of memory");
        goto failed;
    }

    if (o->turns_mean > 0) {
        snprintf(turns, sizeof(turns), "1..%" PRIu32 " turns (geometric, "
                 "mean %" PRIu32 ")", o->turns, o->turns_mean);
    } else {
        snprintf(turns, sizeof(turns), "%" PRIu32 " turns", o->turns);
    }

    printf("trace: %" PRIu32 " users x %s, %" PRIu32 " requests, system "
           "prompt %" PRIu32 " tokens, messages %" PRIu32 "..%" PRIu32
           " tokens, replies %" PRIu32 " tokens, %" PRIu32 " requests at "
           "once, %s arrivals, seed %" PRIu64 "\n", o->users, turns,
           tr.n_req, o->system, o->msg_min, o->msg_max, o->reply, o->conc,
           o->rr ? "round-robin" : "random", o->seed);
    printf("model: %s (%" PRIu32 " layers, %" PRIu32 " embd, %" PRIu32
           " vocab, ctx %" PRIu32 "), block %" PRIu32 " tokens\n",
           o->model != NULL ? o->model : "generated tiny", md.m->hp.n_layer,
           md.m->hp.n_embd, md.m->hp.n_vocab, md.m->hp.n_ctx_train,
           o->block);
    printf("working set: %" PRIu64 " blocks (the distinct whole blocks of "
           "all prompts and replies); pool = fraction x working set + %"
           PRIu32 " x %" PRIu32 " blocks (what a running request adds)\n",
           tr.ws, o->conc, tr.max_new);
    printf("best possible: Belady replay (furthest next use) of the run's "
           "events over whole blocks through the same pool, running "
           "requests' blocks held; LRU, and LRU with last turns known: "
           "the same replay evicting the least recently used leaf (of ended "
           "conversations first); no room for running: Belady with bypass, "
           "cache = the whole pool, blocks cacheable from submission (the "
           "earlier bound); inf = no eviction\n");
    printf("\n| cache | pool blocks | prompt tokens | prefill computed "
           "| saved | hit rate | best possible | ours / best | LRU replay "
           "| LRU, last turns known | Belady, no room for running "
           "| best, inf cache | replies = off | preempt | wall s |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: | ---: | ---: | --- | ---: | ---: |\n");
    if (o->no_off) {
        printf("(--no-off: no cache-off run; replies are compared with "
               "the first cache-on run's, and \"saved\" is against it)\n");
    }

    fflush(stdout);

    for (r = o->no_off ? 0 : -1; r < nr; r++) {
        on = r >= 0;
        f = on ? frac[r] : 1.0;
        n_blocks = (uint32_t) (f * (double) tr.ws + 0.999)
                   + o->conc * tr.max_new;
        if (!on && n_blocks < o->conc * tr.max_seq) {
            n_blocks = o->conc * tr.max_seq;
        }

        if (n_blocks < tr.max_seq) {
            n_blocks = tr.max_seq;
        }

        if (bp_engine(&e, o, &md, n_blocks, on,
                      on && o->tier > 0
                      ? (uint64_t) (o->tier * (double) tr.ws + 0.999) : 0,
                      &err) != KVS_OK)
        {
            goto failed;
        }

        if (bp_run_alloc(o, &tr, on ? &run : &off) != KVS_OK) {
            kvs_err_set(&err, KVS_ENOMEM, "out of memory");
            goto failed;
        }

        if (bp_trace_run(e, o, &tr, on ? &run : &off, &err) != KVS_OK) {
            goto failed;
        }

        kvs_engine_free(e);
        e = NULL;
        unlink(bp_tier_path());

        if (bp_blocks_build(o, on ? &run : &off, &bl) != KVS_OK) {
            kvs_err_set(&err, KVS_ENOMEM, "out of memory");
            goto failed;
        }

        cap = n_blocks;
        best_t = bp_replay_pool(o, on ? &run : &off, &bl, cap, BP_BELADY,
                                &sh[0]);
        lru_t = bp_replay_pool(o, on ? &run : &off, &bl, cap, BP_LRU,
                               &sh[1]);
        ends_t = bp_replay_pool(o, on ? &run : &off, &bl, cap, BP_LRU_ENDS,
                                &sh[2]);
        loose_t = bp_replay(o, on ? &run : &off, &bl, cap, 0);
        inf_t = bp_replay_pool(o, on ? &run : &off, &bl, UINT64_MAX,
                               BP_BELADY, &sh[3]);
        bp_blocks_free(o, &bl);

        if (sh[0] + sh[1] + sh[2] > 0) {
            printf("  (pool replays short of room: %" PRIu64 ", %" PRIu64
                   ", %" PRIu64 " blocks)\n", sh[0], sh[1], sh[2]);
        }

        if (!on) {
            inf = (double) inf_t / (double) off.prompt_tokens;
            printf("| off | %" PRIu32 " | %" PRIu64 " | %" PRIu64 " | - | - "
                   "| %.2f%% | - | - | - | %.2f%% | %.2f%% | - | %" PRIu64
                   " | %.1f |\n", n_blocks, off.prompt_tokens,
                   off.st.prefill_tokens,
                   100.0 * (double) best_t / (double) off.prompt_tokens,
                   100.0 * (double) loose_t / (double) off.prompt_tokens,
                   100.0 * inf, off.st.preemptions, off.wall);
            bp_tier_report(o, &off, &off, 0.0);
            printf("prefix_trace cache=off blocks=%" PRIu32 " prompt=%"
                   PRIu64 " prefill=%" PRIu64 " best=%.4f inf=%.4f "
                   "wall=%.2f replies_hash=%016" PRIx64 "\n", n_blocks,
                   off.prompt_tokens, off.st.prefill_tokens,
                   (double) best_t / (double) off.prompt_tokens, inf,
                   off.wall, bp_replies_hash(o, &off));
            fflush(stdout);
            continue;
        }

        hit = (double) run.cached_tokens / (double) run.prompt_tokens;
        best = (double) best_t / (double) run.prompt_tokens;
        lru = (double) lru_t / (double) run.prompt_tokens;
        inf = (double) inf_t / (double) run.prompt_tokens;
        ends = (double) ends_t / (double) run.prompt_tokens;
        loose = (double) loose_t / (double) run.prompt_tokens;
        diff = o->no_off && r == 0 ? 0 : bp_replies_diff(o, &off, &run);

        printf("| on, %g x ws | %" PRIu32 " | %" PRIu64 " | %" PRIu64
               " | %.2fx | %.2f%% | %.2f%% | %.1f%% | %.2f%% | %.2f%% "
               "| %.2f%% | %.2f%% | %s | %" PRIu64 " | %.1f |\n", f,
               n_blocks, run.prompt_tokens, run.st.prefill_tokens,
               run.st.prefill_tokens > 0
               ? (double) off.st.prefill_tokens
                 / (double) run.st.prefill_tokens : 0.0,
               100.0 * hit, 100.0 * best,
               best > 0 ? 100.0 * hit / best : 0.0, 100.0 * lru,
               100.0 * ends, 100.0 * loose, 100.0 * inf,
               o->no_off && r == 0 ? "ref" : diff == 0 ? "yes" : "NO",
               run.st.preemptions, run.wall);
        if (diff != 0) {
            printf("  %" PRIu32 " replies differ from the %s run\n", diff,
                   o->no_off ? "first cache-on" : "cache-off");
        }

        if (run.st.cache_query_tokens == 0) {
            printf("  (no prefix cache lookups in this engine: cache not "
                   "active)\n");
        }

        bp_events_write(&run, f);
        bp_tier_report(o, &run, &off, f);

        printf("prefix_trace cache=on turns_mean=%" PRIu32 " frac=%g "
               "blocks=%" PRIu32 " prompt=%"
               PRIu64 " prefill=%" PRIu64 " hit=%.6f best=%.6f ratio=%.6f "
               "lru=%.4f lru_ends=%.4f loose=%.4f inf=%.4f stats_query=%"
               PRIu64 " stats_hit=%" PRIu64 " evicted=%" PRIu64
               " replies_differ=%" PRIu32 " wall=%.2f replies_hash=%016"
               PRIx64 "\n", o->turns_mean, f,
               n_blocks,
               run.prompt_tokens, run.st.prefill_tokens, hit, best,
               best > 0 ? hit / best : 0.0, lru, ends, loose, inf,
               run.st.cache_query_tokens, run.st.cache_hit_tokens,
               run.st.cache_evicted_blocks, diff, run.wall,
               bp_replies_hash(o, &run));
        fflush(stdout);

        if (o->no_off && r == 0) {
            off = run;                /* the reference from now on */
            memset(&run, 0, sizeof(bp_run_t));

        } else {
            bp_run_free(o, &run);
        }
    }

    rc = 0;

failed:

    if (rc != 0) {
        fprintf(stderr, "bench_prefix: %s\n", err.msg);
    }

    kvs_engine_free(e);
    bp_blocks_free(o, &bl);
    bp_run_free(o, &run);
    bp_run_free(o, &off);
    free(tr.system);
    free(tr.msgs);
    free(tr.msg_off);
    free(tr.msg_len);
    free(tr.plan);
    free(tr.n_turns);
    kvs_vocab_free(md.v);
    kvs_model_close(md.m);

    return rc;
}


/* The seeded chat: system prompt, messages, arrival plan, sizes. */
/*
 * With PREFIX_EVENTS=<path>, a cache-on run's submissions and ends go to
 * <path>.<frac>, one per line: "S r u p" (request r of user u submitted
 * with p prompt tokens), "F r u kv" (it ended with kv tokens of prompt
 * and reply), for t/bench/prefix_policies.py --events.
 */
static void
bp_events_write(const bp_run_t *run, double frac)
{
    char         path[4096];
    FILE        *f;
    uint32_t     e, r, kind;
    const char  *base;

    base = getenv("PREFIX_EVENTS");
    if (base == NULL || base[0] == '\0') {
        return;
    }

    snprintf(path, sizeof(path), "%s.%g", base, frac);

    f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "bench_prefix: %s: cannot write events\n", path);
        return;
    }

    for (e = 0; e < run->n_ev; e++) {
        r = run->ev[e] >> 2;
        kind = run->ev[e] & 3;

        if (kind == BP_EV_SUBMIT) {
            fprintf(f, "S %" PRIu32 " %" PRIu32 " %" PRIu32 "\n", r,
                    run->ord_user[r], run->ord_prompt[r]);

        } else if (kind == BP_EV_END) {
            fprintf(f, "F %" PRIu32 " %" PRIu32 " %" PRIu32 "\n", r,
                    run->ord_user[r], run->ord_kv[r]);
        }
    }

    fclose(f);
    printf("  (events of this run: %s)\n", path);
}


static int
bp_trace_make(const bp_opts_t *o, const bp_model_t *md, bp_trace_t *tr)
{
    uint32_t  u, t, i, n, left, total, len, *turns_left;
    uint64_t  rng, kv;

    n = o->users * o->turns;
    kv = 0;
    rng = o->seed * 0x9E3779B97F4A7C15ULL + 1;

    tr->system = malloc(((size_t) o->system + 1) * sizeof(int32_t));
    tr->msg_off = malloc(n * sizeof(uint32_t));
    tr->msg_len = malloc(n * sizeof(uint32_t));
    tr->plan = malloc(n * sizeof(uint32_t));
    tr->n_turns = malloc(o->users * sizeof(uint32_t));
    turns_left = malloc(o->users * sizeof(uint32_t));

    if (tr->system == NULL || tr->msg_off == NULL || tr->msg_len == NULL
        || tr->plan == NULL || tr->n_turns == NULL || turns_left == NULL)
    {
        free(turns_left);
        return KVS_ENOMEM;
    }

    bp_fill(tr->system, o->system, &rng, md->n_ids);

    total = 0;
    for (i = 0; i < n; i++) {
        tr->msg_len[i] = o->msg_min + bp_rand(&rng, o->msg_max - o->msg_min
                                                    + 1);
        tr->msg_off[i] = total;
        total += tr->msg_len[i];
    }

    tr->msgs = malloc((size_t) total * sizeof(int32_t));
    if (tr->msgs == NULL) {
        free(turns_left);
        return KVS_ENOMEM;
    }

    bp_fill(tr->msgs, total, &rng, md->n_ids);

    /* turns per user: all o->turns, or geometric with mean turns_mean
     * (another turn with probability 1 - 1/mean), at most o->turns: most
     * conversations short, a few long, as in real chat traffic */
    tr->n_req = 0;
    for (u = 0; u < o->users; u++) {
        t = o->turns;

        if (o->turns_mean > 0) {
            t = 1;
            while (t < o->turns
                   && bp_rand(&rng, 1000000) >= 1000000 / o->turns_mean)
            {
                t++;
            }
        }

        tr->n_turns[u] = t;
        tr->n_req += t;
    }

    tr->hist_cap = 0;
    tr->max_seq = 0;
    tr->max_new = (o->msg_max + o->reply + o->block - 1) / o->block + 1;
    tr->ws = o->system / o->block;

    for (u = 0; u < o->users; u++) {
        /* users part at their first token, on a block boundary when the
         * system prompt ends on one */
        tr->msgs[tr->msg_off[u * o->turns]] = (int32_t) (u % md->n_ids);

        len = o->system;
        for (t = 0; t < tr->n_turns[u]; t++) {
            len += tr->msg_len[u * o->turns + t];
            len += o->reply;
            kv = len;
        }

        tr->hist_cap = len > tr->hist_cap ? len : tr->hist_cap;
        tr->max_seq = (uint32_t) (kv + o->block) / o->block > tr->max_seq
                      ? (uint32_t) (kv + o->block) / o->block : tr->max_seq;
        tr->ws += kv / o->block - o->system / o->block;
        turns_left[u] = tr->n_turns[u];
    }

    /* arrivals: each next request is a user drawn among those with turns
     * left (random), or users in turn (round robin) */
    left = o->users;
    u = 0;
    for (i = 0; i < tr->n_req; i++) {
        if (o->rr) {
            /* users in turn, skipping those with no turns left */
            while (turns_left[u] == 0) {
                u = (u + 1) % o->users;
            }

            tr->plan[i] = u;
            turns_left[u]--;
            u = (u + 1) % o->users;
            continue;
        }

        t = bp_rand(&rng, left);
        for (u = 0; u < o->users; u++) {
            if (turns_left[u] > 0 && t-- == 0) {
                break;
            }
        }

        tr->plan[i] = u;
        if (--turns_left[u] == 0) {
            left--;
        }
    }

    free(turns_left);

    return KVS_OK;
}


static int
bp_run_alloc(const bp_opts_t *o, const bp_trace_t *tr, bp_run_t *run)
{
    uint32_t  u, n;

    n = o->users * o->turns;
    memset(run, 0, sizeof(bp_run_t));

    run->hist = calloc(o->users, sizeof(int32_t *));
    run->hist_len = calloc(o->users, sizeof(uint32_t));
    run->reply_off = calloc(n, sizeof(uint32_t));
    run->reply_len = calloc(n, sizeof(uint32_t));
    run->cached = calloc(n, sizeof(uint32_t));
    run->ord_user = calloc(n, sizeof(uint32_t));
    run->ord_prompt = calloc(n, sizeof(uint32_t));
    run->ord_kv = calloc(n, sizeof(uint32_t));
    run->ttft = calloc(n, sizeof(double));
    run->ev = calloc(3 * (size_t) n, sizeof(uint32_t));

    if (run->hist == NULL || run->hist_len == NULL || run->reply_off == NULL
        || run->reply_len == NULL || run->cached == NULL
        || run->ord_user == NULL || run->ord_prompt == NULL
        || run->ord_kv == NULL || run->ev == NULL || run->ttft == NULL)
    {
        return KVS_ENOMEM;
    }

    for (u = 0; u < o->users; u++) {
        run->hist[u] = malloc(((size_t) tr->hist_cap + 1) * sizeof(int32_t));
        if (run->hist[u] == NULL) {
            return KVS_ENOMEM;
        }

        memcpy(run->hist[u], tr->system, o->system * sizeof(int32_t));
        run->hist_len[u] = o->system;
    }

    return KVS_OK;
}


static void
bp_run_free(const bp_opts_t *o, bp_run_t *run)
{
    uint32_t  u;

    if (run->hist != NULL) {
        for (u = 0; u < o->users; u++) {
            free(run->hist[u]);
        }
    }

    free(run->hist);
    free(run->hist_len);
    free(run->reply_off);
    free(run->reply_len);
    free(run->cached);
    free(run->ord_user);
    free(run->ord_prompt);
    free(run->ord_kv);
    free(run->ttft);
    free(run->ev);
    memset(run, 0, sizeof(bp_run_t));
}


/*
 * Plays the trace: up to o->conc requests in flight; a free slot takes
 * the first planned arrival whose user has no request running (its next
 * turn needs the reply).  Each reply is appended to its conversation.
 */
static int
bp_trace_run(kvs_engine_t *e, const bp_opts_t *o, const bp_trace_t *tr,
    bp_run_t *run, kvs_err_t *err)
{
    int                 rc, worked, idle;
    double              t0;
    size_t              k, got;
    uint32_t            n, i, s, u, t, head, sub, done, busy, ix, len;
    uint8_t            *used, *running;
    uint32_t           *next_turn;
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *ready[64];

    struct {
        kvs_engine_seq_t  *h;
        uint32_t           user, turn, req;
        int                prefilled;
        double             t_sub;
        kvs_engine_out_t   out;
    } slot[BP_MAX_CONC];

    n = tr->n_req;
    used = calloc(n, 1);
    running = calloc(o->users, 1);
    next_turn = calloc(o->users, sizeof(uint32_t));
    memset(slot, 0, sizeof(slot));
    rc = KVS_OK;

    if (used == NULL || running == NULL || next_turn == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
        goto done;
    }

    memset(&req, 0, sizeof(req));
    req.max_tokens = o->reply;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;

    head = 0;
    sub = 0;
    done = 0;
    busy = 0;
    idle = 0;
    t0 = bp_now();

    while (done < n) {
        /* fill the free slots */
        for (s = 0; s < o->conc && sub < n; s++) {
            if (slot[s].h != NULL) {
                continue;
            }

            for (i = head; i < n; i++) {
                if (!used[i] && !running[tr->plan[i]]) {
                    break;
                }
            }

            if (i == n) {
                break;
            }

            used[i] = 1;
            while (head < n && used[head]) {
                head++;
            }

            u = tr->plan[i];
            t = next_turn[u]++;
            ix = u * o->turns + t;
            len = tr->msg_len[ix];

            memcpy(run->hist[u] + run->hist_len[u], tr->msgs + tr->msg_off[ix],
                   len * sizeof(int32_t));
            run->hist_len[u] += len;

            req.prompt = run->hist[u];
            req.n_prompt = run->hist_len[u];
            req.data = (void *) (uintptr_t) s;

            if (kvs_engine_submit(e, &req, &slot[s].h, err) != KVS_OK) {
                slot[s].h = NULL;
                rc = err->code;
                goto done;
            }

            slot[s].user = u;
            slot[s].turn = t;
            slot[s].req = sub;
            slot[s].prefilled = 0;
            slot[s].t_sub = bp_now();
            slot[s].out.n_tokens = 0;
            slot[s].out.text.len = 0;
            running[u] = 1;
            busy++;

            run->ord_user[sub] = u;
            run->ord_prompt[sub] = req.n_prompt;
            run->ev[run->n_ev++] = sub << 2 | BP_EV_SUBMIT;
            run->prompt_tokens += req.n_prompt;
            sub++;
        }

        worked = kvs_engine_step(e);

        got = 0;
        while ((k = kvs_engine_ready(e, ready, 64)) > 0) {
            got += k;

            for (i = 0; i < k; i++) {
                s = (uint32_t) (uintptr_t) kvs_engine_seq_data(ready[i]);

                if (kvs_engine_read(e, ready[i], &slot[s].out) < 0) {
                    rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
                    goto done;
                }

                if (!slot[s].prefilled && (slot[s].out.n_tokens > 0
                    || slot[s].out.finish != KVS_FINISH_NONE))
                {
                    slot[s].prefilled = 1;
                    run->ttft[slot[s].req] = bp_now() - slot[s].t_sub;
                    run->ev[run->n_ev++] = slot[s].req << 2 | BP_EV_PREFILL;
                }

                if (slot[s].out.finish == KVS_FINISH_NONE) {
                    continue;
                }

                if (slot[s].out.finish != KVS_FINISH_LENGTH) {
                    rc = kvs_err_set(err, KVS_EFORMAT, "user %" PRIu32
                                     " turn %" PRIu32 ": ended %s: %s",
                                     slot[s].user, slot[s].turn,
                                     kvs_finish_name(slot[s].out.finish),
                                     slot[s].out.error);
                    goto done;
                }

                u = slot[s].user;
                ix = u * o->turns + slot[s].turn;
                len = (uint32_t) slot[s].out.n_tokens;

                if (run->hist_len[u] + len > tr->hist_cap) {
                    rc = kvs_err_set(err, KVS_ERANGE, "reply of %" PRIu32
                                     " tokens, %" PRIu32 " asked", len,
                                     o->reply);
                    goto done;
                }

                run->reply_off[ix] = run->hist_len[u];
                run->reply_len[ix] = len;
                memcpy(run->hist[u] + run->hist_len[u], slot[s].out.tokens,
                       len * sizeof(int32_t));
                run->hist_len[u] += len;

                run->cached[ix] = slot[s].out.n_cached;
                run->cached_tokens += slot[s].out.n_cached;
                run->ord_kv[slot[s].req] = run->ord_prompt[slot[s].req]
                                           + len;
                run->ev[run->n_ev++] = slot[s].req << 2 | BP_EV_END;

                kvs_engine_close(e, ready[i]);
                slot[s].h = NULL;
                running[u] = 0;
                busy--;
                done++;
            }
        }

        if (!worked && got == 0 && busy > 0) {
            /* idle while the disk tier's loader reads a waiting
             * request's blocks: the engine thread would sleep until it
             * is woken, this loop waits a little; a path a load held
             * for its request is let go at the next step (the engine
             * thread is woken for it), so one idle step more is not a
             * hang */
            kvs_engine_stats(e, &run->st);
            if (run->st.tier.loading > 0) {
                usleep(50);
                continue;
            }

            if (++idle <= 2) {
                continue;
            }

            rc = kvs_err_set(err, KVS_EFORMAT, "engine idle with %" PRIu32
                             " requests in flight", busy);
            goto done;
        }

        idle = 0;
    }

    run->wall = bp_now() - t0;
    run->n_req = sub;
    kvs_engine_stats(e, &run->st);

done:

    for (s = 0; s < BP_MAX_CONC; s++) {
        if (slot[s].h != NULL) {
            kvs_engine_close(e, slot[s].h);
        }

        kvs_engine_out_free(&slot[s].out);
    }

    free(used);
    free(running);
    free(next_turn);

    return rc;
}


/* Replies of b that differ from a's for the same user and turn. */
static uint32_t
bp_replies_diff(const bp_opts_t *o, const bp_run_t *a, const bp_run_t *b)
{
    uint32_t  u, t, ix, d;

    d = 0;

    for (u = 0; u < o->users; u++) {
        for (t = 0; t < o->turns; t++) {
            ix = u * o->turns + t;

            if (a->reply_len[ix] != b->reply_len[ix]
                || a->reply_off[ix] != b->reply_off[ix]
                || memcmp(a->hist[u] + a->reply_off[ix],
                          b->hist[u] + b->reply_off[ix],
                          a->reply_len[ix] * sizeof(int32_t)) != 0)
            {
                d++;
            }
        }
    }

    return d;
}


/* An FNV-1a hash of every reply's tokens, user by user and turn by
 * turn: runs in separate processes compare replies through it. */
static uint64_t
bp_replies_hash(const bp_opts_t *o, const bp_run_t *a)
{
    uint32_t  u, t, ix, i;
    uint64_t  h;

    h = 14695981039346656037ull;

    for (u = 0; u < o->users; u++) {
        for (t = 0; t < o->turns; t++) {
            ix = u * o->turns + t;

            for (i = 0; i < a->reply_len[ix]; i++) {
                h = (h ^ (uint32_t) a->hist[u][a->reply_off[ix] + i])
                    * 1099511628211ull;
            }

            h = (h ^ 0xffffffffu) * 1099511628211ull;
        }
    }

    return h;
}


/* Best possible: blocks named by their content and prefix. */

static uint32_t
bp_blk_hash(uint32_t parent, const int32_t *tok, uint32_t n)
{
    uint32_t  i;
    uint64_t  h;

    h = 0xcbf29ce484222325ULL ^ parent;

    for (i = 0; i < n; i++) {
        h = (h ^ (uint32_t) tok[i]) * 0x100000001b3ULL;
    }

    return (uint32_t) (h ^ (h >> 32));
}


/* The id of the block tok[0..block) after parent, added when new. */
static int
bp_blk_id(bp_blocks_t *bl, const bp_opts_t *o, uint32_t parent,
    uint32_t depth, const int32_t *tok, uint32_t *id)
{
    uint32_t   h, x;
    bp_blk_t  *b;

    h = bp_blk_hash(parent, tok, o->block) & (bl->n_head - 1);

    for (x = bl->head[h]; x != BP_NONE; x = bl->b[x].hnext) {
        if (bl->b[x].parent == parent
            && memcmp(bl->b[x].tok, tok, o->block * sizeof(int32_t)) == 0)
        {
            *id = x;
            return KVS_OK;
        }
    }

    if (bl->n == bl->cap) {
        return KVS_ENOMEM;
    }

    b = &bl->b[bl->n];
    memset(b, 0, sizeof(bp_blk_t));
    b->tok = tok;
    b->parent = parent;
    b->depth = depth;
    b->slot = BP_NONE;
    b->hnext = bl->head[h];
    bl->head[h] = bl->n;
    *id = bl->n++;

    return KVS_OK;
}


/* Names every whole computed block of every conversation and lists the
 * requests that read each (in submission order). */
static int
bp_blocks_build(const bp_opts_t *o, const bp_run_t *run, bp_blocks_t *bl)
{
    uint32_t   u, j, r, n, total, x, *nu;
    bp_blk_t  *b;

    n = run->n_req;
    memset(bl, 0, sizeof(bp_blocks_t));

    bl->ids = calloc(o->users, sizeof(uint32_t *));
    bl->n_ids = calloc(o->users, sizeof(uint32_t));
    if (bl->ids == NULL || bl->n_ids == NULL) {
        return KVS_ENOMEM;
    }

    /* a user's longest computed sequence is its last request's */
    for (r = 0; r < n; r++) {
        u = run->ord_user[r];
        bl->n_ids[u] = run->ord_kv[r] / o->block;
    }

    total = 0;
    for (u = 0; u < o->users; u++) {
        total += bl->n_ids[u];
    }

    bl->cap = total + 1;
    for (bl->n_head = 64; bl->n_head < 2 * bl->cap; bl->n_head *= 2) {
        /* void */
    }

    bl->b = calloc(bl->cap, sizeof(bp_blk_t));
    bl->head = malloc(bl->n_head * sizeof(uint32_t));
    bl->cached = malloc(bl->cap * sizeof(uint32_t));
    if (bl->b == NULL || bl->head == NULL || bl->cached == NULL) {
        return KVS_ENOMEM;
    }

    memset(bl->head, 0xff, bl->n_head * sizeof(uint32_t));

    for (u = 0; u < o->users; u++) {
        bl->ids[u] = malloc((bl->n_ids[u] + 1) * sizeof(uint32_t));
        if (bl->ids[u] == NULL) {
            return KVS_ENOMEM;
        }

        for (j = 0; j < bl->n_ids[u]; j++) {
            if (bp_blk_id(bl, o, j > 0 ? bl->ids[u][j - 1] : BP_NONE, j,
                          run->hist[u] + (size_t) j * o->block,
                          &bl->ids[u][j])
                != KVS_OK)
            {
                return KVS_ENOMEM;
            }
        }
    }

    for (r = 0; r < n; r++) {
        u = run->ord_user[r];

        for (j = 0; j < run->ord_prompt[r] / o->block; j++) {
            b = &bl->b[bl->ids[u][j]];

            if (b->n_use == b->use_cap) {
                x = b->use_cap != 0 ? 2 * b->use_cap : 8;
                nu = realloc(b->use, x * sizeof(uint32_t));
                if (nu == NULL) {
                    return KVS_ENOMEM;
                }

                b->use = nu;
                b->use_cap = x;
            }

            b->use[b->n_use++] = r;
        }
    }

    return KVS_OK;
}


static void
bp_blocks_free(const bp_opts_t *o, bp_blocks_t *bl)
{
    uint32_t  i;

    if (bl->b != NULL) {
        for (i = 0; i < bl->n; i++) {
            free(bl->b[i].use);
        }
    }

    if (bl->ids != NULL) {
        for (i = 0; i < o->users; i++) {
            free(bl->ids[i]);
        }
    }

    free(bl->b);
    free(bl->head);
    free(bl->cached);
    free(bl->ids);
    free(bl->n_ids);
    memset(bl, 0, sizeof(bp_blocks_t));
}


/* The next request after r reading block x; BP_NONE if none. */
static uint32_t
bp_next_use(bp_blk_t *b, uint32_t r)
{
    while (b->next < b->n_use && b->use[b->next] <= r) {
        b->next++;
    }

    return b->next < b->n_use ? b->use[b->next] : BP_NONE;
}


static void
bp_cache_del(bp_blocks_t *bl, uint32_t x)
{
    uint32_t  s, y;

    s = bl->b[x].slot;
    y = bl->cached[--bl->n_cached];
    bl->cached[s] = y;
    bl->b[y].slot = s;
    bl->b[x].slot = BP_NONE;
}


/*
 * The earlier bound ("Belady, no room for running"): the run's requests
 * in submission order through a cache of cap blocks that running
 * requests take no room in, a block cacheable from the submission of a
 * request holding it; Belady with bypass (lru == 0) or LRU over leaves
 * (lru == 1).  Returns the prompt tokens reused in all.
 */
static uint64_t
bp_replay(const bp_opts_t *o, const bp_run_t *run, bp_blocks_t *bl,
    uint64_t cap, int lru)
{
    uint32_t   r, n, u, j, k, rd, wr, x, y, v, i, p, l, lim, extra;
    uint32_t   vn, yn;
    uint64_t   hits, hit;
    bp_blk_t  *b;
    const int32_t  *tok;

    n = run->n_req;
    bl->n_cached = 0;

    for (x = 0; x < bl->n; x++) {
        bl->b[x].next = 0;
        bl->b[x].last = 0;
        bl->b[x].slot = BP_NONE;
    }

    hits = 0;

    for (r = 0; r < n; r++) {
        u = run->ord_user[r];
        p = run->ord_prompt[r];
        rd = p / o->block;
        wr = run->ord_kv[r] / o->block;
        tok = run->hist[u];

        for (k = 0; k < rd && bl->b[bl->ids[u][k]].slot != BP_NONE; k++) {
            /* void */
        }

        /* then the leading tokens of a cached sibling of the next block */
        extra = 0;
        lim = p - k * o->block < o->block ? p - k * o->block : o->block;

        for (i = 0; i < bl->n_cached && lim > 0; i++) {
            b = &bl->b[bl->cached[i]];

            if (b->depth != k
                || b->parent != (k > 0 ? bl->ids[u][k - 1] : BP_NONE))
            {
                continue;
            }

            for (l = 0; l < lim && b->tok[l] == tok[k * o->block + l]; l++) {
                /* void */
            }

            extra = l > extra ? l : extra;
        }

        hit = (uint64_t) k * o->block + extra;
        hits += hit < p ? hit : (p > 0 ? p - 1 : 0);

        /* the request computed (or reused) blocks 0..wr: touch, then add */
        for (j = 0; j < wr; j++) {
            bl->b[bl->ids[u][j]].last = r;
        }

        for (j = 0; j < wr; j++) {
            x = bl->ids[u][j];

            if (bl->b[x].slot != BP_NONE) {
                continue;
            }

            if (bl->n_cached >= cap) {
                /* victim: Belady's furthest next use (deepest on ties,
                 * the new block itself last), or the LRU leaf */
                v = lru ? BP_NONE : x;
                vn = lru ? 0 : bp_next_use(&bl->b[x], r);

                for (i = 0; i < bl->n_cached; i++) {
                    y = bl->cached[i];

                    if (lru) {
                        if (v == BP_NONE || bl->b[y].last < bl->b[v].last
                            || (bl->b[y].last == bl->b[v].last
                                && bl->b[y].depth > bl->b[v].depth))
                        {
                            v = y;
                        }

                        continue;
                    }

                    yn = bp_next_use(&bl->b[y], r);
                    if (yn > vn || (yn == vn
                                    && bl->b[y].depth > bl->b[v].depth))
                    {
                        v = y;
                        vn = yn;
                    }
                }

                if (v == x) {
                    continue;
                }

                bp_cache_del(bl, v);
            }

            bl->b[x].slot = bl->n_cached;
            bl->cached[bl->n_cached++] = x;
        }
    }

    return hits;
}


/*
 * Makes room for want more blocks in a pool replay's cache of cap
 * blocks, of which *held are private blocks of running requests:
 * evicts unlocked blocks by rule (now: the last request submitted).
 * Returns the blocks it could not make room for (all locked).
 */
static uint32_t
bp_pool_room(bp_blocks_t *bl, uint64_t cap, uint64_t held, uint32_t want,
    uint32_t now, int rule)
{
    int        better;
    uint32_t   i, v, y, vn, yn;
    bp_blk_t  *b, *c;

    while (bl->n_cached + held + want > cap) {
        v = BP_NONE;
        vn = 0;

        for (i = 0; i < bl->n_cached; i++) {
            y = bl->cached[i];
            b = &bl->b[y];

            if (b->lock > 0) {
                continue;
            }

            if (v == BP_NONE) {
                v = y;
                vn = bp_next_use(b, now);
                continue;
            }

            c = &bl->b[v];

            switch (rule) {

            case BP_BELADY:
                yn = bp_next_use(b, now);
                better = yn > vn || (yn == vn && b->depth > c->depth);
                if (better) {
                    vn = yn;
                }
                break;

            case BP_LRU_ENDS:
                /* a block no request reads again first: what knowing
                 * which turn is a conversation's last would give */
                yn = bp_next_use(b, now);
                if ((yn == BP_NONE) != (vn == BP_NONE)) {
                    better = yn == BP_NONE;
                    if (better) {
                        vn = yn;
                    }
                    break;
                }

                better = b->last < c->last
                         || (b->last == c->last && b->depth > c->depth);
                if (better) {
                    vn = yn;
                }
                break;

            default:
                better = b->last < c->last
                         || (b->last == c->last && b->depth > c->depth);
                break;
            }

            if (better) {
                v = y;
            }
        }

        if (v == BP_NONE) {
            return (uint32_t) (bl->n_cached + held + want - cap);
        }

        bp_cache_del(bl, v);
    }

    return 0;
}


/*
 * The pool replays: the run's events (submissions, prefills, ends, in
 * the order they happened) through a pool of cap blocks that holds the
 * cache and the running requests' blocks, as the engine's does.  A
 * request looks up at its submission (leading cached blocks plus a
 * copy-on-write share, as in bp_replay) and locks the blocks it reuses;
 * it takes blocks for its prompt then, for its reply only at its end
 * (earlier than the engine can free them: generous); its prompt's whole
 * blocks become cacheable (and stay locked) when its first token comes,
 * the rest at its end, when its locks go.  Evicted:
 * unlocked blocks, by rule.  With BP_BELADY this is the best possible
 * hit rate for the engine's pool; *shortfall counts blocks that found no
 * room (everything locked).  Returns the prompt tokens reused.
 */
static uint64_t
bp_replay_pool(const bp_opts_t *o, const bp_run_t *run, bp_blocks_t *bl,
    uint64_t cap, int rule, uint64_t *shortfall)
{
    uint32_t   e, r, kind, n, u, p, rd, k, i, j, l, lim, extra, x, now;
    uint32_t   t, pb, want, *klock, *priv;
    uint64_t   hits, hit, held;
    bp_blk_t  *b;
    const int32_t  *tok;

    n = run->n_req;
    klock = calloc(n, sizeof(uint32_t));
    priv = calloc(n, sizeof(uint32_t));
    if (klock == NULL || priv == NULL) {
        free(klock);
        free(priv);
        return 0;
    }

    bl->n_cached = 0;

    for (x = 0; x < bl->n; x++) {
        bl->b[x].next = 0;
        bl->b[x].last = 0;
        bl->b[x].lock = 0;
        bl->b[x].slot = BP_NONE;
    }

    hits = 0;
    held = 0;
    now = 0;
    *shortfall = 0;

    for (e = 0; e < run->n_ev; e++) {
        r = run->ev[e] >> 2;
        kind = run->ev[e] & 3;
        u = run->ord_user[r];
        p = run->ord_prompt[r];
        tok = run->hist[u];
        t = e + 1;

        switch (kind) {

        case BP_EV_SUBMIT:
            now = r;
            rd = p / o->block;

            for (k = 0; k < rd && bl->b[bl->ids[u][k]].slot != BP_NONE; k++)
            {
                b = &bl->b[bl->ids[u][k]];
                b->lock++;
                b->last = t;
            }

            extra = 0;
            lim = p - k * o->block < o->block ? p - k * o->block : o->block;

            for (i = 0; i < bl->n_cached && lim > 0; i++) {
                b = &bl->b[bl->cached[i]];

                if (b->depth != k
                    || b->parent != (k > 0 ? bl->ids[u][k - 1] : BP_NONE))
                {
                    continue;
                }

                for (l = 0; l < lim && b->tok[l] == tok[k * o->block + l];
                     l++)
                {
                    /* void */
                }

                extra = l > extra ? l : extra;
            }

            hit = (uint64_t) k * o->block + extra;
            hits += hit < p ? hit : (p > 0 ? p - 1 : 0);

            klock[r] = k;
            want = (p + o->block - 1) / o->block - k;
            *shortfall += bp_pool_room(bl, cap, held, want, now, rule);
            priv[r] = want;
            held += want;
            break;

        case BP_EV_PREFILL:
            pb = p / o->block;

            for (j = klock[r]; j < pb; j++) {
                x = bl->ids[u][j];
                b = &bl->b[x];

                if (b->slot == BP_NONE) {
                    b->slot = bl->n_cached;
                    bl->cached[bl->n_cached++] = x;
                    priv[r]--;
                    held--;
                }

                b->lock++;
                b->last = t;
            }

            klock[r] = pb > klock[r] ? pb : klock[r];
            break;

        default:
            /* the reply's blocks, taken only now (the engine takes them
             * while decoding): a bound may only be generous */
            want = (run->ord_kv[r] + o->block - 1) / o->block
                   - (p + o->block - 1) / o->block;
            *shortfall += bp_pool_room(bl, cap, held, want, now, rule);
            priv[r] += want;
            held += want;

            for (j = 0; j < run->ord_kv[r] / o->block; j++) {
                x = bl->ids[u][j];
                b = &bl->b[x];

                if (b->slot == BP_NONE && j >= klock[r]) {
                    b->slot = bl->n_cached;
                    bl->cached[bl->n_cached++] = x;
                    priv[r]--;
                    held--;
                }

                if (j < klock[r]) {
                    b->lock--;
                }

                b->last = t;
            }

            held -= priv[r];
            priv[r] = 0;
            break;
        }
    }

    free(klock);
    free(priv);

    return hits;
}


/* Part 2: time to first token at long contexts. */

static int
bp_ttft(const bp_opts_t *o)
{
    int               rc, ns, i, same;
    char              ms[32];
    char             *end;
    double            cold_off[BP_MAX_ROWS], cold, hit, fol, warm;
    uint32_t          size[BP_MAX_ROWS], max, n_fol, hit_cached;
    uint32_t          fol_cached, n_blocks, n_reply;
    uint64_t          rng, sum, pre0, pre_hit, pre_fol;
    const char       *p;
    int32_t          *prompt, *reply;
    kvs_err_t         err;
    bp_model_t        md;
    kvs_engine_t     *e, *eo;
    kvs_engine_out_t  out;
    kvs_engine_stats_t  st;

    kvs_err_clear(&err);
    memset(&out, 0, sizeof(out));
    e = NULL;
    eo = NULL;
    n_reply = 0;
    prompt = NULL;
    reply = NULL;
    rc = 1;

    ns = 0;
    max = 0;
    sum = 0;
    p = o->sizes;

    while (*p != '\0' && ns < BP_MAX_ROWS) {
        size[ns] = (uint32_t) strtoul(p, &end, 10);
        if (end == p || size[ns] < 2) {
            fprintf(stderr, "bench_prefix: bad --sizes \"%s\"\n", o->sizes);
            return 2;
        }

        max = size[ns] > max ? size[ns] : max;
        sum += size[ns];
        ns++;
        p = *end == ',' ? end + 1 : end;
    }

    if (bp_model(o, &md, &err) != KVS_OK) {
        fprintf(stderr, "bench_prefix: %s\n", err.msg);
        return 1;
    }

    n_fol = max + o->ttft_reply + o->ttft_msg;
    if (n_fol + o->ttft_reply > md.m->hp.n_ctx_train) {
        fprintf(stderr, "bench_prefix: %" PRIu32 "-token prompts need a "
                "context of %" PRIu32 " (the model has %" PRIu32 ")\n", max,
                n_fol + o->ttft_reply, md.m->hp.n_ctx_train);
        goto failed;
    }

    prompt = malloc(((size_t) n_fol + 1) * sizeof(int32_t));
    reply = malloc(((size_t) o->ttft_reply + 1) * sizeof(int32_t));
    if (prompt == NULL || reply == NULL) {
        kvs_err_set(&err, KVS_ENOMEM, "out of memory");
        goto failed;
    }

    printf("model: %s (%" PRIu32 " layers, %" PRIu32 " embd, %" PRIu32
           " vocab, ctx %" PRIu32 "), block %" PRIu32 " tokens, "
           "max_batch_tokens %" PRIu32 "\n",
           o->model != NULL ? o->model : "generated tiny", md.m->hp.n_layer,
           md.m->hp.n_embd, md.m->hp.n_vocab, md.m->hp.n_ctx_train,
           o->block, o->max_batch_tokens);
    printf("each size: a fresh random prompt (cold), the same prompt again "
           "(full-prefix hit), then prompt + its %" PRIu32 "-token reply + "
           "a %" PRIu32 "-token message (follow-up); ratios to the "
           "cache-off cold time up to %" PRIu32 " tokens, beyond to the "
           "cache-on one\n", o->ttft_reply, o->ttft_msg, o->off_max);

    rng = o->seed * 0xD1B54A32D192ED03ULL + 7;

    /*
     * Two engines, a cache-off one (a pool for the longest prompt) when
     * some size is timed on it, and a cache-on one with room to keep
     * every prompt and compute a cold one; each size runs on both back
     * to back, so that both colds see the same load on the machine.
     */
    n_blocks = (n_fol + o->ttft_reply + o->block - 1) / o->block + 4;

    for (i = 0; i < ns && size[i] > o->off_max; i++) {
        /* void */
    }

    if (i < ns) {
        if (bp_engine(&eo, o, &md, n_blocks, 0, 0, &err) != KVS_OK) {
            goto failed;
        }

        bp_fill(prompt, 256, &rng, md.n_ids);
        if (bp_ttft_one(eo, o, prompt, 256, &out, &warm, &err) != KVS_OK) {
            goto failed;
        }
    }

    n_blocks = (uint32_t) ((sum + ns * (3 * o->ttft_reply + o->ttft_msg))
                           / o->block) + n_blocks + 4 * ns;
    if (bp_engine(&e, o, &md, n_blocks, 1, 0, &err) != KVS_OK) {
        goto failed;
    }

    bp_fill(prompt, 256, &rng, md.n_ids);
    if (bp_ttft_one(e, o, prompt, 256, &out, &warm, &err) != KVS_OK) {
        goto failed;
    }

    printf("\n| prompt tokens | cold, cache off ms | cold, cache on ms "
           "| full-prefix hit ms | cold / hit | hit: cached, computed "
           "| follow-up ms | cold / follow-up | follow-up: cached, computed "
           "| same reply |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| --- |\n");
    fflush(stdout);

    for (i = 0; i < ns; i++) {
        bp_fill(prompt, size[i], &rng, md.n_ids);
        same = 1;

        if (size[i] <= o->off_max) {
            if (bp_ttft_one(eo, o, prompt, size[i], &out, &cold_off[i],
                            &err)
                != KVS_OK)
            {
                goto failed;
            }

            memcpy(reply, out.tokens, out.n_tokens * sizeof(int32_t));
            n_reply = (uint32_t) out.n_tokens;
        }

        if (bp_ttft_one(e, o, prompt, size[i], &out, &cold, &err)
            != KVS_OK)
        {
            goto failed;
        }

        /* the cache-off reply is the reference when there is one */
        if (size[i] <= o->off_max) {
            same = out.n_tokens == n_reply
                   && memcmp(reply, out.tokens,
                             n_reply * sizeof(int32_t)) == 0;

        } else {
            cold_off[i] = cold;
        }

        memcpy(reply, out.tokens, out.n_tokens * sizeof(int32_t));
        n_reply = (uint32_t) out.n_tokens;

        kvs_engine_stats(e, &st);
        pre0 = st.prefill_tokens;

        if (bp_ttft_one(e, o, prompt, size[i], &out, &hit, &err) != KVS_OK) {
            goto failed;
        }

        same = same && out.n_tokens == n_reply
               && memcmp(reply, out.tokens,
                         n_reply * sizeof(int32_t)) == 0;
        hit_cached = out.n_cached;

        kvs_engine_stats(e, &st);
        pre_hit = st.prefill_tokens - pre0;
        pre0 = st.prefill_tokens;

        memcpy(prompt + size[i], reply, o->ttft_reply * sizeof(int32_t));
        bp_fill(prompt + size[i] + o->ttft_reply, o->ttft_msg, &rng,
                md.n_ids);
        n_fol = size[i] + o->ttft_reply + o->ttft_msg;

        if (bp_ttft_one(e, o, prompt, n_fol, &out, &fol, &err) != KVS_OK) {
            goto failed;
        }

        fol_cached = out.n_cached;
        snprintf(ms, sizeof(ms), "%.1f", 1e3 * cold_off[i]);
        kvs_engine_stats(e, &st);
        pre_fol = st.prefill_tokens - pre0;

        printf("| %" PRIu32 " | %s | %.1f | %.2f | %.1fx | %" PRIu32
               ", %" PRIu64 " | %.2f | %.1fx | %" PRIu32 " of %" PRIu32
               ", %" PRIu64 " | %s |\n", size[i],
               size[i] > o->off_max ? "-" : ms,
               1e3 * cold, 1e3 * hit, cold_off[i] / hit, hit_cached,
               pre_hit, 1e3 * fol, cold_off[i] / fol, fol_cached, n_fol,
               pre_fol, same ? "yes" : "NO");
        printf("prefix_ttft prompt=%" PRIu32 " cold_off_ms=%.3f "
               "cold_on_ms=%.3f hit_ms=%.3f ratio=%.2f hit_cached=%" PRIu32
               " followup_ms=%.3f followup_ratio=%.2f followup_cached=%"
               PRIu32 " same_reply=%d\n", size[i], 1e3 * cold_off[i],
               1e3 * cold, 1e3 * hit, cold_off[i] / hit, hit_cached,
               1e3 * fol, cold_off[i] / fol, fol_cached, same);
        fflush(stdout);
    }

    rc = 0;

failed:

    if (rc != 0) {
        fprintf(stderr, "bench_prefix: %s\n", err.msg);
    }

    kvs_engine_free(e);
    kvs_engine_free(eo);
    kvs_engine_out_free(&out);
    free(prompt);
    free(reply);
    kvs_vocab_free(md.v);
    kvs_model_close(md.m);

    return rc;
}


/* Runs one request to its end; *ttft is the seconds from its submission
 * to its first token.  out holds its tokens and cache fields. */
static int
bp_ttft_one(kvs_engine_t *e, const bp_opts_t *o, const int32_t *prompt,
    uint32_t n, kvs_engine_out_t *out, double *ttft, kvs_err_t *err)
{
    int                rc, worked;
    double             t0;
    size_t             got;
    kvs_engine_req_t   req;
    kvs_engine_seq_t  *h, *r;

    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = n;
    req.max_tokens = o->ttft_reply;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;

    out->n_tokens = 0;
    out->text.len = 0;
    out->finish = KVS_FINISH_NONE;
    *ttft = 0;

    t0 = bp_now();

    if (kvs_engine_submit(e, &req, &h, err) != KVS_OK) {
        return err->code;
    }

    rc = KVS_OK;

    for ( ;; ) {
        worked = kvs_engine_step(e);
        got = kvs_engine_ready(e, &r, 1);

        if (got > 0) {
            if (kvs_engine_read(e, r, out) < 0) {
                rc = kvs_err_set(err, KVS_ENOMEM, "out of memory");
                break;
            }

            if (*ttft == 0 && out->n_tokens > 0) {
                *ttft = bp_now() - t0;
            }

            if (out->finish == KVS_FINISH_ERROR
                || out->finish == KVS_FINISH_CANCELLED)
            {
                rc = kvs_err_set(err, KVS_EFORMAT, "%" PRIu32 "-token "
                                 "prompt: %s", n, out->error);
                break;
            }

            if (out->finish != KVS_FINISH_NONE) {
                break;
            }
        }

        if (!worked && got == 0) {
            rc = kvs_err_set(err, KVS_EFORMAT, "engine idle before the "
                             "end of a %" PRIu32 "-token prompt", n);
            break;
        }
    }

    kvs_engine_close(e, h);

    return rc;
}


static void
bp_fill(int32_t *t, uint32_t n, uint64_t *rng, uint32_t n_ids)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        t[i] = (int32_t) bp_rand(rng, n_ids);
    }
}


/* xorshift64*: 0..n-1 (n >= 1) */
static uint32_t
bp_rand(uint64_t *s, uint32_t n)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;

    return (uint32_t) (((*s * 0x2545F4914F6CDD1DULL) >> 32) % n);
}


static double
bp_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


static void
bp_usage(FILE *f)
{
    fprintf(f,
        "usage: bench_prefix trace|ttft [--model F] [--seed N] "
        "[--threads N]\n"
        "         [--block N] [--max-batch-tokens N] [--ctx N]\n"
        "  trace: [--users 32] [--turns 8] [--turns-mean 0] [--system 512]\n"
        "         [--msg-min 32] [--msg-max 96] [--reply 32] [--conc 4]\n"
        "         [--rr]  (--turns-mean M: turns per user geometric with\n"
        "         mean M, at most --turns)\n"
        "         [--cache 1,0.5,0.25]  (pool = fraction x working set + what\n"
        "                           the running requests add)\n"
        "         [--tier F] [--tier-always]  (a disk tier of F x the\n"
        "         working set in KVS_TMP for the cache-on runs;\n"
        "         --tier-always loads whatever the cost model says)\n"
        "         [--no-off]  (no cache-off run: replies are compared\n"
        "         with the first cache-on run's)\n"
        "  ttft:  [--sizes 8192,16384,32768,65536] [--ttft-reply 16]\n"
        "         [--ttft-msg 64] [--off-max 32768]  (longer prompts are\n"
        "         not timed on a cache-off engine: their cold time is a\n"
        "         fresh prompt's with the cache on)\n"
        "  without --model a tiny model with context --ctx (69632) is\n"
        "  generated into KVS_TMP (or /tmp) and removed once open\n");
}
