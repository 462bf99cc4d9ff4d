/*
 * kvs_test_amx_emu: a C emulation of the AMX tile operations that
 * src/backend/cpu/kvs_cpu_amx_x86.c uses, so that test_cpu_amx can run
 * that file's kernel on a CPU without AMX.  The test includes
 * <immintrin.h>, this header, defines KVS_CPU_AMX_EMU and includes that
 * file: its _tile_* intrinsics are then calls of the functions below.
 *
 * The semantics are those of Intel's Software Developer's Manual for
 * palette 1 (8 tiles of at most 16 rows of 64 bytes), start_row 0:
 *
 *   LDTILECFG   palette 0: the init state; palette 1: reserved bytes 2..15
 *               zero, tiles 8..15 unused, each tile's rows <= 16 and
 *               colsb <= 64, rows and colsb both zero or both not; every
 *               tile zeroed.  Anything else faults (#GP).
 *   TILELOADD   row r < rows: colsb bytes from base + r * stride; the
 *               rest of the row and the rows past rows are zero.
 *   TILESTORED  rows x colsb bytes to base + r * stride.
 *   TILEZERO    the whole tile zero.
 *   TDPBSUD     (and TDPBSSD) dst[m].dword[n] += the 4 products of the
 *               signed bytes of src1[m].dword[k] with the unsigned
 *               (signed) bytes of src2[k].dword[n], for k < src1.colsb /
 *               4, int32 wrapping; shape checks (#UD): three different
 *               tiles, colsb multiples of 4, dst.colsb == src2.colsb,
 *               src1.colsb / 4 == src2.rows, dst.rows == src1.rows.
 *   TDPBF16PS   per row m, 32 FP32 temporaries t (zero first): for each
 *               pair k < src1.colsb / 4 and n < dst.colsb / 4, t[2n] +=
 *               src1[m].bf16[2k] * src2[k].bf16[2n] and t[2n + 1] +=
 *               the odd halves' product, each a fused multiply-add
 *               rounded to nearest even; then dst[m].fp32[n] += t[2n] +
 *               t[2n + 1].  Denormal inputs read as zero, denormal
 *               results are flushed; the same shape checks as TDPBSUD.
 *   TILERELEASE the init state.
 *
 * Every tile instruction but LDTILECFG and TILERELEASE faults (#UD) while
 * the tiles are unconfigured.  A fault does not trap: the operation is
 * skipped and the first fault's text kept in kvs_amx_emu.fault, which the
 * test checks after every call.  Memory is read and written through the
 * real addresses, so ASan sees every access a real tile load would make.
 */

#ifndef KVS_TEST_AMX_EMU_H
#define KVS_TEST_AMX_EMU_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>


typedef struct {
    int       configured;
    uint8_t   rows[8];
    uint16_t  colsb[8];
    uint8_t   t[8][16][64];
    char      fault[160];
    uint64_t  loads, stores, dps, configs, releases;
} kvs_amx_emu_t;

static kvs_amx_emu_t  kvs_amx_emu;


static inline void
kvs_amx_emu_fault(const char *what)
{
    if (kvs_amx_emu.fault[0] == '\0') {
        snprintf(kvs_amx_emu.fault, sizeof(kvs_amx_emu.fault), "%s", what);
    }
}


static inline void
kvs_amx_emu_init(void)
{
    kvs_amx_emu.configured = 0;
    memset(kvs_amx_emu.rows, 0, sizeof(kvs_amx_emu.rows));
    memset(kvs_amx_emu.colsb, 0, sizeof(kvs_amx_emu.colsb));
    memset(kvs_amx_emu.t, 0, sizeof(kvs_amx_emu.t));
}


static inline void
kvs_amx_emu_ldtilecfg(const void *cfg)
{
    int             i;
    uint16_t        colsb;
    const uint8_t  *p;

    p = cfg;
    kvs_amx_emu.configs++;

    if (p[0] == 0) {
        kvs_amx_emu_init();
        return;
    }

    if (p[0] != 1) {
        kvs_amx_emu_fault("ldtilecfg: palette not 0 or 1");
        return;
    }

    for (i = 1; i < 16; i++) {
        if (p[i] != 0) {
            kvs_amx_emu_fault("ldtilecfg: start_row or reserved byte set");
            return;
        }
    }

    for (i = 0; i < 16; i++) {
        memcpy(&colsb, p + 16 + 2 * i, 2);

        if (i >= 8) {
            if (colsb != 0 || p[48 + i] != 0) {
                kvs_amx_emu_fault("ldtilecfg: tile 8..15 configured");
                return;
            }
            continue;
        }

        if (p[48 + i] > 16 || colsb > 64
            || (p[48 + i] == 0) != (colsb == 0))
        {
            kvs_amx_emu_fault("ldtilecfg: tile shape out of palette 1");
            return;
        }
    }

    kvs_amx_emu_init();

    for (i = 0; i < 8; i++) {
        memcpy(&kvs_amx_emu.colsb[i], p + 16 + 2 * i, 2);
        kvs_amx_emu.rows[i] = p[48 + i];
    }

    kvs_amx_emu.configured = 1;
}


static inline int
kvs_amx_emu_ok(int t, const char *op)
{
    if (!kvs_amx_emu.configured) {
        kvs_amx_emu_fault(op);
        return 0;
    }

    if (t < 0 || t > 7) {
        kvs_amx_emu_fault("tile number past 7");
        return 0;
    }

    return 1;
}


static inline void
kvs_amx_emu_loadd(int t, const void *base, long stride)
{
    uint32_t        r;
    const uint8_t  *p;

    if (!kvs_amx_emu_ok(t, "tileloadd: tiles not configured")) {
        return;
    }

    p = base;
    memset(kvs_amx_emu.t[t], 0, sizeof(kvs_amx_emu.t[t]));
    kvs_amx_emu.loads++;

    for (r = 0; r < kvs_amx_emu.rows[t]; r++) {
        memcpy(kvs_amx_emu.t[t][r], p + (long) r * stride,
               kvs_amx_emu.colsb[t]);
    }
}


static inline void
kvs_amx_emu_stored(int t, void *base, long stride)
{
    uint8_t   *p;
    uint32_t   r;

    if (!kvs_amx_emu_ok(t, "tilestored: tiles not configured")) {
        return;
    }

    p = base;
    kvs_amx_emu.stores++;

    for (r = 0; r < kvs_amx_emu.rows[t]; r++) {
        memcpy(p + (long) r * stride, kvs_amx_emu.t[t][r],
               kvs_amx_emu.colsb[t]);
    }
}


static inline void
kvs_amx_emu_zero(int t)
{
    if (kvs_amx_emu_ok(t, "tilezero: tiles not configured")) {
        memset(kvs_amx_emu.t[t], 0, sizeof(kvs_amx_emu.t[t]));
    }
}


/* A tile product's checks (#UD): configured, three different tiles,
 * shapes that fit; a failed one recorded under op's name. */
static inline int
kvs_amx_emu_dp_ok(int dst, int a, int b, const char *op)
{
    char  what[80];

    snprintf(what, sizeof(what), "%s: tiles not configured", op);

    if (!kvs_amx_emu_ok(dst, what) || !kvs_amx_emu_ok(a, what)
        || !kvs_amx_emu_ok(b, what))
    {
        return 0;
    }

    if (dst == a || dst == b || a == b) {
        snprintf(what, sizeof(what), "%s: a tile named twice", op);
        kvs_amx_emu_fault(what);
        return 0;
    }

    if (kvs_amx_emu.colsb[dst] % 4 || kvs_amx_emu.colsb[a] % 4
        || kvs_amx_emu.colsb[b] % 4
        || kvs_amx_emu.colsb[dst] != kvs_amx_emu.colsb[b]
        || kvs_amx_emu.colsb[a] / 4 != kvs_amx_emu.rows[b]
        || kvs_amx_emu.rows[dst] != kvs_amx_emu.rows[a])
    {
        snprintf(what, sizeof(what), "%s: tile shapes do not fit", op);
        kvs_amx_emu_fault(what);
        return 0;
    }

    return 1;
}


/* TDPBSUD (b_signed 0) or TDPBSSD (1): dst += src1 . src2 */
static inline void
kvs_amx_emu_dp(int dst, int a, int b, int b_signed)
{
    int32_t   x, z;
    uint32_t  m, k, n, i, acc;
    uint8_t   row[64];

    if (!kvs_amx_emu_dp_ok(dst, a, b, "tdpb*d")) {
        return;
    }

    kvs_amx_emu.dps++;

    for (m = 0; m < kvs_amx_emu.rows[dst]; m++) {
        memcpy(row, kvs_amx_emu.t[dst][m], 64);

        for (k = 0; k < kvs_amx_emu.colsb[a] / 4u; k++) {
            for (n = 0; n < kvs_amx_emu.colsb[dst] / 4u; n++) {
                memcpy(&acc, row + 4 * n, 4);

                for (i = 0; i < 4; i++) {
                    x = (int8_t) kvs_amx_emu.t[a][m][4 * k + i];
                    z = b_signed ? (int8_t) kvs_amx_emu.t[b][k][4 * n + i]
                                 : kvs_amx_emu.t[b][k][4 * n + i];
                    acc += (uint32_t) (x * z);
                }

                memcpy(row + 4 * n, &acc, 4);
            }
        }

        memset(row + kvs_amx_emu.colsb[dst], 0,
               64 - kvs_amx_emu.colsb[dst]);
        memcpy(kvs_amx_emu.t[dst][m], row, 64);
    }

    for (m = kvs_amx_emu.rows[dst]; m < 16; m++) {
        memset(kvs_amx_emu.t[dst][m], 0, 64);
    }
}


static inline float
kvs_amx_emu_bf16(const uint8_t *p)
{
    float     f;
    uint32_t  u;

    u = (uint32_t) (p[0] | p[1] << 8) << 16;

    if ((u & 0x7f800000u) == 0) {         /* denormal (or zero): zero */
        u &= 0x80000000u;
    }

    memcpy(&f, &u, 4);
    return f;
}


static inline float
kvs_amx_emu_ftz(float f)
{
    return fabsf(f) < FLT_MIN ? copysignf(0.0f, f) : f;
}


/* TDPBF16PS: dst += src1 . src2 (BF16 pairs into FP32) */
static inline void
kvs_amx_emu_dpbf16(int dst, int a, int b)
{
    float     t[32], c;
    uint32_t  m, k, n;

    if (!kvs_amx_emu_dp_ok(dst, a, b, "tdpbf16ps")) {
        return;
    }

    kvs_amx_emu.dps++;

    for (m = 0; m < kvs_amx_emu.rows[dst]; m++) {
        memset(t, 0, sizeof(t));

        for (k = 0; k < kvs_amx_emu.colsb[a] / 4u; k++) {
            for (n = 0; n < kvs_amx_emu.colsb[dst] / 4u; n++) {
                t[2 * n] = kvs_amx_emu_ftz(fmaf(
                    kvs_amx_emu_bf16(&kvs_amx_emu.t[a][m][4 * k]),
                    kvs_amx_emu_bf16(&kvs_amx_emu.t[b][k][4 * n]),
                    t[2 * n]));
                t[2 * n + 1] = kvs_amx_emu_ftz(fmaf(
                    kvs_amx_emu_bf16(&kvs_amx_emu.t[a][m][4 * k + 2]),
                    kvs_amx_emu_bf16(&kvs_amx_emu.t[b][k][4 * n + 2]),
                    t[2 * n + 1]));
            }
        }

        for (n = 0; n < kvs_amx_emu.colsb[dst] / 4u; n++) {
            memcpy(&c, kvs_amx_emu.t[dst][m] + 4 * n, 4);
            c = kvs_amx_emu_ftz(c + kvs_amx_emu_ftz(t[2 * n] + t[2 * n + 1]));
            memcpy(kvs_amx_emu.t[dst][m] + 4 * n, &c, 4);
        }

        memset(kvs_amx_emu.t[dst][m] + kvs_amx_emu.colsb[dst], 0,
               64 - kvs_amx_emu.colsb[dst]);
    }

    for (m = kvs_amx_emu.rows[dst]; m < 16; m++) {
        memset(kvs_amx_emu.t[dst][m], 0, 64);
    }
}


static inline void
kvs_amx_emu_release(void)
{
    kvs_amx_emu.releases++;
    kvs_amx_emu_init();
}


#undef _tile_loadconfig
#undef _tile_release
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbsud
#undef _tile_dpbssd
#undef _tile_dpbf16ps

#define _tile_loadconfig(cfg)      kvs_amx_emu_ldtilecfg(cfg)
#define _tile_release()            kvs_amx_emu_release()
#define _tile_loadd(t, base, s)    kvs_amx_emu_loadd(t, base, (long) (s))
#define _tile_stored(t, base, s)   kvs_amx_emu_stored(t, base, (long) (s))
#define _tile_zero(t)              kvs_amx_emu_zero(t)
#define _tile_dpbsud(d, a, b)      kvs_amx_emu_dp(d, a, b, 0)
#define _tile_dpbssd(d, a, b)      kvs_amx_emu_dp(d, a, b, 1)
#define _tile_dpbf16ps(d, a, b)    kvs_amx_emu_dpbf16(d, a, b)

#endif /* KVS_TEST_AMX_EMU_H */
