#!/usr/bin/env bash
# nvml-semantics.sh — on a machine with an NVIDIA GPU and driver: builds
# tests/gpu/nvml-semantics.c with gcc (libc and libdl only) and runs it against the real
# libnvidia-ml.so.1. Every case is an NVML behaviour the emulator imitates (return codes,
# buffer-size rules, lookups, events); the same program passes against the emulator in
# `meson test` (emu-nvml-semantics). A failure here means the emulator answers differently
# from the driver: record it in docs/gpu-validation.md and fix src/emu/nvml*.c.
#
#   tests/gpu/nvml-semantics.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gcc -std=gnu17 -O2 -Wall -Wextra -Werror -I"$root/src/gpu" -o "$out/nvml-semantics" \
    "$root/tests/gpu/nvml-semantics.c" -ldl
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
fi
"$out/nvml-semantics"
