/*
 * kvs_bytelevel: GPT-2's byte-to-unicode alphabet (see kvs_bytelevel.h).
 * Closed forms rather than tables: no initialisation, nothing shared.
 */

#include "base/kvs_utf8.h"
#include "kvs_bytelevel.h"


/* The 68 bytes that are not shown as themselves are 0x00..0x20 (33),
 * 0x7F..0xA0 (34) and 0xAD; the n-th of them is U+0100 + n. */

uint32_t
kvs_bytelevel_cp(uint8_t b)
{
    if (b <= 0x20) {
        return 0x100 + b;
    }

    if (b >= 0x7f && b <= 0xa0) {
        return 0x100 + 33 + (b - 0x7f);
    }

    if (b == 0xad) {
        return 0x100 + 67;
    }

    return b;
}


int
kvs_bytelevel_byte(uint32_t cp)
{
    uint32_t  n;

    if (cp < 0x100) {
        return (cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac)
               || (cp >= 0xae && cp <= 0xff) ? (int) cp : -1;
    }

    n = cp - 0x100;

    if (n < 33) {
        return (int) n;
    }

    if (n < 67) {
        return (int) (0x7f + n - 33);
    }

    return n == 67 ? 0xad : -1;
}


size_t
kvs_bytelevel_encode(const uint8_t *s, size_t n, char *dst)
{
    size_t    i, k;
    uint32_t  cp;

    for (i = 0, k = 0; i < n; i++) {
        cp = kvs_bytelevel_cp(s[i]);

        if (cp < 0x80) {
            dst[k++] = (char) cp;
        } else {
            dst[k++] = (char) (0xc0 | (cp >> 6));
            dst[k++] = (char) (0x80 | (cp & 0x3f));
        }
    }

    return k;
}


size_t
kvs_bytelevel_decode(const char *s, size_t len, uint8_t *dst, size_t *bad)
{
    int       b;
    size_t    i, n, k;
    uint32_t  cp;

    for (i = 0, k = 0; i < len; i += n) {
        n = kvs_utf8_next((const uint8_t *) s + i, len - i, &cp);
        b = n == 0 ? -1 : kvs_bytelevel_byte(cp);

        if (b < 0) {
            if (bad != NULL) {
                *bad = i;
            }
            return (size_t) -1;
        }

        dst[k++] = (uint8_t) b;
    }

    return k;
}
