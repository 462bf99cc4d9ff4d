#!/usr/bin/env bash
# The seed's long-context failure, scaled to this machine (issue 24):
# steady short requests at a fixed arrival rate, then a few long ones,
# against nginx with the kvserve module on loopback, with and without
# KV pools (kvserve_kv_pool, docs/pools.md), alternated in one run.
#
# Model: generated (`kvserve gen-model`, 4 layers, dim 128, 4 heads, 2
# KV heads, F32, seed 5): 2 KiB of KV per token.  "8k" = LONGCTX_SHORT
# (256) prompt tokens, "200k" = LONGCTX_LONG (6400): the seed's ratio,
# 1:25.  Every request asks 32 tokens with ignore_eos.  KV cache:
# LONGCTX_KV (24m = 768 blocks of 16 tokens): two long requests (402
# blocks each) do not fit together, short traffic alone uses a few
# dozen blocks.
#
# Configurations (LONGCTX_CONFIGS, run in that order LONGCTX_ROUNDS
# times):
#   off    today's engine: no pools, no queue deadline
#   pools  kvserve_kv_pool long min_tokens=2048 share=0.6 max_prefill=1
#          chunk=LONGCTX_CHUNK (8); kvserve_queue_timeout 300s
# Prints one JSON line per run (t/bench/longctx_client.py) and a table of
# short requests' TTFT p50/p99, throughput, failures, queueing and
# preemptions before, during and after the long requests, with the load.
#
# Environment: KVS_CLI, KVS_MODULE, KVS_TMP, KVS_PYTHON, NGINX.
# Knobs: LONGCTX_RATE (short requests/s, 4), LONGCTX_NLONG (3),
# LONGCTX_LONG_AT (s, 20), LONGCTX_AFTER (s, 20), LONGCTX_THREADS (1),
# LONGCTX_CHUNK (8), LONGCTX_ROUNDS (1), LONGCTX_CONFIGS ("off pools").
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cli=${KVS_CLI:-$root/build/kvserve}
module=${KVS_MODULE:-$root/build/ngx_http_kvserve_module.so}
python=${KVS_PYTHON:-python3}
nginx=${NGINX:-/usr/sbin/nginx}
tmp=${KVS_TMP:-/tmp}/longctx-bench
configs=${LONGCTX_CONFIGS:-off pools}
rounds=${LONGCTX_ROUNDS:-1}
rate=${LONGCTX_RATE:-4}
short=${LONGCTX_SHORT:-256}
long=${LONGCTX_LONG:-6400}
nlong=${LONGCTX_NLONG:-3}
long_at=${LONGCTX_LONG_AT:-20}
after=${LONGCTX_AFTER:-20}
threads=${LONGCTX_THREADS:-1}
kv=${LONGCTX_KV:-24m}

for f in "$module" "$cli" "$nginx"; do
    if [ ! -e "$f" ]; then
        echo "skip longctx.sh: $f not found (make all)" >&2
        exit 0
    fi
done

mkdir -p "$tmp"
chmod 755 "$tmp"
rm -f "$tmp/summary.jsonl"
model=$tmp/longctx-model.gguf
[ -f "$model" ] || "$cli" gen-model --layers 4 --dim 128 --heads 4 \
    --kv-heads 2 --ffn 384 --vocab 1024 --ctx 16384 --dtype f32 --seed 5 \
    "$model" >/dev/null

port=$("$python" -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# write_conf DIR CONFIG
write_conf() {
    local d=$1 extra="kvserve_queue_timeout off;"
    if [ "$2" = pools ]; then
        extra="kvserve_kv_pool long min_tokens=2048 share=0.6"
        extra="$extra max_prefill=1 chunk=${LONGCTX_CHUNK:-8};
    kvserve_queue_timeout 300s;"
    fi
    mkdir -p "$d"
    cat >"$d/nginx.conf" <<EOF
load_module $module;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log notice;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $d/body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
    client_max_body_size 8m;
    kvserve_engine_dir $d/engine;
    kvserve_engine_timeout 600s;
    kvserve_kv_cache $kv;
    kvserve_threads $threads;
    kvserve_model longctx $model;
    $extra
    server {
        listen 127.0.0.1:$port backlog=1024;
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
        location = /metrics { kvserve_metrics; }
    }
}
EOF
}

cur=""
stop_nginx() {
    if [ -n "$cur" ] && [ -s "$cur/nginx.pid" ]; then
        "$nginx" -p "$cur/" -c "$cur/nginx.conf" -e "$cur/error.log" \
            -s quit 2>/dev/null || true
        for _ in $(seq 400); do
            [ -e "$cur/nginx.pid" ] || break
            sleep 0.05
        done
    fi
    cur=""
}
trap stop_nginx EXIT

run() {
    local cfg=$1 d=$tmp/$1
    rm -rf "$d"
    write_conf "$d" "$cfg"
    cur=$d
    "$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log"
    for _ in $(seq 400); do
        curl -sf -o /dev/null "127.0.0.1:$port/status" && break
        sleep 0.05
    done
    echo "# $cfg: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    "$python" "$here/longctx_client.py" --port "$port" --model longctx \
        --label "$cfg" --rate "$rate" --short "$short" --long "$long" \
        --n-long "$nlong" --long-at "$long_at" --after "$after" \
        --json "$tmp/summary.jsonl"
    if [ "$cfg" = pools ]; then
        curl -s "127.0.0.1:$port/metrics" | grep kv_pool >&2 || true
    fi
    stop_nginx
}

echo "load before: $(cat /proc/loadavg), $(nproc) CPUs"
for _ in $(seq "$rounds"); do
    for c in $configs; do
        run "$c"
    done
done
echo "load after: $(cat /proc/loadavg)"

"$python" - "$tmp/summary.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| config | phase | short sent/ok | failed | TTFT p50 ms "
      "| TTFT p99 ms | req/s | tok/s | waiting mean/max | preemptions |")
print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    for ph in ("before", "during", "after"):
        p = r[ph]
        print("| %s | %s | %d/%d | %s | %.0f | %.0f | %.2f | %.1f "
              "| %.1f/%d | %d |"
              % (r["label"], ph, p["n"], p["ok"], p["failed"] or "-",
                 p["ttft_p50"], p["ttft_p99"], p["req_s"], p["tok_s"],
                 p["waiting_mean"], p["waiting_max"], p["preemptions"]))
    base = r["before"]["ttft_p99"]
    print("| %s | long | %d/%d | status %s | TTFT s %s | total s %s "
          "| p99 during/before %.2fx | | | |"
          % (r["label"], r["long"]["sent"], r["long"]["ok"],
             r["long"]["status"], r["long"]["ttft_s"],
             r["long"]["total_s"], r["during"]["ttft_p99"] / base
             if base == base and base > 0 else float("nan")))
EOF
