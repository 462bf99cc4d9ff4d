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


size_t
kvs_utf8_invalid_at(const uint8_t *s, size_t len)
{
    size_t    i, n;
    uint32_t  cp;

    for (i = 0; i < len; i += n) {
        if (s[i] < 0x80) {
            n = 1;
            continue;
        }

        n = kvs_utf8_next(s + i, len - i, &cp);
        if (n == 0) {
            return i;
        }
    }

    return len;
}


int
kvs_utf8_step(const uint8_t *s, size_t len, uint32_t *cp)
{
    int       n, i;
    uint8_t   c, lo, hi;
    uint32_t  v;

    if (len == 0) {
        return 0;
    }

    c = s[0];

    if (c < 0x80) {
        *cp = c;
        return 1;
    }

    /* Well-formed sequences (Unicode Table 3-7): the lead byte fixes the
     * length and the range of the second byte; later bytes are 80..BF. */
    lo = 0x80;
    hi = 0xbf;

    if (c >= 0xc2 && c <= 0xdf) {
        n = 2; v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3; v = c & 0x0f;
        if (c == 0xe0) {
            lo = 0xa0;
        } else if (c == 0xed) {
            hi = 0x9f;
        }
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4; v = c & 0x07;
        if (c == 0xf0) {
            lo = 0x90;
        } else if (c == 0xf4) {
            hi = 0x8f;
        }
    } else {
        return -1;
    }

    for (i = 1; i < n; i++) {
        if ((size_t) i >= len) {
            return 0;
        }

        if (s[i] < lo || s[i] > hi) {
            return -i;
        }

        v = (v << 6) | (s[i] & 0x3f);
        lo = 0x80;
        hi = 0xbf;
    }

    *cp = v;

    return n;
}
