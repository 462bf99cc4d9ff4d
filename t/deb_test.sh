#!/usr/bin/env bash
# deb_test.sh: the Debian package end to end on this host (make deb-test,
# run by .ci/run after make test): lintian, `apt-get install` of the .deb,
# a site from the package's example configuration serving MODEL on a free
# port through Debian's own nginx (/usr/sbin/nginx, /etc/nginx/nginx.conf),
# one chat completion checked, nginx stopped, the package removed and
# purged, nothing of it left, and the system nginx still passing
# `nginx -t`, starting and stopping.
#
# Owns, while it runs: the package, /etc/nginx/sites-enabled/kvserve-deb-test,
# the system nginx (started briefly, on the test's port only: the default
# site's link is set aside while the test's site is served; the last
# start, without the package, has the default site back unless another
# process holds port 80) and a model directory under /tmp.
# Invariants: the host is left as found, on success or failure (an EXIT
# trap): the package purged, the site and model gone, the default site's
# link back, nginx stopped, nginx's logs cut back to their sizes, the
# directories nginx made under /var/lib/nginx removed and the owners and
# modes of those it found there restored; it refuses to run
# (status 1, saying why) when the package is installed already or the
# system nginx is running; it never touches other nginx instances (the
# Test::Nginx harness's), which use their own prefixes and ports.
#
# usage: deb_test.sh PACKAGE.deb MODEL.gguf   (as root)
set -euo pipefail

deb=$1 model=$2
pkg=libnginx-mod-http-kvserve
nginx=/usr/sbin/nginx
pidfile=/run/nginx.pid
site=/etc/nginx/sites-enabled/kvserve-deb-test
default_site=/etc/nginx/sites-enabled/default
example=/usr/share/doc/$pkg/examples/kvserve-site.conf
engine_dir=/var/lib/nginx/kvserve
logs=(/var/log/nginx/error.log /var/log/nginx/access.log)
t0=$(date +%s)

say() { echo "deb_test: $*"; }
fail() { echo "deb_test: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (it installs a package)"
[ -f "$deb" ] || fail "no package $deb"
[ -x "$nginx" ] || fail "no $nginx (Debian's nginx package)"
if dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null \
        | grep -q '^.[^n]'; then
    fail "$pkg is installed already: not touching it"
fi
if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    fail "the system nginx is running ($pidfile): not touching it"
fi

tmp=$(mktemp -d /tmp/kvs-deb-test.XXXXXX)
installed=0 started=0 default_moved=0
declare -A log_size
for l in "${logs[@]}"; do
    log_size[$l]=$( [ -e "$l" ] && stat -c %s "$l" || echo none)
done
# nginx gives its temporary directories to its worker user at start
varlib_before=$(cd /var/lib/nginx 2>/dev/null && stat -c '%n %u %g %a' -- * \
                || true)

stop_nginx() {      # status 1 when nginx or an engine does not stop
    local master engines p i
    [ -s "$pidfile" ] || return 0
    master=$(cat "$pidfile")
    # the engines: children of the workers, which are the master's
    engines=$(for p in $(ps -o pid= --ppid "$master"); do
                  ps -o pid= --ppid "$p"; done)
    "$nginx" -s quit || kill "$master" 2>/dev/null || true
    for i in $(seq 200); do
        kill -0 "$master" 2>/dev/null || break
        sleep 0.05
    done
    for p in $engines; do
        for i in $(seq 100); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.05
        done
        if kill -0 "$p" 2>/dev/null; then
            say "engine $p outlived nginx"
            return 1
        fi
    done
    ! kill -0 "$master" 2>/dev/null
}

restore() {
    local rc=$? l
    set +e
    if [ "$started" = 1 ]; then
        stop_nginx || kill "$(cat "$pidfile")" 2>/dev/null
    fi
    rm -f "$site"
    if [ "$default_moved" = 1 ]; then
        mv -f "$tmp/default" "$default_site"
    fi
    if [ "$installed" = 1 ]; then
        DEBIAN_FRONTEND=noninteractive dpkg --purge "$pkg" >/dev/null
    fi
    for l in "${logs[@]}"; do
        case ${log_size[$l]} in
            none) rm -f "$l" ;;
            *)    [ -e "$l" ] && truncate -s "${log_size[$l]}" "$l" ;;
        esac
    done
    for l in $(ls -A /var/lib/nginx 2>/dev/null); do
        grep -q "^$l " <<< "$varlib_before" || rm -rf "/var/lib/nginx/$l"
    done
    while read -r l uid gid mode; do
        [ -n "$l" ] || continue
        chown "$uid:$gid" "/var/lib/nginx/$l"
        chmod "$mode" "/var/lib/nginx/$l"
    done <<< "$varlib_before"
    rm -rf "$tmp"
    if [ "$rc" = 0 ]; then
        say "PASS in $(( $(date +%s) - t0 )) s"
    else
        say "FAILED (status $rc); the host is restored"
    fi
    exit "$rc"
}
trap restore EXIT

free_port() {       # a free port, or status 1 when port $1 is taken
    python3 -c 'import socket, sys; s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[1]))); print(s.getsockname()[1])' "${1:-0}" \
        2> /dev/null
}

set_default_aside() {   # Debian's default site listens on port 80
    if [ -e "$default_site" ] || [ -L "$default_site" ]; then
        mv "$default_site" "$tmp/default"
        default_moved=1
    fi
}

nginx_cycle() {     # nginx -t and a start, with /etc/nginx/nginx.conf
    "$nginx" -t -q || fail "nginx -t: $1"
    started=1
    "$nginx" || fail "nginx does not start: $1"
    for i in $(seq 100); do [ -s "$pidfile" ] && break; sleep 0.05; done
    [ -s "$pidfile" ] || fail "nginx wrote no $pidfile: $1"
}

# --- lintian: clean but for the overrides it reads from the package ---
if command -v lintian > /dev/null; then
    lintian --fail-on error,warning "$deb" || fail "lintian"
    say "lintian: clean ($(( $(date +%s) - t0 )) s)"
else
    say "lintian is not installed: not checked"
fi

# --- install -----------------------------------------------------------
installed=1
DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends -o DPkg::Lock::Timeout=120 "$deb" \
    > "$tmp/apt.log" || { cat "$tmp/apt.log"; fail "apt-get install"; }
say "installed ($(( $(date +%s) - t0 )) s)"

multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null \
            || echo x86_64-linux-gnu)
module=/usr/lib/nginx/modules/ngx_http_kvserve_module.so
link=/etc/nginx/modules-enabled/50-mod-http-kvserve.conf
[ -f "$module" ] || fail "no $module"
avail=/usr/share/nginx/modules-available/mod-http-kvserve.conf
[ "$(readlink "$link")" = "$avail" ] || fail "$link is not the package's"
grep -qx 'load_module modules/ngx_http_kvserve_module.so;' "$link" \
    || fail "$link does not load the module"
/usr/bin/kvserve info "$model" > /dev/null || fail "kvserve info"
if dpkg -L "$pkg" | grep -q '/kvserve/libkvserve_cuda.so$'; then
    cuda=/usr/lib/$multiarch/kvserve/libkvserve_cuda.so
    [ -f "$cuda" ] || fail "no $cuda"
    grep -qaF "$cuda" "$module" || fail "the module does not name $cuda"
fi

# --- a site that serves the model on a free port ------------------------
install -d -m 755 "$tmp/models"
install -m 644 "$model" "$tmp/models/default.gguf"
chmod 755 "$tmp"
port=$(free_port)
sed -e "s|/var/lib/kvserve/models/default.gguf|$tmp/models/default.gguf|" \
    -e "s|listen  127.0.0.1:8080;|listen  127.0.0.1:$port;|" \
    -e "s|^#kvserve_kv_cache .*|kvserve_kv_cache  16m;\nkvserve_threads  1;|" \
    "$example" > "$site"
grep -q "127.0.0.1:$port;" "$site" && grep -qF "$tmp/models/" "$site" \
    || fail "the example's listen or kvserve_model line changed"
set_default_aside

nginx_cycle "with the package and the site"
say "nginx serves on 127.0.0.1:$port ($(( $(date +%s) - t0 )) s)"
[ "$(stat -c %U "$engine_dir")" = www-data ] \
    || fail "$engine_dir is not the worker user's"

curl -sS --max-time 60 -o "$tmp/chat.json" -w '%{http_code}' \
    -H 'Content-Type: application/json' \
    -d '{"model": "default", "max_tokens": 8, "temperature": 0,
         "messages": [{"role": "user", "content": "Hello"}]}' \
    "http://127.0.0.1:$port/v1/chat/completions" > "$tmp/status" \
    || fail "curl"
answer=$(cat "$tmp/chat.json")
[ "$(cat "$tmp/status")" = 200 ] \
    || fail "chat completion: HTTP $(cat "$tmp/status"): $answer"
python3 - "$tmp/chat.json" <<'EOF' || fail "chat completion: $answer"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["object"] == "chat.completion", r["object"]
assert r["model"] == "default", r["model"]
m = r["choices"][0]["message"]
assert m["role"] == "assistant" and isinstance(m["content"], str), m
assert 1 <= r["usage"]["completion_tokens"] <= 8, r["usage"]
EOF
say "chat completion: ${answer:0:200}"
code=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' \
       "http://127.0.0.1:$port/health")
[ "$code" = 200 ] || fail "/health: HTTP $code"

stop_nginx || fail "stopping nginx"
started=0
rm -f "$site"

# --- remove, then purge -------------------------------------------------
DEBIAN_FRONTEND=noninteractive dpkg -r "$pkg" > "$tmp/dpkg.log" \
    || { cat "$tmp/dpkg.log"; fail "dpkg -r"; }
[ -e "$module" ] && fail "dpkg -r left $module"
[ -e "$link" ] || [ -L "$link" ] && fail "dpkg -r left $link"
[ -L "$link.removed" ] || fail "dpkg -r did not set $link aside"
"$nginx" -t -q || fail "nginx -t after dpkg -r"
DEBIAN_FRONTEND=noninteractive dpkg --purge "$pkg" > "$tmp/dpkg.log" \
    || { cat "$tmp/dpkg.log"; fail "dpkg --purge"; }
installed=0
left=$(ls -d "$module" "$link" "$link.removed" "$engine_dir" "$avail" \
           /usr/lib/"$multiarch"/kvserve /usr/bin/kvserve \
           /usr/share/doc/"$pkg" 2>/dev/null || true)
[ -z "$left" ] || fail "left after purge: $left"
dpkg-query -W "$pkg" > /dev/null 2>&1 && fail "dpkg still knows $pkg"
say "removed and purged ($(( $(date +%s) - t0 )) s)"

# --- the system nginx without it, with its default site unless another
# process holds port 80 ---------------------------------------------------
if [ "$default_moved" = 1 ]; then
    mv "$tmp/default" "$default_site"
    default_moved=0
    free_port 80 > /dev/null || set_default_aside
fi
nginx_cycle "after the purge"
stop_nginx || fail "stopping nginx after the purge"
started=0
