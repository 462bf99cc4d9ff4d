/*
 * test_cuda_lora: the host side of the CUDA backend's LoRA
 * (src/backend/cuda/kvs_cuda_lora_plan.c), which needs no device:
 *
 *   - fit: generated adapters of ranks 8 and 64 on generated llama and
 *     qwen3 bases (every target) and a phi3 base (down only) fit; phi3's
 *     fused qkv, another architecture, a pair whose shape is not the
 *     forward's matrix and a layer past the model are refused, naming
 *     the tensor;
 *   - layout and conversion: every part aligned, inside the image and
 *     apart from the others; A and BT hold kvs_f32_to_bf16 of the CPU's
 *     values (BT transposed), padding zero; the kernel's arithmetic
 *     replayed on the host over the packed image (shrink, scale, expand
 *     in rank order) is within 1e-2 (norm-wise) of the CPU's reference
 *     kvs_lora_apply_row for every pair, and within 1e-6 of the same
 *     arithmetic on bf16-rounded values (so the layout, not the rounding,
 *     is what is checked);
 *   - the slot table: a set slot's entries carry base + offsets, rank
 *     and scale for its pairs and nothing else; slot 0 and other slots
 *     stay empty; emptying a slot clears it; slots 0 and 65 are refused,
 *     the table unchanged;
 *   - grouping: random slots over 37 rows: rows sorted by slot, stable,
 *     each adapted row in exactly one task, slot 0's rows in none, tasks
 *     of at most 8 rows of one slot, the largest rank used; an empty
 *     slot named is refused naming the entry; the per-matrix need is the
 *     largest rank of the used slots that adapt it (0 when none does).
 */

#include "kvs_test.h"

#include <math.h>
#include <unistd.h>

#include "backend/cuda/kvs_cuda_lora_plan.h"
#include "gen/kvs_gen.h"
#include "gen/kvs_gen_lora.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_lora.h"
#include "model/kvs_model.h"


typedef struct {
    char          base[256];
    char          ad[256];
    kvs_model_t  *m;
    kvs_lora_t   *l;
} fx_t;


/* A generated base of arch and an adapter of rank on targets for it. */
static void
fx_open(fx_t *f, const char *tag, kvs_arch_t arch, uint32_t rank,
    uint32_t targets)
{
    char                 name[64];
    kvs_err_t            err;
    kvs_gen_spec_t       spec;
    kvs_gen_lora_spec_t  ls;

    memset(f, 0, sizeof(*f));
    memset(&spec, 0, sizeof(spec));
    snprintf(spec.name, sizeof(spec.name), "cuda-lora");
    spec.arch = arch;
    spec.n_layer = 2;
    spec.n_embd = 48;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 136;
    spec.n_vocab = 300;
    spec.n_ctx = 64;
    spec.dtype = KVS_GGML_F32;
    spec.seed = 5;

    snprintf(name, sizeof(name), "cuda-lora-%s.%d.gguf", tag, (int) getpid());
    snprintf(f->base, sizeof(f->base), "%s", kvs_test_tmp(name));
    snprintf(name, sizeof(name), "cuda-lora-%s-a.%d.gguf", tag,
             (int) getpid());
    snprintf(f->ad, sizeof(f->ad), "%s", kvs_test_tmp(name));

    memset(&ls, 0, sizeof(ls));
    ls.rank = rank;
    ls.targets = targets;
    ls.seed = 77 + rank;
    ls.alpha = 2.0f * (float) rank;
    ls.strength = 0.5f;

    if (kvs_gen_write(&spec, f->base, &err) != KVS_OK
        || kvs_gen_lora_write(f->base, &ls, f->ad, &err) != KVS_OK
        || kvs_model_open(&f->m, f->base, &err) != KVS_OK
        || kvs_lora_open(&f->l, f->ad, f->m, &err) != KVS_OK)
    {
        fail_msg("%s: %s", tag, err.msg);
    }
}


static void
fx_close(fx_t *f)
{
    kvs_lora_close(f->l);
    kvs_model_close(f->m);
    unlink(f->base);
    unlink(f->ad);
}


#define ALL_TARGETS  0x7fu


static void
test_fit(void **state)
{
    fx_t            f;
    kvs_err_t       err;
    kvs_lora_t      l2;
    kvs_lora_mat_t  mats[1];

    (void) state;

    fx_open(&f, "llama8", KVS_ARCH_LLAMA, 8, ALL_TARGETS);
    assert_int_equal(f.l->n_mat, 2 * 7);
    assert_int_equal(kvs_cuda_lora_fit(&f.m->hp, f.l, &err), KVS_OK);

    /* a pair whose output side is not the forward's matrix */
    l2 = *f.l;
    mats[0] = f.l->mat[0];
    mats[0].n_out += 1;
    l2.mat = mats;
    l2.n_mat = 1;
    assert_int_equal(kvs_cuda_lora_fit(&f.m->hp, &l2, &err),
                     KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, mats[0].name));

    /* a layer the model lacks */
    mats[0] = f.l->mat[0];
    mats[0].layer = f.m->hp.n_layer;
    assert_int_equal(kvs_cuda_lora_fit(&f.m->hp, &l2, &err),
                     KVS_EUNSUPPORTED);

    /* a rank past the kernels' */
    mats[0] = f.l->mat[0];
    mats[0].rank = KVS_CUDA_LORA_RANK_MAX + 1;
    assert_int_equal(kvs_cuda_lora_fit(&f.m->hp, &l2, &err),
                     KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "rank"));

    /* another architecture */
    l2 = *f.l;
    snprintf(l2.arch, sizeof(l2.arch), "qwen3");
    assert_int_equal(kvs_cuda_lora_fit(&f.m->hp, &l2, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "qwen3"));
    fx_close(&f);

    fx_open(&f, "qwen64", KVS_ARCH_QWEN3, 64, ALL_TARGETS);
    assert_int_equal(kvs_cuda_lora_fit(&f.m->hp, f.l, &err), KVS_OK);
    fx_close(&f);

    /* phi3: down fits, the fused qkv is refused */
    fx_open(&f, "phi3down", KVS_ARCH_PHI3, 8, 1u << KVS_LORA_DOWN);
    assert_int_equal(kvs_cuda_lora_fit(&f.m->hp, f.l, &err), KVS_OK);
    fx_close(&f);

    fx_open(&f, "phi3qkv", KVS_ARCH_PHI3, 8, 1u << KVS_LORA_QKV);
    assert_int_equal(kvs_cuda_lora_fit(&f.m->hp, f.l, &err),
                     KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "attn_qkv"));
    fx_close(&f);
}


/* The kernels' arithmetic on the host over the packed image: T = scale *
 * A x (F32 sums), then y += T[r] BT[r] in rank order, from y. */
static void
emulate(const kvs_lora_mat_t *m, const uint16_t *a, const uint16_t *bt,
    const float *x, float *y)
{
    float     t[KVS_CUDA_LORA_RANK_MAX], s;
    uint32_t  r;
    uint64_t  i, o;

    for (r = 0; r < m->rank; r++) {
        s = 0.0f;
        for (i = 0; i < m->n_in; i++) {
            s = fmaf(kvs_bf16_to_f32(a[r * m->n_in + i]), x[i], s);
        }
        t[r] = m->scale * s;
    }

    for (o = 0; o < m->n_out; o++) {
        for (r = 0; r < m->rank; r++) {
            y[o] = fmaf(t[r], kvs_bf16_to_f32(bt[r * m->n_out + o]), y[o]);
        }
    }
}


static double
rel_err(const float *got, const float *ref, uint64_t n)
{
    double    num, den;
    uint64_t  i;

    num = 0.0;
    den = 0.0;
    for (i = 0; i < n; i++) {
        num += ((double) got[i] - ref[i]) * ((double) got[i] - ref[i]);
        den += (double) ref[i] * ref[i];
    }

    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}


static void
check_pack(const char *tag, kvs_arch_t arch, uint32_t rank)
{
    fx_t                   f;
    char                  *img;
    float                 *x, *y0, *y1, *y2, tmp[KVS_CUDA_LORA_RANK_MAX];
    uint32_t               i, j, r;
    uint64_t               bytes, k, o, used;
    kvs_err_t              err;
    kvs_lora_mat_t         rounded;
    kvs_cuda_lora_part_t  *parts;
    const kvs_lora_mat_t  *m;
    const uint16_t        *a, *bt;

    fx_open(&f, tag, arch, rank, ALL_TARGETS);

    parts = calloc(f.l->n_mat, sizeof(*parts));
    assert_non_null(parts);
    assert_int_equal(kvs_cuda_lora_layout(f.l, parts, &bytes, &err), KVS_OK);
    assert_int_equal(bytes % KVS_CUDA_LORA_ALIGN, 0);

    used = 0;
    for (i = 0; i < f.l->n_mat; i++) {
        m = &f.l->mat[i];
        assert_int_equal(parts[i].a % KVS_CUDA_LORA_ALIGN, 0);
        assert_int_equal(parts[i].bt % KVS_CUDA_LORA_ALIGN, 0);
        /* in order, apart: A then BT, each after the previous pair */
        assert_true(parts[i].a >= used);
        assert_true(parts[i].bt >= parts[i].a + 2 * m->rank * m->n_in);
        used = parts[i].bt + 2 * m->rank * m->n_out;
        assert_true(used <= bytes);
    }

    img = malloc(bytes);
    assert_non_null(img);
    memset(img, 0x5a, bytes);
    kvs_cuda_lora_pack(f.l, parts, bytes, img);

    /* padding zeroed: the bytes between parts */
    used = 0;
    for (i = 0; i < f.l->n_mat; i++) {
        m = &f.l->mat[i];
        for (k = used; k < parts[i].a; k++) {
            assert_int_equal(img[k], 0);
        }
        for (k = parts[i].a + 2 * m->rank * m->n_in; k < parts[i].bt; k++) {
            assert_int_equal(img[k], 0);
        }
        used = parts[i].bt + 2 * m->rank * m->n_out;
    }

    for (i = 0; i < f.l->n_mat; i++) {
        m = &f.l->mat[i];
        a = (const uint16_t *) (const void *) (img + parts[i].a);
        bt = (const uint16_t *) (const void *) (img + parts[i].bt);

        for (r = 0; r < m->rank; r++) {
            for (k = 0; k < m->n_in; k++) {
                assert_int_equal(a[r * m->n_in + k],
                                 kvs_f32_to_bf16(m->a[r * m->n_in + k]));
            }
            for (o = 0; o < m->n_out; o++) {
                assert_int_equal(bt[r * m->n_out + o],
                                 kvs_f32_to_bf16(m->b[o * m->rank + r]));
            }
        }

        /* the product over the image against the CPU's reference, and
         * against the reference on bf16-rounded values; y starts at 0,
         * so these are the adapter's own products (which are not 0) */
        x = malloc(m->n_in * sizeof(float));
        y0 = calloc(m->n_out, sizeof(float));
        y1 = calloc(m->n_out, sizeof(float));
        y2 = calloc(m->n_out, sizeof(float));
        rounded = *m;
        rounded.a = malloc((size_t) m->rank * m->n_in * sizeof(float));
        rounded.b = malloc((size_t) m->rank * m->n_out * sizeof(float));
        assert_true(x && y0 && y1 && y2 && rounded.a && rounded.b);

        for (k = 0; k < m->n_in; k++) {
            x[k] = sinf(0.37f * (float) k + (float) i) * 0.8f;
        }
        for (k = 0; k < (uint64_t) m->rank * m->n_in; k++) {
            rounded.a[k] = kvs_bf16_to_f32(kvs_f32_to_bf16(m->a[k]));
        }
        for (k = 0; k < (uint64_t) m->rank * m->n_out; k++) {
            rounded.b[k] = kvs_bf16_to_f32(kvs_f32_to_bf16(m->b[k]));
        }

        kvs_lora_apply_row(m, x, y0, tmp);
        kvs_lora_apply_row(&rounded, x, y2, tmp);
        emulate(m, a, bt, x, y1);

        assert_true(rel_err(y2, y0, m->n_out) < 1e-2);
        assert_true(rel_err(y1, y0, m->n_out) < 1e-2);
        assert_true(rel_err(y1, y2, m->n_out) < 1e-5);

        for (j = 0, k = 0; k < m->n_out; k++) {
            j += y0[k] != 0.0f;
        }
        assert_true(j > 0);

        free(x);
        free(y0);
        free(y1);
        free(y2);
        free(rounded.a);
        free(rounded.b);
    }

    free(img);
    free(parts);
    fx_close(&f);
}


static void
test_pack(void **state)
{
    (void) state;

    check_pack("pack-llama8", KVS_ARCH_LLAMA, 8);
    check_pack("pack-qwen64", KVS_ARCH_QWEN3, 64);
    check_pack("pack-llama5", KVS_ARCH_LLAMA, 5);
}


static void
test_table(void **state)
{
    fx_t                        f;
    int                         found;
    size_t                      k, n;
    uint32_t                    i, ly, tg, s;
    uint64_t                    bytes, base;
    kvs_err_t                   err;
    kvs_cuda_lora_ent_t        *copy;
    kvs_cuda_lora_part_t       *parts;
    kvs_cuda_lora_table_t       t;
    const kvs_cuda_lora_ent_t  *e;
    const kvs_lora_mat_t       *m;

    (void) state;

    /* q and v only: k, o and the FFN stay unadapted */
    fx_open(&f, "table", KVS_ARCH_LLAMA, 8,
            (1u << KVS_LORA_Q) | (1u << KVS_LORA_V));

    parts = calloc(f.l->n_mat, sizeof(*parts));
    assert_non_null(parts);
    assert_int_equal(kvs_cuda_lora_layout(f.l, parts, &bytes, &err), KVS_OK);
    assert_int_equal(kvs_cuda_lora_table_new(&t, f.m->hp.n_layer, &err),
                     KVS_OK);

    base = 0x7f0000000000ull;
    assert_int_equal(kvs_cuda_lora_table_set(&t, 3, f.l, base, parts, &err),
                     KVS_OK);
    assert_int_equal(t.rank_max[3], 8);

    for (ly = 0; ly < t.n_layer; ly++) {
        for (tg = 0; tg < KVS_CUDA_LORA_TARGETS; tg++) {
            e = kvs_cuda_lora_table_at(&t, ly, (kvs_lora_target_t) tg);

            for (s = 0; s <= KVS_CUDA_LORA_SLOTS; s++) {
                if (s != 3) {
                    assert_int_equal(e[s].rank, 0);
                    assert_true(e[s].a == 0 && e[s].bt == 0);
                    continue;
                }

                found = 0;
                for (i = 0; i < f.l->n_mat; i++) {
                    m = &f.l->mat[i];
                    if (m->layer == ly && (uint32_t) m->target == tg) {
                        found = 1;
                        assert_int_equal(e[s].a, base + parts[i].a);
                        assert_int_equal(e[s].bt, base + parts[i].bt);
                        assert_int_equal(e[s].rank, m->rank);
                        assert_true(e[s].scale == m->scale);
                    }
                }

                assert_int_equal(e[s].rank, found ? 8 : 0);
                assert_int_equal(found, tg == KVS_LORA_Q
                                        || tg == KVS_LORA_V);
            }
        }
    }

    /* refusals leave the table as it was */
    n = kvs_cuda_lora_table_len(&t);
    copy = malloc(n * sizeof(*copy));
    assert_non_null(copy);
    memcpy(copy, t.ent, n * sizeof(*copy));
    assert_int_equal(kvs_cuda_lora_table_set(&t, 0, f.l, base, parts, &err),
                     KVS_EINVAL);
    assert_int_equal(kvs_cuda_lora_table_set(&t, KVS_CUDA_LORA_SLOTS + 1,
                                             f.l, base, parts, &err),
                     KVS_EINVAL);
    assert_memory_equal(copy, t.ent, n * sizeof(*copy));

    /* emptied */
    assert_int_equal(kvs_cuda_lora_table_set(&t, 3, NULL, 0, NULL, &err),
                     KVS_OK);
    assert_int_equal(t.rank_max[3], 0);
    for (k = 0; k < n; k++) {
        assert_int_equal(t.ent[k].rank, 0);
        assert_true(t.ent[k].a == 0);
    }

    free(copy);
    free(parts);
    kvs_cuda_lora_table_free(&t);
    fx_close(&f);
}


#define G_ROWS  37
#define G_CAP   64


static void
test_group(void **state)
{
    int32_t                 words[3 * G_CAP + 1], *rows, *task0, *tslot;
    uint32_t                slots[G_ROWS], seen[G_ROWS], n_task, rank;
    uint32_t                i, k, j, want_tasks, cnt[KVS_CUDA_LORA_SLOTS + 1];
    kvs_err_t               err;
    kvs_cuda_lora_table_t   t;
    static const uint32_t   used[4] = { 0, 2, 5, 7 };

    (void) state;

    assert_int_equal(kvs_cuda_lora_group_words(G_CAP), 3 * G_CAP + 1);
    assert_int_equal(kvs_cuda_lora_table_new(&t, 2, &err), KVS_OK);

    /* ranks by hand: slot 2 rank 8 on q, slot 5 rank 64 on q and down,
     * slot 7 rank 16 on down */
    kvs_cuda_lora_table_at(&t, 0, KVS_LORA_Q)[2].rank = 8;
    kvs_cuda_lora_table_at(&t, 0, KVS_LORA_Q)[5].rank = 64;
    kvs_cuda_lora_table_at(&t, 1, KVS_LORA_DOWN)[5].rank = 64;
    kvs_cuda_lora_table_at(&t, 1, KVS_LORA_DOWN)[7].rank = 16;
    t.rank_max[2] = 8;
    t.rank_max[5] = 64;
    t.rank_max[7] = 16;

    /* 20 rows of slot 5 (three tasks), the rest mixed */
    memset(cnt, 0, sizeof(cnt));
    for (i = 0; i < G_ROWS; i++) {
        slots[i] = i % 2 == 0 ? 5 : used[(i / 2) % 4];
        cnt[slots[i]]++;
    }

    assert_int_equal(kvs_cuda_lora_check(&t, slots, G_ROWS, &err), KVS_OK);

    memset(words, 0xff, sizeof(words));
    kvs_cuda_lora_group(&t, slots, G_ROWS, G_CAP, words, &n_task, &rank);

    rows = words;
    task0 = words + G_CAP;
    tslot = words + 2 * G_CAP + 1;

    want_tasks = 0;
    for (k = 1; k <= KVS_CUDA_LORA_SLOTS; k++) {
        want_tasks += (cnt[k] + KVS_CUDA_LORA_GROUP - 1)
                      / KVS_CUDA_LORA_GROUP;
    }
    assert_int_equal(n_task, want_tasks);
    assert_true(n_task >= 4);
    assert_int_equal(rank, 64);
    assert_int_equal(task0[0], 0);
    assert_int_equal(task0[n_task], G_ROWS - cnt[0]);

    memset(seen, 0, sizeof(seen));
    for (k = 0; k < n_task; k++) {
        assert_true(task0[k + 1] > task0[k]);
        assert_true(task0[k + 1] - task0[k] <= KVS_CUDA_LORA_GROUP);
        assert_true(k == 0 || tslot[k] >= tslot[k - 1]);

        for (j = (uint32_t) task0[k]; j < (uint32_t) task0[k + 1]; j++) {
            assert_true(rows[j] >= 0 && rows[j] < G_ROWS);
            assert_int_equal(slots[rows[j]], (uint32_t) tslot[k]);
            /* stable: a slot's rows in row order */
            assert_true(j == 0 || slots[rows[j - 1]] != slots[rows[j]]
                        || rows[j - 1] < rows[j]);
            seen[rows[j]]++;
        }
    }

    for (i = 0; i < G_ROWS; i++) {
        assert_int_equal(seen[i], slots[i] != 0);
    }

    /* the per-matrix need */
    assert_int_equal(kvs_cuda_lora_need(&t, 0, KVS_LORA_Q, tslot, n_task),
                     64);
    assert_int_equal(kvs_cuda_lora_need(&t, 1, KVS_LORA_DOWN, tslot,
                                        n_task), 64);
    assert_int_equal(kvs_cuda_lora_need(&t, 0, KVS_LORA_K, tslot, n_task),
                     0);
    assert_int_equal(kvs_cuda_lora_need(&t, 1, KVS_LORA_Q, tslot, n_task),
                     0);

    /* without slot 5: q needs 8, down 16 */
    for (i = 0; i < G_ROWS; i++) {
        slots[i] = slots[i] == 5 ? 0 : slots[i];
    }
    kvs_cuda_lora_group(&t, slots, G_ROWS, G_CAP, words, &n_task, &rank);
    assert_int_equal(rank, 16);
    assert_int_equal(kvs_cuda_lora_need(&t, 0, KVS_LORA_Q, tslot, n_task),
                     8);
    assert_int_equal(kvs_cuda_lora_need(&t, 1, KVS_LORA_DOWN, tslot,
                                        n_task), 16);

    /* only slot 0: no task */
    memset(slots, 0, sizeof(slots));
    kvs_cuda_lora_group(&t, slots, G_ROWS, G_CAP, words, &n_task, &rank);
    assert_int_equal(n_task, 0);
    assert_int_equal(rank, 0);

    /* an empty slot, a slot past the table */
    slots[9] = 3;
    assert_int_equal(kvs_cuda_lora_check(&t, slots, G_ROWS, &err),
                     KVS_EINVAL);
    assert_non_null(strstr(err.msg, "entry 9"));
    slots[9] = KVS_CUDA_LORA_SLOTS + 1;
    assert_int_equal(kvs_cuda_lora_check(&t, slots, G_ROWS, &err),
                     KVS_EINVAL);

    kvs_cuda_lora_table_free(&t);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_group),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
