#!/usr/bin/env bash
# test_fixtures_fetch: checks t/fixtures.sh (make fixtures) and its
# manifest without the network, against an offline mirror built in a
# temporary directory from a local copy of the fixtures.
#
# Owns: its temporary directory, removed on exit.  It reads the fixtures
# copy ($KVS_FIXTURES, else ../shared/fixtures) and never writes there.
# Invariants checked:
#   - every sha256 and size in t/fixtures.manifest is the local copy's
#     (and an in-repo line's t/fixtures-data file's);
#   - a fetch from the mirror places every file with the manifest's
#     sha256, including each template decoded from a Python, TypeScript or
#     Markdown stand-in of its source (so every string-literal decoder is
#     checked against the real bytes);
#   - a second run downloads nothing;
#   - a corrupted mirror file is refused: non-zero exit, an error naming
#     the file and both hashes, and no file (nor a partial one) left;
#   - a file present with wrong bytes is fetched again.
# Skips (a SKIP line naming the directory) when the local copy is absent.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fx=${KVS_FIXTURES:-$root/../shared/fixtures}
manifest=$root/t/fixtures.manifest
py=${KVS_PYTHON:-}
if [ -z "$py" ]; then
    if [ -x "$root/build/venv/bin/python" ]; then
        py=$root/build/venv/bin/python
    else
        py=python3
    fi
fi
export KVS_PYTHON=$py

fails=0
checks=0
ok() { checks=$((checks + 1)); echo "ok - $*"; }
not_ok() { checks=$((checks + 1)); fails=$((fails + 1)); echo "not ok - $*"; }

if [ ! -d "$fx" ]; then
    echo "SKIP: test_fixtures_fetch needs $fx (the fixtures directory;" \
         "set KVS_FIXTURES)"
    exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvs-fixtures-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# 1. The manifest against the local copy, line by line.
bad=0
lines=0
while read -r want_sha want_size path sources; do
    case $want_sha in ''|'#'*) continue ;; esac
    lines=$((lines + 1))
    f=$fx/$path
    if [ "$sources" = in-repo ]; then
        f=$root/t/fixtures-data/$path
    fi
    if [ ! -f "$f" ]; then
        echo "  $path: absent from the local copy"
        bad=$((bad + 1))
        continue
    fi
    got=$(sha256sum "$f" | cut -d' ' -f1)
    size=$(wc -c < "$f" | tr -d ' ')
    if [ "$got" != "$want_sha" ] || [ "$size" != "$want_size" ]; then
        echo "  $path: manifest $want_sha $want_size, file $got $size"
        bad=$((bad + 1))
    fi
done < "$manifest"
if [ "$bad" -eq 0 ] && [ "$lines" -gt 0 ]; then
    ok "manifest: $lines files, each sha256 and size as in $fx"
else
    not_ok "manifest: $bad of $lines lines differ from $fx"
fi

# 2. A full fetch from a mirror of everything.
mirror=$tmp/mirror
"$py" "$here/mk_fixtures_mirror.py" "$manifest" "$fx" "$mirror" \
    "$tmp/all.manifest"
run() {
    FIXTURES=$tmp/$1 FIXTURES_MANIFEST=$tmp/$2 \
        FIXTURES_MIRROR=file://$mirror "$root/t/fixtures.sh" \
        > "$tmp/out" 2> "$tmp/err"
}
if run dest all.manifest; then
    ok "fetch from the mirror exits 0"
else
    not_ok "fetch from the mirror exits 0: $(tail -3 "$tmp/err")"
fi
bad=0
while read -r want_sha _ path _; do
    case $want_sha in ''|'#'*) continue ;; esac
    if [ ! -f "$tmp/dest/$path" ] || [ "$(sha256sum < "$tmp/dest/$path" \
            | cut -d' ' -f1)" != "$want_sha" ]; then
        echo "  $path: missing or wrong bytes after the fetch"
        bad=$((bad + 1))
    fi
done < "$manifest"
if [ "$bad" -eq 0 ]; then
    ok "every file arrived with its sha256 (templates decoded exactly)"
else
    not_ok "$bad files missing or wrong after the fetch"
fi
if ! find "$tmp/dest" -name '*.part.*' | grep -q .; then
    ok "no partial files left"
else
    not_ok "partial files left: $(find "$tmp/dest" -name '*.part.*')"
fi

# 3. A second run has nothing to do.
if run dest all.manifest && grep -q ' 0 fetched (0 downloads), 0 failed' \
        "$tmp/out"; then
    ok "second run downloads nothing"
else
    not_ok "second run: $(cat "$tmp/out" "$tmp/err")"
fi

# 4. A corrupted mirror file is refused and leaves nothing behind.  The
# first plain-URL vocab file is corrupted; a .gguf has one source only.
victim=$(awk '!/^#/ && $3 ~ /^vocab\/ggml-vocab-.*\.gguf$/ && NF == 4 \
              { print $3; exit }' "$manifest")
line=$(awk -v p="$victim" '$3 == p' "$manifest")
want=$(cut -d' ' -f1 <<< "$line")
url=$(cut -d' ' -f4 <<< "$line")
printf '%s\n' "$line" > "$tmp/one.manifest"
printf 'x' >> "$mirror/${url#https://}"
actual=$(sha256sum < "$mirror/${url#https://}" | cut -d' ' -f1)
if run bad one.manifest; then
    not_ok "corrupted $victim: fetch exited 0"
else
    ok "corrupted $victim: fetch exits non-zero"
fi
if grep -q "$victim.*expected sha256 $want.*got $actual" "$tmp/err"; then
    ok "the error names $victim, the expected and the actual sha256"
else
    not_ok "error for $victim: $(cat "$tmp/err")"
fi
if [ -z "$(find "$tmp/bad" -type f 2>/dev/null)" ]; then
    ok "nothing left in place for $victim"
else
    not_ok "files left: $(find "$tmp/bad" -type f)"
fi

# 5. A file present with the wrong bytes is replaced; the mirror is right
# again for this one.
cp "$fx/$victim" "$mirror/${url#https://}"
mkdir -p "$(dirname "$tmp/bad/$victim")"
printf 'stale' > "$tmp/bad/$victim"
if run bad one.manifest && [ "$(sha256sum < "$tmp/bad/$victim" \
        | cut -d' ' -f1)" = "$want" ]; then
    ok "a stale $victim is fetched again"
else
    not_ok "stale $victim: $(cat "$tmp/out" "$tmp/err")"
fi

echo "test_fixtures_fetch: $((checks - fails)) of $checks checks passed"
[ "$fails" -eq 0 ]
