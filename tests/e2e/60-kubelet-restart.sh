#!/usr/bin/env bash
# Scenario "kubelet-restart": one acceld serving whole GPUs as a device plugin (GPUs 0-1) and
# through its DRA driver (GPUs 2-3). With a pod of each kind running, the kubelet is restarted
# (SIGTERM, then the same command line, as a node's service manager does): the device plugin
# and the DRA driver register again, the running pods keep their containers and devices, new
# pods of both kinds are admitted; and nothing acceld wrote to the API server (ResourceSlices,
# pod annotations, Events, in this and the earlier scenarios' logs) was refused.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rc=0

ok "the chart installs: GPUs 0-1 device plugin (cdi), 2-3 DRA, one acceld" \
    e2e_install -f "$E2E_CI_VALUES/pgpu-values.yaml" -f "$E2E_VALUES/cdi.yaml" -f "$E2E_VALUES/pgpu-dra.yaml" || exit 1
ok "allocatable nvidia.com/gpu = 2 (the device-plugin GPUs)" wait_until 30 allocatable_is nvidia.com/gpu 2 || rc=1
devices_in_slice() {
    kubectl get resourceslices --field-selector "spec.nodeName=$CL_NODE_NAME,spec.driver=gpu.accel.dev" \
        -o 'jsonpath={.items[*].spec.devices[*].name}' | tee /dev/stderr | grep -qx 'gpu-2 gpu-3'
}
ok "the ResourceSlice has the DRA GPUs, gpu-2 and gpu-3" wait_until 30 devices_in_slice || rc=1

scenario_namespace e2e-kubelet || {
    echo "not ok - namespace e2e-kubelet"
    exit 1
}
kubectl -n "$E2E_NS" apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: whole}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.accel.dev}
YAML
nodes='ls /dev | grep "^nvidia[0-9]"'
claim="  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: whole}"
gpu_pod dp '{limits: {nvidia.com/gpu: 1}}' "$nodes; sleep 3600" >/dev/null
gpu_pod cl '{claims: [{name: gpu}]}' "$nodes; sleep 3600" "$claim" >/dev/null
for p in dp cl; do
    ok "pod $p ($([ $p = dp ] && echo device plugin || echo DRA claim)) runs with one GPU" sh -c \
        "'$E2E_CLUSTER/kubectl' -n $E2E_NS wait --for=jsonpath='{.status.phase}'=Running pod/$p --timeout=90s >/dev/null &&
         sleep 1 && [ \"\$('$E2E_CLUSTER/kubectl' -n $E2E_NS logs $p | grep -c '^nvidia[0-9]')\" = 1 ]" || {
        why_pod "$E2E_NS" $p | sed 's/^/# /'
        rc=1
    }
done

acceld=$(acceld_pod)
count() { kubectl -n kube-system logs "$acceld" -c acceld 2>/dev/null | grep -c -- "$1"; }
dp_regs=$(count 'registered nvidia.com/gpu with the kubelet')
dra_regs=$(count 'the kubelet registered driver gpu.accel.dev')
t0=$(date +%s)
ok "the kubelet restarts (build/cluster/kubelet-restart) and the node is Ready again" sh -c \
    "'$E2E_CLUSTER/kubelet-restart' >/dev/null && sleep 2 &&
     '$E2E_CLUSTER/kubectl' wait --for=condition=Ready node/$CL_NODE_NAME --timeout=90s >/dev/null" || rc=1
reregistered_dp() {
    local n
    n=$(count 'registered nvidia.com/gpu with the kubelet')
    echo "acceld's device-plugin registrations: $dp_regs before, $n now"
    [ "$n" -gt "$dp_regs" ] && allocatable_is nvidia.com/gpu 2
}
ok "acceld's device plugin registers again (allocatable nvidia.com/gpu back to 2)" wait_until 60 reregistered_dp || rc=1
reregistered_dra() {
    local n
    n=$(count 'the kubelet registered driver gpu.accel.dev')
    echo "the kubelet's registrations of acceld's DRA driver: $dra_regs before, $n now"
    [ "$n" -gt "$dra_regs" ]
}
ok "acceld's DRA driver is registered again by the new kubelet" wait_until 60 reregistered_dra || rc=1
kept() {
    local p
    for p in dp cl; do
        kubectl -n "$E2E_NS" get pod "$p" -o 'jsonpath={.metadata.name} {.status.phase} restarts={.status.containerStatuses[0].restartCount}{"\n"}'
        [ "$(kubectl -n "$E2E_NS" get pod "$p" -o 'jsonpath={.status.phase}/{.status.containerStatuses[0].restartCount}')" = Running/0 ] || return 1
        [ "$(in_pod "$p" sh -c 'ls /dev | grep -c "^nvidia[0-9]"')" = 1 ] || return 1
    done
}
ok "the running pods keep their containers and device nodes across the restart" kept || rc=1
gpu_pod dp2 '{limits: {nvidia.com/gpu: 1}}' "$nodes" >/dev/null
gpu_pod cl2 '{claims: [{name: gpu}]}' "$nodes" "$claim" >/dev/null
for p in dp2 cl2; do
    ok "a new pod ($([ $p = dp2 ] && echo device plugin || echo DRA claim)) is admitted and runs" \
        pod_ends_with 120 "$E2E_NS" $p Succeeded || {
        why_pod "$E2E_NS" $p | sed 's/^/# /'
        rc=1
    }
done
echo "# kubelet restart to both new pods done: $(($(date +%s) - t0)) s"

# The API server's validation took everything acceld wrote: a refused write is a log line
# (ResourceSlice: "...; retrying in", Events: "cannot post", annotations: "cannot annotate")
refused_writes() {
    local out
    out=$(kubectl -n kube-system logs "$acceld" -c acceld 2>/dev/null |
        grep -E 'ResourceSlice .*retrying in|cannot post|cannot annotate|HTTP 4[0-9][0-9]')
    printf '%s\n' "$out" | head -n 10
    [ -z "$out" ]
}
ok "the API server refused nothing acceld wrote (its log has no refused write)" refused_writes || rc=1
exit $rc
