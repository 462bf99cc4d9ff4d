#!/usr/bin/env python3
"""mk_fixtures_mirror: lay out an offline mirror for t/fixtures.sh from a
fixtures directory, for t/unit/test_fixtures_fetch.sh.

Usage: mk_fixtures_mirror.py MANIFEST FIXTURES MIRROR OUT_MANIFEST [PATH...]

For each manifest line whose PATH is given (all lines when none are), the
file under FIXTURES is placed in MIRROR where its first source URL maps
(MIRROR/HOST/PATH), and the line is copied to OUT_MANIFEST.  A source that
holds the data inside a string literal (URL#KIND:ARG) gets a stand-in file
with the same kind of literal, written here from the fixture's bytes with
Python's, JSON's or Markdown's own quoting.  The fetch must then decode the
literal back to the exact bytes: that is the check on fixtures_extract.py.
Several fixtures that share one source URL share one stand-in file.
"""
import collections
import json
import os
import shutil
import sys
import urllib.parse


def main():
    manifest, fixtures, mirror, out_manifest = sys.argv[1:5]
    want = set(sys.argv[5:])
    lines, literal = [], collections.defaultdict(list)
    for line in open(manifest, encoding="utf-8"):
        f = line.split()
        if not f or f[0].startswith("#") or (want and f[2] not in want):
            continue
        path, source = f[2], f[3]
        lines.append(line)
        if source == "in-repo":
            continue
        url, _, spec = source.partition("#")
        data = open(os.path.join(fixtures, path), "rb").read()
        if spec:
            kind, _, arg = spec.partition(":")
            literal[url].append((kind, urllib.parse.unquote(arg), data))
            continue
        dest = os.path.join(mirror, url[len("https://"):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(fixtures, path), dest)
    for url, items in literal.items():
        dest = os.path.join(mirror, url[len("https://"):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "w", encoding="utf-8") as out:
            out.write(stand_in(items))
    with open(out_manifest, "w", encoding="utf-8") as out:
        out.writelines(lines)


def stand_in(items):
    py, ts, md = [], [], []
    entries = collections.OrderedDict()
    for kind, arg, data in items:
        if kind == "py-entry":
            name, _, key = arg.partition("//")
            entries.setdefault(name, {})[key] = data.decode("utf-8")
        elif kind == "py-name":
            py.append("%s = %r\n" % (arg, data.decode("utf-8")))
        elif kind == "py-func-key":
            func, _, key = arg.partition(":")
            py.append("def %s():\n    return {%r: %r}\n"
                      % (func, key, data.decode("utf-8")))
        elif kind == "py-bytes":
            py.append("def %s():\n    want = %r\n    return want\n"
                      % (arg, data))
        elif kind == "ts-entry":
            name, _, field = arg.rpartition(":")
            # JSON's ASCII escapes (\\uXXXX) are valid TypeScript too, and
            # make the decoder handle them.
            ts.append("  { model: %s, %s: %s },\n"
                      % (json.dumps(name), field,
                         json.dumps(data.decode("utf-8"))))
        elif kind == "md-block":
            text = data.decode("utf-8")
            if not text.endswith("\n"):
                sys.exit("md-block %r: text must end in a newline" % arg)
            md.append("Some prose.\n\n```\n%s\n%s```\n\n" % (arg, text))
        else:
            sys.exit("unknown kind %r" % kind)
    if entries:
        body = []
        for name, e in entries.items():
            if list(e) == [""]:
                tmpl = repr(e[""])
            else:
                tmpl = "[%s]" % ", ".join(
                    "{'name': %r, 'template': %r}" % kv for kv in e.items())
            body.append("    %r: {'bos_token': '<s>', 'chat_template': %s},\n"
                        % (name, tmpl))
        py.append("def configs():\n    return {\n%s    }\n" % "".join(body))
    if ts:
        return "export const AUTOMAP = [\n%s];\n" % "".join(ts)
    if md:
        return "# doc\n\n" + "".join(md)
    return "".join(py)


if __name__ == "__main__":
    main()
