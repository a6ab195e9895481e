#!/usr/bin/env bash
# make demo: a 4-GPU emulated node and what accel sees on it.
set -euo pipefail
build=${1:-build}
echo "demo: filled in as components land"
