# Sourced by every scenario of the end-to-end suite (tests/e2e/*.sh, run by run.sh): TAP
# helpers and waits against the test cluster (make cluster). A scenario prints one TAP line
# per check through ok/check, leaves nothing behind (its namespace is deleted on exit), and
# uses the cluster only through build/cluster/kubectl and the other entry points.
E2E_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
E2E_CLUSTER=${ACCEL_CLUSTER_DIR:-$E2E_REPO/build/cluster}
. "$E2E_REPO/scripts/cluster/lib.sh"

kubectl() { "$E2E_CLUSTER/kubectl" "$@"; }

# ok DESCRIPTION CMD...: one TAP line, "ok" when CMD succeeds; a failure shows CMD's output
ok() {
    local desc=$1 out
    shift
    if out=$("$@" 2>&1); then
        echo "ok - $desc"
    else
        echo "not ok - $desc"
        printf '%s\n' "$out" | sed 's/^/# /'
        return 1
    fi
}

# wait_until SECONDS CMD...: until CMD succeeds (its last output is printed on a timeout)
wait_until() {
    local deadline=$(($(date +%s) + $1)) out
    shift
    until out=$("$@" 2>&1); do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            printf '%s\n' "$out"
            return 1
        fi
        sleep 1
    done
}

# pod_phase_is NAMESPACE POD PHASE
pod_phase_is() {
    local phase
    phase=$(kubectl -n "$1" get pod "$2" -o 'jsonpath={.status.phase}') || return 1
    echo "pod $2 is ${phase:-not started}"
    [ "$phase" = "$3" ]
}

# pod_ends_with SECONDS NAMESPACE POD PHASE: waits until the pod has ended (Succeeded or
# Failed) and checks it ended in PHASE
pod_ends_with() {
    wait_until "$1" pod_ended "$2" "$3"
    pod_phase_is "$2" "$3" "$4"
}
pod_ended() {
    local phase
    phase=$(kubectl -n "$1" get pod "$2" -o 'jsonpath={.status.phase}') || return 1
    echo "pod $2 is ${phase:-not started}"
    [ "$phase" = Succeeded ] || [ "$phase" = Failed ]
}

# why_pod NAMESPACE POD: what a user would read when a pod does not do what it should
why_pod() {
    kubectl -n "$1" describe pod "$2" 2>&1 | tail -n 25
    kubectl -n "$1" logs "$2" --all-containers 2>&1 | tail -n 10
}

# scenario_namespace NAME: makes namespace NAME, deleted when the scenario exits
scenario_namespace() {
    E2E_NS=$1
    kubectl delete namespace "$E2E_NS" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
    kubectl create namespace "$E2E_NS" >/dev/null || return 1
    trap 'kubectl delete namespace "$E2E_NS" --wait=true --timeout=60s >/dev/null 2>&1' EXIT
    # the ServiceAccount controller makes each namespace's default account
    wait_until 30 kubectl -n "$E2E_NS" get serviceaccount default >/dev/null
}

# ---------------------------------------------------------------- accel on the cluster
# The chart is installed as a user installs it (docs/deploy.md): the images imported into the
# node's containerd (run.sh does that), `helm upgrade --install` of deploy/helm/accel with the
# emulated node's values (tests/e2e/values/emulated.yaml) and each scenario's mode values.
E2E_VERSION=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$E2E_REPO/meson.build" | head -n1)
E2E_IMAGE=accel:$E2E_VERSION
E2E_TEST_IMAGE=accel-test:$E2E_VERSION
E2E_RELEASE=accel
E2E_CHART=$E2E_REPO/deploy/helm/accel
E2E_VALUES=$E2E_REPO/tests/e2e/values
E2E_CI_VALUES=$E2E_CHART/ci

helm() { "$E2E_CLUSTER/helm" "$@"; }

# e2e_install HELM-ARGS...: installs or upgrades the release (kube-system) with
# values/emulated.yaml and then HELM-ARGS (-f FILE, --set K=V), nothing kept from an earlier
# install (--reset-values), and waits until every DaemonSet of the release has rolled out
e2e_install() {
    local out
    out=$(helm upgrade --install "$E2E_RELEASE" "$E2E_CHART" -n kube-system --reset-values \
        -f "$E2E_VALUES/emulated.yaml" "$@" 2>&1) || {
        printf '%s\n' "$out" | grep -v 'found symbolic link'
        return 1
    }
    e2e_rollout
}

# e2e_rollout: waits (bounded) until every DaemonSet of the release runs its current spec
e2e_rollout() {
    local ds
    for ds in $(kubectl -n kube-system get ds -l "app.kubernetes.io/instance=$E2E_RELEASE" -o name); do
        kubectl -n kube-system rollout status "$ds" --timeout=180s >/dev/null || {
            echo "$ds did not roll out:"
            kubectl -n kube-system get pods -l "app.kubernetes.io/instance=$E2E_RELEASE" -o wide
            kubectl -n kube-system describe "$ds" | tail -n 10
            return 1
        }
    done
}

# acceld_pod: the name of acceld's pod on the node (one agent, or the first)
acceld_pod() {
    kubectl -n kube-system get pods -l "app.kubernetes.io/instance=$E2E_RELEASE,app.kubernetes.io/name=acceld" \
        --field-selector status.phase=Running -o 'jsonpath={.items[0].metadata.name}'
}

# allocatable RESOURCE: the node's allocatable count of RESOURCE (0 when it has none)
allocatable() {
    local v
    v=$(kubectl get node "$CL_NODE_NAME" -o "jsonpath={.status.allocatable.${1//./\\.}}")
    echo "${v:-0}"
}

# allocatable_is RESOURCE N
allocatable_is() {
    local v
    v=$(allocatable "$1")
    echo "allocatable $1: $v (want $2)"
    [ "$v" = "$2" ]
}

# gpu_pod NAME RESOURCES SCRIPT [POD-SPEC-YAML]: a pod in $E2E_NS running SCRIPT (sh) once in
# the test image, given the emulated GPUs' driver as NVIDIA's toolkit gives a real one on a GPU
# node: the emulator's state mounted, ACCEL_EMU_STATE, ACCEL_EMU_DEV_ROOT=/dev (the driver
# sees only the GPUs whose device nodes the runtime made: docs/emulator.md, "Containers") and
# its libraries on the library path. RESOURCES is the container's resources as flow YAML
# ('{limits: {nvidia.com/gpu: 2}}'); POD-SPEC-YAML, lines added to the pod's spec (2 spaces in).
gpu_pod() {
    local name=$1 res=$2 script=$3 extra=${4:-}
    kubectl -n "$E2E_NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels: {app: e2e}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $E2E_TEST_IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c"]
    args:
    - |
$(printf '%s\n' "$script" | sed 's/^/      /')
    env:
    - {name: ACCEL_EMU_STATE, value: $CL_EMU_STATE}
    - {name: ACCEL_EMU_DEV_ROOT, value: /dev}
    - {name: LD_LIBRARY_PATH, value: /usr/lib/accel-emu}
    - {name: PATH, value: "/usr/lib/accel-test:/usr/lib/accel-emu:/usr/local/bin:/usr/bin:/bin"}
    resources: $res
    volumeMounts:
    - {name: emu, mountPath: $(dirname "$CL_EMU_STATE")}
  volumes:
  - name: emu
    hostPath: {path: $(dirname "$CL_EMU_STATE"), type: Directory}
$extra
YAML
}

# pod_logs POD: its container's output
pod_logs() { kubectl -n "$E2E_NS" logs "$1" 2>&1; }

# pod_runs SECONDS POD: waits until POD runs (its container started)
pod_runs() {
    wait_until "$1" pod_phase_is "$E2E_NS" "$2" Running
}

# log_has SECONDS POD PATTERN: waits until the pod's output has a line matching PATTERN (grep -E)
log_has() {
    local secs=$1 pod=$2 pat=$3
    wait_until "$secs" sh -c "'$E2E_CLUSTER/kubectl' -n '$E2E_NS' logs '$pod' 2>&1 | grep -Eq -- \"\$0\" || { '$E2E_CLUSTER/kubectl' -n '$E2E_NS' logs '$pod' 2>&1 | tail -n 5; exit 1; }" "$pat"
}

# in_pod POD CMD...: runs CMD in POD's container
in_pod() {
    local pod=$1
    shift
    kubectl -n "$E2E_NS" exec "$pod" -c main -- "$@"
}
