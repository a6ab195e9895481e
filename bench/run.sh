#!/usr/bin/env bash
# Runs every benchmark against a build dir; results go to stdout and are
# copied into docs/benchmarks.md by hand with the date and machine.
set -euo pipefail
build=${1:-build}
# Compute share (libvcuda pacing) on the emulator: ~8 min in full, ~2 min with BENCH_QUICK=1.
"$build/bench/vcuda-compute" --build "$build" ${BENCH_QUICK:+--quick}
