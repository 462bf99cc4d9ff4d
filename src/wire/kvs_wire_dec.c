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
 * named.  Arrays a decoded struct owns are reused from one decode to the
 * next and grown only when too small.
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

        if (kvs_wire_u32(&rd, "index", &md->index) != KVS_OK
            || kvs_wire_u32(&rd, "n_ctx", &md->n_ctx) != KVS_OK
            || kvs_wire_u32(&rd, "n_vocab", &md->n_vocab) != KVS_OK
            || kvs_wire_u32(&rd, "block_tokens", &md->block_tokens)
               != KVS_OK
            || kvs_wire_u32(&rd, "kv_blocks", &md->kv_blocks) != KVS_OK
            || kvs_wire_u64(&rd, "file_size", &md->file_size) != KVS_OK
            || kvs_wire_u64(&rd, "mtime_ns", &u) != KVS_OK
            || kvs_wire_u64(&rd, "dev", &md->dev) != KVS_OK
            || kvs_wire_u64(&rd, "ino", &md->ino) != KVS_OK
            || kvs_wire_u64(&rd, "epoch", &md->epoch) != KVS_OK
            || kvs_wire_u16(&rd, "name_len", &nl) != KVS_OK)
        {
            return KVS_EFORMAT;
        }

        md->mtime_ns = (int64_t) u;

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
kvs_wire_dec_submit(const uint8_t *f, size_t f_len, kvs_wire_submit_t *m,
    kvs_err_t *err)
{
    int                   v;
    size_t                off;
    uint8_t               u8, pad, n_pins;
    uint16_t              sl, scope_len, tenant_len, pad16;
    uint32_t              i, n_bias, n_sid, n_stop, n_prompt;
    kvs_engine_pin_t     *pin;
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
        || kvs_wire_u32(&rd, "n_stop", &n_stop) != KVS_OK
        || kvs_wire_u32(&rd, "adapter", &r->adapter) != KVS_OK
        || kvs_wire_u16(&rd, "scope_len", &scope_len) != KVS_OK
        || kvs_wire_u8(&rd, "n_pins", &n_pins) != KVS_OK
        || kvs_wire_u8(&rd, "reserved", &pad) != KVS_OK
        || kvs_wire_u16(&rd, "tenant_len", &tenant_len) != KVS_OK
        || kvs_wire_u16(&rd, "reserved", &pad16) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (pad != 0 || pad16 != 0) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: reserved: must be 0 "
                           "(got %u)", pad != 0 ? pad : pad16);
    }

    if (tenant_len > KVS_FAIR_MAX_KEY) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: tenant_len: %u "
                           "exceeds %d", tenant_len, KVS_FAIR_MAX_KEY);
    }

    if (scope_len > KVS_RADIX_MAX_SCOPE) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: scope_len: %u exceeds "
                           "%d", scope_len, KVS_RADIX_MAX_SCOPE);
    }

    if (n_pins > KVS_ENGINE_MAX_PINS) {
        return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: n_pins: %u exceeds %d",
                           n_pins, KVS_ENGINE_MAX_PINS);
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
        m->prompt[i] = (int32_t) kvs_le_get32(rd.p + (size_t) i * 4);
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

    if (kvs_wire_need(&rd, scope_len, "scope") != KVS_OK) {
        return KVS_EFORMAT;
    }

    /* raw bytes: the scope is a tenant's key, compared as bytes */
    memcpy(m->scope, rd.p, scope_len);
    rd.p += scope_len;
    rd.left -= scope_len;

    if (kvs_wire_need(&rd, tenant_len, "tenant") != KVS_OK) {
        return KVS_EFORMAT;
    }

    /* raw bytes: the fair share compares keys as bytes */
    memcpy(m->tenant, rd.p, tenant_len);
    rd.p += tenant_len;
    rd.left -= tenant_len;

    for (i = 0; i < n_pins; i++) {
        pin = &r->pins[i];

        if (kvs_wire_u32(&rd, "pins.n_tokens", &pin->n_tokens) != KVS_OK
            || kvs_wire_u32(&rd, "pins.ttl_ms", &pin->ttl_ms) != KVS_OK)
        {
            return KVS_EFORMAT;
        }

        if (pin->n_tokens == 0 || pin->n_tokens > n_prompt) {
            return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: pins[%u].n_tokens: "
                               "%u is not in 1..%u", i, pin->n_tokens,
                               n_prompt);
        }

        if (pin->ttl_ms == 0 || pin->ttl_ms > KVS_ENGINE_MAX_PIN_TTL) {
            return kvs_err_set(err, KVS_EFORMAT, "SUBMIT: pins[%u].ttl_ms: "
                               "%u is not in 1..%d", i, pin->ttl_ms,
                               KVS_ENGINE_MAX_PIN_TTL);
        }
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
    r->scope = scope_len > 0 ? m->scope : NULL;
    r->scope_len = scope_len;
    r->tenant = tenant_len > 0 ? m->tenant : NULL;
    r->tenant_len = tenant_len;
    r->n_pins = n_pins;

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
    uint8_t                 fin, pad, nt, miss, has;
    uint16_t                el, pad16;
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
    o->n_cached = 0;
    o->n_cache_created = 0;
    o->miss = KVS_RADIX_MISS_NONE;
    o->miss_pos = 0;
    o->has_cache = 0;

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
        || kvs_wire_u32(&rd, "n_logprobs", &n_lp) != KVS_OK
        || kvs_wire_u32(&rd, "n_cached", &o->n_cached) != KVS_OK
        || kvs_wire_u32(&rd, "n_cache_created", &o->n_cache_created)
           != KVS_OK
        || kvs_wire_u32(&rd, "miss_pos", &o->miss_pos) != KVS_OK
        || kvs_wire_u8(&rd, "miss", &miss) != KVS_OK
        || kvs_wire_u8(&rd, "has_cache", &has) != KVS_OK
        || kvs_wire_u16(&rd, "reserved", &pad16) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    if (pad16 != 0 || has > 1) {
        return kvs_err_set(err, KVS_EFORMAT, "OUT: has_cache %u, reserved "
                           "%u: must be 0 or 1, and 0", has, pad16);
    }

    /* without has_cache the four fields are zero: one encoding each */
    if (miss > KVS_RADIX_MISS_OFF
        || (!has && (miss != 0 || o->n_cached != 0
                     || o->n_cache_created != 0 || o->miss_pos != 0))
        || o->n_cached > o->n_prompt || o->n_cache_created > o->n_prompt
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

    for (i = 0; i < n_tok; i++) {
        o->tokens[i] = (int32_t) kvs_le_get32(rd.p + (size_t) i * 4);
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


/* A tenant's counts, after its key. */
static int
kvs_wire_dec_tenant(kvs_wire_rd_t *rd, kvs_engine_tenant_t *t)
{
    if (kvs_wire_u64(rd, "tenant.prefill", &t->prefill) != KVS_OK
        || kvs_wire_u64(rd, "tenant.decode", &t->decode) != KVS_OK
        || kvs_wire_u32(rd, "tenant.kv_blocks", &t->kv_blocks) != KVS_OK
        || kvs_wire_u32(rd, "tenant.n_seqs", &t->n_seqs) != KVS_OK)
    {
        return KVS_EFORMAT;
    }

    return KVS_OK;
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

        if (kvs_wire_need(rd, kl, "tenant.key") != KVS_OK) {
            return KVS_EFORMAT;
        }

        /* raw bytes: a key is whatever the worker sent */
        memcpy(t->key, rd->p, kl);
        t->key_len = kl;
        rd->p += kl;
        rd->left -= kl;

        if (kvs_wire_dec_tenant(rd, t) != KVS_OK) {
            return KVS_EFORMAT;
        }
    }

    return kvs_wire_dec_tenant(rd, &tn->other);
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
            || kvs_wire_u64(&rd, "finished", &s->finished) != KVS_OK
            || kvs_wire_u64(&rd, "cache_query_tokens",
                            &s->cache_query_tokens) != KVS_OK
            || kvs_wire_u64(&rd, "cache_hit_tokens", &s->cache_hit_tokens)
               != KVS_OK
            || kvs_wire_u64(&rd, "cache_evicted_blocks",
                            &s->cache_evicted_blocks) != KVS_OK
            || kvs_wire_u32(&rd, "cache_blocks", &s->cache_blocks) != KVS_OK
            || kvs_wire_u32(&rd, "cache_pinned_blocks",
                            &s->cache_pinned_blocks) != KVS_OK
            || kvs_wire_u64(&rd, "epoch", &s->epoch) != KVS_OK)
        {
            return KVS_EFORMAT;
        }

        if (kvs_wire_dec_tenants(&rd, &m->models[i].tenants, err)
            != KVS_OK)
        {
            return KVS_EFORMAT;
        }
    }

    return kvs_wire_end(&rd);
}
