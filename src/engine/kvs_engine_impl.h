/*
 * kvs_engine_impl: the engine's insides, shared by kvs_engine.c (the step
 * loop, on the engine thread) and kvs_engine_io.c (the hand-over to the
 * consumer).  Not for use outside src/engine.
 *
 * State split:
 *   - engine thread only: the scheduler, pool, backend, and each
 *     sequence's kvs_seq_t, sampler, detokenizer and stop matcher;
 *   - under e->lock: the inbox (submitted, not yet scheduled), the
 *     cancel list, every handle's outbox, refs and flags, the ready
 *     list, the stats copy.
 * The engine thread computes without the lock and takes it briefly to
 * publish each output and once per step for the stats.
 *
 * Invariants:
 *   - refs counts the engine's hold (until the sequence ends), the
 *     consumer's (until close) and the cancel list's (while on it); the
 *     handle is freed at 0;
 *   - a handle is on the ready list (ready == 1) iff it has output the
 *     consumer has not read, or its end, and the consumer still holds
 *     it; the eventfd is written when the list goes from empty to not;
 *   - every block a sequence holds is released when it ends, whatever
 *     the reason, before its engine hold is dropped;
 *   - a running sequence's kv_block_us counts its blocks x the time from
 *     kv_stamp_ns, which every step's count (kvs_engine_kv_count) moves
 *     to that step's start; a sequence admitted by a plan starts from
 *     that plan, so time in the queue counts nothing;
 *   - a sequence's prefix cache namespace (seq.ns) is taken when the
 *     engine thread takes the request and put back when it ends, on the
 *     engine thread: the cache is the engine thread's alone.
 */

#ifndef KVS_ENGINE_IMPL_H
#define KVS_ENGINE_IMPL_H

#include <pthread.h>

#include "backend/kvs_backend.h"
#include "kv/kvs_tier.h"
#include "sched/kvs_sched.h"
#include "tokenizer/kvs_tok.h"
#include "kvs_engine.h"
#include "sample/kvs_stop.h"
#include "grammar/kvs_grammar.h"
#include "grammar/kvs_gram_req.h"


struct kvs_engine_seq_s {
    /* engine thread only */
    kvs_seq_t                seq;      /* first: a kvs_seq_t * is one */
    kvs_sampler_t            sampler;
    kvs_detok_t              detok;
    kvs_stop_t               stop;
    int32_t                  stop_ids[KVS_ENGINE_MAX_STOP_IDS];
    uint32_t                 n_stop_ids;
    uint32_t                 max_tokens;
    int                      ignore_eos;
    int                      want_lp;
    void                    *data;

    /* an output constraint: the grammar (held in e->gcache), what it
     * still accepts, and its masks; gram NULL: none */
    kvs_gram_cached_t       *gram;
    kvs_gram_cache_t        *gcache;   /* the engine's, to put it back */
    kvs_gram_matcher_t       gm;
    kvs_gram_masker_t        gmk;
    int                      gshared;  /* gmk uses the grammar's table */

    /* prefix cache: the namespace key, taken on the engine thread */
    char                     scope[KVS_RADIX_MAX_SCOPE];
    size_t                   scope_len;
    uint32_t                 adapter;
    char                     tenant[KVS_FAIR_MAX_KEY];
    size_t                   tenant_len;
    kvs_engine_pin_t         pins[KVS_ENGINE_MAX_PINS];  /* choice 0 */
    uint32_t                 n_pins;
    uint32_t                 n_cache_created;
    uint8_t                  pins_done;
    uint8_t                  cache_told;   /* the cache figures went into
                                              out (under the lock) */
    kvs_finish_t             pending;  /* the end, once its tail_only
                                          step has run */
    uint32_t                 retry_after;  /* set when the queue timeout
                                              ends it, for out */
    uint8_t                  client_fault;  /* set when its grammar's
                                              run-time bound ends it, for
                                              out */
    uint64_t                 kv_block_us;  /* KV held so far, blocks x
                                              us (kvs_engine_kv_count) */
    uint64_t                 kv_stamp_ns;  /* counted until then; 0: not
                                              yet running */

    int                      drop;     /* closed before it was scheduled */
    kvs_engine_seq_t        *leader;   /* choices 1..n-1 of a request,
                                          until they fork from choice 0
                                          at its first token */
    kvs_engine_seq_t        *followers;     /* choice 0: those waiting */
    kvs_engine_seq_t        *next_follower;

    /* LoRA (kvs_engine_lora.c), engine thread only: the adapter's
     * hold, and the list of those waiting for their adapter to load */
    uint8_t                  lora_held;
    uint8_t                  lora_parked;
    uint64_t                 lora_since;   /* parked at, ms */
    kvs_engine_seq_t        *lora_prev;
    kvs_engine_seq_t        *lora_next;

    /* the disk tier's loader (kvs_engine_tload.c), engine thread only:
     * a request whose match continues into the tier waits outside the
     * scheduler while its blocks load, then holds them until admitted */
    uint8_t                  tier_state;   /* KVS_ENGINE_TIER_* */
    uint8_t                  tier_requeue; /* taken out of the waiting
                                              queue at its admission: it
                                              goes back to its place */
    uint8_t                  tier_loads;   /* loads planned at admission */
    uint8_t                  tier_held;    /* HOLD: it had a plan since */
    uint8_t                  tier_done;    /* no more at admission: the
                                              cost model chose to compute,
                                              or a load came back empty */
    struct kvs_engine_tjob_s *tier_job;    /* LOADING: its load */
    kvs_radix_node_t        *tier_node;    /* HOLD: the loaded path's
                                              lock */
    uint64_t                 tier_since;   /* parked at, ns */
    kvs_engine_seq_t        *tier_prev;
    kvs_engine_seq_t        *tier_next;

    /* under the engine's lock (separate fields, not bit-fields: the two
     * threads write neighbouring flags) */
    kvs_engine_out_t         out;      /* not yet read */
    unsigned                 refs;
    uint8_t                  cancelled;    /* the consumer closed early */
    uint8_t                  ended;        /* the engine let go; written
                                              by the engine thread only */
    uint8_t                  ready;
    uint8_t                  scheduled;    /* taken from the inbox */
    kvs_engine_seq_t        *next_in;      /* inbox; then the engine's */
    kvs_engine_seq_t        *next_cancel;  /* cancel list */
    kvs_engine_seq_t        *ready_prev;
    kvs_engine_seq_t        *ready_next;
};

/* One recorded name: added (del 0) or evicted, in the pool (tier 0),
 * the disk tier (1) or the host tier (2: kvs_index_tier_t's values). */
typedef struct {
    uint8_t  name[16];
    uint8_t  del;
    uint8_t  tier;
} kvs_engine_ix_ev_t;

/*
 * The prefix index's record (kvs_engine_index.c).  Engine thread only:
 * on, lost and the step's events (step_ev); under e->lock: what the
 * consumer asked (want_on, want_resync) and the events not yet taken
 * (ev), which the engine thread appends step_ev to once per step.
 */
typedef struct {
    int                      naming;   /* conf.index_model and a cache */
    size_t                   model_len;
    int                      on;       /* recording, engine thread's */
    int                      lost;     /* an event could not be kept */
    int                      listing;  /* step_ev begins with a listing */
    kvs_engine_ix_ev_t      *step_ev;  /* [step_n] this step's */
    size_t                   step_n;
    size_t                   step_cap;

    int                      want_on;  /* under e->lock from here */
    int                      want_resync;
    int                      resync;   /* ev begins with a listing */
    kvs_engine_ix_ev_t      *ev;       /* [ev_n] not yet taken */
    size_t                   ev_n;
    size_t                   ev_cap;
    size_t                   ev_max;   /* past it: dropped, resync */
} kvs_engine_ix_t;

typedef struct kvs_engine_tier_s     kvs_engine_tier_t;
typedef struct kvs_engine_tier_ix_s  kvs_engine_tier_ix_t;

struct kvs_engine_s {
    kvs_engine_conf_t        conf;
    kvs_backend_t           *be;
    kvs_kv_pool_t           *pool;
    kvs_sched_t              sched;
    kvs_radix_t             *radix;    /* NULL: no prefix cache */
    uint64_t                 epoch;    /* of the model's weights */
    float                   *logits;   /* [n_logits][n_vocab] of a step */
    size_t                   logits_cap;   /* floats */
    kvs_buf_t                piece;    /* detokenized text of a token */
    kvs_buf_t                text;     /* what of it the stop matcher
                                          let through */
    float                   *fork_logits;  /* [n_vocab] a leader's row,
                                              kept for its followers */
    float                   *row;          /* [n_vocab] a follower's copy */
    int                      efd;

    /* device sampling (backends with forward_sample) */
    kvs_backend_info_t       be_info;  /* what kvs_backend_new chose */
    char                     be_line[512];     /* kvs_engine_backend() */
    kvs_backend_sample_t    *dev_params;   /* [n_logits] a step's rows */
    size_t                   dev_params_cap;
    int32_t                 *dev_ids;      /* [n_logits] their tokens */
    size_t                   dev_ids_cap;

    /* output constraints: the vocabulary's token trie (built at load),
     * the compiled grammars (shared by the sequences, any thread), and
     * the engine thread's mask of a step */
    kvs_gram_vocab_t        *gv;           /* NULL: could not be built */
    char                     gv_why[KVS_ERR_MSG_LEN];   /* why not */
    uint64_t                 gv_ns;        /* its build time */
    kvs_gram_cache_t         gcache;
    uint32_t                *gbits;        /* [(n_vocab + 31) / 32] */
    int32_t                 *gids;         /* [n_vocab]: the ids gbits
                                              allows, for the sampler */

    pthread_mutex_t          lock;
    pthread_cond_t           wake;
    pthread_t                thread;
    int                      started;
    int                      quit;
    kvs_engine_seq_t        *inbox;    /* newest first */
    kvs_engine_seq_t        *cancels;
    kvs_engine_seq_t        *ready_head;
    kvs_engine_seq_t        *ready_tail;
    kvs_engine_stats_t       stats;    /* engine thread's, published */
    kvs_engine_stats_t       shown;    /* copy under the lock */
    kvs_engine_tenants_t     tenants;  /* published under the lock */
    kvs_engine_ix_t          ix;       /* the prefix index's record */
    kvs_engine_tier_t       *tier;     /* NULL: no disk tier */
    kvs_engine_tier_ix_t    *tier_ix;  /* the lower tiers' names in the
                                          prefix index; NULL: none */

    /* LoRA adapters (kvs_engine_lora.c) */
    struct kvs_engine_lora_s *lora;    /* NULL: none */
    int                      lora_ready;   /* under e->lock: the loader
                                              has finished a load */
    int                      tier_ready;   /* under e->lock: the tier's
                                              loader staged a block or
                                              finished a load */
};


/* kvs_engine.c */

/* One step's work (kvs_engine_step() wraps it with the index's record):
 * 1 if it did work, 0 if idle. */
int kvs_engine_step_run(kvs_engine_t *e);

/* The engine thread's stats, into the copy the consumer reads (under
 * e->lock). */
void kvs_engine_publish(kvs_engine_t *e);


/* kvs_engine_kv.c */

/* Adds each running sequence's blocks x the time since its stamp to its
 * kv_block_us and stamps it now_ns; a sequence without a stamp (just
 * forked) is only stamped. */
void kvs_engine_kv_count(kvs_engine_t *e, uint64_t now_ns);

/* After a plan at now_ns: the running sequences it admitted (their stamp
 * is not now_ns) count from now_ns. */
void kvs_engine_kv_admitted(kvs_engine_t *e, uint64_t now_ns);

/* h's blocks x the time since its stamp, once it ends (before its blocks
 * go back). */
void kvs_engine_kv_end(kvs_engine_seq_t *h);


/* kvs_engine_seq.c */

/* Samples h's next token from its logits row and hands it on. */
void kvs_engine_sample(kvs_engine_t *e, kvs_engine_seq_t *h, float *logits);
/* h's next token, sampled on the host or the device. */
void kvs_engine_token(kvs_engine_t *e, kvs_engine_seq_t *h, int32_t tok);
/* Ends h's sequence once (flush: the held-back text too). */
void kvs_engine_end(kvs_engine_t *e, kvs_engine_seq_t *h,
    kvs_finish_t finish, const char *error, int flush);


/* kvs_engine_index.c */

/* Sets the cache's hooks when the engine names blocks. */
void kvs_engine_index_init(kvs_engine_t *e);
void kvs_engine_index_done(kvs_engine_t *e);

/* Before a step: the consumer's wishes (on, off, resync: the listing). */
void kvs_engine_index_begin(kvs_engine_t *e);

/* After a step: its events to the consumer's record; the eventfd is
 * written when that record was empty. */
void kvs_engine_index_end(kvs_engine_t *e);

/* Whether the engine thread has index work (under e->lock). */
int kvs_engine_index_pending(const kvs_engine_t *e);

/* Records one event of name in tier (0 pool, 1 disk, 2 host) while
 * subscribed
 * (engine thread, inside a step: between begin and end). */
void kvs_engine_index_record(kvs_engine_t *e, const uint8_t *name,
    int del, int tier);


/* A request's place with the tier's loader (tier_state). */
#define KVS_ENGINE_TIER_NONE     0
#define KVS_ENGINE_TIER_WAIT     1    /* for room, or a load of the same
                                         blocks under way */
#define KVS_ENGINE_TIER_LOADING  2
#define KVS_ENGINE_TIER_HOLD     3    /* in the scheduler, holding what
                                         was loaded until its lookup */

/* kvs_engine_tier.c */

/* Opens conf.tier_path's tier (O_DIRECT, else buffered) and its spill
 * queue, and sets the cache's spill function and the scheduler's loader;
 * KVS_OK and nothing when no tier is configured.  KVS_EINVAL without a
 * prefix cache, KVS_EUNSUPPORTED for a backend that cannot copy blocks
 * out, the tier's errors.  On failure what was made stays in e->tier
 * for kvs_engine_tier_free(). */
int kvs_engine_tier_new(kvs_engine_t *e, kvs_err_t *err);
/* Writes what is queued, then closes the tier. */
void kvs_engine_tier_free(kvs_engine_t *e);
/* A step's prefill: tokens computed in ns, for the cost model. */
void kvs_engine_tier_prefill(kvs_engine_t *e, uint32_t tokens, uint64_t ns);
/* The tier's figures into e->stats.tier. */
void kvs_engine_tier_publish(kvs_engine_t *e);
/* The figures the tier and its queue keep (under their own locks) into
 * st, as of now; any thread. */
void kvs_engine_tier_live(kvs_engine_t *e, kvs_engine_tier_stats_t *st);


/* kvs_engine_tier_ix.c: the lower tiers' blocks in the prefix index */

/* With naming on: the table of spilled blocks' names (for slots + depth
 * disk blocks and the host tier's slots, if any) and the disk tier's
 * watch (tier NULL: the host tier alone).  KVS_OK and nothing without
 * naming. */
int kvs_engine_tier_ix_new(kvs_engine_t *e, kvs_tier_t *tier,
    uint64_t slots, uint32_t depth, kvs_err_t *err);
/* Unsets the watch (the writer must be stopped) and frees. */
void kvs_engine_tier_ix_free(kvs_engine_t *e, kvs_tier_t *tier);
/* The tree spills a block (engine thread, in the spill function): in
 * the tier already (stored 1) or queued for it (0). */
void kvs_engine_tier_ix_spilled(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, int stored);
/* The same with the block's name given (NULL: unnamed): a block the host
 * tier passes on to the disk tier (engine thread). */
void kvs_engine_tier_ix_spilled_named(kvs_engine_t *e,
    const kvs_radix_key_t *key, const uint8_t *path, const uint8_t *name,
    int stored);
/* A named block enters the host tier (in 1: stored or refreshed by a
 * spill; name NULL: unnamed, not published) or leaves it (in 0: evicted
 * for room), by key and path id: it is published under its fastest
 * lower tier (engine thread). */
void kvs_engine_tier_ix_host(kvs_engine_t *e, const kvs_radix_key_t *key,
    const uint8_t *path, const uint8_t *name, int in);
/* The same by the key's namespace hash (kvs_tier_ns_hash()): a spill
 * copied off the step is published when its copy is done, after the key
 * it was made under is gone (kvs_engine_hcopy.c). */
void kvs_engine_tier_ix_host_ns(kvs_engine_t *e, uint64_t ns,
    const uint8_t *path, const uint8_t *name, int in);
/* The weights the host record publishes, per mille (under e->lock, from
 * e->shown): *tw the disk tier's, *hw the host tier's; 0 when that tier
 * is absent or unmeasured (kvs_index_tier_weight()). */
void kvs_engine_tier_ix_weights(kvs_engine_t *e, uint32_t *tw,
    uint32_t *hw);
/* The watch's news into the index's record (engine thread, in a step). */
void kvs_engine_tier_ix_drain(kvs_engine_t *e);
/* 1 while the disk tier's spills are unwritten (or still being copied
 * out of the pool) or the watch's news undrained: an idle engine thread
 * steps again a tick later (engine thread, under e->lock). */
int kvs_engine_tier_ix_pending(kvs_engine_t *e);
/* Every published disk name as an add (a listing, in a step). */
void kvs_engine_tier_ix_list(kvs_engine_t *e);

/* Publishes the next few blocks the tier's file kept at open (their
 * stored names); 1 while some are left to walk. */
int kvs_engine_tier_ix_kept(kvs_engine_t *e);

/* kvs_engine_tload.c: the tier's loader */

/* Starts the loader thread and its staging (at kvs_engine_tier_new). */
int kvs_engine_tload_new(kvs_engine_t *e, kvs_err_t *err);
/* Stops the thread and frees what is left (every request ended). */
void kvs_engine_tload_free(kvs_engine_t *e);

/* A request for the scheduler: added, unless its match continues into
 * the tier and it waits for a load (parked). */
void kvs_engine_tier_add(kvs_engine_t *e, kvs_engine_seq_t *h);

/* Before a step's plan: staged blocks into the pool, finished loads
 * into the tree and their requests into the scheduler, locks of the
 * admitted let go, waiting requests planned again. */
void kvs_engine_tier_admit(kvs_engine_t *e);

/* At h's end, before kvs_engine_unfollow: its load stopped, what it
 * reserved or held given back. */
void kvs_engine_tier_release(kvs_engine_t *e, kvs_engine_seq_t *h);

/* Ends every parked request (cancelled): kvs_engine_free. */
void kvs_engine_tier_end_all(kvs_engine_t *e);

/* kvs_engine_hcopy.c: the tiers' copies in flight, spills (into the
 * host tier or the disk tier's queue) and loads (the engine thread
 * polls while there are any: a load's request waits, a spill's block is
 * neither loadable nor in the prefix index until settled); engine
 * thread. */
uint32_t kvs_engine_hcopy_flight(kvs_engine_t *e);
/* Of those, the disk tier's spills (their blocks not yet queued). */
uint32_t kvs_engine_hcopy_disk(kvs_engine_t *e);


/* kvs_engine_gram.c */

/* At load: the grammar cache, the mask buffer, the token trie (a trie
 * that cannot be built leaves e->gv NULL and gv_why set). */
int kvs_engine_gram_new(kvs_engine_t *e, kvs_err_t *err);
void kvs_engine_gram_free(kvs_engine_t *e);

/* Checks req's constraint and sets h's matcher and masker up (consumer
 * thread, before h is queued). */
int kvs_engine_gram_setup(kvs_engine_t *e, kvs_engine_seq_t *h,
    const kvs_engine_req_t *req, kvs_err_t *err);
void kvs_engine_gram_seq_free(kvs_engine_seq_t *h);

/* Sets the logits of h's refused tokens to -inf (e->gbits holds the
 * mask, e->gids[*n_ids] the allowed ids in increasing order, until the
 * next call).  KVS_EFORMAT: no token can continue. */
int kvs_engine_gram_mask(kvs_engine_t *e, kvs_engine_seq_t *h,
    float *logits, uint32_t *n_ids, kvs_err_t *err);

/* tok if the last mask allows it, else the allowed token with the
 * largest row value (the sampler's float rounding fallback). */
int32_t kvs_engine_gram_fix(kvs_engine_t *e, const float *row,
    int32_t tok);

/* Advances h's matcher by tok; *end 1: tok is an END token (complete),
 * 2: tok completed the grammar and nothing can follow, else 0. */
int kvs_engine_gram_accept(kvs_engine_t *e, kvs_engine_seq_t *h,
    int32_t tok, int *end, kvs_err_t *err);


/* kvs_engine_lora.c */

/* At load, after the backend: opens conf.lora_paths against the model
 * and puts them into the backend's slots. */
int kvs_engine_lora_new(kvs_engine_t *e, kvs_err_t *err);
void kvs_engine_lora_free(kvs_engine_t *e);

/* The step's forward: through the backend's forward_lora, each entry
 * under its sequence's adapter, when some sequence of the plan has one;
 * else the plain forward. */
int kvs_engine_lora_forward(kvs_engine_t *e, const kvs_sched_plan_t *plan,
    kvs_err_t *err);

/* A sequence taken from the inbox: holds its adapter; 1 when the
 * adapter is not resident (h is parked, not for the scheduler), else 0
 * (the caller adds it to the scheduler). */
int kvs_engine_lora_take(kvs_engine_t *e, kvs_engine_seq_t *h);

/* At its end, before kvs_engine_unfollow: lets go of h's adapter (and
 * unparks it; its followers, if any, are parked in its place). */
void kvs_engine_lora_release(kvs_engine_t *e, kvs_engine_seq_t *h);

/* Before a step's plan: the loads finished (into their slots; the
 * sequences waiting for them into the scheduler), new loads for the
 * parked sequences (evicting the least recently used adapter no
 * sequence holds when the slots are full). */
void kvs_engine_lora_admit(kvs_engine_t *e);

/* Ends every parked sequence (cancelled): kvs_engine_free. */
void kvs_engine_lora_end_all(kvs_engine_t *e);

/* The figures, into e->stats. */
void kvs_engine_lora_stats(kvs_engine_t *e);

/* Under e->lock, as the engine thread takes its inbox: its view of the
 * adapters follows those bound since (kvs_engine_lora_bind). */
void kvs_engine_lora_sync(kvs_engine_t *e);

/* The adapters bound so far, under e->lock: any thread (submit). */
uint32_t kvs_engine_lora_bound(kvs_engine_t *e);

/* Adapter id's file epoch (xxh3-64 of its bytes; 0 for none): the
 * prefix index's adapter field (kvs_index_lora.h).  Engine thread. */
uint64_t kvs_engine_lora_file_epoch(const kvs_engine_t *e, uint32_t id);


/* kvs_engine_io.c */

/* Checks req and sets h up from it (on the consumer's thread). */
int kvs_engine_seq_setup(kvs_engine_t *e, kvs_engine_seq_t *h,
    const kvs_engine_req_t *req, kvs_err_t *err);
void kvs_engine_seq_free(kvs_engine_seq_t *h);

/* Drops one hold; frees h at zero.  Under e->lock. */
void kvs_engine_unref(kvs_engine_seq_t *h);

/* Publishes output (token -1: none) and, when finish is set, the end;
 * takes e->lock. */
void kvs_engine_emit(kvs_engine_t *e, kvs_engine_seq_t *h, int32_t token,
    const char *text, size_t len, kvs_finish_t finish, const char *error);

#endif /* KVS_ENGINE_IMPL_H */
