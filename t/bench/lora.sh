#!/usr/bin/env bash
# Batched LoRA on the CPU backend (docs/lora.md): decode tokens/s with 1,
# 8 and 64 distinct adapters in a batch of 32 against the merged
# single-adapter baseline, in the same run (t/bench/bench_lora.c).
# Environment: KVS_BENCH_DIR (the build folder), KVS_TMP.
set -euo pipefail

echo "load: $(uptime)"
"$KVS_BENCH_DIR/bench_lora" --batch 32 --steps "${LORA_STEPS:-32}" \
    --repeat "${LORA_REPEAT:-3}"

# paging: 64 adapters through the engine with 64 (all resident), 16 and
# 8 slots, in the same run (t/bench/bench_lora_paging.c)
"$KVS_BENCH_DIR/bench_lora_paging" --requests "${LORA_REQUESTS:-256}"
