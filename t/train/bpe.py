"""
bpe: a byte-level BPE tokenizer (GPT-2's scheme, what GGUF calls
tokenizer.ggml.model "gpt2" with tokenizer.ggml.pre "gpt-2"): training
on a corpus, encoding, decoding, and the token texts as GGUF stores them.

Vocabulary layout, fixed: ids 0..255 are the single bytes (in byte
order), then the result of each merge in merge order (unless an earlier
merge made the same bytes), then the special tokens.  So every text
encodes and no unknown token is needed.

Encoding, as kvserve's tokenizer does it (docs/tokenizer.md): special
tokens are cut out first (leftmost, longest); each fragment between them
is cut into pieces by GPT-2's pre-tokenizer expression; each piece is
merged from single bytes, always the pair of lowest rank, leftmost on
ties.  Here the expression is written for ASCII text only (letters
[A-Za-z], digits [0-9]), which is all the corpus holds; encode() refuses
anything else rather than guess what \\p{L} would say.

Training: count the pieces of the corpus, then repeatedly merge the most
frequent adjacent pair (ties: the smallest pair of byte strings), until
the vocabulary has its size.  Deterministic: no hashing order is used.
"""

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "bench"))
from tok_peer import bytes_to_unicode  # noqa: E402

# GPT-2's pre-tokenizer with ASCII classes for \p{L} and \p{N}
PIECE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+"
                   r"| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def byte_alphabet():
    """GPT-2's map from bytes to printable characters (how byte-level
    token texts are written in GGUF and tokenizer.json): the table of
    t/bench/tok_peer.py."""
    return bytes_to_unicode()


class Tokenizer:
    def __init__(self, merges, specials):
        """merges: list of (left bytes, right bytes) in rank order."""
        self.merges = list(merges)
        self.specials = list(specials)
        self.tokens = [bytes([b]) for b in range(256)]
        self.rank = {}
        for i, (a, b) in enumerate(self.merges):
            self.rank[(a, b)] = i
            if a + b not in self.tokens[256:]:
                self.tokens.append(a + b)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.special_ids = {s: len(self.tokens) + i
                            for i, s in enumerate(self.specials)}
        self.cache = {}
        alt = "|".join(re.escape(s) for s in sorted(self.specials, key=len,
                                                    reverse=True))
        self.split_special = re.compile("(%s)" % alt)

    @property
    def n_vocab(self):
        return len(self.tokens) + len(self.specials)

    def piece(self, p):
        """Ids of one pre-token (bytes), merged by lowest rank."""
        ids = self.cache.get(p)
        if ids is not None:
            return ids
        parts = [bytes([c]) for c in p]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = self.rank.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        ids = [self.ids[x] for x in parts]
        self.cache[p] = ids
        return ids

    def encode(self, text, special=True):
        """Ids of text; special: control-token text becomes its token."""
        if not text.isascii():
            raise ValueError("this encoder knows ASCII text only")
        out = []
        frags = self.split_special.split(text) if special else [text]
        for frag in frags:
            if frag in self.special_ids:
                out.append(self.special_ids[frag])
                continue
            for m in PIECE.finditer(frag):
                out.extend(self.piece(m.group().encode()))
        return out

    def decode(self, ids):
        rev = {v: k for k, v in self.special_ids.items()}
        return b"".join(rev[i].encode() if i in rev else self.tokens[i]
                        for i in ids).decode("utf-8", "replace")

    def gguf_tokens(self):
        """Token texts as GGUF stores them: GPT-2's alphabet for bytes,
        the specials as written."""
        alpha = byte_alphabet()
        return (["".join(alpha[c] for c in t) for t in self.tokens]
                + self.specials)

    def gguf_merges(self):
        alpha = byte_alphabet()
        return ["%s %s" % ("".join(alpha[c] for c in a),
                           "".join(alpha[c] for c in b))
                for a, b in self.merges]


def train(texts, n_vocab, specials):
    """A tokenizer of n_vocab tokens (256 bytes + merges + specials)
    learnt from texts (special-token text is cut out, not learnt)."""
    n_tokens = n_vocab - len(specials)
    alt = re.compile("|".join(re.escape(s) for s in specials))
    counts = {}
    for t in texts:
        for frag in alt.split(t):
            for m in PIECE.finditer(frag):
                p = m.group().encode()
                counts[p] = counts.get(p, 0) + 1
    # each distinct piece as a list of symbols, with its count
    words = [[bytes([c]) for c in p] for p in sorted(counts)]
    freq = [counts[p] for p in sorted(counts)]
    merges, made = [], set()
    while 256 + len(made) < n_tokens:
        pairs = {}
        for w, f in zip(words, freq):
            for i in range(len(w) - 1):
                k = (w[i], w[i + 1])
                pairs[k] = pairs.get(k, 0) + f
        if not pairs:
            break
        best = min(pairs, key=lambda k: (-pairs[k], k))
        merges.append(best)
        made.add(best[0] + best[1])
        a, b = best
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    return Tokenizer(merges, specials)
