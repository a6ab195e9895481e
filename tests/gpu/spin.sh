#!/usr/bin/env bash
# spin.sh — on a machine with an NVIDIA GPU and driver: builds tests/emu/spin.c with gcc (libc
# and libdl only; no Debian -dev packages needed) and runs it against the real libcuda.so.1.
# The PTX spin kernel must take cycles / SM clock within 10 %, as it does on accel-emu.
#
#   tests/gpu/spin.sh [milliseconds]      (default 200)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gcc -std=gnu17 -O2 -Wall -Wextra -Werror -I"$root/src/gpu" -o "$out/spin" "$root/tests/emu/spin.c" -ldl
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
fi
"$out/spin" "${1:-200}"
