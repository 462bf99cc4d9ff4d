#!/usr/bin/env bash
# Opening and validating GGUF files: our reader (bench_gguf) against the
# Python gguf package's GGUFReader on the same files, in the same run.
# Prints microseconds per open (best of N) and the ratio peer/ours.
# Environment: KVS_BENCH_GGUF (our binary), KVS_PYTHON (python with gguf),
# KVS_FIXTURES, KVS_TMP, KVS_CLI.
set -euo pipefail

n=${N:-5}
files=()
for f in "$KVS_FIXTURES"/vocab/ggml-vocab-{llama-spm,gpt-2,falcon}.gguf \
         "$KVS_FIXTURES"/models/stories260K-f32.gguf; do
    [ -f "$f" ] && files+=("$f")
done
big="$KVS_TMP/bench-100m-q8_0.gguf"
[ -f "$big" ] || "$KVS_CLI" gen-model --preset 100m --dtype q8_0 --seed 1 "$big"
files+=("$big")

ours=$("$KVS_BENCH_GGUF" -n "$n" "${files[@]}")
peer=$("$KVS_PYTHON" "$(dirname "$0")/gguf_open_peer.py" "$n" "${files[@]}")

printf '%-34s %12s %14s %8s\n' file "ours (us)" "gguf-py (us)" ratio
paste <(echo "$ours") <(echo "$peer") | while read -r f a _ b; do
    awk -v f="$(basename "$f")" -v a="$a" -v b="$b" \
        'BEGIN { printf "%-34s %12s %14s %7.1fx\n", f, a, b, b / a }'
done
