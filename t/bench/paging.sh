#!/usr/bin/env bash
# Paging's account (issue 24, point 6; docs/capacity.md): bench_paging
# (t/bench/bench_paging.c): the KV memory a contiguous max-length
# allocator holds against the paged pool at block sizes 8, 16 and 32 on
# a stated log-normal length distribution, then the CPU attention time
# of the same K/V laid out contiguously and paged (shuffled blocks), in
# the same run.  Prints the load before and after: the attention figures
# are ratios of runs interleaved round by round, but absolute times move
# with the machine's load.
#
# Environment: KVS_BENCH_DIR (where bench_paging is built), KVS_TMP (the
# generated model is written there, removed once open).
# Knobs: PAGING_ARGS (extra bench_paging options, e.g. "--seqs 16 --len
# 4096 --rounds 31 --threads 2"; bench_paging --help lists them).
set -euo pipefail

bin=${KVS_BENCH_DIR:-build}/bench_paging
export KVS_TMP=${KVS_TMP:-/tmp}

echo "load before: $(uptime)"
# shellcheck disable=SC2086
"$bin" ${PAGING_ARGS:-}
echo "load after: $(uptime)"
