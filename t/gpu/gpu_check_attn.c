/*
 * gpu_check_attn: the kernels over the paged K/V cache against CPU
 * references: rope_kv (NORM and NEOX pairing, partial rotary, YaRN's
 * mscale, biases; F32, F16, BF16, int8 and fp8 caches), attn_decode
 * (several split counts, a graph's looser max_ctx) and attn_prefill
 * (chunks that start after cached blocks, at and off block boundaries).
 *
 * int8 and fp8: rope_kv's cache starts as random codes and scales (a
 * block written mid-way, as one filled over several steps is), and its
 * result must equal, byte for byte, elements and scales, what the CPU
 * backend's own write (kvs_cpu_block_write, in kvs_kv_layout's blocks)
 * makes of the same start and of the F32 rows the kernel quantized (the
 * rotated K and biased V it leaves in k and v, themselves checked
 * against the CPU's RoPE within 1e-5); attention reads random codes and
 * scales, against the double-precision loop over the dequantized
 * values, within 1e-4 (all its arithmetic is F32).
 *
 * Every batch mixes runs of one token (decodes) with longer runs
 * (prefill chunks) of several sequences whose block tables are drawn
 * from a shuffled list of the cache's blocks, so tables are never
 * contiguous, and decode batches end in padding tokens packed as
 * kvs_cuda_plan_pack packs them (pos -1, token 0, sequence 0, a run
 * each).  Caches have two layers and the kernels work on layer 1, so an
 * offset that forgets the layer shows.  References: RoPE is the CPU
 * backend's own kvs_rope_apply() on a kvs_rope_t built by kvs_rope_init;
 * attention is a double-precision loop over the same stored K/V.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "backend/kvs_rope.h"
#include "backend/cpu/kvs_cpu.h"
#include "kv/kvs_kv_layout.h"
#include "model/kvs_dtype.h"

#define GC_A_LAYERS  2
#define GC_A_LAYER   1                /* the layer the kernels work on */
#define GC_A_BT      16               /* tokens per block */
#define GC_A_SEQS    8                /* sequences per batch, at most */

/* a run of a test batch: pos0 < 0 is a padding token */
typedef struct {
    uint32_t  seq;
    int32_t   pos0;
    uint32_t  len;
} gc_a_run_t;

typedef struct {
    uint32_t        n_tok, n_seq, n_run, n_table;
    int32_t        *tok, *pos, *seq, *table_off, *table, *run_tok0,
                   *run_len;          /* host arrays */
    int32_t        *words;            /* the 7 arrays in one allocation */
    kvs_k_batch_t   kb;               /* pointing into device memory */
} gc_a_batch_t;

typedef struct {
    kvs_k_kv_t      kv;               /* device pointers */
    void           *hk, *hv;          /* host images, as stored */
    float          *hks, *hvs;        /* int8, fp8: the scales */
    float          *fk, *fv;          /* the same as F32 (filled caches) */
    size_t          k_elems, v_elems;
    size_t          n_sc;             /* scales of K (of V) */
} gc_a_cache_t;

/* the shape a check runs at */
typedef struct {
    uint32_t  hd, n_head, n_kv;
    int       dt;                     /* cache dtype */
    uint32_t  win;                    /* sliding window; 0: none */
    float     cap;                    /* score soft cap; 0: none */
} gc_a_shape_t;


/*
 * Builds a batch of runs over n_seq sequences whose contexts are ctx[s]
 * positions; tables take blocks from a shuffled list of n_blocks ids.
 * max_ctx: at least max pos + 1 (a graph's bucket may be larger).
 */
static int
gc_a_batch(gc_ctx_t *c, gc_bufs_t *b, gc_a_batch_t *bt, const gc_a_run_t *runs,
    uint32_t n_run, uint32_t n_seq, const uint32_t *ctx, uint32_t n_blocks,
    uint32_t vocab, uint32_t max_ctx, gc_rng_t *rng)
{
    int32_t   *dev, tmp;
    uint32_t   r, i, s, t, nb, *ids, need;
    size_t     words;

    memset(bt, 0, sizeof(*bt));

    for (r = 0; r < n_run; r++) {
        bt->n_tok += runs[r].len;
    }

    for (s = 0; s < n_seq; s++) {
        bt->n_table += (ctx[s] + GC_A_BT - 1) / GC_A_BT;
    }

    if (bt->n_table > n_blocks) {
        printf("  gpu_check: a test batch needs %u blocks of %u\n",
               bt->n_table, n_blocks);
        return -1;
    }

    bt->n_seq = n_seq;
    bt->n_run = n_run;

    words = 3 * (size_t) bt->n_tok + n_seq + bt->n_table + 2 * (size_t) n_run;
    bt->words = gc_alloc(words * 4);
    ids = gc_alloc((size_t) n_blocks * 4);
    if (bt->words == NULL || ids == NULL) {
        free(ids);
        return -1;
    }

    bt->tok = bt->words;
    bt->pos = bt->tok + bt->n_tok;
    bt->seq = bt->pos + bt->n_tok;
    bt->table_off = bt->seq + bt->n_tok;
    bt->table = bt->table_off + n_seq;
    bt->run_tok0 = bt->table + bt->n_table;
    bt->run_len = bt->run_tok0 + n_run;

    /* Fisher-Yates over every block id */
    for (i = 0; i < n_blocks; i++) {
        ids[i] = i;
    }
    for (i = n_blocks; i > 1; i--) {
        t = gc_rng_below(rng, i);
        tmp = (int32_t) ids[i - 1];
        ids[i - 1] = ids[t];
        ids[t] = (uint32_t) tmp;
    }

    need = 0;
    for (s = 0; s < n_seq; s++) {
        nb = (ctx[s] + GC_A_BT - 1) / GC_A_BT;
        bt->table_off[s] = (int32_t) need;
        for (i = 0; i < nb; i++) {
            bt->table[need + i] = (int32_t) ids[need + i];
        }
        need += nb;
    }

    t = 0;
    for (r = 0; r < n_run; r++) {
        bt->run_tok0[r] = (int32_t) t;
        bt->run_len[r] = (int32_t) runs[r].len;

        for (i = 0; i < runs[r].len; i++, t++) {
            if (runs[r].pos0 < 0) {
                bt->tok[t] = 0;
                bt->pos[t] = -1;
                bt->seq[t] = 0;
                continue;
            }

            bt->tok[t] = (int32_t) gc_rng_below(rng, vocab);
            bt->pos[t] = runs[r].pos0 + (int32_t) i;
            bt->seq[t] = (int32_t) runs[r].seq;

            if ((uint32_t) bt->pos[t] + 1 > bt->kb.max_ctx) {
                bt->kb.max_ctx = (uint32_t) bt->pos[t] + 1;
            }
        }
    }

    free(ids);

    if (max_ctx > bt->kb.max_ctx) {
        bt->kb.max_ctx = max_ctx;
    }

    dev = gc_buf_upload(c, b, bt->words, words * 4);
    if (dev == NULL) {
        return -1;
    }

    bt->kb.n_tok = bt->n_tok;
    bt->kb.n_seq = n_seq;
    bt->kb.n_run = n_run;
    bt->kb.tok = dev + (bt->tok - bt->words);
    bt->kb.pos = dev + (bt->pos - bt->words);
    bt->kb.seq = dev + (bt->seq - bt->words);
    bt->kb.table_off = dev + (bt->table_off - bt->words);
    bt->kb.table = dev + (bt->table - bt->words);
    bt->kb.run_tok0 = dev + (bt->run_tok0 - bt->words);
    bt->kb.run_len = dev + (bt->run_len - bt->words);

    return 0;
}


/* element index of (layer, sequence, position, column) in a cache */
static size_t
gc_a_at(const gc_a_batch_t *bt, const kvs_k_kv_t *kv, uint32_t width,
    uint32_t s, int32_t p, uint32_t col)
{
    size_t  blk;

    blk = (size_t) bt->table[bt->table_off[s] + p / GC_A_BT];

    return (((size_t) GC_A_LAYER * kv->n_blocks + blk) * GC_A_BT
            + (size_t) p % GC_A_BT) * width + col;
}


static int
gc_a_scaled(int dt)
{
    return dt == KVS_K_I8 || dt == KVS_K_FP8;
}


/* the scale index of element i of a cache of shape sh: its (layer,
 * block) and head */
static size_t
gc_a_sc(const gc_a_shape_t *sh, size_t i)
{
    size_t  kw;

    kw = (size_t) sh->n_kv * sh->hd;

    return i / (GC_A_BT * kw) * sh->n_kv + i % kw / sh->hd;
}


/* a cache of n_blocks blocks, random (fill) or poisoned */
static int
gc_a_cache(gc_ctx_t *c, gc_bufs_t *b, gc_a_cache_t *ca, const gc_a_shape_t *sh,
    uint32_t n_blocks, int fill, gc_rng_t *rng)
{
    size_t  es, i;

    memset(ca, 0, sizeof(*ca));

    ca->kv.dtype = sh->dt;
    ca->kv.n_layer = GC_A_LAYERS;
    ca->kv.n_blocks = n_blocks;
    ca->kv.block_tokens = GC_A_BT;
    ca->kv.n_head = sh->n_head;
    ca->kv.n_head_kv = sh->n_kv;
    ca->kv.hd_k = sh->hd;
    ca->kv.hd_v = sh->hd;

    es = gc_dtype_size(sh->dt);
    ca->k_elems = (size_t) GC_A_LAYERS * n_blocks * GC_A_BT * sh->n_kv
                  * sh->hd;
    ca->v_elems = ca->k_elems;

    ca->hk = gc_alloc(ca->k_elems * es);
    ca->hv = gc_alloc(ca->v_elems * es);
    if (ca->hk == NULL || ca->hv == NULL) {
        return -1;
    }

    /* int8 and fp8: random scales in [0.5, 2) over the largest code, on
     * the device before any element (a poisoned cache gets them too: a
     * write mid-block reads the block's scale) */
    if (gc_a_scaled(sh->dt)) {
        ca->n_sc = (size_t) GC_A_LAYERS * n_blocks * sh->n_kv;
        ca->hks = gc_alloc(ca->n_sc * 4);
        ca->hvs = gc_alloc(ca->n_sc * 4);
        if (ca->hks == NULL || ca->hvs == NULL) {
            return -1;
        }

        for (i = 0; i < ca->n_sc; i++) {
            ca->hks[i] = gc_rng_range(rng, 0.5f, 2.0f)
                         / (sh->dt == KVS_K_FP8 ? 448.0f : 127.0f);
            ca->hvs[i] = gc_rng_range(rng, 0.5f, 2.0f)
                         / (sh->dt == KVS_K_FP8 ? 448.0f : 127.0f);
        }

        ca->kv.ks = gc_buf_upload(c, b, ca->hks, ca->n_sc * 4);
        ca->kv.vs = gc_buf_upload(c, b, ca->hvs, ca->n_sc * 4);
        if (ca->kv.ks == NULL || ca->kv.vs == NULL) {
            return -1;
        }
    }

    if (fill) {
        ca->fk = gc_alloc(ca->k_elems * 4);
        ca->fv = gc_alloc(ca->v_elems * 4);
        if (ca->fk == NULL || ca->fv == NULL) {
            return -1;
        }

        gc_fill(ca->hk, sh->dt, ca->k_elems, rng, -1.0f, 1.0f);
        gc_fill(ca->hv, sh->dt, ca->v_elems, rng, -1.0f, 1.0f);

        for (i = 0; i < ca->k_elems; i++) {
            ca->fk[i] = gc_load(ca->hk, sh->dt, i);
            ca->fv[i] = gc_load(ca->hv, sh->dt, i);

            /* element i's (layer, block) and head: its scale */
            if (gc_a_scaled(sh->dt)) {
                ca->fk[i] *= ca->hks[gc_a_sc(sh, i)];
                ca->fv[i] *= ca->hvs[gc_a_sc(sh, i)];
            }
        }

        ca->kv.k = gc_buf_upload(c, b, ca->hk, ca->k_elems * es);
        ca->kv.v = gc_buf_upload(c, b, ca->hv, ca->v_elems * es);

    } else {
        ca->kv.k = gc_buf_poisoned(c, b, ca->k_elems * es);
        ca->kv.v = gc_buf_poisoned(c, b, ca->v_elems * es);
    }

    return ca->kv.k != NULL && ca->kv.v != NULL ? 0 : -1;
}


static void
gc_a_free(gc_a_batch_t *bt, gc_a_cache_t *ca, gc_bufs_t *b)
{
    free(bt->words);
    bt->words = NULL;
    free(ca->hk);
    free(ca->hv);
    free(ca->hks);
    free(ca->hvs);
    free(ca->fk);
    free(ca->fv);
    ca->hk = NULL;
    ca->hv = NULL;
    ca->hks = NULL;
    ca->hvs = NULL;
    ca->fk = NULL;
    ca->fv = NULL;
    gc_bufs_free(b);
}


/* --- rope_kv ------------------------------------------------------------ */

/* The layout of a shape's int8 / fp8 cache as the CPU backend keeps it
 * (kvs_kv_layout), into *lo; 0, or -1 when it refuses. */
static int
gc_a_layout(const gc_a_shape_t *sh, kvs_kv_layout_t *lo)
{
    kvs_err_t  err;

    if (kvs_kv_layout_init(lo, sh->dt == KVS_K_FP8 ? KVS_KV_FP8
                                                   : KVS_KV_INT8,
                           GC_A_LAYERS, sh->n_kv, sh->hd, sh->hd, GC_A_BT,
                           &err) != KVS_OK)
    {
        printf("  gpu_check: kvs_kv_layout_init: %s\n", err.msg);
        return -1;
    }

    return 0;
}


/* ca's host image (elements in hk / hv, scales in hks / hvs) as the CPU
 * backend's n_blocks blocks: a new allocation, NULL on failure. */
static uint8_t *
gc_a_blocks(const gc_a_cache_t *ca, const gc_a_shape_t *sh,
    uint32_t n_blocks)
{
    size_t           kw, src;
    uint8_t         *blk, *out;
    uint32_t         l, bk, u;
    kvs_kv_layout_t  lo;

    if (gc_a_layout(sh, &lo) != 0) {
        return NULL;
    }

    out = calloc(n_blocks, lo.block_bytes);
    if (out == NULL) {
        printf("  gpu_check: out of memory\n");
        return NULL;
    }

    kw = (size_t) sh->n_kv * sh->hd;

    for (bk = 0; bk < n_blocks; bk++) {
        blk = out + (size_t) bk * lo.block_bytes;

        for (l = 0; l < GC_A_LAYERS; l++) {
            src = (size_t) l * n_blocks + bk;

            for (u = 0; u < GC_A_BT; u++) {
                memcpy(blk + kvs_kv_layout_k(&lo, l, u),
                       (uint8_t *) ca->hk + (src * GC_A_BT + u) * kw, kw);
                memcpy(blk + kvs_kv_layout_v(&lo, l, u),
                       (uint8_t *) ca->hv + (src * GC_A_BT + u) * kw, kw);
            }

            memcpy(blk + kvs_kv_layout_ks(&lo, l),
                   ca->hks + src * sh->n_kv, sh->n_kv * sizeof(float));
            memcpy(blk + kvs_kv_layout_vs(&lo, l),
                   ca->hvs + src * sh->n_kv, sh->n_kv * sizeof(float));
        }
    }

    return out;
}


/*
 * An int8 / fp8 rope_kv's verdicts: q and the F32 rows it left in k and
 * v (kg, vg) against the reference (qr, kr, vr) within 1e-5; then the
 * CPU backend's writes of kg / vg, in batch order, into the cache's
 * start (blocks, as kvs_kv_layout lays them) against the kernel's cache
 * (ca, downloaded), every byte of every block: elements and scales.
 */
static void
gc_a_rope_bytes(gc_ctx_t *c, char *name, const gc_a_shape_t *sh,
    const gc_a_batch_t *bt, const gc_a_cache_t *ca, uint8_t *blocks,
    const float *qg, const float *kg, const float *vg, const float *qr,
    const float *kr, const float *vr)
{
    char             *tail;
    size_t            qw, kw, j, diff, n;
    int32_t           p;
    uint8_t          *got;
    uint32_t          t, blk;
    gc_err_t          eq, ekv;
    kvs_kv_layout_t   lo;

    qw = (size_t) sh->n_head * sh->hd;
    kw = (size_t) sh->n_kv * sh->hd;
    memset(&eq, 0, sizeof(eq));
    memset(&ekv, 0, sizeof(ekv));

    for (t = 0; t < bt->n_tok; t++) {
        p = bt->pos[t];

        if (p < 0) {
            continue;
        }

        for (j = 0; j < qw; j++) {
            gc_err_add(&eq, qg[t * qw + j], qr[t * qw + j]);
        }

        for (j = 0; j < kw; j++) {
            gc_err_add(&ekv, kg[t * kw + j], kr[t * kw + j]);
            gc_err_add(&ekv, vg[t * kw + j], vr[t * kw + j]);
        }
    }

    tail = name + strlen(name);
    snprintf(tail, 96 - (size_t) (tail - name), ": q");
    gc_check(c, "kern", name, gc_err_rel(&eq), eq.maxabs, 1e-5);
    snprintf(tail, 96 - (size_t) (tail - name), ": k/v rows (F32)");
    gc_check(c, "kern", name, gc_err_rel(&ekv), ekv.maxabs, 1e-5);

    /* the CPU backend's writes, in batch order, over the same start */
    if (gc_a_layout(sh, &lo) != 0) {
        gc_fail(c, "kern", name, "no layout");
        return;
    }

    for (t = 0; t < bt->n_tok; t++) {
        p = bt->pos[t];

        if (p < 0) {
            continue;
        }

        blk = (uint32_t) bt->table[bt->table_off[bt->seq[t]] + p / GC_A_BT];
        kvs_cpu_block_write(&lo, blocks + (size_t) blk * lo.block_bytes,
                            GC_A_LAYER, (uint32_t) p % GC_A_BT, 0,
                            kg + (size_t) t * kw);
        kvs_cpu_block_write(&lo, blocks + (size_t) blk * lo.block_bytes,
                            GC_A_LAYER, (uint32_t) p % GC_A_BT, 1,
                            vg + (size_t) t * kw);
    }

    got = gc_a_blocks(ca, sh, ca->kv.n_blocks);
    if (got == NULL) {
        gc_fail(c, "kern", name, "out of memory");
        return;
    }

    n = (size_t) ca->kv.n_blocks * lo.block_bytes;
    diff = 0;

    for (j = 0; j < n; j++) {
        diff += got[j] != blocks[j];
    }

    if (diff != 0) {
        printf("  %s: %zu of %zu bytes differ from the CPU backend's\n",
               name, diff, n);
    }

    snprintf(tail, 96 - (size_t) (tail - name), ": cache = CPU's bytes");
    gc_check(c, "kern", name, diff != 0 ? INFINITY : 0.0, (double) diff,
             0.0);
    free(got);
}


typedef struct {
    gc_a_shape_t  sh;
    uint32_t      n_rot;
    int           pairing;
    int           bias;
    int           yarn;
    double        base;
} gc_a_rope_case_t;


static int
gc_a_rope_one(gc_ctx_t *c, const gc_a_rope_case_t *rc, gc_rng_t *rng)
{
    static const gc_a_run_t  runs[] = {
        { 0, 37, 1 }, { 1, 20, 33 }, { 2, 0, 1 }, { 3, 0, 17 },
        { 0, -1, 1 }, { 0, -1, 1 }, { 0, -1, 1 },
    };
    static const uint32_t    ctx[4] = { 38, 53, 1, 17 };

    int            ok;
    char           name[96];
    float         *q, *k, *v, *bq, *bk, *bv, *qr, *kr, *vr, *qg;
    float         *dq, *dk, *dv, *dbq, *dbk, *dbv, *kvg;
    void          *gk, *gv;
    double        *dinv;
    size_t         es, i, j, t, qw, kw, at, changed;
    uint8_t       *wk, *start;
    uint32_t       nt;
    kvs_err_t      err;
    gc_err_t       eq, ek, ev;
    gc_bufs_t      b;
    kvs_rope_t     rope;
    gc_a_cache_t   ca;
    gc_a_batch_t   bt;
    kvs_hparams_t  hp;

    memset(&b, 0, sizeof(b));
    memset(&bt, 0, sizeof(bt));
    memset(&ca, 0, sizeof(ca));

    snprintf(name, sizeof(name), "rope_kv hd=%u heads=%u/%u rot=%u %s %s%s"
             "%s", rc->sh.hd, rc->sh.n_head, rc->sh.n_kv, rc->n_rot,
             rc->pairing == KVS_ROPE_NEOX ? "neox" : "norm",
             gc_dtype_name(rc->sh.dt), rc->yarn ? " yarn" : "",
             rc->bias ? " bias" : "");

    memset(&hp, 0, sizeof(hp));
    hp.n_rot = rc->n_rot;
    hp.head_dim_k = rc->sh.hd;
    hp.head_dim_v = rc->sh.hd;
    hp.rope_freq_base = rc->base;
    hp.n_ctx_train = 4096;

    if (rc->yarn) {
        hp.rope_scaling = KVS_ROPE_SCALING_YARN;
        hp.rope_factor = 4.0;
        hp.rope_orig_ctx = 4096;
        hp.rope_attn_factor = 1.0;
        hp.rope_beta_fast = 32.0;
        hp.rope_beta_slow = 1.0;
    }

    if (kvs_rope_init(&rope, &hp, &err) != KVS_OK) {
        printf("  %s: kvs_rope_init: %s\n", name, err.msg);
        return -1;
    }

    qw = (size_t) rc->sh.n_head * rc->sh.hd;
    kw = (size_t) rc->sh.n_kv * rc->sh.hd;
    es = gc_dtype_size(rc->sh.dt);

    if (gc_a_batch(c, &b, &bt, runs, 7, 4, ctx, 24, 512, 0, rng) != 0
        || gc_a_cache(c, &b, &ca, &rc->sh, 24, gc_a_scaled(rc->sh.dt), rng)
           != 0)
    {
        kvs_rope_free(&rope);
        gc_a_free(&bt, &ca, &b);
        return -1;
    }

    /* int8, fp8: the cache's random start, for the CPU's replay */
    start = NULL;
    kvg = NULL;

    if (gc_a_scaled(rc->sh.dt)) {
        start = gc_a_blocks(&ca, &rc->sh, 24);
        if (start == NULL) {
            kvs_rope_free(&rope);
            gc_a_free(&bt, &ca, &b);
            return -1;
        }
    }

    /* q, qr, qg [nt][qw]; k, v, kr, vr [nt][kw]; bq [qw]; bk, bv [kw]:
     * one allocation */
    nt = bt.n_tok;
    q = gc_alloc(((3 * nt + 1) * qw + (4 * nt + 2) * kw) * 4);
    wk = calloc(ca.k_elems, 1);
    ok = q != NULL && wk != NULL;

    qr = ok ? q + nt * qw : NULL;
    qg = ok ? qr + nt * qw : NULL;
    bq = ok ? qg + nt * qw : NULL;
    k = ok ? bq + qw : NULL;
    v = ok ? k + nt * kw : NULL;
    kr = ok ? v + nt * kw : NULL;
    vr = ok ? kr + nt * kw : NULL;
    bk = ok ? vr + nt * kw : NULL;
    bv = ok ? bk + kw : NULL;

    if (ok) {
        gc_fill(q, KVS_K_F32, nt * qw, rng, -1.0f, 1.0f);
        gc_fill(k, KVS_K_F32, nt * kw, rng, -1.0f, 1.0f);
        gc_fill(v, KVS_K_F32, nt * kw, rng, -1.0f, 1.0f);
        gc_fill(bq, KVS_K_F32, qw, rng, -0.5f, 0.5f);
        gc_fill(bk, KVS_K_F32, kw, rng, -0.5f, 0.5f);
        gc_fill(bv, KVS_K_F32, kw, rng, -0.5f, 0.5f);

        dq = gc_buf_upload(c, &b, q, nt * qw * 4);
        dk = gc_buf_upload(c, &b, k, nt * kw * 4);
        dv = gc_buf_upload(c, &b, v, nt * kw * 4);
        dbq = rc->bias ? gc_buf_upload(c, &b, bq, qw * 4) : NULL;
        dbk = rc->bias ? gc_buf_upload(c, &b, bk, kw * 4) : NULL;
        dbv = rc->bias ? gc_buf_upload(c, &b, bv, kw * 4) : NULL;
        dinv = gc_buf_upload(c, &b, rope.inv_freq,
                             (size_t) rc->n_rot / 2 * sizeof(double));

        ok = dq && dk && dv && dinv && (!rc->bias || (dbq && dbk && dbv))
             && gc_launched(c, kvs_k_rope_kv(&ca.kv, GC_A_LAYER, &bt.kb, dq,
                                             dk, dv, dbq, dbk, dbv, dinv,
                                             rc->n_rot, rope.mscale,
                                             rc->pairing, 0), name) == 0
             && gc_download(c, qg, dq, nt * qw * 4) == 0
             && gc_download(c, ca.hk, ca.kv.k, ca.k_elems * es) == 0
             && gc_download(c, ca.hv, ca.kv.v, ca.v_elems * es) == 0;
    }

    /* int8, fp8: the scales, and the F32 rows left in k and v */
    if (ok && gc_a_scaled(rc->sh.dt)) {
        kvg = gc_alloc(2 * nt * kw * 4);
        ok = kvg != NULL
             && gc_download(c, ca.hks, ca.kv.ks, ca.n_sc * 4) == 0
             && gc_download(c, ca.hvs, ca.kv.vs, ca.n_sc * 4) == 0
             && gc_download(c, kvg, dk, nt * kw * 4) == 0
             && gc_download(c, kvg + nt * kw, dv, nt * kw * 4) == 0;
    }

    if (!ok) {
        gc_fail(c, "kern", name, "launch refused or failed");
        goto done;
    }

    /* the reference: bias, then the CPU's own rotation */
    for (t = 0; t < nt; t++) {
        for (j = 0; j < qw; j++) {
            qr[t * qw + j] = q[t * qw + j] + (rc->bias ? bq[j] : 0.0f);
        }
        for (j = 0; j < kw; j++) {
            kr[t * kw + j] = k[t * kw + j] + (rc->bias ? bk[j] : 0.0f);
            vr[t * kw + j] = v[t * kw + j] + (rc->bias ? bv[j] : 0.0f);
        }
        if (bt.pos[t] >= 0) {
            kvs_rope_apply(&rope, qr + t * qw, (int) rc->sh.n_head,
                           (int) rc->sh.hd, bt.pos[t], rc->pairing);
            kvs_rope_apply(&rope, kr + t * kw, (int) rc->sh.n_kv,
                           (int) rc->sh.hd, bt.pos[t], rc->pairing);
        }
    }

    memset(&eq, 0, sizeof(eq));
    memset(&ek, 0, sizeof(ek));
    memset(&ev, 0, sizeof(ev));

    if (gc_a_scaled(rc->sh.dt)) {
        gc_a_rope_bytes(c, name, &rc->sh, &bt, &ca, start, qg, kvg,
                        kvg + nt * kw, qr, kr, vr);
        goto done;
    }

    for (t = 0; t < nt; t++) {
        if (bt.pos[t] < 0) {
            continue;                 /* padding: q rows unspecified */
        }

        for (j = 0; j < qw; j++) {
            gc_err_add(&eq, qg[t * qw + j], qr[t * qw + j]);
        }

        for (j = 0; j < kw; j++) {
            at = gc_a_at(&bt, &ca.kv, (uint32_t) kw, (uint32_t) bt.seq[t],
                         bt.pos[t], (uint32_t) j);
            wk[at] = 1;
            gc_err_add(&ek, gc_load(ca.hk, rc->sh.dt, at), kr[t * kw + j]);
            gc_err_add(&ev, gc_load(ca.hv, rc->sh.dt, at), vr[t * kw + j]);
        }
    }

    /* every slot not written, padding's and other layers' included, must
     * still hold the poison */
    changed = 0;
    for (i = 0; i < ca.k_elems; i++) {
        if (wk[i]) {
            continue;
        }
        gk = (uint8_t *) ca.hk + i * es;
        gv = (uint8_t *) ca.hv + i * es;
        for (j = 0; j < es; j++) {
            changed += ((uint8_t *) gk)[j] != 0xFF || ((uint8_t *) gv)[j]
                                                      != 0xFF;
        }
    }

    if (changed != 0) {
        printf("  %s: %zu bytes of the cache outside the batch's slots "
               "changed\n", name, changed);
    }

    /* q stays F32; K and V are judged by the cache's dtype */
    snprintf(name + strlen(name), sizeof(name) - strlen(name), ": q");
    gc_check(c, "kern", name, gc_err_rel(&eq), eq.maxabs, 1e-5);
    name[strlen(name) - 1] = '\0';
    snprintf(name + strlen(name), sizeof(name) - strlen(name), "k/v");
    gc_check(c, "kern", name, changed ? INFINITY
                                      : fmax(gc_err_rel(&ek), gc_err_rel(&ev)),
             fmax(ek.maxabs, ev.maxabs), gc_dtype_tol(rc->sh.dt));

done:

    free(q);
    free(wk);
    free(start);
    free(kvg);
    kvs_rope_free(&rope);
    gc_a_free(&bt, &ca, &b);

    return c->dead ? -1 : 0;
}


/* --- attention ---------------------------------------------------------- */

/*
 * The reference for token t: each head attends positions p0..pos of its
 * sequence in the stored K/V (p0 = pos + 1 - win once pos >= win, the
 * CPU backend's rule; else 0), scores capped to cap tanh(s / cap) when
 * cap != 0, softmax in double.  out [n_head * hd].
 */
static void
gc_a_attend(const gc_a_batch_t *bt, const gc_a_cache_t *ca, const float *q,
    uint32_t t, double scale, uint32_t win, double cap, double *out,
    double *sc)
{
    int32_t          p, p0, pos;
    uint32_t         h, kvh, j, s, hd, kw;
    size_t           at;
    double           mx, sum, dot;
    const kvs_k_kv_t *kv;

    kv = &ca->kv;
    hd = kv->hd_k;
    kw = kv->n_head_kv * hd;
    pos = bt->pos[t];
    s = (uint32_t) bt->seq[t];
    p0 = win != 0 && (uint32_t) pos >= win ? pos + 1 - (int32_t) win : 0;

    for (h = 0; h < kv->n_head; h++) {
        kvh = h / (kv->n_head / kv->n_head_kv);
        mx = -INFINITY;

        for (p = p0; p <= pos; p++) {
            at = gc_a_at(bt, kv, kw, s, p, kvh * hd);
            dot = 0.0;
            for (j = 0; j < hd; j++) {
                dot += (double) q[(size_t) t * kv->n_head * hd + h * hd + j]
                       * ca->fk[at + j];
            }
            sc[p] = dot * scale;
            sc[p] = cap != 0.0 ? cap * tanh(sc[p] / cap) : sc[p];
            mx = fmax(mx, sc[p]);
        }

        sum = 0.0;
        for (p = p0; p <= pos; p++) {
            sc[p] = exp(sc[p] - mx);
            sum += sc[p];
        }

        for (j = 0; j < hd; j++) {
            out[h * hd + j] = 0.0;
        }

        for (p = p0; p <= pos; p++) {
            at = gc_a_at(bt, kv, kw, s, p, kvh * hd);
            for (j = 0; j < hd; j++) {
                out[h * hd + j] += sc[p] / sum * ca->fv[at + j];
            }
        }
    }
}


/*
 * One attention check: decode (n_split > 0) or prefill (n_split == 0)
 * over runs; rows of the other kind are not compared (unspecified).
 */
static int
gc_a_attn_one(gc_ctx_t *c, const gc_a_shape_t *sh, const gc_a_run_t *runs,
    uint32_t n_run, const uint32_t *ctx, uint32_t n_seq,
    const uint32_t *splits, uint32_t n_splits, uint32_t max_ctx,
    gc_rng_t *rng)
{
    int            ok, decode;
    char           name[128];
    float         *q, *out, *dq, *dout, *dpart;
    double        *ref, *sc, scale, tol;
    size_t         ow, qw;
    uint32_t       si, r, t, j, nb, maxpos, ns;
    gc_err_t       e;
    gc_bufs_t      b;
    gc_a_cache_t   ca;
    gc_a_batch_t   bt;

    memset(&b, 0, sizeof(b));

    decode = n_splits > 0;
    nb = 0;
    maxpos = 0;
    for (r = 0; r < n_seq; r++) {
        nb += (ctx[r] + GC_A_BT - 1) / GC_A_BT;
        maxpos = ctx[r] > maxpos ? ctx[r] : maxpos;
    }
    nb += nb / 2 + 3;                 /* blocks nobody's table holds */

    if (gc_a_batch(c, &b, &bt, runs, n_run, n_seq, ctx, nb, 512, max_ctx,
                   rng) != 0
        || gc_a_cache(c, &b, &ca, sh, nb, 1, rng) != 0)
    {
        gc_a_free(&bt, &ca, &b);
        return -1;
    }

    qw = (size_t) sh->n_head * sh->hd;
    ow = qw;
    scale = 1.0 / sqrt((double) sh->hd);
    /* F32 K/V: F32 arithmetic; F16 / BF16: products may round to them;
     * int8 / fp8: F32 arithmetic over the decoded codes and scales, a
     * few more roundings (the scales) than F32's */
    tol = sh->dt == KVS_K_F32 ? 1e-5 : gc_a_scaled(sh->dt) ? 1e-4 : 1e-2;

    q = gc_alloc(bt.n_tok * qw * 4);
    out = gc_alloc(bt.n_tok * ow * 4);
    ref = gc_alloc(bt.n_tok * ow * 8);
    sc = gc_alloc((size_t) maxpos * 8 + 8);
    ok = q && out && ref && sc;

    if (ok) {
        /* wide enough that softmax is far from uniform */
        gc_fill(q, KVS_K_F32, bt.n_tok * qw, rng, -4.0f, 4.0f);

        for (t = 0; t < bt.n_tok; t++) {
            if (bt.pos[t] >= 0) {
                gc_a_attend(&bt, &ca, q, t, scale, sh->win, sh->cap,
                            ref + t * ow, sc);
            }
        }

        dq = gc_buf_upload(c, &b, q, bt.n_tok * qw * 4);
        ok = dq != NULL;
    }

    ns = decode ? n_splits : 1;

    for (si = 0; ok && si < ns; si++) {
        if (decode) {
            snprintf(name, sizeof(name), "attn_decode hd=%u heads=%u/%u %s "
                     "ctx<=%u max_ctx=%u split=%u win=%u cap=%g", sh->hd,
                     sh->n_head, sh->n_kv, gc_dtype_name(sh->dt), maxpos,
                     bt.kb.max_ctx, splits[si], sh->win, (double) sh->cap);
        } else {
            snprintf(name, sizeof(name), "attn_prefill hd=%u heads=%u/%u %s "
                     "ctx<=%u win=%u cap=%g", sh->hd, sh->n_head, sh->n_kv,
                     gc_dtype_name(sh->dt), maxpos, sh->win,
                     (double) sh->cap);
        }

        dout = gc_buf_poisoned(c, &b, bt.n_tok * ow * 4);
        dpart = decode ? gc_buf_poisoned(c, &b, kvs_k_attn_part_floats(
                             bt.n_tok, sh->n_head, splits[si], sh->hd) * 4)
                       : NULL;

        if (dout == NULL || (decode && dpart == NULL)
            || gc_launched(c, decode
                              ? kvs_k_attn_decode(dout, dq, &ca.kv,
                                                  GC_A_LAYER, &bt.kb,
                                                  (float) scale, sh->win,
                                                  sh->cap, splits[si],
                                                  dpart, 0)
                              : kvs_k_attn_prefill(dout, dq, &ca.kv,
                                                   GC_A_LAYER, &bt.kb,
                                                   (float) scale, sh->win,
                                                   sh->cap, 0), name)
            || gc_download(c, out, dout, bt.n_tok * ow * 4))
        {
            gc_fail(c, "kern", name, "launch refused or failed");
            if (c->dead) {
                break;
            }
            continue;
        }

        memset(&e, 0, sizeof(e));
        for (r = 0; r < bt.n_run; r++) {
            if ((bt.run_len[r] == 1) != decode) {
                continue;
            }
            for (t = (uint32_t) bt.run_tok0[r];
                 t < (uint32_t) (bt.run_tok0[r] + bt.run_len[r]); t++)
            {
                if (bt.pos[t] < 0) {
                    continue;
                }
                for (j = 0; j < ow; j++) {
                    gc_err_add(&e, out[t * ow + j], ref[t * ow + j]);
                }
            }
        }

        gc_check(c, "kern", name, gc_err_rel(&e), e.maxabs, tol);
    }

    free(q);
    free(out);
    free(ref);
    free(sc);
    gc_a_free(&bt, &ca, &b);

    return c->dead ? -1 : 0;
}


int
gc_attn_run(gc_ctx_t *c)
{
    size_t    i;
    gc_rng_t  rng;

    /* stories260K: hd 8, 8 heads, 4 KV heads; Llama 3 8B: 128, 32, 8;
     * Qwen2 0.5B: 64, 14, 2 (groups of 7) */
    static const gc_a_shape_t  st_f32 = { 8, 8, 4, KVS_K_F32, 0, 0 };
    static const gc_a_shape_t  l3_bf16 = { 128, 32, 8, KVS_K_BF16, 0, 0 };
    static const gc_a_shape_t  l3_f32 = { 128, 32, 8, KVS_K_F32, 0, 0 };
    static const gc_a_shape_t  qw_f16 = { 64, 14, 2, KVS_K_F16, 0, 0 };
    /* gemma2 2B's heads (256 wide, 8 over 4) with a window shorter than
     * a block, a split and a prefill chunk, and its score cap of 50;
     * gemma3-like 128 wide with a window across several blocks, no cap;
     * a window of one position (each token sees only itself) */
    static const gc_a_shape_t  g2_bf16 = { 256, 8, 4, KVS_K_BF16, 37,
                                           50.0f };
    static const gc_a_shape_t  g3_f32 = { 128, 16, 8, KVS_K_F32, 300, 0 };
    static const gc_a_shape_t  w1_f32 = { 8, 8, 4, KVS_K_F32, 1, 0 };
    /* int8 and fp8: Llama 3's heads, Qwen2's groups of 7, stories260K's
     * heads of 8 (the smallest the kernels take), gemma2's 256 wide with
     * its window and cap */
    static const gc_a_shape_t  l3_i8 = { 128, 32, 8, KVS_K_I8, 0, 0 };
    static const gc_a_shape_t  qw_fp8 = { 64, 14, 2, KVS_K_FP8, 0, 0 };
    static const gc_a_shape_t  st_i8 = { 8, 8, 4, KVS_K_I8, 0, 0 };
    static const gc_a_shape_t  st_fp8 = { 8, 8, 4, KVS_K_FP8, 0, 0 };
    static const gc_a_shape_t  g2_fp8 = { 256, 8, 4, KVS_K_FP8, 37, 50.0f };
    static const gc_a_shape_t  l3_fp8 = { 128, 32, 8, KVS_K_FP8, 0, 0 };

    static const gc_a_rope_case_t  ropes[] = {
        { { 8, 8, 4, KVS_K_F32, 0, 0 }, 8, KVS_ROPE_NORM, 0, 0,
          10000.0 },
        { { 128, 32, 8, KVS_K_BF16, 0, 0 }, 128, KVS_ROPE_NORM, 0, 1,
          500000.0 },
        { { 64, 14, 2, KVS_K_BF16, 0, 0 }, 64, KVS_ROPE_NEOX, 1, 1,
          1000000.0 },
        { { 128, 8, 8, KVS_K_F16, 0, 0 }, 64, KVS_ROPE_NEOX, 0, 0,
          10000.0 },
        { { 128, 32, 8, KVS_K_F32, 0, 0 }, 128, KVS_ROPE_NORM, 1, 1,
          500000.0 },
        { { 128, 32, 8, KVS_K_I8, 0, 0 }, 128, KVS_ROPE_NORM, 1, 1,
          500000.0 },
        { { 64, 14, 2, KVS_K_FP8, 0, 0 }, 64, KVS_ROPE_NEOX, 1, 1,
          1000000.0 },
        { { 8, 8, 4, KVS_K_I8, 0, 0 }, 8, KVS_ROPE_NORM, 0, 0, 10000.0 },
        { { 256, 8, 4, KVS_K_FP8, 0, 0 }, 128, KVS_ROPE_NEOX, 0, 0,
          10000.0 },
    };

    /* decodes at positions 0, at and past block edges, long; a prefill
     * run the decode kernel must skip; padding at the end */
    static const gc_a_run_t  d1[] = {
        { 0, 0, 1 }, { 1, 5, 1 }, { 2, 47, 1 }, { 3, 130, 1 },
        { 4, 10, 10 }, { 0, -1, 1 }, { 0, -1, 1 },
    };
    static const uint32_t    d1_ctx[] = { 1, 6, 48, 131, 20 };
    static const gc_a_run_t  d2[] = {
        { 0, 0, 1 }, { 1, 15, 1 }, { 2, 16, 1 }, { 3, 700, 1 },
        { 4, 1999, 1 }, { 0, -1, 1 },
    };
    static const uint32_t    d2_ctx[] = { 1, 16, 17, 701, 2000 };
    static const gc_a_run_t  d3[] = {
        { 0, 3, 1 }, { 1, 300, 1 }, { 2, 64, 1 }, { 0, -1, 1 },
    };
    static const uint32_t    d3_ctx[] = { 4, 301, 65 };
    static const gc_a_run_t  d4[] = { { 0, 1023, 1 }, { 1, 4095, 1 } };
    static const uint32_t    d4_ctx[] = { 1024, 4096 };

    static const uint32_t    s1[] = { 1, 3 };
    static const uint32_t    s2[] = { 1, 4, 16 };
    static const uint32_t    s3[] = { 1, 5 };
    static const uint32_t    s4[] = { 8 };

    /* chunks after cached positions (off and on block edges), from 0,
     * and a decode the prefill kernel must skip */
    static const gc_a_run_t  p1[] = {
        { 0, 37, 40 }, { 1, 0, 21 }, { 2, 9, 1 },
    };
    static const uint32_t    p1_ctx[] = { 77, 21, 10 };
    static const gc_a_run_t  p2[] = {
        { 0, 100, 64 }, { 1, 16, 129 }, { 2, 1000, 70 },
    };
    static const uint32_t    p2_ctx[] = { 164, 145, 1070 };
    static const gc_a_run_t  p3[] = { { 0, 5, 296 }, { 1, 77, 1 } };
    static const uint32_t    p3_ctx[] = { 301, 78 };

    rng.s = c->seed ^ 0x6174746eull;

    for (i = 0; i < sizeof(ropes) / sizeof(ropes[0]); i++) {
        if (gc_a_rope_one(c, &ropes[i], &rng) != 0) {
            return -1;
        }
    }

    if (gc_a_attn_one(c, &st_f32, d1, 7, d1_ctx, 5, s1, 2, 0, &rng)
        || gc_a_attn_one(c, &st_f32, d1, 7, d1_ctx, 5, s1, 2, 256, &rng)
        || gc_a_attn_one(c, &l3_bf16, d2, 6, d2_ctx, 5, s2, 3, 0, &rng)
        || gc_a_attn_one(c, &l3_bf16, d2, 6, d2_ctx, 5, s2, 3, 2048, &rng)
        || gc_a_attn_one(c, &qw_f16, d3, 4, d3_ctx, 3, s3, 2, 0, &rng)
        || gc_a_attn_one(c, &l3_f32, d4, 2, d4_ctx, 2, s4, 1, 0, &rng)
        || gc_a_attn_one(c, &st_f32, p1, 3, p1_ctx, 3, NULL, 0, 0, &rng)
        || gc_a_attn_one(c, &l3_bf16, p2, 3, p2_ctx, 3, NULL, 0, 0, &rng)
        || gc_a_attn_one(c, &qw_f16, p3, 2, p3_ctx, 2, NULL, 0, 0, &rng)
        || gc_a_attn_one(c, &g2_bf16, d2, 6, d2_ctx, 5, s2, 3, 0, &rng)
        || gc_a_attn_one(c, &g2_bf16, d2, 6, d2_ctx, 5, s2, 3, 2048, &rng)
        || gc_a_attn_one(c, &g3_f32, d2, 6, d2_ctx, 5, s2, 3, 0, &rng)
        || gc_a_attn_one(c, &w1_f32, d1, 7, d1_ctx, 5, s1, 2, 0, &rng)
        || gc_a_attn_one(c, &g2_bf16, p2, 3, p2_ctx, 3, NULL, 0, 0, &rng)
        || gc_a_attn_one(c, &g3_f32, p3, 2, p3_ctx, 2, NULL, 0, 0, &rng)
        || gc_a_attn_one(c, &w1_f32, p1, 3, p1_ctx, 3, NULL, 0, 0, &rng)
        || gc_a_attn_one(c, &l3_i8, d2, 6, d2_ctx, 5, s2, 3, 0, &rng)
        || gc_a_attn_one(c, &l3_fp8, d2, 6, d2_ctx, 5, s2, 3, 2048, &rng)
        || gc_a_attn_one(c, &qw_fp8, d3, 4, d3_ctx, 3, s3, 2, 0, &rng)
        || gc_a_attn_one(c, &st_i8, d1, 7, d1_ctx, 5, s1, 2, 0, &rng)
        || gc_a_attn_one(c, &st_fp8, d1, 7, d1_ctx, 5, s1, 2, 256, &rng)
        || gc_a_attn_one(c, &g2_fp8, d2, 6, d2_ctx, 5, s2, 3, 0, &rng)
        || gc_a_attn_one(c, &l3_i8, p2, 3, p2_ctx, 3, NULL, 0, 0, &rng)
        || gc_a_attn_one(c, &qw_fp8, p3, 2, p3_ctx, 2, NULL, 0, 0, &rng)
        || gc_a_attn_one(c, &st_fp8, p1, 3, p1_ctx, 3, NULL, 0, 0, &rng)
        || gc_a_attn_one(c, &g2_fp8, p2, 3, p2_ctx, 3, NULL, 0, 0, &rng))
    {
        return -1;
    }

    return 0;
}
