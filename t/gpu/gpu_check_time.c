/*
 * gpu_check_time: timing on a model of Llama-3-8B's shapes (32 layers,
 * 4096 wide, 32 heads, 8 KV heads, FFN 14336, vocabulary 128256, context
 * 8192; random BF16 weights, F32 norms: 16.06 GB), CUDA only:
 *
 *   1. copy bandwidth: cudaMemcpy device to device of 1 GiB, counted as
 *      bytes read + bytes written over the time (as CUDA's bandwidthTest
 *      does): the basis of every floor;
 *   2. the paged-attention decode kernel alone (kvs_k_attn_decode, its
 *      own 1-layer BF16 cache): batch 64 at 1k and 8k context, bytes of
 *      K/V read over cudaEvent time, for the split count the backend's
 *      plan picks (kvs_cuda_plan_split) and a sweep of others;
 *   3. the model, built in memory (gpu_check_model.c: a GGUF image in
 *      an anonymous mapping, filled by every CPU from a 64 MiB pool of
 *      random BF16 values) and loaded by the CUDA backend; its K/V pool
 *      (BF16) is filled directly with random values through the backend's
 *      state (kvs_cuda_impl.h), nothing is prefilled for real;
 *   4. prefill: one forward_sample over 4 sequences x 2048 tokens;
 *   5. decode: forward_sample over a decode batch of 1, 8, 64 and 256
 *      sequences at 1k and 8k context (each token at position ctx - 1,
 *      so it reads ctx positions), graphs on, the mean over N steps
 *      after 3 warm-up steps (the first captures the bucket's graph).
 *
 * Floors: decode = (weight bytes read + K/V bytes read) / copy bandwidth,
 * the weights being every matrix and vector but the embedding table (of
 * which only the batch's rows are read); the attention kernel = its K/V
 * bytes / copy bandwidth.  Prefill is compute-bound: its memory floor is
 * printed for completeness with the achieved TFLOP/s beside it.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_check.h"
#include "backend/kvs_backend.h"
#include "backend/cuda/kvs_cuda_plan.h"
#include "backend/cuda/kvs_cuda_impl.h"
#include "kv/kvs_kv_table.h"
#include "model/kvs_dtype.h"

/* --- 1. copy bandwidth --------------------------------------------------- */

static double
gc_t_ms(cudaEvent_t a, cudaEvent_t b)
{
    float  ms;

    ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);

    return ms;
}


static int
gc_t_copy(gc_ctx_t *c, cudaEvent_t e0, cudaEvent_t e1)
{
    int     i, reps;
    char    v[48], note[160];
    void   *a, *b;
    size_t  n;
    double  ms;

    n = (size_t) 1 << 30;
    reps = 10;
    a = gc_dev_poisoned(c, n);
    b = gc_dev_poisoned(c, n);

    if (a == NULL || b == NULL
        || GC_CU(c, cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice))
        || GC_CU(c, cudaEventRecord(e0, 0)))
    {
        cudaFree(a);
        cudaFree(b);
        return -1;
    }

    for (i = 0; i < reps; i++) {
        if (GC_CU(c, cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n,
                                     cudaMemcpyDeviceToDevice, 0)))
        {
            cudaFree(a);
            cudaFree(b);
            return -1;
        }
    }

    if (GC_CU(c, cudaEventRecord(e1, 0))
        || GC_CU(c, cudaEventSynchronize(e1)))
    {
        cudaFree(a);
        cudaFree(b);
        return -1;
    }

    ms = gc_t_ms(e0, e1) / reps;
    c->copy_bw = 2.0 * (double) n / (ms * 1e-3);

    cudaFree(a);
    cudaFree(b);

    printf("  copy D2D 1 GiB: %.3f ms, %.0f GB/s (read + write)\n", ms,
           c->copy_bw / 1e9);

    snprintf(v, sizeof(v), "%.0f GB/s", c->copy_bw / 1e9);
    snprintf(note, sizeof(note), "%.3f ms per copy, mean of %d; the floors' "
             "basis", ms, reps);
    gc_row(c, "time", "copy bandwidth, cudaMemcpy D2D 1 GiB (read + write)",
           v, "", "", "INFO", note);

    return 0;
}


/* --- 2. the attention kernel --------------------------------------------- */

/* fills n bytes of device memory from a random host pool of BF16 values */
static int
gc_t_fill_dev(gc_ctx_t *c, void *dst, size_t n, const void *dpool)
{
    size_t  off, len;

    for (off = 0; off < n; off += len) {
        len = n - off < GC_T_POOL ? n - off : GC_T_POOL;
        if (GC_CU(c, cudaMemcpyAsync((uint8_t *) dst + off, dpool, len,
                                     cudaMemcpyDeviceToDevice, 0)))
        {
            return -1;
        }
    }

    return GC_CU(c, cudaDeviceSynchronize()) ? -1 : 0;
}


static int
gc_t_attn(gc_ctx_t *c, const void *dpool, cudaEvent_t e0, cudaEvent_t e1,
    gc_rng_t *rng, int n_sm)
{
    static const uint32_t  ctxs[2] = { 1024, 8192 };
    static const uint32_t  sweep[] = { 1, 2, 4, 8, 16, 32, 64 };

    enum { GC_B = 64, GC_HD = 128, GC_H = 32, GC_KV = 8 };

    int             i, reps, rc;
    char            name[96], v[48], fl[48], ra[24], note[160];
    float          *q, *dq, *dout, *dpart;
    double          ms, best_ms, bytes, floor_ms;
    int32_t        *words, *dw;
    uint32_t       *perm, bps, n_blocks, ci, si, s, j, plan, best_s, split;
    size_t          kv_bytes, nw;
    kvs_k_kv_t      kv;
    kvs_k_batch_t   kb;

    n_blocks = GC_B * ctxs[1] / GC_T_BT;
    kv_bytes = (size_t) n_blocks * GC_T_BT * GC_KV * GC_HD * 2;

    memset(&kv, 0, sizeof(kv));
    kv.dtype = KVS_K_BF16;
    kv.n_layer = 1;
    kv.n_blocks = n_blocks;
    kv.block_tokens = GC_T_BT;
    kv.n_head = GC_H;
    kv.n_head_kv = GC_KV;
    kv.hd_k = GC_HD;
    kv.hd_v = GC_HD;

    perm = gc_t_perm(n_blocks, rng);
    q = gc_alloc((size_t) GC_B * GC_H * GC_HD * 4);
    nw = 3 * GC_B + GC_B + n_blocks + 2 * GC_B;
    words = gc_alloc(nw * 4);
    kv.k = gc_dev_poisoned(c, kv_bytes);
    kv.v = gc_dev_poisoned(c, kv_bytes);
    dw = gc_dev_poisoned(c, nw * 4);
    dq = gc_dev_poisoned(c, (size_t) GC_B * GC_H * GC_HD * 4);
    dout = gc_dev_poisoned(c, (size_t) GC_B * GC_H * GC_HD * 4);
    dpart = gc_dev_poisoned(c, kvs_k_attn_part_floats(GC_B, GC_H, 64, GC_HD)
                               * 4);

    rc = -1;

    if (perm == NULL || q == NULL || words == NULL || kv.k == NULL
        || kv.v == NULL || dw == NULL || dq == NULL || dout == NULL
        || dpart == NULL || gc_t_fill_dev(c, kv.k, kv_bytes, dpool)
        || gc_t_fill_dev(c, kv.v, kv_bytes, dpool))
    {
        goto done;
    }

    gc_fill(q, KVS_K_F32, (size_t) GC_B * GC_H * GC_HD, rng, -1.0f, 1.0f);
    if (GC_CU(c, cudaMemcpy(dq, q, (size_t) GC_B * GC_H * GC_HD * 4,
                            cudaMemcpyHostToDevice)))
    {
        goto done;
    }

    for (ci = 0; ci < 2; ci++) {
        /* words: tok, pos, seq [B]; table_off [B]; table; run_tok0,
         * run_len [B] */
        bps = ctxs[ci] / GC_T_BT;
        for (s = 0; s < GC_B; s++) {
            words[s] = (int32_t) s;
            words[GC_B + s] = (int32_t) ctxs[ci] - 1;
            words[2 * GC_B + s] = (int32_t) s;
            words[3 * GC_B + s] = (int32_t) (s * bps);
            words[4 * GC_B + GC_B * bps + s] = (int32_t) s;
            words[5 * GC_B + GC_B * bps + s] = 1;
            for (j = 0; j < bps; j++) {
                words[4 * GC_B + s * bps + j] = (int32_t) perm[s * bps + j];
            }
        }

        if (GC_CU(c, cudaMemcpy(dw, words, nw * 4, cudaMemcpyHostToDevice))) {
            goto done;
        }

        kb.n_tok = GC_B;
        kb.n_seq = GC_B;
        kb.n_run = GC_B;
        kb.tok = dw;
        kb.pos = dw + GC_B;
        kb.seq = dw + 2 * GC_B;
        kb.table_off = dw + 3 * GC_B;
        kb.table = dw + 4 * GC_B;
        kb.run_tok0 = dw + 4 * GC_B + GC_B * bps;
        kb.run_len = kb.run_tok0 + GC_B;
        kb.max_ctx = ctxs[ci];

        plan = kvs_cuda_plan_split(GC_B, ctxs[ci], GC_KV, (uint32_t) n_sm,
                                   64, (size_t) -1,
                                   kvs_k_attn_part_floats(1, GC_H, 1, GC_HD));
        bytes = (double) GC_B * ctxs[ci] * GC_KV * 2 * GC_HD * 2;
        floor_ms = c->copy_bw > 0 ? bytes / c->copy_bw * 1e3 : 0.0;
        best_ms = INFINITY;
        best_s = 0;

        for (si = 0; si <= sizeof(sweep) / sizeof(sweep[0]); si++) {
            split = si == 0 ? plan : sweep[si - 1];
            if (si > 0 && split == plan) {
                continue;
            }

            /* warm-up, each launch checked; then back to back, as in a
             * step */
            reps = 20;
            for (i = 0; i < 2; i++) {
                if (gc_launched(c, kvs_k_attn_decode(dout, dq, &kv, 0, &kb,
                                                     0.0883883f, 0, 0.0f,
                                                     split, dpart, 0),
                                "attn_decode") != 0)
                {
                    goto done;
                }
            }

            if (GC_CU(c, cudaEventRecord(e0, 0))) {
                goto done;
            }
            for (i = 0; i < reps; i++) {
                if (kvs_k_attn_decode(dout, dq, &kv, 0, &kb, 0.0883883f,
                                      0, 0.0f, split, dpart, 0) != 0)
                {
                    gc_cu(c, cudaGetLastError(), "attn_decode");
                    goto done;
                }
            }
            if (GC_CU(c, cudaEventRecord(e1, 0))
                || GC_CU(c, cudaEventSynchronize(e1)))
            {
                goto done;
            }

            ms = gc_t_ms(e0, e1) / reps;
            printf("  attn_decode 64 x %uk, split %2u%s: %8.1f us, %6.0f GB/s"
                   " (floor %.1f us)\n", ctxs[ci] / 1024, split,
                   si == 0 ? " (plan)" : "       ", ms * 1e3,
                   bytes / (ms * 1e-3) / 1e9, floor_ms * 1e3);

            if (ms < best_ms) {
                best_ms = ms;
                best_s = split;
            }

            if (si == 0) {
                snprintf(name, sizeof(name), "attn_decode kernel, 64 x %uk "
                         "ctx, BF16 K/V, split %u (plan)", ctxs[ci] / 1024,
                         split);
                snprintf(v, sizeof(v), "%.1f us", ms * 1e3);
                snprintf(fl, sizeof(fl), "%.1f us", floor_ms * 1e3);
                snprintf(ra, sizeof(ra), "%.2f", ms / floor_ms);
                snprintf(note, sizeof(note), "%.0f GB/s of K/V read (%.0f "
                         "MB)", bytes / (ms * 1e-3) / 1e9, bytes / 1e6);
                gc_row(c, "time", name, v, fl, ra, "INFO", note);
            }
        }

        snprintf(name, sizeof(name), "attn_decode kernel, 64 x %uk ctx, "
                 "best split %u", ctxs[ci] / 1024, best_s);
        snprintf(v, sizeof(v), "%.1f us", best_ms * 1e3);
        snprintf(fl, sizeof(fl), "%.1f us", floor_ms * 1e3);
        snprintf(ra, sizeof(ra), "%.2f", best_ms / floor_ms);
        snprintf(note, sizeof(note), "%.0f GB/s; sweep 1..64",
                 bytes / (best_ms * 1e-3) / 1e9);
        gc_row(c, "time", name, v, fl, ra, "INFO", note);
    }

    rc = 0;

done:

    free(perm);
    free(q);
    free(words);
    cudaFree(kv.k);
    cudaFree(kv.v);
    cudaFree(dw);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dpart);

    return rc;
}


/* --- 4 and 5: prefill and decode through the backend ---------------------- */

static int
gc_t_prefill(gc_ctx_t *c, kvs_backend_t *be, const gc_t_model_t *tm,
    const uint32_t *perm)
{
    enum { GC_NS = 4, GC_LEN = 2048 };

    int                    i, reps, rc;
    char                   v[48], fl[48], ra[24], note[160];
    double                 t, best, flops, attn, floor_s;
    int32_t                ids[GC_NS];
    kvs_err_t              err;
    kvs_batch_t            b;
    kvs_kv_table_t         tabs[GC_NS];
    kvs_batch_tok_t       *toks;
    kvs_backend_sample_t   sp[GC_NS];
    const kvs_hparams_t   *hp;

    hp = &tm->m.hp;
    toks = gc_alloc((size_t) GC_NS * GC_LEN * sizeof(*toks));
    if (toks == NULL) {
        return -1;
    }

    memset(sp, 0, sizeof(sp));
    b.toks = toks;
    b.n = (uint32_t) gc_t_batch(toks, tabs, GC_NS, GC_LEN, 0, perm,
                                hp->n_vocab);

    reps = c->quick ? 1 : 2;
    best = INFINITY;
    rc = 0;

    for (i = -1; i < reps; i++) {
        t = gc_now();
        if (be->ops->forward_sample(be, &b, sp, ids, &err) != KVS_OK) {
            printf("  prefill: %s\n", err.msg);
            gc_fail(c, "time", "prefill 4 x 2048", err.msg);
            rc = c->dead ? -1 : 0;
            free(toks);
            return rc;
        }
        t = gc_now() - t;
        printf("  prefill 4 x 2048 tokens%s: %.1f ms, %.0f tokens/s\n",
               i < 0 ? " (warm-up)" : "", t * 1e3, GC_NS * GC_LEN / t);
        if (i >= 0 && t < best) {
            best = t;
        }
    }

    /* 2 flops per weight per token, plus QK^T and PV over the causal
     * triangle; the output matrix only for the 4 rows sampled */
    attn = 0.0;
    for (i = 0; i < GC_LEN; i++) {
        attn += (double) (i + 1);
    }
    flops = 2.0 * (double) tm->params_mm * GC_NS * GC_LEN
            + 2.0 * (double) hp->n_vocab * hp->n_embd * GC_NS
            + 2.0 * attn * GC_NS * hp->n_layer * hp->n_head
              * (hp->head_dim_k + hp->head_dim_v);
    floor_s = c->copy_bw > 0
              ? ((double) tm->weight_read + (double) be->kv_bytes
                 / ((double) be->n_blocks * be->block_tokens) * GC_NS
                 * GC_LEN) / c->copy_bw
              : 0.0;

    snprintf(v, sizeof(v), "%.1f ms", best * 1e3);
    snprintf(fl, sizeof(fl), "%.1f ms", floor_s * 1e3);
    snprintf(ra, sizeof(ra), "%.1f", best / floor_s);
    snprintf(note, sizeof(note), "%.0f tokens/s, %.0f TFLOP/s achieved; "
             "compute-bound: the memory floor is not its goal",
             GC_NS * GC_LEN / best, flops / best / 1e12);
    gc_row(c, "time", "prefill 4 x 2048-token chunks (one step)", v, fl, ra,
           "INFO", note);

    free(toks);

    return rc;
}


static int
gc_t_decode(gc_ctx_t *c, kvs_backend_t *be, const gc_t_model_t *tm,
    const uint32_t *perm)
{
    static const uint32_t  batches[] = { 1, 8, 64, 256 };
    static const uint32_t  ctxs[] = { 1024, 8192 };

    int                    i, reps;
    char                   name[96], v[48], fl[48], ra[24], note[160];
    double                 t, sum, mn, floor_s, kvb, kv_tok;
    int32_t                ids[256];
    uint32_t               bi, ci, n, ctx;
    kvs_err_t              err;
    kvs_batch_t            b;
    kvs_kv_table_t         tabs[256];
    kvs_batch_tok_t        toks[256];
    kvs_backend_sample_t   sp[256];

    memset(sp, 0, sizeof(sp));
    kv_tok = (double) be->kv_bytes / ((double) be->n_blocks
                                      * be->block_tokens);

    for (ci = 0; ci < 2; ci++) {
        for (bi = 0; bi < 4; bi++) {
            n = batches[bi];
            ctx = ctxs[ci];
            kvb = kv_tok * n * ctx;

            snprintf(name, sizeof(name), "decode step, batch %u, %uk "
                     "context", n, ctx / 1024);

            if ((uint64_t) n * ctx / GC_T_BT > be->n_blocks) {
                snprintf(note, sizeof(note), "its K/V (%.0f GB) does not "
                         "fit the pool (%.0f GB)", kvb / 1e9,
                         be->kv_bytes / 1e9);
                printf("  %s: SKIP: %s\n", name, note);
                gc_row(c, "time", name, "-", "", "", "SKIP", note);
                continue;
            }

            b.toks = toks;
            b.n = (uint32_t) gc_t_batch(toks, tabs, n, ctx, ctx - 1, perm,
                                        tm->m.hp.n_vocab);

            reps = 3;
            sum = 0.0;
            mn = INFINITY;

            for (i = -3; i < reps; i++) {
                t = gc_now();
                if (be->ops->forward_sample(be, &b, sp, ids, &err)
                    != KVS_OK)
                {
                    printf("  %s: %s\n", name, err.msg);
                    gc_fail(c, "time", name, err.msg);
                    return c->dead ? -1 : 0;
                }
                t = gc_now() - t;

                if (i == -1) {
                    /* about 0.4 s of steps per configuration */
                    reps = c->quick ? 3 : (int) (0.4 / t);
                    reps = reps < 10 ? 10 : reps > 100 ? 100 : reps;
                }

                if (i >= 0) {
                    sum += t;
                    mn = t < mn ? t : mn;
                }
            }

            t = sum / reps;
            floor_s = ((double) tm->weight_read + kvb) / c->copy_bw;

            printf("  %-34s %8.3f ms (min %.3f) floor %7.3f ms  x%.2f  "
                   "%7.0f tok/s\n", name, t * 1e3, mn * 1e3, floor_s * 1e3,
                   t / floor_s, n / t);

            snprintf(v, sizeof(v), "%.3f ms", t * 1e3);
            snprintf(fl, sizeof(fl), "%.3f ms", floor_s * 1e3);
            snprintf(ra, sizeof(ra), "%.2f", t / floor_s);
            snprintf(note, sizeof(note), "mean of %d (min %.3f ms); %.0f "
                     "tokens/s; reads %.2f GB weights + %.2f GB K/V", reps,
                     mn * 1e3, n / t, tm->weight_read / 1e9, kvb / 1e9);
            gc_row(c, "time", name, v, fl, ra, "INFO", note);

            if (n == 64 && ctx == 1024) {
                snprintf(note, sizeof(note), "issue 9's goal: decode at "
                         "batch 64, 1k context within 1.25 x the floor");
                gc_row(c, "time", "goal: batch 64, 1k within 1.25 x floor",
                       ra, "1.25", ra, t / floor_s <= 1.25 ? "MET"
                                                           : "MISSED", note);
            }
        }
    }

    return 0;
}


/* random values into the backend's whole K/V pool (its own state) */
static int
gc_t_fill_kv(gc_ctx_t *c, kvs_backend_t *be, const void *dpool)
{
    size_t       n;
    kvs_cuda_t  *cu;

    if (be->kind != KVS_BACKEND_CUDA || be->impl == NULL) {
        return -1;
    }

    cu = be->impl;
    n = (size_t) cu->kv.n_layer * cu->kv.n_blocks * cu->kv.block_tokens
        * cu->kv.n_head_kv * kvs_k_dtype_size(cu->kv.dtype);

    if (gc_t_fill_dev(c, cu->kv.k, n * cu->kv.hd_k, dpool)
        || gc_t_fill_dev(c, cu->kv.v, n * cu->kv.hd_v, dpool))
    {
        return -1;
    }

    return 0;
}


int
gc_time_run(gc_ctx_t *c)
{
    int                  rc, n_sm;
    char                 v[48], note[160];
    void                *dpool;
    double               t;
    uint16_t            *hpool;
    uint32_t            *perm;
    size_t               i;
    gc_rng_t             rng;
    kvs_err_t            err;
    cudaEvent_t          e0, e1;
    gc_t_model_t         tm;
    gc_t_shape_t         sh = { 32, 4096, 32, 8, 14336, 128256, 8192 };
    kvs_backend_t       *be;
    kvs_backend_conf_t   conf;
    kvs_backend_info_t   info;

    rng.s = c->seed ^ 0x74696d65ull;
    be = NULL;
    perm = NULL;
    dpool = NULL;
    memset(&tm, 0, sizeof(tm));

    if (c->quick) {
        sh.n_layer = 4;
        sh.n_vocab = 32000;
    }

    if (GC_CU(c, cudaEventCreate(&e0)) || GC_CU(c, cudaEventCreate(&e1))
        || GC_CU(c, cudaDeviceGetAttribute(&n_sm,
                                           cudaDevAttrMultiProcessorCount,
                                           c->device)))
    {
        return -1;
    }

    /* random BF16 values in [-1, 1) on the device, copied over caches */
    hpool = gc_alloc(GC_T_POOL);
    if (hpool == NULL) {
        return -1;
    }
    for (i = 0; i < GC_T_POOL / 2; i++) {
        hpool[i] = kvs_f32_to_bf16(gc_rng_range(&rng, -1.0f, 1.0f));
    }
    dpool = gc_dev_upload(c, hpool, GC_T_POOL);
    free(hpool);

    /* every floor needs the copy bandwidth */
    t = gc_now();
    if (dpool == NULL || gc_t_copy(c, e0, e1) != 0) {
        gc_fail(c, "time", "copy bandwidth", "cudaMemcpy failed");
        goto done;
    }

    if (gc_t_attn(c, dpool, e0, e1, &rng, n_sm) != 0) {
        gc_fail(c, "time", "attn_decode kernel bandwidth",
                "launch refused or failed");
        if (c->dead) {
            goto done;
        }
    }
    printf("  (copy and attention kernel: %.1f s)\n", gc_now() - t);

    t = gc_now();
    if (gc_t_image(c, &sh, &tm, &rng) != 0) {
        gc_fail(c, "time", "model image", "could not build it");
        goto done;
    }
    t = gc_now() - t;
    printf("  model image: %.2f GB in memory in %.1f s\n", tm.size / 1e9, t);
    snprintf(v, sizeof(v), "%.1f s", t);
    snprintf(note, sizeof(note), "%.2f GB GGUF image built in memory (%u "
             "layers, vocabulary %u)", tm.size / 1e9, sh.n_layer,
             sh.n_vocab);
    gc_row(c, "time", "model: build in memory", v, "", "", "INFO", note);

    /* K/V for the largest batch that fits 141 GB: 64 x 8k (64 GiB BF16) */
    memset(&conf, 0, sizeof(conf));
    conf.kind = KVS_BACKEND_CUDA;
    conf.device = c->device;
    conf.block_tokens = GC_T_BT;
    conf.n_blocks = 64 * 8192 / GC_T_BT + 256;

    t = gc_now();
    if (kvs_backend_new(&be, &tm.m, &conf, &info, &err) != KVS_OK) {
        printf("  CUDA backend with %u blocks: %s; trying half\n",
               conf.n_blocks, err.msg);
        conf.n_blocks = 256 * 1024 / GC_T_BT + 256;
        if (kvs_backend_new(&be, &tm.m, &conf, &info, &err) != KVS_OK) {
            gc_fail(c, "time", "CUDA backend load", err.msg);
            goto done;
        }
    }
    t = gc_now() - t;

    printf("  CUDA backend: loaded in %.1f s on %s; K/V %u blocks, %.1f "
           "GB\n", t, info.device, be->n_blocks, be->kv_bytes / 1e9);
    snprintf(v, sizeof(v), "%.1f s", t);
    snprintf(note, sizeof(note), "weights uploaded, K/V pool of %u blocks "
             "(%.1f GB) allocated", be->n_blocks, be->kv_bytes / 1e9);
    gc_row(c, "time", "model: CUDA backend load", v, "", "", "INFO", note);

    if (be->ops->forward_sample == NULL) {
        gc_fail(c, "time", "decode", "the backend has no forward_sample");
        goto done;
    }

    t = gc_now();
    perm = gc_t_perm(be->n_blocks, &rng);
    if (perm == NULL || gc_t_fill_kv(c, be, dpool) != 0) {
        gc_fail(c, "time", "K/V fill", "could not fill the pool");
        goto done;
    }
    printf("  K/V pool filled with random values in %.2f s\n",
           gc_now() - t);

    t = gc_now();
    rc = gc_t_prefill(c, be, &tm, perm);
    printf("  (prefill: %.1f s)\n", gc_now() - t);

    if (rc == 0) {
        t = gc_now();
        rc = gc_t_decode(c, be, &tm, perm);
        printf("  (decode: %.1f s)\n", gc_now() - t);
    }

done:

    kvs_backend_free(be);
    gc_t_image_free(&tm);
    free(perm);
    cudaFree(dpool);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);

    return c->dead ? -1 : 0;
}
