#!/usr/bin/env bash
# On a lent device machine, from the repository's root: unpacks the
# pack that t/gpu/pack.sh made here and runs, in order, the jobs named:
#   check  gpu-check (t/gpu/gpu_check.sh, every part); when a part of
#          kern, lora or hcopy fails, that part again under
#          compute-sanitizer's memcheck, if time is left
#   sanitize  compute-sanitizer memcheck over the parts of
#          SANITIZE_PARTS (kern e2e tier hcopy lora), then racecheck over
#          kern, each within SANITIZE_TIMEOUT seconds (60)
#   amx    test_cpu_amx (the tile kernel against the portable one, if
#          the CPU has AMX) and the CPU's feature flags
#   bench  CPU benches on a quiet machine: t/bench/amx.sh (the tile
#          kernel's ways against VNNI, one thread) and t/bench/lora.sh's
#          small part (LORA_ROUNDS, 6)
#   peer   llama.cpp built from the pack's source (CPU only, native),
#          then t/bench/prefill_peer.sh, ours at 1 and 2 threads as
#          default and with each of PREFILL_ENV (the AMX tiles, the
#          AVX-512 batched product) against llama-bench
# Writes at most 8 files under $OUT (the tool's limit): summary.txt
# (the machine, each job's table), gpu-check.md, gpu-check.tsv,
# gpu-check.log, parts.tar.gz (every part's report, sanitizer output,
# the peer's build log).
#
# Usage: bash t/gpu/remote.sh PACK.tar.xz [JOBS...]   (default: check amx)
# Knobs: REMOTE_BUDGET (seconds for all jobs, 480), GPU_CHECK_SEED,
# GPU_CHECK_ONLY, GPU_CHECK_TIMEOUT (the check job's share, 300),
# PREFILL_MODELS, PREFILL_THREADS, PREFILL_REPS (prefill_peer.sh's).
set -uo pipefail

pack=${1:?usage: remote.sh PACK.tar.xz [check] [amx] [peer]}
shift
jobs=${*:-check amx}
t0=$(date +%s)
budget=${REMOTE_BUDGET:-480}
left() { echo $(( budget - ($(date +%s) - t0) )); }

w=/tmp/kvs-remote
rm -rf "$w"
mkdir -p "$w/tmp" "$w/keep"
out=${OUT:-$w/out}
mkdir -p "$out"
sum=$out/summary.txt
note() { echo "$*" | tee -a "$sum"; }

xz -dc "$pack" | tar -x -C "$w" || { note "remote: cannot unpack $pack"; exit 1; }
g=$w/gpu-pack

{
    echo "== machine, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), jobs: $jobs"
    uname -r
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
        --format=csv,noheader 2>&1
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L2|L3)'
    echo "flags: $(grep -o -w 'avx2\|avx512f\|avx512_vnni\|avx512_bf16\|avx512_fp16\|amx_[a-z0-9]*' \
        /proc/cpuinfo | sort -u | tr '\n' ' ')"
    free -g | sed -n 2p
    command -v nvcc > /dev/null && nvcc --version | tail -1
} 2>&1 | tee -a "$sum"

# CUDA's libraries come from the machine (cuBLAS alone is over the
# transfer limit); the pack's lib/ holds the rest
cudirs=
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    p=$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')
    [ -z "$p" ] && p=$(find /usr/local/cuda/lib64 /usr/local /opt /usr/lib \
                           -name "$l" 2> /dev/null | head -1)
    if [ -n "$p" ]; then
        cudirs=$cudirs:$(dirname "$p")
    else
        note "remote: $l not found on this machine"
    fi
done
export LD_LIBRARY_PATH=$g/lib$cudirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in "$g"/bin/*; do
    ldd "$f" 2>&1 | grep 'not found' | sed "s|^|remote: $(basename "$f"): |" \
        | tee -a "$sum"
done

seed=${GPU_CHECK_SEED:-$(date +%s)}
cs=$(command -v compute-sanitizer \
     || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")

job_check() {
    local rc part
    note "== check (seed $seed, $(left) s left)"
    KVS_GPU_CHECK=1 KVS_BENCH_DIR=$g/bin KVS_FIXTURES=$g/fixtures \
        KVS_TMP=$w/tmp OUT=$w/gc KVSERVE_CUDA_SO=$g/bin/libkvserve_cuda.so \
        GPU_CHECK_SEED=$seed GPU_CHECK_TIMEOUT=${GPU_CHECK_TIMEOUT:-300} \
        bash t/gpu/gpu_check.sh > "$w/check.out" 2>&1
    rc=$?
    grep -E 'FAIL|PASS\*|MISSED|MET|gpu-check: exit|== .*: [0-9.]+ s$' \
        "$w/check.out" | head -60 | tee -a "$sum"
    for f in gpu-check.md gpu-check.tsv gpu-check.log; do
        [ -f "$w/gc/$f" ] && cp "$w/gc/$f" "$out/$f"
    done
    [ -f "$out/gpu-check.log" ] || cp "$w/check.out" "$out/gpu-check.log"
    cp -r "$w/gc" "$w/keep/gc" 2> /dev/null
    note "check: exit $rc"
    [ "$rc" = 0 ] && return 0

    # the first failed part whose kernels a memory checker can place
    for part in ${GPU_CHECK_ONLY:-kern lora hcopy}; do
        case $part in kern | lora | hcopy) ;; *) continue ;; esac
        if [ -f "$w/gc/$part/gpu-check.tsv" ] \
           && ! awk -F'\t' '$6 == "FAIL" { f = 1 } END { exit !f }' \
                "$w/gc/$part/gpu-check.tsv"
        then
            continue
        fi
        if [ "$(left)" -lt 150 ]; then
            note "check: no time for compute-sanitizer on $part"
            break
        fi
        note "== compute-sanitizer memcheck, part $part"
        sanitize memcheck "$part" 120
        break
    done
    return 1
}

# sanitize TOOL PART SECONDS: gpu_check's part under compute-sanitizer's
# TOOL, its summary line noted, and the first findings when it found any.
# The parts that open the CUDA backend need the pack's library named (the
# path built in is this machine's); the part's own pass / fail count is
# noted too, so that a part that could not run is not read as clean.
sanitize() {
    local f=$w/keep/sanitize-$1-$2.txt rc
    KVSERVE_CUDA_SO=$g/bin/libkvserve_cuda.so \
    timeout "$3" "$cs" --tool "$1" --error-exitcode 3 --print-limit 20 \
        "$g/bin/gpu_check" --tmp "$w/tmp" --seed "$seed" \
        --fixtures "$g/fixtures" --only "$2" --out "$w/keep/san-$1-$2" \
        > "$f" 2>&1
    rc=$?
    note "sanitize: $1 $2: exit $rc ($(grep -m1 -o \
        'ERROR SUMMARY: [0-9]* error[s]*\|RACECHECK SUMMARY.*' "$f"); $(grep \
        -m1 -o 'gpu_check: [0-9]* passed, [0-9]* failed' "$f"))"
    [ "$rc" = 3 ] && grep -E -m 20 'Invalid|Error|hazard|at 0x|in kvs_' \
        "$f" | tee -a "$sum"
    return 0
}

job_sanitize() {
    local part tool lim=${SANITIZE_TIMEOUT:-60}
    note "== sanitize ($(left) s left)"
    for part in ${SANITIZE_PARTS:-kern e2e tier hcopy lora} racecheck; do
        tool=memcheck
        if [ "$part" = racecheck ]; then
            tool=racecheck
            part=kern
        fi
        if [ "$(left)" -lt $((lim + 20)) ]; then
            note "sanitize: no time for $tool on $part"
            continue
        fi
        sanitize "$tool" "$part" "$lim"
    done
    return 0
}

job_bench() {
    note "== bench ($(left) s left)"
    KVS_BENCH_DIR=$g/bin bash t/bench/amx.sh 2>&1 | tee -a "$sum"
    KVS_BENCH_DIR=$g/bin KVS_TMP=$w/tmp LORA_PARTS=small \
        LORA_ROUNDS=${LORA_ROUNDS:-6} bash t/bench/lora.sh 2>&1 \
        | tee -a "$sum"
}

job_amx() {
    note "== amx ($(left) s left)"
    "$g/bin/test_cpu_amx" > "$w/keep/test_cpu_amx.txt" 2>&1
    note "test_cpu_amx: exit $?"
    grep -E 'PASSED|FAILED|SKIP|amx|tile|\[  ' "$w/keep/test_cpu_amx.txt" \
        | head -30 | tee -a "$sum"
    "$g/bin/test_cpu_amxb" > "$w/keep/test_cpu_amxb.txt" 2>&1
    note "test_cpu_amxb: exit $?"
    grep -E 'PASSED|FAILED|SKIP|tiles|bound|\[  ' \
        "$w/keep/test_cpu_amxb.txt" | head -30 | tee -a "$sum"
    "$g/bin/kvserve" bench "$g/fixtures/models/stories260K-f32.gguf" \
        --threads 1 --seqs 1 --prompt 64 --gen 1 2>&1 \
        | grep '^cpu kernels' | tee -a "$sum"
    amx_logits
}

# The BF16 tiles through a whole forward: `kvserve logits` of a
# generated small F16 and BF16 model over 200 ids in one prefill, on the
# F32 kernel (KVSERVE_CPU_GEMM=avx2) and on the tiles (the default where
# the CPU has AMX-BF16); the largest difference over the largest logit.
amx_logits() {
    local dt m ids
    ids=$(seq 1 200 | tr '\n' ' ')
    for dt in bf16 f16; do
        m=$w/tmp/amx-$dt.gguf
        mkdir -p "$w/tmp"
        "$g/bin/kvserve" gen-model --preset small --dtype $dt --seed 5 "$m" \
            > /dev/null || { note "amx logits $dt: gen-model failed"; continue; }
        KVSERVE_CPU_GEMM=avx2 "$g/bin/kvserve" logits "$m" -t "$ids" \
            -o "$w/tmp/a.f32" 2> "$w/keep/logits-$dt.txt"
        "$g/bin/kvserve" logits "$m" -t "$ids" -o "$w/tmp/b.f32" \
            2>> "$w/keep/logits-$dt.txt"
        paste <(od -An -v -f -w4 "$w/tmp/a.f32") \
              <(od -An -v -f -w4 "$w/tmp/b.f32") \
            | awk -v dt=$dt '{ d = $1 - $2; d = d < 0 ? -d : d
                               a = $1 < 0 ? -$1 : $1
                               if (d > md) md = d; if (a > ma) ma = a
                               if ($1 != $2) nd++ }
                         END { printf "amx logits %s: %d values, %d differ, "\
                               "max diff %.3g of max |logit| %.3g (%.2g)\n",
                               dt, NR, nd, md, ma, ma ? md / ma : 0 }' \
            | tee -a "$sum"
    done
}

job_peer() {
    local src=$g/peer/llama-src.tar.xz p=$w/llama.cpp bin=
    note "== peer ($(left) s left)"
    if [ -f "$src" ]; then
        mkdir -p "$p"
        xz -dc "$src" | tar -x -C "$p"
        if (cd "$p" && cmake -B build -DCMAKE_BUILD_TYPE=Release \
                -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
                -DLLAMA_BUILD_SERVER=OFF && \
            timeout $(( $(left) - 60 )) cmake --build build -j"$(nproc)" \
                --target llama-bench) > "$w/keep/peer-build.txt" 2>&1
        then
            bin=$p/build/bin
        else
            note "peer: llama.cpp did not build (parts.tar.gz has the log)"
            tail -5 "$w/keep/peer-build.txt" | tee -a "$sum"
        fi
        grep -E -i 'AMX|AVX512|native' "$w/keep/peer-build.txt" | head -8 \
            | tee -a "$sum"
    else
        note "peer: no llama.cpp source in the pack (LLAMA_SRC)"
    fi
    KVS_CLI=$g/bin/kvserve KVS_TMP=$w/tmp LLAMA_CPP_BUILD=$bin \
        PREFILL_OURS_ONLY=1 \
        PREFILL_ENV=${PREFILL_ENV:-KVSERVE_CPU_GEMM=avx2 KVSERVE_CPU_GEMM=avx512 KVSERVE_CPU_SIMD=3} \
        timeout $(( $(left) - 10 )) bash t/bench/prefill_peer.sh \
        2>&1 | tee -a "$sum"
}

rc=0
for j in $jobs; do
    if [ "$(left)" -le 20 ]; then
        note "remote: no time left for $j"
        rc=1
        continue
    fi
    "job_$j" || rc=1
done

tar -C "$w" -czf "$out/parts.tar.gz" keep 2> /dev/null
note "remote: exit $rc after $(( $(date +%s) - t0 )) s"
exit "$rc"
