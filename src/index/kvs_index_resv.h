/*
 * kvs_index_resv: gateways' reservations of engine hosts' long KV pools
 * in Redis (issue 24 point 3; docs/pools.md "Across hosts",
 * docs/prefix-index.md "Long-pool reservations").  No I/O: the class and
 * need of a request as a host computes them, the Lua script, its
 * arguments (the commands themselves are built by kvs_index_cmd.c) and
 * the checks on its replies.
 *
 * Key: kvs:v1:resv:<host_id>, a sorted set whose members are
 * "<blocks>:<seqs>:<gateway>:<serial>" (one request's reservation: its
 * KV blocks and sequences, who made it, a number unique to that
 * gateway process) scored by their expiry in ms of Redis' own clock
 * (TIME), so that gateways' clocks never need to agree.
 *
 * The script (kvs_index_resv_script), atomically: drops the members past
 * their expiry, reads the host's record (kvs:v1:host:<id>) for its room
 * (lroom blocks, lslots prefill slots), subtracts every live member, and
 * adds the new member only if its need fits what is left; the key's TTL
 * then covers twice its longest-lived member's, so that a set nobody
 * touches again vanishes by itself and an expired member is seen (and
 * counted) by the next take first.  Its reply is four integers: won (1), lost
 * (0), no record (-1) or a record without a long pool (-2); the members
 * it expired; the blocks and slots left.
 *
 * Invariants: a reply is trusted for nothing it does not prove (a wrong
 * type, count or value is KVS_EFORMAT/KVS_ETYPE, an error reply
 * KVS_EIO, NOSCRIPT KVS_ENOTFOUND so the caller sends EVAL); every sum
 * saturates instead of wrapping.
 */

#ifndef KVS_INDEX_RESV_H
#define KVS_INDEX_RESV_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_index_schema.h"

#define KVS_INDEX_RESV_TTL_MIN     100       /* ms */
#define KVS_INDEX_RESV_TTL_MAX     3600000   /* ms: 1 h */
#define KVS_INDEX_RESV_MEMBER_MAX  80        /* bytes of a member */
#define KVS_INDEX_RESV_SHA_LEN     40        /* hex digits of a SHA-1 */

/* The script's text, for EVAL and SCRIPT LOAD. */
extern const char  kvs_index_resv_script[];

/* A request's claim on one host's long pool. */
typedef struct {
    uint64_t  blocks;                 /* KV blocks of all its sequences */
    uint32_t  seqs;                   /* its sequences: prefill slots */
} kvs_index_resv_need_t;

typedef enum {
    KVS_INDEX_RESV_NO_POOL = -2,      /* the record shows no long pool */
    KVS_INDEX_RESV_NO_RECORD = -1,    /* no host record */
    KVS_INDEX_RESV_LOST = 0,          /* no room left: nothing added */
    KVS_INDEX_RESV_WON = 1            /* the member was added */
} kvs_index_resv_outcome_t;

typedef struct {
    kvs_index_resv_outcome_t  outcome;
    uint32_t                  expired;    /* members it found expired */
    uint64_t                  room_left;  /* blocks, after the add; 0 */
    uint64_t                  slots_left; /*   when the host is over */
} kvs_index_resv_result_t;

/*
 * Adds one sequence of n_prompt + max_tokens tokens to *need when that
 * length makes it long on host h (h->long_min != 0 and the length
 * reaches it), with the host's rule for its blocks: the length less the
 * last token (sampled, never computed), in blocks of h->block_tokens.
 * Returns 1 when long (added), 0 when short or h has no pools.
 */
int kvs_index_resv_add(const kvs_index_host_t *h, uint64_t n_prompt,
    uint64_t max_tokens, kvs_index_resv_need_t *need);

/* 1 when h's record shows room for need: blocks within long_room and
 * seqs within long_slots (what the script checks, less reservations). */
int kvs_index_resv_fits(const kvs_index_host_t *h,
    const kvs_index_resv_need_t *need);

/* The member for need, made by gateway gw (its serial n), into
 * out[KVS_INDEX_RESV_MEMBER_MAX + 1]; KVS_EINVAL for an empty need. */
int kvs_index_resv_member(const kvs_index_resv_need_t *need, uint64_t gw,
    uint64_t n, char *out, size_t *len, kvs_err_t *err);

/* KVS_OK when ttl_ms is in TTL_MIN..TTL_MAX, else KVS_ERANGE naming it. */
int kvs_index_resv_ttl_check(uint64_t ttl_ms, kvs_err_t *err);

/* The reply to SCRIPT LOAD: 40 lowercase hex digits into
 * sha[KVS_INDEX_RESV_SHA_LEN + 1]. */
int kvs_index_resv_sha_parse(const kvs_index_reply_t *r, char *sha,
    kvs_err_t *err);

/* The reply to the script (EVAL or EVALSHA) into *res.  KVS_ENOTFOUND:
 * a NOSCRIPT error (send EVAL); KVS_EIO: another error reply;
 * KVS_ETYPE, KVS_EFORMAT: not the script's four integers. */
int kvs_index_resv_parse(const kvs_index_reply_t *r,
    kvs_index_resv_result_t *res, kvs_err_t *err);

#endif /* KVS_INDEX_RESV_H */
