#!/usr/bin/env bash
# The prefix cache's disk tier (docs/prefix-cache.md, "The second tier"):
# its bandwidth, buffered against O_DIRECT, beside a memcpy of the same
# blocks, in one run (t/bench/bench_tier.c).  Each size runs TIER_RUNS
# times so that the spread under load shows.
#
# Environment: KVS_BENCH_DIR (the build directory: bench_tier), KVS_TMP
# (where the tier file goes: put it on the disk the tier would use).
# Knobs: TIER_RUNS (3), TIER_MIB (256).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bdir=${KVS_BENCH_DIR:-$root/build}
runs=${TIER_RUNS:-3}
mib=${TIER_MIB:-256}
file=${KVS_TMP:-/tmp}/tier-bench.dat

echo "== load: $(uptime)"

# 64 KiB: a block of 16 tokens of a small model (4 KiB/token);
# 1 MiB: 16 tokens of an 8B model in f16 (128 KiB/token)
for kib in 64 1024; do
    n=$(( mib * 1024 / (kib + 8) / 2 ))
    for r in $(seq "$runs"); do
        echo "== ${kib} KiB blocks, run $r"
        "$bdir/bench_tier" -f "$file" -m "$mib" -k "$kib" -n "$n"
    done
done
