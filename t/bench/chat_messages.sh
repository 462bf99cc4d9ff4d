#!/usr/bin/env bash
# Chat handling against the number of messages (issue 18): nginx with the
# kvserve module, one worker, tokenizing inline (kvserve_tokenize_threads
# off, so that the work is the worker's), kvserve_max_messages lifted.
# For 10k, 20k, 40k and 80k short alternating messages it sends one chat
# request and reads the worker's CPU time for it from
# /proc/<pid>/schedstat (nanoseconds on a CPU), best of BENCH_REPEAT.
# The baseline, in the same run: the same message texts sent as the
# content of a single message (the same bytes of text, one turn).
# Prints, per size, the worker's milliseconds, the ratio to the
# baseline, and the growth from 10k to 80k messages: linear work grows
# 8x, the quadratic span clipping this replaced grew ~53x (5.4 s for
# 80k).  The requests are refused (400, context) after tokenization, as
# the campaign's were; each answer's status is checked.
#
# Environment: KVS_MODULE (the module .so), KVS_BENCH_DIR (build dir:
# models/default.gguf), KVS_TMP, KVS_PYTHON, NGINX.  Knobs:
# BENCH_REPEAT (3), BENCH_SIZES ("10000 20000 40000 80000").
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
module=${KVS_MODULE:-$root/build/ngx_http_kvserve_module.so}
bdir=${KVS_BENCH_DIR:-$root/build}
model=$bdir/models/default.gguf
python=${KVS_PYTHON:-python3}
nginx=${NGINX:-/usr/sbin/nginx}
repeat=${BENCH_REPEAT:-3}
sizes=${BENCH_SIZES:-10000 20000 40000 80000}
tmp=${KVS_TMP:-/tmp}/chat-messages-bench

for f in "$module" "$model" "$nginx"; do
    if [ ! -e "$f" ]; then
        echo "skip chat_messages.sh: $f not found (make all)" >&2
        exit 0
    fi
done

rm -rf "$tmp"
mkdir -p "$tmp/logs"
chmod 755 "$tmp"

port=$("$python" -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

cat > "$tmp/nginx.conf" <<EOF
load_module $module;
worker_processes 1;
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log notice;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $tmp/body;
    kvserve_engine_dir $tmp/engine;
    kvserve_model tiny $model;
    server {
        listen 127.0.0.1:$port;
        client_max_body_size 16m;
        client_body_buffer_size 16m;
        location /v1/ {
            kvserve;
            kvserve_tokenize_threads off;
            kvserve_max_messages 1000000;
        }
    }
}
EOF

# a module from before kvserve_max_messages (a baseline build) has no cap
if ! "$nginx" -t -q -p "$tmp/" -c "$tmp/nginx.conf" \
        -e "$tmp/logs/error.log" 2>/dev/null; then
    sed -i '/kvserve_max_messages/d' "$tmp/nginx.conf"
fi

"$nginx" -p "$tmp/" -c "$tmp/nginx.conf" -e "$tmp/logs/error.log"
trap '"$nginx" -p "$tmp/" -c "$tmp/nginx.conf" -e "$tmp/logs/error.log" \
      -s quit 2>/dev/null || true' EXIT

"$python" - "$port" "$tmp/nginx.pid" "$repeat" $sizes <<'EOF'
import http.client, json, os, sys, time

port, pidfile, repeat = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
sizes = [int(s) for s in sys.argv[4:]]

for _ in range(200):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("GET", "/v1/models")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    time.sleep(0.05)

master = int(open(pidfile).read())
worker = int(open("/proc/%d/task/%d/children" % (master, master))
             .read().split()[0])


def cpu_ns():
    return int(open("/proc/%d/schedstat" % worker).read().split()[0])


def send(messages):
    body = json.dumps({"model": "tiny", "messages": messages,
                       "max_tokens": 4}).encode()
    best = None
    for _ in range(repeat):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        t0 = cpu_ns()
        c.request("POST", "/v1/chat/completions", body,
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        answer = json.loads(r.read())
        ns = cpu_ns() - t0
        if r.status != 400 or \
           answer["error"]["code"] != "context_length_exceeded":
            sys.exit("unexpected answer %d: %s" % (r.status, answer))
        best = ns if best is None else min(best, ns)
    return best / 1e6, len(body)


texts = {}
rows = []
for n in sizes:
    texts[n] = ["hello there %d" % i for i in range(n)]
    many = [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
            for i, t in enumerate(texts[n])]
    one = [{"role": "user", "content": " ".join(texts[n])}]
    ms, size = send(many)
    base, _ = send(one)
    rows.append((n, size, ms, base))
    print("chat_messages n=%d body=%d worker_ms=%.1f one_message_ms=%.1f "
          "ratio=%.2f" % (n, size, ms, base, ms / base), flush=True)

if len(rows) > 1:
    first, last = rows[0], rows[-1]
    print("chat_messages growth %dk->%dk messages: %.2fx (%.0fx more "
          "messages; one message of the same text: %.2fx)"
          % (first[0] // 1000, last[0] // 1000, last[2] / first[2],
             last[0] / first[0], last[3] / first[3]))
EOF
