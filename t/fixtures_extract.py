#!/usr/bin/env python3
"""fixtures_extract: pull one chat template out of a source file that holds
it inside a string literal, and write the decoded bytes to stdout.

Used by t/fixtures.sh for manifest sources of the form URL#KIND:ARG.  The
output must be byte-identical to the published template (the manifest's
sha256 decides), so nothing is added or stripped: no trailing newline.

Kinds (ARG is percent-decoded first):
  py-entry:NAME[/KEY]   Python file: the dict literal keyed "NAME" whose
                        value holds "chat_template"; with /KEY, the named
                        template KEY inside it (dict or HF name/template
                        list).  NAME may itself contain '/', so KEY is the
                        part after the last '//' separator: NAME//KEY.
  py-name:NAME          Python file: the first str assigned to NAME.
  py-func-key:FUNC:KEY  Python file: inside def FUNC, the str value of a
                        dict entry "KEY" (or of the module-level name that
                        the entry's value is).
  py-bytes:FUNC         Python file: the bytes literal inside def FUNC.
  ts-entry:NAME:FIELD   TypeScript file: after the string literal "NAME",
                        the string value of the next FIELD: key.
  md-block:FIRSTLINE    Markdown: the lines of the ``` block that follow
                        the line FIRSTLINE, each ending in a newline.
"""
import ast
import sys
import urllib.parse


def die(msg):
    sys.stderr.write("fixtures_extract: %s\n" % msg)
    sys.exit(2)


def const_str(node):
    # Templates are sometimes split as "a" + "b" across lines.
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = const_str(node.left), const_str(node.right)
        if a is not None and b is not None and type(a) is type(b):
            return a + b
    return None


def dict_get(node, key):
    if not isinstance(node, ast.Dict):
        return None
    for k, v in zip(node.keys, node.values):
        if k is not None and const_str(k) == key:
            return v
    return None


def call_kw(node, key):
    # dict(chat_template=...) is as common as {"chat_template": ...}.
    if isinstance(node, ast.Call):
        for kw in node.keywords:
            if kw.arg == key:
                return kw.value
    return None


def get(node, key):
    v = dict_get(node, key)
    return v if v is not None else call_kw(node, key)


def named_template(node, key):
    v = get(node, key)
    if v is not None:
        return const_str(v)
    # Hugging Face stores named templates as [{"name":..,"template":..}].
    if isinstance(node, (ast.List, ast.Tuple)):
        for el in node.elts:
            n = get(el, "name")
            if n is not None and const_str(n) == key:
                t = get(el, "template")
                return const_str(t) if t is not None else None
    return None


def py_entry(tree, arg):
    name, _, key = arg.partition("//")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        val = dict_get(node, name)
        if val is None:
            continue
        tmpl = get(val, "chat_template")
        if tmpl is None:
            continue
        s = named_template(tmpl, key) if key else const_str(tmpl)
        if s is not None:
            return s
    die("py-entry %r not found" % arg)


def py_name(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id == name:
                    s = const_str(node.value)
                    if s is not None:
                        return s
    die("py-name %r not found" % name)


def in_func(tree, func):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.name == func:
            return node
    die("def %r not found" % func)


def py_func_key(tree, arg):
    func, _, key = arg.partition(":")
    for node in ast.walk(in_func(tree, func)):
        v = get(node, key)
        if v is not None and isinstance(const_str(v), str):
            return const_str(v)
        # Test files often name the template once at module level.
        if isinstance(v, ast.Name):
            return py_name(tree, v.id)
    die("py-func-key %r not found" % arg)


def py_bytes(tree, func):
    found = [n.value for n in ast.walk(in_func(tree, func))
             if isinstance(n, ast.Constant) and isinstance(n.value, bytes)
             and n.value]
    if len(found) != 1:
        die("py-bytes %r: %d bytes literals, want 1" % (func, len(found)))
    return found[0]


def js_string(src, i):
    """Decode the JS/TS string literal starting at src[i]; quote ' " or `."""
    q = src[i]
    if q not in "'\"`":
        die("no string literal at offset %d" % i)
    out, i = [], i + 1
    simple = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f",
              "v": "\v", "0": "\0"}
    while True:
        if i >= len(src):
            die("unterminated string literal")
        c = src[i]
        if c == q:
            return "".join(out)
        if q == "`" and src.startswith("${", i):
            die("template literal with substitution")
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = src[i + 1]
        if e in simple and not (e == "0" and src[i + 2:i + 3].isdigit()):
            out.append(simple[e])
            i += 2
        elif e == "x":
            out.append(chr(int(src[i + 2:i + 4], 16)))
            i += 4
        elif e == "u" and src[i + 2] == "{":
            j = src.index("}", i)
            out.append(chr(int(src[i + 3:j], 16)))
            i = j + 1
        elif e == "u":
            cu = int(src[i + 2:i + 6], 16)
            i += 6
            # Astral characters arrive as surrogate pairs.
            if 0xD800 <= cu < 0xDC00 and src.startswith("\\u", i):
                lo = int(src[i + 2:i + 6], 16)
                if 0xDC00 <= lo < 0xE000:
                    cu = 0x10000 + ((cu - 0xD800) << 10) + (lo - 0xDC00)
                    i += 6
            out.append(chr(cu))
        elif e == "\r" and src[i + 2:i + 3] == "\n":
            i += 3
        elif e in "\n\r\u2028\u2029":
            i += 2
        else:
            out.append(e)
            i += 2


def ts_entry(src, arg):
    name, _, field = arg.rpartition(":")
    for q in "\"'`":
        at = src.find(q + name + q)
        if at >= 0:
            break
    else:
        die("ts-entry %r not found" % name)
    i = at + len(name) + 2
    for key in (field + ":", '"%s":' % field, "'%s':" % field):
        j = src.find(key, i)
        if j >= 0:
            break
    else:
        die("ts-entry %r: no field %r" % (name, field))
    j += len(key)
    while src[j] in " \t\r\n":
        j += 1
    return js_string(src, j)


def md_block(src, first):
    lines = src.split("\n")
    for n, line in enumerate(lines):
        if line == first and n > 0 and lines[n - 1].startswith("```"):
            out = []
            for ln in lines[n + 1:]:
                if ln.startswith("```"):
                    return "".join(x + "\n" for x in out)
                out.append(ln)
    die("md-block %r not found" % first)


def main():
    if len(sys.argv) != 3:
        die("usage: fixtures_extract.py KIND:ARG FILE")
    kind, _, arg = sys.argv[1].partition(":")
    arg = urllib.parse.unquote(arg)
    with open(sys.argv[2], "rb") as f:
        raw = f.read()
    src = raw.decode("utf-8")
    if kind == "ts-entry":
        s = ts_entry(src, arg)
    elif kind == "md-block":
        s = md_block(src, arg)
    else:
        tree = ast.parse(raw)
        fn = {"py-entry": py_entry, "py-name": py_name,
              "py-func-key": py_func_key, "py-bytes": py_bytes}.get(kind)
        if fn is None:
            die("unknown kind %r" % kind)
        s = fn(tree, arg)
    sys.stdout.buffer.write(s if isinstance(s, bytes) else s.encode("utf-8"))


if __name__ == "__main__":
    main()
