#!/usr/bin/env bash
# Scenario "pgpu": whole GPUs (nvidia.com/gpu), the chart's default mode, handed out by CDI
# name. acceld runs as the chart's pod and registers the node's GPUs with the kubelet; a pod
# asking for 2 GPUs gets exactly two device nodes (195:N, injected by containerd from acceld's
# CDI spec) and, with one GPU taken, the NVLink pair on one NUMA node that is left (acceld's
# preferred allocation); an XID 79 lowers allocatable within 5 s; a restart of acceld's pod
# leaves the running pods their devices, and the new acceld admits new pods.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rc=0

ok "the chart installs (pGPU, deviceListStrategy cdi) and its pods roll out" \
    e2e_install -f "$E2E_CI_VALUES/pgpu-values.yaml" -f "$E2E_VALUES/cdi.yaml" || exit 1
ok "acceld runs as the chart's pod, not on the host" sh -c \
    "p=\$('$E2E_CLUSTER/kubectl' -n kube-system get pods -l app.kubernetes.io/name=acceld -o 'jsonpath={.items[*].status.containerStatuses[0].ready}'); echo \"ready: \$p\"; [ \"\$p\" = true ]" || rc=1
ok "allocatable nvidia.com/gpu = $CL_GPUS, the emulated GPUs" \
    wait_until 30 allocatable_is nvidia.com/gpu "$CL_GPUS" || rc=1

scenario_namespace e2e-pgpu || {
    echo "not ok - namespace e2e-pgpu"
    exit 1
}

# What a pod sees: its device nodes (name, major:minor in hex)
see='for d in /dev/nvidia[0-9]*; do echo "node $(basename $d) $(stat -c %t:%T $d)"; done
echo seen'
# holding N POD: a pod holding N GPUs that prints its device nodes and sleeps; the scenario
# stops when it does not run
holding() {
    gpu_pod "$2" "{limits: {nvidia.com/gpu: $1}}" "$see
sleep 3600" >/dev/null
    ok "a $1-GPU pod runs" wait_until 90 pod_phase_is "$E2E_NS" "$2" Running || {
        why_pod "$E2E_NS" "$2" | sed 's/^/# /'
        exit 1
    }
    log_has 30 "$2" '^seen' >/dev/null
}
holding 1 one
holding 2 two

# minors POD: the GPU minors of POD's device nodes, one per line
minors() { pod_logs "$1" | sed -n 's/^node nvidia\([0-9]*\) c3:.*/\1/p'; }
exactly_two() {
    pod_logs two | grep '^node'
    [ "$(pod_logs two | grep -c '^node nvidia')" = 2 ] && [ "$(minors two | wc -l)" = 2 ]
}
ok "the 2-GPU pod has exactly two /dev/nvidiaN, character devices 195:N" exactly_two || rc=1
# the driver in the container (the emulator, ACCEL_EMU_DEV_ROOT) sees the same two GPUs
sees_two() {
    in_pod two sh -c 'accelctl gpus --json --sysfs-root /var/lib/accel-emu/emu.state.d/sysfs' >"$tmp/two.json" || return 1
    python3 - "$tmp/two.json" "$(minors two | tr '\n' ' ')" <<'PY'
import json, sys
gpus = json.load(open(sys.argv[1]))
want = sorted(int(m) for m in sys.argv[2].split())
got = sorted(g["minor"] for g in gpus)
print("minors seen by the driver:", got, "device nodes:", want)
a, b = gpus if len(gpus) == 2 else (None, None)
print("NUMA:", [g["numa_node"] for g in gpus],
      "NVLinks between them:", [l["nvlinks"] for g in gpus for l in g["links"]])
ok = got == want and a["numa_node"] == b["numa_node"] and all(
    l["nvlinks"] > 0 for g in gpus for l in g["links"])
sys.exit(0 if ok else 1)
PY
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kubectl delete namespace "$E2E_NS" --wait=true --timeout=60s >/dev/null 2>&1' EXIT
ok "the 2-GPU pod's driver sees those two GPUs, an NVLink pair on one NUMA node" sees_two || rc=1
one=$(minors one)
ok "the pair is not the 1-GPU pod's GPU (nvidia$one)" sh -c "! echo '$(minors two)' | grep -qx '$one'" || rc=1

# XID 79 (fallen off the bus) on the GPU nobody holds: allocatable drops within 5 s
free=
for ((i = 0; i < CL_GPUS; i++)); do
    minors one | grep -qx "$i" || minors two | grep -qx "$i" || { free=$i; break; }
done
xid_lowers() {
    local t0 t1
    t0=$(date +%s%N)
    "$E2E_CLUSTER/emu" xid "$free" 79 || return 1
    wait_until 5 allocatable_is nvidia.com/gpu $((CL_GPUS - 1)) || return 1
    t1=$(date +%s%N)
    echo "allocatable $((CL_GPUS - 1)) after $(((t1 - t0) / 1000000)) ms"
}
if out=$(xid_lowers 2>&1); then
    echo "ok - XID 79 on GPU $free lowers allocatable nvidia.com/gpu to $((CL_GPUS - 1)) within 5 s"
    printf '%s\n' "$out" | tail -n 1 | sed 's/^/# /'
else
    echo "not ok - XID 79 on GPU $free lowers allocatable nvidia.com/gpu to $((CL_GPUS - 1)) within 5 s"
    printf '%s\n' "$out" | sed 's/^/# /'
    rc=1
fi

# acceld's pod restarted: the running pods keep their containers and devices
old=$(acceld_pod)
ok "acceld's pod deleted ($old)" kubectl -n kube-system delete pod "$old" --wait=true --timeout=60s || rc=1
registered_again() {
    e2e_rollout || return 1
    wait_until 30 sh -c "[ \"\$('$E2E_CLUSTER/kubectl' get node $CL_NODE_NAME -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}')\" -ge $((CL_GPUS - 1)) ]"
}
ok "the DaemonSet starts a new acceld and it registers nvidia.com/gpu again" registered_again || rc=1
kept() {
    local p
    for p in one two; do
        kubectl -n "$E2E_NS" get pod "$p" -o 'jsonpath={.metadata.name} {.status.phase} restarts={.status.containerStatuses[0].restartCount}{"\n"}'
        [ "$(kubectl -n "$E2E_NS" get pod "$p" -o 'jsonpath={.status.phase}/{.status.containerStatuses[0].restartCount}')" = Running/0 ] || return 1
    done
    [ "$(in_pod two sh -c 'ls /dev | grep -c "^nvidia[0-9]"')" = 2 ]
}
ok "the running pods keep their containers and devices across acceld's restart" kept || rc=1
gpu_pod three '{limits: {nvidia.com/gpu: 1}}' 'ls /dev/nvidia[0-9]*' >/dev/null
ok "the new acceld admits a new pod" pod_ends_with 90 "$E2E_NS" three Succeeded || {
    why_pod "$E2E_NS" three | sed 's/^/# /'
    rc=1
}
exit $rc
