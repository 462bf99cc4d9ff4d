"""
test_lora_numpy: kvserve's logits under a LoRA adapter against an
independent numpy reference (docs/lora.md).

The reference is test_logits_numpy.py's float64 forward, with every
adapted matrix's product made y = W x + (alpha / r) B (A x): A and B are
read from the adapter GGUF with the gguf package (`lora_a` is A, r rows
of n_in; `lora_b` is B, n_out rows of r, in numpy's order), alpha from
`adapter.lora.alpha` (absent or 0: a scale of 1, as llama.cpp), r from
A's rows; nothing of kvserve's adapter reader or merge is used.  Ours is
`kvserve logits BASE --lora ADAPTER` (the CPU backend's forward_lora).

Models: generated Llama and Qwen3 bases (`kvserve gen-model`, F32), each
with generated adapters of ranks 8 and 64 on every target (`kvserve
gen-lora`), one of rank 8 on q and v only, and one with an alpha of its
own.  Every position's logits must agree within LORA_TOL (1e-3,
relative to the position's largest logit, as test_logits_numpy.py
measures; the base's TOL is 1e-4, but the CPU keeps adapters as F16 in
their slots, docs/lora.md, which costs up to about 6e-4 here), one-shot,
chunked and with the portable kernels (KVSERVE_CPU_SIMD=0); the adapter
must matter (ours under the adapter differ from the base's by more than
100 x LORA_TOL).  Exits non-zero on any failure.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

from test_logits_numpy import CLI, forward, load, ours, rel_errs

LORA_TOL = 1e-3


def adapter_of(path):
    """{base matrix name: (A, B, scale)} of a LoRA adapter GGUF."""
    meta, w = load(path)
    if meta.get("general.type") != "adapter" \
            or meta.get("adapter.type") != "lora":
        raise RuntimeError(f"{path}: not a LoRA adapter")
    alpha = float(meta.get("adapter.lora.alpha", 0.0))
    lora = {}
    for name, a in w.items():
        if not name.endswith(".lora_a"):
            continue
        base = name[:-len(".lora_a")]
        b = w[base + ".lora_b"]
        r = a.shape[0]
        if b.shape[1] != r:
            raise RuntimeError(f"{base}: A has {r} rows, B {b.shape[1]} "
                               f"columns")
        lora[base] = (a, b, alpha / r if alpha != 0.0 else 1.0)
    return lora


def run(cmd):
    subprocess.run([CLI, *cmd], check=True, capture_output=True)


BASES = [
    # name, gen-model options
    ("llama", "--arch llama --layers 2 --dim 64 --heads 4 --kv-heads 2 "
     "--ffn 128 --vocab 300 --dtype f32"),
    ("qwen3", "--arch qwen3 --layers 2 --dim 64 --heads 4 --kv-heads 2 "
     "--ffn 96 --vocab 320 --dtype f32"),
]

ADAPTERS = [
    # name, gen-lora options
    ("r8", "--rank 8"),
    ("r64", "--rank 64"),
    ("r8-qv", "--rank 8 --targets q,v"),
    ("r64-alpha", "--rank 64 --alpha 16 --strength 1"),
]

RUNS = ((), ("--chunk", "5"), ("KVSERVE_CPU_SIMD=0",))


def main():
    base_tmp = os.environ.get("KVS_TMP")
    if base_tmp:
        os.makedirs(base_tmp, exist_ok=True)
    rng = np.random.default_rng(25)
    ok = True

    with tempfile.TemporaryDirectory(dir=base_tmp) as tmp:
        for bseed, (bname, bopts) in enumerate(BASES, 1):
            base = os.path.join(tmp, bname + ".gguf")
            run(["gen-model", "--seed", str(bseed), *bopts.split(), base])
            meta, w = load(base)
            n_vocab = int(bopts.split("--vocab ")[1].split()[0])
            ids = [int(t) for t in rng.integers(0, n_vocab, 24)]
            plain = ours(base, ids, n_vocab)

            for aseed, (aname, aopts) in enumerate(ADAPTERS, 10 * bseed):
                ad = os.path.join(tmp, f"{bname}-{aname}.gguf")
                run(["gen-lora", base, *aopts.split(), "--seed", str(aseed),
                     ad])
                lora = adapter_of(ad)
                ref = forward(meta, w, ids, lora)
                name = f"{bname} + {aname} ({len(lora)} matrices)"
                try:
                    errs = [float(np.max(rel_errs(
                        ours(base, ids, n_vocab, "--lora", ad, *extra),
                        ref))) for extra in RUNS]
                except RuntimeError as e:
                    print(f"FAIL {name}: {e}")
                    ok = False
                    continue
                moved = float(np.max(rel_errs(plain, ref)))
                good = max(errs) < LORA_TOL and moved > 100 * LORA_TOL
                ok &= good
                detail = "  ".join(
                    f"{' '.join(r) or 'one-shot'} {e:.2e}"
                    for r, e in zip(RUNS, errs))
                print(f"{'ok  ' if good else 'FAIL'} {name:<34} {detail}"
                      f"  (the base alone: {moved:.2e})")

    print(f"all agree within {LORA_TOL:g}" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
