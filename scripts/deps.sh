#!/usr/bin/env bash
# Installs every Debian 12 package that accel's build, tests and demo need.
# Idempotent: packages already present are not touched; apt lists are fetched
# only when missing or when a package cannot be found.
set -euo pipefail

pkgs=(
    # build
    make meson ninja-build gcc clang pkg-config
    # libraries (DESIGN.md: real parts from Debian)
    libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler
    libmicrohttpd-dev libyaml-dev libjansson-dev libcurl4-openssl-dev
    # sanitizers and fuzzers (clang's runtime for libFuzzer)
    libclang-rt-14-dev
    # independent gRPC peer for interop tests
    python3 python3-grpcio python3-protobuf protobuf-compiler
    # accel-exporter tests: promtool and a real Prometheus scraping it
    prometheus
)

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deps.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial)" ]; then
    $SUDO apt-get update -q
fi
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
