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
 * kvs_cpu_lora_image() packs the adapter into an image of its own
 * (kvs_cpu_lora_slot_t), F16 with a power-of-two scale per matrix, B
 * transposed, in the forward's order (kvs_cpu_lora.h): half the bytes a
 * step reads of F32, the reason the many-adapter step is faster (it is
 * bound by reading the adapters).  A task's product goes through the group kernel of the
 * CPU's level (kvs_cpu_simd): AVX-512 or AVX2 (kvs_cpu_lora_x86.c), else
 * kvs_cpu_lora_rows_c() here, the portable reference over the same
 * packed values.
 *
 * Invariants: a slot's adapter was checked against the model when set
 * (every pair's shapes are the matrices' the forward multiplies: fused
 * phi3 tensors are refused); its pairs are indexed by (layer, target),
 * so a step looks a matrix up in O(1).  A row's result depends only on
 * its own input, adapter and the kernel level, never on the batch, the
 * grouping or the thread; the levels agree within float rounding
 * (test_cpu_lora compares them), and the packed product is the F32
 * adapter's within the F16 rounding of A and B (test_cpu_lora bounds
 * it).  An image is built from the model and the adapter alone (any
 * thread: the engine's loader packs off the step loop) and never
 * changes after; a slot owns the image installed in it, swapped in and
 * out by pointer (kvs_cpu_kv_lora_install, the stepping thread), so no
 * step ever sees half an adapter; kv never reads a kvs_lora_t.
 */

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "kvs_cpu_impl.h"
#include "kvs_cpu_lora.h"

#define KVS_CPU_LORA_GROUP  8         /* rows of one adapter per task */


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


uint16_t
kvs_cpu_lora_f2h(float v)
{
    uint32_t  f, sign, e, m, h, s, rem, half;

    memcpy(&f, &v, sizeof(f));
    sign = (f >> 16) & 0x8000;
    e = (f >> 23) & 0xff;
    m = f & 0x7fffff;

    if (e >= 113) {
        /* a normal half: 10 bits of the mantissa, rounded to nearest
         * even (a carry into the exponent is the right result) */
        h = ((e - 112) << 10) | (m >> 13);
        rem = m & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) {
            h++;
        }
        return (uint16_t) (sign | h);
    }

    if (e < 102) {
        return (uint16_t) sign;        /* under half the least subnormal */
    }

    /* a subnormal half: v / 2^-24, rounded to nearest even */
    m |= 0x800000;
    s = 126 - e;
    h = m >> s;
    rem = m & ((1u << s) - 1);
    half = 1u << (s - 1);
    if (rem > half || (rem == half && (h & 1))) {
        h++;
    }

    return (uint16_t) (sign | h);
}


float
kvs_cpu_lora_h2f(uint16_t h)
{
    float     v;
    uint32_t  f, e, m;

    e = (h >> 10) & 0x1f;
    m = h & 0x3ff;

    if (e == 0) {
        v = (float) m * 0x1p-24f;
        return h & 0x8000 ? -v : v;
    }

    f = ((uint32_t) (h & 0x8000) << 16) | ((e + 112) << 23) | (m << 13);
    memcpy(&v, &f, sizeof(v));

    return v;
}


void
kvs_cpu_lora_f2h_n(int simd, uint16_t *dst, const float *src, size_t n,
    float f)
{
    size_t  i;

#if KVS_CPU_X86
    if (simd >= KVS_CPU_SIMD_AVX2) {
        kvs_cpu_lora_f2h_n_f16c(dst, src, n, f);
        return;
    }
#endif

    for (i = 0; i < n; i++) {
        dst[i] = kvs_cpu_lora_f2h(src[i] * f);
    }
}


/* The power of two that brings n values' largest magnitude into
 * [2^14, 2^15), at most 2^40 (0 for all zeros). */
static int
kvs_cpu_lora_exp(const float *v, size_t n)
{
    int     k;
    float   mx;
    size_t  i;

    mx = 0.0f;
    for (i = 0; i < n; i++) {
        mx = fabsf(v[i]) > mx ? fabsf(v[i]) : mx;
    }

    if (mx == 0.0f) {
        return 0;
    }

    (void) frexpf(mx, &k);

    return 15 - k > 40 ? 40 : 15 - k;
}


/* Packs pair m into p, its values at dst (rank * (n_in + n_out)
 * halves), converted at kernel level simd; KVS_EUNSUPPORTED when its
 * scale does not fit a float. */
static int
kvs_cpu_lora_pack(kvs_cpu_lora_pair_t *p, const kvs_lora_mat_t *m,
    uint16_t *dst, int simd, kvs_err_t *err)
{
    int       ea, eb;
    float     sc, fa, fb;
    uint32_t  r;
    uint64_t  o;
    uint16_t *bt, row[KVS_LORA_MAX_RANK];

    ea = kvs_cpu_lora_exp(m->a, (size_t) m->rank * m->n_in);
    eb = kvs_cpu_lora_exp(m->b, (size_t) m->rank * m->n_out);
    sc = (float) ldexp((double) m->scale, -(ea + eb));

    if (!isfinite(sc) || (sc == 0.0f && m->scale != 0.0f)) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "cpu lora: adapter "
                           "tensor %s: its values' range does not fit the "
                           "CPU's F16 form", m->name);
    }

    /* multiplying by a power of two is exact here: no result leaves
     * F16's range, none is below F32's normal one unless it rounds to 0
     * as a half anyway */
    fa = ldexpf(1.0f, ea);
    fb = ldexpf(1.0f, eb);

    kvs_cpu_lora_f2h_n(simd, dst, m->a, (size_t) m->rank * m->n_in, fa);

    /* B row by row into halves, then each row's rank values to their
     * columns of B^T */
    bt = dst + (size_t) m->rank * m->n_in;

    for (o = 0; o < m->n_out; o++) {
        kvs_cpu_lora_f2h_n(simd, row, m->b + o * m->rank, m->rank, fb);

        for (r = 0; r < m->rank; r++) {
            bt[(size_t) r * m->n_out + o] = row[r];
        }
    }

    p->a = dst;
    p->bt = bt;
    p->rank = m->rank;
    p->n_in = (uint32_t) m->n_in;
    p->n_out = (uint32_t) m->n_out;
    p->scale = sc;

    return KVS_OK;
}


int
kvs_cpu_lora_image(const kvs_cpu_model_t *cm, const kvs_lora_t *l,
    kvs_cpu_lora_slot_t **img, kvs_err_t *err)
{
    int                      rc, simd;
    size_t                   k, n_pairs, halves;
    uint16_t                *dst;
    uint32_t                 i;
    kvs_cpu_lora_slot_t     *s;
    const kvs_lora_mat_t    *m;
    const kvs_cpu_mat_t     *w;
    const kvs_lora_mat_t   **by;

    *img = NULL;

    if (strcmp(l->arch, cm->hp.arch) != 0) {
        return kvs_err_set(err, KVS_EINVAL, "cpu lora: adapter for %s, "
                           "the model is %s", l->arch, cm->hp.arch);
    }

    /* every pair fits the matrix the forward multiplies */
    halves = 0;

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

        halves += (size_t) m->rank * (m->n_in + m->n_out);
    }

    n_pairs = (size_t) cm->hp.n_layer * KVS_LORA_N_TARGETS;
    by = calloc(n_pairs, sizeof(*by));
    s = calloc(1, sizeof(*s));
    if (by == NULL || s == NULL) {
        free(by);
        free(s);
        return kvs_err_set(err, KVS_ENOMEM, "cpu lora: out of memory");
    }

    s->n_layer = cm->hp.n_layer;
    s->rank_max = l->rank_max;
    s->pairs = calloc(n_pairs, sizeof(*s->pairs));
    s->pk = malloc(halves * sizeof(uint16_t) + 1);
    if (s->pairs == NULL || s->pk == NULL) {
        free(by);
        kvs_cpu_lora_image_free(s);
        return kvs_err_set(err, KVS_ENOMEM, "cpu lora: out of memory");
    }

    for (i = 0; i < l->n_mat; i++) {
        m = &l->mat[i];
        by[(size_t) m->layer * KVS_LORA_N_TARGETS + m->target] = m;
    }

    /* packed in the forward's order: layer, then target */
    dst = s->pk;
    simd = kvs_cpu_simd();

    for (k = 0; k < n_pairs; k++) {
        if (by[k] == NULL) {
            continue;
        }

        rc = kvs_cpu_lora_pack(&s->pairs[k], by[k], dst, simd, err);
        if (rc != KVS_OK) {
            free(by);
            kvs_cpu_lora_image_free(s);
            return rc;
        }

        dst += (size_t) by[k]->rank * (by[k]->n_in + by[k]->n_out);
    }

    free(by);
    *img = s;

    return KVS_OK;
}


int
kvs_cpu_kv_lora_install(kvs_cpu_kv_t *kv, uint32_t slot,
    kvs_cpu_lora_slot_t *img, kvs_cpu_lora_slot_t **spent, kvs_err_t *err)
{
    *spent = NULL;

    if (slot == 0 || slot > KVS_CPU_LORA_SLOTS) {
        return kvs_err_set(err, KVS_EINVAL, "cpu lora: slot %" PRIu32
                           " outside 1..%u", slot, KVS_CPU_LORA_SLOTS);
    }

    *spent = kv->lora[slot - 1];
    kv->lora[slot - 1] = img;

    return KVS_OK;
}


void
kvs_cpu_lora_image_free(kvs_cpu_lora_slot_t *img)
{
    if (img == NULL) {
        return;
    }

    free(img->pairs);
    free(img->pk);
    free(img);
}


int
kvs_cpu_kv_set_lora(kvs_cpu_kv_t *kv, const kvs_cpu_model_t *cm,
    uint32_t slot, const kvs_lora_t *l, kvs_err_t *err)
{
    int                   rc;
    kvs_cpu_lora_slot_t  *img, *spent;

    if (slot == 0 || slot > KVS_CPU_LORA_SLOTS) {
        return kvs_err_set(err, KVS_EINVAL, "cpu lora: slot %" PRIu32
                           " outside 1..%u", slot, KVS_CPU_LORA_SLOTS);
    }

    img = NULL;

    if (l != NULL) {
        rc = kvs_cpu_lora_image(cm, l, &img, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    /* cannot fail: the slot is in range */
    (void) kvs_cpu_kv_lora_install(kv, slot, img, &spent, err);
    kvs_cpu_lora_image_free(spent);

    return KVS_OK;
}


void
kvs_cpu_kv_lora_free(kvs_cpu_kv_t *kv)
{
    uint32_t  i;

    for (i = 0; i < KVS_CPU_LORA_SLOTS; i++) {
        kvs_cpu_lora_image_free(kv->lora[i]);
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

        if (s != 0 && (s > KVS_CPU_LORA_SLOTS || kv->lora[s - 1] == NULL)) {
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
    uint32_t               i, s, rank, g, n_tasks, *starts;
    kvs_cpu_kv_t          *kv;
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

    /* the largest rank of the adapters used, and the tasks: each
     * adapter's rows in groups of KVS_CPU_LORA_GROUP */
    n_tasks = 0;

    for (s = 1; s <= KVS_CPU_LORA_SLOTS; s++) {
        if (cnt[s] == 0) {
            continue;
        }

        rank = kv->lora[s - 1]->rank_max > rank
               ? kv->lora[s - 1]->rank_max : rank;
        n_tasks += (uint32_t) ((cnt[s] + KVS_CPU_LORA_GROUP - 1)
                               / KVS_CPU_LORA_GROUP);
    }

    /* a thread's scratch: its group's T */
    fw->lora_stride = (size_t) KVS_CPU_LORA_GROUP * rank;
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


void
kvs_cpu_lora_rows_c(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g)
{
    float           *y, *t, sum;
    uint32_t         i, r, c, o;
    const float     *x;
    const uint16_t  *a, *b;

    for (i = 0; i < g->cnt; i++) {
        x = g->x + (size_t) g->rows[i] * g->ldx;
        y = g->y + (size_t) g->rows[i] * g->ldy;
        t = g->t + (size_t) i * p->rank;

        for (r = 0; r < p->rank; r++) {
            a = p->a + (size_t) r * p->n_in;
            sum = 0.0f;
            for (c = 0; c < p->n_in; c++) {
                sum += x[c] * kvs_cpu_lora_h2f(a[c]);
            }
            t[r] = sum * p->scale;
        }

        for (r = 0; r < p->rank; r++) {
            b = p->bt + (size_t) r * p->n_out;
            for (o = 0; o < p->n_out; o++) {
                y[o] += t[r] * kvs_cpu_lora_h2f(b[o]);
            }
        }
    }
}


typedef struct {
    const kvs_cpu_fw_t         *fw;
    size_t                      k;    /* the layer's first pair */
    const float                *x;
    uint32_t                    ldx;
    const kvs_cpu_lora_out_t   *outs;
    uint32_t                    n_outs;
} kvs_cpu_lora_job_t;


/* Task `task`: the group of rows task / n_outs under output task %
 * n_outs, so a thread's consecutive tasks share the group's x rows and
 * adapter. */
static void
kvs_cpu_lora_task(void *arg, uint32_t task, uint32_t thread)
{
    uint32_t                   j0, s, grp;
    kvs_cpu_kv_t              *kv;
    kvs_cpu_lora_rows_t        g;
    const uint32_t            *starts;
    const kvs_cpu_lora_out_t  *out;
    const kvs_cpu_lora_pair_t *p;
    const kvs_cpu_lora_job_t  *job;

    job = arg;
    kv = job->fw->kv;
    grp = task / job->n_outs;
    out = &job->outs[task % job->n_outs];
    starts = kv->lora_rows + job->fw->b->n;
    j0 = starts[grp];

    /* every row of a task has one adapter */
    s = job->fw->lora_slots[kv->lora_rows[j0]];
    p = &kv->lora[s - 1]->pairs[job->k + out->target];

    if (p->rank == 0) {
        return;
    }

    g.x = job->x;
    g.ldx = job->ldx;
    g.y = out->y;
    g.ldy = out->ldy;
    g.rows = kv->lora_rows + j0;
    g.cnt = starts[grp + 1] - j0;
    g.t = kv->lora_tmp + (size_t) thread * job->fw->lora_stride;

#if KVS_CPU_X86
    if (job->fw->simd >= KVS_CPU_SIMD_AVX512) {
        kvs_cpu_lora_rows_avx512(p, &g);
        return;
    }

    if (job->fw->simd >= KVS_CPU_SIMD_AVX2) {
        kvs_cpu_lora_rows_avx2(p, &g);
        return;
    }
#endif

    kvs_cpu_lora_rows_c(p, &g);
}


void
kvs_cpu_lora_apply_n(const kvs_cpu_fw_t *fw, uint32_t layer, const float *x,
    uint32_t ldx, const kvs_cpu_lora_out_t *outs, uint32_t n_outs)
{
    double              work;
    uint32_t            j;
    kvs_cpu_lora_job_t  job;

    if (fw->lora_n == 0 || n_outs == 0) {
        return;
    }

    job.fw = fw;
    job.k = (size_t) layer * KVS_LORA_N_TARGETS;
    job.x = x;
    job.ldx = ldx;
    job.outs = outs;
    job.n_outs = n_outs;

    work = 0.0;
    for (j = 0; j < n_outs; j++) {
        work += (double) fw->lora_n * fw->lora_rank * (ldx + outs[j].ldy);
    }

    kvs_threads_run(kvs_cpu_pool(fw, work), kvs_cpu_lora_task, &job,
                    fw->lora_tasks * n_outs);
}


void
kvs_cpu_lora_apply(const kvs_cpu_fw_t *fw, uint32_t layer,
    kvs_lora_target_t target, const float *x, uint32_t ldx, float *y,
    uint32_t ldy)
{
    kvs_cpu_lora_out_t  out;

    out.target = target;
    out.y = y;
    out.ldy = ldy;

    kvs_cpu_lora_apply_n(fw, layer, x, ldx, &out, 1);
}
