#!/usr/bin/env bash
# Serving under load: nginx with the kvserve module on loopback, 64
# concurrent streaming /v1/completions requests (t/bench/serve_client.py),
# against stories260K (256 requests x up to 128 tokens) and a generated
# 100M-parameter Llama in Q8_0 (`kvserve gen-model --preset 100m --dtype
# q8_0 --seed 3`; 128 requests x 32 tokens).  Prints requests/s, tokens/s,
# TTFT, ITL and total percentiles per model, and what nginx adds per
# request:
#   - when the module has per-request timing variables
#     ($kvserve_queue_ms, $kvserve_prefill_ms, $kvserve_decode_ms, ...:
#     each one this nginx knows is logged), the client's total minus the
#     engine's queue + prefill + decode time for that same request;
#   - always, the same load run by the engine alone (`kvserve bench`, one
#     wave of 64 sequences of the same shape, same threads) beside the
#     client's p50 total, and the round trip of GET /status (worker ->
#     engine -> worker) beside a static nginx answer.
# Bounded: every request has max_tokens; the client gives up after
# SERVE_TIMEOUT seconds; nginx is stopped (-s quit) on exit.
#
# Environment: KVS_CLI (the kvserve tool), KVS_MODULE (the module .so),
# KVS_MODEL (unused here), KVS_FIXTURES, KVS_TMP, KVS_PYTHON, NGINX.
# Knobs: SERVE_MODELS (subset of "stories 100m"), SERVE_THREADS
# (kvserve_threads, default 1), SERVE_WORKERS (worker_processes, 2),
# SERVE_CONCURRENCY (64), SERVE_TIMEOUT (300).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cli=${KVS_CLI:-$root/build/kvserve}
module=${KVS_MODULE:-$root/build/ngx_http_kvserve_module.so}
fixtures=${KVS_FIXTURES:-$root/../shared/fixtures}
python=${KVS_PYTHON:-python3}
nginx=${NGINX:-/usr/sbin/nginx}
models=${SERVE_MODELS:-stories 100m}
threads=${SERVE_THREADS:-1}
workers=${SERVE_WORKERS:-2}
conc=${SERVE_CONCURRENCY:-64}
timeout=${SERVE_TIMEOUT:-300}
tmp=${KVS_TMP:-/tmp}/serve-bench

for f in "$module" "$cli" "$nginx"; do
    if [ ! -e "$f" ]; then
        echo "skip serve.sh: $f not found (make all)" >&2
        exit 0
    fi
done

mkdir -p "$tmp"
rm -f "$tmp/summary.jsonl"
# nginx's workers (user nobody under a root master) reach the engine's
# socket below it
chmod 755 "$tmp"

port=$("$python" -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# the prompt: BOS and 7 tokens, ids valid in both vocabularies
prompt_ids=1,400,401,402,403,404,405
prompt_len=7

# write_conf DIR NAME MODEL KV LOGVARS
write_conf() {
    local d=$1 name=$2 model=$3 kv=$4 vars=$5 fmt='bench=$http_x_bench_id'
    fmt="$fmt request_time=\$request_time"
    for v in $vars; do
        fmt="$fmt $v=\$$v"
    done
    mkdir -p "$d"
    cat >"$d/nginx.conf" <<EOF
load_module $module;
worker_processes $workers;
pid $d/nginx.pid;
error_log $d/error.log notice;
events { worker_connections 1024; }
http {
    log_format bench '$fmt';
    access_log $d/access.log bench;
    client_body_temp_path $d/body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
    kvserve_engine_dir $d/engine;
    kvserve_kv_cache $kv;
    kvserve_threads $threads;
    kvserve_model $name $model;
    server {
        listen 127.0.0.1:$port backlog=1024;
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
        location = /ping { return 200 "pong\n"; }
    }
}
EOF
}

# the per-request timing variables this module knows (nginx -t fails on
# an unknown variable in a log_format)
known_vars() {
    local d=$tmp/probe name=$1 model=$2 v ok=""
    for v in kvserve_body_ms kvserve_parse_ms kvserve_tokenize_ms \
             kvserve_queue_ms kvserve_prefill_ms kvserve_ttft_ms \
             kvserve_decode_ms kvserve_itl_ms kvserve_total_ms \
             kvserve_prompt_tokens kvserve_cached_tokens \
             kvserve_completion_tokens
    do
        write_conf "$d" "$name" "$model" 16m "$v"
        if "$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" \
               -t -q 2>/dev/null; then
            ok="$ok $v"
        fi
    done
    echo "$ok"
}

cur=""
stop_nginx() {
    if [ -n "$cur" ] && [ -s "$cur/nginx.pid" ]; then
        "$nginx" -p "$cur/" -c "$cur/nginx.conf" -e "$cur/error.log" \
            -s quit 2>/dev/null || true
        for _ in $(seq 200); do
            [ -e "$cur/nginx.pid" ] || break
            sleep 0.05
        done
    fi
    cur=""
}
trap stop_nginx EXIT

# engine_wave MODEL GEN: ms for one wave of $conc sequences, engine only
engine_wave() {
    "$cli" bench "$1" --seqs "$conc" --prompt "$prompt_len" --gen "$2" \
        --threads "$threads" \
        | sed -n 's/^total: .* in \([0-9.]*\) s wall.*/\1/p' \
        | awk '{ printf "%.2f", $1 * 1000 }'
}

# serve LABEL NAME MODEL KV REQUESTS MAX_TOKENS
serve() {
    local label=$1 name=$2 model=$3 kv=$4 n=$5 gen=$6 d vars wave
    d=$tmp/$name
    rm -rf "$d"
    vars=$(known_vars "$name" "$model")
    write_conf "$d" "$name" "$model" "$kv" "$vars"
    cur=$d
    "$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log"
    for _ in $(seq 200); do
        curl -sf -o /dev/null "127.0.0.1:$port/status" && break
        sleep 0.05
    done
    echo "timing variables logged:${vars:- none}"
    # warm-up: the engine's first requests page the weights in
    "$python" "$here/serve_client.py" --port "$port" --model "$name" \
        --requests "$conc" --concurrency "$conc" --max-tokens 4 \
        --prompt-ids "$prompt_ids" --timeout "$timeout" >/dev/null
    : >"$d/access.log"
    "$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" -s reopen
    sleep 0.2
    wave=$(engine_wave "$model" "$gen")
    "$python" "$here/serve_client.py" --port "$port" --model "$name" \
        --label "$label" --requests "$n" --concurrency "$conc" \
        --max-tokens "$gen" --prompt-ids "$prompt_ids" \
        --timeout "$timeout" --access-log "$d/access.log" \
        --engine-ms "$wave" --ping 200 --pidfile "$d/nginx.pid" \
        --json "$tmp/summary.jsonl"
    stop_nginx
}

for m in $models; do
    case $m in
    stories)
        f=$fixtures/models/stories260K-f32.gguf
        if [ ! -f "$f" ]; then
            echo "skip stories260K: $f not found" >&2
            continue
        fi
        serve "stories260K (F32)" stories260K "$f" 64m 256 128
        ;;
    100m)
        f=$tmp/gen-100m-q8_0.gguf
        [ -f "$f" ] || "$cli" gen-model --preset 100m --dtype q8_0 \
            --seed 3 "$f" >/dev/null
        serve "generated 100M (Q8_0)" kvserve-100m "$f" 256m 128 32
        ;;
    esac
    echo
done

"$python" - "$tmp/summary.jsonl" <<'EOF'
import json, sys
nan = float("nan")
rows = [json.loads(l) for l in open(sys.argv[1])]
cols = ("model", "req/s", "tok/s", "TTFT p50/p90/p99 ms",
        "ITL p50/p90/p99 ms", "total p50 ms", "nginx adds p50/p99 ms",
        "worker CPU ms/req", "engine-only wave ms", "/status p50 ms",
        "/ping p50 ms")
print("| " + " | ".join(cols) + " |")
print("| --- " + "| ---: " * (len(cols) - 1) + "|")
for r in rows:
    print("| %s | %.1f | %.0f | %.1f / %.1f / %.1f | %.2f / %.2f / %.2f "
          "| %.0f | %.2f / %.2f | %.3f | %.0f | %.3f | %.3f |"
          % (r["label"], r["rps"], r["tps"], r["ttft_p50"], r["ttft_p90"],
             r["ttft_p99"], r["itl_p50"], r["itl_p90"], r["itl_p99"],
             r["total_p50"], r.get("nginx_adds_p50", nan),
             r.get("nginx_adds_p99", nan),
             r.get("worker_cpu_ms_per_req", nan),
             r.get("engine_wave_ms", nan), r.get("status_p50", nan),
             r.get("ping_p50", nan)))
EOF
