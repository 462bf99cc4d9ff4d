/*
 * kvs_index_gw: the gateway's host table rule, advertise URL addresses
 * and pseudo host ids (kvs_index_gw.h states the invariants).
 */

#include <string.h>
#include <strings.h>

#include "kvs_index_gw.h"


int
kvs_index_gw_accept(const kvs_index_gw_host_t *known,
    const kvs_index_reply_t *r, const char *id, size_t id_len,
    uint64_t now_ms, uint64_t max_age_ms, kvs_index_gw_host_t *out,
    kvs_index_reject_t *why)
{
    kvs_err_t              err;
    kvs_index_host_t       h;
    kvs_index_host_want_t  want;

    if (kvs_index_host_parse(r, id, id_len, &h, why, &err) != KVS_OK) {
        if (*why == KVS_INDEX_REJECT_MISSING || known == NULL) {
            return 0;
        }

        /* an unreadable record does not say the host went away */
        goto keep_known;
    }

    memset(&want, 0, sizeof(want));
    want.now_ms = now_ms;
    want.max_age_ms = max_age_ms;
    want.known = known != NULL ? &known->rec : NULL;

    if (kvs_index_host_check(&h, &want, why, &err) != KVS_OK) {
        if (*why == KVS_INDEX_REJECT_STALE_INCARNATION && known != NULL) {
            goto keep_known;
        }

        return 0;
    }

    out->rec = h;
    out->sent = 0;

    /* the same heartbeat again: its load still lacks what was sent */
    if (known != NULL && known->rec.incarnation == h.incarnation
        && known->rec.ts_ms == h.ts_ms)
    {
        out->sent = known->sent;
    }

    return 1;

keep_known:

    if (max_age_ms > 0 && known->rec.ts_ms < now_ms
        && now_ms - known->rec.ts_ms > max_age_ms)
    {
        return 0;
    }

    *out = *known;

    return 1;
}


uint32_t
kvs_index_gw_load(const kvs_index_gw_host_t *h)
{
    uint64_t  v;

    v = (uint64_t) h->rec.running + h->rec.waiting + h->sent;

    return v > UINT32_MAX ? UINT32_MAX : (uint32_t) v;
}


void
kvs_index_gw_cand_update(kvs_index_cand_t *c, const kvs_index_gw_host_t *h,
    const char *model, size_t model_len, uint64_t epoch,
    uint32_t block_tokens, uint32_t sent_cap)
{
    uint64_t  load;

    if (h == NULL || strlen(h->rec.model) != model_len
        || memcmp(h->rec.model, model, model_len) != 0)
    {
        c->up = 0;
        c->incarnation = 0;
        return;
    }

    load = (uint64_t) h->rec.running + h->rec.waiting
           + (h->sent < sent_cap ? h->sent : sent_cap);

    c->up = 1;
    c->epoch = h->rec.epoch;
    c->load = load > UINT32_MAX ? UINT32_MAX : (uint32_t) load;
    c->free_blocks = h->rec.free_blocks;
    c->tier_weight = h->rec.tier_weight;
    c->host_weight = h->rec.host_weight;

    /* names depend on the epoch and the block size: under others, none
     * of this prompt's names can be the host's */
    c->incarnation = h->rec.epoch == epoch
                     && h->rec.block_tokens == block_tokens
                     ? h->rec.incarnation : 0;
}


int
kvs_index_gw_url_addr(const char *url, size_t len, char *out, size_t cap,
    size_t *out_len, kvs_err_t *err)
{
    size_t       i, scheme_len, host_len;
    const char  *p, *last, *host, *port, *dflt;

    *out_len = 0;
    last = url + len;

    for (i = 0; i + 2 < len; i++) {
        if (url[i] == ':' && url[i + 1] == '/' && url[i + 2] == '/') {
            break;
        }
    }

    if (i == 0 || i + 2 >= len) {
        return kvs_err_set(err, KVS_EINVAL, "advertise URL \"%.*s\" has "
                           "no scheme://host", (int) (len > 256 ? 256 : len),
                           url);
    }

    scheme_len = i;
    host = url + i + 3;

    /* the authority ends at the path, query or fragment */
    for (p = host; p < last && *p != '/' && *p != '?' && *p != '#'; p++) {
        /* void */
    }

    last = p;

    /* user:pass@ is no part of a peer's name */
    for (p = last; p > host; p--) {
        if (p[-1] == '@') {
            host = p;
            break;
        }
    }

    port = NULL;

    if (host < last && *host == '[') {
        p = memchr(host, ']', last - host);
        if (p == NULL) {
            return kvs_err_set(err, KVS_EINVAL, "advertise URL: bad IPv6 "
                               "address");
        }

        if (p + 1 < last) {
            if (p[1] != ':') {
                return kvs_err_set(err, KVS_EINVAL, "advertise URL: bad "
                                   "port");
            }
            port = p + 2;
        }

        host_len = (size_t) (p + 1 - host);

    } else {
        p = memchr(host, ':', last - host);
        if (p != NULL) {
            port = p + 1;
            host_len = (size_t) (p - host);

        } else {
            host_len = (size_t) (last - host);
        }
    }

    if (host_len == 0 || (port != NULL && port == last)) {
        return kvs_err_set(err, KVS_EINVAL, "advertise URL has no host or "
                           "port");
    }

    for (p = port; p != NULL && p < last; p++) {
        if (*p < '0' || *p > '9') {
            return kvs_err_set(err, KVS_EINVAL, "advertise URL: bad port");
        }
    }

    dflt = NULL;

    if (port == NULL) {
        if (scheme_len == 4 && strncasecmp(url, "http", 4) == 0) {
            dflt = "80";

        } else if (scheme_len == 5 && strncasecmp(url, "https", 5) == 0) {
            dflt = "443";

        } else {
            return kvs_err_set(err, KVS_EINVAL, "advertise URL: no port "
                               "and an unknown scheme");
        }
    }

    i = host_len + 1 + (port != NULL ? (size_t) (last - port)
                                     : strlen(dflt));
    if (i + 1 > cap) {
        return kvs_err_set(err, KVS_ERANGE, "advertise URL: address over "
                           "%zu bytes", cap);
    }

    memcpy(out, host, host_len);
    out[host_len] = ':';

    if (port != NULL) {
        memcpy(out + host_len + 1, port, (size_t) (last - port));

    } else {
        memcpy(out + host_len + 1, dflt, strlen(dflt));
    }

    out[i] = '\0';
    *out_len = i;

    return KVS_OK;
}


size_t
kvs_index_gw_pseudo_id(const char *addr, size_t len, char *out)
{
    char    c;
    size_t  i;

    if (len > KVS_INDEX_HOST_ID_MAX) {
        addr += len - KVS_INDEX_HOST_ID_MAX;
        len = KVS_INDEX_HOST_ID_MAX;
    }

    for (i = 0; i < len; i++) {
        c = addr[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
            || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')
        {
            out[i] = c;

        } else {
            out[i] = '_';
        }
    }

    out[len] = '\0';

    return len;
}
