#!/usr/bin/env bash
# Greedy tokens against llama.cpp, per architecture (issue 20): for each
# architecture `kvserve gen-model --arch` writes, one generated file
# (F32, seeded) is continued greedily by both from the same prompt ids:
# llama.cpp through t/bench/arch_peer_greedy.c (our program on llama.h's
# public API, compiled here into $KVS_TMP against $LLAMA_CPP_BUILD; its
# prompt in one batch, then one token per decode over its own KV cache),
# kvserve by `kvserve logits` over the growing sequence (each step's last
# row, argmax, lowest id on ties).  No BOS is added by either.
#
# One line per model:
#   arch=<a> model=<label> tokens=<n> agree=<k>/<n> first_diff=<step|->
#   peer_gap=<x> max_rel=<x> ok=<yes|no|skip>
# agree counts the steps both picked the same id up to the first
# difference; max_rel is the largest max|ours - peer| / max|peer| over
# the steps compared (each step's logits, same sequence on both sides).
# ok=yes when every id agrees, or when the first difference is a
# near-tie: llama.cpp's own margin there (peer_gap) is within twice the
# step's largest logit difference between the two (llama.cpp keeps its
# KV cache in F16, kvserve in F32); and in both cases max_rel is at most
# ARCH_TOL (0.01: the runs that agree measure 2e-4 to 2e-3, a wrong RoPE
# base 0.5).  A file the
# peer cannot load because it does not know the architecture is
# ok=skip with llama.cpp's message (the peer is what the benches build,
# whatever its age).  A file whose window the peer says it ignores
# (llama.cpp since mid-2025 runs phi3 without its sliding_window, which
# kvserve applies as Hugging Face's model does) is ok=skip naming that
# when the two differ, with the agreement up to the first difference
# still printed.  Exits 1 if any model fails.
#
# Peers: llama.h's API these programs use is the same in both snapshots
# tried: c392e5094deaf2d1a7c18683214f007fad3fe42b (2025-02-20, knows
# llama, phi3, gemma2; the recipe in t/bench/llamacpp.sh) and
# 3f545beccee69d9975f466ec7e45fd9aacd8ba90 (2026-08-22, knows all five:
# the tool fetch of github:ngxson/llama.cpp).  That snapshot lacks seven
# models/ggml-vocab-*.gguf blobs, and git archive fails on it even with
# them excluded, so it is checked out through a scratch index:
#   g=/work/.mirror/ngxson+llama.cpp/repo; p=/work/peers/llama.cpp-new
#   export GIT_INDEX_FILE=/tmp/peer-index; mkdir -p $p
#   git --git-dir=$g read-tree HEAD
#   git --git-dir=$g rm -q --cached models/ggml-vocab-{aquila,command-r,\
#     gemma-4,llama-bpe,nomic-bert-moe,qwen2,qwen35}.gguf
#   git --git-dir=$g --work-tree=$p checkout-index -a
#   cd $p && cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF \
#     -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
#     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
#     -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
#     -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF
#   cmake --build build -j2 --target llama
# (this script needs libllama.so and the ggml libraries, no binary).
#
# Environment: LLAMA_CPP_BUILD (llama.cpp/build/bin; recipe at the top of
# t/bench/llamacpp.sh), LLAMA_CPP_SRC (its tree, default
# $LLAMA_CPP_BUILD/../..), KVS_CLI, KVS_PYTHON, KVS_TMP, ARCH_NEW (tokens
# to generate, default 24), ARCH_TOL (default 0.01).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cli=${KVS_CLI:-$root/build/kvserve}
py=${KVS_PYTHON:-$root/build/venv/bin/python}
bin=${LLAMA_CPP_BUILD:-}
n_new=${ARCH_NEW:-24}
tol=${ARCH_TOL:-0.01}

if [ -z "$bin" ]; then
    echo "SKIP: arch_peer.sh: LLAMA_CPP_BUILD is not set (point it at" \
         "llama.cpp/build/bin; recipe at the top of t/bench/llamacpp.sh)"
    exit 0
fi

src=${LLAMA_CPP_SRC:-$bin/../..}
lib=$(ls "$bin"/libllama.so* "$bin"/../src/libllama.so* 2>/dev/null \
      | head -1 || true)
if [ -z "$lib" ] || [ ! -f "$src/include/llama.h" ]; then
    echo "SKIP: arch_peer.sh: no libllama.so by $bin or no llama.h in" \
         "$src/include (set LLAMA_CPP_SRC)"
    exit 0
fi

dir=${KVS_TMP:-/tmp}/arch-peer
mkdir -p "$dir"
peer=$dir/arch_peer_greedy
libdir=$(dirname "$lib")
cc -O2 -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter \
    -I"$src/include" -I"$src/ggml/include" \
    -o "$peer" "$here/arch_peer_greedy.c" \
    -L"$libdir" -lllama -lggml -lggml-base -Wl,-rpath,"$libdir"

prompt="5 77 120 9 260 33 181 42"
failed=0

# run LABEL ARCH GEN-OPTIONS...
run() {
    local label=$1 arch=$2 file=$dir/$1.gguf
    shift 2
    "$cli" gen-model --arch "$arch" --seed 11 --dtype f32 "$@" "$file"
    if ! "$peer" "$file" "$prompt" "$n_new" "$dir/$label.peer.f32" \
         >"$dir/$label.peer" 2>"$dir/$label.err"; then
        if grep -q "unknown model architecture" "$dir/$label.err"; then
            echo "arch=$arch model=$label tokens=$n_new agree=-" \
                 "first_diff=- peer_gap=- max_rel=- ok=skip" \
                 "($(grep -o "unknown model architecture.*" \
                     "$dir/$label.err" | head -1 | tr -d "'"))"
            return 0
        fi
        cat "$dir/$label.err"
        echo "arch=$arch model=$label ok=no (llama.cpp failed)"
        failed=1
        return 0
    fi
    # what of the file the peer said it ignores (its warnings)
    local ignored=
    if grep -q "SWA is currently disabled" "$dir/$label.err"; then
        ignored="llama.cpp ignores phi3's sliding_window"
    fi
    # the February 2025 peer reads neither of gemma2's optional keys
    case $label in
    *-keys)
        if ! grep -q "freq_base_swa" "$dir/$label.err"; then
            ignored="this llama.cpp does not read gemma2's"
            ignored="$ignored rope.freq_base_swa nor its"
            ignored="$ignored sliding_window_pattern"
        fi
        ;;
    esac
    if ! "$py" - "$cli" "$file" "$prompt" "$dir/$label" "$arch" \
        "$label" "$ignored" "$tol" <<'PY'
import subprocess
import sys

import numpy as np

cli, path, prompt, base, arch, label, ignored, tol = sys.argv[1:9]
tol = float(tol)
ids = [int(t) for t in prompt.split()]
peer = [line.split() for line in open(base + ".peer")]
peer_ids = [int(p[0]) for p in peer]
peer_gap = [float(p[1]) for p in peer]
n = len(peer_ids)
peer_lg = np.fromfile(base + ".peer.f32", dtype="<f4").astype(
    np.float64).reshape(n, -1)


def last_logits(seq):
    r = subprocess.run([cli, "logits", path, "-t",
                        " ".join(map(str, seq))], capture_output=True,
                       check=True)
    a = np.frombuffer(r.stdout, dtype="<f4").astype(np.float64)
    return a.reshape(len(seq), -1)[-1]


# ours greedy on our own picks; while they equal the peer's the two
# sides see the same sequence, so their logits compare step by step
seq = list(ids)
agree, first, gap_at, rel_max, ok = 0, None, None, 0.0, True
for step in range(n):
    lg = last_logits(seq)
    ours = int(np.argmax(lg))
    diff = float(np.max(np.abs(lg - peer_lg[step])))
    rel_max = max(rel_max, diff / float(np.max(np.abs(peer_lg[step]))))
    if ours != peer_ids[step]:
        first, gap_at = step, peer_gap[step]
        # a near-tie: llama.cpp's own margin is within what the two
        # sides' logits differ by, so either pick is within the error
        ok = gap_at <= 2 * diff
        break
    agree += 1
    seq.append(ours)

# logits that differ by more than F16 rounding explain are a different
# model, whatever the picks (a wrong RoPE base gave 0.5 with a "near-tie"
# at its first difference)
ok = ok and rel_max <= tol

# a peer that runs the file without what kvserve applies (a window) is
# no reference once that bites: reported, never a failure
verdict = "yes" if ok else "no"
if ignored and first is not None:
    verdict, ok = f"skip ({ignored})", True
print(f"arch={arch} model={label} tokens={n} agree={agree}/{n} "
      f"first_diff={'-' if first is None else first} "
      f"peer_gap={'-' if gap_at is None else f'{gap_at:.3g}'} "
      f"max_rel={rel_max:.3g} ok={verdict}")
sys.exit(0 if ok else 1)
PY
    then
        failed=1
    fi
}

run llama-gqa llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 \
    --vocab 300
run qwen3-gqa qwen3 --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 \
    --vocab 300
run qwen3-hd32 qwen3 --layers 2 --dim 64 --heads 4 --kv-heads 1 \
    --head-dim 32 --ffn 96 --vocab 300
run phi3-gqa phi3 --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 \
    --vocab 300
run phi3-swa8 phi3 --layers 2 --dim 64 --heads 4 --kv-heads 4 --ffn 96 \
    --vocab 300 --swa 8
# llama.cpp picks gemma2's query scale by its layer count (26: the 2B);
# the older peer refuses another count
run gemma2-swa8 gemma2 --layers 26 --dim 64 --heads 4 --kv-heads 2 \
    --head-dim 32 --ffn 96 --vocab 300 --swa 8
# gemma2's optional keys: its local layers' own base (scaled as the
# model) and a global layer every third
run gemma2-swa8-keys gemma2 --layers 26 --dim 64 --heads 4 --kv-heads 2 \
    --head-dim 32 --ffn 96 --vocab 300 --swa 8 --rope-base-swa 50000 \
    --swa-pattern 3
run gemma3-swa8 gemma3 --layers 6 --dim 64 --heads 4 --kv-heads 2 \
    --head-dim 32 --ffn 96 --vocab 300 --swa 8
# no --swa: a window of the whole context masks nothing, yet five of six
# layers still rotate with the local base (10000, not the file's 1e6)
run gemma3-ctxwin gemma3 --layers 6 --dim 64 --heads 4 --kv-heads 2 \
    --head-dim 32 --ffn 96 --vocab 300

exit $failed
