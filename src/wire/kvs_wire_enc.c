/*
 * kvs_wire_enc: the encoders of the messages with a body (HELLO, SUBMIT,
 * REFUSED, OUT, PONG, STATS_REPLY); the bodiless ones are in kvs_wire.c.
 *
 * Invariants: an encoder computes its frame's exact size first, checking
 * every limit the decoder checks (KVS_ERANGE, field named), reserves it
 * once and then writes: so a failure leaves the buffer untouched and a
 * frame is never half appended.  Fixed fields are written through the
 * tables of kvs_wire_layout.c, which the decoders read through, so what
 * an encoder writes, the matching decoder in kvs_wire_dec.c accepts.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_wire_impl.h"


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

        md = &m->models[i];

        if (md->backend > KVS_BACKEND_CUDA
            || md->kv_dtype > KVS_BACKEND_KV_MAX)
        {
            return kvs_err_set(err, KVS_ERANGE, "HELLO: models[%u].%s: %u "
                               "is not a value this version knows", i,
                               md->backend > KVS_BACKEND_CUDA ? "backend"
                                                              : "kv_dtype",
                               md->backend > KVS_BACKEND_CUDA
                               ? md->backend : md->kv_dtype);
        }

        len += kvs_wire_fields_size(&kvs_wire_hello_model) + 2 + nl;
    }

    rc = kvs_wire_begin(b, len, KVS_WIRE_HELLO, 0, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* the version always first: the one field every version shares */
    p = kvs_le_put32(p, KVS_WIRE_VERSION);
    p = kvs_le_put32(p, m->pid);
    p = kvs_le_put64(p, m->incarnation);
    p = kvs_le_put32(p, m->n_models);

    for (i = 0; i < m->n_models; i++) {
        md = &m->models[i];
        nl = strlen(md->name);
        p = kvs_wire_put_fields(p, &kvs_wire_hello_model, md);
        p = kvs_le_put16(p, (uint16_t) nl);
        p = kvs_wire_putb(p, md->name, nl);
    }

    kvs_wire_commit(b, p);

    return KVS_OK;
}


/* --- SUBMIT -------------------------------------------------------------- */

/* The scope and the tenant: raw bytes within their limit. */
static int
kvs_wire_enc_submit_key(const char *field, const char *key, size_t len,
    int max, kvs_err_t *err)
{
    if (len > (size_t) max || (len > 0 && key == NULL)) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: %s: %zu bytes%s; at "
                           "most %d", field, len,
                           key == NULL ? " at NULL" : "", max);
    }

    return KVS_OK;
}


/* The request's counts, first: they bound every loop after them. */
static int
kvs_wire_enc_submit_counts(const kvs_engine_req_t *req, kvs_err_t *err)
{
    int  rc;

    if (req->n > KVS_ENGINE_MAX_N) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: n: %u exceeds %d",
                           req->n, KVS_ENGINE_MAX_N);
    }

    if (req->sample.n_logit_bias > KVS_WIRE_MAX_BIAS) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: logit_bias: %u entries "
                           "exceed %d", req->sample.n_logit_bias,
                           KVS_WIRE_MAX_BIAS);
    }

    if (req->n_stop_ids > KVS_ENGINE_MAX_STOP_IDS) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: stop_ids: %u exceed %d",
                           req->n_stop_ids, KVS_ENGINE_MAX_STOP_IDS);
    }

    if (req->n_stop > KVS_WIRE_MAX_STOP) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: stop: %u strings "
                           "exceed %d", req->n_stop, KVS_WIRE_MAX_STOP);
    }

    rc = kvs_wire_enc_submit_key("scope", req->scope, req->scope_len,
                                 KVS_RADIX_MAX_SCOPE, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_wire_enc_submit_key("tenant", req->tenant, req->tenant_len,
                                 KVS_FAIR_MAX_KEY, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (req->n_pins > KVS_ENGINE_MAX_PINS) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: pins: %u exceed %d",
                           req->n_pins, KVS_ENGINE_MAX_PINS);
    }

    if (req->gram_kind > KVS_ENGINE_GRAM_KIND_MAX) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: gram_kind: %u is not "
                           "in 0..%d", req->gram_kind,
                           KVS_ENGINE_GRAM_KIND_MAX);
    }

    if (req->schema_len > KVS_ENGINE_MAX_SCHEMA
        || (req->schema_len > 0 && req->schema == NULL))
    {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: schema: %zu bytes%s; "
                           "at most %u", req->schema_len,
                           req->schema == NULL ? " at NULL" : "",
                           KVS_ENGINE_MAX_SCHEMA);
    }

    return KVS_OK;
}


static int
kvs_wire_enc_submit_sampling(const kvs_sample_params_t *s, kvs_err_t *err)
{
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

    return KVS_OK;
}


/* Refuses what the decoder would. */
static int
kvs_wire_enc_submit_check(const kvs_engine_req_t *req, kvs_err_t *err)
{
    int     rc;
    size_t  i;

    rc = kvs_wire_enc_submit_counts(req, err);
    if (rc != KVS_OK) {
        return rc;
    }

    for (i = 0; i < req->n_pins; i++) {
        rc = kvs_wire_pin_check(&req->pins[i], i, req->n_prompt, KVS_ERANGE,
                                err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    rc = kvs_wire_enc_submit_sampling(&req->sample, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* the prompt alone can pass the frame limit: checked before the
     * frame's size is summed */
    if (req->n_prompt > KVS_WIRE_MAX_FRAME / 4) {
        return kvs_err_set(err, KVS_ERANGE, "SUBMIT: prompt: %u ids exceed "
                           "the frame limit", req->n_prompt);
    }

    for (i = 0; i < req->n_stop; i++) {
        rc = kvs_wire_stop_check(i, req->stop_len[i], KVS_ERANGE, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


/* The frame's bytes, of a request kvs_wire_enc_submit_check passed. */
static size_t
kvs_wire_enc_submit_size(const kvs_engine_req_t *req)
{
    size_t  i, len;

    len = KVS_WIRE_HDR + KVS_WIRE_SUBMIT_HEAD
          + kvs_wire_fields_size(&kvs_wire_submit_req)
          + (size_t) req->n_prompt * 4
          + req->sample.n_logit_bias
            * kvs_wire_fields_size(&kvs_wire_submit_bias)
          + (size_t) req->n_stop_ids * 4 + req->scope_len + req->tenant_len
          + req->n_pins * kvs_wire_fields_size(&kvs_wire_submit_pin)
          + req->schema_len;

    for (i = 0; i < req->n_stop; i++) {
        len += 2 + req->stop_len[i];
    }

    return len;
}


int
kvs_wire_enc_submit(kvs_buf_t *b, uint64_t id, uint32_t model,
    const kvs_engine_req_t *req, uint64_t submit_ns, kvs_err_t *err)
{
    int       rc;
    size_t    i;
    uint8_t  *p;

    rc = kvs_wire_enc_submit_check(req, err);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_wire_begin(b, kvs_wire_enc_submit_size(req), KVS_WIRE_SUBMIT,
                        id, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    p = kvs_le_put32(p, model);
    p = kvs_le_put64(p, submit_ns);
    p = kvs_wire_put_fields(p, &kvs_wire_submit_req, req);
    p = kvs_wire_put_ids(p, req->prompt, req->n_prompt);

    for (i = 0; i < req->sample.n_logit_bias; i++) {
        p = kvs_wire_put_fields(p, &kvs_wire_submit_bias,
                                &req->sample.logit_bias[i]);
    }

    p = kvs_wire_put_ids(p, req->stop_ids, req->n_stop_ids);

    for (i = 0; i < req->n_stop; i++) {
        p = kvs_le_put16(p, (uint16_t) req->stop_len[i]);
        p = kvs_wire_putb(p, req->stop[i], req->stop_len[i]);
    }

    p = kvs_wire_putb(p, req->scope, req->scope_len);
    p = kvs_wire_putb(p, req->tenant, req->tenant_len);

    for (i = 0; i < req->n_pins; i++) {
        p = kvs_wire_put_fields(p, &kvs_wire_submit_pin, &req->pins[i]);
    }

    p = kvs_wire_putb(p, req->schema, req->schema_len);

    kvs_wire_commit(b, p);

    return KVS_OK;
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

    p = kvs_le_put32(p, (uint32_t) code);
    p = kvs_le_put16(p, (uint16_t) nl);
    p = kvs_wire_putb(p, msg, nl);

    kvs_wire_commit(b, p);

    return KVS_OK;
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

    p = kvs_le_put32(p, choice);
    *p++ = (uint8_t) finish;
    *p++ = finish == KVS_FINISH_ERROR && out->client_fault ? 1 : 0;
    p = kvs_le_put16(p, (uint16_t) el);
    p = kvs_le_put32(p, out->n_prompt);
    p = kvs_le_put32(p, out->n_generated);
    p = kvs_le_put32(p, out->n_preempted);
    p = kvs_le_put64(p, t != NULL ? t->recv_ns : 0);
    p = kvs_le_put64(p, t != NULL ? t->first_ns : 0);
    p = kvs_le_put64(p, t != NULL ? t->now_ns : 0);
    p = kvs_le_put32(p, (uint32_t) (t1 - t0));
    p = kvs_le_put32(p, (uint32_t) (x1 - x0));
    p = kvs_le_put32(p, (uint32_t) (l1 - l0));
    p = kvs_le_put32(p, out->has_cache ? out->n_cached : 0);
    p = kvs_le_put32(p, out->has_cache ? out->n_cache_created : 0);
    p = kvs_le_put32(p, out->has_cache ? out->miss_pos : 0);
    *p++ = (uint8_t) (out->has_cache ? out->miss : 0);
    *p++ = out->has_cache ? 1 : 0;
    p = kvs_le_put16(p, finish == KVS_FINISH_ERROR
                        ? (uint16_t) out->retry_after : 0);
    p = kvs_le_put64(p, out->kv_block_us);
    p = kvs_le_put32(p, out->has_cache ? out->n_cached_tier : 0);
    p = kvs_le_put32(p, out->has_cache ? out->n_cached_host : 0);

    /* no output yet may mean no buffer: no offset from NULL */
    p = kvs_wire_put_ids(p, t1 > t0 ? out->tokens + t0 : NULL, t1 - t0);
    p = kvs_wire_putb(p, x1 > x0 ? out->text.data + x0 : NULL, x1 - x0);

    for (i = l0; i < l1; i++) {
        lp = &out->lp[i];
        p = kvs_le_put32(p, (uint32_t) lp->token);
        p = kvs_wire_putf(p, lp->logprob);
        *p++ = (uint8_t) lp->n_top;

        for (j = 0; j < lp->n_top; j++) {
            p = kvs_le_put32(p, (uint32_t) lp->top_token[j]);
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

    if (out->finish == KVS_FINISH_ERROR && out->client_fault > 1) {
        return kvs_err_set(err, KVS_ERANGE, "OUT: client_fault: %u is not "
                           "0 or 1", out->client_fault);
    }

    if (out->finish == KVS_FINISH_ERROR
        && out->retry_after > KVS_WIRE_MAX_RETRY_AFTER)
    {
        return kvs_err_set(err, KVS_ERANGE, "OUT: retry_after: %u exceeds "
                           "%d", out->retry_after, KVS_WIRE_MAX_RETRY_AFTER);
    }

    if (out->has_cache
        && ((unsigned) out->miss > KVS_RADIX_MISS_OFF
            || out->n_cached > out->n_prompt
            || out->n_cache_created > out->n_prompt
            || out->n_cached_tier > out->n_cached
            || out->n_cached_host > out->n_cached - out->n_cached_tier
            || out->miss_pos > out->n_prompt))
    {
        return kvs_err_set(err, KVS_ERANGE, "OUT: cache: miss %d at %u, "
                           "%u cached (%u from the disk, %u from host "
                           "memory) and %u created of a %u-token prompt",
                           (int) out->miss, out->miss_pos, out->n_cached,
                           out->n_cached_tier, out->n_cached_host,
                           out->n_cache_created, out->n_prompt);
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

    p = kvs_le_put64(p, now_ns);
    kvs_wire_commit(b, p);

    return KVS_OK;
}


int
kvs_wire_enc_stats(kvs_buf_t *b, uint64_t id, const kvs_wire_stats_t *m,
    kvs_err_t *err)
{
    int                          rc;
    size_t                       len, rec;
    uint8_t                     *p;
    uint32_t                     i, k;
    const kvs_engine_tenants_t  *tn;

    if (m->n_models > KVS_WIRE_MAX_MODELS) {
        return kvs_err_set(err, KVS_ERANGE, "STATS_REPLY: n_models: %u "
                           "exceeds %d", m->n_models, KVS_WIRE_MAX_MODELS);
    }

    len = KVS_WIRE_HDR + 12;
    rec = kvs_wire_fields_size(&kvs_wire_stats_tenant);

    for (i = 0; i < m->n_models; i++) {
        tn = &m->models[i].tenants;

        if (tn->n_top > KVS_ENGINE_TOP_TENANTS) {
            return kvs_err_set(err, KVS_ERANGE, "STATS_REPLY: n_top: %u "
                               "exceeds %d", tn->n_top,
                               KVS_ENGINE_TOP_TENANTS);
        }

        len += kvs_wire_fields_size(&kvs_wire_stats_model) + 8 + rec;

        for (k = 0; k < tn->n_top; k++) {
            if (tn->top[k].key_len > KVS_FAIR_MAX_KEY) {
                return kvs_err_set(err, KVS_ERANGE, "STATS_REPLY: tenant "
                                   "key: %zu bytes exceed %d",
                                   tn->top[k].key_len, KVS_FAIR_MAX_KEY);
            }

            len += 2 + tn->top[k].key_len + rec;
        }
    }

    rc = kvs_wire_begin(b, len, KVS_WIRE_STATS_REPLY, id, &p, err);
    if (rc != KVS_OK) {
        return rc;
    }

    p = kvs_le_put32(p, m->clients);
    p = kvs_le_put32(p, m->requests);
    p = kvs_le_put32(p, m->n_models);

    for (i = 0; i < m->n_models; i++) {
        p = kvs_wire_put_fields(p, &kvs_wire_stats_model, &m->models[i]);

        tn = &m->models[i].tenants;
        p = kvs_le_put32(p, tn->n_top);
        p = kvs_le_put32(p, tn->n_tenants);

        for (k = 0; k < tn->n_top; k++) {
            p = kvs_le_put16(p, (uint16_t) tn->top[k].key_len);
            p = kvs_wire_putb(p, tn->top[k].key, tn->top[k].key_len);
            p = kvs_wire_put_fields(p, &kvs_wire_stats_tenant, &tn->top[k]);
        }

        p = kvs_wire_put_fields(p, &kvs_wire_stats_tenant, &tn->other);
    }

    kvs_wire_commit(b, p);

    return KVS_OK;
}
