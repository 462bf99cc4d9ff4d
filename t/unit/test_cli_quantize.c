/*
 * test_cli_quantize: `kvserve quantize` and its mixes (src/gen/
 * kvs_quantize.c).
 *
 *   - every mix, on a generated 8-layer model whose rows are 256 wide
 *     (every block fits) and whose GQA ratio is 2: each tensor of the
 *     output has the type written out here, independently of the mix
 *     table (1-D tensors stay F32; output.weight Q6_K except in q8_0;
 *     attn_v / ffn_down of Q4_K_M and Q5_K_M Q6_K on layers 0, 3, 6, 7,
 *     llama.cpp's use_more_bits for 8 layers; Q4_K_S's first four attn_v
 *     and first ffn_down Q5_K; Q3_K_M's attn_v Q5_K on layers 0-1, Q4_K
 *     after, attn_output and ffn_down Q4_K; Q2_K's attn_v, attn_output
 *     and ffn_down Q3_K; Q3_K_L's Q5_K; IQ4_NL's and IQ4_XS's first
 *     ffn_down Q5_K), general.file_type is llama.cpp's,
 *     and the output opens, loads on the CPU backend and generates (a
 *     prompt and greedy steps, finite logits) - for a mix whose types the
 *     table cannot make yet, kvs_quantize_file refuses it by name and
 *     writes nothing;
 *   - a tied model (no output.weight): token_embd takes the output's
 *     Q6_K, as llama.cpp's llama-quantize gives it;
 *   - the block fallback on 64-wide rows: Q4_K -> Q5_0, Q6_K -> Q8_0,
 *     Q2_K / Q3_K / IQ4_XS -> IQ4_NL, as llama.cpp falls back;
 *   - the tool (KVS_CLI): an unknown --type exits 2 listing the mixes,
 *     a good one exits 0 and writes a model kvs_model_open takes.
 */

#include "kvs_test_cpu.h"
#include "kvs_test_cli.h"

#include <math.h>

#include "gen/kvs_gen.h"
#include "gen/kvs_quantize.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_quant.h"

#define N_LAYER  8


/* The type the test expects for matrix `suffix` of layer l (-1 for the
 * global ones) in mix `name`: written out per mix, not read from the
 * mix table. */
static uint32_t
expect(const char *name, const char *suffix, int l)
{
    int       more, attn_v, down, attn_o, out, embd;
    uint32_t  base;

    base = kvs_quant_mix(name)->base;
    more = l == 0 || l == 3 || l == 6 || l == 7;
    attn_v = strcmp(suffix, "attn_v.weight") == 0;
    down = strcmp(suffix, "ffn_down.weight") == 0;
    attn_o = strcmp(suffix, "attn_output.weight") == 0;
    out = strcmp(suffix, "output.weight") == 0;
    embd = strcmp(suffix, "token_embd.weight") == 0;

    if (out) {
        /* llama.cpp's rule: Q6_K, but Q8_0 and the unquantized file
         * types keep their base for the classifier */
        return strcmp(name, "q8_0") == 0 || base == KVS_GGML_F32
               || base == KVS_GGML_F16 || base == KVS_GGML_BF16
               ? base : KVS_GGML_Q6_K;
    }

    if (embd || l < 0) {
        return base;
    }

    if (strcmp(name, "q4_k_m") == 0 || strcmp(name, "q5_k_m") == 0) {
        return (attn_v || down) && more ? KVS_GGML_Q6_K : base;
    }

    if (strcmp(name, "q4_k_s") == 0) {
        return (attn_v && l < 4) || (down && l < 1) ? KVS_GGML_Q5_K : base;
    }

    if (strcmp(name, "q3_k_m") == 0) {
        if (attn_v) {
            return l < 2 ? KVS_GGML_Q5_K : KVS_GGML_Q4_K;
        }
        return attn_o || down ? KVS_GGML_Q4_K : base;
    }

    if (strcmp(name, "q3_k_l") == 0) {
        return attn_v || attn_o || down ? KVS_GGML_Q5_K : base;
    }

    if (strcmp(name, "iq4_nl") == 0 || strcmp(name, "iq4_xs") == 0) {
        /* without an importance matrix: the first eighth's ffn_down
         * Q5_K; attn_v only from a GQA ratio of 4 */
        return down && l < 1 ? KVS_GGML_Q5_K : base;
    }

    if (strcmp(name, "q2_k") == 0) {
        /* GQA 2: attn_v Q3_K (Q4_K from a ratio of 4) */
        return attn_v || attn_o || down ? KVS_GGML_Q3_K : base;
    }

    /* q4_0 .. q5_1, q8_0, q3_k_s, q5_k_s, q6_k */
    return base;
}


static void
gen(const char *path, uint32_t n_embd, uint32_t n_ff, uint32_t n_layer,
    int tied)
{
    kvs_err_t       err;
    kvs_gen_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "test-quantize");
    spec.n_layer = n_layer;
    spec.n_embd = n_embd;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = n_ff;
    spec.n_vocab = 300;
    spec.n_ctx = 64;
    spec.dtype = KVS_GGML_F32;
    spec.seed = 77;
    spec.tied = tied;

    if (kvs_gen_write(&spec, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }
}


/* The model at path loads on the CPU backend and generates. */
static void
generates(const kvs_model_t *m)
{
    float             lg[4 * 300];
    int32_t           ids[12];
    uint32_t          i;
    kvs_err_t         err;
    kvs_cpu_kv_t     *kv;
    kvs_kv_pool_t    *pool;
    kvs_test_seq_t    seq;
    kvs_cpu_model_t  *cm;

    if (kvs_cpu_model_new(&cm, m, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    memset(&seq, 0, sizeof(seq));
    seq.n_total = 12;
    seq.ids = ids;
    seq.lg = lg;
    seq.n_prompt = 8;
    seq.chunk = 8;

    for (i = 0; i < 8; i++) {
        ids[i] = (int32_t) (i * 31 % 300);
    }

    seq.n_ids = 8;

    assert_int_equal(kvs_kv_pool_new(&pool, 1, 16, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_new(&kv, cm, 1, 16, &err), KVS_OK);
    kvs_test_run_seqs(cm, kv, pool, &seq, 1);
    assert_int_equal(seq.n_ids, 12);

    for (i = 0; i < 4 * 300; i++) {
        assert_true(isfinite(lg[i]));
    }

    assert_int_equal(kvs_kv_table_release(&seq.table, pool, &err), KVS_OK);
    kvs_test_pool_ok(pool);
    kvs_cpu_kv_free(kv);
    kvs_kv_pool_free(pool);
    kvs_cpu_model_free(cm);
}


/* Does the table make every type `mix` asks for on 256-wide rows? */
static int
makeable(const kvs_quant_mix_t *mix)
{
    uint32_t                t[6];
    size_t                  i;
    const kvs_quant_type_t *q;

    t[0] = mix->base;
    t[1] = mix->output;
    t[2] = mix->attn_v.type;
    t[3] = mix->attn_v.other;
    t[4] = mix->attn_output.type;
    t[5] = mix->ffn_down.type;

    for (i = 0; i < 6; i++) {
        if (t[i] == KVS_MIX_BASE) {
            continue;
        }

        q = kvs_quant_type(t[i]);
        if (q == NULL || q->quantize == NULL) {
            return 0;
        }
    }

    return 1;
}


static void
test_mixes(void **state)
{
    char                      in[256], out[400], names[256], *p, *e;
    char                      nm[64], suffix[64];
    int                       l, n_done;
    uint32_t                  ft;
    uint64_t                  i;
    kvs_err_t                 err;
    kvs_model_t              *m;
    const kvs_quant_mix_t    *mix;
    const kvs_gguf_tensor_t  *t;

    snprintf(in, sizeof(in), "%s",
             kvs_test_tmp("test_cli_quantize.in.gguf"));
    gen(in, 256, 256, N_LAYER, 0);

    kvs_quant_mix_names(names, sizeof(names));
    n_done = 0;

    for (p = names; *p != '\0'; p = *e ? e + 2 : e) {
        e = strchr(p, ',');
        e = e ? e : p + strlen(p);
        snprintf(nm, sizeof(nm), "%.*s", (int) (e - p), p);
        mix = kvs_quant_mix(nm);
        assert_non_null(mix);

        snprintf(out, sizeof(out), "%s.%s", in, nm);

        if (!makeable(mix)) {
            assert_int_not_equal(kvs_quantize_file(in, out, mix, &err),
                                 KVS_OK);
            assert_non_null(strstr(err.msg, "cannot make"));
            assert_int_equal(access(out, F_OK), -1);
            print_message("%-7s refused: %s\n", nm, err.msg);
            continue;
        }

        if (kvs_quantize_file(in, out, mix, &err) != KVS_OK
            || kvs_model_open(&m, out, &err) != KVS_OK)
        {
            fail_msg("%s: %s", nm, err.msg);
        }

        unlink(out);

        for (i = 0; i < kvs_gguf_n_tensors(m->gguf); i++) {
            t = kvs_gguf_tensor_at(m->gguf, i);
            l = -1;
            snprintf(suffix, sizeof(suffix), "%.*s", (int) t->name.len,
                     t->name.ptr);

            if (sscanf(suffix, "blk.%d.%63s", &l, suffix) != 2) {
                l = -1;
            }

            if (t->n_dims == 1) {
                assert_int_equal(t->type, KVS_GGML_F32);
                continue;
            }

            if (t->type != expect(nm, suffix, l)) {
                fail_msg("%s: %.*s is %s, expected %s", nm,
                         (int) t->name.len, t->name.ptr,
                         kvs_ggml_type_name(t->type),
                         kvs_ggml_type_name(expect(nm, suffix, l)));
            }
        }

        assert_int_equal(kvs_gguf_get_u32(m->gguf, "general.file_type",
                                          &ft, &err), KVS_OK);
        assert_int_equal(ft, mix->ftype);

        generates(m);
        kvs_model_close(m);
        n_done++;
    }

    unlink(in);
    print_message("%d mixes written and run\n", n_done);
    /* q8_0 at least, whatever the table holds */
    assert_true(n_done >= 1);
}


/* The type of an F32 matrix in mix (kvs_quant_mix_type's arguments). */
static uint32_t
mix_type(const kvs_quant_mix_t *mix, const char *name, uint32_t n_dims,
    uint64_t ne0, uint32_t n_layer, uint32_t n_gqa, int tied)
{
    return kvs_quant_mix_type(mix, name, n_dims, ne0, KVS_GGML_F32, n_layer,
                              n_gqa, tied);
}


/* A tied model (no output.weight): token_embd, the output matrix too,
 * gets the output's Q6_K in Q4_0 and IQ4_XS, as llama-quantize gives it,
 * and the file still loads and generates. */
static void
test_tied(void **state)
{
    char                      in[256], out[300];
    size_t                    k;
    uint64_t                  i;
    kvs_err_t                 err;
    kvs_model_t              *m;
    const kvs_gguf_tensor_t  *t, *embd;
    static const char        *mixes[] = { "q4_0", "iq4_xs" };

    snprintf(in, sizeof(in), "%s", kvs_test_tmp("test_cli_quantize.tied"));
    gen(in, 256, 256, 2, 1);

    for (k = 0; k < sizeof(mixes) / sizeof(mixes[0]); k++) {
        snprintf(out, sizeof(out), "%s.%s", in, mixes[k]);

        if (kvs_quantize_file(in, out, kvs_quant_mix(mixes[k]), &err)
            != KVS_OK
            || kvs_model_open(&m, out, &err) != KVS_OK)
        {
            fail_msg("%s: %s", mixes[k], err.msg);
        }

        unlink(out);
        embd = NULL;

        for (i = 0; i < kvs_gguf_n_tensors(m->gguf); i++) {
            t = kvs_gguf_tensor_at(m->gguf, i);
            assert_false(kvs_gguf_str_eq(t->name, "output.weight"));
            if (kvs_gguf_str_eq(t->name, "token_embd.weight")) {
                embd = t;
            } else if (kvs_gguf_str_eq(t->name, "blk.0.attn_q.weight")) {
                assert_int_equal(t->type, kvs_quant_mix(mixes[k])->base);
            }
        }

        assert_non_null(embd);
        assert_int_equal(embd->type, KVS_GGML_Q6_K);

        generates(m);
        kvs_model_close(m);
    }

    unlink(in);
}


/* Rows of 64: the 256-element blocks fall back as llama.cpp's do. */
static void
test_fallback(void **state)
{
    const kvs_quant_mix_t  *km, *k2, *xs;

    km = kvs_quant_mix("Q4_K_M");
    k2 = kvs_quant_mix("q2_k");
    xs = kvs_quant_mix("iq4_xs");
    assert_non_null(km);
    assert_non_null(k2);
    assert_non_null(xs);
    assert_null(kvs_quant_mix("q4_k_x"));

    assert_int_equal(mix_type(km, "blk.1.attn_q.weight", 2, 64, 2, 2, 0),
                     KVS_GGML_Q5_0);
    assert_int_equal(mix_type(km, "output.weight", 2, 64, 2, 2, 0),
                     KVS_GGML_Q8_0);
    assert_int_equal(mix_type(k2, "blk.0.ffn_up.weight", 2, 64, 2, 2, 0),
                     KVS_GGML_IQ4_NL);
    assert_int_equal(mix_type(xs, "token_embd.weight", 2, 64, 2, 2, 0),
                     KVS_GGML_IQ4_NL);
    /* not even 32 wide: F16 */
    assert_int_equal(mix_type(km, "blk.0.ffn_up.weight", 2, 48, 2, 2, 0),
                     KVS_GGML_F16);
    /* 256 wide: the mix's own */
    assert_int_equal(mix_type(km, "blk.0.ffn_up.weight", 2, 256, 2, 2, 0),
                     KVS_GGML_Q4_K);
    /* GQA 4: Q2_K's attn_v is Q4_K, IQ4_XS's Q5_K */
    assert_int_equal(mix_type(k2, "blk.5.attn_v.weight", 2, 256, 8, 4, 0),
                     KVS_GGML_Q4_K);
    assert_int_equal(mix_type(xs, "blk.5.attn_v.weight", 2, 256, 8, 4, 0),
                     KVS_GGML_Q5_K);
    /* tied: token_embd is the output matrix, of the output's type (and
     * its fallback on 64-wide rows); untied it keeps the base */
    assert_int_equal(mix_type(xs, "token_embd.weight", 2, 256, 2, 2, 1),
                     KVS_GGML_Q6_K);
    assert_int_equal(mix_type(xs, "token_embd.weight", 2, 256, 2, 2, 0),
                     KVS_GGML_IQ4_XS);
    assert_int_equal(mix_type(km, "token_embd.weight", 2, 64, 2, 2, 1),
                     KVS_GGML_Q8_0);
    assert_int_equal(mix_type(kvs_quant_mix("q8_0"), "token_embd.weight", 2,
                              256, 2, 2, 1), KVS_GGML_Q8_0);
    /* a 1-D tensor keeps its type */
    assert_int_equal(kvs_quant_mix_type(km, "blk.0.attn_norm.weight", 1, 256,
                                        KVS_GGML_F16, 2, 2, 0), KVS_GGML_F16);
}


/* Runs "$KVS_CLI quantize ARGS 2>&1" into out[size]; its exit status. */
static int
run_cli(const char *args, char *out, size_t size)
{
    char  a[4096];

    snprintf(a, sizeof(a), "quantize %s", args);

    return kvs_test_cli_run_buf(a, out, size);
}


/* A file's bytes, whole, into a test_malloc'ed buffer. */
static uint8_t *
slurp(const char *path, size_t *len)
{
    FILE     *f;
    uint8_t  *b;

    f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    *len = (size_t) ftell(f);
    rewind(f);
    b = test_malloc(*len + 1);
    assert_int_equal(fread(b, 1, *len, f), *len);
    fclose(f);

    return b;
}


/* The thread count changes no byte of the output: tasks are whole rows,
 * each written to its own place. */
static void
test_threads(void **state)
{
    static const char  *mixes[] = { "q4_k_m", "iq4_xs", "q5_1", "q2_k" };

    char                    in[256], a[300], b[300];
    size_t                  i, la, lb;
    uint8_t                *ba, *bb;
    kvs_err_t               err;
    const kvs_quant_mix_t  *mix;

    (void) state;

    snprintf(in, sizeof(in), "%s", kvs_test_tmp("test_cli_quantize.t.gguf"));
    snprintf(a, sizeof(a), "%s.1", in);
    snprintf(b, sizeof(b), "%s.3", in);
    gen(in, 256, 512, 2, 0);

    for (i = 0; i < sizeof(mixes) / sizeof(mixes[0]); i++) {
        mix = kvs_quant_mix(mixes[i]);
        assert_non_null(mix);

        if (kvs_quantize_file_threads(in, a, mix, 1, &err) != KVS_OK
            || kvs_quantize_file_threads(in, b, mix, 3, &err) != KVS_OK)
        {
            fail_msg("%s: %s", mixes[i], err.msg);
        }

        ba = slurp(a, &la);
        bb = slurp(b, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(ba, bb, la);
        test_free(ba);
        test_free(bb);
    }

    unlink(a);
    unlink(b);
    unlink(in);
}


static void
test_cli(void **state)
{
    char          in[256], out[300], args[1024], text[4096];
    const char   *cli;
    kvs_err_t     err;
    kvs_model_t  *m;

    cli = getenv("KVS_CLI");
    if (cli == NULL || access(cli, X_OK) != 0) {
        print_message("SKIP: KVS_CLI is not an executable (%s)\n",
                      cli != NULL ? cli : "unset");
        skip();
    }

    snprintf(in, sizeof(in), "%s", kvs_test_tmp("test_cli_quantize.c.gguf"));
    snprintf(out, sizeof(out), "%s.q8", in);
    gen(in, 64, 128, 2, 0);

    snprintf(args, sizeof(args), "'%s' '%s' --type q4_k_z", in, out);
    assert_int_equal(run_cli(args, text, sizeof(text)), 2);
    assert_non_null(strstr(text, "\"q4_k_z\" is not one of f32, f16, "
                                "bf16, q4_0"));
    assert_non_null(strstr(text, "iq4_xs"));
    assert_int_equal(access(out, F_OK), -1);

    snprintf(args, sizeof(args), "'%s' '%s'", in, out);
    assert_int_equal(run_cli(args, text, sizeof(text)), 2);

    snprintf(args, sizeof(args), "'%s' '%s' --type Q8_0", in, out);
    if (run_cli(args, text, sizeof(text)) != 0) {
        fail_msg("kvserve quantize: %s", text);
    }

    if (kvs_model_open(&m, out, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(kvs_gguf_find_tensor(m->gguf,
                                          "blk.1.ffn_down.weight")->type,
                     KVS_GGML_Q8_0);
    kvs_model_close(m);
    unlink(out);
    unlink(in);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_mixes),
        cmocka_unit_test(test_tied),
        cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_cli),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
