/*
 * kvs_wire: the frame header, the message type names, the decoding
 * cursor and the frame reservation the encoders and decoders share, and
 * the bodiless messages (see kvs_wire.h for the header and
 * docs/engine-process.md for the bodies; the other messages are in
 * kvs_wire_enc.c and kvs_wire_dec.c).
 *
 * Invariants: the cursor knows how many bytes of the body are left and
 * every read checks it first; every count is checked against what is
 * left before anything is copied, with the division done on the left
 * side so count * size cannot overflow.  A frame is reserved whole
 * before any byte of it is written and committed only when complete, so
 * a failure leaves the buffer untouched.  Only src/base is called, so
 * the fuzz target links src/wire alone.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_wire_impl.h"


static const char  *kvs_wire_names[] = {
    "?", "HELLO", "SUBMIT", "CANCEL", "REFUSED", "OUT", "PING", "PONG",
    "STATS", "STATS_REPLY", "DRAIN", "SUBSCRIBE", "INDEX"
};


const char *
kvs_wire_type_name(unsigned type)
{
    return type <= KVS_WIRE_TYPE_MAX ? kvs_wire_names[type] : "?";
}


/* --- decoding cursor ----------------------------------------------------- */

int
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
int
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


int
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


int
kvs_wire_u16(kvs_wire_rd_t *rd, const char *field, uint16_t *v)
{
    if (kvs_wire_need(rd, 2, field) != KVS_OK) {
        return KVS_EFORMAT;
    }

    *v = kvs_le_get16(rd->p);
    rd->p += 2;
    rd->left -= 2;

    return KVS_OK;
}


int
kvs_wire_u32(kvs_wire_rd_t *rd, const char *field, uint32_t *v)
{
    if (kvs_wire_need(rd, 4, field) != KVS_OK) {
        return KVS_EFORMAT;
    }

    *v = kvs_le_get32(rd->p);
    rd->p += 4;
    rd->left -= 4;

    return KVS_OK;
}


int
kvs_wire_i32(kvs_wire_rd_t *rd, const char *field, int32_t *v)
{
    uint32_t  u;

    if (kvs_wire_u32(rd, field, &u) != KVS_OK) {
        return KVS_EFORMAT;
    }

    memcpy(v, &u, sizeof(u));

    return KVS_OK;
}


int
kvs_wire_u64(kvs_wire_rd_t *rd, const char *field, uint64_t *v)
{
    if (kvs_wire_need(rd, 8, field) != KVS_OK) {
        return KVS_EFORMAT;
    }

    *v = kvs_le_get64(rd->p);
    rd->p += 8;
    rd->left -= 8;

    return KVS_OK;
}


/* A float any value of (logprobs: -inf is a real answer). */
int
kvs_wire_f32(kvs_wire_rd_t *rd, const char *field, float *v)
{
    uint32_t  u;

    if (kvs_wire_u32(rd, field, &u) != KVS_OK) {
        return KVS_EFORMAT;
    }

    memcpy(v, &u, sizeof(u));

    return KVS_OK;
}


int
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


int
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
int
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


int
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


int
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

    len = kvs_le_get32(p);

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

    type = kvs_le_get16(p + 4);
    version = kvs_le_get16(p + 6);

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
    h->id = kvs_le_get64(p + 8);

    return KVS_OK;
}


/* Reserves a frame of len bytes at the end of b and writes its header;
 * *pp is where the body goes.  KVS_ERANGE past the frame limit,
 * KVS_ENOMEM when b cannot grow. */
int
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
    p = kvs_le_put32(p, (uint32_t) len);
    p = kvs_le_put16(p, (uint16_t) type);
    p = kvs_le_put16(p, KVS_WIRE_VERSION);
    *pp = kvs_le_put64(p, id);

    return KVS_OK;
}


/* Commits the frame begun at the end of b. */
void
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
        && type != KVS_WIRE_STATS && type != KVS_WIRE_DRAIN
        && type != KVS_WIRE_SUBSCRIBE)
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

    if (kvs_wire_start(&rd, f, f_len, kvs_le_get16(f + 4), err) != KVS_OK) {
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


int
kvs_wire_enc_subscribe(kvs_buf_t *b, kvs_err_t *err)
{
    return kvs_wire_enc_empty(b, KVS_WIRE_SUBSCRIBE, 0, err);
}


int
kvs_wire_dec_subscribe(const uint8_t *f, size_t f_len, kvs_err_t *err)
{
    kvs_wire_rd_t  rd;

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_SUBSCRIBE, err) != KVS_OK) {
        return KVS_EFORMAT;
    }

    return kvs_wire_end(&rd);
}


/* What the INDEX decoder refuses, the encoder refuses too. */
static int
kvs_wire_index_check(const kvs_wire_index_t *ix, kvs_err_t *err, int code)
{
    if (ix->incarnation == 0) {
        return kvs_err_set(err, code, "INDEX: incarnation: 0");
    }

    if (ix->block_tokens == 0 || ix->block_tokens > KVS_KV_MAX_BLOCK_TOKENS) {
        return kvs_err_set(err, code, "INDEX: block_tokens: %u, not in "
                           "1..%d", ix->block_tokens,
                           KVS_KV_MAX_BLOCK_TOKENS);
    }

    if (ix->model >= KVS_WIRE_MAX_MODELS) {
        return kvs_err_set(err, code, "INDEX: model: %u, not below %d",
                           ix->model, KVS_WIRE_MAX_MODELS);
    }

    if (ix->resync > 1) {
        return kvs_err_set(err, code, "INDEX: resync: must be 0 or 1 (got "
                           "%u)", ix->resync);
    }

    return KVS_OK;
}


int
kvs_wire_enc_index(kvs_buf_t *b, uint64_t id, const kvs_wire_index_t *ix,
    kvs_err_t *err)
{
    int       rc;
    size_t    n;
    uint8_t  *p;

    rc = kvs_wire_index_check(ix, err, KVS_ERANGE);
    if (rc != KVS_OK) {
        return rc;
    }

    n = (size_t) ix->n_add + ix->n_del;

    if (n > KVS_WIRE_INDEX_MAX_NAMES) {
        return kvs_err_set(err, KVS_ERANGE, "INDEX: %zu names, more than "
                           "a frame holds (%zu)", n,
                           (size_t) KVS_WIRE_INDEX_MAX_NAMES);
    }

    rc = kvs_wire_begin(b, KVS_WIRE_HDR + KVS_WIRE_INDEX_FIXED + n * 16,
                        KVS_WIRE_INDEX, id, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    p = kvs_le_put32(p, ix->model);
    p = kvs_le_put64(p, ix->incarnation);
    p = kvs_le_put64(p, ix->epoch);
    p = kvs_le_put32(p, ix->block_tokens);
    p = kvs_le_put32(p, ix->running);
    p = kvs_le_put32(p, ix->waiting);
    p = kvs_le_put32(p, ix->free_blocks);
    p = kvs_le_put32(p, ix->resync);
    p = kvs_le_put32(p, ix->n_add);
    p = kvs_le_put32(p, ix->n_del);
    p = kvs_wire_putb(p, ix->names, n * 16);
    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_dec_index(const uint8_t *f, size_t f_len, kvs_wire_index_t *ix,
    kvs_err_t *err)
{
    kvs_wire_rd_t  rd;

    memset(ix, 0, sizeof(kvs_wire_index_t));

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_INDEX, err) != KVS_OK
        || kvs_wire_u32(&rd, "model", &ix->model) != KVS_OK
        || kvs_wire_u64(&rd, "incarnation", &ix->incarnation) != KVS_OK
        || kvs_wire_u64(&rd, "epoch", &ix->epoch) != KVS_OK
        || kvs_wire_u32(&rd, "block_tokens", &ix->block_tokens) != KVS_OK
        || kvs_wire_u32(&rd, "running", &ix->running) != KVS_OK
        || kvs_wire_u32(&rd, "waiting", &ix->waiting) != KVS_OK
        || kvs_wire_u32(&rd, "free_blocks", &ix->free_blocks) != KVS_OK
        || kvs_wire_u32(&rd, "resync", &ix->resync) != KVS_OK
        || kvs_wire_u32(&rd, "n_add", &ix->n_add) != KVS_OK
        || kvs_wire_u32(&rd, "n_del", &ix->n_del) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (kvs_wire_index_check(ix, err, KVS_EFORMAT) != KVS_OK) {
        return KVS_EFORMAT;
    }

    /* the sum in 64 bits: two u32 counts cannot wrap it */
    if (kvs_wire_need_n(&rd, (uint64_t) ix->n_add + ix->n_del, 16,
                        "names") != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    ix->names = rd.p;
    rd.p += ((size_t) ix->n_add + ix->n_del) * 16;
    rd.left -= ((size_t) ix->n_add + ix->n_del) * 16;

    return kvs_wire_end(&rd);
}
