#!/usr/bin/env bash
# Runs every benchmark against a build dir; results go to stdout and are
# copied into docs/benchmarks.md by hand with the date and machine.
set -euo pipefail
build=${1:-build}
echo "== bench-inventory (src/gpu; fake NVML, our overhead only)"
"$build/bench/bench-inventory" "$build/tests/inventory/libfake-nvml.so"
echo "== vcuda-mem (libvcuda memory hooks and start cost; emulator + stub driver)"
"$build/bench/vcuda-mem" --build "$build"
if [ -x "$build/bench/bench-grpc" ]; then
    echo "== bench-grpc (our client -> our server, unix socket)"
    "$build/bench/bench-grpc"
fi
echo "== acceld (8 emulated GPUs: Allocate, GetPreferredAllocation, XID-to-wire, peak RSS)"
bash "$(dirname "$0")/acceld.sh" "$build"
echo "== acceld-idle (8 emulated GPUs, nothing happening: CPU and wakeups per second, pGPU, vGPU, MPS; ~3.5 min)"
bash "$(dirname "$0")/acceld-idle.sh" "$build" 60
echo "== vcuda-compute (libvcuda compute share on the emulator; BENCH_QUICK=1 for --quick)"
# Compute share (libvcuda pacing) on the emulator: ~8 min in full, ~2 min with BENCH_QUICK=1.
"$build/bench/vcuda-compute" --build "$build" ${BENCH_QUICK:+--quick}

if [ -x "$build/bench/bench-emu-cuda" ]; then
    echo "== bench-emu-cuda (emulated libcuda.so.1, one process)"
    LD_LIBRARY_PATH="$build/src/emu" "$build/bench/bench-emu-cuda"
fi
echo "== emu-timeslice (submit cost beside another process's pending work: time slicing)"
"$build/bench/emu-timeslice" 2000 200
"$build/bench/emu-timeslice" 2000 2000
echo "== emu-xid-latency (src/emu; XID inject -> nvmlEventSetWait_v2 wake, across processes)"
LD_LIBRARY_PATH="$build/src/emu" "$build/bench/emu-xid-latency" 2000
echo "== exporter-slow (/metrics scrapes under 80 slow clients; ~1.5 min)"
/usr/bin/python3 "$(dirname "$0")/exporter-slow.py" "$build"
echo "== mps-sharing (time-slicing vs MPS on the emulator: its model, not a GPU's)"
/usr/bin/python3 "$(dirname "$0")/mps-sharing.py" "$build"
