/*
 * kvs_index_schema: the prefix index's Redis key schema, the commands
 * that write and read it, and the checks on what is read back.
 *
 * Keys (docs/prefix-index.md explains the choices):
 *
 *   kvs:v1:host:<host_id>   string, "kvs1 id=.. inc=.. epoch=.. bt=..
 *                           run=.. wait=.. free=.. ts=.. model=.. url=..
 *                           [lmin=.. lroom=.. lslots=..] [tw=..]
 *                           [lora=..]",
 *                           SET with PX: a short TTL refreshed by each
 *                           heartbeat, so a dead host vanishes by itself
 *   kvs:v1:hosts            sorted set: host_id scored by its last
 *                           heartbeat (ms), how readers find the hosts
 *   kvs:v1:blk:<name hex>   hash: field host_id, value the incarnation
 *                           (16 hex digits) that cached the block; PEXPIRE
 *                           on every publish, HDEL on eviction; a block
 *                           the host keeps in its disk tier has the
 *                           field "d:<host_id>" too (or alone), written
 *                           and deleted the same way.  ':' is never in a
 *                           host id, so a reader of the pool alone takes
 *                           such a field for a malformed entry, skips it
 *                           and goes on (the key's TTL is shared)
 *   kvs:v1:resv:<host_id>   sorted set: gateways' reservations of the
 *                           host's long KV pool, scored by their expiry
 *                           (kvs_index_resv.h)
 *
 * The schema version is in every key (kvs:v1:) and in every host value
 * ("kvs1 "): a reader never parses a version it does not know.  Host ids
 * are 1..64 of [A-Za-z0-9._-], so they never need quoting in a key, a
 * hash field or a value.
 *
 * Commands are built as argv arrays (for redisAsyncCommandArgv) into a
 * batch whose memory the caller gives (kvs_index_cmds_t); a command that
 * does not fit is refused whole (KVS_ERANGE) and the batch is unchanged.
 *
 * Replies are read through kvs_index_reply_t, our own mirror of a hiredis
 * reply (the glue converts; RESP3 maps are given as flat arrays of
 * key, value), so everything here is tested without hiredis.  What Redis
 * returns is never trusted: every length is bounded before it is read,
 * and a record that is malformed, partial, of another schema version, of
 * another weight epoch or of a replaced incarnation is rejected with a
 * reason (kvs_index_reject_t).
 */

#ifndef KVS_INDEX_SCHEMA_H
#define KVS_INDEX_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"
#include "kvs_index_name.h"
#include "kvs_index_lora.h"

#define KVS_INDEX_SCHEMA_VERSION  1
#define KVS_INDEX_KEY_PREFIX      "kvs:v1:"
#define KVS_INDEX_VALUE_TAG       "kvs1"

#define KVS_INDEX_HOST_ID_MAX     64       /* bytes, [A-Za-z0-9._-] */
#define KVS_INDEX_URL_MAX         256      /* bytes, printable, no space */
#define KVS_INDEX_MODEL_MAX       128      /* bytes, printable, no space */
#define KVS_INDEX_HOST_VALUE_MAX  1024     /* bytes of a host record */
#define KVS_INDEX_INC_HEX_LEN     16       /* hex digits of an
                                              incarnation or an epoch */
#define KVS_INDEX_FIELD_DISK      "d:"     /* before a host id: the
                                              block is in its disk tier */
#define KVS_INDEX_FIELD_HOST      "h:"     /* ... in its host memory
                                              tier */
#define KVS_INDEX_TIER_WEIGHT_ONE 1000     /* a pool block's worth */
#define KVS_INDEX_CMD_ARGS_MAX    9        /* arguments of our longest
                                              command (EVALSHA of the
                                              reservation script) */


/* Where a host keeps a block it publishes. */
typedef enum {
    KVS_INDEX_TIER_POOL = 0,          /* the engine's KV pool */
    KVS_INDEX_TIER_DISK,              /* its disk tier (kvserve_kv_tier) */
    KVS_INDEX_TIER_HOST               /* its host memory tier (between the
                                         two in speed; numbered last, as
                                         it came last) */
} kvs_index_tier_t;


/* ---- replies ----------------------------------------------------------- */

typedef enum {
    KVS_INDEX_REPLY_NIL = 0,
    KVS_INDEX_REPLY_INTEGER,
    KVS_INDEX_REPLY_STRING,
    KVS_INDEX_REPLY_STATUS,           /* "+OK" */
    KVS_INDEX_REPLY_ARRAY,
    KVS_INDEX_REPLY_ERROR
} kvs_index_reply_type_t;

typedef struct kvs_index_reply_s  kvs_index_reply_t;

struct kvs_index_reply_s {
    kvs_index_reply_type_t    type;
    long long                 integer;    /* INTEGER */
    const char               *str;        /* [len]: STRING, STATUS, ERROR */
    size_t                    len;
    const kvs_index_reply_t  *element;    /* [elements]: ARRAY */
    size_t                    elements;
};

/* Why a reply or a record was not used; names for logs and metrics. */
typedef enum {
    KVS_INDEX_OK = 0,
    KVS_INDEX_REJECT_MISSING,         /* nil: no such key */
    KVS_INDEX_REJECT_ERROR,           /* Redis answered an error */
    KVS_INDEX_REJECT_TYPE,            /* a reply of the wrong type */
    KVS_INDEX_REJECT_TOO_LONG,        /* over a documented bound */
    KVS_INDEX_REJECT_FOREIGN,         /* another schema version */
    KVS_INDEX_REJECT_MALFORMED,       /* bad syntax or value */
    KVS_INDEX_REJECT_PARTIAL,         /* a required field is missing */
    KVS_INDEX_REJECT_HOST_MISMATCH,   /* record's id is not its key's */
    KVS_INDEX_REJECT_STALE,           /* heartbeat older than max_age */
    KVS_INDEX_REJECT_OLD_EPOCH,       /* other weights */
    KVS_INDEX_REJECT_OTHER_MODEL,     /* serves another model */
    KVS_INDEX_REJECT_STALE_INCARNATION /* a replaced process */
} kvs_index_reject_t;

const char *kvs_index_reject_name(kvs_index_reject_t why);


/* ---- host records ------------------------------------------------------ */

typedef struct {
    char      id[KVS_INDEX_HOST_ID_MAX + 1];      /* NUL-terminated */
    char      url[KVS_INDEX_URL_MAX + 1];         /* advertise URL */
    char      model[KVS_INDEX_MODEL_MAX + 1];     /* served model name */
    uint64_t  incarnation;            /* random, nonzero, new per start */
    uint64_t  epoch;                  /* the weights' identity */
    uint32_t  block_tokens;           /* its KV block size: names differ
                                         across block sizes */
    uint32_t  running;                /* sequences decoding */
    uint32_t  waiting;                /* sequences queued */
    uint32_t  free_blocks;            /* free KV blocks */
    uint64_t  ts_ms;                  /* heartbeat, ms since 1970 */
    uint32_t  long_min;               /* KV pools: prompt + max_tokens
                                         that make a request long; 0: no
                                         pools (the fields are absent) */
    uint32_t  long_room;              /* blocks the long pool may admit */
    uint32_t  long_slots;             /* its free prefill slots */
    uint32_t  tier_weight;            /* "tw": a disk-tier block's worth
                                         to a request, per mille of a
                                         pool block's (1..1000); 0: not
                                         said (the field is absent) */
    uint32_t  host_weight;            /* "hw": a host-tier block's worth,
                                         per mille, the same way; 0: not
                                         said (absent) */
    kvs_index_lora_set_t  loras;      /* "lora": its model's adapter
                                         files (kvs_index_lora.h) */
    unsigned              has_loras:1;  /* the record says them; 0: a
                                         host that predates the field,
                                         taken to serve any */
} kvs_index_host_t;

/* What a reader accepts (kvs_index_host_check). */
typedef struct {
    uint64_t                 now_ms;       /* same clock as ts_ms */
    uint64_t                 max_age_ms;   /* 0: no age check */
    uint64_t                 epoch;        /* when check_epoch */
    int                      check_epoch;
    const char              *model;        /* [model_len]; NULL: any */
    size_t                   model_len;
    const kvs_index_host_t  *known;        /* this id's record held so
                                              far, or NULL */
} kvs_index_host_want_t;

/* KVS_OK when id[0, len) is a valid host id, else KVS_EINVAL naming it. */
int kvs_index_host_id_check(const char *id, size_t len, kvs_err_t *err);

/* The record's value ("kvs1 id=..."), NUL-terminated, into
 * out[KVS_INDEX_HOST_VALUE_MAX + 1]; KVS_EINVAL for a field that could
 * not be read back (bad id, model or url, incarnation 0). */
int kvs_index_host_format(const kvs_index_host_t *h, char *out, size_t *len,
    kvs_err_t *err);

/*
 * Parses the reply to GET kvs:v1:host:<id> (id[0, id_len) from the key)
 * into *h.  Unknown fields are ignored (v1 may gain fields), a repeated
 * or missing one is not; the long pool's lmin, lroom and lslots are
 * optional (long_min 0 without them), but all three or none; tw is
 * optional (tier_weight 0 without it), 1..1000, and so is hw
 * (host_weight); lora is optional
 * (has_loras 0 without it), "0" or 128 hex digits.  On rejection *why says
 * why (MISSING for nil)
 * and the return is KVS_ENOTFOUND (nil), KVS_EIO (an error reply),
 * KVS_ETYPE, KVS_EUNSUPPORTED (another schema version) or KVS_EFORMAT;
 * *h is then undefined.
 */
int kvs_index_host_parse(const kvs_index_reply_t *r, const char *id,
    size_t id_len, kvs_index_host_t *h, kvs_index_reject_t *why,
    kvs_err_t *err);

/* KVS_OK when h is usable under want, else KVS_EINVAL and *why (STALE,
 * OLD_EPOCH, OTHER_MODEL, STALE_INCARNATION: an incarnation other than
 * the known one, with an older heartbeat). */
int kvs_index_host_check(const kvs_index_host_t *h,
    const kvs_index_host_want_t *want, kvs_index_reject_t *why,
    kvs_err_t *err);

/* 1 when the host of record h may serve the adapter file of epoch
 * `file`: its record's set admits it, or says no set (a host that
 * predates "lora"); 0 when it does not serve it. */
int kvs_index_host_serves(const kvs_index_host_t *h, uint64_t file);

/* Parses the reply to ZRANGEBYSCORE kvs:v1:hosts: up to cap valid ids
 * into ids[], *n of them; invalid members are skipped and counted in
 * *skipped.  KVS_ETYPE for a reply that is not an array of strings. */
int kvs_index_hosts_parse(const kvs_index_reply_t *r,
    char (*ids)[KVS_INDEX_HOST_ID_MAX + 1], size_t cap, size_t *n,
    size_t *skipped, kvs_err_t *err);

/* One field, value pair of HGETALL kvs:v1:blk:<name>: the host id (not
 * copied) and the incarnation.  KVS_EFORMAT for anything else. */
int kvs_index_blk_entry(const kvs_index_reply_t *field,
    const kvs_index_reply_t *value, const char **id, size_t *id_len,
    uint64_t *incarnation);

/* The same for a reader of every tier: a field "<id>" is the pool's,
 * "d:<id>" the disk tier's, "h:<id>" the host tier's (*tier says which,
 * *id is the id alone). */
int kvs_index_blk_entry_tier(const kvs_index_reply_t *field,
    const kvs_index_reply_t *value, const char **id, size_t *id_len,
    uint64_t *incarnation, kvs_index_tier_t *tier);

/* The reply to a write (SET, ZADD, HSET, PEXPIRE, HDEL, DEL...): KVS_OK
 * for a status or an integer, KVS_EIO with Redis' message for an error,
 * KVS_ETYPE otherwise. */
int kvs_index_reply_written(const kvs_index_reply_t *r, kvs_err_t *err);


/* ---- command batches --------------------------------------------------- */

typedef struct {
    char         *buf;                /* [buf_cap] argument bytes, each
                                         argument NUL-terminated */
    size_t        buf_cap;
    size_t        buf_len;
    const char  **argv;               /* [arg_cap] into buf */
    size_t       *argvlen;            /* [arg_cap] */
    size_t        arg_cap;
    size_t        n_args;
    size_t       *first;              /* [cmd_cap]: command i's first
                                         argument */
    size_t        cmd_cap;
    size_t        n_cmds;
} kvs_index_cmds_t;

/* An empty batch over the caller's arrays (all sizes in elements, buf's
 * in bytes). */
void kvs_index_cmds_init(kvs_index_cmds_t *c, char *buf, size_t buf_cap,
    const char **argv, size_t *argvlen, size_t arg_cap, size_t *first,
    size_t cmd_cap);
void kvs_index_cmds_reset(kvs_index_cmds_t *c);

/* Command i (< n_cmds) as redisAsyncCommandArgv takes it. */
void kvs_index_cmds_get(const kvs_index_cmds_t *c, size_t i, int *argc,
    const char ***argv, const size_t **argvlen);

/* SET kvs:v1:host:<id> <value> PX <ttl_ms> */
int kvs_index_cmd_host_set(kvs_index_cmds_t *c, const kvs_index_host_t *h,
    uint64_t ttl_ms, kvs_err_t *err);
/* GET kvs:v1:host:<id> */
int kvs_index_cmd_host_get(kvs_index_cmds_t *c, const char *id,
    size_t id_len, kvs_err_t *err);
/* DEL kvs:v1:host:<id> (a clean shutdown) */
int kvs_index_cmd_host_del(kvs_index_cmds_t *c, const char *id,
    size_t id_len, kvs_err_t *err);
/* ZADD kvs:v1:hosts <now_ms> <id> */
int kvs_index_cmd_hosts_add(kvs_index_cmds_t *c, const char *id,
    size_t id_len, uint64_t now_ms, kvs_err_t *err);
/* ZREMRANGEBYSCORE kvs:v1:hosts -inf (<before_ms> */
int kvs_index_cmd_hosts_trim(kvs_index_cmds_t *c, uint64_t before_ms,
    kvs_err_t *err);
/* ZRANGEBYSCORE kvs:v1:hosts <since_ms> +inf */
int kvs_index_cmd_hosts_list(kvs_index_cmds_t *c, uint64_t since_ms,
    kvs_err_t *err);
/* HSET kvs:v1:blk:<name> <id> <incarnation>, then
 * PEXPIRE kvs:v1:blk:<name> <ttl_ms>: two commands, both or neither */
int kvs_index_cmd_blk_add(kvs_index_cmds_t *c, const kvs_index_name_t *name,
    const char *id, size_t id_len, uint64_t incarnation, uint64_t ttl_ms,
    kvs_err_t *err);
/* PEXPIRE kvs:v1:blk:<name> <ttl_ms> (a reused block stays listed) */
int kvs_index_cmd_blk_touch(kvs_index_cmds_t *c,
    const kvs_index_name_t *name, uint64_t ttl_ms, kvs_err_t *err);
/* The same for the block in tier: field <id> (the pool), d:<id> (the
 * disk tier) or h:<id> (the host tier); KVS_EINVAL for another tier. */
int kvs_index_cmd_blk_tier_add(kvs_index_cmds_t *c,
    const kvs_index_name_t *name, const char *id, size_t id_len,
    uint64_t incarnation, uint64_t ttl_ms, kvs_index_tier_t tier,
    kvs_err_t *err);
/* HDEL kvs:v1:blk:<name> <id> or d:<id> */
int kvs_index_cmd_blk_tier_del(kvs_index_cmds_t *c,
    const kvs_index_name_t *name, const char *id, size_t id_len,
    kvs_index_tier_t tier, kvs_err_t *err);
/* HDEL kvs:v1:blk:<name> <id> */
int kvs_index_cmd_blk_del(kvs_index_cmds_t *c, const kvs_index_name_t *name,
    const char *id, size_t id_len, kvs_err_t *err);
/* HGETALL kvs:v1:blk:<name> */
int kvs_index_cmd_blk_get(kvs_index_cmds_t *c, const kvs_index_name_t *name,
    kvs_err_t *err);

/* The long-pool reservations (kvs_index_resv.h): SCRIPT LOAD <script> */
int kvs_index_cmd_resv_load(kvs_index_cmds_t *c, kvs_err_t *err);
/* EVALSHA <sha> 2 kvs:v1:host:<id> kvs:v1:resv:<id> <member> <blocks>
 * <seqs> <ttl_ms>; with sha NULL, EVAL <script> and the same.  KVS_EINVAL
 * for a bad id, sha or member, a TTL out of range or an empty need. */
int kvs_index_cmd_resv_take(kvs_index_cmds_t *c, const char *sha,
    const char *id, size_t id_len, const char *member, size_t member_len,
    uint64_t blocks, uint32_t seqs, uint64_t ttl_ms, kvs_err_t *err);
/* ZREM kvs:v1:resv:<id> <member>: a reservation given back */
int kvs_index_cmd_resv_drop(kvs_index_cmds_t *c, const char *id,
    size_t id_len, const char *member, size_t member_len, kvs_err_t *err);

#endif /* KVS_INDEX_SCHEMA_H */
