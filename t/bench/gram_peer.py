#!/usr/bin/env python3
"""The peers of bench_grammar (issue 21, point 4): xgrammar and llguidance
replay the token walks our bench_grammar recorded, on the same vocabulary
byte strings and the same schemas, and time each mask.

usage:
  gram_peer.py vocab-check VOCAB.gguf DUMP
      (build/venv: needs `gguf`) decodes every token of the GGUF on its own
      (GPT-2 byte-level or SentencePiece, as src/tokenizer/kvs_vocab.c and
      kvs_gram_vocab_from_vocab do) and compares it with DUMP, the bytes
      bench_grammar --vocab-out wrote; exit 1 on any difference.
  gram_peer.py run --vocab DUMP --walks WALKS --schemas SCHEMAS
               [--peers xgrammar,llguidance] --out RESULT.json
      (build/venv-gram) replays the walks through each peer.
  gram_peer.py table LABEL:WALKS:RESULT ...
      prints the comparison table from bench_grammar's walks files and the
      peers' results.

What each side is given: DUMP has, per token id, its kind (0 text,
1 END: EOS/EOT/EOM, 2 refused: control/unknown/unused/empty) and its
output bytes.  xgrammar gets a RAW vocabulary with END and refused tokens
as empty strings (its "special" tokens, never allowed by a JSON grammar)
and the END ids as stop tokens; llguidance gets the text bytes and END
and refused tokens as 0xFF-prefixed names (its special tokens), the END
ids as its EOS tokens.

The JSON layout is kvserve's (one space after ',' and ':', no other
whitespace), so the peers are configured alike: xgrammar
any_whitespace=False, separators (", ", ": "), strict_mode=False (plain
JSON Schema: our schemas say additionalProperties themselves);
llguidance whitespace_flexible false with the same separators, and
json_allow_general_unicode_escapes (\\uXXXX of any character, as ours).  The
json_object entry (schema null) is {"type": "object"} for the peers.

Timing: time.perf_counter_ns() (GRAM_CLOCK=thread: time.thread_time_ns(),
the thread's CPU time) around the one mask call of each step
(xgrammar GrammarMatcher.fill_next_token_bitmask into a preallocated
int32 bitmask; llguidance LLMatcher.unsafe_compute_mask_ptr into one),
so a Python call's overhead (measured and printed as "call overhead")
is inside the peers' figures and not inside ours.  Every walk is checked:
the token must be set in the peer's mask and accepted by its matcher; a
refused token stops that walk and is counted (the grammars differ there).

Compile, per schema: xgrammar, GrammarCompiler.compile_json_schema with
the compiler's cache off (median of 3 fresh compilers; this includes its
per-vocabulary token mask precomputation), and with the cache on, a
repeated compile (a cache hit); llguidance, the LLMatcher constructor
(grammar_from_json_schema + parser build; its token-level work is lazy,
done in the masks), the median over the walks, and the first.
"""
import os

# one thread everywhere: the development machine has 2 shared cores
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

TEXT, END, REFUSED = 0, 1, 2

# the layout kvserve writes
SEPS = (", ", ": ")


def load_dump(path):
    """The token kinds and byte strings of bench_grammar --vocab-out."""
    kinds, texts = [], []
    with open(path) as f:
        for line in f:
            k, _, h = line.rstrip("\n").partition(" ")
            kinds.append(int(k))
            texts.append(bytes.fromhex(h))
    return kinds, texts


# ---- vocab-check --------------------------------------------------------

def gpt2_byte_decoder():
    """GPT-2's byte-level map: printable bytes stand for themselves, the
    others are shifted to code points 256 and up, in byte order."""
    keep = (list(range(ord("!"), ord("~") + 1))
            + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1)))
    dec, n = {}, 0
    for b in range(256):
        if b in keep:
            dec[chr(b)] = b
        else:
            dec[chr(256 + n)] = b
            n += 1
    return dec


def grammar_markers():
    """The control tokens the grammar takes as text (kvs_gram_markers in
    src/grammar/kvs_gram_vocab.c, read from there so that the two never
    disagree)."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "..", "src", "grammar", "kvs_gram_vocab.c")
    text = open(src, encoding="utf-8").read()
    body = text[text.index("kvs_gram_markers[] = {"):]
    body = body[:body.index("};")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return {m.encode() for m in re.findall(r'"([^"]*)"', body)}


def vocab_check(gguf_path, dump_path):
    from gguf import GGUFReader

    r = GGUFReader(gguf_path)

    def field(name):
        f = r.fields.get(name)
        if f is None:
            return None
        if len(f.types) and f.types[0].name == "ARRAY":
            return [f.parts[i] for i in f.data]
        return f.parts[f.data[0]]

    model = bytes(field("tokenizer.ggml.model")).decode()
    toks = [bytes(t) for t in field("tokenizer.ggml.tokens")]
    types = [int(t[0]) for t in field("tokenizer.ggml.token_type")]
    ends = set()
    for key in ("eos", "eot", "eom"):
        v = field("tokenizer.ggml.%s_token_id" % key)
        if v is not None:
            ends.add(int(v[0]))
    if not any(k == "tokenizer.ggml.eot_token_id" for k in r.fields):
        # kvs_vocab.c recognises the usual end-of-turn control tokens
        for t in (b"<|eot_id|>", b"<|im_end|>", b"<|end|>",
                  b"<end_of_turn>", b"<|end_of_turn|>"):
            if t in toks and types[toks.index(t)] == 3:
                ends.add(toks.index(t))
                break

    markers = grammar_markers()
    dec = gpt2_byte_decoder()
    want_k, want_t = [], []
    for i, (t, ty) in enumerate(zip(toks, types)):
        if i in ends:
            want_k.append(END)
            want_t.append(b"")
            continue
        if ty == 3 and t in markers:  # a tool-call marker: its text
            want_k.append(TEXT)
            want_t.append(t)
            continue
        if ty in (2, 3, 5):  # unknown, control, unused
            want_k.append(REFUSED)
            want_t.append(b"")
            continue
        if ty == 6 and model == "llama":  # <0xNN>
            want_k.append(TEXT)
            want_t.append(bytes([int(t[3:5], 16)]))
            continue
        if model == "gpt2" and ty != 4:
            s = t.decode("utf-8")
            if all(c in dec for c in s):
                t = bytes(dec[c] for c in s)
        elif model == "llama":
            t = t.replace("\u2581".encode(), b" ")
        want_k.append(TEXT if t else REFUSED)
        want_t.append(t)

    kinds, texts = load_dump(dump_path)
    if len(kinds) != len(want_k):
        print("vocab-check: %d tokens in the dump, %d in the GGUF"
              % (len(kinds), len(want_k)))
        return 1
    bad = [i for i in range(len(kinds))
           if kinds[i] != want_k[i] or (kinds[i] == TEXT
                                        and texts[i] != want_t[i])]
    for i in bad[:10]:
        print("  token %d: ours %d %r, gguf %d %r"
              % (i, kinds[i], texts[i], want_k[i], want_t[i]))
    print("vocab-check %s: %d tokens (%d text, %d END, %d refused), "
          "%d differ" % (os.path.basename(gguf_path), len(kinds),
                         kinds.count(TEXT), kinds.count(END),
                         kinds.count(REFUSED), len(bad)))
    return 1 if bad else 0


# ---- run ----------------------------------------------------------------

def load_walks(path):
    """bench_grammar --walks: one JSON object a line (vocab, schema, walk)."""
    schemas, walks = {}, []
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if o["type"] == "schema":
                schemas[o["schema"]] = o
            elif o["type"] == "warm":
                # the table warmed at compile is part of our compile
                # (kvs_gram_masker_warm), as a peer's precompute is of its
                s = schemas[o["schema"]]
                s["compile_alone_ms"] = s["compile_ms"]
                s["warm_ms"] = o["warm_ms"]
                s["compile_ms"] += o["warm_ms"]
                if "compile_first_ms" in s:
                    s["compile_first_ms"] += o["warm_ms"]
            elif o["type"] == "walk":
                walks.append(o)
    return schemas, walks


def load_replays(path):
    """bench_grammar --replay: each walk's masks timed again the way the
    peers are (a fresh matcher and freshly warmed table, mask, popcount,
    accept), one "replay" line a walk."""
    with open(path) as f:
        return [o for o in map(json.loads, f) if o["type"] == "replay"]


def peer_schema(entry):
    return entry["schema"] if entry["schema"] is not None else {
        "type": "object"}


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# GRAM_CLOCK=thread: the thread's CPU time (bench_grammar reads the same
# variable), which a loaded machine's preemptions do not inflate
NS_NOW = (time.thread_time_ns if os.environ.get("GRAM_CLOCK") == "thread"
          else time.perf_counter_ns)


def ns_now():
    return NS_NOW()


class XGrammarPeer:
    name = "xgrammar"

    def __init__(self, kinds, texts):
        import torch
        import xgrammar as xgr

        torch.set_num_threads(1)
        self.xgr = xgr
        vocab = [t if k == TEXT else b"" for k, t in zip(kinds, texts)]
        stops = [i for i, k in enumerate(kinds) if k == END]
        t0 = ns_now()
        self.info = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW,
                                      vocab_size=len(vocab),
                                      stop_token_ids=stops)
        self.vocab_ms = (ns_now() - t0) / 1e6
        self.bitmask = xgr.allocate_token_bitmask(1, len(vocab))
        self.cached = xgr.GrammarCompiler(self.info, max_threads=1,
                                          cache_enabled=True)

    def _compile(self, comp, schema):
        return comp.compile_json_schema(json.dumps(schema),
                                        any_whitespace=False,
                                        separators=SEPS, strict_mode=False)

    def compile(self, schema):
        """(cold ms median of 3, cache-hit ms, compiled grammar)."""
        cold = []
        for _ in range(3):
            comp = self.xgr.GrammarCompiler(self.info, max_threads=1,
                                            cache_enabled=False)
            t0 = ns_now()
            g = self._compile(comp, schema)
            cold.append((ns_now() - t0) / 1e6)
        self._compile(self.cached, schema)
        t0 = ns_now()
        g = self._compile(self.cached, schema)
        hit = (ns_now() - t0) / 1e6
        return median(cold), hit, g

    def start(self, g):
        return self.xgr.GrammarMatcher(g)

    def mask(self, m):
        bm = self.bitmask
        t0 = ns_now()
        m.fill_next_token_bitmask(bm)
        t = ns_now() - t0
        return t, bm

    def allowed(self, bm, tok):
        return int(bm[0, tok >> 5]) >> (tok & 31) & 1

    def accept(self, m, tok):
        return m.accept_token(tok)

    def count(self, bm, n):
        return popcount(bm[0].numpy(), n)

    def overhead(self, m):
        t0 = ns_now()
        m.is_terminated()
        return ns_now() - t0


class LLGuidancePeer:
    name = "llguidance"

    def __init__(self, kinds, texts):
        import llguidance as llg
        import numpy as np

        self.llg, self.np = llg, np
        toks = []
        for i, (k, t) in enumerate(zip(kinds, texts)):
            if k == TEXT:
                toks.append(t)
            else:
                toks.append(b"\xff<%s_%d>" % (b"end" if k == END
                                              else b"special", i))
        ends = [i for i, k in enumerate(kinds) if k == END]
        by_bytes = {t: i for i, (k, t) in enumerate(zip(kinds, texts))
                    if k == TEXT}
        maxlen = max(len(t) for t in by_bytes)

        class Tok:
            """The shape LLTokenizer wants: bytes, EOS, and a tokenize
            function (greedy longest match: llguidance uses it only to
            tokenize forced text, never on the timed path)."""
            eos_token_id = ends[0]
            bos_token_id = None
            tokens = toks
            special_token_ids = [i for i, k in enumerate(kinds) if k != TEXT]

            def __call__(self, s):
                if isinstance(s, str):
                    s = s.encode()
                out, i = [], 0
                while i < len(s):
                    for n in range(min(maxlen, len(s) - i), 0, -1):
                        if s[i:i + n] in by_bytes:
                            out.append(by_bytes[s[i:i + n]])
                            i += n
                            break
                    else:
                        raise ValueError("byte %d has no token" % s[i])
                return out

        t0 = ns_now()
        self.tok = llg.LLTokenizer(llg.TokenizerWrapper(Tok()),
                                   eos_token=ends)
        self.vocab_ms = (ns_now() - t0) / 1e6
        self.words = (len(toks) + 31) // 32
        self.bitmask = np.zeros(self.words, dtype=np.int32)

    def compile(self, schema):
        g = self.llg.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": False,
                              "item_separator": SEPS[0],
                              "key_separator": SEPS[1],
                              # \uXXXX of any character, as ours (its
                              # default takes only those of controls)
                              "json_allow_general_unicode_escapes": True})
        t0 = ns_now()
        m = self.llg.LLMatcher(self.tok, g, log_level=0)
        ms = (ns_now() - t0) / 1e6
        if m.is_error():
            raise RuntimeError(m.get_error())
        return ms, None, g

    def start(self, g):
        t0 = ns_now()
        m = self.llg.LLMatcher(self.tok, g, log_level=0)
        self.ctor_ms = (ns_now() - t0) / 1e6
        return m

    def mask(self, m):
        bm = self.bitmask
        ptr = bm.ctypes.data
        t0 = ns_now()
        m.unsafe_compute_mask_ptr(ptr, self.words * 4)
        t = ns_now() - t0
        return t, bm

    def allowed(self, bm, tok):
        return int(bm[tok >> 5]) >> (tok & 31) & 1

    def accept(self, m, tok):
        # consume_token checks the bytes against the grammar (not the
        # mask), so a non-canonical token in a forced stretch is taken
        return m.consume_token(tok) and not m.is_error()

    def count(self, bm, n):
        return popcount(bm, n)

    def overhead(self, m):
        t0 = ns_now()
        m.is_accepting()
        return ns_now() - t0


def replay(peer, g, walks, texts):
    """Each walk through a fresh matcher: mask times (us), refusals (the
    matcher would not take the token: the grammars differ) and mask
    misses (the token was not in the mask but the matcher took it:
    llguidance offers only the canonical tokenization of bytes the
    grammar forces, a policy, not a grammar difference)."""
    times, refused, over, ctor, misses = [], [], [], [], 0
    same = steps = 0
    diff = []
    for w in walks:
        m = peer.start(g)
        if hasattr(peer, "ctor_ms"):
            ctor.append(peer.ctor_ms)
        done = b""
        for step, tok in enumerate(w["tokens"]):
            t, bm = peer.mask(m)
            times.append(t / 1e3)
            over.append(peer.overhead(m) / 1e3)
            inmask = bool(peer.allowed(bm, tok))
            if "allowed" in w:
                # the same number of tokens allowed: the grammars agree
                # at this step (a cheap proxy for equal masks)
                n = peer.count(bm, len(texts))
                steps += 1
                same += n == w["allowed"][step]
                if n != w["allowed"][step] and len(diff) < 3:
                    diff.append((w["gen"], step, w["allowed"][step], n,
                                 done[-40:].decode("utf-8", "replace")))
            if not peer.accept(m, tok):
                refused.append({"gen": w["gen"], "step": step, "token": tok,
                                "in_mask": inmask,
                                "before": done[-60:].decode("utf-8",
                                                            "replace")})
                break
            misses += not inmask
            done += texts[tok]
    return times, refused, over, ctor, misses, (same, steps, diff)


def popcount(words, n):
    """Set bits among the first n of an int32 bitmask (numpy)."""
    import numpy as np
    b = np.unpackbits(np.ascontiguousarray(words).view(np.uint8),
                      bitorder="little")
    return int(b[:n].sum())


def run(args):
    kinds, texts = load_dump(args.vocab)
    _, walks = load_walks(args.walks)
    with open(args.schemas) as f:
        entries = json.load(f)
    out = {"vocab": args.vocab, "peers": {}}

    for name in args.peers.split(","):
        try:
            peer = (XGrammarPeer if name == "xgrammar"
                    else LLGuidancePeer)(kinds, texts)
        except Exception as e:  # a peer that will not load is reported
            print("%s: cannot start: %s: %s" % (name, type(e).__name__, e))
            out["peers"][name] = {"error": "%s: %s" % (type(e).__name__, e)}
            continue
        print("%s: vocabulary of %d tokens prepared in %.1f ms"
              % (name, len(kinds), peer.vocab_ms))
        res = {"vocab_ms": peer.vocab_ms, "schemas": {}}
        for e in entries:
            ws = [w for w in walks if w["schema"] == e["name"]]
            try:
                cold, hit, g = peer.compile(peer_schema(e))
            except Exception as ex:
                print("  %-16s compile failed: %s" % (e["name"], ex))
                res["schemas"][e["name"]] = {"error": str(ex)}
                continue
            times, refused, over, ctor, misses, agree = replay(peer, g, ws,
                                                               texts)
            s = sorted(times)
            r = {"compile_ms": cold, "compile_hit_ms": hit,
                 "ctor_ms": ctor, "times_us": times, "refused": refused,
                 "walks": len(ws), "overhead_us": median(over),
                 "mask_misses": misses, "same_count": agree[0],
                 "steps": agree[1]}
            if ctor:
                r["compile_ms"] = median(ctor)
                r["compile_first_ms"] = cold
            res["schemas"][e["name"]] = r
            print("  %-16s compile %8.2f ms  %5d masks  p50 %8.1f us  "
                  "p99 %9.1f us  refused walks %d/%d  mask misses %d"
                  % (e["name"], r["compile_ms"], len(s),
                     s[len(s) // 2] if s else 0,
                     s[len(s) * 99 // 100] if s else 0, len(refused),
                     len(ws), misses))
            print("      masks allowing as many tokens as ours: %d of %d"
                  % (agree[0], agree[1]))
            for x in agree[2]:
                print("      walk %d step %d: ours allow %d, %s %d, after "
                      "...%r" % (x[0], x[1], x[2], peer.name, x[3], x[4]))
            for x in refused[:3]:
                print("      walk %d step %d: token %d %r after ...%r (%s)"
                      % (x["gen"], x["step"], x["token"], texts[x["token"]],
                         x["before"], "in the mask, refused by accept"
                         if x["in_mask"] else "not in the mask"))
        out["peers"][name] = res

    with open(args.out, "w") as f:
        json.dump(out, f)
    return 0


# ---- table --------------------------------------------------------------

def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, len(s) * q // 100)] if s else float("nan")


def first_requests(sa, wa, peers):
    """A new schema's first request on each side: its cold compile plus
    the masks of the schema's first walk (ours: a fresh masker, which
    builds its entries as it goes; a peer: a fresh matcher on what its
    compile precomputed), summed over the schemas whose first walk every
    peer finished, with the slowest single mask among them."""
    run = {n: p for n, p in peers.items() if "error" not in p}
    tot, worst, used = {}, {}, 0
    for name in sa:
        ws = [w for w in wa if w["schema"] == name]
        if not ws:
            continue
        n0 = len(ws[0]["tokens"])
        sides = {"kvserve": (sa[name].get("compile_first_ms",
                                          sa[name]["compile_ms"]),
                             ws[0]["own_us"])}
        for pn, p in run.items():
            r = p.get("schemas", {}).get(name)
            if (r is None or "error" in r
                    or any(x["gen"] == ws[0]["gen"] for x in r["refused"])):
                break
            # its first walk's masks come first in times_us
            sides[pn] = (r.get("compile_first_ms", r["compile_ms"]),
                         r["times_us"][:n0])
        else:
            used += 1
            for k, (c, t) in sides.items():
                tot[k] = tot.get(k, 0.0) + c + sum(t) / 1e3
                worst[k] = max(worst.get(k, 0.0), max(t) / 1e3 if t else 0)
    print("\nfirst requests (%d of %d schemas: those whose first walk every "
          "peer finished): cold compile + that walk's masks, ms in all "
          "(the slowest mask): %s" % (used, len(sa), "; ".join(
              "%s %.1f (%.2f)" % (k, tot[k], worst[k]) for k in tot)))


def table(specs):
    """One block per vocabulary: kvserve's two runs, the peers, ratios."""
    for spec in specs:
        label, walks_a, walks_b, result = spec.split(":")
        sa, wa = load_walks(walks_a)
        sb, wb = load_walks(walks_b)
        with open(result) as f:
            peers = json.load(f)["peers"]
        print("\n### %s\n" % label)
        for name, p in peers.items():
            if "error" in p:
                print("%s: not run: %s\n" % (name, p["error"]))
            else:
                print("%s: vocabulary prepared in %.0f ms; call overhead "
                      "~%.1f us per call (inside its figures)"
                      % (name, p["vocab_ms"], median(
                          [s.get("overhead_us", 0)
                           for s in p["schemas"].values()
                           if "overhead_us" in s])))
        print()
        ra_all = load_replays(walks_a)
        print("| schema | masks | kvserve compile ms | kvserve p50 / p99 us "
              "(run 1; run 2) | shared table p50 / p99 | "
              + " | ".join("%s compile ms | %s p50 / p99 | refused walks | "
                           "same count" % (n, n) for n in peers)
              + " | p50 ratio | p99 ratio | compile ratio | kvserve "
              "replayed p50 / p99 | replayed p50 ratio | replayed p99 "
              "ratio |")
        print("|---" * (5 + 4 * len(peers) + 6) + "|")
        pool = {"a": [], "b": [], "sh": []}
        ppool = {n: [] for n in peers}
        for name in list(sa) + ["all"]:
            pick = (lambda w: True) if name == "all" else (
                lambda w, n=name: w["schema"] == n)
            a = [t for w in wa if pick(w) for t in w["own_us"]]
            b = [t for w in wb if pick(w) for t in w["own_us"]]
            sh = [t for w in wa if pick(w) for t in w["shared_us"]]
            comp = ([sa[name]["compile_ms"], sb[name]["compile_ms"]]
                    if name != "all" else
                    [max(x["compile_ms"] for x in sa.values()),
                     max(x["compile_ms"] for x in sb.values())])
            row = ["%s" % (name if name != "all" else
                           "**all schemas** (compile: the largest)"),
                   "%d" % len(a), "%.3f; %.3f" % tuple(comp),
                   "%.1f / %.0f; %.1f / %.0f"
                   % (pct(a, 50), pct(a, 99), pct(b, 50), pct(b, 99)),
                   "%.1f / %.0f" % (pct(sh, 50), pct(sh, 99))]
            best50 = best99 = bestc = None
            for pn, p in peers.items():
                sch = p.get("schemas", {})
                if name == "all":
                    rs = [r for r in sch.values() if "error" not in r]
                    if not rs:
                        row += ["-", "-", "-", "-"]
                        continue
                    r = {"times_us": [t for x in rs for t in x["times_us"]],
                         "compile_ms": max(x["compile_ms"] for x in rs),
                         "refused": [y for x in rs for y in x["refused"]],
                         "walks": sum(x["walks"] for x in rs),
                         "mask_misses": sum(x.get("mask_misses", 0)
                                            for x in rs),
                         "same_count": sum(x.get("same_count", 0)
                                           for x in rs),
                         "steps": sum(x.get("steps", 0) for x in rs)}
                else:
                    r = sch.get(name)
                if r is None or "error" in r:
                    row += ["-", "-", "-", "-"]
                    continue
                t = r["times_us"]
                c = "%.1f" % r["compile_ms"]
                if r.get("compile_hit_ms") is not None:
                    c += " (hit %.2f)" % r["compile_hit_ms"]
                row += [c, "%.1f / %.0f" % (pct(t, 50), pct(t, 99)),
                        "%d/%d" % (len(r["refused"]), r["walks"])
                        + (" (%d tokens not in its mask)" % r["mask_misses"]
                           if r.get("mask_misses") else ""),
                        "%.0f%%" % (100.0 * r["same_count"] / r["steps"])
                        if r.get("steps") else "-"]
                bestc = min(bestc or 1e18, r["compile_ms"])
                # a peer that refused a walk timed a shorter replay of it:
                # its ratio is marked
                flag = "*" if r["refused"] else ""
                if best50 is None or pct(t, 50) < best50[0]:
                    best50 = (pct(t, 50), flag)
                if best99 is None or pct(t, 99) < best99[0]:
                    best99 = (pct(t, 99), flag)
            row += ["%.2f%s" % (pct(a, 50) / best50[0], best50[1])
                    if best50 else "-",
                    "%.2f%s" % (pct(a, 99) / best99[0], best99[1])
                    if best99 else "-",
                    "%.3f" % (comp[0] / bestc) if bestc else "-"]
            # run 1's walks replayed as the peers' are (bench_grammar
            # --replay): the same masks without the walk generator's
            # scans between them
            ra = [t for w in ra_all if pick(w) for t in w["own_us"]]
            if ra:
                row += ["%.1f / %.0f" % (pct(ra, 50), pct(ra, 99)),
                        "%.2f%s" % (pct(ra, 50) / best50[0], best50[1])
                        if best50 else "-",
                        "%.2f%s" % (pct(ra, 99) / best99[0], best99[1])
                        if best99 else "-"]
            else:
                row += ["-", "-", "-"]
            print("| " + " | ".join(row) + " |")
        first_requests(sa, wa, peers)
    print("\nratios: kvserve run 1 (own masker: a fresh request) / the "
          "faster peer (*: that peer refused some walks, so it timed them "
          "only up to the refusal); compile: / the faster peer's compile; "
          "< 1: kvserve is faster.  same count: the steps where "
          "the peer's mask allows as many tokens as ours.  replayed: run "
          "1's walks timed again as the peers' are (per walk a fresh "
          "request, each step the mask, a popcount, the token accepted), "
          "where run 1's own times include the walk generator's scan of "
          "every allowed token between two masks.")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("vocab-check")
    v.add_argument("gguf")
    v.add_argument("dump")
    r = sub.add_parser("run")
    r.add_argument("--vocab", required=True)
    r.add_argument("--walks", required=True)
    r.add_argument("--schemas", required=True)
    r.add_argument("--peers", default="xgrammar,llguidance")
    r.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("specs", nargs="+",
                   help="LABEL:WALKS_RUN1:WALKS_RUN2:RESULT")
    args = ap.parse_args()
    if args.cmd == "vocab-check":
        return vocab_check(args.gguf, args.dump)
    if args.cmd == "run":
        return run(args)
    return table(args.specs)


if __name__ == "__main__":
    sys.exit(main())
