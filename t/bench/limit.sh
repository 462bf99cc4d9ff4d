#!/usr/bin/env bash
# Token rate limits (kvserve_limit, docs/limits.md): what admission costs.
#
#  1. bench_limit: admission decisions per second on one core from a zone
#     of 100k keys (and 1M), the glue's path without nginx (see
#     t/bench/bench_limit.c).
#  2. The latency nginx adds with the limiter on versus off: one nginx
#     (1 worker), the tiny default model, two locations that differ only
#     by `kvserve_limit zone=z burst=... nodelay` (a bucket that never
#     refuses), and one client sending LIMIT_REQS sequential keep-alive
#     requests of 1 prompt token + 1 output token to each, interleaved,
#     after a warm-up.  Prints p50/p90/p99 of each and the differences.
#
# Environment: KVS_BENCH_DIR (the build directory: bench_limit,
# models/default.gguf), KVS_MODULE, KVS_PYTHON, NGINX, KVS_TMP.
# Knobs: LIMIT_REQS (2000), LIMIT_KEYS (100000).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bdir=${KVS_BENCH_DIR:-$root/build}
module=${KVS_MODULE:-$bdir/ngx_http_kvserve_module.so}
python=${KVS_PYTHON:-python3}
nginx=${NGINX:-/usr/sbin/nginx}
reqs=${LIMIT_REQS:-2000}
keys=${LIMIT_KEYS:-100000}
tmp=${KVS_TMP:-/tmp}/limit-bench

echo "== admission path alone (bench_limit, one core)"
"$bdir/bench_limit" -k "$keys" -n 5000000
"$bdir/bench_limit" -k 1000000 -n 3000000

echo "== latency nginx adds, limiter on vs off"
model=$bdir/models/default.gguf
if [ ! -f "$model" ]; then
    mkdir -p "$bdir/models"
    "$bdir/kvserve" gen-model --preset tiny --name kvserve-tiny --seed 1 \
        "$model" >/dev/null
fi
rm -rf "$tmp"
mkdir -p "$tmp/conf" "$tmp/logs" "$tmp/engine"
port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

cat > "$tmp/conf/nginx.conf" <<EOF
load_module $module;
worker_processes 1;
daemon on;
error_log logs/error.log warn;
pid logs/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path logs/body;
    kvserve_engine_dir $tmp/engine;
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    keepalive_requests 100000;
    kvserve_limit_zone \$arg_k zone=z:16m rate=1000000t/s;
    server {
        listen 127.0.0.1:$port;
        location /off/v1/ { kvserve; }
        location /on/v1/ {
            kvserve;
            kvserve_limit zone=z burst=1000000000 nodelay;
        }
    }
}
EOF

"$nginx" -p "$tmp/" -c "$tmp/conf/nginx.conf" -e "$tmp/logs/error.log"
trap '"$nginx" -p "$tmp/" -c "$tmp/conf/nginx.conf" -s quit 2>/dev/null || true' EXIT

"$python" - "$port" "$reqs" <<'EOF'
import http.client, sys, time

port, n = int(sys.argv[1]), int(sys.argv[2])
body = ('{"model": "kvserve-tiny", "prompt": [1], "max_tokens": 1, '
        '"logit_bias": {"507": -100, "508": -100, "511": -100}}')

def conn():
    for _ in range(100):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.connect()
            return c
        except OSError:
            time.sleep(0.1)
    raise SystemExit("no nginx")

c = conn()
lat = {"off": [], "on": []}

def one(where, i):
    t0 = time.perf_counter()
    c.request("POST", "/%s/v1/completions?k=key%d" % (where, i % 1000),
              body, {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    dt = time.perf_counter() - t0
    if r.status != 200:
        raise SystemExit("%s: status %d" % (where, r.status))
    return dt

for i in range(200):            # warm-up: engine up, keys created
    one("off", i)
    one("on", i)

for i in range(n):
    lat["off"].append(one("off", i))
    lat["on"].append(one("on", i))

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))]

print("requests %d each, sequential, keep-alive, 1 worker" % n)
for p in (50, 90, 99):
    off, on = pct(lat["off"], p), pct(lat["on"], p)
    print("p%d  off %.1f us  on %.1f us  added %+.1f us"
          % (p, off * 1e6, on * 1e6, (on - off) * 1e6))
EOF
