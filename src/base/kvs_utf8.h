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

#endif /* KVS_UTF8_H */
