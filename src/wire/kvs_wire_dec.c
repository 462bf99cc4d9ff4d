/*
 * kvs_wire_dec: the decoders of the messages with a body (HELLO, SUBMIT,
 * REFUSED, OUT, PONG, STATS_REPLY) and kvs_wire_submit_free; the
 * bodiless ones are in kvs_wire.c.
 *
 * Invariants: a decoder reads through the cursor of kvs_wire_impl.h, so
 * it never reads past the frame; it checks every field before trusting
 * it (counts against the bytes left, strings within their limits, enum
 * and flag values, floats finite where they must be) and consumes the
 * body exactly; failures are KVS_EFORMAT with the message type and field
 * named.  Fixed fields are read through the tables of
 * kvs_wire_layout.c, the ones the encoders write through.  Arrays a
 * decoded struct owns are reused from one decode to the next and grown
 * only when too small.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_wire_impl.h"


/* --- HELLO --------------------------------------------------------------- */

int
kvs_wire_dec_hello(const uint8_t *f, size_t f_len, kvs_wire_hello_t *m,
    kvs_err_t *err)
{
    uint16_t           nl;
    uint32_t           i;
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

    if (kvs_le_get16(f + 6) != m->version) {
        return kvs_err_set(err, KVS_EFORMAT, "HELLO: version: header says "
                           "%u, body %u", kvs_le_get16(f + 6), m->version);
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

        if (kvs_wire_get_fields(&rd, &kvs_wire_hello_model, md) != KVS_OK
            || kvs_wire_u16(&rd, "name_len", &nl) != KVS_OK)
        {
            return KVS_EFORMAT;
        }

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

/* The prompt: checked against the frame before any allocation. */
static int
kvs_wire_dec_submit_prompt(kvs_wire_rd_t *rd, kvs_wire_submit_t *m)
{
    uint32_t  n;

    n = m->req.n_prompt;

    if (kvs_wire_need_n(rd, n, 4, "prompt") != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (n > 0
        && kvs_grow((void **) &m->prompt, &m->prompt_cap, n,
                    sizeof(int32_t)) != KVS_OK)
    {
        return kvs_err_set(rd->err, KVS_ENOMEM, "SUBMIT: prompt: out of "
                           "memory for %u ids", n);
    }

    kvs_wire_ids(rd, n, m->prompt);

    return KVS_OK;
}


static int
kvs_wire_dec_submit_bias(kvs_wire_rd_t *rd, kvs_wire_submit_t *m)
{
    uint32_t  i, n;

    n = m->req.sample.n_logit_bias;

    if (kvs_wire_need_n(rd, n, kvs_wire_fields_size(&kvs_wire_submit_bias),
                        "logit_bias") != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (n > 0
        && kvs_grow((void **) &m->bias, &m->bias_cap, n,
                    sizeof(kvs_logit_bias_t)) != KVS_OK)
    {
        return kvs_err_set(rd->err, KVS_ENOMEM, "SUBMIT: logit_bias: out of "
                           "memory for %u entries", n);
    }

    for (i = 0; i < n; i++) {
        if (kvs_wire_get_fields(rd, &kvs_wire_submit_bias, &m->bias[i])
            != KVS_OK)
        {
            return KVS_EFORMAT;
        }
    }

    return KVS_OK;
}


/* Stop strings are raw bytes: one may hold any byte the text can. */
static int
kvs_wire_dec_submit_stop(kvs_wire_rd_t *rd, kvs_wire_submit_t *m)
{
    size_t    off;
    uint16_t  len;
    uint32_t  i;

    off = 0;

    for (i = 0; i < m->req.n_stop; i++) {
        if (kvs_wire_u16(rd, "stop.len", &len) != KVS_OK
            || kvs_wire_stop_check(i, len, KVS_EFORMAT, rd->err) != KVS_OK
            || kvs_wire_bytes(rd, "stop", len, m->stop_text + off) != KVS_OK)
        {
            return KVS_EFORMAT;
        }

        m->stop[i] = m->stop_text + off;
        m->stop_len[i] = len;
        off += len;
    }

    return KVS_OK;
}


static int
kvs_wire_dec_submit_pins(kvs_wire_rd_t *rd, kvs_engine_req_t *r)
{
    uint32_t  i;

    for (i = 0; i < r->n_pins; i++) {
        if (kvs_wire_get_fields(rd, &kvs_wire_submit_pin, &r->pins[i])
            != KVS_OK
            || kvs_wire_pin_check(&r->pins[i], i, r->n_prompt, KVS_EFORMAT,
                                  rd->err) != KVS_OK)
        {
            return KVS_EFORMAT;
        }
    }

    return KVS_OK;
}


/* The constraint's schema text: checked against the bytes left before
 * the buffer grows for it. */
static int
kvs_wire_dec_submit_schema(kvs_wire_rd_t *rd, kvs_wire_submit_t *m)
{
    size_t  len;

    len = m->req.schema_len;

    if (len == 0) {
        return KVS_OK;
    }

    if (kvs_wire_need_n(rd, (uint32_t) len, 1, "schema") != KVS_OK) {
        return KVS_EFORMAT;
    }

    if (kvs_grow((void **) &m->schema, &m->schema_cap, len + 1, 1)
        != KVS_OK)
    {
        return kvs_err_set(rd->err, KVS_ENOMEM, "SUBMIT: out of memory for "
                           "the schema");
    }

    if (kvs_wire_bytes(rd, "schema", len, m->schema) != KVS_OK) {
        return KVS_EFORMAT;
    }

    m->schema[len] = '\0';

    return KVS_OK;
}


/* The sections in wire order; the fixed part's counts, checked as they
 * are read, bound the sections after it. */
static int
kvs_wire_dec_submit_body(kvs_wire_rd_t *rd, kvs_wire_submit_t *m)
{
    int                rc;
    kvs_engine_req_t  *r;

    r = &m->req;

    if (kvs_wire_u32(rd, "model", &m->model) != KVS_OK
        || kvs_wire_u64(rd, "submit_ns", &m->submit_ns) != KVS_OK
        || kvs_wire_get_fields(rd, &kvs_wire_submit_req, r) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    rc = kvs_wire_dec_submit_prompt(rd, m);
    if (rc != KVS_OK) {
        return rc;
    }

    rc = kvs_wire_dec_submit_bias(rd, m);
    if (rc != KVS_OK) {
        return rc;
    }

    if (kvs_wire_need_n(rd, r->n_stop_ids, 4, "stop_ids") != KVS_OK) {
        return KVS_EFORMAT;
    }

    kvs_wire_ids(rd, r->n_stop_ids, m->stop_ids);

    /* raw bytes: the scope and the tenant are keys, compared as bytes */
    if (kvs_wire_dec_submit_stop(rd, m) != KVS_OK
        || kvs_wire_bytes(rd, "scope", r->scope_len, m->scope) != KVS_OK
        || kvs_wire_bytes(rd, "tenant", r->tenant_len, m->tenant) != KVS_OK
        || kvs_wire_dec_submit_pins(rd, r) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    rc = kvs_wire_dec_submit_schema(rd, m);
    if (rc != KVS_OK) {
        return rc;
    }

    return kvs_wire_end(rd);
}


int
kvs_wire_dec_submit(const uint8_t *f, size_t f_len, kvs_wire_submit_t *m,
    kvs_err_t *err)
{
    int                rc;
    kvs_wire_rd_t      rd;
    kvs_engine_req_t  *r;

    r = &m->req;
    memset(r, 0, sizeof(kvs_engine_req_t));
    m->model = 0;
    m->submit_ns = 0;

    rc = kvs_wire_start(&rd, f, f_len, KVS_WIRE_SUBMIT, err);
    if (rc == KVS_OK) {
        rc = kvs_wire_dec_submit_body(&rd, m);
    }

    if (rc != KVS_OK) {
        /* no count without its array */
        memset(r, 0, sizeof(kvs_engine_req_t));
        return rc;
    }

    r->prompt = m->prompt;
    r->sample.logit_bias = r->sample.n_logit_bias > 0 ? m->bias : NULL;
    r->stop_ids = r->n_stop_ids > 0 ? m->stop_ids : NULL;
    r->stop = r->n_stop > 0 ? m->stop : NULL;
    r->stop_len = r->n_stop > 0 ? m->stop_len : NULL;
    r->scope = r->scope_len > 0 ? m->scope : NULL;
    r->tenant = r->tenant_len > 0 ? m->tenant : NULL;
    r->schema = r->schema_len > 0 ? m->schema : NULL;

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
    free(m->schema);
    m->schema = NULL;
    m->schema_cap = 0;
    memset(&m->req, 0, sizeof(kvs_engine_req_t));
}


/* --- REFUSED ------------------------------------------------------------- */

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

int
kvs_wire_dec_out(const uint8_t *f, size_t f_len, kvs_wire_out_t *m,
    kvs_err_t *err)
{
    uint8_t                 fin, fault, nt, miss, has;
    uint16_t                el, retry;
    uint32_t                i, j, n_tok, n_text, n_lp;
    const uint8_t          *text;
    kvs_wire_rd_t           rd;
    kvs_engine_out_t       *o;
    kvs_sample_logprobs_t  *lp;

    o = &m->out;
    o->n_tokens = 0;
    o->n_lp = 0;
    o->text.len = 0;
    o->finish = KVS_FINISH_NONE;
    o->error[0] = '\0';
    o->retry_after = 0;
    o->client_fault = 0;
    o->kv_block_us = 0;
    o->n_cached = 0;
    o->n_cache_created = 0;
    o->n_cached_tier = 0;
    o->n_cached_host = 0;
    o->miss = KVS_RADIX_MISS_NONE;
    o->miss_pos = 0;
    o->has_cache = 0;

    if (kvs_wire_start(&rd, f, f_len, KVS_WIRE_OUT, err) != KVS_OK
        || kvs_wire_u32(&rd, "choice", &m->choice) != KVS_OK
        || kvs_wire_u8(&rd, "finish", &fin) != KVS_OK
        || kvs_wire_u8(&rd, "client_fault", &fault) != KVS_OK
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

    /* version 16: the byte that was reserved says whose fault an error
     * is; one encoding: 0 with any other finish */
    if (fault > 1 || (fault != 0 && fin != KVS_FINISH_ERROR)) {
        return kvs_err_set(err, KVS_EFORMAT, "OUT: client_fault: %u with "
                           "finish %u (only error carries one, 0 or 1)",
                           fault, fin);
    }

    o->client_fault = fault;

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
        || kvs_wire_u32(&rd, "n_logprobs", &n_lp) != KVS_OK
        || kvs_wire_u32(&rd, "n_cached", &o->n_cached) != KVS_OK
        || kvs_wire_u32(&rd, "n_cache_created", &o->n_cache_created)
           != KVS_OK
        || kvs_wire_u32(&rd, "miss_pos", &o->miss_pos) != KVS_OK
        || kvs_wire_u8(&rd, "miss", &miss) != KVS_OK
        || kvs_wire_u8(&rd, "has_cache", &has) != KVS_OK
        || kvs_wire_u16(&rd, "retry_after", &retry) != KVS_OK
        || kvs_wire_u64(&rd, "kv_block_us", &o->kv_block_us) != KVS_OK
        || kvs_wire_u32(&rd, "n_cached_tier", &o->n_cached_tier) != KVS_OK
        || kvs_wire_u32(&rd, "n_cached_host", &o->n_cached_host) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (has > 1) {
        return kvs_err_set(err, KVS_EFORMAT, "OUT: has_cache: %u must be 0 "
                           "or 1", has);
    }

    if (retry > KVS_WIRE_MAX_RETRY_AFTER
        || (retry != 0 && fin != KVS_FINISH_ERROR))
    {
        return kvs_err_set(err, KVS_EFORMAT, "OUT: retry_after: %u with "
                           "finish %u (only error carries one, at most "
                           "%d)", retry, fin, KVS_WIRE_MAX_RETRY_AFTER);
    }

    o->retry_after = retry;

    /* without has_cache the five fields are zero: one encoding each */
    if (miss > KVS_RADIX_MISS_OFF
        || (!has && (miss != 0 || o->n_cached != 0
                     || o->n_cache_created != 0 || o->miss_pos != 0))
        || o->n_cached > o->n_prompt || o->n_cache_created > o->n_prompt
        || o->n_cached_tier > o->n_cached
        || o->n_cached_host > o->n_cached - o->n_cached_tier
        || o->miss_pos > o->n_prompt)
    {
        return kvs_err_set(err, KVS_EFORMAT, "OUT: cache: miss %u at %u, %u "
                           "cached and %u created of a %u-token prompt "
                           "(has_cache %u)", miss, o->miss_pos, o->n_cached,
                           o->n_cache_created, o->n_prompt, has);
    }

    o->miss = (kvs_radix_miss_t) miss;
    o->has_cache = has;
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

    kvs_wire_ids(&rd, n_tok, o->tokens);
    o->n_tokens = n_tok;

    text = kvs_wire_take(&rd, "text", n_text);
    if (text == NULL) {
        return KVS_EFORMAT;
    }

    if (kvs_buf_append(&o->text, text, n_text) != KVS_OK) {
        return kvs_err_set(err, KVS_ENOMEM, "OUT: text: out of memory");
    }

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


/* A model's tenants: n_top, n_tenants, the top ones, then the rest. */
static int
kvs_wire_dec_tenants(kvs_wire_rd_t *rd, kvs_engine_tenants_t *tn,
    kvs_err_t *err)
{
    uint16_t              kl;
    uint32_t              k;
    kvs_engine_tenant_t  *t;

    if (kvs_wire_u32(rd, "n_top", &tn->n_top) != KVS_OK
        || kvs_wire_u32(rd, "n_tenants", &tn->n_tenants) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (tn->n_top > KVS_ENGINE_TOP_TENANTS) {
        return kvs_err_set(err, KVS_EFORMAT, "STATS_REPLY: n_top: %u "
                           "exceeds %d", tn->n_top, KVS_ENGINE_TOP_TENANTS);
    }

    for (k = 0; k < tn->n_top; k++) {
        t = &tn->top[k];

        if (kvs_wire_u16(rd, "tenant.key_len", &kl) != KVS_OK) {
            return KVS_EFORMAT;
        }

        if (kl > KVS_FAIR_MAX_KEY) {
            return kvs_err_set(err, KVS_EFORMAT, "STATS_REPLY: tenant "
                               "key_len: %u exceeds %d", kl,
                               KVS_FAIR_MAX_KEY);
        }

        /* raw bytes: a key is whatever the worker sent */
        if (kvs_wire_bytes(rd, "tenant.key", kl, t->key) != KVS_OK
            || kvs_wire_get_fields(rd, &kvs_wire_stats_tenant, t) != KVS_OK)
        {
            return KVS_EFORMAT;
        }

        t->key_len = kl;
    }

    return kvs_wire_get_fields(rd, &kvs_wire_stats_tenant, &tn->other);
}


int
kvs_wire_dec_stats(const uint8_t *f, size_t f_len, kvs_wire_stats_t *m,
    kvs_err_t *err)
{
    uint32_t       i;
    kvs_wire_rd_t  rd;

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
        if (kvs_wire_get_fields(&rd, &kvs_wire_stats_model, &m->models[i])
            != KVS_OK
            || kvs_wire_dec_tenants(&rd, &m->models[i].tenants, err)
               != KVS_OK)
        {
            return KVS_EFORMAT;
        }
    }

    return kvs_wire_end(&rd);
}
