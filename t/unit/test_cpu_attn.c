/*
 * test_cpu_attn: the CPU attention's query blocks (kvs_cpu_attn.c).  A
 * prefill's tokens attend in blocks of consecutive positions, each K and
 * V row read once for the block; every token's output must be, to the
 * bit, what it gets attending alone (the batch of that one token).
 * Shapes: 1 to 12 query heads per K/V head (the AVX-512 kernel's passes
 * of 3 heads, a head alone with its even/odd sums, 3 + 1, 3 + 2,
 * 3 + 3 + 1, 12 in blocks of 2 tokens), head sizes 16 to 128 (column
 * remainders), KV blocks of 5, 7 and 16 positions, prompts starting at
 * 0 and past it, a sliding window (blocks past it go token by token) and
 * a soft-cap small enough that the scores' padding lanes, uncapped,
 * decide the softmax's max.  And a step's batch of three sequences
 * interleaved (prefill runs cut by the others' tokens, a decode token
 * among them), whose blocks must end where the sequence or the run of
 * positions does.  Each output is also within 1e-4 of a
 * double-precision attention, so the two agree on something right.
 * Where the CPU lacks AVX-512 every token attends alone: skipped.
 */

#include "kvs_test.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/kvs_cpu_impl.h"
#include "kv/kvs_kv_layout.h"


typedef struct {
    uint32_t  n_head, n_head_kv, hd, bt, win, off, n;
    float     softcap;
} shape_t;

static const shape_t  shapes[] = {
    { 12, 4, 64, 16, 0, 0, 37, 0.0f },     /* the 100M model's */
    { 4, 4, 64, 16, 0, 5, 30, 0.0f },      /* MHA: even/odd sums */
    { 8, 2, 64, 7, 0, 3, 29, 0.0f },       /* 3 + 1 heads */
    { 10, 2, 32, 16, 0, 0, 21, 0.0f },     /* 3 + 2 */
    { 7, 1, 32, 5, 0, 9, 26, 0.0f },       /* 3 + 3 + 1 */
    { 12, 1, 16, 16, 0, 0, 19, 0.0f },     /* blocks of 2 tokens */
    { 6, 2, 80, 16, 0, 2, 33, 0.0f },      /* 64 + 16 columns */
    { 4, 2, 48, 16, 0, 0, 17, 0.0f },      /* 32 + 16 */
    { 4, 2, 64, 16, 20, 0, 40, 0.0f },     /* a window of 20 */
    { 6, 2, 64, 16, 0, 0, 35, 0.05f },     /* soft-capping */
    { 4, 1, 128, 16, 24, 7, 45, 0.1f },    /* window, cap, 128 */
};


/* What kvs_cpu_forward (kvs_cpu.c) sets of its step's state for the
 * attention, for sh's shapes and prompt; q, att, sc and qb as given. */
/* A one-layer model's shapes alone (attention reads no weight). */
static kvs_cpu_model_t *
model_heads(uint32_t n_head, uint32_t n_head_kv, uint32_t hd)
{
    kvs_cpu_model_t  *cm;

    cm = test_calloc(1, sizeof(kvs_cpu_model_t));
    cm->hp.n_layer = 1;
    cm->hp.n_head = n_head;
    cm->hp.n_head_kv = n_head_kv;
    cm->hp.head_dim_k = hd;
    cm->hp.head_dim_v = hd;
    cm->hp.k_width = n_head_kv * hd;
    cm->hp.v_width = cm->hp.k_width;

    return cm;
}


static void
fw_init(kvs_cpu_fw_t *fw, const kvs_cpu_model_t *cm, kvs_cpu_kv_t *kv,
    const shape_t *sh, float *q, float *att, float *sc, uint32_t *qb)
{
    memset(fw, 0, sizeof(*fw));
    fw->cm = cm;
    fw->kv = kv;
    fw->simd = kvs_cpu_simd();
    fw->q = q;
    fw->att = att;
    fw->sc = sc;
    fw->qb = qb;
    fw->qd = sh->n_head * sh->hd;
    fw->od = fw->qd;
    fw->kd = sh->n_head_kv * sh->hd;
    fw->vd = fw->kd;
    fw->scale = 1.0f / sqrtf((float) sh->hd);
    fw->win = sh->win;
    fw->softcap = sh->softcap;
    fw->attn_group = kvs_cpu_attn_group(&cm->hp, fw->simd);
    fw->sc_len = ((size_t) sh->off + sh->n + 15) & ~(size_t) 15;
    fw->sc_stride = kvs_cpu_attn_qb(fw) * fw->attn_group * fw->sc_len;
    fw->bstride = kv->lo.block_bytes / sizeof(float);
    fw->kcb = kv->mem + kvs_kv_layout_k(&kv->lo, 0, 0);
    fw->vcb = kv->mem + kvs_kv_layout_v(&kv->lo, 0, 0);
    fw->kc = (float *) (void *) fw->kcb;
    fw->vc = (float *) (void *) fw->vcb;
}


/* Every attention task of batch b, on thread 0; the block count. */
static uint32_t
attend(kvs_cpu_fw_t *fw, const kvs_batch_t *b)
{
    uint32_t  task, n_tasks;

    fw->b = b;
    fw->n_qb = kvs_cpu_attn_blocks(fw, fw->qb);
    n_tasks = fw->n_qb * (fw->cm->hp.n_head / fw->attn_group);

    for (task = 0; task < n_tasks; task++) {
        kvs_cpu_attn_task(fw, task, 0);
    }

    return fw->n_qb;
}


/* Head kvh's K (v == 0) or V row of position t, as stored. */
static const float *
kv_row(const kvs_cpu_fw_t *fw, const kvs_kv_table_t *tab, uint32_t t,
    uint32_t kvh, int v)
{
    uint32_t  bt;

    bt = fw->kv->block_tokens;

    return (v ? fw->vc : fw->kc)
           + (size_t) tab->blocks[t / bt] * fw->bstride
           + (size_t) (t % bt) * (v ? fw->vd : fw->kd)
           + (size_t) kvh * fw->cm->hp.head_dim_k;
}


/* The attention of one (token at pos, head h) in doubles: max |out -
 * ref| / max |ref| over its head_dim outputs. */
static double
ref_err(const kvs_cpu_fw_t *fw, const kvs_kv_table_t *tab,
    const float *qh, const float *ah, uint32_t pos, uint32_t h)
{
    double       s[128], z, sum, mx, o, d, dmax, omax;
    uint32_t     t, t0, j, hd, kvh;
    const float  *r;

    hd = fw->cm->hp.head_dim_k;
    kvh = h / (fw->cm->hp.n_head / fw->cm->hp.n_head_kv);
    t0 = fw->win != 0 && pos >= fw->win ? pos + 1 - fw->win : 0;
    mx = -INFINITY;
    assert_true(pos - t0 < 128);

    for (t = t0; t <= pos; t++) {
        r = kv_row(fw, tab, t, kvh, 0);
        z = 0.0;

        for (j = 0; j < hd; j++) {
            z += (double) qh[j] * r[j];
        }

        z *= fw->scale;
        s[t - t0] = fw->softcap != 0.0f ? fw->softcap * tanh(z / fw->softcap)
                                        : z;
        mx = s[t - t0] > mx ? s[t - t0] : mx;
    }

    sum = 0.0;

    for (t = t0; t <= pos; t++) {
        s[t - t0] = exp(s[t - t0] - mx);
        sum += s[t - t0];
    }

    dmax = 0.0;
    omax = 0.0;

    for (j = 0; j < hd; j++) {
        o = 0.0;

        for (t = t0; t <= pos; t++) {
            o += s[t - t0] / sum * kv_row(fw, tab, t, kvh, 1)[j];
        }

        d = fabs(o - ah[j]);
        dmax = d > dmax ? d : dmax;
        omax = fabs(o) > omax ? fabs(o) : omax;
    }

    assert_true(omax > 1e-6);

    return dmax / omax;
}


/*
 * Batch b's tokens (q: their rows, in batch order) attend as one step's
 * batch into att, then each alone into alone: the same bytes, and each
 * near the double-precision attention.  Returns the batch's blocks.
 */
static uint32_t
check_batch(kvs_cpu_fw_t *fw, const kvs_batch_t *b, float *q, float *att,
    float *alone)
{
    uint32_t                i, h, hd, blocks;
    kvs_batch_t             one;
    const kvs_batch_tok_t  *tk;

    hd = fw->cm->hp.head_dim_k;
    fw->q = q;
    fw->att = att;
    blocks = attend(fw, b);

    /* each token alone, its scores in the same scratch */
    for (i = 0; i < b->n; i++) {
        fw->q = q + (size_t) i * fw->qd;
        fw->att = alone + (size_t) i * fw->od;
        one.toks = &b->toks[i];
        one.n = 1;
        assert_int_equal(attend(fw, &one), 1);
    }

    for (i = 0; i < b->n; i++) {
        tk = &b->toks[i];

        if (memcmp(att + (size_t) i * fw->od, alone + (size_t) i * fw->od,
                   fw->od * sizeof(float)) != 0)
        {
            fail_msg("%u/%u heads of %u: token %u at %u attends "
                     "differently in its block", fw->cm->hp.n_head,
                     fw->cm->hp.n_head_kv, hd, i, tk->pos);
        }

        for (h = 0; h < fw->cm->hp.n_head; h++) {
            assert_true(ref_err(fw, tk->table,
                                q + (size_t) i * fw->qd + (size_t) h * hd,
                                att + (size_t) i * fw->od + (size_t) h * hd,
                                tk->pos, h)
                        < 1e-4);
        }
    }

    return blocks;
}


/* Each shape's prompt as one step's batch, then token by token. */
static void
test_block_alone(void **state)
{
    int               blocked;
    float            *q, *att, *alone, *sc;
    size_t            z, words;
    uint64_t          seed;
    uint32_t          k, i, nblk, *qb, *blocks;
    kvs_err_t         err;
    kvs_batch_t       b;
    kvs_cpu_fw_t      fw;
    kvs_cpu_kv_t     *kv;
    const shape_t    *sh;
    kvs_kv_table_t    tab;
    kvs_cpu_model_t  *cm;
    kvs_batch_tok_t  *tk;

    (void) state;

    if (kvs_cpu_simd() < KVS_CPU_SIMD_AVX512) {
        skip();
    }

    seed = 7;
    blocked = 0;

    for (k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        sh = &shapes[k];
        cm = model_heads(sh->n_head, sh->n_head_kv, sh->hd);

        nblk = (sh->off + sh->n + sh->bt - 1) / sh->bt;
        if (kvs_cpu_kv_new(&kv, cm, nblk, sh->bt, &err) != KVS_OK) {
            fail_msg("%s", err.msg);
        }

        words = nblk * kv->lo.block_bytes / sizeof(float);
        for (z = 0; z < words; z++) {
            ((float *) (void *) kv->mem)[z] = kvs_test_gauss(&seed);
        }

        /* the blocks out of order, as a pool hands them out */
        blocks = test_malloc(nblk * sizeof(uint32_t));
        for (i = 0; i < nblk; i++) {
            blocks[i] = (i * 5 + 3) % nblk;
            if (nblk % 5 == 0) {
                blocks[i] = nblk - 1 - i;
            }
        }

        memset(&tab, 0, sizeof(tab));
        tab.blocks = blocks;
        tab.n_blocks = nblk;
        tab.n_tokens = sh->off + sh->n;
        tab.block_tokens = sh->bt;

        tk = test_calloc(sh->n, sizeof(kvs_batch_tok_t));
        for (i = 0; i < sh->n; i++) {
            tk[i].pos = sh->off + i;
            tk[i].table = &tab;
        }

        q = test_malloc((size_t) sh->n * sh->n_head * sh->hd
                        * sizeof(float));
        att = test_malloc((size_t) sh->n * sh->n_head * sh->hd
                          * sizeof(float));
        alone = test_malloc((size_t) sh->n * sh->n_head * sh->hd
                            * sizeof(float));
        qb = test_malloc((sh->n + 1) * sizeof(uint32_t));

        for (z = 0; z < (size_t) sh->n * sh->n_head * sh->hd; z++) {
            q[z] = kvs_test_gauss(&seed);
        }

        fw_init(&fw, cm, kv, sh, q, att, NULL, qb);
        sc = test_malloc(fw.sc_stride * sizeof(float));
        fw.sc = sc;

        /* the whole prompt as one step's batch: in query blocks */
        b.toks = tk;
        b.n = sh->n;
        if (check_batch(&fw, &b, q, att, alone) < sh->n) {
            blocked = 1;
        }

        test_free(sc);
        test_free(qb);
        test_free(alone);
        test_free(att);
        test_free(q);
        test_free(tk);
        test_free(blocks);
        kvs_cpu_kv_free(kv);
        test_free(cm);
    }

    /* not vacuous: some batch did run as blocks */
    assert_true(blocked);
}


/*
 * Three sequences' tokens in one step, as the scheduler mixes them: A's
 * prompt from position 20 in runs cut by the others' tokens, B's prompt
 * from 0, C decoding at 31 (right after A's 30) and 34.  Blocks end at
 * every change of sequence and every gap, or C's token would attend A's
 * rows: 8 of them.
 */
static void
test_mixed_batch(void **state)
{
    static const shape_t   shs[] = {
        { 12, 4, 64, 16, 0, 0, 0, 0.0f },
        { 4, 4, 64, 7, 0, 0, 0, 0.0f },
        { 8, 2, 64, 5, 24, 0, 0, 0.05f },
    };
    static const uint32_t  order[][2] = {    /* (sequence, position) */
        { 0, 20 }, { 0, 21 }, { 0, 22 }, { 0, 23 }, { 0, 24 }, { 0, 25 },
        { 0, 26 }, { 0, 27 }, { 0, 28 }, { 0, 29 }, { 1, 0 }, { 1, 1 },
        { 1, 2 }, { 1, 3 }, { 1, 4 }, { 0, 30 }, { 2, 31 }, { 0, 31 },
        { 0, 32 }, { 0, 33 }, { 0, 34 }, { 1, 5 }, { 1, 6 }, { 2, 34 },
    };
    static const uint32_t  len[3] = { 35, 7, 35 };

    float            *q, *att, *alone, *sc;
    size_t            z, words, nq;
    uint64_t          seed;
    uint32_t          k, i, j, n, nblk, first, *qb, *ids;
    kvs_err_t         err;
    kvs_batch_t       b;
    kvs_cpu_fw_t      fw;
    kvs_cpu_kv_t     *kv;
    const shape_t    *sh;
    kvs_kv_table_t    tab[3];
    kvs_cpu_model_t  *cm;
    kvs_batch_tok_t   tk[sizeof(order) / sizeof(order[0])];

    (void) state;

    if (kvs_cpu_simd() < KVS_CPU_SIMD_AVX512) {
        skip();
    }

    n = sizeof(order) / sizeof(order[0]);
    seed = 9;

    for (k = 0; k < sizeof(shs) / sizeof(shs[0]); k++) {
        sh = &shs[k];
        cm = model_heads(sh->n_head, sh->n_head_kv, sh->hd);

        nblk = 0;
        for (j = 0; j < 3; j++) {
            nblk += (len[j] + sh->bt - 1) / sh->bt;
        }

        if (kvs_cpu_kv_new(&kv, cm, nblk, sh->bt, &err) != KVS_OK) {
            fail_msg("%s", err.msg);
        }

        words = nblk * kv->lo.block_bytes / sizeof(float);
        for (z = 0; z < words; z++) {
            ((float *) (void *) kv->mem)[z] = kvs_test_gauss(&seed);
        }

        /* each table its own blocks, from the pool's end down */
        ids = test_malloc(nblk * sizeof(uint32_t));
        first = 0;

        for (j = 0; j < 3; j++) {
            memset(&tab[j], 0, sizeof(tab[j]));
            tab[j].blocks = ids + first;
            tab[j].n_blocks = (len[j] + sh->bt - 1) / sh->bt;
            tab[j].n_tokens = len[j];
            tab[j].block_tokens = sh->bt;

            for (i = 0; i < tab[j].n_blocks; i++) {
                ids[first + i] = nblk - 1 - (first + i);
            }

            first += tab[j].n_blocks;
        }

        for (i = 0; i < n; i++) {
            memset(&tk[i], 0, sizeof(tk[i]));
            tk[i].table = &tab[order[i][0]];
            tk[i].pos = order[i][1];
        }

        nq = (size_t) n * sh->n_head * sh->hd;
        q = test_malloc(nq * sizeof(float));
        att = test_malloc(nq * sizeof(float));
        alone = test_malloc(nq * sizeof(float));
        qb = test_malloc((n + 1) * sizeof(uint32_t));

        for (z = 0; z < nq; z++) {
            q[z] = kvs_test_gauss(&seed);
        }

        /* scores for positions up to 35 */
        fw_init(&fw, cm, kv, sh, q, att, NULL, qb);
        fw.sc_len = 48;
        fw.sc_stride = kvs_cpu_attn_qb(&fw) * fw.attn_group * fw.sc_len;
        sc = test_malloc(fw.sc_stride * sizeof(float));
        fw.sc = sc;

        b.toks = tk;
        b.n = n;

        /* A's 10 (blocks of 8 or 6: two), B's 5, A's 30, C's 31, A's 4,
         * B's 2, C's 34 */
        assert_int_equal(check_batch(&fw, &b, q, att, alone), 8);

        test_free(sc);
        test_free(qb);
        test_free(alone);
        test_free(att);
        test_free(q);
        test_free(ids);
        kvs_cpu_kv_free(kv);
        test_free(cm);
    }
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_block_alone),
        cmocka_unit_test(test_mixed_batch),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
