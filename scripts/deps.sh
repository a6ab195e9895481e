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
    # tests/helm reads the chart's renderings, tests/exporter its config files
    python3-yaml
    # the emulated libcuda dlopens these to read nvcc's compressed fatbins
    libzstd1 liblz4-1
    # make image / test-image / image-test (scripts/image.sh, tests/image): buildah builds the
    # Containerfile offline from a base debootstrap makes; podman loads the archive back;
    # objdump (binutils) reads libvcuda's symbol versions (test vcuda-glibc)
    buildah debootstrap podman curl binutils
    # the test cluster (make cluster, docs/e2e.md): the OCI runtime and CNI plugins, the node's
    # namespaces and network, its certificates, the static libc for the pause program and
    # the static busybox of the smoke test's image (Go builds the rest: scripts/cluster/build.sh)
    runc containernetworking-plugins iproute2 iptables util-linux openssl libc6-dev busybox-static
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
# (resource.k8s.io/v1, which tests/dra validates against, came with kubernetes-models 5;
# prometheus-operator's models check the chart's ServiceMonitor and PrometheusRule)
if { [ ! -d "$k8s_dir/node_modules/kubernetes-models/resource.k8s.io/v1" ] ||
     [ ! -d "$k8s_dir/node_modules/@kubernetes-models/prometheus-operator" ]; } &&
   command -v npm >/dev/null; then
    if ! timeout 300 npm install --prefix "$k8s_dir" --no-audit --no-fund --no-package-lock \
            --loglevel=error >&2; then
        echo "deps.sh: npm install of kubernetes-models failed (registry unreachable?):" \
             "the k8s-validate test will be skipped" >&2
    fi
fi

# NVIDIA's nvcc and CUDA runtime 13.0 (PyPI wheels, pinned in scripts/cuda-wheels.txt) for the
# tests that build programs with nvcc, where /usr/local/cuda holds no CUDA 13. Idempotent.
bash "$(dirname "$0")/cuda-wheels.sh"

# Tools built from the Go module proxy at the versions pinned in scripts/versions.env, each
# cached by version under $ACCEL_TOOLS_CACHE (default /var/cache/accel-tools/NAME-VERSION[-FLAGS]/) and
# linked into /usr/local/bin. Without Go or the proxy, the tests that need them are skipped.
root_dir="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=versions.env
. "$root_dir/scripts/versions.env"
tools_cache=${ACCEL_TOOLS_CACHE:-/var/cache/accel-tools}
go_tool() { # go_tool NAME PACKAGE VERSION [LDFLAGS]
    local name=$1 pkg=$2 version=$3 ldflags=${4:-} dir="$tools_cache/$1-$3"
    # the build flags are part of the cache key
    [ -z "$ldflags" ] || dir=$dir-$(printf '%s' "$ldflags" | sha256sum | cut -c1-8)
    if [ ! -x "$dir/$name" ]; then
        if ! command -v go >/dev/null; then
            echo "deps.sh: go is missing: $name $version not built (its tests will be skipped)" >&2
            return 0
        fi
        echo "deps.sh: building $name $version from the Go module proxy (once; cached in $dir)" >&2
        mkdir -p "$dir"
        if ! GOBIN="$dir" CGO_ENABLED=0 timeout 1800 nice go install -trimpath -ldflags "$ldflags" \
                "$pkg@$version" >&2; then
            echo "deps.sh: go install $pkg@$version failed (module proxy unreachable?):" \
                 "its tests will be skipped" >&2
            return 0
        fi
    fi
    $SUDO ln -sfn "$dir/$name" "/usr/local/bin/$name"
}
SUDO=${SUDO:-}
[ "$(id -u)" -eq 0 ] || SUDO=sudo
# (the -X flags are those of Helm's own Makefile: its version, and the Kubernetes version
# `helm template` assumes without a cluster, else 1.20)
kmaj=${HELM_KUBE_VERSION%%.*} kmin=${HELM_KUBE_VERSION#*.}
go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$kmaj -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kmin \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$kmaj -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kmin"
