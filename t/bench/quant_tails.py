#!/usr/bin/env python3
"""Give a generated F32 model heavy-tailed weights, in place.

Usage: quant_tails.py MODEL.gguf DF SEED

`kvserve gen-model` draws its weights uniform, which no trained model
has and which flatters every quantizer (no outliers, a known range).
This replaces each matrix (2-D *.weight, F32) with Student-t samples of
DF degrees of freedom scaled to the matrix's former standard deviation,
so that quantizers are also compared where a few weights are far out
(df 5: about 1 in 1000 beyond 5 sigma).  Shapes, metadata and file size
do not change.
"""

import sys

import numpy as np
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType as QT


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    path, df, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    rng = np.random.default_rng(seed)
    r = GGUFReader(path, "r+")
    for t in r.tensors:
        if len(t.shape) < 2 or not t.name.endswith(".weight"):
            continue
        if t.tensor_type != QT.F32:
            sys.stderr.write("%s: not F32\n" % t.name)
            return 1
        a = t.data
        std = float(a.std())
        x = rng.standard_t(df, size=a.shape)
        # a t variable's variance is df / (df - 2)
        a[...] = (x * (std / np.sqrt(df / (df - 2)))).astype(np.float32)
    r.data.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
