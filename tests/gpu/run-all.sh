#!/usr/bin/env bash
# Runs every real-GPU script in tests/gpu/ in one go — meant for a short lease of a GPU machine,
# where each start costs minutes — and prints one summary line per script plus the facts to
# record in docs/gpu-validation.md. Each script's full output goes to $OUT/<script>.log when OUT
# is set (the device tool's output folder), else to a temp dir.
#
#   tests/gpu/run-all.sh [script ...]          (default: all of them)
#
# acceld.sh and dra.sh need the agent's -dev libraries; on a GPU machine without them, carry a
# bundle made here by scripts/gpu-bundle.sh and set ACCEL_GPU_BUNDLE to its path (dra.sh also
# needs /usr/bin/python3 with python3-grpcio and python3-protobuf, protoc and openssl there).
# ACCEL_GPU_SCRIPT_TIMEOUT=SECONDS stops a script that runs longer (FAIL, exit 124), so one hang
# does not spend the rest of a lease.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=${OUT:-$(mktemp -d /tmp/accel-gpu-XXXXXX)}
mkdir -p "$logs"
scripts=("$@")
[ ${#scripts[@]} -gt 0 ] || scripts=(spin.sh timeslice.sh inventory.sh nvml-semantics.sh mig.sh vfio.sh vcuda-memory.sh vcuda-compute.sh acceld.sh exporter-util.sh dra.sh mps-nonroot.sh)

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    echo "# date: $(date -u +%Y-%m-%d)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | sed 's/^/# GPU, driver: /'
    nvidia-smi | grep -o 'CUDA Version: [0-9.]*' | head -1 | sed 's/^/# /'
    command -v nvcc >/dev/null && nvcc --version | tail -1 | sed 's/^/# nvcc: /'
else
    echo "no NVIDIA GPU here (nvidia-smi -L failed): nothing to run"
    exit 77
fi

failed=0
for s in "${scripts[@]}"; do
    start=$(date +%s)
    if [ -n "${ACCEL_GPU_SCRIPT_TIMEOUT:-}" ]; then
        timeout -k 5 "$ACCEL_GPU_SCRIPT_TIMEOUT" bash "$here/$s" >"$logs/$s.log" 2>&1
    else
        bash "$here/$s" >"$logs/$s.log" 2>&1
    fi
    rc=$?
    [ $rc = 124 ] && echo "FAIL: stopped after ${ACCEL_GPU_SCRIPT_TIMEOUT}s (ACCEL_GPU_SCRIPT_TIMEOUT)" >>"$logs/$s.log"
    secs=$(( $(date +%s) - start ))
    case $rc in
        0) verdict=PASS ;;
        77) verdict=SKIP ;;
        *) verdict=FAIL; failed=1 ;;
    esac
    printf '%-20s %s (exit %d, %ds; %d PASS, %d FAIL lines) log: %s\n' "$s" "$verdict" "$rc" \
        "$secs" "$(grep -c '^PASS' "$logs/$s.log")" "$(grep -c '^FAIL' "$logs/$s.log")" \
        "$logs/$s.log"
    grep -E '^(FAIL|record:)' "$logs/$s.log" | sed 's/^/    /'
done
exit $failed
