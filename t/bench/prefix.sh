#!/usr/bin/env bash
# Prefix cache (issue 6): bench_prefix (t/bench/bench_prefix.c) through
# the whole engine on a generated model, in two parts:
#   trace   a seeded multi-turn chat (users sharing a system prompt, each
#           turn resending the conversation with the model's replies),
#           cache off and on for pools sized to fractions of the trace's
#           working set: prefill tokens computed, hit rate, the best
#           possible hit rate for that trace and pool (Belady replay of
#           the run's events over whole blocks through the same pool,
#           running requests' blocks held), ours / best, reference
#           replays, and replies equal to cache-off
#   trace-geo  the same chat with turns per user drawn geometric (mean
#           PREFIX_TURNS_MEAN, at most PREFIX_TURNS_MAX): most
#           conversations short, a few long, so users come and go as in
#           real traffic instead of all 32 staying to the end
#   tier    the second tier (issue 26): the trace (fixed and geometric
#           turns) with pools of 1 and PREFIX_TIER_POOL (0.25) x the
#           working set, one tier, then the small pool with a disk tier
#           of PREFIX_TIER (1) x the working set loading always, then
#           with the cost model: hit rate against the 1 x run (the
#           one-tier bound), prefill computed, TTFT p50/p99, what the
#           tier loaded, replies equal to cache-off
#   ttft    time to first token at 8k..64k-token prompts: cold (cache
#           off), a full-prefix hit (the same prompt again) and a
#           follow-up (prompt + reply + a new message), and the ratios
# then the goals: ours / best >= 95% and, at 32k, a hit under 1/20 of
# the cold time.
#
# Environment: KVS_BENCH_DIR (where bench_prefix is built), KVS_TMP (the
# generated model is written there, removed once open).
# Knobs: PREFIX_PARTS ("trace trace-geo ttft"), PREFIX_THREADS (0: every
# CPU), PREFIX_SEED (1), PREFIX_USERS (32), PREFIX_TURNS (8),
# PREFIX_TURNS_MEAN (7), PREFIX_TURNS_MAX (40), PREFIX_SYSTEM
# (512), PREFIX_CONC (4), PREFIX_REPLY (32), PREFIX_CACHE ("1,0.5,0.25":
# fractions of the working set), PREFIX_SIZES
# ("8192,16384,32768,65536"), PREFIX_OFF_MAX (32768: longer prompts are
# not timed with the cache off, their cold time is a fresh prompt's with
# the cache on; 64k cold takes 1-2 minutes here), PREFIX_EVENTS (a path:
# each cache-on run's events go to <path>.<fraction>, for
# t/bench/prefix_policies.py --events), PREFIX_PRESET (a model of real
# size instead of the tiny one: a `kvserve gen-model` preset, e.g. 100m,
# generated into KVS_TMP with PREFIX_DTYPE (q8_0) by KVS_CLI
# (build/kvserve) and removed at the end), PREFIX_MODEL (a GGUF file to
# run instead; either wants PREFIX_SYSTEM and PREFIX_USERS small enough
# for its context and its speed), PREFIX_TIER_MODES ("one always cost":
# the tier part's modes), PREFIX_NO_OFF (set: no cache-off run, whose
# prefill of every prompt token dominates a run of real size; replies
# are then compared with the 1 x run's).  A smaller run: PREFIX_USERS=8
# PREFIX_SIZES=8192,32768.
set -euo pipefail

bin=${KVS_BENCH_DIR:-build}/bench_prefix
export KVS_TMP=${KVS_TMP:-/tmp}
parts=${PREFIX_PARTS:-trace trace-geo ttft tier}
common=(--threads "${PREFIX_THREADS:-0}" --seed "${PREFIX_SEED:-1}")
if [ -n "${PREFIX_NO_OFF:-}" ]; then
    common+=(--no-off)
fi
out=$(mktemp "$KVS_TMP/prefix-bench.XXXXXX")
gen=
trap 'rm -f "$out" ${gen:+"$gen"}' EXIT

if [ -n "${PREFIX_PRESET:-}" ]; then
    gen="$KVS_TMP/prefix-bench-${PREFIX_PRESET}.$$.gguf"
    "${KVS_CLI:-build/kvserve}" gen-model --preset "$PREFIX_PRESET" \
        --dtype "${PREFIX_DTYPE:-q8_0}" --seed "${PREFIX_SEED:-1}" "$gen"
    common+=(--model "$gen")
elif [ -n "${PREFIX_MODEL:-}" ]; then
    common+=(--model "$PREFIX_MODEL")
fi

for part in $parts; do
    case $part in
    trace|trace-geo)
        turns=(--turns "${PREFIX_TURNS:-8}")
        if [ "$part" = trace-geo ]; then
            turns=(--turns "${PREFIX_TURNS_MAX:-40}"
                   --turns-mean "${PREFIX_TURNS_MEAN:-7}")
        fi
        echo
        "$bin" trace "${common[@]}" --users "${PREFIX_USERS:-32}" \
            "${turns[@]}" --system "${PREFIX_SYSTEM:-512}" \
            --conc "${PREFIX_CONC:-4}" --reply "${PREFIX_REPLY:-32}" \
            --cache "${PREFIX_CACHE:-1,0.5,0.25}" | tee -a "$out" \
            | grep -v '^prefix_' ;;
    tier)
        small=${PREFIX_TIER_POOL:-0.25}
        for turns in "--turns ${PREFIX_TURNS:-8}" \
                     "--turns ${PREFIX_TURNS_MAX:-40} --turns-mean ${PREFIX_TURNS_MEAN:-7}"; do
            for mode in ${PREFIX_TIER_MODES:-one always cost}; do
                case $mode in
                one)    tier=() ;;
                always) tier=(--tier "${PREFIX_TIER:-1}" --tier-always) ;;
                cost)   tier=(--tier "${PREFIX_TIER:-1}") ;;
                esac
                echo
                echo "tier part: $mode, $turns"
                # shellcheck disable=SC2086
                "$bin" trace "${common[@]}" --users "${PREFIX_USERS:-32}" \
                    $turns --system "${PREFIX_SYSTEM:-512}" \
                    --conc "${PREFIX_CONC:-4}" --reply "${PREFIX_REPLY:-32}" \
                    --cache "1,$small" "${tier[@]}" \
                    | sed "s/^prefix_trace /prefix_trace mode=$mode /" \
                    | tee -a "$out" | grep -v '^prefix_'
            done
        done ;;
    ttft)
        echo
        "$bin" ttft "${common[@]}" --off-max "${PREFIX_OFF_MAX:-32768}" \
            --sizes "${PREFIX_SIZES:-8192,16384,32768,65536}" \
            | tee -a "$out" | grep -v '^prefix_' ;;
    *)
        echo "prefix.sh: unknown part \"$part\" (trace, trace-geo, ttft, tier)" >&2
        exit 2 ;;
    esac
done

# the goals, from the machine-readable lines
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
$1 == "prefix_trace" && field("mode") != "" && field("cache") == "on" \
    && field("frac") == 1 {
    bound[field("mode"), field("turns_mean")] = field("hit")
}
$1 == "prefix_trace" && field("mode") != "" && field("cache") == "on" \
    && field("frac") != 1 {
    b = bound[field("mode"), field("turns_mean")]
    printf "tier: %s, %s turns, pool %s x ws: hit %.2f%% vs the one-tier" \
           " bound %.2f%%: %.1f%% (goal 95%%: %s), replies differ: %s\n",
           field("mode"), (field("turns_mean") > 0) ? "geometric" : "fixed",
           field("frac"), 100 * field("hit"), 100 * b,
           (b > 0) ? 100 * field("hit") / b : 0,
           (b > 0 && field("hit") / b >= 0.95) ? "met" : "NOT met",
           field("replies_differ")
}
$1 == "prefix_trace" && field("mode") == "" && field("cache") == "on" {
    r = field("ratio")
    printf "goal: hit rate >= 95%% of the best possible, %s turns, pool %s" \
           " x working set: %.1f%% (%.2f%% of %.2f%%): %s\n",
           (field("turns_mean") > 0) ? "geometric" : "fixed", field("frac"),
           100 * r,
           100 * field("hit"), 100 * field("best"),
           (r >= 0.95) ? "met" : "NOT met"
}
$1 == "prefix_ttft" && field("prompt") == 32768 {
    r = field("ratio")
    printf "goal: time to first token of a full-prefix hit at 32k under" \
           " 1/20 of cold: %s ms vs %s ms, %.1fx: %s\n", field("hit_ms"),
           field("cold_off_ms"), r, (r >= 20) ? "met" : "NOT met"
}
' "$out"
