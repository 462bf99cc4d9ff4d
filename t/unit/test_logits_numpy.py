"""
test_logits_numpy: an independent reference for the CPU backend.  Reads a
GGUF with the `gguf` package, runs the forward pass in numpy float64
(written from each architecture's definition as llama.cpp, llama2.c and
the Hugging Face models define it, not from our C), and compares every
position's logits with `kvserve logits` (env KVS_CLI, default
build/kvserve).

Architectures: llama (with Mistral 7B v0.1's sliding window when the
file declares llama.attention.sliding_window); qwen2 (Q/K/V biases, NEOX RoPE); qwen3 (no
biases; each head of Q and K RMS-normed with attn_q_norm / attn_k_norm
before RoPE; head size from key_length, which may differ from
n_embd / n_head); phi3 (attn_qkv split Q, K, V by rows; ffn_up split
gate, up by rows, silu(gate) * up; a sliding window: a query at t sees
keys at s with t - s < window; LongRoPE: the long factors when the
trained context exceeds the original one, else the short ones, dividing
each pair's frequency, and attn_factor multiplying cos and sin); gemma2
and gemma3 (embeddings times sqrt(n_embd); post_attention_norm and
post_ffw_norm on each block's output before its residual; gelu (tanh
form) of the gate times up; the query scale 1/sqrt(head size), or
1/sqrt(n_embd / n_head) for the 27B layer counts, or the model's
attention.scale; gemma2: scores soft-capped c tanh(s / c) before the
softmax, logits too, windowed even layers; gemma3: qwen3's per-head
norms, five windowed layers to a global one, the windowed ones rotated
with base 10000 (or rope.freq_base_swa) unscaled, whatever the window's
width, none without a window key; a final cap only when the file has
one; the output tied to the embeddings).

Models: stories260K (the fixture, if present: env KVS_FIXTURES), random
models of several shapes from `kvserve gen-model`, and a few GGUFs written
here with gguf.GGUFWriter for what gen-model cannot make (qwen2 with q/k/v
biases and NEOX RoPE, linear RoPE scaling, rope_freqs, partial rotary,
phi3's LongRoPE factors).

Error measure: for each position t, max_v |ours[t,v] - ref[t,v]| divided
by max_v |ref[t,v]|; a model's error is the largest over its positions.
It must stay under 1e-4 for every model and every run (one-shot prefill,
chunked prefill, another KV block size), F16/BF16/Q8_0 included: both
sides dequantize the same stored values to exact floats.  A Q8_0 matrix
multiplies activations quantized to Q8_0 blocks, as ggml defines the
Q8_0 x Q8_0 product (per block of 32: d = max|x| / 127, q = round(x / d)
to nearest even, products of the int8 values scaled by both blocks' d),
so the reference applies that definition too; from the first position
where such a rounding is a near-tie (TIE below) it may round apart from
ours, and that position and the later ones are held to the input
quantization's error (TOL_TIE) instead.  Exits non-zero on any failure.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import (GGMLQuantizationType, GGUFReader, GGUFWriter,
                  RopeScalingType)
from gguf.quants import dequantize

TOL = 1e-4
# Q8_0 models: the input's quantization rounds x / d to the nearest
# integer; where x / d is within TIE of a .5 (about 3 float32 ulps at 64),
# our float32 activations and the float64 reference may round apart, and
# one flipped int8 moves that position's logits and every later one by the
# input quantization's own error.  Positions from the first such near-tie
# (over every layer) are held to TOL_TIE instead of TOL; the count is
# printed.
TIE = 2e-5
TOL_TIE = 5e-2
Q8_TIES = []
CLI = os.environ.get("KVS_CLI", "build/kvserve")


# --- the reference ---------------------------------------------------------

def load(path):
    """Metadata (tokenizer keys left out) and every tensor as float64, in
    numpy's order: a ggml tensor of ne [n_in, n_out] is W[n_out][n_in]."""
    r = GGUFReader(path)
    meta = {k: f.contents() for k, f in r.fields.items()
            if not k.startswith("tokenizer.") and not k.startswith("GGUF.")}
    w = {}
    for t in r.tensors:
        ne = [int(n) for n in t.shape]
        a = dequantize(t.data, t.tensor_type)
        w[t.name] = np.asarray(a, dtype=np.float64).reshape(ne[::-1])
        if t.tensor_type == GGMLQuantizationType.Q8_0:
            # blocks of 34 bytes: f16 scale, 32 int8 values
            raw = np.asarray(t.data, dtype=np.uint8).reshape(
                ne[1], ne[0] // 32, 34)
            w[t.name + "#d"] = raw[:, :, :2].copy().view(np.float16)[
                :, :, 0].astype(np.float64)
            w[t.name + "#q"] = raw[:, :, 2:].copy().view(np.int8).astype(
                np.int64)
    return meta, w


def q8_matmul(h, d_w, q_w):
    """h [T][n_in] times a Q8_0 matrix (scales d_w [n_out][B], values q_w
    [n_out][B][32]) the Q8_0 x Q8_0 way: h quantized per block of 32 in
    float32, int8 products summed per block, scaled by both scales."""
    T, n_in = h.shape
    xb = h.astype(np.float32).reshape(T, n_in // 32, 32)
    d_x = np.abs(xb).max(axis=2) / np.float32(127.0)
    inv = np.where(d_x != 0, np.float32(1.0) / np.where(d_x != 0, d_x, 1),
                   np.float32(0.0)).astype(np.float32)
    z = xb * inv[:, :, None]
    q_x = np.rint(z).astype(np.int64)
    # a value within TIE of a rounding boundary may round the other way
    # from activations that differ from ours in the last bits: note the
    # first position where one does
    near = np.abs(np.abs(z) - np.floor(np.abs(z)) - np.float32(0.5)) < TIE
    rows = np.nonzero(near.any(axis=(1, 2)))[0]
    if rows.size:
        Q8_TIES.append(int(rows[0]))
    dots = np.einsum("tbk,obk->tob", q_x, q_w)
    return (dots * (d_w[None, :, :] * d_x[:, None, :].astype(np.float64))
            ).sum(axis=2)


def hparams(meta, w):
    arch = meta["general.architecture"]

    def get(key, default=None):
        v = meta.get(f"{arch}.{key}", default)
        if v is None:
            raise KeyError(f"{arch}.{key}")
        return v

    hp = {"arch": arch,
          "n_layer": get("block_count"),
          "n_embd": get("embedding_length"),
          "n_head": get("attention.head_count"),
          "eps": get("attention.layer_norm_rms_epsilon"),
          "base": get("rope.freq_base", 10000.0)}
    hp["n_head_kv"] = get("attention.head_count_kv", hp["n_head"])
    hp["head_dim"] = get("attention.key_length",
                         hp["n_embd"] // hp["n_head"])
    hp["n_rot"] = get("rope.dimension_count", hp["head_dim"])
    # llama.cpp: LLAMA_ROPE_TYPE_NORM (adjacent pairs) for llama,
    # LLAMA_ROPE_TYPE_NEOX (first half with second half) for the others
    hp["neox"] = {"llama": False, "qwen2": True, "qwen3": True,
                  "phi3": True, "gemma2": True, "gemma3": True}[arch]
    # the window: keys more than window - 1 positions back are masked, on
    # every layer (phi3) or all but every period-th (gemma)
    hp["window"] = get("attention.sliding_window",
                       4096 if arch == "gemma2" else None) \
        if arch in ("phi3", "gemma2") else 0
    if arch in ("llama", "gemma3"):
        # Mistral 7B v0.1's window, when a file carries it; a Gemma 3
        # whose every layer is global has none
        hp["window"] = get("attention.sliding_window", 0)
    # a global layer every period-th (0: none), the file may say
    hp["period"] = {"gemma2": 2, "gemma3": 6}.get(arch, 0)
    if hp["window"] and arch in ("gemma2", "gemma3"):
        hp["period"] = get("attention.sliding_window_pattern",
                           hp["period"])
    hp["mscale"] = 1.0
    hp["gemma"] = arch in ("gemma2", "gemma3")
    hp["qk_norm"] = arch in ("qwen3", "gemma3")
    hp["scale"] = 1.0 / np.sqrt(hp["head_dim"])
    hp["softcap"] = hp["final_cap"] = 0.0
    if hp["gemma"]:
        big = {"gemma2": 46, "gemma3": 62}[arch]
        hp["scale"] = get("attention.scale", 1.0 / np.sqrt(
            hp["n_embd"] // hp["n_head"] if hp["n_layer"] == big
            else hp["head_dim"]))
    if arch == "gemma2":
        hp["softcap"] = get("attn_logit_softcapping", 50.0)
        hp["final_cap"] = get("final_logit_softcapping", 30.0)
        hp["base_local"] = get("rope.freq_base_swa", hp["base"])
    if arch == "gemma3":
        hp["final_cap"] = get("final_logit_softcapping", 0.0)
        hp["base_local"] = get("rope.freq_base_swa", 10000.0)
    kind = get("rope.scaling.type", "none")
    factor = get("rope.scaling.factor", 1.0)
    if kind == "none" or factor in (0.0, 1.0):
        hp["freq_scale"] = 1.0
    elif kind == "linear":
        hp["freq_scale"] = 1.0 / factor
    else:
        raise NotImplementedError(f"RoPE scaling {kind!r}")
    # Llama 3.1: per-pair divisors of the frequency, stored as a tensor
    hp["freq_factors"] = w.get("rope_freqs.weight")
    if "rope_factors_long.weight" in w:
        # Phi-3 LongRoPE: one set for the whole context the model serves
        orig = get("rope.scaling.original_context_length")
        long = get("context_length") > orig
        hp["freq_factors"] = w["rope_factors_long.weight" if long
                               else "rope_factors_short.weight"]
        hp["mscale"] = get("rope.scaling.attn_factor", 1.0)
    return hp


def rmsnorm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope(x, hp):
    """x [T][heads][head_dim] at positions 0..T-1: the first n_rot dims of
    each head rotated by pos * freq_scale * base^(-2i/n_rot) / factor[i]
    for pair i."""
    n_rot = hp["n_rot"]
    i = np.arange(n_rot // 2, dtype=np.float64)
    freq = hp["freq_scale"] * hp["base"] ** (-2.0 * i / n_rot)
    if hp["freq_factors"] is not None:
        freq = freq / hp["freq_factors"]
    theta = np.arange(x.shape[0], dtype=np.float64)[:, None] * freq
    cos = np.cos(theta)[:, None, :] * hp["mscale"]
    sin = np.sin(theta)[:, None, :] * hp["mscale"]
    y = x.copy()
    if hp["neox"]:
        a, b = slice(0, n_rot // 2), slice(n_rot // 2, n_rot)
    else:
        a, b = slice(0, n_rot, 2), slice(1, n_rot, 2)
    x0, x1 = x[:, :, a], x[:, :, b]
    y[:, :, a] = x0 * cos - x1 * sin
    y[:, :, b] = x0 * sin + x1 * cos
    return y


def forward(meta, w, ids, lora=None):
    """Logits [T][n_vocab] of every position of ids, one sequence.  lora:
    {matrix name: (A, B, scale)}, each such product then adds its LoRA
    adapter's scale * B (A x) (t/unit/test_lora_numpy.py)."""
    hp = hparams(meta, w)
    T, H, KV, hd = len(ids), hp["n_head"], hp["n_head_kv"], hp["head_dim"]
    eps = hp["eps"]
    x = w["token_embd.weight"][ids]
    if hp["gemma"]:
        x = x * np.sqrt(hp["n_embd"])
    causal = np.triu(np.full((T, T), -np.inf), 1)
    windowed = causal.copy()
    if hp["window"]:
        t = np.arange(T)
        windowed[t[:, None] - t[None, :] >= hp["window"]] = -np.inf
    # gemma3's windowed layers: base 10000 (or the file's), no scaling,
    # no factors; local even when the window spans every position.
    # gemma2's: the file's base, if any, scaled as the global layers
    hp_local = dict(hp, base=hp["base_local"], freq_scale=1.0,
                    freq_factors=None, mscale=1.0) \
        if hp["arch"] == "gemma3" else hp
    if hp["arch"] == "gemma2":
        hp_local = dict(hp, base=hp["base_local"])
    qd, kd = H * hd, KV * hd

    def matmul(name, h):
        if name + "#q" in w:
            y = q8_matmul(h, w[name + "#d"], w[name + "#q"])
        else:
            y = h @ w[name].T
        if lora and name in lora:
            a, b, scale = lora[name]
            y = y + scale * ((h @ a.T) @ b.T)
        return y

    def lin(name, h):
        y = matmul(name + ".weight", h)
        bias = w.get(name + ".bias")
        return y if bias is None else y + bias

    for layer in range(hp["n_layer"]):
        p = f"blk.{layer}."
        h = rmsnorm(x, w[p + "attn_norm.weight"], eps)
        if hp["arch"] == "phi3":
            qkv = lin(p + "attn_qkv", h)
            q, k, v = qkv[:, :qd], qkv[:, qd:qd + kd], qkv[:, qd + kd:]
        else:
            q, k = lin(p + "attn_q", h), lin(p + "attn_k", h)
            v = lin(p + "attn_v", h)
        q, k = q.reshape(T, H, hd), k.reshape(T, KV, hd)
        v = v.reshape(T, KV, -1)
        if hp["qk_norm"]:
            q = rmsnorm(q, w[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "attn_k_norm.weight"], eps)
        local = hp["window"] and (hp["period"] == 0
                                  or (layer + 1) % hp["period"] != 0)
        mask = windowed if local else causal
        hl = hp_local if local else hp
        q, k = rope(q, hl), rope(k, hl)
        out = np.empty((T, H, v.shape[2]))
        for head in range(H):
            g = head // (H // KV)
            s = q[:, head] @ k[:, g].T * hp["scale"]
            if hp["softcap"]:
                s = hp["softcap"] * np.tanh(s / hp["softcap"])
            s = s + mask
            e = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, head] = (e / e.sum(axis=1, keepdims=True)) @ v[:, g]
        a = lin(p + "attn_output", out.reshape(T, -1))
        if hp["gemma"]:
            a = rmsnorm(a, w[p + "post_attention_norm.weight"], eps)
        x = x + a
        h = rmsnorm(x, w[p + "ffn_norm.weight"], eps)
        if hp["arch"] == "phi3":
            gu = lin(p + "ffn_up", h)
            gate, up = np.split(gu, 2, axis=1)
        else:
            gate, up = lin(p + "ffn_gate", h), lin(p + "ffn_up", h)
        if hp["gemma"]:
            ff = 0.5 * gate * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (
                gate + 0.044715 * gate ** 3))) * up
        else:
            ff = gate / (1.0 + np.exp(-gate)) * up
        f = lin(p + "ffn_down", ff)
        if hp["gemma"]:
            f = rmsnorm(f, w[p + "post_ffw_norm.weight"], eps)
        x = x + f

    x = rmsnorm(x, w["output_norm.weight"], eps)
    logits = matmul("output.weight" if "output.weight" in w
                    else "token_embd.weight", x)
    if hp["final_cap"]:
        logits = hp["final_cap"] * np.tanh(logits / hp["final_cap"])
    return logits


# --- ours ------------------------------------------------------------------

def ours(path, ids, n_vocab, *extra):
    """Our logits; an extra of the form NAME=VALUE goes to the environment
    (KVSERVE_CPU_SIMD=0: the portable kernels instead of AVX2)."""
    env = dict(os.environ)
    env.update(e.split("=", 1) for e in extra if "=" in e)
    args = [e for e in extra if "=" not in e]
    r = subprocess.run([CLI, "logits", path, "-t", " ".join(map(str, ids)),
                        *args], capture_output=True, check=False, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"kvserve logits {' '.join(extra)}: exit "
                           f"{r.returncode}: {r.stderr.decode().strip()}")
    a = np.frombuffer(r.stdout, dtype="<f4")
    if a.size != len(ids) * n_vocab:
        raise RuntimeError(f"{a.size} floats, expected {len(ids)} x "
                           f"{n_vocab}")
    return a.reshape(len(ids), n_vocab).astype(np.float64)


def rel_errs(got, ref):
    """Per position: max |difference| over max |reference|."""
    return (np.max(np.abs(got - ref), axis=1)
            / np.max(np.abs(ref), axis=1))


def check(name, path, ids, runs=(("--chunk", "5"), ("--block", "3"),
                                 ("KVSERVE_CPU_SIMD=0",))):
    """Reference vs one-shot prefill and each of runs; True when all
    agree within TOL."""
    meta, w = load(path)
    del Q8_TIES[:]
    ref = forward(meta, w, ids)
    n_vocab = ref.shape[1]
    tie = min(Q8_TIES) if Q8_TIES else len(ids)
    try:
        per = [rel_errs(ours(path, ids, n_vocab, *extra), ref)
               for extra in ((),) + tuple(runs)]
    except RuntimeError as e:
        print(f"FAIL {name}: {e}")
        return False, ref
    errs = [float(np.max(p[:tie], initial=0.0)) for p in per]
    late = [float(np.max(p[tie:], initial=0.0)) for p in per]
    ok = max(errs) < TOL and max(late) < TOL_TIE
    detail = "  ".join(f"{lbl} {e:.2e}" for lbl, e in
                       zip(["one-shot"] + [" ".join(r) for r in runs], errs))
    if tie < len(ids):
        detail += (f"  (near-tie at position {tie}: from there "
                   f"{max(late):.2e}, bound {TOL_TIE:g})")
    print(f"{'ok  ' if ok else 'FAIL'} {name:<34} {detail}")
    return ok, ref


# --- models ----------------------------------------------------------------

def stories(fixtures):
    """stories260K with run.c's first 20 greedy ids (BOS first): our
    reference must also pick each next one and reproduce run.c's position
    0 logits from the fixtures README, which anchors it to llama2.c."""
    path = os.path.join(fixtures, "models", "stories260K-f32.gguf")
    ids_path = os.path.join(fixtures, "models",
                            "stories260K.derived-token-ids.txt")
    if not (os.path.exists(path) and os.path.exists(ids_path)):
        print(f"SKIP stories260K: {path} not found (set KVS_FIXTURES)")
        return True
    with open(ids_path) as f:
        line = next(ln for ln in f if ln.startswith("greedy_t0_n256"))
    greedy = [int(t) for t in line.split(":", 1)[1].split()]
    ids = greedy[:20]
    ok, ref = check("stories260K f32 (20 ids)", path, ids)
    runc = np.array([-6.222911, 8.404342, -6.223737, -6.222542, -6.221951,
                     -6.222875, -6.221880, -6.223416])
    d = float(np.max(np.abs(ref[0, :8] - runc)))
    picks = [int(np.argmax(r)) for r in ref]
    if d > 1e-4 or picks != greedy[1:21]:
        print(f"FAIL stories260K: our reference is off run.c's position 0 "
              f"logits by {d:.2e}; its greedy picks "
              f"{'match' if picks == greedy[1:21] else 'differ'}")
        return False
    return ok


def gen(tmp, name, seed, *args):
    path = os.path.join(tmp, name + ".gguf")
    subprocess.run([CLI, "gen-model", "--seed", str(seed), *args, path],
                   check=True)
    return path


GEN = [
    # name, gen-model options
    ("mha-f32-untied", "--layers 2 --dim 64 --heads 4 --kv-heads 4 "
     "--ffn 96 --vocab 300 --tied 0 --dtype f32"),
    ("gqa4-f32-tied", "--layers 2 --dim 128 --heads 8 --kv-heads 2 "
     "--ffn 160 --vocab 400 --tied 1 --dtype f32"),
    ("odd3-gqa3-f32", "--layers 2 --dim 48 --heads 3 --kv-heads 1 "
     "--ffn 80 --vocab 280 --tied 0 --dtype f32"),
    ("odd5-f16-tied", "--layers 3 --dim 80 --heads 5 --kv-heads 5 "
     "--ffn 112 --vocab 320 --tied 1 --dtype f16"),
    ("gqa4-f16-untied", "--layers 2 --dim 64 --heads 4 --kv-heads 1 "
     "--ffn 128 --vocab 300 --tied 0 --dtype f16"),
    ("bf16-gqa2", "--layers 2 --dim 64 --heads 4 --kv-heads 2 "
     "--ffn 96 --vocab 300 --tied 0 --dtype bf16"),
    ("q8_0-odd5", "--layers 2 --dim 160 --heads 5 --kv-heads 5 "
     "--ffn 96 --vocab 300 --tied 0 --dtype q8_0"),
    ("q8_0-gqa4-tied", "--layers 2 --dim 128 --heads 8 --kv-heads 2 "
     "--ffn 64 --vocab 300 --tied 1 --dtype q8_0"),
    ("qwen3-gqa2-f32", "--arch qwen3 --layers 2 --dim 64 --heads 4 "
     "--kv-heads 2 --ffn 96 --vocab 300 --tied 1 --dtype f32"),
    ("qwen3-hd32-untied", "--arch qwen3 --layers 2 --dim 64 --heads 4 "
     "--kv-heads 1 --head-dim 32 --ffn 96 --vocab 300 --tied 0 "
     "--dtype f32"),
    ("qwen3-q8_0", "--arch qwen3 --layers 2 --dim 128 --heads 4 "
     "--kv-heads 2 --ffn 64 --vocab 300 --tied 1 --dtype q8_0"),
    ("qwen3-odd3-bf16", "--arch qwen3 --layers 2 --dim 48 --heads 3 "
     "--kv-heads 1 --ffn 80 --vocab 280 --tied 0 --dtype bf16"),
    ("phi3-gqa2-f32", "--arch phi3 --layers 2 --dim 64 --heads 4 "
     "--kv-heads 2 --ffn 96 --vocab 300 --dtype f32"),
    ("phi3-mha-swa5-f32", "--arch phi3 --layers 2 --dim 64 --heads 4 "
     "--kv-heads 4 --ffn 96 --vocab 300 --swa 5 --dtype f32"),
    ("phi3-swa7-f16", "--arch phi3 --layers 3 --dim 80 --heads 5 "
     "--kv-heads 5 --ffn 112 --vocab 320 --swa 7 --dtype f16"),
    ("phi3-swa9-q8_0", "--arch phi3 --layers 2 --dim 128 --heads 8 "
     "--kv-heads 2 --ffn 64 --vocab 300 --swa 9 --dtype q8_0"),
    ("mistral-swa6-f32", "--layers 2 --dim 64 --heads 4 --kv-heads 2 "
     "--ffn 96 --vocab 300 --swa 6 --dtype f32"),
    ("gemma2-swa6-f32", "--arch gemma2 --layers 3 --dim 64 --heads 4 "
     "--kv-heads 2 --head-dim 32 --ffn 96 --vocab 300 --swa 6 "
     "--dtype f32"),
    ("gemma2-nowin-f16", "--arch gemma2 --layers 2 --dim 64 --heads 4 "
     "--kv-heads 1 --ffn 96 --vocab 300 --dtype f16"),
    ("gemma2-swa5-q8_0", "--arch gemma2 --layers 2 --dim 128 --heads 4 "
     "--kv-heads 2 --ffn 64 --vocab 300 --swa 5 --dtype q8_0"),
    ("gemma3-swa7-f32", "--arch gemma3 --layers 7 --dim 64 --heads 4 "
     "--kv-heads 2 --head-dim 16 --ffn 96 --vocab 300 --swa 7 "
     "--dtype f32"),
    ("gemma3-swa4-bf16", "--arch gemma3 --layers 6 --dim 48 --heads 3 "
     "--kv-heads 1 --ffn 80 --vocab 280 --swa 4 --dtype bf16"),
    # no --swa: a window of the whole context, which still makes five of
    # six layers local ones (RoPE base 10000), as llama.cpp reads it
    ("gemma3-ctxwin-f32", "--arch gemma3 --layers 6 --dim 64 --heads 4 "
     "--kv-heads 2 --head-dim 32 --ffn 96 --vocab 300 --dtype f32"),
]


def write_gguf(path, arch, n_layer, n_embd, n_head, n_head_kv, n_ff,
               n_vocab, seed, tied=False, bias=False, n_rot=None,
               base=10000.0, linear=None, freq_factors=False,
               head_dim=None, longrope=None, window=None, ctx=256,
               caps=None, attn_scale=None, final_cap=None,
               base_swa=None, pattern=None):
    """A random model written with gguf.GGUFWriter, independent of our
    generator; F32 matrices with entries ~ N(0, 1/sqrt(fan_in)).
    longrope: the original context (phi3's factor tensors written);
    window=0: no sliding_window key."""
    rng = np.random.default_rng(seed)
    hd = head_dim or n_embd // n_head
    wr = GGUFWriter(path, arch)
    wr.add_block_count(n_layer)
    wr.add_context_length(ctx)
    if head_dim:
        wr.add_key_length(hd)
        wr.add_value_length(hd)
    gemma = arch in ("gemma2", "gemma3")
    if arch in ("phi3", "gemma2", "gemma3") and window != 0:
        wr.add_sliding_window(window or ctx)
    if final_cap:
        wr.add_float32(f"{arch}.final_logit_softcapping", final_cap)
    if base_swa:
        wr.add_float32(f"{arch}.rope.freq_base_swa", base_swa)
    if pattern is not None:
        wr.add_uint32(f"{arch}.attention.sliding_window_pattern", pattern)
    if caps:
        wr.add_float32(f"{arch}.attn_logit_softcapping", caps[0])
        wr.add_float32(f"{arch}.final_logit_softcapping", caps[1])
    if attn_scale:
        wr.add_float32(f"{arch}.attention.scale", attn_scale)
    if longrope:
        wr.add_rope_scaling_orig_ctx_len(longrope)
        wr.add_rope_scaling_attn_factors(
            float(np.sqrt(1 + np.log(ctx / longrope) / np.log(longrope))))
    wr.add_embedding_length(n_embd)
    wr.add_feed_forward_length(n_ff)
    wr.add_head_count(n_head)
    wr.add_head_count_kv(n_head_kv)
    wr.add_layer_norm_rms_eps(1e-6)
    wr.add_rope_freq_base(base)
    wr.add_rope_dimension_count(n_rot or hd)
    if linear is not None:
        wr.add_rope_scaling_type(RopeScalingType.LINEAR)
        wr.add_rope_scaling_factor(linear)
    wr.add_tokenizer_model("gpt2")
    wr.add_token_list([f"t{i}" for i in range(n_vocab)])

    def mat(n_out, n_in):
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)) \
            .astype(np.float32)

    def vec(n, mu=1.0, sd=0.1):
        return (mu + sd * rng.standard_normal(n)).astype(np.float32)

    wr.add_tensor("token_embd.weight", mat(n_vocab, n_embd))
    wr.add_tensor("output_norm.weight", vec(n_embd))
    if not tied:
        wr.add_tensor("output.weight", mat(n_vocab, n_embd))
    if freq_factors:
        wr.add_tensor("rope_freqs.weight",
                      rng.uniform(1.0, 8.0, (n_rot or hd) // 2)
                      .astype(np.float32))
    if longrope:
        for kind in ("long", "short"):
            wr.add_tensor(f"rope_factors_{kind}.weight",
                          rng.uniform(1.0, 8.0, (n_rot or hd) // 2)
                          .astype(np.float32))
    for i in range(n_layer):
        p = f"blk.{i}."
        wr.add_tensor(p + "attn_norm.weight", vec(n_embd))
        if arch == "phi3":
            wr.add_tensor(p + "attn_qkv.weight",
                          mat((n_head + 2 * n_head_kv) * hd, n_embd))
        else:
            wr.add_tensor(p + "attn_q.weight", mat(n_head * hd, n_embd))
            wr.add_tensor(p + "attn_k.weight",
                          mat(n_head_kv * hd, n_embd))
            wr.add_tensor(p + "attn_v.weight",
                          mat(n_head_kv * hd, n_embd))
        if arch in ("qwen3", "gemma3"):
            wr.add_tensor(p + "attn_q_norm.weight", vec(hd, 1.0, 0.3))
            wr.add_tensor(p + "attn_k_norm.weight", vec(hd, 1.0, 0.3))
        if bias:
            wr.add_tensor(p + "attn_q.bias", vec(n_head * hd, 0, 0.5))
            wr.add_tensor(p + "attn_k.bias", vec(n_head_kv * hd, 0, 0.5))
            wr.add_tensor(p + "attn_v.bias", vec(n_head_kv * hd, 0, 0.5))
        wr.add_tensor(p + "attn_output.weight", mat(n_embd, n_head * hd))
        wr.add_tensor(p + "ffn_norm.weight", vec(n_embd))
        if gemma:
            wr.add_tensor(p + "post_attention_norm.weight", vec(n_embd))
            wr.add_tensor(p + "post_ffw_norm.weight", vec(n_embd))
        if arch == "phi3":
            wr.add_tensor(p + "ffn_up.weight", mat(2 * n_ff, n_embd))
        else:
            wr.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
            wr.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        wr.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return path


WRITTEN = [
    # name, write_gguf keyword arguments
    ("qwen2-bias-gqa2-untied", dict(arch="qwen2", n_layer=2, n_embd=64,
     n_head=4, n_head_kv=2, n_ff=96, n_vocab=200, bias=True,
     base=1000000.0)),
    ("qwen2-bias-mha-tied", dict(arch="qwen2", n_layer=2, n_embd=48,
     n_head=3, n_head_kv=3, n_ff=64, n_vocab=150, bias=True, tied=True)),
    ("llama-linear4-base5e5", dict(arch="llama", n_layer=2, n_embd=64,
     n_head=4, n_head_kv=2, n_ff=96, n_vocab=200, linear=4.0,
     base=500000.0)),
    ("llama-rope_freqs", dict(arch="llama", n_layer=2, n_embd=64,
     n_head=2, n_head_kv=1, n_ff=96, n_vocab=200, freq_factors=True)),
    ("llama-partial-rot16of32", dict(arch="llama", n_layer=2, n_embd=64,
     n_head=2, n_head_kv=2, n_ff=96, n_vocab=200, n_rot=16)),
    ("qwen2-partial-rot8of16", dict(arch="qwen2", n_layer=1, n_embd=64,
     n_head=4, n_head_kv=2, n_ff=64, n_vocab=200, n_rot=8, bias=True)),
    ("qwen3-hd24-base1e6", dict(arch="qwen3", n_layer=2, n_embd=64,
     n_head=4, n_head_kv=2, n_ff=96, n_vocab=200, head_dim=24,
     base=1000000.0)),
    ("qwen3-mha-tied", dict(arch="qwen3", n_layer=2, n_embd=48,
     n_head=3, n_head_kv=3, n_ff=64, n_vocab=150, tied=True)),
    ("phi3-longrope-long-swa6", dict(arch="phi3", n_layer=2, n_embd=64,
     n_head=4, n_head_kv=2, n_ff=96, n_vocab=200, longrope=64,
     window=6)),
    ("phi3-longrope-short", dict(arch="phi3", n_layer=2, n_embd=64,
     n_head=4, n_head_kv=4, n_ff=96, n_vocab=200, longrope=256)),
    # small caps so that they bite on these weights; the model's scale
    ("gemma2-caps-scale-swa5", dict(arch="gemma2", n_layer=4, n_embd=64,
     n_head=4, n_head_kv=2, n_ff=96, n_vocab=200, head_dim=24,
     window=5, caps=(2.0, 3.0), attn_scale=0.125, tied=True)),
    # gemma2 with its local layers' own base (linear scaling on every
    # layer) and a global layer every third
    ("gemma2-baseswa5e4-linear4-period3", dict(arch="gemma2", n_layer=4,
     n_embd=64, n_head=4, n_head_kv=2, n_ff=96, n_vocab=200, window=5,
     base_swa=50000.0, linear=4.0, pattern=3, tied=True)),
    # linear scaling on the global layer only
    ("gemma3-linear8-swa6", dict(arch="gemma3", n_layer=6, n_embd=64,
     n_head=4, n_head_kv=2, n_ff=96, n_vocab=200, window=6, linear=8.0,
     base=1000000.0, tied=True)),
    # the converter's all-global Gemma 3 (no window key), with a final
    # cap; and one whose local layers' base the file gives
    ("gemma3-global-cap3", dict(arch="gemma3", n_layer=6, n_embd=64,
     n_head=4, n_head_kv=2, n_ff=96, n_vocab=200, window=0,
     final_cap=3.0, base=1000000.0, tied=True)),
    ("gemma3-baseswa5e4-swa6", dict(arch="gemma3", n_layer=6, n_embd=64,
     n_head=4, n_head_kv=2, n_ff=96, n_vocab=200, window=6,
     base_swa=50000.0, tied=True)),
]


def main():
    fixtures = os.environ.get("KVS_FIXTURES", "../shared/fixtures")
    base_tmp = os.environ.get("KVS_TMP")
    if base_tmp:
        os.makedirs(base_tmp, exist_ok=True)
    rng = np.random.default_rng(4)
    ok = stories(fixtures)

    with tempfile.TemporaryDirectory(dir=base_tmp) as tmp:
        for seed, (name, opts) in enumerate(GEN, 1):
            path = gen(tmp, name, seed, *opts.split())
            n_vocab = int(opts.split("--vocab ")[1].split()[0])
            ids = [int(t) for t in rng.integers(0, n_vocab, 24)]
            ok &= check(f"{name} (24 ids)", path, ids)[0]

        # the whole context, and one id more refused
        path = gen(tmp, "ctx-small", 99, *"--layers 1 --dim 32 --heads 2 "
                   "--kv-heads 1 --ffn 64 --vocab 270 --ctx 12".split())
        ids = [int(t) for t in rng.integers(0, 270, 12)]
        ok &= check("ctx12-f32 (12 ids = ctx)", path, ids,
                    runs=(("--chunk", "5", "--block", "1"),))[0]
        r = subprocess.run([CLI, "logits", path, "-t",
                            " ".join(map(str, ids + [1]))],
                           capture_output=True, check=False)
        if r.returncode != 1:
            print(f"FAIL ctx12: 13 ids gave exit {r.returncode}, not 1")
            ok = False

        for seed, (name, kw) in enumerate(WRITTEN, 1):
            path = write_gguf(os.path.join(tmp, name + ".gguf"), seed=seed,
                              **kw)
            ids = [int(t) for t in rng.integers(0, kw["n_vocab"], 24)]
            ok &= check(f"{name} (24 ids)", path, ids)[0]

    print("all agree within 1e-4" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
