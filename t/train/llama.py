"""
llama: the llama architecture as kvserve runs it (src/backend/cpu, the
reference t/unit/test_logits_numpy.py), forward and backward in numpy,
for training the default model.

  x = token_embd[ids]
  per layer:  h = rmsnorm(x) * attn_norm
              q, k, v = h Wq^T, h Wk^T, h Wv^T   (n_head heads, no GQA)
              q, k rotated by RoPE, adjacent pairs (2i, 2i + 1) of each
              head, angle pos * base^(-2i / head_dim) (llama's "NORM"
              mode, llama2.c's pairing)
              x += softmax(q k^T / sqrt(head_dim), causal) v  Wo^T
              h = rmsnorm(x) * ffn_norm
              x += (silu(h Wg^T) * (h Wu^T)) Wd^T
  logits = (rmsnorm(x) * output_norm) Wout^T

Parameters are a dict keyed by the GGUF tensor names, each matrix
W[n_out][n_in] as numpy holds a ggml tensor of ne [n_in, n_out]; the
dtype of the parameters is the dtype of the computation (float32 to
train, float64 in the gradient check).  loss_and_grad() returns the mean
cross-entropy of next-token prediction and its gradient for every
parameter, by a hand-written backward pass (checked against finite
differences in test_llama_grad.py).
"""

import numpy as np


class Config:
    def __init__(self, n_vocab, dim=128, n_layer=4, n_head=4, n_ff=384,
                 n_ctx=256, eps=1e-5, base=10000.0):
        self.n_vocab, self.dim, self.n_layer = n_vocab, dim, n_layer
        self.n_head, self.n_ff, self.n_ctx = n_head, n_ff, n_ctx
        self.eps, self.base = eps, base
        self.head_dim = dim // n_head


def init(cfg, rng, dtype=np.float32):
    """Weights ~ N(0, 0.02), the residual outputs scaled down by
    sqrt(2 n_layer), norms 1."""
    D, F, V = cfg.dim, cfg.n_ff, cfg.n_vocab
    out_sd = 0.02 / np.sqrt(2 * cfg.n_layer)

    def mat(n_out, n_in, sd=0.02):
        return (rng.standard_normal((n_out, n_in)) * sd).astype(dtype)

    p = {"token_embd.weight": mat(V, D)}
    for i in range(cfg.n_layer):
        b = "blk.%d." % i
        p[b + "attn_norm.weight"] = np.ones(D, dtype)
        p[b + "attn_q.weight"] = mat(D, D)
        p[b + "attn_k.weight"] = mat(D, D)
        p[b + "attn_v.weight"] = mat(D, D)
        p[b + "attn_output.weight"] = mat(D, D, out_sd)
        p[b + "ffn_norm.weight"] = np.ones(D, dtype)
        p[b + "ffn_gate.weight"] = mat(F, D)
        p[b + "ffn_up.weight"] = mat(F, D)
        p[b + "ffn_down.weight"] = mat(D, F, out_sd)
    p["output_norm.weight"] = np.ones(D, dtype)
    p["output.weight"] = mat(V, D)
    return p


def rope_table(cfg, T, dtype):
    i = np.arange(cfg.head_dim // 2, dtype=np.float64)
    theta = np.arange(T, dtype=np.float64)[:, None] * \
        cfg.base ** (-2.0 * i / cfg.head_dim)
    return np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)


def rope(x, cos, sin, inverse=False):
    """x [B][H][T][hd], pairs (2i, 2i + 1) rotated by +angle (or -angle:
    the backward pass, the transpose of a rotation)."""
    s = -sin if inverse else sin
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = x0 * cos - x1 * s
    y[..., 1::2] = x0 * s + x1 * cos
    return y


def rmsnorm(x, g, eps):
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    n = x * r
    return n * g, (n, r)


def rmsnorm_back(dy, g, cache):
    n, r = cache
    dg = (dy * n).reshape(-1, n.shape[-1]).sum(0)
    dn = dy * g
    return r * (dn - n * (dn * n).mean(-1, keepdims=True)), dg


def forward(cfg, p, ids, keep=False):
    """Logits [B][T][V] of ids [B][T]; with keep, also what backward
    needs."""
    B, T = ids.shape
    H, hd, dt = cfg.n_head, cfg.head_dim, p["output.weight"].dtype
    cos, sin = rope_table(cfg, T, dt)
    mask = np.triu(np.full((T, T), -np.inf, dt), 1)
    scale = dt.type(1.0 / np.sqrt(hd))
    x = p["token_embd.weight"][ids]
    caches = []

    def heads(m):
        return m.reshape(B, T, H, hd).transpose(0, 2, 1, 3)

    for i in range(cfg.n_layer):
        b = "blk.%d." % i
        h, c1 = rmsnorm(x, p[b + "attn_norm.weight"], cfg.eps)
        q = rope(heads(h @ p[b + "attn_q.weight"].T), cos, sin)
        k = rope(heads(h @ p[b + "attn_k.weight"].T), cos, sin)
        v = heads(h @ p[b + "attn_v.weight"].T)
        s = q @ k.swapaxes(-1, -2) * scale + mask
        e = np.exp(s - s.max(-1, keepdims=True))
        a = e / e.sum(-1, keepdims=True)
        o = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, -1)
        x1 = x + o @ p[b + "attn_output.weight"].T
        h2, c2 = rmsnorm(x1, p[b + "ffn_norm.weight"], cfg.eps)
        gt = h2 @ p[b + "ffn_gate.weight"].T
        up = h2 @ p[b + "ffn_up.weight"].T
        sg = 1.0 / (1.0 + np.exp(-gt))
        f = gt * sg * up
        x2 = x1 + f @ p[b + "ffn_down.weight"].T
        if keep:
            caches.append((h, c1, q, k, v, a, o, h2, c2, gt, up, sg, f))
        x = x2
    hf, cf = rmsnorm(x, p["output_norm.weight"], cfg.eps)
    logits = hf @ p["output.weight"].T
    if keep:
        return logits, (caches, hf, cf, cos, sin, scale)
    return logits


def loss_and_grad(cfg, p, ids, targets):
    """Mean cross-entropy of logits(ids) against targets [B][T], and the
    gradient of every parameter."""
    B, T = ids.shape
    H, hd = cfg.n_head, cfg.head_dim
    logits, (caches, hf, cf, cos, sin, scale) = forward(cfg, p, ids, True)
    z = logits - logits.max(-1, keepdims=True)
    ez = np.exp(z)
    se = ez.sum(-1, keepdims=True)
    logp = z - np.log(se)
    n = B * T
    tb, tt = np.meshgrid(np.arange(B), np.arange(T), indexing="ij")
    loss = -logp[tb, tt, targets].sum() / n

    g = {}
    dl = ez / se
    dl[tb, tt, targets] -= 1.0
    dl /= n
    g["output.weight"] = dl.reshape(n, -1).T @ hf.reshape(n, -1)
    dx, g["output_norm.weight"] = rmsnorm_back(dl @ p["output.weight"],
                                               p["output_norm.weight"], cf)

    def flat(m):
        return m.reshape(n, -1)

    def merge(m):
        return m.transpose(0, 2, 1, 3).reshape(B, T, -1)

    def heads(m):
        return m.reshape(B, T, H, hd).transpose(0, 2, 1, 3)

    for i in reversed(range(cfg.n_layer)):
        b = "blk.%d." % i
        h, c1, q, k, v, a, o, h2, c2, gt, up, sg, f = caches[i]
        # FFN
        g[b + "ffn_down.weight"] = flat(dx).T @ flat(f)
        df = dx @ p[b + "ffn_down.weight"]
        dgt = df * up * (sg * (1.0 + gt * (1.0 - sg)))
        dup = df * gt * sg
        g[b + "ffn_gate.weight"] = flat(dgt).T @ flat(h2)
        g[b + "ffn_up.weight"] = flat(dup).T @ flat(h2)
        dh2 = dgt @ p[b + "ffn_gate.weight"] + dup @ p[b + "ffn_up.weight"]
        d, g[b + "ffn_norm.weight"] = rmsnorm_back(
            dh2, p[b + "ffn_norm.weight"], c2)
        dx = dx + d
        # attention
        g[b + "attn_output.weight"] = flat(dx).T @ flat(o)
        do = heads(dx @ p[b + "attn_output.weight"])
        da = do @ v.swapaxes(-1, -2)
        dv = a.swapaxes(-1, -2) @ do
        ds = a * (da - (da * a).sum(-1, keepdims=True)) * scale
        dq = merge(rope(ds @ k, cos, sin, inverse=True))
        dk = merge(rope(ds.swapaxes(-1, -2) @ q, cos, sin, inverse=True))
        dv = merge(dv)
        g[b + "attn_q.weight"] = flat(dq).T @ flat(h)
        g[b + "attn_k.weight"] = flat(dk).T @ flat(h)
        g[b + "attn_v.weight"] = flat(dv).T @ flat(h)
        dh = (dq @ p[b + "attn_q.weight"] + dk @ p[b + "attn_k.weight"]
              + dv @ p[b + "attn_v.weight"])
        d, g[b + "attn_norm.weight"] = rmsnorm_back(
            dh, p[b + "attn_norm.weight"], c1)
        dx = dx + d
    emb = np.zeros_like(p["token_embd.weight"])
    np.add.at(emb, ids.reshape(-1), flat(dx))
    g["token_embd.weight"] = emb
    return float(loss), g


class AdamW:
    """Adam with decoupled weight decay on matrices (not norms)."""

    def __init__(self, p, b1=0.9, b2=0.95, eps=1e-8, wd=0.1):
        self.m = {k: np.zeros_like(v) for k, v in p.items()}
        self.v = {k: np.zeros_like(v) for k, v in p.items()}
        self.b1, self.b2, self.eps, self.wd, self.t = b1, b2, eps, wd, 0

    def step(self, p, g, lr):
        self.t += 1
        c1 = 1.0 - self.b1 ** self.t
        c2 = 1.0 - self.b2 ** self.t
        for k in p:
            m, v = self.m[k], self.v[k]
            m *= self.b1
            m += (1.0 - self.b1) * g[k]
            v *= self.b2
            v += (1.0 - self.b2) * g[k] * g[k]
            if p[k].ndim == 2:
                p[k] *= p[k].dtype.type(1.0 - lr * self.wd)
            p[k] -= (lr * (m / c1) / (np.sqrt(v / c2) + self.eps)).astype(
                p[k].dtype)


def clip(g, max_norm):
    """Scales g in place to a global norm of at most max_norm; returns
    the norm before."""
    norm = float(np.sqrt(sum(float((v.astype(np.float64) ** 2).sum())
                             for v in g.values())))
    if norm > max_norm:
        for v in g.values():
            v *= v.dtype.type(max_norm / norm)
    return norm
