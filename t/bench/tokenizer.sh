#!/usr/bin/env bash
# Tokenizer speed: our encoder (bench_tok) against Hugging Face tokenizers
# and tiktoken (tok_peer.py), each built from the same GGUF vocabulary, on
# the same ~4 MiB of mixed text (tok_corpus.py), single-threaded, best of
# N; the ids must be identical on the whole corpus.  Then the growth of
# our time from 1 MiB to 4 MiB of pathological text.
#
# Environment: KVS_BENCH_DIR (bench_tok is there), KVS_PYTHON (python
# with gguf, tokenizers, tiktoken), KVS_FIXTURES, KVS_TMP, KVS_CLI.
# Knobs: N (reps, 3), CHUNKS (segmentations, "4096 0": one encode call per
# chunk of at most that many bytes cut after a newline; 0 = the whole
# corpus in one call), WORST_PEERS=0 (do not time the peers on the
# pathological texts), TOK_VOCABS (a subset of the row names).
# Exit status: non-zero if any ids differ or a peer fails the fixtures.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
py=$KVS_PYTHON
bt=$KVS_BENCH_DIR/bench_tok
fx=$KVS_FIXTURES/vocab
tmp=$KVS_TMP/tok-bench
n=${N:-3}
chunks=${CHUNKS:-4096 0}
mkdir -p "$tmp"

corpus=$tmp/corpus.txt
if [ ! -s "$corpus" ] || [ "$here/tok_corpus.py" -nt "$corpus" ]; then
    "$py" "$here/tok_corpus.py" --fixtures "$KVS_FIXTURES" "$corpus"
fi

# name  gguf  fixture-cases  tiktoken?
rows=()
add() {
    if [ -n "${TOK_VOCABS:-}" ] && [[ " $TOK_VOCABS " != *" $1 "* ]]; then
        return
    fi
    if [ -f "$2" ]; then
        rows+=("$1 $2 $3 $4")
    else
        echo "skip $1: $2 not found" >&2
    fi
}
convert() {  # name out.gguf convert-vocab arguments...
    local name=$1 out=$2
    shift 2
    if [ -s "$out" ] && [ "$out" -nt "${KVS_CLI:-/}" ]; then
        return
    fi
    if [ -z "${KVS_CLI:-}" ] \
       || ! "$KVS_CLI" convert-vocab "$@" "$out" >&2; then
        echo "skip $name: kvserve convert-vocab $* failed" >&2
        rm -f "$out"
    fi
}

convert llama3 "$tmp/llama3.gguf" --tiktoken "$fx/llama3/tokenizer.model"
convert qwen2 "$tmp/qwen2.gguf" --hf "$fx/qwen2/vocab.json" \
    "$fx/qwen2/merges.txt"

add gpt-2          "$fx/ggml-vocab-gpt-2.gguf"          gpt-2          1
add llama-spm      "$fx/ggml-vocab-llama-spm.gguf"      llama-spm      0
add llama3         "$tmp/llama3.gguf"                   llama-bpe      1
add qwen2          "$tmp/qwen2.gguf"                    qwen2          0
add falcon         "$fx/ggml-vocab-falcon.gguf"         falcon         0
add deepseek-coder "$fx/ggml-vocab-deepseek-coder.gguf" deepseek-coder 0
add starcoder      "$fx/ggml-vocab-starcoder.gguf"      starcoder      0
add bert-bge       "$fx/ggml-vocab-bert-bge.gguf"       bert-bge       0

status=0
report=()
diffs=()

for chunk in $chunks; do
    if [ "$chunk" = 0 ]; then
        title="one encode call for the whole corpus"
    else
        title="one encode call per chunk of <= $chunk bytes (cut after"
        title+=" a newline)"
    fi
    title="$(stat -c %s "$corpus") bytes of mixed text; $title; best of $n"
    report+=("" "$title; MB = 10^6 bytes")
    report+=("$(printf '%-15s %9s %11s %8s %8s %9s %8s  %s' vocab \
        'ours MB/s' 'ours Mtok/s' 'HF MB/s' 'ours/HF' 'tt MB/s' 'ours/tt' \
        'ids (ours vs HF, vs tiktoken)')")

    for row in "${rows[@]}"; do
        read -r name gguf cases tt <<< "$row"
        echo "== $name, chunk $chunk" >&2
        pre=$tmp/$name.$chunk
        args=(-n "$n" --chunk "$chunk" --hf-ids "$pre.hf")
        if [ "$tt" = 1 ]; then
            args+=(--tiktoken --tt-ids "$pre.tt")
        fi
        if [ -f "$fx/ggml-vocab-$cases.gguf.inp" ]; then
            args+=(--cases "$fx/ggml-vocab-$cases.gguf.inp"
                   "$fx/ggml-vocab-$cases.gguf.out")
        fi

        if ! ours=$("$bt" -n "$n" --chunk "$chunk" --ids "$pre.ours" \
                    "$gguf" "$corpus"); then
            report+=("$(printf '%-15s  our encoder failed (see above)' \
                "$name")")
            status=1
            continue
        fi
        if ! peer=$("$py" "$here/tok_peer.py" "${args[@]}" "$gguf" \
                    "$corpus"); then
            report+=("$(printf '%-15s  peer failed (see above)' "$name")")
            status=1
            continue
        fi
        grep '^check' <<< "$peer" >&2 || true

        read -r _ o_mbs o_tps _ <<< "$ours"
        read -r _ h_mbs _ <<< "$(grep '^hf ' <<< "$peer")"
        t_mbs=-
        if [ "$tt" = 1 ]; then
            read -r _ t_mbs _ <<< "$(grep '^tiktoken ' <<< "$peer")"
        fi

        same=""
        for p in hf tiktoken; do
            [ "$p" = tiktoken ] && [ "$tt" != 1 ] && continue
            pf=$pre.hf
            [ "$p" = tiktoken ] && pf=$pre.tt
            if d=$("$py" "$here/tok_peer.py" --diff "$pre.ours" "$pf" \
                   --peer "$p" --chunk "$chunk" --bench-tok "$bt" \
                   "$gguf" "$corpus"); then
                same+="${same:+, }identical"
            else
                same+="${same:+, }DIFFER"
                diffs+=("" "$name, chunk $chunk, ours vs $p:" "$d")
                status=1
            fi
        done

        report+=("$(awk -v v="$name" -v om="$o_mbs" -v ot="$o_tps" \
            -v hm="$h_mbs" -v tm="$t_mbs" -v s="$same" 'BEGIN {
                tr = tm == "-" ? "-" : sprintf("%.1fx", om / tm);
                printf "%-15s %9.2f %11.2f %8.2f %7.1fx %9s %8s  %s",
                    v, om, ot / 1e6, hm, om / hm, tm, tr, s }')")
    done
done

printf '%s\n' "${report[@]}"
if [ ${#diffs[@]} -gt 0 ]; then
    printf '%s\n' "${diffs[@]}"
fi

# Pathological inputs: one character repeated, and letters without
# spaces, in one call; the time ratio 4 MiB / 1 MiB is about 4 for a
# linear or n log n merge loop, about 16 for a quadratic one.  The peers
# run once each (WORST_PEERS=0 leaves them out); a peer that crashes is
# shown, not counted as a failure of ours.
echo
echo "worst case: seconds for 1 MiB and 4 MiB of one text in one call" \
    "(ours best of $n, peers 1 run)"
printf '%-15s %-8s %-9s %9s %9s %7s\n' vocab text encoder "1 MiB s" \
    "4 MiB s" ratio
for row in "${rows[@]}"; do
    read -r name gguf cases tt <<< "$row"
    case $name in gpt-2|llama-spm|llama3|qwen2) ;; *) continue ;; esac
    echo "== worst case, $name" >&2
    out=$("$bt" --worst -n "$n" "$gguf") || { status=1; continue; }
    if [ "${WORST_PEERS:-1}" = 1 ]; then
        targs=()
        [ "$tt" = 1 ] && targs=(--tiktoken)
        out+=$'\n'$("$py" "$here/tok_peer.py" --worst -n 1 "${targs[@]}" \
                    "$gguf" 2>> "$tmp/worst-peers.log") || status=1
    fi
    # group by text, in the order bench_tok prints them
    awk '!($1 in g) { o[++n] = $1 } { g[$1] = g[$1] $0 "\n" }
         END { for (i = 1; i <= n; i++) printf "%s", g[o[i]] }' <<< "$out" |
    while read -r kind who t1 t4 r; do
        if [ "$t1" = "fails:" ]; then
            printf '%-15s %-8s %-9s %s\n' "$name" "$kind" "$who" \
                "fails on 1 MiB: $t4 $r"
        else
            printf '%-15s %-8s %-9s %9s %9s %7s\n' "$name" "$kind" "$who" \
                "$t1" "$t4" "$r"
        fi
    done
done

exit $status
