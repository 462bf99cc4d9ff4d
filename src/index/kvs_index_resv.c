/*
 * kvs_index_resv: a request's class and need on a host's long KV pool,
 * the reservation script and the checks on its replies
 * (kvs_index_resv.h).
 *
 * Invariants: the need is computed with the host's own rule (length less
 * one token, whole blocks), saturating; nothing in a reply is used
 * before its type, count and range are checked.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvs_index_resv.h"


/*
 * KEYS[1] the host record, KEYS[2] its reservations; ARGV member,
 * blocks, seqs, ttl_ms.  The key lives twice the longest TTL, so that a
 * member past its expiry is seen (and counted) by the next take before
 * the key goes.  Members whose numbers do not parse count as
 * nothing (another writer's); a record of another schema version is no
 * record.  " lroom=" cannot match inside another field: values hold no
 * space.
 */
const char  kvs_index_resv_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local expired = redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
    "local rec = redis.call('GET', KEYS[1])\n"
    "if not rec or string.sub(rec, 1, 5) ~= 'kvs1 ' then\n"
    "  return {-1, expired, 0, 0}\n"
    "end\n"
    "local room = tonumber(string.match(rec, ' lroom=(%d+)'))\n"
    "local slots = tonumber(string.match(rec, ' lslots=(%d+)'))\n"
    "if not room or not slots then\n"
    "  return {-2, expired, 0, 0}\n"
    "end\n"
    "for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do\n"
    "  local b, s = string.match(m, '^(%d+):(%d+):')\n"
    "  room = room - (tonumber(b) or 0)\n"
    "  slots = slots - (tonumber(s) or 0)\n"
    "end\n"
    "local need = tonumber(ARGV[2])\n"
    "local seqs = tonumber(ARGV[3])\n"
    "local ttl = tonumber(ARGV[4])\n"
    "if need > room or seqs > slots then\n"
    "  return {0, expired, room, slots}\n"
    "end\n"
    "redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])\n"
    "if redis.call('PTTL', KEYS[2]) < 2 * ttl then\n"
    "  redis.call('PEXPIRE', KEYS[2], 2 * ttl)\n"
    "end\n"
    "return {1, expired, room - need, slots - seqs}\n";


int
kvs_index_resv_add(const kvs_index_host_t *h, uint64_t n_prompt,
    uint64_t max_tokens, kvs_index_resv_need_t *need)
{
    uint64_t  total, blocks;

    if (h->long_min == 0 || h->block_tokens == 0) {
        return 0;
    }

    total = n_prompt + max_tokens;
    if (total < n_prompt) {
        total = UINT64_MAX;
    }

    if (total < h->long_min) {
        return 0;
    }

    /* the last token is sampled, never computed: total >= long_min >= 1 */
    blocks = (total - 1) / h->block_tokens
             + ((total - 1) % h->block_tokens != 0);

    need->blocks = UINT64_MAX - need->blocks < blocks
                   ? UINT64_MAX : need->blocks + blocks;
    need->seqs = need->seqs == UINT32_MAX ? UINT32_MAX : need->seqs + 1;

    return 1;
}


int
kvs_index_resv_fits(const kvs_index_host_t *h,
    const kvs_index_resv_need_t *need)
{
    return h->long_min != 0 && need->blocks <= h->long_room
           && need->seqs <= h->long_slots;
}


int
kvs_index_resv_member(const kvs_index_resv_need_t *need, uint64_t gw,
    uint64_t n, char *out, size_t *len, kvs_err_t *err)
{
    int  k;

    if (need->blocks == 0 || need->seqs == 0) {
        return kvs_err_set(err, KVS_EINVAL, "long-pool reservation: an "
                           "empty need (%" PRIu64 " blocks, %" PRIu32
                           " sequences)", need->blocks, need->seqs);
    }

    /* at most 20 + 1 + 10 + 1 + 16 + 1 + 16 = 65 bytes: checked */
    k = snprintf(out, KVS_INDEX_RESV_MEMBER_MAX + 1,
                 "%" PRIu64 ":%" PRIu32 ":%016" PRIx64 ":%" PRIx64,
                 need->blocks, need->seqs, gw, n);

    if (k < 0 || k > KVS_INDEX_RESV_MEMBER_MAX) {
        return kvs_err_set(err, KVS_ERANGE, "long-pool reservation: a "
                           "member over %d bytes",
                           KVS_INDEX_RESV_MEMBER_MAX);
    }

    *len = (size_t) k;

    return KVS_OK;
}


int
kvs_index_resv_ttl_check(uint64_t ttl_ms, kvs_err_t *err)
{
    if (ttl_ms < KVS_INDEX_RESV_TTL_MIN || ttl_ms > KVS_INDEX_RESV_TTL_MAX) {
        return kvs_err_set(err, KVS_ERANGE, "long-pool reservation: a TTL "
                           "of %" PRIu64 " ms, not %d..%d", ttl_ms,
                           KVS_INDEX_RESV_TTL_MIN, KVS_INDEX_RESV_TTL_MAX);
    }

    return KVS_OK;
}


int
kvs_index_resv_sha_parse(const kvs_index_reply_t *r, char *sha,
    kvs_err_t *err)
{
    size_t  i;
    char    ch;

    if (r == NULL || r->type != KVS_INDEX_REPLY_STRING || r->str == NULL
        || r->len != KVS_INDEX_RESV_SHA_LEN)
    {
        return kvs_err_set(err, KVS_ETYPE, "long-pool reservation: SCRIPT "
                           "LOAD did not answer a SHA-1");
    }

    for (i = 0; i < KVS_INDEX_RESV_SHA_LEN; i++) {
        ch = r->str[i];

        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) {
            return kvs_err_set(err, KVS_EFORMAT, "long-pool reservation: "
                               "SCRIPT LOAD answered a non-hex SHA-1");
        }
    }

    memcpy(sha, r->str, KVS_INDEX_RESV_SHA_LEN);
    sha[KVS_INDEX_RESV_SHA_LEN] = '\0';

    return KVS_OK;
}


int
kvs_index_resv_parse(const kvs_index_reply_t *r,
    kvs_index_resv_result_t *res, kvs_err_t *err)
{
    size_t                    i, n;
    const kvs_index_reply_t  *e;

    memset(res, 0, sizeof(*res));

    if (r == NULL) {
        return kvs_err_set(err, KVS_ETYPE, "long-pool reservation: no "
                           "reply");
    }

    if (r->type == KVS_INDEX_REPLY_ERROR) {
        n = r->str != NULL && r->len < 200 ? r->len : 0;

        if (n >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0) {
            return kvs_err_set(err, KVS_ENOTFOUND, "long-pool reservation: "
                               "the script is not loaded");
        }

        return kvs_err_set(err, KVS_EIO, "long-pool reservation: Redis "
                           "error \"%.*s\"", (int) n, n > 0 ? r->str : "");
    }

    if (r->type != KVS_INDEX_REPLY_ARRAY || r->elements != 4
        || r->element == NULL)
    {
        return kvs_err_set(err, KVS_ETYPE, "long-pool reservation: a reply "
                           "that is not an array of 4");
    }

    for (i = 0; i < 4; i++) {
        e = &r->element[i];

        if (e->type != KVS_INDEX_REPLY_INTEGER) {
            return kvs_err_set(err, KVS_ETYPE, "long-pool reservation: "
                               "element %zu is not an integer", i);
        }
    }

    e = r->element;

    if (e[0].integer < KVS_INDEX_RESV_NO_POOL
        || e[0].integer > KVS_INDEX_RESV_WON
        || e[1].integer < 0 || e[1].integer > UINT32_MAX)
    {
        return kvs_err_set(err, KVS_EFORMAT, "long-pool reservation: "
                           "outcome %lld, %lld expired", e[0].integer,
                           e[1].integer);
    }

    /* won: nothing left can be negative; lost: an over-full host's
     * leftovers are negative, and read as none */
    if (e[0].integer == KVS_INDEX_RESV_WON
        && (e[2].integer < 0 || e[3].integer < 0))
    {
        return kvs_err_set(err, KVS_EFORMAT, "long-pool reservation: won "
                           "with %lld blocks and %lld slots left",
                           e[2].integer, e[3].integer);
    }

    res->outcome = (kvs_index_resv_outcome_t) e[0].integer;
    res->expired = (uint32_t) e[1].integer;
    res->room_left = e[2].integer > 0 ? (uint64_t) e[2].integer : 0;
    res->slots_left = e[3].integer > 0 ? (uint64_t) e[3].integer : 0;

    return KVS_OK;
}
