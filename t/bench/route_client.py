#!/usr/bin/env python3
"""The client of t/bench/route.sh's gateway part (issue 8): a gateway
nginx routing by prefix (/v1/: kvserve_route + kvserve_prefix_balance)
and by round robin (/rr/v1/) over the same engine hosts, and one engine
host directly.  Standard library only.

overhead  the time a request takes directly to an engine, through the
          gateway with plain proxy_pass (round robin) and through the
          gateway with kvserve_route (its body read, tokenized, looked
          up in Redis): sequential keep-alive requests, every kind
          interleaved, for a short and a long prompt already cached on
          every host (so the engines' work is the same); p50/p99 and
          what the gateway adds.
cluster   USERS users x TURNS turns of chat sharing a system prompt, each
          turn's messages holding the previous replies, users in a
          shuffled order per round, one request at a time, streamed; the
          same conversations (distinct text) through prefix routing and
          round robin, interleaved: prompt tokens the engines found
          cached (usage.prompt_tokens_details.cached_tokens) over all
          prompt tokens, the share of turns 2.. that landed on the host
          holding their prefix (cached >= the previous prompt rounded
          down to a block, as t/020-route-e2e.t), and time to first
          token (the first content chunk) for turns 2...

decision the gateway's whole routing decision in place, at 1k, 10k and
          100k-token prompts: the prompt's block names (`kvserve
          tokenize --bos`, `kvserve index-names`, under each engine
          host's epoch from its record) are written to Redis under the
          three real hosts, which hold 90%, 50% and 20% of them; then
          /v1/completions of that prompt through kvserve_route and
          through plain proxy_pass, interleaved, after warm-up rounds.
          The engines cannot hold the longer prompts (2k context) and
          answer 400 at once; the 1k prompt they serve from their cache
          (one output token); alike for both paths, so the difference
          is what routing costs: the body read, parsed and tokenized,
          the blocks named, the two round trips, the choice.  The
          gateway must find at least e1's 90% (X-Route-Cached).

Prints a table and machine-readable "route_gw ..." lines; with
ROUTE_DEBUG=1 in the environment, every cluster turn to stderr (the
gateway's reason, believed cached tokens and host beside the engine's
count).
"""

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import time


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))] if v else 0.0


class Client:
    """One keep-alive connection, reopened when the server closes it."""

    def __init__(self, port):
        self.port = port
        self.c = None

    def post(self, path, body, stream=False):
        for attempt in range(2):
            if self.c is None:
                self.c = http.client.HTTPConnection("127.0.0.1", self.port,
                                                    timeout=120)
            try:
                self.c.request("POST", path, json.dumps(body),
                               {"Content-Type": "application/json"})
                return self.c.getresponse()
            except (http.client.HTTPException, OSError):
                self.c.close()
                self.c = None
                if attempt:
                    raise
        return None

    def done(self, r):
        if r.getheader("Connection", "").lower() == "close":
            self.c.close()
            self.c = None


def words(rng, n):
    w = ("apple river stone cloud maple tiger violet copper lantern meadow "
         "harbor pepper falcon quartz willow ember north garden silver "
         "window orange planet little market").split()
    return " ".join(rng.choice(w) for _ in range(n))


def chat(cl, path, model, msgs, max_tokens):
    """A non-streamed chat: (seconds, status, decoded body)."""
    t0 = time.perf_counter()
    r = cl.post(path + "chat/completions",
                {"model": model, "messages": msgs, "max_tokens": max_tokens,
                 "temperature": 0})
    raw = r.read()
    dt = time.perf_counter() - t0
    cl.done(r)
    return dt, r.status, (json.loads(raw) if r.status == 200 else raw)


def chat_stream(cl, path, model, msgs, max_tokens):
    """A streamed chat: (ttft seconds, reply text, usage, route reason)."""
    t0 = time.perf_counter()
    r = cl.post(path + "chat/completions",
                {"model": model, "messages": msgs, "max_tokens": max_tokens,
                 "temperature": 0, "stream": True,
                 "stream_options": {"include_usage": True}})
    if r.status != 200:
        raise SystemExit("%s: status %d: %s" % (path, r.status, r.read()))
    reason = r.getheader("X-Route-Reason", "")
    if os.environ.get("ROUTE_DEBUG"):
        reason += " believed=%s host=%s" % (r.getheader("X-Route-Cached"),
                                           r.getheader("X-Route-Host"))
    ttft, text, usage = None, [], None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        for ch in ev.get("choices") or []:
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text.append(piece)
        if ev.get("usage"):
            usage = ev["usage"]
    r.read()
    cl.done(r)
    if ttft is None:
        ttft = time.perf_counter() - t0
    return ttft, "".join(text), usage, reason


def overhead(a, gw, direct, rng):
    kinds = [("direct", direct, "/v1/"), ("proxy_pass", gw, "/rr/v1/"),
             ("kvserve_route", gw, "/v1/")]
    for size, n_words in (("short", a.short_words), ("long", a.long_words)):
        msgs = [{"role": "system", "content": words(rng, n_words)},
                {"role": "user", "content": "Say one word."}]
        lat = {k: [] for k, _, _ in kinds}
        tokens = 0
        # warm-up: every host caches the prompt (round robin reaches all)
        for _ in range(6):
            for k, cl, path in kinds:
                dt, st, body = chat(cl, path, a.model, msgs, 1)
                if st != 200:
                    raise SystemExit("%s: status %d: %s" % (k, st, body))
                tokens = body["usage"]["prompt_tokens"]
        for _ in range(a.reqs):
            for k, cl, path in kinds:
                dt, st, body = chat(cl, path, a.model, msgs, 1)
                if st != 200:
                    raise SystemExit("%s: status %d: %s" % (k, st, body))
                lat[k].append(dt)
        print("\n%s prompt (%d tokens, cached everywhere, 1 output token), "
              "%d sequential keep-alive requests each, interleaved"
              % (size, tokens, a.reqs))
        d50, d99 = pct(lat["direct"], 50), pct(lat["direct"], 99)
        for k, _, _ in kinds:
            p50, p99 = pct(lat[k], 50), pct(lat[k], 99)
            print("  %-14s p50 %8.1f us  p99 %8.1f us  added p50 %+8.1f us"
                  % (k, p50 * 1e6, p99 * 1e6, (p50 - d50) * 1e6))
            print("route_gw part=overhead prompt=%s tokens=%d kind=%s "
                  "p50_us=%.1f p99_us=%.1f added_p50_us=%.1f "
                  "added_p99_us=%.1f" % (size, tokens, k, p50 * 1e6,
                                         p99 * 1e6, (p50 - d50) * 1e6,
                                         (p99 - d99) * 1e6))


def cluster(a, gw, rng):
    system = words(rng, a.system_words)
    kinds = [("prefix", "/v1/"), ("round_robin", "/rr/v1/")]
    conv = {k: [[{"role": "system", "content": system}]
                for _ in range(a.users)] for k, _ in kinds}
    prev = {k: [None] * a.users for k, _ in kinds}
    st = {k: {"prompt": 0, "cached": 0, "prompt2": 0, "cached2": 0,
              "landed": 0, "scored": 0, "ttft": [], "ttft1": [],
              "reasons": {}} for k, _ in kinds}
    for turn in range(1, a.turns + 1):
        order = list(range(a.users))
        rng.shuffle(order)
        for u in order:
            for k, path in kinds:
                msgs = conv[k][u]
                msgs.append({"role": "user", "content": "%s user %d turn "
                             "%d: %s?" % (k, u, turn,
                                          words(rng, a.user_words))})
                ttft, text, usage, reason = chat_stream(gw, path, a.model,
                                                        msgs, a.reply)
                # a random model's reply may hold control characters
                # (NUL among them) that a request may not: dropped, after
                # the prompt this turn's cache hit is measured on
                text = "".join(c for c in text if c >= " " or c in "\n\t")
                msgs.append({"role": "assistant", "content": text})
                s = st[k]
                pt = usage["prompt_tokens"]
                ca = usage.get("prompt_tokens_details",
                               {}).get("cached_tokens", 0)
                s["prompt"] += pt
                s["cached"] += ca
                s["reasons"][reason] = s["reasons"].get(reason, 0) + 1
                if turn == 1:
                    s["ttft1"].append(ttft)
                else:
                    s["prompt2"] += pt
                    s["cached2"] += ca
                    s["ttft"].append(ttft)
                    s["scored"] += 1
                    s["landed"] += ca >= prev[k][u] // a.block * a.block
                if os.environ.get("ROUTE_DEBUG"):
                    print("debug %s u%d t%d prompt %d cached %d prev %s %s"
                          % (k, u, turn, pt, ca, prev[k][u], reason),
                          file=sys.stderr)
                prev[k][u] = pt
    print("\n%d users x %d turns, shared system prompt, %d-token replies, "
          "one request at a time, streamed" % (a.users, a.turns, a.reply))
    for k, _ in kinds:
        s = st[k]
        hit = s["cached"] / max(1, s["prompt"])
        hit2 = s["cached2"] / max(1, s["prompt2"])
        landed = s["landed"] / max(1, s["scored"])
        print("  %-12s cached %5.1f%% of prompt tokens (turns 2..: %5.1f%%), "
              "landed on the holder %5.1f%%, TTFT turns 2.. p50 %6.1f ms "
              "p99 %6.1f ms (turn 1 p50 %6.1f ms)"
              % (k, 100 * hit, 100 * hit2, 100 * landed,
                 pct(s["ttft"], 50) * 1e3, pct(s["ttft"], 99) * 1e3,
                 pct(s["ttft1"], 50) * 1e3))
        if k == "prefix":
            print("  %-12s reasons: %s" % ("", ", ".join(
                "%s %d" % kv for kv in sorted(s["reasons"].items()))))
        print("route_gw part=cluster kind=%s hit=%.4f hit2=%.4f "
              "landed=%.4f ttft2_p50_ms=%.2f ttft2_p99_ms=%.2f "
              "ttft1_p50_ms=%.2f prompt_tokens=%d"
              % (k, hit, hit2, landed, pct(s["ttft"], 50) * 1e3,
                 pct(s["ttft"], 99) * 1e3, pct(s["ttft1"], 50) * 1e3,
                 s["prompt"]))


def redis_cmds(port, cmds):
    """Runs commands (lists of words) through one redis-cli pipe; its
    output lines."""
    data = "".join(" ".join(c) + "\n" for c in cmds)
    out = subprocess.run(["redis-cli", "-p", str(port)], input=data,
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def host_record(port, hid):
    rec = redis_cmds(port, [["GET", "kvs:v1:host:" + hid]])[0]
    f = dict(kv.split("=", 1) for kv in rec.split()[1:] if "=" in kv)
    return f["inc"], f["epoch"], int(f["bt"])


def decision(a, gw, rng):
    kinds = [("proxy_pass", "/rr/v1/"), ("kvserve_route", "/v1/")]
    hosts = [("e1", 0.9), ("e2", 0.5), ("e3", 0.2)]
    recs = {h: host_record(a.redis, h) for h, _ in hosts}
    epochs = {r[1] for r in recs.values()}
    bts = {r[2] for r in recs.values()}
    if len(epochs) != 1 or len(bts) != 1:
        raise SystemExit("decision: hosts disagree on epoch or block size")
    epoch, bt = epochs.pop(), bts.pop()
    print("\nthe routing decision in the gateway (kvserve_route minus "
          "proxy_pass; e1, e2, e3 hold 90%, 50%, 20% of the prompt)")
    for size in (1000, 10000, 100000):
        # about 4 tokens a word with this vocabulary: tokenize, then trim
        text = words(rng, size // 3)
        ids = subprocess.run([a.cli, "tokenize", "--bos", a.gguf],
                             input=text, capture_output=True, text=True,
                             check=True).stdout.split()
        cut = text.split()
        while len(ids) > size:
            cut = cut[:int(len(cut) * size / len(ids))]
            text = " ".join(cut)
            ids = subprocess.run([a.cli, "tokenize", "--bos", a.gguf],
                                 input=text, capture_output=True,
                                 text=True, check=True).stdout.split()
        names = subprocess.run([a.cli, "index-names", "--model", a.model,
                                "--epoch", epoch, "--block", str(bt)],
                               input=" ".join(ids), capture_output=True,
                               text=True, check=True).stdout.split()
        cmds = []
        for h, share in hosts:
            inc = recs[h][0]
            for n in names[:int(len(names) * share)]:
                cmds.append(["HSET", "kvs:v1:blk:" + n, h, inc])
                cmds.append(["PEXPIRE", "kvs:v1:blk:" + n, "600000"])
        redis_cmds(a.redis, cmds)
        want = int(len(names) * 0.9) * bt
        reqs = max(5, a.reqs // (10 if size >= 100000 else
                                 3 if size >= 10000 else 1))
        lat = {k: [] for k, _ in kinds}
        for i in range(reqs + 4):
            for k, path in kinds:
                t0 = time.perf_counter()
                r = gw.post(path + "completions",
                            {"model": a.model, "prompt": text,
                             "max_tokens": 1})
                r.read()
                dt = time.perf_counter() - t0
                gw.done(r)
                if k == "kvserve_route":
                    got = (r.getheader("X-Route-Reason"),
                           r.getheader("X-Route-Host"),
                           r.getheader("X-Route-Cached"))
                    # at least e1's 90%: a prompt within the engines'
                    # context is also cached (and published) whole
                    if got[0] != "prefix" or int(got[2] or 0) < want:
                        raise SystemExit("decision: %d tokens: routed %s, "
                                         "want prefix with >= %d cached"
                                         % (len(ids), got, want))
                # four warm-up rounds: round robin reaches every engine
                if i >= 4:
                    lat[k].append(dt)
        p = {k: (pct(lat[k], 50), pct(lat[k], 99)) for k, _ in kinds}
        add50 = p["kvserve_route"][0] - p["proxy_pass"][0]
        print("  %6d tokens (%4d blocks): proxy_pass p50 %8.1f us, "
              "kvserve_route p50 %8.1f us (p99 %8.1f): routing %+8.1f us"
              " (%d each)" % (len(ids), len(names), p["proxy_pass"][0] * 1e6,
                               p["kvserve_route"][0] * 1e6,
                               p["kvserve_route"][1] * 1e6, add50 * 1e6,
                               reqs))
        print("route_gw part=decision tokens=%d blocks=%d reqs=%d "
              "proxy_pass_p50_us=%.1f route_p50_us=%.1f route_p99_us=%.1f "
              "decision_p50_us=%.1f" % (len(ids), len(names), reqs,
                                        p["proxy_pass"][0] * 1e6,
                                        p["kvserve_route"][0] * 1e6,
                                        p["kvserve_route"][1] * 1e6,
                                        add50 * 1e6))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gw", type=int, required=True)
    p.add_argument("--direct", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--parts", default="overhead,decision,cluster")
    p.add_argument("--redis", type=int)
    p.add_argument("--cli", default="kvserve")
    p.add_argument("--gguf")
    p.add_argument("--reqs", type=int, default=300)
    p.add_argument("--short-words", type=int, default=8)
    p.add_argument("--long-words", type=int, default=300)
    p.add_argument("--users", type=int, default=24)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--system-words", type=int, default=100)
    p.add_argument("--user-words", type=int, default=25)
    p.add_argument("--reply", type=int, default=16)
    p.add_argument("--block", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    gw, direct = Client(a.gw), Client(a.direct)
    parts = a.parts.split(",")
    if "overhead" in parts:
        overhead(a, gw, direct, rng)
    if "decision" in parts:
        decision(a, gw, rng)
    if "cluster" in parts:
        cluster(a, gw, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
