"""
train: makes the default model, kvserve-stories, from nothing but a
seed: the corpus (corpus.py) -> a byte-level BPE tokenizer trained on it
(bpe.py) -> a llama model trained on it with numpy (llama.py, AdamW) ->
a GGUF file (gguf.GGUFWriter) with the tokenizer and the chat template.

  python t/train/train.py [--seed N] [--steps N] [--threads N] OUT.gguf

Reproducible means: the same arguments on the same numpy and BLAS build
with the same thread count write the same bytes (every random draw comes
from the seed; BLAS is pinned to --threads threads before numpy loads,
because a different split of a product may round differently).  Another
BLAS or CPU may give other bits and so, after training, another model.

Training: rows of N_CTX + 1 tokens cut from the packed corpus, each
starting at a document's start (documents joined by <|endoftext|>);
next-token cross-entropy on every position; AdamW (lr warm-up then
cosine decay to a tenth, weight decay 0.1 on matrices, gradient norm
clipped at 1).  Progress and the final held-out loss go to stderr.

The file: architecture llama, F16 matrices and F32 norms; tokenizer
"gpt2" / pre "gpt-2" (ids: 256 bytes, the merges, then <|endoftext|>
(BOS and EOS), <|im_start|>, <|im_end|> (EOT)); no BOS added to
prompts; ChatML as tokenizer.chat_template.
"""

import argparse
import os
import sys
import time


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=640)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--docs", type=int, default=40000)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=96)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=192)
    return ap.parse_args()


ARGS = parse()
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402
from gguf import GGMLQuantizationType, GGUFWriter  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402
import llama  # noqa: E402

NAME = "kvserve-stories"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def pack(tok, docs):
    """The documents' ids joined, each followed by <|endoftext|>, and
    where each starts."""
    eot = tok.special_ids[corpus.BOS]
    stream, starts = [], []
    for d in docs:
        starts.append(len(stream))
        stream.extend(tok.encode(d))
        stream.append(eot)
    return np.array(stream, np.int64), np.array(starts, np.int64)


def rows(stream, starts, rng, n, T):
    ok = starts[starts + T + 1 <= len(stream)]
    at = rng.choice(ok, n)
    return np.stack([stream[s:s + T + 1] for s in at])


def write(path, cfg, tok, p, seed):
    w = GGUFWriter(path, "llama")
    w.add_name(NAME)
    w.add_uint64("kvserve.train.seed", seed)
    w.add_context_length(cfg.n_ctx)
    w.add_embedding_length(cfg.dim)
    w.add_block_count(cfg.n_layer)
    w.add_feed_forward_length(cfg.n_ff)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_head_count(cfg.n_head)
    w.add_head_count_kv(cfg.n_head)
    w.add_layer_norm_rms_eps(cfg.eps)
    w.add_rope_freq_base(cfg.base)
    w.add_vocab_size(tok.n_vocab)
    w.add_file_type(1)                          # mostly F16
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tok.gguf_tokens())
    w.add_token_types([1] * (tok.n_vocab - len(tok.specials))
                      + [3] * len(tok.specials))
    w.add_token_merges(tok.gguf_merges())
    w.add_bos_token_id(tok.special_ids[corpus.BOS])
    w.add_eos_token_id(tok.special_ids[corpus.BOS])
    w.add_eot_token_id(tok.special_ids[corpus.IM_END])
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(corpus.CHAT_TEMPLATE)
    for k, v in p.items():
        if v.ndim == 2:
            w.add_tensor(k, v.astype(np.float16),
                         raw_dtype=GGMLQuantizationType.F16)
        else:
            w.add_tensor(k, v.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    a = ARGS
    t0 = time.time()
    docs = corpus.documents(a.seed, a.docs)
    tok = bpe.train(docs[:5000], a.vocab, corpus.SPECIALS)
    n_valid = a.docs // 20
    train_s, train_at = pack(tok, docs[n_valid:])
    valid_s, valid_at = pack(tok, docs[:n_valid])
    log("corpus: %d documents, %d training tokens, vocabulary %d "
        "(%.1f s)" % (a.docs, len(train_s), tok.n_vocab, time.time() - t0))

    cfg = llama.Config(tok.n_vocab, a.dim, a.layers, a.heads, a.ffn, a.ctx)
    rng = np.random.default_rng(a.seed)
    p = llama.init(cfg, rng)
    log("model: %d parameters" % sum(v.size for v in p.values()))
    opt = llama.AdamW(p)
    warm = max(1, a.steps // 20)
    t1 = time.time()
    avg = None
    for step in range(a.steps):
        if step < warm:
            lr = a.lr * (step + 1) / warm
        else:
            c = (step - warm) / max(1, a.steps - warm)
            lr = a.lr * (0.1 + 0.45 * (1 + np.cos(np.pi * c)))
        b = rows(train_s, train_at, rng, a.batch, a.ctx)
        loss, g = llama.loss_and_grad(cfg, p, b[:, :-1], b[:, 1:])
        llama.clip(g, 1.0)
        opt.step(p, g, lr)
        avg = loss if avg is None else 0.95 * avg + 0.05 * loss
        if step % 25 == 0 or step == a.steps - 1:
            log("step %4d  loss %.3f  (avg %.3f)  lr %.2e  %.0f s"
                % (step, loss, avg, lr, time.time() - t1))

    vrng = np.random.default_rng(0)
    vl = []
    for _ in range(4):
        b = rows(valid_s, valid_at, vrng, a.batch, a.ctx)
        vl.append(llama.loss_and_grad(cfg, p, b[:, :-1], b[:, 1:])[0])
    log("held-out loss %.3f after %d steps of %d x %d tokens; training "
        "%.0f s, all %.0f s" % (float(np.mean(vl)), a.steps, a.batch,
                                a.ctx, time.time() - t1, time.time() - t0))
    write(a.out, cfg, tok, p, a.seed)
    log("wrote %s (%d bytes)" % (a.out, os.path.getsize(a.out)))


if __name__ == "__main__":
    main()
