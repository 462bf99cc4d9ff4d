#!/usr/bin/env bash
# Content guards (docs/guard.md): what the output guard costs per
# streamed token with 100 bounded PII, secret and jailbreak rules, tokens
# of 4 bytes on average fed one at a time, against a baseline copying the
# same tokens (t/bench/bench_guard.c); then 12 rules and 1 for scale.
#
# Environment: KVS_BENCH_DIR (the build directory: bench_guard).
# Knobs: GUARD_TOKENS (1000000).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bdir=${KVS_BENCH_DIR:-$root/build}
tokens=${GUARD_TOKENS:-1000000}

for r in 100 12 1; do
    echo "== $r rules"
    "$bdir/bench_guard" -r "$r" -t "$tokens"
done
