#!/usr/bin/env python3
"""The official openai Python SDK (PyPI), unchanged, against nginx with the
kvserve module.

The test starts its own nginx: a temporary prefix, a generated
configuration loading the module, a free loopback port, worker_processes 2
(so requests land on both workers and one engine process), the default
tiny random model as `kvserve-tiny` and, when the fixtures are there, the
real stories260K as `stories260K`.  It waits until /v1/models answers,
drives the SDK through chat and completions, streaming and not, n = 2,
stop, seed, logprobs and the error mapping, then stops nginx with
`nginx -s quit` and checks that the master, its workers and the engine
process are all gone.

Expected values are not our own output pasted in: stories260K's greedy
text is llama2.c's reference (a fixture); the rest are relations that any
correct server keeps (a stream concatenates to the same text as the same
greedy request without streaming, the same seed gives the same text, a
stop string cuts the text at its first occurrence, the usage adds up, a
greedy token is the most probable of its top_logprobs, ...).  The tiny
model's text is noise, so only such relations are checked on it.
stories260K has no chat template: chat runs on the tiny model.

Environment: KVS_NGINX (default /usr/sbin/nginx), KVS_MODULE (default
build/ngx_http_kvserve_module.so), KVS_MODEL (default
build/models/default.gguf), KVS_FIXTURES, KVS_TMP (scratch dir).
"""

import concurrent.futures
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

from kvs_check import FIXTURES, ROOT, TMP, check, report

NGINX = os.environ.get("KVS_NGINX", "/usr/sbin/nginx")
MODULE = os.environ.get("KVS_MODULE", os.path.join(
    ROOT, "build", "ngx_http_kvserve_module.so"))
MODEL = os.environ.get("KVS_MODEL", os.path.join(
    ROOT, "build", "models", "default.gguf"))
STORIES = os.path.join(FIXTURES, "models", "stories260K-f32.gguf")
GREEDY = os.path.join(FIXTURES, "models",
                      "stories260K.expected-greedy-n200.txt")

TINY = "kvserve-tiny"


# --- nginx ---------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


class Nginx:
    """nginx with the module on a free port under a temporary prefix."""

    def __init__(self, models, workers=2, extra_http="", extra_server=""):
        self.prefix = tempfile.mkdtemp(prefix="kvs-sdk-", dir=TMP)
        # the workers (user nobody when the master is root) reach the
        # engine's socket under it
        os.chmod(self.prefix, 0o755)
        self.port = free_port()
        self.conf = os.path.join(self.prefix, "nginx.conf")
        lines = ["    kvserve_model %s %s;" % (n, p) for n, p in models]
        with open(self.conf, "w") as f:
            f.write("""load_module %(module)s;
worker_processes %(workers)d;
pid %(prefix)s/nginx.pid;
error_log %(prefix)s/error.log notice;
events { worker_connections 1024; }
http {
    access_log %(prefix)s/access.log;
    client_body_temp_path %(prefix)s/body;
    proxy_temp_path %(prefix)s/proxy;
    fastcgi_temp_path %(prefix)s/fastcgi;
    uwsgi_temp_path %(prefix)s/uwsgi;
    scgi_temp_path %(prefix)s/scgi;
    kvserve_engine_dir %(prefix)s/engine;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
%(models)s
%(extra_http)s
    server {
        listen 127.0.0.1:%(port)d;
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
%(extra_server)s
    }
}
""" % {"module": MODULE, "workers": workers, "prefix": self.prefix,
                "models": "\n".join(lines), "port": self.port,
                "extra_http": extra_http, "extra_server": extra_server})
        self.base = "http://127.0.0.1:%d" % self.port

    def nginx(self, *args):
        return subprocess.run([NGINX, "-p", self.prefix + "/", "-c",
                               self.conf, "-e",
                               os.path.join(self.prefix, "error.log")]
                              + list(args), capture_output=True, text=True)

    def start(self):
        r = self.nginx()
        if r.returncode != 0:
            raise RuntimeError("nginx did not start: " + r.stderr
                               + self.error_log())
        with open(os.path.join(self.prefix, "nginx.pid")) as f:
            self.master = int(f.read())
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(self.base + "/v1/models",
                                            timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("nginx never answered /v1/models\n"
                                   + self.error_log())
            time.sleep(0.05)
        # /v1/models answers from the configuration; each model's engine
        # says hello on its own time, and /status lists a model without
        # its figures (kv_used...) until it has: wait for every one
        while True:
            try:
                models = self.status()["models"]
                if all(m.get("available") for m in models):
                    break
            except (OSError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("an engine never said hello\n"
                                   + self.error_log())
            time.sleep(0.05)

    def status(self):
        with urllib.request.urlopen(self.base + "/status", timeout=5) as r:
            return json.loads(r.read())

    def pids(self):
        """The master, its workers and the engine process."""
        pids = {self.master}
        r = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.master)],
                           capture_output=True, text=True)
        pids.update(int(p) for p in r.stdout.split())
        try:
            pids.add(int(self.status()["engine"]["pid"]))
        except (OSError, KeyError, TypeError, ValueError):
            pass
        return pids

    def quit(self, timeout=20):
        """nginx -s quit; returns the pids still alive after `timeout`."""
        pids = self.pids()
        self.nginx("-s", "quit")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = [p for p in pids if alive(p)]
            if not left:
                return []
            time.sleep(0.05)
        return [p for p in pids if alive(p)]

    def kill(self):
        for p in self.pids():
            if alive(p):
                os.kill(p, signal.SIGKILL)

    def stop(self, ok):
        """Quits nginx (killing what is left), checks nothing was left,
        and removes the prefix when all went well; otherwise keeps it and
        prints the error log."""
        left = self.quit()
        if left:
            self.kill()
        check(not left, "nginx -s quit: no process left (%r)" % left)
        if ok and not left:
            shutil.rmtree(self.prefix, ignore_errors=True)
        else:
            print("nginx prefix kept: %s" % self.prefix)
            print(self.error_log())

    def kv_used(self):
        """Each model's KV blocks in use, by name."""
        return {m["name"]: m["kv_used"] for m in self.status()["models"]}

    def error_log(self):
        try:
            with open(os.path.join(self.prefix, "error.log")) as f:
                return f.read()[-4000:]
        except OSError:
            return ""


# --- helpers -------------------------------------------------------------

def check_kv_back(ngx, kv0, n_models):
    """Every sequence's KV blocks went back (within a step of its end):
    kv_used as in the status kv0 taken before the requests."""
    used0 = {m["name"]: m["kv_used"] for m in kv0["models"]}
    for _ in range(100):
        used1 = ngx.kv_used()
        if used1 == used0:
            break
        time.sleep(0.02)
    check(used1 == used0 and len(used1) == n_models,
          "KV blocks all back after the requests (%r, before %r)"
          % (used1, used0))


def raises(exc, fn):
    """Calls fn(); returns the exception when it is an `exc`, else None."""
    try:
        fn()
    except exc as e:
        return e
    except Exception as e:  # noqa: BLE001 (reported as the wrong kind)
        print("  got %s: %s" % (type(e).__name__, e))
        return None
    print("  no exception")
    return None


def usage_ok(u, what):
    check(u is not None, what + ": usage present")
    if u is None:
        return
    check(u.total_tokens == u.prompt_tokens + u.completion_tokens,
          what + ": total_tokens = prompt + completion (%r)" % (u,))
    check(u.prompt_tokens >= 1, what + ": prompt_tokens >= 1")
    d = u.prompt_tokens_details
    check(d is not None and d.cached_tokens is not None
          and 0 <= d.cached_tokens <= u.prompt_tokens,
          what + ": prompt_tokens_details.cached_tokens in range")


def collect_chat_stream(stream):
    """Texts, finish reasons per choice index and the usage of a stream."""
    texts, finish, roles, usage, nchunks = {}, {}, {}, None, 0
    for chunk in stream:
        nchunks += 1
        check(chunk.object == "chat.completion.chunk",
              "chat chunk object is chat.completion.chunk")
        if chunk.usage is not None:
            check(usage is None, "one usage chunk")
            check(chunk.choices == [], "the usage chunk has no choices")
            usage = chunk.usage
        for c in chunk.choices:
            texts.setdefault(c.index, "")
            if c.delta.role is not None:
                roles[c.index] = c.delta.role
            if c.delta.content:
                check(c.index not in finish,
                      "no content after finish_reason (choice %d)" % c.index)
                texts[c.index] += c.delta.content
            if c.finish_reason is not None:
                check(c.index not in finish,
                      "one finish_reason per choice (%d)" % c.index)
                finish[c.index] = c.finish_reason
    return texts, finish, roles, usage, nchunks


def collect_text_stream(stream):
    texts, finish, usage = {}, {}, None
    for chunk in stream:
        check(chunk.object == "text_completion",
              "completions chunk object is text_completion")
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            texts.setdefault(c.index, "")
            texts[c.index] += c.text or ""
            if c.finish_reason is not None:
                check(c.index not in finish,
                      "one finish_reason per choice (%d)" % c.index)
                finish[c.index] = c.finish_reason
    return texts, finish, usage


# --- chat on the tiny model ----------------------------------------------

def test_models(cl, have_stories):
    ids = [m.id for m in cl.models.list().data]
    check(TINY in ids, "models.list() names %s (%r)" % (TINY, ids))
    if have_stories:
        check("stories260K" in ids, "models.list() names stories260K")
    m = cl.models.retrieve(TINY)
    check(m.id == TINY and m.object == "model", "models.retrieve(%s)" % TINY)
    e = raises(openai.NotFoundError, lambda: cl.models.retrieve("no-such"))
    check(e is not None, "models.retrieve(unknown) raises NotFoundError")


def test_chat(cl):
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say something."}]
    r = cl.chat.completions.create(model=TINY, messages=msgs, max_tokens=12,
                                   temperature=0)
    check(r.object == "chat.completion", "chat object")
    check(r.id.startswith("chatcmpl-"), "chat id chatcmpl-...")
    check(r.model == TINY, "chat model echoed")
    check(len(r.choices) == 1 and r.choices[0].index == 0, "one choice")
    c = r.choices[0]
    check(c.message.role == "assistant", "assistant message")
    check(isinstance(c.message.content, str), "content is a string")
    check(c.finish_reason in ("stop", "length"), "finish_reason")
    usage_ok(r.usage, "chat")
    check(1 <= r.usage.completion_tokens <= 12,
          "chat completion_tokens <= max_tokens (%d)"
          % r.usage.completion_tokens)
    if c.finish_reason == "length":
        check(r.usage.completion_tokens == 12,
              "finish_reason length at exactly max_tokens")

    # the same greedy request, streamed, with the usage chunk
    s = cl.chat.completions.create(model=TINY, messages=msgs, max_tokens=12,
                                   temperature=0, stream=True,
                                   stream_options={"include_usage": True})
    texts, finish, roles, usage, n = collect_chat_stream(s)
    check(list(texts) == [0], "chat stream: one choice")
    check(roles.get(0) == "assistant", "chat stream: role first")
    check(texts.get(0) == c.message.content,
          "chat stream deltas concatenate to the non-streaming text "
          "(%r vs %r)" % (texts.get(0), c.message.content))
    check(finish.get(0) == c.finish_reason, "chat stream finish_reason")
    check(usage is not None and usage.completion_tokens
          == r.usage.completion_tokens and usage.prompt_tokens
          == r.usage.prompt_tokens,
          "chat stream usage equals the non-streaming usage")
    check(n >= 2, "chat stream: several chunks")

    # no include_usage: no usage chunk
    s = cl.chat.completions.create(model=TINY, messages=msgs, max_tokens=4,
                                   temperature=0, stream=True)
    _, _, _, usage, _ = collect_chat_stream(s)
    check(usage is None, "chat stream without include_usage: no usage")

    # max_completion_tokens wins over max_tokens
    r = cl.chat.completions.create(model=TINY, messages=msgs, max_tokens=9,
                                   max_completion_tokens=3, temperature=1,
                                   seed=4, user="sdk-test")
    check(r.usage.completion_tokens <= 3,
          "max_completion_tokens bounds the answer")


def test_chat_n_logprobs(cl):
    msgs = [{"role": "user", "content": "Two answers please."}]
    r = cl.chat.completions.create(model=TINY, messages=msgs, max_tokens=8,
                                   n=2, temperature=1, seed=11,
                                   logprobs=True, top_logprobs=3)
    check(sorted(c.index for c in r.choices) == [0, 1],
          "chat n=2: choices 0 and 1")
    ntok = 0
    for c in r.choices:
        lp = c.logprobs
        check(lp is not None and lp.content is not None,
              "chat logprobs.content present")
        if lp is None or lp.content is None:
            continue
        ntok += len(lp.content)
        joined = "".join(t.token for t in lp.content)
        check(joined == c.message.content,
              "chat logprobs tokens spell the content (%r vs %r)"
              % (joined, c.message.content))
        for t in lp.content:
            check(t.logprob <= 0 and math.isfinite(t.logprob)
                  or t.logprob == -9999.0,
                  "chat logprob <= 0 (%r)" % t.logprob)
            check(t.bytes is not None and all(0 <= x < 256
                                               for x in t.bytes),
                  "bytes is a list of byte values")
            if t.bytes is not None and "\ufffd" not in t.token:
                check(bytes(t.bytes) == t.token.encode("utf-8"),
                      "bytes are the token's UTF-8 (%r, %r)"
                      % (t.token, t.bytes))
            check(len(t.top_logprobs) == 3, "top_logprobs has 3 entries")
            tops = [x.logprob for x in t.top_logprobs]
            check(tops == sorted(tops, reverse=True),
                  "top_logprobs sorted by probability")
            check(all(x <= 0 for x in tops), "top logprobs <= 0")
            check(sum(math.exp(x) for x in tops) <= 1 + 1e-4,
                  "top probabilities sum to at most 1")
    usage_ok(r.usage, "chat n=2")
    check(r.usage.completion_tokens == ntok,
          "chat n=2 completion_tokens = tokens of both choices (%d vs %d)"
          % (r.usage.completion_tokens, ntok))

    # greedy: the chosen token is the most probable one
    r = cl.chat.completions.create(model=TINY, messages=msgs, max_tokens=6,
                                   temperature=0, logprobs=True,
                                   top_logprobs=2)
    for t in r.choices[0].logprobs.content:
        check(abs(t.logprob - t.top_logprobs[0].logprob) < 1e-5,
              "greedy: chosen logprob = best top_logprob (%r, %r)"
              % (t.logprob, t.top_logprobs[0].logprob))

    # n=2 streamed: both indexes, each with its finish_reason
    s = cl.chat.completions.create(model=TINY, messages=msgs, max_tokens=6,
                                   n=2, stream=True, seed=3,
                                   stream_options={"include_usage": True})
    texts, finish, _, usage, _ = collect_chat_stream(s)
    check(sorted(finish) == [0, 1], "chat n=2 stream: both choices finish")
    check(usage is not None and usage.completion_tokens <= 12,
          "chat n=2 stream: usage covers both choices")


def test_chat_seed_stop(cl):
    msgs = [{"role": "user", "content": "Tell me a story."}]

    def gen(seed):
        return cl.chat.completions.create(
            model=TINY, messages=msgs, max_tokens=24, temperature=1,
            seed=seed).choices[0].message.content

    a, b, c = gen(1234), gen(1234), gen(99)
    check(a == b, "chat: the same seed gives the same text")
    check(a != c, "chat: different seeds give different texts")

    # stop: greedy text, then the same request stopping at a piece of it
    full = cl.chat.completions.create(model=TINY, messages=msgs,
                                      max_tokens=24, temperature=0)
    text = full.choices[0].message.content
    if len(text) >= 8:
        stop = text[len(text) // 2:len(text) // 2 + 2]
        r = cl.chat.completions.create(model=TINY, messages=msgs,
                                       max_tokens=24, temperature=0,
                                       stop=[stop, "\x01never"])
        got = r.choices[0].message.content
        check(got == text[:text.index(stop)],
              "chat stop cuts at the first occurrence (%r, stop %r)"
              % (got, stop))
        check(r.choices[0].finish_reason == "stop",
              "chat stop: finish_reason stop")
    else:
        check(False, "tiny greedy text long enough for a stop test (%r)"
              % text)


def test_errors(cl):
    msgs = [{"role": "user", "content": "hi"}]
    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=msgs, temperature=3))
    check(e is not None and e.status_code == 400, "temperature 3: 400")
    if e is not None:
        check(e.param == "temperature", "param temperature (%r)" % e.param)
        check(e.code == "decimal_above_max_value",
              "code decimal_above_max_value (%r)" % e.code)
        check(e.type == "invalid_request_error", "type invalid_request_error")

    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=[{"role": "robot", "content": "x"}]))
    check(e is not None and e.param == "messages[0].role",
          "bad role: BadRequestError naming messages[0].role (%r)"
          % (e and e.param))
    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=[{"content": "x"}]))
    check(e is not None and e.code == "missing_required_parameter",
          "message without role: BadRequestError missing_required_parameter")
    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=[]))
    check(e is not None and e.param == "messages",
          "empty messages: BadRequestError naming messages")
    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=msgs, n=0))
    check(e is not None and e.param == "n", "n=0: BadRequestError naming n")
    e = raises(openai.BadRequestError, lambda: cl.completions.create(
        model=TINY, prompt="x", top_p=1.5))
    check(e is not None and e.param == "top_p",
          "completions top_p 1.5: BadRequestError")
    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=msgs, stream=True, temperature=-1))
    check(e is not None, "streaming request with a bad temperature: "
          "BadRequestError before any event")
    e = raises(openai.BadRequestError, lambda: cl.chat.completions.create(
        model=TINY, messages=msgs, max_tokens=10 ** 7))
    check(e is not None and e.code == "context_length_exceeded",
          "max_tokens past the context: context_length_exceeded (%r)"
          % (e and e.code))

    for stream in (False, True):
        e = raises(openai.NotFoundError, lambda: cl.chat.completions.create(
            model="no-such-model", messages=msgs, stream=stream))
        check(e is not None and e.status_code == 404
              and e.code == "model_not_found",
              "unknown model (chat, stream=%s): NotFoundError "
              "model_not_found" % stream)
        e = raises(openai.NotFoundError, lambda: cl.completions.create(
            model="no-such-model", prompt="x", stream=stream))
        check(e is not None, "unknown model (completions, stream=%s): "
              "NotFoundError" % stream)


# --- completions on stories260K ------------------------------------------

def test_stories(cl, greedy):
    r = cl.completions.create(model="stories260K", prompt="", max_tokens=40,
                              temperature=0)
    text = r.choices[0].text
    check(r.object == "text_completion", "completions object")
    check(r.id.startswith("cmpl-"), "completions id cmpl-...")
    check(len(text) > 60 and greedy.startswith(text),
          "stories260K greedy text is a prefix of llama2.c's (%r)" % text)
    check(r.choices[0].finish_reason == "length", "finish_reason length")
    usage_ok(r.usage, "completions")
    check(r.usage.prompt_tokens == 1 and r.usage.completion_tokens == 40,
          "usage: BOS only, 40 tokens (%r)" % (r.usage,))

    s = cl.completions.create(model="stories260K", prompt="", max_tokens=40,
                              temperature=0, stream=True,
                              stream_options={"include_usage": True})
    texts, finish, usage = collect_text_stream(s)
    check(texts.get(0) == text,
          "completions stream concatenates to the greedy text")
    check(finish.get(0) == "length", "completions stream finish_reason")
    check(usage is not None and usage.completion_tokens == 40
          and usage.prompt_tokens == 1, "completions stream usage")

    # stop: the reference text up to its first period
    r = cl.completions.create(model="stories260K", prompt="", max_tokens=60,
                              temperature=0, stop=".")
    check(r.choices[0].text == greedy[:greedy.index(".")],
          "stop '.' cuts the reference text (%r)" % r.choices[0].text)
    check(r.choices[0].finish_reason == "stop", "stop: finish_reason stop")
    s = cl.completions.create(model="stories260K", prompt="", max_tokens=60,
                              temperature=0, stop=[", there"], stream=True)
    texts, finish, _ = collect_text_stream(s)
    check(texts.get(0) == greedy[:greedy.index(", there")]
          and finish.get(0) == "stop",
          "streamed stop cuts the reference text (%r)" % texts.get(0))

    # seeds at temperature 1
    def gen(seed):
        return cl.completions.create(model="stories260K", prompt="Once",
                                     max_tokens=30, temperature=1,
                                     seed=seed).choices[0].text

    a, b = gen(42), gen(42)
    others = {gen(s) for s in (1, 2, 3)}
    check(a == b, "stories260K: the same seed, the same text")
    check(len(others | {a}) >= 3,
          "stories260K: different seeds give different texts")
    s = cl.completions.create(model="stories260K", prompt="Once",
                              max_tokens=30, temperature=1, seed=42,
                              stream=True)
    texts, _, _ = collect_text_stream(s)
    check(texts.get(0) == a, "a seeded stream gives the seeded text")

    # n=2 with logprobs
    r = cl.completions.create(model="stories260K", prompt="Once upon a",
                              max_tokens=10, n=2, temperature=1, seed=5,
                              logprobs=2)
    check(sorted(c.index for c in r.choices) == [0, 1],
          "completions n=2: choices 0 and 1")
    ntok = 0
    for c in r.choices:
        lp = c.logprobs
        check(lp is not None and len(lp.tokens) == len(lp.token_logprobs)
              == len(lp.top_logprobs) == len(lp.text_offset),
              "completions logprobs lists of one length")
        if lp is None:
            continue
        ntok += len(lp.tokens)
        check("".join(lp.tokens) == c.text,
              "completions logprobs tokens spell the text")
        check(all(x <= 0 for x in lp.token_logprobs),
              "completions token_logprobs <= 0")
        check(all(isinstance(t, dict) and 1 <= len(t) <= 3
                  and all(v <= 0 for v in t.values())
                  for t in lp.top_logprobs),
              "completions top_logprobs: dicts of up to logprobs(+1) "
              "entries, values <= 0")
        offs = lp.text_offset
        check(all(offs[i] - offs[0] == len("".join(lp.tokens[:i]))
                  for i in range(len(offs))),
              "text_offset steps by the length of each token (%r)" % offs)
    usage_ok(r.usage, "completions n=2")
    check(r.usage.completion_tokens == ntok == 20,
          "completions n=2: 2 x 10 tokens counted (%d, %d)"
          % (r.usage.completion_tokens, ntok))
    check(r.usage.prompt_tokens == 4,
          "completions n=2: the prompt counted once (BOS + 3 tokens? %d)"
          % r.usage.prompt_tokens)

    s = cl.completions.create(model="stories260K", prompt="Once upon a",
                              max_tokens=10, n=2, stream=True, seed=5,
                              temperature=1)
    texts, finish, _ = collect_text_stream(s)
    check(sorted(texts) == [0, 1] and sorted(finish) == [0, 1],
          "completions n=2 stream: both choices, both finish")

    # a list of prompts: one choice each
    r = cl.completions.create(model="stories260K", prompt=["", ""],
                              max_tokens=12, temperature=0)
    check(len(r.choices) == 2
          and all(c.text == r.choices[0].text for c in r.choices)
          and greedy.startswith(r.choices[0].text),
          "two identical greedy prompts give the reference twice")


def test_concurrent(cl, greedy):
    """8 greedy streams at once (both workers, one engine, one batch):
    each is the reference text."""
    def one(i):
        s = cl.completions.create(model="stories260K", prompt="",
                                  max_tokens=30 + i, temperature=0,
                                  stream=True)
        return collect_text_stream(s)[0].get(0, "")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(one, range(8)))
    check(all(len(t) > 60 and greedy.startswith(t) for t in texts),
          "8 concurrent greedy streams all give the reference text")
    check(all(texts[i] != texts[i + 1] and texts[i + 1].startswith(texts[i])
              for i in range(7)),
          "each concurrent stream has its own length")


def test_tiny_completions(cl):
    r = cl.completions.create(model=TINY, prompt="abc", max_tokens=10,
                              temperature=0)
    s = cl.completions.create(model=TINY, prompt="abc", max_tokens=10,
                              temperature=0, stream=True)
    texts, finish, _ = collect_text_stream(s)
    check(texts.get(0) == r.choices[0].text
          and finish.get(0) == r.choices[0].finish_reason,
          "tiny completions: stream = non-stream for greedy")


def main():
    for path in (NGINX, MODULE, MODEL):
        if not os.path.exists(path):
            print("test_openai_sdk: missing %s" % path)
            return 1
    have_stories = os.path.exists(STORIES) and os.path.exists(GREEDY)
    models = [(TINY, MODEL)]
    if have_stories:
        models.append(("stories260K", STORIES))
        with open(GREEDY, encoding="utf-8") as f:
            greedy = f.read().rstrip("\n")
    else:
        print("SKIP stories260K cases: %s not found (set KVS_FIXTURES)"
              % STORIES)

    ngx = Nginx(models)
    ngx.start()
    ok = False
    try:
        cl = openai.OpenAI(base_url=ngx.base + "/v1", api_key="x",
                           max_retries=0, timeout=60)
        print("openai %s against %s" % (openai.__version__, ngx.base))
        kv0 = ngx.status()
        test_models(cl, have_stories)
        test_chat(cl)
        test_chat_n_logprobs(cl)
        test_chat_seed_stop(cl)
        test_tiny_completions(cl)
        test_errors(cl)
        if have_stories:
            test_stories(cl, greedy)
            test_concurrent(cl, greedy)
        check_kv_back(ngx, kv0, len(models))
        log = ngx.error_log()
        check("[alert]" not in log and "[crit]" not in log
              and "[emerg]" not in log,
              "no alert/crit in the error log")
        ok = True
    finally:
        ngx.stop(ok)
    return report("test_openai_sdk")


if __name__ == "__main__":
    sys.exit(main())
