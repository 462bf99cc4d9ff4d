/*
 * gpu_check_model: the timing model of gpu_check_time.c without a file:
 * a GGUF image of Llama-3-8B's shapes (or --quick's 4 layers) written
 * into anonymous memory and opened with kvs_gguf_open_mem, checked as
 * kvs_model_open would; block tables over a permutation of a pool's
 * blocks; and --self-test's check that the image opens and steps on the
 * CPU backend.
 *
 * Why not `kvserve gen-model`: it writes the same shapes, but one thread
 * fills and converts every weight and the file then has to be read back:
 * the same shapes with 4 layers (3.86 GB) took 16.4 s to disk on the
 * build host (user 4.8 s, sys 9.8 s), so the 16.06 GB file would take
 * about 70 s of a 5-minute budget.  Here every
 * CPU copies a 64 MiB pool of random BF16 values (uniform, std 0.02 as
 * kvs_gen's) into its share of the data; a value's bits do not change a
 * product's time.
 */

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu_check.h"
#include "backend/kvs_backend.h"
#include "model/kvs_dtype.h"
#include "model/kvs_ggml_type.h"
#include "model/kvs_gguf.h"

#define GC_T_ALIGN     256            /* general.alignment of the image */
#define GC_T_THREADS   32

typedef struct {
    uint8_t        *dst;
    size_t          lo, hi;           /* byte range of the data section */
    const uint8_t  *pool;
} gc_t_fill_t;


/* a random permutation of [0, n) */
uint32_t *
gc_t_perm(uint32_t n, gc_rng_t *rng)
{
    uint32_t  i, j, t, *p;

    p = gc_alloc((size_t) n * 4);
    if (p == NULL) {
        return NULL;
    }

    for (i = 0; i < n; i++) {
        p[i] = i;
    }

    for (i = n; i > 1; i--) {
        j = gc_rng_below(rng, i);
        t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }

    return p;
}



typedef struct {
    uint8_t  *p;
    size_t    n, cap;
    int       fail;
} gc_t_hdr_t;


static void
gc_t_put(gc_t_hdr_t *h, const void *v, size_t n)
{
    uint8_t  *np;
    size_t    cap;

    if (h->fail) {
        return;
    }

    if (h->n + n > h->cap) {
        cap = h->cap ? h->cap * 2 : 65536;
        while (cap < h->n + n) {
            cap *= 2;
        }
        np = realloc(h->p, cap);
        if (np == NULL) {
            h->fail = 1;
            return;
        }
        h->p = np;
        h->cap = cap;
    }

    memcpy(h->p + h->n, v, n);
    h->n += n;
}


static void
gc_t_put_u32(gc_t_hdr_t *h, uint32_t v)
{
    gc_t_put(h, &v, 4);
}


static void
gc_t_put_u64(gc_t_hdr_t *h, uint64_t v)
{
    gc_t_put(h, &v, 8);
}


/* a GGUF string: u64 length, bytes */
static void
gc_t_put_str(gc_t_hdr_t *h, const char *s)
{
    gc_t_put_u64(h, strlen(s));
    gc_t_put(h, s, strlen(s));
}


static void
gc_t_kv_u32(gc_t_hdr_t *h, const char *key, uint32_t v)
{
    gc_t_put_str(h, key);
    gc_t_put_u32(h, KVS_GGUF_U32);
    gc_t_put_u32(h, v);
}


static void
gc_t_kv_f32(gc_t_hdr_t *h, const char *key, float v)
{
    gc_t_put_str(h, key);
    gc_t_put_u32(h, KVS_GGUF_F32);
    gc_t_put(h, &v, 4);
}


/*
 * The tensors in kvs_gen's order: name, type, ne0 (columns), ne1 (rows,
 * 0 for a vector).  Calls f for each; returns the count.
 */
typedef void (*gc_t_tensor_pt)(void *ctx, const char *name, uint32_t type,
    uint64_t ne0, uint64_t ne1);

static uint32_t
gc_t_tensors(const gc_t_shape_t *s, gc_t_tensor_pt f, void *ctx)
{
    char      n[64];
    uint32_t  l, kw;

    kw = s->n_embd / s->n_head * s->n_kv;

    f(ctx, "token_embd.weight", KVS_GGML_BF16, s->n_embd, s->n_vocab);

    for (l = 0; l < s->n_layer; l++) {
#define GC_T_BLK(suffix, type, ne0, ne1)                                     \
        snprintf(n, sizeof(n), "blk.%u." suffix, l);                         \
        f(ctx, n, type, ne0, ne1)

        GC_T_BLK("attn_norm.weight", KVS_GGML_F32, s->n_embd, 0);
        GC_T_BLK("attn_q.weight", KVS_GGML_BF16, s->n_embd, s->n_embd);
        GC_T_BLK("attn_k.weight", KVS_GGML_BF16, s->n_embd, kw);
        GC_T_BLK("attn_v.weight", KVS_GGML_BF16, s->n_embd, kw);
        GC_T_BLK("attn_output.weight", KVS_GGML_BF16, s->n_embd, s->n_embd);
        GC_T_BLK("ffn_norm.weight", KVS_GGML_F32, s->n_embd, 0);
        GC_T_BLK("ffn_gate.weight", KVS_GGML_BF16, s->n_embd, s->n_ff);
        GC_T_BLK("ffn_down.weight", KVS_GGML_BF16, s->n_ff, s->n_embd);
        GC_T_BLK("ffn_up.weight", KVS_GGML_BF16, s->n_embd, s->n_ff);
#undef GC_T_BLK
    }

    f(ctx, "output_norm.weight", KVS_GGML_F32, s->n_embd, 0);
    f(ctx, "output.weight", KVS_GGML_BF16, s->n_embd, s->n_vocab);

    return 3 + 9 * s->n_layer;
}


typedef struct {
    gc_t_hdr_t      *h;
    uint64_t         off;             /* data bytes so far, aligned */
    gc_t_model_t    *tm;
} gc_t_info_ctx_t;


static void
gc_t_info(void *ctx, const char *name, uint32_t type, uint64_t ne0,
    uint64_t ne1)
{
    uint64_t          bytes;
    gc_t_info_ctx_t  *x;

    x = ctx;
    bytes = ne0 * (ne1 ? ne1 : 1) * (type == KVS_GGML_F32 ? 4 : 2);

    gc_t_put_str(x->h, name);
    gc_t_put_u32(x->h, ne1 ? 2 : 1);
    gc_t_put_u64(x->h, ne0);
    if (ne1) {
        gc_t_put_u64(x->h, ne1);
    }
    gc_t_put_u32(x->h, type);
    gc_t_put_u64(x->h, x->off);

    x->off += (bytes + GC_T_ALIGN - 1) / GC_T_ALIGN * GC_T_ALIGN;

    if (strcmp(name, "token_embd.weight") != 0) {
        x->tm->weight_read += bytes;
        if (ne1 && strcmp(name, "output.weight") != 0) {
            x->tm->params_mm += ne0 * ne1;
        }
    }
}


static void *
gc_t_fill_thread(void *arg)
{
    size_t              o, len, po;
    const gc_t_fill_t  *f;

    f = arg;

    for (o = f->lo; o < f->hi; o += len) {
        po = o % GC_T_POOL;
        len = GC_T_POOL - po;
        len = len < f->hi - o ? len : f->hi - o;
        memcpy(f->dst + o, f->pool + po, len);
    }

    return NULL;
}


/* sets every norm vector to 1.0f, as kvs_gen does */
typedef struct {
    uint8_t   *data;
    uint64_t   off;
} gc_t_norm_ctx_t;


static void
gc_t_norms(void *ctx, const char *name, uint32_t type, uint64_t ne0,
    uint64_t ne1)
{
    uint64_t          i, bytes;
    gc_t_norm_ctx_t  *x;

    x = ctx;
    bytes = ne0 * (ne1 ? ne1 : 1) * (type == KVS_GGML_F32 ? 4 : 2);

    if (type == KVS_GGML_F32) {
        for (i = 0; i < ne0; i++) {
            ((float *) (x->data + x->off))[i] = 1.0f;
        }
    }

    x->off += (bytes + GC_T_ALIGN - 1) / GC_T_ALIGN * GC_T_ALIGN;
}


/*
 * The GGUF image of the timed model in anonymous memory: the header
 * written here (the llama keys kvs_hparams_read needs; the vocabulary
 * size comes from token_embd's shape, no tokenizer is stored), the data
 * filled from a 64 MiB pool of random BF16 values (uniform, std 0.02 as
 * kvs_gen) by every CPU.  Then opened with kvs_gguf_open_mem and checked
 * as kvs_model_open would.
 */
int
gc_t_image(gc_ctx_t *c, const gc_t_shape_t *s, gc_t_model_t *tm,
    gc_rng_t *rng)
{
    int               rc, made[GC_T_THREADS];
    long              ncpu;
    size_t            i, data_off, n_thr;
    uint8_t          *pool;
    uint16_t         *pv;
    kvs_err_t         err;
    pthread_t         th[GC_T_THREADS];
    gc_t_hdr_t        h;
    gc_t_fill_t       f[GC_T_THREADS];
    gc_t_info_ctx_t   ic;
    gc_t_norm_ctx_t   nc;
    const float       a = 0.02f * 1.7320508f;

    memset(&h, 0, sizeof(h));
    memset(tm, 0, sizeof(*tm));

    gc_t_put(&h, "GGUF", 4);
    gc_t_put_u32(&h, 3);
    gc_t_put_u64(&h, 3 + 9 * (uint64_t) s->n_layer);
    gc_t_put_u64(&h, 10);

    gc_t_put_str(&h, "general.architecture");
    gc_t_put_u32(&h, KVS_GGUF_STR);
    gc_t_put_str(&h, "llama");
    gc_t_kv_u32(&h, "general.alignment", GC_T_ALIGN);
    gc_t_kv_u32(&h, "llama.block_count", s->n_layer);
    gc_t_kv_u32(&h, "llama.context_length", s->n_ctx);
    gc_t_kv_u32(&h, "llama.embedding_length", s->n_embd);
    gc_t_kv_u32(&h, "llama.feed_forward_length", s->n_ff);
    gc_t_kv_u32(&h, "llama.attention.head_count", s->n_head);
    gc_t_kv_u32(&h, "llama.attention.head_count_kv", s->n_kv);
    gc_t_kv_f32(&h, "llama.rope.freq_base", 500000.0f);
    gc_t_kv_f32(&h, "llama.attention.layer_norm_rms_epsilon", 1e-5f);

    ic.h = &h;
    ic.off = 0;
    ic.tm = tm;
    gc_t_tensors(s, gc_t_info, &ic);

    if (h.fail) {
        free(h.p);
        printf("  gpu_check: out of memory for the GGUF header\n");
        return -1;
    }

    data_off = (h.n + GC_T_ALIGN - 1) / GC_T_ALIGN * GC_T_ALIGN;
    tm->size = data_off + ic.off;

    tm->img = mmap(NULL, tm->size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    pool = gc_alloc(GC_T_POOL);

    if (tm->img == MAP_FAILED || pool == NULL) {
        printf("  gpu_check: cannot map %.1f GB for the model image\n",
               tm->size / 1e9);
        tm->img = NULL;
        free(h.p);
        free(pool);
        return -1;
    }

    madvise(tm->img, tm->size, MADV_HUGEPAGE);
    memcpy(tm->img, h.p, h.n);
    memset(tm->img + h.n, 0, data_off - h.n);
    free(h.p);

    pv = (uint16_t *) pool;
    for (i = 0; i < GC_T_POOL / 2; i++) {
        pv[i] = kvs_f32_to_bf16(gc_rng_range(rng, -a, a));
    }

    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    n_thr = ncpu < 1 ? 1 : ncpu > GC_T_THREADS ? GC_T_THREADS : (size_t) ncpu;

    for (i = 0; i < n_thr; i++) {
        f[i].dst = tm->img + data_off;
        f[i].pool = pool;
        /* even bounds keep every BF16 whole */
        f[i].lo = ic.off * i / n_thr / 2 * 2;
        f[i].hi = ic.off * (i + 1) / n_thr / 2 * 2;
        if (i + 1 == n_thr) {
            f[i].hi = ic.off;
        }
        made[i] = pthread_create(&th[i], NULL, gc_t_fill_thread, &f[i])
                  == 0;
        if (!made[i]) {
            gc_t_fill_thread(&f[i]);
        }
    }

    for (i = 0; i < n_thr; i++) {
        if (made[i]) {
            pthread_join(th[i], NULL);
        }
    }

    free(pool);

    nc.data = tm->img + data_off;
    nc.off = 0;
    gc_t_tensors(s, gc_t_norms, &nc);

    rc = kvs_gguf_open_mem(&tm->m.gguf, tm->img, tm->size, &err);
    if (rc == KVS_OK) {
        rc = kvs_hparams_read(&tm->m.hp, tm->m.gguf, &err);
    }
    if (rc == KVS_OK) {
        rc = kvs_model_check_tensors(tm->m.gguf, &tm->m.hp, &err);
    }

    if (rc != KVS_OK) {
        printf("  gpu_check: the model image does not open: %s\n", err.msg);
        return -1;
    }

    tm->m.file_size = tm->size;

    return 0;
}


void
gc_t_image_free(gc_t_model_t *tm)
{
    kvs_gguf_close(tm->m.gguf);
    tm->m.gguf = NULL;

    if (tm->img != NULL) {
        munmap(tm->img, tm->size);
        tm->img = NULL;
    }
}


/*
 * n sequences, each a table of the next ctx / GC_T_BT blocks of perm
 * (from block *next on), with entries at positions [pos0, ctx).
 */
int
gc_t_batch(kvs_batch_tok_t *toks, kvs_kv_table_t *tabs, uint32_t n,
    uint32_t ctx, uint32_t pos0, const uint32_t *perm, uint32_t n_vocab)
{
    uint32_t  s, p, k, nb;

    nb = ctx / GC_T_BT;
    k = 0;

    for (s = 0; s < n; s++) {
        tabs[s].blocks = (uint32_t *) perm + (size_t) s * nb;
        tabs[s].n_blocks = nb;
        tabs[s].cap = nb;
        tabs[s].n_tokens = ctx;
        tabs[s].block_tokens = GC_T_BT;

        for (p = pos0; p < ctx; p++) {
            toks[k].token = (int32_t) ((s * 7919u + p * 31u) % n_vocab);
            toks[k].pos = p;
            toks[k].table = &tabs[s];
            toks[k].want_logits = p + 1 == ctx;
            k++;
        }
    }

    return (int) k;
}


/* --self-test: the 4-layer image opens and steps on the CPU backend */
int
gc_time_self_test(gc_ctx_t *c)
{
    int                  rc;
    float               *logits;
    double               t;
    uint32_t            *perm;
    gc_rng_t             rng;
    kvs_err_t            err;
    kvs_batch_t          b;
    gc_t_model_t         tm;
    gc_t_shape_t         sh = { 4, 4096, 32, 8, 14336, 32000, 8192 };
    kvs_backend_t       *be;
    kvs_kv_table_t       tabs[1];
    kvs_batch_tok_t      toks[GC_T_BT];
    kvs_backend_conf_t   conf;

    rng.s = c->seed;
    be = NULL;
    logits = NULL;
    perm = gc_t_perm(4, &rng);

    t = gc_now();
    rc = perm == NULL || gc_t_image(c, &sh, &tm, &rng) != 0 ? -1 : 0;
    printf("  self-test: %u-layer image of %.2f GB in %.1f s\n",
           sh.n_layer, tm.size / 1e9, gc_now() - t);

    memset(&conf, 0, sizeof(conf));
    conf.kind = KVS_BACKEND_CPU;
    conf.n_blocks = 4;
    conf.block_tokens = GC_T_BT;

    if (rc == 0 && kvs_backend_new(&be, &tm.m, &conf, NULL, &err) != KVS_OK) {
        printf("  self-test: CPU backend: %s\n", err.msg);
        rc = -1;
    }

    if (rc == 0) {
        logits = gc_alloc((size_t) sh.n_vocab * 4);
        b.toks = toks;
        b.n = (uint32_t) gc_t_batch(toks, tabs, 1, GC_T_BT, 0, perm,
                                    sh.n_vocab);
        rc = logits == NULL ? -1
             : kvs_backend_forward(be, &b, logits, &err) == KVS_OK ? 0 : -1;
        if (rc != 0) {
            printf("  self-test: forward: %s\n", err.msg);
        }
    }

    gc_check(c, "self", "the timing model's image opens and steps",
             rc == 0 && isfinite(logits[0]) ? 0.0 : INFINITY, 0.0, 0.0);

    kvs_backend_free(be);
    gc_t_image_free(&tm);
    free(perm);
    free(logits);

    return 0;
}
