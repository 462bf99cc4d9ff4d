/*
 * kvs_engine_tload: the disk tier's loader's state, shared by
 * kvs_engine_tload.c (the plan, the loader thread, the requests parked
 * for it) and kvs_engine_tload_end.c (the staged blocks into the pool,
 * the loads' ends).  Not for use outside src/engine; the invariants are
 * kvs_engine_tload.c's.
 */

#ifndef KVS_ENGINE_TLOAD_H
#define KVS_ENGINE_TLOAD_H

#include <pthread.h>

#include "kvs_engine_tier.h"

typedef struct kvs_engine_tjob_s  kvs_engine_tjob_t;

struct kvs_engine_tjob_s {
    /* the engine thread's */
    kvs_engine_seq_t    *h;             /* NULL: cancelled */
    kvs_radix_node_t    *node;          /* the match's lock until done */
    uint32_t            *blocks;        /* [k0 + n]: the match's, then the
                                           n reserved */
    uint32_t             k0;            /* the run's first block */
    uint32_t             written;       /* into the pool, in run order */
    uint32_t             queued;        /* writes queued (async), in run
                                           order; written: done */
    uint32_t             flight;        /* writes queued, not settled */
    uint32_t             drained;       /* staged entries taken */
    int                  wfailed;       /* a pool write failed */
    int                  owed;          /* cancelled with writes in
                                           flight: blocks and lock given
                                           back once they are settled */

    /* set before the job is queued, read-only after */
    uint32_t             n;             /* blocks in the run */
    kvs_radix_key_t      key;           /* scope points into scope[] */
    char                 scope[KVS_RADIX_MAX_SCOPE];
    uint8_t            (*ids)[KVS_TIER_ID_LEN];  /* [n] path names */
    int32_t             *tokens;        /* [n * block_tokens] */
    uint64_t             ticket;        /* the spill queue's, of the last
                                           block still queued; 0: none */
    uint8_t             *host;          /* [n] 1: the host tier's block
                                           (kvs_engine_thost.c), 0: the
                                           disk's */

    /* under ld->lk */
    uint32_t             read;          /* staged by the loader */
    int                  failed;        /* a read failed: the run ends */
    int                  stop;          /* cancelled: stop reading */
    int                  done;          /* the loader is through */
    uint64_t             read_ns;       /* the loader's time in disk
                                           reads */
    uint64_t             host_ns;       /* ... in host tier copies */
    kvs_engine_tjob_t   *next;          /* the job list, oldest first */
};

typedef struct {
    kvs_engine_tjob_t   *job;
    uint32_t             k;             /* block of its run */
    uint64_t             ticket;        /* its write in flight; 0: none */
} kvs_engine_tstage_t;

struct kvs_engine_tload_s {
    /* the engine thread's */
    kvs_engine_seq_t    *park_head;     /* WAIT, LOADING, HOLD; oldest */
    kvs_engine_seq_t    *park_tail;
    uint32_t             n_parked;      /* WAIT and LOADING */
    uint32_t             reserved;      /* blocks the loads hold */
    uint32_t             max_reserved;
    uint32_t             pub_parked;    /* n_parked and reserved as last */
    uint32_t             pub_reserved;  /* published */
    uint64_t             pub_copies;    /* st.load_copies as published */
    uint32_t             taken;         /* staged entries from head taken
                                           by the engine thread, their
                                           writes perhaps in flight */
    int                  async;         /* writes queued (e->tier->hc) */
    int                  stage_host;    /* stage is host_alloc's */

    /* the loader's own */
    kvs_tier_io_t       *io;
    pthread_t            thread;
    int                  thread_on;     /* a disk tier's: none without */
    int                  lk_on;         /* lk and cv made */

    /* under lk */
    pthread_mutex_t      lk;
    pthread_cond_t       cv;
    int                  quit;
    kvs_engine_tjob_t   *jobs;          /* oldest first */
    kvs_engine_tjob_t   *jobs_tail;
    uint8_t             *stage;         /* [n_stage][block_bytes] */
    kvs_engine_tstage_t *ent;           /* [n_stage] */
    uint32_t             n_stage;
    uint32_t             head;          /* the oldest staged entry */
    uint32_t             count;         /* staged, not yet given back
                                           (taken ones included) */
};


/* kvs_engine_tload.c */

/* h out of the parked list (its state NONE). */
void kvs_engine_tload_unpark(kvs_engine_tload_t *ld, kvs_engine_seq_t *h);
/* h to the scheduler: back to its place when it was taken out of the
 * waiting queue at its admission, else at the back. */
void kvs_engine_tload_sched(kvs_engine_t *e, kvs_engine_seq_t *h);
/* h's load planned: 1 when h waits (state WAIT or LOADING), 0 when it
 * goes to the scheduler now. */
int kvs_engine_tload_plan(kvs_engine_t *e, kvs_engine_seq_t *h);

/* kvs_engine_tload_end.c */

/* The loads' gauges into the stats, published when they changed or
 * when force. */
void kvs_engine_tload_pub(kvs_engine_t *e, int force);
/* A load's blocks and lock back (the request ended, or the run is in
 * the tree). */
void kvs_engine_tload_give_back(kvs_engine_t *e, kvs_engine_tjob_t *j);
/* The taken staged entries whose writes are settled given back to the
 * loader, in ring order. */
void kvs_engine_tload_settle(kvs_engine_t *e);

#endif /* KVS_ENGINE_TLOAD_H */
