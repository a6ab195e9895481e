#!/usr/bin/env bash
# Installs every Debian 12 package that accel's build, tests and demo need (and, through
# scripts/cuda-wheels.sh, NVIDIA's CUDA 13.0 nvcc and runtime from PyPI where /usr/local/cuda lacks them).
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
    # tests/exporter: the status page loaded in headless Chromium
    chromium chromium-driver
    # tests/cli: accelctl top driven in a real terminal
    tmux
    # tests/exporter: reads deploy/accel-exporter.yaml
    python3-yaml
    # the emulated libcuda dlopens these to read nvcc's compressed fatbins
    libzstd1 liblz4-1
)

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
# node and npm run the Kubernetes schema validation (tests/kube/k8s-validate); a machine with
# another node install (e.g. nodesource's, which bundles npm) keeps it
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)

if [ ${#missing[@]} -ne 0 ]; then
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
fi

# kubernetes-models, pinned in tests/kube/k8s-validate/package.json, into that folder's
# node_modules (not committed). Without the npm registry the validation test skips (77).
k8s_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/kube/k8s-validate"
# (resource.k8s.io/v1, which tests/dra validates against, came with kubernetes-models 5)
if [ ! -d "$k8s_dir/node_modules/kubernetes-models/resource.k8s.io/v1" ] && command -v npm >/dev/null; then
    if ! timeout 300 npm install --prefix "$k8s_dir" --no-audit --no-fund --no-package-lock \
            --loglevel=error >&2; then
        echo "deps.sh: npm install of kubernetes-models failed (registry unreachable?):" \
             "the k8s-validate test will be skipped" >&2
    fi
fi

# NVIDIA's nvcc and CUDA runtime 13.0 (PyPI wheels, pinned in scripts/cuda-wheels.txt) for the
# tests that build programs with nvcc, where /usr/local/cuda holds no CUDA 13. Idempotent.
bash "$(dirname "$0")/cuda-wheels.sh"
