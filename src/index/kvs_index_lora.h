/*
 * kvs_index_lora: the prefix index's namespace of a LoRA adapter's
 * blocks (docs/lora.md, "The KV namespace"; docs/prefix-index.md): the
 * epoch and adapter fields a host names an adapted block under, and a
 * gateway names a BASE:NAME request's prompt under, computed from the
 * base's weight epoch and the adapter file's epoch (xxh3-64 of its
 * bytes) alone, so both agree whatever ids an engine gave its adapters.
 *
 * The set of adapter files a host serves, published in its record so
 * that a gateway sends a BASE:NAME request only to the hosts whose NAME
 * is the gateway's file, is kept here too.
 *
 * Invariants: the epoch is a function of the two epochs only and never
 * the base's own (a block under an adapter is never a block of the
 * base); the adapter field is the file epoch as 16 lowercase hex
 * digits, never empty (empty is the base).
 */

#ifndef KVS_INDEX_LORA_H
#define KVS_INDEX_LORA_H

#include <stdint.h>

#define KVS_INDEX_LORA_FIELD_LEN  16

/* The adapter files a host serves, as its record says them ("lora",
 * docs/prefix-index.md): a Bloom filter of 512 bits, 3 of them set per
 * file epoch.  It never denies a file that was added; it may admit one
 * that was not (about 3% of the time with 64 files, far less with few),
 * which only costs the routing it had before records carried it. */
#define KVS_INDEX_LORA_SET_WORDS  8
#define KVS_INDEX_LORA_SET_HEX    (KVS_INDEX_LORA_SET_WORDS * 16)

typedef struct {
    uint64_t  w[KVS_INDEX_LORA_SET_WORDS];
} kvs_index_lora_set_t;

/* The namespace epoch of an adapter file on a base: FNV-1a 64 of the
 * two epochs as u64le, base first; the base's epoch flipped in its
 * lowest bit when the hash falls on it. */
uint64_t kvs_index_lora_epoch(uint64_t base, uint64_t file);

/* The adapter field: out[0..16) hex digits, out[16] NUL. */
void kvs_index_lora_field(uint64_t file,
    char out[KVS_INDEX_LORA_FIELD_LEN + 1]);

/* Adds the adapter file of epoch `file` to s. */
void kvs_index_lora_set_add(kvs_index_lora_set_t *s, uint64_t file);

/* 1 when s may hold `file` (every file added does), 0 when it does not. */
int kvs_index_lora_set_has(const kvs_index_lora_set_t *s, uint64_t file);

#endif /* KVS_INDEX_LORA_H */
