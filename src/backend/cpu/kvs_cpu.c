/*
 * kvs_cpu: K/V storage and the forward step of the CPU backend (see
 * kvs_cpu.h); the weights live in kvs_cpu_model.c, the products in
 * kvs_cpu_mm.c / kvs_cpu_x86.c, attention in kvs_cpu_attn.c, SwiGLU in
 * kvs_cpu_ffn.c (kvs_cpu_impl.h lists them).  The order of operations follows llama2.c run.c so that
 * stories260K reproduces its reference texts.
 *
 * Threads: every heavy part runs as tasks of kv's pool: product tiles of
 * output rows, attention per (token, head group), per-token norms, RoPE,
 * K/V writes and SwiGLU; a part too small to pay for waking a worker runs
 * on the caller.  Per-thread scratch (scores, weight rows) sits in
 * kv->act.
 *
 * A step runs layer by layer over the whole batch: every token's K and V
 * of a layer are written to their slots before any token of that layer
 * attends, so a prefill chunk sees its own earlier positions and a decode
 * token the cache, with no special case for either.
 *
 * Packed weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL on AVX-512 VNNI
 * CPUs) are made once in kvs_cpu_model_new() (kvs_cpu_model.c), into
 * one buffer that the model owns; a mat's data keeps pointing into the
 * mapping for every other kernel level.
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "base/kvs_threads.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "kvs_cpu_amx.h"
#include "kvs_cpu_impl.h"
#include "kvs_cpu_qdot.h"


/* OpenBLAS's own; declared here so that any cblas.h will do.  Our pool
 * splits the work, so OpenBLAS must not start threads of its own. */
void openblas_set_num_threads(int n);

/* Tokens per kvs_cpu_tok_task: their norms' sums run interleaved. */
#define KVS_CPU_TOK_GROUP  8


static void kvs_cpu_rmsnorm(float *o, const float *x, const float *w,
    uint32_t size, float eps);
static void kvs_cpu_rmsnorm_rows(float *o, const float *x, const float *w,
    uint32_t e, float eps, uint32_t nt);
static void kvs_cpu_tok_task(void *arg, uint32_t group, uint32_t thread);
static void kvs_cpu_qkv_task(void *arg, uint32_t i, uint32_t thread);
static int kvs_cpu_check_batch(const kvs_cpu_model_t *cm,
    const kvs_cpu_kv_t *kv, const kvs_batch_t *b, uint32_t *max_ctx,
    kvs_err_t *err);


int
kvs_cpu_kv_new(kvs_cpu_kv_t **out, const kvs_cpu_model_t *cm,
    uint32_t n_blocks, uint32_t block_tokens, kvs_err_t *err)
{
    return kvs_cpu_kv_new_dtype(out, cm, n_blocks, block_tokens, KVS_KV_F32,
                                err);
}


int
kvs_cpu_kv_new_dtype(kvs_cpu_kv_t **out, const kvs_cpu_model_t *cm,
    uint32_t n_blocks, uint32_t block_tokens, uint32_t dtype,
    kvs_err_t *err)
{
    int              rc;
    kvs_cpu_kv_t    *kv;
    kvs_kv_layout_t  lo;

    *out = NULL;

    if (n_blocks == 0 || block_tokens == 0) {
        return kvs_err_set(err, KVS_EINVAL, "cpu kv: %" PRIu32 " blocks "
                           "of %" PRIu32 " tokens", n_blocks, block_tokens);
    }

    if (dtype > KVS_KV_DTYPE_MAX) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "cpu kv: the CPU backend "
                           "cannot store a \"%s\" KV cache (it stores "
                           "f32, f16, bf16, int8 or fp8)",
                           kvs_kv_dtype_name(dtype));
    }

    rc = kvs_kv_layout_init(&lo, dtype, cm->hp.n_layer, cm->hp.n_head_kv,
                            cm->hp.head_dim_k, cm->hp.head_dim_v,
                            block_tokens, err);
    if (rc != KVS_OK) {
        return rc;
    }

    if (lo.block_bytes > SIZE_MAX / n_blocks) {
        return kvs_err_set(err, KVS_ERANGE, "cpu kv: %" PRIu32 " blocks "
                           "of %" PRIu32 " tokens overflow the address "
                           "space", n_blocks, block_tokens);
    }

    kv = calloc(1, sizeof(kvs_cpu_kv_t));
    if (kv == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cpu kv: out of memory");
    }

    /* idempotent; here rather than at load so that nothing runs then */
    openblas_set_num_threads(1);

    kv->n_layer = cm->hp.n_layer;
    kv->n_blocks = n_blocks;
    kv->block_tokens = block_tokens;
    kv->k_width = cm->hp.k_width;
    kv->v_width = cm->hp.v_width;
    kv->lo = lo;

    /* zeroed: a block never written reads as zeros, scales included */
    kv->mem = calloc(n_blocks, (size_t) lo.block_bytes);

    if (kv->mem == NULL) {
        kvs_cpu_kv_free(kv);
        return kvs_err_set(err, KVS_ENOMEM, "cpu kv: out of memory for "
                           "%" PRIu32 " blocks of %" PRIu64 " bytes",
                           n_blocks, lo.block_bytes);
    }

    *out = kv;

    return KVS_OK;
}


void
kvs_cpu_kv_free(kvs_cpu_kv_t *kv)
{
    if (kv == NULL) {
        return;
    }

    kvs_threads_free(kv->threads);
    kvs_cpu_kv_lora_free(kv);
    free(kv->mem);
    free(kv->act);
    free(kv);
}


int
kvs_cpu_kv_set_threads(kvs_cpu_kv_t *kv, unsigned n, kvs_err_t *err)
{
    int             rc;
    kvs_threads_t  *tp;

    if (n == kvs_threads_count(kv->threads)) {
        return KVS_OK;
    }

    tp = NULL;

    if (n != 1) {
        rc = kvs_threads_new(&tp, n, err);
        if (rc != KVS_OK) {
            (void) kvs_err_prefix(err, "cpu kv");
            return rc;
        }
    }

    kvs_threads_free(kv->threads);
    kv->threads = tp;

    return KVS_OK;
}



/* o = w * x / sqrt(mean(x^2) + eps), as run.c rounds it (float sums):
 * one row of kvs_cpu_rmsnorm_rows. */
static void
kvs_cpu_rmsnorm(float *o, const float *x, const float *w, uint32_t size,
    float eps)
{
    kvs_cpu_rmsnorm_rows(o, x, w, size, eps, 1);
}


/* ss[t] = the sum of squares of row t (at x + t * e) for t < NT (a
 * constant once inlined, so that the sums stay in registers), each in
 * column order. */
static inline __attribute__((always_inline)) void
kvs_cpu_sumsq_rows(float *ss, const float *x, uint32_t e, const uint32_t NT)
{
    float     acc[KVS_CPU_TOK_GROUP];
    uint32_t  j, t;

#pragma GCC unroll 8
    for (t = 0; t < NT; t++) {
        acc[t] = 0.0f;
    }

    for (j = 0; j < e; j++) {
#pragma GCC unroll 8
        for (t = 0; t < NT; t++) {
            acc[t] += x[(size_t) t * e + j] * x[(size_t) t * e + j];
        }
    }

#pragma GCC unroll 8
    for (t = 0; t < NT; t++) {
        ss[t] = acc[t];
    }
}


/*
 * kvs_cpu_rmsnorm of nt (<= KVS_CPU_TOK_GROUP) rows at once, row t at x +
 * t * e into o + t * e (o may be x): each row's sum of squares in its own
 * order, so its bits are kvs_cpu_rmsnorm's, but the nt chains of adds are
 * interleaved, so that an add waits on its own row's last one only (one
 * row's sum is a chain of e dependent adds: most of the time of a norm).
 */
static void
kvs_cpu_rmsnorm_rows(float *o, const float *x, const float *w, uint32_t e,
    float eps, uint32_t nt)
{
    float     ss[KVS_CPU_TOK_GROUP], s;
    uint32_t  j, t;

    if (nt == KVS_CPU_TOK_GROUP) {
        kvs_cpu_sumsq_rows(ss, x, e, KVS_CPU_TOK_GROUP);
    } else {
        for (t = 0; t < nt; t++) {
            kvs_cpu_sumsq_rows(ss + t, x + (size_t) t * e, e, 1);
        }
    }

    for (t = 0; t < nt; t++) {
        s = 1.0f / sqrtf(ss[t] / (float) e + eps);

        for (j = 0; j < e; j++) {
            o[(size_t) t * e + j] = w[j] * (s * x[(size_t) t * e + j]);
        }
    }
}


/* Per token i of the group's (KVS_CPU_TOK_GROUP tokens from group *
 * KVS_CPU_TOK_GROUP): xb[i] normed with fw->post when set, x[i] += xb[i]
 * when fw->resid, then xb[i] = the norm of x[i] with fw->norm when set. */
static void
kvs_cpu_tok_task(void *arg, uint32_t group, uint32_t thread)
{
    float         *x, *xb;
    size_t         j, len;
    uint32_t       e, i0, nt;
    kvs_cpu_fw_t  *fw;

    fw = arg;
    e = fw->e;
    i0 = group * KVS_CPU_TOK_GROUP;
    nt = fw->b->n - i0 < KVS_CPU_TOK_GROUP ? fw->b->n - i0
                                           : KVS_CPU_TOK_GROUP;
    x = fw->x + (size_t) i0 * e;
    xb = fw->xb + (size_t) i0 * e;
    len = (size_t) nt * e;

    /* gemma: the block's output normed on its own before it is added */
    if (fw->post != NULL) {
        kvs_cpu_rmsnorm_rows(xb, xb, fw->post, e, fw->eps, nt);
    }

    if (fw->resid) {
        for (j = 0; j < len; j++) {
            x[j] += xb[j];
        }
    }

    if (fw->norm != NULL) {
        kvs_cpu_rmsnorm_rows(xb, x, fw->norm, e, fw->eps, nt);
    }
}


/* Per token i: biases, per-head norms, RoPE, and its K/V written to its
 * slot. */
static void
kvs_cpu_qkv_task(void *arg, uint32_t i, uint32_t thread)
{
    float                  *q, *k, *v;
    double                 *cs;
    uint32_t                j, bt;
    kvs_cpu_fw_t           *fw;
    const kvs_cpu_layer_t  *ly;
    const kvs_batch_tok_t  *tk;
    const kvs_hparams_t    *hp;

    fw = arg;
    ly = fw->ly;
    hp = &fw->cm->hp;
    tk = &fw->b->toks[i];
    bt = fw->kv->block_tokens;
    q = fw->q + (size_t) i * fw->qd;
    k = fw->k + (size_t) i * fw->kd;
    v = fw->v + (size_t) i * fw->vd;

    for (j = 0; ly->bq != NULL && j < fw->qd; j++) {
        q[j] += ly->bq[j];
    }

    for (j = 0; ly->bk != NULL && j < fw->kd; j++) {
        k[j] += ly->bk[j];
    }

    for (j = 0; ly->bv != NULL && j < fw->vd; j++) {
        v[j] += ly->bv[j];
    }

    /* qwen3: every head of q and k normed on its own, before RoPE */
    for (j = 0; ly->q_norm != NULL && j < hp->n_head; j++) {
        kvs_cpu_rmsnorm(q + (size_t) j * hp->head_dim_k,
                        q + (size_t) j * hp->head_dim_k, ly->q_norm,
                        hp->head_dim_k, fw->eps);
    }

    for (j = 0; ly->k_norm != NULL && j < hp->n_head_kv; j++) {
        kvs_cpu_rmsnorm(k + (size_t) j * hp->head_dim_k,
                        k + (size_t) j * hp->head_dim_k, ly->k_norm,
                        hp->head_dim_k, fw->eps);
    }

    /* the token's angles once per step and table, not per layer and
     * vector: the same doubles, so the same bits */
    cs = fw->rope_cs + (size_t) i * fw->rope_w;

    if (fw->rope_fill) {
        kvs_rope_angles(fw->rope, (int32_t) tk->pos, cs);
    }

    (void) kvs_rope_turn(fw->rope, cs, q, (int) hp->n_head,
                         (int) hp->head_dim_k, hp->rope_pairing);
    (void) kvs_rope_turn(fw->rope, cs, k, (int) hp->n_head_kv,
                         (int) hp->head_dim_k, hp->rope_pairing);

    /* int8 and fp8 writes grow scales shared by a block's slots: the
     * caller stores them after this task, in batch order, one thread */
    if (!fw->kv->lo.scaled) {
        kvs_cpu_kv_write(fw->kv, tk->table->blocks[tk->pos / bt], fw->l,
                         tk->pos % bt, 0, k);
        kvs_cpu_kv_write(fw->kv, tk->table->blocks[tk->pos / bt], fw->l,
                         tk->pos % bt, 1, v);
    }
}


/* The batch's K/V rows of layer fw->l into the cache, in batch order
 * (a sequence's positions ascending): the int8 and fp8 writes. */
static void
kvs_cpu_kv_store(kvs_cpu_fw_t *fw)
{
    uint32_t                i, bt;
    const kvs_batch_tok_t  *tk;

    bt = fw->kv->block_tokens;

    for (i = 0; i < fw->b->n; i++) {
        tk = &fw->b->toks[i];
        kvs_cpu_kv_write(fw->kv, tk->table->blocks[tk->pos / bt], fw->l,
                         tk->pos % bt, 0, fw->k + (size_t) i * fw->kd);
        kvs_cpu_kv_write(fw->kv, tk->table->blocks[tk->pos / bt], fw->l,
                         tk->pos % bt, 1, fw->v + (size_t) i * fw->vd);
    }
}



/* Every entry checked before anything is written; *max_ctx is the
 * longest attention span, pos + 1, for sizing the score scratch.  The
 * blocks checked are those some layer's attention reads: from the
 * window's first position when every layer has one (the blocks before
 * it may be holes, KVS_KV_HOLE, given back by the scheduler), so a
 * mask that reached one position too far fails the step instead of
 * reading a freed block. */
static int
kvs_cpu_check_batch(const kvs_cpu_model_t *cm, const kvs_cpu_kv_t *kv,
    const kvs_batch_t *b, uint32_t *max_ctx, kvs_err_t *err)
{
    uint32_t               i, j, nb, win, first;
    const kvs_batch_tok_t *t;

    *max_ctx = 0;
    win = kvs_hparams_swa_all(&cm->hp);

    if (b == NULL || b->toks == NULL || b->n == 0) {
        return kvs_err_set(err, KVS_EINVAL, "cpu forward: empty batch");
    }

    for (i = 0; i < b->n; i++) {
        t = &b->toks[i];

        if (t->token < 0 || (uint32_t) t->token >= cm->hp.n_vocab) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %" PRIu32
                               ": token %" PRId32 " outside the vocabulary "
                               "of %" PRIu32, i, t->token, cm->hp.n_vocab);
        }

        if (t->table == NULL) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %" PRIu32
                               " has no block table", i);
        }

        if (t->pos >= t->table->n_tokens || t->pos > INT32_MAX) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %" PRIu32
                               ": position %" PRIu32 " is not covered by "
                               "its table (%" PRIu32 " positions)", i,
                               t->pos, t->table->n_tokens);
        }

        if (t->table->block_tokens != kv->block_tokens) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %" PRIu32
                               ": table blocks of %" PRIu32 " tokens, the "
                               "cache's are %" PRIu32, i,
                               t->table->block_tokens, kv->block_tokens);
        }

        nb = t->pos / kv->block_tokens + 1;
        first = win != 0 && t->pos >= win ? t->pos + 1 - win : 0;

        for (j = first / kv->block_tokens; j < nb; j++) {
            if (t->table->blocks[j] >= kv->n_blocks) {
                return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry "
                                   "%" PRIu32 ": block id %" PRIu32 " beyond "
                                   "the cache's %" PRIu32, i,
                                   t->table->blocks[j], kv->n_blocks);
            }
        }

        if (t->pos + 1 > *max_ctx) {
            *max_ctx = t->pos + 1;
        }
    }

    return KVS_OK;
}


int
kvs_cpu_forward(const kvs_cpu_model_t *cm, kvs_cpu_kv_t *kv,
    const kvs_batch_t *b, float *logits, kvs_err_t *err)
{
    return kvs_cpu_forward_lora(cm, kv, b, NULL, logits, err);
}


int
kvs_cpu_forward_lora(const kvs_cpu_model_t *cm, kvs_cpu_kv_t *kv,
    const kvs_batch_t *b, const uint32_t *slots, float *logits,
    kvs_err_t *err)
{
    int                     rc, amxb, qla, qka;
    size_t                  total;
    float                   escale, cap;
    size_t                  z;
    uint32_t                n, i, l, max_ctx, want, wrow, nth,
                            tok_groups;
    kvs_cpu_fw_t            fw;
    kvs_threads_t          *tokp, *ffnp, *attp;
    kvs_cpu_lora_out_t      qkv[3], gu[2], o, down;
    kvs_cpu_lora_mm_t       lm;
    const kvs_cpu_layer_t  *ly;
    const kvs_hparams_t    *hp;

    rc = kvs_cpu_check_batch(cm, kv, b, &max_ctx, err);
    if (rc == KVS_OK) {
        rc = kvs_cpu_lora_check(kv, b, slots, err);
    }

    if (rc != KVS_OK) {
        return rc;
    }

    want = 0;

    for (i = 0; i < b->n; i++) {
        want += b->toks[i].want_logits != 0;
    }

    if (want > 0 && logits == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "cpu forward: %" PRIu32
                           " entries want logits, but no logits buffer",
                           want);
    }

    memset(&fw, 0, sizeof(kvs_cpu_fw_t));

    hp = &cm->hp;
    n = b->n;
    nth = kvs_threads_count(kv->threads);

    fw.cm = cm;
    fw.kv = kv;
    fw.b = b;
    fw.e = hp->n_embd;
    fw.f = hp->n_ff;
    fw.qd = hp->q_width;
    fw.kd = kv->k_width;
    fw.vd = kv->v_width;
    fw.od = hp->o_width;
    fw.eps = (float) hp->norm_eps;
    fw.scale = (float) hp->attn_scale;
    fw.softcap = (float) hp->attn_softcap;
    fw.simd = kvs_cpu_simd();
    fw.lora_slots = slots;

    /* the adapters' products, each riding on its base product's
     * dispatch (q, k and v together; gate and up) */
    qkv[0].target = KVS_LORA_Q;
    qkv[0].ldy = fw.qd;
    qkv[1].target = KVS_LORA_K;
    qkv[1].ldy = fw.kd;
    qkv[2].target = KVS_LORA_V;
    qkv[2].ldy = fw.vd;
    gu[0].target = KVS_LORA_GATE;
    gu[0].ldy = fw.f;
    gu[1].target = KVS_LORA_UP;
    gu[1].ldy = fw.f;
    o.target = KVS_LORA_O;
    o.ldy = fw.e;
    down.target = KVS_LORA_DOWN;
    down.ldy = fw.e;

    rc = kvs_cpu_lora_prepare(&fw, err);
    if (rc != KVS_OK) {
        return rc;
    }

    /* the widest weight row any product dequantizes */
    wrow = fw.e > fw.f ? fw.e : fw.f;
    wrow = wrow > fw.od ? wrow : fw.od;

    /* one buffer for all activations, kept in kv, per token: x, xb [e];
     * q [qd]; k [kd]; v [vd]; att [od]; h1, h3 [f]; then per thread the
     * scores [query block][attn_group][max_ctx rounded up to 16: the
     * vector softmax pads them] and four weight rows [4][wrow] (a sgemm
     * tile's [KVS_CPU_BLAS_TILE][wrow]); the query blocks [n + 1] */
    fw.attn_group = kv->lo.dtype == KVS_KV_F32
                    ? kvs_cpu_attn_group(hp, fw.simd) : 1;
    fw.sc_len = ((size_t) max_ctx + 15) & ~(size_t) 15;
    fw.sc_stride = kvs_cpu_attn_qb(&fw) * fw.attn_group * fw.sc_len;
    /* on a cache line, each thread's too: a tile load of rows that
     * straddle two lines runs at a third of the speed */
    fw.wscratch_stride = ((n >= KVS_CPU_BLAS_MIN ? KVS_CPU_BLAS_TILE : 4)
                          * (size_t) wrow + 15) & ~(size_t) 15;
    total = (size_t) n * (2 * (size_t) fw.e + fw.qd + fw.kd + fw.vd + fw.od
                          + 2 * (size_t) fw.f)
            + nth * (fw.sc_stride + fw.wscratch_stride) + 16 + n + 1
            + (size_t) n * (wrow / 32) * (sizeof(kvs_cpu_q8_t) / 4 + 1)
            + (size_t) n * (wrow / 256) * (sizeof(kvs_cpu_q8k_t) / 4 + 1)
            + (size_t) n * ((wrow + 255) / 256)
              * (sizeof(kvs_cpu_q8i_t) / 4) + 16;
    amxb = n >= KVS_CPU_BLAS_MIN && kvs_cpu_amxb_on(fw.simd);
    total += amxb ? (size_t) n * wrow : 0;   /* [2][n][wrow] BF16 */
    /* [n / 16][wrow / 32] kvs_cpu_q8a_t (40 bytes a token and block) on
     * a cache line, for the int8 tiles */
    qla = n >= KVS_CPU_BLAS_MIN && kvs_cpu_qla_on(fw.simd);
    total += qla ? (size_t) (n / 16) * (wrow / 32)
                   * (sizeof(kvs_cpu_q8a_t) / 4) + 16 : 0;
    /* and [n / 16][wrow / 256] kvs_cpu_q8ka_t (292 bytes a token and
     * super-block), for Q4_K's, which take the BF16 tiles too */
    qka = qla && (kvs_cpu_amx_ready(NULL) & KVS_CPU_AMX_BF16) != 0;
    total += qka ? (size_t) (n / 16) * (wrow / 256)
                   * (sizeof(kvs_cpu_q8ka_t) / 4) + 16 : 0;
    /* [n][rope_w] doubles, on 8 bytes */
    fw.rope_w = cm->rope.n_rot;
    if (cm->has_rope_swa && cm->rope_swa.n_rot > fw.rope_w) {
        fw.rope_w = cm->rope_swa.n_rot;
    }
    total += (size_t) n * fw.rope_w * 2 + 2;

    if (kvs_grow((void **) &kv->act, &kv->act_cap, total, sizeof(float))
        != KVS_OK)
    {
        return kvs_err_set(err, KVS_ENOMEM, "cpu forward: out of memory "
                           "for %zu bytes of activations",
                           total * sizeof(float));
    }

    fw.x = kv->act;                       /* [n][e] residual stream */
    fw.xb = fw.x + (size_t) n * fw.e;     /* [n][e] normed / projected */
    fw.q = fw.xb + (size_t) n * fw.e;     /* [n][qd] */
    fw.k = fw.q + (size_t) n * fw.qd;     /* [n][kd] */
    fw.v = fw.k + (size_t) n * fw.kd;     /* [n][vd] */
    fw.att = fw.v + (size_t) n * fw.vd;   /* [n][od] attention output */
    fw.h1 = fw.att + (size_t) n * fw.od;  /* [n][f] gate, then silu*up */
    fw.h3 = fw.h1 + (size_t) n * fw.f;    /* [n][f] up */
    fw.sc = fw.h3 + (size_t) n * fw.f;    /* [nth][sc_stride] scores */
    fw.wscratch = (float *) (((uintptr_t) (fw.sc + nth * fw.sc_stride)
                              + 63) & ~(uintptr_t) 63); /* [nth][4][wrow] */
    fw.qb = (uint32_t *) (fw.wscratch + nth * fw.wscratch_stride);
    /* [n][wrow / 32] and [n][wrow / 256] quantized inputs, used by the
     * quantized weights' products (kvs_cpu_qdot.h), then xi */
    fw.xq = (kvs_cpu_q8_t *) (fw.qb + n + 1);
    fw.xk = (kvs_cpu_q8k_t *) (fw.xq + (size_t) n * (wrow / 32));
    /* [n][(wrow + 255) / 256] xq interleaved for the batched kernels,
     * on a cache line: a group's vectors never straddle two */
    fw.xi = (kvs_cpu_q8i_t *) (((uintptr_t) (fw.xk + (size_t) n
                                             * (wrow / 256)) + 63)
                               & ~(uintptr_t) 63);
    fw.xbf = amxb ? (uint16_t *) (fw.xi + (size_t) n * ((wrow + 255) / 256))
                  : NULL;
    fw.rope_cs = (double *) (((uintptr_t) (fw.xi + (size_t) n
                                             * ((wrow + 255) / 256))
                              + (amxb ? (size_t) n * wrow * 4 : 0) + 7)
                             & ~(uintptr_t) 7);
    fw.xa = qla ? (kvs_cpu_q8a_t *) (((uintptr_t) (fw.rope_cs + (size_t) n
                                                    * fw.rope_w) + 63)
                                     & ~(uintptr_t) 63)
                : NULL;
    fw.xka = qka ? (kvs_cpu_q8ka_t *) (((uintptr_t) (fw.xa + (size_t) (n / 16)
                                                      * (wrow / 32)) + 63)
                                       & ~(uintptr_t) 63)
                 : NULL;
    fw.rope_of = NULL;

    for (i = 0; i < n; i++) {
        memcpy(fw.x + (size_t) i * fw.e,
               kvs_cpu_row(&cm->tok_embd, (uint32_t) b->toks[i].token,
                           fw.wscratch, fw.simd),
               fw.e * sizeof(float));
    }

    /* gemma scales its embeddings by sqrt(n_embd) (a float, as ggml) */
    if (hp->embd_scale != 1.0) {
        escale = (float) hp->embd_scale;

        for (z = 0; z < (size_t) n * fw.e; z++) {
            fw.x[z] *= escale;
        }
    }

    fw.bstride = (size_t) kv->lo.block_bytes / sizeof(float);
    fw.n_qb = kvs_cpu_attn_blocks(&fw, fw.qb);

    tokp = kvs_cpu_pool(&fw, (double) n * fw.e);
    tok_groups = (n + KVS_CPU_TOK_GROUP - 1) / KVS_CPU_TOK_GROUP;
    ffnp = kvs_cpu_pool(&fw, (double) n * fw.f);
    attp = kvs_cpu_pool(&fw, (double) n * max_ctx * (fw.qd + fw.od));

    /* the per-token work (norms, RoPE, SwiGLU, the products' input) runs
     * in ranges, each thread a stretch of tokens: a task is a microsecond
     * or so, and claimed one by one from one counter, the counter's line
     * and the neighbouring tokens' outputs moved between the cores at
     * every task (a 100M model's 512-token prefill ran 14% slower on two
     * threads) */
    fw.resid = 0;
    fw.norm = cm->layers[0].attn_norm;
    kvs_threads_run_ranges(tokp, kvs_cpu_tok_task, &fw, tok_groups);

    for (l = 0; l < hp->n_layer; l++) {
        ly = &cm->layers[l];
        fw.ly = ly;
        fw.win = kvs_hparams_swa(hp, l);
        fw.rope = kvs_hparams_rope_swa(hp, l) && cm->has_rope_swa
                  ? &cm->rope_swa : &cm->rope;
        fw.rope_fill = fw.rope != fw.rope_of;
        fw.rope_of = fw.rope;
        fw.l = l;
        fw.kcb = kv->mem + kvs_kv_layout_k(&kv->lo, l, 0);
        fw.vcb = kv->mem + kvs_kv_layout_v(&kv->lo, l, 0);
        fw.ksb = kv->mem + kvs_kv_layout_ks(&kv->lo, l);
        fw.vsb = kv->mem + kvs_kv_layout_vs(&kv->lo, l);
        fw.kc = (float *) (void *) (kv->mem + kvs_kv_layout_k(&kv->lo, l, 0));
        fw.vc = (float *) (void *) (kv->mem + kvs_kv_layout_v(&kv->lo, l, 0));

        qkv[0].y = fw.q;
        qkv[1].y = fw.k;
        qkv[2].y = fw.v;
        kvs_cpu_lora_mm_init(&lm, &fw, l, fw.xb, fw.e, qkv, 3);
        kvs_cpu_matmul_lora(&fw, fw.xb, n, &ly->wq, fw.q, &ly->wk, fw.k,
                            &ly->wv, fw.v, &lm);

        /* this layer's K/V of the whole batch is written before any token
         * attends, so tokens see earlier positions of their own chunk */
        kvs_threads_run_ranges(tokp, kvs_cpu_qkv_task, &fw, n);

        if (kv->lo.scaled) {
            kvs_cpu_kv_store(&fw);
        }

        kvs_threads_run(attp, kvs_cpu_attn_task, &fw,
                        fw.n_qb * (hp->n_head / fw.attn_group));

        o.y = fw.xb;
        kvs_cpu_lora_mm_init(&lm, &fw, l, fw.att, fw.od, &o, 1);
        kvs_cpu_matmul_lora(&fw, fw.att, n, &ly->wo, fw.xb, NULL, NULL,
                            NULL, NULL, &lm);

        fw.resid = 1;
        fw.post = ly->post_attn_norm;
        fw.norm = ly->ffn_norm;
        kvs_threads_run_ranges(tokp, kvs_cpu_tok_task, &fw, tok_groups);

        gu[0].y = fw.h1;
        gu[1].y = fw.h3;
        kvs_cpu_lora_mm_init(&lm, &fw, l, fw.xb, fw.e, gu, 2);
        kvs_cpu_matmul_lora(&fw, fw.xb, n, &ly->w1, fw.h1, &ly->w3, fw.h3,
                            NULL, NULL, &lm);
        kvs_threads_run_ranges(ffnp, hp->geglu ? kvs_cpu_geglu_task
                                               : kvs_cpu_swiglu_task, &fw, n);
        down.y = fw.xb;
        kvs_cpu_lora_mm_init(&lm, &fw, l, fw.h1, fw.f, &down, 1);
        kvs_cpu_matmul_lora(&fw, fw.h1, n, &ly->w2, fw.xb, NULL, NULL, NULL,
                            NULL, &lm);

        /* the residual, and the next layer's attention norm with it */
        fw.post = ly->post_ffn_norm;
        fw.norm = l + 1 < hp->n_layer ? cm->layers[l + 1].attn_norm : NULL;
        kvs_threads_run_ranges(tokp, kvs_cpu_tok_task, &fw, tok_groups);
        fw.post = NULL;
    }

    /* only the wanted rows pay for the final norm and the classifier:
     * gather them into xb, in batch order */
    want = 0;

    for (i = 0; i < n; i++) {
        if (b->toks[i].want_logits) {
            kvs_cpu_rmsnorm(fw.xb + (size_t) want * fw.e,
                            fw.x + (size_t) i * fw.e, cm->out_norm, fw.e,
                            fw.eps);
            want++;
        }
    }

    if (want > 0) {
        kvs_cpu_matmul(&fw, fw.xb, want, &cm->output, logits, NULL, NULL,
                       NULL, NULL);
    }

    /* gemma2: logits := c tanh(logits / c) */
    if (want > 0 && hp->final_softcap != 0.0) {
        cap = (float) hp->final_softcap;

        for (z = 0; z < (size_t) want * hp->n_vocab; z++) {
            logits[z] = cap * tanhf(logits[z] / cap);
        }
    }

    return KVS_OK;
}