#!/usr/bin/env bash
# timeslice.sh — on a machine with an NVIDIA GPU and driver (no MPS running): what accel-emu's
# time slicing between processes models (docs/emulator-cuda.md, "Time slicing between
# processes"). Builds tests/emu/spin.c with gcc and runs two copies against the real libcuda.so.1:
# one spins 2 s, the other launches a 20 ms spin kernel 10 ms later (then 3 more, each waited
# for). On a GPU that time-slices contexts the short kernel does not wait for the long one, and
# a spin kernel is clock-bound: it loops on %clock64, a per-SM counter that runs on while its
# context is switched out, so it ends once its cycles have passed (as soon as its context is
# resident to see it) however many slices the neighbour took meanwhile. So the short kernel's
# events are its own 20 ms (at most a slice or two more), and the long one is not stretched by
# the short one's. An NVIDIA H200 (driver 580.159.04, 2026-11-26): long 2000.023 ms, short
# 20.004 ms, repeats p50 22.383 ms (each waits for a slice first). Prints PASS/FAIL lines and a
# "record:" line with the figures for docs/gpu-validation.md. Without a GPU: the same on accel-emu when ACCEL_EMU_STATE is set and
# the emulator's libcuda.so.1 is on LD_LIBRARY_PATH.
#
#   tests/gpu/timeslice.sh [long_ms] [short_ms]        (default 2000 20)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
long=${1:-2000}
short=${2:-20}
out=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$out"
}
trap cleanup EXIT
gcc -std=gnu17 -O2 -Wall -Wextra -Werror -I"$root/src/gpu" -o "$out/spin" "$root/tests/emu/spin.c" -ldl || exit 1
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader || true
fi
mkfifo "$out/a.in" "$out/b.in"
"$out/spin" "$long" --go <"$out/a.in" >"$out/a.out" 2>&1 &
pids+=($!)
"$out/spin" "$short" --go --repeat 3 <"$out/b.in" >"$out/b.out" 2>&1 &
pids+=($!)
exec 3>"$out/a.in" 4>"$out/b.in"
ready=0
for _ in $(seq 400); do # both set up (contexts, modules): at most 20 s
    if grep -q '^# ready' "$out/a.out" && grep -q '^# ready' "$out/b.out"; then
        ready=1
        break
    fi
    sleep 0.05
done
if [ $ready = 0 ]; then
    echo "FAIL: the spin programs did not get ready"
    cat "$out/a.out" "$out/b.out"
    exit 1
fi
echo go >&3
sleep 0.01
t0=$(date +%s%N)
echo go >&4
wait "${pids[1]}"
t1=$(date +%s%N)
wait "${pids[0]}"
exec 3>&- 4>&-
pids=()
cat "$out/a.out" "$out/b.out"
# "ok 2 - N cycles x W wave(s) (...) took X ms, expected Y ms (...)"
took() { sed -n 's/.* 2 - .* took \([0-9.]*\) ms.*/\1/p' "$1" | head -1; }
ta=$(took "$out/a.out")
tb=$(took "$out/b.out")
rep=$(sed -n 's/^# repeat [0-9]* p50 \([0-9.]*\) .*/\1/p' "$out/b.out")
wall=$(( (t1 - t0) / 1000000 ))
if [ -z "$ta" ] || [ -z "$tb" ]; then
    echo "FAIL: no kernel times in the output"
    exit 1
fi
echo "# long kernel (events): $ta ms; short kernel (events): $tb ms; short program from go to exit: $wall ms (its 3 repeats p50: ${rep:-?} ms)"
rc=0
# verdict AWK_CONDITION PASS_TEXT FAIL_TEXT: the condition over a (long), b (short), l, s
verdict() {
    if awk -v a="$ta" -v b="$tb" -v l="$long" -v s="$short" "BEGIN { exit !($1) }"; then
        echo "PASS: $2"
    else
        echo "FAIL: $3"
        rc=1
    fi
}
# the short kernel did not wait for the long one to end
verdict "b < l / 2" \
    "the ${short} ms kernel beside a ${long} ms one of another process took $tb ms (events), not queued behind it" \
    "the ${short} ms kernel took $tb ms (events): it waited for the ${long} ms one"
# clock-bound: its events are its own time, plus at most the wait for its context to be
# resident when its clock runs out (a generous bound for two slices: a quarter of it)
verdict "b >= s * 0.99 && b <= s * 1.25" \
    "its events say $tb ms: its own ${short} ms (clock-bound), not stretched by the other context's slices" \
    "its events say $tb ms, outside [${short}, ${short} x 1.25] ms"
# the long kernel is not stretched by the short one's work either
verdict "a >= l * 0.99 && a < l * 1.02" \
    "the ${long} ms kernel took $ta ms (events): not stretched by the ${short} ms ones beside it" \
    "the ${long} ms kernel took $ta ms (events): stretched (or short) beside the ${short} ms ones"
echo "record: timeslice.sh long ${ta} ms, short ${tb} ms (events), repeats p50 ${rep:-?} ms"
exit $rc
