/*
 * kvs_bytelevel: GPT-2's byte-to-unicode alphabet, in which byte-level
 * BPE vocabularies (GPT-2, Llama 3, Qwen2, ...) spell their tokens so
 * that every byte is a printable character.
 *
 * Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for the code point of
 * the same number; the other 68 bytes, in increasing order, for U+0100,
 * U+0101, ... U+0143.  So every character is one or two UTF-8 bytes.
 */

#ifndef KVS_BYTELEVEL_H
#define KVS_BYTELEVEL_H

#include <stddef.h>
#include <stdint.h>

/* The code point byte b is shown as. */
uint32_t kvs_bytelevel_cp(uint8_t b);

/* The byte code point cp stands for, or -1 if cp is not in the alphabet. */
int kvs_bytelevel_byte(uint32_t cp);

/* Spells n raw bytes in the alphabet into dst (room for 2 * n bytes);
 * returns the length written. */
size_t kvs_bytelevel_encode(const uint8_t *s, size_t n, char *dst);

/* The raw bytes an alphabet string stands for into dst (room for len
 * bytes); returns their count, or (size_t) -1 when a character is not in
 * the alphabet, with its offset in *bad if bad is not NULL. */
size_t kvs_bytelevel_decode(const char *s, size_t len, uint8_t *dst,
    size_t *bad);

#endif /* KVS_BYTELEVEL_H */
