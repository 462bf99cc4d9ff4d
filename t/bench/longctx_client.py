#!/usr/bin/env python3
"""Load client for t/bench/longctx.sh: steady short requests at a fixed
arrival rate, a few long requests in the middle, one summary line.

Timeline (seconds from the first request): short requests are sent every
1/RATE s from 0 until the end; at --long-at the --n-long long requests
are sent, --long-gap s apart; the run ends --after s after the last long
request ended (or --max-wait s after they were sent).  Each short
request belongs to the phase its send time falls in:
  before  [0, long-at)
  during  [long-at, last long request's end)
  after   [that end, end)

Per phase: short requests' TTFT p50/p99 (request written -> first token
event), completed short requests and their tokens per second, how many
failed (any HTTP status but 200, with the count of each), and the
engine's preemptions and waiting sequences, sampled from GET /status
every 0.25 s (mean and max of "waiting").  Long requests: sent,
completed, their TTFT and total.  Prompts are distinct random token ids
(seeded), so the prefix cache shares nothing between requests.

One thread per request (the rate is a few per second) plus a sampler;
each request is a fresh HTTP/1.0 connection, streamed.
"""

import argparse
import json
import random
import socket
import sys
import threading
import time

from serve_client import pct


class Result:
    __slots__ = ("kind", "t_send", "ttft", "total", "tokens", "status",
                 "retry_after")

    def __init__(self, kind, t_send):
        self.kind = kind
        self.t_send = t_send
        self.ttft = None
        self.total = None
        self.tokens = 0
        self.status = None
        self.retry_after = None


def one(args, kind, n_prompt, rng_seed, t0, res, timeout):
    rng = random.Random(rng_seed)
    # ids 3..vocab-1: no BOS/EOS/special ids of the generated vocabulary
    prompt = [rng.randrange(3, args.vocab) for _ in range(n_prompt)]
    body = json.dumps({"model": args.model, "prompt": prompt,
                       "max_tokens": args.max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    head = ("POST /v1/completions HTTP/1.0\r\nHost: localhost\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % len(body)).encode()
    r = Result(kind, time.monotonic() - t0)
    res.append(r)
    buf = b""
    try:
        s = socket.create_connection(("127.0.0.1", args.port),
                                     timeout=timeout)
        ts = time.monotonic()
        s.sendall(head + body)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            now = time.monotonic()
            buf += chunk
            if r.status is None and b"\r\n" in buf:
                r.status = int(buf.split(b" ", 2)[1])
            if r.status == 200:
                n = buf.count(b"\"text\"")
                if n > 0 and r.ttft is None:
                    r.ttft = now - ts
                r.tokens = n
        s.close()
        r.total = time.monotonic() - ts
        if r.status != 200:
            for line in buf.split(b"\r\n"):
                if line.lower().startswith(b"retry-after:"):
                    r.retry_after = int(line.split(b":")[1])
        elif b"[DONE]" not in buf:
            r.status = -1
    except (OSError, ValueError):
        r.status = -2


def status(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /status HTTP/1.0\r\nHost: localhost\r\n\r\n")
    buf = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        buf += c
    s.close()
    return json.loads(buf.split(b"\r\n\r\n", 1)[1])["models"][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--short", type=int, default=256)
    ap.add_argument("--long", type=int, default=6400)
    ap.add_argument("--n-long", type=int, default=3)
    ap.add_argument("--long-at", type=float, default=20.0)
    ap.add_argument("--long-gap", type=float, default=1.0)
    ap.add_argument("--after", type=float, default=20.0)
    ap.add_argument("--max-wait", type=float, default=240.0)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    res = []
    threads = []
    samples = []
    stop = threading.Event()
    t0 = time.monotonic()

    def sampler():
        while not stop.is_set():
            try:
                st = status(args.port)
                samples.append((time.monotonic() - t0, st["waiting"],
                                st["preemptions"]))
            except (OSError, ValueError, KeyError, IndexError):
                pass
            stop.wait(0.25)

    sam = threading.Thread(target=sampler)
    sam.start()

    longs = []
    i = 0
    next_long = 0
    end = None
    while True:
        now = time.monotonic() - t0
        while (next_long < args.n_long
               and now >= args.long_at + next_long * args.long_gap):
            th = threading.Thread(target=one, args=(
                args, "long", args.long, args.seed * 100003 + 50000
                + next_long, t0, longs, args.max_wait + 60))
            th.start()
            threads.append(th)
            next_long += 1
        if next_long == args.n_long and end is None:
            if len(longs) == args.n_long and all(r.total is not None
                                                 or r.status is not None
                                                 and r.status != 200
                                                 for r in longs):
                ends = [r.t_send + (r.total or 0) for r in longs]
                end = max(ends)
            elif now > args.long_at + args.max_wait:
                end = now
        if end is not None and now >= end + args.after:
            break
        th = threading.Thread(target=one, args=(
            args, "short", args.short, args.seed * 100003 + i, t0, res, 120))
        th.start()
        threads.append(th)
        i += 1
        t_next = i / args.rate
        time.sleep(max(0.0, t_next - (time.monotonic() - t0)))

    for th in threads:
        th.join()
    stop.set()
    sam.join()

    bounds = {"before": (0.0, args.long_at),
              "during": (args.long_at, end),
              "after": (end, float("inf"))}
    out = {"label": args.label, "long_end_s": round(end, 1)}
    for ph, (a, b) in bounds.items():
        rs = [r for r in res if a <= r.t_send < b]
        ok = [r for r in rs if r.status == 200 and r.total is not None]
        tt = [r.ttft * 1000 for r in ok if r.ttft is not None]
        bad = {}
        for r in rs:
            if r.status != 200:
                bad[str(r.status)] = bad.get(str(r.status), 0) + 1
        span = (min(b, end + args.after) - a) if b != float("inf") \
            else args.after
        sm = [x for x in samples if a <= x[0] < b]
        out[ph] = {
            "n": len(rs), "ok": len(ok), "failed": bad,
            "ttft_p50": pct(tt, 50), "ttft_p99": pct(tt, 99),
            "req_s": len(ok) / span if span > 0 else float("nan"),
            "tok_s": sum(r.tokens for r in ok) / span if span > 0
            else float("nan"),
            "waiting_mean": (sum(x[1] for x in sm) / len(sm)) if sm
            else float("nan"),
            "waiting_max": max((x[1] for x in sm), default=0),
            "preemptions": (sm[-1][2] - sm[0][2]) if len(sm) > 1 else 0,
        }
    out["long"] = {
        "sent": len(longs),
        "ok": sum(1 for r in longs if r.status == 200),
        "status": [r.status for r in longs],
        "retry_after": [r.retry_after for r in longs],
        "ttft_s": [round(r.ttft, 2) if r.ttft else None for r in longs],
        "total_s": [round(r.total, 2) if r.total else None for r in longs],
    }
    line = json.dumps(out)
    print(line)
    if args.json:
        with open(args.json, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
