/*
 * test_cpu_quant: every type of kvs_quant's table computes, through the
 * CPU backend, the model its weights mean.  For each table type T that
 * kvserve can make (other than F32), a seeded random model is generated
 * with every matrix in T (tok_embd included, so the embedding row gather
 * converts T too) and rewritten with every matrix dequantized to F32 (a
 * pure-F32 "mix" of kvs_quantize_file: the table's dequantize, exact).
 * Both run the same prompt (a 70-token prefill: the sgemm path) and 10
 * greedy decode steps (the 4-row path): the quantized model's logits
 * equal the F32 model's within 1e-4 of their largest magnitude (only the
 * summation order of products may differ), and the greedy ids are equal.
 * The types whose products quantize the activations too (Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL: kvs_test_act_quantized) are only close: up
 * to the first greedy id that differs (after it the two models see
 * different tokens), within 5e-2 of the largest logit (1.0e-2 .. 1.4e-2
 * measured), and their ids are not compared.
 *
 * Refusals: a model with a tensor of type IQ2_XXS (a generated file with
 * one tensor's type field rewritten; the bytes fit, being fewer) is
 * refused by kvs_model_open naming the tensor and the type, and by the
 * CPU backend too when handed such a model directly.
 *
 * The models are generated into KVS_TMP and unlinked once mapped.
 */

#include "kvs_test_cpu.h"

#include <fcntl.h>
#include <math.h>
#include <unistd.h>

#include "gen/kvs_gen.h"
#include "gen/kvs_quantize.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"

#define N_PROMPT  70                  /* >= KVS_CPU_BLAS_MIN: sgemm */
#define N_GEN     10


typedef struct {
    kvs_model_t      *m;
    kvs_cpu_model_t  *cm;
} model_t;


static void
spec_init(kvs_gen_spec_t *spec, uint32_t dtype)
{
    memset(spec, 0, sizeof(kvs_gen_spec_t));
    snprintf(spec->name, sizeof(spec->name), "test-quant");
    /* rows of 256: every block of the table fits */
    spec->n_layer = 2;
    spec->n_embd = 256;
    spec->n_head = 4;
    spec->n_head_kv = 2;
    spec->n_ff = 512;
    spec->n_vocab = 300;
    spec->n_ctx = 128;
    spec->dtype = dtype;
    spec->seed = 0x9a11;
}


static void
model_open(model_t *md, const char *path, uint32_t want)
{
    kvs_err_t  err;

    if (kvs_model_open(&md->m, path, &err) != KVS_OK
        || kvs_cpu_model_new(&md->cm, md->m, &err) != KVS_OK)
    {
        fail_msg("%s: %s", path, err.msg);
    }

    unlink(path);
    assert_int_equal(md->cm->tok_embd.type, want);
    assert_int_equal(md->cm->layers[1].w2.type, want);
}


static void
model_close(model_t *md)
{
    kvs_cpu_model_free(md->cm);
    kvs_model_close(md->m);
}


/* The types whose CPU products quantize the activations too (the
 * 32-column types with a Q8_0-style input, kvs_cpu_ql.c): their logits
 * are only close to the dequantized model's, and their greedy ids are
 * not compared. */
static int
kvs_test_act_quantized(uint32_t t)
{
    switch (t) {
    case KVS_GGML_Q8_0:
    case KVS_GGML_Q4_0:
    case KVS_GGML_Q4_1:
    case KVS_GGML_Q5_0:
    case KVS_GGML_Q5_1:
    case KVS_GGML_IQ4_NL:
        return 1;
    default:
        return 0;
    }
}


/* The prompt in one prefill, then N_GEN greedy steps: the ids and the
 * logits each greedy id came from. */
static void
run(const kvs_cpu_model_t *cm, int32_t *ids, float *lg)
{
    uint32_t         i, nb;
    kvs_err_t        err;
    kvs_cpu_kv_t    *kv;
    kvs_kv_pool_t   *pool;
    kvs_test_seq_t   seq;

    memset(&seq, 0, sizeof(seq));
    seq.n_total = N_PROMPT + N_GEN;
    seq.ids = ids;
    seq.lg = lg;
    seq.n_prompt = N_PROMPT;
    seq.chunk = N_PROMPT;

    for (i = 0; i < N_PROMPT; i++) {
        ids[i] = (int32_t) ((i * 37 + 11) % cm->hp.n_vocab);
    }

    seq.n_ids = N_PROMPT;
    nb = (seq.n_total + 15) / 16;

    assert_int_equal(kvs_kv_pool_new(&pool, nb, 16, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, cm, nb, 16, &err), KVS_OK);

    kvs_test_run_seqs(cm, kv, pool, &seq, 1);
    assert_int_equal(seq.n_ids, seq.n_total);

    assert_int_equal(kvs_kv_table_release(&seq.table, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
}


static void
test_types(void **state)
{
    char                    a[300], b[256];
    float                  *lq, *lf;
    double                  d, dmax, fmax;
    int32_t                 iq[N_PROMPT + N_GEN], jf[N_PROMPT + N_GEN];
    uint32_t                t, n_tested, n_cmp;
    size_t                  i, n;
    kvs_err_t               err;
    model_t                 mq, mf;
    kvs_gen_spec_t          spec;
    kvs_quant_mix_t         f32;
    const kvs_quant_type_t *q;

    memset(&f32, 0, sizeof(f32));
    f32.name = "f32";
    f32.base = KVS_GGML_F32;
    f32.output = KVS_GGML_F32;

    n = (size_t) N_GEN * 300;
    lq = malloc(n * sizeof(float));
    lf = malloc(n * sizeof(float));
    assert_non_null(lq);
    assert_non_null(lf);
    n_tested = 0;

    for (t = 0; t < KVS_GGML_TYPE_END; t++) {
        q = kvs_quant_type(t);
        if (t == KVS_GGML_F32 || q == NULL || q->quantize == NULL) {
            continue;
        }

        spec_init(&spec, t);
        snprintf(a, sizeof(a), "test_cpu_quant.%d.%s.gguf", (int) getpid(),
                 kvs_ggml_type_name(t));
        snprintf(b, sizeof(b), "%s", kvs_test_tmp(a));
        snprintf(a, sizeof(a), "%s.f32", b);

        if (kvs_gen_write(&spec, b, &err) != KVS_OK
            || kvs_quantize_file(b, a, &f32, &err) != KVS_OK)
        {
            fail_msg("%s: %s", kvs_ggml_type_name(t), err.msg);
        }

        model_open(&mq, b, t);
        model_open(&mf, a, KVS_GGML_F32);

        run(mq.cm, iq, lq);
        run(mf.cm, jf, lf);

        dmax = 0.0;
        fmax = 0.0;
        n_cmp = N_GEN;

        /* a greedy pick that differs feeds the two models different
         * tokens: only the logits up to it have the same context */
        for (i = 0; kvs_test_act_quantized(t) && i < N_GEN; i++) {
            if (iq[N_PROMPT + i] != jf[N_PROMPT + i]) {
                n_cmp = (uint32_t) i + 1;
                break;
            }
        }

        for (i = 0; i < n; i++) {
            assert_true(isfinite(lq[i]) && isfinite(lf[i]));

            if (i >= (size_t) n_cmp * 300) {
                continue;
            }

            d = fabs((double) lq[i] - lf[i]);
            dmax = d > dmax ? d : dmax;
            fmax = fabs(lf[i]) > fmax ? fabs(lf[i]) : fmax;
        }

        /* all-zero logits would compare equal vacuously */
        assert_true(fmax > 1e-3);

        print_message("%-7s max |quantized - dequantized f32| = %.3g of "
                      "%.3g (%.2g), %u of %u steps\n",
                      kvs_ggml_type_name(t), dmax, fmax, dmax / fmax, n_cmp,
                      N_GEN);

        if (kvs_test_act_quantized(t)) {
            if (dmax / fmax >= 5e-2) {
                fail_msg("%s: logits too far from the dequantized "
                         "model's: %g of %g", kvs_ggml_type_name(t), dmax,
                         fmax);
            }

        } else {
            if (dmax / fmax >= 1e-4) {
                fail_msg("%s: logits differ from the dequantized model's: "
                         "%g of %g", kvs_ggml_type_name(t), dmax, fmax);
            }

            if (memcmp(iq, jf, sizeof(iq)) != 0) {
                fail_msg("%s: greedy ids differ from the dequantized "
                         "model's", kvs_ggml_type_name(t));
            }
        }

        model_close(&mq);
        model_close(&mf);
        n_tested++;
    }

    print_message("%u types of the table computed\n", n_tested);
    /* F16, BF16 and Q8_0 at least */
    assert_true(n_tested >= 3);

    free(lq);
    free(lf);
}


/* Writes a generated F32 model whose blk.0.attn_q.weight claims to be
 * IQ2_XXS; returns its path. */
static const char *
write_iq2(char *path, size_t size)
{
    int                       fd;
    uint32_t                  ty;
    uint64_t                  at;
    kvs_err_t                 err;
    kvs_gguf_t               *g;
    kvs_gen_spec_t            spec;
    const kvs_gguf_tensor_t  *t;

    spec_init(&spec, KVS_GGML_F32);
    snprintf(path, size, "%s", kvs_test_tmp("test_cpu_quant.iq2.gguf"));
    assert_int_equal(kvs_gen_write(&spec, path, &err), KVS_OK);

    assert_int_equal(kvs_gguf_open(&g, path, &err), KVS_OK);
    t = kvs_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_non_null(t);
    /* the type field is the u32 just before the offset field */
    at = t->offset_at - 4;
    kvs_gguf_close(g);

    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    ty = KVS_GGML_IQ2_XXS;
    assert_int_equal(pwrite(fd, &ty, 4, (off_t) at), 4);
    close(fd);

    return path;
}


static void
test_refused(void **state)
{
    char              path[256];
    kvs_err_t         err;
    kvs_model_t      *m, fake;
    kvs_cpu_model_t  *cm;

    write_iq2(path, sizeof(path));

    /* the file itself reads: only its type is beyond us */
    assert_int_equal(kvs_model_open(&m, path, &err), KVS_EINVAL);
    assert_null(m);
    assert_non_null(strstr(err.msg, "tensor \"blk.0.attn_q.weight\" is of "
                                    "type IQ2_XXS, which kvserve cannot "
                                    "compute with (supported: F32, F16"));

    /* a backend handed such a model anyway refuses it too, by name */
    memset(&fake, 0, sizeof(fake));
    assert_int_equal(kvs_gguf_open(&fake.gguf, path, &err), KVS_OK);
    assert_int_equal(kvs_hparams_read(&fake.hp, fake.gguf, &err), KVS_OK);
    unlink(path);

    cm = (kvs_cpu_model_t *) &fake;   /* not NULL: a failure clears it */
    assert_int_not_equal(kvs_cpu_model_new(&cm, &fake, &err), KVS_OK);
    assert_null(cm);
    assert_non_null(strstr(err.msg, "cpu backend"));
    assert_non_null(strstr(err.msg, "blk.0.attn_q.weight"));
    assert_non_null(strstr(err.msg, "IQ2_XXS"));

    kvs_gguf_close(fake.gguf);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
