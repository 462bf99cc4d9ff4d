/*
 * bench_attn: the CPU backend's attention alone (kvs_cpu_attn_task), one
 * thread, on the 100m preset's shapes (12 layers, 12 query heads, 4 K/V
 * heads of 64, an f32 cache in blocks of 16 positions handed out of
 * order): one prefill of T tokens of one sequence, every layer's tasks
 * over random K, V and q.  Prints the best and the mean of N runs, and
 * the best per token, in milliseconds.
 *
 *   bench_attn [-t TOKENS] [-n RUNS]
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_clock.h"
#include "backend/cpu/kvs_cpu_impl.h"
#include "kv/kvs_kv_layout.h"
#include "kv/kvs_kv_table.h"


int
main(int argc, char **argv)
{
    int               i, runs;
    float            *q, *att, *sc, *mem;
    double            t, best, sum;
    size_t            z, words;
    uint32_t          n, l, k, nblk, task, n_tasks, *qb, *blocks;
    uint64_t          seed;
    kvs_err_t         err;
    kvs_batch_t       b;
    kvs_cpu_fw_t      fw;
    kvs_cpu_kv_t     *kv;
    kvs_kv_table_t    tab;
    kvs_cpu_model_t  *cm;
    kvs_batch_tok_t  *tk;

    n = 512;
    runs = 5;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-t") == 0) {
            n = (uint32_t) atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "-n") == 0) {
            runs = atoi(argv[i + 1]);
        } else {
            break;
        }
    }

    if (i < argc || n < 1 || n > 65536 || runs < 1) {
        fprintf(stderr, "usage: bench_attn [-t TOKENS] [-n RUNS]\n");
        return 2;
    }

    cm = calloc(1, sizeof(kvs_cpu_model_t));
    if (cm == NULL) {
        return 1;
    }

    cm->hp.n_layer = 12;
    cm->hp.n_head = 12;
    cm->hp.n_head_kv = 4;
    cm->hp.head_dim_k = 64;
    cm->hp.head_dim_v = 64;
    cm->hp.k_width = 4 * 64;
    cm->hp.v_width = 4 * 64;

    nblk = (n + 15) / 16;

    if (kvs_cpu_kv_new(&kv, cm, nblk, 16, &err) != KVS_OK) {
        fprintf(stderr, "bench_attn: %s\n", err.msg);
        return 1;
    }

    /* uniform in [-0.5, 0.5): the scores' spread of a real model's */
    seed = 1;
    mem = (float *) (void *) kv->mem;
    words = nblk * kv->lo.block_bytes / sizeof(float);

    for (z = 0; z < words; z++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        mem[z] = (float) (seed >> 40) / 16777216.0f - 0.5f;
    }

    memset(&tab, 0, sizeof(tab));
    blocks = malloc(nblk * sizeof(uint32_t));
    tk = calloc(n, sizeof(kvs_batch_tok_t));
    qb = malloc((n + 1) * sizeof(uint32_t));

    if (blocks == NULL || tk == NULL || qb == NULL) {
        return 1;
    }

    for (k = 0; k < nblk; k++) {
        blocks[k] = (k * 7) % nblk;
        blocks[k] = nblk % 7 == 0 ? nblk - 1 - k : blocks[k];
    }

    tab.blocks = blocks;
    tab.n_blocks = nblk;
    tab.n_tokens = n;
    tab.block_tokens = 16;

    for (k = 0; k < n; k++) {
        tk[k].pos = k;
        tk[k].table = &tab;
    }

    b.toks = tk;
    b.n = n;

    memset(&fw, 0, sizeof(fw));
    fw.cm = cm;
    fw.kv = kv;
    fw.b = &b;
    fw.simd = kvs_cpu_simd();
    fw.qd = 12 * 64;
    fw.od = 12 * 64;
    fw.kd = 4 * 64;
    fw.vd = 4 * 64;
    fw.scale = 0.125f;
    fw.attn_group = kvs_cpu_attn_group(&cm->hp, fw.simd);
    fw.sc_len = ((size_t) n + 15) & ~(size_t) 15;
    fw.sc_stride = kvs_cpu_attn_qb(&fw) * fw.attn_group * fw.sc_len;
    fw.bstride = kv->lo.block_bytes / sizeof(float);
    fw.qb = qb;
    fw.n_qb = kvs_cpu_attn_blocks(&fw, qb);

    q = malloc((size_t) n * fw.qd * sizeof(float));
    att = malloc((size_t) n * fw.od * sizeof(float));
    sc = malloc(fw.sc_stride * sizeof(float));

    if (q == NULL || att == NULL || sc == NULL) {
        return 1;
    }

    for (z = 0; z < (size_t) n * fw.qd; z++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        q[z] = (float) (seed >> 40) / 16777216.0f - 0.5f;
    }

    fw.q = q;
    fw.att = att;
    fw.sc = sc;
    n_tasks = fw.n_qb * (cm->hp.n_head / fw.attn_group);
    best = 0.0;
    sum = 0.0;

    for (i = 0; i < runs; i++) {
        t = kvs_now_s();

        for (l = 0; l < cm->hp.n_layer; l++) {
            fw.l = l;
            fw.kcb = kv->mem + kvs_kv_layout_k(&kv->lo, l, 0);
            fw.vcb = kv->mem + kvs_kv_layout_v(&kv->lo, l, 0);
            fw.kc = (float *) (void *) fw.kcb;
            fw.vc = (float *) (void *) fw.vcb;

            for (task = 0; task < n_tasks; task++) {
                kvs_cpu_attn_task(&fw, task, 0);
            }
        }

        t = kvs_now_s() - t;
        sum += t;
        best = i == 0 || t < best ? t : best;
    }

    printf("attention, %u tokens, %u query blocks, simd level %d: best "
           "%.2f ms (%.4f ms/token), mean %.2f ms of %d runs\n", n,
           fw.n_qb, fw.simd, best * 1e3, best * 1e3 / n, sum / runs * 1e3,
           runs);

    free(sc);
    free(att);
    free(q);
    free(qb);
    free(tk);
    free(blocks);
    kvs_cpu_kv_free(kv);
    free(cm);

    return 0;
}
