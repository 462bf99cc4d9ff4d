/*
 * kvs_index_schema: host records (format, parse, check), the host list
 * and block entries as read back from Redis (kvs_index_schema.h).
 *
 * Everything read is bounded before it is touched: a reply's length and
 * element count are checked against the documented maxima first, and a
 * value is parsed in place without copying or NUL-termination.  A
 * rejected record leaves nothing half-trusted: the caller keeps what it
 * had.
 */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvs_index_schema.h"

#define KVS_INDEX_HOSTS_MAX  4096         /* members of a host list */

/* the required fields, then the optional ones (KVS_F_REQ on): the long
 * KV pool's three, all or none; the disk and host tiers' weights */
enum {
    KVS_F_ID = 0, KVS_F_INC, KVS_F_EPOCH, KVS_F_BT, KVS_F_RUN, KVS_F_WAIT,
    KVS_F_FREE, KVS_F_TS, KVS_F_MODEL, KVS_F_URL, KVS_F_REQ,
    KVS_F_LMIN = KVS_F_REQ, KVS_F_LROOM, KVS_F_LSLOTS, KVS_F_TW, KVS_F_LORA,
    KVS_F_HW, KVS_F_N
};

#define KVS_F_LONG_ALL  ((1u << KVS_F_LMIN) | (1u << KVS_F_LROOM) \
                         | (1u << KVS_F_LSLOTS))

static const char  *kvs_index_fields[KVS_F_N] = {
    "id", "inc", "epoch", "bt", "run", "wait", "free", "ts", "model", "url",
    "lmin", "lroom", "lslots", "tw", "lora", "hw"
};


static int kvs_index_printable(const char *s, size_t n, size_t max);
static int kvs_index_hex64(const char *s, size_t n, uint64_t *v);
static int kvs_index_dec64(const char *s, size_t n, uint64_t max,
    uint64_t *v);
static int kvs_index_host_field(kvs_index_host_t *h, int f, const char *v,
    size_t n);
static int kvs_index_lora_set_format(const kvs_index_lora_set_t *set,
    char *out, size_t cap);
static int kvs_index_lora_set_parse(kvs_index_host_t *h, const char *v,
    size_t n);
static int kvs_index_reject(kvs_index_reject_t *why, kvs_index_reject_t r,
    kvs_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));


const char *
kvs_index_reject_name(kvs_index_reject_t why)
{
    static const char  *names[] = {
        "ok", "missing", "error", "type", "too_long", "foreign_version",
        "malformed", "partial", "host_mismatch", "stale", "old_epoch",
        "other_model", "stale_incarnation"
    };

    if ((unsigned) why >= sizeof(names) / sizeof(names[0])) {
        return "unknown";
    }

    return names[why];
}


int
kvs_index_host_id_check(const char *id, size_t len, kvs_err_t *err)
{
    size_t  i;
    char    ch;

    if (len == 0 || len > KVS_INDEX_HOST_ID_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: a host id of "
                           "%zu bytes, not 1..%d", len,
                           KVS_INDEX_HOST_ID_MAX);
    }

    for (i = 0; i < len; i++) {
        ch = id[i];

        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
            || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_'
            || ch == '-')
        {
            continue;
        }

        return kvs_err_set(err, KVS_EINVAL, "prefix index: a host id with "
                           "a character other than [A-Za-z0-9._-] at %zu",
                           i);
    }

    return KVS_OK;
}


int
kvs_index_host_format(const kvs_index_host_t *h, char *out, size_t *len,
    kvs_err_t *err)
{
    int  n, rc;

    rc = kvs_index_host_id_check(h->id, strnlen(h->id, sizeof(h->id)), err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (!kvs_index_printable(h->model, strnlen(h->model, sizeof(h->model)),
                             KVS_INDEX_MODEL_MAX)
        || !kvs_index_printable(h->url, strnlen(h->url, sizeof(h->url)),
                                KVS_INDEX_URL_MAX))
    {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: host \"%s\": "
                           "its model name and advertise URL must be 1..%d "
                           "and 1..%d printable characters without spaces",
                           h->id, KVS_INDEX_MODEL_MAX, KVS_INDEX_URL_MAX);
    }

    if (h->incarnation == 0
        || h->block_tokens == 0
        || h->block_tokens > KVS_INDEX_BLOCK_TOKENS_MAX)
    {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: host \"%s\": "
                           "incarnation 0 or %u tokens per block", h->id,
                           h->block_tokens);
    }

    if (h->tier_weight > KVS_INDEX_TIER_WEIGHT_ONE
        || h->host_weight > KVS_INDEX_TIER_WEIGHT_ONE)
    {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: host \"%s\": "
                           "tier weight %u or host tier weight %u over %d",
                           h->id, h->tier_weight, h->host_weight,
                           KVS_INDEX_TIER_WEIGHT_ONE);
    }

    n = snprintf(out, KVS_INDEX_HOST_VALUE_MAX + 1,
                 KVS_INDEX_VALUE_TAG " id=%s inc=%016" PRIx64
                 " epoch=%016" PRIx64 " bt=%u run=%u wait=%u free=%u"
                 " ts=%" PRIu64 " model=%s url=%s",
                 h->id, h->incarnation, h->epoch, h->block_tokens,
                 h->running, h->waiting, h->free_blocks, h->ts_ms, h->model,
                 h->url);

    /* the bounds above keep it near 600 bytes, and the long pool's
     * fields add at most 44: cannot be cut */
    if (h->long_min != 0) {
        n += snprintf(out + n, KVS_INDEX_HOST_VALUE_MAX + 1 - (size_t) n,
                      " lmin=%u lroom=%u lslots=%u", h->long_min,
                      h->long_room, h->long_slots);
    }

    if (h->tier_weight != 0) {
        n += snprintf(out + n, KVS_INDEX_HOST_VALUE_MAX + 1 - (size_t) n,
                      " tw=%u", h->tier_weight);
    }

    if (h->host_weight != 0) {
        n += snprintf(out + n, KVS_INDEX_HOST_VALUE_MAX + 1 - (size_t) n,
                      " hw=%u", h->host_weight);
    }

    /* " lora=0", or 128 hex digits: 134 bytes at most; the longest
     * record of all is 792 bytes (test_index_lora) */
    if (h->has_loras) {
        n += kvs_index_lora_set_format(&h->loras, out + n,
                                       KVS_INDEX_HOST_VALUE_MAX + 1
                                       - (size_t) n);
    }

    *len = (size_t) n;

    return KVS_OK;
}


int
kvs_index_host_parse(const kvs_index_reply_t *r, const char *id,
    size_t id_len, kvs_index_host_t *h, kvs_index_reject_t *why,
    kvs_err_t *err)
{
    int          f;
    size_t       n, k, tag;
    uint32_t     seen;
    const char  *p, *end, *tok, *eq;

    *why = KVS_INDEX_OK;

    if (r == NULL || r->type == KVS_INDEX_REPLY_NIL) {
        return kvs_index_reject(why, KVS_INDEX_REJECT_MISSING, err,
                                KVS_ENOTFOUND, "no record");
    }

    if (r->type == KVS_INDEX_REPLY_ERROR) {
        n = r->str != NULL && r->len < 200 ? r->len : 0;
        return kvs_index_reject(why, KVS_INDEX_REJECT_ERROR, err, KVS_EIO,
                                "Redis error \"%.*s\"", (int) n,
                                n > 0 ? r->str : "");
    }

    if (r->type != KVS_INDEX_REPLY_STRING) {
        return kvs_index_reject(why, KVS_INDEX_REJECT_TYPE, err, KVS_ETYPE,
                                "a reply of type %d, not a string",
                                (int) r->type);
    }

    if (r->len > KVS_INDEX_HOST_VALUE_MAX) {
        return kvs_index_reject(why, KVS_INDEX_REJECT_TOO_LONG, err,
                                KVS_EFORMAT, "a record of %zu bytes, more "
                                "than %d", r->len,
                                KVS_INDEX_HOST_VALUE_MAX);
    }

    if (r->str == NULL) {
        return kvs_index_reject(why, KVS_INDEX_REJECT_MALFORMED, err,
                                KVS_EFORMAT, "an empty record");
    }

    p = r->str;
    end = p + r->len;

    /* the version tag: "kvs<digits>" then a space */
    for (tag = 0; p + tag < end && p[tag] != ' '; tag++) {
        /* void */
    }

    if (tag != sizeof(KVS_INDEX_VALUE_TAG) - 1
        || memcmp(p, KVS_INDEX_VALUE_TAG, tag) != 0)
    {
        for (k = 3; k < tag && p[k] >= '0' && p[k] <= '9'; k++) {
            /* void */
        }

        if (tag > 3 && k == tag && memcmp(p, "kvs", 3) == 0) {
            return kvs_index_reject(why, KVS_INDEX_REJECT_FOREIGN, err,
                                    KVS_EUNSUPPORTED, "schema version "
                                    "\"%.*s\", not \"" KVS_INDEX_VALUE_TAG
                                    "\"", (int) tag, p);
        }

        return kvs_index_reject(why, KVS_INDEX_REJECT_MALFORMED, err,
                                KVS_EFORMAT, "no \"" KVS_INDEX_VALUE_TAG
                                " \" tag");
    }

    memset(h, 0, sizeof(*h));
    seen = 0;
    p += tag;

    while (p < end) {
        if (*p != ' ' || p + 1 == end || p[1] == ' ') {
            return kvs_index_reject(why, KVS_INDEX_REJECT_MALFORMED, err,
                                    KVS_EFORMAT, "stray space at byte %zu",
                                    (size_t) (p - r->str));
        }

        tok = ++p;
        while (p < end && *p != ' ') {
            p++;
        }

        eq = memchr(tok, '=', (size_t) (p - tok));
        if (eq == NULL) {
            return kvs_index_reject(why, KVS_INDEX_REJECT_MALFORMED, err,
                                    KVS_EFORMAT, "a field without '=' at "
                                    "byte %zu", (size_t) (tok - r->str));
        }

        k = (size_t) (eq - tok);

        for (f = 0; f < KVS_F_N; f++) {
            if (strlen(kvs_index_fields[f]) == k
                && memcmp(tok, kvs_index_fields[f], k) == 0)
            {
                break;
            }
        }

        if (f == KVS_F_N) {
            continue;                 /* a later v1 field: not ours */
        }

        if (seen & (1u << f)) {
            return kvs_index_reject(why, KVS_INDEX_REJECT_MALFORMED, err,
                                    KVS_EFORMAT, "field \"%s\" twice",
                                    kvs_index_fields[f]);
        }

        seen |= 1u << f;

        if (kvs_index_host_field(h, f, eq + 1, (size_t) (p - eq - 1))
            != KVS_OK)
        {
            return kvs_index_reject(why, KVS_INDEX_REJECT_MALFORMED, err,
                                    KVS_EFORMAT, "bad value of field "
                                    "\"%s\"", kvs_index_fields[f]);
        }
    }

    if ((seen & KVS_F_LONG_ALL) != 0
        && ((seen & KVS_F_LONG_ALL) != KVS_F_LONG_ALL || h->long_min == 0))
    {
        return kvs_index_reject(why, KVS_INDEX_REJECT_MALFORMED, err,
                                KVS_EFORMAT, "the long pool's lmin, lroom "
                                "and lslots go together, lmin above 0");
    }

    for (f = 0; f < KVS_F_REQ; f++) {
        if (!(seen & (1u << f))) {
            return kvs_index_reject(why, KVS_INDEX_REJECT_PARTIAL, err,
                                    KVS_EFORMAT, "no field \"%s\"",
                                    kvs_index_fields[f]);
        }
    }

    if (strlen(h->id) != id_len || memcmp(h->id, id, id_len) != 0) {
        n = id_len < KVS_INDEX_HOST_ID_MAX ? id_len : KVS_INDEX_HOST_ID_MAX;
        return kvs_index_reject(why, KVS_INDEX_REJECT_HOST_MISMATCH, err,
                                KVS_EFORMAT, "record of \"%s\" under the "
                                "key of \"%.*s\"", h->id, (int) n, id);
    }

    return KVS_OK;
}


int
kvs_index_host_check(const kvs_index_host_t *h,
    const kvs_index_host_want_t *want, kvs_index_reject_t *why,
    kvs_err_t *err)
{
    *why = KVS_INDEX_OK;

    if (want->max_age_ms > 0 && h->ts_ms < want->now_ms
        && want->now_ms - h->ts_ms > want->max_age_ms)
    {
        return kvs_index_reject(why, KVS_INDEX_REJECT_STALE, err,
                                KVS_EINVAL, "host \"%s\": heartbeat %" PRIu64
                                " ms old", h->id, want->now_ms - h->ts_ms);
    }

    if (want->check_epoch && h->epoch != want->epoch) {
        return kvs_index_reject(why, KVS_INDEX_REJECT_OLD_EPOCH, err,
                                KVS_EINVAL, "host \"%s\": weight epoch %016"
                                PRIx64 ", not %016" PRIx64, h->id, h->epoch,
                                want->epoch);
    }

    if (want->model != NULL
        && (strlen(h->model) != want->model_len
            || memcmp(h->model, want->model, want->model_len) != 0))
    {
        return kvs_index_reject(why, KVS_INDEX_REJECT_OTHER_MODEL, err,
                                KVS_EINVAL, "host \"%s\" serves \"%s\"",
                                h->id, h->model);
    }

    if (want->known != NULL && want->known->incarnation != h->incarnation
        && h->ts_ms < want->known->ts_ms)
    {
        return kvs_index_reject(why, KVS_INDEX_REJECT_STALE_INCARNATION,
                                err, KVS_EINVAL, "host \"%s\": incarnation "
                                "%016" PRIx64 " is older than %016" PRIx64,
                                h->id, h->incarnation,
                                want->known->incarnation);
    }

    return KVS_OK;
}


int
kvs_index_hosts_parse(const kvs_index_reply_t *r,
    char (*ids)[KVS_INDEX_HOST_ID_MAX + 1], size_t cap, size_t *n,
    size_t *skipped, kvs_err_t *err)
{
    size_t                    i;
    const kvs_index_reply_t  *e;

    *n = 0;
    *skipped = 0;

    if (r == NULL || r->type != KVS_INDEX_REPLY_ARRAY
        || (r->elements > 0 && r->element == NULL))
    {
        return kvs_err_set(err, KVS_ETYPE, "prefix index: the host list "
                           "is not an array");
    }

    if (r->elements > KVS_INDEX_HOSTS_MAX) {
        return kvs_err_set(err, KVS_EFORMAT, "prefix index: a host list of "
                           "%zu members, more than %d", r->elements,
                           KVS_INDEX_HOSTS_MAX);
    }

    for (i = 0; i < r->elements; i++) {
        e = &r->element[i];

        if (e->type != KVS_INDEX_REPLY_STRING || e->str == NULL
            || kvs_index_host_id_check(e->str, e->len, NULL) != KVS_OK
            || *n == cap)
        {
            (*skipped)++;
            continue;
        }

        memcpy(ids[*n], e->str, e->len);
        ids[*n][e->len] = '\0';
        (*n)++;
    }

    return KVS_OK;
}


int
kvs_index_blk_entry(const kvs_index_reply_t *field,
    const kvs_index_reply_t *value, const char **id, size_t *id_len,
    uint64_t *incarnation)
{
    kvs_index_tier_t  tier;

    /* a reader of the pool alone, as before lower tiers: "d:<id>" is
     * not a host id */
    if (kvs_index_blk_entry_tier(field, value, id, id_len, incarnation,
                                 &tier) != KVS_OK
        || tier != KVS_INDEX_TIER_POOL)
    {
        return KVS_EFORMAT;
    }

    return KVS_OK;
}


int
kvs_index_blk_entry_tier(const kvs_index_reply_t *field,
    const kvs_index_reply_t *value, const char **id, size_t *id_len,
    uint64_t *incarnation, kvs_index_tier_t *tier)
{
    size_t       pre, n;
    const char  *f;

    if (field->type != KVS_INDEX_REPLY_STRING || field->str == NULL
        || value->type != KVS_INDEX_REPLY_STRING || value->str == NULL)
    {
        return KVS_EFORMAT;
    }

    /* "d:" and "h:" are as long */
    pre = sizeof(KVS_INDEX_FIELD_DISK) - 1;
    f = field->str;
    n = field->len;
    *tier = KVS_INDEX_TIER_POOL;

    if (n > pre && memcmp(f, KVS_INDEX_FIELD_DISK, pre) == 0) {
        *tier = KVS_INDEX_TIER_DISK;

    } else if (n > pre && memcmp(f, KVS_INDEX_FIELD_HOST, pre) == 0) {
        *tier = KVS_INDEX_TIER_HOST;
    }

    if (*tier != KVS_INDEX_TIER_POOL) {
        f += pre;
        n -= pre;
    }

    if (kvs_index_host_id_check(f, n, NULL) != KVS_OK
        || kvs_index_hex64(value->str, value->len, incarnation) != KVS_OK
        || *incarnation == 0)
    {
        return KVS_EFORMAT;
    }

    *id = f;
    *id_len = n;

    return KVS_OK;
}


int
kvs_index_reply_written(const kvs_index_reply_t *r, kvs_err_t *err)
{
    size_t  n;

    if (r == NULL) {
        return kvs_err_set(err, KVS_EIO, "prefix index: no reply");
    }

    switch (r->type) {

    case KVS_INDEX_REPLY_STATUS:
    case KVS_INDEX_REPLY_INTEGER:
        return KVS_OK;

    case KVS_INDEX_REPLY_ERROR:
        n = r->str != NULL && r->len < 200 ? r->len : 0;
        return kvs_err_set(err, KVS_EIO, "prefix index: Redis error "
                           "\"%.*s\"", (int) n, n > 0 ? r->str : "");

    default:
        return kvs_err_set(err, KVS_ETYPE, "prefix index: a write answered "
                           "by a reply of type %d", (int) r->type);
    }
}


/* 1..max bytes of 0x21..0x7e: safe between spaces in a host record. */
static int
kvs_index_printable(const char *s, size_t n, size_t max)
{
    size_t  i;

    if (n == 0 || n > max) {
        return 0;
    }

    for (i = 0; i < n; i++) {
        if ((unsigned char) s[i] < 0x21 || (unsigned char) s[i] > 0x7e) {
            return 0;
        }
    }

    return 1;
}


/* Exactly 16 lowercase hex digits, as written. */
static int
kvs_index_hex64(const char *s, size_t n, uint64_t *v)
{
    size_t    i;
    uint64_t  x;

    if (n != KVS_INDEX_INC_HEX_LEN) {
        return KVS_EFORMAT;
    }

    x = 0;

    for (i = 0; i < n; i++) {
        if (s[i] >= '0' && s[i] <= '9') {
            x = x << 4 | (uint64_t) (s[i] - '0');

        } else if (s[i] >= 'a' && s[i] <= 'f') {
            x = x << 4 | (uint64_t) (s[i] - 'a' + 10);

        } else {
            return KVS_EFORMAT;
        }
    }

    *v = x;

    return KVS_OK;
}


/* 1..20 decimal digits, no sign or leading zero, at most max. */
static int
kvs_index_dec64(const char *s, size_t n, uint64_t max, uint64_t *v)
{
    size_t    i;
    uint64_t  x, d;

    if (n == 0 || n > 20 || (n > 1 && s[0] == '0')) {
        return KVS_EFORMAT;
    }

    x = 0;

    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return KVS_EFORMAT;
        }

        d = (uint64_t) (s[i] - '0');

        if (x > (max - d) / 10) {
            return KVS_EFORMAT;
        }

        x = x * 10 + d;
    }

    *v = x;

    return KVS_OK;
}


static int
kvs_index_host_field(kvs_index_host_t *h, int f, const char *v, size_t n)
{
    uint64_t  x;

    switch (f) {

    case KVS_F_ID:
        if (kvs_index_host_id_check(v, n, NULL) != KVS_OK) {
            return KVS_EFORMAT;
        }
        memcpy(h->id, v, n);
        h->id[n] = '\0';
        return KVS_OK;

    case KVS_F_MODEL:
    case KVS_F_URL:
        if (!kvs_index_printable(v, n, f == KVS_F_MODEL
                                       ? KVS_INDEX_MODEL_MAX
                                       : KVS_INDEX_URL_MAX))
        {
            return KVS_EFORMAT;
        }
        memcpy(f == KVS_F_MODEL ? h->model : h->url, v, n);
        (f == KVS_F_MODEL ? h->model : h->url)[n] = '\0';
        return KVS_OK;

    case KVS_F_INC:
        if (kvs_index_hex64(v, n, &h->incarnation) != KVS_OK
            || h->incarnation == 0)
        {
            return KVS_EFORMAT;
        }
        return KVS_OK;

    case KVS_F_EPOCH:
        return kvs_index_hex64(v, n, &h->epoch);

    case KVS_F_TS:
        return kvs_index_dec64(v, n, UINT64_MAX, &h->ts_ms);

    case KVS_F_LORA:
        return kvs_index_lora_set_parse(h, v, n);

    default:
        break;
    }

    if (kvs_index_dec64(v, n, UINT32_MAX, &x) != KVS_OK) {
        return KVS_EFORMAT;
    }

    switch (f) {

    case KVS_F_BT:
        if (x == 0 || x > KVS_INDEX_BLOCK_TOKENS_MAX) {
            return KVS_EFORMAT;
        }
        h->block_tokens = (uint32_t) x;
        break;

    case KVS_F_RUN:
        h->running = (uint32_t) x;
        break;

    case KVS_F_WAIT:
        h->waiting = (uint32_t) x;
        break;

    case KVS_F_LMIN:
        h->long_min = (uint32_t) x;
        break;

    case KVS_F_LROOM:
        h->long_room = (uint32_t) x;
        break;

    case KVS_F_LSLOTS:
        h->long_slots = (uint32_t) x;
        break;

    case KVS_F_TW:
        if (x == 0 || x > KVS_INDEX_TIER_WEIGHT_ONE) {
            return KVS_EFORMAT;
        }
        h->tier_weight = (uint32_t) x;
        break;

    case KVS_F_HW:
        if (x == 0 || x > KVS_INDEX_TIER_WEIGHT_ONE) {
            return KVS_EFORMAT;
        }
        h->host_weight = (uint32_t) x;
        break;

    default:
        h->free_blocks = (uint32_t) x;
        break;
    }

    return KVS_OK;
}


int
kvs_index_host_serves(const kvs_index_host_t *h, uint64_t file)
{
    return !h->has_loras || kvs_index_lora_set_has(&h->loras, file);
}


/* " lora=0" for an empty set, else " lora=" and its words' 128 hex
 * digits, the first word first; the bytes written. */
static int
kvs_index_lora_set_format(const kvs_index_lora_set_t *set, char *out,
    size_t cap)
{
    int       n;
    size_t    i;
    uint64_t  any;

    any = 0;
    for (i = 0; i < KVS_INDEX_LORA_SET_WORDS; i++) {
        any |= set->w[i];
    }

    if (any == 0) {
        return snprintf(out, cap, " lora=0");
    }

    n = snprintf(out, cap, " lora=");

    for (i = 0; i < KVS_INDEX_LORA_SET_WORDS; i++) {
        n += snprintf(out + n, cap - (size_t) n, "%016" PRIx64, set->w[i]);
    }

    return n;
}


static int
kvs_index_lora_set_parse(kvs_index_host_t *h, const char *v, size_t n)
{
    size_t  i;

    memset(&h->loras, 0, sizeof(h->loras));

    if (n == 1 && v[0] == '0') {
        h->has_loras = 1;
        return KVS_OK;
    }

    if (n != KVS_INDEX_LORA_SET_HEX) {
        return KVS_EFORMAT;
    }

    for (i = 0; i < KVS_INDEX_LORA_SET_WORDS; i++) {
        if (kvs_index_hex64(v + 16 * i, 16, &h->loras.w[i]) != KVS_OK) {
            return KVS_EFORMAT;
        }
    }

    h->has_loras = 1;

    return KVS_OK;
}


static int
kvs_index_reject(kvs_index_reject_t *why, kvs_index_reject_t r,
    kvs_err_t *err, int code, const char *fmt, ...)
{
    va_list  ap;
    char     msg[KVS_ERR_MSG_LEN];

    *why = r;

    if (err == NULL) {
        return code;
    }

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    return kvs_err_set(err, code, "prefix index: %s: %s",
                       kvs_index_reject_name(r), msg);
}
