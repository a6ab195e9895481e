#!/usr/bin/env python3
"""test-accelctl-mps — `accelctl mps` against the emulated nvidia-cuda-mps-control: a running
daemon's pid, defaults (thread percentage, pinned memory per device) and servers as the daemon
reports them; a directory with no daemon reads "down" and exit 1; a hung daemon (SIGSTOP) reads
"not answering" within the command deadline instead of hanging the CLI. Prints TAP."""
import os
import signal
import subprocess
import sys
import tempfile

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
ACCELCTL = os.path.join(BUILD, "src", "cli", "accelctl")
MPS = os.path.join(BUILD, "src", "emu", "nvidia-cuda-mps-control")
TMP = tempfile.mkdtemp(prefix="test-accelctl-mps-")
PIPE = os.path.join(TMP, "pipe")
ENV = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=PIPE, CUDA_MPS_LOG_DIRECTORY=os.path.join(TMP, "log"))
ENV.pop("ACCEL_EMU_STATE", None)


def ctl(cmd):
    p = subprocess.run([MPS], input=cmd + "\n", env=ENV, capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stdout


def accelctl(*dirs):
    p = subprocess.run([ACCELCTL, "mps", "--mps-control", MPS, *dirs], capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout


def main():
    n = 0
    failed = 0

    def ok(cond, what):
        nonlocal n, failed
        n += 1
        print(("ok" if cond else "not ok") + f" {n} - {what}")
        failed += 0 if cond else 1

    if not os.path.exists(MPS):
        print("1..0 # SKIP no emulated nvidia-cuda-mps-control")
        return 77
    r = subprocess.run([MPS, "-d"], env=ENV, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        print("Bail out! cannot start the emulated daemon: " + r.stderr)
        return 1
    with open(os.path.join(PIPE, "nvidia-cuda-mps-control.pid")) as f:
        dpid = int(f.read().strip())
    try:
        ctl("set_default_active_thread_percentage 25")
        ctl("set_default_device_pinned_mem_limit 1 2G")
        ctl(f"start_server -uid {os.getuid()}")
        _, servers = ctl("get_server_list")
        spid = servers.split()[0] if servers.split() else "?"
        rc, out = accelctl(PIPE)
        ok(rc == 0, "a running daemon: exit 0")
        ok(f"state: up (control daemon pid {dpid})" in out, "daemon pid from its pid file")
        ok("default active thread percentage: 25.0" in out, "default thread percentage")
        ok("default pinned memory limit, device 1: 2G" in out and "device 0:" not in out,
           "pinned limit of device 1 only (device 0 has none)")
        ok(f"server {spid}:" in out and "active thread percentage: 25.0" in out.split(
            f"server {spid}:")[-1], "the server and its thread percentage")

        missing = os.path.join(TMP, "nothing")
        rc, out = accelctl(missing, PIPE)
        ok(rc == 1 and "state: down" in out and "state: up" in out,
           "no daemon: down, exit 1; the other directory still shown")

        os.kill(dpid, signal.SIGSTOP)
        try:
            rc, out = accelctl(PIPE)
        finally:
            os.kill(dpid, signal.SIGCONT)
        ok(rc == 1 and "not answering" in out, "a stopped daemon: not answering, exit 1")
    finally:
        ctl("quit")
    print(f"1..{n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
