#!/usr/bin/env bash
# Prefill only: `kvserve bench` against llama.cpp's llama-bench on the
# same generated 100M Llama in each weight type, one 512-token prompt,
# at each thread count, in the same run, and the ratios (issue 19's
# goal: prefill >= 2x llama.cpp for F16, BF16, Q8_0 and Q4_K_M at 1 and
# 2 threads).  engine.sh measures decode too and takes minutes; this is
# the part that fits a lent machine's few minutes (t/gpu/remote.sh runs
# it on the device machine's CPU, which may have AMX tiles).
#
# Ours: best prefill_tps of PREFILL_REPS runs of
#   kvserve bench M --threads T --seqs 1 --prompt 512 --gen 1 --warmup W
# (W: PREFILL_WARMUP, 1: one untimed prompt first, as llama-bench's own
# warm-up run)
# and, for each VAR=VALUE of PREFILL_ENV, the same with that in the
# environment, a column each (KVSERVE_CPU_SIMD=3: Q8_0 on AMX tiles;
# KVSERVE_CPU_GEMM=avx512: the AVX-512 batched product for F32, F16 and
# BF16; KVSERVE_CPU_SIMD=1: AVX2); the bench's "cpu kernels:" line says
# which kernels ran.
# Peer: best sample of llama-bench -p 512 -n 0 -r PREFILL_REPS, flash
# attention off and on, as t/bench/llamacpp.sh takes it.
#
# Environment: KVS_CLI (build/kvserve), KVS_TMP, LLAMA_CPP_BUILD (the
# peer's bin folder; without it one SKIP line, or ours alone with
# PREFILL_OURS_ONLY=1).
# Knobs: PREFILL_MODELS ("f16 bf16 q8_0 q4_k_m"; a *_k_[sml] mix is the
# F32 model through `kvserve quantize`), PREFILL_THREADS ("1 2"),
# PREFILL_REPS (2), PREFILL_ENV (""), PREFILL_PRESET (100m), or
# PREFILL_GEN (gen-model's shape options instead of the preset, e.g. a
# 1.1B Llama: "--layers 22 --dim 2048 --heads 32 --kv-heads 4 --ffn 5632
# --vocab 32000 --ctx 4096") with PREFILL_TAG (its files' prefix).
set -euo pipefail

cli=${KVS_CLI:-build/kvserve}
tmp=${KVS_TMP:-/tmp}/prefill-bench
models=${PREFILL_MODELS:-f16 bf16 q8_0 q4_k_m}
warm=${PREFILL_WARMUP:-1}
threads_list=${PREFILL_THREADS:-1 2}
reps=${PREFILL_REPS:-2}
envs=${PREFILL_ENV:-}
preset=${PREFILL_PRESET:-100m}
read -r -a gen <<<"${PREFILL_GEN:---preset $preset}"
[ -n "${PREFILL_GEN:-}" ] && preset=${PREFILL_TAG:-gen}
peer=${LLAMA_CPP_BUILD:-}
mkdir -p "$tmp"

if [ -n "$peer" ] && [ ! -x "$peer/llama-bench" ]; then
    echo "prefill_peer.sh: $peer/llama-bench not found: ours only" >&2
    peer=
fi
# `make bench` runs every script: without the peer (and unless asked for
# ours alone) this one is engine.sh's prefill column again, minutes of it
if [ -z "$peer" ] && [ "${PREFILL_OURS_ONLY:-0}" != 1 ]; then
    echo "SKIP: prefill peer: LLAMA_CPP_BUILD is not set (t/bench/llamacpp.sh" \
         "has the recipe; PREFILL_OURS_ONLY=1 runs ours alone)"
    exit 0
fi

field() {    # field NAME LINE: the value of NAME=... in LINE
    sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" <<<" $2"
}

ours() {     # ours MODEL THREADS: "<best prefill_tps of $reps runs>\t<kernels>"
    local v b=0 i out kern=
    for ((i = 0; i < reps; i++)); do
        out=$("$cli" bench "$1" --threads "$2" --seqs 1 --prompt 512 \
                  --gen 1 --warmup "$warm" 2>&1)
        kern=$(sed -n 's/^cpu kernels: //p' <<<"$out")
        v=$(field prefill_tps "$(grep '^bench ' <<<"$out")")
        b=$(awk -v a="${v:-0}" -v b="$b" 'BEGIN { print (a > b) ? a : b }')
    done
    printf '%s\t%s\n' "$b" "$kern"
}

theirs() {   # theirs MODEL THREADS: llama-bench's best sample, or -
    local r
    r=$("$peer/llama-bench" -m "$1" -t "$2" -r "$reps" -fa 0,1 \
            -p 512 -n 0 -o jsonl 2>/dev/null \
        | awk '{
            s = $0; sub(/.*"samples_ts": \[/, "", s); sub(/\].*/, "", s)
            n = split(s, v, ",")
            for (i = 1; i <= n; i++) if (v[i] + 0 > best) best = v[i] + 0
        } END { if (best > 0) printf "%.1f\n", best }')
    echo "${r:--}"
}

ratio() {
    if [ "$2" = "-" ] || [ -z "$2" ]; then
        echo "-"
    else
        awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'
    fi
}

model() {    # model NAME: the file, generated once
    local m=$tmp/$preset-$1.gguf
    if [ ! -s "$m" ]; then
        case $1 in
        *_k_[sml])
            if [ ! -s "$tmp/$preset-f32.gguf" ]; then
                "$cli" gen-model "${gen[@]}" --dtype f32 --seed 3 \
                    "$tmp/$preset-f32.gguf" > /dev/null
            fi
            "$cli" quantize "$tmp/$preset-f32.gguf" "$m" --type "$1" \
                > /dev/null ;;
        *)
            "$cli" gen-model "${gen[@]}" --dtype "$1" --seed 3 \
                "$m" > /dev/null ;;
        esac
    fi
    echo "$m"
}

head="| model | threads | ours | kernels"
sep="| --- | ---: | ---: | ---"
for v in $envs; do
    head+=" | ours, $v"
    sep+=" | ---:"
done
head+=" | llama.cpp | ratio |"
sep+=" | ---: | ---: |"
rows=()

for name in $models; do
    m=$(model "$name")
    for t in $threads_list; do
        IFS=$'\t' read -r o k <<<"$(ours "$m" "$t")"
        row="| $name | $t | $o | $k"
        for v in $envs; do
            # the subshell of $( ) keeps the export to itself
            IFS=$'\t' read -r os ks <<<"$(export "$v"; ours "$m" "$t")"
            row+=" | $os ($ks)"
        done
        p=-
        [ -n "$peer" ] && p=$(theirs "$m" "$t")
        row+=" | $p | $(ratio "$o" "$p") |"
        rows+=("$row")
        echo "done: $name threads $t: ours $o, peer $p" >&2
    done
done

echo
echo "prefill tokens/s, one 512-token prompt, model $preset;" \
     "ours = kvserve bench, llama.cpp = llama-bench (CPU build)"
echo
echo "$head"
echo "$sep"
printf '%s\n' "${rows[@]}"
