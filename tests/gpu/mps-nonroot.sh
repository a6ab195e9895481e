#!/usr/bin/env bash
# mps-nonroot.sh — what an MPS client that cannot reach its control daemon gets, on a real GPU
# (issue 22; docs/vcuda.md, "MPS clients that cannot reach the daemon").
#
# NVIDIA's nvidia-cuda-mps-control(1): "When CUDA is first initialized in a program, the CUDA
# driver attempts to connect to the MPS control daemon. If the connection attempt fails, the
# program continues to run as it normally would without MPS." A daemon started by root makes
# its pipe directory and control socket root's (the socket 0755 here): a client running as
# another user cannot connect to it, so it would run without MPS — on every SM, under none of
# the daemon's limits. This script checks that on the GPU:
#   1. no daemon: device 0's SM count (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, and the
#      context's CU_EXEC_AFFINITY_TYPE_SM_COUNT where the driver has cuCtxGetExecAffinity);
#   2. a daemon started by root with set_default_active_thread_percentage 25: a root client
#      is capped (PASS when it sees fewer SMs than in 1: the daemon works);
#   3. the same daemon, a client running as uid 65534: the control socket's owner and mode, and
#      the SMs it gets: all of them is NVIDIA's rule at work (printed as "FINDING: confirmed");
#   4. the remedy NVIDIA documents (a server runs with its client's uid): a daemon started as
#      uid 65534 with its own pipe directory, the same client: capped (PASS).
# Needs root (to start daemons and run clients as uid 65534), gcc, nvidia-cuda-mps-control.
# Prints PASS/FAIL/SKIP/FINDING lines and a record line for docs/gpu-validation.md; exit 0 =
# every check that ran passed, 1 = a failure, 77 = no GPU or not root.
#
# Dry run without a GPU (the emulated daemon does not model step 3's refusal: its clients read
# the daemon's settings without connecting, so step 3 reports "not confirmed" there):
#   build/src/emu/accel-emu --state /tmp/gpus init --gpus 1 --mode 0666
#   ACCEL_EMU_STATE=/tmp/gpus LD_LIBRARY_PATH=build/src/emu tests/gpu/mps-nonroot.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dry=0
if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
    if [ -z "${ACCEL_EMU_STATE:-}" ]; then
        echo "SKIP: no NVIDIA GPU here (nvidia-smi -L failed); see the header for a dry run"
        exit 77
    fi
    dry=1
    echo "DRY RUN on accel-emu ($ACCEL_EMU_STATE): not a GPU validation, do not record"
fi
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: needs root (starts MPS daemons, runs a client as uid 65534)"
    exit 77
fi
# a dry run uses the emulator's daemon, beside its libraries
[ $dry = 1 ] && PATH=${LD_LIBRARY_PATH%%:*}:$PATH
if ! command -v nvidia-cuda-mps-control >/dev/null; then
    echo "SKIP: nvidia-cuda-mps-control is not on PATH"
    exit 77
fi
out=$(mktemp -d)
chmod 0755 "$out"
daemons=()
cleanup() {
    for p in "${daemons[@]}"; do
        CUDA_MPS_PIPE_DIRECTORY=$p timeout 10 nvidia-cuda-mps-control <<< quit >/dev/null 2>&1
    done
    rm -rf "$out"
}
trap cleanup EXIT
fail=0
pass() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }

cat > "$out/sms.c" <<'EOF'
/* Prints device 0's SM count as this process sees it: the attribute and, where the driver has
 * it, the context's SM affinity. Driver API through dlopen: no CUDA toolkit needed. */
#include "cuda_api.h"
#include <dlfcn.h>
#include <stdio.h>
int main(void)
{
    void *l = dlopen("libcuda.so.1", RTLD_NOW);
    if (!l) {
        printf("error=dlopen\n");
        return 1;
    }
    __typeof__(cuInit) *init = (__typeof__(init))dlsym(l, "cuInit");
    __typeof__(cuDeviceGetAttribute) *attr = (__typeof__(attr))dlsym(l, "cuDeviceGetAttribute");
    __typeof__(cuDevicePrimaryCtxRetain) *retain =
        (__typeof__(retain))dlsym(l, "cuDevicePrimaryCtxRetain");
    __typeof__(cuCtxSetCurrent) *setcur = (__typeof__(setcur))dlsym(l, "cuCtxSetCurrent");
    CUresult (*affinity)(CUexecAffinityParam *, CUexecAffinityType) =
        (CUresult(*)(CUexecAffinityParam *, CUexecAffinityType))dlsym(l, "cuCtxGetExecAffinity");
    int sms = -1;
    CUcontext c;
    CUresult r = init(0);
    if (!r)
        r = retain(&c, 0);
    if (!r)
        r = setcur(c);
    if (!r)
        r = attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
    if (r) {
        printf("error=%d\n", (int)r);
        return 1;
    }
    CUexecAffinityParam p = {0};
    int aff = affinity && affinity(&p, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS
                  ? (int)p.param.smCount.val
                  : -1;
    printf("sms=%d affinity=%d\n", sms, aff);
    return 0;
}
EOF
if ! gcc -std=gnu17 -O2 -I"$root/src/gpu" -o "$out/sms" "$out/sms.c" -ldl; then
    echo "FAIL build the SM-count program"
    exit 1
fi
chmod 0755 "$out/sms"

gpu=unknown driver=unknown
if [ $dry = 0 ]; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
fi
echo "GPU: $gpu, driver $driver"

# the SMs a client sees: the affinity when the driver tells it, else the attribute
sms_of() { sed -n 's/.*sms=\([0-9-]*\) affinity=\([0-9-]*\).*/\1 \2/p' <<< "$1" |
    awk '{ print ($2 > 0 ? $2 : $1) }'; }
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
# runs the program as uid 65534 with pipe directory $1 (label $2): its output in r, SMs in n
nobody_client() {
    r=$(CUDA_MPS_PIPE_DIRECTORY=$1 as_nobody "$out/sms" 2>&1)
    n=$(sms_of "$r")
    echo "$2: $r"
    [ -n "$n" ] || echo "SKIP uid 65534 could not run the program here ($r)"
}
start_daemon() { # PIPE_DIR LOG_DIR [user]
    mkdir -p "$2"
    if [ "${3:-}" = nobody ]; then
        mkdir -p "$1"
        chown 65534:65534 "$1" "$2"
        CUDA_MPS_PIPE_DIRECTORY=$1 CUDA_MPS_LOG_DIRECTORY=$2 as_nobody nvidia-cuda-mps-control -d
    else
        CUDA_MPS_PIPE_DIRECTORY=$1 CUDA_MPS_LOG_DIRECTORY=$2 nvidia-cuda-mps-control -d
    fi || return 1
    daemons+=("$1")
    for _ in $(seq 50); do [ -S "$1/control" ] && break; sleep 0.1; done
    CUDA_MPS_PIPE_DIRECTORY=$1 timeout 10 nvidia-cuda-mps-control <<< \
        "set_default_active_thread_percentage 25" >/dev/null
}

# 1. no daemon
base=$(env -u CUDA_MPS_PIPE_DIRECTORY "$out/sms")
all=$(sms_of "$base")
echo "no MPS: $base"
[ -n "$all" ] && [ "$all" -gt 0 ] || { bad "no SM count without MPS: $base"; exit 1; }

# 2. root's daemon, root's client
if ! start_daemon "$out/pipe" "$out/log"; then
    bad "nvidia-cuda-mps-control -d as root"
    exit 1
fi
r=$(CUDA_MPS_PIPE_DIRECTORY=$out/pipe "$out/sms")
n=$(sms_of "$r")
echo "root's daemon, root's client: $r"
if [ -n "$n" ] && [ "$n" -lt "$all" ]; then
    pass "a root client of root's daemon is capped ($n of $all SMs at 25 %)"
else
    bad "a root client of root's daemon is not capped ($r): the rest proves nothing"
fi

# 3. root's daemon, a client as uid 65534
echo "control socket: $(stat -c '%U:%G %a' "$out/pipe/control" 2>/dev/null || echo missing)," \
    "pipe directory: $(stat -c '%U:%G %a' "$out/pipe")"
# a dry run's emulated machine must be usable by uid 65534 too
if [ $dry = 1 ]; then
    chmod 0666 "$ACCEL_EMU_STATE" 2>/dev/null
    chmod o+x "$(dirname "$ACCEL_EMU_STATE")" 2>/dev/null
fi
nobody_client "$out/pipe" "root's daemon, uid 65534's client"
if [ -z "$n" ]; then
    :
elif [ "$n" -ge "$all" ]; then
    echo "FINDING: confirmed: a client that cannot reach the daemon runs without MPS ($n of $all SMs)"
else
    echo "FINDING: not confirmed: uid 65534's client was capped ($n of $all SMs)"
fi

# 4. the remedy: a daemon of the client's own user
if ! start_daemon "$out/pipe-nobody" "$out/log-nobody" nobody; then
    bad "nvidia-cuda-mps-control -d as uid 65534"
else
    nobody_client "$out/pipe-nobody" "uid 65534's daemon, uid 65534's client"
    if [ -z "$n" ]; then
        :
    elif [ "$n" -lt "$all" ]; then
        pass "a client of a daemon of its own user is capped ($n of $all SMs)"
    else
        bad "a client of a daemon of its own user is not capped ($r)"
    fi
fi

echo "record: $(date -u +%Y-%m-%d) mps-nonroot.sh on $gpu (driver $driver):" \
    "$([ $fail = 0 ] && echo pass || echo FAIL)"
exit $fail
