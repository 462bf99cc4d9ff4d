#!/usr/bin/env bash
# Prefix index (issue 8), in two parts, against a throw-away
# redis-server (no persistence) on a free port:
#
#   lookup   bench_route (t/bench/bench_route.c): the gateway's
#            longest-prefix lookup at 1k, 10k and 100k-token prompts over
#            three hosts holding different prefixes, against naive
#            lookups (every block in one pipeline; one round trip per
#            block); the goal: at most two round trips and a p50 under
#            1 ms at 100k tokens (p99 printed beside it: on a loaded
#            machine it says more about the scheduler than the plan)
#   gateway  three engine nginx instances publishing their prefix caches
#            (kvserve_index) on a generated `small` model (4 layers, dim
#            256, 2k context), one thread each, and a gateway nginx with
#            /v1/ routed by prefix (kvserve_route, kvserve_prefix_balance)
#            and /rr/v1/ plain proxy_pass round robin over the same three;
#            t/bench/route_client.py measures what the gateway adds per
#            request (direct, proxy_pass, kvserve_route), the whole
#            routing decision in place at 1k, 10k and 100k-token prompts
#            (block entries written for the real hosts), and, for
#            multi-turn chat, the cluster's hit rate and time to first
#            token, prefix-aware versus round robin
#
# Prints SKIP and exits 0 when redis-server is not installed.
#
# Environment: KVS_BENCH_DIR (where bench_route and kvserve are built),
# KVS_MODULE, NGINX, KVS_PYTHON, KVS_TMP.
# Knobs: ROUTE_PARTS ("lookup gateway"); lookup: ROUTE_SIZES
# ("1000,10000,100000"), ROUTE_PROMPTS (32 per size), ROUTE_PASSES (8
# timed passes over them), ROUTE_SEQ (8 sequential naive lookups per
# size), ROUTE_BT (16 tokens per block); gateway: ROUTE_GW_PARTS
# ("overhead,decision,cluster"), ROUTE_REQS (300 per kind and prompt; the
# decision part sends a third of it at 10k tokens, a tenth at 100k),
# ROUTE_USERS (24), ROUTE_TURNS (6).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bdir=${KVS_BENCH_DIR:-$root/build}
module=${KVS_MODULE:-$bdir/ngx_http_kvserve_module.so}
nginx=${NGINX:-/usr/sbin/nginx}
python=${KVS_PYTHON:-python3}
tmp=${KVS_TMP:-/tmp}
parts=${ROUTE_PARTS:-lookup gateway}

if ! command -v redis-server >/dev/null; then
    echo "route.sh: SKIP: redis-server not installed (apt-get install" \
         "redis-server)"
    exit 0
fi

free_port() {
    "$python" -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

port=$(free_port)
rdir=$(mktemp -d "$tmp/route-bench.XXXXXX")
chmod 755 "$rdir"                   # nginx's workers reach engine sockets
out=$rdir/out
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize yes --pidfile "$rdir/redis.pid" --logfile "$rdir/redis.log" \
    --dir "$rdir"

# every nginx started here (n0 .. n3 under $rdir) and the redis-server
stop() {
    local d
    for d in "$rdir"/n*; do
        [ -f "$d/logs/nginx.pid" ] || continue
        "$nginx" -p "$d/" -c "$d/nginx.conf" -s stop 2>/dev/null || true
    done
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    sleep 0.5
    rm -rf "$rdir"
}
trap stop EXIT

for _ in $(seq 500); do
    redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
    sleep 0.01
done

lookup() {
    echo "== lookup cost (bench_route)"
    "$bdir/bench_route" -p "$port" -t "${ROUTE_SIZES:-1000,10000,100000}" \
        -n "${ROUTE_PROMPTS:-32}" -r "${ROUTE_PASSES:-8}" \
        -q "${ROUTE_SEQ:-8}" -b "${ROUTE_BT:-16}" | tee "$out" \
        | grep -v '^route_'

    # the goal, from the machine-readable lines
    echo
    awk '
    /^route_lookup / && / method=two-round / {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        ok = f["max_rounds"] <= 2 \
             && (f["tokens"] < 100000 || f["p50_us"] < 1000)
        printf "goal %s: %s-token lookup: %s rounds (<= 2), p50 %s us, " \
               "p99 %s us%s\n", ok ? "met" : "MISSED", f["tokens"],
               f["max_rounds"], f["p50_us"], f["p99_us"],
               (f["tokens"] >= 100000 ? " (p50 < 1000)" : "")
        bad += !ok
    }
    END { exit bad > 0 }' "$out"
}

# Starts nginx instance $1 (a directory under $rdir) on port $2 with $3
# in its http block and $4 in its server block.
nginx_start() {
    local d=$rdir/$1
    mkdir -p "$d/logs" "$d/engine"
    cat > "$d/nginx.conf" <<EOF
load_module $module;
worker_processes 1;
daemon on;
error_log logs/error.log warn;
pid logs/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path logs/body;
    keepalive_requests 100000;
    kvserve_engine_dir $d/engine;
$3
    server {
        listen 127.0.0.1:$2;
$4
    }
}
EOF
    "$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/logs/error.log"
}

gateway() {
    local model=$rdir/small.gguf name=kvserve-small i p gw servers=""
    local ports=()
    echo "== the gateway: overhead, cluster hit rate, time to first token"
    redis-cli -p "$port" flushall >/dev/null
    "$bdir/kvserve" gen-model --preset small --name "$name" --seed 1 \
        "$model" >/dev/null
    for i in 1 2 3; do
        p=$(free_port)
        ports+=("$p")
        servers+="        server 127.0.0.1:$p;"$'\n'
        nginx_start "n$i" "$p" "
    kvserve_model $name $model;
    kvserve_kv_cache 256m;
    kvserve_kv_block 16;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
    kvserve_index redis=127.0.0.1:$port host_id=e$i
                  advertise=http://127.0.0.1:$p;" "
        location /v1/ { kvserve; }"
    done
    gw=$(free_port)
    nginx_start n0 "$gw" "
    kvserve_model $name $model;
    upstream engines {
        kvserve_prefix_balance;
$servers    }
    upstream rr {
$servers    }" "
        location /v1/ {
            kvserve_route redis=127.0.0.1:$port;
            proxy_pass http://engines;
            proxy_buffering off;
            add_header X-Route-Reason \$kvserve_route_reason always;
            add_header X-Route-Cached \$kvserve_route_cached_tokens always;
            add_header X-Route-Host \$kvserve_route_host always;
            client_max_body_size 16m;
        }
        location /rr/v1/ {
            proxy_pass http://rr/v1/;
            proxy_buffering off;
            client_max_body_size 16m;
        }"

    # every host registered: its engine up and subscribed
    for _ in $(seq 300); do
        [ "$(redis-cli -p "$port" zcard kvs:v1:hosts)" = 3 ] && break
        sleep 0.1
    done
    "$python" "$here/route_client.py" --gw "$gw" --direct "${ports[0]}" \
        --model "$name" --reqs "${ROUTE_REQS:-300}" --redis "$port" \
        --cli "$bdir/kvserve" --gguf "$model" \
        --parts "${ROUTE_GW_PARTS:-overhead,decision,cluster}" \
        --users "${ROUTE_USERS:-24}" --turns "${ROUTE_TURNS:-6}" \
        | tee -a "$out" | grep -v '^route_gw'
}

rc=0
for part in $parts; do
    case $part in
    lookup) lookup || rc=1 ;;
    gateway) echo; gateway ;;
    *)
        echo "route.sh: unknown part \"$part\" (lookup, gateway)" >&2
        exit 2 ;;
    esac
done
exit $rc
