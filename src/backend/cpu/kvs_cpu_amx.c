/*
 * kvs_cpu_amx: whether this process may use Intel AMX tiles, decided once
 * per process and failing closed.
 *
 * Three conditions, in order:
 *  1. CPUID leaf 7 (sub-leaf 0) EDX: AMX-TILE (bit 24) and AMX-INT8 (bit
 *     25); AMX-BF16 (bit 22) is recorded too;
 *  2. XCR0 (XGETBV 0, when CPUID.1:ECX.OSXSAVE says it may be read): bits
 *     17 (XTILECFG) and 18 (XTILEDATA), i.e. the kernel saves the tile
 *     state on context switches;
 *  3. Linux (5.16 and later) traps the first tile instruction of a
 *     process that has not asked for the tile data state, and kills it
 *     with SIGILL: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
 *     asks, ARCH_GET_XCOMP_PERM confirms.  The permission is per process
 *     (all its threads, those already running included; inherited on
 *     fork, dropped on exec), so it is asked for once, under
 *     pthread_once.  Nothing per thread is asked of the program: each
 *     thread's first tile instruction makes the kernel allocate that
 *     thread's larger save area (SIGSEGV if that allocation fails), and
 *     the tile configuration is per thread, which is why every tile
 *     kernel loads its own on each call (kvs_cpu_amx.h).  The request
 *     fails (and we fall back) where the kernel lacks the feature or an
 *     installed sigaltstack is too small for the larger signal frame.
 *
 * Nothing here executes a tile instruction, so it runs on any x86-64 CPU;
 * other architectures report "not x86-64".
 */

#include <errno.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kvs_cpu_amx.h"

#if KVS_CPU_X86
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif


#define KVS_AMX_BF16_BIT     (1u << 22)
#define KVS_AMX_TILE_BIT     (1u << 24)
#define KVS_AMX_INT8_BIT     (1u << 25)
#define KVS_AMX_OSXSAVE_BIT  (1u << 27)
#define KVS_AMX_XCR0_TILE    ((1ull << 17) | (1ull << 18))

/* <asm/prctl.h>'s values (older headers lack them) */
#define KVS_ARCH_GET_XCOMP_PERM  0x1022
#define KVS_ARCH_REQ_XCOMP_PERM  0x1023
#define KVS_XFEATURE_XTILEDATA   18


unsigned
kvs_cpu_amx_check(const kvs_cpu_amx_id_t *id, char *why, size_t len)
{
    unsigned  bits;

    why[0] = '\0';

    if (id->max_leaf < 7) {
        snprintf(why, len, "CPUID has no leaf 7");
        return 0;
    }

    if ((id->l7_edx & KVS_AMX_TILE_BIT) == 0) {
        snprintf(why, len, "CPUID: no AMX-TILE");
        return 0;
    }

    if ((id->l7_edx & KVS_AMX_INT8_BIT) == 0) {
        snprintf(why, len, "CPUID: AMX-TILE without AMX-INT8");
        return 0;
    }

    if ((id->l1_ecx & KVS_AMX_OSXSAVE_BIT) == 0) {
        snprintf(why, len, "CPUID: no OSXSAVE, XCR0 unreadable");
        return 0;
    }

    if ((id->xcr0 & KVS_AMX_XCR0_TILE) != KVS_AMX_XCR0_TILE) {
        snprintf(why, len, "XCR0 0x%llx: the OS does not enable the tile "
                 "state (bits 17, 18)", (unsigned long long) id->xcr0);
        return 0;
    }

    bits = KVS_CPU_AMX_INT8;

    if (id->l7_edx & KVS_AMX_BF16_BIT) {
        bits |= KVS_CPU_AMX_BF16;
    }

    return bits;
}


static pthread_once_t  kvs_amx_once = PTHREAD_ONCE_INIT;
static unsigned        kvs_amx_bits;
static char            kvs_amx_line[192];


#if KVS_CPU_X86

static void
kvs_amx_read(kvs_cpu_amx_id_t *id)
{
    unsigned  a, b, c, d, lo, hi;

    memset(id, 0, sizeof(*id));
    id->max_leaf = __get_cpuid_max(0, NULL);

    if (__get_cpuid(1, &a, &b, &c, &d)) {
        id->l1_ecx = c;
    }

    if (id->max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        id->l7_edx = d;
    }

    if (id->l1_ecx & KVS_AMX_OSXSAVE_BIT) {
        __asm__ volatile ("xgetbv" : "=a" (lo), "=d" (hi) : "c" (0));
        id->xcr0 = (uint64_t) hi << 32 | lo;
    }
}


/* 0, or an errno: Linux's permission for XTILEDATA, asked then read
 * back. */
static int
kvs_amx_permit(void)
{
    unsigned long long  perm;

    if (syscall(SYS_arch_prctl, KVS_ARCH_REQ_XCOMP_PERM,
                KVS_XFEATURE_XTILEDATA) != 0)
    {
        return errno;
    }

    perm = 0;

    if (syscall(SYS_arch_prctl, KVS_ARCH_GET_XCOMP_PERM, &perm) != 0) {
        return errno;
    }

    return (perm & (1ull << KVS_XFEATURE_XTILEDATA)) ? 0 : EPERM;
}

#endif


static void
kvs_amx_init(void)
{
#if KVS_CPU_X86
    int               rc;
    char              why[128];
    unsigned          bits;
    kvs_cpu_amx_id_t  id;

    kvs_amx_read(&id);
    bits = kvs_cpu_amx_check(&id, why, sizeof(why));

    if (bits == 0) {
        snprintf(kvs_amx_line, sizeof(kvs_amx_line), "amx: no (%s)", why);
        return;
    }

    rc = kvs_amx_permit();
    if (rc != 0) {
        snprintf(kvs_amx_line, sizeof(kvs_amx_line), "amx: no "
                 "(arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %s)",
                 strerror(rc));
        return;
    }

    kvs_amx_bits = bits;
    snprintf(kvs_amx_line, sizeof(kvs_amx_line), "amx: int8 tiles for "
             "Q8_0 products%s", (bits & KVS_CPU_AMX_BF16)
                                ? "; bf16 tiles present" : "");
#else
    snprintf(kvs_amx_line, sizeof(kvs_amx_line), "amx: no (not x86-64)");
#endif
}


unsigned
kvs_cpu_amx_ready(const char **line)
{
    (void) pthread_once(&kvs_amx_once, kvs_amx_init);

    if (line != NULL) {
        *line = kvs_amx_line;
    }

    return kvs_amx_bits;
}


/* The level's name and the tiles': the int8 tiles for Q8_0's, the Q4_0
 * family's and Q4_K's prefill (kvs_cpu_qla_on; KVSERVE_CPU_SIMD=3 puts
 * Q8_0 on kvs_cpu_amx_q8_rows for every batch instead, kvs_cpu_simd) and
 * the BF16 tiles by default where present
 * (kvs_cpu_amxb_on); 0, 1 or 2 leave AMX unasked. */
const char *
kvs_cpu_kernels(char *buf, size_t len)
{
    int          level, n;
    unsigned     bits;
    const char  *env, *name, *amx, *gemm, *on;

    level = kvs_cpu_simd();
    env = getenv("KVSERVE_CPU_SIMD");

    switch (level) {
    case KVS_CPU_SIMD_AMX:
        name = "avx512 (vnni) + amx";
        break;
    case KVS_CPU_SIMD_AVX512:
        name = "avx512 (vnni)";
        break;
    case KVS_CPU_SIMD_AVX2:
        name = "avx2";
        break;
    default:
        name = "portable C";
        break;
    }

    if (env != NULL && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0
                        || strcmp(env, "2") == 0))
    {
        snprintf(buf, len, "%s; amx: off (KVSERVE_CPU_SIMD=%s)", name, env);
        return buf;
    }

    if (level < KVS_CPU_SIMD_AVX512) {
        snprintf(buf, len, "%s; amx: no (no AVX-512 VNNI)", name);
        return buf;
    }

    bits = kvs_cpu_amx_ready(&amx);

    if ((bits & KVS_CPU_AMX_INT8) && level != KVS_CPU_SIMD_AMX) {
        n = snprintf(buf, len, "%s; amx: int8 tiles for Q8_0/Q4_0/Q4_1/"
                     "Q5_0/Q5_1/IQ4_NL/Q4_K prefill: on", name);
    } else {
        n = snprintf(buf, len, "%s; %s", name, amx);
    }

    if ((bits & KVS_CPU_AMX_BF16) && n >= 0 && (size_t) n < len) {
        gemm = getenv("KVSERVE_CPU_GEMM");
        on = kvs_cpu_amxb_on(level) ? "on" : "off";

        if (gemm != NULL && gemm[0] != '\0') {
            snprintf(buf + n, len - n, "; bf16 tiles for F16/BF16 prefill: "
                     "%s (KVSERVE_CPU_GEMM=%s)", on, gemm);
        } else {
            snprintf(buf + n, len - n, "; bf16 tiles for F16/BF16 prefill: "
                     "%s", on);
        }
    }

    return buf;
}
