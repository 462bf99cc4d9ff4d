"""
test_rope_python: kvs_rope's scaled frequency tables against a numpy
transcription of HF transformers' definitions (_compute_llama3_parameters,
_compute_yarn_parameters in modeling_rope_utils), written from those
definitions in float64, not from our C.

Usage: test_rope_python.py PATH/TO/test_rope  (built from t/unit/test_rope.c,
whose --dump mode prints mscale and inv_freq[]).  Exits non-zero on any
disagreement beyond 1e-12 relative.
"""

import math
import subprocess
import sys

import numpy as np


def default_inv_freq(base, dim):
    return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))


def hf_llama3(dim, base, factor, orig, low, high):
    inv = default_inv_freq(base, dim)
    low_wl = orig / low
    high_wl = orig / high
    wl = 2 * math.pi / inv
    out = np.where(wl > low_wl, inv / factor, inv)
    smooth = (orig / wl - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wl < high_wl) & ~(wl > low_wl)
    return np.where(medium, smoothed, out), 1.0


def hf_yarn(dim, base, factor, orig, beta_fast, beta_slow, attn=None):
    def mscale(s, m=1.0):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    def corr_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))
                / (2 * math.log(base)))

    lo = max(math.floor(corr_dim(beta_fast)), 0)
    hi = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo),
                   0, 1)
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrap = 1.0 / pos_freqs
    interp = 1.0 / (factor * pos_freqs)
    extrap_factor = 1 - ramp
    inv = interp * (1 - extrap_factor) + extrap * extrap_factor
    # HF: attention_factor replaces get_mscale(factor) when given; a GGUF's
    # attn_factor multiplies it instead (ggml), the same at the default 1.
    return inv, (1.0 if attn is None else attn) * mscale(factor)


CASES = [
    # Llama 3.1 8B/70B/405B
    ("llama3", 128, 500000.0, 8.0, 8192, 1.0, 4.0),
    # Llama 3.2 1B/3B
    ("llama3", 64, 500000.0, 32.0, 8192, 1.0, 4.0),
    ("llama3", 128, 10000.0, 4.0, 2048, 2.0, 8.0),
    # Qwen2.5 with YaRN x4
    ("yarn", 128, 1000000.0, 4.0, 32768, 32.0, 1.0),
    ("yarn", 64, 10000.0, 16.0, 4096, 32.0, 1.0),
    ("yarn", 96, 10000.0, 2.0, 2048, 16.0, 2.0, 0.7),
    ("yarn", 8, 10000.0, 2.0, 512, 32.0, 1.0),
]


def main():
    exe = sys.argv[1]
    bad = 0
    for case in CASES:
        out = subprocess.run([exe, "--dump"] + [str(x) for x in case],
                             check=True, capture_output=True, text=True)
        vals = [float(x) for x in out.stdout.split()]
        got_ms, got = vals[0], np.array(vals[1:])
        if case[0] == "llama3":
            want, want_ms = hf_llama3(*case[1:])
        else:
            want, want_ms = hf_yarn(*case[1:])
        rel = np.max(np.abs(got - want) / want) if len(got) == len(want) \
            else math.inf
        ok = rel <= 1e-12 and abs(got_ms - want_ms) <= 1e-12 * want_ms
        print("%s %s: max rel %.3g, mscale %.17g vs %.17g"
              % ("ok  " if ok else "FAIL", case, rel, got_ms, want_ms))
        bad += not ok
    if bad:
        sys.exit("%d of %d RoPE tables disagree with HF" % (bad, len(CASES)))
    print("all %d RoPE tables agree with HF's definitions" % len(CASES))


if __name__ == "__main__":
    main()
