#!/usr/bin/env bash
# make demo: a 4-GPU emulated node and what accel sees on it.
set -euo pipefail
build=${1:-build}
echo "demo: a 4-GPU emulated node (build: $build)"
# One machine for the whole demo (ACCEL_EMU_STATE names one of your own): what happens to a GPU
# in the first part is still true in the second.
demo_tmp=$(mktemp -d /tmp/accel-demo-XXXXXX)
trap 'rm -rf "$demo_tmp"' EXIT
demo_state=${ACCEL_EMU_STATE:-$demo_tmp/emu.state}

# ---- the node's GPUs: accelctl gpus on a 4-GPU emulated node (owner: gpu branch) ----
# accel-emu makes the machine (NUMA 0,0,1,1, NVLink pairs) with its sysfs fixture next to the
# state file; accelctl reads it through the emulated libnvidia-ml.so.1.
demo_gpus() {
    local b emu nvml accelctl state
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
    state=$demo_state
    echo "\$ accel-emu init --gpus 4 --numa 0,0,1,1 --nvlink pairs"
    ACCEL_EMU_STATE=$state "$emu" init --gpus 4 --numa 0,0,1,1 --nvlink pairs | sed -n 1,5p
    echo
    echo "\$ accelctl gpus --sysfs-root $state.d/sysfs"
    ACCEL_EMU_STATE=$state ACCEL_NVML_LIBRARY=$nvml "$accelctl" gpus --sysfs-root "$state.d/sysfs"
    echo
    echo "\$ accel-emu lose 3   # the GPU falls off the bus"
    ACCEL_EMU_STATE=$state "$emu" lose 3 >/dev/null
    echo "\$ accelctl gpus --json | python3 -c '...'   # index, uuid, health (and why) of each GPU"
    ACCEL_EMU_STATE=$state ACCEL_NVML_LIBRARY=$nvml "$accelctl" gpus --json \
        --sysfs-root "$state.d/sysfs" | python3 -c '
import json, sys
for g in json.load(sys.stdin):
    # a lost GPU answers nothing: no uuid (null), and an error saying why
    why = " (" + g["error"] + ")" if g.get("error") else ""
    print("GPU %d  %-40s  %s%s" % (g["index"], g["uuid"] or "uuid unknown", g["health"], why))
'
}
demo_gpus

# ---- acceld: the GPUs as a kubelet device plugin (owner: plugin branch) ----
# A 4-GPU emulated node (its own, unless ACCEL_EMU_STATE names one), acceld
# serving it without a kubelet (--no-register) in a temp plugin dir, and what
# `accelctl plugin` sees: the advertised GPUs with their NUMA nodes and one
# Allocate response. acceld is stopped with SIGTERM, which removes its socket.
demo_acceld() {
    local b emu nvml acceld accelctl tmp state sock pid id
    b=$(cd "$build" && pwd)
    emu=$b/src/emu/accel-emu
    nvml=$b/src/emu/libnvidia-ml.so.1
    acceld=$b/src/acceld/acceld
    accelctl=$b/src/cli/accelctl
    for f in "$emu" "$nvml" "$acceld" "$accelctl"; do
        if [ ! -e "$f" ]; then
            echo "== acceld demo skipped: $f is not built"
            return 0
        fi
    done
    tmp=$demo_tmp/acceld
    mkdir -p "$tmp"
    state=$demo_state
    if [ ! -e "$state" ]; then
        echo "\$ accel-emu init --gpus 4 --numa 0,0,1,1 --nvlink pairs"
        ACCEL_EMU_STATE=$state "$emu" init --gpus 4 --numa 0,0,1,1 --nvlink pairs >/dev/null
    else
        echo "== the same machine: GPU 3 is still lost"
    fi
    mkdir -p "$tmp/dp"
    echo "== acceld: serving the emulated GPUs on $tmp/dp (no kubelet: --no-register)"
    ACCEL_EMU_STATE=$state ACCEL_NVML_LIBRARY=$nvml "$acceld" --no-register \
        --device-plugin-dir "$tmp/dp" --sysfs-root "$state.d/sysfs" --dev-root "$state.d/dev" \
        --state-dir "$tmp/state" 2>"$tmp/acceld.log" &
    pid=$!
    sock=$tmp/dp/accel-nvidia.com-gpu.sock
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    if [ ! -S "$sock" ]; then
        echo "acceld did not start:"; cat "$tmp/acceld.log"
        kill "$pid" 2>/dev/null || true
        return 1
    fi
    echo "\$ accelctl plugin devices --socket $sock"
    "$accelctl" plugin devices --socket "$sock"
    id=$("$accelctl" plugin prefer --socket "$sock" --size 2 | paste -sd' ')
    echo "\$ accelctl plugin prefer --socket ... --size 2   # an NVLink pair on one NUMA node"
    echo "$id"
    echo "\$ accelctl plugin allocate --socket ... $id"
    # shellcheck disable=SC2086
    "$accelctl" plugin allocate --socket "$sock" $id
    kill -TERM "$pid"
    wait "$pid" || true
    echo "== acceld stopped (socket removed: $([ -e "$sock" ] && echo no || echo yes)); its log:"
    sed 's/^/   /' "$tmp/acceld.log"
}
demo_acceld

