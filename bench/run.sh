#!/usr/bin/env bash
# Runs every benchmark against a build dir; results go to stdout and are
# copied into docs/benchmarks.md by hand with the date and machine.
set -euo pipefail
build=${1:-build}
echo "bench: no benchmarks yet"
bash "$(dirname "$0")/acceld.sh" "$build"
