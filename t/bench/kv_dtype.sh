#!/usr/bin/env bash
# The KV cache's dtypes (issue 24, point 5): bench_kv_dtype
# (t/bench/bench_kv_dtype.c) with the f32 cache as the baseline in the
# same run, on stories260K (KVS_FIXTURES), the trained default model
# (conf/models/kvserve-stories.gguf) and a generated model with heads of
# 64 (4 layers, 512 wide, 8 heads, 4 K/V heads, context 512): bytes per
# token, greedy agreement over 64 tokens and logit error against f32,
# decode tokens/s.  Prints the machine's load before and after.
#
# Environment: KVS_BENCH_DIR (where bench_kv_dtype is built; the kvserve
# tool beside it), KVS_FIXTURES, KVS_TMP (the generated model is written
# there and removed).  Knobs: KVDT_THREADS (1), KVDT_REPS (3).
set -euo pipefail

dir=${KVS_BENCH_DIR:-build}
tmp=${KVS_TMP:-/tmp}
here=$(cd "$(dirname "$0")/../.." && pwd)
gen="$tmp/kvdt-gen.$$.gguf"
trap 'rm -f "$gen"' EXIT

"$dir/kvserve" gen-model --dim 512 --ffn 1024 --heads 8 --kv-heads 4 \
    --layers 4 --vocab 512 --ctx 512 --seed 24 --name kvdt-gen "$gen" \
    >/dev/null

models=()
if [ -n "${KVS_FIXTURES:-}" ] \
   && [ -f "$KVS_FIXTURES/models/stories260K-f32.gguf" ]; then
    models+=("$KVS_FIXTURES/models/stories260K-f32.gguf")
else
    echo "SKIP stories260K: KVS_FIXTURES has no models/stories260K-f32.gguf"
fi
models+=("$here/conf/models/kvserve-stories.gguf" "$gen")

echo "load before: $(uptime)"
"$dir/bench_kv_dtype" -t "${KVDT_THREADS:-1}" -r "${KVDT_REPS:-3}" \
    "${models[@]}"
echo "load after: $(uptime)"
