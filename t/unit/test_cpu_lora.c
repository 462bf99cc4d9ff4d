/*
 * test_cpu_lora: batched heterogeneous LoRA on the CPU backend
 * (src/backend/cpu/kvs_cpu_lora.c) against merged models (the oracle,
 * kvs_gen_lora_merge, itself checked by test_lora).
 *
 *   - generated llama and qwen3 bases (F32) and 8 generated adapters of
 *     ranks 8 and 64 (alternating) in slots 1..8 of one kv on two
 *     threads; 9 sequences, sequence s under slot s (0: the base), run
 *     together: every prefill step and every decode step mixes the 8
 *     adapters and the base in one batch.  Each sequence's greedy ids
 *     equal those of its merged model run alone (the base alone for s =
 *     0), and its logits are within 1e-4 (max abs error over max abs
 *     logit, test_cpu_models' measure) of them;
 *   - the adapters matter: each adapted sequence's logits differ from
 *     the base's on the same prompt by more than 1e-3 of that measure;
 *   - the kernel levels (portable, AVX2, the CPU's best) agree within
 *     1e-5 on sides that are no multiples of 16 and ranks 5, 8, 64;
 *   - refusals, nothing computed: an entry naming an empty slot; slots
 *     0 and KVS_CPU_LORA_SLOTS + 1; an adapter of another architecture.
 */

#include "kvs_test_cpu.h"

#include <unistd.h>

#include "gen/kvs_gen.h"
#include "gen/kvs_gen_lora.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_lora.h"

#define N_AD     8
#define N_SEQ    (N_AD + 1)
#define N_GEN    8
#define BT       16


typedef struct {
    kvs_model_t      *m;
    kvs_cpu_model_t  *cm;
} mdl_t;


static void
mdl_open(mdl_t *md, const char *path)
{
    kvs_err_t  err;

    if (kvs_model_open(&md->m, path, &err) != KVS_OK
        || kvs_cpu_model_new(&md->cm, md->m, &err) != KVS_OK)
    {
        fail_msg("%s: %s", path, err.msg);
    }
}


static void
mdl_close(mdl_t *md)
{
    kvs_cpu_model_free(md->cm);
    kvs_model_close(md->m);
}


/* A generated base of n_embd wide (4 heads, 2 K/V) and FFN n_ff. */
static void
gen_base_dims(char *path, const char *tag, kvs_arch_t arch, uint32_t n_embd,
    uint32_t n_ff)
{
    char            name[64];
    kvs_err_t       err;
    kvs_gen_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "cpu-lora");
    spec.arch = arch;
    spec.n_layer = 2;
    spec.n_embd = n_embd;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = n_ff;
    spec.n_vocab = 300;
    spec.n_ctx = 128;
    spec.dtype = KVS_GGML_F32;
    spec.seed = 21;

    snprintf(name, sizeof(name), "cpu-lora-%s.%d.gguf", tag, (int) getpid());
    snprintf(path, 256, "%s", kvs_test_tmp(name));

    if (kvs_gen_write(&spec, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }
}


static void
gen_base(char *path, const char *tag, kvs_arch_t arch)
{
    gen_base_dims(path, tag, arch, 64, 128);
}


static void
seq_init(kvs_test_seq_t *seq, uint32_t s, uint32_t n_vocab)
{
    uint32_t  i, n_prompt;

    memset(seq, 0, sizeof(kvs_test_seq_t));
    n_prompt = 5 + s;
    seq->n_total = n_prompt + N_GEN;
    seq->ids = calloc(seq->n_total, sizeof(int32_t));
    seq->lg = malloc((size_t) N_GEN * n_vocab * sizeof(float));
    assert_non_null(seq->ids);
    assert_non_null(seq->lg);
    seq->n_prompt = n_prompt;

    for (i = 0; i < n_prompt; i++) {
        seq->ids[i] = (int32_t) ((i * 37 + s * 11 + 3) % n_vocab);
    }

    seq->n_ids = n_prompt;
    seq->chunk = n_prompt;
}


/* Runs seqs[0..n) on cm under slots (NULL: none), kv of `threads`. */
static void
run(const kvs_cpu_model_t *cm, kvs_test_seq_t *seqs, uint32_t n,
    kvs_lora_t **ad, const uint32_t *slots, unsigned threads)
{
    uint32_t        s, blocks;
    kvs_err_t       err;
    kvs_cpu_kv_t   *kv;
    kvs_kv_pool_t  *pool;

    blocks = 0;
    for (s = 0; s < n; s++) {
        blocks += (seqs[s].n_total + BT - 1) / BT;
    }

    assert_int_equal(kvs_kv_pool_new(&pool, blocks, BT, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, cm, blocks, BT, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_set_threads(kv, threads, &err), KVS_OK);

    for (s = 0; ad != NULL && s < N_AD; s++) {
        if (kvs_cpu_kv_set_lora(kv, cm, s + 1, ad[s], &err) != KVS_OK) {
            fail_msg("slot %u: %s", s + 1, err.msg);
        }
    }

    kvs_test_run_seqs_lora(cm, kv, pool, seqs, n, slots);

    for (s = 0; s < n; s++) {
        assert_int_equal(seqs[s].n_ids, seqs[s].n_total);
        assert_int_equal(kvs_kv_table_release(&seqs[s].table, pool, &err),
                         KVS_OK);
    }

    kvs_test_pool_ok(pool);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
}


static void
check_arch(kvs_arch_t arch, const char *tag)
{
    char                  bp[256], ap[N_AD][256], mp[N_AD][256], name[64];
    double                rel;
    uint32_t              s, slots[N_SEQ];
    kvs_err_t             err;
    kvs_lora_t           *ad[N_AD];
    mdl_t                 base, merged;
    kvs_test_seq_t        seqs[N_SEQ], alone, plain[N_SEQ];
    kvs_gen_lora_spec_t   spec;

    gen_base(bp, tag, arch);
    mdl_open(&base, bp);

    for (s = 0; s < N_AD; s++) {
        memset(&spec, 0, sizeof(spec));
        spec.rank = s % 2 ? 64 : 8;
        spec.targets = 0x7f;
        spec.seed = 100 + s;
        spec.alpha = 2.0f * (float) spec.rank;
        spec.strength = 0.5f;

        snprintf(name, sizeof(name), "cpu-lora-%s-a%u.%d.gguf", tag, s,
                 (int) getpid());
        snprintf(ap[s], 256, "%s", kvs_test_tmp(name));
        snprintf(name, sizeof(name), "cpu-lora-%s-m%u.%d.gguf", tag, s,
                 (int) getpid());
        snprintf(mp[s], 256, "%s", kvs_test_tmp(name));

        if (kvs_gen_lora_write(bp, &spec, ap[s], &err) != KVS_OK
            || kvs_lora_open(&ad[s], ap[s], base.m, &err) != KVS_OK
            || kvs_gen_lora_merge(bp, ap[s], mp[s], &err) != KVS_OK)
        {
            fail_msg("adapter %u: %s", s, err.msg);
        }
    }

    /* all nine together, each under its own slot */
    for (s = 0; s < N_SEQ; s++) {
        seq_init(&seqs[s], s, base.cm->hp.n_vocab);
        seq_init(&plain[s], s, base.cm->hp.n_vocab);
        slots[s] = s;
    }

    run(base.cm, seqs, N_SEQ, ad, slots, 2);

    /* the same prompts on the base, no adapters */
    run(base.cm, plain, N_SEQ, NULL, NULL, 1);

    for (s = 0; s < N_SEQ; s++) {
        seq_init(&alone, s, base.cm->hp.n_vocab);

        if (s == 0) {
            run(base.cm, &alone, 1, NULL, NULL, 1);

        } else {
            mdl_open(&merged, mp[s - 1]);
            run(merged.cm, &alone, 1, NULL, NULL, 1);
            mdl_close(&merged);
        }

        if (memcmp(alone.ids, seqs[s].ids, alone.n_total * sizeof(int32_t))
            != 0)
        {
            fail_msg("%s: sequence %u (slot %u): greedy ids differ from the "
                     "merged model's", tag, s, s);
        }

        rel = kvs_test_rel_err(seqs[s].lg, alone.lg,
                      (size_t) N_GEN * base.cm->hp.n_vocab);
        if (rel >= 1e-4) {
            fail_msg("%s: sequence %u: logits differ from the merged "
                     "model's: max rel err %g", tag, s, rel);
        }

        if (s > 0) {
            rel = kvs_test_rel_err(seqs[s].lg, plain[s].lg,
                          (size_t) N_GEN * base.cm->hp.n_vocab);
            if (rel <= 1e-3) {
                fail_msg("%s: adapter %u changes the logits by %g only",
                         tag, s, rel);
            }
        }

        free(alone.ids);
        free(alone.lg);
        free(seqs[s].ids);
        free(seqs[s].lg);
        free(plain[s].ids);
        free(plain[s].lg);
    }

    for (s = 0; s < N_AD; s++) {
        kvs_lora_close(ad[s]);
        unlink(ap[s]);
        unlink(mp[s]);
    }

    mdl_close(&base);
    unlink(bp);
}


static void
test_llama(void **state)
{
    check_arch(KVS_ARCH_LLAMA, "llama");
}


static void
test_qwen3(void **state)
{
    check_arch(KVS_ARCH_QWEN3, "qwen3");
}


static void
test_refusals(void **state)
{
    char              bp[256], qp[256], ap[256];
    float             logits[300];
    uint32_t          slot;
    kvs_err_t         err;
    kvs_lora_t       *l, *lq;
    mdl_t             base, qwen;
    kvs_cpu_kv_t     *kv;
    kvs_kv_pool_t    *pool;
    kvs_kv_table_t    table;
    kvs_batch_tok_t   tok;
    kvs_batch_t       b;
    kvs_gen_lora_spec_t  spec;

    gen_base(bp, "ref", KVS_ARCH_LLAMA);
    gen_base(qp, "refq", KVS_ARCH_QWEN3);
    mdl_open(&base, bp);
    mdl_open(&qwen, qp);

    memset(&spec, 0, sizeof(spec));
    spec.rank = 4;
    spec.targets = 0x7f;
    spec.seed = 1;
    spec.alpha = 8;
    spec.strength = 0.5f;
    snprintf(ap, sizeof(ap), "%s", kvs_test_tmp("cpu-lora-ref-a.gguf"));
    assert_int_equal(kvs_gen_lora_write(qp, &spec, ap, &err), KVS_OK);
    assert_int_equal(kvs_lora_open(&lq, ap, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gen_lora_write(bp, &spec, ap, &err), KVS_OK);
    assert_int_equal(kvs_lora_open(&l, ap, base.m, &err), KVS_OK);

    assert_int_equal(kvs_kv_pool_new(&pool, 2, BT, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, base.cm, 2, BT, &err), KVS_OK);

    assert_int_equal(kvs_cpu_kv_set_lora(kv, base.cm, 0, l, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_cpu_kv_set_lora(kv, base.cm,
                                         KVS_CPU_LORA_SLOTS + 1, l, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_cpu_kv_set_lora(kv, base.cm, 1, lq, &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "qwen3"));
    assert_int_equal(kvs_cpu_kv_set_lora(kv, base.cm, 1, l, &err), KVS_OK);

    memset(&table, 0, sizeof(table));
    assert_int_equal(kvs_kv_table_reserve(&table, pool, 1, &err), KVS_OK);
    memset(&tok, 0, sizeof(tok));
    tok.token = 7;
    tok.table = &table;
    tok.want_logits = 1;
    b.toks = &tok;
    b.n = 1;

    slot = 2;                          /* empty */
    assert_int_equal(kvs_cpu_forward_lora(base.cm, kv, &b, &slot, logits,
                                          &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "slot 2"));

    slot = 1;
    assert_int_equal(kvs_cpu_forward_lora(base.cm, kv, &b, &slot, logits,
                                          &err), KVS_OK);

    /* emptied, the slot is refused again */
    assert_int_equal(kvs_cpu_kv_set_lora(kv, base.cm, 1, NULL, &err),
                     KVS_OK);
    assert_int_equal(kvs_cpu_forward_lora(base.cm, kv, &b, &slot, logits,
                                          &err), KVS_EINVAL);

    assert_int_equal(kvs_kv_table_release(&table, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
    kvs_lora_close(l);
    kvs_lora_close(lq);
    mdl_close(&base);
    mdl_close(&qwen);
    unlink(ap);
    unlink(bp);
    unlink(qp);
}


/*
 * The kernel levels agree: the portable path (KVSERVE_CPU_SIMD=0, the
 * reference kvs_lora_apply_row), AVX2 (=1) and the CPU's best, on a base
 * whose sides are no multiples of 16 (48 wide, FFN 136, K/V 24) and
 * adapters of ranks 5, 8 and 64, 9 sequences mixed as above: the same
 * greedy ids, logits within 1e-5 of the portable ones.  On a CPU
 * without AVX2 the three runs are the same path.
 */
static void
test_levels(void **state)
{
    char                  bp[256], ap[N_AD][256], name[64];
    double                rel;
    uint32_t              s, lv, slots[N_SEQ];
    kvs_err_t             err;
    kvs_lora_t           *ad[N_AD];
    mdl_t                 base;
    kvs_test_seq_t        seqs[3][N_SEQ];
    kvs_gen_lora_spec_t   spec;
    static const char    *levels[3] = { "0", "1", NULL };
    static const uint32_t ranks[3] = { 5, 8, 64 };

    gen_base_dims(bp, "odd", KVS_ARCH_LLAMA, 48, 136);
    mdl_open(&base, bp);

    for (s = 0; s < N_AD; s++) {
        memset(&spec, 0, sizeof(spec));
        spec.rank = ranks[s % 3];
        spec.targets = 0x7f;
        spec.seed = 200 + s;
        spec.alpha = 2.0f * (float) spec.rank;
        spec.strength = 0.5f;
        snprintf(name, sizeof(name), "cpu-lora-odd-a%u.%d.gguf", s,
                 (int) getpid());
        snprintf(ap[s], 256, "%s", kvs_test_tmp(name));

        if (kvs_gen_lora_write(bp, &spec, ap[s], &err) != KVS_OK
            || kvs_lora_open(&ad[s], ap[s], base.m, &err) != KVS_OK)
        {
            fail_msg("adapter %u: %s", s, err.msg);
        }
    }

    for (lv = 0; lv < 3; lv++) {
        if (levels[lv] != NULL) {
            setenv("KVSERVE_CPU_SIMD", levels[lv], 1);
        } else {
            unsetenv("KVSERVE_CPU_SIMD");
        }

        for (s = 0; s < N_SEQ; s++) {
            seq_init(&seqs[lv][s], s, base.cm->hp.n_vocab);
            slots[s] = s;
        }

        run(base.cm, seqs[lv], N_SEQ, ad, slots, 2);
    }

    unsetenv("KVSERVE_CPU_SIMD");

    for (lv = 1; lv < 3; lv++) {
        for (s = 0; s < N_SEQ; s++) {
            if (memcmp(seqs[lv][s].ids, seqs[0][s].ids,
                       seqs[0][s].n_total * sizeof(int32_t)) != 0)
            {
                fail_msg("level %s: sequence %u: greedy ids differ from "
                         "the portable path's", levels[lv] ? levels[lv]
                         : "best", s);
            }

            rel = kvs_test_rel_err(seqs[lv][s].lg, seqs[0][s].lg,
                                   (size_t) N_GEN * base.cm->hp.n_vocab);
            if (rel >= 1e-5) {
                fail_msg("level %s: sequence %u: logits differ from the "
                         "portable path's by %g", levels[lv] ? levels[lv]
                         : "best", s, rel);
            }
        }
    }

    for (lv = 0; lv < 3; lv++) {
        for (s = 0; s < N_SEQ; s++) {
            free(seqs[lv][s].ids);
            free(seqs[lv][s].lg);
        }
    }

    for (s = 0; s < N_AD; s++) {
        kvs_lora_close(ad[s]);
        unlink(ap[s]);
    }

    mdl_close(&base);
    unlink(bp);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_refusals),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
