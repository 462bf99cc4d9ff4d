/*
 * kvs_api_req_cache: Anthropic-style client cache breakpoints in a chat
 * request, `"cache_control": {"type": "ephemeral", "ttl": "5m" | "1h"}`
 * on a content part or on a message object (the breakpoint is then at
 * the end of that message's content).
 *
 * Invariants: req->n_breaks never exceeds KVS_API_MAX_BREAKS (a 5th
 * breakpoint is a 400 naming it, as Anthropic refuses it); breakpoints
 * are appended in the order the messages are checked, which is message
 * order and, within a message, the message's own one after its parts.
 * A null cache_control is no breakpoint, like any null field.
 */

#include <string.h>

#include "kvs_api_req_impl.h"


int
kvs_api_req_cache_control(kvs_api_req_t *req, const json_t *obj,
    const char *path, uint32_t message, int32_t part, kvs_api_err_t *aerr)
{
    int               rc;
    char              p[KVS_API_PATH_LEN], f[KVS_API_PATH_LEN];
    uint32_t          ttl;
    const json_t     *cc, *v;
    kvs_api_str_t     s;
    kvs_api_break_t  *b;

    cc = kvs_api_opt(obj, "cache_control");
    if (cc == NULL) {
        return KVS_OK;
    }

    kvs_api_path(p, "%s.cache_control", path);

    if (!json_is_object(cc)) {
        return kvs_api_type_err(p, "an object", cc, aerr);
    }

    v = kvs_api_opt(cc, "type");
    kvs_api_path(f, "%s.type", p);

    if (v == NULL) {
        return kvs_api_missing(f, aerr);
    }

    rc = kvs_api_str(v, f, &s, aerr);
    if (rc != KVS_OK) {
        return rc;
    }

    if (strcmp(s.ptr, "ephemeral") != 0) {
        kvs_api_err_set(aerr, 400, f, "invalid_value", "Invalid value: "
                        "'%.64s'. Supported values are: 'ephemeral'.",
                        s.ptr);
        return KVS_EINVAL;
    }

    ttl = KVS_API_TTL_5M;
    v = kvs_api_opt(cc, "ttl");
    kvs_api_path(f, "%s.ttl", p);

    if (v != NULL) {
        rc = kvs_api_str(v, f, &s, aerr);
        if (rc != KVS_OK) {
            return rc;
        }

        if (strcmp(s.ptr, "1h") == 0) {
            ttl = KVS_API_TTL_1H;

        } else if (strcmp(s.ptr, "5m") != 0) {
            kvs_api_err_set(aerr, 400, f, "invalid_value", "Invalid value: "
                            "'%.64s'. Supported values are: '5m' and '1h'.",
                            s.ptr);
            return KVS_EINVAL;
        }
    }

    if (req->n_breaks == KVS_API_MAX_BREAKS) {
        kvs_api_err_set(aerr, 400, p, "too_many_cache_breakpoints",
                        "A maximum of %d blocks with cache_control may be "
                        "provided. Found %d.", KVS_API_MAX_BREAKS,
                        KVS_API_MAX_BREAKS + 1);
        return KVS_EINVAL;
    }

    b = &req->breaks[req->n_breaks++];
    b->message = message;
    b->part = part;
    b->ttl_ms = ttl;

    return KVS_OK;
}
