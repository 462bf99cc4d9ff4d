#!/bin/bash
# cuda_check.sh: the static checks of the CUDA backend, which need no GPU
# (`make cuda-check`, run by `make test` when nvcc is present):
#
#   1. every kernels/*.cu was compiled for sm_90 with no warning (the
#      Makefile keeps each object's nvcc/ptxas output in a .ptxas file
#      beside it; -Werror all-warnings already failed the build on one);
#   2. libkvserve_cuda.so carries sm_90 SASS and compute_90 PTX (the
#      driver's JIT fallback on newer GPUs), per cuobjdump;
#   3. every function of the attention kernels (kernels/kvs_k_attn_*.cu)
#      spills nothing: "0 bytes spill stores, 0 bytes spill loads";
#   4. the CLI and the nginx module need neither libcudart nor libcublas
#      (the engine dlopens the backend), and no object needs libcuda
#      (the driver API: a GPU-less host could not even load it).
#
# Prints a table of every kernel function: file, registers, stack,
# spill stores and loads.
#
# usage: cuda_check.sh BUILD_DIR kernels/*.cu
# env:   CUDA_HOME, VENV (where `make` put cuobjdump when the toolkit has
#        none), CUOBJDUMP (overrides both)

set -u

B=$1
shift
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
SO=$B/libkvserve_cuda.so
PROBE_SO=$B/libkvserve_cuda_probe.so
fail=0

bad() {
    echo "cuda-check: FAIL: $*"
    fail=1
}

# --- 1 and 3: the ptxas reports -------------------------------------------

# one row per function: file function registers stack spill_st spill_ld
rows=$(
for cu in "$@"; do
    base=$(basename "$cu" .cu)
    rep=$B/cuda/$base.ptxas

    if [ ! -f "$B/cuda/$base.o" ] || [ ! -f "$rep" ]; then
        echo "MISSING $base"
        continue
    fi

    awk -v f="$base" '
        /Compiling entry function/ {
            if ($0 !~ /for .sm_90./) { print "NOT90", f, $0 }
        }
        /Function properties for/ { fn = $NF; regs[fn] = "-" }
        /bytes stack frame/ && fn != "" {
            st[fn] = $1; ss[fn] = $5; sl[fn] = $9; order[++n] = fn
        }
        /Used [0-9]+ registers/ && fn != "" {
            for (i = 1; i <= NF; i++) if ($i == "Used") regs[fn] = $(i + 1)
        }
        /[Ww]arning/ { print "WARN", f, $0 }
        END {
            for (i = 1; i <= n; i++) {
                g = order[i]
                print "ROW", f, g, regs[g], st[g], ss[g], sl[g]
            }
        }' "$rep"
done
)

while read -r kind a rest; do
    case $kind in
        MISSING) bad "kernels/$a.cu: no object or ptxas report in $B/cuda" ;;
        NOT90)   bad "kernels/$a.cu: compiled for another target: $rest" ;;
        WARN)    bad "kernels/$a.cu: $rest" ;;
    esac
done <<< "$rows"

demangle() {
    if command -v c++filt > /dev/null; then c++filt; else cat; fi
}

printf '%-22s %-44s %5s %6s %8s %8s\n' file kernel regs stack spill_st \
       spill_ld
echo "$rows" | awk '$1 == "ROW"' | while read -r _ f fn regs st ss sl; do
    name=$(echo "$fn" | demangle | sed 's/(.*//')
    printf '%-22s %-44.44s %5s %6s %8s %8s\n' "$f" "$name" "$regs" "$st" \
           "$ss" "$sl"
done

n_attn=0
for cu in "$@"; do
    case $(basename "$cu") in kvs_k_attn_*.cu) ;; *) continue ;; esac
    n_attn=$((n_attn + 1))
    base=$(basename "$cu" .cu)
    spills=$(echo "$rows" | awk -v f="$base" \
             '$1 == "ROW" && $2 == f && ($6 != 0 || $7 != 0) {print $3}')
    fns=$(echo "$rows" | awk -v f="$base" '$1 == "ROW" && $2 == f' | wc -l)

    if [ "$fns" -eq 0 ]; then
        bad "kernels/$base.cu: no function in its ptxas report"
    fi
    for fn in $spills; do
        bad "kernels/$base.cu: $(echo "$fn" | demangle) spills registers"
    done
done

if [ "$n_attn" -eq 0 ]; then
    bad "no attention kernels (kernels/kvs_k_attn_*.cu) to check"
fi

# --- 2: the images in the shared object -----------------------------------

CUOBJDUMP=${CUOBJDUMP:-}
if [ -z "$CUOBJDUMP" ]; then
    wheel=${VENV:-/nonexistent}/lib/python3*/site-packages/nvidia/cu*/bin
    for c in "$(command -v cuobjdump)" "$CUDA_HOME/bin/cuobjdump" \
             $wheel/cuobjdump
    do
        if [ -n "$c" ] && [ -x "$c" ]; then
            CUOBJDUMP=$c
            break
        fi
    done
fi

if [ ! -f "$SO" ]; then
    bad "$SO was not built"
elif [ -z "$CUOBJDUMP" ]; then
    bad "no cuobjdump (toolkit or venv) to list the images of $SO"
else
    elf=$("$CUOBJDUMP" --list-elf "$SO" 2>&1)
    ptx=$("$CUOBJDUMP" --list-ptx "$SO" 2>&1)
    echo "cuobjdump ($CUOBJDUMP) --list-elf / --list-ptx $SO:"
    echo "$elf" | sed 's/^/  /'
    echo "$ptx" | sed 's/^/  /'

    echo "$elf" | grep -q 'sm_90' || bad "$SO: no sm_90 SASS"
    echo "$ptx" | grep -q 'sm_90\|compute_90' || bad "$SO: no compute_90 PTX"
    if echo "$elf" | grep -v 'sm_90' | grep -q 'sm_[0-9]'; then
        bad "$SO: SASS for another target: $(echo "$elf" | grep -v sm_90)"
    fi
fi

# --- 4: who links what ----------------------------------------------------

needed() {
    readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
}

for f in "$B/kvserve" "$B/ngx_http_kvserve_module.so"; do
    if [ ! -f "$f" ]; then
        bad "$f was not built"
        continue
    fi

    libs="$(needed "$f") $(ldd "$f" 2>/dev/null | awk '{print $1}')"
    for l in $libs; do
        case $l in
            libcudart*|libcublas*|libcuda.*)
                bad "$(basename "$f") needs $l (it must dlopen CUDA)" ;;
        esac
    done
    echo "$(basename "$f"): needs $(needed "$f" | tr '\n' ' ')"
done

for f in "$SO" "$PROBE_SO"; do
    [ -f "$f" ] || { bad "$f was not built"; continue; }
    echo "$(basename "$f"): needs $(needed "$f" | tr '\n' ' ')"
    needed "$f" | grep -q '^libcuda\.' \
        && bad "$(basename "$f") needs libcuda (the driver API)"
    needed "$f" | grep -q '^libcudart\.' \
        || bad "$(basename "$f") does not need libcudart"
done

if [ -f "$PROBE_SO" ] && needed "$PROBE_SO" | grep -q '^libcublas'; then
    bad "$(basename "$PROBE_SO") needs cuBLAS: a probe must not map it"
fi

if [ "$fail" -ne 0 ]; then
    echo "cuda-check: FAILED"
    exit 1
fi

echo "cuda-check: ok"
