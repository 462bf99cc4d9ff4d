#!/usr/bin/env bash
# gpu-pack: what a lent device machine needs to run gpu-check without
# building there (its image has nvcc and cuBLAS, but none of the -dev
# packages kvserve links: jansson, PCRE2, utf8proc, xxHash, OpenBLAS,
# cmocka).  Writes $B/gpu-pack.tar.xz (under 64 MiB with the tree, the
# device tool's limit), holding:
#   bin/      gpu_check, libkvserve_cuda.so and its probe, kvserve,
#             test_cpu_amx and test_cpu_amxb (the AMX tile kernels against
#             their statements),
#             bench_amx and bench_lora (CPU benches for a quiet machine)
#   lib/      the non-CUDA shared libraries those link, as resolved here
#   fixtures/ the one fixture gpu_check reads (stories260K-f32.gguf)
#   peer/     llama.cpp's source, when LLAMA_SRC names a tarball of it
#             (the CPU peer for the AMX prefill check; built there)
# t/gpu/remote.sh unpacks and runs it on the device machine; docs/cuda.md
# ("On a lent device") has the call.  Nothing here is committed.
#
# Usage: t/gpu/pack.sh BUILD_DIR FIXTURES
set -euo pipefail

b=${1:?usage: pack.sh BUILD_DIR FIXTURES}
fx=${2:?usage: pack.sh BUILD_DIR FIXTURES}
stage=$b/gpu-pack
rm -rf "$stage" "$b/gpu-pack.tar.xz"
mkdir -p "$stage/bin" "$stage/lib" "$stage/fixtures/models"

bins=(gpu_check libkvserve_cuda.so libkvserve_cuda_probe.so kvserve
      unit/test_cpu_amx unit/test_cpu_amxb bench_amx bench_lora)
for f in "${bins[@]}"; do
    if [ ! -f "$b/$f" ]; then
        echo "pack.sh: $b/$f is not built (make gpu-pack builds it)" >&2
        exit 1
    fi
    # debug info is most of gpu_check's size and is not read there
    strip -g -o "$stage/bin/$(basename "$f")" "$b/$f"
done

# every library the binaries need that is neither glibc's, the
# compiler runtime's nor CUDA's (the device's own toolkit provides
# those: cuBLAS alone is larger than the transfer limit)
for f in "$stage"/bin/*; do
    ldd "$f" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r so; do
    case $(basename "$so") in
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* \
        | libstdc++.so* | libgcc_s.so* | libcu* | libnv*) ;;
        *) cp -L "$so" "$stage/lib/$(basename "$so")" ;;
    esac
done

model=$fx/models/stories260K-f32.gguf
if [ -f "$model" ]; then
    cp "$model" "$stage/fixtures/models/"
else
    echo "pack.sh: $model is absent: e2e and tier will skip stories260K"
fi

if [ -n "${LLAMA_SRC:-}" ]; then
    mkdir -p "$stage/peer"
    cp "$LLAMA_SRC" "$stage/peer/llama-src.tar.xz"
fi

tar -C "$b" -cf - gpu-pack | xz -6 -T0 > "$b/gpu-pack.tar.xz"
rm -rf "$stage"
ls -l "$b/gpu-pack.tar.xz"
