/*
 * kvs_index_lora: an adapter's namespace fields for the prefix index
 * (see kvs_index_lora.h), shared by the engine (its cache namespace and
 * the names it publishes) and the gateway (the names it looks up).
 * Invariants: pure functions of their arguments; no allocation.
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
