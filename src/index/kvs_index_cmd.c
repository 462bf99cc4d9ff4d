/*
 * kvs_index_cmd: builds the prefix index's Redis commands as argv arrays
 * into a caller-given batch (kvs_index_schema.h lists them).
 *
 * Invariants: argv[] points into buf, which never moves (the caller owns
 * it), so a batch can be handed to redisAsyncCommandArgv as is; a
 * command is added whole or not at all (each builder restores the batch
 * on KVS_ERANGE); every argument is NUL-terminated for logs, the NUL not
 * counted in argvlen.
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvs_index_resv.h"

#define KVS_INDEX_KEY_BLK    KVS_INDEX_KEY_PREFIX "blk:"
#define KVS_INDEX_KEY_HOST   KVS_INDEX_KEY_PREFIX "host:"
#define KVS_INDEX_KEY_HOSTS  KVS_INDEX_KEY_PREFIX "hosts"
#define KVS_INDEX_KEY_RESV   KVS_INDEX_KEY_PREFIX "resv:"

typedef struct {
    size_t  buf_len;
    size_t  n_args;
    size_t  n_cmds;
} kvs_index_mark_t;


static kvs_index_mark_t kvs_index_cmd_begin(kvs_index_cmds_t *c);
static int kvs_index_cmd_arg(kvs_index_cmds_t *c, const char *a, size_t n,
    const char *b, size_t m);
static int kvs_index_cmd_str(kvs_index_cmds_t *c, const char *s);
static int kvs_index_cmd_u64(kvs_index_cmds_t *c, const char *pre,
    uint64_t v);
static int kvs_index_cmd_field(kvs_index_cmds_t *c, const char *id,
    size_t id_len, kvs_index_tier_t tier);
static int kvs_index_cmd_blk_key(kvs_index_cmds_t *c,
    const kvs_index_name_t *name);
static int kvs_index_cmd_end(kvs_index_cmds_t *c, kvs_index_mark_t m,
    int rc, const char *what, kvs_err_t *err);
static int kvs_index_cmd_by_id(kvs_index_cmds_t *c, const char *verb,
    const char *id, size_t id_len, kvs_err_t *err);


void
kvs_index_cmds_init(kvs_index_cmds_t *c, char *buf, size_t buf_cap,
    const char **argv, size_t *argvlen, size_t arg_cap, size_t *first,
    size_t cmd_cap)
{
    memset(c, 0, sizeof(*c));
    c->buf = buf;
    c->buf_cap = buf_cap;
    c->argv = argv;
    c->argvlen = argvlen;
    c->arg_cap = arg_cap;
    c->first = first;
    c->cmd_cap = cmd_cap;
}


void
kvs_index_cmds_reset(kvs_index_cmds_t *c)
{
    c->buf_len = 0;
    c->n_args = 0;
    c->n_cmds = 0;
}


void
kvs_index_cmds_get(const kvs_index_cmds_t *c, size_t i, int *argc,
    const char ***argv, const size_t **argvlen)
{
    size_t  end;

    end = i + 1 < c->n_cmds ? c->first[i + 1] : c->n_args;

    *argc = (int) (end - c->first[i]);
    *argv = c->argv + c->first[i];
    *argvlen = c->argvlen + c->first[i];
}


int
kvs_index_cmd_host_set(kvs_index_cmds_t *c, const kvs_index_host_t *h,
    uint64_t ttl_ms, kvs_err_t *err)
{
    int               rc;
    char              value[KVS_INDEX_HOST_VALUE_MAX + 1];
    size_t            len;
    kvs_index_mark_t  m;

    rc = kvs_index_host_format(h, value, &len, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (ttl_ms == 0) {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: a host record "
                           "needs a TTL");
    }

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, "SET");
    rc = rc ? rc : kvs_index_cmd_arg(c, KVS_INDEX_KEY_HOST,
                                     sizeof(KVS_INDEX_KEY_HOST) - 1, h->id,
                                     strlen(h->id));
    rc = rc ? rc : kvs_index_cmd_arg(c, value, len, NULL, 0);
    rc = rc ? rc : kvs_index_cmd_str(c, "PX");
    rc = rc ? rc : kvs_index_cmd_u64(c, "", ttl_ms);

    return kvs_index_cmd_end(c, m, rc, "SET host", err);
}


int
kvs_index_cmd_host_get(kvs_index_cmds_t *c, const char *id, size_t id_len,
    kvs_err_t *err)
{
    return kvs_index_cmd_by_id(c, "GET", id, id_len, err);
}


int
kvs_index_cmd_host_del(kvs_index_cmds_t *c, const char *id, size_t id_len,
    kvs_err_t *err)
{
    return kvs_index_cmd_by_id(c, "DEL", id, id_len, err);
}


int
kvs_index_cmd_hosts_add(kvs_index_cmds_t *c, const char *id, size_t id_len,
    uint64_t now_ms, kvs_err_t *err)
{
    int               rc;
    kvs_index_mark_t  m;

    rc = kvs_index_host_id_check(id, id_len, err);
    if (rc != KVS_OK) {
        return rc;
    }

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, "ZADD");
    rc = rc ? rc : kvs_index_cmd_str(c, KVS_INDEX_KEY_HOSTS);
    rc = rc ? rc : kvs_index_cmd_u64(c, "", now_ms);
    rc = rc ? rc : kvs_index_cmd_arg(c, id, id_len, NULL, 0);

    return kvs_index_cmd_end(c, m, rc, "ZADD hosts", err);
}


int
kvs_index_cmd_hosts_trim(kvs_index_cmds_t *c, uint64_t before_ms,
    kvs_err_t *err)
{
    int               rc;
    kvs_index_mark_t  m;

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, "ZREMRANGEBYSCORE");
    rc = rc ? rc : kvs_index_cmd_str(c, KVS_INDEX_KEY_HOSTS);
    rc = rc ? rc : kvs_index_cmd_str(c, "-inf");
    rc = rc ? rc : kvs_index_cmd_u64(c, "(", before_ms);

    return kvs_index_cmd_end(c, m, rc, "ZREMRANGEBYSCORE hosts", err);
}


int
kvs_index_cmd_hosts_list(kvs_index_cmds_t *c, uint64_t since_ms,
    kvs_err_t *err)
{
    int               rc;
    kvs_index_mark_t  m;

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, "ZRANGEBYSCORE");
    rc = rc ? rc : kvs_index_cmd_str(c, KVS_INDEX_KEY_HOSTS);
    rc = rc ? rc : kvs_index_cmd_u64(c, "", since_ms);
    rc = rc ? rc : kvs_index_cmd_str(c, "+inf");

    return kvs_index_cmd_end(c, m, rc, "ZRANGEBYSCORE hosts", err);
}


int
kvs_index_cmd_blk_add(kvs_index_cmds_t *c, const kvs_index_name_t *name,
    const char *id, size_t id_len, uint64_t incarnation, uint64_t ttl_ms,
    kvs_err_t *err)
{
    return kvs_index_cmd_blk_tier_add(c, name, id, id_len, incarnation,
                                      ttl_ms, KVS_INDEX_TIER_POOL, err);
}


int
kvs_index_cmd_blk_tier_add(kvs_index_cmds_t *c, const kvs_index_name_t *name,
    const char *id, size_t id_len, uint64_t incarnation, uint64_t ttl_ms,
    kvs_index_tier_t tier, kvs_err_t *err)
{
    int               rc;
    char              inc[KVS_INDEX_INC_HEX_LEN + 1];
    size_t            pexpire;
    kvs_index_mark_t  m;

    rc = kvs_index_host_id_check(id, id_len, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if ((unsigned) tier > KVS_INDEX_TIER_HOST) {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: tier %d",
                           (int) tier);
    }

    if (incarnation == 0 || ttl_ms == 0) {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: a block entry "
                           "needs an incarnation and a TTL");
    }

    snprintf(inc, sizeof(inc), "%016" PRIx64, incarnation);

    m = kvs_index_cmd_begin(c);

    rc = c->cmd_cap - c->n_cmds < 2 ? KVS_ERANGE : KVS_OK;
    rc = rc ? rc : kvs_index_cmd_str(c, "HSET");
    rc = rc ? rc : kvs_index_cmd_blk_key(c, name);
    rc = rc ? rc : kvs_index_cmd_field(c, id, id_len, tier);
    rc = rc ? rc : kvs_index_cmd_arg(c, inc, KVS_INDEX_INC_HEX_LEN, NULL, 0);

    pexpire = c->n_args;

    rc = rc ? rc : kvs_index_cmd_str(c, "PEXPIRE");
    rc = rc ? rc : kvs_index_cmd_blk_key(c, name);
    rc = rc ? rc : kvs_index_cmd_u64(c, "", ttl_ms);

    if (rc != KVS_OK) {
        return kvs_index_cmd_end(c, m, rc, "HSET block", err);
    }

    c->first[c->n_cmds++] = m.n_args;
    c->first[c->n_cmds++] = pexpire;

    return KVS_OK;
}


int
kvs_index_cmd_blk_touch(kvs_index_cmds_t *c, const kvs_index_name_t *name,
    uint64_t ttl_ms, kvs_err_t *err)
{
    int               rc;
    kvs_index_mark_t  m;

    if (ttl_ms == 0) {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: a block entry "
                           "needs a TTL");
    }

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, "PEXPIRE");
    rc = rc ? rc : kvs_index_cmd_blk_key(c, name);
    rc = rc ? rc : kvs_index_cmd_u64(c, "", ttl_ms);

    return kvs_index_cmd_end(c, m, rc, "PEXPIRE block", err);
}


int
kvs_index_cmd_blk_del(kvs_index_cmds_t *c, const kvs_index_name_t *name,
    const char *id, size_t id_len, kvs_err_t *err)
{
    return kvs_index_cmd_blk_tier_del(c, name, id, id_len,
                                      KVS_INDEX_TIER_POOL, err);
}


int
kvs_index_cmd_blk_tier_del(kvs_index_cmds_t *c, const kvs_index_name_t *name,
    const char *id, size_t id_len, kvs_index_tier_t tier, kvs_err_t *err)
{
    int               rc;
    kvs_index_mark_t  m;

    rc = kvs_index_host_id_check(id, id_len, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if ((unsigned) tier > KVS_INDEX_TIER_HOST) {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: tier %d",
                           (int) tier);
    }

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, "HDEL");
    rc = rc ? rc : kvs_index_cmd_blk_key(c, name);
    rc = rc ? rc : kvs_index_cmd_field(c, id, id_len, tier);

    return kvs_index_cmd_end(c, m, rc, "HDEL block", err);
}


int
kvs_index_cmd_blk_get(kvs_index_cmds_t *c, const kvs_index_name_t *name,
    kvs_err_t *err)
{
    int               rc;
    kvs_index_mark_t  m;

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, "HGETALL");
    rc = rc ? rc : kvs_index_cmd_blk_key(c, name);

    return kvs_index_cmd_end(c, m, rc, "HGETALL block", err);
}


static int
kvs_index_cmd_by_id(kvs_index_cmds_t *c, const char *verb, const char *id,
    size_t id_len, kvs_err_t *err)
{
    int               rc;
    kvs_index_mark_t  m;

    rc = kvs_index_host_id_check(id, id_len, err);
    if (rc != KVS_OK) {
        return rc;
    }

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, verb);
    rc = rc ? rc : kvs_index_cmd_arg(c, KVS_INDEX_KEY_HOST,
                                     sizeof(KVS_INDEX_KEY_HOST) - 1, id,
                                     id_len);

    return kvs_index_cmd_end(c, m, rc, verb, err);
}


int
kvs_index_cmd_resv_load(kvs_index_cmds_t *c, kvs_err_t *err)
{
    int               rc;
    kvs_index_mark_t  m;

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, "SCRIPT");
    rc = rc ? rc : kvs_index_cmd_str(c, "LOAD");
    rc = rc ? rc : kvs_index_cmd_str(c, kvs_index_resv_script);

    return kvs_index_cmd_end(c, m, rc, "SCRIPT LOAD", err);
}


/* 1..MEMBER_MAX bytes of [0-9a-z:], as kvs_index_resv_member makes. */
static int
kvs_index_resv_member_ok(const char *s, size_t n)
{
    size_t  i;

    if (n == 0 || n > KVS_INDEX_RESV_MEMBER_MAX) {
        return 0;
    }

    for (i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z')
              || s[i] == ':'))
        {
            return 0;
        }
    }

    return 1;
}


int
kvs_index_cmd_resv_take(kvs_index_cmds_t *c, const char *sha,
    const char *id, size_t id_len, const char *member, size_t member_len,
    uint64_t blocks, uint32_t seqs, uint64_t ttl_ms, kvs_err_t *err)
{
    int               rc;
    size_t            i;
    kvs_index_mark_t  m;

    rc = kvs_index_host_id_check(id, id_len, err);
    rc = rc ? rc : kvs_index_resv_ttl_check(ttl_ms, err);
    if (rc != KVS_OK) {
        return KVS_EINVAL;
    }

    if (!kvs_index_resv_member_ok(member, member_len) || blocks == 0
        || seqs == 0)
    {
        return kvs_err_set(err, KVS_EINVAL, "long-pool reservation: a bad "
                           "member or an empty need");
    }

    if (sha != NULL) {
        for (i = 0; i < KVS_INDEX_RESV_SHA_LEN; i++) {
            if (!((sha[i] >= '0' && sha[i] <= '9')
                  || (sha[i] >= 'a' && sha[i] <= 'f')))
            {
                break;
            }
        }

        if (i != KVS_INDEX_RESV_SHA_LEN || sha[i] != '\0') {
            return kvs_err_set(err, KVS_EINVAL, "long-pool reservation: "
                               "a SHA-1 that is not 40 hex digits");
        }
    }

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, sha != NULL ? "EVALSHA" : "EVAL");
    rc = rc ? rc : kvs_index_cmd_str(c, sha != NULL ? sha
                                                    : kvs_index_resv_script);
    rc = rc ? rc : kvs_index_cmd_str(c, "2");
    rc = rc ? rc : kvs_index_cmd_arg(c, KVS_INDEX_KEY_HOST,
                                     sizeof(KVS_INDEX_KEY_HOST) - 1, id,
                                     id_len);
    rc = rc ? rc : kvs_index_cmd_arg(c, KVS_INDEX_KEY_RESV,
                                     sizeof(KVS_INDEX_KEY_RESV) - 1, id,
                                     id_len);
    rc = rc ? rc : kvs_index_cmd_arg(c, member, member_len, NULL, 0);
    rc = rc ? rc : kvs_index_cmd_u64(c, "", blocks);
    rc = rc ? rc : kvs_index_cmd_u64(c, "", seqs);
    rc = rc ? rc : kvs_index_cmd_u64(c, "", ttl_ms);

    return kvs_index_cmd_end(c, m, rc, sha != NULL ? "EVALSHA" : "EVAL",
                             err);
}


int
kvs_index_cmd_resv_drop(kvs_index_cmds_t *c, const char *id, size_t id_len,
    const char *member, size_t member_len, kvs_err_t *err)
{
    int               rc;
    kvs_index_mark_t  m;

    rc = kvs_index_host_id_check(id, id_len, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (!kvs_index_resv_member_ok(member, member_len)) {
        return kvs_err_set(err, KVS_EINVAL, "long-pool reservation: a bad "
                           "member");
    }

    m = kvs_index_cmd_begin(c);

    rc = kvs_index_cmd_str(c, "ZREM");
    rc = rc ? rc : kvs_index_cmd_arg(c, KVS_INDEX_KEY_RESV,
                                     sizeof(KVS_INDEX_KEY_RESV) - 1, id,
                                     id_len);
    rc = rc ? rc : kvs_index_cmd_arg(c, member, member_len, NULL, 0);

    return kvs_index_cmd_end(c, m, rc, "ZREM", err);
}


static kvs_index_mark_t
kvs_index_cmd_begin(kvs_index_cmds_t *c)
{
    kvs_index_mark_t  m;

    m.buf_len = c->buf_len;
    m.n_args = c->n_args;
    m.n_cmds = c->n_cmds;

    return m;
}


/* One argument, the concatenation a[0, n) b[0, m). */
static int
kvs_index_cmd_arg(kvs_index_cmds_t *c, const char *a, size_t n,
    const char *b, size_t m)
{
    char  *p;

    if (c->n_args >= c->arg_cap
        || c->buf_cap - c->buf_len < n + 1
        || c->buf_cap - c->buf_len - n - 1 < m)
    {
        return KVS_ERANGE;
    }

    p = c->buf + c->buf_len;
    memcpy(p, a, n);
    if (m > 0) {
        memcpy(p + n, b, m);
    }
    p[n + m] = '\0';

    c->argv[c->n_args] = p;
    c->argvlen[c->n_args] = n + m;
    c->n_args++;
    c->buf_len += n + m + 1;

    return KVS_OK;
}


static int
kvs_index_cmd_str(kvs_index_cmds_t *c, const char *s)
{
    return kvs_index_cmd_arg(c, s, strlen(s), NULL, 0);
}


static int
kvs_index_cmd_u64(kvs_index_cmds_t *c, const char *pre, uint64_t v)
{
    char  num[24];
    int   n;

    n = snprintf(num, sizeof(num), "%" PRIu64, v);

    return kvs_index_cmd_arg(c, pre, strlen(pre), num, (size_t) n);
}


static int
kvs_index_cmd_blk_key(kvs_index_cmds_t *c, const kvs_index_name_t *name)
{
    char  hex[KVS_INDEX_NAME_HEX_LEN + 1];

    kvs_index_name_hex(name, hex);

    return kvs_index_cmd_arg(c, KVS_INDEX_KEY_BLK,
                             sizeof(KVS_INDEX_KEY_BLK) - 1, hex,
                             KVS_INDEX_NAME_HEX_LEN);
}


/* A block entry's field: the host id for the pool, "d:<id>" for the
 * disk tier, "h:<id>" for the host tier (docs/prefix-index.md, "Lower
 * tiers"). */
static int
kvs_index_cmd_field(kvs_index_cmds_t *c, const char *id, size_t id_len,
    kvs_index_tier_t tier)
{
    if (tier == KVS_INDEX_TIER_DISK) {
        return kvs_index_cmd_arg(c, KVS_INDEX_FIELD_DISK,
                                 sizeof(KVS_INDEX_FIELD_DISK) - 1, id,
                                 id_len);
    }

    if (tier == KVS_INDEX_TIER_HOST) {
        return kvs_index_cmd_arg(c, KVS_INDEX_FIELD_HOST,
                                 sizeof(KVS_INDEX_FIELD_HOST) - 1, id,
                                 id_len);
    }

    return kvs_index_cmd_arg(c, id, id_len, NULL, 0);
}


/* Closes the command begun at m, or puts the batch back as m had it. */
static int
kvs_index_cmd_end(kvs_index_cmds_t *c, kvs_index_mark_t m, int rc,
    const char *what, kvs_err_t *err)
{
    if (rc == KVS_OK && m.n_cmds >= c->cmd_cap) {
        rc = KVS_ERANGE;
    }

    if (rc != KVS_OK) {
        c->buf_len = m.buf_len;
        c->n_args = m.n_args;
        c->n_cmds = m.n_cmds;

        return kvs_err_set(err, rc, "prefix index: no room for %s in a "
                           "batch of %zu commands, %zu arguments, %zu "
                           "bytes", what, c->cmd_cap, c->arg_cap,
                           c->buf_cap);
    }

    c->first[m.n_cmds] = m.n_args;
    c->n_cmds = m.n_cmds + 1;

    return KVS_OK;
}
