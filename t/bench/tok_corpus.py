#!/usr/bin/env python3
"""Writes the tokenizer bench corpus: a few MB of mixed UTF-8 text, the
same bytes for the same repository and seed.

Material, all from this repository or generated here:
  prose     word chains learned from README.md, docs/*.md and the English
            prose in src/gen/kvs_gen_corpus.c, plus the 46 llama.cpp
            test strings (vocab/ggml-vocab-gpt-2.gguf.inp) when the
            fixtures are present, once, verbatim
  numbers   dates, prices, versions, hex, long digit runs, CSV rows
  code      slices of the repository's own .c/.h/.py/.pl/.t files
  cjk       sentence-like runs of Han characters (U+4E00..U+9FA5) with
            CJK punctuation, some kana and Hangul, some ASCII mixed in
  words     Cyrillic, Greek, accented Latin and Vietnamese words (a
            fixed list written for this file)
  emoji     single code points, skin tones, ZWJ families, flags, keycaps,
            VS16 presentation selectors, between short English phrases
  spaces    indentation with tabs and spaces, runs of up to 200 spaces,
            trailing spaces, blank lines, CRLF line ends, aligned tables

The text is NFC except for some accented words written decomposed (NFD)
on purpose, so that Qwen2's NFC normaliser has work to do.  The repository
files read are whatever they hold at the time of the run, so the corpus
is deterministic for a given checkout, not across checkouts.

usage: tok_corpus.py [--size BYTES] [--seed N] [--fixtures DIR] out.txt
"""
import argparse
import os
import random
import re
import unicodedata

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

WORDS = {
    "ru": "быстро город дом время человек работа слово вопрос жизнь день "
          "рука глаз сторона страна мир голова ребёнок система место "
          "конец лицо друг право земля часть мысль вода отец проблема "
          "программа сервер запрос ответ модель токен очередь память "
          "обработка загрузка Москва Россия новый большой хороший "
          "последний русский должен сказать который этот",
    "uk": "привіт дякую будь ласка місто мова країна сонце вітер "
          "пісня річка їжак ґанок сім'я українська",
    "el": "καλημέρα ευχαριστώ παρακαλώ θάλασσα ήλιος άνθρωπος χρόνος "
          "λόγος πόλη σπίτι νερό φίλος αγάπη ψυχή Ελλάδα Αθήνα "
          "γλώσσα μηχανή δεδομένα αριθμός",
    "fr": "être avoir déjà où très après français garçon fenêtre "
          "élève château côté forêt hôpital noël naïve cœur œuvre "
          "ça été année problème système réseau données",
    "de": "Straße Mädchen Größe über schön Bäcker Übung Fußgänger "
          "ökonomisch Äpfel Käse größer müssen Lösung Schlüssel "
          "Wörterbuch Verfügbarkeit Anfrageverarbeitung",
    "es": "año niño señor mañana corazón jamás también canción "
          "pequeño acción información ¿qué ¡hola está según",
    "pt": "informações coração não então irmã pão órgão avó ação "
          "obrigado você também",
    "pl": "zażółć gęślą jaźń źdźbło łódź żółw ściana książka "
          "język dziękuję",
    "tr": "İstanbul ığdır şeker çiçek göğüs öğrenci ülke ışık",
    "vi": "Việt Nam tiếng xin chào cảm ơn người nước Hà Nội thành "
          "phố Hồ Chí Minh đường cửa hàng phở",
}

EMOJI = ["\U0001f600", "\U0001f602", "\U0001f60d", "\U0001f914",
         "\U0001f44d", "\U0001f44d\U0001f3fd", "\U0001f44b\U0001f3ff",
         "\U0001f525", "\u2728", "\U0001f389", "\U0001f680",
         "\U0001f999", "\u2705", "\u274c", "\u2764\ufe0f",
         "\u263a\ufe0f", "\U0001f1ef\U0001f1f5", "\U0001f1e9\U0001f1ea",
         "\U0001f1fa\U0001f1e6", "\U0001f1e7\U0001f1f7",
         "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
         "\U0001f469\U0001f3fd\u200d\U0001f4bb",
         "\U0001f3f3\ufe0f\u200d\U0001f308",
         "\U0001f636\u200d\U0001f32b\ufe0f",
         "\U0001f9d1\u200d\U0001f91d\u200d\U0001f9d1",
         "1\ufe0f\u20e3", "#\ufe0f\u20e3", "\U0001f4a9", "\U0001f40d",
         "\U0001f30d", "\u2615", "\U0001f37a", "\u26a1"]

CJK_PUNCT = "，。、：；！？「」『』（）《》"
ZH_END = "。！？"


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def c_strings(src):
    """The concatenated string literals of the first array in C source."""
    lits = re.findall(r'"((?:[^"\\]|\\.)*)"', src)
    esc = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}
    return "".join(re.sub(r"\\(.)", lambda m: esc.get(m.group(1),
                                                       m.group(1)), s)
                   for s in lits)


def prose_sources(fixtures):
    texts = []
    for rel in ["README.md"] + sorted(
            "docs/" + f for f in os.listdir(os.path.join(REPO, "docs"))
            if f.endswith(".md")):
        t = read(os.path.join(REPO, rel))
        if t:
            texts.append(t)
    t = read(os.path.join(REPO, "src/gen/kvs_gen_corpus.c"))
    if t:
        body = t.split("kvs_gen_corpus[] =", 1)[-1].split(";", 1)[0]
        texts.append(c_strings(body))
    cases = []
    if fixtures:
        inp = os.path.join(fixtures, "vocab", "ggml-vocab-gpt-2.gguf.inp")
        if os.path.exists(inp):
            t = read(inp)
            cases = t.split("\n__ggml_vocab_test__\n")[:-1]
    return texts, cases


class Chain:
    """A first-order word chain over the prose: plausible sentences with
    the prose's own words and punctuation."""

    def __init__(self, texts):
        self.next = {}
        self.starts = []
        for t in texts:
            # markdown and code markup out; the words and sentences stay
            t = re.sub(r"```.*?```", " ", t, flags=re.S)
            t = re.sub(r"[#*`|>\[\]]", " ", t)
            words = t.split()
            prev = None
            for w in words:
                if prev is None or prev[-1:] in ".!?":
                    if w[:1].isupper():
                        self.starts.append(w)
                if prev is not None:
                    self.next.setdefault(prev, []).append(w)
                prev = w

    def sentence(self, rnd):
        w = rnd.choice(self.starts)
        out = [w]
        for _ in range(60):
            if w[-1:] in ".!?" and len(out) > 3:
                break
            nxt = self.next.get(w)
            if not nxt:
                break
            w = rnd.choice(nxt)
            out.append(w)
        s = " ".join(out)
        if s[-1:] not in ".!?":
            s += "."
        return s


def number(rnd):
    k = rnd.randrange(9)
    if k == 0:
        return "%04d-%02d-%02d" % (rnd.randrange(1900, 2100),
                                   rnd.randrange(1, 13), rnd.randrange(1, 29))
    if k == 1:
        return "$%s.%02d" % (format(rnd.randrange(1, 10 ** 7), ","),
                             rnd.randrange(100))
    if k == 2:
        return "%d.%d.%d" % (rnd.randrange(10), rnd.randrange(30),
                             rnd.randrange(100))
    if k == 3:
        w = rnd.choice([2, 4, 8, 16])
        return "0x%0*X" % (w, rnd.getrandbits(4 * w))
    if k == 4:
        return "".join(rnd.choice("0123456789")
                       for _ in range(rnd.randrange(10, 60)))
    if k == 5:
        return "%.*f" % (rnd.randrange(1, 7), rnd.uniform(-1e4, 1e4))
    if k == 6:
        return "%d%%" % rnd.randrange(101)
    if k == 7:
        return "%02d:%02d:%02d" % (rnd.randrange(24), rnd.randrange(60),
                                   rnd.randrange(60))
    return str(rnd.randrange(10 ** rnd.randrange(1, 8)))


def doc_prose(rnd, chain):
    paras = []
    for _ in range(rnd.randrange(1, 5)):
        sents = []
        for _ in range(rnd.randrange(2, 8)):
            s = chain.sentence(rnd)
            if rnd.random() < 0.3:
                words = s.split(" ")
                words.insert(rnd.randrange(len(words)), number(rnd))
                s = " ".join(words)
            sents.append(s)
        paras.append(" ".join(sents))
    return "\n\n".join(paras)


def doc_numbers(rnd):
    cols = rnd.randrange(3, 8)
    rows = ["id,date,amount,ratio,code,count,total"[:cols * 8]]
    for i in range(rnd.randrange(5, 40)):
        rows.append(",".join([str(i)] + [number(rnd)
                                         for _ in range(cols - 1)]))
    return "\n".join(rows)


def code_files():
    out = []
    skip = {"build", "servroot", ".git"}
    for top, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d not in skip
                         and not d.startswith("."))
        for f in sorted(files):
            if os.path.splitext(f)[1] in (".c", ".h", ".py", ".pl", ".t"):
                t = read(os.path.join(top, f))
                if t:
                    out.append(t)
    return out


def doc_code(rnd, files):
    t = rnd.choice(files)
    lines = t.split("\n")
    n = rnd.randrange(20, 200)
    i = rnd.randrange(max(1, len(lines) - n))
    return "\n".join(lines[i:i + n])


def doc_cjk(rnd, pool):
    out = []
    for _ in range(rnd.randrange(3, 20)):
        s = []
        for _ in range(rnd.randrange(4, 40)):
            r = rnd.random()
            if r < 0.05:
                s.append(rnd.choice(CJK_PUNCT[:4]))
            elif r < 0.08:
                s.append(rnd.choice(["GPU", "API", "nginx", "2024年",
                                     "3.14", "Qwen2", "token"]))
            elif r < 0.12:
                s.append(chr(rnd.randrange(0x3041, 0x3097)))   # hiragana
            elif r < 0.14:
                s.append(chr(rnd.randrange(0x30A1, 0x30FB)))   # katakana
            elif r < 0.17:
                s.append(chr(rnd.randrange(0xAC00, 0xD7A4)))   # Hangul
            else:
                # Zipf-like: the start of the pool far more often
                s.append(pool[int(len(pool) * rnd.random() ** 3)])
        out.append("".join(s) + rnd.choice(ZH_END))
    sep = rnd.choice(["", "", "\n", " "])
    return sep.join(out)


def doc_words(rnd, nfd):
    lang = rnd.choice(sorted(WORDS))
    words = WORDS[lang].split()
    out = []
    for _ in range(rnd.randrange(2, 10)):
        s = [rnd.choice(words) for _ in range(rnd.randrange(3, 15))]
        s[0] = s[0][:1].upper() + s[0][1:]
        out.append(" ".join(s) + rnd.choice(".!?;"))
    t = " ".join(out)
    if nfd:
        t = unicodedata.normalize("NFD", t)
    return t


def doc_emoji(rnd, chain):
    out = []
    for _ in range(rnd.randrange(3, 15)):
        words = chain.sentence(rnd).split(" ")[:rnd.randrange(1, 8)]
        e = "".join(rnd.choice(EMOJI) for _ in range(rnd.randrange(1, 4)))
        words.insert(rnd.randrange(len(words) + 1), e)
        out.append(" ".join(words))
    return rnd.choice([" ", "\n", ""]).join(out)


def doc_spaces(rnd, chain, files):
    k = rnd.randrange(4)
    if k == 0:
        # indentation and trailing blanks
        lines = []
        for _ in range(rnd.randrange(5, 30)):
            ind = rnd.choice(["\t", "\t\t", "    ", "        ", "  \t",
                              " " * rnd.randrange(1, 40), ""])
            w = " ".join(chain.sentence(rnd).split(" ")[:5])
            lines.append(ind + w + " " * rnd.randrange(3))
            lines.extend([""] * rnd.choice([0, 0, 1, 2, 5]))
        return "\n".join(lines)
    if k == 1:
        # long runs of one kind of blank
        return "".join(rnd.choice(["x", "=", "word", "-"])
                       + rnd.choice([" ", "\t", "\n", "\u3000", "\u00a0"])
                       * rnd.randrange(1, 200)
                       for _ in range(rnd.randrange(3, 12)))
    if k == 2:
        # aligned table
        rows = []
        for _ in range(rnd.randrange(3, 15)):
            cells = [rnd.choice(chain.sentence(rnd).split(" "))
                     for _ in range(4)]
            rows.append("| " + " | ".join("%-18s" % c for c in cells)
                        + " |")
        return "\n".join(rows)
    # CRLF line ends
    return "\r\n".join(doc_code(rnd, files).split("\n"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4 << 20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fixtures", default=os.environ.get("KVS_FIXTURES"))
    ap.add_argument("out")
    a = ap.parse_args()

    rnd = random.Random(a.seed)
    texts, cases = prose_sources(a.fixtures)
    chain = Chain(texts + cases)
    files = code_files()
    pool = [chr(c) for c in range(0x4E00, 0x9FA6)]
    rnd.shuffle(pool)
    pool = pool[:3000]

    # document counts per kind, for byte shares of about: prose 30%,
    # code 25%, CJK 15%, words 10%, spaces 10%, emoji 5%, numbers 5%
    kinds = [("prose", 20), ("numbers", 4), ("code", 11), ("cjk", 20),
             ("words", 23), ("emoji", 17), ("spaces", 9)]
    names = [k for k, _ in kinds]
    weights = [w for _, w in kinds]

    docs = ["\n".join(cases)] if cases else []
    size = sum(len(d.encode("utf-8")) for d in docs)
    while size < a.size:
        k = rnd.choices(names, weights)[0]
        if k == "prose":
            d = doc_prose(rnd, chain)
        elif k == "numbers":
            d = doc_numbers(rnd)
        elif k == "code":
            d = doc_code(rnd, files)
        elif k == "cjk":
            d = doc_cjk(rnd, pool)
        elif k == "words":
            d = doc_words(rnd, rnd.random() < 0.15)
        elif k == "emoji":
            d = doc_emoji(rnd, chain)
        else:
            d = doc_spaces(rnd, chain, files)
        docs.append(d)
        size += len(d.encode("utf-8")) + 2

    with open(a.out, "w", encoding="utf-8", newline="") as f:
        f.write("\n\n".join(docs))


if __name__ == "__main__":
    main()
