/*
 * kvs_utf8: strict UTF-8 decoding (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), shared by everything that must
 * tell valid text from bytes: JSON output, tokenizers, detokenizers.
 */

#ifndef KVS_UTF8_H
#define KVS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/*
 * Length (1..4) of the valid sequence at s[0..len), with its code point in
 * *cp; 0 if the bytes there are not a valid, complete sequence.
 */
size_t kvs_utf8_next(const uint8_t *s, size_t len, uint32_t *cp);

/* 1 if all of s[0..len) is valid UTF-8. */
int kvs_utf8_valid(const uint8_t *s, size_t len);

/* Offset of the first byte that does not start a valid character, or len
 * if all of s is valid. */
size_t kvs_utf8_invalid_at(const uint8_t *s, size_t len);

/* One step of lossy decoding (the Unicode "maximal subpart" rule, as
 * Rust's from_utf8_lossy and Python's errors="replace" apply it):
 *   n > 0   a valid character of n bytes, *cp set;
 *   0       s[0..len) is a valid but unfinished prefix (len < 4): wait
 *           for more bytes;
 *   -k      invalid: the first k bytes (1..3) are one maximal subpart,
 *           to be shown as one U+FFFD. */
int kvs_utf8_step(const uint8_t *s, size_t len, uint32_t *cp);

#endif /* KVS_UTF8_H */
