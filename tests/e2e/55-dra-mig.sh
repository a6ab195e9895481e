#!/usr/bin/env bash
# Scenario "dra-mig": MIG partitions through DRA (issue 24; dra.mig, docs/mig.md "DRA
# partitions"). GPU 0 of the node is put in MIG mode (as an operator does: nvidia-smi -mig 1,
# then a reset); acceld publishes one partitionable device per placement of each profile with
# the GPU's shared counters; a claim asking a 1g.10gb is allocated by the real scheduler, acceld
# creates the instance when the kubelet prepares it, the container is given that MIG device
# (NVIDIA_VISIBLE_DEVICES=MIG-<uuid>) and CUDA there sees a 1g.10gb's memory; the instance is
# destroyed once the pod is gone. GPU 0 leaves MIG mode when the scenario ends.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rc=0

mig_off() {
    "$E2E_CLUSTER/emu" set 0 mig=off >/dev/null 2>&1
    "$E2E_CLUSTER/emu" reset 0 >/dev/null 2>&1
}
ok "GPU 0 in MIG mode (accel-emu set 0 mig=on, then a GPU reset)" sh -c \
    "'$E2E_CLUSTER/emu' set 0 mig=on && '$E2E_CLUSTER/emu' reset 0" || exit 1
trap mig_off EXIT
ok "the chart installs in DRA mode with dra.mig and rolls out" \
    e2e_install -f "$E2E_CI_VALUES/dra-mig-values.yaml" || exit 1
partitions() {
    kubectl get resourceslices --field-selector "spec.nodeName=$CL_NODE_NAME,spec.driver=gpu.accel.dev" -o json |
        python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
devs = [d for s in items for d in s["spec"].get("devices", [])]
counters = [c for s in items for c in s["spec"].get("sharedCounters", [])]
profiles = sorted({d["attributes"].get("profile", {}).get("string") for d in devs} - {None})
print(len(items), "slice(s),", len(devs), "device(s), counter sets", [c["name"] for c in counters], "profiles", profiles)
sys.exit(0 if counters and "1g.10gb" in profiles and
         all(d.get("consumesCounters") for d in devs if d["name"].startswith("gpu-0-mig")) else 1)'
}
ok "acceld publishes GPU 0's MIG placements as partitionable devices (1g.10gb among them) with its counters" \
    wait_until 30 partitions || rc=1
ok "the chart's DeviceClass mig.accel.dev exists" kubectl get deviceclass mig.accel.dev -o name || rc=1

scenario_namespace e2e-dra-mig || {
    echo "not ok - namespace e2e-dra-mig"
    exit 1
}
trap 'kubectl delete namespace "$E2E_NS" --wait=true --timeout=60s >/dev/null 2>&1; mig_off' EXIT
kubectl -n "$E2E_NS" apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: mig-1g}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.accel.dev
          selectors:
          - cel: {expression: 'device.attributes["gpu.accel.dev"].profile == "1g.10gb"'}
YAML
# CUDA_VISIBLE_DEVICES from NVIDIA_VISIBLE_DEVICES: what NVIDIA's toolkit does for a MIG device
gpu_pod m '{claims: [{name: mig}]}' 'echo "visible $NVIDIA_VISIBLE_DEVICES"
CUDA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES cuda-demo --alloc 1024 --seconds 1
echo demo-done; sleep 3600' "  resourceClaims:
  - {name: mig, resourceClaimTemplateName: mig-1g}" >/dev/null
given() {
    pod_runs 90 m && log_has 60 m '^demo-done' || return 1
    local uuid
    uuid=$(pod_logs m | sed -n 's/^visible \(MIG-.*\)$/\1/p')
    pod_logs m
    echo "instances on GPU 0: $("$E2E_CLUSTER/emu" mig 0 list | sed -n 's/.*\(MIG-[0-9a-f-]*\).*/\1/p' | tr '\n' ' ')"
    [ -n "$uuid" ] && "$E2E_CLUSTER/emu" mig 0 list | grep -q "1g.10gb.*$uuid" &&
        pod_logs m | grep -q '^device 0: .* MIG 1g.10gb' && pod_logs m | grep -q 'of 9984 MiB$'
}
ok "a 1g.10gb claim: the scheduler allocates it, acceld creates the instance, the container gets that MIG device (9984 MiB)" \
    given || {
    why_pod "$E2E_NS" m | sed 's/^/# /'
    rc=1
}
kubectl -n "$E2E_NS" delete pod m --wait=true --timeout=60s >/dev/null 2>&1
gone() {
    local out
    out=$("$E2E_CLUSTER/emu" mig 0 list)
    printf '%s\n' "$out"
    ! printf '%s\n' "$out" | grep -q 'MIG-'
}
ok "the instance is destroyed once the pod is gone" wait_until 30 gone || rc=1
exit $rc
