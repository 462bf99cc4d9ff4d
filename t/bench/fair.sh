#!/usr/bin/env bash
# Fair share (issue 7's opening scenario): bench_fair
# (t/bench/bench_fair.c) through the whole engine on a generated model
# with a KV cache of FAIR_CACHE tokens: tenant A sends requests that fill
# the cache (100k tokens), tenant B many 2k-token ones, both at
# saturation, for FAIR_SECONDS under each policy:
#   none     arrival order, no limits
#   count    the same requests/s for each tenant (nginx's limit_req,
#            emulated at the submit side)
#   kvserve  the same tokens/s for each tenant (kvs_limit buckets charged
#            prompt + max_tokens, refunded after) plus the engine's fair
#            share (VTC prefill=1 decode=2, KV cap 0.5)
#   kvrate   (FAIR_POLICIES=...,kvrate) kv_rate alone: the same KiB x s
#            of KV held per second for each tenant, each request settled
#            to what it held by the engine's count, the excess as debt,
#            as kvserve_limit does; arrival order in the engine
#   kvest    kvrate settled to the estimate from the request's stamps
#            instead (what kvserve_limit did before the engine counted)
#   kvmeter  an experiment: kv_rate's bucket charged with what the engine
#            says each tenant holds, step by step, debt carried
# Prints each tenant's served tokens and KV block-seconds, A's share of
# each, then the goal (kvserve: both shares within 10% of equal, i.e.
# 45%..55%; kvrate and kvmeter: the KV block-seconds share), and draws
# the shares with t/bench/fair_plot.py into FAIR_PNG.
#
# The literal scenario (the default) takes FAIR_SECONDS x 3 and a long
# time per A request: on two cores a 100k-token prefill of the tiny model
# takes minutes.  FAIR_SCALE=small runs the same shape at a quarter of
# the lengths (25.6k-token cache, A 25.5k, B 512: the same 50:1 ratio)
# in a few minutes; the output says which one ran.
#
# Environment: KVS_BENCH_DIR (where bench_fair is built), KVS_TMP (the
# generated model is written there, removed once open), KVS_PYTHON.
# Knobs: FAIR_SCALE (full | small), FAIR_CACHE, FAIR_A_PROMPT (0: the
# cache less the output), FAIR_B_PROMPT, FAIR_GEN (32), FAIR_SECONDS,
# FAIR_POLICIES ("none,count,kvserve"; add kvrate, kvest, kvmeter),
# FAIR_KV_WINDOW (kv_rate's bucket in seconds of it, 10),
# FAIR_THREADS (0: every CPU),
# FAIR_SEED (1), FAIR_PNG ($KVS_TMP/fair-share.png; the bench's output is
# kept beside it, .txt for .png).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${KVS_BENCH_DIR:-build}/bench_fair
python=${KVS_PYTHON:-python3}
export KVS_TMP=${KVS_TMP:-/tmp}
scale=${FAIR_SCALE:-full}

case $scale in
full)
    cache=${FAIR_CACHE:-100000}
    b_prompt=${FAIR_B_PROMPT:-2048}
    seconds=${FAIR_SECONDS:-600} ;;
small)
    cache=${FAIR_CACHE:-25600}
    b_prompt=${FAIR_B_PROMPT:-512}
    seconds=${FAIR_SECONDS:-180} ;;
*)
    echo "fair.sh: FAIR_SCALE is full or small, not \"$scale\"" >&2
    exit 2 ;;
esac

png=${FAIR_PNG:-$KVS_TMP/fair-share.png}
out=${png%.png}.txt          # bench_fair's whole output, kept for the plot
mkdir -p "$(dirname "$png")"

echo "fair share, scale $scale: cache $cache tokens, B prompts $b_prompt," \
     "${seconds}s per policy"
"$bin" --cache-tokens "$cache" --a-prompt "${FAIR_A_PROMPT:-0}" \
    --b-prompt "$b_prompt" --a-gen "${FAIR_GEN:-32}" \
    --b-gen "${FAIR_GEN:-32}" --seconds "$seconds" \
    --policies "${FAIR_POLICIES:-none,count,kvserve}" \
    --threads "${FAIR_THREADS:-0}" --seed "${FAIR_SEED:-1}" \
    --kv-window "${FAIR_KV_WINDOW:-10}" \
    | tee "$out" | grep --line-buffered -v '^fair_run'

echo
awk '
function field(name,    i, kv) {
    for (i = 2; i <= NF; i++) {
        split($i, kv, "=")
        if (kv[1] == name) {
            return kv[2]
        }
    }
    return ""
}
$1 == "fair_run" && field("policy") == "kvserve" {
    t = field("share_tokens")
    k = field("share_kv")
    printf "goal: with kvserve, A'\''s shares within 10%% of equal" \
           " (45%%..55%%): served tokens %.1f%% %s, KV block-seconds" \
           " %.1f%% %s\n", 100 * t,
           (t >= 0.45 && t <= 0.55) ? "met" : "NOT met", 100 * k,
           (k >= 0.45 && k <= 0.55) ? "met" : "NOT met"
}
$1 == "fair_run" && (field("policy") == "kvrate" \
                     || field("policy") == "kvmeter" \
                     || field("policy") == "kvest") {
    k = field("share_kv")
    printf "goal: with %s, A'\''s share of KV block-seconds within" \
           " 45%%..55%%: %.1f%% %s (served tokens %.1f%%; by the" \
           " engine'\''s count %.1f%%)\n",
           field("policy"), 100 * k,
           (k >= 0.45 && k <= 0.55) ? "met" : "NOT met",
           100 * field("share_tokens"), 100 * field("share_kv_eng")
}
' "$out"

"$python" "$here/fair_plot.py" "$out" "$png"
echo "plot: $png (data: $out)"
