#!/usr/bin/env bash
# Runs every benchmark against a build dir; results go to stdout and are
# copied into docs/benchmarks.md by hand with the date and machine.
set -euo pipefail
build=${1:-build}
echo "bench: no benchmarks yet"
if [ -x "$build/bench/bench-grpc" ]; then
    echo "== bench-grpc (our client -> our server, unix socket)"
    "$build/bench/bench-grpc"
fi
