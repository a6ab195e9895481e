#!/usr/bin/env bash
# tests/gpu/acceld.sh — acceld on a real NVIDIA GPU node: serves every GPU
# nvidia-smi lists (ID = UUID, Healthy, NUMA node from sysfs), answers
# GetPreferredAllocation and Allocate (DeviceSpecs for the GPU's real
# /dev/nvidiaN and the control nodes), no NVML event errors at start, and the
# Allocate / GetPreferredAllocation latency and peak RSS with the real driver
# (bench-acceld, no XID injection on real hardware), and the idle CPU cost of
# the health thread's 50 ms probes.
# Needs the agent's -dev libraries (Debian: scripts/deps.sh) to build acceld, or a bundle
# made by scripts/gpu-bundle.sh on a Debian machine, named by ACCEL_GPU_BUNDLE.
# Prints one PASS/FAIL line per check; exits non-zero if any failed, 77 without a GPU.
# Usage: tests/gpu/acceld.sh [BUILD_DIR]   (default build-gpu-agent)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu-agent}
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=1; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP no NVIDIA GPU (nvidia-smi -L failed)"
    exit 77
fi
if [ -n "${ACCEL_GPU_BUNDLE:-}" ]; then
    # A GPU machine without Debian's -dev libraries: acceld, accelctl and bench-acceld were built
    # on a Debian machine and carried over with their runtime libraries (scripts/gpu-bundle.sh).
    BUILD=$ACCEL_GPU_BUNDLE
    export LD_LIBRARY_PATH=$ACCEL_GPU_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    for f in src/acceld/acceld src/cli/accelctl bench/bench-acceld; do
        [ -x "$BUILD/$f" ] || { echo "FAIL $BUILD/$f missing from the bundle"; exit 1; }
    done
else
    if ! pkg-config --exists libnghttp2 libprotobuf-c yaml-0.1 jansson 2>/dev/null; then
        echo "SKIP the agent's -dev libraries are missing (run scripts/deps.sh, or carry a bundle"
        echo "     made by scripts/gpu-bundle.sh and set ACCEL_GPU_BUNDLE)"
        exit 77
    fi
    if [ ! -f "$BUILD/build.ninja" ]; then
        meson setup "$BUILD" -Dagent=enabled >/dev/null || { echo "FAIL meson setup"; exit 1; }
    fi
    meson compile -C "$BUILD" src/acceld/acceld src/cli/accelctl bench/bench-acceld >/dev/null \
        || { echo "FAIL build"; exit 1; }
fi
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader | head -1 | sed 's/^/# driver, GPU: /'

tmp=$(mktemp -d /tmp/acceld-gpu-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$tmp/dp"
"$BUILD/src/acceld/acceld" --no-register --device-plugin-dir "$tmp/dp" \
    --state-dir "$tmp/state" --cdi-dir "$tmp/cdi" 2>"$tmp/acceld.log" &
pid=$!
sock=$tmp/dp/accel-nvidia.com-gpu.sock
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] && pass "acceld serves $sock" || { fail "acceld did not start"; cat "$tmp/acceld.log"; exit 1; }
ctl() { "$BUILD/src/cli/accelctl" plugin "$@" --socket "$sock"; }

devs=$(ctl devices) || fail "accelctl plugin devices"
echo "$devs" | sed 's/^/# /'
while IFS=, read -r idx uuid bus; do
    uuid=$(echo "$uuid" | tr -d ' ')
    bus=$(echo "$bus" | tr -d ' ' | tr 'A-F' 'a-f' | sed 's/^0000//')
    line=$(echo "$devs" | awk -v u="$uuid" '$1 == u')
    [ -n "$line" ] || { fail "GPU $idx $uuid not advertised"; continue; }
    [ "$(echo "$line" | awk '{print $2}')" = Healthy ] && pass "GPU $idx Healthy" \
        || fail "GPU $idx: $line"
    numa=$(cat "/sys/bus/pci/devices/${bus,,}/numa_node" 2>/dev/null || echo -1)
    want=$([ "$numa" -ge 0 ] 2>/dev/null && echo "$numa" || echo -)
    [ "$(echo "$line" | awk '{print $3}')" = "$want" ] && pass "GPU $idx NUMA $want" \
        || fail "GPU $idx NUMA: advertised $(echo "$line" | awk '{print $3}'), sysfs $numa"
done < <(nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader)

first=$(echo "$devs" | awk 'NR == 2 {print $1}')
alloc=$(ctl allocate "$first") || fail "allocate $first"
echo "$alloc" | sed 's/^/# /'
minor=$(nvidia-smi --query-gpu=uuid,index --format=csv,noheader | awk -F', ' -v u="$first" '$1 == u {print $2}')
echo "$alloc" | grep -q "NVIDIA_VISIBLE_DEVICES=$first" && pass "allocate env" || fail "allocate env"
echo "$alloc" | grep -q "device     /dev/nvidia" && pass "allocate device specs" || fail "allocate device specs"
for n in nvidiactl nvidia-uvm; do
    [ -e /dev/$n ] && { echo "$alloc" | grep -q "/dev/$n" && pass "allocate $n" || fail "allocate $n"; }
done
echo "# minor of $first per nvidia-smi index: $minor (Allocate uses NVML's minor number)"
n=$(echo "$devs" | awk 'NR > 1' | wc -l)
ctl prefer --size "$n" >/dev/null && pass "prefer all $n" || fail "prefer"
grep -q "error" "$tmp/acceld.log" && fail "errors in the acceld log" || pass "no errors logged"
# The health thread probes every GPU every 50 ms with the real driver: what
# that costs while idle, and that no probe took a healthy GPU for a lost one.
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
t0=$(ticks); sleep 5; t1=$(ticks)
hz=$(getconf CLK_TCK)
echo "# acceld idle CPU over 5 s (health probes every 50 ms): $(( (t1 - t0) * 100 / hz / 5 ))% of one core ($((t1 - t0)) ticks)"
grep -q "Unhealthy" "$tmp/acceld.log" && fail "a GPU went Unhealthy while idle" \
    || pass "no GPU Unhealthy after 5 s of probing"
"$BUILD/bench/bench-acceld" --socket "$sock" --calls 2000 --pid "$pid" | sed 's/^/# /'
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
[ "$rc" = 0 ] && pass "SIGTERM exit 0" || fail "SIGTERM exit $rc"
[ -e "$sock" ] && fail "socket left behind" || pass "socket removed"
sed 's/^/# log: /' "$tmp/acceld.log"
exit $failed
