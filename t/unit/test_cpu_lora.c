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
 *     0), and its logits are within 1e-3 (max abs error over max abs
 *     logit, test_cpu_models' measure) of them: the kv holds adapters
 *     as F16 (kvs_cpu_lora.h, rounding 2^-11), measured 1.3e-4 to
 *     3.6e-4 (F32 adapters were within 1e-4);
 *   - the adapters matter: each adapted sequence's logits differ from
 *     the base's on the same prompt by more than 1e-3 of that measure;
 *   - the kernel levels (portable, AVX2, the CPU's best) agree within
 *     1e-5 on sides that are no multiples of 16 and ranks 5, 8, 64;
 *   - each packed pair's product, at every level the CPU has, is the
 *     F32 adapter's (kvs_lora_apply_row) within 2e-3 of the largest
 *     change it makes (F16 rounding of A and B, 2^-11 each), also for an
 *     adapter whose values are far below F16's normal range (the
 *     per-matrix power-of-two scale); a row's result is the same bits
 *     alone as in a group of five, and the product's halves run apart
 *     (shrink, then expand over the outputs in 16-wide tiles or cut at
 *     odd places, as a step runs them with the base product's tiles)
 *     give the same bits as the whole;
 *   - the F16 conversions: every finite half round-trips, ties round to
 *     even, and (where the CPU has F16C) the rounding equals the
 *     hardware's on 2^20 floats, the packing's loop the same bits at
 *     both levels;
 *   - refusals, nothing computed: an entry naming an empty slot; slots
 *     0 and KVS_CPU_LORA_SLOTS + 1; an adapter of another architecture.
 */

#include "kvs_test_cpu.h"

#include <unistd.h>

#include "backend/cpu/kvs_cpu_impl.h"
#include "backend/cpu/kvs_cpu_lora.h"

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
        if (rel >= 1e-3) {
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


#if KVS_CPU_X86
#include <immintrin.h>

__attribute__((target("f16c"))) static uint16_t
hw_f2h(float v)
{
    return (uint16_t) _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
}
#endif


/* The F16 conversions the packing and the portable kernel use. */
static void
test_f16(void **state)
{
    float     v, src[1027];
    double    mid;
    uint16_t  h0[1027], h1[1027];
    uint32_t  h, i, f, e;
    uint64_t  rnd;

    assert_true(kvs_cpu_lora_h2f(0x3c00) == 1.0f);
    assert_true(kvs_cpu_lora_h2f(0xc000) == -2.0f);
    assert_true(kvs_cpu_lora_h2f(0x7bff) == 65504.0f);
    assert_true(kvs_cpu_lora_h2f(0x0001) == 0x1p-24f);
    assert_true(kvs_cpu_lora_h2f(0x0400) == 0x1p-14f);
    assert_int_equal(kvs_cpu_lora_f2h(0x1p-26f), 0);
    assert_int_equal(kvs_cpu_lora_f2h(-0.0f), 0x8000);

    for (h = 0; h < 0x10000; h++) {
        if (((h >> 10) & 0x1f) == 0x1f) {
            continue;                            /* inf, NaN: never made */
        }

        assert_int_equal(kvs_cpu_lora_f2h(kvs_cpu_lora_h2f((uint16_t) h)),
                         h);

        /* halfway to the next half up in magnitude: to the even one */
        if ((h & 0x7fff) < 0x7bff) {
            mid = ((double) kvs_cpu_lora_h2f((uint16_t) h)
                   + kvs_cpu_lora_h2f((uint16_t) (h + 1))) / 2.0;
            assert_int_equal(kvs_cpu_lora_f2h((float) mid),
                             h & 1 ? h + 1 : h);
        }
    }

#if KVS_CPU_X86
    if (kvs_cpu_simd() < KVS_CPU_SIMD_AVX2) {     /* AVX2 + FMA + F16C */
        return;
    }

    rnd = 12345;

    for (i = 0; i < (1u << 20); i++) {
        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        f = (uint32_t) (rnd >> 32);
        e = (f >> 23) & 0xff;
        if (e > 141) {
            f = (f & ~(0xffu << 23)) | ((e % 142) << 23);  /* < 2^15 */
        }
        memcpy(&v, &f, sizeof(v));

        if (kvs_cpu_lora_f2h(v) != hw_f2h(v)) {
            fail_msg("f2h(%a) = %04x, the hardware's %04x", (double) v,
                     kvs_cpu_lora_f2h(v), hw_f2h(v));
        }

        /* the packing's loop, portable and F16C, on 1027 of them */
        if (i % 1027 == 1026) {
            src[1026] = v;
            kvs_cpu_lora_f2h_n(KVS_CPU_SIMD_NONE, h0, src, 1027, 0.5f);
            kvs_cpu_lora_f2h_n(KVS_CPU_SIMD_AVX2, h1, src, 1027, 0.5f);
            assert_memory_equal(h0, h1, sizeof(h0));
        } else {
            src[i % 1027] = v;
        }
    }
#else
    (void) v;
    (void) src;
    (void) h0;
    (void) h1;
    (void) rnd;
    (void) f;
    (void) e;
    (void) i;
#endif
}


typedef void (*rows_fn_t)(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g);
typedef void (*expand_fn_t)(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g, uint32_t o0, uint32_t o1);


/* y[N_ROWS] + the pair's product by fn into out, each row's input x. */
#define N_ROWS  5

static void
rows_run(rows_fn_t fn, const kvs_cpu_lora_pair_t *p, const float *x,
    const float *y0, float *out, int alone)
{
    float                 t[N_ROWS * 64];
    uint32_t              rows[N_ROWS], i;
    kvs_cpu_lora_rows_t   g;

    memcpy(out, y0, (size_t) N_ROWS * p->n_out * sizeof(float));

    for (i = 0; i < N_ROWS; i++) {
        rows[i] = (i * 3) % N_ROWS;              /* not in order */
    }

    g.x = x;
    g.ldx = p->n_in;
    g.y = out;
    g.ldy = p->n_out;
    g.t = t;

    if (!alone) {
        g.rows = rows;
        g.cnt = N_ROWS;
        fn(p, &g);
        return;
    }

    for (i = 0; i < N_ROWS; i++) {
        g.rows = &rows[i];
        g.cnt = 1;
        fn(p, &g);
    }
}


/* The product in halves, as a step runs it with the base product's
 * tiles: shrink, then expand over the outputs split at cuts[] (clamped
 * to n_out, in order), into out. */
static void
split_run(rows_fn_t shrink, expand_fn_t expand, const kvs_cpu_lora_pair_t *p,
    const float *x, const float *y0, float *out, const uint32_t *cuts,
    uint32_t n_cuts)
{
    float                 t[N_ROWS * 64];
    uint32_t              rows[N_ROWS], i, o0, o1;
    kvs_cpu_lora_rows_t   g;

    memcpy(out, y0, (size_t) N_ROWS * p->n_out * sizeof(float));

    for (i = 0; i < N_ROWS; i++) {
        rows[i] = (i * 2 + 1) % N_ROWS;
    }

    g.x = x;
    g.ldx = p->n_in;
    g.y = out;
    g.ldy = p->n_out;
    g.t = t;
    g.rows = rows;
    g.cnt = N_ROWS;
    shrink(p, &g);

    o0 = 0;
    for (i = 0; i <= n_cuts; i++) {
        o1 = i < n_cuts && cuts[i] < p->n_out ? cuts[i] : p->n_out;
        expand(p, &g, o0, o1);
        o0 = o1;
    }
}


/*
 * Each packed pair against the F32 adapter: kvs_lora_apply_row over the
 * adapter's own values is the reference; the portable and x86 group
 * kernels over the slot's F16 values are within 2e-3 of the largest
 * change the pair makes, and within 1e-5 of each other.
 */
static void
test_packed(void **state)
{
    char                   bp[256], ap[256], name[64];
    float                 *x, *y0, *ref, *out[3], tmp[64], d, dmax, emax;
    double                 rel;
    uint32_t               a, i, o, ly, tg, lv, n_lv;
    uint64_t               rnd;
    kvs_err_t              err;
    kvs_lora_t            *l;
    mdl_t                  base;
    kvs_cpu_kv_t          *kv;
    rows_fn_t              fns[3], shrinks[3];
    expand_fn_t            expands[3];
    float                 *sp;
    static const uint32_t  tiles[] = { 16, 32, 48, 64, 80, 96, 112, 128 };
    static const uint32_t  odd[] = { 7, 8, 40, 41, 100 };
    kvs_gen_lora_spec_t    spec;
    const kvs_lora_mat_t  *m;
    const kvs_cpu_lora_pair_t  *p;
    static const uint32_t  ranks[4] = { 5, 8, 64, 16 };
    static const float     strength[4] = { 0.5f, 0.5f, 0.5f, 1e-7f };

    gen_base_dims(bp, "pk", KVS_ARCH_LLAMA, 48, 136);
    mdl_open(&base, bp);
    assert_int_equal(kvs_cpu_kv_new(&kv, base.cm, 1, BT, &err), KVS_OK);

    fns[0] = kvs_cpu_lora_rows_c;
    shrinks[0] = kvs_cpu_lora_shrink_c;
    expands[0] = kvs_cpu_lora_expand_c;
    n_lv = 1;
#if KVS_CPU_X86
    if (kvs_cpu_simd() >= KVS_CPU_SIMD_AVX2) {
        shrinks[n_lv] = kvs_cpu_lora_shrink_avx2;
        expands[n_lv] = kvs_cpu_lora_expand_avx2;
        fns[n_lv++] = kvs_cpu_lora_rows_avx2;
    }
    if (kvs_cpu_simd() >= KVS_CPU_SIMD_AVX512) {
        shrinks[n_lv] = kvs_cpu_lora_shrink_avx512;
        expands[n_lv] = kvs_cpu_lora_expand_avx512;
        fns[n_lv++] = kvs_cpu_lora_rows_avx512;
    }
#endif
    sp = malloc((size_t) N_ROWS * 136 * sizeof(float));
    assert_non_null(sp);

    x = malloc((size_t) N_ROWS * 136 * sizeof(float));
    y0 = malloc((size_t) N_ROWS * 136 * sizeof(float));
    ref = malloc((size_t) N_ROWS * 136 * sizeof(float));
    for (lv = 0; lv < 3; lv++) {
        out[lv] = malloc((size_t) N_ROWS * 136 * sizeof(float));
        assert_non_null(out[lv]);
    }
    assert_true(x != NULL && y0 != NULL && ref != NULL);
    rnd = 7;

    for (a = 0; a < 4; a++) {
        memset(&spec, 0, sizeof(spec));
        spec.rank = ranks[a];
        spec.targets = 0x7f;
        spec.seed = 300 + a;
        spec.alpha = 2.0f * (float) spec.rank;
        spec.strength = strength[a];
        snprintf(name, sizeof(name), "cpu-lora-pk-a%u.%d.gguf", a,
                 (int) getpid());
        snprintf(ap, 256, "%s", kvs_test_tmp(name));

        if (kvs_gen_lora_write(bp, &spec, ap, &err) != KVS_OK
            || kvs_lora_open(&l, ap, base.m, &err) != KVS_OK
            || kvs_cpu_kv_set_lora(kv, base.cm, 1, l, &err) != KVS_OK)
        {
            fail_msg("adapter %u: %s", a, err.msg);
        }

        for (ly = 0; ly < base.cm->hp.n_layer; ly++) {
            for (tg = 0; tg < KVS_LORA_QKV; tg++) {
                m = kvs_lora_find(l, ly, (kvs_lora_target_t) tg);
                p = &kv->lora[0]->pairs[ly * KVS_LORA_N_TARGETS + tg];
                assert_non_null(m);
                assert_int_equal(p->rank, m->rank);

                for (i = 0; i < N_ROWS * p->n_in; i++) {
                    rnd = rnd * 6364136223846793005ull + 1;
                    x[i] = (float) ((rnd >> 40) & 0xffff) / 32768.0f - 1.0f;
                }
                for (i = 0; i < N_ROWS * p->n_out; i++) {
                    rnd = rnd * 6364136223846793005ull + 1;
                    y0[i] = (float) ((rnd >> 40) & 0xffff) / 65536.0f
                            * strength[a];      /* the change's size */
                }

                /* the reference: row i of x into row i of y */
                memcpy(ref, y0, (size_t) N_ROWS * p->n_out * sizeof(float));
                for (i = 0; i < N_ROWS; i++) {
                    kvs_lora_apply_row(m, x + (size_t) i * p->n_in,
                                       ref + (size_t) i * p->n_out, tmp);
                }

                dmax = 0.0f;
                for (i = 0; i < N_ROWS * p->n_out; i++) {
                    d = fabsf(ref[i] - y0[i]);
                    dmax = d > dmax ? d : dmax;
                }
                assert_true(dmax > 0.0f);

                for (lv = 0; lv < n_lv; lv++) {
                    rows_run(fns[lv], p, x, y0, out[lv], 0);

                    emax = 0.0f;
                    for (i = 0; i < N_ROWS * p->n_out; i++) {
                        d = fabsf(out[lv][i] - ref[i]);
                        emax = d > emax ? d : emax;
                    }
                    rel = (double) emax / dmax;
                    if (rel > 2e-3) {
                        fail_msg("adapter %u layer %u target %u level %u: "
                                 "%g of the change off the F32 product",
                                 a, ly, tg, lv, rel);
                    }

                    emax = 0.0f;
                    for (i = 0; i < N_ROWS * p->n_out; i++) {
                        d = fabsf(out[lv][i] - out[0][i]);
                        emax = d > emax ? d : emax;
                    }
                    if ((double) emax / dmax > 1e-5) {
                        fail_msg("adapter %u layer %u target %u level %u: "
                                 "%g off the portable kernel", a, ly, tg,
                                 lv, (double) emax / dmax);
                    }

                    /* each row alone: the same bits */
                    rows_run(fns[lv], p, x, y0, out[2], 1);
                    for (o = 0; o < N_ROWS * p->n_out; o++) {
                        if (memcmp(&out[2][o], &out[lv][o], sizeof(float))
                            != 0)
                        {
                            fail_msg("level %u: a row alone differs from "
                                     "the same row in a group", lv);
                        }
                    }

                    /* the halves apart, the outputs in the base product's
                     * tiles (16 wide) or cut anywhere: the same bits */
                    split_run(shrinks[lv], expands[lv], p, x, y0, sp, tiles,
                              sizeof(tiles) / sizeof(tiles[0]));
                    assert_memory_equal(sp, out[lv], (size_t) N_ROWS
                                        * p->n_out * sizeof(float));
                    split_run(shrinks[lv], expands[lv], p, x, y0, sp, odd,
                              sizeof(odd) / sizeof(odd[0]));
                    assert_memory_equal(sp, out[lv], (size_t) N_ROWS
                                        * p->n_out * sizeof(float));
                }
            }
        }

        assert_int_equal(kvs_cpu_kv_set_lora(kv, base.cm, 1, NULL, &err),
                         KVS_OK);
        kvs_lora_close(l);
        unlink(ap);
    }

    for (lv = 0; lv < 3; lv++) {
        free(out[lv]);
    }
    free(sp);
    free(x);
    free(y0);
    free(ref);
    kvs_cpu_kv_free(kv);
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
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_packed),
        cmocka_unit_test(test_refusals),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
