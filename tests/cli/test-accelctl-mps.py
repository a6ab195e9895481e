#!/usr/bin/env python3
"""test-accelctl-mps — `accelctl mps` against the emulated nvidia-cuda-mps-control: a running
daemon's pid, defaults (thread percentage, pinned memory per device) and servers as the daemon
reports them; a directory with no daemon reads "down" and exit 1; a hung daemon (SIGSTOP) reads
"not answering" within the command deadline instead of hanging the CLI; on an emulated machine,
each client with its pod and container (cgroup under --proc-root) and a server in FAULT after a
fatal XID. Prints TAP."""
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


EMU = os.path.join(BUILD, "src", "emu", "accel-emu")
HOLD = os.path.join(BUILD, "tests", "emu", "emu-hold")
POD = "5d1c0f3a-2b4e-4c6d-8e9f-0a1b2c3d4e5f"
CID = "ab" * 32


def clients(ok):
    """A second daemon on an emulated machine: a client in a pod (its cgroup faked under
    --proc-root) and one on the host, then a fatal XID: the server reads FAULT."""
    if not (os.path.exists(EMU) and os.path.exists(HOLD)):
        ok(True, "clients # SKIP the emulator is not built")
        return
    state = os.path.join(TMP, "machine")
    subprocess.run([EMU, "--state", state, "init", "--gpus", "1"], check=True,
                   capture_output=True, timeout=30)
    pipe = os.path.join(TMP, "pipe2")
    env = dict(ENV, ACCEL_EMU_STATE=state, CUDA_MPS_PIPE_DIRECTORY=pipe,
               LD_LIBRARY_PATH=os.path.join(BUILD, "src", "emu"))
    subprocess.run([MPS, "-d"], env=env, check=True, capture_output=True, timeout=30)
    proc = os.path.join(TMP, "proc")
    holds = []
    try:
        for in_pod in (True, False):
            h = subprocess.Popen([HOLD, "0", "4"], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            holds.append(h)
            h.stdout.readline()
            os.makedirs(os.path.join(proc, str(h.pid)))
            with open(os.path.join(proc, str(h.pid), "cgroup"), "w") as f:
                f.write(f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/"
                        f"cri-containerd-{CID}.scope\n" if in_pod else "0::/user.slice\n")
        cmd = [ACCELCTL, "mps", "--mps-control", MPS, "--proc-root", proc, pipe]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
        ok("no device" not in out and "device 0: " not in out,
           "one device, no pinned limit: none listed (the daemon's \"no device 1\" ends the list)")
        ok(f"client {holds[0].pid}: pod {POD}, container {CID}" in out and
           f"client {holds[1].pid}: not in a pod" in out and "status: ACTIVE" in out,
           "clients with their pod and container (from their cgroup), the server ACTIVE")
        subprocess.run([EMU, "--state", state, "xid", "0", "43"], check=True,
                       capture_output=True, timeout=30)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
        ok("status: FAULT (a fatal GPU error hit its clients" in out,
           "after a fatal XID: the server's status FAULT, explained")
    finally:
        for h in holds:
            h.stdin.close()
            h.wait(timeout=30)
            h.stdout.close()
        subprocess.run([MPS], input="quit\n", env=env, capture_output=True, text=True,
                       timeout=30)


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

        clients(ok)

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
