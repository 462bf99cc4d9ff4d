/*
 * kvs_sched: iteration-level continuous batching over a KV block pool.
 *
 * Sequences wait in arrival order and run in arrival order.  Each step
 * (kvs_sched_plan) takes, oldest first: one token of every running
 * sequence that decodes, the next chunk of every running sequence still
 * prefilling, then admits waiting sequences with prefill chunks, all
 * within the step's token budget (max_batch_tokens).  Admission is fair
 * between tenants (kvs_fair.h): the oldest waiting sequence of the
 * tenant served least so far goes first.  A long prompt is
 * thus prefilled over several steps while the others keep decoding.
 *
 * When a running sequence needs a block and the pool has none, the
 * newest running sequence is preempted: its blocks go back to the pool
 * and it returns to the waiting queue (at its arrival place) to be
 * recomputed from its tokens, prompt and generated, later.  Its sampler
 * state lives with the engine, so what it generates does not depend on
 * whether it was preempted.  Waiting sequences never preempt running
 * ones: they are admitted when their first chunk's blocks are free;
 * but for the caps below.
 *
 * Caps while others wait: a tenant holding over its share of the pool
 * (fair_kv_max_milli) or a request, a group of sequences, holding over
 * its own (req_kv_max_milli) is not admitted more while another's
 * sequences wait; and when a sequence under both caps needs blocks the
 * pool lacks, the newest running sequence over a cap is preempted first
 * (kvs_sched_plan), so one that filled the cache before others came
 * cannot keep them out until it ends.  Alone, a tenant or a request may
 * take the whole pool: the caps only share it.
 *
 * Sliding windows (conf.window, set when every layer of the model has
 * one): after each step, a running sequence gives back the blocks whose
 * every position p is older than the window of the next position to
 * compute, p <= n_computed - window (the backends' mask: a query at q
 * reads q - window + 1 .. q), leaving holes in its table
 * (kvs_kv_table_drop).  With the prefix cache, blocks leave the table
 * this way only once the tree has them: whole blocks are inserted
 * before they are dropped (so the tree's paths stay complete from the
 * root, exact prefixes as ever), a dropped block the tree holds lives
 * on as cached (evictable), and such a sequence holds no lock on the
 * tree (its table's references keep its window alive; a lock would
 * hold the whole path from the root).  Its admission counts the blocks
 * its window and a step's chunk span instead of the whole context.
 *
 * A sequence whose prompt plus max_tokens can never fit (the context, the
 * whole pool, or with chunked prefill off the step budget) is refused by
 * kvs_sched_add() with the reason, and nothing changes.
 *
 * KV pools (conf.pool_min_tokens, docs/pools.md; not with a window): a
 * sequence whose prompt plus max_tokens reach pool_min_tokens is long,
 * the others short; its need is the blocks of that whole length.  A long
 * sequence is admitted only when its need fits in the long pool's share
 * (pool_share_milli of the blocks, less what running long ones hold),
 * fewer than pool_max_prefill long ones are prefilling, and the pool has
 * its need free (free + evictable); it then takes all those blocks at
 * once, so it never needs a block again and is never preempted by
 * anyone: running long sequences are no preemption victims.  Long
 * sequences are admitted oldest first, and a short one only when its
 * whole need fits the free blocks left after the oldest waiting long
 * one's need (when the long pool has room for it): short traffic cannot
 * starve it.  Long prefills come last in a step, pool_chunk tokens at
 * most (all long ones together), and only in a step that prefills no
 * short prompt, or else in every other step: short prompts go first,
 * long ones still advance.  A sequence still waiting (never admitted)
 * queue_timeout_ms after it was added leaves the queue through
 * kvs_sched_expire(), with a retry-after from the measured rate at
 * which finished sequences give blocks back.
 *
 * Ownership: the caller (the engine) owns each kvs_seq_t and its token
 * array; the scheduler links it into its queues and owns, through the
 * sequence's block table, one pool reference per block the table holds.
 * The pool is borrowed and must outlive the scheduler.  One thread (the
 * engine's) uses a scheduler; nothing here locks.
 */

#ifndef KVS_SCHED_H
#define KVS_SCHED_H

#include <stdint.h>

#include "kv/kvs_batch.h"
#include "base/kvs_err.h"
#include "kv/kvs_kv_pool.h"
#include "kv/kvs_kv_table.h"
#include "kv/kvs_radix.h"
#include "kvs_fair.h"

typedef enum {
    KVS_SEQ_NEW = 0,                  /* not added yet, or removed */
    KVS_SEQ_WAITING,
    KVS_SEQ_RUNNING
} kvs_seq_state_t;

typedef struct kvs_seq_s  kvs_seq_t;

/*
 * A request's sequences (its prompts' choices), for the request KV cap:
 * made by kvs_sched_group_new(), shared by kvs_sched_group(), freed with
 * the last kvs_sched_ungroup().
 */
typedef struct {
    uint32_t  refs;                   /* sequences in it */
    uint32_t  kv_blocks;              /* its running sequences' blocks,
                                         as of the current plan */
} kvs_seq_group_t;

struct kvs_seq_s {
    uint64_t          order;          /* arrival rank: smaller is older */
    kvs_seq_state_t   state;
    int32_t          *tokens;         /* [cap]: prompt, then generated */
    uint32_t          cap;            /* n_prompt + max_tokens */
    uint32_t          n_prompt;
    uint32_t          n_tokens;       /* prompt + generated so far */
    uint32_t          n_computed;     /* positions whose K/V is cached */
    uint32_t          n_step;         /* positions this step computes */
    uint32_t          n_preempted;    /* times it lost its blocks */
    kvs_kv_table_t    table;

    /* prefix cache (ns NULL: none for this sequence) */
    kvs_radix_ns_t   *ns;             /* the caller's hold */
    kvs_radix_node_t *cache_node;     /* the cached prefix it locks */
    uint32_t          n_cached;       /* prompt tokens reused at its
                                         first admission */
    uint32_t          n_cached_tier;  /* of those, loaded from the lower
                                         tier: in [tier_from, tier_to) */
    uint32_t          tier_from;      /* tokens a lower tier put into the
                                         cache for it before it was
                                         added (the caller's; 0, 0: */
    uint32_t          tier_to;        /* none) */
    uint32_t          tier_host_blocks;   /* of [tier_from, tier_to)'s
                                         blocks, those copied from the
                                         host tier, and whether the */
    uint8_t           tier_last_host; /* last is one (the caller's) */
    uint32_t          n_cached_host;  /* of n_cached, copied in from the
                                         host tier: in [host_from,
                                         host_to), and the host blocks
                                         of [tier_from, tier_to) */
    uint32_t          host_from;      /* set as tier_from */
    uint32_t          host_to;
    kvs_radix_miss_t  miss;           /* why that reuse stopped */
    uint32_t          miss_pos;
    uint8_t           looked_up;      /* n_cached and miss are set */
    uint8_t           prompt_cached;  /* its prompt is in the cache */
    kvs_tenant_t     *tenant;         /* for the fair share; NULL: none */
    kvs_seq_group_t  *group;          /* its request; NULL: none */
    uint8_t           step_decode;    /* this step decodes one token */
    uint8_t           tail_only;      /* done generating: computes its
                                         last token's K/V for the cache
                                         (it completes a block), wants
                                         no logits */
    uint8_t           pool;           /* KVS_POOL_SHORT or _LONG */
    uint8_t           admitted;       /* ran once: never expires */
    uint32_t          need;           /* blocks of prompt + max_tokens */
    uint64_t          queued_ms;      /* when it was added (s->now) */

    kvs_seq_t        *prev;           /* in its queue */
    kvs_seq_t        *next;
    kvs_seq_t        *step_next;      /* in this step's list */
};

#define KVS_POOL_SHORT  0
#define KVS_POOL_LONG   1
#define KVS_POOL_N      2

/* A pool's figures, for metrics: now (used, queued) and since the
 * scheduler began (the others). */
typedef struct {
    uint32_t  max_blocks;             /* it may hold: the long share, or
                                         the whole pool */
    uint32_t  used;                   /* held by its running sequences */
    uint32_t  queued;                 /* its sequences waiting */
    uint64_t  admitted;               /* sequences it admitted */
    uint64_t  waited;                 /* of those, admitted 1 ms or more
                                         after they were added */
    uint64_t  wait_ms;                /* their time in the queue */
    uint64_t  refused;                /* too big for it, or expired */
} kvs_sched_pool_t;

typedef struct {
    kvs_seq_t  *head;                 /* oldest */
    kvs_seq_t  *tail;                 /* newest */
    uint32_t    n;
} kvs_seq_queue_t;

typedef struct {
    uint32_t  max_batch_tokens;       /* tokens per step, >= 1 */
    uint32_t  max_running;            /* sequences per step, >= 1 */
    uint32_t  n_ctx;                  /* positions a sequence may use */
    int       chunked_prefill;        /* 0: a prompt runs in one step */
    uint32_t  fair_w_prefill;         /* tenant counter weights; 0: 1 */
    uint32_t  fair_w_decode;
    uint32_t  fair_kv_max_milli;      /* KV cap per tenant while others
                                         wait, thousandths; 0: none */
    int       no_fair;                /* admit in arrival order whatever
                                         the tenants (counters are still
                                         kept: baselines, benchmarks) */
    uint32_t  req_kv_max_milli;       /* KV cap per group (request) while
                                         others wait, thousandths; 0 or
                                         1000: none */
    uint32_t  window;                 /* every layer's sliding window
                                         (kvs_hparams_swa_all), or 0:
                                         sequences keep all blocks */
    uint32_t  pool_min_tokens;        /* prompt + max_tokens that make a
                                         sequence long; 0: no pools */
    uint32_t  pool_share_milli;       /* the long pool's most blocks,
                                         thousandths, 1..1000 */
    uint32_t  pool_max_prefill;       /* long ones prefilling at once,
                                         >= 1 */
    uint32_t  pool_chunk;             /* long prefill tokens a step, all
                                         together; 0: the step budget */
    uint32_t  queue_timeout_ms;       /* 0: a sequence waits forever */
} kvs_sched_conf_t;

/* A planned step: the batch to run, and whose logits come back. */
typedef struct {
    kvs_batch_t   batch;
    kvs_seq_t   **logits_seq;         /* [n_logits] sequence of logits row
                                         i, in batch order */
    uint32_t      n_logits;
    uint32_t     *cow_src;            /* [n_cow] blocks to copy, before */
    uint32_t     *cow_dst;            /* the step runs, into these */
    uint32_t      n_cow;
    uint32_t      n_prefill;          /* tokens of prompts/recomputes */
    uint32_t      n_decode;           /* tokens of decoding sequences */
    kvs_seq_t    *seqs;               /* step_next list of the scheduled */
} kvs_sched_plan_t;

/* A lower tier's look at a sequence about to be admitted (see
 * kvs_sched_set_lower()): 1 when the caller took it out of the waiting
 * queue (kvs_sched_remove) to load its blocks first. */
typedef int (*kvs_sched_lower_pt)(void *arg, kvs_seq_t *seq);

typedef struct {
    kvs_sched_conf_t   conf;
    kvs_kv_pool_t     *pool;          /* borrowed */
    kvs_seq_queue_t    waiting;       /* by order */
    kvs_seq_queue_t    running;       /* by order */
    uint64_t           next_order;
    kvs_batch_tok_t   *toks;          /* [conf.max_batch_tokens] */
    kvs_seq_t        **logits_seq;    /* [conf.max_running] */
    uint32_t          *cow;           /* [2][conf.max_running]: at most
                                         one copy per sequence a step */
    uint64_t           n_preemptions; /* since creation */

    kvs_fair_t         fair;          /* tenants */
    kvs_radix_t       *radix;         /* borrowed; NULL: no prefix cache */
    uint32_t          *match;         /* [ceil(n_ctx / block_tokens)] */
    uint64_t           now;           /* ms, set by the caller per step */
    uint64_t           n_query_tokens;    /* prompt tokens looked up */
    uint64_t           n_hit_tokens;      /* of those, reused */
    uint64_t           n_tier_hit_tokens; /* of those, from the tier */
    uint64_t           n_host_hit_tokens; /* ... from the host tier */
    kvs_sched_lower_pt lower;         /* NULL: no lower tier */
    void              *lower_arg;

    int                pools_on;      /* conf.pool_min_tokens, no window */
    int                long_skipped;  /* the last plan left long prefills
                                         out: this one takes them */
    kvs_sched_pool_t   pools[KVS_POOL_N];
    uint64_t           n_freed;       /* blocks ended sequences gave back */
    uint64_t           rate_ms;       /* the rate's last sample: when, */
    uint64_t           rate_freed;    /* and n_freed then */
    double             free_rate;     /* blocks per second, smoothed */
} kvs_sched_t;

/* Checks conf (KVS_EINVAL names the field) and allocates the step
 * arrays.  On failure s owns nothing. */
int kvs_sched_init(kvs_sched_t *s, const kvs_sched_conf_t *conf,
    kvs_kv_pool_t *pool, kvs_err_t *err);

/*
 * Uses the prefix cache radix (on s's pool) from now on: a sequence with
 * a namespace reuses the longest cached prefix of its tokens when it is
 * admitted, caches its prompt once computed and all it computed when it
 * ends or is preempted; the pool's shortage evicts cached blocks before
 * it preempts.  KVS_ENOMEM leaves s without a cache.
 */
int kvs_sched_set_cache(kvs_sched_t *s, kvs_radix_t *radix, kvs_err_t *err);

/*
 * A lower tier of the prefix cache (host memory, disk): before a waiting
 * sequence that holds no blocks (never admitted, or preempted) looks
 * up the tree at its admission, fn is asked about it, so that blocks
 * evicted while it waited are loaded back rather than recomputed.  fn
 * returning 1 has taken seq out of the waiting queue; it brings it back
 * with kvs_sched_return().  NULL: none.
 */
void kvs_sched_set_lower(kvs_sched_t *s, kvs_sched_lower_pt fn, void *arg);

/* Releases every queued sequence's blocks (they stay the caller's) and
 * the step arrays. */
void kvs_sched_free(kvs_sched_t *s);

/*
 * Sets up seq (zeroed by the caller or left NEW by a remove) with a copy
 * of prompt[n_prompt] and room for max_tokens generated tokens.
 * KVS_EINVAL for an empty prompt or max_tokens 0; KVS_ERANGE, with the
 * numbers, when prompt plus max_tokens exceed the context, the pool (with
 * a window: the most blocks it holds at once) or (chunked prefill off)
 * the step budget; KVS_ENOMEM.
 */
int kvs_seq_init(kvs_seq_t *seq, const kvs_sched_t *s, const int32_t *prompt,
    uint32_t n_prompt, uint32_t max_tokens, kvs_err_t *err);
void kvs_seq_free(kvs_seq_t *seq);

/*
 * Makes seq one of key's sequences for the fair share (before it is
 * added); kvs_sched_untenant() undoes it when the sequence ends.  Without
 * a tenant a sequence counts as the nameless one's.  KVS_EINVAL for a
 * key over KVS_FAIR_MAX_KEY, KVS_ENOMEM.
 */
int kvs_sched_tenant(kvs_sched_t *s, kvs_seq_t *seq, const char *key,
    size_t key_len, kvs_err_t *err);
void kvs_sched_untenant(kvs_sched_t *s, kvs_seq_t *seq);

/*
 * A new group for a request's sequences, none in it yet; KVS_ENOMEM.
 * kvs_sched_group() puts seq in g (before it is added); the sequence's
 * end calls kvs_sched_ungroup(), and the group goes with its last.
 */
int kvs_sched_group_new(kvs_seq_group_t **g, kvs_err_t *err);
void kvs_sched_group(kvs_seq_t *seq, kvs_seq_group_t *g);
void kvs_sched_ungroup(kvs_seq_t *seq);

/* Counts each tenant's and group's blocks (kv_blocks) from its running
 * sequences' tables, and each pool's used and queued: at each plan, and
 * for whoever reports them. */
void kvs_sched_kv_count(kvs_sched_t *s);

/* What the long pool may still admit (pools on; else both 0), for the
 * host record gateways reserve against (docs/pools.md "Across hosts"):
 * *room the blocks of its share that neither running long sequences
 * hold nor waiting ones need, *slots the prefill slots that neither
 * prefilling nor waiting long sequences take.  After kvs_sched_kv_count
 * (used). */
void kvs_sched_long_room(const kvs_sched_t *s, uint32_t *room,
    uint32_t *slots);

/* Queues an initialised sequence at the back of the waiting queue. */
void kvs_sched_add(kvs_sched_t *s, kvs_seq_t *seq);

/* Queues again a sequence that the lower tier's hook took out of the
 * waiting queue, at its old place (its order and queue time kept). */
void kvs_sched_return(kvs_sched_t *s, kvs_seq_t *seq);

/* Takes seq out of its queue and returns its blocks to the pool (finish,
 * cancel); a NEW seq is left as it is. */
void kvs_sched_remove(kvs_sched_t *s, kvs_seq_t *seq);

/*
 * Plans the next step, reserving the blocks its tokens need (and
 * preempting, newest first, when the pool runs out), and the block
 * copies (cow_src -> cow_dst) the caller must make before running it.
 * An empty plan (batch.n == 0) means there is nothing to run.  Blocks
 * reserved for a step that then fails stay with their sequences and are
 * used by the next plan, so a failed step leaks nothing.
 */
void kvs_sched_plan(kvs_sched_t *s, kvs_sched_plan_t *plan);

/*
 * Starts child as a copy of parent's cached positions (n > 1: the choices
 * share the prompt's blocks by reference; the first write into a shared,
 * partly filled block copies it, see kvs_sched_plan).  child was set up
 * by kvs_seq_init() with the same prompt, and parent's cache must not go
 * past it.  Returns 1 when child runs from the shared blocks, 0 when it
 * was queued to compute its prompt itself (no running slot left, or the
 * id array could not grow): never an error.
 */
int kvs_sched_fork(kvs_sched_t *s, kvs_seq_t *parent, kvs_seq_t *child);

/*
 * Takes the waiting sequences that were never admitted and were added
 * conf.queue_timeout_ms or more before s->now out of the queue (they
 * hold nothing), counts them refused, and returns them linked by
 * step_next; the caller ends them.  NULL when none.
 */
kvs_seq_t *kvs_sched_expire(kvs_sched_t *s);

/* Seconds after which seq (waiting) could expect its need to fit, from
 * the blocks it lacks now and the measured rate at which blocks are
 * freed; 1..3600 (the queue timeout's when nothing was freed yet). */
uint32_t kvs_sched_retry_after(kvs_sched_t *s, const kvs_seq_t *seq);

/* After the step ran: the planned positions are now cached. */
void kvs_sched_commit(kvs_sched_t *s, kvs_sched_plan_t *plan);

/* Appends a generated token; the caller made sure there is room (n_tokens
 * < cap), which kvs_seq_init's max_tokens guarantees. */
static inline void
kvs_seq_append(kvs_seq_t *seq, int32_t token)
{
    seq->tokens[seq->n_tokens++] = token;
}

static inline uint32_t
kvs_seq_generated(const kvs_seq_t *seq)
{
    return seq->n_tokens - seq->n_prompt;
}

#endif /* KVS_SCHED_H */
