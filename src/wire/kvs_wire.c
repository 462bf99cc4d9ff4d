/*
 * kvs_wire: the frame header, the message type names, the decoding
 * cursor and the frame reservation the encoders and decoders share, and
 * the bodiless messages and INDEX (see kvs_wire.h for the header and
 * docs/engine-process.md for the bodies; the other messages are in
 * kvs_wire_enc.c and kvs_wire_dec.c, the fixed fields' tables in
 * kvs_wire_layout.c).
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
    "STATS", "STATS_REPLY", "DRAIN", "SUBSCRIBE", "INDEX", "LORA"
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


const uint8_t *
kvs_wire_take(kvs_wire_rd_t *rd, const char *field, size_t n)
{
    const uint8_t  *q;

    if (kvs_wire_need(rd, n, field) != KVS_OK) {
        return NULL;
    }

    q = rd->p;
    rd->p += n;
    rd->left -= n;

    return q;
}


int
kvs_wire_bytes(kvs_wire_rd_t *rd, const char *field, size_t n, void *s)
{
    const uint8_t  *q;

    q = kvs_wire_take(rd, field, n);
    if (q == NULL) {
        return KVS_EFORMAT;
    }

    if (n > 0) {
        memcpy(s, q, n);
    }

    return KVS_OK;
}


/* Every integer the decoders read comes through here, whatever its
 * width on the wire and in memory. */
int
kvs_wire_int(kvs_wire_rd_t *rd, const char *field, size_t wire, void *v,
    size_t mem)
{
    const uint8_t  *q;

    q = kvs_wire_take(rd, field, wire);
    if (q == NULL) {
        return KVS_EFORMAT;
    }

    kvs_wire_store(v, mem, wire == 1 ? q[0]
                           : wire == 2 ? kvs_le_get16(q)
                           : wire == 4 ? kvs_le_get32(q) : kvs_le_get64(q));

    return KVS_OK;
}


int
kvs_wire_u8(kvs_wire_rd_t *rd, const char *field, uint8_t *v)
{
    return kvs_wire_int(rd, field, 1, v, 1);
}


int
kvs_wire_u16(kvs_wire_rd_t *rd, const char *field, uint16_t *v)
{
    return kvs_wire_int(rd, field, 2, v, 2);
}


int
kvs_wire_u32(kvs_wire_rd_t *rd, const char *field, uint32_t *v)
{
    return kvs_wire_int(rd, field, 4, v, 4);
}


int
kvs_wire_i32(kvs_wire_rd_t *rd, const char *field, int32_t *v)
{
    return kvs_wire_int(rd, field, 4, v, 4);
}


int
kvs_wire_u64(kvs_wire_rd_t *rd, const char *field, uint64_t *v)
{
    return kvs_wire_int(rd, field, 8, v, 8);
}


/* A float any value of (logprobs: -inf is a real answer): its bits. */
int
kvs_wire_f32(kvs_wire_rd_t *rd, const char *field, float *v)
{
    return kvs_wire_int(rd, field, 4, v, 4);
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

    (void) kvs_wire_bytes(rd, field, len, s);
    s[len] = '\0';

    return KVS_OK;
}


/* The caller checked the count against what is left: no check per id,
 * which a million-token prompt would feel. */
void
kvs_wire_ids(kvs_wire_rd_t *rd, size_t n, int32_t *ids)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        ids[i] = (int32_t) kvs_le_get32(rd->p + i * 4);
    }

    rd->p += n * 4;
    rd->left -= n * 4;
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


/* --- a field's memory ---------------------------------------------------- */

/* memcpy, not a cast: the member may be an int, a float or a size_t,
 * and aliasing it through another type would be undefined */
void
kvs_wire_store(void *at, size_t mem, uint64_t v)
{
    uint8_t   u8;
    uint16_t  u16;
    uint32_t  u32;

    switch (mem) {

    case 1:
        u8 = (uint8_t) v;
        memcpy(at, &u8, 1);
        break;

    case 2:
        u16 = (uint16_t) v;
        memcpy(at, &u16, 2);
        break;

    case 4:
        u32 = (uint32_t) v;
        memcpy(at, &u32, 4);
        break;

    default:
        memcpy(at, &v, 8);
    }
}


uint64_t
kvs_wire_load(const void *at, size_t mem)
{
    uint8_t   u8;
    uint16_t  u16;
    uint32_t  u32;
    uint64_t  u64;

    switch (mem) {

    case 1:
        memcpy(&u8, at, 1);
        return u8;

    case 2:
        memcpy(&u16, at, 2);
        return u16;

    case 4:
        memcpy(&u32, at, 4);
        return u32;

    default:
        memcpy(&u64, at, 8);
        return u64;
    }
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


/* A whole frame of type with no body. */
static int
kvs_wire_dec_bodiless(const uint8_t *f, size_t f_len, unsigned type,
    kvs_err_t *err)
{
    kvs_wire_rd_t  rd;

    if (kvs_wire_start(&rd, f, f_len, type, err) != KVS_OK) {
        return KVS_EFORMAT;
    }

    return kvs_wire_end(&rd);
}


int
kvs_wire_dec_empty(const uint8_t *f, size_t f_len, kvs_err_t *err)
{
    if (f_len < KVS_WIRE_HDR) {
        return kvs_err_set(err, KVS_EFORMAT, "frame: shorter than a header");
    }

    return kvs_wire_dec_bodiless(f, f_len, kvs_le_get16(f + 4), err);
}


int
kvs_wire_enc_drain(kvs_buf_t *b, kvs_err_t *err)
{
    return kvs_wire_enc_empty(b, KVS_WIRE_DRAIN, 0, err);
}


int
kvs_wire_dec_drain(const uint8_t *f, size_t f_len, kvs_err_t *err)
{
    return kvs_wire_dec_bodiless(f, f_len, KVS_WIRE_DRAIN, err);
}


int
kvs_wire_enc_subscribe(kvs_buf_t *b, kvs_err_t *err)
{
    return kvs_wire_enc_empty(b, KVS_WIRE_SUBSCRIBE, 0, err);
}


int
kvs_wire_dec_subscribe(const uint8_t *f, size_t f_len, kvs_err_t *err)
{
    return kvs_wire_dec_bodiless(f, f_len, KVS_WIRE_SUBSCRIBE, err);
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

    if (ix->tier_weight > 1000) {
        return kvs_err_set(err, code, "INDEX: tier_weight: %u, over 1000",
                           ix->tier_weight);
    }

    if (ix->host_weight > 1000) {
        return kvs_err_set(err, code, "INDEX: host_weight: %u, over 1000",
                           ix->host_weight);
    }

    return KVS_OK;
}


uint64_t
kvs_wire_index_lists(const kvs_wire_index_t *ix, uint32_t *n)
{
    size_t    k;
    uint32_t  c[KVS_WIRE_INDEX_LISTS];
    uint64_t  sum;

    c[0] = ix->n_add;
    c[1] = ix->n_del;
    c[2] = ix->n_dadd;
    c[3] = ix->n_ddel;
    c[4] = ix->n_hadd;
    c[5] = ix->n_hdel;

    sum = 0;

    for (k = 0; k < KVS_WIRE_INDEX_LISTS; k++) {
        sum += c[k];

        if (n != NULL) {
            n[k] = c[k];
        }
    }

    return sum;
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

    n = (size_t) kvs_wire_index_lists(ix, NULL);

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

    p = kvs_wire_put_fields(p, &kvs_wire_index_head, ix);
    p = kvs_wire_putb(p, ix->names, n * 16);
    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_dec_index(const uint8_t *f, size_t f_len, kvs_wire_index_t *ix,
    kvs_err_t *err)
{
    uint64_t       n;
    kvs_wire_rd_t  rd;

    memset(ix, 0, sizeof(kvs_wire_index_t));

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_INDEX, err) != KVS_OK
        || kvs_wire_get_fields(&rd, &kvs_wire_index_head, ix) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (kvs_wire_index_check(ix, err, KVS_EFORMAT) != KVS_OK) {
        return KVS_EFORMAT;
    }

    /* the sum in 64 bits: six u32 counts cannot wrap it */
    n = kvs_wire_index_lists(ix, NULL);

    if (kvs_wire_need_n(&rd, n, 16, "names") != KVS_OK) {
        return KVS_EFORMAT;
    }

    ix->names = kvs_wire_take(&rd, "names", (size_t) n * 16);

    return kvs_wire_end(&rd);
}
