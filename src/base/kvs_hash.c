/*
 * kvs_hash: FNV-1a and splitmix64 (see kvs_hash.h).
 */

#include "kvs_hash.h"


uint64_t
kvs_fnv1a64(uint64_t h, const void *p, size_t n)
{
    size_t          i;
    const uint8_t  *b;

    b = p;
    for (i = 0; i < n; i++) {
        h = (h ^ b[i]) * 1099511628211ULL;
    }

    return h;
}


uint64_t
kvs_splitmix64(uint64_t *state)
{
    uint64_t  z;

    z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;

    return z ^ (z >> 31);
}
