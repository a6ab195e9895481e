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
