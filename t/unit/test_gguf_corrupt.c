/*
 * test_gguf_corrupt: damaged GGUF files get an error, never a crash or an
 * out-of-bounds read.  Each case parses a malloc()ed copy of exactly the
 * damaged length, so AddressSanitizer (make unit-asan) sees any read past
 * it.
 *
 *   - truncation at every offset of the sample and of stories260K's
 *     header, and at spread offsets of its data and of a vocab file;
 *   - targeted damage to every header field, count, type, string length,
 *     array header, tensor dimension, type and offset, found by walking
 *     the valid file with the reader itself: each must be an error whose
 *     message names the field;
 *   - a flip of every bit of the sample's header and one bit per byte of
 *     stories260K's: an error or a file that still walks cleanly.
 */

#include "kvs_test.h"
#include "kvs_sample.h"

#include "model/kvs_gguf.h"


typedef struct {
    uint8_t  *buf;
    size_t    len;
    size_t    end;                    /* last tensor's data ends here */
} corpus_t;

static corpus_t  sample, stories, vocab;


static int
load(corpus_t *c, const char *path)
{
    kvs_err_t                 err;
    kvs_gguf_t               *g;
    const kvs_gguf_tensor_t  *t;
    uint64_t                  i;

    c->buf = kvs_test_slurp(path, &c->len);
    if (c->buf == NULL) {
        return -1;
    }

    if (kvs_gguf_open_mem(&g, c->buf, c->len, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }

    c->end = c->len;
    if (kvs_gguf_n_tensors(g) > 0) {
        c->end = 0;
        for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
            t = kvs_gguf_tensor_at(g, i);
            if (kvs_gguf_data_offset(g) + t->offset + t->nbytes > c->end) {
                c->end = kvs_gguf_data_offset(g) + t->offset + t->nbytes;
            }
        }
    }

    kvs_gguf_close(g);

    return 0;
}


static int
setup(void **state)
{
    kvs_err_t    err;
    const char  *p;

    p = kvs_test_tmp("corrupt-sample.gguf");
    if (kvs_sample_write(p, 3, 32, &err) != KVS_OK || load(&sample, p) != 0)
    {
        return -1;
    }

    p = kvs_test_fixture("models/stories260K-f32.gguf");
    if (p != NULL && load(&stories, p) != 0) {
        return -1;
    }

    p = kvs_test_fixture("vocab/ggml-vocab-phi-3.gguf");
    if (p != NULL && load(&vocab, p) != 0) {
        return -1;
    }

    return 0;
}


static int
teardown(void **state)
{
    free(sample.buf);
    free(stories.buf);
    free(vocab.buf);

    return 0;
}


/*
 * Walks everything a successful open hands out: every array element and
 * the first and last byte of every tensor, so that ASan checks them.
 */
static unsigned
walk(const kvs_gguf_t *g)
{
    unsigned                  sum;
    uint64_t                  i, j;
    kvs_gguf_str_t            s;
    kvs_gguf_arr_t            sub;
    kvs_gguf_iter_t           it;
    const kvs_gguf_kv_t      *kv;
    const kvs_gguf_tensor_t  *t;

    sum = 0;

    for (i = 0; i < kvs_gguf_n_kv(g); i++) {
        kv = kvs_gguf_kv_at(g, i);
        sum += (unsigned char) kv->key.ptr[kv->key.len - 1];

        if (kv->type != KVS_GGUF_ARR) {
            continue;
        }

        kvs_gguf_iter_init(&it, &kv->arr);
        if (kv->arr.type == KVS_GGUF_STR) {
            for (j = 0; kvs_gguf_iter_str(&it, &s); j++) {
                sum += s.len ? (unsigned char) s.ptr[s.len - 1] : 0;
            }
            assert_int_equal(j, kv->arr.n);
        } else if (kv->arr.type == KVS_GGUF_ARR) {
            for (j = 0; kvs_gguf_iter_arr(&it, &sub); j++) {
                sum += (unsigned) sub.n;
            }
            assert_int_equal(j, kv->arr.n);
        } else if (kv->arr.n > 0) {
            sum += kv->arr.end[-1];
        }
    }

    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        t = kvs_gguf_tensor_at(g, i);
        if (t->nbytes > 0) {
            sum += ((const uint8_t *) t->data)[0];
            sum += ((const uint8_t *) t->data)[t->nbytes - 1];
        }
    }

    return sum;
}


/* Parses a copy of buf[0..len); returns the status. */
static int
parse(const uint8_t *buf, size_t len, kvs_err_t *err)
{
    int          rc;
    uint8_t     *copy;
    kvs_gguf_t  *g;

    copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, buf, len);

    rc = kvs_gguf_open_mem(&g, copy, len, err);
    if (rc == KVS_OK) {
        walk(g);
        kvs_gguf_close(g);
    } else {
        assert_null(g);
        assert_true(err->msg[0] != '\0');
    }

    free(copy);

    return rc;
}


static void
truncate_at(const corpus_t *c, size_t len)
{
    kvs_err_t  err;

    if (parse(c->buf, len, &err) == KVS_OK) {
        fail_msg("truncation to %zu bytes (of %zu) was accepted", len,
                 c->len);
    }
}


static void
test_truncate_sample(void **state)
{
    size_t     n;
    kvs_err_t  err;

    for (n = 0; n < sample.end; n++) {
        truncate_at(&sample, n);
    }

    /* only the padding after the last tensor may go */
    for (n = sample.end; n <= sample.len; n++) {
        assert_int_equal(parse(sample.buf, n, &err), KVS_OK);
    }
}


static void
test_truncate_stories(void **state)
{
    size_t     n, hdr;
    kvs_err_t  err;

    if (stories.buf == NULL) {
        skip();
    }

    hdr = 14176;
    for (n = 0; n <= hdr; n++) {
        truncate_at(&stories, n);
    }
    for (n = hdr; n < stories.end; n += 997) {
        truncate_at(&stories, n);
    }
    truncate_at(&stories, stories.end - 1);

    /* the message names the key, the element and the offset */
    parse(stories.buf, 5000, &err);
    assert_string_equal(err.msg, "truncated: kv[0] 'tokenizer.ggml.tokens' "
                        "element 370 string length at byte 4996 needs 8 "
                        "bytes, 4 left in the file");
}


static void
test_truncate_vocab(void **state)
{
    size_t  n;

    if (vocab.buf == NULL) {
        skip();
    }

    for (n = 0; n < 4096; n++) {
        truncate_at(&vocab, n);
    }
    for (n = 4096; n < vocab.len; n += vocab.len / 1500) {
        truncate_at(&vocab, n);
    }
    truncate_at(&vocab, vocab.len - 1);
}


/* Damages a copy at off with `len` bytes of val; expects an error. */
static void
damage(const corpus_t *c, size_t off, const void *val, size_t len,
    const char *what, const char *want)
{
    uint8_t    *copy;
    kvs_err_t   err;

    assert_true(off + len <= c->len);

    copy = malloc(c->len);
    assert_non_null(copy);
    memcpy(copy, c->buf, c->len);
    memcpy(copy + off, val, len);

    if (parse(copy, c->len, &err) == KVS_OK) {
        fail_msg("%s at byte %zu was accepted", what, off);
    }

    if (want != NULL && strstr(err.msg, want) == NULL) {
        fail_msg("%s at byte %zu: message \"%s\" lacks \"%s\"", what, off,
                 err.msg, want);
    }

    free(copy);
}


static const uint64_t  huge = 0x7ffffffffffff000ULL;
static const uint32_t  bad_type = 13, huge32 = 0xffffffffu;


static void
damage_string_len(const corpus_t *c, const uint8_t *base,
    kvs_gguf_str_t s, const char *what)
{
    uint64_t  len;

    damage(c, (size_t) ((const uint8_t *) s.ptr - base) - 8, &huge, 8, what,
           "length");

    len = c->len;
    damage(c, (size_t) ((const uint8_t *) s.ptr - base) - 8, &len, 8, what,
           "length");
}


static void
damage_array(const corpus_t *c, const uint8_t *base, const kvs_gguf_kv_t *kv)
{
    size_t           at;
    uint64_t         i;
    kvs_gguf_str_t   s;
    kvs_gguf_iter_t  it;

    at = (size_t) (kv->val - base);

    damage(c, at, &bad_type, 4, "array element type", "element type");
    damage(c, at + 4, &huge, 8, "array length", "array length");

    if (kv->arr.type == KVS_GGUF_STR) {
        kvs_gguf_iter_init(&it, &kv->arr);
        /* the first, a middle and the last element's length */
        for (i = 0; kvs_gguf_iter_str(&it, &s); i++) {
            if (i == 0 || i == kv->arr.n / 2 || i == kv->arr.n - 1) {
                damage_string_len(c, base, s, "array string length");
            }
        }
    }

    if (kv->arr.type == KVS_GGUF_BOOL && kv->arr.n > 0) {
        damage(c, at + 12, "\x02", 1, "bool element", "bool");
    }
}


/* Every structural field of c, as the reader itself locates them. */
static void
damage_fields(const corpus_t *c)
{
    size_t                    at;
    uint64_t                  i, ne0, off;
    uint32_t                  v, d;
    kvs_err_t                 err;
    kvs_gguf_t               *g;
    kvs_gguf_str_t            s;
    const uint8_t            *base;
    const kvs_gguf_kv_t      *kv;
    const kvs_gguf_tensor_t  *t;

    assert_int_equal(kvs_gguf_open_mem(&g, c->buf, c->len, &err), KVS_OK);
    base = c->buf;

    damage(c, 0, "GGUX", 4, "magic", "magic");
    v = 1;
    damage(c, 4, &v, 4, "version 1", "version 1");
    v = 4;
    damage(c, 4, &v, 4, "version 4", "version 4");
    v = 0x03000000;
    damage(c, 4, &v, 4, "big-endian version", "big-endian");
    damage(c, 8, &huge, 8, "n_tensors", "n_tensors");
    damage(c, 16, &huge, 8, "n_kv", "n_kv");
    i = kvs_gguf_n_tensors(g) + 1;
    damage(c, 8, &i, 8, "n_tensors + 1", NULL);

    for (i = 0; i < kvs_gguf_n_kv(g); i++) {
        kv = kvs_gguf_kv_at(g, i);

        damage_string_len(c, base, kv->key, "key length");
        damage(c, (size_t) (kv->val - base) - 4, &bad_type, 4, "value type",
               "value type 13");
        damage(c, (size_t) (kv->val - base) - 4, &huge32, 4, "value type",
               "unknown value type");

        if (kv->type == KVS_GGUF_STR) {
            memcpy(&s.len, kv->val, 8);
            s.ptr = (const char *) kv->val + 8;
            damage_string_len(c, base, s, "string value length");
        } else if (kv->type == KVS_GGUF_ARR) {
            damage_array(c, base, kv);
        } else if (kv->type == KVS_GGUF_BOOL) {
            damage(c, (size_t) (kv->val - base), "\xff", 1, "bool", "bool");
        }

        if (kvs_gguf_str_eq(kv->key, "general.alignment")) {
            v = 0;
            damage(c, (size_t) (kv->val - base), &v, 4, "alignment 0",
                   "general.alignment");
            v = 24;
            damage(c, (size_t) (kv->val - base), &v, 4, "alignment 24",
                   "power of two");
        }
    }

    for (i = 0; i < kvs_gguf_n_tensors(g); i++) {
        t = kvs_gguf_tensor_at(g, i);

        damage_string_len(c, base, t->name, "tensor name length");

        at = (size_t) t->offset_at;                 /* the offset field */
        d = 0;
        damage(c, at - 4 - 8 * t->n_dims - 4, &d, 4, "n_dims 0", "n_dims");
        d = 5;
        damage(c, at - 4 - 8 * t->n_dims - 4, &d, 4, "n_dims 5", "n_dims");
        damage(c, at - 4 - 8 * t->n_dims, &huge, 8, "ne[0]", NULL);
        ne0 = t->ne[0] * 4096;
        damage(c, at - 4 - 8 * t->n_dims, &ne0, 8, "ne[0] x 4096",
               "past the end");
        damage(c, at - 4, &bad_type, 4, "unknown tensor type 13", "type 13");
        v = 4;                                   /* retired Q4_2 */
        damage(c, at - 4, &v, 4, "retired tensor type 4", "unknown");
        off = t->offset + 1;
        damage(c, at, &off, 8, "misaligned offset", "alignment");
        damage(c, at, &huge, 8, "offset past the end", "past the end");
    }

    /* two tensors with one name, two keys with one key */
    if (c == &sample) {
        damage(c, (size_t) (kvs_gguf_find_tensor(g, "t.f16")->name.ptr
                            - (const char *) base), "t.f32", 5,
               "duplicate tensor name", "duplicates");
        damage(c, (size_t) (kvs_gguf_find(g, "t.i8")->key.ptr
                            - (const char *) base), "t.u8", 4,
               "duplicate key", "duplicates");
    }

    kvs_gguf_close(g);
}


static void
test_damage_sample(void **state)
{
    damage_fields(&sample);
}


static void
test_damage_stories(void **state)
{
    if (stories.buf == NULL) {
        skip();
    }

    damage_fields(&stories);
}


static void
test_damage_vocab(void **state)
{
    if (vocab.buf == NULL) {
        skip();
    }

    damage_fields(&vocab);
}


/* Flips bits; accepted or not, nothing may be read out of bounds. */
static void
flip_bits(const corpus_t *c, size_t upto, int all_bits)
{
    int        bit;
    size_t     off;
    uint8_t   *copy;
    unsigned   errors;
    kvs_err_t  err;

    copy = malloc(c->len);
    assert_non_null(copy);
    memcpy(copy, c->buf, c->len);
    errors = 0;

    for (off = 0; off < upto; off++) {
        for (bit = 0; bit < 8; bit++) {
            if (!all_bits && bit != (int) (off % 8)) {
                continue;
            }
            copy[off] ^= (uint8_t) (1u << bit);
            errors += parse(copy, c->len, &err) != KVS_OK;
            copy[off] ^= (uint8_t) (1u << bit);
        }
    }

    print_message("  %u of %zu flips rejected\n", errors,
                  all_bits ? upto * 8 : upto);
    assert_true(errors > 0);

    free(copy);
}


static void
test_flip_sample(void **state)
{
    kvs_err_t    err;
    kvs_gguf_t  *g;

    assert_int_equal(kvs_gguf_open_mem(&g, sample.buf, sample.len, &err),
                     KVS_OK);
    flip_bits(&sample, kvs_gguf_data_offset(g), 1);
    kvs_gguf_close(g);
}


static void
test_flip_stories(void **state)
{
    if (stories.buf == NULL) {
        skip();
    }

    flip_bits(&stories, 14176, 0);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_truncate_sample),
        cmocka_unit_test(test_truncate_stories),
        cmocka_unit_test(test_truncate_vocab),
        cmocka_unit_test(test_damage_sample),
        cmocka_unit_test(test_damage_stories),
        cmocka_unit_test(test_damage_vocab),
        cmocka_unit_test(test_flip_sample),
        cmocka_unit_test(test_flip_stories),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
