#!/usr/bin/env bash
# conf/deb/build-deb.sh: turns the tree `make install` staged in Debian's
# layout (Makefile, target deb) into libnginx-mod-http-kvserve's .deb with
# dpkg's own tools, no debhelper: strips the ELF files, adds the copyright,
# changelog, lintian overrides and compressed manual, writes a temporary
# WORK/debian/ (control from conf/deb/control.in, a changelog) for
# dpkg-shlibdeps (Depends) and dpkg-gencontrol (DEBIAN/control, with the
# nginx ABI from nginx-dev's abisubstvars), adds md5sums and the
# maintainer scripts, and builds with dpkg-deb.
#
# Invariants: it writes only under WORK, whose debian/<package>/ is the
# staged tree (where dpkg-shlibdeps expects it), and OUT; the package's
# files are owned by root (dpkg-deb --root-owner-group); the CUDA
# runtime's libraries (NVIDIA's, not Debian's) give no dependency
# (shlibs.local).
#
# usage: build-deb.sh WORK OUT.deb VERSION
#   environment: MAINTAINER, NGX_SRC (/usr/share/nginx/src)
set -euo pipefail

work=$(realpath -m "$1") out=$(realpath -m "$2") version=$3
here=$(cd "$(dirname "$0")" && pwd)
pkg=libnginx-mod-http-kvserve
stage=$work/debian/$pkg
ngx_src=${NGX_SRC:-/usr/share/nginx/src}
maintainer=${MAINTAINER:?MAINTAINER is not set}
doc=$stage/usr/share/doc/$pkg

die() { echo "build-deb.sh: $*" >&2; exit 1; }

[ -f "$stage/usr/lib/nginx/modules/ngx_http_kvserve_module.so" ] \
    || die "$stage holds no module: run make install into it first"

abi=$(sed -n 's/^nginx:abi=//p' "$ngx_src/debian/libnginx-mod.abisubstvars")
[ -n "$abi" ] || die "no nginx:abi in $ngx_src/debian/libnginx-mod.abisubstvars"

# the ELF files, stripped as dh_strip does
mapfile -t elves < <(cd "$stage" && find . -type f \( -name '*.so' \
                         -o -path ./usr/bin/kvserve \) | sort)
for f in "${elves[@]}"; do
    if [[ $f == *.so ]]; then
        strip --strip-unneeded --remove-section=.comment \
              --remove-section=.note "$stage/$f"
    else
        strip --remove-section=.comment --remove-section=.note "$stage/$f"
    fi
done

# a temporary source tree for dpkg-shlibdeps and dpkg-gencontrol
when=$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
rm -f "$work"/debian/{control,changelog,shlibs.local,substvars,files}
fill() {
    sed -e "s|@VERSION@|$version|g" -e "s|@MAINTAINER@|$maintainer|g" \
        -e "s|@COMMIT@|$commit|g" \
        -e "s|@DATE@|$(LC_ALL=C date -R -u -d "@$when")|g" "$1"
}
fill "$here/control.in" > "$work/debian/control"
fill "$here/changelog.in" > "$work/debian/changelog"
# NVIDIA's cudart and cuBLAS: found through ld.so.conf, owned by no
# Debian package; the engine loads them only when it uses a GPU
printf '%s\n' 'libcudart 13' 'libcublas 13' 'libcublasLt 13' \
    > "$work/debian/shlibs.local"
cuda_suggests=
if compgen -G "$stage/usr/lib/*/kvserve/libkvserve_cuda.so" > /dev/null; then
    cuda_suggests="cuda-cudart-13-0, libcublas-13-0"
fi
printf '%s\n' "nginx:abi=$abi" "cuda:Suggests=$cuda_suggests" \
    > "$work/debian/substvars"
# DEBIAN/ marks the package's root for dpkg-shlibdeps
rm -rf "$stage/DEBIAN"
install -d -m 755 "$stage/DEBIAN"

(cd "$work" && dpkg-shlibdeps -Tdebian/substvars \
     "${elves[@]/#./debian/$pkg}")

# documentation: copyright, changelog and manual as Debian wants them
install -d -m 755 "$doc"
install -m 644 "$here/copyright" "$doc/copyright"
install -d -m 755 "$stage/usr/share/lintian/overrides"
grep -v '^#' "$here/lintian-overrides" \
    > "$stage/usr/share/lintian/overrides/$pkg"
gzip -9n < "$work/debian/changelog" > "$doc/changelog.Debian.gz"
find "$stage/usr/share/man" -type f ! -name '*.gz' -exec gzip -9nf {} +

find "$stage" -type d -exec chmod 755 {} +
find "$stage" -type f -exec chmod 644 {} +
chmod 755 "$stage/usr/bin/kvserve"

(cd "$work" && dpkg-gencontrol -p"$pkg" -P"$stage" -Tdebian/substvars \
     -fdebian/files -v"$version")
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' \
     | LC_ALL=C sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
chmod 644 "$stage/DEBIAN/md5sums"
for s in postinst prerm postrm; do
    install -m 755 "$here/$s" "$stage/DEBIAN/$s"
done
install -m 644 "$here/triggers" "$stage/DEBIAN/triggers"

SOURCE_DATE_EPOCH=$when dpkg-deb --root-owner-group -Zxz \
    --build "$stage" "$out"
