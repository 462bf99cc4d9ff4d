#!/usr/bin/env bash
# The Q8_0 product on AMX tiles against the AVX-512 VNNI kernel, one
# thread (t/bench/bench_amx.c; docs/performance.md, "AMX tiles for
# Q8_0").  Without AVX-512 VNNI it prints SKIP; without AMX, the VNNI
# rows alone.  Knobs: AMX_TOKENS ("1 16 128 512"), AMX_ROWS (4096),
# AMX_COLS (4096).
set -euo pipefail
dir=${KVS_BENCH_DIR:-build}
exec "$dir/bench_amx" --rows "${AMX_ROWS:-4096}" --cols "${AMX_COLS:-4096}" \
    --tokens "${AMX_TOKENS:-1 16 128 512}"
