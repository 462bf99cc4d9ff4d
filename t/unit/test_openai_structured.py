#!/usr/bin/env python3
"""response_format through the official openai Python SDK, unchanged,
against nginx with the kvserve module (the `sdk` target runs it after
test_openai_sdk.py, whose Nginx class it reuses).

What must hold, on the tiny random model (its text is noise: the grammar
alone makes the output JSON):

- 200 seeded requests, each with a random schema from the generator
  below (objects, arrays, enums, bounded integers and numbers, strings
  with maxLength, format or pattern, anyOf, nesting), each return output
  that parses and that `jsonschema` (PyPI, an independent validator)
  validates, with finish_reason "stop"; the schemas are bounded so that
  a complete output fits max_tokens;
- the same seed gives the same output again;
- json_object gives a JSON object (or, cut by max_tokens, "length");
- the SDK's own structured-output helper (chat.completions.parse with a
  pydantic model, which sends a strict json_schema) parses its answer;
- streaming: the deltas join into a valid output;
- /v1/completions takes response_format (an extension, via extra_body);
- an unsupported keyword is a BadRequestError whose param names it.

Environment: as test_openai_sdk.py; KVS_STRUCTURED_N (default 200) sets
the number of random-schema requests.
"""

import concurrent.futures
import importlib.metadata
import json
import os
import random
import sys
import typing

import jsonschema
import openai
import pydantic

from kvs_check import check, report
from test_openai_sdk import MODEL, MODULE, NGINX, TINY, Nginx, raises

JSV = importlib.metadata.version("jsonschema")
N_RANDOM = int(os.environ.get("KVS_STRUCTURED_N", "200"))
MAX_TOKENS = 480                      # the tiny model's context is 512


# --- the random schema generator -----------------------------------------

WORDS = ["red", "green", "blue", "alpha", "beta", "x", "y", "zed", "on",
         "off", "k1", "k2"]
# bounded ones only: an unbounded string (email's local part, x+) lets a
# random model run to max_tokens
PATTERNS = ["^[a-z]{1,6}$", "^[A-Z][0-9]{2}$", "^(yes|no)$",
            "^[0-9]{3}-[0-9]{4}$", "^x{1,4}y?$"]
FORMATS = ["uuid", "date"]


def gen_scalar(rng):
    k = rng.randrange(9)
    if k == 0:
        lo = rng.randint(-1000, 1000)
        return {"type": "integer", "minimum": lo,
                "maximum": lo + rng.randint(0, 5000)}
    if k == 1:
        lo = rng.randint(-50, 50)
        return {"type": "number", "minimum": lo,
                "maximum": lo + rng.randint(1, 100)}
    if k == 2:
        return {"type": "boolean"}
    if k == 3:
        return {"type": "null"}
    if k == 4:
        vals = rng.sample(WORDS, rng.randint(1, 4))
        if rng.random() < 0.3:
            vals.append(rng.randint(-9, 99))
        return {"enum": vals}
    if k == 5:
        s = {"type": "string", "maxLength": rng.randint(0, 8)}
        if rng.random() < 0.5:
            s["minLength"] = rng.randint(0, s["maxLength"])
        return s
    if k == 6:
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    if k == 7:
        return {"type": "string", "format": rng.choice(FORMATS)}
    return {"const": rng.choice(WORDS)}


def gen_schema(rng, depth=0):
    k = rng.randrange(10) if depth < 2 else 0
    if k <= 3:
        return gen_scalar(rng)
    if k <= 6:
        n = rng.randint(1, 3)
        names = rng.sample(["id", "name", "value", "items", "meta", "when",
                            "kind", "n", "flag", "note"], n)
        props = {p: gen_schema(rng, depth + 1) for p in names}
        req = [p for p in names if rng.random() < 0.7]
        s = {"type": "object", "properties": props,
             "additionalProperties": False}
        if req:
            s["required"] = req
        if rng.random() < 0.3:
            s["title"] = "T%d" % depth
        return s
    if k <= 8:
        s = {"type": "array", "items": gen_schema(rng, depth + 1),
             "maxItems": rng.randint(0, 2)}
        s["minItems"] = rng.randint(0, s["maxItems"])
        return s
    return {"anyOf": [gen_schema(rng, depth + 1),
                      gen_schema(rng, depth + 1)]}


def validator(schema):
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def valid(schema, text):
    """'' when text parses and validates, else why not."""
    try:
        x = json.loads(text)
    except ValueError as e:
        return "not JSON (%s): %r" % (e, text)
    errs = [e.message for e in validator(schema).iter_errors(x)]
    return "; ".join(errs)


def rf_schema(schema, name="s", strict=None):
    js = {"name": name, "schema": schema}
    if strict is not None:
        js["strict"] = strict
    return {"type": "json_schema", "json_schema": js}


# --- the cases -----------------------------------------------------------

def test_random(cl):
    rng = random.Random(20261202)
    cases = [(i, gen_schema(rng), 1000 + i) for i in range(N_RANDOM)]

    def one(case):
        i, schema, seed = case
        r = cl.chat.completions.create(
            model=TINY, messages=[{"role": "user", "content": "JSON"}],
            max_tokens=MAX_TOKENS, seed=seed,
            temperature=(0, 0.7, 1.0, 1.3)[i % 4],
            top_p=(1.0, 0.9)[i % 2],
            response_format=rf_schema(schema, strict=bool(i % 2)))
        c = r.choices[0]
        return c.finish_reason, c.message.content

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, cases))

    bad = []
    for (i, schema, seed), (finish, text) in zip(cases, got):
        why = valid(schema, text) if finish == "stop" else \
            "finish_reason %s" % finish
        if why:
            bad.append("#%d seed %d %s: %s -> %r"
                       % (i, seed, json.dumps(schema), why, text))
    for b in bad[:10]:
        print("  " + b)
    check(not bad, "%d random schemas, seeded: all outputs validate with "
          "jsonschema %s (%d failed)" % (len(cases), JSV,
                                        len(bad)))

    # the same seed again: the same output (a few of them)
    again = list(map(one, cases[:8]))
    check(again == got[:8], "a seed gives the same structured output again")


def test_json_object(cl):
    for seed in range(4):
        r = cl.chat.completions.create(
            model=TINY, messages=[{"role": "user", "content": "JSON"}],
            max_tokens=300, seed=seed, response_format={"type":
                                                        "json_object"})
        c = r.choices[0]
        if c.finish_reason == "stop":
            x = json.loads(c.message.content)
            check(isinstance(x, dict), "json_object seed %d: an object"
                  % seed)
        else:
            check(c.finish_reason == "length"
                  and c.message.content.startswith("{"),
                  "json_object seed %d: cut short, length" % seed)


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=10)
    age: int = pydantic.Field(ge=0, le=150)
    colour: typing.Literal["red", "green", "blue"]
    tags: typing.List[typing.Literal["a", "b", "c"]] = pydantic.Field(
        max_length=3)


def test_parse(cl):
    for seed in range(3):
        r = cl.chat.completions.parse(
            model=TINY, messages=[{"role": "user", "content": "Who?"}],
            max_tokens=MAX_TOKENS, seed=seed, response_format=Person)
        p = r.choices[0].message.parsed
        check(isinstance(p, Person) and len(p.name) <= 10
              and 0 <= p.age <= 150,
              "chat.completions.parse(Person) seed %d: %r" % (seed, p))


def test_stream_and_completions(cl):
    schema = {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 99},
        "b": {"enum": ["x", "y"]}}, "required": ["a", "b"],
        "additionalProperties": False}
    s = cl.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": "hi"}],
        max_tokens=MAX_TOKENS, seed=5, stream=True,
        response_format=rf_schema(schema))
    text, finish = "", None
    for ev in s:
        for c in ev.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    check(finish == "stop" and valid(schema, text) == "",
          "chat stream with json_schema: %r validates" % text)

    r = cl.completions.create(model=TINY, prompt="abc",
                              max_tokens=MAX_TOKENS, seed=6,
                              extra_body={"response_format":
                                          rf_schema(schema)})
    check(r.choices[0].finish_reason == "stop"
          and valid(schema, r.choices[0].text) == "",
          "completions with response_format: %r validates"
          % r.choices[0].text)


def test_refusals(cl):
    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": "hi"}],
        response_format=rf_schema({"type": "object", "properties": {
            "x": {"type": "string", "format": "hostname"}}})))
    check(e is not None and e.status_code == 400
          and e.param == "response_format.json_schema.schema.properties.x"
                         ".format"
          and "hostname" in str(e),
          "unsupported format: 400 naming its path")

    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": "hi"}],
        response_format=rf_schema({"type": "object",
                                   "patternProperties": {"^a": {}}})))
    check(e is not None
          and e.param == "response_format.json_schema.schema."
                         "patternProperties",
          "patternProperties: 400 naming it")

    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": "hi"}],
        response_format={"type": "yaml"}))
    check(e is not None and e.param == "response_format.type",
          "type yaml: 400 naming response_format.type")


def main():
    for path in (NGINX, MODULE, MODEL):
        if not os.path.exists(path):
            print("test_openai_structured: missing %s" % path)
            return 1

    ngx = Nginx([(TINY, MODEL)])
    ngx.start()
    ok = False
    try:
        cl = openai.OpenAI(base_url=ngx.base + "/v1", api_key="x",
                           max_retries=0, timeout=300)
        print("openai %s, jsonschema %s against %s"
              % (openai.__version__, JSV, ngx.base))
        test_refusals(cl)
        test_json_object(cl)
        test_parse(cl)
        test_stream_and_completions(cl)
        test_random(cl)
        log = ngx.error_log()
        check("[alert]" not in log and "[crit]" not in log,
              "no alert/crit in the error log")
        ok = True
    finally:
        ngx.stop(ok)
    return report("test_openai_structured")


if __name__ == "__main__":
    sys.exit(main())
