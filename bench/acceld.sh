#!/usr/bin/env bash
# acceld benchmark on an emulated 8-GPU node (NUMA 0,0,0,0,1,1,1,1, NVLink
# pairs): Allocate / GetPreferredAllocation latency, XID-to-wire latency,
# acceld's peak RSS, and the worst cases (requests naming WORST unknown IDs,
# and as many as fit in acceld's 1 MiB limit; another client's latency meanwhile; SIGTERM
# under that load), measured by bench-acceld from the plugin socket.
#   bash bench/acceld.sh [BUILD_DIR] [CALLS] [XID_SAMPLES] [WORST]
# (BUILD_DIR build-san: the same under ASan+UBSan.)
# ACCELD_WRAPPER runs acceld under a tool (bench/acceld-allocs.sh uses valgrind).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
calls=${2:-5000}
xids=${3:-40}
worst=${4:-10000}
emu=$build/src/emu/accel-emu
for f in "$emu" "$build/src/emu/libnvidia-ml.so.1" "$build/src/acceld/acceld" \
         "$build/bench/bench-acceld"; do
    [ -e "$f" ] || { echo "bench/acceld.sh: $f not built" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/acceld-bench-XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
export ACCEL_EMU_STATE=$tmp/emu.state
export ACCEL_NVML_LIBRARY=$build/src/emu/libnvidia-ml.so.1
"$emu" init --gpus 8 --numa 0,0,0,0,1,1,1,1 --nvlink pairs >/dev/null
mkdir -p "$tmp/dp"
# logLevel info (the default): every allocation writes its log line, as in production
${ACCELD_WRAPPER:-} "$build/src/acceld/acceld" --no-register --device-plugin-dir "$tmp/dp" \
    --sysfs-root "$ACCEL_EMU_STATE.d/sysfs" --dev-root "$ACCEL_EMU_STATE.d/dev" \
    --state-dir "$tmp/state" --recover-after 200ms 2>"$tmp/acceld.log" &
pid=$!
sock=$tmp/dp/accel-nvidia.com-gpu.sock
for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.05; done
echo "acceld: $(nproc) CPUs, $(uname -r); calls=$calls xid-samples=$xids worst=$worst"
"$build/bench/bench-acceld" --socket "$sock" --calls "$calls" --xid-samples "$xids" \
    --emu "$emu" --pid "$pid" --worst "$worst"
# the worst-case rows end with a SIGTERM: acceld may be gone already
kill "$pid" 2>/dev/null || true
wait "$pid" || true
pid=
