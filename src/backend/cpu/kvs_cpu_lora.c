/*
 * kvs_cpu_lora: batched heterogeneous LoRA on the CPU backend.  A kv
 * holds up to KVS_CPU_LORA_SLOTS adapters in slots 1..N (slot 0 is "no
 * adapter"); kvs_cpu_forward_lora() takes each batch entry's slot.  For
 * each adapted matrix the forward computes the base product once for
 * the whole batch, and each row with an adapter adds its own adapter's
 * low-rank product, y += scale * B (A x), grouped by adapter once per
 * step (kvs_cpu_lora_prepare: a counting sort by slot, then groups of up
 * to KVS_CPU_LORA_GROUP rows of one adapter), in the base product's own
 * dispatch (kvs_cpu_matmul_lora with a kvs_cpu_lora_mm_t): the base
 * tiles first (each counted done, kvs_cpu_lora_mm_done), then one task
 * per group and output (kvs_cpu_lora_mm_task), which waits for that
 * output's base values and reads the adapter's pair once, in order: T =
 * scale A x, then y += B T over all the outputs (a step reads 32 pairs
 * of distinct adapters from memory at batch 32: each in one stretch,
 * the next ones' fetched ahead); rows with slot 0 are never touched.
 *
 * kvs_cpu_lora_image() packs the adapter into an image of its own
 * (kvs_cpu_lora_slot_t), F16 with a power-of-two scale per matrix, B
 * transposed in blocks of 16 outputs, in the forward's order
 * (kvs_cpu_lora.h): half the bytes a step reads of F32, the reason the
 * many-adapter step is faster (it is bound by reading the adapters).
 * The products go through the group kernels of the CPU's level
 * (kvs_cpu_simd): AVX-512 or AVX2 (kvs_cpu_lora_x86.c), else the
 * portable reference here (kvs_cpu_lora_rows_c and its halves) over the
 * same packed values.
 *
 * Invariants: a slot's adapter was checked against the model when set
 * (every pair's shapes are the matrices' the forward multiplies: fused
 * phi3 tensors are refused); its pairs are indexed by (layer, target),
 * so a step looks a matrix up in O(1).  A row's result depends only on
 * its own input, adapter and the kernel level, never on the batch, the
 * grouping, the thread or the base product's tiles (each output is its
 * base value plus its rank terms in order); the levels agree within
 * float rounding
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
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvs_buf.h"
#include "kvs_cpu_impl.h"
#include "kvs_cpu_lora.h"

#define KVS_CPU_LORA_GROUP  8         /* rows of one adapter per task */
#ifndef KVS_CPU_LORA_AHEAD
#define KVS_CPU_LORA_AHEAD  2         /* tasks ahead whose pair is fetched */
#endif


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


/* Packs pair m into p, its values at dst (rank * (n_in + n_out rounded
 * up to whole blocks) halves), converted at kernel level simd;
 * KVS_EUNSUPPORTED when its scale does not fit a float. */
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
     * places in B^T's blocks; the last block's padding zero */
    bt = dst + (size_t) m->rank * m->n_in;
    memset(bt, 0, (size_t) m->rank * kvs_cpu_lora_blk_out(m->n_out)
                  * sizeof(uint16_t));

    p->a = dst;
    p->bt = bt;
    p->rank = m->rank;
    p->n_in = (uint32_t) m->n_in;
    p->n_out = (uint32_t) m->n_out;
    p->scale = sc;

    for (o = 0; o < m->n_out; o++) {
        kvs_cpu_lora_f2h_n(simd, row, m->b + o * m->rank, m->rank, fb);

        for (r = 0; r < m->rank; r++) {
            *(uint16_t *) kvs_cpu_lora_bt(p, r, (uint32_t) o) = row[r];
        }
    }

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

        halves += (size_t) m->rank
                  * (m->n_in + kvs_cpu_lora_blk_out(m->n_out));
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

        dst += (size_t) by[k]->rank
               * (by[k]->n_in + kvs_cpu_lora_blk_out(by[k]->n_out));
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

    /* T of every adapted row under up to three outputs (q, k, v), a
     * row's at its place in the sorted order */
    fw->lora_stride = (size_t) fw->lora_n * rank;
    need = 3 * fw->lora_stride;

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
kvs_cpu_lora_shrink_c(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g)
{
    float           *t, sum;
    uint32_t         i, r, c;
    const float     *x;
    const uint16_t  *a;

    for (i = 0; i < g->cnt; i++) {
        x = g->x + (size_t) g->rows[i] * g->ldx;
        t = g->t + (size_t) i * p->rank;

        for (r = 0; r < p->rank; r++) {
            a = p->a + (size_t) r * p->n_in;
            sum = 0.0f;
            for (c = 0; c < p->n_in; c++) {
                sum += x[c] * kvs_cpu_lora_h2f(a[c]);
            }
            t[r] = sum * p->scale;
        }
    }
}


void
kvs_cpu_lora_expand_c(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g, uint32_t o0, uint32_t o1)
{
    float           *y, *t;
    uint32_t         i, r, o;
    const uint16_t  *b;

    for (i = 0; i < g->cnt; i++) {
        y = g->y + (size_t) g->rows[i] * g->ldy;
        t = g->t + (size_t) i * p->rank;

        for (r = 0; r < p->rank; r++) {
            for (o = o0; o < o1; o++) {
                b = kvs_cpu_lora_bt(p, r, o);
                y[o] += t[r] * kvs_cpu_lora_h2f(*b);
            }
        }
    }
}


void
kvs_cpu_lora_rows_c(const kvs_cpu_lora_pair_t *p,
    const kvs_cpu_lora_rows_t *g)
{
    kvs_cpu_lora_shrink_c(p, g);
    kvs_cpu_lora_expand_c(p, g, 0, p->n_out);
}


/* Group grp of lm's rows (one adapter's) under output out, T at its
 * rows' places; the pair NULL when that adapter leaves it alone. */
static const kvs_cpu_lora_pair_t *
kvs_cpu_lora_group(const kvs_cpu_lora_mm_t *lm, uint32_t grp, uint32_t out,
    kvs_cpu_lora_rows_t *g)
{
    uint32_t                    j0, s;
    const uint32_t             *starts;
    const kvs_cpu_fw_t         *fw;
    const kvs_cpu_kv_t         *kv;
    const kvs_cpu_lora_pair_t  *p;

    fw = lm->fw;
    kv = fw->kv;
    starts = kv->lora_rows + fw->b->n;
    j0 = starts[grp];

    /* every row of a group has one adapter */
    s = fw->lora_slots[kv->lora_rows[j0]];
    p = &kv->lora[s - 1]->pairs[lm->k + lm->outs[out].target];

    if (p->rank == 0) {
        return NULL;
    }

    g->x = lm->x;
    g->ldx = lm->ldx;
    g->y = lm->outs[out].y;
    g->ldy = lm->outs[out].ldy;
    g->rows = kv->lora_rows + j0;
    g->cnt = starts[grp + 1] - j0;
    g->t = kv->lora_tmp + out * fw->lora_stride + (size_t) j0 * fw->lora_rank;

    return p;
}


void
kvs_cpu_lora_mm_init(kvs_cpu_lora_mm_t *lm, const kvs_cpu_fw_t *fw,
    uint32_t layer, const float *x, uint32_t ldx,
    const kvs_cpu_lora_out_t *outs, uint32_t n_outs)
{
    uint32_t  m;

    lm->fw = fw;
    lm->k = (size_t) layer * KVS_LORA_N_TARGETS;
    lm->x = x;
    lm->ldx = ldx;
    lm->n_outs = n_outs;
    lm->n_tasks = fw->lora_n == 0 ? 0 : fw->lora_tasks * n_outs;

    for (m = 0; m < n_outs; m++) {
        lm->outs[m] = outs[m];
        atomic_init(&lm->rows[m], 0);
    }
}


void
kvs_cpu_lora_mm_done(kvs_cpu_lora_mm_t *lm, uint32_t m, uint32_t o0,
    uint32_t o1)
{
    /* the base values written before the count says so */
    atomic_fetch_add_explicit(&lm->rows[m], o1 - o0, memory_order_release);
}


/* Task `task`'s pair asked for ahead of its turn (the pairs are read
 * once a step, from memory: with their values in flight while an earlier
 * task computes, the step waits less on each pair's first lines). */
static void
kvs_cpu_lora_ahead(const kvs_cpu_lora_mm_t *lm, uint32_t task)
{
    size_t                      n, o;
    const char                 *a;
    kvs_cpu_lora_rows_t         g;
    const kvs_cpu_lora_pair_t  *p;

    if (task >= lm->n_tasks) {
        return;
    }

    p = kvs_cpu_lora_group(lm, task % lm->fw->lora_tasks,
                           task / lm->fw->lora_tasks, &g);
    if (p == NULL) {
        return;
    }

    a = (const char *) p->a;
    n = (size_t) p->rank * ((size_t) p->n_in + kvs_cpu_lora_blk_out(p->n_out))
        * sizeof(uint16_t);

    for (o = 0; o < n; o += 64) {
        __builtin_prefetch(a + o, 0, 2);
    }
}


/* Task `task`: group task % lora_tasks under output task / lora_tasks,
 * so the first output's tasks come first, when its base tiles are the
 * likeliest to be done.  The pair is read once: A for T (which needs
 * only x), then B^T for all the outputs, once they hold their base
 * values: every base tile was claimed before this task (they come first
 * in the dispatch), but the last ones may still be running on another
 * thread, so the task waits for the output's rows between the halves. */
void
kvs_cpu_lora_mm_task(kvs_cpu_lora_mm_t *lm, uint32_t task)
{
    int                         simd;
    uint32_t                    m, spins;
    kvs_cpu_lora_rows_t         g;
    const kvs_cpu_lora_pair_t  *p;

    kvs_cpu_lora_ahead(lm, task + KVS_CPU_LORA_AHEAD);

    m = task / lm->fw->lora_tasks;
    p = kvs_cpu_lora_group(lm, task % lm->fw->lora_tasks, m, &g);

    if (p == NULL) {
        return;
    }

    simd = lm->fw->simd;

#if KVS_CPU_X86
    if (simd >= KVS_CPU_SIMD_AVX512) {
        kvs_cpu_lora_shrink_avx512(p, &g);
    } else if (simd >= KVS_CPU_SIMD_AVX2) {
        kvs_cpu_lora_shrink_avx2(p, &g);
    } else
#endif
    {
        kvs_cpu_lora_shrink_c(p, &g);
    }

    for (spins = 0; atomic_load_explicit(&lm->rows[m], memory_order_acquire)
                    < p->n_out; spins++)
    {
        if (spins >= 256) {
            sched_yield();
        }
    }

#if KVS_CPU_X86
    if (simd >= KVS_CPU_SIMD_AVX512) {
        kvs_cpu_lora_expand_avx512(p, &g, 0, p->n_out);
        return;
    }

    if (simd >= KVS_CPU_SIMD_AVX2) {
        kvs_cpu_lora_expand_avx2(p, &g, 0, p->n_out);
        return;
    }
#endif

    (void) simd;
    kvs_cpu_lora_expand_c(p, &g, 0, p->n_out);
}
