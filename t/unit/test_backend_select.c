/*
 * test_backend_select: choosing the backend (kvs_backend_new, AUTO and
 * CUDA without a loadable shared object or device), the engine's backend
 * line, and the sampler accessors that device sampling relies on
 * (kvs_sampler_device_ok, kvs_sampler_coin drawing exactly kvs_sample's
 * coin).
 *
 * The CUDA shared object is pointed at a path that does not exist
 * (KVSERVE_CUDA_SO), so the test means the same on hosts with and
 * without a GPU; then at libkvs_fake_cuda.so (fake_cuda_backend.c: the
 * CPU backend with device-style sampling from the engine's coins), so
 * that an engine that samples "on the device" must give the tokens of
 * one that samples on the host, request by request: greedy, seeded
 * temperature with top-p or top-k, and the rows the device cannot take
 * (logprobs, penalties, n > 1 forks) mixed in.  The coin is checked
 * against xorshift64* written out by hand from kvs_sample.h.
 */

#include <math.h>
#include <stdlib.h>

#include "kvs_test.h"
#include "kvs_test_model.h"

#include "backend/kvs_backend.h"
#include "engine/kvs_engine.h"
#include "sample/kvs_sample.h"

#define NO_SO  "/nonexistent/kvserve-test/libkvserve_cuda.so"
#define MAXGEN 24

static char  fake_so[1024];           /* libkvs_fake_cuda.so, or "" */


/* xorshift64* and the 24-bit float, as kvs_sample.h defines them */
static float
ref_coin(uint64_t *st)
{
    uint32_t  u;

    *st ^= *st >> 12;
    *st ^= *st << 25;
    *st ^= *st >> 27;
    u = (uint32_t) ((*st * 0x2545F4914F6CDD1DULL) >> 32);

    return (float) (u >> 8) / 16777216.0f;
}


static void
test_parse(void **state)
{
    kvs_backend_kind_t  k;

    assert_int_equal(kvs_backend_parse("cpu", 3, &k), KVS_OK);
    assert_int_equal(k, KVS_BACKEND_CPU);
    assert_int_equal(kvs_backend_parse("cuda", 4, &k), KVS_OK);
    assert_int_equal(k, KVS_BACKEND_CUDA);
    assert_int_equal(kvs_backend_parse("auto", 4, &k), KVS_OK);
    assert_int_equal(k, KVS_BACKEND_AUTO);

    assert_int_equal(kvs_backend_parse("gpu", 3, &k), KVS_EINVAL);
    assert_int_equal(kvs_backend_parse("CPU", 3, &k), KVS_EINVAL);
    assert_int_equal(kvs_backend_parse("", 0, &k), KVS_EINVAL);
    assert_int_equal(kvs_backend_parse("cudax", 5, &k), KVS_EINVAL);
    assert_int_equal(kvs_backend_parse("cuda", 3, &k), KVS_EINVAL);
}


static void
test_new(void **state)
{
    kvs_err_t           err;
    kvs_gen_spec_t      spec;
    kvs_backend_t      *be;
    kvs_test_model_t    md;
    kvs_backend_conf_t  bc;
    kvs_backend_info_t  info;

    assert_int_equal(kvs_gen_preset(&spec, "tiny", &err), KVS_OK);
    snprintf(spec.name, sizeof(spec.name), "backend-select");
    kvs_test_model_gen(&md, &spec);

    assert_int_equal(setenv("KVSERVE_CUDA_SO", NO_SO, 1), 0);

    memset(&bc, 0, sizeof(bc));
    bc.n_blocks = 8;
    bc.block_tokens = 16;
    bc.threads = 1;

    /* the CPU, asked for: CUDA is not even looked at */
    bc.kind = KVS_BACKEND_CPU;
    assert_int_equal(kvs_backend_new(&be, md.m, &bc, &info, &err), KVS_OK);
    assert_int_equal(be->kind, KVS_BACKEND_CPU);
    assert_int_equal(be->n_blocks, 8);
    assert_int_equal(info.kind, KVS_BACKEND_CPU);
    assert_string_equal(info.reason, "asked for");
    kvs_backend_free(be);

    /* auto without the shared object: the CPU, saying why */
    bc.kind = KVS_BACKEND_AUTO;
    assert_int_equal(kvs_backend_new(&be, md.m, &bc, &info, &err), KVS_OK);
    assert_int_equal(be->kind, KVS_BACKEND_CPU);
    assert_int_equal(be->n_blocks, 8);
    assert_int_equal(info.kind, KVS_BACKEND_CPU);
    assert_int_equal(info.cuda_built, 1);
    assert_true(strncmp(info.reason, "auto: cannot load " NO_SO ": ",
                        strlen("auto: cannot load " NO_SO ": ")) == 0);
    kvs_backend_free(be);

    /* cuda insists: an error naming the device and the reason */
    bc.kind = KVS_BACKEND_CUDA;
    bc.device = 3;
    be = (kvs_backend_t *) &bc;
    assert_int_equal(kvs_backend_new(&be, md.m, &bc, NULL, &err), KVS_EIO);
    assert_null(be);
    assert_non_null(strstr(err.msg, "backend cuda (device 3): "
                                    "cannot load " NO_SO));

    bc.kind = (kvs_backend_kind_t) 7;
    assert_int_equal(kvs_backend_new(&be, md.m, &bc, NULL, &err),
                     KVS_EINVAL);
    assert_null(be);

    kvs_backend_probe(&info, 0);
    assert_int_equal(info.kind, KVS_BACKEND_CPU);
    assert_non_null(strstr(info.reason, "cannot load " NO_SO));

    kvs_test_model_free(&md);
}


static void
test_engine_line(void **state)
{
    uint64_t            i, bytes;
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_gen_spec_t      spec;
    kvs_test_model_t    md;
    kvs_backend_mem_t   mem;
    kvs_engine_conf_t   conf;
    kvs_engine_stats_t  st;

    assert_int_equal(kvs_gen_preset(&spec, "tiny", &err), KVS_OK);
    snprintf(spec.name, sizeof(spec.name), "backend-line");
    kvs_test_model_gen(&md, &spec);

    assert_int_equal(setenv("KVSERVE_CUDA_SO", NO_SO, 1), 0);

    memset(&conf, 0, sizeof(conf));
    conf.model = md.m;
    conf.vocab = md.v;
    conf.n_blocks = 12;
    conf.threads = 1;

    /* zeroed conf: the CPU, as before backends were chosen */
    assert_int_equal(kvs_engine_new(&e, &conf, &err), KVS_OK);
    assert_string_equal(kvs_engine_backend(e),
                        "backend: cpu, 1 thread (asked for)");
    /* what HELLO will carry: the CPU's f32 cache and its weights, the
     * tiny preset's F32 tensors all in the mapping */
    assert_int_equal(kvs_engine_mem(e, &mem), KVS_BACKEND_CPU);
    assert_int_equal(mem.kv_dtype, KVS_BACKEND_KV_F32);
    for (i = 0, bytes = 0; i < kvs_gguf_n_tensors(md.m->gguf); i++) {
        bytes += kvs_gguf_tensor_at(md.m->gguf, i)->nbytes;
    }
    assert_true(mem.weights_mapped == bytes);
    assert_true(mem.weights_owned == 0 && mem.weights_device == 0);
    kvs_engine_free(e);

    conf.backend = KVS_BACKEND_AUTO;
    conf.kv_fraction = 0.9;         /* CUDA's only: the CPU keeps 12 */
    assert_int_equal(kvs_engine_new(&e, &conf, &err), KVS_OK);
    assert_true(strncmp(kvs_engine_backend(e), "backend: cpu, 1 thread "
                        "(auto: cannot load " NO_SO ": ",
                        strlen("backend: cpu, 1 thread (auto: cannot load "
                               NO_SO ": ")) == 0);
    kvs_engine_stats(e, &st);
    assert_int_equal(st.kv_blocks, 12);
    kvs_engine_free(e);

    conf.backend = KVS_BACKEND_CUDA;
    e = (kvs_engine_t *) &conf;
    assert_int_equal(kvs_engine_new(&e, &conf, &err), KVS_EIO);
    assert_null(e);
    assert_non_null(strstr(err.msg, "backend cuda (device 0)"));

    kvs_test_model_free(&md);
}


static void
test_device_ok(void **state)
{
    kvs_err_t            err;
    kvs_sampler_t        s;
    kvs_logit_bias_t     bias = { 3, 1.0f };
    kvs_sample_params_t  p, q;

    memset(&p, 0, sizeof(p));
    p.temperature = 0.7f;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.seed = 5;

    assert_int_equal(kvs_sampler_init(&s, &p, 16, &err), KVS_OK);
    assert_int_equal(kvs_sampler_device_ok(&s), 1);
    kvs_sampler_free(&s);

    q = p;
    q.temperature = 0.0f;
    assert_int_equal(kvs_sampler_init(&s, &q, 16, &err), KVS_OK);
    assert_int_equal(kvs_sampler_device_ok(&s), 1);
    kvs_sampler_free(&s);

    q = p;
    q.min_p = 0.05f;
    assert_int_equal(kvs_sampler_init(&s, &q, 16, &err), KVS_OK);
    assert_int_equal(kvs_sampler_device_ok(&s), 0);
    kvs_sampler_free(&s);

    q = p;
    q.presence_penalty = 0.5f;
    assert_int_equal(kvs_sampler_init(&s, &q, 16, &err), KVS_OK);
    assert_int_equal(kvs_sampler_device_ok(&s), 0);
    kvs_sampler_free(&s);

    q = p;
    q.frequency_penalty = -0.5f;
    assert_int_equal(kvs_sampler_init(&s, &q, 16, &err), KVS_OK);
    assert_int_equal(kvs_sampler_device_ok(&s), 0);
    kvs_sampler_free(&s);

    q = p;
    q.logit_bias = &bias;
    q.n_logit_bias = 1;
    assert_int_equal(kvs_sampler_init(&s, &q, 16, &err), KVS_OK);
    assert_int_equal(kvs_sampler_device_ok(&s), 0);
    kvs_sampler_free(&s);

    q = p;
    q.logprobs = 1;
    assert_int_equal(kvs_sampler_init(&s, &q, 16, &err), KVS_OK);
    assert_int_equal(kvs_sampler_device_ok(&s), 0);
    kvs_sampler_free(&s);
}


/*
 * Two tokens of equal logits: kvs_sample picks token 0 iff its coin is
 * below 0.5 (run.c's sample_mult over [0.5, 0.5]).  Over many steps, the
 * coins kvs_sampler_coin draws from a twin sampler are the reference
 * xorshift's, and each step's token is what that coin implies: the coin
 * is the one kvs_sample draws, drawn once per non-greedy step.
 */
static void
test_coin(void **state)
{
    int                  i;
    float                c, logits[2];
    int32_t              tok;
    uint64_t             ref;
    kvs_err_t            err;
    kvs_sampler_t        a, b, g;
    kvs_sample_params_t  p;

    memset(&p, 0, sizeof(p));
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.seed = 12345;

    assert_int_equal(kvs_sampler_init(&a, &p, 2, &err), KVS_OK);
    assert_int_equal(kvs_sampler_init(&b, &p, 2, &err), KVS_OK);
    ref = 12345;

    for (i = 0; i < 200; i++) {
        logits[0] = 0.25f;
        logits[1] = 0.25f;
        assert_int_equal(kvs_sample(&a, logits, &tok, &err), KVS_OK);

        c = kvs_sampler_coin(&b);
        assert_true(c == ref_coin(&ref));
        assert_true(c >= 0.0f && c < 1.0f);
        assert_int_equal(tok, c < 0.5f ? 0 : 1);
        assert_true(a.rng == b.rng);
    }

    /* seed 0 is replaced, never a stuck RNG */
    p.seed = 0;
    kvs_sampler_free(&b);
    assert_int_equal(kvs_sampler_init(&b, &p, 2, &err), KVS_OK);
    assert_true(b.rng != 0);
    (void) kvs_sampler_coin(&b);
    assert_true(b.rng != 0);

    /* greedy: kvs_sample draws nothing, so the engine draws nothing */
    p.temperature = 0.0f;
    p.seed = 99;
    assert_int_equal(kvs_sampler_init(&g, &p, 2, &err), KVS_OK);
    logits[0] = 0.0f;
    logits[1] = 1.0f;
    assert_int_equal(kvs_sample(&g, logits, &tok, &err), KVS_OK);
    assert_int_equal(tok, 1);
    assert_true(g.rng == 99);

    kvs_sampler_free(&a);
    kvs_sampler_free(&b);
    kvs_sampler_free(&g);
}


/* Runs reqs[n] together on e to the end; toks[r][c][MAXGEN] and
 * lens[r][c]: request r's choice c. */
typedef struct {
    kvs_sample_params_t  sp;
    uint32_t             n;
    uint32_t             max;
} req_t;

#define NREQ  7


static void
run_all(kvs_engine_t *e, const req_t *reqs, int32_t *prompt,
    uint32_t n_prompt, int32_t toks[NREQ][2][MAXGEN],
    uint32_t lens[NREQ][2])
{
    uint32_t           r, c, left;
    kvs_err_t          err;
    kvs_engine_req_t   req;
    kvs_engine_out_t   out;
    kvs_engine_seq_t  *hs[NREQ][2];

    for (r = 0; r < NREQ; r++) {
        memset(&req, 0, sizeof(req));
        req.prompt = prompt;
        req.n_prompt = n_prompt;
        req.max_tokens = reqs[r].max;
        req.n = reqs[r].n;
        req.sample = reqs[r].sp;
        req.ignore_eos = 1;

        if (kvs_engine_submit(e, &req, hs[r], &err) != KVS_OK) {
            fail_msg("submit %u: %s", r, err.msg);
        }
    }

    while (kvs_engine_step(e)) {
        /* steps until idle */
    }

    left = 0;

    for (r = 0; r < NREQ; r++) {
        for (c = 0; c < (reqs[r].n ? reqs[r].n : 1); c++) {
            memset(&out, 0, sizeof(out));
            assert_true(kvs_engine_read(e, hs[r][c], &out) >= 0);
            assert_int_equal(out.finish, KVS_FINISH_LENGTH);
            assert_int_equal(out.n_tokens, reqs[r].max);
            memcpy(toks[r][c], out.tokens, out.n_tokens * sizeof(int32_t));
            lens[r][c] = (uint32_t) out.n_tokens;
            kvs_engine_out_free(&out);
            kvs_engine_close(e, hs[r][c]);
            left++;
        }
    }

    assert_true(left > NREQ);
}


static void
test_device_sampling(void **state)
{
    uint32_t            r, c, i;
    int32_t             prompt[5] = { 1, 200, 300, 17, 42 };
    int32_t             host[NREQ][2][MAXGEN], dev[NREQ][2][MAXGEN];
    uint32_t            hl[NREQ][2], dl[NREQ][2];
    kvs_err_t           err;
    kvs_engine_t       *e;
    kvs_gen_spec_t      spec;
    kvs_test_model_t    md;
    kvs_engine_conf_t   conf;
    req_t               reqs[NREQ];

    if (fake_so[0] == '\0') {
        print_message("SKIP: libkvs_fake_cuda.so not built beside the "
                      "test\n");
        skip();
    }

    assert_int_equal(kvs_gen_preset(&spec, "tiny", &err), KVS_OK);
    snprintf(spec.name, sizeof(spec.name), "backend-dev");
    kvs_test_model_gen(&md, &spec);

    memset(reqs, 0, sizeof(reqs));
    for (r = 0; r < NREQ; r++) {
        reqs[r].sp.top_p = 1.0f;
        reqs[r].sp.seed = 1000 + r;
        reqs[r].max = MAXGEN - r;
        reqs[r].n = 1;
    }

    reqs[1].sp.temperature = 0.8f;
    reqs[1].sp.top_p = 0.9f;
    reqs[2].sp.temperature = 1.0f;
    reqs[2].sp.top_k = 5;
    reqs[3].sp.temperature = 1.3f;          /* no truncation */
    reqs[4].sp.temperature = 0.7f;          /* host rows: logprobs */
    reqs[4].sp.logprobs = 1;
    reqs[5].sp.temperature = 0.9f;          /* forks from its row */
    reqs[5].sp.top_p = 0.95f;
    reqs[5].n = 2;
    reqs[6].sp.temperature = 1.0f;          /* host rows: penalties */
    reqs[6].sp.frequency_penalty = 0.5f;

    /* while a host row runs every step samples on the host; once these
     * end, the device samples the rest */
    reqs[4].max = 5;
    reqs[6].max = 4;

    memset(&conf, 0, sizeof(conf));
    conf.model = md.m;
    conf.vocab = md.v;
    conf.n_blocks = 64;
    conf.threads = 1;
    conf.max_batch_tokens = 64;
    conf.no_prefix_cache = 1;

    assert_int_equal(kvs_engine_new(&e, &conf, &err), KVS_OK);
    run_all(e, reqs, prompt, 5, host, hl);
    kvs_engine_free(e);

    /* the same requests, on the fake device */
    assert_int_equal(setenv("KVSERVE_CUDA_SO", fake_so, 1), 0);
    conf.backend = KVS_BACKEND_CUDA;
    assert_int_equal(kvs_engine_new(&e, &conf, &err), KVS_OK);
    assert_true(strncmp(kvs_engine_backend(e), "backend: cuda, device 0: "
                        "fake device (sm_90), 1024 MiB, 64 KV blocks "
                        "(asked for)", 80) == 0);
    run_all(e, reqs, prompt, 5, dev, dl);
    kvs_engine_free(e);

    for (r = 0; r < NREQ; r++) {
        for (c = 0; c < reqs[r].n; c++) {
            assert_int_equal(hl[r][c], dl[r][c]);
            for (i = 0; i < hl[r][c]; i++) {
                if (host[r][c][i] != dev[r][c][i]) {
                    fail_msg("request %u choice %u token %u: host %d, "
                             "device %d", r, c, i, host[r][c][i],
                             dev[r][c][i]);
                }
            }
        }
    }

    /* the sampled requests did not all come out alike: seeds mattered */
    assert_true(memcmp(host[1][0], host[2][0], 8 * sizeof(int32_t)) != 0);

    /* AUTO on a device: CUDA; the pool sized by the backend */
    conf.backend = KVS_BACKEND_AUTO;
    conf.n_blocks = 0;
    conf.kv_fraction = 0.5;
    assert_int_equal(kvs_engine_new(&e, &conf, &err), KVS_OK);
    assert_non_null(strstr(kvs_engine_backend(e), "(auto: a device "
                                                  "answered)"));
    assert_int_equal(kvs_engine_check(e, &err), KVS_OK);
    kvs_engine_free(e);

    kvs_test_model_free(&md);
}


int
main(int argc, char **argv)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_new),
        cmocka_unit_test(test_engine_line),
        cmocka_unit_test(test_device_ok),
        cmocka_unit_test(test_coin),
        /* last: a loaded shared object stays loaded */
        cmocka_unit_test(test_device_sampling),
    };

    kvs_test_fake_cuda(argc > 0 ? argv[0] : NULL, fake_so, sizeof(fake_so));

    return cmocka_run_group_tests(tests, NULL, NULL);
}
