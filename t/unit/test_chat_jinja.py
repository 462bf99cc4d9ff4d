#!/usr/bin/env python3
"""Chat templates: our renderer against the real template texts in jinja2.

A GGUF's tokenizer.chat_template is rendered as Hugging Face's
apply_chat_template does it (jinja2's ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks; messages, bos_token, eos_token and
add_generation_prompt), and `kvserve chat-template model.gguf` must print
exactly the same bytes for the same conversation.  Before jinja2 sees a
conversation it gets the two normalisations kvs_chat.h documents: role
"developer" becomes "system", and an array of text parts becomes the parts'
texts concatenated (the real templates here take strings only).

  (a) the Phi-3 vocabulary fixture's template (the first Phi-3-mini one):
      conversations it renders as Phi-3's later templates do, that is
      without system messages, user and assistant alternating from user,
      the generation prompt asked for exactly when the user spoke last;
      skipped, saying so, when the fixture is absent.
  (b) the Llama 3 template of the model `kvserve gen-model` writes:
      every shape of conversation, and random ones with awkward whitespace.
  (c) tool calling: every fixture template ($KVS_FIXTURES/templates) that
      reads `tools`, run as written by `kvserve chat-template --jinja`
      (kvs_chat_render() through the Jinja interpreter, the server's
      default path), on request-shaped conversations: OpenAI tools,
      assistant tool_calls with arguments as JSON text (content null,
      absent or text), tool results; jinja2 gets them as Hugging Face's
      apply_chat_template() is called by vLLM (tools as sent, None when
      absent; arguments parsed to dicts; a missing content ""; the
      "tojson", "raise_exception" and "strftime_now" of HF).  Where
      jinja2 raises, ours must fail too.
Each failure prints both renderings; the exit status is 1 if any failed.

Environment: KVS_CLI (the kvserve tool; default build/kvserve), KVS_TMP
(scratch dir), KVS_FIXTURES (../shared/fixtures).
"""

import copy
import json
import os
import random
import subprocess
import sys
from datetime import datetime, timezone

from gguf import GGUFReader
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvs_check import FIXTURES, ROOT, TMP, check, report

CLI = os.environ.get("KVS_CLI", os.path.join(ROOT, "build", "kvserve"))


# --- the reference: the template text, rendered as Hugging Face does ------

def raise_exception(message):
    raise TemplateError(message)


def jinja_render(template, messages, bos, eos, agp):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    norm = []
    for m in messages:
        c = m["content"]
        if isinstance(c, list):
            c = "".join(p["text"] for p in c)
        role = "system" if m["role"] == "developer" else m["role"]
        norm.append({"role": role, "content": c})
    return env.from_string(template).render(
        messages=norm, bos_token=bos, eos_token=eos,
        add_generation_prompt=agp)


def gguf_template(path):
    """(template text, bos text, eos text) from a GGUF's metadata."""
    r = GGUFReader(path)

    def string(f, i):
        return bytes(f.parts[f.data[i]]).decode("utf-8")

    def token(key):
        f = r.fields.get(key)
        if f is None:
            return ""
        return string(r.fields["tokenizer.ggml.tokens"],
                      int(f.parts[f.data[0]][0]))

    return (string(r.fields["tokenizer.chat_template"], 0),
            token("tokenizer.ggml.bos_token_id"),
            token("tokenizer.ggml.eos_token_id"))


# --- ours ---------------------------------------------------------------

def cli(model, messages, agp, template=None, jinja=None):
    """(status, stdout text, stderr text) of kvserve chat-template."""
    args = [CLI, "chat-template"]
    if template is not None:
        args += ["--template", template]
    if jinja is not None:
        args += ["--jinja", jinja]
    if not agp:
        args.append("--no-generation-prompt")
    p = subprocess.run(args + [model], input=json.dumps(messages).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


def compare(name, model, ref, messages, agp, template=None):
    want = jinja_render(ref[0], messages, ref[1], ref[2], agp)
    rc, got, err = cli(model, messages, agp, template)
    ok = rc == 0 and got == want
    check(ok, "%s: %s agp=%d" % (name, json.dumps(messages), agp))
    if not ok:
        print("  jinja2: %r\n  ours:   %r (status %d) %s"
              % (want, got, rc, err.strip()))


def msg(role, content):
    return {"role": role, "content": content}


def text_parts(*texts):
    return [{"type": "text", "text": t} for t in texts]


# awkward contents: Python's whitespace at both ends, inner runs, empty,
# text that is not whitespace but looks like it, marker text, non-ASCII
CONTENTS = [
    "Hi there", "", " ", "\n\n", "  padded  ", "\tTabbed\t",
    "line one\nline two\n", "\u00a0nbsp\u00a0", "\u3000ideographic\u3000",
    "\u2028sep\u2029", "\x1cfs\x1f", "\u0085nel\u0085", "\u200bzwsp\u200b",
    "\ufeffbom", "caf\u00e9 \u732b \U0001F600", "<|eot_id|> inside",
    "{{ not jinja }}", "'quotes' and \"doubles\"", "a\r\nb\r\n",
]


# --- (a) the Phi-3 fixture ------------------------------------------------

def check_phi3():
    path = os.path.join(FIXTURES, "vocab", "ggml-vocab-phi-3.gguf")
    if not os.path.exists(path):
        print("SKIP: fixture %s is absent (set KVS_FIXTURES)" % path)
        return
    ref = gguf_template(path)
    print("phi-3 fixture: bos %r, eos %r" % (ref[1], ref[2]))

    u, a = "user", "assistant"
    fixed = [
        [msg(u, "Hi there")],
        [msg(u, "Hi"), msg(a, "Hello! How can I help?"), msg(u, "2+2?")],
        [msg(u, "  spaces kept  "), msg(a, "\nnewlines kept\n"),
         msg(u, "")],
        [msg(u, text_parts("joined ", "parts"))],
        [msg(u, "caf\u00e9 \u732b")],
    ]
    for convo in fixed:
        compare("phi3", path, ref, convo, True)

    # ending with the assistant: no generation prompt on either side
    compare("phi3", path, ref, [msg(u, "Hi"), msg(a, "Yo")], False)

    rnd = random.Random(3)
    for _ in range(40):
        turns = rnd.randint(1, 6)
        convo = [msg(u if i % 2 == 0 else a, rnd.choice(CONTENTS))
                 for i in range(turns)]
        compare("phi3 random", path, ref, convo, convo[-1]["role"] == u)


# --- (b) the generated model's Llama 3 template ---------------------------

def check_llama3():
    path = os.path.join(TMP, "chat-jinja-tiny.gguf")
    subprocess.run([CLI, "gen-model", "--preset", "tiny", "--seed", "1",
                    path], check=True, stdout=subprocess.DEVNULL)
    ref = gguf_template(path)
    print("generated model: bos %r, eos %r" % (ref[1], ref[2]))

    s, d, u, a = "system", "developer", "user", "assistant"
    fixed = [
        [msg(s, "You are terse."), msg(u, "Hi there"),
         msg(a, "Hello! How can I help?"), msg(u, "What is 2+2?")],
        [msg(u, "Hi")],
        [msg(d, " Be brief. "), msg(u, "\n\tHi  there\n")],
        [msg(u, "a"), msg(s, "late system"), msg(u, "b")],
        [msg(a, "assistant first"), msg(a, "twice")],
        [msg(u, text_parts(" Hi ", " there "))],
        [msg(s, text_parts("A", "B")), msg(u, "")],
    ]
    for convo in fixed:
        for agp in (True, False):
            compare("llama3", path, ref, convo, agp)
            compare("llama3 --template", path, ref, convo, agp,
                    template="llama3")

    rnd = random.Random(1)
    roles = [s, d, u, a]
    for _ in range(100):
        convo = []
        for _ in range(rnd.randint(1, 5)):
            if rnd.random() < 0.2:
                parts = [rnd.choice(CONTENTS)
                         for _ in range(rnd.randint(1, 3))]
                content = text_parts(*parts)
            else:
                content = rnd.choice(CONTENTS)
            convo.append(msg(rnd.choice(roles), content))
        compare("llama3 random", path, ref, convo, rnd.random() < 0.7)

    # the request-object form, and what must be refused
    rc, got, _ = cli(path, {"messages": [msg(u, "Hi")]}, True)
    check(rc == 0 and got == jinja_render(ref[0], [msg(u, "Hi")], ref[1],
                                          ref[2], True),
          "a request object's messages render as the array does")

    bad = [msg(u, "x"), msg(u, [{"type": "image_url",
                                 "image_url": {"url": "http://x/y.png"}}])]
    rc, got, err = cli(path, bad, True)
    check(rc == 1 and got == "" and "messages[1].content[0].type: "
          "unsupported content part type 'image_url'" in err,
          "an image part is refused, naming the field: %d %r" % (rc, err))

    rc, got, err = cli(path, [msg("tool", "42")], True)
    check(rc == 1 and "messages[0].role" in err,
          "a tool message is refused: %r" % err)

    rc, got, err = cli(path, [msg(u, "x")], True, template="jinja")
    check(rc == 2 and "unknown chat template \"jinja\"" in err,
          "an unknown --template is a usage error: %d %r" % (rc, err))


# --- (c) tool calling through the fixture templates ----------------------

def strftime_now(fmt):
    return datetime.now(timezone.utc).strftime(fmt)


def hf_tojson(x, ensure_ascii=False, indent=None, separators=None,
              sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def hf_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = hf_tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def vllm_messages(messages):
    """The messages as vLLM hands them to apply_chat_template(): content
    None or absent is "", tool_calls' arguments parsed (an object's text
    becomes the dict; other text is left, where vLLM's json.loads would
    make a list or raise), null tool fields absent."""
    out = []
    for m in messages:
        m = copy.deepcopy(m)
        if m.get("content") is None:
            m["content"] = ""
        for k in ("tool_calls", "tool_call_id", "name"):
            if k in m and m[k] is None:
                del m[k]
        for call in m.get("tool_calls", []):
            a = call["function"]["arguments"]
            try:
                v = json.loads(a)
            except ValueError:
                continue
            if isinstance(v, dict):
                call["function"]["arguments"] = v
        out.append(m)
    return out


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string",
                         "description": "The city, e.g. São Paulo"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}, {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web. Returns snippets.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "number", "minimum": 0.5},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query"],
        },
    },
}]

# OpenAI's least definition: no description, no parameters (templates that
# print them raise, in jinja2 as here)
BARE_TOOL = {"type": "function", "function": {"name": "no_params"}}


def call(cid, name, args):
    text = args if isinstance(args, str) else json.dumps(args,
                                                         ensure_ascii=False)
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": text}}


def tool_conversations():
    """(label, request) pairs shaped as OpenAI clients send them"""
    u = {"role": "user", "content": "What's the weather in Zürich?"}
    one = call("call12345", "get_current_weather",
               {"city": "Zürich", "unit": "celsius", "days": 2})
    res = {"role": "tool", "tool_call_id": "call12345",
           "content": json.dumps({"temperature": 21.5, "sky": "clear"})}
    out = [
        ("tools only", {"messages": [u], "tools": TOOLS}),
        ("system + tools", {"messages": [
            {"role": "system", "content": "You can call tools."}, u],
            "tools": TOOLS}),
        ("round trip, content null", {"messages": [
            u, {"role": "assistant", "content": None, "tool_calls": [one]},
            res, {"role": "assistant", "content": "21.5 °C and clear."},
            {"role": "user", "content": "Thanks!"}], "tools": TOOLS}),
        ("round trip, content absent, result named", {"messages": [
            u, {"role": "assistant", "tool_calls": [one]},
            dict(res, name="get_current_weather")], "tools": TOOLS}),
        ("round trip, content text", {"messages": [
            u, {"role": "assistant", "content": "Let me check.",
                "tool_calls": [one]}, res], "tools": TOOLS}),
        ("round trip, no tools", {"messages": [
            u, {"role": "assistant", "content": None, "tool_calls": [one]},
            res]}),
        ("null tool fields", {"messages": [
            dict(u, name=None, tool_calls=None),
            {"role": "assistant", "content": "Hi.", "tool_calls": None}],
            "tools": TOOLS}),
        ("parallel calls", {"messages": [
            {"role": "system", "content": "Be quick."},
            {"role": "user", "content": "Weather in Oslo, and news."},
            {"role": "assistant", "content": None, "tool_calls": [
                call("call00001", "get_current_weather", {"city": "Oslo"}),
                call("call00002", "search",
                     {"query": "news", "limit": 3, "tags": ["wörld"]})]},
            {"role": "tool", "tool_call_id": "call00001",
             "content": "{\"temperature\": -3}"},
            {"role": "tool", "tool_call_id": "call00002",
             "content": "no results"}], "tools": TOOLS}),
        ("arguments not an object", {"messages": [
            u, {"role": "assistant", "content": None, "tool_calls": [
                call("call12345", "search", "[1, 2]")]},
            dict(res, content="ok")], "tools": TOOLS}),
        ("arguments not JSON", {"messages": [
            u, {"role": "assistant", "content": None, "tool_calls": [
                call("call12345", "search", "{query: oops")]},
            dict(res, content="ok")], "tools": TOOLS}),
        ("arguments empty object, spaced", {"messages": [
            u, {"role": "assistant", "content": None, "tool_calls": [
                call("call12345", "search", " {} ")]},
            dict(res, content="")], "tools": TOOLS}),
        ("bare tool definition", {"messages": [
            u, {"role": "assistant", "content": None, "tool_calls": [
                call("call12345", "no_params", "{}")]},
            dict(res, content="done")], "tools": TOOLS + [BARE_TOOL]}),
    ]
    return out


def check_tools(model):
    tdir = os.path.join(FIXTURES, "templates")
    if not os.path.isdir(tdir):
        print("SKIP: fixture %s is absent (set KVS_FIXTURES)" % tdir)
        return
    ref = gguf_template(model)
    env = hf_env()
    tmpls = 0
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".jinja"):
            continue
        path = os.path.join(tdir, name)
        text = open(path, encoding="utf-8").read()
        if "tools" not in text:
            continue
        tmpls += 1
        tpl = env.from_string(text)
        n = same = failed = 0
        for label, req in tool_conversations():
            for agp in (True, False):
                try:
                    want = tpl.render(messages=vllm_messages(req["messages"]),
                                      tools=req.get("tools"),
                                      bos_token=ref[1], eos_token=ref[2],
                                      add_generation_prompt=agp)
                    want_ok = True
                except Exception as e:    # any raise is a refused request
                    want, want_ok = "%s: %s" % (type(e).__name__, e), False
                rc, got, err = cli(model, req, agp, jinja=path)
                ok = (rc == 0 and want_ok and got == want) \
                    or (rc != 0 and not want_ok)
                n += 1
                same += ok
                failed += ok and not want_ok
                check(ok, "%s [%s, agp=%d]" % (name, label, agp))
                if not ok:
                    i = next((k for k in range(min(len(want), len(got)))
                              if want[k] != got[k]), min(len(want), len(got)))
                    print("  jinja2 (%s): %r\n  ours (status %d): %r %s"
                          % ("ok" if want_ok else "raised",
                             want[max(0, i - 60):i + 60], rc,
                             got[max(0, i - 60):i + 60], err.strip()))
        print("tools %-40s %2d/%2d identical (%d refused by both)"
              % (name, same, n, failed))
    check(tmpls > 0, "some fixture template reads tools")


def main():
    if not os.access(CLI, os.X_OK):
        print("test_chat_jinja: %s is not an executable (set KVS_CLI)" % CLI)
        return 1
    os.makedirs(TMP, exist_ok=True)
    check_phi3()
    check_llama3()
    check_tools(os.path.join(TMP, "chat-jinja-tiny.gguf"))
    return report("test_chat_jinja")


if __name__ == "__main__":
    sys.exit(main())
