#!/usr/bin/env python3
"""The C Jinja interpreter against Python jinja2 on real chat templates.

Every .jinja file in $KVS_FIXTURES/templates (real published templates,
see the README there) is rendered with a corpus of conversations made
here, once by Python jinja2 set up as Hugging Face's apply_chat_template
does (an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
the loop controls; raise_exception and strftime_now globals; tojson as
json.dumps(ensure_ascii=False, ...)) and once by `kvserve jinja`.  The
outputs must be byte-identical; where jinja2 raises, ours must fail too.

The corpus: system/user/assistant turns of several shapes, multi-part
text content, unicode and awkward whitespace, tools with assistant
tool_calls and tool results (arguments as a mapping and as a JSON string)
for templates that read them, add_generation_prompt true and false, and
the template-specific variables some need (documents, functions,
datetime, enable_thinking).  bos_token / eos_token come from the
README's table where it gives them, a plausible value otherwise.

Prints per template how many conversations matched; exit status 1 on any
mismatch.  Skipped, saying so, when the fixtures are absent.

Environment: KVS_CLI (the kvserve tool; default build/kvserve), KVS_TMP
(scratch dir), KVS_FIXTURES (../shared/fixtures).
"""

import json
import os
import random
import re
import subprocess
import sys
from datetime import datetime, timezone

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvs_check import FIXTURES, ROOT, TMP, check, report

CLI = os.environ.get("KVS_CLI", os.path.join(ROOT, "build", "kvserve"))
NOW = 1736899200          # 2025-01-15 00:00:00 UTC, strftime_now's clock


# --- the reference: jinja2 as Hugging Face sets it up ----------------------

def raise_exception(message):
    raise TemplateError(message)


def strftime_now(fmt):
    return datetime.fromtimestamp(NOW, timezone.utc).strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None,
           sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def hf_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def jinja_render(env, text, ctx):
    try:
        return True, env.from_string(text).render(**ctx)
    except Exception as e:          # any raise is a failed render
        return False, "%s: %s" % (type(e).__name__, e)


def c_render(path, ctx, scratch):
    with open(scratch, "w", encoding="utf-8") as f:
        json.dump(ctx, f)
    p = subprocess.run([CLI, "jinja", path, scratch, "--now", str(NOW)],
                       capture_output=True, timeout=60)
    if p.returncode == 0:
        return True, p.stdout.decode("utf-8")
    return False, p.stderr.decode("utf-8", "replace").strip()


# --- bos / eos from the fixtures' README -----------------------------------

FAMILY_TOKENS = [
    ("llama-3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-4", "<|begin_of_text|>", "<|eot|>"),
    ("hermes", "<|begin_of_text|>", "<|im_end|>"),
    ("functionary", "<|begin_of_text|>", "<|eot_id|>"),
    ("firefunction", "<|begin_of_text|>", "<|eot_id|>"),
    ("deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("gemma", "<bos>", "<eos>"),
    ("qwen", "", "<|im_end|>"),
    ("command-r", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
]


def readme_tokens():
    """file -> (bos, eos) from the README's table (None where not given)"""
    out = {}
    path = os.path.join(FIXTURES, "templates", "README.md")
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return out
    for line in text.splitlines():
        m = re.match(r"\| `([^`]+\.jinja)` \|", line)
        if not m:
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) < 7:
            continue
        pair = cells[6].replace("\\|", "|")
        m2 = re.match(r"(`[^`]*`|null|—) / (`[^`]*`|null|—)$", pair)
        if not m2:
            continue
        vals = []
        for v in m2.groups():
            vals.append(v[1:-1] if v.startswith("`") else
                        ("" if v == "null" else None))
        out[m.group(1)] = tuple(vals)
    return out


def tokens_for(name, table):
    bos, eos = table.get(name, (None, None))
    if bos is None or eos is None:
        for prefix, b, e in FAMILY_TOKENS:
            if name.startswith(prefix):
                bos = b if bos is None else bos
                eos = e if eos is None else eos
                break
    return (bos if bos is not None else "<s>",
            eos if eos is not None else "</s>")


# --- the corpus ------------------------------------------------------------

AWKWARD = [
    "Hello!",
    "  leading and trailing spaces  ",
    "\n\nnewlines around\n\n",
    "tabs\tand\r\nCRLF\rCR",
    "unicode: héllo wörld — ✓ 日本語 😀 Ελληνικά",
    "quotes ' and \" and `back` and \\ backslash",
    "{{ not a template }} {% neither %} {# nor #}",
    "nbsp\u00a0and\u2003em space\u3000ideographic",
    "line\u2028separator and \x85next line",
    "",
    " ",
    "<|im_end|> looks like a special token </s>",
    "json-ish: {\"a\": [1, 2.5, null, true]}",
    "ümlaut at the end ü",
]

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string",
                         "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Days ahead",
                         "default": 1},
            },
            "required": ["city"],
        },
    },
}, {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web for a query. Returns snippets.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to find"},
                "limit": {"type": "number", "description": "Max results",
                          "minimum": 0.5},
                "tags": {"type": "array", "items": {"type": "string"},
                         "description": "Filter tags"},
            },
            "required": ["query"],
        },
    },
}]


def tool_round_trip(args_as_string, rnd):
    args = {"city": rnd.choice(["Paris", "São Paulo", "Zürich"]),
            "unit": "celsius", "days": 2}
    call = {
        "id": "call12345",          # 9 characters, as Mistral requires
        "type": "function",
        "function": {"name": "get_current_weather",
                     "arguments": json.dumps(args, ensure_ascii=False)
                     if args_as_string else args},
    }
    return [
        {"role": "user", "content": "What's the weather in %s?"
                                    % args["city"]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call12345", "name":
         "get_current_weather",
         "content": json.dumps({"temperature": 21.5, "sky": "clear"})},
        {"role": "assistant", "content": "It is 21.5 °C and clear."},
        {"role": "user", "content": "Thanks!"},
    ]


def parallel_calls(args_as_string):
    """two calls in one assistant turn (content None), two results"""
    def call(i, name, args):
        return {"id": "call%05d" % i + "abc", "type": "function",
                "function": {"name": name,
                             "arguments": json.dumps(args)
                             if args_as_string else args}}
    return [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Oslo, and search news."},
        {"role": "assistant", "content": None, "tool_calls": [
            call(1, "get_current_weather", {"city": "Oslo"}),
            call(2, "search", {"query": "news", "limit": 3,
                               "tags": ["world", "ünï"]})]},
        {"role": "tool", "tool_call_id": "call00001abc",
         "content": "{\"temperature\": -3}"},
        {"role": "tool", "tool_call_id": "call00002abc",
         "content": "no results"},
    ]


def conversations(text, rnd):
    """(label, extra context) pairs for one template"""
    uses_tools = "tools" in text
    convs = []

    def msg(role, content):
        return {"role": role, "content": content}

    convs.append(("user", [msg("user", "Hello!")]))
    convs.append(("system+user", [msg("system", "You are helpful."),
                                  msg("user", "What is 2+2?")]))
    convs.append(("4 turns", [msg("system", "Be brief."),
                              msg("user", "Hi"), msg("assistant", "Hello!"),
                              msg("user", "How are you?")]))
    convs.append(("ends with assistant", [msg("user", "Hi"),
                                          msg("assistant", "Hello, how can "
                                              "I help?")]))
    convs.append(("long", [msg("user", "q%d" % i) if i % 2 == 0 else
                           msg("assistant", "a%d" % i) for i in range(9)]))
    convs.append(("parts", [
        {"role": "system", "content": [{"type": "text",
                                        "text": "System in parts."}]},
        {"role": "user", "content": [{"type": "text", "text": "First part."},
                                     {"type": "text", "text": " Second."}]},
    ]))
    convs.append(("user parts", [
        {"role": "user", "content": [{"type": "text", "text": "Only part"}]},
    ]))
    for k in range(4):
        m = []
        if rnd.random() < 0.5:
            m.append(msg("system", rnd.choice(AWKWARD)))
        for i in range(rnd.randint(1, 3)):
            m.append(msg("user", rnd.choice(AWKWARD)))
            m.append(msg("assistant", rnd.choice(AWKWARD)))
        m.append(msg("user", rnd.choice(AWKWARD)))
        convs.append(("awkward %d" % k, m))
    convs.append(("all awkward", [msg("user", a) for a in AWKWARD]))

    out = []
    for label, m in convs:
        out.append((label, {"messages": m}))
    if uses_tools:
        out.append(("tools", {"messages": [msg("system", "Use tools."),
                                           msg("user", "Weather in Paris?")],
                              "tools": TOOLS}))
        out.append(("tools no system", {"messages": [msg("user", "Hi")],
                                        "tools": TOOLS}))
        out.append(("tool round trip (mapping)",
                    {"messages": tool_round_trip(False, rnd),
                     "tools": TOOLS}))
        out.append(("tool round trip (string)",
                    {"messages": tool_round_trip(True, rnd),
                     "tools": TOOLS}))
        out.append(("tool round trip, no tools list",
                    {"messages": tool_round_trip(True, rnd)}))
        for as_string in (False, True):
            out.append(("parallel tool calls (%s)"
                        % ("string" if as_string else "mapping"),
                        {"messages": parallel_calls(as_string),
                         "tools": TOOLS}))
    if "documents" in text:
        out.append(("documents", {"messages": [msg("user", "Summarise.")],
                                  "documents": [
                                      {"title": "Doc one", "text": "Alpha."},
                                      {"title": "Doc two", "text": "Beta."}],
                                  }))
    if "functions" in text and "datetime" in text:
        for label, ctx in list(out):
            c = dict(ctx)
            c["functions"] = json.dumps([t["function"] for t in TOOLS])
            c["datetime"] = "2025-01-15"
            out.append((label + " +functions", c))
    if "enable_thinking" in text:
        out.append(("thinking off", {"messages": [msg("user", "Hi")],
                                     "enable_thinking": False}))
    return out


# --- the check -------------------------------------------------------------

def main():
    tdir = os.path.join(FIXTURES, "templates")
    if not os.path.isdir(tdir):
        print("test_jinja_templates: SKIP: fixture %s is absent" % tdir)
        return 0
    if not os.path.exists(CLI):
        print("test_jinja_templates: %s not built" % CLI)
        return 1
    names = sorted(n for n in os.listdir(tdir) if n.endswith(".jinja"))
    if not names:
        print("test_jinja_templates: SKIP: no .jinja files in %s" % tdir)
        return 0

    table = readme_tokens()
    env = hf_env()
    scratch = os.path.join(TMP, "jinja-ctx-%d.json" % os.getpid())
    total = matched = 0
    both_failed_total = 0

    for name in names:
        path = os.path.join(tdir, name)
        text = open(path, encoding="utf-8").read()
        bos, eos = tokens_for(name, table)
        rnd = random.Random(name)
        n = ok = both_failed = 0
        for label, ctx in conversations(text, rnd):
            for agp in (True, False):
                c = dict(ctx)
                c.update(bos_token=bos, eos_token=eos,
                         add_generation_prompt=agp)
                want_ok, want = jinja_render(env, text, c)
                got_ok, got = c_render(path, c, scratch)
                n += 1
                same = want_ok == got_ok and (not want_ok or want == got)
                if same:
                    ok += 1
                    both_failed += not want_ok
                else:
                    what = "%s [%s, agp=%s]: jinja2 %s, kvserve %s" % (
                        name, label, agp,
                        "ok" if want_ok else "failed (%s)" % want,
                        "ok" if got_ok else "failed (%s)" % got)
                    if want_ok and got_ok:
                        i = next((k for k in range(min(len(want), len(got)))
                                  if want[k] != got[k]),
                                 min(len(want), len(got)))
                        what += "; first difference at %d:\n  want %r\n" \
                                "  got  %r" % (i, want[max(0, i - 40):i + 40],
                                               got[max(0, i - 40):i + 40])
                    check(False, what)
                    continue
                check(True, name)
        total += n
        matched += ok
        both_failed_total += both_failed
        print("%-45s %3d/%3d matched (%d of them failing in both)"
              % (name, ok, n, both_failed))

    try:
        os.unlink(scratch)
    except OSError:
        pass
    print("templates: %d, conversations: %d, matched: %d (%d failing in "
          "both)" % (len(names), total, matched, both_failed_total))
    return report("test_jinja_templates")


if __name__ == "__main__":
    sys.exit(main())
