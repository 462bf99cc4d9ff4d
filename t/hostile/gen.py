#!/usr/bin/env python3
"""The hostile request corpus that t/025-hostile.t replays (issue 18).

Writes, into the directory given as the only argument, one file per case
(NNN-name.http: the raw bytes sent on one connection, request line and
all, so that broken framing can be written too) and index.tsv, one line
per case: the file name and what the answer must be:

  4xx   a 400..499 answer whose body is an OpenAI error object;
  err   an error object with any status >= 400 (nginx's 501 and 505);
  json  any answer of the API, 2xx or 4xx, with a JSON body (a valid
        request sent in an odd way, or one whose refusal depends on caps
        other work adds: these must never crash or leak, whatever they
        answer).

Deterministic: no randomness, no clock; the same run writes the same
bytes (the suite runs it at test time, so no large data sits in the tree,
and `gen.py DIR` shows a reviewer every case).  The cases target the
server t/025-hostile.t writes: the tiny default model "kvserve-tiny"
(context 512, vocabulary 512) at /v1/, client_max_body_size 1m.
"""

import json
import os
import sys

MODEL = "kvserve-tiny"
CASES = []


def raw(name, data, expect="4xx"):
    if isinstance(data, str):
        data = data.encode("latin-1")
    CASES.append((name, data, expect))


def post(name, path, body, expect="4xx", headers=""):
    if isinstance(body, str):
        body = body.encode("utf-8")
    head = ("POST %s HTTP/1.1\r\nHost: localhost\r\n"
            "Content-Type: application/json\r\n%s"
            "Content-Length: %d\r\nConnection: close\r\n\r\n"
            % (path, headers, len(body)))
    raw(name, head.encode("latin-1") + body, expect)


def get(name, path, method="GET", expect="4xx"):
    raw(name, "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close"
        "\r\n\r\n" % (method, path), expect)


def obj(d):
    return json.dumps(d, separators=(",", ":"))


def cmpl(name, extra, expect="4xx", base=None):
    b = {"model": MODEL, "prompt": "a", "max_tokens": 1}
    if base is not None:
        b = base
    b = dict(b)
    b.update(extra)
    post("cmpl-" + name, "/v1/completions", obj(b), expect)


def chat(name, extra, expect="4xx", base=None):
    b = {"model": MODEL, "max_tokens": 1,
         "messages": [{"role": "user", "content": "a"}]}
    if base is not None:
        b = base
    b = dict(b)
    b.update(extra)
    post("chat-" + name, "/v1/chat/completions", obj(b), expect)


def msgs(name, messages, expect="4xx"):
    chat(name, {"messages": messages}, expect)


def framing():
    h = "Host: localhost\r\n"
    raw("line-junk-after-version", "GET /v1/models HTTP/1.1 x\r\n" + h
        + "\r\n")
    raw("line-control-bytes", "\x01\x02 / HTTP/1.1\r\n" + h + "\r\n")
    raw("line-lowercase-method", "get /v1/models HTTP/1.1\r\n" + h + "\r\n")
    raw("line-no-uri", "GET HTTP/1.1\r\n" + h + "\r\n")
    raw("line-bad-version", "GET /v1/models HTTP/x.y\r\n" + h + "\r\n")
    raw("line-version-3", "GET /v1/models HTTP/3.0\r\n" + h + "\r\n", "err")
    raw("line-version-huge", "GET /v1/models HTTP/1.99999\r\n" + h + "\r\n",
        "err")
    raw("line-nul", "GET /v1/mo\x00dels HTTP/1.1\r\n" + h + "\r\n")
    raw("line-bare-lf", "GET /v1/models HTTP/1.1\n" + h + "\n", "json")
    raw("uri-huge", "GET /v1/" + "a" * 12000 + " HTTP/1.1\r\n" + h
        + "\r\n")
    raw("uri-huge-post", "POST /v1/completions?" + "q" * 20000
        + " HTTP/1.1\r\n" + h + "Content-Length: 2\r\n\r\n{}")
    raw("uri-encoded-nul", "GET /v1/models%00x HTTP/1.1\r\n" + h + "\r\n")
    raw("uri-dotdot", "GET /v1/../../etc/passwd HTTP/1.1\r\n" + h
        + "\r\n", "json")
    raw("uri-absolute", "GET http://localhost/v1/models HTTP/1.1\r\n" + h
        + "\r\n", "json")
    raw("uri-bad-percent", "GET /v1/models/%zz HTTP/1.1\r\n" + h + "\r\n")
    raw("no-host", "GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n")
    raw("two-hosts", "GET /v1/models HTTP/1.1\r\n" + h + h + "\r\n")
    raw("host-bad", "GET /v1/models HTTP/1.1\r\nHost: a/../b\r\n\r\n")
    raw("header-huge", "GET /v1/models HTTP/1.1\r\n" + h + "X-Big: "
        + "b" * 12000 + "\r\n\r\n")
    raw("header-nul", "GET /v1/models HTTP/1.1\r\n" + h
        + "X-A: a\x00b\r\n\r\n")
    raw("header-no-colon", "GET /v1/models HTTP/1.1\r\n" + h
        + "Broken header line\r\n\r\n", "json")
    raw("headers-many", "GET /v1/models HTTP/1.1\r\n" + h
        + "".join("X-H%d: v\r\n" % i for i in range(2000)) + "\r\n", "json")
    raw("headers-over-buffers", "GET /v1/models HTTP/1.1\r\n" + h
        + "".join("X-H%d: %s\r\n" % (i, "v" * 7000) for i in range(6))
        + "\r\n")
    body = '{"model":"%s","prompt":"a","max_tokens":1}' % MODEL
    p = "POST /v1/completions HTTP/1.1\r\n" + h
    raw("te-gzip", p + "Transfer-Encoding: gzip\r\n\r\n", "err")
    raw("te-chunked-gzip", p + "Transfer-Encoding: chunked, gzip\r\n\r\n",
        "err")
    raw("te-and-cl", p + "Content-Length: 5\r\nTransfer-Encoding: "
        "chunked\r\n\r\n0\r\n\r\n")
    raw("cl-negative", p + "Content-Length: -1\r\n\r\n")
    raw("cl-alpha", p + "Content-Length: abc\r\n\r\n")
    raw("cl-twice", p + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}")
    raw("cl-overflow", p + "Content-Length: 99999999999999999999999\r\n"
        "\r\n")
    raw("cl-over-max", p + "Content-Length: 50000000\r\n\r\n{")
    raw("cl-short-body", p + "Content-Length: 3\r\n\r\n" + body, "json")
    raw("chunk-bad-size", p + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}"
        "\r\n0\r\n\r\n")
    raw("chunk-size-overflow", p + "Transfer-Encoding: chunked\r\n\r\n"
        "fffffffffffffffffffff\r\n{}\r\n0\r\n\r\n")
    raw("chunk-over-max", p + "Transfer-Encoding: chunked\r\n\r\n"
        "f00000\r\n{\"model\"")
    raw("chunk-no-crlf", p + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}"
        "xx0\r\n\r\n")
    raw("chunk-negative", p + "Transfer-Encoding: chunked\r\n\r\n-2\r\n{}"
        "\r\n0\r\n\r\n")
    raw("chunked-valid", p + "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s"
        "\r\n0\r\n\r\n" % (len(body), body), "json")
    raw("chunked-empty", p + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    raw("post-no-length", p + "Connection: close\r\n\r\n")


def endpoints():
    get("models-post", "/v1/models", "POST")
    get("models-delete", "/v1/models/" + MODEL, "DELETE")
    get("completions-get", "/v1/completions")
    get("chat-get", "/v1/chat/completions")
    get("chat-put", "/v1/chat/completions", "PUT")
    get("unknown-path", "/v1/nope")
    get("unknown-model", "/v1/models/no-such-model")
    get("model-id-huge", "/v1/models/" + "m" * 3000)
    get("options", "/v1/completions", "OPTIONS")
    get("method-weird", "/v1/models", "FROB")
    get("models-ok", "/v1/models", expect="json")
    post("embeddings", "/v1/embeddings", obj({"model": MODEL,
                                               "input": "a"}))


def bodies():
    c = "/v1/completions"
    post("body-empty", c, "")
    post("body-null", c, "null")
    post("body-array", c, "[]")
    post("body-number", c, "42")
    post("body-string", c, '"s"')
    post("body-open", c, "{")
    post("body-mismatch", c, "{]")
    post("body-single-quotes", c, "{'model':'x'}")
    post("body-trailing", c, '{"model":"%s","prompt":"a"}x' % MODEL)
    post("body-bom", c, b"\xef\xbb\xbf" + obj({"model": MODEL,
                                                 "prompt": "a"}).encode())
    post("body-bad-utf8", c, b'{"model":"' + MODEL.encode()
         + b'","prompt":"\xff\xfe"}')
    post("body-overlong-utf8", c, b'{"model":"' + MODEL.encode()
         + b'","prompt":"\xc0\xaf"}')
    post("body-surrogate-utf8", c, b'{"model":"' + MODEL.encode()
         + b'","prompt":"\xed\xa0\x80"}')
    post("body-lone-surrogate", c, '{"model":"%s","prompt":"\\ud800"}'
         % MODEL)
    post("body-escaped-nul", c, '{"model":"%s","prompt":"a\\u0000b"}'
         % MODEL)
    post("body-raw-nul", c, b'{"model":"' + MODEL.encode()
         + b'","prompt":"a\x00b"}')
    post("body-nul-key", c, '{"model":"%s","prompt":"a","x\\u0000":1}'
         % MODEL)
    post("body-deep-array", c, "[" * 100000 + "]" * 100000)
    post("body-deep-object", c, '{"a":' * 20000 + "1" + "}" * 20000)
    post("body-deep-in-field", c, '{"model":"%s","prompt":"a","x":%s%s}'
         % (MODEL, "[" * 5000, "]" * 5000))
    post("body-huge-real", c, '{"model":"%s","prompt":"a","x":1e400}'
         % MODEL)
    post("body-huge-int", c, '{"model":"%s","prompt":"a","x":'
         '99999999999999999999999999}' % MODEL)
    post("body-dup-key", c, '{"model":"%s","model":"%s","prompt":"a"}'
         % (MODEL, MODEL))
    post("body-dup-nested", c, '{"model":"%s","prompt":"a","logit_bias":'
         '{"1":1,"1":2}}' % MODEL)
    post("body-long-string-key", c, '{"%s":1}' % ("k" * 100000))
    post("body-many-keys", c, "{" + ",".join('"k%d":%d' % (i, i)
                                             for i in range(50000)) + "}")
    post("body-form", c, "model=x&prompt=a",
         headers="")
    post("body-too-big", c, '{"model":"%s","prompt":"%s"}'
         % (MODEL, "a" * (1024 * 1024 + 10)))


def completions():
    for name, v in [("model-missing", None), ("model-number", 5),
                    ("model-array", [MODEL]), ("model-object", {}),
                    ("model-empty", ""), ("model-unknown", "gpt-9"),
                    ("model-huge", "m" * 100000), ("model-bool", True)]:
        b = {"prompt": "a", "max_tokens": 1}
        if v is not None:
            b["model"] = v
        cmpl(name, {}, base=b)
    for name, v in [("prompt-number", 5), ("prompt-object", {}),
                    ("prompt-empty-array", []), ("prompt-empty-ids", [[]]),
                    ("prompt-mixed", ["a", 1]), ("prompt-neg-id", [-1]),
                    ("prompt-big-id", [2147483648]),
                    ("prompt-oov-id", [100000]), ("prompt-real-id", [1.5]),
                    ("prompt-nested", [[[1]]]), ("prompt-bool", True),
                    ("prompt-null-elem", [None]),
                    ("prompt-too-many", ["a"] * 129),
                    ("prompt-over-context", [1] * 600),
                    ("prompt-text-over-context", "the cat " * 20000)]:
        cmpl(name, {"prompt": v})
    cmpl("prompt-missing", {}, base={"model": MODEL, "max_tokens": 1})
    for name, v in [("max-tokens-neg", -1), ("max-tokens-zero", 0),
                    ("max-tokens-1e30", 1e30), ("max-tokens-real", 1.5),
                    ("max-tokens-string", "10"), ("max-tokens-bool", True),
                    ("max-tokens-array", []),
                    ("max-tokens-int64", 9223372036854775807),
                    ("max-tokens-over-context", 100000)]:
        cmpl(name, {"max_tokens": v})
    for name, v in [("n-zero", 0), ("n-neg", -1), ("n-huge", 1000000000),
                    ("n-129", 129), ("n-string", "2"), ("n-real", 2.5)]:
        cmpl(name, {"n": v})
    for field, bad in [("temperature", [-1, 3, "x", [], True]),
                       ("top_p", [2, -0.1, "a"]),
                       ("top_k", [-2, "a", 1.5]),
                       ("min_p", [2, -1, {}]),
                       ("presence_penalty", [3, -3, "a"]),
                       ("frequency_penalty", [3, -3, "x"]),
                       ("seed", ["1", 1.5, 18446744073709551616]),
                       ("stream", ["yes", 1]),
                       ("logprobs", [6, -1, True, "1"]),
                       ("user", [1, []]),
                       ("echo", ["x", 1]),
                       ("suffix", ["abc", 5]),
                       ("best_of", [2, "x", 0])]:
        for i, v in enumerate(bad):
            cmpl("%s-%d" % (field.replace("_", "-"), i), {field: v})
    cmpl("echo-true", {"echo": True})
    cmpl("stream-options-no-stream", {"stream_options":
                                      {"include_usage": True}})
    cmpl("stream-options-not-object", {"stream": True,
                                       "stream_options": 5})
    cmpl("stream-options-usage-string", {"stream": True, "stream_options":
                                         {"include_usage": "x"}})
    for name, v in [("stop-five", ["a", "b", "c", "d", "e"]),
                    ("stop-empty-string", ""), ("stop-empty-array", []),
                    ("stop-number", [1]), ("stop-long", "s" * 300),
                    ("stop-object", {}), ("stop-null-elem", [None])]:
        cmpl(name, {"stop": v})
    for name, v in [("bias-array", []), ("bias-alpha-key", {"a": 1}),
                    ("bias-neg-key", {"-1": 1}), ("bias-over", {"1": 101}),
                    ("bias-string", {"1": "x"}), ("bias-oov", {"600": 1}),
                    ("bias-int-overflow", {"99999999999": 1}),
                    ("bias-plus-key", {"+1": 1}),
                    ("bias-70k", dict((str(i), 1) for i in range(70000)))]:
        cmpl(name, {"logit_bias": v})
    cmpl("chat-field-messages", {"messages": [{"role": "user",
                                               "content": "a"}]},
         expect="json")
    cmpl("unknown-field", {"frobnicate": {"x": [1, 2]}}, expect="json")
    cmpl("valid-small", {}, expect="json")


def chats():
    base = {"model": MODEL, "max_tokens": 1}
    chat("messages-missing", {}, base=base)
    for name, v in [("messages-object", {}), ("messages-empty", []),
                    ("messages-number", [1]), ("messages-null", [None]),
                    ("messages-string", "hi")]:
        chat(name, {"messages": v})
    u = {"role": "user", "content": "a"}
    cases = [
        ("msg-empty-object", [{}]),
        ("msg-role-missing", [{"content": "a"}]),
        ("msg-role-number", [{"role": 1, "content": "a"}]),
        ("msg-role-robot", [{"role": "robot", "content": "a"}]),
        ("msg-role-function", [{"role": "function", "name": "f",
                                "content": "a"}]),
        ("msg-role-case", [{"role": "User", "content": "a"}]),
        ("msg-content-missing", [{"role": "user"}]),
        ("msg-content-number", [{"role": "user", "content": 5}]),
        ("msg-content-empty-parts", [{"role": "user", "content": []}]),
        ("msg-content-image", [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "x"}}]}]),
        ("msg-content-part-no-text", [{"role": "user", "content": [
            {"type": "text"}]}]),
        ("msg-content-part-text-number", [{"role": "user", "content": [
            {"type": "text", "text": 5}]}]),
        ("msg-content-part-string", [{"role": "user",
                                      "content": ["a"]}]),
        ("msg-name-number", [{"role": "user", "content": "a",
                              "name": 5}]),
        ("msg-tool-no-id", [u, {"role": "tool", "content": "x"}]),
        ("msg-tool-id-number", [u, {"role": "tool", "content": "x",
                                    "tool_call_id": 1}]),
        ("msg-tool-call-id-number-on-user", [{"role": "user",
                                              "content": "a",
                                              "tool_call_id": 7}]),
        ("msg-tool-call-id-array-on-assistant", [
            u, {"role": "assistant", "content": "b", "tool_call_id": []}]),
        ("msg-tool-call-id-string-on-system", [
            {"role": "system", "content": "s", "tool_call_id": "c"}, u]),
        ("msg-tool-call-id-object-on-tool", [
            u, {"role": "tool", "content": "x", "tool_call_id": {}}]),
        ("msg-system-null-content", [{"role": "system", "content": None}]),
        ("msg-cache-control-bad", [{"role": "user", "content": "a",
                                    "cache_control": {"type": "x"}}]),
        ("msg-cache-control-ttl", [{"role": "user", "content": [
            {"type": "text", "text": "a",
             "cache_control": {"type": "ephemeral", "ttl": "9h"}}]}]),
        ("msg-cache-control-five", [
            {"role": "user", "content": "a",
             "cache_control": {"type": "ephemeral"}}] * 5),
        ("msg-over-context", [{"role": "user", "content": "dog " * 5000}]),
        ("msg-many", [u] * 3000),
    ]
    for name, m in cases:
        msgs(name, m, "json" if name == "msg-many" else "4xx")
    for name, v in [("mct-neg", -1), ("mct-zero", 0), ("mct-string", "x"),
                    ("mct-1e30", 1e30)]:
        chat(name, {"max_completion_tokens": v})
    for name, v in [("top-logprobs-21", 21), ("top-logprobs-neg", -1),
                    ("top-logprobs-string", "1")]:
        chat(name, {"logprobs": True, "top_logprobs": v})
    chat("top-logprobs-without-logprobs", {"top_logprobs": 5})
    chat("logprobs-number", {"logprobs": 1})
    chat("n-zero", {"n": 0})
    chat("n-huge", {"n": 100000})
    chat("temperature-string", {"temperature": "hot"})
    chat("bias-70k", {"logit_bias": dict((str(i), 1)
                                         for i in range(70000))})
    chat("stream-string", {"stream": "true"})
    chat("unknown-field", {"tools": [{"type": "function"}],
                           "frobnicate": 1}, expect="json")
    chat("valid-small", {}, expect="json")


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: gen.py DIR\n")
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    framing()
    endpoints()
    bodies()
    completions()
    chats()
    names = set()
    with open(os.path.join(out, "index.tsv"), "w") as idx:
        for i, (name, data, expect) in enumerate(CASES):
            assert name not in names, name
            names.add(name)
            f = "%03d-%s.http" % (i, name)
            with open(os.path.join(out, f), "wb") as fh:
                fh.write(data)
            idx.write("%s\t%s\n" % (f, expect))
    return 0


if __name__ == "__main__":
    sys.exit(main())
