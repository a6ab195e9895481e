#!/usr/bin/env bash
# mig.sh — on a machine with NVIDIA GPUs: builds tests/gpu/mig-semantics.c with gcc (libc and
# libdl only, with the emulator's MIG tables, src/emu/mig-profiles.c) and runs it against the real
# libnvidia-ml.so.1 and libcuda.so.1. Read-only on every GPU (mode, profiles, placements, the
# MIG devices there are, compared with the emulator's tables); on a GPU that is ALREADY in MIG
# mode it creates one small GPU instance and its compute instance where there is room, checks
# them (IDs, MIG device, CUDA on it, in-use and no-room errors) and destroys them again. It never
# changes a card's MIG mode and never touches an instance it did not create; creating needs root
# (else SKIP). Exit 77 when no GPU here supports MIG. A FAIL means the emulator's MIG model
# (docs/emulator.md, "MIG") differs from the driver: record it in docs/gpu-validation.md and fix
# src/emu/mig-profiles.c or src/emu/state-mig.c.
#
# Then, with acceld built (ACCELD, default build/src/acceld/acceld) and a GPU in MIG mode, it
# runs acceld --mig-strategy mixed --no-register for a moment (a temporary plugin and state
# dir: read-only) and checks that each profile's resource (nvidia.com/mig-<profile>) has as
# many MIG devices as `nvidia-smi -L` lists (docs/mig.md).
#
#   tests/gpu/mig.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gcc -std=gnu17 -O2 -Wall -Wextra -Werror -I"$root/src/gpu" -I"$root/src/emu" \
    -o "$out/mig-semantics" "$root/tests/gpu/mig-semantics.c" "$root/src/emu/mig-profiles.c" -ldl \
    || { echo "FAIL build mig-semantics"; exit 1; }
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,mig.mode.current,mig.mode.pending \
        --format=csv,noheader 2>/dev/null | sed 's/^/record: /'
fi
"$out/mig-semantics"
rc=$?
acceld=${ACCELD:-$root/build/src/acceld/acceld}
if [ -x "$acceld" ] && command -v nvidia-smi >/dev/null &&
   nvidia-smi -L 2>/dev/null | grep -q "^  MIG "; then
    mkdir "$out/dp"
    timeout -s TERM 5 "$acceld" --mig-strategy mixed --no-register --device-plugin-dir \
        "$out/dp" --state-dir "$out/state" >"$out/log" 2>&1
    sed 's/^/record: acceld: /' "$out/log"
    for p in $(nvidia-smi -L | sed -n 's/^  MIG \([^ ]*\) .*/\1/p' | sort -u); do
        case $p in *c.*) continue ;; esac # a compute instance smaller than its GPU instance
        want=$(nvidia-smi -L | grep -c "^  MIG $p ")
        res="nvidia.com/mig-$(echo "$p" | tr + .)"
        if grep -q "MIG (migStrategy mixed): $want MIG device(s) as $res\$" "$out/log"; then
            echo "PASS acceld serves $want $p MIG device(s) as $res"
        else
            echo "FAIL acceld does not serve the $want $p MIG device(s) as $res"
            rc=1
        fi
    done
else
    echo "record: acceld not run (no acceld at $acceld, or no MIG device here)"
fi
exit $rc
