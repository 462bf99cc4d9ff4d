# Sourced by t/bench/quant_rmse.sh, quant_peer.sh and quant_serve.sh (not
# run by `make bench`, which runs *.sh): the files the three compare, made
# once and kept under $KVS_TMP/quant-peer-<preset>:
#   f32.gguf          `kvserve gen-model --preset $QUANT_PRESET --dtype f32
#                     --seed 1` (default preset 100m: 12 layers, dim 768,
#                     ffn 2048, 12 heads / 4 KV heads, vocab 32000)
#   ours-<mix>.gguf   `kvserve quantize f32.gguf ... --type <mix>`
#   peer-<mix>.gguf   `llama-quantize f32.gguf ... <MIX> $QUANT_THREADS`,
#                     never with an importance matrix
# With QUANT_MODEL=FILE.gguf (an F32 model), that file is the base instead
# and the directory is $KVS_TMP/quant-peer-<its name>: e.g. the trained
# stories260K fixture, whose 64-wide rows put every 256-element type on
# its 32-element fallback (IQ4_NL, Q5_0, Q5_1, Q8_0).
# A quantized file older than the tool that makes it, or than the base, is
# made again, so a changed quantizer is never judged on stale output (the
# base itself is made once: delete it to make it again).  Each
# quantization's wall time is kept beside it (<file>.secs).
#
# Needs LLAMA_CPP_BUILD (llama.cpp/build/bin; the fetch/build recipe is at
# the top of t/bench/llamacpp.sh, with llama-quantize added to its
# targets); quant_need_peer prints the one SKIP line and exits 0 without.
# QUANT_TAILS=DF: the generated weights (uniform) replaced by Student-t
# ones of DF degrees of freedom (t/bench/quant_tails.py), in
# $KVS_TMP/quant-peer-<preset>-t<DF>; the preset "small" keeps that run
# short.
# Knobs: QUANT_PRESET (100m), QUANT_MODEL (unset), QUANT_TAILS (unset),
# QUANT_MIXES (below),
# QUANT_THREADS (1: the threads llama-quantize may use; ours uses one).

quant_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
quant_root=$(cd "$quant_here/../.." && pwd)
quant_cli=${KVS_CLI:-$quant_root/build/kvserve}
quant_python=${KVS_PYTHON:-$quant_root/build/venv/bin/python}
quant_preset=${QUANT_PRESET:-100m}
quant_mixes=${QUANT_MIXES:-q2_k q3_k_m q4_k_m q5_k_m q6_k iq4_xs iq4_nl q4_0
                           q5_0}
quant_threads=${QUANT_THREADS:-1}
quant_model=${QUANT_MODEL:-}
quant_bin=${LLAMA_CPP_BUILD:-}
quant_tails=${QUANT_TAILS:-}
if [ -n "$quant_model" ]; then
    quant_dir=${KVS_TMP:-/tmp}/quant-peer-$(basename "$quant_model" .gguf)
    quant_base=$quant_model
else
    quant_dir=${KVS_TMP:-/tmp}/quant-peer-$quant_preset
    quant_dir=$quant_dir${quant_tails:+-t$quant_tails}
    quant_base=$quant_dir/f32.gguf
fi

# quant_need_peer SCRIPT TOOL...: SKIP (exit 0) unless the peer's tools
# and ours are there
quant_need_peer() {
    local who=$1 b
    shift
    if [ -z "$quant_bin" ]; then
        echo "SKIP: $who: LLAMA_CPP_BUILD is not set (point it at" \
             "llama.cpp/build/bin; recipe at the top of t/bench/llamacpp.sh)"
        exit 0
    fi
    for b in "$@"; do
        if [ ! -x "$quant_bin/$b" ]; then
            echo "SKIP: $who: $quant_bin/$b not found (recipe at the top" \
                 "of t/bench/llamacpp.sh)"
            exit 0
        fi
    done
    if [ ! -x "$quant_cli" ]; then
        echo "SKIP: $who: $quant_cli not found (make all)"
        exit 0
    fi
}

# quant_fresh FILE MAKER: FILE exists and is newer than MAKER and the base
quant_fresh() {
    [ -s "$1" ] && [ "$1" -nt "$2" ] \
        && { [ "$1" = "$quant_base" ] || [ "$1" -nt "$quant_base" ]; }
}

# quant_timed FILE CMD...: run CMD (which writes FILE.tmp), keep its wall
# seconds in FILE.secs, move FILE.tmp to FILE; on failure show its log
quant_timed() {
    local out=$1 t0 t1
    shift
    t0=$(date +%s.%N)
    if ! "$@" >"$out.log" 2>&1; then
        echo "FAIL: $* (log: $out.log)" >&2
        tail -5 "$out.log" >&2
        return 1
    fi
    t1=$(date +%s.%N)
    echo "$t0 $t1" | awk '{ printf "%.1f\n", $2 - $1 }' >"$out.secs"
    mv "$out.tmp" "$out"
}

quant_make_base() {
    mkdir -p "$quant_dir"
    # kept once made: regenerating it (same seed, same bytes) would make
    # every file below stale
    [ -n "$quant_model" ] || [ -s "$quant_base" ] && return 0
    quant_timed "$quant_base" "$quant_cli" gen-model --preset \
        "$quant_preset" --dtype f32 --seed 1 "$quant_base.tmp" || return 1
    [ -z "$quant_tails" ] && return 0
    "$quant_python" "$quant_here/quant_tails.py" "$quant_base" \
        "$quant_tails" 1
}

# quant_make MIX: both quantized copies of the base in MIX
quant_make() {
    local mix=$1 ours=$quant_dir/ours-$1.gguf peer=$quant_dir/peer-$1.gguf
    quant_make_base
    if ! quant_fresh "$ours" "$quant_cli"; then
        quant_timed "$ours" "$quant_cli" quantize "$quant_base" \
            "$ours.tmp" --type "$mix"
    fi
    if ! quant_fresh "$peer" "$quant_bin/llama-quantize"; then
        quant_timed "$peer" "$quant_bin/llama-quantize" "$quant_base" \
            "$peer.tmp" "$(echo "$mix" | tr a-z A-Z)" "$quant_threads"
    fi
}
