"""
test_llama_grad: the trainer's hand-written backward pass (llama.py)
against central finite differences of its forward pass, in float64, for
every entry of every parameter of a tiny model (2 layers, dim 8, 2
heads, vocab 11, 2 sequences of 6 tokens; norms and weights random so
that no term is trivially zero).  Also checks that one AdamW step on the
gradient lowers the loss and that the forward's logits do not depend on
later tokens (the causal mask).  About a second; exits non-zero on any
failure.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama  # noqa: E402

TOL = 1e-6      # |analytic - numeric| / max(1e-3, |analytic| + |numeric|)
H = 1e-5


def main():
    rng = np.random.default_rng(7)
    cfg = llama.Config(n_vocab=11, dim=8, n_layer=2, n_head=2, n_ff=12,
                       n_ctx=6, base=100.0)
    p = llama.init(cfg, rng, np.float64)
    for k in p:
        p[k] = p[k] * 20 if p[k].ndim == 2 else \
            1.0 + 0.3 * rng.standard_normal(p[k].shape)
    ids = rng.integers(0, 11, (2, 6))
    tgt = rng.integers(0, 11, (2, 6))
    loss, g = llama.loss_and_grad(cfg, p, ids, tgt)

    def lossf():
        logits = llama.forward(cfg, p, ids)
        z = logits - logits.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return -np.take_along_axis(logp, tgt[..., None], -1).mean()

    fails, worst, n = 0, 0.0, 0
    for k in sorted(p):
        flat = p[k].reshape(-1)
        gk = g[k].reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + H
            up = lossf()
            flat[j] = old - H
            down = lossf()
            flat[j] = old
            num = (up - down) / (2 * H)
            err = abs(num - gk[j]) / max(1e-3, abs(num) + abs(gk[j]))
            worst = max(worst, err)
            n += 1
            if err > TOL:
                fails += 1
                if fails <= 10:
                    print("FAIL %s[%d]: analytic %.9g numeric %.9g"
                          % (k, j, gk[j], num))
    print("gradient: %d entries, worst relative error %.2e" % (n, worst))
    ok = fails == 0 and abs(loss - lossf()) < 1e-12

    # one optimiser step along the gradient lowers the loss
    opt = llama.AdamW(p, wd=0.0)
    opt.step(p, g, 1e-3)
    after = lossf()
    print("AdamW step: loss %.6f -> %.6f" % (loss, after))
    ok &= after < loss

    # causal: changing the last token leaves earlier logits unchanged
    ids2 = ids.copy()
    ids2[:, -1] = (ids2[:, -1] + 1) % 11
    a, b = llama.forward(cfg, p, ids), llama.forward(cfg, p, ids2)
    causal = np.array_equal(a[:, :-1], b[:, :-1]) and \
        not np.array_equal(a[:, -1], b[:, -1])
    print("causal mask: %s" % ("ok" if causal else "FAIL"))
    ok &= causal
    print("test_llama_grad: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
