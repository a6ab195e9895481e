#!/usr/bin/env bash
# tests/gpu/dra.sh — the DRA driver (acceld --mode dra, docs/dra.md) on a real NVIDIA node, with
# NVML from the system, the test fake API server (tests/kube/fake-apiserver.py) and the
# python3-grpcio kubelet of tests/dra (no cluster needed). Checks:
#   1. registration through the plugin registration socket (GetInfo, NotifyRegistrationStatus);
#   2. the node's ResourceSlice: one device per GPU whose UUID, product name, memory, compute
#      capability and driver version match nvidia-smi --query-gpu; every slice written valid
#      resource.k8s.io/v1 per kubernetes-models (tests/kube/k8s-validate; SKIP without node or
#      its node_modules);
#   3. a shared claim of 30 % + 4 GiB of gpu-0 prepared through NodePrepareResources; its CDI
#      edits applied in a private mount namespace (unshare -m; root needed, else SKIP): an
#      unmodified CUDA program (demo/cuda-demo, libvcuda preloaded by the spec's
#      /etc/ld.so.preload) sees 4096 MiB, is refused past it, and gets ~30 % of the GPU's time
#      (loose bound 0.15-0.45 of the same program alone; the measured figure is printed);
#      unprepared: spec, config dir and checkpoint entry gone;
#   4. with nvidia-cuda-mps-control on PATH: acceld restarted with gpu-0 an MPS share
#      (dra.gpuSharing 0=mps), a claim of 30 % + 4 GiB gets its own control daemon (pipe and log
#      dirs under this run's temp state dir) with those defaults, and its client is refused
#      memory past 4 GiB, also when it raises CUDA_MPS_PINNED_DEVICE_MEM_LIMIT itself;
#      unprepared: the daemon stopped, its dirs gone.
# It never changes the GPU's settings (no nvidia-smi -c / -pm / -r or any other write); an MPS
# daemon left up by a failed check is told to quit through its own pipe dir at the end.
#
# Needs: the project built (make build: acceld with DRA mode, libvcuda, demo/cuda-demo; or a
# bundle from scripts/gpu-bundle.sh named by ACCEL_GPU_BUNDLE), /usr/bin/python3 with
# python3-grpcio and python3-protobuf, protoc, openssl. Exit 0 = all ran checks passed,
# 1 = a check failed, 77 = no GPU or a tool missing.
#
#   tests/gpu/dra.sh [BUILD_DIR]
# BUILD_DIR defaults to $ACCEL_BUILD_ROOT, else build/; when that has no DRA-mode acceld and the
# agent's -dev libraries are here, the script builds what it runs in build-gpu-agent/ (as
# acceld.sh does).
#
# Dry run without a GPU (make check runs it: the meson test gpu-script-dra):
#   build/src/emu/accel-emu --state /tmp/gpus init --gpus 1
#   ACCEL_EMU_STATE=/tmp/gpus LD_LIBRARY_PATH=build/src/emu tests/gpu/dra.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-${ACCEL_BUILD_ROOT:-$root/build}}
[ -d "$build" ] && build=$(cd "$build" && pwd)
skip() { echo "SKIP $*"; exit 77; }
dry=0
if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
    [ -n "${ACCEL_EMU_STATE:-}" ] ||
        skip "no NVIDIA GPU here (nvidia-smi -L failed); see the header for a dry run"
    dry=1
    echo "DRY RUN on accel-emu ($ACCEL_EMU_STATE): not a GPU validation, do not record"
fi
if [ -n "${ACCEL_GPU_BUNDLE:-}" ]; then
    build=$(cd "$ACCEL_GPU_BUNDLE" && pwd)
    export LD_LIBRARY_PATH=$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if [ -z "${ACCEL_GPU_BUNDLE:-}" ] && [ -z "${1:-}" ] && [ ! -f "$build/src/dra/libaccel-dra-acceld.a" ] &&
   pkg-config --exists libnghttp2 libprotobuf-c yaml-0.1 jansson libcurl 2>/dev/null; then
    # not built here yet, but the agent's -dev libraries are: build what this script runs, as
    # acceld.sh does
    build=$root/build-gpu-agent
    if [ ! -f "$build/build.ninja" ]; then
        meson setup "$build" -Dagent=enabled >/dev/null || { echo "FAIL meson setup"; exit 1; }
    fi
    meson compile -C "$build" src/acceld/acceld src/vcuda/vcuda demo/cuda-demo >/dev/null \
        || { echo "FAIL build"; exit 1; }
fi
for f in src/acceld/acceld src/vcuda/libvcuda.so demo/cuda-demo; do
    [ -e "$build/$f" ] ||
        skip "$build/$f is not built (make build, or carry a bundle: scripts/gpu-bundle.sh)"
done
if [ -z "${ACCEL_GPU_BUNDLE:-}" ] && [ ! -f "$build/src/dra/libaccel-dra-acceld.a" ]; then
    skip "acceld is built without DRA mode (libcurl's -dev package missing)"
fi
/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null \
    || skip "/usr/bin/python3 lacks python3-grpcio / python3-protobuf"
command -v protoc >/dev/null || skip "protoc is not installed"
command -v openssl >/dev/null ||
    skip "openssl is not installed (the fake API server makes its certificates with it)"

gpu=unknown driver=unknown cuda=unknown
if [ $dry = 0 ]; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
    cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
fi
echo "GPU: $gpu, driver $driver, CUDA $cuda"
/usr/bin/python3 "$root/tests/gpu/dra.py" "$build" "$dry"
rc=$?
[ $rc = 77 ] && exit 77
echo
echo "record: | dra.sh | DRA driver: registration, slice vs nvidia-smi, 30 % + 4 GiB claim" \
     "(libvcuda), MPS claim |" \
     "$(date -u +%F) | $gpu | $driver | $cuda | $([ $rc = 0 ] && echo pass || echo FAIL) |"
exit $rc
