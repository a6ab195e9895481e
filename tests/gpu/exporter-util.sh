#!/usr/bin/env bash
# exporter-util.sh — accel-exporter's per-process SM utilization on a real GPU: two processes
# time-share GPU 0 (tests/emu/spin.c built with gcc: one launching 10 ms kernels back to back,
# one 10 ms in every ~40 ms with --gap 30), and tests/gpu/proc-util.c reads their figures with
# the exporter's own code (src/exporter/podutil.c, the driver's
# nvmlDeviceGetProcessesUtilizationInfo or nvmlDeviceGetProcessUtilization, samples since the
# last seen). PASS when both are seen, the busy one clearly above the other, and the sum within
# the GPU. libc and libdl only. Prints PASS/FAIL lines; exit 77 without a GPU.
#
# Dry run on accel-emu (not a GPU validation, do not record):
#   build/src/emu/accel-emu --state /tmp/gpus init --gpus 1
#   ACCEL_EMU_STATE=/tmp/gpus ACCEL_NVML_LIBRARY=$PWD/build/src/emu/libnvidia-ml.so.1 \
#     LD_LIBRARY_PATH=build/src/emu tests/gpu/exporter-util.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
    if [ -z "${ACCEL_EMU_STATE:-}" ]; then
        echo "SKIP no NVIDIA GPU here (nvidia-smi -L failed); see the header for a dry run"
        exit 77
    fi
    echo "DRY RUN on accel-emu ($ACCEL_EMU_STATE): not a GPU validation, do not record"
else
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
fi
out=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$out"
}
trap cleanup EXIT
cflags=(-std=gnu17 -O2 -Wall -Wextra -Werror -I"$root/src/gpu" -I"$root/src/common"
        -I"$root/src/exporter")
gcc "${cflags[@]}" -o "$out/spin" "$root/tests/emu/spin.c" -ldl || { echo "FAIL build spin"; exit 1; }
gcc "${cflags[@]}" -o "$out/proc-util" "$root/tests/gpu/proc-util.c" \
    "$root/src/exporter/podutil.c" "$root/src/gpu/nvml.c" "$root/src/common/util.c" -ldl ||
    { echo "FAIL build proc-util"; exit 1; }
mkfifo "$out/go-a" "$out/go-b"
"$out/spin" 10 --go --repeat 100000 <"$out/go-a" >"$out/a.out" 2>&1 &
pids+=($!); a=$!
"$out/spin" 10 --go --repeat 100000 --gap 30 <"$out/go-b" >"$out/b.out" 2>&1 &
pids+=($!); b=$!
exec 3>"$out/go-a" 4>"$out/go-b"
for f in a b; do
    for _ in $(seq 300); do grep -q ready "$out/$f.out" && break; sleep 0.1; done
    grep -q ready "$out/$f.out" || { echo "FAIL spin $f did not get ready: $(cat "$out/$f.out")"; exit 1; }
done
echo >&3
echo >&4
res=$("$out/proc-util" 6 "$a" "$b") || { echo "FAIL proc-util: $res"; exit 1; }
echo "$res"
ra=$(echo "$res" | awk -v p="$a" '$1 == "pid" && $2 == p {print $4}')
rb=$(echo "$res" | awk -v p="$b" '$1 == "pid" && $2 == p {print $4}')
failed=0
if awk -v a="$ra" -v b="$rb" 'BEGIN {exit !(a > b + 0.2 && b > 0.05 && a + b <= 1.1)}'; then
    echo "PASS two processes on one GPU: busy one $ra, duty-cycled one $rb, each its own"
else
    echo "FAIL two processes on one GPU: busy one $ra, duty-cycled one $rb (want a > b + 0.2, b > 0.05, a + b <= 1.1)"
    failed=1
fi
exit $failed
