/*
 * kvs_cpu_amx: Intel AMX (tile registers) in the CPU backend (private to
 * src/backend/cpu/).
 *
 *   kvs_cpu_amx.c       detection: CPUID, XCR0 and Linux's permission for
 *                       the tile data state, once per process
 *   kvs_cpu_amx_x86.c   the Q8_0 product on tiles (TDPBSUD)
 *   kvs_cpu_amxb_x86.c  F16 / BF16 prefill products on tiles (TDPBF16PS)
 *   kvs_cpu_qla_x86.c   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q4_K
 *                       prefill products on tiles (TDPBSSD; Q4_K's mins
 *                       by TDPBF16PS)
 *
 * Invariants:
 *  - the AMX level (KVS_CPU_SIMD_AMX) is reported only when the CPU has
 *    AMX-TILE and AMX-INT8, the OS enables the tile state in XCR0 and
 *    Linux granted this process XTILEDATA (arch_prctl); anything else
 *    fails closed to the AVX-512 kernels, with a line saying why;
 *  - a tile kernel loads its tile configuration itself on every call and
 *    releases the tiles before it returns (the configuration is per
 *    thread, and no tile state outlives a call);
 *  - the Q8_0 tile kernel's outputs, and the Q4_0 family's, are
 *    kvs_cpu_ql.c's portable kernel's bits, Q4_K's kvs_cpu_qk.c's, for
 *    any number of tokens;
 *  - the F16 / BF16 tile kernel's outputs do not depend on the number of
 *    tokens or the task's other rows (kvs_cpu_amxb_ref states them).
 */

#ifndef KVS_CPU_AMX_H
#define KVS_CPU_AMX_H

#include <stddef.h>
#include <stdint.h>

#include "kvs_cpu_impl.h"
#include "kvs_cpu_qdot.h"


/* What the tiles can do on this host (bits of kvs_cpu_amx_check's and
 * kvs_cpu_amx_ready's result). */
#define KVS_CPU_AMX_INT8   1u         /* AMX-TILE + AMX-INT8 */
#define KVS_CPU_AMX_BF16   2u         /* AMX-TILE + AMX-BF16 */

/* The CPU's words that decide it: CPUID leaf 0 EAX (the highest leaf),
 * leaf 1 ECX (bit 27: OSXSAVE, XGETBV usable), leaf 7 sub-leaf 0 EDX
 * (bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8) and XCR0 (bit 17 XTILECFG,
 * 18 XTILEDATA: the OS saves the tile state). */
typedef struct {
    uint32_t  max_leaf;
    uint32_t  l1_ecx;
    uint32_t  l7_edx;
    uint64_t  xcr0;                   /* read only when OSXSAVE */
} kvs_cpu_amx_id_t;

/* The KVS_CPU_AMX_* bits id offers (0: none, why says which check
 * failed, "" otherwise).  Pure: no CPUID, no system call. */
unsigned kvs_cpu_amx_check(const kvs_cpu_amx_id_t *id, char *why,
    size_t len);

/* This process's AMX: the CPU's words checked, then (once per process,
 * whatever the thread) Linux asked for XTILEDATA.  The KVS_CPU_AMX_*
 * bits usable, and in *line (if not NULL) a static line saying what or
 * why not. */
unsigned kvs_cpu_amx_ready(const char **line);

/* Output rows per task of a product on the BF16 tiles. */
#define KVS_CPU_AMXB_TILE  64

/* The 64-byte tile configuration LDTILECFG reads (palette 1). */
typedef struct {
    uint8_t   palette;
    uint8_t   start_row;
    uint8_t   reserved[14];
    uint16_t  colsb[16];              /* bytes per row of tile t */
    uint8_t   rows[16];
} __attribute__((aligned(64))) kvs_cpu_tilecfg_t;

/* x[cols] as two BF16 numbers per value, xh[j] + xl[j] (xh rounded to
 * nearest even, xl the rest rounded; 16 significant bits kept): the
 * input of kvs_cpu_amxb_rows, once per token and product. */
void kvs_cpu_bf16_split(const float *x, uint16_t *xh, uint16_t *xl,
    uint32_t cols);

/* The tile kernel's products stated in C, to the bit of the emulated
 * tiles (tests): y[i * ldy + r - r0] for rows r0 .. r0 + nr of w (F16 or
 * BF16, cols a multiple of 32), i < n, x [n][cols]. */
void kvs_cpu_amxb_ref(float *y, size_t ldy, const float *x, uint32_t n,
    const kvs_cpu_mat_t *w, uint32_t r0, uint32_t nr);

#if KVS_CPU_X86
/*
 * kvs_cpu_amxb_x86.c: y[i * ldy + r] = row r0 + r of w (F16 or BF16,
 * cols a multiple of 32) . token i's input, split (xh, xl: [n][cols]),
 * for r < nr (<= KVS_CPU_BLAS_TILE) and i < n.  scratch: the thread's
 * weight scratch, at least ((nr + 31) / 32) * 32 * cols * 4 bytes (it
 * holds the task's rows packed).  Only where kvs_cpu_amx_ready reports
 * KVS_CPU_AMX_BF16.
 */
void kvs_cpu_amxb_rows(float *y, size_t ldy, const uint16_t *xh,
    const uint16_t *xl, uint32_t n, const kvs_cpu_mat_t *w, uint32_t r0,
    uint32_t nr, void *scratch);

/*
 * kvs_cpu_amx_x86.c: y[i * ldy + g * 16 + r] = row g * 16 + r of w
 * (Q8_0, packed by kvs_cpu_q8p_fill: w->pack) . token i's input (xq + i *
 * w->cols / 32) for the group's rows inside the matrix and every i < n,
 * kvs_cpu_ql.c's bits.  Only at KVS_CPU_SIMD_AMX.
 */
void kvs_cpu_amx_q8_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8_t *xq, uint32_t n);

/*
 * kvs_cpu_qla_x86.c: y[i * ldy + g * 16 + r] = row g * 16 + r of w (a
 * type kvs_cpu_qla_type takes: Q8_0 packed by kvs_cpu_q8p_fill, Q4_0,
 * Q4_1, Q5_0, Q5_1 or IQ4_NL by kvs_cpu_qlp_fill: w->pack) . token i's
 * input for the group's rows inside the matrix and every i < n, the
 * VNNI kernels' bits (kvs_cpu_q8p_rows_avx512's for Q8_0, kvs_cpu_ql.c's
 * for the others): the tokens of each whole 16 on the tiles from xa
 * (kvs_cpu_q8a_fill's, [n / 16][w->cols / 32]), the rest (and every
 * token when n < 16) by that VNNI kernel from xq ([n][w->cols / 32]).
 * scratch: at least kvs_cpu_qla_scratch(w) bytes, the caller's (it holds
 * the group unpacked); any alignment works, but on a cache line (and xa
 * too) the tile loads run up to 3x as fast.  Only where
 * kvs_cpu_amx_ready reports KVS_CPU_AMX_INT8.
 */
void kvs_cpu_qla_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8a_t *xa, const kvs_cpu_q8_t *xq,
    uint32_t n, void *scratch);

/* The same for Q4_K (packed by kvs_cpu_qkp_fill), its tokens on the
 * tiles from xa (kvs_cpu_q8ka_fill's, [n / 16][w->cols / 256]), the rest
 * by kvs_cpu_qkp_rows_avx512 from xk ([n][w->cols / 256]): kvs_cpu_qk.c's
 * bits; scratch at least kvs_cpu_qka_scratch(w) bytes. */
void kvs_cpu_qka_rows(float *y, size_t ldy, const kvs_cpu_mat_t *w,
    uint32_t g, const kvs_cpu_q8ka_t *xa, const kvs_cpu_q8k_t *xk,
    uint32_t n, void *scratch);
#endif

/* Whether kvs_cpu_qla_rows takes weights of this type (packed). */
static inline int
kvs_cpu_qla_type(uint32_t type)
{
    return type == KVS_GGML_Q8_0 || kvs_cpu_qlp_rec(type) != 0;
}

/* Bytes of scratch kvs_cpu_qla_rows (kvs_cpu_qka_rows) takes for one
 * group of w. */
size_t kvs_cpu_qla_scratch(const kvs_cpu_mat_t *w);
size_t kvs_cpu_qka_scratch(const kvs_cpu_mat_t *w);

#endif /* KVS_CPU_AMX_H */
