/*
 * test_vocab_convert: kvs_vocab_convert_tiktoken() and _hf().
 *
 * Small hand-written inputs check the layout written and the merge
 * derivation against merges worked out by hand from the definition
 * (rank BPE over a token's own bytes with lower ranks only), and that
 * every corrupt input fails naming its line and value and leaves no
 * file.  The real Llama 3 and Qwen2 vocabularies (fixtures; skipped when
 * absent) are converted, loaded with kvs_vocab_open() and must give the
 * expected ids of all 46 llama.cpp test cases, round-trip, apply NFC
 * (Qwen2) and keep the special tokens' facts.
 */

#include <unistd.h>

#include "kvs_test_tok.h"

#include "model/kvs_gguf.h"
#include "gen/kvs_vocab_convert.h"

#define PATH_LEN 1024


/* --- helpers ---------------------------------------------------------- */

static void
write_file(const char *path, const void *data, size_t len)
{
    FILE  *f;

    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}


/* kvs_test_tmp() reuses four buffers: keep a path that must live long. */
static const char *
tmp_path(const char *name, char *buf)
{
    snprintf(buf, PATH_LEN, "%s", kvs_test_tmp(name));

    return buf;
}


static int
exists(const char *path)
{
    return access(path, F_OK) == 0;
}


/* The output and its temporary must both be absent. */
static void
assert_no_output(const char *out)
{
    char  tmp[1100];

    snprintf(tmp, sizeof(tmp), "%s.tmp", out);

    if (exists(out) || exists(tmp)) {
        fail_msg("a failed conversion left %s behind",
                 exists(out) ? out : tmp);
    }
}


static void
assert_msg_has(const kvs_err_t *err, const char *want)
{
    if (strstr(err->msg, want) == NULL) {
        fail_msg("error \"%s\" does not contain \"%s\"", err->msg, want);
    }
}


/* Standard padded base64 (RFC 4648), written from its definition. */
static void
b64(const uint8_t *s, size_t n, char *out)
{
    static const char  a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             "abcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t             i;
    uint32_t           g;

    for (i = 0; i < n; i += 3) {
        g = (uint32_t) s[i] << 16;
        g |= i + 1 < n ? (uint32_t) s[i + 1] << 8 : 0;
        g |= i + 2 < n ? s[i + 2] : 0;
        *out++ = a[g >> 18];
        *out++ = a[(g >> 12) & 63];
        *out++ = i + 1 < n ? a[(g >> 6) & 63] : '=';
        *out++ = i + 2 < n ? a[g & 63] : '=';
    }
    *out = '\0';
}


/* GPT-2 byte-to-unicode as UTF-8, from the definition in the fixtures'
 * README: '!'..'~', 0xA1..0xAC, 0xAE..0xFF are themselves, the other 68
 * bytes U+0100.. in increasing order. */
static void
gpt2_char(unsigned b, char *out)
{
    unsigned  k, cp, n;

    for (k = 0, n = 0; k < b; k++) {
        if (!((k >= 0x21 && k <= 0x7e) || (k >= 0xa1 && k <= 0xac)
              || k >= 0xae))
        {
            n++;
        }
    }

    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae) {
        cp = b;
    } else {
        cp = 0x100 + n;
    }

    if (cp < 0x80) {
        out[0] = (char) cp;
        out[1] = '\0';
    } else {
        out[0] = (char) (0xc0 | (cp >> 6));
        out[1] = (char) (0x80 | (cp & 0x3f));
        out[2] = '\0';
    }
}


/* Element i of a GGUF array of strings, as a C string in buf. */
static const char *
gguf_str_at(const kvs_gguf_t *g, const char *key, uint64_t i, char *buf,
    size_t size)
{
    uint64_t         k;
    kvs_gguf_arr_t   a;
    kvs_gguf_str_t   s;
    kvs_gguf_iter_t  it;

    assert_int_equal(kvs_gguf_get_arr(g, key, &a, NULL), KVS_OK);
    assert_true(i < a.n);

    kvs_gguf_iter_init(&it, &a);
    for (k = 0; k <= i; k++) {
        assert_true(kvs_gguf_iter_str(&it, &s));
    }

    assert_true(s.len < size);
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = '\0';

    return buf;
}


static uint64_t
gguf_arr_n(const kvs_gguf_t *g, const char *key)
{
    kvs_gguf_arr_t  a;

    assert_int_equal(kvs_gguf_get_arr(g, key, &a, NULL), KVS_OK);

    return a.n;
}


static int64_t
gguf_u32(const kvs_gguf_t *g, const char *key)
{
    uint32_t  v;

    if (kvs_gguf_get_u32(g, key, &v, NULL) != KVS_OK) {
        return -1;
    }

    return v;
}


static void
assert_gguf_str(const kvs_gguf_t *g, const char *key, const char *want)
{
    kvs_gguf_str_t  s;

    assert_int_equal(kvs_gguf_get_str(g, key, &s, NULL), KVS_OK);
    if (!kvs_gguf_str_eq(s, want)) {
        fail_msg("%s is \"%.*s\", want \"%s\"", key, (int) s.len, s.ptr,
                 want);
    }
}


/* --- a hand-written tiktoken file ------------------------------------- */

/*
 * Ranks 0..255 are the bytes in byte order, then the multi-byte tokens
 * below.  Their merges, worked out by hand (pairs whose join has a lower
 * rank than the token; lowest first):
 *   256 ab    a+b                     "a b"
 *   257 cd    c+d                     "c d"
 *   258 abcd  ab(256) then cd(257)    "ab cd"
 *   259 bc    b+c                     "b c"
 *   260 abc   ab(256) < bc(259)       "ab c"
 *   261 xyz   no pair is a token      none: three parts
 *   262 " a"  space+a                 "Ġ a"
 *   263 bcd   cd(257) < bc(259)       "b cd"
 *   264 "\n\n"                        "Ċ Ċ"
 */
static const char  *tiny_multi[] = {
    "ab", "cd", "abcd", "bc", "abc", "xyz", " a", "bcd", "\n\n"
};

static const char  *tiny_merges[] = {
    "a b", "c d", "ab cd", "b c", "ab c", "\xc4\xa0 a", "b cd",
    "\xc4\x8a \xc4\x8a"
};

#define TINY_N  (256 + 9)


/* Line i (0-based, rank i) of the tiny ranks file, no newline. */
static void
tiny_line(unsigned i, char *out)
{
    char     enc[64];
    uint8_t  byte;

    if (i < 256) {
        byte = (uint8_t) i;
        b64(&byte, 1, enc);
    } else {
        b64((const uint8_t *) tiny_multi[i - 256],
            strlen(tiny_multi[i - 256]), enc);
    }

    sprintf(out, "%s %u", enc, i);
}


/* Writes the tiny file with line `at` (0-based) replaced by `repl`
 * (NULL: unchanged). */
static void
tiny_write(const char *path, int at, const char *repl)
{
    char      line[128];
    size_t    len;
    unsigned  i;
    char     *buf;

    buf = malloc(TINY_N * 128);
    assert_non_null(buf);
    len = 0;

    for (i = 0; i < TINY_N; i++) {
        tiny_line(i, line);
        len += (size_t) sprintf(buf + len, "%s\n",
                                (int) i == at && repl != NULL ? repl : line);
    }

    write_file(path, buf, len);
    free(buf);
}


static void
test_tiny_tiktoken(void **state)
{
    int                        rc, b;
    char                       s[256], ch[4];
    char                       in[PATH_LEN], out[PATH_LEN];
    uint32_t                   i;
    kvs_err_t                  err;
    kvs_ids_t                  ids;
    kvs_gguf_t                *g;
    kvs_vocab_t               *v;
    kvs_vocab_convert_stats_t  st;
    kvs_gguf_arr_t             types;
    kvs_gguf_str_t             str;
    int64_t                    t;

    (void) state;

    tmp_path("vc_tiny.tiktoken", in);
    tmp_path("vc_tiny_tiktoken.gguf", out);
    tiny_write(in, -1, NULL);
    remove(out);

    rc = kvs_vocab_convert_tiktoken(in, out, NULL, &st, &err);
    if (rc != KVS_OK) {
        fail_msg("convert: %s", err.msg);
    }

    assert_int_equal(st.n_tokens, TINY_N + 256);
    assert_int_equal(st.n_special, 256);
    assert_int_equal(st.n_merges, 8);
    assert_int_equal(st.n_unsplit, 1);
    assert_int_equal(st.first_unsplit, 261);

    assert_int_equal(kvs_gguf_open(&g, out, &err), KVS_OK);
    assert_int_equal(kvs_gguf_n_tensors(g), 0);
    assert_gguf_str(g, "general.architecture", "llama");
    assert_gguf_str(g, "tokenizer.ggml.model", "gpt2");
    assert_gguf_str(g, "tokenizer.ggml.pre", "llama-bpe");

    assert_int_equal(gguf_arr_n(g, "tokenizer.ggml.tokens"), TINY_N + 256);
    for (b = 0; b < 256; b++) {
        gpt2_char((unsigned) b, ch);
        assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens",
                                        (uint64_t) b, s, sizeof(s)), ch);
    }
    /* spot checks of the alphabet itself (README: Ġ, Ċ; 0xAD is last) */
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", ' ', s,
                                    sizeof(s)), "\xc4\xa0");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", '\n', s,
                                    sizeof(s)), "\xc4\x8a");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", 0xad, s,
                                    sizeof(s)), "\xc5\x83");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", 262, s,
                                    sizeof(s)), "\xc4\xa0" "a");

    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", TINY_N, s,
                                    sizeof(s)), "<|begin_of_text|>");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", TINY_N + 9,
                                    s, sizeof(s)), "<|eot_id|>");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", TINY_N + 11,
                                    s, sizeof(s)),
                        "<|reserved_special_token_3|>");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", TINY_N + 255,
                                    s, sizeof(s)),
                        "<|reserved_special_token_247|>");

    assert_int_equal(kvs_gguf_get_arr(g, "tokenizer.ggml.token_type", &types,
                                      NULL), KVS_OK);
    assert_int_equal(types.type, KVS_GGUF_I32);
    for (i = 0; i < TINY_N + 256; i++) {
        assert_int_equal(kvs_gguf_arr_int(&types, i, &t), KVS_OK);
        assert_int_equal(t, i < TINY_N ? KVS_TOKT_NORMAL : KVS_TOKT_CONTROL);
    }

    assert_int_equal(gguf_arr_n(g, "tokenizer.ggml.merges"), 8);
    for (i = 0; i < 8; i++) {
        assert_string_equal(gguf_str_at(g, "tokenizer.ggml.merges", i, s,
                                        sizeof(s)), tiny_merges[i]);
    }

    assert_int_equal(gguf_u32(g, "tokenizer.ggml.bos_token_id"), TINY_N);
    assert_int_equal(gguf_u32(g, "tokenizer.ggml.eos_token_id"), TINY_N + 1);
    assert_int_equal(gguf_u32(g, "tokenizer.ggml.eot_token_id"), TINY_N + 9);
    assert_int_equal(gguf_u32(g, "tokenizer.ggml.eom_token_id"), TINY_N + 8);
    assert_int_equal(gguf_u32(g, "tokenizer.ggml.padding_token_id"), -1);
    assert_int_equal(kvs_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b,
                                       NULL), KVS_OK);
    assert_int_equal(b, 1);
    assert_int_equal(kvs_gguf_get_str(g, "tokenizer.chat_template", &str,
                                      NULL), KVS_ENOTFOUND);
    kvs_gguf_close(g);

    /* and the loader reads it: merges apply, xyz comes out whole */
    if (kvs_vocab_open(&v, out, &err) != KVS_OK) {
        fail_msg("kvs_vocab_open: %s", err.msg);
    }

    memset(&ids, 0, sizeof(ids));
    kvs_test_encode(v, "abcd", 4, 0, &ids);
    assert_int_equal(ids.n, 1);
    assert_int_equal(ids.ids[0], 258);
    kvs_test_encode(v, "bcdx", 4, 0, &ids);
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.ids[0], 263);
    assert_int_equal(ids.ids[1], 'x');
    kvs_test_encode(v, "xyz", 3, 0, &ids);
    assert_int_equal(ids.n, 1);
    assert_int_equal(ids.ids[0], 261);
    kvs_test_encode(v, "xyzx", 4, 0, &ids);
    assert_int_equal(ids.n, 4);

    kvs_ids_free(&ids);
    kvs_vocab_free(v);
    remove(in);
    remove(out);
}


static void
tiny_expect_error(int at, const char *repl, const char *want1,
    const char *want2)
{
    int        rc;
    char       in[PATH_LEN], out[PATH_LEN];
    kvs_err_t  err;

    tmp_path("vc_bad.tiktoken", in);
    tmp_path("vc_bad.gguf", out);
    tiny_write(in, at, repl);
    remove(out);

    rc = kvs_vocab_convert_tiktoken(in, out, NULL, NULL, &err);
    assert_int_equal(rc, KVS_EFORMAT);
    assert_msg_has(&err, "vc_bad.tiktoken");
    assert_msg_has(&err, want1);
    if (want2 != NULL) {
        assert_msg_has(&err, want2);
    }
    assert_no_output(out);

    remove(in);
}


static void
test_tiny_tiktoken_errors(void **state)
{
    (void) state;

    /* line 257 is "YWI= 256" (ab): truncated base64 */
    tiny_expect_error(256, "YWI 256", ":257:", "\"YWI\"");
    tiny_expect_error(256, "YW 256", ":257:", "bad base64");
    tiny_expect_error(256, "Y*I= 256", ":257:", "\"Y*I=\"");
    tiny_expect_error(256, "Y=I= 256", ":257:", "bad base64");
    tiny_expect_error(256, "YWJ= 256", ":257:", "non-zero bits");
    tiny_expect_error(256, " 256", ":257:", "bad base64");
    tiny_expect_error(256, "YWI=", ":257:", "\"YWI=\"");
    tiny_expect_error(256, "YWI= 25x", ":257:", "\"25x\"");
    tiny_expect_error(256, "", ":257:", "is not");
    /* duplicate rank: line 258 says 256 again */
    tiny_expect_error(257, "Y2Q= 256", ":258:", "duplicate rank 256");
    /* ranks must be 0..264 */
    tiny_expect_error(257, "Y2Q= 999", ":258:", "rank 999 out of range");
    /* "ab" twice */
    tiny_expect_error(257, "YWI= 257", ":258:", "\"ab\"");
    /* byte 0x00 replaced by a 2-byte token: that byte has no token */
    tiny_expect_error(0, "AAA= 0", "byte 0x00", NULL);
    /* a special token's text as a normal token */
    tiny_expect_error(264, "PHxlb3RfaWR8Pg== 264", "<|eot_id|>", NULL);
}


static void
test_tiktoken_io_errors(void **state)
{
    char                      out[PATH_LEN], in[PATH_LEN], tp[PATH_LEN];
    kvs_err_t                 err;
    kvs_vocab_convert_opts_t  opts;

    (void) state;

    tmp_path("vc_io.gguf", out);
    remove(out);

    assert_int_equal(kvs_vocab_convert_tiktoken(
                         tmp_path("vc_does_not_exist", in), out, NULL, NULL,
                         &err), KVS_EIO);
    assert_msg_has(&err, "vc_does_not_exist");
    assert_no_output(out);

    write_file(tmp_path("vc_empty.tiktoken", in), "", 0);
    assert_int_equal(kvs_vocab_convert_tiktoken(in, out, NULL, NULL, &err),
                     KVS_EFORMAT);
    assert_msg_has(&err, "empty");
    assert_no_output(out);
    remove(in);

    /* a chat template that cannot be read fails before writing */
    tiny_write(tmp_path("vc_tiny2.tiktoken", in), -1, NULL);
    memset(&opts, 0, sizeof(opts));
    opts.chat_template = tmp_path("vc_no_template", tp);
    assert_int_equal(kvs_vocab_convert_tiktoken(in, out, &opts, NULL, &err),
                     KVS_EIO);
    assert_msg_has(&err, "vc_no_template");
    assert_no_output(out);

    /* nor does one that is not UTF-8 */
    write_file(tp, "{{ x }}\xff", 8);
    assert_int_equal(kvs_vocab_convert_tiktoken(in, out, &opts, NULL, &err),
                     KVS_EFORMAT);
    assert_msg_has(&err, "UTF-8");
    assert_no_output(out);

    remove(tp);
    remove(in);
}


/* --- hand-written vocab.json + merges.txt ----------------------------- */

/* vocab.json with the 256 bytes (ids in byte order) and extra entries
 * (already JSON text, e.g. "\"ab\":256"). */
static void
hf_vocab_write(const char *path, const char *extra)
{
    char      ch[4], *buf;
    size_t    len;
    unsigned  b;

    buf = malloc(16384);
    assert_non_null(buf);
    len = 0;
    buf[len++] = '{';

    for (b = 0; b < 256; b++) {
        gpt2_char(b, ch);
        len += (size_t) sprintf(buf + len, "%s\"%s%s\":%u", b ? "," : "",
                                b == '"' || b == '\\' ? "\\" : "", ch, b);
    }

    len += (size_t) sprintf(buf + len, "%s%s}", extra[0] ? "," : "", extra);
    write_file(path, buf, len);
    free(buf);
}


static void
test_tiny_hf(void **state)
{
    int                        rc, b;
    char                       s[256], tmpl[] = "{{ bos_token }}x";
    char                       vj[PATH_LEN], mt[PATH_LEN], out[PATH_LEN];
    char                       tp[PATH_LEN];
    kvs_err_t                  err;
    kvs_gguf_t                *g;
    kvs_vocab_convert_opts_t   opts;
    kvs_vocab_convert_stats_t  st;

    (void) state;

    tmp_path("vc_vocab.json", vj);
    tmp_path("vc_merges.txt", mt);
    tmp_path("vc_tiny_hf.gguf", out);
    tmp_path("vc_template.jinja", tp);
    remove(out);

    hf_vocab_write(vj, "\"ab\":256,\"\xc4\xa0" "a\":257,\"abab\":258");
    write_file(mt, "#version: 0.2\na b\n\xc4\xa0 a\nab ab\n", 29);
    write_file(tp, tmpl, strlen(tmpl));

    memset(&opts, 0, sizeof(opts));
    opts.chat_template = tp;
    opts.name = "tiny";

    rc = kvs_vocab_convert_hf(vj, mt, out, &opts, &st, &err);
    if (rc != KVS_OK) {
        fail_msg("convert: %s", err.msg);
    }

    assert_int_equal(st.n_tokens, 259 + 3);
    assert_int_equal(st.n_special, 3);
    assert_int_equal(st.n_merges, 3);

    assert_int_equal(kvs_gguf_open(&g, out, &err), KVS_OK);
    assert_gguf_str(g, "general.architecture", "qwen2");
    assert_gguf_str(g, "general.name", "tiny");
    assert_gguf_str(g, "tokenizer.ggml.model", "gpt2");
    assert_gguf_str(g, "tokenizer.ggml.pre", "qwen2");
    assert_gguf_str(g, "tokenizer.chat_template", tmpl);
    assert_int_equal(gguf_arr_n(g, "tokenizer.ggml.tokens"), 262);
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", 257, s,
                                    sizeof(s)), "\xc4\xa0" "a");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", 259, s,
                                    sizeof(s)), "<|endoftext|>");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.tokens", 261, s,
                                    sizeof(s)), "<|im_end|>");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.merges", 1, s,
                                    sizeof(s)), "\xc4\xa0 a");
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.merges", 2, s,
                                    sizeof(s)), "ab ab");
    assert_int_equal(gguf_u32(g, "tokenizer.ggml.eos_token_id"), 259);
    assert_int_equal(gguf_u32(g, "tokenizer.ggml.eot_token_id"), 261);
    assert_int_equal(gguf_u32(g, "tokenizer.ggml.padding_token_id"), 259);
    assert_int_equal(kvs_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b,
                                       NULL), KVS_OK);
    assert_int_equal(b, 0);
    kvs_gguf_close(g);
    remove(out);

    /* the #version header is optional; --pre overrides */
    write_file(mt, "a b\n\xc4\xa0 a\nab ab", 14);
    opts.chat_template = NULL;
    opts.pre = "deepseek-r1-qwen";
    rc = kvs_vocab_convert_hf(vj, mt, out, &opts, &st, &err);
    if (rc != KVS_OK) {
        fail_msg("convert: %s", err.msg);
    }
    assert_int_equal(st.n_merges, 3);
    assert_int_equal(kvs_gguf_open(&g, out, &err), KVS_OK);
    assert_gguf_str(g, "tokenizer.ggml.pre", "deepseek-r1-qwen");
    kvs_gguf_close(g);
    remove(out);

    /* CRLF line ends are line ends (Rust's lines(), as HF reads it) */
    write_file(mt, "#version: 0.2\r\na b\r\n\xc4\xa0 a\r\n", 25);
    rc = kvs_vocab_convert_hf(vj, mt, out, NULL, &st, &err);
    if (rc != KVS_OK) {
        fail_msg("convert: %s", err.msg);
    }
    assert_int_equal(st.n_merges, 2);
    assert_int_equal(kvs_gguf_open(&g, out, &err), KVS_OK);
    assert_string_equal(gguf_str_at(g, "tokenizer.ggml.merges", 1, s,
                                    sizeof(s)), "\xc4\xa0 a");
    kvs_gguf_close(g);

    remove(vj);
    remove(mt);
    remove(tp);
    remove(out);
}


static void
hf_expect_error(const char *extra, const char *json_raw, const char *merges,
    const char *want1, const char *want2)
{
    int        rc;
    char       vj[PATH_LEN], mt[PATH_LEN], out[PATH_LEN];
    kvs_err_t  err;

    tmp_path("vc_bad_vocab.json", vj);
    tmp_path("vc_bad_merges.txt", mt);
    tmp_path("vc_bad_hf.gguf", out);
    remove(out);

    if (json_raw != NULL) {
        write_file(vj, json_raw, strlen(json_raw));
    } else {
        hf_vocab_write(vj, extra);
    }
    write_file(mt, merges, strlen(merges));

    rc = kvs_vocab_convert_hf(vj, mt, out, NULL, NULL, &err);
    assert_int_equal(rc, KVS_EFORMAT);
    assert_msg_has(&err, want1);
    if (want2 != NULL) {
        assert_msg_has(&err, want2);
    }
    assert_no_output(out);

    remove(vj);
    remove(mt);
}


static void
test_tiny_hf_errors(void **state)
{
    const char  *ok;

    (void) state;

    ok = "\"ab\":256";

    /* merges naming an unknown symbol, by line */
    hf_expect_error(ok, NULL, "#version: 0.2\na b\na zz\n",
                    "vc_bad_merges.txt:3:", "\"zz\"");
    hf_expect_error(ok, NULL, "a b\nqq b\n", "vc_bad_merges.txt:2:",
                    "\"qq\"");
    /* the joined symbol must be a token */
    hf_expect_error(ok, NULL, "a b\nb a\n", "vc_bad_merges.txt:2:",
                    "\"ba\"");
    /* not two symbols with one space */
    hf_expect_error(ok, NULL, "a b\nab\n", "vc_bad_merges.txt:2:", "\"ab\"");
    hf_expect_error(ok, NULL, "a b\na  b\n", "vc_bad_merges.txt:2:", NULL);
    hf_expect_error(ok, NULL, "a b\n\na b\n", "vc_bad_merges.txt:2:", NULL);
    hf_expect_error(ok, NULL, "a b\na b\n", "vc_bad_merges.txt:2:",
                    "repeats line 1");

    /* vocab.json */
    hf_expect_error(NULL, "{\"a\":0,\n\"b\":", "a b\n",
                    "vc_bad_vocab.json:2:", "bad JSON");
    hf_expect_error(NULL, "[1,2]", "a b\n", "vc_bad_vocab.json",
                    "not a JSON object");
    hf_expect_error("\"ab\":257", NULL, "a b\n", "\"ab\"", "id 257");
    hf_expect_error("\"ab\":-1", NULL, "a b\n", "\"ab\"", "id -1");
    hf_expect_error("\"ab\":\"x\"", NULL, "a b\n", "\"ab\"",
                    "not an integer");
    hf_expect_error("\"ab\":3", NULL, "a b\n", "both have id 3", NULL);
    hf_expect_error("\"a b\":256", NULL, "a b\n", "\"a b\"",
                    "GPT-2 byte-to-unicode");
    hf_expect_error("\"a\":0", NULL, "a b\n", "vc_bad_vocab.json",
                    "duplicate");
    hf_expect_error("\"<|im_end|>\":256", NULL, "", "<|im_end|>", NULL);
}


/* --- the real vocabularies ------------------------------------------- */

typedef struct {
    kvs_vocab_t                *llama3;
    kvs_vocab_t                *qwen2;
    kvs_vocab_convert_stats_t   st_llama3;
    kvs_vocab_convert_stats_t   st_qwen2;
} real_t;


static int
real_setup(void **state)
{
    char         tk[PATH_LEN], vj[PATH_LEN], mt[PATH_LEN];
    char         o1[PATH_LEN], o2[PATH_LEN];
    const char  *f[3];
    real_t      *r;
    kvs_err_t    err;

    *state = NULL;

    if (kvs_test_fixture("vocab/ggml-vocab-llama-bpe.gguf.inp") == NULL
        || kvs_test_fixture("vocab/ggml-vocab-qwen2.gguf.inp") == NULL)
    {
        return 0;
    }

    /* kvs_test_fixture() has four buffers: these three fit */
    f[0] = kvs_test_fixture("vocab/llama3/tokenizer.model");
    f[1] = kvs_test_fixture("vocab/qwen2/vocab.json");
    f[2] = kvs_test_fixture("vocab/qwen2/merges.txt");
    if (f[0] == NULL || f[1] == NULL || f[2] == NULL) {
        return 0;
    }
    snprintf(tk, PATH_LEN, "%s", f[0]);
    snprintf(vj, PATH_LEN, "%s", f[1]);
    snprintf(mt, PATH_LEN, "%s", f[2]);

    r = calloc(1, sizeof(real_t));
    if (r == NULL) {
        return -1;
    }

    tmp_path("vc_llama3.gguf", o1);
    tmp_path("vc_qwen2.gguf", o2);

    if (kvs_vocab_convert_tiktoken(tk, o1, NULL, &r->st_llama3, &err)
            != KVS_OK
        || kvs_vocab_open(&r->llama3, o1, &err) != KVS_OK
        || kvs_vocab_convert_hf(vj, mt, o2, NULL, &r->st_qwen2, &err)
            != KVS_OK
        || kvs_vocab_open(&r->qwen2, o2, &err) != KVS_OK)
    {
        print_error("setup: %s\n", err.msg);
        kvs_vocab_free(r->llama3);
        free(r);
        return -1;
    }

    print_message("llama3: %u tokens, %u merges, %u without a 2-part "
                  "split, %.3f s; qwen2: %u tokens, %u merges, %.3f s\n",
                  r->st_llama3.n_tokens, r->st_llama3.n_merges,
                  r->st_llama3.n_unsplit, r->st_llama3.seconds,
                  r->st_qwen2.n_tokens, r->st_qwen2.n_merges,
                  r->st_qwen2.seconds);

    *state = r;

    return 0;
}


static int
real_teardown(void **state)
{
    real_t  *r;

    r = *state;
    if (r != NULL) {
        kvs_vocab_free(r->llama3);
        kvs_vocab_free(r->qwen2);
        free(r);
        remove(kvs_test_tmp("vc_llama3.gguf"));
        remove(kvs_test_tmp("vc_qwen2.gguf"));
    }

    return 0;
}


static real_t *
real_get(void **state)
{
    if (*state == NULL) {
        skip();
    }

    return *state;
}


static void
test_llama3_cases(void **state)
{
    size_t   bad;
    real_t  *r;

    r = real_get(state);
    bad = kvs_test_cases_run(r->llama3, "vocab/ggml-vocab-llama-bpe.gguf");
    assert_int_equal(bad, 0);
}


static void
test_qwen2_cases(void **state)
{
    size_t   bad;
    real_t  *r;

    r = real_get(state);
    bad = kvs_test_cases_run(r->qwen2, "vocab/ggml-vocab-qwen2.gguf");
    /* the same .out as a DeepSeek-R1 Qwen distill (fixture README) */
    bad += kvs_test_cases_run(r->qwen2,
                              "vocab/ggml-vocab-deepseek-r1-qwen.gguf");
    assert_int_equal(bad, 0);
}


static void
test_llama3_facts(void **state)
{
    size_t             k;
    real_t            *r;
    kvs_ids_t          ids;
    const kvs_vocab_t *v;

    r = real_get(state);
    v = r->llama3;

    /* definitions: the README's file format and the Llama 3.1 table */
    assert_int_equal(r->st_llama3.n_tokens, 128256);
    assert_int_equal(r->st_llama3.n_special, 256);
    /* each token of >= 2 bytes gets a merge or is counted as unsplit */
    assert_int_equal(r->st_llama3.n_merges + r->st_llama3.n_unsplit,
                     128000 - 256);
    assert_int_equal(v->n_tokens, 128256);
    assert_int_equal(v->n_merges, r->st_llama3.n_merges);
    assert_int_equal(v->bos, 128000);
    assert_int_equal(v->eos, 128001);
    assert_int_equal(v->eot, 128009);
    assert_int_equal(v->add_bos, 1);
    assert_true(v->ignore_merges);
    assert_int_equal(v->tokens[128009].type, KVS_TOKT_CONTROL);
    assert_int_equal(v->tokens[128009].len, 10);
    assert_memory_equal(v->tokens[128009].text, "<|eot_id|>", 10);
    assert_int_equal(v->tokens[128008].len, 10);
    assert_memory_equal(v->tokens[128008].text, "<|eom_id|>", 10);
    assert_int_equal(v->tokens[220].len, 1);
    assert_int_equal(v->tokens[220].text[0], ' ');
    assert_int_equal(v->tokens[198].text[0], '\n');
    assert_int_equal(v->tokens[256].len, 2);
    assert_memory_equal(v->tokens[256].text, "  ", 2);
    assert_int_equal(kvs_vocab_find(v, "<|python_tag|>", 14), 128010);
    assert_int_equal(kvs_vocab_find(v, "<|reserved_special_token_247|>", 30),
                     128255);

    memset(&ids, 0, sizeof(ids));

    kvs_test_encode(v, "<|eot_id|>", 10, KVS_TOK_SPECIAL, &ids);
    assert_int_equal(ids.n, 1);
    assert_int_equal(ids.ids[0], 128009);

    kvs_test_encode(v, "<|eot_id|>", 10, 0, &ids);
    assert_true(ids.n > 1);
    for (k = 0; k < ids.n; k++) {
        assert_true(ids.ids[k] < 128000);
    }

    /* "Hello" is 9906 (case 23 of the .out); BOS in front on request */
    kvs_test_encode(v, "Hello", 5, KVS_TOK_ADD_BOS, &ids);
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.ids[0], 128000);
    assert_int_equal(ids.ids[1], 9906);

    kvs_ids_free(&ids);
}


static void
test_qwen2_facts(void **state)
{
    real_t            *r;
    kvs_ids_t          ids;
    const kvs_vocab_t *v;

    r = real_get(state);
    v = r->qwen2;

    /* README: 151643 entries, 151387 merge rules, three specials */
    assert_int_equal(r->st_qwen2.n_tokens, 151646);
    assert_int_equal(r->st_qwen2.n_merges, 151387);
    assert_int_equal(v->n_tokens, 151646);
    assert_int_equal(v->n_merges, 151387);
    assert_int_equal(v->eos, 151643);
    assert_int_equal(v->eot, 151645);
    assert_int_equal(v->pad, 151643);
    assert_int_equal(v->add_bos, 0);
    assert_true(v->nfc);
    assert_int_equal(kvs_vocab_find(v, "<|im_start|>", 12), 151644);
    assert_int_equal(v->tokens[151645].type, KVS_TOKT_CONTROL);

    memset(&ids, 0, sizeof(ids));
    kvs_test_encode(v, "<|im_end|>", 10, KVS_TOK_SPECIAL, &ids);
    assert_int_equal(ids.n, 1);
    assert_int_equal(ids.ids[0], 151645);

    /* add_bos is false: nothing is prepended by default */
    kvs_test_encode(v, "Hello", 5, 0, &ids);
    assert_int_equal(ids.n, 1);
    assert_int_equal(ids.ids[0], 9707);

    kvs_ids_free(&ids);
}


/* encode(a) must equal encode(b), and differ from the raw bytes' own
 * encoding when not normalised (checked by the caller's choice). */
static void
assert_same_ids(const kvs_vocab_t *v, const char *a, const char *b)
{
    kvs_ids_t  x, y;

    memset(&x, 0, sizeof(x));
    memset(&y, 0, sizeof(y));

    kvs_test_encode(v, a, strlen(a), 0, &x);
    kvs_test_encode(v, b, strlen(b), 0, &y);

    assert_true(kvs_test_ids_check(&x, &y, a, strlen(a), "\"%s\" and "
                                   "\"%s\"", a, b));

    kvs_ids_free(&x);
    kvs_ids_free(&y);
}


static void
test_qwen2_nfc(void **state)
{
    real_t     *r;
    kvs_ids_t   x, y;

    r = real_get(state);

    /* e + U+0301 COMBINING ACUTE -> U+00E9 */
    assert_same_ids(r->qwen2, "caf" "e\xcc\x81", "caf\xc3\xa9");
    /* U+212B ANGSTROM SIGN -> U+00C5 */
    assert_same_ids(r->qwen2, "\xe2\x84\xab", "\xc3\x85");
    assert_same_ids(r->qwen2, " \xe2\x84\xab" "ngstr\xc3\xb6m",
                    " \xc3\x85ngstr\xc3\xb6m");

    /* Llama 3 does not normalise: the two spellings differ there */
    memset(&x, 0, sizeof(x));
    memset(&y, 0, sizeof(y));
    kvs_test_encode(r->llama3, "\xe2\x84\xab", 3, 0, &x);
    kvs_test_encode(r->llama3, "\xc3\x85", 2, 0, &y);
    assert_false(x.n == y.n
                 && memcmp(x.ids, y.ids, x.n * sizeof(int32_t)) == 0);
    kvs_ids_free(&x);
    kvs_ids_free(&y);
}


int
main(void)
{
    const struct CMUnitTest  tiny[] = {
        cmocka_unit_test(test_tiny_tiktoken),
        cmocka_unit_test(test_tiny_tiktoken_errors),
        cmocka_unit_test(test_tiktoken_io_errors),
        cmocka_unit_test(test_tiny_hf),
        cmocka_unit_test(test_tiny_hf_errors),
    };
    const struct CMUnitTest  real[] = {
        cmocka_unit_test(test_llama3_cases),
        cmocka_unit_test(test_qwen2_cases),
        cmocka_unit_test(test_llama3_facts),
        cmocka_unit_test(test_qwen2_facts),
        cmocka_unit_test(test_qwen2_nfc),
    };
    int                      failed;

    failed = cmocka_run_group_tests_name("vocab_convert_tiny", tiny, NULL,
                                         NULL);
    failed += cmocka_run_group_tests_name("vocab_convert_real", real,
                                          real_setup, real_teardown);

    return failed;
}
