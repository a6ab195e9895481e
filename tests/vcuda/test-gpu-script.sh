#!/usr/bin/env bash
# test-gpu-script.sh — runs a tests/gpu/ script's dry run on accel-emu, so the scripts that users
# with a GPU run cannot rot unnoticed where CI has no GPU: vcuda-memory.sh (its gcc-only build of
# libvcuda, its cudart program, its driver-API cases; the default) and dra.sh (acceld --mode dra
# against the emulator, the fake API server and the grpcio kubelet). Prints TAP: one case per
# PASS/FAIL/SKIP line of the script, plus one for its exit status; the script's exit 77 (a tool
# missing here) skips the whole test.
# Arguments: the accel-emu binary, its library directory, and optionally the script's name.
set -uo pipefail
emu=$1 libdir=$2 script=${3:-vcuda-memory.sh}
root=${ACCEL_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$emu" --state "$tmp/gpus" init --gpus 1 >/dev/null; then
    echo "1..1"; echo "not ok 1 - accel-emu init"; exit 1
fi
# Pools reserve in 32 MiB chunks, as an H200's did (emulator-cuda.md, "Pools"): the real-GPU
# paths of the driver-API cases meet a pool that takes more than it is asked for. nvcc: the
# CUDA 13 toolkit meson found (ACCEL_CUDA_ROOT, tests/meson.build).
out=$(PATH=${ACCEL_CUDA_ROOT:+$ACCEL_CUDA_ROOT/bin:}$PATH ACCEL_EMU_STATE=$tmp/gpus LD_LIBRARY_PATH=$libdir \
      ACCEL_EMU_POOL_GRANULARITY=32Mi bash "$root/tests/gpu/$script" 2>&1)
rc=$?
if [ "$rc" -eq 77 ]; then
    echo "1..0 # SKIP $(grep -m1 '^SKIP' <<< "$out" | sed 's/^SKIP:* *//')"
    exit 77
fi
n=0 failed=0
cases=()
while IFS= read -r line; do
    case "$line" in
    PASS\ *) n=$((n + 1)); cases+=("ok $n - ${line#PASS }") ;;
    FAIL*) n=$((n + 1)); failed=1; cases+=("not ok $n - ${line#FAIL }") ;;
    SKIP\ *) n=$((n + 1)); cases+=("ok $n - ${line#SKIP } # SKIP") ;;
    esac
done <<< "$out"
n=$((n + 1))
echo "1..$n"
printf '%s\n' "${cases[@]}"
if [ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]; then
    echo "ok $n - $script dry run exits 0"
else
    echo "not ok $n - $script dry run exits $rc"
    printf '# %s\n' "${out//$'\n'/$'\n'# }"
    exit 1
fi
