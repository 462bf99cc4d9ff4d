/*
 * test_engine_lora: LoRA adapters served by the engine
 * (src/engine/kvs_engine_lora.c) against merged models (the oracle,
 * kvs_gen_lora_merge, checked by test_lora).
 *
 *   - a generated llama base and 4 generated adapters (ranks 8 and 64)
 *     opened by the engine from their files; 5 requests, adapters 0..4,
 *     submitted together and stepped together, so every step mixes the
 *     base and the 4 adapters: each request's greedy tokens equal those
 *     of its merged model's engine (the base's for adapter 0), and the
 *     adapters matter (some adapted request's tokens differ from the
 *     base's on the same prompt);
 *   - the prefix cache: the same prompt under adapter 1 twice is a full
 *     hit (all but its last token), under adapter 2 and the base it
 *     reuses nothing, the miss saying another epoch (the adapter's
 *     epoch is in the namespace); an engine with another file as
 *     adapter 1 has another epoch for it, the same file the same one;
 *   - reload (kvs_engine_lora_bind): an engine whose adapter 1's file
 *     is replaced on disk binds the new file (its path, its new epoch)
 *     under a new id: a request under it reuses nothing of the old
 *     file's blocks, the miss saying another epoch, its greedy tokens
 *     those of an engine started with the new file, while the base's
 *     cached prompt still hits in full; binding the same file again
 *     gives the same id; a file whose epoch is not the bound one fails
 *     its request; an engine started without adapters serves one bound
 *     later;
 *   - the prefix index: an adapter's blocks are published under names a
 *     gateway computes from the base's epoch and the adapter file's
 *     alone (kvs_index_lora.h), whatever id the engine gave it;
 *   - a slow, large load never stalls the step loop (test_load_off_step):
 *     the loader reads and packs the adapter, the step loop's part is a
 *     pointer swap, timed;
 *   - refusals: a request naming adapter 5 of 4 (nothing queued), an
 *     adapter that does not fit the base (kvs_engine_new fails naming
 *     the tensor and its shapes), more adapters than slots.
 */

#include "kvs_test.h"

#include <inttypes.h>
#include <unistd.h>

#include "backend/cpu/kvs_cpu.h"
#include "base/kvs_clock.h"
#include "engine/kvs_engine.h"
#include "gen/kvs_gen.h"
#include "gen/kvs_gen_lora.h"
#include "index/kvs_index_lora.h"
#include "index/kvs_index_name.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"

#define N_AD     4
#define N_REQ    (N_AD + 1)
#define N_GEN    10
#define BT       16


typedef struct {
    kvs_model_t  *m;
    kvs_vocab_t  *v;
} mdl_t;


static char  base_path[256], other_path[256];
static char  ad_path[N_AD][256], merged_path[N_AD][256];
static const char  *ad_paths[N_AD];


static void
gen_model(char *path, const char *tag, uint32_t n_embd, uint64_t seed)
{
    char            name[64];
    kvs_err_t       err;
    kvs_gen_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "engine-lora");
    spec.arch = KVS_ARCH_LLAMA;
    spec.n_layer = 2;
    spec.n_embd = n_embd;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 2 * n_embd;
    spec.n_vocab = 300;
    spec.n_ctx = 256;
    spec.dtype = KVS_GGML_F32;
    spec.seed = seed;

    snprintf(name, sizeof(name), "engine-lora-%s.%d.gguf", tag,
             (int) getpid());
    snprintf(path, 256, "%s", kvs_test_tmp(name));

    if (kvs_gen_write(&spec, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }
}


static void
gen_adapter(char *path, const char *tag, uint32_t rank, uint64_t seed)
{
    char                 name[64];
    kvs_err_t            err;
    kvs_gen_lora_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    spec.rank = rank;
    spec.targets = 0x7f;
    spec.seed = seed;
    spec.alpha = 2.0f * (float) rank;
    spec.strength = 0.5f;

    snprintf(name, sizeof(name), "engine-lora-%s.%d.gguf", tag,
             (int) getpid());
    snprintf(path, 256, "%s", kvs_test_tmp(name));

    if (kvs_gen_lora_write(base_path, &spec, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }
}


static int
setup(void **state)
{
    char       tag[32];
    uint32_t   i;
    kvs_err_t  err;

    gen_model(base_path, "base", 64, 21);

    for (i = 0; i < N_AD; i++) {
        snprintf(tag, sizeof(tag), "a%u", i);
        gen_adapter(ad_path[i], tag, i % 2 ? 64 : 8, 300 + i);
        ad_paths[i] = ad_path[i];

        snprintf(tag, sizeof(tag), "engine-lora-m%u.%d.gguf", i,
                 (int) getpid());
        snprintf(merged_path[i], 256, "%s", kvs_test_tmp(tag));
        if (kvs_gen_lora_merge(base_path, ad_path[i], merged_path[i], &err)
            != KVS_OK)
        {
            fail_msg("merge %u: %s", i, err.msg);
        }
    }

    gen_adapter(other_path, "other", 8, 999);

    return 0;
}


static int
teardown(void **state)
{
    uint32_t  i;

    for (i = 0; i < N_AD; i++) {
        unlink(ad_path[i]);
        unlink(merged_path[i]);
    }

    unlink(other_path);
    unlink(base_path);

    return 0;
}


static void
mdl_open(mdl_t *md, const char *path)
{
    kvs_err_t  err;

    if (kvs_model_open(&md->m, path, &err) != KVS_OK
        || kvs_vocab_load(&md->v, md->m->gguf, &err) != KVS_OK)
    {
        fail_msg("%s: %s", path, err.msg);
    }
}


static void
mdl_close(mdl_t *md)
{
    kvs_vocab_free(md->v);
    kvs_model_close(md->m);
}


static uint32_t     n_slots;          /* the next engine's lora_slots */
static uint32_t     load_delay_us;    /* ... lora_load_delay_us */
static const char  *index_model;      /* ... and index_model */


static int
engine_try(kvs_engine_t **e, const mdl_t *md, const char *const *paths,
    uint32_t n, kvs_err_t *err)
{
    kvs_engine_conf_t  conf;

    memset(&conf, 0, sizeof(conf));
    conf.model = md->m;
    conf.vocab = md->v;
    conf.block_tokens = BT;
    conf.n_blocks = 64;
    conf.threads = 2;
    conf.max_batch_tokens = 256;
    conf.lora_paths = paths;
    conf.n_loras = n;
    conf.lora_slots = n_slots;
    conf.lora_load_delay_us = load_delay_us;
    conf.index_model = index_model;

    return kvs_engine_new(e, &conf, err);
}


static kvs_engine_t *
engine_new(const mdl_t *md, const char *const *paths, uint32_t n)
{
    kvs_err_t      err;
    kvs_engine_t  *e;

    if (engine_try(&e, md, paths, n, &err) != KVS_OK) {
        fail_msg("engine: %s", err.msg);
    }

    return e;
}


static void
prompt_of(int32_t *p, uint32_t n, uint32_t salt)
{
    uint32_t  i;

    for (i = 0; i < n; i++) {
        p[i] = (int32_t) ((i * 37 + salt * 11 + 3) % 297) + 2;
    }
}


/* Requests r = 0..n-1 under adapters[r] (N_GEN greedy tokens each)
 * submitted: h[r] their handles, out[r] cleared for their outputs. */
static void
submit_all(kvs_engine_t *e, const int32_t *const *prompts,
    const uint32_t *lens, const uint32_t *adapters, uint32_t n,
    kvs_engine_seq_t **h, kvs_engine_out_t *out)
{
    uint32_t          r;
    kvs_err_t         err;
    kvs_engine_req_t  req;

    for (r = 0; r < n; r++) {
        memset(&req, 0, sizeof(req));
        req.prompt = prompts[r];
        req.n_prompt = lens[r];
        req.max_tokens = N_GEN;
        req.ignore_eos = 1;
        req.sample.top_p = 1.0f;
        req.adapter = adapters[r];

        memset(&out[r], 0, sizeof(out[r]));

        if (kvs_engine_submit(e, &req, &h[r], &err) != KVS_OK) {
            fail_msg("submit %u: %s", r, err.msg);
        }
    }
}


/* Requests r = 0..n-1 under adapters[r], submitted together and stepped
 * to their end; out[r] their outputs. */
static void
run(kvs_engine_t *e, const int32_t *const *prompts, const uint32_t *lens,
    const uint32_t *adapters, uint32_t n, kvs_engine_out_t *out)
{
    size_t             k, j;
    uint32_t           r, done;
    kvs_err_t          err;
    kvs_engine_seq_t  *h[N_REQ], *hs[N_REQ];

    assert_true(n <= N_REQ);

    submit_all(e, prompts, lens, adapters, n, h, out);
    done = 0;

    while (done < n) {
        (void) kvs_engine_step(e);

        while ((k = kvs_engine_ready(e, hs, N_REQ)) > 0) {
            for (j = 0; j < k; j++) {
                for (r = 0; r < n && h[r] != hs[j]; r++) { }
                assert_true(r < n);
                assert_true(kvs_engine_read(e, h[r], &out[r]) >= 0);
                if (out[r].finish != KVS_FINISH_NONE) {
                    done++;
                }
            }
        }
    }

    for (r = 0; r < n; r++) {
        kvs_engine_close(e, h[r]);
        if (out[r].finish != KVS_FINISH_LENGTH) {
            fail_msg("request %u: finish %d: %s", r, (int) out[r].finish,
                     out[r].error);
        }
        assert_int_equal(out[r].n_tokens, N_GEN);
    }

    if (kvs_engine_check(e, &err) != KVS_OK) {
        fail_msg("engine check: %s", err.msg);
    }
}


static void
test_mixed_batch(void **state)
{
    int                 differs;
    int32_t             pr[N_REQ][40];
    uint32_t            r, lens[N_REQ], ads[N_REQ];
    const int32_t      *prompts[N_REQ];
    mdl_t               base, merged;
    kvs_engine_t       *e, *m;
    kvs_engine_out_t    out[N_REQ], alone, plain;
    kvs_engine_stats_t  st;

    mdl_open(&base, base_path);
    e = engine_new(&base, ad_paths, N_AD);
    assert_int_equal(kvs_engine_n_loras(e), N_AD);
    assert_int_equal(kvs_engine_lora(e, 2)->rank_max, 64);
    assert_null(kvs_engine_lora(e, N_AD + 1));

    for (r = 0; r < N_REQ; r++) {
        lens[r] = 20 + r;
        prompt_of(pr[r], lens[r], r);
        prompts[r] = pr[r];
        ads[r] = r;
    }

    run(e, prompts, lens, ads, N_REQ, out);

    /* one prefill step for all five, then one decode step each token
     * (and at most one step computing the last tokens' K/V for the
     * cache): the base and the four adapters in every step */
    kvs_engine_stats(e, &st);
    assert_true(st.steps <= N_GEN + 1);
    assert_int_equal(st.batch_seqs, (uint64_t) N_REQ * N_GEN);

    differs = 0;

    for (r = 0; r < N_REQ; r++) {
        if (r == 0) {
            m = engine_new(&base, NULL, 0);
            merged.m = NULL;

        } else {
            mdl_open(&merged, merged_path[r - 1]);
            m = engine_new(&merged, NULL, 0);
        }

        ads[0] = 0;
        run(m, &prompts[r], &lens[r], ads, 1, &alone);

        if (memcmp(alone.tokens, out[r].tokens, N_GEN * sizeof(int32_t))
            != 0)
        {
            fail_msg("request %u (adapter %u): greedy tokens differ from "
                     "the merged model's", r, r);
        }

        kvs_engine_free(m);
        kvs_engine_out_free(&alone);

        if (merged.m != NULL) {
            mdl_close(&merged);
        }

        if (r > 0) {
            /* the same prompt on the base */
            m = engine_new(&base, NULL, 0);
            run(m, &prompts[r], &lens[r], ads, 1, &plain);
            differs += memcmp(plain.tokens, out[r].tokens,
                              N_GEN * sizeof(int32_t)) != 0;
            kvs_engine_free(m);
            kvs_engine_out_free(&plain);
        }

        kvs_engine_out_free(&out[r]);
    }

    assert_true(differs > 0);

    kvs_engine_free(e);
    mdl_close(&base);
}


static void
cache_run(kvs_engine_t *e, const int32_t *p, uint32_t n, uint32_t adapter,
    uint32_t cached, kvs_radix_miss_t miss)
{
    uint32_t          ad;
    kvs_engine_out_t  out;

    ad = adapter;
    run(e, &p, &n, &ad, 1, &out);

    assert_true(out.has_cache);
    if (out.n_cached != cached || out.miss != miss) {
        fail_msg("adapter %u: %u cached tokens (miss %d), expected %u "
                 "(miss %d)", adapter, out.n_cached, (int) out.miss, cached,
                 (int) miss);
    }

    kvs_engine_out_free(&out);
}


static void
test_cache_namespace(void **state)
{
    int32_t        p[40];
    mdl_t          base;
    kvs_engine_t  *e, *e2;
    const char    *paths2[N_AD];

    mdl_open(&base, base_path);
    e = engine_new(&base, ad_paths, N_AD);
    prompt_of(p, 40, 7);

    /* a full hit is all but the prompt's last token */
    cache_run(e, p, 40, 1, 0, KVS_RADIX_MISS_EMPTY);
    cache_run(e, p, 40, 1, 39, KVS_RADIX_MISS_NONE);
    cache_run(e, p, 40, 2, 0, KVS_RADIX_MISS_EPOCH);
    cache_run(e, p, 40, 0, 0, KVS_RADIX_MISS_EPOCH);
    cache_run(e, p, 40, 2, 39, KVS_RADIX_MISS_NONE);
    cache_run(e, p, 40, 0, 39, KVS_RADIX_MISS_NONE);

    /* the epoch is the file's: another file as adapter 1 has another
     * one, the same files the same ones */
    memcpy(paths2, ad_paths, sizeof(paths2));
    paths2[0] = other_path;
    e2 = engine_new(&base, paths2, N_AD);

    assert_int_not_equal(kvs_engine_lora_epoch(e, 1),
                         kvs_engine_lora_epoch(e2, 1));
    assert_int_equal(kvs_engine_lora_epoch(e, 2),
                     kvs_engine_lora_epoch(e2, 2));
    assert_int_not_equal(kvs_engine_lora_epoch(e, 1),
                         kvs_engine_lora_epoch(e, 0));
    assert_int_not_equal(kvs_engine_lora_epoch(e, 1),
                         kvs_engine_lora_epoch(e, 2));

    kvs_engine_free(e2);
    kvs_engine_free(e);
    mdl_close(&base);
}


static uint64_t
file_epoch(const mdl_t *md, const char *path)
{
    uint64_t     ep;
    kvs_err_t    err;
    kvs_lora_t  *l;

    if (kvs_lora_open(&l, path, md->m, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }

    ep = l->epoch;
    kvs_lora_close(l);

    return ep;
}


static void
copy_file(const char *from, const char *to)
{
    FILE    *in, *out;
    size_t   n;
    char     buf[65536];

    in = fopen(from, "rb");
    out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);

    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) {
        assert_int_equal(fwrite(buf, 1, n, out), n);
    }

    fclose(in);
    assert_int_equal(fclose(out), 0);
}


static uint32_t
bind_file(kvs_engine_t *e, const char *path, uint64_t epoch)
{
    uint32_t   id;
    kvs_err_t  err;

    if (kvs_engine_lora_bind(e, path, strlen(path), epoch, &id, &err)
        != KVS_OK)
    {
        fail_msg("bind %s: %s", path, err.msg);
    }

    return id;
}


/*
 * A reload that replaced adapter 1's file: the worker binds the file
 * again with its new epoch.  Adapter 1 is a copy of ad_path[0], then
 * of ad_path[2] (the same path, new bytes, as `cp` or a rename would
 * leave it).
 */
static void
test_bind(void **state)
{
    int32_t             p[40], q[40];
    uint32_t            n, id, ad;
    mdl_t               base;
    char                path[256], name[64];
    uint64_t            ep0, ep2;
    kvs_err_t           err;
    kvs_engine_t       *e, *ref;
    const int32_t      *pp;
    const char         *paths[2];
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *h;
    kvs_engine_out_t    out, want;
    kvs_engine_stats_t  st;

    mdl_open(&base, base_path);
    snprintf(name, sizeof(name), "engine-lora-bind.%d.gguf", (int) getpid());
    snprintf(path, sizeof(path), "%s", kvs_test_tmp(name));
    copy_file(ad_path[0], path);
    ep0 = file_epoch(&base, ad_path[0]);
    ep2 = file_epoch(&base, ad_path[2]);

    paths[0] = path;
    paths[1] = ad_path[1];
    e = engine_new(&base, paths, 2);

    /* the configuration that started it binds its own ids */
    assert_int_equal(bind_file(e, path, ep0), 1);
    assert_int_equal(bind_file(e, ad_path[1], file_epoch(&base, ad_path[1])), 2);

    prompt_of(p, 40, 3);
    prompt_of(q, 40, 4);
    cache_run(e, p, 40, 1, 0, KVS_RADIX_MISS_EMPTY);
    cache_run(e, p, 40, 1, 39, KVS_RADIX_MISS_NONE);
    cache_run(e, q, 40, 0, 0, KVS_RADIX_MISS_EMPTY);

    /* replaced on disk; the new configuration binds it */
    copy_file(ad_path[2], path);
    id = bind_file(e, path, ep2);
    assert_int_equal(id, 3);
    assert_int_equal(bind_file(e, path, ep2), 3);
    assert_int_equal(bind_file(e, path, ep0), 1);     /* old workers' still */
    assert_int_not_equal(kvs_engine_lora_epoch(e, 3),
                         kvs_engine_lora_epoch(e, 1));

    /* the old file's blocks are not reused: the miss says epoch; then
     * a full hit within the new one; the base's prompt hits still */
    cache_run(e, p, 40, 3, 0, KVS_RADIX_MISS_EPOCH);
    cache_run(e, p, 40, 3, 39, KVS_RADIX_MISS_NONE);
    cache_run(e, q, 40, 0, 39, KVS_RADIX_MISS_NONE);

    kvs_engine_stats(e, &st);
    assert_int_equal(st.lora_adapters, 3);
    assert_int_equal(st.lora_slots, 3);
    assert_int_equal(st.lora_resident, 3);
    assert_int_equal(st.lora_loads, 1);

    /* the new id serves the new file: an engine started with it */
    paths[0] = ad_path[2];
    ref = engine_new(&base, paths, 1);
    n = 40;
    pp = p;
    ad = 1;
    run(ref, &pp, &n, &ad, 1, &want);
    ad = 3;
    run(e, &pp, &n, &ad, 1, &out);
    assert_int_equal(out.n_tokens, want.n_tokens);
    assert_memory_equal(out.tokens, want.tokens,
                        want.n_tokens * sizeof(int32_t));
    kvs_engine_out_free(&out);
    kvs_engine_out_free(&want);
    kvs_engine_free(ref);

    /* a file that is not what the configuration read fails its request
     * when its load finds another epoch */
    id = bind_file(e, path, ep0 ^ 1);
    assert_int_equal(id, 4);
    memset(&req, 0, sizeof(req));
    req.prompt = p;
    req.n_prompt = 8;
    req.max_tokens = 2;
    req.sample.top_p = 1.0f;
    req.adapter = id;
    assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_OK);
    memset(&out, 0, sizeof(out));
    while (out.finish == KVS_FINISH_NONE) {
        (void) kvs_engine_step(e);
        assert_true(kvs_engine_read(e, h, &out) >= 0);
    }
    assert_int_equal(out.finish, KVS_FINISH_ERROR);
    assert_non_null(strstr(out.error, "LoRA adapter 4 could not be loaded: "
                           "its file changed since the configuration "
                           "read it"));
    kvs_engine_close(e, h);
    kvs_engine_out_free(&out);
    kvs_engine_free(e);

    /* an engine started without adapters, one bound later */
    e = engine_new(&base, NULL, 0);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.lora_adapters, 0);
    assert_int_equal(bind_file(e, ad_path[2], ep2), 1);
    cache_run(e, p, 40, 1, 0, KVS_RADIX_MISS_EMPTY);
    cache_run(e, p, 40, 1, 39, KVS_RADIX_MISS_NONE);
    cache_run(e, p, 40, 0, 0, KVS_RADIX_MISS_EPOCH);
    kvs_engine_free(e);

    unlink(path);
    mdl_close(&base);
}


/* Whether the adds of ix hold name. */
static int
published(const kvs_engine_index_t *ix, const kvs_index_name_t *name)
{
    uint32_t  i;

    for (i = 0; i < ix->n_add; i++) {
        if (memcmp(ix->names[i], name->b, KVS_INDEX_NAME_LEN) == 0) {
            return 1;
        }
    }

    return 0;
}


/* The names of p's first two blocks under (model, epoch, adapter). */
static void
names_of(const int32_t *p, uint64_t epoch, const char *adapter,
    kvs_index_name_t *names)
{
    size_t            n;
    kvs_err_t         err;
    kvs_index_ns_t    ns;
    kvs_index_name_t  root;

    memset(&ns, 0, sizeof(ns));
    ns.model = "lbase";
    ns.model_len = 5;
    ns.epoch = epoch;
    ns.adapter = adapter;
    ns.adapter_len = strlen(adapter);
    ns.scope = "";

    assert_int_equal(kvs_index_name_root(&ns, &root, &err), KVS_OK);
    assert_int_equal(kvs_index_name_chain(&root, p, 2 * BT, BT, names, 2,
                                          &n, &err), KVS_OK);
    assert_int_equal(n, 2);
}


/*
 * What a host publishes for an adapted request, and what a gateway
 * names it under (ngx_http_kvserve_route.c): the epoch and adapter field
 * of kvs_index_lora.h from the base's epoch and the file's.  The adapter
 * is bound after the start (engine id 3 for the configuration's id 1),
 * so its engine id is no part of the names.
 */
static void
test_index_names(void **state)
{
    int32_t             p[40];
    uint32_t            n, ad;
    mdl_t               base;
    uint64_t            file;
    kvs_err_t           err;
    kvs_engine_t       *e;
    const int32_t      *pp;
    kvs_engine_out_t    out;
    kvs_index_name_t    want[2], base_names[2], by_id[2];
    kvs_engine_index_t  ix;
    char                field[KVS_INDEX_LORA_FIELD_LEN + 1];

    mdl_open(&base, base_path);
    index_model = "lbase";
    e = engine_new(&base, ad_paths, 2);
    index_model = NULL;

    file = file_epoch(&base, ad_path[2]);
    assert_int_equal(bind_file(e, ad_path[2], file), 3);
    kvs_index_lora_field(file, field);
    assert_int_equal(strlen(field), KVS_INDEX_LORA_FIELD_LEN);
    assert_true(kvs_index_lora_epoch(kvs_engine_lora_epoch(e, 0), file)
                != kvs_engine_lora_epoch(e, 0));

    kvs_engine_index_subscribe(e, 1);
    prompt_of(p, 40, 9);
    n = 40;
    pp = p;
    ad = 3;
    run(e, &pp, &n, &ad, 1, &out);
    kvs_engine_out_free(&out);
    ad = 0;
    run(e, &pp, &n, &ad, 1, &out);
    kvs_engine_out_free(&out);

    /* the engine's namespace is the index's (its view of id 3 follows
     * the bind once it took a request) */
    assert_true(kvs_engine_lora_epoch(e, 3)
                == kvs_index_lora_epoch(kvs_engine_lora_epoch(e, 0), file));

    memset(&ix, 0, sizeof(ix));
    if (kvs_engine_index_take(e, &ix, &err) != KVS_OK) {
        fail_msg("take: %s", err.msg);
    }

    names_of(p, kvs_index_lora_epoch(kvs_engine_lora_epoch(e, 0), file),
             field, want);
    names_of(p, kvs_engine_lora_epoch(e, 0), "", base_names);
    names_of(p, kvs_engine_lora_epoch(e, 3), "3", by_id);

    assert_true(published(&ix, &want[0]));
    assert_true(published(&ix, &want[1]));
    assert_true(published(&ix, &base_names[0]));
    assert_true(published(&ix, &base_names[1]));
    assert_false(published(&ix, &by_id[0]));
    assert_int_not_equal(memcmp(want[0].b, base_names[0].b,
                                KVS_INDEX_NAME_LEN), 0);

    kvs_engine_index_free(&ix);
    kvs_engine_free(e);
    mdl_close(&base);
}


/* Adapter id's residency and the paging figures. */
static void
expect_paging(kvs_engine_t *e, uint64_t loads, uint64_t evictions,
    uint64_t waited)
{
    kvs_engine_stats_t  st;

    kvs_engine_stats(e, &st);
    assert_int_equal(st.lora_adapters, N_AD);
    assert_int_equal(st.lora_slots, 2);
    assert_int_equal(st.lora_resident, 2);
    assert_int_equal(st.lora_parked, 0);
    if (st.lora_loads != loads || st.lora_evictions != evictions
        || st.lora_waited != waited)
    {
        fail_msg("loads %" PRIu64 ", evictions %" PRIu64 ", waited %"
                 PRIu64 "; expected %" PRIu64 ", %" PRIu64 ", %" PRIu64,
                 st.lora_loads, st.lora_evictions, st.lora_waited, loads,
                 evictions, waited);
    }
}


/* One request under adapter, run to its end; then loads and evictions
 * (and waits) are `paged`. */
static void
run_one(kvs_engine_t *e, const int32_t *prompt, uint32_t len,
    uint32_t adapter, uint64_t paged)
{
    kvs_engine_out_t  out;

    run(e, &prompt, &len, &adapter, 1, &out);
    kvs_engine_out_free(&out);
    expect_paging(e, paged, paged, paged);
}


/*
 * Paging: 4 adapters in 2 slots.  All five requests at once give the
 * same tokens as with every adapter resident (adapters 3 and 4 wait for
 * 1 and 2 to be let go, then evict them); the least recently let go
 * adapter is the one evicted; a request waiting for its adapter never
 * holds up the base's (it decodes in the very step the load is asked
 * for, the load being on the loader's thread).
 */
static void
test_paging(void **state)
{
    size_t              k;
    int32_t             pr[N_REQ][40];
    uint32_t            r, lens[N_REQ], ads[N_REQ];
    const int32_t      *prompts[N_REQ];
    kvs_err_t           err;
    mdl_t               base;
    kvs_engine_t       *e, *all;
    kvs_engine_req_t    req;
    uint32_t            done;
    kvs_engine_seq_t   *h[2], *hs[2], *h3[3];
    kvs_engine_out_t    out[N_REQ], want[N_REQ], o[2], o3[3];

    mdl_open(&base, base_path);
    all = engine_new(&base, ad_paths, N_AD);
    n_slots = 2;
    e = engine_new(&base, ad_paths, N_AD);
    n_slots = 0;

    assert_non_null(kvs_engine_lora(e, 1));
    assert_non_null(kvs_engine_lora(e, 2));
    assert_null(kvs_engine_lora(e, 3));
    assert_null(kvs_engine_lora(e, 4));
    assert_int_not_equal(kvs_engine_lora_epoch(e, 3),
                         kvs_engine_lora_epoch(e, 4));
    assert_int_equal(kvs_engine_lora_epoch(e, 4),
                     kvs_engine_lora_epoch(all, 4));

    for (r = 0; r < N_REQ; r++) {
        lens[r] = 20 + r;
        prompt_of(pr[r], lens[r], r);
        prompts[r] = pr[r];
        ads[r] = r;
    }

    run(all, prompts, lens, ads, N_REQ, want);
    run(e, prompts, lens, ads, N_REQ, out);

    for (r = 0; r < N_REQ; r++) {
        if (memcmp(want[r].tokens, out[r].tokens, N_GEN * sizeof(int32_t))
            != 0)
        {
            fail_msg("request %u (adapter %u): paged tokens differ", r, r);
        }
        kvs_engine_out_free(&want[r]);
        kvs_engine_out_free(&out[r]);
    }

    expect_paging(e, 2, 2, 2);
    assert_non_null(kvs_engine_lora(e, 3));
    assert_non_null(kvs_engine_lora(e, 4));

    /* 4 let go after 3: 1 evicts 3, then 2 evicts 4 */
    run_one(e, pr[0], lens[0], 4, 2);
    run_one(e, pr[0], lens[0], 1, 3);
    assert_null(kvs_engine_lora(e, 3));
    assert_non_null(kvs_engine_lora(e, 4));
    run_one(e, pr[0], lens[0], 2, 4);
    assert_null(kvs_engine_lora(e, 4));
    assert_non_null(kvs_engine_lora(e, 1));

    /* a parked request and the base's: the base decodes at once */
    for (r = 0; r < 2; r++) {
        memset(&req, 0, sizeof(req));
        req.prompt = pr[r];
        req.n_prompt = lens[r];
        req.max_tokens = N_GEN;
        req.ignore_eos = 1;
        req.sample.top_p = 1.0f;
        req.adapter = r == 0 ? 3 : 0;
        memset(&o[r], 0, sizeof(o[r]));
        if (kvs_engine_submit(e, &req, &h[r], &err) != KVS_OK) {
            fail_msg("submit: %s", err.msg);
        }
    }

    assert_int_equal(kvs_engine_step(e), 1);
    k = kvs_engine_ready(e, hs, 2);
    assert_int_equal(k, 1);
    assert_ptr_equal(hs[0], h[1]);
    assert_true(kvs_engine_read(e, h[1], &o[1]) >= 0);
    assert_int_equal(o[1].n_tokens, 1);

    while (o[0].finish == KVS_FINISH_NONE || o[1].finish == KVS_FINISH_NONE) {
        (void) kvs_engine_step(e);
        while ((k = kvs_engine_ready(e, hs, 2)) > 0) {
            while (k-- > 0) {
                assert_true(kvs_engine_read(e, hs[k], hs[k] == h[0] ? &o[0]
                                                                    : &o[1])
                            >= 0);
            }
        }
    }

    assert_int_equal(o[0].finish, KVS_FINISH_LENGTH);
    assert_int_equal(o[1].finish, KVS_FINISH_LENGTH);
    expect_paging(e, 5, 5, 5);

    for (r = 0; r < 2; r++) {
        kvs_engine_close(e, h[r]);
        kvs_engine_out_free(&o[r]);
    }

    /* 3 choices under a parked adapter: each holds it, each gives the
     * greedy tokens of one request under it with every adapter
     * resident */
    ads[0] = 4;
    run(all, &prompts[4], &lens[4], ads, 1, want);
    memset(&req, 0, sizeof(req));
    req.prompt = pr[4];
    req.n_prompt = lens[4];
    req.max_tokens = N_GEN;
    req.n = 3;
    req.ignore_eos = 1;
    req.sample.top_p = 1.0f;
    req.adapter = 4;
    assert_null(kvs_engine_lora(e, 4));
    assert_int_equal(kvs_engine_submit(e, &req, h3, &err), KVS_OK);
    memset(o3, 0, sizeof(o3));

    for (done = 0; done < 3; ) {
        (void) kvs_engine_step(e);
        while ((k = kvs_engine_ready(e, hs, 2)) > 0) {
            while (k-- > 0) {
                for (r = 0; h3[r] != hs[k]; r++) { }
                assert_true(kvs_engine_read(e, h3[r], &o3[r]) >= 0);
                done += o3[r].finish != KVS_FINISH_NONE;
            }
        }
    }

    for (r = 0; r < 3; r++) {
        assert_int_equal(o3[r].finish, KVS_FINISH_LENGTH);
        if (memcmp(o3[r].tokens, want[0].tokens, N_GEN * sizeof(int32_t))
            != 0)
        {
            fail_msg("choice %u under a paged adapter: tokens differ", r);
        }
        kvs_engine_close(e, h3[r]);
        kvs_engine_out_free(&o3[r]);
    }

    kvs_engine_out_free(&want[0]);
    expect_paging(e, 6, 6, 6);

    /* its three holds were let go: adapter 4 is evicted for 1, then 2
     * (one slot: 3's) */
    run_one(e, pr[0], lens[0], 1, 7);
    assert_null(kvs_engine_lora(e, 3));
    run_one(e, pr[0], lens[0], 2, 8);
    assert_null(kvs_engine_lora(e, 4));

    /* a parked request of 2 choices closed before its adapter came, and
     * a request parked when the engine is freed: they end cancelled,
     * their holds let go (ASan: nothing leaks) */
    req.adapter = 3;
    req.n = 2;
    assert_int_equal(kvs_engine_submit(e, &req, h3, &err), KVS_OK);
    (void) kvs_engine_step(e);
    kvs_engine_close(e, h3[0]);
    kvs_engine_close(e, h3[1]);
    (void) kvs_engine_step(e);
    req.n = 1;

    req.adapter = 4;
    assert_int_equal(kvs_engine_submit(e, &req, &h[0], &err), KVS_OK);
    (void) kvs_engine_step(e);
    kvs_engine_close(e, h[0]);

    kvs_engine_free(e);
    kvs_engine_free(all);
    mdl_close(&base);
}


/*
 * A slow, large load off the step loop: adapters 1 and 2 resident in 2
 * slots, adapter 3 of rank 1024 (the most a file may have; 16x the
 * others' bytes) not, its file read slowed by the loader's test delay
 * (150 ms).  A request under 3 (parked: 2 is evicted for it), one under
 * 1 and the base's, submitted together: the other two decode while 3
 * waits, no step while it loads takes half the load's time (the load
 * is never inside a step, whatever the machine's speed), and the step
 * loop's part of the load and of the eviction (lora_install: a pointer
 * swap, its last image handed to the loader) stays under 1 ms once
 * (timed inside the engine), while packing the adapter alone (measured
 * here through the CPU backend's kvs_cpu_lora_image, what the step
 * loop did before) takes longer.
 * Adapter 3's tokens are those of an engine with all three resident.
 */
static void
test_load_off_step(void **state)
{
    char                big_path[256];
    size_t              k;
    int32_t             pr[3][40];
    uint32_t            r, lens[3], ads[3], n_before, done;
    uint64_t            t0, dt, max_ns, pack_ns;
    const char         *paths[3];
    const int32_t      *prompts[3];
    mdl_t               base;
    kvs_err_t           err;
    kvs_lora_t         *l;
    kvs_engine_t       *e, *all;
    kvs_cpu_model_t    *cm;
    kvs_engine_seq_t   *h[3], *hs[3];
    kvs_engine_out_t    out[3], want[3];
    kvs_engine_stats_t  st;
    kvs_cpu_lora_slot_t *img;

    gen_adapter(big_path, "big", 1024, 777);
    paths[0] = ad_paths[0];
    paths[1] = ad_paths[1];
    paths[2] = big_path;

    mdl_open(&base, base_path);

    /* what packing it costs, alone */
    if (kvs_cpu_model_new(&cm, base.m, &err) != KVS_OK
        || kvs_lora_open(&l, big_path, base.m, &err) != KVS_OK)
    {
        fail_msg("%s", err.msg);
    }

    pack_ns = UINT64_MAX;

    for (r = 0; r < 3; r++) {
        t0 = kvs_now_ns();
        assert_int_equal(kvs_cpu_lora_image(cm, l, &img, &err), KVS_OK);
        dt = kvs_now_ns() - t0;
        pack_ns = dt < pack_ns ? dt : pack_ns;
        kvs_cpu_lora_image_free(img);
    }

    kvs_lora_close(l);
    kvs_cpu_model_free(cm);

    all = engine_new(&base, paths, 3);
    n_slots = 2;
    load_delay_us = 150000;
    e = engine_new(&base, paths, 3);
    n_slots = 0;
    load_delay_us = 0;

    for (r = 0; r < 3; r++) {
        lens[r] = 20 + r;
        prompt_of(pr[r], lens[r], 7 + r);
        prompts[r] = pr[r];
    }

    ads[0] = 3;
    ads[1] = 1;
    ads[2] = 0;
    run(all, prompts, lens, ads, 3, want);
    submit_all(e, prompts, lens, ads, 3, h, out);
    max_ns = 0;
    n_before = UINT32_MAX;

    for (done = 0; done < 3; ) {
        t0 = kvs_now_ns();
        (void) kvs_engine_step(e);
        dt = kvs_now_ns() - t0;

        while ((k = kvs_engine_ready(e, hs, 3)) > 0) {
            while (k-- > 0) {
                for (r = 0; h[r] != hs[k]; r++) { }
                assert_true(kvs_engine_read(e, h[r], &out[r]) >= 0);
                done += out[r].finish != KVS_FINISH_NONE;
            }
        }

        /* the steps while it loads (not its own prefill's, after) */
        if (out[0].n_tokens == 0) {
            max_ns = dt > max_ns ? dt : max_ns;
        }

        /* the others' tokens when adapter 3's first comes */
        if (n_before == UINT32_MAX && out[0].n_tokens > 0) {
            n_before = out[1].n_tokens < out[2].n_tokens
                       ? out[1].n_tokens : out[2].n_tokens;
        }
    }

    kvs_engine_stats(e, &st);
    printf("lora: rank 1024 loaded in %.1f ms (150 ms of it the test's "
           "delay), packing it alone %.2f ms; the step loop's part "
           "%.3f ms at most, %.3f ms in all; the longest step while it "
           "loaded %.2f ms; "
           "the others' tokens before its first: %u\n",
           (double) st.lora_load_ns / 1e6, (double) pack_ns / 1e6,
           (double) st.lora_install_max_ns / 1e6,
           (double) st.lora_install_ns / 1e6, (double) max_ns / 1e6,
           n_before);

    for (r = 0; r < 3; r++) {
        assert_int_equal(out[r].finish, KVS_FINISH_LENGTH);
        if (memcmp(out[r].tokens, want[r].tokens, N_GEN * sizeof(int32_t))
            != 0)
        {
            fail_msg("request %u (adapter %u): paged tokens differ", r,
                     ads[r]);
        }
        kvs_engine_close(e, h[r]);
        kvs_engine_out_free(&out[r]);
        kvs_engine_out_free(&want[r]);
    }

    assert_int_equal(st.lora_loads, 1);
    assert_int_equal(st.lora_evictions, 1);
    assert_int_equal(st.lora_waited, 1);
    assert_true(st.lora_load_ns >= 150000000ull);
    assert_true(st.lora_wait_ms >= 150);
    assert_true(n_before >= N_GEN / 2);
    assert_true(max_ns < st.lora_load_ns / 2);
    assert_true(st.lora_install_max_ns < 1000000ull);

    kvs_engine_free(e);
    kvs_engine_free(all);
    mdl_close(&base);
    unlink(big_path);
}


static void
test_refusals(void **state)
{
    int32_t             p[8];
    uint32_t            i;
    mdl_t               base, wide;
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_engine_req_t    req;
    kvs_engine_seq_t   *h;
    kvs_engine_stats_t  st;
    char                wide_path[256];
    static const char  *many[KVS_ENGINE_MAX_LORAS + 1];

    mdl_open(&base, base_path);
    e = engine_new(&base, ad_paths, N_AD);

    prompt_of(p, 8, 1);
    memset(&req, 0, sizeof(req));
    req.prompt = p;
    req.n_prompt = 8;
    req.max_tokens = 2;
    req.sample.top_p = 1.0f;
    req.adapter = N_AD + 1;

    assert_int_equal(kvs_engine_submit(e, &req, &h, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "adapter 5: the model serves 4 LoRA "
                           "adapters"));

    /* a path no engine can open: refused before any id is spent */
    assert_int_equal(kvs_engine_lora_bind(e, "a\0b", 3, 1, &i, &err),
                     KVS_EINVAL);
    assert_int_equal(i, 0);
    assert_int_equal(kvs_engine_lora_bind(e, "", 0, 1, &i, &err),
                     KVS_EINVAL);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.requests, 0);
    assert_int_equal(kvs_engine_step(e), 0);
    kvs_engine_free(e);

    /* an adapter made for a wider model */
    gen_model(wide_path, "wide", 96, 5);
    mdl_open(&wide, wide_path);
    assert_int_equal(engine_try(&e, &wide, ad_paths, 1, &err), KVS_EINVAL);
    assert_null(e);
    assert_non_null(strstr(err.msg, "blk.0.attn_q.weight.lora_a [64, 8]"));
    assert_non_null(strstr(err.msg, "[96, 96]"));
    mdl_close(&wide);
    unlink(wide_path);

    for (i = 0; i <= KVS_ENGINE_MAX_LORAS; i++) {
        many[i] = ad_paths[0];
    }

    assert_int_equal(engine_try(&e, &base, many, KVS_ENGINE_MAX_LORAS + 1,
                                &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "257 LoRA adapters; at most 256"));

    /* more adapters than slots need lora_slots; at most 64 slots */
    assert_int_equal(engine_try(&e, &base, many, KVS_ENGINE_LORA_SLOTS + 1,
                                &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "65 LoRA adapter slots for 65 "
                           "adapters; at most 64"));
    n_slots = KVS_ENGINE_LORA_SLOTS + 1;
    assert_int_equal(engine_try(&e, &base, ad_paths, N_AD, &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "65 LoRA adapter slots for 4 "
                           "adapters"));
    n_slots = 0;

    mdl_close(&base);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_mixed_batch),
        cmocka_unit_test(test_cache_namespace),
        cmocka_unit_test(test_paging),
        cmocka_unit_test(test_bind),
        cmocka_unit_test(test_index_names),
        cmocka_unit_test(test_load_off_step),
        cmocka_unit_test(test_refusals),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
