/*
 * kvs_le: little-endian integers in byte buffers, the byte order of
 * everything we serialize ourselves (the engine wire, the prefix index's
 * block names), whatever the host's.  put returns the byte after the
 * value; the caller has checked the room.
 */

#ifndef KVS_LE_H
#define KVS_LE_H

#include <stdint.h>


static inline uint8_t *
kvs_le_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);

    return p + 2;
}


static inline uint8_t *
kvs_le_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
    p[2] = (uint8_t) (v >> 16);
    p[3] = (uint8_t) (v >> 24);

    return p + 4;
}


static inline uint8_t *
kvs_le_put64(uint8_t *p, uint64_t v)
{
    p = kvs_le_put32(p, (uint32_t) v);

    return kvs_le_put32(p, (uint32_t) (v >> 32));
}


static inline uint16_t
kvs_le_get16(const uint8_t *p)
{
    return (uint16_t) (p[0] | (p[1] << 8));
}


static inline uint32_t
kvs_le_get32(const uint8_t *p)
{
    return (uint32_t) p[0] | ((uint32_t) p[1] << 8)
           | ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}


static inline uint64_t
kvs_le_get64(const uint8_t *p)
{
    return (uint64_t) kvs_le_get32(p) | ((uint64_t) kvs_le_get32(p + 4) << 32);
}

#endif /* KVS_LE_H */
