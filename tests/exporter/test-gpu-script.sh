#!/usr/bin/env bash
# test-gpu-script.sh — runs tests/gpu/exporter-util.sh's dry run on accel-emu, so the script
# that users with a GPU run (its gcc-only builds of spin and proc-util, the exporter's own
# utilization code) cannot rot unnoticed where CI has no GPU. Prints TAP: one case per
# PASS/FAIL line of the script, plus one for its exit status. Arguments: the accel-emu binary
# and its library directory.
set -uo pipefail
emu=$1 libdir=$2
root=${ACCEL_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$emu" --state "$tmp/gpus" init --gpus 1 >/dev/null; then
    echo "1..1"; echo "not ok 1 - accel-emu init"; exit 1
fi
out=$(ACCEL_EMU_STATE=$tmp/gpus ACCEL_NVML_LIBRARY=$libdir/libnvidia-ml.so.1 \
      LD_LIBRARY_PATH=$libdir bash "$root/tests/gpu/exporter-util.sh" 2>&1)
rc=$?
n=0 failed=0
cases=()
while IFS= read -r line; do
    case "$line" in
    PASS\ *) n=$((n + 1)); cases+=("ok $n - ${line#PASS }") ;;
    FAIL*) n=$((n + 1)); failed=1; cases+=("not ok $n - ${line#FAIL }") ;;
    esac
done <<< "$out"
n=$((n + 1))
echo "1..$n"
printf '%s\n' "${cases[@]}"
if [ "$rc" -eq 0 ] && [ "$failed" -eq 0 ] && [ "$n" -gt 1 ]; then
    echo "ok $n - exporter-util.sh dry run exits 0"
else
    echo "not ok $n - exporter-util.sh dry run: exit $rc"
    echo "$out" | sed 's/^/# /'
    exit 1
fi
