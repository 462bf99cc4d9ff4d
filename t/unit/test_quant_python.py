#!/usr/bin/env python3
"""Quantized types: our conversions against the Python `gguf` package's.

For every type of kvs_quant's table (`quant_sample list`), each check a
failure when it does not hold:
  1. dequantization is bit-identical to gguf.quants.dequantize on random
     blocks (random bytes, every f16 scale a random finite value) and on
     edge blocks: all-zero, every quant byte 0xff, scales of zero, of the
     smallest subnormal, of the largest finite f16, negative scales, and
     sub-block scale bytes at their extremes;
  2. where gguf can quantize the type (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
     Q8_0), our quantization gives its bytes exactly, on Gaussian rows,
     rows of zeros, constant rows, rows with one huge outlier, subnormal
     rows and rows of values on the rounding ties;
  3. where only we can quantize (K- and IQ4 types), dequant(quant(x))
     read back by gguf equals our own dequantization of our bytes (the
     bytes are a valid block of the type for both readers).
The sizes of the types (block, bytes) are checked against gguf's
GGML_QUANT_SIZES.

Environment: KVS_QUANT_SAMPLE (the quant_sample tool), KVS_TMP.
"""

import os
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES
from gguf import quants

from kvs_check import TMP, check, report

SAMPLE = os.environ["KVS_QUANT_SAMPLE"]
DIR = os.path.join(TMP, "quant-python")

# Byte offsets, within a block, of each type's f16 scales (ggml's block
# layouts, as gguf's dequantize_blocks split them); every other byte is
# quant bits or packed sub-block scales, any value of which is valid.
F16_FIELDS = {
    "F16": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2],
    "Q8_0": [0], "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2],
    "Q5_K": [0, 2], "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0],
}
BF16_FIELDS = {"BF16": [0]}

# What gguf quantizes (its own implementations, numpy)
GGUF_QUANTIZES = {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}

EDGE_F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00,
            0xbc00, 0x7bff, 0xfbff, 0x1400, 0x5800]


def run(*args):
    r = subprocess.run([SAMPLE] + [str(a) for a in args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("quant_sample %s: %s" % (args[0], r.stderr))
    return r.stdout


def ours_dequantize(tid, raw):
    src = os.path.join(DIR, "in.bin")
    dst = os.path.join(DIR, "out.f32")
    raw.tofile(src)
    run("dequantize", tid, src, dst)
    return np.fromfile(dst, dtype=np.float32)


def ours_quantize(tid, x):
    src = os.path.join(DIR, "in.f32")
    dst = os.path.join(DIR, "out.bin")
    x.astype(np.float32).tofile(src)
    run("quantize", tid, src, dst)
    return np.fromfile(dst, dtype=np.uint8)


def finite_f16(rng, n):
    """n random f16 bit patterns that are finite (exponent not 31)."""
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    exp = (h >> 10) & 0x1f
    h = np.where(exp == 0x1f, h & ~np.uint32(0x4000), h)
    return h.astype(np.uint16)


def finite_bf16(rng, n):
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    exp = (h >> 7) & 0xff
    h = np.where(exp == 0xff, h & ~np.uint32(0x4000), h)
    return h.astype(np.uint16)


def set_fields(blocks, fields, values):
    """Writes the 16-bit values (one per block and field) into blocks."""
    v = values.reshape(len(blocks), len(fields))
    for k, off in enumerate(fields):
        blocks[:, off] = (v[:, k] & 0xff).astype(np.uint8)
        blocks[:, off + 1] = (v[:, k] >> 8).astype(np.uint8)


def blocks_for(name, size, rng, n):
    """n random blocks of the type, and the edge blocks."""
    f16 = F16_FIELDS.get(name)
    bf16 = BF16_FIELDS.get(name)
    fields = f16 if f16 is not None else bf16
    gen = finite_f16 if f16 is not None else finite_bf16

    rand = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    set_fields(rand, fields, gen(rng, n * len(fields)))

    edges = []
    for fill in (0x00, 0xff, 0x55, 0xaa, 0x0f, 0xf0, 0x80, 0x7f):
        for h in EDGE_F16 if f16 is not None else [0, 0x3f80, 0x7f7f,
                                                   0x0001, 0xbf80]:
            b = np.full((1, size), fill, dtype=np.uint8)
            set_fields(b, fields, np.full(len(fields), h, dtype=np.uint16))
            edges.append(b)
    return np.concatenate([rand] + edges)


def rows_for(block, rng):
    """Rows of 4 blocks' worth of values: the shapes quantizers meet."""
    n = 4 * max(block, 32)
    rows = [
        rng.standard_normal(n),
        rng.standard_normal(n) * 1e-3,
        rng.standard_normal(n) * 300.0,
        np.zeros(n),
        np.full(n, 0.75),
        np.full(n, -2.5),
        -np.abs(rng.standard_normal(n)),
        np.abs(rng.standard_normal(n)),
        rng.standard_normal(n) * 1e-38,          # subnormal scales
        np.where(np.arange(n) % 97 == 3, 5e4, rng.standard_normal(n)),
        # values on rounding ties of a scale of max/8 or max/16
        (rng.integers(-16, 17, size=n) / 2.0),
        (rng.integers(-32, 33, size=n) / 4.0),
        rng.laplace(size=n),
        # equal |x| of both signs: the first of them sets a _0 scale
        np.resize([4.0, -4.0, 0.5, -0.5, -4.0, 4.0], n),
        # blocks of 32 of very different magnitudes (IQ4_XS's and the
        # K-quants' sub-block scales), every fourth block zero
        np.repeat(np.where(np.arange(n // 32) % 4 == 3, 0.0,
                           10.0 ** rng.integers(-3, 4, size=n // 32)), 32)
        * rng.standard_normal(n),
    ]
    return np.stack(rows).astype(np.float32)


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32),
                                                 b.view(np.uint32))


def first_diff(a, b):
    if a.shape != b.shape:
        return "shapes %s and %s" % (a.shape, b.shape)
    i = int(np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))[0])
    return "element %d: ours %r, gguf %r" % (i, a[i], b[i])


def main():
    # gguf's numpy divides by zero scales on purpose (and masks it)
    np.seterr(all="ignore")
    os.makedirs(DIR, exist_ok=True)
    rng = np.random.default_rng(20261201)

    types = []
    for line in run("list").splitlines():
        tid, name, block, size, can = line.split()
        types.append((int(tid), name, int(block), int(size), can == "1"))

    names = [t[1] for t in types]
    check("Q8_0" in names and "F16" in names,
          "quant_sample list holds the table: %s" % names)

    for tid, name, block, size, can in types:
        qt = QT(tid)
        check(GGML_QUANT_SIZES[qt] == (block, size),
              "%s: block %d of %d bytes, gguf says %s"
              % (name, block, size, GGML_QUANT_SIZES[qt]))

        if name == "F32":
            continue

        if name not in F16_FIELDS and name not in BF16_FIELDS:
            check(False, "%s: the test knows no layout for it" % name)
            continue

        # 1. dequantization, bit for bit
        raw = blocks_for(name, size, rng, 2000)
        ours = ours_dequantize(tid, raw)
        theirs = quants.dequantize(raw, qt).astype(np.float32).reshape(-1)
        ok = same_bits(ours, theirs)
        check(ok, "%s: dequantization of %d blocks differs from gguf's: %s"
              % (name, len(raw), "" if ok else first_diff(ours, theirs)))

        if not can:
            continue

        rows = rows_for(block, rng)
        mine = ours_quantize(tid, rows.reshape(-1))

        if name in GGUF_QUANTIZES:
            # 2. quantization, byte for byte, row by row to name the row
            for r in range(len(rows)):
                want = quants.quantize(rows[r:r + 1], qt).reshape(-1)
                want = want.view(np.uint8)
                got = ours_quantize(tid, rows[r])
                ok = np.array_equal(got, want)
                if not ok:
                    i = int(np.flatnonzero(got != want)[0]) \
                        if got.shape == want.shape else -1
                    print("  row %d byte %d: ours %s gguf %s" % (
                        r, i, got[i - 4:i + 4] if i >= 0 else got.shape,
                        want[i - 4:i + 4] if i >= 0 else want.shape))
                check(ok, "%s: quantization of row %d differs from gguf's"
                      % (name, r))
        else:
            # 3. our blocks read back the same by gguf
            back = ours_dequantize(tid, mine)
            theirs = quants.dequantize(mine.reshape(len(rows), -1),
                                       qt).astype(np.float32).reshape(-1)
            ok = same_bits(back, theirs)
            check(ok, "%s: our quantized rows read differently by gguf: %s"
                  % (name, "" if ok else first_diff(back, theirs)))
            check(bool(np.all(np.isfinite(back))),
                  "%s: our quantized rows hold non-finite values" % name)

    return report("test_quant_python")


if __name__ == "__main__":
    sys.exit(main())
