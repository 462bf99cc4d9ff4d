#!/usr/bin/env bash
# Batched LoRA on the CPU backend (docs/lora.md): decode tokens/s with 1,
# 8 and 64 distinct adapters in a batch of 32 against the merged
# single-adapter baseline, in the same run (t/bench/bench_lora.c).
# Environment: KVS_BENCH_DIR (the build folder), KVS_TMP.
set -euo pipefail

echo "load: $(uptime)"
"$KVS_BENCH_DIR/bench_lora" --batch 32 --steps "${LORA_STEPS:-32}" \
    --repeat "${LORA_REPEAT:-3}"

# the same on one layer of Llama 3 8B's shapes, where a rank-16 adapter
# is 0.56% of the model as on the real one (t/bench/bench_lora.h; about
# 2 GB of files in KVS_TMP, a few minutes)
echo "load: $(uptime)"
"$KVS_BENCH_DIR/bench_lora" --preset 8b-layer --batch 32 --prompt 4 \
    --steps "${LORA_8B_STEPS:-8}" --repeat "${LORA_8B_REPEAT:-2}"

# paging: 64 adapters through the engine with 64 (all resident), 16 and
# 8 slots, in the same run (t/bench/bench_lora_paging.c)
"$KVS_BENCH_DIR/bench_lora_paging" --requests "${LORA_REQUESTS:-256}"
