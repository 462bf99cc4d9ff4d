/*
 * test_wire: the engine process's protocol (src/wire: kvs_wire.h).
 *
 * Every message round-trips with edge values (empty and full lists,
 * limits, extreme integers, -inf logprobs, raw bytes in stop strings);
 * every proper prefix of every valid frame is "need more bytes"; the
 * corruptions a peer could send (huge counts, lengths past the frame,
 * bad enums and flags, NaN, trailing bytes, oversize frames, other
 * versions) are KVS_EFORMAT naming the field; every single-byte mutation
 * of every valid frame decodes or fails without a memory error (run
 * under ASan by `make unit-asan`); an output larger than one frame is
 * split and reassembles exactly, never cutting a UTF-8 character; and
 * the encoders refuse what the decoders would.  Expected values are the
 * inputs, written here by hand.
 */

#include "kvs_test.h"

#include <math.h>

#include "wire/kvs_wire.h"

/* bytes of one model's fixed stats in STATS_REPLY: index, counters,
 * gauges, iteration buckets and sum, then the KV pools' (pools, 3 x 2
 * gauges, 4 x 2 counters), ..., the host tier's copies (version 15) */
#define STATS_MODEL  (4 + 17 * 8 + 8 * 4 + (KVS_ENGINE_ITER_BOUNDS + 2) * 8 \
                      + 4 + 6 * 4 + 8 * 8 + 8 + 2 * 4 + 18 * 8 \
                      + 4 * 4 + 4 * 8 + 4 * 8 + 8 + 4 + 14 * 8 \
                      + 3 * 8 + 4 + 5 * 8)


/* --- helpers ------------------------------------------------------------- */

/* Decodes one whole frame whatever its type; returns the status. */
static int
decode_any(const uint8_t *f, size_t n, kvs_err_t *err)
{
    int                 rc;
    uint64_t            u;
    kvs_wire_hdr_t      h;
    kvs_wire_out_t      o;
    kvs_wire_stats_t   *st;
    kvs_wire_hello_t   *he;
    kvs_wire_submit_t   s;
    kvs_wire_refused_t  r;
    kvs_wire_lora_t    *lo;

    rc = kvs_wire_frame(f, n, &h, err);
    if (rc != KVS_OK) {
        return rc;
    }

    switch (h.type) {

    case KVS_WIRE_HELLO:
        he = malloc(sizeof(*he));
        rc = kvs_wire_dec_hello(f, h.len, he, err);
        free(he);
        return rc;

    case KVS_WIRE_SUBMIT:
        memset(&s, 0, sizeof(s));
        rc = kvs_wire_dec_submit(f, h.len, &s, err);
        kvs_wire_submit_free(&s);
        return rc;

    case KVS_WIRE_REFUSED:
        return kvs_wire_dec_refused(f, h.len, &r, err);

    case KVS_WIRE_OUT:
        memset(&o, 0, sizeof(o));
        rc = kvs_wire_dec_out(f, h.len, &o, err);
        kvs_engine_out_free(&o.out);
        return rc;

    case KVS_WIRE_PONG:
        return kvs_wire_dec_pong(f, h.len, &u, err);

    case KVS_WIRE_STATS_REPLY:
        st = malloc(sizeof(*st));
        rc = kvs_wire_dec_stats(f, h.len, st, err);
        free(st);
        return rc;

    case KVS_WIRE_LORA:
        lo = malloc(sizeof(*lo));
        rc = kvs_wire_dec_lora(f, h.len, lo, err);
        free(lo);
        return rc;

    default:
        return kvs_wire_dec_empty(f, h.len, err);
    }
}


/* Every proper prefix of a valid frame asks for more and the whole frame
 * is one frame. */
static void
check_prefixes(const uint8_t *f, size_t n)
{
    size_t          i;
    kvs_err_t       err;
    kvs_wire_hdr_t  h;

    for (i = 0; i < n; i++) {
        if (kvs_wire_frame(f, i, &h, &err) != KVS_WIRE_AGAIN) {
            fail_msg("prefix of %zu of a %zu-byte frame: not AGAIN", i, n);
        }
    }

    assert_int_equal(kvs_wire_frame(f, n, &h, &err), KVS_OK);
    assert_int_equal(h.len, n);
}


/* Single-byte mutations: no crash, no leak, whatever the verdict. */
static void
check_mutations(const uint8_t *f, size_t n)
{
    size_t     i, k;
    uint8_t   *m;
    kvs_err_t  err;
    static const uint8_t  vals[] = { 0x00, 0xff, 0x7f, 0x80, 0x01 };

    m = malloc(n);
    assert_non_null(m);

    for (i = 0; i < n; i++) {
        /* big frames: the fixed fields, the ends and a sample between */
        if (i >= 512 && i + 256 < n && i % 61 != 0) {
            continue;
        }

        for (k = 0; k < sizeof(vals) + 1; k++) {
            memcpy(m, f, n);
            m[i] = k < sizeof(vals) ? vals[k] : (uint8_t) (f[i] ^ 0x55);
            (void) decode_any(m, n, &err);
        }
    }

    free(m);
}


/* Expects KVS_EFORMAT whose message contains what. */
static void
expect_bad(const uint8_t *f, size_t n, const char *what)
{
    int        rc;
    kvs_err_t  err;

    kvs_err_clear(&err);
    rc = decode_any(f, n, &err);

    if (rc != KVS_EFORMAT || strstr(err.msg, what) == NULL) {
        fail_msg("expected a format error naming \"%s\", got %d \"%s\"",
                 what, rc, err.msg);
    }
}


static void
put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
    p[2] = (uint8_t) (v >> 16);
    p[3] = (uint8_t) (v >> 24);
}


/* --- round trips --------------------------------------------------------- */

static void
test_hello(void **state)
{
    uint32_t           i;
    kvs_buf_t          b;
    kvs_err_t          err;
    kvs_wire_hdr_t     h;
    kvs_wire_hello_t  *in, *out;

    memset(&b, 0, sizeof(b));
    in = calloc(1, sizeof(*in));
    out = calloc(1, sizeof(*out));

    in->pid = 0xffffffffu;
    in->incarnation = 0x0123456789abcdefULL;
    in->n_models = KVS_WIRE_MAX_MODELS;

    for (i = 0; i < in->n_models; i++) {
        in->models[i].index = i;
        in->models[i].n_ctx = 1u << 20;
        in->models[i].n_vocab = 128256 + i;
        in->models[i].block_tokens = 16;
        in->models[i].kv_blocks = 0xffffffffu - i;
        in->models[i].file_size = 1ULL << 40;
        in->models[i].mtime_ns = -1 - (int64_t) i;
        in->models[i].dev = 0x8000000000000001ULL + i;
        in->models[i].ino = UINT64_MAX - i;
        in->models[i].epoch = 0x0123456789abcdefULL ^ i;
        in->models[i].backend = i % 2;
        in->models[i].kv_dtype = (i / 2) % 2;
        in->models[i].weights_mapped = 0xfedcba9876543210ULL - i;
        in->models[i].weights_owned = (uint64_t) i << 33;
        in->models[i].weights_device = UINT64_MAX - 3 * i;
        memset(in->models[i].name, 'a' + i % 26,
               i == 0 ? KVS_WIRE_MAX_NAME : 1 + i);
    }

    assert_int_equal(kvs_wire_enc_hello(&b, in, &err), KVS_OK);
    check_prefixes(b.data, b.len);

    assert_int_equal(kvs_wire_frame(b.data, b.len, &h, &err), KVS_OK);
    assert_int_equal(h.type, KVS_WIRE_HELLO);
    assert_int_equal(kvs_wire_dec_hello(b.data, b.len, out, &err), KVS_OK);

    assert_int_equal(out->version, KVS_WIRE_VERSION);
    assert_int_equal(out->pid, 0xffffffffu);
    assert_true(out->incarnation == 0x0123456789abcdefULL);
    assert_int_equal(out->n_models, KVS_WIRE_MAX_MODELS);

    for (i = 0; i < in->n_models; i++) {
        assert_int_equal(out->models[i].index, i);
        assert_int_equal(out->models[i].n_ctx, 1u << 20);
        assert_int_equal(out->models[i].n_vocab, 128256 + i);
        assert_int_equal(out->models[i].block_tokens, 16);
        assert_int_equal(out->models[i].kv_blocks, 0xffffffffu - i);
        assert_true(out->models[i].file_size == 1ULL << 40);
        assert_true(out->models[i].mtime_ns == -1 - (int64_t) i);
        assert_true(out->models[i].dev == 0x8000000000000001ULL + i);
        assert_true(out->models[i].ino == UINT64_MAX - i);
        assert_true(out->models[i].epoch == (0x0123456789abcdefULL ^ i));
        assert_int_equal(out->models[i].backend, i % 2);
        assert_int_equal(out->models[i].kv_dtype, (i / 2) % 2);
        assert_true(out->models[i].weights_mapped
                    == 0xfedcba9876543210ULL - i);
        assert_true(out->models[i].weights_owned == (uint64_t) i << 33);
        assert_true(out->models[i].weights_device == UINT64_MAX - 3 * i);
        assert_string_equal(out->models[i].name, in->models[i].name);
    }

    assert_int_equal(strlen(out->models[0].name), KVS_WIRE_MAX_NAME);

    check_mutations(b.data, b.len);

    /* a backend or K/V element this version does not know is refused
     * by the encoder, and by the decoder named */
    b.len = 0;
    in->models[3].backend = KVS_BACKEND_CUDA + 1;
    assert_int_equal(kvs_wire_enc_hello(&b, in, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "backend"));
    in->models[3].backend = 0;
    in->models[3].kv_dtype = KVS_BACKEND_KV_MAX + 1;
    assert_int_equal(kvs_wire_enc_hello(&b, in, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "kv_dtype"));
    in->models[3].kv_dtype = 0;
    assert_int_equal(b.len, 0);

    /* ... and by the decoder: the first model's backend and kv_dtype
     * bytes follow header (16), version, pid, incarnation, n_models (20)
     * and its ten fields before them (60) */
    in->n_models = 1;
    in->models[0].backend = KVS_BACKEND_CUDA;
    in->models[0].kv_dtype = KVS_BACKEND_KV_BF16;
    assert_int_equal(kvs_wire_enc_hello(&b, in, &err), KVS_OK);
    assert_int_equal(b.data[96], KVS_BACKEND_CUDA);
    assert_int_equal(b.data[97], KVS_BACKEND_KV_BF16);
    b.data[96] = KVS_BACKEND_CUDA + 1;
    assert_int_equal(kvs_wire_dec_hello(b.data, b.len, out, &err),
                     KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "backend"));
    b.data[96] = KVS_BACKEND_CUDA;
    b.data[97] = KVS_BACKEND_KV_MAX + 1;
    assert_int_equal(kvs_wire_dec_hello(b.data, b.len, out, &err),
                     KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "kv_dtype"));
    b.data[97] = KVS_BACKEND_KV_BF16;
    assert_int_equal(kvs_wire_dec_hello(b.data, b.len, out, &err), KVS_OK);
    assert_int_equal(out->models[0].kv_dtype, KVS_BACKEND_KV_BF16);
    in->n_models = KVS_WIRE_MAX_MODELS;

    /* a name too long or empty is refused by the encoder */
    b.len = 0;
    memset(in->models[1].name, 'x', KVS_WIRE_MAX_NAME + 1);
    assert_int_equal(kvs_wire_enc_hello(&b, in, &err), KVS_ERANGE);
    in->models[1].name[0] = '\0';
    assert_int_equal(kvs_wire_enc_hello(&b, in, &err), KVS_ERANGE);
    assert_int_equal(b.len, 0);

    kvs_buf_free(&b);
    free(in);
    free(out);
}


static void
test_submit(void **state)
{
    size_t               i, len[KVS_WIRE_MAX_STOP];
    int32_t              prompt[1000], sid[KVS_ENGINE_MAX_STOP_IDS];
    kvs_buf_t            b;
    kvs_err_t            err;
    kvs_engine_req_t     req;
    kvs_logit_bias_t     bias[300];
    kvs_wire_submit_t    s;
    const char          *stop[KVS_WIRE_MAX_STOP];
    char                 text[KVS_WIRE_MAX_STOP][KVS_WIRE_MAX_STOP_LEN];
    char                 scope[KVS_RADIX_MAX_SCOPE];
    char                 tenant[KVS_FAIR_MAX_KEY];

    memset(&b, 0, sizeof(b));
    memset(&s, 0, sizeof(s));

    /* the smallest: everything empty */
    memset(&req, 0, sizeof(req));
    assert_int_equal(kvs_wire_enc_submit(&b, 7, 0, &req, 0, &err), KVS_OK);
    check_prefixes(b.data, b.len);
    assert_int_equal(kvs_wire_dec_submit(b.data, b.len, &s, &err), KVS_OK);
    assert_int_equal(s.req.n_prompt, 0);
    assert_null(s.req.stop);
    assert_null(s.req.sample.logit_bias);
    assert_null(s.req.scope);
    assert_int_equal(s.req.scope_len + s.req.n_pins + s.req.adapter, 0);
    assert_null(s.req.tenant);
    assert_int_equal(s.req.tenant_len, 0);

    /* the fullest */
    for (i = 0; i < 1000; i++) {
        prompt[i] = i == 0 ? INT32_MAX : (int32_t) (i * 131);
    }

    for (i = 0; i < 300; i++) {
        bias[i].token = (int32_t) i;
        bias[i].bias = i % 2 ? -100.0f : 100.0f;
    }

    for (i = 0; i < KVS_ENGINE_MAX_STOP_IDS; i++) {
        sid[i] = (int32_t) (i + 2);
    }

    for (i = 0; i < KVS_WIRE_MAX_STOP; i++) {
        len[i] = i == 0 ? KVS_WIRE_MAX_STOP_LEN : i;
        memset(text[i], (int) (0x80 + i), len[i]);   /* raw bytes */
        text[i][0] = i == 1 ? '\0' : text[i][0];     /* even a NUL */
        stop[i] = text[i];
    }

    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = 1000;
    req.max_tokens = 0xffffffffu;
    req.n = KVS_ENGINE_MAX_N;
    req.sample.temperature = 1.5f;
    req.sample.top_k = -3;
    req.sample.top_p = 0.25f;
    req.sample.min_p = 0.125f;
    req.sample.seed = 0xfedcba9876543210ULL;
    req.sample.presence_penalty = -2.0f;
    req.sample.frequency_penalty = 2.0f;
    req.sample.logit_bias = bias;
    req.sample.n_logit_bias = 300;
    req.sample.logprobs = 1;
    req.sample.top_logprobs = KVS_SAMPLE_MAX_TOP_LOGPROBS;
    req.stop_ids = sid;
    req.n_stop_ids = KVS_ENGINE_MAX_STOP_IDS;
    req.stop = stop;
    req.stop_len = len;
    req.n_stop = KVS_WIRE_MAX_STOP;
    req.ignore_eos = 1;
    memset(scope, 0xa5, sizeof(scope));       /* raw bytes, the limit */
    scope[3] = '\0';
    req.scope = scope;
    req.scope_len = KVS_RADIX_MAX_SCOPE;
    req.adapter = 0xffffffffu;
    memset(tenant, 0x5a, sizeof(tenant));     /* raw bytes, the limit */
    tenant[0] = '\0';
    tenant[KVS_FAIR_MAX_KEY - 1] = (char) 0xff;
    req.tenant = tenant;
    req.tenant_len = KVS_FAIR_MAX_KEY;
    req.n_pins = KVS_ENGINE_MAX_PINS;
    for (i = 0; i < KVS_ENGINE_MAX_PINS; i++) {
        req.pins[i].n_tokens = i == 0 ? 1 : (uint32_t) (1000 - i);
        req.pins[i].ttl_ms = i == 0 ? KVS_ENGINE_MAX_PIN_TTL : (uint32_t) i;
    }
    req.gram_kind = KVS_ENGINE_GRAM_KIND_MAX;
    req.schema = "{\"type\":\"object\"}";
    req.schema_len = 17;

    b.len = 0;
    assert_int_equal(kvs_wire_enc_submit(&b, UINT64_MAX, 31, &req,
                                         123456789012345ULL, &err), KVS_OK);
    check_prefixes(b.data, b.len);

    /* decoding into a used struct reuses and replaces */
    assert_int_equal(kvs_wire_dec_submit(b.data, b.len, &s, &err), KVS_OK);

    assert_int_equal(s.model, 31);
    assert_true(s.submit_ns == 123456789012345ULL);
    assert_int_equal(s.req.n_prompt, 1000);
    assert_memory_equal(s.req.prompt, prompt, sizeof(prompt));
    assert_int_equal(s.req.max_tokens, 0xffffffffu);
    assert_int_equal(s.req.n, KVS_ENGINE_MAX_N);
    assert_true(s.req.sample.temperature == 1.5f);
    assert_int_equal(s.req.sample.top_k, -3);
    assert_true(s.req.sample.top_p == 0.25f);
    assert_true(s.req.sample.min_p == 0.125f);
    assert_true(s.req.sample.seed == 0xfedcba9876543210ULL);
    assert_true(s.req.sample.presence_penalty == -2.0f);
    assert_true(s.req.sample.frequency_penalty == 2.0f);
    assert_int_equal(s.req.sample.n_logit_bias, 300);
    for (i = 0; i < 300; i++) {
        assert_int_equal(s.req.sample.logit_bias[i].token, (int32_t) i);
        assert_true(s.req.sample.logit_bias[i].bias == bias[i].bias);
    }
    assert_int_equal(s.req.sample.logprobs, 1);
    assert_int_equal(s.req.sample.top_logprobs, 20);
    assert_int_equal(s.req.n_stop_ids, KVS_ENGINE_MAX_STOP_IDS);
    assert_memory_equal(s.req.stop_ids, sid, sizeof(sid));
    assert_int_equal(s.req.n_stop, KVS_WIRE_MAX_STOP);
    for (i = 0; i < KVS_WIRE_MAX_STOP; i++) {
        assert_int_equal(s.req.stop_len[i], len[i]);
        assert_memory_equal(s.req.stop[i], text[i], len[i]);
    }
    assert_int_equal(s.req.ignore_eos, 1);
    assert_null(s.req.data);
    assert_int_equal(s.req.scope_len, KVS_RADIX_MAX_SCOPE);
    assert_memory_equal(s.req.scope, scope, KVS_RADIX_MAX_SCOPE);
    assert_int_equal(s.req.adapter, 0xffffffffu);
    assert_int_equal(s.req.tenant_len, KVS_FAIR_MAX_KEY);
    assert_memory_equal(s.req.tenant, tenant, KVS_FAIR_MAX_KEY);
    assert_int_equal(s.req.n_pins, KVS_ENGINE_MAX_PINS);
    for (i = 0; i < KVS_ENGINE_MAX_PINS; i++) {
        assert_int_equal(s.req.pins[i].n_tokens, req.pins[i].n_tokens);
        assert_int_equal(s.req.pins[i].ttl_ms, req.pins[i].ttl_ms);
    }
    assert_int_equal(s.req.gram_kind, KVS_ENGINE_GRAM_KIND_MAX);
    assert_int_equal(s.req.schema_len, 17);
    assert_memory_equal(s.req.schema, "{\"type\":\"object\"}", 17);

    check_mutations(b.data, b.len);

    /* the encoder refuses what the decoder would, leaving b alone */
    i = b.len;
    req.n = KVS_ENGINE_MAX_N + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.n = 1;
    req.n_stop = KVS_WIRE_MAX_STOP + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.n_stop = 1;
    len[0] = KVS_WIRE_MAX_STOP_LEN + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    len[0] = 1;
    req.n_stop_ids = KVS_ENGINE_MAX_STOP_IDS + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.n_stop_ids = 0;
    req.sample.temperature = NAN;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.sample.temperature = 1.0f;
    req.sample.top_logprobs = 21;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.sample.top_logprobs = 0;
    req.scope_len = KVS_RADIX_MAX_SCOPE + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.scope_len = 1;
    req.tenant_len = KVS_FAIR_MAX_KEY + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.tenant_len = 1;
    req.tenant = NULL;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.tenant = tenant;
    req.n_pins = KVS_ENGINE_MAX_PINS + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.n_pins = 1;
    req.pins[0].n_tokens = 1001;              /* past the prompt */
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.pins[0].n_tokens = 0;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.pins[0].n_tokens = 1;
    req.pins[0].ttl_ms = KVS_ENGINE_MAX_PIN_TTL + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.pins[0].ttl_ms = 0;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.n_pins = 0;
    req.gram_kind = KVS_ENGINE_GRAM_KIND_MAX + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.gram_kind = 0;
    req.schema_len = KVS_ENGINE_MAX_SCHEMA + 1;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.schema_len = 3;
    req.schema = NULL;
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    req.schema_len = 0;
    req.n_prompt = KVS_WIRE_MAX_FRAME / 4;     /* past the frame */
    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err),
                     KVS_ERANGE);
    assert_int_equal(b.len, i);

    kvs_wire_submit_free(&s);
    kvs_buf_free(&b);
}


/* A 1M-token prompt fits one frame. */
static void
test_submit_1m(void **state)
{
    uint32_t           i;
    int32_t           *p;
    kvs_buf_t          b;
    kvs_err_t          err;
    kvs_engine_req_t   req;
    kvs_wire_submit_t  s;

    p = malloc((1u << 20) * sizeof(int32_t));
    assert_non_null(p);

    for (i = 0; i < 1u << 20; i++) {
        p[i] = (int32_t) (i * 2654435761u >> 12);
    }

    memset(&b, 0, sizeof(b));
    memset(&s, 0, sizeof(s));
    memset(&req, 0, sizeof(req));
    req.prompt = p;
    req.n_prompt = 1u << 20;
    req.max_tokens = 1;

    assert_int_equal(kvs_wire_enc_submit(&b, 1, 0, &req, 0, &err), KVS_OK);
    assert_true(b.len < KVS_WIRE_MAX_FRAME);
    assert_int_equal(kvs_wire_dec_submit(b.data, b.len, &s, &err), KVS_OK);
    assert_int_equal(s.req.n_prompt, 1u << 20);
    assert_memory_equal(s.req.prompt, p, (1u << 20) * sizeof(int32_t));

    kvs_wire_submit_free(&s);
    kvs_buf_free(&b);
    free(p);
}


/* DRAIN against its definition in docs/engine-process.md: type 10, no
 * body, id 0. */
static void
test_drain(kvs_buf_t *b)
{
    uint64_t        u;
    kvs_err_t       err;
    kvs_wire_hdr_t  h;
    uint8_t         f[24];
    static const uint8_t  want[16] = {
        16, 0, 0, 0,                          /* len */
        10, 0,                                /* type DRAIN */
        KVS_WIRE_VERSION, 0,                  /* version */
        0, 0, 0, 0, 0, 0, 0, 0                /* id */
    };

    assert_int_equal(KVS_WIRE_DRAIN, 10);
    assert_string_equal(kvs_wire_type_name(KVS_WIRE_DRAIN), "DRAIN");

    b->len = 0;
    assert_int_equal(kvs_wire_enc_drain(b, &err), KVS_OK);
    assert_int_equal(b->len, sizeof(want));
    assert_memory_equal(b->data, want, sizeof(want));
    check_prefixes(b->data, b->len);
    check_mutations(b->data, b->len);

    /* appends, as every encoder does */
    assert_int_equal(kvs_wire_enc_drain(b, &err), KVS_OK);
    assert_int_equal(b->len, 2 * sizeof(want));
    assert_memory_equal(b->data + 16, want, sizeof(want));

    assert_int_equal(kvs_wire_frame(want, sizeof(want), &h, &err), KVS_OK);
    assert_int_equal(h.type, KVS_WIRE_DRAIN);
    assert_int_equal(kvs_wire_dec_drain(want, sizeof(want), &err), KVS_OK);
    assert_int_equal(kvs_wire_dec_empty(want, sizeof(want), &err), KVS_OK);

    /* a body on DRAIN */
    memcpy(f, want, sizeof(want));
    memset(f + 16, 0, 8);
    f[0] = 24;
    assert_int_equal(kvs_wire_dec_drain(f, 24, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "DRAIN"));
    assert_non_null(strstr(err.msg, "after the last field"));

    /* another type handed to the DRAIN decoder, and the reverse */
    f[0] = 16;
    f[4] = KVS_WIRE_PING;
    assert_int_equal(kvs_wire_dec_drain(f, 16, &err), KVS_EFORMAT);
    assert_int_equal(kvs_wire_dec_pong(want, 16, &u, &err), KVS_EFORMAT);

    /* a short buffer, another version */
    assert_int_equal(kvs_wire_dec_drain(want, 15, &err), KVS_EFORMAT);
    memcpy(f, want, sizeof(want));
    f[6] = KVS_WIRE_VERSION + 1;
    assert_int_equal(kvs_wire_frame(f, 16, &h, &err), KVS_EFORMAT);
    assert_int_equal(kvs_wire_dec_drain(f, 16, &err), KVS_EFORMAT);
}


static void
test_small(void **state)
{
    int                 t;
    uint64_t            u;
    kvs_buf_t           b;
    kvs_err_t           err;
    kvs_wire_hdr_t      h;
    kvs_wire_refused_t  r;
    char                msg[600];
    static const kvs_wire_type_t  empty[] = {
        KVS_WIRE_CANCEL, KVS_WIRE_PING, KVS_WIRE_STATS, KVS_WIRE_DRAIN
    };

    memset(&b, 0, sizeof(b));

    for (t = 0; t < 4; t++) {
        b.len = 0;
        assert_int_equal(kvs_wire_enc_empty(&b, empty[t], 99 + t, &err),
                         KVS_OK);
        assert_int_equal(b.len, KVS_WIRE_HDR);
        check_prefixes(b.data, b.len);
        assert_int_equal(kvs_wire_frame(b.data, b.len, &h, &err), KVS_OK);
        assert_int_equal(h.type, empty[t]);
        assert_true(h.id == (uint64_t) (99 + t));
        assert_int_equal(kvs_wire_dec_empty(b.data, b.len, &err), KVS_OK);
    }

    /* a body where none belongs */
    assert_int_equal(kvs_wire_enc_empty(&b, KVS_WIRE_OUT, 1, &err),
                     KVS_EINVAL);

    test_drain(&b);

    b.len = 0;
    assert_int_equal(kvs_wire_enc_pong(&b, 5, UINT64_MAX, &err), KVS_OK);
    check_prefixes(b.data, b.len);
    assert_int_equal(kvs_wire_dec_pong(b.data, b.len, &u, &err), KVS_OK);
    assert_true(u == UINT64_MAX);
    check_mutations(b.data, b.len);

    /* REFUSED: every code; a message longer than the limit is cut */
    for (t = KVS_ERANGE; t <= KVS_EIO; t++) {
        b.len = 0;
        assert_int_equal(kvs_wire_enc_refused(&b, 3, t, "max_tokens: too "
                                              "long", &err), KVS_OK);
        check_prefixes(b.data, b.len);
        assert_int_equal(kvs_wire_dec_refused(b.data, b.len, &r, &err),
                         KVS_OK);
        assert_int_equal(r.code, t);
        assert_string_equal(r.msg, "max_tokens: too long");
    }

    memset(msg, 'm', sizeof(msg) - 1);
    msg[sizeof(msg) - 1] = '\0';
    b.len = 0;
    assert_int_equal(kvs_wire_enc_refused(&b, 3, KVS_EINVAL, msg, &err),
                     KVS_OK);
    assert_int_equal(kvs_wire_dec_refused(b.data, b.len, &r, &err), KVS_OK);
    assert_int_equal(strlen(r.msg), KVS_WIRE_MAX_MSG);
    check_mutations(b.data, b.len);

    assert_int_equal(kvs_wire_enc_refused(&b, 3, 0, "x", &err), KVS_ERANGE);
    assert_int_equal(kvs_wire_enc_refused(&b, 3, -9, "x", &err),
                     KVS_ERANGE);

    kvs_buf_free(&b);
}


static void
fill_out(kvs_engine_out_t *o, size_t n_tok, const char *text, size_t n_lp)
{
    size_t  i;
    int     j;

    memset(o, 0, sizeof(*o));
    o->tokens = calloc(n_tok + 1, sizeof(int32_t));
    o->lp = calloc(n_lp + 1, sizeof(kvs_sample_logprobs_t));
    o->n_tokens = n_tok;
    o->n_lp = n_lp;

    for (i = 0; i < n_tok; i++) {
        o->tokens[i] = (int32_t) (i * 7 + 1);
    }

    kvs_buf_append(&o->text, text, strlen(text));

    for (i = 0; i < n_lp; i++) {
        o->lp[i].token = (int32_t) i;
        o->lp[i].logprob = i == 0 ? -INFINITY : -(float) i / 8;
        o->lp[i].n_top = (int32_t) (i % (KVS_SAMPLE_MAX_TOP_LOGPROBS + 1));
        for (j = 0; j < o->lp[i].n_top; j++) {
            o->lp[i].top_token[j] = j * 3;
            o->lp[i].top_logprob[j] = -(float) j;
        }
    }
}


static void
test_out(void **state)
{
    size_t            i;
    int               j;
    kvs_buf_t         b;
    kvs_err_t         err;
    kvs_wire_out_t    d;
    kvs_engine_out_t  o;
    kvs_wire_times_t  t;

    memset(&b, 0, sizeof(b));
    memset(&d, 0, sizeof(d));

    fill_out(&o, 5, "h\xc3\xa9llo w\xe2\x82\xac", 21);
    o.finish = KVS_FINISH_ERROR;
    o.n_prompt = 11;
    o.n_generated = 5;
    o.n_preempted = 0xffffffffu;
    o.has_cache = 1;
    o.n_cached = 11;
    o.n_cache_created = 7;
    o.n_cached_tier = 9;
    o.n_cached_host = 2;
    o.miss = KVS_RADIX_MISS_OFF;
    o.miss_pos = 10;
    snprintf(o.error, sizeof(o.error), "backend: out of memory");
    o.retry_after = KVS_WIRE_MAX_RETRY_AFTER;
    o.client_fault = 1;
    o.kv_block_us = UINT64_MAX - 1;
    t.recv_ns = 1;
    t.first_ns = 2;
    t.now_ns = UINT64_MAX;

    assert_int_equal(kvs_wire_enc_out(&b, 77, KVS_ENGINE_MAX_N - 1, &o, &t,
                                      &err), KVS_OK);
    check_prefixes(b.data, b.len);
    assert_int_equal(kvs_wire_dec_out(b.data, b.len, &d, &err), KVS_OK);

    assert_int_equal(d.choice, KVS_ENGINE_MAX_N - 1);
    assert_int_equal(d.out.finish, KVS_FINISH_ERROR);
    assert_string_equal(d.out.error, "backend: out of memory");
    assert_int_equal(d.out.retry_after, KVS_WIRE_MAX_RETRY_AFTER);
    assert_int_equal(d.out.client_fault, 1);
    assert_true(d.out.kv_block_us == UINT64_MAX - 1);
    assert_int_equal(d.out.n_prompt, 11);
    assert_int_equal(d.out.n_generated, 5);
    assert_int_equal(d.out.n_preempted, 0xffffffffu);
    assert_int_equal(d.out.has_cache, 1);
    assert_int_equal(d.out.n_cached, 11);
    assert_int_equal(d.out.n_cache_created, 7);
    assert_int_equal(d.out.n_cached_tier, 9);
    assert_int_equal(d.out.n_cached_host, 2);
    assert_int_equal(d.out.miss, KVS_RADIX_MISS_OFF);
    assert_int_equal(d.out.miss_pos, 10);
    assert_true(d.t.recv_ns == 1 && d.t.first_ns == 2
                && d.t.now_ns == UINT64_MAX);
    assert_int_equal(d.out.n_tokens, 5);
    assert_memory_equal(d.out.tokens, o.tokens, 5 * sizeof(int32_t));
    assert_int_equal(d.out.text.len, o.text.len);
    assert_memory_equal(d.out.text.data, o.text.data, o.text.len);
    assert_int_equal(d.out.n_lp, 21);

    for (i = 0; i < 21; i++) {
        assert_int_equal(d.out.lp[i].token, o.lp[i].token);
        assert_true(d.out.lp[i].logprob == o.lp[i].logprob);
        assert_int_equal(d.out.lp[i].n_top, o.lp[i].n_top);
        for (j = 0; j < o.lp[i].n_top; j++) {
            assert_int_equal(d.out.lp[i].top_token[j], j * 3);
            assert_true(d.out.lp[i].top_logprob[j] == -(float) j);
        }
    }

    assert_true(isinf(d.out.lp[0].logprob) && d.out.lp[0].logprob < 0);

    check_mutations(b.data, b.len);

    /* the error travels only with finish error; decoding again replaces,
     * the cache fields too (zero without has_cache) */
    o.finish = KVS_FINISH_STOP;
    o.has_cache = 0;
    b.len = 0;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_OK);
    assert_int_equal(kvs_wire_dec_out(b.data, b.len, &d, &err), KVS_OK);
    assert_int_equal(d.out.finish, KVS_FINISH_STOP);
    assert_int_equal(d.out.has_cache + d.out.n_cached + d.out.miss_pos
                     + d.out.n_cache_created + d.out.miss, 0);
    assert_string_equal(d.out.error, "");
    assert_int_equal(d.out.client_fault, 0);  /* not sent without error */
    assert_int_equal(b.data[16 + 5], 0);
    assert_int_equal(d.out.n_tokens, 5);
    assert_true(d.t.now_ns == 0);

    /* the KV count (version 8) travels in every frame, with a finish or
     * not, little-endian after retry_after (16 + 72); decoding again
     * replaces it */
    assert_true(d.out.kv_block_us == UINT64_MAX - 1);
    o.finish = KVS_FINISH_NONE;
    o.kv_block_us = 0x0102030405060708ULL;
    b.len = 0;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_OK);
    assert_int_equal(b.data[16 + 72], 0x08);
    assert_int_equal(b.data[16 + 79], 0x01);
    assert_int_equal(kvs_wire_dec_out(b.data, b.len, &d, &err), KVS_OK);
    assert_true(d.out.kv_block_us == 0x0102030405060708ULL);

    /* an empty output with no finish is a valid, empty frame */
    kvs_engine_out_free(&o);
    fill_out(&o, 0, "", 0);
    b.len = 0;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_OK);
    assert_int_equal(kvs_wire_dec_out(b.data, b.len, &d, &err), KVS_OK);
    assert_int_equal(d.out.n_tokens + d.out.n_lp + d.out.text.len, 0);
    assert_int_equal(d.out.finish, KVS_FINISH_NONE);
    assert_true(d.out.kv_block_us == 0);

    /* nothing produced at all: no text buffer (NULL), which the encoder
     * must not offset (undefined behaviour; clang's UBSan in the wire
     * fuzzer caught it, gcc's does not check a zero offset) */
    kvs_engine_out_free(&o);
    memset(&o, 0, sizeof(o));
    assert_null(o.text.data);
    b.len = 0;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_OK);
    assert_int_equal(kvs_wire_dec_out(b.data, b.len, &d, &err), KVS_OK);
    assert_int_equal(d.out.n_tokens + d.out.n_lp + d.out.text.len, 0);

    assert_int_equal(kvs_wire_enc_out(&b, 1, KVS_ENGINE_MAX_N, &o, NULL,
                                      &err), KVS_ERANGE);
    o.finish = (kvs_finish_t) 9;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_ERANGE);
    o.finish = KVS_FINISH_NONE;
    o.has_cache = 1;
    o.miss = (kvs_radix_miss_t) (KVS_RADIX_MISS_OFF + 1);
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_ERANGE);
    o.miss = KVS_RADIX_MISS_NONE;
    o.n_cached = 1;                           /* of a 0-token prompt */
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_ERANGE);

    kvs_engine_out_free(&o);
    kvs_engine_out_free(&d.out);
    kvs_buf_free(&b);
}


/* An output past one frame: split, reassembled exactly, characters
 * whole in every frame, finish only on the last. */
static void
test_out_split(void **state)
{
    size_t            i, off, frames, ntok, nlp;
    kvs_buf_t         b, text;
    kvs_err_t         err;
    kvs_wire_hdr_t    h;
    kvs_wire_out_t    d;
    kvs_engine_out_t  o;
    int32_t          *tok;

    memset(&b, 0, sizeof(b));
    memset(&text, 0, sizeof(text));
    memset(&d, 0, sizeof(d));

    fill_out(&o, 3u << 20, "", 1000);         /* 12 MiB of ids */
    for (i = 0; i < (3u << 20); i++) {        /* 9 MiB of 3-byte chars */
        kvs_buf_append(&o.text, "\xe2\x82\xac", 3);
    }
    o.finish = KVS_FINISH_LENGTH;

    assert_int_equal(kvs_wire_enc_out(&b, 9, 2, &o, NULL, &err), KVS_OK);

    tok = malloc(o.n_tokens * sizeof(int32_t));
    ntok = 0;
    nlp = 0;
    frames = 0;

    for (off = 0; off < b.len; off += h.len) {
        assert_int_equal(kvs_wire_frame(b.data + off, b.len - off, &h,
                                        &err), KVS_OK);
        assert_int_equal(kvs_wire_dec_out(b.data + off, h.len, &d, &err),
                         KVS_OK);
        frames++;

        assert_int_equal(d.choice, 2);
        assert_int_equal(d.out.finish, off + h.len == b.len
                                       ? KVS_FINISH_LENGTH
                                       : KVS_FINISH_NONE);

        /* each frame's text starts and ends on a character boundary */
        if (d.out.text.len > 0) {
            assert_int_equal(d.out.text.len % 3, 0);
            assert_int_equal(d.out.text.data[0], 0xe2);
        }

        memcpy(tok + ntok, d.out.tokens, d.out.n_tokens * sizeof(int32_t));
        ntok += d.out.n_tokens;
        nlp += d.out.n_lp;
        kvs_buf_append(&text, d.out.text.data, d.out.text.len);
    }

    assert_true(frames >= 2);
    assert_int_equal(ntok, o.n_tokens);
    assert_memory_equal(tok, o.tokens, ntok * sizeof(int32_t));
    assert_int_equal(nlp, 1000);
    assert_int_equal(text.len, o.text.len);
    assert_memory_equal(text.data, o.text.data, text.len);

    free(tok);
    kvs_buf_free(&text);
    kvs_engine_out_free(&o);
    kvs_engine_out_free(&d.out);
    kvs_buf_free(&b);
}


static void
test_stats(void **state)
{
    uint32_t               i, k;
    kvs_buf_t              b;
    kvs_err_t              err;
    kvs_wire_stats_t      *in, *out;
    kvs_engine_tenant_t   *t;
    kvs_engine_tenants_t  *tn;

    memset(&b, 0, sizeof(b));
    in = calloc(1, sizeof(*in));
    out = calloc(1, sizeof(*out));

    in->clients = 4;
    in->requests = 0xffffffffu;
    in->n_models = 2;

    for (i = 0; i < 2; i++) {
        in->models[i].index = i;
        in->models[i].st.steps = UINT64_MAX - i;
        in->models[i].st.prefill_tokens = 2;
        in->models[i].st.decode_tokens = 3;
        in->models[i].st.preemptions = 4;
        in->models[i].st.kv_copies = 5;
        in->models[i].st.step_ns = 6;
        in->models[i].st.step_ns_max = 7;
        in->models[i].st.decode_only_steps = 8;
        in->models[i].st.decode_only_tokens = 9;
        in->models[i].st.decode_only_ns = 10;
        in->models[i].st.batch_seqs = 11;
        in->models[i].st.running = 12;
        in->models[i].st.waiting = 13;
        in->models[i].st.kv_blocks = 14;
        in->models[i].st.kv_used = 15;
        in->models[i].st.kv_used_max = 16;
        in->models[i].st.block_tokens = 17;
        in->models[i].st.requests = 18;
        in->models[i].st.finished = 19 + i;
        in->models[i].st.cache_query_tokens = 20;
        in->models[i].st.cache_hit_tokens = 21;
        in->models[i].st.cache_evicted_blocks = UINT64_MAX;
        in->models[i].st.cache_blocks = 22;
        in->models[i].st.cache_pinned_blocks = 0xffffffffu;
        in->models[i].st.epoch = 0x0123456789abcdefULL + i;

        for (k = 0; k <= KVS_ENGINE_ITER_BOUNDS; k++) {
            in->models[i].st.iter_tokens[k] = 100 + k + i;
        }
        in->models[i].st.iter_tokens[KVS_ENGINE_ITER_BOUNDS] = UINT64_MAX;
        in->models[i].st.iter_tokens_sum = UINT64_MAX - 1 - i;
        in->models[i].st.pools = i;

        for (k = 0; k < 2; k++) {
            in->models[i].st.pool_max[k] = 0xffffffffu - k;
            in->models[i].st.pool_used[k] = 30 + k;
            in->models[i].st.pool_queued[k] = 32 + k;
            in->models[i].st.pool_admitted[k] = UINT64_MAX - 2 - k;
            in->models[i].st.pool_waited[k] = 34 + k;
            in->models[i].st.pool_wait_ms[k] = 36 + k;
            in->models[i].st.pool_refused[k] = 38 + k;
        }

        /* the disk tier (version 8): what goes on the wire, not its
         * rates nor why a file was discarded (the engine's own) */
        in->models[i].st.cache_tier_hit_tokens = UINT64_MAX - i;
        in->models[i].st.tier.on = 1;
        in->models[i].st.tier.direct = (uint32_t) i % 2;
        in->models[i].st.tier.slots = 40 + i;
        in->models[i].st.tier.used = 41;
        in->models[i].st.tier.loaded_blocks = UINT64_MAX - 1;
        in->models[i].st.tier.corrupt = 42;
        in->models[i].st.tier.load_ns = 43;
        in->models[i].st.tier.spill_dropped = 44;
        in->models[i].st.tier.bytes_read = UINT64_MAX - 2;
        in->models[i].st.lora_adapters = 40 + i;
        in->models[i].st.lora_slots = 41;
        in->models[i].st.lora_resident = 0xffffffffu;
        in->models[i].st.lora_parked = 42;
        in->models[i].st.lora_loads = UINT64_MAX - 3;
        in->models[i].st.lora_evictions = 43;
        in->models[i].st.lora_waited = 44;
        in->models[i].st.lora_wait_ms = UINT64_MAX;
        in->models[i].st.tier.load_waits = 45 + i;
        in->models[i].st.tier.load_wait_ns = UINT64_MAX - 4;
        in->models[i].st.tier.loading = 46;
        in->models[i].st.tier.probes = 47;
        in->models[i].st.lora_load_ns = UINT64_MAX - 5 - i;
        in->models[i].st.lora_install_ns = 48;
        in->models[i].st.lora_install_max_ns = 49 + i;
        in->models[i].st.tier.host_async = 1;
        in->models[i].st.tier.host_copies = 50 + i;
        in->models[i].st.tier.host_copy_wait_ns = UINT64_MAX - 6;
        in->models[i].st.tier.host_copy_full = 51;
        in->models[i].st.tier.host_copy_failed = 52 + i;
    }

    /* model 0: no tenant; model 1: the most, one key empty, one full */
    tn = &in->models[1].tenants;
    tn->n_top = KVS_ENGINE_TOP_TENANTS;
    tn->n_tenants = 0xffffffffu;

    for (k = 0; k < KVS_ENGINE_TOP_TENANTS; k++) {
        t = &tn->top[k];
        t->key_len = k == 1 ? 0 : k == 2 ? KVS_FAIR_MAX_KEY : 32;
        memset(t->key, (int) (0x30 + k), t->key_len);
        t->prefill = UINT64_MAX - k;
        t->decode = 1000 + k;
        t->kv_blocks = 0xffffffffu - k;
        t->n_seqs = k;
    }

    tn->other.prefill = 7;
    tn->other.decode = UINT64_MAX;
    tn->other.kv_blocks = 9;
    tn->other.n_seqs = 0xffffffffu;

    assert_int_equal(kvs_wire_enc_stats(&b, 12, in, &err), KVS_OK);
    check_prefixes(b.data, b.len);
    assert_int_equal(kvs_wire_dec_stats(b.data, b.len, out, &err), KVS_OK);
    assert_memory_equal(out, in, sizeof(*in));
    check_mutations(b.data, b.len);

    kvs_buf_free(&b);
    free(in);
    free(out);
}


/* --- corruptions -------------------------------------------------------- */

static void
test_bad_header(void **state)
{
    uint8_t         f[64];
    kvs_err_t       err;
    kvs_wire_hdr_t  h;

    memset(f, 0, sizeof(f));

    put32(f, 15);                             /* shorter than a header */
    assert_int_equal(kvs_wire_frame(f, 4, &h, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "len"));

    put32(f, KVS_WIRE_MAX_FRAME + 1);         /* known bad at 4 bytes */
    assert_int_equal(kvs_wire_frame(f, 4, &h, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "len"));
    put32(f, 0xffffffffu);
    assert_int_equal(kvs_wire_frame(f, 16, &h, &err), KVS_EFORMAT);

    put32(f, 16);
    f[4] = 0;                                 /* type 0 */
    f[6] = KVS_WIRE_VERSION;
    assert_int_equal(kvs_wire_frame(f, 8, &h, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "type"));
    f[4] = KVS_WIRE_TYPE_MAX + 1;
    assert_int_equal(kvs_wire_frame(f, 16, &h, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "type"));
    f[5] = 1;                                 /* type 256 + 1 */
    f[4] = 1;
    assert_int_equal(kvs_wire_frame(f, 16, &h, &err), KVS_EFORMAT);

    f[5] = 0;
    f[4] = KVS_WIRE_PING;
    f[6] = KVS_WIRE_VERSION + 1;              /* another version */
    assert_int_equal(kvs_wire_frame(f, 16, &h, &err), KVS_EFORMAT);
    assert_non_null(strstr(err.msg, "version"));

    f[6] = KVS_WIRE_VERSION;
    assert_int_equal(kvs_wire_frame(f, 16, &h, &err), KVS_OK);

    /* a body on PING */
    put32(f, 20);
    expect_bad(f, 20, "after the last field");

    /* a decoder handed the wrong type or length */
    put32(f, 16);
    assert_int_equal(kvs_wire_dec_pong(f, 16, (uint64_t *) (f + 32), &err),
                     KVS_EFORMAT);
    assert_int_equal(kvs_wire_dec_empty(f, 12, &err), KVS_EFORMAT);
}


/* A valid SUBMIT with one of everything, to corrupt field by field. */
static void
submit_frame(kvs_buf_t *b)
{
    int32_t            prompt[3] = { 1, 2, 3 }, sid[1] = { 9 };
    size_t             len[1] = { 2 };
    const char        *stop[1] = { "\n\n" };
    kvs_err_t          err;
    kvs_logit_bias_t   bias[1] = { { 5, 1.0f } };
    kvs_engine_req_t   req;

    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = 3;
    req.max_tokens = 4;
    req.n = 2;
    req.sample.top_p = 1.0f;
    req.sample.logit_bias = bias;
    req.sample.n_logit_bias = 1;
    req.stop_ids = sid;
    req.n_stop_ids = 1;
    req.stop = stop;
    req.stop_len = len;
    req.n_stop = 1;
    req.adapter = 7;
    req.scope = "tenant";
    req.scope_len = 6;
    req.tenant = "acme";
    req.tenant_len = 4;
    req.pins[0].n_tokens = 2;
    req.pins[0].ttl_ms = 300000;
    req.n_pins = 1;

    b->len = 0;
    assert_int_equal(kvs_wire_enc_submit(b, 1, 0, &req, 0, &err), KVS_OK);
}


/* Offsets of SUBMIT's body fields (after the 16-byte header). */
#define SUB_N_PROMPT    (16 + 12)
#define SUB_N           (16 + 20)
#define SUB_TEMP        (16 + 24)
#define SUB_LOGPROBS    (16 + 56)
#define SUB_TOPLP       (16 + 57)
#define SUB_IGNORE_EOS  (16 + 58)
#define SUB_GRAM_KIND   (16 + 59)
#define SUB_N_BIAS      (16 + 60)
#define SUB_N_STOP_IDS  (16 + 64)
#define SUB_N_STOP      (16 + 68)
#define SUB_ADAPTER     (16 + 72)
#define SUB_SCOPE_LEN   (16 + 76)
#define SUB_N_PINS      (16 + 78)
#define SUB_RESERVED2   (16 + 79)
#define SUB_TENANT_LEN  (16 + 80)
#define SUB_RESERVED3   (16 + 82)
#define SUB_SCHEMA_LEN  (16 + 84)
#define SUB_STOP_LEN    (16 + 88 + 12 + 8 + 4)
#define SUB_PIN         (SUB_STOP_LEN + 2 + 2 + 6 + 4)


static void
corrupt_submit(size_t at, uint32_t v, size_t width, const char *what)
{
    kvs_buf_t  b;

    memset(&b, 0, sizeof(b));
    submit_frame(&b);

    if (width == 4) {
        put32(b.data + at, v);
    } else if (width == 2) {
        b.data[at] = (uint8_t) v;
        b.data[at + 1] = (uint8_t) (v >> 8);
    } else {
        b.data[at] = (uint8_t) v;
    }

    expect_bad(b.data, b.len, what);
    kvs_buf_free(&b);
}


static void
test_bad_submit(void **state)
{
    float      nan;
    uint32_t   u;
    kvs_buf_t  b;

    memset(&b, 0, sizeof(b));
    submit_frame(&b);
    assert_int_equal(b.len, 16 + 88 + 12 + 8 + 4 + 2 + 2 + 6 + 4 + 8);

    corrupt_submit(SUB_N_PROMPT, 0xffffffffu, 4, "prompt");
    corrupt_submit(SUB_N_PROMPT, 0x40000000u, 4, "prompt");  /* x4 wraps */
    corrupt_submit(SUB_N_PROMPT, 4, 4, "");    /* shifts every later field */
    corrupt_submit(SUB_N, KVS_ENGINE_MAX_N + 1, 4, "n:");

    nan = NAN;
    memcpy(&u, &nan, 4);
    corrupt_submit(SUB_TEMP, u, 4, "temperature");
    corrupt_submit(SUB_TEMP, 0x7f800000u, 4, "temperature");   /* +inf */
    corrupt_submit(SUB_LOGPROBS, 2, 1, "logprobs");
    corrupt_submit(SUB_TOPLP, 21, 1, "top_logprobs");
    corrupt_submit(SUB_IGNORE_EOS, 0xff, 1, "ignore_eos");
    corrupt_submit(SUB_GRAM_KIND, KVS_ENGINE_GRAM_KIND_MAX + 1, 1,
                   "gram_kind");
    corrupt_submit(SUB_SCHEMA_LEN, KVS_ENGINE_MAX_SCHEMA + 1, 4,
                   "schema_len");
    corrupt_submit(SUB_SCHEMA_LEN, 9, 4, "schema");   /* past the end */
    corrupt_submit(SUB_N_BIAS, 0xffffffffu, 4, "n_logit_bias");
    corrupt_submit(SUB_N_BIAS, 2, 4, "");
    corrupt_submit(SUB_N_STOP_IDS, KVS_ENGINE_MAX_STOP_IDS + 1, 4,
                   "n_stop_ids");
    corrupt_submit(SUB_N_STOP, KVS_WIRE_MAX_STOP + 1, 4, "n_stop");
    corrupt_submit(SUB_N_STOP, 2, 4, "stop");
    corrupt_submit(SUB_STOP_LEN, KVS_WIRE_MAX_STOP_LEN + 1, 2, "stop[0]");
    corrupt_submit(SUB_STOP_LEN, 3, 2, "frame ends");  /* shifted */
    corrupt_submit(SUB_STOP_LEN, 1, 2, "pins[0].n_tokens");  /* shifted */
    corrupt_submit(SUB_SCOPE_LEN, KVS_RADIX_MAX_SCOPE + 1, 2, "scope_len");
    corrupt_submit(SUB_SCOPE_LEN, 0xffff, 2, "scope_len");
    corrupt_submit(SUB_SCOPE_LEN, 19, 2, "scope");
    corrupt_submit(SUB_SCOPE_LEN, 5, 2, "pins[0].n_tokens");
    corrupt_submit(SUB_N_PINS, KVS_ENGINE_MAX_PINS + 1, 1, "n_pins");
    corrupt_submit(SUB_N_PINS, 2, 1, "pins");
    corrupt_submit(SUB_N_PINS, 0, 1, "after the last field");
    corrupt_submit(SUB_RESERVED2, 1, 1, "reserved");
    corrupt_submit(SUB_TENANT_LEN, KVS_FAIR_MAX_KEY + 1, 2, "tenant_len");
    corrupt_submit(SUB_TENANT_LEN, 0xffff, 2, "tenant_len");
    corrupt_submit(SUB_TENANT_LEN, 13, 2, "tenant");
    corrupt_submit(SUB_TENANT_LEN, 3, 2, "pins[0].n_tokens");  /* shifted */
    corrupt_submit(SUB_TENANT_LEN, 0, 2, "pins[0].n_tokens");  /* "acme" */
    corrupt_submit(SUB_RESERVED3, 1, 2, "reserved");
    corrupt_submit(SUB_PIN, 0, 4, "pins[0].n_tokens");
    corrupt_submit(SUB_PIN, 4, 4, "pins[0].n_tokens");   /* > n_prompt */
    corrupt_submit(SUB_PIN + 4, 0, 4, "pins[0].ttl_ms");
    corrupt_submit(SUB_PIN + 4, KVS_ENGINE_MAX_PIN_TTL + 1, 4,
                   "pins[0].ttl_ms");

    /* the frame length short by one: the last field ends early */
    put32(b.data, (uint32_t) b.len - 1);
    expect_bad(b.data, b.len - 1, "pins");

    kvs_buf_free(&b);
}


static void
test_bad_others(void **state)
{
    kvs_buf_t          b;
    kvs_err_t          err;
    kvs_wire_out_t     d;
    kvs_engine_out_t   o;
    kvs_wire_hello_t  *he;
    kvs_wire_stats_t  *st;

    memset(&b, 0, sizeof(b));
    memset(&d, 0, sizeof(d));

    /* OUT: fields at 16 + choice 0, finish 4, pad 5, error_len 6,
     * counts at 16 + 44 */
    fill_out(&o, 2, "ab", 1);

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    put32(b.data + 16, KVS_ENGINE_MAX_N);
    expect_bad(b.data, b.len, "choice");

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    b.data[20] = KVS_FINISH_ERROR + 1;
    expect_bad(b.data, b.len, "finish");

    /* client_fault (version 16; the byte was reserved): only with
     * finish error, 0 or 1 */
    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    b.data[21] = 1;
    expect_bad(b.data, b.len, "client_fault");

    o.finish = KVS_FINISH_ERROR;
    snprintf(o.error, sizeof(o.error), "grammar");
    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    assert_int_equal(decode_any(b.data, b.len, &err), KVS_OK);
    b.data[21] = 1;
    assert_int_equal(decode_any(b.data, b.len, &err), KVS_OK);
    b.data[21] = 2;
    expect_bad(b.data, b.len, "client_fault");
    o.client_fault = 2;
    b.len = 0;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err),
                     KVS_ERANGE);
    assert_int_equal(b.len, 0);
    assert_non_null(strstr(err.msg, "client_fault"));
    o.client_fault = 0;
    o.finish = KVS_FINISH_NONE;
    o.error[0] = '\0';

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    b.data[22] = 1;                           /* error with finish none */
    expect_bad(b.data, b.len, "error_len");

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    put32(b.data + 16 + 44, 0xffffffffu);
    expect_bad(b.data, b.len, "tokens");

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    put32(b.data + 16 + 48, 0xfffffff0u);
    expect_bad(b.data, b.len, "text");

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    put32(b.data + 16 + 52, 0x20000000u);
    expect_bad(b.data, b.len, "logprobs");

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    b.data[16 + 88 + 8 + 2 + 8] = KVS_SAMPLE_MAX_TOP_LOGPROBS + 1;
    expect_bad(b.data, b.len, "n_top");

    /* the cache fields at 16 + 56: n_cached, n_cache_created, miss_pos,
     * miss, has_cache, reserved; zero unless has_cache */
    o.n_prompt = 5;
    o.has_cache = 1;
    o.miss = KVS_RADIX_MISS_DIVERGED;
    o.miss_pos = 3;

    b.len = 0;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_OK);
    b.data[16 + 68] = KVS_RADIX_MISS_OFF + 1;
    expect_bad(b.data, b.len, "miss");

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    b.data[16 + 69] = 2;
    expect_bad(b.data, b.len, "has_cache");

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    b.data[16 + 69] = 0;                      /* a miss without has_cache */
    expect_bad(b.data, b.len, "cache");

    /* retry_after (16 + 70): only with finish error, at most 3600 */
    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    b.data[16 + 70] = 1;
    expect_bad(b.data, b.len, "retry_after");

    o.finish = KVS_FINISH_ERROR;
    o.retry_after = KVS_WIRE_MAX_RETRY_AFTER + 1;
    b.len = 0;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err),
                     KVS_ERANGE);
    assert_int_equal(b.len, 0);
    assert_non_null(strstr(err.msg, "retry_after"));

    o.retry_after = KVS_WIRE_MAX_RETRY_AFTER;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_OK);
    b.data[16 + 70] = (uint8_t) (KVS_WIRE_MAX_RETRY_AFTER + 1);
    b.data[16 + 71] = (uint8_t) ((KVS_WIRE_MAX_RETRY_AFTER + 1) >> 8);
    expect_bad(b.data, b.len, "retry_after");
    o.finish = KVS_FINISH_NONE;
    o.retry_after = 0;

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    put32(b.data + 16 + 56, 6);               /* n_cached > n_prompt */
    expect_bad(b.data, b.len, "cache");

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    put32(b.data + 16 + 60, 6);               /* n_cache_created */
    expect_bad(b.data, b.len, "cache");

    b.len = 0;
    kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err);
    put32(b.data + 16 + 64, 6);               /* miss_pos */
    expect_bad(b.data, b.len, "cache");

    /* n_cached_tier (16 + 80, version 8): at most n_cached */
    o.n_cached = 4;
    o.n_cached_tier = 5;
    b.len = 0;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err),
                     KVS_ERANGE);
    assert_int_equal(b.len, 0);

    o.n_cached_tier = 4;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_OK);
    put32(b.data + 16 + 80, 5);
    expect_bad(b.data, b.len, "cache");

    /* n_cached_host (16 + 84, version 14): at most n_cached less the
     * disk's */
    o.n_cached_tier = 3;
    o.n_cached_host = 2;
    b.len = 0;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err),
                     KVS_ERANGE);
    assert_int_equal(b.len, 0);

    o.n_cached_host = 1;
    assert_int_equal(kvs_wire_enc_out(&b, 1, 0, &o, NULL, &err), KVS_OK);
    assert_int_equal(kvs_wire_dec_out(b.data, b.len, &d, &err), KVS_OK);
    assert_int_equal(d.out.n_cached_host, 1);
    kvs_engine_out_free(&d.out);
    put32(b.data + 16 + 84, 2);
    expect_bad(b.data, b.len, "cache");
    o.n_cached = 0;
    o.n_cached_tier = 0;
    o.n_cached_host = 0;

    kvs_engine_out_free(&o);

    /* REFUSED: a code that is not one, a NUL in the message */
    b.len = 0;
    kvs_wire_enc_refused(&b, 1, KVS_EINVAL, "abc", &err);
    put32(b.data + 16, 1);
    expect_bad(b.data, b.len, "code");
    put32(b.data + 16, (uint32_t) KVS_EINVAL);
    b.data[16 + 6 + 1] = '\0';
    expect_bad(b.data, b.len, "NUL");
    b.data[16 + 6 + 1] = 'b';
    b.data[16 + 4] = 0xff;
    b.data[16 + 5] = 0xff;
    expect_bad(b.data, b.len, "msg_len");

    /* HELLO: no models, too many, an empty name, another version */
    he = calloc(1, sizeof(*he));
    he->n_models = 1;
    snprintf(he->models[0].name, sizeof(he->models[0].name), "m");

    b.len = 0;
    kvs_wire_enc_hello(&b, he, &err);
    put32(b.data + 32, 0);
    expect_bad(b.data, b.len, "n_models");
    put32(b.data + 32, KVS_WIRE_MAX_MODELS + 1);
    expect_bad(b.data, b.len, "n_models");
    put32(b.data + 32, 1);
    b.data[36 + 62] = 1;                /* after backend, kv_dtype */
    expect_bad(b.data, b.len, "reserved");
    b.data[36 + 62] = 0;
    b.data[36 + 88] = 0;                /* name_len's low byte */
    expect_bad(b.data, b.len, "name");
    b.data[36 + 88] = 1;
    assert_int_equal(decode_any(b.data, b.len, &err), KVS_OK);

    put32(b.data + 16, KVS_WIRE_VERSION + 1);
    b.data[6] = KVS_WIRE_VERSION + 1;
    assert_int_equal(decode_any(b.data, b.len, &err), KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "version"));
    assert_int_equal(kvs_wire_dec_hello(b.data, b.len, he, &err),
                     KVS_EUNSUPPORTED);
    assert_int_equal(he->version, KVS_WIRE_VERSION + 1);
    free(he);

    /* STATS_REPLY: more models than there can be */
    st = calloc(1, sizeof(*st));
    st->n_models = 1;
    b.len = 0;
    kvs_wire_enc_stats(&b, 1, st, &err);
    put32(b.data + 24, KVS_WIRE_MAX_MODELS + 1);
    expect_bad(b.data, b.len, "n_models");
    put32(b.data + 24, 2);
    expect_bad(b.data, b.len, "index");

    /* STATS_REPLY: its tenants, after the 12-byte head and the stats */
    st->models[0].tenants.n_top = 1;
    st->models[0].tenants.top[0].key_len = 3;
    b.len = 0;
    kvs_wire_enc_stats(&b, 1, st, &err);
    /* a model's stats: 17 counters, 8 gauges, the iteration buckets
     * and their sum, the pools' figures, the disk tier's,
     * the adapters', the host tier's */
    assert_int_equal(b.len, 16 + 12 + STATS_MODEL + 8 + 2 + 3 + 24 + 24);
    put32(b.data + 28 + STATS_MODEL, KVS_ENGINE_TOP_TENANTS + 1);
    expect_bad(b.data, b.len, "n_top");
    put32(b.data + 28 + STATS_MODEL, 2);
    expect_bad(b.data, b.len, "tenant");
    put32(b.data + 28 + STATS_MODEL, 1);
    b.data[28 + STATS_MODEL + 8] = 0x01;      /* key_len 257 */
    b.data[28 + STATS_MODEL + 9] = 0x01;
    expect_bad(b.data, b.len, "key_len");
    b.data[28 + STATS_MODEL + 8] = 4;         /* one byte too many */
    b.data[28 + STATS_MODEL + 9] = 0;
    expect_bad(b.data, b.len, "tenant.n_seqs");
    st->models[0].tenants.n_top = KVS_ENGINE_TOP_TENANTS + 1;
    assert_int_equal(kvs_wire_enc_stats(&b, 1, st, &err), KVS_ERANGE);
    st->models[0].tenants.n_top = 1;
    st->models[0].tenants.top[0].key_len = KVS_FAIR_MAX_KEY + 1;
    assert_int_equal(kvs_wire_enc_stats(&b, 1, st, &err), KVS_ERANGE);
    free(st);

    kvs_buf_free(&b);
}


/* Several frames back to back parse one by one; seeded noise never
 * crashes the decoders. */
static void
test_stream_and_noise(void **state)
{
    size_t          off, n, i;
    uint8_t         noise[4096];
    uint64_t        rng;
    kvs_buf_t       b;
    kvs_err_t       err;
    kvs_wire_hdr_t  h;

    memset(&b, 0, sizeof(b));
    kvs_wire_enc_empty(&b, KVS_WIRE_PING, 1, &err);
    submit_frame(&b);                         /* resets b: rebuild */
    kvs_wire_enc_empty(&b, KVS_WIRE_CANCEL, 2, &err);
    kvs_wire_enc_pong(&b, 3, 4, &err);

    n = 0;
    for (off = 0; off < b.len; off += h.len) {
        assert_int_equal(kvs_wire_frame(b.data + off, b.len - off, &h,
                                        &err), KVS_OK);
        assert_int_equal(decode_any(b.data + off, h.len, &err), KVS_OK);
        n++;
    }

    assert_int_equal(n, 3);

    rng = 12345;
    for (i = 0; i < 20000; i++) {
        for (n = 0; n < sizeof(noise); n++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            noise[n] = (uint8_t) rng;
        }

        /* a plausible header over noise, so bodies get decoded */
        n = 16 + (rng >> 20) % (sizeof(noise) - 16);
        put32(noise, (uint32_t) n);
        noise[4] = (uint8_t) (1 + (rng >> 8) % KVS_WIRE_TYPE_MAX);
        noise[5] = 0;
        noise[6] = KVS_WIRE_VERSION;
        noise[7] = 0;
        (void) decode_any(noise, n, &err);
    }

    kvs_buf_free(&b);
}


/* LORA: the bytes of a small frame written out by hand, a round trip
 * of the most adapters with the longest paths, and what both sides
 * refuse. */
static void
test_lora(void **state)
{
    char              *big;
    size_t             n;
    uint8_t           *f;
    uint32_t           i;
    kvs_buf_t          b;
    kvs_err_t          err;
    kvs_wire_lora_t   *m, *d;
    static const uint8_t  want[] = {
        54, 0, 0, 0,                          /* len */
        13, 0,                                /* type LORA */
        KVS_WIRE_VERSION, 0,                  /* version */
        0, 0, 0, 0, 0, 0, 0, 0,               /* id */
        0, 0, 0, 0,                           /* model */
        2, 0, 0, 0,                           /* n */
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,   /* epoch */
        3, 0, 0, 0, '/', 'a', 'b',            /* path */
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        3, 0, 0, 0, '/', 'c', 'd'
    };

    (void) state;

    m = calloc(1, sizeof(*m));
    d = calloc(1, sizeof(*d));
    big = malloc(KVS_WIRE_MAX_PATH + 1);
    assert_non_null(m);
    assert_non_null(d);
    assert_non_null(big);
    memset(&b, 0, sizeof(b));

    assert_int_equal(KVS_WIRE_LORA, 13);
    assert_int_equal(KVS_WIRE_VERSION, 16);
    assert_string_equal(kvs_wire_type_name(KVS_WIRE_LORA), "LORA");

    m->n = 2;
    m->ad[0].epoch = 0x0123456789abcdefULL;
    m->ad[0].path = "/ab";
    m->ad[0].path_len = 3;
    m->ad[1].epoch = UINT64_MAX;
    m->ad[1].path = "/cd";
    m->ad[1].path_len = 3;
    assert_int_equal(kvs_wire_enc_lora(&b, m, &err), KVS_OK);
    assert_int_equal(b.len, sizeof(want));
    assert_memory_equal(b.data, want, sizeof(want));
    check_prefixes(b.data, b.len);
    check_mutations(b.data, b.len);

    assert_int_equal(kvs_wire_dec_lora(want, sizeof(want), d, &err), KVS_OK);
    assert_int_equal(d->model, 0);
    assert_int_equal(d->n, 2);
    assert_true(d->ad[0].epoch == 0x0123456789abcdefULL);
    assert_true(d->ad[1].epoch == UINT64_MAX);
    assert_int_equal(d->ad[1].path_len, 3);
    assert_memory_equal(d->ad[1].path, "/cd", 3);
    assert_ptr_equal(d->ad[0].path, (const char *) want + 36);

    /* none, and the most with the longest paths: within one frame */
    b.len = 0;
    m->n = 0;
    m->model = KVS_WIRE_MAX_MODELS - 1;
    assert_int_equal(kvs_wire_enc_lora(&b, m, &err), KVS_OK);
    assert_int_equal(b.len, 24);
    assert_int_equal(kvs_wire_dec_lora(b.data, b.len, d, &err), KVS_OK);
    assert_int_equal(d->n, 0);
    assert_int_equal(d->model, KVS_WIRE_MAX_MODELS - 1);

    memset(big, 'p', KVS_WIRE_MAX_PATH);
    m->n = KVS_ENGINE_MAX_LORAS;
    for (i = 0; i < m->n; i++) {
        m->ad[i].epoch = i * 0x9e3779b97f4a7c15ULL;
        m->ad[i].path = big;
        m->ad[i].path_len = KVS_WIRE_MAX_PATH - (i % 3);
    }
    b.len = 0;
    assert_int_equal(kvs_wire_enc_lora(&b, m, &err), KVS_OK);
    assert_int_equal(kvs_wire_dec_lora(b.data, b.len, d, &err), KVS_OK);
    assert_int_equal(d->n, KVS_ENGINE_MAX_LORAS);
    for (i = 0; i < d->n; i++) {
        assert_true(d->ad[i].epoch == i * 0x9e3779b97f4a7c15ULL);
        assert_int_equal(d->ad[i].path_len, KVS_WIRE_MAX_PATH - (i % 3));
        assert_memory_equal(d->ad[i].path, big, d->ad[i].path_len);
    }
    check_mutations(b.data, b.len);

    /* the encoder refuses what the decoder would, leaving b as it was */
    n = b.len;
    m->n = KVS_ENGINE_MAX_LORAS + 1;
    assert_int_equal(kvs_wire_enc_lora(&b, m, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "n: 257 adapters"));
    m->n = 1;
    m->model = KVS_WIRE_MAX_MODELS;
    assert_int_equal(kvs_wire_enc_lora(&b, m, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "model"));
    m->model = 0;
    m->ad[0].path_len = KVS_WIRE_MAX_PATH + 1;
    assert_int_equal(kvs_wire_enc_lora(&b, m, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "adapter 1: path of 4096 bytes"));
    m->ad[0].path_len = 0;
    assert_int_equal(kvs_wire_enc_lora(&b, m, &err), KVS_ERANGE);
    m->ad[0].path = "a\0b";
    m->ad[0].path_len = 3;
    assert_int_equal(kvs_wire_enc_lora(&b, m, &err), KVS_ERANGE);
    assert_non_null(strstr(err.msg, "NUL"));
    assert_int_equal(b.len, n);

    /* ... and the decoder: each field of a copy of want made bad */
    f = malloc(sizeof(want) + 8);
    assert_non_null(f);

    memcpy(f, want, sizeof(want));
    put32(f + 16, KVS_WIRE_MAX_MODELS);
    expect_bad(f, sizeof(want), "model");

    memcpy(f, want, sizeof(want));
    put32(f + 20, KVS_ENGINE_MAX_LORAS + 1);
    expect_bad(f, sizeof(want), "n: 257 adapters");

    memcpy(f, want, sizeof(want));
    put32(f + 20, 3);                 /* a third that is not there */
    expect_bad(f, sizeof(want), "LORA: adapters: 3 entries");

    memcpy(f, want, sizeof(want));
    put32(f + 20, 0x40000000);        /* counts past the frame */
    expect_bad(f, sizeof(want), "adapters");

    memcpy(f, want, sizeof(want));
    put32(f + 32, 0);
    expect_bad(f, sizeof(want), "adapter 1: path of 0 bytes");

    memcpy(f, want, sizeof(want));
    put32(f + 32, 0xffffffff);
    expect_bad(f, sizeof(want), "path: frame ends");

    memcpy(f, want, sizeof(want));
    f[52] = '\0';
    expect_bad(f, sizeof(want), "adapter 2: path contains a NUL");

    memcpy(f, want, sizeof(want));
    put32(f + 20, 1);                 /* the second left over */
    expect_bad(f, sizeof(want), "after the last field");

    memcpy(f, want, sizeof(want));
    f[8] = 1;
    expect_bad(f, sizeof(want), "LORA: id: not 0");

    /* a worker's frame that an engine of version 10 could not read */
    memcpy(f, want, sizeof(want));
    f[6] = 10;
    expect_bad(f, sizeof(want), "version");

    free(f);
    free(big);
    free(m);
    free(d);
    kvs_buf_free(&b);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_submit),
        cmocka_unit_test(test_submit_1m),
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_out),
        cmocka_unit_test(test_out_split),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_submit),
        cmocka_unit_test(test_bad_others),
        cmocka_unit_test(test_stream_and_noise),
        cmocka_unit_test(test_lora),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
