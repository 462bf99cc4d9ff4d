"""
test_stories: the committed default model, conf/models/kvserve-stories.gguf
(made by `make model`, t/train/train.py), against the trainer's own code:

  - it loads in kvserve (`kvserve info`) and is under 5 MB;
  - the tokenizer read back from the file is the trainer's layout, and
    kvserve's tokenizer (`kvserve tokenize`) gives the Python encoder's ids
    on corpus text of another seed, with and without special tokens;
  - kvserve's chat template rendering (`kvserve chat-template`) is the
    text the chat documents were trained on;
  - `kvserve logits` equals the trainer's numpy forward (llama.py, in
    float64 on the file's weights) within 1e-4 at every position;
  - greedy generation (`kvserve generate --temp 0`) gives the numpy greedy
    text for a story prompt and several chat prompts;
  - the greedy answers end by <|im_end|>, not by the length limit, with a
    sentence's end, and every word in them is a word of the corpus (a
    random model fails this).

With --server (make sdk): nginx with the module serves the file, and a
chat request with temperature 0 answers the numpy greedy text with
finish_reason "stop", words of the corpus only.

Environment: KVS_CLI, KVS_STORIES (default the committed file), and for
--server those of test_openai_sdk.py (KVS_NGINX, KVS_MODULE, KVS_TMP).
A few seconds; exits non-zero on any failure.
"""

import json
import os
import re
import subprocess
import sys
import urllib.request

import numpy as np
from gguf import GGUFReader

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "unit"))
import bpe  # noqa: E402
import corpus  # noqa: E402
import llama  # noqa: E402
from kvs_check import ROOT, check, report  # noqa: E402

CLI = os.environ.get("KVS_CLI", os.path.join(ROOT, "build", "kvserve"))
MODEL = os.path.abspath(os.environ.get("KVS_STORIES", os.path.join(
    ROOT, "conf", "models", "kvserve-stories.gguf")))
TOL = 1e-4
N_NEW = 160
QUESTIONS = ["Tell me a story about a cat.", "Hello!", "What is your name?",
             "What does a cow say?", "Can a fish swim?"]


def read(path):
    """Config, float64 weights, tokenizer and metadata of the file."""
    r = GGUFReader(path)
    meta = {k: f.contents() for k, f in r.fields.items()
            if not k.startswith("GGUF.")}
    p = {t.name: np.asarray(t.data, np.float64).reshape(
        [int(n) for n in t.shape][::-1]) for t in r.tensors}
    a = "llama."
    cfg = llama.Config(meta[a + "vocab_size"], meta[a + "embedding_length"],
                       meta[a + "block_count"],
                       meta[a + "attention.head_count"],
                       meta[a + "feed_forward_length"],
                       meta[a + "context_length"],
                       meta[a + "attention.layer_norm_rms_epsilon"],
                       meta[a + "rope.freq_base"])
    back = {c: b for b, c in bpe.byte_alphabet().items()}
    merges = [tuple(bytes(back[c] for c in side) for side in m.split(" "))
              for m in meta["tokenizer.ggml.merges"]]
    types = meta["tokenizer.ggml.token_type"]
    toks = meta["tokenizer.ggml.tokens"]
    tok = bpe.Tokenizer(merges, [t for t, k in zip(toks, types) if k == 3])
    check(tok.gguf_tokens() == toks, "the file's tokens are the layout of "
          "bpe.Tokenizer (bytes, merges, specials)")
    return cfg, p, tok, meta


def cli(*args, stdin=None):
    r = subprocess.run([CLI, *args], input=stdin, capture_output=True)
    if r.returncode != 0:
        print("kvserve %s: exit %d: %s" % (args[0], r.returncode,
                                           r.stderr.decode()))
    return r


def greedy(cfg, p, tok, ids):
    """Numpy greedy continuation of ids: the new ids (without the
    stopping one), whether an end token stopped it, the smallest gap
    between the best and second logit."""
    stop = {tok.special_ids[corpus.BOS], tok.special_ids[corpus.IM_END]}
    ids, new, gap = list(ids), [], np.inf
    while len(new) < N_NEW and len(ids) < cfg.n_ctx:
        row = llama.forward(cfg, p, np.array([ids]))[0, -1]
        best = int(np.argmax(row))
        gap = min(gap, row[best] - np.partition(row, -2)[-2])
        if best in stop:
            return new, True, gap
        ids.append(best)
        new.append(best)
    return new, False, gap


def chat_prompt(question):
    return "%suser\n%s%s\n%sassistant\n" % (corpus.IM_START, question,
                                           corpus.IM_END, corpus.IM_START)


def good_answer(text, vocab, ended, what):
    bad = sorted(set(re.findall(r"[A-Za-z]+", text)) - vocab)
    check(ended, "%s: ended by an end token, not after %d tokens"
          % (what, N_NEW))
    check(not bad, "%s: every word is a corpus word (not: %s)" % (what, bad))
    check(re.search(r"[.!?]\"?$", text) is not None and len(text) > 4,
          "%s: ends a sentence: %r" % (what, text))


def cli_checks(cfg, p, tok, meta, vocab):
    size = os.path.getsize(MODEL)
    check(cli("info", MODEL).returncode == 0 and size < 5 << 20,
          "kvserve info loads the model (%d bytes, < 5 MB)" % size)

    # the tokenizer on corpus text the tokenizer was not trained on
    text = corpus.BOS.join(corpus.documents(meta["kvserve.train.seed"] + 1,
                                            300))
    for flags, special in (([], False), (["--special"], True)):
        r = cli("tokenize", *flags, MODEL, stdin=text.encode())
        got = [int(t) for t in r.stdout.split()]
        ref = tok.encode(text, special=special)
        check(got == ref, "kvserve tokenize %s: the Python encoder's %d ids "
              "(got %d)" % (" ".join(flags), len(ref), len(got)))

    # the template as kvserve renders it is the trained chat format
    msgs = [{"role": "system", "content": corpus.SYSTEMS[0]},
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How can I help you "
             "today?"}, {"role": "user", "content": QUESTIONS[0]}]
    r = cli("chat-template", MODEL, stdin=json.dumps(msgs).encode())
    want = "".join("%s%s\n%s%s\n" % (corpus.IM_START, m["role"],
                                     m["content"], corpus.IM_END)
                   for m in msgs) + corpus.IM_START + "assistant\n"
    check(r.stdout.decode() == want, "kvserve chat-template renders the "
          "trained ChatML: %r" % r.stdout.decode()[-60:])

    # logits at every position of a chat and the start of an answer
    ids = tok.encode(chat_prompt(QUESTIONS[0]) + "Once upon a time, there "
                     "was a little cat named Tom. Tom liked to")
    ref = llama.forward(cfg, p, np.array([ids]))[0]
    r = cli("logits", MODEL, "-t", " ".join(map(str, ids)))
    ours = np.frombuffer(r.stdout, "<f4").astype(np.float64)
    ok = ours.size == ref.size
    err = np.max(np.abs(ours.reshape(ref.shape) - ref), 1) / \
        np.max(np.abs(ref), 1) if ok else [np.inf]
    check(ok and max(err) < TOL, "kvserve logits = numpy forward at %d "
          "positions: worst %.2e" % (len(ids), max(err)))

    # greedy text, story and chats
    prompts = [("story", "Once upon a time")] + \
        [(q, chat_prompt(q)) for q in QUESTIONS]
    for what, prompt in prompts:
        new, ended, gap = greedy(cfg, p, tok, tok.encode(prompt))
        r = cli("generate", MODEL, "--special", "--temp", "0", "-n",
                str(N_NEW), "-p", prompt)
        got = r.stdout.decode()
        want = prompt + tok.decode(new)
        check(got == want, "%s: kvserve generate --temp 0 = numpy greedy "
              "(smallest top-2 gap %.3g)\n  ours:  %r\n  numpy: %r"
              % (what, gap, got[len(prompt):], want[len(prompt):]))
        if what != "story":
            good_answer(tok.decode(new), vocab, ended, what)
        print("%s -> %s" % (what, tok.decode(new)))


def server_check(cfg, p, tok, vocab):
    from test_openai_sdk import Nginx
    n = Nginx([("kvserve-stories", MODEL)])
    ok = False
    n.start()
    try:
        q = QUESTIONS[0]
        body = json.dumps({"model": "kvserve-stories", "temperature": 0,
                           "max_tokens": N_NEW,
                           "messages": [{"role": "user", "content": q}]})
        req = urllib.request.Request(n.base + "/v1/chat/completions",
                                     body.encode(), {"Content-Type":
                                                     "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            ans = json.loads(r.read())["choices"][0]
        text = ans["message"]["content"]
        new, ended, _ = greedy(cfg, p, tok, tok.encode(chat_prompt(q)))
        check(text == tok.decode(new), "nginx chat, temperature 0: the "
              "numpy greedy answer\n  nginx: %r\n  numpy: %r"
              % (text, tok.decode(new)))
        check(ans["finish_reason"] == "stop", "finish_reason stop, not %r"
              % ans["finish_reason"])
        good_answer(text, vocab, ended, "nginx chat")
        print("nginx: %s -> %s" % (q, text))
        ok = True
    finally:
        n.stop(ok)


def main():
    cfg, p, tok, meta = read(MODEL)
    vocab = corpus.words(corpus.documents(meta["kvserve.train.seed"], 5000))
    if "--server" in sys.argv[1:]:
        server_check(cfg, p, tok, vocab)
    else:
        cli_checks(cfg, p, tok, meta, vocab)
    return report("test_stories" + (" --server" if "--server" in sys.argv
                                    else ""))


if __name__ == "__main__":
    sys.exit(main())
