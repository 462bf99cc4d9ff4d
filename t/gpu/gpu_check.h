/*
 * gpu_check: what the parts of `make gpu-check` share (gpu_check.c owns
 * main, the results and the report; gpu_check_kern.c checks every kernel
 * of kernels/kvs_kernels.h against CPU references, gpu_check_attn.c
 * those over the paged K/V; gpu_check_e2e.c
 * compares greedy generation through the CUDA and CPU backends;
 * gpu_check_time.c times a model of Llama-3-8B's shapes, which
 * gpu_check_model.c builds in memory).
 *
 * Invariants: every CUDA call is checked (GC_CU); a device error that
 * sticks to the context (a faulting kernel) ends the GPU work of the
 * run, since nothing after it can be trusted, but the report is still
 * written.  Device buffers are poisoned with 0xFF bytes (NaN in every
 * float type) before a kernel writes them, so an element it should have
 * written and did not fails the comparison.
 */

#ifndef GPU_CHECK_H
#define GPU_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "kvs_kernels.h"
#include "backend/kvs_backend.h"
#include "kv/kvs_batch.h"
#include "model/kvs_model.h"
#include "tokenizer/kvs_vocab.h"

#define GC_MAX_ROWS    512            /* report rows kept */

/* one line of the report: a check or a measurement */
typedef struct {
    char      part[16];               /* "kern", "e2e", "time" */
    char      name[96];
    char      value[48];              /* measured, as printed */
    char      floor[48];              /* "" when none */
    char      ratio[24];
    char      status[16];             /* PASS, FAIL, PASS*, INFO, SKIP */
    char      note[160];
} gc_row_t;

typedef struct {
    const char  *out_dir;
    const char  *fixtures;
    const char  *tmp;
    const char  *only;                /* NULL: every part */
    uint64_t     seed;
    int          quick;               /* smaller timing (a smoke run) */
    int          self_test;           /* no device: the harness alone,
                                         the CPU backend standing in for
                                         CUDA (--self-test) */
    int          device;

    int          n_fail;
    int          n_pass;
    int          n_skip;              /* a part or fixture not there */
    int          dead;                /* sticky CUDA error: stop */
    double       t0;                  /* run start, seconds */

    gc_row_t     rows[GC_MAX_ROWS];
    int          n_rows;

    /* filled by the timing part for the report's header */
    double       copy_bw;             /* bytes/s, read + write */
} gc_ctx_t;


/* seeded generator: splitmix64 */
typedef struct {
    uint64_t  s;
} gc_rng_t;

uint64_t gc_rng_u64(gc_rng_t *r);
double gc_rng_unit(gc_rng_t *r);                  /* [0, 1) */
float gc_rng_range(gc_rng_t *r, float lo, float hi);
uint32_t gc_rng_below(gc_rng_t *r, uint32_t n);   /* [0, n) */

double gc_now(void);                              /* monotonic seconds */

/* 1 when rc is a CUDA error: prints it with what, marks a sticky one */
int gc_cu(gc_ctx_t *c, cudaError_t rc, const char *what);
#define GC_CU(c, call)  gc_cu((c), (call), #call)

/* device buffer of n bytes filled with 0xFF; NULL (and printed) on
 * failure */
void *gc_dev_poisoned(gc_ctx_t *c, size_t n);
void *gc_dev_upload(gc_ctx_t *c, const void *src, size_t n);
int gc_download(gc_ctx_t *c, void *dst, const void *src, size_t n);

/* device buffers of one check, freed together */
typedef struct {
    void      *p[64];
    int        n;
} gc_bufs_t;

/* as gc_dev_poisoned / gc_dev_upload, remembered in b */
void *gc_buf_poisoned(gc_ctx_t *c, gc_bufs_t *b, size_t n);
void *gc_buf_upload(gc_ctx_t *c, gc_bufs_t *b, const void *src, size_t n);
void gc_bufs_free(gc_bufs_t *b);

/* host memory; prints and returns NULL on failure */
void *gc_alloc(size_t n);

/* n random elements of dtype in [lo, hi) (rounded to nearest even); in
 * int8 and fp8 the codes of those times the dtype's largest code */
void gc_fill(void *p, int dtype, size_t n, gc_rng_t *r, float lo,
    float hi);

/* a check that could not run (launch refused or failed): a FAIL row */
void gc_fail(gc_ctx_t *c, const char *part, const char *name,
    const char *why);

/* a launcher's return and the stream's completion: 0 when both are fine,
 * else prints and returns -1 */
int gc_launched(gc_ctx_t *c, int rc, const char *what);

/*
 * Records a check: rel is the norm-wise relative error ||got - ref|| /
 * ||ref|| (NaN or inf: failed), passing when rel <= tol.  Prints the line
 * and returns 1 on pass.
 */
int gc_check(gc_ctx_t *c, const char *part, const char *name, double rel,
    double maxabs, double tol);

/* a free-form row; status decides whether it counts as a failure */
void gc_row(gc_ctx_t *c, const char *part, const char *name,
    const char *value, const char *floor, const char *ratio,
    const char *status, const char *note);

/* error accumulation over a set of elements */
typedef struct {
    double    num;                    /* sum (got - ref)^2 */
    double    den;                    /* sum ref^2 */
    double    maxabs;
    uint64_t  bad;                    /* NaN or inf in got */
    uint64_t  n;
} gc_err_t;

void gc_err_add(gc_err_t *e, double got, double ref);
double gc_err_rel(const gc_err_t *e);

/* host conversions of the kernels' element types (int8 and fp8:
 * unscaled) */
float gc_load(const void *p, int dtype, size_t i);
size_t gc_dtype_size(int dtype);
const char *gc_dtype_name(int dtype);
double gc_dtype_tol(int dtype);       /* norm-wise tolerance of an output */


/* the timing model (gpu_check_model.c) */

#define GC_T_POOL      ((size_t) 64 << 20)   /* random bytes, reused */
#define GC_T_BT        16             /* tokens per block */

/* the shapes timed (--quick: 4 layers, for a smoke run on small cards) */
typedef struct {
    uint32_t  n_layer, n_embd, n_head, n_kv, n_ff, n_vocab, n_ctx;
} gc_t_shape_t;

typedef struct {
    uint8_t      *img;                /* the GGUF image, mmap'd */
    size_t        size;
    uint64_t      weight_read;        /* bytes a decode step reads: all
                                         but the embedding table */
    uint64_t      params_mm;          /* matrix elements, output excluded */
    kvs_model_t   m;                  /* over img; never closed */
} gc_t_model_t;

int gc_t_image(gc_ctx_t *c, const gc_t_shape_t *s, gc_t_model_t *tm,
    gc_rng_t *rng);
void gc_t_image_free(gc_t_model_t *tm);

/* a random permutation of [0, n); NULL when out of memory */
uint32_t *gc_t_perm(uint32_t n, gc_rng_t *rng);

/* n sequences of ctx positions, sequence s holding blocks perm[s * ctx /
 * GC_T_BT ...]; entries for positions [pos0, ctx), the last wanting
 * logits.  Returns the entry count. */
int gc_t_batch(kvs_batch_tok_t *toks, kvs_kv_table_t *tabs, uint32_t n,
    uint32_t ctx, uint32_t pos0, const uint32_t *perm, uint32_t n_vocab);


/* the parts; each returns 0, or -1 when the device became unusable */
int gc_kern_run(gc_ctx_t *c);
int gc_attn_run(gc_ctx_t *c);         /* rope_kv and attention, for
                                         gc_kern_run */
int gc_e2e_run(gc_ctx_t *c);
int gc_hcopy_run(gc_ctx_t *c);        /* the host tier's copies off the
                                         step: async vs sync, timed */
/* gc_tier_run's engine check: a prompt evicted by others from a 12-block
 * pool into a disk tier (host NULL) or a host tier (backend_hook and its
 * arg from host; async: its copies must be off the step) comes back
 * with the cache-off engine's greedy tokens (1; 0: why says why) */
typedef struct {
    void   (*hook)(kvs_backend_t *be, void *arg);
    void    *arg;
    int      async;
} gc_tier_host_t;

/* The model at path, its vocabulary and a backend of n_blocks blocks of
 * 16 tokens in K/V dtype kv_dt (-1: the backend's own; CUDA, or the CPU
 * under --self-test); 0 when the model does not open, *be NULL when the
 * backend is refused (both with a FAIL row of part and label). */
int gc_tier_open(gc_ctx_t *c, const char *part, const char *label,
    const char *path, int kv_dt, uint32_t n_blocks, kvs_model_t **m,
    kvs_vocab_t **v, kvs_backend_t **be);

/* 1 when stories260K's fixture is there (its path into path[len]), else
 * a SKIP row of part and 0 */
int gc_tier_fixture(gc_ctx_t *c, const char *part, char *path, size_t len);
int gc_tier_engine(gc_ctx_t *c, kvs_model_t *m, kvs_vocab_t *v, int kv_dt,
    const gc_tier_host_t *host, const char *name, char *why,
    size_t why_len);
int gc_tier_run(gc_ctx_t *c);         /* the prefix cache's host and disk
                                         tiers through block_read and
                                         block_write (gpu_check_tier.c) */
int gc_lora_run(gc_ctx_t *c);         /* LoRA: the kernel, CUDA vs CPU
                                         with adapters (self-test: the
                                         harness on the CPU) */
int gc_time_run(gc_ctx_t *c);
int gc_time_self_test(gc_ctx_t *c);   /* the model image, on the CPU */

#endif /* GPU_CHECK_H */
