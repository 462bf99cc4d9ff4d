/*
 * test_engine_gram: output constraints (response_format) through the
 * engine, on a generated model (random weights, byte-level BPE of 300
 * ids) and on stories260K (SentencePiece) when the fixture is there.
 *
 * What must hold: every output of a constrained request that finishes
 * with "stop" parses and validates against its schema (held to the
 * independent validator of kvs_test_gram.h, not to the grammar); one cut
 * by max_tokens finishes with "length" and is a prefix the grammar
 * accepts; a seed gives the same tokens every run, also under n > 1
 * choices and on a device-sampling backend (the fake CUDA one, which
 * samples on its "device": a constrained step must come back to the
 * host); what the grammar cannot do, and stop strings beside a
 * constraint, are refused at submit with the reason; the prefix cache
 * and KV pool end clean.  Tool calls (KVS_GRAM_REQ_TOOLS): "required"
 * output parses (kvs_tool_parse) into a call of a tool with valid
 * arguments, "auto" into text or calls, also when the marker is one
 * control token (then its text is in the output).  A schema that keeps
 * a free string open per anyOf branch is ended with the reason.
 */

#include "kvs_test.h"
#include "kvs_test_gram.h"
#include "kvs_test_model.h"

#include <unistd.h>

#include "api/kvs_tool_parse.h"
#include "engine/kvs_engine.h"
#include "grammar/kvs_gram_req.h"

static char  fake_so[1024];           /* libkvs_fake_cuda.so, or "" */

/* Bounded schemas: a random model completes them well within
 * max_tokens, so every run must end with "stop". */
static const char  *schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
    "\"maxLength\":8},\"age\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":120},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\","
    "\"age\",\"ok\"],\"additionalProperties\":false}",

    "{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",1,null]},"
    "\"minItems\":1,\"maxItems\":4}",

    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\","
    "\"format\":\"uuid\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"string\",\"pattern\":\"^[a-z]{1,5}$\"},\"maxItems\":3}},"
    "\"required\":[\"id\"],\"additionalProperties\":false}",

    "{\"anyOf\":[{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5},"
    "{\"type\":\"string\",\"maxLength\":3},{\"type\":\"null\"}]}",

    "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"object\","
    "\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":-10,"
    "\"maximum\":10},\"y\":{\"const\":\"fixed\"}},\"required\":[\"x\","
    "\"y\"],\"additionalProperties\":false}},\"required\":[\"p\"],"
    "\"additionalProperties\":false}",
};

#define N_SCHEMAS  (sizeof(schemas) / sizeof(schemas[0]))

typedef struct {
    float     temperature;
    float     top_p;
    int32_t   top_k;
} samp_t;

static const samp_t  samps[] = {
    { 0.0f, 1.0f, 0 },                /* greedy */
    { 1.0f, 1.0f, 0 },                /* the plain draw */
    { 1.3f, 0.9f, 0 },
    { 0.8f, 1.0f, 5 },
};

#define N_SAMPS  (sizeof(samps) / sizeof(samps[0]))


static kvs_engine_t *
new_engine(const kvs_test_model_t *md, kvs_backend_kind_t kind)
{
    kvs_err_t          err;
    kvs_engine_t      *e;
    kvs_engine_conf_t  conf;

    memset(&conf, 0, sizeof(conf));
    conf.model = md->m;
    conf.vocab = md->v;
    conf.n_blocks = 128;
    conf.threads = 1;
    conf.backend = kind;

    if (kvs_engine_new(&e, &conf, &err) != KVS_OK) {
        fail_msg("engine: %s", err.msg);
    }

    return e;
}


/* Runs req to its end on e; out is filled (kvs_engine_out_free it). */
static int
run(kvs_engine_t *e, const kvs_engine_req_t *req, kvs_engine_out_t *out,
    uint32_t n)
{
    int                fin;
    uint32_t           i;
    kvs_err_t          err;
    kvs_engine_seq_t  *h[8];

    if (kvs_engine_submit(e, req, h, &err) != KVS_OK) {
        fail_msg("submit: %s", err.msg);
    }

    while (kvs_engine_step(e)) {
        /* to the end */
    }

    fin = 0;

    for (i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(kvs_engine_out_t));
        fin = kvs_engine_read(e, h[i], &out[i]);
        assert_true(fin > 0);
        kvs_engine_close(e, h[i]);
    }

    assert_int_equal(kvs_engine_check(e, &err), KVS_OK);

    return fin;
}


/* A finished output validates; a cut one is a prefix the grammar
 * takes.  Returns 1 for a finished one. */
static int
check_output(unsigned kind, const char *schema, const kvs_engine_out_t *o)
{
    int                 ok;
    json_t             *x;
    kvs_err_t           err;
    kvs_gram_t          g;
    json_error_t        je;
    kvs_gram_matcher_t  m;

    if (getenv("KVS_TEST_SHOW") != NULL) {
        print_message("%d %.*s\n", (int) o->finish, (int) o->text.len,
                      (const char *) o->text.data);
    }

    if (o->finish == KVS_FINISH_STOP) {
        if (kind == KVS_GRAM_REQ_OBJECT) {
            x = json_loadb((const char *) o->text.data, o->text.len, 0,
                           &je);
            if (x == NULL || !json_is_object(x)) {
                fail_msg("not a JSON object: %.*s", (int) o->text.len,
                         (const char *) o->text.data);
            }
            json_decref(x);
            return 1;
        }

        ok = tg_valid_text(schema, (const char *) o->text.data,
                           o->text.len);
        if (ok != 1) {
            fail_msg("does not validate against %s: %.*s", schema,
                     (int) o->text.len, (const char *) o->text.data);
        }

        return 1;
    }

    if (o->finish != KVS_FINISH_LENGTH) {
        fail_msg("finish %d (%s)", (int) o->finish, o->error);
    }

    assert_int_equal(kvs_gram_req_compile(&g, kind, schema,
                                          schema != NULL ? strlen(schema)
                                                         : 0, &err),
                     KVS_OK);
    assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
    if (kvs_gram_matcher_feed(&m, o->text.data, o->text.len, &err)
        != KVS_OK)
    {
        fail_msg("a cut output the grammar refuses: %.*s (%s)",
                 (int) o->text.len, (const char *) o->text.data, err.msg);
    }
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);

    return 0;
}


static void
set_req(kvs_engine_req_t *req, const int32_t *prompt, uint32_t n_prompt,
    unsigned kind, const char *schema, const samp_t *sp, uint64_t seed)
{
    memset(req, 0, sizeof(*req));
    req->prompt = prompt;
    req->n_prompt = n_prompt;
    req->max_tokens = 400;
    req->sample.temperature = sp->temperature;
    req->sample.top_p = sp->top_p;
    req->sample.top_k = sp->top_k;
    req->sample.seed = seed;
    req->gram_kind = kind;
    req->schema = schema;
    req->schema_len = schema != NULL ? strlen(schema) : 0;
}


/* Every schema, sampler and seed: valid, complete, reproducible. */
static void
sweep(const kvs_test_model_t *md, const int32_t *prompt, uint32_t n_prompt,
    uint32_t seeds)
{
    int                done;
    uint32_t           s, k, q, finished, total;
    kvs_engine_t      *e;
    kvs_engine_req_t   req;
    kvs_engine_out_t   a, b;

    e = new_engine(md, KVS_BACKEND_CPU);
    finished = total = 0;

    for (s = 0; s < N_SCHEMAS; s++) {
        for (k = 0; k < N_SAMPS; k++) {
            for (q = 0; q < seeds; q++) {
                set_req(&req, prompt, n_prompt, KVS_GRAM_REQ_SCHEMA,
                        schemas[s], &samps[k], 1000 + q * 7919);

                run(e, &req, &a, 1);
                done = check_output(KVS_GRAM_REQ_SCHEMA, schemas[s], &a);
                finished += done;
                total++;

                /* the same seed, again: the same tokens (the grammar's
                 * cache is warm now, which must change nothing) */
                run(e, &req, &b, 1);
                assert_int_equal(a.finish, b.finish);
                assert_int_equal(a.n_tokens, b.n_tokens);
                assert_memory_equal(a.tokens, b.tokens,
                                    a.n_tokens * sizeof(int32_t));

                kvs_engine_out_free(&a);
                kvs_engine_out_free(&b);

                if (samps[k].temperature == 0.0f) {
                    break;            /* greedy: seeds change nothing */
                }
            }
        }
    }

    /* bounded schemas: every run completes */
    assert_int_equal(finished, total);

    /* json_object: unbounded, so "length" may come; what finishes is an
     * object */
    for (q = 0; q < seeds; q++) {
        set_req(&req, prompt, n_prompt, KVS_GRAM_REQ_OBJECT, NULL,
                &samps[q % N_SAMPS], 5 + q);
        run(e, &req, &a, 1);
        (void) check_output(KVS_GRAM_REQ_OBJECT, NULL, &a);
        kvs_engine_out_free(&a);
    }

    kvs_engine_free(e);
}


static void
test_generated(void **state)
{
    int32_t           prompt[6] = { 10, 20, 30, 40, 50, 60 };
    kvs_test_model_t  md;

    (void) state;

    kvs_test_model_small(&md, "gram", 1024, 11, 0);
    sweep(&md, prompt, 6, 4);
    kvs_test_model_free(&md);
}


static void
test_stories(void **state)
{
    int32_t           prompt[8];
    uint32_t          i;
    kvs_test_model_t  md;

    (void) state;

    if (kvs_test_model_stories(&md) != 0) {
        skip();
    }

    for (i = 0; i < 8; i++) {
        prompt[i] = i == 0 ? md.v->bos : (int32_t) (40 + i * 23);
    }

    sweep(&md, prompt, 8, 2);
    kvs_test_model_free(&md);
}


/* n choices: each its own matcher, each valid, each the output the same
 * seed gives alone; max_tokens cutting an output short is "length". */
static void
test_choices_and_length(void **state)
{
    uint32_t          i;
    int32_t           prompt[5] = { 7, 8, 9, 10, 11 };
    kvs_engine_t     *e;
    kvs_engine_req_t  req;
    kvs_engine_out_t  alone[3], got[3];
    kvs_test_model_t  md;

    (void) state;

    kvs_test_model_small(&md, "gramn", 1024, 12, 1);
    e = new_engine(&md, KVS_BACKEND_CPU);

    for (i = 0; i < 3; i++) {
        set_req(&req, prompt, 5, KVS_GRAM_REQ_SCHEMA, schemas[0],
                &samps[1], 42 + i);
        run(e, &req, &alone[i], 1);
        assert_int_equal(check_output(KVS_GRAM_REQ_SCHEMA, schemas[0],
                                      &alone[i]), 1);
    }

    set_req(&req, prompt, 5, KVS_GRAM_REQ_SCHEMA, schemas[0], &samps[1], 42);
    req.n = 3;
    run(e, &req, got, 3);

    for (i = 0; i < 3; i++) {
        assert_int_equal(got[i].finish, KVS_FINISH_STOP);
        assert_int_equal(got[i].n_tokens, alone[i].n_tokens);
        assert_memory_equal(got[i].tokens, alone[i].tokens,
                            alone[i].n_tokens * sizeof(int32_t));
        kvs_engine_out_free(&got[i]);
    }

    /* cut short: the first tokens of the full output, and "length" */
    set_req(&req, prompt, 5, KVS_GRAM_REQ_SCHEMA, schemas[0], &samps[1], 42);
    req.max_tokens = 3;
    assert_true(alone[0].n_tokens > 3);
    run(e, &req, got, 1);
    assert_int_equal(got[0].finish, KVS_FINISH_LENGTH);
    assert_int_equal(got[0].n_tokens, 3);
    assert_memory_equal(got[0].tokens, alone[0].tokens, 3 * sizeof(int32_t));
    assert_int_equal(check_output(KVS_GRAM_REQ_SCHEMA, schemas[0], &got[0]),
                     0);
    kvs_engine_out_free(&got[0]);

    /* ignore_eos does not make a constrained output run on */
    set_req(&req, prompt, 5, KVS_GRAM_REQ_SCHEMA, schemas[0], &samps[1], 42);
    req.ignore_eos = 1;
    run(e, &req, got, 1);
    assert_int_equal(got[0].finish, KVS_FINISH_STOP);
    assert_memory_equal(got[0].tokens, alone[0].tokens,
                        alone[0].n_tokens * sizeof(int32_t));
    kvs_engine_out_free(&got[0]);

    for (i = 0; i < 3; i++) {
        kvs_engine_out_free(&alone[i]);
    }

    kvs_engine_free(e);
    kvs_test_model_free(&md);
}


/* Refused at submit, with the reason; nothing queued. */
static void
test_refusals(void **state)
{
    int32_t            prompt[3] = { 1, 2, 3 };
    size_t             stop_len[1] = { 1 };
    kvs_err_t          err;
    kvs_engine_t      *e;
    kvs_engine_seq_t  *h;
    kvs_engine_req_t   req;
    kvs_engine_stats_t st;
    kvs_test_model_t   md;
    const char        *stop[1] = { "}" };
    const char        *bad;

    (void) state;

    kvs_test_model_small(&md, "gramr", 1024, 13, 0);
    e = new_engine(&md, KVS_BACKEND_CPU);

    bad = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\","
          "\"format\":\"hostname\"}}}";
    set_req(&req, prompt, 3, KVS_GRAM_REQ_SCHEMA, bad, &samps[0], 1);
    assert_int_equal(kvs_engine_submit(e, &req, &h, &err),
                     KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "response_format.json_schema.schema."
                                    "properties.x.format"));

    /* a tools spec's message names its field, not response_format */
    bad = "{\"choice\":\"auto\",\"parallel\":true,\"syntax\":\"hermes\","
          "\"tools\":[{\"name\":\"a b\"}]}";
    set_req(&req, prompt, 3, KVS_GRAM_REQ_TOOLS, bad, &samps[0], 1);
    assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "tools[0].name: "));
    assert_null(strstr(err.msg, "response_format"));

    bad = "{\"type\":";
    set_req(&req, prompt, 3, KVS_GRAM_REQ_SCHEMA, bad, &samps[0], 1);
    assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "not JSON"));

    set_req(&req, prompt, 3, KVS_GRAM_REQ_OBJECT, NULL, &samps[0], 1);
    req.stop = stop;
    req.stop_len = stop_len;
    req.n_stop = 1;
    assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "stop"));

    set_req(&req, prompt, 3, KVS_GRAM_REQ_KIND_MAX + 1, NULL, &samps[0], 1);
    assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_EINVAL);

    set_req(&req, prompt, 3, KVS_GRAM_REQ_SCHEMA, NULL, &samps[0], 1);
    assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_EINVAL);

    kvs_engine_stats(e, &st);
    assert_int_equal(st.requests, 0);
    assert_int_equal(kvs_engine_step(e), 0);
    assert_int_equal(kvs_engine_check(e, &err), KVS_OK);

    kvs_engine_free(e);
    kvs_test_model_free(&md);
}


/* A schema whose parse holds a free string of its own per anyOf branch
 * at once is ended at the step that would mask it, with the reason,
 * leaving the engine clean; as wide a frontier of literal keys is
 * followed, and so are branches whose free strings share one top. */
static void
test_broad(void **state)
{
    int                 i;
    char               *wide, *keys;
    int32_t             prompt[3] = { 1, 2, 3 };
    kvs_engine_t       *e;
    kvs_engine_req_t    req;
    kvs_engine_out_t    out;
    kvs_test_model_t    md;

    (void) state;

    kvs_test_model_small(&md, "gramb", 1024, 17, 0);
    e = new_engine(&md, KVS_BACKEND_CPU);

    wide = malloc(100 * 48 + 32);
    keys = malloc(100 * 112 + 32);
    strcpy(wide, "{\"anyOf\":[");
    strcpy(keys, "{\"anyOf\":[");
    for (i = 0; i < 100; i++) {
        sprintf(wide + strlen(wide), "%s{\"type\":\"string\","
                "\"minLength\":%d}", i ? "," : "", i);
        sprintf(keys + strlen(keys), "%s{\"type\":\"object\","
                "\"properties\":{\"k%d\":{\"type\":\"integer\"}},"
                "\"required\":[\"k%d\"]}", i ? "," : "", i, i);
    }
    strcat(wide, "]}");
    strcat(keys, "]}");

    /* after the opening quote: 100 strings' bodies open */
    set_req(&req, prompt, 3, KVS_GRAM_REQ_SCHEMA, wide, &samps[0], 1);
    req.max_tokens = 40;
    (void) run(e, &req, &out, 1);
    assert_int_equal(out.finish, KVS_FINISH_ERROR);
    if (strstr(out.error, "parses open at once") == NULL) {
        fail_msg("%s", out.error);
    }
    assert_int_equal(out.client_fault, 1);    /* the worker's 400 */
    assert_true(out.text.len <= 1);
    kvs_engine_out_free(&out);

    /* after "{": 100 keys' quotes open, each one byte wide */
    set_req(&req, prompt, 3, KVS_GRAM_REQ_SCHEMA, keys, &samps[0], 1);
    req.max_tokens = 40;
    (void) run(e, &req, &out, 1);
    assert_int_not_equal(out.finish, KVS_FINISH_ERROR);
    check_output(KVS_GRAM_REQ_SCHEMA, keys, &out);
    kvs_engine_out_free(&out);

    /* inside "text": 40 branches' free strings open, one top for all */
    strcpy(keys, "{\"anyOf\":[");
    for (i = 0; i < 40; i++) {
        sprintf(keys + strlen(keys), "%s{\"type\":\"object\","
                "\"properties\":{\"text\":{\"type\":\"string\"},"
                "\"k%d\":{\"type\":\"integer\"}},"
                "\"required\":[\"text\",\"k%d\"]}", i ? "," : "", i, i);
    }
    strcat(keys, "]}");
    set_req(&req, prompt, 3, KVS_GRAM_REQ_SCHEMA, keys, &samps[0], 1);
    req.max_tokens = 40;
    (void) run(e, &req, &out, 1);
    assert_int_not_equal(out.finish, KVS_FINISH_ERROR);
    assert_true(out.text.len > 12);
    check_output(KVS_GRAM_REQ_SCHEMA, keys, &out);
    kvs_engine_out_free(&out);

    free(wide);
    free(keys);
    kvs_engine_free(e);
    kvs_test_model_free(&md);
}


/* The cache: a hit shares the grammar; past its bound, unreferenced
 * entries go and held ones stay. */
static void
test_cache(void **state)
{
    char                text[64];
    uint32_t            i;
    kvs_err_t           err;
    kvs_gram_cache_t    c;
    kvs_gram_cached_t  *a, *b, *held;

    (void) state;

    assert_int_equal(kvs_gram_cache_init(&c, 4, 0, &err), KVS_OK);

    assert_int_equal(kvs_gram_cache_get(&c, KVS_GRAM_REQ_SCHEMA, schemas[1],
                                        strlen(schemas[1]), &held, &err),
                     KVS_OK);
    assert_int_equal(kvs_gram_cache_get(&c, KVS_GRAM_REQ_SCHEMA, schemas[1],
                                        strlen(schemas[1]), &b, &err),
                     KVS_OK);
    assert_ptr_equal(held, b);
    assert_int_equal(c.hits, 1);
    kvs_gram_cache_put(&c, b);

    for (i = 0; i < 10; i++) {
        snprintf(text, sizeof(text), "{\"const\":%u}", i);
        assert_int_equal(kvs_gram_cache_get(&c, KVS_GRAM_REQ_SCHEMA, text,
                                            strlen(text), &a, &err),
                         KVS_OK);
        assert_true(tg_match(kvs_gram_cached_gram(a), text + 9,
                             strlen(text + 9) - 1));
        kvs_gram_cache_put(&c, a);
        assert_true(c.n <= 4);
    }

    /* the held one survived the churn */
    assert_true(tg_match(kvs_gram_cached_gram(held), "[\"red\", 1]", 10));
    assert_int_equal(kvs_gram_cache_get(&c, KVS_GRAM_REQ_SCHEMA, schemas[1],
                                        strlen(schemas[1]), &b, &err),
                     KVS_OK);
    assert_ptr_equal(held, b);
    kvs_gram_cache_put(&c, b);
    kvs_gram_cache_put(&c, held);

    /* a compile error caches nothing */
    i = c.n;
    assert_int_equal(kvs_gram_cache_get(&c, KVS_GRAM_REQ_SCHEMA,
                                        "{\"not\":{}}", 10, &a, &err),
                     KVS_EUNSUPPORTED);
    assert_null(a);
    assert_int_equal(c.n, i);

    kvs_gram_cache_free(&c);
}


/* Maskers sharing one grammar's table give, state by state, the masks a
 * masker with no caches at all computes (a fresh trie walk each time),
 * along seeded random walks of several maskers taking turns. */
static void
test_shared_table(void **state)
{
    int                 rc;
    uint32_t            i, k, step, words, n_ok, id;
    uint32_t           *a, *b, *cand;
    uint64_t            rng;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_vocab_t   *gv;
    kvs_gram_masker_t   table, mk[3], plain;
    kvs_gram_matcher_t  m[3];
    kvs_test_model_t    md;

    (void) state;

    kvs_test_model_small(&md, "gramt", 256, 15, 0);
    assert_int_equal(kvs_gram_vocab_from_vocab(&gv, md.v, &err), KVS_OK);
    assert_int_equal(kvs_gram_req_compile(&g, KVS_GRAM_REQ_SCHEMA,
                                          schemas[2], strlen(schemas[2]),
                                          &err), KVS_OK);
    assert_int_equal(kvs_gram_masker_init_table(&table, gv, 8, &err),
                     KVS_OK);

    words = (gv->n_tokens + 31) / 32;
    a = calloc(words, 4);
    b = calloc(words, 4);
    cand = calloc(gv->n_tokens, 4);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(cand);

    for (k = 0; k < 3; k++) {
        assert_int_equal(kvs_gram_matcher_init(&m[k], &g, NULL, &err),
                         KVS_OK);
        assert_int_equal(kvs_gram_masker_init(&mk[k], gv, &m[k], 4, &err),
                         KVS_OK);
        kvs_gram_masker_share(&mk[k], &table);
    }

    rng = 77;

    for (step = 0; step < 300; step++) {
        k = step % 3;

        if (kvs_gram_matcher_must_end(&m[k])) {
            continue;
        }

        assert_int_equal(kvs_gram_mask(&mk[k], a, &err), KVS_OK);
        assert_int_equal(kvs_gram_masker_init(&plain, gv, &m[k], 0, &err),
                         KVS_OK);
        assert_int_equal(kvs_gram_mask(&plain, b, &err), KVS_OK);
        kvs_gram_masker_free(&plain);
        assert_memory_equal(a, b, words * 4);

        /* a random allowed text token */
        for (i = 0, n_ok = 0; i < gv->n_tokens; i++) {
            if (((a[i >> 5] >> (i & 31)) & 1)
                && gv->kind[i] == KVS_GRAM_TOK_TEXT)
            {
                cand[n_ok++] = i;
            }
        }
        if (n_ok == 0) {
            continue;
        }
        id = cand[tg_rand(&rng) % n_ok];
        rc = kvs_gram_accept_token(&m[k], gv, (int32_t) id, &err);
        assert_int_equal(rc, KVS_OK);
    }

    assert_true(table.n_ind > 0);

    for (k = 0; k < 3; k++) {
        kvs_gram_masker_free(&mk[k]);
        kvs_gram_matcher_free(&m[k]);
    }

    kvs_gram_masker_free(&table);
    kvs_gram_free(&g);
    kvs_gram_vocab_free(gv);
    free(a);
    free(b);
    free(cand);
    kvs_test_model_free(&md);
}


/* A cached grammar's table is warmed when first made (the keys its
 * stacks can show, kvs_gram_masker_warm), once: a second call returns
 * the same table as it is. */
static void
test_cached_warm(void **state)
{
    kvs_err_t                     err;
    kvs_gram_cache_t              c;
    kvs_gram_cached_t            *ce;
    kvs_gram_vocab_t             *gv;
    kvs_gram_masker_t            *t, *t2;
    kvs_test_model_t              md;
    kvs_gram_warm_stats_t         st;
    const kvs_gram_warm_stats_t  *w;

    (void) state;

    kvs_test_model_small(&md, "gramw", 256, 15, 0);
    assert_int_equal(kvs_gram_vocab_from_vocab(&gv, md.v, &err), KVS_OK);
    assert_int_equal(kvs_gram_cache_init(&c, 4, 0, &err), KVS_OK);
    assert_int_equal(kvs_gram_cache_get(&c, KVS_GRAM_REQ_SCHEMA, schemas[2],
                                        strlen(schemas[2]), &ce, &err),
                     KVS_OK);

    w = kvs_gram_cached_warm(ce);
    assert_int_equal(w->entries, 0);

    assert_int_equal(kvs_gram_cached_table(ce, gv, 64, NULL, &t, &err),
                     KVS_OK);
    assert_true(w->entries > 0);
    assert_int_equal(w->entries, t->n_ind);
    /* at most the fill built (lent ones have slots of their own) */
    assert_true(t->n_built <= KVS_GRAM_WARM_FILL(64));
    assert_true(w->entries <= t->cap_ind);
    assert_true(w->units <= 2 * KVS_GRAM_WARM_UNITS);
    st = *w;

    assert_int_equal(kvs_gram_cached_table(ce, gv, 64, NULL, &t2, &err),
                     KVS_OK);
    assert_ptr_equal(t, t2);
    assert_int_equal(t2->n_ind, st.entries);
    assert_memory_equal(w, &st, sizeof(st));

    kvs_gram_cache_put(&c, ce);
    kvs_gram_cache_free(&c);
    kvs_gram_vocab_free(gv);
    kvs_test_model_free(&md);
}


/* On a backend that samples on its device, a step with a constrained
 * row samples on the host: the very tokens of the CPU engine. */
static void
test_device_sampling(void **state)
{
    uint32_t          k, s;
    int32_t           prompt[4] = { 3, 4, 5, 6 };
    kvs_engine_t     *cpu, *dev;
    kvs_engine_req_t  req[2];
    kvs_engine_out_t  a[2], b[2];
    kvs_engine_seq_t *h[2];
    kvs_err_t         err;
    kvs_test_model_t  md;

    (void) state;

    if (fake_so[0] == '\0') {
        print_message("SKIP: libkvs_fake_cuda.so not built beside the "
                      "test\n");
        skip();
    }

    assert_int_equal(setenv("KVSERVE_CUDA_SO", fake_so, 1), 0);
    kvs_test_model_small(&md, "gramd", 512, 14, 0);
    cpu = new_engine(&md, KVS_BACKEND_CPU);
    dev = new_engine(&md, KVS_BACKEND_CUDA);

    for (s = 0; s < N_SCHEMAS; s++) {
        /* a constrained row beside an unconstrained one in each step */
        set_req(&req[0], prompt, 4, KVS_GRAM_REQ_SCHEMA, schemas[s],
                &samps[2], 99 + s);
        set_req(&req[1], prompt, 4, KVS_GRAM_REQ_NONE, NULL, &samps[3],
                7 + s);
        req[1].max_tokens = 30;
        req[1].ignore_eos = 1;

        for (k = 0; k < 2; k++) {
            assert_int_equal(kvs_engine_submit(cpu, &req[k], &h[k], &err),
                             KVS_OK);
        }
        while (kvs_engine_step(cpu)) {
        }
        for (k = 0; k < 2; k++) {
            memset(&a[k], 0, sizeof(a[k]));
            assert_true(kvs_engine_read(cpu, h[k], &a[k]) > 0);
            kvs_engine_close(cpu, h[k]);
        }

        for (k = 0; k < 2; k++) {
            assert_int_equal(kvs_engine_submit(dev, &req[k], &h[k], &err),
                             KVS_OK);
        }
        while (kvs_engine_step(dev)) {
        }
        for (k = 0; k < 2; k++) {
            memset(&b[k], 0, sizeof(b[k]));
            assert_true(kvs_engine_read(dev, h[k], &b[k]) > 0);
            kvs_engine_close(dev, h[k]);
        }

        assert_int_equal(check_output(KVS_GRAM_REQ_SCHEMA, schemas[s],
                                      &b[0]), 1);

        for (k = 0; k < 2; k++) {
            assert_int_equal(a[k].n_tokens, b[k].n_tokens);
            assert_memory_equal(a[k].tokens, b[k].tokens,
                                a[k].n_tokens * sizeof(int32_t));
            kvs_engine_out_free(&a[k]);
            kvs_engine_out_free(&b[k]);
        }
    }

    kvs_engine_free(cpu);
    kvs_engine_free(dev);
    kvs_test_model_free(&md);
}


/* ---- tool calls --------------------------------------------------------- */

#define TOOLS_SPEC(choice, syntax) \
    "{\"choice\":\"" choice "\",\"parallel\":false,\"syntax\":\"" \
    syntax "\",\"tools\":[{\"name\":\"get_weather\",\"parameters\":" \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":" \
    "\"string\",\"maxLength\":6},\"unit\":{\"enum\":[\"c\",\"f\"]}}," \
    "\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}}," \
    "{\"name\":\"add\",\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0," \
    "\"maximum\":99}},\"required\":[\"a\"],\"additionalProperties\":" \
    "false}}]}"

static const char  *tool_args[2] = {
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\","
    "\"maxLength\":6},\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":"
    "[\"city\",\"unit\"]}",
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\","
    "\"minimum\":0,\"maximum\":99}},\"required\":[\"a\"]}"
};


/* 1 if o parsed into calls (checked), 0 if into text (checked too). */
static int
check_tools(kvs_tool_syntax_t syn, const char *marker,
    const kvs_engine_out_t *o)
{
    size_t             i;
    kvs_err_t          err;
    kvs_tool_parsed_t  p;
    const char        *text;

    text = (const char *) o->text.data;

    if (getenv("KVS_TEST_SHOW") != NULL) {
        print_message("%d %.*s\n", (int) o->finish, (int) o->text.len,
                      text);
    }

    assert_int_equal(o->finish, KVS_FINISH_STOP);
    assert_int_equal(kvs_tool_parse(syn, text, o->text.len, &p, &err),
                     KVS_OK);

    if (p.n_calls == 0) {
        assert_int_equal(p.content_len, o->text.len);
        assert_null(memmem(text, o->text.len, marker, strlen(marker)));
        return 0;
    }

    assert_int_equal(p.n_calls, 1);

    for (i = 0; i < p.n_calls; i++) {
        if (strcmp(p.calls[i].name, "get_weather") == 0) {
            assert_int_equal(tg_valid_text(tool_args[0], p.calls[i].arguments,
                                           p.calls[i].arguments_len), 1);
        } else {
            assert_string_equal(p.calls[i].name, "add");
            assert_int_equal(tg_valid_text(tool_args[1], p.calls[i].arguments,
                                           p.calls[i].arguments_len), 1);
        }
    }

    kvs_tool_parsed_free(&p);

    return 1;
}


/*
 * A TOOLS constraint on the generated model, whose vocabulary gets a
 * control token "[TOOL_CALLS]" (as Mistral v0.3's): "required" always
 * ends in a call, "auto" in text or a call; the marker written as that
 * one token shows in the output's text.
 */
static void
test_tools(void **state)
{
    int                marked, stopped;
    uint32_t           i, q, k, ctl, calls;
    int32_t            prompt[4] = { 5, 6, 7, 8 };
    const char        *old_text;
    uint32_t           old_len;
    uint8_t            old_type;
    kvs_engine_t      *e;
    kvs_engine_req_t   req;
    kvs_engine_out_t   o;
    kvs_test_model_t   md;
    static const struct {
        const char         *spec;
        kvs_tool_syntax_t   syn;
        const char         *marker;
        int                 required;
    } cases[] = {
        { TOOLS_SPEC("required", "mistral"), KVS_TOOL_SYN_MISTRAL,
          "[TOOL_CALLS]", 1 },
        { TOOLS_SPEC("auto", "mistral"), KVS_TOOL_SYN_MISTRAL,
          "[TOOL_CALLS]", 0 },
        { TOOLS_SPEC("required", "hermes"), KVS_TOOL_SYN_HERMES,
          "<tool_call>", 1 },
        { TOOLS_SPEC("auto", "hermes"), KVS_TOOL_SYN_HERMES,
          "<tool_call>", 0 },
        { TOOLS_SPEC("required", "llama3"), KVS_TOOL_SYN_LLAMA3,
          "<|python_tag|>", 1 },
        { TOOLS_SPEC("required", "functionary"), KVS_TOOL_SYN_FUNCTIONARY,
          "<function=", 1 },
    };

    (void) state;

    kvs_test_model_small(&md, "gramt", 1024, 14, 0);

    /* the first merged text token becomes the marker, a control token */
    for (ctl = 256; ctl < md.v->n_tokens; ctl++) {
        if (md.v->tokens[ctl].type == KVS_TOKT_NORMAL
            && md.v->tokens[ctl].len >= 2 && (int32_t) ctl != md.v->eos
            && (int32_t) ctl != md.v->bos && (int32_t) ctl != md.v->eot)
        {
            break;
        }
    }
    assert_true(ctl < md.v->n_tokens);
    old_text = md.v->tokens[ctl].text;
    old_len = md.v->tokens[ctl].len;
    old_type = md.v->tokens[ctl].type;
    md.v->tokens[ctl].text = "[TOOL_CALLS]";
    md.v->tokens[ctl].len = 12;
    md.v->tokens[ctl].type = KVS_TOKT_CONTROL;

    e = new_engine(&md, KVS_BACKEND_CPU);
    marked = 0;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        calls = 0;
        stopped = 0;

        for (q = 0; q < 12; q++) {
            set_req(&req, prompt, 4, KVS_GRAM_REQ_TOOLS, cases[i].spec,
                    &samps[1 + q % 3], 300 + q);
            req.max_tokens = 300;
            run(e, &req, &o, 1);

            if (o.finish == KVS_FINISH_LENGTH && !cases[i].required) {
                /* free text may run to max_tokens */
                kvs_engine_out_free(&o);
                continue;
            }

            stopped++;
            calls += (uint32_t) check_tools(cases[i].syn, cases[i].marker,
                                            &o);

            for (k = 0; k < o.n_tokens; k++) {
                if (o.tokens[k] == (int32_t) ctl) {
                    /* the control token's text is in the output */
                    assert_non_null(memmem(o.text.data, o.text.len,
                                           "[TOOL_CALLS]", 12));
                    marked++;
                }
            }

            kvs_engine_out_free(&o);
        }

        if (cases[i].required) {
            assert_int_equal(calls, 12);
        } else {
            assert_true(stopped > 0);
        }
    }

    /* the mask offered the one-token marker and the model took it */
    assert_true(marked > 0);

    kvs_engine_free(e);

    md.v->tokens[ctl].text = old_text;
    md.v->tokens[ctl].len = old_len;
    md.v->tokens[ctl].type = old_type;
    kvs_test_model_free(&md);
}


int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_stories),
        cmocka_unit_test(test_choices_and_length),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_broad),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_shared_table),
        cmocka_unit_test(test_cached_warm),
        cmocka_unit_test(test_device_sampling),
        cmocka_unit_test(test_tools),
    };

    kvs_test_fake_cuda(argc > 0 ? argv[0] : NULL, fake_so, sizeof(fake_so));

    return cmocka_run_group_tests(tests, NULL, NULL);
}
