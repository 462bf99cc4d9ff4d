/*
 * test_cpu_models: the CPU backend on seeded random models of several shapes
 * (kvs_gen): MHA, GQA, an odd head count (3 heads of 16, one KV head), tied
 * and untied output, a Mistral-style window of 7, with F32 and F16 weights,
 * and BF16 / Q8_0 as a smoke run; Llama, and the other architectures
 * gen-model writes: qwen3 (per-head Q/K norms, heads wider than embd / heads),
 * phi3 (fused QKV and gate/up, with and without a sliding window of 6
 * positions, shorter than the sequences, so decode steps drop keys), gemma2
 * and gemma3 (GeGLU, post-norms, soft-capping, windowed layers of 6 and 5
 * positions between global ones, gemma3's own RoPE base on the windowed
 * ones).
 * For each model:
 *   (a) incremental decode over the paged cache gives the logits of a
 *       full recompute (a fresh cache, the whole sequence as one prefill
 *       batch, the last position's logits): max |a - b| / max |b| < 1e-4;
 *   (b) every sequence's greedy ids are the same alone as batched with 1
 *       and 7 others of different lengths, chunked prefill on and off;
 *   (c) block sizes 1, 16 and 64 give the same greedy ids.
 * Greedy on a random model often settles on repeating one id (a tied
 * model's own-token logit dominates), which would make (b) and (c) weak,
 * so they compare every step's logits as well (max rel err < 1e-4).
 * Every block is back in the pool after each run.  A tensor of a type the
 * backend does not compute with is refused, naming the tensor.
 * Gemma 3's two RoPE tables each reach their own layers: a model whose
 * global layer turns with its own base gives other logits than one whose
 * every layer is a windowed one, and than one whose two bases are equal
 * (the forward computes each token's angles once per step and table,
 * kvs_rope_angles, so a table left over from the previous layer would
 * make the first two equal).
 *
 * The models are generated into KVS_TMP and unlinked once mapped.
 */

#include "kvs_test_cpu.h"

#include <fcntl.h>
#include <math.h>
#include <unistd.h>

#include "gen/kvs_gen.h"
#include "model/kvs_ggml_type.h"

#define N_SEQ      8
#define N_DECODE   20                 /* (a): decode steps after prompt */
#define N_PROMPT_A 5                  /* (a): prompt, one prefill batch */
#define NO_CHUNK   UINT32_MAX         /* whole prompt in one step */


typedef struct {
    const char  *label;
    uint32_t     n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab;
    int          tied;
    kvs_arch_t   arch;
    uint32_t     head_dim;            /* 0: n_embd / n_head */
    uint32_t     n_swa;               /* phi3's window, 0: none */
} shape_t;

static const shape_t  shapes[] = {
    { "mha",   2, 64, 4, 4, 96,  300, 0, KVS_ARCH_LLAMA, 0, 0 },
    { "gqa",   2, 64, 8, 2, 128, 300, 1, KVS_ARCH_LLAMA, 0, 0 },
    { "odd",   2, 48, 3, 1, 80,  280, 0, KVS_ARCH_LLAMA, 0, 0 },
    { "odd-t", 1, 48, 3, 1, 64,  270, 1, KVS_ARCH_LLAMA, 0, 0 },
    { "qwen3", 2, 64, 4, 2, 96,  300, 1, KVS_ARCH_QWEN3, 0, 0 },
    { "q3-hd", 2, 64, 4, 1, 96,  300, 0, KVS_ARCH_QWEN3, 32, 0 },
    { "phi3",  2, 64, 4, 2, 96,  300, 0, KVS_ARCH_PHI3, 0, 0 },
    { "phi3w", 2, 64, 4, 4, 96,  300, 0, KVS_ARCH_PHI3, 0, 6 },
    { "mistw", 2, 64, 4, 2, 96,  300, 0, KVS_ARCH_LLAMA, 0, 7 },
    { "gem2w", 3, 64, 4, 2, 96,  300, 1, KVS_ARCH_GEMMA2, 32, 6 },
    { "gem3w", 7, 64, 4, 2, 96,  300, 1, KVS_ARCH_GEMMA3, 16, 5 },
};

#define N_SHAPES  (sizeof(shapes) / sizeof(shapes[0]))

/* Sequences of (b) and (c): different prompt and output lengths. */
static const uint32_t  seq_prompt[N_SEQ] = { 13, 1, 29, 6, 17, 3, 24, 9 };
static const uint32_t  seq_gen[N_SEQ] = { 12, 20, 5, 15, 9, 18, 7, 11 };


typedef struct {
    kvs_model_t      *m;
    kvs_cpu_model_t  *cm;
} model_t;


static uint64_t
rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;

    return *s >> 33;
}


/* Generates the shape in dtype into KVS_TMP, maps it and unlinks it. */
static void
model_load(model_t *md, const shape_t *sh, uint32_t dtype)
{
    char             name[128];
    const char      *path;
    kvs_err_t        err;
    kvs_gen_spec_t   spec;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "test-%s", sh->label);
    spec.n_layer = sh->n_layer;
    spec.n_embd = sh->n_embd;
    spec.n_head = sh->n_head;
    spec.n_head_kv = sh->n_head_kv;
    spec.n_ff = sh->n_ff;
    spec.n_vocab = sh->n_vocab;
    spec.n_ctx = 256;
    spec.dtype = dtype;
    spec.tied = sh->tied;
    spec.arch = sh->arch;
    spec.head_dim = sh->head_dim;
    spec.n_swa = sh->n_swa;
    spec.seed = 0x5eed0000u + dtype * 16 + (uint64_t) (sh - shapes);

    snprintf(name, sizeof(name), "test_cpu_models.%d.%s.%s.gguf",
             (int) getpid(), sh->label, kvs_ggml_type_name(dtype));
    path = kvs_test_tmp(name);

    if (kvs_gen_write(&spec, path, &err) != KVS_OK
        || kvs_model_open(&md->m, path, &err) != KVS_OK)
    {
        fail_msg("%s: %s", path, err.msg);
    }

    unlink(path);

    if (kvs_cpu_model_new(&md->cm, md->m, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }

    assert_int_equal(md->cm->hp.arch_id, sh->arch);
    assert_int_equal(md->cm->hp.n_swa, sh->n_swa);
    assert_int_equal(md->cm->hp.n_head, sh->n_head);
    assert_int_equal(md->cm->hp.n_head_kv, sh->n_head_kv);
    assert_int_equal(md->cm->output.data == md->cm->tok_embd.data,
                     sh->tied);
    assert_int_equal(md->cm->tok_embd.type, dtype);
}


/* A small model of spec's kind (2 layers, 64 wide, 4 heads of which 2
 * K/V, 96 ffn, 300 tokens, 64 positions; the caller sets the rest),
 * written to KVS_TMP under tag, mapped and unlinked. */
static void
model_small(model_t *md, kvs_gen_spec_t *spec, const char *tag)
{
    char          name[128];
    const char   *path;
    kvs_err_t     err;

    snprintf(spec->name, sizeof(spec->name), "test-%s", tag);
    spec->n_layer = spec->n_layer != 0 ? spec->n_layer : 2;
    spec->n_embd = 64;
    spec->n_head = 4;
    spec->n_head_kv = 2;
    spec->n_ff = 96;
    spec->n_vocab = 300;
    spec->n_ctx = 64;

    snprintf(name, sizeof(name), "test_cpu_models.%d.%s.gguf",
             (int) getpid(), tag);
    path = kvs_test_tmp(name);

    if (kvs_gen_write(spec, path, &err) != KVS_OK
        || kvs_model_open(&md->m, path, &err) != KVS_OK
        || kvs_cpu_model_new(&md->cm, md->m, &err) != KVS_OK)
    {
        fail_msg("%s: %s", path, err.msg);
    }

    unlink(path);
}


static void
model_unload(model_t *md)
{
    kvs_cpu_model_free(md->cm);
    kvs_model_close(md->m);
    md->cm = NULL;
    md->m = NULL;
}


/* Sequence s of the set: its seeded prompt, fed `chunk` at a time. */
static void
seq_init(kvs_test_seq_t *seq, uint32_t s, uint32_t n_vocab, uint32_t chunk)
{
    uint32_t  i;
    uint64_t  rng;

    memset(seq, 0, sizeof(kvs_test_seq_t));
    seq->n_total = seq_prompt[s] + seq_gen[s];
    seq->ids = calloc(seq->n_total, sizeof(int32_t));
    seq->lg = malloc((size_t) seq_gen[s] * n_vocab * sizeof(float));
    assert_non_null(seq->ids);
    assert_non_null(seq->lg);
    seq->n_prompt = seq_prompt[s];

    rng = 1000 + s;

    for (i = 0; i < seq_prompt[s]; i++) {
        seq->ids[i] = (int32_t) (rng_next(&rng) % n_vocab);
    }

    seq->n_ids = seq_prompt[s];
    seq->chunk = chunk == NO_CHUNK ? seq_prompt[s] : chunk;
}


/*
 * Runs sequences first..first+n-1 together with blocks of bt tokens and
 * checks each one's ids and logits against ref[s] / ref_lg[s] (or stores
 * them there when ref[s] is still NULL).  All blocks are back in the pool
 * afterwards.
 */
static void
run_check(const kvs_cpu_model_t *cm, uint32_t first, uint32_t n,
    uint32_t bt, uint32_t chunk, int32_t **ref, float **ref_lg,
    const char *what)
{
    double           rel;
    uint32_t         s, n_blocks;
    kvs_err_t        err;
    kvs_cpu_kv_t    *kv;
    kvs_kv_pool_t   *pool;
    kvs_test_seq_t   seqs[N_SEQ];

    n_blocks = 0;

    for (s = 0; s < n; s++) {
        seq_init(&seqs[s], first + s, cm->hp.n_vocab, chunk);
        n_blocks += (seqs[s].n_total + bt - 1) / bt;
    }

    assert_int_equal(kvs_kv_pool_new(&pool, n_blocks, bt, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, cm, n_blocks, bt, &err), KVS_OK);

    kvs_test_run_seqs(cm, kv, pool, seqs, n);

    for (s = 0; s < n; s++) {
        assert_int_equal(seqs[s].n_ids, seqs[s].n_total);

        if (ref[first + s] == NULL) {
            ref[first + s] = seqs[s].ids;
            ref_lg[first + s] = seqs[s].lg;
            seqs[s].ids = NULL;
            seqs[s].lg = NULL;

        } else {
            if (memcmp(ref[first + s], seqs[s].ids,
                       seqs[s].n_total * sizeof(int32_t)) != 0)
            {
                fail_msg("%s: sequence %u's ids differ from its run alone",
                         what, first + s);
            }

            rel = kvs_test_rel_err(seqs[s].lg, ref_lg[first + s],
                          (size_t) seq_gen[first + s] * cm->hp.n_vocab);

            if (rel >= 1e-4) {
                fail_msg("%s: sequence %u's logits differ from its run "
                         "alone: max rel err %g", what, first + s, rel);
            }
        }

        assert_int_equal(kvs_kv_table_release(&seqs[s].table, pool, &err),
                         KVS_OK);
        free(seqs[s].ids);
        free(seqs[s].lg);
    }

    kvs_test_pool_ok(pool);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
}


/* The logits of the last of ids[0..n) computed from scratch: a fresh
 * cache of one block, the whole sequence as one batch. */
static void
recompute(const kvs_cpu_model_t *cm, const int32_t *ids, uint32_t n,
    float *logits)
{
    uint32_t          i;
    kvs_err_t         err;
    kvs_cpu_kv_t     *kv;
    kvs_batch_tok_t  *toks;
    kvs_kv_pool_t    *pool;
    kvs_kv_table_t    table;
    kvs_batch_t       b;

    assert_int_equal(kvs_kv_pool_new(&pool, 1, 64, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, cm, 1, 64, &err), KVS_OK);
    memset(&table, 0, sizeof(table));
    assert_int_equal(kvs_kv_table_reserve(&table, pool, n, &err), KVS_OK);

    toks = calloc(n, sizeof(kvs_batch_tok_t));
    assert_non_null(toks);

    for (i = 0; i < n; i++) {
        toks[i].token = ids[i];
        toks[i].pos = i;
        toks[i].table = &table;
        toks[i].want_logits = i + 1 == n;
    }

    b.toks = toks;
    b.n = n;

    if (kvs_cpu_forward(cm, kv, &b, logits, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    free(toks);
    assert_int_equal(kvs_kv_table_release(&table, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
}


/*
 * (a): a prompt as one prefill, then N_DECODE greedy steps over blocks of
 * 16 (crossing a block border); after every step the logits equal the
 * recompute's.  Returns the worst max|a - b| / max|b| seen.
 */
static double
check_recompute(const kvs_cpu_model_t *cm)
{
    uint32_t          i, n, nv;
    int32_t           ids[N_PROMPT_A + N_DECODE];
    uint64_t          rng;
    float            *inc, *full;
    double            rel, worst;
    kvs_err_t         err;
    kvs_cpu_kv_t     *kv;
    kvs_batch_tok_t   toks[N_PROMPT_A];
    kvs_kv_pool_t    *pool;
    kvs_kv_table_t    table;
    kvs_batch_t       b;

    nv = cm->hp.n_vocab;
    inc = malloc(nv * sizeof(float));
    full = malloc(nv * sizeof(float));
    assert_non_null(inc);
    assert_non_null(full);

    assert_int_equal(kvs_kv_pool_new(&pool, 2, 16, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, cm, 2, 16, &err), KVS_OK);
    memset(&table, 0, sizeof(table));

    rng = 77;

    for (i = 0; i < N_PROMPT_A; i++) {
        ids[i] = (int32_t) (rng_next(&rng) % nv);
    }

    worst = 0.0;

    for (n = N_PROMPT_A; n < N_PROMPT_A + N_DECODE; n++) {
        assert_int_equal(kvs_kv_table_reserve(&table, pool, n, &err),
                         KVS_OK);

        /* the prompt in one batch the first time, then one token */
        b.n = 0;

        for (i = n == N_PROMPT_A ? 0 : n - 1; i < n; i++) {
            toks[b.n].token = ids[i];
            toks[b.n].pos = i;
            toks[b.n].table = &table;
            toks[b.n].want_logits = i + 1 == n;
            b.n++;
        }

        b.toks = toks;

        if (kvs_cpu_forward(cm, kv, &b, inc, &err) != KVS_OK) {
            fail_msg("%s", err.msg);
        }

        recompute(cm, ids, n, full);

        rel = kvs_test_rel_err(inc, full, nv);
        worst = rel > worst ? rel : worst;

        if (n < N_PROMPT_A + N_DECODE - 1) {
            ids[n] = kvs_test_argmax(inc, nv);
        }
    }

    assert_int_equal(kvs_kv_table_release(&table, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
    free(inc);
    free(full);

    return worst;
}


/* (a), (b) and (c) on one model. */
static void
check_model(const shape_t *sh, uint32_t dtype)
{
    char       what[96];
    double     rel;
    uint32_t   s, j, i, distinct;
    int32_t   *ref[N_SEQ], seen[N_SEQ * 32];
    float     *ref_lg[N_SEQ];
    model_t    md;

    static const uint32_t  chunks[2] = { NO_CHUNK, 4 };
    static const uint32_t  bts[3] = { 1, 16, 64 };
    static const uint32_t  others[2] = { 1, 7 };

    model_load(&md, sh, dtype);

    rel = check_recompute(md.cm);
    print_message("%-5s %-4s: incremental vs recompute max rel err %.3g\n",
                  sh->label, kvs_ggml_type_name(dtype), rel);
    assert_true(rel < 1e-4);

    /* every sequence alone, prompt in one step: the references */
    memset(ref, 0, sizeof(ref));
    memset(ref_lg, 0, sizeof(ref_lg));

    for (s = 0; s < N_SEQ; s++) {
        run_check(md.cm, s, 1, 16, NO_CHUNK, ref, ref_lg, "alone");
    }

    /* how varied the greedy ids are (the logits check covers the rest) */
    distinct = 0;

    for (s = 0; s < N_SEQ; s++) {
        for (j = seq_prompt[s]; j < seq_prompt[s] + seq_gen[s]; j++) {
            for (i = 0; i < distinct && seen[i] != ref[s][j]; i++) {
                /* void */
            }

            if (i == distinct) {
                seen[distinct++] = ref[s][j];
            }
        }
    }

    print_message("%-5s %-4s: %u distinct greedy ids over %d sequences\n",
                  sh->label, kvs_ggml_type_name(dtype), distinct, N_SEQ);

    /* (b) batched with 1 and 7 others, chunked prefill off and on; the
     * others start at sequence 0 so the pair is 0 and 1 */
    for (s = 0; s < 2; s++) {
        for (j = 0; j < 2; j++) {
            snprintf(what, sizeof(what), "%s %s: %u others, chunk %u",
                     sh->label, kvs_ggml_type_name(dtype), others[s],
                     chunks[j]);
            run_check(md.cm, 0, others[s] + 1, 16, chunks[j], ref, ref_lg,
                      what);
        }
    }

    /* (c) block sizes, all eight batched with chunks of 3 */
    for (j = 0; j < 3; j++) {
        snprintf(what, sizeof(what), "%s %s: blocks of %u", sh->label,
                 kvs_ggml_type_name(dtype), bts[j]);
        run_check(md.cm, 0, N_SEQ, bts[j], 3, ref, ref_lg, what);
    }

    /* and one token per step, the smallest block */
    run_check(md.cm, 2, 1, 1, 1, ref, ref_lg, "alone, one token a step");

    for (s = 0; s < N_SEQ; s++) {
        free(ref[s]);
        free(ref_lg[s]);
    }

    model_unload(&md);
}


static void
test_f32(void **state)
{
    uint32_t  i;

    for (i = 0; i < N_SHAPES; i++) {
        check_model(&shapes[i], KVS_GGML_F32);
    }
}


static void
test_f16(void **state)
{
    uint32_t  i;

    for (i = 0; i < N_SHAPES; i++) {
        check_model(&shapes[i], KVS_GGML_F16);
    }
}


/* BF16 everywhere, Q8_0 on the shapes whose widths are multiples of 32 */
static void
test_bf16_q8_0(void **state)
{
    check_model(&shapes[2], KVS_GGML_BF16);
    check_model(&shapes[0], KVS_GGML_BF16);
    check_model(&shapes[0], KVS_GGML_Q8_0);
    check_model(&shapes[1], KVS_GGML_Q8_0);
    check_model(&shapes[4], KVS_GGML_Q8_0);
    check_model(&shapes[7], KVS_GGML_Q8_0);
    check_model(&shapes[9], KVS_GGML_Q8_0);
}


/*
 * The same weights in F16 and Q8_0 give logits close to F32's (each
 * dtype's rounding error only), so a dequantization that garbles rows
 * cannot pass for a merely different model.  The seed is per dtype in
 * model_load, so the F32 model is written again with the F16 seed.
 */
static void
test_dtype_agree(void **state)
{
    static const uint32_t  types[3] = {
        KVS_GGML_F16, KVS_GGML_BF16, KVS_GGML_Q8_0
    };
    static const double    tol[3] = { 0.01, 0.05, 0.05 };

    uint32_t         t, i, nv;
    float           *ref, *got;
    double           rel;
    int32_t          ids[7] = { 1, 50, 200, 7, 99, 123, 260 };
    kvs_gen_spec_t   spec;
    model_t          md[2];

    ref = NULL;
    got = NULL;

    for (t = 0; t < 3; t++) {
        for (i = 0; i < 2; i++) {
            memset(&spec, 0, sizeof(spec));
            spec.dtype = i == 0 ? KVS_GGML_F32 : types[t];
            spec.seed = 4242;
            model_small(&md[i], &spec, "agree");
        }

        nv = md[0].cm->hp.n_vocab;

        if (ref == NULL) {
            ref = malloc(nv * sizeof(float));
            got = malloc(nv * sizeof(float));
            assert_non_null(ref);
            assert_non_null(got);
        }

        recompute(md[0].cm, ids, 7, ref);
        recompute(md[1].cm, ids, 7, got);

        rel = kvs_test_rel_err(got, ref, nv);
        print_message("%-4s vs F32 (same seed): max rel err %.3g\n",
                      kvs_ggml_type_name(types[t]), rel);
        assert_true(rel < tol[t]);
        /* and not bit-identical: the other dtype was really used */
        assert_true(rel > 0.0);

        model_unload(&md[0]);
        model_unload(&md[1]);
    }

    free(ref);
    free(got);
}


/* Three gemma3 models that differ only in which base turns which layer
 * (the windows, 64 positions, cut nothing here): 0: layers 0, 1 local
 * (base 1e4), 2 global (1e6); 1: every layer local (period 4 > 3
 * layers); 2: period 3 again but both bases 1e6. */
static void
test_rope_tables(void **state)
{
    static const uint32_t  period[3] = { 3, 4, 3 };
    static const double    base_swa[3] = { 1e4, 1e4, 1e6 };

    uint32_t         i, nv;
    float           *lg[3];
    int32_t          ids[7] = { 1, 50, 200, 7, 99, 123, 260 };
    kvs_gen_spec_t   spec;
    model_t          md;

    (void) state;

    for (i = 0; i < 3; i++) {
        memset(&spec, 0, sizeof(spec));
        spec.n_layer = 3;
        spec.dtype = KVS_GGML_F32;
        spec.tied = 1;
        spec.arch = KVS_ARCH_GEMMA3;
        spec.head_dim = 16;
        spec.n_swa = 64;
        spec.swa_pattern = period[i] + 1;
        spec.rope_base_swa = base_swa[i];
        spec.seed = 4343;
        model_small(&md, &spec, "rope");
        assert_int_equal(kvs_hparams_rope_swa(&md.cm->hp, 0), 1);
        assert_int_equal(kvs_hparams_rope_swa(&md.cm->hp, 2),
                         period[i] != 3);

        nv = md.cm->hp.n_vocab;
        lg[i] = malloc(nv * sizeof(float));
        assert_non_null(lg[i]);
        recompute(md.cm, ids, 7, lg[i]);
        model_unload(&md);
    }

    print_message("global layer's own base vs all local: %.3g, vs equal "
                  "bases: %.3g\n", kvs_test_rel_err(lg[1], lg[0], nv),
                  kvs_test_rel_err(lg[2], lg[0], nv));
    assert_true(kvs_test_rel_err(lg[1], lg[0], nv) > 1e-4);
    assert_true(kvs_test_rel_err(lg[2], lg[0], nv) > 1e-4);

    for (i = 0; i < 3; i++) {
        free(lg[i]);
    }
}


/* A matrix of a type kvserve does not compute with (here I32, which has
 * F32's size so the file stays consistent) is refused by name when the
 * model opens. */
static void
test_bad_type(void **state)
{
    int                        fd;
    char                       name[128];
    uint32_t                   ty;
    uint64_t                   at;
    const char                *path;
    kvs_err_t                  err;
    kvs_gen_spec_t             spec;
    const kvs_gguf_tensor_t   *t;
    model_t                    md;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "test-bad");
    spec.n_layer = 1;
    spec.n_embd = 32;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    spec.n_ff = 32;
    spec.n_vocab = 270;
    spec.n_ctx = 64;
    spec.dtype = KVS_GGML_F32;
    spec.seed = 9;

    snprintf(name, sizeof(name), "test_cpu_models.%d.bad.gguf",
             (int) getpid());
    path = kvs_test_tmp(name);

    assert_int_equal(kvs_gen_write(&spec, path, &err), KVS_OK);
    assert_int_equal(kvs_model_open(&md.m, path, &err), KVS_OK);
    t = kvs_gguf_find_tensor(md.m->gguf, "blk.0.attn_k.weight");
    assert_non_null(t);
    assert_int_equal(t->type, KVS_GGML_F32);
    /* the type field is the u32 just before the offset field */
    at = t->offset_at - 4;
    kvs_model_close(md.m);

    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    ty = KVS_GGML_I32;
    assert_int_equal(pwrite(fd, &ty, 4, (off_t) at), 4);
    close(fd);

    /* the model layer refuses it first, by name, so that nginx -t does
     * (test_cpu_quant checks the backend's own refusal) */
    assert_int_equal(kvs_model_open(&md.m, path, &err), KVS_EINVAL);
    unlink(path);
    assert_null(md.m);
    assert_non_null(strstr(err.msg, "blk.0.attn_k.weight"));
    assert_non_null(strstr(err.msg, "I32"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16_q8_0),
        cmocka_unit_test(test_dtype_agree),
        cmocka_unit_test(test_bad_type),
        cmocka_unit_test(test_rope_tables),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
