#!/usr/bin/env python3
"""Tool calling through the official openai Python SDK, unchanged, against
nginx with the kvserve module (the `sdk` target runs it after
test_openai_sdk.py, whose Nginx class it reuses).

Five generated tiny models carry real published templates from the
fixtures: Llama 3.1's (tool calls as a JSON object with "parameters"),
Qwen 2.5's (Hermes <tool_call> blocks), DeepSeek V3's (its
<｜tool▁call▁begin｜> blocks; not in the two-turn case, see TWO_TURNS),
Llama 4's (JSON calls back to back), Command R7B's (a
<|START_ACTION|> list of "tool_name"s, its long preamble: a larger
context), Functionary v3.2's and MiniCPM3's (python calls with keyword
arguments, streamed as JSON).  Their weights are random, so
their text is noise: whatever calls come out, the grammar made them.
What must hold on each:

- tool_choice "required": finish_reason "tool_calls", every call a
  declared function with fresh "call_" ids, arguments that parse and
  that `jsonschema` validates against that function's parameters;
- a named function: only that one; parallel_tool_calls false: one call;
- "auto": either text or calls, the calls valid as above;
- "none": text, no tool_calls;
- streaming (sync and async): delta.tool_calls joined by index equal the
  calls of the same seeded request without streaming (ids aside; the
  arguments as parsed JSON: a stream sends the generated text compacted,
  a body jansson's compact form);
- max_tokens cutting a call short: finish_reason "length", no calls;
- a two-turn conversation: the assistant's tool_calls and the tool
  results sent back are rendered (the prompt grows by them) and answered;
- refusals: an unsupported parameters keyword, stop beside tools, tools
  on a model whose template has no tool syntax: 400 naming the field;
- Functionary v3.2 (whose text answers begin with an "all" recipient
  line) without tools: text, no calls, the same streamed as not, never
  beginning with that line.

Environment: as test_openai_sdk.py; needs the kvserve tool (KVS_CLI,
default build/kvserve) and the fixture templates; skips naming a missing
one.
"""

import asyncio
import json
import os
import subprocess
import sys

import jsonschema
import openai

from kvs_check import FIXTURES, ROOT, TMP, check, report
from test_openai_sdk import (MODEL, MODULE, NGINX, TINY, Nginx,
                             check_kv_back, raises)

CLI = os.environ.get("KVS_CLI", os.path.join(ROOT, "build", "kvserve"))
TEMPLATES = {
    "tiny-llama31": "llama-3.1-8b-instruct.jinja",
    "tiny-qwen25": "qwen2.5-7b-instruct.jinja",
    "tiny-deepseek3": "deepseek-v3.jinja",
    "tiny-llama4": "llama-4.jinja",
    "tiny-commandr7b": "command-r7b-12-2024-tool_use.jinja",
    "tiny-functionary32": "functionary-medium-v3.2.jinja",
    "tiny-minicpm3": "minicpm3-4b.jinja",
}
# Command R7B's system preamble alone is ~5,000 bytes
CTX = {"tiny-commandr7b": 8192}
# DeepSeek V3's template writes an assistant turn's tool calls only when
# its content is None and their arguments only as a string, which an
# OpenAI request's turn (content "", arguments parsed for the template
# as vLLM does) is not: its second turn is not rendered as trained
TWO_TURNS = {"tiny-llama31", "tiny-qwen25", "tiny-llama4",
             "tiny-commandr7b", "tiny-minicpm3"}
MAX_TOKENS = 400

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["c", "f"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "integer", "minimum": -12,
                                    "maximum": 14}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def gen_model(name):
    tpl = os.path.join(FIXTURES, "templates", TEMPLATES[name])
    if not os.path.exists(tpl):
        return None, tpl
    out = os.path.join(TMP, "%s.gguf" % name)
    subprocess.run([CLI, "gen-model", "--preset", "tiny", "--ctx",
                    str(CTX.get(name, 4096)),
                    "--vocab", "2048", "--seed", "11",
                    "--chat-template", tpl, out], check=True,
                   capture_output=True)
    return out, tpl


def calls_valid(calls, names, what):
    """Every call is one of `names`, with valid arguments and an id."""
    why = []
    ids = set()
    for c in calls:
        if c.type != "function" or not c.id.startswith("call_"):
            why.append("call %r" % c)
        ids.add(c.id)
        if c.function.name not in names:
            why.append("name %r" % c.function.name)
            continue
        try:
            jsonschema.validate(json.loads(c.function.arguments),
                                PARAMS[c.function.name])
        except (ValueError, jsonschema.ValidationError) as e:
            why.append("%s(%s): %s" % (c.function.name, c.function.arguments,
                                       str(e).splitlines()[0]))
    if len(ids) != len(calls):
        why.append("ids not distinct")
    check(not why, "%s: %d calls valid %s" % (what, len(calls), why))


def create(cl, model, **kw):
    kw.setdefault("messages", USER)
    kw.setdefault("max_tokens", MAX_TOKENS)
    return cl.chat.completions.create(model=model, tools=TOOLS, **kw)


def joined(stream_events):
    """delta.tool_calls joined by index (with how many argument pieces
    each came in), content, finish."""
    calls, text, finish = {}, "", None
    for ev in stream_events:
        for c in ev.choices:
            text += c.delta.content or ""
            for t in c.delta.tool_calls or []:
                d = calls.setdefault(t.index, {"id": None, "name": "",
                                               "arguments": "", "pieces": 0})
                if t.id:
                    d["id"] = t.id
                if t.function and t.function.name:
                    d["name"] += t.function.name
                if t.function and t.function.arguments:
                    d["arguments"] += t.function.arguments
                    d["pieces"] += 1
            finish = c.finish_reason or finish
    return [calls[i] for i in sorted(calls)], text, finish


def plain(calls):
    """(name, arguments as parsed) of SDK tool calls."""
    return [(c.function.name, json.loads(c.function.arguments))
            for c in calls]


def plain_joined(calls):
    """The same of joined() calls; None for arguments that do not parse."""
    out = []
    for c in calls:
        try:
            out.append((c["name"], json.loads(c["arguments"])))
        except ValueError:
            out.append((c["name"], None))
    return out


def test_choices(cl, model):
    for seed in range(3):
        r = create(cl, model, tool_choice="required", seed=seed)
        c = r.choices[0]
        check(c.finish_reason == "tool_calls" and c.message.tool_calls,
              "%s required seed %d: finish %s, calls %r"
              % (model, seed, c.finish_reason, c.message.tool_calls))
        calls_valid(c.message.tool_calls or [], PARAMS,
                    "%s required seed %d" % (model, seed))

    r = create(cl, model, seed=4, parallel_tool_calls=False,
               tool_choice={"type": "function",
                            "function": {"name": "get_time"}})
    c = r.choices[0]
    check(c.finish_reason == "tool_calls"
          and len(c.message.tool_calls or []) == 1,
          "%s named, not parallel: one call (%r)"
          % (model, c.message.tool_calls))
    calls_valid(c.message.tool_calls or [], {"get_time"},
                "%s named get_time" % model)

    n_calls = n_text = 0
    for seed in range(4):
        c = create(cl, model, seed=100 + seed).choices[0]
        if c.message.tool_calls:
            n_calls += 1
            check(c.finish_reason == "tool_calls", "%s auto: calls finish "
                  "tool_calls" % model)
            calls_valid(c.message.tool_calls, PARAMS, "%s auto" % model)
        else:
            n_text += 1
            check(c.finish_reason in ("stop", "length")
                  and isinstance(c.message.content, str),
                  "%s auto: text (%s)" % (model, c.finish_reason))
    print("%s auto: %d with calls, %d text" % (model, n_calls, n_text))

    c = create(cl, model, seed=7, tool_choice="none").choices[0]
    check(not c.message.tool_calls and c.finish_reason in ("stop", "length"),
          "%s none: text only (%s)" % (model, c.finish_reason))

    c = create(cl, model, seed=8, tool_choice="required",
               max_tokens=3).choices[0]
    check(c.finish_reason == "length" and not c.message.tool_calls
          and isinstance(c.message.content, str),
          "%s required cut by max_tokens: length, text %r"
          % (model, c.message.content))


def test_stream(cl, base, model):
    for seed in (21, 22):
        whole = create(cl, model, seed=seed, tool_choice="required")
        calls, text, finish = joined(create(cl, model, seed=seed,
                                            tool_choice="required",
                                            stream=True))
        want = plain(whole.choices[0].message.tool_calls or [])
        check(finish == "tool_calls" and plain_joined(calls) == want
              and all(c["id"] and c["id"].startswith("call_")
                      for c in calls),
              "%s stream seed %d: the same calls as without streaming "
              "(%r vs %r)" % (model, seed, calls, want))
        # the engine's frames carry every token a step made ready, several
        # when the worker reads late, so a short call may come whole; the
        # piece-by-piece reading is t/unit/test_tool_stream.c's to prove
        print("%s stream seed %d: argument pieces per call %r"
              % (model, seed, [c["pieces"] for c in calls]))

    async def run():
        # a client per event loop: its connections belong to the loop
        acl = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0,
                                 timeout=300)

        async def one(seed):
            s = await acl.chat.completions.create(
                model=model, tools=TOOLS, messages=USER, seed=seed,
                max_tokens=MAX_TOKENS, tool_choice="required", stream=True)
            evs = [ev async for ev in s]
            return joined(evs)

        async def whole(seed):
            r = await acl.chat.completions.create(
                model=model, tools=TOOLS, messages=USER, seed=seed,
                max_tokens=MAX_TOKENS, tool_choice="required")
            return plain(r.choices[0].message.tool_calls or [])

        seeds = [31, 32, 33, 34]
        got = await asyncio.gather(*[one(s) for s in seeds])
        want = await asyncio.gather(*[whole(s) for s in seeds])
        await acl.close()
        return got, want

    got, want = asyncio.run(run())
    for (calls, _, finish), w in zip(got, want):
        check(finish == "tool_calls" and plain_joined(calls) == w,
              "%s async stream = async whole (%r vs %r)" % (model, calls, w))

    # cut by max_tokens inside a call: streamed as far as it got, length
    calls, _, finish = joined(create(cl, model, seed=21, stream=True,
                                     tool_choice="required", max_tokens=12))
    check(finish == "length", "%s stream cut by max_tokens: length (%s, %r)"
          % (model, finish, calls))


def test_two_turns(cl, model):
    r = create(cl, model, seed=41, tool_choice="required",
               parallel_tool_calls=False)
    m = r.choices[0].message
    check(m.tool_calls and len(m.tool_calls) == 1,
          "%s turn 1: one call" % model)
    if not m.tool_calls:
        return
    msgs = list(USER) + [
        {"role": "assistant", "content": m.content,
         "tool_calls": [t.model_dump() for t in m.tool_calls]},
        {"role": "tool", "tool_call_id": m.tool_calls[0].id,
         "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    r2 = create(cl, model, seed=42, messages=msgs, tool_choice="none")
    c = r2.choices[0]
    check(c.finish_reason in ("stop", "length") and not c.message.tool_calls,
          "%s turn 2 (none): text" % model)
    check(r2.usage.prompt_tokens > r.usage.prompt_tokens + 5,
          "%s turn 2: the call and its result are in the prompt (%d > %d)"
          % (model, r2.usage.prompt_tokens, r.usage.prompt_tokens))
    r3 = create(cl, model, seed=43, messages=msgs, tool_choice="required")
    calls_valid(r3.choices[0].message.tool_calls or [], PARAMS,
                "%s turn 2 (required)" % model)
    check(bool(r3.choices[0].message.tool_calls),
          "%s turn 2 (required): calls" % model)


def test_no_tools(cl, model):
    """A request without tools to a model whose syntax has a recipient
    line: its output is read as text (the line dropped)."""
    for seed in (51, 52):
        kw = dict(model=model, messages=USER, seed=seed, max_tokens=24)
        whole = cl.chat.completions.create(**kw).choices[0]
        calls, text, finish = joined(cl.chat.completions.create(
            stream=True, **kw))
        check(not whole.message.tool_calls and not calls
              and whole.finish_reason in ("stop", "length")
              and finish == whole.finish_reason
              and text == (whole.message.content or "")
              and not text.startswith("all\n"),
              "%s no tools seed %d: text, streamed = whole (%r vs %r)"
              % (model, seed, text, whole.message.content))


def test_refusals(cl, model):
    bad = dict(WEATHER)
    bad["function"] = dict(WEATHER["function"],
                           parameters={"type": "object", "properties": {
                               "x": {"type": "string",
                                     "format": "hostname"}}})
    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=model, messages=USER, tools=[bad]))
    check(e is not None and e.param is not None
          and e.param.startswith("tools[0].function.parameters"),
          "%s unsupported parameters keyword: 400 naming it (%s)"
          % (model, e and e.param))

    e = raises(openai.BadRequestError, lambda: create(cl, model, stop=["x"]))
    check(e is not None and e.param == "stop", "%s tools and stop: 400 "
          "naming stop" % model)

    # the default tiny model's template teaches no tool syntax
    e = raises(openai.BadRequestError, lambda: create(cl, TINY))
    check(e is not None and e.param == "tools",
          "tools on a model with no tool syntax: 400 naming tools")
    r = create(cl, TINY, tool_choice="none", max_tokens=4)
    check(not r.choices[0].message.tool_calls,
          "tool_choice none on such a model: text")


def main():
    for path in (NGINX, MODULE, MODEL, CLI):
        if not os.path.exists(path):
            print("test_openai_tools: missing %s" % path)
            return 1
    models = [(TINY, MODEL)]
    for name in TEMPLATES:
        path, tpl = gen_model(name)
        if path is None:
            print("SKIP %s: %s not found (set KVS_FIXTURES)" % (name, tpl))
            continue
        models.append((name, path))
    if len(models) == 1:
        return report("test_openai_tools")

    ngx = Nginx(models)
    ngx.start()
    ok = False
    try:
        cl = openai.OpenAI(base_url=ngx.base + "/v1", api_key="x",
                           max_retries=0, timeout=300)
        print("openai %s against %s" % (openai.__version__, ngx.base))
        kv0 = ngx.status()
        for name, _ in models[1:]:
            test_refusals(cl, name)
            test_choices(cl, name)
            test_stream(cl, ngx.base + "/v1", name)
            if name in TWO_TURNS:
                test_two_turns(cl, name)
            if name == "tiny-functionary32":
                test_no_tools(cl, name)
        check_kv_back(ngx, kv0, len(models))
        log = ngx.error_log()
        check("[alert]" not in log and "[crit]" not in log,
              "no alert/crit in the error log")
        ok = True
    finally:
        ngx.stop(ok)
    return report("test_openai_tools")


if __name__ == "__main__":
    sys.exit(main())
