/*
 * gpu_check: the device half of `make gpu-check` (t/gpu/gpu_check.sh):
 * on a CUDA device, checks every kernel against CPU references
 * (gpu_check_kern.c), compares greedy generation through the CUDA and CPU
 * backends (gpu_check_e2e.c) and times a model of Llama-3-8B's shapes
 * (gpu_check_time.c), then writes gpu-check.md and gpu-check.tsv; LoRA
 * adapters' kernel and the backend with adapters against the CPU's are
 * the part "lora" (gpu_check_lora.c); the prefix cache's host and disk
 * tiers through the backend's block copies are the part "tier"
 * (gpu_check_tier.c), the host tier's copies off the step the part
 * "hcopy" (gpu_check_hcopy.c).
 *
 *   gpu_check [--out DIR] [--fixtures DIR] [--tmp DIR] [--seed N]
 *             [--only kern|e2e|tier|hcopy|lora|time] [--device N]
 *             [--quick]
 *             [--self-test]
 *
 * --self-test needs no device: it runs the end-to-end harness with the
 * CPU backend in the CUDA backend's place (so both runs must agree
 * exactly) and builds, opens and steps a 4-layer model image: a check of
 * this program on GPU-less hosts.
 *
 * Without a device it prints one SKIP line and exits 0, so it can be
 * built and started anywhere.  Exit status: 0 when every check passed
 * (PASS* counts: a greedy divergence at a near-tie the logits' error
 * explains), 1 otherwise.  This file owns main, the shared helpers of
 * gpu_check.h and the report.
 */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gpu_check.h"
#include "kv/kvs_kv_quant.h"
#include "model/kvs_dtype.h"

static int gc_args(gc_ctx_t *c, int argc, char **argv);
static void gc_report(gc_ctx_t *c, const struct cudaDeviceProp *prop,
    int drv, int rt);
static void gc_fmt_copy(char *dst, size_t len, const char *src);


int
main(int argc, char **argv)
{
    int                    n, drv, rt, rc;
    double                 t;
    cudaError_t            e;
    gc_ctx_t              *c;
    struct cudaDeviceProp  prop;

    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        fprintf(stderr, "gpu_check: out of memory\n");
        return 1;
    }

    c->t0 = gc_now();

    if (gc_args(c, argc, argv) != 0) {
        free(c);
        return 2;
    }

    if (c->self_test) {
        printf("gpu_check: self-test without a device, seed %llu\n",
               (unsigned long long) c->seed);
        rc = gc_e2e_run(c);
        if (rc == 0) {
            rc = gc_tier_run(c);
        }
        if (rc == 0) {
            rc = gc_hcopy_run(c);
        }
        if (rc == 0) {
            rc = gc_lora_run(c);
        }
        if (rc == 0) {
            rc = gc_time_self_test(c);
        }
        memset(&prop, 0, sizeof(prop));
        snprintf(prop.name, sizeof(prop.name), "self-test, no device");
        gc_report(c, &prop, 0, 0);
        printf("gpu_check: self-test: %d passed, %d failed, %d skipped\n",
               c->n_pass, c->n_fail, c->n_skip);
        rc = rc == 0 && c->n_fail == 0 ? 0 : 1;
        free(c);
        return rc;
    }

    n = 0;
    e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("gpu_check: SKIP: no CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "count is 0");
        free(c);
        return 0;
    }

    if (c->device < 0 || c->device >= n
        || GC_CU(c, cudaSetDevice(c->device))
        || GC_CU(c, cudaGetDeviceProperties(&prop, c->device)))
    {
        printf("gpu_check: FAIL: device %d of %d unusable\n", c->device, n);
        free(c);
        return 1;
    }

    drv = 0;
    rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);

    printf("gpu_check: device %d: %s, sm_%d%d, %d SMs, %.1f GiB, driver "
           "%d.%d, runtime %d.%d\n", c->device, prop.name, prop.major,
           prop.minor, prop.multiProcessorCount,
           (double) prop.totalGlobalMem / (1u << 30), drv / 1000,
           drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    printf("gpu_check: seed %llu, out %s, fixtures %s\n",
           (unsigned long long) c->seed, c->out_dir,
           c->fixtures ? c->fixtures : "(none)");
    fflush(stdout);

    rc = 0;

    if (c->only == NULL || strcmp(c->only, "kern") == 0) {
        t = gc_now();
        printf("\n== kernels vs CPU references\n");
        rc = gc_kern_run(c);
        printf("== kernels: %.1f s\n", gc_now() - t);
        fflush(stdout);
    }

    if (rc == 0 && (c->only == NULL || strcmp(c->only, "e2e") == 0)) {
        t = gc_now();
        printf("\n== end to end: greedy tokens, CUDA vs CPU backend\n");
        rc = gc_e2e_run(c);
        printf("== end to end: %.1f s\n", gc_now() - t);
        fflush(stdout);
    }

    if (rc == 0 && (c->only == NULL || strcmp(c->only, "tier") == 0)) {
        t = gc_now();
        printf("\n== tiers: blocks to host memory and disk and back, "
               "greedy tokens vs cache off\n");
        rc = gc_tier_run(c);
        printf("== tiers: %.1f s\n", gc_now() - t);
        fflush(stdout);
    }

    if (rc == 0 && (c->only == NULL || strcmp(c->only, "hcopy") == 0)) {
        t = gc_now();
        printf("\n== host tier copies off the step: async vs sync, timed, "
               "greedy tokens vs cache off\n");
        rc = gc_hcopy_run(c);
        printf("== host tier copies: %.1f s\n", gc_now() - t);
        fflush(stdout);
    }

    if (rc == 0 && (c->only == NULL || strcmp(c->only, "lora") == 0)) {
        t = gc_now();
        printf("\n== LoRA: the grouped kernel, CUDA vs CPU with adapters\n");
        rc = gc_lora_run(c);
        printf("== LoRA: %.1f s\n", gc_now() - t);
        fflush(stdout);
    }

    if (rc == 0 && (c->only == NULL || strcmp(c->only, "time") == 0)) {
        t = gc_now();
        printf("\n== timing: Llama-3-8B shapes, random BF16 weights\n");
        rc = gc_time_run(c);
        printf("== timing: %.1f s\n", gc_now() - t);
        fflush(stdout);
    }

    if (rc != 0 || c->dead) {
        c->n_fail++;
        gc_row(c, "run", "device", "unusable", "", "", "FAIL",
               "a sticky CUDA error ended the run early");
    }

    gc_report(c, &prop, drv, rt);

    printf("\ngpu_check: %d passed, %d failed, %d skipped, %.1f s in all\n",
           c->n_pass, c->n_fail, c->n_skip, gc_now() - c->t0);

    rc = c->n_fail == 0 ? 0 : 1;
    free(c);

    return rc;
}


static int
gc_args(gc_ctx_t *c, int argc, char **argv)
{
    int                  i;
    char                *end;
    const char          *o, *v;
    unsigned long long   num;

    c->out_dir = getenv("OUT");
    if (c->out_dir == NULL || c->out_dir[0] == '\0') {
        c->out_dir = "t/gpu/out";
    }

    c->fixtures = getenv("KVS_FIXTURES");
    c->tmp = getenv("KVS_TMP");
    if (c->tmp == NULL || c->tmp[0] == '\0') {
        c->tmp = "/tmp";
    }

    c->seed = (uint64_t) time(NULL);

    for (i = 1; i < argc; i++) {
        o = argv[i];

        if (strcmp(o, "--quick") == 0) {
            c->quick = 1;
            continue;
        }

        if (strcmp(o, "--self-test") == 0) {
            c->self_test = 1;
            continue;
        }

        if (i + 1 >= argc) {
            fprintf(stderr, "gpu_check: %s needs a value (see the head of "
                    "t/gpu/gpu_check.c)\n", o);
            return -1;
        }

        v = argv[++i];

        if (strcmp(o, "--out") == 0) {
            c->out_dir = v;

        } else if (strcmp(o, "--fixtures") == 0) {
            c->fixtures = v;

        } else if (strcmp(o, "--tmp") == 0) {
            c->tmp = v;

        } else if (strcmp(o, "--only") == 0) {
            if (strcmp(v, "kern") && strcmp(v, "e2e") && strcmp(v, "lora")
                && strcmp(v, "time") && strcmp(v, "tier")
                && strcmp(v, "hcopy"))
            {
                fprintf(stderr, "gpu_check: --only "
                        "kern|e2e|tier|hcopy|lora|time\n");
                return -1;
            }
            c->only = v;

        } else if (strcmp(o, "--seed") == 0 || strcmp(o, "--device") == 0) {
            errno = 0;
            num = strtoull(v, &end, 10);
            if (errno != 0 || *end != '\0' || end == v
                || (o[2] == 'd' && num > 255))
            {
                fprintf(stderr, "gpu_check: %s \"%s\" is not a number\n", o,
                        v);
                return -1;
            }

            if (o[2] == 'd') {
                c->device = (int) num;

            } else {
                c->seed = num;
            }

        } else {
            fprintf(stderr, "gpu_check: unknown option %s\n", o);
            return -1;
        }
    }

    return 0;
}


/* --- shared helpers ---------------------------------------------------- */

uint64_t
gc_rng_u64(gc_rng_t *r)
{
    uint64_t  z;

    r->s += 0x9E3779B97F4A7C15ull;
    z = r->s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;

    return z ^ (z >> 31);
}


double
gc_rng_unit(gc_rng_t *r)
{
    return (double) (gc_rng_u64(r) >> 11) / 9007199254740992.0;
}


float
gc_rng_range(gc_rng_t *r, float lo, float hi)
{
    return lo + (hi - lo) * (float) gc_rng_unit(r);
}


uint32_t
gc_rng_below(gc_rng_t *r, uint32_t n)
{
    return n == 0 ? 0 : (uint32_t) (gc_rng_u64(r) % n);
}


double
gc_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}


int
gc_cu(gc_ctx_t *c, cudaError_t rc, const char *what)
{
    cudaError_t  sticky;

    if (rc == cudaSuccess) {
        return 0;
    }

    printf("  CUDA error %d (%s) in %s\n", (int) rc, cudaGetErrorString(rc),
           what);

    /* an error that a second query still returns has poisoned the
     * context: nothing on this device can be trusted after it */
    sticky = cudaGetLastError();
    if (sticky != cudaSuccess && cudaDeviceSynchronize() != cudaSuccess) {
        c->dead = 1;
    }

    if (rc == cudaErrorIllegalAddress || rc == cudaErrorLaunchFailure
        || rc == cudaErrorMisalignedAddress || rc == cudaErrorAssert
        || rc == cudaErrorIllegalInstruction
        || rc == cudaErrorHardwareStackError)
    {
        c->dead = 1;
    }

    fflush(stdout);

    return 1;
}


void *
gc_dev_poisoned(gc_ctx_t *c, size_t n)
{
    void  *p;

    p = NULL;

    if (GC_CU(c, cudaMalloc(&p, n ? n : 1))) {
        return NULL;
    }

    if (GC_CU(c, cudaMemset(p, 0xFF, n ? n : 1))) {
        cudaFree(p);
        return NULL;
    }

    return p;
}


void *
gc_dev_upload(gc_ctx_t *c, const void *src, size_t n)
{
    void  *p;

    p = NULL;

    if (GC_CU(c, cudaMalloc(&p, n ? n : 1))) {
        return NULL;
    }

    if (n != 0 && GC_CU(c, cudaMemcpy(p, src, n, cudaMemcpyHostToDevice))) {
        cudaFree(p);
        return NULL;
    }

    return p;
}


int
gc_download(gc_ctx_t *c, void *dst, const void *src, size_t n)
{
    if (n == 0) {
        return 0;
    }

    return GC_CU(c, cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost)) ? -1
                                                                     : 0;
}


void *
gc_buf_poisoned(gc_ctx_t *c, gc_bufs_t *b, size_t n)
{
    void  *p;

    if (b->n >= (int) (sizeof(b->p) / sizeof(b->p[0]))) {
        printf("  gpu_check: too many buffers in one check\n");
        return NULL;
    }

    p = gc_dev_poisoned(c, n);
    if (p != NULL) {
        b->p[b->n++] = p;
    }

    return p;
}


void *
gc_buf_upload(gc_ctx_t *c, gc_bufs_t *b, const void *src, size_t n)
{
    void  *p;

    if (b->n >= (int) (sizeof(b->p) / sizeof(b->p[0]))) {
        printf("  gpu_check: too many buffers in one check\n");
        return NULL;
    }

    p = gc_dev_upload(c, src, n);
    if (p != NULL) {
        b->p[b->n++] = p;
    }

    return p;
}


void
gc_bufs_free(gc_bufs_t *b)
{
    while (b->n > 0) {
        cudaFree(b->p[--b->n]);
    }
}


void *
gc_alloc(size_t n)
{
    void  *p;

    p = malloc(n ? n : 1);
    if (p == NULL) {
        printf("  gpu_check: out of host memory (%zu bytes)\n", n);
    }

    return p;
}


void
gc_fill(void *p, int dtype, size_t n, gc_rng_t *r, float lo, float hi)
{
    float   f;
    size_t  i;

    for (i = 0; i < n; i++) {
        f = gc_rng_range(r, lo, hi);

        switch (dtype) {
        case KVS_K_BF16:
            ((uint16_t *) p)[i] = kvs_f32_to_bf16(f);
            break;
        case KVS_K_F16:
            ((uint16_t *) p)[i] = kvs_f32_to_f16(f);
            break;
        case KVS_K_I8:
            ((uint8_t *) p)[i] = kvs_kvq_enc(0, f * KVS_KVQ_I8_MAX);
            break;
        case KVS_K_FP8:
            ((uint8_t *) p)[i] = kvs_kvq_enc(1, f * KVS_KVQ_FP8_MAX);
            break;
        default:
            ((float *) p)[i] = f;
        }
    }
}


void
gc_fail(gc_ctx_t *c, const char *part, const char *name, const char *why)
{
    printf("  %-4s %-58s %s  FAIL\n", part, name, why);
    fflush(stdout);

    gc_row(c, part, name, "-", "", "", "FAIL", why);
}


int
gc_launched(gc_ctx_t *c, int rc, const char *what)
{
    if (rc == KVS_K_EARG) {
        printf("  %s: the launcher refused its arguments (KVS_K_EARG)\n",
               what);
        return -1;
    }

    if (rc != 0) {
        gc_cu(c, (cudaError_t) rc, what);
        return -1;
    }

    if (gc_cu(c, cudaDeviceSynchronize(), what)) {
        return -1;
    }

    return 0;
}


int
gc_check(gc_ctx_t *c, const char *part, const char *name, double rel,
    double maxabs, double tol)
{
    int   ok;
    char  v[48], f[48];

    ok = isfinite(rel) && rel <= tol;

    snprintf(v, sizeof(v), "%.2e", rel);
    snprintf(f, sizeof(f), "%.2e", tol);

    printf("  %-4s %-58s rel %9.2e  max|d| %9.2e  tol %8.2e  %s\n", part,
           name, rel, maxabs, tol, ok ? "PASS" : "FAIL");
    fflush(stdout);

    gc_row(c, part, name, v, f, "", ok ? "PASS" : "FAIL", "");

    return ok;
}


void
gc_row(gc_ctx_t *c, const char *part, const char *name, const char *value,
    const char *floor, const char *ratio, const char *status,
    const char *note)
{
    gc_row_t  *r;

    if (strcmp(status, "FAIL") == 0) {
        c->n_fail++;

    } else if (strcmp(status, "PASS") == 0 || strcmp(status, "PASS*") == 0) {
        c->n_pass++;

    } else if (strcmp(status, "SKIP") == 0) {
        c->n_skip++;
    }

    if (c->n_rows >= GC_MAX_ROWS) {
        return;
    }

    r = &c->rows[c->n_rows++];

    gc_fmt_copy(r->part, sizeof(r->part), part);
    gc_fmt_copy(r->name, sizeof(r->name), name);
    gc_fmt_copy(r->value, sizeof(r->value), value);
    gc_fmt_copy(r->floor, sizeof(r->floor), floor);
    gc_fmt_copy(r->ratio, sizeof(r->ratio), ratio);
    gc_fmt_copy(r->status, sizeof(r->status), status);
    gc_fmt_copy(r->note, sizeof(r->note), note);
}


/* copies src without tabs, newlines or pipes (they would break the TSV
 * and markdown tables) */
static void
gc_fmt_copy(char *dst, size_t len, const char *src)
{
    size_t  i;

    for (i = 0; i + 1 < len && src[i] != '\0'; i++) {
        dst[i] = (src[i] == '\t' || src[i] == '\n' || src[i] == '|')
                 ? ' ' : src[i];
    }

    dst[i] = '\0';
}


void
gc_err_add(gc_err_t *e, double got, double ref)
{
    double  d;

    e->n++;

    if (!isfinite(got)) {
        e->bad++;
        return;
    }

    d = got - ref;
    e->num += d * d;
    e->den += ref * ref;

    if (fabs(d) > e->maxabs) {
        e->maxabs = fabs(d);
    }
}


double
gc_err_rel(const gc_err_t *e)
{
    if (e->bad != 0) {
        return INFINITY;
    }

    if (e->den == 0.0) {
        return e->num == 0.0 ? 0.0 : INFINITY;
    }

    return sqrt(e->num / e->den);
}


float
gc_load(const void *p, int dtype, size_t i)
{
    switch (dtype) {
    case KVS_K_BF16:
        return kvs_bf16_to_f32(((const uint16_t *) p)[i]);
    case KVS_K_F16:
        return kvs_f16_to_f32(((const uint16_t *) p)[i]);
    case KVS_K_I8:
        return kvs_kvq_dec(0, ((const uint8_t *) p)[i]);
    case KVS_K_FP8:
        return kvs_kvq_dec(1, ((const uint8_t *) p)[i]);
    default:
        return ((const float *) p)[i];
    }
}


size_t
gc_dtype_size(int dtype)
{
    return dtype == KVS_K_F32 ? 4
           : dtype == KVS_K_I8 || dtype == KVS_K_FP8 ? 1 : 2;
}


const char *
gc_dtype_name(int dtype)
{
    switch (dtype) {
    case KVS_K_BF16:
        return "bf16";
    case KVS_K_F16:
        return "f16";
    case KVS_K_I8:
        return "int8";
    case KVS_K_FP8:
        return "fp8";
    default:
        return "f32";
    }
}


/* F32: 1e-5; F16 (11-bit significand): 2^-10; BF16 (8-bit): 2^-7 */
double
gc_dtype_tol(int dtype)
{
    switch (dtype) {
    case KVS_K_BF16:
        return 1.0 / 128;
    case KVS_K_F16:
        return 1.0 / 1024;
    default:
        return 1e-5;
    }
}


/* --- the report -------------------------------------------------------- */

static int
gc_mkdirs(const char *path)
{
    char    buf[4096];
    size_t  i, n;

    n = strlen(path);
    if (n == 0 || n >= sizeof(buf)) {
        return -1;
    }

    memcpy(buf, path, n + 1);

    for (i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                return -1;
            }
            buf[i] = path[i];
        }
    }

    return 0;
}


static void
gc_report(gc_ctx_t *c, const struct cudaDeviceProp *prop, int drv, int rt)
{
    int         i, any, clk;
    char        path[4096], date[64];
    FILE       *md, *tsv;
    time_t      now;
    struct tm   tm;
    gc_row_t   *r;

    if (gc_mkdirs(c->out_dir) != 0) {
        printf("gpu_check: cannot create %s: %s\n", c->out_dir,
               strerror(errno));
        c->n_fail++;
        return;
    }

    now = time(NULL);
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", &tm);

    snprintf(path, sizeof(path), "%s/gpu-check.tsv", c->out_dir);
    tsv = fopen(path, "w");
    snprintf(path, sizeof(path), "%s/gpu-check.md", c->out_dir);
    md = fopen(path, "w");

    if (md == NULL || tsv == NULL) {
        printf("gpu_check: cannot write %s: %s\n", path, strerror(errno));
        c->n_fail++;
        if (md != NULL) {
            fclose(md);
        }
        if (tsv != NULL) {
            fclose(tsv);
        }
        return;
    }

    fprintf(tsv, "part\tname\tvalue\tfloor\tratio\tstatus\tnote\n");
    for (i = 0; i < c->n_rows; i++) {
        r = &c->rows[i];
        fprintf(tsv, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r->part, r->name,
                r->value, r->floor, r->ratio, r->status, r->note);
    }

    fprintf(md, "# gpu-check: %s\n\n", prop->name);
    clk = 0;
    cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, c->device);
    fprintf(md, "- card: %s (sm_%d%d, %d SMs, %.1f GiB, %d-bit memory bus "
            "at %d MHz: %.0f GB/s by the data sheet's arithmetic)\n",
            prop->name, prop->major, prop->minor, prop->multiProcessorCount,
            (double) prop->totalGlobalMem / (1u << 30),
            prop->memoryBusWidth, clk / 1000,
            2.0 * clk * 1e3 * prop->memoryBusWidth / 8 / 1e9);
    fprintf(md, "- CUDA driver %d.%d, runtime %d.%d\n", drv / 1000,
            drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    fprintf(md, "- run: %s, seed %llu, %.1f s, %d checks passed, %d "
            "failed, %d skipped\n", date, (unsigned long long) c->seed,
            gc_now() - c->t0, c->n_pass, c->n_fail, c->n_skip);
    if (c->copy_bw > 0) {
        fprintf(md, "- copy bandwidth (cudaMemcpy device to device, 1 GiB, "
                "bytes read + written / time): %.0f GB/s; every floor "
                "below is bytes moved / this\n", c->copy_bw / 1e9);
    }

    any = 0;
    for (i = 0; i < c->n_rows; i++) {
        r = &c->rows[i];
        if (strcmp(r->part, "time") != 0) {
            continue;
        }
        if (!any) {
            fprintf(md, "\n## Timing (Llama-3-8B shapes%s, random BF16 "
                    "weights)\n\n| measurement | measured | floor | "
                    "measured / floor | note |\n| --- | ---: | ---: | ---: "
                    "| --- |\n", c->quick ? " with 4 layers (--quick)" : "");
            any = 1;
        }
        fprintf(md, "| %s | %s | %s | %s | %s%s%s |\n", r->name, r->value,
                r->floor[0] ? r->floor : "-", r->ratio[0] ? r->ratio : "-",
                strcmp(r->status, "INFO") ? r->status : "",
                strcmp(r->status, "INFO") && r->note[0] ? ": " : "",
                r->note);
    }

    fprintf(md, "\n## Checks\n\n| part | check | error or value | "
            "tolerance | status | note |\n| --- | --- | ---: | ---: | --- | "
            "--- |\n");
    for (i = 0; i < c->n_rows; i++) {
        r = &c->rows[i];
        if (strcmp(r->part, "time") == 0) {
            continue;
        }
        fprintf(md, "| %s | %s | %s | %s | %s | %s |\n", r->part, r->name,
                r->value, r->floor, r->status, r->note);
    }

    fclose(md);
    fclose(tsv);

    printf("gpu_check: wrote %s/gpu-check.md and gpu-check.tsv\n",
           c->out_dir);
}
