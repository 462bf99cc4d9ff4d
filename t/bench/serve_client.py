#!/usr/bin/env python3
"""Load client for t/bench/serve.sh: C concurrent streaming requests to
nginx with the kvserve module on loopback, N in all, and a summary.

One thread, non-blocking sockets and a selector, no HTTP library: each
request is a fresh HTTP/1.0 connection (nginx then streams the SSE events
unchunked and closes at the end), so a read is timestamped the moment the
kernel hands it over and the only per-event work is finding "data: " in
the bytes.  The client's own CPU time is printed beside the wall time:
when it nears one core the figures measure the client, not the server.

Per request: TTFT (request written -> first event with a token), the gaps
between successive token events (ITL; events that arrive in one read are
0 apart, as the client saw them), the total (request written -> [DONE])
and the completion tokens from the final usage chunk
(stream_options.include_usage).  Over the run: requests/s and tokens/s
from the first request written to the last [DONE].

With --access-log, nginx's access log (log_format written by serve.sh:
"bench=<X-Bench-Id> name=value ...") gives the server's own timings per
request: each kvserve_* variable's percentiles, and the client total minus
the engine's time for that request (what nginx and the loopback add).

--ping N: N sequential GET /status (a worker -> engine -> worker round
trip) and N GET /ping (a static nginx answer) to show the hop's fixed
cost.
"""

import argparse
import json
import os
import re
import resource
import selectors
import socket
import sys
import time


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Req:
    __slots__ = ("i", "sock", "out", "t0", "events", "buf", "tokens",
                 "done", "t_done", "status", "head", "first")

    def __init__(self, i):
        self.i = i
        self.events = []          # arrival time of each token event
        self.buf = b""
        self.tokens = None
        self.done = False
        self.t_done = None
        self.status = None
        self.head = True
        self.first = b""


def build(args, i):
    body = {"model": args.model, "max_tokens": args.max_tokens,
            "temperature": args.temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.temperature > 0:
        body["seed"] = i
    if args.endpoint == "chat":
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": args.prompt}]
    else:
        path = "/v1/completions"
        if args.prompt_ids:
            body["prompt"] = [int(x) for x in args.prompt_ids.split(",")]
        else:
            body["prompt"] = args.prompt
    data = json.dumps(body).encode()
    return (("POST %s HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Bench-Id: %d\r\n"
             "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
             % (path, i, len(data))).encode() + data)


def on_data(r, data, t):
    if r.head:
        r.first += data
        end = r.first.find(b"\r\n\r\n")
        if end < 0:
            return
        r.status = int(r.first.split(b" ", 2)[1])
        data = r.first[end + 4:]
        r.head = False
        r.first = b""
    buf = r.buf + data
    while True:
        end = buf.find(b"\n\n")
        if end < 0:
            break
        ev = buf[:end]
        buf = buf[end + 2:]
        if not ev.startswith(b"data: "):
            continue
        if ev.startswith(b"data: [DONE]"):
            r.done = True
            r.t_done = t
        elif b'"usage":{' in ev and b'"choices":[]' in ev:
            r.tokens = json.loads(ev[6:])["usage"]["completion_tokens"]
        elif b'"error"' in ev[:20]:
            r.status = -1
        elif (b'"text":""' in ev or b'"content":""' in ev
              or b'"delta":{}' in ev or b'"content"' not in ev
              and b'"text"' not in ev):
            # the role, or a finish_reason with no text: not a token
            continue
        else:
            r.events.append(t)
    r.buf = buf


def run(args):
    sel = selectors.DefaultSelector()
    addr = ("127.0.0.1", args.port)
    reqs = [Req(i) for i in range(args.requests)]
    nxt = 0
    live = 0
    deadline = time.monotonic() + args.timeout
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t_start = time.perf_counter()

    def start(r):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.connect(addr)
        s.setblocking(False)
        r.sock = s
        r.t0 = time.perf_counter()
        s.sendall(build(args, r.i))
        sel.register(s, selectors.EVENT_READ, r)

    while nxt < len(reqs) or live:
        while live < args.concurrency and nxt < len(reqs):
            start(reqs[nxt])
            nxt += 1
            live += 1
        if time.monotonic() > deadline:
            print("serve_client: timeout with %d requests open" % live)
            return None
        for key, _ in sel.select(timeout=1.0):
            r = key.data
            t = time.perf_counter()
            try:
                data = r.sock.recv(65536)
            except BlockingIOError:
                continue
            if data:
                on_data(r, data, t)
                continue
            sel.unregister(r.sock)
            r.sock.close()
            live -= 1
            if r.t_done is None:
                r.t_done = t

    t_end = max(r.t_done for r in reqs)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return reqs, t_start, t_end, cpu


def ping(port, path, n):
    """Sequential GETs on one keep-alive connection; latencies in ms."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path).encode()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        s.sendall(req)
        got = b""
        while True:
            got += s.recv(65536)
            end = got.find(b"\r\n\r\n")
            if end < 0:
                continue
            head = got[:end].decode("latin-1").lower()
            m = re.search(r"content-length: *(\d+)", head)
            if m and len(got) >= end + 4 + int(m.group(1)):
                break
            if not m and got.endswith(b"0\r\n\r\n"):
                break
        out.append((time.perf_counter() - t) * 1e3)
    s.close()
    return out


def access_log(path, want):
    """{bench id: {variable: float}} from serve.sh's log_format."""
    rows = {}
    deadline = time.monotonic() + 5
    while True:
        try:
            with open(path) as f:
                lines = f.readlines()
        except OSError:
            lines = []
        rows = {}
        for line in lines:
            kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
            if kv.get("bench", "-") in ("-", ""):
                continue
            vals = {}
            for k, v in kv.items():
                try:
                    vals[k] = float(v)
                except ValueError:
                    pass
            rows[int(kv["bench"])] = vals
        if len(rows) >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def cpu_ms(pid):
    """utime + stime of a process, ms (None when it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return None
    fields = st[st.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) * 1e3 / os.sysconf(
        "SC_CLK_TCK")


def server_pids(pidfile, port):
    """{pid: 'worker' | 'engine'} of the nginx under test."""
    with open(pidfile) as f:
        master = int(f.read())
    pids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        if ppid == master:
            pids[int(d)] = "worker"
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /status HTTP/1.0\r\n\r\n")
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    s.close()
    body = got[got.find(b"\r\n\r\n") + 4:]
    pids[int(json.loads(body)["engine"]["pid"])] = "engine"
    return pids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--label", default=None)
    ap.add_argument("--endpoint", choices=("completions", "chat"),
                    default="completions")
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--prompt-ids", default=None,
                    help="comma-separated token ids (completions)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--access-log", default=None)
    ap.add_argument("--engine-ms", type=float, default=None,
                    help="engine-only wall for one wave (kvserve bench)")
    ap.add_argument("--ping", type=int, default=0)
    ap.add_argument("--json", default=None, help="append a JSON line here")
    ap.add_argument("--pidfile", default=None,
                    help="nginx's pid file: CPU time of its workers and "
                    "of the engine over the run")
    args = ap.parse_args()

    pids = server_pids(args.pidfile, args.port) if args.pidfile else {}
    cpu0 = {p: cpu_ms(p) for p in pids}
    res = run(args)
    cpu1 = {p: cpu_ms(p) for p in pids}
    if res is None:
        return 1
    reqs, t_start, t_end, cpu = res
    wall = t_end - t_start
    bad = [r for r in reqs if r.status != 200 or not r.done
           or r.tokens is None]
    ok = [r for r in reqs if r not in bad]
    ttft = [(r.events[0] - r.t0) * 1e3 for r in ok if r.events]
    itl = [(b - a) * 1e3 for r in ok for a, b in zip(r.events, r.events[1:])]
    total = [(r.t_done - r.t0) * 1e3 for r in ok]
    tokens = sum(r.tokens for r in ok)
    events = sum(len(r.events) for r in ok)
    label = args.label or args.model

    print("== %s: %d requests, %d concurrent, %s, max_tokens %d, "
          "temperature %g" % (label, len(reqs), args.concurrency,
                              args.endpoint, args.max_tokens,
                              args.temperature))
    print("ok %d, failed %d; %d completion tokens in %d token events"
          % (len(ok), len(bad), tokens, events))
    print("wall %.3f s: %.1f requests/s, %.0f tokens/s; client CPU %.2f s "
          "(%.0f%% of one core)" % (wall, len(ok) / wall, tokens / wall,
                                    cpu, 100 * cpu / wall))
    print("%-28s %9s %9s %9s %9s" % ("ms", "p50", "p90", "p99", "max"))

    def row(name, xs):
        print("%-28s %9.2f %9.2f %9.2f %9.2f"
              % (name, pct(xs, 50), pct(xs, 90), pct(xs, 99),
                 max(xs) if xs else float("nan")))

    row("TTFT", ttft)
    row("ITL", itl)
    row("total", total)
    summary = {"label": label, "requests": len(reqs), "ok": len(ok),
               "concurrency": args.concurrency,
               "max_tokens": args.max_tokens, "wall_s": wall,
               "rps": len(ok) / wall, "tps": tokens / wall,
               "client_cpu_s": cpu, "tokens": tokens}
    for name, xs in (("ttft", ttft), ("itl", itl), ("total", total)):
        for p in (50, 90, 99):
            summary["%s_p%d" % (name, p)] = pct(xs, p)

    if pids:
        use = {"worker": 0.0, "engine": 0.0}
        for p, kind in pids.items():
            if cpu0[p] is not None and cpu1[p] is not None:
                use[kind] += cpu1[p] - cpu0[p]
        print("server CPU: nginx workers %.0f ms (%.3f ms per request, "
              "%.1f us per token), engine %.0f ms (%.0f%% of one core)"
              % (use["worker"], use["worker"] / max(len(ok), 1),
                 1e3 * use["worker"] / max(tokens, 1), use["engine"],
                 100 * use["engine"] / 1e3 / wall))
        summary["worker_cpu_ms_per_req"] = use["worker"] / max(len(ok), 1)
        summary["worker_cpu_us_per_tok"] = (1e3 * use["worker"]
                                            / max(tokens, 1))
        summary["engine_cpu_ms"] = use["engine"]
    if args.access_log:
        rows = access_log(args.access_log, len(ok))
        names = sorted({k for v in rows.values() for k in v
                        if k.startswith("kvserve_")})
        for k in ["request_time"] + names:
            xs = [rows[r.i][k] * (1e3 if k == "request_time" else 1)
                  for r in ok if r.i in rows and k in rows[r.i]]
            if xs:
                row("nginx $" + k, xs)
                summary["%s_p50" % k] = pct(xs, 50)
        # the engine's part of a request: from its decoding the SUBMIT to
        # its first token (queue in the batch and prefill), then first to
        # last token (decode steps); everything else is nginx, the
        # worker <-> engine socket and the loopback to the client
        parts = [k for k in ("kvserve_prefill_ms", "kvserve_decode_ms")
                 if k in names]
        if len(parts) == 2:
            have = [r for r in ok if r.i in rows
                    and all(k in rows[r.i] for k in parts)]
            eng = {r.i: sum(rows[r.i][k] for k in parts) for r in have}
            added = [(r.t_done - r.t0) * 1e3 - eng[r.i] for r in have]
            row("client total - engine", added)
            summary["nginx_adds_p50"] = pct(added, 50)
            summary["nginx_adds_p90"] = pct(added, 90)
            summary["nginx_adds_p99"] = pct(added, 99)
            if "kvserve_total_ms" in names:
                inside = [rows[r.i]["kvserve_total_ms"] - eng[r.i]
                          for r in have if "kvserve_total_ms" in rows[r.i]]
                row("$total - engine", inside)
                summary["nginx_inside_p50"] = pct(inside, 50)
                summary["nginx_inside_p99"] = pct(inside, 99)
            print("(engine = $kvserve_prefill_ms + $kvserve_decode_ms, "
                  "per request)")

    if args.engine_ms is not None:
        # one wave of `concurrency` sequences of this shape, engine only
        per = pct(total, 50) - args.engine_ms
        print("engine only (kvserve bench, one wave of %d): %.2f ms; "
              "client p50 total - that: %.2f ms"
              % (args.concurrency, args.engine_ms, per))
        summary["engine_wave_ms"] = args.engine_ms

    if args.ping:
        st = ping(args.port, "/status", args.ping)
        pg = ping(args.port, "/ping", args.ping)
        row("GET /status (engine)", st)
        row("GET /ping (static)", pg)
        summary["status_p50"] = pct(st, 50)
        summary["ping_p50"] = pct(pg, 50)

    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(summary) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
