/*
 * kvs_utf8: strict UTF-8 validation (see kvs_utf8.h).
 */

#include "kvs_utf8.h"


size_t
kvs_utf8_next(const uint8_t *s, size_t len, uint32_t *cp)
{
    size_t    n, i;
    uint32_t  c, min;

    if (len == 0) {
        return 0;
    }

    c = s[0];

    if (c < 0x80) {
        *cp = c;
        return 1;
    }

    if ((c & 0xe0) == 0xc0) {
        n = 2; c &= 0x1f; min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3; c &= 0x0f; min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        n = 4; c &= 0x07; min = 0x10000;
    } else {
        return 0;
    }

    if (n > len) {
        return 0;
    }

    for (i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0;
        }
        c = (c << 6) | (s[i] & 0x3f);
    }

    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
        return 0;
    }

    *cp = c;

    return n;
}


int
kvs_utf8_valid(const uint8_t *s, size_t len)
{
    size_t    i, n;
    uint32_t  cp;

    for (i = 0; i < len; i += n) {
        n = kvs_utf8_next(s + i, len - i, &cp);
        if (n == 0) {
            return 0;
        }
    }

    return 1;
}
