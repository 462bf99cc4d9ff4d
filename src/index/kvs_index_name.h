/*
 * kvs_index_name: the cross-host names of cached KV blocks.
 *
 * A block's name is a 128-bit xxh3 hash that every engine host and every
 * gateway computes byte for byte alike, whatever the process, the CPU or
 * the language, so that the Redis index can say "host h holds the block
 * named N".  Names are routing hints only: an engine reuses a block after
 * comparing its tokens, never on a name.
 *
 * The chain (docs/prefix-index.md has a worked example):
 *
 *   root    = XXH3_128(seed, "kvsn" u32le(1)
 *                            u32le(len) model  u64le(epoch)
 *                            u32le(len) adapter  u32le(len) scope)
 *   name[i] = XXH3_128(seed, name[i-1] (root for i = 0)
 *                            u32le(block_tokens)
 *                            u32le(token) x block_tokens)
 *
 * with seed KVS_INDEX_NAME_SEED.  A name is stored and serialized as the
 * 16 bytes of xxhash's canonical form (big-endian: high 64 bits first),
 * which is what XXH128_canonicalFromHash() and Python's
 * xxhash.xxh3_128().digest() give; its hex form is those bytes as 32
 * lowercase hex digits.  Token ids are int32 written as their 32-bit two's
 * complement.  So name[i] names the whole prefix tokens[0, (i+1) * bt)
 * under one namespace: two hosts agree on it iff they agree on every
 * token before it, the model name, the weight epoch, the adapter and the
 * cache scope (and the block size, which every step hashes).
 *
 * Nothing here allocates or fails on valid input; the namespace fields and
 * block sizes are bounded so that a name is computed from one stack
 * buffer.
 */

#ifndef KVS_INDEX_NAME_H
#define KVS_INDEX_NAME_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvs_err.h"

/* "kvsidx01" in ASCII, read as a big-endian integer.  Changing it (or the
 * serialization above) renames every block: bump KVS_INDEX_NAME_VERSION
 * and the key schema's version with it. */
#define KVS_INDEX_NAME_SEED         0x6b76736964783031ULL
#define KVS_INDEX_NAME_VERSION      1

#define KVS_INDEX_NAME_LEN          16      /* bytes of a name */
#define KVS_INDEX_NAME_HEX_LEN      32      /* hex digits of a name */
#define KVS_INDEX_NS_FIELD_MAX      256     /* bytes of model, adapter,
                                               scope each */
#define KVS_INDEX_BLOCK_TOKENS_MAX  1024    /* as KVS_KV_MAX_BLOCK_TOKENS */

typedef struct {
    uint8_t  b[KVS_INDEX_NAME_LEN];         /* canonical, big-endian */
} kvs_index_name_t;

/* What a block's tokens mean: everything that must be equal for its K/V
 * to be reusable besides the tokens themselves. */
typedef struct {
    const char  *model;                     /* [model_len]: the served
                                               model's name */
    size_t       model_len;
    uint64_t     epoch;                     /* the weights' identity */
    const char  *adapter;                   /* [adapter_len]: the LoRA
                                               adapter's name, "" none */
    size_t       adapter_len;
    const char  *scope;                     /* [scope_len]: the engine's
                                               cache scope, "" global */
    size_t       scope_len;
} kvs_index_ns_t;


/* The namespace's root name; KVS_EINVAL for a field over
 * KVS_INDEX_NS_FIELD_MAX bytes. */
int kvs_index_name_root(const kvs_index_ns_t *ns, kvs_index_name_t *root,
    kvs_err_t *err);

/* The name of the block tokens[0, block_tokens) whose parent (the block
 * before it, or the root) is named parent.  block_tokens must be
 * 1..KVS_INDEX_BLOCK_TOKENS_MAX (checked by the callers that take it from
 * outside: kvs_index_name_chain()). */
void kvs_index_name_next(const kvs_index_name_t *parent,
    const int32_t *tokens, uint32_t block_tokens, kvs_index_name_t *out);

/*
 * Names the n_tokens / block_tokens whole blocks of tokens[0, n_tokens)
 * from root: names[i] for block i (the tail that does not fill a block
 * has no name).  *n_names is how many were written.  KVS_EINVAL for a
 * block size out of 1..KVS_INDEX_BLOCK_TOKENS_MAX, KVS_ERANGE when
 * names_cap is too small (nothing written then).
 */
int kvs_index_name_chain(const kvs_index_name_t *root, const int32_t *tokens,
    size_t n_tokens, uint32_t block_tokens, kvs_index_name_t *names,
    size_t names_cap, size_t *n_names, kvs_err_t *err);

/* 32 lowercase hex digits and a NUL into out[KVS_INDEX_NAME_HEX_LEN + 1]. */
void kvs_index_name_hex(const kvs_index_name_t *name, char *out);

/* Parses exactly 32 hex digits (either case); KVS_EFORMAT otherwise. */
int kvs_index_name_from_hex(const char *hex, size_t len,
    kvs_index_name_t *name, kvs_err_t *err);

#endif /* KVS_INDEX_NAME_H */
