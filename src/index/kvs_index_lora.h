/*
 * kvs_index_lora: the prefix index's namespace of a LoRA adapter's
 * blocks (docs/lora.md, "The KV namespace"; docs/prefix-index.md): the
 * epoch and adapter fields a host names an adapted block under, and a
 * gateway names a BASE:NAME request's prompt under, computed from the
 * base's weight epoch and the adapter file's epoch (xxh3-64 of its
 * bytes) alone, so both agree whatever ids an engine gave its adapters.
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

/* The namespace epoch of an adapter file on a base: FNV-1a 64 of the
 * two epochs as u64le, base first; the base's epoch flipped in its
 * lowest bit when the hash falls on it. */
uint64_t kvs_index_lora_epoch(uint64_t base, uint64_t file);

/* The adapter field: out[0..16) hex digits, out[16] NUL. */
void kvs_index_lora_field(uint64_t file,
    char out[KVS_INDEX_LORA_FIELD_LEN + 1]);

#endif /* KVS_INDEX_LORA_H */
