/*
 * kvs_cuda_lora: LoRA adapters on the CUDA backend: the slots' device
 * images and table (set_lora, or its halves: lora_prepare converts on
 * any thread, lora_install uploads), a slice's grouping upload, and the
 * grouped product after each adapted base product.  kvs_cuda_lora.h
 * says what it owns and the invariants it keeps.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_cuda_lora.h"


/* the slot table's entries are the kernel's, field for field */
_Static_assert(sizeof(void *) == sizeof(uint64_t)
               && sizeof(kvs_k_lora_mat_t) == sizeof(kvs_cuda_lora_ent_t),
               "a device address in a uint64_t");
_Static_assert(offsetof(kvs_k_lora_mat_t, bt) == offsetof(kvs_cuda_lora_ent_t,
                                                          bt)
               && offsetof(kvs_k_lora_mat_t, rank)
                  == offsetof(kvs_cuda_lora_ent_t, rank)
               && offsetof(kvs_k_lora_mat_t, scale)
                  == offsetof(kvs_cuda_lora_ent_t, scale),
               "kvs_k_lora_mat_t is kvs_cuda_lora_ent_t");
_Static_assert(KVS_CUDA_LORA_SLOTS == KVS_BACKEND_LORA_SLOTS,
               "the engine's slots are the backend's");


/* The state, on the first set_lora: the table (host and device), the
 * grouping images.  T grows in kvs_cuda_lora_grow_t. */
static int
kvs_cuda_lora_init(kvs_cuda_t *cu, kvs_err_t *err)
{
    int               rc;
    size_t            words;
    kvs_cuda_lora_t  *lo;

    lo = calloc(1, sizeof(*lo));
    if (lo == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cuda lora: out of memory");
    }

    cu->lora = lo;
    lo->cap = cu->max_tok;
    words = kvs_cuda_lora_group_words(lo->cap);

    rc = kvs_cuda_lora_table_new(&lo->tab, cu->hp.n_layer, err);
    if (rc != KVS_OK) {
        goto failed;
    }

    KVS_CUDA_TRY(cudaMalloc((void **) &lo->dtab,
                            kvs_cuda_lora_table_len(&lo->tab)
                            * sizeof(kvs_k_lora_mat_t)),
                 "cudaMalloc(lora table)");
    KVS_CUDA_TRY(cudaMemset(lo->dtab, 0, kvs_cuda_lora_table_len(&lo->tab)
                                         * sizeof(kvs_k_lora_mat_t)),
                 "cudaMemset(lora table)");
    KVS_CUDA_TRY(cudaMallocHost((void **) &lo->hwords,
                                words * sizeof(int32_t)),
                 "cudaMallocHost(lora groups)");
    KVS_CUDA_TRY(cudaMalloc((void **) &lo->dwords, words * sizeof(int32_t)),
                 "cudaMalloc(lora groups)");

    return KVS_OK;

failed:

    kvs_cuda_lora_free(cu);

    return rc;
}


/* T of max_tok rows of at least `rank` floats. */
static int
kvs_cuda_lora_grow_t(kvs_cuda_t *cu, uint32_t rank, kvs_err_t *err)
{
    int               rc;
    float            *t;
    kvs_cuda_lora_t  *lo;

    lo = cu->lora;

    if (rank <= lo->t_rank) {
        return KVS_OK;
    }

    t = NULL;
    KVS_CUDA_TRY(cudaMalloc((void **) &t, (size_t) lo->cap * rank
                                          * sizeof(float)),
                 "cudaMalloc(lora scratch)");

    if (lo->t != NULL) {
        (void) cudaFree(lo->t);
    }

    lo->t = t;
    lo->t_rank = rank;

    return KVS_OK;

failed:

    return rc;
}


/* A slot's host image (lora_prepare): the adapter's values in the
 * device layout, converted, waiting for their upload. */
typedef struct {
    const kvs_lora_t      *l;         /* borrowed until installed */
    kvs_cuda_lora_part_t  *parts;     /* [l->n_mat] */
    uint64_t               bytes;
    void                  *host;      /* [bytes] */
} kvs_cuda_lora_img_t;


void
kvs_cuda_lora_free_image(kvs_backend_t *be, void *img)
{
    kvs_cuda_lora_img_t  *im = img;

    if (im == NULL) {
        return;
    }

    free(im->parts);
    free(im->host);
    free(im);
}


/* No CUDA call and no backend state but the model's shapes: any thread,
 * while the engine steps. */
int
kvs_cuda_lora_prepare(kvs_backend_t *be, const kvs_lora_t *l, void **img,
    kvs_err_t *err)
{
    int                   rc;
    kvs_cuda_t           *cu;
    kvs_cuda_lora_img_t  *im;

    cu = be->impl;
    *img = NULL;

    rc = kvs_cuda_lora_fit(&cu->hp, l, err);
    if (rc != KVS_OK) {
        return rc;
    }

    im = calloc(1, sizeof(*im));
    if (im == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "cuda lora: out of memory");
    }

    im->l = l;
    im->parts = calloc(l->n_mat, sizeof(*im->parts));
    if (im->parts == NULL) {
        kvs_cuda_lora_free_image(be, im);
        return kvs_err_set(err, KVS_ENOMEM, "cuda lora: out of memory");
    }

    rc = kvs_cuda_lora_layout(l, im->parts, &im->bytes, err);
    if (rc != KVS_OK) {
        kvs_cuda_lora_free_image(be, im);
        return rc;
    }

    im->host = malloc(im->bytes);
    if (im->host == NULL) {
        rc = kvs_err_set(err, KVS_ENOMEM, "cuda lora: out of memory for %"
                         PRIu64 " bytes of adapter", im->bytes);
        kvs_cuda_lora_free_image(be, im);
        return rc;
    }

    kvs_cuda_lora_pack(l, im->parts, im->bytes, im->host);
    *img = im;

    return KVS_OK;
}


/* The upload stays here, on the engine's thread between steps: the
 * slot's device memory, the copy, the table. */
int
kvs_cuda_lora_install(kvs_backend_t *be, uint32_t slot, void *img,
    void **spent, kvs_err_t *err)
{
    int                   rc;
    void                 *dev;
    cudaError_t           e;
    kvs_cuda_t           *cu;
    kvs_cuda_lora_t      *lo;
    kvs_cuda_lora_img_t  *im;

    cu = be->impl;
    im = img;
    dev = NULL;
    *spent = NULL;

    if (slot == 0 || slot > KVS_CUDA_LORA_SLOTS) {
        return kvs_err_set(err, KVS_EINVAL, "cuda lora: slot %" PRIu32
                           " outside 1..%d", slot, KVS_CUDA_LORA_SLOTS);
    }

    if (im == NULL && cu->lora == NULL) {
        return KVS_OK;
    }

    e = cudaSetDevice(cu->device);
    if (e != cudaSuccess) {
        return kvs_cuda_fail(err, "cudaSetDevice", e);
    }

    if (cu->lora == NULL) {
        rc = kvs_cuda_lora_init(cu, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    lo = cu->lora;

    /* the new image on the device before the slot changes */
    if (im != NULL) {
        rc = kvs_cuda_lora_grow_t(cu, im->l->rank_max, err);
        if (rc != KVS_OK) {
            return rc;
        }

        KVS_CUDA_TRY(cudaMalloc(&dev, im->bytes), "cudaMalloc(lora adapter)");
        KVS_CUDA_TRY(cudaMemcpy(dev, im->host, im->bytes,
                                cudaMemcpyHostToDevice),
                     "cudaMemcpy(lora adapter)");
    }

    /* cannot fail: the slot is in range */
    (void) kvs_cuda_lora_table_set(&lo->tab, slot,
                                   im != NULL ? im->l : NULL,
                                   (uint64_t) (uintptr_t) dev,
                                   im != NULL ? im->parts : NULL, err);

    e = cudaMemcpy(lo->dtab, lo->tab.ent, kvs_cuda_lora_table_len(&lo->tab)
                                          * sizeof(kvs_k_lora_mat_t),
                   cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        rc = kvs_cuda_fail(err, "cudaMemcpy(lora table)", e);
        (void) kvs_cuda_lora_table_set(&lo->tab, slot, NULL, 0, NULL, err);
        goto failed;
    }

    if (lo->img[slot] != NULL) {
        (void) cudaFree(lo->img[slot]);
    }

    lo->img[slot] = dev;
    lo->img_bytes[slot] = im != NULL ? im->bytes : 0;

    /* the host copy is spent: the device's is the slot's */
    *spent = im;

    return KVS_OK;

failed:

    if (dev != NULL) {
        (void) cudaFree(dev);
    }

    return rc;
}


int
kvs_cuda_set_lora(kvs_backend_t *be, uint32_t slot, const kvs_lora_t *l,
    kvs_err_t *err)
{
    int    rc;
    void  *img, *spent;

    img = NULL;

    if (slot == 0 || slot > KVS_CUDA_LORA_SLOTS) {
        return kvs_err_set(err, KVS_EINVAL, "cuda lora: slot %" PRIu32
                           " outside 1..%d", slot, KVS_CUDA_LORA_SLOTS);
    }

    if (l != NULL) {
        rc = kvs_cuda_lora_prepare(be, l, &img, err);
        if (rc != KVS_OK) {
            return rc;
        }
    }

    rc = kvs_cuda_lora_install(be, slot, img, &spent, err);

    kvs_cuda_lora_free_image(be, rc == KVS_OK ? spent : img);

    return rc;
}


int
kvs_cuda_lora_check_slots(const kvs_cuda_t *cu, const uint32_t *slots,
    uint32_t n, kvs_err_t *err)
{
    static const kvs_cuda_lora_table_t  none;

    return kvs_cuda_lora_check(cu->lora != NULL ? &cu->lora->tab : &none,
                               slots, n, err);
}


int
kvs_cuda_lora_slice(kvs_cuda_t *cu, const uint32_t *slots, uint32_t n,
    uint32_t *n_task, kvs_err_t *err)
{
    uint32_t          i, rank;
    cudaError_t       e;
    kvs_cuda_lora_t  *lo;

    *n_task = 0;
    lo = cu->lora;

    for (i = 0; i < n && slots[i] == 0; i++) {
        /* void */
    }

    if (i == n || lo == NULL) {
        return KVS_OK;
    }

    if (n > lo->cap) {
        return kvs_err_set(err, KVS_EINVAL, "cuda lora: a slice of %" PRIu32
                           " rows, %" PRIu32 " planned", n, lo->cap);
    }

    kvs_cuda_lora_group(&lo->tab, slots, n, lo->cap, lo->hwords, n_task,
                        &rank);

    e = cudaMemcpyAsync(lo->dwords, lo->hwords,
                        kvs_cuda_lora_group_words(lo->cap) * sizeof(int32_t),
                        cudaMemcpyHostToDevice, cu->st);
    if (e != cudaSuccess) {
        return kvs_cuda_fail(err, "cudaMemcpyAsync(lora groups)", e);
    }

    return KVS_OK;
}


int
kvs_cuda_lora_apply(kvs_cuda_t *cu, uint32_t n_task, uint32_t layer,
    kvs_lora_target_t target, const void *x, int x_dt, size_t ldx, float *y,
    size_t ldy, kvs_err_t *err)
{
    int                    rc;
    uint32_t               rank;
    uint64_t               n_in, n_out;
    kvs_cuda_lora_t       *lo;

    lo = cu->lora;

    if (n_task == 0 || lo == NULL) {
        return KVS_OK;
    }

    rank = kvs_cuda_lora_need(&lo->tab, layer, target,
                              lo->hwords + 2 * (size_t) lo->cap + 1, n_task);
    if (rank == 0) {
        return KVS_OK;
    }

    kvs_cuda_lora_dims(&cu->hp, target, &n_in, &n_out);

    rc = kvs_k_lora(y, ldy, x, x_dt, ldx, (uint32_t) n_in, (uint32_t) n_out,
                    lo->dtab + (kvs_cuda_lora_table_at(&lo->tab, layer, target)
                                - lo->tab.ent),
                    lo->dwords, lo->cap, n_task, rank, lo->t, cu->st);
    if (rc != 0) {
        return kvs_cuda_k(err, "kvs_k_lora", rc);
    }

    return KVS_OK;
}


void
kvs_cuda_lora_free(kvs_cuda_t *cu)
{
    uint32_t          s;
    kvs_cuda_lora_t  *lo;

    lo = cu->lora;
    if (lo == NULL) {
        return;
    }

    for (s = 1; s <= KVS_CUDA_LORA_SLOTS; s++) {
        if (lo->img[s] != NULL) {
            (void) cudaFree(lo->img[s]);
        }
    }

    if (lo->dtab != NULL) {
        (void) cudaFree(lo->dtab);
    }

    if (lo->t != NULL) {
        (void) cudaFree(lo->t);
    }

    if (lo->dwords != NULL) {
        (void) cudaFree(lo->dwords);
    }

    if (lo->hwords != NULL) {
        (void) cudaFreeHost(lo->hwords);
    }

    kvs_cuda_lora_table_free(&lo->tab);
    free(lo);
    cu->lora = NULL;
}
