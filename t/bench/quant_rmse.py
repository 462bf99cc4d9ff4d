#!/usr/bin/env python3
"""Round-trip error of two quantized copies of one F32 model.

Usage: quant_rmse.py F32.gguf MIX OURS.gguf PEER.gguf

Every matrix of the F32 file is looked up by name in both quantized
files; each file's tensor is dequantized with gguf.quants.dequantize (the
reader t/unit/test_quant_python.py holds bit-identical to ours) and its
RMSE against the F32 original computed.  Where the two files chose the
same type for a tensor, the ratio ours / peer is taken; where they chose
different types, the tensor is listed as a mix difference (a finding:
`kvserve quantize` means to follow llama-quantize's rules).

Prints, per type of the mix:
  mix=<m> type=<t> tensors=<n> rmse_ours=<x> rmse_peer=<x>
  ratio_mean=<x> ratio_worst=<x> worst=<tensor> same_bytes=<k>
rmse_* pool every element of those tensors (relative to the pooled RMS
of the originals, so types are comparable across tensors); ratio_mean is
the mean over tensors of the per-tensor RMSE ratio, ratio_worst its
largest; same_bytes counts the tensors whose bytes are identical in both
files (expected where both quantizers follow ggml's reference rounding:
Q4_0, Q5_0, Q8_0).  Then one line per tensor the mixes disagree on, and a line
with both files' sizes.
"""

import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf import quants
from gguf.constants import GGMLQuantizationType as QT


def tensors(path):
    r = GGUFReader(path)
    return {t.name: t for t in r.tensors}


def values(t):
    if t.tensor_type in (QT.F32, QT.F16):
        a = np.asarray(t.data, dtype=np.float32)
    else:
        a = quants.dequantize(t.data, t.tensor_type)
    return a.reshape(-1).astype(np.float64)


def main():
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    src, mix, ours_path, peer_path = sys.argv[1:]
    orig = tensors(src)
    ours = tensors(ours_path)
    peer = tensors(peer_path)

    # type name -> [sum sq ours, sum sq peer, sum sq orig, n,
    #               [(ratio, tensor)], tensors of identical bytes]
    by_type = {}
    diffs = []
    for name, t in orig.items():
        if len(t.shape) < 2 or not name.endswith(".weight"):
            continue
        if name not in ours or name not in peer:
            diffs.append("%s missing in %s" % (
                name, "ours" if name not in ours else "peer"))
            continue
        to, tp = ours[name].tensor_type, peer[name].tensor_type
        if to != tp:
            diffs.append("%s ours=%s peer=%s" % (name, to.name, tp.name))
            continue
        x = values(t)
        eo = values(ours[name]) - x
        ep = values(peer[name]) - x
        so, sp, sx = float(eo @ eo), float(ep @ ep), float(x @ x)
        s = by_type.setdefault(to.name, [0.0, 0.0, 0.0, 0, [], 0])
        s[0] += so
        s[1] += sp
        s[2] += sx
        s[3] += x.size
        ratio = float(np.sqrt(so / sp)) if sp > 0 else (
            1.0 if so == 0 else float("inf"))
        s[4].append((ratio, name))
        s[5] += bytes(ours[name].data) == bytes(peer[name].data)

    for ty in sorted(by_type):
        so, sp, sx, n, ratios, same = by_type[ty]
        rms = np.sqrt(sx / n)
        worst = max(ratios)
        print("mix=%s type=%s tensors=%d rmse_ours=%.5f rmse_peer=%.5f "
              "ratio_mean=%.4f ratio_worst=%.4f worst=%s same_bytes=%d" % (
                  mix, ty, len(ratios), np.sqrt(so / n) / rms,
                  np.sqrt(sp / n) / rms,
                  sum(r for r, _ in ratios) / len(ratios), worst[0],
                  worst[1], same))
    for d in diffs:
        print("mix=%s differs: %s" % (mix, d))
    print("mix=%s bytes_ours=%d bytes_peer=%d same_types=%s" % (
        mix, os.path.getsize(ours_path), os.path.getsize(peer_path),
        "yes" if not diffs else "no (%d tensors)" % len(diffs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
