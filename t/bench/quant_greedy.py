#!/usr/bin/env python3
"""
quant_greedy: what each quantization mix does to a trained model's
outputs, and what kvserve's CPU kernels add to it.  stories260K
(FIXTURES) is quantized with `kvserve quantize` to every mix (Q), and Q
is written back with every tensor dequantized to F32 (`--type f32`: D,
the exact dequantized reference).  Each file generates 64 greedy tokens
from the same prompt (`kvserve generate --temp 0`) and its logits over
D's greedy sequence are taken (`kvserve logits`).  Printed per mix:
  kernel   Q's greedy text against D's (same, or the first differing
           character) and Q's logits against D's: what computing with
           the weights as stored (and the input quantized) adds;
  quant    D's text and logits against the F32 original: the
           quantization's own error;
the logits' differences are the largest |difference| relative to the
largest |logit| of the reference's row, worst row and mean over rows.
Where Q's text leaves D's, "gap" is how near a tie D's pick was there:
at the first token where the two texts' ids differ, D's top two logits'
difference relative to that row's largest |logit| (a gap under the
kernel's logit error is a tie the kernels may break either way).
stories260K's rows are 64 or 172 wide, so the K-quant and IQ4_XS mixes
fall back to 32-column types (and F16 where 172 is not a multiple of
32), as llama-quantize does; the types column says which.

Environment: KVS_CLI (build/kvserve), KVS_FIXTURES, KVS_TMP.
Measurement, not a test: the numbers go in docs/quantization.md.
"""

import os
import subprocess
import sys

import numpy as np

MIXES = ["f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_1", "q5_0",
         "q4_k_m", "q4_k_s", "q4_1", "q4_0", "iq4_xs", "iq4_nl", "q3_k_l",
         "q3_k_m", "q3_k_s", "q2_k"]
PROMPT = "Once upon a time, there was a little girl named Lily."
N_GEN = 64


def run(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, **kw)


def generate(cli, model):
    out = run([cli, "generate", model, "-p", PROMPT, "-n", str(N_GEN),
               "--temp", "0"]).stdout
    return out.decode("utf-8", "replace")


def logits(cli, model, ids, n_vocab, tmp):
    path = os.path.join(tmp, "qg-logits.f32")
    run([cli, "logits", model, "-t", " ".join(map(str, ids)), "-o", path])
    a = np.fromfile(path, dtype="<f4").reshape(len(ids), n_vocab)
    os.unlink(path)
    return a


def differ(a, b):
    if a == b:
        return "same"
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return "char %d" % n


def tokenize(cli, ref, text):
    return [int(t) for t in run([cli, "tokenize", "--bos", ref],
                                input=text.encode()).stdout.split()]


def tie_gap(cli, ref, text_q, idd, ld):
    """D's top-two gap where Q's greedy ids first leave D's (idd: D's
    text's ids; "-" if the ids agree over D's logits)."""
    iq = tokenize(cli, ref, text_q)
    k = 0
    while k < min(len(iq), len(idd)) and iq[k] == idd[k]:
        k += 1
    if k == 0 or k >= min(len(iq), len(idd)) or k > len(ld):
        return "-"
    row = np.sort(ld[k - 1])
    return "%.1e" % ((row[-1] - row[-2]) / np.abs(ld[k - 1]).max())


def types_of(cli, model):
    out = run([cli, "info", model]).stdout.decode()
    seen = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0].endswith(".weight"):
            seen[f[1]] = seen.get(f[1], 0) + 1
    return ",".join("%s:%d" % kv for kv in sorted(seen.items()))


def main():
    cli = os.environ.get("KVS_CLI", "build/kvserve")
    fx = os.environ.get("KVS_FIXTURES", "../shared/fixtures")
    tmp = os.environ.get("KVS_TMP", "/tmp")
    ref = os.path.join(fx, "models", "stories260K-f32.gguf")
    if not os.path.exists(ref):
        print("SKIP: quant_greedy: fixture %s is absent" % ref)
        return 0

    text_ref = generate(cli, ref)
    n_vocab = 512

    print("%-7s | %-13s %-8s %-8s %-8s | %-13s %-8s %-8s | %s" % (
        "mix", "kernel text", "gap", "max", "mean", "quant text", "max",
        "mean", "types"))
    for mix in MIXES:
        q = os.path.join(tmp, "qg-%s.gguf" % mix)
        d = os.path.join(tmp, "qg-%s-f32.gguf" % mix)
        run([cli, "quantize", ref, q, "--type", mix])
        run([cli, "quantize", q, d, "--type", "f32"])
        text_q = generate(cli, q)
        text_d = generate(cli, d)
        ids = tokenize(cli, ref, text_d)
        lref = logits(cli, ref, ids, n_vocab, tmp)
        ld = logits(cli, d, ids, n_vocab, tmp)
        lq = logits(cli, q, ids, n_vocab, tmp)
        kr = np.abs(lq - ld).max(axis=1) / np.abs(ld).max(axis=1)
        qr = np.abs(ld - lref).max(axis=1) / np.abs(lref).max(axis=1)
        gap = "-" if text_q == text_d else tie_gap(cli, ref, text_q, ids,
                                                    ld)
        print("%-7s | %-13s %-8s %-8.1e %-8.1e | %-13s %-8.1e %-8.1e | %s" % (
            mix, differ(text_q, text_d), gap, kr.max(), kr.mean(),
            differ(text_d, text_ref), qr.max(), qr.mean(),
            types_of(cli, q)))
        os.unlink(q)
        os.unlink(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
