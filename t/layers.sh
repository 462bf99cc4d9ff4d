#!/usr/bin/env bash
# t/layers.sh: checks every #include of the module's C and CUDA sources
# against the layer table in src/layers.txt (DESIGN's "dependencies point
# down"), and that no nginx header is included outside the nginx glue
# (src/ngx/ and ngx_kvserve_module.c).
#
# A quoted include is resolved as the compilers do: beside the including
# file first, then in src/ and kernels/ (the -I paths); one that resolves
# to none of them is a system or third-party header and not checked.
# docs/architecture.md quotes the table; a quote that no longer matches
# it fails too, so the page cannot drift from the rule it documents.
# Prints "file:line: ..." for each forbidden include and exits 1; exits 0
# with a one-line summary otherwise.
#
# Usage: bash t/layers.sh [ROOT]   (default: the repository holding it)
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
table=src/layers.txt
[ -r "$table" ] || { echo "layers.sh: no $table" >&2; exit 2; }

files=$( { find src kernels -type f \( -name '*.c' -o -name '*.h' \
               -o -name '*.cu' -o -name '*.cuh' \) -print;
           [ -f ngx_kvserve_module.c ] && echo ngx_kvserve_module.c; } \
         | LC_ALL=C sort)

# every file that could be included, so awk can resolve paths without
# touching the disk
known=$(mktemp)
trap 'rm -f "$known"' EXIT

quote=docs/architecture.md
stale=0
while IFS= read -r row; do
    grep -Fxq -- "$row" "$quote" 2>/dev/null && continue
    echo "$quote: does not quote this line of $table: $row"
    stale=1
done < <(grep -v -e '^#' -e '^[[:space:]]*$' "$table")
printf '%s\n' $files > "$known"

# shellcheck disable=SC2086
awk -v table="$table" -v known="$known" '
function norm(p,    n, i, a, out, k) {
    n = split(p, a, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (a[i] == "" || a[i] == ".") continue
        if (a[i] == "..") { if (k > 0) k--; continue }
        out[++k] = a[i]
    }
    p = ""
    for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
    return p
}
function dir(p) { return sub(/\/[^\/]*$/, "", p) ? p : "." }
function layer_of(p,    f, best, bl) {
    best = ""; bl = 0
    for (f in folder)
        if ((p == f || index(p, f "/") == 1) && length(f) > bl) {
            best = folder[f]; bl = length(f)
        }
    return best
}
BEGIN {
    while ((getline line < table) > 0) {
        sub(/#.*/, "", line)
        if (line ~ /^[ \t]*$/) continue
        split(line, half, ":")
        n = split(half[1], w, " ")
        name = w[1]; layers[name] = 1
        for (i = 2; i <= n; i++) folder[w[i]] = name
        m = split(half[2], u, " ")
        for (i = 1; i <= m; i++) may[name, u[i]] = 1
    }
    while ((getline line < known) > 0) exists[line] = 1
    bad = 0; checked = 0
}
FNR == 1 { self = layer_of(FILENAME) }
/^[ \t]*#[ \t]*include[ \t]*[<"]/ {
    line = $0
    if (line ~ /<ngx_[^>]*>/ && self != "ngx") {
        printf "%s:%d: nginx header %s outside the nginx glue\n",
               FILENAME, FNR, line
        bad++
        next
    }
    if (!match(line, /"[^"]+"/)) next
    inc = substr(line, RSTART + 1, RLENGTH - 2)
    target = ""
    split(norm(dir(FILENAME) "/" inc) " " norm("src/" inc) " " \
          norm("kernels/" inc), cand, " ")
    for (i = 1; i <= 3; i++) if (cand[i] in exists) { target = cand[i]; break }
    if (target == "") next
    checked++
    to = layer_of(target)
    if (self == "" || to == "") {
        printf "%s:%d: %s is in no layer of %s\n", FILENAME, FNR,
               (self == "" ? FILENAME : target), table
        bad++
        next
    }
    if (self == to || may[self, "*"] || may[self, to]) next
    printf "%s:%d: layer %s may not include %s (layer %s)\n",
           FILENAME, FNR, self, target, to
    bad++
}
END {
    if (bad) {
        printf "layers.sh: %d forbidden include(s); the table is %s\n",
               bad, table
        exit 1
    }
    printf "layers.sh: %d includes between project files follow %s\n",
           checked, table
}' $files || exit 1

exit $stale
