/*
 * kvs_limit_kv: the arithmetic of kv_rate, the second bucket of a
 * kvserve_limit_zone, which counts the KV cache a request holds for as
 * long as it runs (docs/limits.md, "kv_rate"): the KV bucket's size,
 * what a request reserves at admission, and what it held when it ends,
 * to which the reservation is settled (kvs_limit_settle_actual()).
 * What it held is the engine's own count (KV blocks x the time it held
 * them, from its admission to its end, nothing while it waited in the
 * engine's queue) when the engine sent one, else an estimate from the
 * request's timings.
 *
 * Units: tokens; bytes of KV cache per token (the model's, as /v1/models
 * reports it); KiB x s, KiB of KV cache held for one second, the KV
 * bucket's amounts (what kvs_limit.h calls tokens); kv_rate in KiB per
 * second; stamps in ns of one monotonic clock (kvs_now_ns()).
 *
 * Invariants: pure functions, no allocation, no clock; every result is
 * computed without overflow for any input and stays within
 * KVS_LIMIT_TOKENS_MAX, except a reservation too large for any bucket,
 * which is KVS_LIMIT_TOKENS_MAX + 1 so that kvs_limit_reserve() refuses
 * it (the request can never pass).
 */

#ifndef KVS_LIMIT_KV_H
#define KVS_LIMIT_KV_H

#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_limit.h"

/* A request's hold of KV cache: the engine's count, and its own timings
 * for when that did not come (all of it or its end).  Zero the struct,
 * then fill what is known. */
typedef struct {
    uint64_t  prompt_tokens;    /* over its prompts */
    uint64_t  generated;        /* output tokens generated, all choices */
    uint64_t  bytes_per_token;  /* KV bytes per token */
    uint64_t  submit_ns;        /* sent to the engine; 0: never was */
    uint64_t  first_ns;         /* its first token came; 0: none yet */
    uint64_t  engine_block_us;  /* the engine's count over its choices:
                                   KV blocks held x microseconds (the
                                   OUT frames' kv_block_us) */
    uint64_t  engine_ns;        /* the latest frame that carried it was
                                   made; 0: none came (no count) */
    uint64_t  block_tokens;     /* tokens a KV block holds */
    uint32_t  engine_done;      /* every choice's last frame came: the
                                   count is the whole hold */
} kvs_limit_kv_hold_t;

/*
 * The KV bucket beside the token bucket t (a kvserve_limit's: its rate,
 * period and burst): it drains kv_rate KiB x s per second and holds
 * what t's window (burst / rate periods, in whole seconds, at least
 * one) holds at kv_rate, at most KVS_LIMIT_TOKENS_MAX; it never delays.
 * KVS_EINVAL when kv_rate is not 1..KVS_LIMIT_TOKENS_MAX.
 */
int kvs_limit_kv_conf_init(kvs_limit_conf_t *c, const kvs_limit_conf_t *t,
    uint64_t kv_rate, kvs_err_t *err);

/*
 * The reservation at admission, KiB x s: all the request may hold
 * (tokens: prompt plus reserved output, at bytes_per_token each) for one
 * second, rounded up; KVS_LIMIT_TOKENS_MAX + 1 when that is over
 * KVS_LIMIT_TOKENS_MAX.
 */
uint64_t kvs_limit_kv_cost(uint64_t tokens, uint64_t bytes_per_token);

/*
 * What the request held until now_ns, KiB x s, rounded up, at most
 * KVS_LIMIT_TOKENS_MAX.
 *
 * With the engine's count (engine_ns set): engine_block_us x the block's
 * bytes (block_tokens x bytes_per_token), exactly; when the count is not
 * whole (engine_done 0: the client left, the engine timed out or
 * failed), plus the tokens it had (prompt and generated) held from the
 * latest count to now_ns, as if it kept them all.
 *
 * Without (an engine that sent none, or a request cut short before its
 * first frame): from the submit to the first token (now, without one)
 * its prompt's blocks fill up, half the prompt held on average; from
 * then on the whole prompt and half the output so far.  A request that
 * never reached the engine held nothing; a stamp behind the one before
 * it counts as no time.
 */
uint64_t kvs_limit_kv_held(const kvs_limit_kv_hold_t *h, uint64_t now_ns);

#endif /* KVS_LIMIT_KV_H */
