/*
 * kvs_engine: one model served: its backend (weights and K/V storage),
 * KV block pool, scheduler and per-request sampling and detokenizing,
 * stepped by one thread of its own.
 *
 * The consumer side (an nginx worker, the bench, a test) submits
 * requests and gets a handle for each; the engine thread runs steps and
 * appends each request's new tokens and text to the handle's outbox;
 * a handle with new output is queued on the ready list and the engine's
 * eventfd becomes readable, so an event loop learns of output without
 * waiting or polling.  Slow readers only let text accumulate in their
 * outbox: the engine never waits for a consumer.
 *
 * Lifetimes: a handle is held by the engine until its sequence ends
 * (finished, failed or cancelled) and by the consumer until
 * kvs_engine_close(); it is freed when both let go.  Closing a handle
 * whose sequence still runs cancels it: its blocks go back to the pool
 * at the start of the next step.
 *
 * Errors: kvs_engine_submit() checks a request completely (token ids,
 * lengths against the context and the cache, sampling fields, stop
 * strings) and refuses it with the reason; nothing reaches the engine
 * thread that can make it exit or abort.  A step that fails (memory)
 * ends the requests in it with an error and the engine goes on.
 *
 * Threads: submit, close, ready, read and stats may be called from any
 * one consumer thread; they take the engine's lock briefly.  Without
 * kvs_engine_start(), the consumer may drive the engine itself with
 * kvs_engine_step() (tests, the bench); never both.
 */

#ifndef KVS_ENGINE_H
#define KVS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/kvs_backend.h"
#include "base/kvs_buf.h"
#include "base/kvs_err.h"
#include "kv/kvs_radix.h"
#include "sched/kvs_fair.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"
#include "sample/kvs_finish.h"
#include "sample/kvs_sample.h"
#include "grammar/kvs_gram_req.h"

#define KVS_ENGINE_MAX_STOP_IDS  64
#define KVS_ENGINE_MAX_N         128  /* choices per request */
#define KVS_ENGINE_MAX_PINS      4    /* cache breakpoints per request */
#define KVS_ENGINE_MAX_PIN_TTL   3600000   /* ms: 1h */
#define KVS_ENGINE_MAX_SCHEMA    KVS_GRAM_REQ_MAX_SCHEMA    /* bytes */
#define KVS_ENGINE_GRAM_KIND_MAX KVS_GRAM_REQ_KIND_MAX

typedef struct {
    const kvs_model_t  *model;        /* borrowed; outlives the engine */
    const kvs_vocab_t  *vocab;        /* its tokenizer, borrowed */
    uint32_t            n_blocks;     /* KV pool size; 0 lets a CUDA
                                         backend size it */
    uint32_t            block_tokens; /* 0: 16 */
    unsigned            threads;      /* 0: one per online CPU */
    uint32_t            max_batch_tokens;  /* 0: 2048 */
    uint32_t            max_running;  /* 0: 256 */
    uint32_t            n_ctx;        /* 0: the model's training context */
    int                 no_chunked_prefill;
    int                 no_prefix_cache;
    int                 keep_window_blocks;   /* a windowed model's
                                             sequences keep the blocks
                                             left behind by its window
                                             (baselines, checks) */
    uint64_t            pin_max_bytes;    /* KV bytes each cache scope may
                                             pin; 0: KV cache / 4 */
    uint32_t            fair_w_prefill;   /* tenant counter weights per */
    uint32_t            fair_w_decode;    /* token; 0: 1 */
    uint32_t            fair_kv_max_milli;    /* a tenant's KV cap while
                                             others wait, thousandths of
                                             the cache; 0: none */
    int                 no_fair;          /* arrival order, tenants or not
                                             (baselines) */
    uint32_t            req_kv_max_milli;     /* a request's (a prompt and
                                             its n choices) KV cap while
                                             others wait, thousandths of
                                             the cache; 0: none */
    kvs_backend_kind_t  backend;          /* CPU (0), CUDA or AUTO (CUDA
                                             when a device answers) */
    int                 device;           /* CUDA device ordinal */
    double              kv_fraction;      /* CUDA: > 0 sizes the KV pool
                                             to this fraction of the
                                             device memory free after
                                             weights and workspace,
                                             instead of n_blocks */
    uint32_t            pool_min_tokens;  /* KV pools (docs/pools.md):
                                             prompt + max_tokens that
                                             make a request long; 0:
                                             no pools */
    uint32_t            pool_share_milli; /* the long pool's most blocks,
                                             thousandths of the cache */
    uint32_t            pool_max_prefill; /* long prefills at once */
    uint32_t            pool_chunk;       /* long prefill tokens a step;
                                             0: max_batch_tokens */
    uint32_t            queue_timeout_ms; /* a request not admitted
                                             within it ends with an
                                             error and retry_after; 0:
                                             it waits */
    int                 kv_dtype_set;     /* 0: the backend's own K/V
                                             dtype; else kv_dtype */
    uint32_t            kv_dtype;         /* kvs_kv_dtype_t
                                             (kvserve_kv_dtype) */
    const char         *tier_path;        /* the disk tier's file
                                             (kvserve_kv_tier disk); NULL:
                                             no second tier.  Borrowed */
    uint64_t            tier_size;        /* its bytes at most */
    uint64_t            tier_model;       /* the caller's model tag: a
                                             file of another is discarded
                                             (as one of another epoch) */
    uint32_t            tier_depth;       /* spill queue entries; 0: 64 */
    int                 tier_load_always; /* load what the tier holds
                                             whatever the cost model says
                                             (tests, benches) */
    uint32_t            tier_write_delay_us;  /* tests only: a slow disk
                                             (kvs_tier_conf_t's) */
    uint32_t            tier_read_delay_us;   /* tests only: a slow disk
                                             for loads too */
    uint64_t            tier_host_size;   /* the host tier's bytes
                                             (kvserve_kv_tier host): the
                                             pool's evicted blocks go to
                                             host memory from the
                                             backend's host_alloc (CUDA:
                                             pinned), and from there on
                                             to the disk tier if any; 0:
                                             none.  KVS_EUNSUPPORTED on a
                                             backend without host_alloc */
    void              (*backend_hook)(kvs_backend_t *be, void *arg);
                                          /* tests only: called once the
                                             backend is made, before
                                             anything uses it (to wrap
                                             its ops); NULL: none */
    void               *backend_hook_arg;
    const char         *index_model;      /* the served model's name:
                                             names every cached block
                                             for the prefix index (see
                                             kvs_engine_index_take);
                                             NULL: no names.  Borrowed */
    const char *const  *lora_paths;       /* [n_loras] LoRA adapter files
                                             (docs/lora.md): the engine
                                             opens each against the model
                                             and serves it as adapter id
                                             i + 1 (requests' adapter);
                                             borrowed for the call */
    uint32_t            n_loras;          /* 0..KVS_ENGINE_MAX_LORAS */
    uint32_t            lora_slots;       /* adapters resident at once,
                                             1..KVS_ENGINE_LORA_SLOTS;
                                             0: n_loras (at most
                                             KVS_ENGINE_LORA_SLOTS).
                                             Fewer than n_loras: the
                                             others are loaded when a
                                             request needs them (docs/
                                             lora.md, "Paging") */
    uint32_t            lora_load_delay_us;   /* tests only: a slow
                                             adapter file (the loader
                                             waits this long before
                                             each load) */
} kvs_engine_conf_t;

#define KVS_ENGINE_MAX_LORAS   256        /* adapters an engine serves */
#define KVS_ENGINE_LORA_SLOTS  64         /* KVS_BACKEND_LORA_SLOTS */

/* A client cache breakpoint: keep prompt[0..n_tokens) cached (whole
 * blocks of it) for ttl_ms, refreshed by every request that pins it. */
typedef struct {
    uint32_t  n_tokens;               /* 1..n_prompt */
    uint32_t  ttl_ms;                 /* 1..KVS_ENGINE_MAX_PIN_TTL */
} kvs_engine_pin_t;

typedef struct {
    const int32_t       *prompt;      /* [n_prompt] token ids, rendered
                                         and encoded by the caller */
    uint32_t             n_prompt;
    uint32_t             max_tokens;  /* >= 1 */
    uint32_t             n;           /* choices, 0 or 1: one; choice i
                                         samples with seed + i, and all
                                         share the prompt's KV blocks */
    kvs_sample_params_t  sample;
    const int32_t       *stop_ids;    /* [n_stop_ids] extra stop tokens */
    uint32_t             n_stop_ids;
    const char *const   *stop;        /* [n_stop] stop strings */
    const size_t        *stop_len;    /* [n_stop] their lengths */
    uint32_t             n_stop;
    int                  ignore_eos;  /* do not stop at the model's end
                                         tokens (benchmarks) */
    const char          *scope;       /* [scope_len] prefix cache scope
                                         (a tenant); NULL or "": global */
    size_t               scope_len;   /* <= KVS_RADIX_MAX_SCOPE */
    uint32_t             adapter;     /* LoRA adapter id: 0 the base,
                                         else 1..conf.n_loras */
    const char          *tenant;      /* [tenant_len] fair share key (the
                                         rate limit's); NULL: nameless */
    size_t               tenant_len;  /* <= KVS_FAIR_MAX_KEY */
    kvs_engine_pin_t     pins[KVS_ENGINE_MAX_PINS];
    uint32_t             n_pins;
    unsigned             gram_kind;   /* KVS_GRAM_REQ_*: an output
                                         constraint (kvs_gram_req.h);
                                         stop strings are refused with
                                         one */
    const char          *schema;      /* [schema_len] _SCHEMA: the JSON
                                         Schema's text */
    size_t               schema_len;  /* <= KVS_GRAM_REQ_MAX_SCHEMA */
    void                *data;        /* the caller's */
} kvs_engine_req_t;

/* A tenant of the fair share, for metrics. */
typedef struct {
    char      key[KVS_FAIR_MAX_KEY];  /* [key_len], not NUL-ended */
    size_t    key_len;
    uint64_t  prefill;                /* tokens computed for it since the */
    uint64_t  decode;                 /* engine first saw it */
    uint32_t  kv_blocks;              /* held by its running sequences */
    uint32_t  n_seqs;                 /* queued now */
} kvs_engine_tenant_t;

#define KVS_ENGINE_TOP_TENANTS  8

typedef struct {
    kvs_engine_tenant_t  top[KVS_ENGINE_TOP_TENANTS];  /* served most
                                                         first */
    uint32_t             n_top;
    kvs_engine_tenant_t  other;       /* the rest summed, key_len 0 */
    uint32_t             n_tenants;   /* known: active and kept idle */
} kvs_engine_tenants_t;

typedef struct kvs_engine_s      kvs_engine_t;
typedef struct kvs_engine_seq_s  kvs_engine_seq_t;

/* What kvs_engine_read() hands over: everything produced since the
 * previous read, appended to what the struct already holds. */
typedef struct {
    int32_t                *tokens;   /* [n_tokens] generated ids */
    size_t                  n_tokens;
    size_t                  tokens_cap;
    kvs_buf_t               text;     /* their text, stop strings cut */
    kvs_sample_logprobs_t  *lp;       /* [n_lp] when logprobs asked */
    size_t                  n_lp;
    size_t                  lp_cap;
    kvs_finish_t            finish;   /* set with the last output */
    uint32_t                n_prompt;
    uint32_t                n_generated;  /* tokens counted for usage */
    uint32_t                n_preempted;
    uint32_t                n_cached;     /* prompt tokens whose K/V came
                                             from the prefix cache */
    uint32_t                n_cached_tier;    /* of n_cached, loaded
                                             from the disk tier */
    uint32_t                n_cached_host;    /* of n_cached, copied in
                                             from the host tier */
    uint32_t                n_cache_created;  /* prompt tokens cached for
                                             the request's pins that were
                                             not read from the cache */
    kvs_radix_miss_t        miss;     /* why the reuse stopped there */
    uint32_t                miss_pos; /* token where it stopped */
    uint8_t                 has_cache;    /* the four fields above are
                                             set: by the first read that
                                             hands them over, and kept */
    char                    error[KVS_ERR_MSG_LEN];  /* when ERROR */
    uint8_t                 client_fault; /* when ERROR: 1 when the
                                             request itself is at fault
                                             (its grammar passed a bound
                                             at run time), so the worker
                                             answers 400, not 500; else
                                             0 */
    uint32_t                retry_after;  /* when ERROR and not 0: it
                                             was not admitted within the
                                             queue timeout; a retry could
                                             fit after this many seconds
                                             (1..3600) */
    uint64_t                kv_block_us;  /* KV blocks it held x the
                                             microseconds it held them,
                                             from its admission to its
                                             latest step (to its end once
                                             finish is set); nothing while
                                             it waits in the queue or
                                             after a preemption; kv_rate
                                             is settled with it */
} kvs_engine_out_t;

/* vLLM's iteration_tokens_total buckets (1, 8, 16, ... 16384). */
#define KVS_ENGINE_ITER_BOUNDS  13
extern const uint32_t  kvs_engine_iter_bounds[KVS_ENGINE_ITER_BOUNDS];

/* The disk tier's figures (kvs_engine_tier.c); on 0: no tier. */
typedef struct {
    uint32_t  on;
    uint32_t  direct;                 /* 1: O_DIRECT, 0: buffered */
    uint64_t  slots;                  /* blocks it holds at most */
    uint64_t  used;                   /* blocks it holds now */
    uint64_t  slot_bytes;             /* file bytes per block */
    uint64_t  kept;                   /* blocks kept from the file at
                                         start */
    uint64_t  spilled;                /* evicted blocks queued */
    uint64_t  spill_kept;             /* evicted blocks the tier had */
    uint64_t  spill_dropped;          /* the queue (or its staging ring,
                                         spill_copy_full) was full */
    uint64_t  spill_written;          /* written by the writer */
    uint64_t  spill_failed;           /* not copied out of the pool */
    uint64_t  lookups;                /* matches the tier continued */
    uint64_t  loads;                  /* of those, loaded */
    uint64_t  loaded_blocks;          /* blocks read back into the tree */
    uint64_t  load_failed;            /* reads that ended a run: corrupt,
                                         gone or failed */
    uint64_t  recomputed_blocks;      /* held, but the cost model chose
                                         to compute them */
    uint64_t  load_ns;                /* the loader's time in reads */
    uint64_t  load_waits;             /* requests that waited for a
                                         load */
    uint64_t  load_wait_ns;           /* their time waiting, parked to
                                         admitted */
    uint64_t  loading;                /* requests waiting for a load
                                         now */
    uint64_t  load_reserved;          /* pool blocks loads hold now */
    uint64_t  probes;                 /* loads the cost model made to
                                         measure (kvs_tier_cost.h) */
    uint64_t  admit_loads;            /* of loads, planned when a request
                                         that waited in the queue (or was
                                         preempted) came to be admitted:
                                         what was evicted meanwhile */
    uint64_t  queued_blocks;          /* blocks planned while still in
                                         the spill queue: their load
                                         waited for their write */
    uint64_t  corrupt;                /* slots found corrupt */
    uint64_t  bytes_written;
    uint64_t  bytes_read;
    double    load_bps;               /* the cost model's rates */
    double    load_bps_seen;          /* its load rate from one sample on
                                         (the index's weight) */
    double    prefill_tps;
    char      discarded[160];         /* why the file's blocks were not
                                         kept at start; "": kept or new */

    /* the host tier (kvs_engine_thost.c); host_on 0: none */
    uint32_t  host_on;
    uint64_t  host_slots;             /* blocks it holds at most */
    uint64_t  host_used;              /* blocks it holds now */
    uint64_t  host_block_bytes;       /* bytes per block */
    uint64_t  host_spilled;           /* evicted pool blocks stored */
    uint64_t  host_spill_kept;        /* ... that it had already */
    uint64_t  host_spill_failed;      /* not stored: the copy failed or
                                         every slot was held (on to the
                                         disk tier then, if any) */
    uint64_t  host_evicted;           /* blocks it evicted for room */
    uint64_t  host_to_disk;           /* of those, queued for the disk
                                         tier */
    uint64_t  host_hits;              /* blocks it gave back */
    uint64_t  host_loads;             /* requests that copied blocks in */
    uint64_t  host_loaded_blocks;     /* blocks copied into the pool */
    uint64_t  host_load_ns;           /* time copying them (the engine
                                         thread's) */
    uint64_t  host_bytes_in;          /* bytes copied into the tier */
    uint64_t  host_bytes_out;         /* bytes copied out into the pool */

    /* the host tier's copies off the step (kvs_engine_hcopy.c);
     * host_async 0: the backend copies at once, on the engine thread */
    uint32_t  host_async;
    uint64_t  host_copies;            /* blocks being copied now, out
                                         (spills) and in (loads) */
    uint64_t  host_copy_waits;        /* loads whose request waited for
                                         its copies */
    uint64_t  host_copy_wait_ns;      /* their time, queued to done */
    uint64_t  host_copy_full;         /* copies the backend refused, at
                                         its limit: a spill on to the
                                         disk tier, a load cut short */
    uint64_t  host_copy_failed;       /* blocks whose copy failed */

    /* the disk tier's spills copied off the step (kvs_engine_hcopy.c),
     * engine side only (not in STATS_REPLY); spill_async 0: the backend
     * copies at once, on the engine thread */
    uint32_t  spill_async;
    uint64_t  spill_copies;           /* blocks being copied out now */
    uint64_t  spill_copy_full;        /* dropped: the staging ring was
                                         full or the backend refused the
                                         copy (in spill_dropped too) */

    /* a disk load's writes into the pool copied off the step (2026-12-04,
     * kvs_engine_tload_end.c), engine side only; load_async 0: written on
     * the engine thread.  A write refused or failed ends its run there
     * (the rest is computed): in load_failed too */
    uint32_t  load_async;
    uint64_t  load_copies;            /* blocks being written in now */
    uint64_t  load_copy_full;         /* writes the backend refused, at
                                         its limit */
    uint64_t  load_copy_failed;       /* writes that failed */
} kvs_engine_tier_stats_t;

typedef struct {
    uint64_t  steps;
    uint64_t  prefill_tokens;         /* computed, recomputes included */
    uint64_t  decode_tokens;
    uint64_t  preemptions;
    uint64_t  kv_copies;              /* copy-on-write block copies */
    uint64_t  step_ns;                /* time in steps, total */
    uint64_t  step_ns_max;
    uint64_t  decode_only_steps;      /* steps with no prefill token */
    uint64_t  decode_only_tokens;     /* their tokens */
    uint64_t  decode_only_ns;         /* their time */
    uint64_t  batch_seqs;             /* sum over steps of sequences */
    uint32_t  running;
    uint32_t  waiting;
    uint32_t  kv_blocks;
    uint32_t  kv_used;
    uint32_t  kv_used_max;
    uint32_t  block_tokens;
    uint64_t  requests;               /* submitted */
    uint64_t  finished;               /* ended, any reason */
    uint64_t  cache_query_tokens;     /* prompt tokens looked up */
    uint64_t  cache_hit_tokens;       /* of those, reused */
    uint64_t  cache_evicted_blocks;
    uint32_t  cache_blocks;           /* in the prefix cache now */
    uint32_t  cache_pinned_blocks;
    uint64_t  epoch;                  /* the weights' identity */
    uint64_t  iter_tokens[KVS_ENGINE_ITER_BOUNDS + 1];  /* steps by the
                                         tokens they computed:
                                         <= kvs_engine_iter_bounds[i],
                                         the last above them all */
    uint64_t  iter_tokens_sum;        /* tokens of those steps */
    uint32_t  pools;                  /* 1: KV pools are on; the pool_
                                         figures, [0] short, [1] long
                                         (kvs_sched_pool_t) */
    uint32_t  pool_max[2];
    uint32_t  pool_used[2];
    uint32_t  pool_queued[2];
    uint64_t  pool_admitted[2];
    uint64_t  pool_waited[2];
    uint64_t  pool_wait_ms[2];
    uint64_t  pool_refused[2];
    uint64_t  cache_tier_hit_tokens;  /* of cache_hit_tokens, loaded from
                                         the disk tier */
    uint64_t  cache_host_hit_tokens;  /* ... copied in from the host tier */
    kvs_engine_tier_stats_t  tier;
    uint32_t  pool_min_tokens;        /* pools on: a long one's length */
    uint32_t  long_room;              /* kvs_sched_long_room's: blocks */
    uint32_t  long_slots;             /*   and prefill slots free */
    uint32_t  lora_adapters;          /* LoRA adapters served */
    uint32_t  lora_slots;             /* ... resident at most */
    uint32_t  lora_resident;          /* ... resident now */
    uint32_t  lora_parked;            /* requests waiting for theirs */
    uint64_t  lora_loads;             /* adapters loaded after start */
    uint64_t  lora_evictions;         /* ... and unloaded for another */
    uint64_t  lora_waited;            /* requests that waited for one */
    uint64_t  lora_wait_ms;           /* their time waiting, total */
    uint64_t  lora_load_ns;           /* the loader's time: files read
                                         and packed for their slot */
    uint64_t  lora_install_ns;        /* the step loop's time putting
                                         them into slots and taking
                                         them out, total */
    uint64_t  lora_install_max_ns;    /* ... the longest once */
} kvs_engine_stats_t;



/* Builds the backend (conf->backend; a CUDA one that cannot be had
 * fails with the reason), then the pool of the backend's n_blocks and
 * the scheduler; conf is checked (KVS_EINVAL names the field).  *out is
 * NULL on failure. */
int kvs_engine_new(kvs_engine_t **out, const kvs_engine_conf_t *conf,
    kvs_err_t *err);

/* Starts the step thread. */
int kvs_engine_start(kvs_engine_t *e, kvs_err_t *err);

/* Stops the step thread after its current step (no-op if not started);
 * requests stay queued, and kvs_engine_step() or a new start goes on. */
void kvs_engine_stop(kvs_engine_t *e);

/* Stops the thread (if started), ends every request, frees all.  Close
 * every handle first: one still open is not freed. */
void kvs_engine_free(kvs_engine_t *e);

/* Readable when some handle has output; kvs_engine_ready() clears it. */
int kvs_engine_fd(const kvs_engine_t *e);

/* Checks and queues a request; hs[i] is the handle of choice i (one
 * handle unless req->n > 1), each read and closed on its own.  KVS_EINVAL
 * or KVS_ERANGE (too long for the context or the cache, the numbers in
 * the message) refuse it and change nothing. */
int kvs_engine_submit(kvs_engine_t *e, const kvs_engine_req_t *req,
    kvs_engine_seq_t **hs, kvs_err_t *err);

/* Takes up to max handles with new output off the ready list. */
size_t kvs_engine_ready(kvs_engine_t *e, kvs_engine_seq_t **hs, size_t max);

/* Moves h's pending output into out; returns out->finish.  KVS_ENOMEM
 * leaves both as they were (returned as a negative value). */
int kvs_engine_read(kvs_engine_t *e, kvs_engine_seq_t *h,
    kvs_engine_out_t *out);

void *kvs_engine_seq_data(const kvs_engine_seq_t *h);

/* The consumer is done with h; a running sequence is cancelled. */
void kvs_engine_close(kvs_engine_t *e, kvs_engine_seq_t *h);

/* Runs one step on the calling thread: 1 if it did work, 0 if idle. */
int kvs_engine_step(kvs_engine_t *e);

void kvs_engine_stats(kvs_engine_t *e, kvs_engine_stats_t *st);

/* Waits until the disk tier's spill queue is written (tests, benches);
 * no-op without a tier.  Any thread; but with the host tier's copies
 * off the step (a backend with asynchronous copies), which it waits for
 * and settles first, only the thread that steps e. */
void kvs_engine_tier_wait(kvs_engine_t *e);

/* The tenants served most and the rest, as of the last step. */
void kvs_engine_tenants(kvs_engine_t *e, kvs_engine_tenants_t *out);

unsigned kvs_engine_threads(const kvs_engine_t *e);

/* One line for the log: which backend computes, on which device, and
 * why ("backend: cpu, 2 threads (auto: cudaGetDeviceCount: ...)"). */
const char *kvs_engine_backend(const kvs_engine_t *e);
uint64_t kvs_engine_kv_bytes(const kvs_engine_t *e);   /* K/V storage */

/* Which backend computes, and what its weights and K/V element take
 * (kvs_backend_mem_t): the figures HELLO carries to the workers. */
kvs_backend_kind_t kvs_engine_mem(const kvs_engine_t *e,
    kvs_backend_mem_t *mem);

/*
 * The prefix index (docs/prefix-index.md).  With conf.index_model set
 * (and the prefix cache on), every block that joins the cache is named
 * with kvs_index_name_root/_next under (index_model, epoch, adapter: ""
 * or, with the adapter's namespace epoch, its file's epoch in hex
 * (kvs_index_lora.h), the request's cache scope) as it is inserted,
 * from its parent's name: only new blocks are hashed.  While subscribed,
 * the engine thread records every name added and evicted and hands them
 * over once per step (the eventfd becomes readable when there is
 * something to take); kvs_engine_index_take() gets them, netted:
 * a name is in adds or dels at most once, as the last event says.
 * With a disk tier (conf.tier_path) a block the tree evicts and the
 * tier stores is named again, as the disk tier's, once it is written;
 * when the tier reclaims its slot or finds it corrupt, it is dropped
 * (kvs_engine_tier_ix.c).  With a host tier (conf.tier_host_size) a
 * block it takes in is named as the host tier's, and when it leaves
 * (evicted for room: on to the disk tier, or dropped) it is named as
 * the disk tier's once written there, or not at all; a block in both
 * lower tiers is named once, as the host tier's.  Each tier's names are
 * netted apart from the others': a block may be in the pool and in one
 * lower tier.
 */
typedef struct {
    uint8_t   (*names)[16];           /* [n_add + n_del + n_dadd + n_ddel
                                         + n_hadd + n_hdel]
                                         kvs_index_name_t bytes: added
                                         (parents before children), then
                                         evicted (children before
                                         parents), then the disk tier's
                                         added and dropped, then the
                                         host tier's */
    uint32_t    n_add;
    uint32_t    n_del;
    uint32_t    n_dadd;               /* written to the disk tier */
    uint32_t    n_ddel;               /* gone from it (reclaimed, corrupt) */
    uint32_t    n_hadd;               /* into the host tier */
    uint32_t    n_hdel;               /* out of it (to disk, dropped) */
    uint32_t    tier_weight;          /* a disk block's worth per mille of
                                         a pool block's (the host record's
                                         tw); 0: no tier, or unmeasured */
    uint32_t    host_weight;          /* a host-tier block's (hw): from
                                         its measured copy-in rate; 0: no
                                         host tier, or unmeasured */
    int         resync;               /* the adds begin with the whole
                                         cache's listing (a subscribe,
                                         or a record that was lost) */
    uint32_t    running;              /* load as of the last step */
    uint32_t    waiting;
    uint32_t    free_blocks;          /* free + evictable cached */
    uint32_t    block_tokens;
    uint64_t    epoch;
    uint32_t    long_min;             /* KV pools: min_tokens, 0: none */
    uint32_t    long_room;            /*   blocks the long pool may */
    uint32_t    long_slots;           /*   admit, its free prefills */

    /* the take's own, reused from one take to the next */
    size_t      names_cap;
    void       *ev;                   /* events taken */
    size_t      ev_cap;
    uint32_t   *slots;                /* netting table */
    size_t      slots_cap;
} kvs_engine_index_t;

/* Starts (on) or stops recording names.  Starting asks for a resync:
 * the engine thread lists the whole cache (parents first) at its next
 * wake-up, and the take after that has resync set.  Stopping drops what
 * was not taken.  Without conf.index_model (or the cache) nothing is
 * ever recorded. */
void kvs_engine_index_subscribe(kvs_engine_t *e, int on);

/* Asks for a new full listing (as a subscribe does). */
void kvs_engine_index_resync(kvs_engine_t *e);

/* Takes what was recorded since the last take, and the load; out's
 * arrays are reused.  KVS_ENOMEM: nothing is lost (a resync is asked
 * for). */
int kvs_engine_index_take(kvs_engine_t *e, kvs_engine_index_t *out,
    kvs_err_t *err);

void kvs_engine_index_free(kvs_engine_index_t *out);

/* The adapters the engine serves: their count, and adapter id i's
 * (1..n; the opened file, for its epoch and ranks) while it is
 * resident, else NULL.  Engine thread (or a driving caller) only. */
uint32_t kvs_engine_n_loras(const kvs_engine_t *e);
const kvs_lora_t *kvs_engine_lora(const kvs_engine_t *e, uint32_t id);

/* The engine's adapter id of the adapter file path[path_len] whose
 * xxh3-64 the caller read as file_epoch: the id of a file it serves
 * already (the same path and epoch), else the next id, whose file is
 * opened, checked against the model and against file_epoch when a
 * request first needs it.  A worker binds its configuration's adapters
 * after HELLO (the LORA frame), so an engine kept across a reload that
 * replaced, added or removed adapter files serves each file under its
 * own id and cache namespace.  Ids are never reused: KVS_ERANGE past
 * KVS_ENGINE_MAX_LORAS files; KVS_EUNSUPPORTED for a backend without
 * adapters.  Any thread. */
int kvs_engine_lora_bind(kvs_engine_t *e, const char *path, size_t path_len,
    uint64_t file_epoch, uint32_t *id, kvs_err_t *err);

/* The prefix cache's epoch of adapter id (0: the weights' own): the
 * base's and the adapter file's identities together, so a block of
 * one adapter, or of a replaced file, is never another's. */
uint64_t kvs_engine_lora_epoch(const kvs_engine_t *e, uint32_t id);

/* The pool's consistency, and with no sequence left no block in use:
 * for tests, between steps (or after the thread stopped). */
int kvs_engine_check(kvs_engine_t *e, kvs_err_t *err);

/* Frees what out holds (not out itself). */
void kvs_engine_out_free(kvs_engine_out_t *out);

#endif /* KVS_ENGINE_H */
