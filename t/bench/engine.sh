#!/usr/bin/env bash
# Engine speed: `kvserve bench` against llama.cpp's CPU build
# (t/bench/llamacpp.sh) on the same GGUF files and thread counts, in the
# same run, and the ratios.
#
# Models: stories260K (the fixture) and a generated 100M-parameter Llama
# (`kvserve gen-model --preset 100m --seed 3`) in F32, F16 and Q8_0 by
# default; ENGINE_MODELS may name any --dtype (bf16, q4_0, q6_k ...) or
# a mix (q4_k_m, q5_k_s ...: the F32 model through `kvserve quantize`).
# Loads, the same on both sides:
#   prefill   one 512-token prompt (ours: --seqs 1 --prompt 512 --gen 1)
#   decode1   one sequence generating 128 tokens from a 1-token context
#             (ours: --seqs 1 --prompt 1 --gen 129: 128 decode steps)
#   decode32  32 sequences, each its own 128-token prompt, then 128
#             decode steps of all 32 at once; tokens/s of those steps
# Ours report tokens/s of the steps of each kind (kvserve bench), after
# ENGINE_WARMUP (1) untimed rounds of the same load with other prompts,
# as llama-bench's own warm-up run; the peer's are llama-bench and
# llama-batched-bench's (see llamacpp.sh).
#
# Environment: KVS_CLI (the kvserve tool), KVS_FIXTURES, KVS_TMP,
# LLAMA_CPP_BUILD (the peer; without it only our numbers are printed).
# Knobs: ENGINE_MODELS ("stories f32 f16 q8_0"; see above),
# ENGINE_THREADS ("1 2"), ENGINE_REPS (3: ours, best of; the peer's
# repetitions are llamacpp.sh's), ENGINE_GEN (the generated model's
# shape as gen-model options, "--preset 100m"; e.g. a 1.1B Llama:
# "--layers 22 --dim 2048 --heads 32 --kv-heads 4 --ffn 5632 --vocab
# 32000 --ctx 4096") and ENGINE_TAG (its files' prefix, m100).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cli=${KVS_CLI:-build/kvserve}
tmp=${KVS_TMP:-/tmp}/engine-bench
models=${ENGINE_MODELS:-stories f32 f16 q8_0}
threads_list=${ENGINE_THREADS:-1 2}
reps=${ENGINE_REPS:-3}
warm=${ENGINE_WARMUP:-1}
read -r -a gen <<<"${ENGINE_GEN:---preset 100m}"
tag=${ENGINE_TAG:-m100}
mkdir -p "$tmp"

field() {    # field NAME LINE: the value of NAME=... in LINE
    sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" <<<" $2"
}

best() {     # best KEY ARGS...: the largest KEY of $reps bench runs
    local key=$1 v b=0 i
    shift
    for ((i = 0; i < reps; i++)); do
        v=$(field "$key" "$("$cli" bench "$@" --warmup "$warm" \
                              | grep '^bench ')")
        b=$(awk -v a="$v" -v b="$b" 'BEGIN { print (a > b) ? a : b }')
    done
    echo "$b"
}

ours() {     # ours MODEL THREADS: "prefill decode1 decode32"
    local m=$1 t=$2
    echo "$(best prefill_tps "$m" --threads "$t" --seqs 1 --prompt 512 \
                --gen 1)" \
         "$(best decode_tps "$m" --threads "$t" --seqs 1 --prompt 1 \
                --gen 129)" \
         "$(best decode_tps "$m" --threads "$t" --seqs 32 --prompt 128 \
                --gen 129)"
}

ratio() {
    if [ -z "$2" ] || [ "$2" = "-" ]; then
        echo "-"
    else
        awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'
    fi
}

rows=()
for name in $models; do
    case $name in
    stories)
        m=${KVS_FIXTURES:-../shared/fixtures}/models/stories260K-f32.gguf
        if [ ! -f "$m" ]; then
            echo "skip stories260K: $m not found" >&2
            continue
        fi ;;
    *_k_[sml])
        # a mix (q4_k_m ...): the F32 model through `kvserve quantize`,
        # so the file has the mix's per-tensor types, as llama-quantize's
        m=$tmp/$tag-$name.gguf
        if [ ! -s "$m" ]; then
            if [ ! -s "$tmp/$tag-f32.gguf" ]; then
                "$cli" gen-model "${gen[@]}" --dtype f32 --seed 3 \
                    "$tmp/$tag-f32.gguf" >/dev/null
            fi
            "$cli" quantize "$tmp/$tag-f32.gguf" "$m" --type "$name" \
                >/dev/null
        fi ;;
    *)
        m=$tmp/$tag-$name.gguf
        if [ ! -s "$m" ]; then
            "$cli" gen-model "${gen[@]}" --dtype "$name" --seed 3 "$m" \
                >/dev/null
        fi ;;
    esac

    for t in $threads_list; do
        read -r op o1 o32 <<<"$(ours "$m" "$t")"
        peer=$("$here/llamacpp.sh" "$m" "$t" | tail -1)
        if [[ $peer == SKIP* ]]; then
            echo "$peer" >&2
            pp=- p1=- p32=-
        else
            pp=$(field prefill_tps "$peer")
            p1=$(field decode1_tps "$peer")
            p32=$(field decode32_tps "$peer")
        fi
        row="| $(basename "$m") | $t | $op | $pp | $(ratio "$op" "$pp")"
        row+=" | $o1 | $p1 | $(ratio "$o1" "$p1") | $o32 | $p32"
        row+=" | $(ratio "$o32" "$p32") |"
        rows+=("$row")
        echo "done: $(basename "$m") threads $t" >&2
    done
done

echo
echo "tokens/s; ours = kvserve bench, peer = llama.cpp CPU build"
echo
echo "| model | threads | prefill ours | peer | ratio | decode b=1 ours" \
     "| peer | ratio | decode b=32 ours | peer | ratio |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" \
     "---: | ---: |"
printf '%s\n' "${rows[@]}"
