#!/usr/bin/env python3
"""The peer for bench_gguf: gguf.GGUFReader (the Python package llama.cpp
publishes) opening the same files.  Prints "<file> <microseconds>", best of
N runs, like bench_gguf."""
import sys
import time

from gguf import GGUFReader

n = int(sys.argv[1])
for path in sys.argv[2:]:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        GGUFReader(path)
        best = min(best, time.perf_counter() - t0)
    print(path, "%.1f" % (best * 1e6))
