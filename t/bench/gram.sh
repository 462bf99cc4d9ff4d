#!/usr/bin/env bash
# Grammar-constrained decoding, end to end (issue 21): decode tokens/s at
# batch 32 on the CPU with and without a JSON Schema (bench_gram decode,
# printing the ratio), on a generated model with a 32,000-token
# vocabulary (4 layers, 512 wide: the output projection is a real
# vocabulary's, so the per-token mask cost is too), and the token trie
# the engine builds per model at load, on the 128K vocabularies when they
# are there (GRAM_VOCABS; converted as docs/grammar.md says).
#
# Environment: KVS_BENCH_DIR (bench_gram and kvserve), KVS_TMP.
# Knobs: GRAM_SEQS (32), GRAM_GEN (64), GRAM_REPS (3), GRAM_THREADS (2),
# GRAM_VOCABS ("/tmp/llama3.gguf /tmp/qwen2.gguf").
set -euo pipefail

dir=${KVS_BENCH_DIR:-build}
tmp=${KVS_TMP:-/tmp}
model=$tmp/gram-bench-32k.gguf

if [ ! -f "$model" ]; then
    "$dir/kvserve" gen-model --layers 4 --dim 512 --heads 8 --kv-heads 4 \
        --ffn 1408 --vocab 32000 --ctx 512 --seed 3 --dtype f32 "$model"
fi

"$dir/bench_gram" decode "$model" --seqs "${GRAM_SEQS:-32}" --prompt 16 \
    --gen "${GRAM_GEN:-64}" --threads "${GRAM_THREADS:-2}" \
    --reps "${GRAM_REPS:-3}"

vocabs=()
for v in ${GRAM_VOCABS:-/tmp/llama3.gguf /tmp/qwen2.gguf}; do
    if [ -f "$v" ]; then
        vocabs+=("$v")
    else
        echo "SKIP trie: $v absent"
    fi
done
if [ ${#vocabs[@]} -gt 0 ]; then
    "$dir/bench_gram" trie "${vocabs[@]}"
fi
