#!/usr/bin/env bash
# Scenario "sharing": NVIDIA's sharing config format through the chart (docs/mps.md).
# Time-slicing: every GPU advertised as 4 replicas of nvidia.com/gpu, and a pod given one.
# MPS: the same replicas served by MPS control daemons acceld runs in its pod; a pod given one
# replica (a quarter of a GPU) gets no more pinned memory than its cap, also when its own
# CUDA_MPS_PINNED_DEVICE_MEM_LIMIT asks for more.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rc=0
replicas=4

ok "the chart installs with time-slicing ($replicas replicas per GPU) and rolls out" \
    e2e_install -f "$E2E_CI_VALUES/time-slicing-values.yaml" -f "$E2E_VALUES/cdi.yaml" || exit 1
ok "allocatable nvidia.com/gpu = $((CL_GPUS * replicas)) replicas" \
    wait_until 30 allocatable_is nvidia.com/gpu $((CL_GPUS * replicas)) || rc=1

scenario_namespace e2e-sharing || {
    echo "not ok - namespace e2e-sharing"
    exit 1
}
gpu_pod ts '{limits: {nvidia.com/gpu: 1}}' 'ls /dev | grep -c "^nvidia[0-9]"; cuda-demo --alloc 1024 --seconds 1' >/dev/null
one_gpu_cuda() {
    pod_ends_with 90 "$E2E_NS" ts Succeeded || return 1
    pod_logs ts
    [ "$(pod_logs ts | head -n 1)" = 1 ] && pod_logs ts | grep -q '^allocated 1024 MiB'
}
ok "a pod given one time-sliced replica runs CUDA on one GPU" one_gpu_cuda || {
    why_pod "$E2E_NS" ts | sed 's/^/# /'
    rc=1
}

ok "the chart upgrades to MPS ($replicas replicas per GPU, daemons run by acceld) and rolls out" \
    e2e_install -f "$E2E_CI_VALUES/mps-values.yaml" -f "$E2E_VALUES/cdi.yaml" || exit 1
ok "allocatable nvidia.com/gpu = $((CL_GPUS * replicas)) MPS replicas" \
    wait_until 60 allocatable_is nvidia.com/gpu $((CL_GPUS * replicas)) || rc=1

# A quarter of an emulated H100: the daemon's default pinned limit is floor(memory / 4). The
# client asks for 10 GiB (fits), 12 GiB more (past the cap: refused), then 4 GiB (fits), with
# an env limit of 64 GiB that only could lower its server's (MPS guide, environment variables).
gpu_pod mps '{limits: {nvidia.com/gpu: 1}}' 'echo "pipe $CUDA_MPS_PIPE_DIRECTORY"
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=65536M emu-mps-client 0 10240 12288 4096' >/dev/null
capped() {
    pod_ends_with 90 "$E2E_NS" mps Succeeded || return 1
    local out
    out=$(pod_logs mps)
    printf '%s\n' "$out"
    printf '%s\n' "$out" | grep -q '^pipe /' &&
        [ "$(printf '%s\n' "$out" | grep -E '^(ok|error)' | tr '\n' ' ')" = "ok error 2 ok " ]
}
ok "an MPS pod's program gets no more pinned memory than its cap (a quarter of the GPU), whatever its env says" \
    capped || {
    why_pod "$E2E_NS" mps | sed 's/^/# /'
    rc=1
}
exit $rc
