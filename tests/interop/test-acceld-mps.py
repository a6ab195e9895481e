#!/usr/bin/python3
"""test-acceld-mps.py — acceld's time-slicing and MPS modes (issue 11) on an
emulated 4-GPU node against the python3-grpcio kubelet, each mode selected by
NVIDIA's device-plugin config format alone (`--config FILE`):

- MPS, `replicas: 2` with acceld's `perGpuReplicas` (GPU 1: `replicas: 1`,
  GPU 2: 3): IDs `<uuid>::<n>`, every replica Unhealthy until its GPU's
  daemons answer, then Healthy; Allocate of 1 and of 2 replicas (pipe and log
  directories of the daemon for that request size, /dev/shm, the GPU's nodes,
  NVIDIA_VISIBLE_DEVICES, caps k/n that equal the daemon's defaults); a
  request spanning two GPUs is refused; GetPreferredAllocation keeps a
  request on one GPU; kill -9 and SIGSTOP of a daemon and XID 79 each turn
  every replica of that GPU Unhealthy in one ListAndWatch update (and back
  after the restart); SIGTERM leaves no daemon running.
- MPS under `failRequestsGreaterThanOne: true` and `renameByDefault: true`
  (`nvidia-cuda-mps-control` found on PATH): `nvidia.com/gpu.shared`, a
  2-replica request refused with NVIDIA's meaning, one daemon per GPU; an
  unmodified CUDA program (tests/emu/emu-mps-client) run with the Allocate
  env of 1 of 4 replicas gets a quarter of the memory, and raising or
  dropping its own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT gets it no more; the spin
  program under the same env runs on a quarter of the SMs (a full-GPU grid
  takes 4 waves), also when it raises its own thread percentage; the cdi
  strategy.
- acceld killed with -9: the next one kills the daemon left behind.
- Time-slicing: replicas without daemons or caps; a 2-replica request is
  served; an XID marks all replicas of that GPU in one update.
- A config naming unknown keys is refused at start (exit 2).

Every wait is bounded; nothing asserts timing."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet as K  # noqa: E402

import grpc  # noqa: E402

T = 20
# a hung daemon is seen after a probe interval plus a reply deadline (5 s each)
T_HUNG = 40


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def gpus_of(node):
    r = subprocess.run([node.emu, "status", "--json"], env=node.env, check=True,
                       stdout=subprocess.PIPE)
    return json.loads(r.stdout)["gpus"]


def envs(resp, i=0):
    return dict(resp.container_responses[i].envs)


def mounts(resp, i=0):
    return {m.container_path: m.host_path for m in resp.container_responses[i].mounts}


def nodes(resp, i=0):
    return sorted(d.container_path for d in resp.container_responses[i].devices)


def unhealthy_gpus(update):
    return {i.split("::")[0] for i, (h, _) in update.items() if h == "Unhealthy"}


def daemon_pid(state, name):
    try:
        with open(os.path.join(state, "mps", "mps-" + name, "pipe",
                               "nvidia-cuda-mps-control.pid")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def whole_gpu_updates(watch, start, uuid, n):
    """True when every update since start shows the GPU's n replicas all
    Unhealthy or none (never a part of them)."""
    with watch.cond:
        ups = watch.updates[start:]
    for u in ups:
        bad = sum(1 for i, (h, _) in u.items() if i.startswith(uuid + "::") and h == "Unhealthy")
        if bad not in (0, n):
            return False
    return True


def main():
    build, src = K.build_paths()
    K.require_tools(build)
    control = os.path.join(build, "src/emu/nvidia-cuda-mps-control")
    if not K.Node.available(build) or not os.path.exists(control):
        K.skip_all("the emulator (and its nvidia-cuda-mps-control) is not built")
    tap = K.Tap()
    tmp = K.tmpdir()
    pb = K.gen_pb2(src, os.path.join(tmp, "pb"))
    agents = []
    try:
        mps_run(tap, build, pb, tmp, control, agents)
        fail_one_run(tap, build, pb, tmp, agents)
        crash_run(tap, build, pb, tmp, control, agents)
        fault_run(tap, build, pb, tmp, control, agents)
        time_slicing_run(tap, build, pb, tmp, agents)
        bad_config(tap, build, tmp)
    finally:
        for a in agents:
            if a.alive():
                a.stop(signal.SIGKILL)
            if tap.failed:
                tap.diag(f"acceld log ({a.log_path}):\n" + a.log_text()[-5000:])
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


def start(build, pb, tmp, sub, config, extra=(), env=None, gpus=4):
    d = os.path.join(tmp, sub)
    os.makedirs(d)
    node = K.Node(build, d, gpus=gpus, numa=",".join("0" * gpus))
    if env:
        node.env.update(env)
    pdir = os.path.join(d, "dp")
    os.makedirs(pdir)
    kubelet = K.FakeKubelet(pb, pdir).start()
    cfg = write(os.path.join(d, "config.yaml"), config)
    agent = K.Acceld(build, node, pdir, d, extra=extra, config=cfg)
    return d, node, pdir, kubelet, agent


MPS_CONFIG = """\
version: v1
flags:
  migStrategy: none
logLevel: debug        # acceld's own keys may sit next to NVIDIA's sections
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
      perGpuReplicas: {1: 1, 2: 3}
"""


def mps_run(tap, build, pb, tmp, control, agents):
    d, node, pdir, kubelet, agent = start(build, pb, tmp, "mps", MPS_CONFIG,
                                          # probed every 5 s (60 s by default): a hung
                                          # daemon and a server's FAULT are seen in time
                                          extra=("--mps-control", control,
                                                 "--mps-probe-interval", "5s"))
    agents.append(agent)
    state = os.path.join(d, "state")
    gpus = gpus_of(node)
    uuid = [g["uuid"] for g in gpus]
    mem = [g["memory_total_bytes"] for g in gpus]
    try:
        ok = K.wait_until(lambda: kubelet.count() >= 1, T)
        tap.ok(ok and kubelet.last().resource_name == "nvidia.com/gpu",
               "MPS: nvidia.com/gpu registered from NVIDIA's config format alone",
               kubelet.last() and kubelet.last().resource_name)
        if not ok:
            return
        pl = K.Plugin(pb, agent.sock)
        w = pl.watch()
        counts = [2, 1, 3, 2]
        want = {f"{uuid[g]}::{n}" for g in range(4) for n in range(counts[g])}
        first = w.wait_for(lambda u: len(u) > 0, T)
        tap.ok(first is not None and set(first) == want,
               "MPS: IDs <uuid>::<n>, per-GPU counts 2/1/3/2 (replicas: 1 on GPU 1)",
               first and sorted(first))
        up = w.wait_for(lambda u: set(u) == want and not unhealthy_gpus(u), T)
        tap.ok(up is not None, "MPS: every replica Healthy once its GPU's daemons answer",
               w.latest())
        if up is None:
            return
        names = ["gpu0-k1", "gpu0-k2", "gpu1-k1", "gpu2-k1", "gpu2-k2", "gpu2-k3", "gpu3-k1",
                 "gpu3-k2"]
        pids = {n: daemon_pid(state, n) for n in names}
        tap.ok(all(alive(p) for p in pids.values()),
               "one daemon per (GPU, request size): 8 running", pids)

        # ---- Allocate: one replica of GPU 0 (n = 2)
        r = pl.allocate([f"{uuid[0]}::1"])
        e, m = envs(r), mounts(r)
        pipe = os.path.join(state, "mps", "mps-gpu0-k1", "pipe")
        shm = (os.path.join(state, "mps", "mps-gpu0-k1", "shm") if os.geteuid() == 0
               else "/dev/shm")
        tap.ok(e.get("CUDA_MPS_PIPE_DIRECTORY") == "/run/accel-mps/pipe" and
               "CUDA_MPS_LOG_DIRECTORY" not in e and "/run/accel-mps/log" not in m and
               m.get("/run/accel-mps/pipe") == pipe and m.get("/dev/shm") == shm,
               "Allocate 1 of 2: the daemon's pipe dir (env and mount), its own /dev/shm, no "
               "log dir (issue 22, F7)", (e, m))
        tap.ok(e.get("NVIDIA_VISIBLE_DEVICES") == uuid[0] and
               "/dev/nvidia0" in nodes(r) and "/dev/nvidiactl" in nodes(r),
               "Allocate: NVIDIA_VISIBLE_DEVICES and the GPU's device nodes", (e, nodes(r)))
        tap.ok(e.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "50" and
               e.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == f"0={mem[0] // 2 >> 20}M",
               "Allocate 1 of 2: 50 % of the SMs, half the memory", e)
        out = ask(control, pipe, node.env, "get_default_active_thread_percentage")
        tap.ok(out.strip().startswith("50"), "the daemon it points at has the same default",
               out)
        accelctl = os.path.join(build, "src/cli/accelctl")
        if os.path.exists(accelctl):
            r = subprocess.run([accelctl, "mps", "--mps-control", control, pipe], env=node.env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=T)
            tap.ok(r.returncode == 0 and "state: up" in r.stdout and
                   "active thread percentage: 50" in r.stdout,
                   "accelctl mps on acceld's pipe directory: up, 50 %", r.stdout[-800:])
            r = subprocess.run([accelctl, "mps", "--mps-control", control, "--state-dir", state],
                               env=node.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=T)
            tap.ok(r.returncode == 0 and r.stdout.count("state: up") == 8 and
                   all(f"/mps-{n}/pipe:" in r.stdout for n in names),
                   "accelctl mps --state-dir: all 8 of acceld's daemons, up", r.stdout[-800:])
        else:
            tap.skip("accelctl mps on acceld's pipe directory", "accelctl not built")

        # ---- Allocate: two replicas of GPU 2 (n = 3): k/n, the k = 2 daemon
        r = pl.allocate([f"{uuid[2]}::0", f"{uuid[2]}::2"])
        e, m = envs(r), mounts(r)
        tap.ok(e.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "66" and
               e.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == f"0={mem[2] * 2 // 3 >> 20}M" and
               m.get("/run/accel-mps/pipe") == os.path.join(state, "mps", "mps-gpu2-k2", "pipe"),
               "Allocate 2 of 3 (failRequestsGreaterThanOne unset): 66 %, 2/3 of the memory, "
               "the k=2 daemon", (e, m))
        out = ask(control, os.path.join(state, "mps", "mps-gpu2-k2", "pipe"), node.env,
                  "get_default_active_thread_percentage")
        tap.ok(out.strip().startswith("66"), "that daemon's default is 66 %", out)
        try:
            pl.allocate([f"{uuid[0]}::0", f"{uuid[2]}::1"])
            tap.ok(False, "a request spanning two GPUs is refused")
        except grpc.RpcError as ex:
            tap.ok(ex.code() == grpc.StatusCode.INVALID_ARGUMENT and "one GPU" in ex.details(),
                   "a request spanning two GPUs is refused, saying why", ex.details())
        pr = pl.prefer(sorted(want), size=2)
        got = list(pr.container_responses[0].deviceIDs)
        tap.ok(len(got) == 2 and len({i.split("::")[0] for i in got}) == 1,
               "GetPreferredAllocation keeps 2 replicas on one GPU", got)

        # ---- kill -9 of GPU 2's k=1 daemon: all 3 replicas at once, then back
        mark = len(w.updates)
        old = pids["gpu2-k1"]
        os.kill(old, signal.SIGKILL)
        down = w.wait_for(lambda u: unhealthy_gpus(u) == {uuid[2]}, T)
        tap.ok(down is not None, "kill -9 of a daemon: GPU 2's replicas Unhealthy", w.latest())
        back = w.wait_for(lambda u: not unhealthy_gpus(u), T)
        new = daemon_pid(state, "gpu2-k1")
        tap.ok(back is not None and new and new != old and alive(new),
               "restarted: Healthy again with a new daemon", (old, new))
        tap.ok(down is not None and whole_gpu_updates(w, mark, uuid[2], 3),
               "every update showed GPU 2's 3 replicas all Unhealthy or none")

        # ---- SIGSTOP (hung) of GPU 0's k=2 daemon
        mark = len(w.updates)
        old = daemon_pid(state, "gpu0-k2")
        os.kill(old, signal.SIGSTOP)
        down = w.wait_for(lambda u: unhealthy_gpus(u) == {uuid[0]}, T_HUNG)
        tap.ok(down is not None, "a hung (SIGSTOPped) daemon: GPU 0's replicas Unhealthy",
               w.latest())
        back = w.wait_for(lambda u: not unhealthy_gpus(u), T_HUNG)
        new = daemon_pid(state, "gpu0-k2")
        tap.ok(back is not None and new != old and alive(new) and not alive(old),
               "the hung daemon is killed and replaced: Healthy again", (old, new))
        tap.ok(down is not None and whole_gpu_updates(w, mark, uuid[0], 2),
               "every update showed GPU 0's 2 replicas all Unhealthy or none")

        # ---- XID 79 on GPU 3: both its replicas in one update
        mark = len(w.updates)
        node.cmd("xid", 3, 79)
        down = w.wait_for(lambda u: unhealthy_gpus(u) == {uuid[3]}, T)
        tap.ok(down is not None and whole_gpu_updates(w, mark, uuid[3], 2),
               "XID 79: all replicas of that GPU Unhealthy in one update", w.latest())
        w.cancel()
        pl.close()

        # ---- the SLI file (src/nodestate/acceld-stats.h) counts the supervisor's restarts per GPU and
        # the XID's health transition
        def sli():
            try:
                with open(os.path.join(state, "acceld-stats.json")) as f:
                    st = json.load(f)
            except (OSError, ValueError):
                return None
            g = {x["uuid"]: x for x in st["gpus"]}
            return st if (g.get(uuid[2], {}).get("mpsRestarts", 0) >= 1
                         and g.get(uuid[0], {}).get("mpsRestarts", 0) >= 1
                         and g.get(uuid[3], {}).get("toUnhealthy") == 1) else None
        got = K.wait_until(sli, T, 0.05)
        tap.ok(got is not None, "SLI file: MPS restarts on GPUs 0 and 2, GPU 3's XID 79 counted",
               open(os.path.join(state, "acceld-stats.json")).read()[-3000:]
               if os.path.exists(os.path.join(state, "acceld-stats.json")) else "no file")

        # version 2+'s current state: the restarted daemons answer again (running), and GPU 3
        # is Unhealthy for its XID 79 (or, if it recovered, counted so)
        def state_v2():
            try:
                with open(os.path.join(state, "acceld-stats.json")) as f:
                    st = json.load(f)
            except (OSError, ValueError):
                return None
            g = {x["uuid"]: x for x in st["gpus"]}
            g3 = g.get(uuid[3], {})
            ok = st.get("version") == 3 and \
                all(g.get(uuid[i], {}).get("mps") == "running" for i in (0, 1, 2)) and \
                ((g3.get("healthy") is False and g3.get("reason") == "XID 79") or
                 (g3.get("healthy") is True and g3.get("toHealthy", 0) >= 1))
            return st if ok else None
        got = K.wait_until(state_v2, T, 0.05)
        tap.ok(got is not None, "SLI file: MPS daemons of GPUs 0-2 running again, GPU 3 "
               "Unhealthy with reason XID 79",
               [(x["index"], x.get("healthy"), x.get("reason"), x.get("mps"))
                for x in json.load(open(os.path.join(state, "acceld-stats.json")))["gpus"]]
               if os.path.exists(os.path.join(state, "acceld-stats.json")) else "no file")

        # ---- SIGTERM: every daemon stopped
        running = [daemon_pid(state, n) for n in names]
        rc = agent.stop(signal.SIGTERM, timeout=T)
        gone = K.wait_until(lambda: not any(p and alive(p) for p in running), T)
        tap.ok(rc == 0 and gone and not os.path.exists(agent.sock),
               "SIGTERM: exit 0, socket removed, no daemon left running",
               (rc, [p for p in running if p and alive(p)]))
    finally:
        kubelet.stop()


def client_caps(tap, build, node, env, mnt, mem, cap, dev=0):
    """An unmodified CUDA program (tests/emu/emu-mps-client) run on GPU 0 with
    the Allocate env gets its cap (bytes), and raising or dropping its own
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT gets it no more (the daemon's default
    bounds it); and it runs on its share of the SMs, which raising its own
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE does not widen (the emulator's model:
    docs/emulator-cuda.md, "MPS"). The pipe directory is the mount's host
    side: no container runtime here."""
    client = os.path.join(build, "tests/emu/emu-mps-client")
    if not os.path.exists(client):
        tap.skip("a client under the Allocate env gets its memory cap", "emu-mps-client not built")
        return
    base = dict(node.env, **env)
    base["CUDA_MPS_PIPE_DIRECTORY"] = mnt["/run/accel-mps/pipe"]
    base["LD_LIBRARY_PATH"] = os.path.join(build, "src/emu")
    cap_mib = cap >> 20
    sizes = [cap_mib - 4096, 8192, 2048]  # fits, crosses the cap, fits again
    oom = "error 2"  # CUDA_ERROR_OUT_OF_MEMORY

    def run(e):
        p = subprocess.run([client, str(dev)] + [str(x) for x in sizes], env=e, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=T)
        return p.stdout.split("\n")[:len(sizes)]
    got = run(base)
    tap.ok(got == ["ok", oom, "ok"],
           f"a client of GPU {dev} under the Allocate env: capped at {cap_mib} MiB of "
           f"{mem >> 20}", got)
    raised = dict(base, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=f"0={mem >> 20}M")
    got = run(raised)
    tap.ok(got == ["ok", oom, "ok"], "a client raising its own limit to the whole GPU: no more",
           got)
    dropped = {k: v for k, v in base.items() if not k.startswith("CUDA_MPS_PINNED")}
    got = run(dropped)
    tap.ok(got == ["ok", oom, "ok"], "a client dropping the limit from its env: no more", got)
    if dev == 0:
        sm_share(tap, build, base, int(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]))


def sm_share(tap, build, env, pct):
    """tests/emu/spin under the Allocate env: floor(SMs x pct / 100) SMs, and a
    grid filling the whole GPU once takes the waves that many SMs need."""
    spin = os.path.join(build, "tests/emu/spin")
    if not os.path.exists(spin):
        tap.skip("a client under the Allocate env gets its SM share", "spin not built")
        return
    pat = re.compile(r"^ok 2 - \d+ cycles x (\d+) wave\(s\) \(\d+ blocks, (\d+) SMs\)", re.M)

    def run(e, blocks):
        p = subprocess.run([spin, "20", "--blocks", str(blocks)], env=e, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=T)
        m = pat.search(p.stdout)
        return (int(m.group(1)), int(m.group(2))) if m else p.stdout
    outside = {k: v for k, v in env.items() if not k.startswith("CUDA_MPS")}
    whole = run(outside, 1)
    if not isinstance(whole, tuple):
        tap.ok(False, "spin outside MPS", whole)
        return
    sms = whole[1]
    share = max(1, sms * pct // 100)
    want = (2 * sms + 2 * share - 1) // (2 * share)  # 1024-thread blocks: 2 per SM
    got = run(env, 2 * sms)
    tap.ok(got == (want, share),
           f"a client under the Allocate env runs on {share} of {sms} SMs ({pct} %): a full-GPU "
           f"grid takes {want} waves", got)
    raised = dict(env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="100")
    got = run(raised, 2 * sms)
    tap.ok(got == (want, share), "a client raising its own thread percentage: no more SMs", got)


def ask(control, pipe, env, cmd):
    e = dict(env, CUDA_MPS_PIPE_DIRECTORY=pipe)
    r = subprocess.run([control], input=cmd + "\n", env=e, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=T)
    return r.stdout


FAULT_CONFIG = """\
version: v1
health:
  recoverAfter: 1s
sharing:
  mps:
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""


def fault_run(tap, build, pb, tmp, control, agents):
    """A fatal XID (43) on GPU 1 while a client runs there under the Allocate env: the
    emulated server goes to FAULT (MPS guide, "Error Containment"); acceld's probe reads it
    (get_server_status) and keeps GPU 1's replicas Unhealthy after the XID's own mark has
    recovered (recoverAfter 1 s), until the hit client exits."""
    hold_exe = os.path.join(build, "tests/emu/emu-hold")
    d, node, pdir, kubelet, agent = start(build, pb, tmp, "fault", FAULT_CONFIG,
                                          extra=("--mps-control", control,
                                                 "--mps-probe-interval", "5s"), gpus=2)
    agents.append(agent)
    uuid = [g["uuid"] for g in gpus_of(node)]
    hold = None
    try:
        if not K.wait_until(lambda: kubelet.count() >= 1, T):
            tap.ok(False, "fault: acceld registered")
            return
        pl = K.Plugin(pb, agent.sock)
        w = pl.watch()
        up = w.wait_for(lambda u: len(u) == 4 and not unhealthy_gpus(u), T)
        if up is None:
            tap.ok(False, "fault: 2 GPUs x 2 replicas Healthy", w.latest())
            return
        r = pl.allocate([f"{uuid[1]}::0"])
        env = dict(node.env, **envs(r))
        env["CUDA_MPS_PIPE_DIRECTORY"] = mounts(r)["/run/accel-mps/pipe"]
        env["LD_LIBRARY_PATH"] = os.path.join(build, "src/emu")
        hold = subprocess.Popen([hold_exe, "1", "4"], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        line = hold.stdout.readline()
        if line != f"ready {hold.pid}\n":
            tap.ok(False, "fault: a client under the Allocate env", line)
            return
        node.cmd("xid", 1, 43)
        seen = K.wait_until(lambda: "fault state" in agent.log_text(), T_HUNG)
        recovered = K.wait_until(lambda: f"GPU {uuid[1]} is Healthy again" in agent.log_text(), T)
        # both logged: the list the kubelet gets (the update may trail the log line) shows
        # GPU 1 down, the server's fault holding it after the XID's mark has cleared
        down = w.wait_for(lambda u: unhealthy_gpus(u) == {uuid[1]}, T)
        log = agent.log_text()
        after = log.split("fault state")[-1]
        tap.ok(seen and recovered and down is not None and
               f"MPS: every replica of GPU {uuid[1]} is Healthy again" not in after,
               "a fatal XID hits an MPS client: acceld reads the server's FAULT and keeps GPU 1's "
               "replicas Unhealthy after the XID's mark has recovered",
               (seen, recovered, w.latest()))
        hold.stdin.close()
        hold.wait(timeout=T)
        back = w.wait_for(lambda u: not unhealthy_gpus(u), T_HUNG)
        tap.ok(back is not None, "the hit client exits: the server is ACTIVE, Healthy again",
               w.latest())
        w.cancel()
        pl.close()
    finally:
        if hold and hold.poll() is None:
            hold.kill()
            hold.wait()
        if hold:
            hold.stdout.close()
        kubelet.stop()
        agent.stop(signal.SIGTERM, timeout=T)


FAIL_ONE_CONFIG = """\
version: v1
sharing:
  mps:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def fail_one_run(tap, build, pb, tmp, agents):
    # nvidia-cuda-mps-control found on PATH (no --mps-control)
    path = os.path.join(build, "src/emu") + ":" + os.environ.get("PATH", "")
    d, node, pdir, kubelet, agent = start(build, pb, tmp, "one", FAIL_ONE_CONFIG,
                                          extra=("--device-list-strategy", "cdi"),
                                          env={"PATH": path}, gpus=2)
    uuid = [g["uuid"] for g in gpus_of(node)]
    agents.append(agent)
    state = os.path.join(d, "state")
    try:
        ok = K.wait_until(lambda: kubelet.count() >= 1, T)
        name = kubelet.last().resource_name if ok else None
        tap.ok(name == "nvidia.com/gpu.shared", "renameByDefault: nvidia.com/gpu.shared", name)
        if not ok:
            return
        pl = K.Plugin(pb, os.path.join(pdir, "accel-nvidia.com-gpu.shared.sock"))
        w = pl.watch()
        up = w.wait_for(lambda u: len(u) == 8 and not unhealthy_gpus(u), T)
        tap.ok(up is not None, "2 GPUs x 4 replicas, all Healthy", w.latest())
        if up is None:
            return
        ids = sorted(up)
        dirs = sorted(os.listdir(os.path.join(state, "mps")))
        tap.ok(dirs == ["mps-gpu0-k1", "mps-gpu1-k1"],
               "failRequestsGreaterThanOne: one daemon per GPU (found on PATH)", dirs)
        try:
            pl.allocate(ids[:2])
            tap.ok(False, "a 2-replica request is refused under failRequestsGreaterThanOne")
        except grpc.RpcError as ex:
            tap.ok(ex.code() == grpc.StatusCode.INVALID_ARGUMENT and
                   "failRequestsGreaterThanOne" in ex.details(),
                   "a 2-replica request is refused, naming failRequestsGreaterThanOne",
                   ex.details())
        r = pl.allocate([f"{uuid[0]}::3"])
        e, m = envs(r), mounts(r)
        mem0 = gpus_of(node)[0]["memory_total_bytes"]
        tap.ok(e.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "25" and
               e.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == f"0={mem0 // 4 >> 20}M",
               "a 1-replica request is served: 25 % of the SMs and of the memory", e)
        client_caps(tap, build, node, e, m, mem0, mem0 // 4)
        # GPU 1's daemon sees it as its device 0 (CUDA_VISIBLE_DEVICES): the cap lands on GPU 1
        r1 = pl.allocate([f"{uuid[1]}::0"])
        mem1 = gpus_of(node)[1]["memory_total_bytes"]
        client_caps(tap, build, node, envs(r1), mounts(r1), mem1, mem1 // 4, dev=1)
        gpu = uuid[0]
        cdi = list(r.container_responses[0].cdi_devices)
        tap.ok([c.name for c in cdi] == [f"nvidia.com/gpu-shared={gpu}"] and
               "NVIDIA_VISIBLE_DEVICES" not in e and "/run/accel-mps/pipe" in m,
               "cdi strategy: the GPU's CDI name, with the MPS env and mounts", (cdi, e, m))
        try:
            with open(os.path.join(d, "cdi", "accel-nvidia.com-gpu-shared.json")) as f:
                spec = json.load(f)
        except (OSError, ValueError):
            spec = {}
        tap.ok(spec.get("kind") == "nvidia.com/gpu-shared" and
               sorted(x["name"] for x in spec.get("devices", [])) == sorted(uuid),
               "cdi strategy: a spec with one device per shared GPU", spec)
        w.cancel()
        pl.close()
        rc = agent.stop(signal.SIGTERM, timeout=T)
        tap.ok(rc == 0, "SIGTERM: exit 0", rc)
    finally:
        kubelet.stop()


def crash_run(tap, build, pb, tmp, control, agents):
    """acceld killed with -9 leaves its daemon running; the next acceld on the
    same state dir kills it and starts its own (else `-d` would refuse)."""
    cfg = FAIL_ONE_CONFIG.replace("renameByDefault: true", "renameByDefault: false")
    d, node, pdir, kubelet, agent = start(build, pb, tmp, "crash", cfg,
                                          extra=("--mps-control", control), gpus=1)
    agents.append(agent)
    state = os.path.join(d, "state")
    second = None
    try:
        pl = K.Plugin(pb, agent.sock)
        ok = K.wait_until(lambda: kubelet.count() >= 1, T)
        w = pl.watch() if ok else None
        up = w and w.wait_for(lambda u: len(u) == 4 and not unhealthy_gpus(u), T)
        old = daemon_pid(state, "gpu0-k1")
        if w:
            w.cancel()
        pl.close()
        agent.stop(signal.SIGKILL)
        tap.ok(up and old and alive(old), "acceld killed with -9: its daemon is left running",
               old)
        if not up:
            return
        second = K.Acceld(build, node, pdir, d, extra=("--mps-control", control),
                          config=os.path.join(d, "config.yaml"))
        agents.append(second)
        pl = K.Plugin(pb, second.sock, own_connection=True)
        ok = K.wait_until(lambda: kubelet.count() >= 2, T)
        w = pl.watch() if ok else None
        up = w and w.wait_for(lambda u: len(u) == 4 and not unhealthy_gpus(u), T)
        new = daemon_pid(state, "gpu0-k1")
        tap.ok(up and new != old and alive(new) and not alive(old),
               "the next acceld kills the stale daemon and serves with its own", (old, new))
        if w:
            w.cancel()
        pl.close()
        rc = second.stop(signal.SIGTERM, timeout=T)
        tap.ok(rc == 0 and K.wait_until(lambda: not alive(new), T),
               "SIGTERM: exit 0, its daemon stopped", rc)
    finally:
        kubelet.stop()


TS_CONFIG = """\
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 3
"""


def time_slicing_run(tap, build, pb, tmp, agents):
    d, node, pdir, kubelet, agent = start(build, pb, tmp, "ts", TS_CONFIG, gpus=2)
    agents.append(agent)
    uuid = [g["uuid"] for g in gpus_of(node)]
    try:
        ok = K.wait_until(lambda: kubelet.count() >= 1, T)
        tap.ok(ok and kubelet.last().resource_name == "nvidia.com/gpu",
               "time-slicing: nvidia.com/gpu registered")
        if not ok:
            return
        pl = K.Plugin(pb, agent.sock)
        w = pl.watch()
        want = {f"{u}::{n}" for u in uuid for n in range(3)}
        up = w.wait_for(lambda u: len(u) > 0, T)
        tap.ok(up is not None and set(up) == want and not unhealthy_gpus(up),
               "time-slicing: 3 replicas per GPU, Healthy at once (no daemon)",
               up and sorted(up))
        tap.ok(not os.path.exists(os.path.join(d, "state", "mps")), "no MPS daemon started")
        r = pl.allocate([f"{uuid[0]}::0", f"{uuid[0]}::1"])
        e = envs(r)
        tap.ok(e.get("NVIDIA_VISIBLE_DEVICES") == uuid[0] and
               not any(k.startswith("CUDA_MPS") for k in e) and not mounts(r) and
               "/dev/nvidia0" in nodes(r),
               "time-slicing: a 2-replica request gets the GPU, no MPS env or mounts", (e, nodes(r)))
        mark = len(w.updates)
        node.cmd("xid", 1, 79)
        down = w.wait_for(lambda u: unhealthy_gpus(u) == {uuid[1]}, T)
        tap.ok(down is not None and whole_gpu_updates(w, mark, uuid[1], 3),
               "time-slicing: XID 79 marks all 3 replicas of that GPU in one update", w.latest())
        w.cancel()
        pl.close()
        rc = agent.stop(signal.SIGTERM, timeout=T)
        tap.ok(rc == 0, "SIGTERM: exit 0", rc)
    finally:
        kubelet.stop()


def bad_config(tap, build, tmp):
    d = os.path.join(tmp, "bad")
    os.makedirs(d)
    node = K.Node(build, d, gpus=1, numa="0")
    cfg = write(os.path.join(d, "c.yaml"), "version: v1\nsharing:\n  mps:\n    bogus: 1\n")
    r = subprocess.run([os.path.join(build, "src/acceld/acceld"), "--config", cfg,
                        "--device-plugin-dir", d, "--no-register", "--sysfs-root", node.sysfs,
                        "--dev-root", node.dev, "--state-dir", os.path.join(d, "state")],
                       env=node.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=T)
    tap.ok(r.returncode == 2 and "bogus" in r.stdout and "c.yaml:4" in r.stdout,
           "an unknown key in the sharing section: exit 2 naming file, line and key",
           r.stdout[-800:])
    write(cfg, "mode: dra\nversion: v1\nsharing:\n  mps:\n    resources:\n"
               "    - {name: nvidia.com/gpu, replicas: 2}\n")
    r = subprocess.run([os.path.join(build, "src/acceld/acceld"), "--config", cfg,
                        "--device-plugin-dir", d, "--no-register", "--sysfs-root", node.sysfs,
                        "--dev-root", node.dev, "--state-dir", os.path.join(d, "state")],
                       env=node.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=T)
    tap.ok(r.returncode == 2 and "dra.sharing" in r.stdout,
           "mode dra with a sharing section: exit 2, pointing at dra.sharing", r.stdout[-800:])


if __name__ == "__main__":
    main()
