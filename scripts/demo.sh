#!/usr/bin/env bash
# make demo: a 4-GPU emulated node and what accel sees on it.
set -euo pipefail
build=${1:-build}
echo "demo: a 4-GPU emulated node (build: $build)"

# ---- the node's GPUs: accelctl gpus on a 4-GPU emulated node (owner: gpu branch) ----
# accel-emu makes the machine (NUMA 0,0,1,1, NVLink pairs) with its sysfs fixture next to the
# state file; accelctl reads it through the emulated libnvidia-ml.so.1.
demo_gpus() {
    local b emu nvml accelctl tmp state
    b=$(cd "$build" && pwd)
    emu=$b/src/emu/accel-emu
    nvml=$b/src/emu/libnvidia-ml.so.1
    accelctl=$b/src/cli/accelctl
    for f in "$emu" "$nvml" "$accelctl"; do
        if [ ! -e "$f" ]; then
            echo "== accelctl gpus demo skipped: $f is not built"
            return 0
        fi
    done
    tmp=$(mktemp -d /tmp/accel-demo-gpus-XXXXXX)
    state=$tmp/emu.state
    echo "\$ accel-emu init --gpus 4 --numa 0,0,1,1 --nvlink pairs"
    ACCEL_EMU_STATE=$state "$emu" init --gpus 4 --numa 0,0,1,1 --nvlink pairs | sed -n 1,5p
    echo
    echo "\$ accelctl gpus --sysfs-root $state.d/sysfs"
    ACCEL_EMU_STATE=$state ACCEL_NVML_LIBRARY=$nvml "$accelctl" gpus --sysfs-root "$state.d/sysfs"
    echo
    echo "\$ accel-emu lose 3   # the GPU falls off the bus"
    ACCEL_EMU_STATE=$state "$emu" lose 3 >/dev/null
    echo "\$ accelctl gpus --json | python3 -c '...'   # index, health, error of each GPU"
    ACCEL_EMU_STATE=$state ACCEL_NVML_LIBRARY=$nvml "$accelctl" gpus --json \
        --sysfs-root "$state.d/sysfs" | python3 -c '
import json, sys
for g in json.load(sys.stdin):
    print(g["index"], g["uuid"], g["health"], g["error"] or "")
'
    rm -rf "$tmp"
}
demo_gpus
