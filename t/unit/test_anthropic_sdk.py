#!/usr/bin/env python3
"""The official anthropic Python SDK (PyPI), unchanged, against nginx with
the kvserve module's Messages endpoints (POST /v1/messages and
/v1/messages/count_tokens).

nginx is started as test_openai_sdk.py starts it (its Nginx class), with
the default tiny random model.  The SDK is driven sync and async, whole
and with messages.stream(), through count_tokens, cache_control, stop
sequences and errors, and nginx is stopped with every process gone.

The tiny model's text is noise, so only relations that any correct
server keeps are checked: a greedy request's text is the same whole,
streamed (text_stream, the final message) and async; usage adds up to
the prompt count_tokens reports; a second call with the same cached
system prompt reads it from the cache; a stop sequence taken from the
greedy text cuts it at its first occurrence with stop_reason
"stop_sequence" naming it; errors raise the SDK's class for their
status.

Environment: as test_openai_sdk.py (KVS_NGINX, KVS_MODULE, KVS_MODEL,
KVS_TMP).
"""

import asyncio
import os
import sys

import anthropic

from kvs_check import check, report
from test_openai_sdk import MODEL, MODULE, NGINX, TINY, Nginx, raises

USER = [{"role": "user", "content": "Tell me a story about a cat."}]
# this SDK has no temperature argument any more; the API has the field
GREEDY = {"temperature": 0}
SYSTEM = [{"type": "text", "text": "You are a storyteller. " * 8,
           "cache_control": {"type": "ephemeral", "ttl": "5m"}}]


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


def usage_ok(u, what, max_out):
    check(u is not None and u.input_tokens >= 0
          and u.cache_creation_input_tokens is not None
          and u.cache_read_input_tokens is not None
          and 1 <= u.output_tokens <= max_out,
          what + ": usage has its four fields in range (%r)" % (u,))


def prompt_of(u):
    return (u.input_tokens + u.cache_creation_input_tokens
            + u.cache_read_input_tokens)


def test_sync(cl):
    m = cl.messages.create(model=TINY, max_tokens=12, extra_body=GREEDY,
                           messages=USER)
    check(m.type == "message" and m.role == "assistant"
          and m.model == TINY and m.id.startswith("msg_"),
          "sync: a message (%r, %r, %r)" % (m.type, m.role, m.id))
    check(all(b.type == "text" for b in m.content) and len(m.content) <= 1,
          "sync: text blocks only")
    check(m.stop_reason in ("max_tokens", "end_turn")
          and m.stop_sequence is None,
          "sync: stop_reason %r" % m.stop_reason)
    usage_ok(m.usage, "sync", 12)
    check(m.stop_reason != "max_tokens" or m.usage.output_tokens == 12,
          "sync: max_tokens stops at 12 output tokens")

    n = cl.messages.count_tokens(model=TINY, messages=USER)
    check(n.input_tokens == prompt_of(m.usage),
          "count_tokens: %d = the request's prompt (%d)"
          % (n.input_tokens, prompt_of(m.usage)))
    n2 = cl.messages.count_tokens(model=TINY, messages=USER, system=SYSTEM)
    check(n2.input_tokens > n.input_tokens,
          "count_tokens: a system prompt adds tokens (%d > %d)"
          % (n2.input_tokens, n.input_tokens))
    return m


def test_stream(cl, whole):
    pieces = []
    with cl.messages.stream(model=TINY, max_tokens=12, extra_body=GREEDY,
                            messages=USER) as s:
        for t in s.text_stream:
            pieces.append(t)
        final = s.get_final_message()
    check("".join(pieces) == text_of(whole),
          "messages.stream: text_stream joins to the whole text (%r vs %r)"
          % ("".join(pieces), text_of(whole)))
    check(text_of(final) == text_of(whole)
          and final.stop_reason == whole.stop_reason
          and final.usage.output_tokens == whole.usage.output_tokens,
          "messages.stream: the final message is the whole one")

    # the raw events, in Anthropic's order
    kinds = [e.type for e in cl.messages.create(
        model=TINY, max_tokens=4, extra_body=GREEDY, messages=USER,
        stream=True)]
    check(kinds[0] == "message_start" and kinds[-2:] == ["message_delta",
                                                         "message_stop"],
          "stream=True: message_start first, message_delta and "
          "message_stop last (%r)" % kinds)


async def async_create():
    cl = anthropic.AsyncAnthropic(base_url=os.environ["KVS_BASE"],
                                  api_key="x", max_retries=0, timeout=60)
    try:
        m = await cl.messages.create(model=TINY, max_tokens=12,
                                     extra_body=GREEDY, messages=USER)
        n = await cl.messages.count_tokens(model=TINY, messages=USER)
        return m, n
    finally:
        await cl.close()


def test_async(whole):
    m, n = asyncio.run(async_create())
    check(text_of(m) == text_of(whole),
          "async: the same greedy text (%r vs %r)"
          % (text_of(m), text_of(whole)))
    check(n.input_tokens == prompt_of(whole.usage),
          "async count_tokens: the same prompt")


def test_cache(cl):
    first = cl.messages.create(model=TINY, max_tokens=2, system=SYSTEM,
                               messages=USER)
    second = cl.messages.create(model=TINY, max_tokens=2, system=SYSTEM,
                                messages=USER)
    check(first.usage.cache_creation_input_tokens > 0,
          "cache_control: the first call caches the prefix (%r)"
          % first.usage)
    check(second.usage.cache_read_input_tokens > 0
          and second.usage.cache_creation_input_tokens == 0,
          "cache_control: the second call reads it (%r)" % second.usage)
    check(prompt_of(first.usage) == prompt_of(second.usage),
          "cache_control: the same prompt either way")


def test_stop(cl, whole):
    text = text_of(whole)
    stop = None
    for i in range(1, len(text) - 2):
        s = text[i:i + 2]
        if s.isascii() and s.strip() == s and s.isprintable() and s:
            stop = s
            break
    if stop is None:
        print("SKIP stop sequences: no ASCII pair in %r" % text)
        return
    m = cl.messages.create(model=TINY, max_tokens=12, extra_body=GREEDY,
                           messages=USER, stop_sequences=["\x01zz", stop])
    check(m.stop_reason == "stop_sequence" and m.stop_sequence == stop,
          "stop_sequences: stop_reason stop_sequence naming %r (%r, %r)"
          % (stop, m.stop_reason, m.stop_sequence))
    check(text_of(m) == text[:text.index(stop)],
          "stop_sequences: the text cut at the first %r (%r)"
          % (stop, text_of(m)))


def test_errors(cl, base):
    e = raises(anthropic.NotFoundError, lambda: cl.messages.create(
        model="nope", max_tokens=4, messages=USER))
    check(e is not None and e.status_code == 404
          and e.body["error"]["type"] == "not_found_error",
          "unknown model: NotFoundError (404, not_found_error)")
    e = raises(anthropic.BadRequestError, lambda: cl.messages.create(
        model=TINY, max_tokens=4, extra_body={"temperature": 1.5},
        messages=USER))
    check(e is not None and "temperature" in e.message,
          "temperature 1.5: BadRequestError naming it")
    e = raises(anthropic.BadRequestError, lambda: cl.messages.create(
        model=TINY, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64",
                                         "media_type": "image/png",
                                         "data": "AA=="}}]}]))
    check(e is not None and "image" in e.message,
          "an image block: BadRequestError naming it")
    old = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0,
                              default_headers={"anthropic-version":
                                               "2020-01-01"})
    e = raises(anthropic.BadRequestError, lambda: old.messages.create(
        model=TINY, max_tokens=4, messages=USER))
    check(e is not None and "anthropic-version" in e.message,
          "an unknown anthropic-version: BadRequestError naming it")


def main():
    for path in (NGINX, MODULE, MODEL):
        if not os.path.exists(path):
            print("test_anthropic_sdk: missing %s" % path)
            return 1
    ngx = Nginx([(TINY, MODEL)])
    ngx.start()
    ok = False
    try:
        os.environ["KVS_BASE"] = ngx.base
        cl = anthropic.Anthropic(base_url=ngx.base, api_key="x",
                                 max_retries=0, timeout=60)
        print("anthropic %s against %s" % (anthropic.__version__, ngx.base))
        whole = test_sync(cl)
        test_stream(cl, whole)
        test_async(whole)
        test_cache(cl)
        test_stop(cl, whole)
        test_errors(cl, ngx.base)
        log = ngx.error_log()
        check("[alert]" not in log and "[crit]" not in log
              and "[emerg]" not in log, "no alert/crit in the error log")
        ok = True
    finally:
        ngx.stop(ok)
    return report("test_anthropic_sdk")


if __name__ == "__main__":
    sys.exit(main())
