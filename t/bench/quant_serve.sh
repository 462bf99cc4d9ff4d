#!/usr/bin/env bash
# Quantized files through nginx (issue 19's "done when"): the Q4_K_M,
# Q5_K_M, Q6_K, Q4_0 and IQ4_XS files made by `kvserve quantize` and by
# llama.cpp's `llama-quantize` (t/bench/quant_files.bash) each serve one
# chat completion from one nginx holding all ten; an IQ2_XXS file made by
# llama-quantize fails `nginx -t`; and nothing crash-loops (one engine
# process for the whole run, no alert, no lost engine in the log).
#
# llama-quantize makes IQ2_XXS only with an importance matrix, so the
# IQ2_XXS file is made from a small generated F32 model (rows of 256)
# with a uniform one written here (every weight's importance 1, which
# weighs every column alike, as no matrix would).
#
# Prints one line per check and a last line "quant_serve: ok" or
# "quant_serve: FAILED (<n>)"; exits 1 on any failure.
#
# Environment and knobs: t/bench/quant_files.bash, plus NGINX
# (/usr/sbin/nginx), KVS_MODULE (build/ngx_http_kvserve_module.so),
# QUANT_SERVE_MIXES (q4_k_m q5_k_m q6_k q4_0 iq4_xs).
set -euo pipefail

. "$(dirname "$0")/quant_files.bash"
quant_need_peer quant_serve.sh llama-quantize

nginx=${NGINX:-/usr/sbin/nginx}
module=${KVS_MODULE:-$quant_root/build/ngx_http_kvserve_module.so}
mixes=${QUANT_SERVE_MIXES:-q4_k_m q5_k_m q6_k q4_0 iq4_xs}
for f in "$nginx" "$module"; do
    if [ ! -e "$f" ]; then
        echo "SKIP: quant_serve.sh: $f not found (make all)"
        exit 0
    fi
done

d=$quant_dir/serve
rm -rf "$d"
mkdir -p "$d"
# nginx's workers (user nobody under a root master) reach the engine's
# socket below it
chmod 755 "$quant_dir" "$d"
failed=0
fail() {
    echo "FAIL: $*"
    failed=$((failed + 1))
}

port=$("$quant_python" -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# write_conf MODEL_LINES
write_conf() {
    cat >"$d/nginx.conf" <<EOC
load_module $module;
worker_processes 2;
pid $d/nginx.pid;
error_log $d/error.log info;
events { worker_connections 64; }
http {
    access_log $d/access.log;
    client_body_temp_path $d/body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
    kvserve_engine_dir $d/engine;
    kvserve_kv_cache 64m;
    kvserve_threads 2;
    kvserve_engine_wait 120s;
$1
    server {
        listen 127.0.0.1:$port;
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
    }
}
EOC
}

running=0
stop_nginx() {
    if [ "$running" = 1 ] && [ -s "$d/nginx.pid" ]; then
        "$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" \
            -s quit 2>/dev/null || true
        for _ in $(seq 400); do
            [ -e "$d/nginx.pid" ] || break
            sleep 0.05
        done
    fi
    running=0
}
trap stop_nginx EXIT

# 1. the IQ2_XXS file: refused by nginx -t, before any engine exists
iq2_base=$quant_dir/iq2-f32.gguf
iq2=$quant_dir/peer-iq2_xxs.gguf
if ! quant_fresh "$iq2" "$quant_bin/llama-quantize"; then
    "$quant_cli" gen-model --dim 256 --ffn 768 --heads 4 --kv-heads 2 \
        --layers 2 --vocab 512 --seed 5 "$iq2_base" >/dev/null
    "$quant_python" - "$iq2_base" "$quant_dir/iq2.imatrix" <<'PY'
import struct, sys
from gguf import GGUFReader
# llama.cpp's imatrix file (examples/quantize load_imatrix): i32 entries;
# per entry i32 name length, name, i32 ncall, i32 nval, f32 values[nval]
# (nval = the matrix's row length); then i32 chunks, i32 length, dataset
mats = [t for t in GGUFReader(sys.argv[1]).tensors
        if len(t.shape) == 2 and t.name.endswith(".weight")]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<i", len(mats)))
    for t in mats:
        name, n = t.name.encode(), int(t.shape[0])
        f.write(struct.pack("<i", len(name)) + name)
        f.write(struct.pack("<ii", 1, n) + struct.pack("<%df" % n, *[1.0] * n))
    f.write(struct.pack("<ii", 1, 7) + b"uniform")
PY
    if ! "$quant_bin/llama-quantize" --imatrix "$quant_dir/iq2.imatrix" \
           "$iq2_base" "$iq2.tmp" IQ2_XXS "$quant_threads" \
           >"$iq2.log" 2>&1; then
        tail -5 "$iq2.log"
        fail "llama-quantize IQ2_XXS"
    else
        mv "$iq2.tmp" "$iq2"
    fi
fi
if [ -f "$iq2" ]; then
    echo "peer-iq2_xxs matrices by type:$("$quant_cli" info "$iq2" 2>&1 \
        | awk '$1 ~ /\.weight$/ && $3 ~ /^\[[0-9]+,/ { print $2 }' \
        | sort | uniq -c | awk '{ printf " %s x%d", $2, $1 }')"
    write_conf "    kvserve_model bad $iq2;"
    if out=$("$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" -t \
                 2>&1); then
        fail "nginx -t accepted the IQ2_XXS file"
    elif ! grep -q 'of type IQ2_XXS, which kvserve cannot compute' \
             <<<"$out"; then
        fail "nginx -t refused the IQ2_XXS file without naming IQ2_XXS:" \
             "$out"
    else
        echo "ok: nginx -t refuses peer-iq2_xxs: $(grep -o \
            'tensor "[^"]*" is of type IQ2_XXS' <<<"$out" | head -1)"
    fi
    if [ -e "$d/engine/engine.sock" ]; then
        fail "an engine was started for the IQ2_XXS file"
    fi
fi

# 2. ten quantized files served by one nginx
lines=""
names=""
for mix in $mixes; do
    quant_make "$mix"
    for who in ours peer; do
        lines="$lines    kvserve_model $who-$mix $quant_dir/$who-$mix.gguf;
"
        names="$names $who-$mix"
    done
done
write_conf "$lines"
if ! out=$("$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" -t 2>&1)
then
    fail "nginx -t: $out"
fi
: >"$d/error.log"
if ! "$nginx" -p "$d/" -c "$d/nginx.conf" -e "$d/error.log" \
       2>"$d/start.log"; then
    fail "nginx did not start: $(cat "$d/start.log")"
fi
running=1
for _ in $(seq 1200); do
    curl -sf -o /dev/null "127.0.0.1:$port/status" && break
    sleep 0.1
done

for name in $names; do
    t0=$(date +%s.%N)
    code=$(curl -s -o "$d/$name.json" -w '%{http_code}' --max-time 120 \
        -H 'Content-Type: application/json' \
        -d '{"model": "'"$name"'", "max_tokens": 8, "temperature": 0,
             "messages": [{"role": "user", "content": "Hello there"}]}' \
        "127.0.0.1:$port/v1/chat/completions" || true)
    t1=$(date +%s.%N)
    if r=$("$quant_python" - "$d/$name.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
text = j["choices"][0]["message"]["content"]
u = j["usage"]
assert u["prompt_tokens"] > 0 and u["completion_tokens"] > 0, u
print("%d+%d tokens %r" % (u["prompt_tokens"], u["completion_tokens"],
                           text[:40]))
PY
    ) && [ "$code" = 200 ]; then
        echo "ok: $name: 200, $r ($(echo "$t0 $t1" \
            | awk '{ printf "%.2f", $2 - $1 }') s)"
    else
        fail "$name: HTTP $code: $(head -c 300 "$d/$name.json" 2>/dev/null)"
    fi
done

# 3. no crash loop: one engine served everything
engines=$(grep -o 'connected to engine [0-9]*' "$d/error.log" \
          | sort -u | wc -l)
trouble='\[alert\]\|\[emerg\]\|\[crit\]\|engine lost\|connection lost'
trouble="$trouble"'\|lived [0-9]* ms'
bad=$(grep -c "$trouble" "$d/error.log" || true)
echo "engines=$engines alerts=$bad"
[ "$engines" = 1 ] || fail "$engines engine processes during the run"
[ "$bad" = 0 ] || fail "$bad alerts or engine losses in the log:" \
    "$(grep "$trouble" "$d/error.log" | head -3)"
stop_nginx

if [ "$failed" = 0 ]; then
    echo "quant_serve: ok"
else
    echo "quant_serve: FAILED ($failed)"
    exit 1
fi
