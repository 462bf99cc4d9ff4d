/*
 * kvs_wire: encoding and decoding of the engine process's frames (see
 * kvs_wire.h for the header and docs/engine-process.md for the bodies).
 *
 * Encoders compute a frame's exact size first, checking every limit the
 * decoder checks, reserve it once and then write: so a failure leaves the
 * buffer untouched and a frame is never half appended.  Decoders read
 * through a cursor that knows how many bytes of the body are left; every
 * count is checked against what is left before anything is copied, with
 * the division done on the left side so count * size cannot overflow.
 * Only src/base is called, so the fuzz target links this file alone.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_wire.h"

#define KVS_WIRE_SUBMIT_FIXED 72
#define KVS_WIRE_OUT_FIXED    (4 + 4 + 12 + 24 + 12)
#define KVS_WIRE_LP_FIXED     (4 + 4 + 1)
#define KVS_WIRE_LP_TOP       (4 + 4)
#define KVS_WIRE_STATS_REC    (4 + 13 * 8 + 6 * 4)

typedef struct {
    const uint8_t  *p;
    size_t          left;             /* body bytes not yet read */
    const char     *what;             /* message type name */
    kvs_err_t      *err;
} kvs_wire_rd_t;


static const char  *kvs_wire_names[] = {
    "?", "HELLO", "SUBMIT", "CANCEL", "REFUSED", "OUT", "PING", "PONG",
    "STATS", "STATS_REPLY", "DRAIN"
};


const char *
kvs_wire_type_name(unsigned type)
{
    return type <= KVS_WIRE_TYPE_MAX ? kvs_wire_names[type] : "?";
}


/* --- little-endian primitives ------------------------------------------ */

static uint8_t *
kvs_wire_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);

    return p + 2;
}


static uint8_t *
kvs_wire_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
    p[2] = (uint8_t) (v >> 16);
    p[3] = (uint8_t) (v >> 24);

    return p + 4;
}


static uint8_t *
kvs_wire_put64(uint8_t *p, uint64_t v)
{
    p = kvs_wire_put32(p, (uint32_t) v);

    return kvs_wire_put32(p, (uint32_t) (v >> 32));
}


static uint8_t *
kvs_wire_putf(uint8_t *p, float f)
{
    uint32_t  v;

    memcpy(&v, &f, sizeof(v));

    return kvs_wire_put32(p, v);
}


static uint8_t *
kvs_wire_putb(uint8_t *p, const void *s, size_t n)
{
    if (n > 0) {
        memcpy(p, s, n);
    }

    return p + n;
}


static uint16_t
kvs_wire_get16(const uint8_t *p)
{
    return (uint16_t) (p[0] | (p[1] << 8));
}


static uint32_t
kvs_wire_get32(const uint8_t *p)
{
    return (uint32_t) p[0] | ((uint32_t) p[1] << 8)
           | ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}


static uint64_t
kvs_wire_get64(const uint8_t *p)
{
    return (uint64_t) kvs_wire_get32(p)
           | ((uint64_t) kvs_wire_get32(p + 4) << 32);
}


/* --- decoding cursor ----------------------------------------------------- */

static int
kvs_wire_need(kvs_wire_rd_t *rd, size_t n, const char *field)
{
    if (rd->left < n) {
        return kvs_err_set(rd->err, KVS_EFORMAT, "%s: %s: frame ends "
                           "(needs %zu bytes, %zu left)", rd->what, field,
                           n, rd->left);
    }

    return KVS_OK;
}


/* Checks that count elements of size bytes each fit in what is left. */
static int
kvs_wire_need_n(kvs_wire_rd_t *rd, uint64_t count, size_t size,
    const char *field)
{
    if (count > rd->left / size) {
        return kvs_err_set(rd->err, KVS_EFORMAT, "%s: %s: %llu entries of "
                           "%zu bytes do not fit the %zu bytes left",
                           rd->what, field, (unsigned long long) count, size,
                           rd->left);
    }

    return KVS_OK;
}


static int
kvs_wire_u8(kvs_wire_rd_t *rd, const char *field, uint8_t *v)
{
    if (kvs_wire_need(rd, 1, field) != KVS_OK) {
        return KVS_EFORMAT;
    }

    *v = rd->p[0];
    rd->p++;
    rd->left--;

    return KVS_OK;
}


static int
kvs_wire_u16(kvs_wire_rd_t *rd, const char *field, uint16_t *v)
{
    if (kvs_wire_need(rd, 2, field) != KVS_OK) {
        return KVS_EFORMAT;
    }

    *v = kvs_wire_get16(rd->p);
    rd->p += 2;
    rd->left -= 2;

    return KVS_OK;
}


static int
kvs_wire_u32(kvs_wire_rd_t *rd, const char *field, uint32_t *v)
{
    if (kvs_wire_need(rd, 4, field) != KVS_OK) {
        return KVS_EFORMAT;
    }

    *v = kvs_wire_get32(rd->p);
    rd->p += 4;
    rd->left -= 4;

    return KVS_OK;
}


static int
kvs_wire_i32(kvs_wire_rd_t *rd, const char *field, int32_t *v)
{
    uint32_t  u;

    if (kvs_wire_u32(rd, field, &u) != KVS_OK) {
        return KVS_EFORMAT;
    }

    memcpy(v, &u, sizeof(u));

    return KVS_OK;
}


static int
kvs_wire_u64(kvs_wire_rd_t *rd, const char *field, uint64_t *v)
{
    if (kvs_wire_need(rd, 8, field) != KVS_OK) {
        return KVS_EFORMAT;
    }

    *v = kvs_wire_get64(rd->p);
    rd->p += 8;
    rd->left -= 8;

    return KVS_OK;
}


/* A float any value of (logprobs: -inf is a real answer). */
static int
kvs_wire_f32(kvs_wire_rd_t *rd, const char *field, float *v)
{
    uint32_t  u;

    if (kvs_wire_u32(rd, field, &u) != KVS_OK) {
        return KVS_EFORMAT;
    }

    memcpy(v, &u, sizeof(u));

    return KVS_OK;
}


static int
kvs_wire_finite(kvs_wire_rd_t *rd, const char *field, float *v)
{
    if (kvs_wire_f32(rd, field, v) != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (!isfinite(*v)) {
        return kvs_err_set(rd->err, KVS_EFORMAT, "%s: %s: not a finite "
                           "number", rd->what, field);
    }

    return KVS_OK;
}


static int
kvs_wire_flag(kvs_wire_rd_t *rd, const char *field, int *v)
{
    uint8_t  u;

    if (kvs_wire_u8(rd, field, &u) != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (u > 1) {
        return kvs_err_set(rd->err, KVS_EFORMAT, "%s: %s: must be 0 or 1 "
                           "(got %u)", rd->what, field, u);
    }

    *v = u;

    return KVS_OK;
}


/* Copies len bytes into s[len + 1] and NUL-terminates; a NUL inside
 * would make the C string lie about its length. */
static int
kvs_wire_str(kvs_wire_rd_t *rd, const char *field, size_t len, char *s)
{
    if (kvs_wire_need(rd, len, field) != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (len > 0 && memchr(rd->p, '\0', len) != NULL) {
        return kvs_err_set(rd->err, KVS_EFORMAT, "%s: %s: contains a NUL "
                           "byte", rd->what, field);
    }

    memcpy(s, rd->p, len);
    s[len] = '\0';
    rd->p += len;
    rd->left -= len;

    return KVS_OK;
}


static int
kvs_wire_start(kvs_wire_rd_t *rd, const uint8_t *f, size_t f_len,
    unsigned type, kvs_err_t *err)
{
    kvs_wire_hdr_t  h;

    rd->what = kvs_wire_type_name(type);
    rd->err = err;

    if (f_len < KVS_WIRE_HDR
        || kvs_wire_frame(f, f_len, &h, err) != KVS_OK
        || h.len != f_len || h.type != type)
    {
        return kvs_err_set(err, KVS_EFORMAT, "%s: not one whole frame of "
                           "this type", rd->what);
    }

    rd->p = f + KVS_WIRE_HDR;
    rd->left = f_len - KVS_WIRE_HDR;

    return KVS_OK;
}


static int
kvs_wire_end(kvs_wire_rd_t *rd)
{
    if (rd->left != 0) {
        return kvs_err_set(rd->err, KVS_EFORMAT, "%s: %zu bytes after the "
                           "last field", rd->what, rd->left);
    }

    return KVS_OK;
}


/* --- frames ------------------------------------------------------------ */

int
kvs_wire_frame(const uint8_t *p, size_t n, kvs_wire_hdr_t *h,
    kvs_err_t *err)
{
    uint32_t  len;
    uint16_t  type, version;

    if (n < 4) {
        return KVS_WIRE_AGAIN;
    }

    len = kvs_wire_get32(p);

    if (len < KVS_WIRE_HDR) {
        return kvs_err_set(err, KVS_EFORMAT, "frame: len: %u is shorter "
                           "than the %d-byte header", len, KVS_WIRE_HDR);
    }

    if (len > KVS_WIRE_MAX_FRAME) {
        return kvs_err_set(err, KVS_EFORMAT, "frame: len: %u exceeds the "
                           "%u-byte limit", len, KVS_WIRE_MAX_FRAME);
    }

    if (n < 8) {
        return KVS_WIRE_AGAIN;
    }

    type = kvs_wire_get16(p + 4);
    version = kvs_wire_get16(p + 6);

    if (type == 0 || type > KVS_WIRE_TYPE_MAX) {
        return kvs_err_set(err, KVS_EFORMAT, "frame: type: unknown message "
                           "type %u", type);
    }

    /* HELLO tells the version; any other frame must be in ours */
    if (version != KVS_WIRE_VERSION && type != KVS_WIRE_HELLO) {
        return kvs_err_set(err, KVS_EFORMAT, "frame: version: %s of "
                           "version %u, we speak %d", kvs_wire_names[type],
                           version, KVS_WIRE_VERSION);
    }

    if (n < len) {
        return KVS_WIRE_AGAIN;
    }

    h->len = len;
    h->type = type;
    h->version = version;
    h->id = kvs_wire_get64(p + 8);

    return KVS_OK;
}


/* Reserves a frame of len bytes at the end of b and writes its header;
 * *pp is where the body goes.  KVS_ERANGE past the frame limit,
 * KVS_ENOMEM when b cannot grow. */
static int
kvs_wire_begin(kvs_buf_t *b, size_t len, unsigned type, uint64_t id,
    uint8_t **pp, kvs_err_t *err)
{
    uint8_t  *p;

    if (len > KVS_WIRE_MAX_FRAME) {
        return kvs_err_set(err, KVS_ERANGE, "%s: %zu bytes exceed the "
                           "%u-byte frame limit", kvs_wire_type_name(type),
                           len, KVS_WIRE_MAX_FRAME);
    }

    if (kvs_buf_reserve(b, len) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "%s: out of memory for %zu "
                           "bytes", kvs_wire_type_name(type), len);
    }

    p = b->data + b->len;
    p = kvs_wire_put32(p, (uint32_t) len);
    p = kvs_wire_put16(p, (uint16_t) type);
    p = kvs_wire_put16(p, KVS_WIRE_VERSION);
    *pp = kvs_wire_put64(p, id);

    return KVS_OK;
}


/* Commits the frame begun at the end of b. */
static void
kvs_wire_commit(kvs_buf_t *b, const uint8_t *end)
{
    b->len = (size_t) (end - b->data);
}


int
kvs_wire_enc_empty(kvs_buf_t *b, kvs_wire_type_t type, uint64_t id,
    kvs_err_t *err)
{
    int       rc;
    uint8_t  *p;

    if (type != KVS_WIRE_CANCEL && type != KVS_WIRE_PING
        && type != KVS_WIRE_STATS && type != KVS_WIRE_DRAIN)
    {
        return kvs_err_set(err, KVS_EINVAL, "type: %s has a body",
                           kvs_wire_type_name(type));
    }

    rc = kvs_wire_begin(b, KVS_WIRE_HDR, type, id, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_dec_empty(const uint8_t *f, size_t f_len, kvs_err_t *err)
{
    kvs_wire_rd_t  rd;

    if (f_len < KVS_WIRE_HDR) {
        return kvs_err_set(err, KVS_EFORMAT, "frame: shorter than a header");
    }

    if (kvs_wire_start(&rd, f, f_len, kvs_wire_get16(f + 4), err) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    return kvs_wire_end(&rd);
}


int
kvs_wire_enc_drain(kvs_buf_t *b, kvs_err_t *err)
{
    return kvs_wire_enc_empty(b, KVS_WIRE_DRAIN, 0, err);
}


int
kvs_wire_dec_drain(const uint8_t *f, size_t f_len, kvs_err_t *err)
{
    kvs_wire_rd_t  rd;

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_DRAIN, err) != KVS_OK) {
        return KVS_EFORMAT;
    }

    return kvs_wire_end(&rd);
}


/* --- HELLO --------------------------------------------------------------- */

int
kvs_wire_enc_hello(kvs_buf_t *b, const kvs_wire_hello_t *m, kvs_err_t *err)
{
    int                      rc;
    size_t                   len, nl;
    uint8_t                 *p;
    uint32_t                 i;
    const kvs_wire_model_t  *md;

    if (m->n_models == 0 || m->n_models > KVS_WIRE_MAX_MODELS) {
        return kvs_err_set(err, KVS_ERANGE, "HELLO: n_models: %u is not in "
                           "1..%d", m->n_models, KVS_WIRE_MAX_MODELS);
    }

    len = KVS_WIRE_HDR + 20;

    for (i = 0; i < m->n_models; i++) {
        nl = strnlen(m->models[i].name, KVS_WIRE_MAX_NAME + 1);
        if (nl == 0 || nl > KVS_WIRE_MAX_NAME) {
            return kvs_err_set(err, KVS_ERANGE, "HELLO: models[%u].name: "
                               "must be 1..%d bytes", i, KVS_WIRE_MAX_NAME);
        }

        len += 20 + 16 + 2 + nl;
    }

    rc = kvs_wire_begin(b, len, KVS_WIRE_HELLO, 0, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* the version always first: the one field every version shares */
    p = kvs_wire_put32(p, KVS_WIRE_VERSION);
    p = kvs_wire_put32(p, m->pid);
    p = kvs_wire_put64(p, m->incarnation);
    p = kvs_wire_put32(p, m->n_models);

    for (i = 0; i < m->n_models; i++) {
        md = &m->models[i];
        nl = strlen(md->name);
        p = kvs_wire_put32(p, md->index);
        p = kvs_wire_put32(p, md->n_ctx);
        p = kvs_wire_put32(p, md->n_vocab);
        p = kvs_wire_put32(p, md->block_tokens);
        p = kvs_wire_put32(p, md->kv_blocks);
        p = kvs_wire_put64(p, md->file_size);
        p = kvs_wire_put64(p, (uint64_t) md->mtime);
        p = kvs_wire_put16(p, (uint16_t) nl);
        p = kvs_wire_putb(p, md->name, nl);
    }

    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_dec_hello(const uint8_t *f, size_t f_len, kvs_wire_hello_t *m,
    kvs_err_t *err)
{
    uint16_t           nl;
    uint32_t           i;
    uint64_t           u;
    kvs_wire_rd_t      rd;
    kvs_wire_model_t  *md;

    memset(m, 0, sizeof(kvs_wire_hello_t));

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_HELLO, err) != KVS_OK
        || kvs_wire_u32(&rd, "version", &m->version) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (m->version != KVS_WIRE_VERSION) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "HELLO: version: the "
                           "engine speaks version %u, we speak %d",
                           m->version, KVS_WIRE_VERSION);
    }

    if (kvs_wire_get16(f + 6) != m->version) {
        return kvs_err_set(err, KVS_EFORMAT, "HELLO: version: header says "
                           "%u, body %u", kvs_wire_get16(f + 6), m->version);
    }

    if (kvs_wire_u32(&rd, "pid", &m->pid) != KVS_OK
        || kvs_wire_u64(&rd, "incarnation", &m->incarnation) != KVS_OK
        || kvs_wire_u32(&rd, "n_models", &m->n_models) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (m->n_models == 0 || m->n_models > KVS_WIRE_MAX_MODELS) {
        return kvs_err_set(err, KVS_EFORMAT, "HELLO: n_models: %u is not "
                           "in 1..%d", m->n_models, KVS_WIRE_MAX_MODELS);
    }

    for (i = 0; i < m->n_models; i++) {
        md = &m->models[i];

        if (kvs_wire_u32(&rd, "index", &md->index) != KVS_OK
            || kvs_wire_u32(&rd, "n_ctx", &md->n_ctx) != KVS_OK
            || kvs_wire_u32(&rd, "n_vocab", &md->n_vocab) != KVS_OK
            || kvs_wire_u32(&rd, "block_tokens", &md->block_tokens)
               != KVS_OK
            || kvs_wire_u32(&rd, "kv_blocks", &md->kv_blocks) != KVS_OK
            || kvs_wire_u64(&rd, "file_size", &md->file_size) != KVS_OK
            || kvs_wire_u64(&rd, "mtime", &u) != KVS_OK
            || kvs_wire_u16(&rd, "name_len", &nl) != KVS_OK)
        {
            return KVS_EFORMAT;
        }

        md->mtime = (int64_t) u;

        if (nl == 0 || nl > KVS_WIRE_MAX_NAME) {
            return kvs_err_set(err, KVS_EFORMAT, "HELLO: models[%u].name: "
                               "%u bytes, not in 1..%d", i, nl,
                               KVS_WIRE_MAX_NAME);
        }

        if (kvs_wire_str(&rd, "name", nl, md->name) != KVS_OK) {
            return KVS_EFORMAT;
        }
    }

    return kvs_wire_end(&rd);
}


/* --- SUBMIT -------------------------------------------------------------- */

int
kvs_wire_enc_submit(kvs_buf_t *b, uint64_t id, uint32_t model,
    const kvs_engine_req_t *req, uint64_t submit_ns, kvs_err_t *err)
{
    int                         rc;
    size_t                      len, i;
    uint8_t                    *p;
    const kvs_sample_params_t  *s;

    s = &req->sample;

    if (req->n > KVS_ENGINE_MAX_N) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: n: %u exceeds %d",
                           req->n, KVS_ENGINE_MAX_N);
    }

    if (s->n_logit_bias > KVS_WIRE_MAX_BIAS) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: logit_bias: %u entries "
                           "exceed %d", s->n_logit_bias, KVS_WIRE_MAX_BIAS);
    }

    if (req->n_stop_ids > KVS_ENGINE_MAX_STOP_IDS) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: stop_ids: %u exceed %d",
                           req->n_stop_ids, KVS_ENGINE_MAX_STOP_IDS);
    }

    if (req->n_stop > KVS_WIRE_MAX_STOP) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: stop: %u strings "
                           "exceed %d", req->n_stop, KVS_WIRE_MAX_STOP);
    }

    if (!isfinite(s->temperature) || !isfinite(s->top_p)
        || !isfinite(s->min_p) || !isfinite(s->presence_penalty)
        || !isfinite(s->frequency_penalty))
    {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: sampling parameters "
                           "must be finite numbers");
    }

    if (s->top_logprobs < 0
        || s->top_logprobs > KVS_SAMPLE_MAX_TOP_LOGPROBS)
    {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: top_logprobs: %d is "
                           "not in 0..%d", s->top_logprobs,
                           KVS_SAMPLE_MAX_TOP_LOGPROBS);
    }

    /* the prompt alone can pass the frame limit: check before summing */
    if (req->n_prompt > KVS_WIRE_MAX_FRAME / 4) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: prompt: %u ids exceed "
                           "the frame limit", req->n_prompt);
    }

    len = KVS_WIRE_HDR + KVS_WIRE_SUBMIT_FIXED + (size_t) req->n_prompt * 4
          + (size_t) s->n_logit_bias * 8 + (size_t) req->n_stop_ids * 4;

    for (i = 0; i < req->n_stop; i++) {
        if (req->stop_len[i] > KVS_WIRE_MAX_STOP_LEN) {
            return kvs_err_set(err, KVS_ERANGE, "SUBMIT: stop[%zu]: %zu "
                               "bytes exceed %d", i, req->stop_len[i],
                               KVS_WIRE_MAX_STOP_LEN);
        }

        len += 2 + req->stop_len[i];
    }

    rc = kvs_wire_begin(b, len, KVS_WIRE_SUBMIT, id, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    p = kvs_wire_put32(p, model);
    p = kvs_wire_put64(p, submit_ns);
    p = kvs_wire_put32(p, req->n_prompt);
    p = kvs_wire_put32(p, req->max_tokens);
    p = kvs_wire_put32(p, req->n);
    p = kvs_wire_putf(p, s->temperature);
    p = kvs_wire_put32(p, (uint32_t) s->top_k);
    p = kvs_wire_putf(p, s->top_p);
    p = kvs_wire_putf(p, s->min_p);
    p = kvs_wire_put64(p, s->seed);
    p = kvs_wire_putf(p, s->presence_penalty);
    p = kvs_wire_putf(p, s->frequency_penalty);
    *p++ = s->logprobs ? 1 : 0;
    *p++ = (uint8_t) s->top_logprobs;
    *p++ = req->ignore_eos ? 1 : 0;
    *p++ = 0;
    p = kvs_wire_put32(p, s->n_logit_bias);
    p = kvs_wire_put32(p, req->n_stop_ids);
    p = kvs_wire_put32(p, req->n_stop);

    for (i = 0; i < req->n_prompt; i++) {
        p = kvs_wire_put32(p, (uint32_t) req->prompt[i]);
    }

    for (i = 0; i < s->n_logit_bias; i++) {
        p = kvs_wire_put32(p, (uint32_t) s->logit_bias[i].token);
        p = kvs_wire_putf(p, s->logit_bias[i].bias);
    }

    for (i = 0; i < req->n_stop_ids; i++) {
        p = kvs_wire_put32(p, (uint32_t) req->stop_ids[i]);
    }

    for (i = 0; i < req->n_stop; i++) {
        p = kvs_wire_put16(p, (uint16_t) req->stop_len[i]);
        p = kvs_wire_putb(p, req->stop[i], req->stop_len[i]);
    }

    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_dec_submit(const uint8_t *f, size_t f_len, kvs_wire_submit_t *m,
    kvs_err_t *err)
{
    int                   v;
    size_t                off;
    uint8_t               u8, pad;
    uint16_t              sl;
    uint32_t              i, n_bias, n_sid, n_stop, n_prompt;
    kvs_wire_rd_t         rd;
    kvs_engine_req_t     *r;
    kvs_sample_params_t  *s;

    r = &m->req;
    s = &r->sample;
    memset(r, 0, sizeof(kvs_engine_req_t));
    m->model = 0;
    m->submit_ns = 0;

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_SUBMIT, err) != KVS_OK
        || kvs_wire_u32(&rd, "model", &m->model) != KVS_OK
        || kvs_wire_u64(&rd, "submit_ns", &m->submit_ns) != KVS_OK
        || kvs_wire_u32(&rd, "n_prompt", &n_prompt) != KVS_OK
        || kvs_wire_u32(&rd, "max_tokens", &r->max_tokens) != KVS_OK
        || kvs_wire_u32(&rd, "n", &r->n) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (r->n > KVS_ENGINE_MAX_N) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: n: %u exceeds %d",
                           r->n, KVS_ENGINE_MAX_N);
    }

    if (kvs_wire_finite(&rd, "temperature", &s->temperature) != KVS_OK
        || kvs_wire_i32(&rd, "top_k", &s->top_k) != KVS_OK
        || kvs_wire_finite(&rd, "top_p", &s->top_p) != KVS_OK
        || kvs_wire_finite(&rd, "min_p", &s->min_p) != KVS_OK
        || kvs_wire_u64(&rd, "seed", &s->seed) != KVS_OK
        || kvs_wire_finite(&rd, "presence_penalty", &s->presence_penalty)
           != KVS_OK
        || kvs_wire_finite(&rd, "frequency_penalty",
                           &s->frequency_penalty) != KVS_OK
        || kvs_wire_flag(&rd, "logprobs", &s->logprobs) != KVS_OK
        || kvs_wire_u8(&rd, "top_logprobs", &u8) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (u8 > KVS_SAMPLE_MAX_TOP_LOGPROBS) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: top_logprobs: %u "
                           "exceeds %d", u8, KVS_SAMPLE_MAX_TOP_LOGPROBS);
    }

    s->top_logprobs = u8;

    if (kvs_wire_flag(&rd, "ignore_eos", &v) != KVS_OK
        || kvs_wire_u8(&rd, "reserved", &pad) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    r->ignore_eos = v;

    if (pad != 0) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: reserved: must be 0 "
                           "(got %u)", pad);
    }

    if (kvs_wire_u32(&rd, "n_logit_bias", &n_bias) != KVS_OK
        || kvs_wire_u32(&rd, "n_stop_ids", &n_sid) != KVS_OK
        || kvs_wire_u32(&rd, "n_stop", &n_stop) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (n_bias > KVS_WIRE_MAX_BIAS) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: n_logit_bias: %u "
                           "exceeds %d", n_bias, KVS_WIRE_MAX_BIAS);
    }

    if (n_sid > KVS_ENGINE_MAX_STOP_IDS) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: n_stop_ids: %u "
                           "exceeds %d", n_sid, KVS_ENGINE_MAX_STOP_IDS);
    }

    if (n_stop > KVS_WIRE_MAX_STOP) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: n_stop: %u exceeds %d",
                           n_stop, KVS_WIRE_MAX_STOP);
    }

    /* the prompt: checked against the frame before any allocation */
    if (kvs_wire_need_n(&rd, n_prompt, 4, "prompt") != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (n_prompt > 0
        && kvs_grow((void **) &m->prompt, &m->prompt_cap, n_prompt,
                    sizeof(int32_t)) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "SUBMIT: prompt: out of memory "
                           "for %u ids", n_prompt);
    }

    for (i = 0; i < n_prompt; i++) {
        m->prompt[i] = (int32_t) kvs_wire_get32(rd.p + (size_t) i * 4);
    }

    rd.p += (size_t) n_prompt * 4;
    rd.left -= (size_t) n_prompt * 4;

    if (kvs_wire_need_n(&rd, n_bias, 8, "logit_bias") != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (n_bias > 0
        && kvs_grow((void **) &m->bias, &m->bias_cap, n_bias,
                    sizeof(kvs_logit_bias_t)) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "SUBMIT: logit_bias: out of "
                           "memory for %u entries", n_bias);
    }

    for (i = 0; i < n_bias; i++) {
        if (kvs_wire_i32(&rd, "logit_bias.token", &m->bias[i].token)
            != KVS_OK
            || kvs_wire_finite(&rd, "logit_bias.bias", &m->bias[i].bias)
               != KVS_OK)
        {
            return KVS_EFORMAT;
        }
    }

    if (kvs_wire_need_n(&rd, n_sid, 4, "stop_ids") != KVS_OK) {
        return KVS_EFORMAT;
    }

    for (i = 0; i < n_sid; i++) {
        if (kvs_wire_i32(&rd, "stop_ids", &m->stop_ids[i]) != KVS_OK) {
            return KVS_EFORMAT;
        }
    }

    off = 0;

    for (i = 0; i < n_stop; i++) {
        if (kvs_wire_u16(&rd, "stop.len", &sl) != KVS_OK) {
            return KVS_EFORMAT;
        }

        if (sl > KVS_WIRE_MAX_STOP_LEN) {
            return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: stop[%u]: %u bytes "
                               "exceed %d", i, sl, KVS_WIRE_MAX_STOP_LEN);
        }

        if (kvs_wire_need(&rd, sl, "stop") != KVS_OK) {
            return KVS_EFORMAT;
        }

        /* raw bytes: a stop string may hold any byte the text can */
        memcpy(m->stop_text + off, rd.p, sl);
        m->stop[i] = m->stop_text + off;
        m->stop_len[i] = sl;
        off += sl;
        rd.p += sl;
        rd.left -= sl;
    }

    if (kvs_wire_end(&rd) != KVS_OK) {
        return KVS_EFORMAT;
    }

    r->prompt = m->prompt;
    r->n_prompt = n_prompt;
    s->logit_bias = n_bias > 0 ? m->bias : NULL;
    s->n_logit_bias = n_bias;
    r->stop_ids = n_sid > 0 ? m->stop_ids : NULL;
    r->n_stop_ids = n_sid;
    r->stop = n_stop > 0 ? m->stop : NULL;
    r->stop_len = n_stop > 0 ? m->stop_len : NULL;
    r->n_stop = n_stop;

    return KVS_OK;
}


void
kvs_wire_submit_free(kvs_wire_submit_t *m)
{
    free(m->prompt);
    free(m->bias);
    m->prompt = NULL;
    m->prompt_cap = 0;
    m->bias = NULL;
    m->bias_cap = 0;
    memset(&m->req, 0, sizeof(kvs_engine_req_t));
}


/* --- REFUSED ------------------------------------------------------------- */

int
kvs_wire_enc_refused(kvs_buf_t *b, uint64_t id, int code, const char *msg,
    kvs_err_t *err)
{
    int       rc;
    size_t    nl;
    uint8_t  *p;

    if (code >= 0 || code < KVS_ERANGE) {
        return kvs_err_set(err, KVS_ERANGE, "REFUSED: code: %d is not a "
                           "kvs error code", code);
    }

    nl = strnlen(msg, KVS_WIRE_MAX_MSG);

    rc = kvs_wire_begin(b, KVS_WIRE_HDR + 6 + nl, KVS_WIRE_REFUSED, id,
                        &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    p = kvs_wire_put32(p, (uint32_t) code);
    p = kvs_wire_put16(p, (uint16_t) nl);
    p = kvs_wire_putb(p, msg, nl);

    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_dec_refused(const uint8_t *f, size_t f_len, kvs_wire_refused_t *m,
    kvs_err_t *err)
{
    uint16_t       nl;
    int32_t        code;
    kvs_wire_rd_t  rd;

    memset(m, 0, sizeof(kvs_wire_refused_t));

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_REFUSED, err) != KVS_OK
        || kvs_wire_i32(&rd, "code", &code) != KVS_OK
        || kvs_wire_u16(&rd, "msg_len", &nl) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (code >= 0 || code < KVS_ERANGE) {
        return kvs_err_set(err, KVS_EFORMAT, "REFUSED: code: %d is not a "
                           "kvs error code", code);
    }

    if (nl > KVS_WIRE_MAX_MSG) {
        return kvs_err_set(err, KVS_EFORMAT, "REFUSED: msg_len: %u exceeds "
                           "%d", nl, KVS_WIRE_MAX_MSG);
    }

    m->code = code;

    if (kvs_wire_str(&rd, "msg", nl, m->msg) != KVS_OK) {
        return KVS_EFORMAT;
    }

    return kvs_wire_end(&rd);
}


/* --- OUT ----------------------------------------------------------------- */

static size_t
kvs_wire_lp_size(const kvs_sample_logprobs_t *lp)
{
    return KVS_WIRE_LP_FIXED + (size_t) lp->n_top * KVS_WIRE_LP_TOP;
}


/* Writes one OUT frame of tokens [t0, t1), records [l0, l1), text
 * [x0, x1); the last frame of an output also carries finish and error. */
static int
kvs_wire_out_frame(kvs_buf_t *b, uint64_t id, uint32_t choice,
    const kvs_engine_out_t *out, const kvs_wire_times_t *t, size_t t0,
    size_t t1, size_t l0, size_t l1, size_t x0, size_t x1, int last,
    kvs_err_t *err)
{
    int                           rc;
    size_t                        len, i, el;
    uint8_t                      *p;
    int32_t                       j;
    kvs_finish_t                  finish;
    const kvs_sample_logprobs_t  *lp;

    finish = last ? out->finish : KVS_FINISH_NONE;
    el = finish == KVS_FINISH_ERROR
         ? strnlen(out->error, KVS_WIRE_MAX_MSG) : 0;

    len = KVS_WIRE_HDR + KVS_WIRE_OUT_FIXED + (t1 - t0) * 4 + (x1 - x0) + el;
    for (i = l0; i < l1; i++) {
        len += kvs_wire_lp_size(&out->lp[i]);
    }

    rc = kvs_wire_begin(b, len, KVS_WIRE_OUT, id, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    p = kvs_wire_put32(p, choice);
    *p++ = (uint8_t) finish;
    *p++ = 0;
    p = kvs_wire_put16(p, (uint16_t) el);
    p = kvs_wire_put32(p, out->n_prompt);
    p = kvs_wire_put32(p, out->n_generated);
    p = kvs_wire_put32(p, out->n_preempted);
    p = kvs_wire_put64(p, t != NULL ? t->recv_ns : 0);
    p = kvs_wire_put64(p, t != NULL ? t->first_ns : 0);
    p = kvs_wire_put64(p, t != NULL ? t->now_ns : 0);
    p = kvs_wire_put32(p, (uint32_t) (t1 - t0));
    p = kvs_wire_put32(p, (uint32_t) (x1 - x0));
    p = kvs_wire_put32(p, (uint32_t) (l1 - l0));

    for (i = t0; i < t1; i++) {
        p = kvs_wire_put32(p, (uint32_t) out->tokens[i]);
    }

    p = kvs_wire_putb(p, out->text.data + x0, x1 - x0);

    for (i = l0; i < l1; i++) {
        lp = &out->lp[i];
        p = kvs_wire_put32(p, (uint32_t) lp->token);
        p = kvs_wire_putf(p, lp->logprob);
        *p++ = (uint8_t) lp->n_top;

        for (j = 0; j < lp->n_top; j++) {
            p = kvs_wire_put32(p, (uint32_t) lp->top_token[j]);
            p = kvs_wire_putf(p, lp->top_logprob[j]);
        }
    }

    p = kvs_wire_putb(p, out->error, el);

    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_enc_out(kvs_buf_t *b, uint64_t id, uint32_t choice,
    const kvs_engine_out_t *out, const kvs_wire_times_t *t, kvs_err_t *err)
{
    int     rc;
    size_t  room, t0, t1, l0, l1, x0, x1, old, sz, el;

    if (choice >= KVS_ENGINE_MAX_N) {
        return kvs_err_set(err, KVS_ERANGE, "OUT: choice: %u exceeds %d",
                           choice, KVS_ENGINE_MAX_N - 1);
    }

    if ((unsigned) out->finish > KVS_FINISH_ERROR) {
        return kvs_err_set(err, KVS_ERANGE, "OUT: finish: %d is not a "
                           "finish reason", (int) out->finish);
    }

    for (l0 = 0; l0 < out->n_lp; l0++) {
        if (out->lp[l0].n_top < 0
            || out->lp[l0].n_top > KVS_SAMPLE_MAX_TOP_LOGPROBS)
        {
            return kvs_err_set(err, KVS_ERANGE, "OUT: logprobs[%zu].n_top: "
                               "%d is not in 0..%d", l0, out->lp[l0].n_top,
                               KVS_SAMPLE_MAX_TOP_LOGPROBS);
        }
    }

    /* room for the error in every frame, though only the last carries
     * it: an output that fits one frame is then always one frame */
    el = out->finish == KVS_FINISH_ERROR
         ? strnlen(out->error, KVS_WIRE_MAX_MSG) : 0;
    old = b->len;
    t0 = 0;
    l0 = 0;
    x0 = 0;

    /* greedy: as many tokens, then records, then text bytes as fit; the
     * consumer concatenates each kind on its own, so they need not align */
    do {
        room = KVS_WIRE_MAX_FRAME - KVS_WIRE_HDR - KVS_WIRE_OUT_FIXED - el;

        sz = out->n_tokens - t0;
        t1 = t0 + (sz < room / 4 ? sz : room / 4);
        room -= (t1 - t0) * 4;

        for (l1 = l0; l1 < out->n_lp; l1++) {
            sz = kvs_wire_lp_size(&out->lp[l1]);
            if (sz > room) {
                break;
            }
            room -= sz;
        }

        sz = out->text.len - x0;
        x1 = x0 + (sz < room ? sz : room);

        /* cut the text before a UTF-8 continuation byte if not at its end:
         * a worker streaming each frame as it comes never splits a char */
        if (x1 < out->text.len) {
            sz = x1;
            while (sz > x0 && x1 - sz < 4
                   && (out->text.data[sz] & 0xc0) == 0x80)
            {
                sz--;
            }

            if (sz > x0 && (out->text.data[sz] & 0xc0) != 0x80) {
                x1 = sz;
            }
        }

        rc = kvs_wire_out_frame(b, id, choice, out, t, t0, t1, l0, l1, x0,
                                x1, t1 == out->n_tokens && l1 == out->n_lp
                                    && x1 == out->text.len, err);
        if (rc != KVS_OK) {
            b->len = old;
            return rc;
        }

        t0 = t1;
        l0 = l1;
        x0 = x1;

    } while (t0 < out->n_tokens || l0 < out->n_lp || x0 < out->text.len);

    return KVS_OK;
}


int
kvs_wire_dec_out(const uint8_t *f, size_t f_len, kvs_wire_out_t *m,
    kvs_err_t *err)
{
    uint8_t                 fin, pad, nt;
    uint16_t                el;
    uint32_t                i, j, n_tok, n_text, n_lp;
    kvs_wire_rd_t           rd;
    kvs_engine_out_t       *o;
    kvs_sample_logprobs_t  *lp;

    o = &m->out;
    o->n_tokens = 0;
    o->n_lp = 0;
    o->text.len = 0;
    o->finish = KVS_FINISH_NONE;
    o->error[0] = '\0';

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_OUT, err) != KVS_OK
        || kvs_wire_u32(&rd, "choice", &m->choice) != KVS_OK
        || kvs_wire_u8(&rd, "finish", &fin) != KVS_OK
        || kvs_wire_u8(&rd, "reserved", &pad) != KVS_OK
        || kvs_wire_u16(&rd, "error_len", &el) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (m->choice >= KVS_ENGINE_MAX_N) {
        return kvs_err_set(err, KVS_EFORMAT, "OUT: choice: %u exceeds %d",
                           m->choice, KVS_ENGINE_MAX_N - 1);
    }

    if (fin > KVS_FINISH_ERROR) {
        return kvs_err_set(err, KVS_EFORMAT, "OUT: finish: %u is not a "
                           "finish reason", fin);
    }

    if (pad != 0) {
        return kvs_err_set(err, KVS_EFORMAT, "OUT: reserved: must be 0 "
                           "(got %u)", pad);
    }

    if (el > KVS_WIRE_MAX_MSG || (el > 0 && fin != KVS_FINISH_ERROR)) {
        return kvs_err_set(err, KVS_EFORMAT, "OUT: error_len: %u with "
                           "finish %u (only error carries one)", el, fin);
    }

    if (kvs_wire_u32(&rd, "n_prompt", &o->n_prompt) != KVS_OK
        || kvs_wire_u32(&rd, "n_generated", &o->n_generated) != KVS_OK
        || kvs_wire_u32(&rd, "n_preempted", &o->n_preempted) != KVS_OK
        || kvs_wire_u64(&rd, "recv_ns", &m->t.recv_ns) != KVS_OK
        || kvs_wire_u64(&rd, "first_ns", &m->t.first_ns) != KVS_OK
        || kvs_wire_u64(&rd, "now_ns", &m->t.now_ns) != KVS_OK
        || kvs_wire_u32(&rd, "n_tokens", &n_tok) != KVS_OK
        || kvs_wire_u32(&rd, "text_len", &n_text) != KVS_OK
        || kvs_wire_u32(&rd, "n_logprobs", &n_lp) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    o->finish = (kvs_finish_t) fin;

    if (kvs_wire_need_n(&rd, n_tok, 4, "tokens") != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (n_tok > 0
        && kvs_grow((void **) &o->tokens, &o->tokens_cap, n_tok,
                    sizeof(int32_t)) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "OUT: tokens: out of memory");
    }

    for (i = 0; i < n_tok; i++) {
        o->tokens[i] = (int32_t) kvs_wire_get32(rd.p + (size_t) i * 4);
    }

    o->n_tokens = n_tok;
    rd.p += (size_t) n_tok * 4;
    rd.left -= (size_t) n_tok * 4;

    if (kvs_wire_need(&rd, n_text, "text") != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (kvs_buf_append(&o->text, rd.p, n_text) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "OUT: text: out of memory");
    }

    rd.p += n_text;
    rd.left -= n_text;

    /* each record is at least its fixed part: bounds the allocation */
    if (kvs_wire_need_n(&rd, n_lp, KVS_WIRE_LP_FIXED, "logprobs") != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (n_lp > 0
        && kvs_grow((void **) &o->lp, &o->lp_cap, n_lp,
                    sizeof(kvs_sample_logprobs_t)) != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "OUT: logprobs: out of memory");
    }

    for (i = 0; i < n_lp; i++) {
        lp = &o->lp[i];

        if (kvs_wire_i32(&rd, "logprobs.token", &lp->token) != KVS_OK
            || kvs_wire_f32(&rd, "logprobs.logprob", &lp->logprob) != KVS_OK
            || kvs_wire_u8(&rd, "logprobs.n_top", &nt) != KVS_OK)
        {
            return KVS_EFORMAT;
        }

        if (nt > KVS_SAMPLE_MAX_TOP_LOGPROBS) {
            return kvs_err_set(err, KVS_EFORMAT, "OUT: logprobs[%u].n_top: "
                               "%u exceeds %d", i, nt,
                               KVS_SAMPLE_MAX_TOP_LOGPROBS);
        }

        lp->n_top = nt;

        for (j = 0; j < nt; j++) {
            if (kvs_wire_i32(&rd, "logprobs.top_token", &lp->top_token[j])
                != KVS_OK
                || kvs_wire_f32(&rd, "logprobs.top_logprob",
                                &lp->top_logprob[j]) != KVS_OK)
            {
                return KVS_EFORMAT;
            }
        }

        o->n_lp = i + 1;
    }

    if (kvs_wire_str(&rd, "error", el, o->error) != KVS_OK) {
        return KVS_EFORMAT;
    }

    return kvs_wire_end(&rd);
}


/* --- PONG, STATS_REPLY ----------------------------------------------- */

int
kvs_wire_enc_pong(kvs_buf_t *b, uint64_t id, uint64_t now_ns,
    kvs_err_t *err)
{
    int       rc;
    uint8_t  *p;

    rc = kvs_wire_begin(b, KVS_WIRE_HDR + 8, KVS_WIRE_PONG, id, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    p = kvs_wire_put64(p, now_ns);
    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_dec_pong(const uint8_t *f, size_t f_len, uint64_t *now_ns,
    kvs_err_t *err)
{
    kvs_wire_rd_t  rd;

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_PONG, err) != KVS_OK
        || kvs_wire_u64(&rd, "now_ns", now_ns) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    return kvs_wire_end(&rd);
}


int
kvs_wire_enc_stats(kvs_buf_t *b, uint64_t id, const kvs_wire_stats_t *m,
    kvs_err_t *err)
{
    int                        rc;
    uint8_t                   *p;
    uint32_t                   i;
    const kvs_engine_stats_t  *s;

    if (m->n_models > KVS_WIRE_MAX_MODELS) {
        return kvs_err_set(err, KVS_ERANGE, "STATS_REPLY: n_models: %u "
                           "exceeds %d", m->n_models, KVS_WIRE_MAX_MODELS);
    }

    rc = kvs_wire_begin(b, KVS_WIRE_HDR + 12
                          + (size_t) m->n_models * KVS_WIRE_STATS_REC,
                       KVS_WIRE_STATS_REPLY, id, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    p = kvs_wire_put32(p, m->clients);
    p = kvs_wire_put32(p, m->requests);
    p = kvs_wire_put32(p, m->n_models);

    for (i = 0; i < m->n_models; i++) {
        s = &m->models[i].st;
        p = kvs_wire_put32(p, m->models[i].index);
        p = kvs_wire_put64(p, s->steps);
        p = kvs_wire_put64(p, s->prefill_tokens);
        p = kvs_wire_put64(p, s->decode_tokens);
        p = kvs_wire_put64(p, s->preemptions);
        p = kvs_wire_put64(p, s->kv_copies);
        p = kvs_wire_put64(p, s->step_ns);
        p = kvs_wire_put64(p, s->step_ns_max);
        p = kvs_wire_put64(p, s->decode_only_steps);
        p = kvs_wire_put64(p, s->decode_only_tokens);
        p = kvs_wire_put64(p, s->decode_only_ns);
        p = kvs_wire_put64(p, s->batch_seqs);
        p = kvs_wire_put32(p, s->running);
        p = kvs_wire_put32(p, s->waiting);
        p = kvs_wire_put32(p, s->kv_blocks);
        p = kvs_wire_put32(p, s->kv_used);
        p = kvs_wire_put32(p, s->kv_used_max);
        p = kvs_wire_put32(p, s->block_tokens);
        p = kvs_wire_put64(p, s->requests);
        p = kvs_wire_put64(p, s->finished);
    }

    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_dec_stats(const uint8_t *f, size_t f_len, kvs_wire_stats_t *m,
    kvs_err_t *err)
{
    uint32_t             i;
    kvs_wire_rd_t        rd;
    kvs_engine_stats_t  *s;

    memset(m, 0, sizeof(kvs_wire_stats_t));

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_STATS_REPLY, err) != KVS_OK
        || kvs_wire_u32(&rd, "clients", &m->clients) != KVS_OK
        || kvs_wire_u32(&rd, "requests", &m->requests) != KVS_OK
        || kvs_wire_u32(&rd, "n_models", &m->n_models) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (m->n_models > KVS_WIRE_MAX_MODELS) {
        return kvs_err_set(err, KVS_EFORMAT, "STATS_REPLY: n_models: %u "
                           "exceeds %d", m->n_models, KVS_WIRE_MAX_MODELS);
    }

    for (i = 0; i < m->n_models; i++) {
        s = &m->models[i].st;

        if (kvs_wire_u32(&rd, "index", &m->models[i].index) != KVS_OK
            || kvs_wire_u64(&rd, "steps", &s->steps) != KVS_OK
            || kvs_wire_u64(&rd, "prefill_tokens", &s->prefill_tokens)
               != KVS_OK
            || kvs_wire_u64(&rd, "decode_tokens", &s->decode_tokens)
               != KVS_OK
            || kvs_wire_u64(&rd, "preemptions", &s->preemptions) != KVS_OK
            || kvs_wire_u64(&rd, "kv_copies", &s->kv_copies) != KVS_OK
            || kvs_wire_u64(&rd, "step_ns", &s->step_ns) != KVS_OK
            || kvs_wire_u64(&rd, "step_ns_max", &s->step_ns_max) != KVS_OK
            || kvs_wire_u64(&rd, "decode_only_steps", &s->decode_only_steps)
               != KVS_OK
            || kvs_wire_u64(&rd, "decode_only_tokens",
                            &s->decode_only_tokens) != KVS_OK
            || kvs_wire_u64(&rd, "decode_only_ns", &s->decode_only_ns)
               != KVS_OK
            || kvs_wire_u64(&rd, "batch_seqs", &s->batch_seqs) != KVS_OK
            || kvs_wire_u32(&rd, "running", &s->running) != KVS_OK
            || kvs_wire_u32(&rd, "waiting", &s->waiting) != KVS_OK
            || kvs_wire_u32(&rd, "kv_blocks", &s->kv_blocks) != KVS_OK
            || kvs_wire_u32(&rd, "kv_used", &s->kv_used) != KVS_OK
            || kvs_wire_u32(&rd, "kv_used_max", &s->kv_used_max) != KVS_OK
            || kvs_wire_u32(&rd, "block_tokens", &s->block_tokens) != KVS_OK
            || kvs_wire_u64(&rd, "requests", &s->requests) != KVS_OK
            || kvs_wire_u64(&rd, "finished", &s->finished) != KVS_OK)
        {
            return KVS_EFORMAT;
        }
    }

    return kvs_wire_end(&rd);
}
