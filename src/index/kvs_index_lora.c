/*
 * kvs_index_lora: an adapter's namespace fields for the prefix index
 * (see kvs_index_lora.h), shared by the engine (its cache namespace and
 * the names it publishes) and the gateway (the names it looks up); the
 * set of a host's adapter files its record carries.
 * Invariants: pure functions of their arguments (the set's only of the
 * set given); no allocation.
 */

#include "kvs_index_lora.h"
#include "base/kvs_hash.h"
#include "base/kvs_le.h"


uint64_t
kvs_index_lora_epoch(uint64_t base, uint64_t file)
{
    uint8_t   b[16];
    uint64_t  h;

    kvs_le_put64(b, base);
    kvs_le_put64(b + 8, file);
    h = kvs_fnv1a64(KVS_FNV1A64_INIT, b, sizeof(b));

    return h != base ? h : h ^ 1;
}


void
kvs_index_lora_field(uint64_t file, char out[KVS_INDEX_LORA_FIELD_LEN + 1])
{
    int                  i;
    static const char    hex[] = "0123456789abcdef";

    for (i = KVS_INDEX_LORA_FIELD_LEN - 1; i >= 0; i--) {
        out[i] = hex[file & 0xf];
        file >>= 4;
    }

    out[KVS_INDEX_LORA_FIELD_LEN] = '\0';
}


/* Bit i (0..2) of file's 3 in a set: 9 bits each from the top of the
 * epoch times an odd constant, so that epochs differing in their low
 * bits only still spread. */
static uint32_t
kvs_index_lora_set_bit(uint64_t file, int i)
{
    uint64_t  x;

    x = file * 0x9e3779b97f4a7c15ull;

    return (uint32_t) (x >> (64 - 9 * (i + 1))) & 511;
}


void
kvs_index_lora_set_add(kvs_index_lora_set_t *s, uint64_t file)
{
    int       i;
    uint32_t  b;

    for (i = 0; i < 3; i++) {
        b = kvs_index_lora_set_bit(file, i);
        s->w[b >> 6] |= 1ull << (b & 63);
    }
}


int
kvs_index_lora_set_has(const kvs_index_lora_set_t *s, uint64_t file)
{
    int       i;
    uint32_t  b;

    for (i = 0; i < 3; i++) {
        b = kvs_index_lora_set_bit(file, i);

        if (!(s->w[b >> 6] & (1ull << (b & 63)))) {
            return 0;
        }
    }

    return 1;
}
