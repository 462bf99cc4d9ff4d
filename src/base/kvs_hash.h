/*
 * kvs_hash: small non-cryptographic hashes and a seeded generator, for
 * hash tables, checksums in tool output and reproducible random data.
 * (Cross-host block names use xxh3-128, not these.)
 */

#ifndef KVS_HASH_H
#define KVS_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KVS_FNV1A64_INIT  1469598103934665603ULL

/* FNV-1a over n bytes, continuing from h (KVS_FNV1A64_INIT to start). */
uint64_t kvs_fnv1a64(uint64_t h, const void *p, size_t n);

/* splitmix64: advances *state and returns the next 64 random bits. */
uint64_t kvs_splitmix64(uint64_t *state);

#endif /* KVS_HASH_H */
