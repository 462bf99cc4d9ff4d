#!/usr/bin/env python3
"""GGUF interop: our reader and writer against the Python `gguf` package.

What it checks, each a failure when it does not hold:
  1. our ggml type table (block and byte sizes) equals gguf's
     GGML_QUANT_SIZES for every type id gguf knows;
  2. files written by our writer (the all-types sample, v2 and v3, and
     generated models in every dtype) are read by gguf.GGUFReader with the
     same keys, types, values (nested arrays too), tensor names, types,
     shapes, offsets, sizes and bytes as our reader reports;
  3. our F16, BF16 and Q8_0 conversions give the same bytes as numpy's
     float16 and gguf.quants for the same inputs;
  4. a file written by gguf.GGUFWriter is read by our reader identically;
  5. the real fixture files (stories260K and every vocab .gguf) read the
     same through both readers.

Environment: KVS_CLI (the kvserve tool), KVS_SAMPLE (gguf_sample),
KVS_TMP (scratch dir), KVS_FIXTURES (../shared/fixtures; skipped, with a
message, when absent).
"""

import glob
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES
from gguf import quants

from kvs_check import FIXTURES, ROOT, TMP, check, report

CLI = os.environ["KVS_CLI"]
SAMPLE = os.environ["KVS_SAMPLE"]

VT_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8",
    GGUFValueType.UINT16: "u16", GGUFValueType.INT16: "i16",
    GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool",
    GGUFValueType.STRING: "str", GGUFValueType.ARRAY: "arr",
    GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64",
}
FLOATS = ("f32", "f64")


def fnv1a64(data):
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


# --- values as each reader sees them, normalised for comparison ----------

def py_decode(parts, i, vtype):
    """Decodes one value from a ReaderField's raw parts; returns (v, i)."""
    name = VT_NAMES[GGUFValueType(vtype)]
    if name == "str":
        return bytes(parts[i + 1].tobytes()), i + 2
    if name == "arr":
        elem = int(parts[i][0])
        n = int(parts[i + 1][0])
        i += 2
        items = []
        for _ in range(n):
            v, i = py_decode(parts, i, elem)
            items.append(v)
        return (VT_NAMES[GGUFValueType(elem)], items), i
    v = parts[i][0]
    if name == "bool":
        return bool(v), i + 1
    if name in FLOATS:
        return float(v), i + 1
    return int(v), i + 1


def ours_decode(v, name):
    if name == "arr":
        return (v["elem"], [ours_decode(x, v["elem"]) for x in v["items"]])
    if name == "str":
        if isinstance(v, dict):
            return bytes.fromhex(v["hex"])
        return v.encode("utf-8")
    if name in FLOATS:
        return float(v)            # also "nan", "inf", "-inf"
    if name == "bool":
        return bool(v)
    return int(v)                  # also big u64 as a decimal string


def same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, tuple) and isinstance(b, tuple):
        return (a[0] == b[0] and len(a[1]) == len(b[1])
                and all(same(x, y) for x, y in zip(a[1], b[1])))
    return type(a) is type(b) and a == b


def ours(path):
    out = subprocess.run([CLI, "info", "--json", path], capture_output=True,
                         check=True)
    return json.loads(out.stdout)


def compare_file(path):
    label = os.path.basename(path)
    mine = ours(path)
    py = GGUFReader(path)

    check(mine["alignment"] == py.alignment,
          "%s: alignment %s vs gguf %s" % (label, mine["alignment"],
                                           py.alignment))

    fields = [f for f in py.fields.values() if not f.name.startswith("GGUF.")]
    check(len(fields) == len(mine["metadata"]),
          "%s: %d keys vs gguf %d" % (label, len(mine["metadata"]),
                                      len(fields)))

    for m, f in zip(mine["metadata"], fields):
        check(m["key"] == f.name, "%s: key %r vs gguf %r" % (label, m["key"],
                                                             f.name))
        pytype = VT_NAMES[f.types[0]]
        check(m["type"] == pytype, "%s: %s type %s vs gguf %s"
              % (label, m["key"], m["type"], pytype))
        pv, _ = py_decode(f.parts, 3, f.types[0])
        mv = ours_decode(m["value"], m["type"])
        check(same(mv, pv), "%s: %s value differs: ours %r, gguf %r"
              % (label, m["key"], str(mv)[:200], str(pv)[:200]))

    check(len(mine["tensors"]) == len(py.tensors),
          "%s: %d tensors vs gguf %d" % (label, len(mine["tensors"]),
                                         len(py.tensors)))

    for t, pt in zip(mine["tensors"], py.tensors):
        what = "%s: tensor %s" % (label, t["name"])
        check(t["name"] == pt.name, what + " name vs gguf " + pt.name)
        check(t["type"] == pt.tensor_type.name,
              "%s type %s vs gguf %s" % (what, t["type"], pt.tensor_type.name))
        check(t["dims"] == [int(x) for x in pt.shape],
              "%s dims %s vs gguf %s" % (what, t["dims"], list(pt.shape)))
        check(mine["data_offset"] + t["offset"] == pt.data_offset,
              "%s data at %d vs gguf %d" % (what, mine["data_offset"]
                                            + t["offset"], pt.data_offset))
        check(t["nbytes"] == pt.n_bytes,
              "%s %d bytes vs gguf %d" % (what, t["nbytes"], pt.n_bytes))
        check(t["fnv1a64"] == fnv1a64(pt.data.tobytes()),
              what + " bytes differ")

    return mine, py


# --- 1. the type table --------------------------------------------------

def check_type_table():
    src = open(os.path.join(ROOT, "src/model/kvs_ggml_type.c")).read()
    hdr = open(os.path.join(ROOT, "src/model/kvs_ggml_type.h")).read()
    ids = {m.group(1): int(m.group(2))
           for m in re.finditer(r"KVS_GGML_(\w+)\s*=\s*(\d+)", hdr)}
    ours_t = {}
    for m in re.finditer(r'\[KVS_GGML_(\w+)\]\s*=\s*\{\s*"(\w+)",\s*(\d+),'
                         r'\s*(\d+)\s*\}', src):
        ours_t[ids[m.group(1)]] = (m.group(2), int(m.group(3)),
                                   int(m.group(4)))
    for qt, (block, size) in GGML_QUANT_SIZES.items():
        got = ours_t.get(int(qt))
        check(got == (qt.name, block, size),
              "type %d %s: ours %s, gguf %s" % (int(qt), qt.name, got,
                                                (qt.name, block, size)))
    for tid in ours_t:
        check(any(int(q) == tid for q in GGML_QUANT_SIZES),
              "type %d is in our table but not in gguf's" % tid)


# --- 2 and 3. our writer ------------------------------------------------

def sample_value(t, i):
    return np.float32(((i * 37 + t * 11) % 201) - 100) / np.float32(64.0)


def check_sample(version, alignment):
    path = os.path.join(TMP, "sample-v%d-a%d.gguf" % (version, alignment))
    subprocess.run([SAMPLE, path, str(version), str(alignment)], check=True)
    mine, py = compare_file(path)

    check(mine["version"] == version, "sample version %d" % mine["version"])
    check(py.alignment == alignment, "sample alignment %d" % py.alignment)

    tensors = {t.name: t for t in py.tensors}
    want = {
        "t.f32": np.array([sample_value(0, i) for i in range(15)],
                          dtype=np.float32).tobytes(),
        "t.f16": np.array([sample_value(1, i) for i in range(14)],
                          dtype=np.float32).astype(np.float16).tobytes(),
        "t.bf16": quants.quantize(np.array([sample_value(2, i)
                                            for i in range(24)],
                                           dtype=np.float32),
                                  QT.BF16).tobytes(),
        "t.q8_0": quants.quantize(np.array([sample_value(3, i)
                                            for i in range(128)],
                                           dtype=np.float32).reshape(2, 64),
                                  QT.Q8_0).tobytes(),
    }
    for name, data in want.items():
        check(tensors[name].data.tobytes() == data,
              "sample %s: our bytes differ from numpy/gguf.quants" % name)


def check_generated():
    for preset, dtype in (("tiny", "f32"), ("tiny", "f16"), ("tiny", "bf16"),
                          ("tiny", "q8_0"), ("small", "bf16")):
        path = os.path.join(TMP, "gen-%s-%s.gguf" % (preset, dtype))
        subprocess.run([CLI, "gen-model", "--preset", preset, "--dtype",
                        dtype, "--seed", "7", path], check=True)
        mine, py = compare_file(path)
        check("hparams" in mine, "gen %s %s: no hparams: %s"
              % (preset, dtype, mine.get("hparams_error")))
        emb = [t for t in py.tensors if t.name == "token_embd.weight"][0]
        check(emb.tensor_type.name == dtype.upper(),
              "gen %s: token_embd is %s" % (dtype, emb.tensor_type.name))
        if dtype == "q8_0":
            # dequantized with gguf, our Q8_0 blocks are within one step
            deq = quants.dequantize(emb.data, QT.Q8_0)
            check(float(np.abs(deq).max()) <= 0.0347,
                  "gen q8_0: dequantized values out of the init range")


# --- 4. gguf's writer, our reader ---------------------------------------

def check_python_writer():
    path = os.path.join(TMP, "py-written.gguf")
    w = GGUFWriter(path, arch="pytest")
    w.add_uint8("p.u8", 200)
    w.add_int8("p.i8", -5)
    w.add_uint16("p.u16", 60000)
    w.add_int16("p.i16", -30000)
    w.add_uint32("p.u32", 4000000000)
    w.add_int32("p.i32", -2000000000)
    w.add_uint64("p.u64", 2 ** 63 + 5)
    w.add_int64("p.i64", -(2 ** 62))
    w.add_float32("p.f32", 0.1)
    w.add_float64("p.f64", 1e-300)
    w.add_bool("p.bool", False)
    w.add_string("p.str", "Grüße \u2581 \U0001F680")
    w.add_array("p.arr.str", ["x", "yy", ""])
    w.add_array("p.arr.int", [1, 2, 3])
    w.add_array("p.arr.float", [0.5, -0.25])
    data = np.arange(64, dtype=np.float32).reshape(2, 32) / 7
    w.add_tensor("p.f32", data)
    w.add_tensor("p.f16", data.astype(np.float16))
    q = quants.quantize(data, QT.Q8_0)
    w.add_tensor("p.q8_0", q, raw_shape=q.shape, raw_dtype=QT.Q8_0)
    b = quants.quantize(data, QT.BF16)
    w.add_tensor("p.bf16", b, raw_shape=b.shape, raw_dtype=QT.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    mine, _ = compare_file(path)
    check([t["type"] for t in mine["tensors"]] == ["F32", "F16", "Q8_0",
                                                   "BF16"],
          "python-written tensor types: %s" % [t["type"]
                                              for t in mine["tensors"]])


# --- 5. real files ------------------------------------------------------

def check_fixtures():
    files = sorted(glob.glob(os.path.join(FIXTURES, "vocab", "*.gguf")))
    files += sorted(glob.glob(os.path.join(FIXTURES, "models", "*.gguf")))
    if not files:
        print("SKIP: no fixtures under %s" % FIXTURES)
        return
    for path in files:
        compare_file(path)


def main():
    check_type_table()
    check_sample(3, 32)
    check_sample(3, 64)
    check_sample(2, 32)
    check_generated()
    check_python_writer()
    check_fixtures()
    return report("test_gguf_python")


if __name__ == "__main__":
    sys.exit(main())
