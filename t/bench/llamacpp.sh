#!/usr/bin/env bash
# Peer numbers for `kvserve bench`: llama.cpp's CPU build on the same GGUF
# and thread count, measured on this machine.  Nothing of llama.cpp is in
# this repository; this script only runs its binaries.
#
# Usage: t/bench/llamacpp.sh MODEL.gguf THREADS
#   (no arguments: $KVS_FIXTURES/models/stories260K-f32.gguf, 1 thread,
#   which is what `make bench` runs)
# Needs LLAMA_CPP_BUILD=/path/to/llama.cpp/build/bin holding llama-bench
# and llama-batched-bench; without it, prints one SKIP line and exits 0.
#
# Prints one line:
#   peer=llama.cpp model=<file> threads=<n> prefill_tps=<x>
#   decode1_tps=<x> decode32_tps=<x> [extra key=value fields]
# prefill_tps: llama-bench -p 512 -n 0 (one 512-token prompt, ubatch 512).
# decode1_tps: llama-bench -p 0 -n 128 (one sequence, context 0..128).
#   Both best sample of LLAMA_REPS (3) runs, best over LLAMA_FA ("0,1",
#   flash attention off and on); fa_* fields say which won.
# decode32_tps: llama-batched-bench -npp 128 -ntg 128 -npl 32: 32
#   sequences, each with its own 128-token prompt (not shared: no -pps),
#   then 128 decode steps of all 32 at once; S_TG = 32*128 / decode time.
#   prefill32_tps is that run's prompt speed (4096 tokens).  LLAMA_BB_REPS
#   (1) runs per LLAMA_BB_FA value ("1"; with "0 1" both), best taken.
#   Flash attention is the default here because llama.cpp keeps one
#   unified KV cache of 32*(128+128) cells: without it every decode token
#   attends over all of it under a mask, which measured 1.3x to 4x slower
#   at batch 32.
# Knobs: LLAMA_PP (512), LLAMA_TG (128), LLAMA_REPS (3), LLAMA_FA ("0,1"),
#   LLAMA_BB_PP (128), LLAMA_BB_TG (128), LLAMA_BB_NPL (32),
#   LLAMA_BB_FA ("1"), LLAMA_BB_REPS (1).
#
# Fetching and building the peer (outside the repository):
#   the tool fetch of github:ggerganov/llama.cpp gives a bare git dir at
#   commit c392e5094deaf2d1a7c18683214f007fad3fe42b (2025-02-20); the
#   snapshot lacks four models/ggml-vocab-*.gguf blobs and the kompute
#   submodule, so exclude them from the export:
#     g=/work/.mirror/ggerganov+llama.cpp/repo; p=/work/peers/llama.cpp
#     mkdir -p $p && git --git-dir=$g archive HEAD -- . \
#       ':(exclude)models/ggml-vocab-aquila.gguf' \
#       ':(exclude)models/ggml-vocab-command-r.gguf' \
#       ':(exclude)models/ggml-vocab-llama-bpe.gguf' \
#       ':(exclude)models/ggml-vocab-qwen2.gguf' | tar -x -C $p
#     cd $p && cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF \
#       -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
#     cmake --build build -j2 --target llama-bench llama-batched-bench \
#       llama-cli llama-quantize
#   (llama-quantize and libllama.so are what t/bench/quant_rmse.sh,
#   quant_peer.sh and quant_serve.sh need)
#     export LLAMA_CPP_BUILD=$p/build/bin
#   Defaults kept: GGML_NATIVE=ON (-march=native: on this host AVX2, FMA,
#   F16C, AVX512F/VNNI/BF16/FP16, AMX-INT8; Q8_0 weights are repacked for
#   AMX), OpenMP on, llamafile sgemm on, KV cache F16.
set -euo pipefail

bin=${LLAMA_CPP_BUILD:-}
recipe="see the comment at the top of $0 for the fetch/build recipe"
if [ -z "$bin" ]; then
    echo "SKIP: llama.cpp peer: LLAMA_CPP_BUILD is not set (point it at" \
         "llama.cpp/build/bin; $recipe)"
    exit 0
fi
for b in llama-bench llama-batched-bench; do
    if [ ! -x "$bin/$b" ]; then
        echo "SKIP: llama.cpp peer: $bin/$b not found ($recipe)"
        exit 0
    fi
done

defaulted=0
if [ $# -eq 0 ]; then
    fx=${KVS_FIXTURES:-/work/shared/fixtures}
    set -- "$fx/models/stories260K-f32.gguf" 1
    defaulted=1
fi
if [ $# -ne 2 ]; then
    echo "usage: $0 MODEL.gguf THREADS" >&2
    exit 2
fi
model=$1
threads=$2
if [ ! -f "$model" ]; then
    if [ "$defaulted" = 1 ]; then
        echo "SKIP: llama.cpp peer: model $model not found"
        exit 0
    fi
    echo "llama.cpp peer: model $model not found" >&2
    exit 2
fi

pp=${LLAMA_PP:-512}
tg=${LLAMA_TG:-128}
reps=${LLAMA_REPS:-3}
fa=${LLAMA_FA:-0,1}
bb_pp=${LLAMA_BB_PP:-128}
bb_tg=${LLAMA_BB_TG:-128}
bb_npl=${LLAMA_BB_NPL:-32}
bb_fa=${LLAMA_BB_FA:-1}
bb_reps=${LLAMA_BB_REPS:-1}
ctx=$((bb_npl * (bb_pp + bb_tg)))

# llama-bench jsonl -> "<best sample t/s> <fa 0|1>" of the best row
bench_best() {
    "$bin/llama-bench" -m "$model" -t "$threads" -r "$reps" -fa "$fa" \
        -o jsonl "$@" 2>/dev/null \
    | awk '{
        f = ($0 ~ /"flash_attn": true/) ? 1 : 0
        s = $0; sub(/.*"samples_ts": \[/, "", s); sub(/\].*/, "", s)
        n = split(s, v, ",")
        for (i = 1; i <= n; i++) {
            if (v[i] + 0 > best) { best = v[i] + 0; bf = f }
        }
    } END { if (best > 0) printf "%.2f %d\n", best, bf }'
}

read -r prefill fa_prefill <<<"$(bench_best -p "$pp" -n 0)" || true
read -r decode1 fa_decode1 <<<"$(bench_best -p 0 -n "$tg")" || true

decode32=0
prefill32=0
fa_decode32=
runs=
for f in $bb_fa; do
    for ((i = 0; i < bb_reps; i++)); do
        runs="$runs $f"
    done
done
for f in $runs; do
    flag=
    if [ "$f" = 1 ]; then
        flag=-fa
    fi
    # jsonl row of the npl run -> "<speed_tg> <speed_pp>"
    r=$("$bin/llama-batched-bench" -m "$model" -t "$threads" \
            -tb "$threads" -c "$ctx" -npp "$bb_pp" -ntg "$bb_tg" \
            -npl "$bb_npl" $flag --output-format jsonl 2>/dev/null \
        | awk -v npl="$bb_npl" '$0 ~ "\"pl\": " npl "," {
            tg = $0; sub(/.*"speed_tg": /, "", tg); sub(/[,}].*/, "", tg)
            p = $0; sub(/.*"speed_pp": /, "", p); sub(/[,}].*/, "", p)
            printf "%.2f %.2f\n", tg, p
        }') || r=
    if [ -z "$r" ]; then
        continue
    fi
    read -r t p <<<"$r"
    if awk -v a="$t" -v b="$decode32" 'BEGIN { exit !(a > b) }'; then
        decode32=$t
        prefill32=$p
        fa_decode32=$f
    fi
done

if [ -z "${prefill:-}" ] || [ -z "${decode1:-}" ] || [ "$decode32" = 0 ]
then
    echo "llama.cpp peer: a measurement failed on $model (run" \
         "$bin/llama-bench -m $model by hand to see why)" >&2
    exit 1
fi

echo "peer=llama.cpp model=$(basename "$model") threads=$threads" \
     "prefill_tps=$prefill decode1_tps=$decode1 decode32_tps=$decode32" \
     "prefill32_tps=$prefill32 fa_prefill=$fa_prefill" \
     "fa_decode1=$fa_decode1 fa_decode32=$fa_decode32 pp=$pp tg=$tg" \
     "bb_pp=$bb_pp bb_tg=$bb_tg bb_npl=$bb_npl pp_shared=0 reps=$reps" \
     "bb_reps=$bb_reps"
