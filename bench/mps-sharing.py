#!/usr/bin/env python3
"""mps-sharing — time-slicing vs MPS on the emulator, as its model has them.

    python3 bench/mps-sharing.py [BUILD] [KERNELS]      (default: build, 200)

For 2 and 4 clients on one emulated H100: each client (tests/emu/spin --repeat) launches
KERNELS short kernels one after another, waiting for each, every kernel a grid that fills
1/clients of the GPU once for 2 ms. Without MPS (replicas under time-slicing) the emulated GPU
runs the processes' kernels one after another; under MPS (the emulated control daemon, each
client at 100/clients % of the SMs) the clients' kernels run side by side, each on its share.
Prints, per mode, kernels per second over all clients and the p50 / p99 latency a client sees
(host clock, launch to completion, queueing included).

These are the emulator's model, not a GPU's: docs/emulator-cuda.md ("MPS", "Kernels, streams
and the timeline") says what it models. On a real GPU the answer turns on what the model
leaves out: time-slice length and context-switch cost (the emulator queues whole kernels), SM
contention and memory bandwidth shared by concurrent kernels, and launch overhead through the
MPS server."""
import os
import re
import subprocess
import sys
import tempfile

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
KERNELS = int(sys.argv[2]) if len(sys.argv) > 2 else 200
EMU = os.path.join(BUILD, "src/emu/accel-emu")
MPS = os.path.join(BUILD, "src/emu/nvidia-cuda-mps-control")
SPIN = os.path.join(BUILD, "tests/emu/spin")
KERNEL_MS = 2
REPEAT = re.compile(r"^# repeat \d+ p50 ([\d.]+) p99 ([\d.]+) total ([\d.]+)", re.M)
SMS = re.compile(r"\((\d+) blocks, (\d+) SMs\)")


def clients(env, n, blocks):
    procs = [subprocess.Popen([SPIN, str(KERNEL_MS), "--blocks", str(blocks), "--go",
                               "--repeat", str(KERNELS)],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    for p in procs:
        while p.stdout.readline() not in ("# ready\n", ""):
            pass
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    out = [p.communicate(timeout=600)[0] for p in procs]
    res = []
    for o in out:
        m = REPEAT.search(o)
        if not m:
            sys.exit(f"mps-sharing: spin said {o!r}")
        res.append(tuple(float(x) for x in m.groups()))
    return res


def summary(res, n):
    total_s = max(r[2] for r in res) / 1000
    return (n * KERNELS / total_s, max(r[0] for r in res), max(r[1] for r in res))


def main():
    for exe in (EMU, MPS, SPIN):
        if not os.access(exe, os.X_OK):
            sys.exit(f"mps-sharing: {exe} is not built")
    tmp = tempfile.mkdtemp(prefix="bench-mps-")
    state = os.path.join(tmp, "machine")
    subprocess.run([EMU, "--state", state, "init", "--gpus", "1", "--model", "H100"],
                   check=True, capture_output=True)
    env = dict(os.environ, ACCEL_EMU_STATE=state,
               LD_LIBRARY_PATH=os.path.join(BUILD, "src/emu"),
               CUDA_MPS_PIPE_DIRECTORY=os.path.join(tmp, "pipe"),
               CUDA_MPS_LOG_DIRECTORY=os.path.join(tmp, "log"))
    outside = dict(env, CUDA_MPS_PIPE_DIRECTORY=os.path.join(tmp, "no-daemon"))
    probe = subprocess.run([SPIN, "1", "--blocks", "1"], env=outside, capture_output=True,
                           text=True).stdout
    sms = int(SMS.search(probe).group(2))
    print(f"{KERNELS} kernels per client, each {KERNEL_MS} ms filling 1/clients of {sms} SMs; "
          f"emulator's model\n")
    print("| clients | mode | kernels/s (all clients) | p50 latency | p99 latency |")
    print("|---|---|---|---|---|")
    for n in (2, 4):
        blocks = 2 * sms // n  # 1024-thread blocks, 2 per SM: 1/n of the GPU, one wave
        ts = summary(clients(outside, n, blocks), n)
        subprocess.run([MPS, "-d"], env=env, check=True, capture_output=True)
        try:
            subprocess.run([MPS], env=env, input=f"set_default_active_thread_percentage "
                           f"{100 // n}\n", check=True, capture_output=True, text=True)
            mps = summary(clients(env, n, blocks), n)
        finally:
            subprocess.run([MPS], env=env, input="quit\n", capture_output=True, text=True)
        for mode, (tput, p50, p99) in (("time-slicing", ts), ("MPS", mps)):
            print(f"| {n} | {mode} | {tput:.0f} | {p50:.2f} ms | {p99:.2f} ms |")
        print(f"| {n} | MPS / time-slicing | {mps[0] / ts[0]:.2f}x | "
              f"{100 * (1 - mps[1] / ts[1]):.0f} % lower | {100 * (1 - mps[2] / ts[2]):.0f} % "
              f"lower |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
