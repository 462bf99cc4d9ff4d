#!/usr/bin/env bash
# fixtures.sh: fetch the test data listed in t/fixtures.manifest into the
# fixtures directory (make fixtures).
#
# Owns: the files under $FIXTURES named by the manifest, nothing else there.
# Invariants:
#   - a file in place has the manifest's size and sha256: a download goes to
#     a temporary file beside the target and is renamed only after both
#     match, so a failed or interrupted run leaves no half-written file;
#   - a file already present with the right sha256 is not fetched again;
#   - every line is tried; the exit status is non-zero if any file failed,
#     and each failure names the file, the expected and the actual hash.
#
# Environment:
#   FIXTURES          target directory (default: t/fixtures beside this
#                     script)
#   FIXTURES_MIRROR   base to fetch from instead of the network: a URL
#                     https://HOST/PATH is read from $FIXTURES_MIRROR/HOST/PATH
#                     (file:///dir works, for offline use)
#   FIXTURES_MANIFEST manifest to read (default: t/fixtures.manifest)
#   KVS_PYTHON        python3 for the string-literal sources (default:
#                     build/venv/bin/python when present, else python3)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
dest=${FIXTURES:-$here/fixtures}
manifest=${FIXTURES_MANIFEST:-$here/fixtures.manifest}
mirror=${FIXTURES_MIRROR:-}
if [ -z "${KVS_PYTHON:-}" ]; then
    if [ -x "$root/build/venv/bin/python" ]; then
        KVS_PYTHON=$root/build/venv/bin/python
    else
        KVS_PYTHON=python3
    fi
fi

# Plain https only: a redirect to http (or anything else) is refused.  A
# mirror may be local, so file: is allowed only when one is set.
protos='=https'
if [ -n "$mirror" ]; then
    protos='=https,file'
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kvs-fixtures.XXXXXX")
partial=
cleanup() {
    if [ -n "$partial" ]; then rm -f "$partial"; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { wc -c < "$1" | tr -d ' '; }

# One source file (the openvino.genai configs, say) feeds many templates:
# download each URL once a run, into $work keyed by the URL's hash.
fetch_url() {
    local url=$1 key out src
    key=$(printf '%s' "$url" | sha256sum | cut -d' ' -f1)
    out=$work/dl-$key
    if [ -f "$out" ]; then
        printf '%s\n' "$out"
        return 0
    fi
    # A URL that failed once this run is not tried again for the next file.
    if [ -f "$out.failed" ]; then
        return 1
    fi
    case $url in
        https://*) ;;
        *) echo "fixtures: refusing non-https URL $url" >&2; return 1 ;;
    esac
    src=$url
    if [ -n "$mirror" ]; then
        src=${mirror%/}/${url#https://}
    fi
    if ! curl -fsSL --proto "$protos" --proto-redir '=https' \
            --retry 3 --retry-delay 2 --connect-timeout 20 \
            --max-time 600 -o "$out.part" "$src"; then
        rm -f "$out.part"
        : > "$out.failed"
        echo "fixtures: cannot download $src" >&2
        return 1
    fi
    mv "$out.part" "$out"
    printf '%s\n' "$out"
}

# Put one source's bytes for PATH into FILE; 1 if the source gave none.
from_source() {
    local path=$1 source=$2 file=$3 url spec got
    if [ "$source" = in-repo ]; then
        cp "$here/fixtures-data/$path" "$file" 2>/dev/null || {
            echo "fixtures: $path: t/fixtures-data/$path is missing" >&2
            return 1
        }
        return 0
    fi
    url=${source%%#*}
    spec=
    if [ "$url" != "$source" ]; then
        spec=${source#*#}
    fi
    got=$(fetch_url "$url") || return 1
    if [ -z "$spec" ]; then
        cp "$got" "$file"
    elif ! "$KVS_PYTHON" "$here/fixtures_extract.py" "$spec" "$got" \
            > "$file"; then
        echo "fixtures: $path: cannot extract $spec from $url" >&2
        return 1
    fi
}

present=0
placed=0
failed=()
while read -r want_sha want_size path sources; do
    case $want_sha in ''|'#'*) continue ;; esac
    target=$dest/$path
    if [ -f "$target" ] && [ "$(sha "$target")" = "$want_sha" ]; then
        present=$((present + 1))
        continue
    fi
    mkdir -p "$(dirname "$target")"
    ok=
    for source in $sources; do
        partial=$(mktemp "$target.part.XXXXXX")
        if from_source "$path" "$source" "$partial"; then
            got_size=$(size "$partial")
            got_sha=$(sha "$partial")
            if [ "$got_size" = "$want_size" ] \
                    && [ "$got_sha" = "$want_sha" ]; then
                chmod 0644 "$partial"
                mv -f "$partial" "$target"
                partial=
                ok=1
                break
            fi
            echo "fixtures: $path: mismatch from $source:" \
                 "expected sha256 $want_sha ($want_size bytes)," \
                 "got $got_sha ($got_size bytes)" >&2
        fi
        rm -f "$partial"
        partial=
    done
    if [ -n "$ok" ]; then
        placed=$((placed + 1))
    else
        failed+=("$path")
    fi
done < "$manifest"

# fetch_url runs in a subshell, so count its downloads by their files.
downloads=$(find "$work" -name 'dl-*' ! -name '*.part' ! -name '*.failed' \
    | wc -l | tr -d ' ')
echo "fixtures: $dest: $present present, $placed fetched" \
     "($downloads downloads), ${#failed[@]} failed"
if [ "${#failed[@]}" -gt 0 ]; then
    printf 'fixtures: FAILED %s\n' "${failed[@]}" >&2
    exit 1
fi
