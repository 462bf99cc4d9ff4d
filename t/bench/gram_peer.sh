#!/usr/bin/env bash
# Grammar masks against the peers (issue 21, point 4): on the Llama 3 and
# Qwen2 vocabularies and the schemas of gram_schemas.json, bench_grammar
# compiles each schema and records seeded random walks (tokens drawn among
# the allowed ones, leaning to finish) with the time of each of our
# masks, twice (same walks, to show the noise), and replays its walks
# the way the peers are timed (--replay: no walk generation between two
# masks); gram_peer.py checks that the byte strings it will give the
# peers are those of the GGUF, then replays exactly those walks through
# xgrammar and llguidance, timing each mask and checking that each peer
# takes every token; the table of compile ms and per-mask p50 / p99 with
# the ratios is printed last.
#
# The peers come from PyPI into a venv under build/ (gitignored), made on
# first use: llguidance; xgrammar with --no-deps plus what its import
# path needs (apache-tvm-ffi, pydantic, numpy, and torch and transformers,
# which its modules import at the top: PyPI's torch is the CUDA build,
# about 5 GB with its nvidia-* libraries, none of which the CPU run uses).
# A peer that does not install is named and the run goes on without it.
#
# Environment: KVS_BENCH_DIR (bench_grammar, kvserve), KVS_FIXTURES,
# KVS_TMP, KVS_PYTHON (a python with `gguf`: build/venv).
# Knobs: GRAM_GENS (walks per schema, 20), GRAM_PEER_VOCABS ("llama3
# qwen2", converted into /tmp when absent, or paths of vocabulary GGUFs),
# GRAM_VENV (build/venv-gram), GRAM_PEERS (xgrammar,llguidance),
# GRAM_CLOCK (thread: every side timed by its thread's CPU clock, which
# a loaded machine's preemptions do not inflate; default: monotonic).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${KVS_BENCH_DIR:-build}
fx=${KVS_FIXTURES:-/work/shared/fixtures}
tmp=${KVS_TMP:-/tmp}/gram-peer
py=${KVS_PYTHON:-build/venv/bin/python}
venv=${GRAM_VENV:-build/venv-gram}
gens=${GRAM_GENS:-20}
peers=${GRAM_PEERS:-xgrammar,llguidance}
mkdir -p "$tmp"

# one thread everywhere (the peers' pools too)
export RAYON_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
vpy=$venv/bin/python
if ! "$vpy" -c 'import llguidance' 2>/dev/null; then
    "$vpy" -m pip install -q llguidance numpy \
        || echo "llguidance: pip install failed" >&2
fi
if ! "$vpy" -c 'import xgrammar' 2>/dev/null; then
    "$vpy" -m pip install -q --no-deps xgrammar \
        && "$vpy" -m pip install -q apache-tvm-ffi pydantic numpy \
               typing-extensions torch transformers \
        || echo "xgrammar: pip install failed" >&2
fi
"$vpy" -c 'import xgrammar' 2>/dev/null || peers=${peers//xgrammar/}
"$vpy" -c 'import llguidance' 2>/dev/null || peers=${peers//llguidance/}
peers=$(echo "$peers" | sed 's/^,*//; s/,*$//; s/,,*/,/g')
echo "peers: ${peers:-none}; versions: $("$vpy" -m pip list 2>/dev/null \
    | grep -Ei '^(xgrammar|llguidance|torch) ' | tr -s ' ' | paste -sd ';')"

vocab_gguf() {
    case $1 in
    llama3)
        [ -f /tmp/llama3.gguf ] || "$dir/kvserve" convert-vocab --tiktoken \
            "$fx/vocab/llama3/tokenizer.model" --pre llama-bpe \
            /tmp/llama3.gguf >&2
        echo /tmp/llama3.gguf ;;
    qwen2)
        [ -f /tmp/qwen2.gguf ] || "$dir/kvserve" convert-vocab --hf \
            "$fx/vocab/qwen2/vocab.json" "$fx/vocab/qwen2/merges.txt" \
            --pre qwen2 /tmp/qwen2.gguf >&2
        echo /tmp/qwen2.gguf ;;
    *)
        echo "$1" ;;
    esac
}

specs=()
for v in ${GRAM_PEER_VOCABS:-llama3 qwen2}; do
    gguf=$(vocab_gguf "$v")
    v=$(basename "$v" .gguf)
    echo "== $v ($gguf); load: $(cut -d' ' -f1-3 /proc/loadavg)"
    for run in 1 2; do
        "$dir/bench_grammar" "$gguf" "$gens" --no-cold --replay \
            --schemas "$here/gram_schemas.json" \
            --walks "$tmp/$v-walks$run.jsonl" \
            --vocab-out "$tmp/$v-vocab.txt"
    done
    "$py" "$here/gram_peer.py" vocab-check "$gguf" "$tmp/$v-vocab.txt"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
    if [ -n "$peers" ]; then
        "$vpy" "$here/gram_peer.py" run --vocab "$tmp/$v-vocab.txt" \
            --walks "$tmp/$v-walks1.jsonl" \
            --schemas "$here/gram_schemas.json" --peers "$peers" \
            --out "$tmp/$v-peers.json"
    else
        echo '{"peers": {}}' > "$tmp/$v-peers.json"
    fi
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
    specs+=("$v:$tmp/$v-walks1.jsonl:$tmp/$v-walks2.jsonl:$tmp/$v-peers.json")
done

"$vpy" "$here/gram_peer.py" table "${specs[@]}"
