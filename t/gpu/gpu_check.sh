#!/usr/bin/env bash
# gpu-check (issue 9): runs gpu_check (t/gpu/gpu_check*.c), built by
# `make gpu-check` for sm_90, on a CUDA device:
#   1. every kernel of kernels/kvs_kernels.h against CPU references on
#      fresh seeded random inputs, outputs poisoned first;
#   2. greedy generation, CUDA backend against CPU backend, on
#      stories260K and two generated models (BF16, Q8_0);
#   3. timing on a model of Llama-3-8B's shapes built in memory: copy
#      bandwidth, the attention kernel, prefill, decode at batch 1..256
#      and 1k / 8k context, each beside its floor;
# each part a process of its own (a faulting kernel poisons its CUDA
# context, not the other parts' results), all with one seed; then merges
# their reports into gpu-check.md and gpu-check.tsv, beside
# gpu-check.log and each part's own under $OUT/<part> (default OUT:
# t/gpu/out).  Sized for under 5 minutes on an H200
# (docs/cuda.md has the budget).  Without a device it prints SKIP and
# exits 0; outside `make gpu-check` it does nothing.
#
# Environment: KVS_BENCH_DIR (where gpu_check is built), KVS_FIXTURES,
# KVS_TMP, OUT.  Knobs: GPU_CHECK_SEED (default: the time; printed, so a
# run can be repeated), GPU_CHECK_ONLY (the parts, of "kern e2e tier hcopy lora time"),
# GPU_CHECK_QUICK=1 (a 4-layer timing model, for small cards),
# GPU_CHECK_SANITIZE=1 (first runs the kernel part under
# compute-sanitizer's memcheck: minutes, not in the 5-minute budget),
# GPU_CHECK_TIMEOUT (seconds, default 330).
set -uo pipefail

if [ "${KVS_GPU_CHECK:-0}" != 1 ]; then
    echo "gpu_check.sh: SKIP (run by make gpu-check only)"
    exit 0
fi

dir=${KVS_BENCH_DIR:-build}
out=${OUT:-t/gpu/out}
tmp=${KVS_TMP:-/tmp}
bin=$dir/gpu_check
cuda=${CUDA_HOME:-/usr/local/cuda}

mkdir -p "$out" "$tmp"
log=$out/gpu-check.log
start=$(date +%s%N)

# one seed for every part, printed, so that a run can be repeated
seed=${GPU_CHECK_SEED:-$(date +%s)}
parts=${GPU_CHECK_ONLY:-kern e2e tier hcopy lora time}
args=(--tmp "$tmp" --seed "$seed")
[ -n "${KVS_FIXTURES:-}" ] && args+=(--fixtures "$KVS_FIXTURES")
[ "${GPU_CHECK_QUICK:-0}" = 1 ] && args+=(--quick)

{
    echo "gpu-check: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
    if command -v nvidia-smi > /dev/null; then
        q=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem
        nvidia-smi --query-gpu=$q --format=csv,noheader 2> /dev/null || true
    else
        echo "nvidia-smi: not found"
    fi
    "$cuda/bin/nvcc" --version 2> /dev/null | tail -1 || true
    echo "gpu-check: $bin ${args[*]}, parts: $parts"
} 2>&1 | tee "$log"

if [ ! -x "$bin" ]; then
    echo "gpu_check.sh: FAIL: $bin is not built (make gpu-check)" \
        | tee -a "$log"
    exit 1
fi

if [ "${GPU_CHECK_SANITIZE:-0}" = 1 ]; then
    if [ -x "$cuda/bin/compute-sanitizer" ]; then
        echo "== compute-sanitizer memcheck over the kernel checks" \
            | tee -a "$log"
        "$cuda/bin/compute-sanitizer" --tool memcheck --leak-check no \
            --error-exitcode 3 "$bin" "${args[@]}" --only kern \
            --out "$out/sanitize" 2>&1 | tee -a "$log"
        src=${PIPESTATUS[0]}
        echo "== compute-sanitizer: exit $src" | tee -a "$log"
        [ "$src" = 0 ] || exit "$src"
    else
        echo "gpu_check.sh: no compute-sanitizer in $cuda/bin" | tee -a "$log"
    fi
fi

# Each part in a process of its own: a kernel that faults poisons its
# CUDA context, and must not cost the other parts their results.
deadline=$(( $(date +%s) + ${GPU_CHECK_TIMEOUT:-330} ))
rc=0
done_parts=()

for part in $parts; do
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -le 0 ]; then
        echo "gpu-check: FAIL: no time left for part $part" | tee -a "$log"
        rc=1
        continue
    fi

    rm -rf "${out:?}/$part"
    timeout "$left" "$bin" "${args[@]}" --only "$part" --out "$out/$part" \
        2>&1 | tee -a "$log"
    prc=${PIPESTATUS[0]}

    [ "$prc" = 124 ] && echo "gpu-check: FAIL: part $part timed out" \
        | tee -a "$log"
    [ "$prc" = 0 ] || rc=1

    if [ -f "$out/$part/gpu-check.tsv" ]; then
        done_parts+=("$part")
    elif [ "$prc" = 0 ]; then
        break                         # SKIP: no device
    fi
done

# one report: the timing part's header and table, every part's checks
if [ "${#done_parts[@]}" -gt 0 ]; then
    first=${done_parts[0]}
    for part in "${done_parts[@]}"; do
        [ "$part" = time ] && first=time
    done

    {
        head -1 "$out/$first/gpu-check.tsv"
        for part in "${done_parts[@]}"; do
            tail -n +2 "$out/$part/gpu-check.tsv"
        done
    } > "$out/gpu-check.tsv"

    pass=$(awk -F'\t' 'NR > 1 && ($6 == "PASS" || $6 == "PASS*")' \
               "$out/gpu-check.tsv" | wc -l)
    fail=$(awk -F'\t' 'NR > 1 && $6 == "FAIL"' "$out/gpu-check.tsv" | wc -l)
    skip=$(awk -F'\t' 'NR > 1 && $6 == "SKIP"' "$out/gpu-check.tsv" | wc -l)

    {
        awk -v run="- run: $(date -u '+%Y-%m-%d %H:%M UTC'), seed $seed, parts \
${done_parts[*]}: $pass checks passed, $fail failed, $skip skipped" \
            '/^- run: / { print run; next } /^## Checks/ { exit } { print }' \
            "$out/$first/gpu-check.md"
        echo "## Checks"
        echo
        echo "| part | check | error or value | tolerance | status | note |"
        echo "| --- | --- | ---: | ---: | --- | --- |"
        for part in "${done_parts[@]}"; do
            awk '/^## Checks/ { f = 1; next } f && /^\| / && ++n > 2' \
                "$out/$part/gpu-check.md"
        done
    } > "$out/gpu-check.md"
fi

ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf 'gpu-check: exit %s, %d.%01d s\n' "$rc" $((ms / 1000)) \
    $((ms % 1000 / 100)) | tee -a "$log"
[ -f "$out/gpu-check.md" ] && echo "gpu-check: report in $out/gpu-check.md" \
    | tee -a "$log"

exit "$rc"
