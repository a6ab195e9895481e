#!/usr/bin/env bash
# Scenario "node": the test cluster's node is a real one. The kubelet registered and is Ready
# on the node IP, the API server serves resource.k8s.io/v1, the emulated GPUs are character
# devices in the node's /dev, and pods from a locally built image (no registry) run to
# completion in real containers: one on the host network, one on the CNI bridge that reaches
# the API server through the kubernetes Service.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rc=0

node_ip() {
    local ip
    ip=$(kubectl get node "$CL_NODE_NAME" -o 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}')
    echo "InternalIP: $ip"
    [ "$ip" = "$CL_NODE_IP" ]
}
node_ready() {
    kubectl get node "$CL_NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' |
        grep -qx True
}
kubelet_version() {
    local v
    v=$(kubectl get node "$CL_NODE_NAME" -o 'jsonpath={.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}')
    echo "$v"
    cl_load_versions
    [ "$v" = "$KUBERNETES_VERSION containerd://${CONTAINERD_VERSION#v}" ]
}
ok "node $CL_NODE_NAME is Ready" node_ready || rc=1
ok "its InternalIP is the node IP $CL_NODE_IP" node_ip || rc=1
ok "kubelet and runtime are the pinned versions" kubelet_version || rc=1
ok "the API server serves resource.k8s.io/v1 (DRA)" \
    sh -c "$E2E_CLUSTER/kubectl api-resources --api-group=resource.k8s.io -o name | grep -x resourceslices.resource.k8s.io" || rc=1

gpu_nodes() {
    local i out
    for ((i = 0; i < CL_GPUS; i++)); do
        out=$("$E2E_CLUSTER/enter" stat -c '%F %t:%T' "/dev/nvidia$i") || return 1
        echo "/dev/nvidia$i: $out"
        [ "$out" = "character special file c3:$(printf %x "$i")" ] || return 1
    done
    out=$("$E2E_CLUSTER/enter" stat -c '%F %t:%T' /dev/nvidiactl) || return 1
    [ "$out" = "character special file c3:ff" ]
}
ok "the node's /dev has $CL_GPUS emulated GPUs as character devices 195:N and nvidiactl 195:255" \
    gpu_nodes || rc=1
if [ -d /sys/module/nvidia ]; then
    echo "ok - the host's /dev has no emulated GPU device node # SKIP NVIDIA's driver is loaded here"
else
    ok "the host's /dev has no emulated GPU device node" sh -c '! ls /dev/nvidia0 /dev/nvidiactl 2>/dev/null' || rc=1
fi
ok "accel-emu sees $CL_GPUS GPUs on the node" \
    sh -c "$E2E_CLUSTER/emu status --json | grep -o '\"uuid\"' | wc -l | grep -qx $CL_GPUS" || rc=1

scenario_namespace e2e-node || {
    echo "not ok - namespace e2e-node"
    exit 1
}

# pod NAME HOSTNETWORK SCRIPT: a busybox pod that runs SCRIPT once
pod() {
    kubectl -n "$E2E_NS" apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  hostNetwork: $2
  restartPolicy: Never
  dnsPolicy: Default
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $CL_BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "$3"]
YAML
}

# on the host network, the pod sees the node's interface and address
pod hostnet true "ip -4 addr show dev accel0 | grep -q 'inet $CL_NODE_IP/' && echo hostnet-ok" >/dev/null
# on the bridge, the pod has an address from the pod range and reaches the API server
# through the kubernetes Service (the DNAT rule up.sh sets in place of kube-proxy): plain HTTP
# to its TLS port gets Go's answer "Client sent an HTTP request to an HTTPS server" (busybox's
# own TLS client cannot talk to it)
pod bridged false "ip -4 addr show dev eth0 && printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $CL_API_SERVICE_IP 443 | grep -q 'HTTPS server' && echo bridged-ok" >/dev/null

for p in hostnet bridged; do
    if ok "pod $p (hostNetwork=$([ $p = hostnet ] && echo true || echo false)) runs to completion" \
        pod_ends_with 120 "$E2E_NS" "$p" Succeeded; then
        ok "pod $p printed $p-ok" sh -c "$E2E_CLUSTER/kubectl -n $E2E_NS logs $p | grep -qx $p-ok" || rc=1
    else
        why_pod "$E2E_NS" "$p" | sed 's/^/# /'
        rc=1
    fi
done
in_pod_cidr() {
    local ip
    ip=$(kubectl -n "$E2E_NS" get pod bridged -o 'jsonpath={.status.podIP}')
    echo "podIP: $ip"
    case "$ip" in "${CL_POD_CIDR%%.0.0/16}".*) ;; *) return 1 ;; esac
}
ok "the bridged pod's IP is in the pod range $CL_POD_CIDR" in_pod_cidr || rc=1
exit $rc
