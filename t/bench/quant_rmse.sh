#!/usr/bin/env bash
# Round-trip error of `kvserve quantize` against llama.cpp's
# `llama-quantize` (issue 19): one generated F32 model quantized by both
# in each mix (no importance matrix), then for every matrix both files
# gave the same type, the RMSE of the dequantized weights against the F32
# originals (t/bench/quant_rmse.py, through gguf.quants.dequantize).
# Also lists every tensor the two mixes typed differently, and each
# quantization's wall time (ours one thread; llama-quantize
# $QUANT_THREADS, default 1).
#
# Prints, per mix and type, one line (quant_rmse.py says the fields):
#   mix=<m> type=<t> tensors=<n> rmse_ours=<x> rmse_peer=<x>
#   ratio_mean=<x> ratio_worst=<x> worst=<tensor> same_bytes=<k>
# then per mix: bytes of both files, same_types=yes|no, secs_ours,
# secs_peer.  A ratio below 1 means ours has the smaller error.
#
# Environment and knobs: t/bench/quant_files.bash.  Without
# LLAMA_CPP_BUILD, one SKIP line and exit 0.
set -euo pipefail

. "$(dirname "$0")/quant_files.bash"
quant_need_peer quant_rmse.sh llama-quantize

for mix in $quant_mixes; do
    quant_make "$mix"
    "$quant_python" "$quant_here/quant_rmse.py" "$quant_base" "$mix" \
        "$quant_dir/ours-$mix.gguf" "$quant_dir/peer-$mix.gguf"
    echo "mix=$mix secs_ours=$(cat "$quant_dir/ours-$mix.gguf.secs")" \
         "secs_peer=$(cat "$quant_dir/peer-$mix.gguf.secs")"
done
