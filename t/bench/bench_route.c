/*
 * bench_route: what the gateway's longest-prefix lookup costs against a
 * real redis-server on loopback (issue 8: "at most two round trips and
 * under 1 ms for a 100k-token prompt"), the way the gateway makes it but
 * with hiredis' synchronous API instead of nginx's event loop:
 *
 *   names    kvs_index_name_root + kvs_index_name_chain over the prompt
 *   round 1  a GET of every candidate's host record, then
 *            kvs_index_lookup_cmds, every command written in one
 *            pipeline, the replies read and converted, the records
 *            folded into the table and the candidates (kvs_index_gw_accept,
 *            kvs_index_gw_cand_update: a restart counts from this lookup
 *            on), then ..._round1
 *   round 2  the same for the refinement, when the plan has one
 *   choose   kvs_index_lookup_result + kvs_index_choose
 *
 * timed as one span per prompt.  Which hosts exist (ZRANGEBYSCORE, GET
 * of each record, parse, check) is read once before timing: the gateway
 * lists them in the background, not per request.  The naive peers below
 * read no records (they compare plans only).
 *
 * Peers, in the same run over the same prompts and the same Redis:
 *
 *   naive pipelined   one HGETALL per block of the prompt, all in one
 *                     pipeline (one round trip, n probes)
 *   naive sequential  one HGETALL per block, each waiting for its reply,
 *                     stopping at the first block no host holds (a
 *                     round trip per block)
 *
 * All three parse entries and choose with the same library calls, so the
 * differences are the plan's.  Every lookup's choice (host and cached
 * tokens) is checked against the truth the fill wrote; a mismatch fails
 * the run.
 *
 * The fill: per prompt size, PROMPTS prompts of random token ids; for
 * each, three hosts (e1, e2, e3) hold prefixes of independent uniform
 * lengths 0..n blocks; e3 also left entries of an older incarnation
 * (a restart) on the quarter of the blocks after its prefix, which
 * readers must count as misses.  Host loads are 0, 1 and 2 sequences
 * (load weight 256 tokens per sequence, 16-token blocks).
 *
 *   bench_route -p PORT [-t SIZES] [-n PROMPTS] [-r PASSES] [-q SEQ]
 *               [-b BLOCK_TOKENS]
 *
 * SIZES: prompt lengths in tokens, comma-separated (1000,10000,100000);
 * PASSES: timed passes over the prompts (8; one untimed pass before);
 * SEQ: lookups timed for the sequential peer per size (8).  Prints a
 * table and one machine-readable "route_lookup ..." line per size and
 * method.  Exit status 1 on a wrong choice or a Redis error.
 */

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "index/kvs_index_gw.h"
#include "index/kvs_index_lookup.h"
#include "index/kvs_index_name.h"
#include "index/kvs_index_schema.h"


#define BENCH_HOSTS        3
#define BENCH_MODEL        "kvserve-tiny"
#define BENCH_EPOCH        0x0123456789abcdefULL
#define BENCH_SIZES_MAX    8
#define BENCH_FILL_BATCH   4096       /* commands per fill pipeline */
#define BENCH_ELEMS_PER    16         /* reply elements budgeted per
                                         probe: 2 per host entry */
#define BENCH_MAX_AGE      0          /* records are written once: no age
                                         bound (the gateway's 10 s would
                                         retire them during a long run);
                                         parse and checks are the same */

/* a batch's memory: command bytes, argv, argument lengths, firsts */
typedef struct {
    kvs_index_cmds_t    c;
    char               *buf;
    const char        **argv;
    size_t             *argvlen;
    size_t             *first;
} bench_cmds_t;

/* one round trip's replies, converted */
typedef struct {
    kvs_index_reply_t  *top;          /* [cap] one per command */
    kvs_index_reply_t  *elem;         /* [elem_cap] children of arrays */
    size_t              cap;
    size_t              elem_cap;
    redisReply        **raw;          /* [cap] freed after parsing */
    size_t              n_raw;
} bench_replies_t;

typedef struct {
    redisContext            *rc;
    bench_cmds_t             cmds;
    bench_replies_t          rp;
    kvs_index_cand_t         cands[BENCH_HOSTS];
    kvs_index_host_t         recs[BENCH_HOSTS];
    kvs_index_gw_host_t      table[BENCH_HOSTS];  /* the gateway's */
    kvs_index_route_conf_t   conf;
    kvs_index_ns_t           ns;
    uint32_t                 bt;
    void                    *lk_mem;  /* [lk_len], 8-byte aligned */
    size_t                   lk_len;
    kvs_index_name_t        *names;   /* [names_cap] */
    size_t                   names_cap;
    uint64_t                 rng;
} bench_t;

/* what one lookup found, and what it cost */
typedef struct {
    int32_t             host;
    uint32_t            cached;
    uint32_t            rounds;
    uint32_t            probes1;
    uint32_t            probes2;
    uint64_t            ns;
    uint64_t            names_ns;     /* of ns: naming the prompt */
    uint64_t            rt_ns;        /*   ... round trips, replies read
                                           and converted */
} bench_out_t;

/* one prompt and the truth the fill wrote for it */
typedef struct {
    int32_t            *tokens;       /* [n_tokens] */
    size_t              n_tokens;
    uint32_t            held[BENCH_HOSTS];  /* blocks [0, held) */
    kvs_index_choice_t  want;
} bench_prompt_t;


static const char  *bench_ids[BENCH_HOSTS] = { "e1", "e2", "e3" };
static const uint64_t  bench_incs[BENCH_HOSTS] = {
    0x1111111111111111ULL, 0x2222222222222222ULL, 0x3333333333333333ULL
};
#define BENCH_OLD_INC  0x3333333300000001ULL  /* e3 before its restart */


static uint64_t
bench_now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}


static uint64_t
bench_wall_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t) ts.tv_sec * 1000ULL
           + (uint64_t) ts.tv_nsec / 1000000ULL;
}


static uint64_t
bench_rnd(uint64_t *x)
{
    /* xorshift64*: seeded, so every run fills the same index */
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545f4914f6cdd1dULL;
}


static int
bench_cmds_alloc(bench_cmds_t *b, size_t cmd_cap)
{
    size_t  arg_cap, buf_cap;

    /* our longest commands have 6 arguments of at most 64 bytes, the
     * block commands 2..4 of at most 43 */
    arg_cap = cmd_cap * KVS_INDEX_CMD_ARGS_MAX;
    buf_cap = cmd_cap * 128;

    b->buf = malloc(buf_cap);
    b->argv = malloc(arg_cap * sizeof(*b->argv));
    b->argvlen = malloc(arg_cap * sizeof(*b->argvlen));
    b->first = malloc(cmd_cap * sizeof(*b->first));

    if (b->buf == NULL || b->argv == NULL || b->argvlen == NULL
        || b->first == NULL)
    {
        return KVS_ENOMEM;
    }

    kvs_index_cmds_init(&b->c, b->buf, buf_cap, b->argv, b->argvlen,
                        arg_cap, b->first, cmd_cap);
    return KVS_OK;
}


static int
bench_replies_alloc(bench_replies_t *rp, size_t cap)
{
    rp->cap = cap;
    rp->elem_cap = cap * BENCH_ELEMS_PER;
    rp->top = malloc(cap * sizeof(*rp->top));
    rp->elem = malloc(rp->elem_cap * sizeof(*rp->elem));
    rp->raw = malloc(cap * sizeof(*rp->raw));
    rp->n_raw = 0;

    return (rp->top == NULL || rp->elem == NULL || rp->raw == NULL)
           ? KVS_ENOMEM : KVS_OK;
}


static void
bench_replies_free_raw(bench_replies_t *rp)
{
    size_t  i;

    for (i = 0; i < rp->n_raw; i++) {
        freeReplyObject(rp->raw[i]);
    }

    rp->n_raw = 0;
}


/* One hiredis reply as the library reads it; arrays only one level deep
 * (ours are), anything deeper or over the element budget becomes an
 * error reply, which readers count as a miss.  *used: elements taken. */
static void
bench_reply_conv(const redisReply *r, kvs_index_reply_t *out,
    kvs_index_reply_t *elem, size_t elem_left, size_t *used, int depth)
{
    size_t  i, sub;

    memset(out, 0, sizeof(*out));
    *used = 0;

    switch (r->type) {

    case REDIS_REPLY_NIL:
        out->type = KVS_INDEX_REPLY_NIL;
        return;

    case REDIS_REPLY_INTEGER:
        out->type = KVS_INDEX_REPLY_INTEGER;
        out->integer = r->integer;
        return;

    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        out->type = r->type == REDIS_REPLY_STRING ? KVS_INDEX_REPLY_STRING
                    : r->type == REDIS_REPLY_STATUS ? KVS_INDEX_REPLY_STATUS
                    : KVS_INDEX_REPLY_ERROR;
        out->str = r->str;
        out->len = r->len;
        return;

    case REDIS_REPLY_ARRAY:
        if (depth > 0 || r->elements > elem_left) {
            break;
        }

        out->type = KVS_INDEX_REPLY_ARRAY;
        out->element = elem;
        out->elements = r->elements;

        for (i = 0; i < r->elements; i++) {
            bench_reply_conv(r->element[i], &elem[i], NULL, 0, &sub, 1);
        }

        *used = r->elements;
        return;

    default:
        break;
    }

    out->type = KVS_INDEX_REPLY_ERROR;
    out->str = "bench: reply not converted";
    out->len = strlen(out->str);
}


/* One round trip: every command of c written in one pipeline, then every
 * reply read and converted into rp->top[0, c->n_cmds). */
static int
bench_roundtrip(redisContext *rc, const kvs_index_cmds_t *c,
    bench_replies_t *rp)
{
    int            argc;
    size_t         i, used, at;
    void          *reply;
    const char   **argv;
    const size_t  *argvlen;

    if (c->n_cmds > rp->cap) {
        fprintf(stderr, "bench_route: %zu commands, room for %zu\n",
                c->n_cmds, rp->cap);
        return KVS_ERANGE;
    }

    bench_replies_free_raw(rp);

    for (i = 0; i < c->n_cmds; i++) {
        kvs_index_cmds_get(c, i, &argc, &argv, &argvlen);

        if (redisAppendCommandArgv(rc, argc, argv, argvlen) != REDIS_OK) {
            fprintf(stderr, "bench_route: append: %s\n", rc->errstr);
            return KVS_EIO;
        }
    }

    at = 0;

    for (i = 0; i < c->n_cmds; i++) {
        if (redisGetReply(rc, &reply) != REDIS_OK || reply == NULL) {
            fprintf(stderr, "bench_route: reply: %s\n", rc->errstr);
            return KVS_EIO;
        }

        rp->raw[rp->n_raw++] = reply;
        bench_reply_conv(reply, &rp->top[i], &rp->elem[at],
                         rp->elem_cap - at, &used, 0);
        at += used;
    }

    return KVS_OK;
}


static int
bench_roundtrip_timed(bench_t *b, bench_out_t *o)
{
    int       rc;
    uint64_t  t0;

    t0 = bench_now_ns();
    rc = bench_roundtrip(b->rc, &b->cmds.c, &b->rp);
    o->rt_ns += bench_now_ns() - t0;
    return rc;
}


static int
bench_written(bench_replies_t *rp, size_t n, const char *what)
{
    size_t     i;
    kvs_err_t  err;

    for (i = 0; i < n; i++) {
        if (kvs_index_reply_written(&rp->top[i], &err) != KVS_OK) {
            fprintf(stderr, "bench_route: %s: %s\n", what, err.msg);
            return KVS_EIO;
        }
    }

    return KVS_OK;
}


/* Sends c and checks that every command was written; resets c. */
static int
bench_flush(bench_t *b, const char *what)
{
    int  rc;

    if (b->cmds.c.n_cmds == 0) {
        return KVS_OK;
    }

    rc = bench_roundtrip(b->rc, &b->cmds.c, &b->rp);
    if (rc == KVS_OK) {
        rc = bench_written(&b->rp, b->cmds.c.n_cmds, what);
    }

    kvs_index_cmds_reset(&b->cmds.c);
    return rc;
}


/* HSET + PEXPIRE of one entry, flushing when the batch is full. */
static int
bench_fill_entry(bench_t *b, const kvs_index_name_t *name, size_t h,
    uint64_t inc)
{
    int        rc;
    kvs_err_t  err;

    if (b->cmds.c.n_cmds + 2 > BENCH_FILL_BATCH) {
        rc = bench_flush(b, "fill");
        if (rc != KVS_OK) {
            return rc;
        }
    }

    rc = kvs_index_cmd_blk_add(&b->cmds.c, name, bench_ids[h],
                               strlen(bench_ids[h]), inc, 3600000, &err);
    if (rc != KVS_OK) {
        fprintf(stderr, "bench_route: fill: %s\n", err.msg);
    }

    return rc;
}


static int
bench_names(bench_t *b, const int32_t *tokens, size_t n_tokens,
    size_t *n_names)
{
    kvs_err_t         err;
    kvs_index_name_t  root;

    if (kvs_index_name_root(&b->ns, &root, &err) != KVS_OK
        || kvs_index_name_chain(&root, tokens, n_tokens, b->bt, b->names,
                                b->names_cap, n_names, &err) != KVS_OK)
    {
        fprintf(stderr, "bench_route: names: %s\n", err.msg);
        return KVS_EINVAL;
    }

    return KVS_OK;
}


/* A prompt of n_tokens random ids, three prefixes of it written to
 * Redis, and the choice the truth makes. */
static int
bench_fill_prompt(bench_t *b, bench_prompt_t *p, size_t n_tokens)
{
    int       rc;
    size_t    i, h, n, stale_end;
    uint32_t  blocks[BENCH_HOSTS];

    p->tokens = malloc(n_tokens * sizeof(int32_t));
    if (p->tokens == NULL) {
        return KVS_ENOMEM;
    }

    p->n_tokens = n_tokens;
    for (i = 0; i < n_tokens; i++) {
        p->tokens[i] = (int32_t) (3 + bench_rnd(&b->rng) % 32000);
    }

    rc = bench_names(b, p->tokens, n_tokens, &n);
    if (rc != KVS_OK) {
        return rc;
    }

    for (h = 0; h < BENCH_HOSTS; h++) {
        p->held[h] = (uint32_t) (bench_rnd(&b->rng) % (n + 1));
        blocks[h] = p->held[h];

        /* parents first, as publishers write them */
        for (i = 0; i < p->held[h]; i++) {
            rc = bench_fill_entry(b, &b->names[i], h, bench_incs[h]);
            if (rc != KVS_OK) {
                return rc;
            }
        }
    }

    /* e3's entries from before its restart, past what it holds now */
    stale_end = p->held[2] + n / 4 < n ? p->held[2] + n / 4 : n;
    for (i = p->held[2]; i < stale_end; i++) {
        rc = bench_fill_entry(b, &b->names[i], 2, BENCH_OLD_INC);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    kvs_index_choose(b->cands, BENCH_HOSTS, blocks, b->bt, n == 0,
                     &b->conf, &p->want);
    return KVS_OK;
}


/* The host table as the gateway's background refresh reads it. */
static int
bench_hosts(bench_t *b, uint64_t *ns)
{
    int                     rc;
    char                    ids[BENCH_HOSTS + 4][KVS_INDEX_HOST_ID_MAX + 1];
    size_t                  i, n, skipped;
    uint64_t                t0, now;
    kvs_err_t               err;
    kvs_index_reject_t      why;
    kvs_index_host_want_t   want;

    now = bench_wall_ms();

    for (i = 0; i < BENCH_HOSTS; i++) {
        memset(&b->recs[i], 0, sizeof(b->recs[i]));
        snprintf(b->recs[i].id, sizeof(b->recs[i].id), "%s", bench_ids[i]);
        snprintf(b->recs[i].url, sizeof(b->recs[i].url),
                 "http://127.0.0.1:%zu", 18081 + i);
        snprintf(b->recs[i].model, sizeof(b->recs[i].model), "%s",
                 BENCH_MODEL);
        b->recs[i].incarnation = bench_incs[i];
        b->recs[i].epoch = BENCH_EPOCH;
        b->recs[i].block_tokens = b->bt;
        b->recs[i].running = (uint32_t) i;
        b->recs[i].free_blocks = 4096;
        b->recs[i].ts_ms = now;

        if (kvs_index_cmd_host_set(&b->cmds.c, &b->recs[i], 3600000, &err)
            != KVS_OK
            || kvs_index_cmd_hosts_add(&b->cmds.c, b->recs[i].id,
                                       strlen(b->recs[i].id), now, &err)
               != KVS_OK)
        {
            fprintf(stderr, "bench_route: hosts: %s\n", err.msg);
            return KVS_EINVAL;
        }
    }

    rc = bench_flush(b, "hosts");
    if (rc != KVS_OK) {
        return rc;
    }

    /* timed: what one refresh costs (two round trips) */
    t0 = bench_now_ns();

    if (kvs_index_cmd_hosts_list(&b->cmds.c, now - 60000, &err) != KVS_OK) {
        fprintf(stderr, "bench_route: hosts: %s\n", err.msg);
        return KVS_EINVAL;
    }

    rc = bench_roundtrip(b->rc, &b->cmds.c, &b->rp);
    kvs_index_cmds_reset(&b->cmds.c);
    if (rc != KVS_OK) {
        return rc;
    }

    if (kvs_index_hosts_parse(&b->rp.top[0], ids, BENCH_HOSTS + 4, &n,
                              &skipped, &err) != KVS_OK
        || n != BENCH_HOSTS)
    {
        fprintf(stderr, "bench_route: hosts list: %zu hosts (%s)\n", n,
                err.msg);
        return KVS_EFORMAT;
    }

    for (i = 0; i < n; i++) {
        if (kvs_index_cmd_host_get(&b->cmds.c, ids[i], strlen(ids[i]), &err)
            != KVS_OK)
        {
            return KVS_EINVAL;
        }
    }

    rc = bench_roundtrip(b->rc, &b->cmds.c, &b->rp);
    kvs_index_cmds_reset(&b->cmds.c);
    if (rc != KVS_OK) {
        return rc;
    }

    memset(&want, 0, sizeof(want));
    want.now_ms = bench_wall_ms();
    want.max_age_ms = 10000;
    want.epoch = BENCH_EPOCH;
    want.check_epoch = 1;
    want.model = BENCH_MODEL;
    want.model_len = strlen(BENCH_MODEL);

    for (i = 0; i < n; i++) {
        if (kvs_index_host_parse(&b->rp.top[i], ids[i], strlen(ids[i]),
                                 &b->recs[i], &why, &err) != KVS_OK
            || kvs_index_host_check(&b->recs[i], &want, &why, &err)
               != KVS_OK)
        {
            fprintf(stderr, "bench_route: host %s: %s (%s)\n", ids[i],
                    kvs_index_reject_name(why), err.msg);
            return KVS_EFORMAT;
        }

        b->table[i].rec = b->recs[i];
        b->table[i].sent = 0;
        b->cands[i].id = b->table[i].rec.id;
        b->cands[i].id_len = strlen(b->table[i].rec.id);
        b->cands[i].incarnation = b->recs[i].incarnation;
        b->cands[i].epoch = b->recs[i].epoch;
        b->cands[i].load = b->recs[i].running + b->recs[i].waiting;
        b->cands[i].free_blocks = b->recs[i].free_blocks;
        b->cands[i].up = 1;
    }

    *ns = bench_now_ns() - t0;
    bench_replies_free_raw(&b->rp);
    return KVS_OK;
}


/* The gateway's lookup: names, at most two pipelined rounds, choice. */
static int
bench_lookup(bench_t *b, const bench_prompt_t *p, bench_out_t *o)
{
    int                  rc;
    size_t               n, h;
    uint32_t             blocks[BENCH_HOSTS];
    uint64_t             t0, now;
    kvs_err_t            err;
    kvs_index_lookup_t   lk;
    kvs_index_choice_t   ch;
    kvs_index_reject_t   why;
    kvs_index_gw_host_t  fresh;

    t0 = bench_now_ns();

    rc = bench_names(b, p->tokens, p->n_tokens, &n);
    if (rc != KVS_OK) {
        return rc;
    }

    o->names_ns = bench_now_ns() - t0;
    o->rt_ns = 0;

    if (kvs_index_lookup_init(&lk, b->lk_mem, b->lk_len, b->cands,
                              BENCH_HOSTS, BENCH_EPOCH, (uint32_t) n, b->bt,
                              &b->conf, &err)
        != KVS_OK)
    {
        fprintf(stderr, "bench_route: lookup: %s\n", err.msg);
        return KVS_EINVAL;
    }

    o->probes1 = lk.n_probe;
    o->probes2 = 0;

    if (lk.n_probe > 0) {
        kvs_index_cmds_reset(&b->cmds.c);

        /* the candidates' records lead round 1, as in the gateway */
        for (h = 0; h < BENCH_HOSTS; h++) {
            if (kvs_index_cmd_host_get(&b->cmds.c, b->cands[h].id,
                                       b->cands[h].id_len, &err)
                != KVS_OK)
            {
                fprintf(stderr, "bench_route: round 1: %s\n", err.msg);
                return KVS_EIO;
            }
        }

        if (kvs_index_lookup_cmds(&lk, b->names, &b->cmds.c, &err) != KVS_OK
            || bench_roundtrip_timed(b, o) != KVS_OK)
        {
            fprintf(stderr, "bench_route: round 1: %s\n", err.msg);
            return KVS_EIO;
        }

        now = bench_wall_ms();

        for (h = 0; h < BENCH_HOSTS; h++) {
            if (kvs_index_gw_accept(&b->table[h], &b->rp.top[h],
                                    b->cands[h].id, b->cands[h].id_len, now,
                                    BENCH_MAX_AGE, &fresh, &why)
                && why == KVS_INDEX_OK)
            {
                b->table[h] = fresh;
                kvs_index_gw_cand_update(&b->cands[h], &b->table[h],
                                         BENCH_MODEL, strlen(BENCH_MODEL),
                                         BENCH_EPOCH, b->bt, 0);
            } else {
                fprintf(stderr, "bench_route: host %s: %s\n",
                        b->cands[h].id, kvs_index_reject_name(why));
                return KVS_EFORMAT;
            }
        }

        if (kvs_index_lookup_round1(&lk, b->rp.top + BENCH_HOSTS,
                                    b->cmds.c.n_cmds - BENCH_HOSTS, &err)
            != KVS_OK)
        {
            fprintf(stderr, "bench_route: round 1: %s\n", err.msg);
            return KVS_EIO;
        }

        o->probes2 = lk.n_probe;
    }

    if (lk.n_probe > 0) {
        kvs_index_cmds_reset(&b->cmds.c);
        if (kvs_index_lookup_cmds(&lk, b->names, &b->cmds.c, &err) != KVS_OK
            || bench_roundtrip_timed(b, o) != KVS_OK
            || kvs_index_lookup_round2(&lk, b->rp.top, b->cmds.c.n_cmds,
                                       &err) != KVS_OK)
        {
            fprintf(stderr, "bench_route: round 2: %s\n", err.msg);
            return KVS_EIO;
        }
    }

    kvs_index_lookup_result(&lk, blocks);
    kvs_index_choose(b->cands, BENCH_HOSTS, blocks, b->bt, n == 0,
                     &b->conf, &ch);

    o->ns = bench_now_ns() - t0;
    o->host = ch.host;
    o->cached = ch.cached_tokens;
    o->rounds = lk.rounds;

    kvs_index_cmds_reset(&b->cmds.c);
    bench_replies_free_raw(&b->rp);
    return KVS_OK;
}


/* Sets has[h] for the hosts an HGETALL reply names with their current
 * incarnation, 0 for the others. */
static void
bench_naive_mark(const bench_t *b, const kvs_index_reply_t *r, int *has)
{
    size_t       i, h, id_len;
    uint64_t     inc;
    const char  *id;

    memset(has, 0, BENCH_HOSTS * sizeof(int));

    if (r->type != KVS_INDEX_REPLY_ARRAY || r->elements % 2 != 0) {
        return;
    }

    for (i = 0; i < r->elements; i += 2) {
        if (kvs_index_blk_entry(&r->element[i], &r->element[i + 1], &id,
                                &id_len, &inc) != KVS_OK)
        {
            continue;
        }

        for (h = 0; h < BENCH_HOSTS; h++) {
            if (b->cands[h].id_len == id_len
                && memcmp(b->cands[h].id, id, id_len) == 0
                && b->cands[h].incarnation == inc)
            {
                has[h] = 1;
            }
        }
    }
}


/*
 * The naive lookup: every block, pipelined in one round trip (seq 0) or
 * one round trip per block until no host holds it (seq 1).
 */
static int
bench_naive(bench_t *b, const bench_prompt_t *p, int seq, bench_out_t *o)
{
    int                 rc, has[BENCH_HOSTS], open[BENCH_HOSTS], any;
    size_t              n, i, h, at;
    uint32_t            blocks[BENCH_HOSTS];
    uint64_t            t0;
    kvs_err_t           err;
    kvs_index_choice_t  ch;

    t0 = bench_now_ns();

    rc = bench_names(b, p->tokens, p->n_tokens, &n);
    if (rc != KVS_OK) {
        return rc;
    }

    o->names_ns = bench_now_ns() - t0;
    o->rt_ns = 0;

    for (h = 0; h < BENCH_HOSTS; h++) {
        blocks[h] = 0;
        open[h] = b->cands[h].up;
    }

    o->rounds = 0;
    o->probes1 = 0;
    o->probes2 = 0;
    kvs_index_cmds_reset(&b->cmds.c);

    for (i = 0, at = 0; i < n; i++) {
        if (kvs_index_cmd_blk_get(&b->cmds.c, &b->names[i], &err)
            != KVS_OK)
        {
            fprintf(stderr, "bench_route: naive: %s\n", err.msg);
            return KVS_ERANGE;
        }

        if (seq || i == n - 1) {
            rc = bench_roundtrip_timed(b, o);
            if (rc != KVS_OK) {
                return rc;
            }

            o->rounds++;
            o->probes1 += (uint32_t) b->cmds.c.n_cmds;

            /* replies for blocks [at, i] */
            any = 0;
            for ( /* void */ ; at <= i; at++) {
                bench_naive_mark(b, &b->rp.top[b->cmds.c.n_cmds
                                               - (i + 1 - at)], has);
                for (h = 0; h < BENCH_HOSTS; h++) {
                    if (open[h] && has[h]) {
                        blocks[h] = (uint32_t) at + 1;
                    } else {
                        open[h] = 0;
                    }

                    any |= open[h];
                }
            }

            kvs_index_cmds_reset(&b->cmds.c);
            bench_replies_free_raw(&b->rp);

            if (!any) {
                break;
            }
        }
    }

    kvs_index_choose(b->cands, BENCH_HOSTS, blocks, b->bt, n == 0,
                     &b->conf, &ch);

    o->ns = bench_now_ns() - t0;
    o->host = ch.host;
    o->cached = ch.cached_tokens;
    return KVS_OK;
}


static int
bench_u64_cmp(const void *a, const void *b)
{
    uint64_t  x, y;

    x = *(const uint64_t *) a;
    y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}


static double
bench_pct_us(uint64_t *v, size_t n, unsigned pct)
{
    if (n == 0) {
        return 0;
    }

    qsort(v, n, sizeof(uint64_t), bench_u64_cmp);
    return (double) v[(n - 1) * pct / 100] / 1000.0;
}


typedef struct {
    const char  *name;
    uint64_t    *ns;                  /* [n] */
    size_t       n;
    uint32_t     max_rounds;
    double       probes1;             /* sums, then means */
    double       probes2;
    uint32_t     max_probes2;
    double       names_us;            /* sums, then means */
    double       rt_us;
    double       min;
    double       p50;
    double       p99;
} bench_stat_t;


static void
bench_stat_add(bench_stat_t *s, const bench_out_t *o)
{
    s->ns[s->n++] = o->ns;
    s->max_rounds = o->rounds > s->max_rounds ? o->rounds : s->max_rounds;
    s->probes1 += o->probes1;
    s->probes2 += o->probes2;
    s->max_probes2 = o->probes2 > s->max_probes2 ? o->probes2
                                                 : s->max_probes2;
    s->names_us += (double) o->names_ns / 1000.0;
    s->rt_us += (double) o->rt_ns / 1000.0;
}


static void
bench_stat_done(bench_stat_t *s, size_t tokens)
{
    double  n;

    n = s->n ? (double) s->n : 1;
    s->probes1 /= n;
    s->probes2 /= n;
    s->names_us /= n;
    s->rt_us /= n;
    s->min = bench_pct_us(s->ns, s->n, 0);
    s->p50 = bench_pct_us(s->ns, s->n, 50);
    s->p99 = bench_pct_us(s->ns, s->n, 99);

    printf("  %-17s %8.1f %8.1f %8.1f %6u %9.1f %9.1f %8.1f %8.1f %5zu\n",
           s->name, s->min, s->p50, s->p99, s->max_rounds, s->probes1,
           s->probes2, s->names_us, s->rt_us, s->n);
    printf("route_lookup tokens=%zu method=%s n=%zu min_us=%.1f p50_us=%.1f "
           "p99_us=%.1f max_rounds=%u probes1=%.1f probes2=%.1f "
           "max_probes2=%u names_us=%.1f roundtrips_us=%.1f\n", tokens,
           s->name, s->n, s->min, s->p50, s->p99, s->max_rounds,
           s->probes1, s->probes2, s->max_probes2, s->names_us, s->rt_us);
}


static int
bench_check(const bench_prompt_t *p, const bench_out_t *o,
    const char *what, size_t k)
{
    if (o->host == p->want.host && o->cached == p->want.cached_tokens) {
        return 0;
    }

    fprintf(stderr, "bench_route: %s, prompt %zu: chose host %d with %u "
            "tokens, truth host %d with %u (held %u %u %u)\n", what, k,
            o->host, o->cached, p->want.host, p->want.cached_tokens,
            p->held[0], p->held[1], p->held[2]);
    return 1;
}


static int
bench_size(bench_t *b, size_t tokens, size_t n_prompts, size_t passes,
    size_t n_seq)
{
    int              rc, wrong;
    size_t           k, pass, n_look, n_blocks;
    uint64_t         t_fill;
    bench_out_t      o;
    bench_stat_t     st[3];
    bench_prompt_t  *pr;

    pr = calloc(n_prompts, sizeof(*pr));
    n_look = n_prompts * passes;
    memset(st, 0, sizeof(st));
    st[0].name = "two-round";
    st[1].name = "naive-pipelined";
    st[2].name = "naive-sequential";
    st[0].ns = malloc(n_look * sizeof(uint64_t));
    st[1].ns = malloc(n_look * sizeof(uint64_t));
    st[2].ns = malloc((n_seq + 1) * sizeof(uint64_t));

    if (pr == NULL || st[0].ns == NULL || st[1].ns == NULL
        || st[2].ns == NULL)
    {
        return KVS_ENOMEM;
    }

    rc = KVS_OK;
    wrong = 0;
    n_blocks = tokens / b->bt;

    t_fill = bench_now_ns();
    for (k = 0; k < n_prompts && rc == KVS_OK; k++) {
        rc = bench_fill_prompt(b, &pr[k], tokens);
    }

    if (rc == KVS_OK) {
        rc = bench_flush(b, "fill");
    }

    if (rc != KVS_OK) {
        goto done;
    }

    t_fill = bench_now_ns() - t_fill;

    printf("\n%zu-token prompts: %zu blocks of %u, %zu prompts (filled in "
           "%.1f s), %zu timed lookups each\n", tokens, n_blocks, b->bt,
           n_prompts, (double) t_fill / 1e9, n_look);
    printf("  %-17s %8s %8s %8s %6s %9s %9s %8s %8s %5s\n", "method",
           "min us", "p50 us", "p99 us", "rounds", "probes r1",
           "probes r2", "names us", "trips us", "n");

    /* one untimed pass: connections, caches and allocator warm */
    for (k = 0; k < n_prompts && rc == KVS_OK; k++) {
        rc = bench_lookup(b, &pr[k], &o);
        wrong += bench_check(&pr[k], &o, "two-round (warm-up)", k);
    }

    /*
     * Each method in a loop of its own: interleaved with the naive
     * pipeline (6,250 replies at 100k tokens, hundreds of KB through
     * hiredis and the socket), a two-round lookup right after it took
     * 2-5 times as long, a cost of the neighbour rather than of the
     * plan.  Every pass goes over all prompts.
     */
    for (pass = 0; pass < passes && rc == KVS_OK; pass++) {
        for (k = 0; k < n_prompts && rc == KVS_OK; k++) {
            rc = bench_lookup(b, &pr[k], &o);
            if (rc == KVS_OK) {
                wrong += bench_check(&pr[k], &o, "two-round", k);
                bench_stat_add(&st[0], &o);
            }
        }
    }

    for (pass = 0; pass < passes && rc == KVS_OK; pass++) {
        for (k = 0; k < n_prompts && rc == KVS_OK; k++) {
            rc = bench_naive(b, &pr[k], 0, &o);
            if (rc == KVS_OK) {
                wrong += bench_check(&pr[k], &o, "naive pipelined", k);
                bench_stat_add(&st[1], &o);
            }
        }
    }

    for (k = 0; k < n_seq && rc == KVS_OK; k++) {
        rc = bench_naive(b, &pr[k % n_prompts], 1, &o);
        if (rc == KVS_OK) {
            wrong += bench_check(&pr[k % n_prompts], &o, "naive sequential",
                                 k % n_prompts);
            bench_stat_add(&st[2], &o);
        }
    }

    if (rc != KVS_OK) {
        goto done;
    }

    for (k = 0; k < 3; k++) {
        bench_stat_done(&st[k], tokens);
    }

    printf("  ratio p50: naive-pipelined / two-round %.1fx, "
           "naive-sequential / two-round %.1fx (rounds: max; probes, "
           "names, trips: means per lookup)\n",
           st[1].p50 / st[0].p50, st[2].p50 / st[0].p50);
    printf("route_ratio tokens=%zu pipelined_p50=%.2f sequential_p50=%.2f "
           "pipelined_p99=%.2f sequential_p99=%.2f wrong=%d\n", tokens,
           st[1].p50 / st[0].p50, st[2].p50 / st[0].p50,
           st[1].p99 / st[0].p99, st[2].p99 / st[0].p99, wrong);

    if (wrong) {
        fprintf(stderr, "bench_route: %d wrong choices\n", wrong);
        rc = KVS_EFORMAT;
    }

done:

    for (k = 0; k < n_prompts; k++) {
        free(pr[k].tokens);
    }

    free(pr);
    free(st[0].ns);
    free(st[1].ns);
    free(st[2].ns);
    return rc;
}


static void
bench_usage(void)
{
    fprintf(stderr, "usage: bench_route -p PORT [-t SIZES] [-n PROMPTS] "
            "[-r PASSES] [-q SEQ] [-b BLOCK_TOKENS]\n");
}


int
main(int argc, char **argv)
{
    int            i, port, rc;
    char          *s, *end;
    size_t         sizes[BENCH_SIZES_MAX], n_sizes, k, max_tokens,
                   n_prompts, passes, n_seq, cap;
    uint64_t       ns;
    bench_t        b;
    redisReply    *r;
    const char    *list;
    struct timeval tv;

    port = 0;
    list = "1000,10000,100000";
    n_prompts = 32;
    passes = 8;
    n_seq = 8;
    memset(&b, 0, sizeof(b));
    b.bt = 16;
    b.rng = 0x9e3779b97f4a7c15ULL;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-p") == 0) {
            port = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "-t") == 0) {
            list = argv[i + 1];
        } else if (strcmp(argv[i], "-n") == 0) {
            n_prompts = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-r") == 0) {
            passes = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-q") == 0) {
            n_seq = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "-b") == 0) {
            b.bt = (uint32_t) strtoul(argv[i + 1], NULL, 10);
        } else {
            bench_usage();
            return 2;
        }
    }

    n_sizes = 0;
    max_tokens = 0;
    for (s = (char *) list; *s != '\0' && n_sizes < BENCH_SIZES_MAX;
         s = *end == ',' ? end + 1 : end)
    {
        sizes[n_sizes] = strtoul(s, &end, 10);
        if (end == s || sizes[n_sizes] == 0) {
            bench_usage();
            return 2;
        }

        max_tokens = sizes[n_sizes] > max_tokens ? sizes[n_sizes]
                                                 : max_tokens;
        n_sizes++;
    }

    if (port <= 0 || port > 65535 || n_sizes == 0 || n_prompts == 0
        || passes == 0 || b.bt == 0 || b.bt > KVS_INDEX_BLOCK_TOKENS_MAX)
    {
        bench_usage();
        return 2;
    }

    b.ns.model = BENCH_MODEL;
    b.ns.model_len = strlen(BENCH_MODEL);
    b.ns.epoch = BENCH_EPOCH;
    b.ns.adapter = "";
    b.ns.scope = "";
    kvs_index_route_conf_default(&b.conf);

    /* every batch holds a whole naive pipeline: one command per block */
    b.names_cap = max_tokens / b.bt + 1;
    cap = b.names_cap > BENCH_FILL_BATCH ? b.names_cap : BENCH_FILL_BATCH;
    b.names = malloc(b.names_cap * sizeof(kvs_index_name_t));
    b.lk_len = kvs_index_lookup_mem((uint32_t) b.names_cap, BENCH_HOSTS,
                                    &b.conf);
    b.lk_mem = aligned_alloc(8, (b.lk_len + 7) & ~(size_t) 7);

    if (b.names == NULL || b.lk_mem == NULL
        || bench_cmds_alloc(&b.cmds, cap) != KVS_OK
        || bench_replies_alloc(&b.rp, cap) != KVS_OK)
    {
        fprintf(stderr, "bench_route: out of memory\n");
        return 1;
    }

    tv.tv_sec = 30;
    tv.tv_usec = 0;
    b.rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (b.rc == NULL || b.rc->err) {
        fprintf(stderr, "bench_route: redis at 127.0.0.1:%d: %s\n", port,
                b.rc ? b.rc->errstr : "out of memory");
        return 1;
    }

    redisSetTimeout(b.rc, tv);

    /* a Redis of our own: start empty */
    r = redisCommand(b.rc, "FLUSHALL");
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "bench_route: FLUSHALL failed\n");
        return 1;
    }

    freeReplyObject(r);

    rc = bench_hosts(&b, &ns);
    if (rc != KVS_OK) {
        return 1;
    }

    printf("bench_route: redis 127.0.0.1:%d, %d hosts (loads 0, 1, 2; "
           "load weight %.0f), host table refresh (2 round trips, not per "
           "request) %.1f us; two-round's round 1 also GETs the %d host "
           "records (not in probes r1)\n", port, BENCH_HOSTS,
           b.conf.load_weight, (double) ns / 1000.0, BENCH_HOSTS);

    for (k = 0; k < n_sizes; k++) {
        rc = bench_size(&b, sizes[k], n_prompts, passes, n_seq);
        if (rc != KVS_OK) {
            return 1;
        }

        fflush(stdout);
    }

    redisFree(b.rc);
    free(b.names);
    free(b.lk_mem);
    free(b.cmds.buf);
    free(b.cmds.argv);
    free(b.cmds.argvlen);
    free(b.cmds.first);
    free(b.rp.top);
    free(b.rp.elem);
    free(b.rp.raw);
    return 0;
}
