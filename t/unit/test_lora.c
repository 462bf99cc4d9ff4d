/*
 * test_lora: LoRA adapters (src/model/kvs_lora.c) and their tooling
 * (src/gen/kvs_gen_lora.c).
 *
 *   - gen-lora on generated llama and qwen3 bases, ranks 8 and 64: the
 *     adapter opens against its base with the pairs, ranks, shapes and
 *     scale (alpha / rank) asked for, in llama.cpp's orientation (lora_a
 *     [n_in, r], lora_b [r, n_out] in ggml order); the same seed gives
 *     the same bytes, another seed other bytes;
 *   - merge-lora: every adapted matrix of the merged file equals
 *     W + scale * B A computed here from the files' values, every other
 *     tensor is byte-equal to the base's, and W' x equals W x plus
 *     kvs_lora_apply_row(x) within 1e-5 relative;
 *   - mismatches refused naming adapter tensor and shapes: another
 *     base's width, another architecture, a target the base lacks (a
 *     phi3 base's attn_q), a layer past the base's;
 *   - malformed adapters, each refused with a message naming what is
 *     wrong: general.type not "adapter", adapter.type not "lora", alpha
 *     a string, NaN alpha, a missing lora_b, lora_a transposed, a rank of
 *     0, three dimensions, a tensor name we cannot apply (output.weight),
 *     a non-finite value;
 *   - truncation of an adapter at every offset, parsed from a malloc()ed
 *     copy of exactly that length: an error, never a crash (ASan);
 *   - the tool (KVS_CLI): gen-lora, `info` of the adapter on its own and
 *     with --base (exit 0, the pairs listed), with a base of another
 *     width (exit 1 naming the tensor and both shapes), merge-lora.
 */

#include "kvs_test_cli.h"

#include "gen/kvs_gen.h"
#include "gen/kvs_gen_lora.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"
#include "model/kvs_quant.h"

#define ALL_TARGETS  0x7fu            /* q k v o gate up down */


/* Writes a generated base into path[256] (a copy: kvs_test_tmp()'s slots
 * are reused) and returns path. */
static const char *
base_path(char *path, const char *tag, kvs_arch_t arch, uint32_t n_embd)
{
    char            name[64];
    kvs_err_t       err;
    kvs_gen_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "lora-base");
    spec.arch = arch;
    spec.n_layer = 2;
    spec.n_embd = n_embd;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 96;
    spec.n_vocab = 300;
    spec.n_ctx = 128;
    spec.dtype = KVS_GGML_F32;
    spec.seed = 11;

    snprintf(name, sizeof(name), "lora-base-%s.%d.gguf", tag, (int) getpid());
    snprintf(path, 256, "%s", kvs_test_tmp(name));

    if (kvs_gen_write(&spec, path, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }

    return path;
}


static void
gen_adapter(const char *base, uint32_t rank, uint32_t targets, uint64_t seed,
    const char *out)
{
    kvs_err_t            err;
    kvs_gen_lora_spec_t  spec;

    memset(&spec, 0, sizeof(spec));
    spec.rank = rank;
    spec.targets = targets;
    spec.seed = seed;
    spec.alpha = 2.0f * (float) rank;
    spec.strength = 0.5f;

    if (kvs_gen_lora_write(base, &spec, out, &err) != KVS_OK) {
        fail_msg("gen-lora %s: %s", out, err.msg);
    }
}


static void
check_merge(const char *base, const char *adapter, const char *merged)
{
    float                    *x, *y, *ym, *tmp, *wf, ref;
    uint32_t                  i, r;
    uint64_t                  o, k;
    kvs_err_t                 err;
    kvs_lora_t               *l;
    kvs_model_t              *b, *m;
    const kvs_lora_mat_t     *mt;
    const kvs_gguf_tensor_t  *tb, *tm;

    if (kvs_gen_lora_merge(base, adapter, merged, &err) != KVS_OK) {
        fail_msg("merge: %s", err.msg);
    }

    assert_int_equal(kvs_model_open(&b, base, &err), KVS_OK);
    assert_int_equal(kvs_model_open(&m, merged, &err), KVS_OK);
    assert_int_equal(kvs_lora_open(&l, adapter, b, &err), KVS_OK);

    for (i = 0; i < l->n_mat; i++) {
        mt = &l->mat[i];
        tb = kvs_gguf_find_tensor(b->gguf, mt->name);
        tm = kvs_gguf_find_tensor(m->gguf, mt->name);
        assert_non_null(tb);
        assert_non_null(tm);
        assert_int_equal(tm->type, KVS_GGML_F32);
        assert_int_equal(tm->ne[0], mt->n_in);
        assert_int_equal(tm->ne[1], mt->n_out);

        /* W' = W + scale B A, entry by entry */
        wf = (float *) tm->data;
        for (o = 0; o < mt->n_out; o += 7) {
            for (k = 0; k < mt->n_in; k += 5) {
                ref = ((const float *) tb->data)[o * mt->n_in + k];
                for (r = 0; r < mt->rank; r++) {
                    ref += mt->scale * mt->b[o * mt->rank + r]
                           * mt->a[(uint64_t) r * mt->n_in + k];
                }
                assert_true(fabsf(ref - wf[o * mt->n_in + k]) <= 1e-6f);
            }
        }

        /* W' x == W x + apply_row(x) */
        x = malloc(mt->n_in * sizeof(float));
        y = calloc(mt->n_out, sizeof(float));
        ym = calloc(mt->n_out, sizeof(float));
        tmp = malloc(mt->rank * sizeof(float));
        assert_true(x != NULL && y != NULL && ym != NULL && tmp != NULL);

        for (k = 0; k < mt->n_in; k++) {
            x[k] = sinf((float) (k + 3 * i));
        }

        for (o = 0; o < mt->n_out; o++) {
            for (k = 0; k < mt->n_in; k++) {
                y[o] += ((const float *) tb->data)[o * mt->n_in + k] * x[k];
                ym[o] += wf[o * mt->n_in + k] * x[k];
            }
        }

        kvs_lora_apply_row(mt, x, y, tmp);

        for (o = 0; o < mt->n_out; o++) {
            assert_true(fabsf(y[o] - ym[o])
                        <= 1e-5f * (1.0f + fabsf(ym[o])));
        }

        free(x);
        free(y);
        free(ym);
        free(tmp);
    }

    /* the rest of the file is the base's: a norm, the embedding */
    tb = kvs_gguf_find_tensor(b->gguf, "token_embd.weight");
    tm = kvs_gguf_find_tensor(m->gguf, "token_embd.weight");
    assert_true(tb != NULL && tm != NULL && tb->nbytes == tm->nbytes);
    assert_memory_equal(tb->data, tm->data, tb->nbytes);
    tb = kvs_gguf_find_tensor(b->gguf, "blk.1.ffn_norm.weight");
    tm = kvs_gguf_find_tensor(m->gguf, "blk.1.ffn_norm.weight");
    assert_true(tb != NULL && tm != NULL && tb->nbytes == tm->nbytes);
    assert_memory_equal(tb->data, tm->data, tb->nbytes);

    kvs_lora_close(l);
    kvs_model_close(m);
    kvs_model_close(b);
    unlink(merged);
}


static void
gen_and_check(kvs_arch_t arch, const char *tag, uint32_t rank)
{
    char           an[64], a2n[64], mn[64], bp[256];
    size_t         la = 0, lb = 0;
    uint8_t       *ba, *bb;
    uint32_t       i, t, seen;
    const char    *base, *ap, *a2p, *mp;
    kvs_err_t      err;
    kvs_lora_t    *l;
    kvs_model_t   *b;

    base = base_path(bp, tag, arch, 64);
    snprintf(an, sizeof(an), "lora-%s-a.%d.gguf", tag, (int) getpid());
    snprintf(a2n, sizeof(a2n), "lora-%s-a2.%d.gguf", tag, (int) getpid());
    snprintf(mn, sizeof(mn), "lora-%s-m.%d.gguf", tag, (int) getpid());
    ap = kvs_test_tmp(an);
    a2p = kvs_test_tmp(a2n);
    mp = kvs_test_tmp(mn);

    gen_adapter(base, rank, ALL_TARGETS, 5, ap);

    assert_int_equal(kvs_model_open(&b, base, &err), KVS_OK);
    if (kvs_lora_open(&l, ap, b, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }

    assert_string_equal(l->arch, b->hp.arch);
    assert_int_equal(l->n_mat, 2 * 7);
    assert_int_equal(l->rank_max, rank);
    assert_int_equal(l->n_layer_max, 2);
    assert_true(l->alpha == 2.0f * (float) rank);

    seen = 0;
    for (i = 0; i < l->n_mat; i++) {
        assert_int_equal(l->mat[i].rank, rank);
        assert_true(l->mat[i].scale == 2.0f);
        seen |= 1u << (l->mat[i].target + 8 * l->mat[i].layer);
    }
    assert_int_equal(seen, ALL_TARGETS | (ALL_TARGETS << 8));

    for (t = 0; t < 7; t++) {
        assert_non_null(kvs_lora_find(l, 1, (kvs_lora_target_t) t));
    }
    assert_null(kvs_lora_find(l, 2, KVS_LORA_Q));
    assert_null(kvs_lora_find(l, 0, KVS_LORA_QKV));

    /* shapes are W's: q is [n_embd -> q_width], down [n_ff -> n_embd] */
    assert_int_equal(kvs_lora_find(l, 0, KVS_LORA_Q)->n_in, b->hp.n_embd);
    assert_int_equal(kvs_lora_find(l, 0, KVS_LORA_Q)->n_out, b->hp.q_width);
    assert_int_equal(kvs_lora_find(l, 0, KVS_LORA_K)->n_out, b->hp.k_width);
    assert_int_equal(kvs_lora_find(l, 0, KVS_LORA_DOWN)->n_in, b->hp.n_ff);
    assert_int_equal(kvs_lora_find(l, 0, KVS_LORA_DOWN)->n_out,
                     b->hp.n_embd);
    kvs_lora_close(l);
    kvs_model_close(b);

    /* on its own too */
    assert_int_equal(kvs_lora_open(&l, ap, NULL, &err), KVS_OK);
    assert_int_equal(l->n_mat, 14);
    kvs_lora_close(l);

    /* determinism */
    gen_adapter(base, rank, ALL_TARGETS, 5, a2p);
    ba = kvs_test_slurp(ap, &la);
    bb = kvs_test_slurp(a2p, &lb);
    assert_true(ba != NULL && bb != NULL && la == lb);
    assert_memory_equal(ba, bb, la);
    free(bb);
    gen_adapter(base, rank, ALL_TARGETS, 6, a2p);
    bb = kvs_test_slurp(a2p, &lb);
    assert_true(bb != NULL && la == lb && memcmp(ba, bb, la) != 0);
    free(ba);
    free(bb);

    check_merge(base, ap, mp);

    unlink(ap);
    unlink(a2p);
    unlink(base);
}


static void
test_gen_llama(void **state)
{
    gen_and_check(KVS_ARCH_LLAMA, "llama8", 8);
    gen_and_check(KVS_ARCH_LLAMA, "llama64", 64);
}


static void
test_gen_qwen(void **state)
{
    gen_and_check(KVS_ARCH_QWEN3, "qwen8", 8);
    gen_and_check(KVS_ARCH_QWEN3, "qwen64", 64);
}


static void
expect_refusal(const char *adapter, const kvs_model_t *b, int code,
    const char *const *words)
{
    kvs_err_t    err;
    kvs_lora_t  *l;

    l = NULL;
    kvs_err_clear(&err);
    if (kvs_lora_open(&l, adapter, b, &err) == KVS_OK) {
        kvs_lora_close(l);
        fail_msg("%s: opened", adapter);
    }

    if (code != 0) {
        assert_int_equal(err.code, code);
    }

    for (; *words != NULL; words++) {
        if (strstr(err.msg, *words) == NULL) {
            fail_msg("\"%s\" does not name \"%s\"", err.msg, *words);
        }
    }
}


static void
test_mismatch(void **state)
{
    char          an[64], p64[256], p32[256], pq[256], pphi[256];
    const char   *b64, *b32, *bq, *bphi, *ap;
    kvs_err_t     err;
    kvs_model_t  *m32, *mq, *mphi;
    kvs_gen_lora_spec_t  spec;

    b64 = base_path(p64, "mm64", KVS_ARCH_LLAMA, 64);
    b32 = base_path(p32, "mm32", KVS_ARCH_LLAMA, 32);
    bq = base_path(pq, "mmq", KVS_ARCH_QWEN3, 64);
    bphi = base_path(pphi, "mmphi", KVS_ARCH_PHI3, 64);

    snprintf(an, sizeof(an), "adapter-mm.%d.gguf", (int) getpid());
    ap = kvs_test_tmp(an);
    gen_adapter(b64, 8, ALL_TARGETS, 1, ap);

    assert_int_equal(kvs_model_open(&m32, b32, &err), KVS_OK);
    assert_int_equal(kvs_model_open(&mq, bq, &err), KVS_OK);
    assert_int_equal(kvs_model_open(&mphi, bphi, &err), KVS_OK);

    expect_refusal(ap, m32, KVS_EINVAL, (const char *const[]) {
        "blk.0.attn_q.weight.lora_a", "[64, 8]", "[8, 64]",
        "[32, 32]", NULL });
    expect_refusal(ap, mq, KVS_EINVAL, (const char *const[]) {
        "architecture", "llama", "qwen3", NULL });
    expect_refusal(ap, mphi, 0, (const char *const[]) {
        "architecture", "phi3", NULL });

    /* a target the base has no matrix for */
    memset(&spec, 0, sizeof(spec));
    spec.rank = 4;
    spec.targets = 1u << KVS_LORA_Q;
    spec.alpha = 4;
    spec.strength = 0.5f;
    assert_int_equal(kvs_gen_lora_write(bphi, &spec, ap, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "blk.0.attn_q.weight"));
    assert_int_equal(kvs_gen_lora_targets("q,x", &spec.targets, &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "\"x\""));
    assert_int_equal(kvs_gen_lora_targets("q,up,down", &spec.targets, &err),
                     KVS_OK);
    assert_int_equal(spec.targets, (1u << KVS_LORA_Q) | (1u << KVS_LORA_UP)
                                   | (1u << KVS_LORA_DOWN));

    /* merge refuses a mismatched adapter and writes nothing */
    gen_adapter(b64, 8, ALL_TARGETS, 1, ap);
    unlink(kvs_test_tmp("lora-mm-merged.gguf"));
    assert_int_not_equal(kvs_gen_lora_merge(b32, ap,
                             kvs_test_tmp("lora-mm-merged.gguf"), &err),
                         KVS_OK);
    assert_int_not_equal(access(kvs_test_tmp("lora-mm-merged.gguf"), F_OK),
                         0);

    kvs_model_close(m32);
    kvs_model_close(mq);
    kvs_model_close(mphi);
    unlink(ap);
    unlink(b64);
    unlink(b32);
    unlink(bq);
    unlink(bphi);
}


/* A hand-made adapter: one pair for blk.0.attn_q.weight (64 -> 64). */
typedef struct {
    const char  *gtype;               /* NULL: absent */
    const char  *atype;
    int          alpha_str;           /* alpha written as a string */
    float        alpha;
    int          no_b;
    int          transposed;
    uint32_t     rank;
    int          three_dims;
    const char  *stem;                /* default blk.0.attn_q.weight */
    int          nan_value;
} bad_t;


static void
write_bad(const char *path, const bad_t *bd)
{
    char                name[320];
    float              *a, *b;
    uint32_t            r;
    uint64_t            ne[3], i;
    kvs_err_t           err;
    const char         *stem;
    kvs_gguf_writer_t  *w;

    r = bd->rank;
    stem = bd->stem != NULL ? bd->stem : "blk.0.attn_q.weight";
    a = calloc(64 * (r ? r : 1), sizeof(float));
    b = calloc(64 * (r ? r : 1), sizeof(float));
    assert_true(a != NULL && b != NULL);
    for (i = 0; i < 64 * (uint64_t) (r ? r : 1); i++) {
        a[i] = 0.01f * (float) (i % 13);
        b[i] = 0.02f * (float) (i % 7);
    }
    if (bd->nan_value) {
        b[3] = NAN;
    }

    assert_int_equal(kvs_gguf_writer_new(&w, 3, &err), KVS_OK);
    kvs_gguf_set_str(w, "general.architecture", "llama");
    if (bd->gtype != NULL) {
        kvs_gguf_set_str(w, "general.type", bd->gtype);
    }
    if (bd->atype != NULL) {
        kvs_gguf_set_str(w, "adapter.type", bd->atype);
    }
    if (bd->alpha_str) {
        kvs_gguf_set_str(w, "adapter.lora.alpha", "16");
    } else {
        kvs_gguf_set_f32(w, "adapter.lora.alpha", bd->alpha);
    }

    ne[0] = bd->transposed ? r : 64;
    ne[1] = bd->transposed ? 64 : r;
    ne[2] = 1;
    snprintf(name, sizeof(name), "%s.lora_a", stem);
    kvs_gguf_w_tensor(w, name, KVS_GGML_F32, bd->three_dims ? 3 : 2, ne, a);

    if (!bd->no_b) {
        ne[0] = r;
        ne[1] = 64;
        snprintf(name, sizeof(name), "%s.lora_b", stem);
        kvs_gguf_w_tensor(w, name, KVS_GGML_F32, 2, ne, b);
    }

    if (kvs_gguf_writer_write(w, path, NULL, NULL, &err) != KVS_OK) {
        fail_msg("%s: %s", path, err.msg);
    }

    kvs_gguf_writer_free(w);
    free(a);
    free(b);
}


static void
test_malformed(void **state)
{
    char          an[64], bp[256];
    size_t        i;
    const char   *base, *ap;
    kvs_err_t     err;
    kvs_lora_t   *l;
    kvs_model_t  *b;
    bad_t         bd;

    static const struct {
        const char   *what;
        int           field;
        const char   *words[3];
    } cases[] = {
        { "general.type model", 0, { "general.type", "\"model\"", NULL } },
        { "no general.type", 1, { "general.type", NULL } },
        { "adapter.type ia3", 2, { "adapter.type", "ia3", NULL } },
        { "alpha a string", 3, { "adapter.lora.alpha", NULL } },
        { "alpha NaN", 4, { "adapter.lora.alpha", NULL } },
        { "no lora_b", 5, { "blk.0.attn_q.weight.lora_a",
                            "blk.0.attn_q.weight.lora_b", NULL } },
        { "transposed lora_a", 6, { "transposed", "[8, 64]", NULL } },
        { "rank 0", 7, { "rank 0", NULL } },
        { "three dimensions", 8, { "two dimensions", NULL } },
        { "output.weight", 9, { "output.weight.lora_a", NULL } },
        { "a NaN value", 10, { "lora_b", "not finite", NULL } },
        { "layer 2 of 2", 11, { "blk.2.attn_q", "layer 2", NULL } },
        { "leading zero", 12, { "blk.01.attn_q", NULL } },
    };

    base = base_path(bp, "bad", KVS_ARCH_LLAMA, 64);
    assert_int_equal(kvs_model_open(&b, base, &err), KVS_OK);
    snprintf(an, sizeof(an), "adapter-bad.%d.gguf", (int) getpid());
    ap = kvs_test_tmp(an);

    /* the well-formed one opens */
    memset(&bd, 0, sizeof(bd));
    bd.gtype = "adapter";
    bd.atype = "lora";
    bd.rank = 8;
    bd.alpha = 0.0f;
    write_bad(ap, &bd);
    if (kvs_lora_open(&l, ap, b, &err) != KVS_OK) {
        fail_msg("%s", err.msg);
    }
    assert_true(l->mat[0].scale == 1.0f);        /* alpha 0: scale 1 */
    kvs_lora_close(l);

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&bd, 0, sizeof(bd));
        bd.gtype = "adapter";
        bd.atype = "lora";
        bd.rank = 8;
        bd.alpha = 16.0f;

        switch (cases[i].field) {
        case 0: bd.gtype = "model"; break;
        case 1: bd.gtype = NULL; break;
        case 2: bd.atype = "ia3"; break;
        case 3: bd.alpha_str = 1; break;
        case 4: bd.alpha = NAN; break;
        case 5: bd.no_b = 1; break;
        case 6: bd.transposed = 1; break;
        case 7: bd.rank = 0; break;
        case 8: bd.three_dims = 1; break;
        case 9: bd.stem = "output.weight"; break;
        case 10: bd.nan_value = 1; break;
        case 11: bd.stem = "blk.2.attn_q.weight"; break;
        case 12: bd.stem = "blk.01.attn_q.weight"; break;
        }

        write_bad(ap, &bd);
        print_message("  %s\n", cases[i].what);
        expect_refusal(ap, b, 0, cases[i].words);
    }

    kvs_model_close(b);
    unlink(ap);
    unlink(base);
}


static void
test_truncated(void **state)
{
    char         an[64], bp[256];
    size_t       len = 0, n;
    uint8_t     *buf, *cut;
    const char  *base, *ap;
    kvs_err_t    err;
    kvs_lora_t  *l;
    kvs_model_t *b;

    base = base_path(bp, "trunc", KVS_ARCH_LLAMA, 64);
    snprintf(an, sizeof(an), "adapter-trunc.%d.gguf", (int) getpid());
    ap = kvs_test_tmp(an);
    gen_adapter(base, 2, 1u << KVS_LORA_V, 3, ap);
    assert_int_equal(kvs_model_open(&b, base, &err), KVS_OK);

    buf = kvs_test_slurp(ap, &len);
    assert_non_null(buf);

    assert_int_equal(kvs_lora_open_mem(&l, buf, len, b, &err), KVS_OK);
    assert_int_equal(l->n_mat, 2);
    kvs_lora_close(l);

    for (n = 0; n < len; n++) {
        cut = malloc(n ? n : 1);
        assert_non_null(cut);
        memcpy(cut, buf, n);
        assert_int_not_equal(kvs_lora_open_mem(&l, cut, n, b, &err), KVS_OK);
        free(cut);
    }

    free(buf);
    kvs_model_close(b);
    unlink(ap);
    unlink(base);
}


static void
test_cli(void **state)
{
    char          out[8192], args[1500], p64[256], p32[256], an[256];
    char          mn[256];
    const char   *cli;
    kvs_err_t     err;
    kvs_model_t  *m;

    cli = getenv("KVS_CLI");
    if (cli == NULL || access(cli, X_OK) != 0) {
        print_message("SKIP: KVS_CLI is not an executable\n");
        return;
    }

    base_path(p64, "cli64", KVS_ARCH_LLAMA, 64);
    base_path(p32, "cli32", KVS_ARCH_LLAMA, 32);
    snprintf(an, sizeof(an), "%s", kvs_test_tmp("adapter-cli.gguf"));
    snprintf(mn, sizeof(mn), "%s", kvs_test_tmp("merged-cli.gguf"));

    snprintf(args, sizeof(args), "gen-lora %s --rank 4 --targets q,down "
             "--seed 9 %s", p64, an);
    assert_int_equal(kvs_test_cli_run_buf(args, out, sizeof(out)), 0);

    snprintf(args, sizeof(args), "gen-lora %s --rank 4 --targets q,nope "
             "--seed 9 %s", p64, an);
    assert_int_equal(kvs_test_cli_run_buf(args, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "\"nope\""));

    snprintf(args, sizeof(args), "info %s", an);
    assert_int_equal(kvs_test_cli_run_buf(args, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "LoRA adapter for llama"));
    assert_non_null(strstr(out, "blk.1.ffn_down.weight"));

    snprintf(args, sizeof(args), "info --base %s %s", p64, an);
    assert_int_equal(kvs_test_cli_run_buf(args, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "fits"));

    snprintf(args, sizeof(args), "info --base %s %s", p32, an);
    assert_int_equal(kvs_test_cli_run_buf(args, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "blk.0.attn_q.weight.lora_a [64, 4]"));
    assert_non_null(strstr(out, "[32, 32]"));

    snprintf(args, sizeof(args), "merge-lora %s %s %s", p64, an, mn);
    assert_int_equal(kvs_test_cli_run_buf(args, out, sizeof(out)), 0);
    assert_int_equal(kvs_model_open(&m, mn, &err), KVS_OK);
    assert_int_equal(kvs_gguf_find_tensor(m->gguf,
                         "blk.0.attn_q.weight")->type, KVS_GGML_F32);
    kvs_model_close(m);

    unlink(an);
    unlink(mn);
    unlink(p64);
    unlink(p32);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gen_llama),
        cmocka_unit_test(test_gen_qwen),
        cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_cli),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
