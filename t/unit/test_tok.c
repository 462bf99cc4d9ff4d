/*
 * Tokenizer front end: special-token partitioning, decoding flags, the
 * streaming detokenizer, lossy UTF-8, rejection of invalid input, random
 * round trips, and vocabulary files that must be refused at load.
 * The per-algorithm exactness tests are test_tok_spm.c, test_tok_bpe.c
 * and test_vocab_convert.c.
 */

#include "kvs_test_tok.h"

#include "base/kvs_hash.h"
#include "base/kvs_utf8.h"
#include "model/kvs_gguf.h"
#include "tokenizer/kvs_bytelevel.h"


#define SPM_VOCAB  "vocab/ggml-vocab-llama-spm.gguf"
#define GPT2_VOCAB "vocab/ggml-vocab-gpt-2.gguf"


/* --- special tokens ----------------------------------------------------- */

static void
test_special_parse_bpe(void **state)
{
    size_t        i;
    kvs_ids_t     ids, plain;
    kvs_buf_t     out;
    kvs_err_t     err;
    kvs_vocab_t  *v;

    v = kvs_test_vocab(GPT2_VOCAB, 0);
    if (v == NULL) {
        skip();
    }

    memset(&ids, 0, sizeof(ids));
    memset(&plain, 0, sizeof(plain));
    memset(&out, 0, sizeof(out));

    /* <|endoftext|> is GPT-2's control token 50256 */
    assert_int_equal(v->tokens[50256].type, KVS_TOKT_CONTROL);

    kvs_test_encode(v, "a<|endoftext|>b", 15, KVS_TOK_SPECIAL, &ids);
    assert_int_equal(ids.n, 3);
    assert_int_equal(ids.ids[1], 50256);

    /* without the flag the same text is ordinary text ... */
    kvs_test_encode(v, "a<|endoftext|>b", 15, 0, &plain);
    assert_true(plain.n > 3);
    for (i = 0; i < plain.n; i++) {
        assert_int_not_equal(plain.ids[i], 50256);
    }

    /* ... and decodes back to itself */
    assert_int_equal(kvs_tok_decode(v, plain.ids, plain.n, 0, &out, &err),
                     KVS_OK);
    assert_int_equal(out.len, 15);
    assert_memory_equal(out.data, "a<|endoftext|>b", 15);

    /* a control token decodes to nothing unless asked */
    out.len = 0;
    assert_int_equal(kvs_tok_decode(v, ids.ids, ids.n, 0, &out, &err),
                     KVS_OK);
    assert_int_equal(out.len, 2);
    assert_memory_equal(out.data, "ab", 2);

    out.len = 0;
    assert_int_equal(kvs_tok_decode(v, ids.ids, ids.n, KVS_DETOK_SPECIAL,
                                    &out, &err), KVS_OK);
    assert_int_equal(out.len, 15);

    kvs_ids_free(&ids);
    kvs_ids_free(&plain);
    kvs_buf_free(&out);
    kvs_vocab_free(v);
}


/* Chat prompts: control-token text the client wrote (inside a guard
 * span) stays text; the template's (outside) is parsed. */
static void
test_special_guarded(void **state)
{
    static const char  text[] = "a<|endoftext|>b<|endoftext|>";

    size_t         i, n;
    kvs_ids_t      ids, plain;
    kvs_err_t      err;
    kvs_span_t     guard[2];
    kvs_vocab_t   *v;
    kvs_tok_ctx_t  ctx;

    v = kvs_test_vocab(GPT2_VOCAB, 0);
    if (v == NULL) {
        skip();
    }

    memset(&ids, 0, sizeof(ids));
    memset(&plain, 0, sizeof(plain));
    memset(&ctx, 0, sizeof(ctx));
    n = sizeof(text) - 1;

    /* the first marker is the client's: text; the second is parsed */
    guard[0].off = 0;
    guard[0].len = 15;
    assert_int_equal(kvs_tok_encode_guarded(v, &ctx, text, n,
                                            KVS_TOK_SPECIAL, guard, 1, &ids,
                                            &err), KVS_OK);
    assert_int_equal(ids.ids[ids.n - 1], 50256);
    for (i = 0; i + 1 < ids.n; i++) {
        assert_int_not_equal(ids.ids[i], 50256);
    }

    /* the same as encoding the two halves apart */
    assert_int_equal(kvs_tok_encode(v, &ctx, text, 15, 0, &plain, &err),
                     KVS_OK);
    assert_int_equal(plain.n + 1, ids.n);
    assert_memory_equal(plain.ids, ids.ids, plain.n * sizeof(int32_t));

    /* a span that only touches the marker's last byte still guards it */
    guard[0].off = 13;
    guard[0].len = 1;
    guard[1].off = 27;
    guard[1].len = 1;
    ids.n = 0;
    assert_int_equal(kvs_tok_encode_guarded(v, &ctx, text, n,
                                            KVS_TOK_SPECIAL, guard, 2, &ids,
                                            &err), KVS_OK);
    for (i = 0; i < ids.n; i++) {
        assert_int_not_equal(ids.ids[i], 50256);
    }

    /* no spans: what kvs_tok_encode gives */
    ids.n = plain.n = 0;
    assert_int_equal(kvs_tok_encode_guarded(v, &ctx, text, n,
                                            KVS_TOK_SPECIAL, NULL, 0, &ids,
                                            &err), KVS_OK);
    assert_int_equal(kvs_tok_encode(v, &ctx, text, n, KVS_TOK_SPECIAL,
                                    &plain, &err), KVS_OK);
    kvs_test_assert_ids(&ids, &plain);

    /* spans out of order or past the end are refused, nothing added */
    guard[0].off = 20;
    guard[1].off = 5;
    ids.n = 0;
    assert_int_equal(kvs_tok_encode_guarded(v, &ctx, text, n,
                                            KVS_TOK_SPECIAL, guard, 2, &ids,
                                            &err), KVS_EINVAL);
    guard[0].off = 20;
    guard[0].len = 100;
    assert_int_equal(kvs_tok_encode_guarded(v, &ctx, text, n,
                                            KVS_TOK_SPECIAL, guard, 1, &ids,
                                            &err), KVS_EINVAL);
    assert_int_equal(ids.n, 0);

    kvs_tok_ctx_free(&ctx);
    kvs_ids_free(&ids);
    kvs_ids_free(&plain);
    kvs_vocab_free(v);
}


static void
test_special_parse_spm(void **state)
{
    kvs_ids_t     a, b;
    kvs_buf_t     out;
    kvs_err_t     err;
    kvs_vocab_t  *v;

    v = kvs_test_vocab(SPM_VOCAB, 0);
    if (v == NULL) {
        skip();
    }

    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    memset(&out, 0, sizeof(out));

    /* the text after a special token gets the dummy prefix again, so
     * "<s>Hello" parses as <s> followed by what "Hello" alone gives */
    kvs_test_encode(v, "<s>Hello", 8, KVS_TOK_SPECIAL, &a);
    kvs_test_encode(v, "Hello", 5, 0, &b);
    assert_int_equal(a.n, b.n + 1);
    assert_int_equal(a.ids[0], 1);
    assert_memory_equal(a.ids + 1, b.ids, b.n * sizeof(int32_t));

    /* ADD_BOS adds exactly one BOS */
    kvs_test_encode(v, "Hello", 5, KVS_TOK_ADD_BOS, &a);
    assert_int_equal(a.ids[0], v->bos);
    assert_int_equal(a.n, b.n + 1);

    /* BOS is hidden by default, shown with the flag, and the leading
     * space of the first piece is dropped only when it is first */
    assert_int_equal(kvs_tok_decode(v, a.ids, a.n, 0, &out, &err), KVS_OK);
    assert_int_equal(out.len, 5);
    assert_memory_equal(out.data, "Hello", 5);

    out.len = 0;
    assert_int_equal(kvs_tok_decode(v, a.ids, a.n, KVS_DETOK_SPECIAL, &out,
                                    &err), KVS_OK);
    assert_int_equal(out.len, 9);
    assert_memory_equal(out.data, "<s> Hello", 9);

    kvs_ids_free(&a);
    kvs_ids_free(&b);
    kvs_buf_free(&out);
    kvs_vocab_free(v);
}


/* --- detokenizing ------------------------------------------------------- */

static void
test_detok_stream_emoji(void **state)
{
    /* vocab/README.md: "🦙" is the byte tokens 243 162 169 156 */
    static const int32_t  llama[] = { 243, 162, 169, 156 };

    int           i;
    kvs_buf_t     out;
    kvs_err_t     err;
    kvs_detok_t   d;
    kvs_vocab_t  *v;

    v = kvs_test_vocab(SPM_VOCAB, 0);
    if (v == NULL) {
        skip();
    }

    memset(&out, 0, sizeof(out));
    kvs_detok_init(&d, v, 0);

    for (i = 0; i < 3; i++) {
        assert_int_equal(kvs_detok_push(&d, llama[i], &out, &err), KVS_OK);
        assert_int_equal(out.len, 0);       /* never half a character */
    }

    assert_int_equal(kvs_detok_push(&d, llama[3], &out, &err), KVS_OK);
    assert_int_equal(out.len, 4);
    assert_memory_equal(out.data, "\xf0\x9f\xa6\x99", 4);

    assert_int_equal(kvs_detok_finish(&d, &out), KVS_OK);
    assert_int_equal(out.len, 4);

    /* out-of-range ids are refused */
    assert_int_equal(kvs_detok_push(&d, (int32_t) v->n_tokens, &out, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_detok_push(&d, -1, &out, &err), KVS_EINVAL);

    kvs_buf_free(&out);
    kvs_vocab_free(v);
}


/* Byte tokens make any byte sequence; decoding must replace each maximal
 * invalid subpart with one U+FFFD (what Python's errors="replace" and
 * Rust's from_utf8_lossy give for the same bytes). */
static void
check_lossy(kvs_vocab_t *v, const char *bytes, size_t n, const char *want)
{
    size_t     i;
    int32_t    ids[16];
    kvs_buf_t  out;
    kvs_err_t  err;

    memset(&out, 0, sizeof(out));

    for (i = 0; i < n; i++) {
        ids[i] = v->byte_token[(uint8_t) bytes[i]];
        assert_true(ids[i] >= 0);
    }

    assert_int_equal(kvs_tok_decode(v, ids, n, 0, &out, &err), KVS_OK);

    if (out.len != strlen(want) || memcmp(out.data, want, out.len) != 0) {
        fail_msg("lossy decode of %zu bytes: got %zu bytes", n, out.len);
    }

    kvs_buf_free(&out);
}


static void
test_detok_lossy(void **state)
{
    kvs_vocab_t  *v;

    v = kvs_test_vocab(SPM_VOCAB, 0);
    if (v == NULL) {
        skip();
    }

    check_lossy(v, "\xf0\x9f\x41", 3, "\xef\xbf\xbd" "A");
    check_lossy(v, "\xe2\x96", 2, "\xef\xbf\xbd");
    check_lossy(v, "\xc0\x80", 2, "\xef\xbf\xbd\xef\xbf\xbd");
    check_lossy(v, "\xed\xa0\x80", 3,
                "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    check_lossy(v, "a\xff" "b", 3, "a\xef\xbf\xbd" "b");
    check_lossy(v, "\xf4\x90\x80\x80", 4,
                "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    check_lossy(v, "\xe2\x82\xac\xe2", 4, "\xe2\x82\xac\xef\xbf\xbd");

    kvs_vocab_free(v);
}


/* --- input validation --------------------------------------------------- */

static void
test_invalid_utf8_rejected(void **state)
{
    kvs_ids_t      ids;
    kvs_err_t      err;
    kvs_vocab_t   *v;
    kvs_tok_ctx_t  ctx;

    v = kvs_test_vocab(SPM_VOCAB, 0);
    if (v == NULL) {
        skip();
    }

    memset(&ids, 0, sizeof(ids));
    memset(&ctx, 0, sizeof(ctx));

    assert_int_equal(kvs_ids_push(&ids, 7), KVS_OK);

    assert_int_equal(kvs_tok_encode(v, &ctx, "ab\xff" "cd", 5, 0, &ids,
                                    &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "offset 2"));
    assert_int_equal(ids.n, 1);             /* nothing appended */

    /* an overlong encoding and a surrogate are invalid too */
    assert_int_equal(kvs_tok_encode(v, &ctx, "\xc0\xaf", 2, 0, &ids, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_tok_encode(v, &ctx, "x\xed\xa0\x80", 4, 0, &ids,
                                    &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "offset 1"));
    assert_int_equal(ids.n, 1);

    kvs_tok_ctx_free(&ctx);
    kvs_ids_free(&ids);
    kvs_vocab_free(v);
}


/* --- random round trips ------------------------------------------------- */

static size_t
random_text(uint64_t *rng, char *buf, size_t cap)
{
    size_t    n, len, k;
    uint32_t  cp;
    uint64_t  r;

    len = kvs_splitmix64(rng) % (cap / 4);

    for (n = 0, k = 0; k < len; k++) {
        r = kvs_splitmix64(rng);

        switch (r % 6) {
        case 0: cp = ' ' + (r >> 8) % 95; break;                /* ASCII */
        case 1: cp = " \t\n\r"[(r >> 8) % 4]; break;             /* space */
        case 2: cp = 0x80 + (r >> 8) % 0x780; break;             /* 2-byte */
        case 3: cp = 0x4e00 + (r >> 8) % 0x5200; break;          /* CJK */
        case 4: cp = 0x1f300 + (r >> 8) % 0x300; break;          /* emoji */
        default: cp = 1 + (r >> 8) % 0x10fffe; break;            /* any */
        }

        /* surrogates are not characters; U+2581 is SentencePiece's
         * space, which it cannot tell from a space */
        if ((cp >= 0xd800 && cp <= 0xdfff) || cp == 0x2581) {
            cp = 'x';
        }

        n += kvs_test_utf8_put(buf + n, cp);
    }

    return n;
}


static void
round_trips(const char *rel)
{
    int            rc, i;
    char           text[1024];
    size_t         n, k, streamed, checked;
    uint64_t       rng;
    kvs_ids_t      ids;
    kvs_buf_t      out, sout;
    kvs_err_t      err;
    kvs_detok_t    d;
    kvs_vocab_t   *v;
    kvs_tok_ctx_t  ctx;

    v = kvs_test_vocab(rel, 0);
    if (v == NULL) {
        skip();
    }

    memset(&ids, 0, sizeof(ids));
    memset(&out, 0, sizeof(out));
    memset(&sout, 0, sizeof(sout));
    memset(&ctx, 0, sizeof(ctx));
    rng = 20261129;
    checked = 0;

    for (i = 0; i < 1500; i++) {
        if (i % 3 == 0) {
            /* raw random bytes: either refused as invalid, or valid */
            n = kvs_splitmix64(&rng) % 48;
            for (k = 0; k < n; k++) {
                text[k] = (char) kvs_splitmix64(&rng);
            }
        } else {
            n = random_text(&rng, text, sizeof(text));
        }

        ids.n = 0;
        rc = kvs_tok_encode(v, &ctx, text, n, 0, &ids, &err);

        if (!kvs_utf8_valid((const uint8_t *) text, n)) {
            assert_int_equal(rc, KVS_EINVAL);
            assert_int_equal(ids.n, 0);
            continue;
        }

        if (rc != KVS_OK) {
            fail_msg("%s: case %d: %s", rel, i, err.msg);
        }

        /* a byte the vocabulary has no token for (Falcon lacks some
         * controls and lead bytes) is dropped, as its reference tokenizer
         * drops it: such text cannot round-trip (test_tok_bpe.c checks
         * the dropping) */
        for (k = 0; k < n && v->byte_token[(uint8_t) text[k]] >= 0; k++) {
            /* void */
        }

        if (k < n) {
            continue;
        }

        checked++;

        out.len = 0;
        assert_int_equal(kvs_tok_decode(v, ids.ids, ids.n, 0, &out, &err),
                         KVS_OK);

        if (out.len != n || memcmp(out.data, text, n) != 0) {
            fail_msg("%s: case %d: %zu bytes decode to %zu different bytes",
                     rel, i, n, out.len);
        }

        /* streaming gives the same text, valid UTF-8 at every step */
        sout.len = 0;
        kvs_detok_init(&d, v, 0);

        for (k = 0; k < ids.n; k++) {
            assert_int_equal(kvs_detok_push(&d, ids.ids[k], &sout, &err),
                             KVS_OK);
            assert_true(kvs_utf8_valid(sout.data, sout.len));
        }

        streamed = sout.len;
        assert_int_equal(kvs_detok_finish(&d, &sout), KVS_OK);
        assert_int_equal(sout.len, streamed);
        assert_int_equal(sout.len, n);
        assert_memory_equal(sout.data, text, n);
    }

    print_message("%s: %zu random texts round-tripped\n", rel, checked);
    assert_true(checked > 100);

    kvs_tok_ctx_free(&ctx);
    kvs_ids_free(&ids);
    kvs_buf_free(&out);
    kvs_buf_free(&sout);
    kvs_vocab_free(v);
}


static void
test_round_trip_spm(void **state)
{
    round_trips(SPM_VOCAB);
}


static void
test_round_trip_gpt2(void **state)
{
    round_trips(GPT2_VOCAB);
}


static void
test_round_trip_falcon(void **state)
{
    round_trips("vocab/ggml-vocab-falcon.gguf");
}


/* --- vocabularies that must be refused ---------------------------------- */

typedef enum {
    BAD_MODEL, BAD_PRE, BAD_MERGE, BAD_BOS, BAD_TYPE, BAD_BYTE_TOKEN,
    NO_BYTE_TOKEN, GOOD_BPE
} bad_kind_t;


/* A small byte-level vocabulary: the 256 bytes, "ab", and <|end|>. */
static void
write_vocab(const char *path, bad_kind_t kind)
{
    int                 i, n;
    char                tok[8];
    int32_t             types[260];
    uint32_t            cp;
    kvs_err_t           err;
    kvs_gguf_writer_t  *w;

    assert_int_equal(kvs_gguf_writer_new(&w, 3, &err), KVS_OK);

    kvs_gguf_set_str(w, "general.architecture", "llama");
    kvs_gguf_set_str(w, "tokenizer.ggml.model",
                     kind == BAD_MODEL ? "rwkv"
                     : kind == BAD_BYTE_TOKEN ? "llama" : "gpt2");
    kvs_gguf_set_str(w, "tokenizer.ggml.pre",
                     kind == BAD_PRE ? "no-such-pre" : "gpt-2");

    n = kind == NO_BYTE_TOKEN ? 255 : 256;

    kvs_gguf_w_key(w, "tokenizer.ggml.tokens", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_STR, n + 2);

    for (i = 0; i < n; i++) {
        if (kind == BAD_BYTE_TOKEN) {
            snprintf(tok, sizeof(tok), i == 200 ? "<0xZZ>" : "<0x%02X>", i);
            kvs_gguf_w_str(w, tok, 6);
            types[i] = KVS_TOKT_BYTE;
            continue;
        }

        cp = kvs_bytelevel_cp((uint8_t) (i + (256 - n)));
        if (cp < 0x80) {
            tok[0] = (char) cp;
            kvs_gguf_w_str(w, tok, 1);
        } else {
            tok[0] = (char) (0xc0 | cp >> 6);
            tok[1] = (char) (0x80 | (cp & 0x3f));
            kvs_gguf_w_str(w, tok, 2);
        }
        types[i] = KVS_TOKT_NORMAL;
    }

    kvs_gguf_w_str(w, "ab", 2);
    types[n] = KVS_TOKT_NORMAL;
    kvs_gguf_w_str(w, "<|end|>", 7);
    types[n + 1] = kind == BAD_TYPE ? 9 : KVS_TOKT_CONTROL;

    kvs_gguf_w_key(w, "tokenizer.ggml.token_type", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_I32, n + 2);
    kvs_gguf_w_elems(w, types, n + 2);

    kvs_gguf_w_key(w, "tokenizer.ggml.merges", KVS_GGUF_ARR);
    kvs_gguf_w_arr(w, KVS_GGUF_STR, 1);
    kvs_gguf_w_str(w, kind == BAD_MERGE ? "a zz" : "a b", 3);

    kvs_gguf_set_u32(w, "tokenizer.ggml.bos_token_id",
                     kind == BAD_BOS ? 99999 : (uint32_t) n + 1);

    assert_int_equal(kvs_gguf_writer_write(w, path, NULL, NULL, &err),
                     KVS_OK);
    kvs_gguf_writer_free(w);
}


static void
expect_refused(bad_kind_t kind, int code, const char *needle)
{
    const char   *path;
    kvs_err_t     err;
    kvs_vocab_t  *v;

    path = kvs_test_tmp("bad-vocab.gguf");
    write_vocab(path, kind);

    assert_int_equal(kvs_vocab_open(&v, path, &err), code);
    assert_null(v);

    if (strstr(err.msg, needle) == NULL) {
        fail_msg("error \"%s\" does not mention \"%s\"", err.msg, needle);
    }
}


static void
test_vocab_refused(void **state)
{
    const char     *path;
    kvs_ids_t       ids;
    kvs_err_t       err;
    kvs_vocab_t    *v;
    kvs_tok_ctx_t   ctx;

    expect_refused(BAD_MODEL, KVS_EUNSUPPORTED, "\"rwkv\"");
    expect_refused(BAD_PRE, KVS_EUNSUPPORTED, "no-such-pre");
    expect_refused(BAD_MERGE, KVS_EFORMAT, "merges[0]");
    expect_refused(BAD_BOS, KVS_EFORMAT, "bos_token_id");
    expect_refused(BAD_TYPE, KVS_EFORMAT, "token_type[257]");
    expect_refused(BAD_BYTE_TOKEN, KVS_EFORMAT, "tokens[200]");

    /* and the same file done right loads, merges "a b" and parses the
     * control token only when asked */
    path = kvs_test_tmp("good-vocab.gguf");
    write_vocab(path, GOOD_BPE);
    assert_int_equal(kvs_vocab_open(&v, path, &err), KVS_OK);
    assert_int_equal(v->n_merges, 1);
    assert_int_equal(v->bos, 257);

    memset(&ids, 0, sizeof(ids));
    kvs_test_encode(v, "ab<|end|>", 9, KVS_TOK_SPECIAL, &ids);
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.ids[0], 256);
    assert_int_equal(ids.ids[1], 257);

    kvs_vocab_free(v);

    /* a byte with no token and no unknown token to stand for it is
     * dropped, as Hugging Face's BPE and llama.cpp drop it (Falcon's
     * vocabulary lacks several) */
    path = kvs_test_tmp("no-byte-vocab.gguf");
    write_vocab(path, NO_BYTE_TOKEN);
    assert_int_equal(kvs_vocab_open(&v, path, &err), KVS_OK);
    assert_int_equal(v->byte_token[0], -1);

    memset(&ctx, 0, sizeof(ctx));
    ids.n = 0;
    assert_int_equal(kvs_tok_encode(v, &ctx, "\0ab", 3, 0, &ids, &err),
                     KVS_OK);
    assert_int_equal(ids.n, 1);
    assert_int_equal(ids.ids[0], 255);
    kvs_tok_ctx_free(&ctx);

    kvs_ids_free(&ids);
    kvs_vocab_free(v);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_special_parse_bpe),
        cmocka_unit_test(test_special_guarded),
        cmocka_unit_test(test_special_parse_spm),
        cmocka_unit_test(test_detok_stream_emoji),
        cmocka_unit_test(test_detok_lossy),
        cmocka_unit_test(test_invalid_utf8_rejected),
        cmocka_unit_test(test_round_trip_spm),
        cmocka_unit_test(test_round_trip_gpt2),
        cmocka_unit_test(test_round_trip_falcon),
        cmocka_unit_test(test_vocab_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
