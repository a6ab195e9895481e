#!/usr/bin/env python3
"""test-accelctl-top — `accelctl top` on an emulated 2-GPU machine with three processes holding
memory (tests/emu/emu-hold), one of them in a pod (its /proc/PID/cgroup faked under
--proc-root, as the kubelet's systemd driver names it):

- --once prints one frame: both GPUs with their memory, each holder's pid and memory under its
  GPU, the pod's process named by pod UID and container ID, the others "host"; --sort pid
  orders them; bad options exit 2 naming the option; without a terminal the live mode says
  to use --once.
- A process kept busy on GPU 1 (tests/emu/spin) shows its SM utilization in percent on its
  row, from NVML's per-process samples (read into a buffer at least as large as the driver's
  own sample buffer: the emulated NVML, like an H200's, refuses a smaller one).
- In a real terminal (tmux; skipped where tmux is missing): the frame appears with the GPUs and
  holders; after a resize to 60 columns every line fits and the utilization bar is gone; `s`
  switches the sort key; `q` ends it with exit status 0 and the alternate screen left (the
  pane shows the shell's screen again, not the frame); SIGTERM in a second run ends it with
  128+15 and the terminal restored likewise.

Every wait is bounded. Prints TAP."""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import Tap  # noqa: E402

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
ACCELCTL = os.path.join(BUILD, "src", "cli", "accelctl")
EMU = os.path.join(BUILD, "src", "emu", "accel-emu")
EMU_NVML = os.path.join(BUILD, "src", "emu", "libnvidia-ml.so.1")
HOLD = os.path.join(BUILD, "tests", "emu", "emu-hold")
SPIN = os.path.join(BUILD, "tests", "emu", "spin")
POD = "7f3a1c2e-5b6d-4e8f-9a0b-1c2d3e4f5a6b"
CID = "c0ffee" + "0" * 58
T = 15


def wait_until(cond, timeout=T):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    return cond()


def main():
    for exe in (ACCELCTL, EMU, EMU_NVML, HOLD, SPIN):
        if not os.path.exists(exe):
            print(f"1..0 # SKIP {exe} is not built")
            return 77
    tap = Tap()
    tmp = tempfile.mkdtemp(prefix="accelctl-top-")
    state = os.path.join(tmp, "machine")
    proc = os.path.join(tmp, "proc")
    subprocess.run([EMU, "--state", state, "init", "--gpus", "2"], check=True,
                   capture_output=True, timeout=T)
    env = dict(os.environ, ACCEL_EMU_STATE=state,
               LD_LIBRARY_PATH=os.path.join(BUILD, "src", "emu"))
    holds = []
    try:
        pids = {}
        for gpu, mib, in_pod in ((0, 512, True), (0, 256, False), (1, 128, False)):
            h = subprocess.Popen([HOLD, str(gpu), str(mib)], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            holds.append(h)
            line = h.stdout.readline()
            if line != f"ready {h.pid}\n":
                tap.ok(False, "emu-hold started", line)
                return 1
            pids[(gpu, mib)] = h.pid
            d = os.path.join(proc, str(h.pid))
            os.makedirs(d)
            with open(os.path.join(d, "cgroup"), "w") as f:
                if in_pod:
                    f.write("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
                            f"pod{POD.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n")
                else:
                    f.write("0::/user.slice/user-0.slice/session-1.scope\n")
        args = ["top", "--nvml", EMU_NVML, "--proc-root", proc, "--pod-resources-socket", ""]
        once(tap, env, args, pids)
        busy(tap, env, args)
        live(tap, env, args, pids, tmp)
    finally:
        for h in holds:
            h.stdin.close()
            h.wait(timeout=T)
            h.stdout.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return tap.done()


def once(tap, env, args, pids):
    p = subprocess.run([ACCELCTL, *args, "--once"], env=env, capture_output=True, text=True,
                       timeout=T)
    out = p.stdout
    lines = out.splitlines()
    gpu_lines = [i for i, ln in enumerate(lines) if ln.startswith("GPU ")]
    tap.ok(p.returncode == 0 and "2 GPUs" in lines[0] and len(gpu_lines) == 2 and
           all("mem " in lines[i] and " ok" in lines[i] for i in gpu_lines),
           "--once: one frame, both GPUs with memory and health", out + p.stderr)
    if len(gpu_lines) != 2:
        return
    g0 = "\n".join(lines[gpu_lines[0]:gpu_lines[1]])
    g1 = "\n".join(lines[gpu_lines[1]:])
    pod_pid, host_pid, other = pids[(0, 512)], pids[(0, 256)], pids[(1, 128)]
    tap.ok(f" {pod_pid} " in g0 and f" {host_pid} " in g0 and f" {other} " in g1 and
           f" {other} " not in g0, "each holder's pid under its own GPU", out)
    # what the emulated driver says each holds (its allocation plus the context's cost)
    st = json.loads(subprocess.run([EMU, "status", "--json"], env=env, capture_output=True,
                                   text=True, timeout=T).stdout)
    held = {p["pid"]: p["memory_bytes"] for g in st["gpus"] for p in g["processes"]}

    def mib(pid):
        return f"{held.get(pid, 0) / 1048576:.2f} MiB"
    row = next((ln for ln in g0.splitlines() if f" {pod_pid} " in ln), "")
    tap.ok(mib(pod_pid) in row and f"pod {POD[:8]} ctr {CID[:12]}" in row,
           "the pod's process: its memory (as NVML has it), pod UID and container ID from its "
           "cgroup", (row, mib(pod_pid)))
    row = next((ln for ln in g0.splitlines() if f" {host_pid} " in ln), "")
    tap.ok(mib(host_pid) in row and row.rstrip().endswith("host"),
           "a process outside pods: its memory, host", (row, mib(host_pid)))
    first = [ln for ln in g0.splitlines() if ln.strip()[:1].isdigit()]
    tap.ok(len(first) == 2 and f" {pod_pid} " in first[0],
           "sorted by memory by default (512 MiB first)", first)
    p = subprocess.run([ACCELCTL, *args, "--once", "--sort", "pid"], env=env,
                       capture_output=True, text=True, timeout=T)
    rows = [ln.split()[0] for ln in p.stdout.splitlines() if ln.strip()[:1].isdigit()]
    tap.ok(p.returncode == 0 and rows[:2] == sorted(rows[:2], key=int),
           "--sort pid orders the processes by pid", p.stdout)
    p = subprocess.run([ACCELCTL, "top", "--interval", "0"], env=env, capture_output=True,
                       text=True, timeout=T)
    tap.ok(p.returncode == 2 and "--interval" in p.stderr, "a bad --interval: exit 2, named",
           (p.returncode, p.stderr))
    p = subprocess.run([ACCELCTL, "top", "--sort", "size"], env=env, capture_output=True,
                       text=True, timeout=T)
    tap.ok(p.returncode == 2 and "--sort" in p.stderr, "a bad --sort: exit 2, named",
           (p.returncode, p.stderr))
    p = subprocess.run([ACCELCTL, *args], env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=T)
    tap.ok(p.returncode == 1 and "--once" in p.stderr,
           "live mode without a terminal: exit 1, says to use --once", (p.returncode, p.stderr))


def busy(tap, env, args):
    """A process launching kernels back to back on GPU 1: its row shows a figure in percent
    once a sample period with its work has ended."""
    p = subprocess.Popen([SPIN, "10", "--go", "--repeat", "100000", "--device", "1"], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    row = ""
    try:
        line = p.stdout.readline()
        while line and "ready" not in line:  # "# ready" once its context exists
            line = p.stdout.readline()
        if "ready" not in line:
            tap.ok(False, "spin got ready on GPU 1", line)
            return
        p.stdin.write("\n")
        p.stdin.flush()

        def util_row():
            nonlocal row
            out = subprocess.run([ACCELCTL, *args, "--once"], env=env, capture_output=True,
                                 text=True, timeout=T).stdout
            g1 = out[out.find("GPU 1"):] if "GPU 1" in out else ""
            row = next((ln for ln in g1.splitlines() if ln.split()[:1] == [str(p.pid)]), "")
            return any(c.endswith("%") and c[:-1].isdigit() and int(c[:-1]) > 0
                       for c in row.split()[1:])
        tap.ok(wait_until(util_row), "a busy process: its SM utilization in percent on its row",
               row)
    finally:
        p.terminate()
        p.wait(timeout=T)
        p.stdout.close()
        p.stdin.close()


def tmux(sock, *a):
    return subprocess.run(["tmux", "-S", sock, *a], capture_output=True, text=True, timeout=T)


def pane(sock):
    return tmux(sock, "capture-pane", "-p", "-t", "top").stdout


def exit_status(rcfile):
    try:
        with open(rcfile) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def children(pid):
    """The pane shell's child processes (accelctl)."""
    out = []
    if not pid.isdigit():
        return out
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def live(tap, env, args, pids, tmp):
    if not shutil.which("tmux"):
        tap.skip("accelctl top in a real terminal", "tmux is not installed")
        return
    sock = os.path.join(tmp, "tmux.sock")
    # accelctl's own exit status goes to a file: tmux's pane status is unreliable when the
    # sanitizer build's leak check stops the process at exit
    rcfile = os.path.join(tmp, "rc")
    cmd = shlex.join([ACCELCTL, *args, "--interval", "0.2"]) + f"; echo $? > {rcfile}"

    conf = os.path.join(tmp, "tmux.conf")
    with open(conf, "w") as f:
        f.write("set -g remain-on-exit on\n")  # keep the pane to read its exit status

    def start():
        tmux(sock, "kill-server")
        # kill-server returns before the old server has gone: a new-session on its socket can
        # reach the dying server and fail (seen under load), so the new server gets a fresh one
        if os.path.exists(sock):
            os.unlink(sock)
        if os.path.exists(rcfile):
            os.unlink(rcfile)
        return tmux(sock, "-f", conf, "new-session", "-d", "-s", "top", "-x", "120", "-y", "30",
                    "-e", f"ACCEL_EMU_STATE={env['ACCEL_EMU_STATE']}",
                    "-e", f"LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']}", cmd)
    try:
        r = start()
        if r.returncode != 0:
            tap.ok(False, "tmux session started", r.stderr)
            return
        pod_pid = pids[(0, 512)]
        shown = wait_until(lambda: "GPU 1" in pane(sock) and f" {pod_pid} " in pane(sock))
        screen = pane(sock)
        tap.ok(shown and "q quit" in screen and "[" in screen,
               "in a terminal: the frame with both GPUs, their bars and the holders", screen)
        tmux(sock, "resize-window", "-t", "top", "-x", "60", "-y", "20")
        narrow = wait_until(lambda: (lambda s: "GPU 0" in s and "[" not in s and
                                     all(len(ln) <= 60 for ln in s.splitlines()))(pane(sock)))
        tap.ok(narrow, "resized to 60 columns: every line fits, the bar is dropped", pane(sock))
        tmux(sock, "send-keys", "-t", "top", "s")
        tap.ok(wait_until(lambda: "sort: util" in pane(sock)), "s switches the sort key",
               pane(sock))
        tmux(sock, "send-keys", "-t", "top", "q")
        st = wait_until(lambda: exit_status(rcfile))
        after = pane(sock)
        tap.ok(st == "0" and "GPU 0" not in after,
               "q: exit 0, the alternate screen left (the frame is gone)", (st, after))
        # SIGTERM: restored as well, exit 128+15
        r = start()
        if not tap.ok(r.returncode == 0 and wait_until(lambda: "GPU 1" in pane(sock)),
                      "a second run shows its frame", (r.stderr, pane(sock))):
            return
        shell = tmux(sock, "list-panes", "-t", "top", "-F", "#{pane_pid}").stdout.strip()
        for pid in children(shell):
            os.kill(pid, 15)
        st = wait_until(lambda: exit_status(rcfile))
        tap.ok(st == "143" and "GPU 0" not in pane(sock),
               "SIGTERM: exit 143, the terminal restored", (st, pane(sock)))
    finally:
        tmux(sock, "kill-server")


if __name__ == "__main__":
    sys.exit(main())
