#!/usr/bin/env bash
# Packs what tests/gpu/acceld.sh and tests/gpu/dra.sh need onto a GPU machine that has no Debian
# -dev libraries: acceld, accelctl and bench-acceld from a build dir, plus the shared libraries
# they load that a bare machine may lack (nghttp2, protobuf-c, libyaml, jansson; DRA mode's
# libcurl is expected there, as libcurl4), and libvcuda.so and demo/cuda-demo (they link libc
# only). The bundle keeps the build's layout (src/acceld/acceld, ...) and puts the libraries in
# lib/.
#
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, .gpu-bundle)
#   ... then on the GPU machine: ACCEL_GPU_BUNDLE=.gpu-bundle tests/gpu/acceld.sh
set -euo pipefail
build=${1:-build}
out=${2:-.gpu-bundle}
bins=(src/acceld/acceld src/cli/accelctl bench/bench-acceld)
for b in "${bins[@]}"; do
    [ -x "$build/$b" ] || { echo "gpu-bundle: $build/$b is not built (run make build)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/lib"
for b in "${bins[@]}"; do
    mkdir -p "$out/$(dirname "$b")"
    cp "$build/$b" "$out/$b"
    ldd "$build/$b" | awk '/=> \//{print $3}' \
        | grep -E 'libnghttp2|libprotobuf-c|libyaml|libjansson' \
        | while read -r lib; do cp -L "$lib" "$out/lib/"; done
done
for f in src/vcuda/libvcuda.so demo/cuda-demo; do
    [ -e "$build/$f" ] || { echo "gpu-bundle: $build/$f is not built (run make build)" >&2; exit 1; }
    mkdir -p "$out/$(dirname "$f")"
    cp -L "$build/$f" "$out/$f"
done
du -sh "$out" | sed 's/^/gpu-bundle: /'
