#!/usr/bin/env bash
# Batched LoRA on the CPU backend (docs/lora.md, issue 25), in parts:
#   small     decode tokens/s with 1, 8 and 64 distinct adapters in a
#             batch of 32 against the merged single-adapter baseline, in
#             the same run (t/bench/bench_lora.c), preset "small";
#   8b-layer  the same on one layer of Llama 3 8B's shapes, where a
#             rank-16 adapter is 0.56% of the model as on the real one
#             (t/bench/bench_lora.h; about 2 GB of files in KVS_TMP, a
#             few minutes);
#   paging    64 adapters through the engine with 64 (all resident), 16
#             and 8 slots, in the same run (t/bench/bench_lora_paging.c).
#
# Quiet by default: the load average before each run, then one summary
# table per kind (decode: tokens per CPU second of the merged baseline and
# each adapter count's ratio to it, the wall figures' too; paging: tokens
# per wall second against all resident, loads, mean wait, longest step).
# LORA_VERBOSE=1 prints each bench's own output as well (its header, its
# markdown table and its lora_run lines), as this script did before.
#
# Old against new: LORA_OLD=path of a bench_lora built from another commit
# (e.g. `git worktree add /tmp/old HEAD~1 && make -C /tmp/old
# build/bench_lora`) runs it and this build's alternately, LORA_ROUNDS
# times (default 2), in the decode parts, each run a row of the table.
#
# Environment: KVS_BENCH_DIR (the build folder), KVS_TMP.
# Knobs: LORA_PARTS ("small 8b-layer paging"), LORA_VERBOSE (0),
# LORA_OLD, LORA_ROUNDS (1, or 2 with LORA_OLD), LORA_STEPS (32),
# LORA_REPEAT (3), LORA_8B_STEPS (8), LORA_8B_REPEAT (2), LORA_REQUESTS
# (256).
set -euo pipefail

dir=${KVS_BENCH_DIR:-build}
parts=${LORA_PARTS:-small 8b-layer paging}
verbose=${LORA_VERBOSE:-0}
old=${LORA_OLD:-}
rounds=${LORA_ROUNDS:-$([ -n "$old" ] && echo 2 || echo 1)}
tmp=${KVS_TMP:-/tmp}

if [ -n "$old" ] && [ ! -x "$old" ]; then
    echo "lora.sh: LORA_OLD=$old is not an executable" >&2
    exit 2
fi

rows=$(mktemp "$tmp/lora-sh.XXXXXX")
trap 'rm -f "$rows"' EXIT

# run PART CODE CMD...: runs the bench, its output shown only when
# verbose (and when it fails), its lora_run / lora_paging_run lines kept,
# each with the part, the code, the clock and the load when it started
run() {
    local part=$1 code=$2 out load
    shift 2
    load=$(uptime | sed 's/.*load average: //; s/,.*//')
    if ! out=$("$@" 2>&1); then
        printf '%s\n' "$out" >&2
        echo "lora.sh: $part ($code) failed: $*" >&2
        exit 1
    fi
    if [ "$verbose" = 1 ]; then
        echo "load: $load"
        printf '%s\n' "$out"
    fi
    printf '%s\n' "$out" \
        | awk -v p="$part" -v c="$code" -v t="$(date -u +%H:%M)" \
              -v l="$load" '/^lora_(paging_)?run /{ print p, c, t, l, $0 }' \
        >> "$rows"
}

# the decode parts: old and new alternating when LORA_OLD is set
decode() {
    local part=$1 r
    shift
    for ((r = 0; r < rounds; r++)); do
        if [ -n "$old" ]; then
            run "$part" old "$old" "$@"
        fi
        run "$part" new "$dir/bench_lora" "$@"
    done
}

echo "load: $(uptime)"

for part in $parts; do
    case $part in
    small)
        decode small --batch 32 --steps "${LORA_STEPS:-32}" \
            --repeat "${LORA_REPEAT:-3}"
        ;;
    8b-layer)
        decode 8b-layer --preset 8b-layer --batch 32 --prompt 4 \
            --steps "${LORA_8B_STEPS:-8}" --repeat "${LORA_8B_REPEAT:-2}"
        ;;
    paging)
        run paging new "$dir/bench_lora_paging" \
            --requests "${LORA_REQUESTS:-256}"
        ;;
    *)
        echo "lora.sh: unknown part \"$part\" (small, 8b-layer, paging)" >&2
        exit 2
        ;;
    esac
done

echo "load: $(uptime)"

# one row per run of bench_lora: its lines are merged, then adapters_N
awk '
$5 == "lora_run" {
    k = $1 " " $2 " " $3 " " $4
    if (!(k in seen)) { seen[k] = 1; order[n++] = k }
    wall[k, $6] = $7; cpu[k, $6] = $8
}
function ratio(k, c, v) {
    if (!((k, c) in v) || v[k, "merged"] <= 0) return "-"
    return sprintf("%.2f", v[k, c] / v[k, "merged"])
}
END {
    if (n == 0) exit
    print ""
    print "| part | code | UTC | load | merged (tokens per CPU s) " \
          "| 1 adapter | 8 adapters | 64 adapters | wall: merged " \
          "(tokens/s) | 1 | 8 | 64 |"
    print "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: " \
          "| ---: | ---: | ---: |"
    for (i = 0; i < n; i++) {
        k = order[i]
        split(k, f, " ")
        printf "| %s | %s | %s | %s | %.0f | %s | %s | %s | %.0f | %s " \
               "| %s | %s |\n", f[1], f[2], f[3], f[4],
               cpu[k, "merged"], ratio(k, "adapters_1", cpu),
               ratio(k, "adapters_8", cpu), ratio(k, "adapters_64", cpu),
               wall[k, "merged"], ratio(k, "adapters_1", wall),
               ratio(k, "adapters_8", wall), ratio(k, "adapters_64", wall)
    }
}' "$rows"

# the paging run: one row per slot count, the first all resident
awk '
$5 == "lora_paging_run" {
    if (base == 0) base = $7
    if (!head) {
        print ""
        print "| paging (UTC, load) | slots | tokens/s (wall) " \
              "| vs all resident | loads | evictions | requests waited " \
              "| mean wait (ms) | longest step (ms) |"
        print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        head = 1
    }
    printf "| %s, %s | %s | %.0f | %.2f | %s | %s | %s | %s | %s |\n",
           $3, $4, $6, $7, (base > 0 ? $7 / base : 0), $8, $9, $10, $11, $12
}' "$rows"
