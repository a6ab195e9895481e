#!/usr/bin/env python3
"""test-mps — the emulated nvidia-cuda-mps-control: `-d` starts a daemon in a temp pipe dir
and returns once it accepts commands; a second `-d` on the same dir is refused with a clear
message; commands sent through stdin get the replies NVIDIA's tool gives (server list,
thread percentage, pinned memory limits, per-server forms); bad commands are refused and
change nothing; the settings are published to the emulated machine (accel-emu status --json);
`quit` and SIGTERM stop the daemon and its servers and clean the pipe dir. Prints TAP.

Processes that exit here may linger as zombies when the sandbox's init does not reap them,
so "gone" means: no such pid, or a zombie."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
MPS = os.path.join(BUILD, "src", "emu", "nvidia-cuda-mps-control")
EMU = os.path.join(BUILD, "src", "emu", "accel-emu")
HOLD = os.path.join(BUILD, "tests", "emu", "emu-hold")
TMP = tempfile.mkdtemp(prefix="test-mps-")

results = []


def case(name):
    def wrap(fn):
        results.append((name, fn))
        return fn
    return wrap


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Skipped(Exception):
    pass


def skip(why):
    raise Skipped(why)


def env_for(pipe, log, state=None):
    env = dict(os.environ)
    env["CUDA_MPS_PIPE_DIRECTORY"] = pipe
    env["CUDA_MPS_LOG_DIRECTORY"] = log
    if state:
        env["ACCEL_EMU_STATE"] = state
    else:
        env.pop("ACCEL_EMU_STATE", None)
    return env


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_until(cond, timeout_s=10.0):
    """A bound on waiting for a condition another process makes true, not a timing check."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


class Daemon:
    def __init__(self, name, state=None):
        self.pipe = os.path.join(TMP, name, "pipe")
        self.log = os.path.join(TMP, name, "log")
        self.env = env_for(self.pipe, self.log, state)

    def start(self):
        p = subprocess.run([MPS, "-d"], env=self.env, capture_output=True, text=True,
                           timeout=30)
        return p.returncode, p.stderr

    def pid(self):
        with open(os.path.join(self.pipe, "nvidia-cuda-mps-control.pid")) as f:
            return int(f.read())

    def send(self, *lines):
        p = subprocess.run([MPS], env=self.env, input="".join(l + "\n" for l in lines),
                           capture_output=True, text=True, timeout=30)
        return p.returncode, p.stdout, p.stderr


STATE = os.path.join(TMP, "machine")


@case("-d starts the daemon; a second -d on the same pipe dir is refused")
def _():
    subprocess.run([EMU, "--state", STATE, "init", "--gpus", "2"], check=True,
                   capture_output=True, timeout=30)
    d = Daemon("a", STATE)
    rc, err = d.start()
    check(rc == 0, f"-d rc {rc}: {err}")
    pid = d.pid()
    check(not gone(pid), "daemon not running")
    check(os.path.exists(os.path.join(d.pipe, "control")), "no control socket")
    rc, err = d.start()
    check(rc == 1, f"second -d rc {rc}")
    check("already running" in err and d.pipe in err and str(pid) in err, f"message: {err}")
    check(d.pid() == pid, "pid file replaced")
    rc, out, err = d.send("quit")
    check(rc == 0, f"quit: {rc} {err}")
    check(wait_until(lambda: gone(pid)), "daemon did not exit on quit")
    check(not os.path.exists(os.path.join(d.pipe, "control")), "socket left behind")
    log = open(os.path.join(d.log, "control.log")).read()
    check("Starting control daemon" in log and "Cmd:quit" in log, "control.log:\n" + log)


@case("defaults: thread percentage and pinned memory limits")
def _():
    d = Daemon("b", STATE)
    check(d.start()[0] == 0, "start")
    try:
        rc, out, err = d.send("get_default_active_thread_percentage")
        check(rc == 0 and out == "100.0\n", f"default pct: {rc} {out!r} {err}")
        rc, out, _ = d.send("set_default_active_thread_percentage 25.5",
                            "get_default_active_thread_percentage")
        check(rc == 0 and out == "25.5\n25.5\n", f"set pct: {out!r}")
        rc, out, _ = d.send("get_default_device_pinned_mem_limit 1")
        check(rc == 0 and out == "0\n", f"default limit: {out!r}")
        rc, out, _ = d.send("set_default_device_pinned_mem_limit 1 2G",
                            "get_default_device_pinned_mem_limit 1",
                            "set_default_device_pinned_mem_limit 0 1536M",
                            "get_default_device_pinned_mem_limit 0")
        check(rc == 0 and out == "2G\n1536M\n", f"limits: {out!r}")
        # published to the emulated machine for libcuda
        s = json.loads(subprocess.run([EMU, "--state", STATE, "status", "--json"],
                                      capture_output=True, text=True, timeout=30).stdout)
        m = [x for x in s["mps"] if x["pipe_dir"] == d.pipe]
        check(len(m) == 1 and m[0]["pid"] == d.pid(), f"mps section {s['mps']}")
        check(m[0]["default_active_thread_percentage"] == 25.5, "published pct")
    finally:
        d.send("quit")


@case("servers: start, per-server settings, list, shutdown")
def _():
    d = Daemon("c", STATE)
    check(d.start()[0] == 0, "start")
    try:
        d.send("set_default_active_thread_percentage 40",
               "set_default_device_pinned_mem_limit 0 1G")
        rc, out, _ = d.send("get_server_list")
        check(rc == 0 and out == "", f"empty list: {out!r}")
        uid = str(os.getuid())
        rc, out, err = d.send(f"start_server -uid {uid}")
        check(rc == 0, f"start_server: {err}")
        rc, out, _ = d.send("get_server_list")
        pids = [int(x) for x in out.split()]
        check(len(pids) == 1 and not gone(pids[0]), f"server list {out!r}")
        spid = pids[0]
        rc, out, err = d.send(f"start_server -uid {uid}")
        check(rc == 0 and "already running" in out, f"second server same uid: {rc} {out!r}")
        # a server starts with the defaults of its start; later defaults do not touch it
        d.send("set_default_active_thread_percentage 90")
        rc, out, _ = d.send(f"get_active_thread_percentage {spid}",
                            f"get_device_pinned_mem_limit {spid} 0")
        check(out == "40.0\n1G\n", f"server settings: {out!r}")
        rc, out, _ = d.send(f"set_active_thread_percentage {spid} 10",
                            f"set_device_pinned_mem_limit {spid} 1 512M",
                            f"get_active_thread_percentage {spid}",
                            f"get_device_pinned_mem_limit {spid} 1",
                            f"get_server_status {spid}")
        check(rc == 0 and out == "10.0\n10.0\n512M\nACTIVE\n", f"per-server: {out!r}")
        # a process using an emulated GPU is a client of its user's server
        hold = subprocess.Popen([HOLD, "1", "4"], env=d.env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        try:
            line = hold.stdout.readline()
            check(line == f"ready {hold.pid}\n", f"emu-hold: {line!r}")
            rc, out, _ = d.send(f"get_client_list {spid}")
            check(rc == 0 and out == f"{hold.pid}\n", f"client list: {out!r}")
            uuid1 = json.loads(subprocess.run([EMU, "--state", STATE, "status", "--json"],
                                              capture_output=True, text=True,
                                              timeout=30).stdout)["gpus"][1]["uuid"]
            rc, out, _ = d.send("get_device_client_list", f"get_device_client_list {spid}")
            check(out == f"{uuid1} {hold.pid}\n" * 2, f"device client list: {out!r}")
        finally:
            hold.stdin.close()
            hold.wait(timeout=30)
        rc, out, _ = d.send("get_active_thread_percentage 1")
        check(rc == 0 and "no MPS server" in out, f"unknown server: {rc} {out!r}")
        rc, out, _ = d.send(f"shutdown_server {spid}")
        check(rc == 0, "shutdown_server")
        check(wait_until(lambda: gone(spid)), "server still running")
        rc, out, _ = d.send("get_server_list")
        check(out == "", f"list after shutdown: {out!r}")
    finally:
        d.send("quit")


@case("bad commands are refused, named, and change nothing")
def _():
    d = Daemon("d", STATE)
    check(d.start()[0] == 0, "start")
    try:
        d.send("set_default_active_thread_percentage 60")
        bad = [
            ("frobnicate", "unknown command 'frobnicate'"),
            ("set_default_active_thread_percentage 150", "'150'"),
            ("set_default_active_thread_percentage 0", "'0'"),
            ("set_default_active_thread_percentage abc", "'abc'"),
            ("set_default_active_thread_percentage", "usage"),
            ("set_default_device_pinned_mem_limit 0 12Q", "'12Q'"),
            ("set_default_device_pinned_mem_limit 7 1G", "no device 7"),
            ("get_default_device_pinned_mem_limit x", "'x'"),
            ("start_server -gid 0", "'-gid'"),
            ("shutdown_server 0", "'0'"),
            ("shutdown_server 12345 -x", "'-x'"),
            ("quit -t soon", "'soon'"),
        ]
        for line, word in bad:
            rc, out, err = d.send(line)
            # the front end reached the daemon: exit 0, the reply says it failed
            check(rc == 0 and word in out, f"{line!r}: rc {rc} reply {out!r}")
        rc, out, _ = d.send("get_default_active_thread_percentage",
                            "get_default_device_pinned_mem_limit 0")
        check(out == "60.0\n0\n", f"settings changed: {out!r}")
        check(not gone(d.pid()), "daemon died")
    finally:
        d.send("quit")


@case("SIGTERM stops the daemon and its servers; works without an emulated machine")
def _():
    d = Daemon("e", None)
    rc, err = d.start()
    check(rc == 0, f"start without machine: {err}")
    d.send(f"start_server -uid {os.getuid()}")
    rc, out, _ = d.send("get_server_list")
    spid = int(out.split()[0])
    pid = d.pid()
    os.kill(pid, signal.SIGTERM)
    check(wait_until(lambda: gone(pid)), "daemon ignored SIGTERM")
    check(wait_until(lambda: gone(spid)), "server outlived the daemon")
    check(not os.path.exists(os.path.join(d.pipe, "nvidia-cuda-mps-control.pid")), "pid file")
    rc, out, err = d.send("get_server_list")
    check(rc == 1 and "no MPS control daemon" in err, f"client without daemon: {rc} {err}")
    # the pipe dir is free again
    check(d.start()[0] == 0, "restart after SIGTERM")
    d.send("quit")

CLIENT = os.path.join(BUILD, "tests", "emu", "emu-mps-client")


def run_client(env, *mibs):
    p = subprocess.run([CLIENT, "0"] + [str(m) for m in mibs], env=env, capture_output=True,
                       text=True, timeout=30)
    check(p.returncode == 0, f"emu-mps-client: {p.returncode} {p.stderr}")
    lines = p.stdout.split("\n")
    return lines[:len(mibs)], int(lines[len(mibs)].split()[1])


@case("a client's pinned memory limit holds; cuMemGetInfo shows the whole device; "
      "the client's env only tightens it")
def _():
    # MPS guide, "Appendix: Environment Variables" (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) and
    # "Tools and Interface Reference" (set_default_device_pinned_mem_limit)
    d = Daemon("limits", STATE)
    # what a process outside MPS sees as the device's total
    _, total = run_client(dict(d.env, CUDA_MPS_PIPE_DIRECTORY=os.path.join(TMP, "nobody")), 1)
    check(d.start()[0] == 0, "start")
    oom = "error 2"  # CUDA_ERROR_OUT_OF_MEMORY
    try:
        rc, out, _ = d.send("set_default_device_pinned_mem_limit 0 100M")
        check(rc == 0, f"set limit: {out!r}")
        res, seen = run_client(d.env, 60, 60, 30)
        check(res == ["ok", oom, "ok"], f"client of a 100M daemon: {res}")
        check(seen == total, f"cuMemGetInfo total {seen}, outside MPS {total}")
        env = dict(d.env, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=1G")  # cannot loosen
        res, _ = run_client(env, 60, 60)
        check(res == ["ok", oom], f"client raising its own limit: {res}")
        env = dict(d.env, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=50MB")  # tightens
        res, _ = run_client(env, 60, 40)
        check(res == [oom, "ok"], f"client lowering its limit: {res}")
        # not a client: no daemon on its pipe directory, no limit
        env = dict(d.env, CUDA_MPS_PIPE_DIRECTORY=os.path.join(TMP, "nobody"))
        res, _ = run_client(env, 60, 60)
        check(res == ["ok", "ok"], f"process without a daemon: {res}")
        # a running server's own limit, set above the default, is what its clients get
        rc, out, err = d.send(f"start_server -uid {os.getuid()}")
        check(rc == 0, f"start_server: {err}")
        spid = int(d.send("get_server_list")[1].split()[0])
        d.send(f"set_device_pinned_mem_limit {spid} 0 200M")
        res, _ = run_client(d.env, 60, 60, 60, 60)
        check(res == ["ok", "ok", "ok", oom], f"client of a 200M server: {res}")
    finally:
        d.send("quit")


@case("a client in a container (its own pid namespace, the pipe directory at another path) "
      "is still its daemon's client, capped")
def _():
    # a container's client cannot see the daemon's pid (kill(2) says ESRCH there) and has the
    # pipe directory bind-mounted elsewhere (acceld's CDI mount): it knows its daemon by the
    # pid file in the directory and a live one by its control socket, as a real client connects
    if os.geteuid() != 0 or not shutil.which("unshare"):
        skip("needs root and unshare(1) for a pid namespace")
    d = Daemon("container", STATE)
    check(d.start()[0] == 0, "start")
    oom = "error 2"
    try:
        rc, out, _ = d.send("set_default_device_pinned_mem_limit 0 100M")
        check(rc == 0, f"set limit: {out!r}")
        other = os.path.join(TMP, "container-pipe-elsewhere")
        os.symlink(d.pipe, other)
        env = dict(d.env, CUDA_MPS_PIPE_DIRECTORY=other)
        p = subprocess.run(["unshare", "--pid", "--fork", CLIENT, "0", "60", "60"], env=env,
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 0, f"emu-mps-client: {p.returncode} {p.stderr}")
        res = p.stdout.split("\n")[:2]
        check(res == ["ok", oom], f"a client in its own pid namespace: {res}")
    finally:
        d.send("quit")


@case("CUDA_VISIBLE_DEVICES: the daemon's device 0 is the GPU it names; limits land there")
def _():
    # CUDA C++ Programming Guide, CUDA Environment Variables (CUDA_VISIBLE_DEVICES)
    uuid1 = json.loads(subprocess.run([EMU, "--state", STATE, "status", "--json"],
                                      capture_output=True, text=True,
                                      timeout=30).stdout)["gpus"][1]["uuid"]
    d = Daemon("visible", STATE)
    d.env["CUDA_VISIBLE_DEVICES"] = uuid1
    check(d.start()[0] == 0, "start")
    oom = "error 2"
    try:
        rc, out, _ = d.send("set_default_device_pinned_mem_limit 0 100M")
        check(rc == 0 and out == "", f"set limit: {out!r}")
        rc, out, _ = d.send("set_default_device_pinned_mem_limit 1 100M")
        check(rc == 0 and "no device 1 (the daemon sees 1)" in out, f"device 1: {out!r}")
        client = dict(d.env)
        client.pop("CUDA_VISIBLE_DEVICES")

        def on(dev, *mibs):
            p = subprocess.run([CLIENT, str(dev)] + [str(m) for m in mibs], env=client,
                               capture_output=True, text=True, timeout=30)
            check(p.returncode == 0, f"emu-mps-client: {p.returncode} {p.stderr}")
            return p.stdout.split("\n")[:len(mibs)]
        res = on(1, 60, 60)
        check(res == ["ok", oom], f"a client of GPU 1 (the daemon's device 0): {res}")
        res = on(0, 60, 60)
        check(res == ["ok", "ok"], f"a client of GPU 0 (not the daemon's): {res}")
    finally:
        d.send("quit")


@case("a fatal XID: the server is FAULT, its hit client's calls fail (810), a new client of "
      "that GPU is refused (807) until the hit client exits; other GPUs and processes outside "
      "MPS go on")
def _():
    # MPS guide, "Error Containment"; CUresult 807 CUDA_ERROR_MPS_SERVER_NOT_READY and 810
    # CUDA_ERROR_MPS_CLIENT_TERMINATED (CUDA Driver API)
    d = Daemon("fault", STATE)
    check(d.start()[0] == 0, "start")
    holds = []

    def hold(env):
        h = subprocess.Popen([HOLD, "1", "4"], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        holds.append(h)
        line = h.stdout.readline()
        check(line == f"ready {h.pid}\n", f"emu-hold: {line!r}")
        return h

    def alloc(h):
        h.stdin.write("alloc 1\n")
        h.stdin.flush()
        return h.stdout.readline().strip()

    def new_client(dev):
        p = subprocess.run([CLIENT, str(dev), "1"], env=d.env, capture_output=True, text=True,
                           timeout=30)
        return p.returncode, p.stdout.split("\n")[0], p.stderr.strip()
    try:
        rc, out, err = d.send(f"start_server -uid {os.getuid()}")
        check(rc == 0, f"start_server: {err}")
        spid = int(d.send("get_server_list")[1].split()[0])
        hit = hold(d.env)
        outside = hold(dict(d.env, CUDA_MPS_PIPE_DIRECTORY=os.path.join(TMP, "nobody")))
        check(d.send(f"get_server_status {spid}")[1] == "ACTIVE\n", "ACTIVE before")
        subprocess.run([EMU, "--state", STATE, "xid", "1", "43"], check=True,
                       capture_output=True, timeout=30)
        rc, out, _ = d.send(f"get_server_status {spid}")
        check(rc == 0 and out == "FAULT\n", f"status after XID 43: {out!r}")
        got = alloc(hit)
        check(got == "error 810", f"the hit client's next call: {got!r}")
        got = alloc(outside)
        check(got == "ok", f"a process outside MPS on that GPU: {got!r}")
        rc, _, err = new_client(1)
        check(rc == 1 and "CUresult 807" in err, f"a new client of GPU 1: {rc} {err!r}")
        rc, out, err = new_client(0)
        check(rc == 0 and out == "ok", f"a new client of GPU 0: {rc} {out!r} {err!r}")
        hit.stdin.close()
        hit.wait(timeout=30)
        rc, out, _ = d.send(f"get_server_status {spid}")
        check(out == "ACTIVE\n", f"status once the hit client exited: {out!r}")
        rc, out, err = new_client(1)
        check(rc == 0 and out == "ok", f"a new client of GPU 1 afterwards: {rc} {err!r}")
    finally:
        for h in holds:
            if h.poll() is None:
                h.stdin.close()
                h.wait(timeout=30)
            h.stdout.close()
        d.send("quit")


SPIN = os.path.join(BUILD, "tests", "emu", "spin")


def spin_line(out):
    """spin's result line: (ok, waves, blocks, sms, elapsed ms, expected ms)."""
    import re
    m = re.search(r"^(ok|not ok) 2 - \d+ cycles x (\d+) wave\(s\) \((\d+) blocks, (\d+) SMs\) "
                  r"took ([\d.]+) ms, expected ([\d.]+) ms", out, re.M)
    check(m, f"spin output: {out!r}")
    return (m.group(1) == "ok", int(m.group(2)), int(m.group(3)), int(m.group(4)),
            float(m.group(5)), float(m.group(6)))


def run_spin(env, ms, blocks=None):
    args = [SPIN, str(ms)] + (["--blocks", str(blocks)] if blocks else [])
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    return spin_line(p.stdout)


def spin_together(envs, ms, blocks):
    """Starts one spin per env, each waiting after setup; lets them all go at once."""
    procs = [subprocess.Popen([SPIN, str(ms), "--blocks", str(blocks), "--go"], env=e,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for e in envs]
    try:
        for p in procs:
            line = p.stdout.readline()
            while line and line != "# ready\n":
                line = p.stdout.readline()
            check(line == "# ready\n", "spin did not get ready")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        return [spin_line(p.communicate(timeout=60)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@case("thread percentage: a client sees floor(SMs x P / 100) SMs, a grid filling the GPU "
      "runs 100/P times longer, a one-block kernel does not; the client's env only tightens")
def _():
    # MPS guide, "Appendix: Environment Variables" (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) and the
    # kernel-duration model of docs/emulator-cuda.md ("MPS")
    d = Daemon("sm", STATE)
    outside = dict(d.env, CUDA_MPS_PIPE_DIRECTORY=os.path.join(TMP, "nobody"))
    ok, waves, _, sms, one, _ = run_spin(outside, 40)
    check(ok and waves == 1, f"outside MPS, one block: {one} ms")
    full = 2 * sms  # blocks of 1024 threads: two resident per SM
    ok, waves, _, _, base, _ = run_spin(outside, 40, full)
    check(ok and waves == 1 and abs(base - 40) < 0.5, f"outside MPS, full grid: {waves} {base}")
    check(d.start()[0] == 0, "start")
    try:
        d.send("set_default_active_thread_percentage 50")
        ok, waves, _, got, ms, _ = run_spin(d.env, 40, full)
        check(got == sms // 2, f"client at 50 %: {got} SMs of {sms}")
        check(ok and waves == 2 and abs(ms - 2 * base) < 1, f"full grid at 50 %: {waves} {ms}")
        ok, waves, _, _, ms, _ = run_spin(d.env, 40)
        check(ok and abs(ms - one) < 0.5, f"one block at 50 %: {ms} ms, outside {one}")
        raised = dict(d.env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="100")
        ok, waves, _, got, ms, _ = run_spin(raised, 40, full)
        check(got == sms // 2 and waves == 2, f"client raising its percentage: {got} SMs")
        lowered = dict(d.env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
        ok, waves, _, got, ms, _ = run_spin(lowered, 40, full)
        check(got == sms // 4 and ok and waves == 4, f"client at 25 %: {got} SMs, {waves}")
    finally:
        d.send("quit")


@case("two clients at 50 % run side by side and finish as fast as one unlimited client; "
      "processes outside MPS time-slice the GPU")
def _():
    d = Daemon("side", STATE)
    outside = dict(d.env, CUDA_MPS_PIPE_DIRECTORY=os.path.join(TMP, "nobody"))
    _, _, _, sms, _, _ = run_spin(outside, 1)
    ok, _, _, _, alone, _ = run_spin(outside, 300, 2 * sms)  # the whole GPU, one wave
    check(ok, f"one unlimited client: {alone} ms")
    check(d.start()[0] == 0, "start")
    try:
        d.send("set_default_active_thread_percentage 50")
        # each client's half of the work fills its half of the SMs once
        res = spin_together([d.env, d.env], 300, sms)
        check(all(r[0] and r[1] == 1 for r in res), f"clients: {res}")
        # within 10 %: the host time between recording the first event and the launch counts
        # (milliseconds in the sanitizer build); queued behind each other they would take 1.5x
        check(all(abs(r[4] - alone) < 0.1 * alone for r in res),
              f"clients took {[r[4] for r in res]} ms, one unlimited client {alone} ms")
    finally:
        d.send("quit")
    # outside MPS the two take turns in time slices (2 ms); a spin kernel is clock-bound
    # (%clock64 runs on while its context is switched out: as an NVIDIA H200 showed,
    # tests/gpu/timeslice.sh), so each one's events are its own 300 ms, give or take a slice
    # for its context to be resident when its clock runs out (the time slicing itself, with
    # work-bound kernels stretched, is test-cuda-driver's processes_share_the_gpu_in_time_slices)
    res = spin_together([outside, outside], 300, 2 * sms)
    ms = sorted(r[4] for r in res)
    check(ms[0] > 300 - 0.5 and ms[1] < 300 + 2 * 2 + 1,
          f"outside MPS, two spin kernels time-sliced: {ms} ms")


def main():
    if not os.access(MPS, os.X_OK) or not os.access(EMU, os.X_OK):
        print("1..0 # SKIP nvidia-cuda-mps-control is not built")
        return 77
    print(f"1..{len(results)}")
    failed = 0
    for i, (name, fn) in enumerate(results, 1):
        try:
            fn()
            print(f"ok {i} - {name}")
        except Skipped as e:
            print(f"ok {i} - {name} # SKIP {e}")
        except Exception as e:
            failed += 1
            print(f"not ok {i} - {name}")
            for line in str(e).splitlines():
                print(f"# {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
