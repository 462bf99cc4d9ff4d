#!/usr/bin/env python3
"""The peers for bench_tok: Hugging Face `tokenizers` and `tiktoken`, each
built from the same GGUF vocabulary that our tokenizer loads, timed on the
same corpus with the same segmentation, single-threaded.

Nothing is downloaded: the Hugging Face tokenizer is assembled from the
GGUF's tokens, merges (byte-level BPE) or scores (SentencePiece), and the
tiktoken Encoding from the GGUF's tokens as byte strings -> rank.

Before timing, each peer must reproduce the fixture .out ids of the 46
cases (--cases X.inp X.out); a peer that does not is a broken peer, and
the run fails (exit 2) rather than comparing against it.

usage:
  tok_peer.py [-n REPS] [--chunk BYTES] [--cold] [--cases INP OUT]
              [--hf-ids F] [--tiktoken] [--tt-ids F] vocab.gguf corpus.txt
  tok_peer.py --worst [-n REPS] [--tiktoken] vocab.gguf
  tok_peer.py --diff OURS.bin PEER.bin --bench-tok PATH [--peer hf|tiktoken]
              [--chunk BYTES] vocab.gguf corpus.txt

Prints one line per peer:
  <peer> <MB/s> <tokens/s> <tokens> <best seconds>
MB is 10^6 bytes.  The ids files are little-endian int32, the
concatenation over all chunks.

--diff prints "ids: identical (N tokens)", or the first differing token
and then the smallest input found (by delta debugging, running our
bench_tok on candidate inputs) on which our ids and the peer's differ;
it exits 1 on a difference.

Segmentation: --chunk 0 (default) encodes the corpus as one string; with
--chunk N the corpus is cut exactly as bench_tok cuts it (after the last
'\\n' in the next N bytes, else at the last UTF-8 boundary), and each chunk
is one encode() call.  Batch APIs are not used: RAYON_NUM_THREADS=1 and
TOKENIZERS_PARALLELISM=false are set before the import.

Special tokens: Hugging Face encode(add_special_tokens=False) with
control tokens not registered as added tokens, so their text is plain
text (the fixtures' convention, and our KVS_TOK_SPECIAL off); user-defined
tokens are registered, because our tokenizer and llama.cpp always match
them.  tiktoken: encode_to_numpy(disallowed_special=()), which gives
encode_ordinary's ids.
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["RAYON_RS_NUM_CPUS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import array  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from gguf import GGUFReader  # noqa: E402

# tokenizer.ggml.token_type
T_NORMAL, T_UNKNOWN, T_CONTROL, T_USER, T_UNUSED, T_BYTE = 1, 2, 3, 4, 5, 6

# The pre-tokenizers by tokenizer.ggml.pre, built from tokenizers' own
# components the way each model's tokenizer.json composes them (not from
# our kvs_pretok.c, so that the peer is an independent oracle): Split
# steps with behaviour "isolated" keep matches and gaps as pieces.
_GPT2 = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+"
         r"| ?[^\s\p{L}\p{N}]+|\s+(?!\S)")
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
           r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
          r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DS_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
# step: ("split", regex) | ("bytelevel", use_regex) | ("digits", individual)
#       | ("punct",)
PRE = {
    "gpt-2": [("bytelevel", True)],
    "default": [("bytelevel", True)],
    "gpt-neox": [("bytelevel", True)],
    "mpt": [("bytelevel", True)],
    "olmo": [("bytelevel", True)],
    "llama-bpe": [("split", _LLAMA3), ("bytelevel", False)],
    "qwen2": [("split", _QWEN2), ("bytelevel", False)],
    "deepseek-r1-qwen": [("split", _QWEN2), ("bytelevel", False)],
    "starcoder": [("digits", True), ("bytelevel", True)],
    "refact": [("digits", True), ("bytelevel", True)],
    "smollm": [("digits", True), ("bytelevel", True)],
    "falcon": [("punct",), ("bytelevel", True), ("digits", False),
               ("split", r"[0-9][0-9][0-9]")],
    "deepseek-coder": [("split", r"[\r\n]"), ("split", r"\s?\p{L}+"),
                       ("split", r"\s?\p{P}+"), ("split", _DS_CJK),
                       ("digits", True), ("bytelevel", False)],
}
# The Llama 3 pattern, as tiktoken spells it (Meta ships Llama 3 as a
# tiktoken Encoding); GPT-2's is _GPT2 with a final \s+ so that every
# byte is covered (encode_ordinary drops text no alternative matches).
TT_PAT = {
    "gpt-2": _GPT2 + r"|\s+",
    "llama-bpe": _LLAMA3,
}
# The pre names that NFC-normalise first.
NFC = {"qwen2", "deepseek-r1-qwen"}


def bytes_to_unicode():
    """GPT-2's byte -> printable code point table."""
    keep = (list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD))
            + list(range(0xAE, 0x100)))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Vocab:
    """The tokenizer.* keys of a GGUF file, as Python values."""

    def __init__(self, path):
        r = GGUFReader(path)
        f = r.fields

        def strs(key):
            x = f[key]
            return [bytes(x.parts[i]).decode("utf-8") for i in x.data]

        def nums(key):
            x = f[key]
            return [x.parts[i][0].item() for i in x.data]

        def scalar(key, default=None):
            if key not in f:
                return default
            x = f[key]
            v = x.parts[x.data[0]]
            if x.types[0].name == "STRING":
                return bytes(v).decode("utf-8")
            return v[0].item()

        self.model = scalar("tokenizer.ggml.model")
        self.pre = scalar("tokenizer.ggml.pre", "default")
        self.tokens = strs("tokenizer.ggml.tokens")
        n = len(self.tokens)
        self.types = (nums("tokenizer.ggml.token_type")
                      if "tokenizer.ggml.token_type" in f else [T_NORMAL] * n)
        self.scores = (nums("tokenizer.ggml.scores")
                       if "tokenizer.ggml.scores" in f else [0.0] * n)
        self.merges = (strs("tokenizer.ggml.merges")
                       if "tokenizer.ggml.merges" in f else [])
        self.unk = scalar("tokenizer.ggml.unknown_token_id")
        self.add_space_prefix = scalar("tokenizer.ggml.add_space_prefix",
                                       True)


def build_hf(v):
    """A tokenizers.Tokenizer equivalent to the GGUF vocabulary."""
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,
                            normalizers, pre_tokenizers)

    vocab = {t: i for i, t in enumerate(v.tokens)}
    if len(vocab) != len(v.tokens):
        raise SystemExit("tok_peer: duplicate token texts in the GGUF")

    if v.model == "gpt2":
        if v.pre not in PRE:
            raise SystemExit("tok_peer: no regexes for pre '%s'" % v.pre)
        merges = [tuple(m.split(" ")) for m in v.merges]
        bad = [m for m in merges if len(m) != 2]
        if bad:
            raise SystemExit("tok_peer: merge %r is not 'a b'" % (bad[0],))
        model = models.BPE(vocab, merges, fuse_unk=False,
                           ignore_merges=(v.pre == "llama-bpe"))
        tok = Tokenizer(model)
        if v.pre in NFC:
            tok.normalizer = normalizers.NFC()
        steps = []
        for st in PRE[v.pre]:
            if st[0] == "split":
                steps.append(pre_tokenizers.Split(Regex(st[1]),
                                                  behavior="isolated"))
            elif st[0] == "bytelevel":
                steps.append(pre_tokenizers.ByteLevel(
                    add_prefix_space=False, use_regex=st[1]))
            elif st[0] == "digits":
                steps.append(pre_tokenizers.Digits(individual_digits=st[1]))
            else:
                steps.append(pre_tokenizers.Punctuation("contiguous"))
        tok.pre_tokenizer = (steps[0] if len(steps) == 1
                             else pre_tokenizers.Sequence(steps))
        tok.decoder = decoders.ByteLevel()

    elif v.model == "llama":
        # The Hugging Face Llama layout: BPE with byte fallback, the merges
        # implied by the scores (every split of a token into two tokens,
        # the higher the merged token's score the earlier), "▁" for spaces
        # and one prepended.
        normal = {t: i for i, t in enumerate(v.tokens)
                  if v.types[i] == T_NORMAL}
        ranked = []
        for t, i in normal.items():
            for k in range(1, len(t)):
                a, b = normal.get(t[:k]), normal.get(t[k:])
                if a is not None and b is not None:
                    ranked.append((-v.scores[i], i, a, b, t[:k], t[k:]))
        ranked.sort()
        merges = [(r[4], r[5]) for r in ranked]
        unk = v.tokens[v.unk] if v.unk is not None else "<unk>"
        model = models.BPE(vocab, merges, unk_token=unk, fuse_unk=True,
                           byte_fallback=True)
        tok = Tokenizer(model)
        seq = [normalizers.Replace(" ", "\u2581")]
        if v.add_space_prefix:
            seq.insert(0, normalizers.Prepend("\u2581"))
        tok.normalizer = normalizers.Sequence(seq)
        tok.decoder = decoders.Sequence([
            decoders.Replace("\u2581", " "), decoders.ByteFallback(),
            decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    elif v.model == "bert":
        # WordPiece as BertTokenizerFast does it for an uncased vocabulary.
        # The GGUF stores word-initial pieces as "▁piece" and continuations
        # bare; Hugging Face's model wants "piece" and "##piece".
        wp = {}
        for i, t in enumerate(v.tokens):
            if v.types[i] != T_NORMAL:
                s = t
            elif t.startswith("\u2581"):
                s = t[1:]
            else:
                s = "##" + t
            wp.setdefault(s, i)
        model = models.WordPiece(wp, unk_token=v.tokens[v.unk],
                                 max_input_chars_per_word=100)
        tok = Tokenizer(model)
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None,
            lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
    else:
        raise SystemExit("tok_peer: tokenizer.ggml.model '%s' not handled"
                         % v.model)

    user = [AddedToken(t, special=False, normalized=False)
            for t, ty in zip(v.tokens, v.types) if ty == T_USER]
    if user:
        tok.add_tokens(user)
    return tok


def build_tiktoken(v):
    """A tiktoken.Encoding from a byte-level GGUF: token bytes -> id as
    the rank (for GPT-2 and Llama 3 the id order is the merge order)."""
    import tiktoken

    if v.model != "gpt2" or v.pre not in TT_PAT:
        return None
    inv = {c: b for b, c in bytes_to_unicode().items()}
    ranks, special = {}, {}
    for i, (t, ty) in enumerate(zip(v.tokens, v.types)):
        if ty in (T_NORMAL, T_BYTE):
            ranks[bytes(inv[c] for c in t)] = i
        elif ty == T_CONTROL:
            special[t] = i
    return tiktoken.Encoding("gguf-" + v.pre, pat_str=TT_PAT[v.pre],
                             mergeable_ranks=ranks, special_tokens=special)


def read_cases(inp, out):
    sep = "\n__ggml_vocab_test__\n"
    with open(inp, encoding="utf-8", newline="") as f:
        texts = f.read().split(sep)
    if texts and texts[-1] == "":
        texts.pop()
    with open(out) as f:
        ids = [[int(x) for x in line.split()] for line in f]
    if len(texts) != len(ids):
        raise SystemExit("tok_peer: %s has %d cases, %s %d lines"
                         % (inp, len(texts), out, len(ids)))
    return texts, ids


def check_cases(name, encode, texts, want, outname):
    for k, (t, w) in enumerate(zip(texts, want)):
        got = encode(t)
        if got != w:
            print("tok_peer: %s FAILS case %d of %s: %r\n  want %s\n  got  %s"
                  % (name, k, outname, t, w, got), file=sys.stderr)
            sys.exit(2)
    print("check %s reproduces all %d cases of %s"
          % (name, len(texts), outname))


def chunks(data, n):
    """Cut bytes as bench_tok does: after the last newline in the next n
    bytes, else at the last UTF-8 character boundary; n == 0: one chunk."""
    if n <= 0:
        return [data]
    out, i, total = [], 0, len(data)
    while i < total:
        end = i + n
        if end >= total:
            out.append(data[i:])
            break
        nl = data.rfind(b"\n", i, end)
        if nl >= 0:
            end = nl + 1
        else:
            while end > i and (data[end] & 0xC0) == 0x80:
                end -= 1
            if end == i:
                end = i + n
        out.append(data[i:end])
        i = end
    return out


def bench(name, encode, texts, nbytes, reps, before=None):
    best, ids = float("inf"), None
    for _ in range(reps):
        if before is not None:
            before()
        t0 = time.perf_counter()
        res = [encode(t) for t in texts]
        dt = time.perf_counter() - t0
        if dt < best:
            best, ids = dt, res
    return best, ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=0)
    ap.add_argument("--cold", action="store_true",
                    help="clear the HF BPE word cache before each rep")
    ap.add_argument("--cases", nargs=2, metavar=("INP", "OUT"))
    ap.add_argument("--hf-ids")
    ap.add_argument("--tiktoken", action="store_true")
    ap.add_argument("--tt-ids")
    ap.add_argument("--worst", action="store_true")
    ap.add_argument("--diff", nargs=2, metavar=("OURS", "PEER"))
    ap.add_argument("--bench-tok")
    ap.add_argument("--peer", default="hf")
    ap.add_argument("gguf")
    ap.add_argument("corpus", nargs="?")
    a = ap.parse_args()

    if a.diff and same_ids(*a.diff):
        return

    v = Vocab(a.gguf)
    hf = build_hf(v)
    tt = build_tiktoken(v) if a.tiktoken or a.peer == "tiktoken" else None

    def hf_enc(t):
        return hf.encode(t, add_special_tokens=False)

    peers = [("hf", hf_enc, lambda e: e.ids, a.hf_ids)]
    if tt is not None:
        # encode_to_numpy with no special token allowed or disallowed
        # gives encode_ordinary's ids without building a Python list of
        # ints, which is a tenth of tiktoken's time on this corpus
        def tt_enc(t):
            return tt.encode_to_numpy(t, disallowed_special=())
        if v.pre in NFC:
            raise SystemExit("tok_peer: tiktoken does not normalise")
        peers.append(("tiktoken", tt_enc, lambda e: e.tolist(), a.tt_ids))

    if a.cases:
        texts, want = read_cases(*a.cases)
        for name, enc, ids_of, _ in peers:
            check_cases(name, (lambda t, e=enc, f=ids_of: f(e(t))), texts,
                        want, os.path.basename(a.cases[1]))

    if a.worst:
        worst(peers, a.n)
        return

    if a.diff:
        enc = dict((p[0], (p[1], p[2])) for p in peers)[a.peer]
        sys.exit(diff(a, v, lambda t: list(enc[1](enc[0](t)))))

    with open(a.corpus, "rb") as f:
        data = f.read()
    texts = [c.decode("utf-8") for c in chunks(data, a.chunk)]

    for name, enc, ids_of, path in peers:
        before = None
        if name == "hf" and a.cold:
            before = hf.model._clear_cache
        best, res = bench(name, enc, texts, len(data), a.n, before)
        ids = array.array("i")
        for r in res:
            ids.extend(ids_of(r))
        if sys.byteorder != "little":
            ids.byteswap()
        if path:
            with open(path, "wb") as f:
                ids.tofile(f)
        print("%s %.2f %.0f %d %.6f" % (name, len(data) / best / 1e6,
                                        len(ids) / best, len(ids), best))


def read_ids(path):
    ids = array.array("i")
    with open(path, "rb") as f:
        ids.frombytes(f.read())
    if sys.byteorder != "little":
        ids.byteswap()
    return ids.tolist()


def show(v, ids):
    """ids with their token texts (byte-level tokens as their bytes)."""
    inv = {c: b for b, c in bytes_to_unicode().items()}

    def text(i):
        if not 0 <= i < len(v.tokens):
            return "?"
        t = v.tokens[i]
        if v.model == "gpt2" and v.types[i] in (T_NORMAL, T_BYTE):
            return repr(bytes(inv[c] for c in t))
        return repr(t)

    return " ".join("%d:%s" % (i, text(i)) for i in ids)


def ours_ids(bench_tok, gguf, text, tmp):
    """Our ids for text, by running bench_tok on it as the corpus."""
    import subprocess

    with open(tmp + ".txt", "wb") as f:
        f.write(text.encode("utf-8"))
    subprocess.run([bench_tok, "-n", "1", "--ids", tmp + ".ids", gguf,
                    tmp + ".txt"], check=True, stdout=subprocess.DEVNULL)
    return read_ids(tmp + ".ids")


def same_ids(ours, theirs):
    """Prints "ids: identical" and returns True if the files are equal."""
    with open(ours, "rb") as f:
        x = f.read()
    with open(theirs, "rb") as f:
        if x != f.read():
            return False
    print("ids: identical (%d tokens)" % (len(x) // 4))
    return True


def diff(a, v, peer):
    import tempfile

    ours, theirs = read_ids(a.diff[0]), read_ids(a.diff[1])
    n = min(len(ours), len(theirs))
    d = next((i for i in range(n) if ours[i] != theirs[i]), n)
    if d == n and len(ours) == len(theirs):
        print("ids: identical (%d tokens)" % n)
        return 0

    print("ids: DIFFER from %s at token %d (ours %d tokens, %s %d)"
          % (a.peer, d, len(ours), a.peer, len(theirs)))
    lo = max(0, d - 3)
    print("  ours: ... %s" % show(v, ours[lo:d + 6]))
    print("  %s: ... %s" % (a.peer, show(v, theirs[lo:d + 6])))
    if not a.bench_tok:
        return 1

    # the chunk where the peer's ids reach token d
    with open(a.corpus, "rb") as f:
        texts = [c.decode("utf-8") for c in chunks(f.read(), a.chunk)]
    at = 0
    for text in texts:
        at += len(peer(text))
        if at > d:
            break

    tmp = os.path.join(tempfile.mkdtemp(prefix="tok_diff"), "case")

    def differs(t):
        return ours_ids(a.bench_tok, a.gguf, t, tmp) != peer(t)

    if not differs(text):
        print("  (the chunk alone encodes the same; no reproducer)")
        return 1
    text = shrink(text, differs)
    print("  smallest input found: %r" % text)
    print("  bytes: %s" % text.encode("utf-8").hex(" "))
    print("  ours: %s" % show(v, ours_ids(a.bench_tok, a.gguf, text, tmp)))
    print("  %s: %s" % (a.peer, show(v, peer(text))))
    return 1


def shrink(s, bad):
    """Delta debugging: a shorter s on which bad() still holds; by lines
    first, then by characters."""
    lines = s.splitlines(keepends=True)
    if len(lines) > 1:
        s = "".join(ddmin(lines, lambda ls: bad("".join(ls))))
    return "".join(ddmin(list(s), lambda cs: bad("".join(cs))))


def ddmin(items, bad):
    n = 2
    while len(items) >= 2:
        size = -(-len(items) // n)
        parts = [items[i:i + size] for i in range(0, len(items), size)]
        for i in range(len(parts)):
            rest = [x for j, p in enumerate(parts) if j != i for x in p]
            if rest and bad(rest):
                items = rest
                n = max(n - 1, 2)
                break
        else:
            if n >= len(items):
                break
            n = min(2 * n, len(items))
    return items


def worst_texts():
    """The pathological inputs, the same as bench_tok --worst: (name,
    function of a byte size giving the text)."""
    def letters(size):
        # the LCG bench_tok uses, so that both see the same letters
        x, out = 1, bytearray(size)
        for i in range(size):
            x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            out[i] = 0x61 + (x >> 33) % 26
        return out.decode("ascii")

    def rep(unit):
        return lambda size: unit * (size // len(unit.encode("utf-8")))

    return [("a", rep("a")), ("space", rep(" ")), ("digit", rep("1")),
            ("newline", rep("\n")), ("cjk", rep("\u4e2d")),
            ("emoji", rep("\U0001f999")), ("letters", letters)]


def worst(peers, reps):
    """Seconds for 1 MiB and 4 MiB of each pathological text, per peer;
    the 4 MiB run is skipped (-) when 1 MiB took over WORST_LIMIT s."""
    limit = float(os.environ.get("WORST_LIMIT", "5"))
    for kind, make in worst_texts():
        small, big = make(1 << 20), make(4 << 20)
        for name, enc, ids_of, _ in peers:
            try:
                t1, _ = bench(name, enc, [small], len(small), reps)
                t4 = None
                if t1 <= limit:
                    t4, _ = bench(name, enc, [big], len(big), reps)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:
                # tiktoken's regex engine runs out of backtracking stack
                # on long blank runs: a ValueError, or from encode_ordinary
                # a Rust panic (a BaseException)
                msg = (str(e).splitlines() or [type(e).__name__])[0]
                print("%s %s fails: %s" % (kind, name,
                                           msg.split(": ")[-1][:60]))
                continue
            if t4 is None:
                print("%s %s %.4f - -" % (kind, name, t1))
            else:
                print("%s %s %.4f %.4f %.2f" % (kind, name, t1, t4,
                                                 t4 / t1))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
