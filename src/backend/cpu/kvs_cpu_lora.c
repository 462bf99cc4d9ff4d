/*
 * kvs_cpu_lora: batched heterogeneous LoRA on the CPU backend.  A kv
 * holds up to KVS_CPU_LORA_SLOTS adapters in slots 1..N (slot 0 is "no
 * adapter"); kvs_cpu_forward_lora() takes each batch entry's slot.  For
 * each adapted matrix the forward computes the base product once for
 * the whole batch (kvs_cpu_matmul), then kvs_cpu_lora_apply() adds each
 * row's own adapter's low-rank product, y += scale * B (A x), over the
 * rows with an adapter only, grouped by adapter once per step
 * (kvs_cpu_lora_prepare: a counting sort by slot, then tasks of up to
 * KVS_CPU_LORA_GROUP rows of one adapter); rows with slot 0 are never
 * touched.
 *
 * A task's product, by the CPU's kernel level (kvs_cpu_simd):
 *   - AVX2 / AVX-512: its rows gathered, T = X A^T by the backend's F32
 *     row kernels (kvs_cpu_mm_rows_*: each A row is read once for the
 *     group), T scaled, then y[row] += T[row] B as rank axpys over B
 *     transposed (made at kvs_cpu_kv_set_lora), 8 or 16 lanes wide;
 *   - portable C: kvs_lora_apply_row() a row at a time, the reference.
 *
 * Invariants: a slot's adapter was checked against the model when set
 * (every pair's shapes are the matrices' the forward multiplies: fused
 * phi3 tensors are refused); its per-(layer, target) index and B's
 * transposes are built then, so a step looks a matrix up in O(1).  A
 * row's result depends only on its own input, adapter and the kernel
 * level (the row kernels' summation order depends on the row length
 * alone; the axpys go over the rank in order), never on the batch, the
 * grouping or the thread; the levels agree within float rounding
 * (test_cpu_lora compares them).  kv borrows the adapters: they must
 * outlive their slot.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "kvs_cpu_impl.h"

#if KVS_CPU_X86
#include <immintrin.h>
#endif

#define KVS_CPU_LORA_GROUP  8         /* rows of one adapter per task */
#define KVS_CPU_LORA_AVX512 "avx512f,avx512bw,avx512vl,avx2,fma"


/* The matrix the forward multiplies for target t of layer ly. */
static const kvs_cpu_mat_t *
kvs_cpu_lora_mat(const kvs_cpu_layer_t *ly, kvs_lora_target_t t)
{
    switch (t) {
    case KVS_LORA_Q:    return &ly->wq;
    case KVS_LORA_K:    return &ly->wk;
    case KVS_LORA_V:    return &ly->wv;
    case KVS_LORA_O:    return &ly->wo;
    case KVS_LORA_GATE: return &ly->w1;
    case KVS_LORA_UP:   return &ly->w3;
    case KVS_LORA_DOWN: return &ly->w2;
    default:            return NULL;
    }
}


static void
kvs_cpu_lora_bt_free(float **bt, uint32_t n_layer)
{
    size_t  k;

    for (k = 0; bt != NULL && k < (size_t) n_layer * KVS_LORA_N_TARGETS;
         k++)
    {
        free(bt[k]);
    }

    free(bt);
}


int
kvs_cpu_kv_set_lora(kvs_cpu_kv_t *kv, const kvs_cpu_model_t *cm,
    uint32_t slot, const kvs_lora_t *l, kvs_err_t *err)
{
    size_t                   k;
    uint32_t                 i, r;
    uint64_t                 o;
    float                  **bt;
    kvs_cpu_lora_slot_t     *s;
    const kvs_lora_mat_t    *m;
    const kvs_cpu_mat_t     *w;
    const kvs_lora_mat_t   **by;

    if (slot == 0 || slot > KVS_CPU_LORA_SLOTS) {
        return kvs_err_set(err, KVS_EINVAL, "cpu lora: slot %" PRIu32
                           " outside 1..%u", slot, KVS_CPU_LORA_SLOTS);
    }

    by = NULL;
    bt = NULL;

    if (l != NULL) {
        if (strcmp(l->arch, cm->hp.arch) != 0) {
            return kvs_err_set(err, KVS_EINVAL, "cpu lora: adapter for %s, "
                               "the model is %s", l->arch, cm->hp.arch);
        }

        /* every pair fits the matrix the forward multiplies */
        for (i = 0; i < l->n_mat; i++) {
            m = &l->mat[i];
            w = m->layer < cm->hp.n_layer
                ? kvs_cpu_lora_mat(&cm->layers[m->layer], m->target) : NULL;

            if (w == NULL || w->cols != m->n_in || w->rows != m->n_out
                || (cm->hp.fused_gate_up && (m->target == KVS_LORA_GATE
                                             || m->target == KVS_LORA_UP)))
            {
                return kvs_err_set(err, KVS_EUNSUPPORTED, "cpu lora: "
                                   "adapter tensor %s (%" PRIu64 " -> %"
                                   PRIu64 ") is not a matrix the CPU "
                                   "forward adapts", m->name, m->n_in,
                                   m->n_out);
            }
        }

        by = calloc((size_t) cm->hp.n_layer * KVS_LORA_N_TARGETS,
                    sizeof(*by));
        bt = calloc((size_t) cm->hp.n_layer * KVS_LORA_N_TARGETS,
                    sizeof(*bt));
        if (by == NULL || bt == NULL) {
            free(by);
            free(bt);
            return kvs_err_set(err, KVS_ENOMEM, "cpu lora: out of memory");
        }

        for (i = 0; i < l->n_mat; i++) {
            m = &l->mat[i];
            k = (size_t) m->layer * KVS_LORA_N_TARGETS + m->target;
            by[k] = m;

            bt[k] = malloc((size_t) m->rank * m->n_out * sizeof(float));
            if (bt[k] == NULL) {
                kvs_cpu_lora_bt_free(bt, cm->hp.n_layer);
                free(by);
                return kvs_err_set(err, KVS_ENOMEM, "cpu lora: out of "
                                   "memory");
            }

            for (o = 0; o < m->n_out; o++) {
                for (r = 0; r < m->rank; r++) {
                    bt[k][(size_t) r * m->n_out + o] =
                        m->b[o * m->rank + r];
                }
            }
        }
    }

    s = &kv->lora[slot - 1];
    kvs_cpu_lora_bt_free(s->bt, cm->hp.n_layer);
    free(s->by);
    s->l = l;
    s->by = by;
    s->bt = bt;
    s->n_layer = cm->hp.n_layer;

    return KVS_OK;
}


void
kvs_cpu_kv_lora_free(kvs_cpu_kv_t *kv)
{
    uint32_t  i;

    for (i = 0; i < KVS_CPU_LORA_SLOTS; i++) {
        kvs_cpu_lora_bt_free(kv->lora[i].bt, kv->lora[i].n_layer);
        free(kv->lora[i].by);
    }

    free(kv->lora_rows);
    free(kv->lora_tmp);
}


int
kvs_cpu_lora_check(const kvs_cpu_kv_t *kv, const kvs_batch_t *b,
    const uint32_t *slots, kvs_err_t *err)
{
    uint32_t  i, s;

    for (i = 0; slots != NULL && i < b->n; i++) {
        s = slots[i];

        if (s != 0 && (s > KVS_CPU_LORA_SLOTS || kv->lora[s - 1].l == NULL)) {
            return kvs_err_set(err, KVS_EINVAL, "cpu forward: entry %"
                               PRIu32 ": adapter slot %" PRIu32 " holds no "
                               "adapter", i, s);
        }
    }

    return KVS_OK;
}


int
kvs_cpu_lora_prepare(kvs_cpu_fw_t *fw, kvs_err_t *err)
{
    size_t                 cnt[KVS_CPU_LORA_SLOTS + 1], need;
    uint32_t               i, j, s, rank, g, n_tasks, *starts;
    uint64_t               dim;
    kvs_cpu_kv_t          *kv;
    const kvs_lora_t      *l;
    const kvs_batch_t     *b;

    kv = fw->kv;
    b = fw->b;
    fw->lora_n = 0;
    fw->lora_tasks = 0;

    if (fw->lora_slots == NULL) {
        return KVS_OK;
    }

    memset(cnt, 0, sizeof(cnt));
    rank = 0;
    dim = 0;

    for (i = 0; i < b->n; i++) {
        s = fw->lora_slots[i];
        if (s != 0) {
            cnt[s]++;
            fw->lora_n++;
        }
    }

    if (fw->lora_n == 0) {
        return KVS_OK;
    }

    /* the largest rank and matrix side of the adapters used, and the
     * tasks: each adapter's rows in groups of KVS_CPU_LORA_GROUP */
    n_tasks = 0;

    for (s = 1; s <= KVS_CPU_LORA_SLOTS; s++) {
        if (cnt[s] == 0) {
            continue;
        }

        l = kv->lora[s - 1].l;
        rank = l->rank_max > rank ? l->rank_max : rank;
        n_tasks += (uint32_t) ((cnt[s] + KVS_CPU_LORA_GROUP - 1)
                               / KVS_CPU_LORA_GROUP);

        for (j = 0; j < l->n_mat; j++) {
            dim = l->mat[j].n_in > dim ? l->mat[j].n_in : dim;
            dim = l->mat[j].n_out > dim ? l->mat[j].n_out : dim;
        }
    }

    /* a thread's scratch: the group's inputs, then its T */
    fw->lora_stride = (size_t) KVS_CPU_LORA_GROUP * (dim + rank);
    need = (size_t) kvs_threads_count(kv->threads) * fw->lora_stride;

    if (kvs_grow((void **) &kv->lora_rows, &kv->lora_rows_cap,
                 (size_t) b->n + n_tasks + 1, sizeof(uint32_t)) != KVS_OK
        || kvs_grow((void **) &kv->lora_tmp, &kv->lora_tmp_cap, need,
                    sizeof(float)) != KVS_OK)
    {
        fw->lora_n = 0;
        return kvs_err_set(err, KVS_ENOMEM, "cpu forward: out of memory "
                           "for the adapters' rows");
    }

    fw->lora_rank = rank;

    /* a counting sort of the adapted rows by slot, stable */
    starts = kv->lora_rows + b->n;
    n_tasks = 0;

    for (s = 1, need = 0; s <= KVS_CPU_LORA_SLOTS; s++) {
        i = (uint32_t) cnt[s];
        cnt[s] = need;

        for (g = 0; g < i; g += KVS_CPU_LORA_GROUP) {
            starts[n_tasks++] = (uint32_t) need + g;
        }

        need += i;
    }

    starts[n_tasks] = fw->lora_n;
    fw->lora_tasks = n_tasks;

    for (i = 0; i < b->n; i++) {
        s = fw->lora_slots[i];
        if (s != 0) {
            kv->lora_rows[cnt[s]++] = i;
        }
    }

    return KVS_OK;
}


typedef struct {
    const kvs_cpu_fw_t  *fw;
    uint32_t             layer;
    kvs_lora_target_t    target;
    const float         *x;
    uint32_t             ldx;
    float               *y;
    uint32_t             ldy;
} kvs_cpu_lora_job_t;


#if KVS_CPU_X86

/* y[o] += sum over r in order of t[r] * bt[r][o], 8 lanes */
__attribute__((target("avx2,fma"))) static void
kvs_cpu_lora_bt_avx2(float *y, const float *t, const float *bt,
    uint32_t rank, uint64_t n_out)
{
    uint32_t  r;
    uint64_t  o;
    __m256    c, acc;

    for (o = 0; o + 8 <= n_out; o += 8) {
        acc = _mm256_loadu_ps(y + o);
        for (r = 0; r < rank; r++) {
            c = _mm256_set1_ps(t[r]);
            acc = _mm256_fmadd_ps(c, _mm256_loadu_ps(bt + r * n_out + o),
                                  acc);
        }
        _mm256_storeu_ps(y + o, acc);
    }

    for ( /* void */ ; o < n_out; o++) {
        for (r = 0; r < rank; r++) {
            y[o] = __builtin_fmaf(t[r], bt[r * n_out + o], y[o]);
        }
    }
}


/* the same, 16 lanes, one B row at a time over the whole output row
 * (B streams once, y stays in L1); the tail masked, so every output
 * sums alike: y[o] + t[0] b[0][o] + t[1] b[1][o] ... in order */
__attribute__((target(KVS_CPU_LORA_AVX512))) static void
kvs_cpu_lora_bt_avx512(float *y, const float *t, const float *bt,
    uint32_t rank, uint64_t n_out)
{
    uint32_t      r;
    uint64_t      o;
    __m512        c;
    __mmask16     k;
    const float  *b;

    for (r = 0; r < rank; r++) {
        c = _mm512_set1_ps(t[r]);
        b = bt + r * n_out;

        for (o = 0; o + 16 <= n_out; o += 16) {
            _mm512_storeu_ps(y + o,
                             _mm512_fmadd_ps(c, _mm512_loadu_ps(b + o),
                                             _mm512_loadu_ps(y + o)));
        }

        if (o < n_out) {
            k = (__mmask16) ((1u << (n_out - o)) - 1);
            _mm512_mask_storeu_ps(y + o, k,
                _mm512_fmadd_ps(c, _mm512_maskz_loadu_ps(k, b + o),
                                _mm512_maskz_loadu_ps(k, y + o)));
        }
    }
}


/* One group's product on x86: X gathered, T = X A^T (the row kernels),
 * scaled, then each row's axpys over B transposed. */
static void
kvs_cpu_lora_group_x86(const kvs_cpu_lora_job_t *job, const uint32_t *rows,
    uint32_t cnt, const kvs_lora_mat_t *m, const float *bt, float *buf)
{
    float         *xg, *t;
    uint32_t       i, r, nr, k;
    const float   *w[4];

    xg = buf;
    t = buf + (size_t) KVS_CPU_LORA_GROUP * m->n_in;

    for (i = 0; i < cnt; i++) {
        memcpy(xg + (size_t) i * m->n_in,
               job->x + (size_t) rows[i] * job->ldx,
               (size_t) m->n_in * sizeof(float));
    }

    for (r = 0; r < m->rank; r += 4) {
        nr = m->rank - r < 4 ? m->rank - r : 4;

        for (k = 0; k < nr; k++) {
            w[k] = m->a + (uint64_t) (r + k) * m->n_in;
        }

        if (job->fw->simd >= KVS_CPU_SIMD_AVX512) {
            kvs_cpu_mm_rows_avx512(t + r, m->rank, xg, cnt,
                                   (uint32_t) m->n_in, w, nr);
        } else {
            kvs_cpu_mm_rows_avx2(t + r, m->rank, xg, cnt,
                                 (uint32_t) m->n_in, w, nr);
        }
    }

    for (i = 0; i < cnt * m->rank; i++) {
        t[i] *= m->scale;
    }

    for (i = 0; i < cnt; i++) {
        if (job->fw->simd >= KVS_CPU_SIMD_AVX512) {
            kvs_cpu_lora_bt_avx512(job->y + (size_t) rows[i] * job->ldy,
                                   t + (size_t) i * m->rank, bt, m->rank,
                                   m->n_out);
        } else {
            kvs_cpu_lora_bt_avx2(job->y + (size_t) rows[i] * job->ldy,
                                 t + (size_t) i * m->rank, bt, m->rank,
                                 m->n_out);
        }
    }
}

#endif


static void
kvs_cpu_lora_task(void *arg, uint32_t task, uint32_t thread)
{
    size_t                     k;
    uint32_t                   j, j0, j1, s;
    float                     *buf;
    kvs_cpu_kv_t              *kv;
    const uint32_t            *starts;
    const kvs_lora_mat_t      *m;
    const kvs_cpu_lora_job_t  *job;

    job = arg;
    kv = job->fw->kv;
    starts = kv->lora_rows + job->fw->b->n;
    j0 = starts[task];
    j1 = starts[task + 1];

    /* every row of a task has one adapter */
    s = job->fw->lora_slots[kv->lora_rows[j0]];
    k = (size_t) job->layer * KVS_LORA_N_TARGETS + job->target;
    m = kv->lora[s - 1].by[k];

    if (m == NULL) {
        return;
    }

    buf = kv->lora_tmp + (size_t) thread * job->fw->lora_stride;

#if KVS_CPU_X86
    if (job->fw->simd >= KVS_CPU_SIMD_AVX2) {
        kvs_cpu_lora_group_x86(job, kv->lora_rows + j0, j1 - j0, m,
                               kv->lora[s - 1].bt[k], buf);
        return;
    }
#endif

    for (j = j0; j < j1; j++) {
        kvs_lora_apply_row(m, job->x + (size_t) kv->lora_rows[j] * job->ldx,
                           job->y + (size_t) kv->lora_rows[j] * job->ldy,
                           buf);
    }
}


void
kvs_cpu_lora_apply(const kvs_cpu_fw_t *fw, uint32_t layer,
    kvs_lora_target_t target, const float *x, uint32_t ldx, float *y,
    uint32_t ldy)
{
    kvs_cpu_lora_job_t  job;

    if (fw->lora_n == 0) {
        return;
    }

    job.fw = fw;
    job.layer = layer;
    job.target = target;
    job.x = x;
    job.ldx = ldx;
    job.y = y;
    job.ldy = ldy;

    kvs_threads_run(kvs_cpu_pool(fw, (double) fw->lora_n * fw->lora_rank
                                     * (ldx + ldy)),
                    kvs_cpu_lora_task, &job, fw->lora_tasks);
}
