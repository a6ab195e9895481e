#!/usr/bin/env bash
# Scenario "vgpu": GPU-Manager's resources (tencent.com/vcuda-core, vcuda-memory) served by
# acceld, quotas enforced by libvcuda (installed on the node by the chart's init container,
# given to containers through /etc/ld.so.preload) and checked from the host. A pod written for
# GPU-Manager (30 cores, 16 memory units) sees 4096 MiB in all and gets a compute share
# within 5 points of 30 %; a 70-core pod lands on the same GPU; a pod that fits no single GPU
# fails with acceld's message in its events; a tenant that garbles its usage region gets
# acceld's Warning Event (written through the real API server).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rc=0

ok "the chart installs in vGPU mode and rolls out" e2e_install -f "$E2E_CI_VALUES/vgpu-values.yaml" || exit 1
# per GPU 100 cores and NVML's total in 256 MiB units (docs/vgpu.md)
units=$("$E2E_CLUSTER/emu" status --json | python3 -c '
import json, sys
print(sum(g["memory_total_bytes"] // (256 << 20) for g in json.load(sys.stdin)["gpus"]))')
ok "allocatable tencent.com/vcuda-core = $((CL_GPUS * 100))" \
    wait_until 30 allocatable_is tencent.com/vcuda-core $((CL_GPUS * 100)) || rc=1
ok "allocatable tencent.com/vcuda-memory = $units (256 MiB units of every GPU)" \
    wait_until 30 allocatable_is tencent.com/vcuda-memory "$units" || rc=1

scenario_namespace e2e-vgpu || {
    echo "not ok - namespace e2e-vgpu"
    exit 1
}

# GPU-Manager's pod spec, unchanged: 30 % of a GPU and 16 x 256 MiB
gpu_pod a '{limits: {tencent.com/vcuda-core: 30, tencent.com/vcuda-memory: 16}}' \
    'cuda-demo --seconds 4; echo demo-done; sleep 3600' >/dev/null
ok "a GPU-Manager pod (vcuda-core 30, vcuda-memory 16) runs" wait_until 90 pod_phase_is "$E2E_NS" a Running || {
    why_pod "$E2E_NS" a | sed 's/^/# /'
    exit 1
}
demo_a() {
    log_has 60 a '^demo-done' || return 1
    pod_logs a
    pod_logs a | grep -q '^cuMemGetInfo: free [0-9]* MiB of 4096 MiB$'
}
ok "its CUDA program sees 4096 MiB in all" demo_a || rc=1
share_a() {
    local s
    s=$(pod_logs a | sed -n 's/.* a \([0-9]*\) % share$/\1/p')
    echo "share: ${s:-none} % (want 30 +- 5)"
    [ -n "$s" ] && [ "$s" -ge 25 ] && [ "$s" -le 35 ]
}
ok "its compute share is within 5 points of 30 %" share_a || rc=1

# acceld's choice is in the pod's annotation accel.dev/vgpu-<container> (written by acceld
# through the API server)
gpu_of() { kubectl -n "$E2E_NS" get pod "$1" -o 'jsonpath={.metadata.annotations.accel\.dev/vgpu-main}'; }
gpu_pod b '{limits: {tencent.com/vcuda-core: 70, tencent.com/vcuda-memory: 16}}' \
    'cuda-demo --alloc 512 --seconds 1' >/dev/null
beside() {
    pod_ends_with 90 "$E2E_NS" b Succeeded || return 1
    echo "a on $(gpu_of a), b on $(gpu_of b)"
    [ -n "$(gpu_of a)" ] && [ "$(gpu_of a)" = "$(gpu_of b)" ]
}
ok "a 70-core pod lands beside it, on the same GPU (binpack)" beside || {
    why_pod "$E2E_NS" b | sed 's/^/# /'
    rc=1
}

# more memory than any one GPU has (100 GiB), though the node has it in all: the scheduler
# admits it, acceld's Allocate refuses it, saying why
gpu_pod c '{limits: {tencent.com/vcuda-core: 50, tencent.com/vcuda-memory: 400}}' 'true' >/dev/null
refused() {
    wait_until 60 pod_ended "$E2E_NS" c || return 1
    kubectl -n "$E2E_NS" get pod c -o 'jsonpath={.status.phase} {.status.reason}: {.status.message}{"\n"}'
    kubectl -n "$E2E_NS" get events --field-selector involvedObject.name=c -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' |
        tee "$tmp/events" | grep -q 'no healthy GPU has that free'
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kubectl delete namespace "$E2E_NS" --wait=true --timeout=60s >/dev/null 2>&1' EXIT
ok "a pod that fits no single GPU fails, acceld's message in its events" refused || {
    why_pod "$E2E_NS" c | sed 's/^/# /'
    rc=1
}

# A hostile tenant: pod a's container overwrites its usage region (its only writable mount
# from acceld) while its CUDA process runs; acceld's host-side check (every 10 s) reports it
# as a Warning Event on the pod, posted through the real API server
gpu_pod d '{limits: {tencent.com/vcuda-core: 10, tencent.com/vcuda-memory: 4}}' \
    'sleep 3600 | emu-hold 0 256 & sleep 2; head -c 4096 /dev/urandom > /var/run/vcuda/usage; echo garbled; sleep 3600' >/dev/null
event_from_acceld() {
    local out
    out=$(kubectl -n "$E2E_NS" get events --field-selector involvedObject.name=d \
        -o 'jsonpath={range .items[*]}{.source.component}/{.reportingComponent} {.type} {.reason}: {.message}{"\n"}{end}')
    printf '%s\n' "$out"
    printf '%s\n' "$out" | grep -q '^acceld/.* Warning VGPU'
}
ok "a pod that garbles its usage region gets acceld's Warning Event (host-side check)" \
    wait_until 45 event_from_acceld || {
    why_pod "$E2E_NS" d | sed 's/^/# /'
    rc=1
}

# Shares go with their pods: once the pods are deleted, acceld hands nothing out for them
# (issue 23, item 1: without it a vGPU node fills up with the shares of deleted pods)
kubectl -n "$E2E_NS" delete pod a b c d --wait=true --timeout=60s >/dev/null 2>&1
all_free() {
    local out
    out=$(kubectl -n kube-system exec "$(acceld_pod)" -c acceld -- accelctl vgpu 2>&1) || {
        printf '%s\n' "$out"
        return 1
    }
    printf '%s\n' "$out" | grep '^GPU'
    ! printf '%s\n' "$out" | grep '^GPU' | grep -vq 'cores 0/100 handed out'
}
ok "the shares of deleted pods are freed (accelctl vgpu: no core handed out)" wait_until 30 all_free || rc=1
exit $rc
