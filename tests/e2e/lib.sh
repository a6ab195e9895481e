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
