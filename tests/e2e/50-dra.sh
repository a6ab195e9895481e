#!/usr/bin/env bash
# Scenario "dra": acceld as the DRA driver gpu.accel.dev, driven by the real scheduler,
# kubelet and API server. The chart's DeviceClasses; acceld's ResourceSlice accepted by the API
# server; a claim for a shared GPU (30 cores, 4 GiB: consumable capacity) allocated by the
# scheduler, prepared by acceld, its container held to the quota and share by libvcuda; two
# such claims on one GPU; one that fits nowhere left Pending with the scheduler's reason; an
# exclusive claim gets a whole GPU; nvidia.com/gpu asked as an extended resource is served by
# the DRA driver (DeviceClass extendedResourceName, no device plugin); XID 79 taints the device
# NoExecute and the real controller evicts the pod using it.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rc=0

ok "the chart installs in DRA mode (GPUs 0-1 shared, 2-3 exclusive) and rolls out" \
    e2e_install -f "$E2E_CI_VALUES/dra-shared-values.yaml" -f "$E2E_VALUES/dra-mixed.yaml" || exit 1
ok "the chart's DeviceClasses gpu.accel.dev (extendedResourceName nvidia.com/gpu) and gpu-share.accel.dev exist" sh -c \
    "'$E2E_CLUSTER/kubectl' get deviceclass gpu-share.accel.dev -o name &&
     '$E2E_CLUSTER/kubectl' get deviceclass gpu.accel.dev -o 'jsonpath={.spec.extendedResourceName}' | grep -qx nvidia.com/gpu" || rc=1
slice() {
    kubectl get resourceslices --field-selector "spec.nodeName=$CL_NODE_NAME,spec.driver=gpu.accel.dev" -o json
}
slice_ok() {
    slice | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
print(len(items), "slice(s)")
devs = {d["name"]: d for s in items for d in s["spec"]["devices"]}
for n, d in sorted(devs.items()):
    print(n, d["attributes"]["sharing"]["string"], "multiple" if d.get("allowMultipleAllocations") else "")
ok = (len(items) == 1 and sorted(devs) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"] and
      [devs[n]["attributes"]["sharing"]["string"] for n in sorted(devs)] == ["vgpu", "vgpu", "exclusive", "exclusive"])
sys.exit(0 if ok else 1)'
}
ok "acceld's ResourceSlice is on the API server: 4 devices, gpu-0/1 shared, gpu-2/3 exclusive" \
    wait_until 30 slice_ok || rc=1

scenario_namespace e2e-dra || {
    echo "not ok - namespace e2e-dra"
    exit 1
}
template() { # NAME CLASS [CAPACITY-REQUESTS]
    kubectl -n "$E2E_NS" apply -f - >/dev/null <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: $1}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: $2
$([ -n "${3:-}" ] && printf '          capacity:\n            requests: %s\n' "$3")
YAML
}
template share30 gpu-share.accel.dev '{memory: 4Gi, cores: "30"}'
template huge gpu-share.accel.dev '{memory: 100Gi, cores: "10"}'
template whole gpu.accel.dev
claim_pod() { # NAME TEMPLATE SCRIPT
    gpu_pod "$1" '{claims: [{name: gpu}]}' "$3" "  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: $2}"
}
# claim_of POD: the claim the pod's template made; claim_device POD: its allocated device
claim_of() { kubectl -n "$E2E_NS" get pod "$1" -o 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}'; }
claim_device() {
    kubectl -n "$E2E_NS" get resourceclaim "$(claim_of "$1")" -o 'jsonpath={.status.allocation.devices.results[0].device}'
}

claim_pod s1 share30 'cuda-demo --seconds 4; echo demo-done; sleep 3600' >/dev/null
ok "a pod with a shared-GPU claim (30 cores, 4 GiB) runs" wait_until 90 pod_phase_is "$E2E_NS" s1 Running || {
    why_pod "$E2E_NS" s1 | sed 's/^/# /'
    exit 1
}
allocated() {
    kubectl -n "$E2E_NS" get resourceclaim "$(claim_of s1)" \
        -o 'jsonpath={.status.allocation.devices.results[0].driver} {.status.allocation.devices.results[0].device} {.status.allocation.devices.results[0].consumedCapacity}{"\n"}' |
        tee /dev/stderr | grep -Eq '^gpu.accel.dev gpu-[01] .*"cores":"30".*"memory":"(4Gi|4294967296)"'
}
ok "the scheduler allocated its claim: a shared device, consumed capacity cores 30 and memory 4Gi" allocated || rc=1
demo_s1() {
    log_has 60 s1 '^demo-done' || return 1
    pod_logs s1
    local share
    share=$(pod_logs s1 | sed -n 's/.* a \([0-9]*\) % share$/\1/p')
    pod_logs s1 | grep -q '^cuMemGetInfo: free [0-9]* MiB of 4096 MiB$' &&
        [ -n "$share" ] && [ "$share" -ge 25 ] && [ "$share" -le 35 ]
}
ok "acceld prepared it: its container sees 4096 MiB and gets a share within 5 points of 30 %" demo_s1 || rc=1

# (a claim made from a template goes when its pod has ended: looked at while s2 runs)
claim_pod s2 share30 'cuda-demo --alloc 256 --seconds 1; echo demo-done; sleep 3600' >/dev/null
same_gpu() {
    pod_runs 90 s2 && log_has 60 s2 '^demo-done' || return 1
    pod_logs s2 | grep '^cuMemGetInfo'
    echo "s1 on $(claim_device s1), s2 on $(claim_device s2)"
    [ "$(claim_device s1)" = "$(claim_device s2)" ]
}
ok "a second such claim shares the same GPU" same_gpu || {
    why_pod "$E2E_NS" s2 | sed 's/^/# /'
    rc=1
}

claim_pod big huge 'true' >/dev/null
pending_why() {
    local phase msg
    phase=$(kubectl -n "$E2E_NS" get pod big -o 'jsonpath={.status.phase}')
    msg=$(kubectl -n "$E2E_NS" get events --field-selector involvedObject.name=big,reason=FailedScheduling \
        -o 'jsonpath={range .items[*]}{.message}{"\n"}{end}')
    echo "phase $phase: $msg"
    [ "$phase" = Pending ] && printf '%s\n' "$msg" | grep -q 'cannot allocate all claims'
}
ok "a claim that fits no GPU (100Gi) stays Pending with the scheduler's reason" wait_until 30 pending_why || rc=1

claim_pod x whole 'ls /dev | grep "^nvidia[0-9]"; sleep 3600' >/dev/null
whole_gpu() {
    pod_runs 90 x || return 1
    log_has 20 x '^nvidia' || return 1
    echo "device $(claim_device x), nodes: $(pod_logs x | tr '\n' ' ')"
    claim_device x | grep -Eq '^gpu-[23]$' && [ "$(pod_logs x | grep -c '^nvidia[0-9]')" = 1 ]
}
ok "an exclusive claim gets a whole GPU (an exclusive device, one device node)" whole_gpu || {
    why_pod "$E2E_NS" x | sed 's/^/# /'
    rc=1
}

# GPU-Manager-style extended resource, served through DRA: nvidia.com/gpu has no device
# plugin on this node, the DeviceClass gpu.accel.dev maps it (KEP-5004)
gpu_pod ext '{limits: {nvidia.com/gpu: 1}}' 'ls /dev | grep "^nvidia[0-9]"' >/dev/null
extended() {
    pod_ends_with 90 "$E2E_NS" ext Succeeded || return 1
    local claim
    claim=$(kubectl -n "$E2E_NS" get pod ext -o 'jsonpath={.status.extendedResourceClaimStatus.resourceClaimName}')
    echo "claim $claim: $(kubectl -n "$E2E_NS" get resourceclaim "$claim" -o 'jsonpath={.status.allocation.devices.results[0].driver}/{.status.allocation.devices.results[0].device}' 2>&1); nodes: $(pod_logs ext | tr '\n' ' ')"
    [ -n "$claim" ] && [ "$(pod_logs ext | grep -c '^nvidia[0-9]')" = 1 ]
}
ok "a pod asking nvidia.com/gpu: 1 is served by the DRA driver (extended resource claim)" extended || {
    why_pod "$E2E_NS" ext | sed 's/^/# /'
    rc=1
}

# XID 79 on the exclusive pod's GPU: acceld taints the device NoExecute, the controller
# evicts the pod, which does not tolerate the taint
dev=$(claim_device x)
tainted() {
    slice | python3 -c '
import json, sys
dev = sys.argv[1]
for s in json.load(sys.stdin)["items"]:
    for d in s["spec"]["devices"]:
        if d["name"] == dev:
            print(dev, d.get("taints"))
            sys.exit(0 if any(t["effect"] == "NoExecute" for t in d.get("taints", [])) else 1)
sys.exit(1)' "$dev"
}
evicted() {
    local p
    p=$(kubectl -n "$E2E_NS" get pod x -o 'jsonpath={.status.phase} {.metadata.deletionTimestamp} {.status.conditions[?(@.type=="DisruptionTarget")].reason}' 2>&1)
    echo "pod x: $p"
    case "$p" in *NotFound* | *DeletionByDeviceTaintManager* | *" 20"*) return 0 ;; esac
    return 1
}
if [ -n "$dev" ]; then
    "$E2E_CLUSTER/emu" xid "${dev#gpu-}" 79 >/dev/null
    ok "XID 79 on GPU ${dev#gpu-}: its device ($dev) is tainted NoExecute in the slice" wait_until 15 tainted || rc=1
    ok "the pod using it is evicted by the device taint controller" wait_until 60 evicted || rc=1
else
    echo "not ok - XID 79 taints the exclusive pod's device # no device (see above)"
    rc=1
fi
exit $rc
