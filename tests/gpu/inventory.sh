#!/usr/bin/env bash
# tests/gpu/inventory.sh — src/gpu on a real NVIDIA GPU: the inventory against nvidia-smi and
# sysfs, the process-info stride detection against a live CUDA process, and the CUDA ABI
# conformance test against the installed toolkit. Needs gcc, meson, the NVIDIA driver
# (nvidia-smi, libnvidia-ml.so.1, libcuda.so.1); no -dev libraries (builds with -Dagent=disabled).
# Prints one PASS/FAIL line per check and exits non-zero if any failed; 77 without a GPU.
# Usage: tests/gpu/inventory.sh [BUILD_DIR]   (default build-gpu)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
failed=0

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=1; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP no NVIDIA GPU (nvidia-smi -L failed)"
    exit 77
fi

if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" -Dagent=disabled >/dev/null || { echo "FAIL meson setup"; exit 1; }
fi
meson compile -C "$BUILD" tests/inventory/gpu-inventory-print tests/inventory/cuda-hold \
    >/dev/null || { echo "FAIL build"; exit 1; }
PRINT=$BUILD/tests/inventory/gpu-inventory-print
HOLD=$BUILD/tests/inventory/cuda-hold

nvidia-smi --query-gpu=driver_version,name --format=csv,noheader | head -1 | sed 's/^/# driver, GPU: /'

inv=$("$PRINT") || { echo "FAIL gpu-inventory-print: $inv"; exit 1; }
get() { printf '%s\n' "$inv" | sed -n "s/^$1=//p" | head -1; }

# --- count and per-GPU properties against nvidia-smi ------------------------------------
want_count=$(nvidia-smi -L | grep -c '^GPU ')
[ "$(get count)" = "$want_count" ] && pass "count $want_count" \
    || fail "count: inventory $(get count), nvidia-smi $want_count"

while IFS=, read -r idx uuid name mem bus cc vbios; do
    idx=${idx// /}; uuid=${uuid// /}; mem=${mem// /}; bus=${bus// /}; cc=${cc// /}
    name=${name# }; vbios=${vbios// /}
    [ "$(get "gpu.$idx.uuid")" = "$uuid" ] && pass "gpu $idx uuid" \
        || fail "gpu $idx uuid: $(get "gpu.$idx.uuid") vs $uuid"
    [ "$(get "gpu.$idx.name")" = "$name" ] && pass "gpu $idx name" \
        || fail "gpu $idx name: '$(get "gpu.$idx.name")' vs '$name'"
    [ "$(get "gpu.$idx.memory_total_bytes")" = "$((mem * 1048576))" ] && pass "gpu $idx memory" \
        || fail "gpu $idx memory: $(get "gpu.$idx.memory_total_bytes") vs ${mem} MiB"
    # nvidia-smi prints 00000000:3B:00.0; the inventory normalizes to 0000:3b:00.0.
    want_bus=$(echo "${bus: -12}" | tr 'A-F' 'a-f')
    [ "$(get "gpu.$idx.pci_bus_id")" = "$want_bus" ] && pass "gpu $idx pci bus id" \
        || fail "gpu $idx pci bus id: $(get "gpu.$idx.pci_bus_id") vs $want_bus"
    [ "$(get "gpu.$idx.cc")" = "$cc" ] && pass "gpu $idx compute capability" \
        || fail "gpu $idx compute capability: $(get "gpu.$idx.cc") vs $cc"
    [ "$(get "gpu.$idx.vbios" | tr 'A-F' 'a-f')" = "$(echo "$vbios" | tr 'A-F' 'a-f')" ] \
        && pass "gpu $idx vbios" || fail "gpu $idx vbios: $(get "gpu.$idx.vbios") vs $vbios"
    [ "$(get "gpu.$idx.healthy")" = 1 ] && pass "gpu $idx healthy" \
        || fail "gpu $idx unhealthy: $(get "gpu.$idx.error")"
    numa_file=/sys/bus/pci/devices/$want_bus/numa_node
    if [ -r "$numa_file" ]; then
        want_numa=$(cat "$numa_file")
        [ "$(get "gpu.$idx.numa_node")" = "$want_numa" ] && pass "gpu $idx numa $want_numa" \
            || fail "gpu $idx numa: $(get "gpu.$idx.numa_node") vs sysfs $want_numa"
    fi
    [ -e "/dev/nvidia$(get "gpu.$idx.minor")" ] && pass "gpu $idx minor" \
        || fail "gpu $idx minor $(get "gpu.$idx.minor"): no /dev/nvidia$(get "gpu.$idx.minor")"
done < <(nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,compute_cap,vbios_version \
             --format=csv,noheader,nounits)

echo "# link matrix (inventory):"
printf '%s\n' "$inv" | grep '\.link\.' | sed 's/^/#   /'
echo "# nvidia-smi topo -m (compare by eye: NV# / PIX / PXB / PHB / NODE / SYS):"
nvidia-smi topo -m 2>/dev/null | sed 's/^/#   /'

# --- running processes: two live contexts holding 256 MiB each on GPU 0 ------------------
# (two: one process teaches the stride detection nothing, see docs/inventory.md)
coproc HOLDER { exec "$HOLD" 0 256 2; }
# bash unsets the coproc's variables when it exits: keep copies.
hold_pid=$HOLDER_PID hold_out=${HOLDER[0]} hold_in=${HOLDER[1]}
pids=()
while [ ${#pids[@]} -lt 2 ] && read -r -t 60 word pid <&"$hold_out" && [ "$word" = ready ]; do
    pids+=("$pid")
done
if [ ${#pids[@]} = 2 ]; then
    inv=$("$PRINT")
    stride=$(get gpu.0.process_stride)
    case "$stride" in 16|24|32) pass "process-info stride detected: $stride bytes" ;;
        *) fail "process-info stride not detected (rc $(get gpu.0.processes_rc))" ;; esac
    for pid in "${pids[@]}"; do
        used=$(get "gpu.0.process.$pid")
        if [ -n "$used" ] && [ "$used" -ge $((256 * 1048576)) ]; then
            pass "process $pid listed with $used bytes"
        else
            fail "process $pid not listed with >= 256 MiB (got '$used'; in a container NVML" \
                 "may report host pids: $(printf '%s\n' "$inv" | grep 'gpu.0.process\.' | tr '\n' ' '))"
        fi
        smi=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
              | tr -d ' ' | grep "^$pid," || true)
        echo "# nvidia-smi compute app $pid: ${smi:-none}"
    done
else
    fail "cuda-hold did not start two processes (no context on GPU 0?)"
fi
eval "exec ${hold_in}>&-" # the holders exit when their stdin closes
wait "$hold_pid" 2>/dev/null

# --- CUDA ABI conformance against the installed toolkit ------------------------------------
# /usr/local/cuda with CUDA 13, else NVIDIA's wheels where scripts/cuda-wheels.sh installed them
cuda_h="$(bash "$ROOT/scripts/cuda-wheels.sh" --root)/include/cuda.h"
if [ -f "$cuda_h" ]; then
    meson test -C "$BUILD" cuda-abi >/dev/null && pass "cuda_api.h matches $cuda_h" \
        || fail "cuda-abi (see $BUILD/meson-logs/testlog.txt)"
else
    echo "SKIP cuda-abi: no CUDA 13 cuda.h (/usr/local/cuda; scripts/cuda-wheels.sh installs one)"
fi

[ $failed = 0 ] && echo "inventory.sh: all checks passed" || echo "inventory.sh: FAILED"
exit $failed
