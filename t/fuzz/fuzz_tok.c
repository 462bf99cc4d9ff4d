/*
 * fuzz_tok: libFuzzer target for encoding and decoding (`make fuzz`).
 * The vocabularies are loaded once, from KVS_FUZZ_VOCABS (paths separated
 * by ':').  The first input byte picks the vocabulary and the flags, the
 * rest is the text.  Any text must be refused as invalid UTF-8 or give
 * ids in range that decode, token by token or all at once, to the same
 * text; without special-token parsing or normalisation that text is the
 * input itself (except that SentencePiece reads U+2581 as a space, a
 * byte the vocabulary has no token for is dropped, and WordPiece
 * normalises).
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_utf8.h"
#include "tokenizer/kvs_tok.h"


#define FUZZ_MAX_VOCABS  8

static kvs_vocab_t    *vocabs[FUZZ_MAX_VOCABS];
static int             n_vocabs;
static kvs_tok_ctx_t   ctx;


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char        *list, *path, *save;
    kvs_err_t    err;
    const char  *env;

    env = getenv("KVS_FUZZ_VOCABS");
    if (env == NULL || (list = strdup(env)) == NULL) {
        fprintf(stderr, "fuzz_tok: set KVS_FUZZ_VOCABS=a.gguf:b.gguf\n");
        exit(2);
    }

    for (path = strtok_r(list, ":", &save);
         path != NULL && n_vocabs < FUZZ_MAX_VOCABS;
         path = strtok_r(NULL, ":", &save))
    {
        if (kvs_vocab_open(&vocabs[n_vocabs], path, &err) != KVS_OK) {
            fprintf(stderr, "fuzz_tok: %s\n", err.msg);
            exit(2);
        }
        n_vocabs++;
    }

    free(list);

    if (n_vocabs == 0) {
        exit(2);
    }

    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int           rc;
    size_t        i, n;
    uint8_t      *text;
    unsigned      flags;
    kvs_ids_t     ids;
    kvs_buf_t     whole, streamed;
    kvs_err_t     err;
    kvs_detok_t   d;
    kvs_vocab_t  *v;

    if (size == 0) {
        return 0;
    }

    v = vocabs[data[0] % n_vocabs];
    flags = (data[0] >> 4) & (KVS_TOK_ADD_BOS | KVS_TOK_SPECIAL);
    n = size - 1;

    /* an exact-size copy, so ASan sees any read past the end */
    text = malloc(n ? n : 1);
    if (text == NULL) {
        return 0;
    }
    memcpy(text, data + 1, n);

    memset(&ids, 0, sizeof(ids));
    memset(&whole, 0, sizeof(whole));
    memset(&streamed, 0, sizeof(streamed));

    rc = kvs_tok_encode(v, &ctx, (const char *) text, n, flags, &ids, &err);

    if (rc != KVS_OK) {
        if (kvs_utf8_valid(text, n) || ids.n != 0) {
            abort();
        }
        goto done;
    }

    for (i = 0; i < ids.n; i++) {
        if (ids.ids[i] < 0 || (uint32_t) ids.ids[i] >= v->n_tokens) {
            abort();
        }
    }

    if (kvs_tok_decode(v, ids.ids, ids.n, 0, &whole, &err) != KVS_OK) {
        abort();
    }

    kvs_detok_init(&d, v, 0);
    for (i = 0; i < ids.n; i++) {
        if (kvs_detok_push(&d, ids.ids[i], &streamed, &err) != KVS_OK) {
            abort();
        }
    }
    (void) kvs_detok_finish(&d, &streamed);

    if (streamed.len != whole.len
        || (whole.len > 0
            && memcmp(streamed.data, whole.data, whole.len) != 0)
        || !kvs_utf8_valid(whole.data, whole.len))
    {
        abort();
    }

    /* bytes without a token are dropped (Falcon lacks some) */
    for (i = 0; i < n && v->byte_token[text[i]] >= 0; i++) {
        /* void */
    }

    /* SentencePiece cannot tell U+2581 from the space it stands for;
     * WordPiece lowercases, strips accents and drops spacing */
    if (!(flags & KVS_TOK_SPECIAL) && !v->nfc && i == n
        && v->kind != KVS_VOCAB_WPM
        && !(v->kind == KVS_VOCAB_SPM && n >= 3
             && memmem(text, n, "\xe2\x96\x81", 3))
        && (whole.len != n || (n > 0 && memcmp(whole.data, text, n) != 0)))
    {
        abort();
    }

done:

    kvs_ids_free(&ids);
    kvs_buf_free(&whole);
    kvs_buf_free(&streamed);
    free(text);

    return 0;
}
