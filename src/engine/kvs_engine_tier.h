/*
 * kvs_engine_tier: the disk tier's state inside the engine, shared by
 * kvs_engine_tier.c (open, spill, the cost model's prefill samples,
 * stats) and kvs_engine_tload.c (the loader thread and the requests
 * waiting for it).  Not for use outside src/engine.
 *
 * Invariants: everything here but the loader's own locked part (see
 * kvs_engine_tload.c) is the engine thread's; the tier and the spill
 * queue lock themselves.
 */

#ifndef KVS_ENGINE_TIER_H
#define KVS_ENGINE_TIER_H

#include "kv/kvs_tier.h"
#include "kv/kvs_tier_cost.h"
#include "kv/kvs_tier_spill.h"
#include "kvs_engine_impl.h"

typedef struct kvs_engine_tload_s  kvs_engine_tload_t;

struct kvs_engine_tier_s {
    kvs_tier_t          *tier;
    kvs_tier_spill_t    *spill;
    uint8_t             *block;         /* [block_bytes] a spilled block */
    uint64_t             block_bytes;   /* KV bytes of one block */
    uint64_t             slot_bytes;    /* file bytes of one block */
    uint8_t            (*ids)[KVS_TIER_ID_LEN];  /* [max_blocks] a plan's
                                                    path names */
    uint32_t            *table;         /* [max_blocks] a plan's match */
    uint32_t             max_blocks;    /* of a sequence's tokens */
    kvs_tier_cost_t      cost;
    kvs_engine_tier_stats_t  st;
    kvs_engine_tload_t  *ld;            /* the loader; NULL until made */
};

#endif /* KVS_ENGINE_TIER_H */
