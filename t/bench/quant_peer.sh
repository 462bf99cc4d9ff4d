#!/usr/bin/env bash
# Cross-loading quantized files with llama.cpp (issue 19): llama.cpp
# loads the files `kvserve quantize` makes and kvserve loads the ones
# `llama-quantize` makes, and on each file both give the same logits
# within tolerance.  Per file: kvserve's `kvserve logits` against
# llama.cpp's (t/bench/quant_peer_logits.c, our own program on llama.h's
# public API, compiled here into $KVS_TMP against $LLAMA_CPP_BUILD) at
# every position of QUANT_IDS (default 32 ids spread over the vocabulary,
# no BOS added by either).  The F32 original is compared too: the difference
# the two implementations have before any quantization.
#
# Prints one line per file:
#   logits file=<ours|peer>-<mix> rel_max=<x> rel_rms=<x>
#   argmax_agree=<a>/<n> near_ties=<t> quant_rel_max=<x> ok=<yes|no>
# rel_max: max |kvserve - llama.cpp| over max |llama.cpp logit|;
# rel_rms: RMS of the difference over RMS of llama.cpp's logits;
# quant_rel_max: for scale, what quantizing did: max |kvserve on this
# file - kvserve on the F32 original| over max |F32 logit|.
# ok=yes when rel_max <= QUANT_LOGIT_TOL (default 0.05) and argmax agrees
# at every position whose top-2 gap (in llama.cpp's logits) is wider than
# twice that position's max |difference| (the others are counted as
# near_ties: there either answer is within the error).
#
# Why a tolerance of 5% of the largest logit: llama.cpp multiplies by
# quantized weights with its activations quantized too (Q8_K for the K
# types and IQ4_XS, Q8_0 for Q4_0, Q5_0 and IQ4_NL; about 0.4% of each
# 32- or 256-element block's largest value), and keeps its KV cache in F16,
# while kvserve's CPU backend today dequantizes the weights and computes
# in f32.  Exits 1 if any file fails.
#
# Environment and knobs: t/bench/quant_files.bash, plus LLAMA_CPP_SRC
# (the llama.cpp tree holding include/ and ggml/include/; default
# $LLAMA_CPP_BUILD/../..), QUANT_LOGIT_TOL, QUANT_IDS.
set -euo pipefail

. "$(dirname "$0")/quant_files.bash"
quant_need_peer quant_peer.sh llama-quantize

src=${LLAMA_CPP_SRC:-$quant_bin/../..}
tol=${QUANT_LOGIT_TOL:-0.05}
lib=$(ls "$quant_bin"/libllama.so* "$quant_bin"/../src/libllama.so* \
      2>/dev/null | head -1 || true)
if [ -z "$lib" ] || [ ! -f "$src/include/llama.h" ]; then
    echo "SKIP: quant_peer.sh: no libllama.so by $quant_bin or no" \
         "llama.h in $src/include (set LLAMA_CPP_SRC)"
    exit 0
fi
libdir=$(dirname "$lib")
mkdir -p "$quant_dir"
peer_logits=$quant_dir/quant_peer_logits
cc -O2 -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter \
    -I"$src/include" -I"$src/ggml/include" \
    -o "$peer_logits" "$quant_here/quant_peer_logits.c" \
    -L"$libdir" -lllama -lggml -lggml-base -Wl,-rpath,"$libdir"

failed=0

# compare NAME FILE
compare() {
    local name=$1 file=$2 ours=$quant_dir/logits-$1.kvs \
          peer=$quant_dir/logits-$1.llama
    "$quant_cli" logits "$file" -t "$ids" -o "$ours"
    "$peer_logits" "$file" "$ids" "$peer" "$quant_threads"
    if ! "$quant_python" - "$name" "$ours" "$peer" "$tol" \
        "$(echo $ids | wc -w)" "$quant_dir/logits-f32.kvs" <<'PY'
import sys
import numpy as np
name, a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
k = np.fromfile(a, dtype=np.float32).astype(np.float64)
p = np.fromfile(b, dtype=np.float32).astype(np.float64)
assert k.size == p.size and k.size > 0, "sizes %d, %d" % (k.size, p.size)
n = int(sys.argv[5])
k, p = k.reshape(n, -1), p.reshape(n, -1)
d = np.abs(k - p)
rel_max = d.max() / np.abs(p).max()
rel_rms = np.sqrt((d * d).mean() / (p * p).mean())
top = np.sort(p, axis=1)
gap = top[:, -1] - top[:, -2]
clear = gap > 2 * d.max(axis=1)
agree = k.argmax(axis=1) == p.argmax(axis=1)
ok = rel_max <= tol and bool(agree[clear].all())
# what quantizing did to kvserve's own logits, for scale
f = np.fromfile(sys.argv[6], dtype=np.float32).astype(np.float64)
f = f.reshape(n, -1)
quant_rel = np.abs(k - f).max() / np.abs(f).max()
print("logits file=%s rel_max=%.5f rel_rms=%.5f argmax_agree=%d/%d "
      "near_ties=%d quant_rel_max=%.4f ok=%s" % (
          name, rel_max, rel_rms, agree.sum(), n, (~clear).sum(),
          quant_rel, "yes" if ok else "no"))
sys.exit(0 if ok else 1)
PY
    then
        failed=1
    fi
}

quant_make_base
# 32 ids spread over the vocabulary, the last few ids (often special
# tokens) left out
n_vocab=$("$quant_cli" info --json "$quant_base" | "$quant_python" -c \
    'import json, sys; print(json.load(sys.stdin)["hparams"]["n_vocab"])')
ids=${QUANT_IDS:-$(awk -v v="$n_vocab" 'BEGIN { for (i = 1; i <= 32; i++)
    printf "%d ", (i * 7919) % int(v * 31 / 32) + 1 }')}
compare f32 "$quant_base"
for mix in $quant_mixes; do
    quant_make "$mix"
    compare "ours-$mix" "$quant_dir/ours-$mix.gguf"
    compare "peer-$mix" "$quant_dir/peer-$mix.gguf"
done
exit $failed
