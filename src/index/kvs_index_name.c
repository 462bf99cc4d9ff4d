/*
 * kvs_index_name: block-chain names (see kvs_index_name.h for the exact
 * serialization, which is a wire format: every byte written here is
 * written explicitly, little-endian, so that the host's own byte order
 * and struct layout never leak into a name).
 */

#include <string.h>

#include <xxhash.h>

#include "base/kvs_le.h"
#include "kvs_index_name.h"

/* the root's input: tag, version, three length-prefixed fields, epoch */
#define KVS_INDEX_ROOT_BUF  (4 + 4 + 3 * (4 + KVS_INDEX_NS_FIELD_MAX) + 8)
#define KVS_INDEX_BLOCK_BUF (KVS_INDEX_NAME_LEN + 4                          \
                             + 4 * KVS_INDEX_BLOCK_TOKENS_MAX)


static uint8_t *kvs_index_put_field(uint8_t *p, const char *s, size_t n);
static void kvs_index_name_hash(const uint8_t *p, size_t n,
    kvs_index_name_t *out);


int
kvs_index_name_root(const kvs_index_ns_t *ns, kvs_index_name_t *root,
    kvs_err_t *err)
{
    uint8_t  buf[KVS_INDEX_ROOT_BUF], *p;

    if (ns->model_len > KVS_INDEX_NS_FIELD_MAX
        || ns->adapter_len > KVS_INDEX_NS_FIELD_MAX
        || ns->scope_len > KVS_INDEX_NS_FIELD_MAX)
    {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: a model name, "
                           "adapter or cache scope of %zu, %zu, %zu bytes, "
                           "more than %d", ns->model_len, ns->adapter_len,
                           ns->scope_len, KVS_INDEX_NS_FIELD_MAX);
    }

    p = buf;
    memcpy(p, "kvsn", 4);
    p += 4;
    p = kvs_le_put32(p, KVS_INDEX_NAME_VERSION);
    p = kvs_index_put_field(p, ns->model, ns->model_len);
    p = kvs_le_put64(p, ns->epoch);
    p = kvs_index_put_field(p, ns->adapter, ns->adapter_len);
    p = kvs_index_put_field(p, ns->scope, ns->scope_len);

    kvs_index_name_hash(buf, (size_t) (p - buf), root);

    return KVS_OK;
}


void
kvs_index_name_next(const kvs_index_name_t *parent, const int32_t *tokens,
    uint32_t block_tokens, kvs_index_name_t *out)
{
    uint8_t   buf[KVS_INDEX_BLOCK_BUF], *p;
    uint32_t  i;

    p = buf;
    memcpy(p, parent->b, KVS_INDEX_NAME_LEN);
    p += KVS_INDEX_NAME_LEN;
    p = kvs_le_put32(p, block_tokens);

    for (i = 0; i < block_tokens; i++) {
        p = kvs_le_put32(p, (uint32_t) tokens[i]);
    }

    kvs_index_name_hash(buf, (size_t) (p - buf), out);
}


int
kvs_index_name_chain(const kvs_index_name_t *root, const int32_t *tokens,
    size_t n_tokens, uint32_t block_tokens, kvs_index_name_t *names,
    size_t names_cap, size_t *n_names, kvs_err_t *err)
{
    size_t                   i, n;
    const kvs_index_name_t  *parent;

    *n_names = 0;

    if (block_tokens == 0 || block_tokens > KVS_INDEX_BLOCK_TOKENS_MAX) {
        return kvs_err_set(err, KVS_EINVAL, "prefix index: %u tokens per "
                           "block, not in 1..%d", block_tokens,
                           KVS_INDEX_BLOCK_TOKENS_MAX);
    }

    n = n_tokens / block_tokens;

    if (n > names_cap) {
        return kvs_err_set(err, KVS_ERANGE, "prefix index: %zu blocks to "
                           "name, room for %zu", n, names_cap);
    }

    parent = root;

    for (i = 0; i < n; i++) {
        kvs_index_name_next(parent, tokens + i * block_tokens, block_tokens,
                            &names[i]);
        parent = &names[i];
    }

    *n_names = n;

    return KVS_OK;
}


void
kvs_index_name_hex(const kvs_index_name_t *name, char *out)
{
    size_t  i;

    static const char  hex[] = "0123456789abcdef";

    for (i = 0; i < KVS_INDEX_NAME_LEN; i++) {
        out[2 * i] = hex[name->b[i] >> 4];
        out[2 * i + 1] = hex[name->b[i] & 0x0f];
    }

    out[KVS_INDEX_NAME_HEX_LEN] = '\0';
}


int
kvs_index_name_from_hex(const char *hex, size_t len, kvs_index_name_t *name,
    kvs_err_t *err)
{
    int      d, v;
    size_t   i;
    uint8_t  b[KVS_INDEX_NAME_LEN];

    if (len != KVS_INDEX_NAME_HEX_LEN) {
        return kvs_err_set(err, KVS_EFORMAT, "prefix index: a block name "
                           "of %zu characters, not %d hex digits", len,
                           KVS_INDEX_NAME_HEX_LEN);
    }

    for (i = 0; i < KVS_INDEX_NAME_HEX_LEN; i++) {
        d = (unsigned char) hex[i];

        if (d >= '0' && d <= '9') {
            v = d - '0';

        } else if (d >= 'a' && d <= 'f') {
            v = d - 'a' + 10;

        } else if (d >= 'A' && d <= 'F') {
            v = d - 'A' + 10;

        } else {
            return kvs_err_set(err, KVS_EFORMAT, "prefix index: a block "
                               "name with a non-hex character at %zu", i);
        }

        if (i % 2 == 0) {
            b[i / 2] = (uint8_t) (v << 4);

        } else {
            b[i / 2] |= (uint8_t) v;
        }
    }

    memcpy(name->b, b, KVS_INDEX_NAME_LEN);

    return KVS_OK;
}



static uint8_t *
kvs_index_put_field(uint8_t *p, const char *s, size_t n)
{
    p = kvs_le_put32(p, (uint32_t) n);

    if (n > 0) {
        memcpy(p, s, n);
    }

    return p + n;
}


static void
kvs_index_name_hash(const uint8_t *p, size_t n, kvs_index_name_t *out)
{
    XXH128_hash_t       h;
    XXH128_canonical_t  c;

    h = XXH3_128bits_withSeed(p, n, KVS_INDEX_NAME_SEED);
    XXH128_canonicalFromHash(&c, h);

    memcpy(out->b, c.digest, KVS_INDEX_NAME_LEN);
}
