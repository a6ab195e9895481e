#!/usr/bin/env bash
# acceld's cost when nothing happens: CPU time and wakeups per second of an acceld serving an
# emulated 8-GPU node (NUMA 0,0,0,0,1,1,1,1, NVLink pairs) with no pod, no call and no event,
# read from /proc/<pid>/task/*/schedstat (per thread: ns on the CPU, and the number of
# timeslices it ran, i.e. how often it was woken) over SECONDS after a settling time.
# Children acceld waited for (the MPS control front ends it runs) are counted apart, from
# cutime + cstime in /proc/<pid>/stat (clock ticks).
#   bash bench/acceld-idle.sh [BUILD_DIR] [SECONDS] [MODES]     MODES: pgpu,vgpu,mps (default all)
#   bash bench/acceld-idle.sh --pid PID [SECONDS]               any running process, the same way
# vGPU mode runs against tests/kube/fake-apiserver.py (its pod watch open, no pod), with a
# fake pod-resources socket path (nobody listens: the books are empty anyway); MPS mode with
# the emulator's nvidia-cuda-mps-control, 2 replicas a GPU.
# docs/benchmarks.md ("Idle") has the figures, NVIDIA's k8s-device-plugin beside them.
set -euo pipefail

# Prints "<cpu ns> <timeslices>" for each thread of $1, one line per thread: "tid ns slices".
snap() {
    local pid=$1 t
    for t in /proc/"$pid"/task/*; do
        [ -r "$t/schedstat" ] || continue
        read -r ns _ slices <"$t/schedstat" 2>/dev/null || continue
        echo "${t##*/} $ns $slices"
    done
}

children_ticks() {
    # fields 16 and 17 of /proc/PID/stat (cutime, cstime), after the ")" of the name
    sed 's/.*) //' /proc/"$1"/stat | awk '{print $14 + $15}'
}

# measure PID SECONDS LABEL
measure() {
    local pid=$1 secs=$2 label=$3 a b c0 c1
    a=$(snap "$pid")
    c0=$(children_ticks "$pid")
    sleep "$secs"
    b=$(snap "$pid")
    c1=$(children_ticks "$pid")
    local hz
    hz=$(getconf CLK_TCK)
    awk -v secs="$secs" -v label="$label" -v threads_b="$(echo "$b" | wc -l)" \
        -v cticks=$((c1 - c0)) -v hz="$hz" '
        NR == FNR { ns0[$1] = $2; sl0[$1] = $3; next }
        { ns += $2 - ns0[$1]; sl += $3 - sl0[$1] }
        END {
            printf "%-8s cpu %.4f ms/s  wakeups %.2f /s  threads %d  children %.3f ms/s  (%d s)\n",
                label, ns / 1e6 / secs, sl / secs, threads_b, cticks * 1000 / hz / secs, secs
        }' <(echo "$a") <(echo "$b")
}

if [ "${1:-}" = "--pid" ]; then
    measure "$2" "${3:-30}" "pid $2"
    exit 0
fi

build=$(cd "${1:-build}" && pwd)
secs=${2:-30}
modes=${3:-pgpu,vgpu,mps}
src=$(cd "$(dirname "$0")/.." && pwd)
emu=$build/src/emu/accel-emu
for f in "$emu" "$build/src/emu/libnvidia-ml.so.1" "$build/src/acceld/acceld"; do
    [ -e "$f" ] || { echo "bench/acceld-idle.sh: $f not built" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/acceld-idle-XXXXXX)
pid=
api=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    [ -n "$api" ] && kill "$api" 2>/dev/null && wait "$api" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
export ACCEL_EMU_STATE=$tmp/emu.state
export ACCEL_NVML_LIBRARY=$build/src/emu/libnvidia-ml.so.1
"$emu" init --gpus 8 --numa 0,0,0,0,1,1,1,1 --nvlink pairs >/dev/null
echo "acceld idle: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg); $secs s a mode"

start_api() {
    mkdir -p "$tmp/api"
    /usr/bin/python3 "$src/tests/kube/fake-apiserver.py" --dir "$tmp/api" --token idle \
        --node node-a >"$tmp/api.log" 2>&1 &
    api=$!
    for _ in $(seq 400); do [ -s "$tmp/api/port" ] && break; sleep 0.05; done
    cat >"$tmp/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: "https://127.0.0.1:$(cat "$tmp/api/port")", certificate-authority: $tmp/api/ca.crt}
users:
- name: acceld
  user: {token: idle}
contexts:
- name: fake
  context: {cluster: fake, user: acceld}
current-context: fake
EOF
}

# as root, acceld runs in a mount namespace of its own (unshare execs it: the pid is acceld's),
# so the tmpfs mounts it makes (region dirs, MPS /dev/shm) go with it
ns=()
[ "$(id -u)" = 0 ] && ns=(unshare -m --propagation private)
IFS=, read -r -a list <<<"$modes"
for mode in "${list[@]}"; do
    state=$tmp/state-$mode
    extra=()
    case $mode in
    pgpu) ;;
    vgpu)
        [ -n "$api" ] || start_api
        extra=(--mode vgpu --kubeconfig "$tmp/kubeconfig" --node-name node-a
            --vcuda-library "$build/src/vcuda/libvcuda.so"
            --pod-resources-socket "$tmp/none.sock")
        ;;
    mps)
        printf 'version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n' \
            >"$tmp/mps.yaml"
        extra=(--config "$tmp/mps.yaml" --mps-control "$build/src/emu/nvidia-cuda-mps-control")
        ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
    esac
    rm -rf "$tmp/dp"
    mkdir -p "$tmp/dp"
    "${ns[@]}" "$build/src/acceld/acceld" --no-register --device-plugin-dir "$tmp/dp" \
        --sysfs-root "$ACCEL_EMU_STATE.d/sysfs" --dev-root "$ACCEL_EMU_STATE.d/dev" \
        --state-dir "$state" --cdi-dir "$tmp/cdi" "${extra[@]}" 2>"$tmp/acceld-$mode.log" &
    pid=$!
    for _ in $(seq 600); do compgen -G "$tmp/dp/*.sock" >/dev/null && break; sleep 0.05; done
    sleep 3 # start-up work (spares, daemons, first LIST) settles
    measure "$pid" "$secs" "$mode"
    kill "$pid"
    wait "$pid" || true
    pid=
done
